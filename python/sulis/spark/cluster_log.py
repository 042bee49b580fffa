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
* rows are the log's session messages, their header decoded into columns and stripped from ``value``
  (``sulis_spark::row_shape``, which both implementations of the source run); the log's other entries are
  not rows. Offsets and ``position`` are log positions.

Nothing here imports pyspark.
"""

from __future__ import annotations

__all__ = ["COMMIT_POSITION_TYPE_ID", "log_recording_ids"]

#: The counter type of a member's commit position (Aeron's ``Cluster commit-pos``).
COMMIT_POSITION_TYPE_ID = 203


def log_recording_ids(cluster_dir: str) -> list[int]:
    """The log recordings named by ``cluster_dir/recording.log`` (one, on a member as Aeron keeps it);
    ``OptionError`` naming the directory when it has none."""
    from .. import _native

    return _native.spark_log_recording_ids(cluster_dir)

