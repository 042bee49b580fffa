"""docs/cluster-start.md, run as a reader runs it: its ``echo.py`` and ``client.py`` written out as the page
says, its bash blocks run by bash in a scratch directory, with the page's ports swapped for free ones and its
/dev/shm directories for the test's. One member answers the client; three members on one host elect a leader,
answer the client given every ingress, and stop on the page's stop command; with the page's shorter heartbeat
timeout, the page's command kills the leader and another member answers. Each start waits on the members'
counters (the election closed, one leader), not on time, and every process a block starts is killed at the end.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterprocs import cluster_counters
from conftest import await_until, clean_env, free_udp_port, make_dir

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cluster-start.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
ANSWER = re.compile(r"member (\d) answered b'hello'")



def blocks(language: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(PAGE.read_text()) if m.group(1) == language]


def block(*having: str, lacking: tuple[str, ...] = ()) -> str:
    """The page's one bash block that holds every string of ``having`` and none of ``lacking``."""
    found = [b for b in blocks("bash") if all(h in b for h in having) and not any(x in b for x in lacking)]
    assert len(found) == 1, f"{len(found)} bash blocks of {PAGE.name} hold {having} and not {lacking}"
    return found[0]


def python_file(name: str) -> str:
    """The page's python block that is the file ``name`` (its first line names it)."""
    found = [b for b in blocks("python") if b.startswith(f"# {name}:")]
    assert len(found) == 1, f"{PAGE.name} has {len(found)} python blocks starting '# {name}:'"
    return found[0]


def group_pids(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


class Page:
    """The page's commands in ``tmp_path``: ``start`` runs a block whose members stay up (bash waits for them in a
    process group of its own), ``run`` one that ends; ``close`` kills whatever a block started."""

    def __init__(self, tmp_path: Path):
        self.cwd = tmp_path
        self.shm = make_dir("sulis-cluster-start-")
        self.ports: dict[str, str] = {"0": "0"}
        for name in ("echo.py", "client.py"):  # client.py's default ingress is the one member's port
            (tmp_path / name).write_text(self.place(python_file(name)))
        self.env = clean_env(PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
        self.started: list[subprocess.Popen] = []

    def place(self, text: str) -> str:
        """``text`` with the page's ports and /dev/shm directories replaced by the test's."""
        def port(m: re.Match) -> str:
            if m.group(1) not in self.ports:
                self.ports[m.group(1)] = str(free_udp_port())
            return self.ports[m.group(1)]

        text = re.sub(r"(?<=localhost:)(\d+)", port, text)
        return text.replace("/dev/shm/", self.shm + "/")

    def start(self, text: str, log: str) -> subprocess.Popen:
        with open(self.cwd / log, "a") as out:
            proc = subprocess.Popen(["bash", "-c", self.place(text) + "\nwait\n"], cwd=self.cwd, env=self.env,
                                    stdout=out, stderr=out, start_new_session=True)
        self.started.append(proc)
        return proc

    def run(self, text: str, timeout: float = 60, check: bool = True) -> str:
        """Runs ``text`` (failing the test if it fails, with ``check``) and returns what it printed."""
        result = subprocess.run(["bash", "-c", self.place(text)], cwd=self.cwd, env=self.env, capture_output=True,
                                text=True, timeout=timeout)
        assert result.returncode == 0 or not check, (f"{text}\nexited {result.returncode}:\n{result.stdout}\n"
                                                     f"{result.stderr}\n{self.logs()}")
        return result.stdout + result.stderr

    def driver_dirs(self, text: str, n: int) -> list[str]:
        """The member's driver directory (``--dir``) in a start block, for members 0 to n-1 (``$i``)."""
        (template,) = re.findall(r"--dir (\S+)", self.place(text))
        return [template.replace("$i", str(i)) for i in range(n)]

    def log(self, name: str) -> str:
        path = self.cwd / name
        return path.read_text() if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(self.cwd.glob("*.log")))

    def await_leader(self, driver_dirs: list[str], timeout: float = 60) -> int:
        """Waits until every member in ``driver_dirs`` has closed its election, its module ACTIVE, and one of them
        leads; returns the leader's index."""
        def settled():
            for proc in self.started:
                assert proc.poll() is None, f"a started block ended ({proc.returncode}):\n{self.logs()}"
            counters = [cluster_counters(d) for d in driver_dirs]
            if not all(c.get("cluster-election-state") == 17 and c.get("cluster-module-state") == 1
                       for c in counters):
                return None
            leaders = [i for i, c in enumerate(counters) if c.get("cluster-node-role") == 2]
            return leaders if len(leaders) == 1 else None

        return await_until(settled, timeout, lambda: f"one leader among {driver_dirs}\n{self.logs()}",
                           interval=0.05)[0]

    def await_stopped(self, proc: subprocess.Popen, timeout: float = 60) -> None:
        await_until(lambda: not group_pids(proc.pid), timeout, lambda: f"the members to stop\n{self.logs()}",
                    interval=0.05)
        proc.wait(timeout=10)

    def close(self) -> None:
        for proc in self.started:
            for pid in group_pids(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 30
        for proc in self.started:
            while group_pids(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.wait(timeout=10)


@pytest.fixture
def page(tmp_path):
    p = Page(tmp_path)
    try:
        yield p
    finally:
        p.close()


def test_one_member_on_one_host_answers_the_pages_client(page):
    start = block("sulis cluster-node", lacking=("--member-id",))
    proc = page.start(start, "node.log")
    page.await_leader(page.driver_dirs(start, 1))
    out = page.run(block("python client.py", lacking=("cluster-tool", '"0=')))
    assert ANSWER.search(out), out
    os.killpg(proc.pid, signal.SIGTERM)  # as Ctrl-C would
    page.await_stopped(proc)
    assert "sulis cluster-node stopped" in (page.cwd / "node.log").read_text(), page.logs()


def test_three_members_on_one_host_elect_a_leader_answer_the_pages_client_and_stop(page):
    start = block("--member-id $i", "for i in 0 1 2", lacking=("heartbeat",))
    proc = page.start(start, "start.log")
    leader = page.await_leader(page.driver_dirs(start, 3))
    out = page.run(block("list-members", "python client.py", lacking=("kill",)))
    assert f"leader {leader}" in out and ANSWER.search(out), out
    assert int(ANSWER.search(out).group(1)) == leader, out
    page.run(block("kill $pid"))
    page.await_stopped(proc)
    for i in range(3):
        assert (page.cwd / f"member-{i}.log").read_text().rstrip().endswith("sulis cluster-node stopped"), page.logs()


def test_with_the_pages_heartbeat_timeout_another_member_answers_once_the_leader_is_killed(page):
    # The reader's shell still holds $MEMBERS from the three members' block.
    members = "\n".join(line for line in block("--member-id $i", lacking=("heartbeat",)).splitlines()
                        if line.startswith("MEMBERS="))
    start = block("--member-id $i", "--leader-heartbeat-timeout")
    proc = page.start(f"{members}\n{start}", "start.log")
    drivers = page.driver_dirs(start, 3)
    first = page.await_leader(drivers)
    kill, _, after = block("kill -9").partition("\ndone\n")
    page.run(kill + "\ndone\n", check=False)  # status 1 when the last member it asks does not lead
    # bash and the two members left
    await_until(lambda: len(group_pids(proc.pid)) == 3, 10, lambda: f"the leader to die: {group_pids(proc.pid)}")
    survivors = [i for i in range(3) if i != first]
    second = survivors[page.await_leader([drivers[i] for i in survivors])]
    # list-members fails on the killed member (no module runs there), as the page says.
    out = page.run(after, check=False)
    assert int(ANSWER.search(out).group(1)) == second, out
    assert f"member {second} answered: leader {second}" in out, out
    assert f"no consensus module is running on demo/cluster-{first}" in out, out
    page.run(block("kill $pid"), check=False)  # the killed member has no pid to give: status 1 if it is the last
    page.await_stopped(proc)


def test_members_left_to_the_default_archive_dir_under_one_parent_collide_and_the_error_names_the_flag(page):
    """The page's three members without their --archive-dir: the second's archive would be the first's
    (CLUSTER_DIR/../archive, demo/archive for both), and its error says which flag to pass."""
    start = block("--member-id $i", "for i in 0 1 2", lacking=("heartbeat",))
    assert " --archive-dir demo/archive-$i" in start and " &\ndone" in start
    shared = start.replace(" --archive-dir demo/archive-$i", "")
    page.start(shared.replace("for i in 0 1 2", "for i in 0"), "start.log")
    await_until(lambda: "running in" in page.log("member-0.log"), 60, lambda: f"member 0 to run\n{page.logs()}",
                interval=0.05)
    page.run(shared.replace("for i in 0 1 2", "for i in 1").replace(" &\ndone", "\ndone"), check=False)
    error = page.log("member-1.log")
    archive = page.cwd / "demo" / "archive"
    assert f"an archive is running in {archive}" in error, error
    assert "--archive-dir was not given, so it is CLUSTER_DIR/../archive" in error, error
    assert f"give this one another --archive-dir (e.g. --archive-dir {page.cwd / 'demo' / 'archive-1'})" in error, error
