//! The archive's own counters in its driver's CnC (Aeron's types 101 to
//! 112): sessions, bytes written and read, and the times they took.

use super::*;

/// A duty cycle longer than this is counted (Aeron's archive default).
pub(super) const CYCLE_TIME_THRESHOLD: Duration = Duration::from_secs(1);
/// The archive's own counters, as Aeron's archive allocates them.
#[derive(Default)]
pub(super) struct ArchiveCounters {
    pub(super) errors: Option<Counter>,
    pub(super) control_sessions: Option<Counter>,
    pub(super) recording_sessions: Option<Counter>,
    pub(super) replay_sessions: Option<Counter>,
    pub(super) write_bytes: Option<Counter>,
    pub(super) read_bytes: Option<Counter>,
    pub(super) max_cycle_time: Option<Counter>,
    pub(super) cycle_time_exceeded: Option<Counter>,
    pub(super) max_write_time: Option<Counter>,
    pub(super) total_write_time: Option<Counter>,
    pub(super) max_read_time: Option<Counter>,
    pub(super) total_read_time: Option<Counter>,
    /// sulis's: the directory, in the label (none when it does not fit one)
    pub(super) _directory: Option<Counter>,
    /// sulis's: segment files and recorded bytes retention removed.
    pub(super) retention_segments: Option<Counter>,
    pub(super) retention_bytes: Option<Counter>,
    /// sulis's: segment files and bytes moved to the object store.
    pub(super) tier_segments: Option<Counter>,
    pub(super) tier_bytes: Option<Counter>,
}

impl ArchiveCounters {
    /// An agent's duty-cycle counters (Aeron's 103 and 104, one pair per
    /// agent in DEDICATED mode): its longest cycle and how many exceeded
    /// the threshold.
    pub(super) fn duty_cycle_counters(
        client: &Client,
        archive_id: i64,
        agent: &str,
    ) -> (Option<Counter>, Option<Counter>) {
        let key = archive_id.to_le_bytes();
        let add = |type_id: i32, label: String| {
            client
                .add_counter(type_id, &key, &format!("{label} - archiveId={archive_id}"))
                .ok()
        };
        (
            add(
                counter_type::ARCHIVE_MAX_CYCLE_TIME,
                format!("archive-{agent} max cycle time in ns"),
            ),
            add(
                counter_type::ARCHIVE_CYCLE_TIME_THRESHOLD_EXCEEDED,
                format!(
                    "archive-{agent} work cycle time exceeded count: threshold={}ns",
                    CYCLE_TIME_THRESHOLD.as_nanos()
                ),
            ),
        )
    }

    /// The read counters, for the replayer (which may run on another thread).
    pub(super) fn take_replayer_counters(&mut self) -> ReplayerCounters {
        ReplayerCounters {
            read_bytes: self.read_bytes.take(),
            total_read_time: self.total_read_time.take(),
            max_read_time: self.max_read_time.take(),
        }
    }

    /// The write counters, for the recorder (which may run on another thread).
    pub(super) fn take_recorder_counters(&mut self) -> RecorderCounters {
        RecorderCounters {
            write_bytes: self.write_bytes.take(),
            total_write_time: self.total_write_time.take(),
            max_write_time: self.max_write_time.take(),
        }
    }

    pub(super) fn new(
        client: &Client,
        archive_id: i64,
        archive_dir: &std::path::Path,
        mode: &str,
    ) -> ArchiveCounters {
        let key = archive_id.to_le_bytes();
        let add = |type_id: i32, label: &str| {
            client
                .add_counter(type_id, &key, &format!("{label} - archiveId={archive_id}"))
                .ok()
        };
        // Announced only when the whole path fits a label: a truncated one would name another directory.
        let dir = std::fs::canonicalize(archive_dir).unwrap_or_else(|_| archive_dir.to_path_buf());
        let directory = dir
            .to_str()
            .map(|d| format!("Archive Directory - archiveId={archive_id} dir={d}"))
            .filter(|label| label.len() <= sulis_concurrent::counters::MAX_LABEL_LENGTH)
            .and_then(|label| {
                client
                    .add_counter(counter_type::SULIS_ARCHIVE_DIRECTORY, &key, &label)
                    .ok()
            });
        if let Some(c) = &directory {
            c.set(archive_id);
        }
        ArchiveCounters {
            _directory: directory,
            retention_segments: add(
                counter_type::SULIS_ARCHIVE_RETENTION_SEGMENTS,
                "archive retention segments removed",
            ),
            retention_bytes: add(
                counter_type::SULIS_ARCHIVE_RETENTION_BYTES,
                "archive retention bytes removed",
            ),
            tier_segments: add(
                counter_type::SULIS_ARCHIVE_TIER_SEGMENTS,
                "archive segments moved to the object store",
            ),
            tier_bytes: add(
                counter_type::SULIS_ARCHIVE_TIER_BYTES,
                "archive bytes moved to the object store",
            ),
            errors: add(counter_type::ARCHIVE_ERROR_COUNT, "Archive Errors"),
            control_sessions: add(
                counter_type::ARCHIVE_CONTROL_SESSIONS,
                "Archive Control Sessions",
            ),
            recording_sessions: add(
                counter_type::ARCHIVE_RECORDING_SESSIONS,
                "Archive Recording Sessions",
            ),
            replay_sessions: add(
                counter_type::ARCHIVE_REPLAY_SESSIONS,
                "Archive Replay Sessions",
            ),
            write_bytes: add(
                counter_type::ARCHIVE_RECORDER_TOTAL_WRITE_BYTES,
                "archive-recorder total write bytes",
            ),
            read_bytes: add(
                counter_type::ARCHIVE_REPLAYER_TOTAL_READ_BYTES,
                "archive-replayer total read bytes",
            ),
            // SHARED: one thread runs the conductor, recorder and replayer;
            // DEDICATED: the others have counters of their own (duty_cycle_counters).
            max_cycle_time: add(
                counter_type::ARCHIVE_MAX_CYCLE_TIME,
                &format!("archive-conductor max cycle time in ns: {mode}"),
            ),
            cycle_time_exceeded: add(
                counter_type::ARCHIVE_CYCLE_TIME_THRESHOLD_EXCEEDED,
                &format!(
                    "archive-conductor work cycle time exceeded count: threshold={}ns {mode}",
                    CYCLE_TIME_THRESHOLD.as_nanos()
                ),
            ),
            max_write_time: add(
                counter_type::ARCHIVE_RECORDER_MAX_WRITE_TIME,
                "archive-recorder max write time in ns",
            ),
            total_write_time: add(
                counter_type::ARCHIVE_RECORDER_TOTAL_WRITE_TIME,
                "archive-recorder total write time in ns",
            ),
            max_read_time: add(
                counter_type::ARCHIVE_REPLAYER_MAX_READ_TIME,
                "archive-replayer max read time in ns",
            ),
            total_read_time: add(
                counter_type::ARCHIVE_REPLAYER_TOTAL_READ_TIME,
                "archive-replayer total read time in ns",
            ),
        }
    }

    /// Adds one timed operation of `ns` to a total and a maximum.
    pub(super) fn time(total: &Option<Counter>, max: &Option<Counter>, ns: i64) {
        Self::add(total, ns);
        if let Some(m) = max {
            if ns > m.get() {
                m.set(ns);
            }
        }
    }

    pub(super) fn set(c: &Option<Counter>, value: i64) {
        if let Some(c) = c {
            c.set(value);
        }
    }

    pub(super) fn add(c: &Option<Counter>, delta: i64) {
        if let Some(c) = c {
            c.set(c.get() + delta);
        }
    }
}
