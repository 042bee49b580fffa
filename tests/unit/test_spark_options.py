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


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"recordingIds": "1,x"}, False, r"option recordingIds: '1,x' is not a list of recording ids"),
    ({"recordingIds": ""}, False, r"option recordingIds: '' must name at least one recording id"),
    ({**BASE, "recordingIds": "1"}, False, "give either recordingIds or channel and streamId, not both"),
    ({"channel": "aeron:ipc"}, False, "option streamId: required"),
    ({"streamId": "7"}, False, "option channel: required with streamId"),
    ({**BASE, "streamId": "x"}, False, r"option streamId: 'x' is not an integer"),
    ({**BASE, "channel": "aeron:pigeon"}, False, r"option channel: 'aeron:pigeon' is not a channel URI"),
    ({**BASE, "endingPositions": "latest"}, True, "option endingPositions: not for streaming queries"),
    ({**BASE, "endingPositions": "earliest"}, False, "'earliest' would read nothing"),
    ({**BASE, "startingPositions": "soon"}, False, "option startingPositions: 'soon' is neither 'earliest'"),
    ({**BASE, "startingPositions": "[1]"}, False, "must be a JSON object"),
    ({**BASE, "startingPositions": '{"a": 0}'}, False, "key 'a' is not a recording id"),
    ({**BASE, "startingPositions": '{"1": -5}'}, False, "position -5 of recording 1 is negative"),
    ({**BASE, "startingPositions": '{"1": 33}'}, False, "position 33 of recording 1 is not a frame boundary"),
    ({**BASE, "readMode": "telepathy"}, False, "option readMode: 'telepathy' is not one of auto, replay, files"),
    ({**BASE, "failOnDataLoss": "perhaps"}, False, "option failOnDataLoss: 'perhaps' is not true or false"),
    ({**BASE, "lowLatency": "true", "maxMessagesPerTrigger": "10"}, True,
     "option maxMessagesPerTrigger: not with lowLatency=true"),
    ({**BASE, "valueSchema": "timestamp long", "includeTimestamp": "true"}, False,
     "option includeTimestamp: valueSchema already has a column named 'timestamp'"),
    ({**BASE, "controlChannel": "aeron:udp?endpoint=10.0.0.1:8010"}, False,
     "option controlResponseChannel: required with a UDP controlChannel"),
    ({**BASE, "minPartitions": "0"}, False, "option minPartitions: 0 is below the minimum 1"),
])
def test_each_reader_option_check_names_the_option_without_spark(options, streaming, message):
    with pytest.raises(OptionError, match=message):
        parse_reader_options(options, streaming=streaming)


def test_spark_errors_are_sulis_errors_and_the_builtin_they_were():
    """``except SulisError`` catches every error of ``format("sulis")``; ``except ValueError`` (or the
    built-in each was before) still catches it too."""
    import sulis
    import sulis.spark as ss

    builtins = {ss.OptionError: ValueError, ss.RowError: ValueError, ss.DataLossError: RuntimeError,
                ss.ArchiveUnavailableError: RuntimeError, ss.NoMediaDriverError: ConnectionError,
                ss.ReadError: RuntimeError, ss.ReadTimeoutError: TimeoutError, ss.SinkError: RuntimeError,
                ss.SinkTimeoutError: TimeoutError}
    for cls, builtin in builtins.items():
        assert issubclass(cls, sulis.SulisError) and issubclass(cls, builtin), cls
        with pytest.raises(sulis.SulisError, match="what and where"):
            raise cls("what and where")
    with pytest.raises(sulis.SulisError, match="option streamId: required"):
        parse_reader_options({"channel": "aeron:ipc"})
