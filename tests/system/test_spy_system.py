"""Spy subscriptions: ``aeron-spy:aeron:udp?...`` reads a UDP publication of this driver in place.

What a spy must do, as Aeron's does: get every message of the matching publications (channel,
stream, session) without a socket; hold the publisher back while tethered, not when
``tether=false``; not make a publication connected on its own unless ``ssc`` says so (the
publication's channel, the driver's ``spies_simulate_connection``, or, a sulis extension, the
spy's own channel); then let a receiver that joins later start where the spies are; see the end
of the stream and lose its image when the publication closes; and never hold a publisher back
after its process died. The media matrix (test_media_matrix_system.py) checks which publications
reach which spies.
"""

from __future__ import annotations

import time

import pytest

import sulis
from conftest import await_until, free_udp_port

TERM = 64 * 1024
MESSAGE = bytes(1000)


def udp(port: int, extra: str = "") -> str:
    return f"aeron:udp?endpoint=127.0.0.1:{port}|term-length=64k{extra}"


def spy_of(port: int, extra: str = "") -> str:
    return f"aeron-spy:aeron:udp?endpoint=127.0.0.1:{port}{extra}"


def drain(sub, into: list, limit: int = 1000) -> int:
    return sub.poll(lambda b, h: into.append(bytes(b)), limit)


def offer(pub, message: bytes, *readers) -> int:
    """Offers until accepted, running each ``readers`` callable between tries; the position."""
    def accepted():
        r = pub.offer(message)
        assert r != sulis.CLOSED
        for read in readers:
            read()
        return r > 0
    await_until(accepted, what=f"offer on session {pub.session_id}")
    return pub.position


def offer_until_refused(pub, most: int, keep_up=()) -> tuple[int, int]:
    """Offers ``MESSAGE`` until refused or ``most`` went in, polling ``keep_up`` subscriptions
    (throwing their messages away) between offers; returns (accepted, the refusal or 0)."""
    sink: list = []
    for n in range(most):
        r = pub.offer(MESSAGE)
        if r < 0:
            # A refusal counts once it has lasted a while: the conductor raises the limit
            # on its own duty cycle.
            deadline = time.monotonic() + 0.3
            while r < 0 and time.monotonic() < deadline:
                for s in keep_up:
                    drain(s, sink)
                r = pub.offer(MESSAGE)
            if r < 0:
                return n, r
        for s in keep_up:
            drain(s, sink)
        sink.clear()
    return most, 0


def spy_counters(dir: str) -> list[str]:
    return [c["label"] for c in sulis.CountersReader(dir).counters()
            if c["label"].startswith("sub-pos") and "aeron-spy:" in c["label"]]


@pytest.mark.parametrize("exclusive", [False, True])
def test_a_spy_gets_what_the_receiver_gets(client, exclusive):
    port = free_udp_port()
    receiver = client.add_subscription(udp(port), 10)
    spy = client.add_subscription(spy_of(port), 10)
    add = client.add_exclusive_publication if exclusive else client.add_publication
    pub = add(udp(port), 10)
    await_until(lambda: pub.is_connected and receiver.image_count == 1 and spy.image_count == 1,
                what="receiver and spy images")
    (image,) = spy.images
    assert image.source_identity == "aeron:ipc", "Aeron names a spy's source so"
    assert image.session_id == pub.session_id
    sent = [b"%d:" % i + bytes(i * 7 % 3000) for i in range(400)]  # some fragmented, across terms
    got_receiver: list = []
    got_spy: list = []
    assembled_receiver = sulis.FragmentAssembler(lambda b, h: got_receiver.append(bytes(b)))
    assembled_spy = sulis.FragmentAssembler(lambda b, h: got_spy.append(bytes(b)))

    def read():
        receiver.poll(assembled_receiver, 100)
        spy.poll(assembled_spy, 100)
    for m in sent:
        offer(pub, m, read)
    await_until(lambda: read() or len(got_receiver) == len(got_spy) == len(sent), what="both to read everything")
    assert got_spy == sent
    assert got_receiver == sent
    assert spy.images[0].position == pub.position == receiver.images[0].position


def test_spies_connect_a_publication_only_when_ssc_says_so(make_driver, make_client):
    client = make_client()
    port = free_udp_port()
    spy = client.add_subscription(spy_of(port), 11)
    plain = client.add_publication(udp(port), 11)
    await_until(lambda: spy.image_count == 1, what="spy image")
    assert not plain.is_connected
    assert plain.offer(b"x") == sulis.NOT_CONNECTED, "a spy alone is not a receiver (Aeron's default)"
    plain.close()
    await_until(lambda: spy.image_count == 0, what="the closed publication's image to go")

    # The publication's own ssc=true...
    pub = client.add_exclusive_publication(udp(port, "|ssc=true"), 11)
    await_until(lambda: pub.is_connected, what="ssc publication to connect to its spy")
    got: list = []
    offer(pub, b"ssc")
    await_until(lambda: drain(spy, got) or got, what="the spy to read")
    assert got == [b"ssc"]
    pub.close()

    # ...or the spy's (a sulis extension, used by the archive for local recordings)...
    port2 = free_udp_port()
    connecting_spy = client.add_subscription(spy_of(port2, "|ssc=true"), 12)
    pub2 = client.add_exclusive_publication(udp(port2), 12)
    await_until(lambda: pub2.is_connected, what="a publication to connect to an ssc spy")

    # ...or the driver's option.
    driver = make_driver(spies_simulate_connection=True)
    other = make_client(driver.dir)
    port3 = free_udp_port()
    spy3 = other.add_subscription(spy_of(port3), 13)
    pub3 = other.add_exclusive_publication(udp(port3), 13)
    await_until(lambda: pub3.is_connected and spy3.image_count == 1, what="driver-wide ssc")
    assert connecting_spy.image_count == 1


def test_a_tethered_spy_holds_the_publisher_back_an_untethered_one_does_not(client):
    port = free_udp_port()
    receiver = client.add_subscription(udp(port), 14)
    tethered = client.add_subscription(spy_of(port), 14)
    pub = client.add_exclusive_publication(udp(port), 14)
    await_until(lambda: pub.is_connected and tethered.image_count == 1 and receiver.image_count == 1,
                what="connected")
    accepted, refusal = offer_until_refused(pub, 10 * TERM // len(MESSAGE), keep_up=[receiver])
    assert refusal == sulis.BACK_PRESSURED
    assert accepted * len(MESSAGE) <= TERM, "no more than the window ahead of the idle spy"
    # Reading lets the publisher go on.
    got: list = []
    drain(tethered, got, 10_000)
    assert len(got) == accepted
    offer(pub, MESSAGE, lambda: drain(receiver, []))
    tethered.close()

    untethered = client.add_subscription(spy_of(port, "|tether=false"), 14)
    await_until(lambda: untethered.image_count == 1, what="untethered spy image")
    accepted, refusal = offer_until_refused(pub, 8 * TERM // len(MESSAGE), keep_up=[receiver])
    assert refusal == 0 and accepted == 8 * TERM // len(MESSAGE), "the idle untethered spy held nothing back"


def test_a_receiver_that_joins_after_the_spies_starts_where_they_are(client):
    port = free_udp_port()
    spy = client.add_subscription(spy_of(port), 15)
    pub = client.add_exclusive_publication(udp(port, "|ssc=true"), 15)
    await_until(lambda: pub.is_connected and spy.image_count == 1, what="ssc connection")
    got_spy: list = []
    for i in range(300):  # several terms, nobody but the spy
        offer(pub, b"early %d " % i + MESSAGE, lambda: drain(spy, got_spy))
    await_until(lambda: drain(spy, got_spy) >= 0 and len(got_spy) == 300, what="spy to read the early ones")
    spy_position = spy.images[0].position
    assert spy_position > 2 * TERM

    receiver = client.add_subscription(udp(port), 15)
    await_until(lambda: receiver.image_count == 1, what="receiver image")
    assert receiver.images[0].join_position >= spy_position, "nothing the spies read is sent again"
    got_receiver: list = []
    for i in range(100):
        offer(pub, b"late %d" % i, lambda: drain(receiver, got_receiver))
    await_until(lambda: drain(receiver, got_receiver) + drain(spy, got_spy) >= 0 and len(got_receiver) == 100
                and len(got_spy) == 400, what="both to read the late ones")
    assert got_receiver == [b"late %d" % i for i in range(100)]
    assert got_spy[300:] == got_receiver


def test_a_spy_reads_to_the_end_of_a_closed_publication_then_loses_its_image(driver, client):
    port = free_udp_port()
    spy = client.add_subscription(spy_of(port, "|session-id=4242"), 16)
    other_session = client.add_subscription(spy_of(port, "|session-id=4243"), 16)
    pub = client.add_exclusive_publication(udp(port, "|ssc=true|session-id=4242"), 16)
    await_until(lambda: pub.is_connected, what="connected")
    for i in range(50):
        offer(pub, b"%d" % i)
    assert len(spy_counters(driver.dir)) == 1, "one sub-pos: the matching spy's"
    pub.close()
    got: list = []
    await_until(lambda: drain(spy, got) >= 0 and len(got) == 50 and spy.image_count == 0,
                what="the spy to read to the end, then lose its image")
    assert got == [b"%d" % i for i in range(50)]
    assert other_session.image_count == 0, "a session filter applies to spies"
    await_until(lambda: not spy_counters(driver.dir), what="the spy's position counter freed")


def test_a_killed_spying_process_stops_holding_the_publisher_back(make_driver, make_client, spawn):
    driver = make_driver(client_liveness_timeout="500ms", publication_unblock_timeout="1s")
    client = make_client(driver.dir)
    port = free_udp_port()
    receiver = client.add_subscription(udp(port), 17)
    pub = client.add_exclusive_publication(udp(port), 17)
    await_until(lambda: pub.is_connected, what="connected")
    child = spawn("subscribe", driver.dir, spy_of(port), 17, stdin=True)
    child.read()
    accepted, refusal = offer_until_refused(pub, 10 * TERM // len(MESSAGE), keep_up=[receiver])
    assert refusal == sulis.BACK_PRESSURED, "the child's idle spy holds the publisher"
    child.kill()
    # Once the driver times the dead client out, the publisher goes on with the receiver alone.
    offer(pub, MESSAGE, lambda: drain(receiver, []))
    accepted, refusal = offer_until_refused(pub, 4 * TERM // len(MESSAGE), keep_up=[receiver])
    assert refusal == 0
