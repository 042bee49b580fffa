#!/usr/bin/env bash
# The main job: set up, then run the end-to-end IPC demo on an embedded driver
# (two processes exchanging a stream; throughput and a latency histogram).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
for arg in "$@"; do
  case "$arg" in
    -h|--help)
      # Usage only: no virtualenv, no build, nothing installed.
      echo "usage: scripts/demo.sh [OPTIONS]"
      echo
      echo "Sets up .venv (build tools, sulis built in release mode; see scripts/setup.sh),"
      echo "then runs 'sulis demo OPTIONS': an embedded driver, a second process, the"
      echo "throughput of 32-byte messages and a histogram of round-trip latencies."
      echo
      if [ -x "$root/.venv/bin/sulis" ] && "$root/.venv/bin/sulis" demo --help >/dev/null 2>&1; then
        "$root/.venv/bin/sulis" demo --help | sed -n '/^Options:/,$p'
      else
        echo "Options (of 'sulis demo'; the full list once set up: .venv/bin/sulis demo --help):"
        echo "  --messages N      messages in the throughput phase"
        echo "  --size BYTES      message size"
        echo "  --round-trips N   round trips in the latency phase"
        echo "  --dir DIR         driver directory (default: a fresh one under /dev/shm)"
      fi
      exit 0
      ;;
  esac
done
# shellcheck source=setup.sh
. "$root/scripts/setup.sh"
exec sulis demo "$@"
