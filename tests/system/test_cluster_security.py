"""A cluster that only its clients can talk to: three ``sulis cluster-node`` members started with
``--credentials-file`` serve a client whose credentials are a line of the file and refuse, with
AUTHENTICATION_REJECTED, one with other credentials or none. A ClusterBackup's BackupQuery (Aeron's
message, sent here to a member's consensus endpoint) is checked the same way: one with good credentials
is answered with a BackupResponse, one without is told AUTHENTICATION_REJECTED on its response channel
and gets nothing of the log. Members started with ``--client-keys-file`` never see a secret: they
challenge a named principal with random bytes, and only the HMAC of those bytes and the connect's response
channel under the principal's secret opens the session; an answer seen on the wire, or made for another
response channel (sent here by a raw client speaking Aeron's messages), opens no other. A ClusterBackup's
query is challenged the same way and answered on the consensus stream, taken only from its query's image.
Securing the members' channels themselves is transport security (docs/security.md, test_security_hosts.py)."""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import time

import pytest

import sulis
from clusterprocs import JOURNAL_SERVICE, Member, loopback_members
from conftest import COUNTER_TYPE, KERNEL_STALL, await_until, free_udp_port
from sulis import _native
from sulis.cluster import ClusterClient, ClusterError

BACKUP_QUERY, BACKUP_RESPONSE, SESSION_EVENT = 77, 78, 2
SESSION_CONNECT_REQUEST, CHALLENGE, CHALLENGE_RESPONSE = 3, 7, 8
OK, AUTHENTICATION_REJECTED = 0, 3
CLIENT_PROTOCOL_VERSION = 0x000300  # Aeron Cluster's client protocol 0.3.0
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


def members_checking(tmp_path, make_driver, flag: str, text: str):
    """Three journal members (not started) given ``flag`` with a private file holding ``text``, and a driver
    for the test's clients: (driver, cluster_members, members, ingress endpoints)."""
    f = tmp_path / flag.lstrip("-")
    f.write_text(text)
    os.chmod(f, 0o600)
    driver = make_driver()
    (tmp_path / "journal_service.py").write_text(JOURNAL_SERVICE)
    members, ingress_ports = loopback_members(3)
    nodes = [Member(tmp_path, i, members, extra=(flag, str(f))) for i in range(3)]
    return driver, members, nodes, ",".join(f"{i}=localhost:{p}" for i, p in enumerate(ingress_ports))


def test_members_with_a_credentials_file_serve_only_the_clients_and_backups_that_name_one(tmp_path, make_driver):
    driver, members, nodes, ingress = members_checking(tmp_path, make_driver, "--credentials-file",
                                                       "# who may connect\nalice-secret\nbob-secret\n")

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


def sbe(template: int, block: bytes, *var: bytes) -> bytes:
    """An Aeron Cluster message (schema 111, version 16): header, fixed block, length-prefixed var fields."""
    return (struct.pack("<HHHH", len(block), template, 111, 16) + block
            + b"".join(struct.pack("<I", len(v)) + v for v in var))


class RawSession:
    """A client that speaks Aeron Cluster's messages itself: what an eavesdropper on the ingress could send."""

    def __init__(self, c: sulis.Client, ingress_ports: list[int]):
        self.response = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
        self.sub = c.add_subscription(self.response, 102)
        self.pubs = [c.add_publication(f"aeron:udp?endpoint=localhost:{p}", 101) for p in ingress_ports]
        self.got: list[bytes] = []

    def send(self, message: bytes) -> None:
        """To every member until each took it (followers redirect a connect and drop an answer)."""
        left = list(self.pubs)

        def all_taken() -> bool:
            left[:] = [p for p in left if p.offer(message) < 0]
            return not left
        await_until(all_taken, 60, "every member's ingress to take the message", interval=0.01)

    def await_answer(self, template: int, correlation_id: int) -> bytes:
        def answered() -> bytes | None:
            self.sub.poll(lambda buffer, _h: self.got.append(bytes(buffer)), 10)
            return next((m for m in self.got if struct.unpack_from("<H", m, 2)[0] == template
                         and correlation_id_of(m) == correlation_id), None)
        return await_until(answered, 60, f"template {template} answering correlation id {correlation_id}",
                           interval=0.01)

    def connect(self, correlation_id: int, principal: bytes) -> tuple[int, bytes]:
        """Asks for a session as ``principal``; returns the session id and the challenge the leader sent."""
        self.send(sbe(SESSION_CONNECT_REQUEST, struct.pack("<qii", correlation_id, 102, CLIENT_PROTOCOL_VERSION),
                      self.response.encode(), principal, b"name=raw"))
        challenge = self.await_answer(CHALLENGE, correlation_id)
        session_id, = struct.unpack_from("<q", challenge, 8 + 8)
        length, = struct.unpack_from("<I", challenge, 8 + 16)
        return session_id, challenge[8 + 16 + 4:8 + 16 + 4 + length]

    def answer(self, correlation_id: int, session_id: int, answer: bytes) -> int:
        """Sends ``answer`` to the session's challenge; returns the code of the SessionEvent it gets."""
        self.send(sbe(CHALLENGE_RESPONSE, struct.pack("<qq", correlation_id, session_id), answer))
        event = self.await_answer(SESSION_EVENT, correlation_id)
        return struct.unpack_from("<i", event, 8 + 28)[0]


def read_up_to(driver_dir: str, session_id: int, position: int) -> bool:
    """A subscriber (the consensus module) in the driver at ``driver_dir`` has read the consensus stream's image of
    session ``session_id`` up to ``position`` (its sub-pos counter)."""
    for c in sulis.CountersReader(driver_dir).counters():
        key = _native.parse_stream_counter_key(c["key"]) if c["type_id"] == COUNTER_TYPE["sub-pos"] else None
        if key and (key["session_id"], key["stream_id"]) == (session_id, CONSENSUS_STREAM) \
                and c["value"] >= position:
            return True
    return False


def correlation_id_of(answer: bytes) -> int:
    """An answer's correlation id: a SessionEvent's second field, every other answer's first."""
    template, = struct.unpack_from("<H", answer, 2)
    return struct.unpack_from("<q", answer, 8 + (8 if template == SESSION_EVENT else 0))[0]


class RawBackup:
    """Aeron's ClusterBackup as far as a member sees it: BackupQuery and ChallengeResponse on one publication to
    the member's consensus endpoint, the answers on its own response channel."""

    def __init__(self, c: sulis.Client, consensus: str, stream: int):
        self.stream = stream
        self.response = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
        self.sub = c.add_subscription(self.response, stream)
        self.pub = c.add_publication(f"aeron:udp?endpoint={consensus}", CONSENSUS_STREAM)
        self.got: list[bytes] = []

    def send(self, message: bytes) -> None:
        await_until(lambda: self.pub.offer(message) > 0, 60, "the member's consensus endpoint to take it",
                    interval=0.01)

    def await_answer(self, correlation_id: int, timeout: float = 60) -> bytes:
        """The next message on the response channel for ``correlation_id``."""
        def answered() -> bytes | None:
            self.sub.poll(lambda buffer, _h: self.got.append(bytes(buffer)), 10)
            m = next((m for m in self.got if correlation_id_of(m) == correlation_id), None)
            if m is not None:
                self.got.remove(m)
            return m
        return await_until(answered, timeout, f"an answer to backup query {correlation_id}", interval=0.01)

    def query(self, correlation_id: int, principal: bytes) -> bytes:
        """Asks as ``principal``: the challenge the member sent. A member in an election hears no query (as
        Aeron's): asked again every 10 s, each time under a new correlation id (``correlation_id`` plus 100,
        200, ...), and only the challenge to the last one is taken, the one the member keeps."""
        deadline = time.monotonic() + KERNEL_STALL
        while True:
            self.send(backup_query(correlation_id, self.response, self.stream, principal))
            try:
                challenge = self.await_answer(correlation_id, 10)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                correlation_id += 100
        assert struct.unpack_from("<H", challenge, 2)[0] == CHALLENGE, challenge[:16]
        assert struct.unpack_from("<q", challenge, 8 + 8)[0] == -1, "a backup query's session id"
        length, = struct.unpack_from("<I", challenge, 8 + 16)
        return challenge[8 + 16 + 4:8 + 16 + 4 + length]

    def answer(self, correlation_id: int, answer: bytes) -> bytes:
        """Answers the challenge waiting with a new ``correlation_id``: what the member then sends under that
        id (Aeron's ClusterBackup waits on the answer's correlation id)."""
        self.send(sbe(CHALLENGE_RESPONSE, struct.pack("<qq", correlation_id, -1), answer))
        return self.await_answer(correlation_id)

    def close(self) -> None:
        self.pub.close()
        self.sub.close()


def test_members_with_client_keys_let_in_only_the_holder_of_a_secret_that_never_crosses_the_wire(tmp_path,
                                                                                                 make_driver):
    secret, bob_secret, backup_secret = (os.urandom(24).hex().encode() for _ in range(3))
    driver, members, nodes, ingress = members_checking(
        tmp_path, make_driver, "--client-keys-file",
        f"# principal secret\nalice {secret.decode()}\nbob {bob_secret.decode()}\nbackup {backup_secret.decode()}\n")
    ingress_ports = [int(e.rsplit(":", 1)[1]) for e in ingress.split(",")]

    def client(principal: bytes, secret: bytes | None) -> ClusterClient:
        return ClusterClient(driver.dir, ingress, f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                             message_timeout=60.0, credentials=principal, secret=secret)

    try:
        for m in nodes:
            m.start()
        with client(b"alice", secret) as alice:
            await_until(lambda: alice.offer(b"hello") > 0, 30, "the ingress to take hello")
            got: list[bytes] = []
            await_until(lambda: alice.poll_egress(lambda p, t: got.append(p)) >= 0 and got, 30, "the echo")
            assert got == [b"hello"]
        for principal, key in ((b"alice", b"not alice's secret at all"), (b"bob", secret), (b"mallory", secret)):
            with pytest.raises(ClusterError, match="AUTHENTICATION_REJECTED"):
                client(principal, key)
        with pytest.raises(ClusterError, match="no secret: pass secret="):
            client(b"alice", None)

        # The answer is the HMAC of the challenge and the response channel the connect named (computed here
        # with Python's hmac). An eavesdropper who saw it gets no other session with it; nor does one who
        # relays the challenge of its own connect to alice's client, which answers for its own channel.
        with sulis.Client(dir=driver.dir) as c:
            raw = RawSession(c, ingress_ports)
            first, challenge = raw.connect(2001, b"alice")
            assert challenge.startswith(b"sulis-hmac-sha256:") and len(challenge) == 18 + 32
            seen = hmac.new(secret, challenge + raw.response.encode(), hashlib.sha256).digest()
            assert raw.answer(2002, first, seen) == OK
            second, other = raw.connect(2003, b"alice")
            assert other != challenge and second != first
            assert raw.answer(2004, second, seen) == AUTHENTICATION_REJECTED
            third, relayed = raw.connect(2005, b"alice")
            alices_channel = b"aeron:udp?endpoint=localhost:1"
            tricked = hmac.new(secret, relayed + alices_channel, hashlib.sha256).digest()
            assert raw.answer(2006, third, tricked) == AUTHENTICATION_REJECTED

            # A ClusterBackup is challenged too (its query's session id is -1, as in Aeron) and answers on the
            # consensus stream, as Aeron's ClusterBackup answers with its CredentialsSupplier. The member takes
            # the answer only from the image its query came on: a stranger's wrong answer from another
            # publication, read by the member before the backup's own (its subscriber position says so), spends
            # nothing; nor does a stranger's query naming the same principal from there (the member keeps one
            # waiting query per image); the backup's own answer then gets the BackupResponse.
            consensus = members.split("|")[0].split(",")[2]
            backup = RawBackup(c, consensus, 9)
            # Its own session (an exclusive publication), so its own image at the member.
            stranger = c.add_exclusive_publication(f"aeron:udp?endpoint={consensus}", CONSENSUS_STREAM)
            try:
                challenge = backup.query(3001, b"backup")
                assert challenge.startswith(b"sulis-hmac-sha256:")
                for forged in (sbe(CHALLENGE_RESPONSE, struct.pack("<qq", 1, -1), bytes(32)),
                               backup_query(2, f"aeron:udp?endpoint=localhost:{free_udp_port()}", 9, b"backup")):
                    await_until(lambda forged=forged: stranger.offer(forged) > 0, 60, "the stranger's message to go")
                await_until(lambda: read_up_to(nodes[0].driver_dir, stranger.session_id, stranger.position), 60,
                            "member 0 to read the stranger's answer and query")
                right = hmac.new(backup_secret, challenge + backup.response.encode(), hashlib.sha256).digest()
                response = backup.answer(3002, right)
                assert struct.unpack_from("<H", response, 2)[0] == BACKUP_RESPONSE, response[:16]
                # Seen on the wire, that answer opens no other query; nor does another principal's secret.
                backup.query(3003, b"backup")
                refused = backup.answer(3004, right)
                assert struct.unpack_from("<H", refused, 2)[0] == SESSION_EVENT, refused[:16]
                assert struct.unpack_from("<i", refused, 8 + 28)[0] == AUTHENTICATION_REJECTED
                other = backup.query(3005, b"backup")
                wrong_key = hmac.new(secret, other + backup.response.encode(), hashlib.sha256).digest()
                refused = backup.answer(3006, wrong_key)
                assert struct.unpack_from("<i", refused, 8 + 28)[0] == AUTHENTICATION_REJECTED
            finally:
                stranger.close()
                backup.close()
        assert any("challenges a backup query" in m.stderr() for m in nodes)
        for m in nodes:
            for s in (secret, bob_secret, backup_secret):
                assert s.decode() not in m.stderr()
    finally:
        for m in nodes:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait(timeout=60)
