"""``spark.read.format("sulis")``: the batch reader, and the partition both readers hand executors.

Imports pyspark (its ``InputPartition`` and ``DataSourceReader``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .files import check_archive_dir, read_partition_range
from .options import ReaderOptions
from .recordings import list_selected, plan_ranges, resolve_positions
from .replay import RecordingRange, session

__all__ = ["SulisPartition", "SulisBatchReader", "read_partition"]


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
        opts = self.opts
        s = session(opts.archive)
        archive_id = s.archive.archive_id
        check_archive_dir(archive_id, opts)
        infos = list_selected(s, opts, require_commit=True)
        starts, ends = resolve_positions(infos, opts)
        ranges = plan_ranges({r.recording_id: r for r in infos}, starts, ends, opts.min_partitions)
        return [SulisPartition(r, archive_id) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)
