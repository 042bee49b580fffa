"""Helpers shared by the benchmarks in bench/ (ipc_*, udp_*).

Nothing here is timed except the measured loops (marked as such):
child-process plumbing (one JSON line per event, read with time-outs),
process start-up and clean-up, the native binary's build, latency histograms,
result tables and the JSON record kept in bench/results/ (git-ignored).

Clean-up: every child is started through :class:`Child` (it gets SIGTERM when
the orchestrator dies, with ``setpriv --pdeathsig`` where available) and stopped
with :func:`stop_all` (SIGTERM, a grace period, then SIGKILL); child roles call
:func:`child_signals` so that SIGTERM unwinds their ``with`` blocks (the
embedded drivers delete their directories); every driver directory lives under
a :func:`shm_dir` that the orchestrator removes in a ``finally`` (and at exit);
native binaries get ``--dir-base`` with such a directory.
"""
from __future__ import annotations

import atexit
import datetime as _dt
import glob
import json
import os
import queue
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

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


_SETPRIV = shutil.which("setpriv")


def _pdeathsig_prefix() -> list[str]:
    """``setpriv --pdeathsig TERM`` (util-linux): the child gets SIGTERM when we die."""
    return [_SETPRIV, "--pdeathsig", "TERM"] if _SETPRIV else []


class Child:
    """A child process whose stdout lines a thread collects, so that every read can time out.

    Lines that are not JSON objects are echoed (indented) and skipped by
    :meth:`read_json`. The child gets SIGTERM if this process dies.
    """

    def __init__(self, cmd: Sequence[str], what: str, cwd: str | Path | None = None):
        self.what = what
        self.cmd = list(cmd)
        self.proc = subprocess.Popen(_pdeathsig_prefix() + self.cmd, stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, bufsize=1, cwd=cwd)
        self._lines: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        self._lines.put(None)

    def read_line(self, timeout_s: float) -> str | None:
        """The next stdout line (None at EOF); raises RuntimeError after ``timeout_s``."""
        try:
            return self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError(f"{self.what}: no report in {timeout_s:g} s") from None

    def read_json(self, timeout_s: float = 120.0, watch: Sequence["Child"] = ()) -> dict:
        """The next JSON line; raises if the child exited, reported ``{"error": ...}`` or
        stayed silent for ``timeout_s``, or if one of the ``watch`` children (the other
        side of the exchange) failed meanwhile (exited with a non-zero status)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=min(max(deadline - time.monotonic(), 0.001), 0.5))
            except queue.Empty:
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

    def running(self) -> bool:
        return self.proc.poll() is None


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


def pin_cpu(cpu: int | None) -> None:
    """Pins the calling process (threads started later inherit the mask) to ``cpu`` (None/-1: no-op)."""
    if cpu is not None and cpu >= 0:
        os.sched_setaffinity(0, {cpu})


def free_udp_port(host: str = "127.0.0.1") -> int:
    """A UDP port that is free on ``host`` now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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


def hdr_percentiles(hist) -> dict:
    """p50/p90/p99/p99.9/max/mean (µs) and count of an HdrHistogram of ns (or its encoded form)."""
    if isinstance(hist, (str, bytes)):
        from hdrh.histogram import HdrHistogram

        hist = HdrHistogram.decode(hist)
    us = lambda ns: ns / 1000.0  # noqa: E731
    return {
        "p50_us": us(hist.get_value_at_percentile(50)),
        "p90_us": us(hist.get_value_at_percentile(90)),
        "p99_us": us(hist.get_value_at_percentile(99)),
        "p99_9_us": us(hist.get_value_at_percentile(99.9)),
        "max_us": us(hist.get_max_value()),
        "mean_us": us(hist.get_mean_value()),
        "count": hist.get_total_count(),
    }


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
