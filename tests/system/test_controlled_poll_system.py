"""Subscription.controlled_poll with every sulis.Action, and bad handler results."""

from __future__ import annotations

import pytest

import sulis
from conftest import await_until, connected_pair

MESSAGES = [f"m{i}".encode() for i in range(6)]
FRAME = 64  # 32-byte header + 2-byte payload, aligned


@pytest.fixture
def stream(client):
    """A subscription with six committed 2-byte messages waiting."""
    sub, pub = connected_pair(client, 80)
    for m in MESSAGES:
        assert pub.offer(m) > 0
    return sub, pub, sub.images[0]


def scripted(actions, image, seen):
    """A handler answering each fragment with the next action, recording
    (payload, image position seen during the call)."""
    it = iter(actions)

    def handler(buffer, header):
        seen.append((bytes(buffer), image.position))
        return next(it)

    return handler


def test_continue_consumes_everything_and_commits_at_the_end(stream):
    sub, pub, image = stream
    seen = []
    n = sub.controlled_poll(scripted([sulis.Action.CONTINUE] * 6, image, seen), 10)
    assert n == 6
    assert [p for p, _ in seen] == MESSAGES
    assert {pos for _, pos in seen} == {0}, "CONTINUE does not move the position during the poll"
    assert image.position == 6 * FRAME == pub.position


def test_abort_leaves_the_fragment_for_the_next_poll(stream):
    sub, pub, image = stream
    seen = []
    assert sub.controlled_poll(scripted([sulis.Action.ABORT], image, seen), 10) == 0
    assert image.position == 0
    seen2 = []
    assert sub.controlled_poll(scripted([sulis.Action.CONTINUE, sulis.Action.CONTINUE, sulis.Action.ABORT], image,
                                        seen2), 10) == 2
    assert [p for p, _ in seen2] == [b"m0", b"m1", b"m2"], "the aborted fragment is offered again"
    assert image.position == 2 * FRAME, "consumed up to, not including, the aborted fragment"
    rest = []
    assert sub.poll(lambda b, h: rest.append(bytes(b)), 10) == 4
    assert rest == MESSAGES[2:]


def test_break_consumes_the_fragment_then_stops(stream):
    sub, pub, image = stream
    seen = []
    assert sub.controlled_poll(scripted([sulis.Action.CONTINUE, sulis.Action.BREAK], image, seen), 10) == 2
    assert [p for p, _ in seen] == [b"m0", b"m1"]
    assert image.position == 2 * FRAME
    seen = []
    assert sub.controlled_poll(scripted([sulis.Action.BREAK], image, seen), 10) == 1
    assert [p for p, _ in seen] == [b"m2"]
    assert image.position == 3 * FRAME


def test_commit_moves_the_position_during_the_poll(stream):
    sub, pub, image = stream
    seen = []
    actions = [sulis.Action.COMMIT, sulis.Action.CONTINUE, sulis.Action.COMMIT, sulis.Action.CONTINUE,
               sulis.Action.ABORT]
    assert sub.controlled_poll(scripted(actions, image, seen), 10) == 4
    # Position as seen by the handler for each fragment: it moved at each COMMIT.
    assert seen == [(b"m0", 0), (b"m1", FRAME), (b"m2", FRAME), (b"m3", 3 * FRAME), (b"m4", 3 * FRAME)]
    assert image.position == 4 * FRAME


def test_abort_after_commit_keeps_the_committed_part(stream):
    sub, pub, image = stream
    seen = []
    actions = [sulis.Action.COMMIT, sulis.Action.CONTINUE, sulis.Action.ABORT]
    assert sub.controlled_poll(scripted(actions, image, seen), 10) == 2
    assert image.position == 2 * FRAME
    again = []
    sub.poll(lambda b, h: again.append(bytes(b)), 1)
    assert again == [b"m2"]


def test_plain_integers_are_actions(stream):
    sub, pub, image = stream
    seen = []
    assert [int(a) for a in sulis.Action] == [1, 2, 3, 4]
    assert sub.controlled_poll(scripted([4, 4, 2], image, seen), 10) == 3
    assert image.position == 3 * FRAME


def test_fragment_limit_is_respected(stream):
    sub, pub, image = stream
    seen = []
    assert sub.controlled_poll(scripted([sulis.Action.CONTINUE] * 6, image, seen), 4) == 4
    assert image.position == 4 * FRAME
    assert sub.controlled_poll(scripted([sulis.Action.CONTINUE] * 6, image, seen), 4) == 2
    assert [p for p, _ in seen] == MESSAGES


@pytest.mark.parametrize("bad", [None, "CONTINUE", 0, 5, -1, 2.5, object()],
                         ids=lambda b: "object" if type(b) is object else repr(b))
def test_bad_handler_result_raises_type_error(stream, bad):
    sub, pub, image = stream
    with pytest.raises(TypeError, match="sulis.Action"):
        sub.controlled_poll(lambda b, h: bad, 10)
    # The stream is not wedged: polling goes on in order after the failing fragment.
    rest = []
    await_until(lambda: sub.poll(lambda b, h: rest.append(bytes(b)), 10) >= 0 and len(rest) == 5)
    assert rest == MESSAGES[1:]


def test_bad_result_after_good_ones_keeps_what_was_consumed(stream):
    sub, pub, image = stream
    results = iter([sulis.Action.CONTINUE, sulis.Action.COMMIT, "oops"])
    with pytest.raises(TypeError, match="'oops'"):
        sub.controlled_poll(lambda b, h: next(results), 10)
    rest = []
    sub.poll(lambda b, h: rest.append(bytes(b)), 10)
    assert rest == MESSAGES[3:]


def test_handler_exception_propagates(stream):
    sub, pub, image = stream

    def handler(buffer, header):
        raise ZeroDivisionError("from the handler")

    with pytest.raises(ZeroDivisionError, match="from the handler"):
        sub.controlled_poll(handler, 10)


def test_controlled_poll_sees_headers(stream):
    sub, pub, image = stream
    headers = []

    def handler(buffer, header):
        headers.append((header.position, header.term_offset, header.session_id))
        return sulis.Action.CONTINUE

    sub.controlled_poll(handler, 2)
    assert headers == [(FRAME, 0, pub.session_id), (2 * FRAME, FRAME, pub.session_id)]


def test_controlled_poll_with_nothing_to_read(client):
    sub = client.add_subscription("aeron:ipc", 81)
    assert sub.controlled_poll(lambda b, h: pytest.fail("no fragments"), 10) == 0
