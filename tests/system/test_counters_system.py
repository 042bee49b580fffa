"""Per-stream counters live exactly as long as their resources, with the labels and keys
operators filter on, and a freed counter id is only reused after the cool-down."""

from __future__ import annotations

import struct
import time

from test_udp_system import UDP_OPTIONS, free_port, run_stream, stream_of

import sulis
from conftest import COUNTER_TYPE, await_until

PUB_LMT, SND_POS, RCV_HWM, SUB_POS, RCV_POS, SND_LMT, PUB_POS = (
    COUNTER_TYPE[n] for n in ("pub-lmt", "snd-pos", "rcv-hwm", "sub-pos", "rcv-pos", "snd-lmt", "pub-pos"))


def stream_counters(dir: str) -> dict[int, dict]:
    """Stream counters by id, with their key decoded (registration, session, stream, channel)."""
    out = {}
    for c in sulis.CountersReader(dir).counters():
        if c["type_id"] in (PUB_LMT, SND_POS, RCV_HWM, SUB_POS, RCV_POS, SND_LMT, PUB_POS):
            reg, session, stream, n = struct.unpack_from("<qiii", c["key"])
            c["key"] = (reg, session, stream, c["key"][20:20 + n].decode())
            out[c["id"]] = c
    return out


def test_stream_counters_follow_their_resources_with_labels_and_keys(make_driver, make_client):
    port = free_port()
    channel = f"aeron:udp?endpoint=127.0.0.1:{port}"
    sub_driver = make_driver(**UDP_OPTIONS, counter_free_to_reuse_timeout="2s")
    pub_driver = make_driver(**UDP_OPTIONS, counter_free_to_reuse_timeout="2s")
    sub = make_client(dir=sub_driver.dir).add_subscription(channel, 10)
    pub = make_client(dir=pub_driver.dir).add_exclusive_publication(channel, 10)
    await_until(lambda: pub.is_connected and sub.image_count == 1, what="connection")
    run_stream(pub, sub, stream_of(300, seed=1), 300)

    pubs = stream_counters(pub_driver.dir)
    assert sorted(c["type_id"] for c in pubs.values()) == sorted([PUB_LMT, PUB_POS, SND_POS, SND_LMT])
    for c in pubs.values():
        reg, session, stream, ch = c["key"]
        assert (session, stream, ch) == (pub.session_id, 10, channel)
        assert reg == pub.registration_id
        assert c["label"].endswith(f"{reg} {session} {stream} {ch}"), c["label"]
    by_type = {c["type_id"]: c for c in pubs.values()}
    await_until(lambda: sulis.CountersReader(pub_driver.dir).value(by_type[SND_POS]["id"]) == pub.position,
                what="sender position to reach the publisher's")
    assert by_type[SND_LMT]["value"] > 0 and by_type[PUB_LMT]["value"] > 0

    subs = stream_counters(sub_driver.dir)
    assert sorted(c["type_id"] for c in subs.values()) == sorted([RCV_HWM, RCV_POS, SUB_POS])
    image = sub.images[0]
    for c in subs.values():
        assert c["key"][1:] == (pub.session_id, 10, channel)
    by_type = {c["type_id"]: c for c in subs.values()}
    assert by_type[SUB_POS]["key"][0] == sub.registration_id
    assert by_type[SUB_POS]["label"].endswith(f"@{image.join_position}")
    assert by_type[RCV_POS]["value"] == by_type[RCV_HWM]["value"] == pub.position

    # Closing the publication frees its four counters (after draining and lingering).
    old_ids = set(pubs)
    pub.close()
    await_until(lambda: not stream_counters(pub_driver.dir), timeout=20, what="publication counters freed")
    freed_at = time.monotonic()
    # Within the 2 s cool-down a new publication gets fresh ids...
    client = make_client(dir=pub_driver.dir)
    pub2 = client.add_exclusive_publication(channel, 11)
    fresh = set(stream_counters(pub_driver.dir))
    assert len(fresh) == 4 and not fresh & old_ids
    assert time.monotonic() - freed_at < 2, "too slow to be inside the cool-down; the check above proves nothing"
    # ...and once it is over, the freed ids are reused (lowest first).
    await_until(lambda: time.monotonic() > freed_at + 2.1, timeout=5, what="the cool-down to pass")
    client.add_exclusive_publication(channel, 12)
    reused = set(stream_counters(pub_driver.dir)) - fresh
    assert reused == old_ids
    pub2.close()
