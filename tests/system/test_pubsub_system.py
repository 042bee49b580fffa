"""Offer/poll round trips on one driver: Header, Image and Publication fields,
reserved values, claims, buffer-protocol payloads, back pressure and
NOT_CONNECTED."""

from __future__ import annotations

import array
import gc

import numpy as np
import pytest

import sulis
from conftest import await_until, connected_pair, free_udp_port

UNFRAGMENTED = 0x80 | 0x40
DATA_FRAME = 1


def align32(n: int) -> int:
    return (n + 31) & ~31


def collect(sub, want: int, timeout: float = 10.0, limit: int = 10):
    """Polls until ``want`` fragments arrived: [(payload bytes, header)]."""
    got = []

    def handler(buffer, header):
        got.append((bytes(buffer), header))

    await_until(lambda: sub.poll(handler, limit) >= 0 and len(got) >= want, timeout, f"{want} fragments")
    return got


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "concurrent"])
def test_offer_poll_round_trip_and_header_fields(client, exclusive):
    sub, pub = connected_pair(client, 10, exclusive=exclusive)
    image = sub.images[0]
    positions = []
    for msg in [b"hello", b"", b"x" * 100, bytes(range(256)) * 5]:
        positions.append(pub.offer(msg))
    assert positions == [64, 96, 96 + 160, 256 + align32(32 + 1280)]
    assert pub.position == positions[-1]

    got = collect(sub, 4)
    assert [p for p, _ in got] == [b"hello", b"", b"x" * 100, bytes(range(256)) * 5]
    offsets = [0, 64, 96, 256]
    for (payload, h), position, offset in zip(got, positions, offsets, strict=True):
        assert h.position == position
        assert h.session_id == pub.session_id == image.session_id
        assert h.stream_id == pub.stream_id == 10
        assert h.term_id == image.initial_term_id == h.initial_term_id
        assert h.term_offset == offset
        assert h.flags == UNFRAGMENTED
        assert h.frame_type == DATA_FRAME
        assert h.frame_length == 32 + len(payload)
        assert h.reserved_value == 0
    assert image.position == positions[-1]
    assert "position=64" in repr(got[0][1])


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "concurrent"])
def test_reserved_value_via_offer_and_try_claim(client, exclusive):
    sub, pub = connected_pair(client, 11, exclusive=exclusive)
    assert pub.offer(b"a", reserved_value=-1234567890123) > 0
    assert pub.offer(b"b") > 0
    claim = pub.try_claim(3)
    assert isinstance(claim, sulis.BufferClaim)
    claim.buffer[:] = b"xyz"
    claim.reserved_value = 2**63 - 1
    claim.commit()
    assert pub.offer(b"d", reserved_value=0x0102030405060708) > 0
    got = collect(sub, 4)
    assert [(p, h.reserved_value) for p, h in got] == [
        (b"a", -1234567890123),
        (b"b", 0),
        (b"xyz", 2**63 - 1),
        (b"d", 0x0102030405060708),
    ]


def test_image_fields_and_end_of_stream(client):
    first = client.add_subscription("aeron:ipc", 12)
    pub = client.add_exclusive_publication("aeron:ipc", 12)
    await_until(lambda: pub.is_connected)
    for _ in range(3):
        assert pub.offer(b"before") > 0
    # A subscriber joining late starts where the existing subscriber is
    # (Aeron's IPC join position): at 0, as the first one has read nothing.
    late = client.add_subscription("aeron:ipc", 12)
    await_until(lambda: late.image_count == 1)
    image = late.images[0]
    assert image.session_id == pub.session_id
    assert image.correlation_id == pub.registration_id
    assert pub.position == 3 * 64
    assert image.join_position == first.images[0].position == 0
    assert image.position == image.join_position
    assert image.source_identity == "aeron:ipc"
    assert image.term_buffer_length == pub.term_buffer_length == 64 * 1024
    assert image.mtu_length == pub.max_payload_length + 32
    assert first.images[0].join_position == 0
    assert not image.is_end_of_stream and not image.is_closed

    assert pub.offer(b"after") > 0
    assert pub.offer(b"last") > 0
    pub.close()
    # Closed, but five messages are unread: not yet the end of the stream.
    assert not image.is_end_of_stream
    got = collect(late, 5)
    assert [p for p, _ in got] == [b"before"] * 3 + [b"after", b"last"]
    assert image.position == 5 * 64
    assert image.is_end_of_stream
    assert late.poll(lambda b, h: None, 10) == 0
    # The first subscriber drains too; then the driver withdraws both images.
    collect(first, 5)
    await_until(lambda: late.image_count == 0 and first.image_count == 0, what="images withdrawn after close")
    assert image.is_closed
    assert "end_of_stream=true" in repr(image)


def test_publication_fields(client):
    pub = client.add_exclusive_publication("aeron:ipc", 13)
    assert not pub.is_connected
    assert pub.position == 0
    assert pub.stream_id == 13
    assert pub.channel == "aeron:ipc"
    assert pub.term_buffer_length == 64 * 1024
    assert pub.max_message_length == 64 * 1024 // 8
    assert pub.max_payload_length == 1408 - 32
    assert isinstance(pub.session_id, int) and isinstance(pub.registration_id, int)
    sub = client.add_subscription("aeron:ipc", 13)
    await_until(lambda: pub.is_connected and sub.is_connected)
    # The driver lets the publisher run half a term ahead of the subscriber.
    await_until(lambda: pub.position_limit == 32 * 1024)
    assert pub.offer(b"12345678") == 64
    assert pub.position == 64
    assert sub.images[0].session_id == pub.session_id
    assert "stream_id=13" in repr(pub)

    big = client.add_exclusive_publication("aeron:ipc?term-length=1m|mtu=4096", 14)
    assert big.term_buffer_length == 1 << 20
    assert big.max_message_length == (1 << 20) // 8
    assert big.max_payload_length == 4096 - 32
    huge = client.add_exclusive_publication("aeron:ipc?term-length=256m", 15)
    assert huge.max_message_length == 16 * 1024 * 1024, "capped at 16 MiB"
    huge.close()


def test_concurrent_publications_share_a_session_and_exclusive_ones_do_not(client):
    sub = client.add_subscription("aeron:ipc", 16)
    a = client.add_publication("aeron:ipc", 16)
    b = client.add_publication("aeron:ipc", 16)
    x = client.add_exclusive_publication("aeron:ipc", 16)
    y = client.add_exclusive_publication("aeron:ipc", 16)
    assert a.session_id == b.session_id
    assert len({a.session_id, x.session_id, y.session_id}) == 3
    await_until(lambda: sub.image_count == 3, what="three images (one shared log, two exclusive)")
    assert {i.session_id for i in sub.images} == {a.session_id, x.session_id, y.session_id}
    for p, tag in ((a, b"a"), (b, b"b"), (x, b"x"), (y, b"y")):
        assert p.offer(tag) > 0
    got = collect(sub, 4)
    by_session = {}
    for payload, h in got:
        by_session.setdefault(h.session_id, []).append(payload)
    assert by_session == {a.session_id: [b"a", b"b"], x.session_id: [b"x"], y.session_id: [b"y"]}


def test_fixed_session_id(client):
    sub = client.add_subscription("aeron:ipc?session-id=4242", 17)
    other = client.add_exclusive_publication("aeron:ipc", 17)
    pub = client.add_exclusive_publication("aeron:ipc?session-id=4242", 17)
    assert pub.session_id == 4242
    await_until(lambda: pub.is_connected and sub.image_count == 1)
    assert not other.is_connected, "the subscription only accepts session 4242"
    assert [i.session_id for i in sub.images] == [4242]
    assert pub.offer(b"mine") > 0
    assert collect(sub, 1)[0][1].session_id == 4242


@pytest.mark.parametrize(
    "make",
    [bytes, bytearray, lambda b: memoryview(bytearray(b)), lambda b: memoryview(b).cast("I"),
     lambda b: np.frombuffer(b, np.uint8).copy(), lambda b: np.frombuffer(b, np.uint32).copy(),
     lambda b: np.frombuffer(b, np.float64).reshape(4, 6).copy(), lambda b: array.array("q", b),
     lambda b: memoryview(b"xx" + b)[2:]],
    ids=["bytes", "bytearray", "memoryview", "memoryview-u32", "numpy-u8", "numpy-u32", "numpy-2d-f64",
         "array-q", "memoryview-slice"],
)
@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "concurrent"])
def test_offer_accepts_any_contiguous_buffer(client, make, exclusive):
    sub, pub = connected_pair(client, 18, exclusive=exclusive)
    data = bytes(range(64)) * 3
    assert pub.offer(make(data)) > 0
    assert pub.offer(bytearray()) > 0
    assert pub.offer(np.zeros(0, np.int16)) > 0
    got = collect(sub, 3)
    assert [p for p, _ in got] == [data, b"", b""]


def test_offer_refuses_non_contiguous_and_non_buffer(client):
    sub, pub = connected_pair(client, 19)
    strided = memoryview(bytearray(64))[::2]
    with pytest.raises(BufferError, match="contiguous"):
        pub.offer(strided)
    with pytest.raises(BufferError, match="contiguous"):
        pub.offer(np.zeros((4, 6), np.float64, order="F"))
    with pytest.raises(BufferError, match="contiguous"):
        pub.offer(np.arange(20, dtype=np.int32)[::3])
    with pytest.raises(TypeError):
        pub.offer("text is not bytes")
    assert sub.poll(lambda b, h: None, 10) == 0


def test_handler_buffer_is_read_only_and_released_after_the_handler(client):
    sub, pub = connected_pair(client, 20)
    pub.offer(b"payload")
    kept = []

    def handler(buffer, header):
        assert buffer.readonly
        assert buffer.tobytes() == b"payload"
        with pytest.raises(TypeError):
            buffer[0] = 0
        kept.append(buffer)

    await_until(lambda: sub.poll(handler, 10) == 1)
    with pytest.raises(ValueError, match="released"):
        kept[0].tobytes()


def test_handler_exception_propagates_and_the_fragment_counts_as_consumed(client):
    sub, pub = connected_pair(client, 21)
    for m in (b"one", b"boom", b"three"):
        pub.offer(m)
    seen = []

    def handler(buffer, header):
        seen.append(bytes(buffer))
        if bytes(buffer) == b"boom":
            raise RuntimeError("handler failed")

    with pytest.raises(RuntimeError, match="handler failed"):
        await_until(lambda: sub.poll(handler, 10) == 3)
    assert seen == [b"one", b"boom"]
    await_until(lambda: sub.poll(handler, 10) == 1)
    assert seen == [b"one", b"boom", b"three"]


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "concurrent"])
def test_try_claim_commit_abort_and_context_manager(client, exclusive):
    sub, pub = connected_pair(client, 22, exclusive=exclusive)
    claim = pub.try_claim(5)
    assert claim.length == 5
    assert claim.position == 64
    view = claim.buffer
    assert not view.readonly and len(view) == 5
    view[:] = b"first"
    claim.commit()
    with pytest.raises(ValueError, match="released"):
        view[0] = 1  # the view is revoked on commit
    with pytest.raises(sulis.ClosedError):
        claim.commit()
    with pytest.raises(sulis.ClosedError):
        _ = claim.buffer

    aborted = pub.try_claim(8)
    aborted.buffer[:] = b"withdraw"
    aborted.abort()
    with pytest.raises(sulis.ClosedError):
        aborted.abort()

    with pub.try_claim(6) as c:
        c.buffer[:] = b"second"
    with pytest.raises(KeyError):
        with pub.try_claim(4) as c:
            c.buffer[:] = b"oops"
            raise KeyError("abort this claim")

    forgotten = pub.try_claim(7)
    forgotten.buffer[:] = b"dropped"
    del forgotten
    gc.collect()  # an uncommitted claim that is collected is aborted: it must not block the stream
    assert pub.offer(b"third") > 0

    got = collect(sub, 3)
    assert [p for p, _ in got] == [b"first", b"second", b"third"]
    assert sub.poll(lambda b, h: None, 10) == 0
    assert sub.images[0].position == pub.position


def test_try_claim_of_zero_and_max_payload(client):
    sub, pub = connected_pair(client, 23)
    with pub.try_claim(0):
        pass
    with pub.try_claim(pub.max_payload_length) as c:
        c.buffer[:] = b"\x5a" * pub.max_payload_length
    got = collect(sub, 2)
    assert got[0][0] == b""
    assert got[1][0] == b"\x5a" * pub.max_payload_length
    assert got[1][1].frame_length == pub.max_payload_length + 32


@pytest.mark.driver_options(publication_term_window_length="16k", term_buffer_length="64k")
@pytest.mark.parametrize("media", ["ipc", "udp"])
def test_the_channels_pub_wnd_wins_over_the_driver_option(client, media):
    base = "aeron:ipc" if media == "ipc" else f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    sep = "?" if media == "ipc" else "|"
    # The driver option sets the window of a channel without pub-wnd ...
    _, default = connected_pair(client, 25, channel=base, sub_channel=base)
    await_until(lambda: default.position_limit == 16 * 1024, what="the driver's window")
    # ... and a channel's pub-wnd, smaller or larger, replaces it (as in Aeron).
    for stream, wnd in ((26, 8), (27, 24)):
        _, pub = connected_pair(client, stream, channel=f"{base}{sep}pub-wnd={wnd}k", sub_channel=base)
        await_until(lambda p=pub, w=wnd: p.position_limit == w * 1024, what=f"pub-wnd={wnd}k")


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "concurrent"])
def test_back_pressure_when_the_subscriber_does_not_poll(client, exclusive):
    sub, pub = connected_pair(client, 24, exclusive=exclusive)
    await_until(lambda: pub.position_limit == 32 * 1024)
    msg = bytes(992)  # 1 KiB frames
    accepted = 0
    while (r := pub.offer(msg)) >= 0:
        accepted += 1
        assert accepted <= 64, "the publisher was never held back"
    assert r == sulis.BACK_PRESSURED
    assert sulis.result_name(r) == "BACK_PRESSURED"
    assert accepted == 32, "exactly the publication window (half a term) was accepted"
    assert pub.position == pub.position_limit == 32 * 1024
    assert pub.try_claim(10) == sulis.BACK_PRESSURED
    assert pub.offer(msg) == sulis.BACK_PRESSURED, "still held back"

    assert sub.poll(lambda b, h: None, 8) == 8
    await_until(lambda: pub.position_limit == 40 * 1024, what="the limit to follow the subscriber")
    got = 0
    while pub.offer(msg) >= 0:
        got += 1
    assert got == 8


def test_not_connected_without_subscriber(client):
    pub = client.add_publication("aeron:ipc", 25)
    xpub = client.add_exclusive_publication("aeron:ipc", 25)
    for p in (pub, xpub):
        assert not p.is_connected
        assert p.offer(b"nobody listens") is sulis.OfferResult.NOT_CONNECTED
        assert p.try_claim(4) is sulis.OfferResult.NOT_CONNECTED
        assert p.offer_batch([b"a", b"b"]) == (0, sulis.NOT_CONNECTED)
        assert p.offer_batch([b"a", b"b"])[1] is sulis.OfferResult.NOT_CONNECTED
        assert p.position == 0
    assert sulis.result_name(sulis.NOT_CONNECTED) == "NOT_CONNECTED"

    sub = client.add_subscription("aeron:ipc", 25)
    await_until(lambda: pub.is_connected and xpub.is_connected)
    position = pub.offer(b"now")
    assert position > 0 and type(position) is int, "positions stay plain ints"
    sub.close()
    await_until(lambda: not pub.is_connected and not xpub.is_connected, what="disconnect after the subscription closed")
    await_until(lambda: pub.offer(b"gone") == sulis.NOT_CONNECTED)
    assert xpub.offer(b"gone") == sulis.NOT_CONNECTED


def test_two_subscriptions_each_get_every_message_and_the_slowest_holds_back(client):
    fast = client.add_subscription("aeron:ipc", 26)
    slow = client.add_subscription("aeron:ipc", 26)
    pub = client.add_exclusive_publication("aeron:ipc", 26)
    await_until(lambda: pub.is_connected and fast.image_count and slow.image_count)
    received = {"fast": [], "slow": []}

    def poller(name):
        return lambda b, h: received[name].append(int.from_bytes(b[:4], "little"))

    # Phase 1: only the fast subscriber reads; the slow one holds the publisher back.
    sent = 0
    while (r := pub.offer(sent.to_bytes(4, "little") + bytes(988))) >= 0:
        sent += 1
        fast.poll(poller("fast"), 100)
    assert r == sulis.BACK_PRESSURED
    assert sent == 32 and pub.position == 32 * 1024
    await_until(lambda: fast.poll(poller("fast"), 100) >= 0 and len(received["fast"]) == sent)
    assert received["slow"] == []

    # Phase 2: both read; every message reaches both, in order.
    n = 200
    while sent < n:
        r = pub.offer(sent.to_bytes(4, "little") + bytes(400))
        if r >= 0:
            sent += 1
        else:
            assert r in (sulis.BACK_PRESSURED, sulis.ADMIN_ACTION)
            fast.poll(poller("fast"), 100)
            slow.poll(poller("slow"), 100)
    await_until(lambda: fast.poll(poller("fast"), 100) >= 0 and len(received["fast"]) == n)
    await_until(lambda: slow.poll(poller("slow"), 100) >= 0 and len(received["slow"]) == n)
    assert received["fast"] == received["slow"] == list(range(n))


def test_an_offer_is_true_only_when_it_went(client):
    """``if pub.offer(m):`` and ``while not pub.offer(m):`` read as they behave for every offer: the codes
    are false (a negative int would be true), positions and claims true, and a batch is true only whole."""
    assert all(not code for code in sulis.OfferResult)
    assert all(code < 0 for code in sulis.OfferResult), "still Aeron's numbers"
    pub = client.add_exclusive_publication("aeron:ipc?term-length=64k", 1260)
    assert not pub.offer(b"nobody listens")
    assert not pub.try_claim(4)
    batch = pub.offer_batch([b"a", b"b"])
    assert not batch and batch == (0, sulis.NOT_CONNECTED) and isinstance(batch, sulis.PublishedBatch)
    n, code = batch
    assert (n, code) == (0, sulis.OfferResult.NOT_CONNECTED)

    sub = client.add_subscription("aeron:ipc", 1260)
    await_until(lambda: pub.is_connected)
    assert pub.offer(b"now")
    claim = pub.try_claim(8)
    assert claim
    claim.commit()
    whole = pub.offer_batch([b"c", b"d"])
    assert whole and whole[0] == 2 and whole[1] == pub.position
    # Back pressure: the window (half a 64 KiB term) fills while nobody reads.
    sent = 0
    while pub.offer(b"x" * 1000):
        sent += 1
    assert pub.offer(b"x" * 1000) is sulis.OfferResult.BACK_PRESSURED and sent > 0
    stopped = pub.offer_batch([b"y" * 1000] * 4)
    assert not stopped and stopped[1] is sulis.OfferResult.BACK_PRESSURED
    sub.close()


def test_a_stream_id_that_is_not_a_32_bit_int_is_named_in_the_error(client):
    with pytest.raises(TypeError, match=r"stream_id must be an int, not str \('10'\)"):
        client.add_publication("aeron:ipc", "10")
    with pytest.raises(OverflowError, match=r"stream_id=2147483648: out of range; a stream id is a 32-bit signed int"):
        client.add_subscription("aeron:ipc", 2**31)
    with pytest.raises(TypeError, match=r"stream_id must be an int, not bool \(True\)"):
        client.add_exclusive_publication("aeron:ipc", True)
    assert client.add_publication("aeron:ipc", -(2**31)).stream_id == -(2**31), "the whole range is taken"


def test_untethered_subscriber_does_not_hold_back(client):
    tethered = client.add_subscription("aeron:ipc", 27)
    loose = client.add_subscription("aeron:ipc?tether=false", 27)
    pub = client.add_exclusive_publication("aeron:ipc", 27)
    await_until(lambda: pub.is_connected and tethered.image_count and loose.image_count)
    msg = bytes(992)
    for _ in range(20):
        assert pub.offer(msg) > 0
    # The tethered subscriber reads; the untethered one does not, yet the limit moves.
    assert tethered.poll(lambda b, h: None, 20) == 20
    await_until(lambda: pub.position_limit == 20 * 1024 + 32 * 1024, what="limit past the idle untethered reader")
