"""The archive against Aeron Java's (the current aeron-all; 1.15.1's archive protocol is pre-1.16):

* Aeron's own ``AeronArchive`` client (bench/peers/ArchivePeer.java) records, finds its recording by
  the rec-pos counter, stops, lists and replays on a sulis archive;
* ``sulis.ArchiveClient`` does the same over UDP on Aeron's ``ArchivingMediaDriver``;
* a sulis archive opens the directory Aeron's archive wrote (catalog and segments) and replays it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import peers  # noqa: E402
import pytest

import sulis
from conftest import free_udp_port
from sulis.archive import RecordingSignal

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]


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
        assert res["archive_id"] == archive.archive_id
        d = res["descriptor"]
        assert d["recording_id"] == res["recording_id"] and d["stop_position"] == res["stop_position"]
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


@pytest.fixture
def aeron_archive(current, harness):
    """Aeron's ArchivingMediaDriver (a driver and an archive, shared threads) with a UDP control
    channel; yields (control channel, its archive directory, the process)."""
    base = harness.make_dir("aeron-archive")
    control = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    props = {**peers.aeron_java.dir_props(os.path.join(base, "aeron")), "aeron.threading.mode": "SHARED",
             "aeron.archive.threading.mode": "SHARED", "aeron.archive.dir": os.path.join(base, "archive"),
             "aeron.archive.control.channel": control, "aeron.archive.id": "777",
             "aeron.archive.replication.channel": "aeron:udp?endpoint=127.0.0.1:0",
             "aeron.archive.segment.file.length": str(1 << 20)}
    proc = harness.start("aeron-archive", peers.aeron_java.command(current, props,
                                                                  "io.aeron.archive.ArchivingMediaDriver"))
    yield control, os.path.join(base, "archive"), proc


def connect(client, control: str, deadline_s: float = 30.0) -> sulis.ArchiveClient:
    """An ArchiveClient over UDP, retried while the JVM starts."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return sulis.ArchiveClient(client, control_request_channel=control, message_timeout=2.0,
                                       control_response_channel=f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}")
        except sulis.ArchiveError:
            if time.monotonic() > deadline:
                raise


def test_sulis_archive_client_on_an_aeron_archive_then_a_sulis_archive_opens_its_files(
        aeron_archive, harness, driver, client):
    control, aeron_dir, proc = aeron_archive
    ac = connect(client, control)
    assert ac.archive_id == 777
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    ac.start_recording(channel, 1001, source="remote")
    pub = client.add_publication(channel, 1001)
    rid = ac.await_signal(RecordingSignal.START).recording_id
    for i in range(2000):
        while pub.offer(message(i)) < 0:
            pass
    end = pub.position
    deadline = time.monotonic() + 30
    while ac.get_recording_position(rid) != end:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    ac.stop_recording(channel, 1001)
    assert ac.await_signal(RecordingSignal.STOP, rid).position == end
    (d,) = ac.list_recordings_for_uri("127.0.0.1", 1001)
    assert (d.recording_id, d.start_position, d.stop_position) == (rid, 0, end)
    sub = ac.replay(rid, f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}", 2002)
    assert receive(sub, 2000) == [message(i) for i in range(2000)]
    ac.close()
    pub.close()
    proc.close(grace_s=5)

    # The directory Aeron's archive wrote, opened by a sulis archive.
    with sulis.Archive(aeron_dir, driver_dir=driver.dir) as archive, sulis.ArchiveClient(client) as sac:
        (again,) = sac.list_recordings()
        assert (again.recording_id, again.stop_position, again.stream_id) == (rid, end, 1001)
        assert receive(sac.replay(rid, "aeron:ipc", 2004), 2000) == [message(i) for i in range(2000)]
        assert archive.errors() == []
