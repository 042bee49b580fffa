"""``format("sulis")``: the PySpark Python data source over sulis archive recordings.

Imports pyspark; ``sulis.spark.register(spark)`` imports this module only when called.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .files import check_archive_dir, read_partition_range
from .options import OptionError, ReaderOptions, parse_reader_options, parse_writer_options
from .recordings import list_selected, plan_ranges, resolve_positions
from .replay import RecordingRange, ddl_for, session

__all__ = ["SulisDataSource", "SulisPartition", "SulisBatchReader"]


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
        infos = list_selected(s, opts)
        starts, ends = resolve_positions(infos, opts)
        ranges = plan_ranges({r.recording_id: r for r in infos}, starts, ends, opts.min_partitions)
        return [SulisPartition(r, archive_id) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)


class SulisDataSource(DataSource):
    """The ``sulis`` format: batch and streaming reads of archive recordings, batch and streaming writes.

    Options are checked when a query starts (``reader``/``streamReader``/``writer``/``streamWriter``
    run on the Spark driver); a bad one fails it with a message naming the option.
    """

    @classmethod
    def name(cls) -> str:
        return "sulis"

    def schema(self) -> str:
        from .options import include_timestamp, value_layout

        return ddl_for(value_layout(self.options), include_timestamp(self.options))

    def reader(self, schema: StructType) -> SulisBatchReader:
        return SulisBatchReader(parse_reader_options(self.options))

    def streamReader(self, schema: StructType):
        from pyspark.errors import PySparkNotImplementedError

        from .stream_reader import SulisStreamReader

        opts = parse_reader_options(self.options, streaming=True)
        if opts.low_latency:
            # Spark then asks simpleStreamReader (its documented fallback).
            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED",
                                             messageParameters={"feature": "streamReader with lowLatency=true"})
        return SulisStreamReader(opts)

    def simpleStreamReader(self, schema: StructType):
        from .stream_reader import SulisLowLatencyReader

        return SulisLowLatencyReader(parse_reader_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from .sink import SulisBatchWriter

        if overwrite:
            # As Kafka's sink: a recorded stream only grows.
            raise OptionError("mode('overwrite') is not allowed for the sulis sink: a recorded stream is "
                              "append-only; use mode('append') (Spark's Kafka sink refuses it the same way)")

        return SulisBatchWriter(parse_writer_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .sink import SulisStreamWriter

        return SulisStreamWriter(parse_writer_options(self.options), schema)
