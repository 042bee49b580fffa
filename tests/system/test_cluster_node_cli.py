"""``sulis cluster-node``: a one-member cluster as a process of its own (driver, archive, consensus module and a
Python service named module:Class), reached by a client on another driver over UDP. SIGKILLed mid-stream, it
restarts on the same directories and its service's state is rebuilt from the log: nothing the client was
answered is lost. SIGTERM stops it cleanly; a bad service name is an error naming it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from conftest import CLI, await_until, clean_env, free_udp_port, run_cli
from sulis.cluster import ClusterClient, ClusterSessionClosedError

SERVICE = '''
from sulis.cluster import OFFER_AGAIN, ClusteredService

class Counter(ClusteredService):
    """Adds each message's number to a total and answers the total."""

    def __init__(self):
        self.total = 0

    def on_session_message(self, cluster, session_id, timestamp, payload):
        self.total += int(payload)
        while cluster.offer(session_id, str(self.total).encode()) in OFFER_AGAIN:
            cluster.idle()

    def on_take_snapshot(self, cluster, snapshot):
        snapshot.write(str(self.total).encode())

    def on_start(self, cluster, snapshot):
        if snapshot is not None:
            self.total = int(snapshot[0])
'''


class Node:
    def __init__(self, tmp_path, port: int):
        c = free_udp_port()  # the consensus endpoint: a member alone binds it too
        self.cmd = [*CLI, "cluster-node", "--service", "counter_service:Counter", "--cluster-dir",
                    str(tmp_path / "node" / "cluster"), "--dir", str(tmp_path / "node" / "driver"),
                    "--cluster-members", f"0,localhost:{port},localhost:{c},localhost:2,localhost:0,localhost:3",
                    "--log-term-length", "64k"]
        self.env = clean_env(PYTHONPATH=str(tmp_path))
        self.cwd = tmp_path

    def start(self) -> subprocess.Popen:
        proc = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        # Its election's lines come first (a member alone elects itself as a cluster's members do).
        seen = []
        try:
            while not seen or "running in" not in seen[-1]:
                seen.append(proc.stderr.readline())
                assert seen[-1], "".join(seen)  # it ended without saying it runs
        except BaseException:  # a failed start (or the test's timeout) leaves no node running past the test
            proc.kill()
            proc.wait(timeout=30)
            raise
        return proc


def client(driver, port: int) -> ClusterClient:
    return ClusterClient(driver.dir, f"0=localhost:{port}", f"aeron:udp?endpoint=localhost:{free_udp_port()}",
                         message_timeout=10.0)


def add(c: ClusterClient, n: int) -> int:
    """Sends n, returns the total the service answers."""
    await_until(lambda: c.offer(str(n).encode()) > 0, 10, "ingress")
    got: list[bytes] = []
    await_until(lambda: c.poll_egress(lambda p, t: got.append(p)) >= 0 and got, 10, "the answer")
    return int(got[0])


def test_a_node_killed_with_sigkill_restarts_with_its_services_state_from_the_log(make_driver, tmp_path):
    (tmp_path / "counter_service.py").write_text(SERVICE)
    driver = make_driver()
    port = free_udp_port()
    node = Node(tmp_path, port)
    proc = node.start()
    try:
        c = client(driver, port)
        totals = [add(c, i) for i in range(1, 101)]
        assert totals[-1] == 5050
        # Killed mid-stream: messages sent after the last answer may or may not be in the log.
        for _ in range(10):
            c.offer(b"1000")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
        proc = node.start()
        c2 = client(driver, port)
        total = add(c2, 0)
        # Every answered message is in the rebuilt state; of the unanswered ones, whatever the log took, each once.
        assert total >= 5050 and (total - 5050) % 1000 == 0 and total <= 5050 + 10 * 1000, total
        assert add(c2, 1) == total + 1
        with pytest.raises(ClusterSessionClosedError):
            await_until(lambda: c.poll_egress(lambda p, t: None) < 0, 15, "the old session's close")
        c.close()
        c2.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert "sulis cluster-node stopped" in err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def test_a_service_that_cannot_be_loaded_is_named(tmp_path):
    out = subprocess.run([*CLI, "cluster-node", "--service", "no_such_module:Service", "--cluster-dir",
                          str(tmp_path / "cluster")], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "'no_such_module:Service': No module named 'no_such_module'" in out.stderr


def tool_setup(make_driver, tmp_path):
    """The counter service's module, a client driver, the node's port and ``sulis cluster-tool`` on its directories."""
    (tmp_path / "counter_service.py").write_text(SERVICE)
    cluster_dir, driver_dir = tmp_path / "node" / "cluster", tmp_path / "node" / "driver"

    def tool(*args):
        return run_cli("cluster-tool", cluster_dir, *args, "--dir", driver_dir)

    return make_driver(), free_udp_port(), tool


def test_cluster_tool_describes_a_running_member_takes_its_snapshot_and_suspends_it(make_driver, tmp_path):
    driver, port, tool = tool_setup(make_driver, tmp_path)

    proc = Node(tmp_path, port).start()
    try:
        c = client(driver, port)
        assert add(c, 5) == 5
        out = tool("pid")
        assert out.returncode == 0 and int(out.stdout) == proc.pid, out
        described = json.loads(tool("describe", "--json").stdout)
        assert (described["state"], described["role"], described["snapshot_count"]) == ("ACTIVE", "LEADER", 0)
        assert described["commit_position"] > 0
        assert tool("is-leader").returncode == 0
        out = tool("snapshot")
        assert out.returncode == 0 and "snapshot taken: 1" in out.stdout, out
        log = json.loads(tool("recording-log", "--json").stdout)
        assert [(e["type"], e["service_id"]) for e in log["entries"]] == [("TERM", -1), ("SNAPSHOT", 0),
                                                                          ("SNAPSHOT", -1)]
        assert log["torn_tail_bytes"] == 0
        plan = json.loads(tool("recovery-plan", "--json").stdout)
        assert [s["service_id"] for s in plan["snapshots"]] == [-1, 0]
        assert plan["last_term"]["leadership_term_id"] == 0
        purged = json.loads(tool("purge-log", "--json").stdout)
        assert purged["segments_deleted"] == 0 and purged["snapshot_position"] > 0, purged  # one short segment
        out = tool("suspend")
        assert out.returncode == 0 and "SUSPENDED" in out.stdout, out
        await_until(lambda: c.offer(b"7") > 0, 10, "ingress")  # waits, not dropped, while suspended
        assert tool("resume").returncode == 0
        got: list[bytes] = []
        await_until(lambda: c.poll_egress(lambda p, t: got.append(p)) >= 0 and got, 10, "the answer")
        assert got == [b"12"]
        c.close()
        # A restart starts from the snapshot: the state holds.
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
        proc = Node(tmp_path, port).start()
        c2 = client(driver, port)
        assert add(c2, 1) == 13
        c2.close()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
        out = tool("pid")
        assert out.returncode == 1 and "no consensus module is running" in out.stderr, out
        out = tool("snapshot")
        assert out.returncode == 1 and "no consensus module is running" in out.stderr, out
        # A snapshot that could not be loaded is invalidated (member stopped): the next start replays the
        # whole log instead, and the state is the same.
        out = tool("invalidate-latest-snapshot")
        assert out.returncode == 0 and "invalidated the snapshot at log position" in out.stdout, out
        assert json.loads(tool("recovery-plan", "--json").stdout)["snapshots"] == []
        proc = Node(tmp_path, port).start()
        out = tool("invalidate-latest-snapshot")
        assert out.returncode == 1 and "stop it first" in out.stderr, out
        c3 = client(driver, port)
        assert add(c3, 1) == 14
        c3.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def test_cluster_tool_shutdown_snapshots_and_stops_the_member_abort_stops_it_without(make_driver, tmp_path):
    driver, port, tool = tool_setup(make_driver, tmp_path)

    def snapshots() -> int:
        entries = json.loads(tool("recording-log", "--json").stdout)["entries"]
        return sum(e["type"] == "SNAPSHOT" and e["valid"] for e in entries)

    node = Node(tmp_path, port)
    proc = node.start()
    try:
        c = client(driver, port)
        assert add(c, 5) == 5
        out = tool("shutdown")
        assert out.returncode == 0 and "the member stopped (shutdown)" in out.stdout, out
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "sulis cluster-node stopped" in err, err
        assert snapshots() == 2, "the service's and the module's"
        c.close()
        proc = node.start()
        c = client(driver, port)
        assert add(c, 1) == 6, "restarted from the shutdown's snapshot"
        out = tool("abort")
        assert out.returncode == 0 and "the member stopped (abort)" in out.stdout, out
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert snapshots() == 2, "no snapshot on abort"
        c.close()
        proc = node.start()
        c = client(driver, port)
        assert add(c, 1) == 7, "the snapshot and the log after it"
        c.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def test_cluster_tool_lists_the_members_and_shows_the_errors_a_stopped_member_left(make_driver, tmp_path):
    """``list-members`` asks the running module (the driver found from the member's mark file, no --dir);
    ``errors`` reads the mark files, which keep a service's exception and a failed start after the process
    is gone."""
    (tmp_path / "counter_service.py").write_text(SERVICE)
    cluster_dir = tmp_path / "node" / "cluster"
    driver, port = make_driver(), free_udp_port()

    def tool(*args):
        return run_cli("cluster-tool", cluster_dir, *args)

    node = Node(tmp_path, port)
    proc = node.start()
    try:
        c = client(driver, port)
        assert add(c, 5) == 5
        answer = json.loads(tool("list-members", "--json").stdout)
        assert (answer["leader_member_id"], answer["member_id"]) == (0, 0), answer
        [me] = answer["active_members"]
        assert me["member_id"] == 0 and me["log_position"] > 0 and me["endpoints"].startswith(f"localhost:{port},")
        out = tool("list-members")
        assert out.returncode == 0 and "leader 0" in out.stdout and "0 LEADER: term 0" in out.stdout, out
        out = tool("errors")
        assert out.returncode == 0, out
        assert "consensus module (member 0" in out.stdout and "service 0 (member 0" in out.stdout, out.stdout
        assert out.stdout.count("0 distinct error(s)") == 3, out.stdout  # module, service, driver
        # A second module on the same directory is refused before it touches the running one's mark file.
        cmd = [*node.cmd, "--dir", str(tmp_path / "second" / "driver"), "--archive-dir",
               str(tmp_path / "second" / "archive")]  # the last --dir wins: its own driver and archive
        second = subprocess.run(cmd, env=node.env, cwd=node.cwd, capture_output=True, text=True, timeout=60)
        assert second.returncode != 0 and "is running on" in second.stderr, second.stderr[-2000:]
        assert json.loads(tool("list-members", "--json").stdout)["leader_member_id"] == 0
        # The service raises: the member stops, and its error stays in the service's mark file.
        c.offer(b"not a number")
        _, err = proc.communicate(timeout=30)
        assert proc.returncode != 0 and "invalid literal for int()" in err, err[-2000:]
        c.close()
        errors = json.loads(tool("errors", "--json").stdout)
        module, service = errors["components"]
        assert (module["component"], module["started"], module["errors"]) == ("consensus module", "yes", [])
        assert service["component"] == "service 0" and service["pid"] == proc.pid
        [(count, first, last, text)] = service["errors"]
        assert count == 1 and first == last
        assert "on_session_message raised at log position" in text and "invalid literal for int()" in text, text
        out = tool("list-members")
        assert out.returncode == 1 and "no consensus module is running" in out.stderr, out  # said, not a hang
        # A restart replays the entry into the same exception (service_errors=stop): the start fails with the
        # service's exception at once, not after the module's wait for the service to join.
        again = subprocess.run(node.cmd, env=node.env, cwd=node.cwd, capture_output=True, text=True, timeout=50)
        assert again.returncode != 0 and "invalid literal for int()" in again.stderr, again.stderr[-2000:]
        assert "JoinLog" not in again.stderr, again.stderr[-2000:]
        # A start that fails is marked so, and says why, in the module's mark file.
        log = cluster_dir / "recording.log"
        data = bytearray(log.read_bytes())
        data[44:48] = b"\x7f\x7f\x7f\x7f"  # the first entry's type
        log.write_bytes(bytes(data))
        refused = subprocess.run(node.cmd, env=node.env, cwd=node.cwd, capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0, refused.stderr[-2000:]
        out = tool("errors")
        assert "consensus module (member 0" in out.stdout and "FAILED TO START" in out.stdout, out.stdout
        assert str(log) in out.stdout and "damaged" in out.stdout, out.stdout
        # The failed run's module replaced the module's file; the service's errors before it were saved aside.
        saved = [p.name for p in cluster_dir.iterdir() if p.name.endswith("-error.log")]
        assert all(n.startswith("cluster-mark-") for n in saved), saved
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
