"""Clock skew: cluster time is the leader's wall clock, and members' clocks disagree. Three ``sulis
cluster-node`` processes on loopback; one is restarted with its wall clock a minute behind (an LD_PRELOAD
shim, ``tests/clusterfaults/clock_skew.c``, moves its CLOCK_REALTIME), made leader, then restarted a minute
ahead and made leader again, then left for a member with a true clock. The service journals each message
with the cluster time it was applied at.

Promise: cluster time never goes backwards, on any member, across any leader change (a leader starts from the
log's latest time when its clock is behind it), and it goes on advancing with the wall clock after a leader
that was ahead (it does not stand still until the true clock catches up); every member applies the same
messages at the same times."""

from __future__ import annotations

import shutil
import time

import pytest

from clusterfaults.harness import build_clock_shim
from clusterprocs import journal_cluster
from conftest import await_until
from sulis.cluster import ClusterClient

SKEW_MS = 60_000

TIMED_JOURNAL = '''
import os
from sulis.cluster import OFFER_AGAIN, ClusteredService

class Journal(ClusteredService):
    """Each message and the cluster time it was applied at, a line each."""

    def __init__(self):
        self.journal = open(os.environ["JOURNAL"], "w")

    def on_session_message(self, cluster, session_id, timestamp, payload):
        self.journal.write(f"{payload.decode()} {timestamp}\\n")
        self.journal.flush()
        while cluster.offer(session_id, payload) in OFFER_AGAIN:
            cluster.idle()
'''


@pytest.fixture
def clock_shim(tmp_path) -> str:
    if shutil.which("cc") is None:
        pytest.skip("the clock-skew shim needs a C compiler (cc)")
    return str(build_clock_shim(tmp_path))


def send(c: ClusterClient, text: str, timeout: float = 30.0) -> None:
    """Offers ``text`` until its echo comes, offering it again when the client follows a new leader meanwhile
    (what was offered to a leader that died is gone; what it had logged may then come twice)."""
    deadline = time.monotonic() + timeout
    got: list[bytes] = []
    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    def echoed_or_moved(leader: int) -> bool:
        c.poll_egress(lambda p, t: got.append(p))
        return bool(got) or c.leader_member_id != leader

    while not got:
        leader = c.leader_member_id
        await_until(lambda: c.offer(text.encode()) > 0, left(), f"ingress to take {text}")
        await_until(lambda leader=leader: echoed_or_moved(leader), left(), f"the echo of {text}")
    assert got == [text.encode()], got


def follow(c: ClusterClient, old_leader: int, timeout: float = 30.0) -> None:
    """Keeps the session alive until the client follows a leader other than ``old_leader``."""
    def moved() -> bool:
        c.send_keep_alive()
        c.poll_egress(lambda p, t: None)
        return c.leader_member_id != old_leader
    await_until(moved, timeout, f"the client to follow a leader other than member {old_leader}")


@pytest.mark.timeout(520)  # a wait for the "heavy" lock (up to about 400 s under load), then the test
@pytest.mark.usefixtures("heavy")
def test_cluster_time_never_goes_back_and_keeps_moving_when_skewed_members_lead(make_driver, tmp_path, clock_shim):
    (tmp_path / "timed_journal.py").write_text(TIMED_JOURNAL)
    sent = 0

    def burst(c: ClusterClient, n: int) -> float:
        """Sends n messages; returns the seconds they took."""
        nonlocal sent
        began = time.monotonic()
        for _ in range(n):
            send(c, f"m{sent}")
            sent += 1
        return time.monotonic() - began

    with journal_cluster(tmp_path, make_driver().dir, service="timed_journal:Journal") as (nodes, c):

        def restart_skewed(m, skew_ms: int) -> None:
            """Restarts ``m`` with its clock ``skew_ms`` off; a leader only once the others took over; returns
            once its first election closed."""
            leading = nodes[c.leader_member_id] is m
            m.kill()
            if leading:
                follow(c, m.id)
            m.env.update(LD_PRELOAD=clock_shim, SULIS_TEST_CLOCK_SKEW_MS=str(skew_ms))
            m.start()
            m.await_election_closed()

        def make_leader(m) -> None:
            """Kills whoever leads until ``m`` does, each restarted once the other two elected one of
            themselves (a leader elected as it starts would close the sessions it cannot take over, as
            Aeron's does); the client follows."""
            for _ in range(12):
                burst(c, 3)
                leader = nodes[c.leader_member_id]
                if leader is m:
                    return
                leader.kill()
                follow(c, leader.id)
                leader.start()
                leader.await_election_closed()  # not still in its first election when the next leader dies
            raise AssertionError(f"member {m.id} never led")

        burst(c, 20)
        skewed = nodes[(c.leader_member_id + 1) % 3]
        restart_skewed(skewed, -SKEW_MS)
        make_leader(skewed)  # a leader a minute behind the log's times
        burst(c, 20)
        restart_skewed(skewed, SKEW_MS)
        make_leader(skewed)  # a leader a minute ahead
        burst(c, 20)
        restart_skewed(skewed, 0)  # its clock true again: whoever leads next has a true clock
        burst(c, 3)  # through the election
        took = burst(c, 40)
        for n in nodes:
            await_until(lambda n=n: len(n.journal_lines()) >= sent, 30,
                        lambda n=n: f"member {n.id}'s journal ({len(n.journal_lines())} of {sent})\n"
                                    f"{n.stderr()[-3000:]}")
        journals = [[line.split() for line in n.journal_lines()] for n in nodes]
        assert journals[0] == journals[1] == journals[2], "the members applied different messages or times"
        assert list(dict.fromkeys(m for m, _ in journals[0])) == [f"m{i}" for i in range(sent)]
        times = [int(t) for _, t in journals[0]]
        backwards = [(i, times[i - 1], times[i]) for i in range(1, len(times)) if times[i] < times[i - 1]]
        assert not backwards, f"cluster time went back: {backwards[:5]}"
        # After the leader that was ahead, time kept moving with the wall clock, not standing at its last.
        last = times[-40:]
        assert last[-1] - last[0] >= took * 1000 / 2, (last[0], last[-1], took)
        # The counters say the same: every member in the client's term, each having counted its elections.
        for n in nodes:
            counters = n.counters()
            assert counters["cluster-leadership-term-id"] == c.leadership_term_id, (n.id, counters)
            assert counters["cluster-election-count"] >= 1, (n.id, counters)
        c.close()
