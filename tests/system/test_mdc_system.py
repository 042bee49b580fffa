"""Multi-destination-cast across hosts (network namespaces the test makes, each host with its own
driver process): one publication sends every datagram to several unicast receivers.

Dynamic (``control-mode=dynamic|control=HOST:PORT``): receivers join by subscribing with the
publisher's control address, and get the whole stream; with ``fc=min`` nobody loses anything while
one receiver loses 10 % of its datagrams. Manual (``control-mode=manual``): the publisher's client
adds and removes destinations. Multi-destination subscriptions (``control-mode=manual`` on the
subscription): one image fed by several sockets, whole while one of its ways is cut. On one host:
destinations coming and going, and what the API refuses."""

from __future__ import annotations

import random
import struct
import time

import pytest

import sulis
from conftest import await_until, free_udp_port
from sites import STARTED_S, STREAM, done, sites
from sulis import _native

ADD_DESTINATION, REMOVE_DESTINATION, REMOVE_DESTINATION_BY_ID = 0x07, 0x08, 0x11



def test_a_dynamic_mdc_stream_reaches_every_receiver_that_subscribes(netns_hosts, spawn):
    hosts, _, s = sites(netns_hosts, spawn, "a", "b", "c", "d")
    control = f"{s['a'].addr}:41101"
    consumers = {n: s[n].consume(f"aeron:udp?endpoint={s[n].addr}:41102|control={control}", 20_000)
                 for n in ("b", "c", "d")}
    producer = s["a"].produce(f"aeron:udp?control={control}|control-mode=dynamic|fc=min,g:/3", 20_000)
    assert producer.read(timeout=STARTED_S)["ready"]
    assert done(producer, 120)["sent"] == 20_000
    for name, c in consumers.items():
        result = done(c, 120)
        assert result["received"] == 20_000, (name, result)
        assert len(result["images"]) == 1, result
    assert [c["value"] for c in s["a"].counters("fc-receivers")] == [3]


def test_min_flow_control_over_mdc_loses_nothing_while_one_receiver_loses_ten_percent(netns_hosts, spawn,
                                                                                       nft_loss):
    hosts, _, s = sites(netns_hosts, spawn, "a", "b", "c")
    control, port = f"{s['a'].addr}:41103", 41_104
    loss = nft_loss(hosts.ns("c"), 10, hook="input", dport=port)
    consumers = {n: s[n].consume(f"aeron:udp?endpoint={s[n].addr}:{port}|control={control}", 30_000)
                 for n in ("b", "c")}
    producer = s["a"].produce(f"aeron:udp?control={control}|control-mode=dynamic|fc=min,g:/2", 30_000)
    assert producer.read(timeout=STARTED_S)["ready"]
    assert done(producer, 180)["sent"] == 30_000
    for name, c in consumers.items():
        result = done(c, 180)
        assert result["received"] == 30_000, (name, result)
    assert loss.dropped() > 100, "the loss really happened at c"
    assert sulis.CountersReader(s["a"].dir).value(sulis.SystemCounter.RETRANSMITS_SENT) > 0


def test_a_manual_mdc_stream_reaches_the_destinations_its_client_added(netns_hosts, spawn):
    hosts, _, s = sites(netns_hosts, spawn, "a", "b", "c", "d")
    port = 41_106
    consumers = {n: s[n].consume(f"aeron:udp?endpoint={s[n].addr}:{port}", 20_000) for n in ("b", "c")}
    # d subscribes too, but nobody added it: it hears nothing.
    bystander = spawn("tally", s["d"].dir, STREAM, f"aeron:udp?endpoint={s['d'].addr}:{port}",
                      prefix=s["d"].prefix, stdin=True)
    bystander.read(timeout=STARTED_S)
    producer = s["a"].produce("aeron:udp?control-mode=manual|fc=min,g:/2", 20_000,
                              destinations=tuple(f"aeron:udp?endpoint={s[n].addr}:{port}" for n in ("b", "c")))
    assert producer.read(timeout=STARTED_S)["ready"]
    assert done(producer, 120)["sent"] == 20_000
    for name, c in consumers.items():
        result = done(c, 120)
        assert result["received"] == 20_000, (name, result)
    bystander.send("report")
    assert bystander.read(timeout=30)["received"] == 0


def test_a_multi_destination_subscription_stays_whole_while_one_of_its_ways_is_cut(netns_hosts, spawn, nft_loss):
    """b's subscription has two destinations (two ports), a's manual MDC publication sends to both;
    every datagram to one of them is dropped (nftables): the image gets everything by the other."""
    hosts, _, s = sites(netns_hosts, spawn, "a", "b")
    ways = [f"aeron:udp?endpoint={s['b'].addr}:{port}" for port in (41_120, 41_121)]
    cut = nft_loss(hosts.ns("b"), 100, hook="input", dport=41_121)
    consumer = s["b"].consume("aeron:udp?control-mode=manual", 20_000, destinations=tuple(ways))
    producer = s["a"].produce("aeron:udp?control-mode=manual", 20_000, destinations=tuple(ways))
    assert producer.read(timeout=STARTED_S)["ready"]
    assert done(producer, 120)["sent"] == 20_000
    result = done(consumer, 120)
    assert result["received"] == 20_000 and len(result["images"]) == 1, result
    assert cut.dropped() > 1000, "the second way really was cut"


def test_a_multi_destination_subscription_feeds_one_image_from_both_and_drops_one(driver, client):
    """Loopback: a manual MDC publication to both destinations of one subscription (one on port 0,
    the driver's pick): one image; a destination removed mid-stream and the stream goes on."""
    fixed = f"127.0.0.1:{free_udp_port()}"  # this worker's port block: no other process binds it meanwhile
    sub = client.add_subscription("aeron:udp?control-mode=manual", STREAM)
    sub.add_destination("aeron:udp?endpoint=127.0.0.1:0")
    sub.add_destination(f"aeron:udp?endpoint={fixed}")
    addresses = sub.local_socket_addresses()
    assert len(addresses) == 2 and fixed in addresses, addresses
    got: list[int] = []

    def send_and_read(first: int, count: int) -> None:
        for i in range(first, first + count):
            while pub.offer(i.to_bytes(4, "little")) < 0:
                pass
        await_until(lambda: sub.poll(lambda b, _h: got.append(int.from_bytes(bytes(b), "little")), 100) >= 0
                    and len(got) >= first + count, what=f"{first + count} messages")

    with client.add_exclusive_publication("aeron:udp?control-mode=manual", STREAM) as pub:
        for address in addresses:
            pub.add_destination(f"aeron:udp?endpoint={address}")
        await_until(lambda: pub.is_connected and sub.image_count == 1, what="the image")
        send_and_read(0, 1000)
        sub.remove_destination(f"aeron:udp?endpoint={fixed}")
        assert sub.local_socket_addresses() == [a for a in addresses if a != fixed]
        send_and_read(1000, 1000)
        assert got == list(range(2000)) and sub.image_count == 1


def test_destinations_come_and_go_on_one_host(driver, client):
    """Loopback: a manual publication with two local destinations, one removed by channel, then by id."""
    ports = [41_110, 41_111]
    subs = [client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{p}", STREAM) for p in ports]
    with client.add_exclusive_publication("aeron:udp?control-mode=manual", STREAM) as pub:
        ids = [pub.add_destination(f"aeron:udp?endpoint=127.0.0.1:{p}") for p in ports]
        assert ids[0] != ids[1]
        await_until(lambda: pub.is_connected and all(s.image_count == 1 for s in subs), what="both destinations")
        got: list[list[bytes]] = [[], []]

        def publish_and_read(message: bytes, expect: list[bool]) -> None:
            while pub.offer(message) < 0:
                pass
            for i, sub in enumerate(subs):
                if expect[i]:
                    await_until(lambda i=i, sub=sub: sub.poll(lambda b, _h, i=i: got[i].append(bytes(b)), 10) > 0
                                or message in got[i], what=f"destination {i} to get {message!r}")

        publish_and_read(b"to both", [True, True])
        pub.remove_destination(f"aeron:udp?endpoint=127.0.0.1:{ports[1]}")
        publish_and_read(b"to the first", [True, False])
        pub.remove_destination_by_id(ids[0])
        # With no destination left nothing goes anywhere (the receivers' images live on a while, and
        # their status messages keep the publication connected: the offer is taken).
        assert pub.offer(b"to nobody") > 0
        time.sleep(0.5)
        for i, sub in enumerate(subs):
            sub.poll(lambda b, _h, i=i: got[i].append(bytes(b)), 10)
        assert got == [[b"to both", b"to the first"], [b"to both"]]


@pytest.mark.expect_errors
def test_destinations_are_refused_where_they_mean_nothing(driver, client):
    # Ports from this worker's block: subscriptions bind them, and no other process binds them meanwhile.
    p = {n: free_udp_port() for n in (12, 13, 17, 18, 19)}
    with client.add_publication(f"aeron:udp?endpoint=127.0.0.1:{p[12]}", STREAM) as pub:
        with pytest.raises(sulis.ConfigurationError, match="does not allow manual control"):
            pub.add_destination(f"aeron:udp?endpoint=127.0.0.1:{p[13]}")
    with client.add_publication("aeron:udp?control-mode=manual", STREAM) as pub:
        with pytest.raises(sulis.ConfigurationError, match="endpoint"):
            pub.add_destination("aeron:udp?interface=127.0.0.1")
        pub.close()
        with pytest.raises(sulis.ClosedError):
            pub.add_destination(f"aeron:udp?endpoint=127.0.0.1:{p[13]}")
    with pytest.raises(sulis.ConfigurationError, match="control"):
        client.add_publication("aeron:udp?control-mode=dynamic", STREAM)
    with client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{p[17]}", STREAM) as sub:
        with pytest.raises(sulis.ConfigurationError, match="does not allow manual control"):
            sub.add_destination(f"aeron:udp?endpoint=127.0.0.1:{p[18]}")
    with client.add_subscription("aeron:udp?control-mode=manual", STREAM) as sub:
        sub.add_destination(f"aeron:udp?endpoint=127.0.0.1:{p[19]}")
        with pytest.raises(sulis.ConfigurationError, match="already"):
            sub.add_destination(f"aeron:udp?endpoint=127.0.0.1:{p[19]}")


@pytest.mark.expect_errors
def test_only_the_owner_changes_a_publications_destinations(driver, client):
    """Another process writes well-formed destination commands for a publication it does not own
    (its registration id is in the counters for all to read): each is refused, none takes effect."""
    # Ports from this worker's block: no other process binds them meanwhile.
    owned_at, lure_at = (f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}" for _ in range(2))
    owned = client.add_subscription(owned_at, STREAM)
    lure = client.add_subscription(lure_at, STREAM)
    with client.add_exclusive_publication("aeron:udp?control-mode=manual", STREAM) as pub:
        destination_id = pub.add_destination(owned_at)
        await_until(lambda: pub.is_connected and owned.image_count == 1, what="the owner's destination")
        rng = random.Random(7)
        errors_before = sulis.CountersReader(driver.dir).value(sulis.SystemCounter.ERRORS)

        def channel(text: str) -> bytes:
            raw = text.encode()
            return struct.pack("<i", len(raw)) + raw

        records = []
        for _ in range(50):
            head = struct.pack("<qqq", rng.getrandbits(62), rng.getrandbits(62), pub.registration_id)
            records += [(ADD_DESTINATION, head + channel(lure_at)),
                        (REMOVE_DESTINATION, head + channel(owned_at)),
                        (REMOVE_DESTINATION_BY_ID, head + struct.pack("<q", destination_id))]
        _native._write_to_driver(driver.dir, records)
        await_until(lambda: sulis.CountersReader(driver.dir).value(sulis.SystemCounter.ERRORS) >= errors_before + 150,
                    what="every stranger's command refused")
        position = 0
        for i in range(20):
            while (r := pub.offer(i.to_bytes(4, "little"))) < 0:
                assert r in (sulis.BACK_PRESSURED, sulis.ADMIN_ACTION), sulis.result_name(r)
            position = r
        got: list[int] = []
        await_until(lambda: owned.poll(lambda b, _h: got.append(int.from_bytes(bytes(b), "little")), 100) >= 0
                    and len(got) == 20, what="the owner's destination to get the stream")
        assert got == list(range(20))
        time.sleep(0.2)
        assert lure.image_count == 0, "a stranger added no destination"
        assert pub.position == position
    logged = "\n".join(text for _, _, _, text in sulis.read_errors(driver.dir))
    assert "unknown publication" in logged
