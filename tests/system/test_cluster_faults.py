"""The cluster under faults, across network namespaces (the short run; ``python tests/clusterfaults/run.py`` is the
long one): three ``sulis cluster-node`` members on hosts of their own and three clients on a fourth run
compare-and-set registers, timers, chains of service messages and bank transfers while the leader is killed
(SIGKILL, then restarted), paused (SIGSTOP for longer than the heartbeat timeout), cut off with nftables, every
member loses 10 % of its packets, and a member's disk fills (a loop-mounted ext4; it must stop or retry its election
saying why, and acknowledge nothing it could not record). The history must be linearizable (porcupine), every member
must have applied the same requests in the same order with every answered one among them, every applied timer must
have fired once and every chain run link by link once, the log's order must explain every bank answer in real time
with no money made or lost, and no term may have had two leaders (tests/clusterfaults)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clusterfaults.harness import run
from conftest import make_dir

# About 35 s on an idle 2-core machine, 160 s beside two busy loops and a build: the timeout guards against a
# hang, not against a slow machine.
pytestmark = [pytest.mark.skipif(shutil.which("go") is None, reason="the linearizability checker needs Go"),
              pytest.mark.timeout(600)]


def test_three_members_stay_linearizable_through_kills_pauses_a_cut_loss_and_a_full_disk(netns_hosts, nft_loss):
    hosts = netns_hosts("n0", "n1", "n2", "client")
    figures = run(hosts, Path(make_dir("sulis-faults-")), size=3,  # in memory: see harness.run
                  schedule=["kill-leader", "pause-leader", "isolate-leader", "loss", "fill-disk"],
                  hold=3.0, settle=2.0, seed=1)
    print({k: v for k, v in figures.items() if k != "events"})
    assert figures["answered"] > 100, figures  # the clients got work done between the faults
    assert figures["timers_fired"] > 0 and figures["chain_links"] > 0, figures
    assert figures["transfers"] > 0 and figures["balance_reads"] > 0, figures
