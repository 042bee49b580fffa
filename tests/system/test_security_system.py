"""Transport security on loopback: two embedded drivers stand for two hosts.

A secured channel (``security=auth`` or ``security=encrypt``) seals every datagram with a key from the
driver's keyring (``keyring_file``, made by ``sulis keyring``). Shown here: streams flow in both modes
and only sealed datagrams are on the wire; a sender with another key, an unsecured sender, and an
unsecured receiver get nothing through, each dropped, counted and named in the error log; a channel
that asks for security on a driver without a keyring, or that differs from its endpoint's, is refused
naming the fix; a key is rotated on both hosts without a restart while a stream flows, with nothing
dropped. The attacks from a third host are in test_security_hosts.py."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import time

import pytest

import sulis
from _child import make_message, parse_message
from conftest import await_until, counter_value, free_udp_port, run_cli

SC = sulis.SystemCounter
OPTS = {"term_buffer_length": "1m", "timer_interval": "10ms", "publication_connection_timeout": "500ms",
        "image_liveness_timeout": "1s"}


# Every test asks for tmp_path before make_driver: its keyring file then outlives the drivers reading it.


def keyring(path) -> str:
    """A keyring of one fresh key, made by ``sulis keyring add``."""
    made = run_cli("keyring", "add", path)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "1"
    assert os.stat(path).st_mode & 0o777 == 0o600
    return str(path)


def copy_ring(src, dst) -> None:
    """Puts a copy of ``src`` in place of ``dst`` at once (a rename), as an operator's deploy would."""
    tmp = f"{dst}.tmp"
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o600)
    os.replace(tmp, dst)


def flow(pub, sub, first: int, count: int) -> None:
    """Offers messages ``first .. first + count`` and checks they all arrive, in order, intact."""
    got = []

    def on_message(buffer, _header):
        producer, seq, _body = parse_message(bytes(buffer))
        got.append(seq)

    assembler = sulis.FragmentAssembler(on_message)
    seq = first
    deadline = time.monotonic() + 120
    while len(got) < count:
        if seq < first + count and pub.offer(make_message(0, seq, os.urandom(200))) >= 0:
            seq += 1
        if sub.poll(assembler, 64) == 0:
            time.sleep(0.0002)
        assert time.monotonic() < deadline, f"{len(got)} of {count} arrived"
    assert got == list(range(first, first + count))


def connect(make_client, pub_driver, sub_driver, channel: str, stream_id: int = 10):
    sub = make_client(dir=sub_driver.dir).add_subscription(channel, stream_id)
    pub = make_client(dir=pub_driver.dir).add_exclusive_publication(channel, stream_id)
    await_until(lambda: pub.is_connected and sub.image_count == 1, timeout=30, what="the secured stream to connect")
    return pub, sub


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_a_secured_stream_flows_and_only_sealed_datagrams_are_on_the_wire(
        tmp_path, make_driver, make_client, mode):
    ring = keyring(tmp_path / "keyring")
    sub_driver = make_driver(keyring_file=ring, **OPTS)
    pub_driver = make_driver(keyring_file=ring, **OPTS)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|security={mode}"
    pub, sub = connect(make_client, pub_driver, sub_driver, channel)
    flow(pub, sub, 0, 5000)
    for d in (sub_driver, pub_driver):
        assert counter_value(d.dir, SC.SECURITY_FRAMES_DROPPED) == 0
        assert counter_value(d.dir, SC.SECURITY_SEALING_KEY_ID) == 1

    # A plain socket where a subscriber would be hears the publication's setups: sealed, 48 bytes longer.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as plain:
        plain.bind(("127.0.0.1", 0))
        plain.settimeout(30)
        port = plain.getsockname()[1]
        make_client(dir=pub_driver.dir).add_publication(f"aeron:udp?endpoint=127.0.0.1:{port}|security={mode}", 11)
        datagram = plain.recv(65536)
    frame_length, version, flags, frame_type = struct.unpack_from("<iBBH", datagram)
    assert (frame_type, frame_length, version) == (0x5E, len(datagram), 0)
    assert len(datagram) == 40 + 48, "an Aeron setup frame and the envelope"
    assert flags == (0x80 if mode == "encrypt" else 0)
    if mode == "auth":
        assert struct.unpack_from("<H", datagram, 32 + 6)[0] == 0x05, "the setup frame, in the clear"


@pytest.mark.expect_errors
def test_a_sender_with_another_key_an_unsecured_sender_and_an_unsecured_receiver_get_nothing_through(
        tmp_path, make_driver, make_client):
    ring, other = keyring(tmp_path / "keyring"), keyring(tmp_path / "other")
    sub_driver = make_driver(keyring_file=ring, **OPTS)
    port = free_udp_port()
    secured = f"aeron:udp?endpoint=127.0.0.1:{port}|security=encrypt"
    sub = make_client(dir=sub_driver.dir).add_subscription(secured, 10)

    # Another key under the same id: its setups fail authentication.
    stranger = make_driver(keyring_file=other, **OPTS)
    make_client(dir=stranger.dir).add_publication(secured, 10)
    await_until(lambda: counter_value(sub_driver.dir, SC.SECURITY_AUTH_FAILURES) >= 3, timeout=30,
                what="the stranger's setups to be refused")
    # A driver without security at all: its frames are unsealed.
    plain = make_driver(**OPTS)
    plain_pub = make_client(dir=plain.dir).add_publication(f"aeron:udp?endpoint=127.0.0.1:{port}", 10)
    await_until(lambda: counter_value(sub_driver.dir, SC.SECURITY_UNSEALED_DROPPED) >= 3, timeout=30,
                what="the plain setups to be dropped")
    assert sub.image_count == 0 and not plain_pub.is_connected

    def noted(*parts: str) -> bool:  # each source and reason is noted at most once a second
        return any(all(p in t for p in parts) for _, _, _, t in sulis.read_errors(sub_driver.dir))

    await_until(lambda: noted("failing authentication under key id 1", secured), what="the stranger to be noted")
    await_until(lambda: noted("unsealed frames", "from 127.0.0.1:"), what="the plain sender to be noted")
    # The sealed frames an unsecured subscription hears are invalid packets, named as such.
    open_port = free_udp_port()
    plain_sub = make_client(dir=plain.dir).add_subscription(f"aeron:udp?endpoint=127.0.0.1:{open_port}", 12)
    make_client(dir=sub_driver.dir).add_publication(f"aeron:udp?endpoint=127.0.0.1:{open_port}|security=auth", 12)
    await_until(lambda: counter_value(plain.dir, SC.INVALID_PACKETS) >= 3, timeout=30,
                what="the sealed setups to be refused by the unsecured subscription")
    assert plain_sub.image_count == 0
    assert counter_value(sub_driver.dir, SC.SECURITY_FRAMES_DROPPED) == (
        counter_value(sub_driver.dir, SC.SECURITY_AUTH_FAILURES)
        + counter_value(sub_driver.dir, SC.SECURITY_UNSEALED_DROPPED)
        + counter_value(sub_driver.dir, SC.SECURITY_REPLAYS_DROPPED))


@pytest.mark.expect_errors  # a refused command is logged
def test_a_channel_asking_for_security_without_a_keyring_or_unlike_its_endpoint_is_refused(
        tmp_path, make_driver, make_client):
    bare = make_client(dir=make_driver(**OPTS).dir)
    with pytest.raises(sulis.ConfigurationError) as e:
        bare.add_publication(f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|security=encrypt", 10)
    assert "security=encrypt needs a keyring" in str(e.value) and "--keyring-file" in str(e.value)
    with pytest.raises(sulis.SulisError) as e:
        make_driver(security="encrypt", **OPTS)
    assert "keyring_file" in str(e.value)

    client = make_client(dir=make_driver(keyring_file=keyring(tmp_path / "keyring"), **OPTS).dir)
    port = free_udp_port()
    # Held: a subscription dropped at once would close the endpoint, and the next one would open its own.
    held = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}|security=encrypt", 10)
    with pytest.raises(sulis.ConfigurationError) as e:
        client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", 11)
    assert "asks for security=off, but its endpoint is open with security=encrypt" in str(e.value)
    held.close()
    with pytest.raises(sulis.ConfigurationError) as e:
        client.add_publication(f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|security=auth|mtu=65504", 10)
    assert "leaves no room for transport security" in str(e.value)


def test_a_key_rotates_on_both_hosts_without_a_restart_while_the_stream_flows(tmp_path, make_driver, make_client):
    pub_ring, sub_ring = keyring(tmp_path / "pub"), str(tmp_path / "sub")
    copy_ring(pub_ring, sub_ring)
    pub_driver = make_driver(keyring_file=pub_ring, **OPTS)
    sub_driver = make_driver(keyring_file=sub_ring, **OPTS)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|security=encrypt"
    pub, sub = connect(make_client, pub_driver, sub_driver, channel)
    flow(pub, sub, 0, 1000)

    def reads(d) -> int:
        return counter_value(d.dir, SC.SECURITY_KEYRING_READS)

    def sealing(d) -> int:
        return counter_value(d.dir, SC.SECURITY_SEALING_KEY_ID)

    # 1. A new key on both hosts; each still seals with key 1 and now opens both.
    assert run_cli("keyring", "add", pub_ring).stdout.strip() == "2"
    copy_ring(pub_ring, sub_ring)
    await_until(lambda: reads(pub_driver) == 2 and reads(sub_driver) == 2, what="both drivers to read the new ring")
    assert sealing(pub_driver) == sealing(sub_driver) == 1
    flow(pub, sub, 1000, 1000)
    # 2. Both seal with key 2.
    for ring, d in ((pub_ring, pub_driver), (sub_ring, sub_driver)):
        assert run_cli("keyring", "send", ring, 2).returncode == 0
        await_until(lambda d=d: sealing(d) == 2, what="the driver to seal with key 2")
    flow(pub, sub, 2000, 1000)
    # 3. Key 1 leaves both rings; the stream goes on.
    refused = run_cli("keyring", "remove", pub_ring, 2)
    assert refused.returncode != 0 and "seals with" in refused.stderr
    for ring, d in ((pub_ring, pub_driver), (sub_ring, sub_driver)):
        assert run_cli("keyring", "remove", ring, 1).returncode == 0
        await_until(lambda d=d: reads(d) == 4, what="the driver to read the ring without key 1")
    listed = run_cli("keyring", "list", pub_ring).stdout
    assert listed.split() == ["2", "(seals)"], listed
    flow(pub, sub, 3000, 1000)
    assert pub.is_connected and sub.image_count == 1
    for d in (pub_driver, sub_driver):
        assert counter_value(d.dir, SC.SECURITY_FRAMES_DROPPED) == 0, "nothing was dropped on the way"


@pytest.mark.expect_errors  # the plain driver logs the sealed frames it cannot read
def test_a_driver_secured_throughout_carries_multi_destination_cast_and_response_channels(
        tmp_path, make_driver, make_client):
    from test_response_channels_system import Server, request_pair, round_trip

    ring = keyring(tmp_path / "keyring")
    secured = {**OPTS, "security": "encrypt", "keyring_file": ring}  # every UDP channel, no URI says so
    pub_driver, a, b = make_driver(**secured), make_driver(**secured), make_driver(**secured)
    ports = [free_udp_port(), free_udp_port()]
    subs = [make_client(dir=d.dir).add_subscription(f"aeron:udp?endpoint=127.0.0.1:{p}", 10)
            for d, p in zip((a, b), ports, strict=True)]
    # A third destination on a plain driver: what it hears is sealed, so it never makes an image.
    plain, plain_port = make_driver(**OPTS), free_udp_port()
    plain_sub = make_client(dir=plain.dir).add_subscription(f"aeron:udp?endpoint=127.0.0.1:{plain_port}", 10)
    pub = make_client(dir=pub_driver.dir).add_exclusive_publication("aeron:udp?control-mode=manual", 10)
    for p in [*ports, plain_port]:
        pub.add_destination(f"aeron:udp?endpoint=127.0.0.1:{p}")
    await_until(lambda: pub.is_connected and all(s.image_count == 1 for s in subs), 30, "both destinations")
    got: list[list[int]] = [[], []]
    seq, deadline = 0, time.monotonic() + 60
    while min(map(len, got)) < 2000:
        if seq < 2000 and pub.offer(make_message(0, seq, b"x" * 100)) >= 0:
            seq += 1
        for i, s in enumerate(subs):
            s.poll(lambda buffer, _h, i=i: got[i].append(parse_message(bytes(buffer))[1]), 64)
        assert time.monotonic() < deadline, [len(g) for g in got]
    assert got == [list(range(2000))] * 2
    assert plain_sub.image_count == 0 and counter_value(plain.dir, SC.INVALID_PACKETS) > 0

    server_driver, client_driver = make_driver(**secured), make_driver(**secured)
    request = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    response = f"aeron:udp?control-mode=response|control=127.0.0.1:{free_udp_port()}"
    with sulis.Client(dir=server_driver.dir) as sc, sulis.Client(dir=client_driver.dir) as cc:
        server = Server(sc, request, response)
        pairs = [request_pair(cc, request, response) for _ in range(2)]
        server.accept(2)
        await_until(lambda: all(rsp.is_connected for _, rsp in pairs), 30, "response images")
        round_trip(server, pairs)
    for d in (pub_driver, a, b, server_driver, client_driver):
        assert counter_value(d.dir, SC.SECURITY_KEYRING_READS) == 1
        assert counter_value(d.dir, SC.SECURITY_FRAMES_DROPPED) == 0
