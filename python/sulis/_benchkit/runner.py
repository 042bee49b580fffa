"""The orchestration of the benchmarks in bench/ (bench/README.md, "How the harness is built").

Every row is a pair of roles (a publisher and a subscriber, or a ping and a pong), each a process:
Python roles (``py_role``: ``sulis._benchkit.roles``), native ones (``native_role``:
crates/sulis-bench) and Aeron's (bench/peers/aeron.py). They speak the same JSON lines, so
``run_stream`` and ``run_ping_pong`` run any of them. Around them: the options every benchmark
takes, rounds interleaved across rows, the noise of other processes, and ``compare``, which runs a
table of rows and prints the report. A script in bench/ is that table: what to run, against which
peer, and its targets.

Clean-up: children die with the orchestrator (PR_SET_PDEATHSIG); leaving ``Children`` closes their
stdin (their cue to go), then SIGTERM, then SIGKILL; every run's files live in a ``scratch_dir``
removed afterwards, and by the next benchmark if the orchestrator was killed.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .hist import histogram, latency_line, summarize
from .procs import (
    Child,
    Interference,
    cpu_summary,
    free_port,
    pins,
    remove_dir,
    remove_shm_prefix,
    remove_stale,
    role_command,
    scratch_dir,
    wait_for_quiet,
)
from .report import finish, median, report_latency, report_throughput

#: The repository the benchmarks run from (``repository`` sets it).
ROOT = Path.cwd()
#: Counters of the publishing and receiving drivers worth printing (Aeron's system counter ids).
COUNTERS = {0: "bytes_sent", 1: "bytes_received", 5: "naks_sent", 6: "naks_received", 7: "status_messages_sent",
            8: "status_messages_received", 9: "heartbeats_sent", 11: "retransmits_sent",
            13: "flow_control_over_runs", 16: "short_sends", 18: "sender_flow_control_limits"}


class Skip(RuntimeError):
    """A row that cannot run here (not installed, no cargo...): printed as skipped."""


def repository(script: str) -> Path:
    """For a script in bench/: the repository's root, which is also put on ``sys.path`` (``bench.peers``)."""
    global ROOT
    ROOT = Path(script).resolve().parent.parent
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return ROOT


def results_dir() -> Path:
    return ROOT / "bench" / "results"


def native_binary() -> Path:
    return ROOT / "target" / "release" / "sulis-bench"


def py_role(role: str, **params) -> list[str]:
    return role_command(role, **params)


def native_role(role: str, **params) -> list[str]:
    """The command of a native role (crates/sulis-bench); a ``driver`` dict becomes ``k=v,k=v``."""
    args = [f"{k}={','.join(f'{dk}={dv}' for dk, dv in v.items()) if isinstance(v, dict) else v}"
            for k, v in params.items() if v is not None]
    return [str(native_binary()), role, *args]


def sulis_role(kind: str, role: str, **params) -> list[str]:
    """A sulis role ("pub", "sub", "ping", "pong") from Python (``kind`` "py") or native Rust."""
    return py_role(f"sulis-{role}", **params) if kind == "py" else native_role(role, **params)


def udp_channel(host: str, port: int, params: str) -> str:
    """``aeron:udp?endpoint=HOST:PORT|<params>`` (params ``|``-separated, may be empty)."""
    return "|".join([f"aeron:udp?endpoint={host}:{port}", *filter(None, params.split("|"))])


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
    if why or not native_binary().is_file():
        print(f"[skip] sulis native: {why or f'{native_binary()} not found (no cargo to build it)'}")
        return [v for v in variants if not v[0].startswith(prefix)]
    return variants


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


def dirty_limits() -> dict[str, str]:
    """The kernel's limits on dirty page cache (past them, writers wait for the disk)."""
    return {k: Path(f"/proc/sys/vm/{k}").read_text().strip()
            for k in ("dirty_ratio", "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes")}


def dirty_limit_bytes() -> int:
    """About how many bytes the kernel lets sit dirty before it makes writers wait: ``dirty_bytes``, or
    ``dirty_ratio`` percent of the available memory."""
    limits = dirty_limits()
    if int(limits["dirty_bytes"]):
        return int(limits["dirty_bytes"])
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return int(meminfo["MemAvailable"].split()[0]) * 1024 * int(limits["dirty_ratio"]) // 100


# ----------------------------------------------------------------- one run of a pair of roles

class Children:
    """The role processes of one run, dying with us. ``pair`` starts two: the first, then the second
    (a command, or a function of the first's ``ready`` message). They stay in our session: with
    the kernel's autogroup, processes of different sessions share the CPUs per session, not per
    thread, which would change who gets how much of the 2 cores. Leaving the block closes them, the
    last started first (stdin, then SIGTERM, then SIGKILL), removes the directories given and calls
    ``after``."""

    def __init__(self, *dirs: str, after: Callable[[], None] | None = None):
        self._dirs, self._after = dirs, after
        self.children: list[Child] = []

    def __enter__(self) -> Children:
        return self

    def pair(self, first: tuple, second: tuple, timeout_s: float) -> tuple[Child, Child]:
        ready: dict = {}
        for what, cmd in (first, second):
            self.children.append(Child(what, cmd=cmd(ready) if callable(cmd) else cmd))
            ready = self.children[-1].read(timeout_s)
        return self.children[0], self.children[1]

    def __exit__(self, *exc) -> None:
        try:
            for child in reversed(self.children):
                child.close(grace_s=5.0)
        finally:
            for d in self._dirs:
                remove_dir(d)
            if self._after is not None:
                self._after()


def read_counters(directory: str) -> dict | None:
    """``COUNTERS`` of the driver (sulis' or Aeron's: same CnC layout) in ``directory``; None if unreadable."""
    try:
        from .. import CountersReader

        reader = CountersReader(directory)
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
    r["msgs_per_s"] = median(samples[1:])
    return r


def driver_options(text: str) -> dict:
    """``k=v,k=v`` (a benchmark's ``--driver-options``) -> more sulis driver options."""
    pairs = [kv.partition("=") for kv in filter(None, (t.strip() for t in (text or "").split(",")))]
    if any(not sep for _, sep, _ in pairs):
        raise SystemExit(f"--driver-options must be name=value,..., not {text!r}")
    return {k.strip(): v.strip() for k, _, v in pairs}


def run_fanout(subs: Sequence, pub, dirs: Sequence[str] = (), counters: dict | None = None,
               timeout_s: float = 600.0) -> dict:
    """One counted run of several subscriber roles (each ``total``/``warmup``, timing its first to its
    last timed message) and a publisher role started after them all. Returns ``{"subs": [each one's
    done], "pub": the publisher's report, "elapsed_s": the slowest subscriber's time, "counters"}``."""
    with Children(*dirs) as ch:
        for i, cmd in enumerate(subs):
            ch.children.append(Child(f"subscriber {i}", cmd=cmd))
            ch.children[-1].read(timeout_s)
        ch.children.append(Child("publisher", cmd=pub))
        pub_c = ch.children[-1]
        pub_c.read(timeout_s)
        done = [c.read(timeout_s, watch=[pub_c]) for c in ch.children[:-1]]
        r = {"subs": done, "pub": pub_c.read(timeout_s), "elapsed_s": max(d["ns"] for d in done) / 1e9}
        if counters:
            r["counters"] = {side: read_counters(d) for side, d in counters.items()}
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
    return summarize(histogram(rtt))


# ----------------------------------------------------------------- the Python peers

#: (distribution, module) of each Python peer.
PEERS = {"zmq": ("pyzmq", "zmq"), "zenoh": ("eclipse-zenoh", "zenoh"), "iceoryx2": ("iceoryx2", "iceoryx2")}
#: How each peer is set up, for the configuration column: by transport, then for a stream or round trips.
SETUP = {"ipc": {"zmq": "", "zenoh": "Unix socket", "iceoryx2": ""}, "tcp": {"zmq": "TCP loopback",
                                                                              "zenoh": "peer mode, TCP loopback"},
         "stream": {"zmq": "default HWM", "zenoh": "BLOCK, no shm", "iceoryx2": "buffer 4096, no overflow"},
         "rtt": {"zmq": "blocking recv", "zenoh": "express", "iceoryx2": ""}}


def available(dist: str, module: str) -> str:
    """The installed version of ``dist``; raises Skip when ``module`` cannot be imported."""
    try:
        importlib.import_module(module)
        return importlib.metadata.version(dist)
    except Exception as exc:  # ImportError, or a broken wheel
        raise Skip(f"{dist} not usable ({type(exc).__name__}: {exc}); run `bash bench/peers/install.sh`") from None


def peer_run(peer: str, transport: str, duration: float | None = None, n: int = 0, warmup: int = 0,
             idle: str = "spin", pin: bool = False) -> dict:
    """One run of a peer (zmq, zenoh, iceoryx2) over ``transport`` (ipc: Unix sockets or shared
    memory, tcp: loopback): a stream for ``duration`` seconds (pyzmq PUSH/PULL, zenoh put/recv,
    iceoryx2 send_copy/receive), else ``n`` round trips after ``warmup`` (pyzmq REQ/REP, zenoh
    put/try_recv, iceoryx2 send_copy/receive); ``pin``: the sender on CPU 0, the other on 1."""
    version = available(*PEERS[peer])
    base = scratch_dir(f"sulis-bench-{peer}-")
    prefix = f"sulis-bench-iox2-{os.getpid()}-{os.path.basename(base)[-8:]}_"  # iceoryx2's files of the run
    p: dict[str, object]
    if peer == "zmq":  # the PULL or REP side binds, the other connects to what it bound
        p = {"endpoint": f"ipc://{base}/zmq.sock" if transport == "ipc" else "tcp://127.0.0.1:0"}
    elif peer == "zenoh":
        p = {"endpoint": f"unixsock-stream/{base}/zenoh.sock" if transport == "ipc"
             else f"tcp/127.0.0.1:{free_port(tcp=True)}"}
    else:
        p = {"root": base, "prefix": prefix, "buffer": 4096}
    stop = os.path.join(base, "stop")
    p.update(size=32, idle=idle, n=n, warmup=warmup, total=n + warmup, stop=stop)
    send, recv = ({"zmq": ("zmq-push", "zmq-pull")}.get(peer, (f"{peer}-pub", f"{peer}-sub")) if duration else
                  {"zmq": ("zmq-req", "zmq-rep")}.get(peer, (f"{peer}-ping", f"{peer}-pong")))
    first = py_role(recv, **p, **({"duration": duration} if duration else {}), **pins(1 if pin else None))
    second = lambda ready: py_role(send, **{**p, **ready, **pins(0 if pin else None)})  # noqa: E731
    after = lambda: remove_shm_prefix(prefix)  # noqa: E731
    r = (run_stream(first, second, stop, dirs=[base], after=after) if duration
         else run_ping_pong(first, second, dirs=[base], after=after))
    waits = "" if peer == "zmq" or duration else f"clients {idle}"
    parts = [f"{PEERS[peer][0].replace('eclipse-', '')} {version}", SETUP[transport][peer],
             SETUP["stream" if duration else "rtt"][peer], waits, "pinned" if pin else ""]
    r["config"] = ", ".join(filter(None, parts))
    return r


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
           only: str = "", udp: str | None = None) -> argparse.ArgumentParser:
    """A benchmark's options: ``--runs``, ``--quick``, ``--only``, ``--no-aeron-current``,
    ``--no-build``, the noise options, ``--duration``/``--batch`` or ``--n``/``--warmup``, and with
    ``udp`` (the default channel parameters) the settings of every driver, client and channel."""
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
    if udp is not None:
        ap.add_argument("--threading", default="shared", help="threading mode of every driver (default shared)")
        ap.add_argument("--driver-idle", default="yielding", help="idle strategy of every driver (default yielding)")
        ap.add_argument("--client-idle", choices=["yield", "spin"], default="yield",
                        help="what a client does after a refused offer or an empty poll: sched_yield (default) or "
                             "spin")
        ap.add_argument("--channel-params", default=udp,
                        help=f"channel URI parameters for sulis; mtu/term-length/rcv-wnd/so-rcvbuf/so-sndbuf also "
                             f"become Aeron's driver properties (default {udp})")
    return ap


def require_release_build() -> str:
    """Exits unless the installed sulis extension is a release build. Returns the profile."""
    from .. import build_profile

    if build_profile != "release":
        sys.exit(f"refusing to benchmark a {build_profile!r} build of sulis: rebuild with "
                 "`maturin develop --release` (sulis.build_profile must be 'release')")
    return build_profile


def parse(ap: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """The options, checked, with their defaults filled in (``a.profile``: the build, which must be a
    release build)."""
    a = ap.parse_args(argv)
    a.profile = require_release_build()
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
    if getattr(a, "pin", None) not in (None, False, "none") and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs 2 CPUs")
    return a


def select(variants: list, a: argparse.Namespace, ap: argparse.ArgumentParser, optional=()) -> list:
    """The variants to run: those named in ``optional`` only when ``--only`` names them, none of
    the current Aeron with ``--no-aeron-current``, then ``--only`` (unknown names are an error)."""
    wanted = {w.strip() for w in a.only.split(",") if w.strip()}
    unknown = wanted - {k for k, _, _ in variants}
    if unknown:
        ap.error(f"unknown --only names: {sorted(unknown)} (known: {', '.join(k for k, _, _ in variants)})")
    return [v for v in variants if (v[0] in wanted if wanted else v[0] not in optional)
            and not (a.no_aeron_current and v[0].startswith("aeron-current"))]


def rate_line(r: dict) -> str:
    return f"{r['msgs_per_s']:,.0f} msgs/s"


def compare(name: str, a: argparse.Namespace, ap: argparse.ArgumentParser, rows: list, *, title: str,
            config: Sequence[str], heading: str, settings: dict, ratios: Sequence = (), targets: Sequence = (),
            latency_targets: dict | None = None, compare_with: Sequence[str] = (), optional: Sequence[str] = ()) -> int:
    """Runs a benchmark's table: ``rows`` ``(key, name, run)`` (``--only`` and ``optional`` select, the
    native ones are built first), ``a.runs`` interleaved rounds; prints ``title`` (with the build and
    the machine) and the ``config`` lines first, then the throughput report (``ratios``, ``targets``)
    or, with ``latency_targets``, the latency report; keeps the record. Returns the exit status."""
    variants = build_native(select(rows, a, ap, optional), a.no_build)
    print(f"{title}; sulis {a.profile} build; {cpu_summary()}")
    for line in config:
        print(line)
    latency = latency_targets is not None
    results, skipped, errors = run_rounds(variants, a, latency_line if latency else rate_line)
    if latency:
        med = report_latency(variants, results, skipped, errors, heading, latency_targets or {}, compare_with)
    else:
        med = report_throughput(variants, results, skipped, errors, heading, ratios, targets)
    return finish(results_dir(), name, a, {"runs": a.runs, **settings}, variants, med, results, skipped, errors)


def main_guard(main: Callable[[], int]) -> int:
    """Runs a benchmark's main: SIGTERM/SIGHUP unwind like ^C, and ^C ends with 130 after every
    ``finally`` ran (children stopped, directories removed)."""
    def unwind(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, unwind)
    # SIGUSR1 prints every thread's Python stack to stderr, and the run goes on: what a run that does not
    # end on ^C is doing (a test that waits for it asks so before it gives up).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stale = remove_stale()
    if stale:
        print(f"(removed {len(stale)} directories/files left by benchmarks that were killed)")
    try:
        return main()
    except KeyboardInterrupt:
        print("\ninterrupted: children stopped, driver directories removed", file=sys.stderr)
        return 130
