#!/usr/bin/env python3
"""IPC round-trip latency of sulis from Python beside its peers, 32 bytes, one command.

    python bench/ipc_latency.py            # 3 rounds of 100k round trips (+10k warm-up)
    python bench/ipc_latency.py --quick    # 1 short round (smoke test)

Rows: sulis from Python and native Rust (ping with the driver, pong a client of it, pinned to CPUs
0 and 1 by default), pyzmq REQ/REP, iceoryx2, zenoh, Aeron Java 1.15.1 and current EmbeddedPingPong
(one JVM); HdrHistogram percentiles, medians over the rounds; targets for sulis from Python: p50 <=
2 µs, p99 <= 5 µs. bench/README.md says what each row runs.
"""
from __future__ import annotations

import os
import sys

from sulis._benchkit import runner as r
from sulis._benchkit.procs import pins, scratch_dir

r.repository(__file__)
from bench.peers import aeron  # noqa: E402


def sulis_run(a, kind: str) -> dict:
    """Ping runs the driver (pinned after the driver thread started: that thread keeps the full
    mask), pong is a client of it."""
    base = scratch_dir("sulis-bench-ipcrtt-")
    ends = {"ping_channel": "aeron:ipc", "pong_channel": "aeron:ipc", "ping_stream": 1002, "pong_stream": 1003,
            **({"batch": a.poll_mode == "batch"} if kind == "py" else {})}
    driver = {"threading_mode": "shared", "idle_strategy": a.driver_idle, "ipc_term_buffer_length": "64m"}
    ping = r.sulis_role(kind, "ping", dir=f"{base}/driver", driver=driver, **ends, n=a.n, warmup=a.warmup,
                        **pins(0 if a.pin else None))
    pong = lambda ready: r.sulis_role(kind, "pong", dir=ready["dir"], **ends, total=a.n + a.warmup,  # noqa: E731
                                      **({"tight": True} if kind == "py" else {}), **pins(1 if a.pin else None))
    res = r.run_ping_pong(pong, ping, ping_first=True, dirs=[base])
    res["config"] = f"driver shared/{a.driver_idle}, clients spin" + (", pinned" if a.pin else "")
    return res


def aeron_run(a, name: str) -> dict:
    install = aeron.find(name)
    res = aeron.ipc_ping_pong(install, a.n, a.warmup)
    res["config"] = f"Aeron {install.version}, 1 JVM, DEDICATED driver, clients spin, p99 at 99.06 %"
    return res


def main(argv=None) -> int:
    ap = r.parser(__doc__, round_trips=True, only="python,native,zmq,iceoryx2,zenoh,aeron-1.15.1,aeron-current")
    ap.add_argument("--driver-idle", default="sleeping:10ms",
                    help="idle strategy of the embedded driver (default sleeping:10ms: it neither takes one of the "
                         "2 cores from ping or pong nor preempts them every millisecond as backoff does)")
    pin = ap.add_mutually_exclusive_group()
    pin.add_argument("--pin", dest="pin", action="store_true", default=(os.cpu_count() or 1) >= 2,
                     help="ping on CPU 0, pong on CPU 1 (default when there are 2+ CPUs)")
    pin.add_argument("--no-pin", dest="pin", action="store_false", help="let the scheduler place them")
    ap.add_argument("--poll-mode", choices=["handler", "batch"], default="handler",
                    help="how the Python ping/pong poll: sub.poll(handler, 1) (default) or sub.poll_batch(1)")
    a = r.parse(ap, argv)
    n, w = a.n, a.warmup
    rows = [("python", "sulis Python ping-pong", lambda: sulis_run(a, "py")),
            ("native", "sulis native Rust ping-pong", lambda: sulis_run(a, "native")),
            ("zmq", "pyzmq REQ/REP ipc://", lambda: r.peer_run("zmq", "ipc", n=n, warmup=w)),
            ("iceoryx2", "iceoryx2 ping-pong (shm)",
             lambda: r.peer_run("iceoryx2", "ipc", n=n, warmup=w, pin=a.pin)),
            # Every zenoh message goes through its own I/O threads, which spinning, pinned clients starve.
            ("zenoh", "zenoh ping-pong unixsock-stream",
             lambda: r.peer_run("zenoh", "ipc", n=n, warmup=w, idle="yield")),
            *((f"aeron-{v}", f"Aeron Java {v} EmbeddedPingPong ipc", lambda v=v: aeron_run(a, v))
              for v in aeron.INSTALLS)]
    poll = "sub.poll(handler, 1)" if a.poll_mode == "handler" else "sub.poll_batch(1)"
    return r.compare("ipc_latency", a, ap, rows, title=(
        f"sulis IPC round trip, 32 B: {a.runs} round(s) of {n:,} round trips after {w:,} warm-up"), config=[
        f"sulis runs: driver shared/{a.driver_idle}, "
        f"{'ping on CPU 0, pong on CPU 1 (driver thread unpinned)' if a.pin else 'no CPU pinning'}, Python polling "
        f"with {poll}"],
        heading="IPC round trip, 32 B, µs, median of the rounds (targets for sulis from Python: p50 <= 2, p99 <= 5); "
                "'x Py' = this row / sulis Python (> 1: slower than sulis Python):",
        latency_targets={"p50_us": 2.0, "p99_us": 5.0},
        compare_with=("zmq", "iceoryx2", "zenoh", "aeron-1.15.1", "aeron-current"),
        settings={"n": n, "warmup": w, "message_length": 32, "driver_idle": a.driver_idle, "pinned": a.pin,
                  "poll_mode": a.poll_mode})


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
