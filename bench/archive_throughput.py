#!/usr/bin/env python3
"""Archive throughput: recording and replaying a stream, sulis beside Aeron Java's archive.

    python bench/archive_throughput.py            # 32 B and 1 KiB, 3 runs each (~3 min)
    python bench/archive_throughput.py --quick    # 1 run, fewer messages (smoke test)
    python bench/archive_throughput.py --lengths 1024 --media ipc --sync-levels 1,2   # synced writes
    python bench/archive_throughput.py --lengths 1024 --media ipc --sustained-gb 8    # past the page cache

Rows, each the median of ``--runs`` runs:

* sulis record: an embedded driver (shared thread) and archive record a stream published on
  ``aeron:ipc`` or on ``aeron:udp`` over loopback (``--media``) into ``--dir`` (on disk, default
  a fresh directory under the temporary directory); the publisher (Python ``offer_batch``, 1,024
  messages a call, the GIL released) publishes ``--count`` messages; the time runs from the
  first offer to the archive's recorded position reaching the end. Messages/s and MB/s of
  payload. On UDP both archives record their local publication through a spy subscription (Aeron's
  sample sets its driver's spies-simulate-connection; sulis's archive spy connects by itself).
* sulis replay: the recording replayed over IPC to a subscriber reading with ``poll_batch``
  (Rust copies, no Python object per message); from the replay request to the last message.
* Aeron record / replay: Aeron's own samples ``EmbeddedRecordingThroughput`` and
  ``EmbeddedReplayThroughput`` (an ArchivingMediaDriver in the JVM, publisher and subscriber in
  Java) on the same medium (``aeron.sample.channel``), with ``-Dagrona.disable.bounds.checks=true``
  as Aeron recommends, their archive in the same kind of directory; their printed msg/s. Aeron's
  replay sample replays over IPC, as sulis's row does.
* ``--sync-levels 1,2``: the record rows again with both archives at that ``file_sync_level``
  (and the same catalog sync level), Aeron's ``aeron.archive.file.sync.level``: every block
  written is synced before the recorded position moves on, so the disk, not the page cache,
  sets the pace. A tenth of the messages (syncs are slow).
* ``--sustained-gb N``: one more record row of N GB of 1 KiB messages over IPC: more than the
  kernel lets sit dirty in the page cache (it prints its dirty limits), so writeback throttles
  the recording to what the disk takes; the disk row is then measured with as many bytes.
* disk: sequential write speed of the same directory (1 MiB writes of ``--disk-mb`` MB, then
  fsync), to judge big-message recording against it.

The Aeron rows need ``bash bench/peers/install.sh`` (Java 17 and the current aeron-all jar).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import sulis
from sulis._benchkit import runner as r
from sulis._benchkit.loops import publish_batch
from sulis._benchkit.procs import cpu_summary, free_port, remove_dir, scratch_dir, two_free_ports
from sulis._benchkit.report import fmt_ratio, print_table
from sulis.archive import RecordingSignal

r.repository(__file__)
from bench.peers import aeron as aeron_java  # noqa: E402

BATCH = 1024


def channel_for(media: str) -> str:
    """The channel a run publishes and records on: IPC, or UDP to a free loopback port."""
    return "aeron:ipc" if media == "ipc" else f"aeron:udp?endpoint=127.0.0.1:{free_port()}"


def sulis_run(base: str, length: int, count: int, channel: str, sync_level: int = 0,
              replay: bool = True) -> tuple[float, float]:
    """One recording of ``count`` messages of ``length`` bytes on ``channel``, then one replay over
    IPC (unless not ``replay``): (record msg/s, replay msg/s)."""
    os.makedirs(base, exist_ok=True)
    shm = scratch_dir("sulis-bench-archive-")
    try:
        with sulis.MediaDriver(dir=os.path.join(shm, "driver"), threading_mode="shared",
                               term_buffer_sparse_file=True, ipc_term_buffer_length="16m") as driver, \
                sulis.Archive(os.path.join(base, "archive"), driver_dir=driver.dir,
                              segment_file_length=1 << 30, file_sync_level=sync_level,
                              catalog_file_sync_level=sync_level, low_storage_space_threshold=0) as archive, \
                sulis.Client(dir=driver.dir) as client, sulis.ArchiveClient(client) as ac:
            ac.start_recording(channel, 1001)
            pub = client.add_exclusive_publication(str(sulis.ChannelUri(channel).with_param("term-length", "16m")),
                                                   1001)
            rid = ac.await_signal(RecordingSignal.START).recording_id
            t0 = time.perf_counter()
            publish_batch(pub, bytes(length), BATCH, count=count)
            end = pub.position
            while ac.get_recording_position(rid) < end:
                time.sleep(0.0002)
            record_s = time.perf_counter() - t0
            ac.stop_recording(channel, 1001)
            ac.await_signal(RecordingSignal.STOP, rid)
            pub.close()
            if not replay:
                return count / record_s, 0.0

            t0 = time.perf_counter()
            sub = ac.replay(rid, "aeron:ipc", 2002)
            got = 0
            while got < count:
                got += len(sub.poll_batch(65536))
            replay_s = time.perf_counter() - t0
            assert archive.errors() == [], archive.errors()
        return count / record_s, count / replay_s
    finally:
        remove_dir(shm)
        shutil.rmtree(base, ignore_errors=True)


MSG_RATE = re.compile(r"([\d,]+) msg/sec")


def aeron_run(aeron: aeron_java.AeronJava, sample: str, base: str, length: int, count: int,
              channel: str, sync_level: int = 0) -> float:
    """One run of an Aeron archive sample on ``channel``: its printed msg/s."""
    os.makedirs(base, exist_ok=True)
    control, response = two_free_ports()
    shm = scratch_dir("sulis-bench-aeron-archive-")
    props = {"aeron.sample.messageLength": length, "aeron.sample.messages": count,
             "aeron.sample.channel": channel,
             "aeron.dir": os.path.join(shm, "aeron"), "aeron.dir.delete.on.start": "true",
             "aeron.archive.dir": os.path.join(base, "archive"),
             "aeron.archive.control.channel": f"aeron:udp?endpoint=localhost:{control}",
             "aeron.archive.control.response.channel": f"aeron:udp?endpoint=localhost:{response}",
             "aeron.archive.replication.channel": "aeron:udp?endpoint=localhost:0",
             "aeron.threading.mode": "SHARED", "aeron.archive.threading.mode": "SHARED",
             "aeron.archive.file.sync.level": sync_level, "aeron.archive.catalog.file.sync.level": sync_level,
             "agrona.disable.bounds.checks": "true"}
    try:
        out = subprocess.run(aeron_java.command(aeron, props, f"io.aeron.samples.archive.{sample}"),
                             input="n\n", capture_output=True, text=True, timeout=300)
        rates = MSG_RATE.findall(out.stdout)
        if not rates:
            raise RuntimeError(f"{sample} printed no rate:\n{out.stdout[-1500:]}{out.stderr[-1500:]}")
        return float(rates[-1].replace(",", ""))
    finally:
        remove_dir(shm)
        shutil.rmtree(base, ignore_errors=True)


def measure(a, aeron, why: str, top: str, length: int, media: str, level: int, count: int,
            label: str | None = None, replay: bool = True) -> list[list[str]]:
    """``a.runs`` runs of each system, sulis and Aeron alternating, the one that goes first
    alternating too (the first writes of a run may meet a disk that is slower to allocate); the
    rows of their medians. Every run starts with the page cache's dirty pages written back."""
    med = statistics.median
    sulis_rec, sulis_rep, aeron_rec, aeron_rep = [], [], [], []
    replay = replay and media == "ipc" and level == 0

    def run_sulis(run: int) -> None:
        base = os.path.join(top, f"sulis-{length}-{media}-{level}-{run}")
        rec, rep = sulis_run(base, length, count, channel_for(media), level, replay)
        sulis_rec.append(rec)
        sulis_rep.append(rep)

    def run_aeron(run: int) -> None:
        base = os.path.join(top, f"aeron-{length}-{media}-{level}-{run}")
        aeron_rec.append(aeron_run(aeron, "EmbeddedRecordingThroughput", base, length, count,
                                   channel_for(media), level))
        if replay:
            aeron_rep.append(aeron_run(aeron, "EmbeddedReplayThroughput", base, length, count,
                                       channel_for(media)))

    for run in range(a.runs):
        order = [run_sulis, run_aeron] if aeron else [run_sulis]
        for go in order if run % 2 == 0 else reversed(order):
            os.sync()
            go(run)
    synced = f", file_sync_level {level}" if level else ""
    measured = [(label or f"record {length} B {media}{synced}", sulis_rec, aeron_rec)]
    if replay:
        measured.append((f"replay {length} B to ipc", sulis_rep, aeron_rep))
    rows = []
    runs = lambda xs: ", ".join(f"{x / 1e6:.2f}" for x in xs)  # noqa: E731
    for name, s_, j in measured:
        ratio = med(s_) / med(j) if j else None
        rows.append([name, f"{med(s_) / 1e6:.2f} M/s", f"{med(s_) * length / 1e6:.0f} MB/s",
                     f"{med(j) / 1e6:.2f} M/s" if j else f"skipped: {why}",
                     f"{med(j) * length / 1e6:.0f} MB/s" if j else "", fmt_ratio(ratio),
                     runs(s_) + (f" | {runs(j)}" if j else "")])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--count", type=int, default=0, help="messages per run [default 5M for 32 B, 500k for 1 KiB]")
    ap.add_argument("--lengths", default="32,1024", help="message lengths, comma separated")
    ap.add_argument("--dir", default=None, help="where recordings go (a disk, not tmpfs) [default: a temp dir]")
    ap.add_argument("--disk-mb", type=int, default=1024)
    ap.add_argument("--media", default="ipc,udp", help="what the recorded stream travels on: ipc, udp or both")
    ap.add_argument("--quick", action="store_true", help="one run of fewer messages")
    ap.add_argument("--sync-levels", default="0",
                    help="file sync levels of the record rows, comma separated (1 and 2: synced writes)")
    ap.add_argument("--sustained-gb", type=float, default=0,
                    help="also record this many GB of 1 KiB messages over IPC (past the page cache)")
    a = ap.parse_args()
    r.require_release_build()
    if a.quick:
        a.runs, a.disk_mb = 1, 256
    top = a.dir or tempfile.mkdtemp(prefix="sulis-bench-archive-")
    why = ""
    try:
        aeron = aeron_java.find("current")
    except aeron_java.Missing as e:
        aeron, why = None, str(e)
    print(f"[archive] {cpu_summary()}; recordings in {top}")
    rows: list[list[str]] = []
    for length in (int(x) for x in a.lengths.split(",") if x):
        count = a.count or (5_000_000 if length <= 64 else 500_000)
        if a.quick:
            count //= 5
        for media in a.media.split(","):
            for level in (int(x) for x in a.sync_levels.split(",")):
                rows += measure(a, aeron, why, top, length, media, level,
                                count if level == 0 else max(count // 10, 10_000))
    disk = None
    if a.sustained_gb:
        # Measured first: as many bytes as a sustained run writes, which also has the disk
        # allocate them before either system's runs.
        a.disk_mb = max(a.disk_mb, int(a.sustained_gb * 1000))
        disk = r.disk_mb_s(os.path.join(top, "disk"), a.disk_mb)
        dirty = r.dirty_limits()
        print(f"[archive] sustained: {a.sustained_gb:g} GB; page cache dirty limits {dirty}, "
              f"memory {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB")
        count = int(a.sustained_gb * 1e9 / 1024)
        rows += measure(a, aeron, why, top, 1024, "ipc", 0, count,
                        label=f"record 1 KiB ipc, {a.sustained_gb:g} GB sustained", replay=False)
    if disk is None:
        disk = r.disk_mb_s(os.path.join(top, "disk"), a.disk_mb)
    print_table(["row", "sulis", "sulis payload", "Aeron 1.5x", "Aeron payload", "sulis/Aeron",
                   "runs, M/s (sulis | Aeron)"],
                  rows)
    print(f"disk sequential write (1 MiB writes + fsync, {a.disk_mb} MB): {disk:.0f} MB/s")
    if not a.dir:
        shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(r.main_guard(main))
