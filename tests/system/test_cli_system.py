"""The ``sulis`` command (run as ``python -m sulis.cli``): ``driver
--print-config`` lists every option with its source, and a standalone
``sulis driver`` serves clients and stops on SIGTERM."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

import sulis
from conftest import CLI, await_until, clean_env, make_dir
from conftest import run_cli as run

ROW = re.compile(r"^(\w+)\s+(\S*)\s+\((default|environment|explicit|derived: [^;]+); (SULIS_\w+)\)$")


def parse_config(stdout: str) -> dict[str, tuple[str, str, str]]:
    rows = {}
    for line in stdout.splitlines():
        m = ROW.match(line.strip())
        assert m, f"unexpected line: {line!r}"
        name, value, source, env = m.groups()
        assert name not in rows, f"{name} listed twice"
        rows[name] = (value, source, env)
    return rows


def test_print_config_lists_every_option_with_its_source():
    dir = "/dev/shm/sulis-cli-config-never-created"
    env = clean_env(SULIS_TIMER_INTERVAL="20ms", SULIS_IPC_TERM_BUFFER_LENGTH="128k", SULIS_IDLE_STRATEGY="yielding")
    out = run("driver", "--print-config", "--dir", dir, "--ipc-term-buffer-length", "1m",
              "--client-liveness-timeout", "3s", "--threading-mode", "shared", env=env)
    assert out.returncode == 0, out.stderr
    rows = parse_config(out.stdout)
    options = sulis._native.driver_config()
    assert set(rows) == {name for name, *_ in options}, "every option, and only options"
    for name, _value, _source, env_name, _doc in options:
        assert rows[name][2] == env_name
    assert rows["dir"] == (dir, "explicit", "SULIS_DIR")
    assert rows["ipc_term_buffer_length"][:2] == ("1048576", "explicit"), "a flag beats the environment"
    assert rows["client_liveness_timeout"][:2] == ("3s", "explicit")
    assert rows["threading_mode"][:2] == ("shared", "explicit")
    assert rows["timer_interval"][:2] == ("20ms", "environment")
    assert rows["idle_strategy"][1] == "environment"
    assert rows["term_buffer_length"][:2] == ("16777216", "default")
    explicit_or_env = {"dir", "ipc_term_buffer_length", "client_liveness_timeout", "threading_mode",
                       "timer_interval", "idle_strategy"}
    assert all(src == "default" for name, (_, src, _) in rows.items() if name not in explicit_or_env)
    assert not os.path.exists(dir), "printing the configuration starts nothing"


def test_cluster_node_print_config_shows_the_replication_channel_a_member_of_several_uses():
    members = "|".join(f"{i},localhost:9{i}10,localhost:9{i}11,localhost:9{i}12,localhost:0,127.0.0.{i + 1}:9{i}14"
                       for i in range(3))
    out = run("cluster-node", "--service", "x:Y", "--cluster-dir", "/dev/shm/sulis-cli-cluster-never-created",
              "--cluster-members", members, "--member-id", "1", "--print-config")
    assert out.returncode == 0, out.stderr
    rows = parse_config(out.stdout)
    # Not the table's localhost:0: copies of the log arrive on this member's archive host.
    assert rows["replication_channel"][:2] == ("aeron:udp?endpoint=127.0.0.2:0", "derived: this member's archive host")
    assert rows["member_id"][:2] == ("1", "explicit")


def test_print_config_defaults_match_the_library():
    out = run("driver", "--print-config", "--dir", "/dev/shm/sulis-cli-x")
    assert out.returncode == 0, out.stderr
    rows = parse_config(out.stdout)
    for name, value, source, _env, _doc in sulis._native.driver_config(dir="/dev/shm/sulis-cli-x"):
        assert rows[name][:2] == (value, source)


@pytest.mark.parametrize(
    "args,words",
    [
        (["--ipc-term-buffer-length", "100k"], "ipc_term_buffer_length"),
        (["--timer-interval", "soon"], "timer"),
        (["--threading-mode", "triple"], "threading mode"),
        (["--client-liveness-timeout", "5s", "--publication-unblock-timeout", "2s"], "publication_unblock_timeout"),
    ],
)
def test_bad_option_is_reported(args, words):
    out = run("driver", "--print-config", "--dir", "/dev/shm/sulis-cli-bad", *args)
    assert out.returncode != 0
    assert words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("args", [["driver", "--print-config"], ["driver", "--dir", "/dev/shm/sulis-cli-bad-env"],
                                  ["bench", "throughput", "--messages", "10", "--runs", "1"]])
def test_a_bad_environment_variable_is_one_line_for_the_commands_that_read_it(args):
    env = clean_env(SULIS_MTU_LENGTH="lots", SULIS_CLIENT_LIVENESS_TIMEOUT="soon")
    out = run(*args, env=env)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith("Error: environment variable SULIS_") and "not a" in line, line
    assert ("SULIS_MTU_LENGTH=lots" in line) or ("SULIS_CLIENT_LIVENESS_TIMEOUT=soon" in line)
    assert not os.path.exists("/dev/shm/sulis-cli-bad-env")


@pytest.mark.parametrize("args", [["--help"], ["driver", "--help"], ["stat", "--help"], ["errors", "-h"],
                                  ["--version"]])
def test_help_works_whatever_the_environment(args):
    out = run(*args, env=clean_env(SULIS_MTU_LENGTH="lots"))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert "Traceback" not in out.stdout


def test_a_bad_environment_variable_does_not_concern_the_tools(tmp_path):
    missing = str(tmp_path / "no-driver")
    out = run("stat", "--once", "--dir", missing, env=clean_env(SULIS_TERM_BUFFER_LENGTH="huge"))
    assert out.returncode == 1 and f"no media driver in {missing}" in out.stderr, out.stderr
    assert "SULIS_TERM_BUFFER_LENGTH" not in out.stderr


def test_version():
    out = run("--version")
    assert out.returncode == 0
    assert sulis.__version__ in out.stdout


def test_standalone_driver_serves_clients_and_stops_on_sigterm():
    dir = make_dir("sulis-cli-")
    proc = subprocess.Popen(
        [*CLI, "driver", "--dir", dir, "--threading-mode", "shared", "--ipc-term-buffer-length", "64k",
         "--timer-interval", "10ms"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )
    try:
        await_until(lambda: sulis._native.active_driver(dir) is not None or proc.poll() is not None, 30,
                    "the standalone driver to start")
        assert proc.poll() is None, proc.stderr.read()
        with sulis.Client(dir=dir, driver_timeout=5.0) as client:
            sub = client.add_subscription("aeron:ipc", 7)
            pub = client.add_exclusive_publication("aeron:ipc", 7)
            await_until(lambda: pub.is_connected and sub.image_count == 1)
            assert pub.term_buffer_length == 64 * 1024
            assert pub.offer(b"via the standalone driver") > 0
            got = []
            await_until(lambda: sub.poll(lambda b, h: got.append(bytes(b)), 10) >= 0 and got)
            assert got == [b"via the standalone driver"]

            # A second driver on the same directory is refused, naming it.
            second = run("driver", "--dir", dir)
            assert second.returncode != 0
            assert dir in second.stderr and "active media driver" in second.stderr

        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert f"running in {dir}" in err
        assert "stopped" in err
        assert sulis.read_errors(dir) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        shutil.rmtree(dir, ignore_errors=True)


@contextlib.contextmanager
def standalone_driver():
    """A ``sulis driver`` process (shared threading) in a fresh directory, as
    ``(dir, proc)``; killed if still running, and its directory removed, after."""
    dir = make_dir("sulis-cli-")
    proc = subprocess.Popen([*CLI, "driver", "--dir", dir, "--threading-mode", "shared"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        yield dir, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        shutil.rmtree(dir, ignore_errors=True)


def assert_stops_cleanly(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped" in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_standalone_driver_stops_cleanly_on_a_signal_right_after_start(sig):
    """Signalled the moment it is visible to clients, the driver still stops
    cleanly (the handlers are in place before the driver starts)."""
    for _ in range(3):
        with standalone_driver() as (dir, proc):
            await_until(lambda: sulis._native.active_driver(dir) is not None or proc.poll() is not None, 30,
                        interval=0)
            proc.send_signal(sig)
            assert_stops_cleanly(proc)


def _driver_threads(pid: int) -> list[int]:
    tids = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().startswith("sulis-driver"):
                tids.append(int(tid))
    return tids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_standalone_driver_stops_on_a_signal_taken_by_one_of_its_agent_threads(sig):
    """A process-wide signal may be taken by any thread that does not block it;
    aimed at an agent thread (tgkill) once the driver has settled into its
    wait, it still stops the driver cleanly and at once."""
    tgkill = ctypes.CDLL(None, use_errno=True).tgkill
    with standalone_driver() as (dir, proc):
        await_until(lambda: sulis._native.active_driver(dir) is not None and _driver_threads(proc.pid), 30)
        time.sleep(0.3)  # into the wait loop
        [agent] = _driver_threads(proc.pid)
        assert tgkill(proc.pid, agent, sig) == 0, os.strerror(ctypes.get_errno())
        assert_stops_cleanly(proc)


def run_without(module: str, *args) -> subprocess.CompletedProcess:
    """``sulis ARGS`` in a Python where importing ``module`` fails as if it were not installed."""
    blocked = f"import sys; sys.modules[{module!r}] = None; from sulis.cli import main; main(prog_name='sulis')"
    return subprocess.run([sys.executable, "-c", blocked, *args], capture_output=True, text=True, env=clean_env(),
                          timeout=60)


@pytest.mark.parametrize("module,args,extra", [
    ("prometheus_client", ["stat", "--prometheus", ":0", "--dir", "/dev/shm/sulis-cli-no-driver"], "prometheus"),
    ("hdrh", ["bench", "ping-pong", "--round-trips", "10", "--runs", "1"], "bench"),
])
def test_a_missing_optional_package_names_the_extra(module, args, extra):
    out = run_without(module, *args)
    assert out.returncode == 1, out.stderr
    (line,) = out.stderr.splitlines()
    assert f"pip install 'sulis[{extra}]'" in line and line.startswith("Error: "), line
    assert out.stdout == "", "it fails before starting anything"
    # The rest of the CLI does not need it.
    assert run_without(module, "--help").returncode == 0
    assert run_without(module, "stat", "--help").returncode == 0


def test_sulis_archive_has_a_flag_per_option_of_the_archive_table(tmp_path):
    """`sulis archive`'s flags come from the archive's options table, so none can be missing (it lacked
    --replication-channel, which sulis.Archive took); --print-config says where each value came from."""
    from sulis._native import archive_config

    help_text = run("archive", "--help").stdout
    for name, *_ in archive_config():
        if name not in ("archive_dir", "driver_dir"):
            assert "--" + name.replace("_", "-") in help_text, name
    r = run("archive", "--archive-dir", tmp_path / "a", "--dir", tmp_path / "d", "--print-config",
                "--replication-channel", "aeron:udp?endpoint=localhost:0", "--file-sync-level", "2",
                env=clean_env(SULIS_ARCHIVE_MAX_CONCURRENT_RECORDINGS="7"))
    assert r.returncode == 0, r.stderr
    lines = {line.split()[0]: line for line in r.stdout.splitlines()}
    replication = lines["replication_channel"]
    assert "aeron:udp?endpoint=localhost:0" in replication and "(explicit;" in replication
    assert "(environment; SULIS_ARCHIVE_MAX_CONCURRENT_RECORDINGS)" in lines["max_concurrent_recordings"]
    assert lines["catalog_file_sync_level"].split()[1] == "2"
    r = run("archive", "--archive-dir", tmp_path / "a", "--print-config", "--file-sync-level", "7")
    assert r.returncode != 0 and "file_sync_level=7: 7 is not 0, 1 or 2" in r.stderr, r.stderr
