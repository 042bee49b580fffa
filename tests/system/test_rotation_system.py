"""Term rotation and padding at every kind of term boundary, and term-id wrap.

A Python model of the log predicts where every frame lands (a frame that does
not fit in the rest of a term pads it and moves to the next term); the tests
drive the tail to chosen gaps before the end of a 64 KiB term and check that
frames land exactly where predicted, that positions match, and that every
message arrives in order and intact across many rotations (so every one of
the three partitions is reused and cleaned several times).
"""

from __future__ import annotations

import random

import pytest

import sulis
from conftest import await_until, connected_pair

TERM = 64 * 1024
MAX_PAYLOAD = 1408 - 32
HEADER = 32


def align32(n: int) -> int:
    return (n + 31) & ~31


def frame_bytes(n: int) -> int:
    """Bytes a message of n payload bytes occupies in a term (fragments included)."""
    if n <= MAX_PAYLOAD:
        return align32(n + HEADER)
    full, rest = divmod(n, MAX_PAYLOAD)
    return full * align32(MAX_PAYLOAD + HEADER) + (align32(rest + HEADER) if rest else 0)


def payload_for_frame_bytes(g: int) -> int:
    """Largest payload whose frames occupy exactly g bytes (g a multiple of 32)."""
    if g <= MAX_PAYLOAD + HEADER:
        return g - HEADER
    full, rest = divmod(g, MAX_PAYLOAD + HEADER)
    assert rest == 0 or rest >= HEADER
    n = full * MAX_PAYLOAD + (rest - HEADER if rest else 0)
    assert frame_bytes(n) == g, (g, n)
    return n


class LogModel:
    """Predicts positions: returns (start, end, padded) of each append."""

    def __init__(self, position: int = 0):
        self.position = position

    def append(self, n: int) -> tuple[int, int, bool]:
        length = frame_bytes(n)
        padded = False
        if self.position % TERM + length > TERM:
            self.position = (self.position // TERM + 1) * TERM
            padded = True
        start = self.position
        self.position += length
        return start, self.position, padded


def boundary_plan(rng: random.Random, model: LogModel, gaps) -> list[tuple[int, str]]:
    """Payload lengths that bring the tail to each gap before a term end, then
    put a message there that fits exactly ('exact') or is one byte too long
    ('over')."""
    plan = []
    for gap in gaps:
        for kind in ("exact", "over"):
            target = TERM - gap
            while model.position % TERM != target:
                offset = model.position % TERM
                # Fill to the target, or first to the end of this term when past it.
                d = (target if offset < target else TERM) - offset
                step = 1024 if d > MAX_PAYLOAD + HEADER else d
                model.append(step - HEADER)
                plan.append((step - HEADER, "filler"))
            n = payload_for_frame_bytes(gap) + (1 if kind == "over" else 0)
            start, end, padded = model.append(n)
            if kind == "exact":
                assert end % TERM == 0 and not padded
            else:
                assert padded and start % TERM == 0
            plan.append((n, kind))
    return plan


# Gaps before the term end: one frame alignment, around the MTU, several
# fragments, and up to a whole max-length message (8 KiB).
GAPS = [32, 64, 96, 1024, 1376, 1408, 1472, 2048, 2816, 2880, 4096, 5632, 8000, 8192]


def run_plan(client, pub, sub, plan, rng, reserved=True):
    """Sends the plan (retrying on back pressure) and checks everything received."""
    model = LogModel(pub.position)
    expected = []
    for i, (n, kind) in enumerate(plan):
        payload = rng.randbytes(n)
        start, end, padded = model.append(n)
        expected.append((payload, start, end, kind, i))

    received = []

    def on_message(buffer, header):
        received.append((bytes(buffer), header.position, header.term_offset, header.term_id, header.flags,
                         header.reserved_value, header.frame_length))

    assembler = sulis.FragmentAssembler(on_message)
    sent = 0
    while sent < len(expected):
        payload, start, end, kind, i = expected[sent]
        rv = i * 7919 if (reserved and i % 2) else None
        r = pub.offer(payload, reserved_value=rv) if rv is not None else pub.offer(payload)
        if r >= 0:
            assert r == end, f"message {i} ({kind}, {len(payload)} B) ended at {r}, expected {end}"
            sent += 1
        else:
            assert r in (sulis.BACK_PRESSURED, sulis.ADMIN_ACTION), sulis.result_name(r)
            if r == sulis.ADMIN_ACTION:
                assert kind == "over" or start % TERM == 0, f"unexpected rotation before message {i} ({kind})"
            sub.poll(assembler, 64)
    await_until(lambda: sub.poll(assembler, 64) >= 0 and len(received) >= len(expected), 30, "every message")
    assert len(received) == len(expected)
    initial_term_id = sub.images[0].initial_term_id
    for (payload, start, end, kind, i), (data, position, term_offset, term_id, flags, rv, frame_length) in zip(
        expected, received, strict=True
    ):
        assert data == payload, f"message {i} ({kind}) corrupted"
        assert flags == 0xC0
        assert frame_length == len(payload) + HEADER
        assert term_offset == start % TERM, f"message {i} ({kind}) at offset {term_offset}, expected {start % TERM}"
        assert term_id == (initial_term_id + start // TERM + 2**31) % 2**32 - 2**31
        assert position == end, f"message {i} ({kind}): header position {position}, expected {end}"
        assert rv == (i * 7919 if (reserved and i % 2) else 0), f"message {i}: reserved value {rv}"
    assert sub.poll(assembler, 64) == 0
    return model.position


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "concurrent"])
def test_frames_land_exactly_at_and_one_byte_over_every_term_boundary(client, exclusive):
    rng = random.Random(20240601)
    sub, pub = connected_pair(client, 30, exclusive=exclusive)
    plan = boundary_plan(rng, LogModel(0), GAPS)
    assert sum(1 for _, k in plan if k == "over") == len(GAPS)
    end = run_plan(client, pub, sub, plan, rng)
    assert end // TERM >= 2 * len(GAPS) - 1, "many rotations"
    assert pub.position == end == sub.images[0].position


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "concurrent"])
def test_random_sizes_across_many_rotations(client, exclusive):
    rng = random.Random(7)
    sub, pub = connected_pair(client, 31, exclusive=exclusive)
    sizes = [rng.choice([0, 1, 31, 32, 33, MAX_PAYLOAD, MAX_PAYLOAD + 1, rng.randint(0, 8192), rng.randint(0, 200)])
             for _ in range(1500)]
    end = run_plan(client, pub, sub, [(n, "random") for n in sizes], rng)
    assert end > 15 * TERM


def test_exact_multiple_frames_fill_terms_without_padding(client):
    """1 KiB frames: 64 per term, every term filled exactly, no padding anywhere."""
    sub, pub = connected_pair(client, 32)
    got = []
    n = 64 * 10
    sent = 0
    while sent < n:
        r = pub.offer(sent.to_bytes(4, "little") + bytes(1024 - 32 - 4))
        if r >= 0:
            assert r == (sent + 1) * 1024
            sent += 1
        else:
            # A full term rotates on the next offer (ADMIN_ACTION), without padding.
            assert r in (sulis.BACK_PRESSURED, sulis.ADMIN_ACTION)
            sub.poll(lambda b, h: got.append((int.from_bytes(b[:4], "little"), h.term_offset)), 64)
    await_until(lambda: sub.poll(lambda b, h: got.append((int.from_bytes(b[:4], "little"), h.term_offset)), 64) >= 0
                and len(got) == n)
    assert got == [(i, (i % 64) * 1024) for i in range(n)]


def test_poll_with_fragment_limit_one_across_boundaries(client):
    """Reading one fragment at a time crosses padding and terms correctly."""
    rng = random.Random(3)
    sub, pub = connected_pair(client, 33)
    sizes = [rng.randint(0, 3000) for _ in range(300)]
    payloads = [rng.randbytes(n) for n in sizes]
    got = []
    asm = sulis.FragmentAssembler(lambda b, h: got.append(bytes(b)))
    i = 0
    while i < len(payloads):
        r = pub.offer(payloads[i])
        if r >= 0:
            i += 1
        else:
            sub.poll(asm, 1)
    await_until(lambda: sub.poll(asm, 1) >= 0 and len(got) == len(payloads), 30)
    assert got == payloads


TERM_ID_WRAP_CHANNEL = "aeron:ipc?init-term-id=2147483646|term-id=2147483646|term-offset=0"


def test_term_id_wraps_past_int32_max(client):
    assert sulis.parse_channel(TERM_ID_WRAP_CHANNEL) == TERM_ID_WRAP_CHANNEL
    sub, pub = connected_pair(client, 34, channel=TERM_ID_WRAP_CHANNEL)
    image = sub.images[0]
    assert image.initial_term_id == 2147483646
    assert pub.position == 0 and image.join_position == 0
    rng = random.Random(11)
    plan = [(rng.randint(0, 3000), "random") for _ in range(400)]
    end = run_plan(client, pub, sub, plan, rng)
    assert end > 6 * TERM


def test_term_id_wrap_headers(client):
    sub, pub = connected_pair(client, 35, channel=TERM_ID_WRAP_CHANNEL)
    term_ids = []
    for _ in range(6):
        # Exactly one term per round: 64 frames of 1 KiB.
        for _ in range(64):
            while (r := pub.offer(bytes(992))) < 0:
                assert r in (sulis.BACK_PRESSURED, sulis.ADMIN_ACTION)
                sub.poll(lambda b, h: term_ids.append(h.term_id), 64)
    await_until(lambda: sub.poll(lambda b, h: term_ids.append(h.term_id), 64) >= 0 and len(term_ids) == 6 * 64)
    per_term = [term_ids[k * 64] for k in range(6)]
    assert per_term == [2147483646, 2147483647, -2147483648, -2147483647, -2147483646, -2147483645]
    assert all(term_ids[k * 64:(k + 1) * 64] == [per_term[k]] * 64 for k in range(6))
    assert pub.position == 6 * TERM == sub.images[0].position


def test_exclusive_publication_starting_mid_term_after_the_wrap(client):
    channel = "aeron:ipc?init-term-id=2147483647|term-id=-2147483647|term-offset=65440"
    sub, pub = connected_pair(client, 36, channel=channel)
    start = 2 * TERM + 65440
    assert pub.position == start
    image = sub.images[0]
    assert image.join_position == start
    positions = []
    got = []
    for m in (b"a" * 60, b"b" * 60, b"c" * 100):  # 96 bytes left: the second message trips the term
        while (r := pub.offer(m)) < 0:
            assert r == sulis.ADMIN_ACTION
        positions.append(r)
    assert positions == [start + 96 - 0, 3 * TERM + 96, 3 * TERM + 96 + 160]
    await_until(lambda: sub.poll(lambda b, h: got.append((bytes(b), h.term_id, h.term_offset, h.position)), 10) >= 0
                and len(got) == 3)
    assert got == [
        (b"a" * 60, -2147483647, 65440, positions[0]),
        (b"b" * 60, -2147483646, 0, positions[1]),
        (b"c" * 100, -2147483646, 96, positions[2]),
    ]


@pytest.mark.expect_errors
def test_start_position_only_for_exclusive_publications(client):
    with pytest.raises(sulis.ConfigurationError, match="only valid for exclusive publications"):
        client.add_publication(TERM_ID_WRAP_CHANNEL, 37)


def test_max_position_exceeded_at_the_end_of_the_last_term(client):
    # term count 2^31 - 1 is the last term a stream can have: its end is the maximum position.
    channel = "aeron:ipc?init-term-id=0|term-id=2147483647|term-offset=65440"
    sub, pub = connected_pair(client, 38, channel=channel)
    max_position = TERM << 31
    assert pub.position == max_position - 96
    assert pub.offer(b"a" * 10) == max_position - 32
    for _ in range(3):
        assert pub.offer(b"b" * 10) == sulis.MAX_POSITION_EXCEEDED
    assert sulis.result_name(pub.offer(b"c")) == "MAX_POSITION_EXCEEDED"
    assert pub.try_claim(1) == sulis.MAX_POSITION_EXCEEDED
    got = []
    await_until(lambda: sub.poll(lambda b, h: got.append((bytes(b), h.position, h.term_id)), 10) >= 0 and got)
    assert got == [(b"a" * 10, max_position - 32, 2147483647)]
    assert sub.poll(lambda b, h: got.append(b), 10) == 0
