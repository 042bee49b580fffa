"""The archive against Aeron Java's (the current aeron-all; 1.15.1's archive protocol is pre-1.16):

* Aeron's own ``AeronArchive`` client (bench/peers/ArchivePeer.java) records, finds its recording by
  the rec-pos counter, stops, lists and replays on a sulis archive;
* ``sulis.ArchiveClient`` does the same over UDP on Aeron's ``ArchivingMediaDriver``;
* a sulis archive opens the directory Aeron's archive wrote (catalog and segments) and replays it;
* replication both ways: a sulis archive copies recordings of Aeron's archive (``ArchiveClient.replicate``
  with Aeron's UDP control channel as the source), and Aeron's archive copies recordings of a sulis
  archive (``AeronArchive.replicate``, ArchivePeer's ``replicate`` role): whole, up to a stop position
  then continued into the same recording, following a live recording until it stops, bounded or
  stopped by request while it is live; Aeron's client asking a sulis archive to copy from Aeron's
  archive with each replication option; live merge both ways, the live stream from an Aeron
  publisher (ArchivePeer's ``publish`` role) with manual multi-destination-cast;
* checksums: Aeron's ``ArchiveTool verify -checksum`` accepts what a sulis archive recorded with a
  record checksum and finds a changed byte in it; ``sulis archive-tool verify --checksum`` and a
  sulis replay with a replay checksum accept what Aeron's archive recorded with one.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
from typing import NamedTuple

import peers  # noqa: E402
import pytest

import sulis
from conftest import await_until, free_udp_port
from sulis.archive import RecordingSignal

pytestmark = pytest.mark.interop


def message(i: int) -> bytes:
    """ArchivePeer.java's messages: index, then (i + j) & 0xff, some fragmented."""
    n = 5000 if i % 97 == 5 else 8 + (i * 37) % 400
    return i.to_bytes(4, "little") + bytes((i + j) & 0xFF for j in range(n))


@pytest.fixture
def current():
    return peers.usable("current")


@pytest.fixture
def harness():
    with peers.Harness() as h:
        yield h


def receive(sub, count: int, timeout: float = 30.0) -> list[bytes]:
    got: list[bytes] = []
    assembler = sulis.FragmentAssembler(lambda b, h: got.append(bytes(b)))
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"received {len(got)} of {count}"
        sub.poll(assembler, 100)
    return got


def publish(pub, first: int, count: int) -> list[int]:
    """Offers messages first .. first + count - 1; returns the publication's position after each."""
    positions = []
    deadline = time.monotonic() + 30
    for i in range(first, first + count):
        while (r := pub.offer(message(i))) < 0:
            assert r != sulis.CLOSED and time.monotonic() < deadline, f"offer stuck: {sulis.result_name(r)}"
        positions.append(r)
    return positions


def record(ac, client, channel: str, stream_id: int, count: int, source: str = "local", stop: bool = True):
    """Records ``count`` messages of ``channel`` on the archive of ``ac``; returns (recording id,
    the position after each message) once all is recorded (and, if ``stop``, the recording stopped)
    and the publication with them when not ``stop``."""
    ac.start_recording(channel, stream_id, source=source)
    pub = client.add_publication(channel, stream_id)
    rid = ac.await_signal(RecordingSignal.START).recording_id
    positions = publish(pub, 0, count)
    await_position(ac, rid, positions[-1])
    if not stop:
        return rid, positions, pub
    ac.stop_recording(channel, stream_id)
    assert ac.await_signal(RecordingSignal.STOP, rid).position == positions[-1]
    pub.close()
    return rid, positions


def await_position(ac, recording_id: int, position: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (at := ac.get_recording_position(recording_id)) != position:
        assert time.monotonic() < deadline, f"recording {recording_id} at {at}, not {position}"
        time.sleep(0.005)


def replication_signals(ac, replication_id: int, until=(RecordingSignal.REPLICATE_END, RecordingSignal.STOP),
                        timeout: float = 60.0) -> list:
    """The signals of a replication (correlation id = its id) as they came, once all of ``until`` did."""
    got = []
    deadline = time.monotonic() + timeout
    while not set(until) <= {s.signal for s in got}:
        assert time.monotonic() < deadline, f"replication {replication_id}: not all of {until} came, only {got}"
        got += [s for s in ac.poll_signals() if s.correlation_id == replication_id]
        time.sleep(0.005)
    return got


def test_aeron_archive_client_on_a_sulis_archive(current, harness):
    base = harness.make_dir("archive")
    cp = peers.aeron_java.classpath(current, peers.aeron_java.SOURCE.with_name("ArchivePeer.java"))
    with sulis.MediaDriver(dir=os.path.join(base, "driver"), threading_mode="shared") as driver, \
            sulis.Archive(os.path.join(base, "archive"), driver_dir=driver.dir) as archive:
        cmd = peers.aeron_java.command(current, {"aeron.dir": driver.dir}, "ArchivePeer", [
            "client", "control=aeron:ipc", "response=aeron:ipc", "channel=aeron:ipc?alias=iop", "stream=1001",
            "count=3000", "replay_channel=aeron:ipc", "replay_stream=2002"], cp)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res["errors"] == [] and res["replayed"] == 3000, res
        # A replay bounded by a counter, then truncated, then extended while a replay followed it.
        assert (res["bounded"], res["followed"]) == (1500, 3000), res
        assert res["archive_id"] == archive.archive_id
        d = res["descriptor"]
        assert d["recording_id"] == res["recording_id"] and d["stop_position"] == res["stop_position"]
        assert ac_stop(driver.dir, res["recording_id"]) == res["extended_stop"]
        assert d["original_channel"] == "aeron:ipc?alias=iop" and d["stream_id"] == 1001
        # What Aeron recorded through sulis, sulis replays as well.
        with sulis.Client(dir=driver.dir) as client, sulis.ArchiveClient(client) as ac:
            sub = ac.replay(res["recording_id"], "aeron:ipc", 2003)
            assert receive(sub, 3000) == [message(i) for i in range(3000)]
        assert archive.errors() == []
        archive_dir = archive.dir
    # Aeron's ArchiveTool reads what sulis wrote: mark file, catalog and segments.
    tool = {}
    for verb in ("describe", "verify", "count-entries"):
        out = subprocess.run(peers.aeron_java.command(current, {}, "io.aeron.archive.ArchiveTool",
                                                      [archive_dir, verb]), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"ArchiveTool {verb}: {out.stdout[-2000:]}{out.stderr[-2000:]}"
        tool[verb] = out.stdout
    assert f"recordingId={res['recording_id']}" in tool["describe"], tool["describe"]
    assert "OK" in tool["verify"], tool["verify"]
    assert tool["count-entries"].strip().endswith("1"), tool["count-entries"]


def ac_stop(driver_dir: str, recording_id: int) -> int:
    """The stop position of a recording of the archive on the driver in ``driver_dir``."""
    with sulis.Client(dir=driver_dir) as client, sulis.ArchiveClient(client) as ac:
        return ac.get_stop_position(recording_id)


class AeronArchive(NamedTuple):
    control: str  # its UDP control channel (stream 10)
    archive_dir: str
    driver_dir: str  # its media driver's aeron.dir, for Aeron clients of it
    proc: object


@pytest.fixture
def aeron_archive(current, harness):
    """Aeron's ArchivingMediaDriver (a driver and an archive, shared threads) with a UDP control
    channel and a replication channel of port 0 (Aeron resolves it)."""
    yield start_aeron_archive(current, harness)


def start_aeron_archive(current, harness, **extra: str) -> AeronArchive:
    """An ArchivingMediaDriver as ``aeron_archive`` makes it, with ``extra`` properties."""
    base = harness.make_dir("aeron-archive")
    control = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    props = {**peers.aeron_java.dir_props(os.path.join(base, "aeron")), "aeron.threading.mode": "SHARED",
             "aeron.archive.threading.mode": "SHARED", "aeron.archive.dir": os.path.join(base, "archive"),
             "aeron.archive.control.channel": control, "aeron.archive.id": "777",
             "aeron.archive.replication.channel": "aeron:udp?endpoint=localhost:0",
             "aeron.archive.segment.file.length": str(1 << 20),
             # How long the archive waits for a control session's (a replication's too) response publication to
             # connect: 5 s by default, which a CI run with busy CPUs outlasted (the session closed, and the
             # replication ended with REPLICATE_END and no recording).
             "aeron.archive.connect.timeout": "30s", **extra}
    proc = harness.start("aeron-archive", peers.aeron_java.command(current, props,
                                                                  "io.aeron.archive.ArchivingMediaDriver"))
    # Started once its mark file is there (the archive writes it as it starts): the JVM's start is waited for
    # here, for as long as the process lives, so that the clients' answer timeouts time answers only.
    mark = os.path.join(base, "archive", "archive-mark.dat")
    deadline = time.monotonic() + peers.JVM_START_S
    while not (os.path.exists(mark) and os.path.getsize(mark) > 0):
        if proc.proc.poll() is not None or time.monotonic() > deadline:
            raise peers.PeerFailed(f"Aeron's archive wrote no {mark} within {peers.JVM_START_S:.0f} s\n"
                                   f"{harness.describe()}")
        time.sleep(0.02)
    return AeronArchive(control, os.path.join(base, "archive"), os.path.join(base, "aeron"), proc)


# How long a sulis archive replicating from Aeron's waits for each of its answers (5 s by default, as Aeron's
# connect timeout): a loaded run saw Aeron's archive, beside a JVM publisher, take longer to accept the
# replication's connect.
SOURCE_ANSWERS_S = 30.0


def connect(client, control: str, timeout_s: float = 60.0) -> sulis.ArchiveClient:
    """An ArchiveClient over UDP whose requests (the connect too) wait ``timeout_s`` for an answer: it waits
    for the JVM to start, and on the suite's busy 2 cores a CI run (2026-11-26) saw the Aeron archive not
    answer a connect for 30 s while two Spark JVMs ran. Not retried: a connect abandoned while the archive
    was still slow leaves it a control session it aborts later, rejecting the request image, and the error
    frame that carries ("failed to establish initial connection") is logged by this driver, as Aeron's
    driver logs one."""
    return sulis.ArchiveClient(client, control_request_channel=control, message_timeout=timeout_s,
                               control_response_channel=f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}")


def test_sulis_archive_client_on_an_aeron_archive_then_a_sulis_archive_opens_its_files(
        aeron_archive, harness, driver, client):
    control, aeron_dir, _, proc = aeron_archive
    ac = connect(client, control)
    assert ac.archive_id == 777
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    rid, positions = record(ac, client, channel, 1001, 2000, source="remote")
    end = positions[-1]
    (d,) = ac.list_recordings_for_uri("127.0.0.1", 1001)
    assert (d.recording_id, d.start_position, d.stop_position) == (rid, 0, end)
    sub = ac.replay(rid, f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}", 2002)
    assert receive(sub, 2000) == [message(i) for i in range(2000)]
    ac.close()
    proc.close(grace_s=5)

    # The directory Aeron's archive wrote, opened by a sulis archive.
    with sulis.Archive(aeron_dir, driver_dir=driver.dir) as archive, sulis.ArchiveClient(client) as sac:
        (again,) = sac.list_recordings()
        assert (again.recording_id, again.stop_position, again.stream_id) == (rid, end, 1001)
        assert receive(sac.replay(rid, "aeron:ipc", 2004), 2000) == [message(i) for i in range(2000)]
        assert archive.errors() == []


# -- response channels (control-mode=response) -----------------------------------------


@pytest.mark.parametrize("media", ["udp", "ipc"])
def test_aeron_archive_client_over_response_channels_on_a_sulis_archive(current, harness, media):
    """Aeron's ``AeronArchive`` with a response control channel and a response replay channel: over UDP on
    an Aeron Java driver of its own (it names only the archive's ports), over IPC on the archive's sulis
    driver. ``replay`` and ``startReplay`` onto its own subscription (ArchivePeer's ``response`` role)."""
    base = harness.make_dir("archive")
    control = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    with sulis.MediaDriver(dir=os.path.join(base, "driver"), threading_mode="shared") as driver, \
            sulis.Archive(os.path.join(base, "archive"), driver_dir=driver.dir, control_channel=control) as archive, \
            sulis.Client(dir=driver.dir) as client, sulis.ArchiveClient(client) as ac:
        rid, _ = record(ac, client, "aeron:ipc?alias=rsp", 1001, 1000)
        if media == "udp":
            _, aeron_dir = harness.start_driver("aeron", current)
            args = [f"control={control}",
                    f"response=aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}",
                    f"replay_channel=aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}"]
        else:
            aeron_dir = driver.dir
            args = ["control=aeron:ipc", "response=aeron:ipc?control-mode=response",
                    "replay_channel=aeron:ipc?control-mode=response"]
        cp = peers.aeron_java.classpath(current, peers.aeron_java.SOURCE.with_name("ArchivePeer.java"))
        cmd = peers.aeron_java.command(current, {"aeron.dir": aeron_dir}, "ArchivePeer", [
            "response", *args, f"recording_id={rid}", "count=1000", "replay_stream=2002"], cp)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res == {"archive_id": archive.archive_id, "replayed": 1000, "started": 1000, "errors": []}, res
        assert archive.errors() == []


def test_sulis_archive_client_over_response_channels_on_an_aeron_archive(aeron_archive, driver, client):
    """``sulis.ArchiveClient`` with a response control channel against Aeron's ArchivingMediaDriver (which
    needs no setting for it: the client names its port): connect, record, ``replay`` and ``start_replay``
    onto a subscription of the client's own over a response replay channel."""
    control = aeron_archive.control
    response = f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}"
    deadline = time.monotonic() + 30
    while True:  # the JVM may still be starting
        try:
            ac = sulis.ArchiveClient(client, control_request_channel=control, control_response_channel=response,
                                     message_timeout=3.0)
            break
        except sulis.ArchiveError:
            if time.monotonic() > deadline:
                raise
    with ac:
        assert ac.archive_id == 777
        rid, _ = record(ac, client, f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}", 1001, 1000, source="remote")
        replay_channel = f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}"
        sub = ac.replay(rid, replay_channel, 2002)
        assert receive(sub, 1000) == [message(i) for i in range(1000)]
        sub.close()
        sub = client.add_subscription(replay_channel, 2003)
        replay_id = ac.start_replay(rid, replay_channel, 2003, position=0, subscription=sub)
        assert sub.images[0].session_id & 0xFFFF_FFFF == replay_id & 0xFFFF_FFFF
        assert receive(sub, 1000) == [message(i) for i in range(1000)]


# -- replication ----------------------------------------------------------------


def kinds(signals) -> list[RecordingSignal]:
    """The kinds of replication signals in order, but STOP: the copy's recording stops as the
    replication ends, its STOP usually after REPLICATE_END (as Aeron's), not always."""
    return [s.signal for s in signals if s.signal != RecordingSignal.STOP]


def stop_of(signals) -> int:
    """The position of the one STOP signal."""
    (stop,) = [s.position for s in signals if s.signal == RecordingSignal.STOP]
    return stop


def of_kind(signals, kind: RecordingSignal):
    (s,) = [s for s in signals if s.signal == kind]
    return s


#: What a copy keeps of its source's descriptor.
STREAM_FIELDS = ("start_position", "initial_term_id", "term_buffer_length", "mtu_length", "session_id", "stream_id",
                 "stripped_channel", "original_channel", "source_identity")


def stream_of(d) -> dict:
    """The STREAM_FIELDS of a descriptor, a sulis RecordingDescriptor or ArchivePeer's JSON one."""
    return {f: d[f] if isinstance(d, dict) else getattr(d, f) for f in STREAM_FIELDS}


def same_stream(a, b) -> bool:
    return stream_of(a) == stream_of(b) and a.segment_file_length == b.segment_file_length


def test_a_sulis_archive_replicates_recordings_of_an_aeron_archive(aeron_archive, harness, driver, client):
    """sulis is the destination: it connects to Aeron's archive as a client, lists the recording and has
    Aeron replay it to its replication channel (port 0: a port of its own choosing) with session-id
    filtering. A stopped recording whole (REPLICATE, EXTEND, SYNC at its stop, REPLICATE_END); up to a
    stop position (no SYNC), then continued into that copy; a live one followed until Aeron stops it."""
    ac = connect(client, aeron_archive.control)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    rid, positions = record(ac, client, channel, 1001, 2000, source="remote")
    source = ac.list_recording(rid)
    end = positions[-1]
    with sulis.Archive(harness.make_dir("sulis-dst"), driver_dir=driver.dir,
                       replication_channel="aeron:udp?endpoint=localhost:0", connect_timeout=SOURCE_ANSWERS_S) as dst, \
            sulis.ArchiveClient(client) as sac:
        whole = sac.replicate(rid, aeron_archive.control)
        signals = replication_signals(sac, whole)
        assert kinds(signals) == [RecordingSignal.REPLICATE, RecordingSignal.EXTEND, RecordingSignal.SYNC,
                                  RecordingSignal.REPLICATE_END], signals
        copy_id = signals[0].recording_id
        assert signals[0].position == 0 and of_kind(signals, RecordingSignal.SYNC).position == end
        assert stop_of(signals) == end
        copy = sac.list_recording(copy_id)
        assert same_stream(copy, source) and copy.stop_position == end, (copy, source)
        assert receive(sac.replay(copy_id, "aeron:ipc", 3001), 2000) == [message(i) for i in range(2000)]

        # Over response channels: Aeron's archive answers and replays over connections sulis's driver
        # opened (a replay token asked for first).
        over_responses = replication_signals(sac, sac.replicate(
            rid, aeron_archive.control,
            replication_channel=f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}",
            src_response_channel=f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}"))
        assert kinds(over_responses) == [RecordingSignal.REPLICATE, RecordingSignal.EXTEND, RecordingSignal.SYNC,
                                         RecordingSignal.REPLICATE_END], over_responses
        rsp_copy = over_responses[0].recording_id
        assert sac.list_recording(rsp_copy).stop_position == end
        assert receive(sac.replay(rsp_copy, "aeron:ipc", 3004), 2000) == [message(i) for i in range(2000)]

        # Up to a stop position (a message boundary), then the rest into the same copy.
        half = positions[999]
        first = replication_signals(sac, sac.replicate(rid, aeron_archive.control, stop_position=half))
        assert kinds(first) == [RecordingSignal.REPLICATE, RecordingSignal.EXTEND, RecordingSignal.REPLICATE_END], first
        part_id = first[0].recording_id
        assert stop_of(first) == half and sac.list_recording(part_id).stop_position == half
        assert receive(sac.replay(part_id, "aeron:ipc", 3002), 1000) == [message(i) for i in range(1000)]
        rest = replication_signals(sac, sac.replicate(rid, aeron_archive.control, dst_recording_id=part_id))
        assert kinds(rest) == [RecordingSignal.EXTEND, RecordingSignal.SYNC, RecordingSignal.REPLICATE_END], rest
        assert all(s.recording_id == part_id for s in rest) and rest[0].position == half
        assert of_kind(rest, RecordingSignal.SYNC).position == end and stop_of(rest) == end
        assert receive(sac.replay(part_id, "aeron:ipc", 3003), 2000) == [message(i) for i in range(2000)]

        # A live recording: followed while Aeron records, ended when Aeron stops it.
        live_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
        live_id, live_positions, pub = record(ac, client, live_channel, 1002, 500, source="remote", stop=False)
        following = sac.replicate(live_id, aeron_archive.control)
        live_copy = sac.await_signal(RecordingSignal.REPLICATE).recording_id
        sac.await_signal(RecordingSignal.EXTEND, live_copy)
        live_end = publish(pub, 500, 500)[-1]
        await_position(sac, live_copy, live_end)
        # While it is live: a copy up to a stop position (no SYNC), and one stopped by request, whose
        # replay on Aeron's archive ends (StopReplayRequest) while the first copy's goes on.
        bounded = replication_signals(sac, sac.replicate(live_id, aeron_archive.control,
                                                         stop_position=live_positions[199]))
        assert kinds(bounded) == [RecordingSignal.REPLICATE, RecordingSignal.EXTEND,
                                  RecordingSignal.REPLICATE_END], bounded
        assert stop_of(bounded) == live_positions[199]
        assert receive(sac.replay(bounded[0].recording_id, "aeron:ipc", 3005), 200) == [message(i) for i in range(200)]
        stopped = sac.replicate(live_id, aeron_archive.control)
        stopped_copy = sac.await_signal(RecordingSignal.REPLICATE).recording_id
        sac.await_signal(RecordingSignal.EXTEND, stopped_copy)
        await_position(sac, stopped_copy, live_end)
        assert replay_sessions(aeron_archive.driver_dir) == 2
        sac.stop_replication(stopped)
        assert sac.await_signal(RecordingSignal.STOP, stopped_copy).position == live_end
        sac.await_signal(RecordingSignal.REPLICATE_END, stopped_copy)
        await_until(lambda: replay_sessions(aeron_archive.driver_dir) == 1, what="Aeron's replay to end")
        ac.stop_recording(live_channel, 1002)
        assert ac.await_signal(RecordingSignal.STOP, live_id).position == live_end
        pub.close()
        tail = replication_signals(sac, following)
        assert kinds(tail) == [RecordingSignal.REPLICATE_END] and stop_of(tail) == live_end, tail
        assert same_stream(sac.list_recording(live_copy), ac.list_recording(live_id))
        assert receive(sac.replay(live_copy, "aeron:ipc", 3004), 1000) == [message(i) for i in range(1000)]

        assert sac.poll_errors() == [] and dst.errors() == []
    ac.close()


def aeron_replicate(current, harness, aeron_dir: str, src_control: str, src_recording: int, count: int,
                    **params) -> peers.ChildProcess:
    """ArchivePeer's replicate role: Aeron's AeronArchive, a client of the driver in ``aeron_dir``, asks
    the archive there (local control channel aeron:ipc) to copy a recording; ``params``: more options."""
    cp = peers.aeron_java.classpath(current, peers.aeron_java.SOURCE.with_name("ArchivePeer.java"))
    args = {"control": "aeron:ipc", "response": "aeron:ipc", "src_control": src_control,
            "src_recording": src_recording, "count": count, "replay_channel": "aeron:ipc",
            "replay_stream": 4000 + len(harness.procs), "timeout_s": 60, **params}
    # AeronArchive's own wait for each answer (its connect too): 10 s by default, which a CI run with busy CPUs
    # outlasted at AWAIT_PUBLICATION_CONNECTED.
    props = {"aeron.dir": aeron_dir, "aeron.archive.message.timeout": "60s"}
    cmd = peers.aeron_java.command(current, props, "ArchivePeer",
                                   ["replicate", *(f"{k}={v}" for k, v in args.items())], cp)
    return harness.start("aeron-replicate", cmd)


def replicated_by_aeron(harness, aeron_archive, peer) -> dict:
    """ArchivePeer's result, with "kinds": the names of the replication's signals in order, but STOP
    (the copy's recording stops as the replication ends; ArchivePeer stops listening at REPLICATE_END)."""
    res = harness.result(peer, 120, watch=[aeron_archive.proc])
    assert res["errors"] == [], res
    res["kinds"] = [s["signal"] for s in res["signals"]
                    if s["correlation_id"] == res["replication_id"] and s["signal"] != "STOP"]
    return res


def test_an_aeron_archive_replicates_recordings_of_a_sulis_archive(current, aeron_archive, harness, driver, client):
    """Aeron is the destination: Aeron's archive connects to the sulis archive's UDP control channel
    (its response channel: its replication channel, port 0 resolved), lists the recording and asks for
    a replay to its replication channel with session-id; ArchivePeer gathers the signals with
    pollForRecordingSignals and replays the copy from Aeron's archive. A stopped recording whole, up to
    a stop position then continued, a live one followed until sulis stops it."""
    src_control = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    with sulis.Archive(harness.make_dir("sulis-src"), driver_dir=driver.dir, control_channel=src_control) as src, \
            sulis.ArchiveClient(client) as ac:
        rid, positions = record(ac, client, "aeron:ipc?term-length=256k", 1001, 2000)
        end = positions[-1]
        source = ac.list_recording(rid)

        # Whole, with Aeron's defaults; then with a session id of its choosing for the replay, a response
        # channel of port 0 for its requests to sulis, a file I/O limit; then tagged (Aeron's destination
        # records through a multi-destination subscription then).
        # And over response channels: Aeron's destination asks sulis for a replay token and names only
        # ports of the sulis side.
        responses = {"replication_channel": f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}",
                     "src_response": f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}"}
        for options in ({}, {"session_id": 4242, "src_response": "aeron:udp?endpoint=localhost:0",
                             "file_io_max": 4096}, {"channel_tag": 5, "subscription_tag": 6}, responses):
            whole = replicated_by_aeron(harness, aeron_archive, aeron_replicate(
                current, harness, aeron_archive.driver_dir, src_control, rid, 2000, **options))
            assert whole["kinds"] == ["REPLICATE", "EXTEND", "SYNC", "REPLICATE_END"], whole
            sync = next(s for s in whole["signals"] if s["signal"] == "SYNC")
            assert sync["position"] == end and whole["descriptor"]["stop_position"] == end, (options, whole)
            # Aeron's catalog takes the session id of the image that extends a recording: the replay's.
            want = {**stream_of(source), "session_id": options.get("session_id", source.session_id)}
            if options is responses:
                # A response replay channel names no session id (Aeron's ReplicationSession puts none on
                # it): the replay, and so the copy, has a session of the source driver's choosing.
                want["session_id"] = whole["descriptor"]["session_id"]
            assert stream_of(whole["descriptor"]) == want, (options, whole["descriptor"], source)
            assert whole["replayed"] == 2000, (options, whole)

        half = positions[999]
        part = replicated_by_aeron(harness, aeron_archive, aeron_replicate(
            current, harness, aeron_archive.driver_dir, src_control, rid, 1000, stop=half))
        assert "SYNC" not in part["kinds"] and part["descriptor"]["stop_position"] == half, part
        assert part["replayed"] == 1000
        part_id = part["descriptor"]["recording_id"]
        rest = replicated_by_aeron(harness, aeron_archive, aeron_replicate(
            current, harness, aeron_archive.driver_dir, src_control, rid, 2000, dst_recording=part_id))
        assert "REPLICATE" not in rest["kinds"] and "SYNC" in rest["kinds"], rest
        assert (rest["descriptor"]["recording_id"], rest["descriptor"]["stop_position"]) == (part_id, end), rest
        assert rest["replayed"] == 2000

        # A live recording: Aeron follows it until the sulis archive stops recording.
        live_id, live_positions, pub = record(ac, client, "aeron:ipc?term-length=256k", 1002, 500, stop=False)
        peer = aeron_replicate(current, harness, aeron_archive.driver_dir, src_control, live_id, 1000)
        live_end = publish(pub, 500, 500)[-1]
        aeron = connect(client, aeron_archive.control)

        def copy_at_end() -> bool:
            assert peer.proc.poll() is None, harness.describe()
            copies = [d for d in aeron.list_recordings() if d.stream_id == 1002]
            return bool(copies) and aeron.get_recording_position(copies[0].recording_id) == live_end

        await_until(copy_at_end, timeout=30, what="Aeron's copy of the live recording to catch up")
        aeron.close()
        # While it is live: a copy up to a stop position (no SYNC), and one Aeron stops by request
        # (its StopReplayRequest ends the sulis replay) while the first goes on. Aeron's archive records
        # one stream once per channel: these replays need session ids of their own.
        bounded = replicated_by_aeron(harness, aeron_archive, aeron_replicate(
            current, harness, aeron_archive.driver_dir, src_control, live_id, 200, stop=live_positions[199],
            session_id=4243))
        assert "SYNC" not in bounded["kinds"] and bounded["descriptor"]["stop_position"] == live_positions[199]
        assert bounded["replayed"] == 200
        await_until(lambda: replay_sessions(driver.dir) == 1, what="the bounded replay to end")
        stopped = replicated_by_aeron(harness, aeron_archive, aeron_replicate(
            current, harness, aeron_archive.driver_dir, src_control, live_id, 0, stop_after_ms=300, session_id=4244))
        assert stopped["kinds"][:2] == ["REPLICATE", "EXTEND"] and "SYNC" not in stopped["kinds"], stopped
        await_until(lambda: replay_sessions(driver.dir) == 1, what="the stopped replication's replay to end")
        ac.stop_recording("aeron:ipc?term-length=256k", 1002)
        assert ac.await_signal(RecordingSignal.STOP, live_id).position == live_end
        pub.close()
        live = replicated_by_aeron(harness, aeron_archive, peer)
        assert "SYNC" not in live["kinds"] and live["descriptor"]["stop_position"] == live_end, live
        assert live["replayed"] == 1000
        assert ac.poll_errors() == [] and src.errors() == []


def test_aeron_archive_client_has_a_sulis_archive_replicate_from_an_aeron_archive(
        current, aeron_archive, harness, driver, client):
    """Aeron's own client drives the sulis destination (its ReplicateRequest2 with every option, the
    signals as its RecordingSignalConsumer decodes them); the source is Aeron's archive. Options:
    none; a replay session id, a source response channel of port 0 (as Aeron's default
    replication channel) and a file I/O limit; channel and subscription tags."""
    ac = connect(client, aeron_archive.control)
    rid, positions = record(ac, client, f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}", 1001, 2000,
                            source="remote")
    source = ac.list_recording(rid)
    ac.close()
    with sulis.Archive(harness.make_dir("sulis-dst"), driver_dir=driver.dir,
                       replication_channel="aeron:udp?endpoint=localhost:0", connect_timeout=SOURCE_ANSWERS_S) as dst:
        # And over response channels: the sulis destination asks Aeron's archive for a replay token and
        # names only ports of Aeron's side.
        responses = {"replication_channel": f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}",
                     "src_response": f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}"}
        for options in ({}, {"session_id": 4242, "src_response": "aeron:udp?endpoint=localhost:0",
                             "file_io_max": 4096}, {"channel_tag": 5, "subscription_tag": 6}, responses):
            res = replicated_by_aeron(harness, aeron_archive, aeron_replicate(
                current, harness, driver.dir, aeron_archive.control, rid, 2000, **options))
            # The order of Aeron's destination (test above), as Aeron's client sees it.
            assert res["kinds"] == ["REPLICATE", "EXTEND", "SYNC", "REPLICATE_END"], (options, res)
            assert next(s for s in res["signals"] if s["signal"] == "SYNC")["position"] == positions[-1], res
            # Both catalogs take the session id of the image that extends a recording: the replay's.
            want = {**stream_of(source), "session_id": options.get("session_id", source.session_id)}
            if options is responses:
                # A response replay channel names no session id (Aeron's ReplicationSession puts none on
                # it): the replay, and so the copy, has a session of the source driver's choosing.
                want["session_id"] = res["descriptor"]["session_id"]
            assert stream_of(res["descriptor"]) == want, (options, res["descriptor"], source)
            assert res["descriptor"]["stop_position"] == positions[-1] and res["replayed"] == 2000, res
        assert dst.errors() == []


def replay_sessions(driver_dir: str) -> int:
    """The value of the archive's `Archive Replay Sessions` counter (type 112) in the driver there."""
    (n,) = [c["value"] for c in sulis.CountersReader(driver_dir).counters() if c["type_id"] == 112]
    return n


class JavaPublisher:
    """ArchivePeer's publish role on the driver in ``aeron_dir``: an exclusive publication of stream.py's
    messages (multi-destination with ``control-mode=manual``: it sends to each of ``destinations``)."""

    def __init__(self, current, harness, aeron_dir: str, channel: str, stream_id: int, destinations=()) -> None:
        cp = peers.aeron_java.classpath(current, peers.aeron_java.SOURCE.with_name("ArchivePeer.java"))
        cmd = peers.aeron_java.command(current, {"aeron.dir": aeron_dir}, "ArchivePeer", [
            "publish", f"channel={channel}", f"stream={stream_id}", f"destinations={','.join(destinations)}"], cp)
        self.proc = peers.ChildProcess(cmd, "aeron-publish", stdin="pipe", own_session=True)
        harness.procs.append(self.proc)
        self.session_id = self._answer()["session_id"]

    def _answer(self) -> dict:
        line = self.proc.next_line(60)
        assert line and line.startswith("{") and "error" not in line, f"{line}\n{self.proc.stderr_tail()}"
        return json.loads(line)

    def publish(self, count: int) -> int:
        """Offers the next ``count`` messages; the publication's position once they are in."""
        self.proc.proc.stdin.write(f"publish {count}\n")
        self.proc.proc.stdin.flush()
        return self._answer()["position"]

    def close(self) -> None:
        self.proc.close(grace_s=10)


def test_an_aeron_archive_live_merges_a_recording_of_a_sulis_archive(current, aeron_archive, harness, driver, client):
    """Aeron's replication with a live destination, sulis the source: an Aeron publisher sends to the sulis
    archive's recording endpoint and (manual multi-destination) to the live endpoint; Aeron's archive
    replays the sulis recording (its replay channel with linger=0, eos=false and the session id), asks
    sulis for the recording position while it catches up, adds the live endpoint and drops the replay:
    MERGE, then REPLICATE_END, and its copy goes on from the live stream alone. Both recordings end
    where the publisher stopped and replay the same messages."""
    src_control = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    recorded_at = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    live = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    with sulis.Archive(harness.make_dir("sulis-src"), driver_dir=driver.dir, control_channel=src_control) as src, \
            sulis.ArchiveClient(client) as ac:
        ac.start_recording(recorded_at, 1003, source="remote")
        publisher = JavaPublisher(current, harness, aeron_archive.driver_dir,
                                  "aeron:udp?control-mode=manual|term-length=256k", 1003, [recorded_at, live])
        rid = ac.await_signal(RecordingSignal.START).recording_id
        await_position(ac, rid, publisher.publish(500))
        peer = aeron_replicate(current, harness, aeron_archive.driver_dir, src_control, rid, 1000,
                               live_destination=live)
        publisher.publish(500)  # while Aeron catches up
        merged = replicated_by_aeron(harness, aeron_archive, peer)
        assert merged["kinds"] == ["REPLICATE", "EXTEND", "MERGE", "REPLICATE_END"], merged
        copy = merged["descriptor"]
        assert copy["stop_position"] == -1 and copy["session_id"] == publisher.session_id, merged
        assert stream_of(copy) == stream_of(ac.list_recording(rid)), (copy, ac.list_recording(rid))
        assert merged["replayed"] == 1000
        # Aeron stopped the replay it no longer needs (StopReplayRequest): no replay session is left.
        deadline = time.monotonic() + 10
        while replay_sessions(driver.dir) != 0:
            assert time.monotonic() < deadline, "the replay for the merge did not end"
            time.sleep(0.01)

        # The copy follows the live stream alone now; both stop where the publisher stopped.
        aeron = connect(client, aeron_archive.control)
        end = publisher.publish(500)
        await_position(aeron, copy["recording_id"], end)
        await_position(ac, rid, end)
        publisher.close()
        assert ac.await_signal(RecordingSignal.STOP, rid).position == end
        deadline = time.monotonic() + 30
        while aeron.get_stop_position(copy["recording_id"]) != end:
            assert time.monotonic() < deadline, aeron.list_recording(copy["recording_id"])
            time.sleep(0.01)
        want = [message(i) for i in range(1500)]
        assert receive(aeron.replay(copy["recording_id"], f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}",
                                    2005), 1500) == want
        assert receive(ac.replay(rid, "aeron:ipc", 2006), 1500) == want
        aeron.close()
        assert ac.poll_errors() == [] and src.errors() == []


def test_a_sulis_archive_live_merges_a_recording_of_an_aeron_archive(current, aeron_archive, harness, driver, client):
    """sulis's replication with a live destination, Aeron the source: the Aeron publisher sends to the
    endpoint Aeron's archive records and (manual multi-destination) to a UDP endpoint the sulis archive
    subscribes to once its copy, replayed by Aeron, has nearly caught up (its live position asked of
    Aeron's archive). MERGE, REPLICATE_END, Aeron's replay stopped; the copy follows the live stream
    alone until the publisher closes, and replays all."""
    recorded_at = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    live = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    ac = connect(client, aeron_archive.control)
    with sulis.Archive(harness.make_dir("sulis-dst"), driver_dir=driver.dir,
                       replication_channel="aeron:udp?endpoint=localhost:0", connect_timeout=SOURCE_ANSWERS_S) as dst, \
            sulis.ArchiveClient(client) as sac:
        ac.start_recording(recorded_at, 1003, source="remote")
        publisher = JavaPublisher(current, harness, aeron_archive.driver_dir,
                                  "aeron:udp?control-mode=manual|term-length=256k", 1003, [recorded_at, live])
        rid = ac.await_signal(RecordingSignal.START).recording_id
        await_position(ac, rid, publisher.publish(500))
        replication = sac.replicate(rid, aeron_archive.control, live_destination=live)
        publisher.publish(500)  # while sulis catches up
        merged = replication_signals(sac, replication, until=[RecordingSignal.REPLICATE_END])
        # A replication that ends at once failed: its errors say why (a CI run once saw REPLICATE_END alone).
        assert kinds(merged) == [RecordingSignal.REPLICATE, RecordingSignal.EXTEND, RecordingSignal.MERGE,
                                 RecordingSignal.REPLICATE_END], (merged, sac.poll_errors(), dst.errors())
        copy_id = merged[0].recording_id
        assert same_stream(sac.list_recording(copy_id), ac.list_recording(rid))
        await_until(lambda: replay_sessions(aeron_archive.driver_dir) == 0, what="Aeron's replay to end")

        end = publisher.publish(500)
        await_position(sac, copy_id, end)
        publisher.close()
        assert sac.await_signal(RecordingSignal.STOP, copy_id).position == end
        assert ac.await_signal(RecordingSignal.STOP, rid).position == end
        assert receive(sac.replay(copy_id, "aeron:ipc", 3006), 1500) == [message(i) for i in range(1500)]
        assert sac.poll_errors() == [] and dst.errors() == []
    ac.close()


# -- checksums --------------------------------------------------------------------

CRC32C = "io.aeron.archive.checksum.Crc32c"


def flip_a_payload_byte(archive_dir: str) -> None:
    """Changes one payload byte of the second frame of the only segment file (headers untouched)."""
    (seg,) = [f for f in os.listdir(archive_dir) if f.endswith(".rec")]
    with open(os.path.join(archive_dir, seg), "r+b") as f:
        (length,) = struct.unpack("<i", f.read(4))
        at = ((length + 31) & ~31) + 40
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def test_checksums_written_by_either_archive_are_checked_by_the_other(current, harness, driver, client):
    from conftest import run_cli

    # sulis records with CRC-32C; Aeron's ArchiveTool checks frames and catalog entries.
    sulis_dir = harness.make_dir("sulis-checksum")
    with sulis.Archive(sulis_dir, driver_dir=driver.dir, record_checksum=CRC32C) as archive, \
            sulis.ArchiveClient(client) as ac:
        rid, _ = record(ac, client, "aeron:ipc", 1001, 500)
        assert archive.errors() == []

    def aeron_verify() -> subprocess.CompletedProcess:
        return subprocess.run(peers.aeron_java.command(current, {}, "io.aeron.archive.ArchiveTool",
                                                       [sulis_dir, "verify", "-checksum", CRC32C]),
                              capture_output=True, text=True, timeout=120)
    ok = aeron_verify()
    assert ok.returncode == 0 and f"(recordingId={rid}) OK" in ok.stdout, ok.stdout[-2000:] + ok.stderr[-2000:]
    flip_a_payload_byte(sulis_dir)
    bad = aeron_verify()
    assert bad.returncode != 0 and f"(recordingId={rid}" in bad.stdout and "checksum failed" in bad.stdout, \
        bad.stdout[-2000:]

    # Aeron records with CRC-32C; sulis's tool and a checked sulis replay accept it.
    control, aeron_dir, _, proc = start_aeron_archive(current, harness,
                                                      **{"aeron.archive.record.checksum": CRC32C})
    ac = connect(client, control)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    rid, positions = record(ac, client, channel, 1002, 500, source="remote")
    ac.close()
    proc.close(grace_s=5)
    checked = run_cli("archive-tool", aeron_dir, "verify", "--checksum", "crc32c")
    assert checked.returncode == 0 and f"recording {rid}: OK" in checked.stdout, checked.stdout + checked.stderr
    with sulis.Archive(aeron_dir, driver_dir=driver.dir, replay_checksum="crc32c") as archive, \
            sulis.ArchiveClient(client) as sac:
        assert receive(sac.replay(rid, "aeron:ipc", 2090), 500) == [message(i) for i in range(500)]
        assert sac.poll_errors() == [] and archive.errors() == []
    flip_a_payload_byte(aeron_dir)
    found = run_cli("archive-tool", aeron_dir, "verify", "--checksum", "crc32c")
    assert found.returncode == 1 and "crc32c checksum mismatch" in found.stdout, found.stdout


def test_recording_events_of_an_aeron_archive_read_by_sulis(current, harness, client):
    """Aeron's archive publishes its recording events on a unicast UDP channel; sulis's
    RecordingEvents decodes them (the same codecs the sulis archive publishes with)."""
    from sulis.archive import RecordingEvents

    events_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    with RecordingEvents(client, events_channel, 30) as events:
        control, _, _, proc = start_aeron_archive(current, harness, **{
            "aeron.archive.recording.events.enabled": "true",
            "aeron.archive.recording.events.channel": events_channel})
        ac = connect(client, control)
        channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|alias=ev"
        rid, positions = record(ac, client, channel, 1003, 300, source="remote")
        seen: list = []
        await_until(lambda: seen.extend(events.poll()) or any(e.kind == "stopped" for e in seen),
                    what="Aeron's stopped event", timeout=30)
        ac.close()
        proc.close(grace_s=5)
    started, *progress, stopped = [e for e in seen if e.recording_id == rid]
    assert (started.kind, started.stream_id, started.start_position) == ("started", 1003, 0)
    assert "alias=ev" in started.channel and started.source_identity.startswith("127.0.0.1:")
    assert all(e.kind == "progress" for e in progress)
    assert (stopped.kind, stopped.position) == ("stopped", positions[-1])
