#!/usr/bin/env python3
"""How long a cluster's clients wait when its leader dies: three members, the leader SIGKILLed, sulis and Aeron.

    python bench/cluster_failover.py              # 5 kills with each setting (~2 min)
    python bench/cluster_failover.py --runs 10

Three ``sulis cluster-node`` processes on this machine (UDP over loopback), the echo service of
bench/peers/cluster_echo.py, and the sulis Python client on a driver of its own, sending one message at a
time and offering it again every 50 ms until it is echoed. Once 200 messages went round, the leader is
killed with SIGKILL; the figure is the time from the kill to the first echo of a message from the member
the others elected (the client follows the NewLeaderEvent by itself). Each setting runs ``--runs`` times
on fresh members; the table gives the median and the worst:

* tuned: leader heartbeat interval 50 ms, heartbeat timeout 500 ms, election timeout 200 ms;
* Aeron's defaults, as sulis's: interval 200 ms, timeout 10 s, election timeout 1 s.

Beside them, the same with Aeron Java 1.51: three of its sample ``EchoServiceNode`` (each a JVM, shared
threading) and its ``AeronCluster`` client (bench/peers/ClusterPeer.java ``failover``, offering again
every 50 ms too), the same settings as Aeron's properties. Those rows need ``bash bench/peers/install.sh``.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import sulis
from sulis._benchkit import runner as r
from sulis._benchkit.procs import cpu_summary, free_port, remove_dir, scratch_dir
from sulis._benchkit.report import print_table
from sulis.cluster import ClusterClient

r.repository(__file__)
from bench.cluster_latency import AeronNode, SulisNode, aeron_driver, aeron_java, connect  # noqa: E402

SETTINGS = {
    "tuned": ["--leader-heartbeat-interval", "50ms", "--leader-heartbeat-timeout", "500ms",
              "--election-timeout", "200ms", "--election-status-interval", "20ms"],
    "defaults": [],
}
AERON_SETTINGS = {
    "tuned": {"aeron.cluster.leader.heartbeat.interval": "50ms", "aeron.cluster.leader.heartbeat.timeout": "500ms",
              "aeron.cluster.election.timeout": "200ms", "aeron.cluster.election.status.interval": "20ms"},
    "defaults": {},
}


def echo(client: ClusterClient, payload: bytes, timeout: float = 60.0) -> None:
    """Offers ``payload`` (again every 50 ms) until its echo is back."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    offered_at = 0.0
    while payload not in got:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no echo of {payload!r} within {timeout} s")
        if time.monotonic() - offered_at > 0.05 and client.offer(payload) > 0:
            offered_at = time.monotonic()
        if client.poll_egress(lambda p, t: got.append(p)) == 0:
            time.sleep(0.0002)


def one_failover(timings: list[str]) -> float:
    top = scratch_dir("sulis-bench-failover-")
    members = None
    try:
        members = SulisNode(3, ("--log-term-length", "1m", "--startup-canvass-timeout", "5s", *timings))
        with sulis.MediaDriver(dir=os.path.join(top, "client-driver"), threading_mode="shared") as driver:
            client = connect(driver.dir, members.endpoints, message_timeout=5.0)
            try:
                for i in range(200):
                    echo(client, b"before-%d" % i)
                leader = client.leader_member_id
                killed = time.monotonic()
                os.kill(members.procs[leader].pid, signal.SIGKILL)
                members.procs[leader].wait(timeout=10)
                echo(client, b"after")
                waited = time.monotonic() - killed
                if client.leader_member_id == leader:
                    raise RuntimeError("the echo after the kill came from the killed leader")
                return waited
            finally:
                client.close()
    finally:
        if members is not None:
            members.close()
        remove_dir(top)


def one_aeron_failover(aeron, props: dict) -> float:
    """The same with Aeron's nodes and client: the client's time from the kill to its first echo."""
    top = scratch_dir("sulis-bench-aeron-failover-")
    nodes = driver = peer = None
    try:
        nodes = AeronNode(aeron, 3, props)
        driver, aeron_dir = aeron_driver(aeron, top)
        cp = aeron_java.classpath(aeron, aeron_java.SOURCE.with_name("ClusterPeer.java"))
        cmd = aeron_java.command(aeron, {"aeron.dir": aeron_dir, "aeron.cluster.message.timeout": "30s"},
                                 "ClusterPeer", ["failover", f"ingress_endpoints={nodes.endpoints}",
                                                 f"egress=aeron:udp?endpoint=localhost:{free_port()}", "count=200",
                                                 "resend_ms=50"], cp)
        peer = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        first = json.loads(peer.stdout.readline() or '{"error": "no output"}')
        if first.get("errors", 1) != 0:
            raise RuntimeError(f"Aeron's client before the kill: {first} {peer.stderr.read()[-2000:]}")
        nodes.procs[first["leader_member_id"]].kill()
        peer.stdin.write("go\n")
        peer.stdin.flush()
        out, err = peer.communicate(timeout=300)
        second = json.loads(out.strip().splitlines()[-1])
        if peer.returncode != 0 or second["leader_member_id"] == first["leader_member_id"]:
            raise RuntimeError(f"Aeron's client after the kill: {second} {err[-2000:]}")
        return second["follow_ms"] / 1000
    finally:
        if peer is not None and peer.poll() is None:
            peer.kill()
        if driver is not None:
            driver.terminate()
            driver.wait(30)
        if nodes is not None:
            nodes.close()
        remove_dir(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    r.require_release_build()
    print(f"[failover] {cpu_summary()}; 3 members, each a process; the leader SIGKILLed after 200 round trips")
    try:
        aeron, why = aeron_java.find("current"), ""
    except aeron_java.Missing as e:
        aeron, why = None, str(e)
    table = []
    for name, timings in SETTINGS.items():
        rows = [("sulis", lambda timings=timings: one_failover(timings))]
        if aeron is not None:
            rows.append(("Aeron", lambda name=name: one_aeron_failover(aeron, AERON_SETTINGS[name])))
        for system, run in rows:
            waits = [run() for _ in range(a.runs)]
            print(f"[failover] {system} {name}: " + ", ".join(f"{w * 1000:.0f}" for w in waits) + " ms")
            table.append([system, name, f"{statistics.median(waits) * 1000:,.0f}", f"{max(waits) * 1000:,.0f}",
                          str(a.runs)])
        if aeron is None:
            table.append(["Aeron", name, f"skipped: {why}", "", ""])
    print_table(["cluster", "setting", "median ms", "worst ms", "kills"], table)
    return 0


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
