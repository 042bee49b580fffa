"""``spark.read.format("sulis")``: the batch reader, and the partition both readers hand executors.

Imports pyspark (its ``InputPartition`` and ``DataSourceReader``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .files import read_partition_range
from .options import ReaderOptions
from .replay import RecordingRange

__all__ = ["SulisPartition", "SulisBatchReader", "read_partition"]

log = logging.getLogger("sulis.spark")


class SulisPartition(InputPartition):
    """One Spark task: a position range of one recording (``value`` is a ``RecordingRange``) of the
    archive with id ``archive_id``."""

    def __init__(self, value: RecordingRange, archive_id: int | None = None) -> None:
        super().__init__(value)
        self.archive_id = archive_id

    def __repr__(self) -> str:
        r = self.value
        return f"SulisPartition(recording {r.recording_id} ({r.start}, {r.end}])"


def read_partition(opts: ReaderOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Runs in an executor's Python worker: reads the partition's range (replay or segment files,
    as ``readMode`` says), yields Arrow batches."""
    if partition is None or partition.value is None:
        return  # nothing to read: Spark plans one partition of its own when given none
    yield from read_partition_range(opts, partition.value, getattr(partition, "archive_id", None))


class SulisBatchReader(DataSourceReader):
    """``spark.read.format("sulis")``: the selected recordings between two positions, once."""

    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[SulisPartition]:
        from .. import _native

        planner = _native.SparkPlanner(list(self.opts.raw), False)
        try:
            archive_id = planner.archive_id()
            planner.check_archive_dir(archive_id)
            try:
                ranges = planner.batch_ranges()
            finally:
                for level, text in planner.drain_log():
                    (log.warning if level == "warning" else log.info)("%s", text)
        finally:
            planner.close()
        return [SulisPartition(RecordingRange(*t), archive_id) for t in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)
