//! One target (stream) of one exactly-once sink task: its claim, what
//! earlier attempts published (and so what it skips, checked), what it
//! publishes, and its journal entries (`sink_journal` says how they make
//! a re-run publish each row once).
//!
//! Each task publishes through an `ExclusivePublication` of its own for
//! the task's life (kept by the process and handed to its next task), so
//! what one attempt writes lands in order and uninterrupted in its
//! session's recording, one task at a time.

use crate::journal_entry::{attempts, later_claim, Attempt, EntryKind, JournalEntry, TaskKey};
use crate::sink_archive::{stream_key, SinkArchive};
use crate::sink_checksum::Checksum;
use crate::sink_journal::{attempt_name, random_u64, SinkJournal};
use crate::sink_publications::{
    give_back_exclusive, shared_publication, take_exclusive, wait_refused, SinkFailure,
};
use crate::writer_options::WriterOptions;
use crate::RecordingInfo;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use sulis_client::{ExclusivePublication, Publication};

/// The rows one earlier attempt published: rows `from..to` of the
/// partition, their checksum, the attempt.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Run {
    from: i64,
    to: i64,
    crc: String,
    attempt: String,
}

/// Which task this is: Spark's query id, micro-batch, partition and task
/// attempt id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskIdentity {
    pub query: String,
    pub batch: i64,
    pub partition: i64,
    pub task_attempt_id: i64,
}

/// See the module doc.
pub struct ExactlyOnceTarget {
    opts: WriterOptions,
    pub channel: String,
    pub stream_id: i32,
    key: TaskKey,
    journal: Arc<SinkJournal>,
    archive: SinkArchive,
    publication: Option<ExclusivePublication>,
    journal_publication: Arc<Publication>,
    claim: JournalEntry,
    skip: i64,
    expected: VecDeque<Run>,
    /// Leading rows taken (skipped and checked).
    seen: i64,
    check: Checksum,
    published: Checksum,
    run_written: bool,
    done: bool,
    timeout: Duration,
    place: String,
    /// What to log.
    pub notes: Vec<String>,
}

/// `(recording, lo, hi)` pieces holding positions `start` to `end` (None:
/// to what is recorded) of a session; fails naming the positions a gap
/// between its recordings left unrecorded.
fn covered(
    recordings: &[RecordingInfo],
    session_id: i32,
    start: i64,
    end: Option<i64>,
    what: &str,
) -> Result<Vec<(RecordingInfo, i64, i64)>, SinkFailure> {
    let mut pieces = Vec::new();
    let mut pos = start;
    for r in recordings {
        if r.end <= pos {
            continue;
        }
        if end.is_some_and(|e| pos >= e) {
            break;
        }
        if r.start > pos {
            return Err(SinkFailure::Sink(format!("sulis sink: {what}: positions {pos} to {} of session {session_id} were published but not recorded (the session's recording stopped and recording {} starts at {}): those rows are not in the recorded stream, and which rows they were cannot be told", r.start, r.recording_id, r.start)));
        }
        let hi = end.map_or(r.end, |e| r.end.min(e));
        pieces.push((r.clone(), pos, hi));
        pos = hi;
    }
    if let Some(end) = end.filter(|&e| pos < e) {
        return Err(SinkFailure::Sink(format!(
            "sulis sink: {what}: positions {pos} to {end} of session {session_id} are not recorded"
        )));
    }
    Ok(pieces)
}

impl ExactlyOnceTarget {
    /// Claims (batch, partition, target), standing back while another
    /// attempt is at it, and learns what earlier attempts published. What
    /// to log goes to `notes` where it fails.
    pub fn open(
        opts: &WriterOptions,
        channel: &str,
        stream_id: i32,
        task: &TaskIdentity,
        notes: &mut Vec<String>,
    ) -> Result<ExactlyOnceTarget, SinkFailure> {
        let journal = SinkJournal::of(opts)?;
        let archive = journal.archive.clone();
        let timeout = Duration::from_secs_f64(30f64.max(3.0 * opts.archive.message_timeout_s));
        let deadline = Instant::now() + timeout;
        let publication = take_exclusive(&opts.archive, channel, stream_id)?;
        let journal_publication =
            shared_publication(&opts.archive, &journal.channel, journal.stream_id)?;
        let key = TaskKey {
            query: task.query.clone(),
            batch: task.batch,
            partition: task.partition,
            target: stream_key(channel, stream_id)
                .unwrap_or_else(|| format!("{channel}#{stream_id}")),
        };
        let place = format!(
            "batch {} partition {} to {channel} stream {stream_id}",
            task.batch, task.partition
        );
        let claim = JournalEntry::new(EntryKind::Claim, &key, "");
        let mut t = ExactlyOnceTarget {
            opts: opts.clone(),
            channel: channel.to_string(),
            stream_id,
            key,
            journal,
            archive,
            publication: Some(publication),
            journal_publication,
            claim,
            skip: 0,
            expected: VecDeque::new(),
            seen: 0,
            check: Checksum::new(),
            published: Checksum::new(),
            run_written: false,
            done: false,
            timeout,
            place,
            notes: Vec::new(),
        };
        if let Err(e) = t.claim(task.task_attempt_id, deadline) {
            // A claim made and then given up (the journal unreadable, an earlier
            // attempt's rows in doubt) says so: a re-run need not wait for this
            // session to end before it fails the same way.
            t.fail(&e.clone().named().1);
            notes.append(&mut t.notes);
            return Err(e);
        }
        Ok(t)
    }

    fn publication(&mut self) -> &mut ExclusivePublication {
        self.publication.as_mut().expect("held until dropped")
    }

    fn left(deadline: Instant) -> Duration {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1))
    }

    fn entry(&self, kind: EntryKind) -> JournalEntry {
        JournalEntry::new(kind, &self.key, &self.claim.attempt)
    }

    fn append(&self, e: &JournalEntry, timeout: Duration) -> Result<i64, SinkFailure> {
        self.journal.append(&self.journal_publication, e, timeout)
    }

    /// Whether attempt `a` can publish no more: it said it was done, its
    /// process went on to another claim, or its session is no longer
    /// recorded (its process died).
    fn finished(&self, a: &Attempt, entries: &[JournalEntry]) -> Result<bool, SinkFailure> {
        if a.done.is_some() || later_claim(entries, a).is_some() {
            return Ok(true);
        }
        let recordings =
            self.archive
                .session_recordings(&self.channel, self.stream_id, a.claim.session)?;
        Ok(!recordings.iter().any(|r| r.live))
    }

    /// What attempt `a` (finished) published; read back from its session's
    /// recordings when it died before saying.
    fn published_by(
        &self,
        a: &Attempt,
        entries: &[JournalEntry],
    ) -> Result<Option<Run>, SinkFailure> {
        let Some(run) = &a.run else {
            // A run entry is recorded before any row.
            return Ok(None);
        };
        if let Some(done) = &a.done {
            return Ok(Some(Run {
                from: done.skip,
                to: done.skip + done.count,
                crc: done.crc.clone(),
                attempt: a.name.clone(),
            }));
        }
        let next = later_claim(entries, a).map(|e| e.start);
        let mut check = Checksum::new();
        let recordings =
            self.archive
                .session_recordings(&self.channel, self.stream_id, a.claim.session)?;
        let what = format!(
            "attempt {} of batch {} partition {} (died publishing)",
            a.name, a.claim.batch, a.claim.partition
        );
        let replay = (self.opts.replay_channel.clone(), self.opts.replay_stream_id);
        for (r, lo, hi) in covered(&recordings, a.claim.session, a.claim.start, next, &what)? {
            self.archive.read(&replay, &r, lo, hi, |value, _| {
                check.update(value);
                Ok(())
            })?;
        }
        Ok(Some(Run {
            from: run.skip,
            to: run.skip + check.count(),
            crc: check.value(),
            attempt: a.name.clone(),
        }))
    }

    fn claim(&mut self, task_attempt_id: i64, deadline: Instant) -> Result<(), SinkFailure> {
        // Claimed only once the session is recorded: a session with no live
        // recording is taken as ended.
        let (session, start) = {
            let p = self.publication();
            (p.session_id(), p.position())
        };
        self.archive.await_recorded(
            &self.channel,
            self.stream_id,
            session,
            start,
            deadline,
            "the sink's publication",
        )?;
        let mut seq = 0;
        let (others, entries) = loop {
            self.claim = JournalEntry {
                session,
                start: self.publication().position(),
                ..JournalEntry::new(
                    EntryKind::Claim,
                    &self.key,
                    &attempt_name(task_attempt_id, seq),
                )
            };
            self.append(&self.claim, Self::left(deadline))?;
            let mut entries = self.journal.entries(&self.key.query, self.key.batch)?;
            let others: Vec<Attempt> = attempts(&entries, &self.key)
                .into_iter()
                .filter(|a| a.name != self.claim.attempt)
                .collect();
            let mut waiting = Vec::new();
            for a in &others {
                if !self.finished(a, &entries)? {
                    waiting.push(a.name.clone());
                }
            }
            if waiting.is_empty() {
                break (others, entries);
            }
            let withdrawn = JournalEntry {
                why: "withdrawn".into(),
                ..self.entry(EntryKind::Done)
            };
            self.append(&withdrawn, Self::left(deadline))?;
            waiting.sort();
            self.notes.push(format!(
                "sulis sink: {}: attempt {} waits for {waiting:?}",
                self.place, self.claim.attempt
            ));
            while !waiting.is_empty() {
                if Instant::now() > deadline {
                    self.done = true;
                    return Err(SinkFailure::Timeout(format!("sulis sink: {}: another attempt of it ({}) is still publishing after {:.0}s; this one does not publish beside it (a task of an earlier stage attempt still running, or speculative execution: turn it off)", self.place, waiting.join(", "), self.timeout.as_secs_f64())));
                }
                if crate::interrupt::interrupted() {
                    self.done = true;
                    return Err(SinkFailure::Sink(crate::interrupt::text(&format!(
                        "{waiting:?} (another attempt of {})",
                        self.place
                    ))));
                }
                std::thread::sleep(Duration::from_millis(100));
                entries = self.journal.entries(&self.key.query, self.key.batch)?;
                let now = attempts(&entries, &self.key);
                let mut still = Vec::new();
                for name in waiting {
                    match now.iter().find(|a| a.name == name) {
                        Some(a) if !self.finished(a, &entries)? => still.push(name),
                        _ => {}
                    }
                }
                waiting = still;
            }
            // Two attempts that stood back for each other: not in step.
            std::thread::sleep(Duration::from_millis(random_u64() % 200));
            seq += 1;
        };
        let mut runs = Vec::new();
        for a in &others {
            if let Some(run) = self.published_by(a, &entries)? {
                if run.to > run.from {
                    runs.push(run);
                }
            }
        }
        runs.sort();
        let mut pos = 0;
        for run in &runs {
            if run.from != pos {
                let how = if run.from < pos {
                    "published twice"
                } else {
                    "never published"
                };
                return Err(SinkFailure::Sink(format!("sulis sink: {}: the journal says attempt {} published rows {} to {}, but earlier attempts end at row {pos}: rows were {how} (journal {} stream {})", self.place, run.attempt, run.from, run.to, self.journal.channel, self.journal.stream_id)));
            }
            pos = run.to;
        }
        self.skip = pos;
        self.expected = runs.into();
        if self.skip > 0 {
            self.notes.push(format!(
                "sulis sink: {}: earlier attempts published {} rows; this attempt checks and skips them",
                self.place, self.skip
            ));
        }
        Ok(())
    }

    /// Rows earlier attempts published, not yet taken: the next values
    /// given are checked and skipped, not published.
    pub fn to_skip(&self) -> i64 {
        self.skip - self.seen
    }

    /// Takes a leading value earlier attempts published (`to_skip() > 0`):
    /// checked against what they published, not published again.
    pub fn take_skipped(&mut self, value: &[u8]) -> Result<(), SinkFailure> {
        self.check.update(value);
        self.seen += 1;
        let run = self
            .expected
            .front()
            .expect("a run holds every skipped row");
        if self.seen == run.to {
            let value = self.check.value();
            if value != run.crc {
                return Err(SinkFailure::Sink(format!("sulis sink: {}: rows {} to {} of this re-run differ from the rows attempt {} published (checksum {value}, published {}): the re-run gives other rows or another order (a shuffle without a sort, minPartitions or the plan changed across a restart); nothing of it was published again. Make the rows per partition deterministic (sortWithinPartitions) or write to a new stream", self.place, run.from, run.to, run.attempt, run.crc)));
            }
            self.expected.pop_front();
            self.check = Checksum::new();
        }
        Ok(())
    }

    fn before_publishing(&mut self) -> Result<(), SinkFailure> {
        if !self.run_written {
            let run = JournalEntry {
                skip: self.skip,
                ..self.entry(EntryKind::Run)
            };
            self.append(&run, self.timeout)?;
            self.run_written = true;
        }
        Ok(())
    }

    /// Publishes `values` (after the skipped ones), message `i` stamped
    /// with `reserved(i)`, waiting out back pressure up to the message
    /// timeout.
    pub fn publish(
        &mut self,
        values: &[&[u8]],
        reserved: impl Fn(usize) -> Option<i64>,
    ) -> Result<(), SinkFailure> {
        if values.is_empty() {
            return Ok(());
        }
        self.before_publishing()?;
        let timeout_s = self.opts.archive.message_timeout_s;
        let (channel, stream_id) = (self.channel.clone(), self.stream_id);
        let mut i = 0;
        let mut since = Instant::now();
        while i < values.len() {
            let p = self.publication();
            let (n, r) = p.offer_batch_with(values[i..].iter().copied(), |k| reserved(i + k));
            for v in &values[i..i + n] {
                self.published.update(v);
            }
            i += n;
            match r {
                Ok(_) if n > 0 => since = Instant::now(),
                Ok(_) => {}
                Err(e) => {
                    if n > 0 {
                        since = Instant::now();
                    }
                    wait_refused(&e, &channel, stream_id, since, timeout_s)?;
                }
            }
        }
        Ok(())
    }

    /// After the last row: its rows recorded, whole, and the journal told;
    /// `(published, skipped)`.
    pub fn close(&mut self) -> Result<(i64, i64), SinkFailure> {
        if self.seen < self.skip {
            return Err(SinkFailure::Sink(format!("sulis sink: {}: earlier attempts published {} rows, but this re-run has only {}: its rows differ (the plan or the input changed across a restart); nothing of it was published again", self.place, self.skip, self.seen)));
        }
        let end = self.publication().position();
        if self.run_written {
            self.await_whole(end, Instant::now() + self.timeout)?;
        }
        self.say_done(end, String::new())?;
        Ok((self.published.count(), self.skip))
    }

    fn await_whole(&mut self, end: i64, deadline: Instant) -> Result<(), SinkFailure> {
        let session = self.claim.session;
        let what = format!("the sink's rows of {}", self.place);
        self.archive.await_recorded(
            &self.channel,
            self.stream_id,
            session,
            end,
            deadline,
            &what,
        )?;
        let recordings = self
            .archive
            .session_recordings(&self.channel, self.stream_id, session)?;
        let what = format!("{} (attempt {})", self.place, self.claim.attempt);
        covered(&recordings, session, self.claim.start, Some(end), &what)?;
        Ok(())
    }

    fn say_done(&mut self, end: i64, why: String) -> Result<(), SinkFailure> {
        let done = JournalEntry {
            skip: self.skip,
            count: self.published.count(),
            crc: self.published.value(),
            end,
            why,
            ..self.entry(EntryKind::Done)
        };
        self.append(&done, self.timeout)?;
        self.done = true;
        Ok(())
    }

    /// After an error: says so in the journal where it can tell what was
    /// recorded, so a re-run need not wait for this process to end; else
    /// the re-run reads back what was recorded.
    pub fn fail(&mut self, error: &str) {
        if self.done || self.claim.attempt.is_empty() {
            return;
        }
        let end = self.publication().position();
        let said = (|| {
            if self.run_written {
                self.await_whole(end, Instant::now() + Duration::from_secs(2))?;
            }
            let why: String = error.chars().take(200).collect();
            self.say_done(end, format!("failed: {why}"))
        })();
        if let Err(e) = said {
            self.notes.push(format!("sulis sink: {}: could not tell the journal how the attempt ended ({}); a re-run reads back what was recorded", self.place, e.named().1));
        }
    }
}

impl Drop for ExactlyOnceTarget {
    fn drop(&mut self) {
        if let Some(p) = self.publication.take() {
            give_back_exclusive(&self.opts.archive, &self.channel, self.stream_id, p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(id: i64, start: i64, end: i64) -> RecordingInfo {
        RecordingInfo {
            recording_id: id,
            stream_id: 7,
            session_id: 3,
            start,
            end,
            term_length: 65536,
            mtu_length: 1408,
            live: false,
            segment_length: 1 << 20,
            initial_term_id: 0,
            stop_timestamp: -1,
            recorded: -1,
        }
    }

    #[test]
    fn a_session_is_covered_across_its_recordings_and_a_gap_is_named() {
        let rs = [recording(1, 0, 640), recording(2, 640, 2048)];
        let pieces = covered(&rs, 3, 320, Some(1024), "w").unwrap();
        let spans: Vec<_> = pieces
            .iter()
            .map(|(r, lo, hi)| (r.recording_id, *lo, *hi))
            .collect();
        assert_eq!(spans, [(1, 320, 640), (2, 640, 1024)]);
        let open: Vec<_> = covered(&rs, 3, 0, None, "w")
            .unwrap()
            .iter()
            .map(|(_, lo, hi)| (*lo, *hi))
            .collect();
        assert_eq!(open, [(0, 640), (640, 2048)]);
        let gap = [recording(1, 0, 640), recording(2, 960, 2048)];
        let Err(SinkFailure::Sink(t)) = covered(&gap, 3, 0, Some(1024), "w") else {
            panic!()
        };
        assert!(
            t.contains("positions 640 to 960 of session 3 were published but not recorded"),
            "{t}"
        );
        let Err(SinkFailure::Sink(t)) = covered(&rs, 3, 0, Some(4096), "w") else {
            panic!()
        };
        assert!(
            t.ends_with("positions 2048 to 4096 of session 3 are not recorded"),
            "{t}"
        );
    }
}
