"""The long fault run: ``python tests/clusterfaults/run.py [--members 3|5] [--rounds 2] [--hold 3] [--seed 0]
[--nemesis kill-leader,...] [--busy 2] [--max-failover 15]`` (root: it makes network namespaces and nftables
rules).

Each round runs every nemesis once, in an order drawn from the seed; the checks of ``harness.py`` follow the
last. Prints each fault as it starts and the figures at the end (among them each fault's time to a new term
and the clients' longest wait, and ``duplicates_applied``, which the checks require to be 0: the workload's
clients are sulis's, exactly once); exits 1 when a check fails. ``--busy N`` runs N busy loops beside the
cluster for the whole run (a machine under load: N = the CPU count puts two runnable processes on each core);
``--max-failover S`` fails the run when a fault took longer than S seconds to a new term or a client waited
longer than that for an answer.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clusterfaults.harness import NEMESES, build_lincheck, run  # noqa: E402
from netutil.netns import NetnsHosts, require_netns  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=3, choices=(3, 5))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hold", type=float, default=3.0, help="seconds each fault lasts")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--nemesis", default=",".join(NEMESES), help="comma-separated, of: " + ", ".join(NEMESES))
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (printed)")
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside the cluster for the whole run")
    parser.add_argument("--max-failover", type=float, default=None,
                        help="fail when a new term or a client's answer took longer than this many seconds")
    args = parser.parse_args()
    require_netns_or_exit()
    kinds = [k for k in args.nemesis.split(",") if k]
    rng = random.Random(args.seed)
    schedule = []
    for _ in range(args.rounds):
        schedule += rng.sample(kinds, len(kinds))
    # In memory: see harness.run.
    base = Path(tempfile.mkdtemp(prefix="sulis-faults-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    started = time.monotonic()
    names = [f"n{i}" for i in range(args.members)] + ["client"]
    # Busy loops, as another workload on the machine would be: at the OS's normal priority, for the whole run.
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        return faults(args, schedule, base, started, names)
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()


def faults(args: argparse.Namespace, schedule: list[str], base: Path, started: float, names: list[str]) -> int:
    with NetnsHosts(*names) as hosts:
        try:
            figures = run(hosts, base, size=args.members, schedule=schedule, hold=args.hold, settle=args.settle,
                          clients=args.clients, seed=args.seed, lincheck=build_lincheck(base),
                          say=lambda s: print(f"[{time.monotonic() - started:6.1f} s] {s}", flush=True))
        except AssertionError as e:
            print(f"FAILED: {e}\n(the run's files: {base})")
            return 1
        except BaseException:
            print(f"(the run's files: {base})")
            raise
    figures.pop("events")
    figures.update({"members": args.members, "schedule": schedule, "hold_s": args.hold, "seed": args.seed,
                    "busy_loops": args.busy, "seconds": round(time.monotonic() - started, 1)})
    print(json.dumps(figures, indent=1))
    if args.max_failover is not None:
        longest = max(figures["longest_election_s"], figures["longest_wait_s"])
        if longest > args.max_failover:
            print(f"FAILED: a failover took {longest:.1f} s, over the {args.max_failover:.1f} s asked for "
                  f"(longest_election_s {figures['longest_election_s']}, longest_wait_s {figures['longest_wait_s']})")
            return 1
    if not args.keep:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"the run's files: {base}")
    return 0


def require_netns_or_exit() -> None:
    try:
        require_netns()
    except BaseException as e:  # pytest.skip outside pytest
        sys.exit(f"network namespaces are not available here: {e}")


if __name__ == "__main__":
    sys.exit(main())
