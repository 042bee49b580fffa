//! The driver side of `format("sulis")`: what a query reads, batch or
//! streaming, decided against a [`RecordingCatalog`] on the clock the
//! caller passes (seconds, any origin: tests run it by hand).
//!
//! A streaming offset ([`SourceOffset`]) holds a position per recording.
//! Recordings of the selection that start later join the offsets at their
//! start position, as new Kafka partitions do. Offsets carry only the
//! recordings that can still advance or have unread data: one stopped and
//! read to its stop leaves them (but for the stream's newest recording, the
//! one a user would extend), and the offset then says only that every
//! recording below an id it leaves out was read to its stop ([`Finished`]),
//! so a stream whose publishers come and go does not grow its offsets.
//! A recording that left is extended (Aeron's `extendRecording`) at the
//! position it stopped: the planner, which saw where that was, puts it back
//! at that position and reads on. A query restarted on its checkpoint no
//! longer knows where: it tells an extension by the recording being live
//! again or stopped later than the offsets say, and fails
//! (`failOnDataLoss`) naming it rather than guess.

use crate::archive_files::{announced_archive_dir, files_readable};
use crate::range_planner::{
    check_data_loss, plan_ranges, resolve_positions, Positions, RecordingRange,
};
use crate::retention_hold::RetentionHold;
use crate::{Finished, PlanError, ReaderOptions, RecordingCatalog, RecordingInfo, SourceOffset};
use std::collections::BTreeMap;

/// Re-list the selected recordings (to find new ones) at most this often;
/// in between, `latest_offset` asks only for the live ones' positions.
pub const LIST_INTERVAL_S: f64 = 0.5;
/// Ask for the live recordings' positions at most this often, however
/// often Spark asks (about 100 times a second when idle).
pub const POSITION_INTERVAL_S: f64 = 0.1;
/// Bytes sampled at a recording's start to estimate its framed message
/// length (for row limits).
pub const SAMPLE_BYTES: i64 = 64 * 1024;
/// Positions are multiples of this.
pub const FRAME_ALIGNMENT: i64 = 32;

/// How much one micro-batch may take (Spark's `ReadLimit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadLimit {
    AllAvailable,
    MaxBytes(i64),
    MaxRows(i64),
    /// Wait for this many rows, but no longer than `maxTriggerDelay`.
    MinRows(i64),
}

/// A line the planner wants logged, with its level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogLine {
    Info(String),
    Warning(String),
}

/// The planner of one query (see the module doc).
pub struct StreamPlanner<C: RecordingCatalog> {
    pub opts: ReaderOptions,
    catalog: C,
    infos: BTreeMap<i64, RecordingInfo>,
    listed_at: Option<f64>,
    positions_at: f64,
    /// Trigger.AvailableNow: nothing past these.
    target: Option<BTreeMap<i64, i64>>,
    /// Estimated bytes per message, per recording.
    frame_len: BTreeMap<i64, f64>,
    last_batch_at: f64,
    /// Selected by id, unknown to the archive (purged?).
    missing: Vec<i64>,
    /// The position each recording this planner left out of the offsets
    /// was read to (its stop then).
    read_to: BTreeMap<i64, i64>,
    log: Vec<LogLine>,
    /// What the query still has to read, kept from the archive's retention.
    hold: RetentionHold,
    hold_epoch: std::time::Instant,
    /// The archive's directory, once found readable here, and when it was looked for.
    hold_dir: Option<String>,
    hold_dir_at: Option<f64>,
    /// The positions held now (the next read's start per recording).
    holding: BTreeMap<i64, i64>,
}

impl<C: RecordingCatalog> StreamPlanner<C> {
    /// A planner for `opts` on `catalog`, started at `now`.
    pub fn new(opts: ReaderOptions, catalog: C, now: f64) -> Self {
        StreamPlanner {
            catalog,
            infos: BTreeMap::new(),
            listed_at: None,
            positions_at: now,
            target: None,
            frame_len: BTreeMap::new(),
            last_batch_at: now,
            missing: Vec::new(),
            read_to: BTreeMap::new(),
            log: Vec::new(),
            hold: RetentionHold::new(&opts.retention_hold, opts.retention_hold_lease_s),
            hold_epoch: std::time::Instant::now(),
            hold_dir: None,
            hold_dir_at: None,
            holding: BTreeMap::new(),
            opts,
        }
    }

    /// The catalog.
    pub fn catalog(&mut self) -> &mut C {
        &mut self.catalog
    }

    /// The lines to log since the last call.
    pub fn drain_log(&mut self) -> Vec<LogLine> {
        std::mem::take(&mut self.log)
    }

    fn warn(&mut self, text: String) {
        self.log.push(LogLine::Warning(text));
    }

    /// Keeps `positions` (the next read's start per recording) from the
    /// archive's retention: the query's hold (`retentionHold`).
    fn keep(&mut self, positions: BTreeMap<i64, i64>) {
        if self.hold.name().is_none() || positions.is_empty() {
            return;
        }
        let now = self.hold_epoch.elapsed().as_secs_f64();
        // The directory is looked for once, and again (at most every RENEW_S) while not found.
        let due = self
            .hold_dir_at
            .is_none_or(|at| self.hold_dir.is_none() && now - at >= crate::retention_hold::RENEW_S);
        if due {
            self.hold_dir_at = Some(now);
            self.hold_dir = match self.opts.archive_dir.clone() {
                Some(d) => files_readable(Some(&d)).then_some(d),
                None => self.catalog.archive_id().ok().and_then(|id| {
                    announced_archive_dir(self.opts.archive.driver_dir.as_deref(), id)
                }),
            };
        }
        match self.hold.hold(self.hold_dir.as_deref(), &positions, now) {
            Some(Ok(line)) => self.log.push(LogLine::Info(line)),
            Some(Err(line)) => {
                self.hold_dir = None; // looked for again
                self.warn(line)
            }
            None => {}
        }
        self.holding = positions;
    }

    /// Spark committed the micro-batch ending at `end`: the next one reads
    /// from there, so the hold moves there.
    pub fn commit(&mut self, end: &SourceOffset) {
        self.keep(end.positions.clone());
    }

    /// The query stops: a hold of its own goes (a named one stays).
    pub fn stop(&mut self) {
        self.hold.stop();
        self.holding.clear();
    }

    /// The positions the query's hold keeps now (tests).
    pub fn held(&self) -> Option<&BTreeMap<i64, i64>> {
        self.hold.held()
    }

    /// Runs `f`, naming the archive and what was being done in a failure to
    /// reach it, and forgetting the session then (a session to a dead
    /// archive times out for ever, and a restarted one does not know it).
    fn archive_call<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Self) -> Result<T, PlanError>,
    ) -> Result<T, PlanError> {
        f(self).map_err(|e| match e {
            PlanError::Archive(raw) => {
                self.catalog.reset();
                PlanError::Archive(format!(
                    "{}: {what} of {} failed: {raw}",
                    self.opts.archive.describe(),
                    self.opts.selection()
                ))
            }
            other => other,
        })
    }

    // -- what the archive holds now -------------------------------------

    /// The selected recordings' positions: a full listing every
    /// [`LIST_INTERVAL_S`], else one position request per live recording.
    fn refresh(&mut self, force: bool, now: f64) -> Result<(), PlanError> {
        let due = self.listed_at.is_none_or(|at| now - at >= LIST_INTERVAL_S);
        if force || due || self.infos.is_empty() {
            let mut missing = Vec::new();
            let listed = self.catalog.list_selected(Some(&mut missing), false)?;
            self.missing = missing;
            self.infos = listed.into_iter().map(|r| (r.recording_id, r)).collect();
            self.listed_at = Some(now);
            self.positions_at = now;
            return Ok(());
        }
        if now - self.positions_at < POSITION_INTERVAL_S {
            return Ok(());
        }
        self.positions_at = now;
        let live: Vec<RecordingInfo> = self.infos.values().filter(|r| r.live).cloned().collect();
        for r in live {
            let fresh = self.catalog.position_now(&r)?;
            self.infos.insert(r.recording_id, fresh);
        }
        Ok(())
    }

    /// Recordings of `begin` gone from the archive, or truncated below the
    /// position read to: data loss (Kafka's source fails the same way when
    /// partitions are gone or an offset is out of range), or with
    /// `failOnDataLoss=false` a warning, and the offset goes on without
    /// them (gone) or from the new stop (truncated). One the offset says
    /// was read to its stop (`stopped`) lost nothing when it goes.
    fn check_gone_and_truncated(
        &mut self,
        begin: &BTreeMap<i64, i64>,
        stopped: &BTreeMap<i64, i64>,
    ) -> Result<BTreeMap<i64, i64>, PlanError> {
        let archive = self.opts.archive.describe();
        let mut lost = Vec::new();
        let mut next = begin.clone();
        for (&id, &at) in begin {
            match self.infos.get(&id) {
                None => {
                    if let Some(&stop) = stopped.get(&id).filter(|&&s| at >= s) {
                        self.log.push(LogLine::Info(format!(
                            "recording {id}, read to its stop position {stop}, is no longer in {archive}: dropped from the offsets"
                        )));
                        next.remove(&id);
                        continue;
                    }
                    lost.push(format!("recording {id} is no longer in {archive} (purged?); this query had read it to position {at}, not known to be its end: what followed was never read"));
                    next.remove(&id);
                }
                Some(r) if r.recorded_end() < at => {
                    lost.push(format!("recording {id} was truncated to position {}, below position {at} this query had read to: whatever is recorded from {} on again would be missed", r.end, r.end));
                    next.insert(id, r.end);
                }
                Some(_) => {}
            }
        }
        if !lost.is_empty() {
            let text = lost.join("; ");
            if self.opts.fail_on_data_loss {
                return Err(PlanError::DataLoss(format!(
                    "{text}; failOnDataLoss=true (set it to false to skip them)"
                )));
            }
            self.warn(format!("{text}; skipped (failOnDataLoss=false)"));
        }
        Ok(next)
    }

    /// The recording as the archive describes it now (its start moves when
    /// data is purged); None when it is gone and `failOnDataLoss=false`.
    fn info_now(&mut self, id: i64) -> Result<Option<RecordingInfo>, PlanError> {
        match self.catalog.describe(id)? {
            Some(fresh) => {
                self.infos.insert(id, fresh.clone());
                Ok(Some(fresh))
            }
            None => {
                let text = format!(
                    "recording {id} is no longer in {} (purged?)",
                    self.opts.archive.describe()
                );
                if self.opts.fail_on_data_loss {
                    return Err(PlanError::DataLoss(format!(
                        "{text}; failOnDataLoss=true (set it to false to skip it)"
                    )));
                }
                self.warn(format!("{text}; skipped (failOnDataLoss=false)"));
                self.infos.remove(&id);
                Ok(None)
            }
        }
    }

    // -- a batch read ---------------------------------------------------

    /// `spark.read`: the ranges between `startingPositions` and
    /// `endingPositions` of what is selected now.
    pub fn batch_ranges(&mut self) -> Result<Vec<RecordingRange>, PlanError> {
        self.archive_call("planning a read", |p| {
            let infos = p.catalog.list_selected(None, true)?;
            let positions = p.resolve(&infos, false)?;
            let by_id = infos.into_iter().map(|r| (r.recording_id, r)).collect();
            plan_ranges(
                &by_id,
                &positions.starts,
                &positions.ends,
                p.opts.min_partitions,
            )
            .map_err(PlanError::Option)
        })
    }

    /// Start and end per recording from the options (warnings logged).
    fn resolve(
        &mut self,
        infos: &[RecordingInfo],
        streaming: bool,
    ) -> Result<Positions, PlanError> {
        let mut p = resolve_positions(
            infos,
            &self.opts.starting,
            &self.opts.ending,
            streaming,
            self.opts.fail_on_data_loss,
            &self.opts.archive.describe(),
            &self.opts.selection(),
        )?;
        for w in std::mem::take(&mut p.warnings) {
            self.warn(w);
        }
        Ok(p)
    }

    // -- a streaming read -----------------------------------------------

    /// Where a query with no checkpoint begins (`startingPositions`).
    pub fn initial_offset(&mut self, now: f64) -> Result<SourceOffset, PlanError> {
        self.archive_call("finding the starting positions", |p| {
            p.refresh(true, now)?;
            if let Some(id) = p.missing.first() {
                return Err(PlanError::Option(format!(
                    "option recordingIds: recording {id} is unknown to {} (never recorded there, or purged)",
                    p.opts.archive.describe()
                )));
            }
            let infos: Vec<RecordingInfo> = p.infos.values().cloned().collect();
            let starts = p.resolve(&infos, true)?.starts;
            let (positions, finished) = p.leave_out_finished(&starts, starts.clone(), Finished::default());
            Ok(SourceOffset {
                positions,
                finished,
                ..SourceOffset::default()
            })
        })
    }

    /// The read limit the options set (Spark's `getDefaultReadLimit`).
    pub fn default_read_limit(&self) -> ReadLimit {
        let o = &self.opts;
        if let Some(n) = o.min_messages_per_trigger {
            ReadLimit::MinRows(n)
        } else if let Some(n) = o.max_messages_per_trigger {
            ReadLimit::MaxRows(n)
        } else if let Some(n) = o.max_bytes_per_trigger {
            ReadLimit::MaxBytes(n)
        } else {
            ReadLimit::AllAvailable
        }
    }

    /// `Trigger.AvailableNow`: nothing past what is recorded now.
    pub fn prepare_for_trigger_available_now(&mut self, now: f64) -> Result<(), PlanError> {
        self.archive_call("snapshotting the recorded positions", |p| {
            p.refresh(true, now)?;
            p.target = Some(p.infos.iter().map(|(&id, r)| (id, r.end)).collect());
            Ok(())
        })
    }

    /// What is recorded, as last seen (Spark's `reportLatestOffset`).
    pub fn report_latest_offset(&self) -> Option<SourceOffset> {
        if self.infos.is_empty() {
            return None;
        }
        Some(SourceOffset {
            positions: self
                .infos
                .iter()
                .filter(|(id, r)| r.live || self.read_to.get(id).copied().unwrap_or(-1) != r.end)
                .map(|(&id, r)| (id, r.end))
                .collect(),
            ..SourceOffset::default()
        })
    }

    /// Where the next micro-batch after `start` ends, within `limit`;
    /// None: no batch yet (too few rows for `MinRows`), Spark keeps `start`.
    pub fn latest_offset(
        &mut self,
        start: Option<&SourceOffset>,
        limit: ReadLimit,
        now: f64,
    ) -> Result<Option<SourceOffset>, PlanError> {
        if !self.holding.is_empty() {
            // Renewed while the query waits for data.
            self.keep(self.holding.clone());
        }
        self.archive_call("asking for the recorded positions", |p| {
            p.refresh(false, now)?;
            let empty = SourceOffset::default();
            let start = start.unwrap_or(&empty);
            let mut begin = start.positions.clone();
            let finished = start.finished;
            let moved = begin
                .iter()
                .any(|(id, &at)| p.infos.get(id).is_none_or(|r| r.recorded_end() < at));
            if moved {
                // Gone from the listing, or moved back: ask again before
                // calling it data loss.
                p.refresh(true, now)?;
                begin = p.check_gone_and_truncated(&begin, &start.stopped)?;
            }
            let extended = p.extended(&begin, finished)?;
            begin.extend(extended.iter().map(|(&k, &v)| (k, v)));
            for (&id, r) in &p.infos {
                if !begin.contains_key(&id) && id >= finished.below {
                    begin.insert(id, r.start); // a new recording: from its start
                }
            }
            let mut ends: BTreeMap<i64, i64> = begin
                .iter()
                .map(|(&id, &at)| (id, at.max(p.infos[&id].end)))
                .collect();
            // An extended recording comes back where it was read to; it is
            // read on from the next micro-batch.
            ends.extend(extended);
            if let Some(target) = &p.target {
                for (id, e) in ends.iter_mut() {
                    let b = begin[id];
                    *e = b.max((*e).min(target.get(id).copied().unwrap_or(b)));
                }
            }
            let Some(ends) = p.limit(&begin, ends, limit, now)? else {
                return Ok(None);
            };
            if ends.iter().any(|(id, &e)| e > begin[id]) {
                p.last_batch_at = now;
            }
            let (ends, finished) = p.leave_out_finished(&begin, ends, finished);
            let stopped = p
                .infos
                .iter()
                .filter(|(id, r)| !r.live && ends.get(id).copied().unwrap_or(-1) >= r.end)
                .map(|(&id, r)| (id, r.end))
                .collect();
            Ok(Some(SourceOffset {
                positions: ends,
                stopped,
                pieces: Some(p.opts.min_partitions),
                finished,
            }))
        })
    }

    /// The recordings `start` left out as read to their stop that were
    /// extended since, each with the position to read on from.
    fn extended(
        &mut self,
        begin: &BTreeMap<i64, i64>,
        finished: Finished,
    ) -> Result<BTreeMap<i64, i64>, PlanError> {
        let infos = &self.infos;
        self.read_to.retain(|id, _| infos.contains_key(id)); // purged: it was read whole
        let mut extended = BTreeMap::new();
        let candidates: Vec<RecordingInfo> = self
            .infos
            .iter()
            .filter(|(id, _)| !begin.contains_key(id) && **id < finished.below)
            .map(|(_, r)| r.clone())
            .collect();
        for r in candidates {
            let id = r.recording_id;
            match self.read_to.get(&id).copied() {
                None => {
                    // Left out before this planner ran: the query was
                    // restarted on its checkpoint.
                    if !r.live && 0 <= r.stop_timestamp && r.stop_timestamp <= finished.stopped_by {
                        self.read_to.insert(id, r.end); // as it was: still stopped where read to
                        continue;
                    }
                    let now = if r.live {
                        "recording again".to_string()
                    } else {
                        format!("stopped again at {} ms", r.stop_timestamp)
                    };
                    let text = format!(
                        "recording {id} of {} was read to its stop and left out of this query's offsets (every recording read to its stop by {} ms is), and was extended while the query was not running (it is {now}): the position it was read to is no longer known, so neither is where its unread data begins",
                        self.opts.archive.describe(),
                        finished.stopped_by
                    );
                    if self.opts.fail_on_data_loss {
                        return Err(PlanError::DataLoss(format!(
                            "{text}; failOnDataLoss=true (set it to false to read it on from where it ends now, {}, skipping what the extension recorded before)",
                            r.end
                        )));
                    }
                    self.warn(format!(
                        "{text}; read on from where it ends now, {} (failOnDataLoss=false)",
                        r.end
                    ));
                    extended.insert(id, r.end);
                }
                Some(read_to) => {
                    if r.live || r.end > read_to {
                        extended.insert(id, read_to); // extended where it stopped
                    } else if r.end < read_to {
                        self.read_to.insert(id, r.end); // truncated below: it was read whole
                    }
                }
            }
        }
        Ok(extended)
    }

    /// `ends` without the recordings read to their stop by `begin` (the
    /// micro-batch that ends there reads none of them), but for the
    /// newest, with what the offset then says of them.
    fn leave_out_finished(
        &mut self,
        begin: &BTreeMap<i64, i64>,
        mut ends: BTreeMap<i64, i64>,
        finished: Finished,
    ) -> (BTreeMap<i64, i64>, Finished) {
        let newest = self.infos.keys().next_back().copied().unwrap_or(-1);
        let (mut stopped_by, mut left) = (finished.stopped_by, false);
        let ids: Vec<i64> = ends.keys().copied().collect();
        for id in ids {
            let r = &self.infos[&id];
            if id != newest && !r.live && r.stop_timestamp >= 0 && begin[&id] >= r.end {
                ends.remove(&id);
                self.read_to.insert(id, r.end);
                stopped_by = stopped_by.max(r.stop_timestamp);
                left = true;
            }
        }
        if !left && finished.below == 0 {
            return (ends, finished);
        }
        (
            ends,
            Finished {
                below: finished.below.max(newest + 1),
                stopped_by,
            },
        )
    }

    /// `ends` cut down to what `limit` admits; None for "not enough yet, no
    /// batch" (`MinRows`).
    fn limit(
        &mut self,
        begin: &BTreeMap<i64, i64>,
        mut ends: BTreeMap<i64, i64>,
        limit: ReadLimit,
        now: f64,
    ) -> Result<Option<BTreeMap<i64, i64>>, PlanError> {
        let o = &self.opts;
        // Spark hands one limit; the other option, if set, caps the batch too.
        let (max_bytes, max_rows) = match limit {
            ReadLimit::AllAvailable => return Ok(Some(ends)),
            ReadLimit::MaxBytes(b) => (Some(b), o.max_messages_per_trigger),
            ReadLimit::MaxRows(r) => (o.max_bytes_per_trigger, Some(r)),
            ReadLimit::MinRows(m) => {
                let (max_bytes, max_rows, delay) = (
                    o.max_bytes_per_trigger,
                    o.max_messages_per_trigger,
                    o.max_trigger_delay_s,
                );
                if self.target.is_none()
                    && self.rows(begin, &ends)? < m as f64
                    && now - self.last_batch_at < delay
                {
                    return Ok(None);
                }
                (max_bytes, max_rows)
            }
        };
        if let Some(max_rows) = max_rows {
            // Positions count bytes, not messages: the row budget becomes
            // bytes per recording with its measured message length.
            let mut avail = BTreeMap::new();
            for (&id, &e) in &ends {
                avail.insert(id, (e - begin[&id]) as f64 / self.frame_length(id)?);
            }
            let total: f64 = avail.values().sum();
            if total > max_rows as f64 {
                for (id, e) in ends.iter_mut() {
                    let share = avail[id] * max_rows as f64 / total * self.frame_length(*id)?;
                    *e = cut(begin[id], *e, share);
                }
            }
        }
        if let Some(max_bytes) = max_bytes {
            let total: i64 = ends.iter().map(|(id, &e)| e - begin[id]).sum();
            if total > max_bytes {
                for (id, e) in ends.iter_mut() {
                    let b = begin[id];
                    *e = cut(b, *e, (*e - b) as f64 * max_bytes as f64 / total as f64);
                }
            }
        }
        Ok(Some(ends))
    }

    fn rows(
        &mut self,
        begin: &BTreeMap<i64, i64>,
        ends: &BTreeMap<i64, i64>,
    ) -> Result<f64, PlanError> {
        let mut rows = 0.0;
        for (&id, &e) in ends {
            if e > begin[&id] {
                rows += (e - begin[&id]) as f64 / self.frame_length(id)?;
            }
        }
        Ok(rows)
    }

    /// Bytes per message in the recording, measured once on its first
    /// [`SAMPLE_BYTES`].
    fn frame_length(&mut self, id: i64) -> Result<f64, PlanError> {
        if let Some(&known) = self.frame_len.get(&id) {
            return Ok(known);
        }
        let Some(r) = self.infos.get(&id).cloned() else {
            return Ok(64.0);
        };
        if r.end - r.start < FRAME_ALIGNMENT {
            return Ok(64.0); // nothing to measure yet: a small message
        }
        let end = r.end.min(r.start + SAMPLE_BYTES);
        let (count, last) = self.catalog.sample(&r, end)?;
        let length = if count > 0 {
            (last - r.start) as f64 / count as f64
        } else {
            (end - r.start) as f64
        };
        if r.end - r.start >= SAMPLE_BYTES || !r.live {
            self.frame_len.insert(id, length); // kept once the sample was full size
        }
        Ok(length)
    }

    /// The ranges of the micro-batch `(start, end]`, cut as when it was
    /// planned first (the pieces `end` names).
    pub fn ranges(
        &mut self,
        start: Option<&SourceOffset>,
        end: &SourceOffset,
    ) -> Result<Vec<RecordingRange>, PlanError> {
        self.archive_call("planning a micro-batch", |p| {
            let empty = SourceOffset::default();
            let start = start.unwrap_or(&empty);
            let left_out_below = start.finished.below;
            let mut infos = BTreeMap::new();
            let mut starts = BTreeMap::new();
            for (&id, &e) in &end.positions {
                let s = start.positions.get(&id).copied();
                if s.is_some_and(|s| e <= s) || (s.is_none() && id < left_out_below) {
                    continue; // nothing new; or back from the left-out ones, where read to
                }
                let Some(r) = p.info_now(id)? else {
                    continue;
                };
                let (s, warning) = check_data_loss(
                    id,
                    r.start,
                    s.unwrap_or(r.start),
                    p.opts.fail_on_data_loss,
                    &p.opts.archive.describe(),
                )?;
                if let Some(w) = warning {
                    p.warn(w);
                }
                if e > s {
                    starts.insert(id, s);
                    infos.insert(id, r);
                }
            }
            let pieces = end.pieces.unwrap_or(p.opts.min_partitions);
            if pieces != p.opts.min_partitions {
                p.warn(format!(
                    "sulis source: micro-batch ending at {} is cut into {pieces} partitions, as when it was planned first (minPartitions is {} now; it applies from the next micro-batch)",
                    end.to_json(),
                    p.opts.min_partitions
                ));
            }
            let ends = starts.keys().map(|id| (*id, end.positions[id])).collect();
            let ranges = plan_ranges(&infos, &starts, &ends, pieces).map_err(PlanError::Option)?;
            // Until Spark commits `end`, what the batch reads stays.
            let held = end
                .positions
                .iter()
                .map(|(&id, &e)| {
                    let from = starts.get(&id).or(start.positions.get(&id)).copied();
                    (id, from.unwrap_or(e))
                })
                .collect();
            p.keep(held);
            Ok(ranges)
        })
    }
}

impl<C: RecordingCatalog> StreamPlanner<C> {
    /// Real-time mode: the recordings a batch that begins at `start` reads,
    /// each with the position it is read on from (its start for one new
    /// since), as they are recorded: every recording of `start`, and every
    /// selected one it does not leave out as read to its stop.
    pub fn live_starts(
        &mut self,
        start: Option<&SourceOffset>,
        now: f64,
    ) -> Result<Vec<(RecordingInfo, i64)>, PlanError> {
        self.archive_call("planning a real-time batch", |p| {
            p.refresh(true, now)?;
            let empty = SourceOffset::default();
            let start = start.unwrap_or(&empty);
            let mut out = Vec::new();
            for (&id, r) in &p.infos {
                let from = match start.positions.get(&id) {
                    Some(&at) => at,
                    None if id < start.finished.below => continue, // read to its stop
                    None => r.start,
                };
                let from = from.max(r.start);
                if r.live || from < r.end {
                    out.push((r.clone(), from));
                }
            }
            Ok(out)
        })
    }

    /// Real-time mode: the offset a batch that began at `start` ended at,
    /// each recording at the position its partition read to.
    pub fn merge_offsets(
        &self,
        start: Option<&SourceOffset>,
        read_to: &[(i64, i64)],
    ) -> SourceOffset {
        let mut end = start.cloned().unwrap_or_default();
        for &(id, position) in read_to {
            let at = end.positions.entry(id).or_insert(position);
            *at = (*at).max(position);
        }
        end.pieces = Some(self.opts.min_partitions);
        end
    }
}

/// Where a recording's share of a batch ends: `budget` bytes on from
/// `begin` (frame-aligned, at least one alignment so a batch progresses),
/// never past `end`, and nothing for a recording with nothing new.
fn cut(begin: i64, end: i64, budget: f64) -> i64 {
    if end <= begin {
        return end;
    }
    let aligned = FRAME_ALIGNMENT.max(budget as i64 / FRAME_ALIGNMENT * FRAME_ALIGNMENT);
    end.min(begin + aligned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range_planner::PositionSpec;
    use crate::{ArchiveAddress, OptionMap};

    /// An archive held in a map: recordings by id, all with 100-byte
    /// messages (128 framed).
    #[derive(Default)]
    struct Fake {
        recordings: BTreeMap<i64, RecordingInfo>,
        resets: usize,
        unreachable: bool,
        /// Listings and position requests asked.
        listings: usize,
        positions: usize,
    }

    impl RecordingCatalog for Fake {
        fn list_selected(
            &mut self,
            _missing: Option<&mut Vec<i64>>,
            _require_commit: bool,
        ) -> Result<Vec<RecordingInfo>, PlanError> {
            if self.unreachable {
                return Err(PlanError::Archive("no answer within 10s".into()));
            }
            self.listings += 1;
            Ok(self.recordings.values().cloned().collect())
        }
        fn describe(&mut self, id: i64) -> Result<Option<RecordingInfo>, PlanError> {
            Ok(self.recordings.get(&id).cloned())
        }
        fn position_now(&mut self, r: &RecordingInfo) -> Result<RecordingInfo, PlanError> {
            self.positions += 1;
            Ok(self
                .recordings
                .get(&r.recording_id)
                .cloned()
                .unwrap_or_else(|| r.clone()))
        }
        fn sample(&mut self, r: &RecordingInfo, end: i64) -> Result<(u64, i64), PlanError> {
            let n = ((end - r.start) / 128) as u64;
            Ok((n, r.start + n as i64 * 128))
        }
        fn archive_id(&mut self) -> Result<i64, PlanError> {
            Ok(7)
        }
        fn reset(&mut self) {
            self.resets += 1;
        }
    }

    fn rec(id: i64, end: i64, live: bool, stopped_at: i64) -> RecordingInfo {
        RecordingInfo {
            recording_id: id,
            stream_id: 10,
            session_id: id as i32,
            start: 0,
            end,
            term_length: 65536,
            mtu_length: 1408,
            live,
            segment_length: 1 << 20,
            initial_term_id: 0,
            stop_timestamp: stopped_at,
            recorded: -1,
        }
    }

    fn planner(pairs: &[(&str, &str)], recordings: &[RecordingInfo]) -> StreamPlanner<Fake> {
        let mut all = vec![("channel", "aeron:ipc"), ("streamId", "10")];
        all.extend_from_slice(pairs);
        let opts = ReaderOptions::parse(
            &OptionMap::new(all.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
            true,
        )
        .unwrap();
        let fake = Fake {
            recordings: recordings
                .iter()
                .map(|r| (r.recording_id, r.clone()))
                .collect(),
            ..Fake::default()
        };
        StreamPlanner::new(opts, fake, 0.0)
    }

    fn positions(o: &SourceOffset) -> Vec<(i64, i64)> {
        o.positions.iter().map(|(&k, &v)| (k, v)).collect()
    }

    #[test]
    fn a_stream_begins_at_its_starting_positions_and_new_recordings_join_from_their_start() {
        let mut p = planner(
            &[("startingPositions", "latest")],
            &[rec(1, 1280, true, -1)],
        );
        let first = p.initial_offset(0.0).unwrap();
        assert_eq!(positions(&first), [(1, 1280)]);
        p.catalog().recordings.insert(1, rec(1, 2560, true, -1));
        p.catalog().recordings.insert(2, rec(2, 640, true, -1));
        let next = p
            .latest_offset(Some(&first), ReadLimit::AllAvailable, 1.0)
            .unwrap()
            .unwrap();
        assert_eq!(positions(&next), [(1, 2560), (2, 640)]);
        assert_eq!(next.pieces, Some(1));
        let ranges = p.ranges(Some(&first), &next).unwrap();
        let spans: Vec<_> = ranges
            .iter()
            .map(|r| (r.recording_id, r.start, r.end))
            .collect();
        assert_eq!(spans, [(1, 1280, 2560), (2, 0, 640)]);
    }

    #[test]
    fn a_recording_read_to_its_stop_leaves_the_offsets_and_its_extension_is_read_on() {
        let recs = [rec(1, 1280, false, 500), rec(2, 640, true, -1)];
        let mut p = planner(&[], &recs);
        let first = p.initial_offset(0.0).unwrap();
        assert_eq!(positions(&first), [(1, 0), (2, 0)]);
        let next = p
            .latest_offset(Some(&first), ReadLimit::AllAvailable, 1.0)
            .unwrap()
            .unwrap();
        assert_eq!(positions(&next), [(1, 1280), (2, 640)]);
        assert_eq!(next.stopped.get(&1), Some(&1280));
        // Read to its stop: it leaves, and the offset says so.
        let after = p
            .latest_offset(Some(&next), ReadLimit::AllAvailable, 2.0)
            .unwrap()
            .unwrap();
        assert_eq!(positions(&after), [(2, 640)]);
        assert_eq!(
            after.finished,
            Finished {
                below: 3,
                stopped_by: 500
            }
        );
        // Extended where it stopped: back at that position, read on next time.
        p.catalog().recordings.insert(1, rec(1, 1920, true, -1));
        let back = p
            .latest_offset(Some(&after), ReadLimit::AllAvailable, 3.0)
            .unwrap()
            .unwrap();
        assert_eq!(back.positions.get(&1), Some(&1280));
        let on = p
            .latest_offset(Some(&back), ReadLimit::AllAvailable, 4.0)
            .unwrap()
            .unwrap();
        assert_eq!(on.positions.get(&1), Some(&1920));
    }

    #[test]
    fn an_extension_while_the_query_was_down_is_data_loss_unless_allowed() {
        let after = SourceOffset {
            positions: [(2, 640)].into_iter().collect(),
            finished: Finished {
                below: 3,
                stopped_by: 500,
            },
            ..SourceOffset::default()
        };
        let recs = [rec(1, 1920, true, -1), rec(2, 640, true, -1)];
        let mut p = planner(&[], &recs);
        match p.latest_offset(Some(&after), ReadLimit::AllAvailable, 0.0) {
            Err(PlanError::DataLoss(t)) => assert!(t.contains("recording 1 of the archive at aeron:ipc stream 10 (driver the default driver directory) was read to its stop") && t.contains("(it is recording again)"), "{t}"),
            other => panic!("{other:?}"),
        }
        let mut p = planner(&[("failOnDataLoss", "false")], &recs);
        let next = p
            .latest_offset(Some(&after), ReadLimit::AllAvailable, 0.0)
            .unwrap()
            .unwrap();
        assert_eq!(next.positions.get(&1), Some(&1920));
        assert!(
            matches!(&p.drain_log()[..], [LogLine::Warning(w)] if w.contains("read on from where it ends now, 1920"))
        );
        // Still stopped where it was when left out: nothing lost, nothing read.
        let mut p = planner(&[], &[rec(1, 1280, false, 400), rec(2, 640, true, -1)]);
        let next = p
            .latest_offset(Some(&after), ReadLimit::AllAvailable, 0.0)
            .unwrap()
            .unwrap();
        assert_eq!(positions(&next), [(2, 640)]);
    }

    #[test]
    fn a_purged_or_truncated_recording_is_data_loss_naming_it() {
        let start = SourceOffset {
            positions: [(1, 1280), (2, 640)].into_iter().collect(),
            ..SourceOffset::default()
        };
        let mut p = planner(&[], &[rec(2, 320, false, 9)]);
        match p.latest_offset(Some(&start), ReadLimit::AllAvailable, 0.0) {
            Err(PlanError::DataLoss(t)) => {
                assert!(
                    t.starts_with("recording 1 is no longer in the archive"),
                    "{t}"
                );
                assert!(
                    t.contains("recording 2 was truncated to position 320, below position 640"),
                    "{t}"
                );
            }
            other => panic!("{other:?}"),
        }
        // A recording the offset says was read to its stop just leaves.
        let stopped = SourceOffset {
            stopped: [(1, 1280)].into_iter().collect(),
            ..start.clone()
        };
        let mut p = planner(&[], &[rec(2, 640, true, -1)]);
        let next = p
            .latest_offset(Some(&stopped), ReadLimit::AllAvailable, 0.0)
            .unwrap()
            .unwrap();
        assert_eq!(positions(&next), [(2, 640)]);
    }

    #[test]
    fn row_and_byte_limits_cut_the_batch_and_min_rows_waits_up_to_the_delay() {
        let mut p = planner(&[("maxTriggerDelay", "5s")], &[rec(1, 12800, true, -1)]);
        let first = SourceOffset {
            positions: [(1, 0)].into_iter().collect(),
            ..SourceOffset::default()
        };
        let cut = p
            .latest_offset(Some(&first), ReadLimit::MaxRows(10), 0.0)
            .unwrap()
            .unwrap();
        assert_eq!(positions(&cut), [(1, 1280)]); // 10 messages of 128 bytes
        let cut = p
            .latest_offset(Some(&first), ReadLimit::MaxBytes(1000), 0.0)
            .unwrap()
            .unwrap();
        assert_eq!(positions(&cut), [(1, 992)]); // frame-aligned
        assert_eq!(
            p.latest_offset(Some(&first), ReadLimit::MinRows(1000), 1.0)
                .unwrap(),
            None
        );
        let late = p
            .latest_offset(Some(&first), ReadLimit::MinRows(1000), 6.0)
            .unwrap()
            .unwrap();
        assert_eq!(positions(&late), [(1, 12800)]);
    }

    #[test]
    fn asks_the_archive_a_few_times_a_second_however_often_spark_asks() {
        // Spark calls latestOffset about a hundred times a second when idle.
        let mut p = planner(&[], &[rec(1, 1280, true, -1), rec(2, 640, false, 5)]);
        let start = p.initial_offset(0.0).unwrap();
        let (listed, asked) = (p.catalog().listings, p.catalog().positions);
        for i in 0..100 {
            p.latest_offset(
                Some(&start),
                ReadLimit::AllAvailable,
                0.001 + i as f64 * 0.01,
            )
            .unwrap();
        }
        // Over that second: a listing every 0.5 s, a position request per live recording every 0.1 s.
        let listings = p.catalog().listings - listed;
        assert!((1..=2).contains(&listings), "{listings}");
        assert!(
            p.catalog().positions - asked <= 10,
            "{}",
            p.catalog().positions - asked
        );
        // What is recorded next shows within the interval.
        p.catalog().recordings.insert(1, rec(1, 2560, true, -1));
        let next = p
            .latest_offset(Some(&start), ReadLimit::AllAvailable, 1.2)
            .unwrap()
            .unwrap();
        assert_eq!(next.positions.get(&1), Some(&2560));
    }

    #[test]
    fn a_real_time_batch_follows_every_recording_not_read_to_its_stop_and_merges_where_each_got() {
        let recs = [
            rec(1, 1280, false, 500),
            rec(2, 640, true, -1),
            rec(3, 320, true, -1),
        ];
        let mut p = planner(&[], &recs);
        let start = SourceOffset {
            positions: [(2, 320)].into_iter().collect(),
            finished: Finished {
                below: 2,
                stopped_by: 500,
            },
            ..SourceOffset::default()
        };
        let live: Vec<(i64, i64)> = p
            .live_starts(Some(&start), 0.0)
            .unwrap()
            .iter()
            .map(|(r, from)| (r.recording_id, *from))
            .collect();
        assert_eq!(live, [(2, 320), (3, 0)]);
        let end = p.merge_offsets(Some(&start), &[(2, 640), (3, 96)]);
        assert_eq!(positions(&end), [(2, 640), (3, 96)]);
        assert_eq!(end.finished, start.finished);
    }

    #[test]
    fn a_failure_to_reach_the_archive_names_it_and_what_was_done_and_drops_the_session() {
        let mut p = planner(&[], &[]);
        p.catalog().unreachable = true;
        match p.initial_offset(0.0) {
            Err(PlanError::Archive(t)) => assert_eq!(t, "the archive at aeron:ipc stream 10 (driver the default driver directory): finding the starting positions of channel 'aeron:ipc' streamId 10 failed: no answer within 10s"),
            other => panic!("{other:?}"),
        }
        assert_eq!(p.catalog().resets, 1);
    }

    #[test]
    fn a_batch_read_plans_between_the_starting_and_ending_positions() {
        let mut all = vec![
            ("channel", "aeron:ipc"),
            ("streamId", "10"),
            ("endingPositions", r#"{"1": 640}"#),
            ("minPartitions", "2"),
        ];
        all.push(("startingPositions", "earliest"));
        let opts = ReaderOptions::parse(
            &OptionMap::new(all.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
            false,
        )
        .unwrap();
        assert_eq!(
            opts.ending,
            PositionSpec::ById([(1, 640)].into_iter().collect())
        );
        let fake = Fake {
            recordings: [(1, rec(1, 1280, false, 3))].into_iter().collect(),
            ..Fake::default()
        };
        let mut p = StreamPlanner::new(opts, fake, 0.0);
        let spans: Vec<_> = p
            .batch_ranges()
            .unwrap()
            .iter()
            .map(|r| (r.start, r.end))
            .collect();
        assert_eq!(spans, [(0, 320), (320, 640)]);
        let _ = ArchiveAddress::default();
    }
}
