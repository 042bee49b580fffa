"""``clusterDir``: a cluster member's committed log as a ``format("sulis")`` source.

A cluster's log is one archive recording per member (extended at every term, as Aeron's is), named in
the member's ``recording.log``. Everything a member's log holds up to its commit position is the same on
every member and is never taken back; what lies past it may be truncated by the next election (a leader
that appended entries no quorum recorded). So the source reads a member's log recording like any other,
but never past the commit position:

* the recording is found from ``clusterDir/recording.log`` (its TERM entries), on the Spark driver;
* its readable end is ``min(recorded, commit)``, the commit position read from the member's
  ``Cluster commit-pos`` counter (type 203) in the counters of ``driverDir``'s media driver, so the
  Spark driver runs on the member's host. A position once seen committed stays readable in this process
  while the member restarts (its counter gone or starting lower); a batch read with no counter at all
  fails, naming why, rather than read entries an election could still take back. Both are
  ``sulis_spark::archive_catalog`` (Rust), the planner both implementations of the source run;
* rows are the log's session messages (the clients' messages and the services' ``cluster.offer`` into
  the log: Aeron's SessionMessageHeader, template 1 of schema 111), the 32-byte header decoded into
  columns and stripped from ``value``; the log's other entries (session opens and closes, timers,
  terms, cluster actions) are not rows. Offsets and ``position`` are log positions.

The header is read with numpy gathers over the Arrow buffers, no Python per message. Nothing here
imports pyspark.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["CLUSTER_FIELDS", "CLUSTER_DDL", "COMMIT_POSITION_TYPE_ID", "log_recording_ids", "session_messages"]

#: The metadata columns of a cluster log's rows (after ``value`` or the ``valueSchema`` fields).
CLUSTER_FIELDS = [
    pa.field("cluster_session_id", pa.int64()),
    pa.field("leadership_term_id", pa.int64()),
    pa.field("recording_id", pa.int64()),
    pa.field("position", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
]
CLUSTER_DDL = "cluster_session_id long, leadership_term_id long, recording_id long, position long, timestamp timestamp"

#: Aeron Cluster's schema and the SessionMessageHeader: an 8-byte SBE header and a 24-byte block
#: (leadershipTermId, clusterSessionId, timestamp).
SCHEMA_ID = 111
SESSION_MESSAGE_TEMPLATE_ID = 1
SESSION_HEADER_LENGTH = 32
#: The counter type of a member's commit position (Aeron's ``Cluster commit-pos``).
COMMIT_POSITION_TYPE_ID = 203


def log_recording_ids(cluster_dir: str) -> list[int]:
    """The log recordings named by ``cluster_dir/recording.log`` (one, on a member as Aeron keeps it);
    ``OptionError`` naming the directory when it has none."""
    from .. import _native

    return _native.spark_log_recording_ids(cluster_dir)


def session_messages(values: pa.Array, positions: np.ndarray) -> tuple[pa.Array, np.ndarray, list[pa.Array]]:
    """The session messages among the log entries ``values`` (whole messages, a binary array, possibly a
    slice) ending at ``positions``: their payloads, their positions, and the columns ``cluster_session_id``,
    ``leadership_term_id`` and ``timestamp`` (cluster time, ms, as a timestamp) from their headers."""
    n = len(values)
    _, offsets_buf, data_buf = values.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32)[values.offset: values.offset + n + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    begin = offsets[:-1].astype(np.int64)
    long_enough = np.diff(offsets) >= SESSION_HEADER_LENGTH
    head = begin[long_enough]

    def u16(at: int) -> np.ndarray:
        return data[head + at].astype(np.uint16) | (data[head + at + 1].astype(np.uint16) << 8)

    def i64(at: int, rows: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(data[rows[:, None] + (at + np.arange(8))]).view("<i8").reshape(-1)

    is_message = np.zeros(n, bool)
    is_message[long_enough] = (u16(2) == SESSION_MESSAGE_TEMPLATE_ID) & (u16(4) == SCHEMA_ID)
    rows = begin[is_message]
    kept = values if bool(is_message.all()) else values.filter(pa.array(is_message))
    # An explicit stop: pyarrow 26's binary_slice without one fails on some arrays ("Negative buffer resize").
    payloads = pc.binary_slice(kept, SESSION_HEADER_LENGTH, (1 << 31) - 1)
    timestamps = i64(24, rows)
    columns = [pa.array(i64(16, rows)), pa.array(i64(8, rows)),
               pa.array(timestamps * 1000, CLUSTER_FIELDS[4].type)]
    return payloads, positions[is_message], columns
