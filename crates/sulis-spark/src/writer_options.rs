//! The options of `df.write` / `df.writeStream` of `format("sulis")`.

use crate::archive_address::ArchiveAddress;
use crate::option_values::{bad, OptionMap};
use crate::reader_options::check_known;
use crate::PlanError;

/// Every option a writer knows.
pub const WRITER_OPTIONS: &[&str] = &[
    "controlChannel",
    "controlStreamId",
    "controlResponseChannel",
    "controlResponseStreamId",
    "driverDir",
    "messageTimeout",
    "channel",
    "streamId",
    "exactlyOnce",
    "stampTimestamp",
    "replayChannel",
    "replayStreamId",
    "journalChannel",
    "journalStreamId",
];

/// The exactly-once sink's journal stream, by default (`journalStreamId`).
pub const JOURNAL_STREAM_ID: i32 = 0x5A1C;

/// Where a write of `format("sulis")` publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterOptions {
    pub archive: ArchiveAddress,
    /// None: each row's `channel` column.
    pub channel: Option<String>,
    /// None: each row's `stream_id` column.
    pub stream_id: Option<i32>,
    pub exactly_once: bool,
    /// Each message's reserved value is its row's `timestamp` (or the
    /// publish time), in epoch nanoseconds.
    pub stamp_timestamp: bool,
    /// Where `exactlyOnce` reads back what was published.
    pub replay_channel: String,
    pub replay_stream_id: i32,
    /// The exactly-once sink's journal; None only where it is off.
    pub journal_channel: Option<String>,
    pub journal_stream_id: i32,
}

impl WriterOptions {
    /// A writer's options from `pairs`, for tests; panics on a bad one.
    #[cfg(test)]
    pub(crate) fn of(pairs: &[(&str, &str)]) -> WriterOptions {
        WriterOptions::parse(&OptionMap::new(
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        ))
        .expect("good options")
    }

    /// Checks and parses a writer's options; the error names the first bad
    /// one.
    pub fn parse(options: &OptionMap) -> Result<WriterOptions, PlanError> {
        check_known(options, WRITER_OPTIONS, "sink")?;
        let archive = ArchiveAddress::from_options(options)?;
        let channel = options.channel("channel", None)?;
        let stream_id = options.stream_id("streamId", None)?;
        let exactly_once = options.boolean("exactlyOnce", true)?;
        let stamp_timestamp = options.boolean("stampTimestamp", false)?;
        let replay_channel = options
            .channel("replayChannel", Some("aeron:ipc"))?
            .unwrap_or_default();
        let replay_stream_id = options
            .stream_id("replayStreamId", Some(0x5A17))?
            .unwrap_or(0x5A17);
        // The journal: journalChannel or, by default, the sink's channel (its
        // archive records it, and every executor host reaches it), or IPC
        // where the archive is reached over IPC (one machine).
        let journal_stream_id = options
            .stream_id("journalStreamId", Some(JOURNAL_STREAM_ID))?
            .unwrap_or(JOURNAL_STREAM_ID);
        let default = channel.clone().or_else(|| {
            archive
                .control_channel
                .starts_with("aeron:ipc")
                .then(|| "aeron:ipc".to_string())
        });
        let journal_channel = options.channel("journalChannel", default.as_deref())?;
        if journal_channel.is_none() && exactly_once {
            return Err(bad("option journalChannel: required with exactlyOnce when rows name their channel and the archive is reached over UDP: a channel every executor host can publish to and the archive records, e.g. aeron:udp?endpoint=<archive host>:<port>".into()));
        }
        Ok(WriterOptions {
            archive,
            channel,
            stream_id,
            exactly_once,
            stamp_timestamp,
            replay_channel,
            replay_stream_id,
            journal_channel,
            journal_stream_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<WriterOptions, PlanError> {
        WriterOptions::parse(&OptionMap::new(
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        ))
    }

    #[test]
    fn the_journal_follows_the_channel_or_ipc_and_is_required_over_udp() {
        let w = parse(&[("channel", "aeron:ipc?alias=x"), ("streamId", "3")]).unwrap();
        assert_eq!(w.journal_channel.as_deref(), Some("aeron:ipc?alias=x"));
        assert_eq!(w.journal_stream_id, JOURNAL_STREAM_ID);
        let w = parse(&[]).unwrap();
        assert_eq!(
            (w.channel, w.journal_channel.as_deref()),
            (None, Some("aeron:ipc"))
        );
        let udp = [
            ("controlChannel", "aeron:udp?endpoint=10.0.0.1:8010"),
            ("controlResponseChannel", "aeron:udp?endpoint=10.0.0.2:0"),
        ];
        match parse(&udp) {
            Err(PlanError::Option(t)) => {
                assert!(t.starts_with("option journalChannel: required"), "{t}")
            }
            other => panic!("{other:?}"),
        }
        let mut off = udp.to_vec();
        off.push(("exactlyOnce", "false"));
        assert_eq!(parse(&off).unwrap().journal_channel, None);
        match parse(&[("topic", "t")]) {
            Err(PlanError::Option(t)) => assert!(t.contains("the sulis sink takes channel"), "{t}"),
            other => panic!("{other:?}"),
        }
    }
}
