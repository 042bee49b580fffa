"""Type stubs for the sulis native extension (Rust, PyO3)."""

import enum
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Final, Self, final

from typing_extensions import Buffer, disjoint_base

__version__: Final[str]
build_profile: Final[str]
CNC_FILE: Final[str]
"""The driver's command-and-control file name in its directory (``cnc.dat``)."""
"""``"release"`` or ``"debug"``; benchmarks refuse debug builds."""

class OfferResult(enum.IntEnum):
    """Why an offer or claim did not append: the negative codes returned in place of a
    position. An IntEnum, so each member equals its Aeron code (-1..-5); each is false, so
    ``if pub.offer(m):`` and ``while not pub.offer(m):`` read as they behave."""

    def __bool__(self) -> bool: ...

    NOT_CONNECTED = -1
    """No subscriber is connected."""
    BACK_PRESSURED = -2
    """Connected, but the publication window is full: retry later."""
    ADMIN_ACTION = -3
    """A term rotation happened: retry at once."""
    CLOSED = -4
    """The publication is closed."""
    MAX_POSITION_EXCEEDED = -5
    """The stream reached its maximum position: no more can be offered."""

class PublishedBatch(tuple[int, int]):
    """What a publication's ``offer_batch`` returns: ``(published, position or code)``: how many messages went
    and the position after them, or the ``OfferResult`` of the message it stopped at. True only if every
    message went."""

    def __bool__(self) -> bool: ...

class OfferBatchResult(int):
    """How many messages of a batch went, in order from the first (an ``int``), and ``code``: ``None`` once every
    message went, otherwise the ``OfferResult`` of the message the call stopped at (none after it was tried)."""

    code: OfferResult | None

NOT_CONNECTED: Final[OfferResult]
BACK_PRESSURED: Final[OfferResult]
ADMIN_ACTION: Final[OfferResult]
CLOSED: Final[OfferResult]
MAX_POSITION_EXCEEDED: Final[OfferResult]

class SulisError(Exception):
    """Base class of every sulis error."""

class ConfigurationError(SulisError):
    """An invalid channel URI, option or argument; the message names the offending part."""

class MessageTooLongError(ConfigurationError):
    """The message exceeds the maximum message (or claim) length."""

class DriverTimeoutError(SulisError):
    """The media driver is not running, not answering, or stopped heartbeating."""

class ClientTimeoutError(SulisError):
    """The media driver timed this client out."""

class RegistrationError(SulisError):
    """The media driver refused a command; ``code`` is Aeron's error code."""

    code: int

class ClosedError(SulisError):
    """The object (or its client) is closed."""

class ActiveDriverError(SulisError):
    """Another live media driver owns the directory."""

class StorageSpaceError(SulisError):
    """A sparse log's pages could not be had: its file system (/dev/shm) is full. Nothing was appended; the offer
    can be retried once there is room."""

@disjoint_base
class MediaDriver:
    """An embedded media driver; agents run on Rust threads, never holding the GIL."""

    def __new__(
        cls,
        dir: str | None = None,
        threading_mode: str | None = None,
        idle_strategy: str | None = None,
        **options: object,
    ) -> Self: ...
    @property
    def dir(self) -> str:
        """The driver directory."""
    @property
    def is_running(self) -> bool:
        """True until closed."""
    def config(self) -> list[tuple[str, str, str, str, str]]:
        """(name, value, source, env var, doc) of every effective setting."""
    def do_work(self) -> int:
        """Invoker mode only: one duty cycle of every agent on this thread (GIL released)."""
    def close(self) -> None:
        """Stops the driver (idempotent)."""
    def __enter__(self) -> Self: ...
    def __exit__(self, *args: object) -> bool: ...

@disjoint_base
class Client:
    """A connection to a media driver in this or another process.

    A ``dir`` that does not exist fails at once (``DriverTimeoutError``, naming ``sulis driver --dir``); one
    whose ``cnc.dat`` is not there yet (a driver starting) is waited for up to ``driver_timeout`` seconds."""

    def __new__(cls, dir: str | None = None, driver_timeout: float = 10.0, name: str | None = None) -> Self: ...
    @property
    def dir(self) -> str:
        """The driver directory."""
    @property
    def client_id(self) -> int:
        """This client's id."""
    @property
    def lapped_count(self) -> int:
        """Times this client fell more than the driver's broadcast buffer behind and re-synchronised."""
    @property
    def is_closed(self) -> bool:
        """True once closed or failed."""
    def add_publication(self, channel: str, stream_id: int) -> Publication:
        """Adds a concurrent publication."""
    def add_exclusive_publication(self, channel: str, stream_id: int) -> ExclusivePublication:
        """Adds an exclusive (single-writer) publication."""
    def add_subscription(
        self,
        channel: str,
        stream_id: int,
        on_available_image: Callable[[Image], object] | None = None,
        on_unavailable_image: Callable[[Image], object] | None = None,
    ) -> Subscription:
        """Adds a subscription; callbacks run on the client's dispatcher thread."""
    def close(self) -> None:
        """Closes the client; the driver releases its resources."""
    def __enter__(self) -> Self: ...
    def __exit__(self, *args: object) -> bool: ...

class _PublicationBase:
    def offer(self, data: bytes | bytearray | memoryview | Any, reserved_value: int | None = None) -> int:
        """Appends a message: new position (>= 0) or an OfferResult (negative)."""
    def offer_batch(
        self, messages: Any = None, *, data: Any = None, offsets: Any = None, reserved_values: Any = None
    ) -> PublishedBatch:
        """Publishes many messages (a pyarrow binary/string Array or ChunkedArray, a sequence of
        bytes-like objects, or data= and Arrow-layout offsets= buffers): (published, position or code),
        true only if every message went.
        ``reserved_values``: an int for every message, or one int64 per message (numpy int64 array)."""
    def try_claim(self, length: int) -> BufferClaim | int:
        """Claims space for one message: a BufferClaim, or an OfferResult (negative)."""
    @property
    def is_connected(self) -> bool: ...
    @property
    def position(self) -> int: ...
    @property
    def position_limit(self) -> int: ...
    @property
    def session_id(self) -> int: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def channel(self) -> str: ...
    @property
    def registration_id(self) -> int: ...
    @property
    def max_message_length(self) -> int: ...
    @property
    def max_payload_length(self) -> int: ...
    @property
    def term_buffer_length(self) -> int: ...
    @property
    def is_closed(self) -> bool: ...
    def add_destination(self, channel: str) -> int:
        """Adds ``aeron:udp?endpoint=HOST:PORT`` to a control-mode=manual publication: its id."""
    def remove_destination(self, channel: str) -> None: ...
    def remove_destination_by_id(self, destination_id: int) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *args: object) -> bool: ...

@final
class Publication(_PublicationBase):
    """A concurrent publication (thread-safe, shared per stream)."""

@final
class ExclusivePublication(_PublicationBase):
    """A single-writer publication with its own session."""

@final
class BufferClaim:
    """Space claimed in the log; fill ``buffer`` then ``commit()`` or ``abort()``."""

    @property
    def buffer(self) -> memoryview: ...
    @property
    def length(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def reserved_value(self) -> int: ...
    @reserved_value.setter
    def reserved_value(self, value: int) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, _exc: BaseException | None = None, _tb: TracebackType | None = None
    ) -> bool: ...

@final
class Header:
    """Header of the fragment being handled (a copy, safe to keep)."""

    @property
    def position(self) -> int: ...
    @property
    def session_id(self) -> int: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def term_id(self) -> int: ...
    @property
    def term_offset(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def reserved_value(self) -> int: ...
    @property
    def frame_length(self) -> int: ...
    @property
    def frame_type(self) -> int: ...
    @property
    def initial_term_id(self) -> int: ...

@final
class Image:
    """One publisher's stream within a subscription."""

    @property
    def session_id(self) -> int: ...
    @property
    def correlation_id(self) -> int: ...
    @property
    def join_position(self) -> int: ...
    @property
    def position(self) -> int: ...
    def set_position(self, position: int) -> None: ...
    @property
    def is_end_of_stream(self) -> bool: ...
    @property
    def is_closed(self) -> bool: ...
    @property
    def source_identity(self) -> str: ...
    @property
    def term_buffer_length(self) -> int: ...
    @property
    def initial_term_id(self) -> int: ...
    @property
    def mtu_length(self) -> int: ...

@final
class BatchColumn:
    """A read-only buffer over one column of a Batch or a SessionMessages (buffer protocol)."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class SessionMessages:
    """Session messages the log held back to back: a batched service's ``on_session_messages`` argument."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: int, /) -> bytes: ...
    @property
    def session_ids(self) -> BatchColumn: ...
    @property
    def timestamps(self) -> BatchColumn: ...
    @property
    def positions(self) -> BatchColumn: ...
    @property
    def data(self) -> BatchColumn: ...
    @property
    def offsets(self) -> BatchColumn: ...
    def to_list(self) -> list[bytes]: ...

@final
class Batch:
    """Fragments copied out at once; payloads back to back plus columns."""

    @staticmethod
    def of(messages: list[bytes], positions: list[int], reserved_values: list[int] | None = None,
           session_id: int = 0) -> Batch:
        """A batch of whole messages ending at ``positions``: for tests of code that takes batches."""
    def __len__(self) -> int: ...
    def __getitem__(self, i: int, /) -> bytes: ...
    @property
    def data(self) -> BatchColumn: ...
    @property
    def offsets(self) -> BatchColumn: ...
    @property
    def lengths(self) -> BatchColumn: ...
    @property
    def positions(self) -> BatchColumn: ...
    @property
    def session_ids(self) -> BatchColumn: ...
    @property
    def flags(self) -> BatchColumn: ...
    @property
    def reserved_values(self) -> BatchColumn: ...
    @property
    def nbytes(self) -> int: ...
    def to_list(self) -> list[bytes]: ...

@final
class RecordingFileReader:
    """A recording's fragments read straight from its segment files, as Batches laid out as
    ``Subscription.poll_batch`` lays out a replay's; every frame header is checked (a torn or
    corrupt frame raises ``ArchiveError`` naming the file, offset and position)."""

    def __new__(
        cls,
        archive_dir: str,
        recording_id: int,
        start_position: int,
        term_length: int,
        segment_file_length: int,
        initial_term_id: int,
        position: int,
        limit: int,
    ) -> Self: ...
    def read_batch(self, fragment_limit: int = 65536) -> Batch: ...
    @property
    def position(self) -> int: ...
    @property
    def limit(self) -> int: ...
    @property
    def recording_id(self) -> int: ...

@final
class FragmentAssembler:
    """Wraps a handler so it sees whole messages."""

    def __new__(cls, handler: Callable[[memoryview, Header], object]) -> Self: ...
    @property
    def handler(self) -> Callable[[memoryview, Header], object]: ...
    def __call__(self, buffer: memoryview, header: Header) -> None: ...

@final
class Subscription:
    """A subscription to a channel and stream (poll from one thread at a time)."""

    def poll(self, handler: Callable[[memoryview, Header], object], fragment_limit: int = 10) -> int: ...
    def controlled_poll(self, handler: Callable[[memoryview, Header], int], fragment_limit: int = 10) -> int: ...
    def bounded_poll(
        self, handler: Callable[[memoryview, Header], object], limit_position: int, fragment_limit: int = 10
    ) -> int: ...
    def poll_batch(self, fragment_limit: int = 4096, limit_position: int | None = None) -> Batch: ...
    @property
    def is_connected(self) -> bool: ...
    @property
    def images(self) -> list[Image]: ...
    @property
    def image_count(self) -> int: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def channel(self) -> str: ...
    @property
    def registration_id(self) -> int: ...
    def resolved_channel(self) -> str | None: ...
    def local_socket_addresses(self) -> list[str]: ...
    def add_destination(self, channel: str) -> int:
        """Adds a destination to a control-mode=manual subscription: its id."""
    def remove_destination(self, channel: str) -> None: ...
    @property
    def is_closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *args: object) -> bool: ...

@final
class CountersReader:
    """Read-only view of a driver's counters (works across processes)."""

    def __new__(cls, dir: str) -> Self: ...
    @property
    def dir(self) -> str: ...
    @property
    def pid(self) -> int: ...
    @property
    def start_time_ms(self) -> int: ...
    @property
    def cnc_version(self) -> str: ...
    @property
    def driver_heartbeat_ms(self) -> int: ...
    def counters(self) -> list[dict[str, Any]]: ...
    def value(self, counter_id: int) -> int: ...
    def label(self, counter_id: int) -> str: ...

def read_loss_report(dir: str) -> list[dict[str, Any]]:
    """Loss report of the driver in ``dir``: one dict per image that lost data."""

def read_errors(dir: str) -> list[tuple[int, int, int, str]]:
    """Distinct errors of the driver in ``dir``: (count, first_ms, last_ms, text)."""

def driver_config(
    dir: str | None = None, threading_mode: str | None = None, idle_strategy: str | None = None, **options: object
) -> list[tuple[str, str, str, str, str]]:
    """Effective driver configuration without starting a driver."""

def active_driver(dir: str, timeout_ms: int = 10000) -> str | None:
    """Describes a live driver owning ``dir``, or None."""

def counter_types() -> list[tuple[int, str]]:
    """Every counter type id with its short name."""
def system_counters() -> list[tuple[int, str]]:
    """Every system counter: (id, label)."""
def parse_stream_counter_key(key: bytes) -> dict[str, Any] | None:
    """A stream counter key as a dict (registration_id, session_id, stream_id, channel), or None."""
def is_stream_counter_type(type_id: int) -> bool:
    """Whether counters of this type carry a stream key."""
def default_dir() -> str:
    """The default driver directory: $SULIS_DIR, else sulis-$USER in /dev/shm or the temp dir."""
@final
class ChannelUri:
    """A channel URI (``aeron:udp?endpoint=host:40123|term-length=64k``), parsed and checked;
    ``str()`` is its canonical form. Raises ConfigurationError naming the part at fault."""

    def __new__(cls, uri: str) -> ChannelUri: ...
    @property
    def media(self) -> str: ...
    @property
    def is_spy(self) -> bool: ...
    @property
    def params(self) -> list[tuple[str, str]]: ...
    def get(self, key: str) -> str | None: ...
    def with_param(self, key: str, value: object) -> ChannelUri: ...
    def with_default(self, key: str, value: object) -> ChannelUri: ...
    def without(self, *keys: str) -> ChannelUri: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def parse_channel(uri: str) -> str:
    """Validates a channel URI and returns its canonical form."""

def channel_params(uri: str) -> list[tuple[str, str]]:
    """The (key, value) parameters of a channel URI."""

def recording_key(uri: str, stream_id: int) -> str:
    """What an archive tells a stream by (stream id, media, endpoint, interface, control, session-id, tags)."""
def spark_offset_json(positions: dict[int, int], stopped: dict[int, int] | None = None, pieces: int | None = None,
                      finished_below: int = 0, finished_stopped_by: int = -1) -> str:
    """A streaming offset's JSON text, as both implementations of the Spark source write it."""
def spark_parse_offset(text: str) -> tuple[dict[int, int], dict[int, int], int | None, tuple[int, int]]:
    """An offset's text read: (positions, stopped, pieces, (finished below, stopped by))."""
def spark_replay_from(start: int, recording_start: int, term_length: int) -> int:
    """Where a replay of ``(start, ...]`` begins."""
def spark_reader_options(options: Sequence[tuple[str, str]], streaming: bool) -> dict[str, Any]:
    """A reader's options checked and parsed: ReaderOptions' fields; raises OptionError naming the first bad one."""
def spark_writer_options(options: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """A writer's options checked and parsed: WriterOptions' fields; raises OptionError naming the first bad one."""
def spark_announced_archive_dir(driver_dir: str | None, archive_id: int) -> str | None:
    """The directory archive ``archive_id`` announces through the driver at ``driver_dir``, if readable here."""
def spark_holds_recording(dir: str, range: tuple[int, int, int, int, int, int, int, int, int, int, int]) -> bool:
    """Whether ``dir``'s catalog holds the range's recording as the queried archive does."""
def spark_log_recording_ids(cluster_dir: str) -> list[int]:
    """The log recordings a cluster member's recording.log names; raises OptionError naming the directory."""

@final
class SparkPlanner:
    """The driver side of ``format("sulis")``: what a query reads (sulis_spark::StreamPlanner)."""
    def __new__(cls, options: Sequence[tuple[str, str]], streaming: bool) -> Self: ...
    def batch_ranges(self) -> list[tuple[int, int, int, int, int, int, int, int, int, int, int]]:
        """A batch read's ranges, in RecordingRange's field order."""
    def initial_offset(self) -> str:
        """Where a query with no checkpoint begins (offset text)."""
    def default_read_limit(self) -> tuple[str, int]:
        """The read limit the options set: (kind, n)."""
    def prepare_for_trigger_available_now(self) -> None:
        """Nothing past what is recorded now."""
    def report_latest_offset(self) -> str | None:
        """What is recorded, as last seen (offset text)."""
    def latest_offset(self, start: str | None, kind: str, n: int) -> str | None:
        """Where the next micro-batch ends within the limit; None: no batch yet."""
    def ranges(self, start: str | None, end: str) -> list[tuple[int, int, int, int, int, int, int, int, int, int, int]]:
        """The ranges of the micro-batch (start, end]."""
    def archive_id(self) -> int:
        """The archive's id."""
    def check_archive_dir(self, archive_id: int) -> None:
        """archiveDir, where readable here, must be archive ``archive_id``'s directory."""
    def drain_log(self) -> list[tuple[str, str]]:
        """The lines to log since the last call: (level, text)."""
    def commit(self, end: str) -> None:
        """Spark committed the micro-batch ending at ``end`` (offset JSON): the query's retention hold moves there."""
    def stop(self) -> None:
        """The query stops: its own retention hold goes (a named one stays)."""
    def close(self) -> None:
        """Closes the archive session."""

def spark_check_sink_columns(columns: list[tuple[str, str]], channel_option: bool, stream_option: bool,
                             stamp_timestamp: bool) -> None:
    """The write's columns checked for the sink; OptionError naming what is wrong."""
def spark_sink_row_error(kind: str, row: int, value: int) -> str:
    """The text of a row the sink cannot publish."""
def spark_sink_record_journal(options: list[tuple[str, str]]) -> None:
    """The archive records the exactly-once sink's journal (started unless something records it)."""
def spark_sink_journal_entries(options: list[tuple[str, str]], query: str, batch: int) -> list[dict[str, Any]]:
    """The journal's entries that may matter to micro-batch batch of query."""

@final
class SparkSinkTask:
    """One sink task (sulis_spark::sink_publisher): exactly once with a query, else at least once."""

    def __new__(cls, options: list[tuple[str, str]], query: str | None = None, batch: int = 0, partition: int = 0,
                task_attempt_id: int = 0) -> Self: ...
    def write(self, channel: str, stream_id: int, values: Any, reserved_values: Any = None) -> None: ...
    def finish(self) -> tuple[int, int]: ...
    def fail(self, why: str) -> None: ...
    def drain_notes(self) -> list[str]: ...

@final
class SparkPartitionReader:
    """A planned range read as whole messages (sulis_spark::PartitionReader)."""
    def __new__(cls, address: tuple[str | None, str, int, str, int | None, float], replay_channel: str,
                replay_stream_id: int, fragment_limit: int, read_mode: str, archive_dir: str | None,
                range: tuple[int, int, int, int, int, int, int, int, int, int, int],
                archive_id: int | None) -> Self: ...
    def next_batch(self) -> Batch | None:
        """The next messages, None once the range is read."""
    def drain_log(self) -> list[str]:
        """Lines to log since the last call."""
    @property
    def files_dir(self) -> str | None:
        """The directory the files are read from, None for a replay."""
    def close(self) -> None:
        """Stops a replay still running."""

@final
class ByteBuffer:
    """Bytes Rust filled, read-only through the buffer protocol."""

    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __len__(self) -> int: ...

@final
class SparkRowShape:
    """What a read's rows are (sulis_spark::row_shape)."""

    def __new__(cls, value_schema: tuple[str, str, str] | None, include_timestamp: bool, cluster: bool) -> Self: ...
    def ddl(self) -> str:
        """The columns as Spark DDL."""
    def columns(self) -> list[tuple[str, str]]:
        """The columns: (name, Spark DDL type)."""
    def arrow(self, batch: Batch, ids: tuple[int, int, int]
              ) -> tuple[int, list[tuple[ByteBuffer | None, ByteBuffer | None, ByteBuffer, int]]]:
        """The rows among the batch's messages as Arrow column buffers."""

class ArchiveError(SulisError):
    """The archive refused a request or did not answer; ``code`` is the archive's error code (-1 if none)."""

    code: int

REPLAY_ALL_AND_FOLLOW: Final[int]
"""Replay length: what is recorded, then follow the live recording."""
REPLAY_ALL_AND_STOP: Final[int]
"""Replay length: what is recorded when the replay starts, then stop."""

class SystemCounter(enum.IntEnum):
    """The media driver's system counters (counter id = member value); a member's doc is its label."""

    BYTES_SENT = 0
    """Bytes sent"""
    BYTES_RECEIVED = 1
    """Bytes received"""
    RECEIVER_PROXY_FAILS = 2
    """Failed offers to ReceiverProxy"""
    SENDER_PROXY_FAILS = 3
    """Failed offers to SenderProxy"""
    CONDUCTOR_PROXY_FAILS = 4
    """Failed offers to DriverConductorProxy"""
    NAK_MESSAGES_SENT = 5
    """NAKs sent"""
    NAK_MESSAGES_RECEIVED = 6
    """NAKs received"""
    STATUS_MESSAGES_SENT = 7
    """Status Messages sent"""
    STATUS_MESSAGES_RECEIVED = 8
    """Status Messages received"""
    HEARTBEATS_SENT = 9
    """Heartbeats sent"""
    HEARTBEATS_RECEIVED = 10
    """Heartbeats received"""
    RETRANSMITS_SENT = 11
    """Retransmits sent"""
    FLOW_CONTROL_UNDER_RUNS = 12
    """Flow control under runs"""
    FLOW_CONTROL_OVER_RUNS = 13
    """Flow control over runs"""
    INVALID_PACKETS = 14
    """Invalid packets"""
    ERRORS = 15
    """Errors"""
    SHORT_SENDS = 16
    """Short sends"""
    FREE_FAILS = 17
    """Failed attempts to free log buffers"""
    SENDER_FLOW_CONTROL_LIMITS = 18
    """Sender flow control limits, i.e. back-pressure events"""
    UNBLOCKED_PUBLICATIONS = 19
    """Unblocked Publications"""
    UNBLOCKED_COMMANDS = 20
    """Unblocked Control Commands"""
    POSSIBLE_TTL_ASYMMETRY = 21
    """Possible TTL Asymmetry"""
    CONTROLLABLE_IDLE_STRATEGY = 22
    """ControllableIdleStrategy status"""
    LOSS_GAP_FILLS = 23
    """Loss gap fills"""
    CLIENT_TIMEOUTS = 24
    """Client liveness timeouts"""
    RESOLUTION_CHANGES = 25
    """Resolution changes"""
    CONDUCTOR_MAX_CYCLE_TIME = 26
    """Conductor max cycle time doing its work in ns"""
    CONDUCTOR_CYCLE_TIME_THRESHOLD_EXCEEDED = 27
    """Conductor work cycle exceeded threshold count"""
    SENDER_MAX_CYCLE_TIME = 28
    """Sender max cycle time doing its work in ns"""
    SENDER_CYCLE_TIME_THRESHOLD_EXCEEDED = 29
    """Sender work cycle exceeded threshold count"""
    RECEIVER_MAX_CYCLE_TIME = 30
    """Receiver max cycle time doing its work in ns"""
    RECEIVER_CYCLE_TIME_THRESHOLD_EXCEEDED = 31
    """Receiver work cycle exceeded threshold count"""
    NAME_RESOLVER_MAX_TIME = 32
    """Name resolver max time in ns"""
    NAME_RESOLVER_TIME_THRESHOLD_EXCEEDED = 33
    """Name resolver exceeded threshold count"""
    SULIS_VERSION = 34
    """sulis software: version"""
    BYTES_CURRENTLY_MAPPED = 35
    """Bytes currently mapped"""
    RETRANSMITTED_BYTES = 36
    """Retransmitted bytes"""
    RETRANSMIT_OVERFLOW = 37
    """Retransmit Pool Overflow count"""
    ERROR_FRAMES_RECEIVED = 38
    """Error Frames received"""
    ERROR_FRAMES_SENT = 39
    """Error Frames sent"""
    PUBLICATIONS_REVOKED = 40
    """Publications Revoked"""
    PUBLICATION_IMAGES_REVOKED = 41
    """Publication Images Revoked"""
    IMAGES_REJECTED = 42
    """Images Rejected"""
    CONTROL_PROTOCOL_VERSION = 43
    """Control Protocol Version"""
    STATUS_MESSAGES_REJECTED = 44
    """Status Messages rejected"""
    NATIVE_RESOURCE_AGENT_PROXY_FAILS = 45
    """Failed offers to NativeResourceAgentProxy"""
    SECURITY_FRAMES_DROPPED = 46
    """Transport security: frames dropped"""
    SECURITY_UNSEALED_DROPPED = 47
    """Transport security: unsealed or malformed frames dropped"""
    SECURITY_AUTH_FAILURES = 48
    """Transport security: frames failing authentication"""
    SECURITY_REPLAYS_DROPPED = 49
    """Transport security: replayed or stale frames dropped"""
    SECURITY_SEALING_KEY_ID = 50
    """Transport security: id of the key sealing"""
    SECURITY_KEYRING_READS = 51
    """Transport security: keyring reads"""

class RecordingSignal(enum.IntEnum):
    """What happened to a recording (Aeron's RecordingSignal values)."""

    START = 0
    """A recording started."""
    STOP = 1
    """A recording stopped."""
    EXTEND = 2
    """A recording was extended."""
    REPLICATE = 3
    """A replication created or replaced the recording."""
    MERGE = 4
    """A replication merged with the live stream."""
    SYNC = 5
    """A replication caught up with its source."""
    DELETE = 6
    """Segments were deleted."""
    REPLICATE_END = 7
    """A replication ended."""

class RecordingState(enum.IntEnum):
    """A catalog entry's state (Aeron's RecordingState values)."""

    INVALID = 0
    """Not usable (marked so, or damaged)."""
    VALID = 1
    """In use."""
    DELETED = 2
    """Purged."""

@final
class RecordingSignalEvent:
    """A recording signal: the request it answers, the recording, where."""

    @property
    def correlation_id(self) -> int: ...
    @property
    def recording_id(self) -> int: ...
    @property
    def subscription_id(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def signal(self) -> RecordingSignal: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class RecordingEvent:
    """An event of an archive's recording events stream: ``kind`` is ``"started"``, ``"progress"``
    or ``"stopped"``; ``position`` is the start, the recorded or the stop position. Only a started
    event carries the image's ``session_id``, ``stream_id``, ``channel`` and ``source_identity``
    (-1 and empty otherwise)."""

    @property
    def kind(self) -> str: ...
    @property
    def recording_id(self) -> int: ...
    @property
    def start_position(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def session_id(self) -> int: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def channel(self) -> str: ...
    @property
    def source_identity(self) -> str: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class RecordingDescriptor:
    """A recording, as the archive's catalog describes it."""

    @property
    def recording_id(self) -> int: ...
    @property
    def start_timestamp(self) -> int: ...
    @property
    def stop_timestamp(self) -> int: ...
    @property
    def start_position(self) -> int: ...
    @property
    def stop_position(self) -> int: ...
    @property
    def initial_term_id(self) -> int: ...
    @property
    def segment_file_length(self) -> int: ...
    @property
    def term_buffer_length(self) -> int: ...
    @property
    def mtu_length(self) -> int: ...
    @property
    def session_id(self) -> int: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def stripped_channel(self) -> str: ...
    @property
    def original_channel(self) -> str: ...
    @property
    def source_identity(self) -> str: ...

@disjoint_base
class Archive:
    """An archive running in this process."""

    def __new__(
        cls,
        dir: str,
        driver_dir: str | None = None,
        *,
        credentials: bytes | Sequence[bytes] | None = None,
        challenge: bytes | None = None,
        challenge_response: bytes | None = None,
        authorise: Callable[[bytes, str], bool] | None = None,
        control_channel: str | None = ...,
        control_stream_id: int | str | None = ...,
        local_control_channel: str | None = ...,
        local_control_stream_id: int | str | None = ...,
        control_term_buffer_length: int | str | None = ...,
        archive_id: int | str | None = ...,
        segment_file_length: int | str | None = ...,
        file_sync_level: int | str | None = ...,
        catalog_file_sync_level: int | str | None = ...,
        record_checksum: str | None = ...,
        replay_checksum: str | None = ...,
        recording_events_enabled: bool | str | None = ...,
        recording_events_channel: str | None = ...,
        recording_events_stream_id: int | str | None = ...,
        catalog_capacity: int | str | None = ...,
        file_io_max_length: int | str | None = ...,
        max_concurrent_recordings: int | str | None = ...,
        max_concurrent_replays: int | str | None = ...,
        connect_timeout: float | str | None = ...,
        session_liveness_check_interval: float | str | None = ...,
        driver_timeout: float | str | None = ...,
        replication_channel: str | None = ...,
        low_storage_space_threshold: int | str | None = ...,
        threading_mode: str | None = ...,
        retention_policy_file: str | None = ...,
        retention_check_interval: float | str | None = ...,
        retention_hold_timeout: float | str | None = ...,
        tier_store: str | None = ...,
        tier_region: str | None = ...,
        tier_cache_size: int | str | None = ...,
        tier_timeout: float | str | None = ...,
    ) -> Archive: ...
    @property
    def dir(self) -> str: ...
    @property
    def archive_id(self) -> int: ...
    @property
    def is_running(self) -> bool: ...
    def errors(self) -> list[str]: ...
    def close(self) -> None: ...

@disjoint_base
class ArchiveClient:
    """A control session with an archive."""

    def __new__(
        cls,
        client: Client,
        control_request_channel: str = ...,
        control_request_stream_id: int = 10,
        control_response_channel: str = ...,
        control_response_stream_id: int = 20,
        message_timeout: float = 10.0,
        credentials: bytes | None = None,
        challenge_response: bytes | None = None,
    ) -> ArchiveClient: ...
    @property
    def archive_id(self) -> int: ...
    @property
    def control_session_id(self) -> int: ...
    @property
    def is_closed(self) -> bool: ...
    def start_recording(self, channel: str, stream_id: int, source_location: int, auto_stop: bool) -> int: ...
    def extend_recording(
        self, recording_id: int, channel: str, stream_id: int, source_location: int, auto_stop: bool
    ) -> int: ...
    def stop_recording(self, channel: str, stream_id: int) -> None: ...
    def stop_recording_subscription(self, subscription_id: int) -> None: ...
    def stop_recording_by_identity(self, recording_id: int) -> bool: ...
    def list_recordings(self, from_id: int, count: int) -> list[RecordingDescriptor]: ...
    def list_recordings_for_uri(
        self, from_id: int, count: int, channel: str, stream_id: int
    ) -> list[RecordingDescriptor]: ...
    def list_recording(self, recording_id: int) -> RecordingDescriptor | None: ...
    def get_recording_position(self, recording_id: int) -> int: ...
    def get_stop_position(self, recording_id: int) -> int: ...
    def get_start_position(self, recording_id: int) -> int: ...
    def get_max_recorded_position(self, recording_id: int) -> int: ...
    def start_replay(
        self, recording_id: int, position: int, length: int, channel: str, stream_id: int,
        limit_counter_id: int | None = ...,
    ) -> int: ...
    def start_replay_via_response_channel(
        self, client: Client, subscription: Subscription, recording_id: int, position: int, length: int,
        channel: str, stream_id: int, limit_counter_id: int | None = ...,
    ) -> int: ...
    def stop_replay(self, replay_session_id: int) -> None: ...
    def stop_all_replays(self, recording_id: int = ...) -> None: ...
    def find_last_matching_recording(self, min_recording_id: int, channel: str, stream_id: int,
                                     session_id: int) -> int: ...
    def keep_alive(self) -> None: ...
    def update_channel(self, recording_id: int, channel: str) -> None: ...
    def list_recording_subscriptions(self, pseudo_index: int = 0, count: int = 100, channel: str = ...,
                                     stream_id: int | None = None) -> list[tuple[int, int, str]]: ...
    def replicate(
        self, src_recording_id: int, src_control_channel: str, src_control_stream_id: int,
        dst_recording_id: int = ..., stop_position: int = ..., replication_channel: str = ...,
        live_destination: str = ..., replication_session_id: int = ..., credentials: bytes | None = ...,
        src_response_channel: str = ..., channel_tag_id: int = ..., subscription_tag_id: int = ...,
    ) -> int: ...
    def stop_replication(self, replication_id: int) -> None: ...
    def migrate_segments(self, src_recording_id: int, dst_recording_id: int) -> int: ...
    def truncate_recording(self, recording_id: int, position: int) -> int: ...
    def purge_recording(self, recording_id: int) -> int: ...
    def detach_segments(self, recording_id: int, new_start_position: int) -> None: ...
    def delete_detached_segments(self, recording_id: int) -> int: ...
    def purge_segments(self, recording_id: int, new_start_position: int) -> int: ...
    def attach_segments(self, recording_id: int) -> int: ...
    def poll_signals(self) -> list[RecordingSignalEvent]: ...
    def poll_errors(self) -> list[tuple[int, int, str]]: ...
    def await_signal(self, recording_id: int, signal: int, timeout: float | None = None) -> RecordingSignalEvent: ...
    def close(self) -> None: ...

def archive_config(
    dir: str | None = None, driver_dir: str | None = None, **options: object
) -> list[tuple[str, str, str, str, str]]:
    """The archive's effective settings without starting one: (name, value, source, environment
    variable, doc) per option of its table."""
def archive_describe(dir: str) -> tuple[list[tuple[int, RecordingDescriptor]], list[str]]:
    """The catalog of the archive in ``dir``: (state, descriptor) per entry, and what could not be read."""
def archive_verify(dir: str, checksum: str | None = None) -> list[tuple[int, bool, str]]:
    """(recording id, ok, message) for every valid recording's segment files (and checksums)."""
def decode_recording_event(message: bytes) -> RecordingEvent:
    """One message of an archive's recording events stream, decoded."""
def archive_checksum(
    dir: str, checksum: str, recording_id: int | None = None, all_files: bool = False
) -> list[tuple[int, int, int]]:
    """Writes checksums into recordings' frames and catalog entries: (recording id, files, frames)."""
def archive_mark(dir: str, recording_id: int, valid: bool) -> None:
    """Marks a recording VALID or INVALID in a stopped archive's catalog."""
def archive_compact(dir: str) -> tuple[int, list[str]]:
    """Removes INVALID and DELETED entries and their segment files: (entries removed, files deleted)."""
def archive_delete_orphaned_segments(dir: str) -> list[str]:
    """Deletes segment files no recording owns; returns their paths."""
def archive_dump(
    dir: str, frames: int
) -> list[tuple[int, RecordingDescriptor, list[tuple[int, int, int, int, int, int, int, bytes]], str | None]]:
    """Every catalog entry with up to ``frames`` of its first frames: (state, descriptor, frames, error)."""
def archive_mark_file(
    dir: str,
) -> tuple[int, int, int, str, str, str, list[tuple[int, int, int, str]]] | None:
    """The mark file: pid, activity ms, archive id, channels, driver dir, errors; None without one."""
def archive_retention(
    dir: str, policy_file: str | None = None, hold_timeout: str = "7d"
) -> tuple[list[str], list[str], list[tuple[int, int, str, int, int, str | None, int | None, str, int, int]]]:
    """The retention rules, the holds, and per valid recording what goes at the next check:
    (rules, holds, rows of (recording id, stream id, channel, start, stop, rule, held from, next, segments in the
    object store, their bytes))."""
def archive_segments(dir: str, recording_id: int | None = None) -> list[tuple[int, int, str, int, str]]:
    """Where each segment file of the valid recordings (or of ``recording_id``) is: (recording id, base position,
    "disk" | "store" | "disk and store" | "missing", length, object key or "")."""
def archive_hold(dir: str, name: str, held: list[tuple[int, int]]) -> str:
    """Writes (or replaces) the hold ``name``: each (recording id, position) kept from retention from that
    position's segment on, for ``retention_hold_timeout`` after the last write. Returns its path."""
def archive_release_hold(dir: str, name: str) -> bool:
    """Removes the hold ``name``; False when there was none."""

def cluster_config(
    cluster_dir: str | None = None, driver_dir: str | None = None, **options: object
) -> list[tuple[str, str, str, str, str]]:
    """The cluster's effective settings without starting a node: (name, value, source, environment
    variable, doc) per option of its table."""

def read_recording_log(cluster_dir: str) -> tuple[list[dict[str, Any]], int]:
    """The entries of ``cluster_dir/recording.log`` and the bytes of a torn last entry (file unchanged)."""

def recovery_plan(cluster_dir: str, service_count: int) -> dict[str, Any]:
    """``snapshots`` (the latest whole set, module first) and ``last_term`` a restart starts from."""

def invalidate_latest_snapshot(cluster_dir: str, service_count: int) -> list[dict[str, Any]]:
    """Marks the latest snapshot set invalid (refused while a module runs there); the entries."""

def purge_cluster_log(cluster_dir: str, driver_dir: str, service_count: int) -> dict[str, int]:
    """Deletes the log's segment files wholly before the latest snapshot."""

def cluster_mark_files(cluster_dir: str) -> list[dict[str, Any]]:
    """The mark files in ``cluster_dir`` (the module's, then each service's): who wrote each, whether it started,
    and its error log as (observations, first ms, last ms, text)."""

def query_cluster_members(cluster_dir: str, timeout: float) -> dict[str, Any]:
    """Asks the module whose mark file is in ``cluster_dir`` for the members, the leader and their log positions."""

def set_cluster_toggle(dir: str, value: int) -> int:
    """Sets the control toggle of the cluster member on the driver in ``dir`` if it is NEUTRAL."""

class ClusterError(SulisError):
    """The cluster refused, failed or ended something; the message says what and where."""

class ClusterSessionClosedError(ClusterError):
    """The cluster ended the session: ``code`` is the SessionEvent code (4 CLOSED, 1 ERROR, ...), ``detail`` why."""

    code: int
    detail: str
    messages_committed: int | None
    """Exactly once, ended by the cluster: how many of the session's messages the log holds for good (messages 1 to
    this were applied once; none after them was, or will be). None when the cluster could not say."""

@final
class Cluster:
    """What a service may do, valid during the callback it is passed to."""

    @property
    def time(self) -> int:
        """The cluster time of the entry being handled (ms since the epoch)."""
    @property
    def log_position(self) -> int:
        """The log position after the entry being handled."""
    @property
    def role(self) -> int:
        """This member's role: 0 follower, 1 candidate, 2 leader."""
    @property
    def member_id(self) -> int:
        """This member's id."""
    def session_ids(self) -> list[int]:
        """The open sessions' ids."""
    def offer(self, session_id: int, payload: bytes) -> int:
        """Sends ``payload`` to session ``session_id``'s client, never waiting: the new position, 1 when it waits
        in the session's egress queue, or an ``OfferResult`` when it cannot go (NOT_CONNECTED: the client is gone or
        its session is being closed; CLOSED, MAX_POSITION_EXCEEDED). On a follower: 1 (nothing is sent)."""
    def offer_batch(self, session_ids: Buffer, data: Buffer, offsets: Buffer) -> OfferBatchResult:
        """Sends message ``i`` (``data[offsets[i]:offsets[i + 1]]``) to session ``session_ids[i]``, in order,
        as ``offer`` each (int64 ids, int32 or int64 offsets one more; ``SessionMessages`` has them so): how many
        went, and ``code``, the ``OfferResult`` of the message it stopped at (None once all went; none after it
        was tried). A session not open raises ``ClusterError`` (``sent``: how many went before it)."""
    def schedule_timer(self, correlation_id: int, deadline: int) -> bool:
        """Schedules (or moves) timer ``correlation_id`` for cluster time ``deadline``."""
    def cancel_timer(self, correlation_id: int) -> bool:
        """Cancels timer ``correlation_id``."""
    def close_session(self, session_id: int) -> bool:
        """Closes session ``session_id`` (its client is told SERVICE_ACTION)."""
    def offer_to_cluster(self, payload: bytes) -> bool:
        """Puts ``payload`` into the log as this service's message."""
    def idle(self, work_count: int = 0) -> None:
        """Idles the service's thread once by the node's idle strategy; raises ``ClusterError`` once the node
        stops (so a loop retrying an offer ends)."""

@final
class SnapshotWriter:
    """Where ``on_take_snapshot`` writes the service's state, valid during that call only."""

    def write(self, data: bytes) -> None:
        """Appends one message of the service's state; ``on_start`` gets them in this order."""
    @property
    def written(self) -> int:
        """Messages written so far."""

@final
class ClusterNode:
    """A cluster node: its consensus module and its service container, each on a thread of its own."""

    def __new__(
        cls, service: object, cluster_dir: str | None = None, driver_dir: str | None = None, **options: object
    ) -> Self: ...
    @property
    def error(self) -> str | None:
        """The first error that stopped the module or the service, if any."""
    @property
    def is_running(self) -> bool:
        """True while both threads run."""
    def close(self) -> None:
        """Stops the module and the service."""
    def snapshot(self, timeout: float = 30.0) -> int:
        """Takes a snapshot and returns the node's snapshot count once it is taken."""
    def suspend(self, timeout: float = 30.0) -> int:
        """Suspends the cluster until ``resume``."""
    def resume(self, timeout: float = 30.0) -> int:
        """Resumes a suspended cluster."""
    def purge_log(self, cluster: bool = False, timeout: float = 30.0) -> dict[str, int]:
        """Deletes the log's segment files wholly before the latest snapshot (every member's, with ``cluster``)."""
    def shutdown(self, timeout: float = 60.0) -> None:
        """Stops the member after a snapshot; returns once it stopped."""
    def abort(self, timeout: float = 60.0) -> None:
        """Stops the member without a snapshot; returns once it stopped."""
    @property
    def snapshot_count(self) -> int:
        """Snapshots taken since the node started."""
    @property
    def state(self) -> int:
        """The consensus module's state (1 active, 2 suspended, 3 snapshot)."""

@final
class ClusterClient:
    """A session with a cluster."""

    def __new__(
        cls,
        driver_dir: str,
        ingress_endpoints: str,
        egress_channel: str,
        ingress_channel: str = ...,
        message_timeout: float = 5.0,
        credentials: bytes = ...,
        exactly_once: bool = True,
        max_in_flight: int = 16384,
        new_leader_timeout: float | None = None,
        client: Client | None = None,
        secret: bytes | None = None,
    ) -> Self: ...
    @property
    def in_flight(self) -> int:
        """Messages sent and not yet committed (exactly once)."""
    @property
    def committed(self) -> int | None:
        """Exactly once: how many of the session's messages the cluster said are committed (None otherwise)."""
    @property
    def offered(self) -> int | None:
        """Exactly once: how many messages the session offered, the last one's number (None otherwise)."""
    @property
    def cluster_session_id(self) -> int:
        """The session's id."""
    @property
    def leadership_term_id(self) -> int:
        """The leader's term."""
    @property
    def leader_member_id(self) -> int:
        """The leader's member id."""
    def offer(self, payload: bytes) -> int:
        """Offers ``payload``: the new position, or an ``OfferResult``."""
    def send_keep_alive(self) -> bool:
        """Tells the cluster the session is alive."""
    def poll_egress(self, handler: Callable[[bytes, int], object], limit: int = 10) -> int:
        """Reads up to ``limit`` egress fragments; raises ``ClusterSessionClosedError`` once ended."""
    def offer_batch(self, data: Buffer, offsets: Buffer) -> OfferBatchResult:
        """Offers ``data[offsets[i]:offsets[i + 1]]`` for each ``i`` (int32 or int64 offsets), in order: how many
        went, and the code of the one refused."""
    def poll_egress_batch(self, limit: int = 256) -> SessionMessages:
        """Reads up to ``limit`` egress fragments: the session's messages among them as one batch."""
    def close(self) -> None:
        """Closes the session and the client."""
