#!/usr/bin/env python3
"""UDP round-trip latency of sulis from Python beside its peers, 32 bytes, one command.

    python bench/udp_latency.py            # 3 rounds of 100k round trips (+10k warm-up)
    python bench/udp_latency.py --quick    # 1 short round (smoke test)

Ping and pong are two processes, each with its own media driver; two channels,
one per direction: pong's driver binds the ping channel's endpoint
``127.0.0.1:P1`` (stream 1002), ping's driver binds the pong channel's
``127.0.0.1:P2`` (stream 1003). What runs, interleaved round by round:

* sulis Python ping-pong: ping does ``t0 = perf_counter_ns(); offer(msg)``
  (retried while < 0), then ``sub.poll(handler, 1)`` until the echo arrives;
  pong echoes from its poll handler with ``pub.offer(buffer)``. 10 k warm-up
  round trips, then 100 k timed, recorded in an HdrHistogram (ns, 3
  significant digits) after the loop; figures in µs.
* sulis native Rust ping-pong (crates/sulis-bench ``udp-latency``), same shape
  and settings, no Python.
* pyzmq REQ/REP over ``tcp://127.0.0.1`` (blocking ``recv``: pyzmq's own wait).
* eclipse-zenoh: ``put`` (express) / ``try_recv`` between two sessions in peer
  mode over ``tcp/127.0.0.1``, the same wait as the sulis clients
  (``--client-idle``).
* raw UDP sockets from Python (no messaging system): the same ping-pong with
  ``sendto``/``recv`` on non-blocking sockets between two processes, the same
  wait (``--client-idle``). The floor that the kernel's loopback path and the
  interpreter put under any UDP round trip from Python on this machine.
* Aeron Java 1.15.1 (Java 11) and current (Java 17): ``AeronBench ping``/``pong``
  (bench/peers/AeronBench.java) in two JVMs, each with its own embedded media
  driver, same two UDP channels, same wait as the sulis clients. Aeron's own
  ``Ping``/``Pong`` samples always busy-spin while they wait, which on 2 cores
  starves the drivers (milliseconds per round trip); ``--aeron-samples`` adds
  them as extra rows with ``--aeron-samples-n`` round trips.

Placement on 2 cores: a round trip crosses four threads that must all be
running at once (ping, ping's driver, pong's driver, pong), so the drivers'
idle strategy, the clients' wait (``--client-idle``) and the CPU pinning
(``--pin``) decide the tail; the configuration is printed beside each figure.

Every figure printed is the median over the rounds of each percentile.
Target printed beside: p99 <= 15 µs (sulis from Python). Refuses to run on a
debug build of sulis.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402
from bench._common import encode_samples, idle_fn, json_out, pin_cpu  # noqa: E402

HOST = "127.0.0.1"
PING_STREAM = 1002
PONG_STREAM = 1003
MESSAGE_LENGTH = 32
TARGET_P99_US = 15.0
DEFAULT_CHANNEL_PARAMS = "mtu=1408"
TARGETS = {"p99_us": TARGET_P99_US}


def _udp_socket(bind_port: int = 0):
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((HOST, bind_port))
    s.setblocking(False)
    return s


# =============================================================== child roles

@contextlib.contextmanager
def _side(a: argparse.Namespace, cpu: int):
    """This side's driver and a client of it; pins before (``processes``) or after (``clients``) the
    driver's threads start."""
    import sulis

    if a.pin == "processes":
        pin_cpu(cpu)
    with sulis.MediaDriver(dir=a.dir, threading_mode=a.threading, idle_strategy=a.driver_idle,
                           dir_delete_on_shutdown=True) as driver:
        if a.pin == "clients":
            pin_cpu(cpu)
        with sulis.Client(dir=driver.dir) as client:
            yield client


def role_ping(a: argparse.Namespace) -> int:
    """Own driver + ping publication and pong subscription; times every round trip."""
    with _side(a, 0) as client:
        ping = client.add_exclusive_publication(a.ping_channel, PING_STREAM)
        pong_sub = client.add_subscription(a.pong_channel, PONG_STREAM)
        json_out({"ready": True})
        if not c.wait_until(lambda: ping.is_connected and pong_sub.image_count > 0, "pong did not connect in 30 s"):
            return 1
        samples = c.ping_loop(ping, pong_sub, b"\x5a" * MESSAGE_LENGTH, a.warmup, a.n, a.poll_mode,
                              idle=idle_fn(a.client_idle))
        # Recorded after the loop so that histogram bookkeeping is not inside the timed path.
        json_out({"hist": encode_samples(samples)})
        ping.close()
    return 0


def role_pong(a: argparse.Namespace) -> int:
    """Own driver + ping subscription and pong publication; echoes warm-up + n messages."""
    with _side(a, 1) as client:
        sub = client.add_subscription(a.ping_channel, PING_STREAM)
        pub = client.add_exclusive_publication(a.pong_channel, PONG_STREAM)
        json_out({"ready": True})
        done = c.pong_loop(sub, pub, a.warmup + a.n, a.poll_mode, idle=idle_fn(a.client_idle))
        # Let the last echo leave before the driver closes.
        time.sleep(0.05)
        json_out({"echoed": done})
    return 0


def role_raw_pong(a: argparse.Namespace) -> int:
    """Plain UDP socket: echoes warm-up + n datagrams to their sender."""
    pin_cpu(1 if a.pin != "none" else None)
    s = _udp_socket()
    json_out({"ready": True, "port": s.getsockname()[1]})
    idle = idle_fn(a.client_idle) or (lambda: None)
    recvfrom, sendto = s.recvfrom, s.sendto
    for _ in range(a.warmup + a.n):
        while True:
            try:
                data, peer = recvfrom(64)
                break
            except BlockingIOError:
                idle()
        sendto(data, peer)
    json_out({"echoed": a.warmup + a.n})
    return 0


def role_raw_ping(a: argparse.Namespace) -> int:
    """Plain UDP socket: times sendto + recv of the echo, like the sulis ping."""
    pin_cpu(0 if a.pin != "none" else None)
    s = _udp_socket()
    dest = (HOST, a.raw_port)
    msg = b"\x5a" * MESSAGE_LENGTH
    idle = idle_fn(a.client_idle) or (lambda: None)
    clock = time.perf_counter_ns
    sendto, recv = s.sendto, s.recv
    samples = [0] * a.n
    for i in range(a.warmup + a.n):
        t0 = clock()
        sendto(msg, dest)
        while True:
            try:
                recv(64)
                break
            except BlockingIOError:
                idle()
        t1 = clock()
        if i >= a.warmup:
            samples[i - a.warmup] = t1 - t0
    json_out({"hist": encode_samples(samples)})
    return 0


# =============================================================== orchestration

def describe(a: argparse.Namespace) -> str:
    return (f"drivers {a.threading}/{a.driver_idle}, clients {a.client_idle}, pin {a.pin}, "
            f"{a.channel_params or 'no channel params'}")


def python_run(a: argparse.Namespace) -> dict:
    base = c.shm_dir("sulis-bench-pyudprtt-")
    ping_port, pong_port = c.two_free_udp_ports(HOST)
    me = c.self_cmd(__file__)
    common = ["--warmup", str(a.warmup), "--n", str(a.n), "--poll-mode", a.poll_mode,
              "--ping-channel", c.udp_channel(HOST, ping_port, a.channel_params),
              "--pong-channel", c.udp_channel(HOST, pong_port, a.channel_params),
              "--threading", a.threading, "--driver-idle", a.driver_idle, "--client-idle", a.client_idle,
              "--pin", a.pin]
    r = c.run_ping_pong(me + ["--role", "pong", "--dir", os.path.join(base, "pong"), *common],
                        me + ["--role", "ping", "--dir", os.path.join(base, "ping"), *common], dirs=[base])
    r["config"] = describe(a)
    return r


def raw_run(a: argparse.Namespace) -> dict:
    me = c.self_cmd(__file__)
    common = ["--warmup", str(a.warmup), "--n", str(a.n), "--client-idle", a.client_idle, "--pin", a.pin]
    with c.Children() as ch:  # pong first: ping needs its port (ping reports no "ready")
        pong = ch.start(me + ["--role", "raw-pong", *common], "raw pong")
        port = pong.read_json(60)["port"]
        ping = ch.start(me + ["--role", "raw-ping", "--raw-port", str(port), *common], "raw ping")
        res = c.finish_ping_pong(ping, pong)
    r = c.hdr_percentiles(res["hist"])
    r["config"] = f"plain sockets, clients {a.client_idle}, pin {'processes' if a.pin != 'none' else 'none'}"
    return r


def native_run(a: argparse.Namespace) -> dict:
    exe = c.native_binary("udp-latency", build=False)
    args = ["--runs", "1", "--messages", str(a.n), "--warmup", str(a.warmup),
            "--message-length", str(MESSAGE_LENGTH), "--threading", a.threading, "--driver-idle", a.driver_idle,
            "--client-idle", a.client_idle, "--pin", a.pin, "--channel-params", a.channel_params, "--host", HOST]
    r = c.run_native(exe, args, timeout_s=600)
    r["config"] = describe(a)
    return r


def zmq_run(a: argparse.Namespace) -> dict:
    from bench.peers import zmq_peers

    r = zmq_peers.latency_run(a.n, a.warmup, MESSAGE_LENGTH, "tcp")
    r["config"] = f"pyzmq {r['pyzmq']}, TCP loopback, blocking recv"
    return r


def zenoh_run(a: argparse.Namespace) -> dict:
    from bench.peers import zenoh_peer

    r = zenoh_peer.ping_pong("tcp", n=a.n, warmup=a.warmup, size=MESSAGE_LENGTH, client_idle=a.client_idle)
    r["config"] = f"zenoh {r['zenoh']}, peer mode, TCP loopback, express, clients {a.client_idle}"
    return r


def aeron_run(jar: str, a: argparse.Namespace) -> dict:
    """AeronBench ping/pong: the same shape and wait as the sulis clients."""
    from bench.peers import aeron_java

    driver = aeron_java.AeronDriver(a.aeron_threading or a.threading, a.aeron_driver_idle or a.driver_idle)
    samples = aeron_java.udp_rtt(n_messages=a.n, warmup_messages=a.warmup, jar=jar,
                                 message_length=MESSAGE_LENGTH, host=HOST, channel_params=a.channel_params,
                                 driver=driver, client_idle=a.client_idle)
    r = c.hdr_percentiles(encode_samples(samples))
    r["config"] = (f"drivers {driver.threading}/{driver.idle}, clients {a.client_idle}, no pinning, "
                   f"{a.channel_params or 'no channel params'}")
    return r


def aeron_samples_run(jar: str, a: argparse.Namespace) -> dict:
    """Aeron's Ping/Pong samples (busy-spinning clients), fewer round trips."""
    from bench.peers import aeron_java

    driver = aeron_java.AeronDriver(a.aeron_threading or a.threading, a.aeron_driver_idle or a.driver_idle)
    r = aeron_java.udp_ping_pong(n_messages=a.aeron_samples_n, jar=jar, message_length=MESSAGE_LENGTH,
                                 warmup_iterations=1, warmup_messages=max(a.aeron_samples_n // 5, 100),
                                 host=HOST, channel_params=a.channel_params, driver=driver)
    r["config"] = (f"drivers {driver.threading}/{driver.idle}, clients busy-spin (hard-coded), "
                   f"{a.aeron_samples_n:,} round trips, {a.channel_params or 'no channel params'}")
    return r


# =============================================================== main

def main(argv=None) -> int:
    ap = c.bench_parser(__doc__, c.round_trip_args)
    ap.add_argument("--threading", default="shared", help="threading mode of every driver (default shared)")
    ap.add_argument("--driver-idle", default="yielding", help="idle strategy of every driver (default yielding)")
    ap.add_argument("--client-idle", choices=["spin", "yield"], default="yield",
                    help="what ping and pong do while they wait: sched_yield (default) or spin")
    ap.add_argument("--pin", choices=["none", "clients", "processes"], default="none",
                    help="none (default); clients: ping thread on CPU 0, pong on CPU 1, drivers unpinned; "
                         "processes: each process with its driver threads on its CPU")
    ap.add_argument("--channel-params", default=DEFAULT_CHANNEL_PARAMS,
                    help=f"channel URI parameters of both channels (default {DEFAULT_CHANNEL_PARAMS})")
    ap.add_argument("--poll-mode", choices=["handler", "batch"], default="handler",
                    help="how the Python sides poll: sub.poll(handler, 1) (default) or sub.poll_batch(1)")
    ap.add_argument("--aeron-threading", default=None, help="Aeron drivers' threading mode (default: --threading)")
    ap.add_argument("--aeron-driver-idle", default=None, help="Aeron drivers' idle strategy (default: --driver-idle)")
    ap.add_argument("--aeron-samples", action="store_true",
                    help="also run Aeron's Ping/Pong samples (busy-spinning clients: ms per round trip on 2 cores)")
    ap.add_argument("--aeron-samples-n", type=int, default=2_000,
                    help="timed round trips of the Ping/Pong samples (default 2,000)")
    c.selection_args(ap, "comma list among: python,native,raw,zmq,zenoh,aeron-1.15.1,"
                         "aeron-current,aeron-1.15.1-samples,aeron-current-samples", wait_quiet=True)
    # child roles (internal)
    ap.add_argument("--role", choices=["main", "ping", "pong", "raw-ping", "raw-pong"], default="main",
                    help=argparse.SUPPRESS)
    ap.add_argument("--raw-port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--ping-channel", help=argparse.SUPPRESS)
    ap.add_argument("--pong-channel", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    c.round_trip_defaults(a)
    if a.role != "main":
        c.child_signals()
        return {"ping": role_ping, "pong": role_pong, "raw-ping": role_raw_ping, "raw-pong": role_raw_pong}[a.role](a)

    profile = c.require_release_build()
    runs = c.rounds(a, ap)
    if a.n < 1 or a.warmup < 0 or a.aeron_samples_n < 1:
        ap.error("--n and --aeron-samples-n must be at least 1 and --warmup at least 0")
    if a.pin != "none" and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs 2 CPUs")

    variants = c.select_variants([
        ("python", "sulis Python ping-pong", lambda: python_run(a)),
        ("native", "sulis native Rust ping-pong", lambda: native_run(a)),
        ("raw", "raw UDP sockets from Python (floor)", lambda: raw_run(a)),
        ("zmq", "pyzmq REQ/REP tcp://127.0.0.1", lambda: zmq_run(a)),
        ("zenoh", "zenoh ping-pong tcp/127.0.0.1", lambda: zenoh_run(a)),
        ("aeron-1.15.1", "Aeron Java 1.15.1 AeronBench ping/pong", lambda: aeron_run("1.15.1", a)),
        ("aeron-current", "Aeron Java current AeronBench ping/pong", lambda: aeron_run("current", a)),
        ("aeron-1.15.1-samples", "Aeron Java 1.15.1 Ping/Pong samples", lambda: aeron_samples_run("1.15.1", a)),
        ("aeron-current-samples", "Aeron Java current Ping/Pong samples", lambda: aeron_samples_run("current", a)),
    ], a, ap, None if a.aeron_samples else (lambda k: k.endswith("-samples")))

    print(f"sulis UDP round trip, {MESSAGE_LENGTH} B over loopback, two drivers, two channels: {runs} round(s) of "
          f"{a.n:,} round trips after {a.warmup:,} warm-up; sulis {profile} build; {c.cpu_summary()}")
    print(f"sulis runs: {describe(a)}, Python polling with "
          f"{'sub.poll(handler, 1)' if a.poll_mode == 'handler' else 'sub.poll_batch(1)'}")
    variants = c.build_native(variants, "udp-latency", a.no_build)

    results, skipped, errors = c.run_rounds(variants, runs, a.retry_noisy, a.max_interference, c.latency_line,
                                            quiet_wait_s=a.wait_quiet)

    med = c.latency_report(variants, results, skipped, errors,
                           f"UDP round trip, {MESSAGE_LENGTH} B, µs, median of the rounds "
                           f"(target for sulis from Python: p99 <= {TARGET_P99_US:g}); "
                           "'x Py' = this row / sulis Python (> 1: slower than sulis Python):",
                           TARGETS, a.max_interference,
                           compare_with=("raw", "zmq", "zenoh", "aeron-1.15.1", "aeron-current"))

    c.save_report("udp_latency", {
        "runs": runs, "n": a.n, "warmup": a.warmup, "message_length": MESSAGE_LENGTH,
        "config": describe(a), "poll_mode": a.poll_mode,
    }, variants, med, results, skipped, errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(c.main_guard(main))
