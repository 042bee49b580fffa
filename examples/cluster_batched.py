#!/usr/bin/env python3
"""A batched cluster service: accounts whose balances a one-member cluster keeps, the log handed to the
service many messages at a time.

    python examples/cluster_batched.py [--clients N] [--messages N]

Each client message is 16 bytes: an account (int64) and an amount (int64). The service defines
``on_session_messages``, so each call gets every session message the log held back to back: it reads the
payloads as one numpy array (no Python object per message), adds them to the balances with one
``numpy.add.at``, and answers every message in the batch with its account's new balance through one
``cluster.offer_batch``. State changes only from the log, so a restarted node would rebuild the same
balances from it. The clients offer their messages and check every answer against a sum they keep.
"""
from __future__ import annotations

import argparse
import socket
import tempfile
import time

import numpy as np

import sulis
from sulis.cluster import OFFER_AGAIN, ClusterClient, ClusteredService, ClusterNode

ACCOUNTS = 1_000
WINDOW = 1_000
MESSAGE = np.dtype([("account", "<i8"), ("amount", "<i8")])


class Accounts(ClusteredService):
    """Balances by account, from the log alone; each message answered with its account's new balance."""

    def __init__(self) -> None:
        self.balances = np.zeros(ACCOUNTS, np.int64)
        self.batches = 0
        self.messages = 0

    def on_session_messages(self, cluster, messages):
        offsets = np.frombuffer(messages.offsets, np.int32)
        if not np.all(np.diff(offsets) == MESSAGE.itemsize):
            raise ValueError("every message is an account and an amount, 16 bytes")
        batch = np.frombuffer(messages.data, MESSAGE)
        accounts = batch["account"] % ACCOUNTS
        # Each message's answer: its account's balance after it, in log order within the batch too: the
        # messages grouped by account (a stable sort keeps their order), a running sum within each group.
        order = np.argsort(accounts, kind="stable")
        grouped, amounts = accounts[order], batch["amount"][order]
        running = np.cumsum(amounts)
        starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
        before = np.repeat(running[starts] - amounts[starts], np.diff(np.r_[starts, len(grouped)]))
        answers = np.empty(len(batch), np.int64)
        answers[order] = self.balances[grouped] + running - before
        np.add.at(self.balances, accounts, batch["amount"])
        self.batches += 1
        self.messages += len(batch)
        sessions = np.frombuffer(messages.session_ids, np.int64)
        data = answers.tobytes()
        sent, ends = 0, np.arange(0, 8 * len(answers) + 1, 8, dtype=np.int32)
        while sent < len(answers):
            result = cluster.offer_batch(sessions[sent:], data, ends[sent:])
            sent += result
            if result.code in OFFER_AGAIN:
                cluster.idle()  # back-pressured: idle, then offer the rest
            elif result.code is not None:
                sent += 1  # NOT_CONNECTED (the client is gone), CLOSED: that answer cannot go, the rest can


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--messages", type=int, default=20_000, help="messages per client")
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    ports = []
    for _ in range(2):  # free UDP ports for the ingress and the consensus endpoint (a member alone binds it too)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    port, consensus = ports
    members = f"0,localhost:{port},localhost:{consensus},localhost:20003,localhost:0,localhost:8010"
    service = Accounts()
    with tempfile.TemporaryDirectory() as tmp, \
            sulis.MediaDriver(dir=f"{tmp}/driver") as driver, \
            sulis.Archive(f"{tmp}/archive", driver_dir=driver.dir), \
            ClusterNode(service, f"{tmp}/cluster", driver.dir, cluster_members=members,
                        service_log_fragment_limit=1000):
        clients = [ClusterClient(driver.dir, f"0=localhost:{port}", "aeron:ipc") for _ in range(a.clients)]
        work = [np.zeros(a.messages, MESSAGE) for _ in clients]
        for w in work:
            w["account"] = rng.integers(0, ACCOUNTS, a.messages)
            w["amount"] = rng.integers(-100, 101, a.messages)
        answers: list[list[int]] = [[] for _ in clients]
        t0 = time.perf_counter()
        sent = [0] * len(clients)
        while any(len(got) < a.messages for got in answers):
            for i, c in enumerate(clients):
                # At most WINDOW answers outstanding: a client that only offers fills its egress while the
                # service, answering it, waits.
                while (sent[i] < a.messages and sent[i] - len(answers[i]) < WINDOW
                       and c.offer(work[i][sent[i]].tobytes()) > 0):
                    sent[i] += 1
                c.poll_egress(lambda payload, ts, got=answers[i]: got.append(int.from_bytes(payload, "little",
                                                                                               signed=True)), 1000)
        seconds = time.perf_counter() - t0
        for c in clients:
            c.close()
    total = a.messages * len(clients)
    want = np.zeros(ACCOUNTS, np.int64)
    for w in work:
        np.add.at(want, w["account"], w["amount"])
    assert np.array_equal(service.balances, want), "the service's balances are the sums of what was sent"
    print(f"{total:,} messages from {len(clients)} clients in {seconds:.2f} s ({total / seconds:,.0f} msgs/s); "
          f"the service took them in {service.batches:,} calls ({service.messages / service.batches:.1f} a call)")
    print("cluster batched example: OK, every balance is the sum of what was sent")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
