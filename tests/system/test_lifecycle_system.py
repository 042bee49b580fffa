"""Closing things: use after close raises ClosedError, context managers close,
image callbacks fire with Image objects, and objects that are dropped or whose
client or driver goes away behave."""

from __future__ import annotations

import gc
import os
import shutil
import sys
import threading
import time

import pytest

import sulis
from conftest import DRIVER_DEFAULTS, await_until, connected_pair, make_dir


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "concurrent"])
def test_publication_use_after_close(client, exclusive):
    sub, pub = connected_pair(client, 110, exclusive=exclusive)
    assert not pub.is_closed
    pub.close()
    assert pub.is_closed
    assert not pub.is_connected
    with pytest.raises(sulis.ClosedError, match="closed"):
        pub.offer(b"x")
    with pytest.raises(sulis.ClosedError):
        pub.try_claim(1)
    pub.close()  # idempotent
    with pytest.raises(sulis.ClosedError):
        with pub:
            pass
    assert issubclass(sulis.ClosedError, sulis.SulisError)


def test_subscription_use_after_close(client):
    sub, pub = connected_pair(client, 111)
    sub.close()
    assert sub.is_closed
    assert not sub.is_connected
    for call in (lambda: sub.poll(lambda b, h: None, 10),
                 lambda: sub.controlled_poll(lambda b, h: sulis.Action.CONTINUE, 10),
                 lambda: sub.poll_batch(10)):
        with pytest.raises(sulis.ClosedError, match="subscription is closed"):
            call()
    sub.close()
    with pytest.raises(sulis.ClosedError):
        with sub:
            pass
    await_until(lambda: not pub.is_connected, what="the publication to notice the subscriber left")


def test_client_use_after_close(make_client):
    client = make_client()
    sub = client.add_subscription("aeron:ipc", 112)
    pub = client.add_publication("aeron:ipc", 112)
    xpub = client.add_exclusive_publication("aeron:ipc", 112)
    client_id = client.client_id
    assert isinstance(client_id, int)
    client.close()
    assert client.is_closed
    for call in (lambda: client.add_publication("aeron:ipc", 112),
                 lambda: client.add_exclusive_publication("aeron:ipc", 112),
                 lambda: client.add_subscription("aeron:ipc", 112),
                 lambda: client.client_id):
        with pytest.raises(sulis.ClosedError, match="client is closed"):
            call()
    # Everything the client made is closed with it.
    for p in (pub, xpub):
        assert p.is_closed
        with pytest.raises(sulis.ClosedError):
            p.offer(b"x")
        with pytest.raises(sulis.ClosedError):
            p.try_claim(4)
    with pytest.raises(sulis.ClosedError):
        sub.poll(lambda b, h: None, 10)
    assert sub.is_closed
    client.close()  # idempotent
    with pytest.raises(sulis.ClosedError):
        with client:
            pass
    assert "closed=true" in repr(client)


def test_closing_a_client_releases_its_resources_in_the_driver(driver, client, make_client):
    other = make_client()
    sub = client.add_subscription("aeron:ipc", 113)
    pub = other.add_exclusive_publication("aeron:ipc", 113)
    await_until(lambda: sub.image_count == 1)
    heartbeat = f"client-heartbeat: id={other.client_id}"
    assert any(c["label"] == heartbeat for c in sulis.CountersReader(driver.dir).counters())
    other.close()
    await_until(lambda: sub.image_count == 0, what="the closed client's publication to go")
    await_until(lambda: all(c["label"] != heartbeat for c in sulis.CountersReader(driver.dir).counters()))
    assert pub.is_closed


def test_context_managers_close(driver):
    with sulis.Client(dir=driver.dir) as client:
        assert not client.is_closed
        with client.add_subscription("aeron:ipc", 114) as sub:
            with client.add_exclusive_publication("aeron:ipc", 114) as xpub, \
                    client.add_publication("aeron:ipc", 114) as pub:
                await_until(lambda: xpub.is_connected and pub.is_connected)
            assert xpub.is_closed and pub.is_closed
            assert not sub.is_closed
        assert sub.is_closed
    assert client.is_closed

    dir = make_dir()
    try:
        with sulis.MediaDriver(dir=dir, **DRIVER_DEFAULTS) as drv:
            assert drv.is_running and drv.dir == dir
        assert not drv.is_running
        drv.close()  # idempotent
        with pytest.raises(sulis.ClosedError):
            with drv:
                pass
    finally:
        shutil.rmtree(dir, ignore_errors=True)


def test_context_manager_closes_on_exception(client):
    with pytest.raises(RuntimeError):
        with client.add_publication("aeron:ipc", 115) as pub:
            raise RuntimeError("boom")
    assert pub.is_closed


def test_dropped_publication_is_released(client):
    sub = client.add_subscription("aeron:ipc", 116)
    pub = client.add_exclusive_publication("aeron:ipc", 116)
    await_until(lambda: sub.image_count == 1)
    del pub
    gc.collect()
    await_until(lambda: sub.image_count == 0, what="a dropped publication to be released")


def test_image_callbacks_fire_with_images(client):
    events = []
    lock = threading.Lock()

    def on_available(image):
        with lock:
            events.append(("available", image))

    def on_unavailable(image):
        with lock:
            events.append(("unavailable", image))

    sub = client.add_subscription("aeron:ipc", 117, on_available_image=on_available,
                                  on_unavailable_image=on_unavailable)
    pub = client.add_exclusive_publication("aeron:ipc", 117)
    await_until(lambda: len(events) == 1, what="on_available_image")
    kind, image = events[0]
    assert kind == "available"
    assert isinstance(image, sulis.Image)
    assert image.session_id == pub.session_id
    assert image.correlation_id == pub.registration_id
    assert image.join_position == 0
    assert not image.is_closed
    assert image.source_identity == "aeron:ipc"
    for m in (b"one", b"two"):
        assert pub.offer(m) > 0
    got = []
    await_until(lambda: sub.poll(lambda b, h: got.append(bytes(b)), 10) >= 0 and len(got) == 2)
    pub.close()
    await_until(lambda: len(events) == 2, what="on_unavailable_image")
    kind, gone = events[1]
    assert kind == "unavailable"
    assert isinstance(gone, sulis.Image)
    assert gone.session_id == pub.session_id
    assert gone.is_closed
    assert gone.position == 128
    assert gone.is_end_of_stream
    assert image.is_closed, "the Image given earlier refers to the same image"
    assert sub.image_count == 0


def test_image_callbacks_run_on_the_clients_dispatcher_thread_and_close_waits_for_them(make_client):
    client = make_client()
    threads = []
    entered, release = threading.Event(), threading.Event()

    def on_available(image):
        threads.append(threading.get_ident())
        entered.set()
        release.wait(10)

    sub = client.add_subscription("aeron:ipc", 122, on_available_image=on_available,
                                  on_unavailable_image=lambda image: threads.append(threading.get_ident()))
    pub = client.add_exclusive_publication("aeron:ipc", 122)
    assert entered.wait(10), "on_available_image"
    # poll and offer go on while a callback runs: it is not on the caller's thread.
    assert threads == [threads[0]] and threads[0] != threading.get_ident()
    assert pub.offer(b"x") > 0
    await_until(lambda: sub.poll(lambda b, h: None, 10) == 1)
    pub.close()
    closer = threading.Thread(target=client.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close waits for the callback that is running"
    release.set()
    closer.join(10)
    assert not closer.is_alive()
    assert set(threads) == {threads[0]}, "every callback of a client on the same thread"


@pytest.mark.timeout(30)
def test_image_callbacks_can_call_the_client(client):
    # As in Aeron, an image handler may add and remove things: the dispatcher
    # holds no lock of the client while a callback runs.
    done = threading.Event()
    results: list = []
    later: list = []

    def on_available(image):
        try:
            more = client.add_subscription("aeron:ipc", 124, on_available_image=later.append)
            pub = client.add_exclusive_publication("aeron:ipc", 124)
            results.append((more, pub))
            gone = client.add_subscription("aeron:ipc", 125)
            gone.close()
        except BaseException as e:  # reported to the test thread
            results.append(e)
        finally:
            done.set()

    sub = client.add_subscription("aeron:ipc", 123, on_available_image=on_available)
    first = client.add_exclusive_publication("aeron:ipc", 123)
    assert done.wait(10), "a callback that calls the client returns"
    assert len(results) == 1 and isinstance(results[0], tuple), results
    more, pub = results[0]
    await_until(lambda: len(later) == 1, what="the callback of a subscription added from a callback")
    assert later[0].session_id == pub.session_id and more.image_count == 1
    assert sub.image_count == 1 and first.is_connected


@pytest.mark.timeout(30)
def test_image_callback_can_close_its_own_client(make_client):
    client = make_client()
    closed = threading.Event()

    def on_available(image):
        client.close()
        closed.set()

    sub = client.add_subscription("aeron:ipc", 126, on_available_image=on_available)
    pub = client.add_exclusive_publication("aeron:ipc", 126)
    assert closed.wait(10), "close() from a callback returns"
    assert client.is_closed and sub.is_closed and pub.is_closed


def test_callbacks_only_for_their_subscription(client):
    a_events, b_events = [], []
    a = client.add_subscription("aeron:ipc", 118, on_available_image=a_events.append)
    b = client.add_subscription("aeron:ipc", 119, on_available_image=b_events.append)
    pub = client.add_publication("aeron:ipc", 118)
    await_until(lambda: len(a_events) == 1 and a.image_count == 1)
    assert b_events == [] and b.image_count == 0
    assert a_events[0].session_id == pub.session_id


def test_failing_callback_is_reported_and_dispatch_goes_on(client, monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    calls = []

    def bad(image):
        calls.append(image.session_id)
        raise ValueError("callback failed")

    sub = client.add_subscription("aeron:ipc", 120, on_available_image=bad)
    p1 = client.add_exclusive_publication("aeron:ipc", 120)
    p2 = client.add_exclusive_publication("aeron:ipc", 120)
    await_until(lambda: len(calls) == 2 and len(reported) == 2, what="both callbacks, each failing")
    assert sorted(calls) == sorted([p1.session_id, p2.session_id])
    assert all(isinstance(e, ValueError) for e in reported)
    assert sub.image_count == 2, "a failing callback does not undo the image"


def test_reentrant_poll_is_refused(client):
    sub, pub = connected_pair(client, 121)
    assert pub.offer(b"x") > 0
    errors = []

    def handler(buffer, header):
        for call in (lambda: sub.poll(lambda b, h: None, 1), lambda: sub.close()):
            try:
                call()
            except sulis.SulisError as e:
                errors.append(str(e))

    assert sub.poll(handler, 10) == 1
    assert len(errors) == 2 and all("not thread-safe" in e for e in errors)
    assert not sub.is_closed


def test_client_of_an_embedded_driver_that_closes(make_driver):
    drv = make_driver()
    client = sulis.Client(dir=drv.dir, driver_timeout=1.0)
    try:
        pub = client.add_publication("aeron:ipc", 122)
        drv.close()
        err = await_until(lambda: _raises(lambda: client.add_subscription("aeron:ipc", 122)), 8,
                          "DriverTimeoutError from a closed driver")
        assert isinstance(err, sulis.DriverTimeoutError)
        assert isinstance(await_until(lambda: _raises(lambda: pub.offer(b"x")), 8), sulis.DriverTimeoutError)
        assert client.is_closed
    finally:
        client.close()


def _raises(call):
    try:
        call()
    except sulis.SulisError as e:
        return e
    return None


def test_client_without_driver_times_out():
    dir = make_dir()
    try:
        t0 = time.monotonic()
        with pytest.raises(sulis.DriverTimeoutError) as info:
            sulis.Client(dir=dir, driver_timeout=0.5)
        assert time.monotonic() - t0 < 5
        assert dir in str(info.value)
    finally:
        shutil.rmtree(dir, ignore_errors=True)


def test_client_on_a_directory_that_is_not_there_fails_at_once_naming_the_fix():
    """A driver makes its directory first: none there is a wrong path or no driver, said before the
    driver timeout (60 s here) rather than after it."""
    dir = os.path.join(make_dir(), "no-such-driver")
    try:
        t0 = time.monotonic()
        with pytest.raises(sulis.DriverTimeoutError) as info:
            sulis.Client(dir=dir, driver_timeout=60.0)
        assert time.monotonic() - t0 < 30
        assert dir in str(info.value) and "sulis driver --dir" in str(info.value)
    finally:
        shutil.rmtree(os.path.dirname(dir), ignore_errors=True)


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
def test_client_rejects_bad_driver_timeout(timeout):
    with pytest.raises(sulis.ConfigurationError, match="driver_timeout"):
        sulis.Client(dir="/nonexistent", driver_timeout=timeout)
