"""Pytest fixtures of ``netutil``; tests/conftest.py imports them, so any
test can take them as arguments.

``netns_pair``
    A fresh ``NetnsPair`` (skips when namespaces are unavailable), deleted on
    teardown whether the test passed or not.
``netns_hosts``
    Factory of ``NetnsHosts`` (host names): hosts on one bridge; all deleted on teardown.
``make_relay``
    Factory of ``LossyRelay`` (same arguments); every relay is closed on teardown.
``nft_loss``
    Factory of ``NftLoss`` (same arguments; skips without nft); every table is
    removed on teardown.
"""

from __future__ import annotations

import pytest

from .netns import NetnsHosts, NetnsPair, require_netns
from .nft import NftLoss, require_nft
from .relay import LossyRelay


@pytest.fixture
def netns_pair():
    require_netns()
    with NetnsPair() as pair:
        yield pair


@pytest.fixture
def netns_hosts():
    """Factory: ``netns_hosts("a", "b", "c")`` makes ``NetnsHosts`` (skips when namespaces are
    unavailable), deleted on teardown."""
    require_netns()
    made: list[NetnsHosts] = []

    def make(*names: str, **kwargs) -> NetnsHosts:
        hosts = NetnsHosts(*names, **kwargs)
        made.append(hosts)
        return hosts

    yield make
    for hosts in reversed(made):
        hosts.close()


@pytest.fixture
def make_relay():
    relays: list[LossyRelay] = []

    def make(*args, **kwargs) -> LossyRelay:
        relay = LossyRelay(*args, **kwargs)
        relays.append(relay)
        return relay

    yield make
    for relay in reversed(relays):
        relay.close()


@pytest.fixture
def nft_loss():
    require_nft()
    rules: list[NftLoss] = []

    def make(*args, **kwargs) -> NftLoss:
        loss = NftLoss(*args, **kwargs)
        rules.append(loss)
        return loss

    yield make
    for loss in reversed(rules):
        loss.remove()
