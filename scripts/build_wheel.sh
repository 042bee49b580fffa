#!/usr/bin/env bash
# Builds the wheel a team installs with pip, with no Rust or Java toolchain on their machines: the extension
# (abi3, Python 3.11 and later; manylinux, as new as this machine's glibc), the `sulis` command, and the JVM
# source's jar with its native library (scripts/build_jar.sh first). Needs what scripts/setup.sh installs.
# Writes dist/sulis-<version>-cp311-abi3-manylinux_*.whl; `pip install 'dist/sulis-...whl[spark]'` installs it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/build_jar.sh
"${MATURIN:-$root/.venv/bin/maturin}" build --release --out dist
