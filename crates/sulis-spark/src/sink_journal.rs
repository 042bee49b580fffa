//! The exactly-once sink's journal: a small recorded stream saying which
//! task attempt published which rows (its entries: `journal_entry`).
//!
//! Every attempt of a sink task writes, for each stream it publishes to (a
//! *target*), entries into the journal and waits for each to be recorded
//! before it goes on:
//!
//! - `claim` before anything else: the attempt (process, Spark's task
//!   attempt id), its query, micro-batch, partition and target, the
//!   session of its publication on the target and the position its rows
//!   will start at. The attempt then reads the journal.
//! - `run` once no other attempt of the same (query, batch, partition,
//!   target) is unfinished: `skip`, the rows earlier attempts published (it
//!   publishes the partition's rows from there). Recorded before the first
//!   row is offered, so rows after a claim's position in its session
//!   always have their `skip` in the journal.
//! - `done` after its rows are recorded on the target: how many it
//!   published, their checksum (`sink_checksum`) and its end position;
//!   `why` is `withdrawn` when it stood back for another attempt, the
//!   error when it failed.
//!
//! An attempt is *finished* when it has a `done`, when its session is no
//! longer recorded (its process died: the media driver closed its
//! publication and the recording stopped), or when its session made a
//! later claim (its process went on to another task: a session serves one
//! task at a time). An attempt that sees another of its (batch, partition,
//! target) unfinished after its own claim was recorded withdraws and waits
//! for it: of two attempts racing, at least one reads the journal after
//! the other's claim was recorded, so they never both publish (a zombie
//! task of an earlier stage attempt, a stage re-attempt whose task attempt
//! numbers start at 0 again, or a speculative copy). A finished attempt's
//! rows are known from its `done`, or, for one that died, by reading its
//! session's recording from its claim's position to its session's next
//! claim or recorded end (`exactly_once_target`).
//!
//! Reading is per process and incremental: each journal recording is read
//! back from its end a term at a time until it shows an earlier
//! micro-batch of the query, then only what is new.

use crate::journal_entry::{EntryKind, JournalEntry};
use crate::range_planner::replay_from;
use crate::sink_archive::SinkArchive;
use crate::sink_publications::{offer_result_name, SinkFailure};
use crate::writer_options::WriterOptions;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use sulis_client::Publication;
use sulis_protocol::uri::ChannelUri;

/// The journal publication's term length: readers walk back a term at a
/// time.
pub const JOURNAL_TERM_LENGTH: i32 = 64 * 1024;

/// Entries kept per journal recording before the older half is dropped.
const KEPT: usize = 20_000;

/// A random number (the process' hasher seed is random).
pub fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// This process: its host, pid and a random part (another process may have
/// the same pid later, or on another host).
pub fn process_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        format!(
            "{}:{}:{:08x}",
            crate::archive_session::hostname(),
            std::process::id(),
            random_u64() as u32
        )
    })
}

/// An attempt's name: this process and Spark's task attempt id (unique
/// within a Spark application), and the claim's sequence number within
/// the task (a withdrawn claim is followed by another).
pub fn attempt_name(task_attempt_id: i64, seq: u32) -> String {
    format!("{}/{task_attempt_id}/{seq}", process_name())
}

/// The journal channel with a 64 KiB term unless it names one.
pub fn with_term_length(channel: &str) -> String {
    ChannelUri::parse(channel)
        .and_then(|u| u.with_default("term-length", &JOURNAL_TERM_LENGTH.to_string()))
        .map(|u| u.to_string())
        .unwrap_or_else(|_| channel.to_string())
}

/// Entries of one journal recording in `(lo, hi]`.
struct Tail {
    lo: i64,
    hi: i64,
    entries: Vec<JournalEntry>,
}

/// The journal stream, as this process sees it.
pub struct SinkJournal {
    pub archive: SinkArchive,
    pub channel: String,
    pub stream_id: i32,
    replay: (String, i32),
    tails: Mutex<HashMap<i64, Tail>>,
    /// Whether this process saw the journal recorded.
    recorded: std::sync::atomic::AtomicBool,
}

static JOURNALS: Mutex<Option<HashMap<String, Arc<SinkJournal>>>> = Mutex::new(None);

impl SinkJournal {
    /// This process' view of the journal `opts` name (kept for the
    /// process' life: what it read is not read again).
    pub fn of(opts: &WriterOptions) -> Result<Arc<SinkJournal>, SinkFailure> {
        let Some(channel) = &opts.journal_channel else {
            return Err(SinkFailure::Option(
                "option journalChannel: exactly once needs a journal".into(),
            ));
        };
        let channel = with_term_length(channel);
        let replay = (opts.replay_channel.clone(), opts.replay_stream_id);
        let key = format!(
            "{:?}|{channel}|{}|{replay:?}",
            opts.archive, opts.journal_stream_id
        );
        let mut all = JOURNALS.lock().unwrap_or_else(|e| e.into_inner());
        let j = all
            .get_or_insert_with(HashMap::new)
            .entry(key)
            .or_insert_with(|| {
                Arc::new(SinkJournal {
                    archive: SinkArchive::of(&opts.archive),
                    channel,
                    stream_id: opts.journal_stream_id,
                    replay,
                    tails: Mutex::new(HashMap::new()),
                    recorded: std::sync::atomic::AtomicBool::new(false),
                })
            });
        Ok(j.clone())
    }

    /// The archive records the journal (on the Spark driver, when a query
    /// starts): started unless something records it already. Asked once
    /// per process.
    pub fn ensure_recorded(&self) -> Result<(), SinkFailure> {
        use std::sync::atomic::Ordering;
        if !self.recorded.load(Ordering::Acquire) {
            self.archive
                .ensure_recorded(&self.channel, self.stream_id)?;
            self.recorded.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Offers `entry` on this process' journal publication `publication`
    /// and waits until it is recorded; its position.
    pub fn append(
        &self,
        publication: &Publication,
        entry: &JournalEntry,
        timeout: Duration,
    ) -> Result<i64, SinkFailure> {
        let raw = entry.encode();
        let deadline = Instant::now() + timeout;
        let position = loop {
            match publication.offer(&raw) {
                Ok(p) => break p,
                Err(e) if Instant::now() > deadline => {
                    return Err(SinkFailure::Timeout(format!(
                        "sulis sink: the journal {} stream {} refused an entry for {:.0}s: {} (is it recorded?)",
                        self.channel,
                        self.stream_id,
                        timeout.as_secs_f64(),
                        offer_result_name(&e)
                    )))
                }
                Err(_) if crate::interrupt::interrupted() => {
                    return Err(SinkFailure::Sink(crate::interrupt::text(&format!(
                        "the journal {} stream {} to take an entry",
                        self.channel, self.stream_id
                    ))))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        self.archive.await_recorded(
            &self.channel,
            self.stream_id,
            publication.session_id(),
            position,
            deadline,
            "the journal entry",
        )?;
        Ok(position)
    }

    /// Every entry recorded now that may matter to micro-batch `batch` of
    /// `query` (the query's, and every claim): each journal recording read
    /// back at least to an entry of an earlier batch of the query (or its
    /// start).
    pub fn entries(&self, query: &str, batch: i64) -> Result<Vec<JournalEntry>, SinkFailure> {
        let mut out = Vec::new();
        for r in self
            .archive
            .recordings_of_stream(&self.channel, self.stream_id)?
        {
            out.extend(self.entries_of(&r, query, batch)?);
        }
        Ok(out)
    }

    fn entries_of(
        &self,
        r: &crate::RecordingInfo,
        query: &str,
        batch: i64,
    ) -> Result<Vec<JournalEntry>, SinkFailure> {
        // The archive is read with the lock released (tasks of one executor
        // read the journal at once); a read another thread overtook is
        // dropped and the state looked at again.
        let tail = |tails: &mut HashMap<i64, Tail>| -> (i64, i64) {
            let t = tails.entry(r.recording_id).or_insert_with(|| Tail {
                lo: r.end,
                hi: r.end,
                entries: Vec::new(),
            });
            (t.lo, t.hi)
        };
        loop {
            // What is new, to what was recorded when the caller listed it.
            let (_, hi) = tail(&mut self.lock());
            if hi >= r.end {
                break;
            }
            let new = self.read(r, hi, r.end)?;
            let mut tails = self.lock();
            let t = tails.get_mut(&r.recording_id).expect("made above");
            if t.hi == hi {
                t.entries.extend(new);
                t.hi = r.end;
            }
        }
        loop {
            // Back a term at a time to an earlier batch of the query.
            let lo = {
                let tails = self.lock();
                let t = &tails[&r.recording_id];
                let found = t
                    .entries
                    .iter()
                    .any(|e| e.query == query && e.batch < batch);
                if t.lo <= r.start || found {
                    break;
                }
                t.lo
            };
            let from = replay_from(lo - 1, r.start, r.term_length);
            let mut older = self.read(r, from, lo)?;
            let mut tails = self.lock();
            let t = tails.get_mut(&r.recording_id).expect("made above");
            if t.lo == lo {
                older.append(&mut t.entries);
                t.entries = older;
                t.lo = from;
            }
        }
        let mut tails = self.lock();
        let t = tails.get_mut(&r.recording_id).expect("made above");
        if t.entries.len() > KEPT {
            // Keep the newest half.
            let cut = t.entries.len() / 2;
            t.lo = t.entries[cut - 1].position;
            t.entries.drain(..cut);
        }
        // What a claim looks at: this query's entries, and every claim (a
        // later claim in a session ends an attempt of any query).
        Ok(t.entries
            .iter()
            .filter(|e| e.query == query || e.kind == EntryKind::Claim)
            .cloned()
            .collect())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Tail>> {
        self.tails.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read(
        &self,
        r: &crate::RecordingInfo,
        start: i64,
        end: i64,
    ) -> Result<Vec<JournalEntry>, SinkFailure> {
        let mut out = Vec::new();
        self.archive
            .read(&self.replay, r, start, end, |raw, position| {
                if let Some(e) = JournalEntry::decode(raw, position).map_err(SinkFailure::Sink)? {
                    out.push(e);
                }
                Ok(())
            })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_names_carry_the_process_and_the_term_length_is_defaulted() {
        let name = attempt_name(42, 1);
        assert_eq!(crate::journal_entry::process_of(&name), process_name());
        assert!(name.ends_with("/42/1"), "{name}");
        assert_eq!(with_term_length("aeron:ipc"), "aeron:ipc?term-length=65536");
        assert_eq!(
            with_term_length("aeron:ipc?term-length=128k"),
            "aeron:ipc?term-length=128k"
        );
    }
}
