"""Invoker threading mode: a MediaDriver with no threads of its own, whose
agents run when the embedding code calls ``do_work()``. Clients work against
it as long as something keeps calling it."""

from __future__ import annotations

import threading

import pytest

import sulis
from conftest import await_until, make_dir


@pytest.fixture
def invoker_driver():
    drv = sulis.MediaDriver(dir=make_dir(), threading_mode="invoker", ipc_term_buffer_length="64k",
                            timer_interval="10ms", term_buffer_sparse_file=True, dir_delete_on_shutdown=True)
    yield drv
    drv.close()


def test_the_driver_does_nothing_until_do_work_is_called(invoker_driver):
    assert invoker_driver.do_work() >= 0
    assert [r for r in invoker_driver.config() if r[0] == "threading_mode"][0][1:3] == ("invoker", "explicit")
    # Nothing answers a client while nobody calls do_work: connect, then an
    # add that waits for the driver times out (short driver timeout here).
    with sulis.Client(dir=invoker_driver.dir, driver_timeout=0.3) as client:
        with pytest.raises(sulis.DriverTimeoutError):
            client.add_publication("aeron:ipc", 5)


def test_clients_work_while_a_thread_calls_do_work(invoker_driver):
    stop = threading.Event()
    cycles = []

    def duty():
        n = 0
        while not stop.is_set():
            invoker_driver.do_work()
            n += 1
        cycles.append(n)

    t = threading.Thread(target=duty)
    t.start()
    try:
        with sulis.Client(dir=invoker_driver.dir) as client:
            sub = client.add_subscription("aeron:ipc", 6)
            pub = client.add_publication("aeron:ipc", 6)
            await_until(lambda: pub.is_connected and sub.image_count == 1)
            for i in range(100):
                while pub.offer(i.to_bytes(4, "little")) < 0:
                    pass
            got: list[int] = []
            await_until(lambda: sub.poll(lambda buf, hdr: got.append(int.from_bytes(bytes(buf), "little")), 100) >= 0
                        and len(got) == 100)
            assert got == list(range(100))
    finally:
        stop.set()
        t.join()
    assert cycles[0] > 0


def test_do_work_is_refused_on_a_threaded_driver_and_idle_once_closed(driver, invoker_driver):
    with pytest.raises(sulis.ConfigurationError, match="threading_mode='invoker'"):
        driver.do_work()
    invoker_driver.close()
    assert invoker_driver.do_work() == 0
