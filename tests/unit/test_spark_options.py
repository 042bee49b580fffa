"""``format("sulis")`` options as a Kafka connector user writes them: Kafka's names answered with the
sulis name to use, durations and sizes in Spark's own forms. No Spark session: the parsing is plain
Python, run when a query starts."""

from __future__ import annotations

import pytest

from sulis.spark.options import OptionError, parse_reader_options, parse_writer_options

BASE = {"channel": "aeron:ipc", "streamId": "1001"}


@pytest.mark.parametrize(("kafka", "sulis"), [
    ("maxOffsetsPerTrigger", "maxMessagesPerTrigger"),
    ("minOffsetsPerTrigger", "minMessagesPerTrigger"),
    ("startingOffsets", "startingPositions"),
    ("endingOffsets", "endingPositions"),
    ("subscribe", "channel and streamId"),
    ("subscribePattern", "channel"),
    ("assign", "recordingIds"),
    ("kafka.bootstrap.servers", "controlChannel"),
    ("startingOffsetsByTimestamp", "startingPositions"),
    ("includeHeaders", "includeTimestamp"),
])
def test_a_kafka_option_is_answered_with_the_sulis_one(kafka, sulis):
    with pytest.raises(OptionError, match=rf"option {kafka}: a Kafka connector option; the sulis source takes {sulis}"):
        parse_reader_options({**BASE, kafka: "1"})


def test_a_kafka_topic_on_the_sink_is_answered_too():
    with pytest.raises(OptionError, match="option topic: a Kafka connector option; the sulis sink takes channel"):
        parse_writer_options({**BASE, "topic": "ticks"})


@pytest.mark.parametrize(("text", "seconds"), [
    ("10", 10.0), ("10s", 10.0), ("10 seconds", 10.0), ("1 second", 1.0), ("500ms", 0.5),
    ("500 milliseconds", 0.5), ("1.5 min", 90.0), ("2 minutes", 120.0), ("1h", 3600.0), ("1 hour", 3600.0),
])
def test_durations_in_spark_forms(text, seconds):
    assert parse_reader_options({**BASE, "maxTriggerDelay": text}, streaming=True).max_trigger_delay_s == seconds
    assert parse_reader_options({**BASE, "messageTimeout": text}).archive.message_timeout == seconds


@pytest.mark.parametrize("text", ["ten", "5 parsecs", "-1s", "0", "1 2 s"])
def test_a_bad_duration_names_the_option(text):
    with pytest.raises(OptionError, match="option maxTriggerDelay: "):
        parse_reader_options({**BASE, "maxTriggerDelay": text}, streaming=True)


@pytest.mark.parametrize(("text", "size"), [
    ("4096", 4096), ("64k", 64 << 10), ("64kb", 64 << 10), ("64m", 64 << 20), ("64MB", 64 << 20), ("1g", 1 << 30),
])
def test_sizes_with_suffixes(text, size):
    assert parse_reader_options({**BASE, "maxBytesPerTrigger": text}, streaming=True).max_bytes_per_trigger == size


@pytest.mark.parametrize("text", ["lots", "64 parsecs", "1.5m", "16"])
def test_a_bad_size_names_the_option(text):
    with pytest.raises(OptionError, match="option maxBytesPerTrigger: "):
        parse_reader_options({**BASE, "maxBytesPerTrigger": text}, streaming=True)
