"""A Jepsen-style fault run of a sulis cluster across network namespaces.

Each member is a ``sulis cluster-node`` process on a host of its own (``NetnsHosts``: a namespace per host on
one bridge), its service the register of ``register_service.py``; the clients (``workload.py``) run on a
host of their own. While they run, a nemesis hurts the cluster, one fault at a time, each healed before the
next: SIGKILL of the leader, of a follower, of a majority (each restarted), of every member (a
whole-cluster restart); SIGSTOP of the leader for longer than the heartbeat timeout, and for half of it; the
leader cut off (both ways, only its inbound side, or only the consensus stream) with nftables; random packet
loss on every member; a follower's recording log damaged while it is down (it must refuse to start; then
it is replaced, started empty); a member's wall clock a minute off (restarted under ``clock_skew.c``, an
LD_PRELOAD shim; the leader half the time; put right by the next such fault); a member's disk full (its
cluster and archive directories moved onto a small ext4 file system, loop-mounted, then filled: it must
stop, naming the disk's error; the leader half the time; then moved back and restarted); and, not a fault,
a snapshot (every member's, at one position; members killed later start from it). Then:

- the history is linearizable (porcupine, ``lincheck/``), so no answered write is lost or seen out of order;
- every member applied the same requests in the same order (their journals are equal), each answered
  request once, none twice;
- every applied timer fired once, not before its deadline, and every applied chain of service messages
  came link by link, once each, in order (both written to the same journals, through kills and
  snapshots);
- at most one leader per leadership term (from what each member said it ran);
- the bank's transfers: the log's order explains every answer and keeps real time (so that history is
  linearizable too, the log its witness), and no money is made or lost.

``run(...)`` returns the figures and raises ``AssertionError`` naming what broke. ``python
tests/clusterfaults/run.py`` is the long run; ``tests/system/test_cluster_faults.py`` the short one in CI.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # netutil

import sulis  # noqa: E402
from netutil.disk import fill, small_ext4  # noqa: E402
from netutil.netns import NetnsHosts  # noqa: E402
from netutil.nft import NftLoss, run_nft  # noqa: E402
from netutil.procs import KERNEL_STALL, threads_in  # noqa: E402

from .register_service import ACCOUNTS, OPENING  # noqa: E402

CLI = [sys.executable, "-m", "sulis.cli"]
PORTS = {"ingress": 9010, "consensus": 9011, "log": 9012, "archive": 9014}
ROLE_TYPE_ID, LEADER = 201, 2
DUPLICATES_TYPE_ID = {name: t for t, name in sulis._native.counter_types()}["cluster-duplicate-messages"]
ELECTION_STATE_TYPE_ID, ELECTION_CLOSED = 207, 17
#: A failed leader is noticed within 2 s (Aeron's default is 10 s); terms long enough for a follower fed
#: at another pace (docs/cluster.md).
TIMINGS = ["--leader-heartbeat-interval", "100ms", "--leader-heartbeat-timeout", "2s", "--election-timeout",
           "300ms", "--election-status-interval", "50ms", "--startup-canvass-timeout", "5s",
           "--log-term-length", "1m", "--session-timeout", "10s"]
NEMESES = ("kill-leader", "kill-follower", "pause-leader", "pause-leader-briefly", "isolate-leader", "inbound-cut",
           "consensus-cut", "loss", "kill-majority", "restart-all", "snapshot", "corrupt-log", "skew-clock",
           "fill-disk")
#: How far ``skew-clock`` moves a member's wall clock (ms), one way or the other.
CLOCK_SKEW_MS = 60_000
#: The members' leader heartbeat timeout (TIMINGS), in seconds: a brief pause stays under half of it.
HEARTBEAT_TIMEOUT_S = 2.0
SNAPSHOT_COUNT_TYPE_ID, SNAPSHOT_TOGGLE = 205, 4
#: What a member says of a full disk: the file system's error, or the archive's refusal below its threshold.
DISK_ERROR = re.compile(r"No space left on device|low storage")


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SULIS_")}
    env.update(extra)
    return env


def build_lincheck(dest: Path) -> Path:
    """Builds the porcupine checker (``go build``; the module cache keeps porcupine after the first time)."""
    out = dest / "lincheck"
    proc = subprocess.run(["go", "build", "-o", str(out), "."], cwd=HERE / "lincheck", capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"building the linearizability checker failed: {proc.stderr.strip()}")
    return out


def build_clock_shim(dest: Path) -> Path:
    """Builds ``clock_skew.c`` (``cc``): an LD_PRELOAD library moving CLOCK_REALTIME by
    ``SULIS_TEST_CLOCK_SKEW_MS``."""
    out = dest / "clock_skew.so"
    proc = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(HERE / "clock_skew.c"), "-ldl"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"building the clock-skew shim failed: {proc.stderr.strip()}")
    return out


class Cut:
    """Drops a host's UDP on its link (``sv0``) with nftables: ``both`` ways, only ``inbound``, or only the
    consensus stream's port both ways; ``heal()`` removes the table."""

    _n = 0

    def __init__(self, ns: str, how: str):
        Cut._n += 1
        self.ns, self.table = ns, f"sulis_cut_{os.getpid()}_{Cut._n}"
        rules = []
        if how in ("both", "inbound"):
            rules.append('input iifname "sv0" meta l4proto udp counter drop')
        if how == "both":
            rules.append('output oifname "sv0" meta l4proto udp counter drop')
        if how == "consensus":
            port = PORTS["consensus"]
            rules.append(f'input iifname "sv0" udp dport {port} counter drop')
            rules.append(f'output oifname "sv0" udp dport {port} counter drop')
        script = [f"add table inet {self.table}"]
        for hook in ("input", "output"):
            script.append(f"add chain inet {self.table} {hook} "
                          f"{{ type filter hook {hook} priority -20; policy accept; }}")
        script += [f"add rule inet {self.table} {r}" for r in rules]
        run_nft(ns, "-f", "-", input="\n".join(script) + "\n")

    def heal(self) -> None:
        run_nft(self.ns, "delete", "table", "inet", self.table)


@dataclass
class Member:
    id: int
    host: str
    base: Path
    members: str
    proc: subprocess.Popen | None = None
    paused: bool = False
    starts: int = 0
    #: More environment for its process (the clock-skew shim while skewed).
    env: dict = field(default_factory=dict)
    #: Its wall clock was skewed once: the times on its lines are not this machine's.
    ever_skewed: bool = False

    @property
    def journal(self) -> Path:
        return self.base / "journal.txt"

    @property
    def stderr_path(self) -> Path:
        return self.base / "stderr.txt"

    @property
    def driver_dir(self) -> Path:
        return self.base / "driver"

    def command(self) -> list[str]:
        return [*CLI, "cluster-node", "--service", "register_service:Register", "--cluster-dir",
                str(self.base / "cluster"), "--archive-dir", str(self.base / "archive"), "--dir",
                str(self.driver_dir), "--cluster-members", self.members, "--member-id", str(self.id), *TIMINGS]

    def is_up(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def starts_from_snapshot(self) -> int:
        path = self.base / "journal.txt.starts"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def journal_lines(self) -> list[str]:
        try:
            return self.journal.read_text().splitlines()
        except FileNotFoundError:
            return []

    def counter(self, type_id: int) -> int | None:
        if not self.is_up():
            return None
        try:
            rows = sulis._native.CountersReader(str(self.driver_dir)).counters()
        except sulis._native.SulisError:
            return None
        return next((c["value"] for c in rows if c["type_id"] == type_id), None)

    def role(self) -> int | None:
        return self.counter(ROLE_TYPE_ID)


@dataclass
class FaultRun:
    hosts: NetnsHosts
    base: Path
    size: int
    members: list[Member] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    snapshots: int = 0
    #: The clock-skew shim (``skew-clock``), built when the schedule has that nemesis.
    clock_shim: Path | None = None
    #: The wall clock minus the monotonic one (to read the members' timed lines against the events).
    wall_offset: float = field(default_factory=lambda: time.time() - time.monotonic())

    def __post_init__(self) -> None:
        spec = "|".join(f"{i},{self.hosts.addr(f'n{i}')}:{PORTS['ingress']},{self.hosts.addr(f'n{i}')}:"
                        f"{PORTS['consensus']},{self.hosts.addr(f'n{i}')}:{PORTS['log']},"
                        f"{self.hosts.addr(f'n{i}')}:0,{self.hosts.addr(f'n{i}')}:{PORTS['archive']}"
                        for i in range(self.size))
        for i in range(self.size):
            base = self.base / f"member-{i}"
            base.mkdir(parents=True, exist_ok=True)
            self.members.append(Member(i, f"n{i}", base, spec))

    def log(self, what: str) -> None:
        self.events.append(f"{time.monotonic():.3f} {what}")

    def _spawn(self, m: Member) -> subprocess.Popen:
        with open(m.stderr_path, "a") as err:
            return self.hosts.popen(m.host, m.command(),
                                    env=clean_env(PYTHONPATH=str(HERE), JOURNAL=str(m.journal), **m.env),
                                    cwd=str(HERE), stdout=subprocess.DEVNULL, stderr=err)

    def start(self, m: Member) -> None:
        runs = m.stderr().count("running in")
        began = time.monotonic()
        m.proc = self._spawn(m)
        m.paused, m.starts = False, m.starts + 1
        # Beside busy CPUs a restarted member took over 60 s, its process still in the kernel.
        deadline = time.monotonic() + KERNEL_STALL
        while m.stderr().count("running in") <= runs:
            if m.proc.poll() is not None or time.monotonic() > deadline:
                threads = threads_in(m.proc.pid) if m.proc.poll() is None else "exited"
                raise AssertionError(f"member {m.id} did not start: {threads}\n{m.stderr()[-3000:]}")
            time.sleep(0.05)
        self.log(f"started member {m.id} (running {time.monotonic() - began:.1f} s after its spawn)")

    def kill(self, m: Member) -> None:
        began = time.monotonic()
        if m.is_up():
            if m.paused:
                os.kill(m.proc.pid, signal.SIGCONT)
            m.proc.kill()
            # A SIGKILLed member leaves once the kernel has written back what it had mapped: on starved CPUs,
            # from the loop-mounted disk of fill-disk, that took more than 10 s (a busy run failed here).
            try:
                m.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"member {m.id} (pid {m.proc.pid}) still there 120 s after SIGKILL, in state "
                                     f"{process_state(m.proc.pid)}") from None
        self.log(f"killed member {m.id} (gone {time.monotonic() - began:.1f} s after SIGKILL)")

    def leader(self, timeout: float = 30.0) -> Member:
        """The member that leads, once exactly one running, unpaused member says it does, in the newest term
        any member runs (a leader cut off may still say it leads an older one)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            newest = max(last_term(m) for m in self.members)
            leading = [m for m in self.members if not m.paused and m.role() == LEADER]
            if len(leading) == 1 and last_term(leading[0]) == newest:
                return leading[0]
            time.sleep(0.05)
        raise AssertionError(f"no single leader within {timeout} s: roles "
                             f"{[(m.id, m.role(), m.paused) for m in self.members]}")

    def successor(self, gone: Member, term: int) -> Member:
        """The member that leads a term after ``term`` while ``gone`` (its leader) is paused or cut off: the
        fault lasts until the others have elected one (60 s at most), so that the return is tested."""
        deadline = time.monotonic() + 60
        while True:
            others = [m for m in self.members if m is not gone and not m.paused and m.role() == LEADER]
            if len(others) == 1 and last_term(others[0]) > term:
                self.log(f"member {others[0].id} leads term {last_term(others[0])} while member {gone.id} is away")
                return others[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no member but {gone.id} led a term after {term} within 60 s: " + str(
                    {m.id: (m.role(), last_term(m)) for m in self.members}))
            time.sleep(0.05)

    def marks(self) -> dict[int, int]:
        """How much each member has said so far (to read what it says next)."""
        return {m.id: len(m.stderr()) for m in self.members}

    def rejoins_without_an_election(self, back: Member, leader: Member, mark: dict[int, int]) -> None:
        """A leader back from a pause or a cut follows the term elected while it was away: the term's leader
        ignores any request for votes it makes on its stale log (Raft's leader stickiness) and it finds no
        quorum to stand with (the canvass counts only members that canvass now: Raft's pre-vote). Before,
        the healthy leader stepped down for it and clients lost 1-6 s for nothing."""
        term = last_term(leader)
        deadline = time.monotonic() + 60
        while True:
            joined = [int(t) for _m, t, _l in TERM_LINE.findall(back.stderr()[mark[back.id]:]) if int(t) >= term]
            if joined:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"member {back.id} did not join term {term} (or a later one) within 60 s "
                                     f"of its return:\n{back.stderr()[mark[back.id]:][-3000:]}")
            time.sleep(0.05)
        said = leader.stderr()[mark[leader.id]:]
        left = re.search(rf"leaves term {term}: (.*)", said)
        # Only a leader that lost its own followers meanwhile (CPUs starved past the heartbeat timeout) may
        # have left its term; never for the returning member's request.
        assert joined[0] == term or left, f"member {back.id} joined term {joined[0]}, yet {leader.id} led {term}"
        assert not left or "a vote requested" not in left.group(1), (
            f"member {leader.id}, leader of term {term}, stepped down for member {back.id}'s return:\n"
            f"{said[-3000:]}")
        self.log(f"member {back.id} back in term {joined[0]} (leader {leader.id} led term {term})")

    def nemesis(self, kind: str, hold: float, rng: random.Random) -> None:
        """One fault, held for ``hold`` seconds, then healed."""
        leader = self.leader()
        if kind == "kill-leader":
            self.kill(leader)
            time.sleep(hold)
            self.start(leader)
        elif kind == "kill-follower":
            follower = rng.choice([m for m in self.members if m is not leader])
            self.kill(follower)
            time.sleep(hold)
            self.start(follower)
        elif kind in ("pause-leader", "pause-leader-briefly"):
            # Longer than the heartbeat timeout (the others elect a leader meanwhile), or well under it (the
            # term goes on: the others must not have taken the pause for a death).
            pause = hold if kind == "pause-leader" else HEARTBEAT_TIMEOUT_S / 2
            term = last_term(leader)
            os.kill(leader.proc.pid, signal.SIGSTOP)
            leader.paused = True
            self.log(f"paused member {leader.id} for {pause} s")
            time.sleep(pause)
            successor = self.successor(leader, term) if kind == "pause-leader" else None
            mark = self.marks()
            os.kill(leader.proc.pid, signal.SIGCONT)
            leader.paused = False
            self.log(f"resumed member {leader.id}")
            if successor is not None:
                self.rejoins_without_an_election(leader, successor, mark)
        elif kind in ("isolate-leader", "inbound-cut", "consensus-cut"):
            how = {"isolate-leader": "both", "inbound-cut": "inbound", "consensus-cut": "consensus"}[kind]
            term = last_term(leader)
            cut = Cut(self.hosts.ns(leader.host), how)
            self.log(f"cut member {leader.id} off ({how})")
            time.sleep(hold)
            successor = self.successor(leader, term) if how == "both" else None
            mark = self.marks()
            cut.heal()
            self.log(f"healed member {leader.id}")
            if successor is not None:
                self.rejoins_without_an_election(leader, successor, mark)
        elif kind == "loss":
            losses = [NftLoss(self.hosts.ns(m.host), 10, hook="both") for m in self.members]
            self.log("10% loss on every member")
            time.sleep(hold)
            dropped = sum(loss.dropped() for loss in losses)
            for loss in losses:
                loss.remove()
            self.log(f"loss healed ({dropped} packets dropped)")
        elif kind == "kill-majority":
            others = [m for m in self.members if m is not leader]
            victims = [leader, *rng.sample(others, self.size // 2)]
            for m in victims:
                self.kill(m)
            time.sleep(hold)
            for m in victims:
                self.start(m)
        elif kind == "snapshot":
            # Not a fault: the members snapshot at the action's position, and the kills after it make
            # members start from their snapshots. The leader and a majority count one more snapshot (the
            # counter counts since the member's start); a member that joins the term by catching up past the
            # action, or a later term, takes none, as Aeron's module snapshots only for an action it applies
            # in its own term outside an election.
            # A leader that loses its term before the action is in the log takes none: the snapshot is asked
            # again of the next one, as an operator would.
            before = {m.id: m.counter(SNAPSHOT_COUNT_TYPE_ID) or 0 for m in self.members if m.is_up()}
            term = last_term(leader)
            sulis._native.set_cluster_toggle(str(leader.driver_dir), SNAPSHOT_TOGGLE)
            deadline = time.monotonic() + 30

            def ask(m: Member, why: str) -> None:
                try:
                    sulis._native.set_cluster_toggle(str(m.driver_dir), SNAPSHOT_TOGGLE)
                    self.log(f"snapshot asked {why} (member {m.id})")
                except sulis._native.SulisError:
                    pass  # a request still pending there (a leader re-elected with it): it acts on that one

            def took(m: Member) -> bool:
                return (m.counter(SNAPSHOT_COUNT_TYPE_ID) or 0) > before[m.id]

            asked = time.monotonic()
            while not took(leader) or sum(took(m) for m in self.members if m.id in before) <= self.size // 2:
                if not took(leader) and (leader.role() != LEADER or last_term(leader) != term):
                    leader = self.leader(max(1.0, deadline - time.monotonic()))
                    term = last_term(leader)
                    ask(leader, "of the next leader")
                    asked = time.monotonic()
                elif took(leader) and time.monotonic() - asked > 5.0:
                    # Followers still catching up (after a restart) pass over the action and take none, as
                    # Aeron's do: the snapshot is asked again, as an operator would, once they have joined.
                    ask(leader, "again: no majority took the first")
                    asked = time.monotonic()
                if time.monotonic() > deadline:
                    raise AssertionError(f"no majority took the snapshot of term {term} within 30 s: " + str(
                        {m.id: (before.get(m.id), m.counter(SNAPSHOT_COUNT_TYPE_ID), last_term(m))
                         for m in self.members}))
                time.sleep(0.02)
            passed = sorted(m.id for m in self.members if m.id in before and not took(m))
            later = f", not (yet) by {passed}" if passed else ""
            self.log(f"snapshot of term {term} asked of member {leader.id}, taken by members "
                     f"{sorted(set(before) - set(passed))}{later}")
            self.snapshots += 1
            time.sleep(hold)
        elif kind == "corrupt-log":
            # A follower's recording.log damaged while it is down (its first entry's type overwritten): it must
            # refuse to start, naming the file; then it is replaced as docs/cluster.md says (its directories
            # wiped, started empty: it copies the log from the leader and replays it all).
            victim = rng.choice([m for m in self.members if m is not leader])
            self.kill(victim)
            log = victim.base / "cluster" / "recording.log"
            data = bytearray(log.read_bytes())
            data[44:48] = b"\x7f\x7f\x7f\x7f"
            log.write_bytes(bytes(data))
            said_before = len(victim.stderr())
            refused = self._spawn(victim)
            code = refused.wait(timeout=120)
            said = victim.stderr()[said_before:]
            assert code != 0 and str(log) in said and "damaged" in said, (
                f"member {victim.id} on a damaged recording.log: exit {code}\n{said[-2000:]}")
            self.log(f"member {victim.id} refused its damaged recording.log")
            for d in ("cluster", "archive", "driver"):
                shutil.rmtree(victim.base / d, ignore_errors=True)
            time.sleep(hold)
            self.start(victim)
            self.log(f"member {victim.id} replaced: started empty")
        elif kind == "skew-clock":
            # Cluster time is the leader's wall clock: a member a minute behind or ahead leads or follows, and
            # the timers (due in cluster time) must still fire once each, none early, none left unfired at the
            # end (the checks); a member already skewed is put right instead.
            victim = leader if rng.random() < 0.5 else rng.choice([m for m in self.members if m is not leader])
            self.kill(victim)
            if victim.env:
                victim.env = {}
                what = "its clock put right"
            else:
                skew = rng.choice((-CLOCK_SKEW_MS, CLOCK_SKEW_MS))
                victim.env = {"LD_PRELOAD": str(self.clock_shim), "SULIS_TEST_CLOCK_SKEW_MS": str(skew)}
                victim.ever_skewed = True
                what = f"its clock {skew // 1000:+d} s off"
            time.sleep(min(hold, 1.0))
            self.start(victim)
            self.log(f"member {victim.id} restarted, {what}")
        elif kind == "fill-disk":
            # The member's directories go onto a small disk, which then fills. A member that runs a term stops,
            # naming the archive's error; one in an election (a restarted member copying what it missed) keeps
            # retrying with back-off, saying why, and goes on by itself once there is space again. Either way
            # it acknowledges nothing it could not record (the checks). Then it moves back (killed, restarted).
            victim = leader if rng.random() < 0.5 else rng.choice([m for m in self.members if m is not leader])
            self.kill(victim)
            # Its image in memory: on the machine's one disk, the 64 MB written to fill it held up every other
            # member's fsync (a busy run saw a vote's node-state sync take 26 s right after), which separate
            # hosts would not share.
            with small_ext4(64, "/dev/shm" if os.path.isdir("/dev/shm") else str(self.base)) as mnt:
                for d in ("cluster", "archive"):
                    move_dir(victim.base / d, Path(mnt) / d)
                    os.symlink(Path(mnt) / d, victim.base / d)
                said_before = len(victim.stderr())
                # Under the archive's low-storage threshold (128 MB) from the start: lowered, so the disk fills
                # rather than the archive refusing the recording it starts.
                victim.env = {**victim.env, "SULIS_ARCHIVE_LOW_STORAGE_SPACE_THRESHOLD": "1m"}
                self.start(victim)
                filler = fill(mnt)
                self.log(f"member {victim.id}'s disk filled (it {'led' if victim is leader else 'followed'} "
                         f"when killed)")

                def said() -> str:
                    return victim.stderr()[said_before:]

                deadline = time.monotonic() + 60
                while not DISK_ERROR.search(said()):
                    if time.monotonic() > deadline or not victim.is_up():
                        raise AssertionError(f"member {victim.id} on a full disk did not say so within 60 s "
                                             f"(up: {victim.is_up()}):\n{said()[-3000:]}")
                    time.sleep(0.05)
                # A member that runs a term stops; one still in its election goes back to it. Which one is a state
                # to wait for, not a time: a busy CI run saw a member that had failed to join its log as leader
                # still up, its role LEADER, 1 s after it said so (the process was closing).
                deadline = time.monotonic() + 30
                while victim.is_up() and victim.role() == LEADER:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"member {victim.id} leads on a full disk for 30 s:\n{said()[-3000:]}")
                    time.sleep(0.05)
                retried = victim.is_up()
                if retried:
                    # Still in its election: one that ended it (just now, with nothing written yet) must stop
                    # at its first write, not run a term it cannot record (bounded for a hang, not a speed).
                    deadline = time.monotonic() + 30
                    while victim.counter(ELECTION_STATE_TYPE_ID) == ELECTION_CLOSED:
                        assert time.monotonic() < deadline, \
                            f"member {victim.id} runs a term on a full disk:\n{said()[-3000:]}"
                        time.sleep(0.05)
                    self.log(f"member {victim.id} retries its election on its full disk")
                else:
                    assert victim.proc.returncode != 0, said()[-3000:]
                    self.log(f"member {victim.id} stopped on its full disk (exit {victim.proc.returncode})")
                time.sleep(hold)
                os.remove(filler)
                if victim.is_up():
                    # Not 30 s: on starved CPUs a member's sync of its recording log on the loop-mounted disk,
                    # just emptied, took 35 s once (its module said so: "spent 35185 ms in one duty cycle").
                    runs = said().count("runs term")
                    deadline = time.monotonic() + 120
                    while said().count("runs term") <= runs:
                        if time.monotonic() > deadline:
                            raise AssertionError(f"member {victim.id} did not go on within 120 s of space again:\n"
                                                 f"{said()[-3000:]}")
                        time.sleep(0.05)
                    self.log(f"member {victim.id} went on by itself with space again")
                elif retried:
                    # It stopped while the disk was full, after retrying (a term it then ran could not be
                    # recorded): loudly, as a member running a term does.
                    assert victim.proc.returncode != 0 and DISK_ERROR.search(said()[-1500:]), said()[-3000:]
                    self.log(f"member {victim.id} then stopped on its full disk (exit {victim.proc.returncode})")
                self.kill(victim)
                victim.env.pop("SULIS_ARCHIVE_LOW_STORAGE_SPACE_THRESHOLD")
                for d in ("cluster", "archive"):
                    os.unlink(victim.base / d)
                    move_dir(Path(mnt) / d, victim.base / d)
            self.start(victim)
            self.log(f"member {victim.id} restarted off the small disk")
        elif kind == "restart-all":
            for m in self.members:
                self.kill(m)
            time.sleep(min(hold, 1.0))
            for m in self.members:
                self.start(m)
        else:
            raise ValueError(f"unknown nemesis {kind!r}: one of {', '.join(NEMESES)}")

    def stop(self) -> list[str]:
        """SIGTERMs every member; returns what went wrong (a member that did not exit 0 in 20 s)."""
        stopped = []
        for m in self.members:
            if m.is_up():
                if m.paused:
                    os.kill(m.proc.pid, signal.SIGCONT)
                m.proc.send_signal(signal.SIGTERM)
                stopped.append(m)
        wrong = []
        for m in stopped:
            try:
                if m.proc.wait(timeout=20) != 0:
                    wrong.append(f"member {m.id} exited {m.proc.returncode}:\n{m.stderr()[-1500:]}")
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait(timeout=10)
                wrong.append(f"member {m.id} did not stop within 20 s of SIGTERM")
        return wrong


def process_state(pid: int) -> str:
    """A process's state and where in the kernel it waits (``/proc``), for a message."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        state = stat.rsplit(")", 1)[1].split()[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip() or "-"
        return f"{state}, waiting in {wchan}"
    except OSError as e:
        return f"unknown ({e})"


def move_dir(src: Path, dst: Path) -> None:
    """Moves a directory across file systems, keeping sparse files sparse (an archive's segments are)."""
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True, capture_output=True)
    shutil.rmtree(src)


TERM_LINE = re.compile(r"member (\d+) runs term (\d+) with leader (\d+)")
#: The same line with the time of day (UTC) the module put before it.
TIMED_TERM_LINE = re.compile(r"(\d\d):(\d\d):(\d\d\.\d{3}) member \d+ runs term (\d+) with leader \d+")


def last_term(m: Member) -> int:
    """The latest term the member said it runs (-1 before any)."""
    return max((int(term) for _member, term, _leader in TERM_LINE.findall(m.stderr())), default=-1)


def leaders_by_term(members: list[Member]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for m in members:
        for _member, term, leader in TERM_LINE.findall(m.stderr()):
            out.setdefault(int(term), set()).add(int(leader))
    return out


def _unsettled(journal: list[str], timer_ops: set[str], chain_ops: dict[str, int]) -> list[str]:
    """The applied timers that have not fired and chains that have not reached their last link."""
    requests = {line for line in journal if ":" not in line}
    fired = {line.split(":", 1)[1] for line in journal if line.startswith(("fired:", "early:"))}
    last_links = {line.split(":")[1] for line in journal if line.startswith("link:") and line.endswith(":1")}
    return sorted((requests & timer_ops) - fired) + sorted((requests & chain_ops.keys()) - last_links)


def _check_timers_and_chains(journal: list[str], timer_ops: set[str], chain_ops: dict[str, int]) -> dict:
    """Each applied timer fired once, after it was scheduled and not before its deadline; each applied chain's
    links came once each, in order, after the request; nothing else fired or came."""
    where = {line: i for i, line in enumerate(journal) if ":" not in line}
    fired: dict[str, int] = {}
    links: dict[str, list[int]] = {}
    for i, line in enumerate(journal):
        kind, _, rest = line.partition(":")
        if not rest:
            continue
        assert kind in ("fired", "link"), f"journal line {i}: {line} (a timer early, or one never scheduled)"
        op_id = rest.split(":")[0]
        assert op_id in where and where[op_id] < i, f"journal line {i}: {line} before (or without) its request"
        if kind == "fired":
            assert op_id in timer_ops and op_id not in fired, f"journal line {i}: {line}: not a timer, or fired twice"
            fired[op_id] = i
        else:
            assert op_id in chain_ops, f"journal line {i}: {line}: not a chain"
            links.setdefault(op_id, []).append(int(rest.split(":")[1]))
    for op_id, got in links.items():
        assert got == list(range(chain_ops[op_id], 0, -1)), f"chain {op_id}: links {got}, not once each in order"
    return {"timers_fired": len(fired), "chain_links": sum(len(v) for v in links.values())}


def _check_bank(applied: list[str], history: list[dict]) -> dict:
    """The bank, checked against the log as its witness: replaying the applied transfers in the log's order
    from the opening balances gives every answer the clients got (each transfer's outcome and balance, each
    read's balances), and that order keeps real time (a request answered before another was sent is before
    it in the log). Together these make the bank's history linearizable, with no search. Money is neither
    made nor lost: every read and the end hold ``ACCOUNTS * OPENING``, no balance below 0."""
    bank = {h["id"]: h for h in history if h["op"] in ("transfer", "balances")}
    balances = [OPENING] * ACCOUNTS
    expected: dict[str, tuple] = {}
    order: list[dict] = []
    refused = 0
    for op_id in applied:
        h = bank.get(op_id)
        if h is None:
            continue
        order.append(h)
        if h["op"] == "balances":
            expected[op_id] = (True, list(balances))
            continue
        source, target, amount = h["key"], h["a"], h["b"]
        ok = source != target and 0 < amount <= balances[source]
        if ok:
            balances[source] -= amount
            balances[target] += amount
        refused += not ok
        expected[op_id] = (ok, balances[source])
    assert sum(balances) == ACCOUNTS * OPENING and min(balances) >= 0, f"the bank ends with {balances}"
    answered = [h for h in bank.values() if h["ret"] is not None]
    for h in answered:
        got = (h["ok"], h["value"])
        assert got == expected[h["id"]], (
            f"{h['id']} ({h['op']} {h['key']} {h['a']} {h['b']}) was answered {got}; the log's order gives "
            f"{expected[h['id']]}")
        if h["op"] == "balances":
            assert sum(h["value"]) == ACCOUNTS * OPENING, f"{h['id']} read {h['value']}"
    # Real time: walking the log backwards, the earliest answer among the requests after each one must not
    # precede that one's sending.
    earliest_after = None
    for h in reversed(order):
        assert earliest_after is None or earliest_after[0] >= h["call"], (
            f"{earliest_after[1]} was answered before {h['id']} was sent, yet it is after it in the log")
        if h["ret"] is not None and (earliest_after is None or h["ret"] < earliest_after[0]):
            earliest_after = (h["ret"], h["id"])
    reads = sum(h["op"] == "balances" for h in order)
    return {"transfers": len(order) - reads - refused, "transfers_refused": refused, "balance_reads": reads}


def waits(events: list[str], history: list[dict]) -> dict[str, list[float]]:
    """For each nemesis, how long the clients waited for service: from the moment the fault was applied (the
    event after the ``nemesis`` line: a member killed, paused, cut off...) to the first answer to a request
    sent after it (seconds; a failover's time for a fault that ends a leader's term). The events' times and
    the history's are both this machine's monotonic clock, which network namespaces share."""
    out: dict[str, list[float]] = {}
    for i, line in enumerate(events):
        what = line.split(" ", 1)[1]
        if not what.startswith("nemesis ") or i + 1 >= len(events):
            continue
        start_ns = float(events[i + 1].split(" ", 1)[0]) * 1e9
        answers = [h["ret"] for h in history if h["ret"] is not None and h["call"] >= start_ns]
        if answers:
            out.setdefault(what.split(" ", 1)[1], []).append(round((min(answers) - start_ns) / 1e9, 2))
    return out


def elections(events: list[str], members: list[Member], wall_offset: float) -> dict[str, list[float]]:
    """For each nemesis after which a later term began (before the next one): from the moment the fault was
    applied to the first
    member's "runs term" line of a term later than any run before it (seconds; the members' lines carry the
    UTC time of day, the events this process's monotonic clock, ``wall_offset`` apart; a member whose clock
    the run skewed is left out). Free of the clients' operation timeout, which ``waits`` includes."""
    runs: list[tuple[float, int]] = []
    for m in members:
        if m.ever_skewed:
            continue
        for line in m.stderr().splitlines():
            hit = TIMED_TERM_LINE.search(line)
            if hit:
                runs.append((int(hit[1]) * 3600 + int(hit[2]) * 60 + float(hit[3]), int(hit[4])))
    out: dict[str, list[float]] = {}
    for i, line in enumerate(events):
        what = line.split(" ", 1)[1]
        if not what.startswith("nemesis ") or i + 1 >= len(events):
            continue
        applied = float(events[i + 1].split(" ", 1)[0]) + wall_offset
        # A term begun after the next fault is that fault's, not this one's.
        following = [float(e.split(" ", 1)[0]) + wall_offset for e in events[i + 1:]
                     if e.split(" ", 1)[1].startswith("nemesis ")]
        until = following[0] if following else float("inf")
        day = applied - applied % 86400
        when = [(day + t + (86400 if day + t < applied - 43200 else 0), term) for t, term in runs]
        before = max((term for at, term in when if at < applied), default=-1)
        after = [at for at, term in when if applied <= at < until and term > before]
        if after:
            out.setdefault(what.split(" ", 1)[1], []).append(round(min(after) - applied, 2))
    return out


def check(run: FaultRun, history: list[dict], lincheck: Path, history_path: Path) -> dict:
    """The checks after the faults healed; returns the figures."""
    # Every member converges on one applied sequence, in which every applied timer fired and every applied
    # chain ran to its end.
    timer_ops = {h["id"] for h in history if h.get("kind") == "timer"}
    chain_ops = {h["id"]: h["a"] for h in history if h.get("kind") == "chain"}
    deadline = time.monotonic() + 60
    while True:
        journals = [m.journal_lines() for m in run.members]
        unsettled = _unsettled(journals[0], timer_ops, chain_ops)
        if all(j == journals[0] for j in journals) and not unsettled:
            break
        if time.monotonic() > deadline:
            lengths = [len(j) for j in journals]
            prefix = all(j == journals[0][:len(j)] or journals[0] == j[:len(journals[0])] for j in journals)
            raise AssertionError(f"the members' journals did not converge within 60 s: lengths {lengths}, "
                                 f"each a prefix of another: {prefix}; timers not fired or chains not ended: "
                                 f"{unsettled[:10]}")
        time.sleep(0.2)
    figures = _check_timers_and_chains(journals[0], timer_ops, chain_ops)
    applied = [line for line in journals[0] if ":" not in line]
    figures["duplicates_applied"] = len(applied) - len(set(applied))
    assert not figures["duplicates_applied"], (
        f"requests applied twice: {sorted(op for op, n in Counter(applied).items() if n > 1)[:10]}")
    # The resends the leaders dropped as already in their logs (each member's count since its last start).
    figures["resends_dropped"] = sum(m.counter(DUPLICATES_TYPE_ID) or 0 for m in run.members)
    # Every member is up and went on: none stopped (a member that must restart says so and exits).
    for m in run.members:
        assert m.is_up(), f"member {m.id} is not running:\n{m.stderr()[-2000:]}"
        assert "must restart" not in m.stderr(), f"member {m.id}:\n{m.stderr()[-2000:]}"
    # Each client's requests were applied in the order it sent them (a session's order), and only
    # requests a client sent were applied.
    invoked = {h["id"] for h in history}
    last_seq: dict[str, int] = {}
    for op_id in applied:
        client, seq = op_id.split("-")
        assert op_id in invoked, f"{op_id} was applied but never sent (or its record was lost)"
        assert seq.isdigit() and int(seq) > last_seq.get(client, 0), (
            f"{op_id} was applied after {client}-{last_seq.get(client)}: out of its session's order")
        last_seq[client] = int(seq)
    applied_set = set(applied)
    answered = [h for h in history if h["ret"] is not None]
    missing = [h["id"] for h in answered if h["id"] not in applied_set]
    assert not missing, f"answered requests missing from the log: {missing[:10]}"
    # Exactly once: a request of unknown outcome whose session did not end was resent to each new leader
    # until committed, so it is in the log too (once: checked above).
    unknown = [h for h in history if h["ret"] is None]
    lost = [h["id"] for h in unknown if not h.get("session_ended") and h["id"] not in applied_set]
    assert not lost, f"requests of sessions that stayed open, never applied: {lost[:10]}"
    figures["unknown_applied"] = sum(h["id"] in applied_set for h in unknown)
    figures["unknown_of_ended_sessions"] = sum(bool(h.get("session_ended")) for h in unknown)
    # Each op's outcome as its client learnt it without an answer: the cluster's committed count for the
    # session reached the op's number (applied), or the count it gave with the session's close did not (not
    # applied, never will be). Both must be what the log holds.
    said_applied = [h["id"] for h in history if h.get("outcome") == "applied" and h["id"] not in applied_set]
    assert not said_applied, f"acknowledged as committed, never applied: {said_applied[:10]}"
    said_not = [h["id"] for h in history if h.get("outcome") == "not applied" and h["id"] in applied_set]
    assert not said_not, f"told not applied at the session's close, but applied: {said_not[:10]}"
    # Answers lost (at most once across a leader change) whose outcome the count acknowledged; outcomes the
    # close settled; and what stayed unknown, by why its session ended (none on a session that stayed open).
    figures["answers_lost_acknowledged"] = sum(h.get("outcome") == "applied" for h in unknown)
    figures["unanswered_not_applied"] = sum(h.get("outcome") == "not applied" for h in unknown)
    unsettled: dict[str, int] = {}
    for h in history:
        if "outcome" not in h:
            why = "session open" if not h.get("session_ended") else (
                "no leader reached" if "no leader reached" in h["ended_by"] else h["ended_by"].split(": ")[-1])
            unsettled[why] = unsettled.get(why, 0) + 1
    figures["outcome_unknown"] = unsettled
    assert "session open" not in unsettled, f"ops of sessions that stayed open with no outcome: {unsettled}"
    # At most one leader per term.
    terms = leaders_by_term(run.members)
    split = {t: sorted(ls) for t, ls in terms.items() if len(ls) > 1}
    assert not split, f"more than one leader in a term: {split}"
    # The bank: the log's order explains every answer and keeps real time; no money made or lost.
    figures.update(_check_bank(applied, history))
    # The registers: linearizable (porcupine, by key).
    registers = history_path.with_name("history-registers.jsonl")
    registers.write_text("".join(json.dumps(h) + "\n" for h in history if h["op"] in ("read", "write", "cas")))
    proc = subprocess.run([str(lincheck), "-timeout", "120s", str(registers)], capture_output=True, text=True,
                          timeout=300)
    verdict = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0, f"linearizability: {verdict} (history {registers})"
    waited = waits(run.events, history)
    elected = elections(run.events, run.members, run.wall_offset)
    # Why the clients' sessions ended, a count per session: each one ended is a new connect, and its ops in
    # flight of unknown outcome (the cluster's TIMEOUT at a leader just started, as Aeron's; "election" for a
    # session whose open a new term cut back; "no leader reached", the client's own new-leader timeout).
    ended: dict[str, int] = {}
    for why in {(h["client"], h.get("session")): h["ended_by"] for h in history if h.get("ended_by")}.values():
        why = "no leader reached" if "no leader reached" in why else why.split(": ")[-1]
        ended[why] = ended.get(why, 0) + 1
    return {"operations": len(history), "answered": len(answered), "unknown": len(history) - len(answered),
            "applied": len(applied), **figures, "terms": len(terms), "waits_s": waited,
            "longest_wait_s": max((w for ws in waited.values() for w in ws), default=0.0),
            "sessions_ended": ended, "elections_s": elected,
            "longest_election_s": max((w for ws in elected.values() for w in ws), default=0.0),
            "snapshots": run.snapshots,
            "starts_from_a_snapshot": sum(m.starts_from_snapshot() for m in run.members), "lincheck": verdict}


def run(hosts: NetnsHosts, base: Path, *, size: int = 3, schedule: list[str], hold: float = 3.0,
        settle: float = 2.0, clients: int = 3, keys: int = 3, seed: int = 0, lincheck: Path | None = None,
        say=print) -> dict:
    """A whole fault run on ``hosts`` (``n0``... and ``client``): the cluster, the workload, the nemeses of
    ``schedule`` in order, then the checks. Returns the figures (with the events).

    ``base`` (the members' directories, drivers included) belongs in memory (/dev/shm), as the hosts it
    stands for would each have a disk of their own: on this machine's one disk, the members' fsyncs queue
    behind each other's writes and behind the files fill-disk moves. Busy runs with it on the disk saw a
    member's candidacy fsync take 32 s (a 35 s election) and a driver's conductor spend 19 s in one duty cycle
    (the restarted member gave up on it after 10 s). What the nemeses test, process and network faults, does
    not need the disk; the power cut is ``tests/system/test_cluster_durable.py``'s."""
    rng = random.Random(seed)
    lincheck = lincheck or build_lincheck(base)
    fr = FaultRun(hosts, base, size)
    if "skew-clock" in schedule:
        fr.clock_shim = build_clock_shim(base)
    workload = None
    try:
        for m in fr.members:
            fr.start(m)
        fr.leader(60)
        history_path = base / "history.jsonl"
        cfg = {"driver_dir": str(base / "client-driver"), "host": hosts.addr("client"), "egress_port": 9100,
               "ingress": ",".join(f"{m.id}={hosts.addr(m.host)}:{PORTS['ingress']}" for m in fr.members),
               "clients": clients, "keys": keys, "seed": seed, "op_timeout": 3.0, "think": 0.01,
               "history": str(history_path)}
        workload = hosts.popen("client", [sys.executable, str(HERE / "workload.py"), json.dumps(cfg)],
                               env=clean_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        assert workload.stdout.readline().strip() == "workload running", workload.stderr.read()
        time.sleep(settle)
        for kind in schedule:
            say(f"nemesis: {kind}")
            fr.log(f"nemesis {kind}")
            said = len(fr.events)
            fr.nemesis(kind, hold, rng)
            for event in fr.events[said:]:
                at, what = event.split(" ", 1)
                say(f"  {what} (at {float(at) - float(fr.events[said - 1].split(' ', 1)[0]):.1f} s)")
            fr.leader(60)
            time.sleep(settle)
        out, err = workload.communicate("stop\n", timeout=60)
        assert workload.returncode == 0, f"the workload failed:\n{err[-3000:]}"
        history = [json.loads(line) for line in history_path.read_text().splitlines()]
        figures = check(fr, history, lincheck, history_path)
        figures["events"] = fr.events
        wrong = fr.stop()
        assert not wrong, "after the run: " + "\n".join(wrong)
        return figures
    except BaseException:
        for m in fr.members:
            sys.stderr.write(f"--- member {m.id} (last lines)\n{m.stderr()[-2500:]}\n")
        raise
    finally:
        if workload is not None and workload.poll() is None:
            workload.kill()
        fr.stop()
