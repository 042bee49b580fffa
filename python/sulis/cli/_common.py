"""What the operator tools (``sulis stat``, ``streams``, ``errors``) share:
finding the driver directory, checking a driver is alive there, decoding
counters, printing tables and JSON, and redrawing a live view."""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import shutil
import signal
import struct
import sys
import tempfile
import time
from dataclasses import dataclass

import click

from .. import _native

CNC_FILE = "cnc.dat"

#: Counter type ids (crates/sulis-driver/src/system_counters.rs, Aeron's values).
SYSTEM = 0
PUBLISHER_LIMIT = 1
SENDER_POSITION = 2
RECEIVER_HWM = 3
SUBSCRIBER_POSITION = 4
RECEIVER_POSITION = 5
SENDER_LIMIT = 9
CLIENT_HEARTBEAT = 11
PUBLISHER_POSITION = 12

TYPE_NAMES = {
    SYSTEM: "system",
    PUBLISHER_LIMIT: "pub-lmt",
    SENDER_POSITION: "snd-pos",
    RECEIVER_HWM: "rcv-hwm",
    SUBSCRIBER_POSITION: "sub-pos",
    RECEIVER_POSITION: "rcv-pos",
    SENDER_LIMIT: "snd-lmt",
    CLIENT_HEARTBEAT: "client-heartbeat",
    PUBLISHER_POSITION: "pub-pos",
}
#: Types whose key is a stream key (registration id, session id, stream id, channel).
STREAM_TYPES = frozenset({PUBLISHER_LIMIT, SENDER_POSITION, RECEIVER_HWM, SUBSCRIBER_POSITION,
                          RECEIVER_POSITION, SENDER_LIMIT, PUBLISHER_POSITION})

# Stream counter key (system_counters.rs `stream_counter_key`): registration id
# i64, session id i32, stream id i32, channel length i32, channel bytes.
_STREAM_KEY = struct.Struct("<qiii")
#: A driver whose heartbeat is older than this is taken as gone (the default driver timeout).
DRIVER_TIMEOUT_MS = 10_000


def type_name(type_id: int) -> str:
    return TYPE_NAMES.get(type_id, f"type-{type_id}")


def default_dir() -> str:
    """The driver directory a client would use: ``$SULIS_DIR``, else ``/dev/shm/sulis-$USER``."""
    env = os.environ.get("SULIS_DIR")
    if env:
        return env
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid())
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return os.path.join(base, f"sulis-{user}")


def parse_stream_key(key: bytes) -> dict | None:
    """Decodes a stream counter key; None if it is not one."""
    if len(key) < _STREAM_KEY.size:
        return None
    registration_id, session_id, stream_id, length = _STREAM_KEY.unpack_from(key)
    if not 0 <= length <= len(key) - _STREAM_KEY.size:
        return None
    channel = key[_STREAM_KEY.size:_STREAM_KEY.size + length].decode("utf-8", "replace")
    return {"registration_id": registration_id, "session_id": session_id, "stream_id": stream_id,
            "channel": channel}


_JOIN = re.compile(r" @(-?\d+)$")
#: Room for the channel in a stream key (112 bytes less 20 of ids): longer channels are cut there.
_KEY_CHANNEL_ROOM = 92


def _full_channel(stream: dict, label: str) -> str:
    """The whole channel of a stream counter whose key holds a cut one: the
    label (``name: reg session stream channel [@join]``) still has it."""
    _, sep, rest = label.partition(": ")
    parts = rest.split(" ", 3)
    ids = [str(stream[k]) for k in ("registration_id", "session_id", "stream_id")]
    if sep and len(parts) == 4 and parts[:3] == ids:
        channel = _JOIN.sub("", parts[3])
        if channel.startswith(stream["channel"]):
            return channel
    return stream["channel"]


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
        stream = parse_stream_key(counter["key"])
        if stream is not None:
            if len(stream["channel"].encode()) >= _KEY_CHANNEL_ROOM:
                stream["channel"] = _full_channel(stream, counter["label"])
            out.update(stream)
        if type_id == SUBSCRIBER_POSITION:
            m = _JOIN.search(counter["label"])
            if m:
                out["join_position"] = int(m.group(1))
    elif type_id == CLIENT_HEARTBEAT and len(counter["key"]) >= 8:
        out["client_id"] = struct.unpack_from("<q", counter["key"])[0]
    return out


class NoDriverError(click.ClickException):
    """No live media driver in the directory (exit status 1, message on stderr)."""


@dataclass
class Driver:
    """A live driver found in ``dir``, with a reader on its counters."""

    dir: str
    pid: int
    start_ms: int
    cnc_version: str
    heartbeat_age_ms: int
    reader: _native.CountersReader

    def header(self) -> dict:
        return {"dir": self.dir, "pid": self.pid, "cnc_version": self.cnc_version,
                "start_time_ms": self.start_ms, "heartbeat_age_ms": self.heartbeat_age_ms,
                "timestamp_ms": int(time.time() * 1000)}

    def counters(self) -> list[dict]:
        return [describe(c) for c in self.reader.counters()]


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
    age_ms = int(time.time() * 1000) - reader.driver_heartbeat_ms
    if need_live and age_ms > DRIVER_TIMEOUT_MS:
        raise NoDriverError(f"no media driver running in {dir}: the driver (pid {reader.pid}) that left {CNC_FILE} "
                            f"there has stopped (its heartbeat is gone or older than {DRIVER_TIMEOUT_MS // 1000} s)")
    return Driver(dir=dir, pid=reader.pid, start_ms=reader.start_time_ms, cnc_version=reader.cnc_version,
                  heartbeat_age_ms=age_ms, reader=reader)


def resolve_dir(dir_: str | None) -> str:
    return os.path.abspath(dir_) if dir_ else default_dir()


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
    age = f"{driver.heartbeat_age_ms} ms ago"
    return (f"driver {driver.dir}  pid {driver.pid}  CnC {driver.cnc_version}  "
            f"started {timestamp(driver.start_ms)}  heartbeat {age}")


def table(rows: list[list[str]], right: set[int] = frozenset(), indent: str = "") -> list[str]:
    """Aligns ``rows`` (the first is the header) in columns; ``right`` columns are right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
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
