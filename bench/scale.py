#!/usr/bin/env python3
"""Growth tables: what N streams, N recordings, N cluster sessions and big recordings cost sulis, beside Aeron 1.51
(Java), in one run.

    python bench/scale.py          # every section: streams .. 5,000, recordings .. 100,000, sessions .. 1,000,
                                   # recordings of 1, 4, 16 GiB, one busy stream per term length (~25 min)
    python bench/scale.py --quick  # streams N = 10, 100; recordings 100, 1,000; sessions 10, 100 (smoke test, ~3 min)
    python bench/scale.py --only sessions                  # cluster sessions N = 10, 100, 1,000 (3 to 6 min)
    python bench/scale.py --only recordings --max-recordings 10000    # recordings up to 10,000 (~30 s)
    python bench/scale.py --only streams --streams 10,1000 --kinds ipc,udp-ports
    python bench/scale.py --only big --big-gib 1,4,16,64 --dir /data   # big recordings where the disk has room
    python bench/scale.py --only busy                      # one busy IPC stream, 64 KiB, 1 MiB, 64 MiB terms (~1 min)

Each system runs as processes of its own: sulis's media driver (``python -m sulis.cli driver``, shared
threading: a Python process hosting the Rust driver) or Aeron's (``io.aeron.driver.MediaDriver`` of
the current aeron-all jar, SHARED threading, on Java 17), each in a fresh directory under /dev/shm,
both with their default idle strategy (backoff) and sparse log files. The same sulis Python client
(``sulis.Client``, which speaks Aeron's CnC file and commands) drives both. Sections (``--only``):

streams -- for each N (``--streams``) and kind (``--kinds``), a fresh driver and a client process that
adds N streams, every log with 64 KiB terms (``term-length=64k`` in every publication's channel, so
both drivers use the same terms):

* ``ipc``: N publications (``add_publication``) on ``aeron:ipc?term-length=64k``, stream ids
  1001..1000+N, no subscription;
* ``udp-endpoint``: N streams (stream ids) on one ``aeron:udp?endpoint=127.0.0.1:P``: for each a
  subscription, then a publication;
* ``udp-ports``: N streams each on a port of its own, a subscription and a publication each.

Every driver has its defaults (both counters buffers are 8 MiB, 65,536 counters).

Before the baseline the client adds 50 warm-up streams of the same kind (``--warmup-streams``; other
stream ids, ports), untimed and kept, so that neither driver is measured cold (a JVM's JIT); the
totals below include them, the per-stream figures do not.

Rows (each for sulis and Aeron, then sulis/Aeron):

* add, per stream: the client's add calls for all N streams (subscription and publication for
  UDP), each waiting for the driver's answer, / N;
* connect (UDP): from the last add until every subscription has its image (or how many had none
  after 20 s, ``--connect-timeout``; the other rows are measured all the same). Adding the N streams
  may take 60 s (``--add-timeout``); past that the N fails, its cell says how many were added;
* /dev/shm: allocated bytes (``st_blocks``, the log files are sparse) of the driver's directory
  with the N streams; per stream: (that - the same before the N streams were added) / N;
* driver RSS: VmRSS of the driver process (the whole JVM for Aeron); per stream as /dev/shm;
* client RSS per stream: the client process's VmRSS, as above (the same client for both drivers);
* idle CPU: the driver process's utime + stime over 3 s (``--idle-seconds``) with the N streams
  idle, % of one CPU;
* busy IPC stream: while the N streams exist, one exclusive publication on
  ``aeron:ipc?term-length=1m`` in a process of its own (``offer_batch`` of 1,024 x 32 B, the
  ``sulis-pub`` role) and a subscription in another (``poll_batch(4096)``, ``sulis-sub``) on the
  same driver: the median of the subscriber's per-second counts after the first (warm-up).

recordings -- one driver and one archive process per system: sulis's archive (``python -m sulis.cli
archive``) or Aeron's ``io.aeron.archive.Archive`` (SHARED threading), both with 1 MiB segment files
(the recordings are tiny), their directory on disk (the temporary directory). Recordings are made up
to each N (100, 1,000, 10,000, 100,000; ``--max-recordings 10000`` saves the last 3 min): each one
``start_recording`` on ``aeron:ipc?term-length=64k``, the START signal, one 32 B message, its
recorded position awaited, ``stop_recording_subscription``, the STOP signal. After each (re)start of
the archive the first 50 (``--warmup-recordings``, at most half of those still to make) are untimed
(counted in N: a JIT's warm-up). Then, at each N (after 2 untimed list and replay calls):

* create, per recording: the time to make the recordings since the previous N / their count;
* list: ``list_recordings(0, N)`` until all N descriptors came (median of 5);
* restart: the archive process stopped (SIGTERM) and started again: from its start until a new
  ``ArchiveClient`` is connected and has listed one recording (a JVM's start for Aeron, a Python
  interpreter's for sulis);
* replay start: from ``start_replay`` of a recording in the middle (over ``aeron:ipc``) to its first
  fragment polled (median of 5 recordings).

sessions -- for each N (``--sessions``) and system, a one-member cluster in a process of its own, with the echo
service of bench/cluster_latency.py (``SulisNode``: ``sulis cluster-node`` with the Python ``Echo``, one call per
message, ``--max-concurrent-sessions``; ``AeronNode``: Aeron's sample ``EchoServiceNode``, a ClusteredMediaDriver and
its Java EchoService in one JVM, ``-Daeron.cluster.max.sessions``; both N + warm-up + 8), a sulis media driver
process for the client (shared threading, defaults) and one client process: the sulis Python client
(``sulis.cluster.ClusterClient``, its defaults: exactly once with a sulis cluster, Aeron's plain protocol with
Aeron's) for both clusters. The client first opens 10 sessions (``--warmup-sessions``) with 300 round trips each
(``--warmup-echoes``; the JIT's warm-up), untimed and kept; then, after the baseline:

* connect, per session: the N sessions opened one after another (each a ``ClusterClient``, its own egress
  ``aeron:udp?endpoint=localhost:0``, ingress ``aeron:udp`` to the member; each of them a client of the driver of
  its own), the total / N; and the median single connect. A session that cannot connect (10 s message timeout)
  fails the N, as do N connects not done in 300 s (``--session-connect-timeout``);
* client RSS, leader RSS, client's driver RSS per session: VmRSS after the N connects (and 0.5 s) - before, / N
  (the leader's a Python process hosting sulis's driver, archive, consensus module and service; Aeron's a JVM: its
  RSS includes its heap, which grows by GC policy, not only by what the sessions hold);
* echo p50, p99: then 1 message (32 B) a second on each session for ``--echo-seconds`` (15) after an untimed
  one, spread evenly over each second (message j on session j % N at j / N s), each timed from when it was due
  (not when sent); only sessions awaiting an echo are polled, and the client sleeps up to 100 µs when nothing
  came and nothing is due (it spins on no core the cluster needs).

The client sends no keep-alive by itself (neither does Aeron's): a session silent for 2 s gets one
(``send_keep_alive``, from a thread of the client process until the echoes start: a connect releases the GIL, so a
slow one does not starve the others), so none reaches the clusters' 10 s session timeout while the others connect;
during the echoes the messages keep the N alive. After the connects and after the echoes one poll of every session
checks that none was ended; a node that died, a session that ended or echoes missing 30 s after they were due fail
the N with the reason (a cell ``failed: ...``; what was measured before goes in the record and the run's line),
never a short result. Each run's line also says the CPU each process used during the echoes and the UDP datagrams
the machine dropped on full socket receive buffers (``RcvbufErrors``) while connecting and echoing.

growth: a row's value at the largest N / at the smallest (the largest measured, if the largest
failed: the column says so); for the busy rate its slowdown, the rate at the smallest N / at the
largest, so that in every row a smaller growth is better. The sulis/Aeron rows give the ratio at
each N and of the two growth factors. A measurement that failed (a driver refusing thousands of
streams, a time-out) is printed in its cell as ``failed: ...``, the error in full below the table.

Targets (the issue's): every growth factor at or under Aeron's in the same row (for sessions: the connect per
session); /dev/shm and driver RSS per idle stream within 1.5x Aeron's (at the largest N); one busy IPC stream >=
1.0x Aeron's driver (at every N); listing 10,000 recordings in no more time than Aeron's archive; memory per
session said in KiB (no threshold); the echo p99 at the largest N of sessions within 2x the p99 at the smallest.

big -- for each size (``--big-gib``, default 1, 4, 16 GiB; a size is skipped when ``--dir`` has less than it
plus 2 GiB free), a fresh driver and archive per system (1 GiB segment files, in ``--dir``) and one recording of
8 KiB messages on ``aeron:ipc?term-length=16m`` published by this process (``offer_batch`` of 64): record rate
(from the first offer to the recorded position at the end: the page cache absorbs most of a write of a few GiB,
the kernel's dirty limits throttle the rest); then, with the page cache written back and dropped (root only; the
table says when it was not), a replay of the whole recording (first fragment and rate) and of 256 MiB from the
middle (a seek). A replay that delivers nothing for ``--big-stall-s`` (60) fails its cell: no hang.

busy -- one busy IPC stream (as in the streams rows) alone on a fresh driver, for 64 KiB, 1 MiB and 64 MiB terms,
the median of ``--busy-runs`` (3) runs per system and term length; the target: at least Aeron's rate at each.

The JSON record goes to bench/results/scale-<timestamp>.json. Needs ``bash bench/peers/install.sh`` for the
Aeron columns.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import re
import select
import shutil
import statistics
import sys
import tempfile
import time

import sulis
from sulis._benchkit import runner as r
from sulis._benchkit.loops import publish_batch
from sulis._benchkit.procs import (
    Child,
    ChildProcess,
    Interference,
    cpu_summary,
    free_port,
    remove_dir,
    scratch_dir,
    wait_for_quiet,
)
from sulis._benchkit.report import print_table, save, verdict
from sulis.archive import RecordingSignal

r.repository(__file__)
from bench.cluster_latency import AeronNode, SulisNode  # noqa: E402
from bench.peers import aeron as aeron_java  # noqa: E402

SECTIONS = ("streams", "recordings", "sessions", "big", "busy")
KINDS = {"ipc": "N publications on aeron:ipc?term-length=64k (no subscription)",
         "udp-endpoint": "N streams on one aeron:udp?endpoint=127.0.0.1:P|term-length=64k, a subscription and "
                         "a publication each",
         "udp-ports": "N streams on N ports aeron:udp?endpoint=127.0.0.1:P_i|term-length=64k, a subscription "
                      "and a publication each"}
SYSTEMS = ("sulis", "aeron")
HOST = "127.0.0.1"
FIRST_STREAM, WARMUP_STREAM = 1001, 500_001
BUSY_CHANNEL, BUSY_STREAM = "aeron:ipc?term-length=1m", 99
REC_CHANNEL, REC_STREAM, REPLAY_STREAM = "aeron:ipc?term-length=64k", 77, 2002
JVM_START_S = 120.0
#: Untimed list and replay calls before the timed ones at each N (the archive may have just restarted).
WARMUP_CALLS = 2


# ----------------------------------------------------------------- what a process uses

def rss_bytes(pid: int) -> int:
    """VmRSS of a process (all of it: heap, code, the shared memory it touched)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        rest = f.read().decode("ascii", "replace").rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def udp_receive_drops() -> int:
    """UDP datagrams this machine dropped for a full socket receive buffer (``RcvbufErrors``; every process's)."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    return int(rows[1][rows[0].index("RcvbufErrors")]) if len(rows) >= 2 and "RcvbufErrors" in rows[0] else 0


def allocated_bytes(path: str) -> int:
    """The blocks files under ``path`` take (sparse files count what they hold, not their length)."""
    total = 0
    for top, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
    return total


# ----------------------------------------------------------------- drivers and archives as processes

def _wait_for_file(proc: ChildProcess, path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not (os.path.exists(path) and os.path.getsize(path) > 0):
        if proc.proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited ({proc.proc.returncode})" if proc.proc.poll() is not None else "time-out"
            raise RuntimeError(f"{proc.what} wrote no {path} ({why}):\n{proc.stderr_tail()}")
        time.sleep(0.02)


class Driver:
    """A media driver process in a fresh directory under /dev/shm: sulis's or Aeron's (SHARED threading)."""

    def __init__(self, system: str, aeron: aeron_java.AeronJava | None, options: dict | None = None,
                 props: dict | None = None) -> None:
        self.system = system
        self.base = scratch_dir("sulis-bench-scale-")
        self.dir = os.path.join(self.base, "driver")
        if system == "aeron":
            assert aeron is not None
            cmd = aeron_java.command(aeron, {**aeron_java.dir_props(self.dir), "aeron.threading.mode": "SHARED",
                                             **(props or {})}, "io.aeron.driver.MediaDriver")
        else:
            cmd = [sys.executable, "-m", "sulis.cli", "driver", "--dir", self.dir, "--threading-mode", "shared",
                   *(x for k, v in (options or {}).items() for x in (f"--{k.replace('_', '-')}", str(v)))]
        self.proc = Child(f"{system} driver", cmd=cmd)  # a Child: roles' reads can watch it
        try:
            _wait_for_file(self.proc, os.path.join(self.dir, sulis.CNC_FILE), JVM_START_S)
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self.proc.proc.pid

    def alive(self) -> None:
        if self.proc.proc.poll() is not None:
            raise RuntimeError(f"the {self.system} driver exited ({self.proc.proc.returncode}):\n"
                               f"{self.proc.stderr_tail()}")

    def close(self) -> None:
        try:
            self.proc.stop(grace_s=5.0)
            self.proc.close()
        finally:
            remove_dir(self.base)

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ArchiveProcess:
    """An archive process on ``driver_dir`` recording into ``archive_dir``: ``python -m sulis.cli archive``
    or Aeron's ``io.aeron.archive.Archive`` (SHARED threading); both with 1 MiB segment files."""

    def __init__(self, system: str, aeron: aeron_java.AeronJava | None, driver_dir: str, archive_dir: str,
                 segment: int = 1 << 20) -> None:
        self.system, self.aeron, self.driver_dir, self.archive_dir = system, aeron, driver_dir, archive_dir
        self.segment = segment
        self.proc: ChildProcess | None = None
        self.control = f"aeron:udp?endpoint={HOST}:{free_port(HOST)}"

    def start(self) -> None:
        if self.system == "aeron":
            assert self.aeron is not None
            props = {"aeron.dir": self.driver_dir, "aeron.archive.dir": self.archive_dir,
                     "aeron.archive.threading.mode": "SHARED", "aeron.archive.segment.file.length": self.segment,
                     # Aeron's archive wants a UDP control channel and a replication channel named.
                     "aeron.archive.control.channel": self.control,
                     "aeron.archive.replication.channel": f"aeron:udp?endpoint={HOST}:0"}
            cmd = aeron_java.command(self.aeron, props, "io.aeron.archive.Archive")
        else:
            cmd = [sys.executable, "-m", "sulis.cli", "archive", "--archive-dir", self.archive_dir,
                   "--dir", self.driver_dir, "--segment-file-length", str(self.segment)]
        self.proc = ChildProcess(cmd, f"{self.system} archive")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace_s=20.0)
            self.proc.close()
            self.proc = None

    def alive(self) -> None:
        if self.proc is None or self.proc.proc.poll() is not None:
            tail = self.proc.stderr_tail() if self.proc else ""
            raise RuntimeError(f"the {self.system} archive is not running:\n{tail}")


# ----------------------------------------------------------------- the client process of a streams run

def stream_channels(kind: str, n: int, ports: list[int], first_stream: int = FIRST_STREAM
                    ) -> list[tuple[str | None, str, int]]:
    """(subscription channel or None, publication channel, stream id) of each of the N streams."""
    out: list[tuple[str | None, str, int]] = []
    for i in range(n):
        sid = first_stream + i
        if kind == "ipc":
            out.append((None, "aeron:ipc?term-length=64k", sid))
        else:
            port = ports[0] if kind == "udp-endpoint" else ports[i]
            out.append((f"aeron:udp?endpoint={HOST}:{port}", f"aeron:udp?endpoint={HOST}:{port}|term-length=64k",
                        sid))
    return out


def add_streams(client, streams, add_timeout: float, connect_timeout: float, held: list
                ) -> tuple[float, float | None, int]:
    """Adds the streams (for UDP the subscription, then the publication), keeping them in ``held``,
    giving up after ``add_timeout`` s; then waits up to ``connect_timeout`` s until every
    subscription has its image. Returns (seconds adding, seconds connecting or None, how many
    subscriptions had no image then)."""
    subs, added = [], 0
    t0 = time.perf_counter()
    try:
        for sub_channel, pub_channel, sid in streams:
            if time.perf_counter() - t0 > add_timeout:
                raise TimeoutError(f"{added:,} of {len(streams):,} streams added in {add_timeout:g} s (--add-timeout)")
            if sub_channel is not None:
                subs.append(client.add_subscription(sub_channel, sid))
                held.append(subs[-1])
            held.append(client.add_publication(pub_channel, sid))
            added += 1
    except TimeoutError:
        raise
    except Exception as exc:
        raise RuntimeError(f"{type(exc).__name__} after {added} of {len(streams)} streams "
                           f"({time.perf_counter() - t0:.1f} s): {exc}") from None
    t1 = time.perf_counter()
    pending = subs
    while pending := [s for s in pending if s.image_count == 0]:
        if time.perf_counter() - t1 > connect_timeout:
            return t1 - t0, None, len(pending)
        time.sleep(0.005)
    return t1 - t0, time.perf_counter() - t1, 0


def holder(p: dict) -> int:
    """The client process of a streams run (``scale.py --holder '<json>'``): connects to the driver in
    ``dir``, adds the warm-up streams, says ready; adds the N streams when a line comes on stdin, waits
    for every subscription's image, says what it took and holds the streams until stdin closes. JSON
    lines, as the roles of ``sulis._benchkit.roles``."""
    def say(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    held: list = []
    try:
        with sulis.Client(dir=p["dir"], name="sulis bench scale") as client:
            add_streams(client, stream_channels(p["kind"], p["warmup"], p["warmup_ports"], WARMUP_STREAM),
                        p["add_timeout"], p["connect_timeout"], held)
            say({"ready": True})
            if not sys.stdin.readline():
                return 0
            add_s, connect_s, unconnected = add_streams(client, stream_channels(p["kind"], p["n"], p["ports"]),
                                                        p["add_timeout"], p["connect_timeout"], held)
            say({"added": p["n"], "add_s": add_s, "connect_s": connect_s, "unconnected": unconnected})
            sys.stdin.read()  # until the orchestrator closes it
    except Exception as exc:
        say({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0


# ----------------------------------------------------------------- streams

def busy_rate(a, driver_dir: str, channel: str = BUSY_CHANNEL) -> float:
    """One busy IPC stream on the driver: the ``sulis-pub`` (offer_batch) and ``sulis-sub`` roles."""
    base = scratch_dir("sulis-bench-scale-busy-")
    stop = os.path.join(base, "stop")
    common = {"dir": driver_dir, "channel": channel, "stream": BUSY_STREAM}
    sub = r.sulis_role("py", "sub", **common, duration=a.busy_duration, limit=4096)
    pub = lambda _ready: r.sulis_role("py", "pub", **common, stop=stop, publication="exclusive",  # noqa: E731
                                      batch=a.busy_batch, size=32)
    return r.run_stream(sub, pub, stop, dirs=[base])["msgs_per_s"]


def streams_run(a, system: str, aeron, kind: str, n: int) -> dict:
    """One driver, one client process with N streams of ``kind``: everything the streams rows show."""
    def ports(count: int) -> list[int]:
        return [] if kind == "ipc" else [free_port(HOST) for _ in range(1 if kind == "udp-endpoint" else count)]

    out: dict = {}
    with Driver(system, aeron, a.sulis_options, a.aeron_props) as driver:
        cmd = [sys.executable, os.path.abspath(__file__), "--holder",
               json.dumps({"dir": driver.dir, "kind": kind, "n": n, "ports": ports(n), "warmup": a.warmup_streams,
                           "warmup_ports": ports(a.warmup_streams), "connect_timeout": a.connect_timeout,
                           "add_timeout": a.add_timeout})]
        client = Child("client", cmd=cmd)
        try:
            client.read(60 + a.add_timeout + a.connect_timeout, watch=[driver.proc])
            time.sleep(a.settle)
            driver.alive()
            base = {"shm": allocated_bytes(driver.dir), "driver_rss": rss_bytes(driver.pid),
                    "client_rss": rss_bytes(client.proc.pid)}
            out["baseline"] = base
            assert client.proc.stdin is not None
            client.proc.stdin.write("add\n")
            client.proc.stdin.flush()
            added = client.read(60 + a.add_timeout + a.connect_timeout, watch=[driver.proc])
            out.update(add_s=added["add_s"], connect_s=added["connect_s"] if kind != "ipc" else None,
                       unconnected=added["unconnected"], connect_timeout=a.connect_timeout, n=n,
                       add_us=added["add_s"] / n * 1e6)
            time.sleep(a.settle)
            driver.alive()
            out.update(shm=allocated_bytes(driver.dir), driver_rss=rss_bytes(driver.pid),
                       client_rss=rss_bytes(client.proc.pid))
            for key in ("shm", "driver_rss", "client_rss"):
                out[f"{key}_per_stream"] = (out[key] - base[key]) / n
            c0, t0 = cpu_seconds(driver.pid), time.monotonic()
            time.sleep(a.idle_seconds)
            out["idle_cpu"] = (cpu_seconds(driver.pid) - c0) / (time.monotonic() - t0) * 100
            driver.alive()
            out["busy"] = busy_rate(a, driver.dir)
            driver.alive()
        finally:
            client.close(grace_s=10.0 + n / 500)
    return out


def describe_streams(m: dict) -> str:
    return (f"add {m['add_s']:.2f} s ({m['add_us']:.0f} µs/stream)"
            + (f", connected {m['connect_s']:.2f} s later" if m.get("connect_s") is not None else "")
            + (f", {m['unconnected']:,} subscriptions without an image {m['connect_timeout']:g} s later"
               if m.get("unconnected") else "")
            + f"; /dev/shm {m['shm'] / 2**20:.1f} MiB; driver RSS {m['driver_rss'] / 2**20:.0f} MiB"
            f" (+{m['driver_rss_per_stream'] / 1024:.1f} KiB/stream); client RSS {m['client_rss'] / 2**20:.0f} MiB; "
            f"idle CPU {m['idle_cpu']:.1f} %; busy IPC {m['busy'] / 1e6:.2f} M msgs/s")


#: (key, row name, unit divisor, format, inverted growth, its growth is a target): the totals' growth is shown
#: but not a target (a driver with a smaller base grows relatively more for the same cost per stream; /dev/shm
#: and RSS are judged per stream), nor is the connect time's (it depends on how fast the adds went).
STREAM_ROWS = [
    ("add_us", "add, per stream (µs)", 1, "{:.0f}", False, True),
    ("connect_s", "connect, after the adds (ms)", 1e-3, "{:.1f}", False, False),
    ("shm", "/dev/shm (MiB)", 2 ** 20, "{:.2f}", False, False),
    ("shm_per_stream", "/dev/shm per stream (KiB)", 1024, "{:.1f}", False, True),
    ("driver_rss", "driver RSS (MiB)", 2 ** 20, "{:.1f}", False, False),
    ("driver_rss_per_stream", "driver RSS per stream (KiB)", 1024, "{:.1f}", False, True),
    ("client_rss_per_stream", "client RSS per stream (KiB)", 1024, "{:.1f}", False, True),
    ("idle_cpu", "idle CPU (% of a CPU)", 1, "{:.2f}", False, True),
    ("busy", "busy IPC stream (M msgs/s)", 1e6, "{:.2f}", True, True),
]


def measure_cell(a, cell: dict, n, title: str, run, describe, failed=None) -> None:
    """One measurement into ``cell[n]``: waits for a quiet machine (``--wait-quiet``), prints ``title``, runs
    ``run()`` under an interference watch and prints ``describe(m)``. A failure is the cell's (its error, and what
    ``failed(exc, cell)`` adds to the cell and says), never the end of the run."""
    if a.wait_quiet > 0:
        wait_for_quiet(a.max_interference, a.wait_quiet)
    print(title, flush=True)
    t0 = time.monotonic()
    try:
        with Interference() as itf:
            m = run()
        m["interference"] = itf.share
        m["seconds"] = time.monotonic() - t0
        cell[n] = m
        print("      -> " + describe(m) + f" [{m['seconds']:.0f} s]"
              + (f"  NOISY: others used {itf.share * 100:.0f}% of a CPU" if itf.share > a.max_interference else ""),
              flush=True)
    except Exception as exc:
        cell[n] = {"error": f"{type(exc).__name__}: {exc}"}
        said = failed(exc, cell[n]) if failed is not None else ""
        print(f"      FAILED ({time.monotonic() - t0:.0f} s): {' '.join(str(exc).split())[:600]}{said}", flush=True)


def streams_section(a, aeron, why: str) -> dict:
    results: dict = {kind: {s: {} for s in SYSTEMS} for kind in a.kinds}
    for n in a.streams:
        for kind in a.kinds:
            for system in SYSTEMS:
                cell = results[kind][system]
                if system == "aeron" and aeron is None:
                    cell[n] = {"skipped": why}
                    continue
                measure_cell(a, cell, n, f"[streams] {kind} N={n:,} {system}",
                             functools.partial(streams_run, a, system, aeron, kind, n), describe_streams)
    return results


# ----------------------------------------------------------------- recordings

def connect_archive(client, timeout_s: float = 120.0) -> sulis.ArchiveClient:
    """An ArchiveClient over the archive's local control channel (``aeron:ipc`` stream 10, the default of
    both archives), answers on ``aeron:ipc`` stream 20; it waits for the archive to be there."""
    return sulis.ArchiveClient(client, message_timeout=timeout_s)


def make_recordings(ac, pub, count: int, timeout_s: float = 60.0) -> None:
    """``count`` recordings of one 32 B message each of the publication's stream (see the docstring)."""
    payload = b"\x5a" * 32
    for _ in range(count):
        sub_id = ac.start_recording(REC_CHANNEL, REC_STREAM)
        rid = ac.await_signal(RecordingSignal.START).recording_id
        deadline = time.monotonic() + timeout_s
        while (end := pub.offer(payload)) < 0:
            if end == sulis.CLOSED or time.monotonic() > deadline:
                raise RuntimeError(f"offer to be recorded: {sulis.result_name(end)}")
        while ac.get_recording_position(rid) < end:
            if time.monotonic() > deadline:
                raise RuntimeError(f"recording {rid} did not reach {end}")
        ac.stop_recording_subscription(sub_id)
        ac.await_signal(RecordingSignal.STOP, rid)


def replay_start_s(ac, recording_id: int, timeout_s: float = 30.0) -> float:
    """From start_replay of the recording over aeron:ipc to its first fragment polled."""
    t0 = time.perf_counter()
    sub = ac.replay(recording_id, "aeron:ipc", REPLAY_STREAM)
    try:
        while not sub.poll_batch(16):
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(f"no fragment of the replay of recording {recording_id} in {timeout_s:g} s")
        return time.perf_counter() - t0
    finally:
        sub.close()


def recordings_run(a, system: str, aeron, results: dict) -> None:
    """One driver and archive of ``system``; recordings up to each of ``a.recordings``; fills ``results[n]``."""
    disk = scratch_dir("sulis-bench-scale-rec-", parent=a.dir or tempfile.gettempdir())
    archive = None
    try:
        with Driver(system, aeron, a.sulis_options, a.aeron_props) as driver, \
                sulis.Client(dir=driver.dir, name="sulis bench scale") as client:
            archive = ArchiveProcess(system, aeron, driver.dir, os.path.join(disk, "archive"))
            archive.start()
            ac = connect_archive(client)
            pub = client.add_exclusive_publication(REC_CHANNEL, REC_STREAM)
            made = 0
            for n in a.recordings:
                print(f"[recordings] {system} N={n:,}", flush=True)
                t0 = time.monotonic()
                try:
                    with Interference() as itf:
                        m: dict = {}
                        # The first ones after the archive's (re)start untimed (counted in N): its JIT's warm-up.
                        untimed = min(a.warmup_recordings, (n - made) // 2)
                        make_recordings(ac, pub, untimed)
                        c0 = time.perf_counter()
                        make_recordings(ac, pub, n - made - untimed)
                        m["create_ms"] = (time.perf_counter() - c0) / (n - made - untimed) * 1e3
                        made = n
                        listed = []
                        for _ in range(WARMUP_CALLS + a.list_repeats):  # the first untimed
                            l0 = time.perf_counter()
                            descriptors = ac.list_recordings(0, n)
                            listed.append(time.perf_counter() - l0)
                            if len(descriptors) != n:
                                raise RuntimeError(f"list_recordings(0, {n}) gave {len(descriptors)} descriptors")
                        listed = listed[WARMUP_CALLS:]
                        m["list_ms"] = statistics.median(listed) * 1e3
                        m["list_runs_ms"] = [x * 1e3 for x in listed]
                        ids = [d.recording_id for d in descriptors]
                        mid = len(ids) // 2 - WARMUP_CALLS
                        replays = [replay_start_s(ac, ids[mid + k])
                                   for k in range(WARMUP_CALLS + a.replay_repeats)][WARMUP_CALLS:]
                        m["replay_start_ms"] = statistics.median(replays) * 1e3
                        m["replay_runs_ms"] = [x * 1e3 for x in replays]
                        # The restart: a clean stop, then from the new process's start to an answer.
                        with contextlib.suppress(Exception):
                            ac.close()
                        archive.stop()
                        s0 = time.perf_counter()
                        archive.start()
                        ac = connect_archive(client)
                        first = ac.list_recordings(0, 1)
                        m["restart_ms"] = (time.perf_counter() - s0) * 1e3
                        if len(first) != 1:
                            raise RuntimeError(f"after the restart list_recordings(0, 1) gave {len(first)}")
                        archive.alive()
                    m["interference"] = itf.share
                    results[n] = m
                    print(f"      -> create {m['create_ms']:.2f} ms/recording; list {m['list_ms']:.1f} ms; "
                          f"restart {m['restart_ms']:.0f} ms; replay start {m['replay_start_ms']:.2f} ms "
                          f"[{time.monotonic() - t0:.0f} s]"
                          + (f"  NOISY: others used {itf.share * 100:.0f}% of a CPU"
                             if itf.share > a.max_interference else ""), flush=True)
                except Exception as exc:
                    results[n] = {"error": f"{type(exc).__name__}: {exc}"}
                    print(f"      FAILED ({time.monotonic() - t0:.0f} s): {' '.join(str(exc).split())[:300]}",
                          flush=True)
                    break  # the archive's state is unknown: the larger N of this system are not measured
            with contextlib.suppress(Exception):
                ac.close()
    finally:
        if archive is not None:
            archive.stop()
        remove_dir(disk)


#: As STREAM_ROWS; the time to create recordings is shown, not a target (the issue's rows are the other three).
REC_ROWS = [
    ("create_ms", "create, per recording (ms)", 1, "{:.2f}", False, False),
    ("list_ms", "list_recordings(0, N) (ms)", 1, "{:.1f}", False, True),
    ("restart_ms", "archive restart (ms)", 1, "{:.0f}", False, True),
    ("replay_start_ms", "replay start (ms)", 1, "{:.2f}", False, True),
]


def recordings_section(a, aeron, why: str) -> dict:
    results: dict = {s: {} for s in SYSTEMS}
    for system in SYSTEMS:
        if system == "aeron" and aeron is None:
            results[system] = {n: {"skipped": why} for n in a.recordings}
            continue
        try:
            recordings_run(a, system, aeron, results[system])
        except Exception as exc:  # the driver or archive did not start
            print(f"[recordings] {system} FAILED: {' '.join(str(exc).split())[:300]}", flush=True)
            for n in a.recordings:
                results[system].setdefault(n, {"error": f"{type(exc).__name__}: {exc}"})
    return results


# ----------------------------------------------------------------- cluster sessions

#: Each session's own egress: a port the client's driver picks (the client tells the cluster which).
SESSION_EGRESS = "aeron:udp?endpoint=localhost:0"
#: A session that sends nothing else gets a keep-alive this often (both clusters close a session silent for 10 s).
SESSION_KEEPALIVE_S = 2.0
SESSION_PAYLOAD = 32
#: Sessions the node takes beyond the N and the warm-up ones (a connect is counted while it is pending).
SESSION_MARGIN = 8


def session_holder(p: dict) -> int:
    """The client process of a sessions run (``scale.py --sessions-holder '<json>'``): on the sulis driver in
    ``driver_dir``, opens the warm-up sessions (each ``warmup_echoes`` round trips, one at a time) and says
    ready; on ``open`` opens the N sessions one after another (each a ``ClusterClient`` with its own egress),
    says how long each took; on ``echo`` sends 1 message a second on each for ``echo_seconds`` + 1 s (the first
    second untimed), each message timed from when it was due; exits at once when stdin closes (the sessions
    are not closed one by one: the cluster goes with them). JSON lines, as ``holder``.

    The client sends no keep-alive by itself: every session silent for ``SESSION_KEEPALIVE_S`` gets one
    (``send_keep_alive``) from a thread of this process until the echoes start (a connect releases the GIL, so a
    connect that takes seconds does not starve the others), then from the echo loop for the sessions that send no
    echoes (the warm-up ones); the others' messages keep them alive."""
    import threading

    from sulis.cluster import ClusterClient, ClusterError

    def say(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    n, warm = p["n"], p["warmup"]
    # One driver client for every session (Aeron's AeronCluster.Context.aeron(), as an application holding many
    # sessions would): each session's own cost a conductor thread and a mapping of the CnC file each, and a
    # thousand of them saturated this machine's two cores before any cluster was measured.
    shared = sulis.Client(dir=p["driver_dir"], name="sulis bench scale sessions")
    echoing = p.get("echo_sessions", n)  # (``echo_sessions``, ``echo_rate``: the first k at r a second, to probe)
    sessions: list = []  # the warm-up ones first, then the N
    # (when last told to the cluster, index), oldest first: those due a keep-alive at the front. "quiet": the
    # warm-up sessions and those that send no echoes; "echo": those that do (their messages keep them alive then).
    groups: dict[str, collections.deque] = {"quiet": collections.deque(), "echo": collections.deque()}
    keepalives = [0, 0]  # sent, refused (back-pressured: sent again on the next call)
    lock = threading.Lock()  # a session is used by one thread at a time (the keep-alive thread's, or the main)
    stop = threading.Event()

    def keep_alive(*names: str) -> None:
        with lock:
            now = time.monotonic()
            for name in names or tuple(groups):
                q = groups[name]
                while q and now - q[0][0] >= SESSION_KEEPALIVE_S:
                    if not sessions[q[0][1]].send_keep_alive():
                        keepalives[1] += 1
                        break
                    keepalives[0] += 1
                    q.append((now, q.popleft()[1]))

    def keep_alive_thread() -> None:
        while not stop.wait(0.02):
            keep_alive()

    def what(i: int) -> str:
        return f"warm-up session {i + 1}" if i < warm else f"session {i - warm + 1:,} of {n:,}"

    def open_session(retry_s: float) -> float:
        i = len(sessions)
        deadline = time.monotonic() + retry_s
        while True:
            t0 = time.perf_counter()
            try:
                client = ClusterClient(p["driver_dir"], p["endpoints"], SESSION_EGRESS,
                                       message_timeout=p["message_timeout"], client=shared)
                took = time.perf_counter() - t0
                break
            except ClusterError as exc:
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"{what(i)} did not connect (message timeout {p['message_timeout']:g} s): "
                                       f"{exc}") from None
                time.sleep(0.2)
        with lock:
            sessions.append(client)
            groups["echo" if warm <= i < warm + echoing else "quiet"].append((time.monotonic(), i))
        return took

    def sweep() -> None:
        """One poll of every session: raises (naming it) for one the cluster ended."""
        with lock:
            for i, client in enumerate(sessions):
                try:
                    client.poll_egress(lambda payload, timestamp: None, 10)
                except Exception as exc:
                    raise RuntimeError(f"{what(i)} ended: {type(exc).__name__}: {exc}") from None

    def wait_command() -> str:
        """The orchestrator's next line ("" once stdin closed)."""
        if keeper.is_alive():
            return sys.stdin.readline().strip()
        while True:  # the keep-alives from here
            keep_alive()
            ready, _, _ = select.select([sys.stdin], [], [], 0.05)
            if ready:
                return sys.stdin.readline().strip()

    keeper = threading.Thread(target=keep_alive_thread, name="keep-alives", daemon=True)
    try:
        pad = bytes(SESSION_PAYLOAD - 8)
        for _ in range(warm):
            open_session(retry_s=60.0)  # the first may meet an election still under way
        for client in sessions:
            for k in range(p["warmup_echoes"]):
                got = [0]
                deadline = time.monotonic() + 10.0
                while client.offer(k.to_bytes(8, "little") + pad) < 0:
                    client.poll_egress(lambda payload, timestamp: None, 10)
                    if time.monotonic() > deadline:
                        raise RuntimeError("a warm-up session's message was not taken in 10 s")
                while not got[0]:
                    client.poll_egress(lambda payload, timestamp, got=got: got.__setitem__(0, 1), 10)
                    if time.monotonic() > deadline:
                        raise RuntimeError("no echo of a warm-up session's message in 10 s")
            keep_alive()
        keeper.start()
        say({"ready": True, "pid": os.getpid()})
        if wait_command() != "open":
            os._exit(0)
        times = []
        t0 = time.perf_counter()
        for i in range(n):
            times.append(open_session(retry_s=0.0))
            if time.perf_counter() - t0 > p["connect_timeout"]:
                raise RuntimeError(f"{i + 1:,} of {n:,} sessions connected in {p['connect_timeout']:g} s "
                                   "(--session-connect-timeout)")
        total = time.perf_counter() - t0
        time.sleep(p["settle"])
        sweep()
        times.sort()
        say({"connected": n, "connect_s": total, "connect_p50_s": statistics.median(times),
             "connect_p90_s": times[int(0.9 * (n - 1))], "connect_max_s": times[-1], "keepalives": keepalives[:]})
        if wait_command() != "echo":
            os._exit(0)
        stop.set()
        keeper.join()
        cpu0, wall0 = os.times(), time.monotonic()
        result = session_echo(sessions[warm:warm + echoing], p["echo_seconds"], p["park_us"] / 1e6,
                              lambda: keep_alive("quiet"), p.get("echo_rate", 1.0))
        cpu1 = os.times()
        used = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
        result["client_cpu"] = used / (time.monotonic() - wall0) * 100
        sweep()
        result["keepalives"] = keepalives[:]
        say(result)
        wait_command()
    except Exception as exc:
        say({"error": f"{type(exc).__name__}: {exc}"})
        os._exit(1)
    os._exit(0)  # without closing hundreds of sessions one by one (their cluster is stopped next)


def session_echo(clients: list, seconds: int, park_s: float, idle, rate: float = 1.0) -> dict:
    """``rate`` (1) messages a second on each session for ``seconds`` + 1 (the first second untimed), spread evenly:
    message j goes on session j % N at start + j / (N rate) s and is timed from then (a late offer is charged its
    delay). Only
    the sessions awaiting an echo are polled (polling all N each pass would time the loop, not the cluster);
    ``idle()`` between passes (the warm-up sessions' keep-alives), a sleep of up to ``park_s`` when nothing came
    and nothing is due. The round trips' p50, p99, p99.9 and max in µs."""
    import sulis.cluster

    n = len(clients)
    total = int(n * rate) * (seconds + 1)
    interval = 1e9 / (n * rate)
    start = time.perf_counter_ns() + 50_000_000
    latency = [0] * total
    pending = [0] * n
    awaiting: set[int] = set()
    got = [0]
    pad = bytes(SESSION_PAYLOAD - 8)

    def on_echo(payload, timestamp) -> None:
        j = int.from_bytes(payload[:8], "little")
        latency[j] = time.perf_counter_ns() - (start + int(j * interval))
        got[0] += 1
        s = j % n
        pending[s] -= 1
        if not pending[s]:
            awaiting.discard(s)

    sent = 0
    give_up = start + int((seconds + 1) * 1e9) + 30_000_000_000
    fatal = (sulis.CLOSED, sulis.MAX_POSITION_EXCEEDED)
    while got[0] < total:
        now = time.perf_counter_ns()
        while sent < total and start + int(sent * interval) <= now:
            s = sent % n
            result = clients[s].offer(sent.to_bytes(8, "little") + pad)
            if result < 0:
                if result in fatal:
                    raise RuntimeError(f"session {s + 1:,} of {n:,}: offer {sulis.result_name(result)}")
                break  # back-pressured or not connected: offered again on the next pass, still timed from when due
            pending[s] += 1
            awaiting.add(s)
            sent += 1
        polled = 0
        for s in tuple(awaiting):
            try:
                polled += clients[s].poll_egress(on_echo, 10)
            except sulis.cluster.ClusterSessionClosedError as exc:
                raise RuntimeError(f"session {s + 1:,} of {n:,} ended {(time.perf_counter_ns() - start) / 1e9:.1f} s "
                                   f"into the echoes ({sent:,} of {total:,} sent, {got[0]:,} back): {exc}") from None
        idle()
        if polled == 0:
            due = start + int(sent * interval) - time.perf_counter_ns()
            if due > 0:
                time.sleep(min(due / 1e9, park_s))
        if time.perf_counter_ns() > give_up:
            missing = sorted(s + 1 for s in awaiting)
            raise RuntimeError(f"{total - got[0]:,} of {total:,} echoes missing 30 s after the last was due "
                               f"({sent:,} sent); sessions waiting: {missing[:10]}"
                               + (" ..." if len(missing) > 10 else ""))
    timed = sorted(latency[int(n * rate):])
    at = lambda q: timed[min(len(timed) - 1, int(q * len(timed)))] / 1000  # noqa: E731
    return {"echoes": len(timed), "echo_p50_us": at(0.5), "echo_p99_us": at(0.99), "echo_p999_us": at(0.999),
            "echo_max_us": timed[-1] / 1000}


def sessions_run(a, system: str, aeron, n: int) -> dict:
    """A one-member cluster of ``system`` (its own process), a sulis driver process for the client and the
    client process (``session_holder``) with the warm-up sessions and then N: everything the sessions rows show."""
    out: dict = {"n": n}
    limit = n + a.warmup_sessions + SESSION_MARGIN
    node: SulisNode | AeronNode | None = None
    client: Child | None = None
    drops_at_start = udp_receive_drops()
    with Driver("sulis", None) as cdriver:
        try:
            node = (SulisNode(1, extra=("--max-concurrent-sessions", str(limit))) if system == "sulis"
                    else AeronNode(aeron, 1, extra={"aeron.cluster.max.sessions": limit}))
            node_pid = node.pids[0]

            def read(timeout: float) -> dict:
                assert client is not None and node is not None
                try:
                    return client.read(timeout, watch=[cdriver.proc])
                except Exception:
                    node.check()  # a node that died is the cause to name
                    cdriver.alive()
                    raise

            def command(line: str) -> None:
                assert client is not None and client.proc.stdin is not None
                client.proc.stdin.write(line + "\n")
                client.proc.stdin.flush()

            client = Child("sessions client", cmd=[sys.executable, os.path.abspath(__file__), "--sessions-holder",
                                                   json.dumps({"driver_dir": cdriver.dir, "endpoints": node.endpoints,
                                                               "n": n, "warmup": a.warmup_sessions,
                                                               "warmup_echoes": a.warmup_echoes,
                                                               "message_timeout": 10.0,
                                                               "connect_timeout": a.session_connect_timeout,
                                                               "settle": a.settle, "echo_seconds": a.echo_seconds,
                                                               "park_us": 100.0})])
            read(120.0 + a.warmup_sessions * 10.0)
            time.sleep(a.settle)
            node.check()
            pids = {"node": node_pid, "client": client.proc.pid, "client_driver": cdriver.pid}
            base = {key: rss_bytes(pid) for key, pid in pids.items()}
            out["baseline_rss"] = base
            drops = udp_receive_drops()
            command("open")
            connected = read(a.session_connect_timeout + 60.0)
            node.check()
            out["udp_drops_connect"] = udp_receive_drops() - drops
            out.update(connect_s=connected["connect_s"], connect_us=connected["connect_s"] / n * 1e6,
                       connect_p50_us=connected["connect_p50_s"] * 1e6, connect_p90_us=connected["connect_p90_s"] * 1e6,
                       connect_max_us=connected["connect_max_s"] * 1e6)
            for key, pid in pids.items():
                out[f"{key}_rss"] = rss_bytes(pid)
                out[f"{key}_rss_per_session"] = (out[f"{key}_rss"] - base[key]) / n
            cpu0 = {key: cpu_seconds(pid) for key, pid in pids.items() if key != "client"}
            t0 = time.monotonic()
            drops = udp_receive_drops()
            command("echo")
            echoed = read(a.echo_seconds + 90.0)
            wall = time.monotonic() - t0
            out["udp_drops_echo"] = udp_receive_drops() - drops
            node.check()
            cdriver.alive()
            out.update({k: v for k, v in echoed.items() if k.startswith("echo")})
            out["client_cpu"] = echoed["client_cpu"]
            out["keepalives"] = echoed["keepalives"]
            for key, c in cpu0.items():
                out[f"{key}_cpu"] = (cpu_seconds(pids[key]) - c) / wall * 100
        except Exception as exc:
            out["udp_drops_until_failure"] = udp_receive_drops() - drops_at_start
            exc.partial = out  # type: ignore[attr-defined]  # what was measured before, said beside the failure
            raise
        finally:
            if client is not None:
                client.close(grace_s=10.0)
            if node is not None:
                node.close()
    return out


def describe_sessions(m: dict) -> str:
    n = m["n"]
    return (f"{n:,} sessions connected in {m['connect_s']:.2f} s ({m['connect_us'] / 1e3:.2f} ms/session; single: "
            f"median {m['connect_p50_us'] / 1e3:.2f}, p90 {m['connect_p90_us'] / 1e3:.2f}, max "
            f"{m['connect_max_us'] / 1e3:.1f} ms); RSS: leader {m['node_rss'] / 2**20:.0f} MiB "
            f"(+{m['node_rss_per_session'] / 1024:.1f} KiB/session), client {m['client_rss'] / 2**20:.0f} MiB "
            f"(+{m['client_rss_per_session'] / 1024:.1f}), client's driver {m['client_driver_rss'] / 2**20:.0f} MiB "
            f"(+{m['client_driver_rss_per_session'] / 1024:.1f}); echo ({m['echoes']:,} timed) p50 "
            f"{m['echo_p50_us']:.0f} µs, p99 {m['echo_p99_us']:.0f}, p99.9 {m['echo_p999_us']:.0f}, max "
            f"{m['echo_max_us']:.0f}; CPU meanwhile: leader {m['node_cpu']:.0f} %, client {m['client_cpu']:.0f} %, "
            f"client's driver {m['client_driver_cpu']:.0f} %; UDP datagrams dropped (full receive buffers, the "
            f"machine's): {m['udp_drops_connect']:,} connecting, {m['udp_drops_echo']:,} echoing")


#: As STREAM_ROWS. The issue's targets: the connect per session's growth at or under Aeron's (a row target); memory
#: per session reported in KiB, and echo p99 at the largest N within 2x the p99 at the smallest (print_targets).
SESSION_ROWS = [
    ("connect_us", "connect, per session (µs; N connects / N)", 1, "{:.0f}", False, True),
    ("connect_p50_us", "connect, median single (µs)", 1, "{:.0f}", False, False),
    ("client_rss_per_session", "client RSS per session (KiB)", 1024, "{:.1f}", False, False),
    ("node_rss_per_session", "leader RSS per session (KiB)", 1024, "{:.1f}", False, False),
    ("client_driver_rss_per_session", "client's driver RSS per session (KiB)", 1024, "{:.1f}", False, False),
    ("echo_p50_us", "echo p50, 1 msg/s per session (µs)", 1, "{:.0f}", False, False),
    ("echo_p99_us", "echo p99, 1 msg/s per session (µs)", 1, "{:.0f}", False, False),
]


def session_failure(exc: Exception, cell: dict) -> str:
    """What was measured before a sessions run failed: into the record and the run's line, not the table."""
    partial = getattr(exc, "partial", None) or {}
    cell["partial"] = partial
    return ((f"\n      ({partial['udp_drops_until_failure']:,} UDP datagrams dropped on full receive "
             f"buffers until then, the machine's)" if "udp_drops_until_failure" in partial else "")
            + (f"\n      (before it failed: {partial.get('n', 0):,} sessions connected in "
               f"{partial['connect_s']:.2f} s, {partial['connect_us'] / 1e3:.2f} ms/session, median "
               f"{partial['connect_p50_us'] / 1e3:.2f} ms; RSS per session: leader "
               f"{partial['node_rss_per_session'] / 1024:.1f} KiB, client "
               f"{partial['client_rss_per_session'] / 1024:.1f} KiB, client's driver "
               f"{partial['client_driver_rss_per_session'] / 1024:.1f} KiB)"
               if "node_rss_per_session" in partial else ""))


def sessions_section(a, aeron, why: str) -> dict:
    results: dict = {s: {} for s in SYSTEMS}
    for n in a.sessions:
        for system in SYSTEMS:
            cell = results[system]
            if system == "aeron" and aeron is None:
                cell[n] = {"skipped": why}
                continue
            measure_cell(a, cell, n, f"[sessions] N={n:,} {system}",
                         functools.partial(sessions_run, a, system, aeron, n), describe_sessions, session_failure)
    return results


# ----------------------------------------------------------------- big recordings

BIG_CHANNEL, BIG_STREAM = "aeron:ipc?term-length=16m", 4001
BIG_MESSAGE, BIG_BATCH = 8192, 64
BIG_FRAME = (BIG_MESSAGE + 32 + 31) // 32 * 32
#: bytes replayed from the middle of a recording for the seek row
SEEK_BYTES = 256 * 2 ** 20


def drop_page_cache() -> bool:
    """Writes back and drops the page cache (root only), so that a replay reads the disk; False if not allowed."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def timed_replay(ac, recording_id: int, position: int, length: int, timeout_s: float) -> tuple[float, float]:
    """Replays ``length`` bytes of the recording from ``position`` over aeron:ipc: (seconds to the first
    fragment, bytes/s of the whole replay); fails (never hangs) when it stalls for ``timeout_s``."""
    t0 = time.perf_counter()
    sub = ac.replay(recording_id, "aeron:ipc", REPLAY_STREAM, position=position, length=length)
    first = None
    try:
        # The replay ends with the last whole frame within the length asked for.
        image_end = position + length - BIG_FRAME + 1
        last_progress = time.monotonic()
        got_position = position
        while got_position < image_end:
            batch = sub.poll_batch(4096)
            if len(batch):
                if first is None:
                    first = time.perf_counter() - t0
                got_position = int(memoryview(batch.positions)[-1])
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout_s:
                raise RuntimeError(f"the replay of recording {recording_id} from {position} stalled at "
                                   f"{got_position} of {image_end} for {timeout_s:g} s")
        total = time.perf_counter() - t0
    finally:
        sub.close()
    return first or total, length / total


def big_run(a, system: str, aeron, gib: float) -> dict:
    """One driver and archive of ``system`` (1 GiB segment files) and one recording of ``gib`` GiB of 8 KiB
    messages published by this process: record rate, replay from the start, replay of 256 MiB from the middle."""
    disk = scratch_dir("sulis-bench-scale-big-", parent=a.dir or tempfile.gettempdir())
    archive = None
    m: dict = {}
    try:
        with Driver(system, aeron, a.sulis_options, a.aeron_props) as driver, \
                sulis.Client(dir=driver.dir, name="sulis bench scale big") as client:
            archive = ArchiveProcess(system, aeron, driver.dir, os.path.join(disk, "archive"), segment=1 << 30)
            archive.start()
            ac = connect_archive(client)
            ac.start_recording(BIG_CHANNEL, BIG_STREAM)
            pub = client.add_exclusive_publication(BIG_CHANNEL, BIG_STREAM)
            rid = ac.await_signal(RecordingSignal.START).recording_id
            count = int(gib * 2 ** 30) // BIG_MESSAGE
            t0 = time.perf_counter()
            publish_batch(pub, bytes(BIG_MESSAGE), BIG_BATCH, count=count)
            end = pub.position
            deadline = time.monotonic() + 60
            recorded = ac.get_recording_position(rid)
            while recorded < end:
                before = recorded
                time.sleep(0.001)
                recorded = ac.get_recording_position(rid)
                if recorded > before:
                    deadline = time.monotonic() + 60
                elif time.monotonic() > deadline:
                    raise RuntimeError(f"recording {rid} stopped at {recorded} of {end} for 60 s")
            m["record_mb_s"] = end / (time.perf_counter() - t0) / 1e6
            m["bytes"] = end
            ac.stop_recording(BIG_CHANNEL, BIG_STREAM)
            ac.await_signal(RecordingSignal.STOP, rid)
            pub.close()
            archive.alive()
            m["cache_dropped"] = drop_page_cache()
            first, rate = timed_replay(ac, rid, 0, end, a.big_stall_s)
            m["replay_first_ms"], m["replay_mb_s"] = first * 1e3, rate / 1e6
            drop_page_cache()
            middle = end // 2 // (16 << 20) * (16 << 20)  # a term's start: a frame's start in any recording
            first, rate = timed_replay(ac, rid, middle, min(SEEK_BYTES, end - middle), a.big_stall_s)
            m["seek_first_ms"], m["seek_mb_s"] = first * 1e3, rate / 1e6
            archive.alive()
            with contextlib.suppress(Exception):
                ac.close()
    finally:
        if archive is not None:
            archive.stop()
        remove_dir(disk)
    return m


def describe_big(m: dict) -> str:
    return (f"record {m['record_mb_s']:.0f} MB/s; replay first fragment {m['replay_first_ms']:.1f} ms, "
            f"{m['replay_mb_s']:.0f} MB/s; from the middle {m['seek_first_ms']:.1f} ms, {m['seek_mb_s']:.0f} MB/s; "
            f"page cache {'dropped' if m['cache_dropped'] else 'kept'} before each replay")


BIG_ROWS = [
    ("record_mb_s", "record (MB/s)", 1, "{:.0f}", True, True),
    ("replay_first_ms", "replay from the start: first fragment (ms)", 1, "{:.1f}", False, True),
    ("replay_mb_s", "replay from the start (MB/s)", 1, "{:.0f}", True, True),
    ("seek_first_ms", "replay from the middle: first fragment (ms)", 1, "{:.1f}", False, True),
    ("seek_mb_s", "replay of 256 MiB from the middle (MB/s)", 1, "{:.0f}", True, True),
]


def big_section(a, aeron, why: str) -> dict:
    results: dict = {s: {} for s in SYSTEMS}
    where = a.dir or tempfile.gettempdir()
    for gib in a.big_gib:
        for system in SYSTEMS:
            if system == "aeron" and aeron is None:
                results[system][gib] = {"skipped": why}
                continue
            free = shutil.disk_usage(where).free
            need = gib * 2 ** 30 * 1.05 + 2 * 2 ** 30
            if free < need:
                results[system][gib] = {"skipped": f"{free / 2 ** 30:.0f} GiB free in {where}, "
                                                   f"{need / 2 ** 30:.0f} GiB needed"}
                print(f"[big recordings] {gib:g} GiB {system}: skipped, {results[system][gib]['skipped']}")
                continue
            measure_cell(a, results[system], gib, f"[big recordings] {gib:g} GiB {system}",
                         functools.partial(big_run, a, system, aeron, gib), describe_big)
    return results


# ----------------------------------------------------------------- one busy stream, three term lengths

BUSY_TERMS = ("64k", "1m", "64m")


def busy_section(a, aeron, why: str) -> dict:
    """One busy IPC stream through each driver with no other stream, for each term length: the median of
    ``a.busy_runs`` runs (a fresh driver each)."""
    results: dict = {s: {} for s in SYSTEMS}
    for term in BUSY_TERMS:
        for system in SYSTEMS:
            if system == "aeron" and aeron is None:
                results[system][term] = {"skipped": why}
                continue
            print(f"[busy] term-length={term} {system}", flush=True)
            runs = []
            try:
                for _ in range(a.busy_runs):
                    with Driver(system, aeron, a.sulis_options, a.aeron_props) as driver:
                        runs.append(busy_rate(a, driver.dir, f"aeron:ipc?term-length={term}"))
                results[system][term] = {"busy": statistics.median(runs), "runs": runs}
                print("      -> " + " / ".join(f"{x / 1e6:.2f}" for x in runs) + " M msgs/s", flush=True)
            except Exception as exc:
                results[system][term] = {"error": f"{type(exc).__name__}: {exc}", "runs": runs}
                print(f"      FAILED: {' '.join(str(exc).split())[:300]}", flush=True)
    return results


# ----------------------------------------------------------------- the tables

def growth(cells: dict, ns: list[int], key: str, inverted: bool) -> tuple[float | None, int | None]:
    """(value at the largest N measured / at the smallest, that largest N); inverted: the other way."""
    have = [n for n in ns if isinstance(cells.get(n, {}).get(key), (int, float))]
    if len(have) < 2:
        return None, None
    lo, hi = cells[have[0]][key], cells[have[-1]][key]
    if inverted:
        lo, hi = hi, lo
    if lo <= 0:
        return None, have[-1]
    return hi / lo, have[-1]


def short_error(error: str) -> str:
    """The gist of an error for a table cell: ``RegistrationError after 855 of 1000`` or its first words."""
    text = " ".join(error.split())
    if m := re.search(r"(\w+) after (\d+) of (\d+) streams", text):
        return f"{m.group(1)} after {int(m.group(2)):,}"
    if m := re.search(r"([\d,]+) of [\d,]+ streams added in (\S+) s", text):
        return f"{m.group(1)} added in {m.group(2)} s"
    if m := re.search(r"session ([\d,]+) of [\d,]+ (ended|did not connect)", text):
        why = re.search(r"the cluster ended the session: (\w+)", text)
        return f"session {m.group(1)} {m.group(2)}" + (f" ({why.group(1)})" if why else "")
    if m := re.search(r"([\d,]+) of [\d,]+ echoes missing", text):
        return f"{m.group(1)} echoes missing"
    for prefix in ("BenchError: ", "the client process: ", "the sessions client process: ", "RuntimeError: "):
        text = text.removeprefix(prefix)
    return text if len(text) <= 30 else text[:29] + "…"


def cell_text(cell: dict, key: str, div: float, fmt: str, notes: list[str], where: str) -> str:
    if "error" in cell:
        if not any(note.startswith(f"{where}: ") for note in notes):
            notes.append(f"{where}: {cell['error']}")
        return f"failed: {short_error(cell['error'])}"
    if "skipped" in cell:
        return "skipped"
    if key == "connect_s" and cell.get("unconnected"):
        return f"{cell['unconnected']:,} not in {cell['connect_timeout']:g} s"
    v = cell.get(key)
    return "-" if v is None else fmt.format(v / div)


def growth_table(title: str, rows_def: list, results: dict, ns: list[int], notes: list[str], checks: list[dict],
                 skip_keys=()) -> list[list[str]]:
    """The rows of one table: per metric sulis, Aeron and sulis/Aeron at each N, and the growth (each
    system's over the Ns it has; the sulis/Aeron one, and the target's, over the Ns both have)."""
    rows = []
    for key, name, div, fmt, inverted, target in rows_def:
        if key in skip_keys:
            continue
        g = {}
        for system, label in (("sulis", "sulis"), ("aeron", "Aeron 1.51")):
            cells = results[system]
            texts = [cell_text(cells[n], key, div, fmt, notes, f"{title}, {label}, N={n:,}") if n in cells
                     else "-" for n in ns]
            g[system], upto = growth(cells, ns, key, inverted)
            gtext = "-" if g[system] is None else f"{g[system]:.2f}x" + ("" if upto == ns[-1] else f" (to {upto:,})")
            rows.append([name if system == "sulis" else "", label, *texts, gtext])
        ratios = []
        for n in ns:
            s, j = results["sulis"].get(n, {}).get(key), results["aeron"].get(n, {}).get(key)
            ratios.append(f"{s / j:.2f}x" if isinstance(s, (int, float)) and isinstance(j, (int, float)) and j else "-")
        have = {system: [n for n in ns if isinstance(results[system].get(n, {}).get(key), (int, float))]
                for system in SYSTEMS}
        common = [n for n in have["sulis"] if n in have["aeron"]]
        gs, upto = growth(results["sulis"], common, key, inverted)
        ga, _ = growth(results["aeron"], common, key, inverted)
        gtext = "-" if gs is None or not ga else f"{gs / ga:.2f}x" + ("" if upto == ns[-1] else f" (to {upto:,})")
        rows.append(["", "sulis/Aeron", *ratios, gtext])
        if target:
            # sulis failing at an N that Aeron ran is a miss whatever the growth before it.
            short = bool(have["aeron"]) and (not have["sulis"] or have["sulis"][-1] < have["aeron"][-1])
            checks.append({"row": f"{title}: {name}", "sulis": gs, "aeron": ga, "to": upto,
                           "sulis_short_of": have["aeron"][-1] if short else None})
    return rows


def print_section_table(heading: str, rows: list[list[str]], ns: list[int], unit: str = "N") -> None:
    print(f"\n{heading}")
    print_table(["row", "system", *(f"{unit}={n:,}" for n in ns), "growth"], rows, "ll" + "r" * (len(ns) + 1))


def main(argv=None) -> int:
    ap = r.parser(__doc__, only=",".join(SECTIONS))
    ap.set_defaults(runs=1)
    ap.add_argument("--streams", default=None,
                    help="stream counts N, comma separated (default 10,100,1000,5000; --quick: 10,100)")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"stream kinds, comma separated (default all: "
                                                            f"{', '.join(KINDS)})")
    ap.add_argument("--recordings", default=None,
                    help="recording counts N, comma separated (default 100,1000,10000,100000 up to --max-recordings; "
                         "--quick: 100,1000)")
    ap.add_argument("--max-recordings", type=int, default=100_000,
                    help="largest recording count of the default list (default 100000; 10000 saves ~3 min)")
    ap.add_argument("--warmup-recordings", type=int, default=50,
                    help="recordings made untimed after each (re)start of an archive (counted in N; default 50, "
                         "at most half of those made for that N)")
    ap.add_argument("--idle-seconds", type=float, default=3.0, help="window of the idle CPU figure (default 3)")
    ap.add_argument("--busy-duration", type=float, default=None,
                    help="seconds of the busy IPC stream, the first is warm-up (default 4; --quick: 2.5)")
    ap.add_argument("--busy-batch", type=int, default=1024, help="messages per offer_batch of the busy stream")
    ap.add_argument("--add-timeout", type=float, default=60.0,
                    help="seconds the client gets to add the N streams; past them the N is failed (default 60)")
    ap.add_argument("--connect-timeout", type=float, default=20.0,
                    help="seconds the UDP subscriptions get to have their images after the adds; those still "
                         "without one are counted in the connect row and the run goes on (default 20)")
    ap.add_argument("--warmup-streams", type=int, default=50,
                    help="streams of the same kind (other stream ids, ports) each driver gets before the "
                         "baseline, untimed, so that neither is measured cold (a JVM's JIT) (default 50)")
    ap.add_argument("--settle", type=float, default=0.5, help="seconds waited before /dev/shm and RSS are read")
    ap.add_argument("--driver-options", default="",
                    help="more options of the sulis drivers, k=v,k=v (e.g. idle_strategy=backoff:100us)")
    ap.add_argument("--aeron-props", default="", help="more properties of the Aeron drivers, k=v,k=v")
    ap.add_argument("--dir", default=None, help="where the archives' directories go (default: the temp dir)")
    ap.add_argument("--sessions", default=None,
                    help="cluster session counts N, comma separated (default 10,100,1000; --quick: 10,100)")
    ap.add_argument("--echo-seconds", type=int, default=None,
                    help="seconds of echoes at 1 message a second per session, after an untimed one (default 15; "
                         "--quick: 5)")
    ap.add_argument("--warmup-sessions", type=int, default=10,
                    help="sessions the client opens before the baseline, untimed and kept, each with "
                         "--warmup-echoes round trips (a JVM's JIT) (default 10)")
    ap.add_argument("--warmup-echoes", type=int, default=300,
                    help="round trips, one at a time, on each warm-up session (default 300)")
    ap.add_argument("--session-connect-timeout", type=float, default=300.0,
                    help="seconds the client gets to open the N sessions; past them the N fails (default 300)")
    ap.add_argument("--big-gib", default=None,
                    help="sizes of the big recordings in GiB, comma separated (default 1,4,16; --quick: 1); 64 where "
                         "the disk has room (a size is skipped when --dir has less than it plus 2 GiB free)")
    ap.add_argument("--big-stall-s", type=float, default=60.0,
                    help="seconds a big recording's replay may deliver nothing before it fails (default 60)")
    ap.add_argument("--busy-runs", type=int, default=3,
                    help="runs of the busy section's stream per system and term length (default 3)")
    a = r.parse(ap, argv)
    if a.runs != 1:
        ap.error("--runs: this benchmark measures each figure once per N (list and replay start: medians of 5)")

    def counts(text: str | None, default: list[int], what: str) -> list[int]:
        try:
            ns = sorted({int(x.replace("_", "")) for x in text.split(",") if x.strip()}) if text else default
        except ValueError:
            ap.error(f"--{what} takes whole numbers, comma separated")
        if not ns or ns[0] < 1:
            ap.error(f"--{what} needs counts of at least 1")
        return ns

    a.streams = counts(a.streams, [10, 100] if a.quick else [10, 100, 1000, 5000], "streams")
    default_recordings = [n for n in (100, 1000, 10_000, 100_000) if n <= a.max_recordings]
    a.recordings = counts(a.recordings, [100, 1000] if a.quick else default_recordings, "recordings")
    if a.recordings[0] < 10:
        ap.error("--recordings: at least 10 (replay start takes 5 recordings in the middle)")
    a.sessions = counts(a.sessions, [10, 100] if a.quick else [10, 100, 1000], "sessions")
    a.big_gib = counts(a.big_gib, [1] if a.quick else [1, 4, 16], "big-gib")
    if a.busy_runs < 1:
        ap.error("--busy-runs must be at least 1")
    a.echo_seconds = a.echo_seconds or (5 if a.quick else 15)
    if a.echo_seconds < 1 or a.warmup_sessions < 1 or a.warmup_echoes < 1:
        ap.error("--echo-seconds, --warmup-sessions and --warmup-echoes must be at least 1")
    a.kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    if unknown := set(a.kinds) - set(KINDS):
        ap.error(f"unknown --kinds {sorted(unknown)} (known: {', '.join(KINDS)})")
    a.busy_duration = a.busy_duration or (2.5 if a.quick else 4.0)
    if a.busy_duration < 2.5:
        ap.error("--busy-duration must be at least 2.5 s (one warm-up second plus a measured one)")
    a.list_repeats, a.replay_repeats = 5, 5
    a.sulis_options, a.aeron_props = r.driver_options(a.driver_options), r.driver_options(a.aeron_props)
    sections = [w.strip() for w in a.only.split(",") if w.strip()] or list(SECTIONS)
    if unknown := set(sections) - set(SECTIONS):
        ap.error(f"unknown --only sections {sorted(unknown)} (known: {', '.join(SECTIONS)})")

    why = ""
    aeron = None
    if a.no_aeron_current:
        why = "--no-aeron-current"
    else:
        try:
            aeron = aeron_java.find("current")
        except aeron_java.Missing as e:
            why = str(e)
    print(f"growth tables, sulis beside Aeron {aeron.version if aeron else '(' + why + ')'}; sulis {a.profile} "
          f"build; {cpu_summary()}")
    extra = "".join(f" --{k.replace('_', '-')} {v}" for k, v in a.sulis_options.items())
    props = "".join(f" -D{k}={v}" for k, v in a.aeron_props.items())
    print(f"drivers: sulis `python -m sulis.cli driver --threading-mode shared{extra}`, Aeron "
          f"io.aeron.driver.MediaDriver SHARED{props}; both default idle (backoff), sparse logs; one sulis client "
          f"for both; "
          f"streams N = {', '.join(f'{n:,}' for n in a.streams)}; recordings N = "
          f"{', '.join(f'{n:,}' for n in a.recordings)}; cluster sessions N = "
          f"{', '.join(f'{n:,}' for n in a.sessions)}", flush=True)
    t_start = time.monotonic()
    record: dict = {"settings": {k: v for k, v in vars(a).items() if k not in ("profile",)},
                    "aeron": aeron.version if aeron else None, "aeron_skipped": why or None}
    notes: list[str] = []
    checks: list[dict] = []
    tables: list = []
    if "streams" in sections:
        res = streams_section(a, aeron, why)
        record["streams"] = res
        for kind in a.kinds:
            title = f"streams, {kind}"
            rows = growth_table(title, STREAM_ROWS, res[kind], a.streams, notes, checks,
                                skip_keys=("connect_s",) if kind == "ipc" else ())
            tables.append((f"{title}: {KINDS[kind]} (64 KiB terms):", rows, a.streams))
    if "recordings" in sections:
        res = recordings_section(a, aeron, why)
        record["recordings"] = res
        rows = growth_table("recordings", REC_ROWS, res, a.recordings, notes, checks)
        tables.append(("recordings: archive process on its driver, N recordings of one 32 B message on "
                       "aeron:ipc?term-length=64k:", rows, a.recordings))
    if "sessions" in sections:
        res = sessions_section(a, aeron, why)
        record["sessions"] = res
        rows = growth_table("sessions", SESSION_ROWS, res, a.sessions, notes, checks)
        tables.append((f"cluster sessions: a one-member cluster (echo service), one client process with the sulis "
                       f"Python client opening N sessions on one driver client (``client=``), each its own egress; "
                       f"echoes at 1 msg/s per session for "
                       f"{a.echo_seconds} s (the JVM's RSS includes its heap):", rows, a.sessions))
    if "big" in sections:
        res = big_section(a, aeron, why)
        record["big"] = res
        rows = growth_table("big recordings", BIG_ROWS, res, a.big_gib, notes, checks)
        dropped = [m.get("cache_dropped") for cells in res.values() for m in cells.values() if "cache_dropped" in m]
        cache = ("the page cache dropped before each replay (they read the disk)" if dropped and all(dropped) else
                 "the page cache NOT dropped before the replays (not root): they may read memory, not the disk")
        tables.append((f"big recordings: one recording of 8 KiB messages on aeron:ipc?term-length=16m, archive with "
                       f"1 GiB segment files in {a.dir or tempfile.gettempdir()}; {cache}:", rows, a.big_gib, "GiB"))
    if "busy" in sections:
        res = busy_section(a, aeron, why)
        record["busy"] = res
        rows = busy_table(res)
        tables.append((f"one busy IPC stream alone on each driver (offer_batch of 1,024 x 32 B, poll_batch(4096), "
                       f"three processes on this machine), M msgs/s, median of {a.busy_runs} runs each:", rows, None,
                       "term"))
    for heading, rows, ns, *unit in tables:
        if ns is None:
            print(f"\n{heading}")
            print_table(["system", *BUSY_TERMS], rows, "l" + "r" * len(BUSY_TERMS))
        else:
            print_section_table(heading, rows, ns, *unit)
    if notes:
        print("\nfailed measurements:")
        for i, note in enumerate(notes, 1):
            print(f"  [{i}] {' '.join(note.split())[:600]}")

    targets = print_targets(a, record, checks)
    record["targets"] = targets
    noisy = [f"{sec} {k}" for sec, k, m in _cells(record) if m.get("interference", 0) > a.max_interference]
    if noisy:
        print(f"  note: {len(noisy)} measurement(s) noisy (other processes used more than "
              f"{a.max_interference * 100:.0f}% of a CPU): {', '.join(noisy[:12])}{' ...' if len(noisy) > 12 else ''}")
    print(f"\n(total {time.monotonic() - t_start:.0f} s)")
    save(r.results_dir(), "scale", record)
    failed_sulis = [k for sec, k, m in _cells(record) if "error" in m and k.split()[0] == "sulis"]
    return 1 if failed_sulis else 0


def busy_table(res: dict) -> list[list[str]]:
    """The busy section's rows: each system's medians per term length, then sulis/Aeron."""
    rows = []
    for system, label in (("sulis", "sulis"), ("aeron", "Aeron 1.51")):
        rows.append([label, *(f"{res[system][t]['busy'] / 1e6:.2f}" if "busy" in res[system].get(t, {})
                              else ("skipped" if "skipped" in res[system].get(t, {}) else "failed")
                              for t in BUSY_TERMS)])
    rows.append(["sulis/Aeron", *(f"{res['sulis'][t]['busy'] / res['aeron'][t]['busy']:.2f}x"
                                  if "busy" in res["sulis"].get(t, {}) and "busy" in res["aeron"].get(t, {}) else "-"
                                  for t in BUSY_TERMS)])
    return rows


def _cells(record: dict):
    """(section, "system kind N", cell) of every measurement in the record."""
    for kind, per in (record.get("streams") or {}).items():
        for system, cells in per.items():
            for n, m in cells.items():
                yield "streams", f"{system} {kind} N={n}", m
    for system, cells in (record.get("recordings") or {}).items():
        for n, m in cells.items():
            yield "recordings", f"{system} N={n}", m
    for system, cells in (record.get("sessions") or {}).items():
        for n, m in cells.items():
            yield "sessions", f"{system} N={n}", m
    for system, cells in (record.get("big") or {}).items():
        for n, m in cells.items():
            yield "big", f"{system} {n} GiB", m


def print_targets(a, record: dict, checks: list) -> list[dict]:
    """The issue's targets, met or missed; returned for the record."""
    out = []
    print("\ntargets:")
    for c in checks:
        c["met"] = (c["sulis_short_of"] is None and c["sulis"] is not None and c["aeron"] is not None
                    and c["sulis"] <= c["aeron"])
    missed = [c for c in checks if not c["met"] and (c["sulis_short_of"] or c["aeron"] is not None)]
    unknown = [c for c in checks if not c["met"] and c not in missed]
    rows = "; ".join(what for key, what in (("streams", "add, /dev/shm and RSS per stream, idle CPU, busy rate"),
                                            ("recordings", "list, restart, replay start"),
                                            ("sessions", "connect per session"),
                                            ("big", "record, replay, seek")) if record.get(key))
    print(f"  every growth factor at or under Aeron's in the same row ({rows}): {sum(c['met'] for c in checks)} met, "
          f"{len(missed)} missed"
          + (f", {len(unknown)} without both figures" if unknown else "")
          + f" -> {verdict(not missed and not unknown)}")
    for c in missed:
        to = f" (N up to {c['to']:,})" if c["to"] else ""
        growths = f"sulis {c['sulis']:.2f}x, Aeron {c['aeron']:.2f}x{to}" if c["sulis"] is not None else ""
        failed = f"sulis failed at N={c['sulis_short_of']:,}, which Aeron ran" if c["sulis_short_of"] else ""
        print(f"    missed: {c['row']}: {'; '.join(filter(None, (growths, failed)))}")
    out += [{"target": f"growth {c['row']}", **c} for c in checks]
    streams = record.get("streams") or {}
    for kind, per in streams.items():
        both = [n for n in a.streams if all(isinstance(per[s].get(n, {}).get("shm_per_stream"), (int, float))
                                            for s in SYSTEMS)]
        if not both:
            print(f"  {kind}: /dev/shm and driver RSS per idle stream within 1.5x Aeron's: no N measured by both")
            continue
        n = both[-1]
        aeron_ran = [m for m in a.streams if isinstance(per["aeron"].get(m, {}).get("shm_per_stream"), (int, float))]
        short = f"; sulis failed at N={aeron_ran[-1]:,}, which Aeron ran" if aeron_ran[-1] > n else ""
        for key, what in (("shm_per_stream", "/dev/shm"), ("driver_rss_per_stream", "driver RSS")):
            s, j = per["sulis"][n][key], per["aeron"][n][key]
            ratio = s / j if j > 0 else float("inf") if s > 0 else 1.0
            ok = ratio <= 1.5 and not short
            print(f"  {kind}: {what} per idle stream within 1.5x Aeron's (N={n:,}): {s / 1024:.1f} KiB vs "
                  f"{j / 1024:.1f} KiB = {ratio:.2f}x{short} -> {verdict(ok)}")
            out.append({"target": f"{kind} {what} per stream <= 1.5x", "n": n, "sulis": s, "aeron": j, "met": ok})
    busy = [(s["busy"] / j["busy"], kind, n) for kind, per in streams.items() for n in a.streams
            if isinstance((s := per["sulis"].get(n, {})).get("busy"), float)
            and isinstance((j := per["aeron"].get(n, {})).get("busy"), float)]
    if busy:
        worst = min(busy)
        ok = worst[0] >= 1.0
        print(f"  one busy IPC stream >= 1.0x Aeron's driver (every kind and N): lowest {worst[0]:.2f}x "
              f"({worst[1]}, N={worst[2]:,}); {sum(b[0] >= 1.0 for b in busy)} of {len(busy)} at or above -> "
              f"{verdict(ok)}")
        out.append({"target": "busy IPC stream >= 1.0x", "lowest": worst[0], "met": ok,
                    "ratios": {f"{k} N={n}": v for v, k, n in busy}})
    rec = record.get("recordings") or {}
    if rec:
        s, j = rec["sulis"].get(10_000, {}).get("list_ms"), rec["aeron"].get(10_000, {}).get("list_ms")
        if s is not None and j is not None:
            print(f"  listing 10,000 recordings <= Aeron's time: {s:.1f} ms vs {j:.1f} ms = {s / j:.2f}x -> "
                  f"{verdict(s <= j)}")
            out.append({"target": "list 10,000 recordings <= Aeron", "sulis": s, "aeron": j, "met": s <= j})
        else:
            print("  listing 10,000 recordings <= Aeron's time: not measured (N=10,000 not in this run, or failed)")
    if record.get("sessions"):
        out += session_targets(a, record["sessions"])
    if record.get("busy"):
        res = record["busy"]
        ratios = {t: res["sulis"][t]["busy"] / res["aeron"][t]["busy"] for t in BUSY_TERMS
                  if "busy" in res["sulis"].get(t, {}) and "busy" in res["aeron"].get(t, {})}
        ok = len(ratios) == len(BUSY_TERMS) and min(ratios.values()) >= 1.0
        print("  one busy IPC stream >= 1.0x Aeron's driver for 64 KiB, 1 MiB and 64 MiB terms: "
              + ", ".join(f"{t} {v:.2f}x" for t, v in ratios.items()) + f" -> {verdict(ok)}")
        out.append({"target": "busy IPC stream >= 1.0x per term length", "ratios": ratios, "met": ok})
    if record.get("big"):
        hung = [f"{system} {n} GiB" for system, cells in record["big"].items() for n, m in cells.items()
                if "stalled" in m.get("error", "")]
        print(f"  no hang with big recordings (a replay stalled {a.big_stall_s:g} s fails): "
              + (", ".join(hung) if hung else "none stalled") + f" -> {verdict(not hung)}")
        out.append({"target": "no hang at big recordings", "stalled": hung, "met": not hung})
    return out


def session_targets(a, res: dict) -> list[dict]:
    """Memory per session (reported in KiB, no threshold) and echo p99 at the largest N within 2x the smallest's."""
    out: list[dict] = []
    number = lambda cell, key: cell.get(key) if isinstance(cell.get(key), (int, float)) else None  # noqa: E731
    both = [n for n in a.sessions if all(number(res[s].get(n, {}), "node_rss_per_session") is not None
                                         for s in SYSTEMS)]
    ran = [n for n in a.sessions if number(res["sulis"].get(n, {}), "node_rss_per_session") is not None]
    if ran:
        n = both[-1] if both else ran[-1]
        kib = {(s, k): number(res[s].get(n, {}), k) for s in SYSTEMS
               for k in ("node_rss_per_session", "client_rss_per_session", "client_driver_rss_per_session")}

        def text(system: str, key: str) -> str:
            v = kib[system, key]
            return "-" if v is None else f"{v / 1024:.1f} KiB"

        def ratio(key: str) -> str:
            s, j = kib["sulis", key], kib["aeron", key]
            return f" = {s / j:.2f}x" if s is not None and j is not None and j > 0 else ""

        print(f"  sessions: memory per session at N={n:,} (reported, no threshold): leader RSS sulis "
              f"{text('sulis', 'node_rss_per_session')} vs Aeron {text('aeron', 'node_rss_per_session')}"
              f"{ratio('node_rss_per_session')} (the JVM's includes its heap); client process "
              f"{text('sulis', 'client_rss_per_session')} vs {text('aeron', 'client_rss_per_session')}; client's "
              f"driver {text('sulis', 'client_driver_rss_per_session')} vs "
              f"{text('aeron', 'client_driver_rss_per_session')}")
        out.append({"target": "memory per session (reported)", "n": n,
                    **{f"{s} {k}": v for (s, k), v in kib.items()}})
    lo, hi = a.sessions[0], a.sessions[-1]
    if lo == hi:
        return out
    p99 = {s: (number(res[s].get(lo, {}), "echo_p99_us"), number(res[s].get(hi, {}), "echo_p99_us")) for s in SYSTEMS}
    s_lo, s_hi = p99["sulis"]
    aeron_text = (f"; Aeron {p99['aeron'][1]:.0f} / {p99['aeron'][0]:.0f} µs = {p99['aeron'][1] / p99['aeron'][0]:.2f}x"
                  if None not in p99["aeron"] and p99["aeron"][0] else "")
    if s_lo is None or s_hi is None:
        print(f"  sessions: echo p99 at N={hi:,} within 2x the p99 at N={lo:,}: sulis has no p99 at "
              f"N={lo if s_lo is None else hi:,} (failed) -> {verdict(False)}")
        out.append({"target": f"echo p99 N={hi} <= 2x N={lo}", "met": False, "sulis": None})
        return out
    ok = s_hi <= 2 * s_lo
    print(f"  sessions: echo p99 at N={hi:,} within 2x the p99 at N={lo:,}: sulis {s_hi:.0f} / {s_lo:.0f} µs = "
          f"{s_hi / s_lo:.2f}x{aeron_text} -> {verdict(ok)}")
    out.append({"target": f"echo p99 N={hi} <= 2x N={lo}", "met": ok, "sulis": [s_lo, s_hi],
                "aeron": list(p99["aeron"])})
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--holder":
        sys.exit(holder(json.loads(sys.argv[2])))
    if len(sys.argv) == 3 and sys.argv[1] == "--sessions-holder":
        sys.exit(session_holder(json.loads(sys.argv[2])))
    sys.exit(r.main_guard(main))
