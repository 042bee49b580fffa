"""Failure handling across processes: clients that die or freeze are timed out
and cleaned up, a dead driver is detected by its clients, a directory owned by
a live driver cannot be taken over, and a writer killed between claim and
commit does not block the stream for good."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import pytest

import sulis
from conftest import (
    CLIENT_TIMEOUTS_COUNTER,
    DRIVER_DEFAULTS,
    UNBLOCKED_PUBLICATIONS_COUNTER,
    await_until,
    counter_value,
    make_dir,
)

# The driver requires publication_unblock_timeout > client_liveness_timeout.
SHORT_TIMEOUTS = {"client_liveness_timeout": "500ms", "publication_unblock_timeout": "1s"}


def labels(dir: str) -> list[str]:
    return [c["label"] for c in sulis.CountersReader(dir).counters()]


def child_counters(dir: str, info: dict) -> list[str]:
    """Labels of counters belonging to the ``hold`` child described by ``info``."""
    mine = []
    for label in labels(dir):
        if label == f"client-heartbeat: id={info['client_id']}":
            mine.append(label)
        for reg in (info["registration_id"], info["exclusive_registration_id"]):
            if label.startswith((f"pub-lmt: {reg} ", f"pub-pos (sampled) concurrent: {reg} ",
                                 f"pub-pos (sampled) exclusive: {reg} ")):
                mine.append(label)
        if label.startswith(f"sub-pos: {info['subscription_id']} "):
            mine.append(label)
    return mine


@pytest.mark.driver_options(**SHORT_TIMEOUTS)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_dead_or_frozen_client_is_timed_out_and_its_resources_released(driver, client, spawn, sig):
    stream = 50
    available, unavailable = [], []
    sub = client.add_subscription("aeron:ipc", stream, on_available_image=available.append,
                                  on_unavailable_image=unavailable.append)
    child = spawn("hold", driver.dir, stream, stdin=True)
    info = child.read()
    child_sessions = {info["session_id"], info["exclusive_session_id"]}
    await_until(lambda: {i.session_id for i in sub.images} == child_sessions, what="the child's two images")
    await_until(lambda: len(available) == 2, what="on_available_image callbacks")
    assert {i.session_id for i in available} == child_sessions

    # The child is alive and well: it publishes to us.
    child.send("offer")
    assert child.read()["result"] > 0
    got = []
    await_until(lambda: sub.poll(lambda b, h: got.append(bytes(b)), 10) >= 0 and got == [b"still here"])

    counters_before = child_counters(driver.dir, info)
    assert f"client-heartbeat: id={info['client_id']}" in counters_before
    assert len(counters_before) >= 1 + 4 + 2, counters_before  # heartbeat, 2 x (pub-lmt, pub-pos), sub-pos
    timeouts_before = counter_value(driver.dir, CLIENT_TIMEOUTS_COUNTER)

    child.signal(sig)
    await_until(lambda: counter_value(driver.dir, CLIENT_TIMEOUTS_COUNTER) == timeouts_before + 1, 15,
                "the driver to time the client out")
    await_until(lambda: sub.image_count == 0, 15, "the child's images to go")
    await_until(lambda: len(unavailable) == 2, 15, "on_unavailable_image callbacks")
    assert {i.session_id for i in unavailable} == child_sessions
    for image in unavailable:
        assert image.is_closed
        assert image.is_end_of_stream, "everything published was consumed before the image went"
    await_until(lambda: child_counters(driver.dir, info) == [], 15, "the child's counters to be freed")

    # Our own client was never at risk.
    assert not client.is_closed
    assert counter_value(driver.dir, CLIENT_TIMEOUTS_COUNTER) == timeouts_before + 1
    probe = client.add_exclusive_publication("aeron:ipc", stream)
    await_until(lambda: probe.is_connected)
    assert probe.offer(b"after") > 0

    if sig == signal.SIGSTOP:
        # Thawed, the child learns it was timed out; its client refuses further use.
        child.signal(signal.SIGCONT)

        def child_sees_timeout():
            child.send("status")
            return child.read()["is_closed"]

        await_until(child_sees_timeout, 10, "the thawed child to notice its time-out", interval=0.05)
        child.send("add_publication")
        reply = child.read()
        assert reply["error"] == "ClientTimeoutError", reply
        assert "timed out" in reply["message"]


@pytest.mark.slow
@pytest.mark.driver_options(**SHORT_TIMEOUTS)
def test_healthy_idle_client_survives_a_short_liveness_timeout(driver, client):
    sub = client.add_subscription("aeron:ipc", 51)
    pub = client.add_exclusive_publication("aeron:ipc", 51)
    # Several liveness periods with nothing to do: keep-alives alone keep us in.
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert not client.is_closed
        time.sleep(0.05)
    assert counter_value(driver.dir, CLIENT_TIMEOUTS_COUNTER) == 0
    await_until(lambda: pub.is_connected and sub.image_count == 1)
    assert pub.offer(b"alive") > 0
    assert sub.poll(lambda b, h: None, 10) == 1


@pytest.mark.slow
@pytest.mark.parametrize("first_call", ["offer", "add_publication", "poll"])
def test_client_detects_a_killed_driver(spawn, first_call):
    dir = make_dir()
    options = {k: v for k, v in DRIVER_DEFAULTS.items()}
    child = spawn("driver", dir, json.dumps(options))
    assert child.read()["ready"]
    client = sulis.Client(dir=dir, driver_timeout=1.0)
    try:
        sub = client.add_subscription("aeron:ipc", 60)
        pub = client.add_publication("aeron:ipc", 60)
        await_until(lambda: pub.is_connected)
        assert pub.offer(b"driver alive") > 0
        child.kill()
        killed = time.monotonic()

        calls = {
            "offer": lambda: pub.offer(b"driver dead"),
            "add_publication": lambda: client.add_publication("aeron:ipc", 61),
            "poll": lambda: sub.poll(lambda b, h: None, 10),
        }

        def raises():
            try:
                calls[first_call]()
            except sulis.DriverTimeoutError as e:
                return e
            return None

        err = await_until(raises, 8, "DriverTimeoutError after the driver died")
        assert time.monotonic() - killed < 8
        assert dir in str(err), str(err)
        assert client.is_closed
        # Everything else fails fast now, with the same error.
        for call in calls.values():
            t0 = time.monotonic()
            with pytest.raises(sulis.DriverTimeoutError):
                call()
            assert time.monotonic() - t0 < 0.5
        with pytest.raises(sulis.DriverTimeoutError):
            client.add_subscription("aeron:ipc", 62)
        assert pub.is_closed and not pub.is_connected
        t0 = time.monotonic()
        with pytest.raises(sulis.DriverTimeoutError, match="no live media driver|no media driver"):
            sulis.Client(dir=dir, driver_timeout=1.0)
        assert time.monotonic() - t0 < 5
    finally:
        t0 = time.monotonic()
        client.close()
        assert time.monotonic() - t0 < 5, "closing a client of a dead driver must not hang"
        shutil.rmtree(dir, ignore_errors=True)


def test_a_client_of_a_driver_that_shut_down_is_told_so():
    """A driver closed cleanly zeroes its heartbeat: a client on its directory says the driver shut
    down, not that its last heartbeat was 56 years ago (the epoch)."""
    from conftest import make_dir

    dir = make_dir()
    sulis.MediaDriver(dir=dir, threading_mode="shared").close()
    with pytest.raises(sulis.DriverTimeoutError) as e:
        sulis.Client(dir=dir, driver_timeout=0.5)
    assert str(e.value) == f"no live media driver in {dir}: the driver that made it has shut down", str(e.value)


def test_second_driver_on_a_directory_in_use_is_refused(driver, client):
    sub = client.add_subscription("aeron:ipc", 63)
    pub = client.add_exclusive_publication("aeron:ipc", 63)
    with pytest.raises(sulis.ActiveDriverError) as info:
        sulis.MediaDriver(dir=driver.dir, **DRIVER_DEFAULTS)
    assert driver.dir in str(info.value)
    assert "active media driver" in str(info.value)
    assert isinstance(info.value, sulis.SulisError)
    # The first driver and its clients are untouched.
    assert driver.is_running
    await_until(lambda: pub.is_connected and sub.image_count == 1)
    assert pub.offer(b"still served") > 0
    assert sub.poll(lambda b, h: None, 10) == 1
    assert sulis._native.active_driver(driver.dir) is not None


def test_second_driver_refused_while_another_process_owns_the_directory(spawn):
    dir = make_dir()
    try:
        child = spawn("driver", dir, json.dumps({"threading_mode": "shared", "driver_timeout": "1s"}))
        assert child.read()["ready"]
        with pytest.raises(sulis.ActiveDriverError, match=dir):
            sulis.MediaDriver(dir=dir, **DRIVER_DEFAULTS)
        child.kill()

        # Once the dead driver's heartbeat is older than the new driver's
        # driver timeout, the directory is stale and can be taken over.
        def take_over():
            try:
                return sulis.MediaDriver(dir=dir, driver_timeout="1s", **DRIVER_DEFAULTS)
            except sulis.ActiveDriverError:
                return None

        drv = await_until(take_over, 10, "the stale directory to be reclaimed", interval=0.05)
        try:
            with sulis.Client(dir=dir, driver_timeout=5.0) as c:
                s = c.add_subscription("aeron:ipc", 1)
                p = c.add_exclusive_publication("aeron:ipc", 1)
                await_until(lambda: p.is_connected and s.image_count == 1)
                assert p.offer(b"new driver") > 0
                assert s.poll(lambda b, h: None, 10) == 1
            assert sulis.read_errors(dir) == []
        finally:
            drv.close()
    finally:
        shutil.rmtree(dir, ignore_errors=True)


def test_dir_delete_on_start_takes_over_a_directory_that_seems_active(spawn):
    dir = make_dir()
    try:
        child = spawn("driver", dir, json.dumps({"threading_mode": "shared"}))
        assert child.read()["ready"]
        # A hung driver: its heartbeat is fresh, so the directory seems in use.
        child.signal(signal.SIGSTOP)
        leftover = os.path.join(dir, "publications", "left-behind.logbuffer")
        with open(leftover, "wb") as f:
            f.write(b"x")
        with pytest.raises(sulis.ActiveDriverError, match=dir):
            sulis.MediaDriver(dir=dir, **DRIVER_DEFAULTS)
        drv = sulis.MediaDriver(dir=dir, dir_delete_on_start=True, **DRIVER_DEFAULTS)
        try:
            assert not os.path.exists(leftover), "the directory was emptied"
            assert sulis._native.active_driver(dir) is not None
            child.kill()
            with sulis.Client(dir=dir, driver_timeout=5.0) as c:
                s = c.add_subscription("aeron:ipc", 1)
                p = c.add_exclusive_publication("aeron:ipc", 1)
                await_until(lambda: p.is_connected and s.image_count == 1)
                assert p.offer(b"new driver") > 0
            assert sulis.read_errors(dir) == []
        finally:
            drv.close()
    finally:
        shutil.rmtree(dir, ignore_errors=True)


@pytest.mark.driver_options(**SHORT_TIMEOUTS)
def test_writer_killed_mid_claim_is_unblocked(driver, client, spawn):
    stream = 70
    sub = client.add_subscription("aeron:ipc", stream)
    pub = client.add_publication("aeron:ipc", stream)
    await_until(lambda: pub.is_connected and sub.image_count == 1)
    assert pub.offer(b"before") > 0
    child = spawn("claim", driver.dir, stream, 100)
    info = child.read()
    assert info["session_id"] == pub.session_id, "the child claims in our shared log"
    assert info["position"] == 64 + 160
    after = [f"after-{i}".encode() for i in range(5)]
    for m in after:
        assert pub.offer(m) > 0
    got = []

    def handler(buffer, header):
        got.append(bytes(buffer))

    await_until(lambda: sub.poll(handler, 10) >= 0 and got == [b"before"])
    # The uncommitted claim blocks readers: nothing after it is visible.
    for _ in range(20):
        assert sub.poll(handler, 10) == 0
    assert got == [b"before"]
    unblocked_before = counter_value(driver.dir, UNBLOCKED_PUBLICATIONS_COUNTER)

    child.kill()
    await_until(lambda: sub.poll(handler, 10) >= 0 and len(got) == 1 + len(after), 15,
                "the driver to unblock the log")
    assert got == [b"before"] + after, "the abandoned claim is skipped, nothing else is lost"
    assert counter_value(driver.dir, UNBLOCKED_PUBLICATIONS_COUNTER) == unblocked_before + 1
    # The stream goes on.
    assert pub.offer(b"later") > 0
    await_until(lambda: sub.poll(handler, 10) >= 0 and got[-1] == b"later")
    assert sub.images[0].position == pub.position
    await_until(lambda: counter_value(driver.dir, CLIENT_TIMEOUTS_COUNTER) == 1, 10, "the killed client's time-out")
