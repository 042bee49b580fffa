"""The benchmark loops' pieces that must agree with their native and Java twins."""

from __future__ import annotations

from sulis._benchkit.loops import mixed_length


def test_the_mixed_sequence_is_the_one_sulis_bench_and_aeron_peer_repeat():
    # The same values as crates/sulis-bench's test of mixed_length (AeronPeer.mixedLength: the formula).
    assert [mixed_length(i) for i in range(4)] == [8, 898, 419, 1309]
    assert mixed_length(99) == 4096 and mixed_length(699) == 256 * 1024
    lengths = [mixed_length(i) for i in range(100_000)]
    assert 1300 <= sum(lengths) // len(lengths) < 1500
    assert sum(n > 1376 for n in lengths) == 1000, "1 % larger than an MTU's payload"
