"""``df.write.format("sulis")`` and ``df.writeStream.format("sulis")``: publish each row's ``value``.

Rows go out with ``Publication.offer_batch`` straight from the Arrow ``value`` column (binary or
string), no Python object per row; back pressure is waited out and the rest offered again.

Exactly once into a recorded stream (the streaming sink)
--------------------------------------------------------
Each executor process publishes through its own ``ExclusivePublication``, so what a process writes
lands, in order and uninterrupted, in one recording of its own, one task at a time. Every attempt of
a task writes what it does into the sink's *journal* (``journal.py``): a claim naming its session and
start position, once no other attempt of its (batch, partition, target) is unfinished the rows that
earlier attempts published (which it skips, after checking them against its own leading rows by
checksum), and when its rows are recorded how many it published. Reserved values are left to the
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
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from .errors import OptionError, RowError, SinkError, SinkTimeoutError
from .journal import Attempt, Checksum, Entry, Journal, attempt_name, attempts, later_claim
from .options import ArchiveAddress, WriterOptions
from .recordings import info_of, recordings_of_stream, stream_key
from .replay import RecordingRange, read_range, session

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
            raise SinkError(f"sulis sink: cannot publish on channel {target[0]!r} stream {target[1]}: {e}") from e
        _publications[key] = pub
        return pub


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


def _await(target: Target, opts: WriterOptions, result: int, stuck_since: float) -> None:
    """Waits a little after a refused offer; fails when it has lasted ``message_timeout``."""
    from .. import CLOSED, MAX_POSITION_EXCEEDED, NOT_CONNECTED, _native, result_name

    channel, stream_id = target
    if result in (CLOSED, MAX_POSITION_EXCEEDED):
        raise SinkError(_native.spark_sink_offer_error("ended", channel, stream_id, result_name(result), 0.0))
    if time.monotonic() - stuck_since > opts.archive.message_timeout:
        raise SinkTimeoutError(_native.spark_sink_offer_error("refused", channel, stream_id, result_name(result),
                                                              opts.archive.message_timeout))
    time.sleep(0.0001 if result != NOT_CONNECTED else 0.005)


def offer_all(pub, target: Target, values: pa.Array, opts: WriterOptions,
              stamps: np.ndarray | int | None = None) -> None:
    """Publishes every value on ``pub`` (``target``'s), with ``stamps`` (one int64 per value, or one int
    for all) as their reserved values, if given."""
    n = len(values)
    i = 0
    stuck_since = time.monotonic()
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



# -- exactly once: the journal ------------------------------------------------------------------


_journals: dict[tuple, Journal] = {}
_recorded_journals: set[tuple] = set()


def _journal(opts: WriterOptions) -> Journal:
    """This process' view of the sink's journal."""
    channel, stream_id = opts.journal
    assert channel is not None
    key = (opts.archive, channel, stream_id, opts.replay)
    with _publications_lock:
        j = _journals.get(key)
        if j is None:
            j = _journals[key] = Journal(opts.archive, channel, stream_id, opts.replay)
        return j


def ensure_journal_recorded(opts: WriterOptions) -> None:
    """The archive records the journal stream: started here (on the Spark driver, when the query starts)
    unless something already records it."""
    channel, stream_id = opts.journal
    assert channel is not None
    key = (opts.archive, channel, stream_id)
    if key in _recorded_journals:
        return
    ac = session(opts.archive).archive
    media = channel.split("?", 1)[0]

    def recorded() -> bool:
        return any(stream_key(c, sid) == stream_key(channel, stream_id)
                   for _, sid, c in ac.list_recording_subscriptions(channel=media, stream_id=stream_id))

    if not recorded():
        try:
            ac.start_recording(channel, stream_id, source="local" if media == "aeron:ipc" else "remote")
            log.info("sulis sink: recording the sink's journal %s stream %d", channel, stream_id)
        except Exception as e:
            if not recorded():  # not another query starting it at the same time
                raise SinkError(f"sulis sink: cannot record the sink's journal ({channel} stream {stream_id}) "
                                   f"on {opts.archive.describe()}: {e}") from e
    _recorded_journals.add(key)


def _session_recordings(address: ArchiveAddress, target: Target, session_id: int):
    """The recordings of ``target``'s stream made of session ``session_id``, by start position."""
    s = session(address)
    found = [info_of(s, d) for d in recordings_of_stream(s, *target) if d.session_id == session_id]
    return sorted(found, key=lambda r: r.start)


def _covered(recordings, session_id: int, start: int, end: int | None, what: str):
    """``(recording, lo, hi)`` pieces holding positions ``start`` to ``end`` (None: to what is recorded) of
    a session; fails naming the positions a gap between its recordings left unrecorded."""
    pieces, pos = [], start
    for r in recordings:
        if r.end <= pos:
            continue
        if end is not None and pos >= end:
            break
        if r.start > pos:
            raise SinkError(
                f"sulis sink: {what}: positions {pos} to {r.start} of session {session_id} were published but not "
                f"recorded (the session's recording stopped and recording {r.recording_id} starts at {r.start}): "
                "those rows are not in the recorded stream, and which rows they were cannot be told")
        hi = r.end if end is None else min(r.end, end)
        pieces.append((r, pos, hi))
        pos = hi
    if end is not None and pos < end:
        raise SinkError(f"sulis sink: {what}: positions {pos} to {end} of session {session_id} are not recorded")
    return pieces


def _finished(address: ArchiveAddress, target: Target, a: Attempt, entries) -> bool:
    """Whether attempt ``a`` can publish no more: it said it was done, its process went on to another
    claim, or its session is no longer recorded (its process died)."""
    if a.done is not None or later_claim(entries, a) is not None:
        return True
    return not any(r.live for r in _session_recordings(address, target, a.claim.session))


def _published(opts: WriterOptions, target: Target, a: Attempt, entries) -> tuple[int, int, str, str] | None:
    """``(skip, count, crc, name)`` of what attempt ``a`` (finished) published; read back from its session's
    recordings when it died before saying."""
    if a.run is None:
        return None  # a run entry is recorded before any row
    if a.done is not None:
        return a.done.skip, a.done.count, a.done.crc, a.name
    nxt = later_claim(entries, a)
    check = Checksum()
    recordings = _session_recordings(opts.archive, target, a.claim.session)
    what = f"attempt {a.name} of batch {a.claim.batch} partition {a.claim.partition} (died publishing)"
    for r, lo, hi in _covered(recordings, a.claim.session, a.claim.start, nxt.start if nxt else None, what):
        if hi > lo:
            rng = RecordingRange(r.recording_id, r.stream_id, r.session_id, lo, hi, lo, hi)
            for b in read_range(opts.archive, rng, *opts.replay):
                check.update(b.column(0))
    return a.run.skip, check.count, check.value, a.name


class _TaskTarget:
    """One target of one exactly-once sink task: its claim, what earlier attempts published (and so what
    it skips, checked), what it publishes, and its journal entries (``journal.py``)."""

    def __init__(self, opts: WriterOptions, target: Target, query: str, batch: int, partition: int,
                 task_attempt_id: int) -> None:
        self.opts, self.target = opts, target
        self.query, self.batch, self.partition, self.task_attempt_id = query, batch, partition, task_attempt_id
        self.key = stream_key(*target) or f"{target[0]}#{target[1]}"
        self.journal = _journal(opts)
        self.timeout = max(30.0, 3 * opts.archive.message_timeout)
        self.where = f"batch {batch} partition {partition} to {target[0]} stream {target[1]}"
        self.claim: Entry | None = None
        self.skip = 0
        self.expected: list[tuple[int, int, str, str]] = []  # (from row, to row, crc, attempt)
        self.seen = 0  # leading rows taken (skipped and checked)
        self.check = Checksum()
        self.published = Checksum()
        self.run_written = False
        self.done = False

    def _entry(self, kind: str, **fields) -> Entry:
        assert self.claim is not None
        return Entry(kind, self.query, self.batch, self.partition, self.key, self.claim.attempt, **fields)

    def open(self) -> None:
        """Claims the (batch, partition, target), standing back while another attempt is at it, and
        learns what earlier attempts published."""
        opts, journal = self.opts, self.journal
        self.pub = _publication(opts.archive, self.target, True)
        self.jpub = _publication(opts.archive, (journal.channel, journal.stream_id), False)
        deadline = time.monotonic() + self.timeout
        # Claimed only once the session is recorded: a session with no live recording is taken as ended.
        journal.await_recorded(self.pub.session_id, self.pub.position, deadline, "the sink's publication",
                               channel=self.target[0], stream_id=self.target[1])
        seq = 0
        while True:
            name = attempt_name(self.task_attempt_id, seq)
            self.claim = Entry("claim", self.query, self.batch, self.partition, self.key, name,
                               session=self.pub.session_id, start=self.pub.position)
            journal.append(self.jpub, self.claim, max(1.0, deadline - time.monotonic()))
            entries = journal.entries(self.query, self.batch)
            others = [a for a in attempts(entries, self.query, self.batch, self.partition, self.key).values()
                      if a.name != name]
            waiting = {a.name for a in others if not _finished(opts.archive, self.target, a, entries)}
            if not waiting:
                break
            journal.append(self.jpub, self._entry("done", why="withdrawn"), max(1.0, deadline - time.monotonic()))
            log.warning("sulis sink: %s: attempt %s waits for %s", self.where, name, sorted(waiting))
            while waiting:
                if time.monotonic() > deadline:
                    self.done = True
                    raise SinkTimeoutError(
                        f"sulis sink: {self.where}: another attempt of it ({', '.join(sorted(waiting))}) is still "
                        f"publishing after {self.timeout:.0f}s; this one does not publish beside it (a task of an "
                        "earlier stage attempt still running, or speculative execution: turn it off)")
                time.sleep(0.1)
                entries = journal.entries(self.query, self.batch)
                now = attempts(entries, self.query, self.batch, self.partition, self.key)
                waiting = {n for n in waiting if not _finished(opts.archive, self.target, now[n], entries)}
            time.sleep(random.uniform(0.0, 0.2))  # two attempts that stood back for each other: not in step
            seq += 1
        runs = sorted(p for a in others if (p := _published(opts, self.target, a, entries)) and p[1] > 0)
        pos = 0
        for skip, count, _crc, name in runs:
            if skip != pos:
                how = "published twice" if skip < pos else "never published"
                raise SinkError(f"sulis sink: {self.where}: the journal says attempt {name} published rows "
                                   f"{skip} to {skip + count}, but earlier attempts end at row {pos}: rows were "
                                   f"{how} (journal {journal.channel} stream {journal.stream_id})")
            pos += count
        self.skip = pos
        self.expected = [(skip, skip + count, crc, name) for skip, count, crc, name in runs]
        if self.skip:
            log.warning("sulis sink: %s: earlier attempts published %d rows; this attempt checks and skips them",
                        self.where, self.skip)

    def take(self, values: pa.Array, stamps):
        """``values`` less the leading rows earlier attempts published, which are checked against theirs."""
        i, n = 0, len(values)
        while i < n and self.seen < self.skip:
            lo, hi, crc, name = self.expected[0]
            k = min(n - i, hi - self.seen)
            self.check.update(values.slice(i, k))
            self.seen += k
            i += k
            if self.seen == hi:
                if self.check.value != crc:
                    raise SinkError(
                        f"sulis sink: {self.where}: rows {lo} to {hi} of this re-run differ from the rows attempt "
                        f"{name} published (checksum {self.check.value}, published {crc}): the re-run gives other "
                        "rows or another order (a shuffle without a sort, minPartitions or the plan changed across "
                        "a restart); nothing of it was published again. Make the rows per partition deterministic "
                        "(sortWithinPartitions) or write to a new stream")
                self.expected.pop(0)
                self.check = Checksum()
        if i == 0:
            return values, stamps
        return values.slice(i), (stamps[i:] if isinstance(stamps, np.ndarray) else stamps)

    def publish(self, values: pa.Array, stamps) -> None:
        if not self.run_written:
            self.journal.append(self.jpub, self._entry("run", skip=self.skip), self.timeout)
            self.run_written = True
        offer_all(self.pub, self.target, values, self.opts, stamps=stamps)
        self.published.update(values)

    def close(self) -> None:
        """After the last row: its rows recorded, whole, and the journal told."""
        assert self.claim is not None
        if self.seen < self.skip:
            raise SinkError(f"sulis sink: {self.where}: earlier attempts published {self.skip} rows, but this "
                               f"re-run has only {self.seen}: its rows differ (the plan or the input changed across "
                               "a restart); nothing of it was published again")
        end = self.pub.position
        if self.run_written:
            self._await_whole(end, time.monotonic() + self.timeout)
        self._done(end)

    def _await_whole(self, end: int, deadline: float) -> None:
        assert self.claim is not None
        self.journal.await_recorded(self.pub.session_id, end, deadline, f"the sink's rows of {self.where}",
                                    channel=self.target[0], stream_id=self.target[1])
        recordings = _session_recordings(self.opts.archive, self.target, self.pub.session_id)
        _covered(recordings, self.pub.session_id, self.claim.start, end, f"{self.where} (attempt {self.claim.attempt})")

    def _done(self, end: int, why: str = "") -> None:
        self.journal.append(self.jpub, self._entry("done", skip=self.skip, count=self.published.count,
                                                   crc=self.published.value, end=end, why=why), self.timeout)
        self.done = True

    def fail(self, error: BaseException) -> None:
        """After an error: says so in the journal where it can tell what was recorded, so a re-run need not
        wait for this process to end; else the re-run reads back what was recorded."""
        if self.claim is None or self.done:
            return
        try:
            end = self.pub.position
            if self.run_written:
                self._await_whole(end, time.monotonic() + 2.0)
            self._done(end, why=f"failed: {type(error).__name__}: {str(error)[:200]}")
        except Exception as e:
            log.warning("sulis sink: %s: could not tell the journal how the attempt ended (%s); a re-run reads "
                        "back what was recorded", self.where, e)


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
            raise SinkError("sulis sink: no streaming batch id or query id in the task (exactly-once needs them)")
        batch_id = int(raw_batch)
        states: dict[Target, _TaskTarget] = {}

        def state(target: Target) -> _TaskTarget:
            st = states.get(target)
            if st is None:
                st = states[target] = _TaskTarget(opts, target, query_id, batch_id, partition, ctx.taskAttemptId())
                st.open()
            return st

        try:
            if opts.channel is not None and opts.stream_id is not None:
                state((opts.channel, opts.stream_id))  # claimed even with no rows: a re-run with fewer fails
            for batch in iterator:
                for target, values, stamps in routes(batch, opts):
                    st = state(target)
                    values, stamps = st.take(values, stamps)
                    if len(values):
                        st.publish(values, stamps)
            for st in states.values():
                st.close()
        except BaseException as e:
            for st in states.values():
                st.fail(e)
            raise
        return SinkCommit(partition, sum(st.published.count for st in states.values()),
                          sum(st.skip for st in states.values()))

    def commit(self, messages, batchId: int) -> None:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        skipped = sum(m.skipped for m in done)
        if skipped:
            log.warning("sulis sink: batch %d re-run: %d rows were already published and were not published again",
                        batchId, skipped)

    def abort(self, messages, batchId: int) -> None:
        log.warning("sulis sink: batch %d aborted; what its tasks published stays in the stream, and the journal "
                    "says what: a re-run skips it", batchId)
