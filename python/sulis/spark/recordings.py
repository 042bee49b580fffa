"""Planning on the Spark driver: which recordings are read, from which position to which, in which pieces.

Nothing here imports pyspark; ``datasource.py`` and ``stream_reader.py`` wrap it.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from .cluster_log import cap, commit_position, log_recording_ids, no_commit_position
from .errors import ArchiveUnavailableError, DataLossError, OptionError
from .options import ReaderOptions
from .replay import ArchiveSession, RecordingRange

__all__ = ["RecordingInfo", "DataLossError", "ArchiveUnavailableError", "list_selected", "describe",
           "resolve_positions", "plan_ranges"]

log = logging.getLogger("sulis.spark")

#: Recordings asked for per list request.
_PAGE = 1000


@dataclass(frozen=True)
class RecordingInfo:
    """A recording as planning needs it; ``end`` is its stop position, or the recorded position if live;
    ``stop_timestamp`` is the archive's time (ms) of its stop, -1 while it has none."""

    recording_id: int
    stream_id: int
    session_id: int
    start: int
    end: int
    term_length: int
    mtu_length: int
    live: bool
    segment_length: int = 0
    initial_term_id: int = 0
    stop_timestamp: int = -1
    #: a cluster log's recorded end when ``end`` is cut to the commit position, else -1
    recorded: int = -1

    @property
    def recorded_end(self) -> int:
        """What is recorded, whatever may be read of it: a recording truncated below a position read
        to lost data; one whose readable end is the commit position did not."""
        return max(self.end, self.recorded)


#: The cluster directories whose missing commit position was already logged.
_waiting_for_commit: set[str] = set()


def committed(r: RecordingInfo, opts: ReaderOptions, required: bool = False) -> RecordingInfo:
    """``r`` as a ``clusterDir`` query may read it: never past the member's commit position, and always
    live (a member's log goes on across its restarts). ``required``: no commit position known is an
    error (a batch read), else nothing is readable yet (a streaming query waits)."""
    if opts.cluster_dir is None:
        return r
    commit = commit_position(opts.cluster_dir, opts.archive.driver_dir)
    if commit is None:
        if required:
            raise no_commit_position(opts.cluster_dir, opts.archive.driver_dir)
        if opts.cluster_dir not in _waiting_for_commit:  # once: a streaming query asks many times a second
            _waiting_for_commit.add(opts.cluster_dir)
            log.warning("%s: no commit position known yet; nothing is read until the member runs",
                        opts.selection())
    recorded = r.recorded_end
    return dataclasses.replace(r, end=cap(recorded, r.start, commit), live=True, recorded=recorded)


def info_of(s: ArchiveSession, d) -> RecordingInfo:
    """A descriptor's recording with its current end."""
    end = d.stop_position
    live = False
    if end < 0:
        live_pos = s.archive.get_recording_position(d.recording_id)
        if live_pos >= 0:
            end, live = live_pos, True
        else:  # not recording, no stop position (an archive that was killed and not yet recovered it)
            end = max(d.start_position, s.archive.get_max_recorded_position(d.recording_id))
    return RecordingInfo(d.recording_id, d.stream_id, d.session_id, d.start_position, end,
                         d.term_buffer_length, d.mtu_length, live, d.segment_file_length, d.initial_term_id,
                         d.stop_timestamp if d.stop_position >= 0 else -1)


def describe(s: ArchiveSession, recording_id: int, opts: ReaderOptions) -> RecordingInfo | None:
    """The recording's current state as ``opts`` may read it, or None if the archive does not know it."""
    d = s.archive.list_recording(recording_id)
    return None if d is None else committed(info_of(s, d), opts)


def stream_key(channel: str, stream_id: int) -> str | None:
    """What the archive tells a stream by (``recording_key``: media, endpoint, session-id, ..., not
    ``alias`` or ``term-length``); None for a channel it cannot parse."""
    from .. import _native

    try:
        return _native.recording_key(channel, stream_id)
    except Exception:
        return None


def recordings_of_stream(s: ArchiveSession, channel: str, stream_id: int):
    """Every recording of the stream ``channel``/``stream_id`` (the same recording key, whatever its other
    parameters), a page of listings at a time."""
    key, media, from_id = stream_key(channel, stream_id), channel.split("?", 1)[0], 0
    while True:
        page = s.archive.list_recordings_for_uri(media, stream_id, from_id, _PAGE)
        yield from (d for d in page if stream_key(d.stripped_channel, d.stream_id) == key)
        if len(page) < _PAGE:
            return
        from_id = page[-1].recording_id + 1


def list_descriptors(s: ArchiveSession, opts: ReaderOptions, missing: list[int] | None = None):
    """The descriptors selected by ``opts``. By ids, every one must exist; with ``missing`` given, the
    ids the archive does not know are put there instead (a streaming query decides whether that is
    data loss)."""
    ids = opts.recording_ids if opts.cluster_dir is None else log_recording_ids(opts.cluster_dir)
    if ids is not None:
        found = []
        for rid in ids:
            d = s.archive.list_recording(rid)
            if d is None:
                if missing is not None:
                    missing.append(rid)
                    continue
                if opts.cluster_dir is not None:
                    raise OptionError(f"option clusterDir: the log recording {rid} that "
                                      f"{opts.cluster_dir}/recording.log names is unknown to "
                                      f"{opts.archive.describe()}: driverDir and controlChannel must reach the "
                                      "member's own archive")
                raise OptionError(f"option recordingIds: recording {rid} is unknown to {opts.archive.describe()} "
                                  "(never recorded there, or purged)")
            found.append(d)
        return found
    assert opts.channel is not None and opts.stream_id is not None
    found, from_id = [], 0
    while True:
        page = s.archive.list_recordings_for_uri(opts.channel, opts.stream_id, from_id, _PAGE)
        found.extend(page)
        if len(page) < _PAGE:
            return found
        from_id = page[-1].recording_id + 1


def list_selected(s: ArchiveSession, opts: ReaderOptions, missing: list[int] | None = None,
                  require_commit: bool = False) -> list[RecordingInfo]:
    """Every selected recording with its current positions, by recording id (``missing``: see
    ``list_descriptors``; ``require_commit``: see ``committed``)."""
    return sorted((committed(info_of(s, d), opts, require_commit) for d in list_descriptors(s, opts, missing)),
                  key=lambda r: r.recording_id)


def _check_keys(spec, infos: dict[int, RecordingInfo], option: str, opts: ReaderOptions) -> None:
    if isinstance(spec, dict):
        for rid in spec:
            if rid not in infos:
                raise OptionError(f"option {option}: recording {rid} is not among the recordings read "
                                  f"({opts.selection()}: {sorted(infos) or 'none'})")


def resolve_positions(infos: list[RecordingInfo], opts: ReaderOptions, streaming: bool = False
                      ) -> tuple[dict[int, int], dict[int, int]]:
    """Start and end position per recording, from ``startingPositions`` and ``endingPositions``
    (``sulis_spark::range_planner``, the rule both implementations of the source follow).

    Raises ``OptionError`` naming the option for a position outside what a recording holds; a
    start before the recording's (purged) start is data loss: ``DataLossError`` with
    ``failOnDataLoss=true``, else the start is moved up and a warning logged.
    """
    from .. import _native

    starts, ends, warnings = _native.spark_resolve_positions(
        infos, opts.starting, opts.ending, streaming, opts.fail_on_data_loss, opts.archive.describe(),
        opts.selection())
    for text in warnings:
        log.warning("%s", text)
    return starts, ends


def check_data_loss(r: RecordingInfo, start: int, opts: ReaderOptions) -> int:
    """``start``, or the recording's start if the bytes between are gone (see ``resolve_positions``)."""
    from .. import _native

    start, warning = _native.spark_check_data_loss(r.recording_id, r.start, start, opts.fail_on_data_loss,
                                                   opts.archive.describe())
    if warning:
        log.warning("%s", warning)
    return start


def plan_ranges(infos: dict[int, RecordingInfo], starts: dict[int, int], ends: dict[int, int],
                min_partitions: int) -> list[RecordingRange]:
    """The non-empty ranges ``(start, end]`` per recording, cut so there are at least ``min_partitions``
    when the data allows, bigger recordings into more pieces (Kafka's minPartitions): on term boundaries
    when the pieces are at least a term long, else on frames (``sulis_spark::range_planner``)."""
    from .. import _native

    return [RecordingRange(*t) for t in _native.spark_plan_ranges(list(infos.values()), starts, ends,
                                                                  min_partitions)]
