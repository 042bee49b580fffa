"""Helpers shared by bench/ipc_throughput.py and bench/ipc_latency.py.

Nothing here is timed: process start-up, the native binary's build, result
tables and the JSON record kept in bench/results/ (git-ignored).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"

if str(ROOT) not in sys.path:  # `python bench/x.py` from anywhere: `bench.peers` importable
    sys.path.insert(0, str(ROOT))


class Skip(RuntimeError):
    """A peer or variant that cannot run here (not installed, no cargo...)."""


def require_release_build() -> str:
    """Exits unless the installed sulis extension is a release build. Returns the profile."""
    try:
        import sulis
    except ImportError as exc:
        sys.exit(f"cannot import sulis ({exc}); build it with `maturin develop --release` in .venv")
    profile = getattr(sulis, "build_profile", "?")
    if profile != "release":
        sys.exit(f"refusing to benchmark a {profile!r} build of sulis: "
                 "rebuild with `maturin develop --release` (sulis.build_profile must be 'release')")
    return profile


def median(xs: Iterable[float]) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def shm_dir(prefix: str) -> str:
    """A fresh directory under /dev/shm (or the temp dir) for one run's driver."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def rm_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def fmt_rate(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    return f"{v:,.0f}"


def fmt_ratio(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    return f"{v:.2f}x"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> None:
    """Plain-text table; `align` is one letter per column, 'l' or 'r' (default: first l, rest r)."""
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(cells, widths, align))

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def cpu_summary() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), Python {sys.version.split()[0]}"


# ----------------------------------------------------------------- native binaries

def native_binary(name: str, build: bool = True) -> str:
    """Path of target/release/<name> from crates/sulis-bench, building it first if asked."""
    exe = ROOT / "target" / "release" / name
    cargo = shutil.which("cargo")
    if build and cargo:
        print(f"[build] cargo build --release -p sulis-bench --bin {name}", flush=True)
        r = subprocess.run([cargo, "build", "--release", "-q", "-p", "sulis-bench", "--bin", name],
                           cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            raise Skip(f"cargo build of {name} failed:\n{r.stderr[-2000:]}")
    if not exe.is_file():
        raise Skip(f"{exe} not found (no cargo to build it)")
    return str(exe)


def run_native(exe: str, args: Sequence[str], timeout_s: float) -> dict:
    """Runs a sulis-bench binary, echoing its output; returns its `RESULT {json}` line."""
    proc = subprocess.Popen([exe, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True, bufsize=1)
    result = None
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
            else:
                print(f"    | {line}", flush=True)
        rc = proc.wait(timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if rc != 0 or result is None:
        raise RuntimeError(f"{Path(exe).name} exited with {rc} and no RESULT line")
    return result


def save_results(name: str, record: dict) -> Path | None:
    """Writes bench/results/<name>-<timestamp>.json; returns the path."""
    try:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = RESULTS_DIR / f"{name}-{stamp}.json"
        path.write_text(json.dumps(record, indent=1, default=str))
        return path
    except OSError as exc:
        print(f"(could not save results: {exc})")
        return None


# ----------------------------------------------------------------- interference

def _proc_table() -> dict[int, tuple[int, float]]:
    """{pid: (ppid, cpu seconds)} of every process (clock ticks converted)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                s = f.read().decode("ascii", "replace")
        except OSError:
            continue
        rest = s[s.rfind(")") + 2:].split()  # after "pid (comm) "
        try:
            out[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / tick)
        except (IndexError, ValueError):
            continue
    return out


class Interference:
    """CPU time that processes outside this benchmark used while it ran.

    On a 2-core machine any other busy process (a build, a test run) takes
    time from the publisher or subscriber; this measures how much, so a run
    can be flagged instead of silently reporting a depressed figure::

        with Interference() as itf:
            run()
        itf.share  # foreign CPU seconds per wall second (0.0 .. #CPUs)
    """

    def __init__(self) -> None:
        self.share = 0.0
        self.foreign_s = 0.0
        self.wall_s = 0.0

    def _ours(self, table: dict[int, tuple[int, float]]) -> set[int]:
        me = os.getpid()
        ours = {me}
        changed = True
        while changed:
            changed = False
            for pid, (ppid, _) in table.items():
                if ppid in ours and pid not in ours:
                    ours.add(pid)
                    changed = True
        return ours

    def __enter__(self) -> "Interference":
        try:
            self._before = _proc_table()
        except OSError:
            self._before = None
        self._t0 = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.monotonic() - self._t0
        if self._before is None:
            return
        after = _proc_table()
        ours = self._ours(after) | self._ours(self._before)
        foreign = 0.0
        for pid, (_, cpu) in after.items():
            if pid in ours:
                continue
            before = self._before.get(pid)
            foreign += cpu - before[1] if before else cpu  # new process: all of its time
        self.foreign_s = max(foreign, 0.0)
        self.share = self.foreign_s / self.wall_s if self.wall_s > 0 else 0.0

    def note(self) -> str:
        return f"other processes used {self.share * 100:.0f}% of a CPU during this run"


def run_rounds(variants, runs: int, retry_noisy: int, max_interference: float, describe) -> tuple[dict, dict, dict]:
    """Runs every variant once per round, round by round, so a slow period of the
    machine does not hit one system only. A run during which other processes used
    more than ``max_interference`` of a CPU is repeated up to ``retry_noisy`` times.

    ``variants`` is a list of ``(key, name, fn)``; ``describe(result)`` formats one
    result line. Returns ``(results, skipped, errors)`` keyed by variant key.
    """
    results: dict[str, list[dict]] = {k: [] for k, _, _ in variants}
    skipped: dict[str, str] = {}
    errors: dict[str, list[str]] = {}
    for rnd in range(runs):
        for key, name, fn in variants:
            if key in skipped:
                continue
            print(f"[round {rnd + 1}/{runs}] {name}", flush=True)
            try:
                for attempt in range(retry_noisy + 1):
                    with Interference() as itf:
                        r = fn()
                    r["interference"] = itf.share
                    if itf.share <= max_interference:
                        break
                    print(f"      NOISY: {itf.note()}"
                          + ("; running it again" if attempt < retry_noisy else "; kept, flagged"), flush=True)
            except Skip as exc:
                skipped[key] = str(exc)
                print(f"      skipped: {exc}")
                continue
            except Exception as exc:  # one failed run must not lose the others
                errors.setdefault(key, []).append(repr(exc))
                print(f"      FAILED: {exc!r}")
                continue
            results[key].append(r)
            print(f"      -> {describe(r)}", flush=True)
    return results, skipped, errors
