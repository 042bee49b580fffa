"""Helpers shared by the ``sulis bench`` tests (tests/system/test_cli_bench.py
and tests/interop/test_cli_bench_aeron.py): running the CLI, checking the
shape of its JSON, and making sure no process or scratch directory is left."""

from __future__ import annotations

import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

import pytest
from hdrh.histogram import HdrHistogram

from conftest import clean_env

CLI = [sys.executable, "-m", "sulis.cli", "bench"]
PERCENTILE_KEYS = ["min_us", "p50_us", "p90_us", "p99_us", "p99_9_us", "p99_99_us", "max_us"]
SCRATCH_GLOBS = ["/dev/shm/sulis-clibench-*", "/tmp/sulis-clibench-*", f"{tempfile.gettempdir()}/sulis-clibench-*"]

try:
    import zmq  # noqa: F401

    HAVE_ZMQ = True
except ImportError:
    HAVE_ZMQ = False
needs_zmq = pytest.mark.skipif(not HAVE_ZMQ, reason="pyzmq is not installed")


def scratch() -> set[str]:
    return {p for pattern in SCRATCH_GLOBS for p in glob.glob(pattern)}


def bench_processes(marker: str) -> list[int]:
    """Pids of live processes whose command line mentions ``marker``."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmdline = f.read().decode("utf-8", "replace")
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            pids.append(int(d))
    return pids


def kill_leftovers(proc: subprocess.Popen, marker: str) -> None:
    """SIGKILL for ``proc``'s process group if it still runs, and for every process naming ``marker``."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    for pid in bench_processes(marker):
        os.kill(pid, signal.SIGKILL)


def bench(*args, timeout=180, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env or clean_env())


def bench_json(*args) -> dict:
    out = bench(*args, "--json")
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stderr, "no progress line when stderr is not a terminal"
    return json.loads(out.stdout)


def result(doc: dict, system: str, size: int) -> dict:
    (r,) = [r for r in doc["results"] if r["system"] == system and r["size"] == size]
    return r


def check_throughput(doc: dict, messages: int, sizes: list[int], systems: list[str], runs: int) -> None:
    assert doc["mode"] == "throughput"
    assert doc["messages"] == messages and doc["runs"] == runs and doc["sizes"] == sizes
    assert [(r["system"], r["size"]) for r in doc["results"]] == [(s, z) for z in sizes for s in systems]
    for r in doc["results"]:
        assert len(r["runs"]) == runs
        assert [x["run"] for x in r["runs"]] == list(range(1, runs + 1))
        for x in r["runs"]:
            assert x["messages"] == messages, "every message asked for was received"
            assert x["warmup"] == r["warmup"]
            assert 0 < x["timed_messages"] <= messages + r["warmup"]
            assert x["seconds"] > 0 and x["msgs_per_s"] > 0
            assert x["msgs_per_s"] == pytest.approx(x["timed_messages"] / x["seconds"])
            assert x["mb_per_s"] == pytest.approx(x["msgs_per_s"] * r["size"] / 1e6)
        assert r["median"]["msgs_per_s"] == pytest.approx(statistics.median(x["msgs_per_s"] for x in r["runs"]))
        sulis_rate = result(doc, "sulis", r["size"])["median"]["msgs_per_s"]
        assert r["vs_sulis"] == pytest.approx(r["median"]["msgs_per_s"] / sulis_rate)


def check_ping_pong(doc: dict, round_trips: int, sizes: list[int], systems: list[str], runs: int) -> None:
    assert doc["mode"] == "ping-pong"
    assert doc["round_trips"] == round_trips and doc["runs"] == runs and doc["sizes"] == sizes
    assert [(r["system"], r["size"]) for r in doc["results"]] == [(s, z) for z in sizes for s in systems]
    for r in doc["results"]:
        assert len(r["runs"]) == runs
        for x in r["runs"]:
            assert x["round_trips"] == round_trips
            assert x["count"] == round_trips, "one histogram entry per timed round trip"
            figures = [x[k] for k in PERCENTILE_KEYS]
            assert figures == sorted(figures), f"percentiles not monotonic: {figures}"
            assert 0 < x["min_us"] <= x["p50_us"] <= x["p99_us"] <= x["max_us"]
            assert x["min_us"] <= x["mean_us"] <= x["max_us"]
            hist = HdrHistogram.decode(x["histogram"])
            assert hist.get_total_count() == round_trips
            assert hist.get_max_value() / 1000 == pytest.approx(x["max_us"])
        median = [r["median"][k] for k in PERCENTILE_KEYS]
        assert median == sorted(median)
        assert r["median"]["p50_us"] == pytest.approx(statistics.median(x["p50_us"] for x in r["runs"]))
        sulis_p50 = result(doc, "sulis", r["size"])["median"]["p50_us"]
        assert r["vs_sulis"] == pytest.approx(r["median"]["p50_us"] / sulis_p50)
