//! Retention on the conductor's duty cycle: every `retention_check_interval`
//! the policy file is read again if it changed, and each recording a rule
//! matches loses the segment files the rule says go (`crate::retention`):
//! the catalog first (a new start, or the recording DELETED), then the
//! files, renamed at once and deleted off the duty cycle as a purge's are.
//!
//! What is never removed: the segment a recording writes; anything from the
//! segment a replay reads on (replications from this archive are replays);
//! anything from the segment a live hold names (`crate::holds`: a Spark
//! query, a files-mode reader, a cluster's snapshot and log).

use super::*;
use crate::retention::{plan, RecordingSpan, Removal, RetentionPolicy};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// The retention state of an archive.
pub(super) struct RetentionEnforcer {
    path: PathBuf,
    interval_ns: i64,
    next_ns: i64,
    /// The policy file's modification time and length when last read.
    seen: Option<(std::time::SystemTime, u64)>,
    /// The rules in force (`None`: no policy file).
    policy: Option<RetentionPolicy>,
    hold_timeout_ms: i64,
    /// Holds and hold problems already logged (each said once).
    said: BTreeSet<String>,
    /// An object store is set (`tier_store`): rules may say tier-after.
    tiering: bool,
}

fn modified(path: &Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl RetentionEnforcer {
    /// Reads the policy file, if there is one: one that does not parse
    /// stops the archive's start, naming the file and the line.
    pub(super) fn new(ctx: &ArchiveContext) -> Result<(RetentionEnforcer, Vec<String>), String> {
        let mut r = RetentionEnforcer {
            path: ctx.retention_policy_path(),
            interval_ns: ctx.retention_check_interval.as_nanos() as i64,
            next_ns: i64::MIN,
            seen: None,
            policy: None,
            hold_timeout_ms: ctx.retention_hold_timeout.as_millis() as i64,
            said: BTreeSet::new(),
            tiering: ctx.tier_store.is_some(),
        };
        let (notes, error) = r.reload();
        match error {
            Some(e) => Err(e),
            None => Ok((r, notes)),
        }
    }

    /// Reads the policy file again when it changed: what to log, and an
    /// error (the rules in force then stay).
    fn reload(&mut self) -> (Vec<String>, Option<String>) {
        let now = modified(&self.path);
        if now == self.seen {
            return (Vec::new(), None);
        }
        let shown = self.path.display();
        let Some(stamp) = now else {
            self.seen = None;
            return match self.policy.take() {
                Some(_) => (
                    vec![format!(
                        "retention: the policy file {shown} is gone: nothing is removed from now on"
                    )],
                    None,
                ),
                None => (Vec::new(), None),
            };
        };
        let tiering = self.tiering;
        let parsed = std::fs::read_to_string(&self.path)
            .map_err(|e| e.to_string())
            .and_then(|text| RetentionPolicy::parse(&text))
            .and_then(|p| match p.rules.iter().find(|r| r.tier_after.is_some()) {
                Some(r) if !tiering => Err(format!(
                    "line {}: tier-after moves segments to an object store, and no tier_store is set",
                    r.line
                )),
                _ => Ok(p),
            });
        match parsed {
            Ok(policy) => {
                self.seen = Some(stamp);
                let mut notes = vec![format!(
                    "retention: {} rules from {shown}",
                    policy.rules.len()
                )];
                notes.extend(
                    policy
                        .rules
                        .iter()
                        .map(|r| format!("retention: {}", r.describe())),
                );
                self.policy = Some(policy);
                (notes, None)
            }
            Err(e) => {
                // Said once per version of the file.
                self.seen = Some(stamp);
                let kept = if self.policy.is_some() {
                    "the rules read before stay in force"
                } else {
                    "nothing is removed"
                };
                (
                    Vec::new(),
                    Some(format!("retention policy file {shown}: {e} ({kept})")),
                )
            }
        }
    }
}

impl ArchiveConductor {
    pub(super) fn say(&self, line: &str) {
        eprintln!("sulis archive {}: {line}", self.ctx.archive_dir.display());
    }

    /// The lowest position a reader needs, by recording: replays' read
    /// positions and live holds.
    fn retention_floors(&mut self, now_ms: i64) -> BTreeMap<i64, i64> {
        let mut floors: BTreeMap<i64, i64> = BTreeMap::new();
        let mut need = |id: i64, position: i64| {
            let f = floors.entry(id).or_insert(position);
            *f = (*f).min(position);
        };
        for r in self.active_replays.values() {
            need(
                r.recording_id,
                r.read_position.load(std::sync::atomic::Ordering::Acquire),
            );
        }
        let (holds, problems) = crate::holds::read_holds(&self.ctx.archive_dir);
        let timeout = self.retention.hold_timeout_ms;
        let mut lines = Vec::new();
        let mut lapsed = BTreeSet::new();
        for h in holds {
            if h.is_live(now_ms, timeout) {
                need(h.recording_id, h.position);
            } else if lapsed.insert(h.name.clone()) {
                let line = format!(
                    "retention: hold '{}' lapsed (last written {} s ago; it lasts {} s): deleted, it holds nothing",
                    h.name,
                    (now_ms - h.written_ms) / 1000,
                    h.lease_ms.map_or(timeout, |l| l.min(timeout)) / 1000
                );
                lines.push((format!("lapsed {} {}", h.name, h.written_ms), line));
            }
        }
        // A lapsed hold's file goes (a holder that comes back writes it again).
        for name in lapsed {
            let _ = std::fs::remove_file(crate::holds::hold_path(&self.ctx.archive_dir, &name));
        }
        lines.extend(
            problems
                .into_iter()
                .map(|p| (p.clone(), format!("retention: {p}"))),
        );
        for (key, line) in lines {
            if self.retention.said.insert(key) {
                self.say(&line);
            }
        }
        floors
    }

    /// Every `retention_check_interval`: the policy file read again if it
    /// changed, then what each rule says goes removed. Returns the work done.
    pub(super) fn run_retention(&mut self, now_ns: i64) -> usize {
        if now_ns < self.retention.next_ns {
            return 0;
        }
        self.retention.next_ns = now_ns.saturating_add(self.retention.interval_ns);
        let (notes, error) = self.retention.reload();
        for n in &notes {
            self.say(n);
        }
        if let Some(e) = error {
            self.say(&e);
            self.record_error(e);
        }
        // The store's copies no recording needs any more go, whatever removed them from the catalog.
        let mut work = self.sweep_store();
        let Some(policy) = self.retention.policy.clone() else {
            return work;
        };
        if policy.rules.is_empty() {
            return work;
        }
        let now_ms = self.clock.epoch_ms();
        let floors = self.retention_floors(now_ms);
        for id in self.catalog.valid_ids_from(0) {
            let Some(d) = self.catalog.recording(id) else {
                continue;
            };
            let channels = [d.original_channel.as_str(), d.stripped_channel.as_str()];
            let Some(rule) = policy.rule_for(d.stream_id, &channels) else {
                continue;
            };
            let g = Self::geometry_of(id, &d);
            let live = self.live_position(id);
            let (end, stopped) = match (live, d.stop_position) {
                (Some(p), _) => (p, false),
                (None, stop) if stop != NULL_VALUE => (stop, true),
                _ => continue,
            };
            if !g.is_valid() {
                continue;
            }
            let span = RecordingSpan {
                start: d.start_position,
                end,
                first_base: g.base_of(d.start_position),
                segment_length: g.segment_length,
                stopped,
                floor: floors.get(&id).copied(),
            };
            match plan(rule, span, now_ms, |base| self.segment_written_ms(&g, base)) {
                Removal::Keep => work += self.tier_recording(rule, g, span, now_ms),
                Removal::Detach { new_start, why } => {
                    work += self.retention_detach(&d, g, span.first_base, new_start, &why)
                }
                Removal::Purge { why } => work += self.retention_purge(&d, g, span, &why),
            }
        }
        work
    }

    fn retention_detach(
        &mut self,
        d: &RecordingDescriptor,
        g: Geometry,
        first_base: i64,
        new_start: i64,
        why: &str,
    ) -> usize {
        let id = d.recording_id;
        if let Err(e) = self.catalog.set_start_position(id, new_start) {
            let message =
                format!("retention: cannot move the start of recording {id} to {new_start}: {e}");
            self.say(&message);
            self.record_error(message);
            return 1;
        }
        let dir = self.ctx.archive_dir.clone();
        let files: Vec<PathBuf> = (first_base..new_start)
            .step_by(g.segment_length as usize)
            .map(|base| g.path(&dir, base))
            .collect();
        let n = self.queue_deletion(NULL_VALUE, NULL_VALUE, id, files);
        let bytes = new_start - d.start_position;
        ArchiveCounters::add(&self.counters.retention_segments, n as i64);
        ArchiveCounters::add(&self.counters.retention_bytes, bytes);
        self.say(&format!(
            "retention: recording {id} (stream {}, {}) now starts at {new_start}: {n} segment files below it removed, \
             {bytes} bytes: {why}",
            d.stream_id, d.original_channel
        ));
        1
    }

    fn retention_purge(
        &mut self,
        d: &RecordingDescriptor,
        g: Geometry,
        span: RecordingSpan,
        why: &str,
    ) -> usize {
        let id = d.recording_id;
        if let Err(e) = self.catalog.set_state(id, recording_state::DELETED) {
            let message = format!("retention: cannot delete recording {id}: {e}");
            self.say(&message);
            self.record_error(message);
            return 1;
        }
        let dir = self.ctx.archive_dir.clone();
        let files: Vec<PathBuf> = (span.first_base..=g.base_of(span.end))
            .step_by(g.segment_length as usize)
            .map(|base| g.path(&dir, base))
            .collect();
        let n = self.queue_deletion(NULL_VALUE, NULL_VALUE, id, files);
        let bytes = span.end - span.start;
        ArchiveCounters::add(&self.counters.retention_segments, n as i64);
        ArchiveCounters::add(&self.counters.retention_bytes, bytes);
        self.say(&format!(
            "retention: recording {id} (stream {}, {}) deleted whole, {n} segment files, {bytes} bytes: {why}",
            d.stream_id, d.original_channel
        ));
        1
    }
}
