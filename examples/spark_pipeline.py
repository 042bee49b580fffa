"""The main job: market ticks through sulis, recorded by the archive, aggregated by Spark, checked.

``python examples/spark_pipeline.py`` (``bash scripts/demo.sh``) runs, in this process:

1. an embedded media driver and an archive recording ``aeron:ipc`` stream 1001;
2. a publisher thread offering synthetic ticks of many instruments at ``--rate`` per second with
   ``offer_batch`` — each tick a packed little-endian struct::

       instrument int32 | price float64 | qty int32 | event_time int64 (ns since the epoch)

   event times run a little behind the wall clock (out of order by up to ``--jitter`` ms);
3. a Structured Streaming query on a local Spark session: ``readStream.format("sulis")`` with
   ``valueSchema`` (the struct decoded into columns by a numpy view, no loop per row), a
   watermark, ticks / volume / low / high per instrument and event-time window, appended to
   Parquet with a checkpoint;
4. progress once a second: ticks published, rows read by Spark and its rate, the lag between
   them, micro-batch durations;
5. at the end one tick far in the future moves the watermark past every window, and the job
   checks that every published tick is counted exactly once, window by window, in the Parquet
   output read through Spark, and says where the output lies.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa

CHANNEL = "aeron:ipc"
STREAM_ID = 1001
TICK = np.dtype([("instrument", "<i4"), ("price", "<f8"), ("qty", "<i4"), ("event_time", "<i8")])
TICK_SCHEMA = "instrument int, price double, qty int, event_time timestamp"
FLUSH_INSTRUMENT = -1  # the last tick: far in the future, it closes every real window


class Publisher(threading.Thread):
    """Offers ticks at ``rate`` per second in slices of ``slice_s`` with ``offer_batch``."""

    def __init__(self, pub, rate: int, duration: float, instruments: int, jitter_ms: float, seed: int = 1,
                 stamp: bool = False) -> None:
        super().__init__(name="tick-publisher", daemon=True)
        self.pub = pub
        self.rate = rate
        self.duration = duration
        self.instruments = instruments
        self.jitter_ns = int(jitter_ms * 1e6)
        #: each batch's reserved value the time it is offered (epoch ns), for the real-time job's latency
        self.stamp = stamp
        self.rng = np.random.default_rng(seed)
        self.prices = 100.0 + self.rng.random(instruments) * 50
        self.published = 0
        self.back_pressured_s = 0.0
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.stop_now = threading.Event()
        # what was published, for the final check: instrument and event-time window per tick
        self.sent_instruments: list[np.ndarray] = []
        self.sent_times: list[np.ndarray] = []
        self.started_at = 0.0
        self.finished_at = 0.0

    def ticks(self, n: int) -> np.ndarray:
        t = np.zeros(n, TICK)
        instruments = self.rng.integers(0, self.instruments, n, dtype=np.int32)
        self.prices[instruments] *= 1 + self.rng.normal(0, 1e-4, n)
        t["instrument"] = instruments
        t["price"] = self.prices[instruments]
        t["qty"] = self.rng.integers(1, 100, n, dtype=np.int32)
        t["event_time"] = time.time_ns() - self.rng.integers(0, self.jitter_ns + 1, n)
        return t

    def offer(self, t: np.ndarray) -> None:
        n = len(t)
        offsets = np.arange(n + 1, dtype=np.int32) * TICK.itemsize
        values = pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(t.tobytes())])
        sent = 0
        stuck_since = time.monotonic()
        while sent < n:
            published, result = self.pub.offer_batch(values.slice(sent) if sent else values,
                                                     reserved_values=time.time_ns() if self.stamp else None)
            sent += published
            if sent < n:
                if result == -4 or result == -5:  # CLOSED, MAX_POSITION_EXCEEDED
                    raise RuntimeError(f"publication refused the ticks: {result}")
                if time.monotonic() - stuck_since > 30:
                    raise TimeoutError("the publication refused ticks for 30 s (is the archive recording?)")
                t0 = time.monotonic()
                time.sleep(0.0002)
                self.back_pressured_s += time.monotonic() - t0
            else:
                stuck_since = time.monotonic()
        self.published += n

    def run(self) -> None:
        try:
            self.started_at = time.monotonic()
            slice_s = 0.005
            while not self.stop_now.is_set():
                elapsed = time.monotonic() - self.started_at
                if elapsed >= self.duration:
                    break
                due = int(min(elapsed, self.duration) * self.rate) - self.published
                if due > 0:
                    t = self.ticks(due)
                    self.offer(t)
                    self.sent_instruments.append(t["instrument"].copy())
                    self.sent_times.append(t["event_time"].copy())
                time.sleep(slice_s)
            self.finished_at = time.monotonic()
        except BaseException as e:  # reported by the main thread
            self.error = e
        finally:
            self.done.set()

    def flush(self, watermark_s: float) -> None:
        """One tick far past every window, so the watermark passes them all."""
        t = np.zeros(1, TICK)
        t["instrument"] = FLUSH_INSTRUMENT
        t["event_time"] = time.time_ns() + int((watermark_s + 3600) * 1e9)
        self.offer(t)


def expected_counts(pub: Publisher, window_s: int) -> dict[tuple[int, int], int]:
    """Ticks per (instrument, window start in seconds) as published."""
    if not pub.sent_instruments:
        return {}
    instruments = np.concatenate(pub.sent_instruments).astype(np.int64)
    windows = np.concatenate(pub.sent_times) // (window_s * 1_000_000_000) * window_s
    w0 = int(windows.min())
    keys = instruments * (1 << 32) + (windows - w0)
    uniq, counts = np.unique(keys, return_counts=True)
    return {(int(k >> 32), int(k & 0xFFFF_FFFF) + w0): int(c) for k, c in zip(uniq, counts, strict=True)}


@contextlib.contextmanager
def tick_node(archive_dir: str, driver_dir: str):
    """An embedded media driver and an archive recording the ticks' stream, and a client:
    ``(driver, client, archive client, publication of the ticks)``."""
    import sulis

    with sulis.MediaDriver(dir=driver_dir, threading_mode="shared", ipc_term_buffer_length="16m",
                           dir_delete_on_shutdown=True) as driver, \
            sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=256 << 20), \
            sulis.Client(dir=driver.dir) as client, sulis.ArchiveClient(client) as ac:
        ac.start_recording(CHANNEL, STREAM_ID)
        try:
            yield driver, client, ac, client.add_publication(CHANNEL, STREAM_ID)
        finally:
            ac.stop_recording(CHANNEL, STREAM_ID)


def spark_session(master: str, app: str = "sulis-pipeline", conf: dict[str, str] | None = None):
    """A local Spark session for the job (``conf``: more settings)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app)
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = (builder
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_query(spark, driver_dir: str, out: str, checkpoint: str, window_s: int, watermark_s: int,
                trigger_s: float, max_bytes: int):
    from pyspark.sql import functions as F

    ticks = (spark.readStream.format("sulis")
             .option("driverDir", driver_dir)
             .option("channel", CHANNEL).option("streamId", STREAM_ID)
             .option("valueSchema", TICK_SCHEMA)
             .option("maxBytesPerTrigger", max_bytes)
             .load())
    bars = (ticks.withWatermark("event_time", f"{watermark_s} seconds")
            .groupBy(F.window("event_time", f"{window_s} seconds"), "instrument")
            .agg(F.count(F.lit(1)).alias("ticks"), F.sum("qty").alias("volume"),
                 F.min("price").alias("low"), F.max("price").alias("high"))
            .select(F.col("window.start").alias("window_start"), "instrument", "ticks", "volume", "low", "high"))
    return (bars.writeStream.format("parquet").outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{trigger_s} seconds")
            .queryName("ticks_by_window")
            .start(out))


class Progress:
    """Reads the query's progress reports (each batch once) and prints a line per second."""

    def __init__(self, query, pub: Publisher) -> None:
        self.query = query
        self.pub = pub
        self.seen: set[int] = set()
        self.rows = 0
        self.durations_ms: list[int] = []
        self.started = time.monotonic()
        self.last_rows = 0
        self.last_at = self.started

    def poll(self) -> None:
        for p in self.query.recentProgress:
            if p["batchId"] in self.seen:
                continue
            self.seen.add(p["batchId"])
            self.rows += p["numInputRows"]
            if p["numInputRows"]:
                self.durations_ms.append(p["durationMs"].get("triggerExecution", 0))

    def line(self) -> str:
        self.poll()
        now = time.monotonic()
        rate = (self.rows - self.last_rows) / max(now - self.last_at, 1e-9)
        self.last_rows, self.last_at = self.rows, now
        recent = self.durations_ms[-5:]
        batch = f"{int(np.mean(recent))} ms" if recent else "-"
        lag = max(0, self.pub.published - self.rows)
        return (f"  {now - self.started:6.1f}s  published {self.pub.published:>11,}  read by Spark {self.rows:>11,}"
                f"  ({rate / 1e3:7.1f} k rows/s)  lag {lag:>9,} ticks  batches {len(self.durations_ms):>4}"
                f"  last batches {batch}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sulis-pipeline", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=200_000, help="ticks per second (default 200000)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of publishing (default 20)")
    ap.add_argument("--instruments", type=int, default=1000, help="instruments (default 1000)")
    ap.add_argument("--window", type=int, default=1, help="event-time window, seconds (default 1)")
    ap.add_argument("--watermark", type=int, default=3, help="watermark delay, seconds (default 3)")
    ap.add_argument("--jitter", type=float, default=200.0, help="event times up to this many ms late (default 200)")
    ap.add_argument("--trigger", type=float, default=1.0, help="micro-batch trigger interval, seconds (default 1)")
    ap.add_argument("--max-bytes-per-trigger", type=int, default=256 << 20, help="source read limit per batch")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--out", help="output directory (default: a new one under the temp directory)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the last windows")
    args = ap.parse_args(argv)
    if args.watermark * 1000 <= args.jitter:
        ap.error("--watermark must exceed --jitter, or late ticks would be dropped (and the check fail)")

    import sulis
    import sulis.spark

    out = args.out or tempfile.mkdtemp(prefix="sulis-pipeline-")
    os.makedirs(out, exist_ok=True)
    archive_dir, checkpoint, parquet = (os.path.join(out, d) for d in ("archive", "checkpoint", "ticks_by_window"))
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    driver_dir = tempfile.mkdtemp(prefix="sulis-pipeline-driver-", dir=shm)
    print(f"sulis pipeline: {args.rate:,} ticks/s for {args.duration:g} s, {args.instruments:,} instruments, "
          f"{args.window} s windows, watermark {args.watermark} s, Spark {args.master} "
          f"(sulis {sulis.__version__}, {sulis.build_profile} build)")
    print(f"  output in {out}")
    ok = False
    with tick_node(archive_dir, driver_dir) as (driver, _, _, pub):
        t0 = time.monotonic()
        spark = spark_session(args.master)
        sulis.spark.register(spark)
        # One read through the source starts Spark's Python workers (pyarrow, sulis) before the clock runs.
        spark.read.format("sulis").option("driverDir", driver.dir).option("channel", CHANNEL) \
            .option("streamId", STREAM_ID).load().count()
        print(f"  Spark session up and warmed in {time.monotonic() - t0:.1f} s")
        publisher = Publisher(pub, args.rate, args.duration, args.instruments, args.jitter)
        try:
            query = start_query(spark, driver.dir, parquet, checkpoint, args.window, args.watermark, args.trigger,
                                args.max_bytes_per_trigger)
            publisher.start()
            progress = Progress(query, publisher)
            while not publisher.done.wait(1.0):
                print(progress.line(), flush=True)
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
            if publisher.error is not None:
                raise publisher.error
            total = publisher.published
            publisher.flush(args.watermark)
            pub_s = publisher.finished_at - publisher.started_at
            print(f"  published {total:,} ticks in {pub_s:.1f} s "
                  f"({total / max(pub_s, 1e-9) / 1e6:.2f} M ticks/s, back pressure "
                  f"{publisher.back_pressured_s:.2f} s); waiting for Spark to close every window")
            expected = expected_counts(publisher, args.window)
            deadline = time.monotonic() + args.timeout
            counted = -1
            while time.monotonic() < deadline:
                print(progress.line(), flush=True)
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                if progress.rows > total:  # the flush tick was read: see whether every window is out
                    counted = count_output(spark, parquet)
                    if counted >= total:
                        break
                time.sleep(1.0)
            query.stop()
            ok = check(spark, parquet, expected, total, args.window)
            durations = progress.durations_ms
            if durations:
                print(f"  Spark: {len(durations)} micro-batches with data, duration p50 "
                      f"{int(np.percentile(durations, 50))} ms, max {max(durations)} ms")
        finally:
            publisher.stop_now.set()
            publisher.join(timeout=10)
            spark.stop()
    shutil.rmtree(driver_dir, ignore_errors=True)
    print(f"  output: {parquet} (Parquet; read it with spark.read.parquet, which follows _spark_metadata)")
    print(f"  recording: {archive_dir} (sulis archive-tool {archive_dir} list)")
    print("sulis pipeline: " + ("OK, every tick counted exactly once" if ok else "FAILED"))
    return 0 if ok else 1


def count_output(spark, parquet: str) -> int:
    from pyspark.sql import functions as F

    if not os.path.isdir(os.path.join(parquet, "_spark_metadata")):
        return 0
    row = spark.read.parquet(parquet).where(F.col("instrument") >= 0).agg(F.sum("ticks")).first()
    return int(row[0] or 0)


def check(spark, parquet: str, expected: dict[tuple[int, int], int], total: int, window_s: int) -> bool:
    """Every (instrument, window) once, with the published number of ticks."""
    rows = spark.read.parquet(parquet).where("instrument >= 0").select("instrument", "window_start", "ticks").collect()
    got: dict[tuple[int, int], int] = {}
    duplicates = 0
    for r in rows:
        key = (r.instrument, int(r.window_start.timestamp()))
        if key in got:
            duplicates += 1
        got[key] = got.get(key, 0) + r.ticks
    counted = sum(got.values())
    wrong = [k for k in expected if got.get(k) != expected[k]]
    extra = [k for k in got if k not in expected]
    print(f"  check: {total:,} ticks published, {counted:,} counted in {len(got):,} (instrument, window) rows; "
          f"{len(wrong)} rows differ, {len(extra)} unexpected, {duplicates} duplicated")
    for k in wrong[:5]:
        print(f"    instrument {k[0]} window {k[1]}: published {expected[k]}, counted {got.get(k)}")
    return counted == total and not wrong and not extra and not duplicates


if __name__ == "__main__":
    sys.exit(main())
