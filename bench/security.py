#!/usr/bin/env python3
"""What transport security costs: throughput and round trip with security off, auth and encrypt.

    python bench/security.py            # 3 rounds, ~8 minutes
    python bench/security.py --quick    # 1 short round (smoke test)

Two processes with a media driver each over loopback, as two hosts would be; every row has the same
drivers, clients and channel settings, and only the channel's ``security=`` differs (both drivers
hold one keyring). Throughput: 32 B, 1 KiB and 64 KiB messages from Python (``offer`` into
``poll_batch``), over unicast and over multicast (a group on the loopback interface). Round trip:
1 KiB, unicast, ping and pong in two processes. Targets, security on against off: throughput at
least 0.8x, and a p50 round trip at most 10 µs more at 1 KiB. bench/README.md says what each row runs.
"""
from __future__ import annotations

import os
import secrets
import sys

from sulis._benchkit import runner as r
from sulis._benchkit.procs import cpu_summary, free_port, scratch_dir, two_free_ports
from sulis._benchkit.report import finish, median, print_table

r.repository(__file__)

HOST, GROUP, STREAM = "127.0.0.1", "239.255.92.1", 1001
MODES = ("off", "auth", "encrypt")
SIZES = {"32B": 32, "1KiB": 1024, "64KiB": 65536}
KINDS = ("unicast", "multicast")


def keyring(base: str) -> str:
    """A keyring of one random key both drivers of a run read."""
    os.makedirs(base, exist_ok=True)
    path = os.path.join(base, "keyring")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"1 {secrets.token_hex(32)}\n")
    return path


def channel(kind: str, port: int, mode: str, params: str) -> str:
    where = f"endpoint={HOST}:{port}" if kind == "unicast" else f"endpoint={GROUP}:{port}|interface={HOST}"
    return f"aeron:udp?{where}|security={mode}" + (f"|{params}" if params else "")


def driver(a, ring: str) -> dict:
    return {"threading_mode": a.threading, "idle_strategy": a.driver_idle, "keyring_file": ring,
            "term_buffer_length": "16m", **r.driver_options(a.driver_options)}


def stream_run(a, kind: str, size: int, mode: str) -> dict:
    base = scratch_dir("sulis-bench-security-")
    common = {"channel": channel(kind, free_port(HOST), mode, a.channel_params), "stream": STREAM,
              "driver": driver(a, keyring(base)), "idle": a.client_idle, "size": size}
    sub = r.sulis_role("py", "sub", dir=f"{base}/sub", duration=a.duration, limit=a.batch, **common)
    pub = r.sulis_role("py", "pub", dir=f"{base}/pub", stop=f"{base}/stop", **common)
    res = r.run_stream(sub, pub, f"{base}/stop", dirs=[base],
                       counters={"publisher": f"{base}/pub", "subscriber": f"{base}/sub"})
    # The subscriber counts fragments: a message longer than a frame's payload (MTU 1408 less the
    # 32-byte header) is several.
    fragments = -(-size // (1408 - 32))
    res["fragments_per_s"] = res["msgs_per_s"]
    res["msgs_per_s"] /= fragments
    res["mb_per_s"] = res["msgs_per_s"] * size / 1e6
    return res


def rtt_run(a, mode: str) -> dict:
    base = scratch_dir("sulis-bench-security-rtt-")
    ping_port, pong_port = two_free_ports(HOST)
    common = {"ping_channel": channel("unicast", ping_port, mode, a.channel_params), "ping_stream": 1002,
              "pong_channel": channel("unicast", pong_port, mode, a.channel_params), "pong_stream": 1003,
              "idle": a.client_idle, "driver": driver(a, keyring(base)), "size": 1024}
    pong = r.sulis_role("py", "pong", dir=f"{base}/pong", total=a.n + a.warmup, tight=True, **common)
    return r.run_ping_pong(pong, r.sulis_role("py", "ping", dir=f"{base}/ping", n=a.n, warmup=a.warmup, **common),
                           dirs=[base])


def describe(res: dict) -> str:
    if "p50_us" in res:
        return f"p50 {res['p50_us']:.1f} µs, p99 {res['p99_us']:.1f} µs"
    return f"{res['msgs_per_s']:,.0f} msgs/s ({res['mb_per_s']:,.0f} MB/s)"


def main() -> int:
    ap = r.parser(__doc__, duration=True, round_trips=True, udp="")
    ap.add_argument("--driver-options", default="", help="more driver options, name=value,...")
    a = r.parse(ap)
    variants = [(f"{k}-{s}-{m}", f"{k} {s} security={m}", lambda k=k, n=n, m=m: stream_run(a, k, n, m))
                for k in KINDS for s, n in SIZES.items() for m in MODES]
    variants += [(f"rtt-{m}", f"round trip 1KiB security={m}", lambda m=m: rtt_run(a, m)) for m in MODES]
    variants = r.select(variants, a, ap)
    print(f"transport security's cost; sulis {a.profile} build; {cpu_summary()}")
    print(f"drivers {a.threading}/{a.driver_idle}, clients {a.client_idle}, 16 MiB terms, loopback, "
          f"{a.channel_params or 'no other channel params'}")
    results, skipped, errors = r.run_rounds(variants, a, describe)

    med: dict[str, dict] = {}
    for key, rs in results.items():
        if rs:
            med[key] = {q: median([x[q] for x in rs])
                        for q in ("p50_us", "p99_us", "msgs_per_s", "mb_per_s") if q in rs[0]}
    rows, verdicts = [], []
    for kind in KINDS:
        for size in SIZES:
            off = med.get(f"{kind}-{size}-off", {}).get("msgs_per_s")
            for mode in MODES:
                m = med.get(f"{kind}-{size}-{mode}")
                if not m:
                    rows.append([f"{kind} {size}", mode, "-", "-", "-"])
                    continue
                ratio = m["msgs_per_s"] / off if off else None
                rows.append([f"{kind} {size}", mode, f"{m['msgs_per_s']:,.0f}", f"{m['mb_per_s']:,.0f}",
                             f"{ratio:.2f}x" if ratio else "-"])
                if mode != "off" and ratio:
                    verdicts.append((f"{kind} {size} {mode}: {ratio:.2f}x of off", ratio >= 0.8))
    print("\nthroughput (median of the runs)")
    print_table(["stream", "security", "msgs/s", "MB/s", "vs off"], rows, "llrrr")
    off = med.get("rtt-off")
    rtt_rows = []
    for mode in MODES:
        m = med.get(f"rtt-{mode}")
        if m:
            extra = m["p50_us"] - off["p50_us"] if off else None
            rtt_rows.append([mode, f"{m['p50_us']:.1f}", f"{m['p99_us']:.1f}",
                             f"{extra:+.1f}" if extra is not None else "-"])
            if mode != "off" and extra is not None:
                verdicts.append((f"round trip 1KiB {mode}: p50 {extra:+.1f} µs against off", extra <= 10))
    print("\nround trip, 1 KiB unicast (µs, median of the runs)")
    print_table(["security", "p50", "p99", "p50 vs off"], rtt_rows, "lrrr")
    print("\ntargets (>= 0.8x throughput, <= +10 µs p50):")
    for text, ok in verdicts:
        print(f"  {text} -> {'met' if ok else 'MISSED'}")
    return finish(r.results_dir(), "security", a, {"runs": a.runs}, variants, med, results, skipped, errors)


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
