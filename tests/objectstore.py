"""The tests' S3-compatible object store: S3Proxy as its own process (``bench/peers/s3proxy.py``); a test that
cannot have it (no mvn to fetch the jar, no Java 17+) is skipped, saying why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.peers import s3proxy  # noqa: E402
from bench.peers.s3proxy import ACCESS_KEY, SECRET_KEY  # noqa: E402,F401 (the tests' names for them)


class S3Server(s3proxy.S3Server):
    def start(self, timeout: float = 120.0) -> None:
        try:
            super().start(timeout)
        except s3proxy.Missing as e:
            pytest.skip(str(e))
