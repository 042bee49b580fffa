"""The fault suite's clients, a process on the client host: ``python workload.py CONFIG_JSON``.

Each of ``clients`` threads holds a cluster session (its own egress port) and runs one operation at a time
on a few registers (read, write, compare-and-set; now and then a timer or a chain of service messages,
which read their key) and on a bank of accounts (transfers, and reads of every balance), each with a
unique op id, never sent twice. An operation
is recorded with its invocation and completion times (monotonic ns) and its result, or as of unknown
outcome when no answer came within ``op_timeout`` (the request may or may not be in the log). An offer the
ingress refused for a second is not recorded at all (it never left). A closed session is replaced by a new
one, and the operations sent on it are marked ``session_ended``: the sessions are exactly once (the client's
default), so an operation of unknown outcome on a session that did not end must still be applied, once.
Runs until a line (or the end) arrives on stdin, then writes the history, a JSON object per line, to
``history``.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time

from register_service import ACCOUNTS

import sulis
from sulis.cluster import ClusterClient, ClusterError

#: Each connect that failed: "<monotonic ns> client <n>: <why>" (written beside the history).
connect_failures: list[str] = []


def settle(sent: list, committed: int | None, final: bool) -> None:
    """What the client knows of the outcome of each op sent on a session (``sent``, records): an op whose
    message number is at most ``committed`` (the cluster's count of the session's messages applied for good) was
    applied once, answered or not; with ``final`` (the cluster's count at the session's close) every later op was
    not applied and never will be. Anything else stays of unknown outcome."""
    for record in sent:
        if committed is not None and record["number"] <= committed:
            record["outcome"] = "applied"
        elif final:
            record["outcome"] = "not applied"


def drop(client: ClusterClient, sent: list, why: ClusterError) -> None:
    """Closes a client whose session ended or failed (its resources now, not at garbage collection); what was
    sent on it (``sent``, records) is marked: its session's promise ended with it, and why (``why``, for the
    reports of a long wait). The count the cluster gave with the close (``messages_committed``) settles each
    op's outcome; without it (the client gave the session up) what was not acknowledged stays unknown."""
    final = getattr(why, "messages_committed", None)
    settle(sent, final if final is not None else client.committed, final is not None)
    for record in sent:
        record["session_ended"] = True
        record["ended_by"] = f"{time.monotonic_ns()} {type(why).__name__}: {why}"
    sent.clear()
    try:
        client.close()
    except ClusterError:
        pass
    return None


def run_client(n: int, cfg: dict, driver_dir: str, history: list, stop: threading.Event) -> None:
    rng = random.Random(cfg["seed"] * 1000 + n)
    egress = f"aeron:udp?endpoint={cfg['host']}:{cfg['egress_port'] + n}"
    client = None
    seq = 0
    sessions = 0
    sent_on_session: list[dict] = []
    while not stop.is_set():
        if client is None:
            try:
                client = ClusterClient(driver_dir, cfg["ingress"], egress, message_timeout=5.0)
                sessions += 1
            except ClusterError as e:
                connect_failures.append(f"{time.monotonic_ns()} client {n}: {e}")
                time.sleep(0.2)
                continue
        seq += 1
        op_id = f"c{n}-{seq}"
        key = rng.randrange(cfg["keys"])
        kind = rng.choices(("read", "write", "cas", "timer", "chain", "transfer", "balances"),
                           (3, 3, 3, 1, 1, 2, 1))[0]
        a, b = {"read": (0, 0), "timer": (rng.randrange(10, 1500), 0), "chain": (rng.randrange(1, 5), 0),
                "balances": (0, 0)}.get(kind, (rng.randrange(5), rng.randrange(5)))
        if kind in ("transfer", "balances"):  # the bank's accounts, not the registers
            key, a, b = (rng.randrange(ACCOUNTS), rng.randrange(ACCOUNTS), rng.randrange(1, 30)) \
                if kind == "transfer" else (0, 0, 0)
        payload = f"{op_id} {kind} {key} {a} {b}".encode()
        deadline = time.monotonic() + 1.0
        call = time.monotonic_ns()
        sent = False
        try:
            while time.monotonic() < deadline:
                if client.offer(payload) > 0:
                    sent = True
                    break
                client.poll_egress(lambda p, t: None)
                time.sleep(0.005)
        except ClusterError as e:  # the session closed (ClusterSessionClosedError) or the client failed
            client = drop(client, sent_on_session, e)
            continue
        if not sent:
            continue
        # A timer or a chain answers as a read of its key: the register history stays one of registers. The
        # op's message number in its session: its outcome is known once the cluster's committed count reaches it.
        record = {"client": n, "id": op_id, "op": "read" if kind in ("timer", "chain") else kind, "kind": kind,
                  "key": key, "a": a, "b": b, "call": call, "number": client.offered}
        sent_on_session.append(record)
        answer: list[bytes] = []

        def on_egress(p: bytes, t: int, op_id: str = op_id, answer: list = answer) -> None:
            if p.split(b" ", 1)[0] == op_id.encode():
                answer.append(p)

        deadline = time.monotonic() + cfg["op_timeout"]
        try:
            while not answer and time.monotonic() < deadline:
                if client.poll_egress(on_egress) == 0:
                    time.sleep(0.0005)
        except ClusterError as e:  # the session closed (ClusterSessionClosedError) or the client failed
            client = drop(client, sent_on_session, e)
        # Where the client stood when the op ended (its session, and the term and leader it follows): a wait
        # the checks report then says whether the client was on a session nobody answered, or between them.
        record["session"] = sessions
        if client is not None:
            record["term"], record["leader"] = client.leadership_term_id, client.leader_member_id
        if answer:
            _, ok, value = answer[0].decode().split()
            value = [int(v) for v in value.split(",")] if kind == "balances" else int(value)
            record.update({"ret": time.monotonic_ns(), "ok": ok == "1", "value": value})
        else:
            record.update({"ret": None, "ok": None, "value": None})
        history.append(record)
        time.sleep(rng.uniform(0, cfg["think"]))
    if client is not None:
        # The outcome of what is still in flight: the leader's count for it, waited for (the session kept alive).
        deadline = time.monotonic() + 10
        try:
            while client.in_flight and time.monotonic() < deadline:
                if client.poll_egress(lambda p, t: None) == 0:
                    client.send_keep_alive()
                    time.sleep(0.005)
            settle(sent_on_session, client.committed, False)
        except ClusterError as e:
            client = drop(client, sent_on_session, e)
    if client is not None:
        try:
            client.close()
        except ClusterError:
            pass


def main() -> None:
    cfg = json.loads(sys.argv[1])
    history: list[dict] = []
    stop = threading.Event()
    with sulis.MediaDriver(dir=cfg["driver_dir"], threading_mode="shared", dir_delete_on_start=True) as driver:
        threads = [threading.Thread(target=run_client, args=(n, cfg, driver.dir, history, stop), daemon=True)
                   for n in range(cfg["clients"])]
        for t in threads:
            t.start()
        print("workload running", flush=True)
        sys.stdin.readline()  # until told to stop (a line, or stdin closed)
        stop.set()
        for t in threads:
            t.join(timeout=cfg["op_timeout"] + 10)
    with open(cfg["history"], "w") as f:
        for record in history:
            f.write(json.dumps(record) + "\n")
    with open(cfg["history"] + ".connect-failures", "w") as f:
        f.writelines(line + "\n" for line in connect_failures)
    print(f"workload done: {len(history)} operations", flush=True)


if __name__ == "__main__":
    main()
