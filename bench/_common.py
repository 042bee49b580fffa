"""Helpers shared by the benchmarks in bench/ (ipc_*, udp_*).

Nothing here is timed except the measured loops (marked as such):
child-process plumbing (one JSON line per event, read with time-outs),
process start-up and clean-up, the native binary's build, latency histograms,
result tables and the JSON record kept in bench/results/ (git-ignored).

Clean-up: every child is started through :class:`Child` (it gets SIGTERM when
the orchestrator dies: ``sulis._child.ChildProcess``) and stopped
with :func:`stop_all` (SIGTERM, a grace period, then SIGKILL); child roles call
:func:`child_signals` so that SIGTERM unwinds their ``with`` blocks (the
embedded drivers delete their directories); every driver directory lives under
a :func:`shm_dir` that the orchestrator removes in a ``finally`` (and at exit);
native binaries get ``--dir-base`` with such a directory.
"""
from __future__ import annotations

import argparse
import atexit
import datetime as _dt
import glob
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

from sulis._child import ChildProcess

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"

if str(ROOT) not in sys.path:  # `python bench/x.py` from anywhere: `bench.peers` importable
    sys.path.insert(0, str(ROOT))


class Skip(RuntimeError):
    """A peer or variant that cannot run here (not installed, no cargo...)."""


def require_release_build() -> str:
    """Exits unless the installed sulis extension is a release build. Returns the profile."""
    try:
        import sulis
    except ImportError as exc:
        sys.exit(f"cannot import sulis ({exc}); build it with `maturin develop --release` in .venv")
    profile = getattr(sulis, "build_profile", "?")
    if profile != "release":
        sys.exit(f"refusing to benchmark a {profile!r} build of sulis: "
                 "rebuild with `maturin develop --release` (sulis.build_profile must be 'release')")
    return profile


def median(xs: Iterable[float]) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


_CREATED_DIRS: set[str] = set()


def shm_dir(prefix: str) -> str:
    """A fresh directory ``<prefix><pid>-<random>`` under /dev/shm (or the temp dir)
    for one run's driver(s).

    Removed by :func:`rm_tree` after the run, or at the latest when the
    orchestrator exits (atexit), whatever happened in between; if the
    orchestrator itself is killed (SIGKILL), the next benchmark removes it
    (:func:`remove_stale`: the pid in its name is gone).
    """
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base)
    _CREATED_DIRS.add(path)
    return path


# sulis-bench-<what>-<pid>-<suffix without '-'>: the Python benchmarks' run
# directories (shm_dir), the native binaries' driver directories
# (sulis-bench-udp-ping-<pid>-<run>) and iceoryx2's files of a run
# (sulis-bench-iox2-<pid>-<hex>_...).
_STALE_NAME = re.compile(r"^sulis-bench-(.+)-(\d+)-([^-]+)$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Removes what benchmarks killed with SIGKILL left in /dev/shm and the temp
    dir: entries named ``sulis-bench-<what>-<pid>-<suffix>`` whose pid no longer
    runs (a live benchmark's entries are left alone). Returns the paths removed."""
    removed = []
    for base in {"/dev/shm", tempfile.gettempdir()}:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            m = _STALE_NAME.match(name)
            if not m or _pid_alive(int(m.group(2))):
                continue
            path = os.path.join(base, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


def rm_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    _CREATED_DIRS.discard(path)


@atexit.register
def _remove_created_dirs() -> None:
    for path in list(_CREATED_DIRS):
        rm_tree(path)


def positive(name: str, value, minimum=1):
    """Returns ``value`` or exits with a clear message when it is below ``minimum``."""
    if value is not None and value < minimum:
        sys.exit(f"error: {name} must be at least {minimum}, not {value}")
    return value


def fmt_rate(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    return f"{v:,.0f}"


def fmt_ratio(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    return f"{v:.2f}x"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> None:
    """Plain-text table; `align` is one letter per column, 'l' or 'r' (default: first l, rest r)."""
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(cells, widths, align))

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def cpu_summary() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), Python {sys.version.split()[0]}"


# ----------------------------------------------------------------- child processes

def json_out(obj: dict) -> None:
    """A child role's report to the orchestrator: one JSON object per stdout line."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _raise_exit(signum, _frame):
    raise SystemExit(128 + signum)


def child_signals() -> None:
    """For child roles and orchestrators: SIGTERM and SIGHUP raise SystemExit, so
    that ``finally`` and ``with`` blocks run (embedded drivers delete their
    directories, children are stopped) instead of the process vanishing."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_exit)


class Child(ChildProcess):
    """A child process whose stdout lines a thread collects, so that every read can time out
    (:class:`sulis._child.ChildProcess`; stderr goes to ours).

    Lines that are not JSON objects are echoed (indented) and skipped by
    :meth:`read_json`. The child gets SIGTERM if this process dies.
    """

    def __init__(self, cmd: Sequence[str], what: str, cwd: str | Path | None = None):
        super().__init__(cmd, what, capture_stderr=False, cwd=cwd)

    def read_line(self, timeout_s: float) -> str | None:
        """The next stdout line (None at EOF); raises RuntimeError after ``timeout_s``."""
        try:
            return self.next_line(timeout_s)
        except TimeoutError:
            raise RuntimeError(f"{self.what}: no report in {timeout_s:g} s") from None

    def read_json(self, timeout_s: float = 120.0, watch: Sequence["Child"] = ()) -> dict:
        """The next JSON line; raises if the child exited, reported ``{"error": ...}`` or
        stayed silent for ``timeout_s``, or if one of the ``watch`` children (the other
        side of the exchange) failed meanwhile (exited with a non-zero status)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.next_line(min(max(deadline - time.monotonic(), 0.001), 0.5))
            except TimeoutError:
                for other in watch:  # a clean exit (a pong done echoing) is no failure
                    if other is not None and other.proc.poll() not in (None, 0):
                        raise RuntimeError(f"{other.what} failed ({other.proc.returncode}) while "
                                           f"{self.what} was running") from None
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"{self.what}: no report in {timeout_s:g} s") from None
                continue
            if line is None:
                try:
                    rc = self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    rc = "still running"
                raise RuntimeError(f"{self.what} exited ({rc}) without a report")
            text = line.strip()
            if not text.startswith("{"):
                if text:
                    print(f"    | {self.what}: {text}", flush=True)
                continue
            try:
                msg = json.loads(text)
            except json.JSONDecodeError:
                print(f"    | {self.what}: {text}", flush=True)
                continue
            if "error" in msg:
                raise RuntimeError(f"{self.what}: {msg['error']}")
            return msg

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        """Waits for a clean exit; raises if it failed or did not exit in time."""
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{self.what} did not exit within {timeout_s:g} s") from None
        if rc != 0:
            raise RuntimeError(f"{self.what} exited with {rc}")


def stop_all(children, grace_s: float = 5.0) -> None:
    """Stops every child still running: SIGTERM to all, up to ``grace_s`` for them
    to clean up (drivers delete their directories), then SIGKILL. None entries are ignored."""
    live = [c for c in children if c is not None and c.proc.poll() is None]
    for c in live:
        try:
            c.proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    for c in live:
        try:
            c.proc.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            c.proc.kill()
            c.proc.wait()


class Children:
    """The child processes of one run, stopped whatever happens::

        with Children(base) as ch:
            pub = ch.start(cmd, "publisher")
            ...

    Leaving the block stops every child still running (:func:`stop_all`),
    then removes the directories given (:func:`rm_tree`) and calls ``after``.
    """

    def __init__(self, *dirs: str, after: Callable[[], None] | None = None):
        self._dirs = dirs
        self._after = after
        self._children: list[Child] = []

    def __enter__(self) -> "Children":
        return self

    def start(self, cmd: Sequence[str], what: str, cwd: str | Path | None = None) -> Child:
        child = Child(cmd, what, cwd=cwd)
        self._children.append(child)
        return child

    def __exit__(self, *exc) -> None:
        try:
            stop_all(self._children)
        finally:
            for d in self._dirs:
                rm_tree(d)
            if self._after is not None:
                self._after()


def self_cmd(script: str) -> list[str]:
    """The command that runs ``script`` (a benchmark's or peer's own file) again, as a child role."""
    return [sys.executable, os.path.abspath(script)]


def pin_args(cpu: int, on: bool) -> list[str]:
    """``--pin-cpu CPU`` for a child role when pinning is ``on``, else nothing."""
    return ["--pin-cpu", str(cpu)] if on else []


def collect_rates(sub: Child, pub: Child, stop_file: str, timeout_s: float = 60.0,
                  sub_stop_file: str | None = None) -> tuple[list[float], dict, dict]:
    """The end of a publisher/subscriber run whose children are ready: reads the
    subscriber's per-second counts (:func:`rate_samples`), then creates ``stop_file``
    (the publisher stops), waits for the publisher's report and both clean exits
    (``sub_stop_file`` is created between the two, for subscribers that keep
    draining until the publisher is gone). Returns (msgs/s per interval, the
    subscriber's done message, the publisher's report); raises with fewer than 2 intervals."""
    samples, done = rate_samples(sub, timeout_s, watch=[pub])
    Path(stop_file).touch()
    pub_res = pub.read_json(timeout_s)
    pub.wait_ok(30)
    if sub_stop_file:
        Path(sub_stop_file).touch()
    sub.wait_ok(30)
    if len(samples) < 2:
        raise RuntimeError(f"only {len(samples)} intervals")
    return samples, done, pub_res


def run_pub_sub(sub_cmd: Sequence[str], pub_cmd: Sequence[str], stop_file: str, label: str = "",
                timeout_s: float = 60.0, sub_stop: bool = False, dirs: Sequence[str] = (),
                after: Callable[[], None] | None = None) -> tuple[list[float], dict, dict]:
    """One run of a subscriber child and then a publisher child (each reporting
    ``{"ready"}`` first), as :func:`collect_rates` returns it; ``sub_stop``: the
    subscriber drains until ``stop_file + ".sub"`` exists. Children are stopped
    and ``dirs`` removed afterwards (:class:`Children`)."""
    with Children(*dirs, after=after) as ch:
        sub = ch.start(sub_cmd, f"{label}subscriber")
        sub.read_json(timeout_s)
        pub = ch.start(pub_cmd, f"{label}publisher")
        pub.read_json(timeout_s)
        return collect_rates(sub, pub, stop_file, timeout_s, stop_file + ".sub" if sub_stop else None)


def finish_ping_pong(ping: Child, pong: Child, timeout_s: float = 600.0) -> dict:
    """The end of a ping-pong run whose children are ready: ping's report (its
    histogram; fails if pong fails meanwhile), pong's, and both clean exits."""
    res = ping.read_json(timeout_s, watch=[pong])
    pong.read_json(60)
    ping.wait_ok(30)
    pong.wait_ok(30)
    return res


def run_ping_pong(pong_cmd: Sequence[str], ping_cmd: Sequence[str], label: str = "", timeout_s: float = 600.0,
                  dirs: Sequence[str] = (), after: Callable[[], None] | None = None) -> dict:
    """One run of a pong child and then a ping child (each reporting ``{"ready"}``
    first); returns the latency figures of ping's histogram (:func:`hdr_percentiles`,
    plus ``hdrh_encoded``). Children are stopped and ``dirs`` removed afterwards."""
    with Children(*dirs, after=after) as ch:
        pong = ch.start(pong_cmd, f"{label}pong")
        pong.read_json(60)
        ping = ch.start(ping_cmd, f"{label}ping")
        ping.read_json(60)
        res = finish_ping_pong(ping, pong, timeout_s)
    return latency_result(res["hist"])


def wait_until(cond: Callable[[], bool], error: str, timeout_s: float = 30.0) -> bool:
    """For child roles: polls ``cond`` every millisecond; after ``timeout_s`` reports
    ``{"error": error}`` (:func:`json_out`) and returns False."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            json_out({"error": error})
            return False
        time.sleep(0.001)
    return True


def pin_cpu(cpu: int | None) -> None:
    """Pins the calling process (threads started later inherit the mask) to ``cpu`` (None/-1: no-op)."""
    if cpu is not None and cpu >= 0:
        os.sched_setaffinity(0, {cpu})


def free_udp_port(host: str = "127.0.0.1") -> int:
    """A UDP port that is free on ``host`` now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def two_free_udp_ports(host: str = "127.0.0.1") -> tuple[int, int]:
    """Two different UDP ports free on ``host`` now (a ping and a pong endpoint)."""
    ping_port = free_udp_port(host)
    pong_port = free_udp_port(host)
    while pong_port == ping_port:
        pong_port = free_udp_port(host)
    return ping_port, pong_port


def udp_channel(host: str, port: int, params: str) -> str:
    """``aeron:udp?endpoint=HOST:PORT|<params>`` (params ``|``-separated, may be empty)."""
    return "|".join([f"aeron:udp?endpoint={host}:{port}", *filter(None, params.split("|"))])


def idle_fn(client_idle: str):
    """What a client calls while it waits: ``os.sched_yield`` for "yield", None (spin) otherwise."""
    return os.sched_yield if client_idle == "yield" else None


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------- measured loops (throughput)

def offer_loop(pub, payload: bytes, stop_file: str, max_seconds: float, chunk: int = 8192,
               idle=None) -> tuple[int, int]:
    """The measured publisher loop: one ``pub.offer(payload)`` per message, retried while < 0.

    Runs until ``stop_file`` exists (checked every ``chunk`` offers and every
    100k refused ones) or ``max_seconds`` passed. ``idle`` (e.g.
    ``os.sched_yield``) is called after each refused offer; None spins.
    Returns ``(offers accepted, offers refused)``.
    """
    offer = pub.offer
    exists = os.path.exists
    clock = time.monotonic
    deadline = clock() + max_seconds
    rng = range(chunk)
    chunks = 0
    refused = [0]

    def retry() -> bool:  # back-pressured: retry, now and then look for the stop file
        n = 0
        while offer(payload) < 0:
            n += 1
            if idle is not None:
                idle()
            if n % 100_000 == 0 and (exists(stop_file) or clock() > deadline):
                refused[0] += n
                return False
        refused[0] += n
        return True

    while True:
        for i in rng:
            if offer(payload) < 0 and not retry():
                return chunks * chunk + i, refused[0]
        chunks += 1
        if exists(stop_file) or clock() > deadline:
            return chunks * chunk, refused[0]


def batch_offer_loop(pub, payload: bytes, batch: int, stop_file: str, max_seconds: float,
                     idle=None) -> tuple[int, int]:
    """The measured publisher loop of ``offer_batch``: ``batch`` copies of
    ``payload`` as one data buffer with Arrow-layout int32 offsets, offered
    with one ``pub.offer_batch(data=..., offsets=...)`` call; after back
    pressure the rest of the batch is offered again (the offsets sliced, no
    copy). Stops like ``offer_loop``; returns ``(messages accepted, refused calls)``.
    """
    import numpy as np

    data = payload * batch
    offsets = np.arange(0, len(payload) * (batch + 1), len(payload), dtype=np.int32)
    offer_batch = pub.offer_batch
    exists = os.path.exists
    clock = time.monotonic
    deadline = clock() + max_seconds
    sent = refused = calls = 0
    while True:
        start = 0
        while start < batch:
            n, _result = offer_batch(data=data, offsets=offsets[start:])
            start += n
            if start < batch:
                refused += 1
                if idle is not None:
                    idle()
                if refused % 100_000 == 0 and (exists(stop_file) or clock() > deadline):
                    return sent + start, refused
        sent += batch
        calls += 1
        if calls % 64 == 0 and (exists(stop_file) or clock() > deadline):
            return sent, refused


def count_intervals(poll, limit: int, duration: float, emit, idle=None, give_up_s: float = 30.0) -> int:
    """The measured subscriber loop: ``len(poll(limit))`` counted per one-second interval.

    Waits up to ``give_up_s`` for the first message, then calls
    ``emit({"interval_s", "messages"})`` every second for ``duration`` seconds.
    ``idle`` is called after an empty poll (None: spin). Returns the count, or
    -1 when nothing arrived (``emit({"error"})`` was called).
    """
    clock = time.perf_counter
    give_up = clock() + give_up_s
    n = 0
    while not n:
        n = len(poll(limit))
        if not n and clock() > give_up:
            emit({"error": f"no message in {give_up_s:g} s"})
            return -1
    count = n
    start = clock()
    interval_start, last = start, count
    nxt, end = start + 1.0, start + duration
    if idle is None:
        while True:
            count += len(poll(limit))
            now = clock()
            if now >= nxt:
                emit({"interval_s": now - interval_start, "messages": count - last})
                interval_start, last = now, count
                nxt += 1.0
                if now >= end:
                    return count
    while True:
        n = len(poll(limit))
        if n:
            count += n
        else:
            idle()
        now = clock()
        if now >= nxt:
            emit({"interval_s": now - interval_start, "messages": count - last})
            interval_start, last = now, count
            nxt += 1.0
            if now >= end:
                return count


def count_intervals_each(recv, duration: float, emit, chunk: int = 256) -> int:
    """The measured subscriber loop of per-message APIs (pyzmq ``recv``, zenoh
    ``recv``, iceoryx2 ``receive`` wrapped to wait): ``recv()`` returns one
    message. The caller has already received the first message; from then on
    the count is reported per one-second interval as :func:`count_intervals`
    does, the clock being read every ``chunk`` messages (each interval's own
    length is measured, so the rate is exact; only its boundary moves by up to
    ``chunk`` messages). Returns the count, the first message included.
    """
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


def rate_samples(child: "Child", timeout_s: float, watch: Sequence["Child"] = ()) -> tuple[list[float], dict]:
    """Reads a subscriber child's ``{"interval_s", "messages"}`` lines until its
    ``{"done": ...}``, printing each rate; returns (msgs/s per interval, the done message).
    Raises if a ``watch`` child (the publisher) fails meanwhile."""
    samples = []
    while True:
        msg = child.read_json(timeout_s, watch)
        if msg.get("done"):
            return samples, msg
        rate = msg["messages"] / msg["interval_s"]
        samples.append(rate)
        print(f"      interval {len(samples)}: {rate:,.0f} msgs/s{'  (warm-up)' if len(samples) == 1 else ''}",
              flush=True)


# ----------------------------------------------------------------- measured loops (round trip)

def ping_loop(ping, pong_sub, msg: bytes, warmup: int, n: int, poll_mode: str = "handler",
              idle=None) -> list[int]:
    """The measured ping loop: ``t0``, ``offer(msg)`` (retried while < 0), poll until the echo is there.

    ``poll_mode`` "handler" polls with ``pong_sub.poll(handler, 1)``, "batch"
    with ``pong_sub.poll_batch(1)``. ``idle`` (e.g. ``os.sched_yield``) is
    called in every wait (None: spin). Returns the ``n`` round trips after the
    ``warmup`` ones, in ns (``time.perf_counter_ns``).
    """
    offer = ping.offer
    clock = time.perf_counter_ns
    samples = [0] * n
    if poll_mode == "batch":
        poll_batch = pong_sub.poll_batch

        def got() -> int:
            return len(poll_batch(1))
    else:
        poll = pong_sub.poll

        def on_pong(_buffer, _header):
            pass

        def got() -> int:
            return poll(on_pong, 1)

    if poll_mode not in ("handler", "batch"):
        raise ValueError(f"poll_mode must be handler or batch, not {poll_mode!r}")
    if idle is None and poll_mode == "batch":  # the tightest loops: no call but the API's
        for i in range(warmup + n):
            t0 = clock()
            while offer(msg) < 0:
                pass
            while not len(poll_batch(1)):
                pass
            t1 = clock()
            if i >= warmup:
                samples[i - warmup] = t1 - t0
    elif idle is None:
        for i in range(warmup + n):
            t0 = clock()
            while offer(msg) < 0:
                pass
            while not poll(on_pong, 1):
                pass
            t1 = clock()
            if i >= warmup:
                samples[i - warmup] = t1 - t0
    else:
        for i in range(warmup + n):
            t0 = clock()
            while offer(msg) < 0:
                idle()
            while not got():
                idle()
            t1 = clock()
            if i >= warmup:
                samples[i - warmup] = t1 - t0
    return samples


def pong_loop(sub, pub, total: int, poll_mode: str = "handler", idle=None) -> int:
    """Echoes ``total`` messages from ``sub`` to ``pub`` (``sub.poll(echo, 1)`` or ``poll_batch(1)``).

    ``idle`` is called after an empty poll and a refused offer (None: spin). Returns the count.
    """
    offer = pub.offer
    done = 0
    if poll_mode == "batch":
        poll_batch = sub.poll_batch
        while done < total:
            b = poll_batch(1)
            if len(b):
                data = b.data
                while offer(data) < 0:
                    if idle is not None:
                        idle()
                done += 1
            elif idle is not None:
                idle()
    else:
        poll = sub.poll

        def echo(buffer, _header):
            while offer(buffer) < 0:
                if idle is not None:
                    idle()

        if idle is None:
            while done < total:
                done += poll(echo, 1)
        else:
            while done < total:
                got = poll(echo, 1)
                if got:
                    done += got
                else:
                    idle()
    return done


def ping_loop_each(send, try_recv, msg, warmup: int, n: int, idle=None) -> list[int]:
    """The measured ping loop of per-message APIs (zenoh, iceoryx2): ``t0``,
    ``send(msg)``, ``try_recv()`` until the echo is there (``idle`` between
    tries; None spins), as :func:`ping_loop` does for sulis. Returns the ``n``
    round trips after ``warmup``, in ns."""
    clock = time.perf_counter_ns
    samples = [0] * n
    if idle is None:
        for i in range(warmup + n):
            t0 = clock()
            send(msg)
            while try_recv() is None:
                pass
            t1 = clock()
            if i >= warmup:
                samples[i - warmup] = t1 - t0
    else:
        for i in range(warmup + n):
            t0 = clock()
            send(msg)
            while try_recv() is None:
                idle()
            t1 = clock()
            if i >= warmup:
                samples[i - warmup] = t1 - t0
    return samples


# ----------------------------------------------------------------- latency histograms

# Histogram range: 1 ns .. 60 s, 3 significant digits (as the pyzmq peer).
HIST_LOW, HIST_HIGH, HIST_DIGITS = 1, 60_000_000_000, 3
#: Keys of a latency result, in print order.
LATENCY_KEYS = ["p50_us", "p90_us", "p99_us", "p99_9_us", "max_us"]


def encode_samples(samples_ns) -> str:
    """Records round trips (ns) into an HdrHistogram and returns its encoded form."""
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram(HIST_LOW, HIST_HIGH, HIST_DIGITS)
    for ns in samples_ns:
        hist.record_value(min(max(ns, HIST_LOW), HIST_HIGH))
    enc = hist.encode()
    return enc.decode() if isinstance(enc, bytes) else enc


def hdr_percentiles(hist, with_min: bool = False) -> dict:
    """p50/p90/p99/p99.9/max/mean (and with ``with_min`` min) (µs) and count of an
    HdrHistogram of ns (or its encoded form)."""
    if isinstance(hist, (str, bytes)):
        from hdrh.histogram import HdrHistogram

        hist = HdrHistogram.decode(hist)
    us = lambda ns: ns / 1000.0  # noqa: E731
    r = {
        "p50_us": us(hist.get_value_at_percentile(50)),
        "p90_us": us(hist.get_value_at_percentile(90)),
        "p99_us": us(hist.get_value_at_percentile(99)),
        "p99_9_us": us(hist.get_value_at_percentile(99.9)),
        "max_us": us(hist.get_max_value()),
        "mean_us": us(hist.get_mean_value()),
    }
    if with_min:
        r["min_us"] = us(hist.get_min_value())
    r["count"] = hist.get_total_count()
    return r


def latency_result(encoded: str) -> dict:
    """:func:`hdr_percentiles` of an encoded histogram, the encoded form kept as ``hdrh_encoded``."""
    r = hdr_percentiles(encoded)
    r["hdrh_encoded"] = encoded
    return r


def latency_line(r: dict) -> str:
    """``p50 0.71  p90 ...  max 12.3 µs`` for one latency result."""
    return "  ".join(f"{k.replace('_us', '').replace('_9', '.9')} {r[k]:.2f}" for k in LATENCY_KEYS) + " µs"


# ----------------------------------------------------------------- native binaries

def native_binary(name: str, build: bool = True) -> str:
    """Path of target/release/<name> from crates/sulis-bench, building it first if asked."""
    exe = ROOT / "target" / "release" / name
    cargo = shutil.which("cargo")
    if build and cargo:
        print(f"[build] cargo build --release -p sulis-bench --bin {name}", flush=True)
        r = subprocess.run([cargo, "build", "--release", "-q", "-p", "sulis-bench", "--bin", name],
                           cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            raise Skip(f"cargo build of {name} failed:\n{r.stderr[-2000:]}")
    if not exe.is_file():
        raise Skip(f"{exe} not found (no cargo to build it)")
    return str(exe)


def run_native(exe: str, args: Sequence[str], timeout_s: float, prefix: Sequence[str] = ()) -> dict:
    """Runs a sulis-bench binary, echoing its output; returns its `RESULT {json}` line.

    ``prefix`` goes before the command (e.g. ``ip netns exec NS``). The binary's
    driver directories go under a fresh ``--dir-base`` that is removed
    afterwards, whatever happened; past ``timeout_s`` the binary is stopped
    (SIGTERM: it stops its child and removes its directories; then SIGKILL).
    """
    base = shm_dir("sulis-bench-native-")
    name = Path(exe).name
    child = None
    result = None
    try:
        child = Child([*prefix, exe, *args, "--dir-base", base], name, cwd=ROOT)
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"{name} did not finish within {timeout_s:g} s")
            line = child.read_line(remaining)
            if line is None:
                break
            line = line.rstrip("\n")
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
            else:
                print(f"    | {line}", flush=True)
        rc = child.proc.wait(30)
    finally:
        stop_all([child])
        rm_tree(base)
    if rc != 0 or result is None:
        raise RuntimeError(f"{name} exited with {rc}" + ("" if result else " and no RESULT line"))
    return result


def save_results(name: str, record: dict) -> Path | None:
    """Writes bench/results/<name>-<timestamp>.json; returns the path."""
    try:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = RESULTS_DIR / f"{name}-{stamp}.json"
        path.write_text(json.dumps(record, indent=1, default=str))
        return path
    except OSError as exc:
        print(f"(could not save results: {exc})")
        return None


# ----------------------------------------------------------------- interference

def _proc_table() -> dict[int, tuple[int, float]]:
    """{pid: (ppid, cpu seconds)} of every process (clock ticks converted)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                s = f.read().decode("ascii", "replace")
        except OSError:
            continue
        rest = s[s.rfind(")") + 2:].split()  # after "pid (comm) "
        try:
            out[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / tick)
        except (IndexError, ValueError):
            continue
    return out


class Interference:
    """CPU time that processes outside this benchmark used while it ran.

    On a 2-core machine any other busy process (a build, a test run) takes
    time from the publisher or subscriber; this measures how much, so a run
    can be flagged instead of silently reporting a depressed figure::

        with Interference() as itf:
            run()
        itf.share  # foreign CPU seconds per wall second (0.0 .. #CPUs)
    """

    def __init__(self) -> None:
        self.share = 0.0
        self.foreign_s = 0.0
        self.wall_s = 0.0

    def _ours(self, table: dict[int, tuple[int, float]]) -> set[int]:
        me = os.getpid()
        ours = {me}
        changed = True
        while changed:
            changed = False
            for pid, (ppid, _) in table.items():
                if ppid in ours and pid not in ours:
                    ours.add(pid)
                    changed = True
        return ours

    def __enter__(self) -> "Interference":
        try:
            self._before = _proc_table()
        except OSError:
            self._before = None
        self._t0 = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.monotonic() - self._t0
        if self._before is None:
            return
        after = _proc_table()
        ours = self._ours(after) | self._ours(self._before)
        foreign = 0.0
        for pid, (_, cpu) in after.items():
            if pid in ours:
                continue
            before = self._before.get(pid)
            foreign += cpu - before[1] if before else cpu  # new process: all of its time
        self.foreign_s = max(foreign, 0.0)
        self.share = self.foreign_s / self.wall_s if self.wall_s > 0 else 0.0

    def note(self) -> str:
        return f"other processes used {self.share * 100:.0f}% of a CPU during this run"


def wait_for_quiet(max_share: float, max_wait_s: float, probe_s: float = 1.0) -> float:
    """Waits until other processes use at most ``max_share`` of a CPU over ``probe_s``
    (or ``max_wait_s`` passed); returns the seconds waited. Prints when it has to wait."""
    t0 = time.monotonic()
    told = False
    while True:
        with Interference() as itf:
            time.sleep(probe_s)
        waited = time.monotonic() - t0
        if itf.share <= max_share or waited >= max_wait_s:
            if told:
                print(f"      (waited {waited:.0f} s for other processes to settle; now {itf.share * 100:.0f}% of a CPU)",
                      flush=True)
            return waited
        if not told:
            print(f"      other processes use {itf.share * 100:.0f}% of a CPU: waiting up to {max_wait_s:g} s",
                  flush=True)
            told = True


def run_rounds(variants, runs: int, retry_noisy: int, max_interference: float, describe,
               quiet_wait_s: float = 0.0) -> tuple[dict, dict, dict]:
    """Runs every variant once per round, round by round, so a slow period of the
    machine does not hit one system only. A run during which other processes used
    more than ``max_interference`` of a CPU is repeated up to ``retry_noisy`` times.
    With ``quiet_wait_s`` > 0, each run first waits up to that long for a second in
    which other processes stay under ``max_interference``.

    ``variants`` is a list of ``(key, name, fn)``; ``describe(result)`` formats one
    result line. Returns ``(results, skipped, errors)`` keyed by variant key.
    """
    results: dict[str, list[dict]] = {k: [] for k, _, _ in variants}
    skipped: dict[str, str] = {}
    errors: dict[str, list[str]] = {}
    for rnd in range(runs):
        for key, name, fn in variants:
            if key in skipped:
                continue
            print(f"[round {rnd + 1}/{runs}] {name}", flush=True)
            try:
                for attempt in range(retry_noisy + 1):
                    if quiet_wait_s > 0:
                        wait_for_quiet(max_interference, quiet_wait_s)
                    with Interference() as itf:
                        r = fn()
                    r["interference"] = itf.share
                    if itf.share <= max_interference:
                        break
                    print(f"      NOISY: {itf.note()}"
                          + ("; running it again" if attempt < retry_noisy else "; kept, flagged"), flush=True)
            except Skip as exc:
                skipped[key] = str(exc)
                print(f"      skipped: {exc}")
                continue
            except Exception as exc:  # one failed run must not lose the others
                errors.setdefault(key, []).append(f"{type(exc).__name__}: {exc}")
                print(f"      FAILED: {type(exc).__name__}: {exc}")
                continue
            results[key].append(r)
            print(f"      -> {describe(r)}", flush=True)
    return results, skipped, errors


def missing_text(key: str, skipped: dict, errors: dict, width: int = 70) -> str:
    """What a table shows for a row without results: ``skipped: <reason>`` or ``failed: <error>``."""
    if key in skipped:
        text = "skipped: " + " ".join(skipped[key].split())
    elif key in errors:
        text = "failed: " + " ".join(errors[key][-1].split())
    else:
        text = "no result"
    return text if len(text) <= width else text[: width - 1] + "…"


def parse_only(only: str, variants: list, ap) -> list:
    """Keeps the variants named in ``--only`` (comma list); unknown names are an error."""
    if not only:
        return variants
    wanted = {w.strip() for w in only.split(",") if w.strip()}
    unknown = wanted - {v[0] for v in variants}
    if unknown:
        ap.error(f"unknown --only names: {sorted(unknown)} (known: {', '.join(v[0] for v in variants)})")
    return [v for v in variants if v[0] in wanted]


def main_guard(main: Callable[[], int]) -> int:
    """Runs an orchestrator's main: SIGTERM/SIGHUP unwind like ^C, and ^C ends with 130
    after every ``finally`` ran (children stopped, directories removed)."""
    child_signals()
    stale = remove_stale()
    if stale:
        print(f"(removed {len(stale)} directories/files left by benchmarks that were killed: "
              f"{', '.join(os.path.basename(p) for p in stale[:6])}{' ...' if len(stale) > 6 else ''})")
    try:
        return main()
    except KeyboardInterrupt:
        print("\ninterrupted: children stopped, driver directories removed", file=sys.stderr)
        return 130


def remove_shm_prefix(prefix: str) -> None:
    """Removes /dev/shm entries whose names start with ``prefix`` (peers that name
    their shared memory by a per-run prefix, e.g. iceoryx2)."""
    if not prefix or "/" in prefix:
        raise ValueError(f"bad shared-memory prefix {prefix!r}")
    for path in glob.glob(os.path.join("/dev/shm", glob.escape(prefix) + "*")):
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


# ----------------------------------------------------------------- command line, tables, notes (orchestrators)

RUNS_HELP = "rounds per variant (default 3; --quick: 1)"
INTERFERENCE_HELP = "a run during which other processes used more than this share of a CPU is noisy (default 0.10)"


def bench_parser(doc: str, size_args: Callable[[argparse.ArgumentParser], None] | None = None,
                 runs_help: str = RUNS_HELP) -> argparse.ArgumentParser:
    """An orchestrator's parser (described by the first paragraph of ``doc``)
    with ``--runs``, the options ``size_args`` adds (how long a run is) and ``--quick``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=None, help=runs_help)
    if size_args is not None:
        size_args(ap)
    ap.add_argument("--quick", action="store_true", help="one short round: a smoke test, not a measurement")
    return ap


def throughput_parser(doc: str) -> argparse.ArgumentParser:
    """:func:`bench_parser` of the throughput benchmarks: ``--runs``, ``--duration``, ``--quick``, ``--batch``."""
    def duration_args(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--duration", type=float, default=None,
                        help="seconds per sulis/Aeron run, the first is warm-up (default 6; --quick: 3)")

    ap = bench_parser(doc, duration_args)
    ap.add_argument("--batch", type=int, default=4096, help="poll_batch limit of the Python subscriber")
    return ap


def round_trip_args(ap: argparse.ArgumentParser) -> None:
    """``--n`` and ``--warmup`` of the latency benchmarks (for :func:`bench_parser`)."""
    ap.add_argument("--n", type=int, default=None, help="timed round trips per run (default 100,000)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed round trips first (default 10,000)")


def selection_args(ap: argparse.ArgumentParser, only_help: str, wait_quiet: bool = False,
                   interference_help: str = INTERFERENCE_HELP) -> None:
    """``--only``, ``--no-aeron-current``, ``--no-build``, ``--max-interference``,
    ``--retry-noisy`` and (``wait_quiet``) ``--wait-quiet``."""
    ap.add_argument("--only", default="", help=only_help)
    ap.add_argument("--no-aeron-current", action="store_true", help="skip the current Aeron release")
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build for the native binary")
    ap.add_argument("--max-interference", type=float, default=0.10, help=interference_help)
    ap.add_argument("--retry-noisy", type=int, default=2, help="times a noisy run is repeated (default 2)")
    if wait_quiet:
        ap.add_argument("--wait-quiet", type=float, default=60.0,
                        help="before each run, wait up to this many seconds for other processes to stay under "
                             "--max-interference for a second (default 60; 0: do not wait)")


def pub_sub_role_args(ap: argparse.ArgumentParser) -> None:
    """The internal options of the publisher/subscriber child roles."""
    ap.add_argument("--role", choices=["main", "pub", "sub"], default="main", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--stop-file", help=argparse.SUPPRESS)
    ap.add_argument("--max-seconds", type=float, default=120, help=argparse.SUPPRESS)
    ap.add_argument("--pin-cpu", type=int, default=None, help=argparse.SUPPRESS)


def rounds(a: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    """``--runs`` checked, or its default (3; 1 with ``--quick``)."""
    if a.runs is not None and a.runs < 1:
        ap.error("--runs must be at least 1")
    return a.runs or (1 if a.quick else 3)


def throughput_checks(a: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    """Checks :func:`throughput_parser`'s options and sets their defaults; returns the rounds.
    ``--duration``: 6 s (3 s with ``--quick``), at least 2.5 s."""
    runs = rounds(a, ap)
    if a.batch < 1:
        ap.error("--batch must be at least 1")
    a.duration = a.duration or (3.0 if a.quick else 6.0)
    if a.duration < 2.5:
        ap.error("--duration must be at least 2.5 s (one warm-up second plus measured ones)")
    return runs


def pub_sub_child(a: argparse.Namespace, role_pub: Callable, role_sub: Callable) -> int:
    """Runs the child role ``--role pub`` or ``sub`` (the subscriber's ``--duration`` defaulting to 6 s)."""
    child_signals()
    if a.role == "pub":
        return role_pub(a)
    a.duration = a.duration or 6
    return role_sub(a)


def round_trip_defaults(a: argparse.Namespace) -> None:
    """Sets ``--n`` and ``--warmup``'s defaults (100k / 10k; 20k / 2k with ``--quick``)."""
    a.n = a.n or (20_000 if a.quick else 100_000)
    a.warmup = a.warmup if a.warmup is not None else (2_000 if a.quick else 10_000)


def select_variants(variants: list, a: argparse.Namespace, ap, optional: Callable[[str], bool] | None = None) -> list:
    """The variants to run: those ``optional`` accepts only when ``--only`` names
    them, none of the current Aeron with ``--no-aeron-current``, then ``--only``."""
    if optional is not None and not a.only:
        variants = [v for v in variants if not optional(v[0])]
    if a.no_aeron_current:
        variants = [v for v in variants if not v[0].startswith("aeron-current")]
    return parse_only(a.only, variants, ap)


def build_native(variants: list, name: str, no_build: bool, prefix: str = "native",
                 label: str = "native Rust") -> list:
    """Builds the native binary ``name`` when a variant key starts with ``prefix``;
    if it cannot be built, says so and drops those variants."""
    if any(k.startswith(prefix) for k, _, _ in variants):
        try:
            native_binary(name, build=not no_build)
        except Skip as exc:
            print(f"[skip] {label}: {exc}")
            variants = [v for v in variants if not v[0].startswith(prefix)]
    return variants


def variant_names(variants: list) -> dict:
    """``{key: printed name}``."""
    return {k: n for k, n, _ in variants}


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def rate_medians(results: dict) -> dict:
    """``{key: median msgs/s over the rounds}`` of the variants with results."""
    return {k: median(r["msgs_per_s"] for r in rs) for k, rs in results.items() if rs}


def print_intervals(samples: Sequence[float]) -> None:
    """A peer's per-second rates, reported all at once after its run."""
    print("      intervals: " + ", ".join(f"{s:,.0f}" for s in samples) + " msgs/s (first = warm-up)", flush=True)


def print_throughput_table(variants: list, results: dict, skipped: dict, errors: dict, med: dict,
                           ratios: Sequence[tuple[str, float | None]]) -> None:
    """One row per variant: median msgs/s, runs, per-run M msgs/s, one ``vs X``
    column per ``(header, reference rate)`` of ``ratios`` ("-" without one), configuration."""
    rows = []
    for key, name, _ in variants:
        rs = results.get(key) or []
        if not rs:
            rows.append([name, missing_text(key, skipped, errors), "0", "", *("" for _ in ratios), ""])
            continue
        m = med[key]
        per = " / ".join(f"{r['msgs_per_s'] / 1e6:.2f}" for r in rs)
        rows.append([name, fmt_rate(m), str(len(rs)), per, *(fmt_ratio(m / ref) if ref else "-" for _, ref in ratios),
                     rs[0].get("config", "")])
    print_table(["name", "median msgs/s", "runs", "per run (M)", *(h for h, _ in ratios), "configuration"], rows,
                align="l" + "r" * (3 + len(ratios)) + "l")


def latency_medians(results: dict) -> dict:
    """``{key: {percentile key: median over the rounds}}`` of the variants with results."""
    return {k: {q: median(r[q] for r in rs) for q in LATENCY_KEYS} for k, rs in results.items() if rs}


def print_latency_table(variants: list, results: dict, skipped: dict, errors: dict, med: dict,
                        targets: dict) -> None:
    """One row per variant: p50 … max (µs), ``p50 x Py`` / ``p99 x Py`` against the
    ``python`` row, runs, configuration; then a row with ``targets`` (``{"p99_us": 15}``...)."""
    py_med = med.get("python")
    rows = []
    for key, name, _ in variants:
        if key not in med:
            rows.append([name, missing_text(key, skipped, errors), "", "", "", "", "", "", "0", ""])
            continue
        m = med[key]
        rows.append([name, *(f"{m[q]:.2f}" for q in LATENCY_KEYS),
                     fmt_ratio(m["p50_us"] / py_med["p50_us"]) if py_med else "-",
                     fmt_ratio(m["p99_us"] / py_med["p99_us"]) if py_med else "-",
                     str(len(results[key])), results[key][0].get("config", "")])
    rows.append(["target (sulis Python)", *(f"<= {targets[q]:g}" if q in targets else "" for q in LATENCY_KEYS),
                 "", "", "", ""])
    print_table(["name", "p50", "p90", "p99", "p99.9", "max", "p50 x Py", "p99 x Py", "runs", "configuration"],
                rows, align="lrrrrrrrrl")


def latency_report(variants: list, results: dict, skipped: dict, errors: dict, heading: str, targets: dict,
                   max_interference: float, compare_with: tuple[str, ...]) -> dict:
    """After a latency benchmark's rounds: ``heading``, the table
    (:func:`print_latency_table`), the targets of sulis from Python (``sulis
    Python p99 <= 15 µs: 12.34 µs -> MET``), sulis Python's p50 and p99 against
    each variant of ``compare_with`` that ran, and the notes. Returns the medians."""
    med = latency_medians(results)
    names = variant_names(variants)
    print()
    print(heading)
    print_latency_table(variants, results, skipped, errors, med, targets)
    print()
    print("targets:")
    py = med.get("python")
    if py:
        for q, target in targets.items():
            print(f"  sulis Python {q[:-3]} <= {target:g} µs: {py[q]:.2f} µs -> {verdict(py[q] <= target)}")
        for key in compare_with:
            if key in med:
                print(f"  sulis Python vs {names[key]}: p50 {med[key]['p50_us'] / py['p50_us']:.2f}x, "
                      f"p99 {med[key]['p99_us'] / py['p99_us']:.2f}x (>1: sulis lower)")
    print_notes(results, errors, names, max_interference)
    return med


def print_notes(results: dict, errors: dict, names: dict, max_interference: float) -> None:
    """The runs kept although noisy, and the variants that failed."""
    noisy = [(names[k], i + 1, r["interference"]) for k, rs in results.items() for i, r in enumerate(rs)
             if r.get("interference", 0) > max_interference]
    for name, i, share in noisy:
        print(f"  note: {name} run {i} is noisy: other processes used {share * 100:.0f}% of a CPU during it")
    for k, errs in errors.items():
        print(f"  note: {names[k]} failed {len(errs)} time(s): {errs[0][:300]}")


def save_and_show(name: str, record: dict) -> None:
    """:func:`save_results`, then where the details went."""
    path = save_results(name, record)
    if path:
        print(f"\n(details: {path.relative_to(ROOT)})")


def save_report(name: str, settings: dict, variants: list, med: dict, results: dict, skipped: dict,
                errors: dict) -> None:
    """:func:`save_and_show` of a benchmark's record: the command line, its
    ``settings``, the medians and results by printed name (without the encoded
    histograms), what was skipped or failed, the machine."""
    names = variant_names(variants)
    strip = lambda r: {k: v for k, v in r.items() if k != "hdrh_encoded"}  # noqa: E731
    save_and_show(name, {
        "argv": sys.argv, **settings,
        "medians": {names[k]: v for k, v in med.items()},
        "results": {names[k]: [strip(r) for r in v] for k, v in results.items()},
        "skipped": skipped, "errors": errors, "machine": cpu_summary(),
    })
