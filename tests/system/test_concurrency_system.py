"""Concurrent appends to one IPC log from several threads and from several
processes (each with its own sulis.Client on the same driver): no frame is
lost, duplicated, reordered per producer or torn (each message carries its
producer, a sequence number and a CRC of its body)."""

from __future__ import annotations

import random
import threading
import time

import pytest

import sulis
from _child import body_for, make_message, parse_message
from conftest import await_until

MAX_BODY = 3000  # up to three fragments at the default 1408-byte MTU


class Checker:
    """Receives whole messages and checks per-producer order and integrity."""

    def __init__(self, producers: int):
        self.next_seq = [0] * producers
        self.sessions = set()
        self.count = 0
        self.bytes = 0
        self.last = None
        self.switches = 0  # how often consecutive messages came from different producers

    def __call__(self, buffer, header):
        producer, seq, body = parse_message(bytes(buffer))
        assert seq == self.next_seq[producer], f"producer {producer}: got seq {seq}, expected {self.next_seq[producer]}"
        self.next_seq[producer] += 1
        self.switches += self.last is not None and producer != self.last
        self.last = producer
        self.sessions.add(header.session_id)
        self.count += 1
        self.bytes += len(body)


@pytest.mark.parametrize("shared_object", [True, False], ids=["one-publication-object", "publication-per-thread"])
def test_concurrent_appends_from_threads(client, shared_object):
    producers, per_producer = 4, 2500
    sub = client.add_subscription("aeron:ipc", 40)
    pubs = [client.add_publication("aeron:ipc", 40)]
    if not shared_object:
        pubs += [client.add_publication("aeron:ipc", 40) for _ in range(producers - 1)]
    assert len({p.session_id for p in pubs}) == 1, "concurrent publications of a stream share one log"
    await_until(lambda: all(p.is_connected for p in pubs) and sub.image_count == 1)
    errors = []

    def produce(p: int):
        pub = pubs[p % len(pubs)]
        rng = random.Random(p)
        try:
            for seq in range(per_producer):
                msg = make_message(p, seq, body_for(rng, MAX_BODY))
                while (r := pub.offer(msg)) < 0:
                    assert r in (sulis.BACK_PRESSURED, sulis.ADMIN_ACTION), sulis.result_name(r)
                    time.sleep(0)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    checker = Checker(producers)
    assembler = sulis.FragmentAssembler(checker)
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while checker.count < producers * per_producer:
        if sub.poll(assembler, 100) == 0:
            assert not errors, errors
            assert time.monotonic() < deadline, f"received {checker.count} of {producers * per_producer}"
            time.sleep(0)
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert checker.next_seq == [per_producer] * producers
    assert checker.sessions == {pubs[0].session_id}
    assert sub.poll(assembler, 100) == 0, "nothing extra"
    assert sub.images[0].position == pubs[0].position


def test_concurrent_appends_from_processes(client, spawn):
    producers, per_producer = 4, 5000
    stream = 41
    sub = client.add_subscription("aeron:ipc", stream)
    children = [spawn("produce", client.dir, stream, p, per_producer, 100 + p, MAX_BODY, 1, stdin=True)
                for p in range(producers)]
    ready = [c.read() for c in children]
    sessions = {r["session_id"] for r in ready}
    assert len(sessions) == 1, "every process appends to the same shared log"
    for c in children:  # all start appending at once
        c.send("go")
    checker = Checker(producers)
    assembler = sulis.FragmentAssembler(checker)
    deadline = time.monotonic() + 90
    while checker.count < producers * per_producer:
        if sub.poll(assembler, 256) == 0:
            assert time.monotonic() < deadline, f"received {checker.count} of {producers * per_producer}"
            time.sleep(0)
    done = [c.read() for c in children]
    assert all(d.get("done") and d["sent"] == per_producer for d in done), done
    assert checker.next_seq == [per_producer] * producers
    assert checker.sessions == sessions
    assert checker.switches > 100, f"the producers hardly interleaved ({checker.switches} switches)"
    # Every producer's own random bodies, exactly: re-derive and compare totals.
    expected_bytes = 0
    for p in range(producers):
        rng = random.Random(100 + p)
        expected_bytes += sum(len(body_for(rng, MAX_BODY)) for _ in range(per_producer))
    assert checker.bytes == expected_bytes
    for c in children:
        assert c.proc.wait(timeout=30) == 0, c.stderr()


def test_threads_and_processes_together(client, spawn):
    """Two processes and two threads of this process append to one stream."""
    stream, per_producer = 42, 1000
    sub = client.add_subscription("aeron:ipc", stream)
    pub = client.add_publication("aeron:ipc", stream)
    await_until(lambda: pub.is_connected)
    children = [spawn("produce", client.dir, stream, p, per_producer, 200 + p, 500) for p in (0, 1)]
    for c in children:
        assert c.read()["session_id"] == pub.session_id
    errors = []

    def produce(p: int):
        rng = random.Random(p)
        try:
            for seq in range(per_producer):
                msg = make_message(p, seq, body_for(rng, 500))
                while pub.offer(msg) < 0:
                    time.sleep(0)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(p,)) for p in (2, 3)]
    for t in threads:
        t.start()
    checker = Checker(4)
    assembler = sulis.FragmentAssembler(checker)
    deadline = time.monotonic() + 90
    while checker.count < 4 * per_producer:
        if sub.poll(assembler, 256) == 0:
            assert not errors, errors
            assert time.monotonic() < deadline, f"received {checker.count}"
            time.sleep(0)
    for t in threads:
        t.join(timeout=30)
    assert checker.next_seq == [per_producer] * 4
    assert checker.sessions == {pub.session_id}
    for c in children:
        assert c.read()["done"]
