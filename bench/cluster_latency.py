#!/usr/bin/env python3
"""Cluster round trip and throughput: a sulis cluster beside an Aeron Java cluster of as many members.

    python bench/cluster_latency.py                # one member each, 3 runs of each row (~2 min)
    python bench/cluster_latency.py --members 3    # three members each, every member a process
    python bench/cluster_latency.py --quick        # 1 run, fewer messages (smoke test)

Each node is a process of its own on this machine: ``sulis cluster-node`` (driver, archive,
consensus module, and the echo service of bench/peers/cluster_echo.py: one Python call per message)
and Aeron's sample ``EchoServiceNode`` (a ClusteredMediaDriver and its EchoService, all Java, shared
threading). Each client is another process with a driver of its own, over UDP loopback: the sulis
Python client (``sulis.cluster.ClusterClient``) and Aeron's ``AeronCluster`` (bench/peers/ClusterPeer.java).
Every message goes client -> ingress -> log (recorded by the node's archive, committed) -> service ->
egress -> client. Rows, each the median of ``--runs`` runs:

* latency: one ``--length``-byte message at a time, the next sent when its echo is back; round trips
  in µs (``--count`` after ``--warmup``).
* throughput: ``--tput-count`` messages offered as fast as the cluster takes them, egress polled
  meanwhile; messages/s from the first offer to the last echo.
* batched (the first row): the echo service takes what the log holds in one Python call
  (``BatchedEcho``, ``--service-batch`` fragments at most) and answers with one ``offer_batch``; the
  client hands ``--batch`` messages to ``ClusterClient.offer_batch`` at once (as far as its exactly-once
  window of 16,384 takes them) and reads echoes with ``poll_egress_batch``. Its latency is a batch of one.
* fixed rates (``--rates``, the sulis Python client on the sulis, the durable sulis and the Aeron cluster):
  messages on a schedule for ``--rate-seconds`` each, each one's round trip from when it was due; the highest rate
  whose p99 stays under 1 ms. Between messages the client sleeps (``--client-park-us``) rather than
  spin: a spinning client takes one of this machine's two cores from the cluster it measures.

The sealed rows run the same sulis cluster with transport security on every driver, the client's included
(``security=encrypt``, one keyring): every consensus, log, catch-up, ingress and egress datagram sealed with
AES-256-GCM. ``--only sulis,sulis-sealed`` sets them side by side.

``--busy N`` runs N busy loops (``while True: pass``, normal priority) beside both clusters for the whole run: the
tail on a machine doing other work too (N = 2 puts two more runnable processes on this machine's two cores).

``--idle`` / ``--aeron-idle`` set every node thread's idle strategy (and the clients' drivers'), e.g.
``backoff:50us`` / ``sleep-ns``; ``--only sulis,aeron`` runs only those rows.

With ``--members 3`` every member is a process of its own on this machine (UDP over loopback between
them): a message is committed once a majority's archives recorded it. Beside them, clusters of as many
members of etcd 3.5 (a put of the message, from Python over etcd's HTTP/JSON gateway:
bench/peers/etcd.py) and PySyncObj (a replicated register written by one member's own process:
bench/peers/syncobj_node.py), each with a tenth of the messages (they are a hundred times slower).
The Aeron, etcd and PySyncObj rows need ``bash bench/peers/install.sh``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import sulis
from sulis._benchkit import runner as r
from sulis._benchkit.procs import cpu_summary, free_port, remove_dir, scratch_dir
from sulis._benchkit.report import print_table
from sulis.cluster import ClusterClient

r.repository(__file__)
from bench.peers import aeron as aeron_java  # noqa: E402
from bench.peers import etcd as etcd_peer  # noqa: E402
from bench.peers import syncobj_node  # noqa: E402

PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers")
AERON_INGRESS = 9002  # EchoServiceNode's ClusterConfig: node 0, port base 9000, client-facing offset 2


def stop_all(procs: list[subprocess.Popen], top: str | None = None) -> None:
    """SIGTERM, then SIGKILL after 30 s, every process; then removes ``top``."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    if top is not None:
        remove_dir(top)


def _tail(path: str, chars: int = 2000) -> str:
    """The end of a member's output file."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:]
    except OSError as e:
        return f"({path}: {e})"


def _check_members(procs: list[subprocess.Popen], logs: list[str], what: str) -> None:
    """Raises RuntimeError, with the end of its output, for the first member process that exited."""
    for i, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} member {i} (pid {proc.pid}) exited with status {proc.returncode}:\n"
                               f"{_tail(log)}")


def _await_line(path: str, text: str, proc: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with open(path, errors="replace") as f:
            if text in f.read():
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            with open(path, errors="replace") as f:
                raise RuntimeError(f"{what} did not start: {f.read()[-2000:]}")
        time.sleep(0.05)


class SulisNode:
    """``sulis cluster-node`` members with the echo service, each in its own process (its output in a file:
    a member of several logs its elections)."""

    def __init__(self, members: int = 1, extra: tuple[str, ...] = (), idle: str | None = None,
                 service: str = "cluster_echo:Echo", parent: str | None = None,
                 env_extra: dict | None = None) -> None:
        """``extra``: more ``sulis cluster-node`` flags (a flag given again takes the later value); ``idle``:
        the idle strategy of each member's driver, archive, consensus module and service (their default,
        Aeron's back-off, if None); ``service``: bench/peers/cluster_echo.py's ``Echo`` (a Python call per
        message) or ``BatchedEcho`` (a call per batch the log holds); ``parent``: where the members' directories
        go (a disk, for durable commits; /dev/shm if None); ``env_extra``: more environment of each member
        (``SULIS_SECURITY`` and ``SULIS_KEYRING_FILE`` for a sealed cluster)."""
        self.top = scratch_dir("sulis-bench-cluster-", parent)
        ports = [[free_port() for _ in range(4)] for _ in range(members)]  # ingress, consensus, log, archive
        spec = "|".join(f"{i},localhost:{p[0]},localhost:{p[1]},localhost:{p[2]},localhost:0,localhost:{p[3]}"
                        for i, p in enumerate(ports))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SULIS_")}
        env["PYTHONPATH"] = PEERS + os.pathsep + env.get("PYTHONPATH", "")
        if idle is not None:
            env.update(SULIS_IDLE_STRATEGY=idle, SULIS_ARCHIVE_IDLE_STRATEGY=idle, SULIS_CLUSTER_IDLE_STRATEGY=idle)
        env.update(env_extra or {})
        self.procs: list[subprocess.Popen] = []
        self.logs: list[str] = []
        self.cmds: list[list[str]] = []
        self.env = env
        try:
            for i in range(members):
                base = os.path.join(self.top, f"m{i}")
                os.makedirs(base)
                log = os.path.join(base, "stderr.txt")
                self.cmds.append([sys.executable, "-m", "sulis.cli", "cluster-node", "--service",
                                  service, "--cluster-dir", os.path.join(base, "cluster"),
                                  "--archive-dir", os.path.join(base, "archive"), "--dir",
                                  os.path.join(base, "driver"), "--cluster-members", spec,
                                  "--member-id", str(i), "--log-term-length", "16m", *extra])
                with open(log, "w") as err:
                    proc = subprocess.Popen(self.cmds[i], env=env, stderr=err, text=True)
                self.procs.append(proc)
                self.logs.append(log)
            for proc, log in zip(self.procs, self.logs, strict=True):
                _await_line(log, "running in", proc, "sulis cluster-node")
        except BaseException:
            stop_all(self.procs, self.top)
            raise
        self.endpoints = ",".join(f"{i}=localhost:{p[0]}" for i, p in enumerate(ports))

    def start(self, i: int) -> None:
        """Starts member ``i`` again on its directories (after it was killed); its output goes on in its file."""
        with open(self.logs[i], "a") as err:
            self.procs[i] = subprocess.Popen(self.cmds[i], env=self.env, stderr=err, text=True)

    @property
    def pids(self) -> list[int]:
        """The members' process ids (member 0's first: the leader of a one-member cluster)."""
        return [proc.pid for proc in self.procs]

    def check(self) -> None:
        """Raises RuntimeError, with the end of its output, if a member's process has exited."""
        _check_members(self.procs, self.logs, "sulis cluster-node")

    def close(self) -> None:
        stop_all(self.procs, self.top)


class AeronNode:
    """Aeron's EchoServiceNode members (its sample ClusterConfig: node i's ports from 9000 + 100 i), each in
    its own JVM."""

    def __init__(self, aeron, members: int = 1, extra: dict | None = None, idle: str | None = None) -> None:
        """``idle``: the idle strategy (Aeron's name, e.g. ``sleep-ns``) of each member's driver, archive and
        cluster (their default, back-off, if None)."""
        if idle is not None:
            extra = {"aeron.shared.idle.strategy": idle, "aeron.archive.idle.strategy": idle,
                     "aeron.cluster.idle.strategy": idle, **(extra or {})}
        self.top = scratch_dir("sulis-bench-aeron-cluster-")
        self.procs: list[subprocess.Popen] = []
        self.logs: list[str] = []
        try:
            self._start(aeron, members, extra, self.logs)
        except BaseException:
            stop_all(self.procs, self.top)
            raise
        self.endpoints = ",".join(f"{i}=localhost:{AERON_INGRESS + 100 * i}" for i in range(members))

    def _start(self, aeron, members: int, extra: dict | None, logs: list) -> None:
        for i in range(members):
            base = os.path.join(self.top, f"m{i}")
            os.makedirs(base)
            props = {"aeron.dir": os.path.join(base, "aeron"), "aeron.dir.delete.on.start": "true",
                     "aeron.threading.mode": "SHARED", "aeron.archive.threading.mode": "SHARED",
                     "aeron.cluster.tutorial.nodeId": str(i),
                     "aeron.cluster.tutorial.hostnames": ",".join(["localhost"] * members),
                     "aeron.cluster.ingress.channel": "aeron:udp",
                     "aeron.cluster.replication.channel": "aeron:udp?endpoint=localhost:0", "user.dir": base,
                     **(extra or {})}
            log = os.path.join(base, "out.txt")
            with open(log, "w") as out:
                self.procs.append(subprocess.Popen(
                    aeron_java.command(aeron, props, "io.aeron.samples.cluster.EchoServiceNode"), cwd=base,
                    stdout=out, stderr=subprocess.STDOUT, text=True))
            logs.append(log)
        for proc, log in zip(self.procs, logs, strict=True):
            _await_line(log, "Started Cluster Node", proc, "EchoServiceNode")

    @property
    def pids(self) -> list[int]:
        """The members' process ids (each a JVM: driver, archive, consensus module and service)."""
        return [proc.pid for proc in self.procs]

    def check(self) -> None:
        """Raises RuntimeError, with the end of its output, if a member's JVM has exited."""
        _check_members(self.procs, self.logs, "Aeron EchoServiceNode")

    def close(self) -> None:
        stop_all(self.procs, self.top)


def disk_device(path: str) -> str:
    """The device the file system holding ``path`` is on (``df``'s first column), e.g. /dev/vda or tmpfs."""
    out = subprocess.run(["df", "--output=source", path], capture_output=True, text=True).stdout.split()
    return out[-1] if out else "?"


def percentiles(samples_ns: list[int]) -> dict:
    s = sorted(samples_ns)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))] / 1000  # noqa: E731
    return {"p50_us": at(0.5), "p90_us": at(0.9), "p99_us": at(0.99), "p999_us": at(0.999), "max_us": s[-1] / 1000}


def sulis_client(endpoints: str, a, mode: str, exactly_once: bool = True, batched: bool = False,
                 sealed: dict | None = None) -> dict:
    """The sulis Python client on a driver of its own (this process): latency or throughput; exactly once
    (numbering and keeping its messages, with a sulis cluster) unless told not; ``batched``: messages handed
    over by ``offer_batch`` (``--batch`` at a time, as far as the exactly-once window takes them) and echoes
    read by ``poll_egress_batch``, a Python call per batch, not per message; ``sealed``: the driver's
    ``security`` and ``keyring_file`` (a sealed cluster's)."""
    shm = scratch_dir("sulis-bench-cluster-client-")
    try:
        idle = {} if a.idle is None else {"idle_strategy": a.idle}
        with sulis.MediaDriver(dir=os.path.join(shm, "driver"), threading_mode="shared", **idle,
                               **(sealed or {})) as driver:
            client = connect(driver.dir, endpoints, exactly_once=exactly_once)
            try:
                payload = bytes(a.length)
                got = [0]

                def on_echo(p, t):
                    got[0] += 1

                if mode.startswith("rate:"):
                    return at_rate(client, float(mode[5:]), a)
                if batched:
                    return batched_client(client, a, mode)
                if mode == "throughput":
                    t0 = time.perf_counter()
                    sent = 0
                    while sent < a.tput_count:
                        if client.offer(payload) > 0:
                            sent += 1
                        client.poll_egress(on_echo, 100)
                    while got[0] < a.tput_count:
                        client.poll_egress(on_echo, 100)
                    return {"msgs_per_s": a.tput_count / (time.perf_counter() - t0)}
                rtt = []
                for i in range(a.warmup + a.count):
                    before = got[0]
                    t0 = time.perf_counter_ns()
                    while client.offer(payload) < 0:
                        client.poll_egress(on_echo)
                    while got[0] == before:
                        client.poll_egress(on_echo)
                    if i >= a.warmup:
                        rtt.append(time.perf_counter_ns() - t0)
                return percentiles(rtt)
            finally:
                client.close()
    finally:
        remove_dir(shm)


def batched_client(client: ClusterClient, a, mode: str) -> dict:
    """Throughput: ``--tput-count`` messages offered ``--batch`` at a time by ``offer_batch`` (what the window
    does not take goes with the next call), echoes read by ``poll_egress_batch`` meanwhile. Latency: one message
    at a time through the same calls (a batch of one), the next sent when its echo is back."""
    if mode == "throughput":
        n = a.tput_count
        data = bytes(a.length * n)
        offsets = np.arange(0, a.length * (n + 1), a.length, dtype=np.int32)
        t0 = time.perf_counter()
        sent = got = 0
        while got < n:
            went = client.offer_batch(data, offsets[sent:min(n, sent + a.batch) + 1]) if sent < n else 0
            echoed = len(client.poll_egress_batch(4096))
            sent, got = sent + went, got + echoed
            if went == 0 and echoed == 0 and a.client_park_us > 0:
                # The window is full and nothing came back: give the core to the cluster (on 2 cores a spinning
                # client took 43 % of the CPU, 23 % in offer_batch refusing, from the members it measures).
                time.sleep(a.client_park_us / 1e6)
        return {"msgs_per_s": n / (time.perf_counter() - t0)}
    one = np.array([0, a.length], np.int32)
    payload = bytes(a.length)
    rtt = []
    for i in range(a.warmup + a.count):
        t0 = time.perf_counter_ns()
        while client.offer_batch(payload, one) == 0:
            client.poll_egress_batch(16)
        while len(client.poll_egress_batch(16)) == 0:
            pass
        if i >= a.warmup:
            rtt.append(time.perf_counter_ns() - t0)
    return percentiles(rtt)


def at_rate(client: ClusterClient, rate: float, a) -> dict:
    """Messages offered on a fixed schedule, ``rate`` a second for ``a.rate_seconds``; each one's latency
    from when it was due (not when it went: a cluster that falls behind is charged for the wait, no
    coordinated omission) to its echo, found by the sequence number it carries. The first half second at
    the rate warms up (a new client's first messages, Aeron's JIT) and is not counted."""
    warm = int(rate * 0.5)
    n = warm + max(100, int(rate * a.rate_seconds))
    pad = bytes(max(0, a.length - 8))
    interval = 1e9 / rate
    latency = np.zeros(n, np.int64)
    got = [0]
    start = time.perf_counter_ns() + 10_000_000

    def on_echo(p, t):
        seq = int.from_bytes(p[:8], "little")
        latency[seq] = time.perf_counter_ns() - (start + int(seq * interval))
        got[0] += 1

    sent, deadline = 0, time.monotonic() + a.rate_seconds + 60
    while got[0] < n:
        now = time.perf_counter_ns()
        while sent < n and start + sent * interval <= now:
            if client.offer(sent.to_bytes(8, "little") + pad) < 0:
                break  # back-pressured: offered again on the next pass, still charged from when it was due
            sent += 1
        if client.poll_egress(on_echo, 100) == 0 and a.client_park_us > 0:
            due = start + sent * interval - time.perf_counter_ns()
            if due > 0:  # nothing came and nothing is due: give the core back (on 2 cores it is half of them)
                time.sleep(min(due / 1e9, a.client_park_us / 1e6))
        if time.monotonic() > deadline:
            return {"error": f"{got[0]} of {n} echoed at {rate:.0f}/s"}
    return percentiles(latency[warm:].tolist())


def connect(driver_dir: str, endpoints: str, message_timeout: float = 2.0, exactly_once: bool = True) -> ClusterClient:
    """A session with the cluster at ``endpoints``, asked again for up to 60 s (its members may still be
    electing)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return ClusterClient(driver_dir, endpoints, f"aeron:udp?endpoint=localhost:{free_port()}",
                                 message_timeout=message_timeout, exactly_once=exactly_once)
        except sulis.cluster.ClusterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def aeron_driver(aeron, top: str, idle: str | None = None) -> tuple[subprocess.Popen, str]:
    """An Aeron Java media driver (shared threading) in ``top``/aeron, once it wrote its cnc.dat."""
    aeron_dir = os.path.join(top, "aeron")
    props = {"aeron.dir": aeron_dir, "aeron.dir.delete.on.start": "true", "aeron.threading.mode": "SHARED",
             **({} if idle is None else {"aeron.shared.idle.strategy": idle})}
    driver = subprocess.Popen(aeron_java.command(aeron, props, "io.aeron.driver.MediaDriver"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(aeron_dir, "cnc.dat")):
        if time.monotonic() > deadline:
            driver.kill()
            raise RuntimeError("Aeron's driver wrote no cnc.dat")
        time.sleep(0.05)
    return driver, aeron_dir


def aeron_client(aeron, endpoints: str, a, mode: str) -> dict:
    """Aeron's AeronCluster (ClusterPeer) with an Aeron Java driver of its own."""
    top = scratch_dir("sulis-bench-aeron-cluster-client-")
    driver = None
    try:
        driver, aeron_dir = aeron_driver(aeron, top, a.aeron_idle)
        cp = aeron_java.classpath(aeron, aeron_java.SOURCE.with_name("ClusterPeer.java"))
        count = a.tput_count if mode == "throughput" else a.count
        cmd = aeron_java.command(aeron, {"aeron.dir": aeron_dir}, "ClusterPeer", [
            mode, f"ingress_endpoints={endpoints}", f"egress=aeron:udp?endpoint=localhost:{free_port()}",
            f"count={count}", f"warmup={a.warmup}", f"length={a.length}"], cp)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            return {"error": f"ClusterPeer {mode} failed: {out.stdout[-300:]}{out.stderr[-300:]}"}
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        if driver is not None:
            driver.terminate()
            driver.wait(30)
        remove_dir(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--count", type=int, default=20_000, help="round trips measured per run")
    ap.add_argument("--warmup", type=int, default=5_000, help="round trips before measuring")
    ap.add_argument("--tput-count", type=int, default=100_000, help="messages per throughput run")
    ap.add_argument("--length", type=int, default=32, help="message length in bytes")
    ap.add_argument("--batch", type=int, default=4096, help="messages per offer_batch call (the batched rows)")
    ap.add_argument("--service-batch", type=int, default=4096,
                    help="log fragments the batched service takes a call (--service-log-fragment-limit)")
    ap.add_argument("--batched-service", default="cluster_echo:BatchedEcho",
                    help="the batched rows' service (bench/peers/cluster_echo.py: BatchedEcho, or Ledger with "
                         "--length 32, a user's batched service with state)")
    ap.add_argument("--members", type=int, default=1, choices=(1, 3, 5), help="members of each cluster")
    ap.add_argument("--rates", default="1000,5000,10000,20000,40000",
                    help="fixed rates (msgs/s) at which the sulis Python client measures each cluster's round trip")
    ap.add_argument("--rate-seconds", type=float, default=2.0, help="seconds at each fixed rate")
    ap.add_argument("--quick", action="store_true", help="one run of fewer messages")
    ap.add_argument("--idle", help="idle strategy of every sulis thread, nodes' and clients' drivers (e.g. "
                                   "backoff:50us; default: back-off parking up to 1 ms, Aeron's default)")
    ap.add_argument("--aeron-idle", help="the same for Aeron's nodes and Aeron clients' drivers (e.g. sleep-ns)")
    ap.add_argument("--client-park-us", type=float, default=100.0,
                    help="at fixed rates, the client sleeps up to this long when nothing came and nothing is due "
                         "(0: it spins, taking a core from the cluster)")
    ap.add_argument("--only", help="comma-separated row kinds to run: sulis, sulis-batched, sulis-durable, "
                                   "sulis-sealed, sulis-batched-sealed, aeron, etcd, pysyncobj")
    ap.add_argument("--busy", type=int, default=0, help="busy loops beside the clusters for the whole run")
    ap.add_argument("--disk", default=tempfile.gettempdir(),
                    help="a directory on a disk: the durable sulis row's members and etcd's data directories (the "
                         "others are in /dev/shm); default %(default)s")
    a = ap.parse_args()
    r.require_release_build()
    if a.quick:
        a.runs, a.count, a.warmup, a.tput_count, a.rate_seconds = 1, 2_000, 500, 20_000, 0.5
    rates = [float(x) for x in a.rates.split(",") if x.strip()]
    why: dict[str, str] = {}
    try:
        aeron = aeron_java.find("current")
    except aeron_java.Missing as e:
        aeron, why["aeron"] = None, str(e)
    try:
        etcd_version = etcd_peer.version()
    except etcd_peer.Missing as e:
        etcd_version, why["etcd"] = None, str(e)
    syncobj_version = syncobj_node.version()
    if syncobj_version is None:
        why["pysyncobj"] = "PySyncObj is not installed (bash bench/peers/install.sh)"
    kinds = {"sulis", "sulis-batched", "sulis-durable", "sulis-sealed", "sulis-batched-sealed", "aeron", "etcd",
             "pysyncobj"}
    only = set(a.only.split(",")) if a.only else kinds
    for kind in kinds - only:
        why[kind] = "not asked for (--only)"
    if "aeron" not in only:
        aeron = None
    print(f"[cluster] {cpu_summary()}; {a.members} member(s) each; {a.length} B messages; client and each "
          f"member a process; {a.busy} busy loop(s) beside them")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    try:
        return rows(a, rates, why, only, aeron, etcd_version, syncobj_version)
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()


def rows(a, rates, why, only, aeron, etcd_version, syncobj_version) -> int:
    """Runs and prints the rows (``main``'s body, with the busy loops, if any, beside it)."""
    # The sealed rows: every driver (members' and client's) seals every datagram with AES-256-GCM
    # (security=encrypt), one keyring for all: consensus, log, catch-up, archive, ingress and egress channels.
    keys = scratch_dir("sulis-bench-cluster-keys-")
    ring = os.path.join(keys, "keyring")
    with open(os.open(ring, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(f"1 {os.urandom(32).hex()}\n")
    sealed = {"security": "encrypt", "keyring_file": ring}
    sealed_env = {"SULIS_SECURITY": "encrypt", "SULIS_KEYRING_FILE": ring}
    try:
        return _rows(a, rates, why, only, aeron, etcd_version, syncobj_version, sealed, sealed_env)
    finally:
        remove_dir(keys)


def _rows(a, rates, why, only, aeron, etcd_version, syncobj_version, sealed, sealed_env) -> int:
    """``rows`` with the sealed rows' driver options and member environment."""
    at_rates: dict[tuple[str, float], list] = {}
    disk = f"{a.disk} ({disk_device(a.disk)})"
    rows_spec = [("sulis node, batched service, batched sulis Python client", "sulis-batched", "sulis-batched"),
                 ("sulis node sealed (security=encrypt), batched service and client", "sulis-batched-sealed",
                  "sulis-batched-sealed"),
                 (f"sulis node durable (file_sync_level 1, on {disk}), batched service and client", "sulis-durable",
                  "sulis-batched"),
                 ("sulis node, sulis Python client", "sulis", "sulis"),
                 ("sulis node sealed (security=encrypt), sulis Python client", "sulis-sealed", "sulis-sealed"),
                 ("sulis node, sulis Python client, exactly_once=False", "sulis", "sulis-plain"),
                 ("sulis node, Aeron Java client", "sulis", "aeron"),
                 ("Aeron node, Aeron Java client", "aeron", "aeron"),
                 ("Aeron node, sulis Python client", "aeron", "sulis"),
                 (f"etcd {etcd_version or ''} (on {disk}), Python HTTP client (1/10 msgs)", "etcd", "etcd"),
                 (f"PySyncObj {syncobj_version or ''}, client in a member (1/10 msgs)", "pysyncobj", "pysyncobj")]
    results: dict[str, dict[str, list]] = {name: {"latency": [], "throughput": []} for name, _, _ in rows_spec}
    # etcd and PySyncObj take a tenth of the messages: a hundred times slower, the full counts would take minutes.
    tenth = argparse.Namespace(**{**vars(a), "count": max(200, a.count // 10), "warmup": max(50, a.warmup // 10),
                                  "tput_count": max(1000, a.tput_count // 10)})
    for _ in range(a.runs):
        for name, kind, _ in rows_spec:
            if kind not in ("etcd", "pysyncobj") or kind in why:
                continue
            if kind == "etcd":
                etcd = etcd_peer.EtcdCluster(a.members, a.disk)
                try:
                    for mode in ("latency", "throughput"):
                        results[name][mode].append(etcd_peer.run(etcd, tenth, mode, percentiles))
                finally:
                    etcd.close()
            else:
                top = scratch_dir("sulis-bench-pysyncobj-")
                try:
                    got = syncobj_node.run(a.members, tenth, top, free_port)
                finally:
                    remove_dir(top)
                for mode in ("latency", "throughput"):
                    results[name][mode].append(got.get(mode, got))
        batched = ("--service-log-fragment-limit", str(a.service_batch))
        for node_kind in ("sulis-batched", "sulis-batched-sealed", "sulis-durable", "sulis", "sulis-sealed", "aeron"):
            if (node_kind == "aeron" and aeron is None) or node_kind not in only:
                continue
            node = (SulisNode(a.members, idle=a.idle) if node_kind == "sulis"
                    else SulisNode(a.members, idle=a.idle, env_extra=sealed_env) if node_kind == "sulis-sealed"
                    else SulisNode(a.members, batched, a.idle, a.batched_service)
                    if node_kind == "sulis-batched"
                    else SulisNode(a.members, batched, a.idle, a.batched_service, env_extra=sealed_env)
                    if node_kind == "sulis-batched-sealed"
                    else SulisNode(a.members, (*batched, "--file-sync-level", "1"), a.idle, a.batched_service,
                                   parent=a.disk) if node_kind == "sulis-durable"
                    else AeronNode(aeron, a.members, idle=a.aeron_idle))
            try:
                for name, n, c in rows_spec:
                    if n != node_kind or (c == "aeron" and aeron is None):
                        continue
                    for mode in ("latency", "throughput"):
                        run = (sulis_client if c == "sulis"
                               else (lambda e, a_, m: sulis_client(e, a_, m, sealed=sealed)) if c == "sulis-sealed"
                               else (lambda e, a_, m: sulis_client(e, a_, m, batched=True)) if c == "sulis-batched"
                               else (lambda e, a_, m: sulis_client(e, a_, m, batched=True, sealed=sealed))
                               if c == "sulis-batched-sealed"
                               else (lambda e, a_, m: sulis_client(e, a_, m, exactly_once=False)) if c == "sulis-plain"
                               else (lambda e, a_, m: aeron_client(aeron, e, a_, m)))
                        results[name][mode].append(run(node.endpoints, a, mode))
                for rate in rates if node_kind in ("sulis", "sulis-durable", "aeron") else ():
                    at_rates.setdefault((node_kind, rate), []).append(sulis_client(node.endpoints, a, f"rate:{rate}"))
            finally:
                node.close()
    med = statistics.median
    table = []
    for name, node_kind, client_kind in rows_spec:
        failed = [x["error"] for mode in ("latency", "throughput") for x in results[name][mode] if "error" in x]
        lat = [x for x in results[name]["latency"] if "error" not in x]
        tput = [x for x in results[name]["throughput"] if "error" not in x]
        if not lat or not tput:
            reason = why.get(node_kind) or why.get(client_kind, "")
            table.append([name, f"failed: {failed[0]}" if failed else f"skipped: {reason}"] + [""] * 5)
            continue
        if failed:
            print(f"[cluster] {name}: {len(failed)} failed run(s), left out: {failed[0]}")
        cell = lambda k, lat=lat: f"{med(x[k] for x in lat):.1f}"  # noqa: E731
        table.append([name, cell("p50_us"), cell("p90_us"), cell("p99_us"), cell("p999_us"),
                      f"{med(x['msgs_per_s'] for x in tput):,.0f}",
                      ", ".join(f"{x['msgs_per_s']:,.0f}" for x in tput)])
    print_table(["row", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "msgs/s", "runs, msgs/s"], table)
    if at_rates:
        print(f"\n[cluster] round trips at fixed rates, the sulis Python client on each cluster (µs from when each "
              f"message was due; medians of {a.runs} run(s))")
        rate_table, best = [], {}
        for (kind, rate), runs in sorted(at_rates.items()):
            ok = [x for x in runs if "error" not in x]
            if not ok:
                rate_table.append([kind, f"{rate:,.0f}", f"failed: {runs[0]['error']}", "", ""])
                continue
            p99 = med(x["p99_us"] for x in ok)
            rate_table.append([kind, f"{rate:,.0f}", f"{med(x['p50_us'] for x in ok):.1f}", f"{p99:.1f}",
                               f"{med(x['p999_us'] for x in ok):.1f}"])
            if p99 < 1000 and len(ok) == len(runs):
                best[kind] = max(best.get(kind, 0.0), rate)
        print_table(["cluster", "msgs/s", "p50 µs", "p99 µs", "p99.9 µs"], rate_table)
        for kind in sorted({k for k, _ in at_rates}):
            print(f"[cluster] {kind}: highest rate tried with p99 under 1 ms: "
                  + (f"{best[kind]:,.0f} msgs/s" if kind in best else "none"))
    # Each system with its own client: how many times its writes per second sulis's are.
    tputs = {kind: med(ok) for name, kind, client in rows_spec if client == kind
             if (ok := [x["msgs_per_s"] for x in results[name]["throughput"] if "error" not in x])}
    for name, kind, client in rows_spec:
        ok = [x["msgs_per_s"] for x in results[name]["throughput"] if "error" not in x]
        if kind.startswith("sulis") and client != "aeron" and ok and any(not k.startswith("sulis") for k in tputs):
            print(f"[cluster] {name}, writes/s: " + ", ".join(
                f"{med(ok) / v:.1f}x {k}'s" for k, v in tputs.items() if not k.startswith("sulis")))
    # Sealed against plain, the same cluster and client otherwise: throughput ratio and p50 difference.
    p50s = {kind: med(x["p50_us"] for x in lat) for name, kind, client in rows_spec if client == kind
            if (lat := [x for x in results[name]["latency"] if "error" not in x])}
    for plain in ("sulis", "sulis-batched"):
        sealed = f"{plain}-sealed"
        if all(k in tputs and k in p50s for k in (plain, sealed)):
            print(f"[cluster] {sealed} against {plain}: throughput {tputs[sealed] / tputs[plain]:.2f}x, "
                  f"p50 {p50s[sealed] - p50s[plain]:+.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
