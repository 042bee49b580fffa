"""What the operator tools (``sulis stat``, ``streams``, ``errors``) share:
finding the driver directory, checking a driver is alive there, decoding
counters, printing tables and JSON, and redrawing a live view."""

from __future__ import annotations

import contextlib
import datetime
import functools
import importlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import click

from .. import _native

CNC_FILE: str = _native.CNC_FILE

#: Counter type ids and their short names, from the table the driver
#: allocates counters from (sulis_protocol::counters, Aeron's ids).
TYPE_NAMES: dict[int, str] = dict(_native.counter_types())
_TYPE_IDS = {name: type_id for type_id, name in TYPE_NAMES.items()}
SYSTEM = _TYPE_IDS["system"]
PUBLISHER_LIMIT = _TYPE_IDS["pub-lmt"]
SENDER_POSITION = _TYPE_IDS["snd-pos"]
RECEIVER_HWM = _TYPE_IDS["rcv-hwm"]
SUBSCRIBER_POSITION = _TYPE_IDS["sub-pos"]
RECEIVER_POSITION = _TYPE_IDS["rcv-pos"]
SENDER_LIMIT = _TYPE_IDS["snd-lmt"]
CLIENT_HEARTBEAT = _TYPE_IDS["client-heartbeat"]
PUBLISHER_POSITION = _TYPE_IDS["pub-pos"]
FC_RECEIVER = _TYPE_IDS["fc-receiver"]
#: Types whose key is a stream key (registration id, session id, stream id, channel).
STREAM_TYPES = frozenset(t for t in TYPE_NAMES if _native.is_stream_counter_type(t))
#: A cluster member's counters whose key is the cluster id (not the recovery state's: its key is the state).
CLUSTER_TYPES = frozenset(t for t, name in TYPE_NAMES.items()
                          if name.startswith("cluster-") and name != "cluster-recovery-state")
#: An archive's own counters, keyed by its archive id (a control session's is keyed otherwise).
ARCHIVE_ID_TYPES = frozenset(t for t, name in TYPE_NAMES.items()
                             if name.startswith("archive-") and name != "archive-control-session")

#: A driver whose heartbeat is older than this is taken as gone (the default driver timeout).
DRIVER_TIMEOUT_MS = 10_000
#: A heartbeat older than this (ten of the driver's 100 ms beats) is checked against the driver's process.
HEARTBEAT_STALE_MS = 1_000


def _pid_running(pid: int) -> bool:
    """True if a process ``pid`` exists on this host (or may: one we cannot signal)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def type_name(type_id: int) -> str:
    return TYPE_NAMES.get(type_id, f"type-{type_id}")


def default_dir() -> str:
    """The driver directory a client would use (``$SULIS_DIR``, else ``sulis-$USER`` in /dev/shm)."""
    return _native.default_dir()


def _from_label(counter: dict, stream: dict) -> tuple[str, int | None]:
    """The whole channel and (for a subscriber position) the join position,
    from a stream counter's label: ``name: reg session stream channel``, a
    subscriber position's followed by `` @join``. A key holds the channel's
    first 92 bytes only; the label holds all of it."""
    channel, join = stream["channel"], None
    _, sep, rest = counter["label"].partition(": ")
    parts = rest.split(" ", 3)
    ids = [str(stream[k]) for k in ("registration_id", "session_id", "stream_id")]
    if not sep or len(parts) != 4 or parts[:3] != ids:
        return channel, join
    in_label = parts[3]
    if counter["type_id"] == SUBSCRIBER_POSITION:
        head, at, tail = in_label.rpartition(" @")
        if at and tail.lstrip("-").isdigit():
            in_label, join = head, int(tail)
    if in_label.startswith(channel):
        channel = in_label
    return channel, join


def describe(counter: dict) -> dict:
    """A counter as the tools show it: the raw fields plus the type name and,
    for stream counters, what their key says (and a subscriber's join position)."""
    type_id = counter["type_id"]
    out = {
        "id": counter["id"],
        "type_id": type_id,
        "type": type_name(type_id),
        "label": counter["label"],
        "value": counter["value"],
        "registration_id": counter["registration_id"],
        "owner_id": counter["owner_id"],
        "reference_id": counter["reference_id"],
    }
    if type_id in STREAM_TYPES:
        stream = _native.parse_stream_counter_key(counter["key"])
        if stream is not None:
            stream["channel"], join = _from_label(counter, stream)
            out.update(stream)
            if join is not None:
                out["join_position"] = join
    elif type_id == CLIENT_HEARTBEAT and len(counter["key"]) >= 8:
        out["client_id"] = int.from_bytes(counter["key"][:8], "little", signed=True)
    elif type_id in CLUSTER_TYPES and len(counter["key"]) >= 4:  # a cluster member's (key: its id)
        out["cluster_id"] = int.from_bytes(counter["key"][:4], "little", signed=True)
    elif type_id in ARCHIVE_ID_TYPES and len(counter["key"]) >= 8:  # an archive's own (key: its id)
        out["archive_id"] = int.from_bytes(counter["key"][:8], "little", signed=True)
    return out


class NoDriverError(click.ClickException):
    """No live media driver in the directory (exit status 1, message on stderr)."""


class BadEnvironmentError(click.ClickException):
    """A ``SULIS_*`` environment variable the command reads is invalid: one
    line naming it, exit status 2 as for a bad command-line option."""

    exit_code = 2


def bad_environment(e: BaseException) -> BadEnvironmentError | None:
    """The error to report if ``e`` is the driver refusing one of its
    ``SULIS_*`` environment variables (its message starts ``SULIS_NAME=value:``)."""
    if not isinstance(e, _native.ConfigurationError):
        return None
    name, sep, _ = str(e).partition("=")
    if not (sep and name.startswith("SULIS_") and name in os.environ):
        return None
    return BadEnvironmentError(f"environment variable {e}")


#: Optional packages some commands need: (the package pip installs, the sulis extra that brings it).
OPTIONAL = {"prometheus_client": ("prometheus_client", "prometheus"), "hdrh": ("hdrhistogram", "bench"),
            "zmq": ("pyzmq", "bench"), "matplotlib": ("matplotlib", "plot")}


def missing_extra(e: ImportError, what: str = "this command") -> click.ClickException | None:
    """The one-line error for an optional package that failed to import
    (naming the extra that installs it), or None for any other import."""
    module = (e.name or "").partition(".")[0]
    if module not in OPTIONAL:
        return None
    package, extra = OPTIONAL[module]
    return click.ClickException(f"{what} needs the {package} package, which is not installed: "
                                f"pip install 'sulis[{extra}]'")


def require(module: str, what: str) -> None:
    """Fails the command at once, naming the extra to install, when ``module`` cannot be imported."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        error = missing_extra(e, what)
        if error is None:
            raise
        raise error from None


def cli_error(e: _native.SulisError) -> click.ClickException:
    """A sulis error as a command reports it: a bad environment variable as
    above, anything else as a one-line error with exit status 1."""
    return bad_environment(e) or click.ClickException(str(e))


@dataclass
class Driver:
    """The driver found in ``dir`` (live, or stopped when asked for), with a reader on its counters."""

    dir: str
    pid: int
    start_ms: int
    cnc_version: str
    #: The driver's last heartbeat (epoch ms); 0 once it has shut down cleanly
    #: (it clears the heartbeat) or if it never got as far as the first one.
    heartbeat_ms: int
    #: When this was read (epoch ms).
    read_ms: int
    reader: _native.CountersReader

    @property
    def heartbeat_age_ms(self) -> int | None:
        """How long ago the driver last beat (ms), or None when there is no heartbeat."""
        return max(0, self.read_ms - self.heartbeat_ms) if self.heartbeat_ms > 0 else None

    @property
    def alive(self) -> bool:
        """Its heartbeat is younger than the driver timeout (10 s), and, once it is older than a second (a
        driver beats every 100 ms), its process is still there on this host: a SIGKILLed driver no longer
        shows as live for the whole timeout. (A driver in another PID namespace that stalls over a second
        shows as stopped until it beats again.)"""
        age = self.heartbeat_age_ms
        if age is None or age > DRIVER_TIMEOUT_MS:
            return False
        return age <= HEARTBEAT_STALE_MS or _pid_running(self.pid)

    def header(self) -> dict:
        return {"dir": self.dir, "pid": self.pid, "cnc_version": self.cnc_version,
                "start_time_ms": self.start_ms, "alive": self.alive, "heartbeat_age_ms": self.heartbeat_age_ms,
                "timestamp_ms": int(time.time() * 1000)}

    def counters(self) -> list[dict]:
        return [describe(c) for c in self.reader.counters()]


def age(ms: int) -> str:
    """A duration in ms as a person reads it: ``850 ms``, ``12.3 s``, ``4.0 min``, ``2.5 h``, ``3.1 days``."""
    for unit, size in (("days", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size * (2 if unit == "days" else 1):
            return f"{ms / size:.1f} {unit}"
    return f"{ms} ms"


def _stopped(driver: Driver) -> str:
    hb_age = driver.heartbeat_age_ms
    if hb_age is None:
        return "no heartbeat: it shut down cleanly, or never started"
    return f"last heartbeat {age(hb_age)} ago"


def heartbeat_text(driver: Driver) -> str:
    """``heartbeat 3 ms ago`` for a live driver; for a stopped one, that it
    stopped and when it last beat, if it left its heartbeat behind."""
    return f"heartbeat {driver.heartbeat_age_ms} ms ago" if driver.alive else f"driver stopped; {_stopped(driver)}"


def open_driver(dir: str, need_live: bool = True) -> Driver:
    """Finds the driver in ``dir``; raises NoDriverError naming the directory
    when there is none (no CnC file, CnC not ready, or heartbeat stopped).
    ``need_live=False`` accepts the CnC file a stopped driver left behind."""
    cnc = os.path.join(dir, CNC_FILE)
    if not os.path.exists(cnc):
        why = "the directory does not exist" if not os.path.isdir(dir) else f"there is no {CNC_FILE}"
        raise NoDriverError(f"no media driver in {dir}: {why}")
    try:
        reader = _native.CountersReader(dir)
    except _native.SulisError as e:
        raise NoDriverError(str(e)) from None
    driver = Driver(dir=dir, pid=reader.pid, start_ms=reader.start_time_ms, cnc_version=reader.cnc_version,
                    heartbeat_ms=reader.driver_heartbeat_ms, read_ms=int(time.time() * 1000), reader=reader)
    if need_live and not driver.alive:
        raise NoDriverError(f"no media driver running in {dir}: the driver (pid {reader.pid}) that left {CNC_FILE} "
                            f"there has stopped ({_stopped(driver)})")
    return driver


def resolve_dir(dir_: str | None) -> str:
    return os.path.abspath(dir_) if dir_ else default_dir()


def option_flags(config: Callable[[], list[tuple[str, str, str, str, str]]], own: Collection[str] = ()):
    """A decorator adding one ``--name`` flag per option of a service's table (``_native.driver_config``,
    ``_native.archive_config``), but for those in ``own``, which have flags of their own. Reading the
    table reads the ``SULIS_*`` variables; a bad one must not break ``--help`` or the commands that start
    nothing, so it is read again with them hidden (the command that starts the service reports it)."""
    def table() -> list[tuple[str, str, str, str, str]]:
        try:
            return config()
        except _native.ConfigurationError:
            pass
        hidden = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("SULIS_")}
        try:
            return config()
        finally:
            os.environ.update(hidden)

    def add(f):
        for name, _value, _source, env, doc in reversed(table()):
            if name not in own:
                flag = "--" + name.removesuffix("_ns").replace("_", "-")
                f = click.option(flag, name, default=None, help=f"{doc} [env {env}]")(f)
        return f

    return add


def dir_option(f):
    return click.option("--dir", "dir_", default=None, metavar="DIR",
                        help="Driver directory [default: $SULIS_DIR, else /dev/shm/sulis-$USER].")(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON instead of a table.")(f)


def print_json(doc, pretty: bool = True) -> None:
    click.echo(json.dumps(doc, indent=2 if pretty else None))


def timestamp(ms: int) -> str:
    """Epoch milliseconds as a local date and time with milliseconds and UTC offset."""
    t = datetime.datetime.fromtimestamp(ms / 1000).astimezone()
    return t.isoformat(sep=" ", timespec="milliseconds")


def driver_line(driver: Driver) -> str:
    return (f"driver {driver.dir}  pid {driver.pid}  CnC {driver.cnc_version}  "
            f"started {timestamp(driver.start_ms)}  {heartbeat_text(driver)}")


def table(rows: list[list[str]], right: Collection[int] = (), indent: str = "") -> list[str]:
    """Aligns ``rows`` (the first is the header) in columns; ``right`` columns are right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def num(v: int | float | None) -> str:
    if v is None:
        return ""
    return f"{v:,.0f}" if isinstance(v, float) else f"{v:,}"


class LiveView:
    """Shows successive frames: redrawn in place on a terminal, appended as
    plain blocks (separated by a blank line) otherwise."""

    def __init__(self, stream=None, enabled: bool = True):
        self.out = stream or sys.stdout
        self.tty = enabled and self.out.isatty()

    def __enter__(self):
        if self.tty:
            self.out.write("\x1b[?25l\x1b[2J")  # hide the cursor, clear
        return self

    def __exit__(self, *exc):
        if self.tty:
            self.out.write("\x1b[?25h\n")
            self.out.flush()
        return False

    def show(self, lines: list[str]) -> None:
        if not self.tty:
            self.out.write("\n".join(lines) + "\n\n")
            self.out.flush()
            return
        size = shutil.get_terminal_size()
        if len(lines) > size.lines - 1:
            hidden = len(lines) - (size.lines - 2)
            lines = lines[: size.lines - 2] + [f"... {hidden} more lines (narrow it with filters)"]
        frame = "".join(line[: size.columns] + "\x1b[K\n" for line in lines)
        self.out.write("\x1b[H" + frame + "\x1b[J")
        self.out.flush()


def run_until_interrupted(f):
    """Decorator: SIGTERM ends the command like Ctrl-C, and either exits quietly
    (status 0); so does a closed pipe on stdout (``sulis stat | head``)."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            return f(*args, **kwargs)
        except KeyboardInterrupt:
            return None
        except BrokenPipeError:
            # Nothing more can be written; keep the interpreter's final flush quiet too.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return None
        finally:
            signal.signal(signal.SIGTERM, previous)

    return wrapper


@contextlib.contextmanager
def stop_signals():
    """SIGINT and SIGTERM only flip a flag while a service runs here (the list it yields holds the
    signals taken), and the process's own handlers come back when it ends, however it ends: a command
    called from Python (a test, a notebook) must not leave Ctrl-C doing nothing.

    The handler only appends: it runs on the main thread between bytecodes, wherever that thread is,
    so taking a lock in it (as Event.set does) can deadlock against the thread it interrupted."""
    taken: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, _frame: taken.append(signum))
    try:
        yield taken
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def echo_config(config, *args, derived: dict[str, tuple[str, str]] | None = None, **options) -> None:
    """``--print-config``: ``config(*args, **options)`` (a service's ``*_config``), one line per option with its
    value and where it came from; a bad value is the command's error. ``derived``: options the command sets
    itself where the user left the default, by name: (value, why), shown as such."""
    try:
        rows = config(*args, **options)
    except _native.SulisError as e:
        raise cli_error(e) from None
    width = max(len(r[0]) for r in rows)
    for name, value, source, env, _doc in rows:
        if derived and name in derived and source == "default":
            value, source = derived[name]
        click.echo(f"{name:<{width}}  {value:<24}  ({source}; {env})")
