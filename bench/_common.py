"""The orchestration of the benchmarks in bench/ (bench/README.md, "How the harness is built").

Every row is a pair of roles (a publisher and a subscriber, or a ping and a pong), each a
process: Python roles (``py_role``: ``python -m sulis._benchkit`` and bench/roles.py), the native
ones (``native_role``: crates/sulis-bench) and Aeron's (bench/peers/aeron.py). They all speak the
same JSON lines, so ``run_stream`` and ``run_ping_pong`` run any of them; the measured loops are
in ``sulis._benchkit``. Around them: rounds interleaved across rows, the noise of other processes
(``Interference``), tables, and a JSON record in bench/results/ (git-ignored).

Clean-up: children die with the orchestrator (PR_SET_PDEATHSIG); leaving ``Children`` closes
their stdin (their cue to go), then SIGTERM, then SIGKILL; every run's files live in a
``shm_dir`` removed afterwards, and by the next benchmark if the orchestrator was killed.
"""
from __future__ import annotations

import argparse
import atexit
import datetime as _dt
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
NATIVE = ROOT / "target" / "release" / "sulis-bench"
if str(ROOT) not in sys.path:  # `python bench/x.py` from anywhere: `bench.peers` importable
    sys.path.insert(0, str(ROOT))

from sulis import _benchkit as kit  # noqa: E402
from sulis._benchkit import free_port  # noqa: E402, F401 - the port helper of bench/

#: Keys of a latency result, in print order.
LATENCY_KEYS = ["p50_us", "p90_us", "p99_us", "p99_9_us", "max_us"]
#: Counters of the publishing and receiving drivers worth printing (Aeron's system counter ids).
COUNTERS = {0: "bytes_sent", 1: "bytes_received", 5: "naks_sent", 6: "naks_received", 7: "status_messages_sent",
            8: "status_messages_received", 9: "heartbeats_sent", 11: "retransmits_sent",
            13: "flow_control_over_runs", 16: "short_sends", 18: "sender_flow_control_limits"}


class Skip(RuntimeError):
    """A row that cannot run here (not installed, no cargo...): printed as skipped."""


def require_release_build() -> str:
    """Exits unless the installed sulis extension is a release build. Returns the profile."""
    import sulis

    if sulis.build_profile != "release":
        sys.exit(f"refusing to benchmark a {sulis.build_profile!r} build of sulis: rebuild with "
                 "`maturin develop --release` (sulis.build_profile must be 'release')")
    return sulis.build_profile


def disk_mb_s(base: str, megabytes: int) -> float:
    """Sequential write speed of ``base`` in MB/s: 1 MiB writes of random bytes, then fsync."""
    os.makedirs(base, exist_ok=True)
    path = os.path.join(base, "disk-speed.bin")
    block = os.urandom(1 << 20)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(megabytes):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    s = time.perf_counter() - t0
    os.remove(path)
    return megabytes * (1 << 20) / 1e6 / s


def dirty_limit_bytes() -> int:
    """About how many bytes the kernel lets sit dirty before it makes writers wait: ``dirty_bytes``, or
    ``dirty_ratio`` percent of the available memory."""
    limits = dirty_limits()
    if int(limits["dirty_bytes"]):
        return int(limits["dirty_bytes"])
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    available = int(meminfo["MemAvailable"].split()[0]) * 1024
    return available * int(limits["dirty_ratio"]) // 100


def dirty_limits() -> dict[str, str]:
    """The kernel's limits on dirty page cache (past them, writers wait for the disk)."""
    return {k: Path(f"/proc/sys/vm/{k}").read_text().strip()
            for k in ("dirty_ratio", "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes")}


def median(xs) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def udp_channel(host: str, port: int, params: str) -> str:
    """``aeron:udp?endpoint=HOST:PORT|<params>`` (params ``|``-separated, may be empty)."""
    return "|".join([f"aeron:udp?endpoint={host}:{port}", *filter(None, params.split("|"))])


def two_free_ports(host: str = "127.0.0.1", tcp: bool = False) -> tuple[int, int]:
    """Two different UDP (or TCP) ports free on ``host`` now (a ping and a pong endpoint)."""
    ping, pong = free_port(host, tcp), free_port(host, tcp)
    while pong == ping:
        pong = free_port(host, tcp)
    return ping, pong


def cpu_summary() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    return f"{os.cpu_count()} CPUs ({model}), Python {sys.version.split()[0]}"


def pins(cpu: int | None, driver: bool = False) -> dict:
    """Role parameters that pin it (and its client's thread) to ``cpu`` (None: nothing) once its
    driver runs; ``driver``: the driver's threads too."""
    return {} if cpu is None else {"cpu": cpu, **({"driver_cpu": cpu} if driver else {})}


# ----------------------------------------------------------------- run directories

_CREATED_DIRS: set[str] = set()
# sulis-bench-<what>-<pid>-<suffix without '-'>: run directories and iceoryx2's files of a run.
_STALE_NAME = re.compile(r"^sulis-bench-(.+)-(\d+)-([^-]+)$")


def shm_dir(prefix: str) -> str:
    """A fresh ``<prefix><pid>-<random>`` directory under /dev/shm (or the temp dir) for one run;
    removed by ``rm_tree`` afterwards, at the latest at exit, or by ``remove_stale`` of the next
    benchmark if this one was killed."""
    path = kit.scratch_dir(f"{prefix}{os.getpid()}-")
    _CREATED_DIRS.add(path)
    return path


def rm_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    _CREATED_DIRS.discard(path)


atexit.register(lambda: [rm_tree(p) for p in list(_CREATED_DIRS)])


def remove_stale() -> list[str]:
    """Removes what killed benchmarks left in /dev/shm and the temp dir (entries named
    ``sulis-bench-<what>-<pid>-<suffix>`` whose pid is gone). Returns the paths removed."""
    removed = []
    for base in {"/dev/shm", tempfile.gettempdir()}:
        for name in os.listdir(base) if os.path.isdir(base) else []:
            m = _STALE_NAME.match(name)
            if m and not os.path.exists(f"/proc/{m.group(2)}"):
                path = os.path.join(base, name)
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)
                removed.append(path)
    return removed


def remove_shm_prefix(prefix: str) -> None:
    """Removes the /dev/shm entries named ``prefix...`` (a peer's files of one run, e.g. iceoryx2's)."""
    for name in os.listdir("/dev/shm") if prefix and "/" not in prefix else []:
        if name.startswith(prefix):
            path = os.path.join("/dev/shm", name)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)


# ----------------------------------------------------------------- roles and runs

def py_role(role: str, **params) -> list[str]:
    """The command of a Python role (bench/roles.py knows those of ``sulis._benchkit`` too)."""
    return [sys.executable, str(ROOT / "bench" / "roles.py"), json.dumps({"role": role, **params})]


def native_role(role: str, **params) -> list[str]:
    """The command of a native role (crates/sulis-bench); a ``driver`` dict becomes ``k=v,k=v``."""
    args = [f"{k}={','.join(f'{dk}={dv}' for dk, dv in v.items()) if isinstance(v, dict) else v}"
            for k, v in params.items() if v is not None]
    return [str(NATIVE), role, *args]


def build_native(variants: list, no_build: bool, prefix: str = "native") -> list:
    """Builds crates/sulis-bench (a no-op when up to date) when a variant key starts with
    ``prefix``; if that fails, says so and drops those variants."""
    if not any(k.startswith(prefix) for k, _, _ in variants):
        return variants
    cargo = shutil.which("cargo")
    why = None
    if not no_build and cargo:
        print("[build] cargo build --release -p sulis-bench", flush=True)
        r = subprocess.run([cargo, "build", "--release", "-q", "-p", "sulis-bench"], cwd=ROOT, capture_output=True,
                           text=True)
        why = f"cargo build failed:\n{r.stderr[-2000:]}" if r.returncode else None
    if why or not NATIVE.is_file():
        print(f"[skip] sulis native: {why or f'{NATIVE} not found (no cargo to build it)'}")
        return [v for v in variants if not v[0].startswith(prefix)]
    return variants


class Children:
    """The role processes of one run, dying with us. ``pair`` starts two: the first, then the second
    (a command, or a function of the first's ``ready`` message). They stay in our session: with
    the kernel's autogroup, processes of different sessions share the CPUs per session, not per
    thread, which would change who gets how much of the 2 cores. Leaving the block closes them, the
    last started first (stdin, then SIGTERM, then SIGKILL), removes the directories given and calls
    ``after``."""

    def __init__(self, *dirs: str, after: Callable[[], None] | None = None):
        self._dirs, self._after, self.children = dirs, after, []

    def __enter__(self) -> Children:
        return self

    def pair(self, first: tuple, second: tuple, timeout_s: float) -> tuple[kit.Child, kit.Child]:
        ready: dict = {}
        for what, cmd in (first, second):
            self.children.append(kit.Child(what, cmd=cmd(ready) if callable(cmd) else cmd, cwd=str(ROOT)))
            ready = self.children[-1].read(timeout_s)
        return self.children[0], self.children[1]

    def __exit__(self, *exc) -> None:
        try:
            for child in reversed(self.children):
                child.close(grace_s=5.0)
        finally:
            for d in self._dirs:
                rm_tree(d)
            if self._after is not None:
                self._after()


def read_counters(directory: str) -> dict | None:
    """``COUNTERS`` of the driver (sulis' or Aeron's: same CnC layout) in ``directory``; None if unreadable."""
    try:
        import sulis

        reader = sulis.CountersReader(directory)
        return {name: reader.value(i) for i, name in COUNTERS.items()}
    except Exception:  # an unreadable CnC only loses the diagnostics
        return None


def run_stream(sub, pub, stop_file: str, pub_first: bool = False, dirs: Sequence[str] = (),
               counters: dict | None = None, after=None, timeout_s: float = 60.0) -> dict:
    """One run of a subscriber and a publisher role (the subscriber first, or the publisher hosting
    the driver with ``pub_first``): reads the subscriber's per-second counts (printed as they come)
    or its timed count up to its ``done``, creates ``stop_file`` (the publisher stops) and takes the
    publisher's report; with ``counters`` (``{"publisher": dir, "subscriber": dir}``) the drivers'
    counters are read before the roles go. Returns ``{"samples", "msgs_per_s" (the median after the
    warm-up second), "done", "sent", ...}``."""
    with Children(*dirs, after=after) as ch:
        if pub_first:
            pub_c, sub_c = ch.pair(("publisher", pub), ("subscriber", sub), timeout_s)
        else:
            sub_c, pub_c = ch.pair(("subscriber", sub), ("publisher", pub), timeout_s)
        samples = []
        while not (msg := sub_c.read(timeout_s, watch=[pub_c])).get("done"):
            samples.append(msg["messages"] / msg["interval_s"])
            print(f"      interval {len(samples)}: {samples[-1]:,.0f} msgs/s"
                  + ("  (warm-up)" if len(samples) == 1 else ""), flush=True)
        Path(stop_file).touch()
        r = {"samples": samples, "done": msg, **pub_c.read(timeout_s, watch=[sub_c])}
        if counters:
            r["counters"] = {side: read_counters(d) for side, d in counters.items()}
    if "ns" not in msg and len(samples) < 2:  # counted per second, not timed
        raise RuntimeError(f"the subscriber reported {len(samples)} intervals")
    r["msgs_per_s"] = median(samples[1:]) if samples else None
    return r


def run_ping_pong(pong, ping, ping_first: bool = False, dirs: Sequence[str] = (), after=None) -> dict:
    """One run of a pong and a ping role (pong first, or ping hosting the driver with ``ping_first``);
    returns p50 ... max (µs) of ping's round trips from an HdrHistogram (1 ns .. 60 s, 3 digits)."""
    with Children(*dirs, after=after) as ch:
        if ping_first:
            ping_c, pong_c = ch.pair(("ping", ping), ("pong", pong), 60)
        else:
            pong_c, ping_c = ch.pair(("pong", pong), ("ping", ping), 60)
        rtt = ping_c.read(600, watch=[pong_c])["rtt_ns"]
        pong_c.read(60)
    return kit.summarize(kit.histogram(rtt))


def available(dist: str, module: str) -> str:
    """The installed version of ``dist``; raises Skip when ``module`` cannot be imported."""
    try:
        import importlib
        import importlib.metadata

        importlib.import_module(module)
        return importlib.metadata.version(dist)
    except Exception as exc:  # ImportError, or a broken wheel
        raise Skip(f"{dist} not usable ({type(exc).__name__}: {exc}); run `bash bench/peers/install.sh`") from None


PEERS = {"zmq": ("pyzmq", "zmq"), "zenoh": ("eclipse-zenoh", "zenoh"), "iceoryx2": ("iceoryx2", "iceoryx2")}


def peer_run(peer: str, transport: str, duration: float | None = None, n: int = 0, warmup: int = 0,
             idle: str = "spin", pin: bool = False) -> dict:
    """One run of a peer (zmq, zenoh, iceoryx2; bench/roles.py) over ``transport`` (ipc: Unix sockets
    or shared memory, tcp: loopback): a stream for ``duration`` seconds (pyzmq PUSH/PULL, zenoh
    put/recv, iceoryx2 send_copy/receive), else ``n`` round trips after ``warmup`` (pyzmq REQ/REP,
    zenoh put/try_recv, iceoryx2 send_copy/receive); ``pin``: the sender on CPU 0, the other on 1."""
    version = available(*PEERS[peer])
    base = shm_dir(f"sulis-bench-{peer}-")
    prefix = f"sulis-bench-iox2-{os.getpid()}-{os.path.basename(base)[-8:]}_"  # iceoryx2's files of the run
    if peer == "zmq":  # the PULL or REP side binds, the other connects to what it bound
        p = {"endpoint": f"ipc://{base}/zmq.sock" if transport == "ipc" else "tcp://127.0.0.1:0"}
    elif peer == "zenoh":
        p = {"endpoint": f"unixsock-stream/{base}/zenoh.sock" if transport == "ipc"
             else f"tcp/127.0.0.1:{free_port(tcp=True)}"}
    else:
        p = {"root": base, "prefix": prefix, "buffer": 4096}
    p.update(size=32, idle=idle, n=n, warmup=warmup, total=n + warmup, stop=os.path.join(base, "stop"))
    send, recv = ({"zmq": ("zmq-push", "zmq-pull")}.get(peer, (f"{peer}-pub", f"{peer}-sub")) if duration else
                  {"zmq": ("zmq-req", "zmq-rep")}.get(peer, (f"{peer}-ping", f"{peer}-pong")))
    first = py_role(recv, **p, **({"duration": duration} if duration else {}), **pins(1 if pin else None))
    second = lambda ready: py_role(send, **{**p, **ready, **pins(0 if pin else None)})  # noqa: E731
    after = lambda: remove_shm_prefix(prefix)  # noqa: E731
    r = (run_stream(first, second, p["stop"], dirs=[base], after=after) if duration
         else run_ping_pong(first, second, dirs=[base], after=after))
    r[peer] = version
    return r


# ----------------------------------------------------------------- interference

def _proc_table() -> dict[int, tuple[int, float]]:
    """{pid: (ppid, cpu seconds)} of every process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                rest = f.read().decode("ascii", "replace").rsplit(")", 1)[1].split()  # after "pid (comm)"
            out[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / tick)
        except (OSError, IndexError, ValueError):
            continue
    return out


class Interference:
    """CPU time that processes outside this benchmark used while it ran (foreign CPU seconds per
    wall second in ``share``), so that a run a build or a test suite slowed down is flagged::

        with Interference() as itf:
            run()
    """

    def __enter__(self) -> Interference:
        self._before, self._t0, self.share = _proc_table(), time.monotonic(), 0.0
        return self

    @staticmethod
    def _ours(table: dict) -> set[int]:
        ours, changed = {os.getpid()}, True
        while changed:
            new = {pid for pid, (ppid, _) in table.items() if ppid in ours} - ours
            ours |= new
            changed = bool(new)
        return ours

    def __exit__(self, *exc) -> None:
        wall = time.monotonic() - self._t0
        after = _proc_table()
        ours = self._ours(after) | self._ours(self._before)
        foreign = sum(cpu - self._before.get(pid, (0, 0.0))[1] for pid, (_, cpu) in after.items() if pid not in ours)
        self.share = max(foreign, 0.0) / wall if wall > 0 else 0.0


def wait_for_quiet(max_share: float, max_wait_s: float) -> None:
    """Waits (up to ``max_wait_s``) for a second in which other processes use at most ``max_share`` of a CPU."""
    t0, told = time.monotonic(), False
    while True:
        with Interference() as itf:
            time.sleep(1.0)
        if itf.share <= max_share or time.monotonic() - t0 >= max_wait_s:
            if told:
                print(f"      (waited {time.monotonic() - t0:.0f} s; others now use {itf.share * 100:.0f}% of a CPU)")
            return
        if not told:
            print(f"      other processes use {itf.share * 100:.0f}% of a CPU: waiting up to {max_wait_s:g} s")
        told = True


# ----------------------------------------------------------------- rounds

def run_rounds(variants, a: argparse.Namespace, describe) -> tuple[dict, dict, dict]:
    """Runs every variant ``(key, name, fn)`` once per round, round by round (a slow period of the
    machine then hits every system). A run during which other processes used more than
    ``--max-interference`` of a CPU is repeated up to ``--retry-noisy`` times; with
    ``--wait-quiet``, each run first waits for a quiet second. Returns ``(results, skipped, errors)``."""
    results: dict[str, list[dict]] = {k: [] for k, _, _ in variants}
    skipped: dict[str, str] = {}
    errors: dict[str, list[str]] = {}
    for rnd in range(a.runs):
        for key, name, fn in variants:
            if key in skipped:
                continue
            print(f"[round {rnd + 1}/{a.runs}] {name}", flush=True)
            try:
                for attempt in range(a.retry_noisy + 1):
                    if a.wait_quiet > 0:
                        wait_for_quiet(a.max_interference, a.wait_quiet)
                    with Interference() as itf:
                        r = fn()
                    r["interference"] = itf.share
                    if itf.share <= a.max_interference:
                        break
                    print(f"      NOISY: other processes used {itf.share * 100:.0f}% of a CPU during this run"
                          + ("; running it again" if attempt < a.retry_noisy else "; kept, flagged"), flush=True)
            except Skip as exc:
                skipped[key] = str(exc)
                print(f"      skipped: {exc}")
                continue
            except Exception as exc:  # one failed run must not lose the others
                errors.setdefault(key, []).append(f"{type(exc).__name__}: {exc}")
                print(f"      FAILED: {type(exc).__name__}: {exc}")
                continue
            results[key].append(r)
            print(f"      -> {describe(r)}", flush=True)
    return results, skipped, errors


def parser(doc: str, duration: bool = False, round_trips: bool = False, wait_quiet: float = 0.0,
           only: str = "") -> argparse.ArgumentParser:
    """A benchmark's options: ``--runs``, ``--quick``, ``--only``, ``--no-aeron-current``,
    ``--no-build``, the noise options, and ``--duration``/``--batch`` or ``--n``/``--warmup``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=None, help="rounds per variant (default 3; --quick: 1)")
    ap.add_argument("--quick", action="store_true", help="one short round: a smoke test, not a measurement")
    if duration:
        ap.add_argument("--duration", type=float, default=None,
                        help="seconds per run, the first is warm-up (default 6; --quick: 3)")
        ap.add_argument("--batch", type=int, default=4096, help="poll_batch limit of the Python subscriber")
    if round_trips:
        ap.add_argument("--n", type=int, default=None, help="timed round trips per run (default 100,000)")
        ap.add_argument("--warmup", type=int, default=None, help="untimed round trips first (default 10,000)")
    ap.add_argument("--only", default="", help=f"comma list among: {only}")
    ap.add_argument("--no-aeron-current", action="store_true", help="skip the current Aeron release")
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build for the native roles")
    ap.add_argument("--max-interference", type=float, default=0.10,
                    help="a run during which other processes used more than this share of a CPU is noisy "
                         "(default 0.10)")
    ap.add_argument("--retry-noisy", type=int, default=2, help="times a noisy run is repeated (default 2)")
    ap.add_argument("--wait-quiet", type=float, default=wait_quiet,
                    help=f"before each run, wait up to this many seconds for a second in which other processes "
                         f"stay under --max-interference (default {wait_quiet:g}; 0: do not wait)")
    return ap


def udp_args(ap: argparse.ArgumentParser, channel_params: str, aeron: bool = True) -> None:
    """The UDP benchmarks' settings of every driver, client and channel (and, with ``aeron``, of
    Aeron's drivers when they should differ from sulis')."""
    ap.add_argument("--threading", default="shared", help="threading mode of every driver (default shared)")
    ap.add_argument("--driver-idle", default="yielding", help="idle strategy of every driver (default yielding)")
    ap.add_argument("--client-idle", choices=["yield", "spin"], default="yield",
                    help="what a client does after a refused offer or an empty poll: sched_yield (default) or spin")
    ap.add_argument("--channel-params", default=channel_params,
                    help=f"channel URI parameters for sulis; mtu/term-length/rcv-wnd/so-rcvbuf/so-sndbuf also become "
                         f"Aeron's driver properties (default {channel_params})")
    if aeron:
        ap.add_argument("--aeron-threading", default=None, help="Aeron's threading mode (default: --threading)")
        ap.add_argument("--aeron-driver-idle", default=None, help="Aeron's drivers' idle strategy (default: same)")


def settle(a: argparse.Namespace, ap: argparse.ArgumentParser) -> None:
    """Checks the common options and fills in their defaults."""
    if a.runs is not None and a.runs < 1:
        ap.error("--runs must be at least 1")
    a.runs = a.runs or (1 if a.quick else 3)
    if getattr(a, "duration", False) is not False:
        a.duration = a.duration or (3.0 if a.quick else 6.0)
        if a.duration < 2.5:
            ap.error("--duration must be at least 2.5 s (one warm-up second plus measured ones)")
        if a.batch < 1:
            ap.error("--batch must be at least 1")
    if getattr(a, "n", False) is not False:
        a.n = a.n or (20_000 if a.quick else 100_000)
        a.warmup = a.warmup if a.warmup is not None else (2_000 if a.quick else 10_000)
        if a.n < 1 or a.warmup < 0:
            ap.error("--n must be at least 1 and --warmup at least 0")


def select(variants: list, a: argparse.Namespace, ap: argparse.ArgumentParser, optional=()) -> list:
    """The variants to run: those named in ``optional`` only when ``--only`` names them, none of
    the current Aeron with ``--no-aeron-current``, then ``--only`` (unknown names are an error)."""
    wanted = {w.strip() for w in a.only.split(",") if w.strip()}
    unknown = wanted - {k for k, _, _ in variants}
    if unknown:
        ap.error(f"unknown --only names: {sorted(unknown)} (known: {', '.join(k for k, _, _ in variants)})")
    return [v for v in variants if (v[0] in wanted if wanted else v[0] not in optional)
            and not (a.no_aeron_current and v[0].startswith("aeron-current"))]


# ----------------------------------------------------------------- tables and reports

def fmt_ratio(v: float | None) -> str:
    return "-" if not v or v != v else f"{v:.2f}x"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> None:
    """Plain-text table; ``align`` has one letter per column, l or r (default: first l, rest r)."""
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]

    def line(cells):
        cells = zip(cells, widths, align, strict=True)
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in cells)

    print(line(headers).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r).rstrip())


def missing_text(key: str, skipped: dict, errors: dict, width: int = 70) -> str:
    """What a row without results shows: ``skipped: <reason>`` or ``failed: <error>``."""
    text = ("skipped: " + skipped[key]) if key in skipped else ("failed: " + errors[key][-1]) if key in errors \
        else "no result"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def report_throughput(variants: list, results: dict, skipped: dict, errors: dict, heading: str,
                      ratios: Sequence[tuple[str, str | float]]) -> dict:
    """The table of a throughput benchmark: per row the median msgs/s, the per-run figures, one
    ``vs X`` column per ``(header, variant key or a rate)`` and the configuration. Returns the medians."""
    med = {k: median(r["msgs_per_s"] for r in rs) for k, rs in results.items() if rs}
    refs = [(h, med.get(ref) if isinstance(ref, str) else ref) for h, ref in ratios]
    rows = []
    for key, name, _ in variants:
        rs = results.get(key) or []
        if not rs:
            rows.append([name, missing_text(key, skipped, errors), "0", "", *("" for _ in refs), ""])
            continue
        rows.append([name, f"{med[key]:,.0f}", str(len(rs)), " / ".join(f"{r['msgs_per_s'] / 1e6:.2f}" for r in rs),
                     *(fmt_ratio(med[key] / ref if ref else None) for _, ref in refs), rs[0].get("config", "")])
    print(f"\n{heading}")
    print_table(["name", "median msgs/s", "runs", "per run (M)", *(h for h, _ in refs), "configuration"], rows,
                "l" + "r" * (3 + len(refs)) + "l")
    print("\ntargets:")
    return med


def report_latency(variants: list, results: dict, skipped: dict, errors: dict, heading: str, targets: dict,
                   compare_with: Sequence[str]) -> dict:
    """The table of a latency benchmark (p50 ... max in µs, ``x Py`` against the sulis Python row,
    the targets of sulis from Python), the targets met or missed and sulis Python against the rows
    of ``compare_with``. Returns the medians."""
    med = {k: {q: median(r[q] for r in rs) for q in LATENCY_KEYS} for k, rs in results.items() if rs}
    py = med.get("python")
    names = {k: n for k, n, _ in variants}
    rows = []
    for key, name, _ in variants:
        if key not in med:
            rows.append([name, missing_text(key, skipped, errors), "", "", "", "", "", "", "0", ""])
            continue
        m = med[key]
        rows.append([name, *(f"{m[q]:.2f}" for q in LATENCY_KEYS),
                     *(fmt_ratio(m[q] / py[q] if py else None) for q in ("p50_us", "p99_us")),
                     str(len(results[key])), results[key][0].get("config", "")])
    rows.append(["target (sulis Python)", *(f"<= {targets[q]:g}" if q in targets else "" for q in LATENCY_KEYS),
                 "", "", "", ""])
    print(f"\n{heading}")
    print_table(["name", "p50", "p90", "p99", "p99.9", "max", "p50 x Py", "p99 x Py", "runs", "configuration"], rows,
                "lrrrrrrrrl")
    print("\ntargets:")
    for q, target in targets.items() if py else ():
        print(f"  sulis Python {q[:-3]} <= {target:g} µs: {py[q]:.2f} µs -> {verdict(py[q] <= target)}")
    for key in compare_with:
        if py and key in med:
            print(f"  sulis Python vs {names[key]}: p50 {med[key]['p50_us'] / py['p50_us']:.2f}x, "
                  f"p99 {med[key]['p99_us'] / py['p99_us']:.2f}x (>1: sulis lower)")
    return med


def latency_line(r: dict) -> str:
    """``p50 0.71  p90 ...  max 12.3 µs`` for one latency result."""
    return "  ".join(f"{k[:-3].replace('_9', '.9')} {r[k]:.2f}" for k in LATENCY_KEYS) + " µs"


def finish(name: str, a: argparse.Namespace, settings: dict, variants: list, med: dict, results: dict,
           skipped: dict, errors: dict) -> int:
    """The notes (runs kept although noisy, rows that failed) and the record in
    bench/results/<name>-<timestamp>.json. Returns the exit status (1 when a run failed)."""
    names = {k: n for k, n, _ in variants}
    for k, rs in results.items():
        for i, r in enumerate(rs):
            if r.get("interference", 0) > a.max_interference:
                print(f"  note: {names[k]} run {i + 1} is noisy: other processes used "
                      f"{r['interference'] * 100:.0f}% of a CPU during it")
    for k, errs in errors.items():
        print(f"  note: {names[k]} failed {len(errs)} time(s): {errs[0][:300]}")
    record = {"argv": sys.argv, **settings, "medians": {names[k]: v for k, v in med.items()},
              "results": {names[k]: v for k, v in results.items()}, "skipped": skipped, "errors": errors,
              "machine": cpu_summary()}
    try:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"{name}-{_dt.datetime.now():%Y%m%d-%H%M%S}.json"
        path.write_text(json.dumps(record, indent=1, default=str))
        print(f"\n(details: {path.relative_to(ROOT)})")
    except OSError as exc:
        print(f"(could not save results: {exc})")
    return 1 if errors else 0


def main_guard(main: Callable[[], int]) -> int:
    """Runs a benchmark's main: SIGTERM/SIGHUP unwind like ^C, and ^C ends with 130 after every
    ``finally`` ran (children stopped, directories removed)."""
    def unwind(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, unwind)
    stale = remove_stale()
    if stale:
        print(f"(removed {len(stale)} directories/files left by benchmarks that were killed)")
    try:
        return main()
    except KeyboardInterrupt:
        print("\ninterrupted: children stopped, driver directories removed", file=sys.stderr)
        return 130
