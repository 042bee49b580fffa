"""Executor side of ``format("sulis")``: a bounded replay of one position range, as Arrow batches.

A range is read by a bounded replay from the archive (``ArchiveClient.start_replay`` with a
length), drained with ``Subscription.poll_batch`` and turned into ``pyarrow.RecordBatch``es
from the batch's buffers: no Python object per message.

Which messages a range holds
----------------------------
A range ``(start, end]`` of a recording holds the messages whose **end** position ``p``
(Aeron's ``Header.position``, the ``position`` column) has ``start < p <= end``. So a range
never needs bytes past ``end``, ranges that touch (``(a, b]``, ``(b, c]``) hold every message
exactly once whatever ``b`` is, and a streaming offset (a recording position, which may fall
between two fragments of a message) needs no rounding.

A replay must begin where a message begins. Two kinds of positions are known to: the
recording's start (the first frame recorded), and every term boundary (a multiple of the term
length): Aeron never lets a message straddle terms, it pads the end of a term instead. So the
replay of ``(start, end]`` begins at ``replay_from = max(recording start, start rounded down to
a term)`` and drops the messages that end at or before ``start``; when ``start`` is itself a
message boundary (any offset or row position is) and a term boundary, nothing is dropped.

A bounded replay must also end on a frame boundary (the archive sends whole frames only, so
a length that ends inside a frame never completes). ``end`` need not be one (a cut, or a
user's ``endingPositions``), so the replay runs to ``replay_to``, what was recorded when the
query was planned, and the reader stops it as soon as a message ends past ``end``.

::

    term boundaries:   |<------------- term ------------->|<------------- term ---...
    messages:          [m1 ][m2   ][m3][m4     ][m5 ][m6  ]pad[m7  ][m8 ]...
    range (start, end]:                 ^start                    ^end
    replay:            ^replay_from -------------------------------> (length end - replay_from)
    rows:                                   m4, m5, m6, m7 (m3 ends at start: dropped)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .cluster_log import CLUSTER_DDL, CLUSTER_FIELDS, session_messages
from .errors import NoMediaDriverError, ReadError, ReadTimeoutError
from .options import ArchiveAddress
from .value_schema import ValueLayout

log = logging.getLogger("sulis.spark")

__all__ = ["SCHEMA", "RecordingRange", "ArchiveSession", "session", "read_range", "replay_from"]

#: The rows of ``format("sulis")``; Spark checks the first batch's Arrow types strictly.
SCHEMA = pa.schema([
    pa.field("value", pa.binary()),
    pa.field("recording_id", pa.int64()),
    pa.field("stream_id", pa.int32()),
    pa.field("session_id", pa.int32()),
    pa.field("position", pa.int64()),
    pa.field("reserved_value", pa.int64()),
])

#: The same as a Spark DDL string.
SCHEMA_DDL = ("value binary, recording_id long, stream_id int, session_id int, position long, "
              "reserved_value long")

BEGIN_FLAG = 0x80
END_FLAG = 0x40
UNFRAGMENTED = BEGIN_FLAG | END_FLAG


_META_FIELDS = list(SCHEMA)[1:]
_META_DDL = "recording_id long, stream_id int, session_id int, position long, reserved_value long"


#: ``includeTimestamp``: the publisher's stamp, epoch nanoseconds in the reserved value, as a timestamp.
TIMESTAMP_FIELD = pa.field("timestamp", pa.timestamp("us", tz="UTC"))


def schema_for(layout: ValueLayout | None, timestamp: bool = False, cluster: bool = False) -> pa.Schema:
    """The Arrow schema of the rows: ``value`` or the ``valueSchema`` fields, then the metadata
    (and ``timestamp`` with ``includeTimestamp``); a cluster log's metadata with ``cluster``."""
    head = [SCHEMA.field(0)] if layout is None else layout.arrow_fields()
    if cluster:
        return pa.schema([*head, *CLUSTER_FIELDS])
    return pa.schema([*head, *_META_FIELDS, *([TIMESTAMP_FIELD] if timestamp else [])])


def ddl_for(layout: ValueLayout | None, timestamp: bool = False, cluster: bool = False) -> str:
    """The same as a Spark DDL string."""
    head = "value binary" if layout is None else layout.ddl()
    if cluster:
        return f"{head}, {CLUSTER_DDL}"
    text = f"{head}, {_META_DDL}"
    return f"{text}, timestamp timestamp" if timestamp else text


def stamp_column(reserved: np.ndarray) -> pa.Array:
    """``timestamp`` from reserved values: epoch nanoseconds when positive, else null (not stamped)."""
    stamped = reserved > 0
    return pa.array(np.where(stamped, reserved, 0) // 1000, TIMESTAMP_FIELD.type, mask=~stamped)


def replay_from(start: int, recording_start: int, term_length: int) -> int:
    """The message boundary a replay of ``(start, ...]`` begins at (see the module doc)."""
    from .. import _native

    return _native.spark_replay_from(start, recording_start, term_length)


@dataclass(frozen=True)
class RecordingRange:
    """Messages of one recording whose end position is in ``(start, end]`` (picklable)."""

    recording_id: int
    stream_id: int
    session_id: int
    start: int
    end: int
    #: a message boundary at or before ``start``: where the replay begins
    replay_from: int
    #: a frame boundary at or after ``end`` (what was recorded when planned): where the replay ends
    replay_to: int
    #: the recording's geometry, for reading its segment files (``readMode=files``): its start
    #: position, term length, segment file length and initial term id when planned
    recording_start: int = 0
    term_length: int = 0
    segment_length: int = 0
    initial_term_id: int = 0

    @property
    def length(self) -> int:
        return self.replay_to - self.replay_from


#: Response streams of this package's control sessions: ``RESPONSE_STREAM_BASE + pid % 2**20``.
RESPONSE_STREAM_BASE = 0x5A100000


def _response_channel_and_stream(address: ArchiveAddress) -> tuple[str, int]:
    """Where the archive answers this process.

    Not the archive's shared default (``aeron:ipc`` stream 20): every control session on a
    stream gets every answer sent on it, so one idle ``ArchiveClient`` elsewhere on the machine
    that never polls (a user's, say) would fill the stream's window and stall the answers to
    all the others, and ``latestOffset`` asks many times a second. A stream per process (and a
    small term, answers are small) keeps Spark's sessions out of that.
    """
    if address.response_stream_id is not None:
        return address.response_channel, address.response_stream_id
    channel = address.response_channel
    if channel == "aeron:ipc":
        channel = "aeron:ipc?term-length=64k"
    return channel, RESPONSE_STREAM_BASE + os.getpid() % (1 << 20)


class ArchiveSession:
    """A sulis ``Client`` and ``ArchiveClient`` on one archive, kept per process and reused."""

    def __init__(self, address: ArchiveAddress) -> None:
        from .. import ArchiveClient, Client, _native

        self.address = address
        where = address.driver_dir or _native.default_dir()
        cnc, deadline = os.path.join(where, _native.CNC_FILE), time.monotonic() + 2.0
        while not os.path.exists(cnc) and time.monotonic() < deadline:  # a driver starting just now
            time.sleep(0.05)
        if not os.path.exists(cnc):
            # Soon, not after the driver timeout: this host runs no media driver there.
            import socket

            raise NoMediaDriverError(
                f"no media driver on host {socket.gethostname()} in {where}: every host that runs Spark "
                "executors (or the Spark driver) needs a sulis media driver of its own, e.g. `sulis driver "
                f"--dir {where}` started with the Spark worker (docs/spark.md, \"Executors reach the archive\"); "
                "driverDir names its directory")
        response_channel, response_stream_id = _response_channel_and_stream(address)
        self.client = Client(dir=address.driver_dir, name="sulis-spark")
        try:
            self.archive = ArchiveClient(
                self.client,
                control_request_channel=address.control_channel,
                control_request_stream_id=address.control_stream_id,
                control_response_channel=response_channel,
                control_response_stream_id=response_stream_id,
                message_timeout=address.message_timeout,
            )
        except BaseException:
            self.client.close()
            raise

    @property
    def usable(self) -> bool:
        return not self.client.is_closed and not self.archive.is_closed

    def close(self) -> None:
        try:
            self.archive.close()
        finally:
            self.client.close()


_sessions: dict[ArchiveAddress, ArchiveSession] = {}
_sessions_lock = threading.Lock()


def session(address: ArchiveAddress) -> ArchiveSession:
    """This process' session with the archive at ``address``, opened on first use.

    Spark reuses its Python workers, so later tasks skip the connect (a few ms); a session whose
    client or control session was closed (a restarted driver, say) is replaced.
    """
    with _sessions_lock:
        s = _sessions.get(address)
        if s is not None and s.usable:
            return s
        if s is not None:
            try:
                s.close()
            except Exception:
                pass
        try:
            s = ArchiveSession(address)
        except Exception as e:
            raise NoMediaDriverError(f"cannot reach {address.describe()}: {e}") from e
        _sessions[address] = s
        return s


def drop_session(address: ArchiveAddress) -> None:
    """Closes and forgets the session (after an error that may have broken it)."""
    with _sessions_lock:
        s = _sessions.pop(address, None)
    if s is not None:
        try:
            s.close()
        except Exception:
            pass


def _replay_subscription_channel(channel: str, session_id: int) -> str:
    from .._native import ChannelUri

    return str(ChannelUri(channel).with_param("session-id", session_id))


def _sparse(channel: str) -> str:
    """The replay channel asking for a sparse log buffer unless it says otherwise. A replay's
    publication has the recording's term length; allocated in full (the driver's default), a
    16 MiB-term recording costs ~50 MB of zeroed pages and ~100 ms on every replay, so on every
    micro-batch; sparse, a few ms."""
    from .._native import ChannelUri

    return str(ChannelUri(channel).with_default("sparse", True))


def _to_i32(v: int) -> int:
    v &= 0xFFFF_FFFF
    return v - (1 << 32) if v >= 1 << 31 else v


class _Assembler:
    """Turns the fragments of successive ``poll_batch`` calls into Arrow batches of whole messages."""

    def __init__(self, r: RecordingRange, layout: ValueLayout | None = None, timestamp: bool = False,
                 cluster: bool = False) -> None:
        self.r = r
        self.layout = layout
        self.timestamp = timestamp
        #: a cluster's log: rows are its session messages, their header in columns (``cluster_log``)
        self.cluster = cluster
        self.schema = schema_for(layout, timestamp, cluster)
        # A message begun in an earlier batch: its fragments' bytes and reserved value.
        self.pending: list[bytes] = []
        self.pending_reserved = 0

    def _columns(self, values: pa.Array, positions: np.ndarray, reserved: np.ndarray) -> pa.RecordBatch:
        r = self.r
        layout = self.layout
        meta: list[pa.Array] = []
        if self.cluster:
            values, positions, meta = session_messages(values, positions)
        if layout is None:
            head = [values]
        else:
            bad = layout.malformed(values)
            if len(bad) and layout.mode == "DROPMALFORMED":
                keep = np.ones(len(values), bool)
                keep[bad] = False
                values = values.filter(pa.array(keep))
                positions, reserved = positions[keep], reserved[keep]
                meta = [m.filter(pa.array(keep)) for m in meta]
                bad = bad[:0]
            head = layout.decode(values, positions, r.recording_id, bad)
        n = len(values)
        if self.cluster:
            session_ids, term_ids, stamps = meta
            return pa.RecordBatch.from_arrays(
                [*head, session_ids, term_ids, pa.array(np.full(n, r.recording_id, np.int64)), pa.array(positions),
                 stamps], schema=self.schema)
        return pa.RecordBatch.from_arrays(
            [
                *head,
                pa.array(np.full(n, r.recording_id, np.int64)),
                pa.array(np.full(n, r.stream_id, np.int32)),
                pa.array(np.full(n, r.session_id, np.int32)),
                pa.array(positions),
                pa.array(reserved),
                *([stamp_column(reserved)] if self.timestamp else []),
            ],
            schema=self.schema,
        )

    def batches(self, batch) -> Iterator[pa.RecordBatch]:
        """Arrow batches of the whole messages in ``batch`` that fall in the range."""
        n = len(batch)
        offsets = np.frombuffer(batch.offsets, np.int32)
        positions = np.frombuffer(batch.positions, np.int64)
        flags = np.frombuffer(batch.flags, np.uint8)
        reserved = np.frombuffer(batch.reserved_values, np.int64)
        start, end = self.r.start, self.r.end
        if not self.pending and bool(np.all(flags == UNFRAGMENTED)):
            # Fast path: one fragment per message, so the batch's buffers are the column as is.
            lo = int(np.searchsorted(positions, start, side="right"))
            hi = int(np.searchsorted(positions, end, side="right"))
            if hi <= lo:
                return
            values = pa.BinaryArray.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(batch.offsets), pa.py_buffer(batch.data)])
            if lo or hi < n:
                values = values.slice(lo, hi - lo)
                positions, reserved = positions[lo:hi], reserved[lo:hi]
            yield self._columns(values, positions, reserved)
            return
        yield from self._fragmented(batch, n, offsets, positions, flags, reserved)

    def _fragmented(self, batch, n, offsets, positions, flags, reserved) -> Iterator[pa.RecordBatch]:
        start, end = self.r.start, self.r.end
        ends = np.flatnonzero(flags & END_FLAG)
        first = 0
        if self.pending:
            # The batch opens with the rest of a message begun earlier: finish it on its own.
            if len(ends) == 0:
                data = np.frombuffer(batch.data, np.uint8)
                self.pending.append(data[offsets[0]:offsets[n]].tobytes())
                return
            j = int(ends[0])
            data = np.frombuffer(batch.data, np.uint8)
            self.pending.append(data[offsets[0]:offsets[j + 1]].tobytes())
            value = b"".join(self.pending)
            self.pending = []
            p = int(positions[j])
            if start < p <= end:
                yield self._columns(pa.array([value], pa.binary()), np.array([p], np.int64),
                                    np.array([self.pending_reserved], np.int64))
            first = j + 1
            ends = ends[1:]
        begins = np.flatnonzero(flags[first:] & BEGIN_FLAG) + first
        if len(begins) > len(ends):
            # The batch closes with the first fragments of a message: keep them for the next batch.
            b = int(begins[-1])
            data = np.frombuffer(batch.data, np.uint8)
            self.pending = [data[offsets[b]:offsets[n]].tobytes()]
            self.pending_reserved = int(reserved[b])
            begins = begins[:-1]
        if len(begins) == 0:
            return
        if len(begins) != len(ends):
            raise ReadError(f"recording {self.r.recording_id}: fragments out of order near position "
                               f"{int(positions[first])} (BEGIN and END flags do not pair up)")
        message_end = positions[ends]
        keep = (message_end > start) & (message_end <= end)
        if not bool(np.any(keep)):
            return
        # Fragments of a message lie back to back in batch.data, so message k spans
        # offsets[begins[k]] .. offsets[ends[k] + 1]: the offsets column is a gather.
        value_offsets = np.empty(len(begins) + 1, np.int32)
        value_offsets[:-1] = offsets[begins]
        value_offsets[-1] = offsets[ends[-1] + 1]
        values = pa.BinaryArray.from_buffers(
            pa.binary(), len(begins), [None, pa.py_buffer(value_offsets), pa.py_buffer(batch.data)])
        positions_out = message_end
        reserved_out = reserved[begins]
        if not bool(np.all(keep)):
            idx = np.flatnonzero(keep)
            lo, hi = int(idx[0]), int(idx[-1]) + 1  # end positions grow, so the kept ones are a run
            values = values.slice(lo, hi - lo)
            positions_out, reserved_out = positions_out[lo:hi], reserved_out[lo:hi]
        yield self._columns(values, positions_out, reserved_out)


def _errors_after_end(s: ArchiveSession, wait: float = 0.2) -> list:
    """The archive's errors about earlier requests, waiting briefly: an error about a replay may come
    just after the replay's end of stream."""
    deadline = time.monotonic() + wait
    while True:
        errors = s.archive.poll_errors()
        if errors or time.monotonic() > deadline:
            return errors
        time.sleep(0.005)


def read_range(address: ArchiveAddress, r: RecordingRange, replay_channel: str = "aeron:ipc",
               replay_stream_id: int = 0x5A17, fragment_limit: int = 65536,
               timeout: float | None = None, layout: ValueLayout | None = None,
               timestamp: bool = False, cluster: bool = False) -> Iterator[pa.RecordBatch]:
    """Replays ``r`` from the archive and yields its messages as Arrow batches of ``SCHEMA``.

    Fails (``TimeoutError``) when the replay makes no progress for ``timeout`` seconds (default:
    the address' ``message_timeout``), naming the archive and the range; fails (``RuntimeError``,
    with the archive's error if it sent one) when the replay ends before the range's end. A range's
    ``replay_to`` is a frame boundary (what was recorded when it was planned).
    """
    if r.end <= r.start:
        return
    timeout = address.message_timeout if timeout is None else timeout
    from .. import ArchiveError
    from ..archive import is_response_channel

    response = is_response_channel(replay_channel)

    def start(s: ArchiveSession):
        """Starts the replay: (replay session id, its subscription). Over a response channel the
        subscription comes first, and the replay connects to it through the executor's own driver
        (the same ``replayChannel`` serves executors on every host)."""
        if response:
            sub = s.client.add_subscription(replay_channel, replay_stream_id)
            try:
                return s.archive.start_replay(r.recording_id, _sparse(replay_channel), replay_stream_id,
                                              position=r.replay_from, length=r.length, subscription=sub), sub
            except BaseException:
                sub.close()
                raise
        replay_id = s.archive.start_replay(r.recording_id, _sparse(replay_channel), replay_stream_id,
                                           position=r.replay_from, length=r.length)
        return replay_id, s.client.add_subscription(
            _replay_subscription_channel(replay_channel, _to_i32(replay_id)), replay_stream_id)

    def start_waiting_for_a_slot(s: ArchiveSession):
        """``start``, waiting while the archive runs as many replays as it may (many tasks at once):
        asked again, backing off, until ``timeout``."""
        deadline, pause, waited = time.monotonic() + timeout, 0.01, False
        while True:
            try:
                return start(s)
            except ArchiveError as e:
                if "max concurrent replays" not in str(e) or time.monotonic() + pause > deadline:
                    raise
                if not waited:
                    log.info("%s: replay of recording %d waits for a replay slot (%s)", address.describe(),
                             r.recording_id, e)
                    waited = True
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    s = session(address)
    try:
        replay_id, sub = start_waiting_for_a_slot(s)
    except ArchiveError as e:
        # A session kept from an earlier task may belong to an archive that has since been
        # restarted (it does not know the session: no answer) or is gone: once more, afresh.
        drop_session(address)
        if e.code != -1:  # the archive answered: a refusal, not a lost session
            raise ReadError(f"{address.describe()}: replay of recording {r.recording_id} from "
                            f"{r.replay_from} to {r.end} refused: {e}") from e
        s = session(address)
        try:
            replay_id, sub = start_waiting_for_a_slot(s)
        except Exception as e2:
            drop_session(address)
            raise ReadError(f"{address.describe()}: replay of recording {r.recording_id} from "
                            f"{r.replay_from} to {r.end} failed: {e2}") from e2
    assembler = _Assembler(r, layout, timestamp, cluster)
    last = r.replay_from
    image = None  # the replay's image, kept: its final position is readable after it is gone
    ended = False  # the replay's image reached its end (or went away)
    idle_since = time.monotonic()
    try:
        while last < r.end:
            batch = sub.poll_batch(fragment_limit)
            if len(batch):
                if image is None:
                    # Still there: the driver withdraws an image only after it was read to its end.
                    image = next(iter(sub.images), None)
                idle_since = time.monotonic()
                last = int(np.frombuffer(memoryview(batch.positions), np.int64)[-1])
                yield from assembler.batches(batch)
                continue
            images = sub.images
            if images:
                image = images[0]
                if all(i.is_end_of_stream or i.is_closed for i in images):
                    ended = True  # a bounded replay ends with end-of-stream; trailing padding is not delivered
                    break
            elif image is not None:
                ended = True  # the image went away: the replay is over
                break
            errors = s.archive.poll_errors()
            if errors:
                raise ReadError(f"{address.describe()}: replay of recording {r.recording_id} ({r.start}, {r.end}] "
                                f"failed, read to position {last}: "
                                   + "; ".join(f"{text} (code {code})" for _, code, text in errors))
            if time.monotonic() - idle_since > timeout:
                drop_session(address)  # the archive may be gone: the next task reconnects
                raise ReadTimeoutError(f"{address.describe()}: replay of recording {r.recording_id} "
                                       f"({r.start}, {r.end}] made no progress for {timeout:.0f}s at position {last}")
            time.sleep(0.0002 if image is not None else 0.001)
        # A replay that ended must have reached the range's end (its image's final position counts the
        # padding that closes a term, which delivers no message); one that ended before it was cut
        # short (a corrupt frame, the archive stopped or killed): never taken as complete.
        reached = max(last, image.position if image is not None else last)
        if ended and reached < r.end:
            errors = _errors_after_end(s)
            why = "; ".join(f"{text} (code {code})" for _, code, text in errors) or "the archive gave no reason"
            drop_session(address)
            raise ReadError(f"{address.describe()}: replay of recording {r.recording_id} ({r.start}, {r.end}] "
                            f"ended early, at position {reached}: {why}")
    finally:
        if not ended and last < r.replay_to:  # stopped early (past ``end``, an error, the task killed)
            try:
                s.archive.stop_replay(replay_id)
            except Exception:
                pass
        sub.close()
