"""``sulis bench``: throughput and ping-pong of sulis from Python, optionally
beside pyzmq measured in the same run.

``sulis bench throughput`` offers messages one ``offer`` call at a time in this
process; a second process drains them with ``poll_batch`` and times them.
``sulis bench ping-pong`` times round trips between this process and an
echoing second process and reports HdrHistogram percentiles. Over ``aeron:ipc``
both processes use one media driver; over UDP each process has its own
embedded driver (as two hosts would) unless ``--dir`` names a running driver,
which then serves both. The measured loops live in ``sulis._benchkit``.

A throughput run whose timed part lasts less than ``MIN_TIMED_S`` measures
messages that were already buffered, not a rate: it is flagged (``too_short``
in the JSON, ``(!)`` in the table). Aeron Java, zenoh and iceoryx2 are
compared in the repository's bench/ (bench/README.md).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import time
from typing import Any

import click

from .. import _native
from .._benchkit import hist, loops, procs
from .._benchkit.report import median, table
from ._common import bad_environment, require

STREAM_BASE = 10_001
IPC_TERM_LENGTH = 16 * 1024 * 1024  # of the embedded drivers (Plan.driver_options)
UDP_HOST = "127.0.0.1"
PEERS = ("pyzmq",)
#: A throughput run timed for less than this is too short to mean anything.
MIN_TIMED_S = 0.1
DEFAULT_DRIVER_IDLE = {"ipc": "backoff", "udp": "yielding"}
DEFAULT_CLIENT_IDLE = {"ipc": "spin", "udp": "yield"}
_SUFFIXES = {"k": 1024, "m": 1024 * 1024}


# ----------------------------------------------------------------- option parsing

def _parse_sizes(_ctx, _param, values) -> list[int]:
    sizes: list[int] = []
    for value in values:
        for part in str(value).split(","):
            text = part.strip().lower()
            if not text:
                continue
            mult = 1
            if text[-1] in _SUFFIXES:
                mult, text = _SUFFIXES[text[-1]], text[:-1]
            try:
                size = int(text) * mult
            except ValueError:
                raise click.BadParameter(f"{part.strip()!r} is not a size in bytes (e.g. 32, 1024, 64k)") from None
            if size < 1:
                raise click.BadParameter(f"{part.strip()}: a message is at least 1 byte")
            if size not in sizes:
                sizes.append(size)
    if not sizes:
        raise click.BadParameter("no message size given")
    return sizes


def _parse_channel(_ctx, _param, value: str | None) -> str | None:
    """``ipc``, ``udp`` or a validated ``aeron:`` URI (canonical form)."""
    if value is None or value in ("ipc", "udp"):
        return value
    if not value.startswith("aeron:"):
        raise click.BadParameter(f"{value!r}: expected ipc, udp or a channel URI such as aeron:ipc or "
                                 f"aeron:udp?endpoint=127.0.0.1:40123")
    try:
        uri = _native.parse_channel(value)
    except _native.SulisError as e:
        raise click.BadParameter(str(e)) from None
    params = dict(_native.channel_params(uri))
    if uri.startswith("aeron:udp"):
        if "endpoint" not in params:
            raise click.BadParameter(f"{value!r}: a UDP channel needs an endpoint=HOST:PORT (unicast) to benchmark")
    elif not uri.startswith("aeron:ipc"):
        raise click.BadParameter(f"{value!r}: only aeron:ipc and aeron:udp channels can be benchmarked")
    return uri


def _check_plot(_ctx, _param, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.BadParameter("drawing the plot needs matplotlib, which is not installed: "
                                 "pip install 'sulis[plot]' (or: pip install matplotlib)") from None
    parent = os.path.dirname(os.path.abspath(value))
    if not os.path.isdir(parent):
        raise click.BadParameter(f"{value}: directory {parent} does not exist")
    return value


def _common_options(f):
    options = [
        click.option("--channel", default="ipc", show_default=True, callback=_parse_channel,
                     help="ipc (aeron:ipc), udp (aeron:udp?endpoint=127.0.0.1:PORT on a free port, publisher and "
                          "subscriber each with their own driver) or a channel URI."),
        click.option("--size", "sizes", multiple=True, default=("32",), show_default=True, callback=_parse_sizes,
                     help="Message size in bytes; repeat it or give a list (--size 32,1k,64k) to run each."),
        click.option("--warmup", type=click.IntRange(min=0), default=None,
                     help="Untimed messages or round trips before the timed ones [default: a tenth of the count, "
                          "at most 10,000 round trips or 200,000 messages but at least what fills the publication "
                          "window, so that the timed messages flow at the steady rate]."),
        click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True,
                     help="Runs of every system and size (interleaved); the figures are their medians."),
        click.option("--dir", "dir_", default=None, metavar="DIR",
                     help="Driver directory: a running driver there serves both processes; otherwise one is "
                          "started there [default: a fresh directory under /dev/shm, removed afterwards]."),
        click.option("--peer", "peers", multiple=True, type=click.Choice(PEERS),
                     help="Also run this system in the same run, beside sulis (pyzmq: PUSH/PULL or REQ/REP over "
                          "ipc:// for an IPC channel, tcp://127.0.0.1 for UDP)."),
        click.option("--threading-mode", default="shared", show_default=True,
                     type=click.Choice(["shared", "shared-network", "dedicated"]),
                     help="Threading mode of the embedded drivers."),
        click.option("--driver-idle", default=None, metavar="STRATEGY",
                     help="Idle strategy of the embedded drivers (busy-spin, yielding, backoff, sleeping[:PERIOD]) "
                          "[default: backoff for IPC, yielding for UDP]."),
        click.option("--client-idle", default=None, type=click.Choice(["spin", "yield"]),
                     help="What both processes do on a refused offer or an empty poll: spin, or sched_yield "
                          "[default: spin for IPC, yield for UDP]."),
        click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON document."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.group()
def bench() -> None:
    """Benchmarks: throughput and ping-pong over IPC or UDP, optionally beside pyzmq.

    \b
      sulis bench throughput --size 32,1k --messages 2000000
      sulis bench ping-pong --channel udp --peer pyzmq --plot latency.png
    """


@bench.command("throughput")
@click.option("--messages", type=click.IntRange(min=1), default=2_000_000, show_default=True,
              help="Timed messages per run.")
@_common_options
def throughput(messages: int, **options) -> None:
    """Messages per second: one offer per message here, poll_batch in a second process.

    The receiver counts and times the messages (from the batch that completes
    the warm-up to the one that completes the run); figures are messages/s and
    MB/s of payload. A run timed for less than 0.1 s is flagged as too short.
    """
    _main("throughput", messages, options)


@bench.command("ping-pong")
@click.option("--round-trips", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Timed round trips per run.")
@click.option("--pong-channel", default=None, callback=_parse_channel,
              help="Channel of the echoes [default: the same as --channel for IPC; for UDP the same URI with a "
                   "free port].")
@click.option("--plot", default=None, metavar="FILE.png", callback=_check_plot,
              help="Draw the latency percentile distribution into this PNG (needs matplotlib: sulis[plot]).")
@_common_options
def ping_pong(round_trips: int, **options) -> None:
    """Round-trip times: offer a message, wait for its echo from a second process.

    Times are taken with perf_counter_ns around offer + poll-until-echo and
    recorded in an HdrHistogram after the loop; reported in µs: p50, p90, p99,
    p99.9, p99.99 and max.
    """
    _main("ping-pong", round_trips, options)


# ----------------------------------------------------------------- the plan

class Plan:
    """What to run, resolved from the options."""

    def __init__(self, mode: str, count: int, o: dict) -> None:
        self.mode = mode
        self.count = count
        self.sizes: list[int] = o["sizes"]
        self.runs: int = o["runs"]
        self.dir: str | None = os.path.abspath(o["dir_"]) if o["dir_"] else None
        self.peers: list[str] = list(dict.fromkeys(o["peers"]))
        self.as_json: bool = o["as_json"]
        self.plot: str | None = o.get("plot")
        channel = o["channel"]
        self.explicit = channel not in ("ipc", "udp")
        self.kind = ("udp" if channel.startswith("aeron:udp") else "ipc") if self.explicit else channel
        self.channel = channel if self.explicit else None
        self.pong_channel = o.get("pong_channel")
        if self.pong_channel in ("ipc", "udp"):
            raise click.BadParameter("give a channel URI (the kind follows --channel)", param_hint="'--pong-channel'")
        if self.pong_channel is not None and not self.pong_channel.startswith(f"aeron:{self.kind}"):
            raise click.BadParameter(f"{self.pong_channel!r} is not an aeron:{self.kind} channel like --channel",
                                     param_hint="'--pong-channel'")
        self.warmup: int | None = o["warmup"]
        self.threading_mode: str = o["threading_mode"]
        self.driver_idle: str = o["driver_idle"] or DEFAULT_DRIVER_IDLE[self.kind]
        self.client_idle: str = o["client_idle"] or DEFAULT_CLIENT_IDLE[self.kind]
        self.idle = os.sched_yield if self.client_idle == "yield" else None

    def warmup_for(self, size: int, limits: dict) -> int:
        """The ``--warmup``, else a tenth of the count (at most 200,000 messages / 10,000 round trips);
        for throughput at least what the publication window holds, so that the timed part starts
        once the buffers are full and measures the steady rate, not their filling."""
        if self.warmup is not None:
            return self.warmup
        if self.mode == "ping-pong":
            return min(self.count // 10, 10_000)
        return max(min(self.count // 10, 200_000), _window_messages(size, limits))

    def driver_options(self) -> dict:
        return {"threading_mode": self.threading_mode, "idle_strategy": self.driver_idle,
                "ipc_term_buffer_length": IPC_TERM_LENGTH}

    def channels(self, k: int) -> tuple[str, str]:
        """(channel, pong channel) of the ``k``-th measurement; UDP defaults get free ports."""
        if self.kind == "ipc":
            channel = self.channel or "aeron:ipc"
            return channel, self.pong_channel or channel
        if self.channel is None:
            return (f"aeron:udp?endpoint={UDP_HOST}:{_free_udp_port(UDP_HOST)}",
                    f"aeron:udp?endpoint={UDP_HOST}:{_free_udp_port(UDP_HOST)}")
        if self.pong_channel is not None:
            return self.channel, self.pong_channel
        uri = _native.ChannelUri(self.channel)
        host = (uri.get("endpoint") or "").rpartition(":")[0]
        port = _free_udp_port(host.strip("[]"))
        return self.channel, str(uri.with_param("endpoint", f"{host}:{port}"))

    def streams(self, k: int) -> tuple[int, int]:
        return STREAM_BASE + 2 * k, STREAM_BASE + 2 * k + 1


def _window_messages(size: int, limits: dict) -> int:
    """Messages of ``size`` that fill a publication window (half a term): 32-byte frame headers,
    frames aligned to 32 bytes."""
    frames = max(1, math.ceil(size / limits["max_payload_length"]))
    per_message = (size + 32 * frames + 31) // 32 * 32
    return limits["term_length"] // 2 // per_message


def _free_udp_port(host: str) -> int:
    try:
        return procs.free_port(host)
    except OSError as e:
        raise click.BadParameter(f"cannot bind a UDP port on {host}: {e.strerror} (the endpoint's host must be an "
                                 f"address of this machine)", param_hint="'--channel'") from None


# ----------------------------------------------------------------- drivers

class Drivers:
    """This process's driver (embedded, or the running one in ``--dir``) and a client on it."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.driver: Any = None  # a MediaDriver, once entered
        self.client: Any = None  # a Client, once entered
        self.created_dir = False
        self.external = False
        self.dir = plan.dir

    def __enter__(self) -> Drivers:
        from .. import Client, MediaDriver

        try:
            if self.dir is not None and _native.active_driver(self.dir, 10_000) is not None:
                self.external = True
            else:
                if self.dir is None:
                    self.dir = procs.scratch_dir("sulis-clibench-")
                    self.created_dir = True
                else:
                    self.created_dir = not os.path.exists(self.dir)
                self.driver = MediaDriver(dir=self.dir, dir_delete_on_shutdown=self.created_dir,
                                          **self.plan.driver_options())
            self.client = Client(dir=self.dir, name="sulis bench")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_exc) -> None:

        if self.client is not None:
            self.client.close()
        if self.driver is not None:
            self.driver.close()
        if self.created_dir:
            procs.remove_dir(self.dir)

    @property
    def drivers_per_run(self) -> int:
        """2 when the second process runs its own driver (UDP with our own driver), else 1."""
        return 2 if self.plan.kind == "udp" and not self.external else 1

    def for_child(self) -> tuple[str | None, dict | None]:
        """(driver directory, options of its own driver or None) for the second process."""
        if self.drivers_per_run == 2:
            return procs.scratch_dir("sulis-clibench-peer-"), self.plan.driver_options()
        return self.dir, None

    def describe(self) -> dict:
        d = {"dir": self.dir, "embedded": not self.external, "drivers": self.drivers_per_run}
        if not self.external:
            d.update(threading_mode=self.plan.threading_mode, idle_strategy=self.plan.driver_idle)
        return d

    def limits(self, channel: str) -> dict:
        """Maximum message and frame payload lengths of ``channel`` on this driver."""
        pub = self.client.add_exclusive_publication(channel, STREAM_BASE - 1)
        try:
            return {"max_message_length": pub.max_message_length, "max_payload_length": pub.max_payload_length,
                    "term_length": pub.term_buffer_length}
        finally:
            pub.close()


# ----------------------------------------------------------------- progress

class Progress:
    """One updating line on stderr while a run goes (only on a terminal, never with --json)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.shown = False
        self.label = ""
        self.total = 0
        self.unit = ""
        self._t0: float | None = None
        self._done0 = 0
        self._last = 0.0

    def start(self, label: str, total: int, unit: str):
        """Returns the callback for the loops (None when disabled, so they skip it)."""
        if not self.enabled:
            return None
        self.label, self.total, self.unit = label, total, unit
        self._t0 = None
        self._last = 0.0
        self._write(f"{label}: starting")
        return self.update

    def update(self, done: int) -> None:
        now = time.monotonic()
        if self._t0 is None:  # the rate counts from the first report, once both sides are up
            self._t0, self._done0, self._last = now, done, now
            return
        if now - self._last < 0.2:
            return
        self._last = now
        rate = (done - self._done0) / (now - self._t0) if now > self._t0 else 0.0
        shown = f"{rate / 1e6:,.2f} M/s" if rate >= 1e6 else f"{rate:,.0f}/s"
        self._write(f"{self.label}: {done:,}/{self.total:,} {self.unit}, {shown} so far")

    def _write(self, text: str) -> None:
        width = max(20, _terminal_columns() - 1)
        sys.stderr.write("\r" + text[:width] + "\x1b[K")
        sys.stderr.flush()
        self.shown = True

    def done(self, text: str) -> None:
        """Replaces the line with a permanent one."""
        if self.enabled:
            sys.stderr.write("\r" + text + "\x1b[K\n")
            sys.stderr.flush()
            self.shown = False

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.shown = False


def _terminal_columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns or 80
    except OSError:
        return 80


# ----------------------------------------------------------------- one measurement each

def _sulis_throughput(drivers: Drivers, plan: Plan, size: int, warmup: int, k: int, limits: dict,
                      progress) -> dict:
    channel, _ = plan.channels(k)
    stream, _ = plan.streams(k)
    total = warmup + plan.count
    fragments = max(1, math.ceil(size / limits["max_payload_length"]))
    child_dir, child_driver = drivers.for_child()
    pub = None
    child = None
    try:
        child = procs.Child("subscriber", {"role": "sulis-sub", "dir": child_dir, "driver": child_driver,
                                         "channel": channel, "stream": stream, "total": total,
                                         "warmup": warmup, "fragments": fragments,
                                         "idle": plan.client_idle})
        child.read()
        pub = drivers.client.add_exclusive_publication(channel, stream)
        stalled = loops.Watchdog("publishing", alive=child.alive)
        loops.await_until(lambda: pub.is_connected, "the subscriber process to connect", 30, stalled)
        payload = bytes(size)
        t0 = time.perf_counter()
        loops.publish(pub, payload, total, idle=plan.idle, stalled=stalled, progress=progress, chunk=_chunk(size))
        sent_s = time.perf_counter() - t0
        result = child.read(timeout=loops.STALL_TIMEOUT_S + 10)
        child.finish()
    finally:
        if pub is not None:
            pub.close()
        if child is not None:
            child.close()
        if child_driver is not None:
            procs.remove_dir(child_dir)
    return _throughput_record(result, warmup, size, sender_rate=total / sent_s if sent_s > 0 else None)


def _chunk(size: int) -> int:
    """Messages between two progress updates: 16 Ki small ones, down to 1 of 1 MiB."""
    return max(1, min(16384, (1 << 20) // size))


def _zmq_throughput(plan: Plan, size: int, warmup: int, progress) -> dict:
    import zmq

    total = warmup + plan.count
    with _zmq_pair(plan, "PUSH", "pyzmq PULL", {"role": "zmq-pull", "total": total, "warmup": warmup}) \
            as (sock, child):
        t0 = time.perf_counter()
        loops.send_until(sock.send, bytes(size), count=total, chunk=_chunk(size), again=zmq.Again,
                       stalled=loops.Watchdog("pyzmq PUSH", alive=child.alive), progress=progress)
        sent_s = time.perf_counter() - t0
        result = child.read(timeout=loops.STALL_TIMEOUT_S + 10)
        child.finish()
    return _throughput_record(result, warmup, size, sender_rate=total / sent_s if sent_s > 0 else None)


@contextlib.contextmanager
def _zmq_pair(plan: Plan, kind: str, what: str, params: dict):
    """(socket of ``kind`` here, connected to the ``params["role"]`` child that bound its endpoint,
    sends and receives timing out after 1 s so that a Watchdog sees a dead child); on the way out
    the socket, the child and a unix socket's directory go."""
    from .._benchkit.roles import zmq_socket

    endpoint, tmp = _zmq_endpoint(plan.kind, "pushpull" if kind == "PUSH" else "reqrep")
    try:
        with procs.Child(what, {**params, "endpoint": endpoint}) as child, \
                zmq_socket(kind, child.read()["endpoint"], timeout_s=1.0, ready=False) as sock:
            yield sock, child
    finally:
        procs.remove_dir(tmp)


def _throughput_record(result: dict, warmup: int, size: int, sender_rate: float | None) -> dict:
    seconds = result["seconds"]
    rate = result["timed_messages"] / seconds if seconds > 0 else None
    return {
        "messages": result["received"] - warmup,
        "warmup": warmup,
        "timed_messages": result["timed_messages"],
        "seconds": seconds,
        "msgs_per_s": rate,
        "mb_per_s": rate * size / 1e6 if rate is not None else None,
        "sender_msgs_per_s": sender_rate,
        "too_short": seconds < MIN_TIMED_S,
    }


def _sulis_ping_pong(drivers: Drivers, plan: Plan, size: int, warmup: int, k: int, limits: dict,
                     progress) -> list[int]:
    ping_channel, pong_channel = plan.channels(k)
    ping_stream, pong_stream = plan.streams(k)
    total = warmup + plan.count
    assemble = size > limits["max_payload_length"]
    child_dir, child_driver = drivers.for_child()
    pub = sub = child = None
    try:
        child = procs.Child("pong", {"role": "sulis-pong", "dir": child_dir, "driver": child_driver,
                                   "ping_channel": ping_channel, "ping_stream": ping_stream,
                                   "pong_channel": pong_channel, "pong_stream": pong_stream,
                                   "total": total, "assemble": assemble, "idle": plan.client_idle})
        child.read()
        sub = drivers.client.add_subscription(pong_channel, pong_stream)
        pub = drivers.client.add_exclusive_publication(ping_channel, ping_stream)
        stalled = loops.Watchdog("waiting for echoes", alive=child.alive)
        loops.await_until(lambda: pub.is_connected and sub.image_count > 0, "the pong process to connect", 30,
                        stalled)
        samples = loops.ping(pub, sub, bytes(size), warmup, plan.count, assemble, idle=plan.idle, stalled=stalled,
                             progress=progress)
        child.read()
        child.finish()
    finally:
        for closable in (pub, sub, child):
            if closable is not None:
                closable.close()
        if child_driver is not None:
            procs.remove_dir(child_dir)
    return samples


def _zmq_ping_pong(plan: Plan, size: int, warmup: int, progress) -> list[int]:
    import zmq

    total = warmup + plan.count
    with _zmq_pair(plan, "REQ", "pyzmq REP", {"role": "zmq-rep", "total": total}) as (sock, child):
        recv = sock.recv

        def try_recv():  # None after the socket's 1 s time-out: the Watchdog then looks at the REP process
            try:
                return recv()
            except zmq.Again:
                return None

        samples = loops.ping_each(sock.send, try_recv, bytes(size), warmup, plan.count,
                                stalled=loops.Watchdog("pyzmq REQ", alive=child.alive), progress=progress)
        child.read()
        child.finish()
    return samples


def _zmq_endpoint(kind: str, name: str) -> tuple[str, str | None]:
    """(endpoint to bind, directory to remove afterwards) for pyzmq beside an ``kind`` channel."""
    if kind == "udp":
        return f"tcp://{UDP_HOST}:0", None
    import tempfile

    # /tmp rather than a long $TMPDIR: a unix socket path has at most 107 bytes.
    tmp = tempfile.mkdtemp(prefix="sulis-clibench-zmq-", dir="/tmp" if os.path.isdir("/tmp") else None)
    return f"ipc://{tmp}/{name}.sock", tmp


# ----------------------------------------------------------------- running everything

def _labels(plan: Plan, drivers: Drivers) -> dict[str, str]:
    if plan.explicit and plan.channel:
        base = plan.channel
    else:
        base = "aeron:ipc" if plan.kind == "ipc" else f"aeron:udp {UDP_HOST}"
    if plan.kind == "udp":
        n = drivers.drivers_per_run
        base += f" ({n} driver{'s' if n > 1 else ''})"
    zmq_base = "tcp://127.0.0.1" if plan.kind == "udp" else "ipc://"
    pattern = "PUSH/PULL" if plan.mode == "throughput" else "REQ/REP"
    return {"sulis": f"sulis {base}", "pyzmq": f"pyzmq {pattern} {zmq_base}"}


def _main(mode: str, count: int, options: dict) -> None:
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        plan = Plan(mode, count, options)
        if mode == "ping-pong":
            # The report is an HdrHistogram: fail before any child runs, not after the measurements.
            require("hdrh", "sulis bench ping-pong")
        if "pyzmq" in plan.peers:
            try:
                import zmq  # noqa: F401
            except ImportError:
                raise click.BadParameter("pyzmq is not installed: pip install pyzmq (or 'sulis[bench]')",
                                         param_hint="'--peer'") from None
        doc = _run(plan)
    except KeyboardInterrupt:
        click.echo("sulis bench: interrupted", err=True)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if plan.as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        for line in _report(doc):
            click.echo(line)


def _run(plan: Plan) -> dict:
    if _native.build_profile != "release" and not plan.as_json:
        click.echo(f"warning: sulis is a {_native.build_profile} build; its figures are not representative",
                   err=True)
    progress = Progress(sys.stderr.isatty() and not plan.as_json)
    systems = ["sulis", *plan.peers]
    unit = "messages" if plan.mode == "throughput" else "round trips"
    try:
        with Drivers(plan) as drivers:
            labels = _labels(plan, drivers)
            probe_channel, probe_pong = plan.channels(0)
            limits = drivers.limits(probe_channel)
            if plan.mode == "ping-pong" and probe_pong != probe_channel:
                pong_limits = drivers.limits(probe_pong)
                limits = {key: min(limits[key], pong_limits[key]) for key in limits}
        for size in plan.sizes:
            if size > limits["max_message_length"]:
                raise click.BadParameter(
                    f"{size} is above the maximum message length {limits['max_message_length']:,} of "
                    f"{probe_channel} (term length {limits['term_length']:,} / 8, at most 16 MiB)",
                    param_hint="'--size'")
        records: dict[tuple[str, int], list[dict]] = {(s, z): [] for s in systems for z in plan.sizes}
        warmups = {size: plan.warmup_for(size, limits) for size in plan.sizes}
        k = 0
        for run in range(plan.runs):
            for size in plan.sizes:
                for system in systems:
                    via = plan.kind if system != "pyzmq" else ("tcp" if plan.kind == "udp" else "ipc")
                    label = f"[run {run + 1}/{plan.runs}] {system} {via}, {size:,} B"
                    cb = progress.start(label, warmups[size] + plan.count, unit)
                    try:
                        if system == "sulis":
                            # sulis' embedded driver runs only while sulis is measured: idle (yielding, by
                            # default over UDP) it would still take CPU from the peers on a small machine.
                            with Drivers(plan) as sulis_drivers:
                                rec = _measure(plan, sulis_drivers, system, size, warmups[size], k, limits, cb)
                        else:
                            rec = _measure(plan, None, system, size, warmups[size], k, limits, cb)
                    except (loops.BenchError, _native.SulisError) as e:
                        raise click.ClickException(f"{label}: {e}") from None
                    finally:
                        progress.clear()
                    k += 1
                    rec["run"] = run + 1
                    records[(system, size)].append(rec)
                    progress.done(f"{label}: {_run_line(plan.mode, rec)}")
    except _native.SulisError as e:
        raise bad_environment(e) or click.ClickException(str(e)) from None
    # The drivers are closed (and their directories gone) before the plot is drawn.
    return _document(plan, drivers, labels, systems, records, limits, warmups)


def _measure(plan: Plan, drivers: Drivers | None, system: str, size: int, warmup: int, k: int, limits: dict,
             progress) -> dict:
    if system == "sulis":
        assert drivers is not None  # sulis runs on drivers of its own, the peers on none
        if plan.mode == "throughput":
            return _sulis_throughput(drivers, plan, size, warmup, k, limits, progress)
        samples = _sulis_ping_pong(drivers, plan, size, warmup, k, limits, progress)
    elif plan.mode == "throughput":
        return _zmq_throughput(plan, size, warmup, progress)
    else:
        samples = _zmq_ping_pong(plan, size, warmup, progress)
    h = hist.histogram(samples)
    return {"round_trips": len(samples), "warmup": warmup, **hist.summarize(h), "histogram": hist.encode(h)}


def _run_line(mode: str, rec: dict) -> str:
    if mode == "throughput":
        return f"{_num(rec['msgs_per_s'])} msgs/s, {_fixed(rec['mb_per_s'], 1)} MB/s"
    return "  ".join(f"{name} {rec[key]:.2f}" for name, key in _LATENCY_COLUMNS) + " µs"


_LATENCY_COLUMNS = [("p50", "p50_us"), ("p90", "p90_us"), ("p99", "p99_us"), ("p99.9", "p99_9_us"),
                    ("p99.99", "p99_99_us"), ("max", "max_us")]


def _document(plan: Plan, drivers: Drivers, labels: dict, systems: list[str], records: dict, limits: dict,
              warmups: dict[int, int]) -> dict:
    results = []
    merged = {}
    for size in plan.sizes:
        base = None
        for system in systems:
            runs = records[(system, size)]
            extra = {}
            if plan.mode == "throughput":
                medians = {key: median(r[key] for r in runs) for key in ("msgs_per_s", "mb_per_s")}
                figure = medians["msgs_per_s"]
                extra["too_short"] = any(r["too_short"] for r in runs)
            else:
                keys = ["min_us", "mean_us", *(key for _, key in _LATENCY_COLUMNS)]
                medians = {key: median(r[key] for r in runs) for key in keys}
                figure = medians["p50_us"]
                hists = [hist.decode(r["histogram"]) for r in runs]
                for h in hists[1:]:
                    hists[0].add(h)
                merged[(system, size)] = hists[0]
            if system == "sulis":
                base = figure
            ratio = figure / base if figure is not None and base else None
            results.append({"system": system, "name": labels[system], "size": size, "warmup": warmups[size],
                            "runs": runs, "median": medians, "vs_sulis": ratio, **extra})
    doc = {
        "mode": plan.mode,
        "transport": plan.kind,
        "channel": plan.channel or ("aeron:ipc" if plan.kind == "ipc"
                                    else f"aeron:udp?endpoint={UDP_HOST}:PORT (a free port per run)"),
        "sizes": plan.sizes,
        "messages" if plan.mode == "throughput" else "round_trips": plan.count,
        "warmup": plan.warmup if plan.warmup is not None else "auto",
        "runs": plan.runs,
        "client_idle": plan.client_idle,
        "driver": drivers.describe(),
        "limits": limits,
        "sulis": {"version": _native.__version__, "build_profile": _native.build_profile},
        "results": results,
    }
    if plan.mode == "ping-pong":
        if plan.pong_channel or plan.kind == "ipc":
            doc["pong_channel"] = plan.pong_channel or doc["channel"]
        elif plan.channel is None:
            doc["pong_channel"] = f"aeron:udp?endpoint={UDP_HOST}:PORT (another free port per run)"
        else:
            doc["pong_channel"] = f"{plan.channel} with another free port per run"
        doc["plot"] = None
        if plan.plot:
            series = [(f"{r['name']}, {r['size']:,} B", merged[(r["system"], r["size"])]) for r in results]
            _plot(plan.plot, series, _plot_title(plan))
            doc["plot"] = os.path.abspath(plan.plot)
    return doc


# ----------------------------------------------------------------- output

def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _fixed(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _report(doc: dict) -> list[str]:
    d = doc["driver"]
    if d["embedded"]:
        drivers = (f"{'two embedded drivers' if d['drivers'] == 2 else 'embedded driver'} "
                   f"({d['threading_mode']}, idle {d['idle_strategy']})")
    else:
        drivers = f"the running driver in {d['dir']}"
    count_key = "messages" if doc["mode"] == "throughput" else "round_trips"
    what = ("message" if doc["mode"] == "throughput" else "round trip") + ("s" if doc[count_key] != 1 else "")
    runs = doc["runs"]
    warmups = {r["size"]: r["warmup"] for r in doc["results"]}
    if len(set(warmups.values())) == 1:
        warmup = f"{next(iter(warmups.values())):,}"
    else:
        warmup = " / ".join(f"{w:,} of {size:,} B" for size, w in warmups.items())
    lines = [
        f"sulis bench {doc['mode']}: {doc['channel']}, {doc[count_key]:,} {what} (+{warmup} warm-up) "
        f"per run, {runs} run{'s' if runs > 1 else ''}{', medians' if runs > 1 else ''}",
        f"  sulis {doc['sulis']['version']} ({doc['sulis']['build_profile']}), {drivers}, "
        f"clients {doc['client_idle']} when idle",
        "",
    ]
    if doc["mode"] == "throughput":
        header = ["system", "size", "msgs/s", "MB/s"] + (["per run (M msgs/s)"] if runs > 1 else []) + ["vs sulis"]
        rows = [header]
        for r in doc["results"]:
            per_run = " / ".join("-" if x["msgs_per_s"] is None else f"{x['msgs_per_s'] / 1e6:.2f}" for x in r["runs"])
            rate = _num(r["median"]["msgs_per_s"]) + (" (!)" if r["too_short"] else "")
            rows.append([r["name"], f"{r['size']:,} B", rate, _fixed(r["median"]["mb_per_s"], 1)]
                        + ([per_run] if runs > 1 else []) + [_ratio(r["vs_sulis"])])
        lines += table(rows[0], rows[1:])
        lines += ["", "msgs/s counted and timed by the receiver; MB/s of payload; vs sulis: msgs/s / sulis' msgs/s"]
        if any(r["too_short"] for r in doc["results"]):
            lines.append(f"(!) too short to mean anything: a run timed for less than {MIN_TIMED_S:g} s measures "
                         "messages already buffered, not a rate; use more --messages")
        if any(x["msgs_per_s"] is None for r in doc["results"] for x in r["runs"]):
            lines.append("-: too few messages to time (they all came in one poll); use more --messages")
    else:
        rows = [["system", "size", *(name for name, _ in _LATENCY_COLUMNS), "vs sulis"]]
        for r in doc["results"]:
            rows.append([r["name"], f"{r['size']:,} B", *(_fixed(r["median"][key]) for _, key in _LATENCY_COLUMNS),
                         _ratio(r["vs_sulis"])])
        lines += table(rows[0], rows[1:])
        lines += ["", "round-trip times in µs; vs sulis: p50 / sulis' p50 (above 1: slower than sulis)"]
        if doc.get("plot"):
            lines.append(f"plot: {doc['plot']}")
    return lines


def _plot_title(plan: Plan) -> str:
    runs = f", {plan.runs} runs merged" if plan.runs > 1 else ""
    return f"sulis bench ping-pong: round-trip time, {plan.count:,} round trips per run{runs}"


def _plot(path: str, series: list, title: str) -> None:
    """HdrHistogram-style percentile plot: x is 1/(1-p) on a log scale, y the latency in µs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6))
    top = 10.0
    lows, highs = [], []
    for label, h in series:
        total = h.get_total_count()
        x_max = max(float(total), 2.0)
        top = max(top, x_max)
        points = 240
        xs = [x_max ** (j / points) for j in range(points + 1)]
        ys = [v / 1000.0 for v in hist.values_at_percentiles(h, [100.0 * (1.0 - 1.0 / x) for x in xs])]
        xs.append(x_max)
        ys.append(h.get_max_value() / 1000.0)
        ax.plot(xs, ys, label=label, linewidth=1.6, drawstyle="steps-post")
        lows.append(min(y for y in ys if y > 0))
        highs.append(max(ys))
    ax.set_xscale("log")
    if lows and max(highs) / min(lows) > 30:
        ax.set_yscale("log")
    decades = int(math.ceil(math.log10(top)))
    ticks = [10.0 ** d for d in range(decades + 1)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([_percentile_label(t) for t in ticks])
    ax.set_xlim(1, ticks[-1])
    ax.set_xlabel("percentile")
    ax.set_ylabel("round-trip time (µs)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.35)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _percentile_label(x: float) -> str:
    """1 -> 0%, 10 -> 90%, 100 -> 99%, 1000 -> 99.9%, ..."""
    decades = round(math.log10(x))
    if decades == 0:
        return "0%"
    if decades == 1:
        return "90%"
    return "99." + "9" * (decades - 2) + "%" if decades > 2 else "99%"
