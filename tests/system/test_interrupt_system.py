"""Blocking calls answer Ctrl-C: they wait with the GIL released and run
Python's signal handlers every 20 ms, so KeyboardInterrupt (or whatever a
handler raises) ends them promptly, and nothing stays half-registered."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import sulis
from conftest import COUNTER_TYPE, await_until, make_dir

DRIVER_OPTIONS = '{"threading_mode": "shared", "timer_interval": "10ms", "publication_linger_timeout": "100ms"}'

PUBLISHER_LIMIT = COUNTER_TYPE["pub-lmt"]


@pytest.fixture(autouse=True)
def _default_sigint():
    """Each test starts with Python's own SIGINT handling, whatever ran before it in this worker (a
    SparkContext installs a handler of its own, a library may ignore or block the signal), and leaves
    the worker as it found it."""
    before = signal.getsignal(signal.SIGINT)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before if before is not None else signal.default_int_handler)
        if signal.SIGINT in blocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


class Terminated(Exception):
    """What the tests' signal handlers raise."""


def _sigint_after(seconds: float) -> threading.Thread:
    return _signal_after(seconds, signal.SIGINT)


def _signal_after(seconds: float, signum: int) -> threading.Thread:
    def fire():
        time.sleep(seconds)
        os.kill(os.getpid(), signum)

    t = threading.Thread(target=fire, daemon=True)
    t.start()
    return t


def _settle(fired: threading.Thread) -> None:
    """Waits until the SIGINT of ``_sigint_after`` was sent and handled here: when the call under
    test returned without taking it (a failing test), it must not land in the next test."""
    try:
        fired.join()
        time.sleep(0.05)  # the handler runs between bytecodes of this thread
    except KeyboardInterrupt:
        pass


def test_connecting_to_a_missing_driver_answers_ctrl_c():
    # A directory with no CnC file yet (a driver starting there) is waited for; with none at all the
    # client fails at once, so the wait is made on an empty directory.
    missing = make_dir()
    fired = _sigint_after(0.2)
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            sulis.Client(dir=missing, driver_timeout=30.0)
    finally:
        _settle(fired)
    # Far inside the 30 s it would otherwise wait (the check runs every 20 ms).
    assert time.monotonic() - start < 5.0


def test_a_signal_handler_exception_ends_the_wait_as_raised():
    _handler_ends_the_wait(lambda: sulis.Client(dir=make_dir(), driver_timeout=30.0),
                           signal.SIGINT)


def _publication_counters(dir: str) -> list[dict]:
    return [c for c in sulis.CountersReader(dir).counters() if c["type_id"] == PUBLISHER_LIMIT]


def test_an_add_interrupted_while_the_driver_is_stopped_is_undone(spawn):
    dir = make_dir()
    drv = spawn("driver", dir, DRIVER_OPTIONS)
    drv.read()
    with sulis.Client(dir=dir, driver_timeout=30.0) as client:
        drv.signal(signal.SIGSTOP)
        fired = _sigint_after(0.2)
        try:
            start = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                client.add_publication("aeron:ipc", 5)
            assert time.monotonic() - start < 5.0
        finally:
            _settle(fired)
            drv.signal(signal.SIGCONT)
        # The driver carries the add out when it runs again, then the undo:
        # no publication is left behind, and the client still works.
        sub = client.add_subscription("aeron:ipc", 6)
        await_until(lambda: not _publication_counters(dir), what="the interrupted add to be undone")
        pub = client.add_publication("aeron:ipc", 6)
        await_until(lambda: pub.is_connected and sub.image_count == 1)
        assert [c["registration_id"] for c in _publication_counters(dir)] == [pub.registration_id]


def test_dropping_unclosed_resources_never_waits_for_the_driver(spawn):
    dir = make_dir()
    drv = spawn("driver", dir, DRIVER_OPTIONS)
    drv.read()
    with sulis.Client(dir=dir, driver_timeout=30.0) as client:
        pub = client.add_publication("aeron:ipc", 7)
        xpub = client.add_exclusive_publication("aeron:ipc", 7)
        sub = client.add_subscription("aeron:ipc", 7)
        await_until(lambda s=sub: s.image_count == 2)  # no closure: the del below must drop the last reference
        drv.signal(signal.SIGSTOP)
        try:
            start = time.monotonic()
            del pub, xpub, sub
            # A waiting close would block here until the 30 s driver timeout.
            assert time.monotonic() - start < 5.0
        finally:
            drv.signal(signal.SIGCONT)
        # The removals were sent all the same: the driver drops both publications.
        await_until(lambda: not _publication_counters(dir), what="the dropped publications to be removed")
        assert not client.is_closed


def _close_answers_ctrl_c(spawn, make_resource) -> None:
    dir = make_dir()
    drv = spawn("driver", dir, DRIVER_OPTIONS)
    drv.read()
    with sulis.Client(dir=dir, driver_timeout=30.0) as client:
        resource = make_resource(client)
        drv.signal(signal.SIGSTOP)
        fired = _sigint_after(0.2)
        try:
            start = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                resource.close()
            # The check runs every 20 ms: far inside the 30 s driver timeout.
            assert time.monotonic() - start < 0.2 + 0.5
            assert resource.is_closed, "closed on the client's side all the same"
            resource.close()  # nothing left to wait for
        finally:
            _settle(fired)
            drv.signal(signal.SIGCONT)
        assert not client.is_closed


def test_subscription_close_answers_ctrl_c_while_the_driver_is_stopped(spawn):
    _close_answers_ctrl_c(spawn, lambda client: client.add_subscription("aeron:ipc", 8))


@pytest.mark.parametrize("exclusive", [False, True], ids=["concurrent", "exclusive"])
def test_publication_close_answers_ctrl_c_while_the_driver_is_stopped(spawn, exclusive):
    add = sulis.Client.add_exclusive_publication if exclusive else sulis.Client.add_publication
    _close_answers_ctrl_c(spawn, lambda client: add(client, "aeron:ipc", 9))


def _handler_ends_the_wait(wait, signum: int = signal.SIGTERM) -> None:
    """Runs ``wait()`` (a native wait of 30 s) with a Python handler of ``signum`` that raises ``Terminated``,
    the signal sent 0.2 s in: the handler must end the wait, as raised, not run once the wait's 30 s were over
    (a handler also runs, and raises the same, when a native call that ignored signals finally returns)."""

    def handler(signum, frame):
        raise Terminated(signal.Signals(signum).name)

    old = signal.signal(signum, handler)
    fired = _signal_after(0.2, signum)
    start = time.monotonic()
    try:
        with pytest.raises(Terminated, match=signal.Signals(signum).name):
            wait()
        assert time.monotonic() - start < 15.0
    finally:
        try:
            fired.join()
            time.sleep(0.05)
        except Terminated:
            pass
        signal.signal(signum, old)


@pytest.mark.parametrize("wait", ["archive connect", "cluster connect"])
def test_sigterm_with_a_python_handler_ends_an_archive_or_cluster_wait(driver, client, wait):
    """A service stopped with SIGTERM runs its Python handler during a native wait (the archive's or the
    cluster's answer that never comes)."""
    from conftest import free_udp_port
    from sulis.cluster import ClusterClient

    if wait == "archive connect":
        _handler_ends_the_wait(lambda: sulis.ArchiveClient(client, control_request_channel="aeron:ipc",
                                                     control_request_stream_id=4711, message_timeout=30.0))
    else:
        _handler_ends_the_wait(lambda: ClusterClient(driver.dir, ingress_endpoints=f"0=127.0.0.1:{free_udp_port()}",
                                               egress_channel="aeron:udp?endpoint=127.0.0.1:0",
                                               message_timeout=30.0))


def test_sigterm_with_a_python_handler_ends_a_cluster_nodes_and_the_cluster_tools_waits(driver, tmp_path):
    """A member without a quorum waits in snapshot() for an election that cannot end, and the cluster tool's
    members query for a member that stopped; SIGTERM's handler ends each wait."""
    from conftest import free_udp_port
    from sulis.cluster import ClusteredService, ClusterNode

    class Service(ClusteredService):
        def on_session_message(self, cluster, session_id, timestamp, payload):
            pass

    members = "|".join(f"{i},localhost:{free_udp_port()},localhost:{free_udp_port()},localhost:{free_udp_port()},"
                       f"localhost:0,localhost:8010" for i in range(3))
    with sulis.Archive(str(tmp_path / "archive"), driver_dir=driver.dir):
        with ClusterNode(Service(), tmp_path / "cluster", driver.dir, cluster_members=members,
                         log_term_length="64k") as node:
            _handler_ends_the_wait(lambda: node.snapshot(timeout=30.0))
        # The member stopped, its mark file and driver stay: nobody answers the tool's query.
        _handler_ends_the_wait(lambda: sulis._native.query_cluster_members(str(tmp_path / "cluster"), 30.0))
