"""The archive: record streams to disk, list and replay them.

``Archive`` runs an archive in this process (as Aeron's ArchivingMediaDriver
does with a driver beside it); ``ArchiveClient`` opens a control session with
an archive, sulis's or Aeron Java's: both speak Aeron Archive's control
protocol and keep Aeron's catalog and segment file formats::

    import sulis

    with sulis.MediaDriver() as driver, \\
            sulis.Archive("/tmp/archive", driver_dir=driver.dir) as archive, \\
            sulis.Client(dir=driver.dir) as client, \\
            sulis.ArchiveClient(client) as archive_client:
        archive_client.start_recording("aeron:ipc", 1001)
        ...
        for r in archive_client.list_recordings():
            print(r.recording_id, r.start_position, r.stop_position)
        sub = archive_client.replay(r.recording_id, "aeron:ipc", 2002)

Positions are stream positions (bytes from the stream's start), the same
numbers a subscriber's image reports, so a recording position can serve as
an offset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from .. import _native
from .._native import ArchiveError, RecordingDescriptor

__all__ = [
    "NULL_POSITION",
    "REPLAY_ALL_AND_FOLLOW",
    "REPLAY_ALL_AND_STOP",
    "Archive",
    "ArchiveClient",
    "ArchiveError",
    "RecordingDescriptor",
    "RecordingEvent",
    "RecordingEvents",
    "RecordingSignal",
    "RecordingSignalEvent",
    "RecordingState",
    "ReplayMerge",
    "ReplayMergeState",
    "is_response_channel",
]

#: "No position" (Aeron's NULL_POSITION).
NULL_POSITION = -1
# From Rust (sulis-protocol), where each value is written once: REPLAY_ALL_AND_FOLLOW (a replay
# length: what is recorded, then follow the live recording), REPLAY_ALL_AND_STOP (what is recorded
# when the replay starts, then stop); RecordingSignal and RecordingState, IntEnums of Aeron's values;
# RecordingSignalEvent, what await_signal and poll_signals return; RecordingEvent, one message of
# the recording events stream, decoded.
REPLAY_ALL_AND_FOLLOW: int = _native.REPLAY_ALL_AND_FOLLOW
REPLAY_ALL_AND_STOP: int = _native.REPLAY_ALL_AND_STOP
RecordingSignal = _native.RecordingSignal
RecordingState = _native.RecordingState
RecordingSignalEvent = _native.RecordingSignalEvent
RecordingEvent = _native.RecordingEvent


class RecordingEvents:
    """Reads the recording events an archive publishes when started with
    ``recording_events_enabled=True`` (Aeron's RecordingEventsAdapter): one subscription to
    ``channel`` / ``stream_id`` (the archive's ``recording_events_channel`` and stream, by default
    Aeron's: a dynamic multi-destination-cast publication on ``localhost:8030``, which a subscriber
    on another host joins with ``aeron:udp?control=ARCHIVE_HOST:8030``, and stream 30). Works with
    Aeron's archive too. Progress events are best effort (dropped when the stream is full),
    started and stopped ones come unless the subscriber falls a whole term behind. A context
    manager."""

    def __init__(self, client, channel: str = "aeron:udp?control-mode=dynamic|control=localhost:8030",
                 stream_id: int = 30) -> None:
        self._subscription = client.add_subscription(channel, stream_id)

    @property
    def subscription(self):
        """The underlying subscription (``is_connected``, ``images``)."""
        return self._subscription

    def poll(self, limit: int = 100) -> list[RecordingEvent]:
        """Up to ``limit`` events that have arrived, oldest first (never waits)."""
        out: list[RecordingEvent] = []

        def on_message(buffer: memoryview, _header: object) -> None:
            out.append(_native.decode_recording_event(bytes(buffer)))
        self._subscription.poll(on_message, limit)
        return out

    def close(self) -> None:
        self._subscription.close()

    def __enter__(self) -> RecordingEvents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SOURCES = {"local": 0, "remote": 1}


def _source(source: str) -> int:
    try:
        return _SOURCES[source]
    except KeyError:
        raise _native.ConfigurationError(f"source must be 'local' or 'remote', not {source!r}") from None


class Archive(_native.Archive):
    """An archive running in this process until closed (a context manager).

    ``dir`` holds the catalog (``archive.catalog``) and the segment files;
    ``driver_dir`` is the media driver it is a client of (default: the
    default driver directory). Local clients reach it on
    ``local_control_channel`` (``aeron:ipc``), remote ones on
    ``control_channel`` (a UDP channel, off unless given). Files are synced
    per ``file_sync_level`` (0: left to the OS; 1: data written is synced;
    2: data and metadata) and the catalog per ``catalog_file_sync_level``
    (unset: as ``file_sync_level``; below it: ``ConfigurationError``, as Aeron's).
    With ``credentials`` (bytes) only clients that connect with them are let
    in (a list of credentials lets in each, as its own principal), and with
    a ``challenge`` they must then answer it with ``challenge_response``; a
    refused client is told AUTHENTICATION_REJECTED and the refusal is logged
    (``errors()``). ``authorise(principal, request)`` (Aeron's
    AuthorisationService), if given, is asked on the archive's thread for
    every request of a session: ``principal`` is the credentials it
    connected with (``b""`` without), ``request`` Aeron's name of the
    request (``"PurgeRecordingRequest"``, ...); a false answer (or an
    exception) refuses the request with UNAUTHORISED_ACTION (13). A request
    naming a control session counts only from the client stream that
    opened that session; others are dropped and logged. Below
    ``low_storage_space_threshold`` bytes of usable space (128 MiB, as
    Aeron's) new recordings, extensions and replications are refused with
    STORAGE_SPACE (11). ``threading_mode="dedicated"`` runs the recorder and
    the replayer on threads of their own (Aeron's DEDICATED; the default
    ``"shared"`` runs them on the archive's one thread). With ``recording_events_enabled``
    it publishes recording events (``RecordingEvents`` reads them) on
    ``recording_events_channel`` (Aeron's default, a dynamic MDC publication
    on ``localhost:8030``) and ``recording_events_stream_id`` (30). With ``record_checksum``
    (``"crc32"`` or ``"crc32c"``, or Aeron's class names) every recorded
    frame and catalog entry carries a checksum, as Aeron's archive writes
    them; with ``replay_checksum`` replays check every frame and stop with
    an error at the first that does not match.

    Every option but the four objects (``credentials``, ``challenge``,
    ``challenge_response``, ``authorise``) comes from the archive's options
    table, as ``sulis archive``'s flags and the ``SULIS_ARCHIVE_*``
    variables do (which it reads too): names, defaults and units in
    docs/config.md; sizes take ``k``/``m``/``g``, durations a float of
    seconds or text with a unit (``"5s"``).
    """

    def __new__(cls, dir, driver_dir=None, **options):  # noqa: A002 - Aeron's name
        # driver_dir None: the archive's table's default ($SULIS_DIR, else the default directory).
        return super().__new__(cls, str(dir), None if driver_dir is None else str(driver_dir), **options)

    def __init__(self, dir, driver_dir=None, **options) -> None:  # noqa: A002, D107
        from .. import _live

        _live.add(self)

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.is_running else "closed"
        return f"Archive(dir={self.dir!r}, archive_id={self.archive_id}, {state})"


class ArchiveClient(_native.ArchiveClient):
    """A control session with an archive (a context manager).

    ``client`` is the ``sulis.Client`` whose driver reaches the archive.
    Requests go to ``control_request_channel`` (``aeron:ipc`` for an archive
    on this machine, its UDP control channel otherwise) and answers come back
    on ``control_response_channel``. Every call waits for the archive's
    answer (at most ``message_timeout`` seconds), releases the GIL while it
    waits and raises ``ArchiveError`` (with the archive's ``code``) when the
    archive refuses. ``credentials`` go with the connect request; an archive
    that challenges gets ``challenge_response``.
    """

    _client: _native.Client

    def __new__(cls, client, **options):
        self = cast("ArchiveClient", super().__new__(cls, client, **options))
        self._client = client
        return self

    def __init__(self, client, **options) -> None:  # noqa: D107
        pass

    def __enter__(self) -> ArchiveClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start_recording(self, channel: str, stream_id: int, source: str = "local",  # type: ignore[override]
                        auto_stop: bool = False) -> int:
        """Records the stream; returns the recording subscription's id.

        Each publication (image) on it becomes a recording; a START signal
        (``await_signal``) names its recording id. ``auto_stop`` stops the
        subscription once its recordings end.
        """
        return super().start_recording(channel, stream_id, _source(source), auto_stop)

    def extend_recording(self, recording_id: int, channel: str, stream_id: int,  # type: ignore[override]
                         source: str = "local", auto_stop: bool = False) -> int:
        """Records the stream onto the end of a stopped recording (the
        stream must start where the recording stopped, with its term length,
        initial term id and MTU)."""
        return super().extend_recording(recording_id, channel, stream_id, _source(source), auto_stop)

    def list_recordings(self, from_id: int = 0, count: int = 100) -> list[RecordingDescriptor]:
        """Up to ``count`` recordings from ``from_id`` on."""
        return super().list_recordings(from_id, count)

    def list_recordings_for_uri(self, channel: str, stream_id: int, from_id: int = 0,  # type: ignore[override]
                                count: int = 100) -> list[RecordingDescriptor]:
        """Up to ``count`` recordings of ``stream_id`` whose channel contains ``channel``."""
        return super().list_recordings_for_uri(from_id, count, channel, stream_id)

    def start_replay(self, recording_id: int, channel: str, stream_id: int,  # type: ignore[override]
                     position: int | None = None, length: int | None = None, follow: bool = False,
                     limit_counter_id: int | None = None,
                     subscription: _native.Subscription | None = None) -> int:
        """Replays a recording on ``channel``/``stream_id``; returns the replay
        session id (its low 32 bits are the replay image's session id).

        From ``position`` (default: the recording's start) for ``length``
        bytes (default: what is recorded now); ``follow=True`` goes on with a
        live recording as it grows. ``limit_counter_id`` (a counter of the
        archive's driver, e.g. a commit position) bounds it further: the
        replay never passes the counter's value, waits while it stands
        still, and ends where it stood once the counter is closed.

        A response channel (``aeron:udp?control-mode=response|control=<archive
        host>:<port>``, or ``aeron:ipc?control-mode=response``) has the archive
        answer over a connection this client's driver opens, so the client
        needs no address of its own (behind NAT, a Spark executor on any host):
        give the ``subscription`` you added on it, as Aeron's
        ``subscriptionRegistrationId``; this returns once its image is there.
        """
        if follow and length is not None:
            raise _native.ConfigurationError("give either length or follow=True, not both")
        n = REPLAY_ALL_AND_FOLLOW if follow else (REPLAY_ALL_AND_STOP if length is None else length)
        start = NULL_POSITION if position is None else position
        if is_response_channel(channel):
            if subscription is None:
                raise _native.ConfigurationError(
                    f"replay channel '{channel}' is a response channel: give the subscription you added on it "
                    "(subscription=...), or call replay(), which adds one")
            return super().start_replay_via_response_channel(self._client, subscription, recording_id, start, n,
                                                             channel, stream_id, limit_counter_id)
        return super().start_replay(recording_id, start, n, channel, stream_id, limit_counter_id)

    def replay(self, recording_id: int, channel: str, stream_id: int, position: int | None = None,
               length: int | None = None, follow: bool = False,
               limit_counter_id: int | None = None) -> _native.Subscription:
        """Starts a replay and returns a subscription to it (only the
        replay's image joins it): poll it as any subscription. A response
        channel (``control-mode=response``) works as with ``start_replay``."""
        if is_response_channel(channel):
            sub = self._client.add_subscription(channel, stream_id)
            try:
                self.start_replay(recording_id, channel, stream_id, position, length, follow, limit_counter_id,
                                  subscription=sub)
            except BaseException:
                sub.close()
                raise
            return sub
        replay_id = self.start_replay(recording_id, channel, stream_id, position, length, follow,
                                      limit_counter_id)
        session = replay_id & 0xFFFF_FFFF
        if session >= 1 << 31:
            session -= 1 << 32
        return self._client.add_subscription(str(_native.ChannelUri(channel).with_param("session-id", session)),
                                             stream_id)

    def replicate(self, src_recording_id: int, src_control_channel: str,
                  src_control_stream_id: int = 10, dst_recording_id: int = -1,
                  stop_position: int | None = None, replication_channel: str = "",
                  live_destination: str = "", replication_session_id: int = -1,
                  credentials: bytes | None = None, src_response_channel: str = "",
                  channel_tag_id: int | None = None, subscription_tag_id: int | None = None) -> int:
        """Asks this archive to copy recording ``src_recording_id`` of the
        archive whose control channel is ``src_control_channel``; returns the
        replication id.

        It goes on in the background: the copy is a recording of this
        archive (a new one, or ``dst_recording_id`` continued where it
        stopped), made by a replay from the source to
        ``replication_channel`` (default: the archive's own
        ``replication_channel``). Signals carry the replication id as their
        correlation id: REPLICATE (the new recording's id), EXTEND, STOP,
        SYNC once the copy holds all the source had, REPLICATE_END last;
        errors come through ``poll_errors``. ``stop_position`` stops there;
        by default a live source is followed until it stops.

        With ``channel_tag_id`` or ``subscription_tag_id`` (Aeron's tagged
        replication) the copy is recorded through a multi-destination
        subscription ``tags=C,S`` whose one destination is the replication
        channel's endpoint (a tag not given is the replication id): another
        subscription of this archive's driver on ``aeron:udp?tags=C`` shares
        that endpoint and sees the replay.
        """
        return super().replicate(
            src_recording_id, src_control_channel, src_control_stream_id, dst_recording_id,
            -1 if stop_position is None else stop_position, replication_channel, live_destination,
            replication_session_id, credentials, src_response_channel,
            -1 if channel_tag_id is None else channel_tag_id,
            -1 if subscription_tag_id is None else subscription_tag_id)

    def stop_replication(self, replication_id: int) -> None:
        """Stops a replication: its recording stops where it got to."""
        super().stop_replication(replication_id)

    def poll_signals(self, handler: Callable[[RecordingSignalEvent], object] | None = None
                     ) -> list[RecordingSignalEvent]:
        """Recording signals received since the last call, oldest first; each is also handed to
        ``handler`` if one is given (Aeron's RecordingSignalConsumer), from this thread."""
        events = super().poll_signals()
        if handler is not None:
            for e in events:
                handler(e)
        return events

    def poll_errors(self) -> list[tuple[int, int, str]]:
        """Errors the archive sent about earlier requests (a recording stopped by a write error,
        a replay that met a corrupt segment): (correlation id, error code, message) tuples."""
        return super().poll_errors()

    def await_signal(self, signal: RecordingSignal, recording_id: int = -1,  # type: ignore[override]
                     timeout: float | None = None) -> RecordingSignalEvent:
        """Waits for ``signal`` of ``recording_id`` (any recording if -1), up to ``timeout`` seconds (the
        client's ``message_timeout`` by default); other signals stay queued for ``poll_signals``. Pass a longer
        ``timeout`` for a signal that ends long work: REPLICATE_END comes once the whole recording is copied,
        however large. Raises ``ArchiveError`` naming the signal at the timeout."""
        return super().await_signal(recording_id, int(signal), timeout)

    def __repr__(self) -> str:
        return f"ArchiveClient(archive_id={self.archive_id}, control_session_id={self.control_session_id})"


from .replay_merge import ReplayMerge, ReplayMergeState  # noqa: E402 - needs ArchiveClient above


def is_response_channel(channel: str) -> bool:
    """True for a channel with ``control-mode=response``."""
    query = channel.partition("?")[2]
    return "control-mode=response" in query.split("|")
