"""The streaming offset's text is one text per offset whichever implementation of the source wrote it: PySpark
writes ``json.dumps`` of the Python reader's dict, the JVM reader writes ``sulis_spark``'s text, and Spark compares
offsets (and a restarted query reads its checkpoint) by that text."""

from __future__ import annotations

import json
import random

import pytest

from sulis import _native
from sulis.spark.stream_reader import Finished, finished_of, from_offset, stopped_of, to_offset


def test_pyspark_text_of_the_python_readers_offset_is_the_native_text():
    rng = random.Random(7)
    for _ in range(2000):
        positions = {rng.randrange(0, 10**9): rng.randrange(0, 10**15) for _ in range(rng.randint(0, 5))}
        stopped = {rng.randrange(0, 10**9): rng.randrange(0, 10**15) for _ in range(rng.randint(0, 3))}
        pieces = rng.choice([None, rng.randint(1, 64)])
        finished = rng.choice([Finished(), Finished(rng.randint(1, 10**6), rng.randint(-1, 10**13))])
        offset = to_offset(positions, stopped, pieces, finished)
        native = _native.spark_offset_json(positions, stopped, pieces, finished.below, finished.stopped_by)
        assert json.dumps(offset) == native
        assert list(offset)[:len(positions)] == [str(k) for k in sorted(positions)]
        assert (from_offset(offset), stopped_of(offset), finished_of(offset)) == (positions, stopped, finished)


def test_offsets_from_before_the_newer_keys_and_damaged_ones():
    assert (from_offset({"3": 64}), stopped_of({"3": 64}), finished_of({"3": 64})) == ({3: 64}, {}, Finished())
    assert finished_of(None) == Finished()
    with pytest.raises(ValueError, match="position of recording 3 is not an integer"):
        from_offset({"3": "x"})
