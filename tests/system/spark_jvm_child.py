"""A Spark driver in its own process for the JVM source's tests (tests/system/test_spark_jvm.py): its JVM starts
with the sulis jar on the classpath (``spark.jars``), which a process that already runs Spark cannot add.

usage: spark_jvm_child.py CONFIG_JSON

CONFIG: ``jar`` (None: the Python source only), ``format`` (``sulis`` or the JVM provider's class), ``mode``
(``batch``: write the rows to Parquet at ``out``, or each of ``reads``, a list of ``{format, options, out}``, its
schema and error, if any, in ``results``; ``available-now``: a streaming query with Trigger.AvailableNow
into Parquet at ``out`` with checkpoint ``checkpoint``; ``realtime``: a real-time-mode query of ``columns``, position
first, to the console (or to ``sink``: ``{format, options}``) until a line on stdin says stop (with ``processing``, a
micro-batch query with that processing-time trigger instead; a query that fails first prints
``{"exception": ...}``); ``lookup``: the class ``format`` resolves to;
``write``: for each of ``writes`` (``{columns, options}``), ``rows`` rows of ``columns`` (SQL over
``spark.range``) written in batch through ``format``, its error, if any, in ``results``),
``options`` (of the source). Prints one JSON line when done:
``{"done": true, ...}``; a failure prints ``{"error": "..."}`` and exits 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def main() -> None:
    cfg = json.loads(sys.argv[1])
    # (A host of the three-host test sets its own address.)
    for k, v in dict(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                     PYSPARK_DRIVER_PYTHON=sys.executable).items():
        os.environ.setdefault(k, v)
    from pyspark.sql import SparkSession

    import sulis.spark

    builder = (SparkSession.builder.master(cfg.get("master", "local[2]")).appName("sulis-jvm-child")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g"))
    if cfg.get("jar"):
        builder = builder.config("spark.jars", cfg["jar"])
    for k, v in cfg.get("conf", {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sulis.spark.register(spark)
    fmt = cfg.get("format", "sulis")
    try:
        if cfg["mode"] == "lookup":
            jvm = spark._jvm
            found = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
                fmt, spark._jsparkSession.sessionState().conf())
            print(json.dumps({"done": True, "class": found.getName()}), flush=True)
        elif cfg["mode"] == "batch" and "reads" in cfg:
            results = []
            for read in cfg["reads"]:
                reader = spark.read.format(read["format"])
                for k, v in read["options"].items():
                    reader = reader.option(k, str(v))
                try:
                    df = reader.load()
                    df.write.mode("overwrite").parquet(read["out"])
                    results.append({"schema": df.schema.simpleString()})
                except Exception as e:  # noqa: BLE001 - the test compares the two sources' errors
                    results.append({"error": str(e)})
            print(json.dumps({"done": True, "results": results}), flush=True)
        elif cfg["mode"] == "batch":
            reader = spark.read.format(fmt)
            for k, v in cfg["options"].items():
                reader = reader.option(k, str(v))
            df = reader.load()
            df.write.mode("overwrite").parquet(cfg["out"])
            print(json.dumps({"done": True, "schema": df.schema.simpleString()}), flush=True)
        elif cfg["mode"] == "write":
            results = []
            for write in cfg["writes"]:
                df = spark.range(cfg["rows"]).selectExpr(*write["columns"]).repartition(cfg.get("partitions", 2))
                w = df.write.format(fmt).mode("append")
                for k, v in write["options"].items():
                    w = w.option(k, str(v))
                try:
                    w.save()
                    results.append({})
                except Exception as e:  # noqa: BLE001 - the test reads it
                    results.append({"error": str(e)})
            print(json.dumps({"done": True, "results": results}), flush=True)
        elif cfg["mode"] == "available-now":
            reader = spark.readStream.format(fmt)
            for k, v in cfg["options"].items():
                reader = reader.option(k, str(v))
            q = (reader.load().writeStream.format("parquet").option("checkpointLocation", cfg["checkpoint"])
                 .trigger(availableNow=True).start(cfg["out"]))
            q.awaitTermination()
            print(json.dumps({"done": True}), flush=True)
        elif cfg["mode"] == "realtime":
            reader = spark.readStream.format(fmt)
            for k, v in cfg["options"].items():
                reader = reader.option(k, str(v))
            df = reader.load().selectExpr(*cfg.get("columns", ["position", "reserved_value"]))
            sink = cfg.get("sink")
            w = df.writeStream.outputMode("append" if cfg.get("processing") else "update")
            w = w.option("checkpointLocation", cfg["checkpoint"])
            if sink:
                w = w.format(sink["format"])
                for k, v in sink["options"].items():
                    w = w.option(k, str(v))
            else:
                w = w.format("console").option("numRows", 1_000_000)
            if cfg.get("processing"):
                w = w.trigger(processingTime=cfg["processing"])
            else:
                w = w.trigger(realTime=cfg.get("trigger", "5 seconds"))
            q = w.start()
            print(json.dumps({"started": True}), flush=True)
            import threading

            told = threading.Event()
            threading.Thread(target=lambda: (sys.stdin.readline(), told.set()), daemon=True).start()
            while not told.is_set() and q.isActive:  # the test says when to stop, or the query fails
                told.wait(0.2)
            if q.exception() is not None:
                print(json.dumps({"exception": str(q.exception())}), flush=True)
                told.wait()
            q.stop()
            print(json.dumps({"done": True}), flush=True)
    except Exception as e:  # noqa: BLE001 - the test reads it
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-4000:]}),
              flush=True)
        sys.exit(1)
    finally:
        spark.stop()
        time.sleep(0.1)


if __name__ == "__main__":
    main()
