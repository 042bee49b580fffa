"""The archive from Python: sulis.Archive (embedded or in its own process)
and sulis.ArchiveClient, over IPC and UDP, with restarts, kill -9 and bad
requests."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import threading
import time

import pytest

import sulis
from conftest import await_until, free_udp_port, make_dir, run_cli
from sulis.archive import RecordingSignal


def message(i: int) -> bytes:
    """Message i: its index, then a body whose length varies (some fragmented)."""
    n = 5000 if i % 97 == 5 else 8 + (i * 37) % 400
    return struct.pack("<I", i) + bytes((i + j) & 0xFF for j in range(n))


def publish(pub, messages) -> None:
    deadline = time.monotonic() + 20
    for m in messages:
        while (r := pub.offer(m)) < 0:
            assert r != sulis.CLOSED and time.monotonic() < deadline, f"offer stuck: {sulis.result_name(r)}"


def receive(sub, count: int, timeout: float = 20.0) -> list[bytes]:
    """``count`` whole messages from ``sub``."""
    got: list[bytes] = []
    assembler = sulis.FragmentAssembler(lambda b, h: got.append(bytes(b)))
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"received {len(got)} of {count}"
        sub.poll(assembler, 100)
    return got


@pytest.fixture
def archive_dir():
    d = make_dir("sulis-archive-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(params=["shared", "dedicated"])
def archive(request, driver, archive_dir):
    """An archive in each threading mode: the recorder and replayer on its one thread, or on their own."""
    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=256 * 1024,
                       threading_mode=request.param) as a:
        yield a
        assert a.errors() == []


@pytest.fixture
def archive_client(client, archive):
    with sulis.ArchiveClient(client) as ac:
        yield ac


def record(ac, client, channel: str, stream_id: int, count: int, pub_channel: str | None = None,
           source: str = "local"):
    """Records ``count`` messages published on ``pub_channel`` (default ``channel``); returns the
    recording's descriptor once it stopped."""
    ac.start_recording(channel, stream_id, source=source)
    pub = client.add_publication(pub_channel or channel, stream_id)
    rid = ac.await_signal(RecordingSignal.START).recording_id
    publish(pub, (message(i) for i in range(count)))
    end = pub.position
    await_until(lambda: ac.get_recording_position(rid) == end, what="recorded to the end")
    ac.stop_recording(channel, stream_id)
    stop = ac.await_signal(RecordingSignal.STOP, rid)
    assert stop.position == end
    pub.close()
    return ac.list_recording(rid)


def test_record_list_and_replay_over_ipc(client, archive, archive_client):
    ac = archive_client
    assert ac.archive_id == archive.archive_id
    d = record(ac, client, "aeron:ipc?alias=prices", 1001, 2000)
    assert (d.stream_id, d.start_position) == (1001, 0)
    assert d.stop_position > 0 and d.stop_timestamp >= d.start_timestamp
    assert d.original_channel == "aeron:ipc?alias=prices"
    assert ac.list_recordings() == [d]
    assert ac.list_recordings_for_uri("alias=prices", 1001) == [d]
    assert ac.list_recordings_for_uri("alias=prices", 1002) == []
    assert ac.list_recording(d.recording_id + 1) is None
    assert ac.get_stop_position(d.recording_id) == d.stop_position
    assert ac.get_start_position(d.recording_id) == 0
    assert ac.get_max_recorded_position(d.recording_id) == d.stop_position
    assert ac.get_recording_position(d.recording_id) == -1

    sub = ac.replay(d.recording_id, "aeron:ipc", 2002)
    assert receive(sub, 2000) == [message(i) for i in range(2000)]


def test_replay_over_udp_from_a_position_and_bounded(client, archive, archive_client):
    ac = archive_client
    d = record(ac, client, "aeron:ipc", 1001, 500)
    # Find the position of message 100 from a first replay.
    positions = []
    sub = ac.replay(d.recording_id, "aeron:ipc", 2010)
    assembler = sulis.FragmentAssembler(lambda b, h: positions.append(h.position))
    while len(positions) < 200:
        sub.poll(assembler, 10)
    sub.close()
    start = positions[99]  # the end of message 99 is where message 100 starts
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    sub = ac.replay(d.recording_id, channel, 2011, position=start, length=positions[199] - start)
    got = receive(sub, 100)
    assert got == [message(i) for i in range(100, 200)]
    # Nothing beyond the bound arrives; the replay's image ends.
    await_until(lambda: all(i.is_end_of_stream or i.is_closed for i in sub.images), what="end of replay")


def test_archive_counters_show_sessions_recordings_and_bytes(request, driver, client, archive, archive_client):
    from conftest import COUNTER_TYPE

    mode = request.node.callspec.params["archive"].upper()
    ac = archive_client
    ac.start_recording("aeron:ipc", 1001)
    pub = client.add_publication("aeron:ipc", 1001)
    rid = ac.await_signal(RecordingSignal.START).recording_id
    publish(pub, (message(i) for i in range(100)))
    end = pub.position
    await_until(lambda: ac.get_recording_position(rid) == end, what="recorded")

    def values() -> dict[str, int]:
        return {c["label"].split(" - archiveId")[0]: c["value"] for c in sulis.CountersReader(driver.dir).counters()
                if c["type_id"] >= 100}

    v = values()
    assert v["Archive Control Sessions"] == 1
    assert v["Archive Recording Sessions"] == 1
    assert v["archive-recorder total write bytes"] >= end
    assert v["Archive Errors"] == 0
    assert v[f"rec-pos: {rid} {ac.list_recording(rid).session_id} 1001 aeron:ipc"] == end
    assert COUNTER_TYPE["rec-pos"] == 100
    # Time spent writing, and the duty cycle's longest turn (SHARED: one thread; DEDICATED: the
    # recorder and the replayer have their own).
    assert 0 < v["archive-recorder max write time in ns"] <= v["archive-recorder total write time in ns"]
    assert v[f"archive-conductor max cycle time in ns: {mode}"] > 0
    assert v[f"archive-conductor work cycle time exceeded count: threshold=1000000000ns {mode}"] == 0
    if mode == "DEDICATED":
        assert v["archive-recorder max cycle time in ns"] > 0
        assert v["archive-replayer max cycle time in ns"] > 0
        assert v["archive-recorder work cycle time exceeded count: threshold=1000000000ns"] == 0
    ac.stop_recording("aeron:ipc", 1001)
    ac.await_signal(RecordingSignal.STOP, rid)
    await_until(lambda: values()["Archive Recording Sessions"] == 0, what="the recording session to end")
    assert len(receive(ac.replay(rid, "aeron:ipc", 2001), 100)) == 100
    v = values()
    assert v["archive-replayer total read bytes"] >= end
    assert 0 < v["archive-replayer max read time in ns"] <= v["archive-replayer total read time in ns"]


def test_a_replay_bounded_by_a_counter_that_is_not_there_is_refused(client, archive, archive_client):
    d = record(archive_client, client, "aeron:ipc", 1001, 10)
    with pytest.raises(sulis.ArchiveError, match="limit counter id 4000 is not a counter of this archive's driver"):
        archive_client.replay(d.recording_id, "aeron:ipc", 2090, limit_counter_id=4000)


def test_recording_signals_reach_a_handler(client, archive, archive_client):
    seen: list = []
    d = record(archive_client, client, "aeron:ipc", 1001, 10)
    archive_client.truncate_recording(d.recording_id, 0)
    deadline = time.monotonic() + 10
    while not any(e.signal == RecordingSignal.DELETE for e in seen):
        assert time.monotonic() < deadline, seen
        returned = archive_client.poll_signals(seen.append)
        assert returned == seen[len(seen) - len(returned):]
    (delete,) = [e for e in seen if e.signal == RecordingSignal.DELETE]
    assert delete.recording_id == d.recording_id


def test_await_signal_waits_as_long_as_asked_and_names_the_signal_at_its_timeout(client, archive, archive_client):
    d = record(archive_client, client, "aeron:ipc", 1001, 10)
    # No replication runs: REPLICATE_END never comes, and the wait ends at the timeout given (the message names
    # it), not at the client's message timeout.
    with pytest.raises(sulis.ArchiveError, match=f"timed out after 200ms waiting for signal "
                       f"{int(RecordingSignal.REPLICATE_END)} of recording {d.recording_id}"):
        archive_client.await_signal(RecordingSignal.REPLICATE_END, d.recording_id, timeout=0.2)
    # A signal already queued is taken at once, whatever the timeout; others stay queued.
    archive_client.truncate_recording(d.recording_id, 0)
    assert archive_client.await_signal(RecordingSignal.DELETE, d.recording_id, timeout=30).recording_id == \
        d.recording_id


@pytest.mark.parametrize("source", ["local", "remote"])
def test_record_a_udp_stream(driver, client, archive, archive_client, source):
    """A local recording spies on this driver's publication (Aeron names a spy's source
    'aeron:ipc'), needing no receiver: no receive endpoint is opened and the publication connects
    to the spy alone. A remote one records what the receiver gets from the network."""
    ac = archive_client
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    d = record(ac, client, channel, 3001, 300, source=source)
    assert d.stripped_channel == channel
    if source == "local":
        assert d.source_identity == "aeron:ipc"
    else:
        assert d.source_identity.startswith("127.0.0.1:")
    receivers = [c for c in sulis.CountersReader(driver.dir).counters() if c["label"].startswith("rcv-pos")]
    assert bool(receivers) == (source == "remote")
    sub = ac.replay(d.recording_id, "aeron:ipc", 3002)
    assert receive(sub, 300) == [message(i) for i in range(300)]


def test_a_replay_starts_only_where_a_frame_does_and_a_length_inside_a_frame_ends_before_it(
        client, archive, archive_client):
    """Aeron checks the frame at a replay's start position; a start inside a frame is refused
    naming it. A length that ends inside a frame ends the replay after the last whole frame
    before it, instead of waiting forever for a frame that can never fit."""
    ac = archive_client
    ac.start_recording("aeron:ipc", 1001)
    pub = client.add_publication("aeron:ipc", 1001)
    rid = ac.await_signal(RecordingSignal.START).recording_id
    messages = [bytes([i]) * 200 for i in range(20)]  # 232-byte frames: 256 aligned
    publish(pub, messages)
    end = pub.position
    await_until(lambda: ac.get_recording_position(rid) == end, what="recorded")
    with pytest.raises(sulis.ArchiveError, match="start position 288 of recording .* is not where a frame begins") as e:
        ac.start_replay(rid, "aeron:ipc", 2040, position=256 + 32)
    assert e.value.code == 16  # INVALID_POSITION
    for stream, length in enumerate((3 * 256 + 100, 3 * 256 + 32, 3 * 256)):
        got = replay_to_end(ac.replay(rid, "aeron:ipc", 2041 + stream, position=256, length=length))
        assert got == messages[1:4], (length, len(got))
    ac.stop_recording("aeron:ipc", 1001)


def extension_channel(d, position: int) -> str:
    """An IPC channel whose publication starts at ``position`` of recording ``d``'s stream (to extend it)."""
    term = d.term_buffer_length
    return (f"aeron:ipc?term-length={term}|init-term-id={d.initial_term_id}"
            f"|term-id={d.initial_term_id + position // term}|term-offset={position % term}")


def replay_to_end(sub) -> list[bytes]:
    """Every message of a bounded replay, once its image reached the end."""
    await_until(lambda: sub.images, what="the replay's image")
    image = sub.images[0]
    got: list[bytes] = []
    await_until(lambda: sub.poll(lambda b, h: got.append(bytes(b)), 100) >= 0
                and (image.is_end_of_stream or image.is_closed), what="the replay to end")
    sub.poll(lambda b, h: got.append(bytes(b)), 100)
    sub.close()
    return got


def test_follow_a_live_recording(client, archive, archive_client):
    ac = archive_client
    ac.start_recording("aeron:ipc", 1001)
    pub = client.add_publication("aeron:ipc", 1001)
    rid = ac.await_signal(RecordingSignal.START).recording_id
    publish(pub, (message(i) for i in range(200)))
    sub = ac.replay(rid, "aeron:ipc", 2020, follow=True)
    first = receive(sub, 200)
    publish(pub, (message(i) for i in range(200, 700)))
    rest = receive(sub, 500)
    assert first + rest == [message(i) for i in range(700)]


def test_errors_name_what_was_wrong(client, archive, archive_client):
    ac = archive_client
    d = record(ac, client, "aeron:ipc", 1001, 10)
    with pytest.raises(sulis.ArchiveError, match="unknown recording id: 4242") as e:
        ac.start_replay(4242, "aeron:ipc", 2030)
    assert e.value.code == 5  # UNKNOWN_RECORDING
    with pytest.raises(sulis.ArchiveError, match="not a frame position") as e:
        ac.start_replay(d.recording_id, "aeron:ipc", 2030, position=33)
    assert e.value.code == 16  # INVALID_POSITION
    with pytest.raises(sulis.ArchiveError, match="no recording subscription") as e:
        ac.stop_recording("aeron:ipc", 9999)
    assert e.value.code == 4  # UNKNOWN_SUBSCRIPTION
    with pytest.raises(sulis.ConfigurationError, match="source must be 'local' or 'remote'"):
        ac.start_recording("aeron:ipc", 1, source="elsewhere")
    with pytest.raises(sulis.ArchiveError, match="invalid"):
        ac.start_recording("aeron:tcp?endpoint=x:1", 1)


def test_malformed_and_unknown_requests_get_an_error_not_silence(driver, client, archive_dir):
    """Requests written straight onto the archive's control stream: a truncated one and one of
    an unknown template get an ERROR naming the problem; the session goes on."""
    with sulis.Archive(archive_dir, driver_dir=driver.dir) as archive, sulis.ArchiveClient(client) as ac:
        _malformed_requests(client, ac)
        assert any("ListRecordingRequest" in e for e in archive.errors()), archive.errors()
        assert any("Unknown session or token timeout for replayToken=1234" in e for e in archive.errors())


def _malformed_requests(client, ac) -> None:
    # A control session of the test's own, opened on its own stream: a session's requests count
    # only from the stream that opened it.
    pub = client.add_exclusive_publication("aeron:ipc", 10)
    await_until(lambda: pub.is_connected, what="control stream")
    sub = client.add_subscription("aeron:ipc", 21)
    channel = b"aeron:ipc"
    connect = (struct.pack("<HHHH", 16, 2, 101, 13) + struct.pack("<qii", 776, 21, (1 << 16) | (12 << 8))
               + struct.pack("<I", len(channel)) + channel)
    while pub.offer(connect) < 0:
        pass
    answers = {}
    sessions = {}

    def on_message(buf, header):
        b = bytes(buf)
        block, template, schema, _ = struct.unpack_from("<HHHH", b)
        if template == 1:  # ControlResponse
            session_id, correlation, relevant, code, _ = struct.unpack_from("<qqqii", b, 8)
            (length,) = struct.unpack_from("<I", b, 8 + block)
            answers[correlation] = (code, relevant, b[12 + block:12 + block + length].decode())
            sessions[correlation] = session_id

    assembler = sulis.FragmentAssembler(on_message)
    await_until(lambda: sub.poll(assembler, 10) >= 0 and 776 in answers, what="the raw session's connect answer")
    session = sessions[776]
    # ListRecordingRequest (template 10) cut short before its recording id.
    bad = struct.pack("<HHHH", 24, 10, 101, 13) + struct.pack("<qq", session, 777)
    # An unknown template, 999, from a newer client.
    unknown = struct.pack("<HHHH", 16, 999, 101, 13) + struct.pack("<qq", session, 778)
    # A replay token on a replay channel that is not a response channel is ignored, as Aeron does: a
    # plain replay (of a recording that does not exist). On a response channel an unknown token is
    # dropped with no answer (logged and counted, as Aeron's archive does).
    def replay(k: int, channel: bytes, token: int) -> bytes:
        return (struct.pack("<HHHH", 56, 6, 101, 13) + struct.pack("<qqqqqiiq", session, k, 0, 0, -1, 7, -1, token)
                + struct.pack("<I", len(channel)) + channel)
    for m in (bad, unknown, replay(779, channel, 1234), replay(780, b"aeron:ipc?control-mode=response", 1234)):
        while pub.offer(m) < 0:
            pass

    deadline = time.monotonic() + 10
    while not {777, 778, 779} <= answers.keys():
        assert time.monotonic() < deadline, answers
        sub.poll(assembler, 10)
    assert answers[777][0] == 1 and "ListRecordingRequest" in answers[777][2], answers[777]
    assert answers[778][0] == 1 and "template id 999" in answers[778][2], answers[778]
    assert answers[779][0] == 1 and "unknown recording id: 0" in answers[779][2], answers[779]
    assert ac.list_recordings() == [], "the session still works"
    sub.poll(assembler, 10)
    assert 780 not in answers, answers[780]


def test_a_second_archive_on_a_live_archive_directory_is_refused(driver, archive):
    with pytest.raises(sulis.SulisError, match="an archive is running in"):
        sulis.Archive(archive.dir, driver_dir=driver.dir)


def test_restart_and_files_are_private(driver, client, archive_dir):
    with sulis.Archive(archive_dir, driver_dir=driver.dir) as archive, sulis.ArchiveClient(client) as ac:
        d = record(ac, client, "aeron:ipc", 1001, 100)
        assert archive.errors() == []
    with sulis.Archive(archive_dir, driver_dir=driver.dir), sulis.ArchiveClient(client) as ac:
        assert ac.list_recordings() == [d]
        assert receive(ac.replay(d.recording_id, "aeron:ipc", 2040), 100) == [message(i) for i in range(100)]
    assert stat.S_IMODE(os.stat(archive_dir).st_mode) == 0o700
    for name in os.listdir(archive_dir):
        assert stat.S_IMODE(os.stat(os.path.join(archive_dir, name)).st_mode) == 0o600, name


def test_kill_9_mid_recording_then_restart_recovers_replays_and_extends(driver, client, archive_dir, spawn):
    """The archive process is killed while recording: a new archive on the directory finds the
    recording's end by itself, every whole message replays intact, and the recording can be
    extended from where it stopped."""
    child = spawn("archive", driver.dir, archive_dir)
    child.read()
    with sulis.ArchiveClient(client) as ac:
        ac.start_recording("aeron:ipc", 1001)
        pub = client.add_exclusive_publication("aeron:ipc?term-length=64k", 1001)
        rid = ac.await_signal(RecordingSignal.START).recording_id
        publish(pub, (message(i) for i in range(1500)))
        end = pub.position
        await_until(lambda: ac.get_recording_position(rid) == end, what="recorded")
        child.signal(signal.SIGKILL)
        child.proc.wait(10)
    pub.close()
    with sulis.Archive(archive_dir, driver_dir=driver.dir) as archive, sulis.ArchiveClient(client) as ac:
        d = ac.list_recording(rid)
        assert d.stop_position == end, "recovered to the end of the last whole frame"
        got = receive(ac.replay(rid, "aeron:ipc", 2050), 1500)
        assert got == [message(i) for i in range(1500)]
        # Extend: a publication that starts where the recording stopped.
        channel = extension_channel(d, end)
        ac.extend_recording(rid, channel, 1001)
        ext = client.add_exclusive_publication(channel, 1001)
        assert ac.await_signal(RecordingSignal.EXTEND, rid).position == end
        publish(ext, (message(i) for i in range(1500, 1600)))
        new_end = ext.position
        await_until(lambda: ac.get_recording_position(rid) == new_end, what="extended")
        got = receive(ac.replay(rid, "aeron:ipc", 2051, length=new_end), 1600)
        assert got == [message(i) for i in range(1600)]
        assert archive.errors() == []


def test_truncate_and_purge(client, archive, archive_client):
    ac = archive_client
    d = record(ac, client, "aeron:ipc", 1001, 400)
    positions = []
    sub = ac.replay(d.recording_id, "aeron:ipc", 2060)
    assembler = sulis.FragmentAssembler(lambda b, h: positions.append(h.position))
    while len(positions) < 400:
        sub.poll(assembler, 100)
    with pytest.raises(sulis.ArchiveError) as e:
        ac.truncate_recording(d.recording_id, positions[199] + 8)
    assert e.value.code == 16
    ac.truncate_recording(d.recording_id, positions[199])
    ac.await_signal(RecordingSignal.DELETE, d.recording_id)
    assert ac.get_stop_position(d.recording_id) == positions[199]
    assert receive(ac.replay(d.recording_id, "aeron:ipc", 2061), 200) == [message(i) for i in range(200)]
    ac.purge_recording(d.recording_id)
    assert ac.list_recordings() == []
    assert not [f for f in os.listdir(archive.dir) if f.endswith(".rec")]


def test_a_response_channel_on_port_0_gets_a_port_of_its_own_and_the_archive_is_told_it(driver, client,
                                                                                        archive_dir):
    """Aeron's default response channel, ``endpoint=localhost:0``: each subscription on it binds a
    port of its own, the driver's counters say which, and the client tells the archive that port."""
    a = client.add_subscription("aeron:udp?endpoint=127.0.0.1:0", 20)
    b = client.add_subscription("aeron:udp?endpoint=127.0.0.1:0", 20)
    ports = {int(s.resolved_channel().rsplit(":", 1)[1]) for s in (a, b)}
    assert len(ports) == 2 and 0 not in ports, "two ephemeral ports, never shared"
    assert a.local_socket_addresses() == [a.resolved_channel().split("endpoint=")[1]]
    fixed = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    assert client.add_subscription(fixed, 20).resolved_channel() == fixed
    assert client.add_subscription("aeron:ipc", 20).resolved_channel() == "aeron:ipc"
    control = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    with sulis.Archive(archive_dir, driver_dir=driver.dir, control_channel=control) as archive:
        with sulis.ArchiveClient(client, control_request_channel=control,
                                 control_response_channel="aeron:udp?endpoint=127.0.0.1:0",
                                 message_timeout=3.0) as ac:
            assert ac.list_recordings() == [] and ac.archive_id == archive.archive_id
        assert archive.errors() == []


@pytest.mark.parametrize("media", ["udp", "ipc"])
def test_a_client_with_no_address_of_its_own_uses_response_channels(make_driver, archive_dir, media):
    """Response channels (``control-mode=response``): the client names only the archive's ports; the
    archive answers, and replays, over connections the client's driver opened. Over UDP the client is on
    a driver of its own (another host, as far as the archive can tell)."""
    archive_driver = make_driver(timer_interval="10ms", status_message_timeout="50ms")
    client_driver = make_driver(timer_interval="10ms", status_message_timeout="50ms") if media == "udp" \
        else archive_driver
    control = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    if media == "udp":
        response = f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}"
        replay_channel = f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}"
        request = control
    else:
        response = replay_channel = "aeron:ipc?control-mode=response"
        request = "aeron:ipc"
    with sulis.Archive(archive_dir, driver_dir=archive_driver.dir, control_channel=control) as archive, \
            sulis.Client(dir=archive_driver.dir) as local, sulis.Client(dir=client_driver.dir) as client:
        with sulis.ArchiveClient(local) as lac:
            d = record(lac, local, "aeron:ipc?alias=rsp", 1001, 500)
        with sulis.ArchiveClient(client, control_request_channel=request, control_response_channel=response,
                                 message_timeout=5.0) as ac:
            assert ac.archive_id == archive.archive_id
            assert [r.recording_id for r in ac.list_recordings()] == [d.recording_id]
            # replay() adds the response subscription and returns once the replay's image is on it.
            sub = ac.replay(d.recording_id, replay_channel, 2002)
            assert sub.is_connected
            assert receive(sub, 500) == [message(i) for i in range(500)]
            sub.close()
            # start_replay with the caller's own subscription, from a position, for a length.
            sub = client.add_subscription(replay_channel, 2003)
            replay_id = ac.start_replay(d.recording_id, replay_channel, 2003, position=0,
                                        length=d.stop_position, subscription=sub)
            assert sub.images[0].session_id == (replay_id & 0xFFFF_FFFF) - ((replay_id & 0x8000_0000) << 1)
            assert receive(sub, 500) == [message(i) for i in range(500)]
            sub.close()
            with pytest.raises(sulis.ConfigurationError, match="is a response channel: give the subscription"):
                ac.start_replay(d.recording_id, replay_channel, 2004)
        assert archive.errors() == []


def test_a_client_without_an_archive_times_out_with_a_clear_error(client):
    """It says where it looked for an archive and how to start one."""
    with pytest.raises(sulis.ArchiveError, match="timed out .* waiting for an archive's control channel") as nobody:
        sulis.ArchiveClient(client, control_request_channel="aeron:ipc?alias=nobody", control_request_stream_id=4711,
                            message_timeout=0.5)
    text = str(nobody.value)
    assert "(aeron:ipc?alias=nobody stream 4711)" in text and "sulis archive --archive-dir DIR" in text, text


# -- sulis archive and sulis archive-tool ----------------------------------------


def test_cli_archive_with_an_embedded_driver_then_the_tool_describes_and_verifies(archive_dir):
    import json
    import subprocess
    import sys

    from conftest import clean_env

    driver_dir = make_dir()
    os.rmdir(driver_dir)
    proc = subprocess.Popen([sys.executable, "-m", "sulis.cli", "archive", "--archive-dir", archive_dir,
                             "--embedded-driver", "--dir", driver_dir, "--segment-file-length", str(1 << 20)],
                            stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        assert "running in" in proc.stderr.readline()
        with sulis.Client(dir=driver_dir) as client, sulis.ArchiveClient(client) as ac:
            d = record(ac, client, "aeron:ipc?alias=cli", 1001, 300)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
        shutil.rmtree(driver_dir, ignore_errors=True)

    out = json.loads(run_cli("archive-tool", archive_dir, "list", "--json").stdout)
    (r,) = out["recordings"]
    assert (r["recording_id"], r["stop_position"], r["original_channel"]) == (
        d.recording_id, d.stop_position, "aeron:ipc?alias=cli")
    assert run_cli("archive-tool", archive_dir, "count-entries").stdout.strip() == "1"
    ok = run_cli("archive-tool", archive_dir, "verify")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip() == (f"recording {d.recording_id}: OK: {d.stop_position - d.start_position} bytes from "
                                 f"{d.start_position} to {d.stop_position}"), ok.stdout

    # A corrupt frame in the segment: verify names the file and offset, exit status 1.
    (seg,) = [f for f in os.listdir(archive_dir) if f.endswith(".rec")]
    with open(os.path.join(archive_dir, seg), "r+b") as f:
        frame_start = 0
        data = f.read(8192)
        while frame_start + 32 < 4096:  # find the frame that covers offset ~4096
            (length,) = struct.unpack_from("<i", data, frame_start)
            frame_start += (length + 31) & ~31
        f.seek(frame_start + 8)
        f.write(struct.pack("<i", 12345))
    bad = run_cli("archive-tool", archive_dir, "verify")
    assert bad.returncode == 1
    assert seg in bad.stdout and f"offset {frame_start}" in bad.stdout and "12345" in bad.stdout, bad.stdout

    # A missing directory is a one-line error.
    missing = run_cli("archive-tool", os.path.join(archive_dir, "nope"), "describe")
    assert missing.returncode != 0 and "holds no archive.catalog" in missing.stderr


def test_sulis_archive_record_asks_a_running_archive_to_record_a_stream(driver, client, archive_dir):
    """What format("sulis") reads is recordings: `sulis archive record CHANNEL STREAM` starts one from the
    shell (and --stop ends it); `sulis archive` without --archive-dir says what it needs."""
    with sulis.Archive(archive_dir, driver_dir=driver.dir), sulis.ArchiveClient(client) as ac:
        asked = run_cli("archive", "record", "aeron:ipc?alias=asked", 1002, "--dir", driver.dir)
        assert asked.returncode == 0 and "recording aeron:ipc?alias=asked stream 1002" in asked.stdout, asked
        pub = client.add_publication("aeron:ipc?alias=asked", 1002)
        (d,) = await_until(lambda: ac.list_recordings_for_uri("alias=asked", 1002), what="the asked-for recording")
        await_until(lambda: pub.offer(b"recorded") > 0)
        await_until(lambda: ac.get_recording_position(d.recording_id) >= pub.position, what="the message recorded")
        stopped = run_cli("archive", "record", "aeron:ipc?alias=asked", 1002, "--dir", driver.dir, "--stop")
        assert stopped.returncode == 0 and "stopped recording aeron:ipc?alias=asked stream 1002" in stopped.stdout
        nobody = run_cli("archive", "record", "aeron:ipc", 1003, "--dir", driver.dir, "--control-stream-id", 4712,
                         "--timeout", "0.5")
        assert nobody.returncode != 0 and "is an archive listening there?" in nobody.stderr, nobody
    missing = run_cli("archive", "--dir", driver.dir)
    assert missing.returncode == 2 and "Missing option '--archive-dir'" in missing.stderr, missing


def test_an_archive_that_cannot_start_leaves_nothing_behind(tmp_path):
    """No driver to connect to: the start fails naming it, and neither the directory it would have made nor a
    catalog in an empty one it was given is left behind."""
    fresh, empty = tmp_path / "fresh", tmp_path / "empty"
    empty.mkdir()
    for d in (fresh, empty):
        failed = run_cli("archive", "--archive-dir", str(d), "--dir", str(tmp_path / "no-driver"),
                         "--driver-timeout", "200ms")
        assert failed.returncode != 0 and "cannot connect to the driver" in failed.stderr, failed.stderr
    assert not fresh.exists()
    assert list(empty.iterdir()) == []


@pytest.fixture
def small_disk():
    """A 5 MiB tmpfs (mount needs root; the test skips without): 2 MiB of it go to the catalog and
    the mark file, whose storage is reserved up front."""
    d = make_dir("sulis-small-disk-")
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", d], capture_output=True, text=True)
    if out.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a small tmpfs: {out.stderr.strip()}")
    yield d
    subprocess.run(["umount", d], check=False)
    os.rmdir(d)


def test_a_full_disk_stops_the_recording_with_an_error_and_the_archive_goes_on(driver, client, small_disk):
    # No low-storage threshold: the write itself meets the full disk.
    with sulis.Archive(os.path.join(small_disk, "archive"), driver_dir=driver.dir, segment_file_length=64 * 1024,
                       low_storage_space_threshold=0) as archive, sulis.ArchiveClient(client) as ac:
        ac.start_recording("aeron:ipc", 1001)
        pub = client.add_publication("aeron:ipc?term-length=64k", 1001)
        rid = ac.await_signal(RecordingSignal.START).recording_id
        # 8 MiB into a 5 MiB disk: the recording must stop.
        deadline = time.monotonic() + 30
        sent = 0
        while sent < 8192:
            if pub.offer(bytes(1000)) >= 0:
                sent += 1
            elif ac.get_recording_position(rid) == -1:
                break  # stopped: the publication is not read any more
            assert time.monotonic() < deadline
        stop = ac.await_signal(RecordingSignal.STOP, rid)
        (d,) = ac.list_recordings()
        errors = ac.poll_errors()  # the archive's answer about the start request
        assert [code for _, code, _ in errors] == [11], errors  # STORAGE_SPACE
        assert "No space left" in errors[0][2], errors
        assert d.stop_position == stop.position > 0, "the catalog says where it stopped"
        assert any("No space left" in err for err in archive.errors())
        # Whatever was written replays; the archive still serves.
        sub = ac.replay(rid, "aeron:ipc", 2070)
        got: list[bytes] = []
        await_until(lambda: sub.images, what="the replay's image")
        image = sub.images[0]
        while not (image.is_end_of_stream or image.is_closed):
            sub.poll(lambda b, h: got.append(bytes(b)), 100)
        sub.poll(lambda b, h: got.append(bytes(b)), 100)
        assert len(got) > 1000 and all(m == bytes(1000) for m in got)


def test_credentials_and_challenge_keep_out_who_lacks_them_and_the_archive_goes_on(driver, client, archive_dir):
    with sulis.Archive(archive_dir, driver_dir=driver.dir, credentials=b"s3cret", challenge=b"who goes?",
                       challenge_response=b"a friend", connect_timeout=1.0) as archive:
        for kwargs in ({}, {"credentials": b"wrong"}, {"credentials": b"s3cret", "challenge_response": b"foe"}):
            with pytest.raises(sulis.ArchiveError, match="authentication rejected") as e:
                sulis.ArchiveClient(client, message_timeout=3.0, **kwargs)
            assert e.value.code == 10, kwargs  # AUTHENTICATION_REJECTED
        with pytest.raises(sulis.ArchiveError, match="no challenge response is configured"):
            sulis.ArchiveClient(client, message_timeout=3.0, credentials=b"s3cret")
        with sulis.ArchiveClient(client, credentials=b"s3cret", challenge_response=b"a friend") as ac:
            assert ac.list_recordings() == []
        assert sum("authentication rejected" in e for e in archive.errors()) == 3, archive.errors()


def test_segments_detach_attach_delete_and_purge(driver, client, archive_dir):
    """Retention as Aeron's: the start of a recording moves to a later segment boundary
    (detach), the files before it can come back (attach) or go (delete, purge)."""
    seg = 64 * 1024
    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=seg) as archive, \
            sulis.ArchiveClient(client) as ac:
        d = record(ac, client, "aeron:ipc", 1001, 1200, pub_channel="aeron:ipc?term-length=64k")
        rid = d.recording_id
        files = lambda: sorted(f for f in os.listdir(archive_dir) if f.endswith(".rec"))  # noqa: E731
        assert len(files()) >= 4
        for bad, why in ((seg + 32, "is not the start of a segment file"), (0, "is not after the first segment"),
                         (100 * seg, "is past the segment in use")):
            with pytest.raises(sulis.ArchiveError, match=why):
                ac.detach_segments(rid, bad)
        ac.detach_segments(rid, 2 * seg)
        assert ac.get_start_position(rid) == 2 * seg
        with pytest.raises(sulis.ArchiveError) as e:
            ac.start_replay(rid, "aeron:ipc", 2080, position=0)
        assert e.value.code == 16  # before the start: INVALID_POSITION
        assert ac.attach_segments(rid) == 2
        assert ac.get_start_position(rid) == 0
        assert receive(ac.replay(rid, "aeron:ipc", 2081), 1200) == [message(i) for i in range(1200)]
        ac.detach_segments(rid, 2 * seg)
        assert ac.delete_detached_segments(rid) == 2
        assert files()[0] == f"{rid}-{2 * seg}.rec"
        assert ac.purge_segments(rid, 3 * seg) == 1
        assert ac.get_start_position(rid) == 3 * seg
        assert ac.attach_segments(rid) == 0, "nothing left to attach"
        # What is left replays from its new start.
        got = []
        sub = ac.replay(rid, "aeron:ipc", 2082)
        asm = sulis.FragmentAssembler(lambda b, h: got.append(bytes(b)))
        await_until(lambda: sub.images, what="the replay")
        image = sub.images[0]
        while not (image.is_end_of_stream or image.is_closed):
            sub.poll(asm, 100)
        assert got and got[-1] == message(1199) and all(m in {message(i) for i in range(1200)} for m in got[:5])
        assert archive.errors() == []


# -- replication ----------------------------------------------------------------


@pytest.mark.driver_options(client_liveness_timeout="2s", publication_unblock_timeout="3s")
def test_replicate_to_an_archive_of_another_driver_then_follow_until_the_source_is_killed(
        driver, client, make_driver, archive_dir, spawn):
    """An archive copies recordings of an archive on another driver over UDP: a stopped one whole
    (REPLICATE, EXTEND, SYNC at the source's stop, REPLICATE_END), a live one as it grows. When the
    source archive's process is killed mid-copy the copy stops where it got to, without SYNC, and
    what arrived replays intact; a second copy from another recording is not disturbed."""
    import json

    port = free_udp_port()
    source_channel = f"aeron:udp?endpoint=127.0.0.1:{port}"
    child = spawn("archive", driver.dir, archive_dir, json.dumps({"control_channel": source_channel}))
    child.read()
    dst_driver = make_driver(image_liveness_timeout="1s")
    dst_dir = make_dir("sulis-archive-dst-")
    try:
        with sulis.ArchiveClient(client) as src, sulis.Client(dir=dst_driver.dir) as dst_client, \
                sulis.Archive(dst_dir, driver_dir=dst_driver.dir,
                              replication_channel="aeron:udp?endpoint=127.0.0.1:0") as dst, \
                sulis.ArchiveClient(dst_client) as ac:
            stopped = record(src, client, "aeron:ipc", 1001, 2000)
            # The source archive answers the copying archive over a response channel (no port of the
            # copying archive's own in the request).
            replication_id = ac.replicate(
                stopped.recording_id, source_channel,
                src_response_channel=f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}")
            made = ac.await_signal(RecordingSignal.REPLICATE)
            assert (made.correlation_id, made.position) == (replication_id, 0)
            copy_id = made.recording_id
            assert ac.await_signal(RecordingSignal.EXTEND, copy_id).correlation_id == replication_id
            assert ac.await_signal(RecordingSignal.SYNC, copy_id).position == stopped.stop_position
            ac.await_signal(RecordingSignal.REPLICATE_END, copy_id)
            copy = ac.list_recording(copy_id)
            assert (copy.start_position, copy.stop_position, copy.stream_id, copy.session_id) == (
                0, stopped.stop_position, 1001, stopped.session_id)
            assert copy.stripped_channel == stopped.stripped_channel
            assert receive(ac.replay(copy_id, "aeron:ipc", 3001), 2000) == [message(i) for i in range(2000)]
            # A recording of one message is copied between two duty cycles of the copying archive (its
            # recording starts and stops unseen): each copy still ends, in sync.
            tiny = record(src, client, "aeron:ipc", 1003, 1)
            for _ in range(5):
                ac.replicate(tiny.recording_id, source_channel)
                tiny_copy = ac.await_signal(RecordingSignal.REPLICATE).recording_id
                assert ac.await_signal(RecordingSignal.SYNC, tiny_copy).position == tiny.stop_position
                ac.await_signal(RecordingSignal.REPLICATE_END, tiny_copy)
                assert ac.list_recording(tiny_copy).stop_position == tiny.stop_position

            # A live recording is followed as it grows.
            src.start_recording("aeron:ipc", 1002)
            pub = client.add_exclusive_publication("aeron:ipc?term-length=64k", 1002)
            live_id = src.await_signal(RecordingSignal.START).recording_id
            publish(pub, (message(i) for i in range(300)))
            ac.replicate(live_id, source_channel)
            live_copy = ac.await_signal(RecordingSignal.REPLICATE).recording_id
            ac.await_signal(RecordingSignal.EXTEND, live_copy)
            publish(pub, (message(i) for i in range(300, 1000)))
            end = pub.position
            await_until(lambda: ac.get_recording_position(live_copy) == end, what="the live copy to catch up")

            child.signal(signal.SIGKILL)
            child.proc.wait(10)
            stop = ac.await_signal(RecordingSignal.STOP, live_copy)
            assert stop.position == end
            ac.await_signal(RecordingSignal.REPLICATE_END, live_copy)
            signals = [s.signal for s in ac.poll_signals() if s.recording_id == live_copy]
            assert RecordingSignal.SYNC not in signals
            assert receive(ac.replay(live_copy, "aeron:ipc", 3002), 1000) == [message(i) for i in range(1000)]
            # The first copy is untouched, and the destination archive logged nothing.
            assert ac.list_recording(copy_id) == copy
            assert dst.errors() == []
            pub.close()
    finally:
        shutil.rmtree(dst_dir, ignore_errors=True)


def test_replicate_over_a_response_channel(driver, client, make_driver, archive_dir):
    """The copying archive names only the source archive's ports: its control session and the replay
    both come back over connections its own driver opened (``src_response_channel`` and
    ``replication_channel`` in response mode; the source archive is asked for a replay token)."""
    source_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    dst_driver = make_driver(timer_interval="10ms", status_message_timeout="50ms")
    dst_dir = make_dir("sulis-archive-dst-")
    replication_channel = f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}"
    try:
        with sulis.Archive(archive_dir, driver_dir=driver.dir, control_channel=source_channel) as source, \
                sulis.ArchiveClient(client) as src, sulis.Client(dir=dst_driver.dir) as dst_client, \
                sulis.Archive(dst_dir, driver_dir=dst_driver.dir, replication_channel=replication_channel) as dst, \
                sulis.ArchiveClient(dst_client) as ac:
            stopped = record(src, client, "aeron:ipc", 1001, 1000)
            rid = ac.replicate(
                stopped.recording_id, source_channel,
                src_response_channel=f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}")
            copy_id = ac.await_signal(RecordingSignal.REPLICATE).recording_id
            assert ac.await_signal(RecordingSignal.SYNC, copy_id).position == stopped.stop_position
            end = ac.await_signal(RecordingSignal.REPLICATE_END, copy_id)
            assert end.correlation_id == rid
            assert ac.list_recording(copy_id).stop_position == stopped.stop_position
            assert receive(ac.replay(copy_id, "aeron:ipc", 3001), 1000) == [message(i) for i in range(1000)]
            assert dst.errors() == [] and source.errors() == []
    finally:
        shutil.rmtree(dst_dir, ignore_errors=True)


@pytest.mark.expect_errors  # the refused tag is logged
def test_a_tagged_replication_records_through_a_tagged_endpoint_others_can_share(driver, client, make_driver,
                                                                                archive_dir):
    """Aeron's tagged replication: the copy is recorded through a multi-destination subscription
    ``tags=C,S`` whose destination is the replication channel's endpoint; a subscription of the copying
    archive's driver on ``aeron:udp?tags=C`` shares that endpoint and sees the replayed stream."""
    source_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    dst_driver = make_driver()
    dst_dir = make_dir("sulis-archive-dst-")
    try:
        with sulis.Archive(archive_dir, driver_dir=driver.dir, control_channel=source_channel) as source, \
                sulis.ArchiveClient(client) as src, sulis.Client(dir=dst_driver.dir) as dst_client, \
                sulis.Archive(dst_dir, driver_dir=dst_driver.dir,
                              replication_channel=f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}") as dst, \
                sulis.ArchiveClient(dst_client) as ac:
            src.start_recording("aeron:ipc", 1003)
            pub = client.add_exclusive_publication("aeron:ipc?term-length=64k", 1003)
            live_id = src.await_signal(RecordingSignal.START).recording_id
            publish(pub, (message(i) for i in range(300)))
            ac.replicate(live_id, source_channel, channel_tag_id=7001, subscription_tag_id=7002)
            copy_id = ac.await_signal(RecordingSignal.REPLICATE).recording_id
            ac.await_signal(RecordingSignal.EXTEND, copy_id)
            # The recording subscription is tagged: a channel naming only its tag shares its endpoint.
            watcher = dst_client.add_subscription("aeron:udp?tags=7001", 1003)
            await_until(lambda: watcher.image_count == 1, what="the watcher to see the replay")
            seen: list[bytes] = []
            asm = sulis.FragmentAssembler(lambda b, _h: seen.append(bytes(b)))
            publish(pub, (message(i) for i in range(300, 1000)))
            end = pub.position
            # One image, two subscribers: the watcher reads too, or it holds the copy back at its window.
            await_until(lambda: watcher.poll(asm, 100) >= 0 and seen and seen[-1] == message(999),
                        what="the watcher to read the stream's end")
            await_until(lambda: ac.get_recording_position(copy_id) == end, what="the copy to catch up")
            assert receive(ac.replay(copy_id, "aeron:ipc", 3003), 1000) == [message(i) for i in range(1000)]
            with pytest.raises(sulis.ConfigurationError, match="tags=7009: no subscription channel has that"):
                dst_client.add_subscription("aeron:udp?tags=7009", 1003)
            assert dst.errors() == [] and source.errors() == []
            pub.close()
    finally:
        shutil.rmtree(dst_dir, ignore_errors=True)


def test_replication_errors_name_what_was_wrong(driver, client, archive_dir):
    with sulis.Archive(archive_dir, driver_dir=driver.dir, connect_timeout=1.0) as archive, \
            sulis.ArchiveClient(client) as ac:
        _replication_errors(archive, ac)


def _replication_errors(archive, ac) -> None:
    with pytest.raises(sulis.ArchiveError, match="no replication channel") as e:
        ac.replicate(0, "aeron:ipc")
    with pytest.raises(sulis.ArchiveError, match="unknown recording id: 5") as e:
        ac.replicate(0, "aeron:ipc", dst_recording_id=5, replication_channel="aeron:udp?endpoint=127.0.0.1:0")
    assert e.value.code == 5
    with pytest.raises(sulis.ArchiveError, match="merges with the live stream has no stop position"):
        ac.replicate(0, "aeron:ipc", live_destination="aeron:udp?endpoint=127.0.0.1:1", stop_position=4096,
                     replication_channel="aeron:udp?endpoint=127.0.0.1:0")
    with pytest.raises(sulis.ArchiveError, match="live destination 'aeron:udpx'"):
        ac.replicate(0, "aeron:ipc", live_destination="aeron:udpx",
                     replication_channel="aeron:udp?endpoint=127.0.0.1:0")
    with pytest.raises(sulis.ArchiveError, match="response channels can't be used with live destinations"):
        ac.replicate(0, "aeron:ipc", replication_channel="aeron:udp?control-mode=response|control=127.0.0.1:1",
                     live_destination="aeron:udp?endpoint=127.0.0.1:2")
    with pytest.raises(sulis.ArchiveError, match="unknown replication id 77") as e:
        ac.stop_replication(77)
    assert e.value.code == 12
    # A source archive that is not there: the replication ends with REPLICATE_END and an error.
    rid = ac.replicate(0, f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}",
                       replication_channel="aeron:udp?endpoint=127.0.0.1:0")
    end = ac.await_signal(RecordingSignal.REPLICATE_END)
    assert end.correlation_id == rid
    (err,) = [x for x in ac.poll_errors() if x[0] == rid]
    assert err[1] == 14 and "cannot connect to the source archive" in err[2], err
    assert [e for e in archive.errors() if "cannot connect to the source archive" in e]


def test_archive_tool_dumps_marks_compacts_and_deletes_orphans_of_a_stopped_archive(driver, client, archive_dir):
    import json

    from conftest import run_cli

    def tool(*args):
        r = run_cli("archive-tool", archive_dir, *args)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def listed():
        return [r["recording_id"] for r in json.loads(tool("list", "--json"))["recordings"]]

    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=64 * 1024), \
            sulis.ArchiveClient(client) as ac:
        a = record(ac, client, "aeron:ipc", 1001, 300)
        b = record(ac, client, "aeron:ipc", 1002, 300)
        # A running archive's files are left alone; its mark file names it.
        refused = run_cli("archive-tool", archive_dir, "mark-invalid", a.recording_id)
        assert refused.returncode != 0 and "an archive is running" in refused.stderr
        assert int(tool("pid")) == os.getpid()
    assert tool("errors").strip() == "no errors"

    (dumped,) = json.loads(tool("dump", a.recording_id, "--frames", "3", "--json"))
    assert dumped["recording_id"] == a.recording_id and dumped["error"] is None
    first = dumped["frames"][0]
    assert (first["position"], first["type"], first["session_id"], first["stream_id"]) == (
        0, 1, a.session_id, 1001)
    assert bytes.fromhex(first["payload_head"]) == message(0)[:16]
    assert [f["position"] for f in dumped["frames"]][1] == (len(message(0)) + 32 + 31) & ~31

    tool("mark-invalid", a.recording_id)
    assert listed() == [b.recording_id]
    tool("mark-valid", a.recording_id)
    assert listed() == [a.recording_id, b.recording_id]
    tool("mark-invalid", a.recording_id)

    # A segment file of a recording the catalog does not hold is an orphan.
    with open(os.path.join(archive_dir, "99-0.rec"), "wb") as f:
        f.write(bytes(64))
    assert json.loads(tool("delete-orphaned-segments", "--json"))["files_deleted"] == [
        os.path.join(archive_dir, "99-0.rec")]
    a_files = [f for f in os.listdir(archive_dir) if f.startswith(f"{a.recording_id}-")]
    assert a_files
    out = json.loads(tool("compact", "--json"))
    assert out["entries_removed"] == 1 and sorted(map(os.path.basename, out["files_deleted"])) == sorted(a_files)
    assert [r["recording_id"] for r in json.loads(tool("describe", "--json"))["recordings"]] == [b.recording_id]
    assert run_cli("archive-tool", archive_dir, "verify").returncode == 0

    bad = run_cli("archive-tool", archive_dir, "mark-valid", "42")
    assert bad.returncode != 0 and "no recording 42" in bad.stderr
    assert "needs a recording id" in run_cli("archive-tool", archive_dir, "mark-valid").stderr

    # The compacted archive serves what is left; new recordings take ids after the old ones.
    with sulis.Archive(archive_dir, driver_dir=driver.dir) as archive, sulis.ArchiveClient(client) as ac:
        assert [d.recording_id for d in ac.list_recordings()] == [b.recording_id]
        assert receive(ac.replay(b.recording_id, "aeron:ipc", 2070), 300) == [message(i) for i in range(300)]
        c = record(ac, client, "aeron:ipc", 1003, 10)
        assert c.recording_id == b.recording_id + 1
        assert archive.errors() == []


def test_migrate_segments_joins_a_recording_to_the_one_that_follows_it(driver, client, archive_dir):
    """Recording A cut at a segment boundary S, recording B of the same stream starting at S:
    migrating A's segments into B makes B one recording from A's start, replayed whole; A is left
    empty. Recordings that do not meet, or meet off a boundary, are refused with the reason."""
    segment = 128 * 1024
    with sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=segment) as archive, \
            sulis.ArchiveClient(client) as ac:
        a = record(ac, client, "aeron:ipc?term-length=64k", 1001, 1500)
        assert a.stop_position > segment
        ends: list[int] = []
        sub = ac.replay(a.recording_id, "aeron:ipc", 2080)
        assembler = sulis.FragmentAssembler(lambda b, h: ends.append(h.position))
        while len(ends) < 1500:
            sub.poll(assembler, 100)
        sub.close()
        kept = sum(1 for e in ends if e <= segment)
        ac.truncate_recording(a.recording_id, segment)
        ac.await_signal(RecordingSignal.DELETE, a.recording_id)

        channel = extension_channel(a, segment)
        ac.start_recording("aeron:ipc", 1001)
        pub = client.add_exclusive_publication(channel, 1001)
        b_id = ac.await_signal(RecordingSignal.START).recording_id
        publish(pub, (message(i) for i in range(200)))
        end = pub.position
        await_until(lambda: ac.get_recording_position(b_id) == end, what="B recorded")
        ac.stop_recording("aeron:ipc", 1001)
        ac.await_signal(RecordingSignal.STOP, b_id)
        pub.close()
        b = ac.list_recording(b_id)
        assert (b.start_position, b.stop_position) == (segment, end)

        with pytest.raises(sulis.ArchiveError, match="not contiguous"):
            ac.migrate_segments(b.recording_id, b.recording_id)
        with pytest.raises(sulis.ArchiveError, match="unknown recording id: 99"):
            ac.migrate_segments(a.recording_id, 99)
        assert ac.migrate_segments(a.recording_id, b.recording_id) == 1
        ac.await_signal(RecordingSignal.DELETE, a.recording_id)
        merged = ac.list_recording(b.recording_id)
        emptied = ac.list_recording(a.recording_id)
        assert (merged.start_position, merged.stop_position) == (0, b.stop_position)
        assert emptied.start_position == emptied.stop_position == 0
        assert not [f for f in os.listdir(archive_dir) if f.startswith(f"{a.recording_id}-")]
        got = receive(ac.replay(b.recording_id, "aeron:ipc", 2081), kept + 200)
        assert got == [message(i) for i in range(kept)] + [message(i) for i in range(200)]
        assert archive.errors() == []


def _flip_payload_byte(archive_dir: str, recording_id: int, near: int) -> int:
    """Flips a payload byte of the DATA frame that covers offset ``near`` of the recording's first
    segment file (the headers stay consistent); returns that frame's position."""
    (seg,) = [f for f in os.listdir(archive_dir) if f.startswith(f"{recording_id}-") and f.endswith(".rec")]
    with open(os.path.join(archive_dir, seg), "r+b") as f:
        data = f.read(near + 16384)
        at = 0
        while True:
            (length,) = struct.unpack_from("<i", data, at)
            if at + ((length + 31) & ~31) > near:
                break
            at += (length + 31) & ~31
        f.seek(at + 40)
        f.write(bytes([data[at + 40] ^ 0x5A]))
    return at


def test_checksums_are_written_checked_on_replay_and_by_the_tool(driver, client, archive_dir):
    """With a record checksum every frame's session id field holds the CRC of its body (Aeron's
    layout); a byte changed on disk then fails `verify --checksum` and a replay with a replay
    checksum (naming the position), while a plain verify, which checks headers only, passes.
    `archive-tool checksum` stamps a recording made without checksums so that both accept it."""
    from conftest import run_cli

    with sulis.Archive(archive_dir, driver_dir=driver.dir, record_checksum="crc32c",
                       replay_checksum="io.aeron.archive.checksum.Crc32c") as archive, \
            sulis.ArchiveClient(client) as ac:
        d = record(ac, client, "aeron:ipc", 1001, 300)
        assert receive(ac.replay(d.recording_id, "aeron:ipc", 2080), 300) == [message(i) for i in range(300)]
        assert archive.errors() == []
    dumped = json.loads(run_cli("archive-tool", archive_dir, "dump", "--frames", "5", "--json").stdout)
    sessions = {f["session_id"] for f in dumped[0]["frames"]}
    assert d.session_id not in sessions and len(sessions) == 5, "each frame's field holds its own checksum"
    ok = run_cli("archive-tool", archive_dir, "verify", "--checksum", "crc32c")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    wrong = run_cli("archive-tool", archive_dir, "verify", "--checksum", "crc32")
    assert wrong.returncode == 1 and "checksum mismatch" in wrong.stdout, wrong.stdout

    bad_position = _flip_payload_byte(archive_dir, d.recording_id, 6000)
    assert run_cli("archive-tool", archive_dir, "verify").returncode == 0, "headers alone look fine"
    bad = run_cli("archive-tool", archive_dir, "verify", "--checksum", "crc32c")
    assert bad.returncode == 1, bad.stdout
    assert f"position {bad_position}" in bad.stdout and "crc32c checksum mismatch" in bad.stdout, bad.stdout
    with sulis.Archive(archive_dir, driver_dir=driver.dir, replay_checksum="crc32c") as archive, \
            sulis.ArchiveClient(client) as ac:
        sub = ac.replay(d.recording_id, "aeron:ipc", 2081)
        await_until(lambda: sub.images, what="the replay's image")
        got: list[bytes] = []
        assembler = sulis.FragmentAssembler(lambda b, h: got.append(bytes(b)))
        errors: list = []

        def replay_failed() -> bool:
            sub.poll(assembler, 100)
            errors.extend(ac.poll_errors())
            return bool(errors)
        await_until(replay_failed, what="the replay's error")
        (_, _, text), = errors
        assert f"position {bad_position}" in text and "checksum mismatch" in text, text
        assert got == [message(i) for i in range(len(got))], "what came before the bad frame is intact"
        assert 0 < len(got) < 300

    # A recording made without checksums: the tool stamps it, then a checked replay takes it.
    other = make_dir("sulis-test-archive-")
    with sulis.Archive(other, driver_dir=driver.dir) as archive, sulis.ArchiveClient(client) as ac:
        d2 = record(ac, client, "aeron:ipc", 1002, 200)
    plain = run_cli("archive-tool", other, "verify", "--checksum", "crc32c")
    assert plain.returncode == 1 and "checksum mismatch" in plain.stdout, plain.stdout
    stamped = json.loads(run_cli("archive-tool", other, "checksum", "--checksum", "crc32c", "--all",
                                 "--json").stdout)
    assert stamped == [{"recording_id": d2.recording_id, "files": 1, "frames": stamped[0]["frames"]}]
    assert stamped[0]["frames"] >= 200
    assert run_cli("archive-tool", other, "verify", "--checksum", "crc32c").returncode == 0
    with sulis.Archive(other, driver_dir=driver.dir, replay_checksum="crc32c") as archive, \
            sulis.ArchiveClient(client) as ac:
        assert receive(ac.replay(d2.recording_id, "aeron:ipc", 2082), 200) == [message(i) for i in range(200)]
        assert ac.poll_errors() == [] and archive.errors() == []
    shutil.rmtree(other, ignore_errors=True)
    usage = run_cli("archive-tool", archive_dir, "checksum")
    assert usage.returncode != 0 and "needs --checksum" in usage.stderr
    unknown = run_cli("archive-tool", archive_dir, "verify", "--checksum", "md5")
    assert unknown.returncode != 0 and "unknown checksum 'md5'" in unknown.stderr


def test_recording_events_tell_start_progress_and_stop_when_enabled(driver, client, archive_dir):
    """Aeron's recording events: an archive started with them publishes RecordingStarted, then
    RecordingProgress as the position moves, then RecordingStopped, on its events channel; one
    without them publishes nothing there."""
    from sulis.archive import RecordingEvents

    with sulis.Archive(archive_dir, driver_dir=driver.dir), RecordingEvents(client, stream_id=31) as quiet, \
            sulis.ArchiveClient(client) as ac:
        record(ac, client, "aeron:ipc", 1001, 50)
        assert not quiet.subscription.is_connected and quiet.poll() == [], "off unless enabled"
    # The default channel is Aeron's: a dynamic MDC publication on localhost:8030 that any number of
    # watchers join by its control address (a second one here as from another host would).
    with sulis.Archive(archive_dir, driver_dir=driver.dir, recording_events_enabled=True,
                       recording_events_stream_id=31) as archive, sulis.ArchiveClient(client) as ac, \
            RecordingEvents(client, stream_id=31) as events, \
            RecordingEvents(client, "aeron:udp?control=localhost:8030|endpoint=127.0.0.1:0", 31) as other:
        await_until(lambda: events.subscription.is_connected and other.subscription.is_connected,
                    what="both watchers on the events stream")
        d = record(ac, client, "aeron:ipc?alias=ev", 1002, 400)
        seen: list = []
        await_until(lambda: seen.extend(events.poll()) or any(e.kind == "stopped" for e in seen),
                    what="the stopped event")
        also: list = []
        await_until(lambda: also.extend(other.poll()) or any(e.kind == "stopped" for e in also),
                    what="the second watcher's stopped event")
        assert [e.kind for e in also if e.recording_id == d.recording_id][0] == "started"
        started, *progress, stopped = [e for e in seen if e.recording_id == d.recording_id]
        assert (started.kind, started.start_position, started.session_id, started.stream_id) == (
            "started", d.start_position, d.session_id, 1002)
        assert started.channel == "aeron:ipc?alias=ev" and started.source_identity == "aeron:ipc"
        assert progress and all(e.kind == "progress" for e in progress)
        positions = [e.position for e in progress]
        assert positions == sorted(positions) and positions[-1] == d.stop_position
        assert (stopped.kind, stopped.position) == ("stopped", d.stop_position)
        assert archive.errors() == []


def test_clients_on_the_shared_ipc_response_stream_hold_each_other_back_no_more(client, archive):
    """Every client answered on aeron:ipc stream 20: one that stays connected and never reads
    used to hold back the others' answers once its window filled. Each client's channels now
    carry a session id of its own (as Aeron's client does)."""
    with sulis.ArchiveClient(client) as busy, sulis.ArchiveClient(client) as idle:
        d = record(busy, client, "aeron:ipc", 1001, 10)
        for _ in range(1500):  # ~400 KB of answers, many windows' worth
            assert busy.list_recordings() == [d]
        assert idle.list_recordings() == [d], "the idle one is still served"


def test_more_replays_than_the_limit_wait_their_turn_and_the_rest_of_the_protocol(driver, client, archive_dir):
    with sulis.Archive(archive_dir, driver_dir=driver.dir, max_concurrent_replays=2) as archive, \
            sulis.ArchiveClient(client) as ac:
        d = record(ac, client, "aeron:ipc?alias=many", 1001, 300)
        # Six replays at once against a limit of two: each waits for a slot, none is refused.
        subs = [ac.replay(d.recording_id, "aeron:ipc", 3000 + i) for i in range(6)]
        for sub in subs:
            assert receive(sub, 300) == [message(i) for i in range(300)]
        # Recording subscriptions are listed, by stream and channel fragment.
        sub_id = ac.start_recording("aeron:ipc?alias=listed", 1002)
        assert ac.list_recording_subscriptions(channel="alias=listed") == [(sub_id, 1002, "aeron:ipc?alias=listed")]
        assert ac.list_recording_subscriptions(channel="alias=listed", stream_id=7) == []
        ac.stop_recording_subscription(sub_id)
        # The last recording of a session and stream.
        assert ac.find_last_matching_recording(0, "alias=many", 1001, d.session_id) == d.recording_id
        assert ac.find_last_matching_recording(0, "alias=many", 1001, d.session_id + 1) == -1
        # A stopped recording listed under another channel, found by it afterwards.
        ac.update_channel(d.recording_id, "aeron:ipc?alias=renamed")
        (renamed,) = ac.list_recordings_for_uri("alias=renamed", 1001)
        assert renamed.recording_id == d.recording_id and renamed.original_channel == "aeron:ipc?alias=renamed"
        # Follow-mode replays stopped all at once; keep-alive is answered by nothing.
        ac.keep_alive()
        ac.stop_all_replays(d.recording_id)
        assert ac.list_recording(d.recording_id).stop_position == d.stop_position
        assert archive.errors() == []


def test_an_archive_that_cannot_start_says_why_with_a_typed_error(driver, archive_dir, small_disk):
    """A file that fails is an ArchiveIOError, both an OSError with its errno and a SulisError; a
    directory another archive runs in, or a wrong setting, is not."""
    import errno

    blocker = os.path.join(archive_dir, "a-file")
    open(blocker, "w").close()
    with pytest.raises(sulis.ArchiveIOError) as e:
        sulis.Archive(os.path.join(blocker, "archive"), driver_dir=driver.dir)
    assert isinstance(e.value, OSError) and isinstance(e.value, sulis.SulisError)
    assert e.value.errno == errno.ENOTDIR and "a-file" in str(e.value)
    # A disk without room for the catalog's 1 MiB.
    filler = os.path.join(small_disk, "filler")
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):
            f.write(bytes(5 << 20))
    with pytest.raises(OSError) as e:
        sulis.Archive(os.path.join(small_disk, "archive"), driver_dir=driver.dir)
    assert e.value.errno == errno.ENOSPC, e.value
    with pytest.raises(sulis.ConfigurationError, match="segment_file_length"):
        sulis.Archive(archive_dir, driver_dir=driver.dir, segment_file_length=1000)


def test_a_thread_waiting_on_the_archive_does_not_lock_out_the_others_calls(client, archive):
    """One thread waits for a signal that never comes; another thread's calls on the same archive client wait
    their turn and return once the first call timed out. The session's lock was taken with the GIL held, and
    the waiting call's signal checks need the GIL: the two threads held each other forever."""
    from sulis.archive import RecordingSignal

    with sulis.ArchiveClient(client, message_timeout=1.0) as ac:
        outcome: list = []

        def wait():
            try:
                ac.await_signal(RecordingSignal.START, 4711)
                outcome.append("signal")
            except sulis.SulisError as e:
                outcome.append(e)

        t = threading.Thread(target=wait)
        t.start()
        calls = 0
        while t.is_alive():
            ac.poll_signals()
            assert not ac.is_closed
            calls += 1
        t.join()
        assert len(outcome) == 1 and "timed out" in str(outcome[0]), outcome
        assert calls >= 1
