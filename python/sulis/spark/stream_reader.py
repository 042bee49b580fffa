"""``spark.readStream.format("sulis")``: recordings as an unbounded source, positions as offsets.

An offset is a JSON object ``{"<recording id>": position, ...}`` with the ids in numeric order
(Spark compares offsets as strings, so the order must be stable). A micro-batch reads, per
recording, the messages whose end position lies in ``(start, end]`` (see ``replay.py``).

What a micro-batch reads is planned by ``sulis_spark::StreamPlanner`` (Rust, ``_native.SparkPlanner``),
the one planner both implementations of the source run: new recordings join the offsets at their
start as new Kafka partitions do, recordings read to their stop leave them (``Finished``), an
extended one is read on from where it stopped, a purged or truncated one is data loss
(``failOnDataLoss``), and row and byte limits cut the batch. This module adapts it to PySpark's
``DataSourceStreamReader``.

Where this runs: one long-lived Python process on the Spark driver holds the reader
(``initialOffset``, ``latestOffset``, ``partitions``, ``commit``); ``read`` runs in executors on
a copy, with everything it needs inside the partition.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator

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
from .options import ReaderOptions
from .replay import RecordingRange

__all__ = ["SulisStreamReader", "SulisLowLatencyReader", "to_offset", "from_offset"]

log = logging.getLogger("sulis.spark")

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


_LIMITS = {"min_rows": ReadMinRows, "max_rows": ReadMaxRows, "max_bytes": ReadMaxBytes}


def _limit_args(limit: ReadLimit) -> tuple[str, int]:
    if isinstance(limit, ReadMaxBytes):
        return "max_bytes", limit.max_bytes
    if isinstance(limit, ReadMaxRows):
        return "max_rows", limit.max_rows
    if isinstance(limit, ReadMinRows):
        return "min_rows", limit.min_rows
    return "all", 0


class SulisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader (see the module doc)."""

    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts
        self._planner: _native.SparkPlanner | None = None
        self._dir_checked = False  # archiveDir compared with the archive's id (first partitions call)

    def __getstate__(self) -> dict:
        # Executors get a copy for ``read``: the planner (an archive session) stays on the driver.
        return {**self.__dict__, "_planner": None}

    def _p(self) -> _native.SparkPlanner:
        if self._planner is None:
            self._planner = _native.SparkPlanner(list(self.opts.raw), True)
        return self._planner

    def _logged(self, value):
        for level, text in self._p().drain_log():
            (log.warning if level == "warning" else log.info)("%s", text)
        return value

    def initialOffset(self) -> dict:
        try:
            return json.loads(self._p().initial_offset())
        finally:
            self._logged(None)

    def getDefaultReadLimit(self) -> ReadLimit:
        kind, n = self._p().default_read_limit()
        return _LIMITS[kind](n) if kind in _LIMITS else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._p().prepare_for_trigger_available_now()

    def reportLatestOffset(self) -> dict | None:
        text = self._p().report_latest_offset()
        return None if text is None else json.loads(text)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        try:
            text = self._p().latest_offset(json.dumps(start) if start else None, *_limit_args(limit))
        finally:
            self._logged(None)
        return start if text is None else json.loads(text)

    def partitions(self, start: dict, end: dict) -> list[SulisPartition]:
        p = self._p()
        archive_id = p.archive_id()
        if not self._dir_checked:
            p.check_archive_dir(archive_id)
            self._dir_checked = True
        try:
            ranges = p.ranges(json.dumps(start) if start else None, json.dumps(end))
        finally:
            self._logged(None)
        return [SulisPartition(RecordingRange(*t), archive_id) for t in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)

    def commit(self, end: dict) -> None:
        # The checkpoint's offsets are the only record of where the query is; the archive's retention
        # spares what the next batch reads from here (the query's retention hold, ``retentionHold``).
        try:
            self._p().commit(json.dumps(end))
        finally:
            self._logged(None)

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.stop()
            self._planner.close()


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
