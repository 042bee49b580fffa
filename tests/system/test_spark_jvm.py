"""The JVM source of ``format("sulis")`` (``jvm/``, ``io.sulis.spark.SulisProvider``) against the same archive
as the Python source: the same rows, the same offsets on one checkpoint (a query moves between the two
exactly once), a cluster's log, and Spark's real-time mode; a truncated recording and a corrupt frame named.
Each Spark driver runs in a process of its own (``spark_jvm_child.py``). The sink and the kills:
``test_spark_jvm_sink.py`` (a module of its own, so the two run on two workers)."""

from __future__ import annotations

import glob
import json
import os
import time

import pytest

pytest.importorskip("pyspark")

import sulis  # noqa: E402
import sulis.spark  # noqa: E402
import sulis.spark.cluster_log  # noqa: E402
from conftest import await_until  # noqa: E402
from sparkjvm import (  # noqa: E402
    CHANNEL,
    EXPECTED_ARCHIVE_ERRORS,
    JVM,
    NEEDS_JAR,
    RealTimeChild,
    Stream,
    _console_rows,
    archive_node,
    both,
    child,
    message,
    rows,
    table,
)
from sulis.spark.cluster_log import COMMIT_POSITION_TYPE_ID  # noqa: E402

# Each test runs one to three Spark drivers, a JVM each, one after another: up to about 115 s on a quiet 2-core
# machine, over the suite's 120 s default.
pytestmark = [NEEDS_JAR, pytest.mark.timeout(400)]

#: The module's archive node (driver, archive, client, archive client).
node = pytest.fixture(scope="module", name="node")(archive_node)


def test_a_batch_read_gives_the_rows_the_python_source_gives(node, tmp_path):
    s = Stream(node, 4101)
    s.publish(message(i) for i in range(3000))
    options = {"driverDir": node[0].dir, "recordingIds": s.rid, "minPartitions": 3}
    # One Spark driver, the jar on it: the JVM source, the Python source, and the JVM source by replay (the
    # files are local here, so the default reads them).
    reads = [{"format": JVM, "options": options, "out": str(tmp_path / "jvm")},
             {"format": sulis.spark.PYTHON_FORMAT, "options": options, "out": str(tmp_path / "py")},
             {"format": JVM, "options": {**options, "readMode": "replay"}, "out": str(tmp_path / "jvm-replay")}]
    jvm, py, replay = child({"jar": sulis.spark.jar(), "mode": "batch", "reads": reads})["results"]
    assert "error" not in jvm and "error" not in py and "error" not in replay, (jvm, py, replay)
    assert jvm["schema"] == py["schema"]
    want = sorted(s.sent, key=lambda r: r[1])
    assert rows(str(tmp_path / "jvm")) == rows(str(tmp_path / "py")) == rows(str(tmp_path / "jvm-replay")) == want


def test_every_row_shape_and_a_malformed_payloads_error_are_the_python_sources(node, tmp_path):
    """``valueSchema`` in each mode and ``includeTimestamp``: the JVM source's rows (every column) and errors are
    the Python source's: both run ``sulis_spark::row_shape``."""
    import numpy as np

    s = Stream(node, 4104)
    tick = np.dtype([("instrument", "<i4"), ("price", "<f8"), ("ok", "u1"), ("qty", "<i2"), ("at", "<i8")])
    # More messages a partition than a columnar batch's rows (SulisColumnarReader.BATCH_ROWS): a partition's
    # rows span batches.
    n = 9000
    ticks = np.zeros(n, tick)
    ticks["instrument"] = np.arange(n) % 7
    ticks["price"] = 100 + np.arange(n) / 8
    ticks["ok"] = np.arange(n) % 2
    ticks["qty"] = -np.arange(n)
    ticks["at"] = 1_700_000_000_000_000_000 + np.arange(n) * 1_000_001
    payloads = [t.tobytes() for t in ticks]
    payloads[123] = b"short"
    s.publish(payloads)
    layout = "instrument int, price double, ok boolean, qty smallint, at timestamp"
    base = {"driverDir": node[0].dir, "recordingIds": s.rid, "minPartitions": 2}
    shapes = {
        "stamped": {"includeTimestamp": "true"},
        "permissive": {"valueSchema": layout, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": "raw"},
        "dropped": {"valueSchema": layout, "mode": "DROPMALFORMED", "readMode": "replay"},
        "failfast": {"valueSchema": layout},
    }
    reads = [r for name, extra in shapes.items() for r in both(node, tmp_path, name, {**base, **extra})]
    results = child({"jar": sulis.spark.jar(), "mode": "batch", "reads": reads})["results"]
    by_name = dict(zip(shapes, zip(results[::2], results[1::2], strict=True), strict=True))
    for name in ("stamped", "permissive", "dropped"):
        jvm, py = by_name[name]
        assert "error" not in jvm and "error" not in py, (name, jvm, py)
        assert jvm["schema"] == py["schema"], name
        got = table(str(tmp_path / f"{name}-jvm"))
        assert got == table(str(tmp_path / f"{name}-py")), name
        assert len(got) == (n - 1 if name == "dropped" else n), name
    permissive = table(str(tmp_path / "permissive-jvm"))
    assert permissive[123]["raw"] == b"short" and permissive[123]["price"] is None
    assert permissive[124]["qty"] == -124 and permissive[124]["ok"] is False and permissive[1]["ok"] is True
    jvm, py = by_name["failfast"]
    want = f"recording {s.rid}, message ending at position {s.sent[123][1]} is 5 bytes"
    assert want in jvm.get("error", "") and want in py.get("error", ""), (jvm, py)
    assert "RowError" in jvm["error"]


def test_a_query_moves_between_the_python_and_jvm_sources_on_one_checkpoint_exactly_once(node, tmp_path):
    s = Stream(node, 4102)
    s.publish(message(i) for i in range(1000))
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    options = {"driverDir": node[0].dir, "channel": CHANNEL, "streamId": 4102, "maxBytesPerTrigger": 65536}
    child({"jar": None, "mode": "available-now", "options": options, "checkpoint": ck, "out": out})
    s.publish(message(i) for i in range(1000, 2000))
    child({"jar": sulis.spark.jar(), "format": JVM, "mode": "available-now", "options": options, "checkpoint": ck,
           "out": out})
    s.publish(message(i) for i in range(2000, 2500))
    child({"jar": None, "mode": "available-now", "options": options, "checkpoint": ck, "out": out})
    assert rows(out) == sorted(s.sent, key=lambda r: r[1]), "every message once, through both sources"
    # The offsets both wrote are one format: each parses as the other's.
    for f in sorted(glob.glob(os.path.join(ck, "offsets", "[0-9]*"))):
        with open(f) as text:
            offset = json.loads(text.read().splitlines()[-1])
        assert set(offset) <= {str(s.rid), "minPartitions", "stopped", "finished"}, offset


def test_real_time_mode_hands_over_each_message_as_it_is_recorded(node, tmp_path):
    s = Stream(node, 4103)
    s.publish(message(i) for i in range(100))
    cfg = {"jar": sulis.spark.jar(), "format": JVM, "mode": "realtime", "trigger": "5 seconds",
           "options": {"driverDir": node[0].dir, "recordingIds": s.rid}, "checkpoint": str(tmp_path / "ck"),
           "conf": {"spark.sql.streaming.realTimeMode.allowlistCheck": "true"}}
    with RealTimeChild(cfg, tmp_path / "child.err") as q:
        for k in range(4):  # while it runs: what is recorded is read
            s.publish(message(i) for i in range(100 + 100 * k, 200 + 100 * k))
            time.sleep(0.5)
        want = {p for _, p, _ in s.sent}
        await_until(lambda: want <= q.positions(), 60, "every position on the console")
    assert q.positions() == want
    seen = _console_rows(q.out)
    assert len(seen) == len(set(seen)), "a message handed over twice"


def test_real_time_mode_over_a_cluster_log_never_passes_the_commit_position(make_driver, tmp_path):
    """Real-time mode follows the leader's log as it is recorded; with both followers paused the leader records
    entries no quorum holds: the query hands none of them over until the followers return and they commit."""
    from clusterprocs import journal_cluster

    def commit_of(n) -> int:
        return next(c["value"] for c in sulis.CountersReader(n.driver_dir).counters()
                    if c["type_id"] == COMMIT_POSITION_TYPE_ID)

    with journal_cluster(tmp_path, make_driver().dir,
                         extra=("--leader-heartbeat-timeout", "15s", "--session-timeout", "120s")) as (nodes, c):
        for i in range(20):
            await_until(lambda i=i: c.offer(f"m{i}".encode()) > 0, 20, f"ingress to take m{i}")
        lead = nodes[c.leader_member_id]
        await_until(lambda: len(lead.journal_lines()) >= 20, 30, "the leader's service to apply m0..m19")
        cfg = {"jar": sulis.spark.jar(), "format": JVM, "mode": "realtime", "trigger": "5 seconds",
               "options": {"clusterDir": lead.cluster_dir, "driverDir": lead.driver_dir},
               "columns": ["position", "cast(value as string) as v"], "checkpoint": str(tmp_path / "ck"),
               "conf": {"spark.sql.streaming.realTimeMode.allowlistCheck": "true"}}
        with RealTimeChild(cfg, tmp_path / "child.err") as q:
            await_until(lambda: len(q.positions()) >= 20, 60, "m0..m19 on the console")
            followers = [n for n in nodes if n is not lead]
            for n in followers:
                n.pause()
            try:
                commit = commit_of(lead)
                for i in range(5):
                    await_until(lambda i=i: c.offer(f"u{i}".encode()) > 0, 20, f"ingress to take u{i}")
                client = sulis.Client(dir=lead.driver_dir)
                archive = sulis.ArchiveClient(client)
                log_id = sulis.spark.cluster_log.log_recording_ids(lead.cluster_dir)[-1]
                try:
                    await_until(lambda: archive.get_recording_position(log_id) > commit, 10,
                                "the leader to record past its commit position")
                finally:
                    archive.close()
                    client.close()
                # The console prints a batch's rows at its end (5 s, the shortest real-time trigger): a batch
                # ends meanwhile, which would show them, were they handed over. The pause stays under the
                # members' 10 s driver timeout: a member paused longer finds its own driver's heartbeat stale
                # when resumed, and exits.
                time.sleep(6.0)
                assert commit_of(lead) == commit, "a paused quorum committed"
                assert max(q.positions()) <= commit, (max(q.positions()), commit)
            finally:
                for n in followers:
                    n.resume()
            # Back: u0..u4 commit (in this term, or a new leader's) and come out.
            try:
                await_until(lambda: len(q.positions()) >= 25, 60, "u0..u4 once committed")
            except AssertionError:
                raise AssertionError(f"commit {commit_of(lead)}, console {sorted(q.positions())[-3:]}, journal "
                                     f"{lead.journal_lines()[-3:]}, leader {c.leader_member_id}\n"
                                     + "\n".join(f"member {n.id}: {n.stderr()[-2000:]}" for n in nodes)) from None
        rows = [x.split("|") for x in q.out if x.startswith("|") and x.split("|")[1].strip().isdigit()]
        texts = [r[2].strip() for r in sorted(rows, key=lambda r: int(r[1]))]
        assert texts[:20] == [f"m{i}" for i in range(20)] and set(texts[20:]) >= {f"u{i}" for i in range(5)}


def test_a_cluster_members_log_reads_as_in_the_python_source(make_driver, tmp_path):
    """``clusterDir``: the JVM source reads a member's committed log as the Python source does (the session
    messages, their header in columns), both equal to what the member's service applied."""
    from clusterprocs import journal_cluster

    with journal_cluster(tmp_path, make_driver().dir, n=1) as ((member,), c):
        echoed: list[bytes] = []
        for i in range(60):
            await_until(lambda i=i: c.offer(f"m{i}".encode()) > 0, 20, f"ingress to take m{i}")
        await_until(lambda: c.poll_egress(lambda p, t: echoed.append(p)) >= 0 and len(echoed) >= 60, 30,
                    "every echo")
        options = {"clusterDir": member.cluster_dir, "driverDir": member.driver_dir}
        reads = both(None, tmp_path, "log", options)
        results = child({"jar": sulis.spark.jar(), "mode": "batch", "reads": reads})["results"]
        assert results[0] == results[1] and "error" not in results[0], results
        jvm = table(str(tmp_path / "log-jvm"))
        assert jvm == table(str(tmp_path / "log-py"))
        assert [bytes(r["value"]).decode() for r in jvm] == member.journal_lines() == [f"m{i}" for i in range(60)]
        assert {r["cluster_session_id"] for r in jvm} == {c.cluster_session_id}


def test_a_recording_truncated_below_the_checkpoint_is_data_loss_named_or_skipped(node, tmp_path):
    """The JVM source restarted on a checkpoint after the archive lost what it had read: DataLossError naming
    the recording and positions (the planner's rules, as the Python source's); failOnDataLoss=false goes on
    from where the recording now ends."""
    _, _, client, ac = node
    ac.start_recording(CHANNEL, 4114)
    pub = client.add_exclusive_publication(CHANNEL, 4114)
    rid = await_until(lambda: next((d for d in ac.list_recordings_for_uri(CHANNEL, 4114)
                                    if d.session_id == pub.session_id), None), what="the recording").recording_id
    positions = []
    for i in range(300):
        while (r := pub.offer(message(i))) < 0:
            pass
        positions.append(r)
    pub.close()
    await_until(lambda: ac.get_stop_position(rid) >= positions[-1], what="the recording to stop")
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    options = {"driverDir": node[0].dir, "recordingIds": rid}
    cfg = {"jar": sulis.spark.jar(), "format": JVM, "mode": "available-now", "options": options, "checkpoint": ck,
           "out": out}
    child(cfg)
    assert len(rows(out)) == 300
    ac.truncate_recording(rid, positions[100])
    result = child(cfg, fails=True)
    failed = result["error"]
    assert "io.sulis.spark.SulisException$DataLossError: recording" in result["stderr"], result["stderr"][-3000:]
    assert f"recording {rid} was truncated to position {positions[100]}, below position {positions[-1]}" in failed
    child({**cfg, "options": {**options, "failOnDataLoss": "false"}})
    assert len(rows(out)) == 300, "nothing read twice, nothing invented"


def test_a_corrupt_frame_fails_the_read_naming_it_in_both_sources(node, tmp_path):
    """A recording with a corrupt frame at message 200 of 400, read by replay and from the segment files, by
    each source: every read fails naming the recording and the damage, none returns the 199 rows before it
    as the whole recording."""
    drv, archive, client, ac = node
    s = Stream(node, 4117)
    s.publish(message(i) for i in range(400))
    s.pub.close()
    await_until(lambda: ac.get_stop_position(s.rid) >= 0, what="the recording to stop")
    at = s.sent[198][1]  # message 200's first frame starts where message 199 ends
    segment = next(d for d in ac.list_recordings_for_uri(CHANNEL, 4117) if d.recording_id == s.rid).segment_file_length
    path = os.path.join(archive.dir, f"{s.rid}-{at - at % segment}.rec")
    with open(path, "r+b") as f:
        f.seek(at % segment + 8)
        f.write((12345).to_bytes(4, "little"))
    EXPECTED_ARCHIVE_ERRORS.append(f"corrupt recording data in {path}")
    reads = [r for mode in ("replay", "files")
             for r in both(node, tmp_path, mode, {"driverDir": drv.dir, "recordingIds": s.rid, "readMode": mode,
                                                  "archiveDir": archive.dir})]
    results = child({"jar": sulis.spark.jar(), "mode": "batch", "reads": reads})["results"]
    for read, result in zip(reads, results, strict=True):
        text = result.get("error", "")
        assert f"recording {s.rid}" in text and "corrupt" in text, (read["format"], read["options"], result)
        if read["format"] == JVM:
            assert "io.sulis.spark.SulisException$ReadError" in text, text[-2000:]
