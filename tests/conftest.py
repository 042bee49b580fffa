"""Shared fixtures of the sulis test suite.

Fixtures
--------
``driver``
    An embedded ``sulis.MediaDriver`` in a fresh directory under /dev/shm:
    shared threading, 64 KiB IPC terms, a 10 ms timer and a short publication
    linger. ``@pytest.mark.driver_options(name=value, ...)`` overrides or adds
    options. On teardown the driver's error log must be empty unless the test
    is marked ``@pytest.mark.expect_errors``; the directory is deleted when
    the test passed and kept (and its path printed) when it failed.
``make_driver``
    Factory for further drivers with the same defaults and teardown.
``client`` / ``make_client``
    A ``sulis.Client`` on ``driver`` (closed on teardown) / a factory of them.
``spawn``
    Starts ``tests/_child.py ROLE ARGS...`` processes (see ``Child``); every
    child is killed and reaped on teardown.

Helpers (import them with ``from conftest import ...``)
-------------------------------------------------------
``await_until(cond, timeout=10.0, what=None)``
    Polls ``cond()`` until true; fails the test after ``timeout`` seconds.
    Use it for every wait: no test synchronises with a bare sleep.
``counter_value(dir, sulis.SystemCounter.NAME)``
    A system counter's value, read through ``sulis.CountersReader``.
``connected_pair(client, stream_id, exclusive=True, channel=...)``
    A subscription and a publication, connected (images included).
``make_dir(prefix)`` / ``keep_dir(dir)``
    A fresh directory under /dev/shm, deleted at the end of the session
    (/dev/shm is memory) unless ``keep_dir`` kept it for a look after a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import sulis
from netutil.fixtures import make_relay, netns_hosts, netns_pair, nft_loss  # noqa: F401 - fixtures, for every test module
from netutil.procs import KERNEL_STALL, all_threads_stopped, threads_in
from sulis._benchkit.procs import ChildProcess
from sulis._benchkit.procs import free_port as free_udp_port  # noqa: F401 - the one free-port helper, for the tests

SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None


# Every JVM the tests start (Spark's, Aeron's peers) lives seconds to a minute: C1 alone and the
# serial collector spare the two cores the JIT and GC threads a long-lived server wants. Measured
# 2026-11-25: the main Spark job took 39 CPU-seconds instead of 60; a 1 M-message Aeron transfer
# cost the same either way. Benchmarks (bench/) do not run under this and use the JVMs' defaults.
# PerfDisableSharedMem: no hsperfdata file in /tmp, whose page a JVM writes at every safepoint and which can
# stall it for seconds while the disk is busy writing back (Spark's tests write a lot there); two CI runs
# (2026-11-26) saw Aeron's driver in an interop test go 10 s without a duty cycle.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+PerfDisableSharedMem")
CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child.py")

#: Options of every test driver unless a test overrides them.
DRIVER_DEFAULTS = {
    "threading_mode": "shared",
    "ipc_term_buffer_length": "64k",
    "timer_interval": "10ms",
    "term_buffer_sparse_file": True,
    "publication_linger_timeout": "100ms",
}

#: Counter type ids by name ("pub-lmt", "snd-pos", "client-heartbeat", ...), as the native
#: module knows them (crates/sulis-protocol/src/counters.rs): tests take the ids from here.
COUNTER_TYPE: dict[str, int] = {name: type_id for type_id, name in sulis._native.counter_types()}

#: System counters used by the tests: (id, label) as in Aeron's SystemCounterDescriptor
#: (crates/sulis-driver/src/system_counters.rs).
UNBLOCKED_PUBLICATIONS_COUNTER = sulis.SystemCounter.UNBLOCKED_PUBLICATIONS
CLIENT_TIMEOUTS_COUNTER = sulis.SystemCounter.CLIENT_TIMEOUTS


#: The ``sulis`` command as the tests run it.
CLI = [sys.executable, "-m", "sulis.cli"]


def clean_env(**extra) -> dict:
    """This process' environment without any ``SULIS_*`` setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SULIS_")}
    env.update(extra)
    return env


def run_cli(*args, env=None, timeout=60) -> subprocess.CompletedProcess:
    """Runs ``sulis ARGS`` (in a clean environment unless ``env`` is given) and captures its output."""
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, env=env or clean_env(),
                          timeout=timeout)


def await_until(cond, timeout: float = 10.0, what=None, interval: float = 0.001):
    """Polls ``cond()`` until it returns something truthy, which is returned. ``what`` names what was awaited
    in the error: a string, or a callable called at the timeout (so it can show the state then, such as a
    process's last log lines, rather than the state when the wait began)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {said or getattr(cond, '__name__', cond)}")
        time.sleep(interval)


def assert_lingers_for_the_channel(present, closed: float) -> None:
    """A publication closed at ``closed`` (monotonic) with ``linger=1s`` on a driver whose own linger is
    100 ms: ``present()`` (its counter is there) stays true past the driver's linger and goes, no sooner
    than 0.9 s. A busy machine may wake this thread only after the channel's linger too: then the first
    look says nothing (the publication may be gone by rights), and the check that it went no sooner stays."""
    time.sleep(0.5)  # past the driver's linger, within the channel's: a time to let pass, not a state
    lingering = bool(present())
    if time.monotonic() - closed < 0.9:
        assert lingering, "the publication was freed after the driver's linger (100 ms), not the channel's (1 s)"
    await_until(lambda: not present(), timeout=10, what="the publication freed after its linger")
    assert time.monotonic() - closed >= 0.9, "the publication was freed before the channel's linger (1 s)"

def counter_value(dir: str, counter: sulis.SystemCounter) -> int:
    """Value of a system counter, checking the driver labels it as the enum (from Rust) says."""
    reader = sulis.CountersReader(dir)
    assert reader.label(counter) == counter.__doc__, f"counter {int(counter)} is {reader.label(counter)!r}, not " \
                                                     f"{counter.__doc__!r}"
    return reader.value(counter)


_MADE_DIRS: list[str] = []
_KEPT_DIRS: set[str] = set()


def load_script(path) -> object:
    """The module in a script that is not in a package (``bench/...``, ``scripts/...``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def heavy():
    """Tests that start many JVMs at once (a Spark standalone cluster across hosts, Spark applications killed
    and restarted, Aeron's JVMs beside three members) take turns across the suite's two workers: a lock file
    held for the test. Two of them at once, with two busy loops beside the suite, starved processes past
    limits that are not ours to set (Spark waits 10 s, hard-coded, for a Python worker to connect back) and
    past a JVM's start within 120 s. Waiting here costs the other worker nothing while it runs other files."""
    import fcntl

    with open(os.path.join(tempfile.gettempdir(), f"sulis-tests-heavy-{os.getuid()}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def start_standalone_archive(archive_dir: str, driver_dir: str, control_stream_id: int = 31) -> subprocess.Popen:
    """``sulis archive`` in a process of its own on ``archive_dir`` (1 MiB segments), its control requests on
    ``aeron:ipc`` stream ``control_stream_id`` of the driver in ``driver_dir``: a process a test can SIGKILL.
    Returns once it says it runs; its stderr is a pipe the caller closes."""
    proc = subprocess.Popen([sys.executable, "-m", "sulis.cli", "archive", "--archive-dir", archive_dir,
                             "--dir", driver_dir, "--local-control-stream-id", str(control_stream_id),
                             "--segment-file-length", str(1 << 20)],
                            stderr=subprocess.PIPE, text=True, env=clean_env())
    said = []  # what a restart found first (a recording a kill left unstopped), then "running in"
    while not said or "running in" not in said[-1]:
        line = proc.stderr.readline()
        assert line, f"sulis archive exited ({proc.wait()}): {''.join(said)}"
        said.append(line)
    return proc


def stop_standalone_archive(proc: subprocess.Popen, archive_dir: str) -> None:
    """Stops (SIGTERM) an archive ``start_standalone_archive`` started, unless it is gone, and removes its
    directory."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    if proc.stderr and not proc.stderr.closed:
        proc.stderr.close()
    shutil.rmtree(archive_dir, ignore_errors=True)


def make_dir(prefix: str = "sulis-test-") -> str:
    """A fresh directory under /dev/shm, deleted when the session ends unless ``keep_dir`` kept it."""
    d = tempfile.mkdtemp(prefix=prefix, dir=SHM)
    _MADE_DIRS.append(d)
    return d


@contextlib.contextmanager
def small_ext4(megabytes: int):
    """An ext4 file system of ``megabytes`` on a loop device, mounted (for a disk that fills); yields its
    mount point. Mounting needs root: the test skips without."""
    from netutil.disk import DiskError
    from netutil.disk import small_ext4 as mount_small_ext4

    with contextlib.ExitStack() as stack:
        try:
            mnt = stack.enter_context(mount_small_ext4(megabytes, make_dir("sulis-ext4-")))
        except DiskError as e:
            pytest.skip(str(e))
        yield mnt


def start_awaiting(popen, name: str, log_dir: str, ready: str, logs: list):
    """Starts a daemon with ``popen(stdout=..., stderr=..., process_group=0)``, its output in
    ``log_dir/<name>.log`` (kept open in ``logs``), and waits until ``ready`` shows in it."""
    log = open(os.path.join(log_dir, f"{name}.log"), "w+")
    logs.append(log)
    proc = popen(stdout=log, stderr=subprocess.STDOUT, process_group=0)

    def text() -> str:
        with open(log.name) as f:
            return f.read()

    def is_ready():
        assert proc.poll() is None, f"{name} exited: {text()[-2000:]}"
        return ready in text()
    await_until(is_ready, timeout=60, interval=0.2, what=f"{name} to be ready")
    return proc


def start_archive_node(archive_prefix: str, archive_options: dict | None = None, **driver_options):
    """An embedded driver (``DRIVER_DEFAULTS`` and ``driver_options``) with an archive (1 MiB segment files,
    and ``archive_options``), a client and an archive client on it: ``(driver, archive, client,
    archive_client)``."""
    drv = sulis.MediaDriver(dir=make_dir(), **{**DRIVER_DEFAULTS, **driver_options})
    archive_dir = make_dir(archive_prefix)
    archive = sulis.Archive(archive_dir, driver_dir=drv.dir,
                            **{"segment_file_length": 1024 * 1024, **(archive_options or {})})
    client = sulis.Client(dir=drv.dir)
    return drv, archive, client, sulis.ArchiveClient(client)


def stop_archive_node(node) -> list[str]:
    """Closes what ``start_archive_node`` started, removes the archive's directory and returns the errors the
    archive logged."""
    drv, archive, client, ac = node
    archive_dir = archive.dir
    ac.close()
    client.close()
    errors = archive.errors()
    archive.close()
    drv.close()
    shutil.rmtree(archive_dir, ignore_errors=True)
    return errors


def keep_dir(d: str, what: str = "driver") -> None:
    """Keeps ``d`` past the session (to look into after a failure) and says where it is."""
    _KEPT_DIRS.add(d)
    print(f"kept {what} directory {d}")


def pytest_sessionfinish(session, exitstatus):
    # Driver directories hold log buffers of up to hundreds of MB in RAM (/dev/shm is memory).
    for d in _MADE_DIRS:
        if d not in _KEPT_DIRS:
            shutil.rmtree(d, ignore_errors=True)


def await_stopped(pid: int, who: str) -> None:
    """Returns once every thread of ``pid`` has stopped after a SIGSTOP; names the threads that had not."""
    await_until(lambda: all_threads_stopped(pid), KERNEL_STALL,
                lambda: f"{who} to stop after SIGSTOP; threads not stopped: {threads_in(pid, ('T', 't'))}")


class Child(ChildProcess):
    """A ``tests/_child.py`` process speaking JSON lines on stdout (the benchmarks' child helper:
    it gets SIGTERM if the test process dies)."""

    def __init__(self, role: str, *args, stdin: bool = False, env: dict | None = None, prefix: list[str] = ()):
        super().__init__([*prefix, sys.executable, CHILD_SCRIPT, role, *map(str, args)], f"child {role}",
                         stdin="pipe" if stdin else "devnull", env=env)
        self.role = role

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.stderr_tail(1_000_000)

    def read(self, timeout: float = 30.0) -> dict:
        """The next JSON line of the child."""
        try:
            line = self.next_line(timeout)
        except TimeoutError:
            raise AssertionError(f"child {self.role} said nothing within {timeout}s; stderr:\n{self.stderr()}") \
                from None
        if line is None:
            self.proc.wait(timeout=10)
            raise AssertionError(f"child {self.role} exited ({self.proc.returncode}); stderr:\n{self.stderr()}")
        return json.loads(line)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def signal(self, sig: int) -> None:
        """Sends ``sig``; a SIGSTOP returns only once every thread of the child has stopped.

        kill(2) returns before the stop takes hold, and a driver thread on the
        other core could still carry out a command sent right after it.
        """
        self.proc.send_signal(sig)
        if sig == signal.SIGSTOP:
            await_stopped(self.pid, f"child {self.role}")

    def kill(self) -> int:
        """SIGKILLs the child and reaps it; returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=30)

    def close(self, grace_s: float = 0.0) -> None:
        """SIGCONT (a stopped child), then SIGKILL: a test's children are not asked to go."""
        with contextlib.suppress(ProcessLookupError):
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)
        self.kill()
        super().close(grace_s=0.0)


def pytest_configure(config):
    config.addinivalue_line("markers",
                            "expect_errors: the test makes the driver log errors (skips the empty-error-log check)")
    config.addinivalue_line("markers", "driver_options(**options): options for the `driver` fixture")


#: Modules by how long they take (the slowest first), from ``--durations=0`` summed per module
#: (2026-11-28, 2,511 worker-seconds in all: test_spark_system.py 427, the JVM source's and sink's modules about
#: 440 and 290 (test_spark_jvm.py was one module of 732), test_spark_hosts.py 243, test_interop_aeron.py 180,
#: then 82, 79, 77, 73 and 72).
LONG_MODULES = {name: rank for rank, name in enumerate([
    "test_spark_system.py", "test_spark_jvm.py", "test_spark_jvm_sink.py", "test_spark_hosts.py",
    "test_interop_aeron.py", "test_docs_snippets.py", "test_cli_bench_aeron.py", "test_examples_system.py",
    "test_cli_bench.py", "test_cluster_members_system.py", "test_multicast_system.py", "test_archive_interop.py",
    "test_multicast_interop.py",
])}


def pytest_collection_modifyitems(config, items):
    # The directory says what a test is: tests/unit (no driver, no process),
    # tests/system (drivers and processes), tests/interop (Aeron Java peers).
    for item in items:
        kind = os.path.basename(os.path.dirname(str(item.path)))
        if kind in ("system", "interop"):
            item.add_marker(getattr(pytest.mark, kind))
    # The longest modules first: with two workers and a module to a worker, one
    # started last (the three-host Spark run takes 3-5 minutes) is the whole
    # run's tail. scripts/test.sh passes --no-loadscope-reorder: by default
    # pytest-xdist orders modules by their number of tests, not this order.
    # The cluster fault test (tests/clusterfaults: three members and clients
    # on two cores) is not among them: started early, it ran beside the
    # three-host Spark run and starved a Spark Python worker past its 10 s
    # connect-back timeout once; in the default order it runs later.
    items.sort(key=lambda item: LONG_MODULES.get(item.path.name, len(LONG_MODULES)))



@pytest.fixture(scope="module", autouse=True)
def _collect_at_module_end():
    """A child process a module started and never waited for warns (ResourceWarning, an error here) only when
    its Popen is collected, which may be during a later module's test on the same worker: collecting at each
    module's end makes the warning fail the module that leaked it."""
    yield
    import gc

    gc.collect()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


def pytest_runtest_logreport(report):
    """With ``SULIS_TEST_FAILURES=<file>``, each failure's report is appended there as it happens (on the
    controller under xdist): a long run stopped half-way, or killed, keeps why its tests failed, which pytest
    prints only at the end."""
    path = os.environ.get("SULIS_TEST_FAILURES")
    # Under xdist the worker's report reaches the controller, which writes it once.
    if path and report.failed and "PYTEST_XDIST_WORKER" not in os.environ:
        with open(path, "a") as f:
            f.write(f"=== {report.nodeid} ({report.when}, {time.strftime('%H:%M:%S')})\n{report.longreprtext}\n"
                    + "".join(f"--- {name}\n{text}\n" for name, text in report.sections) + "\n")


def _test_failed(request) -> bool:
    node = request.node
    return any(getattr(getattr(node, f"rep_{w}", None), "failed", False) for w in ("setup", "call"))


@contextlib.contextmanager
def spark_session(app: str, **config: str):
    """A local[2] SparkSession with ``format("sulis")`` registered and ``config`` set (``spark.executorEnv.X``:
    the Python workers' environment, as on a cluster's executors); stopped after."""
    from pyspark.sql import SparkSession

    import sulis.spark

    saved = {k: os.environ.get(k) for k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    builder = (SparkSession.builder.master("local[2]").appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g"))
    for k, v in config.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    sulis.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def spark():
    """A local[2] SparkSession with ``format("sulis")`` registered, one per test module."""
    with spark_session("sulis-spark-tests") as session:
        yield session


@pytest.fixture
def s3_server(tmp_path):
    """A running S3-compatible object store (S3Proxy, its own process: tests/objectstore.py), killed after the
    test."""
    from objectstore import S3Server

    server = S3Server(tmp_path / "s3")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def make_driver(request):
    """Factory: ``make_driver(**options)`` starts an embedded driver in a fresh directory."""
    drivers: list = []

    def make(dir: str | None = None, **options):
        opts = dict(DRIVER_DEFAULTS)
        opts.update(options)
        drv = sulis.MediaDriver(dir=dir or make_dir(), **opts)
        drivers.append(drv)
        return drv

    yield make
    expect_errors = request.node.get_closest_marker("expect_errors") is not None
    problems = []
    for drv in reversed(drivers):
        dir = drv.dir
        drv.close()
        errors = []
        if not expect_errors and os.path.exists(os.path.join(dir, sulis.CNC_FILE)):
            errors = sulis.read_errors(dir)
        if errors:
            problems.append(f"driver {dir} logged errors:\n" + "\n".join(f"  x{n}: {text}" for n, _, _, text in errors))
        if _test_failed(request) or errors:
            keep_dir(dir)
        else:
            shutil.rmtree(dir, ignore_errors=True)
    if problems:
        pytest.fail("\n".join(problems))


@pytest.fixture
def driver(request, make_driver):
    marker = request.node.get_closest_marker("driver_options")
    return make_driver(**(marker.kwargs if marker else {}))


@pytest.fixture
def make_client(driver):
    """Factory: ``make_client(dir=driver.dir, driver_timeout=10.0)``; every client is closed on teardown."""
    clients: list = []

    def make(dir: str | None = None, driver_timeout: float = 10.0, **kwargs):
        c = sulis.Client(dir=dir or driver.dir, driver_timeout=driver_timeout, **kwargs)
        clients.append(c)
        return c

    yield make
    for c in reversed(clients):
        c.close()


@pytest.fixture
def client(make_client):
    return make_client()


@pytest.fixture
def spawn():
    """Factory: ``spawn(role, *args, stdin=False, env=None, prefix=())`` starts a
    ``tests/_child.py`` process (``prefix``: a command that runs it, e.g. in a namespace)."""
    children: list[Child] = []

    def start(role: str, *args, **kwargs) -> Child:
        child = Child(role, *args, **kwargs)
        children.append(child)
        return child

    yield start
    for child in children:
        child.close()


def connected_pair(client, stream_id: int, exclusive: bool = True, channel: str = "aeron:ipc",
                   sub_channel: str = "aeron:ipc", **sub_kwargs):
    """A subscription (on ``sub_channel``) and a publication (on ``channel``) of ``stream_id``, connected:
    the image is there and the publication may publish (the driver has set its limit, which it does on
    its next duty cycle after the subscriber joins: late on a busy machine, and until then an offer is
    back-pressured)."""
    sub = client.add_subscription(sub_channel, stream_id, **sub_kwargs)
    add = client.add_exclusive_publication if exclusive else client.add_publication
    pub = add(channel, stream_id)
    await_until(lambda: pub.is_connected and sub.image_count > 0 and pub.position_limit > pub.position,
                what="publication and subscription to connect")
    return sub, pub
