"""Pure helpers of the Spark pipeline benchmark's Kafka peer and of the Spark source's replay requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kafka_peer():
    return load_script(ROOT / "bench" / "peers" / "kafka.py")


def test_kafka_config_is_a_one_node_kraft_cluster_on_loopback_only(kafka_peer, tmp_path):
    text = kafka_peer.kafka_config(str(tmp_path / "logs"), 19092, 19093)
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == f"{props['node.id']}@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["log.dirs"] == str(tmp_path / "logs")
    # One node: every internal topic must be satisfiable by one replica, or the broker waits forever.
    assert {k: v for k, v in props.items() if k.endswith((".replication.factor", ".min.isr"))} == {
        f"{topic}.{what}": "1" for topic in ("offsets.topic", "transaction.state.log", "share.coordinator.state.topic")
        for what in ("replication.factor", "min.isr") if (topic, what) != ("offsets.topic", "min.isr")}
