#!/usr/bin/env bash
# Shared set-up for scripts/demo.sh and scripts/test.sh: a virtualenv in .venv
# with the build and test tools, and sulis built (release) and installed in it.
# Idempotent: re-running only rebuilds what changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3}"
# nftables for the network tests' random loss (tests/netutil); they skip without it.
# Everything else goes into .venv; this is the one system-wide install, so say so first.
if [ "$(id -u)" = 0 ] && ! command -v nft >/dev/null 2>&1 && [ ! -x /usr/sbin/nft ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: running as root without nft: installing the nftables package system-wide (apt-get) for the network loss tests" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables; } \
    >/dev/null 2>&1 || echo "setup: could not install nftables; the nft loss tests will skip" >&2
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
# pip byte-compiles what it installs (21 of the 53 s of a fresh install here):
# kept, as PYTHONDONTWRITEBYTECODE=1 (set on this machine) would otherwise have
# every process, every Spark worker among them, compile numpy, pyarrow and
# pyspark from source at each import (a suite run took 20 min instead of 16).
python -m pip install -q --disable-pip-version-check \
  "maturin>=1.7,<2" "pytest>=8" pytest-timeout pytest-xdist numpy pyarrow "hdrhistogram>=0.10" "click>=8" \
  "prometheus_client>=0.20" pyzmq matplotlib "pyspark==4.2.0" "pandas>=2.2,<3"
# Spark puts pyspark/python/lib/pyspark.zip first on the PYTHONPATH of every
# Python worker it starts, and a zip holds no .pyc: each worker compiled pyspark
# afresh (about 1 s of CPU, three times what the same imports cost from the
# installed package), and a worker behind a Python data source has 10 s,
# hard-coded, to start and connect back. A starved run failed queries on it.
# The zip is the installed package's own files (the same version): moved aside,
# the workers import the installed package, compiled once. Spark needs the zip
# itself only on YARN, which the suite does not use.
ZIP=".venv/lib/python$(python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')/site-packages/pyspark/python/lib/pyspark.zip"
if [ -f "$ZIP" ]; then
  mv "$ZIP" "$ZIP.unused"
fi
# Lint and type checks (scripts/test.sh); pinned to a minor version so a new
# release's new rules cannot fail a run that changed nothing.
python -m pip install -q --disable-pip-version-check "ruff==0.17.*" "mypy==2.4.*"
# The documentation site (mkdocs.yml; scripts/test.sh builds it with --strict), pinned the same way.
python -m pip install -q --disable-pip-version-check "mkdocs==1.6.*" "mkdocs-material==9.8.*" \
  "mkdocstrings==1.0.*" "mkdocstrings-python==2.0.*"
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo (Rust) is required: https://rustup.rs" >&2
  exit 1
fi
# scripts/test.sh runs cargo fmt and clippy: rustup's minimal profile has neither.
if command -v rustup >/dev/null 2>&1 && ! { cargo fmt --version && cargo clippy --version; } >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || echo "setup: could not add rustfmt and clippy (rustup component add rustfmt clippy)" >&2
fi
maturin develop --release --quiet 2>&1 | grep -v "^\s*$" | tail -n 3 || true
python -c "import sulis, sys; assert sulis.build_profile == 'release', sulis.build_profile; print('setup: sulis', sulis.__version__, sulis.build_profile, 'in', sys.prefix)"
# The JVM source of format("sulis") (jvm/, the Rust core inside): a jar beside the package, built with the
# machine's JDK 17 against the jars pyspark ships. Without javac its tests skip, saying why.
if command -v javac >/dev/null 2>&1 && command -v jar >/dev/null 2>&1; then
  bash scripts/build_jar.sh || { echo "setup: the sulis jar did not build (scripts/build_jar.sh)" >&2; exit 1; }
else
  echo "setup: no JDK (javac, jar): the JVM source's tests (tests/system/test_spark_jvm*.py) will skip" >&2
fi
# The cluster fault suite's linearizability checker (porcupine, Go): its module fetched now, so the
# test builds it from the module cache. Without Go that test is skipped, saying why.
if command -v go >/dev/null 2>&1; then
  (cd tests/clusterfaults/lincheck && go mod download) || echo "setup: could not fetch porcupine; the cluster fault test will fail building its checker" >&2
else
  echo "setup: no Go toolchain: the cluster fault test (tests/system/test_cluster_faults.py) will skip" >&2
fi
