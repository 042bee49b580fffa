"""The roles of the benchmarks: one side of an exchange in a process of its own,
``python -m sulis._benchkit.roles '<json>'`` (bench/README.md, "The role protocol").

A role says ``{"ready": ...}`` once its streams exist, then its results (or ``{"error": ...}``), and
keeps its streams up until its stdin closes. sulis (``sulis-pub``, ``-sub``, ``-ping``, ``-pong``), pyzmq
(``zmq-push``, ``-pull``, ``-req``, ``-rep``), plain UDP sockets (``raw-ping``, ``-pong``: the floor under
any UDP round trip from Python), eclipse-zenoh and iceoryx2 (``zenoh-*``, ``iceoryx2-*``; imported only
when run). Parameters: ``size`` (bytes), ``stop`` (a publisher stops once this file exists),
``duration`` (a subscriber's seconds of per-second counts) or ``total``/``warmup`` (a timed count),
``n``/``warmup``/``total`` (round trips), ``idle`` (spin or yield), ``driver``/``dir`` and the pins of
``side``, and where the two sides meet (``channel``, ``endpoint``, ``port``; iceoryx2: ``root``,
``prefix``, ``buffer``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time

from .loops import (
    STALL_TIMEOUT_S,
    BenchError,
    Watchdog,
    await_until,
    count_each,
    count_intervals,
    echo,
    ping,
    ping_each,
    publish,
    publish_batch,
    publish_mixed,
    receive,
    receive_whole,
    send_until,
)
from .procs import die_with_parent, pin

#: Set once the parent closed our stdin: a role keeps its streams up until then.
STDIN_CLOSED = threading.Event()


def say(obj: dict) -> None:
    """A role's report: one JSON object per stdout line."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def idle_of(name: str | None):
    """What a client calls while it waits: ``os.sched_yield`` for "yield", None (spin) otherwise."""
    return os.sched_yield if name == "yield" else None


def _stop_file(p: dict):
    """``stop()`` of a publisher: its stop file (if it has one) exists, or 180 s passed."""
    exists, deadline, stop = os.path.exists, time.monotonic() + p.get("max_seconds", 180), p.get("stop")
    return lambda: (stop is not None and exists(stop)) or time.monotonic() > deadline


def _drain(try_recv) -> None:
    """After a subscriber's last interval: keeps receiving until told to go (a publisher waiting
    for room sees its stop file only once it is let through)."""
    while not STDIN_CLOSED.is_set():
        if try_recv() is None:
            time.sleep(0.0005)


def _first(try_recv, give_up_s: float = STALL_TIMEOUT_S):
    deadline = time.monotonic() + give_up_s
    while (msg := try_recv()) is None:
        if time.monotonic() > deadline:
            raise BenchError(f"no message in {give_up_s:g} s")
        time.sleep(0.0002)
    return msg


def _echo(try_recv, send, total: int, idle) -> None:
    """Sends back what ``try_recv`` returns until ``total`` came; then says so."""
    done = 0
    while done < total:
        msg = try_recv()
        if msg is None:
            if idle is not None:
                idle()
            continue
        send(msg)
        done += 1
    say({"echoed": done})


# ----------------------------------------------------------------- sulis

@contextlib.contextmanager
def side(p: dict):
    """A role's client, on an embedded driver of its own when ``p["driver"]`` holds its options
    (else on the driver in ``p["dir"]``). Pinned (threads inherit the mask they start with) to
    ``p["driver_cpu"]`` before the driver starts, to ``p["cpu"]`` after it and before the client's
    thread starts, the role's thread alone to ``p["loop_cpu"]`` last. Yields (driver dir, client)."""
    from .. import Client, MediaDriver

    pin(p.get("driver_cpu"))
    driver = None
    if p.get("driver") is not None:
        driver = MediaDriver(dir=p["dir"], dir_delete_on_shutdown=True, **p["driver"])
    try:
        pin(p.get("cpu"))
        with Client(dir=p["dir"], name=f"sulis bench {p['role']}") as client:
            pin(p.get("loop_cpu"))
            yield (driver.dir if driver is not None else p["dir"]), client
    finally:
        if driver is not None:
            driver.close()


def sulis_pub(p: dict) -> None:
    """One ``offer`` (or, with ``batch``, one ``offer_batch`` of that many) per call until stopped."""
    with side(p) as (directory, client):
        exclusive = p.get("publication", "exclusive") == "exclusive"
        pub = (client.add_exclusive_publication if exclusive else client.add_publication)(p["channel"], p["stream"])
        say({"ready": True, "dir": directory})
        await_until(lambda: pub.is_connected, "a subscriber", 30)
        idle = idle_of(p.get("idle"))
        if p.get("size") == "mixed":  # total= messages of mixed_length(i) bytes
            sent, refused, sent_bytes = publish_mixed(pub, p["total"], idle=idle)
            say({"sent": sent, "refused": refused, "bytes": sent_bytes})
            STDIN_CLOSED.wait()
            return
        payload = b"\x5a" * p.get("size", 32)
        if p.get("batch"):
            sent, refused = publish_batch(pub, payload, p["batch"], _stop_file(p), idle)
        else:
            sent, refused = publish(pub, payload, count=p.get("total"), stop=_stop_file(p), idle=idle, chunk=8192)
        say({"sent": sent, "refused": refused})
        STDIN_CLOSED.wait()


def sulis_sub(p: dict) -> None:
    """Subscriber: ``receive`` (``total``, ``warmup``) or, with ``duration``, ``count_intervals``."""
    with side(p) as (_dir, client):
        sub = client.add_subscription(p["channel"], p["stream"])
        say({"ready": True})
        idle = idle_of(p.get("idle"))
        if "duration" in p:
            count = count_intervals(sub.poll_batch, p.get("limit", 4096), p["duration"], say, idle)
            say({"done": True, "received": count})
        elif p.get("whole"):  # whole messages, however fragmented
            say(receive_whole(sub, p["total"], p["warmup"], idle=idle, stalled=Watchdog("receiving the stream"),
                              mixed=p.get("size") == "mixed"))
        else:
            say(receive(sub, p["total"], p["warmup"], p.get("fragments", 1), idle=idle,
                        stalled=Watchdog("receiving the stream")))
        STDIN_CLOSED.wait()


def sulis_ping(p: dict) -> None:
    with side(p) as (directory, client):
        pub = client.add_exclusive_publication(p["ping_channel"], p["ping_stream"])
        sub = client.add_subscription(p["pong_channel"], p["pong_stream"])
        say({"ready": True, "dir": directory})
        await_until(lambda: pub.is_connected and sub.image_count > 0, "pong", 30)
        say({"rtt_ns": ping(pub, sub, b"\x5a" * p.get("size", 32), p["warmup"], p["n"],
                            batch=p.get("batch", False), idle=idle_of(p.get("idle")))})
        STDIN_CLOSED.wait()


def sulis_pong(p: dict) -> None:
    with side(p) as (_dir, client):
        sub = client.add_subscription(p["ping_channel"], p["ping_stream"])
        pub = client.add_exclusive_publication(p["pong_channel"], p["pong_stream"])
        say({"ready": True})
        done = echo(sub, pub, p["total"], p.get("assemble", False), p.get("batch", False), idle_of(p.get("idle")),
                    None if p.get("tight") else Watchdog("echoing pings"))
        say({"echoed": done})
        STDIN_CLOSED.wait()


# ----------------------------------------------------------------- pyzmq and sockets

@contextlib.contextmanager
def zmq_socket(kind: str, endpoint: str, bind: bool = False, linger_ms: int = 0, timeout_s: float = STALL_TIMEOUT_S,
               ready: bool = True):
    """A pyzmq socket of ``kind`` ("PUSH", "REP", ...), bound to ``endpoint`` (``tcp://HOST:0`` picks a
    free port) or connected to it, receives and sends timing out after ``timeout_s``; says ``ready``
    (with the endpoint bound) unless not ``ready``, then yields the socket."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(getattr(zmq, kind))
    try:
        sock.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
        sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
        if not bind:
            sock.connect(endpoint)
        elif endpoint.startswith("tcp://") and endpoint.endswith(":0"):
            sock.bind_to_random_port(endpoint[: -len(":0")])
        else:
            sock.bind(endpoint)
        if ready:
            say({"ready": True, **({"endpoint": sock.getsockopt_string(zmq.LAST_ENDPOINT)} if bind else {})})
        yield sock
    finally:
        sock.close(linger=linger_ms)
        ctx.term()


def zmq_push(p: dict) -> None:
    """One ``send`` (one frame) per message until stopped; the PULL side drains to the end."""
    with zmq_socket("PUSH", p["endpoint"]) as sock:
        say({"sent": send_until(sock.send, b"\x5a" * p["size"], _stop_file(p))})
        STDIN_CLOSED.wait()


def zmq_pull(p: dict) -> None:
    """PULL: bound, counts ``total`` messages timed after ``warmup``, or per second for ``duration``."""
    import zmq

    with zmq_socket("PULL", p["endpoint"], bind=True) as sock:
        recv = sock.recv
        try:
            if "duration" in p:
                recv()
                say({"done": True, "received": count_each(recv, p["duration"], say)})
                _drain(lambda: recv(zmq.NOBLOCK) if sock.poll(0) else None)  # the pusher may wait for room
                return
            total, start_at = p["total"], max(p["warmup"], 1)
            for _ in range(start_at):
                recv()
            t0 = time.perf_counter()
            for _ in range(total - start_at):
                recv()
            t1 = time.perf_counter()
        except zmq.Again:
            raise BenchError(f"no message for {STALL_TIMEOUT_S:g} s") from None
        say({"received": total, "timed_messages": total - start_at, "seconds": t1 - t0})
        STDIN_CLOSED.wait()


def zmq_req(p: dict) -> None:
    with zmq_socket("REQ", p["endpoint"]) as sock:
        say({"rtt_ns": ping_each(sock.send, sock.recv, b"\x5a" * p["size"], p["warmup"], p["n"])})
        STDIN_CLOSED.wait()


def zmq_rep(p: dict) -> None:
    import zmq

    with zmq_socket("REP", p["endpoint"], bind=True, linger_ms=1000) as sock:  # the last reply still goes out
        recv, send = sock.recv, sock.send
        try:
            for _ in range(p["total"]):
                send(recv(copy=False), copy=False)
        except zmq.Again:
            raise BenchError(f"no request for {STALL_TIMEOUT_S:g} s") from None
        say({"echoed": p["total"]})
        STDIN_CLOSED.wait()


def _udp(p: dict):
    """A non-blocking UDP socket on 127.0.0.1 (connected to ``p["port"]`` if given) and its ``try_recv``."""
    pin(p.get("cpu"))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    if "port" in p:
        s.connect(("127.0.0.1", p["port"]))
    recvfrom = s.recvfrom

    def try_recv():
        try:
            return recvfrom(64)
        except BlockingIOError:
            return None

    return s, try_recv


def raw_pong(p: dict) -> None:
    """A plain UDP socket that echoes ``total`` datagrams to their sender."""
    s, try_recv = _udp(p)
    say({"ready": True, "port": s.getsockname()[1]})
    _echo(try_recv, lambda datagram: s.sendto(*datagram), p["total"], idle_of(p.get("idle")))
    STDIN_CLOSED.wait()


def raw_ping(p: dict) -> None:
    s, try_recv = _udp(p)
    say({"ready": True})
    say({"rtt_ns": ping_each(s.send, try_recv, b"\x5a" * p["size"], p["warmup"], p["n"],
                                     idle_of(p.get("idle")))})
    STDIN_CLOSED.wait()


# ----------------------------------------------------------------- zenoh

@contextlib.contextmanager
def _zenoh(p: dict, listen: bool):
    import zenoh

    pin(p.get("cpu"))
    conf = zenoh.Config()
    conf.insert_json5("mode", '"peer"')
    for key in ("scouting/multicast/enabled", "scouting/gossip/enabled", "transport/shared_memory/enabled"):
        conf.insert_json5(key, "false")
    conf.insert_json5("listen/endpoints", json.dumps([p["endpoint"]] if listen else []))
    if not listen:
        conf.insert_json5("connect/endpoints", json.dumps([p["endpoint"]]))
    session = zenoh.open(conf)
    try:
        yield zenoh, session
    finally:
        with contextlib.suppress(Exception):  # a close that times out (peer gone) must not fail the run
            session.close()


def _matched(pub) -> bool:
    status = pub.matching_status
    return bool(getattr(status, "matching", status))


def zenoh_sub(p: dict) -> None:
    with _zenoh(p, listen=True) as (_zenoh_module, session):
        sub = session.declare_subscriber("sulis-bench/throughput")
        say({"ready": True})
        _first(sub.try_recv)
        say({"done": True, "received": count_each(sub.recv, p["duration"], say)})
        _drain(sub.try_recv)


def zenoh_pub(p: dict) -> None:
    with _zenoh(p, listen=False) as (zenoh, session):
        pub = session.declare_publisher("sulis-bench/throughput", congestion_control=zenoh.CongestionControl.BLOCK)
        say({"ready": True})
        await_until(lambda: _matched(pub), "the subscriber", 30)
        say({"sent": send_until(pub.put, b"\x5a" * p["size"], _stop_file(p))})
        STDIN_CLOSED.wait()


def _zenoh_ends(zenoh, session, sub_key: str, pub_key: str):
    sub = session.declare_subscriber(sub_key)
    pub = session.declare_publisher(pub_key, congestion_control=zenoh.CongestionControl.BLOCK, express=True)
    say({"ready": True})
    await_until(lambda: _matched(pub), "the other side's subscriber", 30)
    return sub, pub


def zenoh_ping(p: dict) -> None:
    with _zenoh(p, listen=False) as (zenoh, session):
        sub, pub = _zenoh_ends(zenoh, session, "sulis-bench/pong", "sulis-bench/ping")
        say({"rtt_ns": ping_each(pub.put, sub.try_recv, b"\x5a" * p["size"], p["warmup"], p["n"],
                                         idle_of(p.get("idle")))})
        STDIN_CLOSED.wait()


def zenoh_pong(p: dict) -> None:
    with _zenoh(p, listen=True) as (zenoh, session):
        sub, pub = _zenoh_ends(zenoh, session, "sulis-bench/ping", "sulis-bench/pong")
        put = pub.put
        _echo(sub.try_recv, lambda s: put(s.payload), p["total"], idle_of(p.get("idle")))
        STDIN_CLOSED.wait()


# ----------------------------------------------------------------- iceoryx2

def _iox2(p: dict, *names: str):
    """(node, message type, one publish-subscribe service per name); the node must stay referenced."""
    import ctypes

    import iceoryx2 as iox2

    class Message(ctypes.Structure):
        _fields_ = [("data", ctypes.c_uint8 * p["size"])]

    pin(p.get("cpu"))
    iox2.set_log_level(iox2.LogLevel.Error)
    cfg = iox2.config.default()
    cfg.global_cfg.prefix = iox2.FileName.new(p["prefix"])
    cfg.global_cfg.root_path = iox2.Path.new(p["root"].rstrip("/") + "/")
    node = (iox2.NodeBuilder.new().config(cfg).signal_handling_mode(iox2.SignalHandlingMode.Disabled)
            .create(iox2.ServiceType.Ipc))
    services = [node.service_builder(iox2.ServiceName.new(name)).publish_subscribe(Message)
                .enable_safe_overflow(False).subscriber_max_buffer_size(p["buffer"]).history_size(0)
                .max_publishers(1).max_subscribers(1).open_or_create() for name in names]
    return node, Message, services


def _iox2_publisher(service):
    import iceoryx2 as iox2

    return service.publisher_builder().backpressure_strategy(iox2.BackpressureStrategy.RetryUntilDelivered).create()


def _iox2_taking(receive):
    """``receive`` that releases the sample it got (returned only to tell whether there was one)."""
    def try_recv():
        sample = receive()
        if sample is not None:
            sample.delete()
        return sample

    return try_recv


def iceoryx2_sub(p: dict) -> None:
    _node, _message, (service,) = _iox2(p, "sulis-bench/throughput")
    sub = service.subscriber_builder().buffer_size(p["buffer"]).create()
    say({"ready": True})
    receive = sub.receive
    _first(_iox2_taking(receive))

    def recv_one():  # the API's receive, waited for (spinning) until a sample is there
        while (sample := receive()) is None:
            pass
        sample.delete()

    say({"done": True, "received": count_each(recv_one, p["duration"], say)})
    _drain(_iox2_taking(receive))


def iceoryx2_pub(p: dict) -> None:
    _node, message, (service,) = _iox2(p, "sulis-bench/throughput")
    pub = _iox2_publisher(service)
    say({"ready": True})
    await_until(lambda: service.dynamic_config.number_of_subscribers >= 1, "a subscriber", 30)
    msg = message()
    for i in range(p["size"]):
        msg.data[i] = 0x5A
    say({"sent": send_until(pub.send_copy, msg, _stop_file(p))})
    STDIN_CLOSED.wait()


def iceoryx2_ping(p: dict) -> None:
    _node, message, (ping, pong) = _iox2({**p, "buffer": 16}, "sulis-bench/ping", "sulis-bench/pong")
    pub, sub = _iox2_publisher(ping), pong.subscriber_builder().create()
    say({"ready": True})
    await_until(lambda: ping.dynamic_config.number_of_subscribers >= 1
                    and pong.dynamic_config.number_of_publishers >= 1, "pong", 30)
    say({"rtt_ns": ping_each(pub.send_copy, _iox2_taking(sub.receive), message(), p["warmup"], p["n"],
                                     idle_of(p.get("idle")))})
    STDIN_CLOSED.wait()


def iceoryx2_pong(p: dict) -> None:
    _node, _message, (ping, pong) = _iox2({**p, "buffer": 16}, "sulis-bench/ping", "sulis-bench/pong")
    sub, pub = ping.subscriber_builder().create(), _iox2_publisher(pong)
    say({"ready": True})
    await_until(lambda: pong.dynamic_config.number_of_subscribers >= 1, "ping", 30)
    send = pub.send_copy

    def echo(sample):  # the received bytes, copied into a new sample
        send(sample.payload().contents)
        sample.delete()

    _echo(sub.receive, echo, p["total"], idle_of(p.get("idle")))
    STDIN_CLOSED.wait()


ROLES = {
    "sulis-pub": sulis_pub, "sulis-sub": sulis_sub, "sulis-ping": sulis_ping, "sulis-pong": sulis_pong,
    "zmq-push": zmq_push, "zmq-pull": zmq_pull, "zmq-req": zmq_req, "zmq-rep": zmq_rep,
    "raw-ping": raw_ping, "raw-pong": raw_pong,
    "zenoh-pub": zenoh_pub, "zenoh-sub": zenoh_sub, "zenoh-ping": zenoh_ping, "zenoh-pong": zenoh_pong,
    "iceoryx2-pub": iceoryx2_pub, "iceoryx2-sub": iceoryx2_sub, "iceoryx2-ping": iceoryx2_ping,
    "iceoryx2-pong": iceoryx2_pong,
}


def _stop(*_args) -> None:
    raise KeyboardInterrupt


def _watch_stdin() -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdin.read()
    STDIN_CLOSED.set()


def child_main(argv: list[str], roles: dict = ROLES) -> int:
    """Runs the role ``params["role"]`` of ``roles``, ``params`` being the JSON in ``argv[0]``.
    SIGTERM and SIGINT unwind it (its driver deletes its directory); an error is reported as
    ``{"error": ...}`` and exit status 1."""
    params = json.loads(argv[0])
    parent = os.getppid()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the request above
        return 1
    threading.Thread(target=_watch_stdin, daemon=True).start()
    try:
        roles[params["role"]](params)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # reported to the parent, which names the role
        from ..errors import SulisError

        text = str(e) if isinstance(e, (BenchError, SulisError)) else f"{type(e).__name__}: {e}"
        with contextlib.suppress(OSError):
            say({"error": text})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
