"""Processes of the benchmarks and tests: children that die with us and speak JSON lines, their
scratch directories, free ports, CPU pins, and how much CPU other processes took meanwhile.

``ChildProcess``: any command in a process of its own (or not) that gets SIGTERM when we die, its
stdout lines collected by a thread with their arrival times, its stderr in a file. ``Child``: a
benchmark role (``python -m sulis._benchkit.roles '<json>'``, a native or a Java one), read as JSON
objects with time-outs, stopped by closing its stdin, then SIGTERM, then SIGKILL. The test suite's
``conftest.Child`` and the interop harness build on ``ChildProcess`` too.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .loops import STALL_TIMEOUT_S, BenchError

# ----------------------------------------------------------------- directories, ports, CPUs

_CREATED_DIRS: set[str] = set()
# <prefix><pid>-<suffix without '-'>: run directories (and iceoryx2's files) of a benchmark.
_STALE_NAME = re.compile(r"^sulis-bench-(.+)-(\d+)-([^-]+)$")


def scratch_dir(prefix: str, parent: str | None = None) -> str:
    """A fresh ``<prefix><pid>-<random>`` directory under ``parent``, else /dev/shm (or the temporary
    directory): removed by ``remove_dir``, at the latest at exit, or (``sulis-bench-*``, in /dev/shm) by
    ``remove_stale`` of the next benchmark if this process was killed."""
    base = parent or ("/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None)
    path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base)
    _CREATED_DIRS.add(path)
    return path


def remove_dir(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)
        _CREATED_DIRS.discard(path)


@atexit.register
def _remove_created_dirs() -> None:
    for path in list(_CREATED_DIRS):
        remove_dir(path)


def remove_stale() -> list[str]:
    """Removes what killed benchmarks left in /dev/shm and the temp dir (entries named
    ``sulis-bench-<what>-<pid>-<suffix>`` whose pid is gone). Returns the paths removed."""
    removed = []
    for base in {"/dev/shm", tempfile.gettempdir()}:
        for name in os.listdir(base) if os.path.isdir(base) else []:
            m = _STALE_NAME.match(name)
            if m and not os.path.exists(f"/proc/{m.group(2)}"):
                path = os.path.join(base, name)
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)
                removed.append(path)
    return removed


def remove_shm_prefix(prefix: str) -> None:
    """Removes the /dev/shm entries named ``prefix...`` (a peer's files of one run, e.g. iceoryx2's)."""
    for name in os.listdir("/dev/shm") if prefix and "/" not in prefix else []:
        if name.startswith(prefix):
            path = os.path.join("/dev/shm", name)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)



# Ports handed out here come from below the kernel's ephemeral range (32768 up), a block per pytest worker: a
# port the kernel picks for a port-0 probe, once the probe closes, may be the next port-0 bind of any process (a
# CI run saw a cluster member's log port taken by the other worker's process before the member bound it; a
# benchmark saw a member's), while these are picked by nobody else.
_PORTS_LOW, _PORTS_HIGH = 21000, 32000


def _port_block() -> range:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    size = (_PORTS_HIGH - _PORTS_LOW) // max(1, workers)
    return range(_PORTS_LOW + worker * size, _PORTS_LOW + (worker + 1) * size)


_BLOCK = _port_block()
_START = os.getpid() % len(_BLOCK)  # runs one after another start at different places
_candidates = itertools.cycle([*_BLOCK[_START:], *_BLOCK[:_START]])


def free_port(host: str = "127.0.0.1", tcp: bool = False) -> int:
    """A UDP (or TCP) port free on ``host`` now, from this process's block below the ephemeral range (not
    handed out again by this process until the block has gone round); raises OSError if none is."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(len(_BLOCK)):
        port = next(_candidates)
        with socket.socket(family, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise OSError(f"no free {'TCP' if tcp else 'UDP'} port on {host} in {_BLOCK.start}-{_BLOCK.stop - 1}")


def two_free_ports(host: str = "127.0.0.1", tcp: bool = False) -> tuple[int, int]:
    """Two different UDP (or TCP) ports free on ``host`` now (a ping and a pong endpoint)."""
    ping, pong = free_port(host, tcp), free_port(host, tcp)
    while pong == ping:
        pong = free_port(host, tcp)
    return ping, pong


def cpu_summary() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    return f"{os.cpu_count()} CPUs ({model}), Python {sys.version.split()[0]}"


def pins(cpu: int | None, driver: bool = False) -> dict:
    """Role parameters that pin it (and its client's thread) to ``cpu`` (None: nothing) once its
    driver runs; ``driver``: the driver's threads too."""
    return {} if cpu is None else {"cpu": cpu, **({"driver_cpu": cpu} if driver else {})}



def pin(cpu: int | None) -> None:
    """Pins the calling thread (threads it starts later inherit the mask) to ``cpu``; None: no-op."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})



# ----------------------------------------------------------------- child processes

def role_command(role: str, **params) -> list[str]:
    """The command of the Python role ``role`` of ``sulis._benchkit.roles`` with ``params``."""
    return [sys.executable, "-m", "sulis._benchkit.roles", json.dumps({"role": role, **params})]


_PR_SET_PDEATHSIG = 1
_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _libc = None


def die_with_parent() -> None:
    """Asks Linux for SIGTERM when the parent (thread) dies (no-op elsewhere)."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _own_session() -> None:
    """In the child before exec: its own process group (a terminal's ^C reaches only the parent,
    which stops it; ``killpg`` stops the child and its own children), default SIGINT, SIGTERM when
    the parent dies. A process group, not a session: Linux's autogroup scheduling puts each session
    in a group of its own, and beside two busy loops an Aeron JVM started with ``setsid`` waited on
    the run queue for 102 s of its first 102 s (schedstat) and ran 88 ms; with setpgid the same test
    passed 3 times in 3 (15-17 s), with setsid it failed 5 times in 7 (2026-11-27)."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent()


#: Launchers that set what ``_own_session``/``die_with_parent`` set, then exec the command: no Python runs in
#: the child between fork and exec. ``preexec_fn`` runs Python there, which Python documents as unsafe in a
#: process with threads, and a CI run hung in it once (a pytest worker with Spark's threads; 2026-11-27).
_SETPRIV = shutil.which("setpriv")
_ENV = shutil.which("env")


def _launcher(own_session: bool) -> list[str] | None:
    """``env --default-signal=INT setpriv --pdeathsig TERM --`` (the first part with ``own_session``: a
    parent started in the background ignores SIGINT, and its children would too); None without them."""
    if _SETPRIV is None:
        return None
    launcher = [_SETPRIV, "--pdeathsig", "TERM", "--"]
    if not own_session:
        return launcher
    return None if _ENV is None else [_ENV, "--default-signal=INT", *launcher]


class ChildProcess:
    """A child process in its own process group (or not: ``own_session``) that gets SIGTERM when we die;
    a thread collects its stdout lines with their arrival times (``lines``), stderr goes to a
    temporary file (:meth:`stderr_tail`). ``stdin``: ``"devnull"``, ``"pipe"`` (its closing by
    :meth:`close` is the cue to go) or a text written at once."""

    def __init__(self, cmd: Sequence[str], what: str, *, stdin: str = "devnull", own_session: bool = False,
                 cwd: str | None = None, env: dict | None = None) -> None:
        self.cmd, self.what = [str(c) for c in cmd], what
        self.lines: list[tuple[float, str]] = []
        self.eof, self._cursor, self._cv = False, 0, threading.Condition()
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        launcher = _launcher(own_session)
        if launcher is not None:
            extra: dict = {"process_group": 0} if own_session else {}
            cmd = [*launcher, *self.cmd]
        else:  # pragma: no cover - no setpriv (not util-linux)
            extra, cmd = {"preexec_fn": _own_session if own_session else die_with_parent}, self.cmd
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL if stdin == "devnull" else subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, text=True, bufsize=1, cwd=cwd, env=env, **extra)
        if stdin not in ("devnull", "pipe") and self.proc.stdin is not None:
            self.proc.stdin.write(stdin)
            self.proc.stdin.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in self.proc.stdout or ():
                with self._cv:
                    self.lines.append((time.monotonic(), line.rstrip("\n")))
                    self._cv.notify_all()
        with self._cv:
            self.eof = True
            self._cv.notify_all()

    def next_line(self, timeout_s: float) -> str | None:
        """The next line not yet read this way (None once stdout is closed and all are read);
        raises TimeoutError after ``timeout_s`` without one."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._cursor >= len(self.lines):
                if self.eof:
                    return None
                if deadline <= time.monotonic():
                    raise TimeoutError(f"{self.what}: nothing printed in {timeout_s:g} s")
                self._cv.wait(deadline - time.monotonic())
            self._cursor += 1
            return self.lines[self._cursor - 1][1]

    def stderr_tail(self, lines: int = 12) -> str:
        """The last ``lines`` lines it wrote to stderr, without the JVM's warnings."""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            text = self._stderr.read().decode("utf-8", "replace")
            return "\n".join([line for line in text.splitlines() if not line.startswith("WARNING:")][-lines:])
        return ""

    def stop(self, grace_s: float = 5.0, first: signal.Signals = signal.SIGTERM) -> None:
        """``first`` (a clean shutdown), then after ``grace_s`` SIGKILL; its output is all read then."""
        for sig, wait in ((first, grace_s), (signal.SIGKILL, 10.0)):
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(wait)
        self._reader.join(5.0)

    def close(self, grace_s: float = 5.0) -> None:
        """Closes its stdin pipe (the cue to go), waits up to ``grace_s`` for it to exit, then
        :meth:`stop`; releases everything. Idempotent."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
        self.stop(grace_s=2.0)
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        self._stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Child(ChildProcess):
    """A role's process (``cmd``, by default the Python role ``params``: ``role_command``): JSON lines
    out, stdin held open until :meth:`close` (:meth:`finish`: after ``timeout`` s for it to go)."""

    def __init__(self, what: str, params: dict | None = None, cmd: Sequence[str] | None = None, **kw) -> None:
        super().__init__(cmd or role_command(**(params or {})), what, stdin="pipe", **kw)

    def _failed(self, why: str) -> BenchError:
        tail = self.stderr_tail()
        return BenchError(f"the {self.what} process {why}" + ("\n  " + tail.replace("\n", "\n  ") if tail else ""))

    def _exited(self, status: int | None) -> BaseException:
        """What a parent raises for a child that exited with ``status``: KeyboardInterrupt when
        Ctrl-C reached the process group and the child went first (a role exits 130 on SIGINT),
        else a BenchError naming the status."""
        if status in (130, -signal.SIGINT):
            return KeyboardInterrupt()
        return self._failed(f"exited (status {status})")

    def alive(self) -> None:
        """Raises BenchError if the process has exited."""
        if self.proc.poll() is not None:
            raise self._exited(self.proc.returncode)

    def read(self, timeout: float = STALL_TIMEOUT_S, watch: Sequence[Child] = ()) -> dict:
        """The next JSON object (other lines are skipped); raises BenchError when the process
        exits, stays silent for ``timeout`` s or reports ``{"error"}``, or when one of ``watch``
        (the other side) exits with a failure meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.next_line(min(max(deadline - time.monotonic(), 0.0), 0.5))
            except TimeoutError:
                for other in watch:
                    status = other.proc.poll()
                    if status in (130, -signal.SIGINT):
                        raise KeyboardInterrupt from None
                    if status not in (None, 0):
                        raise other._failed(f"failed (status {status}) while the {self.what} ran") from None
                if time.monotonic() >= deadline:
                    raise BenchError(f"the {self.what} process said nothing for {timeout:g} s") from None
                continue
            if line is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=10)
                raise self._exited(self.proc.poll())
            with contextlib.suppress(ValueError):  # a line that is not ours (a library's) is skipped
                msg = json.loads(line) if line.startswith("{") else None
                if msg is not None and "error" in msg:
                    raise BenchError(f"the {self.what} process: {msg['error']}")
                if msg is not None:
                    return msg

    def finish(self, timeout: float = 10.0) -> None:
        self.close(grace_s=timeout)



# ----------------------------------------------------------------- interference

def _proc_table() -> dict[int, tuple[int, float]]:
    """{pid: (ppid, cpu seconds)} of every process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                rest = f.read().decode("ascii", "replace").rsplit(")", 1)[1].split()  # after "pid (comm)"
            out[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / tick)
        except (OSError, IndexError, ValueError):
            continue
    return out


class Interference:
    """CPU time that processes outside this benchmark used while it ran (foreign CPU seconds per
    wall second in ``share``), so that a run a build or a test suite slowed down is flagged::

        with Interference() as itf:
            run()
    """

    def __enter__(self) -> Interference:
        self._before, self._t0, self.share = _proc_table(), time.monotonic(), 0.0
        return self

    @staticmethod
    def _ours(table: dict) -> set[int]:
        ours, changed = {os.getpid()}, True
        while changed:
            new = {pid for pid, (ppid, _) in table.items() if ppid in ours} - ours
            ours |= new
            changed = bool(new)
        return ours

    def __exit__(self, *exc) -> None:
        wall = time.monotonic() - self._t0
        after = _proc_table()
        ours = self._ours(after) | self._ours(self._before)
        foreign = sum(cpu - self._before.get(pid, (0, 0.0))[1] for pid, (_, cpu) in after.items() if pid not in ours)
        self.share = max(foreign, 0.0) / wall if wall > 0 else 0.0


def wait_for_quiet(max_share: float, max_wait_s: float) -> None:
    """Waits (up to ``max_wait_s``) for a second in which other processes use at most ``max_share`` of a CPU."""
    t0, told = time.monotonic(), False
    while True:
        with Interference() as itf:
            time.sleep(1.0)
        if itf.share <= max_share or time.monotonic() - t0 >= max_wait_s:
            if told:
                print(f"      (waited {time.monotonic() - t0:.0f} s; others now use {itf.share * 100:.0f}% of a CPU)")
            return
        if not told:
            print(f"      other processes use {itf.share * 100:.0f}% of a CPU: waiting up to {max_wait_s:g} s")
        told = True
