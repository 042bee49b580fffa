"""A Kafka 4.3.1 broker beside sulis (bench/spark_pipeline.py): one KRaft node (broker and controller)
on 127.0.0.1 in a directory of the run, its admin client, producers with ``acks=all``, and the two
ways a Python producer ingests (``produce_batch`` and one ``produce()`` per message). The broker's
jars and Spark's Kafka source come from ``bash bench/peers/install.sh`` into ``bench/.peers/kafka``;
confluent-kafka from PyPI.
"""
from __future__ import annotations

import base64
import os
import time
import uuid
from pathlib import Path

from sulis._benchkit.procs import ChildProcess, two_free_ports

KAFKA_DIR = Path(os.environ.get("SULIS_PEERS_DIR", Path(__file__).resolve().parent.parent / ".peers")) / "kafka"


def kafka_config(log_dir: str, port: int, controller_port: int) -> str:
    """server.properties of a one-node KRaft broker (broker and controller) on 127.0.0.1."""
    props = {"process.roles": "broker,controller", "node.id": 1,
             "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
             "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
             "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}", "controller.listener.names": "CONTROLLER",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", "log.dirs": log_dir,
             "num.partitions": 1, "auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": 0}
    for topic in ("offsets.topic", "transaction.state.log", "share.coordinator.state.topic"):
        props[f"{topic}.replication.factor"] = 1
    props["transaction.state.log.min.isr"] = props["share.coordinator.state.topic.min.isr"] = 1
    return "".join(f"{k}={v}\n" for k, v in props.items())


def missing() -> str | None:
    """Why the Kafka rows cannot run here (None: they can)."""
    for d in ("broker", "spark"):
        if not (KAFKA_DIR / d / ".complete").exists():
            return f"no Kafka {d} jars in {KAFKA_DIR / d} (bash bench/peers/install.sh)"
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as e:
        return f"confluent-kafka not importable ({e}; bash bench/peers/install.sh)"
    return None


class Kafka:
    """A broker child process in ``base`` (a temp dir), its producer and admin client; ``close`` stops it."""

    def __init__(self, base: str) -> None:
        from confluent_kafka.admin import AdminClient

        port, cport = two_free_ports(tcp=True)
        self.servers = f"127.0.0.1:{port}"
        os.makedirs(base, exist_ok=True)
        conf = os.path.join(base, "server.properties")
        Path(conf).write_text(kafka_config(os.path.join(base, "logs"), port, cport))
        cp = ["java", "-cp", str(KAFKA_DIR / "broker" / "libs" / "*")]
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # "--cluster-id=...": an id may begin with "-", which would read as an option.
        with ChildProcess([*cp, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster}", "-c", conf],
                              "kafka storage format") as fmt:
            if fmt.proc.wait(120):
                raise RuntimeError(f"kafka StorageTool format failed: {fmt.stderr_tail()}")
        self.broker = ChildProcess([*cp, "-Xms1g", "-Xmx1g", "kafka.Kafka", conf], "kafka broker")
        deadline = time.monotonic() + 90
        while not self._listening(port):  # before a client connects (librdkafka logs every refusal)
            if self.broker.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Kafka broker did not listen: {self.broker.stderr_tail()}")
            time.sleep(0.2)
        self.admin = AdminClient({"bootstrap.servers": self.servers})
        while not self._up():
            if self.broker.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Kafka broker did not start: {self.broker.stderr_tail()}")

    @staticmethod
    def _listening(port: int) -> bool:
        import socket

        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    def _up(self) -> bool:
        try:
            return bool(self.admin.list_topics(timeout=2))
        except Exception:  # not listening yet
            time.sleep(0.5)
            return False

    def topic(self, name: str) -> str:
        from confluent_kafka.admin import NewTopic

        for f in self.admin.create_topics([NewTopic(name, 1, 1)]).values():
            f.result(30)
        return name

    def producer(self, **conf):
        import confluent_kafka

        return confluent_kafka.Producer({"bootstrap.servers": self.servers, "acks": "all", **conf})

    def close(self) -> None:
        self.admin = None  # its connection goes before the broker does
        self.broker.close(grace_s=20)


def ingest(kafka: Kafka, topic: str, count: int, size: int, batch: int = 10_000) -> float:
    """``count`` messages of ``size`` bytes with produce_batch until every delivery report is in (the
    topic's end offset checked): msgs/s."""
    producer = kafka.producer(**{"linger.ms": 20, "batch.num.messages": 100_000, "enable.idempotence": False,
                                 "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20})
    payload = bytes(size)
    msgs = [{"value": payload} for _ in range(batch)]
    t0 = time.perf_counter()
    sent = 0
    while sent < count:
        todo = msgs[: min(batch, count - sent)]
        while todo:
            queued = producer.produce_batch(topic, todo)
            sent += queued
            todo = [m for m in todo if m.pop("_error", None) is not None] if queued < len(todo) else []
            producer.poll(0.001 if todo else 0)
    if producer.flush(120):
        raise RuntimeError("Kafka producer: delivery reports missing after 120 s")
    rate = count / (time.perf_counter() - t0)
    producer.close()
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.servers, "group.id": "sulis-bench"})
    if (end := consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]) != count:
        raise RuntimeError(f"Kafka topic {topic} holds {end} messages, {count} were produced")
    consumer.close()
    return rate


def ingest_each(kafka: Kafka, topic: str, count: int, size: int) -> float:
    """``count`` messages with one ``produce()`` call each until every delivery report is in: msgs/s."""
    producer = kafka.producer(**{"linger.ms": 20, "enable.idempotence": False,
                                 "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20})
    payload = bytes(size)
    t0 = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:  # the local queue is full: serve delivery reports, then again
                producer.poll(0.001)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("Kafka producer: delivery reports missing after 120 s")
    rate = count / (time.perf_counter() - t0)
    producer.close()
    return rate
