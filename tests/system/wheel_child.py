"""Run by the fresh virtual environment of test_wheel.py, outside the source tree: what a team does first with the
installed wheel, each step a JSON line ({"step": ..., ...}). argv[1]: a scratch directory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import sulis
import sulis.spark
from sulis.archive import ArchiveClient
from sulis.cluster import OFFER_AGAIN, ClusterClient, ClusteredService, ClusterNode

SCRATCH = sys.argv[1]


def say(step: str, **fields) -> None:
    print(json.dumps({"step": step, **fields}), flush=True)


def until(what: str, done, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (result := done()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)
    return result


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The package and its native parts come from the environment, not from a source tree.
say("installed", module=sulis.__file__, native=sulis._native.__file__, jar=sulis.spark.jar())

# The README's first example: an embedded driver, a publication and a subscription over IPC.
with sulis.MediaDriver(dir=os.path.join(SCRATCH, "embedded")) as driver:
    with sulis.Client(dir=driver.dir) as client:
        sub = client.add_subscription("aeron:ipc", 10)
        pub = client.add_publication("aeron:ipc", 10)
        until("the offer", lambda: pub.offer(b"hello"))
        got: list[bytes] = []
        until("the message", lambda: sub.poll(lambda buffer, header: got.append(bytes(buffer)), 10) > 0)
        say("quickstart", got=[g.decode() for g in got])

# `sulis driver` from the environment's bin directory, and a client of it.
driver_dir = os.path.join(SCRATCH, "cli-driver")
proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "sulis"), "driver", "--dir", driver_dir,
                         "--threading-mode", "shared"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
try:
    until("sulis driver's CnC file", lambda: os.path.exists(os.path.join(driver_dir, sulis.CNC_FILE)))
    with sulis.Client(dir=driver_dir) as client:
        sub = client.add_subscription("aeron:ipc", 11)
        pub = client.add_publication("aeron:ipc", 11)
        until("the offer", lambda: pub.offer(b"through sulis driver"))
        got = []
        until("the message", lambda: sub.poll(lambda buffer, header: got.append(bytes(buffer)), 10) > 0)
        say("cli-driver", got=[g.decode() for g in got])
finally:
    proc.terminate()
    proc.wait(30)


# A one-member cluster node with a Python service, and a client that gets its echo.
class Echo(ClusteredService):
    def on_session_message(self, cluster, session_id, timestamp, payload):
        while cluster.offer(session_id, payload) in OFFER_AGAIN:
            cluster.idle()


with sulis.MediaDriver(dir=os.path.join(SCRATCH, "cluster-driver"), threading_mode="shared") as driver:
    with sulis.Archive(os.path.join(SCRATCH, "cluster-archive"), driver_dir=driver.dir):
        port = free_port()
        members = f"0,localhost:{port},localhost:{free_port()},localhost:{free_port()},localhost:0,localhost:8010"
        with ClusterNode(Echo(), os.path.join(SCRATCH, "cluster"), driver.dir, cluster_members=members,
                         log_term_length="64k"):
            with ClusterClient(driver.dir, f"0=localhost:{port}",
                               f"aeron:udp?endpoint=localhost:{free_port()}") as c:
                until("the ingress", lambda: c.offer(b"ping") > 0)
                echoed: list[bytes] = []
                until("the echo", lambda: c.poll_egress(lambda payload, ts: echoed.append(payload), 10) >= 0
                      and echoed)
                say("cluster", echoed=[e.decode() for e in echoed])

# A recorded stream read by Spark through the JVM source (the jar and its native library from the wheel).
with sulis.MediaDriver(dir=os.path.join(SCRATCH, "spark-driver"), threading_mode="shared") as driver:
    with sulis.Archive(os.path.join(SCRATCH, "spark-archive"), driver_dir=driver.dir), \
            sulis.Client(dir=driver.dir) as client:
        ac = ArchiveClient(client)
        ac.start_recording("aeron:ipc", 20)
        pub = client.add_exclusive_publication("aeron:ipc", 20)
        rid = until("the recording", lambda: next((d.recording_id for d in ac.list_recordings_for_uri("aeron:ipc", 20)
                                                   if d.session_id == pub.session_id), None))
        for i in range(100):
            until("the offer", lambda i=i: pub.offer(f"m{i}".encode()))
        until("the archive to record it all", lambda: ac.get_recording_position(rid) >= pub.position)
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[2]").appName("sulis-wheel")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.jars", sulis.spark.jar()).getOrCreate())
        try:
            df = (spark.read.format(sulis.spark.JVM_FORMAT).option("driverDir", driver.dir)
                  .option("recordingIds", str(rid)).load())
            values = sorted(bytes(r.value).decode() for r in df.select("value").collect())
            say("spark", rows=len(values), first=values[0], last=values[-1])
        finally:
            spark.stop()
        ac.close()
