"""The fault suite's bank check (tests/clusterfaults/harness.py) on histories made by hand: it passes the log's
own story and fails, naming the request, an answer the log's order does not give, a read that is not of the
log's state, and a log order that breaks real time."""

from __future__ import annotations

import pytest

from clusterfaults.harness import _check_bank, elections, waits
from clusterfaults.register_service import ACCOUNTS, OPENING


def op(op_id, kind, call, ret, ok=None, value=None, key=0, a=0, b=0):
    return {"id": op_id, "op": kind, "kind": kind, "key": key, "a": a, "b": b, "call": call, "ret": ret,
            "ok": ok, "value": value}


def story():
    """c0-1 moves 30 from 0 to 1; c1-1 asks 0 to pay 80 (refused, 70 left); c0-2 reads; c1-2 is sent, never
    answered, yet in the log (moves 5 from 2 to 3); c0-3 reads after it."""
    after = [OPENING - 30, OPENING + 30] + [OPENING] * (ACCOUNTS - 2)
    history = [
        op("c0-1", "transfer", 0, 10, True, OPENING - 30, key=0, a=1, b=30),
        op("c1-1", "transfer", 5, 20, False, OPENING - 30, key=0, a=2, b=80),
        op("c0-2", "balances", 15, 30, True, after),
        op("c1-2", "transfer", 25, None, key=2, a=3, b=5),
        op("c0-3", "balances", 35, 50, True, [after[0], after[1], OPENING - 5, OPENING + 5][:ACCOUNTS]),
        op("c2-1", "read", 0, 1, True, 0),  # a register's, not the bank's
    ]
    return ["c0-1", "c2-1", "c1-1", "c0-2", "c1-2", "c0-3"], history


def test_the_logs_own_story_passes():
    applied, history = story()
    assert _check_bank(applied, history) == {"transfers": 2, "transfers_refused": 1, "balance_reads": 2}


def test_an_answer_the_logs_order_does_not_give_fails_naming_it():
    applied, history = story()
    history[1]["ok"] = True  # the service said it paid 80 out of 70
    with pytest.raises(AssertionError, match="c1-1 .* was answered"):
        _check_bank(applied, history)


def test_a_read_of_another_state_fails():
    applied, history = story()
    history[2]["value"] = [OPENING] * ACCOUNTS  # as if c0-1 had not happened
    with pytest.raises(AssertionError, match="c0-2"):
        _check_bank(applied, history)


def test_a_log_order_against_real_time_fails():
    applied, history = story()
    # c0-2 read before c0-1 in the log, though c0-1 was answered before c0-2 was sent; the read's answer is
    # made to match that order, so only the real-time check can catch it.
    applied = ["c0-2", "c0-1", "c1-1", "c1-2", "c0-3"]
    history[2]["value"] = [OPENING] * ACCOUNTS
    with pytest.raises(AssertionError, match="c0-1 was answered before c0-2 was sent"):
        _check_bank(applied, history)


class _Said:
    """A member as ``elections`` and ``waits`` read it: what it said, and whether its clock was skewed."""

    def __init__(self, text: str, ever_skewed: bool = False):
        self.text, self.ever_skewed = text, ever_skewed

    def stderr(self) -> str:
        return self.text


def test_a_faults_election_and_wait_are_timed_from_when_it_was_applied():
    # Monotonic 100.0 s is 10:00:00.000 UTC of some day (the wall offset); the kill is applied at 100.2 s.
    day = 20_000 * 86_400
    offset = day + 36_000 - 100.0
    events = ["100.000 nemesis kill-leader", "100.200 killed member 1", "104.000 started member 1",
              "106.000 nemesis loss", "106.100 10% loss on every member", "109.100 loss healed",
              "110.000 nemesis kill-leader", "110.100 killed member 2"]
    members = [
        _Said("sulis cluster: 09:59:00.000 member 0 runs term 3 with leader 1\n"
              "sulis cluster: 10:00:02.700 member 0 runs term 4 with leader 2\n"),
        _Said("sulis cluster: 10:00:02.650 member 2 runs term 4 with leader 2\n"
              "sulis cluster: 10:00:12.500 member 2 runs term 5 with leader 0\n"),
        # A skewed member's clock says its term began before the fault: left out.
        _Said("sulis cluster: 09:59:30.000 member 1 runs term 4 with leader 2\n", ever_skewed=True),
    ]
    # The loss caused no election: the term begun after the next fault is that fault's.
    assert elections(events, members, offset) == {"kill-leader": [2.45, 2.4]}
    history = [op("c0-1", "read", 100_100_000_000, None), op("c0-2", "read", 100_300_000_000, 103_500_000_000, True, 0)]
    assert waits(events, history) == {"kill-leader": [3.3]}
