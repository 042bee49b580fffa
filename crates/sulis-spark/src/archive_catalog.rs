//! The [`RecordingCatalog`] of a running archive (and, with `clusterDir`,
//! of a cluster member's directory and counters).
//!
//! A cluster's log is one recording per member, named in the member's
//! `recording.log`. What it holds up to the commit position is the same on
//! every member and never taken back; what lies past it may be truncated
//! by the next election. So its readable end is `min(recorded, commit)`,
//! the commit position read from the member's `Cluster commit-pos` counter
//! (type 203) in the counters of `driverDir`'s media driver. A position
//! once seen committed stays readable in this process while the member
//! restarts (its counter gone or starting lower).

use crate::range_planner::RecordingRange;
use crate::range_replay::{Polled, RangeReplay};
use crate::{ArchiveSession, PlanError, ReaderOptions, RecordingCatalog, RecordingInfo};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use sulis_archive::client::ArchiveError;
use sulis_client::Batch;
use sulis_concurrent::cnc::Cnc;
use sulis_concurrent::counters::CountersReader;
use sulis_protocol::archive::messages::RecordingDescriptor;
use sulis_protocol::cnc_descriptor::CNC_FILE;
use sulis_protocol::counters::type_id;

/// Recordings asked for per list request.
const PAGE: i32 = 1000;

/// The highest commit position this process has seen, per (cluster
/// directory, driver directory): a position once committed stays so.
static SEEN_COMMIT: Mutex<Option<HashMap<MemberKey, i64>>> = Mutex::new(None);

/// A member as this process reads it: its cluster and driver directories.
type MemberKey = (String, Option<String>);

/// The catalog of the archive `opts` names, connecting on first use.
pub struct ArchiveCatalog {
    opts: ReaderOptions,
    session: Option<ArchiveSession>,
    response_stream_base: i32,
    warned_no_commit: bool,
    warnings: Vec<String>,
}

fn archive_error(e: ArchiveError) -> PlanError {
    PlanError::Archive(e.to_string())
}

impl ArchiveCatalog {
    /// A catalog for `opts`, its control session answered on
    /// `response_stream_base` plus the process id modulo 2^20.
    pub fn new(opts: ReaderOptions, response_stream_base: i32) -> ArchiveCatalog {
        ArchiveCatalog {
            opts,
            session: None,
            response_stream_base,
            warned_no_commit: false,
            warnings: Vec::new(),
        }
    }

    /// The session, connected if it is not.
    pub fn session(&mut self) -> Result<&mut ArchiveSession, PlanError> {
        if self.session.is_none() {
            let connected = ArchiveSession::connect(&self.opts.archive, self.response_stream_base);
            self.session = Some(connected.map_err(|e| match (&self.opts.cluster_dir, e) {
                // A member's log: name the member, and that it is not running.
                (Some(dir), PlanError::Archive(t)) => PlanError::Option(format!(
                    "option clusterDir: the cluster member in {dir} cannot be read: {t} (driverDir {}; start the member, or name its driver)",
                    self.opts.archive.driver_dir.as_deref().unwrap_or("the default directory")
                )),
                (_, other) => other,
            })?);
        }
        Ok(self.session.as_mut().expect("connected above"))
    }

    /// Warnings to log since the last call.
    pub fn drain_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    fn info_of(&mut self, d: &RecordingDescriptor) -> Result<RecordingInfo, PlanError> {
        recording_info(self.session()?, d).map_err(archive_error)
    }

    /// `r` as a `clusterDir` query may read it: never past the member's
    /// commit position, and always live (a member's log goes on across its
    /// restarts). `required`: no commit position known is an error.
    fn committed(&mut self, r: RecordingInfo, required: bool) -> Result<RecordingInfo, PlanError> {
        let Some(cluster_dir) = self.opts.cluster_dir.clone() else {
            return Ok(r);
        };
        let driver_dir = self.opts.archive.driver_dir.clone();
        let commit = commit_position(&cluster_dir, driver_dir.as_deref())?;
        if commit.is_none() {
            if required {
                return Err(no_commit_position(&cluster_dir, driver_dir.as_deref()));
            }
            if !self.warned_no_commit {
                self.warned_no_commit = true;
                self.warnings.push(format!(
                    "{}: no commit position known yet; nothing is read until the member runs",
                    self.opts.selection()
                ));
            }
        }
        let recorded = r.recorded_end();
        Ok(RecordingInfo {
            end: cap(recorded, r.start, commit),
            live: true,
            recorded,
            ..r
        })
    }

    fn descriptors(
        &mut self,
        missing: Option<&mut Vec<i64>>,
    ) -> Result<Vec<RecordingDescriptor>, PlanError> {
        let ids = match &self.opts.cluster_dir {
            Some(dir) => Some(log_recording_ids(dir)?),
            None => self.opts.recording_ids.clone(),
        };
        let archive = self.opts.archive.describe();
        if let Some(ids) = ids {
            let mut found = Vec::new();
            let mut missing = missing;
            for id in ids {
                let d = self
                    .session()?
                    .archive
                    .list_recording(id)
                    .map_err(archive_error)?;
                match d {
                    Some(d) => found.push(d),
                    None => {
                        if let Some(m) = missing.as_deref_mut() {
                            m.push(id);
                            continue;
                        }
                        if let Some(dir) = &self.opts.cluster_dir {
                            return Err(PlanError::Option(format!("option clusterDir: the log recording {id} that {dir}/recording.log names is unknown to {archive}: driverDir and controlChannel must reach the member's own archive")));
                        }
                        return Err(PlanError::Option(format!(
                            "option recordingIds: recording {id} is unknown to {archive} (never recorded there, or purged)"
                        )));
                    }
                }
            }
            return Ok(found);
        }
        let channel = self.opts.channel.clone().unwrap_or_default();
        let stream_id = self.opts.stream_id.unwrap_or_default();
        let mut found = Vec::new();
        let mut from = 0;
        loop {
            let page = self
                .session()?
                .archive
                .list_recordings_for_uri(from, PAGE, &channel, stream_id)
                .map_err(archive_error)?;
            let full = page.len() as i32 >= PAGE;
            if let Some(last) = page.last() {
                from = last.recording_id + 1;
            }
            found.extend(page);
            if !full {
                return Ok(found);
            }
        }
    }
}

impl RecordingCatalog for ArchiveCatalog {
    fn list_selected(
        &mut self,
        missing: Option<&mut Vec<i64>>,
        require_commit: bool,
    ) -> Result<Vec<RecordingInfo>, PlanError> {
        let mut out = Vec::new();
        for d in self.descriptors(missing)? {
            let info = self.info_of(&d)?;
            out.push(self.committed(info, require_commit)?);
        }
        out.sort_by_key(|r| r.recording_id);
        Ok(out)
    }

    fn describe(&mut self, id: i64) -> Result<Option<RecordingInfo>, PlanError> {
        let Some(d) = self
            .session()?
            .archive
            .list_recording(id)
            .map_err(archive_error)?
        else {
            return Ok(None);
        };
        let info = self.info_of(&d)?;
        Ok(Some(self.committed(info, false)?))
    }

    fn position_now(&mut self, r: &RecordingInfo) -> Result<RecordingInfo, PlanError> {
        let position = self
            .session()?
            .archive
            .get_recording_position(r.recording_id)
            .map_err(archive_error)?;
        if position < 0 {
            // Stopped since: its descriptor has the stop position.
            return Ok(self.describe(r.recording_id)?.unwrap_or_else(|| r.clone()));
        }
        // A cluster log's readable end moves with its commit position too.
        self.committed(
            RecordingInfo {
                end: position,
                live: true,
                recorded: -1,
                ..r.clone()
            },
            false,
        )
    }

    fn sample(&mut self, r: &RecordingInfo, end: i64) -> Result<(u64, i64), PlanError> {
        let range = RecordingRange {
            recording_id: r.recording_id,
            stream_id: r.stream_id,
            session_id: r.session_id,
            start: r.start,
            end,
            replay_from: r.start,
            replay_to: r.end,
            recording_start: r.start,
            term_length: r.term_length,
            segment_length: r.segment_length,
            initial_term_id: r.initial_term_id,
        };
        let archive = self.opts.archive.describe();
        let (channel, stream) = (self.opts.replay_channel.clone(), self.opts.replay_stream_id);
        let timeout = Duration::from_secs_f64(self.opts.archive.message_timeout_s);
        let session = self.session()?;
        let mut replay = RangeReplay::start(session, &archive, &range, &channel, stream, timeout)
            .map_err(|(e, _)| PlanError::Archive(e.to_string()))?;
        let mut batch = Batch::with_capacity(1024, 64 * 1024);
        let (mut count, mut last) = (0u64, r.start);
        let result = loop {
            batch.clear();
            match replay.poll(session, &mut batch, 1024) {
                Ok(Polled::Fragments(_)) => {
                    for (i, &p) in batch.positions.iter().enumerate() {
                        // Whole messages ending in (start, end]: END-flagged fragments.
                        if batch.flags[i] & 0x40 != 0 && p > r.start && p <= end {
                            count += 1;
                            last = p;
                        }
                    }
                }
                Ok(Polled::Nothing) if crate::interrupt::interrupted() => {
                    break Err(PlanError::Archive(crate::interrupt::text(&format!(
                        "the replay of recording {}",
                        r.recording_id
                    ))))
                }
                Ok(Polled::Nothing) => std::thread::sleep(Duration::from_micros(200)),
                Ok(Polled::Done) => break Ok((count, last)),
                Err(e) => break Err(PlanError::Archive(e.to_string())),
            }
        };
        replay.close(session);
        result
    }

    fn archive_id(&mut self) -> Result<i64, PlanError> {
        Ok(self.session()?.archive.archive_id())
    }

    fn reset(&mut self) {
        if let Some(s) = self.session.take() {
            s.close();
        }
    }
}

impl Drop for ArchiveCatalog {
    fn drop(&mut self) {
        self.reset();
    }
}

/// A listed recording with its current end: its stop position, or what is
/// recorded while it is live.
pub fn recording_info(
    s: &mut ArchiveSession,
    d: &RecordingDescriptor,
) -> Result<RecordingInfo, ArchiveError> {
    let mut end = d.stop_position;
    let mut live = false;
    if end < 0 {
        let live_position = s.archive.get_recording_position(d.recording_id)?;
        if live_position >= 0 {
            (end, live) = (live_position, true);
        } else {
            // Not recording and no stop position: an archive that was
            // killed and has not yet recovered it.
            let max = s.archive.get_max_recorded_position(d.recording_id)?;
            end = d.start_position.max(max);
        }
    }
    Ok(RecordingInfo {
        recording_id: d.recording_id,
        stream_id: d.stream_id,
        session_id: d.session_id,
        start: d.start_position,
        end,
        term_length: d.term_buffer_length,
        mtu_length: d.mtu_length,
        live,
        segment_length: d.segment_file_length,
        initial_term_id: d.initial_term_id,
        stop_timestamp: if d.stop_position >= 0 {
            d.stop_timestamp
        } else {
            -1
        },
        recorded: -1,
    })
}

/// A log recording's readable end: what it recorded, never past the
/// commit position (nothing while none is known).
pub fn cap(end: i64, start: i64, commit: Option<i64>) -> i64 {
    match commit {
        None => start,
        Some(c) => start.max(end.min(c)),
    }
}

/// The log recordings `cluster_dir/recording.log` names (one, on a member
/// as Aeron keeps it).
pub fn log_recording_ids(cluster_dir: &str) -> Result<Vec<i64>, PlanError> {
    use crate::option_values::repr;
    if !Path::new(cluster_dir).join("recording.log").exists() {
        return Err(PlanError::Option(format!(
            "option clusterDir: {} has no recording.log (not a cluster member's directory, or a member that never started)",
            repr(cluster_dir)
        )));
    }
    let log = sulis_cluster::module::recording_log::RecordingLog::read(Path::new(cluster_dir))
        .map_err(|e| {
            PlanError::Option(format!(
                "option clusterDir: {cluster_dir}/recording.log cannot be read: {e}"
            ))
        })?;
    let mut ids: Vec<i64> = log
        .entries()
        .filter(|e| {
            e.entry_type == sulis_protocol::cluster::recording_log::ENTRY_TYPE_TERM && e.is_valid
        })
        .map(|e| e.recording_id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Err(PlanError::Option(format!(
            "option clusterDir: {cluster_dir}/recording.log names no term yet: the member has no log to read"
        )));
    }
    Ok(ids)
}

/// The member's commit position: the highest this process has seen of its
/// counter, None when it has never seen one.
pub fn commit_position(
    cluster_dir: &str,
    driver_dir: Option<&str>,
) -> Result<Option<i64>, PlanError> {
    let now = commit_counter(driver_dir)?;
    let key = (cluster_dir.to_string(), driver_dir.map(str::to_string));
    let mut seen = SEEN_COMMIT.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(HashMap::new);
    let best = now.unwrap_or(-1).max(seen.get(&key).copied().unwrap_or(-1));
    if best >= 0 {
        seen.insert(key, best);
        Ok(Some(best))
    } else {
        Ok(None)
    }
}

/// The commit position in the counters of the media driver at
/// `driver_dir`, None without one.
fn commit_counter(driver_dir: Option<&str>) -> Result<Option<i64>, PlanError> {
    let dir = driver_dir
        .map(std::path::PathBuf::from)
        .unwrap_or_else(sulis_protocol::driver_dir::default_dir);
    let Ok(cnc) = Cnc::open(&dir.join(CNC_FILE)) else {
        return Ok(None);
    };
    let reader = CountersReader::new(cnc.counters_metadata_buffer(), cnc.counters_values_buffer());
    let mut found = Vec::new();
    reader.for_each(|id, type_id, _, _| {
        if type_id == type_id::CLUSTER_COMMIT_POSITION {
            found.push(reader.counter_value(id));
        }
    });
    if found.len() > 1 {
        return Err(PlanError::Option(format!(
            "option driverDir: the media driver in {} has {} cluster commit-position counters; give the driver of one member",
            driver_dir.unwrap_or("None"),
            found.len()
        )));
    }
    Ok(found.first().copied())
}

/// The error of a read that finds no commit position.
pub fn no_commit_position(cluster_dir: &str, driver_dir: Option<&str>) -> PlanError {
    PlanError::Option(format!("option clusterDir: no commit position for the member in {cluster_dir}: the media driver in {} (driverDir) has no cluster commit-position counter (the member is not running, or driverDir is not its driver). Reading its log past what is known committed could return entries an election takes back", driver_dir.unwrap_or("the default directory")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readable_end_never_passes_the_commit_position() {
        assert_eq!(cap(4096, 0, Some(1024)), 1024); // recorded past the commit: cut there
        assert_eq!(cap(512, 0, Some(1024)), 512); // committed past what this member recorded
        assert_eq!(cap(4096, 256, None), 256); // no commit position known: nothing
        assert_eq!(cap(4096, 2048, Some(1024)), 2048); // never before the recording's start
    }

    #[test]
    fn a_directory_without_a_recording_log_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("sulis-spark-no-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_string_lossy().to_string();
        match log_recording_ids(&d) {
            Err(PlanError::Option(t)) => assert_eq!(t, format!("option clusterDir: '{d}' has no recording.log (not a cluster member's directory, or a member that never started)")),
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_counter_means_no_commit_position() {
        let dir =
            std::env::temp_dir().join(format!("sulis-spark-no-driver-{}", std::process::id()));
        let driver = dir.join("no-driver");
        assert_eq!(
            commit_position("/c", Some(&driver.to_string_lossy())).unwrap(),
            None
        );
        assert!(
            matches!(no_commit_position("/c", None), PlanError::Option(t) if t.contains("the default directory (driverDir)"))
        );
    }
}

#[cfg(test)]
mod stopped_member_tests {
    use super::*;
    use crate::{OptionMap, RecordingCatalog};
    use std::time::Instant;

    #[test]
    fn a_stopped_members_log_fails_at_once_naming_the_member_and_that_it_is_not_running() {
        let base = std::env::temp_dir().join(format!("sulis-spark-stopped-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let driver_dir = base.join("driver");
        let mut ctx = sulis_driver::DriverContext::default();
        ctx.dir = driver_dir.clone();
        ctx.dir_delete_on_start = true;
        drop(sulis_driver::MediaDriver::launch(ctx).unwrap()); // it ran, and stopped
        let cluster_dir = base.join("cluster");
        let options = OptionMap::new([
            (
                "clusterDir".to_string(),
                cluster_dir.to_string_lossy().to_string(),
            ),
            (
                "driverDir".to_string(),
                driver_dir.to_string_lossy().to_string(),
            ),
        ]);
        let opts = ReaderOptions::parse(&options, true).unwrap();
        let mut catalog = ArchiveCatalog::new(opts, 0x5A40_0000);
        let began = Instant::now();
        let e = catalog.archive_id().unwrap_err();
        assert!(
            began.elapsed().as_secs() < 5,
            "it waited {:?}",
            began.elapsed()
        );
        match e {
            PlanError::Option(t) => {
                assert!(
                    t.starts_with(&format!(
                        "option clusterDir: the cluster member in {} cannot be read",
                        cluster_dir.display()
                    )),
                    "{t}"
                );
                assert!(
                    t.contains("it is not running")
                        && t.contains(&driver_dir.to_string_lossy().to_string()),
                    "{t}"
                );
            }
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
