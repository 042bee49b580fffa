"""``readMode=files``: a partition read straight from the recording's segment files.

When the archive's directory is on the executor's host (``archiveDir``), a range ``(start, end]``
is read from ``<recordingId>-<basePosition>.rec`` files by ``sulis._native.RecordingFileReader``
(Rust: the archive's checked segment reader, every frame header compared with where it lies)
into the same ``Batch`` columns a replay's ``poll_batch`` gives, and turned into Arrow batches by
the same ``_Assembler``: the rows, columns and values are those of ``readMode=replay``, with the
same ``(start, end]`` rule (``replay.py``). Nothing is asked of the archive or the media driver.

It reads from ``replay_from`` (a message boundary) up to ``end``, which is never past ``replay_to``
(what the archive had recorded when the range was planned: its stop position, or its recorded
position while live), since a live recording's current segment is being written beyond that. A torn or corrupt
frame fails the task naming the file, its offset and the position.

``readMode=auto`` (the default) reads files where ``archiveDir`` is given and readable on the
executor's host, and replays elsewhere, so a cluster whose executors share the archive's host
and one whose executors do not run the same query.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from .options import ReaderOptions
from .replay import RecordingRange, _Assembler, read_range
from .value_schema import ValueLayout

__all__ = ["CATALOG_FILE", "files_readable", "read_files", "read_partition_range", "check_archive_dir"]

#: The catalog file every archive directory holds (Aeron's name).
CATALOG_FILE = "archive.catalog"


def files_readable(archive_dir: str | None) -> bool:
    """True when ``archive_dir`` holds a readable archive catalog on this host."""
    return archive_dir is not None and os.access(os.path.join(archive_dir, CATALOG_FILE), os.R_OK)


def read_files(archive_dir: str, r: RecordingRange, fragment_limit: int = 65536,
               layout: ValueLayout | None = None, timestamp: bool = False) -> Iterator[pa.RecordBatch]:
    """The messages of ``r`` read from its segment files, as Arrow batches of ``replay.SCHEMA``."""
    from .. import ArchiveError, _native

    if r.end <= r.start:
        return
    if r.term_length <= 0:
        raise RuntimeError(f"recording {r.recording_id}: the range was planned without the recording's geometry")
    # Every message of the range ends at or before ``end`` (a frame boundary, at most ``replay_to``, what
    # was recorded when planned), so unlike a replay the files are never read past ``end``.
    reader = _native.RecordingFileReader(archive_dir, r.recording_id, r.recording_start, r.term_length,
                                         r.segment_length, r.initial_term_id, r.replay_from,
                                         min(r.end, r.replay_to))
    assembler = _Assembler(r, layout, timestamp)
    last = r.replay_from
    while last < r.end:
        try:
            batch = reader.read_batch(fragment_limit)
        except ArchiveError as e:
            raise RuntimeError(f"readMode=files, archive directory {archive_dir}: recording {r.recording_id} "
                               f"({r.start}, {r.end}]: {e}") from e
        if not len(batch):
            break  # replay_to reached
        last = int(np.frombuffer(memoryview(batch.positions), np.int64)[-1])
        yield from assembler.batches(batch)


def read_partition_range(opts: ReaderOptions, r: RecordingRange) -> Iterator[pa.RecordBatch]:
    """Reads ``r`` as ``readMode`` says: from the files, by replay, or files where they are readable."""
    mode = opts.read_mode
    if mode == "auto":
        mode = "files" if files_readable(opts.archive_dir) else "replay"
    if mode == "files":
        assert opts.archive_dir is not None
        if not files_readable(opts.archive_dir):
            raise RuntimeError(f"option readMode=files: archiveDir {opts.archive_dir!r} holds no readable "
                               f"{CATALOG_FILE} on host {socket.gethostname()}; readMode=auto replays from "
                               f"{opts.archive.describe()} where the files are not local")
        yield from read_files(opts.archive_dir, r, opts.fragment_limit, opts.layout, opts.include_timestamp)
        return
    yield from read_range(opts.archive, r, opts.replay_channel, opts.replay_stream_id, opts.fragment_limit,
                          layout=opts.layout, timestamp=opts.include_timestamp)


def check_archive_dir(archive_id: int, opts: ReaderOptions) -> None:
    """On the Spark driver: ``archiveDir``, where readable here, must be the queried archive's
    directory (its mark file names the archive id), else files would be read from another one."""
    from .. import _native
    from .options import OptionError

    if opts.read_mode == "replay" or not files_readable(opts.archive_dir):
        return
    assert opts.archive_dir is not None
    mark = _native.archive_mark_file(opts.archive_dir)
    if mark is not None and mark[2] != archive_id:
        raise OptionError(f"option archiveDir: {opts.archive_dir!r} is the directory of archive id {mark[2]}, "
                          f"but {opts.archive.describe()} is archive id {archive_id}")
