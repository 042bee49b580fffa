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

``readMode=auto`` (the default) reads files where the archive's directory is readable on the
executor's host, and replays elsewhere, so a cluster whose executors share the archive's host
and one whose executors do not run the same query. The directory is ``archiveDir`` if given;
else the one a sulis archive announces in its media driver's counters (type
``ARCHIVE_DIRECTORY_TYPE_ID``, label ``... dir=PATH``), found through the executor's own driver
and taken only if its mark file names the queried archive's id. An Aeron archive announces
none: its ranges are replayed.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from .errors import OptionError, ReadError
from .options import ReaderOptions
from .replay import RecordingRange, _Assembler, read_range
from .value_schema import ValueLayout

__all__ = ["CATALOG_FILE", "files_readable", "read_files", "read_partition_range", "check_archive_dir"]

#: The catalog file every archive directory holds (Aeron's name).
CATALOG_FILE = "archive.catalog"


#: The counter type a sulis archive announces its directory with (sulis_protocol's
#: ``SULIS_ARCHIVE_DIRECTORY``).
ARCHIVE_DIRECTORY_TYPE_ID = 9100
_DIR_MARKER = " dir="


def files_readable(archive_dir: str | None) -> bool:
    """True when ``archive_dir`` holds a readable archive catalog on this host."""
    return archive_dir is not None and os.access(os.path.join(archive_dir, CATALOG_FILE), os.R_OK)


def _mark_file_archive_id(archive_dir: str) -> int | None:
    from .. import _native

    try:
        mark = _native.archive_mark_file(archive_dir)
    except Exception:
        return None
    return None if mark is None else mark[2]


_announced: dict[tuple[str | None, int], str] = {}
_announced_lock = threading.Lock()


def announced_archive_dir(driver_dir: str | None, archive_id: int) -> str | None:
    """The directory of archive ``archive_id`` as announced in the counters of the media driver at
    ``driver_dir`` (this host's), if it is readable here and its mark file names that archive."""
    from .. import _native

    key = (driver_dir, archive_id)
    with _announced_lock:
        known = _announced.get(key)
    if known is not None and files_readable(known):
        return known
    try:
        counters = _native.CountersReader(driver_dir or _native.default_dir()).counters()
    except Exception:
        return None  # no driver here (or not readable): replay
    for c in counters:
        label = c.get("label", "")
        if c.get("type_id") != ARCHIVE_DIRECTORY_TYPE_ID or c.get("value") != archive_id or _DIR_MARKER not in label:
            continue
        found = label.split(_DIR_MARKER, 1)[1]
        if files_readable(found) and _mark_file_archive_id(found) == archive_id:
            with _announced_lock:
                _announced[key] = found
            return found
    return None


def read_files(archive_dir: str, r: RecordingRange, fragment_limit: int = 65536,
               layout: ValueLayout | None = None, timestamp: bool = False,
               cluster: bool = False) -> Iterator[pa.RecordBatch]:
    """The messages of ``r`` read from its segment files, as Arrow batches of ``replay.SCHEMA``."""
    from .. import ArchiveError, _native

    if r.end <= r.start:
        return
    if r.term_length <= 0:
        raise ReadError(f"recording {r.recording_id}: the range was planned without the recording's geometry")
    # Every message of the range ends at or before ``end`` (a frame boundary, at most ``replay_to``, what
    # was recorded when planned), so unlike a replay the files are never read past ``end``.
    reader = _native.RecordingFileReader(archive_dir, r.recording_id, r.recording_start, r.term_length,
                                         r.segment_length, r.initial_term_id, r.replay_from,
                                         min(r.end, r.replay_to))
    assembler = _Assembler(r, layout, timestamp, cluster)
    last = r.replay_from
    while last < r.end:
        try:
            batch = reader.read_batch(fragment_limit)
        except ArchiveError as e:
            raise ReadError(f"readMode=files, archive directory {archive_dir}: recording {r.recording_id} "
                               f"({r.start}, {r.end}]: {e}") from e
        if not len(batch):
            break  # replay_to reached
        last = int(np.frombuffer(memoryview(batch.positions), np.int64)[-1])
        yield from assembler.batches(batch)


_checked: dict[tuple[str, int], tuple[int, int, int, int]] = {}


def holds_recording(archive_dir: str, r: RecordingRange) -> bool:
    """Whether ``archive_dir``'s catalog has ``r``'s recording as the queried archive does (stream,
    session, term length, initial term id): archive ids are a driver's client id by default, so
    archives on two hosts can share one, and an executor must not read another archive's files."""
    from .. import _native

    want = (r.stream_id, r.session_id, r.term_length, r.initial_term_id)
    key = (archive_dir, r.recording_id)
    if _checked.get(key) == want:
        return True
    try:
        descriptors, _problems = _native.archive_describe(archive_dir)
    except Exception:
        return False
    for _state, d in descriptors:
        if d.recording_id == r.recording_id:
            got = (d.stream_id, d.session_id, d.term_buffer_length, d.initial_term_id)
            _checked[key] = got
            return got == want
    return False


def read_partition_range(opts: ReaderOptions, r: RecordingRange,
                         archive_id: int | None = None) -> Iterator[pa.RecordBatch]:
    """Reads ``r`` as ``readMode`` says: from the files, by replay, or files where they are readable.
    ``archive_id``: the queried archive's, to find the directory it announces when ``archiveDir``
    is not given."""
    mode = opts.read_mode
    files_dir = opts.archive_dir
    if files_dir is None and mode != "replay" and archive_id is not None:
        files_dir = announced_archive_dir(opts.archive.driver_dir, archive_id)
        if files_dir is not None and not holds_recording(files_dir, r):
            files_dir = None  # an archive of the same id that is not the queried one
    if mode == "auto":
        mode = "files" if files_readable(files_dir) else "replay"
    if mode == "files":
        if files_dir is None:
            raise OptionError(f"option readMode=files: no archiveDir given, and {opts.archive.describe()} "
                               f"(archive id {archive_id}) announces no directory readable on host "
                               f"{socket.gethostname()} through media driver {opts.archive.driver_dir or 'default'}")
        if not files_readable(files_dir):
            raise OptionError(f"option readMode=files: archiveDir {files_dir!r} holds no readable "
                               f"{CATALOG_FILE} on host {socket.gethostname()}; readMode=auto replays from "
                               f"{opts.archive.describe()} where the files are not local")
        yield from read_files(files_dir, r, opts.fragment_limit, opts.layout, opts.include_timestamp,
                              opts.cluster_dir is not None)
        return
    yield from read_range(opts.archive, r, opts.replay_channel, opts.replay_stream_id, opts.fragment_limit,
                          layout=opts.layout, timestamp=opts.include_timestamp, cluster=opts.cluster_dir is not None)


def check_archive_dir(archive_id: int, opts: ReaderOptions) -> None:
    """On the Spark driver: ``archiveDir``, where readable here, must be the queried archive's
    directory (its mark file names the archive id), else files would be read from another one."""
    from .. import _native

    if opts.read_mode == "replay" or not files_readable(opts.archive_dir):
        return
    assert opts.archive_dir is not None
    mark = _native.archive_mark_file(opts.archive_dir)
    if mark is not None and mark[2] != archive_id:
        raise OptionError(f"option archiveDir: {opts.archive_dir!r} is the directory of archive id {mark[2]}, "
                          f"but {opts.archive.describe()} is archive id {archive_id}")
