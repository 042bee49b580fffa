"""Pieces of the operator tools that need no driver: how a driver's heartbeat
is reported, and the counter descriptions built from sulis._native's tables."""

from __future__ import annotations

import pytest

from sulis import _native
from sulis.cli import _common

NOW_MS = 1_800_000_000_000


def driver(heartbeat_ms: int) -> _common.Driver:
    return _common.Driver(dir="/dev/shm/x", pid=42, start_ms=NOW_MS - 3_600_000, cnc_version="0.2.0",
                          heartbeat_ms=heartbeat_ms, read_ms=NOW_MS, reader=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("ms,text", [(0, "0 ms"), (999, "999 ms"), (1000, "1.0 s"), (12_345, "12.3 s"),
                                     (90_000, "1.5 min"), (5_400_000, "1.5 h"), (30 * 3_600_000, "30.0 h"),
                                     (3 * 86_400_000, "3.0 days")])
def test_age_reads_like_a_duration(ms, text):
    assert _common.age(ms) == text


def test_a_live_driver_shows_its_heartbeat_age_in_ms():
    d = driver(NOW_MS - 7)
    assert d.alive and d.heartbeat_age_ms == 7
    assert _common.heartbeat_text(d) == "heartbeat 7 ms ago"
    assert d.header()["alive"] is True and d.header()["heartbeat_age_ms"] == 7


def test_a_stopped_driver_shows_how_long_ago_it_last_beat():
    d = driver(NOW_MS - 12_345)
    assert not d.alive
    assert _common.heartbeat_text(d) == "driver stopped; last heartbeat 12.3 s ago"
    assert d.header()["alive"] is False and d.header()["heartbeat_age_ms"] == 12_345


def test_a_driver_whose_process_is_gone_stops_showing_live_after_a_second_not_ten():
    import os
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(gone.stdout)

    def at(age_ms: int, pid: int) -> _common.Driver:
        return _common.Driver(dir="/dev/shm/x", pid=pid, start_ms=NOW_MS - 3_600_000, cnc_version="0.2.0",
                              heartbeat_ms=NOW_MS - age_ms, read_ms=NOW_MS, reader=None)  # type: ignore[arg-type]

    assert at(500, dead_pid).alive, "a fresh heartbeat is trusted (the driver may be in another PID namespace)"
    assert not at(2_000, dead_pid).alive, "a second without a beat, and no process: stopped"
    assert at(2_000, os.getpid()).alive, "a stall with the process there: still live until the timeout"
    assert not at(12_000, os.getpid()).alive


def test_streams_never_show_a_negative_backlog():
    from sulis.cli.streams import _minus

    assert _minus(1024, 1024 + 64) == 0, "a reader read past the source's position sampled before it"
    assert _minus(4096, 1024) == 3072
    assert _minus(None, 5) is None and _minus(5, None) is None


def test_a_cleared_or_never_written_heartbeat_is_no_age():
    d = driver(0)  # a driver clears its heartbeat when it shuts down
    assert not d.alive and d.heartbeat_age_ms is None
    text = _common.heartbeat_text(d)
    assert text.startswith("driver stopped; no heartbeat") and str(NOW_MS // 1000) not in text
    assert d.header()["heartbeat_age_ms"] is None
    assert str(NOW_MS)[:6] not in _common.driver_line(d), "no epoch time shown as an age"


def test_a_heartbeat_ahead_of_the_clock_is_no_negative_age():
    assert driver(NOW_MS + 5).heartbeat_age_ms == 0


def test_counter_types_come_from_the_native_table():
    assert _common.TYPE_NAMES == dict(_native.counter_types())
    assert _common.STREAM_TYPES == {t for t, _ in _native.counter_types() if _native.is_stream_counter_type(t)}
    assert _common.SYSTEM not in _common.STREAM_TYPES and _common.CLIENT_HEARTBEAT not in _common.STREAM_TYPES
    assert _common.default_dir() == _native.default_dir()


def stream_counter(type_id: int, label: str, key_channel: str, registration_id=7, session_id=-3, stream_id=10):
    channel = key_channel.encode()
    key = (registration_id.to_bytes(8, "little", signed=True) + session_id.to_bytes(4, "little", signed=True)
           + stream_id.to_bytes(4, "little", signed=True) + len(channel).to_bytes(4, "little") + channel)
    return {"id": 50, "type_id": type_id, "label": label, "value": 0, "registration_id": registration_id,
            "owner_id": 0, "reference_id": 0, "key": key}


def test_a_cut_channel_is_completed_from_the_label_and_a_join_position_read():
    full = "aeron:udp?endpoint=localhost:40123|alias=" + "x" * 80
    c = _common.describe(stream_counter(_common.SUBSCRIBER_POSITION, f"sub-pos: 7 -3 10 {full} @-64", full[:92]))
    assert (c["type"], c["channel"], c["join_position"], c["session_id"]) == ("sub-pos", full, -64, -3)
    # A label that names another stream is not trusted for the channel.
    c = _common.describe(stream_counter(_common.PUBLISHER_LIMIT, f"pub-lmt: 8 -3 10 {full}", full[:92]))
    assert c["channel"] == full[:92] and "join_position" not in c


@pytest.mark.parametrize("address,parsed", [(":9464", ("127.0.0.1", 9464)), ("0.0.0.0:0", ("0.0.0.0", 0)),
                                            ("[::]:80", ("::", 80)), ("[::1]:1", ("::1", 1)),
                                            ("example.org:9", ("example.org", 9))])
def test_prometheus_address_defaults_to_loopback(address, parsed):
    from sulis.cli.prometheus import parse_address, reach

    assert parse_address(address) == parsed
    assert reach("127.0.0.1").startswith("loopback only") and reach("::1").startswith("loopback only")
    assert reach("0.0.0.0").startswith("all interfaces") and reach("::").startswith("all interfaces")
    assert reach("10.1.2.3") == "interface 10.1.2.3 only"


def test_bench_ping_pong_checks_for_hdrhistogram_before_starting_anything(monkeypatch):
    import sys

    from click.testing import CliRunner

    from sulis.cli import bench, main

    def started(plan):
        raise AssertionError("the bench started without the package it needs for its report")

    monkeypatch.setattr(bench, "_run", started)
    monkeypatch.setitem(sys.modules, "hdrh", None)  # as if not installed
    out = CliRunner().invoke(main, ["bench", "ping-pong", "--round-trips", "10"])
    assert out.exit_code == 1, out.output
    assert "hdrhistogram" in out.output and "pip install 'sulis[bench]'" in out.output


@pytest.mark.parametrize("argv", [["driver", "--dir", "{file}"], ["archive", "--archive-dir", "{file}", "--dir",
                                                                  "{tmp}/no-driver"]],
                         ids=["driver", "archive"])
def test_a_service_command_that_fails_gives_back_the_signal_handlers(tmp_path, argv):
    """Called from Python (a test, a notebook), `sulis driver` or `sulis archive` that cannot start must
    leave SIGINT and SIGTERM as they were: before, its flag-only handlers stayed, and Ctrl-C did
    nothing in that process from then on."""
    import signal

    from click.testing import CliRunner

    from sulis.cli import main

    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    args = [a.format(file=a_file, tmp=tmp_path) for a in argv]
    out = CliRunner().invoke(main, args)
    assert out.exit_code != 0, out.output
    assert {sig: signal.getsignal(sig) for sig in before} == before
