"""Child processes whose stdout a thread collects line by line, and that die with us.

The one base of the benchmark children (``sulis bench``'s second process, the
Aeron JVMs, the ``bench/`` scripts' roles): stdout lines are kept with their
arrival times (``lines``) and can be read in order with a time-out
(:meth:`ChildProcess.next_line`); stderr is kept in a temporary file for error
messages, or left to the terminal; the kernel sends the child SIGTERM when the
thread that started it dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

_PR_SET_PDEATHSIG = 1
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _libc = None


def die_with_parent() -> None:
    """Asks Linux for SIGTERM when the parent dies (no-op elsewhere)."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def child_setup() -> None:
    """In the child before exec: own session (a terminal ^C reaches only the parent, which stops it),
    default SIGINT (a child started with SIGINT ignored would not handle it), SIGTERM when the parent dies."""
    import os

    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent()


class ChildProcess:
    """A child process; its stdout lines are collected with their arrival times in ``lines``.

    * ``stdin``: ``"devnull"``, ``"pipe"`` (closed by :meth:`close`: a cue to go) or a text written at once;
    * ``own_session``: its own session (:func:`child_setup`), else only :func:`die_with_parent`;
    * ``capture_stderr``: stderr into a temporary file (:meth:`stderr_tail`), else inherited.
    """

    def __init__(self, cmd: Sequence[str], what: str, *, stdin: str = "devnull", own_session: bool = False,
                 capture_stderr: bool = True, cwd: str | Path | None = None) -> None:
        self.cmd = [str(c) for c in cmd]
        self.what = what
        self.lines: list[tuple[float, str]] = []
        self.eof = False
        self._cursor = 0
        self._cv = threading.Condition()
        self._stderr = tempfile.TemporaryFile(mode="w+b") if capture_stderr else None
        text = None if stdin in ("devnull", "pipe") else stdin
        self.proc = subprocess.Popen(
            self.cmd,
            stdin=subprocess.DEVNULL if stdin == "devnull" else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            preexec_fn=child_setup if own_session else die_with_parent,
            text=True,
            bufsize=1,
            cwd=cwd,
        )
        if text is not None:
            self.proc.stdin.write(text)
            self.proc.stdin.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in self.proc.stdout:
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
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.what}: nothing printed in {timeout_s:g} s")
                self._cv.wait(remaining)
            line = self.lines[self._cursor][1]
            self._cursor += 1
            return line

    def stderr_tail(self, n: int = 2000) -> str:
        """The end of what it wrote to stderr ("" when not captured)."""
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            return self._stderr.read().decode("utf-8", "replace")[-n:]
        except (OSError, ValueError):
            return ""

    def stop(self, grace_s: float = 10.0, first: signal.Signals = signal.SIGINT) -> str:
        """``first`` (a clean shutdown), then SIGTERM, then SIGKILL, each given time to work;
        returns the one that worked ("exited" if none was needed). Its output is all read then."""
        how = "exited"
        steps = [(first, grace_s)] + [(s, 5.0) for s in (signal.SIGTERM, signal.SIGKILL) if s != first]
        for sig, wait in steps:
            if self.proc.poll() is not None:
                break
            how = sig.name
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait)
        self._reader.join(5.0)  # every line it printed is in ``lines``
        return how

    def close(self, grace_s: float = 5.0, first: signal.Signals = signal.SIGINT) -> None:
        """Closes its stdin pipe (its cue to stop) and waits up to ``grace_s`` for it to go, then
        :meth:`stop`; releases everything. Idempotent. Without a pipe to close there is no cue to
        wait on: :meth:`stop` comes at once."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
        if self.proc.poll() is None:
            self.stop(grace_s=2.0, first=first)
        self._reader.join(5.0)
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
