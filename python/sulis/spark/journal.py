"""The exactly-once sink's journal: a small recorded stream saying which task attempt published which rows.

Every attempt of a sink task writes, for each stream it publishes to (a *target*), entries into the
journal (JSON, one message each) and waits for each to be recorded before it goes on:

``claim``  before anything else: the attempt (host, pid, Spark's task attempt id), its query, micro-batch,
           partition and target, the session id of its publication on the target and the position its
           rows will start at. The attempt then reads the journal (``Journal.entries``).
``run``    once it knows no other attempt of the same (query, batch, partition, target) is unfinished:
           ``skip``, the rows earlier attempts published (it publishes the partition's rows from there).
           Written and recorded before the first row is offered, so rows after a claim's position
           in its session always have their ``skip`` in the journal.
``done``   after its rows are recorded on the target: how many it published (``count``), their
           checksum (``crc``: CRC32 of the values' bytes and of their lengths) and its end position;
           ``withdrawn`` when it stood back for another attempt, ``failed`` when it raised.

An attempt is *finished* when it has a ``done``, when its session is no longer recorded (its process
died: the media driver closed its publication and the recording stopped), or when its session made a
later claim (its process went on to another task). An attempt that sees another attempt of its
(batch, partition, target) unfinished after its own claim was recorded withdraws and waits for it:
of two attempts racing, at least one reads the journal after the other's claim was recorded, so they
never both publish (a zombie task of an earlier stage attempt, a stage re-attempt whose task attempt
numbers start at 0 again, or a speculative copy). A finished attempt's rows are known from its
``done``, or, for one that died, by reading its session's recording from its claim's position to its
session's next claim or recorded end (``runs_of``).

Reading is per process and incremental: each journal recording is read back from its end a term at a
time until it shows an earlier micro-batch of the query, then only what is new.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .errors import SinkError, SinkTimeoutError
from .options import ArchiveAddress
from .recordings import RecordingInfo, info_of, recordings_of_stream
from .replay import RecordingRange, read_range, replay_from, session

log = logging.getLogger("sulis.spark")

#: The journal publication's term length: readers walk back a term at a time.
JOURNAL_TERM_LENGTH = 64 * 1024
#: One per process: tells its attempts apart from another process' with the same pid.
_PROCESS = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def with_term_length(channel: str) -> str:
    """The journal channel with a 64 KiB term unless it names one."""
    from .._native import ChannelUri

    return str(ChannelUri(channel).with_default("term-length", JOURNAL_TERM_LENGTH))


def attempt_name(task_attempt_id: int, seq: int) -> str:
    """An attempt's name: this process and Spark's task attempt id (unique within a Spark application),
    and the claim's sequence number within the task (a withdrawn claim is followed by another)."""
    return f"{_PROCESS}/{task_attempt_id}/{seq}"


# -- checksums ------------------------------------------------------------------------------------


@dataclass
class Checksum:
    """CRC32 of a run of values' bytes and of their lengths (little-endian int32), and how many."""

    data: int = 0
    lengths: int = 0
    count: int = 0

    def update(self, values: pa.Array) -> None:
        """Adds binary ``values`` (a slice is fine), whatever batches they come in."""
        n = len(values)
        if n == 0:
            return
        if pa.types.is_string(values.type):
            values = values.cast(pa.binary())
        offsets_buf, data_buf = values.buffers()[1], values.buffers()[2]
        offsets = np.frombuffer(offsets_buf, np.int32)[values.offset: values.offset + n + 1]
        lo, hi = int(offsets[0]), int(offsets[-1])
        if data_buf is not None and hi > lo:
            self.data = zlib.crc32(memoryview(data_buf)[lo:hi], self.data)
        self.lengths = zlib.crc32(np.diff(offsets).astype("<i4").tobytes(), self.lengths)
        self.count += n

    @property
    def value(self) -> str:
        return f"{self.data:08x}{self.lengths:08x}"


# -- entries --------------------------------------------------------------------------------------


@dataclass
class Entry:
    """One journal message; ``position`` is where it ends in its journal recording."""

    kind: str  # "claim" | "run" | "done"
    query: str
    batch: int
    partition: int
    target: str  # the target stream's recording key
    attempt: str
    session: int = 0  # claim: the session of the attempt's publication on the target
    start: int = 0  # claim: where its rows start in that session
    skip: int = 0  # run, done: rows of the partition before its run
    count: int = 0  # done: rows it published
    crc: str = ""  # done: Checksum.value of them
    end: int = 0  # done: the position after its last row
    why: str = ""  # done: "withdrawn", or the error it failed with
    position: int = 0

    def encode(self) -> bytes:
        d = {k: v for k, v in self.__dict__.items() if k in _REQUIRED or k != "position" and v not in ("", 0)}
        return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()

    @staticmethod
    def decode(raw: bytes, position: int) -> Entry | None:
        """The entry, None for a message that is not one (another publisher on the stream); a damaged
        entry fails, naming where: skipping it could hide an attempt."""
        try:
            d = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(d, dict) or d.get("kind") not in ("claim", "run", "done"):
            return None
        try:
            return Entry(position=position, **d)
        except TypeError as e:
            raise SinkError(f"sulis sink: the journal entry ending at position {position} is damaged ({e}): "
                               f"{raw[:200]!r}") from None


#: Fields every entry carries, whatever their value.
_REQUIRED = frozenset({"kind", "query", "batch", "partition", "target", "attempt"})


@dataclass
class Attempt:
    """What the journal says of one attempt of a (query, batch, partition, target)."""

    name: str
    claim: Entry
    run: Entry | None = None
    done: Entry | None = None

    @property
    def process(self) -> str:
        return self.name.rsplit("/", 2)[0]


@dataclass
class _Tail:
    """Entries of one journal recording in ``(lo, hi]``."""

    lo: int
    hi: int
    entries: list[Entry] = field(default_factory=list)


# -- the journal ----------------------------------------------------------------------------------


class Journal:
    """The journal stream ``channel``/``stream_id`` of the archive at ``address``, as this process sees it."""

    def __init__(self, address: ArchiveAddress, channel: str, stream_id: int, replay: tuple[str, int]) -> None:
        self.address = address
        self.channel = with_term_length(channel)
        self.stream_id = stream_id
        self.replay = replay
        self._tails: dict[int, _Tail] = {}
        self._lock = threading.Lock()

    # writing

    def append(self, pub, entry: Entry, timeout: float) -> int:
        """Offers ``entry`` on this process' journal publication ``pub`` and waits until it is recorded."""
        raw = entry.encode()
        deadline = time.monotonic() + timeout
        while (pos := pub.offer(raw)) < 0:
            if time.monotonic() > deadline:
                from .. import result_name

                raise SinkTimeoutError(f"sulis sink: the journal {self.channel} stream {self.stream_id} refused "
                                   f"an entry for {timeout:.0f}s: {result_name(pos)} (is it recorded?)")
            time.sleep(0.001)
        self.await_recorded(pub.session_id, pos, deadline, "the journal entry")
        return pos

    def await_recorded(self, session_id: int, position: int, deadline: float, what: str,
                       channel: str | None = None, stream_id: int | None = None) -> None:
        """Waits until a recording of ``session_id`` on the journal (or ``channel``/``stream_id``) has
        recorded up to ``position``."""
        channel = channel or self.channel
        stream_id = self.stream_id if stream_id is None else stream_id
        ac = session(self.address).archive
        media = channel.split("?", 1)[0]
        rid = -1
        while True:
            if rid < 0:
                rid = ac.find_last_matching_recording(0, media, stream_id, session_id)
            if rid >= 0 and ac.get_recording_position(rid) >= position:
                return
            if time.monotonic() > deadline:
                state = "is not recorded" if rid < 0 else f"is recorded (recording {rid}) only to " \
                    f"{ac.get_recording_position(rid)}"
                raise SinkTimeoutError(f"sulis sink: {what} at position {position} of session {session_id} on "
                                   f"{channel} stream {stream_id} {state}: is the stream recorded by "
                                   f"{self.address.describe()}?")
            time.sleep(0.001)

    # reading

    def entries(self, query: str, batch: int) -> list[Entry]:
        """Every entry recorded now that may matter to micro-batch ``batch`` of ``query``: each journal
        recording read back at least to an entry of an earlier batch of the query (or its start)."""
        s = session(self.address)
        out: list[Entry] = []
        for d in recordings_of_stream(s, self.channel, self.stream_id):
            out.extend(self._entries_of(info_of(s, d), query, batch))
        return out

    def _entries_of(self, r: RecordingInfo, query: str, batch: int) -> list[Entry]:
        with self._lock:
            tail = self._tails.get(r.recording_id)
            if tail is None:
                tail = self._tails[r.recording_id] = _Tail(r.end, r.end)
            if r.end > tail.hi:  # what is new
                tail.entries.extend(self._read(r, tail.hi, r.end, tail.hi))
                tail.hi = r.end
            while tail.lo > r.start and not any(e.query == query and e.batch < batch for e in tail.entries):
                lo = replay_from(tail.lo - 1, r.start, r.term_length)
                tail.entries[:0] = self._read(r, lo, tail.lo, lo)
                tail.lo = lo
            if len(tail.entries) > 20000:  # keep the newest half
                cut = len(tail.entries) // 2
                tail.lo = tail.entries[cut - 1].position
                del tail.entries[:cut]
            return list(tail.entries)

    def _read(self, r: RecordingInfo, start: int, end: int, begin: int) -> list[Entry]:
        if end <= start:
            return []
        rng = RecordingRange(r.recording_id, r.stream_id, r.session_id, start, end, begin, end)
        out = []
        for b in read_range(self.address, rng, *self.replay):
            values, positions = b.column(0), b.column(4).to_numpy()
            for i in range(len(values)):
                e = Entry.decode(values[i].as_py(), int(positions[i]))
                if e is not None:
                    out.append(e)
        return out


def attempts(entries: Iterable[Entry], query: str, batch: int, partition: int, target: str) -> dict[str, Attempt]:
    """The attempts of (``query``, ``batch``, ``partition``, ``target``) in ``entries``, by name."""
    out: dict[str, Attempt] = {}
    for e in entries:
        if (e.query, e.batch, e.partition, e.target) != (query, batch, partition, target):
            continue
        if e.kind == "claim":
            out.setdefault(e.attempt, Attempt(e.attempt, e))
        elif e.attempt in out:
            setattr(out[e.attempt], e.kind, e)
    return out


def later_claim(entries: Iterable[Entry], a: Attempt) -> Entry | None:
    """The first claim (of any query or target) made after ``a``'s in ``a``'s session by its process."""
    found = None
    for e in entries:
        later = e.start > a.claim.start or (e.start == a.claim.start and e.position > a.claim.position)
        if e.kind == "claim" and e.session == a.claim.session and later \
                and e.attempt.rsplit("/", 2)[0] == a.process and (found is None or e.start < found.start):
            found = e
    return found
