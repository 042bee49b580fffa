#!/usr/bin/env python3
"""IPC throughput of sulis beside its peers, 32-byte messages, one command.

    python bench/ipc_throughput.py            # 3 rounds, ~3 minutes
    python bench/ipc_throughput.py --quick    # 1 short round (smoke test)

Rows: sulis from Python (one ``offer`` per message, exclusive and concurrent, and ``offer_batch`` of
1,024), sulis native Rust, pyzmq, zenoh, iceoryx2, Aeron Java 1.15.1 and current
(EmbeddedExclusiveIpcThroughput); every row counted per second at the receiver, the first second
left out; targets (a) sulis Python >= 10 M msgs/s and >= 5x pyzmq, (b) native >= 1.0x Aeron 1.15.1,
(c) offer_batch >= 30 M msgs/s and >= 0.65x native. bench/README.md says what each row runs.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

CHANNEL, STREAM = "aeron:ipc", 1001
VARIANTS = ("py-exclusive,py-concurrent,py-batch-exclusive,py-batch-concurrent,native-exclusive,native-concurrent,"
            "zmq,zenoh,iceoryx2,aeron-1.15.1,aeron-current")


def sulis_run(a, kind: str, publication: str, batch: bool = False) -> dict:
    """Python (``kind`` py) or native roles: the publisher runs the embedded driver, the subscriber
    is a client of it; with ``--pin`` the publisher (its driver included) on CPU 0, the subscriber on 1."""
    base = c.shm_dir("sulis-bench-ipctp-")
    stop = os.path.join(base, "stop")
    idle = a.driver_idle if kind == "py" else a.native_driver_idle
    where = {"dir": os.path.join(base, "driver"), "channel": CHANNEL, "stream": STREAM, "stop": stop,
             "publication": publication, "driver": {"threading_mode": "shared", "idle_strategy": idle,
                                                    "ipc_term_buffer_length": a.term_length}}
    pin_pub, pin_sub = c.pins(0 if a.pin else None, driver=True), c.pins(1 if a.pin else None)
    if kind == "py":
        pub = c.py_role("sulis-pub", **where, batch=a.batch_size if batch else 0, **pin_pub)
        sub = lambda ready: c.py_role("sulis-sub", dir=ready["dir"], channel=CHANNEL, stream=STREAM,  # noqa: E731
                                      duration=a.duration, limit=a.batch, **pin_sub)
        config = f"driver shared/{idle}, sub poll_batch({a.batch})"
        config += f", offer_batch({a.batch_size})" if batch else ""
    else:
        pub = c.native_role("pub", **where, idle="spin", **pin_pub)
        sub = lambda ready: c.native_role("sub", dir=ready["dir"], channel=CHANNEL, stream=STREAM,  # noqa: E731
                                          duration=a.duration, limit=10, idle="none", **pin_sub)
        config = f"driver shared/{idle}, sub poll(10)"
    r = c.run_stream(sub, pub, stop, pub_first=True, dirs=[base])
    r["config"] = config + (", pinned" if a.pin else "")
    return r


def peer_run(a, peer: str) -> dict:
    r = c.peer_run(peer, "ipc", a.duration, pin=a.pin and peer != "zmq")
    pinned = ", pinned" if a.pin and peer != "zmq" else ""
    r["config"] = {"zmq": f"pyzmq {r.get('zmq')}, default HWM",
                   "zenoh": f"zenoh {r.get('zenoh')}, Unix socket, BLOCK, no shm{pinned}",
                   "iceoryx2": f"iceoryx2 {r.get('iceoryx2')}, buffer 4096, no overflow{pinned}"}[peer]
    return r


def aeron_run(a, name: str) -> dict:
    from bench.peers import aeron

    install = aeron.find(name)
    r = aeron.ipc_throughput(install, a.duration)
    print("      intervals: " + ", ".join(f"{s:,.0f}" for s in r["samples"]) + " msgs/s (first = warm-up)")
    r["config"] = f"Aeron {install.version}, 1 JVM, SHARED driver, no-op idle"
    return r


def main(argv=None) -> int:
    ap = c.parser(__doc__, duration=True, only=VARIANTS)
    ap.add_argument("--driver-idle", default="backoff",
                    help="idle strategy of the driver in the Python runs (default backoff: the two Python "
                         "processes already use both cores)")
    ap.add_argument("--native-driver-idle", default="busy-spin",
                    help="idle strategy of the driver in the native runs (default busy-spin, as Aeron's sample)")
    ap.add_argument("--term-length", default="64m", help="IPC term length (default 64m)")
    ap.add_argument("--pin", action="store_true", help="publisher process on CPU 0, subscriber on CPU 1")
    ap.add_argument("--batch-size", type=int, default=1024, help="messages per offer_batch call (default 1024)")
    a = ap.parse_args(argv)
    profile = c.require_release_build()
    c.settle(a, ap)
    if a.pin and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs 2 CPUs")

    variants = c.build_native(c.select([
        ("py-exclusive", "sulis Python ExclusivePublication.offer", lambda: sulis_run(a, "py", "exclusive")),
        ("py-concurrent", "sulis Python Publication.offer (concurrent)", lambda: sulis_run(a, "py", "concurrent")),
        ("py-batch-exclusive", "sulis Python ExclusivePublication.offer_batch",
         lambda: sulis_run(a, "py", "exclusive", batch=True)),
        ("py-batch-concurrent", "sulis Python Publication.offer_batch (concurrent)",
         lambda: sulis_run(a, "py", "concurrent", batch=True)),
        ("native-exclusive", "sulis native Rust ExclusivePublication", lambda: sulis_run(a, "native", "exclusive")),
        ("native-concurrent", "sulis native Rust Publication (concurrent)",
         lambda: sulis_run(a, "native", "concurrent")),
        ("zmq", "pyzmq PUSH/PULL ipc://", lambda: peer_run(a, "zmq")),
        ("zenoh", "zenoh put/recv unixsock-stream", lambda: peer_run(a, "zenoh")),
        ("iceoryx2", "iceoryx2 send_copy/receive (shm)", lambda: peer_run(a, "iceoryx2")),
        ("aeron-1.15.1", "Aeron Java 1.15.1 EmbeddedExclusiveIpcThroughput", lambda: aeron_run(a, "1.15.1")),
        ("aeron-current", "Aeron Java current EmbeddedExclusiveIpcThroughput", lambda: aeron_run(a, "current")),
    ], a, ap), a.no_build)

    print(f"sulis IPC throughput, 32 B messages: {a.runs} round(s), {a.duration:g} s per run (every system: "
          f"per-second counts at the receiver, first second = warm-up); sulis {profile} build; {c.cpu_summary()}")
    print(f"Python runs: driver shared/{a.driver_idle}, poll_batch({a.batch}); native runs: driver "
          f"shared/{a.native_driver_idle}; {'pinned pub CPU 0 / sub CPU 1' if a.pin else 'no CPU pinning'}")
    results, skipped, errors = c.run_rounds(variants, a, lambda r: f"{r['msgs_per_s']:,.0f} msgs/s")
    med = c.report_throughput(variants, results, skipped, errors,
                              "IPC throughput, 32 B messages, median of the rounds (msgs/s); "
                              "'vs X' = this row's median / X's median:",
                              [("vs 10M", 10e6), ("vs sulis Py", "py-exclusive"), ("vs pyzmq", "zmq"),
                               ("vs Aeron 1.15.1", "aeron-1.15.1")])
    py, zmq, nat, batch, aeron = (med.get(k) for k in ("py-exclusive", "zmq", "native-exclusive",
                                                       "py-batch-exclusive", "aeron-1.15.1"))
    if py:
        print(f"  (a) sulis Python exclusive offer >= 10 M msgs/s: {py / 1e6:.2f} M = {py / 10e6:.2f}x "
              f"-> {c.verdict(py >= 10e6)}")
    if py and zmq:
        print(f"  (a) sulis Python exclusive offer >= 5x pyzmq PUSH/PULL ({zmq / 1e6:.2f} M): {py / zmq:.2f}x "
              f"-> {c.verdict(py / zmq >= 5)}")
    if nat and aeron:
        print(f"  (b) sulis native exclusive >= 1.0x Aeron Java 1.15.1 ({aeron / 1e6:.2f} M): {nat / 1e6:.2f} M = "
              f"{nat / aeron:.2f}x -> {c.verdict(nat >= aeron)}")
    if batch:
        print(f"  (c) sulis Python offer_batch({a.batch_size}) exclusive >= 30 M msgs/s: {batch / 1e6:.2f} M = "
              f"{batch / 30e6:.2f}x -> {c.verdict(batch >= 30e6)}")
    if batch and nat:
        print(f"  (c) sulis Python offer_batch exclusive >= 0.65x sulis native exclusive ({nat / 1e6:.2f} M): "
              f"{batch / nat:.2f}x -> {c.verdict(batch / nat >= 0.65)}")
    return c.finish("ipc_throughput", a, {
        "runs": a.runs, "duration_s": a.duration, "message_length": 32, "driver_idle": a.driver_idle,
        "native_driver_idle": a.native_driver_idle, "pinned": a.pin, "batch_size": a.batch_size,
    }, variants, med, results, skipped, errors)


if __name__ == "__main__":
    sys.exit(c.main_guard(main))
