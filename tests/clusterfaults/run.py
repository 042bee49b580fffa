"""The long fault run: ``python tests/clusterfaults/run.py [--members 3|5] [--rounds 2] [--hold 3] [--seed 0]
[--nemesis kill-leader,...]`` (root: it makes network namespaces and nftables rules).

Each round runs every nemesis once, in an order drawn from the seed; the checks of ``harness.py`` follow the
last. Prints each fault as it starts and the figures at the end; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import random
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
    args = parser.parse_args()
    require_netns_or_exit()
    kinds = [k for k in args.nemesis.split(",") if k]
    rng = random.Random(args.seed)
    schedule = []
    for _ in range(args.rounds):
        schedule += rng.sample(kinds, len(kinds))
    base = Path(tempfile.mkdtemp(prefix="sulis-faults-"))
    started = time.monotonic()
    names = [f"n{i}" for i in range(args.members)] + ["client"]
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
                    "seconds": round(time.monotonic() - started, 1)})
    print(json.dumps(figures, indent=1))
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
