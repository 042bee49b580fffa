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
import shutil
import subprocess
import sys
import tempfile
import time

from . import Client, MediaDriver, build_profile
from ._benchkit import Watchdog, await_until, echo, histogram, pct_key, ping, publish, receive, summarize

THROUGHPUT_STREAM = 1001
PING_STREAM = 1002
PONG_STREAM = 1003
CHANNEL = "aeron:ipc"


def _echo_role(dir: str, messages: int, pings: int) -> int:
    """The second process: count the throughput stream, then echo ``pings`` pings."""
    with Client(dir=dir) as client:
        sub = client.add_subscription(CHANNEL, THROUGHPUT_STREAM)
        ping_sub = client.add_subscription(CHANNEL, PING_STREAM)
        pong = client.add_exclusive_publication(CHANNEL, PONG_STREAM)
        print(json.dumps({"ready": True}), flush=True)
        result = receive(sub, messages, stalled=Watchdog("receiving the stream"))
        print(json.dumps(result), flush=True)
        echo(ping_sub, pong, pings, stalled=Watchdog("echoing pings"))
    return 0


def run(messages: int = 2_000_000, size: int = 32, round_trips: int = 100_000, dir: str | None = None) -> int:
    """Runs the demo; prints throughput and a latency histogram. Returns an exit code."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fresh = dir is None
    dir = dir or tempfile.mkdtemp(prefix="sulis-demo-", dir=base)
    print(f"sulis demo: driver dir {dir}, {messages:,} messages of {size} B, {round_trips:,} round trips"
          f" ({build_profile} build)")
    warmup = min(10_000, round_trips)
    try:
        embedded = MediaDriver(dir=dir, threading_mode="shared", idle_strategy="backoff",
                               ipc_term_buffer_length="16m", dir_delete_on_shutdown=True)
    except BaseException:
        if fresh:  # a bad SULIS_* setting, say: leave no empty directory behind
            shutil.rmtree(dir, ignore_errors=True)
        raise
    with embedded as driver:
        with Client(dir=driver.dir) as client:
            child = subprocess.Popen(
                [sys.executable, "-m", "sulis.demo", "--role", "echo", "--dir", driver.dir,
                 "--messages", str(messages), "--pings", str(warmup + round_trips)],
                stdout=subprocess.PIPE, text=True,
            )
            replies = child.stdout
            assert replies is not None

            def stalled(_progress=None) -> None:
                if child.poll() is not None:
                    raise RuntimeError(f"the echo process exited ({child.returncode})")

            try:
                assert json.loads(replies.readline())["ready"]
                pub = client.add_exclusive_publication(CHANNEL, THROUGHPUT_STREAM)
                await_until(lambda: pub.is_connected, "the subscriber process", stalled=stalled)
                start = time.perf_counter_ns()
                sent, _refused = publish(pub, bytes(size), messages, stalled=Watchdog("publishing", alive=stalled))
                elapsed = (time.perf_counter_ns() - start) / 1e9
                result = json.loads(replies.readline())
                rx_rate = result["timed_messages"] / result["seconds"] if result["seconds"] else float("nan")
                print(f"throughput: sent {sent / elapsed:,.0f} msgs/s; received {rx_rate:,.0f} msgs/s"
                      f" ({rx_rate * size / 1e6:,.1f} MB/s payload) in the other process")

                ping_pub = client.add_exclusive_publication(CHANNEL, PING_STREAM)
                pong = client.add_subscription(CHANNEL, PONG_STREAM)
                await_until(lambda: ping_pub.is_connected and pong.is_connected, "the echo process", stalled=stalled)
                samples = ping(ping_pub, pong, bytes(size), warmup, round_trips,
                               stalled=Watchdog("waiting for echoes", alive=stalled))
                ping_pub.close()
                figures = summarize(histogram(samples))
                print(f"round trip latency over {round_trips:,} messages (µs):")
                for p in (50.0, 90.0, 99.0, 99.9, 99.99):
                    print(f"  p{p:<6} {figures[pct_key(p)]:10.2f}")
                print(f"  p{100.0:<6} {figures['max_us']:10.2f}")
                child.wait(timeout=30)
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="main")
    ap.add_argument("--dir")
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--pings", type=int, default=110_000)
    a = ap.parse_args()
    if a.role == "echo":
        sys.exit(_echo_role(a.dir, a.messages, a.pings))
    sys.exit(run(messages=a.messages, dir=a.dir))
