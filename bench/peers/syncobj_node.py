"""PySyncObj beside the sulis cluster (bench/cluster_latency.py): ``run`` starts a PySyncObj cluster of n
members, each a process of this script, its state a replicated register holding the last message.
PySyncObj has no client protocol: its users call the replicated methods of the object in their own
process, so one member (``--bench``) is also the client and prints one JSON line of figures.

A write returns once the leader committed it (a majority logged it) and the member applied it. The
journals (``journalFile``) are under /dev/shm, as the sulis members' archives are in the benchmark.
PySyncObj is tuned for latency (its defaults, a tick every 50 ms and entries sent every 100 ms, make a
write take about 100 ms), and the client's member stands for election first, so it leads, as sulis's
and Aeron's clients talk to their leader. ``bash bench/peers/install.sh`` installs it.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time


def version() -> str | None:
    """PySyncObj's version, None when it is not installed."""
    if importlib.util.find_spec("pysyncobj") is None:
        return None
    from importlib.metadata import version as v

    return v("pysyncobj")


def run(members: int, a, top: str, free_port) -> dict:
    """A fresh cluster of ``members`` in ``top``: round trips of one write at a time (``a.count`` after
    ``a.warmup``), then ``a.tput_count`` writes with at most 2,000 unanswered. ``{"latency": {...},
    "throughput": {...}}`` or ``{"error": ...}``."""
    addrs = [f"127.0.0.1:{free_port(tcp=True)}" for _ in range(members)]
    procs = []

    def cmd(i: int) -> list[str]:
        return [sys.executable, os.path.abspath(__file__), "--self", addrs[i], "--others",
                ",".join(x for x in addrs if x != addrs[i]), "--journal", os.path.join(top, f"journal-{i}")]
    try:
        for i in range(1, members):
            procs.append(subprocess.Popen(cmd(i), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        out = subprocess.run([*cmd(0), "--bench", "--count", str(a.count), "--warmup", str(a.warmup),
                              "--tput-count", str(a.tput_count), "--length", str(a.length)],
                             capture_output=True, text=True, timeout=900)
        lines = out.stdout.strip().splitlines()
        if out.returncode != 0 or not lines:
            return {"error": f"PySyncObj member exited {out.returncode}: {out.stderr[-300:]}"}
        return json.loads(lines[-1])
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def _register(me: str, others: list[str], journal: str, first: bool):
    from pysyncobj import SyncObj, SyncObjConf, replicated

    class Register(SyncObj):
        def __init__(self) -> None:
            timeouts = {"raftMinTimeout": 0.05, "raftMaxTimeout": 0.1} if first else {}
            super().__init__(me, others, SyncObjConf(journalFile=journal, dynamicMembershipChange=False,
                                                     autoTickPeriod=0.001, appendEntriesPeriod=0.01, **timeouts))
            self.value = b""

        @replicated
        def put(self, value: bytes) -> None:
            self.value = value

    return Register()


def latency(obj, a) -> dict:
    payload, rtt = bytes(a.length), []
    for i in range(a.warmup + a.count):
        t0 = time.perf_counter_ns()
        obj.put(payload, sync=True, timeout=30)
        if i >= a.warmup:
            rtt.append(time.perf_counter_ns() - t0)
    s = sorted(rtt)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))] / 1000  # noqa: E731
    return {"p50_us": at(0.5), "p90_us": at(0.9), "p99_us": at(0.99), "p999_us": at(0.999), "max_us": s[-1] / 1000}


def throughput(obj, a, window: int = 2000) -> dict:
    payload, done, failed = bytes(a.length), [0], []
    cond = threading.Condition()

    def answered(result, error) -> None:
        with cond:
            done[0] += 1
            if error:
                failed.append(error)
            cond.notify()

    t0 = time.perf_counter()
    for sent in range(a.tput_count):
        with cond:
            cond.wait_for(lambda sent=sent: sent - done[0] < window, timeout=30)
        obj.put(payload, callback=answered)
    with cond:
        cond.wait_for(lambda: done[0] >= a.tput_count, timeout=120)
    elapsed = time.perf_counter() - t0
    if failed or done[0] < a.tput_count:
        return {"error": f"PySyncObj: {len(failed)} writes failed (code {failed[:1]}), {done[0]} answered"}
    return {"msgs_per_s": a.tput_count / elapsed}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--self", dest="me", required=True)
    ap.add_argument("--others", required=True)
    ap.add_argument("--journal", required=True)
    ap.add_argument("--bench", action="store_true", help="be the client too: measure, print JSON, exit")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--tput-count", type=int, default=20000)
    ap.add_argument("--length", type=int, default=32)
    a = ap.parse_args()
    obj = _register(a.me, [x for x in a.others.split(",") if x], a.journal, first=a.bench)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + 60
    while not (obj.isReady() and obj._getLeader() is not None):
        if time.monotonic() > deadline:
            print(json.dumps({"error": "PySyncObj elected no leader in 60 s"}), flush=True)
            return 1
        time.sleep(0.05)
    if not a.bench:
        stop.wait()
    else:
        result = {"latency": latency(obj, a), "throughput": throughput(obj, a), "leader": obj._isLeader()}
        print(json.dumps(result), flush=True)
    obj.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
