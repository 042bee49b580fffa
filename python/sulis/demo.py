"""End-to-end IPC demo: an embedded driver, two processes, throughput and latency.

``sulis demo`` starts a media driver in this process and a second Python
process that subscribes. Phase 1 streams ``messages`` messages one ``offer``
at a time; the other process drains them with ``poll_batch`` and reports its
receive rate. Phase 2 is a ping-pong: each message is echoed back and the
round trip is recorded in an HdrHistogram.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from . import Client, MediaDriver, build_profile

THROUGHPUT_STREAM = 1001
PING_STREAM = 1002
PONG_STREAM = 1003
CHANNEL = "aeron:ipc"


def _await(cond, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.001)


def _echo_role(dir: str, messages: int) -> int:
    """The second process: count the throughput stream, then echo pings."""
    with Client(dir=dir) as client:
        sub = client.add_subscription(CHANNEL, THROUGHPUT_STREAM)
        ping = client.add_subscription(CHANNEL, PING_STREAM)
        pong = client.add_exclusive_publication(CHANNEL, PONG_STREAM)
        print(json.dumps({"ready": True}), flush=True)
        received = 0
        first = last = 0
        while received < messages:
            batch = sub.poll_batch(4096)
            n = len(batch)
            if n:
                now = time.perf_counter_ns()
                if received == 0:
                    first = now
                received += n
                last = now
        secs = max(last - first, 1) / 1e9
        print(json.dumps({"received": received, "seconds": secs}), flush=True)

        def echo(buffer, _header):
            while pong.offer(buffer) < 0:
                pass

        done = False
        while not done:
            ping.poll(echo, 10)
            if ping.images and ping.images[0].is_end_of_stream:
                done = True
    return 0


def run(messages: int = 2_000_000, size: int = 32, round_trips: int = 100_000, dir: str | None = None) -> int:
    """Runs the demo; prints throughput and a latency histogram. Returns an exit code."""
    from hdrh.histogram import HdrHistogram

    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    dir = dir or tempfile.mkdtemp(prefix="sulis-demo-", dir=base)
    print(f"sulis demo: driver dir {dir}, {messages:,} messages of {size} B, {round_trips:,} round trips"
          f" ({build_profile} build)")
    with MediaDriver(dir=dir, threading_mode="shared", idle_strategy="backoff",
                     ipc_term_buffer_length="16m", dir_delete_on_shutdown=True) as driver:
        with Client(dir=driver.dir) as client:
            child = subprocess.Popen(
                [sys.executable, "-m", "sulis.demo", "--role", "echo", "--dir", driver.dir,
                 "--messages", str(messages)],
                stdout=subprocess.PIPE, text=True,
            )
            try:
                assert json.loads(child.stdout.readline())["ready"]
                pub = client.add_exclusive_publication(CHANNEL, THROUGHPUT_STREAM)
                _await(lambda: pub.is_connected, "the subscriber process")
                payload = bytes(size)
                offer = pub.offer
                start = time.perf_counter_ns()
                sent = 0
                while sent < messages:
                    if offer(payload) >= 0:
                        sent += 1
                elapsed = (time.perf_counter_ns() - start) / 1e9
                result = json.loads(child.stdout.readline())
                rx_rate = result["received"] / result["seconds"]
                print(f"throughput: sent {sent / elapsed:,.0f} msgs/s; received {rx_rate:,.0f} msgs/s"
                      f" ({rx_rate * size / 1e6:,.1f} MB/s payload) in the other process")

                ping = client.add_exclusive_publication(CHANNEL, PING_STREAM)
                pong = client.add_subscription(CHANNEL, PONG_STREAM)
                _await(lambda: ping.is_connected and pong.is_connected, "the echo process")
                hist = HdrHistogram(1, 10_000_000_000, 3)
                got = [0]

                def on_pong(_buffer, _header):
                    got[0] += 1

                warmup = min(10_000, round_trips)
                msg = bytes(size)
                for i in range(warmup + round_trips):
                    t0 = time.perf_counter_ns()
                    while ping.offer(msg) < 0:
                        pass
                    target = got[0] + 1
                    while got[0] < target:
                        pong.poll(on_pong, 1)
                    if i >= warmup:
                        hist.record_value(time.perf_counter_ns() - t0)
                ping.close()
                print(f"round trip latency over {round_trips:,} messages (µs):")
                for p in (50.0, 90.0, 99.0, 99.9, 99.99, 100.0):
                    print(f"  p{p:<6} {hist.get_value_at_percentile(p) / 1000:10.2f}")
                child.wait(timeout=30)
            finally:
                if child.poll() is None:
                    child.kill()
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="main")
    ap.add_argument("--dir")
    ap.add_argument("--messages", type=int, default=2_000_000)
    a = ap.parse_args()
    if a.role == "echo":
        sys.exit(_echo_role(a.dir, a.messages))
    sys.exit(run(messages=a.messages, dir=a.dir))
