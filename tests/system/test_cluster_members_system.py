"""Three ``sulis cluster-node`` processes on loopback, each with its own driver, archive, consensus module and
Python service: they elect a leader, a client given every member's ingress reaches it, and every answered
message is applied by every member once, in order. The leader is killed with SIGKILL: the other two elect one
of themselves, the client follows it, nothing answered is lost; the killed member restarted on its directories
rebuilds its service from its log, copies or catches up what it missed, and holds the same history.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from clusterprocs import journal_cluster
from conftest import await_until, run_cli
from sulis.cluster import ClusterClient


def send(c: ClusterClient, text: str, timeout: float = 20.0) -> None:
    """Offers ``text`` until the cluster takes it and waits for its echo."""
    await_until(lambda: c.offer(text.encode()) > 0, timeout, f"ingress to take {text}")
    got: list[bytes] = []
    await_until(lambda: c.poll_egress(lambda p, t: got.append(p)) >= 0 and got, timeout, f"the echo of {text}")
    assert got == [text.encode()], got


def test_three_member_processes_keep_every_answered_message_through_a_sigkill_of_the_leader(make_driver, tmp_path):
    with journal_cluster(tmp_path, make_driver().dir) as (nodes, c):
        for i in range(100):
            send(c, f"m{i}")
        leader = c.leader_member_id
        # Every member applied every answered message, once, in order (followers what the leader committed).
        expected = [f"m{i}" for i in range(100)]
        for n in nodes:
            await_until(lambda n=n: len(n.journal_lines()) >= 100, 20, f"member {n.id}'s journal")
            assert n.journal_lines() == expected, n.id

        killed_at = time.monotonic()
        nodes[leader].kill()
        await_until(lambda: c.poll_egress(lambda p, t: None) >= 0 and c.leader_member_id != leader, 30,
                    "the client to follow a new leader")
        failover = time.monotonic() - killed_at
        new_leader = c.leader_member_id
        for i in range(100, 200):
            send(c, f"m{i}")
        rest = [n for n in nodes if n.id != leader]
        expected = [f"m{i}" for i in range(200)]
        for n in rest:
            await_until(lambda n=n: len(n.journal_lines()) >= 200, 20, f"member {n.id}'s journal")
            assert n.journal_lines() == expected, n.id

        # The killed member restarts on its directories: its new service replays its log, and it gets the
        # rest from the leader (copy, replay, catch-up), so it holds the same history as the others.
        nodes[leader].start()
        for i in range(200, 250):
            send(c, f"m{i}")
        assert c.leader_member_id == new_leader
        expected = [f"m{i}" for i in range(250)]
        for n in nodes:
            await_until(lambda n=n: len(n.journal_lines()) >= 250, 30,
                        f"member {n.id}'s journal ({len(n.journal_lines())} lines)\n{n.stderr()[-3000:]}")
            assert n.journal_lines() == expected, n.id
        c.close()
        print(f"failover: the client followed member {new_leader} {failover * 1000:.0f} ms after the kill")
        for n in nodes:
            n.stop()
            assert n.proc.returncode == 0, n.stderr()[-3000:]


def test_a_member_with_a_damaged_recording_log_is_refused_then_rebuilt_from_the_others(make_driver, tmp_path):
    """A follower's recording.log damaged while it was down (its first entry's type overwritten): it refuses
    to start, naming the file and where, and the other two go on. The replacement procedure of
    docs/cluster.md: its directories wiped, it starts empty, copies the log from the leader's archive,
    replays it through its service and holds the same history as the others."""
    with journal_cluster(tmp_path, make_driver().dir) as (nodes, c):
        for i in range(50):
            send(c, f"m{i}")
        victim = nodes[(c.leader_member_id + 1) % 3]
        await_until(lambda: len(victim.journal_lines()) >= 50, 20, f"member {victim.id}'s journal")
        victim.kill()
        log = Path(victim.cluster_dir) / "recording.log"
        data = bytearray(log.read_bytes())
        data[44:48] = b"\x7f\x7f\x7f\x7f"  # the first entry's type (ENTRY_TYPE_OFFSET)
        log.write_bytes(bytes(data))
        refused = subprocess.run(victim.cmd, env=victim.env, cwd=victim.cwd, capture_output=True, text=True,
                                 timeout=120)
        assert refused.returncode != 0, refused.stderr[-2000:]
        assert str(log) in refused.stderr and "damaged" in refused.stderr, refused.stderr[-2000:]
        # The tools: its mark file keeps why it did not start; the others (below) say who leads, and that
        # the victim's log lags theirs.
        errors = json.loads(run_cli("cluster-tool", victim.cluster_dir, "errors", "--json").stdout)
        module = errors["components"][0]
        assert module["component"] == "consensus module" and module["started"] == "failed", module
        assert any(str(log) in text and "damaged" in text for _, _, _, text in module["errors"]), module
        for i in range(50, 100):
            send(c, f"m{i}")
        leader = nodes[c.leader_member_id]
        for n in nodes:
            if n is not victim:
                answer = json.loads(run_cli("cluster-tool", n.cluster_dir, "list-members", "--json").stdout)
                assert (answer["member_id"], answer["leader_member_id"]) == (n.id, leader.id), answer
                assert sorted(m["member_id"] for m in answer["active_members"]) == [0, 1, 2]
        answer = json.loads(run_cli("cluster-tool", leader.cluster_dir, "list-members", "--json").stdout)
        positions = {m["member_id"]: m["log_position"] for m in answer["active_members"]}
        others = [positions[n.id] for n in nodes if n is not victim]
        assert positions[victim.id] < min(others), positions
        # Replaced: its directories wiped, it starts empty and gets everything from the others.
        for d in (victim.cluster_dir, victim.archive_dir, victim.driver_dir):
            shutil.rmtree(d)
        victim.start()
        for i in range(100, 150):
            send(c, f"m{i}")
        expected = [f"m{i}" for i in range(150)]
        for n in nodes:
            await_until(lambda n=n: len(n.journal_lines()) >= 150, 30,
                        f"member {n.id}'s journal ({len(n.journal_lines())} lines)\n{n.stderr()[-3000:]}")
            assert n.journal_lines() == expected, n.id
        c.close()


def test_list_members_answers_during_an_election_that_cannot_end(make_driver, tmp_path):
    """Two of three members killed: the third leaves its term (no quorum) and canvasses for ever; asked then,
    its module still answers ``list-members`` (no leader), which is when an operator needs it. One member
    back, they elect a leader, and the answer names it."""
    with journal_cluster(tmp_path, make_driver().dir) as (nodes, c):
        send(c, "m0")
        survivor = nodes[c.leader_member_id]
        others = [n for n in nodes if n is not survivor]
        for n in others:
            n.kill()

        def ask() -> dict:
            out = run_cli("cluster-tool", survivor.cluster_dir, "list-members", "--json", "--timeout", "5")
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)

        await_until(lambda: ask()["leader_member_id"] == -1, 30, "the survivor to leave its term")
        others[0].start()
        answer = await_until(lambda: (a := ask())["leader_member_id"] >= 0 and a, 60, "a leader again")
        assert answer["leader_member_id"] in (survivor.id, others[0].id), answer
        c.close()
