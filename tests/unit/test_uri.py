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
