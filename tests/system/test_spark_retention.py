"""A streaming query and the archive's retention: the query's hold keeps what it has still to read, so a
policy that removes everything but the newest segment loses the query nothing; with ``retentionHold=none``
the same run fails naming the data lost, as Kafka's source does when retention outruns a consumer."""

from __future__ import annotations

import os
import struct
import time

import pytest

from conftest import await_until, start_archive_node, stop_archive_node
from sulis.archive import RecordingSignal

pytest.importorskip("pyspark")

SEGMENT = 64 * 1024
STREAM = 3301
#: Short, so that a hold Spark never released lapses within the test, but longer than a micro-batch takes on
#: a loaded machine (Spark does not call the source while a batch runs, so the hold is not renewed then).
LEASE = "15s"


def message(i: int) -> bytes:
    """992 bytes: each message takes 1 KiB of a term, 64 a segment."""
    return struct.pack("<I", i) + bytes((i + j) & 0xFF for j in range(988))


@pytest.fixture
def node():
    node = start_archive_node("sulis-spark-retention-",
                              {"segment_file_length": SEGMENT, "retention_check_interval": "20ms"})
    yield node
    assert stop_archive_node(node) == []


def record(node, count: int):
    """A live recording of ``count`` messages on STREAM: (recording id, publication)."""
    _, _, client, ac = node
    ac.start_recording("aeron:ipc", STREAM)
    pub = client.add_publication("aeron:ipc", STREAM)
    rid = ac.await_signal(RecordingSignal.START).recording_id
    deadline = time.monotonic() + 30
    for i in range(count):
        while pub.offer(message(i)) < 0:
            assert time.monotonic() < deadline
    await_until(lambda: ac.get_recording_position(rid) == pub.position, what="recorded")
    return rid, pub


def start_query(spark, node, checkpoint: str, out: str, hold: str):
    drv, archive, _, _ = node
    reader = (spark.readStream.format("sulis").option("driverDir", drv.dir).option("channel", "aeron:ipc")
              .option("streamId", STREAM).option("maxBytesPerTrigger", SEGMENT).option("readMode", "files")
              .option("archiveDir", archive.dir).option("retentionHold", hold).option("retentionHoldLease", LEASE))
    return (reader.load().select("value").writeStream.format("parquet").option("checkpointLocation", checkpoint)
            .start(out))


def indices(spark, out: str) -> list[int]:
    return sorted(struct.unpack_from("<I", bytes(r[0]))[0] for r in spark.read.parquet(out).collect())


def policy(archive_dir: str, text: str) -> None:
    tmp = os.path.join(archive_dir, ".policy.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(archive_dir, "retention.policy"))


def first_batch(query) -> None:
    await_until(lambda: query.lastProgress and query.lastProgress["numInputRows"] > 0, timeout=120,
                what="the first micro-batch")


def a_check_ran(node) -> None:
    """Returns once the archive ran a whole retention check after this call: a recording on stream 9 (which
    the policies' ``stream=9 max-age=1h`` rule governs), made old, is deleted by the first check that sees it."""
    _, archive, client, ac = node
    ac.start_recording("aeron:ipc", 9)
    pub = client.add_publication("aeron:ipc", 9)
    witness = ac.await_signal(RecordingSignal.START).recording_id
    while pub.offer(b"w" * 100) < 0:
        pass
    await_until(lambda: ac.get_recording_position(witness) == pub.position, what="the witness recorded")
    ac.stop_recording("aeron:ipc", 9)
    ac.await_signal(RecordingSignal.STOP, witness)
    pub.close()
    then = time.time() - 7200
    for f in os.listdir(archive.dir):
        if f.startswith(f"{witness}-") and f.endswith(".rec"):
            os.utime(os.path.join(archive.dir, f), (then, then))
    await_until(lambda: ac.list_recording(witness) is None, what="the witness deleted")


POLICY = f"stream=9 max-age=1h\nstream={STREAM} max-size=1k\n"


def test_a_querys_hold_keeps_what_it_has_still_to_read_and_lets_go_of_what_it_read(spark, node, tmp_path):
    _, archive, _, ac = node
    rid, _ = record(node, 640)  # 10 segments
    out = str(tmp_path / "out")
    query = start_query(spark, node, str(tmp_path / "checkpoint"), out, "auto")
    try:
        first_batch(query)
        # From now on retention would keep only the newest segment of a recording nobody reads.
        policy(archive.dir, POLICY)
        query.processAllAvailable()
        assert query.exception() is None
        # What the query read and committed goes; the segment being written stays.
        await_until(lambda: ac.get_start_position(rid) == 9 * SEGMENT, what="the read segments removed")
        holds = os.listdir(os.path.join(archive.dir, "holds"))
        assert len(holds) == 1 and holds[0].startswith("spark-"), holds
    finally:
        query.stop()
    assert indices(spark, out) == list(range(640))
    # Removed when the query stops, or, where Spark does not pass the stop on to the source, deleted by the
    # archive once its lease (retentionHoldLease) lapsed.
    holds_dir = os.path.join(archive.dir, "holds")
    await_until(lambda: os.listdir(holds_dir) == [], timeout=90,
                what=lambda: f"the hold gone after the stop: {os.listdir(holds_dir)}")


@pytest.mark.parametrize("hold", ["prices-query", "none"])
def test_between_runs_a_named_hold_keeps_the_rest_and_with_none_the_loss_is_named(spark, node, tmp_path, hold):
    _, archive, _, ac = node
    rid, _ = record(node, 640)
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "out")
    query = start_query(spark, node, checkpoint, out, hold)
    try:
        first_batch(query)
    finally:
        query.stop()
    # The query is down: retention runs with only its hold (if any) to stop it.
    policy(archive.dir, POLICY)
    a_check_ran(node)
    query = start_query(spark, node, checkpoint, out, hold)
    try:
        if hold == "none":
            assert ac.get_start_position(rid) == 9 * SEGMENT
            with pytest.raises(Exception) as failed:
                query.processAllAvailable()
            assert "DataLossError" in str(failed.value) and f"recording {rid}" in str(failed.value), failed.value
            return
        # The named hold outlived the run: nothing the next run reads went.
        assert ac.get_start_position(rid) < SEGMENT * 2
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    assert indices(spark, out) == list(range(640))
    # Kept for the query's next run, until the archive's retention_hold_timeout.
    assert os.listdir(os.path.join(archive.dir, "holds")) == ["prices-query.hold"]
