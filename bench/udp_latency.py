#!/usr/bin/env python3
"""UDP round-trip latency of sulis beside its peers, 32 bytes over loopback, one command.

    python bench/udp_latency.py            # 3 rounds of 100k round trips (+10k warm-up)
    python bench/udp_latency.py --quick    # 1 short round (smoke test)

Ping and pong are two processes with a media driver each and a channel per direction. Rows: sulis
from Python and native Rust, raw UDP sockets from Python (the floor), pyzmq and zenoh over TCP, Aeron
Java 1.15.1 and current (AeronPeer; ``--aeron-samples``: Aeron's Ping/Pong too); the configuration
(driver idle, client wait, pinning) beside each figure. Target for sulis from Python: p99 <= 15 µs.
bench/README.md says what each row runs.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

HOST = "127.0.0.1"
DEFAULT_CHANNEL_PARAMS = "mtu=1408"
VARIANTS = "python,native,raw,zmq,zenoh,aeron-1.15.1,aeron-current,aeron-1.15.1-samples,aeron-current-samples"


def describe(a) -> str:
    return (f"drivers {a.threading}/{a.driver_idle}, clients {a.client_idle}, pin {a.pin}, "
            f"{a.channel_params or 'no channel params'}")


def channels(channel) -> dict:
    """The two channels (``channel(port)``) and streams of a run, on two free ports."""
    ping, pong = c.two_free_ports(HOST)
    return {"ping_channel": channel(ping), "ping_stream": 1002, "pong_channel": channel(pong), "pong_stream": 1003}


def sulis_run(a, kind: str) -> dict:
    """Pong first (its driver binds the ping channel), then ping (its driver binds the pong channel)."""
    base = c.shm_dir("sulis-bench-udprtt-")
    common = {**channels(lambda port: c.udp_channel(HOST, port, a.channel_params)), "idle": a.client_idle,
              "driver": {"threading_mode": a.threading, "idle_strategy": a.driver_idle}}
    side = {"none": lambda cpu: {}, "clients": c.pins, "processes": lambda cpu: c.pins(cpu, driver=True)}[a.pin]
    if kind == "py":
        poll = {"batch": a.poll_mode == "batch"}
        pong = c.py_role("sulis-pong", dir=f"{base}/pong", total=a.n + a.warmup, tight=True, **common, **poll,
                         **side(1))
        ping = c.py_role("sulis-ping", dir=f"{base}/ping", n=a.n, warmup=a.warmup, **common, **poll, **side(0))
    else:
        pong = c.native_role("pong", dir=f"{base}/pong", total=a.n + a.warmup, **common, **side(1))
        ping = c.native_role("ping", dir=f"{base}/ping", n=a.n, warmup=a.warmup, **common, **side(0))
    r = c.run_ping_pong(pong, ping, dirs=[base])
    r["config"] = describe(a)
    return r


def raw_run(a) -> dict:
    pinned = a.pin != "none"
    p = {"size": 32, "n": a.n, "warmup": a.warmup, "total": a.n + a.warmup, "idle": a.client_idle}
    r = c.run_ping_pong(c.py_role("raw-pong", **p, **c.pins(1 if pinned else None)),
                        lambda ready: c.py_role("raw-ping", **p, port=ready["port"], **c.pins(0 if pinned else None)))
    r["config"] = f"plain sockets, clients {a.client_idle}, pin {'processes' if pinned else 'none'}"
    return r


def peer_run(a, peer: str) -> dict:
    idle = "spin" if peer == "zmq" else a.client_idle
    r = c.peer_run(peer, "tcp", n=a.n, warmup=a.warmup, idle=idle)
    r["config"] = (f"pyzmq {r.get('zmq')}, TCP loopback, blocking recv" if peer == "zmq"
                   else f"zenoh {r.get('zenoh')}, peer mode, TCP loopback, express, clients {a.client_idle}")
    return r


def aeron_run(a, name: str, samples: bool = False) -> dict:
    """AeronPeer ping/pong (the same shape and wait as the sulis clients) or Aeron's Ping/Pong samples."""
    from bench.peers import aeron

    install = aeron.find(name)
    threading, idle = a.aeron_threading or a.threading, a.aeron_driver_idle or a.driver_idle
    props = aeron.driver_props(threading, idle, a.channel_params)
    if samples:
        r = aeron.udp_samples_ping_pong(install, a.aeron_samples_n, HOST, a.channel_params, props)
        r["config"] = (f"drivers {threading}/{idle}, clients busy-spin (hard-coded), {a.aeron_samples_n:,} round "
                       f"trips, {a.channel_params}")
        return r
    base = c.shm_dir("sulis-bench-aeron-")
    common = {**channels(lambda port: aeron.udp_channel(HOST, port, a.channel_params)), "idle": a.client_idle,
              "driver": 1}
    r = c.run_ping_pong(aeron.peer(install, "pong", {**props, **aeron.dir_props(f"{base}/pong")}, **common,
                                   total=a.n + a.warmup),
                        aeron.peer(install, "ping", {**props, **aeron.dir_props(f"{base}/ping")}, **common, n=a.n,
                                   warmup=a.warmup, length=32), dirs=[base])
    r["config"] = f"drivers {threading}/{idle}, clients {a.client_idle}, no pinning, {a.channel_params}"
    return r


def main(argv=None) -> int:
    ap = c.parser(__doc__, round_trips=True, wait_quiet=60.0, only=VARIANTS)
    c.udp_args(ap, DEFAULT_CHANNEL_PARAMS)
    ap.add_argument("--pin", choices=["none", "clients", "processes"], default="none",
                    help="none (default); clients: ping thread on CPU 0, pong on CPU 1, drivers unpinned; "
                         "processes: each process with its driver threads on its CPU")
    ap.add_argument("--poll-mode", choices=["handler", "batch"], default="handler",
                    help="how the Python sides poll: sub.poll(handler, 1) (default) or sub.poll_batch(1)")
    ap.add_argument("--aeron-samples", action="store_true",
                    help="also run Aeron's Ping/Pong samples (busy-spinning clients: ms per round trip on 2 cores)")
    ap.add_argument("--aeron-samples-n", type=int, default=2_000,
                    help="timed round trips of the Ping/Pong samples (default 2,000)")
    a = ap.parse_args(argv)
    profile = c.require_release_build()
    c.settle(a, ap)
    if a.aeron_samples_n < 1:
        ap.error("--aeron-samples-n must be at least 1")
    if a.pin != "none" and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs 2 CPUs")

    variants = c.build_native(c.select([
        ("python", "sulis Python ping-pong", lambda: sulis_run(a, "py")),
        ("native", "sulis native Rust ping-pong", lambda: sulis_run(a, "native")),
        ("raw", "raw UDP sockets from Python (floor)", lambda: raw_run(a)),
        ("zmq", "pyzmq REQ/REP tcp://127.0.0.1", lambda: peer_run(a, "zmq")),
        ("zenoh", "zenoh ping-pong tcp/127.0.0.1", lambda: peer_run(a, "zenoh")),
        ("aeron-1.15.1", "Aeron Java 1.15.1 AeronPeer ping/pong", lambda: aeron_run(a, "1.15.1")),
        ("aeron-current", "Aeron Java current AeronPeer ping/pong", lambda: aeron_run(a, "current")),
        ("aeron-1.15.1-samples", "Aeron Java 1.15.1 Ping/Pong samples", lambda: aeron_run(a, "1.15.1", True)),
        ("aeron-current-samples", "Aeron Java current Ping/Pong samples", lambda: aeron_run(a, "current", True)),
    ], a, ap, () if a.aeron_samples else VARIANTS.split(",")[-2:]), a.no_build)

    print(f"sulis UDP round trip, 32 B over loopback, two drivers, two channels: {a.runs} round(s) of {a.n:,} round "
          f"trips after {a.warmup:,} warm-up; sulis {profile} build; {c.cpu_summary()}")
    print(f"sulis runs: {describe(a)}, Python polling with "
          f"{'sub.poll(handler, 1)' if a.poll_mode == 'handler' else 'sub.poll_batch(1)'}")
    results, skipped, errors = c.run_rounds(variants, a, c.latency_line)
    med = c.report_latency(variants, results, skipped, errors,
                           "UDP round trip, 32 B, µs, median of the rounds (target for sulis from Python: p99 <= 15); "
                           "'x Py' = this row / sulis Python (> 1: slower than sulis Python):",
                           {"p99_us": 15.0}, ("raw", "zmq", "zenoh", "aeron-1.15.1", "aeron-current"))
    return c.finish("udp_latency", a, {"runs": a.runs, "n": a.n, "warmup": a.warmup, "message_length": 32,
                                       "config": describe(a), "poll_mode": a.poll_mode},
                    variants, med, results, skipped, errors)


if __name__ == "__main__":
    sys.exit(c.main_guard(main))
