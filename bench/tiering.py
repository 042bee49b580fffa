#!/usr/bin/env python3
"""Tiered storage: recording with segments moving to an S3-compatible object store as they close, against
recording without; replays and Spark reads from the disk and from the store; a Kafka broker with the same
retention settings beside it.

    python bench/tiering.py            # 1 GiB of 1 KiB messages, 3 runs (~5 min)
    python bench/tiering.py --quick    # 1 run of 64 MiB (smoke test)
    python bench/tiering.py --mb 10240 --record-only --upload-rate 8m,64m,0   # the record rows only

``--upload-rate`` paces the uploads (the archive's ``tier_upload_rate``; a comma-separated list with
``--record-only``: a tiering-on run per rate in each round). ``--record-only`` times the recording alone and
closes the archive with what is left to move still queued (the close does not wait for it).

Rows, each the median of ``--runs`` runs; the archive directory is on the disk (``--dir``, default a fresh
directory under the temporary directory), the store is S3Proxy (``bench/peers/s3proxy.py``: its own Java
process on loopback, its objects in a directory beside the archive's, on the same disk):

* record, tiering off / on (which goes first alternates; dirty pages are written back before each run): an
  embedded driver (shared thread) and archive record ``--mb`` MiB of 1 KiB
  messages published with ``offer_batch`` over IPC (16 MiB terms) into 16 MiB segment files; the time runs
  from the first offer to the recorded position reaching the end. With tiering on the policy is
  ``stream=* tier-after=0s``: every segment moves (MD5 and CRC-32C, PUT, HEAD, log line, local removal) as
  soon as the recording has written past it, while the recording runs, and S3Proxy (the store) works on the
  same two cores.
* moved: from the first offer until every closed segment is in the store and gone from the disk.
* replay from the disk / from the store: the whole recording replayed over IPC to a ``poll_batch``
  subscriber; from the store, every segment but the last is fetched (and checked) first.
* Spark batch read, ``local[2]``, ``count()`` of every row: files mode with every segment on the disk,
  replay mode with the segments in the store (the archive fetches them), files mode with the segments in the
  store (the Spark workers fetch them themselves, no archive in the path). The archive keeps one segment in
  its cache (``tier_cache_size``), so every replay from the store fetches what it reads. An untimed run first
  starts Spark's Python workers.
* Kafka 4.3.1: one topic with ``retention.ms``/``retention.bytes`` and 16 MiB segments, the same messages
  with ``produce_batch`` and ``acks=all`` (Kafka's tiered storage needs a RemoteStorageManager plugin that
  Apache Kafka does not ship, so the row is its local retention's). Needs ``bash bench/peers/install.sh``.

The page cache absorbs most of the writes at these sizes (the disk row shows the disk's own pace).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sulis
from sulis import _native
from sulis._benchkit import runner as r
from sulis._benchkit.loops import publish_batch
from sulis._benchkit.procs import remove_dir, scratch_dir
from sulis._benchkit.report import fmt_ratio, print_table
from sulis.archive import RecordingSignal

r.repository(__file__)
from bench.peers import s3proxy  # noqa: E402

LENGTH = 1024
SEGMENT = 16 << 20
BATCH = 1024
STREAM = 1001


def _moved(archive_dir: str, rid: int) -> bool:
    where = [loc for _, _, loc, _, _ in _native.archive_segments(archive_dir, rid)]
    return len(where) > 1 and where[:-1] == ["store"] * (len(where) - 1) and where[-1] == "disk"


def sulis_run(base: str, count: int, store: s3proxy.S3Server | None, spark=None,
              upload_rate: str = "0", record_only: bool = False) -> dict[str, float]:
    """One recording of ``count`` messages, with segments moving to ``store`` (or not, paced at ``upload_rate``
    bytes a second), then its replays (and Spark reads): seconds per row."""
    out: dict[str, float] = {}
    shm = scratch_dir("sulis-bench-tiering-")
    archive_dir = os.path.join(base, "archive")
    os.makedirs(archive_dir)
    tier = {}
    if store is not None:
        with open(os.path.join(archive_dir, "retention.policy"), "w") as f:
            f.write("stream=* tier-after=0s\n")
        # A cache of one segment: every replay from the store fetches what it reads.
        tier = {"tier_store": store.url("bench", os.path.basename(base)), "retention_check_interval": "50ms",
                "tier_cache_size": SEGMENT, "tier_upload_rate": upload_rate}
    try:
        with sulis.MediaDriver(dir=os.path.join(shm, "driver"), threading_mode="shared",
                               term_buffer_sparse_file=True, ipc_term_buffer_length="16m") as driver, \
                sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=SEGMENT,
                              low_storage_space_threshold=0, **tier) as archive, \
                sulis.Client(dir=driver.dir) as client, sulis.ArchiveClient(client) as ac:
            ac.start_recording("aeron:ipc", STREAM)
            pub = client.add_exclusive_publication("aeron:ipc?term-length=16m", STREAM)
            rid = ac.await_signal(RecordingSignal.START).recording_id
            os.sync()  # no run starts with the last one's dirty pages still to write back
            t0 = time.perf_counter()
            publish_batch(pub, bytes(LENGTH), BATCH, count=count)
            end = pub.position
            while ac.get_recording_position(rid) < end:
                time.sleep(0.0002)
            out["record"] = time.perf_counter() - t0
            ac.stop_recording("aeron:ipc", STREAM)
            ac.await_signal(RecordingSignal.STOP, rid)
            pub.close()
            if record_only:
                return out
            if store is not None:
                while not _moved(archive_dir, rid):
                    time.sleep(0.005)
                out["moved"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            sub = ac.replay(rid, "aeron:ipc", 2002)
            got = 0
            while got < count:
                got += len(sub.poll_batch(65536))
            out["replay"] = time.perf_counter() - t0
            sub.close()
            if spark is not None:
                reads = ([("spark replay", "replay"), ("spark files", "files")] if store is not None
                         else [("spark files", "files")])
                for row, mode in reads:
                    t0 = time.perf_counter()
                    n = (spark.read.format("sulis").option("driverDir", driver.dir).option("recordingIds", str(rid))
                         .option("readMode", mode).option("archiveDir", archive_dir).option("minPartitions", "2")
                         .load().count())
                    out[row] = time.perf_counter() - t0
                    assert n == count, f"{row}: {n} rows of {count}"
            assert archive.errors() == [], archive.errors()
        return out
    finally:
        remove_dir(shm)
        shutil.rmtree(base, ignore_errors=True)
        if store is not None:  # the run's objects: the next run starts with an empty store
            shutil.rmtree(store.root / "bench" / os.path.basename(base), ignore_errors=True)


def kafka_run(base: str, count: int) -> float | None:
    """msgs/s of the same messages into a Kafka topic with retention settings; None without Kafka."""
    from bench.peers import kafka

    if kafka.missing():
        return None
    k = kafka.Kafka(os.path.join(base, "kafka"))
    try:
        from confluent_kafka.admin import NewTopic

        topic = NewTopic("tiering", 1, 1, config={"retention.ms": str(7 * 86_400_000),
                                                  "retention.bytes": str(64 * SEGMENT),
                                                  "segment.bytes": str(SEGMENT)})
        for f in k.admin.create_topics([topic]).values():
            f.result(30)
        return kafka.ingest(k, "tiering", count, LENGTH)
    finally:
        k.close()
        shutil.rmtree(base, ignore_errors=True)


def spark_session():
    from pyspark.sql import SparkSession

    import sulis.spark

    os.environ.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("sulis-bench-tiering")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "2g").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    sulis.spark.register(session)
    return session


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=1024, help="MiB of payload recorded per run")
    ap.add_argument("--dir", default=None, help="where the archive and the store keep their files (a disk)")
    ap.add_argument("--store-dir", default=None,
                    help="where the store keeps its objects instead (/dev/shm: the store's writes off the "
                         "archive's disk, as a store on other machines would be)")
    ap.add_argument("--quick", action="store_true", help="one run of 64 MiB")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--upload-rate", default="0",
                    help="the archive's tier_upload_rate with tiering on (bytes a second, 64m...; 0: no limit); "
                         "with --record-only a comma-separated list")
    ap.add_argument("--record-only", action="store_true",
                    help="only the record rows: tiering off, then on at each --upload-rate, paired by round")
    a = ap.parse_args()
    if a.quick:
        a.runs, a.mb = 1, 64
    count = a.mb * (1 << 20) // LENGTH
    parent = a.dir or tempfile.gettempdir()
    base = tempfile.mkdtemp(prefix="sulis-bench-tiering-", dir=parent)
    store_base = tempfile.mkdtemp(prefix="sulis-bench-s3-", dir=a.store_dir) if a.store_dir else base
    store = s3proxy.S3Server(Path(store_base) / "s3")
    for k, v in store.credentials().items():
        os.environ[k] = v
    rows: dict[str, list[float]] = {}
    kafka_rates: list[float] = []
    spark = None
    if a.record_only:
        return record_only(a, count, parent, base, store_base, store)
    try:  # from the store's start: a signal meanwhile (main_guard unwinds it) still stops it
        store.start()
        spark = None if a.no_spark else spark_session()
        # Untimed: the first Spark read of a process starts its Python workers.
        sulis_run(os.path.join(base, "warm-up"), 10_000, None, spark)
        for i in range(a.runs):
            # The system that goes first alternates.
            for label, s in ((("off", None), ("on", store)) if i % 2 == 0 else (("on", store), ("off", None))):
                for row, secs in sulis_run(os.path.join(base, f"run-{i}-{label}"), count, s, spark,
                                           a.upload_rate).items():
                    rows.setdefault(f"{row} ({'store' if s else 'disk'})" if row != "record" else
                                    f"record, tiering {label}", []).append(secs)
            if not a.no_kafka and (rate := kafka_run(os.path.join(base, f"kafka-{i}"), count)) is not None:
                kafka_rates.append(rate)
    finally:
        if spark is not None:
            spark.stop()
        store.kill()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(store_base, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    mb = count * LENGTH / 1e6
    table = [[k, f"{count / s / 1e6:.2f} M msgs/s", f"{mb / s:.0f} MB/s", f"{s:.2f} s",
              ", ".join(f"{count / x / 1e6:.2f}" for x in rows[k])] for k, s in med.items()]
    if kafka_rates:
        rate = statistics.median(kafka_rates)
        table.append(["Kafka 4.3.1 produce (retention.bytes, acks=all)", f"{rate / 1e6:.2f} M msgs/s",
                      f"{rate * LENGTH / 1e6:.0f} MB/s", f"{count / rate:.2f} s",
                      ", ".join(f"{x / 1e6:.2f}" for x in kafka_rates)])
    print(f"{a.mb} MiB of {LENGTH} B messages, {SEGMENT >> 20} MiB segments, medians of {a.runs} runs; the "
          f"archive in {parent}, the store's objects in {a.store_dir or parent}; tier_upload_rate {a.upload_rate}")
    print_table(["row", "rate", "payload", "time", "runs (M msgs/s)"], table)
    on, off = rows.get("record, tiering on"), rows.get("record, tiering off")
    if on and off:
        # Paired by round (the two runs of a round follow one another): the machine's own swings, which are
        # wide for this row here, cancel out.
        ratios = [b / a for a, b in zip(on, off, strict=True)]
        print(f"record with tiering on / off, round by round: {', '.join(fmt_ratio(x) for x in ratios)}; "
              f"median {fmt_ratio(statistics.median(ratios))} (target >= 0.9x)")
    return 0


def record_only(a, count: int, parent: str, base: str, store_base: str, store: s3proxy.S3Server) -> int:
    """The record rows alone: per round tiering off, then on at each rate (the order turns each round)."""
    rates = a.upload_rate.split(",")
    labels = ["off", *rates]
    rows: dict[str, list[float]] = {label: [] for label in labels}
    try:
        store.start()
        sulis_run(os.path.join(base, "warm-up"), 10_000, None)  # untimed
        for i in range(a.runs):
            turned = labels[i % len(labels):] + labels[:i % len(labels)]
            for label in turned:
                secs = sulis_run(os.path.join(base, f"run-{i}-{label}"), count, None if label == "off" else store,
                                 upload_rate="0" if label == "off" else label, record_only=True)["record"]
                rows[label].append(secs)
    finally:
        store.kill()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(store_base, ignore_errors=True)
    print(f"{a.mb} MiB of {LENGTH} B messages, {SEGMENT >> 20} MiB segments, medians of {a.runs} rounds; the "
          f"archive in {parent}, the store's objects in {a.store_dir or parent}")
    table = []
    for label in labels:
        name = "record, tiering off" if label == "off" else f"record, tiering on, tier_upload_rate {label}"
        rate = count / statistics.median(rows[label]) / 1e6
        paired = "" if label == "off" else fmt_ratio(statistics.median(
            [off / on for on, off in zip(rows[label], rows["off"], strict=True)]))
        table.append([name, f"{rate:.2f} M msgs/s", ", ".join(f"{count / x / 1e6:.2f}" for x in rows[label]),
                      paired])
    print_table(["row", "rate", "rounds (M msgs/s)", "on / off, median of rounds"], table)
    return 0


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
