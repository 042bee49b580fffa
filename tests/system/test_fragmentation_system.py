"""Fragmentation and reassembly: messages from 1 byte up to exactly
max_message_length arrive byte-exact through a FragmentAssembler; longer ones
and over-long claims raise MessageTooLongError."""

from __future__ import annotations

import itertools
import random

import pytest

import sulis
from conftest import await_until, connected_pair

BEGIN, END = 0x80, 0x40


def send_and_assemble(pub, sub, payloads, via_call=False):
    """Offers every payload (polling meanwhile) and returns [(bytes, header)]."""
    got = []
    asm = sulis.FragmentAssembler(lambda b, h: got.append((bytes(b), h)))
    handler = (lambda b, h: asm(b, h)) if via_call else asm
    positions = []
    for p in payloads:
        while (r := pub.offer(p)) < 0:
            assert r in (sulis.BACK_PRESSURED, sulis.ADMIN_ACTION), sulis.result_name(r)
            sub.poll(handler, 64)
        positions.append(r)
    await_until(lambda: sub.poll(handler, 64) >= 0 and len(got) >= len(payloads), 20, "every message")
    assert len(got) == len(payloads)
    return got, positions


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "concurrent"])
@pytest.mark.parametrize("via_call", [False, True], ids=["assembler", "assembler-called"])
def test_sizes_from_one_byte_to_max_message_length(client, exclusive, via_call):
    sub, pub = connected_pair(client, 90, exclusive=exclusive)
    mp, mm = pub.max_payload_length, pub.max_message_length
    assert (mp, mm) == (1376, 8192)
    sizes = sorted({1, 2, 31, 32, 33, mp - 1, mp, mp + 1, 2 * mp - 1, 2 * mp, 2 * mp + 1, 4096, mm - mp, mm - 1, mm})
    rng = random.Random(5)
    payloads = [rng.randbytes(n) for n in sizes]
    got, positions = send_and_assemble(pub, sub, payloads, via_call)
    for (data, h), p, position in zip(got, payloads, positions, strict=True):
        assert data == p, f"{len(p)}-byte message corrupted"
        assert h.flags == BEGIN | END
        assert h.frame_length == len(p) + 32
        assert h.position == position, f"{len(p)}-byte message: header position {h.position}, offer said {position}"
        assert h.session_id == pub.session_id


def test_max_message_length_of_a_larger_term(client):
    channel = "aeron:ipc?term-length=1m"
    sub, pub = connected_pair(client, 91, channel=channel)
    assert pub.max_message_length == 128 * 1024
    rng = random.Random(6)
    payloads = [rng.randbytes(n) for n in (pub.max_message_length, 100_000, 1, pub.max_message_length - 1)]
    got, _ = send_and_assemble(pub, sub, payloads)
    assert [d for d, _ in got] == payloads


def test_raw_fragments_carry_begin_and_end_flags(client):
    sub, pub = connected_pair(client, 92)
    mp = pub.max_payload_length
    msg = bytes(range(256)) * 12  # 3072 bytes: 1376 + 1376 + 320
    assert pub.offer(msg, reserved_value=99) > 0
    frags = []
    await_until(lambda: sub.poll(lambda b, h: frags.append((bytes(b), h.flags, h.reserved_value, h.term_offset)), 10)
                >= 0 and len(frags) == 3)
    assert [f[1] for f in frags] == [BEGIN, 0, END]
    assert [len(f[0]) for f in frags] == [mp, mp, len(msg) - 2 * mp]
    assert b"".join(f[0] for f in frags) == msg
    assert [f[2] for f in frags] == [99, 99, 99], "every fragment carries the reserved value"
    assert [f[3] for f in frags] == [0, 1408, 2816]


def test_assembler_keeps_sessions_apart(client):
    """Fragments of two publishers interleave in one subscription; each message
    is reassembled from its own session's fragments."""
    sub = client.add_subscription("aeron:ipc", 93)
    a = client.add_exclusive_publication("aeron:ipc", 93)
    b = client.add_exclusive_publication("aeron:ipc", 93)
    await_until(lambda: a.is_connected and b.is_connected and sub.image_count == 2)
    rng = random.Random(8)
    msgs = {a.session_id: [rng.randbytes(rng.randint(1400, 8000)) for _ in range(5)],
            b.session_id: [rng.randbytes(rng.randint(1400, 8000)) for _ in range(5)]}
    for i in range(5):
        assert a.offer(msgs[a.session_id][i]) > 0
        assert b.offer(msgs[b.session_id][i]) > 0
    got = {a.session_id: [], b.session_id: []}
    order = []

    def handler(buf, h):
        got[h.session_id].append(bytes(buf))
        order.append(h.session_id)

    asm = sulis.FragmentAssembler(handler)
    # One fragment per poll: the round-robin interleaves the two images' fragments.
    await_until(lambda: sub.poll(asm, 1) >= 0 and len(order) == 10, 20)
    assert got == msgs
    assert sum(x != y for x, y in itertools.pairwise(order)) >= 5, f"sessions did not interleave: {order}"


def test_assembler_drops_a_message_it_joined_in_the_middle_of(client):
    sub, pub = connected_pair(client, 94)
    big = bytes(range(200)) * 20  # 4000 bytes, 3 fragments
    assert pub.offer(big) > 0
    assert pub.offer(b"whole") > 0
    # Read the first fragment without the assembler, then switch to it.
    assert sub.poll(lambda b, h: None, 1) == 1
    got = []
    asm = sulis.FragmentAssembler(lambda b, h: got.append(bytes(b)))
    await_until(lambda: sub.poll(asm, 10) >= 0 and got == [b"whole"])
    assert asm.handler is not None


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "concurrent"])
def test_too_long_messages_and_claims_raise(client, exclusive):
    sub, pub = connected_pair(client, 95, exclusive=exclusive)
    mm, mp = pub.max_message_length, pub.max_payload_length
    with pytest.raises(sulis.MessageTooLongError, match=f"{mm + 1} bytes exceeds the maximum of {mm}"):
        pub.offer(bytes(mm + 1))
    with pytest.raises(sulis.MessageTooLongError):
        pub.offer(bytes(10 * mm))
    too_long = f"claim of {mp + 1} bytes exceeds the maximum payload length of {mp}"
    with pytest.raises(sulis.MessageTooLongError, match=too_long):
        pub.try_claim(mp + 1)
    with pytest.raises(sulis.MessageTooLongError):
        pub.try_claim(mm)
    assert issubclass(sulis.MessageTooLongError, sulis.ConfigurationError)
    # Nothing was appended by the refused calls; the publication still works.
    assert pub.position == 0
    assert pub.offer(bytes(mm)) > 0
    with pub.try_claim(mp) as claim:
        claim.buffer[:] = bytes(mp)
    assert sub.poll(sulis.FragmentAssembler(lambda b, h: None), 100) >= 1


def test_too_long_message_raises_even_without_a_subscriber(client):
    pub = client.add_publication("aeron:ipc", 96)
    assert pub.offer(bytes(pub.max_message_length)) == sulis.NOT_CONNECTED
    with pytest.raises(sulis.MessageTooLongError):
        pub.offer(bytes(pub.max_message_length + 1))
    with pytest.raises(sulis.MessageTooLongError):
        pub.try_claim(pub.max_payload_length + 1)


def test_too_long_message_raises_when_back_pressured(client):
    sub, pub = connected_pair(client, 97)
    while pub.offer(bytes(1000)) >= 0:
        pass
    assert pub.offer(bytes(10)) == sulis.BACK_PRESSURED
    with pytest.raises(sulis.MessageTooLongError):
        pub.offer(bytes(pub.max_message_length + 1))


def test_small_mtu_fragments_more(client):
    sub, pub = connected_pair(client, 98, channel="aeron:ipc?mtu=64")
    assert pub.max_payload_length == 32
    msg = bytes(range(100))
    raw = []
    assert pub.offer(msg) > 0
    await_until(lambda: sub.poll(lambda b, h: raw.append(bytes(b)), 10) >= 0 and len(raw) == 4)
    assert [len(r) for r in raw] == [32, 32, 32, 4]
    assert b"".join(raw) == msg
