#!/usr/bin/env python3
"""An IPC demo of sulis' API: an embedded media driver, a second process, throughput and latency.

    python examples/ipc_demo.py [--messages N] [--size BYTES] [--round-trips N] [--dir DIR]

(``bash scripts/demo.sh --ipc`` runs it.) This process starts a media driver and publishes;
``--role echo`` (started here as a second process) subscribes through the same driver. Phase 1
offers ``--messages`` messages one ``offer`` at a time while the other process drains them with
``poll_batch`` and reports its receive rate. Phase 2 is a ping-pong: each message is echoed back and
its round trip recorded in an HdrHistogram (``pip install 'sulis[bench]'``). ``sulis bench`` measures
the same with more care (runs, warm-up, peers beside it).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import sulis

CHANNEL, STREAM, PING, PONG = "aeron:ipc", 1001, 1002, 1003


def echo(dir: str, messages: int, pings: int) -> None:
    """The second process: counts the stream (timed from its first message), then echoes pings."""
    with sulis.Client(dir=dir) as client:
        sub = client.add_subscription(CHANNEL, STREAM)
        ping_sub, pong = client.add_subscription(CHANNEL, PING), client.add_exclusive_publication(CHANNEL, PONG)
        print(json.dumps({"ready": True}), flush=True)
        received = len(sub.poll_batch(4096))
        while not received:
            received = len(sub.poll_batch(4096))
        t0 = time.perf_counter()
        while received < messages:
            received += len(sub.poll_batch(4096))
        print(json.dumps({"messages_per_s": (messages - 1) / (time.perf_counter() - t0)}), flush=True)

        def back(buffer, _header) -> None:
            while pong.offer(buffer) < 0:  # back pressure: offer again
                pass

        echoed = 0
        while echoed < pings:
            echoed += ping_sub.poll(back, 16)


def connected(*ends, child: subprocess.Popen) -> None:
    deadline = time.monotonic() + 10
    while not all(e.is_connected for e in ends):
        if child.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"the echo process did not connect (exit status {child.poll()})")
        time.sleep(0.001)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=2_000_000, help="messages in the throughput phase (2,000,000)")
    ap.add_argument("--size", type=int, default=32, help="message size in bytes (32)")
    ap.add_argument("--round-trips", type=int, default=100_000, help="round trips in the latency phase (100,000)")
    ap.add_argument("--dir", default=None, help="driver directory (default: a fresh one under /dev/shm)")
    ap.add_argument("--role", default="main", help=argparse.SUPPRESS)
    a = ap.parse_args()
    warmup = min(10_000, a.round_trips)
    if a.role == "echo":
        echo(a.dir, a.messages, warmup + a.round_trips)
        return 0
    from hdrh.histogram import HdrHistogram

    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    directory = a.dir or tempfile.mkdtemp(prefix="sulis-demo-", dir=shm)
    with sulis.MediaDriver(dir=directory, threading_mode="shared", idle_strategy="backoff",
                           ipc_term_buffer_length="16m", dir_delete_on_shutdown=True) as driver, \
            sulis.Client(dir=driver.dir) as client:
        print(f"sulis IPC demo: driver in {driver.dir}, {a.messages:,} messages of {a.size} B, {a.round_trips:,} "
              f"round trips (sulis {sulis.__version__}, {sulis.build_profile} build)")
        child = subprocess.Popen([sys.executable, __file__, "--role", "echo", "--dir", driver.dir, "--messages",
                                  str(a.messages), "--round-trips", str(a.round_trips)], stdout=subprocess.PIPE,
                                 text=True)
        try:
            assert child.stdout is not None and json.loads(child.stdout.readline())["ready"]
            pub = client.add_exclusive_publication(CHANNEL, STREAM)
            if not 0 < a.size <= pub.max_payload_length:
                sys.exit(f"--size: 1 to {pub.max_payload_length} bytes, one frame a message (sulis bench takes more)")
            connected(pub, child=child)
            payload, t0 = bytes(a.size), time.perf_counter()
            for _ in range(a.messages):
                while pub.offer(payload) < 0:  # BACK_PRESSURED: the subscriber is a term behind
                    pass
            sent = a.messages / (time.perf_counter() - t0)
            received = json.loads(child.stdout.readline())["messages_per_s"]
            print(f"throughput: offered {sent:,.0f} msgs/s; received {received:,.0f} msgs/s "
                  f"({received * a.size / 1e6:,.1f} MB/s of payload) in the other process")

            ping, pong = client.add_exclusive_publication(CHANNEL, PING), client.add_subscription(CHANNEL, PONG)
            connected(ping, pong, child=child)
            hist = HdrHistogram(1, 60_000_000_000, 3)
            got = [0]

            def arrived(_buffer, _header) -> None:
                got[0] += 1

            for i in range(warmup + a.round_trips):
                t0_ns = time.perf_counter_ns()
                while ping.offer(payload) < 0:
                    pass
                while not pong.poll(arrived, 1):
                    pass
                if i >= warmup:
                    hist.record_value(time.perf_counter_ns() - t0_ns)
            print(f"round trip over {a.round_trips:,} messages (µs):")
            for p in (50.0, 90.0, 99.0, 99.9, 99.99):
                print(f"  p{p:<6} {hist.get_value_at_percentile(p) / 1000:10.2f}")
            print(f"  max     {hist.get_max_value() / 1000:10.2f}")
            child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
