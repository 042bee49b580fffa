"""Delivery semantics Aeron users rely on, each found broken once by trying
combinations (shared/repro has the original reproductions):

* a subscription closed and added again while its publisher keeps sending is
  accepted at once and gets the stream (it used to fail with EADDRINUSE);
* a FragmentAssembler never hands over a message with a hole (a lost middle
  fragment on an unreliable channel used to be spliced over);
* a late IPC subscriber joins where the existing subscribers are;
* an IPC subscriber hears that a closed publication is unavailable as soon as
  it has read it to the end, not after the linger.
"""

from __future__ import annotations

import time

import pytest

import sulis
from conftest import COUNTER_TYPE, assert_lingers_for_the_channel, await_until, free_udp_port

UDP_OPTIONS = {"term_buffer_length": "1m", "timer_interval": "10ms", "publication_linger_timeout": "2s"}


def _receive_one(pub, sub, payload=b"y", timeout=5.0) -> bool:
    got = []
    deadline = time.monotonic() + timeout
    while not got and time.monotonic() < deadline:
        pub.offer(payload)
        sub.poll(lambda b, h: got.append(bytes(b)), 10)
        time.sleep(0.001)
    return bool(got)


@pytest.mark.parametrize("two_drivers", [False, True], ids=["one-driver", "two-drivers"])
def test_udp_subscription_closed_and_added_again_while_the_publisher_sends(make_driver, make_client, two_drivers):
    sub_driver = make_driver(**UDP_OPTIONS)
    pub_driver = make_driver(**UDP_OPTIONS) if two_drivers else sub_driver
    sc = make_client(dir=sub_driver.dir)
    pc = make_client(dir=pub_driver.dir) if two_drivers else sc
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    sub = sc.add_subscription(channel, 5)
    pub = pc.add_publication(channel, 5)
    assert _receive_one(pub, sub, b"first")
    # At once (the old image still active or lingering, the socket still
    # bound) and after delays that land in every phase of its withdrawal.
    for delay in (0, 0, 0, 0, 0, 0.001, 0.01, 0.05, 0.2):
        for _ in range(20):
            pub.offer(b"x")
        sub.close()
        time.sleep(delay)
        sub = sc.add_subscription(channel, 5)
        assert _receive_one(pub, sub), f"no message after re-subscribing with delay {delay}"
    # Once nothing uses the endpoint any more its socket is closed, and the
    # address can be subscribed again (bound anew) at once.
    pub.close()
    sub.close()
    sub = sc.add_subscription(channel, 5)
    pub = pc.add_publication(channel, 5)
    assert _receive_one(pub, sub, b"again")


def test_a_subscription_on_a_closing_endpoint_is_bound_once_the_old_socket_is_closed(driver, client):
    """No publisher, so no image keeps the endpoint: removing the last
    subscription closes the socket in the receiver while the next add may
    already be in the conductor; the add must wait for the close, not fail."""
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    for _ in range(50):
        sub = client.add_subscription(channel, 7)
        sub.close()
    sub = client.add_subscription(channel, 7)
    pub = client.add_publication(channel, 7)
    assert _receive_one(pub, sub)


def test_assembler_never_delivers_a_message_with_a_lost_middle_fragment(make_driver, make_client):
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    a = make_driver(**UDP_OPTIONS, send_data_loss="every:4")
    b = make_driver(**UDP_OPTIONS)
    ca, cb = make_client(dir=a.dir), make_client(dir=b.dir)
    sub = cb.add_subscription(channel + "|reliable=false", 10)
    pub = ca.add_publication(channel + "|mtu=1408", 10)
    await_until(lambda: pub.is_connected, what="publication to connect")
    got: list[bytes] = []
    asm = sulis.FragmentAssembler(lambda buf, hdr: got.append(bytes(buf)))
    sent = 40
    for i in range(sent):
        # 4,000 bytes: three fragments at this MTU, so every fourth datagram
        # dropped takes out a first, middle or last fragment in turn.
        await_until(lambda i=i: pub.offer(bytes([i]) * 4000) > 0, what=f"offer {i}")
        sub.poll(asm, 100)
    await_until(lambda: sub.poll(asm, 100) == 0 and sub.images and sub.images[0].position >= pub.position,
                what="the subscriber to reach the publisher's position")
    assert 0 < len(got) < sent
    for m in got:
        assert len(m) == 4000 and len(set(m)) == 1, f"corrupt message of {len(m)} bytes"
    assert len({m[0] for m in got}) == len(got), "a message was delivered twice"


def test_late_ipc_subscriber_joins_where_the_existing_subscriber_is(client):
    s1 = client.add_subscription("aeron:ipc", 10)
    pub = client.add_publication("aeron:ipc", 10)
    await_until(lambda: pub.is_connected and s1.image_count == 1, what="first subscriber")
    for i in range(10):
        await_until(lambda i=i: pub.offer(bytes([i])) > 0)
    assert s1.poll(lambda b, h: None, 3) == 3
    s2 = client.add_subscription("aeron:ipc", 10)
    await_until(lambda: s2.image_count == 1, what="second subscriber's image")
    got: list[int] = []
    s2.poll(lambda b, h: got.append(b[0]), 100)
    assert got == list(range(3, 10))
    rest: list[int] = []
    s1.poll(lambda b, h: rest.append(b[0]), 100)
    assert rest == list(range(3, 10))


def test_late_ipc_subscriber_without_existing_subscribers_joins_at_the_end(client):
    s1 = client.add_subscription("aeron:ipc", 10)
    pub = client.add_publication("aeron:ipc", 10)
    await_until(lambda: pub.is_connected and s1.image_count == 1)
    for i in range(5):
        await_until(lambda i=i: pub.offer(bytes([i])) > 0)
    s1.close()
    await_until(lambda: not pub.is_connected, what="the publication to see no subscriber")
    s2 = client.add_subscription("aeron:ipc", 10)
    await_until(lambda: s2.image_count == 1)
    assert s2.images[0].position == pub.position
    assert s2.poll(lambda b, h: None, 100) == 0


@pytest.mark.driver_options(publication_linger_timeout="60s")
def test_ipc_image_is_unavailable_once_drained_not_after_the_linger(client):
    gone: list[int] = []
    sub = client.add_subscription("aeron:ipc", 10, on_unavailable_image=lambda img: gone.append(img.session_id))
    pub = client.add_publication("aeron:ipc", 10)
    await_until(lambda: pub.is_connected and sub.image_count == 1)
    for i in range(3):
        await_until(lambda i=i: pub.offer(bytes([i])) > 0)
    session = pub.session_id
    pub.close()
    # Not drained yet: still available (the driver checks every duty cycle,
    # so 0.2 s is thousands of chances to withdraw it too early).
    time.sleep(0.2)
    assert gone == [] and sub.image_count == 1
    assert sub.poll(lambda b, h: None, 100) == 3
    # Drained: unavailable well inside the 60 s linger.
    await_until(lambda: (sub.poll(lambda b, h: None, 10), gone)[1], timeout=10,
                what="on_unavailable_image after the subscriber drained the stream")
    assert gone == [session]
    assert sub.image_count == 0


PUB_LMT = COUNTER_TYPE["pub-lmt"]


@pytest.mark.driver_options(publication_linger_timeout="30s")
@pytest.mark.parametrize("linger", ["0", "200ms"])
def test_ipc_channel_linger_replaces_the_drivers(driver, client, linger):
    # Freed after the channel's linger, far inside the driver's 30 s.
    sub = client.add_subscription("aeron:ipc", 11)
    pub = client.add_exclusive_publication(f"aeron:ipc?linger={linger}", 11)
    await_until(lambda: pub.is_connected and sub.image_count == 1)
    assert pub.offer(b"x") > 0
    await_until(lambda: sub.poll(lambda b, h: None, 10) == 1)
    reader = sulis.CountersReader(driver.dir)
    registration_id = pub.registration_id

    def limit_counter() -> list:
        return [c for c in reader.counters() if c["type_id"] == PUB_LMT and c["registration_id"] == registration_id]

    assert limit_counter()
    pub.close()
    await_until(lambda: not limit_counter(), timeout=5, what="the publication freed after the channel's linger")


@pytest.mark.driver_options(publication_linger_timeout="100ms")
def test_ipc_channel_linger_longer_than_the_drivers(driver, client):
    sub = client.add_subscription("aeron:ipc", 12)
    pub = client.add_exclusive_publication("aeron:ipc?linger=1s", 12)
    await_until(lambda: pub.is_connected and sub.image_count == 1)
    reader = sulis.CountersReader(driver.dir)
    registration_id = pub.registration_id

    def limit_counter() -> list:
        return [c for c in reader.counters() if c["type_id"] == PUB_LMT and c["registration_id"] == registration_id]

    pub.close()
    closed = time.monotonic()
    assert_lingers_for_the_channel(limit_counter, closed)
