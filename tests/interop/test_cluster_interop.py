"""The Cluster against Aeron Java 1.51, both ways: Aeron's own ``AeronCluster`` client
(bench/peers/ClusterPeer.java), on an Aeron Java media driver of its own, opens a session with a
one-member sulis cluster over UDP, offers messages (some fragmented) and gets each echoed, in order, by
a Python service, then closes its session, which the service sees as a client's close; it also follows a
three-member sulis cluster through the SIGKILL of its leader; and ``sulis.cluster.ClusterClient`` gets
its messages echoed by Aeron's one-member EchoServiceNode.
"""

from __future__ import annotations

import json
import os
import subprocess

import peers  # noqa: E402
import pytest

import sulis
from clusterprocs import Member, loopback_members
from conftest import KERNEL_STALL, await_until, free_udp_port, run_cli
from sulis.cluster import OFFER_AGAIN, CloseReason, ClusterClient, ClusteredService, ClusterError, ClusterNode

pytestmark = pytest.mark.interop


class Echo(ClusteredService):
    def __init__(self) -> None:
        self.opened: list[int] = []
        self.closed: list[tuple[int, int]] = []

    def on_session_open(self, cluster, session_id, timestamp):
        self.opened.append(session_id)

    def on_session_close(self, cluster, session_id, timestamp, close_reason):
        self.closed.append((session_id, close_reason))

    def on_session_message(self, cluster, session_id, timestamp, payload):
        while cluster.offer(session_id, payload) in OFFER_AGAIN:
            cluster.idle()


@pytest.fixture
def current():
    return peers.usable("current")


@pytest.fixture
def harness():
    with peers.Harness() as h:
        yield h


def test_aeron_clusters_client_gets_its_messages_echoed_by_a_sulis_cluster(current, harness, make_driver, tmp_path):
    driver = make_driver()
    port = free_udp_port()
    members = f"0,localhost:{port},localhost:{free_udp_port()},localhost:20003,localhost:0,localhost:8010"
    service = Echo()
    with sulis.Archive(str(tmp_path / "archive"), driver_dir=driver.dir), \
            ClusterNode(service, tmp_path / "cluster", driver.dir, cluster_members=members,
                        log_term_length="1m", session_timeout="30s") as node:  # past a stalled Aeron driver
        # The driver tolerates its client's silence as long (Aeron requires the unblock timeout above it).
        _, aeron_dir = harness.start_driver("aeron", current, {"aeron.client.liveness.timeout": "60s",
                                                               "aeron.publication.unblock.timeout": "75s"})
        cp = peers.aeron_java.classpath(current, peers.aeron_java.SOURCE.with_name("ClusterPeer.java"))
        # Aeron's client gives the whole connect 5 s by default; the suite's busy 2 cores once made the
        # egress connect take longer (a CI-load flake, not a refusal), so it gets 20 s here; and a CI run
        # (2026-11-26) saw Aeron's driver, beside Spark's JVMs, miss its keepalive for 10.4 s, the client's
        # default driver timeout, so that is 30 s (as in the three-member test below).
        props = {"aeron.dir": aeron_dir, "aeron.cluster.message.timeout": "20s", "aeron.driver.timeout": "30000"}
        cmd = peers.aeron_java.command(current, props, "ClusterPeer", [
            "echo", f"ingress_endpoints=0=localhost:{port}", f"egress=aeron:udp?endpoint=localhost:{free_udp_port()}",
            "count=2000"], cp)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res == {"session_id": 1, "leadership_term_id": 0, "leader_member_id": 0, "sent": 2000,
                       "received": 2000, "errors": []}, res
        await_until(lambda: service.closed == [(1, CloseReason.CLIENT_ACTION)], 10, "the client's close")
        assert node.error is None
    assert service.opened == [1]


ECHO_SERVICE = """
from sulis.cluster import OFFER_AGAIN, ClusteredService

class Echo(ClusteredService):
    def on_session_message(self, cluster, session_id, timestamp, payload):
        # A client gone (NOT_CONNECTED) ends the loop: it must not stall the cluster.
        while cluster.offer(session_id, payload) in OFFER_AGAIN:
            cluster.idle()
"""


@pytest.mark.timeout(700)  # a wait for the "heavy" lock (up to about 400 s under load), then the test
@pytest.mark.usefixtures("heavy")
def test_aeron_clusters_client_follows_a_three_member_sulis_cluster_through_a_sigkill_of_its_leader(
        current, harness, make_driver, tmp_path):
    """Three ``sulis cluster-node`` processes; Aeron's client gets 200 messages echoed one at a time, the
    leader it names is SIGKILLed, and it gets 200 more echoed: it follows the NewLeaderEvent of the
    member the other two elect, itself (AeronCluster does), resending what the dead leader never echoed."""
    (tmp_path / "echo_service.py").write_text(ECHO_SERVICE)
    members, ingress = loopback_members(3)
    # The members time a silent session out after 30 s, as the client tolerates a silent cluster: a CI run
    # once starved the client's Aeron driver for over 10 s (the default) and its session was closed.
    nodes = [Member(tmp_path, i, members, "echo_service:Echo", extra=("--session-timeout", "30s"))
             for i in range(3)]
    peer = None
    try:
        for n in nodes:
            n.start()
        endpoints = ",".join(f"{i}=localhost:{p}" for i, p in enumerate(ingress))
        # Aeron's client asks once and waits: a first election under load can replace the leader it asked before
        # that leader answers (a CI run with busy CPUs: no answer in 30 s). A sulis client, which asks again,
        # opens a session first, so Aeron's finds a leader that answers.
        with ClusterClient(make_driver().dir, endpoints, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                           message_timeout=120.0):
            pass
        # The driver tolerates its client's silence as long (Aeron requires the unblock timeout above it).
        _, aeron_dir = harness.start_driver("aeron", current, {"aeron.client.liveness.timeout": "60s",
                                                               "aeron.publication.unblock.timeout": "75s"})
        cp = peers.aeron_java.classpath(current, peers.aeron_java.SOURCE.with_name("ClusterPeer.java"))
        # Three members, two JVMs and the suite's other worker on two cores: CI runs with busy CPUs starved the
        # Aeron driver past the client's 10 s keepalive timeout, and once past 30 s. The client tolerates 60 s,
        # as the ClusterBackup test's JVMs do.
        props = {"aeron.dir": aeron_dir, "aeron.cluster.message.timeout": "30s", "aeron.driver.timeout": "60000"}
        cmd = peers.aeron_java.command(current, props, "ClusterPeer", [
            "failover", f"ingress_endpoints={endpoints}", f"egress=aeron:udp?endpoint=localhost:{free_udp_port()}",
            "count=200"], cp)
        peer = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        line = peer.stdout.readline()
        assert line.startswith("{"), line + peer.stderr.read()[-3000:]
        first = json.loads(line)
        assert (first["phase"], first["echoed"], first["errors"]) == (1, 200, 0), json.dumps(first)
        leader = first["leader_member_id"]
        nodes[leader].kill()
        peer.stdin.write("go\n")
        peer.stdin.flush()
        out, err = peer.communicate(timeout=120)
        lines = out.strip().splitlines()
        assert lines, f"Aeron's client said nothing after the kill (exit {peer.returncode}):\n{err[-4000:]}\n" + \
            "\n".join(f"member {n.id}: {n.stderr()[-1500:]}" for n in nodes) + "\n" + harness.describe()
        second = json.loads(lines[-1])
        assert peer.returncode == 0, out[-3000:] + err[-3000:]
        assert second["phase"] == 2 and second["echoed"] == 400 and second["errors"] == 0, second
        assert second["leader_member_id"] != leader and second["new_leader_events"] >= 1, second
        assert second["leadership_term_id"] > first["leadership_term_id"], (first, second)
        print(f"Aeron's client followed member {second['leader_member_id']}: first echo from it "
              f"{second['follow_ms']} ms after the kill, {second['resent']} messages offered again")
    finally:
        if peer is not None and peer.poll() is None:
            peer.kill()
            peer.communicate()
        for n in nodes:
            if n.proc is not None and n.proc.poll() is None:
                n.proc.kill()
                n.proc.wait(timeout=10)


def test_the_sulis_client_gets_its_messages_echoed_by_an_aeron_cluster(current, harness, make_driver, tmp_path):
    """Aeron's sample EchoServiceNode as a one-member Aeron Java cluster (ingress on port 9002, its
    ClusterConfig's layout); ``sulis.cluster.ClusterClient`` on a sulis driver connects over UDP."""
    work = tmp_path / "aeron-node"
    work.mkdir()
    props = {"aeron.dir": str(work / "aeron"), "aeron.dir.delete.on.start": "true",
             "aeron.threading.mode": "SHARED", "aeron.archive.threading.mode": "SHARED",
             "aeron.cluster.tutorial.nodeId": "0", "aeron.cluster.tutorial.hostnames": "localhost",
             "aeron.cluster.ingress.channel": "aeron:udp",
             "aeron.cluster.replication.channel": "aeron:udp?endpoint=localhost:0",
             "user.dir": str(work)}
    cmd = peers.aeron_java.command(current, props, "io.aeron.samples.cluster.EchoServiceNode")
    node = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The JVM may say things first (JAVA_TOOL_OPTIONS, warnings): the node's line is among the first few.
        head: list[str] = []
        while len(head) < 5 and not any("Started Cluster Node" in line for line in head):
            head.append(node.stdout.readline())
        assert "Started Cluster Node" in head[-1], head
        driver = make_driver()
        egress = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
        client = await_until(lambda: _connect(driver.dir, "0=localhost:9002", egress), 60, "a session with Aeron")
        with client:
            assert (client.cluster_session_id, client.leader_member_id) == (1, 0)
            sent = [bytes([i % 256]) * (3000 if i % 97 == 5 else 8 + i % 300) for i in range(500)]
            got: list[bytes] = []
            for m in sent:
                await_until(lambda m=m: client.offer(m) > 0 or client.poll_egress(lambda p, t: got.append(p)) < 0,
                            10, "ingress")
            await_until(lambda: client.poll_egress(lambda p, t: got.append(p), 100) >= 0 and len(got) >= 500,
                        30, "500 echoes")
            assert got == sent
        # sulis's cluster-tool reads Aeron's mark files and asks Aeron's module who its members are.
        cluster_dir = work / "aeron-cluster-0" / "cluster"
        errors = json.loads(run_cli("cluster-tool", cluster_dir, "errors", "--json").stdout)
        assert [(m["component"], m["started"], m["member_id"]) for m in errors["components"]] == [
            ("consensus module", "yes", 0), ("service 0", "yes", 0)], errors
        assert errors["driver_dir"].startswith(str(work)) and errors["driver_unreadable"] is None, errors
        out = run_cli("cluster-tool", cluster_dir, "list-members", "--json")
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        assert (answer["leader_member_id"], answer["member_id"]) == (0, 0), answer
        [member] = answer["active_members"]
        assert member["log_position"] > 0 and member["endpoints"].startswith("localhost:9002,"), member
    finally:
        node.terminate()
        try:
            node.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.communicate()


def test_aerons_cluster_tool_reads_a_sulis_members_mark_file_and_lists_its_members(current, make_driver, tmp_path):
    """Aeron's ClusterTool on a one-member sulis cluster's directory: ``pid`` and ``errors`` from the mark
    files sulis writes in Aeron's layout; ``list-members`` through the sulis driver (Aeron's client on it)
    with a ClusterMembersQuery the sulis module answers."""
    driver = make_driver()
    port = free_udp_port()
    members = f"0,localhost:{port},localhost:{free_udp_port()},localhost:20003,localhost:0,localhost:8010"
    cluster_dir = tmp_path / "cluster"
    with sulis.Archive(str(tmp_path / "archive"), driver_dir=driver.dir), \
            ClusterNode(Echo(), cluster_dir, driver.dir, cluster_members=members, log_term_length="1m") as node:
        def tool(verb):
            cmd = peers.aeron_java.command(current, {"aeron.cluster.tool.timeout": "20s"},
                                           "io.aeron.cluster.ClusterTool", [cluster_dir, verb])
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
            return out.stdout

        import os
        assert tool("pid").strip() == str(os.getpid())
        errors = tool("errors")
        assert "Type: CONSENSUS_MODULE" in errors and "Type: CONTAINER" in errors, errors
        assert errors.count("Cluster component error log:") == 2 and "distinct errors observed" in errors, errors
        assert f"Aeron driver error log (directory: {driver.dir})" in errors, errors
        listed = tool("list-members")
        assert "leaderMemberId=0, memberId=0" in listed, listed
        assert f"ingressEndpoint='localhost:{port}'" in listed and "archiveEndpoint='localhost:8010'" in listed, listed
        assert "isLeader=true" in listed, listed
        assert node.error is None


def _connect(driver_dir, endpoints, egress):
    """A session, or None while the Aeron node is still electing itself."""
    try:
        return ClusterClient(driver_dir, endpoints, egress, message_timeout=2.0)
    except ClusterError:
        return None


COUNTING_ECHO = """
from sulis.cluster import OFFER_AGAIN, ClusteredService

class Echo(ClusteredService):
    \"\"\"Echoes; its state, which a snapshot keeps, is how many messages it echoed.\"\"\"
    def __init__(self):
        self.count = 0

    def on_start(self, cluster, snapshot):
        if snapshot is not None:
            self.count = int(snapshot[0])

    def on_take_snapshot(self, cluster, snapshot):
        snapshot.write(str(self.count).encode())

    def on_session_message(self, cluster, session_id, timestamp, payload):
        self.count += 1
        while cluster.offer(session_id, payload) in OFFER_AGAIN:
            cluster.idle()
"""


@pytest.mark.timeout(700)  # a wait for the "heavy" lock (up to about 400 s under load), then the test
@pytest.mark.usefixtures("heavy")
def test_aerons_cluster_backup_copies_a_sulis_clusters_snapshot_and_follows_its_committed_log(
        current, harness, make_driver, tmp_path):
    """Aeron's ClusterBackup (``ClusterBackupMediaDriver`` of Aeron 1.51: a driver, an archive and the backup
    agent in one JVM) against three ``sulis cluster-node`` processes. It asks the members on their consensus
    endpoints (BackupQuery); one answers (BackupResponse): its log recording and term, its commit-position
    counter, its snapshot set and the members. The backup copies the snapshot recordings from that member's
    archive and records the log from a replay bounded by the member's commit position: its live-log position
    reaches the members' commit position, follows the log as the cluster takes more, and its own
    recording.log names the copied snapshots and the term, as Aeron's cluster would read them to start.

    The members take only the principals of their ``--client-keys-file``, the backup among them: each query
    the backup sends is challenged, and it answers through its ``CredentialsSupplier``
    (bench/peers/KeyedClusterBackup.java), the HMAC-SHA256 of the challenge and its response channel under
    its secret, as a sulis ClusterClient answers."""
    from clusterprocs import journal_cluster

    def members_said() -> str:
        return "\n".join(f"member {n.id}: ...{n.stderr()[-1500:]}" for n in nodes)

    def send(c, text):
        # Hang guards: beside busy loops (and the backup's JVM), an echo took over 20 s once the backup followed
        # the log; the members' output says what they were doing then.
        await_until(lambda: c.offer(text.encode()) > 0, KERNEL_STALL,
                    lambda: f"ingress to take {text}; leader {c.leader_member_id}\n{members_said()}")
        got: list[bytes] = []
        await_until(lambda: c.poll_egress(lambda p, t: got.append(p)) >= 0 and got, KERNEL_STALL,
                    lambda: f"the echo of {text}; leader {c.leader_member_id}\n{members_said()}")

    def commit(n) -> int:
        return n.counters()["cluster-commit-pos"]

    (tmp_path / "counting_echo.py").write_text(COUNTING_ECHO)
    client_secret, backup_secret = os.urandom(24).hex(), os.urandom(24).hex()
    keys, backup_key = tmp_path / "client-keys", tmp_path / "backup-secret"
    for f, text in ((keys, f"client {client_secret}\nbackup {backup_secret}\n"), (backup_key, backup_secret)):
        f.write_text(text)
        os.chmod(f, 0o600)
    with journal_cluster(tmp_path, make_driver().dir, service="counting_echo:Echo",
                         extra=("--client-keys-file", str(keys)),
                         client_options={"credentials": b"client", "secret": client_secret.encode()}) as (nodes, c):
        for i in range(50):
            send(c, f"m{i}")
        leader = nodes[c.leader_member_id]
        out = run_cli("cluster-tool", leader.cluster_dir, "snapshot")
        assert out.returncode == 0, out.stderr
        for n in nodes:
            await_until(lambda n=n: json.loads(run_cli("cluster-tool", n.cluster_dir, "recovery-plan", "--json")
                                               .stdout)["snapshots"], KERNEL_STALL, f"member {n.id}'s snapshot")
        snapshot_at = json.loads(run_cli("cluster-tool", leader.cluster_dir, "recovery-plan", "--json")
                                 .stdout)["snapshots"][0]["log_position"]
        for i in range(50, 100):
            send(c, f"m{i}")

        spec = nodes[0].cmd[nodes[0].cmd.index("--cluster-members") + 1]
        consensus = ",".join(m.split(",")[2] for m in spec.split("|"))
        top = harness.make_dir("backup")
        aeron_dir = f"{top}/aeron"
        props = {**peers.aeron_java.dir_props(aeron_dir), "aeron.threading.mode": "SHARED",
                 "aeron.archive.dir": f"{top}/archive", "aeron.archive.threading.mode": "SHARED",
                 "aeron.archive.control.channel": f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                 "aeron.archive.control.response.channel": "aeron:udp?endpoint=localhost:0",
                 "aeron.archive.replication.channel": "aeron:udp?endpoint=localhost:0",
                 "aeron.cluster.dir": f"{top}/backup",
                 "aeron.cluster.consensus.channel": f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                 "aeron.cluster.consensus.endpoints": consensus,
                 "aeron.cluster.backup.catchup.endpoint": f"localhost:{free_udp_port()}",
                 "aeron.cluster.backup.source.type": "ANY",
                 # The JVM's clients (backup, archive) and its driver give each other 60 s, not 10: a CI run with
                 # busy CPUs starved the JVM long enough that they timed out, and the backup shut down (exit 0).
                 "aeron.driver.timeout": "60000", "aeron.client.liveness.timeout": "60s",
                 "aeron.publication.unblock.timeout": "75s"}  # Aeron requires it above the liveness timeout
        backup = harness.start("cluster-backup", peers.aeron_java.command(
            current, props, "KeyedClusterBackup", ["principal=backup", f"secret_file={backup_key}"],
            peers.aeron_java.classpath(current, peers.aeron_java.SOURCE.with_name("KeyedClusterBackup.java"))))

        def backup_counters() -> dict[int, int]:
            try:
                return {x["type_id"]: x["value"] for x in sulis.CountersReader(aeron_dir).counters()
                        if x["type_id"] in (208, 209)}
            except sulis.SulisError:
                return {}

        def caught_up(to: int):
            def check() -> bool:
                assert backup.proc.poll() is None, backup.stderr_tail(40)
                got = backup_counters()
                return got.get(208) == 5 and got.get(209, -1) >= to  # BACKING_UP, live log at the commit
            return check

        def why() -> str:
            """The backup's counters, output and the errors in its mark file (Aeron's ClusterTool)."""
            errors = subprocess.run(peers.aeron_java.command(current, {}, "io.aeron.cluster.ClusterTool",
                                                             [f"{top}/backup", "errors"]),
                                    capture_output=True, text=True, timeout=60)
            return f"{backup_counters()}\n{backup.stderr_tail(40)}\n{errors.stdout[-4000:]}{errors.stderr[-2000:]}"

        # First the JVM's start (its driver's counters readable), which a CI run with busy CPUs saw take
        # over 60 s, then the copy and the catch-up, each waited for while the backup runs.
        def started() -> bool:
            assert backup.proc.poll() is None, backup.stderr_tail(40)
            return bool(backup_counters())
        await_until(started, peers.JVM_START_S, lambda: f"the backup's counters in {aeron_dir}: {why()}")
        target = commit(leader)
        await_until(caught_up(target), KERNEL_STALL, lambda: f"the backup to reach {target}: {why()}")
        for i in range(100, 150):
            send(c, f"m{i}")
        target = commit(leader)
        await_until(caught_up(target), KERNEL_STALL, lambda: f"the backup to follow to {target}: {why()}")
        assert backup_counters()[209] <= max(commit(n) for n in nodes)  # never past what was committed
        answered = [n for n in nodes if "answers a backup query" in n.stderr()]
        assert answered, "no member said it answered"
        assert all("challenges a backup query" in n.stderr() for n in answered), "answered unchallenged"
        assert not any("refuses a backup query" in n.stderr() for n in nodes)
        entries = json.loads(run_cli("cluster-tool", f"{top}/backup", "recording-log", "--json").stdout)["entries"]
        snapshots = [e for e in entries if e["type"] == "SNAPSHOT"]
        assert sorted(e["service_id"] for e in snapshots) == [-1, 0], entries
        assert {e["log_position"] for e in snapshots} == {snapshot_at}, entries
        assert [e for e in entries if e["type"] == "TERM"], entries
