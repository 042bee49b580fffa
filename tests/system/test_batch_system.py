"""Subscription.poll_batch: Batch length and columns, read through the buffer
protocol by numpy and pyarrow without copies."""

from __future__ import annotations

import ctypes
import random

import numpy as np
import pyarrow as pa
import pytest

import sulis
from conftest import await_until, connected_pair

UNFRAGMENTED = 0xC0


def fill(pub, payloads, reserved=None):
    positions = []
    for i, p in enumerate(payloads):
        rv = reserved(i) if reserved else None
        r = pub.offer(p, reserved_value=rv) if rv is not None else pub.offer(p)
        assert r > 0, sulis.result_name(r)
        positions.append(r)
    return positions


@pytest.fixture
def pair(client):
    return connected_pair(client, 100)


def test_batch_columns_with_numpy(pair):
    sub, pub = pair
    rng = random.Random(1)
    payloads = [rng.randbytes(rng.randint(0, 300)) for _ in range(50)]
    positions = fill(pub, payloads, reserved=lambda i: i * 1000 - 7)
    batch = sub.poll_batch(4096)
    assert len(batch) == 50
    assert batch.nbytes == sum(map(len, payloads))
    offsets = np.frombuffer(batch.offsets, np.int32)
    lengths = np.frombuffer(batch.lengths, np.int32)
    assert offsets.shape == (51,)
    assert offsets[0] == 0 and offsets[-1] == batch.nbytes
    assert lengths.tolist() == [len(p) for p in payloads]
    assert np.array_equal(np.diff(offsets), lengths)
    assert np.frombuffer(batch.positions, np.int64).tolist() == positions
    assert np.frombuffer(batch.session_ids, np.int32).tolist() == [pub.session_id] * 50
    assert np.frombuffer(batch.flags, np.uint8).tolist() == [UNFRAGMENTED] * 50
    assert np.frombuffer(batch.reserved_values, np.int64).tolist() == [i * 1000 - 7 for i in range(50)]
    data = np.frombuffer(batch.data, np.uint8)
    assert [data[offsets[i]:offsets[i + 1]].tobytes() for i in range(50)] == payloads
    assert sub.images[0].position == positions[-1]
    # Columns also carry a format for memoryview.
    assert memoryview(batch.offsets).format == "i"
    assert memoryview(batch.positions).format == "q"
    assert memoryview(batch.flags).format == "B"
    assert memoryview(batch.positions).itemsize == 8
    assert memoryview(batch.positions).shape == (50,)
    assert len(batch.offsets) == 51 and len(batch.data) == batch.nbytes


def test_batch_to_pyarrow_without_copy(pair):
    sub, pub = pair
    rng = random.Random(2)
    payloads = [rng.randbytes(rng.randint(0, 400)) for _ in range(100)]
    fill(pub, payloads)
    batch = sub.poll_batch(4096)
    assert len(batch) == 100
    offsets_buf = pa.py_buffer(batch.offsets)
    data_buf = pa.py_buffer(batch.data)
    array = pa.BinaryArray.from_buffers(pa.binary(), len(batch), [None, offsets_buf, data_buf])
    array.validate(full=True)
    assert array.to_pylist() == payloads
    # Zero copy: arrow's buffers are the batch's own memory.
    assert data_buf.address == np.frombuffer(batch.data, np.uint8).ctypes.data
    assert offsets_buf.address == np.frombuffer(batch.offsets, np.int32).ctypes.data
    table = pa.table({"payload": array, "position": pa.array(np.frombuffer(batch.positions, np.int64))})
    assert table.num_rows == 100


def test_batch_outlives_later_polls_and_getitem(pair):
    sub, pub = pair
    fill(pub, [b"alpha", b"beta", b"gamma"])
    batch = sub.poll_batch()
    offsets = np.frombuffer(batch.offsets, np.int32)
    view = memoryview(batch.data)
    del batch  # the views keep the column (and the batch) alive
    # Overwrite the log region the batch was copied from: the batch is a copy.
    for _ in range(200):
        while pub.offer(b"Z" * 500) < 0:
            sub.poll_batch()
    assert view.tobytes() == b"alphabetagamma"
    assert offsets.tolist() == [0, 5, 9, 14]


def test_batches_dropped_at_once_reuse_one_buffer_and_stay_right(pair):
    """A reader that lets each batch go gets the next one in the same buffer; one that keeps a
    batch (or a column of it) keeps its contents."""
    sub, pub = pair
    kept = []
    for round_ in range(20):
        payloads = [bytes([round_]) * (1 + (round_ * 7 + i) % 100) for i in range(10)]
        fill(pub, payloads)
        batch = sub.poll_batch()
        assert [batch[i] for i in range(len(batch))] == payloads
        if round_ % 5 == 0:
            kept.append((np.frombuffer(batch.data, np.uint8), b"".join(payloads)))
        del batch
    for column, expected in kept:
        assert column.tobytes() == expected


def test_batch_item_access(pair):
    sub, pub = pair
    fill(pub, [b"a", b"", b"ccc"])
    batch = sub.poll_batch(10)
    assert [batch[0], batch[1], batch[2]] == [b"a", b"", b"ccc"]
    assert batch[-1] == b"ccc" and batch[-3] == b"a"
    assert batch.to_list() == [b"a", b"", b"ccc"]
    with pytest.raises(IndexError):
        batch[3]
    with pytest.raises(IndexError):
        batch[-4]
    assert "fragments=3" in repr(batch)


def test_empty_batch(pair):
    sub, pub = pair
    batch = sub.poll_batch()
    assert len(batch) == 0 and batch.nbytes == 0
    assert np.frombuffer(batch.offsets, np.int32).tolist() == [0]
    assert np.frombuffer(batch.positions, np.int64).size == 0
    array = pa.BinaryArray.from_buffers(pa.binary(), 0, [None, pa.py_buffer(batch.offsets), pa.py_buffer(batch.data)])
    assert array.to_pylist() == []


def test_fragment_limit(pair):
    sub, pub = pair
    fill(pub, [bytes([i]) for i in range(10)])
    first = sub.poll_batch(4)
    assert first.to_list() == [bytes([i]) for i in range(4)]
    rest = sub.poll_batch(100)
    assert rest.to_list() == [bytes([i]) for i in range(4, 10)]
    with pytest.raises(sulis.ConfigurationError, match="fragment_limit"):
        sub.poll_batch(0)


def test_columns_are_read_only(pair):
    sub, pub = pair
    fill(pub, [b"x"])
    batch = sub.poll_batch()
    with pytest.raises(TypeError, match="not writable"):
        ctypes.c_char.from_buffer(batch.data)
    assert memoryview(batch.data).readonly
    arr = np.frombuffer(batch.data, np.uint8)
    with pytest.raises(ValueError):
        arr[0] = 1


def test_batch_reads_on_across_term_boundaries(pair):
    """A batch is not cut short at a term boundary or by padding."""
    sub, pub = pair
    got = []
    sent = []
    rng = random.Random(4)
    while len(sent) < 400:
        p = rng.randbytes(rng.randint(0, 1300))
        r = pub.offer(p)
        if r > 0:
            sent.append(p)
        else:
            got.extend(sub.poll_batch(4096).to_list())
    await_until(lambda: got.extend(sub.poll_batch(4096).to_list()) or len(got) == len(sent))
    assert got == sent


def test_batch_of_fragmented_messages_lists_fragments(pair):
    sub, pub = pair
    msg = bytes(range(256)) * 12  # 3 fragments
    fill(pub, [msg, b"small"])
    batch = sub.poll_batch()
    assert len(batch) == 4
    assert np.frombuffer(batch.flags, np.uint8).tolist() == [0x80, 0x00, 0x40, UNFRAGMENTED]
    assert b"".join(batch.to_list()[:3]) == msg


def test_batch_from_several_images(client):
    sub = client.add_subscription("aeron:ipc", 101)
    a = client.add_exclusive_publication("aeron:ipc", 101)
    b = client.add_exclusive_publication("aeron:ipc", 101)
    await_until(lambda: a.is_connected and b.is_connected and sub.image_count == 2)
    fill(a, [b"a1", b"a2"])
    fill(b, [b"b1"])
    batch = sub.poll_batch()
    assert len(batch) == 3
    sessions = np.frombuffer(batch.session_ids, np.int32).tolist()
    pairs = sorted(zip(sessions, batch.to_list(), strict=True))
    assert pairs == sorted([(a.session_id, b"a1"), (a.session_id, b"a2"), (b.session_id, b"b1")])
