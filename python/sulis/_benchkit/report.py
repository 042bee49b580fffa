"""What a benchmark prints and keeps: medians, tables (one printer for bench/ and ``sulis bench``),
the targets met or missed, and a JSON record of every run in bench/results/."""

from __future__ import annotations

import datetime as _dt
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from .hist import LATENCY_KEYS
from .procs import cpu_summary


def median(xs) -> float | None:
    """The median of the values that are not None (None when there are none)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _mid(xs) -> float:
    return statistics.median(list(xs))


def fmt_ratio(v: float | None) -> str:
    return "-" if not v or v != v else f"{v:.2f}x"


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> list[str]:
    """A plain-text table, headers underlined; ``align`` has one letter per column, l or r (default:
    the first l, the rest r)."""
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]

    def line(cells) -> str:
        cells = zip(cells, widths, align, strict=True)
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in cells).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> None:
    print("\n".join(table(headers, rows, align)))


def missing_text(key: str, skipped: dict, errors: dict, width: int = 70) -> str:
    """What a row without results shows: ``skipped: <reason>`` or ``failed: <error>``."""
    text = ("skipped: " + skipped[key]) if key in skipped else ("failed: " + errors[key][-1]) if key in errors \
        else "no result"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def report_throughput(variants: list, results: dict, skipped: dict, errors: dict, heading: str,
                      ratios: Sequence[tuple[str, str | float]], targets: Sequence[tuple] = ()) -> dict:
    """The table of a throughput benchmark: per row the median msgs/s, the per-run figures, one
    ``vs X`` column per ``(header, variant key or a rate)`` and the configuration; then the
    ``targets``, each ``(text, key, at least, vs key or None)``: the row ``key``'s median at least
    that rate, or at least that many times the row ``vs``'s. Returns the medians."""
    med = {k: _mid(r["msgs_per_s"] for r in rs) for k, rs in results.items() if rs}
    refs = [(h, med.get(ref) if isinstance(ref, str) else ref) for h, ref in ratios]
    rows = []
    for key, name, _ in variants:
        rs = results.get(key) or []
        if not rs:
            rows.append([name, missing_text(key, skipped, errors), "0", "", *("" for _ in refs), ""])
            continue
        rows.append([name, f"{med[key]:,.0f}", str(len(rs)), " / ".join(f"{r['msgs_per_s'] / 1e6:.2f}" for r in rs),
                     *(fmt_ratio(med[key] / ref if ref else None) for _, ref in refs), rs[0].get("config", "")])
    print(f"\n{heading}")
    print_table(["name", "median msgs/s", "runs", "per run (M)", *(h for h, _ in refs), "configuration"], rows,
                "l" + "r" * (3 + len(refs)) + "l")
    print("\ntargets:")
    for text, key, at_least, vs in targets:
        v, ref = med.get(key), med.get(vs) if vs else None
        if v and vs is None:
            print(f"  {text}: {v / 1e6:.2f} M = {v / at_least:.2f}x -> {verdict(v >= at_least)}")
        elif v and ref:
            print(f"  {text} ({ref / 1e6:.2f} M): {v / ref:.2f}x -> {verdict(v / ref >= at_least)}")
    return med


def report_latency(variants: list, results: dict, skipped: dict, errors: dict, heading: str, targets: dict,
                   compare_with: Sequence[str]) -> dict:
    """The table of a latency benchmark (p50 ... max in µs, ``x Py`` against the sulis Python row,
    the targets of sulis from Python), the targets met or missed and sulis Python against the rows
    of ``compare_with``. Returns the medians."""
    med = {k: {q: _mid(r[q] for r in rs) for q in LATENCY_KEYS} for k, rs in results.items() if rs}
    py = med.get("python")
    names = {k: n for k, n, _ in variants}
    rows = []
    for key, name, _ in variants:
        if key not in med:
            rows.append([name, missing_text(key, skipped, errors), "", "", "", "", "", "", "0", ""])
            continue
        m = med[key]
        rows.append([name, *(f"{m[q]:.2f}" for q in LATENCY_KEYS),
                     *(fmt_ratio(m[q] / py[q] if py else None) for q in ("p50_us", "p99_us")),
                     str(len(results[key])), results[key][0].get("config", "")])
    rows.append(["target (sulis Python)", *(f"<= {targets[q]:g}" if q in targets else "" for q in LATENCY_KEYS),
                 "", "", "", ""])
    print(f"\n{heading}")
    print_table(["name", "p50", "p90", "p99", "p99.9", "max", "p50 x Py", "p99 x Py", "runs", "configuration"], rows,
                "lrrrrrrrrl")
    print("\ntargets:")
    for q, target in targets.items():
        if py:
            print(f"  sulis Python {q[:-3]} <= {target:g} µs: {py[q]:.2f} µs -> {verdict(py[q] <= target)}")
    for key in compare_with:
        if py and key in med:
            print(f"  sulis Python vs {names[key]}: p50 {med[key]['p50_us'] / py['p50_us']:.2f}x, "
                  f"p99 {med[key]['p99_us'] / py['p99_us']:.2f}x (>1: sulis lower)")
    return med


def save(results_dir: Path, name: str, record: dict) -> Path | None:
    """``record`` (with the command and the machine) as ``results_dir/<name>-<timestamp>.json``; says where."""
    record = {"argv": sys.argv, "machine": cpu_summary(), **record}
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        path = results_dir / f"{name}-{_dt.datetime.now():%Y%m%d-%H%M%S}.json"
        path.write_text(json.dumps(record, indent=1, default=str))
    except OSError as exc:
        print(f"(could not save results: {exc})")
        return None
    print(f"\n(details: {path})")
    return path


def finish(results_dir: Path, name: str, a, settings: dict, variants: list, med: dict, results: dict,
           skipped: dict, errors: dict) -> int:
    """The notes (runs kept although noisy, rows that failed) and the record of the runs. Returns
    the exit status (1 when a run failed)."""
    names = {k: n for k, n, _ in variants}
    for k, rs in results.items():
        for i, r in enumerate(rs):
            if r.get("interference", 0) > a.max_interference:
                print(f"  note: {names[k]} run {i + 1} is noisy: other processes used "
                      f"{r['interference'] * 100:.0f}% of a CPU during it")
    for k, errs in errors.items():
        print(f"  note: {names[k]} failed {len(errs)} time(s): {errs[0][:300]}")
    save(results_dir, name, {**settings, "medians": {names[k]: v for k, v in med.items()},
                             "results": {names[k]: v for k, v in results.items()}, "skipped": skipped,
                             "errors": errors})
    return 1 if errors else 0
