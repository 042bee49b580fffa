//! The options of `spark.read` / `spark.readStream` of `format("sulis")`,
//! parsed and checked once, when the query starts: a bad value fails the
//! query at once with a message that names the option.

use crate::archive_address::ArchiveAddress;
use crate::close_match::closest;
use crate::option_values::{bad, repr, OptionMap};
use crate::range_planner::{PositionSpec, EARLIEST};
use crate::row_shape::{RowShape, ValueSchemaOptions};
use crate::PlanError;

/// Every option a reader knows (these are the names shown).
pub const READER_OPTIONS: &[&str] = &[
    "controlChannel",
    "controlStreamId",
    "controlResponseChannel",
    "controlResponseStreamId",
    "driverDir",
    "messageTimeout",
    "channel",
    "streamId",
    "recordingIds",
    "clusterDir",
    "startingPositions",
    "endingPositions",
    "minPartitions",
    "failOnDataLoss",
    "replayChannel",
    "replayStreamId",
    "fragmentLimit",
    "maxBytesPerTrigger",
    "maxMessagesPerTrigger",
    "minMessagesPerTrigger",
    "maxTriggerDelay",
    "valueSchema",
    "mode",
    "columnNameOfCorruptRecord",
    "readMode",
    "archiveDir",
    "includeTimestamp",
    "lowLatency",
    "retentionHold",
    "retentionHoldLease",
];

/// How executors read a partition (`readMode`).
pub const READ_MODES: &[&str] = &["auto", "replay", "files"];

/// Options Spark itself may pass along (`load(path)`, the checkpoint).
/// (`DataStreamWriter.queryName` passes its name to the sink as an option.)
const SPARK_OPTIONS: &[&str] = &["path", "checkpointlocation", "queryname"];

/// Options of Spark's Kafka connector, with what to say instead.
const KAFKA_HINTS: &[(&str, &str)] = &[
    ("maxoffsetspertrigger", "maxMessagesPerTrigger (a recording's offsets are byte positions, so maxBytesPerTrigger is the exact one)"),
    ("minoffsetspertrigger", "minMessagesPerTrigger"),
    ("startingoffsets", "startingPositions ('earliest', 'latest' or JSON {\"<recording id>\": position})"),
    ("endingoffsets", "endingPositions"),
    ("subscribe", "channel and streamId (every recording of that stream, as a topic's partitions), or recordingIds"),
    ("subscribepattern", "channel (a part of a channel URI matches many) and streamId, or recordingIds"),
    ("assign", "recordingIds (a recording is a partition)"),
    ("topic", "channel and streamId"),
    ("kafka.bootstrap.servers", "controlChannel (and driverDir: the media driver the client uses)"),
    ("startingoffsetsbytimestamp", "startingPositions (positions; there is no timestamp index)"),
    ("startingtimestamp", "startingPositions (positions; there is no timestamp index)"),
    ("includeheaders", "includeTimestamp (the reserved value is the one header a message has)"),
];

/// What a read of `format("sulis")` reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ReaderOptions {
    pub archive: ArchiveAddress,
    pub channel: Option<String>,
    pub stream_id: Option<i32>,
    pub recording_ids: Option<Vec<i64>>,
    pub starting: PositionSpec,
    pub ending: PositionSpec,
    pub min_partitions: i64,
    pub fail_on_data_loss: bool,
    pub replay_channel: String,
    pub replay_stream_id: i32,
    pub fragment_limit: i64,
    pub max_bytes_per_trigger: Option<i64>,
    pub max_messages_per_trigger: Option<i64>,
    pub min_messages_per_trigger: Option<i64>,
    pub max_trigger_delay_s: f64,
    pub value_schema: Option<ValueSchemaOptions>,
    pub read_mode: String,
    pub archive_dir: Option<String>,
    pub include_timestamp: bool,
    pub low_latency: bool,
    pub cluster_dir: Option<String>,
    /// `retentionHold`: what a streaming query keeps from the archive's retention.
    pub retention_hold: crate::retention_hold::HoldSetting,
    /// `retentionHoldLease`: how long an automatic hold outlives its query's last word (seconds).
    pub retention_hold_lease_s: f64,
}

impl ReaderOptions {
    /// What a reader of planned ranges needs (the rest defaults): the
    /// archive, where replays come, how many fragments a poll takes, and
    /// `readMode` with `archiveDir`.
    pub fn for_reading(
        archive: ArchiveAddress,
        replay: (String, i32),
        fragment_limit: i64,
        read_mode: &str,
        archive_dir: Option<String>,
    ) -> ReaderOptions {
        ReaderOptions {
            archive,
            channel: None,
            stream_id: None,
            recording_ids: None,
            starting: PositionSpec::Earliest,
            ending: PositionSpec::Latest,
            min_partitions: 1,
            fail_on_data_loss: true,
            replay_channel: replay.0,
            replay_stream_id: replay.1,
            fragment_limit,
            max_bytes_per_trigger: None,
            max_messages_per_trigger: None,
            min_messages_per_trigger: None,
            max_trigger_delay_s: 15.0,
            value_schema: None,
            read_mode: read_mode.to_string(),
            archive_dir,
            include_timestamp: false,
            low_latency: false,
            cluster_dir: None,
            retention_hold: crate::retention_hold::HoldSetting::Off,
            retention_hold_lease_s: 900.0,
        }
    }

    /// Names what is read in error messages.
    pub fn selection(&self) -> String {
        if let Some(dir) = &self.cluster_dir {
            return format!("the log of the cluster member in {dir}");
        }
        if let Some(ids) = &self.recording_ids {
            let list: Vec<String> = ids.iter().map(i64::to_string).collect();
            return format!("recordingIds [{}]", list.join(", "));
        }
        format!(
            "channel {} streamId {}",
            repr(self.channel.as_deref().unwrap_or("")),
            self.stream_id.map_or("None".into(), |s| s.to_string())
        )
    }

    /// Checks and parses a reader's options; the error names the first bad
    /// one. What depends on the parsed `valueSchema` (its column names
    /// against `includeTimestamp`'s and a cluster log's) is the adapter's.
    pub fn parse(options: &OptionMap, streaming: bool) -> Result<ReaderOptions, PlanError> {
        check_known(options, READER_OPTIONS, "source")?;
        let archive = ArchiveAddress::from_options(options)?;
        let channel = options.channel("channel", None)?;
        let stream_id = options.stream_id("streamId", None)?;
        let recording_ids = match options.get("recordingIds") {
            None => None,
            Some(raw) => {
                let ids = recording_ids(raw).ok_or_else(|| {
                    bad(format!(
                        "option recordingIds: {} is not a list of recording ids (e.g. 3,4 or [3, 4])",
                        repr(raw)
                    ))
                })?;
                if ids.is_empty() || ids.iter().any(|&r| r < 0) {
                    return Err(bad(format!(
                        "option recordingIds: {} must name at least one recording id >= 0",
                        repr(raw)
                    )));
                }
                if channel.is_some() || stream_id.is_some() {
                    return Err(bad("option recordingIds: give either recordingIds or channel and streamId, not both".into()));
                }
                Some(ids)
            }
        };
        let cluster_dir = options
            .get("clusterDir")
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(str::to_string);
        if cluster_dir.is_some() {
            if channel.is_some() || stream_id.is_some() || recording_ids.is_some() {
                return Err(bad("option clusterDir: give either clusterDir (a cluster member's log) or channel and streamId or recordingIds, not both".into()));
            }
            if options.get("includeTimestamp").is_some() {
                return Err(bad("option includeTimestamp: not with clusterDir (a cluster log's rows always have timestamp, the entry's cluster time)".into()));
            }
        } else if recording_ids.is_none() && stream_id.is_none() {
            return Err(bad(
                "option streamId: required (with channel) unless recordingIds or clusterDir is given".into(),
            ));
        } else if recording_ids.is_none() && channel.is_none() {
            return Err(bad("option channel: required with streamId (a channel URI, or a part of one such as 'aeron:ipc' or 'endpoint=127.0.0.1:40123', as list_recordings_for_uri matches)".into()));
        }
        let starting = options.positions("startingPositions", PositionSpec::Earliest)?;
        let ending = options.positions("endingPositions", PositionSpec::Latest)?;
        if streaming && options.get("endingPositions").is_some() {
            return Err(bad(
                "option endingPositions: not for streaming queries (use Trigger.AvailableNow)"
                    .into(),
            ));
        }
        match &ending {
            PositionSpec::Earliest => {
                return Err(bad("option endingPositions: 'earliest' would read nothing; use 'latest' or JSON positions".into()))
            }
            PositionSpec::ById(m) if m.values().any(|&v| v == EARLIEST) => {
                return Err(bad(
                    "option endingPositions: -2 (earliest) is not an ending position".into(),
                ))
            }
            _ => {}
        }
        let min_partitions = options
            .int("minPartitions", Some(1), Some(1), Some(100_000))?
            .unwrap_or(1);
        let fragment_limit = options
            .int("fragmentLimit", Some(65536), Some(1), Some(1 << 24))?
            .unwrap_or(65536);
        let max_bytes = options.bytes("maxBytesPerTrigger", 32)?;
        let max_messages = options.int("maxMessagesPerTrigger", None, Some(1), None)?;
        let min_messages = options.int("minMessagesPerTrigger", None, Some(1), None)?;
        let replay_channel = options
            .channel("replayChannel", Some("aeron:ipc"))?
            .unwrap_or_default();
        let replay_stream_id = options
            .stream_id("replayStreamId", Some(0x5A17))?
            .unwrap_or(0x5A17);
        let read_mode = options
            .get("readMode")
            .unwrap_or("auto")
            .trim()
            .to_lowercase();
        if !READ_MODES.contains(&read_mode.as_str()) {
            return Err(bad(format!(
                "option readMode: {} is not one of {}",
                repr(options.get("readMode").unwrap_or("")),
                READ_MODES.join(", ")
            )));
        }
        let archive_dir = options
            .get("archiveDir")
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(str::to_string);
        let fail_on_data_loss = options.boolean("failOnDataLoss", true)?;
        let max_trigger_delay_s = options.seconds("maxTriggerDelay", 15.0)?;
        let value_schema = value_schema(options)?;
        let include_timestamp = options.boolean("includeTimestamp", false)?;
        let low_latency = options.boolean("lowLatency", false)?;
        let retention_hold =
            crate::retention_hold::HoldSetting::parse(options.get("retentionHold")).map_err(bad)?;
        let retention_hold_lease_s = options.seconds("retentionHoldLease", 900.0)?;
        if low_latency {
            for name in [
                "maxBytesPerTrigger",
                "maxMessagesPerTrigger",
                "minMessagesPerTrigger",
                "minPartitions",
            ] {
                if options.get(name).is_some() {
                    return Err(bad(format!("option {name}: not with lowLatency=true (each micro-batch reads everything there is, in one piece, on the Spark driver)")));
                }
            }
        }
        let opts = ReaderOptions {
            archive,
            channel,
            stream_id,
            recording_ids,
            starting,
            ending,
            min_partitions,
            fail_on_data_loss,
            replay_channel,
            replay_stream_id,
            fragment_limit,
            max_bytes_per_trigger: max_bytes,
            max_messages_per_trigger: max_messages,
            min_messages_per_trigger: min_messages,
            max_trigger_delay_s,
            value_schema,
            read_mode,
            archive_dir,
            include_timestamp,
            low_latency,
            cluster_dir,
            retention_hold,
            retention_hold_lease_s,
        };
        // The columns: valueSchema parsed, no name taken twice.
        opts.row_shape()?;
        Ok(opts)
    }

    /// What the rows are (`valueSchema`, `includeTimestamp`, `clusterDir`).
    pub fn row_shape(&self) -> Result<RowShape, PlanError> {
        RowShape::new(
            self.value_schema.as_ref(),
            self.include_timestamp,
            self.cluster_dir.is_some(),
        )
    }
}

/// `3,4` or `[3, 4]`.
fn recording_ids(raw: &str) -> Option<Vec<i64>> {
    let text = raw.trim();
    if text.starts_with('[') {
        let parsed: serde_json::Value = serde_json::from_str(text).ok()?;
        parsed
            .as_array()?
            .iter()
            .map(|v| match v {
                serde_json::Value::Number(n) => n.as_i64(),
                serde_json::Value::String(s) => s.trim().parse().ok(),
                _ => None,
            })
            .collect()
    } else {
        text.split(',')
            .filter(|x| !x.trim().is_empty())
            .map(|x| x.trim().parse().ok())
            .collect()
    }
}

/// `valueSchema`, or None; `mode` and `columnNameOfCorruptRecord` only
/// with it.
fn value_schema(options: &OptionMap) -> Result<Option<ValueSchemaOptions>, PlanError> {
    match options.get("valueSchema").filter(|s| !s.trim().is_empty()) {
        None => {
            for name in ["mode", "columnNameOfCorruptRecord"] {
                if options.get(name).is_some() {
                    return Err(bad(format!("option {name}: only with valueSchema (it says what a malformed payload does)")));
                }
            }
            Ok(None)
        }
        Some(schema) => Ok(Some(ValueSchemaOptions {
            schema: schema.to_string(),
            mode: options.get("mode").unwrap_or("FAILFAST").to_string(),
            corrupt_column: options
                .get("columnNameOfCorruptRecord")
                .unwrap_or("_corrupt")
                .trim()
                .to_string(),
        })),
    }
}

/// Every option is one `known` (any case) or Spark's own; a Kafka
/// connector option is named with what to say instead, a typo with the
/// closest known name.
pub fn check_known(options: &OptionMap, known: &[&str], what: &str) -> Result<(), PlanError> {
    let lower: Vec<String> = known.iter().map(|k| k.to_lowercase()).collect();
    for key in options.names() {
        let l = key.to_lowercase();
        if lower.contains(&l) || SPARK_OPTIONS.contains(&l.as_str()) {
            continue;
        }
        if let Some((_, hint)) = KAFKA_HINTS.iter().find(|(k, _)| *k == l) {
            return Err(bad(format!(
                "option {key}: a Kafka connector option; the sulis {what} takes {hint}"
            )));
        }
        let lower_refs: Vec<&str> = lower.iter().map(String::as_str).collect();
        let hint = closest(&l, &lower_refs)
            .and_then(|c| lower.iter().position(|k| k == c))
            .map(|i| format!("did you mean {}? ", repr(known[i])))
            .unwrap_or_default();
        return Err(bad(format!(
            "option {key}: unknown to the sulis {what}; {hint}(known: {})",
            known.join(", ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)], streaming: bool) -> Result<ReaderOptions, PlanError> {
        let o = OptionMap::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        ReaderOptions::parse(&o, streaming)
    }

    const BASE: &[(&str, &str)] = &[("channel", "aeron:ipc"), ("streamId", "7")];

    #[test]
    fn defaults_and_selections() {
        let o = parse(BASE, false).unwrap();
        assert_eq!(
            (o.min_partitions, o.fragment_limit, o.replay_stream_id),
            (1, 65536, 0x5A17)
        );
        assert_eq!(o.selection(), "channel 'aeron:ipc' streamId 7");
        assert_eq!(
            o.archive.describe(),
            "the archive at aeron:ipc stream 10 (driver the default driver directory)"
        );
        let o = parse(&[("recordingIds", "[3, 4]")], false).unwrap();
        assert_eq!(o.selection(), "recordingIds [3, 4]");
        let o = parse(&[("clusterDir", " /c ")], true).unwrap();
        assert_eq!(o.selection(), "the log of the cluster member in /c");
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn each_check_names_the_option() {
        let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
            BASE.iter().chain(extra).copied().collect()
        };
        let cases: Vec<(Vec<(&str, &str)>, bool, &str)> = vec![
            (vec![("recordingIds", "1,x")], false, "option recordingIds: '1,x' is not a list of recording ids"),
            (vec![("recordingIds", "")], false, "option recordingIds: '' must name at least one recording id"),
            (with(&[("recordingIds", "1")]), false, "give either recordingIds or channel and streamId, not both"),
            (vec![("channel", "aeron:ipc")], false, "option streamId: required"),
            (vec![("streamId", "7")], false, "option channel: required with streamId"),
            (vec![("channel", "aeron:ipc"), ("streamId", "x")], false, "option streamId: 'x' is not an integer"),
            (with(&[("endingPositions", "latest")]), true, "option endingPositions: not for streaming queries"),
            (with(&[("endingPositions", "earliest")]), false, "'earliest' would read nothing"),
            (with(&[("readMode", "telepathy")]), false, "option readMode: 'telepathy' is not one of auto, replay, files"),
            (with(&[("failOnDataLoss", "perhaps")]), false, "option failOnDataLoss: 'perhaps' is not true or false"),
            (with(&[("lowLatency", "true"), ("maxMessagesPerTrigger", "10")]), true, "option maxMessagesPerTrigger: not with lowLatency=true"),
            (with(&[("controlChannel", "aeron:udp?endpoint=10.0.0.1:8010")]), false, "option controlResponseChannel: required with a UDP controlChannel ('aeron:udp?endpoint=10.0.0.1:8010'): the channel the archive answers on. One value serves every host: a response channel, aeron:udp?control-mode=response|control=10.0.0.1:<a free port there>"),
            (with(&[("minPartitions", "0")]), false, "option minPartitions: 0 is below the minimum 1"),
            (with(&[("mode", "PERMISSIVE")]), false, "option mode: only with valueSchema"),
            (with(&[("startingOffsets", "earliest")]), false, "option startingOffsets: a Kafka connector option; the sulis source takes startingPositions"),
            (with(&[("streamid2", "1")]), false, "option streamid2: unknown to the sulis source; did you mean 'streamId'? (known: controlChannel,"),
        ];
        for (options, streaming, says) in cases {
            match parse(&options, streaming) {
                Err(PlanError::Option(t)) => assert!(t.contains(says), "{options:?}: {t}"),
                other => panic!("{options:?}: {other:?}"),
            }
        }
    }
}
