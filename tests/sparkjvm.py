"""What the JVM source and sink tests share (``tests/system/test_spark_jvm.py``, reads; ``test_spark_jvm_sink.py``,
writes and kills): an archive node per test module, recorded streams, a Spark driver in a process of its own
(``system/spark_jvm_child.py``: the jar must be on the classpath when Spark's JVM starts) and the rows it wrote."""


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

CHANNEL = "aeron:ipc"
CHILD = os.path.join(os.path.dirname(__file__), "system", "spark_jvm_child.py")
JVM = "io.sulis.spark.SulisProvider"

#: Both modules skip without the jar.
NEEDS_JAR = pytest.mark.skipif(not os.path.exists(sulis.spark.jar()),
                               reason="no sulis jar (scripts/build_jar.sh builds it; it needs a JDK 17)")


#: Parts of archive errors a test caused on purpose (a corrupt frame it wrote): not failures.
EXPECTED_ARCHIVE_ERRORS: list[str] = []


def archive_node():
    """A driver, an archive and clients of both (a test module's fixture, ``node``); at the end, the archive's
    errors other than those ``EXPECTED_ARCHIVE_ERRORS`` names fail the module."""
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


def table(out: str) -> list[dict]:
    """Every column of the rows at ``out``, ordered by position."""
    files = glob.glob(os.path.join(out, "*.parquet"))
    return pq.ParquetDataset(files).read().sort_by("position").to_pylist() if files else []


def both(node, tmp_path, name: str, options: dict) -> list[dict]:
    """A read by each source in one Spark driver: ``[jvm, python]``."""
    return [{"format": fmt, "options": options, "out": str(tmp_path / f"{name}-{which}")}
            for which, fmt in (("jvm", JVM), ("py", sulis.spark.PYTHON_FORMAT))]


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


def _console_rows(out: list[str]) -> list[int]:
    return [int(x.split("|")[1]) for x in out if x.startswith("|") and x.split("|")[1].strip().isdigit()]


def _console_positions(out: list[str]) -> set[int]:
    return set(_console_rows(out))


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


def journal_entries(node, query: str, batch: int) -> list[dict]:
    """The sink's journal entries that may matter to micro-batch ``batch`` of ``query`` (read by the Rust core):
    the query's, and every claim."""
    return sulis._native.spark_sink_journal_entries([("driverDir", node[0].dir)], query, batch)


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
