"""Durable commits: three ``sulis cluster-node`` members whose cluster and archive directories lie on disks that
lose power (``netutil.disk.CrashableDisk``: a loop-mounted ext4 that keeps only what an fsync forced out).

Promise (docs/cluster.md, "Durability"): with ``--file-sync-level 1`` a message the cluster acknowledged (its
echo came back: it was committed, so a quorum recorded it) survives every member losing power at once; the
commit position counts only what a quorum's archives synced. With the default, 0, the commit counts what the
archives wrote to the page cache: a killed process loses nothing, but a machine crash may lose what was
acknowledged, and this test shows it does.

The power goes mid-stream, while messages are offered and acknowledged as fast as the cluster goes: every
member is frozen (SIGSTOP, each thread out of its system calls), the echoes already on their way are read, and
the disks are copied as they are at that instant. So a commit that ran ahead of its sync (a sync after the
answer, or a timed one) would lose the newest acknowledged messages, and the test would fail; a cut after the
last answer could not tell. Mounting needs root: the test skips without."""

from __future__ import annotations

import contextlib
import os
import shutil
import time

import pytest

import sulis
from clusterprocs import JOURNAL_SERVICE, KeepAlive, Member, kill_all, loopback_members
from conftest import KERNEL_STALL, await_until, free_udp_port, make_dir
from netutil.disk import CrashableDisk, DiskError
from sulis.cluster import ClusterClient, ClusterError

#: Offered in all, and acknowledged before the power cut (at least): the cut comes with thousands in flight.
MESSAGES, ACKNOWLEDGED = 30_000, 3_000

# Three members started twice, and a loop-mounted disk each: well over the suite's 120 s on a busy machine.
pytestmark = pytest.mark.timeout(600)

#: How long a wait here may take before it counts as a hang: a member's fsync, and so its whole duty cycle, may
#: stall behind the kernel that long (conftest.KERNEL_STALL). The members' client sessions live as long.
STALL = KERNEL_STALL


def stream_until_the_power_cut(c: ClusterClient, n: int, cut_after: int, cut) -> int:
    """Offers m0..m(n-1) without waiting for answers, reading egress meanwhile; once ``cut_after`` echoes came
    back, ``cut()`` (the power cut), then reads the echoes still on their way. Returns the number echoed
    (acknowledged before the cut)."""
    echoed: list[bytes] = []
    sent = 0

    def more() -> bool:
        nonlocal sent
        while sent < n and c.offer(f"m{sent}".encode()) > 0:
            sent += 1
        c.poll_egress(lambda p, t: echoed.append(p), 1000)
        return len(echoed) >= cut_after

    await_until(more, STALL, lambda: f"{len(echoed)} of {cut_after} echoed ({sent} sent)")
    cut()
    # Echoes the leader sent before it froze may still be in the sockets: each was committed before the cut.
    quiet = time.monotonic() + 1.0
    while time.monotonic() < quiet:
        if c.poll_egress(lambda p, t: echoed.append(p), 1000) > 0:
            quiet = time.monotonic() + 1.0
    assert echoed == [f"m{i}".encode() for i in range(len(echoed))]
    assert len(echoed) < sent, "messages were still in flight at the cut"
    return len(echoed)


def power_cut_run(tmp_path, make_driver, level: int, acknowledged: int, sync_first: bool, timings=()):
    """Three members on crashable disks; a client streams until ``acknowledged`` echoes came back, then the
    power goes for every member at once and they restart on their disks. ``sync_first``: the disks were synced
    after the members started (a machine that ran a while), else the cut finds only what the members synced
    themselves. Returns (acknowledged, journal kept by the leader, the log the members elected on, the commit
    position at the cut, the members)."""
    (tmp_path / "journal_service.py").write_text(JOURNAL_SERVICE)
    members, ingress_ports = loopback_members(3)
    ingress = ",".join(f"{i}=localhost:{p}" for i, p in enumerate(ingress_ports))
    extra = ("--file-sync-level", str(level), "--session-timeout", f"{STALL:.0f}s", *timings)
    with contextlib.ExitStack() as stack:
        disks = []
        for _ in range(3):
            try:
                disks.append(stack.enter_context(CrashableDisk(64, make_dir("sulis-crash-"))))
            except DiskError as e:
                pytest.skip(f"no loop-mounted ext4 here: {e}")
        # Small segments, and a low-space threshold below the small disk's size.
        # The member waits on its archive as long (its default is 10 s).
        env = {"SULIS_ARCHIVE_SEGMENT_FILE_LENGTH": "1m", "SULIS_ARCHIVE_LOW_STORAGE_SPACE_THRESHOLD": "1m",
               "SULIS_CLUSTER_MESSAGE_TIMEOUT": f"{STALL:.0f}s"}
        nodes = [Member(tmp_path, i, members, extra=extra, env=env) for i in range(3)]
        # Each member's cluster and archive directories on its own disk (the driver's stay in memory).
        for node, disk in zip(nodes, disks, strict=True):
            for d, name in ((node.cluster_dir, "cluster"), (node.archive_dir, "archive")):
                os.mkdir(os.path.join(disk.mnt, name))
                os.symlink(os.path.join(disk.mnt, name), d)
        # The directories themselves were made before the members ran: on disk whatever the members do.
        for disk in disks:
            disk.sync()
        stack.callback(lambda: [n.kill() for n in nodes if n.proc is not None and n.proc.poll() is None])
        for node in nodes:
            node.start()
        driver = make_driver()
        with ClusterClient(driver.dir, ingress, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                           message_timeout=STALL) as c:
            if sync_first:
                # The members ran a while: what they wrote at start (catalogs, the term's recording) is on disk.
                for disk in disks:
                    disk.sync()

            committed_at_cut = []

            def power_cut() -> None:
                for node in nodes:
                    node.pause()  # every thread stopped: nothing more reaches the disks
                # The commit position at the instant (each member's counter, in memory): a durable commit counts
                # only what a quorum synced, so the log that comes back reaches it.
                committed_at_cut.append(max(node.counters()["cluster-commit-pos"] for node in nodes))
                for disk in disks:
                    disk.cut()

            acknowledged = stream_until_the_power_cut(c, MESSAGES, acknowledged, power_cut)
        kill_all(nodes)  # the power cut takes every member at once
        for disk in disks:
            disk.crash()
        for node in nodes:  # a power cut loses what was in memory: the drivers' directories too
            shutil.rmtree(node.driver_dir)
        for node in nodes:
            node.start()
        # A new session's message is answered once a leader runs again; by then each member replayed its log.
        try:
            c = ClusterClient(driver.dir, ingress, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                              message_timeout=STALL)
        except ClusterError as e:
            told = "".join(f"\nmember {n.id}:\n{n.stderr()[-2000:]}" for n in nodes)
            raise AssertionError(f"no leader after the power cut: {e}{told}") from e
        with c:
            keep = KeepAlive(c)
            await_until(lambda: c.offer(b"after") > 0, STALL, "a leader to take a message after the crash")
            answered: list[bytes] = []
            await_until(lambda: c.poll_egress(lambda p, t: answered.append(p), 100) >= 0 and answered, STALL,
                        "the answer after the crash")
            leader = nodes[c.leader_member_id]
            await_until(keep.around(lambda: "after" in leader.journal_lines()), STALL, "the leader's journal")
        for node in nodes:
            assert node.proc.poll() is None, f"member {node.id} stopped after the power cut:\n{node.stderr()[-3000:]}"
        # The term the members elected after the power cut begins where the log they kept ends.
        entries, _ = sulis._native.read_recording_log(str(leader.cluster_dir))
        kept_log = max(e["term_base_log_position"] for e in entries if e["type"] == "TERM")
        history = leader.journal_lines()
        kept = history[:history.index("after")]
        assert kept == [f"m{i}" for i in range(len(kept))], "what is kept is the log's order, once each"
        return acknowledged, kept, kept_log, committed_at_cut[0], nodes


@pytest.mark.parametrize("level", [1, 0], ids=["file_sync_level=1", "file_sync_level=0"])
def test_every_acknowledged_message_survives_a_power_cut_of_every_member_only_with_durable_commits(
        make_driver, tmp_path, level):
    acknowledged, kept, kept_log, committed_at_cut, _ = power_cut_run(tmp_path, make_driver, level, ACKNOWLEDGED,
                                                                       sync_first=True)
    lost = max(0, acknowledged - len(kept))
    print(f"file_sync_level={level}: {lost} of {acknowledged} acknowledged messages lost in the power cut "
          f"({len(kept)} kept)")
    print(f"the log kept reaches {kept_log}; the commit position at the cut was {committed_at_cut}")
    if level >= 1:
        # Messages committed but not yet echoed, or synced by a quorum but not yet committed, may be kept too.
        assert lost == 0, f"{lost} acknowledged messages lost with durable commits"
        # And more than what was echoed: everything committed. A commit that ran ahead of the quorum's sync
        # (a sync after it, or a timed one) leaves the log short of it here.
        assert kept_log >= committed_at_cut, "the commit position counted what no quorum had synced"
    else:
        # What the test shows would happen without the fsync: every acknowledged message went with the page
        # cache (all came after the disks' last sync), while the log before them, synced, is still there:
        # the cluster elected and answered on it.
        assert lost == acknowledged, f"{lost} of {acknowledged} lost: the crash kept what no fsync forced out"
        assert kept_log < committed_at_cut


def test_a_power_cut_soon_after_the_first_start_at_the_default_level_restarts_every_member(make_driver, tmp_path):
    """The cut comes before anything the members wrote reached the disk but what they synced themselves: the
    archive's catalog and mark file, the cluster's recording log and votes must be among it, or no member
    opens its directories again. The acknowledged messages are lost (level 0: the documented cost); every
    member starts, they elect, and a new message is answered."""
    acknowledged, kept, _, committed_at_cut, nodes = power_cut_run(tmp_path, make_driver, 0, 200, sync_first=False)
    print(f"cut at {acknowledged} acknowledged (commit {committed_at_cut}): {len(kept)} kept")
    for node in nodes:
        print(f"--- member {node.id}\n{node.stderr()}")
