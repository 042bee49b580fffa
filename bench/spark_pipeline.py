#!/usr/bin/env python3
"""sulis's Spark pipeline beside the Kafka pipeline: same messages, same machine, same run.

    python bench/spark_pipeline.py            # 5 M messages of 100 B, 3 runs, 8 GB sustained (~9 min)
    python bench/spark_pipeline.py --quick    # a smoke run (~2 min)

sulis: an embedded driver and archive (in this process), read by ``format("sulis")``. Kafka: a
4.3.1 broker (KRaft, one JVM on 127.0.0.1, in a temp dir) fed by confluent-kafka, read by Spark's
own Kafka source. One Spark session (``--master``) serves every query. Rows (docs/spark.md,
"Measured", says more):

* ingest, msgs/s until recorded, *burst* (each run fits the page cache and starts after the dirty
  pages were written back) and *sustained* (``--sustained-gb``, more than the kernel lets sit dirty,
  after the disk's sequential write speed is measured with as many bytes): sulis ``offer_batch``
  into a stream the archive records, until
  the recording's position is the publication's; Kafka ``produce_batch`` (``acks=all``,
  ``linger.ms=20``) into a one-partition topic, until every delivery report is in (end offset checked);
  and Kafka's per-message ``produce()`` loop (what most Python producers are), on at most 1 M messages;
* batch read, rows/s: the first ingest run's stream into Spark's ``noop`` sink, ``minPartitions=2``,
  after a checked ``count()`` and an untimed read each, ``--reads`` reads interleaved;
* streaming latency: ``--rate`` messages/s stamped with ``time.time_ns()`` before ``offer`` /
  ``produce`` (``linger.ms=0``), the same ``--trigger`` for both, stamps read in ``foreachBatch``
  on the driver; the first ``--warmup`` seconds left out. sulis twice: the default source (a task
  per micro-batch) and ``lowLatency=true`` (the Spark driver reads, no task).

The Kafka pieces come from ``bash bench/peers/install.sh``; without them the Kafka column says
``skipped`` (with the reason) and the sulis rows still run.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time

import sulis
import sulis.spark
from sulis._benchkit import runner as r
from sulis._benchkit.hist import histogram, summarize
from sulis._benchkit.loops import await_until, publish_batch
from sulis._benchkit.procs import Interference, cpu_summary, remove_dir, scratch_dir
from sulis._benchkit.report import fmt_ratio, print_table, save, verdict

r.repository(__file__)
from bench.peers import kafka as kafka_peer  # noqa: E402
from bench.peers.kafka import Kafka  # noqa: E402

SIZE = 100
CHANNEL = "aeron:ipc"
PHASES = ("triggerExecution", "latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


# ----------------------------------------------------------------- ingest

#: Bytes a 100 B message takes in the log and the recording: a 32 B header, aligned to 32.
FRAME = 160
#: Messages a micro-batch in the sink's cost rows.
SINK_BATCH = 50_000


def sulis_ingest(node, stream_id: int, count: int, runs, key: str = "ingest", random: bool = False) -> int:
    """``count`` messages with offer_batch into a recorded stream, until recorded (msgs/s into
    ``runs``, under ``key``): the recording's id. Zeros, or ``random`` bytes."""
    client, ac = node
    ac.start_recording(CHANNEL, stream_id)
    pub = client.add_exclusive_publication(f"{CHANNEL}?term-length=16m", stream_id)
    rid = ac.await_signal(sulis.archive.RecordingSignal.START).recording_id

    def ingest() -> float:
        t0 = time.perf_counter()
        # Random payloads: 4 MiB of them, cycled.
        publish_batch(pub, bytes(SIZE), 4096, count=count, pool=os.urandom(1 << 22) if random else None)
        await_until(lambda: ac.get_recording_position(rid) >= pub.position, "the archive to record it all", 300)
        return count / (time.perf_counter() - t0)

    runs.measure(key, "sulis", ingest)
    ac.stop_recording(CHANNEL, stream_id)
    pub.close()
    return rid


# ----------------------------------------------------------------- Spark

def read(df, count: int, check: bool = False) -> float:
    """One read of ``df`` into Spark's noop sink (every row and column materialised), or a
    ``count()`` checked to be ``count`` (``check``): rows/s."""
    t0 = time.perf_counter()
    if check and (n := df.count()) != count:
        raise RuntimeError(f"batch read: {n} rows, {count} expected")
    if not check:
        df.write.format("noop").mode("overwrite").save()
    return count / (time.perf_counter() - t0)


def latency(df, send, flush, rate: int, warmup: float, seconds: float, trigger: str) -> dict:
    """Publishes ``rate`` stamped messages/s with ``send`` for ``warmup`` + ``seconds`` while a query
    with ``trigger`` collects the stamps in foreachBatch: p50/p99 (ms) of publish -> row, measured part."""
    from pyspark.sql import functions as F

    lat_ns: list[int] = []
    measure_from = time.time_ns() + int(warmup * 1e9)

    def on_batch(batch_df, _batch_id) -> None:
        rows = batch_df.select(F.substring("value", 1, 8).alias("t")).collect()
        now = time.time_ns()
        lat_ns.extend(now - t for t in (int.from_bytes(row.t, "little") for row in rows) if t >= measure_from)

    query = df.writeStream.foreachBatch(on_batch).trigger(processingTime=trigger).start()
    measured = 0
    try:
        buf, t0, sent = bytearray(SIZE), time.monotonic(), 0
        while (elapsed := time.monotonic() - t0) < warmup + seconds:
            while sent < int(elapsed * rate):
                struct.pack_into("<q", buf, 0, stamp := time.time_ns())
                send(bytes(buf))
                sent, measured = sent + 1, measured + (stamp >= measure_from)
            flush()
            time.sleep(0.0005)
        deadline = time.monotonic() + 60
        while len(lat_ns) < measured and query.exception() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if len(lat_ns) < measured:
            raise RuntimeError(f"query saw {len(lat_ns)} of {measured} messages: {query.exception()}")
        # Where a micro-batch's time goes: Spark's own phases, medians over the batches that read rows.
        prog = [p["durationMs"] for p in query.recentProgress if p["numInputRows"]]
        phases = {k: statistics.median(d.get(k, 0) for d in prog) for k in PHASES} if prog else {}
    finally:
        query.stop()
    s = summarize(histogram(lat_ns))
    return {"p50_ms": s["p50_us"] / 1e3, "p99_ms": s["p99_us"] / 1e3, "rows": len(lat_ns), "published": measured,
            "batch_ms": phases}


def kafka_latency(spark, kafka: Kafka, topic: str, a) -> dict:
    """``latency`` of a Kafka topic read by Spark's Kafka source, fed by a producer with linger.ms=0."""
    producer = kafka.producer(**{"linger.ms": 0})
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.servers)
          .option("subscribe", kafka.topic(topic)).option("startingOffsets", "latest").load())
    try:
        return latency(df, lambda b: producer.produce(topic, b), lambda: producer.poll(0), a.rate, a.warmup,
                       a.seconds, a.trigger)
    finally:
        producer.flush(10)
        producer.close()


# ----------------------------------------------------------------- the run

def spark_session(master: str, kafka_jars: bool):
    if kafka_jars:  # Spark's Kafka source on the session's class path
        jars = ",".join(str(p) for p in sorted((kafka_peer.KAFKA_DIR / "spark" / "libs").glob("*.jar")))
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {jars} pyspark-shell"
    sys.path.insert(0, str(r.ROOT / "examples"))
    from spark_pipeline import spark_session as session  # the main job's session, settings and all

    spark = session(master, "sulis-bench-spark-pipeline")
    sulis.spark.register(spark)
    return spark


class Runs:
    """The figures of every run, each with the CPU share other processes took meanwhile. A Kafka
    measurement that fails ends the Kafka side (``why``); a sulis one that fails ends the run."""

    def __init__(self, why: str | None) -> None:
        self.why = why
        self.figures: dict = {k: {"sulis": [], "kafka": []}
                              for k in ("ingest", "ingest-each", "sustained", "count", "warm-up", "read", "latency",
                                        "latency-ll", "sink-eo", "sink-alo")}
        self.others_cpu: list = []

    def measure(self, key: str, name: str, fn):
        if name == "kafka" and self.why:
            return None
        try:
            with Interference() as itf:
                v = fn()
        except Exception as e:
            if name != "kafka":
                raise
            self.why = f"failed: {type(e).__name__}: {e}"
            print(f"      Kafka {self.why}", flush=True)
            return None
        self.figures[key][name].append(v)
        self.others_cpu.append([key, name, round(itf.share, 3)])
        if key.startswith("latency"):
            text = (f"p50 {v['p50_ms']:.0f} ms, p99 {v['p99_ms']:.0f} ms; a micro-batch (ms): "
                    + ", ".join(f"{k} {x:g}" for k, x in v["batch_ms"].items()))
        elif key.startswith("sink"):
            text = f"addBatch {v['addBatch_ms']:.0f} ms a micro-batch (median of {v['batches']})"
        else:
            text = f"{v:,.0f}/s"
        print(f"      {key} {name}: {text} (others used {itf.share:.0%} of a CPU)", flush=True)
        return v


def run(a, top: str, runs: Runs) -> None:
    kafka = None
    if runs.why is None:
        print("[kafka] starting the broker", flush=True)
        try:
            kafka = Kafka(os.path.join(top, "kafka"))
        except Exception as e:
            runs.why = f"the broker did not start: {type(e).__name__}: {e}"
            print(f"      {runs.why}")
    shm = scratch_dir("sulis-bench-spark-")
    try:
        with sulis.MediaDriver(dir=os.path.join(shm, "driver"), threading_mode="shared",
                               ipc_term_buffer_length="16m") as driver, \
                sulis.Archive(os.path.join(top, "archive"), driver_dir=driver.dir, segment_file_length=1 << 30), \
                sulis.Client(dir=driver.dir) as client, sulis.ArchiveClient(client) as ac:
            rids = []
            for i in range(a.runs):
                # Burst: what fits the page cache, each run after the dirty pages of the ones before were
                # written back (else a run waits for the previous one's writeback).
                print(f"[ingest, burst {i + 1}/{a.runs}]", flush=True)
                os.sync()
                rids.append(sulis_ingest((client, ac), 1001 + i, a.messages, runs))
                os.sync()
                runs.measure("ingest", "kafka", lambda i=i: kafka_peer.ingest(kafka, kafka.topic(f"ingest-{i}"),
                                                                             a.messages, SIZE))
                os.sync()
                runs.measure("ingest-each", "kafka", lambda i=i: kafka_peer.ingest_each(
                    kafka, kafka.topic(f"ingest-each-{i}"), min(a.messages, 1_000_000), SIZE))
            if a.sustained_gb:
                sustained(a, top, (client, ac), kafka, runs)
            spark = spark_session(a.master, kafka is not None)
            try:
                frames = {"sulis": spark.read.format("sulis").option("driverDir", driver.dir)
                          .option("recordingIds", str(rids[0])).option("minPartitions", 2).load()}
                if kafka:
                    frames["kafka"] = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka.servers)
                                       .option("subscribe", "ingest-0").option("startingOffsets", "earliest")
                                       .option("endingOffsets", "latest").option("minPartitions", 2).load())
                print("[batch read] warm-up: a checked count() and an untimed read each", flush=True)
                for name, df in frames.items():
                    runs.measure("count", name, lambda df=df: read(df, a.messages, check=True))
                    runs.measure("warm-up", name, lambda df=df: read(df, a.messages))
                for _ in range(a.reads):
                    for name, df in frames.items():
                        runs.measure("read", name, lambda df=df: read(df, a.messages))
                sink_cost(spark, driver.dir, (client, ac), top, a, runs)
                for i in range(a.runs):
                    print(f"[latency {i + 1}/{a.runs}]", flush=True)
                    sid = 2001 + i
                    ac.start_recording(CHANNEL, sid)
                    pub = client.add_publication(CHANNEL, sid)
                    ac.await_signal(sulis.archive.RecordingSignal.START)

                    def offer(b: bytes, pub=pub) -> None:
                        while pub.offer(b) < 0:
                            pass

                    for key, low in (("latency", "false"), ("latency-ll", "true")):
                        df = (spark.readStream.format("sulis").option("driverDir", driver.dir)
                              .option("channel", CHANNEL).option("streamId", sid).option("startingPositions", "latest")
                              .option("lowLatency", low).load())
                        runs.measure(key, "sulis", lambda df=df, send=offer: latency(
                            df, send, lambda: None, a.rate, a.warmup, a.seconds, a.trigger))
                    ac.stop_recording(CHANNEL, sid)
                    pub.close()
                    runs.measure("latency", "kafka", lambda i=i: kafka_latency(spark, kafka, f"latency-{i}", a))
            finally:
                spark.stop()
    finally:
        remove_dir(shm)
        if kafka:
            kafka.close()


def sink_cost(spark, driver_dir: str, node, top: str, a, runs: Runs) -> None:
    """The sink's cost per micro-batch: the same recording, read ``SINK_BATCH`` messages a micro-batch, through
    the sulis sink with ``exactlyOnce`` (the journal: a claim, a run and a done entry per task, each
    recorded, and the journal read back) and without; the median ``addBatch`` of the micro-batches."""
    client, ac = node
    count = min(a.messages, 20 * SINK_BATCH)
    print(f"[sink] {count:,} messages, {SINK_BATCH:,} a micro-batch, exactlyOnce true and false", flush=True)
    rid = sulis_ingest(node, 1098, count, Runs("no Kafka here"), "ingest")
    for k, exactly_once in enumerate(("true", "false")):
        ac.start_recording(CHANNEL, 1096 + k)

        def run(exactly_once=exactly_once, k=k) -> dict:
            query = (spark.readStream.format("sulis").option("driverDir", driver_dir).option("recordingIds", rid)
                     .option("maxMessagesPerTrigger", SINK_BATCH).option("minPartitions", 2).load().select("value")
                     .writeStream.format("sulis").option("driverDir", driver_dir).option("channel", CHANNEL)
                     .option("streamId", 1096 + k).option("exactlyOnce", exactly_once)
                     .option("checkpointLocation", os.path.join(top, f"sink-{k}")).trigger(availableNow=True).start())
            query.awaitTermination()
            batches = [p["durationMs"]["addBatch"] for p in query.recentProgress if p["numInputRows"] > 0]
            return {"addBatch_ms": statistics.median(batches), "batches": len(batches)}

        runs.measure("sink-eo" if exactly_once == "true" else "sink-alo", "sulis", run)
        ac.stop_recording(CHANNEL, 1096 + k)


def sustained(a, top: str, node, kafka, runs: Runs) -> None:
    """Ingest of at least ``--sustained-gb`` GB and three times what the kernel lets sit dirty in the page
    cache, so the disk sets the pace. The disk's sequential write speed is measured first, with as
    many bytes of random data, on the same file system; then sulis, publishing random bytes too (a
    virtual disk may write zeros faster: the zero payloads of the burst rows recorded at 150% of the
    random-data speed), whose recorded position is sampled to give the rate over the run's second half
    (the steady state, well past the dirty limit) beside the whole run's; and Kafka's produce_batch
    with as many messages."""
    import threading

    dirty = r.dirty_limit_bytes()
    size = max(a.sustained_gb * 1e9, 3 * dirty) if a.sustained_gb >= 1 else a.sustained_gb * 1e9
    count = int(size / FRAME)
    print(f"[ingest, sustained] {size / 1e9:.1f} GB ({count:,} messages): the kernel lets about "
          f"{dirty / 1e9:.1f} GB sit dirty {r.dirty_limits()}", flush=True)
    os.sync()
    disk = r.disk_mb_s(os.path.join(top, "disk"), int(size / (1 << 20)))
    runs.figures.setdefault("disk", {})["MB/s"] = [disk]
    runs.figures["disk"]["GB"] = [size / 1e9]
    print(f"      disk sequential write ({size / 1e9:.1f} GB, 1 MiB writes + fsync): {disk:,.0f} MB/s", flush=True)
    os.sync()
    client, ac = node
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:  # (time, recorded position) of the newest recording of stream 1099
        rid = None
        while not stop.wait(0.25):
            if rid is None:
                found = ac.list_recordings_for_uri(CHANNEL, 1099)
                rid = found[-1].recording_id if found else None
            if rid is not None:
                samples.append((time.perf_counter(), ac.get_recording_position(rid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        sulis_ingest(node, 1099, count, runs, "sustained", random=True)
    finally:
        stop.set()
        sampler.join(5)
    # What the disk row measures: everything written and synced. The recorded position counts bytes
    # handed to the page cache; the sync that follows puts the rest on the device.
    t0 = time.perf_counter()
    os.sync()
    synced = time.perf_counter() - t0
    ingest_s = count / runs.figures["sustained"]["sulis"][-1]
    to_disk = count * FRAME / (ingest_s + synced) / 1e6
    runs.figures["disk"]["synced MB/s"] = [to_disk]
    print(f"      sulis to the disk: {to_disk:,.0f} MB/s ({ingest_s:.1f} s recording, {synced:.1f} s sync after)",
          flush=True)
    half = [(t, p) for t, p in samples if p >= samples[-1][1] / 2] if samples else []
    if len(half) >= 2 and half[-1][0] > half[0][0]:
        steady = (half[-1][1] - half[0][1]) / (half[-1][0] - half[0][0]) / 1e6
        runs.figures["disk"]["steady MB/s"] = [steady]
        print(f"      sulis recorded {steady:,.0f} MB/s over the run's second half", flush=True)
    os.sync()
    runs.measure("sustained", "kafka", lambda: kafka_peer.ingest(kafka, kafka.topic("sustained"), count, SIZE))
    os.sync()


def report(a, runs: Runs) -> None:
    fig, why = runs.figures, runs.why
    med = statistics.median

    def cell(xs, fmt):
        return fmt(med(xs)) if xs else ("skipped" if why else "failed")

    def each(xs, fmt):
        return " / ".join(fmt(x) for x in xs)

    def figures(key):  # sulis's and Kafka's runs; "p50_ms@latency-ll": lowLatency's against Kafka's
        stat, _, sulis_key = key.partition("@")
        if stat.endswith("ms"):
            return [x[stat] for x in fig[sulis_key or "latency"]["sulis"]], [x[stat] for x in fig["latency"]["kafka"]]
        return fig[stat]["sulis"], fig[sulis_key or stat]["kafka"]

    fmt = {"ingest": lambda x: f"{x / 1e3:,.0f} k msgs/s", "read": lambda x: f"{x / 1e6:.2f} M rows/s",
           "ms": lambda x: f"{x:.0f} ms", "sustained": lambda x: f"{x / 1e3:,.0f} k msgs/s"}
    rows = []
    keys = [("ingest", "ingest, burst (publisher -> recorded), Kafka produce_batch"),
            ("ingest@ingest-each", "ingest, burst, Kafka per-message produce()")]
    if a.sustained_gb:
        gb = fig.get("disk", {}).get("GB", [a.sustained_gb])[0]
        keys.append(("sustained", f"ingest, sustained {gb:.1f} GB, Kafka produce_batch"))
    for key, what in (*keys,
                      ("read", "Spark batch read (noop sink)"),
                      ("p50_ms", f"streaming latency p50 (trigger {a.trigger})"),
                      ("p99_ms", f"streaming latency p99 (trigger {a.trigger})"),
                      ("p50_ms@latency-ll", "  the same, sulis lowLatency=true, p50"),
                      ("p99_ms@latency-ll", "  the same, sulis lowLatency=true, p99")):
        s, k = figures(key)
        f = fmt["ms" if "ms" in key else key.split("@")[0]]
        ratio = (med(k) / med(s) if "ms" in key else med(s) / med(k)) if s and k else None
        rows.append([what, cell(s, f), cell(k, f), fmt_ratio(ratio), each(s, f), each(k, f)])
    print(f"\n{a.messages:,} messages of {SIZE} B, Spark {a.master}, {cpu_summary()}")
    print_table(["row", "sulis", "Kafka", "sulis vs Kafka", "sulis runs", "Kafka runs"], rows, "lrrrll")
    eo, alo = fig["sink-eo"]["sulis"], fig["sink-alo"]["sulis"]
    if eo and alo:
        print(f"sulis sink, per micro-batch of {SINK_BATCH:,} rows (median addBatch): exactlyOnce=true "
              f"{eo[0]['addBatch_ms']:.0f} ms, exactlyOnce=false {alo[0]['addBatch_ms']:.0f} ms "
              f"({eo[0]['batches']} and {alo[0]['batches']} micro-batches)")
    print("(burst: each run fits the page cache and starts after the dirty pages were written back; "
          "sustained: more than the kernel lets sit dirty, so the disk sets the pace)")
    disk = fig.get("disk", {}).get("MB/s")
    steady = fig.get("disk", {}).get("steady MB/s")
    synced = fig.get("disk", {}).get("synced MB/s")
    if a.sustained_gb and disk and fig["sustained"]["sulis"]:
        recorded = med(fig["sustained"]["sulis"]) * FRAME / 1e6
        kafka_mb = f"; Kafka {med(fig['sustained']['kafka']) * SIZE / 1e6:,.0f} MB/s of payload" \
            if fig["sustained"].get("kafka") else ""
        print(f"sustained: the disk's sequential write in this run {disk[0]:,.0f} MB/s; sulis records "
              f"{recorded:,.0f} MB/s over the whole run ({FRAME} B a message, {recorded / disk[0]:.0%})"
              + (f", {steady[0]:,.0f} MB/s over its second half ({steady[0] / disk[0]:.0%})" if steady else "")
              + (f"; to the disk, as the disk row (recorded, then synced): {synced[0]:,.0f} MB/s "
                 f"({synced[0] / disk[0]:.0%})" if synced else "")
              + kafka_mb)
        held = synced[0] if synced else recorded
        print(f"target sustained ingest (to the disk) >= 80% of the disk's sequential write: "
              f"{verdict(held >= 0.8 * disk[0])}")
    print("(ratios: > 1 means sulis is better: faster, or lower latency)" + (f"\nKafka skipped: {why}" if why else ""))
    targets = [("ingest >= 10x Kafka produce_batch", "ingest", lambda s, k: s >= 10 * k),
               ("ingest >= 10x Kafka per-message produce()", "ingest@ingest-each", lambda s, k: s >= 10 * k),
               ("batch read >= 3 M rows/s", "read", lambda s, k: s >= 3e6),
               ("batch read >= 3x Kafka", "read", lambda s, k: s >= 3 * k),
               ("streaming latency p50 below Kafka's", "p50_ms", lambda s, k: s < k),
               ("streaming latency p99 below Kafka's", "p99_ms", lambda s, k: s < k),
               ("streaming latency p50 below Kafka's, lowLatency=true", "p50_ms@latency-ll", lambda s, k: s < k),
               ("streaming latency p99 below Kafka's, lowLatency=true", "p99_ms@latency-ll", lambda s, k: s < k)]
    for text, key, ok in targets:
        s, k = figures(key)
        if s and (k or "Kafka" not in text):
            print(f"target {text}: {verdict(ok(med(s), med(k) if k else 0))}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=5_000_000, help="messages per ingest run and batch read (5 M)")
    ap.add_argument("--runs", type=int, default=3, help="ingest and latency runs per system (3)")
    ap.add_argument("--reads", type=int, default=5, help="timed batch reads per system (5)")
    ap.add_argument("--rate", type=int, default=1000, help="streaming messages/s (1000)")
    ap.add_argument("--seconds", type=float, default=15.0, help="measured seconds per latency run (15)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of a latency run left out (5)")
    ap.add_argument("--trigger", default="0 seconds", help="the queries' processingTime trigger (0 seconds)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", default=None, help="where the archive and Kafka's logs go [a temp dir]")
    ap.add_argument("--no-kafka", action="store_true", help="sulis alone")
    ap.add_argument("--sustained-gb", type=float, default=8.0,
                    help="GB of the sustained ingest row at least (8; 0: none); from 1 GB up, at least three "
                         "times what the kernel lets sit dirty")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 200 k messages, 1 run, 2 reads, 4 s, "
                    "0.5 GB sustained")
    ap.set_defaults(**(dict(messages=200_000, runs=1, reads=2, seconds=4.0, sustained_gb=0.5)
                       if "--quick" in sys.argv else {}))
    a = ap.parse_args()
    if min(a.messages, a.runs, a.reads, a.rate) < 1 or a.seconds <= 0:
        ap.error("--messages, --runs, --reads, --rate and --seconds must be positive")
    r.require_release_build()
    top = tempfile.mkdtemp(prefix="sulis-bench-spark-pipeline-", dir=a.dir)
    why = "--no-kafka" if a.no_kafka else kafka_peer.missing()
    runs, started = Runs(why), time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        run(a, top, runs)
    finally:
        shutil.rmtree(top, ignore_errors=True)
        save(r.results_dir(), "spark_pipeline", {"started": started, "options": vars(a), "kafka_skipped": runs.why,
                                                 "figures": runs.figures, "others_cpu": runs.others_cpu})
    report(a, runs)
    return 0


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
