"""The JVM source of ``format("sulis")`` (``jvm/``, ``io.sulis.spark.SulisProvider``) against the same archive
as the Python source: the same rows, the same offsets on one checkpoint (a query moves between the two
exactly once), and Spark's real-time mode. Each Spark driver runs in a process of its own
(``spark_jvm_child.py``): the jar must be on the classpath when Spark's JVM starts."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("pyspark")

import pyarrow.parquet as pq  # noqa: E402

import sulis  # noqa: E402
import sulis.spark  # noqa: E402
import sulis.spark.cluster_log  # noqa: E402
from conftest import await_until, start_archive_node  # noqa: E402
from sulis.spark.cluster_log import COMMIT_POSITION_TYPE_ID  # noqa: E402

CHANNEL = "aeron:ipc"
CHILD = os.path.join(os.path.dirname(__file__), "spark_jvm_child.py")
JVM = "io.sulis.spark.SulisProvider"

pytestmark = pytest.mark.skipif(not os.path.exists(sulis.spark.jar()),
                                reason="no sulis jar (scripts/build_jar.sh builds it; it needs a JDK 17)")


#: Parts of archive errors a test caused on purpose (a corrupt frame it wrote): not failures.
EXPECTED_ARCHIVE_ERRORS: list[str] = []


@pytest.fixture(scope="module")
def node():
    drv, archive, client, ac = start_archive_node("sulis-spark-jvm-archive-")
    yield drv, archive, client, ac
    ac.close()
    client.close()
    errors = [e for e in archive.errors() if not any(x in e for x in EXPECTED_ARCHIVE_ERRORS)]
    archive.close()
    drv.close()
    assert errors == [], errors


def message(i: int) -> bytes:
    """Message i: its index, then a body whose length varies; every 97th is fragmented (5000 B)."""
    n = 5000 if i % 97 == 5 else 8 + (i * 37) % 300
    return i.to_bytes(4, "little") + bytes((i + j) & 0xFF for j in range(n))


class Stream:
    """A recorded publication and what was published on it: (value, position, reserved value)."""

    def __init__(self, node, stream_id: int):
        _, _, client, ac = node
        self.ac = ac
        ac.start_recording(CHANNEL, stream_id)
        self.pub = client.add_exclusive_publication(CHANNEL, stream_id)
        self.rid = await_until(lambda: next((d for d in ac.list_recordings_for_uri(CHANNEL, stream_id)
                                             if d.session_id == self.pub.session_id), None),
                               what="the recording to start").recording_id
        self.sent: list[tuple[bytes, int, int]] = []

    def publish(self, messages) -> None:
        deadline = time.monotonic() + 20
        for m in messages:
            rv = len(self.sent) * 3 + 1
            while (r := self.pub.offer(m, reserved_value=rv)) < 0:
                assert time.monotonic() < deadline, f"offer stuck: {sulis.result_name(r)}"
            self.sent.append((m, r, rv))
        end = self.pub.position
        await_until(lambda: self.ac.get_recording_position(self.rid) >= end, what="the archive to record it all")


def child(cfg: dict, timeout: float = 300, fails: bool = False) -> dict:
    """Runs a Spark driver (``spark_jvm_child.py``) to its end: its last JSON line (an error's with ``fails``,
    with the driver's stderr, where the JVM's stack trace names the exception's class)."""
    proc = subprocess.run([sys.executable, CHILD, json.dumps(cfg)], capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    if fails:
        assert proc.returncode == 1 and lines and "error" in lines[-1], (lines, proc.stderr[-3000:])
        return {**lines[-1], "stderr": proc.stderr}
    else:
        assert proc.returncode == 0 and lines and lines[-1].get("done"), (lines, proc.stderr[-3000:])
    return lines[-1]


def rows(out: str) -> list[tuple[bytes, int, int]]:
    files = glob.glob(os.path.join(out, "*.parquet"))
    table = pq.ParquetDataset(files).read() if files else None
    if table is None:
        return []
    d = table.to_pydict()
    return sorted(zip(d["value"], d["position"], d["reserved_value"], strict=True), key=lambda r: r[1])


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


def table(out: str) -> list[dict]:
    """Every column of the rows at ``out``, ordered by position."""
    files = glob.glob(os.path.join(out, "*.parquet"))
    return pq.ParquetDataset(files).read().sort_by("position").to_pylist() if files else []


def both(node, tmp_path, name: str, options: dict) -> list[dict]:
    """A read by each source in one Spark driver: ``[jvm, python]``."""
    return [{"format": fmt, "options": options, "out": str(tmp_path / f"{name}-{which}")}
            for which, fmt in (("jvm", JVM), ("py", sulis.spark.PYTHON_FORMAT))]


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


class RealTimeChild:
    """A real-time-mode query in a Spark driver of its own, its console output read as it comes."""

    def __init__(self, cfg: dict, err_path) -> None:
        self.cfg, self.err_path = cfg, err_path
        self.out: list[str] = []

    def __enter__(self) -> RealTimeChild:
        self.err = open(self.err_path, "w")  # noqa: SIM115 - closed in __exit__
        # Its own process group: kill() reaches the JVM the Python driver started, too.
        self.proc = subprocess.Popen([sys.executable, CHILD, json.dumps(self.cfg)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, text=True, process_group=0)
        self.reader = threading.Thread(target=lambda: self.out.extend(iter(self.proc.stdout.readline, "")),
                                       daemon=True)
        self.reader.start()
        try:
            await_until(lambda: any('"started"' in x for x in self.out) or self.proc.poll() is not None, 120,
                        "the query to start")
            assert self.proc.poll() is None, (self.out, self.err_path.read_text()[-3000:])
        except BaseException:
            self.__exit__()
            raise
        return self

    def positions(self) -> set[int]:
        return set(_console_rows(self.out))

    def kill(self) -> None:
        """kill -9 of the Spark driver and its JVM."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def __exit__(self, *exc) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
            self.proc.wait(timeout=120)
            self.reader.join(timeout=60)  # the child's stdout ended
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            for f in (self.proc.stdin, self.proc.stdout):
                f.close()
            self.proc.wait()
            self.err.close()


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


def _console_rows(out: list[str]) -> list[int]:
    return [int(x.split("|")[1]) for x in out if x.startswith("|") and x.split("|")[1].strip().isdigit()]


def _console_positions(out: list[str]) -> set[int]:
    return set(_console_rows(out))


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


def recorded(node, stream_id: int, timestamp: bool = False) -> list[tuple]:
    """Every message recorded on ``stream_id`` (value, and with ``timestamp`` its reserved value), in the
    order of the recordings and their positions."""
    from sulis.spark.options import ArchiveAddress
    from sulis.spark.replay import RecordingRange, read_range

    drv, _, _, ac = node
    address = ArchiveAddress(driver_dir=drv.dir)
    out: list[tuple] = []
    for d in sorted(ac.list_recordings_for_uri(CHANNEL, stream_id), key=lambda d: d.recording_id):
        end = d.stop_position if d.stop_position >= 0 else ac.get_recording_position(d.recording_id)
        rng = RecordingRange(d.recording_id, d.stream_id, d.session_id, d.start_position, end,
                             d.start_position, end)
        for b in read_range(address, rng):
            rows = b.to_pydict()
            out.extend(zip(rows["value"], rows["reserved_value"], strict=True) if timestamp
                       else ((v,) for v in rows["value"]))
    return out


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


def journal_entries(node, query: str, batch: int) -> list[dict]:
    """The sink's journal entries that may matter to micro-batch ``batch`` of ``query`` (read by the Rust core):
    the query's, and every claim."""
    return sulis._native.spark_sink_journal_entries([("driverDir", node[0].dir)], query, batch)


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


def committed_parquet(out) -> list[tuple[bytes, int, int]]:
    """The rows of the Parquet sink's committed files (its ``_spark_metadata`` log; a failed micro-batch may
    leave files the log does not name): (value, recording_id, position) each, sorted."""
    meta = os.path.join(out, "_spark_metadata")
    files: set[str] = set()
    for name in os.listdir(meta):
        if name.startswith("."):  # Hadoop's .crc files
            continue
        with open(os.path.join(meta, name)) as f:
            for line in f.read().splitlines()[1:]:
                entry = json.loads(line)
                if entry.get("action") == "add":
                    files.add(entry["path"].removeprefix("file://"))
    table = pq.ParquetDataset(sorted(files)).read().select(["value", "recording_id", "position"])
    d = table.to_pydict()
    return sorted(zip(d["value"], d["recording_id"], d["position"], strict=True), key=lambda r: (r[1], r[2]))


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
