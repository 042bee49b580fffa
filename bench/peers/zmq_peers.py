#!/usr/bin/env python3
"""pyzmq as a benchmark peer for sulis: the same Python-level work a sulis user does.

* ``push_pull_throughput``: a PUSH socket in one process sends messages of *size*
  bytes, one ``send`` call (one ZeroMQ frame) per message, until told to stop; a
  PULL socket in another process receives them with one ``recv`` call each.
  Throughput is counted at the receiver per one-second interval from its first
  message, as for sulis: the first interval is warm-up and left out, the figure is
  the median of the next ``duration_s - 1`` intervals.
* ``req_rep_latency``: a REQ client in one process and an echoing REP server in
  another; each round trip (``send`` + ``recv`` of *size* bytes) is timed with
  ``time.perf_counter_ns`` and recorded in an HdrHistogram (ns, 3 significant digits).

Both run in child processes started with the ``spawn`` method (so the caller's
threads and ZeroMQ contexts are never forked) and use only ``ipc://`` endpoints
under a fresh temporary directory or ``tcp://127.0.0.1`` on a free port.

CLI::

    python bench/peers/zmq_peers.py pushpull --duration 6 --transport ipc --runs 3
    python bench/peers/zmq_peers.py reqrep --n 100000 --transport tcp
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench._common import (  # noqa: E402
    LATENCY_KEYS, Skip, count_intervals_each, encode_samples, hdr_percentiles, print_intervals,
)
from bench.peers._shared import print_summary  # noqa: E402
from sulis._child import die_with_parent  # noqa: E402

__all__ = ["push_pull_throughput", "req_rep_latency", "throughput_run", "latency_run"]

_TRANSPORTS = ("ipc", "tcp")


@contextlib.contextmanager
def _endpoint_base(transport: str) -> Iterator[str]:
    """``ipc://<tmp>/sulis-bench-zmq-<pid>-XXXX/`` prefix or ``tcp://127.0.0.1``; removes the directory after."""
    if transport not in _TRANSPORTS:
        raise ValueError(f"transport must be one of {_TRANSPORTS}, not {transport!r}")
    if transport == "tcp":
        yield "tcp://127.0.0.1"
        return
    d = tempfile.mkdtemp(prefix=f"sulis-bench-zmq-{os.getpid()}-")
    try:
        yield f"ipc://{d}/"
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def _child_socket(kind: str, result_q, linger: int = 0):
    """In a child process (which gets SIGTERM when its parent dies): a ``kind``
    socket (``"PULL"``...) in a context of its own, as ``(zmq, socket)``. An
    exception in the block is reported on ``result_q`` (the parent must not
    hang); the socket is closed with ``linger`` ms and the context ended."""
    die_with_parent()  # no sender left running if the orchestrator is killed
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(getattr(zmq, kind))
    try:
        yield zmq, sock
    except Exception as exc:  # report, do not hang the parent
        result_q.put({"error": f"{kind}: {exc!r}"})
    finally:
        sock.close(linger=linger)
        ctx.term()


def _bind(sock, base: str, name: str) -> str:
    """Bind to ``base + name`` (ipc) or a free loopback port (tcp); return the real endpoint."""
    import zmq

    if base.startswith("tcp://"):
        sock.bind_to_random_port(base)
    else:
        sock.bind(base + name + ".sock")
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


# ----------------------------------------------------------------- PUSH/PULL children

def _pull_main(base: str, duration_s: float, timeout_ms: int, endpoint_q, result_q) -> None:
    with _child_socket("PULL", result_q) as (zmq, sock):
        endpoint_q.put(_bind(sock, base, "pushpull"))
        sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
        intervals = []
        try:
            first = sock.recv()
            count = count_intervals_each(sock.recv, duration_s, intervals.append)
        except zmq.Again:
            result_q.put({"error": f"PULL timed out after {timeout_ms} ms without a message"})
            return
        result_q.put({"intervals": intervals, "received": count, "size": len(first)})


def _push_main(endpoint: str, size: int, stop, result_q) -> None:
    with _child_socket("PUSH", result_q) as (zmq, sock):
        # A send that waits for room (HWM) gives up after 100 ms so that the stop
        # event is seen even when the receiver no longer reads.
        sock.setsockopt(zmq.SNDTIMEO, 100)
        sock.connect(endpoint)
        msg = b"\x5a" * size
        send = sock.send
        sent = 0
        rng = range(4096)
        while not stop.is_set():
            try:
                for _ in rng:  # one frame per message: no batching by us
                    send(msg)
                    sent += 1
            except zmq.Again:
                continue
        result_q.put({"sent": sent})


def _get(q, timeout_s: float, what: str, procs) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return q.get(timeout=0.2)
        except Exception:  # queue.Empty
            if time.monotonic() > deadline:
                raise TimeoutError(f"no result from {what} in {timeout_s}s") from None
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{dead[0].name} died with exit code {dead[0].exitcode}")


def _reap(*procs, timeout_s: float = 10.0) -> None:
    for p in procs:
        p.join(timeout_s)
        if p.is_alive():
            p.terminate()
            p.join(3.0)
        if p.is_alive():
            p.kill()
            p.join(5.0)


def push_pull_throughput(duration_s: float = 6.0, size: int = 32, transport: str = "ipc",
                         timeout_s: float = 60.0) -> dict:
    """pyzmq PUSH -> PULL across two processes; msgs/s per one-second interval at the receiver.

    ``msgs_per_s`` is the median of the intervals after the first (warm-up), as
    for sulis and Aeron; ``samples`` holds every interval's rate, warm-up first.
    """
    import zmq

    if duration_s < 2.5:
        raise ValueError("duration_s must be at least 2.5 (one warm-up interval plus measured ones)")
    ctx = mp.get_context("spawn")
    endpoint_q, result_q, send_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    stop = ctx.Event()
    timeout_ms = int(timeout_s * 1000)
    with _endpoint_base(transport) as base:
        pull = ctx.Process(target=_pull_main, name="zmq-PULL", args=(base, duration_s, timeout_ms, endpoint_q, result_q))
        pull.start()
        push = None
        try:
            endpoint = _get(endpoint_q, 60.0, "PULL bind", [pull])
            push = ctx.Process(target=_push_main, name="zmq-PUSH", args=(endpoint, size, stop, send_q))
            push.start()
            recv_res = _get(result_q, timeout_s + duration_s + 60.0, "PULL", [pull, push])
            stop.set()
            send_res = _get(send_q, 30.0, "PUSH", [push])
        finally:
            stop.set()
            _reap(*(p for p in (push, pull) if p is not None))
    for r in (recv_res, send_res):
        if "error" in r:
            raise RuntimeError(r["error"])
    samples = [i["messages"] / i["interval_s"] for i in recv_res["intervals"]]
    if len(samples) < 2:
        raise RuntimeError(f"PULL reported {len(samples)} intervals")
    return {
        "msgs_per_s": statistics.median(samples[1:]),
        "samples": samples,
        "peer": f"pyzmq PUSH/PULL {transport}",
        "duration_s": duration_s,
        "size": size,
        "received": recv_res["received"],
        "sent": send_res["sent"],
        "endpoint": endpoint,
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
    }


# ----------------------------------------------------------------- REQ/REP children

def _rep_main(base: str, total: int, timeout_ms: int, endpoint_q, result_q) -> None:
    with _child_socket("REP", result_q, linger=1000) as (zmq, sock):
        endpoint_q.put(_bind(sock, base, "reqrep"))
        sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
        recv, send = sock.recv, sock.send
        for _ in range(total):
            send(recv())
        result_q.put({"served": total})


def _req_main(endpoint: str, n: int, warmup: int, size: int, timeout_ms: int, result_q) -> None:
    with _child_socket("REQ", result_q) as (zmq, sock):
        sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
        sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
        sock.connect(endpoint)
        msg = b"\x5a" * size
        send, recv = sock.send, sock.recv
        for _ in range(warmup):
            send(msg)
            recv()
        clock = time.perf_counter_ns
        samples = [0] * n
        t_start = clock()
        for i in range(n):
            t0 = clock()
            send(msg)
            recv()
            samples[i] = clock() - t0
        t_end = clock()
        # Recorded after the loop so that histogram bookkeeping is not inside the timed path.
        result_q.put({"hist": encode_samples(samples), "wall_s": (t_end - t_start) / 1e9})


def req_rep_latency(n: int = 100_000, warmup: int = 10_000, size: int = 32, transport: str = "ipc",
                    timeout_s: float = 300.0) -> dict:
    """pyzmq REQ/REP round trips across two processes; percentiles in µs."""
    import zmq

    if n < 1 or warmup < 0:
        raise ValueError("need n >= 1 and warmup >= 0")
    ctx = mp.get_context("spawn")
    endpoint_q, rep_q, req_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    timeout_ms = int(timeout_s * 1000)
    with _endpoint_base(transport) as base:
        rep = ctx.Process(target=_rep_main, name="zmq-REP", args=(base, n + warmup, timeout_ms, endpoint_q, rep_q))
        rep.start()
        req = None
        try:
            endpoint = _get(endpoint_q, 60.0, "REP bind", [rep])
            req = ctx.Process(target=_req_main, name="zmq-REQ", args=(endpoint, n, warmup, size, timeout_ms, req_q))
            req.start()
            req_res = _get(req_q, timeout_s + 60.0, "REQ", [req, rep])
            rep_res = _get(rep_q, 60.0, "REP", [rep])
        finally:
            _reap(*(p for p in (req, rep) if p is not None))
    for r in (req_res, rep_res):
        if "error" in r:
            raise RuntimeError(r["error"])
    return {
        **hdr_percentiles(req_res["hist"], with_min=True),
        "round_trips_per_s": n / req_res["wall_s"],
        "peer": f"pyzmq REQ/REP {transport} RTT",
        "n": n,
        "warmup": warmup,
        "size": size,
        "endpoint": endpoint,
        "hdrh_encoded": req_res["hist"],
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
    }


def _require(hdrh: bool = False) -> None:
    """Raises Skip when pyzmq (and, for ``hdrh``, hdrhistogram) is not installed."""
    try:
        import zmq  # noqa: F401

        if hdrh:
            import hdrh  # noqa: F401
    except ImportError as exc:
        what = "pyzmq/hdrhistogram" if hdrh else "pyzmq"
        raise Skip(f"{what} not installed ({exc}); run `bash bench/peers/install.sh`") from None


def throughput_run(duration_s: float, size: int, transport: str) -> dict:
    """One PUSH/PULL row of a sulis benchmark: :func:`push_pull_throughput`, its intervals printed."""
    _require()
    r = push_pull_throughput(duration_s=duration_s, size=size, transport=transport)
    print_intervals(r["samples"])
    return r


def latency_run(n: int, warmup: int, size: int, transport: str) -> dict:
    """One REQ/REP row of a sulis benchmark: :func:`req_rep_latency`."""
    _require(hdrh=True)
    return req_rep_latency(n=n, warmup=warmup, size=size, transport=transport)


# ----------------------------------------------------------------- CLI

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("pushpull", help="PUSH/PULL throughput")
    pp.add_argument("--duration", type=float, default=6.0, help="seconds per run, the first is warm-up")
    rr = sub.add_parser("reqrep", help="REQ/REP round-trip latency")
    rr.add_argument("--n", type=int, default=100_000)
    rr.add_argument("--warmup", type=int, default=10_000)
    for s in (pp, rr):
        s.add_argument("--size", type=int, default=32)
        s.add_argument("--transport", choices=_TRANSPORTS, default="ipc")
        s.add_argument("--runs", type=int, default=1)
    args = ap.parse_args(argv)

    results = []
    for _ in range(args.runs):
        if args.cmd == "pushpull":
            r = push_pull_throughput(args.duration, size=args.size, transport=args.transport)
        else:
            r = req_rep_latency(args.n, warmup=args.warmup, size=args.size, transport=args.transport)
        print(json.dumps({k: v for k, v in r.items() if k != "hdrh_encoded"}), flush=True)
        results.append(r)
    print_summary(results, ["msgs_per_s"] if args.cmd == "pushpull" else LATENCY_KEYS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
