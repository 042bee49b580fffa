"""The fault suite's service: registers by key with read, write and compare-and-set.

A request is ``"<op id> <op> <key> <a> <b>"`` (``read k 0 0``, ``write k v 0``, ``cas k from to``); the
leader answers ``"<op id> <ok 0|1> <value>"`` on the client's egress. Every applied request's op id goes,
a line each, to ``$JOURNAL`` (rewritten from the log at every start), so the test can compare what each
member applied. Registers start at 0. A snapshot holds the registers and the op ids applied so far, so a
member that starts from it writes the same journal as one that replays the whole log.
"""

from __future__ import annotations

import json
import os

from sulis.cluster import ClusteredService


class Register(ClusteredService):
    def __init__(self) -> None:
        self.values: dict[int, int] = {}
        self.applied: list[str] = []
        self.journal = open(os.environ["JOURNAL"], "w")  # noqa: SIM115 (open for the service's life)

    def on_start(self, cluster, snapshot) -> None:
        if snapshot is not None:
            state = json.loads(snapshot[0])
            self.values = {int(k): v for k, v in state["values"].items()}
            self.applied = state["applied"]
            self.journal.write("".join(op_id + "\n" for op_id in self.applied))
            self.journal.flush()
            with open(os.environ["JOURNAL"] + ".starts", "a") as starts:  # the run counts these
                starts.write(f"from a snapshot of {len(self.applied)} requests\n")

    def on_take_snapshot(self, cluster, snapshot) -> None:
        snapshot.write(json.dumps({"values": self.values, "applied": self.applied}).encode())

    def on_session_message(self, cluster, session_id, timestamp, payload) -> None:
        op_id, op, key, a, b = payload.decode().split()
        key, a, b = int(key), int(a), int(b)
        current = self.values.get(key, 0)
        ok = True
        if op == "write":
            self.values[key] = a
        elif op == "cas":
            ok = current == a
            if ok:
                self.values[key] = b
        self.applied.append(op_id)
        self.journal.write(op_id + "\n")
        self.journal.flush()
        reply = f"{op_id} {int(ok)} {current if op == 'read' else self.values.get(key, 0)}".encode()
        # A client that is gone must not stall the cluster: a few tries, then it learns nothing (its op
        # is then of unknown outcome, which the check allows).
        for _ in range(1000):
            if cluster.offer(session_id, reply):
                break
