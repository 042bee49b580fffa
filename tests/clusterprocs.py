"""Cluster members as ``sulis cluster-node`` processes on this host (UDP on loopback), for the tests that
run a cluster of several: ``Member(tmp_path, id, members, "module:Class")`` starts and restarts one on its
own directories; ``loopback_members(n)`` is the ``cluster_members`` string of n members on free ports."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import sulis
from conftest import CLI, KERNEL_STALL, await_stopped, await_until, clean_env, free_udp_port, make_dir

#: A service for the tests (``journal_service:Journal``, written to the test's directory): it echoes each
#: message and writes it, a line each, to $JOURNAL, which it rewrites from the log at every start.
JOURNAL_SERVICE = '''
import os
from sulis.cluster import OFFER_AGAIN, ClusteredService

class Journal(ClusteredService):
    def __init__(self):
        self.journal = open(os.environ["JOURNAL"], "w")

    def on_session_message(self, cluster, session_id, timestamp, payload):
        self.journal.write(payload.decode() + "\\n")
        self.journal.flush()
        while cluster.offer(session_id, payload) in OFFER_AGAIN:
            cluster.idle()


class BatchedJournal(Journal):
    """The journal as a batched service: a batch's echoes go with one offer_batch, in the documented loop."""

    def on_session_messages(self, cluster, messages):
        import numpy as np

        self.journal.write("".join(p.decode() + "\\n" for p in messages.to_list()))
        self.journal.flush()
        ids = np.frombuffer(messages.session_ids, np.int64)
        offsets = np.frombuffer(messages.offsets, np.int32)
        sent = 0
        while sent < len(ids):
            result = cluster.offer_batch(ids[sent:], messages.data, offsets[sent:])
            sent += result
            if result.code in OFFER_AGAIN:
                cluster.idle()
            elif result.code is not None:
                sent += 1  # that client is gone: its answer cannot go, the others' can
'''

#: The journal service with snapshots (``snapshot_journal:Journal``): the lines so far are its state.
SNAPSHOT_JOURNAL = '''
import json
import os
from sulis.cluster import OFFER_AGAIN, ClusteredService

class Journal(ClusteredService):
    """The journal service, with snapshots: the lines so far are its state."""

    def __init__(self):
        self.lines = []
        self.journal = open(os.environ["JOURNAL"], "w")

    def on_start(self, cluster, snapshot):
        if snapshot is not None:
            self.lines = json.loads(snapshot[0])
            self.journal.write("".join(line + "\\n" for line in self.lines))
            self.journal.flush()

    def on_take_snapshot(self, cluster, snapshot):
        snapshot.write(json.dumps(self.lines).encode())

    def on_session_message(self, cluster, session_id, timestamp, payload):
        self.lines.append(payload.decode())
        self.journal.write(payload.decode() + "\\n")
        self.journal.flush()
        while cluster.offer(session_id, payload) in OFFER_AGAIN:
            cluster.idle()
'''

# Timings for a test: a failed leader is noticed within 2 s (Aeron's default is 10 s). A client session
# lives 60 s without a word (the default is 10 s): the tests' clients wait silently for snapshots, kills and
# `sulis cluster-tool` processes, which on a slow or busy machine outlasted 10 s and closed the session
# (TIMEOUT). No test here is about the session timeout; those that are set their own. A test that waits
# long on something else keeps its client's session alive besides (``KeepAlive``).
#: A member not heard from for this long is not counted (``--leader-heartbeat-timeout``).
LEADER_HEARTBEAT_TIMEOUT_S = 2.0
TIMINGS = ["--leader-heartbeat-interval", "100ms", "--leader-heartbeat-timeout", f"{LEADER_HEARTBEAT_TIMEOUT_S:g}s",
           "--election-timeout",
           "300ms", "--election-status-interval", "50ms", "--startup-canvass-timeout", "5s",
           "--log-term-length", "1m", "--session-timeout", "60s"]


class KeepAlive:
    """Keeps a ``ClusterClient``'s session alive while a test waits on something else (snapshots, members
    starting, ``sulis cluster-tool`` processes): each call sends a keep-alive (at most every ``every`` s) and
    reads the client's egress (a new leader's event; a closed session raises at once, naming why). Pass it
    as ``idle`` to ``Member.start``, or wrap a condition: ``await_until(keep.around(cond), ...)``. The egress it
    reads goes to ``on_egress(payload, timestamp)`` if given (dropped if not)."""

    def __init__(self, client, every: float = 0.2, on_egress=None):
        self.client, self.every, self.last = client, every, float("-inf")
        self.on_egress = on_egress or (lambda payload, timestamp: None)

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.client.send_keep_alive()
            self.last = now
        self.client.poll_egress(self.on_egress)

    def around(self, cond):
        """``cond``, called with the session kept alive first."""
        def check():
            self()
            return cond()
        check.__name__ = getattr(cond, "__name__", "the condition")
        return check


def cluster_counters(driver_dir: str) -> dict[str, int]:
    """The cluster counters in the driver in ``driver_dir`` by type name (``cluster-election-state``, ...);
    {} while it has no CnC file."""
    import sulis

    names = {t: name for t, name in sulis._native.counter_types() if name.startswith("cluster-")}
    try:
        return {names[c["type_id"]]: c["value"] for c in sulis.CountersReader(driver_dir).counters()
                if c["type_id"] in names}
    except Exception:  # the CnC file not there yet
        return {}


class Member:
    """One member's process: ``start`` runs (or restarts) it on the same directories."""

    def __init__(self, tmp_path, member_id: int, members: str, service: str = "journal_service:Journal",
                 extra: tuple[str, ...] = (), env: dict | None = None):
        """``extra``: more ``sulis cluster-node`` flags (a flag given again takes the later value); ``env``:
        more environment (``SULIS_ARCHIVE_*`` for the member's archive)."""
        self.id = member_id
        base = tmp_path / f"member-{member_id}"
        base.mkdir()
        self.journal = base / "journal.txt"
        self.stderr_path = base / "stderr.txt"
        self.cluster_dir, self.driver_dir, self.archive_dir = str(base / "cluster"), str(base / "driver"), str(
            base / "archive")
        self.cmd = [*CLI, "cluster-node", "--service", service, "--cluster-dir",
                    self.cluster_dir, "--archive-dir", self.archive_dir, "--dir", self.driver_dir,
                    "--cluster-members", members, "--member-id", str(member_id), *TIMINGS, *extra]
        self.env = clean_env(PYTHONPATH=str(tmp_path), JOURNAL=str(self.journal), **(env or {}))
        self.cwd = tmp_path
        self.proc: subprocess.Popen | None = None

    def start(self, idle=None) -> None:
        """Starts the member and waits until it runs; ``idle`` (a ``KeepAlive``) is called meanwhile."""
        # stderr to a file: the election's event lines would fill a pipe nobody reads.
        runs = self.stderr().count("running in")
        with open(self.stderr_path, "a") as err:
            self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd, stdout=subprocess.DEVNULL,
                                         stderr=err, text=True)

        def running() -> bool:
            if idle is not None:
                idle()
            return self.stderr().count("running in") > runs or self.proc.poll() is not None
        # A hang guard: beside busy loops a start waited behind the kernel's own threads for over 60 s.
        await_until(running, KERNEL_STALL, lambda: f"member {self.id} to start (\"running in\" in its stderr)\n"
                                         f"{self.stderr()[-2000:]}", interval=0.01)
        assert self.proc.poll() is None, self.stderr()

    def counters(self) -> dict[str, int]:
        """This run's cluster counters by type name (``cluster-election-state``, ...); {} before its CnC."""
        return cluster_counters(self.driver_dir)

    def await_election_closed(self, timeout: float = 60.0) -> None:
        """Waits until this run of the member finished its election (its election-state counter CLOSED,
        its module ACTIVE): a member killed while another is still in its first election may leave that
        one to lead as it starts, which closes every client session (as Aeron's does)."""
        def closed() -> bool:
            assert self.proc.poll() is None, self.stderr()
            c = self.counters()
            return c.get("cluster-election-state") == 17 and c.get("cluster-module-state") == 1
        await_until(closed, timeout, f"member {self.id}'s election to close")

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def journal_lines(self) -> list[str]:
        return self.journal.read_text().splitlines() if self.journal.exists() else []

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        # Reaping a killed member (its mappings freed) took over 10 s beside three busy loops: a hang guard only.
        self.proc.wait(timeout=60)

    def pause(self) -> None:
        """SIGSTOPs the member and returns once every thread of it has stopped: kill(2) returns before the
        stop takes hold, and a thread on the other core could still answer the leader meanwhile."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        await_stopped(self.proc.pid, f"member {self.id}")

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=KERNEL_STALL)  # a hang guard: a busy machine's stop outlasted 20 s
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=60)


@contextlib.contextmanager
def journal_cluster(tmp_path, driver_dir: str, n: int = 3, extra: tuple[str, ...] = (),
                    service: str = "journal_service:Journal", env: dict | None = None,
                    new_leader_timeout: float | None = KERNEL_STALL, client_options: dict | None = None):
    """``n`` members running the journal service (or ``service``) on loopback (``extra``, ``env``: see
    ``Member``), and a client (``client_options``: more keywords of ``ClusterClient``, such as
    ``credentials`` and ``secret``)
    given every member's ingress, on the driver in ``driver_dir``: ``(members, client)``. The client's
    ``new_leader_timeout`` is a hang guard unless given (None: the client's default, twice the leader heartbeat
    timeout). Every member still
    running at the end is killed (resumed first, if paused)."""
    from sulis.cluster import ClusterClient, ClusterError

    (tmp_path / "journal_service.py").write_text(JOURNAL_SERVICE)
    members, ingress_ports = loopback_members(n)
    nodes = [Member(tmp_path, i, members, service, extra=extra, env=env) for i in range(n)]
    try:
        for m in nodes:
            m.start()
        ingress = ",".join(f"{i}=localhost:{p}" for i, p in enumerate(ingress_ports))
        # Hang guards: a first election beside Spark JVMs took over 30 s in CI, one beside busy loops over
        # 60 s, and an election after a kill beside busy loops outlasted the default new-leader timeout
        # (twice the 2 s heartbeat timeout).
        try:
            client = ClusterClient(driver_dir, ingress, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                                   message_timeout=KERNEL_STALL, new_leader_timeout=new_leader_timeout,
                                   **(client_options or {}))
        except ClusterError as e:
            told = "\n".join(f"member {m.id}: ...{m.stderr()[-1500:]}" for m in nodes)
            raise AssertionError(f"the journal cluster's client did not connect: {e}\n{told}") from e
        yield nodes, client
    finally:
        kill_all(nodes)


def kill_all(members) -> None:
    """SIGKILLs every running member (resumed first, if paused), then reaps them. Every one is killed before any
    is waited for: reaping one took over 10 s beside busy loops, and members still running meanwhile go on (two
    elected a term of their own once); a wait that times out must not leave the others running past the test."""
    running = [m for m in members if m.proc is not None and m.proc.poll() is None]
    for m in running:
        with contextlib.suppress(ProcessLookupError):
            m.resume()
            m.proc.kill()
    for m in running:
        m.proc.wait(timeout=60)


def loopback_members(n: int) -> tuple[str, list[int]]:
    """``cluster_members`` for n members on localhost (catch-up endpoints ``:0``) and their ingress ports."""
    ports = [[free_udp_port() for _ in range(4)] for _ in range(n)]  # ingress, consensus, log, archive
    members = "|".join(f"{i},localhost:{p[0]},localhost:{p[1]},localhost:{p[2]},localhost:0,localhost:{p[3]}"
                       for i, p in enumerate(ports))
    return members, [p[0] for p in ports]


#: A client in a process of its own, on a driver of its own: it connects, waits for a line on stdin, offers
#: ``1`` and says "sent" once its driver sent it; the test then kills it, its driver with it.
_VANISHING_CLIENT = """
import sys, time, sulis
from sulis.cluster import ClusterClient
driver_dir, ingress, egress = sys.argv[1:4]
with sulis.MediaDriver(dir=driver_dir, threading_mode="shared") as d, \\
        ClusterClient(d.dir, ingress, egress, message_timeout=60.0) as c:
    print("connected", flush=True)
    sys.stdin.readline()
    while (position := c.offer(b"1")) < 0:
        time.sleep(0.001)
    # Sent, not only offered: its driver dies with it, and what the sender had not sent yet would be lost.
    snd_pos = {name: t for t, name in sulis._native.counter_types()}["snd-pos"]
    while not any(x["type_id"] == snd_pos and x["value"] >= position
                  for x in sulis.CountersReader(d.dir).counters()):
        time.sleep(0.001)
    print("sent", flush=True)
    time.sleep(600)
"""


def vanish_with_a_message_held(ingress: str, suspend, leader_driver_dir: str, clients: int = 1) -> None:
    """``clients`` clients (each a process with its own driver) connect to the cluster at ``ingress``;
    ``suspend()`` holds the log; each offers a message (held in the ingress image) and all are SIGKILLed at once;
    returns once the leader's egress to each (a publication its driver shares with anyone who adds the same
    channel) has lost it, so that the service's answers to the held messages meet clients that are gone."""
    egresses = [f"aeron:udp?endpoint=localhost:{free_udp_port()}" for _ in range(clients)]
    procs = [subprocess.Popen([sys.executable, "-c", _VANISHING_CLIENT, make_dir(), ingress, egress],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for egress in egresses]
    try:
        for client in procs:
            assert client.stdout.readline().strip() == "connected", f"the client exited ({client.poll()})"
        suspend()
        for client in procs:
            client.stdin.write("go\n")
            client.stdin.flush()
        for client in procs:
            assert client.stdout.readline().strip() == "sent", f"the client exited ({client.poll()})"
    finally:
        for client in procs:
            client.kill()
        for client in procs:
            client.wait(timeout=30)
            client.stdout.close()
            client.stdin.close()
    with sulis.Client(dir=leader_driver_dir) as c:
        for egress in egresses:
            probe = c.add_publication(egress, 102)
            await_until(lambda probe=probe: not probe.is_connected, 60,
                        f"the leader's egress {egress} to lose the killed client")
            probe.close()
