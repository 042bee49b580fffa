"""A real S3-compatible object store for the tiered-storage tests and benchmarks: S3Proxy (``org.gaul:s3proxy``, a
maintained open-source S3 server on Apache jclouds) as its own Java process on loopback, keeping each bucket as
a directory (jclouds' filesystem provider) and checking AWS Signature V4 with its own credentials. Not a mock in
the caller's process: the archive talks HTTP to it, and a test can kill it (the store gone mid-read) and start
it again on the same directory.

The jar (``s3proxy-<version>-jar-with-dependencies.jar``, about 55 MB) is fetched once with ``mvn
dependency:copy`` into ``bench/.peers`` (``$SULIS_PEERS_DIR``), as ``bench/peers/install.sh`` does; without it or
a Java 17+ ``Missing`` says why.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

S3PROXY_VERSION = "4.1.0"
ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = Path(os.environ.get("SULIS_PEERS_DIR", ROOT / "bench" / ".peers"))
JAR = PEERS_DIR / f"s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar"
#: The store's own credentials; the archive gets them as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
ACCESS_KEY, SECRET_KEY = "sulis-test-key", "sulis-test-secret-do-not-log"


class Missing(Exception):
    """S3Proxy cannot run here (the message says why)."""


def s3proxy_jar() -> Path:
    """The S3Proxy jar, fetched if missing; ``Missing`` when it cannot be had."""
    if JAR.is_file() and JAR.stat().st_size > 0:
        return JAR
    if shutil.which("mvn") is None:
        raise Missing(f"no mvn to fetch org.gaul:s3proxy:{S3PROXY_VERSION} (or put it at {JAR})")
    PEERS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as empty:  # no project pom is picked up
        out = subprocess.run(
            ["mvn", "-B", "-q", "-Dstyle.color=never", "dependency:copy",
             f"-Dartifact=org.gaul:s3proxy:{S3PROXY_VERSION}:jar:jar-with-dependencies",
             f"-DoutputDirectory={PEERS_DIR}"], cwd=empty, capture_output=True, text=True, timeout=600)
    if out.returncode != 0 or not JAR.is_file():
        raise Missing(f"could not fetch org.gaul:s3proxy:{S3PROXY_VERSION}: {(out.stdout + out.stderr)[-2000:]}")
    return JAR


def _java17() -> str:
    java = shutil.which("java")
    if java is None:
        raise Missing("no java on the PATH for S3Proxy (Java 17+)")
    return java


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """S3Proxy on ``127.0.0.1:port`` keeping its buckets under ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = _free_tcp_port()
        self.proc: subprocess.Popen | None = None
        self.log = root.parent / f"{root.name}-s3proxy.log"
        self.properties = root.parent / f"{root.name}-s3proxy.properties"
        self.properties.write_text(
            f"s3proxy.endpoint=http://127.0.0.1:{self.port}\n"
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={ACCESS_KEY}\n"
            f"s3proxy.credential={SECRET_KEY}\n"
            "jclouds.provider=filesystem\n"
            f"jclouds.filesystem.basedir={root}\n")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, bucket: str, prefix: str = "") -> str:
        """The archive's ``tier_store`` for ``bucket`` (made if missing) and ``prefix``."""
        (self.root / bucket).mkdir(exist_ok=True)
        return f"{self.endpoint}/{bucket}" + (f"/{prefix}" if prefix else "")

    @staticmethod
    def credentials() -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

    def objects(self, bucket: str) -> dict[str, int]:
        """Every segment object (``*.rec``) in ``bucket``: key -> length (read from the store's directory; a
        PUT cut off half-way may leave a temporary file of the server's there, which is no object)."""
        base = self.root / bucket
        found = {}
        # os.walk passes over a directory that vanishes meanwhile (the server removes a prefix's directory with
        # its last object); pathlib's rglob raised on it.
        for parent, _, files in os.walk(base):
            for name in files:
                if not name.endswith(".rec"):
                    continue
                p = Path(parent, name)
                try:  # an object the archive deletes meanwhile (retention, a purge) is simply not there
                    found[str(p.relative_to(base))] = p.stat().st_size
                except FileNotFoundError:
                    continue
        return found

    def start(self, timeout: float = 120.0) -> None:
        """Starts the server and returns once it answers HTTP."""
        jar, java = s3proxy_jar(), _java17()
        with open(self.log, "ab") as log:
            # C1 alone and a small heap: the server lives for a test, and starts in about a second.
            self.proc = subprocess.Popen(
                [java, "-XX:TieredStopAtLevel=1", "-Xmx256m", "-jar", str(jar), "--properties",
                 str(self.properties)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"S3Proxy exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=2).close()
                return
            except urllib.error.HTTPError:
                return  # it answers (403 to an unsigned request): up
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"S3Proxy did not answer within {timeout} s:\n"
                                         f"{self.log.read_text()[-3000:]}") from None
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILLs the server (the store gone, as a crash or a cut network leaves it)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)
        self.proc = None

