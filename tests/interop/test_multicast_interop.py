"""Multicast between Aeron Java 1.51 and sulis, both ways, and a mixed group.

Each peer is a process of its own (bench/peers/AeronPeer.java's stream roles, tests/interop/
sulis_peer.py) on a driver of its kind, over a multicast group on the loopback interface
(``interface=127.0.0.1``): data to the group, status messages and NAKs to the control group (+1).
The interop stream (tests/interop/stream.py: 8 bytes to 1 MiB + 4099, fragmented) must arrive
whole, in order and intact at every receiver. Aeron 1.15.1 is left out: its multicast stalls a
receiver on a bridge (issue 22), and 1.51 is what the issue asks for.

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
        pytest.fail("multicast transfer failed:\n  " + "\n  ".join(res["problems"])
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
