"""The JVM source of ``format("sulis")`` (``jvm/``, ``io.sulis.spark.SulisProvider``) against the same archive
as the Python source: the same rows, the same offsets on one checkpoint (a query moves between the two
exactly once), and Spark's real-time mode. Each Spark driver runs in a process of its own
(``spark_jvm_child.py``): the jar must be on the classpath when Spark's JVM starts."""

from __future__ import annotations

import glob
import json
import os
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


@pytest.fixture(scope="module")
def node():
    drv, archive, client, ac = start_archive_node("sulis-spark-jvm-archive-")
    yield drv, archive, client, ac
    ac.close()
    client.close()
    errors = archive.errors()
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


def child(cfg: dict, timeout: float = 300) -> dict:
    proc = subprocess.run([sys.executable, CHILD, json.dumps(cfg)], capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
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
    jvm = child({"jar": sulis.spark.jar(), "format": JVM, "mode": "batch", "options": options,
                 "out": str(tmp_path / "jvm")})
    py = child({"jar": None, "mode": "batch", "options": options, "out": str(tmp_path / "py")})
    assert jvm["schema"] == py["schema"]
    assert rows(str(tmp_path / "jvm")) == rows(str(tmp_path / "py")) == sorted(s.sent, key=lambda r: r[1])
    # By replay too (the files are local here, so the default reads them).
    child({"jar": sulis.spark.jar(), "format": JVM, "mode": "batch", "options": {**options, "readMode": "replay"},
           "out": str(tmp_path / "jvm-replay")})
    assert rows(str(tmp_path / "jvm-replay")) == sorted(s.sent, key=lambda r: r[1])


def table(out: str) -> list[dict]:
    """Every column of the rows at ``out``, ordered by position."""
    files = glob.glob(os.path.join(out, "*.parquet"))
    return pq.ParquetDataset(files).read().sort_by("position").to_pylist() if files else []


def both(node, tmp_path, name: str, options: dict) -> list[dict]:
    """A read by each source in one Spark driver: ``[jvm, python]``."""
    return [{"format": fmt, "options": options, "out": str(tmp_path / f"{name}-{which}")}
            for which, fmt in (("jvm", JVM), ("py", "sulis"))]


def test_every_row_shape_and_a_malformed_payloads_error_are_the_python_sources(node, tmp_path):
    """``valueSchema`` in each mode and ``includeTimestamp``: the JVM source's rows (every column) and errors are
    the Python source's: both run ``sulis_spark::row_shape``."""
    import numpy as np

    s = Stream(node, 4104)
    tick = np.dtype([("instrument", "<i4"), ("price", "<f8"), ("ok", "u1"), ("qty", "<i2"), ("at", "<i8")])
    ticks = np.zeros(500, tick)
    ticks["instrument"] = np.arange(500) % 7
    ticks["price"] = 100 + np.arange(500) / 8
    ticks["ok"] = np.arange(500) % 2
    ticks["qty"] = -np.arange(500)
    ticks["at"] = 1_700_000_000_000_000_000 + np.arange(500) * 1_000_001
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
        assert len(got) == (499 if name == "dropped" else 500), name
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
        self.proc = subprocess.Popen([sys.executable, CHILD, json.dumps(self.cfg)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, text=True)
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
