"""Malformed channel URIs given to a client: add_publication,
add_exclusive_publication and add_subscription raise ConfigurationError naming
the offending part (the same message as sulis.parse_channel), and so do URIs
that parse but that the driver refuses."""

from __future__ import annotations

import pytest

import sulis
from conftest import await_until
from uri_cases import BAD_URIS, MDC_URIS


def test_every_malformed_uri_is_refused_by_the_client(driver, client):
    problems = []
    for uri, part, _reason in BAD_URIS:
        with pytest.raises(sulis.ConfigurationError) as expected:
            sulis.parse_channel(uri)
        for name in ("add_publication", "add_exclusive_publication", "add_subscription"):
            try:
                getattr(client, name)(uri, 1)
            except sulis.ConfigurationError as e:
                if str(e) != str(expected.value) or f": {part}: " not in str(e):
                    problems.append(f"{name}({uri[:60]!r}): {e}")
            else:
                problems.append(f"{name}({uri[:60]!r}) did not raise")
    assert problems == []
    # Refused locally: the driver never saw a bad command, and the client still works.
    assert sulis.read_errors(driver.dir) == []
    sub = client.add_subscription("aeron:ipc", 1)
    pub = client.add_publication("aeron:ipc", 1)
    await_until(lambda: pub.is_connected and sub.image_count == 1)


@pytest.mark.parametrize("method", ["add_publication", "add_exclusive_publication", "add_subscription"])
def test_stream_id_in_the_uri_must_match(client, method):
    add = getattr(client, method)
    with pytest.raises(sulis.ConfigurationError) as info:
        add("aeron:ipc?stream-id=5", 6)
    assert "stream-id=5" in str(info.value)
    assert "does not match the stream id 6" in str(info.value)
    assert sulis.parse_channel("aeron:ipc?stream-id=5") == "aeron:ipc?stream-id=5"
    resource = add("aeron:ipc?stream-id=5", 5)
    assert resource.stream_id == 5


@pytest.mark.expect_errors
def test_uris_the_driver_refuses(driver, client):
    # mtu above the max message length of the driver's default 64 KiB term (8 KiB)
    with pytest.raises(sulis.ConfigurationError, match="mtu 9216 exceeds the max message length 8192"):
        client.add_exclusive_publication("aeron:ipc?mtu=9k", 2)
    # a concurrent publication cannot change the term length of the shared log
    first = client.add_publication("aeron:ipc", 3)
    with pytest.raises(sulis.ConfigurationError, match="term-length=131072 differs"):
        client.add_publication("aeron:ipc?term-length=128k", 3)
    # a fixed session id already in use on the stream
    holder = client.add_exclusive_publication("aeron:ipc?session-id=77", 4)
    with pytest.raises(sulis.ConfigurationError, match="session-id=77 is already in use"):
        holder = client.add_exclusive_publication("aeron:ipc?session-id=77", 4)
    # term-offset beyond the driver's default term length
    with pytest.raises(sulis.ConfigurationError, match="term-offset=65536 is not below term length 65536"):
        client.add_exclusive_publication("aeron:ipc?init-term-id=0|term-id=0|term-offset=65536", 5)
    # a spy is a subscription only
    spy = "aeron-spy:aeron:udp?endpoint=localhost:40123"
    with pytest.raises(sulis.ConfigurationError, match="aeron-spy: is for subscriptions: publications cannot spy"):
        client.add_publication(spy, 6)
    client.add_subscription(spy, 6).close()
    # a session id tag that names no publication
    with pytest.raises(sulis.ConfigurationError, match="session-id=tag:5 must reference an IPC publication"):
        client.add_exclusive_publication("aeron:ipc?session-id=tag:5", 7)
    # The client is fine after all these refusals, and the driver logged each one.
    assert not client.is_closed
    assert first.offer(b"x") == sulis.NOT_CONNECTED
    assert holder.session_id == 77
    logged = "\n".join(text for _, _, _, text in sulis.read_errors(driver.dir))
    for fragment in ("mtu 9216", "term-length=131072", "session-id=77", "term-offset=65536", "spy", "tag"):
        assert fragment in logged


@pytest.mark.expect_errors
def test_mdc_channels_are_accepted_where_aeron_accepts_them(driver, client):
    for uri, publication, subscription in MDC_URIS:
        for add, accepted in ((client.add_publication, publication), (client.add_exclusive_publication, publication),
                              (client.add_subscription, subscription)):
            if accepted:
                add(uri, 9).close()
            else:
                with pytest.raises(sulis.ConfigurationError):
                    add(uri, 9)
    assert not client.is_closed
