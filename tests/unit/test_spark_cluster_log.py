"""``clusterDir``: the pieces of the cluster-log source that need no Spark and no cluster: its options and the
decoding of log entries into rows (the cut at the commit position is ``cargo test -p sulis-spark archive_catalog``;
the whole source runs against three ``sulis cluster-node`` processes in ``tests/system/test_spark_system.py``)."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

from sulis.spark.cluster_log import session_messages
from sulis.spark.options import OptionError, parse_reader_options
from sulis.spark.replay import RecordingRange, _Rows, ddl_for


def entry(template: int, block: bytes, schema: int = 111) -> bytes:
    """A log entry: the SBE header (block length, template, schema, version 16), then its block."""
    return struct.pack("<HHHH", len(block), template, schema, 16) + block


def session_message(term: int, session: int, time_ms: int, payload: bytes) -> bytes:
    return entry(1, struct.pack("<qqq", term, session, time_ms)) + payload


def test_session_messages_become_rows_and_other_entries_are_left_out():
    entries = [
        entry(21, struct.pack("<qqq", 0, 7, 1000) + b"\0" * 16),    # a SessionOpenEvent
        session_message(0, 7, 1_700_000_000_001, b"first"),
        session_message(0, 7, 1_700_000_000_002, b""),               # an empty payload is a row
        b"\x01\x02",                                                # shorter than a header: not a row
        entry(1, struct.pack("<qqq", 0, 7, 5), schema=112) + b"x",  # template 1 of another schema
        session_message(3, -9, 1_700_000_000_003, b"z" * 700),
    ]
    values = pa.array(entries, pa.binary())
    positions = np.arange(1, len(entries) + 1, dtype=np.int64) * 64
    payloads, kept, (sessions, terms, stamps) = session_messages(values, positions)
    assert payloads.to_pylist() == [b"first", b"", b"z" * 700]
    assert kept.tolist() == [128, 192, 384]
    assert sessions.to_pylist() == [7, 7, -9]
    assert terms.to_pylist() == [0, 0, 3]
    assert [t.timestamp() for t in stamps.to_pylist()] == [1_700_000_000.001, 1_700_000_000.002, 1_700_000_000.003]


def test_session_messages_of_a_slice_read_the_slice():
    entries = [session_message(1, i, 1000 + i, bytes([i]) * i) for i in range(6)]
    payloads, kept, (sessions, _, _) = session_messages(pa.array(entries, pa.binary()).slice(2, 3),
                                                        np.array([10, 20, 30], np.int64))
    assert payloads.to_pylist() == [b"\x02" * 2, b"\x03" * 3, b"\x04" * 4]
    assert sessions.to_pylist() == [2, 3, 4] and kept.tolist() == [10, 20, 30]


def test_session_messages_of_buffers_whose_offsets_do_not_start_at_zero():
    """A batch's columns are views on its buffers: the first message need not start the data buffer."""
    entries = [session_message(1, i, 1000 + i, bytes([65 + i]) * (i + 1)) for i in range(3)]
    data = b"\xff" * 40 + b"".join(entries)
    offsets = np.cumsum([40] + [len(e) for e in entries], dtype=np.int32)
    values = pa.BinaryArray.from_buffers(pa.binary(), 3, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    for array in (values, values.slice(1)):
        payloads, _, (sessions, _, _) = session_messages(array, np.arange(len(array), dtype=np.int64))
        assert payloads.to_pylist() == [bytes([65 + i]) * (i + 1) for i in range(3)][3 - len(array):]
        assert sessions.to_pylist() == list(range(3))[3 - len(array):]


def test_the_assembler_gives_cluster_rows_with_the_declared_schema():
    r = RecordingRange(4, 100, 5, 0, 1 << 20, 0, 1 << 20)
    asm = _Rows(r, cluster=True)
    values = pa.array([session_message(2, 11, 1000, b"abc"), entry(25, b"\0" * 8)], pa.binary())
    batch = asm.columns(values, np.array([64, 96], np.int64), np.zeros(2, np.int64))
    assert batch.schema == asm.schema
    assert batch.to_pylist()[0]["value"] == b"abc" and batch.num_rows == 1
    row = batch.to_pylist()[0]
    got = (row["cluster_session_id"], row["leadership_term_id"], row["recording_id"], row["position"])
    assert got == (11, 2, 4, 64)
    assert ddl_for(None, cluster=True) == ("value binary, cluster_session_id long, leadership_term_id long, "
                                           "recording_id long, position long, timestamp timestamp")


@pytest.mark.parametrize(("options", "message"), [
    ({"clusterDir": "/c", "channel": "aeron:ipc", "streamId": "1"}, "option clusterDir: give either clusterDir"),
    ({"clusterDir": "/c", "recordingIds": "3"}, "option clusterDir: give either clusterDir"),
    ({"clusterDir": "/c", "includeTimestamp": "true"}, "option includeTimestamp: not with clusterDir"),
    ({"clusterDir": "/c", "valueSchema": "price double, timestamp timestamp"},
     "option valueSchema: column 'timestamp' is a cluster log's own column"),
])
def test_cluster_dir_options_are_checked(options, message):
    with pytest.raises(OptionError, match=message):
        parse_reader_options(options)


def test_cluster_dir_alone_is_a_selection():
    opts = parse_reader_options({"clusterDir": "/data/cluster"})
    assert opts.cluster_dir == "/data/cluster" and "cluster member in /data/cluster" in opts.selection()
