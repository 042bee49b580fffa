"""Self-tests of tests/netutil with plain UDP sockets (no sulis UDP needed).

Namespace and nftables tests skip unless root with a working ``ip netns``
(and ``nft``); the relay tests run anywhere on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
import time
from collections import Counter

import pytest

from conftest import await_until
from netutil import (
    Impairment,
    LossyRelay,
    NetnsPair,
    RelayProcess,
    cleanup_stale,
    list_netns,
    netns_available,
    udp_socket_in,
)

SEQ = struct.Struct("<I")


class Sink:
    """Drains a UDP socket on a thread: ``items`` is the list of (datagram, source) received."""

    def __init__(self, sock: socket.socket, echo: bool = False):
        self.sock = sock
        self.echo = echo
        self.items: list[tuple[bytes, tuple]] = []
        self._stop = False
        sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            try:
                data, src = self.sock.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.items.append((data, src))
            if self.echo:
                self.sock.sendto(data, src)

    @property
    def address(self):
        return self.sock.getsockname()

    def seqs(self) -> list[int]:
        return [SEQ.unpack_from(d)[0] for d, _ in self.items]

    def close(self):
        self._stop = True
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def sinks():
    """Factory ``sinks(sock, echo=False)``; every sink (and its socket) is closed on teardown."""
    made: list[Sink] = []

    def make(sock, echo=False):
        s = Sink(sock, echo)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def loopback_socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    return s


def send_paced(sock, dest, count, progress, burst=50, start=0, payload=b"", timeout=10.0):
    """Sends datagrams ``start..start+count`` (a u32 sequence number then ``payload``) in bursts,
    waiting before each burst until ``progress()`` has reached what was sent, so that no
    socket buffer overflows and every loss is the one under test."""
    for first in range(start, start + count, burst):
        last = min(first + burst, start + count)
        for seq in range(first, last):
            sock.sendto(SEQ.pack(seq) + payload, dest)
        await_until(lambda last=last: progress() >= last - start, timeout=timeout,
                    what=f"{last - start} datagrams through")


# -- network namespaces -------------------------------------------------------------


def test_netns_pair_exchanges_datagrams(netns_pair, sinks):
    pair = netns_pair
    assert {pair.ns_a, pair.ns_b} <= set(list_netns())
    addrs = json.loads(pair.run("b", "ip", "-j", "addr", "show", "dev", pair.dev).stdout)
    assert pair.addr_b in [a["local"] for a in addrs[0]["addr_info"]]
    assert "UP" in addrs[0]["flags"]

    echo = sinks(pair.udp_socket("b", 0), echo=True)
    a = pair.udp_socket("a", 0)
    try:
        a.settimeout(5)
        for i in range(10):
            a.sendto(SEQ.pack(i), echo.address)
            data, src = a.recvfrom(100)
            assert (SEQ.unpack(data)[0], src) == (i, echo.address)
        assert {src for _, src in echo.items} == {a.getsockname()}
        assert a.getsockname()[0] == pair.addr_a
    finally:
        a.close()


def test_netns_subprocess_and_isolation(netns_pair):
    pair = netns_pair
    # A Python process inside b echoes one datagram.
    code = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.bind((sys.argv[1], 0))\n"
        "print(s.getsockname()[1], flush=True)\n"
        "d, src = s.recvfrom(100)\n"
        "s.sendto(d.upper(), src)\n"
    )
    proc = pair.python("b", code, pair.addr_b, stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    a = pair.udp_socket("a", None)
    try:
        a.settimeout(5)
        a.sendto(b"hello", (pair.addr_b, port))
        assert a.recvfrom(100) == (b"HELLO", (pair.addr_b, port))
    finally:
        a.close()
    assert proc.wait(timeout=5) == 0
    # The veth addresses exist only inside the pair.
    root = {a["local"] for link in json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True,
                                                             check=True).stdout) for a in link.get("addr_info", [])}
    assert pair.addr_a not in root and pair.addr_b not in root


def test_netns_teardown_kills_processes_and_removes_stale():
    ok, reason = netns_available()
    if not ok:
        pytest.skip(reason)
    prefix = "sulis-nt-selftest-"
    # A leftover of a "crashed run": a namespace whose owner pid is dead.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"{prefix}{dead.pid}-0a"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    assert stale in list_netns()

    with pytest.raises(RuntimeError, match="boom"):
        with NetnsPair(prefix=prefix) as pair:
            assert stale not in list_netns()  # removed by the constructor
            sleeper = pair.popen("a", ["sleep", "60"])
            raise RuntimeError("boom")
    assert sleeper.poll() is not None
    assert not [ns for ns in list_netns() if ns.startswith(prefix)]
    assert cleanup_stale(prefix) == []


# -- nftables random loss ---------------------------------------------------------------


def test_nft_random_input_loss(netns_pair, nft_loss, sinks):
    pair = netns_pair
    rx = sinks(pair.udp_socket("b", 0))
    port = rx.address[1]
    loss = nft_loss(pair.ns_b, 30, hook="input", dport=port)
    tx = pair.udp_socket("a", 0)
    try:
        n = 2000
        send_paced(tx, rx.address, n, lambda: len(rx.items) + loss.dropped(), burst=100, payload=b"x" * 64)
        dropped = loss.dropped()
        assert loss.seen() == n
        assert len(rx.items) == n - dropped
        assert 450 <= dropped <= 750, f"{dropped} of {n} dropped at 30%"
        assert loss.counters() == {"input": {"seen": n, "dropped": dropped}}

        # Other ports are untouched.
        other = sinks(pair.udp_socket("b", 0))
        send_paced(tx, other.address, 200, lambda: len(other.items))
        assert loss.dropped() == dropped

        # The rate can change in place; the counters carry on.
        loss.set_percent(0)
        before = len(rx.items)
        send_paced(tx, rx.address, 200, lambda: len(rx.items) - before)
        assert loss.dropped() == dropped and loss.seen() == n + 200
        loss.set_percent(100)
        send_paced(tx, rx.address, 100, lambda: loss.dropped() - dropped)
        assert len(rx.items) == before + 200
    finally:
        tx.close()


def test_nft_output_loss_fails_the_send(netns_pair, nft_loss, sinks):
    # Packets dropped on the output hook make sendto() fail with EPERM: a sender
    # sees the loss. To lose datagrams silently, drop on the receiver's input hook.
    pair = netns_pair
    rx = sinks(pair.udp_socket("b", 0))
    loss = nft_loss(pair.ns_a, 50, hook="output", dport=rx.address[1])
    tx = pair.udp_socket("a", 0)
    failed = 0
    try:
        for i in range(400):
            try:
                tx.sendto(SEQ.pack(i), rx.address)
            except PermissionError:
                failed += 1
        await_until(lambda: len(rx.items) == 400 - failed, what="the datagrams that were sent")
    finally:
        tx.close()
    assert loss.dropped("output") == failed
    assert 120 <= failed <= 280


def test_nft_missing_skips(monkeypatch):
    import netutil.nft as nftmod

    monkeypatch.setattr(nftmod, "nft_path", lambda: None)
    ok, reason = nftmod.nft_available()
    assert not ok and "apt-get install -y nftables" in reason
    with pytest.raises(pytest.skip.Exception, match="nftables"):
        nftmod.NftLoss(None, 10)


# -- the lossy relay ----------------------------------------------------------------------


def drained(relay, target, client, echo: bool):
    """Progress for ``send_paced`` through ``relay``: a burst counts as through only once every hop has
    emptied its socket: the relay received it, the target took all that was forwarded and (echoing) the
    client all the replies forwarded back. Pacing on the relay alone let a slow sink's receive buffer
    overflow under load, a loss no impairment asked for (CI, twice)."""
    st = relay.stats

    def through() -> int:
        s = st()
        if len(target.items) < s["forward"].forwarded:
            return -1
        if echo and (s["backward"].received < len(target.items) or len(client.items) < s["backward"].forwarded):
            return -1
        return s["forward"].received
    return through


def relay_run(make_relay, sinks, n=1000, seed=42, echo=False, **impairments):
    """Sends ``n`` numbered datagrams through a fresh relay to a sink; returns (relay, sink, client)."""
    target = sinks(loopback_socket(), echo=echo)
    relay = make_relay(target.address, seed=seed, **impairments)
    client = sinks(loopback_socket())
    send_paced(client.sock, relay.address, n, drained(relay, target, client, echo))
    await_until(lambda: relay.held() == 0, what="held-back datagrams to be released")
    fwd = relay.forward_stats
    await_until(lambda: len(target.items) == fwd.forwarded, what="forwarded datagrams to arrive")
    return relay, target, client


def test_relay_forwards_and_relays_replies(make_relay, sinks):
    relay, target, client = relay_run(make_relay, sinks, n=300, echo=True)
    await_until(lambda: len(client.items) == 300, what="replies")
    assert target.seqs() == list(range(300))
    assert client.seqs() == list(range(300))
    # The target sees the relay's upstream socket; the client sees the relay's listen address.
    up = relay.upstream_address(client.address)
    assert {src for _, src in target.items} == {up}
    assert {src for _, src in client.items} == {relay.address}
    assert relay.clients == [client.address]
    s = relay.stats()
    assert (s["forward"].received, s["forward"].forwarded, s["backward"].received, s["backward"].forwarded) == (
        300, 300, 300, 300)


def test_relay_drop_is_seeded(make_relay, sinks):
    _, t1, _ = relay_run(make_relay, sinks, forward=Impairment(drop=0.3), seed=7)
    r2, t2, _ = relay_run(make_relay, sinks, forward=Impairment(drop=0.3), seed=7)
    _, t3, _ = relay_run(make_relay, sinks, forward=Impairment(drop=0.3), seed=8)
    fwd = r2.forward_stats
    assert t1.seqs() == t2.seqs() != t3.seqs()
    assert t2.seqs() == sorted(t2.seqs())
    assert fwd.dropped == 1000 - len(t2.items) and fwd.forwarded == len(t2.items)
    assert 230 <= fwd.dropped <= 370
    assert fwd.duplicated == fwd.reordered == 0


def test_relay_duplicates(make_relay, sinks):
    relay, target, _ = relay_run(make_relay, sinks, forward=Impairment(duplicate=0.2))
    fwd = relay.forward_stats
    counts = Counter(target.seqs())
    assert set(counts) == set(range(1000))
    assert sum(1 for c in counts.values() if c == 2) == fwd.duplicated
    assert max(counts.values()) == 2
    assert len(target.items) == fwd.forwarded == 1000 + fwd.duplicated
    assert 140 <= fwd.duplicated <= 260


def test_relay_reorders(make_relay, sinks):
    k = 3
    relay, target, _ = relay_run(make_relay, sinks, forward=Impairment(reorder=0.1, reorder_after=k,
                                                                       reorder_delay=0.2))
    fwd = relay.forward_stats
    seqs = target.seqs()
    assert sorted(seqs) == list(range(1000))
    assert 50 <= fwd.reordered <= 150
    late = [s for s in range(1000) if seqs.index(s) > s]  # arrived after a later datagram
    assert late and len(late) <= fwd.reordered
    # A held-back datagram is overtaken by at most k others (fewer when its delay runs out first).
    assert max(seqs.index(s) - s for s in range(1000)) <= k


def test_relay_reorder_released_by_delay(make_relay, sinks):
    target = sinks(loopback_socket())
    relay = make_relay(target.address, forward=Impairment(reorder=1.0, reorder_after=1000, reorder_delay=0.1))
    client = loopback_socket()
    try:
        start = time.monotonic()
        for i in range(3):
            client.sendto(SEQ.pack(i), relay.address)
        await_until(lambda: len(target.items) == 3, what="held datagrams to be released")
        assert time.monotonic() - start >= 0.09
        assert relay.forward_stats.reordered == 3
    finally:
        client.close()


def test_relay_seeded_combination(make_relay, sinks):
    imp = Impairment(drop=0.1, duplicate=0.1, reorder=0.1, reorder_after=2)
    r1, t1, _ = relay_run(make_relay, sinks, forward=imp, seed=3)
    r2, t2, _ = relay_run(make_relay, sinks, forward=imp, seed=3)
    assert r1.forward_stats == r2.forward_stats
    assert Counter(t1.seqs()) == Counter(t2.seqs())


def test_relay_backward_direction(make_relay, sinks):
    relay, target, client = relay_run(make_relay, sinks, n=1000, echo=True,
                                      backward=Impairment(drop=0.5))
    s = relay.stats()
    assert s["forward"].forwarded == 1000 and s["forward"].dropped == 0
    await_until(lambda: relay.backward_stats.received == 1000, what="all replies at the relay")
    back = relay.backward_stats
    await_until(lambda: len(client.items) == back.forwarded, what="replies at the client")
    assert back.dropped + back.forwarded == 1000
    assert 400 <= back.dropped <= 600


def test_relay_filter_and_reconfigure(make_relay, sinks):
    target = sinks(loopback_socket())
    relay = make_relay(target.address, forward=Impairment(drop=1.0, filter=lambda d: d[4:5] == b"D"))
    client = loopback_socket()
    try:
        for i in range(100):
            client.sendto(SEQ.pack(i) + (b"D" if i % 2 else b"C"), relay.address)
        await_until(lambda: relay.forward_stats.received == 100, what="datagrams at the relay")
        await_until(lambda: len(target.items) == 50, what="the unfiltered half")
        assert target.seqs() == list(range(0, 100, 2))
        relay.configure(forward=Impairment())  # the outage ends
        client.sendto(SEQ.pack(1000) + b"D", relay.address)
        await_until(lambda: len(target.items) == 51, what="a datagram after reconfiguring")
    finally:
        client.close()


def test_relay_several_clients(make_relay, sinks):
    target = sinks(loopback_socket(), echo=True)
    relay = make_relay(target.address)
    clients = [sinks(loopback_socket()) for _ in range(3)]
    for i, c in enumerate(clients):
        for j in range(10):
            c.sock.sendto(SEQ.pack(i * 100 + j), relay.address)
    for i, c in enumerate(clients):
        await_until(lambda c=c: len(c.items) == 10, what=f"replies of client {i}")
        assert c.seqs() == [i * 100 + j for j in range(10)]
    assert sorted(relay.clients) == sorted(c.address for c in clients)
    assert len({relay.upstream_address(c.address) for c in clients}) == 3


def test_relay_close_is_clean():
    target = loopback_socket()
    relay = LossyRelay(target.getsockname(), forward=Impairment(reorder=1.0, reorder_delay=60))
    client = loopback_socket()
    try:
        client.sendto(b"held", relay.address)
        await_until(lambda: relay.held() == 1, what="a held datagram")
        threads = threading.active_count()
        relay.close()
        relay.close()
        assert threading.active_count() == threads - 1
        rebind = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rebind.bind(relay.address)  # the listen port is free again
        rebind.close()
    finally:
        client.close()
        target.close()


def test_relay_inside_namespaces(netns_pair, make_relay, sinks):
    # sender (a, loopback) -> relay (a) -> veth -> receiver (b), replies back the same way.
    pair = netns_pair
    target = sinks(pair.udp_socket("b", 0), echo=True)
    relay = make_relay(target.address, netns=pair.ns_a, forward=Impairment(drop=0.2), seed=1)
    client = sinks(udp_socket_in(pair.ns_a, ("127.0.0.1", 0)))
    send_paced(client.sock, relay.address, 500, drained(relay, target, client, echo=True))
    fwd = relay.forward_stats
    await_until(lambda: len(client.items) == fwd.forwarded, what="echoes through the relay")
    assert {src[0] for _, src in target.items} == {pair.addr_a}
    assert client.seqs() == target.seqs() and len(client.items) == 500 - fwd.dropped
    assert fwd.dropped > 0


def test_relay_latency_delays_every_datagram_and_keeps_order(make_relay, sinks):
    target = sinks(loopback_socket())
    relay = make_relay(target.address, forward=Impairment(latency=0.05))
    client = loopback_socket()
    try:
        start = time.monotonic()
        for i in range(20):
            client.sendto(SEQ.pack(i), relay.address)
        await_until(lambda: len(target.items) == 20, what="delayed datagrams")
        assert time.monotonic() - start >= 0.045
        assert target.seqs() == list(range(20))
    finally:
        client.close()


def test_relay_process_makes_the_same_seeded_decisions_as_the_thread(make_relay, sinks):
    imp = Impairment(drop=0.1, duplicate=0.1)
    r1, t1, _ = relay_run(make_relay, sinks, forward=imp, seed=3)
    procs: list[RelayProcess] = []

    def make_process(*args, **kwargs):
        procs.append(RelayProcess(*args, **kwargs))
        return procs[-1]

    try:
        r2, t2, _ = relay_run(make_process, sinks, forward=imp, seed=3)
        assert r2.forward_stats == r1.forward_stats
        assert Counter(t2.seqs()) == Counter(t1.seqs())
        assert r2.held() == 0
    finally:
        for p in procs:
            p.close()
    with pytest.raises(ValueError, match="filter"):
        RelayProcess(t1.address, forward=Impairment(filter=lambda d: True))


def test_relay_process_takes_a_new_impairment_while_it_runs(sinks):
    target = sinks(loopback_socket())
    client = loopback_socket()
    with RelayProcess(target.address, forward=Impairment(drop=1.0)) as relay:
        try:
            for i in range(10):
                client.sendto(SEQ.pack(i), relay.address)
            await_until(lambda: relay.forward_stats.received == 10, what="datagrams at the relay")
            assert relay.forward_stats.dropped == 10 and target.items == []
            relay.configure(forward=Impairment(latency=0.2))  # the outage ends; a long path begins
            sent = time.monotonic()
            client.sendto(SEQ.pack(10), relay.address)
            await_until(lambda: target.seqs() == [10], what="a datagram after reconfiguring")
            assert time.monotonic() - sent >= 0.2
            with pytest.raises(ValueError, match="filter"):
                relay.configure(backward=Impairment(filter=lambda d: True))
        finally:
            client.close()


def test_netns_hosts_on_a_bridge_each_with_a_private_directory_and_one_killed(netns_hosts, tmp_path):
    """Three hosts on one bridge: each reaches the others over UDP, each sees only its own private
    directory (as /dev/shm on separate machines), and a killed host's processes are gone and it is off the
    network."""
    import os
    import sys

    private = f"/dev/shm/sulis-nethosts-{os.getpid()}"
    hosts = netns_hosts("a", "b", "c", private=private)
    for name in "abc":
        assert hosts.popen(name, ["sh", "-c", f"echo {name} > {private}/who"]).wait(10) == 0
    for name in "abc":
        proc = hosts.popen(name, ["cat", f"{private}/who"], stdout=subprocess.PIPE, text=True)
        assert proc.communicate(timeout=10)[0].strip() == name
    assert os.listdir(private) == [], "the root namespace sees none of the hosts' files"

    receive = ("import socket, sys\n"
               "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 9100)); s.settimeout(30)\n"
               "print('bound', flush=True)\n"
               "print(s.recvfrom(100)[1][0], flush=True)\n")
    send = "import socket, sys\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', (sys.argv[1], 9100))\n"
    for src, dst in (("a", "b"), ("b", "c"), ("c", "a")):
        receiver = hosts.popen(dst, [sys.executable, "-c", receive, hosts.addr(dst)], stdout=subprocess.PIPE, text=True)
        # Sent once the receiver's socket is bound (a datagram sent before is lost): its first line says so.
        assert receiver.stdout.readline().strip() == "bound", f"the receiver on {dst} did not bind"
        hosts.popen(src, [sys.executable, "-c", send, hosts.addr(dst)]).wait(30)
        assert receiver.communicate(timeout=30)[0].strip() == hosts.addr(src)

    sleeper = hosts.popen("c", ["sleep", "600"])
    hosts.kill_host("c")
    assert sleeper.poll() is not None
    link = subprocess.run(["ip", "-n", hosts.ns("c"), "-br", "link", "show", "sv0"], capture_output=True, text=True)
    assert "DOWN" in link.stdout, link.stdout
