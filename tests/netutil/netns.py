"""Pairs of Linux network namespaces joined by a veth link.

``NetnsPair`` creates two namespaces ``<prefix><pid>-<n>a`` / ``...b``, each
with ``lo`` up and one end of a veth pair (``sv0``) addressed from the /30
``10.77.<n % 256>.0``: side ``a`` is ``.1`` and side ``b`` is ``.2``. The veth
is created directly inside the namespaces, so nothing is left in the root
namespace even if the process dies. Neighbour (ARP) entries are static, so the
first datagrams are not queued behind address resolution.

Teardown (``close()``, the context manager's exit, the ``netns_pair``
fixture, and an ``atexit`` hook as the last resort) kills every process still
inside the namespaces and deletes them. Creating a pair first deletes
namespaces with the same prefix whose owning pid is no longer alive (left by
a crashed run).

Two ways to put something inside a namespace:

* a process: ``run_in(ns, *argv)`` / ``popen_in(ns, argv)`` (``ip netns exec``),
  or ``pair.run("b", ...)`` / ``pair.popen("b", [...])`` / ``pair.python("b", code)``;
* in-process: ``call_in_netns(ns, fn, *args)`` runs ``fn`` on a fresh thread
  that has joined the namespace. Sockets created there stay in that namespace
  whatever thread uses them later, and threads started by ``fn`` inherit it
  (an embedded media driver started that way binds its UDP sockets there).
  ``pair.udp_socket("a")`` is the common case.
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

DEFAULT_PREFIX = "sulis-nt-"
NETNS_DIR = "/var/run/netns"
CLONE_NEWNET = 0x40000000
VETH = "sv0"

_counter = itertools.count()
_live: dict[str, NetnsPair | NetnsHosts] = {}
_live_lock = threading.Lock()
_available: tuple[bool, str] | None = None


class NetnsError(RuntimeError):
    pass


def ip_path() -> str:
    """The ``ip`` binary (iproute2), also when /usr/sbin is not on PATH."""
    found = (p for p in ("/usr/sbin/ip", "/sbin/ip", "/bin/ip") if os.access(p, os.X_OK))
    return shutil.which("ip") or next(found, "ip")


def _ip(*args: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess:
    # A hang guard, not a speed limit: `ip -n NS link set ... master br0` took over 10 s beside three busy loops.
    proc = subprocess.run([ip_path(), *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def netns_available() -> tuple[bool, str]:
    """``(True, "")`` when namespaces can be created here, else ``(False, reason)``. Cached."""
    global _available
    if _available is None:
        _available = _probe()
    return _available


def _probe() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, "network namespaces need Linux"
    if os.geteuid() != 0:
        return False, "network namespaces need root (ip netns add)"
    probe = f"{DEFAULT_PREFIX}probe-{os.getpid()}"
    try:
        proc = _ip("netns", "add", probe, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"cannot run `ip netns add`: {e}"
    if proc.returncode != 0:
        return False, f"`ip netns add` failed: {proc.stderr.strip()}"
    try:
        proc = _ip("netns", "exec", probe, ip_path(), "link", "set", "lo", "up", check=False)
        if proc.returncode != 0:
            return False, f"`ip netns exec` failed: {proc.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return True, ""


def require_netns() -> None:
    """Skips the calling test when namespaces are unavailable (not root, no ``ip netns``...)."""
    ok, reason = netns_available()
    if not ok:
        import pytest

        pytest.skip(reason)


def list_netns() -> list[str]:
    """Names of all named network namespaces."""
    out = _ip("netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_pids(ns: str) -> list[int]:
    proc = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_all_in(ns: str) -> None:
    """SIGKILLs every process inside ``ns`` (what they start meanwhile too), for up to a second."""
    for _ in range(50):
        pids = [p for p in netns_pids(ns) if p != os.getpid()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def delete_netns(ns: str) -> None:
    """Kills every process inside ``ns``, then deletes it. Missing namespaces are ignored."""
    kill_all_in(ns)
    _ip("netns", "del", ns, check=False)


def cleanup_stale(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Deletes namespaces named ``<prefix><pid>-...`` whose pid is dead; returns their names."""
    removed = []
    for ns in list_netns():
        if not ns.startswith(prefix):
            continue
        pid = ns[len(prefix):].split("-", 1)[0]
        # Only ``<prefix><pid>-...`` names are ours to judge: a longer prefix
        # (``sulis-nt-selftest-``) belongs to another owner, perhaps a test
        # running beside this one under pytest-xdist.
        if not pid.isdigit() or _pid_alive(int(pid)):
            continue
        delete_netns(ns)
        removed.append(ns)
    return removed


def exec_prefix(ns: str) -> list[str]:
    """``["ip", "netns", "exec", ns]``: prepend it to an argv to run it inside ``ns``."""
    return [ip_path(), "netns", "exec", ns]


def run_in(ns: str, *argv, check: bool = True, timeout: float = 30.0, **kwargs) -> subprocess.CompletedProcess:
    """Runs ``argv`` inside ``ns`` and waits (text output captured unless overridden)."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(exec_prefix(ns) + [str(a) for a in argv], check=check, timeout=timeout, **kwargs)


def popen_in(ns: str, argv, **kwargs) -> subprocess.Popen:
    """Starts ``argv`` inside ``ns`` (``subprocess.Popen`` keywords pass through)."""
    return subprocess.Popen(exec_prefix(ns) + [str(a) for a in argv], **kwargs)


_libc = None


def _setns(ns: str) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join(NETNS_DIR, ns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({ns}): {os.strerror(err)}")
    finally:
        os.close(fd)


def call_in_netns(ns: str, fn: Callable, *args, **kwargs):
    """Calls ``fn(*args, **kwargs)`` on a new thread inside network namespace ``ns``; returns its result.

    The calling thread is not affected. Sockets ``fn`` creates belong to ``ns``
    for their whole life; threads ``fn`` starts are inside ``ns`` too.
    """
    result: list = []
    error: list = []

    def body():
        try:
            _setns(ns)
            result.append(fn(*args, **kwargs))
        except BaseException as e:  # re-raised in the caller
            error.append(e)

    t = threading.Thread(target=body, name=f"netns-{ns}", daemon=True)
    t.start()
    t.join()
    if error:
        raise error[0]
    return result[0]


def udp_socket_in(ns: str | None, bind: tuple[str, int] | None = None, family: int = socket.AF_INET) -> socket.socket:
    """A UDP socket created inside ``ns`` (the current namespace when None), optionally bound."""

    def make():
        s = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if bind is not None:
                s.bind(bind)
        except BaseException:
            s.close()
            raise
        return s

    return make() if ns is None else call_in_netns(ns, make)


def _reap(procs) -> None:
    """Kills what is still running of ``procs``, waits for each and closes its pipes."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass


class NetnsPair:
    """Two namespaces ``ns_a`` / ``ns_b`` linked by veth ``sv0``, with ``addr_a`` / ``addr_b``.

    ``with NetnsPair() as pair: pair.run("a", "ping", "-c1", pair.addr_b)``
    """

    def __init__(self, prefix: str = DEFAULT_PREFIX, subnet: int | None = None, mtu: int = 1500,
                 static_neighbours: bool = True):
        n = next(_counter)
        self.prefix = prefix
        self.index = n
        base = f"{prefix}{os.getpid()}-{n}"
        self.ns_a = base + "a"
        self.ns_b = base + "b"
        octet = (n if subnet is None else subnet) % 256
        self.addr_a = f"10.77.{octet}.1"
        self.addr_b = f"10.77.{octet}.2"
        self.prefixlen = 30
        self.dev = VETH
        self.mtu = mtu
        self._procs: list[subprocess.Popen] = []
        self._closed = False
        cleanup_stale(prefix)
        with _live_lock:
            _live[base] = self
        try:
            self._create(static_neighbours)
        except BaseException:
            self.close()
            raise

    def _create(self, static_neighbours: bool) -> None:
        _ip("netns", "add", self.ns_a)
        _ip("netns", "add", self.ns_b)
        _ip("link", "add", self.dev, "netns", self.ns_a, "type", "veth", "peer", "name", self.dev, "netns", self.ns_b)
        for ns, addr in ((self.ns_a, self.addr_a), (self.ns_b, self.addr_b)):
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", self.dev, "mtu", str(self.mtu))
            _ip("-n", ns, "addr", "add", f"{addr}/{self.prefixlen}", "dev", self.dev)
            _ip("-n", ns, "link", "set", self.dev, "up")
        if static_neighbours:
            mac_a, mac_b = self.mac("a"), self.mac("b")
            _ip("-n", self.ns_a, "neigh", "replace", self.addr_b, "lladdr", mac_b, "dev", self.dev, "nud", "permanent")
            _ip("-n", self.ns_b, "neigh", "replace", self.addr_a, "lladdr", mac_a, "dev", self.dev, "nud", "permanent")

    # -- naming -------------------------------------------------------------

    def ns(self, side: str) -> str:
        """The namespace of side ``"a"`` or ``"b"``."""
        if side == "a":
            return self.ns_a
        if side == "b":
            return self.ns_b
        raise ValueError(f"side must be 'a' or 'b', not {side!r}")

    def addr(self, side: str) -> str:
        """The veth address of side ``"a"`` or ``"b"``."""
        return self.addr_a if self.ns(side) == self.ns_a else self.addr_b

    def peer(self, side: str) -> str:
        """The address of the other side."""
        return self.addr_b if self.ns(side) == self.ns_a else self.addr_a

    def mac(self, side: str) -> str:
        info = json.loads(_ip("-n", self.ns(side), "-j", "link", "show", "dev", self.dev).stdout)
        return info[0]["address"]

    # -- running things inside ----------------------------------------------

    def run(self, side: str, *argv, **kwargs) -> subprocess.CompletedProcess:
        """``run_in`` on a side: ``pair.run("a", "ip", "addr")``."""
        return run_in(self.ns(side), *argv, **kwargs)

    def popen(self, side: str, argv, **kwargs) -> subprocess.Popen:
        """``popen_in`` on a side; the process is killed on ``close()``."""
        proc = popen_in(self.ns(side), argv, **kwargs)
        self._procs.append(proc)
        return proc

    def python(self, side: str, code: str, *args, **kwargs) -> subprocess.Popen:
        """Starts ``python -c code args...`` (this interpreter) inside a side; killed on ``close()``."""
        return self.popen(side, [sys.executable, "-c", code, *args], **kwargs)

    def call(self, side: str, fn: Callable, *args, **kwargs):
        """``call_in_netns`` on a side."""
        return call_in_netns(self.ns(side), fn, *args, **kwargs)

    def udp_socket(self, side: str, port: int | None = 0) -> socket.socket:
        """A UDP socket inside a side, bound to its veth address and ``port`` (unbound when None)."""
        return udp_socket_in(self.ns(side), None if port is None else (self.addr(side), port))

    # -- teardown -------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _reap(self._procs)
        delete_netns(self.ns_a)
        delete_netns(self.ns_b)
        with _live_lock:
            _live.pop(self.ns_a[:-1], None)

    def __enter__(self) -> NetnsPair:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NetnsPair({self.ns_a}={self.addr_a}, {self.ns_b}={self.addr_b})"


def _leaf_pid(pid: int) -> int:
    """The process ``pid`` runs as after ``exec``s and one level of children (``ip netns exec`` → ``unshare``
    → ``sh`` → ``sleep``): the deepest first child, which is in the innermost namespaces."""
    for _ in range(4):
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = f.read().split()
        except OSError:
            break
        if not children:
            break
        pid = int(children[0])
    return pid


class NetnsHosts:
    """Hosts on one switch: a namespace per host name, each with ``lo`` and a veth ``sv0`` addressed
    ``10.78.<n>.<k>/24`` (k = 1, 2, ... in the order named), whose other ends are ports of a bridge in a
    namespace of its own (nothing in the root namespace). Neighbour entries are static.

    ``with NetnsHosts("a", "b", "c") as hosts: hosts.popen("b", [...]); hosts.kill_host("c")``
    """

    def __init__(self, *names: str, prefix: str = DEFAULT_PREFIX, subnet: int | None = None, mtu: int = 1500,
                 private: str | None = None):
        """``private``: a directory that is each host's own (a tmpfs mounted there in a mount namespace per
        host, which every process started on the host shares), as ``/dev/shm`` is on separate machines:
        a media driver directory given by one path on every host then names each host's own driver."""
        n = next(_counter)
        self.private = private
        self._holders: dict[str, subprocess.Popen] = {}
        base = f"{prefix}{os.getpid()}-{n}"
        octet = (n if subnet is None else subnet) % 256
        self.names = list(names)
        self._ns = {name: f"{base}{name}" for name in names}
        self._addr = {name: f"10.78.{octet}.{k + 1}" for k, name in enumerate(names)}
        self.switch = f"{base}sw"
        self.dev, self.mtu = VETH, mtu
        self._procs: dict[str, list[subprocess.Popen]] = {name: [] for name in names}
        self._closed = False
        self._key = base
        cleanup_stale(prefix)
        with _live_lock:
            _live[base] = self  # type: ignore[assignment]
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _create(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge", "forward_delay", "0", "mcast_snooping", "0")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for k, name in enumerate(self.names):
            ns, port = self._ns[name], f"p{k}"
            _ip("netns", "add", ns)
            _ip("link", "add", self.dev, "netns", ns, "type", "veth", "peer", "name", port, "netns", self.switch)
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "mtu", str(self.mtu), "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", self.dev, "mtu", str(self.mtu))
            _ip("-n", ns, "addr", "add", f"{self._addr[name]}/24", "dev", self.dev)
            _ip("-n", ns, "link", "set", self.dev, "up")
        if self.private is not None:
            os.makedirs(self.private, exist_ok=True)
            for name in self.names:  # the host's mount namespace, held open by a process that only waits
                holder = popen_in(self._ns[name], ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                                   f"mount -t tmpfs tmpfs {self.private} && echo ready && exec sleep "
                                                   "infinity"], stdout=subprocess.PIPE, text=True)
                self._holders[name] = holder
                assert holder.stdout is not None
                if holder.stdout.readline().strip() != "ready":
                    raise NetnsError(f"cannot mount a private {self.private} on host {name}")
        macs = {name: json.loads(_ip("-n", self._ns[name], "-j", "link", "show", "dev", self.dev).stdout)[0]["address"]
                for name in self.names}
        for name in self.names:
            for other in self.names:
                if other != name:
                    _ip("-n", self._ns[name], "neigh", "replace", self._addr[other], "lladdr", macs[other],
                        "dev", self.dev, "nud", "permanent")

    def ns(self, name: str) -> str:
        return self._ns[name]

    def addr(self, name: str) -> str:
        return self._addr[name]

    def popen(self, name: str, argv, **kwargs) -> subprocess.Popen:
        """``popen_in`` on a host (in its mount namespace too, with ``private``); the process is killed with the
        host or on ``close()``."""
        holder = self._holders.get(name)
        if holder is None:
            proc = popen_in(self._ns[name], argv, **kwargs)
        else:
            enter = ["nsenter", "-t", str(_leaf_pid(holder.pid)), "-m", "-n"]
            proc = subprocess.Popen(enter + [str(a) for a in argv], **kwargs)
        self._procs[name].append(proc)
        return proc

    def python(self, name: str, code: str, *args, **kwargs) -> subprocess.Popen:
        return self.popen(name, [sys.executable, "-c", code, *args], **kwargs)

    def kill_host(self, name: str) -> None:
        """The host dies: every process in it is SIGKILLed (what it started too) and its link goes down."""
        kill_all_in(self._ns[name])
        for proc in self._procs[name]:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        _ip("-n", self._ns[name], "link", "set", self.dev, "down", check=False)

    def procs(self) -> list[subprocess.Popen]:
        return [p for name in self.names for p in self._procs[name]]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _reap(self.procs())
        for holder in self._holders.values():
            if holder.stdout is not None:
                holder.stdout.close()
        for name in self.names:
            delete_netns(self._ns[name])  # its processes, the holder of its mount namespace among them
        for holder in self._holders.values():
            holder.wait(timeout=60)
        if self._holders:
            try:
                os.rmdir(self.private)  # type: ignore[arg-type]
            except OSError:
                pass
        delete_netns(self.switch)
        with _live_lock:
            _live.pop(self._key, None)

    def __enter__(self) -> NetnsHosts:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return "NetnsHosts(" + ", ".join(f"{self._ns[n]}={self._addr[n]}" for n in self.names) + ")"


@atexit.register
def _close_live() -> None:
    with _live_lock:
        pairs = list(_live.values())
    for pair in pairs:
        try:
            pair.close()
        except Exception:
            pass
