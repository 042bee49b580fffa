"""The fault suite's service: registers by key with read, write and compare-and-set, timers and chains of
service messages.

A request is ``"<op id> <op> <key> <a> <b>"``: ``read k 0 0``, ``write k v 0``, ``cas k from to``,
``timer k delay_ms 0`` (a timer due ``delay_ms`` of cluster time later) and ``chain k links 0`` (a chain
of ``links`` service messages, each offered into the log by the service when it applies the one
before). The leader answers ``"<op id> <ok 0|1> <value>"`` on the client's egress; a timer or a chain
answers as a read of its key (they change no register), so the history stays one of registers.

Beside the registers, a bank of ``ACCOUNTS`` accounts of ``OPENING`` each: ``transfer from to amount``
moves ``amount`` if ``from`` holds it (ok 0 if not, or if ``from`` is ``to``) and answers ``from``'s
balance after; ``balances 0 0 0`` answers every balance, comma-separated.

Every applied request's op id goes, a line each, to ``$JOURNAL`` (rewritten at every start), and so does
what follows from it: ``fired:<op id>`` when its timer fires (``early:<op id>`` if before its deadline,
``stray-timer:<id>`` for a timer the service never scheduled) and ``link:<op id>:<k>`` for each link of a
chain, ``links`` down to 1. The test compares what each member applied. Registers start at 0. A snapshot
holds the registers, the journal so far and the timers pending, so a member that starts from it writes
the same journal as one that replays the whole log.
"""

from __future__ import annotations

import json
import os

from sulis.cluster import OFFER_AGAIN, ClusteredService

ACCOUNTS = 4
OPENING = 100


class Register(ClusteredService):
    def __init__(self) -> None:
        self.values: dict[int, int] = {}
        self.accounts = [OPENING] * ACCOUNTS
        self.applied: list[str] = []  # the journal's lines
        self.timers: dict[int, tuple[str, int]] = {}  # correlation id -> (op id, deadline)
        self.next_timer = 0
        self.journal = open(os.environ["JOURNAL"], "w")  # noqa: SIM115 (open for the service's life)

    def on_start(self, cluster, snapshot) -> None:
        if snapshot is not None:
            state = json.loads(snapshot[0])
            self.values = {int(k): v for k, v in state["values"].items()}
            self.applied = state["applied"]
            self.timers = {int(k): (op, deadline) for k, (op, deadline) in state["timers"].items()}
            self.next_timer = state["next_timer"]
            self.accounts = state["accounts"]
            self.journal.write("".join(line + "\n" for line in self.applied))
            self.journal.flush()
            with open(os.environ["JOURNAL"] + ".starts", "a") as starts:  # the run counts these
                starts.write(f"from a snapshot of {len(self.applied)} requests\n")

    def on_take_snapshot(self, cluster, snapshot) -> None:
        snapshot.write(json.dumps({"values": self.values, "applied": self.applied, "timers": self.timers,
                                   "next_timer": self.next_timer, "accounts": self.accounts}).encode())

    def _journal(self, line: str) -> None:
        self.applied.append(line)
        self.journal.write(line + "\n")
        self.journal.flush()

    def _into_log(self, cluster, payload: str) -> None:
        while not cluster.offer_to_cluster(payload.encode()):
            cluster.idle()

    def on_session_message(self, cluster, session_id, timestamp, payload) -> None:
        if session_id is None:  # the service's own message: a chain's next link
            _, op_id, k = payload.decode().split()
            self._journal(f"link:{op_id}:{k}")
            if int(k) > 1:
                self._into_log(cluster, f"link {op_id} {int(k) - 1}")
            return
        op_id, op, key, a, b = payload.decode().split()
        key, a, b = int(key), int(a), int(b)
        if op in ("transfer", "balances"):
            self._journal(op_id)
            self._reply(cluster, session_id, f"{op_id} {self._bank(op, key, a, b)}")
            return
        current = self.values.get(key, 0)
        ok = True
        if op == "write":
            self.values[key] = a
        elif op == "cas":
            ok = current == a
            if ok:
                self.values[key] = b
        self._journal(op_id)
        if op == "timer":
            self.next_timer += 1
            self.timers[self.next_timer] = (op_id, cluster.time + a)
            cluster.schedule_timer(self.next_timer, cluster.time + a)
        elif op == "chain":
            self._into_log(cluster, f"link {op_id} {a}")
        self._reply(cluster, session_id,
                    f"{op_id} {int(ok)} {self.values.get(key, 0) if op in ('write', 'cas') else current}")

    def _bank(self, op: str, source: int, target: int, amount: int) -> str:
        """A bank request applied: ``"<ok> <value>"``."""
        if op == "balances":
            return "1 " + ",".join(map(str, self.accounts))
        ok = source != target and 0 < amount <= self.accounts[source]
        if ok:
            self.accounts[source] -= amount
            self.accounts[target] += amount
        return f"{int(ok)} {self.accounts[source]}"

    def _reply(self, cluster, session_id: int, reply: str) -> None:
        # A client that is gone (NOT_CONNECTED) ends the loop, so it does not stall the cluster: it learns
        # nothing (its op is then of unknown outcome, which the check allows).
        while cluster.offer(session_id, reply.encode()) in OFFER_AGAIN:
            cluster.idle()

    def on_timer_event(self, cluster, correlation_id, timestamp) -> None:
        pending = self.timers.pop(correlation_id, None)
        if pending is None:
            self._journal(f"stray-timer:{correlation_id}")
            return
        op_id, deadline = pending
        self._journal(f"{'fired' if timestamp >= deadline else 'early'}:{op_id}")
