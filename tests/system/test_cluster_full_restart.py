"""A whole cluster stopped at once and started again on a log of tens of MB, with a short leader heartbeat
timeout (3 s): the leader replays its log into its service before it leads, which takes longer than the
timeout on a log this size, and the followers must wait for it rather than call election after election.

Promise (docs/cluster.md, "Durability: what a commit survives", restart): one election after the restart, so
one new leadership term that every member joins, and a new message answered once the leader replayed its log.
A follower whose own replay ends after the leader took the term's first entry finds the log moved past it and
catches up in the same term (Aeron's election does so too, from its INIT state): that is no second election."""

from __future__ import annotations

import os
import time

import pytest

from clusterprocs import KeepAlive, journal_cluster, kill_all
from conftest import await_until, free_udp_port
from sulis.cluster import ClusterClient

#: Small messages: the log's size is in its entries' count, what a replay into a Python service pays for.
MESSAGES = int(os.environ.get("SULIS_TEST_RESTART_MESSAGES", "300000"))

pytestmark = pytest.mark.timeout(600)


def stream(c: ClusterClient, n: int) -> None:
    echoed = 0
    sent = 0

    def more() -> bool:
        nonlocal sent, echoed
        while sent < n and c.offer(f"m{sent}".encode()) > 0:
            sent += 1

        def got(p, t):
            nonlocal echoed
            echoed += 1
        c.poll_egress(got, 10_000)
        return echoed >= n

    await_until(more, 300, lambda: f"{echoed} of {n} echoed ({sent} sent)")


def test_a_full_restart_on_a_long_log_elects_once_while_the_leader_replays(make_driver, tmp_path):
    timings = ("--leader-heartbeat-timeout", "3s")
    driver = make_driver()
    with journal_cluster(tmp_path, driver.dir, extra=timings) as (nodes, c):
        with c:
            stream(c, MESSAGES)
        log_end = max(n.counters()["cluster-commit-pos"] for n in nodes)
        term_before = max(n.counters()["cluster-leadership-term-id"] for n in nodes)
        # All at once: killed one by one, the two still running elected a term of their own while the first was
        # reaped (busy run b13: terms [2, 2, 2] after the restart's one election).
        kill_all(nodes)
        ballots_before = [n.stderr().count("-> CANDIDATE_BALLOT") for n in nodes]
        rejoins_before = [n.stderr().count("FOLLOWER_LOG_AWAIT -> INIT") for n in nodes]
        t0 = time.monotonic()
        for node in nodes:
            node.start()
        ingress = ",".join(f"{n.id}=localhost:{p}" for n, p in zip(nodes, ingress_ports(nodes), strict=True))
        with ClusterClient(driver.dir, ingress, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                           message_timeout=120.0) as c2:
            answered: list[bytes] = []
            keep = KeepAlive(c2, on_egress=lambda p, t: answered.append(p))
            await_until(lambda: c2.offer(b"after") > 0, 120, "a leader to take a message after the restart")
            await_until(keep.around(lambda: answered), 120, "the answer after the restart")
            served = time.monotonic() - t0
            await_until(lambda: all(n.counters().get("cluster-election-state") == 17 for n in nodes), 120,
                        lambda: f"every member's election to close: {[n.counters() for n in nodes]}")
            terms = [n.counters().get("cluster-leadership-term-id") for n in nodes]
        ballots = [n.stderr().count("-> CANDIDATE_BALLOT") - b for n, b in zip(nodes, ballots_before, strict=True)]
        rejoins = [n.stderr().count("FOLLOWER_LOG_AWAIT -> INIT") - b
                   for n, b in zip(nodes, rejoins_before, strict=True)]
        print(f"log of {log_end} bytes ({MESSAGES} messages): served {served:.1f} s after the restart began; "
              f"terms {terms}, candidacies per member {ballots}, rejoins by catch-up {rejoins}")
        for node in nodes:
            assert node.proc.poll() is None, node.stderr()[-3000:]
        # One election after the restart is one new term on every member (another would have taken another).
        worst = nodes[max(range(len(nodes)), key=lambda i: (terms[i], ballots[i]))]
        assert terms == [term_before + 1] * len(nodes), (
            f"one election after term {term_before}: terms {terms}, candidacies {ballots}\n"
            f"member {worst.id}:\n{worst.stderr()[-6000:]}")


def ingress_ports(nodes) -> list[int]:
    members = nodes[0].cmd[nodes[0].cmd.index("--cluster-members") + 1]
    return [int(m.split(",")[1].rsplit(":", 1)[1]) for m in members.split("|")]
