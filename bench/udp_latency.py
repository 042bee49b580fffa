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

import sys

from sulis._benchkit import runner as r
from sulis._benchkit.procs import pins, scratch_dir, two_free_ports

r.repository(__file__)
from bench.peers import aeron  # noqa: E402

HOST = "127.0.0.1"
SAMPLES = ("aeron-1.15.1-samples", "aeron-current-samples")


def describe(a) -> str:
    return (f"drivers {a.threading}/{a.driver_idle}, clients {a.client_idle}, pin {a.pin}, "
            f"{a.channel_params or 'no channel params'}")


def channels(channel) -> dict:
    """The two channels (``channel(port)``) and streams of a run, on two free ports."""
    ping, pong = two_free_ports(HOST)
    return {"ping_channel": channel(ping), "ping_stream": 1002, "pong_channel": channel(pong), "pong_stream": 1003}


def sulis_run(a, kind: str) -> dict:
    """Pong first (its driver binds the ping channel), then ping (its driver binds the pong channel)."""
    base = scratch_dir("sulis-bench-udprtt-")
    common = {**channels(lambda port: r.udp_channel(HOST, port, a.channel_params)), "idle": a.client_idle,
              "driver": {"threading_mode": a.threading, "idle_strategy": a.driver_idle},
              **({"batch": a.poll_mode == "batch"} if kind == "py" else {})}
    side = {"none": lambda cpu: {}, "clients": pins, "processes": lambda cpu: pins(cpu, driver=True)}[a.pin]
    pong = r.sulis_role(kind, "pong", dir=f"{base}/pong", total=a.n + a.warmup, **common, **side(1),
                        **({"tight": True} if kind == "py" else {}))
    res = r.run_ping_pong(pong, r.sulis_role(kind, "ping", dir=f"{base}/ping", n=a.n, warmup=a.warmup, **common,
                                             **side(0)), dirs=[base])
    res["config"] = describe(a)
    return res


def raw_run(a) -> dict:
    pinned = a.pin != "none"
    p = {"size": 32, "n": a.n, "warmup": a.warmup, "total": a.n + a.warmup, "idle": a.client_idle}
    res = r.run_ping_pong(r.py_role("raw-pong", **p, **pins(1 if pinned else None)),
                          lambda ready: r.py_role("raw-ping", **p, port=ready["port"], **pins(0 if pinned else None)))
    res["config"] = f"plain sockets, clients {a.client_idle}, pin {'processes' if pinned else 'none'}"
    return res


def aeron_run(a, name: str, samples: bool = False) -> dict:
    """AeronPeer ping/pong (the same shape and wait as the sulis clients) or Aeron's Ping/Pong samples."""
    install = aeron.find(name)
    threading, idle = a.aeron_threading or a.threading, a.aeron_driver_idle or a.driver_idle
    props = aeron.driver_props(threading, idle, a.channel_params)
    if samples:
        res = aeron.udp_samples_ping_pong(install, a.aeron_samples_n, HOST, a.channel_params, props)
        res["config"] = (f"drivers {threading}/{idle}, clients busy-spin (hard-coded), {a.aeron_samples_n:,} round "
                         f"trips, {a.channel_params}")
        return res
    base = scratch_dir("sulis-bench-aeron-")
    common = {**channels(lambda port: aeron.udp_channel(HOST, port, a.channel_params)), "idle": a.client_idle}
    res = r.run_ping_pong(aeron.embedded(install, "pong", props, f"{base}/pong", **common, total=a.n + a.warmup),
                          aeron.embedded(install, "ping", props, f"{base}/ping", **common, n=a.n, warmup=a.warmup,
                                         length=32), dirs=[base])
    res["config"] = f"drivers {threading}/{idle}, clients {a.client_idle}, no pinning, {a.channel_params}"
    return res


def main(argv=None) -> int:
    ap = r.parser(__doc__, round_trips=True, wait_quiet=60.0, udp="mtu=1408", only="python,native,raw,zmq,zenoh,"
                  "aeron-1.15.1,aeron-current,aeron-1.15.1-samples,aeron-current-samples")
    ap.add_argument("--aeron-threading", default=None, help="Aeron's threading mode (default: --threading)")
    ap.add_argument("--aeron-driver-idle", default=None, help="Aeron's drivers' idle strategy (default: same)")
    ap.add_argument("--pin", choices=["none", "clients", "processes"], default="none",
                    help="none (default); clients: ping thread on CPU 0, pong on CPU 1, drivers unpinned; "
                         "processes: each process with its driver threads on its CPU")
    ap.add_argument("--poll-mode", choices=["handler", "batch"], default="handler",
                    help="how the Python sides poll: sub.poll(handler, 1) (default) or sub.poll_batch(1)")
    ap.add_argument("--aeron-samples", action="store_true",
                    help="also run Aeron's Ping/Pong samples (busy-spinning clients: ms per round trip on 2 cores)")
    ap.add_argument("--aeron-samples-n", type=int, default=2_000,
                    help="timed round trips of the Ping/Pong samples (default 2,000)")
    a = r.parse(ap, argv)
    if a.aeron_samples_n < 1:
        ap.error("--aeron-samples-n must be at least 1")
    rows = [("python", "sulis Python ping-pong", lambda: sulis_run(a, "py")),
            ("native", "sulis native Rust ping-pong", lambda: sulis_run(a, "native")),
            ("raw", "raw UDP sockets from Python (floor)", lambda: raw_run(a)),
            ("zmq", "pyzmq REQ/REP tcp://127.0.0.1", lambda: r.peer_run("zmq", "tcp", n=a.n, warmup=a.warmup)),
            ("zenoh", "zenoh ping-pong tcp/127.0.0.1",
             lambda: r.peer_run("zenoh", "tcp", n=a.n, warmup=a.warmup, idle=a.client_idle)),
            *((f"aeron-{v}", f"Aeron Java {v} AeronPeer ping/pong", lambda v=v: aeron_run(a, v))
              for v in aeron.INSTALLS),
            *((f"aeron-{v}-samples", f"Aeron Java {v} Ping/Pong samples", lambda v=v: aeron_run(a, v, True))
              for v in aeron.INSTALLS)]
    poll = "sub.poll(handler, 1)" if a.poll_mode == "handler" else "sub.poll_batch(1)"
    return r.compare("udp_latency", a, ap, rows, optional=() if a.aeron_samples else SAMPLES, title=(
        f"sulis UDP round trip, 32 B over loopback, two drivers, two channels: {a.runs} round(s) of {a.n:,} round "
        f"trips after {a.warmup:,} warm-up"), config=[f"sulis runs: {describe(a)}, Python polling with {poll}"],
        heading="UDP round trip, 32 B, µs, median of the rounds (target for sulis from Python: p99 <= 15); "
                "'x Py' = this row / sulis Python (> 1: slower than sulis Python):",
        latency_targets={"p99_us": 15.0}, compare_with=("raw", "zmq", "zenoh", "aeron-1.15.1", "aeron-current"),
        settings={"n": a.n, "warmup": a.warmup, "message_length": 32, "config": describe(a),
                  "poll_mode": a.poll_mode})


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
