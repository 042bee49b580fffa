"""The archive's durability and security promises under real faults.

Each test injects one fault and checks what the archive promises afterwards
(docs/archive.md, "What is promised on disk" and "Who may control it"): a
second archive opened on a live directory, kill -9 mid-recording, a frame torn
at a page boundary, a damaged catalog, a full ext4 disk, a mark file left by a
process of another pid namespace, requests forged with another session's id,
and requests a principal may not make.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import struct
import time

import pytest
from test_archive_system import extension_channel, message, publish, receive, record, replay_to_end

import sulis
from conftest import await_until, free_udp_port, make_dir, run_cli, small_ext4
from sulis.archive import RecordingSignal

#: Mark file (archive-mark.dat) fields: activityTimestamp and pid, i64 little-endian.
MARK_ACTIVITY, MARK_PID = 16, 32
#: Where sulis notes which kernel (boot id) and pid namespace wrote the mark file: the last 64
#: bytes of its 8 KiB header, which Aeron's readers never look at.
MARK_ORIGIN = 8192 - 64
#: Catalog (archive.catalog): its header and each entry's descriptor header are 32 bytes; the
#: descriptor body is Aeron's RecordingDescriptor block, which starts with controlSessionId and
#: correlationId (i64 each), so recordingId is at body offset 16 and termBufferLength at 64.
CATALOG_HEADER = ENTRY_HEADER = 32
BODY_RECORDING_ID, BODY_TERM_BUFFER_LENGTH = 16, 64
STORAGE_SPACE, UNAUTHORISED_ACTION = 11, 13


def small(i: int) -> bytes:
    """Small message i (4 to 67 bytes: one frame): its index, then a body of varying length."""
    return struct.pack("<I", i) + bytes([i & 0xFF]) * (i % 64)


@pytest.fixture
def archive_dir():
    d = make_dir("sulis-archive-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def start_live(ac, client, stream_id: int, channel: str = "aeron:ipc"):
    """Records IPC stream ``stream_id`` fed by a new exclusive publication on ``channel``:
    (recording id, publication)."""
    ac.start_recording("aeron:ipc", stream_id)
    pub = client.add_exclusive_publication(channel, stream_id)
    return ac.await_signal(RecordingSignal.START).recording_id, pub


def publish_recorded(ac, rid: int, pub, messages) -> int:
    """Publishes ``messages`` and waits until the archive recorded them; returns the end position."""
    publish(pub, messages)
    end = pub.position
    await_until(lambda: ac.get_recording_position(rid) == end, what=f"recording {rid} to reach {end}")
    return end


def assert_refused(archive_dir: str, driver) -> None:
    """Opening an archive on ``archive_dir`` is refused because one is running there (an archive
    that starts anyway is closed again, so that it does not outlive the test)."""
    try:
        archive = sulis.Archive(archive_dir, driver_dir=driver.dir)
    except sulis.SulisError as e:
        assert "an archive is running" in str(e), e
    else:
        archive.close()
        pytest.fail(f"a second archive started on {archive_dir}, where an archive is running")


def segments(archive_dir: str, rid: int) -> list[str]:
    return sorted(f for f in os.listdir(archive_dir) if f.startswith(f"{rid}-") and f.endswith(".rec"))


# -- crash recovery ---------------------------------------------------------------


def message_positions(ac, rid: int, count: int) -> list[int]:
    """The end position of each of the first ``count`` messages of a recording (from a replay)."""
    positions: list[int] = []
    sub = ac.replay(rid, "aeron:ipc", 2090)
    assembler = sulis.FragmentAssembler(lambda b, h: positions.append(h.position))
    await_until(lambda: sub.poll(assembler, 100) >= 0 and len(positions) >= count, what="positions")
    sub.close()
    return positions[:count]


@pytest.mark.parametrize("point", ["truncate-after-catalog", "purge-after-catalog"])
def test_a_crash_between_the_catalog_and_the_files_loses_nothing_and_the_restart_finishes_it(
        driver, client, archive_dir, spawn, point):
    """Truncate and purge change the catalog first. The archive process aborts right after that
    (``SULIS_ARCHIVE_CRASH_AT``), with every segment file as it was; the restarted archive goes by
    the catalog: a truncated recording replays exactly to its new stop position, the files past it
    are gone, the rest of its last file is erased (an extension then never meets old frames), and
    a purged recording's files are deleted. Files first, catalog second would leave a catalog
    describing bytes that are gone."""
    options = json.dumps({"segment_file_length": 64 * 1024})
    child = spawn("archive", driver.dir, archive_dir, options, env={**os.environ, "SULIS_ARCHIVE_CRASH_AT": point})
    child.read()
    with sulis.ArchiveClient(client, message_timeout=2.0) as ac:
        d = record(ac, client, "aeron:ipc?term-length=64k", 1001, 3000)
        rid = d.recording_id
        # (A purge waits for no replay: none is run before one.)
        keep = message_positions(ac, rid, 1000)[-1] if point.startswith("truncate") else 0
        before = segments(archive_dir, rid)
        assert len(before) >= 4, before
        with pytest.raises(sulis.ArchiveError):
            if point.startswith("truncate"):
                ac.truncate_recording(rid, keep)
            else:
                ac.purge_recording(rid)
    assert child.proc.wait(10) == -signal.SIGABRT
    assert segments(archive_dir, rid) == before, "the crash came before any file changed"
    if point.startswith("purge"):
        with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=64 * 1024) as archive, \
                sulis.ArchiveClient(client) as ac:
            assert ac.list_recording(rid) is None
            assert segments(archive_dir, rid) == []
            assert any("a truncate or purge a crash interrupted" in e for e in archive.errors()), archive.errors()
        return
    # The restart finishes the truncate; then an extension with other messages, killed mid-recording:
    # its recovery must end at the extension's last frame, never run on into the old frames that
    # followed the truncate position.
    child = spawn("archive", driver.dir, archive_dir, options)
    child.read()
    with sulis.ArchiveClient(client) as ac:
        after = ac.list_recording(rid)
        assert after.stop_position == keep
        assert len(segments(archive_dir, rid)) < len(before)
        assert receive(ac.replay(rid, "aeron:ipc", 2091), 1000) == [message(i) for i in range(1000)]
        channel = extension_channel(after, keep)
        ac.extend_recording(rid, channel, 1001)
        ext = client.add_exclusive_publication(channel, 1001)
        assert ac.await_signal(RecordingSignal.EXTEND, rid).position == keep
        publish(ext, (small(i) for i in range(200)))
        end = ext.position
        await_until(lambda: ac.get_recording_position(rid) == end, what="extended")
        child.signal(signal.SIGKILL)
        child.proc.wait(10)
        ext.close()
    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=64 * 1024) as archive, \
            sulis.ArchiveClient(client) as ac:
        assert ac.list_recording(rid).stop_position == end, "recovered to the extension's end, not beyond"
        got = receive(ac.replay(rid, "aeron:ipc", 2092), 1200)
        assert got == [message(i) for i in range(1000)] + [small(i) for i in range(200)]
    ok = run_cli("archive-tool", archive_dir, "verify")
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.parametrize("mode", ["shared", "dedicated"])
def test_a_second_archive_on_a_live_directory_touches_nothing(driver, client, archive_dir, spawn, mode):
    """Promise: a second archive on a directory whose archive is alive is refused and changes
    nothing. Fault: one is opened while the first records (its recorder on the archive's thread,
    or on one of its own); the first is later killed. Its recovery must find the whole recording
    (not a stop position the refused one wrote)."""
    child = spawn("archive", driver.dir, archive_dir, json.dumps({"threading_mode": mode}))
    child.read()
    with sulis.ArchiveClient(client) as ac:
        rid, pub = start_live(ac, client, 1001)
        publish_recorded(ac, rid, pub, (small(i) for i in range(30_000)))
        assert_refused(archive_dir, driver)
        end = publish_recorded(ac, rid, pub, (small(i) for i in range(30_000, 60_000)))
        child.kill()  # SIGKILL, reaped
    pub.close()
    with sulis.Archive(archive_dir, driver_dir=driver.dir), sulis.ArchiveClient(client) as ac:
        assert ac.list_recording(rid).stop_position == end, "recovered to the end of all 60,000"
        assert replay_to_end(ac.replay(rid, "aeron:ipc", 2001)) == [small(i) for i in range(60_000)]


def test_recovery_does_not_check_frames_with_the_new_runs_record_checksum(driver, client, archive_dir, spawn):
    """Promise: a killed archive's recording is recovered to its end. Fault: it was recorded
    without checksums and the restarted archive has record_checksum="crc32c"; the frames on
    disk carry no checksum, so recovery must not judge them by it."""
    child = spawn("archive", driver.dir, archive_dir)
    child.read()
    with sulis.ArchiveClient(client) as ac:
        rid, pub = start_live(ac, client, 1001)
        end = publish_recorded(ac, rid, pub, (small(i) for i in range(30_000)))
        child.kill()
    pub.close()
    with sulis.Archive(archive_dir, driver_dir=driver.dir, record_checksum="crc32c"), \
            sulis.ArchiveClient(client) as ac:
        assert ac.list_recording(rid).stop_position == end
        assert replay_to_end(ac.replay(rid, "aeron:ipc", 2001)) == [small(i) for i in range(30_000)]


def _tear_after_first_page(archive_dir: str, rid: int, position: int, term_length: int) -> None:
    """Zeroes the part of the frame at ``position`` that lies past the first 4 KiB page boundary
    inside it (power lost with its header page on disk and its tail page not)."""
    bases = [int(f[:-4].split("-")[1]) for f in segments(archive_dir, rid)]
    base = max(b for b in bases if b <= position)
    with open(os.path.join(archive_dir, f"{rid}-{base}.rec"), "r+b") as f:
        at = position - base
        f.seek(at)
        length, _, _, frame_type, term_offset = struct.unpack("<iBBHi", f.read(12))
        assert (frame_type, term_offset) == (1, position % term_length), "not the DATA frame expected there"
        end = at + ((length + 31) & ~31)
        boundary = (at // 4096 + 1) * 4096
        assert at + 32 <= boundary < end, "the frame must straddle a page"
        f.seek(boundary)
        f.write(bytes(end - boundary))


def test_a_frame_torn_at_a_page_boundary_is_cut_off_and_an_intact_one_kept(driver, client, archive_dir, spawn):
    """Promise: after a crash every whole message up to the recovered stop replays intact and no
    torn one is taken as whole. Fault: the last frame (6 KiB, one frame with mtu=8k) of a killed
    archive's recording has its header page on disk and zeros past the page boundary. A second
    recording whose last frame straddles a page intact keeps it."""
    big = struct.pack("<I", 9999) + bytes((7 * j + 1) & 0xFF or 1 for j in range(6000))
    before = [small(i) for i in range(321)]  # puts the big frame at 26624: mid-page, its tail past 28672
    channel = "aeron:ipc?term-length=64k|mtu=8k"
    child = spawn("archive", driver.dir, archive_dir)
    child.read()
    recordings = []
    with sulis.ArchiveClient(client) as ac:
        for stream_id in (1001, 1002):
            rid, pub = start_live(ac, client, stream_id, channel)
            publish(pub, before)
            last = pub.position
            end = publish_recorded(ac, rid, pub, [big])
            recordings.append((rid, last, end, pub))
        child.kill()
    (torn, torn_at, _, _), (intact, _, intact_end, _) = recordings
    for *_, pub in recordings:
        pub.close()
    _tear_after_first_page(archive_dir, torn, torn_at, 64 * 1024)
    with sulis.Archive(archive_dir, driver_dir=driver.dir) as archive, sulis.ArchiveClient(client) as ac:
        assert ac.list_recording(torn).stop_position == torn_at, "stopped at the start of the torn frame"
        assert replay_to_end(ac.replay(torn, "aeron:ipc", 2001)) == before
        assert [e for e in archive.errors() if "page" in e and f"recording {torn}" in e and str(torn_at) in e], \
            archive.errors()
        assert ac.list_recording(intact).stop_position == intact_end, "an intact frame across a page is kept"
        assert replay_to_end(ac.replay(intact, "aeron:ipc", 2002)) == before + [big]


# -- catalog damage ---------------------------------------------------------------


def _three_recordings(driver, client, archive_dir) -> list:
    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=64 * 1024), \
            sulis.ArchiveClient(client) as ac:
        made = [record(ac, client, "aeron:ipc", 1001 + k, 300) for k in range(3)]
    assert [d.recording_id for d in made] == [0, 1, 2]
    assert all(len(segments(archive_dir, k)) >= 2 for k in range(3))
    return made


def _catalog_entries(archive_dir: str) -> list[int]:
    """Offsets of the catalog's entries, walked by their length fields."""
    with open(os.path.join(archive_dir, "archive.catalog"), "rb") as f:
        data = f.read()
    offsets, at = [], CATALOG_HEADER
    while at + ENTRY_HEADER <= len(data) and (length := struct.unpack_from("<i", data, at)[0]) > 0:
        offsets.append(at)
        at += ENTRY_HEADER + length
    return offsets


def _poke(path: str, offset: int, fmt: str, value: int, was: int | None = None) -> None:
    """Writes ``value`` at ``offset`` of ``path``, checking first that ``was`` is there if given."""
    with open(path, "r+b") as f:
        f.seek(offset)
        (old,) = struct.unpack(fmt, f.read(struct.calcsize(fmt)))
        assert was is None or old == was, f"{path} holds {old} at {offset}, not {was}: layout assumption wrong"
        f.seek(offset)
        f.write(struct.pack(fmt, value))


@pytest.mark.parametrize("damage", ["length-past-end", "length-96", "repeated-id"])
def test_a_damaged_catalog_entry_loses_nothing_else(driver, client, archive_dir, damage):
    """Promise: a catalog entry that cannot be read is reported and left out; the others stay
    usable, no recording id is reused, nothing is written over a recording, and the tools delete
    no segment files they cannot account for. Fault: the second of three entries gets a length
    running past the file's end, a length of 96, or the first entry's recording id."""
    made = _three_recordings(driver, client, archive_dir)
    catalog = os.path.join(archive_dir, "archive.catalog")
    _, second, _ = _catalog_entries(archive_dir)
    if damage == "repeated-id":
        _poke(catalog, second + ENTRY_HEADER + BODY_RECORDING_ID, "<q", 0, was=1)
    else:
        _poke(catalog, second, "<i", os.path.getsize(catalog) if damage == "length-past-end" else 96)
    files = sorted(f for f in os.listdir(archive_dir) if f.endswith(".rec"))

    # The tools, on a copy of the damaged directory with no archive running.
    copy = make_dir("sulis-archive-copy-")
    shutil.copytree(archive_dir, copy, dirs_exist_ok=True)
    for verb in ("delete-orphaned-segments", "compact"):
        r = run_cli("archive-tool", copy, verb)
        left = sorted(f for f in os.listdir(copy) if f.endswith(".rec"))
        assert left == files, f"`archive-tool {verb}` (exit {r.returncode}) deleted segment files " \
            f"{sorted(set(files) - set(left))}: {r.stdout}{r.stderr}"
    shutil.rmtree(copy, ignore_errors=True)

    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=64 * 1024) as archive, \
            sulis.ArchiveClient(client) as ac:
        assert ac.list_recordings() == [made[0], made[2]]
        for d in (made[0], made[2]):
            assert receive(ac.replay(d.recording_id, "aeron:ipc", 2001), 300) == [message(i) for i in range(300)]
        assert [e for e in archive.errors() if f"offset {second}" in e], (second, archive.errors())
        new = record(ac, client, "aeron:ipc", 1004, 300)
        assert new.recording_id == 3, "a new recording never takes an id the catalog may hold"
        assert ac.list_recording(2) == made[2]
        assert receive(ac.replay(2, "aeron:ipc", 2002), 300) == [message(i) for i in range(300)]
        assert segments(archive_dir, 1), "recording 1's segment files are still there"


def test_an_entry_with_a_zero_term_length_is_refused_and_the_archive_goes_on(driver, client, archive_dir):
    """Promise: a bad catalog entry is reported and does not stop the archive. Fault: recording
    1's termBufferLength is 0 (a division by zero for anyone who replays it)."""
    made = _three_recordings(driver, client, archive_dir)
    second = _catalog_entries(archive_dir)[1]
    _poke(os.path.join(archive_dir, "archive.catalog"), second + ENTRY_HEADER + BODY_TERM_BUFFER_LENGTH, "<i",
          0, was=made[1].term_buffer_length)
    with sulis.Archive(archive_dir, driver_dir=driver.dir) as archive, \
            sulis.ArchiveClient(client, message_timeout=3.0) as ac:
        assert archive.is_running
        assert [e for e in archive.errors() if "recording 1" in e], archive.errors()
        with pytest.raises(sulis.ArchiveError) as e:
            ac.start_replay(1, "aeron:ipc", 2001)
        assert e.value.code != -1, f"not refused by the archive: {e.value}"
        assert archive.is_running, "the archive survived the replay request"
        listed = [d.recording_id for d in ac.list_recordings()]
        assert 0 in listed and 2 in listed, listed
        assert record(ac, client, "aeron:ipc", 1004, 10).recording_id == 3
        assert receive(ac.replay(2, "aeron:ipc", 2002), 300) == [message(i) for i in range(300)]


# -- the mark file ----------------------------------------------------------------


def test_the_previous_runs_error_log_is_kept(driver, client, archive_dir, spawn):
    """Promise: a killed archive's error log survives the next start (as Aeron's
    `<time>-error.log`). Fault: the archive logs an error (a request from a stream that does not
    own the session it names, dropped) and is killed."""
    child = spawn("archive", driver.dir, archive_dir)
    child.read()
    with sulis.ArchiveClient(client) as ac:
        pub = client.add_exclusive_publication("aeron:ipc", 10)
        await_until(lambda: pub.is_connected, what="the control stream")
        # A ListRecordingRequest (template 10) cut short before its recording id.
        request = struct.pack("<HHHH", 24, 10, 101, 13) + struct.pack("<qq", ac.control_session_id, 777)
        while pub.offer(request) < 0:
            pass

        def logged() -> bool:
            mark = sulis._native.archive_mark_file(archive_dir)
            return mark is not None and any("correlation 777" in e[3] for e in mark[6])
        await_until(logged, what="the error in the mark file's log")
        child.kill()
    pub.close()
    with sulis.Archive(archive_dir, driver_dir=driver.dir):
        logs = {f: pathlib.Path(archive_dir, f).read_text(errors="replace")
                for f in os.listdir(archive_dir) if f.endswith("-error.log")}
        assert [f for f, text in logs.items() if "correlation 777" in text and "dropped" in text], logs


def _rewrite_mark_file(archive_dir: str, activity_ms: int, pid: int) -> None:
    """The mark file as an archive in another container or host, sharing the volume, leaves it:
    its heartbeat, its pid, and an origin that is not this kernel and pid namespace."""
    path = os.path.join(archive_dir, "archive-mark.dat")
    _poke(path, MARK_ACTIVITY, "<q", activity_ms)
    _poke(path, MARK_PID, "<q", pid)
    with open(path, "r+b") as f:
        f.seek(MARK_ORIGIN)
        f.write(bytes(64))


def _absent_pid() -> int:
    """A pid that no process (or thread) of this pid namespace has."""
    return next(p for p in range(4_194_000, 1, -1) if not os.path.exists(f"/proc/{p}"))


def test_liveness_does_not_rest_on_the_pid_alone(driver, archive_dir, spawn):
    """Promise: an archive that is alive keeps its directory. Fault: its mark file names a pid
    this pid namespace does not have (an archive in another container sharing the volume) while
    its heartbeat is fresh. A stale heartbeat does not block; a killed archive's directory is
    taken over at once."""
    with sulis.Archive(archive_dir, driver_dir=driver.dir):
        pass
    pid = _absent_pid()
    _rewrite_mark_file(archive_dir, int(time.time() * 1000), pid)
    assert_refused(archive_dir, driver)
    _rewrite_mark_file(archive_dir, int(time.time() * 1000) - 20_000, pid)
    with sulis.Archive(archive_dir, driver_dir=driver.dir) as archive:
        assert archive.is_running, "a 20 s old heartbeat does not hold the directory"
    child = spawn("archive", driver.dir, archive_dir)
    child.read()
    child.kill()
    started = time.monotonic()
    with sulis.Archive(archive_dir, driver_dir=driver.dir) as archive:
        assert archive.is_running
    assert time.monotonic() - started < 5, "a killed archive's directory is free at once"


# -- who may control it -----------------------------------------------------------


def _forge_purge(client, channel: str, control_session_id: int, recording_id: int) -> None:
    """A PurgeRecordingRequest (template 104) from a publication of its own, carrying another
    session's control session id."""
    pub = client.add_exclusive_publication(channel, 10)
    await_until(lambda: pub.is_connected, what="the stranger's publication to connect")
    request = struct.pack("<HHHH", 24, 104, 101, 13) + struct.pack("<qqq", control_session_id, 4242, recording_id)
    deadline = time.monotonic() + 5
    while pub.offer(request) < 0:
        assert time.monotonic() < deadline, "the forged request could not be sent"


@pytest.mark.parametrize("via", ["udp", "ipc"])
def test_only_the_owner_acts_on_a_control_session(driver, client, make_client, archive_dir, via):
    """Promise: a control session's requests come from its own client only. Fault: a stranger
    that never connected sends a PurgeRecordingRequest with the owner's control session id,
    on the archive's UDP control channel or over IPC."""
    control = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    with sulis.Archive(archive_dir, driver_dir=driver.dir, control_channel=control, credentials=b"owner") as archive, \
            sulis.ArchiveClient(client, control_request_channel=control, credentials=b"owner",
                                control_response_channel=f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}") as ac:
        d = record(ac, client, "aeron:ipc", 1001, 100)
        _forge_purge(make_client(), control if via == "udp" else "aeron:ipc", ac.control_session_id,
                     d.recording_id)

        def settled() -> bool:
            return ac.list_recording(d.recording_id) is None or any("dropped" in e for e in archive.errors())
        await_until(settled, timeout=5, what="the forged request to be dropped or carried out")
        assert ac.list_recording(d.recording_id) == d, "a stranger purged the owner's recording"
        assert receive(ac.replay(d.recording_id, "aeron:ipc", 2001), 100) == [message(i) for i in range(100)]
        assert [e for e in archive.errors() if "dropped" in e], archive.errors()


def test_a_principal_may_only_make_the_requests_it_is_authorised_for(driver, client, make_client, archive_dir):
    """Promise: every request is authorised for its session's principal. Fault: a reader (valid
    credentials) asks to purge a recording."""
    def authorise(principal: bytes, request: str) -> bool:
        return principal == b"admin" or request != "PurgeRecordingRequest"

    with sulis.Archive(archive_dir, driver_dir=driver.dir, credentials=[b"admin", b"reader"],
                       authorise=authorise), \
            sulis.ArchiveClient(client, credentials=b"admin") as admin, \
            sulis.ArchiveClient(make_client(), credentials=b"reader") as reader:
        d = record(admin, client, "aeron:ipc", 1001, 50)
        assert reader.list_recordings() == [d]
        with pytest.raises(sulis.ArchiveError) as e:
            reader.purge_recording(d.recording_id)
        assert e.value.code == UNAUTHORISED_ACTION, e.value
        assert admin.list_recording(d.recording_id) == d
        admin.purge_recording(d.recording_id)
        assert admin.list_recordings() == []


# -- a full disk (last: it mounts a file system) -----------------------------------


@pytest.fixture
def ext4_disk():
    """A 48 MB ext4 file system on a loop device (mount needs root; the test skips without)."""
    with small_ext4(48) as mnt:
        yield mnt


_PATTERN = bytes(range(256)) * 5


def _fill(ac, rid: int, pub, k: int, count: int) -> list[tuple[bytes, int]]:
    """Offers ``count`` 1 KiB messages until the recording stops; (message, end position) of
    each one published."""
    sent: list[tuple[bytes, int]] = []
    deadline = time.monotonic() + 30
    while len(sent) < count:
        m = struct.pack("<II", k, len(sent)) + _PATTERN[len(sent) % 256:][:1016]
        if (r := pub.offer(m)) >= 0:
            sent.append((m, r))
        elif ac.get_recording_position(rid) == -1:
            break  # stopped: nobody reads the publication any more
        assert time.monotonic() < deadline, f"recording {rid}: stuck after {len(sent)} messages"
    await_until(lambda: ac.get_recording_position(rid) in (pub.position, -1), what=f"recording {rid} to settle")
    return sent


def test_a_full_disk_refuses_new_recordings_and_keeps_every_one_whole(driver, client, ext4_disk, spawn):
    """Promise: when storage runs low new recordings are refused (STORAGE_SPACE) and those that
    stop for it are whole up to their stop position; the archive does not die (no SIGBUS from a
    sparse mapping). Fault: a real ext4 file system fills up. The archive runs in a child
    process so that a SIGBUS fails this test, not the test session."""
    options = {"segment_file_length": 1 << 20, "low_storage_space_threshold": 4 << 20}
    child = spawn("archive", driver.dir, os.path.join(ext4_disk, "archive"), json.dumps(options))
    child.read()
    try:
        _fill_the_disk_and_check(client, child)
    except Exception:
        _assert_alive(child)
        raise


def _assert_alive(child) -> None:
    code = child.proc.poll()
    assert code is None, f"the archive process died ({signal.Signals(-code).name if code < 0 else code})"


def _fill_the_disk_and_check(client, child) -> None:
    published: dict[int, list[tuple[bytes, int]]] = {}
    refused = stopped_full = None
    # Each answer within 30 s: the archive's work on a full disk, beside busy CPUs, once outlasted 5 s.
    with sulis.ArchiveClient(client, message_timeout=30.0) as ac:
        for k in range(12):
            try:
                rid, pub = start_live(ac, client, 1100 + k)
            except sulis.ArchiveError as e:
                refused = e
                break
            published[rid] = _fill(ac, rid, pub, k, 5000)
            if ac.get_recording_position(rid) != -1:
                ac.stop_recording("aeron:ipc", 1100 + k)
            ac.await_signal(RecordingSignal.STOP, rid)
            pub.close()
            if stopped_full := [err for err in ac.poll_errors() if err[1] == STORAGE_SPACE]:
                break
        assert refused is not None or stopped_full, f"the disk never filled: {sorted(published)}"
        if refused is not None:
            assert refused.code == STORAGE_SPACE, refused
        _assert_alive(child)
        listed = ac.list_recordings()
        assert sorted(d.recording_id for d in listed) == sorted(published)
        for d in listed:
            assert d.stop_position != -1, d
            want = [m for m, end in published[d.recording_id] if end <= d.stop_position]
            got = replay_to_end(ac.replay(d.recording_id, "aeron:ipc", 3000 + d.recording_id)) \
                if d.stop_position > d.start_position else []
            assert got == want, f"recording {d.recording_id}: {len(got)} of {len(want)} messages replayed"
        with pytest.raises(sulis.ArchiveError) as e:
            ac.start_recording("aeron:ipc", 1200)
        assert e.value.code == STORAGE_SPACE, e.value
        _assert_alive(child)
