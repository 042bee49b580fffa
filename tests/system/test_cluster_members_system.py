"""Three ``sulis cluster-node`` processes on loopback, each with its own driver, archive, consensus module and
Python service: they elect a leader, a client given every member's ingress reaches it, and every answered
message is applied by every member once, in order. The leader is killed with SIGKILL: the other two elect one
of themselves, the client follows it, nothing answered is lost; the killed member restarted on its directories
rebuilds its service from its log, copies or catches up what it missed, and holds the same history.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import sulis
from clusterprocs import (
    LEADER_HEARTBEAT_TIMEOUT_S,
    SNAPSHOT_JOURNAL,
    KeepAlive,
    journal_cluster,
    vanish_with_a_message_held,
)
from conftest import await_until, free_udp_port, run_cli
from sulis.cluster import ClusterClient, ClusterSessionClosedError, EventCode

REC_POS = {name: t for t, name in sulis._native.counter_types()}["rec-pos"]

# Three member processes, each starting, electing and restarting: the purge test takes about 30 s on an idle
# 2-core machine and several times that on a busy one, past the suite's 120 s default. A hang still ends.
pytestmark = pytest.mark.timeout(600)


def send(c: ClusterClient, text: str, timeout: float = 20.0) -> None:
    """Offers ``text`` until the cluster takes it and waits for its echo."""
    await_until(lambda: c.offer(text.encode()) > 0, timeout, f"ingress to take {text}")
    got: list[bytes] = []
    await_until(lambda: c.poll_egress(lambda p, t: got.append(p)) >= 0 and got, timeout, f"the echo of {text}")
    assert got == [text.encode()], got


def hold_all(nodes, count: int, timeout: float = 30.0, idle=None) -> None:
    """Every member in ``nodes`` applies ``m0`` to ``m{count-1}``, once each, in order (``idle``, a
    ``KeepAlive``, is called while it waits)."""
    expected = [f"m{i}" for i in range(count)]
    for n in nodes:
        def applied(n=n) -> bool:
            if idle is not None:
                idle()
            return len(n.journal_lines()) >= count
        await_until(applied, timeout,
                    lambda n=n: f"member {n.id}'s journal ({len(n.journal_lines())} lines)\n{n.stderr()[-3000:]}")
        assert n.journal_lines() == expected, n.id


def test_three_member_processes_keep_every_answered_message_through_a_sigkill_of_the_leader(make_driver, tmp_path):
    with journal_cluster(tmp_path, make_driver().dir) as (nodes, c):
        for i in range(100):
            send(c, f"m{i}")
        leader = c.leader_member_id
        # Every member applied every answered message, once, in order (followers what the leader committed).
        hold_all(nodes, 100, 20)

        killed_at = time.monotonic()
        nodes[leader].kill()
        await_until(lambda: c.poll_egress(lambda p, t: None) >= 0 and c.leader_member_id != leader, 30,
                    "the client to follow a new leader")
        failover = time.monotonic() - killed_at
        new_leader = c.leader_member_id
        for i in range(100, 200):
            send(c, f"m{i}")
        rest = [n for n in nodes if n.id != leader]
        hold_all(rest, 200, 20)

        # The killed member restarts on its directories: its new service replays its log, and it gets the
        # rest from the leader (copy, replay, catch-up), so it holds the same history as the others.
        nodes[leader].start()
        for i in range(200, 250):
            send(c, f"m{i}")
        assert c.leader_member_id == new_leader
        hold_all(nodes, 250)
        c.close()
        print(f"failover: the client followed member {new_leader} {failover * 1000:.0f} ms after the kill")
        for n in nodes:
            n.stop()
            assert n.proc.returncode == 0, n.stderr()[-3000:]


def stream(c: ClusterClient, texts: list[str], timeout: float = 60.0, batched: bool = False) -> None:
    """Offers every text in order, reading egress (echoes, committed counts, a new leader) whenever the
    ingress does not take one, without waiting for echoes; ``batched``: all of them in ``offer_batch`` calls,
    the egress read by ``poll_egress_batch``."""
    if not batched:
        for text in texts:
            await_until(lambda text=text: c.offer(text.encode()) > 0 or c.poll_egress(lambda p, t: None, 100) < 0,
                        timeout, lambda text=text: f"ingress to take {text} ({c.in_flight} in flight)")
        return
    import numpy as np

    data = "".join(texts).encode()
    offsets = np.concatenate(([0], np.cumsum([len(t) for t in texts]))).astype(np.int32)
    sent = [0]

    def more() -> bool:
        sent[0] += c.offer_batch(data, offsets[sent[0]:])
        if sent[0] < len(texts):
            c.poll_egress_batch(100)
        return sent[0] == len(texts)

    await_until(more, timeout, lambda: f"ingress to take {texts[sent[0]]} ({c.in_flight} in flight)")


@pytest.mark.parametrize("batched", [False, True], ids=["offer", "offer_batch"])
def test_messages_in_flight_when_the_leader_is_sigkilled_are_applied_once_each_in_order(make_driver, tmp_path,
                                                                                        batched):
    """Exactly once through a failover: the client streams 2,000 messages without waiting for answers and the
    leader is SIGKILLed with hundreds in flight. The client resends what the leader had not said was
    committed to the new leader, which drops what its log holds: every member applies m0..m1999 once each,
    in order (before, a failover lost or applied twice what was in flight). The same with the messages
    handed over by ``offer_batch`` (what a batch did not get in goes with the next)."""
    with journal_cluster(tmp_path, make_driver().dir) as (nodes, c):
        texts = [f"m{i}" for i in range(2000)]
        stream(c, texts[:600], batched=batched)
        in_flight = c.in_flight
        leader = c.leader_member_id
        nodes[leader].kill()
        stream(c, texts[600:], batched=batched)  # the first of them, and maybe all, into the dead leader's ingress
        await_until(lambda: c.poll_egress(lambda p, t: None, 100) >= 0 and c.leader_member_id != leader, 30,
                    "the client to follow a new leader")
        rest = [n for n in nodes if n.id != leader]
        keep = KeepAlive(c)
        hold_all(rest, 2000, 60, idle=keep)
        await_until(lambda: c.poll_egress(lambda p, t: None, 100) >= 0 and c.in_flight == 0, 30,
                    lambda: f"the leader to say all is committed ({c.in_flight} in flight)")
        # Every message acknowledged, answered or not: the count is the client's to read (an echo the dead leader
        # had not sent is not sent again, answers being at most once across a leader change).
        assert (c.committed, c.offered) == (2000, 2000), (c.committed, c.offered)
        print(f"{in_flight} messages were in flight at the kill")
        nodes[leader].start()
        hold_all(nodes, 2000, 60, idle=keep)


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
                if n is not leader:  # a follower says what it heard of its leader: its term and commit position
                    seen = {m["member_id"]: m for m in answer["active_members"]}[leader.id]
                    assert seen["leadership_term_id"] == c.leadership_term_id and seen["log_position"] > 0, seen
                    text = run_cli("cluster-tool", n.cluster_dir, "list-members").stdout
                    assert f"{leader.id} LEADER: term {c.leadership_term_id} commit position" in text, text
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
        hold_all(nodes, 150)
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


def ingress_endpoints(nodes) -> str:
    """A client's ingress endpoints for ``nodes`` (from their ``--cluster-members``)."""
    members = next(m.cmd[m.cmd.index("--cluster-members") + 1] for m in nodes)
    return ",".join(f"{spec.split(',')[0]}={spec.split(',')[1]}" for spec in members.split("|"))


def test_a_leader_cut_off_with_an_uncommitted_tail_cuts_it_back_when_it_rejoins(make_driver, tmp_path):
    """Truncation on real drivers. The followers paused (SIGSTOP), the leader logs and records what a client
    offers but commits none of it; it is SIGKILLed, then the followers (the log it sent them still unread in
    their sockets, lost with them): restarted, the two elect one of themselves, which logs other messages. The
    old leader restarted on its directories finds its tail in a term the others never had: it cuts its log
    back to where the new term began, catches up, and holds the others' history; no member ever applies what
    was not committed."""
    driver = make_driver()
    # The leader must take and record the lost messages before it misses its paused followers and steps
    # down: a heartbeat timeout of 10 s (not 2 s) leaves a busy machine time for that.
    with journal_cluster(tmp_path, driver.dir, extra=("--leader-heartbeat-timeout", "10s")) as (nodes, c):
        for i in range(20):
            send(c, f"m{i}")
        hold_all(nodes, 20)
        old = nodes[c.leader_member_id]
        followers = [n for n in nodes if n is not old]
        for f in followers:
            f.pause()
        paused_at = time.monotonic()
        committed = old.counters()["cluster-commit-pos"]

        def recorded() -> int:
            return max(x["value"] for x in sulis.CountersReader(old.driver_dir).counters()
                       if x["type_id"] == REC_POS)

        def left() -> float:
            """Of 8 s from the pause: within the heartbeat timeout (10 s), before the leader steps down."""
            return max(0.0, paused_at + 8.0 - time.monotonic())

        for i in range(5):
            await_until(lambda i=i: c.offer(f"lost{i}".encode()) > 0, left(), f"the leader to take lost{i}")
        await_until(lambda: recorded() > committed, left(), "the leader to record what it cannot commit")
        old.kill()
        for f in followers:
            f.kill()
        c.close()
        assert not [line for n in nodes for line in n.journal_lines() if line.startswith("lost")]

        for f in followers:
            f.start()
        with ClusterClient(driver.dir, ingress_endpoints(nodes), f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                           message_timeout=60.0) as again:
            assert again.leader_member_id in (f.id for f in followers)
            for i in range(20, 40):
                send(again, f"m{i}")
            old.start()
            old.await_election_closed()
            for i in range(40, 45):
                send(again, f"m{i}")
            hold_all(nodes, 45)
        assert "cut its log back to" in old.stderr(), old.stderr()[-3000:]
        assert old.counters()["cluster-leadership-term-id"] > 0


def test_a_log_recording_stopped_by_hand_sends_its_member_to_an_election_that_records_the_log_again(make_driver,
                                                                                                     tmp_path):
    """Someone stops a member's log recording through its archive (``stop_recording_by_identity``), a
    follower's, then the leader's: the archive reports no error, so the member leaves its term for an election
    (as Aeron's does on the recording's STOP signal), which extends the recording; every member holds every
    message and the member's log is recorded as far as the leader's. Before, the member ran on unrecorded."""
    from sulis.spark.cluster_log import log_recording_ids

    def recorded(n) -> int:
        """Where member n's log recording stands now (−1: not recording)."""
        with sulis.Client(dir=n.driver_dir) as client, sulis.ArchiveClient(client) as archive:
            return archive.get_recording_position(log_recording_ids(n.cluster_dir)[-1])

    with journal_cluster(tmp_path, make_driver().dir) as (nodes, c):
        sent = 0
        for victim in (nodes[(c.leader_member_id + 1) % 3], nodes[c.leader_member_id]):
            for _ in range(10):
                send(c, f"m{sent}")
                sent += 1
            hold_all(nodes, sent)
            terms = victim.stderr().count("runs term")
            with sulis.Client(dir=victim.driver_dir) as client, sulis.ArchiveClient(client) as archive:
                assert archive.stop_recording_by_identity(log_recording_ids(victim.cluster_dir)[-1])
            await_until(lambda v=victim, t=terms: v.stderr().count("runs term") > t, 30,
                        lambda v=victim: f"member {v.id} to run a new term\n{v.stderr()[-3000:]}")
            assert "stopped with no error from the archive" in victim.stderr(), victim.stderr()[-3000:]
            # A leader that stepped down and won again runs a later term: the client hears of it (a
            # NewLeaderEvent) before it offers, or the leader drops what it offers for the old term.
            term = victim.counters()["cluster-leadership-term-id"]
            await_until(lambda t=term: c.poll_egress(lambda p, ts: None) >= 0 and c.leadership_term_id == t, 10,
                        "the client to hear of the new term")
            for _ in range(10):
                send(c, f"m{sent}")
                sent += 1
            hold_all(nodes, sent)
            leader = nodes[c.leader_member_id]
            await_until(lambda v=victim, lead=leader: recorded(v) == recorded(lead) > 0, 10,
                        lambda v=victim, lead=leader: f"member {v.id} recorded {recorded(v)}, the leader "
                                                      f"{recorded(lead)}\n{v.stderr()[-3000:]}")
        assert all(n.proc.poll() is None for n in nodes)


def test_a_client_connects_while_the_first_member_it_names_is_down(make_driver, tmp_path):
    """A new client whose ingress list starts with a dead member reaches the others, as Aeron's client does
    (a request to every member whose ingress connects; a follower redirects it to the leader). That client
    starts no driver by hand: ``driver_dir=None`` gives it one of its own, on a free egress port, closed with
    it, directory and all, a new directory named by ``driver_dir_prefix`` (``/dev/shm/sulis-cluster-client-``
    and a random suffix by default)."""
    driver = make_driver()
    with journal_cluster(tmp_path, driver.dir) as (nodes, c):
        send(c, "m0")
        down = nodes[0]
        down.kill()
        if c.leader_member_id == down.id:
            await_until(lambda: c.poll_egress(lambda p, t: None) >= 0 and c.leader_member_id != down.id, 30,
                        "the others to elect a leader")
        c.close()
        prefix = str(tmp_path / "late-client-")
        with ClusterClient(ingress_endpoints=ingress_endpoints(nodes), message_timeout=30.0,
                           driver_dir_prefix=prefix) as late:
            assert late.leader_member_id != down.id
            assert late.driver_dir.startswith(prefix) and os.path.isdir(late.driver_dir), late.driver_dir
            send(late, "m1")
        assert not os.path.exists(late.driver_dir), "the client's own driver closed with it"
        hold_all(nodes[1:], 2)



def test_a_client_connecting_while_the_leader_is_paused_reaches_the_leader_the_others_elect(make_driver, tmp_path):
    """A connect request no leader answers (the leader paused; the followers' REDIRECTs name it, and after they
    elect one of themselves nobody answers the request again) is asked again of every member, and the leader
    the others elect opens the session within the message timeout. It once waited the whole timeout: under
    load a first election's leader that lost its term before answering left a new client stranded for 60 s."""
    driver = make_driver()
    with journal_cluster(tmp_path, driver.dir) as (nodes, c):
        send(c, "m0")
        leader = nodes[c.leader_member_id]
        leader.pause()
        try:
            with ClusterClient(driver.dir, ingress_endpoints(nodes),
                               f"aeron:udp?endpoint=localhost:{free_udp_port()}", message_timeout=30.0) as late:
                assert late.leader_member_id != leader.id
                send(late, "m1")
        finally:
            leader.resume()

def test_a_client_whose_leader_vanished_with_no_successor_ends_its_session_after_the_new_leader_timeout(
        make_driver, tmp_path):
    """A leader gone with no successor to announce itself to the session (here the only member, SIGKILLed; in a
    cluster of several, a new leader that never learnt of the session because its open was not committed)
    leaves a client nothing to wait for. As Aeron's client closes after its new-leader timeout, the client
    ends the session itself once its ingress has been unconnected that long (twice the leader heartbeat
    timeout the leader gave): poll_egress raises saying so and offer returns CLOSED; before, it waited for
    ever (a fault run's clients sat 22 s on sessions the new leader lacked). A client idle past that time
    with its leader there keeps its session."""
    driver = make_driver()
    with journal_cluster(tmp_path, driver.dir, n=1, new_leader_timeout=None) as ((member,), c):
        send(c, "m0")
        timeout = 2 * LEADER_HEARTBEAT_TIMEOUT_S
        idle_until = time.monotonic() + timeout * 1.5
        await_until(lambda: c.poll_egress(lambda p, t: None) >= 0 and time.monotonic() > idle_until, 30,
                    "an idle spell longer than the new-leader timeout")
        send(c, "m1")
        member.kill()
        killed = time.monotonic()
        ended: list[ClusterSessionClosedError] = []

        def session_ended() -> bool:
            try:
                c.poll_egress(lambda p, t: None)
            except ClusterSessionClosedError as e:
                ended.append(e)
            return bool(ended)
        await_until(session_ended, 60, "the client to give up the session of its vanished leader")
        assert time.monotonic() - killed >= timeout, "given up before the new-leader timeout"
        e = ended[0]
        assert e.code == EventCode.CLOSED and "the client ended the session: no leader reached" in str(e), str(e)
        assert f"to member {member.id} (term " in e.detail, e.detail
        assert c.offer(b"m2") == sulis.OfferResult.CLOSED


@pytest.mark.parametrize("service", ["journal_service:Journal", "journal_service:BatchedJournal"])
def test_a_service_offering_to_a_vanished_client_does_not_freeze_the_cluster(make_driver, tmp_path, service):
    """Three members: a client's message held while the leader is suspended (``cluster-tool suspend``), the
    client killed with its driver, the leader resumed: the leader's service meets NOT_CONNECTED and its retry
    loop ends (the followers' offers are mocked), so every member applies the held message and a new client's
    after it, and the new client is answered. Before, the leader's service spun on the held entry for ever:
    with ``offer`` a bool, and with ``offer_batch`` a bare count (the batched service's documented loop, which
    now skips a message whose ``code`` is not in OFFER_AGAIN)."""
    driver = make_driver()
    with journal_cluster(tmp_path, driver.dir, service=service) as (nodes, c):
        send(c, "m0")
        leader = nodes[c.leader_member_id]

        def suspend() -> None:
            out = run_cli("cluster-tool", leader.cluster_dir, "suspend")
            assert out.returncode == 0, out.stderr
        vanish_with_a_message_held(ingress_endpoints(nodes), suspend, leader.driver_dir)
        out = run_cli("cluster-tool", leader.cluster_dir, "resume")
        assert out.returncode == 0, out.stderr
        send(c, "m1")
        for n in nodes:
            await_until(lambda n=n: len(n.journal_lines()) >= 3, 30, f"member {n.id}'s journal")
            assert n.journal_lines() == ["m0", "1", "m1"], n.id

def test_a_client_that_stops_reading_or_vanishes_costs_only_itself_on_three_members(make_driver, tmp_path):
    """Three members, the journal service answering each message with ``offer`` in Aeron's retry loop: three
    clients vanish at once with a message each held in the log, and a client that never reads its egress sends
    12 MB of requests. The leader's service never waits on them (their answers wait in the sessions'
    egress queues), so the other client is answered throughout; the vanished sessions close once their
    egresses took nothing for ``--egress-stall-timeout``, the reader's when its queue passes
    ``--egress-queue-len`` (it reads why), and every member applies the same log."""
    driver = make_driver()
    with journal_cluster(tmp_path, driver.dir,
                         extra=("--egress-queue-len", "256k", "--egress-stall-timeout", "3s")) as (nodes, c):
        send(c, "m0")
        leader = nodes[c.leader_member_id]

        def suspend() -> None:
            out = run_cli("cluster-tool", leader.cluster_dir, "suspend")
            assert out.returncode == 0, out.stderr
        vanish_with_a_message_held(ingress_endpoints(nodes), suspend, leader.driver_dir, clients=3)
        out = run_cli("cluster-tool", leader.cluster_dir, "resume")
        assert out.returncode == 0, out.stderr
        started = time.monotonic()
        send(c, "m1")
        # A liveness bound, not a speed figure: a service waiting on each vanished client took 15 s.
        assert time.monotonic() - started < 10, "answered behind the vanished clients' answers"
        print(f"answered {1000 * (time.monotonic() - started):.1f} ms after three clients vanished")
        slow = ClusterClient(driver.dir, ingress_endpoints(nodes), f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                             message_timeout=30.0, exactly_once=False)
        try:
            for _ in range(12_000):  # 12 MB of answers: past its egress's window (8 MiB) and the 256 KiB queue
                await_until(lambda: slow.offer(b"s" * 1000) > 0, 20, "the ingress to take the slow client's")
            waits = []
            for i in range(2, 22):
                started = time.monotonic()
                send(c, f"m{i}")
                waits.append(time.monotonic() - started)
                slow.send_keep_alive()
            print(f"answered beside a client that does not read: longest {1000 * max(waits):.1f} ms")
            with pytest.raises(ClusterSessionClosedError) as closed:
                await_until(lambda: slow.poll_egress(lambda p, t: None, 100) < 0, 60, "the slow session's close")
            assert "egress_queue_len" in closed.value.detail, closed.value.detail
        finally:
            slow.close()
        send(c, "m22")
        for n in nodes:
            await_until(lambda n=n: n.journal_lines()[-1:] == ["m22"], 60, f"member {n.id}'s journal to end at m22",
                        interval=0.2)
        lines = nodes[0].journal_lines()
        assert all(n.journal_lines() == lines for n in nodes[1:]), "every member applied the same log"
        assert [x for x in lines if x.startswith("m")] == [f"m{i}" for i in range(23)]
        # The slow client's requests up to its session's close (what it sent after was dropped, the session gone).
        assert lines.count("1") == 3 and 0 < lines.count("s" * 1000) <= 12_000




def log_start(member) -> int:
    """Where the member's log recording starts: its lowest segment file's base position."""
    entries = json.loads(run_cli("cluster-tool", member.cluster_dir, "recording-log", "--json").stdout)["entries"]
    rid = next(e["recording_id"] for e in entries if e["type"] == "TERM")
    return min(int(f[len(f"{rid}-"):-len(".rec")]) for f in os.listdir(member.archive_dir)
               if f.startswith(f"{rid}-") and f.endswith(".rec"))


def test_the_log_is_purged_on_every_member_once_each_is_past_the_snapshot_and_a_lost_member_is_seeded(make_driver,
                                                                                                       tmp_path):
    """``purge-log --cluster`` on the leader: with a follower down it is refused, naming it, and no member
    purges; with all three past the snapshot, a PURGE_LOG action in the log has each member delete its log's
    segments before its own snapshot. A member restarted afterwards starts from its snapshot and what is left,
    and holds every message; a member whose files are then lost is seeded from another member's snapshot
    (``--seed-from-snapshot``) and holds every message too."""
    (tmp_path / "snapshot_journal.py").write_text(SNAPSHOT_JOURNAL)
    with journal_cluster(tmp_path, make_driver().dir, extra=("--log-term-length", "64k"),
                         service="snapshot_journal:Journal",
                         env={"SULIS_ARCHIVE_SEGMENT_FILE_LENGTH": "64k"}) as (nodes, c):
        # The client waits long between its messages here (snapshots, kills, restarts, `sulis cluster-tool`
        # processes: over a minute on a slow machine), its session kept alive meanwhile.
        keep = KeepAlive(c)
        for i in range(1500):  # about 144 KiB of log: more than two 64 KiB segments
            send(c, f"m{i}")
        leader = nodes[c.leader_member_id]
        out = run_cli("cluster-tool", leader.cluster_dir, "snapshot")
        assert out.returncode == 0, out.stderr
        # The tool waits for the leader's snapshot; each follower's is whole (the module's and the service's
        # entries) a moment later. A member killed in between has no whole snapshot, and so purges nothing.
        for n in nodes:
            await_until(keep.around(lambda n=n: json.loads(run_cli("cluster-tool", n.cluster_dir, "recovery-plan",
                                                                   "--json").stdout)["snapshots"]),
                        60, f"member {n.id}'s snapshot", interval=0.1)
        victim = nodes[(leader.id + 1) % 3]
        victim.kill()

        def leader_missed_victim() -> bool:
            """The leader last heard the victim longer ago than its heartbeat timeout (as the purge judges)."""
            out = run_cli("cluster-tool", leader.cluster_dir, "list-members", "--json")
            assert out.returncode == 0, out.stderr
            answer = json.loads(out.stdout)
            heard = next(m for m in answer["active_members"] if m["member_id"] == victim.id)
            return answer["current_time_ns"] - heard["time_of_last_append_ns"] > LEADER_HEARTBEAT_TIMEOUT_S * 1e9
        await_until(keep.around(leader_missed_victim), 60,
                    f"the leader (member {leader.id}) not to have heard member {victim.id} for its heartbeat "
                    f"timeout ({LEADER_HEARTBEAT_TIMEOUT_S} s) after its kill", interval=0.1)
        out = run_cli("cluster-tool", leader.cluster_dir, "purge-log", "--cluster")
        assert out.returncode == 1 and f"member {victim.id} has not reported a log past" in out.stderr, out
        keep()
        assert [log_start(n) for n in nodes] == [0, 0, 0]
        out = run_cli("cluster-tool", nodes[(leader.id + 2) % 3].cluster_dir, "purge-log", "--cluster")
        assert out.returncode == 1 and "ask the leader" in out.stderr, out
        victim.start(idle=keep)
        for i in range(1500, 1600):
            send(c, f"m{i}")
        await_until(keep.around(lambda: len(victim.journal_lines()) >= 1600), 60,
                    lambda: f"the victim (member {victim.id}) to catch up: {len(victim.journal_lines())} of 1600 "
                            f"messages in its journal")
        out = run_cli("cluster-tool", leader.cluster_dir, "purge-log", "--cluster")
        assert out.returncode == 0 and "PURGE_LOG" in out.stdout, out
        await_until(keep.around(lambda: all(log_start(n) > 0 for n in nodes)), 60,
                    lambda: f"every member's purge (their logs start at {[log_start(n) for n in nodes]})",
                    interval=0.1)
        # A follower restarted now has only its snapshot and the log after it, and needs nothing else.
        follower = nodes[(leader.id + 2) % 3]
        follower.kill()
        follower.start(idle=keep)
        for i in range(1600, 1650):
            send(c, f"m{i}")
        hold_all(nodes, 1650, idle=keep)
        for n in nodes:
            keep()
            errors = json.loads(run_cli("cluster-tool", n.cluster_dir, "errors", "--json").stdout)
            assert all("purge failed" not in text for m in errors["components"] for *_, text in m["errors"])
        # A member lost whole now cannot copy the log from 0. Started with seed_from_snapshot on empty
        # directories, it copies another member's snapshot and that member's log up to it, then the election
        # copies the rest from the leader: it holds every message, its log starting past 0 as theirs does.
        lost = nodes[(leader.id + 1) % 3]
        lost.kill()
        for d in (lost.cluster_dir, lost.archive_dir, lost.driver_dir):
            shutil.rmtree(d)
        # Started empty without it, it asks to catch up from 0: the leader records why it never can, and
        # what to do, where the operator looks.
        lost.start(idle=keep)
        leader = nodes[c.leader_member_id]

        def leader_says_why() -> bool:
            errors = json.loads(run_cli("cluster-tool", leader.cluster_dir, "errors", "--json").stdout)
            return any(f"member {lost.id} asks to catch up from log position 0" in text
                       and "--seed-from-snapshot" in text
                       for m in errors["components"] for *_, text in m["errors"])
        await_until(keep.around(leader_says_why), 60,
                    lambda: f"the leader's error naming member {lost.id}\n{lost.stderr()[-2000:]}", interval=0.1)
        lost.kill()
        for d in (lost.cluster_dir, lost.archive_dir, lost.driver_dir):
            shutil.rmtree(d)
        lost.cmd += ["--seed-from-snapshot", "true"]
        lost.start(idle=keep)
        assert "seeded from member" in lost.stderr(), lost.stderr()[-3000:]
        for i in range(1650, 1700):
            send(c, f"m{i}")
        hold_all(nodes, 1700, idle=keep)
        assert log_start(lost) > 0
        plan = json.loads(run_cli("cluster-tool", lost.cluster_dir, "recovery-plan", "--json").stdout)
        assert plan["snapshots"], plan
        c.close()


RAISING_JOURNAL = """
import os
from sulis.cluster import OFFER_AGAIN, ClusteredService

class Journal(ClusteredService):
    \"\"\"Journals each message and echoes it; raises on b"boom" (a poison message), after journalling it.\"\"\"

    def __init__(self):
        self.journal = open(os.environ["JOURNAL"], "w")

    def on_session_message(self, cluster, session_id, timestamp, payload):
        self.journal.write(payload.decode() + "\\n")
        self.journal.flush()
        if payload == b"boom":
            raise ValueError("the service broke on boom")
        while cluster.offer(session_id, payload) in OFFER_AGAIN:
            cluster.idle()
"""


@pytest.mark.timeout(520)  # a wait for the "heavy" lock (up to about 400 s under load), then the test
@pytest.mark.usefixtures("heavy")
def test_with_service_errors_skip_a_poison_message_is_passed_over_alike_on_every_member(make_driver, tmp_path):
    """service_errors=skip: a message the service raises on counts as applied on every member, with what the
    service did before raising (here its journal line), and the next messages are applied; every member
    records the exception in its service's error log (cluster-tool errors), and no member stops."""
    (tmp_path / "raising_journal.py").write_text(RAISING_JOURNAL)
    with journal_cluster(tmp_path, make_driver().dir, service="raising_journal:Journal",
                         extra=("--service-errors", "skip")) as (nodes, c):
        send(c, "m0")
        await_until(lambda: c.offer(b"boom") > 0, 20, "ingress to take the poison message")
        for i in range(1, 20):
            send(c, f"m{i}")
        for n in nodes:
            await_until(lambda n=n: len(n.journal_lines()) >= 21, 30,
                        lambda n=n: f"member {n.id}'s journal ({n.journal_lines()})\n{n.stderr()[-3000:]}")
            assert n.journal_lines() == ["m0", "boom", *[f"m{i}" for i in range(1, 20)]], n.id
            assert n.proc.poll() is None, f"member {n.id} stopped: {n.stderr()[-2000:]}"
            errors = json.loads(run_cli("cluster-tool", n.cluster_dir, "errors", "--json").stdout)
            texts = [text for m in errors["components"] for *_, text in m["errors"]]
            assert any("on_session_message raised at log position" in t and "the service broke on boom" in t
                       and "service_errors=skip" in t for t in texts), (n.id, texts)

