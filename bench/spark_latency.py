#!/usr/bin/env python3
"""End-to-end latency into Spark: sulis's Python source, its JVM source in micro-batches and in Spark's
real-time mode, beside Spark's Kafka source in both, same messages, same machine, same run.

    python bench/spark_latency.py            # 1,000 and 100,000 msgs/s, 3 runs of 15 s each (~25 min)
    python bench/spark_latency.py --quick    # a smoke run: one run of 6 s at each rate
    python bench/spark_latency.py --sources "sulis jvm real-time,kafka real-time" --rt-trigger "30 seconds" \
        --seconds 60 --messages 0               # real-time mode with rarer batch ends, no batch read

Each message is 100 B stamped with ``time.time_ns()`` when it is offered (sulis: ``offer`` into a stream
an embedded archive records; Kafka: ``produce`` with ``linger.ms=0`` into a one-partition topic of a 4.3.1
broker on 127.0.0.1). Where the query's output is seen the stamp is taken from the clock again:
micro-batches (trigger 0 s) in ``foreachBatch`` on the Spark driver, real-time mode
(``trigger(realTime="5 seconds")``, update mode) in the JVM as each row reaches the sink (``StampSink``
in the sulis jar; Spark's real-time allowlist check is off for it). What is due is sent every ~0.2 ms
with one stamp, so the publisher is not a Python call per message at 100,000/s.
p50/p99/p99.9 over the measured seconds, the first ``--warmup`` left out. The JVM source needs
``python/sulis/jars/sulis-spark.jar`` (``scripts/build_jar.sh``); Kafka's pieces come from
``bash bench/peers/install.sh`` (without them the Kafka rows say skipped). Also a batch read, rows/s, of
one recording of ``--messages`` by both sulis sources into the noop sink, after a warm-up read each.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import struct
import sys
import tempfile
import time

import sulis
import sulis.spark
from sulis._benchkit import runner as r
from sulis._benchkit.hist import histogram, summarize
from sulis._benchkit.loops import await_until, publish_batch
from sulis._benchkit.procs import Interference, remove_dir, scratch_dir
from sulis._benchkit.report import print_table, save

r.repository(__file__)
from bench.peers import kafka as kafka_peer  # noqa: E402
from bench.peers.kafka import Kafka  # noqa: E402

SIZE = 100
CHANNEL = "aeron:ipc"
SOURCES = ("sulis python", "sulis jvm", "sulis jvm real-time", "kafka", "kafka real-time")


#: bench/spark_latency.py's sink in the sulis jar: latencies taken in the JVM as each row arrives.
STAMP_SINK = "io.sulis.spark.bench.StampSink"


def _published(send_many, flush, rate: int, warmup: float, seconds: float, measure_from: int) -> int:
    """Sends ``rate`` stamped messages/s for ``warmup`` + ``seconds``, what is due each ~0.2 ms at once with
    one stamp (so 100,000/s is not bound by a Python call per message): how many in the measured part."""
    measured, buf, t0, sent = 0, bytearray(SIZE), time.monotonic(), 0
    while (elapsed := time.monotonic() - t0) < warmup + seconds:
        due = int(elapsed * rate) - sent
        if due > 0:
            struct.pack_into("<q", buf, 0, stamp := time.time_ns())
            send_many([bytes(buf)] * due)
            sent, measured = sent + due, measured + (due if stamp >= measure_from else 0)
        flush()
        time.sleep(0.0002)
    return measured


def figures(lat_ns: list[int], measured: int) -> dict:
    if len(lat_ns) < measured:
        raise RuntimeError(f"the query saw {len(lat_ns)} of {measured} messages")
    s = summarize(histogram(lat_ns))
    return {"p50_ms": s["p50_us"] / 1e3, "p99_ms": s["p99_us"] / 1e3, "p999_ms": s["p99_9_us"] / 1e3,
            "rows": len(lat_ns)}


def micro_batch(df, send_many, flush, a, rate: int) -> dict:
    """Trigger 0 s, stamps read in foreachBatch on the Spark driver."""
    from pyspark.sql import functions as F

    lat: list[int] = []
    measure_from = time.time_ns() + int(a.warmup * 1e9)

    def on_batch(batch_df, _batch_id) -> None:
        rows = batch_df.select(F.substring("value", 1, 8).alias("t")).collect()
        now = time.time_ns()
        lat.extend(now - t for t in (int.from_bytes(row.t, "little") for row in rows) if t >= measure_from)

    query = df.writeStream.foreachBatch(on_batch).trigger(processingTime="0 seconds").start()
    try:
        measured = _published(send_many, flush, rate, a.warmup, a.seconds, measure_from)
        deadline = time.monotonic() + 60
        while len(lat) < measured and query.exception() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        query.stop()
    return figures(lat, measured)


def real_time(df, send_many, flush, a, rate: int, top: str) -> dict:
    """Real-time mode (``--rt-trigger`` batches, 5 s by default), latencies taken in the JVM as each row arrives
    (``STAMP_SINK``; Spark's allowlist admits no such sink, so its check is off for these queries)."""
    out = tempfile.mkdtemp(prefix="rt-", dir=top)
    measure_from = time.time_ns() + int(a.warmup * 1e9)
    query = (df.select("value").writeStream.format(STAMP_SINK).option("path", out)
             .option("measureFrom", str(measure_from)).outputMode("update")
             .option("checkpointLocation", os.path.join(top, f"ck-{os.path.basename(out)}"))
             .trigger(realTime=a.rt_trigger).start())

    def seen() -> list[int]:
        lat: list[int] = []
        for p in glob.glob(os.path.join(out, "*")):
            with open(p, "rb") as f:
                data = f.read()
            lat.extend(struct.unpack(f"<{len(data) // 8}q", data))
        return lat

    try:
        measured = _published(send_many, flush, rate, a.warmup, a.seconds, measure_from)
        # A task writes its file as its batch ends, or as the stop below aborts a batch longer than the run.
        deadline = time.monotonic() + 60 + min(_seconds(a.rt_trigger), 60.0)
        while len(seen()) < measured and query.exception() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
    deadline = time.monotonic() + 30  # the aborted tasks' files
    while len(seen()) < measured and time.monotonic() < deadline:
        time.sleep(0.2)
    return figures(seen(), measured)


def _seconds(duration: str) -> float:
    """``"5 seconds"``, ``"5 minutes"``, ... in seconds."""
    n, unit = duration.split()
    return float(n) * {"s": 1, "m": 60, "h": 3600}[unit[0]]


def batch_reads(spark, driver, client, ac, a, reads: dict) -> None:
    """A recording of ``--messages`` read by both sulis sources into Spark's noop sink, rows/s: after a checked
    ``count()`` and an untimed read each (as bench/spark_pipeline.py reads), ``--reads`` reads interleaved."""
    ac.start_recording(CHANNEL, 1001)
    pub = client.add_exclusive_publication(f"{CHANNEL}?term-length=16m", 1001)
    rid = ac.await_signal(sulis.archive.RecordingSignal.START).recording_id
    publish_batch(pub, bytes(SIZE), 4096, count=a.messages)
    await_until(lambda: ac.get_recording_position(rid) >= pub.position, "recorded", 300)
    frames = {name: spark.read.format(fmt).option("driverDir", driver.dir).option("recordingIds", rid)
              .option("minPartitions", 2).load()
              for name, fmt in (("sulis python", sulis.spark.PYTHON_FORMAT), ("sulis jvm", sulis.spark.JVM_FORMAT))}

    def timed(df) -> float:
        t0 = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        return a.messages / (time.perf_counter() - t0)

    for name, df in frames.items():
        if (n := df.count()) != a.messages:
            raise RuntimeError(f"batch read {name}: {n} rows, {a.messages} expected")
        print(f"  batch read {name}: warm-up {timed(df):,.0f} rows/s (untimed)", flush=True)
    for _ in range(a.reads):
        for name, df in frames.items():
            reads[name].append(timed(df))
            print(f"  batch read {name}: {reads[name][-1]:,.0f} rows/s", flush=True)


def session(master: str, jars: list[str]):
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {','.join(jars)} pyspark-shell"
    sys.path.insert(0, str(r.ROOT / "examples"))
    from spark_pipeline import spark_session

    spark = spark_session(master, "sulis-bench-spark-latency")
    sulis.spark.register(spark)
    spark.conf.set("spark.sql.streaming.realTimeMode.allowlistCheck", "false")
    return spark


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="1000,100000",
                    help="messages/s, comma-separated (1000,100000); '' for the batch read alone")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=15.0, help="measured seconds per run (15)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of a run left out (5)")
    ap.add_argument("--messages", type=int, default=5_000_000, help="messages of the batch read (5 M)")
    ap.add_argument("--reads", type=int, default=5, help="timed batch reads per source (5)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--rt-trigger", default="5 seconds",
                    help="real-time mode's checkpoint interval, both sources ('5 seconds', its shortest)")
    ap.add_argument("--sources", default=",".join(SOURCES), help=f"comma-separated, of: {', '.join(SOURCES)}")
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one run of 6 s at each rate, 500 k messages read")
    quick = dict(runs=1, seconds=6.0, warmup=3.0, messages=500_000, reads=3)
    ap.set_defaults(**(quick if "--quick" in sys.argv else {}))
    a = ap.parse_args()
    r.require_release_build()
    if not os.path.exists(sulis.spark.jar()):
        print("no sulis jar: bash scripts/build_jar.sh", file=sys.stderr)
        return 2
    rates = [int(x) for x in a.rates.split(",") if x.strip()]
    why = "--no-kafka" if a.no_kafka else ("no rates" if not rates else kafka_peer.missing())
    jars = [sulis.spark.jar()]
    if why is None:
        jars += [str(p) for p in sorted((kafka_peer.KAFKA_DIR / "spark" / "libs").glob("*.jar"))]
    top = tempfile.mkdtemp(prefix="sulis-bench-spark-latency-")
    shm = scratch_dir("sulis-bench-spark-latency-")
    runs: dict = {(s, rate): [] for s in SOURCES for rate in rates}
    reads: dict = {"sulis python": [], "sulis jvm": []}
    others: list = []
    kafka = None
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        if why is None:
            try:
                kafka = Kafka(os.path.join(top, "kafka"))
            except Exception as e:
                why = f"the broker did not start: {type(e).__name__}: {e}"
        with sulis.MediaDriver(dir=os.path.join(shm, "driver"), threading_mode="shared",
                               ipc_term_buffer_length="16m") as driver, \
                sulis.Archive(os.path.join(top, "archive"), driver_dir=driver.dir, segment_file_length=1 << 30), \
                sulis.Client(dir=driver.dir) as client, sulis.ArchiveClient(client) as ac:
            spark = session(a.master, jars)
            try:
                # Batch read: one recording, both sulis sources, into the noop sink (--messages 0: none).
                if a.messages > 0:
                    batch_reads(spark, driver, client, ac, a, reads)
                sid = 2000
                for run in range(a.runs):
                    for rate in rates:
                        for source in SOURCES:
                            if source not in a.sources.split(","):
                                continue
                            if source.startswith("kafka") and (why or kafka is None):
                                continue
                            sid += 1
                            if source.startswith("sulis"):
                                ac.start_recording(CHANNEL, sid)
                                p = client.add_publication(CHANNEL, sid)
                                ac.await_signal(sulis.archive.RecordingSignal.START)

                                def send(batch: list[bytes], p=p) -> None:
                                    while batch:
                                        n, _ = p.offer_batch(batch)
                                        batch = batch[n:]

                                def flush() -> None:
                                    pass

                                fmt = sulis.spark.PYTHON_FORMAT if source == "sulis python" else sulis.spark.JVM_FORMAT
                                df = (spark.readStream.format(fmt).option("driverDir", driver.dir)
                                      .option("channel", CHANNEL).option("streamId", sid)
                                      .option("startingPositions", "latest").load())
                            else:
                                topic = kafka.topic(f"latency-{sid}")
                                producer = kafka.producer(**{"linger.ms": 0,
                                                             "queue.buffering.max.messages": 2_000_000})

                                def send(batch: list[bytes], producer=producer, topic=topic) -> None:
                                    for b in batch:
                                        while True:
                                            try:
                                                producer.produce(topic, b)
                                                break
                                            except BufferError:
                                                producer.poll(0.001)

                                def flush(producer=producer) -> None:
                                    producer.poll(0)

                                df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.servers)
                                      .option("subscribe", topic).option("startingOffsets", "latest").load())
                            try:
                                with Interference() as itf:
                                    if source.endswith("real-time"):
                                        v = real_time(df, send, flush, a, rate, top)
                                    else:
                                        v = micro_batch(df, send, flush, a, rate)
                                runs[(source, rate)].append(v)
                                others.append([source, rate, round(itf.share, 3)])
                                print(f"  run {run + 1} {rate:,}/s {source}: p50 {v['p50_ms']:.1f} ms, "
                                      f"p99 {v['p99_ms']:.1f} ms, p99.9 {v['p999_ms']:.1f} ms "
                                      f"(others used {itf.share:.0%} of a CPU)", flush=True)
                            except Exception as e:  # noqa: BLE001 - said in the row, the others go on
                                runs[(source, rate)].append({"error": f"{type(e).__name__}: {e}"[:300]})
                                print(f"  run {run + 1} {rate:,}/s {source}: failed: {e}"[:400], flush=True)
                            finally:
                                if source.startswith("sulis"):
                                    ac.stop_recording(CHANNEL, sid)
                                    p.close()
                                else:
                                    producer.flush(10)
            finally:
                spark.stop()
    finally:
        if kafka:
            kafka.close()
        remove_dir(shm)
        shutil.rmtree(top, ignore_errors=True)
        save(r.results_dir(), "spark_latency", {"started": started, "options": vars(a), "kafka_skipped": why,
                                                "reads": reads, "figures": {f"{s}@{rate}": v for (s, rate), v
                                                                            in runs.items()}, "others_cpu": others})

    def median(xs, key):
        ok = sorted(x[key] for x in xs if "error" not in x)
        return f"{ok[len(ok) // 2]:.1f}" if ok else ("skipped" if not xs else "failed")

    rows = []
    for rate in rates:
        for s in SOURCES:
            if s not in a.sources.split(","):
                continue
            xs = runs[(s, rate)]
            if s.startswith("kafka") and why:
                rows.append([f"{rate:,}/s", s, f"skipped ({why})", "", ""])
                continue
            rows.append([f"{rate:,}/s", s, median(xs, "p50_ms"), median(xs, "p99_ms"), median(xs, "p999_ms")])
    print(f"end-to-end latency, medians of {a.runs} run(s) of {a.seconds:g} s")
    print_table(["rate", "source", "p50 ms", "p99 ms", "p99.9 ms"], rows)
    for name, xs in reads.items():
        xs = sorted(xs)
        if not xs:
            continue
        print(f"batch read {name}: median {xs[len(xs) // 2]:,.0f} rows/s ({', '.join(f'{x:,.0f}' for x in xs)})")
    return 0


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
