"""The interop message stream, twin of the ``Stream`` class of bench/peers/AeronPeer.java.

Both sides must agree byte for byte; change one only together with the other
(and bump ``SEED`` so that stale peers cannot agree by accident).

Message ``i`` (0-based):

* its length ``length(i)`` is ``BIG_LENGTH`` when ``i % BIG_EVERY == BIG_PHASE``
  (1 MiB + 4099 bytes, 20 of them in a run of 1,000,000, the first at i = 1000),
  otherwise ``CYCLE[i % len(CYCLE)]``. The cycle mixes tiny messages, lengths
  that are not multiples of the 32-byte frame alignment, and lengths around the
  1376-byte payload of one 1408-byte MTU frame (1376 fits one frame, 1377 and
  1408 need two, 2752 is exactly two full frames, 4000 three);
* bytes 0..8 are ``i`` as a little-endian unsigned 64-bit integer;
* bytes 8..length are ``PATTERN[o : o + length - 8]`` with ``o = i % 251``,
  where ``PATTERN`` is SHA-256 in counter mode:
  ``SHA256(SEED + k.to_bytes(4, "little"))`` for k = 0, 1, 2, ... concatenated.

The checksum of a stream is CRC-32 (zlib / java.util.zip.CRC32) chained over
all message bytes in order, i.e. the CRC-32 of their concatenation.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
import zlib

CYCLE = (8, 32, 100, 1000, 1376, 1377, 4000, 9, 64, 1408, 256, 2752, 33)
BIG_EVERY = 50_000
BIG_PHASE = 1_000
BIG_LENGTH = (1 << 20) + 4099
OFFSET_MODULUS = 251
SEED = b"sulis-interop-stream-v1"
INDEX_LENGTH = 8

#: Longest tail any message needs, from the largest offset.
PATTERN_LENGTH = OFFSET_MODULUS - 1 + BIG_LENGTH - INDEX_LENGTH


def _make_pattern() -> bytes:
    blocks = math.ceil(PATTERN_LENGTH / 32)
    sha = hashlib.sha256
    return b"".join(sha(SEED + k.to_bytes(4, "little")).digest() for k in range(blocks))[:PATTERN_LENGTH]


PATTERN: bytes = _make_pattern()

#: Non-big messages repeat their tail with this period (both moduli are coprime).
_PERIOD = len(CYCLE) * OFFSET_MODULUS
#: Tails (bytes after the index) of the non-big messages, by ``i % _PERIOD``.
_TAILS: tuple[bytes, ...] = tuple(
    PATTERN[k % OFFSET_MODULUS : k % OFFSET_MODULUS + CYCLE[k % len(CYCLE)] - INDEX_LENGTH] for k in range(_PERIOD)
)


def length(i: int) -> int:
    """Length of message ``i``."""
    return BIG_LENGTH if i % BIG_EVERY == BIG_PHASE else CYCLE[i % len(CYCLE)]


def tail(i: int) -> bytes:
    """Bytes 8.. of message ``i``."""
    if i % BIG_EVERY == BIG_PHASE:
        o = i % OFFSET_MODULUS
        return PATTERN[o : o + BIG_LENGTH - INDEX_LENGTH]
    return _TAILS[i % _PERIOD]


def message(i: int) -> bytes:
    """Message ``i`` as bytes."""
    return i.to_bytes(INDEX_LENGTH, "little") + tail(i)


def max_length(count: int) -> int:
    """Longest message among the first ``count``."""
    if count > BIG_PHASE:
        return BIG_LENGTH
    return max((length(i) for i in range(min(count, len(CYCLE)))), default=0)


class Generator:
    """Writes message ``i`` into one reused buffer: ``view = gen.message(i)``.

    The returned memoryview is valid until the next call.
    """

    def __init__(self) -> None:
        self._buf = bytearray(BIG_LENGTH)
        self._view = memoryview(self._buf)

    def message(self, i: int) -> memoryview:
        buf = self._buf
        t = tail(i)
        n = INDEX_LENGTH + len(t)
        buf[0:INDEX_LENGTH] = i.to_bytes(INDEX_LENGTH, "little")
        buf[INDEX_LENGTH:n] = t
        return self._view[:n]


class Checker:
    """Checks received messages against the stream, in order.

    ``checker.handler`` is the ``handler(buffer, header)`` to give to a
    FragmentAssembler (only whole messages must reach it); ``checker.result()``
    returns ``{"count", "bytes", "checksum", "errors", "error_count",
    "last_index", "seconds"}`` (seconds from the first to the last expected message). A message whose index is not
    the expected one is an error (lost, duplicated, reordered or corrupt);
    the check then resynchronises on the index received so that one gap is
    reported once, not for every later message.
    """

    def __init__(self, count: int, max_errors: int = 10) -> None:
        self.expected_count = count
        self.max_errors = max_errors
        self.errors: list[str] = []
        self.error_count = 0
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.handler, self._state = self._make_handler()

    def _error(self, text: str) -> None:
        self.error_count += 1
        if len(self.errors) < self.max_errors:
            self.errors.append(text)

    def _make_handler(self):
        # Hot path: locals and closures only (no attribute lookups per message).
        expected = 0
        received = 0
        nbytes = 0
        crc = 0
        last_index = -1
        target = self.expected_count
        tails = _TAILS
        period = _PERIOD
        big_every, big_phase = BIG_EVERY, BIG_PHASE
        crc32 = zlib.crc32
        from_bytes = int.from_bytes
        clock = time.monotonic
        error = self._error

        def on_message(buffer, header) -> None:
            nonlocal expected, received, nbytes, crc, last_index
            n = len(buffer)
            if received == 0:
                self.first_time = clock()
            received += 1
            nbytes += n
            crc = crc32(buffer, crc)
            if received == target:
                self.last_time = clock()
            if n < INDEX_LENGTH:
                error(f"message #{received - 1} (expected index {expected}) is only {n} bytes long")
                expected += 1
                return
            index = from_bytes(buffer[:INDEX_LENGTH], "little")
            if index != expected:
                kind = "duplicate or reordered" if index < expected else "gap"
                error(f"message #{received - 1}: index {index}, expected {expected} ({kind})")
            if index >= target:
                error(f"message #{received - 1}: index {index} is beyond the stream of {target} messages")
            last_index = index
            expected = index + 1
            if index % big_every == big_phase:
                want = tail(index)
            else:
                want = tails[index % period]
            if n != INDEX_LENGTH + len(want):
                error(f"message {index}: length {n}, expected {INDEX_LENGTH + len(want)}")
            elif buffer[INDEX_LENGTH:].tobytes() != want:
                got = buffer[INDEX_LENGTH:].tobytes()
                at = next(k for k in range(len(want)) if got[k] != want[k])
                error(f"message {index}: content differs at byte {INDEX_LENGTH + at} of {n}")

        def state():
            return received, nbytes, crc, last_index

        return on_message, state

    @property
    def count(self) -> int:
        return self._state()[0]

    @property
    def done(self) -> bool:
        return self._state()[0] >= self.expected_count

    def result(self) -> dict:
        received, nbytes, crc, last_index = self._state()
        seconds = None
        if self.first_time is not None:
            seconds = round((self.last_time or time.monotonic()) - self.first_time, 3)
        return {
            "count": received,
            "bytes": nbytes,
            "checksum": crc,
            "errors": list(self.errors),
            "error_count": self.error_count,
            "last_index": last_index,
            "seconds": seconds,
        }


@functools.lru_cache(maxsize=8)
def expected_summary(count: int) -> dict:
    """``{"count", "bytes", "checksum"}`` of the first ``count`` messages."""
    crc = 0
    nbytes = 0
    crc32 = zlib.crc32
    for i in range(count):
        t = tail(i)
        crc = crc32(t, crc32(i.to_bytes(INDEX_LENGTH, "little"), crc))
        nbytes += INDEX_LENGTH + len(t)
    return {"count": count, "bytes": nbytes, "checksum": crc}

