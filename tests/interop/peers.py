"""Interop transfers between Aeron Java and sulis, each side a process of its own.

Aeron's side is ``AeronPeer stream-pub|stream-sub`` (bench/peers/AeronPeer.java) on an Aeron media
driver process; sulis' side is ``sulis_peer.py``; both move or check the stream of stream.py. The
Aeron installs ("1.15.1", "current"), Java and the compiled AeronPeer come from bench/peers/aeron.py
(one discovery scheme for bench/ and the tests: bench/README.md). When an install is missing,
``bash bench/peers/install.sh`` runs once per process (not with ``SULIS_INTEROP_NO_INSTALL=1``);
if it is still missing, ``PeerMissing`` carries the reason to skip.

Every process is a ``sulis._benchkit.procs.ChildProcess`` in its own process group that gets SIGTERM if this
process dies; ``Harness`` stops them all on close.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
for path in (HERE, ROOT, HERE.parent):  # stream.py, bench.peers.aeron, conftest
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench.peers import aeron as aeron_java  # noqa: E402
from stream import expected_summary  # noqa: E402

import sulis  # noqa: E402
from conftest import free_udp_port  # noqa: E402
from sulis._benchkit.procs import ChildProcess  # noqa: E402

AeronJava = aeron_java.AeronJava
PeerMissing = aeron_java.Missing
VERSIONS = aeron_java.INSTALLS
SHM = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


# How long a JVM peer (a driver, an archive, a cluster backup) may take to start and write its files: two
# seconds on an idle machine, but a CI run with two busy loops beside the suite saw an Aeron MediaDriver write
# no CnC file in 30 s while other JVMs started. Each wait on it also ends as soon as the process exits.
JVM_START_S = 120.0


class PeerFailed(AssertionError):
    """A peer process failed, timed out or printed no result."""


@functools.cache
def _install_once() -> str:
    """Runs bench/peers/install.sh once per process; "" on success, else why it failed."""
    if os.environ.get("SULIS_INTEROP_NO_INSTALL", "") not in ("", "0"):
        return "SULIS_INTEROP_NO_INSTALL is set"
    script = ROOT / "bench" / "peers" / "install.sh"
    try:
        out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900,
                             env=dict(os.environ, PYTHON=os.environ.get("PYTHON", sys.executable)))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bash {script} failed: {exc}"
    tail = " | ".join((out.stdout + out.stderr).strip().splitlines()[-5:])
    return "" if out.returncode == 0 else f"bash {script} exited {out.returncode}: {tail}"


def find_aeron(name: str) -> AeronJava:
    """The Aeron install ``name``, installing the peers once if needed; raises PeerMissing."""
    try:
        return aeron_java.find(name)
    except PeerMissing as first:
        failure = _install_once()
        aeron_java.find.cache_clear()
        try:
            return aeron_java.find(name)
        except PeerMissing as exc:
            raise PeerMissing(f"Aeron {name} peer missing: {exc}" + (f"; install.sh: {failure}" if failure else "")
                              + f" (first: {first})") from None


def usable(name: str) -> AeronJava:
    """The Aeron install ``name`` with AeronPeer compiled for it; skips the test when it is missing."""
    import pytest

    try:
        install = find_aeron(name)
        compile_peer(install)
    except PeerMissing as exc:
        pytest.skip(str(exc))
    return install


compile_peer = aeron_java.classpath  # AeronPeer compiled against the install's jar (cached): its class path


class Harness:
    """Starts peers and drivers; ``close()`` (or leaving the ``with``) stops them all and removes the
    directories it made, unless ``keep_dirs``."""

    def __init__(self, keep_dirs: bool = False) -> None:
        self.procs: list[ChildProcess] = []
        self.dirs: list[str] = []
        self.keep_dirs = keep_dirs

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, exc_type, *_exc) -> None:
        self.keep_dirs = self.keep_dirs or (exc_type is not None and bool(os.environ.get("SULIS_INTEROP_KEEP")))
        self.close()

    def close(self) -> None:
        for p in sorted(self.procs, key=lambda p: p.what.endswith("driver")):  # drivers last
            p.close(grace_s=0)
        self.procs.clear()
        for d in self.dirs:
            if self.keep_dirs:
                print(f"kept interop directory {d}")
            else:
                shutil.rmtree(d, ignore_errors=True)
        self.dirs.clear()

    def describe(self) -> str:
        return "\n".join(f"--- {p.what} (pid {p.proc.pid}, "
                         f"{'running' if p.proc.poll() is None else f'exit {p.proc.returncode}'}): {' '.join(p.cmd)}\n"
                         f"stdout tail:\n" + "\n".join(line for _, line in p.lines[-5:])
                         + f"\nstderr tail:\n{p.stderr_tail()}" for p in self.procs)

    def make_dir(self, prefix: str) -> str:
        d = tempfile.mkdtemp(prefix=f"sulis-interop-{prefix}-", dir=SHM)
        self.dirs.append(d)
        return d

    def start(self, name: str, cmd: Sequence, netns: str | None = None) -> ChildProcess:
        """Starts ``cmd``; inside network namespace ``netns`` (``ip netns exec``) when given."""
        if netns:
            cmd = [shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", netns, *cmd]
        p = ChildProcess(cmd, name, own_session=True)
        self.procs.append(p)
        return p

    def start_driver(self, kind: str, aeron: AeronJava | None = None, props: dict | None = None,
                     netns: str | None = None) -> tuple[ChildProcess, str]:
        """An Aeron ``MediaDriver`` process (one shared agent thread; ``props``: more properties) or a
        ``sulis driver`` (shared threading); returns (process, its directory) once it runs."""
        d = self.make_dir(kind)
        if kind == "aeron":
            d = os.path.join(d, "aeron")
            props = {**aeron_java.dir_props(d), "aeron.threading.mode": "SHARED", **(props or {})}
            cmd = aeron_java.command(aeron, props, "io.aeron.driver.MediaDriver")
        else:
            cmd = [sys.executable, "-m", "sulis.cli", "driver", "--dir", d, "--threading-mode", "shared"]
        p = self.start(f"{kind}-driver", cmd, netns)
        cnc, deadline = os.path.join(d, sulis.CNC_FILE), time.monotonic() + JVM_START_S
        while not (os.path.exists(cnc) and os.path.getsize(cnc) > 0):
            if p.proc.poll() is not None or time.monotonic() > deadline:
                raise PeerFailed(f"{p.what} wrote no {cnc} within {JVM_START_S:.0f} s\n{self.describe()}")
            time.sleep(0.02)
        return p, d

    def _wait(self, proc: ChildProcess, timeout: float, watch: Sequence[ChildProcess], done) -> None:
        """Until ``done()``, failing early when a watched process fails: drivers must not exit at all,
        others (a publisher that is done) only with status 0."""
        deadline = time.monotonic() + timeout
        while not done():
            for w in watch:
                rc = w.proc.poll()
                if rc is not None and (rc != 0 or w.what.endswith("driver")):
                    raise PeerFailed(f"{w.what} exited {rc} while waiting for {proc.what}\n{self.describe()}")
            if time.monotonic() > deadline:
                raise PeerFailed(f"{proc.what} gave no result within {timeout:.0f} s\n{self.describe()}")
            time.sleep(0.05)

    @staticmethod
    def _last_json(proc: ChildProcess) -> dict | None:
        return next((json.loads(line) for _, line in reversed(proc.lines) if line.startswith("{")), None)

    def emitted(self, proc: ChildProcess, timeout: float, watch: Sequence[ChildProcess] = ()) -> dict:
        """``proc``'s JSON line as soon as it printed it, then ``proc`` stopped (SIGTERM): for a publisher
        whose subscribers all reported, whose linger (its tail sent while a subscriber is still there) has
        nothing left to do and only waits for its connection and its driver to time out (10 s)."""
        self._wait(proc, timeout, watch, lambda: proc.proc.poll() is not None or self._last_json(proc) is not None)
        return self._stopped_result(proc)

    def result(self, proc: ChildProcess, timeout: float, watch: Sequence[ChildProcess] = ()) -> dict:
        """``proc``'s last JSON line once it exited."""
        self._wait(proc, timeout, watch, lambda: proc.proc.poll() is not None)
        return self._stopped_result(proc)

    def _stopped_result(self, proc: ChildProcess) -> dict:
        proc.stop()  # its output is all read
        res = self._last_json(proc)
        if res is None:
            raise PeerFailed(f"{proc.what} exited {proc.proc.returncode} without a result\n{self.describe()}")
        return res


def check_transfer(pub: dict, sub: dict, count: int) -> list[str]:
    """What is wrong with a publisher / subscriber result pair (empty when all is well)."""
    want = expected_summary(count)
    problems = []
    for side, res in (("publisher", pub), ("subscriber", sub)):
        if res.get("errors"):
            problems.append(f"{side} reported {res.get('error_count')} errors: {res['errors']}")
        for key in ("count", "bytes", "checksum"):
            if res.get(key) != want[key]:
                problems.append(f"{side} {key} {res.get(key)} != expected {want[key]}")
    if sub.get("last_index") not in (None, count - 1):
        problems.append(f"subscriber's last index {sub.get('last_index')} != {count - 1}")
    return problems


def transfer_timeout(count: int) -> float:
    """Generous seconds for one transfer of ``count`` messages (about 1 GB per million)."""
    return 60.0 + count * 300e-6


def run_transfer(h: Harness, publisher: str, subscriber: str, count: int, aeron: AeronJava | None = None,
                 driver: str | None = None, channel: str | None = None, stream_id: int = 1001,
                 timeout: float | None = None, sulis_driver_options: dict | None = None,
                 aeron_driver_props: dict | None = None, netns: dict | None = None, hosts: dict | None = None) -> dict:
    """One transfer of ``count`` messages; ``publisher`` / ``subscriber`` are "aeron" or "sulis".

    ``driver=None``: every side has its own media driver (an Aeron driver process for the Aeron
    peers, an embedded sulis driver per sulis peer) and the channel is UDP on a free port.
    ``driver="aeron"`` / ``"sulis"``: both peers are clients of one driver process of that kind,
    over aeron:ipc unless ``channel``. ``sulis_driver_options``: the sulis peers' embedded drivers'
    options (a loss generator, say); ``aeron_driver_props``: the Aeron driver's properties.
    ``netns`` / ``hosts``: per kind ("aeron", "sulis"), the network namespace its processes run in
    and the address it is reached at (the channel's endpoint is the subscriber's). Returns
    ``{"pub", "sub", "channel", "seconds", "problems"}`` (no problems: the transfer was perfect).
    """
    if driver is None:
        channel = channel or f"aeron:udp?endpoint={(hosts or {}).get(subscriber, '127.0.0.1')}:{free_udp_port()}"
    res = run_group_transfer(h, publisher, [subscriber], count, aeron, driver, channel, stream_id, timeout,
                             sulis_driver_options, aeron_driver_props, netns)
    return {**res, "sub": res["subs"][0]}


def run_group_transfer(h: Harness, publisher: str, subscribers: Sequence[str], count: int,
                       aeron: AeronJava | None = None, driver: str | None = None, channel: str | None = None,
                       stream_id: int = 1001, timeout: float | None = None, sulis_driver_options: dict | None = None,
                       aeron_driver_props: dict | None = None, netns: dict | None = None,
                       subscriber_channels: Sequence[str] | None = None, destinations: Sequence[str] = (),
                       subscriber_destinations: Sequence[str] = ()) -> dict:
    """As ``run_transfer``, with several subscribers (a multicast group, say): each of
    ``subscribers`` ("aeron" or "sulis") on ``channel`` (or its entry of ``subscriber_channels``),
    every one of them started before the publisher. The Aeron subscribers share one Aeron driver
    process; every sulis peer has its own embedded driver. Returns ``{"pub", "subs", "channel",
    "seconds", "problems"}``, the problems of every subscriber named by its index. ``destinations``: added
    to the (manual MDC) publication before it waits for its receivers; ``subscriber_destinations``: to
    every (multi-destination) subscription."""
    netns = netns or {}
    timeout = timeout or transfer_timeout(count)
    t0 = time.monotonic()
    watch: list[ChildProcess] = []
    dirs: dict[str, str | None] = {"aeron": None, "sulis": None}
    if driver is None:
        assert channel is not None, "a channel for peers on drivers of their own"
        if "aeron" in (publisher, *subscribers):
            drv, dirs["aeron"] = h.start_driver("aeron", aeron, aeron_driver_props, netns.get("aeron"))
            watch.append(drv)
    else:
        channel = channel or "aeron:ipc"
        drv, d = h.start_driver(driver, aeron)
        watch.append(drv)
        dirs = {"aeron": d, "sulis": d}

    def start(kind: str, mode: str, on: str, seconds: float, name: str) -> ChildProcess:
        added = destinations if mode == "pub" else subscriber_destinations
        extra = {"destinations": ",".join(added)} if added else {}
        if kind == "aeron":  # AeronPeer's stream role on the driver in dirs["aeron"]
            cmd = aeron_java.peer(aeron, f"stream-{mode}", {"aeron.dir": dirs["aeron"]}, channel=on,
                                  stream=stream_id, count=count, timeout=seconds, **extra)
        else:  # sulis_peer.py on the driver in dirs["sulis"], else on an embedded one of its own
            cmd = [sys.executable, str(HERE / "sulis_peer.py"), mode, "--dir", dirs["sulis"] or h.make_dir("sulis"),
                   "--channel", on, "--stream", stream_id, "--count", count, "--timeout", seconds]
            cmd += [] if dirs["sulis"] else ["--embedded"]
            cmd += [f"--{k}={v}" for k, v in extra.items()]
            cmd += [f"--driver-option={k}={v}" for k, v in (sulis_driver_options or {}).items()]
        return h.start(name, cmd, netns.get(kind))

    channels = list(subscriber_channels or [channel] * len(subscribers))
    subs = [start(kind, "sub", on, timeout, f"{kind}-sub" + (f"-{i}" if len(subscribers) > 1 else ""))
            for i, (kind, on) in enumerate(zip(subscribers, channels, strict=True))]
    pub = start(publisher, "pub", channel, 60, f"{publisher}-pub")
    results = [h.result(sub, timeout + 30, watch=[*watch, pub]) for sub in subs]
    wall = time.monotonic() - t0
    pub_res = h.emitted(pub, 90, watch=watch)
    problems = [f"subscriber {i} ({subscribers[i]}): {p}" if len(subscribers) > 1 else p
                for i, res in enumerate(results) for p in check_transfer(pub_res, res, count)]
    return {"pub": pub_res, "subs": results, "channel": channel, "seconds": round(wall, 3), "problems": problems}
