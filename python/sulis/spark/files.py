"""``readMode``: a partition read straight from the recording's segment files, or replayed.

When the archive's directory is on the executor's host, a range ``(start, end]`` is read from
``<recordingId>-<basePosition>.rec`` files (the archive's checked segment reader, every frame header
compared with where it lies) into the same messages a replay gives: the rows, columns and values are
those of ``readMode=replay``, with the same ``(start, end]`` rule (``replay.py``). Nothing is asked of
the archive or the media driver. It reads up to ``end``, never past ``replay_to`` (what the archive had
recorded when the range was planned), since a live recording's current segment is being written beyond
that. A torn or corrupt frame fails the task naming the file, its offset and the position.

``readMode=auto`` (the default) reads files where the archive's directory is readable on the executor's
host, and replays elsewhere, so a cluster whose executors share the archive's host and one whose
executors do not run the same query. The directory is ``archiveDir`` if given; else the one a sulis
archive announces in its media driver's counters (label ``... dir=PATH``), found through the executor's
own driver and taken only if its mark file names the queried archive's id and its catalog has the
recording as the queried archive does. An Aeron archive announces none: its ranges are replayed.

Which it is, and the reading, is ``sulis_spark::partition_reader`` and ``archive_files`` (Rust): the
reader both implementations of the source run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pyarrow as pa

from .options import ReaderOptions
from .replay import RecordingRange, read_range

__all__ = ["ARCHIVE_DIRECTORY_TYPE_ID", "announced_archive_dir", "holds_recording", "read_partition_range"]

#: The counter type a sulis archive announces its directory with (sulis_protocol's
#: ``SULIS_ARCHIVE_DIRECTORY``).
ARCHIVE_DIRECTORY_TYPE_ID = 9100


def announced_archive_dir(driver_dir: str | None, archive_id: int) -> str | None:
    """The directory of archive ``archive_id`` as announced in the counters of the media driver at
    ``driver_dir`` (this host's), if it is readable here and its mark file names that archive."""
    from .. import _native

    return _native.spark_announced_archive_dir(driver_dir, archive_id)


def holds_recording(archive_dir: str, r: RecordingRange) -> bool:
    """Whether ``archive_dir``'s catalog has ``r``'s recording as the queried archive does (stream,
    session, term length, initial term id)."""
    from .. import _native

    return _native.spark_holds_recording(archive_dir, dataclasses.astuple(r))


def read_partition_range(opts: ReaderOptions, r: RecordingRange,
                         archive_id: int | None = None) -> Iterator[pa.RecordBatch]:
    """Reads ``r`` as ``readMode`` says: from the files, by replay, or files where they are readable.
    ``archive_id``: the queried archive's, to find the directory it announces when ``archiveDir``
    is not given."""
    yield from read_range(opts.archive, r, opts.replay_channel, opts.replay_stream_id, opts.fragment_limit,
                          value_schema=opts.value_schema, timestamp=opts.include_timestamp,
                          cluster=opts.cluster_dir is not None,
                          read_mode=opts.read_mode, archive_dir=opts.archive_dir, archive_id=archive_id)
