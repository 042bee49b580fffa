#!/usr/bin/env python3
"""What one durable append costs the disk: small appends to a segment file, each followed by fdatasync, as a
recording at ``file_sync_level`` 1 does them, the file laid out three ways.

    python bench/segment_sync.py                    # in /tmp, 2,000 appends of 128 bytes each way, 3 rounds
    python bench/segment_sync.py --busy 2                   # with the cores taken
    python bench/segment_sync.py --dir /data --appends 5000 --length 4096

* **sparse**: a file of the segment's length made with ``ftruncate`` (holes), as the archive made every
  segment before: each append lands in a hole, so each fdatasync also commits the new block's allocation to the
  file system's journal.
* **ahead**: the same file, zeros written (and their writeback started) a 1 MiB step ahead of the appends
  whenever they come within half a step, after an append's sync, as a syncing recording now does
  (``sulis_archive::segment::SYNC_ZERO_AHEAD``): each fdatasync flushes data only.
* **fallocate**: the file's blocks reserved with ``posix_fallocate`` (unwritten extents; etcd's WAL does this).

``--busy N`` runs N busy loops beside it (``while True: pass``): a machine whose cores are taken, as a cluster's
members take them. The journal commit a sparse append's sync needs is the file system's own thread's work
(jbd2), which then waits for a core; the zeros' syncs need none.

Prints each layout's fdatasync latency (p50, p90, p99, p99.9, max, in µs) per round and the median over the
rounds. The disk, not the page cache, is what is measured: each sync waits for it. Nothing else should use the
disk meanwhile; the VM's disk is shared and noisy, so compare rows of one run.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

SEGMENT = 128 << 20
STEP = 1 << 20
_LIBC = ctypes.CDLL(None, use_errno=True)
SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> None:
    """``sync_file_range(SYNC_FILE_RANGE_WRITE)``: starts writing the range back, without waiting (not in ``os``)."""
    _LIBC.sync_file_range(fd, ctypes.c_int64(offset), ctypes.c_int64(length), ctypes.c_uint(SYNC_FILE_RANGE_WRITE))


def appends(path: str, layout: str, count: int, length: int) -> list[float]:
    """fdatasync latencies (µs) of ``count`` appends of ``length`` bytes to a new segment laid out as ``layout``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if layout == "fallocate":
            os.posix_fallocate(fd, 0, SEGMENT)
        else:
            os.ftruncate(fd, SEGMENT)
        os.fsync(fd)
        zeros, written_to, data = bytes(STEP), 0, b"x" * length
        took = []
        for i in range(count):
            end = (i + 1) * length
            os.pwrite(fd, data, i * length)
            t = time.perf_counter_ns()
            os.fdatasync(fd)
            took.append((time.perf_counter_ns() - t) / 1000)
            if layout == "ahead" and written_to < end + STEP // 2:
                start = max(written_to, end)
                os.pwrite(fd, zeros[:end + STEP - start], start)
                start_writeback(fd, start, end + STEP - start)
                written_to = end + STEP
        return took
    finally:
        os.close(fd)
        os.remove(path)


def figures(took: list[float]) -> list[float]:
    s = sorted(took)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return [at(0.5), at(0.9), at(0.99), at(0.999), s[-1]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp", help="a directory on the disk to measure (not tmpfs)")
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--length", type=int, default=128, help="bytes per append (a small cluster log entry: 128)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="busy loops beside it for the whole run")
    a = ap.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    try:
        measure(a)
    finally:
        for p in busy:
            p.kill()
            p.wait()


def measure(a: argparse.Namespace) -> None:
    layouts = ("sparse", "ahead", "fallocate")
    rows: dict[str, list[list[float]]] = {k: [] for k in layouts}
    with tempfile.TemporaryDirectory(dir=a.dir, prefix="sulis-segment-sync-") as d:
        for r in range(a.rounds):
            for layout in layouts:  # interleaved: the disk's mood changes from minute to minute
                f = figures(appends(os.path.join(d, layout), layout, a.appends, a.length))
                rows[layout].append(f)
                print(f"round {r + 1} {layout:9s} " + " ".join(f"{x:9.0f}" for x in f), flush=True)
    print(f"\nfdatasync after a {a.length}-byte append, µs, median of {a.rounds} rounds of {a.appends} "
          f"(in {a.dir}; {a.busy} busy loops beside)")
    print(f"{'layout':9s} {'p50':>9s} {'p90':>9s} {'p99':>9s} {'p99.9':>9s} {'max':>9s}")
    for layout in layouts:
        med = [statistics.median(col) for col in zip(*rows[layout], strict=True)]
        print(f"{layout:9s} " + " ".join(f"{x:9.0f}" for x in med))


if __name__ == "__main__":
    main()
