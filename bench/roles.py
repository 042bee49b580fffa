#!/usr/bin/env python3
"""The Python roles of bench/ that the wheel does not need: ``python bench/roles.py '<json>'``.

Besides ``sulis._benchkit``'s roles (sulis-sub, sulis-pong, zmq-pull, zmq-rep): the sulis publisher
and ping, pyzmq PUSH and REQ, plain UDP sockets (the floor under any UDP round trip from Python),
eclipse-zenoh and iceoryx2 (bench/README.md says how each is set up). Each speaks the JSON lines of
every role and runs its measured loop from ``sulis._benchkit``; parameters: ``size`` (bytes),
``stop`` (a publisher stops once this file exists), ``duration`` (a subscriber's seconds of
per-second counts), ``n``/``warmup``/``total`` (round trips), ``idle`` (spin or yield), ``cpu``, and
where the two sides meet (``endpoint``, ``port``; iceoryx2: ``root``, ``prefix``, ``buffer``).
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time

from sulis import _benchkit as kit


def _stop(p: dict):
    """``stop()`` of a publisher: its stop file exists, or 180 s passed."""
    exists, deadline = os.path.exists, time.monotonic() + p.get("max_seconds", 180)
    return lambda: exists(p["stop"]) or time.monotonic() > deadline


def _drain(try_recv) -> None:
    """After a subscriber's last interval: keeps receiving until told to go (a publisher waiting
    for room sees its stop file only once it is let through)."""
    while not kit.STDIN_CLOSED.is_set():
        if try_recv() is None:
            time.sleep(0.0005)


def _first(try_recv, give_up_s: float = 30.0):
    deadline = time.monotonic() + give_up_s
    while (msg := try_recv()) is None:
        if time.monotonic() > deadline:
            raise kit.BenchError(f"no message in {give_up_s:g} s")
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
    kit.say({"echoed": done})


# ----------------------------------------------------------------- sulis

def sulis_pub(p: dict) -> None:
    """One ``offer`` (or, with ``batch``, one ``offer_batch`` of that many) per call until stopped."""
    with kit.side(p) as (directory, client):
        exclusive = p.get("publication", "exclusive") == "exclusive"
        pub = (client.add_exclusive_publication if exclusive else client.add_publication)(p["channel"], p["stream"])
        kit.say({"ready": True, "dir": directory})
        kit.await_until(lambda: pub.is_connected, "a subscriber", 30)
        payload, idle = b"\x5a" * p.get("size", 32), kit.idle_of(p.get("idle"))
        if p.get("batch"):
            sent, refused = kit.publish_batch(pub, payload, p["batch"], _stop(p), idle)
        else:
            sent, refused = kit.publish(pub, payload, stop=_stop(p), idle=idle, chunk=8192)
        kit.say({"sent": sent, "refused": refused})
        kit.STDIN_CLOSED.wait()


def sulis_ping(p: dict) -> None:
    with kit.side(p) as (directory, client):
        pub = client.add_exclusive_publication(p["ping_channel"], p["ping_stream"])
        sub = client.add_subscription(p["pong_channel"], p["pong_stream"])
        kit.say({"ready": True, "dir": directory})
        kit.await_until(lambda: pub.is_connected and sub.image_count > 0, "pong", 30)
        kit.say({"rtt_ns": kit.ping(pub, sub, b"\x5a" * p.get("size", 32), p["warmup"], p["n"],
                                    batch=p.get("batch", False), idle=kit.idle_of(p.get("idle")))})
        kit.STDIN_CLOSED.wait()


# ----------------------------------------------------------------- pyzmq and sockets

@contextlib.contextmanager
def _zmq(kind: str, endpoint: str):
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(getattr(zmq, kind))
    try:
        sock.connect(endpoint)
        kit.say({"ready": True})
        yield sock
    finally:
        sock.close(linger=0)
        ctx.term()


def zmq_push(p: dict) -> None:
    """One ``send`` (one frame) per message until stopped; the PULL side drains to the end."""
    with _zmq("PUSH", p["endpoint"]) as sock:
        kit.say({"sent": kit.send_until(sock.send, b"\x5a" * p["size"], _stop(p))})
        kit.STDIN_CLOSED.wait()


def zmq_req(p: dict) -> None:
    with _zmq("REQ", p["endpoint"]) as sock:
        kit.say({"rtt_ns": kit.ping_each(sock.send, sock.recv, b"\x5a" * p["size"], p["warmup"], p["n"])})
        kit.STDIN_CLOSED.wait()


def _udp(p: dict):
    """A non-blocking UDP socket on 127.0.0.1 (connected to ``p["port"]`` if given) and its ``try_recv``."""
    kit.pin(p.get("cpu"))
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
    kit.say({"ready": True, "port": s.getsockname()[1]})
    _echo(try_recv, lambda datagram: s.sendto(*datagram), p["total"], kit.idle_of(p.get("idle")))
    kit.STDIN_CLOSED.wait()


def raw_ping(p: dict) -> None:
    s, try_recv = _udp(p)
    kit.say({"ready": True})
    kit.say({"rtt_ns": kit.ping_each(s.send, try_recv, b"\x5a" * p["size"], p["warmup"], p["n"],
                                     kit.idle_of(p.get("idle")))})
    kit.STDIN_CLOSED.wait()


# ----------------------------------------------------------------- zenoh

@contextlib.contextmanager
def _zenoh(p: dict, listen: bool):
    import zenoh

    kit.pin(p.get("cpu"))
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
        kit.say({"ready": True})
        _first(sub.try_recv)
        kit.say({"done": True, "received": kit.count_each(sub.recv, p["duration"], kit.say)})
        _drain(sub.try_recv)


def zenoh_pub(p: dict) -> None:
    with _zenoh(p, listen=False) as (zenoh, session):
        pub = session.declare_publisher("sulis-bench/throughput", congestion_control=zenoh.CongestionControl.BLOCK)
        kit.say({"ready": True})
        kit.await_until(lambda: _matched(pub), "the subscriber", 30)
        kit.say({"sent": kit.send_until(pub.put, b"\x5a" * p["size"], _stop(p))})
        kit.STDIN_CLOSED.wait()


def _zenoh_ends(zenoh, session, sub_key: str, pub_key: str):
    sub = session.declare_subscriber(sub_key)
    pub = session.declare_publisher(pub_key, congestion_control=zenoh.CongestionControl.BLOCK, express=True)
    kit.say({"ready": True})
    kit.await_until(lambda: _matched(pub), "the other side's subscriber", 30)
    return sub, pub


def zenoh_ping(p: dict) -> None:
    with _zenoh(p, listen=False) as (zenoh, session):
        sub, pub = _zenoh_ends(zenoh, session, "sulis-bench/pong", "sulis-bench/ping")
        kit.say({"rtt_ns": kit.ping_each(pub.put, sub.try_recv, b"\x5a" * p["size"], p["warmup"], p["n"],
                                         kit.idle_of(p.get("idle")))})
        kit.STDIN_CLOSED.wait()


def zenoh_pong(p: dict) -> None:
    with _zenoh(p, listen=True) as (zenoh, session):
        sub, pub = _zenoh_ends(zenoh, session, "sulis-bench/ping", "sulis-bench/pong")
        put = pub.put
        _echo(sub.try_recv, lambda s: put(s.payload), p["total"], kit.idle_of(p.get("idle")))
        kit.STDIN_CLOSED.wait()


# ----------------------------------------------------------------- iceoryx2

def _iox2(p: dict, *names: str):
    """(node, message type, one publish-subscribe service per name); the node must stay referenced."""
    import ctypes

    import iceoryx2 as iox2

    class Message(ctypes.Structure):
        _fields_ = [("data", ctypes.c_uint8 * p["size"])]

    kit.pin(p.get("cpu"))
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
    kit.say({"ready": True})
    receive = sub.receive
    _first(_iox2_taking(receive))

    def recv_one():  # the API's receive, waited for (spinning) until a sample is there
        while (sample := receive()) is None:
            pass
        sample.delete()

    kit.say({"done": True, "received": kit.count_each(recv_one, p["duration"], kit.say)})
    _drain(_iox2_taking(receive))


def iceoryx2_pub(p: dict) -> None:
    _node, message, (service,) = _iox2(p, "sulis-bench/throughput")
    pub = _iox2_publisher(service)
    kit.say({"ready": True})
    kit.await_until(lambda: service.dynamic_config.number_of_subscribers >= 1, "a subscriber", 30)
    msg = message()
    for i in range(p["size"]):
        msg.data[i] = 0x5A
    kit.say({"sent": kit.send_until(pub.send_copy, msg, _stop(p))})
    kit.STDIN_CLOSED.wait()


def iceoryx2_ping(p: dict) -> None:
    _node, message, (ping, pong) = _iox2({**p, "buffer": 16}, "sulis-bench/ping", "sulis-bench/pong")
    pub, sub = _iox2_publisher(ping), pong.subscriber_builder().create()
    kit.say({"ready": True})
    kit.await_until(lambda: ping.dynamic_config.number_of_subscribers >= 1
                    and pong.dynamic_config.number_of_publishers >= 1, "pong", 30)
    kit.say({"rtt_ns": kit.ping_each(pub.send_copy, _iox2_taking(sub.receive), message(), p["warmup"], p["n"],
                                     kit.idle_of(p.get("idle")))})
    kit.STDIN_CLOSED.wait()


def iceoryx2_pong(p: dict) -> None:
    _node, _message, (ping, pong) = _iox2({**p, "buffer": 16}, "sulis-bench/ping", "sulis-bench/pong")
    sub, pub = ping.subscriber_builder().create(), _iox2_publisher(pong)
    kit.say({"ready": True})
    kit.await_until(lambda: pong.dynamic_config.number_of_subscribers >= 1, "ping", 30)
    send = pub.send_copy

    def echo(sample):  # the received bytes, copied into a new sample
        send(sample.payload().contents)
        sample.delete()

    _echo(sub.receive, echo, p["total"], kit.idle_of(p.get("idle")))
    kit.STDIN_CLOSED.wait()


ROLES = {**kit.ROLES, "sulis-pub": sulis_pub, "sulis-ping": sulis_ping, "zmq-push": zmq_push, "zmq-req": zmq_req,
         "raw-ping": raw_ping, "raw-pong": raw_pong, "zenoh-pub": zenoh_pub, "zenoh-sub": zenoh_sub,
         "zenoh-ping": zenoh_ping, "zenoh-pong": zenoh_pong, "iceoryx2-pub": iceoryx2_pub,
         "iceoryx2-sub": iceoryx2_sub, "iceoryx2-ping": iceoryx2_ping, "iceoryx2-pong": iceoryx2_pong}

if __name__ == "__main__":
    sys.exit(kit.child_main(sys.argv[1:], ROLES))
