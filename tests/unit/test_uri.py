"""Channel URI parsing (sulis.parse_channel / sulis.channel_params): every
malformed URI raises ConfigurationError naming the offending part; good URIs
come back in canonical form. Pure: no driver."""

from __future__ import annotations

import pytest

import sulis
from uri_cases import BAD_URIS, GOOD_URIS


@pytest.mark.parametrize("uri,part,reason", BAD_URIS, ids=[u[:60] or "empty" for u, _, _ in BAD_URIS])
def test_malformed_uri_is_rejected_naming_the_offending_part(uri, part, reason):
    with pytest.raises(sulis.ConfigurationError) as info:
        sulis.parse_channel(uri)
    message = str(info.value)
    shown = uri if len(uri) <= 4095 else uri[:64] + "..."
    assert message.startswith(f"invalid channel URI '{shown}': {part}: "), message
    assert reason in message, message
    with pytest.raises(sulis.ConfigurationError) as again:
        sulis.channel_params(uri)
    assert str(again.value) == message




@pytest.mark.parametrize("uri,canonical,params", GOOD_URIS, ids=[u[:60] for u, _, _ in GOOD_URIS])
def test_good_uri_parses_to_its_canonical_form(uri, canonical, params):
    out = sulis.parse_channel(uri)
    assert out == (canonical or uri)
    assert sulis.parse_channel(out) == out, "the canonical form parses to itself"
    if params is not None:
        assert sulis.channel_params(uri) == params


def test_configuration_error_hierarchy():
    assert issubclass(sulis.ConfigurationError, sulis.SulisError)
    assert issubclass(sulis.SulisError, Exception)
    with pytest.raises(sulis.SulisError):
        sulis.parse_channel("aeron:nope")


def test_channel_uri_builds_channels_checked_by_the_drivers_rules():
    """sulis.ChannelUri replaces gluing '?'/'|' by hand: a parameter is replaced, not repeated; a
    default does not override what the channel says; each value is checked as the driver checks it."""
    u = sulis.ChannelUri("aeron:udp?endpoint=localhost:40123|term-length=64k")
    assert (u.media, u.is_spy, u.get("term-length"), u.get("mtu")) == ("udp", False, "64k", None)
    assert str(u.with_param("session-id", 7)) == "aeron:udp?endpoint=localhost:40123|term-length=64k|session-id=7"
    assert str(u.with_param("term-length", "1m")) == "aeron:udp?endpoint=localhost:40123|term-length=1m"
    assert str(u.with_default("term-length", "1m")) == str(u) and u.with_default("sparse", True).get("sparse") == "true"
    assert str(sulis.ChannelUri("aeron:ipc").with_param("session-id", -5)) == "aeron:ipc?session-id=-5"
    assert str(u.without("term-length")) == "aeron:udp?endpoint=localhost:40123"
    assert u.params == [("endpoint", "localhost:40123"), ("term-length", "64k")]
    assert u == sulis.ChannelUri(str(u)) and len({u, sulis.ChannelUri(str(u))}) == 1
    assert repr(u) == "ChannelUri('aeron:udp?endpoint=localhost:40123|term-length=64k')".replace("'", '"')
    with pytest.raises(sulis.ConfigurationError, match="term-length"):
        u.with_param("term-length", "3k")
    with pytest.raises(sulis.ConfigurationError, match="colour"):
        u.with_param("colour", "red")
    with pytest.raises(sulis.ConfigurationError):
        u.without("endpoint")  # a UDP channel needs an endpoint or a control address


def test_channel_uri_replaces_a_parameter_the_channel_cannot_do_without():
    """Replacing a UDP channel's endpoint (a bench's pong channel on another port) must not pass through
    a URI without one (which a UDP channel cannot be): it once panicked there."""
    u = sulis.ChannelUri("aeron:udp?endpoint=localhost:40123|mtu=1408")
    assert str(u.with_param("endpoint", "localhost:40124")) == "aeron:udp?endpoint=localhost:40124|mtu=1408"
