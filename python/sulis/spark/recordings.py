"""Recordings as the sink's journal sees them (what the source reads is planned by ``sulis_spark``, Rust).

Nothing here imports pyspark.
"""

from __future__ import annotations

from dataclasses import dataclass

from .replay import ArchiveSession

__all__ = ["RecordingInfo", "info_of", "stream_key", "recordings_of_stream"]

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
