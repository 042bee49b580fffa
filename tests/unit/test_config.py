"""Driver options (sulis._native.driver_config and MediaDriver arguments):
values, units, sources and validation. Pure: no driver is started."""

from __future__ import annotations

import os

import pytest

import sulis
from sulis._native import driver_config

DIR = "/dev/shm/sulis-config-test-never-created"


def config(**kwargs) -> dict[str, tuple[str, str]]:
    return {name: (value, source) for name, value, source, _env, _doc in driver_config(dir=DIR, **kwargs)}


@pytest.fixture(autouse=True)
def no_sulis_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("SULIS_"):
            monkeypatch.delenv(k)


def test_every_option_has_an_env_var_a_doc_and_a_default():
    rows = driver_config(dir=DIR)
    names = [r[0] for r in rows]
    assert len(names) == len(set(names))
    for name, _value, source, env, doc in rows:
        assert env == "SULIS_" + name.upper()
        assert not name.endswith("_ns"), "durations are named without a unit"
        assert doc.endswith(".") and len(doc) > 10
        assert source == ("explicit" if name == "dir" else "default")
    defaults = config()
    assert defaults["ipc_term_buffer_length"] == (str(64 << 20), "default")
    assert defaults["client_liveness_timeout"] == ("10s", "default")
    assert defaults["publication_unblock_timeout"] == ("15s", "default")
    assert defaults["threading_mode"] == ("dedicated", "default")


def test_units_and_spellings():
    c = config(ipc_term_buffer_length="1m", client_liveness_timeout=2.5, publication_unblock_timeout="5s",
               timer_interval="250us", term_buffer_sparse_file=True, threading_mode="shared-network")
    assert c["ipc_term_buffer_length"] == ("1048576", "explicit")
    assert c["client_liveness_timeout"] == ("2500ms", "explicit"), "floats are seconds"
    assert c["publication_unblock_timeout"] == ("5s", "explicit")
    assert c["timer_interval"] == ("250us", "explicit")
    assert c["term_buffer_sparse_file"] == ("true", "explicit")
    assert c["threading_mode"] == ("shared-network", "explicit")
    assert config(**{"ipc-term-buffer-length": "128k"})["ipc_term_buffer_length"] == ("131072", "explicit")


def test_environment_and_explicit_sources(monkeypatch):
    monkeypatch.setenv("SULIS_IPC_TERM_BUFFER_LENGTH", "128k")
    monkeypatch.setenv("SULIS_TIMER_INTERVAL", "5ms")
    c = config(timer_interval="7ms")
    assert c["ipc_term_buffer_length"] == ("131072", "environment")
    assert c["timer_interval"] == ("7ms", "explicit"), "explicit beats the environment"
    monkeypatch.setenv("SULIS_IPC_TERM_BUFFER_LENGTH", "lots")
    with pytest.raises(sulis.ConfigurationError, match="SULIS_IPC_TERM_BUFFER_LENGTH=lots"):
        config()


@pytest.mark.parametrize(
    "options,message",
    [
        ({"bogus": 1}, "unknown driver option 'bogus'"),
        ({"term_bufer_length": "64k"},
         "unknown driver option 'term_bufer_length' (did you mean 'term_buffer_length'?)"),
        ({"ipc_term_buffer_length": "100k"}, "ipc_term_buffer_length: term length 102400 must be a power of two"),
        ({"ipc_term_buffer_length": "32k"}, "ipc_term_buffer_length"),
        ({"term_buffer_length": "2g"}, "term_buffer_length"),
        ({"ipc_term_buffer_length": "lots"}, "ipc_term_buffer_length=lots: 'lots' is not a size"),
        ({"client_liveness_timeout": "soon"}, "client_liveness_timeout=soon: 'soon' is not a duration"),
        ({"client_liveness_timeout": -1.0}, "client_liveness_timeout=-1.0: -1.0 is not a duration"),
        ({"publication_linger_timeout": 5}, "publication_linger_timeout=5: a bare number is ambiguous"),
        ({"client_liveness_timeout": "3"}, "client_liveness_timeout=3: '3' is ambiguous: a duration needs a unit"),
        ({"timer_interval": "1.5ns"}, "timer_interval=1.5ns: '1.5ns' is finer than a nanosecond"),
        ({"client_liveness_timeout_ns": "5s"}, "durations are named without a unit, use 'client_liveness_timeout'"),
        ({"timer_interval": float("nan")}, "timer_interval=nan"),
        ({"term_buffer_sparse_file": "yes"}, "term_buffer_sparse_file=yes: 'yes' is not a boolean"),
        ({"ipc_mtu_length": 1400}, "ipc_mtu_length: 1400 must be a multiple of 32"),
        ({"mtu_length": 32}, "mtu_length"),
        ({"file_page_size": "3k"}, "file_page_size"),
        ({"conductor_buffer_length": "1000"}, "conductor_buffer_length: 1000 must be a power of two"),
        ({"clients_buffer_length": "512"}, "clients_buffer_length"),
        ({"counters_buffer_length": "4k"}, "counters_buffer_length"),
        ({"error_buffer_length": "100"}, "error_buffer_length"),
        ({"timer_interval": "0ms"}, "timer_interval must be positive"),
        ({"client_liveness_timeout": "5s", "publication_unblock_timeout": "2s"},
         "publication_unblock_timeout (2s) must be greater than client_liveness_timeout (5s)"),
        ({"client_liveness_timeout": "1s", "publication_unblock_timeout": "1s"}, "must be greater than"),
        ({"threading_mode": "triple"}, "unknown threading mode 'triple'"),
        ({"idle_strategy": "lazy"}, "unknown idle strategy 'lazy'"),
    ],
    ids=lambda x: str(x)[:50],
)
def test_invalid_options_are_refused_naming_the_option(options, message):
    with pytest.raises(sulis.ConfigurationError) as info:
        driver_config(dir=DIR, **options)
    assert message in str(info.value)
    assert "_ns_ns" not in str(info.value)
    # MediaDriver validates the same way before touching the directory.
    with pytest.raises(sulis.ConfigurationError) as again:
        sulis.MediaDriver(dir=DIR, **options)
    assert str(again.value) == str(info.value)
    assert not os.path.exists(DIR)


def test_durations_take_float_seconds_unit_strings_or_zero(monkeypatch):
    c = config(publication_linger_timeout=0, timer_interval=0.001, client_liveness_timeout="1.5s",
               publication_unblock_timeout="20000ms", status_message_timeout=0.0)
    assert c["publication_linger_timeout"] == ("0", "explicit"), "0 needs no unit"
    assert c["timer_interval"] == ("1ms", "explicit")
    assert c["client_liveness_timeout"] == ("1500ms", "explicit")
    assert c["publication_unblock_timeout"] == ("20s", "explicit")
    assert c["status_message_timeout"] == ("0", "explicit")
    # The environment takes the same grammar: a bare number is refused, naming the variable.
    monkeypatch.setenv("SULIS_CLIENT_LIVENESS_TIMEOUT", "3")
    with pytest.raises(sulis.ConfigurationError, match="SULIS_CLIENT_LIVENESS_TIMEOUT=3: '3' is ambiguous"):
        config()
    monkeypatch.setenv("SULIS_CLIENT_LIVENESS_TIMEOUT", "3s")
    assert config()["client_liveness_timeout"] == ("3s", "environment")


def test_idle_strategies_and_threading_modes_parse():
    for idle in ("busy-spin", "yielding", "backoff", "sleeping", "sleeping:1ms"):
        assert config(idle_strategy=idle)["idle_strategy"][1] == "explicit"
    for mode in ("shared", "shared-network", "dedicated", "SHARED", "shared_network"):
        config(threading_mode=mode)


# -- the archive's table (sulis._native.archive_config, sulis.Archive keywords, sulis archive flags) --

def archive(**kwargs) -> dict[str, tuple[str, str]]:
    from sulis._native import archive_config

    return {name: (value, source) for name, value, source, _env, _doc in archive_config("/tmp/a", DIR, **kwargs)}


def test_the_archive_table_names_each_option_once_with_its_variable_and_doc():
    from sulis._native import archive_config

    rows = archive_config()
    names = [r[0] for r in rows]
    assert len(names) == len(set(names))
    own = {"archive_dir": "SULIS_ARCHIVE_DIR", "driver_dir": "SULIS_DIR", "archive_id": "SULIS_ARCHIVE_ID"}
    for name, _value, source, env, doc in rows:
        assert env == own.get(name, "SULIS_ARCHIVE_" + name.upper()), (name, env)
        assert source == "default" and doc.endswith("."), (name, doc)
    # What Aeron users and the old keywords knew are all there (one of them was a keyword without a flag).
    for name in ("control_channel", "replication_channel", "file_sync_level", "threading_mode", "connect_timeout",
                 "record_checksum", "low_storage_space_threshold", "recording_events_enabled"):
        assert name in names


def test_archive_settings_come_from_defaults_the_environment_and_keywords(monkeypatch):
    got = archive()
    assert got["max_concurrent_replays"] == ("20", "default") and got["control_channel"] == ("", "default")
    assert got["connect_timeout"] == ("5s", "default") and got["threading_mode"] == ("shared", "default")
    monkeypatch.setenv("SULIS_ARCHIVE_MAX_CONCURRENT_REPLAYS", "3")
    monkeypatch.setenv("SULIS_ARCHIVE_CONNECT_TIMEOUT", "250ms")
    got = archive(file_sync_level=1, connect_timeout=2.5, replication_channel="aeron:udp?endpoint=localhost:0",
                  segment_file_length="64m", record_checksum="crc32c", archive_id=None)
    assert got["max_concurrent_replays"] == ("3", "environment")
    assert got["connect_timeout"] == ("2500ms", "explicit"), "a keyword beats the environment"
    assert got["replication_channel"] == ("aeron:udp?endpoint=localhost:0", "explicit")
    assert got["segment_file_length"] == (str(64 << 20), "explicit") and got["record_checksum"][0] == "crc32c"
    assert got["catalog_file_sync_level"][0] == "1", "the catalog is synced at least as much as the segments"
    assert got["archive_id"] == ("", "default"), "None leaves an option as it is"


@pytest.mark.parametrize(("options", "message"), [
    ({"file_sync_level": 5}, "file_sync_level=5: 5 is not 0, 1 or 2"),
    ({"colour": "red"}, "unknown archive option 'colour'"),
    ({"connect_timeout_ns": 5}, "durations are named without a unit, use 'connect_timeout'"),
    ({"connect_timeout": 5}, "a bare number is ambiguous for a duration"),
    ({"threading_mode": "triple"}, "archive threading mode 'triple': expected shared or dedicated"),
    ({"record_checksum": "md5"}, "record_checksum=md5"),
    ({"control_channel": "aeron:ipc"}, "control_channel 'aeron:ipc' must be a UDP channel"),
])
def test_a_bad_archive_option_is_refused_naming_it(options, message):
    with pytest.raises(sulis.ConfigurationError, match=message):
        archive(**options)


def test_a_catalog_sync_level_below_the_file_sync_level_is_refused_and_an_unset_one_follows_it(monkeypatch):
    # One rule, the archive's (as Aeron's Archive.Context): refused naming both, not raised.
    with pytest.raises(sulis.ConfigurationError,
                       match="catalog_file_sync_level 1 is below file_sync_level 2"):
        archive(file_sync_level=2, catalog_file_sync_level=1)
    monkeypatch.setenv("SULIS_ARCHIVE_CATALOG_FILE_SYNC_LEVEL", "0")
    with pytest.raises(sulis.ConfigurationError,
                       match="catalog_file_sync_level 0 is below file_sync_level 1"):
        archive(file_sync_level=1)
    monkeypatch.delenv("SULIS_ARCHIVE_CATALOG_FILE_SYNC_LEVEL")
    # Unset, the catalog takes the segments' level; set higher, it keeps its own.
    assert archive(file_sync_level=2)["catalog_file_sync_level"][0] == "2"
    assert archive(file_sync_level=1, catalog_file_sync_level=2)["catalog_file_sync_level"] == ("2", "explicit")


def test_a_bad_archive_variable_is_named():
    env = {**os.environ, "SULIS_ARCHIVE_FILE_SYNC_LEVEL": "9"}
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", "import sulis; sulis.archive_config()"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert "SULIS_ARCHIVE_FILE_SYNC_LEVEL=9: 9 is not 0, 1 or 2" in r.stderr, r.stderr
