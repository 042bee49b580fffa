"""What ``sulis demo`` and ``sulis bench`` share: the measured loops, latency
histograms, scratch driver directories and the second process.

The loops are the ones a sulis user writes: one ``offer`` per message on the
publisher, ``poll_batch`` on the subscriber; a ping that offers and polls
until the echo is there, a pong that echoes from its poll handler. Each takes
an optional ``stalled`` callback that waiting loops call now and then (see
``Watchdog``), so a peer that died or stopped answering ends the wait with an
error instead of a spin that never ends; ``idle`` (e.g. ``os.sched_yield``) is
called on every refused offer or empty poll when given (None spins).

The second process is ``python -m sulis._benchkit '<json>'`` (``Child`` on the
parent's side): a role among ``sulis-sub``, ``sulis-pong``, ``zmq-pull`` and
``zmq-rep``, speaking one JSON object per line on stdout (``{"ready": ...}``,
then its result, or ``{"error": ...}``), and staying alive until its stdin is
closed so that it tears its streams down only when the parent is done.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from ._child import ChildProcess, die_with_parent

#: Histogram range of round-trip times: 1 ns .. 60 s, 3 significant digits.
HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_DIGITS = 1, 60_000_000_000, 3
#: Percentiles reported besides min, mean and max.
PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)
#: A waiting loop that sees no progress for this long gives up.
STALL_TIMEOUT_S = 30.0
#: Waiting loops call ``stalled`` once per this many + 1 empty rounds (fewer when each round yields).
_SPIN_CHECK = 0xFFFF
_IDLE_CHECK = 0x3FF


def _check_mask(idle) -> int:
    return _SPIN_CHECK if idle is None else _IDLE_CHECK


class BenchError(RuntimeError):
    """A run could not complete: a peer died, timed out or reported an error."""


# ----------------------------------------------------------------- scratch directories

def scratch_dir(prefix: str) -> str:
    """A fresh directory under /dev/shm (or the temporary directory); the caller removes it."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def remove_dir(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


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
        self.what = what
        self.timeout = timeout
        self.alive = alive
        self._seen: object = object()
        self._since = time.monotonic()

    def __call__(self, progress: object = None) -> None:
        now = time.monotonic()
        if progress != self._seen:
            self._seen, self._since = progress, now
        elif now - self._since > self.timeout:
            raise BenchError(f"{self.what}: no progress for {self.timeout:g} s")
        if self.alive is not None:
            self.alive()


# ----------------------------------------------------------------- throughput loops

def publish(pub, payload, count: int, idle=None, stalled=None, progress=None, chunk: int = 16384) -> int:
    """Offers ``payload`` ``count`` times, one ``pub.offer`` per message, retrying refused offers.
    ``progress(sent)`` is called after every ``chunk`` messages. Returns ``count``."""
    offer = pub.offer
    sent = 0
    while sent < count:
        k = min(chunk, count - sent)
        for i in range(k):
            if offer(payload) < 0:
                _retry_offer(offer, payload, idle, stalled, sent + i)
        sent += k
        if progress is not None:
            progress(sent)
    return sent


def _retry_offer(offer, payload, idle, stalled, where) -> None:
    spins = 0
    mask = _check_mask(idle)
    while offer(payload) < 0:
        spins += 1
        if idle is not None:
            idle()
        if stalled is not None and not spins & mask:
            stalled(where)


def receive(sub, total: int, warmup: int = 0, fragments_per_message: int = 1, limit: int = 4096,
            idle=None, stalled=None) -> dict:
    """Drains ``total`` messages with ``sub.poll_batch(limit)``, counting fragments.

    The clock starts at the batch that completes the first ``warmup`` messages
    (at the first batch without warm-up) and stops at the batch that completes
    ``total``; the messages in between are the timed ones. ``limit`` shrinks
    for short runs so that they still take several batches. Returns
    ``{"received", "timed_messages", "seconds"}`` (``seconds`` 0.0 when
    everything came in one batch).
    """
    poll = sub.poll_batch
    clock = time.perf_counter
    want = total * fragments_per_message
    start_at = max(warmup * fragments_per_message, 1)
    limit = max(1, min(limit, (want - start_at) // 16))
    mask = _check_mask(idle)
    count = 0
    spins = 0

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
    return {"received": count // fragments_per_message,
            "timed_messages": (count - c0) / fragments_per_message,
            "seconds": t1 - t0}


# ----------------------------------------------------------------- round-trip loops

def ping(pub, sub, msg, warmup: int, n: int, assemble: bool = False, idle=None, stalled=None,
         progress=None) -> list[int]:
    """``warmup + n`` round trips: ``t0``, ``offer(msg)`` (retried), poll until the echo is back.

    ``assemble`` reassembles fragmented echoes (messages longer than a
    frame). ``progress(done)`` is called every 1024 round trips, outside the
    timed part. Returns the last ``n`` round-trip times in ns.
    """
    from . import FragmentAssembler

    offer = pub.offer
    poll = sub.poll
    clock = time.perf_counter_ns
    samples = [0] * n
    back = [0]
    mask = _check_mask(idle)
    if assemble:
        def on_whole(_buffer, _header):
            back[0] += 1

        handler = FragmentAssembler(on_whole)
    else:
        def handler(_buffer, _header):
            pass

    for i in range(warmup + n):
        t0 = clock()
        if offer(msg) < 0:
            _retry_offer(offer, msg, idle, stalled, i)
        spins = 0
        if assemble:
            while back[0] <= i:
                if not poll(handler, 16):
                    spins += 1
                    if idle is not None:
                        idle()
                    if stalled is not None and not spins & mask:
                        stalled(i)
        elif idle is None:
            while not poll(handler, 1):
                spins += 1
                if stalled is not None and not spins & mask:
                    stalled(i)
        else:
            while not poll(handler, 1):
                idle()
                spins += 1
                if stalled is not None and not spins & mask:
                    stalled(i)
        t1 = clock()
        if i >= warmup:
            samples[i - warmup] = t1 - t0
        if progress is not None and not i & 1023:
            progress(i)
    return samples


def echo(sub, pub, total: int, assemble: bool = False, idle=None, stalled=None) -> int:
    """Offers every message of ``sub`` back on ``pub`` until ``total`` were echoed; returns the count."""
    from . import FragmentAssembler

    offer = pub.offer
    poll = sub.poll
    done = [0]

    def echo_one(buffer, _header):
        if offer(buffer) < 0:
            _retry_offer(offer, buffer, idle, stalled, done[0])
        done[0] += 1

    handler = FragmentAssembler(echo_one) if assemble else echo_one
    mask = _check_mask(idle)
    spins = 0
    while done[0] < total:
        if not poll(handler, 16 if assemble else 1):
            spins += 1
            if idle is not None:
                idle()
            if stalled is not None and not spins & mask:
                stalled(done[0])
    return done[0]


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
    for p, v in zip(PERCENTILES, values):
        out[pct_key(p)] = v / 1000.0
    out["max_us"] = hist.get_max_value() / 1000.0
    return out


def encode(hist) -> str:
    enc = hist.encode()
    return enc.decode() if isinstance(enc, bytes) else enc


def decode(text: str):
    from hdrh.histogram import HdrHistogram

    return HdrHistogram.decode(text)


# ----------------------------------------------------------------- the second process (parent side)

class Child(ChildProcess):
    """A ``python -m sulis._benchkit`` process: JSON lines out, stdin held open until ``finish``."""

    def __init__(self, what: str, params: dict) -> None:
        super().__init__([sys.executable, "-m", "sulis._benchkit", json.dumps(params)], what, stdin="pipe")

    def _stderr_tail(self) -> str:
        lines = self.stderr_tail(1 << 20).strip().splitlines()[-12:]
        return ("\n  " + "\n  ".join(lines)) if lines else ""

    def alive(self) -> None:
        """Raises BenchError if the process has exited."""
        rc = self.proc.poll()
        if rc is not None:
            raise BenchError(f"the {self.what} process exited (status {rc}){self._stderr_tail()}")

    def read(self, timeout: float = STALL_TIMEOUT_S) -> dict:
        """The next JSON object; raises BenchError on exit, timeout or a reported error."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.next_line(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise BenchError(f"the {self.what} process said nothing for {timeout:g} s") from None
            if line is None:
                try:
                    rc = self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    rc = "?"
                raise BenchError(f"the {self.what} process exited (status {rc}){self._stderr_tail()}")
            try:
                msg = json.loads(line)
            except ValueError:  # not ours (a library printing to stdout): skip it
                continue
            if "error" in msg:
                raise BenchError(f"the {self.what} process: {msg['error']}")
            return msg

    def finish(self, timeout: float = 10.0) -> None:
        """Closes its stdin (its cue to stop) and reaps it; stops it if it does not stop in time."""
        self.close(grace_s=timeout)

    def close(self, grace_s: float = 0.0) -> None:
        """Stops the process (SIGTERM, then SIGKILL) unless it exits within ``grace_s`` of its stdin
        closing, and releases everything; idempotent."""
        super().close(grace_s, first=signal.SIGTERM)


# ----------------------------------------------------------------- the second process (its side)

def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _idle_of(name: str | None):
    return os.sched_yield if name == "yield" else None


def _await_stdin_closed() -> None:
    """Blocks until the parent closes our stdin (or dies)."""
    try:
        sys.stdin.read()
    except (OSError, ValueError):
        pass


def _driver_and_client(p: dict):
    """The driver to use (an own embedded one when ``p["driver"]`` has options) and a client on it."""
    from . import Client, MediaDriver

    driver = None
    if p.get("driver") is not None:
        driver = MediaDriver(dir=p["dir"], dir_delete_on_shutdown=True, **p["driver"])
    try:
        return driver, Client(dir=p["dir"], name=f"sulis bench {p['role']}")
    except BaseException:
        if driver is not None:
            driver.close()
        raise


def _close(client, driver) -> None:
    client.close()
    if driver is not None:
        driver.close()


def _role_sulis_sub(p: dict) -> None:
    driver, client = _driver_and_client(p)
    try:
        sub = client.add_subscription(p["channel"], p["stream"])
        _say({"ready": True})
        result = receive(sub, p["total"], p["warmup"], p.get("fragments", 1), idle=_idle_of(p.get("idle")),
                         stalled=Watchdog("receiving the stream"))
        _say(result)
        _await_stdin_closed()
    finally:
        _close(client, driver)


def _role_sulis_pong(p: dict) -> None:
    driver, client = _driver_and_client(p)
    try:
        sub = client.add_subscription(p["ping_channel"], p["ping_stream"])
        pub = client.add_exclusive_publication(p["pong_channel"], p["pong_stream"])
        _say({"ready": True})
        done = echo(sub, pub, p["total"], p.get("assemble", False), idle=_idle_of(p.get("idle")),
                    stalled=Watchdog("echoing pings"))
        _say({"echoed": done})
        _await_stdin_closed()
    finally:
        _close(client, driver)


def _role_zmq_pull(p: dict) -> None:
    import zmq

    with _zmq_bound(zmq.PULL, p["endpoint"]) as sock:
        recv = sock.recv
        clock = time.perf_counter
        total, start_at = p["total"], max(p["warmup"], 1)
        try:
            for _ in range(start_at):
                recv()
            t0 = clock()
            for _ in range(total - start_at):
                recv()
            t1 = clock()
        except zmq.Again:
            raise BenchError(f"no message for {STALL_TIMEOUT_S:g} s") from None
        _say({"received": total, "timed_messages": total - start_at, "seconds": t1 - t0})
        _await_stdin_closed()


def _role_zmq_rep(p: dict) -> None:
    import zmq

    with _zmq_bound(zmq.REP, p["endpoint"], linger_ms=1000) as sock:  # the last reply still goes out
        recv, send = sock.recv, sock.send
        try:
            for _ in range(p["total"]):
                send(recv(copy=False), copy=False)
        except zmq.Again:
            raise BenchError(f"no request for {STALL_TIMEOUT_S:g} s") from None
        _say({"echoed": p["total"]})
        _await_stdin_closed()


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
        _say({"ready": True, "endpoint": sock.getsockopt_string(zmq.LAST_ENDPOINT)})
        yield sock
    finally:
        sock.close(linger=linger_ms)
        ctx.term()


_ROLES = {
    "sulis-sub": _role_sulis_sub,
    "sulis-pong": _role_sulis_pong,
    "zmq-pull": _role_zmq_pull,
    "zmq-rep": _role_zmq_rep,
}


def _stop(*_args) -> None:
    raise KeyboardInterrupt


def child_main(argv: list[str]) -> int:
    params = json.loads(argv[0])
    parent = os.getppid()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the request above
        return 1
    try:
        _ROLES[params["role"]](params)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # reported to the parent, which names the role
        from .errors import SulisError

        text = str(e) if isinstance(e, (BenchError, SulisError)) else f"{type(e).__name__}: {e}"
        try:
            _say({"error": text})
        except OSError:
            pass
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
