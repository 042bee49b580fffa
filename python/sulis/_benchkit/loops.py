"""The measured loops of sulis' benchmarks: the only timed code (bench/README.md, "How the harness is built").

``publish`` / ``publish_batch`` (``offer`` / ``offer_batch``, a count or until ``stop()``), ``receive``
(timed) and ``count_intervals`` (per second) on ``poll_batch``, ``ping`` / ``echo``; ``send_until``,
``count_each`` and ``ping_each`` for per-message APIs (pyzmq, zenoh, iceoryx2, sockets). ``idle`` (e.g.
``os.sched_yield``) runs on every refused offer or empty poll (None spins); ``stalled(progress)`` (a
``Watchdog``) now and then, so that a dead peer ends a wait with an error; without either the loops
are as tight as they can be.
"""

from __future__ import annotations

import time

#: A waiting loop that sees no progress for this long gives up.
STALL_TIMEOUT_S = 30.0


def _check_mask(idle) -> int:
    """Waiting loops call ``stalled`` / ``stop`` once per this many + 1 empty rounds (fewer when each yields)."""
    return 0xFFFF if idle is None else 0x3FF


class BenchError(RuntimeError):
    """A run could not complete: a peer died, timed out or reported an error."""


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


def mixed_length(i: int) -> int:
    """Length of message ``i`` of a mixed stream: 1 % of 4 KiB to 256 KiB (fragmented at any MTU), the
    rest 8 to 1,376 B (1.4 KiB on average); the sequence of ``sulis-bench`` and AeronPeer.java."""
    return 4096 << ((i // 100) % 7) if i % 100 == 99 else 8 + (i * 2_654_435_761) % 1369


def publish_mixed(pub, count: int, idle=None, stalled=None) -> tuple[int, int, int]:
    """``count`` messages of ``mixed_length(i)`` bytes, each one ``pub.offer`` of a slice of one
    buffer (no copy in Python). Returns (messages sent, offers refused, bytes sent)."""
    buf = memoryview(b"\x5a" * (256 * 1024))
    offer = pub.offer
    refused = sent_bytes = 0
    for i in range(count):
        payload = buf[:mixed_length(i)]
        if offer(payload) < 0:
            refused += _retry(offer, payload, idle, stalled, None, i)
        sent_bytes += len(payload)
    return count, refused, sent_bytes


def receive_whole(sub, total: int, warmup: int = 0, limit: int = 256, idle=None, stalled=None,
                  mixed: bool = False) -> dict:
    """Counts whole messages (fragments with the END flag) with ``sub.poll`` until ``total``; the clock
    runs from the poll that takes the count past ``warmup`` to the one that reaches ``total``. With
    ``mixed``, message ``i`` must be ``mixed_length(i)`` bytes. Returns ``{"done", "received" (timed
    ones, the first included), "ns"}`` as the native subscriber does."""
    count = spins = partial = 0

    def on_fragment(buffer, header) -> None:
        nonlocal count, partial
        if header.flags & 0x40:
            if mixed and partial + len(buffer) != mixed_length(count):
                raise BenchError(f"message {count} is {partial + len(buffer)} bytes, not {mixed_length(count)}")
            count += 1
            partial = 0
        else:
            partial += len(buffer)

    poll, mask = sub.poll, _check_mask(idle)

    def drain_to(target: int) -> None:
        nonlocal spins
        while count < target:
            if not poll(on_fragment, limit):
                spins += 1
                if idle is not None:
                    idle()
                if stalled is not None and not spins & mask:
                    stalled(count)

    drain_to(warmup + 1)
    t0, first = time.perf_counter_ns(), count
    drain_to(total)
    return {"done": True, "received": count - first + 1, "ns": time.perf_counter_ns() - t0}


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
    from .. import FragmentAssembler

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
    from .. import FragmentAssembler

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
