"""The exactly-once sink under faults, one task attempt per process as Spark's Python workers run them
(``sink_task_child.py``): an attempt SIGKILLed in the middle of ``offer_batch`` and a new attempt of the
same micro-batch and partition whose attempt number is 0 again (a stage re-attempt), a zombie attempt
still publishing when the new one starts, two attempts racing, a re-run whose rows differ or come in
another order, and a recording that stops and starts again in the middle of a run. Each ends with
every row exactly once, in order, in the recorded stream, or with the documented error.

The media driver times out a dead client after 2 s, so a killed attempt's session ends soon.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

pytest.importorskip("pyspark")

from conftest import await_until, start_archive_node, stop_archive_node  # noqa: E402

pytestmark = pytest.mark.spark

CHANNEL = "aeron:ipc"
CHILD = os.path.join(os.path.dirname(__file__), "sink_task_child.py")


@pytest.fixture(scope="module")
def node():
    node = start_archive_node("sulis-sink-faults-", client_liveness_timeout="2s")
    yield node
    errors = stop_archive_node(node)
    assert errors == [], f"archive logged {errors}"


def start_query(node, stream_id: int, tmp_path) -> str:
    """The sink's writer as Spark's driver builds it when the query starts, pickled as Spark ships it with
    every task of every micro-batch: a file for the tasks to load."""
    import pickle

    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import BinaryType, StructField, StructType

    from sulis.spark.datasource import SulisDataSource

    options = CaseInsensitiveDict({"driverDir": node[0].dir, "channel": CHANNEL, "streamId": str(stream_id)})
    writer = SulisDataSource(options).streamWriter(StructType([StructField("value", BinaryType())]), False)
    path = os.path.join(str(tmp_path), f"writer-{stream_id}.pickle")
    with open(path, "wb") as f:
        pickle.dump(writer, f)
    return path


class Task:
    """A sink task attempt in its own process; its JSON lines are collected as they come."""

    def __init__(self, writer: str, query: str, task_attempt_id: int, rows, **spec):
        spec.update(writer=writer, query=query, batch=spec.get("batch", 4), partition=spec.get("partition", 1),
                    task_attempt_id=task_attempt_id, rows=rows)
        self.err = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, CHILD, json.dumps(spec)], stdout=subprocess.PIPE,
                                     stderr=self.err, text=True)
        self.lines: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    def yielded(self) -> int:
        return max((x["yielded"] for x in self.lines if "yielded" in x), default=0)

    def result(self, timeout: float = 90) -> dict:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self._reader.join(5)
        ends = [x for x in self.lines if "published" in x or "error" in x]
        self.err.seek(0)
        err = self.err.read()
        self._close()
        assert ends, f"the task ended without a result (exit {self.proc.returncode}): {err[-3000:]}"
        return ends[-1]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)
        self._close()

    def _close(self) -> None:
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.err.close()


def rows(n: int, first: int = 0) -> list[bytes]:
    return [b"row-%08d" % i for i in range(first, first + n)]


def recorded(node, stream_id: int) -> list[bytes]:
    """Every message recorded on ``stream_id``, recording after recording, each in its order."""
    from sulis.spark.options import ArchiveAddress
    from sulis.spark.replay import RecordingRange, read_range

    drv, _, _, ac = node
    address = ArchiveAddress(driver_dir=drv.dir)
    out: list[bytes] = []
    for d in sorted(ac.list_recordings_for_uri(CHANNEL, stream_id), key=lambda d: d.recording_id):
        end = d.stop_position if d.stop_position >= 0 else ac.get_recording_position(d.recording_id)
        rng = RecordingRange(d.recording_id, d.stream_id, d.session_id, d.start_position, end, d.start_position, end)
        for b in read_range(address, rng):
            out.extend(b.column(0).to_pylist())
    return out


def test_an_attempt_killed_in_offer_batch_then_a_stage_re_attempt_publishes_each_row_once(node, tmp_path):
    """SIGKILL in the middle of publishing; the new attempt's attempt number is 0, as after a stage
    re-attempt, so nothing but the journal tells it what the dead one published: it waits for the dead
    session to end, reads back what was recorded, checks it against its own leading rows, skips it."""
    node[3].start_recording(CHANNEL, 3301)
    w = start_query(node, 3301, tmp_path)
    first = Task(w, "q-kill", 101, {"first": 0, "count": 40000}, chunk=2000, pause=0.01, batch=0, partition=0)
    await_until(lambda: first.yielded() >= 12000 or first.proc.poll() is not None, timeout=60, interval=0.001,
                what="the first attempt to publish 12000 rows")
    first.kill()
    second = Task(w, "q-kill", 102, {"first": 0, "count": 40000}, chunk=2000, batch=0, partition=0)
    done = second.result()
    assert "published" in done, done
    assert done["skipped"] >= 10000 and done["published"] + done["skipped"] == 40000, done
    assert recorded(node, 3301) == rows(40000)


def test_a_zombie_attempt_still_publishing_is_waited_for_never_published_beside(node, tmp_path):
    """The old attempt goes on publishing (a task of an earlier stage attempt is not killed) when the new
    one starts: the new one stands back until the old one is done, then publishes nothing twice."""
    node[3].start_recording(CHANNEL, 3302)
    w = start_query(node, 3302, tmp_path)
    zombie = Task(w, "q-zombie", 201, {"first": 0, "count": 20000}, chunk=1000, pause=0.15)
    await_until(lambda: zombie.yielded() >= 4000, timeout=60, what="the zombie to be half way")
    late = Task(w, "q-zombie", 202, {"first": 0, "count": 20000}, chunk=1000)
    z, second = zombie.result(), late.result()
    assert z == {"published": 20000, "skipped": 0}, z
    assert second == {"published": 0, "skipped": 20000}, second
    assert recorded(node, 3302) == rows(20000)


def test_two_attempts_racing_publish_each_row_once(node, tmp_path):
    """Two attempts of one task started together (a speculative copy, say): however their claims
    interleave, one publishes and the other stands back."""
    node[3].start_recording(CHANNEL, 3303)
    w = start_query(node, 3303, tmp_path)
    tasks = [Task(w, "q-race", 300 + k, {"first": 0, "count": 10000}, chunk=1000, pause=0.02)
             for k in range(2)]
    results = [t.result() for t in tasks]
    assert all("published" in r for r in results), results
    assert sorted(r["published"] for r in results) == [0, 10000], results
    assert recorded(node, 3303) == rows(10000)


def test_a_re_run_with_other_rows_or_another_order_fails_and_publishes_nothing(node, tmp_path):
    node[3].start_recording(CHANNEL, 3304)
    w = start_query(node, 3304, tmp_path)
    assert Task(w, "q-order", 401, {"first": 0, "count": 1000}).result() == {"published": 1000,
                                                                                       "skipped": 0}
    # Another order (a shuffle without a sort): the skip would drop other rows than were published.
    other_order = Task(w, "q-order", 402, list(range(999, -1, -1))).result()
    assert "error" in other_order and "rows 0 to 1000 of this re-run differ" in other_order["error"], other_order
    # Fewer rows (the input or the partitioning changed across a restart).
    fewer = Task(w, "q-order", 403, {"first": 0, "count": 600}).result()
    assert "error" in fewer and "published 1000 rows, but this re-run has only 600" in fewer["error"], fewer
    # The same rows: checked and skipped.
    assert Task(w, "q-order", 404, {"first": 0, "count": 1000}).result() == {"published": 0,
                                                                                       "skipped": 1000}
    # Another partition of the batch, and the next batch, are their own.
    assert Task(w, "q-order", 405, {"first": 1000, "count": 10}, partition=2).result() == {
        "published": 10, "skipped": 0}
    assert Task(w, "q-order", 406, {"first": 1010, "count": 10}, batch=5).result() == {
        "published": 10, "skipped": 0}
    assert recorded(node, 3304) == rows(1020)


def test_a_recording_that_restarts_mid_run_fails_naming_the_positions_not_recorded(node, tmp_path):
    """The recording stops and starts again while a live subscriber keeps the publication going: what was
    published in between is in no recording. The attempt fails naming the positions, and so does a re-run
    (which cannot tell which rows those were), rather than count wrong; so does one after a re-run that failed
    in a process that lives on."""
    _, _, client, ac = node
    ac.start_recording(CHANNEL, 3305)
    w = start_query(node, 3305, tmp_path)
    live = client.add_subscription(CHANNEL, 3305)
    stop = threading.Event()

    def consume():
        while not stop.is_set():
            if not live.poll(lambda *a: None, 1000):
                time.sleep(0.0005)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    try:
        task = Task(w, "q-gap", 501, {"first": 0, "count": 20000}, chunk=500, pause=0.05)
        await_until(lambda: task.yielded() >= 3000, timeout=60, what="the task to be publishing")
        ac.stop_recording(CHANNEL, 3305)
        at = task.yielded()
        await_until(lambda: task.yielded() >= at + 1500, timeout=60, what="rows published while not recorded")
        ac.start_recording(CHANNEL, 3305)
        first = task.result()
        assert "error" in first and "were published but not recorded" in first["error"], first
        again = Task(w, "q-gap", 502, {"first": 0, "count": 20000}).result()
        assert "error" in again and "were published but not recorded" in again["error"], again
        # An attempt that fails so in a process that lives on (an executor: its session stays recorded) says
        # so in the journal: the next attempt, elsewhere, fails the same way rather than wait for it and then
        # blame "another attempt still publishing".
        import sulis
        from sulis.spark.errors import SinkError

        options = [("driverDir", node[0].dir), ("channel", CHANNEL), ("streamId", "3305")]
        with pytest.raises(SinkError, match="were published but not recorded"):
            sulis._native.SparkSinkTask(options, "q-gap", 4, 1, 503)
        third = Task(w, "q-gap", 504, {"first": 0, "count": 20000}).result()
        assert "error" in third and "were published but not recorded" in third["error"], third
    finally:
        stop.set()
        consumer.join(5)
        live.close()


def test_two_spellings_of_one_stream_are_one_target_claimed_once(node, tmp_path):
    """Rows routed by their ``channel`` column to ``aeron:ipc`` and ``aeron:ipc?alias=x`` (one stream to the
    archive) are one target of the task: one claim, one run. A re-run of the task skips every row, whichever
    spelling its rows use."""
    import pyarrow as pa

    import sulis

    _, _, _, ac = node
    ac.start_recording(CHANNEL, 3306)
    options = [("driverDir", node[0].dir)]
    sulis._native.spark_sink_record_journal(options)  # as the Spark driver does when a query starts
    values = pa.array(rows(6), pa.binary())
    first = sulis._native.SparkSinkTask(options, "q-alias", 1, 0, 601)
    first.write(CHANNEL, 3306, values.slice(0, 3))
    first.write(CHANNEL + "?alias=x", 3306, values.slice(3))
    assert first.finish() == (6, 0)
    again = sulis._native.SparkSinkTask(options, "q-alias", 1, 0, 602)
    again.write(CHANNEL + "?alias=x", 3306, values.slice(0, 2))
    again.write(CHANNEL, 3306, values.slice(2))
    assert again.finish() == (0, 6)
    await_until(lambda: len(recorded(node, 3306)) >= 6, what="the rows recorded")
    assert recorded(node, 3306) == rows(6)
