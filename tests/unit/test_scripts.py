"""scripts/demo.sh answers --help without setting anything up."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def fake_root(tmp_path):
    """A copy of demo.sh beside a setup.sh that only records that it ran."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    shutil.copy(SCRIPTS / "demo.sh", scripts / "demo.sh")
    (scripts / "setup.sh").write_text(f'touch "{tmp_path}/set-up-ran"; exit 3\n')
    return tmp_path


@pytest.mark.parametrize(("args", "option"), [(["--help"], "--rate"), (["-h"], "--rate"),
                                             (["--ipc", "--help"], "--round-trips")])
def test_demo_help_prints_usage_without_set_up(fake_root, args, option):
    out = subprocess.run(["bash", str(fake_root / "scripts" / "demo.sh"), *args], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: scripts/demo.sh") and option in out.stdout
    assert not (fake_root / "set-up-ran").exists()
    assert not (fake_root / ".venv").exists()


def test_demo_without_help_sets_up_first(fake_root):
    out = subprocess.run(["bash", str(fake_root / "scripts" / "demo.sh"), "--duration", "1"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 3 and (fake_root / "set-up-ran").exists()
