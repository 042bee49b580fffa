"""The wheel a team installs: ``maturin build`` of this tree (the extension, the ``sulis`` command, the JVM
source's jar with its native library), installed into a fresh virtual environment with ``pip`` and used with
no Rust or Java toolchain on the PATH (no cargo, rustc, javac, jar, nor a C compiler): the README's first
example, ``sulis driver``, a one-member cluster node with a Python service, and a Spark read through the JVM
source. Each step is ``wheel_child.py``'s, run by the new environment's Python outside the source tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JAR = ROOT / "python" / "sulis" / "jars" / "sulis-spark.jar"
TOOLCHAIN = ("cargo", "rustc", "rustup", "maturin", "javac", "jar", "cc", "gcc", "g++", "c++", "clang")

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(not JAR.is_file(), reason="the JVM source's jar is not built (scripts/build_jar.sh)")]


def java_home() -> str:
    """The JDK of the `java` on the PATH (Spark runs on it); its bin directory is not put on the PATH."""
    java = shutil.which("java")
    assert java, "Spark needs a Java runtime"
    return str(Path(os.path.realpath(java)).parent.parent)


def without_toolchains(into: Path) -> str:
    """A PATH of the system's commands without the toolchains: a directory of links to /usr/bin and /bin
    but those."""
    into.mkdir()
    for d in ("/usr/bin", "/bin"):
        for name in os.listdir(d):
            link = into / name
            if name in TOOLCHAIN or link.exists() or link.is_symlink():
                continue
            os.symlink(os.path.join(d, name), link)
    return str(into)


def test_the_wheel_installs_and_runs_without_toolchains(tmp_path):
    dist = tmp_path / "dist"
    built = subprocess.run([shutil.which("maturin") or "maturin", "build", "--release", "--out", str(dist)],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("sulis-*.whl")
    assert "abi3" in wheel.name and "manylinux" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert "sulis/jars/sulis-spark.jar" in names and any(n.startswith("sulis/_native") for n in names), names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # The wheel, and what sulis[spark] asks for (from the pip cache the set-up filled, else the index).
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          f"{wheel}[spark]"], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]

    path = f"{venv / 'bin'}{os.pathsep}{without_toolchains(tmp_path / 'bin')}"
    missing = {t: shutil.which(t, path=path) for t in TOOLCHAIN}
    assert all(v is None for v in missing.values()), missing
    env = {"PATH": path, "HOME": str(tmp_path), "JAVA_HOME": java_home(), "LANG": "C.UTF-8",
           "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    run = subprocess.run([str(python), str(Path(__file__).with_name("wheel_child.py")), str(scratch)],
                         cwd=scratch, env=env, capture_output=True, text=True, timeout=480)
    steps = {s["step"]: s for s in (json.loads(x) for x in run.stdout.splitlines() if x.startswith("{"))}
    assert run.returncode == 0, f"{steps}\n{run.stderr[-4000:]}"
    assert str(venv) in steps["installed"]["module"] and str(venv) in steps["installed"]["native"], steps
    assert str(venv) in steps["installed"]["jar"], steps
    assert steps["quickstart"]["got"] == ["hello"]
    assert steps["cli-driver"]["got"] == ["through sulis driver"]
    assert steps["cluster"]["echoed"] == ["ping"]
    assert (steps["spark"]["rows"], steps["spark"]["first"], steps["spark"]["last"]) == (100, "m0", "m99"), steps
