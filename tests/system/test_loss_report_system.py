"""The loss report (``loss-report.dat``, ``sulis.read_loss_report``, ``sulis loss``) and the
system counters that describe the driver itself (duty cycles, mapped bytes, version)."""

from __future__ import annotations

import json
import os
import struct

import pytest
from test_udp_system import UDP_OPTIONS, free_port, run_stream, stream_of, udp_pair

import sulis
from conftest import await_until, make_dir
from conftest import run_cli as cli

NAKS_SENT = 5
CONDUCTOR_MAX_CYCLE, SENDER_MAX_CYCLE, RECEIVER_MAX_CYCLE = 26, 28, 30
SULIS_VERSION = 34
BYTES_MAPPED = 35


def test_every_image_that_lost_data_has_one_entry_with_its_gaps(make_driver, make_client):
    port = free_port()
    sub_driver, pub_driver, sub, pub = udp_pair(make_driver, make_client, port=port,
                                                pub_opts={"send_data_loss": "every:10:3"})
    assert sulis.read_loss_report(sub_driver.dir) == [], "nothing lost before traffic"
    run_stream(pub, sub, stream_of(3_000, seed=8), 3_000)
    image = sub.images[0]

    (entry,) = sulis.read_loss_report(sub_driver.dir)
    assert entry["session_id"] == pub.session_id == image.session_id
    assert entry["stream_id"] == 10
    assert entry["channel"] == f"aeron:udp?endpoint=127.0.0.1:{port}"
    assert entry["source"] == image.source_identity
    naks = sulis.CountersReader(sub_driver.dir).value(NAKS_SENT)
    # Each gap is reported once however often it was NAKed; a gap is at least one frame.
    assert 0 < entry["observation_count"] <= naks
    assert entry["total_bytes_lost"] >= 32 * entry["observation_count"]
    assert entry["total_bytes_lost"] <= pub.position
    assert 0 < entry["first_observation_ms"] <= entry["last_observation_ms"]
    # The sender's driver received everything it was sent: nothing to report there.
    assert sulis.read_loss_report(pub_driver.dir) == []

    out = cli("loss", "--dir", sub_driver.dir, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["dir"] == sub_driver.dir
    (shown,) = doc["entries"]
    # The driver's loss is final once the stream is through: the tool shows the same entry.
    assert {k: shown[k] for k in entry} == sulis.read_loss_report(sub_driver.dir)[0]
    assert doc["observations"] == shown["observation_count"]
    assert doc["bytes_lost"] == shown["total_bytes_lost"]

    text = cli("loss", "--dir", sub_driver.dir)
    assert text.returncode == 0, text.stderr
    assert image.source_identity in text.stdout and f"{entry['total_bytes_lost']:,}" in text.stdout


def test_loss_without_loss_and_without_a_driver(make_driver):
    drv = make_driver(**UDP_OPTIONS)
    out = cli("loss", "--dir", drv.dir)
    assert out.returncode == 0 and "No loss observed." in out.stdout, out.stderr
    missing = "/dev/shm/sulis-test-no-driver-here"
    out = cli("loss", "--dir", missing)
    assert out.returncode != 0 and missing in out.stderr


def test_a_corrupt_loss_report_is_an_error_naming_the_entry():
    dir = make_dir()
    try:
        # Aeron's layout: the channel's length and text padded to 4 bytes, then the source.
        entry = (struct.pack("<qqqqii", 1, 100, 1, 2, 7, 10) + struct.pack("<i", 1) + b"c\0\0\0"
                 + struct.pack("<i", 1) + b"s")
        bad = struct.pack("<qqqqii", 1, 100, 1, 2, 7, 10) + struct.pack("<i", 1 << 24)
        with open(os.path.join(dir, "loss-report.dat"), "wb") as f:
            f.write(entry.ljust(64, b"\0") + bad.ljust(64, b"\0") + bytes(896))
        with pytest.raises(ValueError, match=r"offset 64.*channel"):
            sulis.read_loss_report(dir)
    finally:
        import shutil

        shutil.rmtree(dir, ignore_errors=True)


def test_driver_describes_itself_in_its_system_counters(make_driver, make_client):
    sub_driver, pub_driver, sub, pub = udp_pair(make_driver, make_client)
    run_stream(pub, sub, stream_of(500, seed=9), 500)
    for drv in (sub_driver, pub_driver):
        reader = sulis.CountersReader(drv.dir)
        # Duty cycles are timed: the longest so far is a real, positive duration.
        for counter in (CONDUCTOR_MAX_CYCLE, SENDER_MAX_CYCLE, RECEIVER_MAX_CYCLE):
            assert reader.value(counter) > 0, reader.label(counter)
        # The log buffers of the stream are mapped (term 2 MiB, three of them, plus metadata).
        await_until(lambda reader=reader: reader.value(BYTES_MAPPED) >= 3 * 2 * 1024 * 1024,
                    what="mapped bytes counted")
        major, minor, patch = (int(p) for p in sulis.__version__.split(".")[:3])
        assert reader.value(SULIS_VERSION) == major << 16 | minor << 8 | patch
        assert sulis.__version__ in reader.label(SULIS_VERSION)
    # Closing the publication unmaps its log (after its linger): the publisher's count drops.
    reader = sulis.CountersReader(pub_driver.dir)
    pub.close()
    await_until(lambda: reader.value(BYTES_MAPPED) == 0, timeout=20, what="mapped bytes to drop to 0")
