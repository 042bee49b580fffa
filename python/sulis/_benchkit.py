"""The measured loops of sulis' benchmarks and the processes that run them: one library for
``sulis bench``, ``sulis demo`` and bench/ (bench/README.md, "How the harness is built").

* loops, the only timed code: ``publish`` / ``publish_batch`` (``offer`` / ``offer_batch``, a count
  or until ``stop()``), ``receive`` (timed) and ``count_intervals`` (per second) on ``poll_batch``,
  ``ping`` / ``echo``; ``send_until``, ``count_each`` and ``ping_each`` for per-message APIs (pyzmq,
  zenoh, iceoryx2, sockets). ``idle`` (e.g. ``os.sched_yield``) runs on every refused offer or empty
  poll (None spins); ``stalled(progress)`` (a ``Watchdog``) now and then, so that a dead peer ends a
  wait with an error; without either the loops are as tight as they can be;
* HdrHistograms of round trips; ``ChildProcess`` / ``Child``: children that die with us, whose
  stdout (JSON lines) a thread collects;
* roles: ``python -m sulis._benchkit '<json>'`` runs one of ``ROLES``: it says ``{"ready": ...}``,
  then its results (or ``{"error": ...}``), and keeps its streams up until its stdin closes.
"""

from __future__ import annotations

import contextlib
import ctypes
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
from collections.abc import Sequence

#: Histogram range of round-trip times: 1 ns .. 60 s, 3 significant digits.
HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_DIGITS = 1, 60_000_000_000, 3
#: Percentiles reported besides min, mean and max.
PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)
#: A waiting loop that sees no progress for this long gives up.
STALL_TIMEOUT_S = 30.0


def _check_mask(idle) -> int:
    """Waiting loops call ``stalled`` / ``stop`` once per this many + 1 empty rounds (fewer when each yields)."""
    return 0xFFFF if idle is None else 0x3FF


class BenchError(RuntimeError):
    """A run could not complete: a peer died, timed out or reported an error."""


# ----------------------------------------------------------------- small helpers

def scratch_dir(prefix: str) -> str:
    """A fresh directory under /dev/shm (or the temporary directory); the caller removes it."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def remove_dir(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


def free_port(host: str = "127.0.0.1", tcp: bool = False) -> int:
    """A UDP (or TCP) port that is free on ``host`` now (the kernel's pick); raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def pin(cpu: int | None) -> None:
    """Pins the calling thread (threads it starts later inherit the mask) to ``cpu``; None: no-op."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def await_until(cond, what: str, timeout: float = 10.0, stalled=None) -> None:
    """Polls ``cond()`` every millisecond; raises BenchError after ``timeout`` s.
    ``stalled()`` (if given) is called on every round, e.g. to see a peer die."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:g} s waiting for {what}")
        if stalled is not None:
            stalled()
        time.sleep(0.001)


class Watchdog:
    """``stalled(progress)`` for the measured loops: raises BenchError when
    ``progress`` has not changed for ``timeout`` seconds, or when ``alive()``
    (if given) raises because the peer is gone."""

    def __init__(self, what: str, timeout: float = STALL_TIMEOUT_S, alive=None) -> None:
        self.what, self.timeout, self.alive = what, timeout, alive
        self._seen, self._since = object(), time.monotonic()

    def __call__(self, progress: object = None) -> None:
        now = time.monotonic()
        if progress != self._seen:
            self._seen, self._since = progress, now
        elif now - self._since > self.timeout:
            raise BenchError(f"{self.what}: no progress for {self.timeout:g} s")
        if self.alive is not None:
            self.alive()


# ----------------------------------------------------------------- throughput loops

def _retry(offer, payload, idle, stalled, stop, where) -> int:
    """Offers ``payload`` again after a refusal until it is taken; returns the refusals (the first
    included), negated when ``stop()`` said to give up."""
    n = 1
    mask = _check_mask(idle)
    while offer(payload) < 0:
        n += 1
        if idle is not None:
            idle()
        if not n & mask:
            if stalled is not None:
                stalled(where)
            if stop is not None and stop():
                return -n
    return n


def publish(pub, payload, count: int | None = None, stop=None, idle=None, stalled=None, progress=None,
            chunk: int = 16384) -> tuple[int, int]:
    """One ``pub.offer(payload)`` per message, a refused one retried, ``count`` times or until ``stop()``
    (asked after every ``chunk`` messages and now and then while refused). ``progress(sent)`` after
    every chunk. Returns (messages sent, offers refused)."""
    offer = pub.offer
    sent = refused = 0
    while count is None or sent < count:
        k = chunk if count is None else min(chunk, count - sent)
        for i in range(k):
            if offer(payload) < 0:
                n = _retry(offer, payload, idle, stalled, stop, sent + i)
                refused += abs(n)
                if n < 0:
                    return sent + i, refused
        sent += k
        if progress is not None:
            progress(sent)
        if stop is not None and stop():
            break
    return sent, refused


def publish_batch(pub, payload: bytes, batch: int, stop=None, idle=None, count: int | None = None,
                  pool: bytes | None = None) -> tuple[int, int]:
    """``batch`` copies of ``payload`` as one data buffer with Arrow-layout int32 offsets, one
    ``pub.offer_batch`` call each; after back pressure the rest of the batch goes again (the offsets
    sliced, no copy). With ``pool``, each call's messages are the next ``batch`` payload lengths of
    it instead, cycled (random bytes, say, that a disk cannot write faster for being repeats). Until
    ``stop()`` or ``count`` messages; returns (messages sent, refused calls)."""
    import numpy as np

    per_call = len(payload) * batch
    datas = [memoryview(pool)[at:at + per_call] for at in range(0, len(pool) - per_call + 1, per_call)] \
        if pool is not None else [payload * batch]
    offsets = np.arange(0, per_call + 1, len(payload), dtype=np.int32)
    offer_batch = pub.offer_batch
    sent = refused = calls = 0
    while count is None or sent < count:
        k = batch if count is None else min(batch, count - sent)
        data = datas[calls % len(datas)]
        start = 0
        while start < k:
            n, _result = offer_batch(data=data, offsets=offsets[start:k + 1])
            start += n
            if start < k:
                refused += 1
                if idle is not None:
                    idle()
                if not refused % 100_000 and stop is not None and stop():
                    return sent + start, refused
        sent += k
        calls += 1
        if stop is not None and not calls % 64 and stop():
            break
    return sent, refused


def receive(sub, total: int, warmup: int = 0, fragments_per_message: int = 1, limit: int = 4096,
            idle=None, stalled=None) -> dict:
    """Drains ``total`` messages with ``sub.poll_batch(limit)``, counting fragments; the clock runs
    from the batch that completes the ``warmup`` (the first batch without) to the one that completes
    ``total`` (``limit`` shrinks so that short runs still take several batches). Returns
    ``{"received", "timed_messages", "seconds"}`` (``seconds`` 0.0 when all came in one batch)."""
    poll = sub.poll_batch
    clock = time.perf_counter
    want = total * fragments_per_message
    start_at = max(warmup * fragments_per_message, 1)
    limit = max(1, min(limit, (want - start_at) // 16))
    mask = _check_mask(idle)
    count = spins = 0

    def drain_to(target: int) -> None:
        nonlocal count, spins
        while count < target:
            n = len(poll(limit))
            if n:
                count += n
            else:
                spins += 1
                if idle is not None:
                    idle()
                if stalled is not None and not spins & mask:
                    stalled(count)

    drain_to(start_at)
    t0 = clock()
    c0 = count
    drain_to(want)
    t1 = clock() if count > c0 else t0
    return {"received": count // fragments_per_message, "timed_messages": (count - c0) / fragments_per_message,
            "seconds": t1 - t0}


def count_intervals(poll, limit: int, duration: float, emit, idle=None, give_up_s: float = STALL_TIMEOUT_S) -> int:
    """``len(poll(limit))`` counted per one-second interval: from the first message on,
    ``emit({"interval_s", "messages"})`` every second for ``duration`` seconds (each interval's
    own length is measured). Returns the count; raises BenchError when nothing came."""
    clock = time.perf_counter
    give_up = clock() + give_up_s
    count = 0
    while not count:
        count = len(poll(limit))
        if not count and clock() > give_up:
            raise BenchError(f"no message in {give_up_s:g} s")
    start = clock()
    interval_start, last = start, count
    nxt, end = start + 1.0, start + duration
    while True:
        n = len(poll(limit))
        if n:
            count += n
        elif idle is not None:
            idle()
        now = clock()
        if now >= nxt:
            emit({"interval_s": now - interval_start, "messages": count - last})
            interval_start, last = now, count
            nxt += 1.0
            if now >= end:
                return count


def send_until(send, msg, stop=None, count: int | None = None, chunk: int = 4096, again=(), stalled=None,
               progress=None) -> int:
    """``send(msg)`` once per message (a per-message API), ``count`` times or until ``stop()`` (asked
    every ``chunk`` messages); a send that raises one of ``again`` (a time-out) is tried again after
    ``stalled(sent)``; ``progress(sent)`` after every chunk. Returns the messages sent."""
    sent = 0
    while (count is None or sent < count) and not (stop is not None and stop()):
        n, i = chunk if count is None else min(chunk, count - sent), 0
        try:
            for i in range(n):  # noqa: B007 - how far it got when a send times out
                send(msg)
            i = n
        except again:
            stalled(sent + i)
        sent += i
        if progress is not None:
            progress(sent)
    return sent


def count_each(recv, duration: float, emit, chunk: int = 256) -> int:
    """``count_intervals`` for per-message APIs: ``recv()`` waits for and takes one message. The
    first message is already taken; the clock is read every ``chunk`` messages (each interval's
    length is measured, so its rate is exact). Returns the count, the first included."""
    clock = time.perf_counter
    count = 1
    start = clock()
    interval_start, last = start, count
    nxt, end = start + 1.0, start + duration
    rng = range(chunk)
    while True:
        for _ in rng:
            recv()
        count += chunk
        now = clock()
        if now >= nxt:
            emit({"interval_s": now - interval_start, "messages": count - last})
            interval_start, last = now, count
            nxt += 1.0
            if now >= end:
                return count


# ----------------------------------------------------------------- round-trip loops

def ping(pub, sub, msg, warmup: int, n: int, assemble: bool = False, batch: bool = False, idle=None,
         stalled=None, progress=None) -> list[int]:
    """``warmup + n`` round trips: ``t0``, ``offer(msg)`` (retried), poll until the echo is back (with
    ``sub.poll(handler, 1)``, ``sub.poll_batch(1)`` when ``batch``, through a FragmentAssembler when
    ``assemble``); ``progress(done)`` every 1024, untimed. Returns the last ``n`` times in ns."""
    from . import FragmentAssembler

    offer = pub.offer
    poll = sub.poll
    poll_batch = sub.poll_batch
    clock = time.perf_counter_ns
    samples = [0] * n

    def handler(_buffer, _header):
        pass

    if batch:
        def arrived() -> int:
            return len(poll_batch(1))
    elif assemble:
        whole = [0]

        def on_whole(_buffer, _header):
            whole[0] += 1

        assembler = FragmentAssembler(on_whole)

        def arrived() -> int:
            poll(assembler, 16)
            got, whole[0] = whole[0], 0
            return got
    else:
        def arrived() -> int:
            return poll(handler, 1)

    if idle is None and stalled is None and progress is None and not assemble:
        # The tightest loops: no call but the API's.
        for i in range(warmup + n):
            t0 = clock()
            while offer(msg) < 0:
                pass
            if batch:
                while not len(poll_batch(1)):
                    pass
            else:
                while not poll(handler, 1):
                    pass
            t1 = clock()
            if i >= warmup:
                samples[i - warmup] = t1 - t0
        return samples
    mask = _check_mask(idle)
    for i in range(warmup + n):
        t0 = clock()
        if offer(msg) < 0:
            _retry(offer, msg, idle, stalled, None, i)
        spins = 0
        while not arrived():
            spins += 1
            if idle is not None:
                idle()
            if stalled is not None and not spins & mask:
                stalled(i)
        t1 = clock()
        if i >= warmup:
            samples[i - warmup] = t1 - t0
        if progress is not None and not i & 1023:
            progress(i)
    return samples


def echo(sub, pub, total: int, assemble: bool = False, batch: bool = False, idle=None, stalled=None) -> int:
    """Offers every message of ``sub`` back on ``pub`` until ``total`` were echoed (polled as in
    ``ping``); returns the count."""
    from . import FragmentAssembler

    offer = pub.offer
    done = [0]

    def echo_one(buffer, _header):
        if offer(buffer) < 0:
            _retry(offer, buffer, idle, stalled, None, done[0])
        done[0] += 1

    if batch:
        poll_batch = sub.poll_batch

        def poll_once() -> int:
            b = poll_batch(1)
            if len(b):
                echo_one(b.data, None)
            return len(b)
    else:
        poll = sub.poll
        handler = FragmentAssembler(echo_one) if assemble else echo_one
        limit = 16 if assemble else 1

        def poll_once() -> int:
            return poll(handler, limit)

        if idle is None and stalled is None:
            while done[0] < total:
                poll(handler, limit)
            return done[0]
    mask = _check_mask(idle)
    spins = 0
    while done[0] < total:
        if not poll_once():
            spins += 1
            if idle is not None:
                idle()
            if stalled is not None and not spins & mask:
                stalled(done[0])
    return done[0]


def ping_each(send, try_recv, msg, warmup: int, n: int, idle=None, stalled=None, progress=None) -> list[int]:
    """``ping`` for per-message APIs: ``t0``, ``send(msg)``, ``try_recv()`` until it returns
    something other than None; ``idle()`` and ``stalled(i)`` after every empty try (meant for a
    try that blocks a while), ``progress(i)`` every 1024 round trips. Returns the last ``n`` round
    trips in ns."""
    clock = time.perf_counter_ns
    samples = [0] * n
    tight = idle is None and stalled is None
    for i in range(warmup + n):
        t0 = clock()
        send(msg)
        if tight:
            while try_recv() is None:
                pass
        else:
            while try_recv() is None:
                if idle is not None:
                    idle()
                if stalled is not None:
                    stalled(i)
        t1 = clock()
        if i >= warmup:
            samples[i - warmup] = t1 - t0
        if progress is not None and not i & 1023:
            progress(i)
    return samples


# ----------------------------------------------------------------- latency histograms

def histogram(samples_ns):
    """An HdrHistogram of round-trip times in ns (clamped to its range)."""
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram(HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_DIGITS)
    record = hist.record_value
    for ns in samples_ns:
        record(min(max(ns, HIST_LOWEST_NS), HIST_HIGHEST_NS))
    return hist


def values_at_percentiles(hist, percentiles) -> list[int]:
    """``hist.get_value_at_percentile`` for many percentiles in one pass over the recorded values."""
    targets = sorted((hist.get_target_count_at_percentile(p), i) for i, p in enumerate(percentiles))
    out = [0] * len(targets)
    if not hist.get_total_count():
        return out
    t = 0
    for it in hist.get_recorded_iterator():
        value = hist.get_highest_equivalent_value(it.value_iterated_to)
        while t < len(targets) and targets[t][0] <= it.total_count_to_this_value:
            out[targets[t][1]] = value
            t += 1
        if t == len(targets):
            break
    return out


def pct_key(p: float) -> str:
    """``50.0`` -> ``"p50_us"``, ``99.99`` -> ``"p99_99_us"``."""
    return "p" + f"{p:g}".replace(".", "_") + "_us"


def summarize(hist) -> dict:
    """Count, min, mean, the ``PERCENTILES`` and max of a histogram of ns, in µs."""
    values = values_at_percentiles(hist, PERCENTILES)
    out = {"count": hist.get_total_count(), "min_us": hist.get_min_value() / 1000.0,
           "mean_us": hist.get_mean_value() / 1000.0}
    for p, v in zip(PERCENTILES, values, strict=True):
        out[pct_key(p)] = v / 1000.0
    out["max_us"] = hist.get_max_value() / 1000.0
    return out


def encode(hist) -> str:
    enc = hist.encode()
    return enc.decode() if isinstance(enc, bytes) else enc


def decode(text: str):
    from hdrh.histogram import HdrHistogram

    return HdrHistogram.decode(text)


# ----------------------------------------------------------------- child processes

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
    """In the child before exec: own session (a terminal's ^C reaches only the parent, which stops
    it), default SIGINT, SIGTERM when the parent dies."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent()


class ChildProcess:
    """A child process in its own session (or not: ``own_session``) that gets SIGTERM when we die;
    a thread collects its stdout lines with their arrival times (``lines``), stderr goes to a
    temporary file (:meth:`stderr_tail`). ``stdin``: ``"devnull"``, ``"pipe"`` (its closing by
    :meth:`close` is the cue to go) or a text written at once."""

    def __init__(self, cmd: Sequence[str], what: str, *, stdin: str = "devnull", own_session: bool = False,
                 cwd: str | None = None) -> None:
        self.cmd, self.what = [str(c) for c in cmd], what
        self.lines: list[tuple[float, str]] = []
        self.eof, self._cursor, self._cv = False, 0, threading.Condition()
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(
            self.cmd, stdin=subprocess.DEVNULL if stdin == "devnull" else subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, preexec_fn=_own_session if own_session else die_with_parent, text=True, bufsize=1,
            cwd=cwd)
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
    """A role's process (``cmd``, by default ``python -m sulis._benchkit`` with ``params``): JSON lines
    out, stdin held open until :meth:`close` (:meth:`finish`: after ``timeout`` s for it to go)."""

    def __init__(self, what: str, params: dict | None = None, cmd: Sequence[str] | None = None, **kw) -> None:
        super().__init__(cmd or [sys.executable, "-m", "sulis._benchkit", json.dumps(params)], what, stdin="pipe", **kw)

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


# ----------------------------------------------------------------- roles (the child's side)

#: Set once the parent closed our stdin: a role keeps its streams up until then.
STDIN_CLOSED = threading.Event()


def say(obj: dict) -> None:
    """A role's report: one JSON object per stdout line."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def idle_of(name: str | None):
    """What a client calls while it waits: ``os.sched_yield`` for "yield", None (spin) otherwise."""
    return os.sched_yield if name == "yield" else None


@contextlib.contextmanager
def side(p: dict):
    """A role's client, on an embedded driver of its own when ``p["driver"]`` holds its options
    (else on the driver in ``p["dir"]``). Pinned (threads inherit the mask they start with) to
    ``p["driver_cpu"]`` before the driver starts, to ``p["cpu"]`` after it and before the client's
    thread starts, the role's thread alone to ``p["loop_cpu"]`` last. Yields (driver dir, client)."""
    from . import Client, MediaDriver

    pin(p.get("driver_cpu"))
    driver = None
    if p.get("driver") is not None:
        driver = MediaDriver(dir=p["dir"], dir_delete_on_shutdown=True, **p["driver"])
    try:
        pin(p.get("cpu"))
        with Client(dir=p["dir"], name=f"sulis bench {p['role']}") as client:
            pin(p.get("loop_cpu"))
            yield (driver.dir if driver is not None else p["dir"]), client
    finally:
        if driver is not None:
            driver.close()


def _role_sulis_sub(p: dict) -> None:
    """Subscriber: ``receive`` (``total``, ``warmup``) or, with ``duration``, ``count_intervals``."""
    with side(p) as (_dir, client):
        sub = client.add_subscription(p["channel"], p["stream"])
        say({"ready": True})
        idle = idle_of(p.get("idle"))
        if "duration" in p:
            count = count_intervals(sub.poll_batch, p.get("limit", 4096), p["duration"], say, idle)
            say({"done": True, "received": count})
        else:
            say(receive(sub, p["total"], p["warmup"], p.get("fragments", 1), idle=idle,
                        stalled=Watchdog("receiving the stream")))
        STDIN_CLOSED.wait()


def _role_sulis_pong(p: dict) -> None:
    with side(p) as (_dir, client):
        sub = client.add_subscription(p["ping_channel"], p["ping_stream"])
        pub = client.add_exclusive_publication(p["pong_channel"], p["pong_stream"])
        say({"ready": True})
        done = echo(sub, pub, p["total"], p.get("assemble", False), p.get("batch", False), idle_of(p.get("idle")),
                    None if p.get("tight") else Watchdog("echoing pings"))
        say({"echoed": done})
        STDIN_CLOSED.wait()


def _role_zmq_pull(p: dict) -> None:
    """PULL: bound, counts ``total`` messages timed after ``warmup``, or per second for ``duration``."""
    import zmq

    with _zmq_bound(zmq.PULL, p["endpoint"]) as sock:
        recv = sock.recv
        try:
            if "duration" in p:
                recv()
                say({"done": True, "received": count_each(recv, p["duration"], say)})
                while not STDIN_CLOSED.is_set():  # drain: the pusher may wait for room
                    with contextlib.suppress(zmq.Again):
                        recv(zmq.NOBLOCK)
                        continue
                    time.sleep(0.0005)
                return
            total, start_at = p["total"], max(p["warmup"], 1)
            for _ in range(start_at):
                recv()
            t0 = time.perf_counter()
            for _ in range(total - start_at):
                recv()
            t1 = time.perf_counter()
        except zmq.Again:
            raise BenchError(f"no message for {STALL_TIMEOUT_S:g} s") from None
        say({"received": total, "timed_messages": total - start_at, "seconds": t1 - t0})
        STDIN_CLOSED.wait()


def _role_zmq_rep(p: dict) -> None:
    import zmq

    with _zmq_bound(zmq.REP, p["endpoint"], linger_ms=1000) as sock:  # the last reply still goes out
        recv, send = sock.recv, sock.send
        try:
            for _ in range(p["total"]):
                send(recv(copy=False), copy=False)
        except zmq.Again:
            raise BenchError(f"no request for {STALL_TIMEOUT_S:g} s") from None
        say({"echoed": p["total"]})
        STDIN_CLOSED.wait()


@contextlib.contextmanager
def _zmq_bound(socket_type: int, endpoint: str, linger_ms: int = 0):
    """A socket of ``socket_type`` bound to ``endpoint`` (``tcp://HOST:0`` picks a free port), receives
    timing out after STALL_TIMEOUT_S; says ``ready`` with the endpoint bound, then yields the socket."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(socket_type)
    try:
        sock.setsockopt(zmq.RCVTIMEO, int(STALL_TIMEOUT_S * 1000))
        if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
            sock.bind_to_random_port(endpoint[: -len(":0")])
        else:
            sock.bind(endpoint)
        say({"ready": True, "endpoint": sock.getsockopt_string(zmq.LAST_ENDPOINT)})
        yield sock
    finally:
        sock.close(linger=linger_ms)
        ctx.term()


ROLES = {
    "sulis-sub": _role_sulis_sub,
    "sulis-pong": _role_sulis_pong,
    "zmq-pull": _role_zmq_pull,
    "zmq-rep": _role_zmq_rep,
}


def _stop(*_args) -> None:
    raise KeyboardInterrupt


def _watch_stdin() -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdin.read()
    STDIN_CLOSED.set()


def child_main(argv: list[str], roles: dict = ROLES) -> int:
    """Runs the role ``params["role"]`` of ``roles``, ``params`` being the JSON in ``argv[0]``.
    SIGTERM and SIGINT unwind it (its driver deletes its directory); an error is reported as
    ``{"error": ...}`` and exit status 1."""
    params = json.loads(argv[0])
    parent = os.getppid()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the request above
        return 1
    threading.Thread(target=_watch_stdin, daemon=True).start()
    try:
        roles[params["role"]](params)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # reported to the parent, which names the role
        from .errors import SulisError

        text = str(e) if isinstance(e, (BenchError, SulisError)) else f"{type(e).__name__}: {e}"
        with contextlib.suppress(OSError):
            say({"error": text})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
