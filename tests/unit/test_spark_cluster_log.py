"""Rows from batches of messages through ``replay._Rows`` (the rules are ``sulis_spark::row_shape``, unit-tested
by ``cargo test -p sulis-spark row_shape``): what Arrow gets for a cluster log's entries and for ``valueSchema``
payloads, with no Spark and no cluster; and the ``clusterDir`` options. The whole source runs against three
``sulis cluster-node`` processes in ``tests/system/test_spark_cluster_log_system.py``."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

from sulis import _native
from sulis.spark.errors import RowError
from sulis.spark.options import OptionError, parse_reader_options
from sulis.spark.replay import RecordingRange, _Rows, ddl_for


def entry(template: int, block: bytes, schema: int = 111) -> bytes:
    """A log entry: the SBE header (block length, template, schema, version 16), then its block."""
    return struct.pack("<HHHH", len(block), template, schema, 16) + block


def session_message(term: int, session: int, time_ms: int, payload: bytes) -> bytes:
    return entry(1, struct.pack("<qqq", term, session, time_ms)) + payload


RANGE = RecordingRange(4, 100, 5, 0, 1 << 20, 0, 1 << 20)


def test_a_cluster_logs_session_messages_become_rows_and_other_entries_are_left_out():
    entries = [
        entry(21, struct.pack("<qqq", 0, 7, 1000) + b"\0" * 16),    # a SessionOpenEvent
        session_message(0, 7, 1_700_000_000_001, b"first"),
        session_message(0, 7, 1_700_000_000_002, b""),               # an empty payload is a row
        b"\x01\x02",                                                # shorter than a header: not a row
        entry(1, struct.pack("<qqq", 0, 7, 5), schema=112) + b"x",  # template 1 of another schema
        session_message(3, -9, 1_700_000_000_003, b"z" * 700),
    ]
    rows = _Rows(RANGE, cluster=True)
    batch = rows.of(_native.Batch.of(entries, [64 * (i + 1) for i in range(len(entries))]))
    assert batch.schema == rows.schema
    got = batch.to_pydict()
    assert got["value"] == [b"first", b"", b"z" * 700]
    assert got["position"] == [128, 192, 384]
    assert got["cluster_session_id"] == [7, 7, -9]
    assert got["leadership_term_id"] == [0, 0, 3]
    assert got["recording_id"] == [4, 4, 4]
    assert [t.timestamp() for t in got["timestamp"]] == [1_700_000_000.001, 1_700_000_000.002, 1_700_000_000.003]
    assert rows.of(_native.Batch.of([entry(25, b"\0" * 8)], [64])) is None
    assert ddl_for(None, cluster=True) == ("value binary, cluster_session_id bigint, leadership_term_id bigint, "
                                           "recording_id bigint, position bigint, timestamp timestamp")


def test_value_schema_columns_and_modes_in_arrow():
    tick = np.dtype([("instrument", "<i4"), ("price", "<f8"), ("ok", "u1"), ("at", "<i8")])
    ticks = np.zeros(20, tick)
    ticks["instrument"] = np.arange(20)
    ticks["price"] = 100 + np.arange(20) / 8
    ticks["ok"] = np.arange(20) % 2
    ticks["at"] = 1_700_000_000_000_000_000 + np.arange(20) * 1_000_000 - 1
    messages = [t.tobytes() for t in ticks]
    messages[7] = b"short"
    batch = _native.Batch.of(messages, [64 * (i + 1) for i in range(20)], list(range(20)))
    layout = "instrument int, price double, ok boolean, at timestamp"

    with pytest.raises(RowError, match=r"recording 4, message ending at position 512 is 5 bytes, the layout "
                                       r"\(instrument int, price double, ok boolean, at timestamp\) takes 21"):
        _Rows(RANGE, (layout, "FAILFAST", "_corrupt")).of(batch)

    rows = _Rows(RANGE, (layout, "PERMISSIVE", "raw"), timestamp=True)
    got = rows.of(batch)
    assert got.schema == rows.schema
    assert got.column_names == ["instrument", "price", "ok", "at", "raw", "recording_id", "stream_id", "session_id",
                                "position", "reserved_value", "timestamp"]
    d = got.to_pydict()
    keep = [i for i in range(20) if i != 7]
    assert [d["instrument"][i] for i in keep] == [int(ticks["instrument"][i]) for i in keep]
    assert [d["price"][i] for i in keep] == [float(ticks["price"][i]) for i in keep]
    assert [d["ok"][i] for i in keep] == [bool(ticks["ok"][i]) for i in keep]
    # nanoseconds to microseconds rounded down, as numpy's floor division did
    assert got.column("at").cast(pa.int64()).to_pylist()[0] == (1_700_000_000_000_000_000 - 1) // 1000
    assert (d["instrument"][7], d["price"][7], d["ok"][7], d["at"][7], d["raw"][7]) == (None,) * 4 + (b"short",)
    assert d["raw"][:7] == [None] * 7
    assert d["timestamp"][0] is None and d["timestamp"][1] is not None  # reserved value 0: not stamped
    assert got.column("instrument").null_count == 1

    dropped = _Rows(RANGE, (layout, "DROPMALFORMED", "_corrupt")).of(batch).to_pydict()
    assert dropped["position"] == [64 * (i + 1) for i in keep]


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
