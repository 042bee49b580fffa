#!/usr/bin/env bash
# The whole test suite: set up, then lint, format and type checks, the Rust tests and the Python tests.
set -euo pipefail
started=$SECONDS
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=setup.sh
. "$root/scripts/setup.sh"
cd "$root"
# Seconds, so first: a finding fails the run before the long parts start.
echo "== ruff, mypy, stubtest (set-up took $((SECONDS - started)) s)"
ruff check python/sulis tests bench examples
mypy
python -m mypy.stubtest sulis._native --allowlist scripts/stubtest-allowlist.txt
echo "== cargo fmt, clippy ($((SECONDS - started)) s in)"
# Rust's own format and lints, every crate and target (tests and benches
# too): a warning fails the run, before the long parts.
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test ($((SECONDS - started)) s in)"
# The extension crate links against the interpreter only when loaded by
# Python, so it has no Rust test binary; every other crate is tested.
cargo test --workspace --exclude sulis-python --quiet
echo "== pytest ($((SECONDS - started)) s in)"
# Two workers (the machine has two cores), a test module to one worker
# (--dist loadfile): the Aeron transfers of one module run one at a time, and
# the sulis bench tests, which check that no sulis-clibench-* directory is
# left, never see another module's. The modules start longest first, in the
# order tests/conftest.py gives (--no-loadscope-reorder keeps it).
# The slowest tests are listed at the end: the suite must stay within 15
# minutes on a 2-core machine, and this shows where the time goes.
python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25 tests "$@"
