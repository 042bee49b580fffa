"""A cluster member's archive under a retention policy that keeps as little as it can: the member holds what a
restart needs (the latest snapshot's recordings, and the log from the snapshot's position on), so retention
removes only the log before the snapshot, and a member killed afterwards restarts from the snapshot and replays
the rest of the log whole.

Promise: docs/retention.md, "Readers" (a cluster's log and snapshots)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from clusterprocs import SNAPSHOT_JOURNAL, journal_cluster
from conftest import await_until, run_cli
from sulis import _native


def send(c, text: str) -> None:
    """Offers ``text`` until the cluster takes it, and waits for its echo."""
    got: list[bytes] = []
    await_until(lambda: c.offer(text.encode()) > 0, 30, f"{text} offered")
    await_until(lambda: c.poll_egress(lambda p, t: got.append(p)) >= 0 and got, 30, f"{text} answered")


def log_start(archive_dir: str, recording_id: int) -> int:
    (d,) = [d for _, d in _native.archive_describe(archive_dir)[0] if d.recording_id == recording_id]
    return d.start_position


def test_retention_keeps_what_a_member_restarts_from_and_removes_the_log_before_its_snapshot(make_driver, tmp_path):
    policy = tmp_path / "retention.policy"
    policy.write_text("stream=* max-size=1\n")  # everything but the segment being written, were it not held
    env = {"SULIS_ARCHIVE_SEGMENT_FILE_LENGTH": "64k", "SULIS_ARCHIVE_RETENTION_CHECK_INTERVAL": "20ms",
           "SULIS_ARCHIVE_RETENTION_POLICY_FILE": str(policy)}
    (tmp_path / "snapshot_journal.py").write_text(SNAPSHOT_JOURNAL)
    with journal_cluster(tmp_path, make_driver().dir, n=1, extra=("--log-term-length", "64k"), env=env,
                         service="snapshot_journal:Journal") as (nodes, c):
        (member,) = nodes
        for i in range(3000):  # about 290 KiB of log: five 64 KiB segments
            send(c, f"m{i}")
        hold = os.path.join(member.archive_dir, "holds", "cluster-member-0.hold")
        assert os.path.exists(hold), "held from the first term on"
        (term,) = [e for e in _native.read_recording_log(member.cluster_dir)[0] if e["type"] == "TERM"]
        rid = term["recording_id"]
        assert log_start(member.archive_dir, rid) == 0, "before a snapshot the whole log is held"
        out = run_cli("cluster-tool", member.cluster_dir, "snapshot")
        assert out.returncode == 0, out.stderr
        plan = json.loads(run_cli("cluster-tool", member.cluster_dir, "recovery-plan", "--json").stdout)
        at = plan["snapshots"][0]["log_position"]
        for i in range(3000, 6000):
            send(c, f"m{i}")
        # The hold moves to the snapshot within a second; retention then takes the log's segments below it.
        segment = 64 * 1024
        await_until(lambda: log_start(member.archive_dir, rid) == at - at % segment, 30,
                    lambda: f"the log to start at the snapshot's segment ({at - at % segment}): "
                            f"{log_start(member.archive_dir, rid)}\n{Path(hold).read_text()}")
        assert f"recording={rid} position={at}" in Path(hold).read_text()
        member.kill()
        # The restart loads the snapshot and replays the log after it: every message once, in order.
        member.start()
        member.await_election_closed()
        expected = [f"m{i}" for i in range(6000)]
        await_until(lambda: member.journal_lines() == expected, 60,
                    lambda: f"the snapshot and the log after it: {len(member.journal_lines())} lines")
        assert log_start(member.archive_dir, rid) == at - at % segment
