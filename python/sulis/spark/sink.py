"""``df.write.format("sulis")`` and ``df.writeStream.format("sulis")``: publish each row's ``value``.

Rows go out with ``Publication.offer_batch`` straight from the Arrow ``value`` column (binary or
string), no Python object per row; back pressure is waited out and the rest offered again.

Exactly once into a recorded stream (the streaming sink)
--------------------------------------------------------
Each executor process publishes through its own ``ExclusivePublication``, so everything a
process writes lands, in order and uninterrupted, in one recording of its own, and one task
runs at a time in a process. A task of micro-batch ``N`` writing partition ``p`` marks the first
message it publishes with a *run tag* in the reserved value (``query << 48 | (N + 1) << 16 | p``
with bit 63 set, so negative; ``query`` a 15-bit hash of the streaming query's id, stable across
restarts); its other messages carry 0, or their timestamp with ``stampTimestamp`` (positive).
A run is a tagged message and every message after it up to the next tagged one, so the
archive's recordings say exactly how many rows each ``(N, p)`` published, even when a task died
half way.

When the query (re)starts, the writer (on the Spark driver) walks back from the end of every
recording of the stream until it has seen all runs of the query's last micro-batch, and counts
their messages per partition. Spark re-runs that micro-batch if it was not committed; a task
of it then skips as many leading rows as earlier attempts published and publishes the rest.
A task retried inside a run (attempt > 0) counts for itself the same way. See docs/spark.md
for what this promises and its limits.

Where rows go
-------------
The ``channel`` and ``streamId`` options, or, where an option is not set, each row's ``channel``
(string) and ``stream_id`` (integer) columns, as Kafka's sink takes its ``topic`` option or
column (the option wins, so a frame read from ``format("sulis")``, which has a ``stream_id``
column, goes to the option's stream). A task publishes each target's rows in their order, and
the exactly-once bookkeeping is per target: a run tag opens each target's run, and a restarted
query that routes by column looks for its last runs in every recording that begins with a run
tag (the recordings sinks made), since which streams the rows name is not known beforehand.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from .options import ArchiveAddress, OptionError, WriterOptions
from .recordings import RecordingInfo, info_of
from .replay import RecordingRange, read_range, replay_from, session

#: Where the sink's read-backs are replayed to: (channel, stream id).
Replay = tuple[str, int]
IPC_REPLAY: Replay = ("aeron:ipc", 0x5A17)

__all__ = ["SulisBatchWriter", "SulisStreamWriter", "run_tag", "parse_run_tag", "published_runs"]

log = logging.getLogger("sulis.spark")

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_BITS = 32
_PARTITION_BITS = 16


def query_hash(query_id: str) -> int:
    """15 bits of the streaming query's id (kept in its checkpoint, so stable across restarts)."""
    return zlib.crc32(query_id.encode()) & 0x7FFF


#: Bit 63 marks a run tag: tags are negative, so they never look like a timestamp (epoch nanoseconds,
#: positive) that ``stampTimestamp`` or a publisher puts in the other messages' reserved values.
_TAG_BIT = 1 << 63


def run_tag(query: int, batch_id: int, partition: int) -> int:
    """The reserved value of the first message of a sink task's run (always < 0)."""
    if not 0 <= partition < 1 << _PARTITION_BITS or not 0 <= batch_id < (1 << _BATCH_BITS) - 1:
        raise ValueError(f"batch {batch_id} / partition {partition} do not fit a run tag")
    body = (query << (_BATCH_BITS + _PARTITION_BITS)) | ((batch_id + 1) << _PARTITION_BITS) | partition
    return (body | _TAG_BIT) - (1 << 64)  # as a signed 64-bit value


def parse_run_tag(value: int) -> tuple[int, int, int] | None:
    """(query, batch id, partition) of a run tag, None for anything else (0, a timestamp, ...)."""
    if value >= 0:
        return None
    body = value & (_TAG_BIT - 1)
    batch = (body >> _PARTITION_BITS) & ((1 << _BATCH_BITS) - 1)
    if batch == 0 or body >> (_BATCH_BITS + _PARTITION_BITS) >= 1 << 15:
        return None
    return body >> (_BATCH_BITS + _PARTITION_BITS), batch - 1, body & ((1 << _PARTITION_BITS) - 1)


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task did: rows published, rows skipped (published by an earlier attempt)."""

    partition: int
    published: int
    skipped: int


def _check_schema(schema: StructType, opts: WriterOptions) -> None:
    """The frame must have a binary or string ``value``, and say where each row goes: by option, or by a
    ``channel`` (string) / ``stream_id`` (integer) column where the option is not set."""
    names = [f.name for f in schema.fields]
    if "value" not in names:
        raise OptionError(f"the sulis sink publishes a column named 'value' (binary or string); "
                          f"the data frame has {names}")
    t = schema["value"].dataType
    if not isinstance(t, BinaryType | StringType):
        raise OptionError(f"the sulis sink publishes column 'value' as bytes: it must be binary or string, "
                          f"not {t.simpleString()} (cast it, or encode it, e.g. to_json)")
    if opts.channel is None:
        if "channel" not in names:
            raise OptionError("option channel: required (the channel to publish on, e.g. aeron:ipc), "
                              "or a string column 'channel' naming each row's")
        if not isinstance(schema["channel"].dataType, StringType):
            raise OptionError("column 'channel' must be a string (a channel URI), not "
                              f"{schema['channel'].dataType.simpleString()}")
    if opts.stream_id is None:
        if "stream_id" not in names:
            raise OptionError("option streamId: required (the stream to publish on), "
                              "or an integer column 'stream_id' naming each row's")
        if not isinstance(schema["stream_id"].dataType, IntegerType | LongType | ShortType | ByteType):
            raise OptionError("column 'stream_id' must be an integer, not "
                              f"{schema['stream_id'].dataType.simpleString()}")
    if opts.stamp_timestamp and "timestamp" in names and not isinstance(schema["timestamp"].dataType,
                                                                         TimestampType | TimestampNTZType):
        raise OptionError("option stampTimestamp: column 'timestamp' must be a timestamp, not "
                          f"{schema['timestamp'].dataType.simpleString()}")


def _stamps(batch: pa.RecordBatch, opts: WriterOptions) -> np.ndarray | int | None:
    """Reserved values for ``stampTimestamp``: the rows' ``timestamp`` in epoch nanoseconds (0 where
    null), or, without that column, the time of publishing, one value for the whole batch."""
    if not opts.stamp_timestamp:
        return None
    if "timestamp" not in batch.schema.names:
        return time.time_ns()
    col = batch.column("timestamp")
    tz = getattr(col.type, "tz", None)
    nanos = pc.fill_null(col.cast(pa.timestamp("ns", tz=tz)).cast(pa.int64()), 0)
    stamps = np.ascontiguousarray(nanos.to_numpy(zero_copy_only=False), np.int64)
    before_1970 = np.flatnonzero(stamps < 0)
    if len(before_1970):
        # A negative reserved value is the sink's run tag: one that read as a tag would make a re-run
        # skip (or repeat) rows. Refused, never stamped.
        row = int(before_1970[0])
        raise OptionError(f"option stampTimestamp: row {row} of this task's batch has timestamp "
                          f"{col[row].as_py()}, before 1970: it cannot be stamped (negative reserved values are "
                          "the exactly-once sink's run tags); drop stampTimestamp or move such timestamps")
    return stamps


# -- publishing ---------------------------------------------------------------------------------

#: Where rows go: (channel, stream id).
Target = tuple[str, int]

_publications: dict[tuple[ArchiveAddress, str, int, bool], object] = {}
_publications_lock = threading.Lock()


def _publication(address: ArchiveAddress, target: Target, exclusive: bool):
    """This process' publication on ``target``, kept for the process' life: closing it would end its
    recording, and the next task would start another."""
    key = (address, *target, exclusive)
    with _publications_lock:
        pub = _publications.get(key)
        if pub is not None and not pub.is_closed:  # type: ignore[attr-defined]
            return pub
        client = session(address).client
        add = client.add_exclusive_publication if exclusive else client.add_publication
        try:
            pub = add(*target)
        except Exception as e:
            raise RuntimeError(f"sulis sink: cannot publish on channel {target[0]!r} stream {target[1]}: {e}") from e
        _publications[key] = pub
        return pub


def routes(batch: pa.RecordBatch, opts: WriterOptions) -> Iterator[tuple[Target, pa.Array, np.ndarray | int | None]]:
    """The batch's values (and ``stampTimestamp`` stamps) per target, each target's rows in their order."""
    values = _values(batch)
    stamps = _stamps(batch, opts)
    n = len(values)
    by_channel = opts.channel is None
    by_stream = opts.stream_id is None
    if not (by_channel or by_stream):
        yield (opts.channel, opts.stream_id), values, stamps  # type: ignore[misc]
        return
    if n == 0:
        return
    channels: list[str] = [opts.channel]  # type: ignore[list-item]
    channel_codes = np.zeros(n, np.int64)
    if by_channel:
        col = batch.column("channel")
        if col.null_count:
            raise ValueError(f"sulis sink: column 'channel' is null in row {_first_null(col)} of a batch, "
                             "and no channel option is set")
        encoded = pc.dictionary_encode(col)
        channels = encoded.dictionary.to_pylist()
        channel_codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    streams = np.full(n, opts.stream_id if opts.stream_id is not None else 0, np.int64)
    if by_stream:
        col = batch.column("stream_id")
        if col.null_count:
            raise ValueError(f"sulis sink: column 'stream_id' is null in row {_first_null(col)} of a batch, "
                             "and no streamId option is set")
        streams = col.to_numpy(zero_copy_only=False).astype(np.int64)
        bad = np.flatnonzero((streams < -(1 << 31)) | (streams >= 1 << 31))
        if len(bad):
            raise ValueError(f"sulis sink: column 'stream_id' holds {int(streams[bad[0]])} (row {int(bad[0])} of a "
                             "batch), which is not a 32-bit stream id")
    keys = (channel_codes << 32) | (streams & 0xFFFF_FFFF)
    unique, inverse = np.unique(keys, return_inverse=True)
    if len(unique) == 1:
        yield (channels[int(unique[0]) >> 32], int(streams[0])), values, stamps
        return
    for k, key in enumerate(unique):
        idx = np.flatnonzero(inverse == k)
        target = (channels[int(key) >> 32], int(streams[idx[0]]))
        yield target, values.take(pa.array(idx)), (stamps[idx] if isinstance(stamps, np.ndarray) else stamps)


def _first_null(col: pa.Array) -> int:
    return int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))


def _await(target: Target, opts: WriterOptions, result: int, stuck_since: float) -> None:
    """Waits a little after a refused offer; fails when it has lasted ``message_timeout``."""
    from .. import CLOSED, MAX_POSITION_EXCEEDED, NOT_CONNECTED, result_name

    channel, stream_id = target
    if result in (CLOSED, MAX_POSITION_EXCEEDED):
        raise RuntimeError(f"sulis sink: publication on {channel} stream {stream_id}: {result_name(result)}")
    if time.monotonic() - stuck_since > opts.archive.message_timeout:
        why = (" (nobody subscribes: is the stream being recorded? ArchiveClient.start_recording"
               f"({channel!r}, {stream_id}))") if result == NOT_CONNECTED else ""
        raise TimeoutError(f"sulis sink: {channel} stream {stream_id} refused offers for "
                           f"{opts.archive.message_timeout:.0f}s: {result_name(result)}{why}")
    time.sleep(0.0001 if result != NOT_CONNECTED else 0.005)


def offer_all(pub, target: Target, values: pa.Array, opts: WriterOptions, first_reserved: int | None = None,
              stamps: np.ndarray | int | None = None) -> None:
    """Publishes every value on ``pub`` (``target``'s); the first with ``first_reserved`` as its reserved
    value, if given, the others with ``stamps`` (one int64 per value, or one int for all), if given."""
    n = len(values)
    if n == 0:
        return
    i = 0
    stuck_since = time.monotonic()
    if first_reserved is not None:
        first = values[0].as_buffer()
        while (r := pub.offer(first, reserved_value=first_reserved)) < 0:
            _await(target, opts, r, stuck_since)
        i = 1
    while i < n:
        rest = stamps[i:] if isinstance(stamps, np.ndarray) else stamps
        published, r = pub.offer_batch(values.slice(i) if i else values, reserved_values=rest)
        if published:
            i += published
            stuck_since = time.monotonic()
        elif r < 0:
            _await(target, opts, r, stuck_since)


def _values(batch: pa.RecordBatch) -> pa.Array:
    col = batch.column("value")
    if pa.types.is_large_binary(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    return col


class SulisBatchWriter(DataSourceArrowWriter):
    """``df.write.format("sulis")``: every row's value, once per successful task (at least once if
    Spark retries a task: a batch write has no id to recognise the earlier attempt by)."""

    def __init__(self, opts: WriterOptions, schema: StructType) -> None:
        _check_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        n = 0
        for batch in iterator:
            for target, values, stamps in routes(batch, self.opts):
                offer_all(_publication(self.opts.archive, target, False), target, values, self.opts, stamps=stamps)
                n += len(values)
        ctx = TaskContext.get()
        return SinkCommit(ctx.partitionId() if ctx else 0, n, 0)


# -- exactly once: what earlier attempts published ---------------------------------------------


def _settled_end(ac, rid: int, live_end: int, wait_s: float = 2.0) -> int:
    """A live recording's position once it stops moving for 50 ms (what dead writers offered has been
    recorded), at most ``wait_s``."""
    deadline = time.monotonic() + wait_s
    end = live_end
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = ac.get_recording_position(rid)
        if now < 0 or now == end:
            return end if now < 0 else now
        end = now
    return end


#: Rows published per partition by the newest micro-batch of each query tag: ``{(query, batch): {partition: rows}}``.
Runs = dict[tuple[int, int], dict[int, int]]


def _merge(found: list[Runs]) -> Runs:
    """Runs of several recordings of one target: per query the newest batch, its rows summed."""
    newest: dict[int, tuple[int, dict[int, int]]] = {}
    for runs in found:
        for (q, batch), counts in runs.items():
            best = newest.get(q)
            if best is None or batch > best[0]:
                newest[q] = (batch, dict(counts))
            elif batch == best[0]:
                for p, k in counts.items():
                    best[1][p] = best[1].get(p, 0) + k
    return {(q, batch): counts for q, (batch, counts) in newest.items()}


def _runs_of(address: ArchiveAddress, r: RecordingInfo, query: int | None, replay: Replay = IPC_REPLAY) -> Runs:
    """The runs of one recording, to its settled end if it is live."""
    end = _settled_end(session(address).archive, r.recording_id, r.end) if r.live else r.end
    return {(q, batch): counts for q, (batch, counts) in _recording_runs(address, r, end, query, replay).items()}


def _stream_key(channel: str, stream_id: int) -> str | None:
    """What the archive tells the stream by (``recording_key``); None for a channel it cannot parse."""
    from .. import _native

    try:
        return _native.recording_key(channel, stream_id)
    except Exception:
        return None


def published_runs(address: ArchiveAddress, channel: str, stream_id: int, query: int | None = None,
                   replay: Replay = IPC_REPLAY) -> Runs:
    """Rows published per partition by the last micro-batch of each query tag found in the recordings
    of the stream ``channel``/``stream_id`` (the same media, endpoint, ..., whatever its other
    parameters): ``{(query, batch id): {partition: rows}}`` (only ``query`` if given)."""
    s = session(address)
    key = _stream_key(channel, stream_id)
    media = channel.split("?", 1)[0]
    return _merge([_runs_of(address, info_of(s, d), query, replay) for d in _paged(
        lambda from_id, count: s.archive.list_recordings_for_uri(media, stream_id, from_id, count))
        if _stream_key(d.stripped_channel, d.stream_id) == key])


def _paged(page_of, size: int = 1000):
    from_id = 0
    while True:
        page = page_of(from_id, size)
        yield from page
        if len(page) < size:
            return
        from_id = page[-1].recording_id + 1


def _begins_with_run_tag(address: ArchiveAddress, r: RecordingInfo, replay: Replay = IPC_REPLAY) -> bool:
    """Whether the recording's first message is a run tag (a sink's recording). True also when that
    cannot be told from its first 64 KiB (a larger first message): better read than missed."""
    if r.end <= r.start:
        return False
    head = min(r.end, r.start + 64 * 1024)
    # The replay runs to the recording's end (a frame boundary) and stops past ``head``.
    got = [b.column(5).to_numpy() for b in read_range(address, RecordingRange(
        r.recording_id, r.stream_id, r.session_id, r.start, head, r.start, r.end), *replay)]
    reserved = np.concatenate(got) if got else np.empty(0, np.int64)
    return not len(reserved) or parse_run_tag(int(reserved[0])) is not None


def published_runs_by_stream(address: ArchiveAddress, replay: Replay = IPC_REPLAY) -> dict[str, Runs]:
    """``published_runs`` of every stream (by ``recording_key``) with a recording a sink made (one that
    begins with a run tag), for a sink that routes rows by column."""
    s = session(address)
    found: dict[str, list[Runs]] = {}
    for d in _paged(lambda from_id, count: s.archive.list_recordings(from_id, count)):
        key = _stream_key(d.stripped_channel, d.stream_id)
        if key is None:
            continue
        r = info_of(s, d)
        if _begins_with_run_tag(address, r, replay):
            found.setdefault(key, []).append(_runs_of(address, r, None, replay))
    return {key: merged for key, runs in found.items() if (merged := _merge(runs))}


def _tags(reserved: np.ndarray) -> list[tuple[int, tuple[int, int, int]]]:
    """(index, (query, batch, partition)) of the run tags among ``reserved``."""
    out = []
    for i in np.flatnonzero(reserved < 0):
        t = parse_run_tag(int(reserved[i]))
        if t is not None:
            out.append((int(i), t))
    return out


def _recording_runs(address: ArchiveAddress, r, end: int, query: int | None,
                    replay: Replay = IPC_REPLAY) -> dict[int, tuple[int, dict[int, int]]]:
    """Per query tag, its newest batch's rows per partition in one recording, reading back a term at a time."""
    parts: list[np.ndarray] = []
    hi = end
    reserved = np.empty(0, np.int64)
    while hi > r.start:
        lo = max(r.start, hi - 1 - (hi - 1) % r.term_length)
        chunk = RecordingRange(r.recording_id, r.stream_id, r.session_id, lo, hi,
                               replay_from(lo, r.start, r.term_length), end)
        got = [b.column(5).to_numpy() for b in read_range(address, chunk, *replay)]
        parts.insert(0, np.concatenate(got) if got else np.empty(0, np.int64))
        hi = lo
        reserved = np.concatenate(parts)
        mine = [t for _, t in _tags(reserved) if query is None or t[0] == query]
        # Batches only grow along a recording: once an older batch of a query shows up before
        # its newest, every run of the newest is in what was read.
        if mine and mine[0][1] < max(b for q, b, _ in mine if q == mine[0][0]):
            break
    return _count_runs(reserved, _tags(reserved), query)


def _count_runs(reserved: np.ndarray, tags, query: int | None) -> dict[int, tuple[int, dict[int, int]]]:
    """Rows of each run of each query's newest batch; a run ends where the next one (of any query) starts."""
    newest: dict[int, int] = {}
    for _, (q, b, _p) in tags:
        if query is None or q == query:
            newest[q] = max(newest.get(q, -1), b)
    out: dict[int, tuple[int, dict[int, int]]] = {q: (b, {}) for q, b in newest.items()}
    for k, (i, (q, b, p)) in enumerate(tags):
        if newest.get(q) != b:
            continue
        stop = tags[k + 1][0] if k + 1 < len(tags) else len(reserved)
        counts = out[q][1]
        counts[p] = counts.get(p, 0) + stop - i
    return out


class SulisStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("sulis")``: exactly once into the recorded stream (see the module doc);
    ``exactlyOnce=false`` publishes through a shared publication with no run tags (at least once)."""

    def __init__(self, opts: WriterOptions, schema: StructType) -> None:
        _check_schema(schema, opts)
        self.opts = opts
        # Built on the Spark driver when the query starts, then shipped with every task: the last runs
        # of the option's target, or (routing by column) of every stream a sink recorded.
        self.resume: Runs = {}
        self.resume_by_stream: dict[str, Runs] = {}
        if opts.exactly_once:
            if opts.channel is not None and opts.stream_id is not None:
                self.resume = published_runs(opts.archive, opts.channel, opts.stream_id, replay=opts.replay)
            else:
                self.resume_by_stream = published_runs_by_stream(opts.archive, opts.replay)
            if self.resume or self.resume_by_stream:
                log.info("sulis sink: last runs found %s", self.resume or self.resume_by_stream)

    def _last_runs(self, target: Target, query: int, retried: bool) -> Runs:
        if retried:  # a retried task: count what the failed attempts published
            return published_runs(self.opts.archive, *target, query, self.opts.replay)
        if self.opts.channel is not None and self.opts.stream_id is not None:
            return self.resume
        return self.resume_by_stream.get(_stream_key(*target) or "", {})

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        opts = self.opts
        if not opts.exactly_once:
            n = 0
            for batch in iterator:
                for target, values, stamps in routes(batch, opts):
                    offer_all(_publication(opts.archive, target, False), target, values, opts, stamps=stamps)
                    n += len(values)
            return SinkCommit(partition, n, 0)
        raw_batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None
        if ctx is None or raw_batch is None or not query_id:
            raise RuntimeError("sulis sink: no streaming batch id or query id in the task (exactly-once needs them)")
        batch_id = int(raw_batch)
        query = query_hash(query_id)
        tag = run_tag(query, batch_id, partition)
        skip: dict[Target, int] = {}  # per target: rows an earlier attempt published
        skipped: dict[Target, int] = {}
        published: dict[Target, int] = {}
        for batch in iterator:
            for target, values, stamps in routes(batch, opts):
                if target not in skip:
                    runs = self._last_runs(target, query, ctx.attemptNumber() > 0)
                    skip[target] = runs.get((query, batch_id), {}).get(partition, 0)
                    skipped[target] = published[target] = 0
                if skipped[target] < skip[target]:
                    k = min(skip[target] - skipped[target], len(values))
                    skipped[target] += k
                    values = values.slice(k)
                    if isinstance(stamps, np.ndarray):
                        stamps = stamps[k:]
                if len(values):
                    offer_all(_publication(opts.archive, target, True), target, values, opts,
                              first_reserved=None if published[target] else tag, stamps=stamps)
                    published[target] += len(values)
        return SinkCommit(partition, sum(published.values()), sum(skipped.values()))

    def commit(self, messages, batchId: int) -> None:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        skipped = sum(m.skipped for m in done)
        if skipped:
            log.warning("sulis sink: batch %d re-run: %d rows were already published and were not published again",
                        batchId, skipped)

    def abort(self, messages, batchId: int) -> None:
        log.warning("sulis sink: batch %d aborted; what its tasks published stays in the stream and a re-run "
                    "skips it", batchId)
