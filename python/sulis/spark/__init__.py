"""sulis on Spark: ``format("sulis")`` sources and sinks over archive recordings.

Install with ``pip install 'sulis[spark]'`` (pyspark is imported only here, lazily: ``import sulis``
never needs it). Register the format once per session, then read recordings as Kafka topics are
read::

    import sulis.spark
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    sulis.spark.register(spark)

    df = (spark.read.format("sulis")
          .option("channel", "aeron:ipc").option("streamId", 1001)   # or .option("recordingIds", "3,4")
          .option("startingPositions", "earliest")
          .load())
    # value binary, recording_id long, stream_id int, session_id int, position long, reserved_value long

    query = (spark.readStream.format("sulis").option("channel", "aeron:ipc").option("streamId", 1001).load()
             .writeStream.format("parquet").option("checkpointLocation", "/tmp/ck").start("/tmp/out"))

``position`` is the stream position after the message (Aeron's ``Header.position``); offsets
and ``startingPositions`` use the same numbers, so ``{"<recording id>": position}`` resumes
after that row. See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from .options import OptionError
from .replay import SCHEMA, SCHEMA_DDL

__all__ = ["SCHEMA", "SCHEMA_DDL", "OptionError", "register", "SulisDataSource"]


def register(spark: Any) -> None:
    """Registers ``format("sulis")`` with the SparkSession ``spark`` (idempotent)."""
    from .datasource import SulisDataSource

    spark.dataSource.register(SulisDataSource)


def __getattr__(name: str) -> Any:
    if name == "SulisDataSource":  # imports pyspark
        from .datasource import SulisDataSource

        return SulisDataSource
    raise AttributeError(f"module 'sulis.spark' has no attribute {name!r}")
