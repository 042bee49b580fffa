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
from pyspark.sql.types import BinaryType, StringType, StructType, TimestampNTZType, TimestampType

from .options import ArchiveAddress, OptionError, WriterOptions
from .replay import RecordingRange, read_range, replay_from, session

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


def _value_column(schema: StructType, opts: WriterOptions) -> None:
    names = [f.name for f in schema.fields]
    if "value" not in names:
        raise OptionError(f"the sulis sink publishes a column named 'value' (binary or string); "
                          f"the data frame has {names}")
    t = schema["value"].dataType
    if not isinstance(t, BinaryType | StringType):
        raise OptionError(f"the sulis sink publishes column 'value' as bytes: it must be binary or string, "
                          f"not {t.simpleString()} (cast it, or encode it, e.g. to_json)")
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
    return np.ascontiguousarray(nanos.to_numpy(zero_copy_only=False), np.int64)


# -- publishing ---------------------------------------------------------------------------------

_publications: dict[tuple[ArchiveAddress, str, int, bool], object] = {}
_publications_lock = threading.Lock()


def _publication(opts: WriterOptions, exclusive: bool):
    """This process' publication on the sink's stream, kept for the process' life: closing it would
    end its recording, and the next task would start another."""
    key = (opts.archive, opts.channel, opts.stream_id, exclusive)
    with _publications_lock:
        pub = _publications.get(key)
        if pub is not None and not pub.is_closed:  # type: ignore[attr-defined]
            return pub
        client = session(opts.archive).client
        add = client.add_exclusive_publication if exclusive else client.add_publication
        pub = add(opts.channel, opts.stream_id)
        _publications[key] = pub
        return pub


def _await(pub, opts: WriterOptions, result: int, stuck_since: float) -> None:
    """Waits a little after a refused offer; fails when it has lasted ``message_timeout``."""
    from .. import CLOSED, MAX_POSITION_EXCEEDED, NOT_CONNECTED, result_name

    if result in (CLOSED, MAX_POSITION_EXCEEDED):
        raise RuntimeError(f"sulis sink: publication on {opts.channel} stream {opts.stream_id}: {result_name(result)}")
    if time.monotonic() - stuck_since > opts.archive.message_timeout:
        why = (" (nobody subscribes: is the stream being recorded? ArchiveClient.start_recording"
               f"({opts.channel!r}, {opts.stream_id}))") if result == NOT_CONNECTED else ""
        raise TimeoutError(f"sulis sink: {opts.channel} stream {opts.stream_id} refused offers for "
                           f"{opts.archive.message_timeout:.0f}s: {result_name(result)}{why}")
    time.sleep(0.0001 if result != NOT_CONNECTED else 0.005)


def offer_all(pub, values: pa.Array, opts: WriterOptions, first_reserved: int | None = None,
              stamps: np.ndarray | int | None = None) -> None:
    """Publishes every value; the first with ``first_reserved`` as its reserved value, if given, the
    others with ``stamps`` (one int64 per value, or one int for all), if given."""
    n = len(values)
    if n == 0:
        return
    i = 0
    stuck_since = time.monotonic()
    if first_reserved is not None:
        first = values[0].as_buffer()
        while (r := pub.offer(first, reserved_value=first_reserved)) < 0:
            _await(pub, opts, r, stuck_since)
        i = 1
    while i < n:
        rest = stamps[i:] if isinstance(stamps, np.ndarray) else stamps
        published, r = pub.offer_batch(values.slice(i) if i else values, reserved_values=rest)
        if published:
            i += published
            stuck_since = time.monotonic()
        elif r < 0:
            _await(pub, opts, r, stuck_since)


def _values(batch: pa.RecordBatch) -> pa.Array:
    col = batch.column("value")
    if pa.types.is_large_binary(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    return col


class SulisBatchWriter(DataSourceArrowWriter):
    """``df.write.format("sulis")``: every row's value, once per successful task (at least once if
    Spark retries a task: a batch write has no id to recognise the earlier attempt by)."""

    def __init__(self, opts: WriterOptions, schema: StructType) -> None:
        _value_column(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        pub = _publication(self.opts, exclusive=False)
        n = 0
        for batch in iterator:
            values = _values(batch)
            offer_all(pub, values, self.opts, stamps=_stamps(batch, self.opts))
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


def published_runs(address: ArchiveAddress, channel: str, stream_id: int,
                   query: int | None = None) -> dict[tuple[int, int], dict[int, int]]:
    """Rows published per partition by the last micro-batch of each query tag found in the stream's
    recordings: ``{(query, batch id): {partition: rows}}`` (only ``query`` if given)."""
    from .recordings import RecordingInfo, info_of

    s = session(address)
    found: dict[int, tuple[int, dict[int, int]]] = {}  # query -> (batch, {partition: rows})
    for d in s.archive.list_recordings_for_uri(channel, stream_id, 0, 10_000):
        r: RecordingInfo = info_of(s, d)
        end = _settled_end(s.archive, r.recording_id, r.end) if r.live else r.end
        for q, (batch, counts) in _recording_runs(address, r, end, query).items():
            best = found.get(q)
            if best is None or batch > best[0]:
                found[q] = (batch, dict(counts))
            elif batch == best[0]:
                for p, k in counts.items():
                    best[1][p] = best[1].get(p, 0) + k
    return {(q, batch): counts for q, (batch, counts) in found.items()}


def _tags(reserved: np.ndarray) -> list[tuple[int, tuple[int, int, int]]]:
    """(index, (query, batch, partition)) of the run tags among ``reserved``."""
    out = []
    for i in np.flatnonzero(reserved < 0):
        t = parse_run_tag(int(reserved[i]))
        if t is not None:
            out.append((int(i), t))
    return out


def _recording_runs(address: ArchiveAddress, r, end: int, query: int | None) -> dict[int, tuple[int, dict[int, int]]]:
    """Per query tag, its newest batch's rows per partition in one recording, reading back a term at a time."""
    parts: list[np.ndarray] = []
    hi = end
    reserved = np.empty(0, np.int64)
    while hi > r.start:
        lo = max(r.start, hi - 1 - (hi - 1) % r.term_length)
        chunk = RecordingRange(r.recording_id, r.stream_id, r.session_id, lo, hi,
                               replay_from(lo, r.start, r.term_length), end)
        got = [b.column(5).to_numpy() for b in read_range(address, chunk)]
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
        _value_column(schema, opts)
        self.opts = opts
        # Built on the Spark driver when the query starts, then shipped with every task.
        self.resume: dict[tuple[int, int], dict[int, int]] = {}
        if opts.exactly_once:
            self.resume = published_runs(opts.archive, opts.channel, opts.stream_id)
            if self.resume:
                log.info("sulis sink %s stream %d: last runs found %s", opts.channel, opts.stream_id, self.resume)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        if not self.opts.exactly_once:
            pub = _publication(self.opts, exclusive=False)
            n = 0
            for batch in iterator:
                values = _values(batch)
                offer_all(pub, values, self.opts, stamps=_stamps(batch, self.opts))
                n += len(values)
            return SinkCommit(partition, n, 0)
        raw_batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None
        if ctx is None or raw_batch is None or not query_id:
            raise RuntimeError("sulis sink: no streaming batch id or query id in the task (exactly-once needs them)")
        batch_id = int(raw_batch)
        query = query_hash(query_id)
        if ctx.attemptNumber() > 0:  # a retried task: count what the failed attempts published
            runs = published_runs(self.opts.archive, self.opts.channel, self.opts.stream_id, query)
        else:
            runs = self.resume
        skip = runs.get((query, batch_id), {}).get(partition, 0)
        pub = _publication(self.opts, exclusive=True)
        tag = run_tag(query, batch_id, partition)
        published = skipped = 0
        for batch in iterator:
            values = _values(batch)
            stamps = _stamps(batch, self.opts)
            if skipped < skip:
                k = min(skip - skipped, len(values))
                skipped += k
                values = values.slice(k)
                if isinstance(stamps, np.ndarray):
                    stamps = stamps[k:]
            if len(values):
                offer_all(pub, values, self.opts, first_reserved=None if published else tag, stamps=stamps)
                published += len(values)
        return SinkCommit(partition, published, skipped)

    def commit(self, messages, batchId: int) -> None:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        skipped = sum(m.skipped for m in done)
        if skipped:
            log.warning("sulis sink: batch %d re-run: %d rows were already published and were not published again",
                        batchId, skipped)

    def abort(self, messages, batchId: int) -> None:
        log.warning("sulis sink: batch %d aborted; what its tasks published stays in the stream and a re-run "
                    "skips it", batchId)
