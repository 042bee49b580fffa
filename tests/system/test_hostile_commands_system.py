"""A buggy or hostile local process writes garbage into the driver's command
ring buffer (with the ring's own claim protocol, as any process that can map
cnc.dat can). The driver must survive it, log it, and keep serving everyone
else; a client the driver's answers to others lapped must re-synchronise,
not die, and must not miss an image that came while it was behind.
"""

from __future__ import annotations

import random
import signal
import struct
import time

import pytest

import sulis
from conftest import await_until, counter_value
from sulis import _native

ERRORS_COUNTER = sulis.SystemCounter.ERRORS
# Command type ids (Aeron's): remove publication, add publication.
REMOVE_PUBLICATION = 0x02
ADD_PUBLICATION = 0x01


def garbage(rng: random.Random, count: int) -> list[tuple[int, bytes]]:
    """Records that cannot be decoded: random type ids and random bodies,
    and real command types with bodies cut short or with lying lengths."""
    out = []
    for _ in range(count):
        kind = rng.randrange(3)
        if kind == 0:
            out.append((rng.randint(1, 0x7FFF), rng.randbytes(rng.randint(0, 200))))
        elif kind == 1:
            out.append((rng.choice([0x01, 0x02, 0x03, 0x04, 0x05, 0x09, 0x0A]), rng.randbytes(rng.randint(0, 15))))
        else:
            # An add-publication whose channel length runs past the record.
            body = struct.pack("<qqii", rng.getrandbits(62), rng.getrandbits(62), 10, 10_000) + b"aeron:ipc"
            out.append((ADD_PUBLICATION, body))
    return out


def unanswerable(rng: random.Random, count: int) -> list[tuple[int, bytes]]:
    """Well-formed removes of publications nobody has: each one makes the
    driver broadcast an error answer to every client."""
    client_id = rng.getrandbits(62)
    return [(REMOVE_PUBLICATION, struct.pack("<qqq", client_id, rng.getrandbits(62), rng.getrandbits(62)))
            for _ in range(count)]


def write_all(dir: str, records: list[tuple[int, bytes]]) -> None:
    i = 0
    while i < len(records):
        n = _native._write_to_driver(dir, records[i:i + 2000])
        i += n
        if n == 0:
            time.sleep(0.001)  # the ring is full: let the driver read


@pytest.mark.expect_errors
@pytest.mark.driver_options(clients_buffer_length="64k")
def test_garbage_commands_and_an_answer_flood_leave_other_clients_working(driver, spawn):
    rng = random.Random(7)
    errors_before = counter_value(driver.dir, ERRORS_COUNTER)
    count = 3000
    consumer = spawn("consume", driver.dir, 10, 2, count)
    consumer.read()
    first = spawn("produce", driver.dir, 10, 1, count, 1, 500, 1, stdin=True)
    first.read()
    # The consumer stops reading the driver's events altogether ...
    consumer.signal(signal.SIGSTOP)
    try:
        # ... a second publication (its own session: a new image for the
        # consumer) comes while the consumer is stopped, so its image event
        # is in the broadcast buffer only ...
        second = spawn("produce", driver.dir, 10, 2, count, 2, 500, 1, "aeron:ipc?session-id=777", stdin=True)
        second.read()
        # ... and is overwritten many times over: 20,000 undecodable records
        # and 10,000 answered ones (~1 MB of error answers into a 64 KiB
        # broadcast buffer).
        write_all(driver.dir, garbage(rng, 20_000))
        write_all(driver.dir, unanswerable(rng, 10_000))
        # (A random record may happen to decode: 29,000 of 30,000 at least.)
        await_until(lambda: counter_value(driver.dir, ERRORS_COUNTER) >= errors_before + 29_000, timeout=60,
                    what="the driver to read the records")
    finally:
        consumer.signal(signal.SIGCONT)
    first.send("go")
    second.send("go")
    assert first.read(timeout=60).get("done"), first.stderr()
    assert second.read(timeout=60).get("done"), second.stderr()
    result = consumer.read(timeout=60)
    assert result.get("done"), consumer.stderr()
    assert result["received"] == 2 * count
    assert result["lapped"] >= 1, "the consumer was never lapped: the test did not test recovery"
    assert 777 in result["images"] and len(result["images"]) == 2, result
    # The driver logged what was wrong and still serves new clients.
    texts = [e[3] for e in sulis.read_errors(driver.dir)]
    assert any("malformed command" in t for t in texts), texts[:5]
    # Garbage type ids share one entry, so the error log has room left.
    assert len(texts) < 1000, len(texts)
    assert "remove of an unknown publication" in texts, texts[:5]
    with sulis.Client(dir=driver.dir) as c:
        sub = c.add_subscription("aeron:ipc", 11)
        pub = c.add_publication("aeron:ipc", 11)
        await_until(lambda: pub.is_connected and pub.offer(b"after") > 0)
        got = []
        await_until(lambda: sub.poll(lambda b, h: got.append(bytes(b)), 10) or got)
        assert got == [b"after"]


@pytest.mark.expect_errors
def test_garbage_never_creates_clients_or_resources(driver, client):
    rng = random.Random(11)
    reader = sulis.CountersReader(driver.dir)
    before = len(reader.counters())
    write_all(driver.dir, garbage(rng, 5000))
    # Removes and closes from clients the driver does not know create nothing.
    write_all(driver.dir, unanswerable(rng, 500))
    write_all(driver.dir, [(0x0B, struct.pack("<qq", rng.getrandbits(62), 0)) for _ in range(500)])
    await_until(lambda: counter_value(driver.dir, ERRORS_COUNTER) >= 5400, timeout=30)
    # The healthy client is untouched.
    sub = client.add_subscription("aeron:ipc", 3)
    pub = client.add_publication("aeron:ipc", 3)
    await_until(lambda: pub.is_connected and sub.image_count == 1)
    after = len(sulis.CountersReader(driver.dir).counters())
    # The client's subscription and publication add a handful; no heartbeat per garbage client.
    assert after - before < 10, (before, after)
