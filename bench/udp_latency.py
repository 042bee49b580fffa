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
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    LATENCY_KEYS as KEYS,
    Child,
    Skip,
    child_signals,
    cpu_summary,
    encode_samples,
    fmt_ratio,
    free_udp_port,
    hdr_percentiles,
    json_out,
    latency_line,
    main_guard,
    median,
    missing_text,
    native_binary,
    parse_only,
    pin_cpu,
    ping_loop,
    pong_loop,
    print_table,
    require_release_build,
    rm_tree,
    run_native,
    run_rounds,
    save_results,
    shm_dir,
    stop_all,
)

HOST = "127.0.0.1"
PING_STREAM = 1002
PONG_STREAM = 1003
MESSAGE_LENGTH = 32
TARGET_P99_US = 15.0
DEFAULT_CHANNEL_PARAMS = "mtu=1408"


def channel_of(port: int, params: str) -> str:
    return "|".join([f"aeron:udp?endpoint={HOST}:{port}", *filter(None, params.split("|"))])


def _idle(client_idle: str):
    return os.sched_yield if client_idle == "yield" else None


def _udp_socket(bind_port: int = 0):
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((HOST, bind_port))
    s.setblocking(False)
    return s


# =============================================================== child roles

def _driver(a: argparse.Namespace, cpu: int):
    """Launches this side's driver; pins before (``processes``) or after (``clients``) its threads start."""
    import sulis

    if a.pin == "processes":
        pin_cpu(cpu)
    driver = sulis.MediaDriver(dir=a.dir, threading_mode=a.threading, idle_strategy=a.driver_idle,
                               dir_delete_on_shutdown=True)
    if a.pin == "clients":
        pin_cpu(cpu)
    return driver


def role_ping(a: argparse.Namespace) -> int:
    """Own driver + ping publication and pong subscription; times every round trip."""
    import sulis

    with _driver(a, 0) as driver:
        with sulis.Client(dir=driver.dir) as client:
            ping = client.add_exclusive_publication(a.ping_channel, PING_STREAM)
            pong_sub = client.add_subscription(a.pong_channel, PONG_STREAM)
            json_out({"ready": True})
            deadline = time.monotonic() + 30
            while not (ping.is_connected and pong_sub.image_count > 0):
                if time.monotonic() > deadline:
                    json_out({"error": "pong did not connect in 30 s"})
                    return 1
                time.sleep(0.001)
            samples = ping_loop(ping, pong_sub, b"\x5a" * MESSAGE_LENGTH, a.warmup, a.n, a.poll_mode,
                                idle=_idle(a.client_idle))
            # Recorded after the loop so that histogram bookkeeping is not inside the timed path.
            json_out({"hist": encode_samples(samples)})
            ping.close()
    return 0


def role_pong(a: argparse.Namespace) -> int:
    """Own driver + ping subscription and pong publication; echoes warm-up + n messages."""
    import sulis

    with _driver(a, 1) as driver:
        with sulis.Client(dir=driver.dir) as client:
            sub = client.add_subscription(a.ping_channel, PING_STREAM)
            pub = client.add_exclusive_publication(a.pong_channel, PONG_STREAM)
            json_out({"ready": True})
            done = pong_loop(sub, pub, a.warmup + a.n, a.poll_mode, idle=_idle(a.client_idle))
            # Let the last echo leave before the driver closes.
            time.sleep(0.05)
            json_out({"echoed": done})
    return 0


def role_raw_pong(a: argparse.Namespace) -> int:
    """Plain UDP socket: echoes warm-up + n datagrams to their sender."""
    pin_cpu(1 if a.pin != "none" else None)
    s = _udp_socket()
    json_out({"ready": True, "port": s.getsockname()[1]})
    idle = _idle(a.client_idle) or (lambda: None)
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
    idle = _idle(a.client_idle) or (lambda: None)
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
    base = shm_dir("sulis-bench-pyudprtt-")
    ping_port = free_udp_port(HOST)
    pong_port = free_udp_port(HOST)
    while pong_port == ping_port:
        pong_port = free_udp_port(HOST)
    me = [sys.executable, os.path.abspath(__file__)]
    common = ["--warmup", str(a.warmup), "--n", str(a.n), "--poll-mode", a.poll_mode,
              "--ping-channel", channel_of(ping_port, a.channel_params),
              "--pong-channel", channel_of(pong_port, a.channel_params),
              "--threading", a.threading, "--driver-idle", a.driver_idle, "--client-idle", a.client_idle,
              "--pin", a.pin]
    ping = pong = None
    try:
        pong = Child(me + ["--role", "pong", "--dir", os.path.join(base, "pong"), *common], "pong")
        pong.read_json(60)
        ping = Child(me + ["--role", "ping", "--dir", os.path.join(base, "ping"), *common], "ping")
        ping.read_json(60)
        res = ping.read_json(600, watch=[pong])
        pong.read_json(60)
        ping.wait_ok(30)
        pong.wait_ok(30)
    finally:
        stop_all((ping, pong))
        rm_tree(base)
    r = hdr_percentiles(res["hist"])
    r["hdrh_encoded"] = res["hist"]
    r["config"] = describe(a)
    return r


def raw_run(a: argparse.Namespace) -> dict:
    me = [sys.executable, os.path.abspath(__file__)]
    common = ["--warmup", str(a.warmup), "--n", str(a.n), "--client-idle", a.client_idle, "--pin", a.pin]
    ping = pong = None
    try:
        pong = Child(me + ["--role", "raw-pong", *common], "raw pong")
        port = pong.read_json(60)["port"]
        ping = Child(me + ["--role", "raw-ping", "--raw-port", str(port), *common], "raw ping")
        res = ping.read_json(600, watch=[pong])
        pong.read_json(60)
        ping.wait_ok(30)
        pong.wait_ok(30)
    finally:
        stop_all((ping, pong))
    r = hdr_percentiles(res["hist"])
    r["config"] = f"plain sockets, clients {a.client_idle}, pin {'processes' if a.pin != 'none' else 'none'}"
    return r


def native_run(a: argparse.Namespace) -> dict:
    exe = native_binary("udp-latency", build=False)
    args = ["--runs", "1", "--messages", str(a.n), "--warmup", str(a.warmup),
            "--message-length", str(MESSAGE_LENGTH), "--threading", a.threading, "--driver-idle", a.driver_idle,
            "--client-idle", a.client_idle, "--pin", a.pin, "--channel-params", a.channel_params, "--host", HOST]
    r = run_native(exe, args, timeout_s=600)
    r["config"] = describe(a)
    return r


def zmq_run(a: argparse.Namespace) -> dict:
    try:
        from bench.peers import zmq_peers
        import zmq  # noqa: F401
        import hdrh  # noqa: F401
    except ImportError as exc:
        raise Skip(f"pyzmq/hdrhistogram not installed ({exc}); run `bash bench/peers/install.sh`") from None
    r = zmq_peers.req_rep_latency(n=a.n, warmup=a.warmup, size=MESSAGE_LENGTH, transport="tcp")
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
    try:
        samples = aeron_java.udp_rtt(n_messages=a.n, warmup_messages=a.warmup, jar=jar,
                                     message_length=MESSAGE_LENGTH, host=HOST, channel_params=a.channel_params,
                                     driver=driver, client_idle=a.client_idle)
    except aeron_java.PeerNotFound as exc:
        raise Skip(str(exc)) from None
    r = hdr_percentiles(encode_samples(samples))
    r["config"] = (f"drivers {driver.threading}/{driver.idle}, clients {a.client_idle}, no pinning, "
                   f"{a.channel_params or 'no channel params'}")
    return r


def aeron_samples_run(jar: str, a: argparse.Namespace) -> dict:
    """Aeron's Ping/Pong samples (busy-spinning clients), fewer round trips."""
    from bench.peers import aeron_java

    driver = aeron_java.AeronDriver(a.aeron_threading or a.threading, a.aeron_driver_idle or a.driver_idle)
    try:
        r = aeron_java.udp_ping_pong(n_messages=a.aeron_samples_n, jar=jar, message_length=MESSAGE_LENGTH,
                                     warmup_iterations=1, warmup_messages=max(a.aeron_samples_n // 5, 100),
                                     host=HOST, channel_params=a.channel_params, driver=driver)
    except aeron_java.PeerNotFound as exc:
        raise Skip(str(exc)) from None
    r["config"] = (f"drivers {driver.threading}/{driver.idle}, clients busy-spin (hard-coded), "
                   f"{a.aeron_samples_n:,} round trips, {a.channel_params or 'no channel params'}")
    return r


# =============================================================== main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=None, help="rounds per variant (default 3; --quick: 1)")
    ap.add_argument("--n", type=int, default=None, help="timed round trips per run (default 100,000)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed round trips first (default 10,000)")
    ap.add_argument("--quick", action="store_true", help="one short round: a smoke test, not a measurement")
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
    ap.add_argument("--only", default="", help="comma list among: python,native,raw,zmq,zenoh,aeron-1.15.1,"
                                               "aeron-current,aeron-1.15.1-samples,aeron-current-samples")
    ap.add_argument("--no-aeron-current", action="store_true", help="skip the current Aeron release")
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build for the native binary")
    ap.add_argument("--max-interference", type=float, default=0.10,
                    help="a run during which other processes used more than this share of a CPU is noisy "
                         "(default 0.10)")
    ap.add_argument("--retry-noisy", type=int, default=2, help="times a noisy run is repeated (default 2)")
    ap.add_argument("--wait-quiet", type=float, default=60.0,
                    help="before each run, wait up to this many seconds for other processes to stay under "
                         "--max-interference for a second (default 60; 0: do not wait)")
    # child roles (internal)
    ap.add_argument("--role", choices=["main", "ping", "pong", "raw-ping", "raw-pong"], default="main",
                    help=argparse.SUPPRESS)
    ap.add_argument("--raw-port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--ping-channel", help=argparse.SUPPRESS)
    ap.add_argument("--pong-channel", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    a.n = a.n or (20_000 if a.quick else 100_000)
    a.warmup = a.warmup if a.warmup is not None else (2_000 if a.quick else 10_000)
    if a.role != "main":
        child_signals()
        return {"ping": role_ping, "pong": role_pong, "raw-ping": role_raw_ping, "raw-pong": role_raw_pong}[a.role](a)

    profile = require_release_build()
    if a.runs is not None and a.runs < 1:
        ap.error("--runs must be at least 1")
    if a.n < 1 or a.warmup < 0 or a.aeron_samples_n < 1:
        ap.error("--n and --aeron-samples-n must be at least 1 and --warmup at least 0")
    runs = a.runs or (1 if a.quick else 3)
    if a.pin != "none" and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs 2 CPUs")

    variants = [
        ("python", "sulis Python ping-pong", lambda: python_run(a)),
        ("native", "sulis native Rust ping-pong", lambda: native_run(a)),
        ("raw", "raw UDP sockets from Python (floor)", lambda: raw_run(a)),
        ("zmq", "pyzmq REQ/REP tcp://127.0.0.1", lambda: zmq_run(a)),
        ("zenoh", "zenoh ping-pong tcp/127.0.0.1", lambda: zenoh_run(a)),
        ("aeron-1.15.1", "Aeron Java 1.15.1 AeronBench ping/pong", lambda: aeron_run("1.15.1", a)),
        ("aeron-current", "Aeron Java current AeronBench ping/pong", lambda: aeron_run("current", a)),
        ("aeron-1.15.1-samples", "Aeron Java 1.15.1 Ping/Pong samples", lambda: aeron_samples_run("1.15.1", a)),
        ("aeron-current-samples", "Aeron Java current Ping/Pong samples", lambda: aeron_samples_run("current", a)),
    ]
    if not a.aeron_samples and not a.only:
        variants = [v for v in variants if not v[0].endswith("-samples")]
    if a.no_aeron_current:
        variants = [v for v in variants if not v[0].startswith("aeron-current")]
    variants = parse_only(a.only, variants, ap)

    print(f"sulis UDP round trip, {MESSAGE_LENGTH} B over loopback, two drivers, two channels: {runs} round(s) of "
          f"{a.n:,} round trips after {a.warmup:,} warm-up; sulis {profile} build; {cpu_summary()}")
    print(f"sulis runs: {describe(a)}, Python polling with "
          f"{'sub.poll(handler, 1)' if a.poll_mode == 'handler' else 'sub.poll_batch(1)'}")
    if any(k == "native" for k, _, _ in variants):
        try:
            native_binary("udp-latency", build=not a.no_build)
        except Skip as exc:
            print(f"[skip] native Rust: {exc}")
            variants = [v for v in variants if v[0] != "native"]

    results, skipped, errors = run_rounds(variants, runs, a.retry_noisy, a.max_interference, latency_line,
                                          quiet_wait_s=a.wait_quiet)

    med = {k: {q: median(r[q] for r in rs) for q in KEYS} for k, rs in results.items() if rs}
    names = {k: n for k, n, _ in variants}
    print()
    print(f"UDP round trip, {MESSAGE_LENGTH} B, µs, median of the rounds "
          f"(target for sulis from Python: p99 <= {TARGET_P99_US:g}); "
          "'x Py' = this row / sulis Python (> 1: slower than sulis Python):")
    py_med = med.get("python")
    rows = []
    for key, name, _ in variants:
        if key not in med:
            rows.append([name, missing_text(key, skipped, errors), "", "", "", "", "", "", "0", ""])
            continue
        m = med[key]
        rows.append([name, *(f"{m[q]:.2f}" for q in KEYS),
                     fmt_ratio(m["p50_us"] / py_med["p50_us"]) if py_med else "-",
                     fmt_ratio(m["p99_us"] / py_med["p99_us"]) if py_med else "-",
                     str(len(results[key])), results[key][0].get("config", "")])
    rows.append(["target (sulis Python)", "", "", f"<= {TARGET_P99_US:g}", "", "", "", "", "", ""])
    print_table(["name", "p50", "p90", "p99", "p99.9", "max", "p50 x Py", "p99 x Py", "runs", "configuration"],
                rows, align="lrrrrrrrrl")

    print()
    print("targets:")
    py = med.get("python")
    if py:
        print(f"  sulis Python p99 <= {TARGET_P99_US:g} µs: {py['p99_us']:.2f} µs -> "
              f"{'MET' if py['p99_us'] <= TARGET_P99_US else 'MISSED'}")
        for key in ("raw", "zmq", "zenoh", "aeron-1.15.1", "aeron-current"):
            if key in med:
                print(f"  sulis Python vs {names[key]}: p50 {med[key]['p50_us'] / py['p50_us']:.2f}x, "
                      f"p99 {med[key]['p99_us'] / py['p99_us']:.2f}x (>1: sulis lower)")
    noisy = [(names[k], i + 1, r["interference"]) for k, rs in results.items() for i, r in enumerate(rs)
             if r.get("interference", 0) > a.max_interference]
    for name, i, share in noisy:
        print(f"  note: {name} run {i} is noisy: other processes used {share * 100:.0f}% of a CPU during it")
    for k, errs in errors.items():
        print(f"  note: {names[k]} failed {len(errs)} time(s): {errs[0][:300]}")

    strip = lambda r: {k: v for k, v in r.items() if k != "hdrh_encoded"}  # noqa: E731
    path = save_results("udp_latency", {
        "argv": sys.argv, "runs": runs, "n": a.n, "warmup": a.warmup, "message_length": MESSAGE_LENGTH,
        "config": describe(a), "poll_mode": a.poll_mode,
        "medians": {names[k]: v for k, v in med.items()},
        "results": {names[k]: [strip(r) for r in v] for k, v in results.items()},
        "skipped": skipped, "errors": errors, "machine": cpu_summary(),
    })
    if path:
        print(f"\n(details: {path.relative_to(Path(__file__).resolve().parent.parent)})")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main_guard(main))
