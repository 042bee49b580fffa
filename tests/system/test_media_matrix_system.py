"""Which publications reach which subscriptions.

Every publication kind (IPC and UDP unicast, concurrent and exclusive, from
the subscribing client and from another) × every subscription kind (IPC, UDP
on the publications' endpoint, UDP on another endpoint, a spy on the
publications' endpoint, a spy on another endpoint) × two stream ids, all
open in one driver at once: a subscription must get exactly the messages of
the publications of its own medium, endpoint and stream id, each once; a
spy exactly what a receiver on its endpoint gets.
(Multicast and MDC join this matrix when they exist.)

The matrix runs with the driver's agents reading every transport each duty
cycle (``transport_poller_threshold=5``), with the epoll set once an agent
has two (1, the default) and for any transport at all (0).
"""

from __future__ import annotations

import itertools
import time

import pytest

import sulis
from conftest import await_until, free_udp_port

STREAMS = (5, 6)


def _sub_channels(port_a: int, port_b: int) -> dict[str, str]:
    return {
        "ipc": "aeron:ipc",
        "udp-same": f"aeron:udp?endpoint=127.0.0.1:{port_a}",
        "udp-other": f"aeron:udp?endpoint=127.0.0.1:{port_b}",
        "spy-same": f"aeron-spy:aeron:udp?endpoint=127.0.0.1:{port_a}",
        "spy-other": f"aeron-spy:aeron:udp?endpoint=127.0.0.1:{port_b}",
    }


def _expected(pub_medium: str, pub_stream: int, sub_kind: str, sub_stream: int) -> bool:
    if pub_stream != sub_stream:
        return False
    return (pub_medium, sub_kind) in {("ipc", "ipc"), ("udp", "udp-same"), ("udp", "spy-same")}


@pytest.fixture(params=[0, 1, 5], ids=lambda t: f"poller-threshold-{t}")
def driver(request, make_driver):
    return make_driver(transport_poller_threshold=request.param)


def test_every_publication_kind_reaches_exactly_the_matching_subscriptions(driver, make_client):
    port_a, port_b = free_udp_port(), free_udp_port()
    subs_channels = _sub_channels(port_a, port_b)
    pub_channels = {"ipc": "aeron:ipc", "udp": f"aeron:udp?endpoint=127.0.0.1:{port_a}"}
    ca, cb = make_client(), make_client()
    clients = {"same": ca, "other": cb}

    subs = {(kind, stream): ca.add_subscription(ch, stream)
            for kind, ch in subs_channels.items() for stream in STREAMS}
    pubs = {}
    for medium, exclusive, who, stream in itertools.product(pub_channels, (False, True), clients, STREAMS):
        c = clients[who]
        add = c.add_exclusive_publication if exclusive else c.add_publication
        pubs[(medium, exclusive, who, stream)] = add(pub_channels[medium], stream)

    await_until(lambda: all(p.is_connected for p in pubs.values()), what="every publication to connect")
    # Each publication offers its own tag, a few times, while every
    # subscription is polled; subscriptions of another medium, endpoint or
    # stream must see none of it.
    received: dict[tuple, list[bytes]] = {k: [] for k in subs}
    tags = {key: "/".join(map(str, key)).encode() for key in pubs}
    rounds = 3
    for r in range(rounds):
        for key, pub in pubs.items():
            msg = tags[key] + b"#%d" % r
            await_until(lambda pub=pub, msg=msg: pub.offer(msg) > 0, what=f"offer on {key}")
    expected_counts = {
        sk: sum(rounds for (m, _e, _w, ps) in pubs if _expected(m, ps, sk[0], sk[1])) for sk in subs
    }

    def drained():
        for sk, sub in subs.items():
            sub.poll(lambda b, h, sk=sk: received[sk].append(bytes(b)), 1000)
        return all(len(received[sk]) >= n for sk, n in expected_counts.items())

    await_until(drained, what="every subscription to get its messages")
    # Anything that should not arrive has had time to: poll a little longer.
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        drained()
        time.sleep(0.01)

    for sk, got in received.items():
        want = sorted(tags[pk] + b"#%d" % r for pk in pubs for r in range(rounds)
                      if _expected(pk[0], pk[3], sk[0], sk[1]))
        assert sorted(got) == want, f"subscription {sk} got {sorted(got)}, want {want}"
    # Each subscription holds images of its own medium only: a UDP
    # subscription's images come from the network, an IPC one's from IPC, a
    # spy's from this driver's UDP publications (named "aeron:ipc" as Aeron does).
    udp_sessions = {p.session_id for (m, *_), p in pubs.items() if m == "udp"}
    for (kind, _stream), sub in subs.items():
        for image in sub.images:
            if kind == "ipc" or kind.startswith("spy"):
                assert image.source_identity == "aeron:ipc", (kind, image)
                assert (image.session_id in udp_sessions) == kind.startswith("spy"), (kind, image)
            else:
                assert image.source_identity.startswith("127.0.0.1:"), (kind, image)


def test_a_udp_subscription_and_an_ipc_publication_on_the_same_stream_do_not_connect(client):
    """The first report: an IPC publication fed a UDP subscription of its stream."""
    port = free_udp_port()
    sub = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", 5)
    pub = client.add_publication("aeron:ipc", 5)
    time.sleep(0.2)
    assert not sub.is_connected and sub.image_count == 0
    assert pub.offer(b"x") == sulis.NOT_CONNECTED
