"""A lossy UDP relay: drops, duplicates and reorders datagrams, seeded.

Topology (the relay is a tiny NAT)::

    sender S --data--> relay.address (listen socket L)
                       relay socket U_S --data--> target R
    sender S <-ctrl--- L <-ctrl---- U_S <--ctrl-- R   (R replies to the source it saw: U_S)

Each distinct sender address gets its own upstream socket ``U_S`` (an
ephemeral port), so the target sees one peer per sender and every datagram
arriving on ``U_S``, whoever sent it, goes back to ``S`` from ``L``. The
sender therefore sees the relay's listen address as its peer. Datagrams from
S to R are the *forward* direction, from R back to S the *backward* one; each
has its own ``Impairment`` and its own ``random.Random`` (seeded from
``seed``), so the fate of the n-th datagram of a direction depends only on
the seed and n, not on timing or on the other direction.

For every impaired datagram three numbers are drawn, always (so changing one
probability does not change the others' decisions): it is dropped with
probability ``drop``; otherwise sent twice with probability ``duplicate``;
and held back with probability ``reorder`` until ``reorder_after`` later
datagrams of the same direction have been sent, or ``reorder_delay`` seconds
have passed, whichever comes first. With ``latency`` every other datagram
waits that long before it goes on (held-back ones are then released by
``reorder_delay`` alone). ``Impairment.filter(datagram) -> bool``
restricts the impairment to some datagrams (say Aeron DATA frames); the
others are forwarded untouched and draw nothing.

One thread, plain sockets and a selector; fine for some 20-50k datagrams/s.
The socket buffers are 4 MiB so the relay itself does not lose datagrams.
"""

from __future__ import annotations

import dataclasses
import random
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

FORWARD = "forward"
BACKWARD = "backward"
BUFFER_BYTES = 4 * 1024 * 1024
_DRAIN_BATCH = 256
_NEVER = 1 << 62  # "datagrams still to pass" of one held only for latency


@dataclass(frozen=True)
class Impairment:
    """What the relay does to the datagrams of one direction (probabilities in [0, 1])."""

    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    #: A held-back datagram is released after this many later datagrams have been sent...
    reorder_after: int = 1
    #: ...or after this many seconds, whichever comes first.
    reorder_delay: float = 0.02
    #: Every datagram that is not held back for reordering is delayed this many seconds (a long path).
    latency: float = 0.0
    #: Only datagrams for which ``filter(datagram)`` is true are impaired (all when None).
    filter: Callable[[bytes], bool] | None = None

    def __post_init__(self):
        for name in ("drop", "duplicate", "reorder"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability, not {p}")
        if self.reorder_after < 1:
            raise ValueError("reorder_after must be >= 1")
        if self.reorder_delay < 0:
            raise ValueError("reorder_delay must be >= 0")
        if self.latency < 0:
            raise ValueError("latency must be >= 0")


#: The frame type of an Aeron RTT measurement (at offset 6 of its header, little-endian).
_HDR_TYPE_RTTM = 0x06


@dataclass
class RelayStats:
    """Counters of one direction."""

    received: int = 0
    #: Datagrams sent on, duplicates and released held-back ones included.
    forwarded: int = 0
    dropped: int = 0
    duplicated: int = 0
    reordered: int = 0
    #: Sends that failed (a full socket buffer, an unreachable network...).
    send_errors: int = 0
    #: Aeron RTT measurement frames (type 0x06) among those sent on: round trips a receiver could time.
    rttm_forwarded: int = 0


@dataclass
class _Held:
    remaining: int
    deadline: float
    data: bytes
    copies: int
    sock: socket.socket
    dest: tuple


@dataclass
class _Direction:
    config: Impairment
    rng: random.Random
    stats: RelayStats = field(default_factory=RelayStats)
    held: list = field(default_factory=list)


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _udp_socket(family: int, bind: tuple) -> socket.socket:
    s = socket.socket(family, socket.SOCK_DGRAM)
    try:
        for opt, force in ((socket.SO_RCVBUF, getattr(socket, "SO_RCVBUFFORCE", 33)),
                           (socket.SO_SNDBUF, getattr(socket, "SO_SNDBUFFORCE", 32))):
            try:
                s.setsockopt(socket.SOL_SOCKET, force, BUFFER_BYTES)
            except OSError:
                s.setsockopt(socket.SOL_SOCKET, opt, BUFFER_BYTES)
        s.bind(bind)
    except BaseException:
        s.close()
        raise
    return s


def _source_address(target: tuple) -> str:
    """The local address the kernel picks to reach ``target``."""
    with socket.socket(_family(target[0]), socket.SOCK_DGRAM) as probe:
        probe.connect(target)
        return probe.getsockname()[0]


class _RelayViews:
    """What both relays derive from ``stats()`` and ``close()``."""

    @property
    def forward_stats(self) -> RelayStats:
        return self.stats()[FORWARD]

    @property
    def backward_stats(self) -> RelayStats:
        return self.stats()[BACKWARD]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LossyRelay(_RelayViews):
    """Relays UDP between senders and ``target``, impairing each direction; starts at once.

    ``with LossyRelay(("127.0.0.1", 40456), forward=Impairment(drop=0.1), seed=7) as relay: send_to(relay.address)``
    """

    def __init__(self, target: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0),
                 forward: Impairment | None = None, backward: Impairment | None = None, seed: int = 0,
                 netns: str | None = None, upstream_host: str | None = None):
        self.target = (target[0], int(target[1]))
        self.seed = seed
        self.netns = netns
        self._listen_addr = listen
        # The upstream sockets bind to this host (by default the source address of the route to the target).
        self._upstream_host = upstream_host
        self._lock = threading.Lock()
        self._dirs = {
            FORWARD: _Direction(forward or Impairment(), random.Random(f"{seed}/forward")),
            BACKWARD: _Direction(backward or Impairment(), random.Random(f"{seed}/backward")),
        }
        self._upstream: dict[tuple, socket.socket] = {}
        self._stopping = False
        self._closed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.address: tuple | None = None
        self._thread = threading.Thread(target=self._run, name=f"lossy-relay-{self.target[1]}", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._wake_r.close()
            self._wake_w.close()
            raise self._error

    # -- public API -------------------------------------------------------------

    def configure(self, forward: Impairment | None = None, backward: Impairment | None = None) -> None:
        """Replaces the impairment of a direction (the random streams continue)."""
        with self._lock:
            if forward is not None:
                self._dirs[FORWARD].config = forward
            if backward is not None:
                self._dirs[BACKWARD].config = backward

    def stats(self) -> dict[str, RelayStats]:
        """A snapshot: ``{"forward": RelayStats, "backward": RelayStats}``."""
        with self._lock:
            return {name: dataclasses.replace(d.stats) for name, d in self._dirs.items()}

    @property
    def clients(self) -> list[tuple]:
        """Sender addresses seen so far."""
        with self._lock:
            return list(self._upstream)

    def upstream_address(self, client: tuple) -> tuple:
        """The address the target sees for ``client``'s datagrams."""
        with self._lock:
            return self._upstream[client].getsockname()

    def held(self) -> int:
        """Datagrams currently held back (both directions)."""
        with self._lock:
            return sum(len(d.held) for d in self._dirs.values())

    def close(self) -> None:
        """Stops the thread and closes the sockets; held-back datagrams are discarded."""
        if self._closed:
            return
        self._closed = True
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout=10)
        self._wake_w.close()

    def __repr__(self) -> str:
        return f"LossyRelay({self.address} -> {self.target}, seed={self.seed})"

    # -- the relay thread ---------------------------------------------------------

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        listen = None
        try:
            try:
                if self.netns is not None:
                    from .netns import _setns

                    _setns(self.netns)
                listen = _udp_socket(_family(self._listen_addr[0]), self._listen_addr)
                if self._upstream_host is None:
                    self._upstream_host = _source_address(self.target)
                self.address = listen.getsockname()[:2]
            except BaseException as e:
                self._error = e
                return
            finally:
                self._ready.set()
            sel.register(listen, selectors.EVENT_READ, None)
            sel.register(self._wake_r, selectors.EVENT_READ, "wake")
            while not self._stopping:
                events = sel.select(self._timeout())
                for key, _ in events:
                    if key.data == "wake":
                        try:
                            self._wake_r.recv(64)
                        except BlockingIOError:
                            pass
                        continue
                    self._drain(sel, key.fileobj, listen, key.data)
                self._release_expired()
        finally:
            sel.close()
            if listen is not None:
                listen.close()
            with self._lock:
                for s in self._upstream.values():
                    s.close()
                for d in self._dirs.values():
                    d.held.clear()
            self._wake_r.close()

    def _timeout(self) -> float | None:
        with self._lock:
            deadlines = [h.deadline for d in self._dirs.values() for h in d.held]
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - time.monotonic())

    def _drain(self, sel, sock: socket.socket, listen: socket.socket, client) -> None:
        for _ in range(_DRAIN_BATCH):
            try:
                data, src = sock.recvfrom(65536, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. an ICMP error reported on the socket: nothing to relay
            if sock is listen:
                up = self._upstream.get(src[:2])
                if up is None:
                    up = _udp_socket(_family(self.target[0]), (self._upstream_host, 0))
                    with self._lock:
                        self._upstream[src[:2]] = up
                    sel.register(up, selectors.EVENT_READ, src[:2])
                self._process(FORWARD, data, up, self.target)
            else:
                self._process(BACKWARD, data, listen, client)

    def _send(self, d: _Direction, sock: socket.socket, data: bytes, dest: tuple, copies: int) -> None:
        for _ in range(copies):
            try:
                sock.sendto(data, dest)
                d.stats.forwarded += 1
                if len(data) >= 8 and int.from_bytes(data[6:8], "little") == _HDR_TYPE_RTTM:
                    d.stats.rttm_forwarded += 1
            except OSError:
                d.stats.send_errors += 1

    def _process(self, direction: str, data: bytes, sock: socket.socket, dest: tuple) -> None:
        with self._lock:
            d = self._dirs[direction]
            cfg = d.config
            d.stats.received += 1
            if cfg.filter is not None and not cfg.filter(data):
                self._send(d, sock, data, dest, 1)
                self._sent_fresh(d)
                return
            r_drop, r_dup, r_reorder = d.rng.random(), d.rng.random(), d.rng.random()
            if r_drop < cfg.drop:
                d.stats.dropped += 1
                return
            copies = 1
            if r_dup < cfg.duplicate:
                copies = 2
                d.stats.duplicated += 1
            if r_reorder < cfg.reorder:
                d.stats.reordered += 1
                d.held.append(_Held(cfg.reorder_after, time.monotonic() + cfg.reorder_delay, data, copies, sock, dest))
                return
            if cfg.latency > 0:
                # Released by time only, in arrival order (held-back lists are kept in order).
                d.held.append(_Held(_NEVER, time.monotonic() + cfg.latency, data, copies, sock, dest))
                return
            self._send(d, sock, data, dest, copies)
            self._sent_fresh(d)

    def _sent_fresh(self, d: _Direction) -> None:
        """Counts one datagram sent past the held-back ones; releases those that have waited enough."""
        if not d.held:
            return
        keep = []
        for h in d.held:
            h.remaining -= 1
            if h.remaining <= 0:
                self._send(d, h.sock, h.data, h.dest, h.copies)
            else:
                keep.append(h)
        d.held = keep

    def _release_expired(self) -> None:
        now = time.monotonic()
        with self._lock:
            for d in self._dirs.values():
                if not d.held:
                    continue
                keep = []
                for h in d.held:
                    if h.deadline <= now:
                        self._send(d, h.sock, h.data, h.dest, h.copies)
                    else:
                        keep.append(h)
                d.held = keep


class RelayProcess(_RelayViews):
    """A ``LossyRelay`` in a child process, for tests whose own thread keeps the GIL busy.

    A relay thread in the test's process gets the GIL only at the interpreter's switch
    interval (5 ms) whenever the test spins in native calls, and each of its socket calls
    gives it up again: it then moves a few hundred datagrams a second, its socket queues
    overflow and it drops far more than its ``Impairment`` asks for. In a child process it
    runs at full speed. Same constructor and API as ``LossyRelay``, but no ``filter``
    callables: those do not cross a process boundary.
    """

    def __init__(self, target: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0),
                 forward: Impairment | None = None, backward: Impairment | None = None, seed: int = 0,
                 netns: str | None = None, upstream_host: str | None = None):
        import json
        import os
        import subprocess
        import sys

        spec = {"target": list(target), "listen": list(listen), "seed": seed, "netns": netns,
                "upstream_host": upstream_host, **self._impairments(forward, backward)}
        tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self._proc = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {tests_dir!r}); "
             "from netutil.relay import _serve_child; _serve_child()", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait()
            raise RuntimeError(f"relay process exited with {self._proc.returncode} before it started")
        reply = json.loads(line)
        if "error" in reply:
            self._proc.wait()
            raise OSError(reply["error"])
        self.address = tuple(reply["address"])
        self.target = (target[0], int(target[1]))
        self.seed = seed

    @staticmethod
    def _impairments(forward: Impairment | None, backward: Impairment | None) -> dict:
        spec = {}
        for name, imp in (("forward", forward), ("backward", backward)):
            if imp is not None and imp.filter is not None:
                raise ValueError(f"RelayProcess cannot take a {name} Impairment with a filter callable")
            spec[name] = None if imp is None else {k: v for k, v in dataclasses.asdict(imp).items() if k != "filter"}
        return spec

    def configure(self, forward: Impairment | None = None, backward: Impairment | None = None) -> None:
        """Replaces the impairment of a direction, as ``LossyRelay.configure`` does."""
        import json

        reply = self._ask("configure " + json.dumps(self._impairments(forward, backward)))
        if reply is not None:
            raise RuntimeError(f"relay process refused the configuration: {reply}")

    def _ask(self, what: str):
        import json

        self._proc.stdin.write(what + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("relay process is gone")
        return json.loads(line)

    def stats(self) -> dict[str, RelayStats]:
        return {name: RelayStats(**s) for name, s in self._ask("stats").items()}

    def held(self) -> int:
        return self._ask("held")

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            try:
                self._proc.wait(timeout=10)
            except Exception:
                self._proc.kill()
                self._proc.wait()
        self._proc.stdout.close()

    def __repr__(self) -> str:
        return f"RelayProcess({self.address} -> {self.target}, seed={self.seed}, pid={self._proc.pid})"


def _serve_child() -> None:
    """Body of a ``RelayProcess`` child: runs a ``LossyRelay`` and answers on stdin/stdout until EOF."""
    import json
    import sys

    spec = json.loads(sys.argv[1])
    try:
        relay = LossyRelay(tuple(spec["target"]), tuple(spec["listen"]),
                           forward=Impairment(**spec["forward"]) if spec["forward"] else None,
                           backward=Impairment(**spec["backward"]) if spec["backward"] else None,
                           seed=spec["seed"], netns=spec["netns"], upstream_host=spec["upstream_host"])
    except OSError as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return
    with relay:
        print(json.dumps({"address": list(relay.address)}), flush=True)
        for line in sys.stdin:
            what = line.strip()
            if what == "stats":
                reply = {name: dataclasses.asdict(s) for name, s in relay.stats().items()}
            elif what == "held":
                reply = relay.held()
            elif what.startswith("configure "):
                given = json.loads(what.removeprefix("configure "))
                relay.configure(**{name: Impairment(**imp) for name, imp in given.items() if imp is not None})
                reply = None
            else:
                reply = {"error": f"unknown request {what!r}"}
            print(json.dumps(reply), flush=True)
