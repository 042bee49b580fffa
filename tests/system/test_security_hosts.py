"""Transport security across hosts: a publisher (a) and a subscriber (b) hold one keyring, a third host
(x) on the same bridge holds none. While a multicast stream (encrypted) and a unicast stream
(authenticated) flow from a to b, x hears every multicast datagram and sends each back twice, sends
setups and data frames for session id after session id to both endpoints, and grants the publisher a
huge window with forged status messages. Nothing of it reaches a subscriber: both streams arrive whole,
in order, each message once, from the publisher's sessions only; the counters on both hosts say what
was dropped, and b's error log names x."""

from __future__ import annotations

import os

import sulis
from conftest import await_until, run_cli
from netutil import exec_prefix, require_netns
from sites import STARTED_S, STREAM, Site, done

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
