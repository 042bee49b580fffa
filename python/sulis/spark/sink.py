"""``df.write.format("sulis")`` and ``df.writeStream.format("sulis")``: publish each row's ``value``.

Rows go out through the Rust core (``sulis._native.SparkSinkTask``: ``sulis_spark::sink_publisher``, the
JVM sink's too) straight from the Arrow ``value`` column (binary or string), no Python object per row;
back pressure is waited out (the GIL released) up to ``messageTimeout``, then the write fails naming the
stream.

Exactly once into a recorded stream (the streaming sink)
--------------------------------------------------------
``sulis_spark::exactly_once_target`` and ``sink_journal`` (Rust). Each task publishes through an
``ExclusivePublication`` of its own, so what it writes lands, in order and uninterrupted, in one
recording; every attempt of a task writes what it does into the sink's *journal*: a claim naming its
session and start position, once no other attempt of its (batch, partition, target) is unfinished the
rows that earlier attempts published (which it skips, after checking them against its own leading rows
by checksum), and when its rows are recorded how many it published. Reserved values are left to the
user (``stampTimestamp``). See docs/spark.md for what this promises and its limits.

Where rows go
-------------
The ``channel`` and ``streamId`` options, or, where an option is not set, each row's ``channel``
(string) and ``stream_id`` (integer) columns, as Kafka's sink takes its ``topic`` option or
column (the option wins, so a frame read from ``format("sulis")``, which has a ``stream_id``
column, goes to the option's stream). A task publishes each target's rows in their order, and
the exactly-once bookkeeping (claims, runs, checks) is per target.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from .errors import OptionError, RowError, SinkError
from .options import WriterOptions

__all__ = ["SulisBatchWriter", "SulisStreamWriter"]

log = logging.getLogger("sulis.spark")

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task did: rows published, rows skipped (published by an earlier attempt)."""

    partition: int
    published: int
    skipped: int


def _check_schema(schema: StructType, opts: WriterOptions) -> None:
    """The frame must have a binary or string ``value``, and say where each row goes: by option, or by a
    ``channel`` (string) / ``stream_id`` (integer) column where the option is not set
    (``sulis_spark::sink_columns``, the JVM sink's rules too)."""
    from .. import _native

    _native.spark_check_sink_columns([(f.name, f.dataType.simpleString()) for f in schema.fields],
                                     opts.channel is not None, opts.stream_id is not None, opts.stamp_timestamp)


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
        # The source reads a reserved value that is not positive as "no stamp" (null): such a stamp would
        # come back as null, silently. Refused instead.
        from .. import _native

        row = int(before_1970[0])
        raise OptionError(_native.spark_sink_row_error("stamp", row, int(stamps[row]) // 1000))
    return stamps


# -- publishing ---------------------------------------------------------------------------------

#: Where rows go: (channel, stream id).
Target = tuple[str, int]


def routes(batch: pa.RecordBatch, opts: WriterOptions) -> Iterator[tuple[Target, pa.Array, np.ndarray | int | None]]:
    """The batch's values (and ``stampTimestamp`` stamps) per target, each target's rows in their order."""
    from .. import _native

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
            raise RowError(_native.spark_sink_row_error("null_channel", _first_null(col), 0))
        encoded = pc.dictionary_encode(col)
        channels = encoded.dictionary.to_pylist()
        channel_codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    streams = np.full(n, opts.stream_id if opts.stream_id is not None else 0, np.int64)
    if by_stream:
        col = batch.column("stream_id")
        if col.null_count:
            raise RowError(_native.spark_sink_row_error("null_stream", _first_null(col), 0))
        streams = col.to_numpy(zero_copy_only=False).astype(np.int64)
        bad = np.flatnonzero((streams < -(1 << 31)) | (streams >= 1 << 31))
        if len(bad):
            raise RowError(_native.spark_sink_row_error("bad_stream", int(bad[0]), int(streams[bad[0]])))
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


def publish(task, iterator: Iterator[pa.RecordBatch], opts: WriterOptions) -> tuple[int, int]:
    """Every row of the batches through the Rust core's ``task`` (``sulis._native.SparkSinkTask``), target by
    target; ``(published, skipped)``. After a failure the task tells the journal how it ended."""
    try:
        for batch in iterator:
            for (channel, stream_id), values, stamps in routes(batch, opts):
                task.write(channel, stream_id, values, stamps)
        return task.finish()
    except BaseException as e:
        task.fail(f"{type(e).__name__}: {e}")
        raise
    finally:
        for note in task.drain_notes():
            log.warning("%s", note)


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

        from .. import _native

        published, _ = publish(_native.SparkSinkTask(list(self.opts.raw)), iterator, self.opts)
        ctx = TaskContext.get()
        return SinkCommit(ctx.partitionId() if ctx else 0, published, 0)



# -- exactly once ------------------------------------------------------------------------------

_recorded_journals: set[tuple] = set()


def ensure_journal_recorded(opts: WriterOptions) -> None:
    """The archive records the journal stream: started here (on the Spark driver, when the query starts)
    unless something already records it."""
    from .. import _native

    key = (opts.archive, *opts.journal)
    if key not in _recorded_journals:
        _native.spark_sink_record_journal(list(opts.raw))
        _recorded_journals.add(key)


class SulisStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("sulis")``: exactly once into the recorded stream (see the module doc);
    ``exactlyOnce=false`` publishes through a shared publication (at least once)."""

    def __init__(self, opts: WriterOptions, schema: StructType) -> None:
        _check_schema(schema, opts)
        self.opts = opts
        if opts.exactly_once:  # on the Spark driver: at the query's start and for each commit (cached)
            ensure_journal_recorded(opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        opts = self.opts
        from .. import _native

        if not opts.exactly_once:
            published, _ = publish(_native.SparkSinkTask(list(opts.raw)), iterator, opts)
            return SinkCommit(partition, published, 0)
        raw_batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None
        if ctx is None or raw_batch is None or not query_id:
            raise SinkError("sulis sink: no streaming batch id or query id in the task (exactly-once needs them)")
        # A fixed target is claimed at once, even with no rows: a re-run with fewer fails.
        task = _native.SparkSinkTask(list(opts.raw), query_id, int(raw_batch), partition, ctx.taskAttemptId())
        published, skipped = publish(task, iterator, opts)
        return SinkCommit(partition, published, skipped)

    def commit(self, messages, batchId: int) -> None:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        skipped = sum(m.skipped for m in done)
        if skipped:
            log.warning("sulis sink: batch %d re-run: %d rows were already published and were not published again",
                        batchId, skipped)

    def abort(self, messages, batchId: int) -> None:
        log.warning("sulis sink: batch %d aborted; what its tasks published stays in the stream, and the journal "
                    "says what: a re-run skips it", batchId)
