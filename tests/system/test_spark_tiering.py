"""Spark reads a recording the same, row for row, whichever tier holds each part: all of it on the disk; most of
it in the object store, read through the archive (replay mode); and most of it in the object store, read by the
executors straight from the store (files mode), with their own credentials and no archive in the path; the JVM
source likewise in both modes.

Promise: docs/retention.md, "Tiered storage" (readers of the files); docs/spark.md, readMode."""

from __future__ import annotations

import pytest
from test_archive_retention import message
from test_archive_tiering import COUNT, SEGMENT, moved, record, where, write_policy

import sulis
from conftest import await_until, make_dir, spark_session
from objectstore import ACCESS_KEY, SECRET_KEY
from sparkjvm import JVM, NEEDS_JAR, child
from sparkjvm import rows as jvm_rows

pytest.importorskip("pyspark")

STREAM = 3401


@pytest.fixture(scope="module")
def spark():
    """A session of this module's own whose Python workers (the executors' side of ``format("sulis")``) get the
    store's credentials as executors on a cluster would: ``spark.executorEnv.*``."""
    with spark_session("sulis-spark-tiering", **{
            "spark.executorEnv.AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "spark.executorEnv.AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "spark.executorEnv.TMPDIR": make_dir("sulis-spark-tier-cache-")}) as session:
        yield session


def rows(spark, driver_dir: str, rid: int, **options) -> list[tuple]:
    reader = spark.read.format("sulis").option("driverDir", driver_dir).option("recordingIds", str(rid))
    for k, v in options.items():
        reader = reader.option(k, str(v))
    got = reader.load().select("value", "recording_id", "position").collect()
    return sorted((bytes(r[0]), r[1], r[2]) for r in got)


def test_spark_reads_the_same_rows_from_every_tier(spark, driver, client, s3_server, monkeypatch):
    for k, v in s3_server.credentials().items():
        monkeypatch.setenv(k, v)
    archive_dir = make_dir("sulis-spark-tiering-")
    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=SEGMENT,
                       retention_check_interval="20ms", tier_store=s3_server.url("tiered")) as archive, \
            sulis.ArchiveClient(client) as ac:
        rid = record(ac, client, STREAM)
        files = {"readMode": "files", "archiveDir": archive_dir, "minPartitions": 3}
        on_disk = rows(spark, driver.dir, rid, **files)
        assert len(on_disk) == COUNT and on_disk == rows(spark, driver.dir, rid, readMode="replay")
        write_policy(archive_dir, "stream=* tier-after=0s\n")
        await_until(lambda: moved(archive_dir, rid), what=lambda: f"moved: {where(archive_dir, rid)}")
        assert rows(spark, driver.dir, rid, readMode="replay") == on_disk, "through the archive"
        assert rows(spark, driver.dir, rid, **files) == on_disk, "by the executors, from the store"
        assert archive.errors() == []


@NEEDS_JAR
def test_the_jvm_source_reads_the_same_rows_from_the_store(driver, client, s3_server, monkeypatch, tmp_path):
    """The JVM source (``io.sulis.spark.SulisProvider``, the same Rust reader through JNI) in a Spark driver of
    its own, the store's credentials in its environment: files mode fetches the moved segments itself, replay
    mode reads them through the archive, and both give every message once."""
    for k, v in s3_server.credentials().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TMPDIR", make_dir("sulis-jvm-tier-cache-"))
    archive_dir = make_dir("sulis-spark-tiering-")
    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=SEGMENT,
                       retention_check_interval="20ms", tier_store=s3_server.url("tiered")) as archive, \
            sulis.ArchiveClient(client) as ac:
        write_policy(archive_dir, "stream=* tier-after=0s\n")
        rid = record(ac, client, STREAM + 1)
        await_until(lambda: moved(archive_dir, rid), what=lambda: f"moved: {where(archive_dir, rid)}")
        options = {"driverDir": driver.dir, "recordingIds": rid, "minPartitions": 3, "archiveDir": archive_dir}
        reads = [{"format": JVM, "options": {**options, "readMode": mode}, "out": str(tmp_path / mode)}
                 for mode in ("files", "replay")]
        files, replay = child({"jar": sulis.spark.jar(), "mode": "batch", "reads": reads})["results"]
        assert "error" not in files and "error" not in replay, (files, replay)
        assert archive.errors() == []
    got = jvm_rows(str(tmp_path / "files"))
    assert got == jvm_rows(str(tmp_path / "replay"))
    assert [v for v, _, _ in got] == [message(i) for i in range(COUNT)]
