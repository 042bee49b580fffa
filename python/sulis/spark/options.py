"""The options of ``format("sulis")``, parsed and checked once, on the Spark driver.

Spark hands a Python data source its options as a case-insensitive dict of
strings. Everything is parsed here, when the query starts, so a bad value
fails the query at once with a message that names the option; the parsed
values travel to the executors inside the (picklable) partitions.

Nothing here imports pyspark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import OptionError

__all__ = [
    "EARLIEST",
    "LATEST",
    "OptionError",
    "ArchiveAddress",
    "ReaderOptions",
    "WriterOptions",
    "parse_reader_options",
    "parse_writer_options",
]

#: Kafka's codes in JSON positions: -2 is the recording's start, -1 its end.
EARLIEST = -2
LATEST = -1

#: Every option a reader knows (Spark hands them over lower-cased; these are the names to show).
READER_OPTIONS = (
    "controlChannel", "controlStreamId", "controlResponseChannel", "controlResponseStreamId",
    "driverDir", "messageTimeout",
    "channel", "streamId", "recordingIds", "clusterDir",
    "startingPositions", "endingPositions",
    "minPartitions", "failOnDataLoss",
    "replayChannel", "replayStreamId", "fragmentLimit",
    "maxBytesPerTrigger", "maxMessagesPerTrigger", "minMessagesPerTrigger", "maxTriggerDelay",
    "valueSchema", "mode", "columnNameOfCorruptRecord",
    "readMode", "archiveDir", "includeTimestamp", "lowLatency",
)

WRITER_OPTIONS = (
    "controlChannel", "controlStreamId", "controlResponseChannel", "controlResponseStreamId",
    "driverDir", "messageTimeout", "channel", "streamId", "exactlyOnce", "stampTimestamp",
    "replayChannel", "replayStreamId", "journalChannel", "journalStreamId",
)

#: The exactly-once sink's journal stream, by default (``journalStreamId``).
JOURNAL_STREAM_ID = 0x5A1C

#: How executors read a partition (``readMode``).
READ_MODES = ("auto", "replay", "files")

#: Options Spark itself may pass along (``load(path)``, ``start(path)``, the checkpoint).
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation"})


@dataclass(frozen=True)
class ArchiveAddress:
    """How a process reaches the archive: its media driver and control channels (picklable)."""

    driver_dir: str | None = None
    control_channel: str = "aeron:ipc"
    control_stream_id: int = 10
    response_channel: str = "aeron:ipc"
    #: None: a stream of this process' own (see ``replay.ArchiveSession``)
    response_stream_id: int | None = None
    message_timeout: float = 10.0

    def describe(self) -> str:
        """Names the archive in error messages."""
        where = self.driver_dir or "the default driver directory"
        return f"the archive at {self.control_channel} stream {self.control_stream_id} (driver {where})"


@dataclass(frozen=True)
class ReaderOptions:
    """What a ``spark.read`` / ``spark.readStream`` of ``format("sulis")`` reads."""

    archive: ArchiveAddress
    channel: str | None = None
    stream_id: int | None = None
    recording_ids: tuple[int, ...] | None = None
    #: "earliest", "latest" or {recording_id: position or EARLIEST/LATEST}
    starting: str | dict[int, int] = "earliest"
    ending: str | dict[int, int] = "latest"
    min_partitions: int = 1
    fail_on_data_loss: bool = True
    replay_channel: str = "aeron:ipc"
    replay_stream_id: int = 0x5A17
    fragment_limit: int = 65536
    max_bytes_per_trigger: int | None = None
    max_messages_per_trigger: int | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay_s: float = 15.0
    #: ``valueSchema``: payloads decoded into typed columns (a ``value_schema.ValueLayout``)
    layout: Any = None
    #: ``readMode``: "replay" (over the archive's control channel), "files" (the segment files in
    #: ``archive_dir``) or "auto" (files where ``archive_dir`` is readable on the executor's host)
    read_mode: str = "auto"
    #: ``archiveDir``: the archive's directory, as the executors' hosts see it
    archive_dir: str | None = None
    #: ``includeTimestamp``: a ``timestamp`` column from the reserved value (epoch ns, the publisher's stamp)
    include_timestamp: bool = False
    #: ``lowLatency``: streaming micro-batches read by the Spark driver's source process, no executor task
    low_latency: bool = False
    #: ``clusterDir``: a cluster member's directory; its log is read, never past the commit position
    #: (``cluster_log``)
    cluster_dir: str | None = None

    def selection(self) -> str:
        """Names what is read in error messages."""
        if self.cluster_dir is not None:
            return f"the log of the cluster member in {self.cluster_dir}"
        if self.recording_ids is not None:
            return f"recordingIds {list(self.recording_ids)}"
        return f"channel {self.channel!r} streamId {self.stream_id}"


@dataclass(frozen=True)
class WriterOptions:
    """Where ``df.write`` / ``df.writeStream`` of ``format("sulis")`` publishes."""

    archive: ArchiveAddress
    #: the channel and stream rows go to; None: each row's ``channel`` / ``stream_id`` column
    channel: str | None
    stream_id: int | None
    exactly_once: bool = True
    #: ``stampTimestamp``: each message's reserved value is its row's ``timestamp`` (or the publish time),
    #: in epoch nanoseconds
    stamp_timestamp: bool = False
    #: ``replayChannel``/``replayStreamId``: where ``exactlyOnce`` reads back what was published
    replay: tuple[str, int] = ("aeron:ipc", 0x5A17)
    #: ``journalChannel``/``journalStreamId``: the exactly-once sink's journal (``journal.py``); the
    #: channel None only where ``exactlyOnce`` is off
    journal: tuple[str | None, int] = (None, JOURNAL_STREAM_ID)


def _int(options: Mapping[str, str], name: str, default: int | None, low: int | None = None,
         high: int | None = None) -> int | None:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name}: {raw!r} is not an integer") from None
    if low is not None and value < low:
        raise OptionError(f"option {name}: {value} is below the minimum {low}")
    if high is not None and value > high:
        raise OptionError(f"option {name}: {value} is above the maximum {high}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}: {raw!r} is not true or false")


#: Duration units as Spark writes them (``10 seconds``, ``1h``, ``500ms``, ``2 minutes``), in seconds.
_DURATION_UNITS = {
    "us": 1e-6, "usec": 1e-6, "micro": 1e-6, "micros": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6,
    "ms": 1e-3, "msec": 1e-3, "milli": 1e-3, "millis": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}

#: Size suffixes as Spark reads them (``64m``, ``1g``, ``512k``, ``64mb``): powers of 1024.
_SIZE_UNITS = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
               "t": 1 << 40, "tb": 1 << 40}


def _number_with_unit(raw: object, number: str, units: dict, default_unit: float) -> float | None:
    """``raw`` as a number (matching ``number``) times its unit's factor, None if it is neither."""
    import re

    m = re.fullmatch(rf"\s*({number})\s*([a-z]*)\s*", str(raw).lower())
    scale = (units.get(m.group(2)) if m.group(2) else default_unit) if m else None
    return None if m is None or scale is None else float(m.group(1)) * scale


def _seconds(options: Mapping[str, str], name: str, default: float) -> float:
    """A duration: a number of seconds, or with a unit as Spark writes them (``10 seconds``, ``1h``,
    ``500ms``, ``1.5 min``)."""
    raw = options.get(name)
    if raw is None:
        return default
    value = _number_with_unit(raw, r"[0-9]*\.?[0-9]+", _DURATION_UNITS, 1.0)
    if value is None:
        raise OptionError(f"option {name}: {raw!r} is not a duration (e.g. 10s, 500ms, '10 seconds', 1h)")
    if value <= 0:
        raise OptionError(f"option {name}: {raw!r} must be positive")
    return value


def _bytes(options: Mapping[str, str], name: str, low: int) -> int | None:
    """A size: a number of bytes, or with a suffix as Spark reads them (``64m``, ``1g``, ``512kb``)."""
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return None
    value = _number_with_unit(raw, "[0-9]+", _SIZE_UNITS, 1)
    if value is None:
        raise OptionError(f"option {name}: {raw!r} is not a size in bytes (e.g. 1048576, 64m, 1g)")
    if value < low:
        raise OptionError(f"option {name}: {int(value)} is below the minimum {low}")
    return int(value)


def _channel(options: Mapping[str, str], name: str, default: str | None) -> str | None:
    raw = options.get(name)
    if raw is None:
        return default
    from .. import _native

    try:
        _native.parse_channel(str(raw))
    except Exception as e:  # ConfigurationError names the bad part of the URI
        raise OptionError(f"option {name}: {raw!r} is not a channel URI: {e}") from None
    return str(raw)


def _stream_id(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    return _int(options, name, default, -(1 << 31), (1 << 31) - 1)


def parse_positions(options: Mapping[str, str], name: str, default: str) -> str | dict[int, int]:
    """``earliest``, ``latest`` or JSON ``{"<recording id>": position}`` (-2 earliest, -1 latest)."""
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise OptionError(f"option {name}: {raw!r} is neither 'earliest', 'latest' nor JSON "
                          f"{{\"<recording id>\": position}} ({e})") from None
    if not isinstance(parsed, dict):
        raise OptionError(f"option {name}: {raw!r} must be a JSON object {{\"<recording id>\": position}}")
    positions: dict[int, int] = {}
    for key, value in parsed.items():
        try:
            rid = int(key)
        except ValueError:
            raise OptionError(f"option {name}: key {key!r} is not a recording id") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionError(f"option {name}: position {value!r} of recording {rid} is not an integer")
        if value < EARLIEST:
            raise OptionError(f"option {name}: position {value} of recording {rid} is negative "
                              "(-2 means earliest, -1 latest)")
        if value >= 0 and value % 32 != 0:
            raise OptionError(f"option {name}: position {value} of recording {rid} is not a frame boundary "
                              "(positions are multiples of 32: use a row's position or a query's offset)")
        positions[rid] = value
    return positions


def _archive(options: Mapping[str, str]) -> ArchiveAddress:
    control = _channel(options, "controlChannel", "aeron:ipc")
    assert control is not None
    response_default = "aeron:ipc" if control.startswith("aeron:ipc") else None
    response = _channel(options, "controlResponseChannel", response_default)
    if response is None:
        host = _endpoint_host(control) or "<archive host>"
        raise OptionError("option controlResponseChannel: required with a UDP controlChannel "
                          f"({control!r}): the channel the archive answers on. One value serves every host: "
                          f"a response channel, aeron:udp?control-mode=response|control={host}:<a free port there> "
                          "(the archive answers over a connection each executor's driver opens; the same for "
                          "replayChannel with another port), or aeron:udp?endpoint=<this host>:0")
    control_stream = _stream_id(options, "controlStreamId", 10)
    response_stream = _stream_id(options, "controlResponseStreamId", None)
    assert control_stream is not None
    driver_dir = options.get("driverDir")
    return ArchiveAddress(
        driver_dir=str(driver_dir) if driver_dir else None,
        control_channel=control,
        control_stream_id=control_stream,
        response_channel=response,
        response_stream_id=response_stream,
        message_timeout=_seconds(options, "messageTimeout", 10.0),
    )


#: Options of Spark's Kafka connector, with what to say instead.
KAFKA_HINTS = {
    "maxoffsetspertrigger": "maxMessagesPerTrigger (a recording's offsets are byte positions, so "
                            "maxBytesPerTrigger is the exact one)",
    "minoffsetspertrigger": "minMessagesPerTrigger",
    "startingoffsets": "startingPositions ('earliest', 'latest' or JSON {\"<recording id>\": position})",
    "endingoffsets": "endingPositions",
    "subscribe": "channel and streamId (every recording of that stream, as a topic's partitions), or recordingIds",
    "subscribepattern": "channel (a part of a channel URI matches many) and streamId, or recordingIds",
    "assign": "recordingIds (a recording is a partition)",
    "topic": "channel and streamId",
    "kafka.bootstrap.servers": "controlChannel (and driverDir: the media driver the client uses)",
    "startingoffsetsbytimestamp": "startingPositions (positions; there is no timestamp index)",
    "startingtimestamp": "startingPositions (positions; there is no timestamp index)",
    "includeheaders": "includeTimestamp (the reserved value is the one header a message has)",
}


def _endpoint_host(channel: str) -> str | None:
    for part in channel.partition("?")[2].split("|"):
        key, _, value = part.partition("=")
        if key == "endpoint" and ":" in value:
            return value.rsplit(":", 1)[0]
    return None


def _check_known(options: Mapping[str, str], known: tuple[str, ...], what: str) -> None:
    import difflib

    by_lower = {k.lower(): k for k in known}
    for key in options.keys():
        lower = str(key).lower()
        if lower in by_lower or lower in _SPARK_OPTIONS:
            continue
        if lower in KAFKA_HINTS:
            raise OptionError(f"option {key}: a Kafka connector option; the sulis {what} takes "
                              f"{KAFKA_HINTS[lower]}")
        close = difflib.get_close_matches(lower, list(by_lower), n=1)
        hint = f"did you mean {by_lower[close[0]]!r}? " if close else ""
        raise OptionError(f"option {key}: unknown to the sulis {what}; {hint}(known: {', '.join(known)})")


def parse_reader_options(options: Mapping[str, str], streaming: bool = False) -> ReaderOptions:
    """Checks and parses a reader's options; raises ``OptionError`` naming the first bad one."""
    _check_known(options, READER_OPTIONS, "source")
    archive = _archive(options)
    channel = _channel(options, "channel", None)
    stream_id = _stream_id(options, "streamId", None)
    raw_ids = options.get("recordingIds")
    recording_ids: tuple[int, ...] | None = None
    if raw_ids is not None:
        text = str(raw_ids).strip()
        try:
            parsed = json.loads(text) if text.startswith("[") else [int(x) for x in text.split(",") if x.strip()]
            recording_ids = tuple(int(x) for x in parsed)
        except (ValueError, TypeError):
            raise OptionError(f"option recordingIds: {raw_ids!r} is not a list of recording ids "
                              "(e.g. 3,4 or [3, 4])") from None
        if not recording_ids or any(r < 0 for r in recording_ids):
            raise OptionError(f"option recordingIds: {raw_ids!r} must name at least one recording id >= 0")
        if channel is not None or stream_id is not None:
            raise OptionError("option recordingIds: give either recordingIds or channel and streamId, not both")
    raw_cluster = options.get("clusterDir")
    cluster_dir = str(raw_cluster).strip() if raw_cluster is not None and str(raw_cluster).strip() else None
    if cluster_dir is not None:
        if channel is not None or stream_id is not None or recording_ids is not None:
            raise OptionError("option clusterDir: give either clusterDir (a cluster member's log) or channel and "
                              "streamId or recordingIds, not both")
        if options.get("includeTimestamp") is not None:
            raise OptionError("option includeTimestamp: not with clusterDir (a cluster log's rows always have "
                              "timestamp, the entry's cluster time)")
        layout = value_layout(options)
        if layout is not None:
            from .cluster_log import CLUSTER_FIELDS

            taken = {f.name for f in CLUSTER_FIELDS}
            clash = [n for n in [*(n for n, _ in layout.fields), layout.corrupt_column] if n in taken]
            if clash:
                raise OptionError(f"option valueSchema: column {clash[0]!r} is a cluster log's own column "
                                  f"({', '.join(sorted(taken))})")
    elif recording_ids is None and stream_id is None:
        raise OptionError("option streamId: required (with channel) unless recordingIds or clusterDir is given")
    elif recording_ids is None and channel is None:
        raise OptionError("option channel: required with streamId (a channel URI, or a part of one such as "
                          "'aeron:ipc' or 'endpoint=127.0.0.1:40123', as list_recordings_for_uri matches)")
    starting = parse_positions(options, "startingPositions", "earliest")
    ending = parse_positions(options, "endingPositions", "latest")
    if streaming and options.get("endingPositions") is not None:
        raise OptionError("option endingPositions: not for streaming queries (use Trigger.AvailableNow)")
    if ending == "earliest":
        raise OptionError("option endingPositions: 'earliest' would read nothing; use 'latest' or JSON positions")
    if isinstance(ending, dict) and any(v == EARLIEST for v in ending.values()):
        raise OptionError("option endingPositions: -2 (earliest) is not an ending position")
    min_partitions = _int(options, "minPartitions", 1, 1, 100_000)
    fragment_limit = _int(options, "fragmentLimit", 65536, 1, 1 << 24)
    max_bytes = _bytes(options, "maxBytesPerTrigger", 32)
    max_messages = _int(options, "maxMessagesPerTrigger", None, 1)
    min_messages = _int(options, "minMessagesPerTrigger", None, 1)
    replay_channel = _channel(options, "replayChannel", "aeron:ipc")
    replay_stream = _stream_id(options, "replayStreamId", 0x5A17)
    assert min_partitions is not None and fragment_limit is not None
    assert replay_channel is not None and replay_stream is not None
    read_mode = str(options.get("readMode", "auto")).strip().lower()
    if read_mode not in READ_MODES:
        raise OptionError(f"option readMode: {options.get('readMode')!r} is not one of {', '.join(READ_MODES)}")
    raw_dir = options.get("archiveDir")
    archive_dir = str(raw_dir).strip() if raw_dir is not None and str(raw_dir).strip() else None
    return ReaderOptions(
        archive=archive,
        channel=channel,
        stream_id=stream_id,
        recording_ids=recording_ids,
        starting=starting,
        ending=ending,
        min_partitions=min_partitions,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        replay_channel=replay_channel,
        replay_stream_id=replay_stream,
        fragment_limit=fragment_limit,
        max_bytes_per_trigger=max_bytes,
        max_messages_per_trigger=max_messages,
        min_messages_per_trigger=min_messages,
        max_trigger_delay_s=_seconds(options, "maxTriggerDelay", 15.0),
        layout=value_layout(options),
        read_mode=read_mode,
        archive_dir=archive_dir,
        include_timestamp=include_timestamp(options),
        low_latency=_low_latency(options, min_partitions, max_bytes, max_messages, min_messages),
        cluster_dir=cluster_dir,
    )


def _low_latency(options: Mapping[str, str], min_partitions: int, *limits: int | None) -> bool:
    """``lowLatency``: Spark's simple stream reader reads on the driver, all that is there, so row
    limits and partitions have no meaning: refused rather than ignored."""
    on = _bool(options, "lowLatency", False)
    if on:
        for name in ("maxBytesPerTrigger", "maxMessagesPerTrigger", "minMessagesPerTrigger", "minPartitions"):
            if options.get(name) is not None:
                raise OptionError(f"option {name}: not with lowLatency=true (each micro-batch reads everything "
                                  "there is, in one piece, on the Spark driver)")
    return on


def include_timestamp(options: Mapping[str, str]) -> bool:
    """``includeTimestamp``; a ``valueSchema`` field may not take its column's name."""
    on = _bool(options, "includeTimestamp", False)
    layout = value_layout(options)
    if on and layout is not None and any(name == "timestamp" for name, _ in layout.fields):
        raise OptionError("option includeTimestamp: valueSchema already has a column named 'timestamp'")
    return on


def value_layout(options: Mapping[str, str]) -> Any:
    """``valueSchema`` with ``mode`` and ``columnNameOfCorruptRecord`` (a ``value_schema.ValueLayout``)."""
    raw = options.get("valueSchema")
    if raw is None or not str(raw).strip():
        for name in ("mode", "columnNameOfCorruptRecord"):
            if options.get(name) is not None:
                raise OptionError(f"option {name}: only with valueSchema (it says what a malformed payload does)")
        return None
    from .value_schema import parse_value_schema

    return parse_value_schema(str(raw), str(options.get("mode", "FAILFAST")),
                              str(options.get("columnNameOfCorruptRecord", "_corrupt")).strip())


def parse_writer_options(options: Mapping[str, str]) -> WriterOptions:
    """Checks and parses a writer's options; raises ``OptionError`` naming the first bad one."""
    _check_known(options, WRITER_OPTIONS, "sink")
    archive = _archive(options)
    channel = _channel(options, "channel", None)
    stream_id = _stream_id(options, "streamId", None)
    # Without an option, the rows name their own (a ``channel`` / ``stream_id`` column): the sink
    # checks that against the frame's schema.
    return WriterOptions(archive=archive, channel=channel, stream_id=stream_id,
                         exactly_once=_bool(options, "exactlyOnce", True),
                         stamp_timestamp=_bool(options, "stampTimestamp", False),
                         replay=_writer_replay(options), journal=_journal(options, channel, archive))


def _journal(options: Mapping[str, str], channel: str | None, archive: ArchiveAddress) -> tuple[str | None, int]:
    """The journal: ``journalChannel`` or, by default, the sink's ``channel`` (its archive records it, and
    every executor host reaches it), or IPC where the archive is reached over IPC (one machine)."""
    stream_id = _stream_id(options, "journalStreamId", JOURNAL_STREAM_ID)
    assert stream_id is not None
    default = channel or ("aeron:ipc" if archive.control_channel.startswith("aeron:ipc") else None)
    journal = _channel(options, "journalChannel", default)
    if journal is None and _bool(options, "exactlyOnce", True):
        raise OptionError("option journalChannel: required with exactlyOnce when rows name their channel and the "
                          "archive is reached over UDP: a channel every executor host can publish to and the "
                          "archive records, e.g. aeron:udp?endpoint=<archive host>:<port>")
    return journal, stream_id


def _writer_replay(options: Mapping[str, str]) -> tuple[str, int]:
    channel = _channel(options, "replayChannel", "aeron:ipc")
    stream_id = _stream_id(options, "replayStreamId", 0x5A17)
    assert channel is not None and stream_id is not None
    return channel, stream_id
