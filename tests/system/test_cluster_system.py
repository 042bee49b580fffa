"""The Cluster from Python: a one-member cluster node whose service is a Python object, on an embedded
driver and archive, and clients over UDP. Messages are echoed in order through the committed log,
timers fire through the log, a service's exception stops the node naming the callback and the log
position, a restarted node rebuilds the service from its log, and a second node on the same directory
is refused.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

import sulis
from clusterprocs import cluster_counters, vanish_with_a_message_held
from conftest import await_until, free_udp_port
from sulis.cluster import (
    OFFER_AGAIN,
    CloseReason,
    ClusterClient,
    ClusteredService,
    ClusterError,
    ClusterNode,
    ClusterSessionClosedError,
    EventCode,
    ModuleState,
    Role,
    cluster_config,
)


class Echo(ClusteredService):
    """Echoes each message; ``timer:N`` fires timer N now (answering ``fired N``); ``close`` closes the
    session; ``boom`` raises."""

    def __init__(self) -> None:
        self.opened: list[int] = []
        self.closed: list[tuple[int, int]] = []
        self.messages = 0
        self.timers: list[int] = []
        self.roles: list[int] = []

    def on_role_change(self, cluster, role):
        self.roles.append(role)

    def on_session_open(self, cluster, session_id, timestamp):
        self.opened.append(session_id)

    def on_session_close(self, cluster, session_id, timestamp, close_reason):
        self.closed.append((session_id, close_reason))

    def on_session_message(self, cluster, session_id, timestamp, payload):
        self.messages += 1
        if payload.startswith(b"timer:"):
            cluster.schedule_timer(int(payload[6:]), cluster.time)
        elif payload == b"close":
            cluster.close_session(session_id)
        elif payload == b"boom":
            raise ValueError("the service broke")
        else:
            while cluster.offer(session_id, payload) in OFFER_AGAIN:
                cluster.idle()

    def on_timer_event(self, cluster, correlation_id, timestamp):
        self.timers.append(correlation_id)
        for session_id in cluster.session_ids():
            while cluster.offer(session_id, f"fired {correlation_id}".encode()) in OFFER_AGAIN:
                cluster.idle()


@pytest.fixture
def node_env(make_driver, tmp_path):
    driver = make_driver()
    with sulis.Archive(str(tmp_path / "archive"), driver_dir=driver.dir) as archive:
        port = free_udp_port()
        members = f"0,localhost:{port},localhost:{free_udp_port()},localhost:20003,localhost:0,localhost:8010"
        yield driver, archive, members, port, tmp_path / "cluster"


def start(node_env, service):
    driver, _, members, _, cluster_dir = node_env
    return ClusterNode(service, cluster_dir, driver.dir, cluster_members=members, log_term_length="64k")


def connect(node_env) -> ClusterClient:
    driver, _, _, port, _ = node_env
    return ClusterClient(driver.dir, f"0=localhost:{port}", f"aeron:udp?endpoint=localhost:{free_udp_port()}")


def receive(client: ClusterClient, n: int) -> list[bytes]:
    got: list[bytes] = []
    await_until(lambda: client.poll_egress(lambda payload, ts: got.append(payload), 100) >= 0 and len(got) >= n,
                20, f"{n} egress messages")
    return got


def offer(client: ClusterClient, payload: bytes) -> None:
    await_until(lambda: client.offer(payload) > 0, 10, "ingress")


def test_a_python_service_echoes_each_client_in_order_and_fires_timers_through_the_log(node_env):
    service = Echo()
    with start(node_env, service) as node, connect(node_env) as a, connect(node_env) as b:
        assert (a.cluster_session_id, b.cluster_session_id, a.leadership_term_id) == (1, 2, 0)
        sent_a = [f"a{i}".encode() * (1 + i % 7) for i in range(500)]
        sent_b = [bytes([i % 256]) * (2000 if i % 50 == 3 else 10) for i in range(500)]
        for x, y in zip(sent_a, sent_b, strict=True):
            offer(a, x)
            offer(b, y)
        assert receive(a, 500) == sent_a
        assert receive(b, 500) == sent_b
        offer(a, b"timer:5")
        assert receive(a, 1) == [b"fired 5"]
        assert receive(b, 1) == [b"fired 5"]
        offer(b, b"close")
        with pytest.raises(ClusterSessionClosedError) as closed:
            await_until(lambda: b.poll_egress(lambda p, t: None) < 0, 10)
        assert (closed.value.code, closed.value.detail) == (EventCode.CLOSED, "SERVICE_ACTION")
        # The client is told when the close goes into the log; the service applies it once committed.
        await_until(lambda: (2, CloseReason.SERVICE_ACTION) in service.closed, 10, "the close applied")
        assert node.error is None and node.is_running
    assert service.opened == [1, 2] and service.timers == [5] and service.roles == [Role.LEADER]
    assert service.messages == 1002
    assert (2, CloseReason.SERVICE_ACTION) in service.closed


def test_an_exception_in_the_service_stops_it_naming_the_callback_and_the_log_position(node_env):
    service = Echo()
    with start(node_env, service) as node, connect(node_env) as a:
        offer(a, b"before")
        assert receive(a, 1) == [b"before"]
        offer(a, b"boom")
        await_until(lambda: node.error is not None, 10, "the node's error")
        assert "the service's on_session_message raised at log position" in node.error
        assert "ValueError: the service broke" in node.error
        offer(a, b"after")
        time.sleep(0.3)
        assert service.messages == 2, "no entry is given to a service past its failure"


def offer_all(cluster, ids, data, offsets, codes: list) -> None:
    """Sends a batch's answers with ``offer_batch`` in the documented loop (idle on a code in OFFER_AGAIN, skip the
    message on any other: its client is gone), each call's ``code`` appended to ``codes``."""
    sent = 0
    while sent < len(ids):
        result = cluster.offer_batch(ids[sent:], data, offsets[sent:])
        sent += result
        codes.append(result.code)
        if result.code in OFFER_AGAIN:
            cluster.idle()
        elif result.code is not None:
            sent += 1


class BatchedEcho(ClusteredService):
    """A batched service (``on_session_messages``): echoes each batch with one ``offer_batch``; ``timer:N`` fires
    timer N now; ``check`` tries two bad batches. Keeps what it was given in order: ("open", position, session),
    ("m", position, session, payload), ("t", position, timer)."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []
        self.calls: list[int] = []
        self.refused: list[str] = []
        self.codes: list = []  # each offer_batch's code (None: all went)

    def on_session_open(self, cluster, session_id, timestamp):
        self.seen.append(("open", cluster.log_position, session_id))

    def on_session_messages(self, cluster, messages):
        import numpy as np

        ids = np.frombuffer(messages.session_ids, dtype=np.int64)
        stamps = np.frombuffer(messages.timestamps, dtype=np.int64)
        positions = np.frombuffer(messages.positions, dtype=np.int64)
        offsets = np.frombuffer(messages.offsets, dtype=np.int32)
        assert len(ids) == len(stamps) == len(positions) == len(messages) == len(offsets) - 1
        assert (cluster.log_position, cluster.time) == (positions[-1], stamps[-1])
        self.calls.append(len(messages))
        for i, payload in enumerate(messages.to_list()):
            assert payload == messages[i] == bytes(memoryview(messages.data)[offsets[i]:offsets[i + 1]])
            self.seen.append(("m", int(positions[i]), int(ids[i]), payload))
            if payload.startswith(b"timer:"):
                cluster.schedule_timer(int(payload[6:]), int(stamps[i]))
            elif payload == b"check":
                # The first message goes (to this client), the second names a session not open.
                for bad in ((np.array([ids[i], 99], np.int64), b"xy", np.array([0, 1, 2], np.int32)),
                            (ids[i:i + 1], b"", np.array([0, 5], np.int32))):
                    try:
                        cluster.offer_batch(*bad)
                    except ClusterError as e:  # how many went, and the session not open, as attributes
                        self.refused.append(f"{e} (sent {getattr(e, 'sent', None)}, "
                                            f"session {getattr(e, 'session_id', None)})")
                try:  # floats are not offsets (before, any 4-byte items were read as int32)
                    cluster.offer_batch(ids[i:i + 1], b"x", np.array([0.0, 1.0], np.float32))
                except TypeError as e:
                    self.refused.append(str(e))
        # Offsets as int32 (Arrow's binary) or int64 (large_binary, numpy's default), a batch each in turn.
        column = offsets if len(self.calls) % 2 else offsets.astype(np.int64)
        offer_all(cluster, ids, messages.data, column, self.codes)

    def on_timer_event(self, cluster, correlation_id, timestamp):
        self.seen.append(("t", cluster.log_position, correlation_id))
        for session_id in cluster.session_ids():
            while cluster.offer(session_id, f"fired {correlation_id}".encode()) in OFFER_AGAIN:
                cluster.idle()


def test_a_batched_service_gets_the_logs_messages_in_batches_in_log_order_and_answers_in_bulk(node_env):
    """``on_session_messages``: every message once, in the log's order with the timers and session events
    between them, echoed per client in order by ``offer_batch``; a restart replays the same entries in the same
    order through a new service (in batches: the log is all there)."""
    driver, _, members, _, cluster_dir = node_env

    def node(service):
        return ClusterNode(service, cluster_dir, driver.dir, cluster_members=members, log_term_length="64k",
                           service_log_fragment_limit=1000)

    first = BatchedEcho()
    with node(first) as n, connect(node_env) as a, connect(node_env) as b:
        sent_a = [f"a{i}".encode() * (1 + i % 7) for i in range(500)]
        sent_b = [bytes([i % 256]) * (2000 if i % 50 == 3 else 10) for i in range(500)]
        for i, (x, y) in enumerate(zip(sent_a, sent_b, strict=True)):
            offer(a, x)
            offer(b, y)
            if i == 250:
                offer(a, b"timer:5")
        got_a, got_b = receive(a, 502), receive(b, 501)
        offer(a, b"check")
        assert receive(a, 2) == [b"x", b"check"], "the bad batch's first message went, then the echo"
        assert n.error is None
    # The timer fires into the log after "timer:5", some messages later: each client is told once, in between.
    assert [x for x in got_a if x != b"fired 5"] == sent_a[:251] + [b"timer:5"] + sent_a[251:]
    assert got_a.count(b"fired 5") == 1 and got_a.index(b"fired 5") > 251
    assert [x for x in got_b if x != b"fired 5"] == sent_b and got_b.count(b"fired 5") == 1
    assert first.refused == ["no open session 99 (message 1 of the batch; the 1 before it went) (sent 1, session 99)",
                             "offer_batch: message 0: offsets 0..5 do not lie within the 0 bytes of data "
                             "(sent None, session None)",
                             "offer_batch: offsets must be int32 or int64 (got items of format 'f', 4 bytes)"]
    messages = [e for e in first.seen if e[0] == "m"]
    assert len(messages) == 1002 and sum(first.calls) == 1002
    assert [e[1] for e in first.seen] == sorted({e[1] for e in first.seen}), "each entry once, in log order"
    timer = next(i for i, e in enumerate(first.seen) if e[0] == "t")
    assert timer > next(i for i, e in enumerate(first.seen) if e[0] == "m" and e[3] == b"timer:5")
    assert [e[3] for e in messages if e[2] == 1] == sent_a[:251] + [b"timer:5"] + sent_a[251:] + [b"check"]

    again = BatchedEcho()
    with node(again), connect(node_env):
        await_until(lambda: len(again.seen) >= len(first.seen), 20, "the log replayed")
        assert again.seen[:len(first.seen)] == first.seen
    # 1,002 messages already in the log: the replay hands them over many at a time.
    assert max(again.calls) > 1, again.calls


def test_a_batched_service_takes_up_to_a_thousand_messages_a_call_unless_told_otherwise(node_env):
    """``service_log_fragment_limit`` unset: a batched service gets up to 1,000 messages a call (seen on a
    restart's replay, the log all there), where Aeron's 50 held it to 50; set, the option rules."""
    driver, _, members, _, cluster_dir = node_env
    with ClusterNode(BatchedEcho(), cluster_dir, driver.dir, cluster_members=members,
                     log_term_length="64k"), connect(node_env) as a:
        for i in range(600):
            offer(a, f"m{i}".encode())
        assert len(receive(a, 600)) == 600
    again = BatchedEcho()
    with ClusterNode(again, cluster_dir, driver.dir, cluster_members=members, log_term_length="64k"):
        await_until(lambda: sum(again.calls) >= 600, 20, "the log replayed")
    assert max(again.calls) > 50, again.calls
    told = BatchedEcho()
    with ClusterNode(told, cluster_dir, driver.dir, cluster_members=members, log_term_length="64k",
                     service_log_fragment_limit=50):
        await_until(lambda: sum(told.calls) >= 600, 20, "the log replayed")
    assert max(told.calls) <= 50, told.calls


def test_a_batched_client_pipelines_through_its_window_and_reads_the_echoes_in_batches(node_env):
    """``ClusterClient.offer_batch`` and ``poll_egress_batch`` against a batched service: 20,000 numbered messages
    handed over 5,000 at a time through an exactly-once window of 256 uncommitted (a batch goes as far as the
    window has room; the rest is offered again), echoed each once and in order, read back a batch per call with
    the session's id and rising egress positions; offsets that do not fit are named; nothing went meanwhile."""
    import numpy as np

    driver, _, members, port, cluster_dir = node_env
    service = BatchedEcho()
    with ClusterNode(service, cluster_dir, driver.dir, cluster_members=members, log_term_length="64k",
                     service_log_fragment_limit=1000) as n, \
            ClusterClient(driver.dir, f"0=localhost:{port}", f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                          max_in_flight=256) as c:
        sent = [i.to_bytes(4, "little") * (1 + i % 5) for i in range(20_000)]
        data = b"".join(sent)
        offsets = np.concatenate(([0], np.cumsum([len(x) for x in sent]))).astype(np.int32)
        with pytest.raises(ValueError, match="message 0: offsets 0..5 do not lie within the 2 bytes of data"):
            c.offer_batch(b"ab", np.array([0, 5], np.int32))
        with pytest.raises(ValueError, match="offsets: 3 bytes is not a column of 4-byte integers"):
            c.offer_batch(b"ab", b"\0\0\0")
        with pytest.raises(TypeError, match=r"offsets must be int32 or int64 \(got items of format 'd', 8 bytes\)"):
            c.offer_batch(b"ab", np.array([0.0, 2.0]))
        with pytest.raises(ValueError, match=r"offsets\[1\] = 4294967296 does not fit a message offset"):
            c.offer_batch(b"ab", np.array([0, 1 << 32], np.int64))
        wide = offsets.astype(np.int64)  # int64 offsets (large_binary's, numpy's default) are read as such
        got: list[bytes] = []
        positions: list[int] = []
        pushed, held_back, sizes = 0, 0, []
        deadline = time.monotonic() + 120
        while len(got) < len(sent):
            if pushed < len(sent):
                want = min(5_000, len(sent) - pushed)
                column = wide if len(sizes) % 2 else offsets
                went = c.offer_batch(data, column[pushed:pushed + want + 1])
                held_back += went < want
                pushed += went
                assert c.in_flight <= 256
            batch = c.poll_egress_batch(1_000)
            sizes.append(len(batch))
            got += batch.to_list()
            assert set(np.frombuffer(batch.session_ids, np.int64).tolist()) <= {c.cluster_session_id}
            positions += np.frombuffer(batch.positions, np.int64).tolist()
            assert time.monotonic() < deadline, f"{len(got)} of {len(sent)} echoed, {pushed} offered"
        assert got == sent, "each echo once, in order"
        assert positions == sorted(set(positions)), "egress positions rise"
        assert held_back > 0, "the window held a batch back"
        assert max(sizes) > 1, "echoes come many to a poll"
        assert n.error is None
    assert sum(service.calls) == len(sent)


def test_durable_commits_refuse_an_archive_that_does_not_sync_the_log_naming_it(node_env):
    """``file_sync_level=1`` on the node and its archive at 0 (the default): the module would count as appended
    what a machine crash loses, so it stops as it starts the log's recording, naming the archive and the level
    to start it with (a sulis archive says its level in the recording's position counter)."""
    driver, archive, members, _, cluster_dir = node_env
    with pytest.raises(ClusterError) as e:
        with ClusterNode(Echo(), cluster_dir, driver.dir, cluster_members=members, log_term_length="64k",
                         file_sync_level=1) as n:
            await_until(lambda: n.error is not None or not n.is_running, 30, "the module to stop")
            raise ClusterError(n.error)
    assert "file_sync_level 1: the log's recording 0 is written by archive" in str(e.value), e.value
    assert "at file_sync_level 0" in str(e.value) and "file_sync_level 1 or above" in str(e.value), e.value


class Waiting(ClusteredService):
    """Idles in its callback for what never comes, as a service retrying an offer does."""

    def __init__(self) -> None:
        self.idled = 0
        self.told: str | None = None

    def on_session_message(self, cluster, session_id, timestamp, payload):
        try:
            while True:
                cluster.idle()
                self.idled += 1
        except ClusterError as e:
            self.told = str(e)
            raise


def test_a_service_idling_in_a_callback_is_told_when_the_node_closes_and_the_close_returns(node_env):
    """A fault run hung a member: its consensus module had stopped (a full disk), and closing the node waited
    for ever on a service callback retrying an offer. Once the node stops, ``idle`` (and the offers) raise."""
    service = Waiting()
    node = start(node_env, service)
    with connect(node_env) as a:
        offer(a, b"wait")
        await_until(lambda: service.idled > 100, 10, "the service to idle")
        closing = threading.Thread(target=node.close)
        closing.start()
        closing.join(20)
        assert not closing.is_alive(), "close() waited on a service idling in a callback"
    assert service.told is not None and "the cluster node is stopping" in service.told, service.told


def test_a_restarted_node_rebuilds_its_python_service_from_the_log(node_env):
    first = Echo()
    node = start(node_env, first)
    a = connect(node_env)
    for i in range(50):
        offer(a, f"m{i}".encode())
    assert len(receive(a, 50)) == 50
    node.close()  # a's session still open in the log
    again = Echo()
    with start(node_env, again), connect(node_env) as b:
        assert again.opened[0] == 1 and again.messages == 50, "the log replayed through the new service"
        # The old term's session is closed by the restart, and its client told.
        await_until(lambda: (1, CloseReason.TIMEOUT) in again.closed, 10, "session 1 closed")
        with pytest.raises(ClusterSessionClosedError):
            await_until(lambda: a.poll_egress(lambda p, t: None) < 0, 10)
        a.close()
        assert (b.cluster_session_id, b.leadership_term_id) == (2, 1)
        offer(b, b"after")
        assert receive(b, 1) == [b"after"]
    assert again.roles == [Role.LEADER], "a follower (its first role) while replaying, then the leader"


def test_a_service_without_on_take_snapshot_cannot_be_snapshotted_and_goes_on(node_env):
    service = Echo()
    with start(node_env, service) as node, connect(node_env) as a:
        offer(a, b"before")
        assert receive(a, 1) == [b"before"]
        with pytest.raises(ClusterError, match="the snapshot failed: service 0 could not write its snapshot"):
            node.snapshot()
        offer(a, b"after")
        assert receive(a, 1) == [b"after"]
        assert node.error is None and node.snapshot_count == 0


def test_a_second_node_on_the_same_directory_is_refused_naming_the_holder(node_env):
    with start(node_env, Echo()), connect(node_env) as a:
        with pytest.raises(ClusterError, match=f"pid {os.getpid()}\\) is running on"):
            start(node_env, Echo())
        offer(a, b"still")
        assert receive(a, 1) == [b"still"]


def test_the_nodes_settings_come_from_its_options_table_and_bad_ones_are_named(monkeypatch):
    monkeypatch.setenv("SULIS_CLUSTER_SESSION_TIMEOUT", "3s")
    rows = {name: (value, source, env) for name, value, source, env, _ in
            cluster_config(cluster_members="0,h:1,h:2,h:3,h:0,h:4", app_version="1.2.3", leader_heartbeat_timeout=4.5)}
    assert rows["session_timeout"] == ("3s", "environment", "SULIS_CLUSTER_SESSION_TIMEOUT")
    assert rows["app_version"] == ("1.2.3", "explicit", "SULIS_CLUSTER_APP_VERSION")
    assert rows["leader_heartbeat_timeout"][:2] == ("4500ms", "explicit")
    assert rows["ingress_stream_id"] == ("101", "default", "SULIS_CLUSTER_INGRESS_STREAM_ID")
    with pytest.raises(sulis.ConfigurationError, match="log_term_length 100000: a power of two"):
        cluster_config(log_term_length=100_000)
    with pytest.raises(sulis.ConfigurationError, match="app_version"):
        cluster_config(app_version="1.2")
    with pytest.raises(sulis.ConfigurationError, match="no_such_option"):
        cluster_config(no_such_option=1)


class Tally(ClusteredService):
    """Adds each message's number to a total and answers it; its snapshot is the total."""

    def __init__(self) -> None:
        self.total = 0
        self.started_from: int | None = None
        self.fail_snapshot = False

    def on_start(self, cluster, snapshot):
        if snapshot is not None:
            self.total = self.started_from = int(snapshot[0])
            assert snapshot[1] == b"x" * 100_000, "a long message comes back whole"

    def on_session_message(self, cluster, session_id, timestamp, payload):
        self.total += int(payload)
        while cluster.offer(session_id, str(self.total).encode()) in OFFER_AGAIN:
            cluster.idle()

    def on_take_snapshot(self, cluster, snapshot):
        snapshot.write(str(self.total).encode())
        snapshot.write(b"x" * 100_000)
        # What no replay would ask again is refused while the snapshot is written.
        self.refused = not cluster.offer_to_cluster(b"x") and not cluster.schedule_timer(1, 0)
        if self.fail_snapshot:
            raise RuntimeError("no room for the snapshot")


def add(client: ClusterClient, n: int) -> int:
    offer(client, str(n).encode())
    return int(receive(client, 1)[0])


def test_the_leader_takes_snapshots_on_its_own_by_log_length_and_by_time(node_env, capfd):
    """The snapshot policy: with ``snapshot_log_len`` 64k, a snapshot is taken once 64 KiB of log was appended
    since the latest (without anyone asking), so a restart replays at most about that much; with
    ``snapshot_interval`` 1s, one is taken a second after the latest once any log came since. A service with no
    ``on_take_snapshot`` of its own is left out by default: its node takes none, and fails none."""
    driver, _, members, _, cluster_dir = node_env
    first = Tally()
    with ClusterNode(first, cluster_dir, driver.dir, cluster_members=members, log_term_length="64k",
                     snapshot_log_len="64k", snapshot_interval="0s") as node, connect(node_env) as a:
        payload = b"1" + b" " * 1000  # int() ignores the spaces: about 1 KiB of log a message
        for _ in range(70):  # about 70 KiB: past 64 KiB once
            offer(a, payload)
        receive(a, 70)
        await_until(lambda: node.snapshot_count == 1, 30, "a snapshot taken by the policy")
        for _ in range(20):
            offer(a, payload)
        receive(a, 20)
        assert node.snapshot_count == 1, "not again before another 64 KiB"
    again = Tally()
    with ClusterNode(again, cluster_dir, driver.dir, cluster_members=members, log_term_length="64k",
                     snapshot_log_len="0", snapshot_interval="1s") as node, connect(node_env) as b:
        assert again.started_from is not None and 64 <= again.started_from <= 71, again.started_from
        assert again.total == 90, "the snapshot, and the log after it"
        assert add(b, 1) == 91
        await_until(lambda: node.snapshot_count == 1, 30, "a snapshot a second after log came")
    # A service that cannot be snapshotted, at the default policy: past 64 MiB of log, none asked for, none failed.
    class Counter(ClusteredService):
        def __init__(self) -> None:
            self.messages = 0

        def on_session_message(self, cluster, session_id, timestamp, payload):
            self.messages += 1
            if payload == b"done":
                while cluster.offer(session_id, str(self.messages).encode()) in OFFER_AGAIN:
                    cluster.idle()

    counter = Counter()
    with ClusterNode(counter, f"{cluster_dir}-counter", driver.dir, cluster_members=members,
                     log_term_length="16m") as node, connect(node_env) as c:
        import numpy as np

        n = 66 * 1024  # 66 MiB of payloads
        offsets = np.arange(0, 1024 * n + 1, 1024, dtype=np.int64)
        data = b"x" * (1024 * n)
        sent = [0]

        def more() -> bool:
            sent[0] += c.offer_batch(data, offsets[sent[0]:])
            c.poll_egress(lambda p, t: None, 100)
            return sent[0] == n
        await_until(more, 120, "the ingress to take 66 MiB")
        offer(c, b"done")
        assert receive(c, 1) == [str(n + 1).encode()]
        capfd.readouterr()
        time.sleep(0.5)  # the policy looks every 100 ms: five looks at more than 64 MiB of log
        assert node.snapshot_count == 0 and node.error is None
        said = capfd.readouterr().err
        assert "snapshot" not in said, said


def test_a_node_restarts_from_its_snapshot_and_replays_only_the_log_after_it(node_env):
    first = Tally()
    with start(node_env, first) as node, connect(node_env) as a:
        assert [add(a, i) for i in range(1, 51)][-1] == 1275
        assert node.snapshot() == 1 and node.snapshot_count == 1
        assert node.state == ModuleState.ACTIVE
        assert first.refused
        first.fail_snapshot = True  # a failed snapshot is not recovered from, and the node goes on
        with pytest.raises(ClusterError, match="the snapshot failed: service 0 could not write its snapshot"):
            node.snapshot()
        assert node.snapshot_count == 1 and node.error is None
        assert add(a, 51) == 1326
        node.suspend()
        assert node.state == ModuleState.SUSPENDED
        with pytest.raises(ClusterError, match="suspended: resume it before a snapshot"):
            node.snapshot()
        offer(a, b"52")  # waits in the ingress image while suspended: not dropped
        time.sleep(0.3)
        assert first.total == 1326
        node.resume()
        assert int(receive(a, 1)[0]) == 1378
    again = Tally()
    with start(node_env, again) as node, connect(node_env) as b:
        assert again.started_from == 1275, "the service started from the snapshot"
        assert again.total == 1378, "and the log after it (51 and 52) replayed"
        assert add(b, 1) == 1379
        node.shutdown()  # a snapshot, then the member stops
        assert not node.is_running and node.error is None
    third = Tally()
    with start(node_env, third) as node:
        assert (third.started_from, third.total) == (1379, 1379), "the shutdown's snapshot, nothing to replay"
        node.abort()
        assert not node.is_running and node.error is None


def test_a_client_whose_egress_is_on_port_0_is_answered_on_the_port_its_driver_bound(node_env):
    """``aeron:udp?endpoint=localhost:0`` as the egress, as Aeron's client takes it: the connect request
    names the port the client's driver bound, so the cluster's answers reach it (before, the cluster was
    told port 0 and the connect timed out)."""
    driver, _, _, port, _ = node_env
    with start(node_env, Tally()), \
            ClusterClient(driver.dir, f"0=localhost:{port}", "aeron:udp?endpoint=localhost:0") as c:
        assert add(c, 5) == 5 and add(c, 6) == 11

def test_sessions_given_one_client_share_it_and_leave_it_open(node_env):
    """Many sessions in one process on one ``sulis.Client`` (Aeron's ``AeronCluster.Context.aeron()``): each
    is answered on its own egress, closing one closes neither the others nor the client, and the client's
    driver holds one client for all of them."""
    driver, _, _, port, _ = node_env
    with start(node_env, Echo()), sulis.Client(dir=driver.dir) as shared:
        sessions = [ClusterClient(None, f"0=localhost:{port}", "aeron:udp?endpoint=localhost:0", client=shared)
                    for _ in range(5)]
        assert all(s.driver_dir == driver.dir for s in sessions)
        for i, s in enumerate(sessions):
            offer(s, f"from {i}".encode())
        for i, s in enumerate(sessions):
            assert receive(s, 1) == [f"from {i}".encode()]
        own = [c["label"] for c in sulis.CountersReader(driver.dir).counters()
               if c["label"].startswith("client-heartbeat") and "sulis-cluster-client" in c["label"]]
        assert own == [], "the sessions made clients of their own"
        sessions[0].close()
        offer(sessions[1], b"still here")
        assert receive(sessions[1], 1) == [b"still here"]
        sub = shared.add_subscription("aeron:ipc", 77)  # the shared client is still open
        sub.close()
        for s in sessions[1:]:
            s.close()
        with pytest.raises(TypeError, match="not the directory of the client"):
            ClusterClient(str(node_env[4]), f"0=localhost:{port}", client=shared)


def test_a_session_closed_by_a_restarted_node_tells_its_client_which_messages_were_applied(node_env):
    """The outcome of every message is the client's to know: five answered, three more offered while the node is
    suspended (held in the ingress, never logged), the node closed and started again. Its new term closes the
    sessions of the last (TIMEOUT, as Aeron's) and, once the close is committed, tells the client the session's
    final count first: ``ClusterSessionClosedError.messages_committed`` is 5 of the 8 ``offered``, so messages 6
    to 8 were not applied and never will be (before, the client could not tell)."""
    with start(node_env, Tally()) as node, connect(node_env) as a:
        assert [add(a, i) for i in range(1, 6)][-1] == 15
        await_until(lambda: a.poll_egress(lambda p, t: None) >= 0 and a.committed == 5, 20, "the count of 5")
        node.suspend()
        for _ in range(3):
            offer(a, b"1")
        assert (a.offered, a.committed, a.in_flight) == (8, 5, 3)
        node.close()
        again = Tally()
        with start(node_env, again):
            with pytest.raises(ClusterSessionClosedError) as closed:
                await_until(lambda: a.poll_egress(lambda p, t: None) < 0, 30, "the session's close")
            assert again.total == 15, "what was logged, replayed"
        assert (a.committed, a.offered) == (5, 8)
    assert closed.value.code == EventCode.CLOSED and closed.value.detail == "TIMEOUT", closed.value
    assert closed.value.messages_committed == 5, closed.value.messages_committed


class BatchedTally(Tally):
    """Tally as a batched service: each batch's answers go with one ``offer_batch``, in the documented loop
    (idle on a code in OFFER_AGAIN, skip the message on any other code)."""

    def __init__(self) -> None:
        super().__init__()
        self.codes: list = []

    def on_session_messages(self, cluster, messages):
        import numpy as np

        answers = []
        for payload in messages.to_list():
            self.total += int(payload)
            answers.append(str(self.total).encode())
        ids = np.frombuffer(messages.session_ids, np.int64)
        data = b"".join(answers)
        offsets = np.concatenate(([0], np.cumsum([len(a) for a in answers]))).astype(np.int32)
        offer_all(cluster, ids, data, offsets, self.codes)


class OutcomeTally(Tally):
    """Tally keeping each ``offer``'s result and its truth."""

    def __init__(self) -> None:
        super().__init__()
        self.outcomes: list = []

    def on_session_message(self, cluster, session_id, timestamp, payload):
        self.total += int(payload)
        while True:
            result = cluster.offer(session_id, str(self.total).encode())
            self.outcomes.append((result, bool(result)))
            if result not in OFFER_AGAIN:
                break
            cluster.idle()


@pytest.mark.parametrize("kind", ["offer", "offer_batch"])
def test_a_service_offering_to_a_vanished_client_does_not_freeze_the_cluster(node_env, kind):
    """A client's message held while the node is suspended, the client killed (its driver too), the node
    resumed: the service's answer meets NOT_CONNECTED and its documented retry loop ends (``offer``: ``in
    OFFER_AGAIN``; ``offer_batch``: the result's ``code``, the vanished client's answer skipped), so the next
    client is answered. With ``offer`` a bool, False for a vanished client as for back-pressure, the service
    spun on that entry for ever; so did the batched loop while ``offer_batch`` returned a bare count."""
    driver, _, _, port, _ = node_env
    service = OutcomeTally() if kind == "offer" else BatchedTally()
    with start(node_env, service) as node:
        vanish_with_a_message_held(f"0=localhost:{port}", node.suspend, driver.dir)
        node.resume()
        with connect(node_env) as b:
            assert add(b, 2) == 3, "the vanished client's 1, then this 2"
        assert node.error is None
    if kind == "offer_batch":  # the vanished client's answer waited in its session's queue: every call went whole
        assert service.codes and all(code is None for code in service.codes), service.codes
    else:  # ``if cluster.offer(...)`` reads as it behaves: true for a position, false for a code
        assert service.outcomes and all(truth == (result > 0) for result, truth in service.outcomes), service.outcomes


class BatchedClosingEcho(Echo):
    """Echo as a batched service: a batch's echoes go with one ``offer_batch`` in the documented loop, each call's
    ``code`` kept."""

    def __init__(self) -> None:
        super().__init__()
        self.codes: list = []

    def on_session_messages(self, cluster, messages):
        import numpy as np

        ids = np.frombuffer(messages.session_ids, np.int64)
        offsets = np.frombuffer(messages.offsets, np.int32)
        offer_all(cluster, ids, messages.data, offsets, self.codes)


@pytest.mark.parametrize("kind", ["offer", "offer_batch"])
def test_a_client_that_stops_reading_or_vanishes_costs_only_itself(node_env, kind):
    """A service's ``offer`` never waits on one client's egress: what the egress cannot take waits in the
    session's queue. Three clients vanish at once with a message each held in the log: a fourth client is
    answered at once (before, the service spun 5 s on each vanished client in turn, 15 s), and the three
    sessions are closed once their egresses took nothing for ``egress_stall_timeout``. A client that stops
    reading its egress while alive (before: BACK_PRESSURED for as long as it lived, nothing applied for anyone)
    is closed when its queue passes ``egress_queue_len``, and reads why after its backlog; every other
    client is answered meanwhile. Batched, ``offer_batch`` says NOT_CONNECTED for the answers it could not
    queue, and the documented loop skips them."""
    driver, _, members, port, cluster_dir = node_env
    service = Echo() if kind == "offer" else BatchedClosingEcho()
    with ClusterNode(service, cluster_dir, driver.dir, cluster_members=members, log_term_length="64k",
                     egress_queue_len="256k", egress_stall_timeout="3s", session_timeout="60s") as node:
        vanish_with_a_message_held(f"0=localhost:{port}", node.suspend, driver.dir, clients=3)
        node.resume()
        with connect(node_env) as fast:
            started = time.monotonic()
            offer(fast, b"ping")
            assert receive(fast, 1) == [b"ping"]
            # A liveness bound, not a speed figure: the service waiting on each vanished client took 15 s.
            assert time.monotonic() - started < 10, "answered behind the vanished clients' answers"
            print(f"answered {1000 * (time.monotonic() - started):.1f} ms after three clients vanished")
            # Closed by the container (SERVICE_ACTION), not by the session timeout (60 s here).
            await_until(lambda: sum(r == CloseReason.SERVICE_ACTION for _, r in service.closed) >= 3, 30,
                        "the vanished clients' sessions to close")
            # A client alive that never reads its egress (not exactly once: its offers never read it either).
            slow = ClusterClient(driver.dir, f"0=localhost:{port}",
                                 f"aeron:udp?endpoint=localhost:{free_udp_port()}", exactly_once=False)
            try:
                for _ in range(12_000):  # 12 MB of answers: past its egress's window (8 MiB) and the 256 KiB queue
                    offer(slow, b"s" * 1000)
                waits = []
                for i in range(20):  # every one answered while the slow client lives, its session open or closed
                    started = time.monotonic()
                    offer(fast, f"f{i}".encode())
                    assert receive(fast, 1) == [f"f{i}".encode()]
                    waits.append(time.monotonic() - started)
                    slow.send_keep_alive()
                print(f"answered beside a client that does not read: longest {1000 * max(waits):.1f} ms")
                await_until(lambda: (slow.cluster_session_id, CloseReason.SERVICE_ACTION) in service.closed, 30,
                            "the slow session's close")
                with pytest.raises(ClusterSessionClosedError) as closed:
                    await_until(lambda: slow.poll_egress(lambda p, t: None, 100) < 0, 30, "the close's notice")
                assert "egress_queue_len" in closed.value.detail, closed.value.detail
            finally:
                slow.close()
        assert node.error is None
    if kind == "offer_batch":
        assert sulis.OfferResult.NOT_CONNECTED in service.codes, service.codes


CHILD = '''
import os, sys, time
import sulis
from sulis.cluster import OFFER_AGAIN, ClusteredService, ClusterNode

base, members, slow, inside = sys.argv[1:5]


class Tally(ClusteredService):
    def __init__(self):
        self.total = 0
        self.started_from = None

    def on_start(self, cluster, snapshot):
        if snapshot is not None:
            self.total = self.started_from = int(snapshot[0])

    def on_session_message(self, cluster, session_id, timestamp, payload):
        self.total += int(payload)
        while cluster.offer(session_id, str(self.total).encode()) in OFFER_AGAIN:
            cluster.idle()

    def on_take_snapshot(self, cluster, snapshot):
        snapshot.write(str(self.total).encode())
        if os.path.exists(slow):  # killed in here: half a snapshot, recorded, named nowhere
            open(inside, "w").close()
            time.sleep(120)


service = Tally()
with sulis.MediaDriver(dir=os.path.join(base, "driver"), threading_mode="shared",
                       dir_delete_on_start=True) as driver, \\
        sulis.Archive(os.path.join(base, "archive"), driver_dir=driver.dir):
    with ClusterNode(service, os.path.join(base, "cluster"), driver.dir, cluster_members=members,
                     log_term_length="64k") as node:
        print("ready", service.started_from, service.total, flush=True)
        for line in sys.stdin:
            if line.strip() == "snapshot":
                print("snapshot", node.snapshot(timeout=150), flush=True)
'''


def test_a_node_killed_in_the_middle_of_a_snapshot_recovers_from_the_one_before(make_driver, tmp_path):
    import signal
    import subprocess
    import sys

    script = tmp_path / "child.py"
    script.write_text(CHILD)
    port = free_udp_port()
    members = f"0,localhost:{port},localhost:{free_udp_port()},localhost:20003,localhost:0,localhost:8010"
    slow, inside = tmp_path / "slow", tmp_path / "inside"
    args = [sys.executable, str(script), str(tmp_path / "node"), members, str(slow), str(inside)]

    def launch() -> tuple[subprocess.Popen, str]:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        assert line.startswith("ready"), line
        return proc, line.split(maxsplit=1)[1].strip()

    driver = make_driver()
    proc, state = launch()
    try:
        assert state == "None 0"
        with ClusterClient(driver.dir, f"0=localhost:{port}", f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                           message_timeout=10.0) as c:
            assert [add(c, i) for i in range(1, 31)][-1] == 465
            proc.stdin.write("snapshot\n")
            proc.stdin.flush()
            assert proc.stdout.readline().split() == ["snapshot", "1"]
            assert [add(c, i) for i in range(31, 41)][-1] == 820
            slow.touch()
            proc.stdin.write("snapshot\n")
            proc.stdin.flush()
            await_until(inside.exists, 30, "the service in the middle of its snapshot")
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=10)
        slow.unlink()
        proc, state = launch()
        # The first snapshot (465) and the log after it: nothing lost, nothing twice.
        assert state == "465 820"
        with ClusterClient(driver.dir, f"0=localhost:{port}", f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                           message_timeout=10.0) as c:
            assert add(c, 1) == 821
            proc.stdin.write("snapshot\n")  # and the next snapshot is taken
            proc.stdin.flush()
            assert proc.stdout.readline().split() == ["snapshot", "1"]
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_the_log_before_a_snapshot_is_purged_and_a_restart_needs_only_what_is_left(make_driver, tmp_path):
    driver = make_driver()
    port = free_udp_port()
    members = f"0,localhost:{port},localhost:{free_udp_port()},localhost:20003,localhost:0,localhost:8010"
    env = (driver, None, members, port, tmp_path / "cluster")
    with sulis.Archive(str(tmp_path / "archive"), driver_dir=driver.dir, segment_file_length="64k"):
        with start(env, Tally()) as node, connect(env) as a:
            with pytest.raises(ClusterError, match="no snapshot, so a restart needs the whole log"):
                node.purge_log()
            with pytest.raises(ClusterError, match="cluster log purge refused: the leader has no snapshot"):
                node.purge_log(cluster=True)
            for _ in range(1500):  # about 144 KiB of log: more than two 64 KiB segments
                add(a, 1)
            node.snapshot()
            purged = node.purge_log(cluster=True)  # one member: the cluster's purge is its own
            assert purged["segments_deleted"] >= 2, purged
            assert 0 < purged["start_position"] <= purged["snapshot_position"], purged
            assert node.purge_log()["segments_deleted"] == 0, "nothing more before the same snapshot"
            assert add(a, 1) == 1501
        again = Tally()
        with start(env, again) as node, connect(env) as b:
            assert (again.started_from, again.total) == (1500, 1501)
            assert add(b, 1) == 1502
            assert node.error is None


CLOCK_SERVICES = '''
import datetime
import random
import time
from datetime import datetime as Datetime
from time import time as now

from sulis.cluster import OFFER_AGAIN, ClusteredService

class Careless(ClusteredService):
    """Answers ``read:<what>`` with what a member other than this one would not see the same."""

    def __init__(self):
        self.started_at = time.time()      # outside callbacks: not checked
        self.rng = random.Random(7)        # a seeded generator of its own: deterministic

    def on_session_message(self, cluster, session_id, timestamp, payload):
        what = payload.decode().split(":", 1)[1]
        value = {"cluster-time": lambda: cluster.time, "seeded": lambda: self.rng.random(),
                 "time.time": lambda: time.time(), "now": lambda: now(),
                 "datetime.now": lambda: Datetime.now(), "datetime.datetime.now": lambda: datetime.datetime.now(),
                 "random": lambda: random.random()}[what]()
        while cluster.offer(session_id, str(value).encode()) in OFFER_AGAIN:
            cluster.idle()

class CarelessBatched(ClusteredService):
    """The same, taking the log's messages in batches."""

    def on_session_messages(self, cluster, messages):
        for session_id, payload in zip(memoryview(messages.session_ids).tolist(), messages.to_list()):
            value = cluster.time if payload == b"read:cluster-time" else time.time()
            while cluster.offer(session_id, str(value).encode()) in OFFER_AGAIN:
                cluster.idle()
'''


@pytest.mark.parametrize("call", ["time.time", "now", "datetime.now", "datetime.datetime.now", "random"])
def test_check_determinism_stops_a_service_that_reads_the_clock_or_unseeded_randomness(node_env, call, tmp_path,
                                                                                        monkeypatch):
    """With check_determinism, a service that reads the wall clock (however it imported it) or the shared
    random generator in a callback stops, naming the call, the callback and the log position; cluster time
    and a seeded generator of its own pass. Without it, the same service runs (the check is opt-in)."""
    (tmp_path / "careless_service.py").write_text(CLOCK_SERVICES)
    monkeypatch.syspath_prepend(str(tmp_path))
    import careless_service

    driver, _, members, _, cluster_dir = node_env
    with ClusterNode(careless_service.Careless(), cluster_dir, driver.dir, cluster_members=members,
                     log_term_length="64k", check_determinism=True) as node, connect(node_env) as a:
        for ok in ("cluster-time", "seeded"):
            offer(a, f"read:{ok}".encode())
            assert len(receive(a, 1)) == 1
        offer(a, f"read:{call}".encode())
        await_until(lambda: node.error is not None, 10, "the node's error")
        assert "DeterminismError" in node.error and "Careless.on_session_message at log position" in node.error
        assert {"time.time": "time.time called", "now": "time.time called", "random": "random.random called",
                "datetime.now": "datetime.datetime.now called",
                "datetime.datetime.now": "datetime.datetime.now called"}[call] in node.error, node.error
    assert time.time() > 0 and careless_service.time.time() > 0  # outside a callback the clock reads as usual


def test_check_determinism_stops_a_batched_service_that_reads_the_clock(node_env, tmp_path, monkeypatch):
    """A batched service (``on_session_messages``) stays batched under check_determinism, and is checked."""
    (tmp_path / "careless_batched.py").write_text(CLOCK_SERVICES)
    monkeypatch.syspath_prepend(str(tmp_path))
    import careless_batched

    driver, _, members, _, cluster_dir = node_env
    with ClusterNode(careless_batched.CarelessBatched(), cluster_dir, driver.dir, cluster_members=members,
                     log_term_length="64k", check_determinism=True) as node, connect(node_env) as a:
        offer(a, b"read:cluster-time")
        assert len(receive(a, 1)) == 1
        offer(a, b"read:time.time")
        await_until(lambda: node.error is not None, 10, "the node's error")
        assert "DeterminismError" in node.error and "time.time called" in node.error
        assert "CarelessBatched.on_session_messages at log position" in node.error, node.error


def test_without_check_determinism_a_clock_reading_service_runs(node_env, tmp_path, monkeypatch):
    (tmp_path / "careless_plain.py").write_text(CLOCK_SERVICES)
    monkeypatch.syspath_prepend(str(tmp_path))
    import careless_plain

    with start(node_env, careless_plain.Careless()) as node, connect(node_env) as a:
        offer(a, b"read:time.time")
        assert float(receive(a, 1)[0]) > 0
        assert node.error is None


def test_a_silent_session_times_out_its_client_is_told_and_the_member_counts_it(node_env):
    driver, _, members, _, cluster_dir = node_env
    service = Echo()
    with ClusterNode(service, cluster_dir, driver.dir, cluster_members=members, log_term_length="64k",
                     session_timeout="3s"), connect(node_env) as quiet, connect(node_env) as talking:
        def keep_talking() -> None:
            talking.send_keep_alive()
            talking.poll_egress(lambda p, t: None)

        keep_talking()
        assert cluster_counters(driver.dir)["cluster-timed-out-client-count"] == 0
        offer(quiet, b"hello")
        got: list[bytes] = []
        await_until(lambda: (keep_talking(), quiet.poll_egress(lambda p, t: got.append(p)))[1] >= 0 and got, 20,
                    "quiet's echo")
        assert got == [b"hello"]
        # Quiet says nothing from now on; talking keeps alive (every 50 ms, at any machine's speed) until
        # the member closed quiet's session.
        await_until(lambda: keep_talking() or (quiet.cluster_session_id, CloseReason.TIMEOUT) in service.closed,
                    30, lambda: f"the silent session closed for its timeout (closed: {service.closed})",
                    interval=0.05)
        with pytest.raises(ClusterSessionClosedError, match="TIMEOUT"):
            await_until(lambda: quiet.poll_egress(lambda p, t: None) < 0, 10)
        counters = cluster_counters(driver.dir)
        assert counters["cluster-timed-out-client-count"] == 1
        assert counters["cluster-election-count"] == 1
        assert counters["cluster-leadership-term-id"] == 0
        offer(talking, b"still here")
        assert receive(talking, 1) == [b"still here"]
