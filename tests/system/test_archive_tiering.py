"""Tiered storage: closed segments move to an S3-compatible object store (S3Proxy, a process of its own that the
test starts), verified, and leave the disk; a replay reads the whole recording whichever tier holds each part;
a replay and a ReplayMerge read on while the segments under them move; a kill -9 of the archive at each step of an
upload loses nothing; a store that goes away mid-read fails the read
naming the segment and the store, and once it is back the read completes; retention counts what moved and
removes it from the store too. Credentials come from the environment and are never logged.

Promise: docs/retention.md, "Tiered storage"."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import time

import pytest
from test_archive_retention import indices, message, write_policy

import sulis
from conftest import KERNEL_STALL, await_until, free_udp_port, make_dir, run_cli
from objectstore import SECRET_KEY
from sulis import _native
from sulis.archive import RecordingSignal

SEGMENT = 64 * 1024
COUNT = 640  # 1 KiB a message: 10 segment files
#: The recording's channel: 64 KiB terms, so a replay reads at most 32 KiB ahead of its subscriber.
CHANNEL = "aeron:ipc?term-length=64k"
BUCKET, PREFIX = "tiered", "archives"


@pytest.fixture
def archive_dir():
    d = make_dir("sulis-tiering-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def store(s3_server, monkeypatch):
    """The S3 server, its credentials in this process's environment (where an archive looks first)."""
    for k, v in s3_server.credentials().items():
        monkeypatch.setenv(k, v)
    return s3_server


def options(store) -> dict:
    # tier_timeout a hang guard: beside busy loops the store (a JVM) answered a PUT after more than the default 30 s,
    # and the archive logged the upload as failed (tried again later) where the tests want no error.
    return {"segment_file_length": SEGMENT, "retention_check_interval": "20ms",
            "tier_store": store.url(BUCKET, PREFIX), "tier_timeout": f"{KERNEL_STALL:.0f}s"}


def tiered_archive(driver, archive_dir: str, store, policy: str = "stream=* tier-after=0s\n", **extra):
    write_policy(archive_dir, policy)
    return sulis.Archive(archive_dir, driver_dir=driver.dir, **{**options(store), **extra})


def publish(pub, first: int, count: int) -> None:
    for i in range(first, first + count):
        await_until(lambda i=i: pub.offer(message(i)) > 0, timeout=30, interval=0, what=f"message {i} offered")


def record(ac, client, stream_id: int, count: int = COUNT) -> int:
    """Records ``count`` messages on ``CHANNEL`` stream ``stream_id``, stopped; its recording id."""
    ac.start_recording(CHANNEL, stream_id)
    pub = client.add_exclusive_publication(CHANNEL, stream_id)
    rid = ac.await_signal(RecordingSignal.START).recording_id
    publish(pub, 0, count)
    await_until(lambda: ac.get_recording_position(rid) == pub.position, what="recorded to the end")
    ac.stop_recording(CHANNEL, stream_id)
    ac.await_signal(RecordingSignal.STOP, rid)
    pub.close()
    return rid


def where(archive_dir: str, rid: int) -> list[str]:
    """Where each of the recording's segments is, in order ("disk", "store", "disk and store")."""
    return [loc for _, _, loc, _, _ in _native.archive_segments(archive_dir, rid)]


#: A hang guard for what goes through the store: each move is an upload to the S3 server's process, read back
#: to verify it; beside busy CPUs nine moves outlasted 10 s, and one PUT waited over 30 s for its answer.
STORE_WAIT = KERNEL_STALL


def moved(archive_dir: str, rid: int, segments: int = 10) -> bool:
    """Every closed segment in the store and gone from the disk; the last one (it may be extended) on the disk."""
    return where(archive_dir, rid) == ["store"] * (segments - 1) + ["disk"]


def await_moved(archive_dir: str, rid: int, segments: int = 10, what: str = "moved") -> None:
    await_until(lambda: moved(archive_dir, rid, segments), STORE_WAIT,
                what=lambda: f"{what}: {where(archive_dir, rid)}")


def local_files(archive_dir: str, rid: int) -> list[int]:
    return sorted(int(f.split("-")[1].split(".")[0]) for f in os.listdir(archive_dir)
                  if f.startswith(f"{rid}-") and f.endswith(".rec"))


def tier_counters(driver_dir: str) -> tuple[int, int]:
    values = {c["type_id"]: c["value"] for c in sulis.CountersReader(driver_dir).counters()
              if c["type_id"] in (9105, 9106)}
    return values[9105], values[9106]


def replay_all(ac, rid: int, stream_id: int = 2001, position: int | None = None) -> list[int]:
    """The indices of every message a replay from ``position`` (the start) to the stop delivers."""
    d = ac.list_recording(rid)
    start = d.start_position if position is None else position
    return indices(ac.replay(rid, "aeron:ipc", stream_id, position=position), (d.stop_position - start) // 1024)


@pytest.mark.parametrize("mode", ["shared", "dedicated"])
def test_closed_segments_move_verified_and_replays_read_the_whole_recording_before_and_after_a_restart(
        driver, client, archive_dir, store, mode, capfd):
    with tiered_archive(driver, archive_dir, store, threading_mode=mode) as archive, \
            sulis.ArchiveClient(client) as ac:
        rid = record(ac, client, 1001)
        await_moved(archive_dir, rid, what="9 segments moved")
        assert local_files(archive_dir, rid) == [9 * SEGMENT]
        objects = store.objects(BUCKET)
        assert sorted(objects.values()) == [SEGMENT] * 9, objects
        assert all(k.startswith(f"{PREFIX}/") and k.endswith(".rec") for k in objects), objects
        # The tier's thread moves a segment before the archive's conductor takes its event and counts it.
        await_until(lambda: tier_counters(driver.dir) == (9, 9 * SEGMENT), STORE_WAIT,
                    what=lambda: f"9 segments counted as moved: {tier_counters(driver.dir)}")
        # Read back from the store, checked against tiered.log's CRC-32C: the whole recording, and from
        # a message in the middle of a segment that moved.
        assert replay_all(ac, rid) == list(range(COUNT))
        assert replay_all(ac, rid, 2002, position=3 * SEGMENT + 5 * 1024) == list(range(3 * 64 + 5, COUNT))
        assert archive.errors() == []
    # A restart knows where each segment is (tiered.log) and reads through an empty cache.
    with tiered_archive(driver, archive_dir, store) as archive, sulis.ArchiveClient(client) as ac:
        assert replay_all(ac, rid, 2003) == list(range(COUNT))
        assert archive.errors() == []
    err = capfd.readouterr().err
    assert f"segment at {8 * SEGMENT} ({SEGMENT} bytes) moved to {store.endpoint}/{BUCKET}/{PREFIX}/" in err, err
    assert "access key sulis-test-key from the environment" in err, err
    assert SECRET_KEY not in err
    # The tool: what is where, and verify reads what is on the disk.
    listed = run_cli("archive-tool", archive_dir, "segments", str(rid))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count(": store,") == 9 and f"segment at {9 * SEGMENT}: disk" in listed.stdout, listed.stdout
    verified = run_cli("archive-tool", archive_dir, "verify")
    assert verified.returncode == 0 and "9 segments in the object store not read" in verified.stdout, verified.stdout
    report = json.loads(run_cli("archive-tool", archive_dir, "retention", "--json").stdout)
    (row,) = report["recordings"]
    assert (row["segments_in_store"], row["bytes_in_store"]) == (9, 9 * SEGMENT), row


@pytest.mark.parametrize("point", ["tier-mid-upload", "tier-after-upload", "tier-after-log"])
def test_kill_9_at_each_step_of_an_upload_loses_nothing(driver, client, archive_dir, store, spawn, point, capfd):
    """The archive aborts (``SULIS_ARCHIVE_CRASH_AT``) half-way through sending a segment, after the store has
    it but before it is verified and logged, and after it is logged but before the local file is removed. The
    disk keeps every segment until the log holds it; the restarted archive moves them all, the one whose upload
    was logged only loses its local copy, and a replay reads the whole recording."""
    write_policy(archive_dir, "stream=* tier-after=0s\n")
    child = spawn("archive", driver.dir, archive_dir, json.dumps(options(store)),
                  env={**os.environ, **store.credentials(), "SULIS_ARCHIVE_CRASH_AT": point})
    child.read()
    with sulis.ArchiveClient(client, message_timeout=5.0) as ac:
        # The first upload starts at the first check after the recording's first segment closed: the
        # archive may abort before the recording is stopped, so it is not waited for here.
        ac.start_recording(CHANNEL, 1001)
        pub = client.add_exclusive_publication(CHANNEL, 1001)
        rid = ac.await_signal(RecordingSignal.START).recording_id
        sent = 0
        while child.proc.poll() is None and sent < COUNT:
            if pub.offer(message(sent)) > 0:
                sent += 1
    assert child.proc.wait(60) == -signal.SIGABRT, child.stderr()
    assert f"crash point '{point}' reached" in child.stderr()
    pub.close()
    logged = (_native.archive_segments(archive_dir, rid))
    on_disk = local_files(archive_dir, rid)
    assert on_disk[0] == 0 and on_disk == [i * SEGMENT for i in range(len(on_disk))], "every segment still there"
    in_log = [loc for _, _, loc, _, _ in logged if "store" in loc]
    assert in_log == (["disk and store"] if point == "tier-after-log" else []), logged
    if point == "tier-after-upload":
        assert len(store.objects(BUCKET)) == 1, "the store holds it; nothing says so yet"
    elif point == "tier-mid-upload":
        assert store.objects(BUCKET) == {}, "half a PUT stores nothing"
    # The restarted archive (no crash point) recovers the recording, finishes or redoes the upload and
    # moves the rest; what the crash cut off the recording's end was never acknowledged past the archive.
    with tiered_archive(driver, archive_dir, store) as archive, sulis.ArchiveClient(client) as ac:
        d = ac.list_recording(rid)
        segments = (d.stop_position - 1) // SEGMENT + 1
        assert segments >= 2
        await_moved(archive_dir, rid, segments)
        assert replay_all(ac, rid) == list(range(d.stop_position // 1024))
        assert archive.errors() == []
    assert len(store.objects(BUCKET)) == segments - 1, "a redone upload wrote the same key again"
    if point == "tier-after-log":
        assert "removed from the disk: the store holds it verified" in capfd.readouterr().err


def test_a_store_gone_mid_read_fails_naming_the_segment_and_the_store_and_the_read_completes_once_it_is_back(
        driver, client, archive_dir, store):
    with tiered_archive(driver, archive_dir, store) as archive, sulis.ArchiveClient(client) as ac:
        rid = record(ac, client, 1001)
        await_moved(archive_dir, rid)
        sub = ac.replay(rid, "aeron:ipc", 2001)
        got: list[int] = []
        assembler = sulis.FragmentAssembler(lambda b, h: got.append(struct.unpack_from("<I", bytes(b))[0]))
        await_until(lambda: sub.poll(assembler, 10) >= 0 and len(got) >= 10, what="the first messages")
        store.kill()  # the first segment is fetched; the replay reads at most 32 KiB ahead of this subscriber
        errors: list = []

        def failed() -> bool:
            sub.poll(assembler, 100)
            errors.extend(ac.poll_errors())
            return bool(errors)
        await_until(failed, timeout=120, what="the replay's error")
        (_, _, text), = errors
        assert f"segment {rid}-{SEGMENT}.rec of recording {rid}" in text, text
        assert f"object store {store.endpoint}/{BUCKET}/{PREFIX}/" in text, text
        assert got == list(range(len(got))) and len(got) <= 2 * 64, "what came before is whole, and no more"
        assert any(f"{rid}-{SEGMENT}.rec" in e for e in archive.errors()), archive.errors()
        store.start()
        assert replay_all(ac, rid, 2002) == list(range(COUNT))


def test_a_live_recording_moves_as_it_goes_and_a_replay_follows_it_from_its_start(driver, client, archive_dir, store):
    # Uploads paced at 256 KiB/s (tier_upload_rate): a segment goes in steps of a tenth of a second's bytes.
    with tiered_archive(driver, archive_dir, store, tier_upload_rate="256k") as archive, \
            sulis.ArchiveClient(client) as ac:
        ac.start_recording(CHANNEL, 1001)
        pub = client.add_exclusive_publication(CHANNEL, 1001)
        rid = ac.await_signal(RecordingSignal.START).recording_id
        publish(pub, 0, 5 * 64 + 10)
        # While it records: the five full segments move; the sixth, being written (10 messages), stays.
        await_until(lambda: where(archive_dir, rid)[:5] == ["store"] * 5, STORE_WAIT,
                    what=lambda: f"the closed segments moved: {where(archive_dir, rid)}")
        sub = ac.replay(rid, "aeron:ipc", 2001, follow=True)
        first = indices(sub, 5 * 64 + 10)
        publish(pub, 5 * 64 + 10, 200)
        assert first + indices(sub, 200) == list(range(5 * 64 + 210))
        assert archive.errors() == []


def test_a_replay_and_a_replay_merge_mid_read_go_on_while_the_segments_they_read_move(
        driver, client, archive_dir, store, monkeypatch):
    """A replay, a ReplayMerge and a reader of the files (Spark's files mode) are each partway into a live
    recording (holding a segment file open, the next ones still to open) when the policy changes to move every
    closed segment: each reads on, in order and whole, the open file from the disk (unlinked, it stays readable
    to whoever holds it), the rest fetched from the store (the files reader from a tiered.log that named none of
    them when it started); the merge then joins the live stream with each message once."""
    monkeypatch.setenv("TMPDIR", make_dir("sulis-tier-reader-"))  # the files reader's cache: this test's own
    with tiered_archive(driver, archive_dir, store, policy="stream=* tier-after=1h\n") as archive, \
            sulis.ArchiveClient(client) as ac:
        ac.start_recording(CHANNEL, 1001)
        pub = client.add_exclusive_publication(CHANNEL, 1001)
        rid = ac.await_signal(RecordingSignal.START).recording_id
        publish(pub, 0, COUNT)
        await_until(lambda: ac.get_recording_position(rid) == pub.position, what="recorded to the end")
        assert where(archive_dir, rid) == ["disk"] * 10, "nothing moves under tier-after=1h"
        replay = ac.replay(rid, "aeron:ipc", 2001, length=COUNT * 1024)
        d = ac.list_recording(rid)
        files = _native.RecordingFileReader(archive_dir, rid, d.start_position, d.term_buffer_length,
                                            d.segment_file_length, d.initial_term_id, d.start_position, COUNT * 1024)
        from_files: list[int] = []
        while len(from_files) < 100:  # a batch ends at a term's end (64 messages): 64, then 36 of the next
            from_files.extend(struct.unpack_from("<I", m)[0] for m in files.read_batch(100 - len(from_files)).to_list())
        assert from_files == list(range(100)), "the files reader stops in segment 1, its file open"
        got: list[int] = []
        merged_got: list[int] = []
        assembler = sulis.FragmentAssembler(lambda b, h: merged_got.append(struct.unpack_from("<I", bytes(b))[0]))
        # Its merge timeout a hang guard: it is not polled while the segments move, while the replay and the
        # files reader read on (three waits of up to STORE_WAIT each), and a fetch stalls it.
        with sulis.ReplayMerge(ac, rid, "aeron:ipc", 2002, CHANNEL, merge_timeout=4 * STORE_WAIT) as merge:
            got = indices(replay, 100)
            await_until(lambda: merge.poll(assembler, 10) >= 0 and len(merged_got) >= 100, 30,
                        what=lambda: f"the merge's first 100 messages, got {len(merged_got)}")
            write_policy(archive_dir, "stream=* tier-after=0s\n")
            await_until(lambda: where(archive_dir, rid)[:9] == ["store"] * 9, STORE_WAIT,
                        what=lambda: f"the closed segments moved under the readers: {where(archive_dir, rid)}")
            got += indices(replay, COUNT - len(got), STORE_WAIT)  # eight segments fetched from the store
            assert got == list(range(COUNT)), "the replay read on, in order, whole"
            while len(batch := files.read_batch()) > 0:
                from_files.extend(struct.unpack_from("<I", m)[0] for m in batch.to_list())
            assert from_files == list(range(COUNT)), "the files reader read on, in order, whole"
            sent, end = COUNT, COUNT + 2000
            deadline = time.monotonic() + STORE_WAIT
            while not (merge.is_merged and len(merged_got) == sent):
                assert time.monotonic() < deadline, f"got {len(merged_got)} of {sent}; {merge!r}"
                went = sent < end and pub.offer(message(sent)) > 0
                sent += went
                if not went and merge.poll(assembler, 20) == 0:
                    time.sleep(0.001)  # nothing to do: leave the CPU to the archive and the store
            assert merged_got == list(range(sent)), "the merge: each message once, in order"
        replay.close()
        pub.close()
        assert archive.errors() == []


def test_an_archive_with_paced_uploads_queued_closes_at_once_and_the_next_start_moves_them(
        driver, client, archive_dir, store):
    """Nine segments queued for a store at 4 KiB/s (tier_upload_rate) would take five minutes to move: the
    archive's close does not wait for them (the one being sent stops at its next step and stays on the disk),
    and the next start, unpaced, moves them all; the recording replays whole."""
    with tiered_archive(driver, archive_dir, store, tier_upload_rate="4k") as archive, \
            sulis.ArchiveClient(client) as ac:
        rid = record(ac, client, 1001)
        assert archive.errors() == []
    # Closed with the queue left: a segment takes 32 s at this rate (read for its checksums, then sent), so
    # most are still on the disk; before, the close sent every queued segment first.
    left = local_files(archive_dir, rid)
    assert len(left) >= 5, f"the close waited for the queued uploads: {len(left)} segment files left"
    assert len(left) + len(store.objects(BUCKET)) >= 10, "nothing lost meanwhile"
    with tiered_archive(driver, archive_dir, store) as archive, sulis.ArchiveClient(client) as ac:
        await_moved(archive_dir, rid, what="9 segments moved after the restart")
        assert replay_all(ac, rid) == list(range(COUNT))
        assert archive.errors() == []


def test_a_truncate_into_a_moved_segment_is_refused_naming_it_and_the_recording_stays_whole(
        driver, client, archive_dir, store):
    with tiered_archive(driver, archive_dir, store) as archive, sulis.ArchiveClient(client) as ac:
        rid = record(ac, client, 1001)
        await_moved(archive_dir, rid)
        with pytest.raises(sulis.ArchiveError, match=f"its segment at {3 * SEGMENT} is in the object store"):
            ac.truncate_recording(rid, 3 * SEGMENT + 5 * 1024)
        assert ac.list_recording(rid).stop_position == COUNT * 1024
        assert replay_all(ac, rid) == list(range(COUNT))
        # At the end of the last moved segment nothing in the store is rewritten: that truncate is taken.
        ac.truncate_recording(rid, 9 * SEGMENT)
        assert replay_all(ac, rid, 2002) == list(range(9 * 64))
        assert archive.errors() == []


def test_a_replication_copies_a_recording_whose_segments_moved(driver, client, make_driver, archive_dir, store):
    """Another archive (its own driver, over UDP) replicates a recording of which all but the last segment are
    in the store: the source's replay reads them back, and the copy replays exact."""
    source_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    dst_driver = make_driver()
    dst_dir = make_dir("sulis-tiering-copy-")
    try:
        with tiered_archive(driver, archive_dir, store, control_channel=source_channel) as archive, \
                sulis.ArchiveClient(client) as src, sulis.Client(dir=dst_driver.dir) as dst_client, \
                sulis.Archive(dst_dir, driver_dir=dst_driver.dir,
                              replication_channel="aeron:udp?endpoint=127.0.0.1:0") as dst, \
                sulis.ArchiveClient(dst_client) as ac:
            rid = record(src, client, 1001)
            await_moved(archive_dir, rid)
            ac.replicate(rid, source_channel)
            copy_id = ac.await_signal(RecordingSignal.REPLICATE).recording_id
            # The copy reads every moved segment back from the store: beside busy CPUs that outlasted 10 s.
            ac.await_signal(RecordingSignal.REPLICATE_END, copy_id, timeout=STORE_WAIT)
            assert ac.list_recording(copy_id).stop_position == src.list_recording(rid).stop_position
            assert replay_all(ac, copy_id) == list(range(COUNT))
            assert archive.errors() == [] and dst.errors() == []
    finally:
        shutil.rmtree(dst_dir, ignore_errors=True)


def test_retention_counts_what_moved_and_removes_it_from_the_store(driver, client, archive_dir, store, capfd):
    with tiered_archive(driver, archive_dir, store) as archive, sulis.ArchiveClient(client) as ac:
        rid = record(ac, client, 1001)
        await_moved(archive_dir, rid)
        # Kafka's rule: the oldest segments go while what remains holds 192 KiB: the start moves to segment 7.
        write_policy(archive_dir, "stream=* tier-after=0s max-size=192k\n")
        await_until(lambda: ac.get_start_position(rid) == 7 * SEGMENT, STORE_WAIT, what="the start moved to segment 7")
        await_until(lambda: len(store.objects(BUCKET)) == 2, STORE_WAIT,
                    what=lambda: f"segments 0-6 gone from the store: "
                    f"{sorted(store.objects(BUCKET))}")
        assert where(archive_dir, rid) == ["store", "store", "disk"]
        assert replay_all(ac, rid) == list(range(7 * 64, COUNT))
        # A purge removes the rest from the store at the next check.
        ac.purge_recording(rid)
        await_until(lambda: store.objects(BUCKET) == {}, STORE_WAIT,
                    what="the purged recording's segments gone from the store")
        assert archive.errors() == []
    assert f"recording {rid} segment at 0 removed from {store.endpoint}" in capfd.readouterr().err


def test_settings_that_cannot_work_stop_the_start_naming_why(driver, archive_dir, store, monkeypatch):
    write_policy(archive_dir, "stream=* tier-after=1h\n")
    with pytest.raises(sulis.ConfigurationError, match="line 1: tier-after .* no tier_store is set"):
        sulis.Archive(archive_dir, driver_dir=driver.dir)
    with pytest.raises(sulis.ConfigurationError, match="no such bucket"):
        sulis.Archive(archive_dir, driver_dir=driver.dir, tier_store=f"{store.endpoint}/missing")
    with pytest.raises(sulis.ConfigurationError, match="tier_store: .* credentials and query parameters"):
        sulis.Archive(archive_dir, driver_dir=driver.dir, tier_store=f"http://k:{SECRET_KEY}@127.0.0.1:1/b")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(sulis.ConfigurationError, match="HTTP 403") as refused:
        sulis.Archive(archive_dir, driver_dir=driver.dir, tier_store=store.url(BUCKET))
    assert "wrong" not in str(refused.value)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.path.join(archive_dir, "no-such-file"))
    with pytest.raises(sulis.ConfigurationError, match="no object store credentials"):
        sulis.Archive(archive_dir, driver_dir=driver.dir, tier_store=store.url(BUCKET))
    # The shared credentials file's profile works as the environment does.
    creds = os.path.join(archive_dir, "credentials")
    with open(creds, "w") as f:
        f.write(f"[tiering]\naws_access_key_id = sulis-test-key\naws_secret_access_key = {SECRET_KEY}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
    monkeypatch.setenv("AWS_PROFILE", "tiering")
    with sulis.Archive(archive_dir, driver_dir=driver.dir, tier_store=store.url(BUCKET)) as archive:
        assert archive.errors() == []


def read_files(archive_dir: str, d) -> list[int]:
    """Every message index of recording ``d`` read from its files (no archive, no driver), as Spark's files mode
    reads them: a segment that moved is fetched by this process."""
    reader = _native.RecordingFileReader(archive_dir, d.recording_id, d.start_position, d.term_buffer_length,
                                         d.segment_file_length, d.initial_term_id, d.start_position, d.stop_position)
    got: list[int] = []
    while len(batch := reader.read_batch()) > 0:
        got.extend(struct.unpack_from("<I", m)[0] for m in batch.to_list())
    return got


def test_a_reader_of_the_files_fetches_the_moved_segments_straight_from_the_store(
        driver, client, archive_dir, store, monkeypatch):
    """Files mode (Spark's ``readMode=files``, ``RecordingFileReader``) reads without the archive: the segments in
    the store come straight from it into the reader's own cache, with this process's credentials; without
    credentials the read fails naming the store, after the segments on the disk, never short."""
    monkeypatch.setenv("TMPDIR", make_dir("sulis-tier-reader-"))  # the reader's cache: this test's own
    with tiered_archive(driver, archive_dir, store) as archive, sulis.ArchiveClient(client) as ac:
        rid = record(ac, client, 1001)
        await_moved(archive_dir, rid)
        d = ac.list_recording(rid)
        assert archive.errors() == []
    assert read_files(archive_dir, d) == list(range(COUNT))  # the archive is closed: the store alone serves them
    # A new cache, the store gone: the first moved segment fails the read, naming it and the store.
    monkeypatch.setenv("TMPDIR", make_dir("sulis-tier-reader-"))
    store.kill()
    with pytest.raises(sulis.ArchiveError, match=f"segment {rid}-0.rec of recording {rid} .*{store.endpoint}"):
        read_files(archive_dir, d)
    store.start()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.path.join(archive_dir, "no-such-file"))
    with pytest.raises(sulis.ArchiveError, match="no object store credentials"):
        read_files(archive_dir, d)
