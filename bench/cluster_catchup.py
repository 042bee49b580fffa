#!/usr/bin/env python3
"""How fast a restarted member catches up while the log moves on: three members under load, a follower
SIGKILLed and restarted.

    python bench/cluster_catchup.py                       # 3 runs (~2 min)
    python bench/cluster_catchup.py --rate 20000 --down 10 --runs 5
    python bench/cluster_catchup.py --service cluster_echo:Ledger --length 32 --rate 20000 \
        --warm 60,600 --snapshots both --runs 1          # rejoin after 1 and 10 minutes, policy on and off

Three ``sulis cluster-node`` processes on this machine (UDP over loopback, the echo service of
bench/peers/cluster_echo.py) and the sulis Python client offering ``--length``-byte messages at ``--rate`` a
second throughout. After ``--warm`` seconds a follower is SIGKILLed; ``--down`` seconds later it is restarted
on its directories, the load still on. From the restart, each run measures:

* **rejoin**: until it runs a term again (its "runs term" line), and until its commit position (the
  ``cluster-commit-pos`` counter in its driver) reaches the leader's; read every 10 ms;
* **behind**: the log it had to take, the leader's commit position at the restart less its own when it
  was killed (MB), and so the **catch-up rate** (behind / time to reach the leader, MB/s) beside the log's
  own rate under the load (MB/s): catching up moves at replay speed when the first is many times the second.

The restarted member first replays its own log through its service, then copies or catches up what it
missed from the leader's archive while the leader goes on; each run prints the steps of its output with
their times from the restart (``--steps``). Aeron's cluster is not run beside it yet (its sample node
cannot be restarted on its directories by this harness).

``--warm`` takes several lengths of load (seconds, comma-separated) and ``--snapshots`` the snapshot policy:
``on`` (the default ``snapshot_log_len``, 64 MiB), ``off`` (``--snapshot-log-len 0 --snapshot-interval 0s``: the
restarted member replays all of its log) or ``both``; a row each. ``--service cluster_echo:Ledger`` is a batched
ledger with state to snapshot (bench/peers/cluster_echo.py; ``--length 32``), as a user's service would have; the
echo services have no snapshot of their own, so the policy leaves them out.
"""
from __future__ import annotations

import argparse
import datetime
import os
import signal
import statistics
import sys
import threading
import time

import sulis
from sulis._benchkit import runner as r
from sulis._benchkit.procs import cpu_summary, remove_dir, scratch_dir
from sulis._benchkit.report import print_table
from sulis.cluster import ClusterClient, ClusterError

r.repository(__file__)
from bench.cluster_latency import SulisNode, connect  # noqa: E402

COMMIT = {name: t for t, name in sulis._native.counter_types()}["cluster-commit-pos"]


def commit_position(driver_dir: str) -> int:
    """A member's commit position (−1 while its driver has no CnC file or the counter is not there)."""
    try:
        for c in sulis.CountersReader(driver_dir).counters():
            if c["type_id"] == COMMIT:
                return c["value"]
    except Exception:  # the driver (re)starting
        pass
    return -1


class Load(threading.Thread):
    """Offers ``rate`` messages a second, polling the egress between, until stopped (a thread: the GIL is
    released inside offer and poll)."""

    def __init__(self, client: ClusterClient, rate: float, length: int) -> None:
        super().__init__(daemon=True)
        self.client, self.interval, self.payload = client, 1.0 / rate, bytes(length)
        self.stop, self.sent, self.echoed, self.error = threading.Event(), 0, 0, None

    def run(self) -> None:
        def on_echo(p, t):
            self.echoed += 1
        start = time.perf_counter()
        try:
            while not self.stop.is_set():
                due = start + self.sent * self.interval
                if time.perf_counter() >= due and self.client.offer(self.payload) > 0:
                    self.sent += 1
                if self.client.poll_egress(on_echo, 100) == 0:
                    wait = min(0.0005, due - time.perf_counter())
                    if wait > 0:
                        time.sleep(wait)
        except ClusterError as e:
            self.error = e


STEPS = ("running in", "-> CANVASS", "-> FOLLOWER_LOG_REPLICATION", "-> FOLLOWER_REPLAY", "-> FOLLOWER_CATCHUP",
         "-> FOLLOWER_LOG_INIT", "runs term", "spent", "waited", "error")


def steps(text: str, since: float) -> list[str]:
    """The member's lines of ``STEPS`` (its module's lines carry the UTC time of day) as seconds after
    ``since`` (a wall-clock time), each cut short."""
    day = datetime.datetime.fromtimestamp(since, datetime.UTC).date()
    out = []
    for line in text.splitlines():
        if not line.startswith("sulis cluster: ") or not any(s in line for s in STEPS):
            continue
        stamp, rest = line[15:].split(" ", 1)
        try:
            t = datetime.datetime.combine(day, datetime.time.fromisoformat(stamp), datetime.UTC).timestamp()
        except ValueError:
            continue
        out.append(f"{t - since:7.3f} s  {rest[:110]}")
    return out


def one_run(a, warm: float, snapshots: bool) -> dict:
    top = scratch_dir("sulis-bench-catchup-")
    members = None
    policy = () if snapshots else ("--snapshot-log-len", "0", "--snapshot-interval", "0s")
    try:
        members = SulisNode(3, ("--log-term-length", "16m", "--startup-canvass-timeout", "5s",
                                "--leader-heartbeat-interval", "100ms", "--leader-heartbeat-timeout", "2s",
                                "--election-timeout", "300ms", "--session-timeout", "60s", *policy),
                            service=a.service, parent=a.parent)
        drivers = [cmd[cmd.index("--dir") + 1] for cmd in members.cmds]
        with sulis.MediaDriver(dir=os.path.join(top, "client-driver"), threading_mode="shared") as driver:
            client = connect(driver.dir, members.endpoints, message_timeout=5.0)
            load = Load(client, a.rate, a.length)
            load.start()
            try:
                time.sleep(warm)
                leader = client.leader_member_id
                victim = (leader + 1) % 3
                before = commit_position(drivers[victim])
                log_at_kill = commit_position(drivers[leader])
                os.kill(members.procs[victim].pid, signal.SIGKILL)
                members.procs[victim].wait(timeout=60)
                killed = time.monotonic()
                time.sleep(a.down)
                with open(members.logs[victim], errors="replace") as f:
                    said_before = f.read()
                runs_before = said_before.count("runs term")
                target = commit_position(drivers[leader])
                log_rate = (target - log_at_kill) / (time.monotonic() - killed) / 1e6
                restarted, restarted_wall = time.monotonic(), time.time()
                members.start(victim)
                joined = reached = None
                deadline = restarted + a.timeout
                while reached is None:
                    now = time.monotonic()
                    if now > deadline:
                        raise RuntimeError(f"member {victim} did not reach {target} within {a.timeout} s "
                                           f"(at {commit_position(drivers[victim])})")
                    if load.error is not None:
                        raise RuntimeError(f"the client: {load.error}")
                    if joined is None:
                        with open(members.logs[victim], errors="replace") as f:
                            if f.read().count("runs term") > runs_before:
                                joined = now - restarted
                    # Only once it runs a term: until its driver starts again its old counters are there.
                    if joined is not None and commit_position(drivers[victim]) >= target:
                        reached = now - restarted
                    time.sleep(0.01)
                if target <= before:
                    raise RuntimeError(f"the log did not move while member {victim} was down ({before})")
                behind = (target - before) / 1e6
                with open(members.logs[victim], errors="replace") as f:
                    said = f.read()[len(said_before):]
                with open(members.logs[leader], errors="replace") as f:
                    leader_said = f.read()  # the policy's snapshots are the leader's to say
                return {"rejoin_s": joined if joined is not None else reached, "reach_s": reached,
                        "behind_mb": behind, "catchup_mb_s": behind / reached, "log_mb_s": log_rate,
                        "log_mb": target / 1e6, "snapshots": leader_said.count("takes a snapshot"),
                        "sent": load.sent, "steps": steps(said, restarted_wall)}
            finally:
                load.stop.set()
                load.join(30)
                client.close()
    finally:
        if members is not None:
            members.close()
        remove_dir(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", type=float, default=10_000, help="messages a second offered throughout")
    ap.add_argument("--length", type=int, default=100, help="message length (bytes)")
    ap.add_argument("--warm", default="3", help="seconds of load before the kill (several: comma-separated)")
    ap.add_argument("--down", type=float, default=10.0, help="seconds the follower is down")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--service", default="cluster_echo:Echo", help="bench/peers/cluster_echo.py's service")
    ap.add_argument("--snapshots", choices=("on", "off", "both"), default="on", help="the snapshot policy")
    ap.add_argument("--parent", default=None, help="where the members' directories go (/dev/shm if not given)")
    ap.add_argument("--steps", action="store_true", help="print the restarted member's steps, timed")
    a = ap.parse_args()
    print(cpu_summary())
    policies = {"on": [True], "off": [False], "both": [True, False]}[a.snapshots]
    keys = ("rejoin_s", "reach_s", "behind_mb", "catchup_mb_s", "log_mb_s", "log_mb", "snapshots")
    rows = []
    for warm in (float(w) for w in a.warm.split(",")):
        for snapshots in policies:
            runs = []
            for i in range(a.runs):
                result = one_run(a, warm, snapshots)
                runs.append(result)
                shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items() if k != "steps"}
                print(f"load {warm:g} s, snapshots {'on' if snapshots else 'off'}, run {i + 1}: {shown}", flush=True)
                if a.steps:
                    print("\n".join(result["steps"]), flush=True)
            rows.append([f"{warm:g} s", "on" if snapshots else "off"]
                        + [f"{statistics.median(r[k] for r in runs):.3f}" for k in keys])
    print_table(["load", "snapshots", *keys], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
