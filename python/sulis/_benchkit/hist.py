"""Round-trip histograms: one HdrHistogram (1 ns .. 60 s, 3 significant digits) whatever language
ping ran in, and the figures read from it."""

from __future__ import annotations

#: Histogram range of round-trip times: 1 ns .. 60 s, 3 significant digits.
HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_DIGITS = 1, 60_000_000_000, 3
#: Percentiles reported besides min, mean and max.
PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)
#: Keys of a latency result in the benchmarks' tables, in print order.
LATENCY_KEYS = ["p50_us", "p90_us", "p99_us", "p99_9_us", "max_us"]


def histogram(samples_ns):
    """An HdrHistogram of round-trip times in ns (clamped to its range)."""
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram(HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_DIGITS)
    record = hist.record_value
    for ns in samples_ns:
        record(min(max(ns, HIST_LOWEST_NS), HIST_HIGHEST_NS))
    return hist


def values_at_percentiles(hist, percentiles) -> list[int]:
    """``hist.get_value_at_percentile`` for many percentiles in one pass over the recorded values."""
    targets = sorted((hist.get_target_count_at_percentile(p), i) for i, p in enumerate(percentiles))
    out = [0] * len(targets)
    if not hist.get_total_count():
        return out
    t = 0
    for it in hist.get_recorded_iterator():
        value = hist.get_highest_equivalent_value(it.value_iterated_to)
        while t < len(targets) and targets[t][0] <= it.total_count_to_this_value:
            out[targets[t][1]] = value
            t += 1
        if t == len(targets):
            break
    return out


def pct_key(p: float) -> str:
    """``50.0`` -> ``"p50_us"``, ``99.99`` -> ``"p99_99_us"``."""
    return "p" + f"{p:g}".replace(".", "_") + "_us"


def summarize(hist) -> dict:
    """Count, min, mean, the ``PERCENTILES`` and max of a histogram of ns, in µs."""
    values = values_at_percentiles(hist, PERCENTILES)
    out = {"count": hist.get_total_count(), "min_us": hist.get_min_value() / 1000.0,
           "mean_us": hist.get_mean_value() / 1000.0}
    for p, v in zip(PERCENTILES, values, strict=True):
        out[pct_key(p)] = v / 1000.0
    out["max_us"] = hist.get_max_value() / 1000.0
    return out


def encode(hist) -> str:
    enc = hist.encode()
    return enc.decode() if isinstance(enc, bytes) else enc


def decode(text: str):
    from hdrh.histogram import HdrHistogram

    return HdrHistogram.decode(text)


def latency_line(r: dict) -> str:
    """``p50 0.71  p90 ...  max 12.3 µs`` for one latency result."""
    return "  ".join(f"{k[:-3].replace('_9', '.9')} {r[k]:.2f}" for k in LATENCY_KEYS) + " µs"
