#!/usr/bin/env python3
"""UDP throughput of sulis beside its peers, 32-byte messages, one command.

    python bench/udp_throughput.py            # 3 rounds, ~5 minutes
    python bench/udp_throughput.py --quick    # 1 short round (smoke test)
    python bench/udp_throughput.py --sweep --only native-exclusive,py-exclusive   # try driver configurations

Publisher and subscriber are two processes, each with its own media driver:
the subscriber's driver binds the endpoint ``127.0.0.1:PORT`` (a free port per
run) and the publisher's driver sends to it over loopback, as between two
hosts. What runs, interleaved round by round:

* sulis Python: the subscriber process (``sulis.MediaDriver`` embedded,
  ``client.add_subscription("aeron:udp?endpoint=127.0.0.1:PORT|<params>",
  1001)``) drains with ``sub.poll_batch(4096)``; the publisher process (its own
  embedded driver, ``client.add_exclusive_publication`` on the same channel)
  calls ``pub.offer(payload)`` once per message in a Python loop, retried while
  it returns < 0. msgs/s are counted at the receiver per one-second interval
  from its first message; the first interval is warm-up and left out; a run's
  figure is the median of the rest.
* sulis native Rust (crates/sulis-bench ``udp-throughput``): the same shape
  without Python (``ExclusivePublication::offer`` in a tight loop,
  ``Subscription::poll`` with a counting handler, limit 10 as Aeron's sample).
* Aeron Java 1.15.1 (Java 11) and current (Java 17): ``AeronBench pub`` and
  ``AeronBench rate`` (bench/peers/AeronBench.java) in two JVMs, each with its
  own embedded media driver, same channel: an exclusive publication offering in
  a loop and a subscriber polling (limit 10) that counts per second from its
  first message, with the same client idle strategy as the sulis clients
  (1.15.1's StreamingPublisher/RateSubscriber samples hard-code busy-spinning
  clients; ``--aeron-samples`` adds them as extra rows).
* pyzmq PUSH/PULL over ``tcp://127.0.0.1``: one ``send`` per message in one
  process, one ``recv`` per message in another.
* eclipse-zenoh: ``pub.put`` / ``sub.recv`` per message, two sessions in peer
  mode over ``tcp/127.0.0.1`` (zenoh's UDP links are best-effort; pyzmq and
  zenoh both use TCP here, sulis and Aeron reliable UDP).

Every row is counted at the receiver per one-second interval from its first
message; the first interval is warm-up and left out; a run's figure is the
median of the rest.

On this 2-core machine there are 4+ busy threads (two clients, two drivers),
so the drivers' idle strategy and what a client does when it cannot progress
(``--client-idle``: spin, or ``sched_yield`` after a refused offer / an empty
poll) decide the figures; the configuration used is printed beside each one.
The same driver settings and channel tunables (``--channel-params``: mtu,
term-length, rcv-wnd, so-rcvbuf as URI parameters for sulis, as the matching
``aeron.*`` properties for Aeron) go to every system unless overridden with
``--aeron-*``.

Targets printed beside: (a) sulis Python >= 8 M msgs/s; (b) sulis native
>= 1.0x Aeron Java. Refuses to run on a debug build of sulis.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402
from bench._common import idle_fn, json_out, pin_cpu  # noqa: E402

HOST = "127.0.0.1"
STREAM_ID = 1001
MESSAGE_LENGTH = 32
TARGET_PY_MSGS = 8_000_000
TARGET_VS_AERON = 1.0
OFFER_CHUNK = 8192  # offers between two checks of the stop file
DEFAULT_CHANNEL_PARAMS = "mtu=1408|rcv-wnd=2m|so-rcvbuf=4m"

# System counters (Aeron's ids, crates/sulis-driver/src/system_counters.rs).
PUB_COUNTERS = {0: "bytes_sent", 6: "naks_received", 8: "status_messages_received", 9: "heartbeats_sent",
                11: "retransmits_sent", 16: "short_sends", 18: "sender_flow_control_limits"}
SUB_COUNTERS = {1: "bytes_received", 5: "naks_sent", 7: "status_messages_sent", 10: "heartbeats_received",
                12: "flow_control_under_runs", 13: "flow_control_over_runs", 14: "invalid_packets"}


PIN_TEXT = {"none": "no CPU pinning", "sides": "publisher process on CPU 0, subscriber process on CPU 1",
            "publisher": "publishing thread alone on CPU 0, drivers and subscriber on CPU 1"}


def driver_options(text: str) -> dict:
    """``k=v,k=v`` -> dict (driver options by name, e.g. ``term_buffer_length=4m``)."""
    out = {}
    for kv in filter(None, (t.strip() for t in (text or "").split(","))):
        k, sep, v = kv.partition("=")
        if not sep:
            raise SystemExit(f"driver option {kv!r} is not name=value")
        out[k.strip()] = v.strip()
    return out


def read_counters(dir_: str, ids: dict) -> dict:
    import sulis

    reader = sulis.CountersReader(dir_)
    return {name: reader.value(i) for i, name in ids.items()}


# =============================================================== child roles

@contextlib.contextmanager
def _side(a: argparse.Namespace):
    """This side's own driver and a client of it."""
    import sulis

    # The driver's and the client conductor's threads inherit the mask they start with.
    pin_cpu(a.driver_cpu if a.driver_cpu is not None else a.pin_cpu)
    with sulis.MediaDriver(dir=a.dir, threading_mode=a.threading, idle_strategy=a.driver_idle,
                           dir_delete_on_shutdown=True, **driver_options(a.driver_options)) as driver:
        with sulis.Client(dir=driver.dir) as client:
            yield driver, client


def role_sub(a: argparse.Namespace) -> int:
    """Own driver (binds the endpoint) + subscription: counts per second from the first message."""
    with _side(a) as (driver, client):
        sub = client.add_subscription(a.channel, STREAM_ID)
        pin_cpu(a.pin_cpu)  # this thread only
        json_out({"ready": True})
        count = c.count_intervals(sub.poll_batch, a.batch, a.duration, json_out, idle=idle_fn(a.client_idle))
        if count < 0:
            return 1
        json_out({"done": True, "received": count, "counters": read_counters(driver.dir, SUB_COUNTERS)})
    return 0


def role_pub(a: argparse.Namespace) -> int:
    """Own driver + exclusive publication: offers until the stop file appears."""
    with _side(a) as (driver, client):
        pub = client.add_exclusive_publication(a.channel, STREAM_ID)
        pin_cpu(a.pin_cpu)  # this thread only
        json_out({"ready": True})
        if not c.wait_until(lambda: pub.is_connected, "no subscriber connected in 30 s"):
            return 1
        sent, refused = c.offer_loop(pub, b"\x5a" * MESSAGE_LENGTH, a.stop_file, a.max_seconds,
                                     chunk=OFFER_CHUNK, idle=idle_fn(a.client_idle))
        json_out({"sent": sent, "refused": refused, "counters": read_counters(driver.dir, PUB_COUNTERS)})
    return 0


# =============================================================== orchestration

class Config:
    """One configuration of the drivers, clients and channel (what a sweep varies)."""

    def __init__(self, threading: str, driver_idle: str, client_idle: str, channel_params: str,
                 aeron_threading: str | None = None, aeron_driver_idle: str | None = None,
                 aeron_client_idle: str | None = None):
        self.threading = threading
        self.driver_idle = driver_idle
        self.client_idle = client_idle
        self.channel_params = channel_params
        self.aeron_threading = aeron_threading or threading
        self.aeron_driver_idle = aeron_driver_idle or driver_idle
        self.aeron_client_idle = aeron_client_idle or client_idle

    def sulis(self) -> str:
        return f"drivers {self.threading}/{self.driver_idle}, clients {self.client_idle}, {self.channel_params}"

    def aeron(self, samples: bool = False, version: str = "current") -> str:
        client = "spin (hard-coded)" if samples and version == "1.15.1" else self.aeron_client_idle
        return f"drivers {self.aeron_threading}/{self.aeron_driver_idle}, clients {client}, {self.channel_params}"


def python_run(cfg: Config, a: argparse.Namespace) -> dict:
    """One run of the Python pair; msgs/s = median of the post-warm-up intervals."""
    base = c.shm_dir("sulis-bench-pyudp-")
    stop_file = os.path.join(base, "stop")
    channel = c.udp_channel(HOST, c.free_udp_port(HOST), cfg.channel_params)
    me = c.self_cmd(__file__)
    common = ["--channel", channel, "--threading", cfg.threading, "--driver-idle", cfg.driver_idle,
              "--client-idle", cfg.client_idle, "--driver-options", a.driver_options]
    # --pin sides: publisher process on CPU 0, subscriber process on CPU 1;
    # --pin publisher: the publishing thread alone on CPU 0, every other thread on CPU 1.
    pin_pub = {"none": [], "sides": ["--pin-cpu", "0"], "publisher": ["--pin-cpu", "0", "--driver-cpu", "1"]}[a.pin]
    pin_sub = [] if a.pin == "none" else ["--pin-cpu", "1"]
    samples, sub_res, pub_res = c.run_pub_sub(
        me + ["--role", "sub", "--dir", os.path.join(base, "sub"), *common,
              "--duration", str(a.duration), "--batch", str(a.batch), *pin_sub],
        me + ["--role", "pub", "--dir", os.path.join(base, "pub"), *common,
              "--stop-file", stop_file, "--max-seconds", str(a.duration + 60), *pin_pub],
        stop_file, dirs=[base])
    counters = {"publisher": pub_res["counters"], "subscriber": sub_res["counters"]}
    print(f"      counters: {_counters_line(counters)}", flush=True)
    return {"msgs_per_s": c.median(samples[1:]), "samples": samples, "sent": pub_res["sent"],
            "refused": pub_res["refused"], "counters": counters, "config": cfg.sulis() + _pin_note(a)}


def _pin_note(a: argparse.Namespace) -> str:
    return "" if a.pin == "none" else f", pin {a.pin}"


def _counters_line(counters: dict) -> str:
    p, s = counters.get("publisher") or {}, counters.get("subscriber") or {}
    keys = [("SMs", s.get("status_messages_sent")), ("NAKs", s.get("naks_sent")),
            ("retransmits", p.get("retransmits_sent")), ("sender flow-control limits", p.get("sender_flow_control_limits")),
            ("over-runs", s.get("flow_control_over_runs")), ("short sends", p.get("short_sends"))]
    return ", ".join(f"{k} {v:,}" for k, v in keys if v is not None)


def native_run(cfg: Config, a: argparse.Namespace) -> dict:
    exe = c.native_binary("udp-throughput", build=False)
    args = ["--runs", "1", "--duration", str(a.duration), "--message-length", str(MESSAGE_LENGTH),
            "--threading", cfg.threading, "--driver-idle", cfg.driver_idle, "--client-idle", cfg.client_idle,
            "--channel-params", cfg.channel_params, "--host", HOST]
    if a.driver_options:
        args += ["--driver-options", a.driver_options]
    if a.pin != "none":
        args += ["--placement", a.pin]
    r = c.run_native(exe, args, timeout_s=a.duration + 120)
    return {"msgs_per_s": r["msgs_per_s"], "samples": r["samples"][0], "counters": r["counters"][0],
            "native": r, "config": cfg.sulis() + _pin_note(a)}


def zmq_run(a: argparse.Namespace) -> dict:
    from bench.peers import zmq_peers

    r = zmq_peers.throughput_run(a.duration, MESSAGE_LENGTH, "tcp")
    r["config"] = f"pyzmq {r['pyzmq']}, TCP loopback, default HWM"
    return r


def zenoh_run(a: argparse.Namespace) -> dict:
    from bench.peers import zenoh_peer

    r = zenoh_peer.throughput("tcp", duration_s=a.duration, size=MESSAGE_LENGTH)
    r["config"] = f"zenoh {r['zenoh']}, peer mode, TCP loopback, BLOCK, default batching"
    return r


def aeron_run(jar: str, cfg: Config, a: argparse.Namespace, samples: bool = False) -> dict:
    """AeronBench pub/rate (default) or Aeron's StreamingPublisher/RateSubscriber samples."""
    from bench.peers import aeron_java

    driver = aeron_java.AeronDriver(cfg.aeron_threading, cfg.aeron_driver_idle)
    run = aeron_java.udp_throughput if samples else aeron_java.udp_rate
    r = run(duration_s=a.duration, jar=jar, message_length=MESSAGE_LENGTH, host=HOST,
            channel_params=cfg.channel_params, pub_driver=driver, sub_driver=driver, client_idle=cfg.aeron_client_idle)
    c.print_intervals(r["samples"])
    print(f"      counters: {_counters_line(r['counters'])}", flush=True)
    r["config"] = cfg.aeron(samples, "1.15.1" if jar == "1.15.1" else "current")
    return r


def build_variants(cfg: Config, a: argparse.Namespace) -> list:
    return [
        ("py-exclusive", "sulis Python ExclusivePublication.offer", lambda: python_run(cfg, a)),
        ("native-exclusive", "sulis native Rust ExclusivePublication", lambda: native_run(cfg, a)),
        ("zmq", "pyzmq PUSH/PULL tcp://127.0.0.1", lambda: zmq_run(a)),
        ("zenoh", "zenoh put/recv tcp/127.0.0.1", lambda: zenoh_run(a)),
        ("aeron-1.15.1", "Aeron Java 1.15.1 AeronBench pub/rate", lambda: aeron_run("1.15.1", cfg, a)),
        ("aeron-current", "Aeron Java current AeronBench pub/rate", lambda: aeron_run("current", cfg, a)),
        ("aeron-1.15.1-samples", "Aeron Java 1.15.1 StreamingPublisher/RateSubscriber",
         lambda: aeron_run("1.15.1", cfg, a, samples=True)),
        ("aeron-current-samples", "Aeron Java current StreamingPublisher/RateSubscriber",
         lambda: aeron_run("current", cfg, a, samples=True)),
    ]


def select(variants: list, a: argparse.Namespace, ap: argparse.ArgumentParser) -> list:
    return c.select_variants(variants, a, ap, None if a.aeron_samples else (lambda k: k.endswith("-samples")))


def sweep(a: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    """One run of the selected variants per configuration of the grid; a table sorted by rate."""
    grid = list(itertools.product(a.sweep_threading.split(","), a.sweep_driver_idle.split(","),
                                  a.sweep_client_idle.split(","), a.sweep_channel_params.split(";")))
    print(f"sweep: {len(grid)} configurations x {len(select(build_variants(Config('shared', 'busy-spin', 'spin', ''), a), a, ap))} "
          f"variant(s), 1 run of {a.duration:g} s each; {c.cpu_summary()}")
    rows, record = [], []
    for threading, didle, cidle, params in grid:
        cfg = Config(threading, didle, cidle, params)
        variants = select(build_variants(cfg, a), a, ap)
        print(f"== {cfg.sulis()}", flush=True)
        results, skipped, errors = c.run_rounds(variants, 1, a.retry_noisy, a.max_interference,
                                                lambda r: f"{r['msgs_per_s']:,.0f} msgs/s", quiet_wait_s=a.wait_quiet)
        for key, name, _ in variants:
            for r in results.get(key) or []:
                rows.append((r["msgs_per_s"], name, threading, didle, cidle, params,
                             _counters_line(r.get("counters") or {}), r.get("interference", 0)))
            for e in errors.get(key, []):
                rows.append((0.0, name, threading, didle, cidle, params, f"FAILED {e[:60]}", 0))
        record.append({"config": cfg.sulis(), "results": results, "errors": errors, "skipped": skipped})
    print()
    print(f"UDP throughput sweep, {MESSAGE_LENGTH} B messages, one run each (msgs/s):")
    rows.sort(key=lambda r: (r[1], -r[0]))
    c.print_table(["name", "msgs/s", "threading", "driver idle", "client idle", "channel params", "counters", "noise"],
                  [[n, c.fmt_rate(v), t, d, ci, p, cnt, f"{i * 100:.0f}%"] for v, n, t, d, ci, p, cnt, i in rows],
                  align="lrllllll")
    c.save_and_show("udp_throughput_sweep", {"argv": sys.argv, "duration_s": a.duration, "rows": rows,
                                             "runs": record, "machine": c.cpu_summary()})
    return 0


# =============================================================== main

def main(argv=None) -> int:
    ap = c.throughput_parser(__doc__)
    ap.add_argument("--threading", default="shared", help="threading mode of every driver (default shared)")
    ap.add_argument("--driver-idle", default="yielding",
                    help="idle strategy of every driver's agents (default yielding)")
    ap.add_argument("--client-idle", choices=["yield", "spin"], default="yield",
                    help="what a publisher does after a refused offer and a subscriber after an empty poll: "
                         "sched_yield (default) or spin")
    ap.add_argument("--channel-params", default=DEFAULT_CHANNEL_PARAMS,
                    help=f"channel URI parameters for sulis; mtu/term-length/rcv-wnd/so-rcvbuf/so-sndbuf also "
                         f"become Aeron's driver properties (default {DEFAULT_CHANNEL_PARAMS})")
    ap.add_argument("--driver-options", default="", help="more sulis driver options, k=v,k=v")
    ap.add_argument("--aeron-threading", default=None, help="Aeron's threading mode (default: --threading)")
    ap.add_argument("--aeron-driver-idle", default=None, help="Aeron's driver idle strategy (default: --driver-idle)")
    ap.add_argument("--aeron-client-idle", default=None,
                    help="idle strategy of Aeron's clients: AeronBench's (yield or spin) and, with "
                         "--aeron-samples, aeron.sample.idleStrategy of current Aeron's samples (default: "
                         "--client-idle; 1.15.1's samples always spin)")
    ap.add_argument("--aeron-samples", action="store_true",
                    help="also run Aeron's StreamingPublisher/RateSubscriber samples (1.15.1's clients spin)")
    ap.add_argument("--pin", choices=["none", "sides", "publisher"], default="none",
                    help="sulis CPU placement: none (default); sides: publisher process (its driver included) on "
                         "CPU 0, subscriber process on CPU 1; publisher: the publishing thread alone on CPU 0, "
                         "both drivers and the subscriber on CPU 1")
    c.selection_args(ap, "comma list among: py-exclusive,native-exclusive,zmq,zenoh,"
                         "aeron-1.15.1,aeron-current,aeron-1.15.1-samples,"
                         "aeron-current-samples", wait_quiet=True)
    ap.add_argument("--sweep", action="store_true",
                    help="instead of the comparison: one run per configuration of --sweep-* (cartesian product)")
    ap.add_argument("--sweep-threading", default="shared,shared-network,dedicated")
    ap.add_argument("--sweep-driver-idle", default="busy-spin,yielding,backoff")
    ap.add_argument("--sweep-client-idle", default="yield,spin")
    ap.add_argument("--sweep-channel-params", default=None,
                    help="';'-separated list of channel parameter sets (default: --channel-params)")
    # child roles (internal)
    c.pub_sub_role_args(ap)
    ap.add_argument("--channel", help=argparse.SUPPRESS)
    ap.add_argument("--driver-cpu", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.role != "main":
        return c.pub_sub_child(a, role_pub, role_sub)

    profile = c.require_release_build()
    runs = c.throughput_checks(a, ap)
    if a.aeron_client_idle not in (None, "yield", "spin"):
        ap.error("--aeron-client-idle must be yield or spin")
    a.sweep_channel_params = a.sweep_channel_params or a.channel_params
    if a.pin != "none" and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs 2 CPUs")
    driver_options(a.driver_options)  # validate

    cfg = Config(a.threading, a.driver_idle, a.client_idle, a.channel_params,
                 a.aeron_threading, a.aeron_driver_idle, a.aeron_client_idle)
    variants = c.build_native(select(build_variants(cfg, a), a, ap), "udp-throughput", a.no_build)
    if a.sweep:
        return sweep(a, ap)

    print(f"sulis UDP throughput, {MESSAGE_LENGTH} B messages over loopback, two drivers: {runs} round(s), "
          f"{a.duration:g} s per run (every system: per-second counts at the receiver, first second = warm-up); "
          f"sulis {profile} build; {c.cpu_summary()}")
    print(f"sulis: {cfg.sulis()}, Python poll_batch({a.batch}); "
          f"CPU placement: {PIN_TEXT[a.pin]}")
    print(f"Aeron: {cfg.aeron()}" + (" (1.15.1's sample clients spin)" if a.aeron_samples else ""))

    results, skipped, errors = c.run_rounds(variants, runs, a.retry_noisy, a.max_interference,
                                            lambda r: f"{r['msgs_per_s']:,.0f} msgs/s", quiet_wait_s=a.wait_quiet)

    med = c.rate_medians(results)
    zmq = med.get("zmq")
    a115 = med.get("aeron-1.15.1")
    acur = med.get("aeron-current")
    py = med.get("py-exclusive")
    print()
    print(f"UDP throughput, {MESSAGE_LENGTH} B messages, median of the rounds (msgs/s); "
          "'vs X' = this row's median / X's median:")
    c.print_throughput_table(variants, results, skipped, errors, med,
                             [("vs 8M", TARGET_PY_MSGS), ("vs sulis Py", py), ("vs pyzmq", zmq),
                              ("vs Aeron 1.15.1", a115), ("vs Aeron current", acur)])

    print()
    print("targets:")
    if py:
        print(f"  (a) sulis Python exclusive offer >= 8 M msgs/s: {py / 1e6:.2f} M = {py / TARGET_PY_MSGS:.2f}x "
              f"-> {c.verdict(py >= TARGET_PY_MSGS)}")
    nat = med.get("native-exclusive")
    for label, ref in (("1.15.1", a115), ("current", acur)):
        if nat and ref:
            print(f"  (b) sulis native >= 1.0x Aeron Java {label} ({ref / 1e6:.2f} M): {nat / 1e6:.2f} M = "
                  f"{nat / ref:.2f}x -> {c.verdict(nat / ref >= TARGET_VS_AERON)}")
    c.print_notes(results, errors, c.variant_names(variants), a.max_interference)

    c.save_report("udp_throughput", {
        "runs": runs, "duration_s": a.duration, "message_length": MESSAGE_LENGTH,
        "sulis_config": cfg.sulis(), "aeron_config": cfg.aeron(), "pin": a.pin,
    }, variants, med, results, skipped, errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(c.main_guard(main))
