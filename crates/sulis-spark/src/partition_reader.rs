//! The executor side of `format("sulis")`: one planned range read as whole
//! messages, from the segment files where they are readable on this host
//! (`readMode`), else by a replay from the archive.
//!
//! Replays go through control sessions kept per process and archive (a
//! task reuses the session an earlier one opened: a connect is a few ms),
//! each used by one reader at a time. A session kept from an earlier task
//! may belong to an archive that has since been restarted or is gone: a
//! replay refused for a lost session is asked once more on a new one.

use crate::archive_files::files_dir_for;
use crate::commit_limit::CommitLimit;
use crate::message_assembler::MessageAssembler;
use crate::range_planner::RecordingRange;
use crate::range_replay::{Polled, RangeReplay, ReadFailure};
use crate::{ArchiveSession, PlanError, ReaderOptions};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use sulis_archive::client::ArchiveError;
use sulis_archive::segment::{FragmentReader, Geometry};
use sulis_client::Batch;

/// Response streams of the readers' control sessions: this base plus the
/// process id modulo 2^20 (see `archive_session`; the Python sink's
/// sessions use `0x5A100000` on, the planner's `0x5A200000` on).
pub const READER_RESPONSE_STREAM_BASE: i32 = 0x5A30_0000;

static POOL: Mutex<Option<HashMap<String, Vec<ArchiveSession>>>> = Mutex::new(None);

fn pool_key(opts: &ReaderOptions) -> String {
    format!("{:?}", opts.archive)
}

/// A session from the pool, or a new one.
fn take_session(opts: &ReaderOptions) -> Result<ArchiveSession, ReadFailure> {
    let kept = POOL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get_mut(&pool_key(opts))
        .and_then(Vec::pop);
    match kept {
        Some(s) => Ok(s),
        None => {
            ArchiveSession::connect(&opts.archive, READER_RESPONSE_STREAM_BASE).map_err(|e| match e
            {
                PlanError::Archive(t) => ReadFailure::NoDriver(t),
                other => ReadFailure::Read(format!("{other:?}")),
            })
        }
    }
}

/// A session back to the pool for the next reader.
fn give_back(opts: &ReaderOptions, session: ArchiveSession) {
    POOL.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .entry(pool_key(opts))
        .or_default()
        .push(session);
}

// One per reader: the replay's size is no matter.
#[allow(clippy::large_enum_variant)]
enum Source {
    Files {
        dir: String,
        reader: Box<FragmentReader>,
    },
    Replay {
        session: Option<ArchiveSession>,
        replay: Option<RangeReplay>,
    },
    Empty,
}

/// One range's messages (see the module doc).
pub struct PartitionReader {
    opts: ReaderOptions,
    range: RecordingRange,
    source: Source,
    assembler: MessageAssembler,
    fragments: Batch,
    /// A batch handed back (`recycle`), the next one's memory.
    spare: Option<Batch>,
    fragment_limit: usize,
    /// The position after the last fragment read.
    last: i64,
    failed: bool,
    /// What to log (a start that waited for a replay slot).
    notes: Vec<String>,
    /// Real-time mode over a cluster member's log: what is committed.
    commit: Option<CommitLimit>,
}

impl PartitionReader {
    /// Opens the read of `range` as `opts` says (`archive_id`: the queried
    /// archive's, to find the directory it announces).
    pub fn open(
        opts: &ReaderOptions,
        range: RecordingRange,
        archive_id: Option<i64>,
    ) -> Result<PartitionReader, ReadFailure> {
        let assembler = MessageAssembler::new(range.recording_id, range.start, range.end);
        let fragment_limit = opts.fragment_limit.clamp(1, 1 << 24) as usize;
        let mut reader = PartitionReader {
            opts: opts.clone(),
            range: range.clone(),
            source: Source::Empty,
            assembler,
            fragments: Batch::with_capacity(fragment_limit.min(4096), 64 * 1024),
            spare: None,
            fragment_limit,
            last: range.replay_from,
            failed: false,
            notes: Vec::new(),
            commit: None,
        };
        if range.end <= range.start {
            return Ok(reader);
        }
        let files = files_dir_for(opts, &range, archive_id).map_err(|e| match e {
            PlanError::Option(t) => ReadFailure::Option(t),
            other => ReadFailure::Read(format!("{other:?}")),
        })?;
        reader.source = match files {
            Some(dir) => {
                if range.term_length <= 0 {
                    return Err(ReadFailure::Read(format!(
                        "recording {}: the range was planned without the recording's geometry",
                        range.recording_id
                    )));
                }
                // Every message of the range ends at or before `end` (at most
                // `replay_to`, what was recorded when planned), so the files
                // are never read past it.
                let g = Geometry {
                    recording_id: range.recording_id,
                    start_position: range.recording_start,
                    term_length: range.term_length as i64,
                    segment_length: range.segment_length as i64,
                    initial_term_id: range.initial_term_id,
                };
                // Segments the archive moved to its object store are fetched by this process
                // (its own credentials), into a cache shared by the readers of this host.
                let tier = sulis_archive::tier::Tier::reader_for(
                    Path::new(&dir),
                    &sulis_archive::tier::reader_cache_dir(Path::new(&dir)),
                    sulis_archive::tier::READER_CACHE_SIZE,
                    sulis_archive::tier::READER_TIMEOUT,
                )
                .map_err(ReadFailure::Read)?;
                let reader = FragmentReader::new(
                    Path::new(&dir),
                    g,
                    range.replay_from,
                    range.end.min(range.replay_to),
                )
                .with_tier(tier);
                Source::Files {
                    dir,
                    reader: Box::new(reader),
                }
            }
            None => {
                let (session, mut replay) = start_replay(opts, &range)?;
                reader.notes.extend(replay.waited.take());
                Source::Replay {
                    session: Some(session),
                    replay: Some(replay),
                }
            }
        };
        Ok(reader)
    }

    /// Real-time mode: recording `info` followed from `from` as it is
    /// recorded (a replay that never ends while the recording is live, and
    /// never past what is recorded), read with [`PartitionReader::poll_messages`].
    pub fn open_live(
        opts: &ReaderOptions,
        info: &crate::RecordingInfo,
        from: i64,
    ) -> Result<PartitionReader, ReadFailure> {
        let range = RecordingRange {
            recording_id: info.recording_id,
            stream_id: info.stream_id,
            session_id: info.session_id,
            start: from,
            end: i64::MAX,
            replay_from: from,
            replay_to: i64::MAX,
            recording_start: info.start,
            term_length: info.term_length,
            segment_length: info.segment_length,
            initial_term_id: info.initial_term_id,
        };
        let (session, replay) = start_replay(opts, &range)?;
        let fragment_limit = opts.fragment_limit.clamp(1, 1 << 24) as usize;
        Ok(PartitionReader {
            opts: opts.clone(),
            assembler: MessageAssembler::new(range.recording_id, from, i64::MAX),
            range,
            source: Source::Replay {
                session: Some(session),
                replay: Some(replay),
            },
            fragments: Batch::with_capacity(fragment_limit.min(4096), 64 * 1024),
            spare: None,
            fragment_limit,
            last: from,
            failed: false,
            notes: Vec::new(),
            commit: opts
                .cluster_dir
                .clone()
                .map(|dir| CommitLimit::of_member(dir, opts.archive.driver_dir.clone())),
        })
    }

    /// Real-time mode: whether the message ending at `position` may be
    /// handed over now: always for a recording, once committed for a
    /// cluster member's log (`commit_limit`).
    pub fn hands_over(&mut self, position: i64) -> Result<bool, ReadFailure> {
        match self.commit.as_mut() {
            None => Ok(true),
            Some(c) => c.allows(position, std::time::Instant::now()),
        }
    }

    /// The messages there are now, without waiting: Some (never empty),
    /// or None when nothing came (or the range is read to its end).
    pub fn poll_messages(&mut self) -> Result<Option<Batch>, ReadFailure> {
        self.fill(false)
    }

    /// The next messages of the range (never an empty batch), None once it
    /// is read to its end. Waits while a replay has nothing yet.
    pub fn next_batch(&mut self) -> Result<Option<Batch>, ReadFailure> {
        self.fill(true)
    }

    fn fill(&mut self, wait: bool) -> Result<Option<Batch>, ReadFailure> {
        loop {
            if self.last >= self.range.end {
                return Ok(None);
            }
            self.fragments.clear();
            let polled = match &mut self.source {
                Source::Empty => return Ok(None),
                Source::Files { dir, reader } => {
                    match reader.read_into(&mut self.fragments, self.fragment_limit) {
                        Ok(0) => return Ok(None), // replay_to reached
                        Ok(n) => Polled::Fragments(n),
                        Err(e) => {
                            self.failed = true;
                            return Err(ReadFailure::Read(format!(
                            "readMode=files, archive directory {dir}: recording {} ({}, {}]: recording {}: {e}",
                            self.range.recording_id, self.range.start, self.range.end, self.range.recording_id
                        )));
                        }
                    }
                }
                Source::Replay { session, replay } => {
                    let (s, r) = (
                        session.as_mut().expect("open"),
                        replay.as_mut().expect("open"),
                    );
                    match r.poll(s, &mut self.fragments, self.fragment_limit) {
                        Ok(p) => p,
                        Err(e) => {
                            self.failed = true;
                            return Err(e);
                        }
                    }
                }
            };
            match polled {
                Polled::Done => return Ok(None),
                Polled::Nothing if !wait => return Ok(None),
                Polled::Nothing => {
                    if crate::interrupt::interrupted() {
                        return Err(ReadFailure::Read(crate::interrupt::text(&format!(
                            "recording {} to replay",
                            self.range.recording_id
                        ))));
                    }
                    std::thread::sleep(Duration::from_micros(200))
                }
                Polled::Fragments(_) => {
                    self.last = self.fragments.positions[self.fragments.len() - 1];
                    // Whole messages are the fragments themselves, swapped with `out`: the
                    // memory of an earlier batch (recycled) serves the next read.
                    let mut out = self.spare.take().unwrap_or_default();
                    self.assembler
                        .assemble(&mut self.fragments, &mut out)
                        .map_err(ReadFailure::Read)?;
                    if !out.is_empty() {
                        return Ok(Some(out));
                    }
                }
            }
        }
    }

    /// Gives a batch `next_batch` or `poll_messages` returned back, once
    /// read, for its memory to serve the next read.
    pub fn recycle(&mut self, batch: Batch) {
        self.spare = Some(batch);
    }

    /// What to log since the last call.
    pub fn drain_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// Where the files are read from, None for a replay.
    pub fn files_dir(&self) -> Option<&str> {
        match &self.source {
            Source::Files { dir, .. } => Some(dir),
            _ => None,
        }
    }

    /// Stops a replay still running and gives a healthy session back.
    pub fn close(mut self) {
        self.release();
    }

    fn release(&mut self) {
        if let Source::Replay { session, replay } = &mut self.source {
            if let (Some(mut s), Some(r)) = (session.take(), replay.take()) {
                r.close(&mut s);
                if self.failed {
                    s.close(); // the archive may be gone: the next reader reconnects
                } else {
                    give_back(&self.opts, s);
                }
            }
        }
    }
}

impl Drop for PartitionReader {
    fn drop(&mut self) {
        self.release();
    }
}

/// Starts the replay of `range` on a pooled session; a session the archive
/// no longer knows (no answer: restarted or gone) is replaced once.
fn start_replay(
    opts: &ReaderOptions,
    range: &RecordingRange,
) -> Result<(ArchiveSession, RangeReplay), ReadFailure> {
    let archive = opts.archive.describe();
    let timeout = Duration::from_secs_f64(opts.archive.message_timeout_s);
    let start = |s: &mut ArchiveSession| {
        RangeReplay::start(
            s,
            &archive,
            range,
            &opts.replay_channel,
            opts.replay_stream_id,
            timeout,
        )
    };
    let mut session = take_session(opts)?;
    match start(&mut session) {
        Ok(r) => Ok((session, r)),
        Err((failure, cause)) => {
            session.close();
            if matches!(cause, Some(ArchiveError::Archive { .. }) | None) {
                return Err(failure); // the archive answered: a refusal
            }
            let mut session = take_session(opts)?;
            match start(&mut session) {
                Ok(r) => Ok((session, r)),
                Err((_, cause)) => {
                    session.close();
                    Err(ReadFailure::Read(format!(
                        "{archive}: replay of recording {} from {} to {} failed: {}",
                        range.recording_id,
                        range.replay_from,
                        range.end,
                        cause.map_or("no reason given".into(), |e| e.to_string())
                    )))
                }
            }
        }
    }
}
