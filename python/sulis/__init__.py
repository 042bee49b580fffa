"""sulis: Aeron-class messaging for Python on a Rust core.

A media driver (embedded with ``sulis.MediaDriver`` or standalone with
``sulis driver``) owns shared-memory log buffers; clients in any process add
publications and subscriptions through it::

    import sulis

    with sulis.MediaDriver(dir="/dev/shm/sulis-demo") as driver:
        with sulis.Client(dir=driver.dir) as client:
            sub = client.add_subscription("aeron:ipc", 10)
            pub = client.add_publication("aeron:ipc", 10)
            while not pub.offer(b"hello"):
                pass
            sub.poll(lambda buffer, header: print(bytes(buffer)), 10)

Channel URIs use Aeron's syntax. ``offer`` returns the new stream position (an
int > 0), or an ``OfferResult``: NOT_CONNECTED, BACK_PRESSURED, ADMIN_ACTION,
CLOSED, MAX_POSITION_EXCEEDED, an IntEnum equal to Aeron's -1..-5 and false, so
``if pub.offer(m):`` and ``while not pub.offer(m):`` read as they behave, as
``< 0`` does.
"""

from __future__ import annotations

import atexit
import enum
import weakref

from . import _native
from ._native import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    CLOSED,
    CNC_FILE,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    Batch,
    BatchColumn,
    BufferClaim,
    ChannelUri,
    CountersReader,
    ExclusivePublication,
    FragmentAssembler,
    Header,
    Image,
    OfferResult,
    Publication,
    PublishedBatch,
    Subscription,
    SystemCounter,
    __version__,
    active_driver,
    archive_config,
    build_profile,
    channel_params,
    driver_config,
    parse_channel,
    read_errors,
    read_loss_report,
)
from .errors import (
    ActiveDriverError,
    ArchiveError,
    ArchiveIOError,
    ClientTimeoutError,
    ClosedError,
    ConfigurationError,
    DriverTimeoutError,
    MessageTooLongError,
    RegistrationError,
    StorageSpaceError,
    SulisError,
)

__all__ = [
    "CNC_FILE",
    "ADMIN_ACTION",
    "BACK_PRESSURED",
    "CLOSED",
    "MAX_POSITION_EXCEEDED",
    "NOT_CONNECTED",
    "Action",
    "ActiveDriverError",
    "Archive",
    "ArchiveClient",
    "ArchiveError",
    "ArchiveIOError",
    "Batch",
    "BatchColumn",
    "BufferClaim",
    "ChannelUri",
    "Client",
    "ClientTimeoutError",
    "ClosedError",
    "ConfigurationError",
    "CountersReader",
    "DriverTimeoutError",
    "ExclusivePublication",
    "FragmentAssembler",
    "Header",
    "Image",
    "MediaDriver",
    "MessageTooLongError",
    "OfferResult",
    "Publication",
    "PublishedBatch",
    "RegistrationError",
    "ReplayMerge",
    "StorageSpaceError",
    "Subscription",
    "SystemCounter",
    "SulisError",
    "__version__",
    "active_driver",
    "build_profile",
    "channel_params",
    "archive_config",
    "driver_config",
    "parse_channel",
    "read_errors",
    "read_loss_report",
    "result_name",
]



class Action(enum.IntEnum):
    """What a ``controlled_poll`` handler wants done with a fragment."""

    ABORT = 1
    """Do not consume this fragment; stop polling."""
    BREAK = 2
    """Consume it, then stop polling."""
    COMMIT = 3
    """Consume it and commit the position now."""
    CONTINUE = 4
    """Consume it and go on."""


def result_name(result: int) -> str:
    """Names an ``offer`` result: ``"position N"``, or the OfferResult's name."""
    if result < 0:
        try:
            return OfferResult(result).name
        except ValueError:
            pass
    return f"position {result}"


# Clients and drivers still open at interpreter exit are closed first, so no
# native thread is left waiting for a GIL that is being torn down.
_live: weakref.WeakSet = weakref.WeakSet()


class MediaDriver(_native.MediaDriver):
    """An embedded media driver (conductor and network agents on Rust threads, or run by the caller).

    ``MediaDriver(dir=None, threading_mode=None, idle_strategy=None, **options)``:
    ``dir`` defaults to ``$SULIS_DIR`` or ``/dev/shm/sulis-$USER``;
    ``threading_mode`` is ``dedicated`` (the default: conductor, sender and receiver
    threads), ``shared-network``, ``shared`` (one thread) or ``invoker`` (no thread:
    the embedding code calls ``driver.do_work()``, which runs one duty cycle of each
    agent with the GIL released and returns the work done, 0 when idle; clients of
    the driver get answers only while something calls it);
    ``idle_strategy`` is ``busy-spin``, ``yielding``, ``backoff`` or ``sleeping``.
    Other options by name (``ipc_term_buffer_length="1m"``,
    ``client_liveness_timeout=2.0``...), see ``sulis driver --print-config``.
    Durations are a float of seconds (``2.0``) or a string with a unit
    (``"500ms"``, ``"5s"``); a bare int other than 0 is refused as ambiguous.
    """

    def __init__(self, *args, **kwargs) -> None:  # noqa: D107 - documented on the class
        _live.add(self)


class Client(_native.Client):
    """A connection to a media driver: ``Client(dir=None, driver_timeout=10.0, name=None)``.

    ``name`` (at most 100 bytes) appears in the label of the client's heartbeat counter (``sulis stat``).
    """

    def __init__(self, *args, **kwargs) -> None:  # noqa: D107
        _live.add(self)


@atexit.register
def _close_all() -> None:
    objs = list(_live)
    # Archives first: they are clients of a driver and stop their recordings cleanly.
    for o in objs:
        if isinstance(o, _native.Archive):
            o.close()
    for o in objs:
        if isinstance(o, _native.Client):
            o.close()
    for o in objs:
        if isinstance(o, _native.MediaDriver):
            o.close()


from .archive import Archive, ArchiveClient, ReplayMerge  # noqa: E402 - needs Client and _live above
