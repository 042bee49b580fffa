"""The examples run as written: the main job (examples/spark_pipeline.py, what ``scripts/demo.sh`` runs)
checks that every tick was counted once, in real-time mode (examples/spark_realtime.py, ``--real-time``) that
every tick came back, the IPC demo prints its figures, and the batched cluster service keeps every balance."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import clean_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(example: str, *args, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / example), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=clean_env())


def test_the_ipc_demo_measures_throughput_and_round_trips():
    out = run("ipc_demo.py", "--messages", 200_000, "--round-trips", 5_000, timeout=120)
    assert out.returncode == 0, out.stderr
    received = re.search(r"received ([\d,]+) msgs/s", out.stdout)
    assert received and int(received.group(1).replace(",", "")) > 0, out.stdout
    percentiles = [float(m) for m in re.findall(r"^\s+p[\d.]+\s+([\d.]+)$", out.stdout, re.M)]
    assert len(percentiles) == 5 and percentiles == sorted(percentiles), out.stdout
    driver_dir = re.search(r"driver in (\S+),", out.stdout)
    assert driver_dir and not os.path.exists(driver_dir.group(1)), "the demo's driver directory is removed"


def test_the_ipc_demo_refuses_a_size_it_cannot_send_in_one_frame():
    out = run("ipc_demo.py", "--size", 100_000, "--messages", 10, "--round-trips", 10, timeout=60)
    assert out.returncode != 0 and "--size" in out.stderr and "Traceback" not in out.stderr


def test_the_batched_cluster_example_keeps_every_balance():
    out = run("cluster_batched.py", "--messages", 5_000, timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "cluster batched example: OK, every balance is the sum of what was sent" in out.stdout, out.stdout
    calls = re.search(r"in ([\d,]+) calls \(([\d.]+) a call\)", out.stdout)
    assert calls and int(calls.group(1).replace(",", "")) > 0, out.stdout


def test_the_main_job_counts_every_tick_once(tmp_path):
    out = run("spark_pipeline.py", "--duration", 3, "--rate", 20_000, "--instruments", 50, "--out", tmp_path,
              timeout=280)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "sulis pipeline: OK, every tick counted exactly once" in out.stdout, out.stdout[-3000:]


@pytest.mark.skipif(not os.path.exists(Path(__file__).resolve().parents[2] / "python" / "sulis" / "jars" /
                                       "sulis-spark.jar"), reason="no sulis jar (scripts/build_jar.sh)")
def test_the_main_job_in_real_time_mode_forwards_every_tick(tmp_path):
    out = run("spark_realtime.py", "--duration", 4, "--rate", 5_000, "--instruments", 50, "--warmup", 1,
              "--out", tmp_path, timeout=280)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"sulis real-time pipeline: OK, every tick forwarded exactly once", out.stdout), out.stdout[-3000:]
    assert re.search(r"check: ([\d,]+) ticks published, \1 back out of Spark, \1 distinct", out.stdout), out.stdout
