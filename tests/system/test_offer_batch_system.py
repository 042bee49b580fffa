"""Publication.offer_batch: many messages in one call, from Arrow arrays,
(data, offsets) buffers or a sequence, for both publication kinds."""

from __future__ import annotations

import array

import numpy as np
import pyarrow as pa
import pytest

import sulis
from conftest import await_until

KINDS = ["concurrent", "exclusive"]


def pair(client, kind, stream=1):
    sub = client.add_subscription("aeron:ipc", stream)
    add = client.add_exclusive_publication if kind == "exclusive" else client.add_publication
    pub = add("aeron:ipc", stream)
    await_until(lambda: pub.is_connected and sub.image_count == 1)
    return sub, pub


def drain(sub, n=None):
    got = []
    asm = sulis.FragmentAssembler(lambda b, h: got.append(bytes(b)))
    if n is None:
        while sub.poll(asm, 1000):
            pass
    else:
        await_until(lambda: sub.poll(asm, 1000) >= 0 and len(got) >= n, what=f"{n} messages")
    return got


@pytest.mark.parametrize("kind", KINDS)
def test_every_input_form_publishes_each_element_as_one_message(client, kind):
    sub, pub = pair(client, kind)
    words = [b"alpha", b"", b"c" * 300, b"delta"]
    arr = pa.array(words, pa.binary())
    forms = [
        (arr, words),
        (pa.array(words, pa.large_binary()), words),
        (pa.array(["x", "yz"], pa.string()), [b"x", b"yz"]),
        (pa.array(["é"], pa.large_string()), ["é".encode()]),
        (arr.slice(1, 2), words[1:3]),  # an array with an offset
        (pa.chunked_array([arr.slice(2), pa.array([b"z"])]), words[2:] + [b"z"]),
        (words, words),
        ((bytearray(b"ba"), memoryview(b"mv"), np.frombuffer(b"np", np.uint8)), [b"ba", b"mv", b"np"]),
    ]
    expected = []
    for messages, want in forms:
        before = pub.position
        count, position = pub.offer_batch(messages)
        assert count == len(want)
        assert position == pub.position > before
        expected += want
    data = b"hello, world"
    for offsets in (np.array([0, 5, 6, 12], np.int32), np.array([0, 5, 6, 12], np.int64),
                    array.array("i", [0, 5, 6, 12]), np.array([0, 5, 6, 12], np.int32).tobytes()):
        assert pub.offer_batch(data=data, offsets=offsets)[0] == 3
        expected += [b"hello", b",", b" world"]
    assert drain(sub, len(expected)) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_an_empty_batch_publishes_nothing(client, kind):
    sub, pub = pair(client, kind)
    position = pub.position
    assert pub.offer_batch([]) == (0, position)
    assert pub.offer_batch(pa.array([], pa.binary())) == (0, position)
    assert pub.offer_batch(data=b"", offsets=np.array([0], np.int32)) == (0, position)
    assert drain(sub) == []


@pytest.mark.parametrize("kind", KINDS)
def test_messages_longer_than_an_mtu_are_fragmented(client, kind):
    sub, pub = pair(client, kind)
    big = [bytes([i]) * (pub.max_payload_length * 3 + i) for i in range(4)]
    assert pub.offer_batch(pa.array(big))[0] == 4
    assert drain(sub, 4) == big


@pytest.mark.parametrize("kind", KINDS)
def test_back_pressure_stops_the_batch_and_the_rest_goes_later_in_order(client, kind):
    sub, pub = pair(client, kind)
    messages = [i.to_bytes(4, "little") * 25 for i in range(20_000)]  # 100 B each, far more than a 64 KiB term
    arr = pa.array(messages, pa.binary())
    sent = 0
    got = []
    asm = sulis.FragmentAssembler(lambda b, h: got.append(bytes(b)))
    stops = 0
    while sent < len(messages):
        count, result = pub.offer_batch(arr.slice(sent))
        sent += count
        if sent < len(messages):
            assert result == sulis.BACK_PRESSURED, sulis.result_name(result)
            stops += 1
        else:
            assert result == pub.position
        sub.poll(asm, 10_000)
    await_until(lambda: sub.poll(asm, 10_000) >= 0 and len(got) == len(messages))
    assert got == messages
    assert stops > 0


def test_not_connected_publishes_nothing(client):
    pub = client.add_publication("aeron:ipc", 9)
    assert pub.offer_batch([b"a", b"b"]) == (0, sulis.NOT_CONNECTED)


@pytest.mark.parametrize("kind", KINDS)
def test_bad_batches_are_refused_whole_with_a_clear_error(client, kind):
    sub, pub = pair(client, kind)
    too_long = b"y" * (pub.max_message_length + 1)
    with pytest.raises(sulis.MessageTooLongError, match="message 1 of .* nothing was published"):
        pub.offer_batch(pa.array([b"x", too_long]))
    with pytest.raises(ValueError, match="null entries"):
        pub.offer_batch(pa.array([b"x", None]))
    with pytest.raises(TypeError, match="not int64"):
        pub.offer_batch(pa.array([1, 2]))
    with pytest.raises(ValueError, match="decreasing or outside the data"):
        pub.offer_batch(data=b"abc", offsets=np.array([0, 2, 1], np.int32))
    with pytest.raises(ValueError, match="outside the data"):
        pub.offer_batch(data=b"abc", offsets=np.array([0, 4], np.int32))
    with pytest.raises(TypeError, match="int32 or int64"):
        pub.offer_batch(data=b"abc", offsets=np.array([0.0, 1.0]))
    with pytest.raises(TypeError, match="data= and offsets="):
        pub.offer_batch(data=b"abc")
    with pytest.raises(TypeError, match="sequence of bytes-like"):
        pub.offer_batch(5)
    assert drain(sub) == []
    # In a sequence the messages before a bad one are already out, and the error says so.
    with pytest.raises(sulis.MessageTooLongError, match="the 1 before it were published"):
        pub.offer_batch([b"x", too_long])
    assert drain(sub, 1) == [b"x"]


def test_closed_publication_raises(client):
    sub, pub = pair(client, "exclusive")
    pub.close()
    with pytest.raises(sulis.ClosedError):
        pub.offer_batch(pa.array([b"x"]))


@pytest.mark.parametrize("kind", KINDS)
def test_reserved_values_stamp_each_message_and_every_fragment_of_it(client, kind):
    sub, pub = pair(client, kind)
    big = b"f" * (pub.max_payload_length * 2 + 5)  # three fragments
    words = [b"one", big, b"three"]
    stamps = np.array([1_700_000_000_000_000_001, -2, 3], np.int64)
    assert pub.offer_batch(pa.array(words, pa.binary()), reserved_values=stamps)[0] == 3
    assert pub.offer_batch(words, reserved_values=stamps * 10)[0] == 3  # the sequence form
    assert pub.offer_batch(data=b"abc", offsets=np.array([0, 1, 3], np.int32),
                           reserved_values=array.array("q", [7, 8]))[0] == 2
    assert pub.offer_batch([b"x", b"y"], reserved_values=42)[0] == 2  # one value for all
    assert pub.offer_batch([b"z"])[0] == 1  # none: 0, as offer() without one
    got: list[tuple[bytes, int]] = []
    asm = sulis.FragmentAssembler(lambda b, h: got.append((bytes(b), h.reserved_value)))
    await_until(lambda: sub.poll(asm, 1000) >= 0 and len(got) >= 11, what="11 messages")
    assert got == [*zip(words, stamps.tolist(), strict=True), *zip(words, (stamps * 10).tolist(), strict=True),
                   (b"a", 7), (b"bc", 8), (b"x", 42), (b"y", 42), (b"z", 0)]
    # Every fragment of the fragmented message carries it (what a batch reader sees per fragment).
    pub.offer_batch([big], reserved_values=np.array([99], np.int64))
    batches = []
    await_until(lambda: batches.append(sub.poll_batch(100)) or sum(len(b) for b in batches) >= 3)
    assert [int(v) for b in batches for v in np.frombuffer(b.reserved_values, np.int64)] == [99, 99, 99]
    with pytest.raises(ValueError, match="2 reserved_values for 3 messages"):
        pub.offer_batch(words, reserved_values=np.array([1, 2], np.int64))
    with pytest.raises(TypeError, match="reserved_values must be an int or int64 values"):
        pub.offer_batch(words, reserved_values=np.array([1, 2, 3], np.int32))
