"""Planning on the Spark driver: which recordings are read, from which position to which, in which pieces.

Nothing here imports pyspark; ``datasource.py`` and ``stream_reader.py`` wrap it.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from .cluster_log import cap, commit_position, log_recording_ids, no_commit_position
from .errors import ArchiveUnavailableError, DataLossError, OptionError
from .options import EARLIEST, LATEST, ReaderOptions
from .replay import ArchiveSession, RecordingRange, replay_from

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
    """Start and end position per recording, from ``startingPositions`` and ``endingPositions``.

    Raises ``OptionError`` naming the option for a position outside what a recording holds; a
    start before the recording's (purged) start is data loss: ``DataLossError`` with
    ``failOnDataLoss=true``, else the start is moved up and a warning logged.
    """
    by_id = {r.recording_id: r for r in infos}
    _check_keys(opts.starting, by_id, "startingPositions", opts)
    if not streaming:
        _check_keys(opts.ending, by_id, "endingPositions", opts)
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    for r in infos:
        spec = opts.starting
        value = spec.get(r.recording_id, EARLIEST) if isinstance(spec, dict) else (
            EARLIEST if spec == "earliest" else LATEST)
        start = r.start if value == EARLIEST else r.end if value == LATEST else value
        end = r.end
        if not streaming:
            spec = opts.ending
            value = spec.get(r.recording_id, LATEST) if isinstance(spec, dict) else LATEST
            if value >= 0:
                if value > r.end:
                    raise OptionError(f"option endingPositions: position {value} of recording {r.recording_id} "
                                      f"is beyond what is recorded ({r.end})")
                end = value
        if start > r.end:
            raise OptionError(f"option startingPositions: position {start} of recording {r.recording_id} "
                              f"is beyond what is recorded ({r.end})")
        start = check_data_loss(r, start, opts)
        if end < start:
            raise OptionError(f"endingPositions: position {end} of recording {r.recording_id} is before its "
                              f"starting position {start}")
        starts[r.recording_id] = start
        ends[r.recording_id] = end
    return starts, ends


def check_data_loss(r: RecordingInfo, start: int, opts: ReaderOptions) -> int:
    """``start``, or the recording's start if the bytes between are gone (see ``resolve_positions``)."""
    if start >= r.start:
        return start
    text = (f"recording {r.recording_id}: positions {start} to {r.start} are no longer in {opts.archive.describe()} "
            "(purged, detached or truncated)")
    if opts.fail_on_data_loss:
        raise DataLossError(text + "; failOnDataLoss=true (set it to false to skip them)")
    log.warning("%s; skipped (failOnDataLoss=false)", text)
    return r.start


def split_points(start: int, end: int, pieces: int, term_length: int) -> list[int]:
    """``pieces - 1`` cut positions strictly inside ``(start, end)``, on term boundaries when the pieces
    are at least a term long (then no replay reads bytes it drops), else on 32-byte frame alignment."""
    length = end - start
    if pieces <= 1 or length < 64:
        return []
    step = length / pieces
    grain = term_length if step >= term_length else 32
    cuts: list[int] = []
    for k in range(1, pieces):
        c = start + round(step * k / grain) * grain
        c -= c % grain
        if start < c < end and (not cuts or c > cuts[-1]):
            cuts.append(c)
    return cuts


def plan_ranges(infos: dict[int, RecordingInfo], starts: dict[int, int], ends: dict[int, int],
                min_partitions: int) -> list[RecordingRange]:
    """The non-empty ranges ``(start, end]`` per recording, cut so there are at least ``min_partitions``
    when the data allows, bigger recordings into more pieces (Kafka's minPartitions)."""
    spans = [(rid, starts[rid], ends[rid]) for rid in sorted(starts) if ends[rid] > starts[rid]]
    total = sum(e - s for _, s, e in spans)
    ranges: list[RecordingRange] = []
    for rid, s, e in spans:
        r = infos[rid]
        pieces = 1
        if min_partitions > len(spans) and total > 0:
            pieces = max(1, -(-(e - s) * min_partitions // total))
        bounds = [s, *split_points(s, e, pieces, r.term_length), e]
        for a, b in zip(bounds, bounds[1:], strict=False):
            ranges.append(RecordingRange(rid, r.stream_id, r.session_id, a, b,
                                         replay_from(a, r.start, r.term_length), max(b, r.end),
                                         r.start, r.term_length, r.segment_length, r.initial_term_id))
    return ranges
