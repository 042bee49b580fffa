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
import json
import os
import sys
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench._common import (  # noqa: E402
    Child,
    Skip,
    child_signals,
    count_intervals_each,
    encode_samples,
    free_tcp_port,
    hdr_percentiles,
    json_out,
    median,
    pin_cpu,
    ping_loop_each,
    rate_samples,
    rm_tree,
    shm_dir,
    stop_all,
)

KEY_TP = "sulis-bench/throughput"
KEY_PING = "sulis-bench/ping"
KEY_PONG = "sulis-bench/pong"


def available() -> str:
    """The installed eclipse-zenoh version; raises Skip when it cannot be imported."""
    try:
        import importlib.metadata as md

        import zenoh  # noqa: F401

        return md.version("eclipse-zenoh")
    except Exception as exc:
        raise Skip(f"eclipse-zenoh not usable ({type(exc).__name__}: {exc}); "
                   "run `bash bench/peers/install.sh`") from None


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


def _await(cond, what: str, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            json_out({"error": f"{what} not matched after {timeout_s:g} s"})
            return False
        time.sleep(0.001)
    return True


def _idle(name: str):
    return os.sched_yield if name == "yield" else None


def _close(session) -> None:
    try:
        session.close()
    except Exception as exc:  # a close that times out (peer gone) must not fail the run
        print(f"zenoh close: {exc}", file=sys.stderr)


def role_sub(a: argparse.Namespace) -> int:
    pin_cpu(a.pin_cpu)
    session = _session(a.endpoint, listen=True)
    try:
        sub = session.declare_subscriber(KEY_TP)
        json_out({"ready": True})
        try_recv = sub.try_recv
        deadline = time.monotonic() + 30
        while try_recv() is None:
            if time.monotonic() > deadline:
                json_out({"error": "no message in 30 s"})
                return 1
            time.sleep(0.0002)
        count = count_intervals_each(sub.recv, a.duration, json_out)
        json_out({"done": True, "received": count})
        # Keep draining until the publisher has stopped and closed its session (a
        # put blocked on a full queue sees nothing else); then close ours.
        while not os.path.exists(a.stop_file + ".sub"):
            if try_recv() is None:
                time.sleep(0.0005)
    finally:
        _close(session)
    return 0


def role_pub(a: argparse.Namespace) -> int:
    import zenoh

    pin_cpu(a.pin_cpu)
    session = _session(a.endpoint, listen=False)
    try:
        pub = session.declare_publisher(KEY_TP, congestion_control=zenoh.CongestionControl.BLOCK)
        json_out({"ready": True})
        if not _await(lambda: _matched(pub), "the subscriber"):
            return 1
        put = pub.put
        msg = b"\x5a" * a.size
        exists = os.path.exists
        rng = range(4096)
        sent = 0
        while not exists(a.stop_file):
            for _ in rng:
                put(msg)
            sent += 4096
        json_out({"sent": sent})
    finally:
        _close(session)
    return 0


def role_ping(a: argparse.Namespace) -> int:
    import zenoh

    pin_cpu(a.pin_cpu)
    session = _session(a.endpoint, listen=False)
    try:
        sub = session.declare_subscriber(KEY_PONG)
        pub = session.declare_publisher(KEY_PING, congestion_control=zenoh.CongestionControl.BLOCK, express=True)
        json_out({"ready": True})
        if not _await(lambda: _matched(pub), "pong's subscriber"):
            return 1
        samples = ping_loop_each(pub.put, sub.try_recv, b"\x5a" * a.size, a.warmup, a.n, _idle(a.client_idle))
        json_out({"hist": encode_samples(samples)})
    finally:
        _close(session)
    return 0


def role_pong(a: argparse.Namespace) -> int:
    import zenoh

    pin_cpu(a.pin_cpu)
    session = _session(a.endpoint, listen=True)
    try:
        sub = session.declare_subscriber(KEY_PING)
        pub = session.declare_publisher(KEY_PONG, congestion_control=zenoh.CongestionControl.BLOCK, express=True)
        json_out({"ready": True})
        if not _await(lambda: _matched(pub), "ping's subscriber"):
            return 1
        try_recv, put = sub.try_recv, pub.put
        idle = _idle(a.client_idle)
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
    finally:
        _close(session)
    return 0


# =============================================================== orchestration

TRANSPORTS = ("tcp", "unixsock")


def _endpoint(transport: str, base: str) -> tuple[str, str]:
    """(zenoh endpoint, what to print) for ``tcp`` (127.0.0.1, a free port) or ``unixsock``."""
    if transport == "tcp":
        port = free_tcp_port()
        return f"tcp/127.0.0.1:{port}", "tcp/127.0.0.1"
    if transport == "unixsock":
        return f"unixsock-stream/{os.path.join(base, 'zenoh.sock')}", "unixsock-stream (Unix domain socket)"
    raise ValueError(f"transport must be one of {TRANSPORTS}, not {transport!r}")


def throughput(transport: str, duration_s: float = 6.0, size: int = 32, pin: bool = False,
               timeout_s: float = 60.0) -> dict:
    """One run: publisher and subscriber processes; msgs/s = median of the intervals after the warm-up."""
    version = available()
    base = shm_dir("sulis-bench-zenoh-")
    stop_file = os.path.join(base, f"stop-{uuid.uuid4().hex[:8]}")
    endpoint, shown = _endpoint(transport, base)
    me = [sys.executable, os.path.abspath(__file__)]
    common = ["--endpoint", endpoint, "--size", str(size), "--stop-file", stop_file]
    pub = sub = None
    try:
        sub = Child(me + ["--role", "sub", "--duration", str(duration_s), *common,
                          *(["--pin-cpu", "1"] if pin else [])], "zenoh subscriber")
        sub.read_json(timeout_s)
        pub = Child(me + ["--role", "pub", *common, *(["--pin-cpu", "0"] if pin else [])], "zenoh publisher")
        pub.read_json(timeout_s)
        samples, done = rate_samples(sub, timeout_s, watch=[pub])
        Path(stop_file).touch()
        pub_res = pub.read_json(timeout_s)
        pub.wait_ok(30)
        Path(stop_file + ".sub").touch()
        sub.wait_ok(30)
    finally:
        stop_all((pub, sub))
        rm_tree(base)
    if len(samples) < 2:
        raise RuntimeError(f"only {len(samples)} intervals")
    return {"msgs_per_s": median(samples[1:]), "samples": samples, "received": done["received"],
            "sent": pub_res["sent"], "zenoh": version, "transport": shown,
            "config": f"zenoh {version} peer mode, {shown}, put/recv, congestion control BLOCK, "
                      "default batching, shared memory off"}


def ping_pong(transport: str, n: int = 100_000, warmup: int = 10_000, size: int = 32, client_idle: str = "spin",
              pin: bool = False, timeout_s: float = 600.0) -> dict:
    """One run of ping-pong round trips; percentiles (µs) from an HdrHistogram of the timed ones."""
    version = available()
    base = shm_dir("sulis-bench-zenoh-")
    endpoint, shown = _endpoint(transport, base)
    me = [sys.executable, os.path.abspath(__file__)]
    common = ["--endpoint", endpoint, "--size", str(size), "--n", str(n), "--warmup", str(warmup),
              "--client-idle", client_idle]
    ping = pong = None
    try:
        pong = Child(me + ["--role", "pong", *common, *(["--pin-cpu", "1"] if pin else [])], "zenoh pong")
        pong.read_json(60)
        ping = Child(me + ["--role", "ping", *common, *(["--pin-cpu", "0"] if pin else [])], "zenoh ping")
        ping.read_json(60)
        res = ping.read_json(timeout_s, watch=[pong])
        pong.read_json(60)
        ping.wait_ok(30)
        pong.wait_ok(30)
    finally:
        stop_all((ping, pong))
        rm_tree(base)
    r = hdr_percentiles(res["hist"])
    r["hdrh_encoded"] = res["hist"]
    r["zenoh"] = version
    r["transport"] = shown
    r["config"] = (f"zenoh {version} peer mode, {shown}, put(express)/try_recv, clients {client_idle}"
                   + (", ping CPU 0 / pong CPU 1" if pin else ""))
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=["sub", "pub", "ping", "pong"], required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--stop-file")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--warmup", type=int, default=10_000)
    ap.add_argument("--client-idle", choices=["spin", "yield"], default="spin")
    ap.add_argument("--pin-cpu", type=int, default=None)
    a = ap.parse_args(argv)
    child_signals()
    return {"sub": role_sub, "pub": role_pub, "ping": role_ping, "pong": role_pong}[a.role](a)


if __name__ == "__main__":
    sys.exit(main())
