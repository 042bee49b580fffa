#!/usr/bin/env python3
"""Loss recovery over UDP: time to move N messages with and without loss, sulis beside Aeron Java.

    python bench/udp_recovery.py              # 1M x 32 B, 0 % and 10 % loss, 3 rounds (~3 min)
    python bench/udp_recovery.py --quick      # 1 round, 200k messages (smoke test)
    python bench/udp_recovery.py --loss 5 --count 2000000

Each run moves ``--warmup-count`` untimed messages and then ``--count`` timed
ones (32 B, MTU 1408) from a publisher process to a subscriber process, each
with its own media driver, over UDP; the subscriber times its first to its last
timed message. Publishers offer as fast as they can (retrying refused offers,
``sched_yield`` in between), so the figure includes everything loss costs:
gaps detected, NAKed and filled, back-pressure while they are open, the tail
(the last datagrams' loss is seen only through the next heartbeat).

* sulis: crates/sulis-bench ``udp-throughput --count N --warmup-count W``
  (native Rust clients on both sides);
* Aeron Java 1.15.1 (Java 11) and current (Java 17): ``AeronBench``
  (bench/peers/AeronBench.java), a fixed-count publisher and a counting
  subscriber written for this benchmark, each JVM with its embedded driver.

How loss is made (``--loss-method``):

* ``nft`` (default when running as root with nftables): both processes run in
  a fresh network namespace and talk over its loopback; an nftables rule drops
  ``--loss`` % of the UDP datagrams to the subscriber's endpoint port at random
  (``numgen random``): DATA, heartbeats, SETUP and retransmits alike, and (with
  ``--loss-direction both``) the same share of the status messages and NAKs
  coming back. The kernel treats both systems identically; the rule's counters
  give the real drop rate.
* ``generator``: each system's own loss generator on the publisher's driver:
  sulis ``send_data_loss=random:P`` with ``loss_seed``; Aeron's
  ``DebugSendChannelEndpoint`` (``aeron.SendChannelEndpoint.supplier`` with
  ``aeron.debug.send.data.loss.rate``/``seed``, in both jars). Same rule (drop
  a sent datagram with probability P), two implementations.

The no-loss runs use the same path (namespace or not) as the lossy ones.
Refuses to run on a debug build of sulis.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _common as c  # noqa: E402

HOST = "127.0.0.1"
MESSAGE_LENGTH = 32
DEFAULT_CHANNEL_PARAMS = "mtu=1408|rcv-wnd=2m|so-rcvbuf=4m"


def netutil():
    """tests/netutil (NetnsPair, NftLoss), importable from tests/."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import netutil as nu

    return nu


class LossPath:
    """Where the runs happen and how loss is applied to one run."""

    def __init__(self, method: str, percent: float, direction: str, seed: int):
        self.method = method
        self.percent = percent
        self.direction = direction
        self.seed = seed
        self.pair = None
        self.prefix: list[str] = []
        if method == "nft":
            nu = netutil()
            ok, why = nu.netns_available()
            if not ok:
                raise SystemExit(f"--loss-method nft: {why}")
            ok, why = nu.nft_available()
            if not ok:
                raise SystemExit(f"--loss-method nft: {why}")
            # One namespace (side "a" of a pair) and its loopback: both processes inside.
            self.pair = nu.NetnsPair(prefix="sulis-bench-")
            self.prefix = nu.exec_prefix(self.pair.ns_a)

    def describe(self) -> str:
        if self.method == "nft":
            what = "datagrams to the endpoint" + (" and back from it" if self.direction == "both" else "")
            return (f"nftables in network namespace {self.pair.ns_a} (loopback): numgen random drop of "
                    f"{self.percent:g} % of the UDP {what}")
        return (f"each driver's loss generator on sent data: sulis send_data_loss=random:{self.percent / 100:g}, "
                f"Aeron DebugSendChannelEndpoint aeron.debug.send.data.loss.rate={self.percent / 100:g} "
                f"(seed {self.seed})")

    def apply(self, port: int, lossy: bool):
        """Context manager for one run: installs the nft rules on ``port`` when ``lossy``; yields a stats dict."""
        return _Applied(self, port, lossy)

    def sulis_options(self, lossy: bool) -> list[str]:
        if self.method != "generator" or not lossy:
            return []
        return ["--pub-driver-options", f"send_data_loss=random:{self.percent / 100:g},loss_seed={self.seed}"]

    def aeron_props(self, lossy: bool) -> dict:
        if self.method != "generator" or not lossy:
            return {}
        return {"aeron.SendChannelEndpoint.supplier": "io.aeron.driver.ext.DebugSendChannelEndpointSupplier",
                "aeron.debug.send.data.loss.rate": f"{self.percent / 100:g}",
                "aeron.debug.send.data.loss.seed": str(self.seed)}

    def close(self) -> None:
        if self.pair is not None:
            self.pair.close()
            self.pair = None


class _Applied:
    def __init__(self, path: LossPath, port: int, lossy: bool):
        self.path, self.port, self.lossy = path, port, lossy
        self.rules = []
        self.stats: dict = {}

    def __enter__(self) -> dict:
        if self.path.method == "nft" and self.lossy:
            nu = netutil()
            ns = self.path.pair.ns_a
            self.rules.append(("data", nu.NftLoss(ns, self.path.percent, hook="input", dport=self.port)))
            if self.path.direction == "both":
                self.rules.append(("control", nu.NftLoss(ns, self.path.percent, hook="input", sport=self.port)))
        return self.stats

    def __exit__(self, *exc) -> None:
        for name, rule in self.rules:
            try:
                seen, dropped = rule.seen(), rule.dropped()
                self.stats[name] = {"seen": seen, "dropped": dropped,
                                    "drop_percent": 100.0 * dropped / seen if seen else 0.0}
            finally:
                rule.remove()


# =============================================================== runs

def sulis_run(lossy: bool, path: LossPath, a: argparse.Namespace, sub_options: str = "") -> dict:
    exe = c.native_binary("udp-throughput", build=False)
    port = c.free_udp_port(HOST)
    args = ["--runs", "1", "--count", str(a.count), "--warmup-count", str(a.warmup_count),
            "--message-length", str(MESSAGE_LENGTH), "--threading", a.threading, "--driver-idle", a.driver_idle,
            "--client-idle", a.client_idle, "--channel-params", a.channel_params, "--host", HOST,
            "--port", str(port), *path.sulis_options(lossy)]
    if sub_options:
        args += ["--sub-driver-options", sub_options]
    with path.apply(port, lossy) as nft:
        r = c.run_native(exe, args, timeout_s=600, prefix=path.prefix)
    counters = r["counters"][0]
    return {"elapsed_s": r["elapsed_s"], "msgs_per_s": r["msgs_per_s"], "nft": nft,
            "naks_sent": counters["subscriber"].get("naks_sent"),
            "retransmits": counters["publisher"].get("retransmits_sent"), "counters": counters, "native": r}


def aeron_run(jar: str, lossy: bool, path: LossPath, a: argparse.Namespace) -> dict:
    from bench.peers import aeron_java

    port = c.free_udp_port(HOST)
    extra = dict(kv.split("=", 1) for kv in filter(None, a.aeron_props.split(",")))
    pub = aeron_java.AeronDriver(a.threading, a.driver_idle, {**extra, **path.aeron_props(lossy)})
    sub = aeron_java.AeronDriver(a.threading, a.driver_idle, extra)
    with path.apply(port, lossy) as nft:
        r = aeron_java.udp_count(count=a.count, warmup=a.warmup_count, jar=jar, message_length=MESSAGE_LENGTH,
                                 host=HOST, port=port, channel_params=a.channel_params, pub_driver=pub,
                                 sub_driver=sub, client_idle=a.client_idle, exec_prefix=path.prefix,
                                 timeout_s=300)
    counters = r.get("counters") or {}
    r.update({"nft": nft, "naks_sent": (counters.get("subscriber") or {}).get("naks_sent"),
              "retransmits": (counters.get("publisher") or {}).get("retransmits_sent")})
    print(f"      {r['count']:,} messages in {r['elapsed_s']:.3f} s = {r['msgs_per_s']:,.0f} msgs/s", flush=True)
    return r


def describe(r: dict) -> str:
    parts = [f"{r['elapsed_s']:.3f} s", f"{r['msgs_per_s']:,.0f} msgs/s"]
    if r.get("naks_sent") is not None:
        parts.append(f"NAKs {r['naks_sent']:,}")
    if r.get("retransmits") is not None:
        parts.append(f"retransmits {r['retransmits']:,}")
    for name, st in (r.get("nft") or {}).items():
        parts.append(f"nft {name} dropped {st['dropped']:,}/{st['seen']:,} ({st['drop_percent']:.1f} %)")
    return ", ".join(parts)


# =============================================================== main

def count_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--count", type=int, default=None, help="timed messages per run (default 1,000,000)")
    ap.add_argument("--warmup-count", type=int, default=None,
                    help="untimed messages first, so that the JVMs' JIT has compiled (default 500,000)")


def main(argv=None) -> int:
    ap = c.bench_parser(__doc__, count_args, runs_help="rounds (default 3; --quick: 1)")
    ap.add_argument("--loss", type=float, default=10.0, help="loss in %% (default 10)")
    ap.add_argument("--loss-method", choices=["nft", "generator"], default=None,
                    help="nft (default as root with nftables) or the systems' own loss generators")
    ap.add_argument("--loss-direction", choices=["data", "both"], default="data",
                    help="data: datagrams to the subscriber's endpoint (default); both: also the status "
                         "messages and NAKs coming back (nft only)")
    ap.add_argument("--seed", type=int, default=7, help="seed of the loss generators (--loss-method generator)")
    ap.add_argument("--threading", default="shared", help="threading mode of every driver (default shared)")
    ap.add_argument("--driver-idle", default="yielding", help="idle strategy of every driver (default yielding)")
    ap.add_argument("--client-idle", choices=["yield", "spin"], default="yield",
                    help="what a client does when it cannot progress (default yield)")
    ap.add_argument("--channel-params", default=DEFAULT_CHANNEL_PARAMS,
                    help=f"channel parameters (sulis URI; Aeron driver properties) (default {DEFAULT_CHANNEL_PARAMS})")
    ap.add_argument("--aeron-props", default="",
                    help="more Aeron driver properties for both sides, k=v,k=v (e.g. "
                         "aeron.retransmit.unicast.linger=10000000; 1.15.1 has no NAK/retransmit properties)")
    c.selection_args(ap, "comma list among: sulis,sulis-gaps1,sulis-fixed-nak,aeron-1.15.1,aeron-current "
                         "(sulis-gaps1: sulis with loss_max_gaps=1, Aeron's one gap at a time; sulis-fixed-nak: "
                         "sulis retrying NAKs every nak_unicast_retry_delay, not after the measured repair time; "
                         "neither is run unless named)",
                     wait_quiet=True,
                     interference_help="a run during which other processes used more than this share of a CPU is noisy")
    a = ap.parse_args(argv)

    profile = c.require_release_build()
    runs = c.rounds(a, ap)
    if (a.count is not None and a.count < 2) or (a.warmup_count is not None and a.warmup_count < 0):
        ap.error("--count must be at least 2 and --warmup-count at least 0")
    try:
        extra_props = dict(kv.split("=", 1) for kv in filter(None, a.aeron_props.split(",")))
    except ValueError:
        ap.error(f"--aeron-props must be k=v,k=v, not {a.aeron_props!r}")
    if any(not k.startswith("aeron.") for k in extra_props):
        ap.error("--aeron-props: every property must start with 'aeron.'")
    a.count = a.count or (200_000 if a.quick else 1_000_000)
    a.warmup_count = a.warmup_count if a.warmup_count is not None else (100_000 if a.quick else 500_000)
    if a.loss_method is None:
        nu = netutil()
        a.loss_method = "nft" if nu.netns_available()[0] and nu.nft_available()[0] else "generator"
    if a.loss_method == "generator" and a.loss_direction == "both":
        ap.error("--loss-direction both needs --loss-method nft")
    if not 0 < a.loss < 100:
        ap.error("--loss must be within (0, 100)")

    systems = [("sulis", "sulis native Rust", lambda lossy, p: sulis_run(lossy, p, a)),
               ("sulis-gaps1", "sulis native Rust, loss_max_gaps=1",
                lambda lossy, p: sulis_run(lossy, p, a, sub_options="loss_max_gaps=1")),
               ("sulis-fixed-nak", "sulis native Rust, fixed NAK retries",
                lambda lossy, p: sulis_run(lossy, p, a, sub_options="nak_unicast_retry_adaptive=false")),
               ("aeron-1.15.1", "Aeron Java 1.15.1 AeronBench", lambda lossy, p: aeron_run("1.15.1", lossy, p, a)),
               ("aeron-current", "Aeron Java current AeronBench", lambda lossy, p: aeron_run("current", lossy, p, a))]
    systems = c.select_variants(systems, a, ap, lambda k: k in ("sulis-gaps1", "sulis-fixed-nak"))
    systems = c.build_native(systems, "udp-throughput", a.no_build, prefix="sulis", label="sulis native")

    path = LossPath(a.loss_method, a.loss, a.loss_direction, a.seed)
    try:
        variants = []
        for key, name, fn in systems:
            for lossy in (False, True):
                pct = a.loss if lossy else 0.0
                variants.append((f"{key}@{pct:g}", f"{name}, {pct:g} % loss",
                                 (lambda fn=fn, lossy=lossy: fn(lossy, path))))
        config = (f"drivers {a.threading}/{a.driver_idle}, clients {a.client_idle}, {a.channel_params}, "
                  f"each system's default NAK/retransmit timing" + (f", Aeron {a.aeron_props}" if a.aeron_props else ""))
        print(f"UDP loss recovery: {a.count:,} timed messages of {MESSAGE_LENGTH} B after {a.warmup_count:,} "
              f"untimed ones, {runs} round(s); sulis {profile} build; {c.cpu_summary()}")
        print(f"loss: {path.describe()}")
        print(f"configuration (all systems): {config}")
        results, skipped, errors = c.run_rounds(variants, runs, a.retry_noisy, a.max_interference, describe,
                                                quiet_wait_s=a.wait_quiet)
    finally:
        path.close()

    names = c.variant_names(variants)
    med = {k: {"elapsed_s": c.median(r["elapsed_s"] for r in rs), "msgs_per_s": c.median(r["msgs_per_s"] for r in rs)}
           for k, rs in results.items() if rs}
    print()
    print(f"Time to move {a.count:,} x {MESSAGE_LENGTH} B messages, median of the rounds:")
    rows = []
    for key, name, _ in variants:
        rs = results.get(key) or []
        if not rs:
            rows.append([name, c.missing_text(key, skipped, errors), "", "0", "", "", "", "", ""])
            continue
        m = med[key]
        base = med.get(key.split("@")[0] + "@0")
        drops = [st["drop_percent"] for r in rs for n, st in (r.get("nft") or {}).items() if n == "data"]
        rows.append([name, f"{m['elapsed_s']:.3f}", f"{m['msgs_per_s']:,.0f}", str(len(rs)),
                     " / ".join(f"{r['elapsed_s']:.3f}" for r in rs),
                     f"{m['elapsed_s'] / base['elapsed_s']:.2f}x" if base and not key.endswith("@0") else "",
                     f"{c.median(r['naks_sent'] for r in rs if r.get('naks_sent') is not None):,.0f}"
                     if any(r.get("naks_sent") is not None for r in rs) else "-",
                     f"{c.median(r['retransmits'] for r in rs if r.get('retransmits') is not None):,.0f}"
                     if any(r.get("retransmits") is not None for r in rs) else "-",
                     f"{c.median(drops):.1f} %" if drops else ""])
    c.print_table(["name", "time (s)", "msgs/s", "runs", "per run (s)", "vs no loss", "NAKs sent", "retransmits",
                   "dropped (nft)"], rows)
    print()
    lossy_key = f"{a.loss:g}"
    su = med.get(f"sulis@{lossy_key}")
    for k in ("aeron-1.15.1", "aeron-current"):
        ae = med.get(f"{k}@{lossy_key}")
        if su and ae:
            print(f"  under {a.loss:g} % loss: sulis {su['elapsed_s']:.3f} s vs {names[k + '@' + lossy_key]} "
                  f"{ae['elapsed_s']:.3f} s -> sulis takes {su['elapsed_s'] / ae['elapsed_s']:.2f}x the time "
                  f"({ae['elapsed_s'] / su['elapsed_s']:.2f}x {'faster' if su['elapsed_s'] < ae['elapsed_s'] else 'slower'})")
    c.print_notes(results, errors, names, a.max_interference)

    c.save_report("udp_recovery", {
        "runs": runs, "count": a.count, "warmup_count": a.warmup_count, "loss_percent": a.loss,
        "loss_method": a.loss_method, "loss_direction": a.loss_direction, "config": config,
    }, variants, med, results, skipped, errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(c.main_guard(main))
