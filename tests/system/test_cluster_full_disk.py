"""A full disk under one member: three ``sulis cluster-node`` processes on loopback, a follower's archive on a
small ext4 file system (loop-mounted by the test; it needs root) that is then filled.

Promise: the member whose disk is full fails loudly, naming the disk, in its mark file, and never acknowledges
what it could not record; the other two go on (a quorum), so nothing answered is lost; with space again (and
restarted, if it stopped), the member copies what it missed and holds the same history as the others.

Which way it fails depends on where the disk fills: while it follows, its recording's write fails (ENOSPC) and
the member stops; while it catches up (a slow machine's restart), its archive refuses to extend the log's
recording below the low-storage threshold and the member's elections fail, loudly and on and on, until there
is space."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from clusterprocs import journal_cluster
from conftest import await_until, run_cli, small_ext4
from netutil.disk import fill
from sulis.cluster import ClusterClient


def send(c: ClusterClient, text: str, timeout: float = 20.0) -> None:
    await_until(lambda: c.offer(text.encode()) > 0, timeout, f"ingress to take {text}")
    got: list[bytes] = []
    await_until(lambda: c.poll_egress(lambda p, t: got.append(p)) >= 0 and got, timeout, f"the echo of {text}")
    assert got == [text.encode()], got


@pytest.fixture
def small_disk():
    """A 32 MB ext4 file system on a loop device (mount needs root; the test skips without)."""
    with small_ext4(32) as mnt:
        yield mnt


def test_a_member_whose_disk_fills_fails_loudly_and_the_others_go_on(make_driver, tmp_path, small_disk):
    payload = "x" * 7900  # about 8 KB a message: the disk fills in a thousand round trips
    with journal_cluster(tmp_path, make_driver().dir,
                         env={"SULIS_ARCHIVE_SEGMENT_FILE_LENGTH": "1m",
                              "SULIS_ARCHIVE_LOW_STORAGE_SPACE_THRESHOLD": "1m"}) as (nodes, c):
        for i in range(20):
            send(c, f"m{i:05d}{payload}")
        victim = nodes[(c.leader_member_id + 1) % 3]
        # Its archive moves to the small disk: stopped, its archive directory copied there and linked back.
        victim.kill()
        archive_on_disk = os.path.join(small_disk, "archive")
        shutil.copytree(victim.archive_dir, archive_on_disk)
        shutil.rmtree(victim.archive_dir)
        os.symlink(archive_on_disk, victim.archive_dir)
        victim.start()
        filler = fill(small_disk, leave=3 << 20)  # about 3 MB left: a few 1 MB segments
        sent = 20
        for _ in range(1000):  # about 8 MB of log: more than the disk has left; every one answered
            send(c, f"m{sent:05d}{payload}")
            sent += 1
        def stopped_or_refused():
            if victim.proc.poll() is not None:
                return "stopped"
            return "refused" if "low storage" in victim.stderr() else None

        how = await_until(stopped_or_refused, 30, lambda: f"member {victim.id} to stop\n{victim.stderr()[-2000:]}")
        if how == "stopped":
            assert victim.proc.returncode != 0
            said, why = "the log's recording", "No space left on device"
        else:
            said, why = "extending the log's recording: low storage", "below the threshold"
        assert said in victim.stderr() and why in victim.stderr(), victim.stderr()[-3000:]
        errors = json.loads(run_cli("cluster-tool", victim.cluster_dir, "errors", "--json").stdout)
        assert any(said in text and why in text for m in errors["components"] for *_, text in m["errors"]), errors
        others = [n for n in nodes if n is not victim]
        expected = [f"m{i:05d}{payload}" for i in range(sent)]
        for n in others:
            assert n.journal_lines() == expected, n.id
        applied = victim.journal_lines()
        assert applied == expected[:len(applied)], "the full member applied what the others did not"
        # Space again: restarted (or at its next election, if it waited), it copies what it missed.
        os.remove(filler)
        if how == "stopped":
            victim.start()
        for _ in range(20):
            send(c, f"m{sent:05d}{payload}")
            sent += 1
        expected = [f"m{i:05d}{payload}" for i in range(sent)]
        for n in nodes:
            await_until(lambda n=n: len(n.journal_lines()) >= sent, 60, f"member {n.id}'s journal")
            assert n.journal_lines() == expected, n.id
        c.close()
