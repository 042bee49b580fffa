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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

TARGETS = {"p50_us": 2.0, "p99_us": 5.0}


def sulis_run(a, kind: str) -> dict:
    base = c.shm_dir("sulis-bench-ipcrtt-")
    ends = {"ping_channel": "aeron:ipc", "pong_channel": "aeron:ipc", "ping_stream": 1002, "pong_stream": 1003}
    driver = {"threading_mode": "shared", "idle_strategy": a.driver_idle, "ipc_term_buffer_length": "64m"}
    pin_ping, pin_pong = c.pins(0 if a.pin else None), c.pins(1 if a.pin else None)
    # Ping runs the driver (pinned after the driver thread started: that thread keeps the full mask).
    if kind == "py":
        poll = {"batch": a.poll_mode == "batch"}
        ping = c.py_role("sulis-ping", dir=f"{base}/driver", driver=driver, **ends, n=a.n, warmup=a.warmup, **poll,
                         **pin_ping)
        pong = lambda ready: c.py_role("sulis-pong", dir=ready["dir"], **ends, total=a.n + a.warmup,  # noqa: E731
                                       tight=True, **poll, **pin_pong)
    else:
        ping = c.native_role("ping", dir=f"{base}/driver", driver=driver, **ends, n=a.n, warmup=a.warmup, **pin_ping)
        pong = lambda ready: c.native_role("pong", dir=ready["dir"], **ends, total=a.n + a.warmup,  # noqa: E731
                                           **pin_pong)
    r = c.run_ping_pong(pong, ping, ping_first=True, dirs=[base])
    r["config"] = f"driver shared/{a.driver_idle}, clients spin" + (", pinned" if a.pin else "")
    return r


def peer_run(a, peer: str) -> dict:
    idle, pin = ("yield", False) if peer == "zenoh" else ("spin", a.pin and peer == "iceoryx2")
    r = c.peer_run(peer, "ipc", n=a.n, warmup=a.warmup, idle=idle, pin=pin)
    r["config"] = {"zmq": f"pyzmq {r.get('zmq')}, blocking recv",
                   "iceoryx2": f"iceoryx2 {r.get('iceoryx2')}, clients spin" + (", pinned" if pin else ""),
                   "zenoh": f"zenoh {r.get('zenoh')}, Unix socket, express, clients yield, not pinned"}[peer]
    return r


def aeron_run(a, name: str) -> dict:
    from bench.peers import aeron

    install = aeron.find(name)
    r = aeron.ipc_ping_pong(install, a.n, a.warmup)
    r["config"] = f"Aeron {install.version}, 1 JVM, DEDICATED driver, clients spin, p99 at 99.06 %"
    return r


def main(argv=None) -> int:
    ap = c.parser(__doc__, round_trips=True, only="python,native,zmq,iceoryx2,zenoh,aeron-1.15.1,aeron-current")
    ap.add_argument("--driver-idle", default="sleeping:10ms",
                    help="idle strategy of the embedded driver (default sleeping:10ms: it neither takes one of the "
                         "2 cores from ping or pong nor preempts them every millisecond as backoff does)")
    pin = ap.add_mutually_exclusive_group()
    pin.add_argument("--pin", dest="pin", action="store_true", default=None,
                     help="ping on CPU 0, pong on CPU 1 (default when there are 2+ CPUs)")
    pin.add_argument("--no-pin", dest="pin", action="store_false", help="let the scheduler place them")
    ap.add_argument("--poll-mode", choices=["handler", "batch"], default="handler",
                    help="how the Python ping/pong poll: sub.poll(handler, 1) (default) or sub.poll_batch(1)")
    a = ap.parse_args(argv)
    profile = c.require_release_build()
    c.settle(a, ap)
    a.pin = (os.cpu_count() or 1) >= 2 if a.pin is None else a.pin
    if a.pin and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs 2 CPUs")

    variants = c.build_native(c.select([
        ("python", "sulis Python ping-pong", lambda: sulis_run(a, "py")),
        ("native", "sulis native Rust ping-pong", lambda: sulis_run(a, "native")),
        ("zmq", "pyzmq REQ/REP ipc://", lambda: peer_run(a, "zmq")),
        ("iceoryx2", "iceoryx2 ping-pong (shm)", lambda: peer_run(a, "iceoryx2")),
        ("zenoh", "zenoh ping-pong unixsock-stream", lambda: peer_run(a, "zenoh")),
        ("aeron-1.15.1", "Aeron Java 1.15.1 EmbeddedPingPong ipc", lambda: aeron_run(a, "1.15.1")),
        ("aeron-current", "Aeron Java current EmbeddedPingPong ipc", lambda: aeron_run(a, "current")),
    ], a, ap), a.no_build)

    print(f"sulis IPC round trip, 32 B: {a.runs} round(s) of {a.n:,} round trips after {a.warmup:,} warm-up; "
          f"sulis {profile} build; {c.cpu_summary()}")
    print(f"sulis runs: driver shared/{a.driver_idle}, "
          f"{'ping on CPU 0, pong on CPU 1 (driver thread unpinned)' if a.pin else 'no CPU pinning'}, "
          f"Python polling with {'sub.poll(handler, 1)' if a.poll_mode == 'handler' else 'sub.poll_batch(1)'}")
    results, skipped, errors = c.run_rounds(variants, a, c.latency_line)
    med = c.report_latency(variants, results, skipped, errors,
                           "IPC round trip, 32 B, µs, median of the rounds (targets for sulis from Python: p50 <= 2, "
                           "p99 <= 5); 'x Py' = this row / sulis Python (> 1: slower than sulis Python):",
                           TARGETS, ("zmq", "iceoryx2", "zenoh", "aeron-1.15.1", "aeron-current"))
    return c.finish("ipc_latency", a, {"runs": a.runs, "n": a.n, "warmup": a.warmup, "message_length": 32,
                                       "driver_idle": a.driver_idle, "pinned": a.pin, "poll_mode": a.poll_mode},
                    variants, med, results, skipped, errors)


if __name__ == "__main__":
    sys.exit(c.main_guard(main))
