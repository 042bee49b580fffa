"""A Spark driver in its own process for the kill -9 test: a streaming query from format("sulis")
into Parquet with a checkpoint. Prints one JSON line per micro-batch that read rows, then
``{"done": true}`` when an availableNow run ends.

usage: spark_child.py DRIVER_DIR STREAM_ID CHECKPOINT OUT (stream|available-now) [MASTER [OPTION=VALUE ...]]

MASTER is local[2] unless given (e.g. spark://127.0.0.1:7077 for the standalone cluster test);
OPTION=VALUE pairs are more options of the format("sulis") source, but for sinkStreamId=N and
sinkChannel=URI (default aeron:ipc): a second query writes the values through the exactly-once sulis
sink to that stream (checkpoint CHECKPOINT-sink, the source's archive options); in stream mode it
prints {"sink_query": its id} when it starts.

A query that Spark could not start because the Python process behind the source did not connect back
within Spark's fixed 10 s (``Python worker failed to connect back``, a starved machine: docs/spark.md
"Not there yet") is started again from its checkpoint, as docs/spark.md tells users to, at most
three times, each said on stderr; any other failure ends the child.
"""

from __future__ import annotations

import json
import os
import sys
import time

# Spark's own limit on a Python data source's process start (PythonWorkerFactory.createSimpleWorker).
SPARK_START_LIMIT = "Python worker failed to connect back"
RESTARTS = 3


class Supervised:
    """A streaming query started again from its checkpoint when Spark failed it for SPARK_START_LIMIT."""

    def __init__(self, name: str, start):
        self.name, self._start, self.restarts = name, start, 0
        self.query = start()

    def failed(self) -> str | None:
        """None while the query runs (or ended well, or was restarted just now); else why it failed."""
        if self.query.isActive or self.query.exception() is None:
            return None
        why = str(self.query.exception())
        if SPARK_START_LIMIT not in why or self.restarts == RESTARTS:
            return f"{self.name}: {why}"
        self.restarts += 1
        print(f"spark_child: {self.name} started again from its checkpoint ({self.restarts} of {RESTARTS}): "
              f"{SPARK_START_LIMIT}", file=sys.stderr, flush=True)
        self.query = self._start()
        return None


def main() -> int:
    driver_dir, stream_id, checkpoint, out, mode = sys.argv[1:6]
    master = sys.argv[6] if len(sys.argv) > 6 else "local[2]"
    os.environ.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    from pyspark.sql import SparkSession

    import sulis.spark

    # A restarted (available-now) run may take a core on every worker: on a cluster that just lost a
    # host, the master still lists that host's worker until its 60 s timeout, and with one core the
    # run could be given it and wait a minute for nothing.
    cores = "2" if mode == "available-now" and master.startswith("spark://") else "1"
    # Streaming: small micro-batches, so a kill lands between them; a restarted run takes the backlog in
    # a few big ones (each micro-batch costs Spark a second or two whatever its size).
    per_trigger = 4 * 1024 * 1024 if mode == "available-now" else 256 * 1024
    spark = (SparkSession.builder.master(master).appName("sulis-spark-child")
             .config("spark.executor.memory", "512m").config("spark.cores.max", cores)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sulis.spark.register(spark)
    extra = dict(arg.split("=", 1) for arg in sys.argv[7:])
    read_back = extra.pop("readBack", "false") == "true"
    sink_stream = extra.pop("sinkStreamId", None)
    sink_channel = extra.pop("sinkChannel", "aeron:ipc")
    archive = {k: v for k, v in extra.items() if k in ("controlChannel", "controlStreamId", "controlResponseChannel",
                                                        "controlResponseStreamId", "replayChannel", "messageTimeout")}
    def source():
        return (spark.readStream.format("sulis").option("driverDir", driver_dir).option("channel", "aeron:ipc")
                .option("streamId", stream_id).option("maxBytesPerTrigger", per_trigger).options(**extra).load())

    writer = source().writeStream.format("parquet").option("checkpointLocation", checkpoint)
    # With sinkStreamId: a second query, the same rows' values through the exactly-once sulis sink. Each
    # query has a source of its own (as users write it either way). Two queries started at once failed now
    # and then with java.io.OptionalDataException deserializing a task: Spark's environment map of the
    # registered Python source, shared by every query, written by each query's thread without a lock;
    # sulis.spark.register() (above) gives it a ConcurrentHashMap (docs/spark.md "Not there yet").
    sink = None if sink_stream is None else (
        source().select("value").writeStream.format("sulis").option("driverDir", driver_dir)
        .option("channel", sink_channel).option("streamId", sink_stream).options(**archive)
        .option("checkpointLocation", checkpoint + "-sink"))
    if mode == "available-now":
        queries = [Supervised("the Parquet query", lambda: writer.trigger(availableNow=True).start(out))]
        if sink is not None:
            try:
                queries.append(Supervised("the sink query", lambda: sink.trigger(availableNow=True).start()))
            except Exception as e:  # noqa: BLE001 - said on stdout, where the test reads it
                print(json.dumps({"done": False, "exception": f"the sink query did not start: {e!r}"}), flush=True)
                raise
        failed = []
        for q in queries:
            while True:
                try:
                    q.query.awaitTermination(120)
                except Exception:  # noqa: BLE001 - the query's own exception, reported below
                    pass
                if q.query.isActive:
                    failed.append(f"{q.name} still running after 120 s")
                    break
                if (why := q.failed()) is not None:
                    failed.append(why)
                    break
                if not q.query.isActive and q.query.exception() is None:
                    break
        if read_back and not failed:
            # The Parquet output as Spark reads it (its _spark_metadata log, never a glob of the
            # directory), from this application: the test needs no Spark of its own for it.
            rows = spark.read.parquet(out).select("value", "recording_id").collect()
            print(json.dumps({"parquet": [bytes(r.value).hex() for r in rows],
                              "recording_ids": sorted({r.recording_id for r in rows})}), flush=True)
        print(json.dumps({"done": True, "exception": "; ".join(failed) or None}), flush=True)
        spark.stop()
        return 0
    queries = [Supervised("the Parquet query", lambda: writer.trigger(processingTime="200 milliseconds").start(out))]
    if sink is not None:
        queries.append(Supervised("the sink query", lambda: sink.trigger(processingTime="200 milliseconds").start()))
        # Its id stays when it is started again from its checkpoint (runId changes).
        print(json.dumps({"sink_query": str(queries[1].query.id)}), flush=True)
    seen: set[int] = set()
    # The test kills this process; the bound only ends a child the test left behind. It was 120 s, and a CI run
    # with busy CPUs reached it before the test's kill (the child exited 1 and stopped Spark mid-batch).
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        for q in queries:
            if (why := q.failed()) is not None:
                print(f"spark_child: {why}", file=sys.stderr, flush=True)
                return 1
        for p in queries[0].query.recentProgress:
            if p["batchId"] not in seen and p["numInputRows"] > 0:
                seen.add(p["batchId"])
                print(json.dumps({"batch": p["batchId"], "rows": p["numInputRows"]}), flush=True)
        time.sleep(0.05)
    return 1


if __name__ == "__main__":
    sys.exit(main())
