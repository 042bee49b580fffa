#!/usr/bin/env python3
"""One publication, several receivers: multicast and multi-destination-cast, sulis beside Aeron Java.

    python bench/fanout_throughput.py            # 2 and 3 receivers, 32 B and mixed sizes, 3 rounds (~10 min)
    python bench/fanout_throughput.py --quick    # 1 round, fewer messages (smoke test)
    python bench/fanout_throughput.py --receivers 3 --modes mdc --sizes mixed

Each run starts K subscriber processes and then a publisher process, each with a media driver of its
own, on loopback; the publisher moves ``--warmup-count`` untimed and ``--count`` timed messages, every
subscriber times its first to its last timed message, and the run takes the slowest subscriber's
time (the stream's rate is what its last receiver got). Modes: ``multicast`` (a group on the loopback
interface) and ``mdc`` (dynamic multi-destination-cast: the subscribers name the publisher's control
address). Flow control ``min,g:/K`` for both systems: the publication waits for its K receivers and
goes at the slowest one's pace, so nobody is left behind (Aeron's default ``max`` lets a receiver
fall behind for good). Sizes: ``32`` (32-byte messages) and ``mixed`` (8 B to 256 KiB, 1 %
fragmented, 1.4 KiB on average: the sequence of ``sulis-bench``'s ``mixed_length``, which
AeronPeer.java repeats). Rows: sulis native Rust, Aeron Java current and (``--only``) 1.15.1. Target:
sulis >= 1.0x Aeron current in every mode, receiver count and size.
"""
from __future__ import annotations

import sys

from sulis._benchkit import runner as r
from sulis._benchkit.procs import cpu_summary, free_port, scratch_dir
from sulis._benchkit.report import finish, median, missing_text, print_table

r.repository(__file__)
from bench.peers import aeron  # noqa: E402

HOST, STREAM = "127.0.0.1", 1001
GROUP = "239.255.93.1"


def channels(mode: str, receivers: int, params: str) -> tuple[str, list[str]]:
    """(publication channel, the subscribers' channels) of one run, on fresh ports."""
    extra = f"|{params}" if params else ""
    fc = f"|fc=min,g:/{receivers}"
    if mode == "multicast":
        group = f"aeron:udp?endpoint={GROUP}:{free_port(HOST)}|interface={HOST}{extra}"
        return group + fc, [group] * receivers
    control = f"{HOST}:{free_port(HOST)}"
    return (f"aeron:udp?control={control}|control-mode=dynamic{extra}{fc}",
            [f"aeron:udp?endpoint={HOST}:{free_port(HOST)}|control={control}{extra}" for _ in range(receivers)])


def counted(mode: str, receivers: int, size: str, a, sub_cmd, pub_cmd, params: str) -> dict:
    """One run: K subscribers then the publisher, each a function of (its driver's directory, channel)."""
    base = scratch_dir("sulis-bench-fanout-")
    pub_channel, sub_channels = channels(mode, receivers, params)
    res = r.run_fanout([sub_cmd(f"{base}/sub{i}", ch) for i, ch in enumerate(sub_channels)],
                       pub_cmd(f"{base}/pub", pub_channel), dirs=[base],
                       counters={"publisher": f"{base}/pub", "subscriber": f"{base}/sub0"})
    sent_bytes = res["pub"].get("bytes") or a.total * 32
    timed_bytes = sent_bytes * a.count / a.total
    return {"elapsed_s": res["elapsed_s"], "msgs_per_s": a.count / res["elapsed_s"],
            "mb_per_s": timed_bytes / res["elapsed_s"] / 1e6, "per_receiver_s": [d["ns"] / 1e9 for d in res["subs"]],
            "counters": res["counters"]}


def sulis_run(mode: str, receivers: int, size: str, a) -> dict:
    driver = {"threading_mode": a.threading, "idle_strategy": a.driver_idle}
    common = {"stream": STREAM, "idle": a.client_idle, "total": a.total}
    return counted(mode, receivers, size, a,
                   lambda d, ch: r.native_role("sub", dir=d, driver=driver, channel=ch, warmup=a.warmup_count,
                                               length=size, **common),
                   lambda d, ch: r.native_role("pub", dir=d, driver=driver, channel=ch, length=size, **common),
                   a.channel_params)


def aeron_run(name: str, mode: str, receivers: int, size: str, a) -> dict:
    install = aeron.find(name)
    props = aeron.driver_props(a.threading, a.driver_idle, a.channel_params)
    common = {"stream": STREAM, "idle": a.client_idle, "total": a.total}
    params = "|".join(kv for kv in a.channel_params.split("|") if kv.split("=", 1)[0] in ("mtu", "term-length"))
    return counted(mode, receivers, size, a,
                   lambda d, ch: aeron.embedded(install, "sub", props, d, channel=ch, warmup=a.warmup_count,
                                                length=size, **common),
                   lambda d, ch: aeron.embedded(install, "pub", props, d, channel=ch, length=size, **common),
                   params)


def describe(res: dict) -> str:
    per = " / ".join(f"{s:.3f}" for s in res["per_receiver_s"])
    return f"{res['elapsed_s']:.3f} s (receivers {per}), {res['msgs_per_s']:,.0f} msgs/s, {res['mb_per_s']:,.1f} MB/s"


def main(argv=None) -> int:
    ap = r.parser(__doc__, wait_quiet=60.0, udp="mtu=1408|rcv-wnd=2m|so-rcvbuf=4m",
                  only="sulis,aeron-1.15.1,aeron-current (aeron-1.15.1 runs only when named)")
    ap.add_argument("--receivers", default="2,3", help="receiver counts, comma list (default 2,3)")
    ap.add_argument("--modes", default="multicast,mdc", help="multicast, mdc or both (default both)")
    ap.add_argument("--sizes", default="32,mixed", help="32, mixed or both (default both)")
    ap.add_argument("--count", type=int, default=None,
                    help="timed messages per run (default 1,000,000 of 32 B, 100,000 mixed; --quick: a fifth)")
    ap.add_argument("--warmup-count", type=int, default=None, help="untimed messages first (default: half the count)")
    a = r.parse(ap, argv)
    a.count_arg, a.warmup_arg = a.count, a.warmup_count
    if (a.count_arg is not None and a.count_arg < 2) or (a.warmup_arg is not None and a.warmup_arg < 0):
        ap.error("--count must be at least 2 and --warmup-count at least 0")
    try:
        counts = sorted({int(k) for k in a.receivers.split(",")})
    except ValueError:
        ap.error(f"--receivers must be a comma list of counts, not {a.receivers!r}")
    modes, sizes = a.modes.split(","), a.sizes.split(",")
    if any(k < 1 for k in counts) or set(modes) - {"multicast", "mdc"} or set(sizes) - {"32", "mixed"}:
        ap.error("--receivers are >= 1, --modes multicast,mdc, --sizes 32,mixed")
    systems = r.build_native(r.select([
        ("sulis", "sulis native Rust", sulis_run),
        *((f"aeron-{v}", f"Aeron Java {v}", lambda *x, v=v: aeron_run(v, *x)) for v in aeron.INSTALLS),
    ], a, ap, ("aeron-1.15.1",)), a.no_build, prefix="sulis")
    record, table, status = {}, [], 0
    for size in sizes:
        # One count per size, so that every row of a size moves the same messages.
        a.count = a.count_arg or ((1_000_000 if size == "32" else 100_000) // (5 if a.quick else 1))
        a.warmup_count = a.warmup_arg if a.warmup_arg is not None else a.count // 2
        a.total = a.count + a.warmup_count
        variants = [(f"{key}@{mode}{k}", f"{name}, {mode} to {k}",
                     lambda fn=fn, mode=mode, k=k, size=size: fn(mode, k, size, a))
                    for mode in modes for k in counts for key, name, fn in systems]
        print(f"\n== {size if size == 'mixed' else size + ' B'} messages: {a.count:,} timed after {a.warmup_count:,} "
              f"untimed, {a.runs} round(s); sulis {a.profile} build; {cpu_summary()}")
        print(f"configuration (both systems): drivers {a.threading}/{a.driver_idle}, clients {a.client_idle}, "
              f"{a.channel_params}, flow control min with a group of K")
        results, skipped, errors = r.run_rounds(variants, a, describe)
        med = {k: {q: median(x[q] for x in rs) for q in ("elapsed_s", "msgs_per_s", "mb_per_s")}
               for k, rs in results.items() if rs}
        for mode in modes:
            for k in counts:
                su = med.get(f"sulis@{mode}{k}")
                for key, name, _ in systems:
                    m = med.get(f"{key}@{mode}{k}")
                    row = [f"{size}", f"{mode} to {k}", name]
                    if not m:
                        table.append(row + [missing_text(f"{key}@{mode}{k}", skipped, errors, 50), "", "", "", ""])
                        continue
                    ratio = f"{su['msgs_per_s'] / m['msgs_per_s']:.2f}x" if su and key != "sulis" else ""
                    table.append(row + [f"{m['elapsed_s']:.3f}", f"{m['msgs_per_s']:,.0f}", f"{m['mb_per_s']:,.1f}",
                                        str(len(results[f'{key}@{mode}{k}'])), ratio])
        record[size] = {"count": a.count, "warmup_count": a.warmup_count, "medians": med, "results": results,
                        "skipped": skipped, "errors": errors}
        status |= finish(r.results_dir(), f"fanout_throughput_{size}", a, {"size": size, "count": a.count},
                         variants, med, results, skipped, errors)
    print("\nFan-out: the slowest receiver's time for the timed messages, median of the rounds "
          "(sulis vs: sulis' msgs/s over this row's; target >= 1.00x Aeron current):")
    print_table(["size", "mode", "system", "time (s)", "msgs/s", "MB/s", "runs", "sulis vs"], table, "lllrrrrr")
    return status


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
