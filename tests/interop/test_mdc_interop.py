"""Multi-destination-cast between Aeron Java 1.51 and sulis, both ways, on loopback: one publication
(either kind) sends every datagram to a sulis and an Aeron receiver, each on its own port; and a
multi-destination subscription (either kind) fed by a publication of the other kind through two ports.

Dynamic: the receivers join by naming the publication's control address (they probe it with
session-0 status messages before the stream exists, as Aeron's do); manual: the publisher adds both
destinations. ``fc=min,g:/2`` keeps the publication unconnected until both are there, so neither
joins late. The interop stream (tests/interop/stream.py) must arrive whole, in order and intact at
both. ``SULIS_INTEROP_MULTICAST_COUNT`` sets the messages (default 100,000)."""

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


def check(res: dict, h: peers.Harness) -> None:
    if res["problems"]:
        pytest.fail("MDC transfer failed:\n  " + "\n  ".join(res["problems"])
                    + f"\nchannel {res['channel']}\n{h.describe()}", pytrace=False)


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
