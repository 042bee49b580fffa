"""``sulis bench`` (run as ``python -m sulis.cli bench``): throughput and
ping-pong over IPC and UDP with small counts, the pyzmq peer, ``--json``,
``--plot``, progress on a terminal, bad input, and clean-up on interruption.
No figure is compared with a threshold: only the shape and consistency of the
results are checked."""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import termios
import threading
import time

import pytest

import sulis
from clibench import (
    CLI,
    bench,
    bench_json,
    bench_processes,
    check_ping_pong,
    check_throughput,
    kill_leftovers,
    needs_zmq,
    result,
    scratch,
)
from conftest import await_until, clean_env, free_udp_port


@pytest.fixture
def no_leftovers():
    """The bench leaves no scratch directory behind."""
    before = scratch()
    yield
    left = scratch() - before
    assert not left, f"left behind: {sorted(left)}"


# ----------------------------------------------------------------- throughput

@needs_zmq
def test_ipc_throughput_json_with_pyzmq(no_leftovers):
    doc = bench_json("throughput", "--channel", "ipc", "--messages", 20_000, "--runs", 2, "--size", "32,1k",
                     "--peer", "pyzmq")
    check_throughput(doc, 20_000, [32, 1024], ["sulis", "pyzmq"], 2)
    assert doc["transport"] == "ipc" and doc["channel"] == "aeron:ipc"
    assert doc["warmup"] == "auto"
    # A tenth of the count, or what fills the publication window (half of a 16 MiB
    # term) when that is more: 64-byte frames of 32 B messages, 1056-byte ones of 1 KiB.
    assert result(doc, "sulis", 32)["warmup"] == 8 * 1024 * 1024 // 64
    assert result(doc, "pyzmq", 1024)["warmup"] == 8 * 1024 * 1024 // 1056
    assert doc["driver"]["embedded"] and doc["driver"]["drivers"] == 1
    assert not os.path.exists(doc["driver"]["dir"]), "the fresh driver directory is removed"
    assert result(doc, "sulis", 32)["vs_sulis"] == 1.0
    assert result(doc, "pyzmq", 32)["name"] == "pyzmq PUSH/PULL ipc://"


def test_udp_throughput_json_two_drivers_and_fragmented_messages(no_leftovers):
    """4 KiB messages take three frames each: still counted as messages."""
    doc = bench_json("throughput", "--channel", "udp", "--messages", 20_000, "--runs", 1, "--size", 32,
                     "--size", 4096, "--warmup", 500)
    check_throughput(doc, 20_000, [32, 4096], ["sulis"], 1)
    assert doc["transport"] == "udp" and doc["warmup"] == 500
    assert all(r["warmup"] == 500 for r in doc["results"])
    assert doc["driver"]["drivers"] == 2
    assert doc["limits"]["max_payload_length"] < 4096
    assert result(doc, "sulis", 32)["name"].startswith("sulis aeron:udp")


@needs_zmq
def test_udp_throughput_table_with_pyzmq(no_leftovers):
    out = bench("throughput", "--channel", "udp", "--messages", 20_000, "--runs", 1, "--peer", "pyzmq")
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stderr
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("system"))
    assert header.split() == ["system", "size", "msgs/s", "MB/s", "vs", "sulis"]
    sulis_row = next(line for line in lines if line.startswith("sulis aeron:udp"))
    zmq_row = next(line for line in lines if line.startswith("pyzmq PUSH/PULL tcp://127.0.0.1"))
    assert sulis_row.endswith("1.00x")
    assert zmq_row.split()[-1].endswith("x")


def test_a_run_too_short_to_mean_anything_is_flagged(no_leftovers):
    """2,000 messages after a warm-up that fills the window: the receiver times messages that were
    already buffered (once reported as 47 M msgs/s over UDP). The run is kept, flagged in the JSON
    and marked in the table; 2 M messages over IPC take well over 0.1 s and are not flagged."""
    doc = bench_json("throughput", "--channel", "udp", "--messages", 2_000, "--runs", 1)
    (r,) = doc["results"]
    assert r["too_short"] is True and r["runs"][0]["too_short"] is True
    assert r["runs"][0]["seconds"] < 0.1
    out = bench("throughput", "--channel", "udp", "--messages", 2_000, "--runs", 1)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("sulis aeron:udp"))
    assert " (!) " in row and row.endswith("1.00x")
    assert "(!) too short to mean anything" in out.stdout and "use more --messages" in out.stdout
    doc = bench_json("throughput", "--channel", "ipc", "--messages", 2_000_000, "--runs", 1)
    assert doc["results"][0]["too_short"] is False


def test_throughput_through_a_running_driver(driver, no_leftovers):
    """``--dir`` of a running driver: both processes use it, over IPC and UDP (one driver)."""
    for channel in ("ipc", "udp"):
        doc = bench_json("throughput", "--channel", channel, "--dir", driver.dir, "--messages", 20_000,
                         "--runs", 1)
        check_throughput(doc, 20_000, [32], ["sulis"], 1)
        assert doc["driver"] == {"dir": driver.dir, "embedded": False, "drivers": 1}
        assert doc["limits"]["term_length"] == (64 * 1024 if channel == "ipc" else 16 * 1024 * 1024)
    assert os.path.exists(os.path.join(driver.dir, sulis.CNC_FILE)), "a running driver is left alone"


def test_dir_without_a_driver_is_used_then_removed(no_leftovers):
    dir = os.path.join("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir(),
                       f"sulis-clibench-test-{os.getpid()}")
    doc = bench_json("throughput", "--dir", dir, "--messages", 5_000, "--runs", 1)
    assert doc["driver"]["dir"] == dir and doc["driver"]["embedded"]
    assert not os.path.exists(dir)


# ----------------------------------------------------------------- ping-pong

@needs_zmq
def test_ipc_ping_pong_json_with_pyzmq_and_plot(tmp_path, no_leftovers):
    pytest.importorskip("matplotlib")
    png = tmp_path / "latency.png"
    doc = bench_json("ping-pong", "--channel", "ipc", "--round-trips", 2_000, "--runs", 2, "--size", "32,2000",
                     "--peer", "pyzmq", "--plot", png)
    check_ping_pong(doc, 2_000, [32, 2000], ["sulis", "pyzmq"], 2)
    assert doc["warmup"] == "auto"
    assert all(r["warmup"] == 200 and x["warmup"] == 200 for r in doc["results"] for x in r["runs"])
    assert doc["pong_channel"] == "aeron:ipc"
    assert result(doc, "pyzmq", 32)["name"] == "pyzmq REQ/REP ipc://"
    assert doc["plot"] == str(png)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000


@needs_zmq
def test_udp_ping_pong_table_with_pyzmq(no_leftovers):
    out = bench("ping-pong", "--channel", "udp", "--round-trips", 2_000, "--runs", 1, "--peer", "pyzmq")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("system"))
    assert header.split() == ["system", "size", "p50", "p90", "p99", "p99.9", "p99.99", "max", "vs", "sulis"]
    for prefix in ("sulis aeron:udp 127.0.0.1 (2 drivers)", "pyzmq REQ/REP tcp://127.0.0.1"):
        row = next(line for line in lines if line.startswith(prefix))
        figures = [float(v.replace(",", "")) for v in row[len(prefix):].split()[2:8]]
        assert figures == sorted(figures), row
    assert "µs" in out.stdout


def test_udp_ping_pong_json_explicit_channel_fragmented(no_leftovers):
    """An explicit UDP URI keeps its parameters; the echoes go to the same URI on another port;
    3000-byte messages are reassembled on both sides."""
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|mtu=1408|term-length=1m"
    doc = bench_json("ping-pong", "--channel", channel, "--round-trips", 1_000, "--runs", 1, "--size", "64,3000")
    check_ping_pong(doc, 1_000, [64, 3000], ["sulis"], 1)
    assert doc["channel"] == channel
    assert doc["limits"]["term_length"] == 1024 * 1024
    assert doc["limits"]["max_payload_length"] < 3000


# ----------------------------------------------------------------- progress

def test_progress_line_on_a_terminal(no_leftovers):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    chunks: list[bytes] = []

    def drain():
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        # Drivers that sleep a millisecond when idle make every round trip a few milliseconds, busy machine
        # or not: 2,000 of them take seconds, long enough for a few updates (20,000 at full speed took
        # 0.5 s alone and 53 s beside the rest of the suite).
        proc = subprocess.run([*CLI, "ping-pong", "--channel", "udp", "--round-trips", "2000", "--runs", "1",
                               "--driver-idle", "sleeping:1ms"],
                              stdout=subprocess.PIPE, stderr=slave, text=True, timeout=120, env=clean_env())
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    assert proc.returncode == 0
    shown = b"".join(chunks).decode("utf-8", "replace")
    assert "\r" in shown and "round trips" in shown and "[run 1/1] sulis udp, 32 B" in shown
    assert "p50" in shown, "each finished run leaves a line"
    assert "\r" not in proc.stdout, "the table on stdout has no progress"


# ----------------------------------------------------------------- bad input

@pytest.mark.parametrize(
    "args,words",
    [
        (["throughput", "--size", "0"], ["--size", "at least 1 byte"]),
        (["throughput", "--size", "32,-5"], ["--size", "at least 1 byte"]),
        (["throughput", "--size", "lots"], ["--size", "'lots' is not a size"]),
        (["throughput", "--size", "3m", "--messages", "10"], ["--size", "3145728", "maximum message length 2,097,152"]),
        (["ping-pong", "--channel", "aeron:ipc?term-length=64k", "--size", "16k", "--round-trips", "10"],
         ["--size", "maximum message length 8,192"]),
        (["throughput", "--channel", "aeron:udp?endpoint=localhost"], ["--channel", "missing port"]),
        (["throughput", "--channel", "aeron:udp?endpoint=127.0.0.1:4000|mtu=7"], ["--channel", "mtu=7"]),
        (["throughput", "--channel", "tcp://127.0.0.1:4000"], ["--channel", "expected ipc, udp or a channel URI"]),
        (["throughput", "--channel", "aeron:udp?mtu=1408"], ["--channel", "endpoint"]),
        (["ping-pong", "--channel", "udp", "--pong-channel", "aeron:ipc"], ["--pong-channel", "aeron:udp"]),
        (["throughput", "--messages", "0"], ["--messages", "0"]),
        (["ping-pong", "--runs", "0"], ["--runs"]),
        (["throughput", "--peer", "nats"], ["--peer", "nats"]),
        (["ping-pong", "--plot", "/nonexistent-dir/latency.png"], ["--plot", "/nonexistent-dir does not exist"]),
        (["throughput", "--driver-idle", "napping"], ["idle"]),
    ],
)
def test_bad_input_is_reported(args, words, no_leftovers):
    out = bench(*args, timeout=60)
    assert out.returncode != 0
    for word in words:
        assert word in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("mode,role", [("throughput", "subscriber"), ("ping-pong", "pong")])
def test_failure_in_the_second_process_is_reported(mode, role, no_leftovers):
    """The endpoint's port is taken: the second process cannot bind it, and says so."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        out = bench(mode, "--channel", f"aeron:udp?endpoint=127.0.0.1:{port}", "--runs", 1, timeout=120)
    assert out.returncode == 1
    assert f"the {role} process" in out.stderr and f"127.0.0.1:{port}" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_plot_without_matplotlib_says_what_to_install(tmp_path):
    fake = tmp_path / "matplotlib"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    out = bench("ping-pong", "--plot", tmp_path / "x.png", env=clean_env(PYTHONPATH=str(tmp_path)))
    assert out.returncode != 0
    assert "matplotlib" in out.stderr and "pip install" in out.stderr and "sulis[plot]" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "x.png").exists()


def test_missing_pyzmq_is_reported(tmp_path):
    fake = tmp_path / "zmq"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no pyzmq here')\n")
    out = bench("throughput", "--peer", "pyzmq", env=clean_env(PYTHONPATH=str(tmp_path)))
    assert out.returncode != 0
    assert "pyzmq is not installed" in out.stderr and "pip install pyzmq" in out.stderr


# ----------------------------------------------------------------- interruption

@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
@pytest.mark.parametrize("channel", ["ipc", "udp"])
def test_interrupted_run_cleans_up(how, channel, no_leftovers):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or
    SIGTERM to the bench alone, mid-run: exit status 130, no process and no
    driver directory left."""
    dir = os.path.join("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir(),
                       f"sulis-clibench-interrupt-{os.getpid()}-{how}-{channel}")
    # Both processes have the marker in their arguments (the subscriber gets the
    # driver directory over IPC, the channel over UDP, where it has its own driver).
    uri = "aeron:ipc" if channel == "ipc" else f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    marker = dir if channel == "ipc" else uri
    proc = subprocess.Popen([*CLI, "throughput", "--channel", uri, "--messages", "500000000", "--runs", "1",
                             "--dir", dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(), process_group=0)
    try:
        await_until(lambda: len(bench_processes(marker)) >= 2 or proc.poll() is not None,
                    timeout=30, what="the subscriber process to start")
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.5)  # into the measured loop
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "interrupted" in err
        assert "Traceback" not in err
        await_until(lambda: not bench_processes(marker), timeout=10, what="every bench process to end")
        assert not os.path.exists(dir)
    finally:
        kill_leftovers(proc, marker)
        shutil.rmtree(dir, ignore_errors=True)
