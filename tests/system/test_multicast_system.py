"""Multicast across hosts: one publisher, several receivers on one bridge (network namespaces the
test makes), each host with its own media driver process. The channel names the hosts' subnet as
its interface (``interface=10.78.N.0/24``), so one channel string serves every host.

Shown here: every receiver gets the whole stream in order; with ``fc=min`` nobody loses anything
while one receiver loses 10 % of its datagrams (nftables); ``fc=max`` lets the fast receivers go on
while one stops reading, ``fc=min`` holds the stream for it; a receiver whose host dies stops holding
a ``min`` stream after the flow-control receiver timeout; ``tagged`` waits for its group only; the
flow control's receivers are counters tools can read."""

from __future__ import annotations

import json
import signal
import time

import pytest

import sulis
from conftest import await_until, run_cli
from sites import STARTED_S, STREAM, done, sites, tally

GROUP = "239.255.90.1"


def channel(subnet: str, port: int, params: str = "") -> str:
    return f"aeron:udp?endpoint={GROUP}:{port}|interface={subnet}" + (f"|{params}" if params else "")


def test_a_min_multicast_stream_reaches_every_receiver_whole_and_in_order(netns_hosts, spawn):
    hosts, subnet, s = sites(netns_hosts, spawn, "a", "b", "c", "d")
    ch = channel(subnet, 41_001, "fc=min,g:/3")  # connected once all three are there: none joins late
    consumers = [s[n].consume(ch, 20_000) for n in ("b", "c", "d")]
    producer = s["a"].produce(ch, 20_000)
    assert producer.read(timeout=STARTED_S)["ready"]
    assert done(producer, 120)["sent"] == 20_000
    for c in consumers:
        result = done(c, 120)
        assert result["received"] == 20_000, result
        assert len(result["images"]) == 1, result
    # Status messages came to the control group from all three.
    assert [c["value"] for c in s["a"].counters("fc-receivers")] == [3]


def test_min_flow_control_loses_nothing_while_one_receiver_loses_ten_percent(netns_hosts, spawn, nft_loss):
    hosts, subnet, s = sites(netns_hosts, spawn, "a", "b", "c", "d")
    port = 41_003
    ch = channel(subnet, port, "fc=min,g:/3")
    loss = nft_loss(hosts.ns("c"), 10, hook="input", dport=port)
    consumers = {n: s[n].consume(ch, 30_000) for n in ("b", "c", "d")}
    producer = s["a"].produce(ch, 30_000)
    assert producer.read(timeout=STARTED_S)["ready"]
    assert done(producer, 180)["sent"] == 30_000
    for name, c in consumers.items():
        result = done(c, 180)
        assert result["received"] == 30_000, (name, result)
    assert loss.dropped() > 100, "the loss really happened at c"
    # Repairs went out: the publisher retransmitted what c asked for.
    reader = sulis.CountersReader(s["a"].dir)
    assert reader.value(sulis.SystemCounter.RETRANSMITS_SENT) > 0


def test_max_lets_fast_receivers_go_on_where_min_holds_the_stream(netns_hosts, spawn):
    hosts, subnet, s = sites(netns_hosts, spawn, "a", "b", "c")
    for fc, port in (("max", 41_005), ("min", 41_007)):
        ch = channel(subnet, port, f"fc={fc}")
        fast = s["b"].consume(ch, 50_000)
        slow = s["c"].consume(ch, 50_000)
        producer = s["a"].produce(ch, 50_000, max_length=1000, wait_go=True)
        assert producer.read(timeout=STARTED_S)["ready"]
        if fc == "min":  # both receivers are tracked before the slow one stops reading
            await_until(lambda: len(s["a"].counters("fc-receiver")) == 2, timeout=10)
        slow.signal(signal.SIGSTOP)
        producer.send("go")
        if fc == "max":
            assert done(producer, 60)["sent"] == 50_000, "max: nobody waits for the stopped receiver"
            assert done(fast, 60)["received"] == 50_000
        else:
            # Far more than a term (1 MiB) must go: the stopped receiver holds it at its window.
            with pytest.raises(AssertionError, match="said nothing"):
                producer.read(timeout=3)
            positions = [c["value"] for c in s["a"].counters("fc-receiver")]
            assert len(positions) == 2, "both receivers are tracked and visible as counters"
            # sulis streams names them, and the stopped one as the slowest, holding the stream.
            out = run_cli("streams", "--dir", s["a"].dir, "--json")
            (stream,) = [x for x in json.loads(out.stdout)["streams"]
                         if x["stream_id"] == STREAM and f":{port}" in x["channel"]]
            tracked = stream["flow_control_receivers"]
            assert len(tracked) == 2, tracked
            (slowest,) = [r for r in tracked if r["slowest"]]
            assert slowest["address"].startswith(s["c"].addr + ":"), (tracked, s["c"].addr)
            assert slowest["behind"] > 0
            slow.signal(signal.SIGCONT)
            assert done(producer, 120)["sent"] == 50_000
            assert done(fast, 60)["received"] == 50_000
            assert done(slow, 60)["received"] == 50_000, "min: the stopped receiver missed nothing"
        slow.signal(signal.SIGCONT)
        for child in (fast, slow, producer):
            child.close()


def test_a_receiver_that_falls_behind_a_max_stream_skips_what_is_gone_and_goes_on(netns_hosts, spawn):
    """Aeron's receiver waits for good once what it lacks is gone from the sender's log; sulis's gives
    up after the stall timeout (2 s): the loss goes to the loss report and the error log, the subscriber
    sees the image end and a new one start where the stream is, and it reads on. Nobody else waits."""
    hosts, subnet, s = sites(netns_hosts, spawn, "a", "b", "c")
    ch = channel(subnet, 41_017)  # fc=max, the multicast default
    fast = spawn("tally", s["b"].dir, STREAM, ch, prefix=s["b"].prefix, stdin=True)
    slow = spawn("tally", s["c"].dir, STREAM, ch, prefix=s["c"].prefix, stdin=True)
    fast.read(timeout=STARTED_S)
    slow.read(timeout=STARTED_S)
    producer = spawn("pace", s["a"].dir, STREAM, ch, 10_000, prefix=s["a"].prefix, stdin=True)
    producer.read(timeout=STARTED_S)
    await_until(lambda: tally(slow)["received"] > 1000, timeout=30, what="the slow receiver reading")
    before = tally(fast)["received"]
    slow.signal(signal.SIGSTOP)  # half a term (512 KiB) is 0.1 s of this stream
    # Held back by the stopped receiver, the stream would move half a term (about 1,000 messages) and stall;
    # it goes on: 10,000 messages (about 5 MiB, more than the sender's log holds) reach the fast receiver
    # while the slow one is stopped, however long a busy machine takes for them.
    during: list[int] = []
    await_until(lambda: during.append(tally(fast)["received"] - before) or during[-1] > 10_000, timeout=60,
                what=lambda: f"the stream to go on past the stopped receiver: {during[-1]} messages after it "
                             f"stopped (held back, it stalls at about 1,000)", interval=0.05)
    slow.signal(signal.SIGCONT)
    # Reading again, it is soon where the stream is (it may give up once more on what it missed while stopped).
    now_at = tally(fast)["last"] + 20_000  # 2 s of stream ahead of where the fast receiver is now
    await_until(lambda: tally(slow)["last"] > now_at, timeout=30, what="the slow receiver reading the stream")
    producer.send("stop")
    sent = done(producer, 30)["sent"]
    await_until(lambda: tally(fast)["received"] == sent, timeout=30, what="the fast receiver to read all")
    last: list[dict] = []
    try:
        await_until(lambda: last.append(tally(slow)) or last[-1]["last"] == sent - 1, timeout=30)
    except AssertionError:
        raise AssertionError(f"the slow receiver did not read on to the end ({sent} sent): {last[-1]}, loss report "
                             f"{sulis.read_loss_report(s['c'].dir)}, errors {sulis.read_errors(s['c'].dir)}") from None
    fast_t, slow_t = tally(fast), tally(slow)
    assert fast_t["gaps"] == 0 and fast_t["unavailable"] == 0, fast_t
    assert slow_t["gaps"] >= 1 and slow_t["unavailable"] >= 1, slow_t
    assert slow_t["received"] < sent, slow_t
    entries = sulis.read_loss_report(s["c"].dir)  # one per image that gave up
    assert entries and all(e["total_bytes_lost"] > 0 for e in entries), entries
    assert not sulis.read_loss_report(s["b"].dir)
    assert any("stuck at position" in e[3] for e in sulis.read_errors(s["c"].dir))


def test_a_receiver_whose_host_dies_stops_holding_a_min_stream_after_the_timeout(netns_hosts, spawn):
    hosts, subnet, s = sites(netns_hosts, spawn, "a", "b", "c")
    ch = channel(subnet, 41_009, "fc=min,t:1s")
    fast = s["b"].consume(ch, 40_000)
    doomed = s["c"].consume(ch, 40_000)
    producer = s["a"].produce(ch, 40_000, max_length=1000, wait_go=True)
    assert producer.read(timeout=STARTED_S)["ready"]
    await_until(lambda: len(s["a"].counters("fc-receiver")) == 2, timeout=10, what="both receivers tracked")
    doomed.signal(signal.SIGSTOP)  # holds the stream...
    producer.send("go")
    with pytest.raises(AssertionError, match="said nothing"):
        producer.read(timeout=2)
    killed_at = time.monotonic()
    s["c"].driver.kill()  # ... until its driver dies and its status messages stop
    doomed.kill()
    assert done(producer, 60)["sent"] == 40_000
    assert time.monotonic() - killed_at < 15
    assert done(fast, 60)["received"] == 40_000
    await_until(lambda: len(s["a"].counters("fc-receiver")) == 1, timeout=10, what="the dead receiver dropped")
    (receivers,) = s["a"].counters("fc-receivers")
    assert receivers["value"] == 1


def test_tagged_flow_control_waits_for_its_group_only(netns_hosts, spawn):
    # A member stopped for a few seconds stays a member (and the publication connected) on a busy
    # machine too: the timeouts that would drop it are not what this test is about.
    hosts, subnet, s = sites(netns_hosts, spawn, "a", "b", "c", flow_control_receiver_timeout="30s",
                             publication_connection_timeout="30s")
    port = 41_011
    tagged = channel(subnet, port, "fc=tagged,g:7")
    member = s["b"].consume(channel(subnet, port, "gtag=7"), 40_000)
    other = s["c"].consume(channel(subnet, port), 40_000)  # untagged: not of the group
    producer = s["a"].produce(tagged, 40_000, max_length=1000, wait_go=True)
    assert producer.read(timeout=STARTED_S)["ready"]
    await_until(lambda: len(s["a"].counters("fc-receiver")) == 1, timeout=10, what="the member tracked")
    other.signal(signal.SIGSTOP)  # not of the group: does not hold the stream
    producer.send("go")
    result = done(producer, 60)
    assert result.get("sent") == 40_000, result
    assert done(member, 60)["received"] == 40_000
    other.signal(signal.SIGCONT)


def test_tagged_flow_control_waits_for_its_stopped_member(netns_hosts, spawn):
    # After an earlier producer on the same channel and stream closed, as users run it: the member's
    # new subscription could join the ended stream's image, which the driver then withdrew and zeroed
    # while the member was stopped; its client read the log again from 0, died on the old frames, and
    # the new publication lost its only member (NOT_CONNECTED). Fixed in the client (328a881: an image
    # reads from its own position); this is the sequence that showed it.
    hosts, subnet, s = sites(netns_hosts, spawn, "a", "b", flow_control_receiver_timeout="30s",
                             publication_connection_timeout="30s")
    port = 41_013
    tagged = channel(subnet, port, "fc=tagged,g:7")
    member = s["b"].consume(channel(subnet, port, "gtag=7"), 40_000)
    producer = s["a"].produce(tagged, 40_000, max_length=1000, wait_go=True)
    assert producer.read(timeout=STARTED_S)["ready"]
    await_until(lambda: len(s["a"].counters("fc-receiver")) == 1, timeout=30, what="the member tracked")
    producer.send("go")
    result = done(producer, 60)
    assert result.get("sent") == 40_000, result
    assert done(member, 60)["received"] == 40_000
    # The stream ended (and its consumer with it); the member subscribes again at once, while the
    # ended stream's image may still be there, and a second producer comes on the same channel and stream.
    member.close()
    member = s["b"].consume(channel(subnet, port, "gtag=7"), 40_000)
    producer2 = s["a"].produce(tagged, 40_000, seed=2, max_length=1000, wait_go=True)
    assert producer2.read(timeout=STARTED_S)["ready"]
    await_until(lambda: any(c["value"] >= 0 for c in s["a"].counters("fc-receiver")), timeout=10)
    member.signal(signal.SIGSTOP)
    producer2.send("go")
    with pytest.raises(AssertionError, match="said nothing"):
        producer2.read(timeout=3)
    member.signal(signal.SIGCONT)
    result = done(producer2, 120)
    assert result.get("sent") == 40_000, result


@pytest.mark.expect_errors
def test_a_unicast_channel_refuses_a_flow_control_strategy(driver, client):
    with pytest.raises(sulis.ConfigurationError, match="fc=min: flow control strategies are for multicast"):
        client.add_publication("aeron:udp?endpoint=127.0.0.1:41013|fc=min", STREAM)


@pytest.mark.expect_errors
def test_an_interface_no_local_address_is_in_is_refused_naming_it(driver, client):
    # 198.51.100.0/24 is for documentation (RFC 5737): no host has it.
    with pytest.raises(sulis.ConfigurationError, match="interface=198.51.100.0/24: no local interface"):
        client.add_subscription(f"aeron:udp?endpoint={GROUP}:41015|interface=198.51.100.0/24", STREAM)
    with pytest.raises(sulis.ConfigurationError, match="interface=198.51.100.0/24: no local interface"):
        client.add_publication(f"aeron:udp?endpoint={GROUP}:41015|interface=198.51.100.0/24", STREAM)
