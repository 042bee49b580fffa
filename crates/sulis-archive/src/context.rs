//! The archive's settings, with Aeron Archive's defaults, and its options
//! table (`sulis_protocol::options`): the `SULIS_ARCHIVE_*` variables, the
//! `sulis.Archive(...)` keywords, the `sulis archive` flags and the archive
//! section of `docs/config.md` all come from [`OPTIONS`]. Credentials, a
//! challenge and an authoriser are objects, not text: keywords only.

use crate::checksum::Checksum;
use std::path::PathBuf;
use std::time::Duration;
use sulis_protocol::archive::segment::{check_segment_file_length, DEFAULT_SEGMENT_FILE_LENGTH};
use sulis_protocol::options::{
    parse_duration as duration, parse_int as int, parse_optional, parse_text as text, show,
    show_duration, show_optional, Configured, OptionSpec, Sources,
};
use sulis_protocol::values::{parse_bool, parse_size};

/// How an archive runs.
#[derive(Clone, Debug)]
pub struct ArchiveContext {
    /// Where the catalog and segment files live.
    pub archive_dir: PathBuf,
    /// The media driver's directory (the archive is one of its clients).
    pub driver_dir: PathBuf,
    /// Control requests over the network (`None`: local control only).
    pub control_channel: Option<String>,
    /// Stream of the control channel.
    pub control_stream_id: i32,
    /// Control requests from this machine.
    pub local_control_channel: String,
    /// Stream of the local control channel.
    pub local_control_stream_id: i32,
    /// Term length of the response publications.
    pub control_term_buffer_length: usize,
    /// The archive's id (`None`: its client id, as Aeron's).
    pub archive_id: Option<i64>,
    /// Segment file length (raised to the term length of a stream with longer terms).
    pub segment_file_length: usize,
    /// Segment files: 0 page cache, 1 data synced per write, 2 data and metadata.
    pub file_sync_level: u8,
    /// Catalog: 0, 1 or 2 as above, not below `file_sync_level`; `None`:
    /// `file_sync_level`'s, which [`ArchiveContext::conclude`] sets.
    pub catalog_file_sync_level: Option<u8>,
    /// Stamped into every recorded DATA frame and catalog entry (Aeron's
    /// `aeron.archive.record.checksum`); `None`: none.
    pub record_checksum: Option<Checksum>,
    /// Checked on every replayed DATA frame (Aeron's
    /// `aeron.archive.replay.checksum`): a mismatch ends the replay with an
    /// error naming the frame.
    pub replay_checksum: Option<Checksum>,
    /// Publish RecordingStarted / RecordingProgress / RecordingStopped on
    /// `recording_events_channel` (Aeron's `aeron.archive.recording.events.enabled`).
    pub recording_events_enabled: bool,
    /// Where recording events go: any channel a publication takes (Aeron's
    /// default is an MDC channel sulis does not have; `aeron:ipc` here).
    pub recording_events_channel: String,
    /// Their stream (Aeron's default, 30).
    pub recording_events_stream_id: i32,
    /// Initial catalog capacity (it grows).
    pub catalog_capacity: usize,
    /// Most bytes written or read per call.
    pub file_io_max_length: usize,
    /// Recordings at once.
    pub max_concurrent_recordings: usize,
    /// Replays at once.
    pub max_concurrent_replays: usize,
    /// How long a new session or replay may take to connect.
    pub connect_timeout: Duration,
    /// How often an active control session is pinged.
    pub session_liveness_check_interval: Duration,
    /// How long the driver may stay silent (client setting).
    pub driver_timeout: Duration,
    /// Channel a replicating archive receives on.
    pub replication_channel: Option<String>,
    /// Clients must connect with one of these credentials, each its own
    /// principal for the authoriser (`None`: everyone may).
    pub credentials: Option<Vec<Vec<u8>>>,
    /// With credentials: a challenge clients must then answer...
    pub challenge: Option<Vec<u8>>,
    /// ... with this.
    pub challenge_response: Vec<u8>,
    /// Below this many bytes of usable space in the archive directory's
    /// file system new recordings, extensions and replications are refused
    /// with STORAGE_SPACE (Aeron's `low.storage.space.threshold`).
    pub low_storage_space_threshold: u64,
    /// Which agents share a thread (Aeron's `aeron.archive.threading.mode`).
    pub threading_mode: ArchiveThreadingMode,
    /// What the archive's threads do when idle (Aeron's
    /// `aeron.archive.*.idle.strategy`; one for all of them here).
    pub idle_strategy: sulis_concurrent::idle::IdleStrategy,
    /// The retention rules (`crate::retention`), read again when the file
    /// changes (`None`: `retention.policy` in the archive directory; no
    /// file, no retention).
    pub retention_policy_file: Option<PathBuf>,
    /// How often the policy file and the recordings are looked at.
    pub retention_check_interval: Duration,
    /// How long a hold (`crate::holds`) lasts after it was last written.
    pub retention_hold_timeout: Duration,
    /// The object store segments move to (`crate::tier`; `None`: none):
    /// `http(s)://HOST:PORT/BUCKET[/PREFIX]` or `s3://BUCKET[/PREFIX]`.
    pub tier_store: Option<String>,
    /// The region requests to the store are signed for.
    pub tier_region: String,
    /// Most bytes of segments read back from the store kept on the disk.
    pub tier_cache_size: u64,
    /// How long connecting to the store, or waiting for its answer, may take.
    pub tier_timeout: Duration,
    /// Most bytes a second an upload reads and sends (0: no limit).
    pub tier_upload_rate: u64,
    /// Where each setting came from.
    pub sources: Sources,
    /// Asked while the archive waits for its media driver at start (a
    /// Python process checks for signals there); not a setting.
    pub interrupt: Option<sulis_client::Interrupt>,
}

/// Which of the archive's agents share a thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ArchiveThreadingMode {
    /// The conductor, recorder and replayer on one thread (the default:
    /// the fewest cores, and what sulis ran before there was a choice).
    #[default]
    Shared,
    /// Each on a thread of its own: a slow disk write does not delay a
    /// control request or a replay (Aeron's default).
    Dedicated,
}

impl ArchiveThreadingMode {
    /// `shared` or `dedicated`.
    pub fn name(self) -> &'static str {
        match self {
            ArchiveThreadingMode::Shared => "shared",
            ArchiveThreadingMode::Dedicated => "dedicated",
        }
    }

    /// Parses `shared` or `dedicated`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "shared" => Ok(ArchiveThreadingMode::Shared),
            "dedicated" => Ok(ArchiveThreadingMode::Dedicated),
            other => Err(format!(
                "archive threading mode '{other}': expected shared or dedicated"
            )),
        }
    }
}

fn show_text(v: &str) -> String {
    v.to_string()
}
fn size(s: &str) -> Result<usize, String> {
    parse_size(s).map(|v| v as usize)
}
fn checksum(s: &str) -> Result<Option<Checksum>, String> {
    parse_optional(s, Checksum::parse)
}
fn show_checksum(c: &Option<Checksum>) -> String {
    c.map(|c| c.name().to_string()).unwrap_or_default()
}
fn optional_text(s: &str) -> Result<Option<String>, String> {
    parse_optional(s, text)
}
/// A sync level: 0, 1 or 2 (`file_sync_level`'s values).
pub fn sync_level(s: &str) -> Result<u8, String> {
    match int::<u8>(s)? {
        v @ 0..=2 => Ok(v),
        v => Err(format!("{v} is not 0, 1 or 2")),
    }
}

/// Every archive option.
pub static OPTIONS: &[OptionSpec<ArchiveContext>] = &[
    sulis_protocol::option!(archive_dir, "SULIS_ARCHIVE_DIR", "path", "Directory of the catalog and segment files.", |s: &str| Ok::<_, String>(PathBuf::from(s)), |v: &PathBuf| v.display().to_string()),
    sulis_protocol::option!(driver_dir, "SULIS_DIR", "path", "The media driver's directory (the archive is one of its clients).", |s: &str| Ok::<_, String>(PathBuf::from(s)), |v: &PathBuf| v.display().to_string()),
    sulis_protocol::option!(control_channel, "SULIS_ARCHIVE_CONTROL_CHANNEL", "channel", "UDP channel remote clients send requests to (empty: local control only).", optional_text, show_optional),
    sulis_protocol::option!(control_stream_id, "SULIS_ARCHIVE_CONTROL_STREAM_ID", "", "Stream of the control channel.", int::<i32>, show),
    sulis_protocol::option!(local_control_channel, "SULIS_ARCHIVE_LOCAL_CONTROL_CHANNEL", "channel", "Channel clients on this machine send requests to.", text, |v: &String| show_text(v)),
    sulis_protocol::option!(local_control_stream_id, "SULIS_ARCHIVE_LOCAL_CONTROL_STREAM_ID", "", "Stream of the local control channel.", int::<i32>, show),
    sulis_protocol::option!(control_term_buffer_length, "SULIS_ARCHIVE_CONTROL_TERM_BUFFER_LENGTH", "bytes", "Term length of the control response publications.", size, show),
    sulis_protocol::option!(archive_id, "SULIS_ARCHIVE_ID", "", "The archive's id (empty: its client id, as Aeron's).", |s: &str| parse_optional(s, int::<i64>), show_optional),
    sulis_protocol::option!(segment_file_length, "SULIS_ARCHIVE_SEGMENT_FILE_LENGTH", "bytes", "Bytes per segment file, a power of two (raised to the term length of a stream with longer terms).", size, show),
    sulis_protocol::option!(file_sync_level, "SULIS_ARCHIVE_FILE_SYNC_LEVEL", "", "Segment files: 0 writes left to the OS (page cache), 1 each write's data synced, 2 data and metadata.", sync_level, show),
    sulis_protocol::option!(catalog_file_sync_level, "SULIS_ARCHIVE_CATALOG_FILE_SYNC_LEVEL", "", "Catalog: 0, 1 or 2 as file_sync_level, not below it (empty: file_sync_level's).", |s: &str| parse_optional(s, sync_level), show_optional),
    sulis_protocol::option!(record_checksum, "SULIS_ARCHIVE_RECORD_CHECKSUM", "", "crc32 or crc32c (Aeron's class names too): stamped into every recorded DATA frame and catalog entry (Aeron's aeron.archive.record.checksum); empty: none.", checksum, show_checksum),
    sulis_protocol::option!(replay_checksum, "SULIS_ARCHIVE_REPLAY_CHECKSUM", "", "crc32 or crc32c: checked on every replayed DATA frame; a mismatch ends the replay naming the frame; empty: none.", checksum, show_checksum),
    sulis_protocol::option!(recording_events_enabled, "SULIS_ARCHIVE_RECORDING_EVENTS_ENABLED", "bool", "Publish RecordingStarted/Progress/Stopped events on recording_events_channel (Aeron's recording events).", parse_bool, show),
    sulis_protocol::option!(recording_events_channel, "SULIS_ARCHIVE_RECORDING_EVENTS_CHANNEL", "channel", "Where recording events go: Aeron's default, a dynamic MDC publication whose control address subscribers name (aeron:udp?control=HOST:8030, from any host).", text, |v: &String| show_text(v)),
    sulis_protocol::option!(recording_events_stream_id, "SULIS_ARCHIVE_RECORDING_EVENTS_STREAM_ID", "", "Stream of the recording events.", int::<i32>, show),
    sulis_protocol::option!(catalog_capacity, "SULIS_ARCHIVE_CATALOG_CAPACITY", "bytes", "Initial catalog file length (it grows).", size, show),
    sulis_protocol::option!(file_io_max_length, "SULIS_ARCHIVE_FILE_IO_MAX_LENGTH", "bytes", "Most bytes written or read per call, a power of two of at least 4096.", size, show),
    sulis_protocol::option!(max_concurrent_recordings, "SULIS_ARCHIVE_MAX_CONCURRENT_RECORDINGS", "", "Recordings at once; more are refused.", int::<usize>, show),
    sulis_protocol::option!(max_concurrent_replays, "SULIS_ARCHIVE_MAX_CONCURRENT_REPLAYS", "", "Replays at once; more are refused.", int::<usize>, show),
    sulis_protocol::option!(connect_timeout, "SULIS_ARCHIVE_CONNECT_TIMEOUT", "duration", "How long a new control session or replay may take to connect.", duration, show_duration),
    sulis_protocol::option!(session_liveness_check_interval, "SULIS_ARCHIVE_SESSION_LIVENESS_CHECK_INTERVAL", "duration", "How often an active control session is pinged.", duration, show_duration),
    sulis_protocol::option!(driver_timeout, "SULIS_ARCHIVE_DRIVER_TIMEOUT", "duration", "How long the media driver may stay silent before the archive gives up on it.", duration, show_duration),
    sulis_protocol::option!(replication_channel, "SULIS_ARCHIVE_REPLICATION_CHANNEL", "channel", "Channel this archive receives replicated recordings on (empty: replication needs one per request).", optional_text, show_optional),
    sulis_protocol::option!(low_storage_space_threshold, "SULIS_ARCHIVE_LOW_STORAGE_SPACE_THRESHOLD", "bytes", "Below this many usable bytes in the archive directory's file system, new recordings, extensions and replications are refused with STORAGE_SPACE.", |s: &str| parse_size(s), show),
    sulis_protocol::option!(threading_mode, "SULIS_ARCHIVE_THREADING_MODE", "", "shared: conductor, recorder and replayer on one thread; dedicated: a thread each (Aeron's default).", ArchiveThreadingMode::parse, |v: &ArchiveThreadingMode| v.name().to_string()),
    sulis_protocol::option!(retention_policy_file, "SULIS_ARCHIVE_RETENTION_POLICY_FILE", "path", "Retention rules (stream, channel pattern, max-age, max-size; see Retention in the docs), read again whenever the file changes (empty: retention.policy in the archive directory; no file, nothing is removed).", |s: &str| parse_optional(s, |s: &str| Ok::<_, String>(PathBuf::from(s))), |v: &Option<PathBuf>| v.as_ref().map(|p| p.display().to_string()).unwrap_or_default()),
    sulis_protocol::option!(retention_check_interval, "SULIS_ARCHIVE_RETENTION_CHECK_INTERVAL", "duration", "How often the retention policy file and the recordings are looked at.", duration, show_duration),
    sulis_protocol::option!(retention_hold_timeout, "SULIS_ARCHIVE_RETENTION_HOLD_TIMEOUT", "duration", "How long a reader's hold (holds/NAME.hold) keeps segments after it was last written (as Kafka's offsets.retention.minutes).", duration, show_duration),
    sulis_protocol::option!(tier_store, "SULIS_ARCHIVE_TIER_STORE", "url", "Object store that closed segments move to after a retention rule's tier-after: http(s)://HOST:PORT/BUCKET[/PREFIX] or s3://BUCKET[/PREFIX]; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else the AWS_PROFILE of the shared credentials file (empty: no tiering).", optional_text, show_optional),
    sulis_protocol::option!(tier_region, "SULIS_ARCHIVE_TIER_REGION", "", "The region requests to the object store are signed for.", text, |v: &String| show_text(v)),
    sulis_protocol::option!(tier_cache_size, "SULIS_ARCHIVE_TIER_CACHE_SIZE", "bytes", "Most bytes of segments read back from the object store kept in tier-cache/ in the archive directory.", |s: &str| parse_size(s), show),
    sulis_protocol::option!(tier_timeout, "SULIS_ARCHIVE_TIER_TIMEOUT", "duration", "How long connecting to the object store, or waiting for one of its answers, may take.", duration, show_duration),
    sulis_protocol::option!(tier_upload_rate, "SULIS_ARCHIVE_TIER_UPLOAD_RATE", "bytes", "Most bytes a second an upload reads from the disk and sends to the object store (each segment is read twice: once for its checksums, once to send it), as Kafka's remote.log.manager.copy.max.bytes.per.second: uploads then leave the disk and the network to recording (0: as fast as the store takes them).", |s: &str| parse_size(s), show),
    sulis_protocol::option!(idle_strategy, "SULIS_ARCHIVE_IDLE_STRATEGY", "", "What the archive's threads do when idle: backoff (spin, then park 1 us to 1 ms; Aeron's also yields, which starves an agent on busy cores), backoff:<longest park>, busy-spin, yielding, sleeping or sleeping:<duration>.", sulis_concurrent::idle::IdleStrategy::parse, |v: &sulis_concurrent::idle::IdleStrategy| v.name()),
];

impl Configured for ArchiveContext {
    const WHAT: &'static str = "archive";
    fn table() -> &'static [OptionSpec<Self>] {
        OPTIONS
    }
    fn sources_mut(&mut self) -> &mut Sources {
        &mut self.sources
    }
    fn sources(&self) -> &Sources {
        &self.sources
    }
}

impl Default for ArchiveContext {
    fn default() -> Self {
        ArchiveContext {
            archive_dir: PathBuf::from("archive"),
            driver_dir: sulis_protocol::driver_dir::default_dir(),
            control_channel: None,
            control_stream_id: 10,
            local_control_channel: "aeron:ipc".into(),
            local_control_stream_id: 10,
            control_term_buffer_length: 64 * 1024,
            archive_id: None,
            segment_file_length: DEFAULT_SEGMENT_FILE_LENGTH,
            file_sync_level: 0,
            catalog_file_sync_level: None,
            record_checksum: None,
            replay_checksum: None,
            recording_events_enabled: false,
            recording_events_channel: "aeron:udp?control-mode=dynamic|control=localhost:8030"
                .to_string(),
            recording_events_stream_id: 30,
            catalog_capacity: sulis_protocol::archive::catalog::DEFAULT_CATALOG_CAPACITY,
            file_io_max_length: 1024 * 1024,
            max_concurrent_recordings: 20,
            max_concurrent_replays: 20,
            connect_timeout: Duration::from_secs(5),
            session_liveness_check_interval: Duration::from_secs(1),
            driver_timeout: Duration::from_secs(10),
            replication_channel: None,
            credentials: None,
            challenge: None,
            challenge_response: Vec::new(),
            low_storage_space_threshold: 128 * 1024 * 1024,
            threading_mode: ArchiveThreadingMode::Shared,
            idle_strategy: sulis_concurrent::idle::IdleStrategy::backoff(),
            retention_policy_file: None,
            retention_check_interval: Duration::from_secs(10),
            retention_hold_timeout: Duration::from_secs(7 * 86_400),
            tier_store: None,
            tier_region: "us-east-1".into(),
            tier_cache_size: 1 << 30,
            tier_timeout: Duration::from_secs(30),
            tier_upload_rate: 0,
            sources: Sources::default(),
            interrupt: None,
        }
    }
}

impl ArchiveContext {
    /// The retention policy file: `retention_policy_file`, else
    /// `retention.policy` in the archive directory.
    pub fn retention_policy_path(&self) -> PathBuf {
        self.retention_policy_file
            .clone()
            .unwrap_or_else(|| self.archive_dir.join("retention.policy"))
    }

    /// The catalog's sync level: `catalog_file_sync_level`, else `file_sync_level`'s.
    pub fn catalog_sync_level(&self) -> u8 {
        self.catalog_file_sync_level.unwrap_or(self.file_sync_level)
    }

    /// Checks the settings and derives those left unset (the catalog's sync
    /// level from `file_sync_level`); an error names the setting and what is wrong.
    pub fn conclude(&mut self) -> Result<(), String> {
        check_segment_file_length(self.segment_file_length)
            .map_err(|e| format!("segment_file_length: {e}"))?;
        let catalog = self.catalog_sync_level();
        if self.file_sync_level > 2 || catalog > 2 {
            return Err(format!(
                "file_sync_level {} / catalog_file_sync_level {catalog}: each must be 0, 1 or 2",
                self.file_sync_level
            ));
        }
        // As Aeron's Archive.Context.conclude: a catalog synced less than the
        // segments it describes is refused, not raised.
        if catalog < self.file_sync_level {
            return Err(format!(
                "catalog_file_sync_level {catalog} is below file_sync_level {}: the catalog must be \
                 synced at least as much as the segments it describes (leave \
                 catalog_file_sync_level unset to take file_sync_level's)",
                self.file_sync_level
            ));
        }
        self.catalog_file_sync_level = Some(catalog);
        if !self.file_io_max_length.is_power_of_two() || self.file_io_max_length < 4096 {
            return Err(format!(
                "file_io_max_length {} must be a power of two of at least 4096",
                self.file_io_max_length
            ));
        }
        if let Some(c) = &self.control_channel {
            let uri = sulis_protocol::uri::ChannelUri::parse(c)
                .map_err(|e| format!("control_channel: {e}"))?;
            if uri.media() != sulis_protocol::uri::Media::Udp {
                return Err(format!(
                    "control_channel '{c}' must be a UDP channel (local clients use local_control_channel)"
                ));
            }
        }
        sulis_protocol::uri::ChannelUri::parse(&self.local_control_channel)
            .map_err(|e| format!("local_control_channel: {e}"))?;
        if self.challenge.is_some() && self.credentials.is_none() {
            return Err(
                "a challenge needs credentials: clients answer it after connecting with them"
                    .into(),
            );
        }
        if let Some(store) = &self.tier_store {
            crate::tier::object_store::StoreLocation::parse(store, &self.tier_region)
                .map_err(|e| format!("tier_store: {e}"))?;
        }
        if self.tier_timeout.is_zero() {
            return Err("tier_timeout must be above 0".into());
        }
        if self.retention_check_interval.is_zero() {
            return Err("retention_check_interval must be above 0".into());
        }
        if self.max_concurrent_recordings == 0 || self.max_concurrent_replays == 0 {
            return Err(
                "max_concurrent_recordings and max_concurrent_replays must be at least 1".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels(file: &str, catalog: Option<&str>) -> Result<ArchiveContext, String> {
        let mut ctx = ArchiveContext::default();
        ctx.set_option("file_sync_level", file)?;
        if let Some(c) = catalog {
            ctx.set_option("catalog_file_sync_level", c)?;
        }
        ctx.conclude().map(|()| ctx)
    }

    #[test]
    fn should_sync_the_catalog_as_the_segments_when_its_level_is_unset() {
        for file in ["0", "1", "2"] {
            let ctx = levels(file, None).unwrap();
            assert_eq!(ctx.catalog_file_sync_level, Some(ctx.file_sync_level));
            let ctx = levels(file, Some("")).unwrap();
            assert_eq!(
                ctx.catalog_sync_level(),
                ctx.file_sync_level,
                "empty: unset"
            );
        }
        let ctx = levels("1", Some("2")).unwrap();
        assert_eq!((ctx.file_sync_level, ctx.catalog_sync_level()), (1, 2));
    }

    #[test]
    fn should_refuse_a_catalog_sync_level_below_the_file_sync_level() {
        // As Aeron's Archive.Context.conclude: refused, not raised.
        let e = levels("2", Some("1")).unwrap_err();
        assert!(
            e.contains("catalog_file_sync_level 1 is below file_sync_level 2"),
            "{e}"
        );
        let mut ctx = ArchiveContext {
            file_sync_level: 1,
            catalog_file_sync_level: Some(0),
            ..ArchiveContext::default()
        };
        assert!(ctx.conclude().is_err());
        ctx.catalog_file_sync_level = None;
        ctx.conclude().unwrap();
        assert_eq!(ctx.catalog_file_sync_level, Some(1));
    }
}
