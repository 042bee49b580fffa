"""ReplayMerge: catch up on a stream from its recording, then go on with the
live stream, with no gap and no message twice.

Aeron's ReplayMerge needs a multi-destination subscription on UDP that both
the replay and the live stream feed; this one needs neither, so it works
over IPC as well as UDP. It reads the replay until the recording is close
to its live end, then subscribes to the live stream (that publication's
session only). The live image joins at some position J; the replay is read
up to exactly J (``bounded_poll``, so a frame is never delivered from both)
and then the replay stops and reads go to the live image. When the replay
went past J (it was read before J was known, or a term's padding took it
past), the live image skips what the replay delivered as that part arrives
(it is never moved past what it has received: the recording may be ahead
of the live stream's sender, a spy recording the publication's log). Both carry the
recording's session id, so a ``FragmentAssembler`` handler goes on
assembling across the switch. The work is done inside ``poll`` and
``poll_batch``; the fragments themselves are read in Rust as by any
subscription.

If the live image goes away (it ended, or the driver joined the session
again further on: a receiver whose first status message came a term or more
after the sender had moved on cannot get what it joined at), the merge is
not over: whatever the live stream holds past that point is not read; the
replay starts again from ``position`` and the merge is made again with the
new image (``rejoins`` counts how often). Nothing is skipped or read twice.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import _native

if TYPE_CHECKING:
    from . import ArchiveClient

__all__ = ["ReplayMerge", "ReplayMergeState"]


class ReplayMergeState(enum.Enum):
    """Where a ReplayMerge is."""

    REPLAY = "replay"
    """Reading the replay; the live stream is not subscribed yet."""
    LIVE_JOIN = "live-join"
    """Subscribed to the live stream; reading the replay up to where the live image joined."""
    MERGED = "merged"
    """Reading the live stream; the replay is stopped."""
    FAILED = "failed"
    """No progress within the merge timeout, or an error; see ``ReplayMerge.error``."""
    CLOSED = "closed"


def _with_param(channel: str, key: str, value: object) -> str:
    return str(_native.ChannelUri(channel).with_param(key, value))


class ReplayMerge:
    """Replays recording ``recording_id`` from ``position`` (default: its
    start) on ``replay_channel``/``replay_stream_id``, then merges with the
    live stream on ``live_channel``/``live_stream_id`` (default: the
    recording's stream id).

    Poll it as a subscription: ``poll(handler, fragment_limit)`` or
    ``poll_batch(fragment_limit)``; ``is_merged`` turns true once reads come
    from the live stream. ``merge_timeout`` seconds without progress (the
    position not moving and no step taken) fail it with ``ArchiveError``.
    ``live_add_threshold`` is how close (bytes) the replay must be to the
    recorded end before the live stream is subscribed (default: a quarter
    term, at most 32 MiB, as Aeron's).

    On IPC the replay needs a stream id of its own (the live publication
    holds the recording's session id on the live stream).
    """

    def __init__(self, archive: ArchiveClient, recording_id: int, replay_channel: str,
                 replay_stream_id: int, live_channel: str, live_stream_id: int | None = None,
                 position: int | None = None, merge_timeout: float = 5.0,
                 live_add_threshold: int | None = None,
                 recorded_position_interval: float = 0.01) -> None:
        d = archive.list_recording(recording_id)
        if d is None:
            raise _native.ArchiveError(f"ReplayMerge: unknown recording id {recording_id}")
        live_stream_id = d.stream_id if live_stream_id is None else live_stream_id
        if replay_channel.startswith("aeron:ipc") and live_channel.startswith("aeron:ipc") \
                and replay_stream_id == live_stream_id:
            raise _native.ConfigurationError(
                f"ReplayMerge: on IPC the replay needs a stream id other than the live one ({live_stream_id})")
        for name, channel in (("replay_channel", replay_channel), ("live_channel", live_channel)):
            if "session-id=" in channel:
                raise _native.ConfigurationError(
                    f"ReplayMerge: leave session-id out of {name} '{channel}': "
                    f"it is the recording's ({d.session_id})")
        self._archive = archive
        self._client = archive._client
        self.recording_id = recording_id
        self.session_id = d.session_id
        self._live_channel = _with_param(live_channel, "session-id", d.session_id)
        self._live_stream_id = live_stream_id
        self._threshold = (min(d.term_buffer_length // 4, 32 << 20) if live_add_threshold is None
                           else live_add_threshold)
        self._timeout = merge_timeout
        self._interval = recorded_position_interval
        self.state = ReplayMergeState.REPLAY
        self.error: _native.ArchiveError | None = None
        self._live: _native.Subscription | None = None
        # The live image the merge is bound to (its join position is the bound), then reads.
        self._live_image: _native.Image | None = None
        self._image: _native.Image | None = None
        self.rejoins = 0
        """How often the live image went away and the merge started again from the replay."""
        self.merges = 0
        """How often the merge moved onto a live image (once, plus once for each rejoin that merged again)."""
        self._bound: int | None = None
        # After the merge: the live image skips up to here (the replay delivered it).
        self._skip_to: int | None = None
        self._position = d.start_position if position is None else position
        self._next_check = 0.0
        # The replay carries the recording's session id, as the live stream does.
        self._replay_channel = _with_param(replay_channel, "session-id", d.session_id)
        self._replay_stream_id = replay_stream_id
        self._replay_sub: _native.Subscription | None = None
        self._replay_id: int | None = None
        self._start_replay(position)
        self._progress_at = time.monotonic()

    def _start_replay(self, position: int | None) -> None:
        self._replay_sub = self._client.add_subscription(self._replay_channel, self._replay_stream_id)
        try:
            self._replay_id = self._archive.start_replay(
                self.recording_id, self._replay_channel, self._replay_stream_id, position=position, follow=True)
        except BaseException:
            self._replay_sub.close()
            self._replay_sub = None
            raise

    # -- state --------------------------------------------------------------

    @property
    def is_merged(self) -> bool:
        return self.state is ReplayMergeState.MERGED

    @property
    def position(self) -> int:
        """The stream position read up to (the recording's positions)."""
        image = self._image
        position = self._position if image is None else image.position
        return position if self._skip_to is None else max(position, self._skip_to)

    @property
    def image(self) -> _native.Image | None:
        """The image read now: the replay's, then the live one."""
        return self._image

    def _moved(self, now: float) -> None:
        self._progress_at = now

    def _fail(self, message: str) -> None:
        self.state = ReplayMergeState.FAILED
        self.error = _native.ArchiveError(f"ReplayMerge of recording {self.recording_id}: {message}")
        self._stop_replay()
        raise self.error

    def _stop_replay(self) -> None:
        if self._replay_id is not None:
            replay_id, self._replay_id = self._replay_id, None
            try:
                self._archive.stop_replay(replay_id)
            except _native.ArchiveError:
                pass  # it may have ended already
        if self._replay_sub is not None:
            self._replay_sub.close()
            self._replay_sub = None

    def _work(self) -> None:
        now = time.monotonic()
        if self.state in (ReplayMergeState.FAILED, ReplayMergeState.CLOSED):
            if self.error is not None:
                raise self.error
            raise _native.ClosedError("ReplayMerge is closed")
        if self._live_lost():
            if self.state is ReplayMergeState.MERGED:
                self._replay_again(now)
            else:
                # Nothing was read from it: the next image of the session sets the bound.
                self._live_image = None
                self._bound = None
        if self.state is ReplayMergeState.MERGED:
            return
        if self._image is None and self._replay_sub is not None:
            images = self._replay_sub.images
            if images:
                self._image = images[0]
                self._moved(now)
        if self.state is ReplayMergeState.REPLAY and now >= self._next_check:
            self._next_check = now + self._interval
            recorded = self._archive.get_max_recorded_position(self.recording_id)
            if recorded - self.position <= self._threshold:
                self._live = self._client.add_subscription(self._live_channel, self._live_stream_id)
                self.state = ReplayMergeState.LIVE_JOIN
                self._moved(now)
        if self.state is ReplayMergeState.LIVE_JOIN and self._live is not None and self._bound is None:
            images = [i for i in self._live.images if not i.is_closed]
            if images:
                self._live_image = images[0]
                self._bound = images[0].position
                self._moved(now)
        if self._bound is not None and self.position >= self._bound:
            self._merge(now)
        if self.state is not ReplayMergeState.MERGED and now - self._progress_at > self._timeout:
            self._fail(f"no progress for {self._timeout} s in state {self.state.value} at position "
                       f"{self.position}" + (f", live joined at {self._bound}" if self._bound is not None else ""))

    def _live_lost(self) -> bool:
        """The live image bound to (or read) is gone: closed, or the session was joined again (another
        image of it, further on)."""
        image = self._live_image
        if image is None or self._live is None:
            return False
        return image.is_closed or any(i.correlation_id != image.correlation_id for i in self._live.images)

    def _replay_again(self, now: float) -> None:
        """The live image went after the merge: read the replay again from where reading got to, and
        merge again."""
        assert self._live is not None
        position = self.position
        self._live.close()
        self._live = None
        self._live_image = None
        self._image = None
        self._bound = None
        self._skip_to = None
        self._position = position
        self._start_replay(position)
        self.state = ReplayMergeState.REPLAY
        self.rejoins += 1
        self._next_check = 0.0
        self._moved(now)

    def _merge(self, now: float) -> None:
        assert self._live is not None and self._bound is not None and self._live_image is not None
        live = self._live_image
        position = self.position
        if position > live.position:
            self._skip_to = position
        self._stop_replay()
        self._image = live
        self.state = ReplayMergeState.MERGED
        self.merges += 1
        self._moved(now)

    def _skipped(self) -> bool:
        """Discards what the live image holds of the part the replay already delivered (in one
        batch, no Python call per fragment); true once the live image is past it."""
        if self._skip_to is None:
            return True
        assert self._live is not None and self._live_image is not None
        live = self._live_image
        if live.position < self._skip_to:
            self._live.poll_batch(1 << 16, self._skip_to)
        if live.position < self._skip_to:
            return False
        self._skip_to = None
        return True

    # -- reading ------------------------------------------------------------

    def poll(self, handler: Callable[[memoryview, _native.Header], object], fragment_limit: int = 10) -> int:
        """Reads up to ``fragment_limit`` fragments into ``handler`` (as
        ``Subscription.poll``), doing the merge's work first."""
        self._work()
        if self.state is ReplayMergeState.MERGED:
            assert self._live is not None
            if not self._skipped():
                return 0
            return self._live.poll(handler, fragment_limit)
        assert self._replay_sub is not None
        before = self.position
        if self._bound is None:
            n = self._replay_sub.poll(handler, fragment_limit)
        else:
            n = self._replay_sub.bounded_poll(handler, self._bound, fragment_limit)
        if self.position != before:
            self._moved(time.monotonic())
        return n

    def poll_batch(self, fragment_limit: int = 4096) -> _native.Batch:
        """Copies up to ``fragment_limit`` fragments into one Batch (as
        ``Subscription.poll_batch``), doing the merge's work first."""
        self._work()
        if self.state is ReplayMergeState.MERGED:
            assert self._live is not None
            if not self._skipped():
                # Nothing new yet: an empty batch.
                assert self._live_image is not None
                return self._live.poll_batch(fragment_limit, self._live_image.position)
            return self._live.poll_batch(fragment_limit)
        assert self._replay_sub is not None
        before = self.position
        batch = self._replay_sub.poll_batch(fragment_limit, self._bound)
        if self.position != before:
            self._moved(time.monotonic())
        return batch

    # -- life cycle ---------------------------------------------------------

    def close(self) -> None:
        """Stops the replay and closes the subscriptions (idempotent)."""
        if self.state is ReplayMergeState.CLOSED:
            return
        self._stop_replay()
        if self._live is not None:
            self._live.close()
            self._live = None
        self._live_image = None
        self._image = None
        self.state = ReplayMergeState.CLOSED

    def __enter__(self) -> ReplayMerge:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ReplayMerge(recording_id={self.recording_id}, state={self.state.value}, "
                f"position={self.position}, rejoins={self.rejoins})")
