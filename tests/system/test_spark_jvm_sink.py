"""The JVM side of ``format("sulis")`` writing and surviving kills: the JVM sink's batch writes, exactly once
through a kill -9 of the Spark driver in micro-batches and in real-time mode, and the JVM source's query failing
loudly when its archive is SIGKILLed, then continuing exactly once. The reads: ``test_spark_jvm.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

pytest.importorskip("pyspark")

import sulis  # noqa: E402
import sulis.spark  # noqa: E402
from conftest import await_until  # noqa: E402
from sparkjvm import (  # noqa: E402
    CHANNEL,
    JVM,
    NEEDS_JAR,
    RealTimeChild,
    Stream,
    archive_node,
    child,
    committed_parquet,
    journal_entries,
    message,
    recorded,
)

# Each test runs one to three Spark drivers, a JVM each, one after another: up to about 115 s on a quiet 2-core
# machine, over the suite's 120 s default.
pytestmark = [NEEDS_JAR, pytest.mark.timeout(400)]

#: The module's archive node (driver, archive, client, archive client).
node = pytest.fixture(scope="module", name="node")(archive_node)


def test_the_jvm_sinks_batch_write_publishes_each_row_on_its_stream(node, tmp_path):
    """A batch write through the JVM sink, ``format("sulis")`` itself with the jar on the classpath: each row on
    its ``stream_id`` column's stream, stamped with its ``timestamp`` (stampTimestamp), every row once in a clean
    run (a batch write is at least once, as the Python sink's: a task has no batch id to know its earlier
    attempts by); the Python sink's column checks, from the same Rust rules."""
    _, _, _, ac = node
    for sid in (4110, 4111):
        ac.start_recording(CHANNEL, sid)
    assert child({"jar": sulis.spark.jar(), "format": "sulis", "mode": "lookup"})["class"] == JVM
    columns = ["cast(id as string) as value", "4110 + id % 2 as stream_id",
               "timestamp_micros(1750000000000000 + id) as timestamp"]
    base = {"driverDir": node[0].dir, "channel": CHANNEL}
    writes = [{"columns": ["id", "4110 as stream_id"], "options": base},
              {"columns": columns, "options": {**base, "stampTimestamp": "true"}},
              # A stream nobody records or subscribes: the write fails naming it once the timeout passes.
              {"columns": ["cast(id as string) as value"],
               "options": {**base, "streamId": "4199", "messageTimeout": "1s"}}]
    no_value, done, stuck = child({"jar": sulis.spark.jar(), "format": "sulis", "mode": "write", "rows": 400,
                                   "writes": writes})["results"]
    assert "io.sulis.spark.SulisException$SinkTimeoutError" in stuck.get("error", ""), stuck
    assert "stream 4199 refused offers for 1s: NOT_CONNECTED" in stuck["error"], stuck
    assert "the sulis sink publishes a column named 'value'" in no_value.get("error", ""), no_value
    assert "error" not in done, done
    for sid in (4110, 4111):
        want = sorted((str(i).encode(), (1750000000000000 + i) * 1000) for i in range(sid - 4110, 400, 2))
        await_until(lambda sid=sid, want=want: len(recorded(node, sid, True)) >= len(want), 30,
                    f"stream {sid}'s rows recorded")
        assert sorted(recorded(node, sid, True)) == want


def test_kill_9_of_a_micro_batch_query_through_the_jvm_sink_then_a_restart_is_exactly_once(node, tmp_path):
    """``format("sulis")`` in and out, both in the JVM (the jar on the classpath), micro-batches every 500 ms while
    messages come; kill -9 of the Spark driver once a task of micro-batch 2 or later has published and said so in
    the sink's journal, then a restart on the checkpoint: every message is in the sink's stream exactly once (the
    re-run of a batch the kill cut short skips, checked, what its earlier attempt published)."""
    from collections import Counter

    s = Stream(node, 4120)
    _, _, _, ac = node
    ac.start_recording(CHANNEL, 4121)
    s.publish(message(i) for i in range(100))
    ck = tmp_path / "ck"
    cfg = {"jar": sulis.spark.jar(), "format": "sulis", "mode": "realtime", "processing": "500 milliseconds",
           "options": {"driverDir": node[0].dir, "recordingIds": s.rid, "maxMessagesPerTrigger": 60},
           "checkpoint": str(ck), "columns": ["value"],
           "sink": {"format": "sulis", "options": {"driverDir": node[0].dir, "channel": CHANNEL, "streamId": 4121}}}

    def committed() -> set[int]:
        return {int(f) for f in os.listdir(ck / "commits") if f.isdigit()} if (ck / "commits").is_dir() else set()

    def published_uncommitted() -> list[dict]:
        assert q.proc.poll() is None, (tmp_path / "first.err").read_text()[-3000:]
        s.publish(message(j) for j in range(len(s.sent), len(s.sent) + 5))
        done = committed()
        queries = {e["query"] for e in journal_entries(node, "", 0)}
        return [e for qid in queries for e in journal_entries(node, qid, 2)
                if e["kind"] == "done" and e["batch"] >= 2 and e["count"] > 0 and e["batch"] not in done]

    q = RealTimeChild(cfg, tmp_path / "first.err")
    with q:
        cut = await_until(published_uncommitted, 120, "a task of batch 2 or later to publish before its commit",
                          interval=0.001)
        q.kill()
    cut_short = {e["batch"] for e in cut} - committed()
    s.publish(message(j) for j in range(len(s.sent), len(s.sent) + 50))
    with RealTimeChild(cfg, tmp_path / "second.err"):
        want = [m for m, _, _ in s.sent]
        await_until(lambda: len(recorded(node, 4121)) >= len(want), 90, "every message out after the restart")
    out = Counter(v for (v,) in recorded(node, 4121))
    assert set(out) == set(want)
    assert [m for m, n in out.items() if n > 1] == [], "a message came out twice"
    if cut_short:  # the kill came between publishing and the commit: the restart re-ran the batch and skipped
        qid = cut[0]["query"]
        skipped = [e for e in journal_entries(node, qid, min(cut_short))
                   if e["kind"] in ("run", "done") and e["batch"] in cut_short and e["skip"] > 0]
        assert skipped, f"batch {sorted(cut_short)} was cut short: its re-run should have skipped what it published"


def test_real_time_mode_writes_into_a_sulis_stream_through_the_jvm_sink(node, tmp_path):
    """Real-time mode end to end in sulis: a recording read as it is recorded, each row published into another
    stream by the JVM sink as it comes (Spark's allowlist lifted for it); every message arrives. The batch is ten
    minutes long, so every row comes out within it, and a stop ends the query then, not at the batch's end."""
    s = Stream(node, 4112)
    _, _, _, ac = node
    ac.start_recording(CHANNEL, 4113)
    s.publish(message(i) for i in range(50))
    cfg = {"jar": sulis.spark.jar(), "format": JVM, "mode": "realtime", "trigger": "10 minutes",
           "options": {"driverDir": node[0].dir, "recordingIds": s.rid}, "checkpoint": str(tmp_path / "ck"),
           "columns": ["value"],
           "sink": {"format": JVM, "options": {"driverDir": node[0].dir, "channel": CHANNEL, "streamId": 4113,
                                               "exactlyOnce": "false"}},
           "conf": {"spark.sql.streaming.realTimeMode.allowlistCheck": "false"}}
    with RealTimeChild(cfg, tmp_path / "child.err") as q:
        for k in range(3):
            s.publish(message(i) for i in range(50 + 50 * k, 100 + 50 * k))
            time.sleep(0.3)
        want = sorted(m for m, _, _ in s.sent)
        await_until(lambda: len(recorded(node, 4113)) >= len(want), 60, "every message in the sink's stream")
    # Stopped inside its batch: the child waits at most 120 s for it (RealTimeChild's exit), not ten minutes.
    assert any('"done"' in line for line in q.out), (q.out, (tmp_path / "child.err").read_text()[-3000:])
    got = sorted(v for (v,) in recorded(node, 4113))
    assert got == want, "each message once in a clean run"


def test_kill_9_of_a_real_time_query_then_a_restart_is_exactly_once_through_the_sinks_journal(node, tmp_path):
    """Real-time mode through the JVM sink (exactly once, its default), kill -9 of the Spark driver mid-batch while
    messages come, then a restart on the checkpoint: the batch the kill cut short is read again from its start,
    and its re-run skips, checked against the journal, what the killed attempt published: every message comes
    out exactly once."""
    from collections import Counter

    s = Stream(node, 4115)
    _, _, _, ac = node
    ac.start_recording(CHANNEL, 4116)
    s.publish(message(i) for i in range(100))
    ck = tmp_path / "ck"
    cfg = {"jar": sulis.spark.jar(), "format": JVM, "mode": "realtime", "trigger": "5 seconds",
           "options": {"driverDir": node[0].dir, "recordingIds": s.rid}, "checkpoint": str(ck), "columns": ["value"],
           "sink": {"format": JVM, "options": {"driverDir": node[0].dir, "channel": CHANNEL, "streamId": 4116}},
           "conf": {"spark.sql.streaming.realTimeMode.allowlistCheck": "false"}}

    def committed() -> list[int]:
        return sorted(int(f) for f in os.listdir(ck / "commits") if f.isdigit()) if (ck / "commits").is_dir() else []

    q = RealTimeChild(cfg, tmp_path / "first.err")
    with q:
        i = 100
        while len(committed()) < 2:  # messages keep coming through two batches' ends
            assert q.proc.poll() is None, (tmp_path / "first.err").read_text()[-3000:]
            s.publish(message(j) for j in range(i, i + 20))
            i += 20
            time.sleep(0.2)
        s.publish(message(j) for j in range(i, i + 40))  # into the batch the kill cuts short
        i += 40
        await_until(lambda: len(recorded(node, 4116)) >= i - 20, 60, "the running batch to hand some over")
        q.kill()
    last = committed()[-1]
    with open(ck / "offsets" / str(last)) as f:
        offset = json.loads(f.read().splitlines()[-1])
    committed_to = offset[str(s.rid)]
    assert committed_to < s.sent[-1][1], "the kill came before everything was committed"
    s.publish(message(j) for j in range(i, i + 50))
    with RealTimeChild(cfg, tmp_path / "second.err"):
        want = Counter(m for m, _, _ in s.sent)
        await_until(lambda: set(want) <= {v for (v,) in recorded(node, 4116)}, 90,
                    "every message out after the restart")
    out = Counter(v for (v,) in recorded(node, 4116))
    assert set(out) == set(want)
    assert [m for m, n in out.items() if n > 1] == [], "a message came out twice"
    # The re-run of the batch the kill cut short skipped what its killed attempt had published: its run entry
    # says so (written before its first row; the query stopped before that batch's end, so it has no done).
    key = sulis._native.recording_key(CHANNEL, 4116)
    queries = {e["query"] for e in journal_entries(node, "", 0) if e["target"] == key}  # every claim
    said = [e for q in queries for e in journal_entries(node, q, 0)
            if e["target"] == key and e["kind"] in ("run", "done")]
    assert any(e["batch"] == last + 1 and e["skip"] > 0 for e in said), \
        (last, [(e["kind"], e["batch"], e["skip"], e["count"], e["why"], e["attempt"]) for e in said])


def test_an_archive_killed_mid_stream_fails_the_jvm_query_naming_it_and_a_restart_continues_exactly_once(
        node, tmp_path):
    """The JVM source's micro-batches through a backlog, a standalone archive process (control stream 31)
    SIGKILLed mid-stream: the query fails naming the archive; an archive restarted on its directory recovers
    the recording, and the query restarted on its checkpoint reads every recorded message exactly once (the
    Python source's test of the same, test_spark_system.py)."""
    from conftest import make_dir, start_standalone_archive, stop_standalone_archive

    drv, _, client, _ = node
    archive_dir = make_dir("sulis-spark-jvm-archive-killed-")
    stream_id = 4130

    def start_archive() -> subprocess.Popen:
        return start_standalone_archive(archive_dir, drv.dir)

    published: list[tuple[bytes, int]] = []

    def publish(pub, first: int, count: int) -> None:
        deadline = time.monotonic() + 20
        for i in range(first, first + count):
            m = i.to_bytes(4, "little") + bytes(60 + i % 200)
            while (p := pub.offer(m)) < 0:
                assert time.monotonic() < deadline, f"offer stuck: {sulis.result_name(p)}"
            published.append((m, p))

    archive = start_archive()
    ac = sulis.ArchiveClient(client, control_request_stream_id=31, control_response_stream_id=4131)
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    options = {"driverDir": drv.dir, "controlStreamId": 31, "channel": CHANNEL, "streamId": stream_id,
               "messageTimeout": "2s"}
    try:
        ac.start_recording(CHANNEL, stream_id)
        pub = client.add_publication(CHANNEL, stream_id)
        publish(pub, 0, 20_000)
        rid = await_until(lambda: ac.list_recordings_for_uri(CHANNEL, stream_id), what="the recording")[0] \
            .recording_id
        await_until(lambda: ac.get_recording_position(rid) == pub.position, what="everything recorded")
        cfg = {"jar": sulis.spark.jar(), "format": "sulis", "mode": "realtime", "processing": "100 milliseconds",
               "options": {**options, "maxBytesPerTrigger": 64 * 1024}, "checkpoint": ck,
               "columns": ["value", "recording_id", "position"],
               "sink": {"format": "parquet", "options": {"path": out}}}
        with RealTimeChild(cfg, tmp_path / "first.err") as q:
            commits = tmp_path / "ck" / "commits"
            await_until(lambda: commits.is_dir() and any(f.isdigit() for f in os.listdir(commits)), 120,
                        "a first micro-batch committed")
            ac.close()
            archive.send_signal(signal.SIGKILL)
            archive.wait(timeout=30)
            archive.stderr.close()
            failed = await_until(lambda: next((x for x in q.out if '"exception"' in x), None), 120,
                                 lambda: f"the query to fail once the archive is gone: {q.out[-5:]}")
        error = json.loads(failed)["exception"]
        assert "the archive at aeron:ipc stream 31" in error, error
        read_before = len(committed_parquet(out))
        assert 0 < read_before < len(published), "the archive should have been killed mid-stream"

        archive = start_archive()
        ac = sulis.ArchiveClient(client, control_request_stream_id=31, control_response_stream_id=4131)
        assert ac.list_recording(rid).stop_position == published[-1][1]
        ac.start_recording(CHANNEL, stream_id)
        rid2 = await_until(lambda: [d.recording_id for d in ac.list_recordings_for_uri(CHANNEL, stream_id)
                                    if d.recording_id != rid], what="the second recording")[0]
        publish(pub, 20_000, 500)
        await_until(lambda: ac.get_recording_position(rid2) == pub.position, what="everything recorded")
        child({"jar": sulis.spark.jar(), "format": "sulis", "mode": "available-now",
               "options": {**options, "maxBytesPerTrigger": 16 << 20}, "checkpoint": ck, "out": out})
        got = [(bytes(v), r, p) for v, r, p in committed_parquet(out)]
        expected = sorted([(m, rid, p) for m, p in published[:20_000]] + [(m, rid2, p) for m, p in published[20_000:]],
                          key=lambda r: (r[1], r[2]))
        assert len(got) == len(expected)
        assert got == expected, "every recorded message exactly once"
        pub.close()
    finally:
        ac.close()
        stop_standalone_archive(archive, archive_dir)
