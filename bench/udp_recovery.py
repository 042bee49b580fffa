#!/usr/bin/env python3
"""Loss recovery over UDP: time to move N messages with and without loss, sulis beside Aeron Java.

    python bench/udp_recovery.py              # 1M x 32 B, 0 % and 10 % loss, 3 rounds (~3 min)
    python bench/udp_recovery.py --quick      # 1 round, 200k messages (smoke test)
    python bench/udp_recovery.py --loss 5 --count 2000000
    python bench/udp_recovery.py --length mixed --loss-direction both   # 8 B..256 KiB, loss each way

Each run moves ``--warmup-count`` untimed and then ``--count`` timed messages from a publisher to a
subscriber process, each with its own driver; the subscriber times its first to its last timed
message (``--length mixed``: whole messages of 8 B to 256 KiB, 1 % fragmented, the sequence of
``sulis-bench``'s ``mixed_length``, which AeronPeer.java repeats). Rows: sulis native Rust (and,
when named in ``--only``, with ``loss_max_gaps=1`` or fixed NAK retries), Aeron Java 1.15.1 and
current (AeronPeer). Loss (``--loss-method``): ``nft`` (default
as root with nftables: an nftables rule in a fresh network namespace, the same for every system) or
``generator`` (each system's own loss generator on the publisher's driver). bench/README.md has more.
"""
from __future__ import annotations

import contextlib
import sys

from sulis._benchkit import runner as r
from sulis._benchkit.procs import cpu_summary, free_port, scratch_dir
from sulis._benchkit.report import finish, median, missing_text, print_table

ROOT = r.repository(__file__)
sys.path.insert(0, str(ROOT / "tests"))
from bench.peers import aeron  # noqa: E402

import netutil  # noqa: E402 - tests/netutil: NetnsPair, NftLoss

HOST = "127.0.0.1"


class LossPath:
    """Where the runs happen (a network namespace with nft) and how loss is applied to one run."""

    def __init__(self, a):
        self.a, self.pair, self.prefix = a, None, []
        if a.loss_method == "nft":
            for ok, why in (netutil.netns_available(), netutil.nft_available()):
                if not ok:
                    raise SystemExit(f"--loss-method nft: {why}")
            self.pair = netutil.NetnsPair(prefix="sulis-bench-")  # side "a" and its loopback: both processes inside
            self.prefix = netutil.exec_prefix(self.pair.ns_a)
        p = a.loss / 100  # the loss generators drop a datagram sent with this probability
        self.sulis_loss = {"send_data_loss": f"random:{p:g}", "loss_seed": a.seed} if not self.pair else {}
        self.aeron_loss = {} if self.pair else {
            "aeron.SendChannelEndpoint.supplier": "io.aeron.driver.ext.DebugSendChannelEndpointSupplier",
            "aeron.debug.send.data.loss.rate": f"{p:g}", "aeron.debug.send.data.loss.seed": a.seed}

    def describe(self) -> str:
        p = self.a.loss / 100
        if self.pair:
            back = " and back from it" if self.a.loss_direction == "both" else ""
            return (f"nftables in network namespace {self.pair.ns_a} (loopback): numgen random drop of "
                    f"{self.a.loss:g} % of the UDP datagrams to the endpoint{back}")
        return (f"each driver's loss generator on sent data: sulis send_data_loss=random:{p:g}, Aeron "
                f"DebugSendChannelEndpoint aeron.debug.send.data.loss.rate={p:g} (seed {self.a.seed})")

    @contextlib.contextmanager
    def apply(self, port: int, lossy: bool):
        """For one run: nft rules on ``port`` when ``lossy``; yields a dict filled with their drop counts."""
        stats, rules = {}, []
        if self.pair and lossy:
            rules.append(("data", netutil.NftLoss(self.pair.ns_a, self.a.loss, hook="input", dport=port)))
            if self.a.loss_direction == "both":
                rules.append(("control", netutil.NftLoss(self.pair.ns_a, self.a.loss, hook="input", sport=port)))
        try:
            yield stats
        finally:
            for name, rule in rules:
                seen, dropped = rule.seen(), rule.dropped()
                stats[name] = {"seen": seen, "dropped": dropped, "drop_percent": 100.0 * dropped / max(seen, 1)}
                rule.remove()

    def close(self) -> None:
        if self.pair is not None:
            self.pair.close()


def counted(path: LossPath, lossy: bool, sub_cmd, pub_cmd, port: int) -> dict:
    """One counted run of the two commands (each a function of its driver's directory), loss applied."""
    base = scratch_dir("sulis-bench-recovery-")
    with path.apply(port, lossy) as nft:
        res = r.run_stream([*path.prefix, *sub_cmd(f"{base}/sub")], [*path.prefix, *pub_cmd(f"{base}/pub")],
                           f"{base}/stop", dirs=[base], timeout_s=600,
                           counters={"publisher": f"{base}/pub", "subscriber": f"{base}/sub"})
    elapsed = res["done"]["ns"] / 1e9
    p, s = res["counters"]["publisher"] or {}, res["counters"]["subscriber"] or {}
    return {"elapsed_s": elapsed, "msgs_per_s": (res["done"]["received"] - 1) / elapsed, "nft": nft,
            "naks_sent": s.get("naks_sent"), "retransmits": p.get("retransmits_sent"), "counters": res["counters"]}


def sulis_run(lossy: bool, path: LossPath, a, sub_options: dict | None = None, kind: str = "native") -> dict:
    port = free_port(HOST)
    common = {"channel": r.udp_channel(HOST, port, a.channel_params), "stream": 1001, "idle": a.client_idle,
              "total": a.warmup_count + a.count}
    driver = {"threading_mode": a.threading, "idle_strategy": a.driver_idle, **r.driver_options(a.driver_options)}
    if kind == "py":  # offer per message, a Python callback per fragment counting whole messages
        return counted(path, lossy,
                       lambda d: r.py_role("sulis-sub", dir=d, driver={**driver, **(sub_options or {})}, **common,
                                           warmup=a.warmup_count, whole=True, size=a.length),
                       lambda d: r.py_role("sulis-pub", dir=d, driver={**driver, **(path.sulis_loss if lossy else {})},
                                           size=a.length if a.length == "mixed" else 32, **common), port)
    return counted(path, lossy,
                   lambda d: r.native_role("sub", dir=d, driver={**driver, **(sub_options or {})}, **common,
                                           warmup=a.warmup_count, length=a.length),
                   lambda d: r.native_role("pub", dir=d, driver={**driver, **(path.sulis_loss if lossy else {})},
                                           length=a.length, **common), port)


def aeron_run(name: str, lossy: bool, path: LossPath, a) -> dict:
    install = aeron.find(name)
    port = free_port(HOST)
    common = {"channel": aeron.udp_channel(HOST, port, a.channel_params), "stream": 1001, "idle": a.client_idle,
              "total": a.warmup_count + a.count}
    props = aeron.driver_props(a.threading, a.driver_idle, a.channel_params, a.extra_props)
    res = counted(path, lossy, lambda d: aeron.embedded(install, "sub", props, d, **common, warmup=a.warmup_count,
                                                       length=a.length),
                  lambda d: aeron.embedded(install, "pub", {**props, **(path.aeron_loss if lossy else {})}, d,
                                           **common, length=a.length), port)
    print(f"      {a.count:,} messages in {res['elapsed_s']:.3f} s = {res['msgs_per_s']:,.0f} msgs/s", flush=True)
    return res


def describe(res: dict) -> str:
    parts = [f"{res['elapsed_s']:.3f} s", f"{res['msgs_per_s']:,.0f} msgs/s"]
    parts += [f"{k} {res[v]:,}" for k, v in (("NAKs", "naks_sent"), ("retransmits", "retransmits"))
              if res.get(v) is not None]
    parts += [f"nft {n} dropped {st['dropped']:,}/{st['seen']:,} ({st['drop_percent']:.1f} %)"
              for n, st in (res.get("nft") or {}).items()]
    return ", ".join(parts)


def main(argv=None) -> int:
    ap = r.parser(__doc__, wait_quiet=60.0, udp="mtu=1408|rcv-wnd=2m|so-rcvbuf=4m", only="sulis,sulis-py,sulis-gaps1,"
                  "sulis-fixed-nak,aeron-1.15.1,aeron-current (sulis-gaps1: loss_max_gaps=1, Aeron's one gap at a "
                  "time; sulis-fixed-nak: NAKs retried every nak_unicast_retry_delay; neither runs unless named)")
    ap.add_argument("--length", choices=["32", "mixed"], default="32",
                    help="32-byte messages (default) or mixed: 8 B to 256 KiB, 1 %% fragmented")
    ap.add_argument("--count", type=int, default=None,
                    help="timed messages per run (default 1,000,000 of 32 B, 100,000 mixed)")
    ap.add_argument("--warmup-count", type=int, default=None,
                    help="untimed messages first, so that the JVMs' JIT has compiled (default 500,000)")
    ap.add_argument("--loss", type=float, default=10.0, help="loss in %% (default 10)")
    ap.add_argument("--loss-method", choices=["nft", "generator"], default=None,
                    help="nft (default as root with nftables) or the systems' own loss generators")
    ap.add_argument("--loss-direction", choices=["data", "both"], default="data",
                    help="data: datagrams to the subscriber's endpoint (default); both: also the status messages "
                         "and NAKs coming back (nft only)")
    ap.add_argument("--seed", type=int, default=7, help="seed of the loss generators (--loss-method generator)")
    ap.add_argument("--driver-options", default="",
                    help="more sulis driver options for both sides, k=v,k=v (e.g. retransmit_unicast_linger=1ms)")
    ap.add_argument("--aeron-props", default="",
                    help="more Aeron driver properties for both sides, k=v,k=v (e.g. "
                         "aeron.retransmit.unicast.linger=10000000; 1.15.1 has no NAK/retransmit properties)")
    a = r.parse(ap, argv)
    if (a.count is not None and a.count < 2) or (a.warmup_count is not None and a.warmup_count < 0):
        ap.error("--count must be at least 2 and --warmup-count at least 0")
    try:
        a.extra_props = dict(kv.split("=", 1) for kv in filter(None, a.aeron_props.split(",")))
    except ValueError:
        ap.error(f"--aeron-props must be k=v,k=v, not {a.aeron_props!r}")
    if any(not k.startswith("aeron.") for k in a.extra_props):
        ap.error("--aeron-props: every property must start with 'aeron.'")
    a.count = a.count or ((200_000 if a.quick else 1_000_000) // (10 if a.length == "mixed" else 1))
    a.warmup_count = a.warmup_count if a.warmup_count is not None else a.count // 2
    if a.loss_method is None:
        a.loss_method = "nft" if netutil.netns_available()[0] and netutil.nft_available()[0] else "generator"
    if a.loss_method == "generator" and a.loss_direction == "both":
        ap.error("--loss-direction both needs --loss-method nft")
    if not 0 < a.loss < 100:
        ap.error("--loss must be within (0, 100)")

    systems = r.build_native(r.select([
        ("sulis", "sulis native Rust", lambda lossy, p: sulis_run(lossy, p, a)),
        ("sulis-py", "sulis Python", lambda lossy, p: sulis_run(lossy, p, a, kind="py")),
        ("sulis-gaps1", "sulis native Rust, loss_max_gaps=1",
         lambda lossy, p: sulis_run(lossy, p, a, {"loss_max_gaps": 1})),
        ("sulis-fixed-nak", "sulis native Rust, fixed NAK retries",
         lambda lossy, p: sulis_run(lossy, p, a, {"nak_unicast_retry_adaptive": "false"})),
        *((f"aeron-{v}", f"Aeron Java {v} AeronPeer", lambda lossy, p, v=v: aeron_run(v, lossy, p, a))
          for v in aeron.INSTALLS),
    ], a, ap, ("sulis-gaps1", "sulis-fixed-nak")), a.no_build, prefix="sulis")
    path = LossPath(a)
    try:
        variants = [(f"{key}@{pct:g}", f"{name}, {pct:g} % loss", lambda fn=fn, lossy=bool(pct): fn(lossy, path))
                    for key, name, fn in systems for pct in (0.0, a.loss)]
        config = (f"drivers {a.threading}/{a.driver_idle}, clients {a.client_idle}, {a.channel_params}, each "
                  f"system's default NAK/retransmit timing" + (f", Aeron {a.aeron_props}" if a.aeron_props else ""))
        sizes = "32 B" if a.length == "32" else "8 B to 256 KiB (mixed)"
        print(f"UDP loss recovery: {a.count:,} timed messages of {sizes} after {a.warmup_count:,} untimed ones, "
              f"{a.runs} round(s); sulis {a.profile} build; {cpu_summary()}")
        print(f"loss: {path.describe()}")
        print(f"configuration (all systems): {config}")
        results, skipped, errors = r.run_rounds(variants, a, describe)
    finally:
        path.close()

    med = {k: {q: median(x[q] for x in rs) for q in ("elapsed_s", "msgs_per_s")} for k, rs in results.items() if rs}
    print(f"\nTime to move {a.count:,} messages of {sizes}, median of the rounds:")
    rows = []
    for key, name, _ in variants:
        rs = results.get(key) or []
        if not rs:
            rows.append([name, missing_text(key, skipped, errors), "", "0", "", "", "", "", ""])
            continue
        base = med.get(key.split("@")[0] + "@0")
        drops = [st["drop_percent"] for x in rs for n, st in (x.get("nft") or {}).items() if n == "data"]
        counts = [median(x[q] for x in rs if x.get(q) is not None) for q in ("naks_sent", "retransmits")]
        rows.append([name, f"{med[key]['elapsed_s']:.3f}", f"{med[key]['msgs_per_s']:,.0f}", str(len(rs)),
                     " / ".join(f"{x['elapsed_s']:.3f}" for x in rs),
                     f"{med[key]['elapsed_s'] / base['elapsed_s']:.2f}x" if base and not key.endswith("@0") else "",
                     *(f"{v:,.0f}" if v is not None else "-" for v in counts),
                     f"{median(drops):.1f} %" if drops else ""])
    print_table(["name", "time (s)", "msgs/s", "runs", "per run (s)", "vs no loss", "NAKs sent", "retransmits",
                 "dropped (nft)"], rows)
    print()
    su = med.get(f"sulis@{a.loss:g}")
    for k in ("aeron-1.15.1", "aeron-current"):
        ae = med.get(f"{k}@{a.loss:g}")
        if su and ae:
            faster = "faster" if su["elapsed_s"] < ae["elapsed_s"] else "slower"
            print(f"  under {a.loss:g} % loss: sulis {su['elapsed_s']:.3f} s vs {k.replace('aeron-', 'Aeron ')} "
                  f"{ae['elapsed_s']:.3f} s -> sulis takes {su['elapsed_s'] / ae['elapsed_s']:.2f}x the time "
                  f"({ae['elapsed_s'] / su['elapsed_s']:.2f}x {faster})")
    return finish(r.results_dir(), "udp_recovery", a, {"runs": a.runs, "count": a.count, "length": a.length,
                                                         "warmup_count": a.warmup_count, "loss_percent": a.loss,
                                                         "loss_method": a.loss_method,
                                                         "loss_direction": a.loss_direction, "config": config},
                    variants, med, results, skipped, errors)


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
