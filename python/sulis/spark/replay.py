"""Executor side of ``format("sulis")``: one position range, as Arrow batches.

A range is read by ``sulis_spark::PartitionReader`` (Rust, ``_native.SparkPartitionReader``), the
reader both implementations of the source run: a bounded replay from the archive, or the segment
files where they are readable on this host (``readMode``), assembled into whole messages; here the
messages' buffers become ``pyarrow.RecordBatch``es without a copy, no Python object per message.

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

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from .errors import NoMediaDriverError
from .options import ArchiveAddress

log = logging.getLogger("sulis.spark")

__all__ = ["SCHEMA", "RecordingRange", "ArchiveSession", "session", "read_range", "replay_from"]

#: Arrow's type of each of Spark's column types (Spark checks the first batch's Arrow types strictly).
_ARROW_TYPES = {
    "binary": pa.binary(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


def row_shape(value_schema: tuple[str, str, str] | None = None, timestamp: bool = False, cluster: bool = False):
    """What the rows are (``sulis_spark::row_shape``, the rules both implementations of the source run):
    ``value`` or the ``valueSchema`` fields (``value_schema``: (schema, mode, corrupt column)), then the
    metadata (and ``timestamp`` with ``includeTimestamp``); a cluster log's session messages with ``cluster``."""
    from .. import _native

    return _native.SparkRowShape(value_schema, timestamp, cluster)


def schema_for(value_schema: tuple[str, str, str] | None = None, timestamp: bool = False,
               cluster: bool = False) -> pa.Schema:
    """The Arrow schema of the rows (see ``row_shape``)."""
    return pa.schema([pa.field(n, _ARROW_TYPES[t]) for n, t in row_shape(value_schema, timestamp, cluster).columns()])


def ddl_for(value_schema: tuple[str, str, str] | None = None, timestamp: bool = False, cluster: bool = False) -> str:
    """The same as a Spark DDL string."""
    return row_shape(value_schema, timestamp, cluster).ddl()


#: The rows of ``format("sulis")`` without options that change them.
SCHEMA = schema_for()

#: The same as a Spark DDL string.
SCHEMA_DDL = ddl_for()


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


class _Rows:
    """Turns batches of whole messages into Arrow batches of the rows (``row_shape``): Rust fills each column's
    buffers in Arrow's layout, wrapped here without a copy."""

    def __init__(self, r: RecordingRange, value_schema: tuple[str, str, str] | None = None, timestamp: bool = False,
                 cluster: bool = False) -> None:
        self.shape = row_shape(value_schema, timestamp, cluster)
        self.schema = schema_for(value_schema, timestamp, cluster)
        self.ids = (r.recording_id, r.stream_id, r.session_id)

    def of(self, batch) -> pa.RecordBatch | None:
        """The rows of a batch of messages (a ``Batch``), None if none is a row; ``RowError`` naming a
        malformed payload (``valueSchema``'s FAILFAST)."""
        n, columns = self.shape.arrow(batch, self.ids)
        if not n:
            return None
        arrays = []
        for field, (validity, offsets, data, nulls) in zip(self.schema, columns, strict=True):
            buffers = [None if validity is None else pa.py_buffer(validity)]
            if offsets is not None:
                buffers.append(pa.py_buffer(offsets))
            buffers.append(pa.py_buffer(data))
            arrays.append(pa.Array.from_buffers(field.type, n, buffers, null_count=nulls))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def read_range(address: ArchiveAddress, r: RecordingRange, replay_channel: str = "aeron:ipc",
               replay_stream_id: int = 0x5A17, fragment_limit: int = 65536,
               timeout: float | None = None, value_schema: tuple[str, str, str] | None = None,
               timestamp: bool = False, cluster: bool = False, read_mode: str = "replay",
               archive_dir: str | None = None, archive_id: int | None = None) -> Iterator[pa.RecordBatch]:
    """The messages of ``r`` as Arrow batches of ``SCHEMA`` (or ``schema_for`` the options), read as
    ``read_mode`` says (``replay`` by default; ``files`` or ``auto`` with ``archive_dir`` or the directory
    archive ``archive_id`` announces on this host).

    Fails (``ReadTimeoutError``) when the replay makes no progress for ``timeout`` seconds (default: the
    address' ``message_timeout``), naming the archive and the range; fails (``ReadError``, with the
    archive's error if it sent one) when the replay ends before the range's end, and on a torn or corrupt
    frame in the files (naming the file, offset and position); ``NoMediaDriverError`` without a media driver
    here. A range's ``replay_to`` is a frame boundary (what was recorded when it was planned).
    """
    if r.end <= r.start:
        return
    from .. import _native

    wait = address.message_timeout if timeout is None else timeout
    reader = _native.SparkPartitionReader(
        (address.driver_dir, address.control_channel, address.control_stream_id, address.response_channel,
         address.response_stream_id, wait),
        replay_channel, replay_stream_id, fragment_limit, read_mode, archive_dir, dataclasses.astuple(r),
        archive_id)
    for text in reader.drain_log():
        log.info("%s", text)
    rows = _Rows(r, value_schema, timestamp, cluster)
    try:
        while (batch := reader.next_batch()) is not None:
            out = rows.of(batch)
            if out is not None:
                yield out
    finally:
        reader.close()
