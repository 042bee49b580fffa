//! The archive as the exactly-once sink sees it: which recordings hold a
//! stream or a session, waiting until a position is recorded, recording
//! the journal, and reading a recorded range back.
//!
//! Control sessions are kept per process and archive and used one call at
//! a time (tasks of one executor share them); a call that fails drops the
//! session, and the next connects again (the archive may have restarted).

use crate::archive_catalog::recording_info;
use crate::partition_reader::PartitionReader;
use crate::range_planner::RecordingRange;
use crate::sink_publications::SinkFailure;
use crate::{ArchiveAddress, ArchiveSession, PlanError, ReaderOptions, RecordingInfo};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use sulis_archive::client::ArchiveError;
use sulis_protocol::archive::channel::recording_key;

/// Response streams of the sink's control sessions: this base plus the
/// process id modulo 2^20 (the planner's are `0x5A200000` on, the
/// readers' `0x5A300000` on).
pub const SINK_RESPONSE_STREAM_BASE: i32 = 0x5A40_0000;

/// Recordings asked for per list request.
const PAGE: i32 = 1000;

type Slot = Arc<Mutex<Option<ArchiveSession>>>;

static SESSIONS: Mutex<Option<HashMap<String, Slot>>> = Mutex::new(None);

/// What the stream is told by: the archive's recording key (media,
/// endpoint, session-id, ..., not `alias` or `term-length`).
pub fn stream_key(channel: &str, stream_id: i32) -> Option<String> {
    recording_key(channel, stream_id).ok()
}

fn media(channel: &str) -> &str {
    channel.split('?').next().unwrap_or(channel)
}

/// The archive at one address, for the sink.
#[derive(Clone)]
pub struct SinkArchive {
    pub address: ArchiveAddress,
    slot: Slot,
}

impl SinkArchive {
    /// This process' sessions on the archive at `address`.
    pub fn of(address: &ArchiveAddress) -> SinkArchive {
        let mut all = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        let slot = all
            .get_or_insert_with(HashMap::new)
            .entry(format!("{address:?}"))
            .or_default()
            .clone();
        SinkArchive {
            address: address.clone(),
            slot,
        }
    }

    /// `f` on the session, connected if it is not.
    pub fn call<T>(
        &self,
        what: &str,
        f: impl FnOnce(&mut ArchiveSession) -> Result<T, ArchiveError>,
    ) -> Result<T, SinkFailure> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(
                ArchiveSession::connect(&self.address, SINK_RESPONSE_STREAM_BASE).map_err(|e| {
                    match e {
                        PlanError::Archive(t) => SinkFailure::NoDriver(t),
                        other => SinkFailure::Sink(other.named().1),
                    }
                })?,
            );
        }
        let result = f(slot.as_mut().expect("connected above"));
        if result.is_err() {
            if let Some(s) = slot.take() {
                s.close();
            }
        }
        result.map_err(|e| {
            SinkFailure::Sink(format!(
                "sulis sink: {what}: {} failed: {e}",
                self.address.describe()
            ))
        })
    }

    /// Every recording of `channel`/`stream_id` (the same recording key,
    /// whatever its other parameters), by recording id.
    pub fn recordings_of_stream(
        &self,
        channel: &str,
        stream_id: i32,
    ) -> Result<Vec<RecordingInfo>, SinkFailure> {
        self.recordings(channel, stream_id, None)
    }

    /// The recordings of the stream, of session `session_id` only where
    /// given (only those are asked for their position).
    fn recordings(
        &self,
        channel: &str,
        stream_id: i32,
        session_id: Option<i32>,
    ) -> Result<Vec<RecordingInfo>, SinkFailure> {
        let key = stream_key(channel, stream_id);
        let what = format!("listing the recordings of {channel} stream {stream_id}");
        self.call(&what, |s| {
            let mut out = Vec::new();
            let mut from = 0;
            loop {
                let page =
                    s.archive
                        .list_recordings_for_uri(from, PAGE, media(channel), stream_id)?;
                let full = page.len() as i32 >= PAGE;
                if let Some(last) = page.last() {
                    from = last.recording_id + 1;
                }
                for d in page {
                    if session_id.is_none_or(|id| id == d.session_id)
                        && stream_key(&d.stripped_channel, d.stream_id) == key
                    {
                        out.push(recording_info(s, &d)?);
                    }
                }
                if !full {
                    return Ok(out);
                }
            }
        })
    }

    /// The recordings of `channel`/`stream_id` made of session
    /// `session_id`, by start position.
    pub fn session_recordings(
        &self,
        channel: &str,
        stream_id: i32,
        session_id: i32,
    ) -> Result<Vec<RecordingInfo>, SinkFailure> {
        let mut found = self.recordings(channel, stream_id, Some(session_id))?;
        found.sort_by_key(|r| r.start);
        Ok(found)
    }

    /// Waits until a recording of session `session_id` on
    /// `channel`/`stream_id` has recorded up to `position`.
    pub fn await_recorded(
        &self,
        channel: &str,
        stream_id: i32,
        session_id: i32,
        position: i64,
        deadline: Instant,
        what: &str,
    ) -> Result<(), SinkFailure> {
        let asking = format!("waiting for {what} to be recorded");
        let mut rid = -1;
        loop {
            if rid < 0 {
                rid = self.call(&asking, |s| {
                    s.archive
                        .find_last_matching_recording(0, media(channel), stream_id, session_id)
                })?;
            }
            let recorded = if rid >= 0 {
                self.call(&asking, |s| s.archive.get_recording_position(rid))?
            } else {
                -1
            };
            if rid >= 0 && recorded >= position {
                return Ok(());
            }
            if Instant::now() > deadline {
                let state = if rid < 0 {
                    "is not recorded".to_string()
                } else {
                    format!("is recorded (recording {rid}) only to {recorded}")
                };
                return Err(SinkFailure::Timeout(format!(
                    "sulis sink: {what} at position {position} of session {session_id} on {channel} stream {stream_id} {state}: is the stream recorded by {}?",
                    self.address.describe()
                )));
            }
            if crate::interrupt::interrupted() {
                return Err(SinkFailure::Sink(crate::interrupt::text(&format!(
                    "{what} to be recorded"
                ))));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether something records `channel`/`stream_id`.
    fn records(&self, channel: &str, stream_id: i32) -> Result<bool, SinkFailure> {
        let key = stream_key(channel, stream_id);
        let subs = self.call("listing its recording subscriptions", |s| {
            s.archive
                .list_recording_subscriptions(0, PAGE, media(channel), Some(stream_id))
        })?;
        Ok(subs
            .iter()
            .any(|d| stream_key(&d.stripped_channel, d.stream_id) == key))
    }

    /// The archive records `channel`/`stream_id` (the journal): started
    /// here unless something records it already.
    pub fn ensure_recorded(&self, channel: &str, stream_id: i32) -> Result<(), SinkFailure> {
        if self.records(channel, stream_id)? {
            return Ok(());
        }
        let source = if media(channel) == "aeron:ipc" { 0 } else { 1 };
        let what = format!("recording the sink's journal ({channel} stream {stream_id})");
        let started = self.call(&what, |s| {
            s.archive.start_recording(channel, stream_id, source, false)
        });
        match started {
            // Another query starting it at the same time is as good.
            Err(_) if self.records(channel, stream_id).unwrap_or(false) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Each whole message of recording `r` ending in `(start, end]`, read
    /// by a replay on `replay` from `start` (a message boundary), with the
    /// position it ends at.
    pub fn read(
        &self,
        replay: &(String, i32),
        r: &RecordingInfo,
        start: i64,
        end: i64,
        mut f: impl FnMut(&[u8], i64) -> Result<(), SinkFailure>,
    ) -> Result<(), SinkFailure> {
        if end <= start {
            return Ok(());
        }
        let opts =
            ReaderOptions::for_reading(self.address.clone(), replay.clone(), 65536, "replay", None);
        let range = RecordingRange {
            recording_id: r.recording_id,
            stream_id: r.stream_id,
            session_id: r.session_id,
            start,
            end,
            replay_from: start,
            replay_to: end,
            recording_start: r.start,
            term_length: r.term_length,
            segment_length: r.segment_length,
            initial_term_id: r.initial_term_id,
        };
        let failed = |e: crate::range_replay::ReadFailure| match e.named() {
            ("NoMediaDriverError", t) => SinkFailure::NoDriver(t),
            (_, t) => SinkFailure::Sink(format!(
                "sulis sink: reading back recording {} from {start} to {end}: {t}",
                r.recording_id
            )),
        };
        let mut reader = PartitionReader::open(&opts, range, None).map_err(failed)?;
        let result = loop {
            match reader.next_batch() {
                Ok(Some(b)) => {
                    if let Err(e) = (0..b.len()).try_for_each(|i| f(b.get(i), b.positions[i])) {
                        break Err(e);
                    }
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(failed(e)),
            }
        };
        reader.close();
        result
    }
}
