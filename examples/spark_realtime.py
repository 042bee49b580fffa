"""The main job in Spark's real-time mode: ticks through sulis into Spark and back out into sulis, each as it
comes, with the end-to-end latency measured and every tick checked.

``python examples/spark_realtime.py`` (``bash scripts/demo.sh --real-time``) runs, in this process:

1. an embedded media driver and an archive recording ``aeron:ipc`` streams 1001 and 1002;
2. the main job's publisher (``spark_pipeline.Publisher``) offering packed ticks at ``--rate`` per second,
   each batch stamped with the time it is offered (the reserved value, epoch ns);
3. a real-time-mode query (``trigger(realTime=...)``) on the JVM source (``sulis.spark.JVM_FORMAT``, the
   jar on the session): ``valueSchema`` decodes the ticks, ``includeTimestamp`` gives the publisher's stamp;
   it keeps the ticks with a quantity (all of them: Spark 4.2's real-time mode is stateless, aggregations
   come in 4.3) and the JVM sink publishes each one's position (8 bytes), stamped with the publisher's stamp
   (``stampTimestamp``), into stream 1002 as it comes, exactly once (the sink's journal: a batch Spark runs
   again skips what its earlier attempt published);
4. this process subscribes to stream 1002 and prints, once a second, the ticks back out of Spark and the
   latency from ``offer`` into sulis to back out of Spark (p50, p99, max);
5. at the end it checks that every published tick came back once: one position each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spark_pipeline import CHANNEL, STREAM_ID, TICK_SCHEMA, Publisher, tick_node  # noqa: E402
from spark_pipeline import spark_session as pipeline_session  # noqa: E402

OUT_STREAM_ID = 1002


class Returns(threading.Thread):
    """Polls stream 1002: each message a tick's position (8 bytes, big-endian), its reserved value the
    publisher's stamp (epoch ns, microsecond precision after Spark)."""

    def __init__(self, sub) -> None:
        super().__init__(name="returns", daemon=True)
        self.sub = sub
        self.positions: list[np.ndarray] = []
        self.latencies_us: list[np.ndarray] = []
        #: when (monotonic) each batch of latencies came back
        self.at: list[float] = []
        self.count = 0
        self.stop_now = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_now.is_set():
                b = self.sub.poll_batch(4096)
                n = len(b)
                if not n:
                    time.sleep(0.0001)
                    continue
                now = time.time_ns()
                lengths = np.frombuffer(b.lengths, np.int32)
                if (lengths != 8).any():
                    raise ValueError(f"a message of {int(lengths[lengths != 8][0])} bytes on stream {OUT_STREAM_ID}")
                self.positions.append(np.frombuffer(b.data, ">i8").astype(np.int64))
                self.latencies_us.append((now - np.frombuffer(b.reserved_values, np.int64)) / 1e3)
                self.at.append(time.monotonic())
                self.count += n
        except BaseException as e:  # reported by the main thread
            self.error = e

    def recent(self, since: int) -> np.ndarray:
        return np.concatenate(self.latencies_us[since:]) if len(self.latencies_us) > since else np.zeros(0)


def spark_session(master: str, jar: str):
    """The main job's session, with the sulis jar on it."""
    return pipeline_session(master, "sulis-realtime", {
        "spark.jars": jar,
        # Spark admits its allowlisted sinks to real-time mode; the sulis JVM sink is not on the list.
        "spark.sql.streaming.realTimeMode.allowlistCheck": "false",
    })


def start_query(spark, driver_dir: str, checkpoint: str, trigger: str):
    import sulis.spark

    ticks = (spark.readStream.format(sulis.spark.JVM_FORMAT)
             .option("driverDir", driver_dir)
             .option("channel", CHANNEL).option("streamId", STREAM_ID)
             .option("valueSchema", TICK_SCHEMA)
             .option("includeTimestamp", "true")
             .load())
    out = ticks.where("qty >= 1").selectExpr("unhex(lpad(hex(position), 16, '0')) as value", "timestamp")
    return (out.writeStream.format(sulis.spark.JVM_FORMAT)
            .option("driverDir", driver_dir)
            .option("channel", CHANNEL).option("streamId", OUT_STREAM_ID)
            .option("stampTimestamp", "true")
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime=trigger)
            .queryName("ticks_forwarded")
            .start())


def percentiles(us: np.ndarray) -> str:
    if not len(us):
        return "-"
    p50, p99 = np.percentile(us, [50, 99])
    return f"p50 {p50 / 1e3:6.2f} ms  p99 {p99 / 1e3:7.2f} ms  max {us.max() / 1e3:7.1f} ms"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=20_000, help="ticks per second (default 20000)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of publishing (default 20)")
    ap.add_argument("--instruments", type=int, default=1000, help="instruments (default 1000)")
    ap.add_argument("--trigger", default="5 seconds",
                    help="real-time mode's checkpoint interval (default '5 seconds', its shortest)")
    ap.add_argument("--master", default="local[2]",
                    help="Spark master (default local[2]: real-time mode holds a task slot per partition)")
    ap.add_argument("--out", help="where the checkpoint and recording go (default: a new temp directory)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the last ticks")
    ap.add_argument("--warmup", type=float, default=2.0,
                    help="seconds after the first tick comes back left out of the latency summary (default 2): "
                         "ticks published before the query's first batch ran wait for it")
    args = ap.parse_args(argv)

    import sulis
    import sulis.spark

    jar = sulis.spark.jar()
    if not os.path.exists(jar):
        print(f"no sulis jar at {jar}: bash scripts/build_jar.sh builds it (it needs a JDK 17)", file=sys.stderr)
        return 2
    out = args.out or tempfile.mkdtemp(prefix="sulis-realtime-")
    os.makedirs(out, exist_ok=True)
    archive_dir, checkpoint = (os.path.join(out, d) for d in ("archive", "checkpoint"))
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    driver_dir = tempfile.mkdtemp(prefix="sulis-realtime-driver-", dir=shm)
    print(f"sulis real-time pipeline: {args.rate:,} ticks/s for {args.duration:g} s, Spark {args.master} in "
          f"real-time mode (trigger {args.trigger}) (sulis {sulis.__version__}, {sulis.build_profile} build)")
    ok, verdict = False, "FAILED"
    with tick_node(archive_dir, driver_dir) as (driver, client, ac, pub):
        # The sink is exactly once into a recorded stream: the archive records what comes back out of Spark.
        ac.start_recording(CHANNEL, OUT_STREAM_ID)
        returns = Returns(client.add_subscription(CHANNEL, OUT_STREAM_ID))
        returns.start()
        t0 = time.monotonic()
        spark = spark_session(args.master, jar)
        print(f"  Spark session up in {time.monotonic() - t0:.1f} s")
        publisher = Publisher(pub, args.rate, args.duration, args.instruments, 0.0, stamp=True)
        try:
            query = start_query(spark, driver.dir, checkpoint, args.trigger)
            # The query's first batch plans its partitions: the first ticks go out once it runs.
            publisher.start()
            seen, started = 0, time.monotonic()
            while not publisher.done.wait(1.0):
                print(f"  {time.monotonic() - started:5.1f}s  published {publisher.published:>9,}  back out of Spark "
                      f"{returns.count:>9,}  latency {percentiles(returns.recent(seen))}", flush=True)
                seen = len(returns.latencies_us)
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                if returns.error is not None:
                    raise returns.error
            if publisher.error is not None:
                raise publisher.error
            total = publisher.published
            deadline = time.monotonic() + args.timeout
            while returns.count < total and time.monotonic() < deadline:
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                time.sleep(0.2)
            time.sleep(0.5)  # anything more would be a duplicate
            query.stop()
            returns.stop_now.set()
            returns.join(timeout=10)
            if returns.error is not None:
                raise returns.error
            positions = np.concatenate(returns.positions) if returns.positions else np.zeros(0, np.int64)
            distinct = len(np.unique(positions))
            duplicates = len(positions) - distinct
            first = returns.at[0] if returns.at else 0.0
            steady = [x for x, at in zip(returns.latencies_us, returns.at, strict=True) if at - first >= args.warmup]
            print(f"  check: {total:,} ticks published, {len(positions):,} back out of Spark, {distinct:,} distinct, "
                  f"{duplicates:,} duplicated")
            if steady:
                us = np.concatenate(steady)
                p50, p99, p999 = np.percentile(us, [50, 99, 99.9])
                print(f"  latency, offer into sulis to back out of Spark in real-time mode ({len(us):,} ticks, the "
                      f"first {args.warmup:g} s left out): p50 {p50 / 1e3:.2f} ms, p99 {p99 / 1e3:.2f} ms, "
                      f"p99.9 {p999 / 1e3:.2f} ms, max {us.max() / 1e3:.1f} ms")
            ok = distinct == total and not duplicates
            verdict = ("OK, every tick forwarded exactly once" if ok else
                       f"FAILED: {total - distinct:,} ticks never came back, {duplicates:,} came back twice")
        finally:
            publisher.stop_now.set()
            publisher.join(timeout=10)
            returns.stop_now.set()
            spark.stop()
    shutil.rmtree(driver_dir, ignore_errors=True)
    print(f"  recording: {archive_dir} (sulis archive-tool {archive_dir} list)")
    print(f"sulis real-time pipeline: {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
