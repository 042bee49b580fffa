"""Interoperability with real Aeron Java (1.15.1 on Java 11, current on Java 17).

Every test moves the interop message stream (tests/interop/stream.py: mixed
lengths from 8 bytes to 1 MiB + 4099, fragmented at MTU 1408) from a publisher
to a subscriber, each a separate process (the stream roles of
bench/peers/AeronPeer.java, tests/interop/sulis_peer.py), and checks that none
was lost, duplicated, reordered or corrupted and that both CRC-32s are right.

* ``test_*_udp``: Aeron Java and sulis, each on its own media driver, over
  ``aeron:udp?endpoint=127.0.0.1:<free port>``, in both directions.
* ``test_aeron_to_aeron_udp``: the same harness with Aeron on both sides (a
  fifth of the messages); if it fails, the environment (not sulis) is at fault.
* ``test_aeron_client_on_sulis_driver``: an Aeron Java client and a sulis
  client on one sulis driver over aeron:ipc (the current Aeron only: 1.15.1
  clients reject the CnC file version of newer drivers).

``SULIS_INTEROP_COUNT`` sets the number of messages (default 500,000, about
500 MB with ten 1 MiB messages: the suite's share of its 15 minutes; 1000000 for
the 1 GB run); the runs under 10 % loss move fewer (``SULIS_INTEROP_LOSSY_COUNT``,
default 100,000, about 100 MB: thousands of repaired gaps, in a twentieth of
the time), and fewer still into and out of Aeron 1.15.1, whose repair is slow.
Tests are skipped only when Java, javac or an Aeron jar is missing
(``bash bench/peers/install.sh`` installs them). Run them with
``pytest -m interop``; ``SULIS_INTEROP_KEEP=1`` keeps the driver directories of
failed tests.
"""

from __future__ import annotations

import json
import os

import peers  # noqa: E402
import pytest

COUNT = int(os.environ.get("SULIS_INTEROP_COUNT", "500000").replace("_", ""))

pytestmark = [
    pytest.mark.interop,
    pytest.mark.timeout(int(2 * peers.transfer_timeout(COUNT) + 180)),
]


@pytest.fixture(params=peers.VERSIONS, ids=lambda v: f"aeron-{v}")
def aeron(request) -> peers.AeronJava:
    return peers.usable(request.param)


@pytest.fixture
def current_aeron() -> peers.AeronJava:
    return peers.usable("current")


@pytest.fixture
def harness(request):
    """A peers.Harness whose processes are all stopped on teardown."""
    h = peers.Harness()
    yield h
    failed = any(getattr(getattr(request.node, f"rep_{w}", None), "failed", False) for w in ("setup", "call"))
    h.keep_dirs = failed and bool(os.environ.get("SULIS_INTEROP_KEEP"))
    h.close()


def check(res: dict, harness: peers.Harness, count: int = COUNT) -> None:
    """Fails with both peers' results (and the processes' output) unless the transfer was perfect."""
    if res["problems"]:
        pytest.fail(
            "interop transfer failed:\n  " + "\n  ".join(res["problems"])
            + f"\nchannel {res['channel']}\npublisher: {json.dumps(res['pub'])}\nsubscriber: {json.dumps(res['sub'])}"
            + f"\n{harness.describe()}",
            pytrace=False,
        )
    print(f"{res['channel']}: {count} messages, {res['sub']['bytes']} bytes in {res['sub']['seconds']} s "
          f"(pub {res['pub']['impl']}, sub {res['sub']['impl']})")


def test_aeron_pub_to_sulis_sub_udp(aeron, harness):
    check(peers.run_transfer(harness, "aeron", "sulis", COUNT, aeron), harness)


def test_sulis_pub_to_aeron_sub_udp(aeron, harness):
    check(peers.run_transfer(harness, "sulis", "aeron", COUNT, aeron), harness)


#: Aeron to Aeron checks the environment and the harness, not sulis: a fifth of the stream (every
#: length and fragmentation of it still) says as much, in a fifth of the time.
CONTROL_COUNT = min(COUNT, 200_000)


def test_aeron_to_aeron_udp(aeron, harness):
    check(peers.run_transfer(harness, "aeron", "aeron", CONTROL_COUNT, aeron), harness, CONTROL_COUNT)


@pytest.mark.parametrize("publisher, subscriber", [("aeron", "sulis"), ("sulis", "aeron")],
                         ids=["aeron-pub", "sulis-pub"])
def test_aeron_client_on_sulis_driver(current_aeron, harness, publisher, subscriber):
    check(peers.run_transfer(harness, publisher, subscriber, COUNT, current_aeron, driver="sulis"), harness)


# -- with loss ------------------------------------------------------------------

#: The sulis side's own loss generator drops 10 % of the data frames it sends or receives. An Aeron
#: sender ignores repeated NAKs for a range for 60 ms after resending it, so a lost retransmit
#: stalls a receiver window for that long: the sulis receiver gets a 2 MiB window (configuration,
#: as for the Aeron receiver below) so that a 1 GB run under loss takes seconds, not minutes.
SULIS_LOSS = {"loss_seed": 42, "initial_window_length": "2m", "socket_rcvbuf_length": "4m"}
#: An Aeron receiver repairs one gap per NAK round (1.15.1 waits 60 ms before each NAK and has
#: no property to change that), so under 10 % loss its throughput is its window per NAK delay.
#: A 2 MiB receiver window (Aeron's documented properties) keeps a 1 GB run within minutes.
AERON_LOSSY_RECEIVER = {"aeron.rcv.initial.window.length": 2 * 1024 * 1024, "aeron.socket.so_rcvbuf": 4 * 1024 * 1024}
#: Even so, Aeron 1.15.1 receiving under 10 % loss repairs under 1 MB/s here (measured: 68 MB in
#: 90 s), so a 1 GB run would take about 20 minutes: as the receiver under loss it gets
#: SLOW_LOSSY_COUNT messages and a longer timeout. As the sender under 10 % loss Aeron 1.15.1
#: moves about 2.5 MB/s here (200k messages, 195 MB, in 80 s; the current Aeron sends 12 MB/s into
#: the same sulis receiver), so it sends SLOW_LOSSY_SENDER_COUNT. The rest move LOSSY_COUNT.
#: The suite's default counts (halved on 2026-11-25: the suite was over its 15-minute budget) keep
#: every direction, version and kind of loss, each with hundreds to thousands of repaired gaps; set the
#: environment variables for the long runs (SULIS_INTEROP_LOSSY_COUNT=1000000 moves 1 GB under loss).
LOSSY_COUNT = min(COUNT, int(os.environ.get("SULIS_INTEROP_LOSSY_COUNT", "100000").replace("_", "")))
SLOW_LOSSY_COUNT = min(LOSSY_COUNT, 10_000)
SLOW_LOSSY_SENDER_COUNT = min(LOSSY_COUNT, 25_000)


def lossy_count(aeron: peers.AeronJava, aeron_receives: bool) -> tuple[int, float | None]:
    if aeron.version.startswith("1.15"):
        return (SLOW_LOSSY_COUNT, 400.0) if aeron_receives else (SLOW_LOSSY_SENDER_COUNT, 400.0)
    return LOSSY_COUNT, None


def test_aeron_pub_to_sulis_sub_udp_with_sulis_receive_loss(aeron, harness):
    count, timeout = lossy_count(aeron, aeron_receives=False)
    res = peers.run_transfer(harness, "aeron", "sulis", count, aeron, timeout=timeout,
                             sulis_driver_options={**SULIS_LOSS, "receive_data_loss": "random:0.1"})
    check(res, harness, count)


def test_sulis_pub_to_aeron_sub_udp_with_sulis_send_loss(aeron, harness):
    count, timeout = lossy_count(aeron, aeron_receives=True)
    res = peers.run_transfer(harness, "sulis", "aeron", count, aeron, timeout=timeout,
                             sulis_driver_options={**SULIS_LOSS, "send_data_loss": "random:0.1"},
                             aeron_driver_props=AERON_LOSSY_RECEIVER)
    check(res, harness, count)


@pytest.fixture
def lossy_path():
    """Two network namespaces over veth, each dropping 10 % of the UDP it receives (nftables)."""
    from netutil.netns import NetnsPair, require_netns  # noqa: PLC0415
    from netutil.nft import NftLoss, require_nft  # noqa: PLC0415

    require_netns()
    require_nft()
    with NetnsPair(prefix="sulis-iop-") as pair:
        losses = [NftLoss(pair.ns_a, 10, hook="input"), NftLoss(pair.ns_b, 10, hook="input")]
        yield pair, losses
        for loss in losses:
            loss.remove()


@pytest.mark.parametrize("publisher, subscriber", [("aeron", "sulis"), ("sulis", "aeron")],
                         ids=["aeron-pub", "sulis-pub"])
def test_across_namespaces_with_kernel_loss(aeron, harness, lossy_path, publisher, subscriber):
    """Aeron in one namespace, sulis in the other; nftables drops 10 % of datagrams each way."""
    pair, losses = lossy_path
    count, timeout = lossy_count(aeron, aeron_receives=subscriber == "aeron")
    res = peers.run_transfer(harness, publisher, subscriber, count, aeron, timeout=timeout,
                             netns={"aeron": pair.ns_a, "sulis": pair.ns_b},
                             sulis_driver_options=SULIS_LOSS,
                             aeron_driver_props=AERON_LOSSY_RECEIVER,
                             hosts={"aeron": pair.addr_a, "sulis": pair.addr_b})
    check(res, harness, count)
    dropped = sum(loss.dropped() for loss in losses)
    seen = sum(loss.seen() for loss in losses)
    print(f"nftables dropped {dropped} of {seen} datagrams ({100 * dropped / max(seen, 1):.1f} %)")
    assert dropped > 0.05 * seen


def test_checker_catches_loss_duplicates_and_corruption():
    """The subscriber-side check of sulis_peer.py (stream.Checker) is not blind."""
    import stream

    gen = stream.Generator()
    good = stream.Checker(1200)
    for i in range(1200):  # includes the first 1 MiB + 4099 message, i = 1000
        good.handler(gen.message(i), None)
    assert good.result() | {"seconds": None} == {
        **stream.expected_summary(1200), "errors": [], "error_count": 0, "last_index": 1199, "seconds": None}

    bad = stream.Checker(100)
    for i in range(100):
        if i == 50:
            continue  # lost
        msg = bytearray(stream.message(i))
        if i == 70:
            msg[100] ^= 0xFF  # corrupted
        if i == 80:
            msg = msg[:-1]  # truncated
        for _ in range(2 if i == 60 else 1):  # duplicated
            bad.handler(memoryview(msg), None)
    assert bad.result()["errors"] == [
        "message #50: index 51, expected 50 (gap)",
        "message #60: index 60, expected 61 (duplicate or reordered)",
        "message 70: content differs at byte 100 of 1377",
        "message 80: length 99, expected 100",
    ]
