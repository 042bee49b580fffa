"""Durable commits: three ``sulis cluster-node`` members whose cluster and archive directories lie on disks that
lose power (``netutil.disk.CrashableDisk``: a loop-mounted ext4 that keeps only what an fsync forced out).

Promise (docs/cluster.md, "Durability"): with ``--file-sync-level 1`` a message the cluster acknowledged (its
echo came back: it was committed, so a quorum recorded it) survives every member losing power at once; the
commit position counts only what a quorum's archives synced. With the default, 0, the commit counts what the
archives wrote to the page cache: a killed process loses nothing, but a machine crash may lose what was
acknowledged, and this test shows it does. Mounting needs root: the test skips without."""

from __future__ import annotations

import contextlib
import os
import shutil

import pytest

from clusterprocs import JOURNAL_SERVICE, KeepAlive, Member, loopback_members
from conftest import await_until, free_udp_port, make_dir
from netutil.disk import CrashableDisk, DiskError
from sulis.cluster import ClusterClient

MESSAGES = 3_000

# Three members started twice, and a loop-mounted disk each: well over the suite's 120 s on a busy machine.
pytestmark = pytest.mark.timeout(300)


def stream(c: ClusterClient, n: int) -> int:
    """Offers m0..m(n-1) without waiting for answers, reading egress meanwhile; returns once every echo came
    back: the number echoed (acknowledged)."""
    echoed: list[bytes] = []
    sent = 0

    def more() -> bool:
        nonlocal sent
        while sent < n and c.offer(f"m{sent}".encode()) > 0:
            sent += 1
        c.poll_egress(lambda p, t: echoed.append(p), 1000)
        return len(echoed) == n

    await_until(more, 120, lambda: f"{len(echoed)} of {n} echoed ({sent} sent)")
    assert echoed == [f"m{i}".encode() for i in range(n)]
    return len(echoed)


@pytest.mark.parametrize("level", [1, 0], ids=["file_sync_level=1", "file_sync_level=0"])
def test_every_acknowledged_message_survives_a_power_cut_of_every_member_only_with_durable_commits(
        make_driver, tmp_path, level):
    (tmp_path / "journal_service.py").write_text(JOURNAL_SERVICE)
    members, ingress_ports = loopback_members(3)
    ingress = ",".join(f"{i}=localhost:{p}" for i, p in enumerate(ingress_ports))
    extra = ("--file-sync-level", str(level))
    with contextlib.ExitStack() as stack:
        disks = []
        for _ in range(3):
            try:
                disks.append(stack.enter_context(CrashableDisk(64, make_dir("sulis-crash-"))))
            except DiskError as e:
                pytest.skip(f"no loop-mounted ext4 here: {e}")
        # Small segments, and a low-space threshold below the small disk's size.
        env = {"SULIS_ARCHIVE_SEGMENT_FILE_LENGTH": "1m", "SULIS_ARCHIVE_LOW_STORAGE_SPACE_THRESHOLD": "1m"}
        nodes = [Member(tmp_path, i, members, extra=extra, env=env) for i in range(3)]
        # Each member's cluster and archive directories on its own disk (the driver's stay in memory).
        for node, disk in zip(nodes, disks, strict=True):
            for d, name in ((node.cluster_dir, "cluster"), (node.archive_dir, "archive")):
                os.mkdir(os.path.join(disk.mnt, name))
                os.symlink(os.path.join(disk.mnt, name), d)
        stack.callback(lambda: [n.kill() for n in nodes if n.proc is not None and n.proc.poll() is None])
        for node in nodes:
            node.start()
        driver = make_driver()
        with ClusterClient(driver.dir, ingress, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                           message_timeout=60.0) as c:
            # The members ran a while: what they wrote at start (catalogs, the term's recording) is on disk.
            for disk in disks:
                disk.sync()
            acknowledged = stream(c, MESSAGES)
        # Every member loses power at once, right after the last acknowledgement.
        for node in nodes:
            node.kill()
        for disk in disks:
            disk.crash()
        for node in nodes:  # a power cut loses what was in memory: the drivers' directories too
            shutil.rmtree(node.driver_dir)
        for node in nodes:
            node.start()
        # A new session's message is answered once a leader runs again; by then each member replayed its log.
        with ClusterClient(driver.dir, ingress, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                           message_timeout=60.0) as c:
            keep = KeepAlive(c)
            await_until(lambda: c.offer(b"after") > 0, 60, "a leader to take a message after the crash")
            answered: list[bytes] = []
            await_until(lambda: c.poll_egress(lambda p, t: answered.append(p), 100) >= 0 and answered, 60,
                        "the answer after the crash")
            leader = nodes[c.leader_member_id]
            await_until(keep.around(lambda: "after" in leader.journal_lines()), 60, "the leader's journal")
        history = leader.journal_lines()
        kept = history[:history.index("after")]
        assert kept == [f"m{i}" for i in range(len(kept))], "what is kept is the log's order, once each"
        lost = acknowledged - len(kept)
        print(f"file_sync_level={level}: {lost} of {acknowledged} acknowledged messages lost in the power cut")
        if level >= 1:
            assert lost == 0, f"{lost} acknowledged messages lost with durable commits"
        else:
            # What the test shows would happen without the fsync: every acknowledged message went with the page
            # cache (all came after the disks' last sync), while the log before them, synced, is still there:
            # the cluster elected and answered on it.
            assert lost == acknowledged, f"{lost} of {acknowledged} lost: the crash kept what no fsync forced out"
