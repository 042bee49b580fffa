#!/usr/bin/env bash
# The main job: set up, then run the end-to-end IPC demo on an embedded driver
# (two processes exchanging a stream; throughput and a latency histogram).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=setup.sh
. "$root/scripts/setup.sh"
exec sulis demo "$@"
