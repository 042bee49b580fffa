"""A cluster that only its clients can talk to: three ``sulis cluster-node`` members started with
``--credentials-file`` serve a client whose credentials are a line of the file and refuse, with
AUTHENTICATION_REJECTED, one with other credentials or none. A ClusterBackup's BackupQuery (Aeron's
message, sent here to a member's consensus endpoint) is checked the same way: one with good credentials
is answered with a BackupResponse, one without is told AUTHENTICATION_REJECTED on its response channel
and gets nothing of the log. Securing the members' channels themselves is transport security
(docs/security.md, test_security_hosts.py)."""

from __future__ import annotations

import os
import struct
import time

import pytest

import sulis
from clusterprocs import JOURNAL_SERVICE, Member, loopback_members
from conftest import await_until, free_udp_port
from sulis.cluster import ClusterClient, ClusterError

BACKUP_QUERY, BACKUP_RESPONSE, SESSION_EVENT = 77, 78, 2
AUTHENTICATION_REJECTED = 3
CONSENSUS_STREAM = 108


def backup_query(correlation_id: int, response_channel: str, response_stream: int, credentials: bytes) -> bytes:
    """Aeron Cluster's BackupQuery (schema 111, version 16), as a ClusterBackup sends it."""
    header = struct.pack("<HHHH", 24, BACKUP_QUERY, 111, 16)
    block = struct.pack("<qiiq", correlation_id, response_stream, 0x010000, -1)
    channel = response_channel.encode()
    return (header + block + struct.pack("<I", len(channel)) + channel
            + struct.pack("<I", len(credentials)) + credentials)


def ask_backup(c: sulis.Client, consensus: str, stream: int, correlation_id: int, credentials: bytes) -> list[bytes]:
    """Sends a BackupQuery to the member at ``consensus`` until something comes back on its response channel."""
    response = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
    sub = c.add_subscription(response, stream)
    pub = c.add_publication(f"aeron:udp?endpoint={consensus}", CONSENSUS_STREAM)
    query = backup_query(correlation_id, response, stream, credentials)
    answers: list[bytes] = []

    def asked_and_answered() -> bool:
        if not answers:
            pub.offer(query)  # again until answered: a member answers only outside an election
        sub.poll(lambda buffer, _h: answers.append(bytes(buffer)), 10)
        return bool(answers)

    try:
        await_until(asked_and_answered, 60, f"an answer to the backup query with {credentials!r}", interval=0.05)
    finally:
        pub.close()
        sub.close()
    return answers


def test_members_with_a_credentials_file_serve_only_the_clients_and_backups_that_name_one(tmp_path, make_driver):
    creds = tmp_path / "credentials"
    creds.write_text("# who may connect\nalice-secret\nbob-secret\n")
    os.chmod(creds, 0o600)
    driver = make_driver()
    (tmp_path / "journal_service.py").write_text(JOURNAL_SERVICE)
    members, ingress_ports = loopback_members(3)
    nodes = [Member(tmp_path, i, members, extra=("--credentials-file", str(creds))) for i in range(3)]
    ingress = ",".join(f"{i}=localhost:{p}" for i, p in enumerate(ingress_ports))

    def client(credentials: bytes) -> ClusterClient:
        return ClusterClient(driver.dir, ingress, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                             message_timeout=60.0, credentials=credentials)

    try:
        for m in nodes:
            m.start()
        with client(b"alice-secret") as alice:
            await_until(lambda: alice.offer(b"hello") > 0, 30, "the ingress to take hello")
            got: list[bytes] = []
            await_until(lambda: alice.poll_egress(lambda p, t: got.append(p)) >= 0 and got, 30, "the echo")
            assert got == [b"hello"]
        for bad in (b"mallory", b""):
            with pytest.raises(ClusterError) as refused:
                client(bad)
            assert "AUTHENTICATION_REJECTED" in str(refused.value) or "authentication" in str(refused.value), \
                str(refused.value)

        consensus = members.split("|")[0].split(",")[2]
        with sulis.Client(dir=driver.dir) as c:
            for n, (credentials, template) in enumerate(((b"bob-secret", BACKUP_RESPONSE),
                                                          (b"mallory", SESSION_EVENT))):
                answers = ask_backup(c, consensus, 9 + n, 1000 + n, credentials)
                got_template = struct.unpack_from("<H", answers[0], 2)[0]
                assert got_template == template, (credentials, answers[0][:16])
                if template == SESSION_EVENT:
                    correlation_id, = struct.unpack_from("<q", answers[0], 8 + 8)
                    code, = struct.unpack_from("<i", answers[0], 8 + 28)
                    assert (correlation_id, code) == (1000 + n, AUTHENTICATION_REJECTED)
                    assert not any(struct.unpack_from("<H", a, 2)[0] == BACKUP_RESPONSE for a in answers)
        assert any("refuses a backup query" in m.stderr() for m in nodes), "the refusal is logged"
    finally:
        for m in nodes:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait(timeout=60)


def request_vote(candidate_term: int, candidate: int) -> bytes:
    """Aeron Cluster's RequestVote (template 51): a candidate far ahead asks for every vote."""
    return struct.pack("<HHHH", 32, 51, 111, 16) + struct.pack("<qqqii", candidate_term - 1, 1 << 40,
                                                                candidate_term, candidate, 0x010000)


def commit_position(term: int, position: int, leader: int) -> bytes:
    """Aeron Cluster's CommitPosition (template 55): a forged leader announcing a commit far ahead."""
    return struct.pack("<HHHH", 20, 55, 111, 16) + struct.pack("<qqi", term, position, leader)


def test_members_whose_drivers_seal_everything_ignore_a_strangers_votes_and_commit_positions(tmp_path, make_driver):
    ring = tmp_path / "keyring"
    ring.write_text(f"1 {os.urandom(32).hex()}\n")
    os.chmod(ring, 0o600)
    secured = {"SULIS_SECURITY": "encrypt", "SULIS_KEYRING_FILE": str(ring)}
    (tmp_path / "journal_service.py").write_text(JOURNAL_SERVICE)
    members, ingress_ports = loopback_members(3)
    nodes = [Member(tmp_path, i, members, env=secured) for i in range(3)]
    ingress = ",".join(f"{i}=localhost:{p}" for i, p in enumerate(ingress_ports))
    client_driver = make_driver(security="encrypt", keyring_file=str(ring))
    stranger = make_driver()  # no keyring: its frames are plain Aeron
    try:
        for m in nodes:
            m.start()
        with ClusterClient(client_driver.dir, ingress, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                           message_timeout=60.0) as c:
            await_until(lambda: c.offer(b"before") > 0, 30, "the ingress to take a message")
            terms = {m.id: m.counters()["cluster-leadership-term-id"] for m in nodes}
            with sulis.Client(dir=stranger.dir) as s:
                forged = [s.add_publication(f"aeron:udp?endpoint={m.split(',')[2]}", CONSENSUS_STREAM)
                          for m in members.split("|")]
                # A second and more of votes for a term far ahead and of commit positions from a false leader.
                offered = 0
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline:
                    for p in forged:
                        offered += p.offer(request_vote(terms[0] + 100, 2)) > 0
                        offered += p.offer(commit_position(terms[0] + 100, 1 << 40, 2)) > 0
                    time.sleep(0.01)
                assert offered == 0 and not any(p.is_connected for p in forged), \
                    "no member answered the stranger's setups: its publications never connected"
            await_until(lambda: all(m.counters().get("cluster-leadership-term-id") == terms[m.id] for m in nodes),
                        10, "every member in the term it was in")
            got: list[bytes] = []
            await_until(lambda: c.offer(b"after") > 0, 30, "the ingress to take a message after the attack")
            await_until(lambda: c.poll_egress(lambda p, t: got.append(p)) >= 0 and b"after" in got, 30, "the echo")
        dropped = [sulis.CountersReader(m.driver_dir).value(sulis.SystemCounter.SECURITY_UNSEALED_DROPPED)
                   for m in nodes]
        assert all(d > 0 for d in dropped), f"each member dropped the stranger's setups: {dropped}"
        assert all(m.counters()["cluster-leadership-term-id"] == terms[m.id] for m in nodes), "no new term"
    finally:
        for m in nodes:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait(timeout=60)
