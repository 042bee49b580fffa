"""``format("sulis")``: the PySpark Python data source over sulis archive recordings.

Imports pyspark; ``sulis.spark.register(spark)`` imports this module only when called. The readers
and the sink are in ``batch_reader``, ``stream_reader`` and ``sink``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .batch_reader import SulisBatchReader, SulisPartition
from .errors import OptionError
from .options import parse_reader_options, parse_writer_options
from .replay import ddl_for

__all__ = ["SulisDataSource", "SulisPythonDataSource", "SulisPartition", "SulisBatchReader"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _said_plainly(method: _F) -> _F:
    """Spark puts the worker's whole traceback into its ``AnalysisException``; a bad option is the user's
    mistake, not ours, so it is raised afresh here: one frame above the ``OptionError`` line, not the
    parsing code's."""

    @functools.wraps(method)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except OptionError as e:
            raise OptionError(str(e)) from None

    return checked  # type: ignore[return-value]


class SulisDataSource(DataSource):
    """The ``sulis`` format: batch and streaming reads of archive recordings (or of a cluster member's committed
    log, ``clusterDir``), batch and streaming writes.

    Options are checked when a query starts (``reader``/``streamReader``/``writer``/``streamWriter``
    run on the Spark driver); a bad one fails it with a message naming the option.
    """

    @classmethod
    def name(cls) -> str:
        return "sulis"

    @_said_plainly
    def schema(self) -> str:
        opts = parse_reader_options(self.options)
        cluster = opts.cluster_dir is not None
        return ddl_for(opts.value_schema, opts.include_timestamp, cluster)

    @_said_plainly
    def reader(self, schema: StructType) -> SulisBatchReader:
        return SulisBatchReader(parse_reader_options(self.options))

    @_said_plainly
    def streamReader(self, schema: StructType):
        from pyspark.errors import PySparkNotImplementedError

        from .stream_reader import SulisStreamReader

        opts = parse_reader_options(self.options, streaming=True)
        if opts.low_latency:
            # Spark then asks simpleStreamReader (its documented fallback).
            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED",
                                             messageParameters={"feature": "streamReader with lowLatency=true"})
        return SulisStreamReader(opts)

    @_said_plainly
    def simpleStreamReader(self, schema: StructType):
        from .stream_reader import SulisLowLatencyReader

        return SulisLowLatencyReader(parse_reader_options(self.options, streaming=True))

    @_said_plainly
    def writer(self, schema: StructType, overwrite: bool):
        from .sink import SulisBatchWriter

        if overwrite:
            # As Kafka's sink: a recorded stream only grows.
            raise OptionError("mode('overwrite') is not allowed for the sulis sink: a recorded stream is "
                              "append-only; use mode('append') (Spark's Kafka sink refuses it the same way)")

        return SulisBatchWriter(parse_writer_options(self.options), schema)

    @_said_plainly
    def streamWriter(self, schema: StructType, overwrite: bool):
        from .sink import SulisStreamWriter

        return SulisStreamWriter(parse_writer_options(self.options), schema)


class SulisPythonDataSource(SulisDataSource):
    """The same Python data source under the name ``sulis_python`` (``sulis.spark.PYTHON_FORMAT``): where the
    jar is on a session's classpath, ``format("sulis")`` is the JVM's (Spark resolves a name a JVM provider
    registers before a Python one), and this name still reaches the Python source."""

    @classmethod
    def name(cls) -> str:
        return "sulis_python"
