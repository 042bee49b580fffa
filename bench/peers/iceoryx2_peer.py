#!/usr/bin/env python3
"""iceoryx2 (PyPI ``iceoryx2``) as a benchmark peer: zero-copy shared-memory IPC from Python.

Two processes, each an iceoryx2 node (``ServiceType.Ipc``, shared memory), one
publish-subscribe service per direction whose payload is a fixed-size 32-byte
``ctypes.Structure``:

* ``throughput``: the publisher calls ``publisher.send_copy(msg)`` once per
  message (iceoryx2's Python API: loan a sample, copy the 32 bytes in, send);
  the subscriber calls ``subscriber.receive()`` once per message and releases
  the sample (``sample.delete()``). The service does not overflow
  (``enable_safe_overflow(False)``) and the publisher retries until the sample
  is delivered (``BackpressureStrategy.RetryUntilDelivered``), so nothing is
  lost and a full subscriber buffer (``--buffer``, default 4096 samples, the
  same order as sulis' poll_batch(4096)) back-pressures the publisher as a full
  term does in sulis. Counted at the receiver per one-second interval from the
  first message; the first interval is warm-up; the figure is the median of
  the rest (as for sulis, pyzmq and Aeron).
* ``ping_pong``: ping ``send_copy`` on one service, then ``receive()`` on the
  other until the echo is there; pong receives and sends the payload back with
  ``send_copy``. Both spin (or call ``idle``) between tries, as the sulis
  Python ping does. Round trips (``perf_counter_ns``) after the warm-up go into
  an HdrHistogram.

Every run uses its own iceoryx2 configuration: ``global.root_path`` in a
fresh directory (removed afterwards) and a ``global.prefix`` unique to the run,
so the shared-memory files iceoryx2 creates in /dev/shm
(``sulis-bench-iox2-<pid>-<hex>_...``) are removed by prefix after the run,
even when a process had to be killed (and by the next benchmark's
``remove_stale`` if the orchestrator itself was killed). The nodes do not install iceoryx2's own signal handlers
(``SignalHandlingMode.Disabled``): SIGTERM ends a role through Python.
"""
from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench import _common as c  # noqa: E402
from bench._common import idle_fn, json_out, pin_cpu  # noqa: E402
from bench.peers import _shared  # noqa: E402

SERVICE_TP = "sulis-bench/throughput"
SERVICE_PING = "sulis-bench/ping"
SERVICE_PONG = "sulis-bench/pong"


def available() -> str:
    """The installed iceoryx2 version; raises Skip when it cannot be imported."""
    return _shared.available("iceoryx2", "iceoryx2")


# =============================================================== child roles

def _message_type(size: int):
    import ctypes

    class Message(ctypes.Structure):
        _fields_ = [("data", ctypes.c_uint8 * size)]

    return Message


def _node(a: argparse.Namespace):
    import iceoryx2 as iox2

    iox2.set_log_level(iox2.LogLevel.Error)
    cfg = iox2.config.default()
    cfg.global_cfg.prefix = iox2.FileName.new(a.prefix)
    cfg.global_cfg.root_path = iox2.Path.new(a.root.rstrip("/") + "/")
    return (iox2.NodeBuilder.new().config(cfg)
            .signal_handling_mode(iox2.SignalHandlingMode.Disabled)
            .create(iox2.ServiceType.Ipc))


def _service(node, name: str, message_type, buffer: int):
    import iceoryx2 as iox2

    return (node.service_builder(iox2.ServiceName.new(name))
            .publish_subscribe(message_type)
            .enable_safe_overflow(False)
            .subscriber_max_buffer_size(buffer)
            .history_size(0)
            .max_publishers(1)
            .max_subscribers(1)
            .open_or_create())


def _publisher(service):
    import iceoryx2 as iox2

    return service.publisher_builder().backpressure_strategy(iox2.BackpressureStrategy.RetryUntilDelivered).create()


def _await(cond, what: str) -> bool:
    return c.wait_until(cond, f"{what} not there after 30 s")


def _deleting(receive):
    """``receive`` that releases the sample it got (returned only to say whether there was one)."""
    def try_recv():
        s = receive()
        if s is not None:
            s.delete()
        return s

    return try_recv


def role_sub(a: argparse.Namespace) -> int:
    pin_cpu(a.pin_cpu)
    node = _node(a)
    service = _service(node, SERVICE_TP, _message_type(a.size), a.buffer)
    sub = service.subscriber_builder().buffer_size(a.buffer).create()
    json_out({"ready": True})
    receive = sub.receive
    if _shared.first_message(_deleting(receive)) is None:
        return 1

    def recv_one():  # the API's receive, waited for (spinning) until a sample is there
        while (sample := receive()) is None:
            pass
        sample.delete()

    count = c.count_intervals_each(recv_one, a.duration, json_out)
    json_out({"done": True, "received": count})
    # Keep draining until the publisher has stopped (it sees the stop file
    # only between sends, and a send waits while our buffer is full).
    _shared.drain_until(_deleting(receive), a.stop_file + ".sub")
    return 0


def role_pub(a: argparse.Namespace) -> int:
    pin_cpu(a.pin_cpu)
    node = _node(a)
    service = _service(node, SERVICE_TP, _message_type(a.size), a.buffer)
    pub = _publisher(service)
    json_out({"ready": True})
    if not _await(lambda: service.dynamic_config.number_of_subscribers >= 1, "a subscriber"):
        return 1
    msg = _message_type(a.size)()
    for i in range(a.size):
        msg.data[i] = 0x5A
    json_out({"sent": _shared.send_until_stopped(pub.send_copy, msg, a.stop_file)})
    return 0


def _ping_pong_services(a: argparse.Namespace):
    """(node, message type, ping service, pong service) of a ping or pong role (pinned first);
    the caller holds the node for as long as the role runs."""
    pin_cpu(a.pin_cpu)
    node = _node(a)
    mtype = _message_type(a.size)
    return node, mtype, _service(node, SERVICE_PING, mtype, 16), _service(node, SERVICE_PONG, mtype, 16)


def role_ping(a: argparse.Namespace) -> int:
    node, mtype, ping_service, pong_service = _ping_pong_services(a)  # noqa: F841 (node: kept alive)
    pub = _publisher(ping_service)
    sub = pong_service.subscriber_builder().create()
    json_out({"ready": True})
    if not _await(lambda: ping_service.dynamic_config.number_of_subscribers >= 1
                  and pong_service.dynamic_config.number_of_publishers >= 1, "pong"):
        return 1
    samples = c.ping_loop_each(pub.send_copy, _deleting(sub.receive), mtype(), a.warmup, a.n, idle_fn(a.client_idle))
    json_out({"hist": c.encode_samples(samples)})
    return 0


def role_pong(a: argparse.Namespace) -> int:
    node, _mtype, ping_service, pong_service = _ping_pong_services(a)  # noqa: F841 (node: kept alive)
    sub = ping_service.subscriber_builder().create()
    pub = _publisher(pong_service)
    json_out({"ready": True})
    if not _await(lambda: pong_service.dynamic_config.number_of_subscribers >= 1, "ping"):
        return 1
    receive, send = sub.receive, pub.send_copy
    idle = idle_fn(a.client_idle)
    done, total = 0, a.warmup + a.n
    while done < total:
        s = receive()
        if s is None:
            if idle is not None:
                idle()
            continue
        send(s.payload().contents)  # the received 32 bytes, copied into a new sample
        s.delete()
        done += 1
    json_out({"echoed": done})
    return 0


# =============================================================== orchestration

def _run_dir() -> tuple[str, str]:
    """(root directory, /dev/shm prefix) for one run."""
    return c.shm_dir("sulis-bench-iox2root-"), f"sulis-bench-iox2-{os.getpid()}-{uuid.uuid4().hex[:12]}_"


def throughput(duration_s: float = 6.0, size: int = 32, buffer: int = 4096, pin: bool = False,
               timeout_s: float = 60.0) -> dict:
    """One run: publisher and subscriber processes; msgs/s = median of the intervals after the warm-up."""
    version = available()
    root, prefix = _run_dir()
    stop_file = os.path.join(root, "stop")
    me = c.self_cmd(__file__)
    common = ["--root", root, "--prefix", prefix, "--size", str(size), "--buffer", str(buffer),
              "--stop-file", stop_file]
    samples, done, pub_res = c.run_pub_sub(
        me + ["--role", "sub", "--duration", str(duration_s), *common, *c.pin_args(1, pin)],
        me + ["--role", "pub", *common, *c.pin_args(0, pin)],
        stop_file, "iceoryx2 ", timeout_s, sub_stop=True, dirs=[root], after=lambda: c.remove_shm_prefix(prefix))
    return {"msgs_per_s": c.median(samples[1:]), "samples": samples, "received": done["received"],
            "sent": pub_res["sent"], "iceoryx2": version,
            "config": f"iceoryx2 {version} ipc (shared memory), send_copy/receive, subscriber buffer {buffer}, "
                      "no overflow, RetryUntilDelivered"}


def ping_pong(n: int = 100_000, warmup: int = 10_000, size: int = 32, client_idle: str = "spin",
              pin: bool = False, timeout_s: float = 600.0) -> dict:
    """One run of ping-pong round trips; percentiles (µs) from an HdrHistogram of the timed ones."""
    version = available()
    root, prefix = _run_dir()
    me = c.self_cmd(__file__)
    common = ["--root", root, "--prefix", prefix, "--size", str(size), "--n", str(n), "--warmup", str(warmup),
              "--client-idle", client_idle]
    r = c.run_ping_pong(me + ["--role", "pong", *common, *c.pin_args(1, pin)],
                        me + ["--role", "ping", *common, *c.pin_args(0, pin)], "iceoryx2 ", timeout_s,
                        dirs=[root], after=lambda: c.remove_shm_prefix(prefix))
    r["iceoryx2"] = version
    r["config"] = (f"iceoryx2 {version} ipc (shared memory), send_copy/receive, clients {client_idle}"
                   + (", ping CPU 0 / pong CPU 1" if pin else ""))
    return r


def _own_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--root", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--buffer", type=int, default=4096)


def main(argv=None) -> int:
    return _shared.role_main(argv, __doc__, {"sub": role_sub, "pub": role_pub, "ping": role_ping, "pong": role_pong},
                             _own_args)


if __name__ == "__main__":
    sys.exit(main())
