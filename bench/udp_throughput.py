#!/usr/bin/env python3
"""UDP throughput of sulis beside its peers, 32-byte messages, one command.

    python bench/udp_throughput.py            # 3 rounds, ~5 minutes
    python bench/udp_throughput.py --quick    # 1 short round (smoke test)
    python bench/udp_throughput.py --sweep --only native-exclusive,py-exclusive   # try driver configurations

Publisher and subscriber are two processes with a media driver each, over loopback. Rows: sulis
from Python and native Rust, pyzmq and zenoh over TCP, Aeron Java 1.15.1 and current (AeronPeer;
``--aeron-samples``: Aeron's StreamingPublisher/RateSubscriber too), the same driver, client and
channel settings for sulis and Aeron; drivers' counters after each run. Targets: (a) sulis Python >=
8 M msgs/s, (b) native >= 1.0x Aeron Java. bench/README.md says what each row runs.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

HOST, STREAM = "127.0.0.1", 1001
DEFAULT_CHANNEL_PARAMS = "mtu=1408|rcv-wnd=2m|so-rcvbuf=4m"
VARIANTS = ("py-exclusive,native-exclusive,zmq,zenoh,aeron-1.15.1,aeron-current,aeron-1.15.1-samples,"
            "aeron-current-samples")
PIN_TEXT = {"none": "no CPU pinning", "sides": "publisher process on CPU 0, subscriber process on CPU 1",
            "publisher": "publishing thread alone on CPU 0, drivers and subscriber on CPU 1"}


@dataclasses.dataclass
class Config:
    """One configuration of the drivers, clients and channel (what a sweep varies)."""

    threading: str
    driver_idle: str
    client_idle: str
    channel_params: str
    aeron_threading: str | None = None
    aeron_driver_idle: str | None = None
    aeron_client_idle: str | None = None

    def sulis(self) -> str:
        return f"drivers {self.threading}/{self.driver_idle}, clients {self.client_idle}, {self.channel_params}"

    def aeron(self, spinning_samples: bool = False) -> str:
        client = "spin (hard-coded)" if spinning_samples else self.aeron_client_idle or self.client_idle
        return (f"drivers {self.aeron_threading or self.threading}/{self.aeron_driver_idle or self.driver_idle}, "
                f"clients {client}, {self.channel_params}")


def driver_options(text: str) -> dict:
    """``k=v,k=v`` -> more sulis driver options."""
    pairs = [kv.partition("=") for kv in filter(None, (t.strip() for t in (text or "").split(",")))]
    if any(not sep for _, sep, _ in pairs):
        raise SystemExit(f"--driver-options must be name=value,..., not {text!r}")
    return {k.strip(): v.strip() for k, _, v in pairs}


def counters_line(counters: dict) -> str:
    p, s = counters.get("publisher") or {}, counters.get("subscriber") or {}
    keys = [("SMs", s.get("status_messages_sent")), ("NAKs", s.get("naks_sent")),
            ("retransmits", p.get("retransmits_sent")),
            ("sender flow-control limits", p.get("sender_flow_control_limits")),
            ("over-runs", s.get("flow_control_over_runs")), ("short sends", p.get("short_sends"))]
    return ", ".join(f"{k} {v:,}" for k, v in keys if v is not None)


def sulis_run(cfg: Config, a, kind: str) -> dict:
    base = c.shm_dir("sulis-bench-udptp-")
    stop = os.path.join(base, "stop")
    channel = c.udp_channel(HOST, c.free_port(HOST), cfg.channel_params)
    driver = {"threading_mode": cfg.threading, "idle_strategy": cfg.driver_idle, **driver_options(a.driver_options)}
    common = {"channel": channel, "stream": STREAM, "driver": driver, "idle": cfg.client_idle}
    pin_pub = {"none": {}, "sides": c.pins(0, driver=True), "publisher": {"driver_cpu": 1, "loop_cpu": 0}}[a.pin]
    pin_sub = {} if a.pin == "none" else c.pins(1, driver=True)
    role = c.py_role if kind == "py" else c.native_role
    sub = role("sulis-sub" if kind == "py" else "sub", dir=f"{base}/sub", duration=a.duration,
               limit=a.batch if kind == "py" else 10, **common, **pin_sub)
    pub = role("sulis-pub" if kind == "py" else "pub", dir=f"{base}/pub", stop=stop, **common, **pin_pub)
    r = c.run_stream(sub, pub, stop, dirs=[base], counters={"publisher": f"{base}/pub", "subscriber": f"{base}/sub"})
    print(f"      counters: {counters_line(r['counters'])}", flush=True)
    r["config"] = cfg.sulis() + ("" if a.pin == "none" else f", pin {a.pin}")
    return r


def peer_run(a, peer: str) -> dict:
    r = c.peer_run(peer, "tcp", a.duration)
    r["config"] = (f"pyzmq {r.get('zmq')}, TCP loopback, default HWM" if peer == "zmq"
                   else f"zenoh {r.get('zenoh')}, peer mode, TCP loopback, BLOCK, default batching")
    return r


def aeron_run(name: str, cfg: Config, a, samples: bool = False) -> dict:
    """AeronPeer pub/sub (the same shape and client wait as the sulis rows) or Aeron's samples."""
    from bench.peers import aeron

    install = aeron.find(name)
    props = aeron.driver_props(cfg.aeron_threading or cfg.threading, cfg.aeron_driver_idle or cfg.driver_idle,
                               cfg.channel_params)
    idle = cfg.aeron_client_idle or cfg.client_idle
    if samples:
        r = aeron.udp_samples_throughput(install, a.duration, HOST, cfg.channel_params, props, idle)
        print("      intervals: " + ", ".join(f"{s:,.0f}" for s in r["samples"]) + " msgs/s (first = warm-up)")
    else:
        base = c.shm_dir("sulis-bench-aeron-")
        stop = os.path.join(base, "stop")
        common = {"channel": aeron.udp_channel(HOST, c.free_port(HOST), cfg.channel_params), "stream": STREAM,
                  "idle": idle, "driver": 1}
        r = c.run_stream(aeron.peer(install, "sub", {**props, **aeron.dir_props(f"{base}/sub")}, **common,
                                    duration=a.duration, limit=10),
                         aeron.peer(install, "pub", {**props, **aeron.dir_props(f"{base}/pub")}, **common, length=32,
                                    stop=stop),
                         stop, dirs=[base], counters={"publisher": f"{base}/pub", "subscriber": f"{base}/sub"})
    print(f"      counters: {counters_line(r['counters'])}", flush=True)
    r["config"] = cfg.aeron(samples and name == "1.15.1")
    return r


def build_variants(cfg: Config, a) -> list:
    return [
        ("py-exclusive", "sulis Python ExclusivePublication.offer", lambda: sulis_run(cfg, a, "py")),
        ("native-exclusive", "sulis native Rust ExclusivePublication", lambda: sulis_run(cfg, a, "native")),
        ("zmq", "pyzmq PUSH/PULL tcp://127.0.0.1", lambda: peer_run(a, "zmq")),
        ("zenoh", "zenoh put/recv tcp/127.0.0.1", lambda: peer_run(a, "zenoh")),
        ("aeron-1.15.1", "Aeron Java 1.15.1 AeronPeer pub/sub", lambda: aeron_run("1.15.1", cfg, a)),
        ("aeron-current", "Aeron Java current AeronPeer pub/sub", lambda: aeron_run("current", cfg, a)),
        ("aeron-1.15.1-samples", "Aeron Java 1.15.1 StreamingPublisher/RateSubscriber",
         lambda: aeron_run("1.15.1", cfg, a, samples=True)),
        ("aeron-current-samples", "Aeron Java current StreamingPublisher/RateSubscriber",
         lambda: aeron_run("current", cfg, a, samples=True)),
    ]


def sweep(a, ap) -> int:
    """One run of the selected variants per configuration of the grid; a table sorted by rate."""
    rows, record = [], []
    for threading, didle, cidle, params in itertools.product(
            a.sweep_threading.split(","), a.sweep_driver_idle.split(","), a.sweep_client_idle.split(","),
            (a.sweep_channel_params or a.channel_params).split(";")):
        cfg = Config(threading, didle, cidle, params)
        variants = c.select(build_variants(cfg, a), a, ap, VARIANTS.split(",")[-2:] if not a.aeron_samples else ())
        print(f"== {cfg.sulis()}", flush=True)
        results, skipped, errors = c.run_rounds(variants, a, lambda r: f"{r['msgs_per_s']:,.0f} msgs/s")
        for key, name, _ in variants:
            rows += [(r["msgs_per_s"], name, threading, didle, cidle, params, counters_line(r.get("counters") or {}),
                      r["interference"]) for r in results[key]]
            rows += [(0.0, name, threading, didle, cidle, params, f"FAILED {e[:60]}", 0) for e in errors.get(key, [])]
        record.append({"config": cfg.sulis(), "results": results, "errors": errors, "skipped": skipped})
    print("\nUDP throughput sweep, 32 B messages, one run each (msgs/s):")
    rows.sort(key=lambda r: (r[1], -r[0]))
    c.print_table(["name", "msgs/s", "threading", "driver idle", "client idle", "channel params", "counters", "noise"],
                  [[n, f"{v:,.0f}", t, d, ci, p, cnt, f"{i * 100:.0f}%"] for v, n, t, d, ci, p, cnt, i in rows],
                  "lrllllll")
    return c.finish("udp_throughput_sweep", a, {"duration_s": a.duration, "rows": rows, "sweep": record}, [], {}, {},
                    {}, {})


def main(argv=None) -> int:
    ap = c.parser(__doc__, duration=True, wait_quiet=60.0, only=VARIANTS)
    c.udp_args(ap, DEFAULT_CHANNEL_PARAMS)
    ap.add_argument("--driver-options", default="", help="more sulis driver options, k=v,k=v")
    ap.add_argument("--aeron-client-idle", choices=["yield", "spin"], default=None,
                    help="Aeron's clients' wait: AeronPeer's and, with --aeron-samples, current Aeron's samples' "
                         "(default: --client-idle; 1.15.1's samples always spin)")
    ap.add_argument("--aeron-samples", action="store_true",
                    help="also run Aeron's StreamingPublisher/RateSubscriber samples (1.15.1's clients spin)")
    ap.add_argument("--pin", choices=["none", "sides", "publisher"], default="none",
                    help="sulis CPU placement: none (default); sides: publisher process (its driver included) on "
                         "CPU 0, subscriber process on CPU 1; publisher: the publishing thread alone on CPU 0, both "
                         "drivers and the subscriber on CPU 1")
    ap.add_argument("--sweep", action="store_true",
                    help="instead of the comparison: one run per configuration of --sweep-* (cartesian product)")
    ap.add_argument("--sweep-threading", default="shared,shared-network,dedicated")
    ap.add_argument("--sweep-driver-idle", default="busy-spin,yielding,backoff")
    ap.add_argument("--sweep-client-idle", default="yield,spin")
    ap.add_argument("--sweep-channel-params", default=None,
                    help="';'-separated list of channel parameter sets (default: --channel-params)")
    a = ap.parse_args(argv)
    profile = c.require_release_build()
    c.settle(a, ap)
    if a.pin != "none" and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs 2 CPUs")
    driver_options(a.driver_options)  # validated

    cfg = Config(a.threading, a.driver_idle, a.client_idle, a.channel_params, a.aeron_threading, a.aeron_driver_idle,
                 a.aeron_client_idle)
    variants = c.build_native(c.select(build_variants(cfg, a), a, ap,
                                       () if a.aeron_samples else VARIANTS.split(",")[-2:]), a.no_build)
    if a.sweep:
        return sweep(a, ap)
    print(f"sulis UDP throughput, 32 B messages over loopback, two drivers: {a.runs} round(s), {a.duration:g} s per "
          f"run (every system: per-second counts at the receiver, first second = warm-up); sulis {profile} build; "
          f"{c.cpu_summary()}")
    print(f"sulis: {cfg.sulis()}, Python poll_batch({a.batch}); CPU placement: {PIN_TEXT[a.pin]}")
    print(f"Aeron: {cfg.aeron()}" + (" (1.15.1's sample clients spin)" if a.aeron_samples else ""))
    results, skipped, errors = c.run_rounds(variants, a, lambda r: f"{r['msgs_per_s']:,.0f} msgs/s")
    med = c.report_throughput(variants, results, skipped, errors,
                              "UDP throughput, 32 B messages, median of the rounds (msgs/s); "
                              "'vs X' = this row's median / X's median:",
                              [("vs 8M", 8e6), ("vs sulis Py", "py-exclusive"), ("vs pyzmq", "zmq"),
                               ("vs Aeron 1.15.1", "aeron-1.15.1"), ("vs Aeron current", "aeron-current")])
    py, nat = med.get("py-exclusive"), med.get("native-exclusive")
    if py:
        print(f"  (a) sulis Python exclusive offer >= 8 M msgs/s: {py / 1e6:.2f} M = {py / 8e6:.2f}x "
              f"-> {c.verdict(py >= 8e6)}")
    for label in ("1.15.1", "current"):
        ref = med.get(f"aeron-{label}")
        if nat and ref:
            print(f"  (b) sulis native >= 1.0x Aeron Java {label} ({ref / 1e6:.2f} M): {nat / 1e6:.2f} M = "
                  f"{nat / ref:.2f}x -> {c.verdict(nat >= ref)}")
    return c.finish("udp_throughput", a, {"runs": a.runs, "duration_s": a.duration, "message_length": 32,
                                          "sulis_config": cfg.sulis(), "aeron_config": cfg.aeron(), "pin": a.pin},
                    variants, med, results, skipped, errors)


if __name__ == "__main__":
    sys.exit(c.main_guard(main))
