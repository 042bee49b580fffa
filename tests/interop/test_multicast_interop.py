"""Multicast and multi-destination-cast between Aeron Java 1.51 and sulis, both ways, and mixed groups.

Each peer is a process of its own (bench/peers/AeronPeer.java's stream roles, tests/interop/
sulis_peer.py) on a driver of its kind, over a multicast group on the loopback interface
(``interface=127.0.0.1``): data to the group, status messages and NAKs to the control group (+1).
The interop stream (tests/interop/stream.py: 8 bytes to 1 MiB + 4099, fragmented) must arrive
whole, in order and intact at every receiver. Aeron 1.15.1 is left out: its multicast stalls a
receiver on a bridge (issue 22), and 1.51 is what the issue asks for.

MDC (on loopback too): one publication (either kind) sends every datagram to a sulis and an Aeron
receiver, each on its own port, dynamic (the receivers name the publication's control address and
probe it before the stream exists, as Aeron's do) and manual (the publisher adds both destinations);
and a multi-destination subscription (either kind) fed by a publication of the other kind through
two ports. ``fc=min,g:/2`` keeps a publication unconnected until both receivers are there.

``SULIS_INTEROP_MULTICAST_COUNT`` sets the messages (default 100,000, about 100 MB).
"""

from __future__ import annotations

import os

import peers  # noqa: E402
import pytest

from conftest import free_udp_port

COUNT = int(os.environ.get("SULIS_INTEROP_MULTICAST_COUNT", "100000").replace("_", ""))

pytestmark = [pytest.mark.interop, pytest.mark.timeout(int(2 * peers.transfer_timeout(COUNT) + 180))]


@pytest.fixture
def aeron() -> peers.AeronJava:
    return peers.usable("current")


@pytest.fixture
def harness():
    h = peers.Harness()
    yield h
    h.close()


def group(params: str = "") -> str:
    return f"aeron:udp?endpoint=239.255.91.1:{free_udp_port()}|interface=127.0.0.1" + (f"|{params}" if params else "")


def check(res: dict, h: peers.Harness) -> None:
    if res["problems"]:
        pytest.fail("transfer failed:\n  " + "\n  ".join(res["problems"])
                    + f"\nchannel {res['channel']}\n{h.describe()}", pytrace=False)


@pytest.mark.parametrize("publisher, subscriber", [("aeron", "sulis"), ("sulis", "aeron")],
                         ids=["aeron-pub", "sulis-pub"])
def test_a_multicast_stream_between_aeron_and_sulis(aeron, harness, publisher, subscriber):
    check(peers.run_transfer(harness, publisher, subscriber, COUNT, aeron, channel=group()), harness)


@pytest.mark.parametrize("publisher", ["aeron", "sulis"])
def test_a_mixed_group_with_min_flow_control_loses_nothing(aeron, harness, publisher):
    """Aeron and sulis receivers on one stream, fc=min with a group of three (the publication is not
    connected before all three are there, so none joins late): the publisher (either kind) counts both
    kinds of receiver by their ids, and each gets everything."""
    res = peers.run_group_transfer(harness, publisher, ["aeron", "sulis", "sulis"], COUNT, aeron,
                                   channel=group("fc=min,g:/3"))
    check(res, harness)


@pytest.mark.parametrize("publisher", ["aeron", "sulis"])
@pytest.mark.parametrize("mode", ["dynamic", "manual"])
def test_an_mdc_stream_reaches_an_aeron_and_a_sulis_receiver(aeron, harness, publisher, mode):
    control = f"127.0.0.1:{free_udp_port()}"
    endpoints = [f"127.0.0.1:{free_udp_port()}" for _ in range(2)]
    if mode == "dynamic":
        channel = f"aeron:udp?control={control}|control-mode=dynamic|fc=min,g:/2"
        subscribers = [f"aeron:udp?endpoint={e}|control={control}" for e in endpoints]
        destinations: list[str] = []
    else:
        channel = "aeron:udp?control-mode=manual|fc=min,g:/2"
        subscribers = [f"aeron:udp?endpoint={e}" for e in endpoints]
        destinations = subscribers
    res = peers.run_group_transfer(harness, publisher, ["aeron", "sulis"], COUNT, aeron, channel=channel,
                                   subscriber_channels=subscribers, destinations=destinations)
    check(res, harness)


@pytest.mark.parametrize("publisher, subscriber", [("aeron", "sulis"), ("sulis", "aeron")],
                         ids=["aeron-pub", "sulis-pub"])
def test_a_multi_destination_subscription_takes_the_other_kinds_stream_by_two_ways(aeron, harness, publisher,
                                                                                   subscriber):
    ways = [f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}" for _ in range(2)]
    res = peers.run_group_transfer(harness, publisher, [subscriber], COUNT, aeron,
                                   channel="aeron:udp?control-mode=manual",
                                   destinations=ways, subscriber_destinations=ways)
    check(res, harness)
