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

import sys

from sulis._benchkit import runner as r
from sulis._benchkit.procs import pins, scratch_dir

r.repository(__file__)
from bench.peers import aeron  # noqa: E402

CHANNEL, STREAM = "aeron:ipc", 1001


def sulis_run(a, kind: str, publication: str, batch: bool = False) -> dict:
    """Python (``kind`` py) or native roles: the publisher runs the embedded driver, the subscriber
    is a client of it; with ``--pin`` the publisher (its driver included) on CPU 0, the subscriber on 1."""
    base = scratch_dir("sulis-bench-ipctp-")
    idle = a.driver_idle if kind == "py" else a.native_driver_idle
    stream = {"channel": CHANNEL, "stream": STREAM}
    driver = {"threading_mode": "shared", "idle_strategy": idle, "ipc_term_buffer_length": a.term_length}
    pub = r.sulis_role(kind, "pub", dir=f"{base}/driver", **stream, stop=f"{base}/stop", publication=publication,
                       driver=driver,
                       **({"batch": a.batch_size if batch else 0} if kind == "py" else {"idle": "spin"}),
                       **pins(0 if a.pin else None, driver=True))
    limit = a.batch if kind == "py" else 10
    sub = lambda ready: r.sulis_role(kind, "sub", dir=ready["dir"], **stream, duration=a.duration,  # noqa: E731
                                     limit=limit, **({} if kind == "py" else {"idle": "none"}),
                                     **pins(1 if a.pin else None))
    res = r.run_stream(sub, pub, f"{base}/stop", pub_first=True, dirs=[base])
    res["config"] = (f"driver shared/{idle}, sub {'poll_batch' if kind == 'py' else 'poll'}({limit})"
                     + (f", offer_batch({a.batch_size})" if batch else "") + (", pinned" if a.pin else ""))
    return res


def aeron_run(a, name: str) -> dict:
    install = aeron.find(name)
    res = aeron.ipc_throughput(install, a.duration)
    print("      intervals: " + ", ".join(f"{s:,.0f}" for s in res["samples"]) + " msgs/s (first = warm-up)")
    res["config"] = f"Aeron {install.version}, 1 JVM, SHARED driver, no-op idle"
    return res


def main(argv=None) -> int:
    ap = r.parser(__doc__, duration=True, only="py-exclusive,py-concurrent,py-batch-exclusive,py-batch-concurrent,"
                  "native-exclusive,native-concurrent,zmq,zenoh,iceoryx2,aeron-1.15.1,aeron-current")
    ap.add_argument("--driver-idle", default="backoff",
                    help="idle strategy of the driver in the Python runs (default backoff: the two Python "
                         "processes already use both cores)")
    ap.add_argument("--native-driver-idle", default="busy-spin",
                    help="idle strategy of the driver in the native runs (default busy-spin, as Aeron's sample)")
    ap.add_argument("--term-length", default="64m", help="IPC term length (default 64m)")
    ap.add_argument("--pin", action="store_true", help="publisher process on CPU 0, subscriber on CPU 1")
    ap.add_argument("--batch-size", type=int, default=1024, help="messages per offer_batch call (default 1024)")
    a = r.parse(ap, argv)
    rows = [("py-exclusive", "sulis Python ExclusivePublication.offer", lambda: sulis_run(a, "py", "exclusive")),
            ("py-concurrent", "sulis Python Publication.offer (concurrent)", lambda: sulis_run(a, "py", "concurrent")),
            ("py-batch-exclusive", "sulis Python ExclusivePublication.offer_batch",
             lambda: sulis_run(a, "py", "exclusive", batch=True)),
            ("py-batch-concurrent", "sulis Python Publication.offer_batch (concurrent)",
             lambda: sulis_run(a, "py", "concurrent", batch=True))]
    rows += [("native-exclusive", "sulis native Rust ExclusivePublication",
              lambda: sulis_run(a, "native", "exclusive")),
             ("native-concurrent", "sulis native Rust Publication (concurrent)",
              lambda: sulis_run(a, "native", "concurrent")),
             ("zmq", "pyzmq PUSH/PULL ipc://", lambda: r.peer_run("zmq", "ipc", a.duration)),
             ("zenoh", "zenoh put/recv unixsock-stream", lambda: r.peer_run("zenoh", "ipc", a.duration, pin=a.pin)),
             ("iceoryx2", "iceoryx2 send_copy/receive (shm)",
              lambda: r.peer_run("iceoryx2", "ipc", a.duration, pin=a.pin))]
    rows += [(f"aeron-{v}", f"Aeron Java {v} EmbeddedExclusiveIpcThroughput", lambda v=v: aeron_run(a, v))
             for v in aeron.INSTALLS]
    return r.compare("ipc_throughput", a, ap, rows, title=(
        f"sulis IPC throughput, 32 B messages: {a.runs} round(s), {a.duration:g} s per run (every system: "
        "per-second counts at the receiver, first second = warm-up)"), config=[
        f"Python runs: driver shared/{a.driver_idle}, poll_batch({a.batch}); native runs: driver "
        f"shared/{a.native_driver_idle}; {'pinned pub CPU 0 / sub CPU 1' if a.pin else 'no CPU pinning'}"],
        heading="IPC throughput, 32 B messages, median of the rounds (msgs/s); "
                "'vs X' = this row's median / X's median:",
        ratios=[("vs 10M", 10e6), ("vs sulis Py", "py-exclusive"), ("vs pyzmq", "zmq"),
                ("vs Aeron 1.15.1", "aeron-1.15.1")],
        targets=[("(a) sulis Python exclusive offer >= 10 M msgs/s", "py-exclusive", 10e6, None),
                 ("(a) sulis Python exclusive offer >= 5x pyzmq PUSH/PULL", "py-exclusive", 5, "zmq"),
                 ("(b) sulis native exclusive >= 1.0x Aeron Java 1.15.1", "native-exclusive", 1.0, "aeron-1.15.1"),
                 (f"(c) sulis Python offer_batch({a.batch_size}) exclusive >= 30 M msgs/s", "py-batch-exclusive",
                  30e6, None),
                 ("(c) sulis Python offer_batch exclusive >= 0.65x sulis native exclusive", "py-batch-exclusive", 0.65,
                  "native-exclusive")],
        settings={"duration_s": a.duration, "message_length": 32, "driver_idle": a.driver_idle,
                  "native_driver_idle": a.native_driver_idle, "pinned": a.pin, "batch_size": a.batch_size})


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
