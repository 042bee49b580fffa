"""The Cluster: a replicated state machine whose service is written in Python.

A ``ClusterNode`` runs a consensus module and a service container on a media driver and an archive that
are already running (``sulis.MediaDriver``, ``sulis.Archive``), each on a thread of its own. The
consensus module sequences every client's messages into a log the archive records; the container reads
the log only as far as it is committed and hands each entry to the ``ClusteredService``: one Python call
per entry. A ``ClusterClient`` opens a session, offers messages and reads what the service sends back.

A cluster is one member (it runs the election too and elects itself at once; its log is committed as far
as its archive recorded it) or several (``cluster_members``; usually three or five ``sulis cluster-node``
processes): they elect a leader by Raft, the leader replicates its log, and an entry is committed once a
quorum's archives recorded it. A restarted member loads its latest snapshot, replays its log after it and catches up
with the leader; a member that lost its directories is seeded from another's snapshot
(``docs/cluster.md``).

Determinism: every member's service must do the same with the same entries. Use ``cluster.time`` (the
entry's cluster time), never the wall clock; no randomness that is not seeded from the log; no I/O
that changes what the service does; schedule timers through ``cluster.schedule_timer``. The option
``check_determinism`` makes a service that reads the clock or unseeded randomness fail loudly.
"""

from __future__ import annotations

import enum
import os
import tempfile

from .._native import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    Cluster,
    ClusterError,
    ClusterSessionClosedError,
    OfferBatchResult,
    SessionMessages,
    SnapshotWriter,
    cluster_config,
)
from .._native import ClusterClient as _NativeClusterClient
from .._native import ClusterNode as _NativeClusterNode

#: The results of an offer worth another try (the publication will take it soon); any other result ends a
#: retry loop: ``while cluster.offer(session_id, payload) in OFFER_AGAIN: cluster.idle()``. NOT_CONNECTED (the
#: client is gone), CLOSED and MAX_POSITION_EXCEEDED never pass by trying again. A service's ``offer`` queues what
#: its client's egress cannot take now, so it returns neither (see ``ClusteredService``); a client's does.
OFFER_AGAIN = (BACK_PRESSURED, ADMIN_ACTION)

#: ``service_log_fragment_limit`` for a batched service (one that defines ``on_session_messages``) unless the options
#: set it: the most messages one call gets (docs/cluster.md, the batched service's figures).
BATCHED_LOG_FRAGMENT_LIMIT = 1000

__all__ = [
    "CloseReason",
    "Cluster",
    "ClusterClient",
    "ClusterError",
    "ClusterNode",
    "ClusterSessionClosedError",
    "ClusteredService",
    "EventCode",
    "ModuleState",
    "OFFER_AGAIN",
    "OfferBatchResult",
    "Role",
    "SessionMessages",
    "SnapshotWriter",
    "cluster_config",
]


class Role(enum.IntEnum):
    """A member's role (Aeron's ``Cluster.Role``)."""

    FOLLOWER = 0
    CANDIDATE = 1
    LEADER = 2


class ModuleState(enum.IntEnum):
    """The consensus module's state (Aeron's ``ConsensusModule.State``): ``ClusterNode.state``."""

    INIT = 0
    ACTIVE = 1
    SUSPENDED = 2
    SNAPSHOT = 3
    QUITTING = 4
    TERMINATING = 5
    CLOSED = 6


class CloseReason(enum.IntEnum):
    """Why a session closed (Aeron's ``CloseReason``)."""

    CLIENT_ACTION = 0
    SERVICE_ACTION = 1
    TIMEOUT = 2


class EventCode(enum.IntEnum):
    """A SessionEvent's code (Aeron's ``EventCode``): ``ClusterSessionClosedError.code``."""

    OK = 0
    ERROR = 1
    REDIRECT = 2
    AUTHENTICATION_REJECTED = 3
    CLOSED = 4


class ClusteredService:
    """The replicated state machine: subclass it and override what you need.

    Every callback gets ``cluster`` (a ``Cluster``, valid during the callback only): its ``time`` and
    ``log_position`` are the entry's; ``offer(session_id, payload)`` answers a client and never waits: it
    returns the egress's new position, or 1 when the answer waits in the session's egress queue (the client's
    egress back-pressured or not yet connected; the container sends it, in order, as the egress takes it), or
    an ``OfferResult`` when it cannot go (NOT_CONNECTED: the client is gone or its session is being closed;
    CLOSED; MAX_POSITION_EXCEEDED). So one slow or vanished client never holds the log for the others: a
    session whose queue passes ``egress_queue_len`` bytes, or whose egress takes nothing for
    ``egress_stall_timeout``, is closed and its client told why. The loop
    ``while cluster.offer(session_id, payload) in OFFER_AGAIN: cluster.idle()`` written for Aeron's back
    pressure still reads right and always ends (on a follower nothing is sent and the offer returns 1).
    ``schedule_timer``/``cancel_timer``, ``close_session`` and ``offer_to_cluster`` (a message into the log
    from the service itself). Once the node stops (closed, or its consensus module ended), ``offer``,
    ``offer_batch``, ``offer_to_cluster`` and ``idle`` raise ``ClusterError``, so a retry loop ends instead
    of holding the node open. An exception stops the service: the node's ``error`` names the callback and
    the log position, and no later entry is given to it.

    Answers are at most once across a leader change: an answer the old leader had not sent when it failed is
    not sent again by the new one (its service applied the entry when it was committed, before the change).
    A client that must know the outcome of each message reads ``ClusterClient.committed`` (or the service
    answers again from its state when asked).
    """

    def on_start(self, cluster: Cluster, snapshot: list[bytes] | None) -> None:
        """The service joined the log, before any entry. ``snapshot`` is what it wrote in
        ``on_take_snapshot`` when the member recovers from a snapshot (the log after it follows), in
        order; ``None`` when it starts from the log's beginning."""

    def on_take_snapshot(self, cluster: Cluster, snapshot: SnapshotWriter) -> None:
        """Write the service's whole state with ``snapshot.write(bytes)`` (any number of messages, any
        length). Every member's service does so at the same log position; an exception fails this
        snapshot (the previous one stays the one to recover from) and the service goes on. A service
        that does not override it cannot be snapshotted: its state would not survive a restart from
        the snapshot, so the snapshot fails, naming this."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement on_take_snapshot: its state could not be restored "
            "from a snapshot")

    def on_session_open(self, cluster: Cluster, session_id: int, timestamp: int) -> None:
        """Session ``session_id`` opened."""

    def on_session_close(self, cluster: Cluster, session_id: int, timestamp: int, close_reason: int) -> None:
        """Session ``session_id`` closed (``CloseReason``)."""

    def on_session_message(self, cluster: Cluster, session_id: int | None, timestamp: int, payload: bytes) -> None:
        """A client's message (``session_id``), or the service's own (``None``).

        A service that defines ``on_session_messages(self, cluster, messages)`` is *batched*: it gets the
        session messages the log holds back to back in one call instead, ``messages`` a
        ``SessionMessages`` (``len(messages)`` of them, at most ``service_log_fragment_limit``, 1,000 for a batched
        service unless set): payloads
        back to back in ``messages.data`` with ``messages.offsets`` (int32, one more, Arrow's layout),
        and per message ``session_ids``, ``timestamps`` and ``positions`` (int64), each a buffer
        ``numpy.frombuffer`` or ``pyarrow.py_buffer`` reads without a copy (``messages[i]`` and
        ``messages.to_list()`` copy). During the call ``cluster.time`` and ``cluster.log_position`` are
        the last message's. Timers, session events and snapshots come between batches where the log has
        them, so the order a service sees is the log's, and a restart replays the same batches' messages
        (not necessarily cut into the same batches: a batched service must not depend on where a batch
        ends). ``cluster.offer_batch(session_ids, data, offsets)`` answers many at once and returns an
        ``OfferBatchResult``: how many went (an int) and ``code``, the ``OfferResult`` of the message it stopped
        at (``None`` once all went). The loop that always ends::

            sent = 0
            while sent < len(session_ids):
                result = cluster.offer_batch(session_ids[sent:], data, offsets[sent:])
                sent += result
                if result.code in OFFER_AGAIN:
                    cluster.idle()  # back-pressured: idle, then offer the rest
                elif result.code is not None:
                    sent += 1  # NOT_CONNECTED, CLOSED, ...: that answer cannot go; the rest can
        """

    def on_timer_event(self, cluster: Cluster, correlation_id: int, timestamp: int) -> None:
        """Timer ``correlation_id`` fired."""

    def on_role_change(self, cluster: Cluster, role: int) -> None:
        """This member's role changed (``Role``)."""


class ClusterNode:
    """A cluster member in this process (a context manager): its consensus module and service container.

    ``cluster_members`` is Aeron's ``cluster.members`` (``"0,ingress,consensus,log,catchup,archive"``;
    clients send to the ingress endpoint; a member alone runs the election too, electing itself at once, and
    binds its consensus endpoint as a member of several does); ``cluster_dir`` holds ``recording.log`` (one node per
    directory: a second is refused, naming the process that holds it). Every setting comes from the
    cluster's options table (defaults, ``SULIS_CLUSTER_*`` variables, then these keywords; names, units
    and defaults in docs/config.md, ``cluster_config()`` shows the effective ones). Returns once the
    node leads its term, raising ``ClusterError`` if it cannot start. ``check_determinism=True`` stops a
    service that reads the wall clock or unseeded randomness in a callback (``sulis.cluster.determinism``).

    Snapshots are taken on their own: the leader asks for one (every member's, at one log position) once
    ``snapshot_log_len`` bytes of log (64 MiB by default) were appended since the latest, or ``snapshot_interval``
    (an hour) passed with log appended since, so a restarted member replays at most that much log before it
    rejoins, however long the cluster has run. A service without an ``on_take_snapshot`` of its own is left out
    unless those options are set; ``0`` turns either off.
    """

    def __init__(self, service: ClusteredService, cluster_dir=None, driver_dir=None, **options: object) -> None:
        cluster_dir = None if cluster_dir is None else str(cluster_dir)
        driver_dir = None if driver_dir is None else str(driver_dir)
        rows = cluster_config(cluster_dir, driver_dir, **options)
        effective = {row[0]: row[1] for row in rows}
        source = {row[0]: row[2] for row in rows}
        # The snapshot policy (snapshot_log_len, snapshot_interval) is on by default; a service that cannot be
        # snapshotted (no on_take_snapshot of its own) is left out of it unless the options ask for it, so that
        # its node does not fail a snapshot every time the policy would take one.
        taker = getattr(type(service), "on_take_snapshot", None)
        if (taker is None or taker is ClusteredService.on_take_snapshot) and all(
                source.get(name) == "default" for name in ("snapshot_log_len", "snapshot_interval")):
            options = {**options, "snapshot_log_len": "0", "snapshot_interval": "0s"}
        # A batched service takes up to service_log_fragment_limit messages a call: unless set, 1,000 for it (a
        # batched ledger on three members ran 1.9x the throughput of Aeron's 50), Aeron's 50 for one call a message.
        if hasattr(service, "on_session_messages") and source.get("service_log_fragment_limit") == "default":
            options = {**options, "service_log_fragment_limit": str(BATCHED_LOG_FRAGMENT_LIMIT)}
        if effective.get("check_determinism") == "true":
            from .determinism import checked_service

            service = checked_service(service)
        self._native = _NativeClusterNode(service, cluster_dir, driver_dir, **options)

    @property
    def error(self) -> str | None:
        """The first error that stopped the module or the service, if any."""
        return self._native.error

    @property
    def is_running(self) -> bool:
        """True while the module and the service run."""
        return self._native.is_running

    def close(self) -> None:
        """Stops the node (the log's recording is stopped)."""
        self._native.close()

    def snapshot(self, timeout: float = 30.0) -> int:
        """Takes a snapshot and returns once it is recorded (the node's snapshot count).

        Every service writes its state (``on_take_snapshot``) at one log position, then the consensus
        module writes its own (sessions, timers, the services' pending messages); the archive records
        each and the recording log names the set. A restarted node loads the latest whole set and
        replays only the log after it. Raises ``ClusterError`` naming why it failed (the previous
        snapshot then stays the one to recover from) or that it did not finish within ``timeout``."""
        return self._native.snapshot(timeout)

    def suspend(self, timeout: float = 30.0) -> None:
        """Suspends the cluster: clients' messages wait (back-pressured, none dropped), timers do not
        fire and no session times out until ``resume``."""
        self._native.suspend(timeout)

    def resume(self, timeout: float = 30.0) -> None:
        """Resumes a suspended cluster."""
        self._native.resume(timeout)

    def shutdown(self, timeout: float = 60.0) -> None:
        """Stops the member after a snapshot, as Aeron's ``ClusterTool shutdown``: a restart loads the
        snapshot and replays nothing. Returns once the module and the service stopped (``is_running``
        is then False, ``error`` None); raises ``ClusterError`` if the snapshot failed (the member goes
        on) or it did not stop within ``timeout``. ``close()`` releases the rest."""
        self._native.shutdown(timeout)

    def abort(self, timeout: float = 60.0) -> None:
        """Stops the member without a snapshot (a restart replays the log from its last snapshot)."""
        self._native.abort(timeout)

    def purge_log(self, cluster: bool = False, timeout: float = 30.0) -> dict[str, int]:
        """Deletes the log's segment files wholly before the latest snapshot: a restart loads the
        snapshot and replays the log only from its position. Returns ``snapshot_position``,
        ``start_position`` (where the log's recording starts now) and ``segments_deleted`` (0 when no
        whole segment lies before the snapshot). Raises ``ClusterError`` when there is no snapshot.

        With ``cluster=True``, on the leader, every member purges its own log, each before its own
        latest snapshot, at one position of the log (a PURGE_LOG action); refused, naming the member,
        unless every other member reported a log past the leader's latest snapshot within the heartbeat
        timeout, so that no member can need the purged log to catch up. Returns this member's outcome."""
        return self._native.purge_log(cluster, timeout)

    @property
    def snapshot_count(self) -> int:
        """Snapshots taken since the node started."""
        return self._native.snapshot_count

    @property
    def state(self) -> ModuleState:
        """The consensus module's state."""
        return ModuleState(self._native.state)

    def __enter__(self) -> ClusterNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ClusterClient:
    """A session with a cluster (a context manager).

    Connects to the driver at ``driver_dir`` and opens a session with the member whose ingress is in
    ``ingress_endpoints`` (``"0=host:port,..."``, following a redirect to the leader); the service's
    answers come on ``egress_channel``. ``poll_egress`` raises ``ClusterSessionClosedError`` once the
    cluster ended the session (closed by the service, timed out, ...): it is always reported. A leader
    change (NewLeaderEvent) read by ``poll_egress`` moves the session to the new leader and its term.

    With ``driver_dir=None`` the client starts a media driver of its own, in a new directory (each client a new
    one: ``driver_dir_prefix`` plus a random suffix, by default ``/dev/shm/sulis-cluster-client-``), on one
    thread (``threading_mode="shared"``; ``driver_options`` add or change options, as ``MediaDriver``
    takes them), and closes it, directory and all, when it closes: ``ClusterClient(ingress_endpoints=
    "0=host:9010,1=host:9110,2=host:9210")`` needs nothing started by hand. Its egress then defaults to
    ``aeron:udp?endpoint=localhost:0`` (a free port, which the client tells the cluster); give a
    reachable address when the members are on other hosts.

    ``client`` (a ``sulis.Client``) runs the session on that client instead of one of its own, as Aeron's
    ``AeronCluster.Context.aeron()``: a process holding many sessions gives them one client (one conductor
    thread and one mapping of the driver's CnC file between them, where each session's own would cost a
    thread and about a megabyte of its mapping). The session does not close it; close it after them.

    ``credentials`` go to the members' authenticator as they are (a line of their ``credentials_file``).
    With members started with ``client_keys_file``, ``credentials`` is the principal and ``secret`` its
    secret: the leader sends a random challenge and the client answers with the HMAC-SHA256 of it and of
    its egress channel under the secret, which never crosses the wire (an answer seen on the wire opens no
    other session). A client with no ``secret`` that is challenged fails naming it.

    Exactly once (``exactly_once=True``, the default, with a sulis cluster: its leader says so when it opens
    the session; with Aeron's cluster the client is Aeron's): the client numbers its messages, keeps each until the
    leader says it is committed (read by ``poll_egress``, or by ``offer`` when ``max_in_flight`` wait) and
    resends what it keeps to a new leader, which drops what its log holds: the services apply every message
    once through any failover. The outcome of every message is known to the client even when its answer is
    not: messages are numbered from 1 in the order offered (``offered`` is the last one's number) and
    ``committed`` says how many of them the cluster has applied for good, in order. An answer is at most once
    across a leader change (one the old leader had not sent is not sent again); ``committed`` passing a
    message's number is its acknowledgement. When the cluster ends the session, ``ClusterSessionClosedError``'s
    ``messages_committed`` is the final count: messages after it were not applied and never will be.
    ``offer`` returns BACK_PRESSURED while ``max_in_flight`` messages wait or a
    resend is under way. ``exactly_once=False`` is Aeron's client: a message in flight at a failover may be
    lost or applied twice (Aeron Cluster's own client always is, and works with sulis unchanged).

    A leader that goes away without a successor announcing itself to this session (it died or was cut off,
    and the new leader never learnt of the session: its open was not yet committed) would leave the client
    waiting for ever. As Aeron's client, it ends the session itself once its ingress has not been connected
    for ``new_leader_timeout`` seconds (default: twice the leader heartbeat timeout the leader gave, 20 s
    when it gave none): ``offer`` then returns CLOSED and ``poll_egress`` raises ``ClusterSessionClosedError``
    ("the client ended the session: no leader reached ..."), and the application connects again.
    """

    def __init__(self, driver_dir=None, ingress_endpoints: str | None = None,
                 egress_channel: str = "aeron:udp?endpoint=localhost:0", *,
                 ingress_channel: str = "aeron:udp", message_timeout: float = 5.0,
                 credentials: bytes = b"", driver_options: dict | None = None, exactly_once: bool = True,
                 max_in_flight: int = 16384, new_leader_timeout: float | None = None,
                 driver_dir_prefix: str | None = None, client=None, secret: bytes | None = None) -> None:
        if ingress_endpoints is None:
            raise TypeError("ClusterClient needs ingress_endpoints (\"0=host:port,1=host:port,...\")")
        if client is not None:
            if driver_dir is not None and os.path.realpath(str(driver_dir)) != os.path.realpath(client.dir):
                raise TypeError(f"driver_dir {driver_dir} is not the directory of the client given ({client.dir})")
            if driver_options or driver_dir_prefix is not None:
                raise TypeError("driver_options and driver_dir_prefix are for the client's own driver; "
                                "the client given has its driver")
            driver_dir = client.dir
        if driver_dir is not None and (driver_options or driver_dir_prefix is not None):
            raise TypeError("driver_options and driver_dir_prefix are for the client's own driver (driver_dir=None); "
                            f"the driver at {driver_dir} runs with its own")
        self._driver = None
        if driver_dir is None:
            from .. import MediaDriver  # the package's own, imported once it is initialised

            if driver_dir_prefix is None:
                parent = "/dev/shm" if os.path.isdir("/dev/shm") else None
                prefix = "sulis-cluster-client-"
            else:
                parent, prefix = os.path.split(driver_dir_prefix)
                parent = parent or None
            options = {"threading_mode": "shared", "dir_delete_on_shutdown": True, **(driver_options or {})}
            self._driver = MediaDriver(dir=tempfile.mkdtemp(prefix=prefix, dir=parent), **options)
            driver_dir = self._driver.dir
        self._driver_dir = str(driver_dir)
        try:
            self._native = _NativeClusterClient(self._driver_dir, ingress_endpoints, egress_channel,
                                                ingress_channel, message_timeout, credentials, exactly_once,
                                                max_in_flight, new_leader_timeout, client, secret)
        except BaseException:
            self._close_driver()
            raise

    @property
    def driver_dir(self) -> str:
        """The directory of the driver the client uses (its own, with ``driver_dir=None``)."""
        return self._driver_dir

    def _close_driver(self) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.close()

    @property
    def cluster_session_id(self) -> int:
        """The session's id."""
        return self._native.cluster_session_id

    @property
    def leadership_term_id(self) -> int:
        """The leader's term."""
        return self._native.leadership_term_id

    @property
    def leader_member_id(self) -> int:
        """The leader's member id."""
        return self._native.leader_member_id

    def offer(self, payload: bytes) -> int:
        """Offers ``payload``: the new position, or an ``OfferResult`` (BACK_PRESSURED, ...) to offer again."""
        return self._native.offer(payload)

    @property
    def in_flight(self) -> int:
        """Messages sent and not yet committed (exactly once; 0 otherwise)."""
        return self._native.in_flight

    @property
    def committed(self) -> int | None:
        """Exactly once: how many of the session's messages (numbered from 1 in the order offered) the cluster
        said are committed: applied once, in order, by every member's service, through any failover, whether or
        not an answer came. A message is acknowledged once this reaches its number. Readable after the session
        ended (``ClusterSessionClosedError.messages_committed`` is then the final count, when the cluster gave
        one). None when the session does not number its messages (``exactly_once=False``, Aeron's cluster)."""
        return self._native.committed

    @property
    def offered(self) -> int | None:
        """Exactly once: how many messages this session offered, the last one's number (after ``offer`` returned a
        position, that message's number; after ``offer_batch`` sent n, the last n numbers). None when the session
        does not number its messages."""
        return self._native.offered

    def send_keep_alive(self) -> bool:
        """Tells the cluster the session is alive (a session silent for the session timeout is closed)."""
        return self._native.send_keep_alive()

    def poll_egress(self, handler, limit: int = 10) -> int:
        """Reads up to ``limit`` fragments; ``handler(payload, timestamp)`` for each of the session's messages.

        If ``handler`` raises, the exception propagates here: the message it raised on counts as delivered (as
        Aeron's poll consumes a fragment whose handler throws) and the session's later messages wait, in order,
        for the next ``poll_egress``."""
        return self._native.poll_egress(handler, limit)

    def offer_batch(self, data, offsets) -> OfferBatchResult:
        """Offers message ``i`` (``data[offsets[i]:offsets[i + 1]]``) for each, in order, as ``offer`` each, in one
        call: an ``OfferBatchResult``, how many went (an int) and ``code``, the ``OfferResult`` of the one refused
        (None once all went).

        ``data`` is any bytes-like object, ``offsets`` one more than messages, int32 or int64 (numpy,
        ``array('i')``), or raw bytes read as int32 (Arrow's layout: a pyarrow binary array's ``buffers()[1]``);
        other items (floats, int16) raise ``TypeError``. Each message is a log entry of its own, as from
        ``offer``: nothing changes on the wire. Fewer than all went when the next was refused (back pressure, or,
        exactly once, ``max_in_flight`` messages waiting for the leader's count: the window that pipelines the
        session's messages) and is to be offered again with the rest, e.g.
        ``sent += client.offer_batch(data, offsets[sent:])`` after a ``poll_egress_batch``.

        Offsets are checked, all of them, before any message goes: a call that raises for them sent nothing. A
        message no retry gets through (longer than the maximum; ``MAX_POSITION_EXCEEDED``, where ``offer`` returns
        the code: the ingress is at its end and a new client is needed) raises when it is the call's first, not
        0 to a loop that would offer it for ever; after some went, a message longer than the maximum raises too,
        with ``sent``, how many went before it, on the exception. Raises ``ClusterSessionClosedError`` once the
        cluster ended the session."""
        return self._native.offer_batch(data, offsets)

    def poll_egress_batch(self, limit: int = 256) -> SessionMessages:
        """Reads up to ``limit`` fragments and returns the session's messages among them as one
        ``SessionMessages`` (zero-copy columns ``data`` and ``offsets``, and per message ``session_ids``,
        ``timestamps`` and ``positions``, the egress position after it): one Python call however many came, and
        an empty batch when none did. Messages that came before the session ended are returned first; the next
        poll raises ``ClusterSessionClosedError``."""
        return self._native.poll_egress_batch(limit)

    def close(self) -> None:
        """Closes the session (the cluster logs it) and the client, and the client's own driver if it has one."""
        try:
            self._native.close()
        finally:
            self._close_driver()

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
