"""Helpers shared by the peers in bench/peers/ (not a peer itself).

* for the child roles of ``zenoh_peer`` and ``iceoryx2_peer``: the check that
  the package is usable, the publisher's send loop, the subscriber's wait for
  its first message and its drain after the run, and the role command line;
* for the command lines of ``zmq_peers`` and ``aeron_java``: the summary of
  several runs.

The orchestration of one run (start the children, collect their reports, stop
them and remove the run's files) is bench/_common.py's ``run_pub_sub`` and
``run_ping_pong``, which the sulis benchmarks use as well.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Callable, Sequence

from bench._common import Skip, child_signals, json_out


def available(dist: str, module: str) -> str:
    """The installed version of the distribution ``dist``; raises Skip when ``module`` cannot be imported."""
    try:
        import importlib
        import importlib.metadata as md

        importlib.import_module(module)
        return md.version(dist)
    except Exception as exc:  # ImportError, or a broken wheel
        raise Skip(f"{dist} not usable ({type(exc).__name__}: {exc}); "
                   "run `bash bench/peers/install.sh`") from None


def send_until_stopped(send: Callable, msg, stop_file: str, chunk: int = 4096) -> int:
    """The publisher's loop: ``send(msg)`` once per message, ``chunk`` messages
    between two looks for ``stop_file``. Returns the messages sent."""
    exists = os.path.exists
    rng = range(chunk)
    sent = 0
    while not exists(stop_file):
        for _ in rng:
            send(msg)
        sent += chunk
    return sent


def first_message(try_recv: Callable, pause_s: float = 0.0, timeout_s: float = 30.0):
    """The subscriber's wait for its first message: ``try_recv()`` until it returns
    one (sleeping ``pause_s`` between tries; 0 spins). Returns it, or None after
    reporting ``{"error"}`` when nothing came in ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (msg := try_recv()) is None:
        if time.monotonic() > deadline:
            json_out({"error": f"no message in {timeout_s:g} s"})
            return None
        if pause_s:
            time.sleep(pause_s)
    return msg


def drain_until(try_recv: Callable, path: str) -> None:
    """After the measured interval: keeps receiving until ``path`` exists (the
    publisher stopped: a send blocked on a full queue or buffer sees nothing else)."""
    while not os.path.exists(path):
        if try_recv() is None:
            time.sleep(0.0005)


def role_main(argv: Sequence[str] | None, doc: str, roles: dict,
              own_args: Callable[[argparse.ArgumentParser], None]) -> int:
    """A peer's child process: parses ``--role`` (one of ``roles``), the options
    ``own_args`` adds and the ones every peer role takes, then runs the role."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--role", choices=list(roles), required=True)
    own_args(ap)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--stop-file")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--warmup", type=int, default=10_000)
    ap.add_argument("--client-idle", choices=["spin", "yield"], default="spin")
    ap.add_argument("--pin-cpu", type=int, default=None)
    a = ap.parse_args(argv)
    child_signals()
    return roles[a.role](a)


def print_summary(results: list[dict], keys: Sequence[str]) -> None:
    """After several runs of a peer's command line: the median of each of ``keys`` (one JSON line)."""
    if len(results) > 1:
        summary = {"peer": results[0]["peer"], "runs": len(results)}
        summary.update({f"median_{k}": statistics.median(r[k] for r in results) for k in keys})
        print(json.dumps(summary))
