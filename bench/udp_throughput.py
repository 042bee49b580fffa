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
import sys

from sulis._benchkit import runner as r
from sulis._benchkit.procs import free_port, pins, scratch_dir
from sulis._benchkit.report import finish, print_table

r.repository(__file__)
from bench.peers import aeron  # noqa: E402

HOST, STREAM = "127.0.0.1", 1001
SAMPLES = ("aeron-1.15.1-samples", "aeron-current-samples")
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


def counters_line(counters: dict) -> str:
    p, s = counters.get("publisher") or {}, counters.get("subscriber") or {}
    keys = [("SMs", s.get("status_messages_sent")), ("NAKs", s.get("naks_sent")),
            ("retransmits", p.get("retransmits_sent")),
            ("sender flow-control limits", p.get("sender_flow_control_limits")),
            ("over-runs", s.get("flow_control_over_runs")), ("short sends", p.get("short_sends"))]
    return ", ".join(f"{k} {v:,}" for k, v in keys if v is not None)


def stream_run(sub, pub, base: str) -> dict:
    """One run of a subscriber and a publisher, each with its driver in ``base``/sub and /pub."""
    res = r.run_stream(sub, pub, f"{base}/stop", dirs=[base], counters={"publisher": f"{base}/pub",
                                                                        "subscriber": f"{base}/sub"})
    print(f"      counters: {counters_line(res['counters'])}", flush=True)
    return res


def sulis_run(cfg: Config, a, kind: str) -> dict:
    base = scratch_dir("sulis-bench-udptp-")
    common = {"channel": r.udp_channel(HOST, free_port(HOST), cfg.channel_params), "stream": STREAM,
              "driver": {"threading_mode": cfg.threading, "idle_strategy": cfg.driver_idle,
                         **r.driver_options(a.driver_options)}, "idle": cfg.client_idle}
    pin_pub = {"none": {}, "sides": pins(0, driver=True), "publisher": {"driver_cpu": 1, "loop_cpu": 0}}[a.pin]
    sub = r.sulis_role(kind, "sub", dir=f"{base}/sub", duration=a.duration, limit=a.batch if kind == "py" else 10,
                       **common, **({} if a.pin == "none" else pins(1, driver=True)))
    res = stream_run(sub, r.sulis_role(kind, "pub", dir=f"{base}/pub", stop=f"{base}/stop", **common, **pin_pub), base)
    res["config"] = cfg.sulis() + ("" if a.pin == "none" else f", pin {a.pin}")
    return res


def aeron_run(name: str, cfg: Config, a, samples: bool = False) -> dict:
    """AeronPeer pub/sub (the same shape and client wait as the sulis rows) or Aeron's samples."""
    install = aeron.find(name)
    props = aeron.driver_props(cfg.aeron_threading or cfg.threading, cfg.aeron_driver_idle or cfg.driver_idle,
                               cfg.channel_params)
    idle = cfg.aeron_client_idle or cfg.client_idle
    if samples:
        res = aeron.udp_samples_throughput(install, a.duration, HOST, cfg.channel_params, props, idle)
        print("      intervals: " + ", ".join(f"{s:,.0f}" for s in res["samples"]) + " msgs/s (first = warm-up)")
        print(f"      counters: {counters_line(res['counters'])}", flush=True)
    else:
        base = scratch_dir("sulis-bench-aeron-")
        common = {"channel": aeron.udp_channel(HOST, free_port(HOST), cfg.channel_params), "stream": STREAM,
                  "idle": idle}
        res = stream_run(aeron.embedded(install, "sub", props, f"{base}/sub", **common, duration=a.duration, limit=10),
                         aeron.embedded(install, "pub", props, f"{base}/pub", **common, length=32, stop=f"{base}/stop"),
                         base)
    res["config"] = cfg.aeron(samples and name == "1.15.1")
    return res


def rows(cfg: Config, a) -> list:
    return [("py-exclusive", "sulis Python ExclusivePublication.offer", lambda: sulis_run(cfg, a, "py")),
            ("native-exclusive", "sulis native Rust ExclusivePublication", lambda: sulis_run(cfg, a, "native")),
            ("zmq", "pyzmq PUSH/PULL tcp://127.0.0.1", lambda: r.peer_run("zmq", "tcp", a.duration)),
            ("zenoh", "zenoh put/recv tcp/127.0.0.1", lambda: r.peer_run("zenoh", "tcp", a.duration)),
            *((f"aeron-{v}", f"Aeron Java {v} AeronPeer pub/sub", lambda v=v: aeron_run(v, cfg, a))
              for v in aeron.INSTALLS),
            *((f"aeron-{v}-samples", f"Aeron Java {v} StreamingPublisher/RateSubscriber",
               lambda v=v: aeron_run(v, cfg, a, samples=True)) for v in aeron.INSTALLS)]


def sweep(a, ap) -> int:
    """One run of the selected variants per configuration of the grid; a table sorted by rate."""
    table, record = [], []
    for threading, didle, cidle, params in itertools.product(
            a.sweep_threading.split(","), a.sweep_driver_idle.split(","), a.sweep_client_idle.split(","),
            (a.sweep_channel_params or a.channel_params).split(";")):
        cfg = Config(threading, didle, cidle, params)
        variants = r.select(rows(cfg, a), a, ap, () if a.aeron_samples else SAMPLES)
        print(f"== {cfg.sulis()}", flush=True)
        results, skipped, errors = r.run_rounds(variants, a, r.rate_line)
        for key, name, _ in variants:
            table += [(x["msgs_per_s"], name, threading, didle, cidle, params, counters_line(x.get("counters") or {}),
                       x["interference"]) for x in results[key]]
            table += [(0.0, name, threading, didle, cidle, params, f"FAILED {e[:60]}", 0) for e in errors.get(key, [])]
        record.append({"config": cfg.sulis(), "results": results, "errors": errors, "skipped": skipped})
    print("\nUDP throughput sweep, 32 B messages, one run each (msgs/s):")
    table.sort(key=lambda x: (x[1], -x[0]))
    print_table(["name", "msgs/s", "threading", "driver idle", "client idle", "channel params", "counters", "noise"],
                  [[n, f"{v:,.0f}", t, d, ci, p, cnt, f"{i * 100:.0f}%"] for v, n, t, d, ci, p, cnt, i in table],
                  "lrllllll")
    return finish(r.results_dir(), "udp_throughput_sweep", a, {"duration_s": a.duration, "rows": table,
                                                                 "sweep": record}, [], {}, {}, {}, {})


def main(argv=None) -> int:
    ap = r.parser(__doc__, duration=True, wait_quiet=60.0, udp="mtu=1408|rcv-wnd=2m|so-rcvbuf=4m",
                  only=",".join(k for k, _, _ in rows(Config("", "", "", ""), None)))
    ap.add_argument("--driver-options", default="", help="more sulis driver options, k=v,k=v")
    ap.add_argument("--aeron-threading", default=None, help="Aeron's threading mode (default: --threading)")
    ap.add_argument("--aeron-driver-idle", default=None, help="Aeron's drivers' idle strategy (default: same)")
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
    a = r.parse(ap, argv)
    r.driver_options(a.driver_options)  # validated
    if a.sweep:
        return sweep(a, ap)
    cfg = Config(a.threading, a.driver_idle, a.client_idle, a.channel_params, a.aeron_threading, a.aeron_driver_idle,
                 a.aeron_client_idle)
    return r.compare("udp_throughput", a, ap, rows(cfg, a), optional=() if a.aeron_samples else SAMPLES, title=(
        f"sulis UDP throughput, 32 B messages over loopback, two drivers: {a.runs} round(s), {a.duration:g} s per "
        "run (every system: per-second counts at the receiver, first second = warm-up)"), config=[
        f"sulis: {cfg.sulis()}, Python poll_batch({a.batch}); CPU placement: {PIN_TEXT[a.pin]}",
        f"Aeron: {cfg.aeron()}" + (" (1.15.1's sample clients spin)" if a.aeron_samples else "")],
        heading="UDP throughput, 32 B messages, median of the rounds (msgs/s); "
                "'vs X' = this row's median / X's median:",
        ratios=[("vs 8M", 8e6), ("vs sulis Py", "py-exclusive"), ("vs pyzmq", "zmq"),
                ("vs Aeron 1.15.1", "aeron-1.15.1"), ("vs Aeron current", "aeron-current")],
        targets=[("(a) sulis Python exclusive offer >= 8 M msgs/s", "py-exclusive", 8e6, None),
                 *((f"(b) sulis native >= 1.0x Aeron Java {v}", "native-exclusive", 1.0, f"aeron-{v}")
                   for v in aeron.INSTALLS)],
        settings={"duration_s": a.duration, "message_length": 32, "sulis_config": cfg.sulis(),
                  "aeron_config": cfg.aeron(), "pin": a.pin})


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
