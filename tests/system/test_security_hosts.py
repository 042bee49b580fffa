"""Transport security across hosts: a publisher (a) and a subscriber (b) hold one keyring, a third host
(x) on the same bridge holds none. While a multicast stream (encrypted) and a unicast stream
(authenticated) flow from a to b, x hears every multicast datagram and sends each back twice, sends
setups and data frames for session id after session id to both endpoints, and grants the publisher a
huge window with forged status messages. Nothing of it reaches a subscriber: both streams arrive whole,
in order, each message once, from the publisher's sessions only; the counters on both hosts say what
was dropped, and b's error log names x. A three-member cluster on three hosts whose drivers seal
everything takes no vote, append or commit position from a host without the key: its members stay in
their term and a client on a fourth host (with the key) is served before and after, while a fifth host
sends them raw forged datagrams and tries its own driver's publications."""

from __future__ import annotations

import os
import struct
import time

import sulis
from clusterprocs import JOURNAL_SERVICE, Member
from conftest import await_until, run_cli
from netutil import exec_prefix, require_netns, udp_socket_in
from sites import STARTED_S, STREAM, Site, done
from sulis.cluster import ClusterClient

GROUP = "239.255.91.1"
SC = sulis.SystemCounter


def system(site: Site, counter: sulis.SystemCounter) -> int:
    return sulis.CountersReader(site.dir).value(counter)


def test_a_third_host_without_the_key_gets_nothing_into_a_secured_stream(netns_hosts, spawn, tmp_path):
    require_netns()
    ring = tmp_path / "keyring"
    made = run_cli("keyring", "add", ring)
    assert made.returncode == 0 and made.stdout.strip() == "1", made.stderr
    assert os.stat(ring).st_mode & 0o777 == 0o600
    hosts = netns_hosts("a", "b", "x")
    subnet = hosts.addr("a").rsplit(".", 1)[0] + ".0/24"
    s = {n: Site(hosts, spawn, n, keyring_file=str(ring)) for n in ("a", "b")}
    multicast = f"aeron:udp?endpoint={GROUP}:42001|interface={subnet}|security=encrypt"
    unicast_endpoint = f"{hosts.addr('b')}:42003"
    unicast = f"aeron:udp?endpoint={unicast_endpoint}|security=auth"

    attacker = spawn("attack", GROUP, 42001, unicast_endpoint, hosts.addr("x"), STREAM,
                     prefix=exec_prefix(hosts.ns("x")), stdin=True)
    assert attacker.read(timeout=STARTED_S)["ready"]
    count = 20_000
    consumers = [s["b"].consume(ch, count) for ch in (multicast, unicast)]
    producers = [s["a"].produce(ch, count, seed=i + 1) for i, ch in enumerate((multicast, unicast))]
    sessions = []
    for p in producers:
        ready = p.read(timeout=STARTED_S)
        assert ready["ready"], ready
        sessions.append(ready["session_id"])
    for p in producers:
        assert done(p, 180)["sent"] == count
    for c, session in zip(consumers, sessions, strict=True):
        result = done(c, 180)
        # The consumer checks each message: its producer, sequence and CRC; a forged or replayed one fails it.
        assert result["received"] == count, result
        assert result["images"] == [session], f"an image only of the publisher's session: {result}"
    attacker.send("stop")
    attack = done(attacker, 60)
    assert attack["captured"] > 100, attack
    assert attack["sealed"] == attack["captured"], f"every datagram on the wire is sealed: {attack}"
    assert attack["replayed"] > 100 and attack["spoofed"] > 1000, attack

    b, a = s["b"], s["a"]
    print(f"attacker: {attack}; dropped at b: unsealed {system(b, SC.SECURITY_UNSEALED_DROPPED)}, replayed or stale "
          f"{system(b, SC.SECURITY_REPLAYS_DROPPED)}; at a: unsealed {system(a, SC.SECURITY_UNSEALED_DROPPED)}")
    assert system(b, SC.SECURITY_UNSEALED_DROPPED) > 0, "the guesses were dropped at b"
    assert system(b, SC.SECURITY_REPLAYS_DROPPED) > 0, "the replays were dropped at b"
    assert system(a, SC.SECURITY_UNSEALED_DROPPED) > 0, "the forged status messages were dropped at a"
    assert system(b, SC.SECURITY_FRAMES_DROPPED) >= (system(b, SC.SECURITY_UNSEALED_DROPPED)
                                                      + system(b, SC.SECURITY_REPLAYS_DROPPED))
    assert system(b, SC.SECURITY_AUTH_FAILURES) == 0, "x never had a key to fail with"

    def noted(reason: str) -> bool:  # each source and reason is noted within a second (or as the socket closes)
        return any(reason in text and f"from {hosts.addr('x')}:" in text for _, _, _, text in sulis.read_errors(b.dir))

    await_until(lambda: noted("unsealed frames") and noted("replayed frames"), 30, "b's notes of x's frames")


CONSENSUS_STREAM, LOG_STREAM = 108, 100


def request_vote(candidate_term: int, candidate: int) -> bytes:
    """Aeron Cluster's RequestVote (template 51): a candidate far ahead asks for every vote."""
    return struct.pack("<HHHH", 32, 51, 111, 16) + struct.pack("<qqqii", candidate_term - 1, 1 << 40,
                                                                candidate_term, candidate, 0x010000)


def commit_position(term: int, position: int, leader: int) -> bytes:
    """Aeron Cluster's CommitPosition (template 55): a forged leader announcing a commit far ahead."""
    return struct.pack("<HHHH", 20, 55, 111, 16) + struct.pack("<qqi", term, position, leader)


def setup_frame(session: int, stream: int) -> bytes:
    """Aeron's SETUP frame (type 0x05) for a 64 KiB-term session."""
    return struct.pack("<iBBHiiiiiiii", 40, 0, 0, 0x05, 0, session, stream, 0, 0, 1 << 16, 1408, 0)


def data_frame(session: int, stream: int, term_offset: int, body: bytes) -> bytes:
    """Aeron's DATA frame (type 0x01, begin and end flags) holding ``body``."""
    return struct.pack("<iBBHiiiiq", 32 + len(body), 0, 0xC0, 0x01, term_offset, session, stream, 0, 0) + body


def test_a_host_without_the_key_moves_no_member_of_a_sealed_cluster_across_hosts(netns_hosts, spawn, tmp_path):
    require_netns()
    ring = tmp_path / "keyring"
    assert run_cli("keyring", "add", ring).returncode == 0
    hosts = netns_hosts("m0", "m1", "m2", "c", "x")
    addr = [hosts.addr(f"m{i}") for i in range(3)]
    # A host each: the same ports on every member (ingress, consensus, log, catch-up, archive).
    members = "|".join(f"{i},{a}:9010,{a}:9020,{a}:9030,{a}:0,{a}:9040" for i, a in enumerate(addr))
    ingress = ",".join(f"{i}={a}:9010" for i, a in enumerate(addr))
    (tmp_path / "journal_service.py").write_text(JOURNAL_SERVICE)
    secured = {"SULIS_SECURITY": "encrypt", "SULIS_KEYRING_FILE": str(ring)}
    nodes = [Member(tmp_path, i, members, env=secured) for i in range(3)]
    for i, m in enumerate(nodes):
        m.cmd = exec_prefix(hosts.ns(f"m{i}")) + m.cmd
    client_site = Site(hosts, spawn, "c", security="encrypt", keyring_file=str(ring))
    stranger = Site(hosts, spawn, "x")  # no keyring: its frames are plain Aeron
    try:
        for m in nodes:
            m.start()
        with ClusterClient(client_site.dir, ingress, f"aeron:udp?endpoint={hosts.addr('c')}:9050",
                           message_timeout=60.0) as c:
            got: list[bytes] = []
            await_until(lambda: c.offer(b"before") > 0, 30, "the ingress to take a message")
            await_until(lambda: c.poll_egress(lambda p, t: got.append(p)) >= 0 and b"before" in got, 30,
                        "the echo before the attack")
            terms = {m.id: m.counters()["cluster-leadership-term-id"] for m in nodes}
            before = [sulis.CountersReader(m.driver_dir).value(SC.SECURITY_UNSEALED_DROPPED) for m in nodes]
            # Raw datagrams from x, as a forger writes them: a setup, then data frames carrying votes for a
            # term far ahead and commit positions from a false leader, to every member's consensus and log
            # endpoints; the client's session kept alive meanwhile.
            raw = udp_socket_in(hosts.ns("x"))
            sent = 0
            try:
                for n in range(100):
                    for a in addr:
                        for port, stream in ((9020, CONSENSUS_STREAM), (9030, LOG_STREAM)):
                            for frame in (setup_frame(0x5eed, stream),
                                          data_frame(0x5eed, stream, n * 64, request_vote(terms[0] + 100, 2)),
                                          data_frame(0x5eed, stream, n * 64, commit_position(terms[0] + 100,
                                                                                             1 << 40, 2))):
                                raw.sendto(frame, (a, port))
                                sent += port == 9020
                    c.send_keep_alive()
                    c.poll_egress(lambda p, t: None)
                    time.sleep(0.005)
            finally:
                raw.close()
            # Counted at the consensus endpoint, which every member binds (a leader binds no log endpoint
            # of its own: what goes there is refused by its kernel, uncounted).
            per_member = sent // len(nodes)
            # And a stranger's own driver: its publications' setups go unanswered, so they never connect.
            with sulis.Client(dir=stranger.dir) as s:
                forged = [s.add_publication(f"aeron:udp?endpoint={a}:{port}", stream)
                          for a in addr for port, stream in ((9020, CONSENSUS_STREAM), (9030, LOG_STREAM))]
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline:
                    c.send_keep_alive()
                    c.poll_egress(lambda p, t: None)
                    time.sleep(0.01)
                assert not any(p.is_connected for p in forged), \
                    "no member answered the stranger's setups: its publications never connected"
            def unsealed_dropped() -> list[int]:
                return [sulis.CountersReader(m.driver_dir).value(SC.SECURITY_UNSEALED_DROPPED) for m in nodes]
            await_until(lambda: all(d >= b + per_member for d, b in zip(unsealed_dropped(), before, strict=True)),
                        30, lambda: f"each member to drop the {per_member} forged datagrams sent to its consensus "
                                    f"endpoint: {unsealed_dropped()} (before: {before})")
            await_until(lambda: all(m.counters().get("cluster-leadership-term-id") == terms[m.id] for m in nodes),
                        10, "every member in the term it was in")
            await_until(lambda: c.offer(b"after") > 0, 30, "the ingress to take a message after the attack")
            await_until(lambda: c.poll_egress(lambda p, t: got.append(p)) >= 0 and b"after" in got, 30,
                        "the echo after the attack")
        dropped = [sulis.CountersReader(m.driver_dir).value(SC.SECURITY_UNSEALED_DROPPED) for m in nodes]
        assert all(d > 0 for d in dropped), f"each member dropped the stranger's setups: {dropped}"
        assert all(m.counters()["cluster-leadership-term-id"] == terms[m.id] for m in nodes), "no new term"
        await_until(lambda: all(m.journal_lines() == ["before", "after"] for m in nodes), 30,
                    lambda: f"every member's service to apply both messages once: {[m.journal_lines() for m in nodes]}")
    finally:
        for m in nodes:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait(timeout=60)
