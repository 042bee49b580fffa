"""Retention: the archive removes old segment files by age and by size, as the rules of its policy file say,
read again whenever the file changes, never what a replay or a hold still needs, never the segment it writes."""

from __future__ import annotations

import json
import os
import shutil
import struct
import time

import pytest

import sulis
from conftest import await_until, make_dir, run_cli
from sulis import _native
from sulis.archive import RecordingSignal

SEGMENT = 64 * 1024
HOUR = 3600


def message(i: int) -> bytes:
    """Message ``i``: its index and a body, 992 bytes, so each takes 1 KiB of a term with its header."""
    return struct.pack("<I", i) + bytes((i + j) & 0xFF for j in range(988))


def publish(pub, first: int, count: int) -> None:
    deadline = time.monotonic() + 30
    for i in range(first, first + count):
        while (r := pub.offer(message(i))) < 0:
            assert r != sulis.CLOSED and time.monotonic() < deadline, f"offer stuck: {sulis.result_name(r)}"


def indices(sub, count: int, timeout: float = 30) -> list[int]:
    """The indices of the next ``count`` messages a replay delivers (within ``timeout`` seconds)."""
    got: list[int] = []
    assembler = sulis.FragmentAssembler(lambda b, h: got.append(struct.unpack_from("<I", bytes(b))[0]))
    await_until(lambda: sub.poll(assembler, 100) >= 0 and len(got) >= count, timeout=timeout,
                what=lambda: f"{count} replayed messages, got {len(got)}")
    return got


def segment_files(archive_dir: str, rid: int) -> list[int]:
    """The bases of recording ``rid``'s segment files, in order."""
    bases = [int(f.split("-")[1].split(".")[0]) for f in os.listdir(archive_dir)
             if f.startswith(f"{rid}-") and f.endswith(".rec")]
    return sorted(bases)


def age(archive_dir: str, rid: int, seconds: float, below: int | None = None) -> None:
    """Makes recording ``rid``'s segment files (those below ``below``) look last written ``seconds`` ago."""
    then = time.time() - seconds
    for base in segment_files(archive_dir, rid):
        if below is None or base < below:
            os.utime(os.path.join(archive_dir, f"{rid}-{base}.rec"), (then, then))


def retention_counters(driver_dir: str) -> tuple[int, int]:
    values = {c["label"].split(" - archiveId")[0]: c["value"] for c in sulis.CountersReader(driver_dir).counters()
              if c["type_id"] in (9103, 9104)}
    return values["archive retention segments removed"], values["archive retention bytes removed"]


def write_policy(archive_dir: str, text: str) -> None:
    """Writes the policy whole (a temporary name, then a rename), as an operator's tool would."""
    tmp = os.path.join(archive_dir, ".retention.policy.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(archive_dir, "retention.policy"))


@pytest.fixture
def archive_dir():
    d = make_dir("sulis-retention-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(params=["shared", "dedicated"])
def archive(request, driver, archive_dir):
    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=SEGMENT,
                       retention_check_interval="20ms", threading_mode=request.param) as a:
        yield a
        assert a.errors() == []


@pytest.fixture
def ac(client, archive):
    with sulis.ArchiveClient(client) as ac:
        yield ac


def record(ac, client, stream_id: int, count: int, stop: bool = True):
    """Records ``count`` messages on IPC stream ``stream_id``; returns (recording id, publication)."""
    ac.start_recording("aeron:ipc", stream_id)
    pub = client.add_publication("aeron:ipc", stream_id)
    rid = ac.await_signal(RecordingSignal.START).recording_id
    publish(pub, 0, count)
    await_until(lambda: ac.get_recording_position(rid) == pub.position, what="recorded to the end")
    if stop:
        ac.stop_recording("aeron:ipc", stream_id)
        ac.await_signal(RecordingSignal.STOP, rid)
    return rid, pub


def a_check_ran(ac, client, archive_dir: str, stream_id: int) -> None:
    """Returns once the archive ran a whole retention check after this call: a one-segment recording on
    ``stream_id`` (which a ``max-age=1h`` rule governs), made old, is deleted whole by the first check that
    sees it, and a check judges every recording in one go."""
    witness, _ = record(ac, client, stream_id, 8)
    age(archive_dir, witness, 2 * HOUR)
    await_until(lambda: ac.list_recording(witness) is None, what=f"witness recording {witness} deleted")


def first_index_from(ac, rid: int) -> list[int]:
    """Every message index a replay of the whole recording (from its start) delivers."""
    d = ac.list_recording(rid)
    n = (d.stop_position - d.start_position) // 1024
    return indices(ac.replay(rid, "aeron:ipc", 2001), n)


def test_segments_older_than_max_age_go_then_the_whole_recording_and_the_counters_say_so(
        driver, client, archive, archive_dir, ac, capfd):
    rid, _ = record(ac, client, 1001, 640)  # 10 segment files of 64 KiB
    assert segment_files(archive_dir, rid) == [i * SEGMENT for i in range(10)]
    age(archive_dir, rid, 2 * HOUR, below=7 * SEGMENT)
    # A policy written while the archive runs is read at the next check; another stream's rule decides nothing.
    write_policy(archive_dir, "stream=9 max-age=1s\nstream=1001 max-age=1h\n")
    await_until(lambda: ac.get_start_position(rid) == 7 * SEGMENT, what="the start moved past the old segments")
    await_until(lambda: segment_files(archive_dir, rid) == [7 * SEGMENT, 8 * SEGMENT, 9 * SEGMENT],
                what="the old segment files deleted")
    assert first_index_from(ac, rid) == list(range(7 * 64, 640))
    assert retention_counters(driver.dir) == (7, 7 * SEGMENT)
    # The Prometheus exporter's families, by archive id.
    from sulis.cli.prometheus import DriverCollector

    metrics = {s.name: (s.labels, s.value) for f in DriverCollector(driver.dir).collect() for s in f.samples}
    assert metrics["sulis_archive_retention_segments_removed_total"] == ({"archive_id": str(archive.archive_id)}, 7)
    assert metrics["sulis_archive_retention_bytes_removed_total"][1] == 7 * SEGMENT
    said = capfd.readouterr().err
    assert "retention: 2 rules from" in said
    assert f"retention: recording {rid} (stream 1001, aeron:ipc) now starts at {7 * SEGMENT}: 7 segment files" in said
    assert "older than max-age 1h (retention rule at line 2)" in said
    # All of a stopped recording older than the max age: it goes whole.
    age(archive_dir, rid, 2 * HOUR)
    await_until(lambda: ac.list_recording(rid) is None, what="the recording deleted")
    await_until(lambda: segment_files(archive_dir, rid) == [], what="its files deleted")
    assert retention_counters(driver.dir) == (10, 640 * 1024)
    assert "deleted whole, 3 segment files" in capfd.readouterr().err


def test_a_live_recording_keeps_about_max_size_and_never_loses_the_segment_it_writes(
        client, archive, archive_dir, ac):
    write_policy(archive_dir, "channel=aeron:ipc* max-size=192k\n")
    rid, pub = record(ac, client, 1002, 64, stop=False)
    for first in range(64, 1024, 64):
        publish(pub, first, 64)
        await_until(lambda: ac.get_recording_position(rid) == pub.position, what="recorded")
        # Kafka's rule: the oldest segment goes while what remains holds at least max-size bytes.
        await_until(lambda: min(192 * 1024, pub.position) <= pub.position - ac.get_start_position(rid)
                    < 192 * 1024 + SEGMENT,
                    what=lambda: f"start {ac.get_start_position(rid)} end {pub.position}")
        assert segment_files(archive_dir, rid)[-1] in ((pub.position - 1) // SEGMENT * SEGMENT,
                                                       pub.position // SEGMENT * SEGMENT)
    ac.stop_recording("aeron:ipc", 1002)
    ac.await_signal(RecordingSignal.STOP, rid)
    start = ac.get_start_position(rid)
    assert first_index_from(ac, rid) == list(range(start // 1024, 1024))


def test_a_replay_and_a_hold_keep_what_they_still_need_until_they_let_go(
        driver, client, archive, archive_dir, ac, capfd):
    rid, _ = record(ac, client, 1003, 640)
    age(archive_dir, rid, 2 * HOUR)
    # A replay that has read nothing yet holds the whole recording: its subscriber is not polled.
    sub = ac.replay(rid, "aeron:ipc", 2003)
    write_policy(archive_dir, "stream=1003 max-age=1h\n")
    await_until(lambda: "retention: 1 rules from" in capfd.readouterr().err, what="the policy read")
    # Hold from the middle of segment 4: once the replay is done, segments 0 to 3 may go, not 4 on.
    _native.archive_hold(archive_dir, "spark-query-1", [(rid, 4 * SEGMENT + 1024)])
    # The recording stays whole while the replay is mid-read.
    a_check_ran(ac, client, archive_dir, 1003)
    assert ac.get_start_position(rid) == 0
    assert indices(sub, 640) == list(range(640))
    sub.close()
    await_until(lambda: ac.get_start_position(rid) == 4 * SEGMENT, what="the segments below the hold removed")
    a_check_ran(ac, client, archive_dir, 1003)
    assert ac.get_start_position(rid) == 4 * SEGMENT and ac.list_recording(rid) is not None
    # A hold that was not renewed within retention_hold_timeout holds nothing.
    hold = os.path.join(archive_dir, "holds", "spark-query-1.hold")
    then = time.time() - 8 * 24 * HOUR
    os.utime(hold, (then, then))
    await_until(lambda: ac.list_recording(rid) is None, what="the recording deleted once the hold lapsed")
    assert "hold 'spark-query-1' lapsed" in capfd.readouterr().err
    await_until(lambda: not os.path.exists(hold), what="the lapsed hold's file deleted")
    assert not _native.archive_release_hold(archive_dir, "spark-query-1")


def test_a_policy_that_does_not_read_is_named_and_changes_nothing(driver, client, archive_dir, capfd):
    write_policy(archive_dir, "stream=1 max-age=7d\nstream=2 max-szie=1g\n")
    with pytest.raises(sulis.SulisError) as e:
        sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=SEGMENT)
    assert "retention.policy: line 2 ('max-szie=1g'): unknown key 'max-szie' (did you mean max-size?)" in str(e.value)
    write_policy(archive_dir, "stream=1004 max-size=64k\n")
    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=SEGMENT,
                       retention_check_interval="20ms") as archive, sulis.ArchiveClient(client) as ac:
        rid, pub = record(ac, client, 1004, 128, stop=False)
        await_until(lambda: ac.get_start_position(rid) == SEGMENT, what="the rule in force")
        # A broken edit keeps the rules read before, and says so in the archive's errors.
        write_policy(archive_dir, "stream=1004 max-size=64q\n")
        await_until(lambda: any("max-size=64q" in e for e in archive.errors()), what="the error recorded")
        assert "the rules read before stay in force" in archive.errors()[-1]
        publish(pub, 128, 64)
        await_until(lambda: ac.get_start_position(rid) == 2 * SEGMENT, what="the rule read before applied")
        # Removing the file stops retention: once the archive said so, nothing more goes.
        os.remove(os.path.join(archive_dir, "retention.policy"))
        await_until(lambda: "is gone: nothing is removed from now on" in capfd.readouterr().err,
                    what="the archive saw the policy gone")
        publish(pub, 192, 128)
        await_until(lambda: ac.get_recording_position(rid) == pub.position, what="recorded")
        assert ac.get_start_position(rid) == 2 * SEGMENT


def test_the_tool_shows_the_rules_the_holds_and_what_goes_next(driver, client, archive, archive_dir, ac):
    rid, _ = record(ac, client, 1005, 320)
    other, _ = record(ac, client, 1006, 64)
    age(archive_dir, rid, 2 * HOUR, below=3 * SEGMENT)
    policy = os.path.join(make_dir("sulis-policy-"), "rules")
    with open(policy, "w") as f:
        f.write("stream=1005 max-age=1h\n")
    out = run_cli("archive-tool", archive_dir, "retention", "--policy-file", policy, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["rules"] == ["line 1: stream=1005 max-age=1h"]
    rows = {r["recording_id"]: r for r in doc["recordings"]}
    assert rows[rid]["next"] == f"segments below {3 * SEGMENT} ({3 * SEGMENT} bytes): older than max-age 1h " \
                               "(retention rule at line 1)"
    assert rows[other]["next"] == "kept whole: no rule matches"
    out = run_cli("archive-tool", archive_dir, "hold", str(rid), "--name", "backup", "--position", str(SEGMENT))
    assert out.returncode == 0 and "hold 'backup': recording" in out.stdout, out.stderr
    out = run_cli("archive-tool", archive_dir, "retention", "--policy-file", policy)
    assert f"hold 'backup': recording {rid} from position {SEGMENT} (live" in out.stdout
    assert f"segments below {SEGMENT} ({SEGMENT} bytes)" in out.stdout
    out = run_cli("archive-tool", archive_dir, "release", "--name", "backup")
    assert out.returncode == 0 and "hold 'backup' released" in out.stdout
