#!/usr/bin/env bash
# The whole test suite: set up, then lint, format and type checks, the Rust tests and the Python tests.
set -euo pipefail
started=$SECONDS
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=setup.sh
. "$root/scripts/setup.sh"
cd "$root"
# Seconds, so first: a finding fails the run before the long parts start.
echo "== ruff, mypy, stubtest, docs site (set-up took $((SECONDS - started)) s)"
ruff check python/sulis tests bench examples
mypy
python -m mypy.stubtest sulis._native --allowlist scripts/stubtest-allowlist.txt
# The documentation site, offline, in about a second: a broken link or anchor, or an API
# reference mkdocstrings cannot resolve, fails the run (site/ is gitignored).
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet
echo "== cargo fmt, clippy ($((SECONDS - started)) s in)"
# Rust's own format and lints, every crate and target (tests and benches
# too): a warning fails the run, before the long parts.
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test ($((SECONDS - started)) s in)"
# The extension crate links against the interpreter only when loaded by
# Python, so it has no Rust test binary; every other crate is tested.
cargo test --workspace --exclude sulis-python --quiet
# A worker per CPU that other work leaves idle over 3 s (at least one, at most the CPU count;
# SULIS_TEST_WORKERS overrides): with two busy loops beside the suite on 2 cores, two workers put
# 11-12 runnable processes on the 2 cores, and Spark's fixed 10 s wait for a Python worker to connect
# back, and the JVM peers' start, lost to that load, not to a slow test of ours.
workers="${SULIS_TEST_WORKERS:-$(python - <<'PY'
import os, time
def busy_idle():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], v[3] + v[4]
b0, i0 = busy_idle(); time.sleep(3); b1, i1 = busy_idle()
n = os.cpu_count() or 1
spare = n * (i1 - i0) / max(1, (b1 - b0) + (i1 - i0))
print(max(1, min(n, round(spare))))
PY
)}"
echo "== pytest ($((SECONDS - started)) s in; $workers worker(s))"
# Two workers on an idle 2-core machine, a test module to one worker
# (--dist loadfile): the Aeron transfers of one module run one at a time, and
# the sulis bench tests, which check that no sulis-clibench-* directory is
# left, never see another module's. The modules start longest first, in the
# order tests/conftest.py gives (--no-loadscope-reorder keeps it).
# The slowest tests are listed at the end: the suite must stay within 15
# minutes on a 2-core machine, and this shows where the time goes.
python -m pytest -q -n "$workers" --dist loadfile --no-loadscope-reorder --durations=25 tests "$@"
