"""``spark.readStream.format("sulis")``: recordings as an unbounded source, positions as offsets.

An offset is a JSON object ``{"<recording id>": position, ...}`` with the ids in numeric order
(Spark compares offsets as strings, so the order must be stable). A micro-batch reads, per
recording, the messages whose end position lies in ``(start, end]`` (see ``replay.py``).
Recordings of the channel and stream that start later join the offsets at their start
position, as new Kafka partitions do.

Offsets carry only the recordings that can still advance or have unread data: one stopped and
read to its stop leaves the offsets (but for the stream's newest recording, the one a user would
extend), which then say only that every recording below an id that they leave out was read to its
stop (``Finished``), so a stream whose publishers come and go does not grow its offsets, and
Spark's offset log, by a recording per session. A recording that left is extended (Aeron's
``extendRecording``) at the position it stopped: the reader, which saw where that was, puts it
back at that position and reads on. A query restarted on its checkpoint no longer knows where:
it tells an extension by the recording being live again or stopped later than the offsets say,
and fails (``failOnDataLoss``) naming it rather than guess.

Where this runs: one long-lived Python process on the Spark driver holds the reader
(``initialOffset``, ``latestOffset``, ``partitions``, ``commit``); ``read`` runs in executors on
a copy, with everything it needs inside the partition.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition, SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from .. import _native
from .batch_reader import SulisPartition, read_partition
from .errors import ArchiveUnavailableError, DataLossError, OptionError
from .files import check_archive_dir
from .options import ReaderOptions
from .recordings import (
    RecordingInfo,
    check_data_loss,
    committed,
    describe,
    list_selected,
    plan_ranges,
    resolve_positions,
)
from .replay import RecordingRange, drop_session, read_range, session

__all__ = ["SulisStreamReader", "SulisLowLatencyReader", "to_offset", "from_offset"]

log = logging.getLogger("sulis.spark")

#: Re-list the selected recordings (to find new ones) at most this often; in between,
#: ``latestOffset`` asks only for the live recordings' positions.
LIST_INTERVAL_S = 0.5
#: Ask for the live recordings' positions at most this often, however often Spark calls
#: ``latestOffset`` (about 100 times a second when idle): the archive serves many queries.
POSITION_INTERVAL_S = 0.1
#: Bytes sampled at a recording's start to estimate its framed message length (for row limits).
SAMPLE_BYTES = 64 * 1024
FRAME_ALIGNMENT = 32


@dataclasses.dataclass(frozen=True)
class Finished:
    """What an offset says of the recordings it leaves out: every selected recording with an id below
    ``below`` that it has no position for was stopped, read to its stop, and stopped no later than
    ``stopped_by`` (the archive's clock, ms)."""

    below: int = 0
    stopped_by: int = -1


def to_offset(positions: dict[int, int], stopped: dict[int, int] | None = None, pieces: int | None = None,
              finished: Finished | None = None) -> dict:
    """The offset JSON object (``sulis_spark::source_offset``: the text both implementations of the source
    write, string keys in numeric order); ``stopped``: the recordings that were stopped, and read to that
    stop position, when it was made; ``pieces``: the partitions of the micro-batch that ends there
    (``minPartitions``); ``finished``: the recordings left out."""
    f = finished or Finished()
    return json.loads(_native.spark_offset_json(positions, stopped, pieces, f.below, f.stopped_by))


def _parse(offset: dict | None) -> tuple[dict[int, int], dict[int, int], int | None, tuple[int, int]]:
    return _native.spark_parse_offset(json.dumps(offset or {}))


def from_offset(offset: dict) -> dict[int, int]:
    """The offset's position per recording."""
    return _parse(offset)[0]


def stopped_of(offset: dict | None) -> dict[int, int]:
    """The offset's recordings read to their stop position (see ``to_offset``)."""
    return _parse(offset)[1]


def finished_of(offset: dict | None) -> Finished:
    """What the offset says of the recordings it leaves out (none, in offsets from before the key)."""
    return Finished(*_parse(offset)[3])


class SulisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader (see the module doc)."""

    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts
        self._infos: dict[int, RecordingInfo] = {}
        self._listed_at = 0.0
        self._positions_at = 0.0
        self._target: dict[int, int] | None = None  # Trigger.AvailableNow: where to stop
        self._frame_len: dict[int, float] = {}  # estimated bytes per message, per recording
        self._last_batch_at = time.monotonic()
        self._dir_checked = False  # archiveDir compared with the archive's id (first partitions call)
        self._missing: list[int] = []  # selected by id, unknown to the archive (purged?)
        # The position each recording this process left out of the offsets was read to (its stop then).
        self._read_to: dict[int, int] = {}

    @contextmanager
    def _archive_call(self, what: str) -> Iterator[None]:
        """Names the archive and what is read in any failure to reach it (the archive died, say),
        and drops this process' session with it: a session to a dead archive times out forever,
        and a restarted one does not know it, so the next call reconnects."""
        try:
            yield
        except (OptionError, DataLossError):
            raise
        except Exception as e:
            drop_session(self.opts.archive)
            raise ArchiveUnavailableError(f"{self.opts.archive.describe()}: {what} of {self.opts.selection()} "
                                          f"failed: {e}") from e

    # -- what the archive holds now ------------------------------------------------------------

    def _refresh(self, force: bool = False) -> dict[int, RecordingInfo]:
        """Current positions of the selected recordings: a full listing every ``LIST_INTERVAL_S``,
        else one position request per live recording (``latestOffset`` runs ~100 times a second)."""
        s = session(self.opts.archive)
        now = time.monotonic()
        if force or now - self._listed_at >= LIST_INTERVAL_S or not self._infos:
            self._missing = []
            self._infos = {r.recording_id: r for r in list_selected(s, self.opts, self._missing)}
            self._listed_at = now
            self._positions_at = now
            return self._infos
        if now - self._positions_at < POSITION_INTERVAL_S:
            return self._infos
        self._positions_at = now
        for rid, r in list(self._infos.items()):
            if not r.live:
                continue
            pos = s.archive.get_recording_position(rid)
            if pos < 0:  # stopped since: its descriptor has the stop position
                fresh = describe(s, rid, self.opts)
                if fresh is not None:
                    self._infos[rid] = fresh
            else:  # a cluster log's readable end moves with its commit position too
                self._infos[rid] = committed(dataclasses.replace(r, end=pos, live=True, recorded=-1), self.opts)
        return self._infos

    def _check_gone_and_truncated(self, begin: dict[int, int], stopped: dict[int, int],
                                  infos: dict[int, RecordingInfo]) -> dict[int, int]:
        """Recordings of the offset ``begin`` that are gone from the archive, or were truncated below
        the position read to. Kafka's source fails the same way when partitions are gone or an offset is
        out of range: ``DataLossError`` naming each, or with ``failOnDataLoss=false`` a warning, and
        the offset goes on without them (gone) or from the new stop position (truncated). A recording
        the offset says was stopped and read to its stop (``stopped``) lost nothing when it goes: it
        just leaves the offset. Returns ``begin`` as the next offset starts."""
        o = self.opts
        lost: list[str] = []
        next_begin = dict(begin)
        for rid, at in begin.items():
            r = infos.get(rid)
            if r is None:
                stop = stopped.get(rid)
                if stop is not None and at >= stop:
                    log.info("recording %d, read to its stop position %d, is no longer in %s: dropped from the "
                             "offsets", rid, stop, o.archive.describe())
                    next_begin.pop(rid)
                    continue
                lost.append(f"recording {rid} is no longer in {o.archive.describe()} (purged?); this query had "
                            f"read it to position {at}, not known to be its end: what followed was never read")
                next_begin.pop(rid)
            elif r.recorded_end < at:
                lost.append(f"recording {rid} was truncated to position {r.end}, below position {at} this query "
                            f"had read to: whatever is recorded from {r.end} on again would be missed")
                next_begin[rid] = r.end
        if lost:
            text = "; ".join(lost)
            if o.fail_on_data_loss:
                raise DataLossError(text + "; failOnDataLoss=true (set it to false to skip them)")
            log.warning("%s; skipped (failOnDataLoss=false)", text)
        return next_begin

    def _info_now(self, rid: int) -> RecordingInfo | None:
        """The recording as the archive describes it now (its start moves when data is purged);
        None when it is gone and ``failOnDataLoss=false``."""
        fresh = describe(session(self.opts.archive), rid, self.opts)
        if fresh is None:
            text = f"recording {rid} is no longer in {self.opts.archive.describe()} (purged?)"
            if self.opts.fail_on_data_loss:
                raise DataLossError(text + "; failOnDataLoss=true (set it to false to skip it)")
            log.warning("%s; skipped (failOnDataLoss=false)", text)
            self._infos.pop(rid, None)
            return None
        self._infos[rid] = fresh
        return fresh

    # -- the DataSourceStreamReader API ---------------------------------------------------------

    def initialOffset(self) -> dict:
        with self._archive_call("finding the starting positions"):
            infos = list(self._refresh(force=True).values())
            if self._missing:
                raise OptionError(f"option recordingIds: recording {self._missing[0]} is unknown to "
                                  f"{self.opts.archive.describe()} (never recorded there, or purged)")
            starts, _ = resolve_positions(infos, self.opts, streaming=True)
            starts, finished = self._leave_out_finished(starts, dict(starts), self._infos, Finished())
            return to_offset(starts, finished=finished)

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.opts
        if o.min_messages_per_trigger is not None:
            return ReadMinRows(o.min_messages_per_trigger)
        if o.max_messages_per_trigger is not None:
            return ReadMaxRows(o.max_messages_per_trigger)
        if o.max_bytes_per_trigger is not None:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with self._archive_call("snapshotting the recorded positions"):
            self._target = {rid: r.end for rid, r in self._refresh(force=True).items()}

    def reportLatestOffset(self) -> dict | None:
        if not self._infos:
            return None
        return to_offset({rid: r.end for rid, r in self._infos.items()
                          if r.live or self._read_to.get(rid, -1) != r.end})

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        with self._archive_call("asking for the recorded positions"):
            infos = self._refresh()
            begin = from_offset(start) if start else {}
            finished = finished_of(start)
            if any(rid not in infos or infos[rid].recorded_end < at for rid, at in begin.items()):
                # Gone from the listing, or moved back: ask again before calling it data loss.
                infos = self._refresh(force=True)
                begin = self._check_gone_and_truncated(begin, stopped_of(start), infos)
            extended = self._extended(begin, finished, infos)
            begin.update(extended)
            for rid, r in infos.items():
                if rid not in begin and rid >= finished.below:
                    begin[rid] = r.start  # a new recording: from its start
            ends = {rid: max(at, infos[rid].end) for rid, at in begin.items()}
            # An extended recording comes back where it was read to; it is read on from the next micro-batch
            # (``partitions`` cannot tell from ``start`` where that was).
            ends.update(extended)
            if self._target is not None:  # Trigger.AvailableNow: nothing past the snapshot
                ends = {rid: max(begin[rid], min(e, self._target.get(rid, begin[rid]))) for rid, e in ends.items()}
            limited = self._limit(begin, ends, limit)
            if limited is None:
                return start
            ends = limited
            if any(ends[rid] > begin[rid] for rid in ends):
                self._last_batch_at = time.monotonic()
            ends, finished = self._leave_out_finished(begin, ends, infos, finished)
            return to_offset(ends, self._stopped_marks(ends, infos), self.opts.min_partitions, finished)

    def _extended(self, begin: dict[int, int], finished: Finished, infos: dict[int, RecordingInfo]) -> dict[int, int]:
        """The recordings ``start`` left out as read to their stop that were extended since, each with the
        position to read on from."""
        for rid in [rid for rid in self._read_to if rid not in infos]:
            del self._read_to[rid]  # purged: it was read whole
        extended: dict[int, int] = {}
        for rid, r in infos.items():
            if rid in begin or rid >= finished.below:
                continue
            read_to = self._read_to.get(rid)
            if read_to is None:  # left out before this process ran: the query was restarted on its checkpoint
                if not r.live and 0 <= r.stop_timestamp <= finished.stopped_by:
                    self._read_to[rid] = r.end  # as it was: still stopped where it was read to
                    continue
                now = "recording again" if r.live else f"stopped again at {r.stop_timestamp} ms"
                text = (f"recording {rid} of {self.opts.archive.describe()} was read to its stop and left out of "
                        f"this query's offsets (every recording read to its stop by {finished.stopped_by} ms is), and "
                        f"was extended while the query was not running (it is {now}): the position it was read to "
                        f"is no longer known, so neither is where its unread data begins")
                if self.opts.fail_on_data_loss:
                    raise DataLossError(text + "; failOnDataLoss=true (set it to false to read it on from where it "
                                        f"ends now, {r.end}, skipping what the extension recorded before)")
                log.warning("%s; read on from where it ends now, %d (failOnDataLoss=false)", text, r.end)
                extended[rid] = r.end
            elif r.live or r.end > read_to:
                extended[rid] = read_to  # extended where it stopped: on from there
            elif r.end < read_to:
                self._read_to[rid] = r.end  # truncated below: it had been read whole, nothing lost
        return extended

    def _leave_out_finished(self, begin: dict[int, int], ends: dict[int, int], infos: dict[int, RecordingInfo],
                            finished: Finished) -> tuple[dict[int, int], Finished]:
        """``ends`` without the recordings that were read to their stop by ``begin`` (the micro-batch that
        ends there reads none of them), but for the newest, with what the offset then says of them."""
        newest = max(infos, default=-1)
        stopped_by, left = finished.stopped_by, False
        for rid in list(ends):
            r = infos[rid]
            if rid != newest and not r.live and r.stop_timestamp >= 0 and begin[rid] >= r.end:
                del ends[rid]
                self._read_to[rid] = r.end
                stopped_by, left = max(stopped_by, r.stop_timestamp), True
        if not left and finished.below == 0:
            return ends, finished
        return ends, Finished(max(finished.below, newest + 1), stopped_by)

    @staticmethod
    def _stopped_marks(ends: dict[int, int], infos: dict[int, RecordingInfo]) -> dict[int, int]:
        """The recordings stopped and read to their stop by ``ends``."""
        return {rid: r.end for rid, r in infos.items() if not r.live and ends.get(rid, -1) >= r.end}

    def _limit(self, begin: dict[int, int], ends: dict[int, int], limit: ReadLimit) -> dict[int, int] | None:
        """``ends`` cut down to what ``limit`` admits; None for "not enough yet, no batch" (ReadMinRows)."""
        o = self.opts
        max_bytes: int | None = None
        max_rows: int | None = None
        if isinstance(limit, ReadAllAvailable):
            return ends
        if isinstance(limit, ReadMaxBytes):
            # Spark hands one limit; the other option, if set, caps the batch too.
            max_bytes, max_rows = limit.max_bytes, o.max_messages_per_trigger
        elif isinstance(limit, ReadMaxRows):
            max_rows, max_bytes = limit.max_rows, o.max_bytes_per_trigger
        elif isinstance(limit, ReadMinRows):
            if self._target is None and self._rows(begin, ends) < limit.min_rows and \
                    time.monotonic() - self._last_batch_at < o.max_trigger_delay_s:
                return None
            max_bytes, max_rows = o.max_bytes_per_trigger, o.max_messages_per_trigger
        if max_rows is not None:
            # Positions count bytes, not messages: turn the row budget into bytes per recording with
            # its measured framed message length (an estimate: see docs/spark.md).
            budget_rows = max_rows
            avail = {rid: (ends[rid] - begin[rid]) / self._frame_length(rid) for rid in ends}
            total = sum(avail.values())
            if total > budget_rows:
                share = {rid: avail[rid] * budget_rows / total * self._frame_length(rid) for rid in ends}
                ends = {rid: self._cut(begin[rid], ends[rid], share[rid]) for rid in ends}
        if max_bytes is not None:
            total_bytes = sum(ends[rid] - begin[rid] for rid in ends)
            if total_bytes > max_bytes:
                ends = {rid: self._cut(begin[rid], ends[rid], (ends[rid] - begin[rid]) * max_bytes / total_bytes)
                        for rid in ends}
        return ends

    @classmethod
    def _cut(cls, begin: int, end: int, budget: float) -> int:
        """Where a recording's share of a batch ends: ``budget`` bytes on from ``begin`` (frame-aligned,
        at least one alignment so a batch progresses), never past ``end`` (what is recorded), and nothing
        for a recording with nothing new."""
        if end <= begin:
            return end
        return min(end, begin + cls._align(budget))

    @staticmethod
    def _align(n: float) -> int:
        """A byte budget as a whole number of frames' alignment, at least one (so a batch progresses)."""
        return max(FRAME_ALIGNMENT, int(n) // FRAME_ALIGNMENT * FRAME_ALIGNMENT)

    def _rows(self, begin: dict[int, int], ends: dict[int, int]) -> float:
        return sum((ends[rid] - begin[rid]) / self._frame_length(rid) for rid in ends if ends[rid] > begin[rid])

    def _frame_length(self, rid: int) -> float:
        """Bytes per message in the recording, measured once on its first ``SAMPLE_BYTES``."""
        known = self._frame_len.get(rid)
        if known is not None:
            return known
        r = self._infos.get(rid)
        if r is None or r.end - r.start < FRAME_ALIGNMENT:
            return 64.0  # nothing to measure yet: a small message (header + up to 32 bytes)
        end = min(r.end, r.start + SAMPLE_BYTES)
        count, last = 0, r.start
        sample = RecordingRange(rid, r.stream_id, r.session_id, r.start, end, r.start, r.end)
        for batch in read_range(self.opts.archive, sample, self.opts.replay_channel, self.opts.replay_stream_id):
            count += batch.num_rows
            last = batch.column(4)[-1].as_py()
        length = (last - r.start) / count if count else float(end - r.start)
        if r.end - r.start >= SAMPLE_BYTES or not r.live:
            self._frame_len[rid] = length  # keep it once the sample was full size
        return length

    def partitions(self, start: dict, end: dict) -> list[SulisPartition]:
        with self._archive_call("planning a micro-batch"):
            archive_id = session(self.opts.archive).archive.archive_id
            if not self._dir_checked:
                check_archive_dir(archive_id, self.opts)
                self._dir_checked = True
            begin, stop = from_offset(start) if start else {}, from_offset(end)
            left_out_below = finished_of(start).below
            infos: dict[int, RecordingInfo] = {}
            starts: dict[int, int] = {}
            for rid, e in stop.items():
                s = begin.get(rid)
                if (s is not None and e <= s) or (s is None and rid < left_out_below):
                    continue  # nothing new; or back from ``start``'s left-out recordings, where it was read to
                r = self._info_now(rid)
                if r is None:
                    continue
                if s is None:
                    s = r.start
                s = check_data_loss(r, s, self.opts)
                if e > s:
                    infos[rid], starts[rid] = r, s
            # As the micro-batch was cut when planned first (an offset from before this key: today's option).
            planned = _parse(end)[2]
            pieces = self.opts.min_partitions if planned is None else planned
            if pieces != self.opts.min_partitions:
                log.warning("sulis source: micro-batch ending at %s is cut into %d partitions, as when it was "
                            "planned first (minPartitions is %d now; it applies from the next micro-batch)",
                            end, pieces, self.opts.min_partitions)
            ranges = plan_ranges(infos, starts, {rid: stop[rid] for rid in starts}, pieces)
            return [SulisPartition(r, archive_id) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)

    def commit(self, end: dict) -> None:
        # The archive keeps no consumer positions: the checkpoint's offsets are the only record.
        pass

    def stop(self) -> None:
        drop_session(self.opts.archive)


class SulisLowLatencyReader(SimpleDataSourceStreamReader):
    """``lowLatency=true``: Spark's simple stream reader. Its ``read`` runs in the Spark driver's
    long-lived source process when Spark asks for the latest offset, reads everything recorded
    since ``start`` there (files or replay, as ``readMode`` says) and Spark hands the rows over with
    the plan: a micro-batch runs no executor task and no executor Python worker, which saves
    Spark's ~50 ms per micro-batch of starting a Python data source task. All data passes through
    the one driver process, so this is for streams whose micro-batches that process can read (and
    hold) at once; Spark re-reads by ``readBetweenOffsets`` on an executor after a restart.
    """

    def __init__(self, opts: ReaderOptions) -> None:
        self.inner = SulisStreamReader(opts)

    def initialOffset(self) -> dict:
        return self.inner.initialOffset()

    def read(self, start: dict) -> tuple[Iterator[pa.RecordBatch], dict]:
        end = self.inner.latestOffset(start, ReadAllAvailable())
        # A list, not a generator: Spark keeps the batch until it is committed and copies its iterator.
        return iter(self._batches(start, end)), end

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[pa.RecordBatch]:
        return iter(self._batches(start, end))

    def _batches(self, start: dict, end: dict) -> list[pa.RecordBatch]:
        return [b for p in self.inner.partitions(start, end) for b in self.inner.read(p)]

    def commit(self, end: dict) -> None:
        self.inner.commit(end)
