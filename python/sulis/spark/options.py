"""The options of ``format("sulis")``, parsed and checked once, on the Spark driver.

Spark hands a Python data source its options as a case-insensitive dict of
strings. They are parsed when the query starts, so a bad value fails the
query at once with a message that names the option; the parsed values travel
to the executors inside the (picklable) partitions. The rules are
``sulis_spark::reader_options`` and ``writer_options`` (Rust), which the JVM
source follows too, ``valueSchema`` and the columns it makes included
(``sulis_spark::row_shape``); here they become dataclasses.

Nothing here imports pyspark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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

#: The exactly-once sink's journal stream, by default (``journalStreamId``).
JOURNAL_STREAM_ID = 0x5A1C


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
    #: ``valueSchema``, ``mode`` and ``columnNameOfCorruptRecord``: payloads decoded into typed columns (checked
    #: when parsed; the columns are ``sulis_spark::row_shape``'s, ``replay.row_shape``)
    value_schema: tuple[str, str, str] | None = None
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
    #: the options as Spark passed them (the native planner parses them itself)
    raw: tuple[tuple[str, str], ...] = ()

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
    #: ``journalChannel``/``journalStreamId``: the exactly-once sink's journal (``sulis_spark::sink_journal``);
    #: the channel None only where ``exactlyOnce`` is off
    journal: tuple[str | None, int] = (None, JOURNAL_STREAM_ID)
    #: the options as given, for the Rust core's exactly-once tasks
    raw: tuple[tuple[str, str], ...] = ()


def _pairs(options: Mapping[str, str]) -> list[tuple[str, str]]:
    return [(str(k), str(v)) for k, v in options.items()]


def parse_reader_options(options: Mapping[str, str], streaming: bool = False) -> ReaderOptions:
    """Checks and parses a reader's options; raises ``OptionError`` naming the first bad one."""
    from .. import _native

    fields = _native.spark_reader_options(_pairs(options), streaming)
    archive = ArchiveAddress(**fields.pop("archive"))
    if fields["recording_ids"] is not None:
        fields["recording_ids"] = tuple(fields["recording_ids"])
    return ReaderOptions(archive=archive, raw=tuple(_pairs(options)), **fields)


def parse_writer_options(options: Mapping[str, str]) -> WriterOptions:
    """Checks and parses a writer's options; raises ``OptionError`` naming the first bad one."""
    from .. import _native

    fields = _native.spark_writer_options(_pairs(options))
    return WriterOptions(archive=ArchiveAddress(**fields.pop("archive")), raw=tuple(_pairs(options)), **fields)
