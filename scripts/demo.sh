#!/usr/bin/env bash
# The main job: set up, then run the data pipeline end to end on this machine — market ticks
# published through sulis, recorded by the archive, aggregated by a Spark Structured Streaming
# query reading format("sulis"), written to Parquet, and checked to be counted exactly once.
# `scripts/demo.sh --real-time [OPTIONS]` runs it in Spark's real-time mode (the JVM source and sink:
# ticks into Spark and back out into sulis as they come, latency measured, every tick checked);
# `scripts/demo.sh --ipc [OPTIONS]` runs the IPC throughput/latency demo instead.
# They are in examples/: spark_pipeline.py, spark_realtime.py and ipc_demo.py.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
example=spark_pipeline
if [ "${1:-}" = "--ipc" ]; then
  example=ipc_demo
  shift
elif [ "${1:-}" = "--real-time" ]; then
  example=spark_realtime
  shift
fi
for arg in "$@"; do
  case "$arg" in
    -h|--help)
      # Usage only: no virtualenv, no build, nothing installed.
      echo "usage: scripts/demo.sh [OPTIONS]          the Spark pipeline (examples/spark_pipeline.py)"
      echo "       scripts/demo.sh --real-time [OPTIONS] the pipeline in Spark's real-time mode (examples/spark_realtime.py)"
      echo "       scripts/demo.sh --ipc [OPTIONS]    the IPC throughput and latency demo (examples/ipc_demo.py)"
      echo
      echo "Sets up .venv (build tools, sulis built in release mode, pyspark; see scripts/setup.sh),"
      echo "then runs the pipeline: an embedded driver and archive, a publisher of synthetic market"
      echo "ticks, a Structured Streaming query over format(\"sulis\") aggregating per instrument and"
      echo "event-time window into Parquet, progress once a second, and an exactly-once check."
      echo "Java 17 is needed for Spark."
      echo
      if [ -x "$root/.venv/bin/python" ] && "$root/.venv/bin/python" "$root/examples/$example.py" --help >/dev/null 2>&1; then
        "$root/.venv/bin/python" "$root/examples/$example.py" --help | sed -n '/^options:/,$p'
      elif [ "$example" = spark_realtime ]; then
        echo "Options (the full list once set up: .venv/bin/python examples/spark_realtime.py --help):"
        echo "  --rate N          ticks per second"
        echo "  --duration S      seconds of publishing"
        echo "  --trigger T       real-time mode's checkpoint interval"
      elif [ "$example" = ipc_demo ]; then
        echo "Options (the full list once set up: .venv/bin/python examples/ipc_demo.py --help):"
        echo "  --messages N      messages in the throughput phase"
        echo "  --size BYTES      message size"
        echo "  --round-trips N   round trips in the latency phase"
        echo "  --dir DIR         driver directory (default: a fresh one under /dev/shm)"
      else
        echo "Options of the pipeline (the full list once set up: .venv/bin/python examples/spark_pipeline.py --help):"
        echo "  --rate N          ticks per second"
        echo "  --duration S      seconds of publishing"
        echo "  --instruments N   instruments"
        echo "  --out DIR         where the Parquet output, checkpoint and recording go"
      fi
      exit 0
      ;;
  esac
done
# shellcheck source=setup.sh
. "$root/scripts/setup.sh"
exec python "$root/examples/$example.py" "$@"
