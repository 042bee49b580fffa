#!/usr/bin/env python3
"""eclipse-zenoh (PyPI ``eclipse-zenoh``) as a benchmark peer: Python pub/sub between two processes.

Each process opens a zenoh session in ``peer`` mode with multicast and gossip
scouting off; the subscriber's (or pong's) session listens on one endpoint and
the other side's connects to it, so the two talk over exactly one link:

* ``tcp/127.0.0.1:PORT`` for the UDP benchmarks (loopback, like pyzmq's
  ``tcp://127.0.0.1``; zenoh's UDP links are best-effort, sulis' streams are
  reliable);
* ``unixsock-stream/<path>`` for the IPC benchmarks (a Unix domain socket,
  like pyzmq's ``ipc://``). zenoh's shared-memory transport is switched off
  (``transport/shared_memory/enabled=false``): zenoh puts a payload in shared
  memory only when it was allocated from a ``zenoh.shm.ShmProvider`` or is at
  least ``transport_optimization.message_size_threshold`` (3072 B by default),
  so 32-byte ``bytes`` payloads never take that path, and its start-up
  leaves a ``*.zenoh`` file behind in /dev/shm.

* ``throughput``: the publisher (``declare_publisher(key,
  congestion_control=BLOCK)``: a full queue blocks ``put`` instead of dropping,
  so nothing is lost) calls ``pub.put(payload)`` once per 32-byte message; the
  subscriber (``declare_subscriber(key)``, zenoh's default FIFO channel) calls
  ``sub.recv()`` once per message. Counted at the receiver per one-second
  interval from the first message; the first interval is warm-up; the figure
  is the median of the rest (as for sulis, pyzmq and Aeron). zenoh batches
  small messages on the link by default; that is left on, as pyzmq's own
  batching is.
* ``ping_pong``: ping ``put``s on one key (``express=True``: sent at once, not
  batched) and ``try_recv()``s on the other until the echo is there; pong
  ``try_recv()``s and ``put``s the payload back. Both wait between tries like
  the sulis clients of the same benchmark (spin, or ``os.sched_yield``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench import _common as c  # noqa: E402
from bench._common import idle_fn, json_out, pin_cpu  # noqa: E402
from bench.peers import _shared  # noqa: E402

KEY_TP = "sulis-bench/throughput"
KEY_PING = "sulis-bench/ping"
KEY_PONG = "sulis-bench/pong"


def available() -> str:
    """The installed eclipse-zenoh version; raises Skip when it cannot be imported."""
    return _shared.available("eclipse-zenoh", "zenoh")


# =============================================================== child roles

def _session(endpoint: str, listen: bool):
    import zenoh

    conf = zenoh.Config()
    conf.insert_json5("mode", json.dumps("peer"))
    conf.insert_json5("scouting/multicast/enabled", "false")
    conf.insert_json5("scouting/gossip/enabled", "false")
    conf.insert_json5("transport/shared_memory/enabled", "false")
    if listen:
        conf.insert_json5("listen/endpoints", json.dumps([endpoint]))
    else:
        conf.insert_json5("listen/endpoints", "[]")
        conf.insert_json5("connect/endpoints", json.dumps([endpoint]))
    return zenoh.open(conf)


def _matched(pub) -> bool:
    status = pub.matching_status
    return bool(getattr(status, "matching", status))


def _await(cond, what: str) -> bool:
    return c.wait_until(cond, f"{what} not matched after 30 s")


def _close(session) -> None:
    try:
        session.close()
    except Exception as exc:  # a close that times out (peer gone) must not fail the run
        print(f"zenoh close: {exc}", file=sys.stderr)


@contextlib.contextmanager
def _role_session(a: argparse.Namespace, listen: bool):
    """A child role's session (the role pinned first), closed when the role ends."""
    pin_cpu(a.pin_cpu)
    session = _session(a.endpoint, listen=listen)
    try:
        yield session
    finally:
        _close(session)


def _echo_ends(session, sub_key: str, pub_key: str, what: str):
    """Ping's or pong's subscriber and express publisher (congestion control BLOCK);
    reports ready; None when the other side's subscriber did not match."""
    import zenoh

    sub = session.declare_subscriber(sub_key)
    pub = session.declare_publisher(pub_key, congestion_control=zenoh.CongestionControl.BLOCK, express=True)
    json_out({"ready": True})
    return (sub, pub) if _await(lambda: _matched(pub), what) else None


def role_sub(a: argparse.Namespace) -> int:
    with _role_session(a, listen=True) as session:
        sub = session.declare_subscriber(KEY_TP)
        json_out({"ready": True})
        if _shared.first_message(sub.try_recv, pause_s=0.0002) is None:
            return 1
        count = c.count_intervals_each(sub.recv, a.duration, json_out)
        json_out({"done": True, "received": count})
        # Keep draining until the publisher has stopped and closed its session (a
        # put blocked on a full queue sees nothing else); then close ours.
        _shared.drain_until(sub.try_recv, a.stop_file + ".sub")
    return 0


def role_pub(a: argparse.Namespace) -> int:
    import zenoh

    with _role_session(a, listen=False) as session:
        pub = session.declare_publisher(KEY_TP, congestion_control=zenoh.CongestionControl.BLOCK)
        json_out({"ready": True})
        if not _await(lambda: _matched(pub), "the subscriber"):
            return 1
        json_out({"sent": _shared.send_until_stopped(pub.put, b"\x5a" * a.size, a.stop_file)})
    return 0


def role_ping(a: argparse.Namespace) -> int:
    with _role_session(a, listen=False) as session:
        ends = _echo_ends(session, KEY_PONG, KEY_PING, "pong's subscriber")
        if ends is None:
            return 1
        sub, pub = ends
        samples = c.ping_loop_each(pub.put, sub.try_recv, b"\x5a" * a.size, a.warmup, a.n, idle_fn(a.client_idle))
        json_out({"hist": c.encode_samples(samples)})
    return 0


def role_pong(a: argparse.Namespace) -> int:
    with _role_session(a, listen=True) as session:
        ends = _echo_ends(session, KEY_PING, KEY_PONG, "ping's subscriber")
        if ends is None:
            return 1
        sub, pub = ends
        try_recv, put = sub.try_recv, pub.put
        idle = idle_fn(a.client_idle)
        done, total = 0, a.warmup + a.n
        while done < total:
            s = try_recv()
            if s is None:
                if idle is not None:
                    idle()
                continue
            put(s.payload)
            done += 1
        json_out({"echoed": done})
        time.sleep(0.05)  # let the last echo leave before the session closes
    return 0


# =============================================================== orchestration

TRANSPORTS = ("tcp", "unixsock")


def _endpoint(transport: str, base: str) -> tuple[str, str]:
    """(zenoh endpoint, what to print) for ``tcp`` (127.0.0.1, a free port) or ``unixsock``."""
    if transport == "tcp":
        port = c.free_tcp_port()
        return f"tcp/127.0.0.1:{port}", "tcp/127.0.0.1"
    if transport == "unixsock":
        return f"unixsock-stream/{os.path.join(base, 'zenoh.sock')}", "unixsock-stream (Unix domain socket)"
    raise ValueError(f"transport must be one of {TRANSPORTS}, not {transport!r}")


def throughput(transport: str, duration_s: float = 6.0, size: int = 32, pin: bool = False,
               timeout_s: float = 60.0) -> dict:
    """One run: publisher and subscriber processes; msgs/s = median of the intervals after the warm-up."""
    version = available()
    base = c.shm_dir("sulis-bench-zenoh-")
    stop_file = os.path.join(base, f"stop-{uuid.uuid4().hex[:8]}")
    endpoint, shown = _endpoint(transport, base)
    me = c.self_cmd(__file__)
    common = ["--endpoint", endpoint, "--size", str(size), "--stop-file", stop_file]
    samples, done, pub_res = c.run_pub_sub(
        me + ["--role", "sub", "--duration", str(duration_s), *common, *c.pin_args(1, pin)],
        me + ["--role", "pub", *common, *c.pin_args(0, pin)],
        stop_file, "zenoh ", timeout_s, sub_stop=True, dirs=[base])
    return {"msgs_per_s": c.median(samples[1:]), "samples": samples, "received": done["received"],
            "sent": pub_res["sent"], "zenoh": version, "transport": shown,
            "config": f"zenoh {version} peer mode, {shown}, put/recv, congestion control BLOCK, "
                      "default batching, shared memory off"}


def ping_pong(transport: str, n: int = 100_000, warmup: int = 10_000, size: int = 32, client_idle: str = "spin",
              pin: bool = False, timeout_s: float = 600.0) -> dict:
    """One run of ping-pong round trips; percentiles (µs) from an HdrHistogram of the timed ones."""
    version = available()
    base = c.shm_dir("sulis-bench-zenoh-")
    endpoint, shown = _endpoint(transport, base)
    me = c.self_cmd(__file__)
    common = ["--endpoint", endpoint, "--size", str(size), "--n", str(n), "--warmup", str(warmup),
              "--client-idle", client_idle]
    r = c.run_ping_pong(me + ["--role", "pong", *common, *c.pin_args(1, pin)],
                        me + ["--role", "ping", *common, *c.pin_args(0, pin)], "zenoh ", timeout_s, dirs=[base])
    r["zenoh"] = version
    r["transport"] = shown
    r["config"] = (f"zenoh {version} peer mode, {shown}, put(express)/try_recv, clients {client_idle}"
                   + (", ping CPU 0 / pong CPU 1" if pin else ""))
    return r


def main(argv=None) -> int:
    return _shared.role_main(argv, __doc__, {"sub": role_sub, "pub": role_pub, "ping": role_ping, "pong": role_pong},
                             lambda ap: ap.add_argument("--endpoint", required=True))


if __name__ == "__main__":
    sys.exit(main())
