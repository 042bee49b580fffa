"""The operator tools ``sulis stat``, ``sulis streams``, ``sulis errors`` and
``sulis stat --prometheus``, run as separate processes (``python -m
sulis.cli``) against live embedded drivers in the test process with real
traffic: their JSON is checked against the driver's own state."""

from __future__ import annotations

import datetime
import itertools
import json
import os
import pty
import queue
import re
import signal
import socket
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

import sulis
from conftest import CLI, COUNTER_TYPE, await_until, clean_env, connected_pair
from conftest import free_udp_port as free_port  # the tests' one port helper
from conftest import run_cli as run
from sulis._native import is_stream_counter_type

prometheus_parser = pytest.importorskip("prometheus_client.parser")

TOOLS = ["stat", "streams", "errors"]
INVALID_PACKETS = 14
UDP_OPTIONS = {"term_buffer_length": "1m", "publication_connection_timeout": "500ms",
               "image_liveness_timeout": "1s"}


def run_json(*args, env=None) -> dict:
    out = run(*args, "--json", env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def counters_by_id(dir: str) -> dict[int, dict]:
    return {c["id"]: c for c in sulis.CountersReader(dir).counters()}


def value_of(dir: str, type_name: str, registration_id: int) -> int | None:
    """The value of the counter of type ``type_name`` ("pub-pos", ...) for ``registration_id``."""
    for c in sulis.CountersReader(dir).counters():
        if c["type_id"] == COUNTER_TYPE[type_name] and c["registration_id"] == registration_id:
            return c["value"]
    return None


def offer_all(pub, count: int, size: int = 100) -> None:
    for i in range(count):
        await_until(lambda i=i: pub.offer(bytes([i % 256]) * size) > 0, what=f"offer of message {i}")


def drain(sub, expected: int) -> None:
    got = []
    await_until(lambda: sub.poll(lambda b, h: got.append(len(b)), 100) >= 0 and len(got) >= expected,
                what=f"{expected} messages")
    assert len(got) == expected


# -- every tool ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", TOOLS)
def test_help_lists_the_common_flags(tool):
    out = run(tool, "--help")
    assert out.returncode == 0, out.stderr
    for flag in ("--dir", "--json", "--help"):
        assert flag in out.stdout
    top = run("--help")
    assert tool in top.stdout


@pytest.mark.parametrize("args", [["stat", "--once"], ["stat"], ["stat", "--prometheus", "127.0.0.1:0"],
                                  ["streams"], ["errors"], ["errors", "--json"]])
def test_no_driver_exits_non_zero_naming_the_directory(make_driver, args, tmp_path):
    missing = str(tmp_path / "never-a-driver")
    out = run(*args, "--dir", missing)
    assert out.returncode != 0
    assert f"no media driver in {missing}" in out.stderr and "does not exist" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr

    # The default directory is $SULIS_DIR, as for clients and `sulis driver`.
    out = run(*args, env=clean_env(SULIS_DIR=missing))
    assert out.returncode != 0 and missing in out.stderr, out.stderr

    # A stopped driver leaves its cnc.dat behind: that is no driver either.
    drv = make_driver()
    drv.close()
    assert os.path.exists(os.path.join(drv.dir, sulis.CNC_FILE))
    out = run(*args, "--dir", drv.dir)
    assert out.returncode != 0
    assert f"no media driver running in {drv.dir}" in out.stderr and "stopped" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


# -- sulis stat ----------------------------------------------------------------------------------


def test_stat_once_json_is_the_drivers_counters_and_follows_the_traffic(driver, client):
    sub, pub = connected_pair(client, 1001)
    offer_all(pub, 20)
    drain(sub, 20)
    await_until(lambda: value_of(driver.dir, "pub-pos", pub.registration_id) == pub.position, what="pub-pos sample")

    doc = run_json("stat", "--once", "--dir", driver.dir)
    assert doc["dir"] == driver.dir and doc["cnc_version"] == "0.2.0"
    assert doc["pid"] == os.getpid(), "the driver is embedded in this (the test) process"
    truth = counters_by_id(driver.dir)
    got = {c["id"]: c for c in doc["counters"]}
    assert set(got) == set(truth)
    for cid, c in got.items():
        for field in ("type_id", "label", "registration_id", "owner_id", "reference_id"):
            assert c[field] == truth[cid][field], (cid, field)
    # system counters: fixed ids, Aeron's labels
    system = [c for c in doc["counters"] if c["type"] == "system"]
    assert [c["id"] for c in system][:46] == list(range(46))
    assert all(c["type_id"] == COUNTER_TYPE["system"] for c in system)
    assert got[5]["label"] == "NAKs sent" and got[14]["label"] == "Invalid packets"

    # the stream counters, from their keys
    by_type = {c["type"]: c for c in doc["counters"] if c.get("stream_id") == 1001}
    assert set(by_type) == {"pub-lmt", "pub-pos", "sub-pos"}
    for name in ("pub-lmt", "pub-pos"):
        c = by_type[name]
        assert (c["registration_id"], c["session_id"], c["stream_id"], c["channel"]) == \
            (pub.registration_id, pub.session_id, 1001, "aeron:ipc")
    assert by_type["pub-pos"]["value"] == pub.position
    assert by_type["pub-lmt"]["value"] == pub.position_limit
    sub_pos = by_type["sub-pos"]
    assert (sub_pos["registration_id"], sub_pos["session_id"], sub_pos["reference_id"]) == \
        (sub.registration_id, pub.session_id, pub.registration_id)
    assert sub_pos["value"] == sub.images[0].position == pub.position
    assert sub_pos["join_position"] == 0
    heartbeat = [c for c in doc["counters"] if c["type"] == "client-heartbeat"]
    assert [c["client_id"] for c in heartbeat] == [client.client_id]

    # more traffic: the values move with it
    before = pub.position
    offer_all(pub, 30)
    await_until(lambda: value_of(driver.dir, "pub-pos", pub.registration_id) == pub.position, what="pub-pos sample")
    doc = run_json("stat", "--once", "--dir", driver.dir, "--type", "pub-pos", "--type", "sub-pos")
    now = {c["type"]: c["value"] for c in doc["counters"]}
    assert now == {"pub-pos": pub.position, "sub-pos": before}
    assert pub.position > before


def test_stat_shows_the_client_name_in_its_heartbeat_label(driver, make_client):
    named = make_client(name="order-gateway 7")
    unnamed = make_client()
    labels = {}

    def both_labelled():
        doc = run_json("stat", "--once", "--dir", driver.dir, "--type", "client-heartbeat")
        labels.update({c["client_id"]: c["label"] for c in doc["counters"]})
        return labels.get(named.client_id, "").endswith("name=order-gateway 7") and unnamed.client_id in labels

    # The client appends its name once it has found the counter the driver made for it.
    await_until(both_labelled, what="the named client's heartbeat label")
    assert labels[named.client_id] == f"client-heartbeat: id={named.client_id} name=order-gateway 7"
    assert labels[unnamed.client_id] == f"client-heartbeat: id={unnamed.client_id}"
    text = run("stat", "--once", "--dir", driver.dir, "--type", "client-heartbeat")
    assert "name=order-gateway 7" in text.stdout


@pytest.mark.parametrize(("name", "error"), [("x" * 101, "101 bytes, the longest client name is 100"),
                                             ("two\nlines", "control character")])
def test_client_name_that_cannot_be_a_label_is_refused(driver, name, error):
    with pytest.raises(sulis.ConfigurationError, match=error) as info:
        sulis.Client(dir=driver.dir, name=name)
    assert "name=" in str(info.value)


def test_stat_filters(driver, client):
    sub_a, pub_a = connected_pair(client, 2001)
    sub_b, pub_b = connected_pair(client, 2002)

    def ids(*args) -> set[int]:
        return {c["id"] for c in run_json("stat", "--once", "--dir", driver.dir, *args)["counters"]}

    truth = counters_by_id(driver.dir)
    assert ids("--type", "system") == {i for i, c in truth.items() if c["type_id"] == COUNTER_TYPE["system"]}
    assert ids("--type", "client") == {i for i, c in truth.items() if c["type_id"] == COUNTER_TYPE["client-heartbeat"]}
    assert ids("--type", "4") == ids("--type", "sub-pos") == \
        {i for i, c in truth.items() if c["type_id"] == COUNTER_TYPE["sub-pos"]}
    stream_a = ids("--stream", "2001")
    assert {truth[i]["registration_id"] for i in stream_a} == {pub_a.registration_id, sub_a.registration_id}
    assert len(stream_a) == 3
    assert ids("--type", "stream") == stream_a | ids("--stream", "2002")
    assert ids("--session", str(pub_b.session_id)) == ids("--stream", "2002")
    assert ids("--label", "^NAKs") == {5, 6}
    assert ids("--label", "^NAKs", "--type", "stream") == set()

    bad = run("stat", "--once", "--dir", driver.dir, "--type", "nonsense")
    assert bad.returncode == 2 and "--type" in bad.stderr
    bad = run("stat", "--once", "--dir", driver.dir, "--label", "(")
    assert bad.returncode == 2 and "--label" in bad.stderr


class Traffic:
    """Offers and polls a stream on a thread until stopped."""

    def __init__(self, pub, sub):
        self.pub, self.sub, self.stop = pub, sub, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.pub.offer(b"z" * 200)
            self.sub.poll(lambda b, h: None, 100)
            self.stop.wait(0.0002)

    def close(self):
        self.stop.set()
        self.thread.join()


def test_stat_live_prints_successive_samples_with_rates_when_not_a_terminal(driver, client):
    sub, pub = connected_pair(client, 3001)
    traffic = Traffic(pub, sub)
    try:
        out = run("stat", "--dir", driver.dir, "--json", "--count", "3", "--interval", "0.3", "--stream", "3001")
    finally:
        traffic.close()
    assert out.returncode == 0, out.stderr
    samples = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(samples) == 3, "one JSON document per line, one per sample"
    first = {c["type"]: c for c in samples[0]["counters"]}
    assert all(c["rate_per_second"] is None for c in first.values()), "no rate before a second sample"
    for prev, cur in itertools.pairwise(samples):
        p = {c["type"]: c for c in prev["counters"]}
        c = {c["type"]: c for c in cur["counters"]}
        for name in ("pub-pos", "sub-pos"):
            assert c[name]["value"] > p[name]["value"], f"{name} moves with the traffic"
            assert c[name]["rate_per_second"] > 0

    # The table: plain successive blocks, no terminal control sequences.
    out = run("stat", "--dir", driver.dir, "--count", "2", "--interval", "0.05")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout
    assert out.stdout.count("sulis stat ") == 2
    assert f"driver {driver.dir}  pid {os.getpid()}" in out.stdout
    assert re.search(r"^\s*5\s+system\s+0\s+\S*\s*NAKs sent$", out.stdout, re.M), out.stdout
    assert re.search(r"^\s*\d+\s+pub-pos\s+[\d,]+\s+[\d,]+\s+pub-pos \(sampled\) exclusive: ", out.stdout, re.M)


def test_stat_redraws_in_place_on_a_terminal(driver):
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CLI, "stat", "--dir", driver.dir, "--count", "2", "--interval", "0.05"],
                            stdout=slave, stderr=subprocess.PIPE, env=clean_env(COLUMNS="120", LINES="30"))
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
        os.close(master)
    screen = b"".join(chunks).decode()
    assert screen.count("\x1b[H") == 2, "each sample is drawn from the top of the screen"
    assert screen.count("sulis stat ") == 2
    assert screen.endswith("\x1b[?25h\r\n"), "the cursor is given back"
    assert "more lines" in screen, "a table taller than the terminal is cut to fit"


# -- sulis streams -------------------------------------------------------------------------------


def test_streams_groups_ipc_streams_and_computes_backlogs(driver, client):
    reader_sub = client.add_subscription("aeron:ipc", 4001)
    idle_sub = client.add_subscription("aeron:ipc", 4001)
    pub_a = client.add_exclusive_publication("aeron:ipc", 4001)
    pub_b = client.add_exclusive_publication("aeron:ipc", 4001)  # same stream, another session
    other_sub, other_pub = connected_pair(client, 4002)
    await_until(lambda: pub_a.is_connected and pub_b.is_connected
                and reader_sub.image_count == 2 and idle_sub.image_count == 2)
    offer_all(pub_a, 40)
    offer_all(pub_b, 10, size=500)
    drain(reader_sub, 50)
    await_until(lambda: all(value_of(driver.dir, "pub-pos", p.registration_id) == p.position for p in (pub_a, pub_b)),
                what="pub-pos samples")

    doc = run_json("streams", "--dir", driver.dir)
    keys = [(s["channel"], s["stream_id"], s["session_id"]) for s in doc["streams"]]
    assert sorted(keys) == sorted([("aeron:ipc", 4001, pub_a.session_id), ("aeron:ipc", 4001, pub_b.session_id),
                                   ("aeron:ipc", 4002, other_pub.session_id)])
    for pub in (pub_a, pub_b):
        (s,) = [s for s in doc["streams"] if s["session_id"] == pub.session_id]
        assert s["media"] == "ipc" and s["sender"] is None and s["receiver"] is None
        assert s["publisher"] == {"registration_id": pub.registration_id, "position": pub.position,
                                  "limit": pub.position_limit}
        subs = {x["registration_id"]: x for x in s["subscribers"]}
        assert set(subs) == {reader_sub.registration_id, idle_sub.registration_id}
        assert subs[reader_sub.registration_id]["position"] == pub.position
        assert subs[reader_sub.registration_id]["backlog"] == 0
        assert subs[idle_sub.registration_id]["position"] == 0
        assert subs[idle_sub.registration_id]["backlog"] == pub.position > 0
        for x in s["subscribers"]:
            assert x["backlog"] == s["publisher"]["position"] - x["position"]

    only = run_json("streams", "--dir", driver.dir, "--stream", "4002")["streams"]
    assert [(s["session_id"], [x["registration_id"] for x in s["subscribers"]]) for s in only] == \
        [(other_pub.session_id, [other_sub.registration_id])]

    table = run("streams", "--dir", driver.dir, "--stream", "4001", "--session", str(pub_a.session_id))
    assert table.returncode == 0, table.stderr
    assert f"aeron:ipc  stream 4001  session {pub_a.session_id}  (ipc)" in table.stdout
    assert re.search(rf"^\s+subscriber\s+{idle_sub.registration_id}\s+0\s+{pub_a.position:,}$", table.stdout, re.M), \
        table.stdout
    assert table.stdout.rstrip().endswith("1 stream")


def test_streams_over_udp_between_two_drivers(make_driver, make_client):
    port = free_port()
    sub_driver, pub_driver = make_driver(**UDP_OPTIONS), make_driver(**UDP_OPTIONS)
    channel = f"aeron:udp?endpoint=127.0.0.1:{port}"
    sub = make_client(dir=sub_driver.dir).add_subscription(channel, 5001)
    pub = make_client(dir=pub_driver.dir).add_exclusive_publication(channel, 5001)
    await_until(lambda: pub.is_connected and sub.image_count == 1, what="UDP publication to connect")
    offer_all(pub, 50, size=300)
    image = sub.images[0]
    await_until(lambda: value_of(pub_driver.dir, "pub-pos", pub.registration_id) == pub.position
                and value_of(pub_driver.dir, "snd-pos", pub.registration_id) == pub.position
                and value_of(sub_driver.dir, "rcv-pos", image.correlation_id) == pub.position,
                what="the stream to reach the receiver")

    (sending,) = run_json("streams", "--dir", pub_driver.dir)["streams"]
    assert (sending["channel"], sending["stream_id"], sending["session_id"], sending["media"]) == \
        (channel, 5001, pub.session_id, "udp")
    assert sending["publisher"]["position"] == sending["sender"]["position"] == pub.position
    assert sending["sender"]["backlog"] == 0
    assert sending["sender"]["limit"] >= pub.position
    assert sending["receiver"] is None and sending["subscribers"] == []

    (receiving,) = run_json("streams", "--dir", sub_driver.dir)["streams"]
    assert (receiving["channel"], receiving["stream_id"], receiving["session_id"]) == (channel, 5001, pub.session_id)
    assert receiving["publisher"] is None and receiving["sender"] is None
    rcv = receiving["receiver"]
    assert rcv == {"registration_id": image.correlation_id, "hwm": pub.position, "position": pub.position,
                   "backlog": 0}
    (subscriber,) = receiving["subscribers"]
    assert subscriber["registration_id"] == sub.registration_id
    assert subscriber["position"] == image.position == image.join_position
    assert subscriber["backlog"] == pub.position - image.join_position > 0, "nothing polled yet"

    drain(sub, 50)
    (receiving,) = run_json("streams", "--dir", sub_driver.dir)["streams"]
    assert receiving["subscribers"][0]["position"] == pub.position
    assert receiving["subscribers"][0]["backlog"] == 0


def test_streams_a_udp_stream_within_one_driver_is_one_stream(driver, client):
    # A channel longer than a counter key holds (92 bytes): its counters' keys have it cut short.
    channel = (f"aeron:udp?endpoint=127.0.0.1:{free_port()}"
               "|so-sndbuf=262144|so-rcvbuf=262144|rcv-wnd=65536|reliable=true|ttl=0")
    assert len(channel) > 92
    sub, pub = connected_pair(client, 5002, channel=channel, sub_channel=channel)
    offer_all(pub, 10)
    image = sub.images[0]
    await_until(lambda: value_of(driver.dir, "pub-pos", pub.registration_id) == pub.position
                and value_of(driver.dir, "rcv-pos", image.correlation_id) == pub.position)
    (s,) = run_json("streams", "--dir", driver.dir)["streams"]
    assert s["channel"] == channel
    assert s["publisher"]["registration_id"] == pub.registration_id
    assert s["receiver"]["registration_id"] == image.correlation_id
    assert s["sender"]["position"] == s["receiver"]["position"] == pub.position
    assert [x["registration_id"] for x in s["subscribers"]] == [sub.registration_id]
    assert s["subscribers"][0]["backlog"] == s["receiver"]["position"] - s["subscribers"][0]["position"] > 0
    stream_counters = run_json("stat", "--once", "--dir", driver.dir, "--type", "stream")["counters"]
    assert {c["type"] for c in stream_counters} == {"pub-lmt", "pub-pos", "snd-pos", "snd-lmt", "rcv-hwm", "rcv-pos",
                                                    "sub-pos"}
    assert all(c["channel"] == channel for c in stream_counters)
    key_channels = {c["key"][20:20 + int.from_bytes(c["key"][16:20], "little")]
                    for c in sulis.CountersReader(driver.dir).counters() if is_stream_counter_type(c["type_id"])}
    assert key_channels == {channel.encode()[:92]}


# -- sulis errors --------------------------------------------------------------------------------


@pytest.mark.expect_errors
def test_errors_lists_a_repeated_error_once_with_its_count(driver, client):
    port = free_port()
    sub = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", 6001)  # kept: it holds the endpoint
    reader = sulis.CountersReader(driver.dir)
    assert reader.label(INVALID_PACKETS) == "Invalid packets"
    assert run_json("errors", "--dir", driver.dir)["errors"] == []

    sends = 25
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
        for i in range(sends):  # one at a time: none can be lost in the socket buffer
            attacker.sendto(b"junk!", ("127.0.0.1", port))
            await_until(lambda i=i: reader.value(INVALID_PACKETS) == i + 1, what=f"datagram {i + 1} to be rejected")
        source = f"127.0.0.1:{attacker.getsockname()[1]}"

    doc = run_json("errors", "--dir", driver.dir)
    assert doc["distinct_errors"] == 1 and doc["observations"] == sends
    (entry,) = doc["errors"]
    assert entry["count"] == sends
    assert f"invalid datagram from {source} on receive endpoint 127.0.0.1:{port}" in entry["text"]
    assert "datagram_length=5" in entry["text"]
    assert entry["first_ms"] <= entry["last_ms"]
    assert (entry["count"], entry["first_ms"], entry["last_ms"], entry["text"]) == sulis.read_errors(driver.dir)[0]
    for when in ("first", "last"):  # human-readable, and the same instant
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d", entry[when]), entry[when]
        assert round(datetime.datetime.fromisoformat(entry[when]).timestamp() * 1000) == entry[f"{when}_ms"]

    text = run("errors", "--dir", driver.dir)
    assert text.returncode == 0, text.stderr
    assert f"{sends} observations from {entry['first']} to {entry['last']}:" in text.stdout
    assert text.stdout.rstrip().endswith("1 distinct error observed.")

    # After the driver stops, its error log can still be read on request.
    sub.close()
    driver.close()
    assert run("errors", "--dir", driver.dir).returncode != 0
    post = run_json("errors", "--dir", driver.dir, "--allow-stopped")
    assert post["errors"] == doc["errors"]
    # A driver clears its heartbeat when it shuts down: no age to show, not the epoch.
    assert (post["alive"], post["heartbeat_age_ms"], doc["alive"]) == (False, None, True)
    for tool in ("errors", "loss"):
        text = run(tool, "--dir", driver.dir, "--allow-stopped")
        assert text.returncode == 0, text.stderr
        assert "driver stopped; no heartbeat" in text.stdout.splitlines()[0], text.stdout


# -- sulis stat --prometheus ---------------------------------------------------------------------


class Exporter:
    """``sulis stat --prometheus 127.0.0.1:0`` in a child process."""

    def __init__(self, dir: str, address: str = "127.0.0.1:0"):
        self.proc = subprocess.Popen([*CLI, "stat", "--dir", dir, "--prometheus", address],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
        self.lines: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.said = self.lines.get(timeout=60) or ""
        m = re.search(r"at http://([0-9.]+):(\d+)/metrics", self.said)
        assert m, f"exporter said {self.said!r}"
        self.host, self.port = m.group(1), int(m.group(2))
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def _read(self):
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def scrape(self) -> dict[str, object]:
        with urllib.request.urlopen(self.url, timeout=30) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain")
            text = r.read().decode()
        return {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}

    def close(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.reader.join(timeout=10)
            self.proc.stdout.close()
            self.proc.stderr.close()


def samples(family, name: str | None = None) -> list:
    return [s for s in family.samples if name is None or s.name == name]


def test_prometheus_endpoint_serves_fresh_counters_and_survives_the_driver(make_driver, make_client):
    drv = make_driver()
    client = make_client(dir=drv.dir)
    sub, pub = connected_pair(client, 7001)
    offer_all(pub, 20)
    await_until(lambda: value_of(drv.dir, "pub-pos", pub.registration_id) == pub.position, what="pub-pos sample")
    exporter = Exporter(drv.dir)
    try:
        metrics = exporter.scrape()
        assert samples(metrics["sulis_driver_up"])[0].value == 1
        for name, label in (("sulis_naks_sent", "NAKs sent"), ("sulis_bytes_sent", "Bytes sent"),
                            ("sulis_invalid_packets", "Invalid packets")):
            family = metrics[name]
            assert family.type == "counter" and family.documentation == label
            (s,) = samples(family, name + "_total")
        truth = counters_by_id(drv.dir)
        assert samples(metrics["sulis_status_messages_sent"])[0].value == truth[7]["value"]
        assert metrics["sulis_bytes_currently_mapped"].type == "gauge"

        positions = {(s.labels["type"], s.labels["registration_id"]): s
                     for s in samples(metrics["sulis_stream_position"])}
        pos = positions[("pub-pos", str(pub.registration_id))]
        assert pos.labels == {"type": "pub-pos", "channel": "aeron:ipc", "stream_id": "7001",
                              "session_id": str(pub.session_id), "registration_id": str(pub.registration_id)}
        assert pos.value == pub.position
        assert positions[("pub-lmt", str(pub.registration_id))].value == pub.position_limit
        assert positions[("sub-pos", str(sub.registration_id))].value == 0
        backlog = {s.labels["party"]: s for s in samples(metrics["sulis_stream_backlog_bytes"])}
        assert backlog["subscriber"].value == pub.position
        (heartbeat,) = samples(metrics["sulis_client_heartbeat_timestamp_seconds"])
        assert heartbeat.labels == {"client_id": str(client.client_id)}

        # every scrape reads the counters afresh
        drain(sub, 20)
        offer_all(pub, 5)
        await_until(lambda: value_of(drv.dir, "pub-pos", pub.registration_id) == pub.position, what="pub-pos sample")
        metrics = exporter.scrape()
        positions = {(s.labels["type"], s.labels["registration_id"]): s.value
                     for s in samples(metrics["sulis_stream_position"])}
        assert positions[("pub-pos", str(pub.registration_id))] == pub.position
        assert positions[("sub-pos", str(sub.registration_id))] == sub.images[0].position < pub.position

        # the driver goes away: scrapes still answer, with up = 0
        client.close()
        drv.close()
        metrics = exporter.scrape()
        assert samples(metrics["sulis_driver_up"])[0].value == 0
        assert "sulis_stream_position" not in metrics
        assert exporter.proc.poll() is None

        # and a new driver in the same directory is picked up
        make_driver(dir=drv.dir)
        metrics = exporter.scrape()
        assert samples(metrics["sulis_driver_up"])[0].value == 1
        assert samples(metrics["sulis_stream_position"]) == []
    finally:
        status = exporter.close()
    assert status == 0, "SIGTERM stops the exporter cleanly"


def test_prometheus_address_errors():
    for address, words in (("nonsense", "HOST:PORT"), ("127.0.0.1:http", "port number")):
        out = run("stat", "--dir", "/dev/shm/x", "--prometheus", address)
        assert out.returncode == 2 and words in out.stderr, out.stderr


def this_hosts_address() -> str | None:
    """An address of this host other than loopback, if it has one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the outgoing interface
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") else address


def test_prometheus_listens_on_loopback_unless_given_an_address(driver):
    assert "loopback" in run("stat", "--help").stdout
    exporter = Exporter(driver.dir, ":0")
    try:
        assert exporter.host == "127.0.0.1", exporter.said
        assert "loopback only" in exporter.said and "0.0.0.0:PORT" in exporter.said, exporter.said
        assert samples(exporter.scrape()["sulis_driver_up"])[0].value == 1
        other = this_hosts_address()
        if other is not None:  # not reachable from another interface
            with pytest.raises(OSError), socket.create_connection((other, exporter.port), timeout=5):
                pass
    finally:
        assert exporter.close() == 0

    exporter = Exporter(driver.dir, "0.0.0.0:0")
    try:
        assert exporter.host == "0.0.0.0" and "all interfaces" in exporter.said, exporter.said
        assert samples(exporter.scrape()["sulis_driver_up"])[0].value == 1
    finally:
        assert exporter.close() == 0


def test_prometheus_exports_a_cluster_members_counters(make_driver, tmp_path):
    from sulis.cluster import ClusteredService, ClusterNode

    class Nothing(ClusteredService):
        def on_take_snapshot(self, cluster, snapshot):
            snapshot.write(b"no state")

    drv = make_driver()
    members = f"0,localhost:{free_port()},localhost:{free_port()},localhost:20003,localhost:0,localhost:8010"
    with sulis.Archive(str(tmp_path / "archive"), driver_dir=drv.dir), \
            ClusterNode(Nothing(), tmp_path / "cluster", drv.dir, cluster_members=members,
                        log_term_length="64k") as node:
        node.snapshot()
        exporter = Exporter(drv.dir)
        try:
            metrics = exporter.scrape()
            value = {name: samples(metrics[name])[0] for name in (
                "sulis_cluster_module_state", "sulis_cluster_node_role", "sulis_cluster_commit_position",
                "sulis_cluster_control_toggle", "sulis_cluster_election_state")}
            assert {k: v.value for k, v in value.items() if k != "sulis_cluster_commit_position"} == {
                "sulis_cluster_module_state": 1, "sulis_cluster_node_role": 2, "sulis_cluster_control_toggle": 1,
                "sulis_cluster_election_state": 17}
            assert value["sulis_cluster_commit_position"].value > 0
            assert value["sulis_cluster_module_state"].labels == {"cluster_id": "0"}
            (snapshots,) = samples(metrics["sulis_cluster_snapshots"], "sulis_cluster_snapshots_total")
            assert snapshots.value == 1
            # One member: one election (its own term, no ballot), term 0, no client timed out.
            counts = {name: samples(metrics[name], name + "_total")[0].value
                      for name in ("sulis_cluster_elections", "sulis_cluster_timed_out_clients")}
            assert counts == {"sulis_cluster_elections": 1, "sulis_cluster_timed_out_clients": 0}
            assert samples(metrics["sulis_cluster_leadership_term_id"])[0].value == 0
        finally:
            exporter.close()
