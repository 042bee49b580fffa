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

A cluster member's committed log reads the same way, ``.option("clusterDir", ...)`` with the member's
``driverDir`` (rows: ``value``, ``cluster_session_id``, ``leadership_term_id``, ``recording_id``,
``position``, ``timestamp``), never past its commit position.

``position`` is the stream position after the message (Aeron's ``Header.position``); offsets
and ``startingPositions`` use the same numbers, so ``{"<recording id>": position}`` resumes
after that row. See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from .errors import (
    ArchiveUnavailableError,
    DataLossError,
    NoMediaDriverError,
    OptionError,
    ReadError,
    ReadTimeoutError,
    RowError,
    SinkError,
    SinkTimeoutError,
)
from .replay import SCHEMA, SCHEMA_DDL

__all__ = ["SCHEMA", "SCHEMA_DDL", "register", "jar", "JVM_FORMAT", "PYTHON_FORMAT", "SulisDataSource",
           "offsets_behind", "OptionError", "DataLossError", "ArchiveUnavailableError", "NoMediaDriverError",
           "ReadError", "ReadTimeoutError", "RowError", "SinkError", "SinkTimeoutError"]


#: The JVM source's provider. On a session whose JVM has ``jar()`` on its classpath
#: (``SparkSession.builder.config("spark.jars", sulis.spark.jar())``), ``format("sulis")`` is this one (the jar
#: registers the name, and Spark resolves a JVM provider's name before a Python data source's); this full name
#: says so explicitly. Same options, rows and offsets as the Python source, no Python worker per micro-batch,
#: and Spark's real-time mode.
JVM_FORMAT = "io.sulis.spark.SulisProvider"

#: The Python data source by a name of its own (``register`` registers both), for a session that has the jar but
#: wants the Python source: ``format("sulis")`` there is the JVM's.
PYTHON_FORMAT = "sulis_python"


def jar() -> str:
    """The JVM source's jar (``scripts/build_jar.sh`` builds it, with the Rust core inside)."""
    import os

    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jars", "sulis-spark.jar")


def register(spark: Any) -> None:
    """Registers the Python data source as ``format("sulis")`` and ``format(PYTHON_FORMAT)`` with the
    SparkSession ``spark`` (idempotent). Where the session has ``jar()`` on its classpath, ``format("sulis")``
    is the JVM's all the same."""
    from .datasource import SulisDataSource, SulisPythonDataSource

    for source in (SulisDataSource, SulisPythonDataSource):
        if source is SulisDataSource and _jvm_provider_of(spark, "sulis"):
            continue  # the jar's: Spark refuses a Python source under a name a JVM provider registers
        if not _register_with_concurrent_env(spark, source):
            spark.dataSource.register(source)


def _jvm_provider_of(spark: Any, name: str) -> bool:
    """Whether a JVM provider on the session's classpath registers ``name`` (the jar registers ``sulis``)."""
    try:
        found = spark.sparkContext._jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            name, spark._jsparkSession.sessionState().conf())
        return bool(found.getName() == JVM_FORMAT)
    except Exception:  # noqa: BLE001 - not found (or no JVM of its own: Spark Connect)
        return False


def _register_with_concurrent_env(spark: Any, source: Any) -> bool:
    """What ``spark.dataSource.register(source)`` does, but the registration's environment map (the
    Python workers' variables) is a ``java.util.concurrent.ConcurrentHashMap``, not a ``HashMap``.

    Spark's fault, worked around here: every Python function Spark makes for the data source shares that
    one map (``UserDefinedPythonDataSource.createPythonFunction`` passes ``dataSourceCls.envVars``), and
    each streaming query's thread ``put``s four keys into it when its source starts
    (``PythonStreamingSourceRunner.init()``: SPARK_LOCAL_DIRS, SPARK_AUTH_SOCKET_TIMEOUT,
    SPARK_BUFFER_SIZE, SPARK_PYTHON_RUNTIME). Two queries starting at once put into a ``HashMap`` from
    two threads, which can leave its size one above its entries; every task serialized after that
    then fails to deserialize with ``java.io.OptionalDataException`` in ``HashMap.readObject``.
    ``ConcurrentHashMap`` takes concurrent puts, and its serialized form has no count to go wrong.

    False (nothing registered) where this session has no JVM of its own (Spark Connect) or Spark's
    internals differ; the caller then registers the usual way."""
    try:
        from pyspark.core.rdd import _prepare_for_python_RDD

        sc = spark.sparkContext
        jvm = sc._jvm
        pickled, broadcast_vars, env, includes = _prepare_for_python_RDD(sc, source)
        concurrent_env = jvm.java.util.concurrent.ConcurrentHashMap()
        for key, value in env.items():
            concurrent_env.put(key, value)
        function = jvm.org.apache.spark.api.python.SimplePythonFunction(
            bytearray(pickled), concurrent_env, includes, sc.pythonExec, sc.pythonVer, broadcast_vars,
            sc._javaAccumulator)
        registration = getattr(
            jvm, "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource")(function)
        spark._jsparkSession.dataSource().registerPython(source.name(), registration)
    except Exception:  # noqa: BLE001 - any failure: the caller registers through pyspark's own API
        return False
    return True


def offsets_behind(progress: Any) -> dict[str, Any]:
    """How far a micro-batch ended behind what was recorded, from a ``StreamingQueryProgress``
    (``query.lastProgress``, ``recentProgress[i]``, or its JSON): Kafka's source reports
    ``avgOffsetsBehindLatest`` in its metrics, which Spark's Python sources cannot, so this reads the
    progress' ``latestOffset`` (what was recorded when the batch was planned) and ``endOffset`` of each
    ``format("sulis")`` source. Offsets are byte positions, so the figures are bytes:
    ``{"recordings": {id: bytes}, "total": .., "max": .., "min": .., "avg": ..}`` (zeros with none)."""
    import json

    if isinstance(progress, str):
        progress = json.loads(progress)
    behind: dict[int, int] = {}
    for source in progress["sources"]:
        latest, end = source.get("latestOffset"), source.get("endOffset")
        if not latest or not end:
            continue
        latest = json.loads(latest) if isinstance(latest, str) else latest
        end = json.loads(end) if isinstance(end, str) else end
        if not isinstance(latest, dict) or not isinstance(end, dict):
            continue
        for key, position in latest.items():
            if key.isdigit() and key in end:
                behind[int(key)] = max(0, int(position) - int(end[key]))
    values = list(behind.values())
    return {"recordings": behind, "total": sum(values), "max": max(values, default=0),
            "min": min(values, default=0), "avg": sum(values) / len(values) if values else 0.0}


def __getattr__(name: str) -> Any:
    if name == "SulisDataSource":  # imports pyspark
        from .datasource import SulisDataSource

        return SulisDataSource
    raise AttributeError(f"module 'sulis.spark' has no attribute {name!r}")
