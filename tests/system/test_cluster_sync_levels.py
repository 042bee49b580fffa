"""Durable commits across members: a member whose archive syncs the log at a lower ``file_sync_level`` than the
leader's counts towards none of the leader's commits.

Promise (docs/cluster.md, "Durability"): with ``--file-sync-level 1`` the commit position counts only what a
quorum synced. Each member checks its own archive at start; the others hear its level with every AppendPosition
it sends (sulis's flag bits), so a member started with a lower level by mistake is named by the leader (stderr and
mark file) and its positions are not counted: the leader keeps its term and its commit waits for a quorum that
synced, rather than acknowledge what a machine crash of two members could lose."""

from __future__ import annotations

import time

from clusterprocs import JOURNAL_SERVICE, KeepAlive, Member, loopback_members
from conftest import KERNEL_STALL, await_until, free_udp_port
from sulis.cluster import ClusterClient

ROLE_LEADER = 2


class Echoes(KeepAlive):
    """Keeps the session alive and keeps every echo its egress polls bring (``got``)."""

    def __init__(self, client: ClusterClient) -> None:
        self.got: list[bytes] = []
        super().__init__(client, on_egress=lambda p, t: self.got.append(bytes(p)))


def echoed(keep: Echoes, payload: bytes, timeout: float) -> None:
    await_until(keep.around(lambda: keep.client.offer(payload) > 0), timeout, "the offer")
    await_until(keep.around(lambda: payload in keep.got), timeout, f"the echo of {payload!r}")


def test_a_member_syncing_below_the_leaders_level_is_named_and_counts_towards_no_commit(make_driver, tmp_path):
    (tmp_path / "journal_service.py").write_text(JOURNAL_SERVICE)
    members, ports = loopback_members(3)
    durable, careless = ("--file-sync-level", "1"), ("--file-sync-level", "0")
    nodes = [Member(tmp_path, 0, members, extra=durable), Member(tmp_path, 1, members, extra=durable),
             Member(tmp_path, 2, members, extra=careless)]
    driver = make_driver()
    client = None
    try:
        # The two durable members elect one of themselves (after the startup canvass timeout).
        for m in nodes[:2]:
            m.start()
        ingress = ",".join(f"{i}=localhost:{p}" for i, p in enumerate(ports))
        # A hang guard, not a speed: beside busy loops the first answer took over 60 s (busy run b13).
        client = ClusterClient(driver.dir, ingress, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                               message_timeout=KERNEL_STALL)
        keep = Echoes(client)
        for i in range(5):
            echoed(keep, f"m{i}".encode(), 30)
        leader = next(m for m in nodes[:2] if m.counters().get("cluster-node-role") == ROLE_LEADER)
        other = next(m for m in nodes[:2] if m is not leader)
        term = leader.counters()["cluster-leadership-term-id"]

        # The careless member joins: the leader names it.
        nodes[2].start(idle=keep)
        await_until(keep.around(lambda: "member 2 records the log at file_sync_level 0, below this member's 1"
                                in leader.stderr()), 30, "the leader to name member 2's sync level")
        echoed(keep, b"with both durable members", 30)

        # With the other durable member gone, the leader and the careless member are a quorum of members but
        # not of members that synced: a new message is logged but not committed, so not answered.
        other.kill()
        commit = leader.counters()["cluster-commit-pos"]
        await_until(keep.around(lambda: client.offer(b"held") > 0), 10, "the offer")
        deadline = time.monotonic() + 4 * 2.0  # twice the members' heartbeat timeout, twice over
        while time.monotonic() < deadline:
            keep()
            assert b"held" not in keep.got, "answered with only the careless member to count"
            time.sleep(0.05)
        c = leader.counters()
        assert c["cluster-commit-pos"] == commit, "the commit counted the careless member's position"
        assert (c["cluster-node-role"], c["cluster-leadership-term-id"]) == (ROLE_LEADER, term), \
            "the leader kept its term (the careless member is heard, only not counted)"
        assert "held" not in nodes[2].journal_lines(), "a follower applied what was not committed"

        # The durable member back: the held message commits and is answered, once, on every member.
        other.start(idle=keep)
        await_until(keep.around(lambda: b"held" in keep.got), 60, "the held message's echo")
        for m in nodes:
            await_until(keep.around(lambda m=m: "held" in m.journal_lines()), 30, f"member {m.id} to apply it")
            assert m.journal_lines().count("held") == 1, m.journal_lines()
    finally:
        if client is not None:
            client.close()
        for m in nodes:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait(timeout=30)
