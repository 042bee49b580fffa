"""The exactly-once sink's journal entries and checksums (python/sulis/spark/journal.py), without an archive."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from sulis.spark.journal import Attempt, Checksum, Entry, attempts, later_claim, with_term_length  # noqa: E402


def test_entries_round_trip_with_zero_batch_and_partition():
    e = Entry("done", "q", 0, 0, "key", "h:1:ab/7/0", skip=0, count=12, crc="0011", end=4096, why="withdrawn")
    back = Entry.decode(e.encode(), 512)
    assert back == Entry("done", "q", 0, 0, "key", "h:1:ab/7/0", skip=0, count=12, crc="0011", end=4096,
                         why="withdrawn", position=512)


def test_other_messages_are_not_entries_and_a_damaged_entry_fails_naming_its_position():
    assert Entry.decode(b"\x00\x01 not json", 32) is None
    assert Entry.decode(b'{"some": "other json"}', 32) is None
    with pytest.raises(RuntimeError, match="journal entry ending at position 96 is damaged"):
        Entry.decode(b'{"kind": "claim", "query": "q"}', 96)


def test_a_checksum_does_not_depend_on_how_rows_are_cut_into_batches():
    values = pa.array([b"a", b"", b"bcd" * 50, b"e", b"fg"], pa.binary())
    whole = Checksum()
    whole.update(values)
    pieces = Checksum()
    for lo, hi in ((0, 2), (2, 3), (3, 5)):
        pieces.update(values.slice(lo, hi - lo))
    assert (pieces.value, pieces.count) == (whole.value, 5)
    as_strings = Checksum()
    as_strings.update(pa.array(["a", "", "bcd" * 50, "e", "fg"]))
    assert as_strings.value == whole.value
    # The same bytes cut into other rows, or in another order, differ.
    other = Checksum()
    other.update(pa.array([b"a", b"bcd" * 50, b"", b"e", b"fg"], pa.binary()))
    moved = Checksum()
    moved.update(pa.array([b"ab", b"cd" + b"bcd" * 49, b"e", b"fg", b""], pa.binary()))
    assert len({whole.value, other.value, moved.value}) == 3


def test_attempts_and_the_claim_that_ends_a_dead_attempts_run():
    def claim(name, session, start, position, batch=3, partition=1):
        return Entry("claim", "q", batch, partition, "t", name, session=session, start=start, position=position)

    a = claim("h:1:x/5/0", 9, 1000, 100)
    entries = [a, Entry("run", "q", 3, 1, "t", "h:1:x/5/0", skip=0, position=150),
               claim("h:2:y/6/0", 11, 0, 160),  # another process
               claim("h:1:x/8/0", 9, 1000, 170, partition=2),  # the same process' next task, nothing published
               claim("h:1:x/9/0", 9, 5000, 200, batch=4)]
    found = attempts(entries, "q", 3, 1, "t")
    assert set(found) == {"h:1:x/5/0", "h:2:y/6/0"}
    assert isinstance(found["h:1:x/5/0"], Attempt) and found["h:1:x/5/0"].run is not None
    # The next claim in the same session by the same process ends the run, even at the same position.
    assert later_claim(entries, found["h:1:x/5/0"]) is entries[3]
    assert later_claim(entries, found["h:2:y/6/0"]) is None


def test_the_journal_publication_gets_a_small_term_unless_it_names_one():
    assert with_term_length("aeron:ipc") == "aeron:ipc?term-length=65536"
    assert with_term_length("aeron:udp?endpoint=h:1") == "aeron:udp?endpoint=h:1|term-length=65536"
    assert with_term_length("aeron:ipc?term-length=1m") == "aeron:ipc?term-length=1m"
