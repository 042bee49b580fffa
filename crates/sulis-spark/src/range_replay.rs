//! One range of a recording replayed from the archive, as fragments.
//!
//! The replay begins at the range's `replay_from` (a message boundary)
//! and runs to `replay_to` (a frame boundary: what was recorded when the
//! range was planned); the reader stops it once a fragment ends at or past
//! `end`. A replay that ends before `end` (a corrupt frame, the archive
//! stopped or killed) is never taken as complete: it fails naming where.

use crate::{ArchiveSession, RecordingRange};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sulis_archive::client::ArchiveError;
use sulis_client::{Batch, Image, Subscription};
use sulis_protocol::uri::ChannelUri;

/// Why a range could not be read; the text names the archive, the
/// recording and the position reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadFailure {
    /// The archive refused or cut the replay short, or a file is damaged.
    Read(String),
    /// The replay made no progress for the timeout.
    Timeout(String),
    /// No media driver (or archive) to read through on this host.
    NoDriver(String),
    /// An option this host cannot honour (`readMode=files`).
    Option(String),
}

impl ReadFailure {
    /// The name both sources give this failure, and its text.
    pub fn named(self) -> (&'static str, String) {
        match self {
            ReadFailure::Read(t) => ("ReadError", t),
            ReadFailure::Timeout(t) => ("ReadTimeoutError", t),
            ReadFailure::NoDriver(t) => ("NoMediaDriverError", t),
            ReadFailure::Option(t) => ("OptionError", t),
        }
    }
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFailure::Read(t)
            | ReadFailure::Timeout(t)
            | ReadFailure::NoDriver(t)
            | ReadFailure::Option(t) => f.write_str(t),
        }
    }
}

/// What one poll found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polled {
    /// Fragments were added to the batch.
    Fragments(usize),
    /// Nothing yet.
    Nothing,
    /// The range is read to its end.
    Done,
}

/// A replay of one range under way.
pub struct RangeReplay {
    range: RecordingRange,
    subscription: Subscription,
    replay_id: i64,
    /// The position after the last fragment read.
    last: i64,
    /// The replay's image, kept: its final position is readable after it
    /// is gone.
    image: Option<Arc<Image>>,
    ended: bool,
    idle_since: Instant,
    timeout: Duration,
    what: String,
    /// Said when the archive had no replay slot free and the start waited.
    pub waited: Option<String>,
}

impl RangeReplay {
    /// Starts the replay of `range` on `replay_channel`/`replay_stream_id`
    /// (a sparse log buffer unless the channel says otherwise), waiting
    /// while the archive runs as many replays as it may, up to `timeout`.
    pub fn start(
        session: &mut ArchiveSession,
        archive: &str,
        range: &RecordingRange,
        replay_channel: &str,
        replay_stream_id: i32,
        timeout: Duration,
    ) -> Result<RangeReplay, (ReadFailure, Option<ArchiveError>)> {
        let r = range;
        let what = format!(
            "{archive}: replay of recording {} ({}, {}]",
            r.recording_id, r.start, r.end
        );
        let sparse = ChannelUri::parse(replay_channel)
            .and_then(|u| u.with_default("sparse", "true"))
            .map(|u| u.to_string())
            .map_err(|e| {
                (
                    ReadFailure::Read(format!("{what}: replayChannel: {e}")),
                    None,
                )
            })?;
        let response = ChannelUri::parse(replay_channel).is_ok_and(|u| u.is_response());
        // A range without an end follows the live recording (Aeron's
        // REPLAY_ALL_AND_FOLLOW, -1): real-time mode reads so.
        let length = if r.replay_to == i64::MAX {
            -1
        } else {
            r.replay_to - r.replay_from
        };
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(10);
        let mut waited = None;
        loop {
            let started = if response {
                // The subscription first: the replay connects to it through
                // this host's driver (one replayChannel serves every host).
                let sub = session
                    .client
                    .add_subscription(replay_channel, replay_stream_id)
                    .map_err(|e| ArchiveError::Client(e.to_string()));
                sub.and_then(|sub| {
                    let shared = sub.shared();
                    session
                        .archive
                        .start_replay_via_response_channel(
                            &session.client,
                            (sub.registration_id(), &shared),
                            r.recording_id,
                            r.replay_from,
                            length,
                            None,
                            &sparse,
                            replay_stream_id,
                        )
                        .map(|id| (id, sub))
                })
            } else {
                session
                    .archive
                    .start_replay(
                        r.recording_id,
                        r.replay_from,
                        length,
                        &sparse,
                        replay_stream_id,
                    )
                    .and_then(|id| {
                        let channel = ChannelUri::parse(replay_channel)
                            .and_then(|u| u.with("session-id", &(id as i32).to_string()))
                            .map(|u| u.to_string())
                            .map_err(|e| ArchiveError::Client(e.to_string()))?;
                        session
                            .client
                            .add_subscription(&channel, replay_stream_id)
                            .map(|sub| (id, sub))
                            .map_err(|e| ArchiveError::Client(e.to_string()))
                    })
            };
            match started {
                Ok((replay_id, subscription)) => {
                    return Ok(RangeReplay {
                        range: r.clone(),
                        subscription,
                        replay_id,
                        last: r.replay_from,
                        image: None,
                        ended: false,
                        idle_since: Instant::now(),
                        timeout,
                        what,
                        waited,
                    })
                }
                Err(e) => {
                    let busy = e.to_string().contains("max concurrent replays");
                    if busy && waited.is_none() {
                        waited = Some(format!(
                            "{archive}: replay of recording {} waits for a replay slot ({e})",
                            r.recording_id
                        ));
                    }
                    if !busy || Instant::now() + pause > deadline {
                        let text = format!(
                            "{archive}: replay of recording {} from {} to {} refused: {e}",
                            r.recording_id, r.replay_from, r.end
                        );
                        return Err((ReadFailure::Read(text), Some(e)));
                    }
                }
            }
            if crate::interrupt::interrupted() {
                let text = crate::interrupt::text(&format!(
                    "{archive} to start the replay of recording {}",
                    r.recording_id
                ));
                return Err((ReadFailure::Read(text), None));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Adds up to `limit` fragments to `batch`; fails when the replay ends
    /// early, the archive reports an error, or nothing came for the
    /// timeout.
    pub fn poll(
        &mut self,
        session: &mut ArchiveSession,
        batch: &mut Batch,
        limit: usize,
    ) -> Result<Polled, ReadFailure> {
        let r = &self.range;
        if self.last >= r.end || self.ended {
            return Ok(Polled::Done);
        }
        let n = self.subscription.poll_batch_into(batch, limit);
        if n > 0 {
            if self.image.is_none() {
                // Still there: the driver withdraws an image only after it
                // was read to its end.
                self.image = self.subscription.images().into_iter().next();
            }
            self.idle_since = Instant::now();
            self.last = batch.positions[batch.len() - 1];
            return Ok(Polled::Fragments(n));
        }
        let images = self.subscription.images();
        if let Some(first) = images.first() {
            self.image = Some(first.clone());
            if images.iter().all(|i| i.is_end_of_stream() || i.is_closed()) {
                self.ended = true; // a bounded replay ends with end-of-stream
            }
        } else if self.image.is_some() {
            self.ended = true; // the image went away: the replay is over
        }
        let follows = r.end == i64::MAX;
        if self.ended && follows {
            return Ok(Polled::Done); // the recording stopped and all of it was read
        }
        if self.ended {
            // It must have reached the end (the image's final position
            // counts a term's closing padding, which delivers no message).
            let reached = self
                .last
                .max(self.image.as_ref().map_or(self.last, |i| i.position()));
            if reached < r.end {
                let why = errors_after_end(session);
                return Err(ReadFailure::Read(format!(
                    "{} ended early, at position {reached}: {}",
                    self.what,
                    if why.is_empty() {
                        "the archive gave no reason".into()
                    } else {
                        why
                    }
                )));
            }
            return Ok(Polled::Done);
        }
        let errors = session.archive.poll_errors();
        if !errors.is_empty() {
            return Err(ReadFailure::Read(format!(
                "{} failed, read to position {}: {}",
                self.what,
                self.last,
                describe_errors(&errors)
            )));
        }
        if !follows && self.idle_since.elapsed() > self.timeout {
            return Err(ReadFailure::Timeout(format!(
                "{} made no progress for {:.0}s at position {}",
                self.what,
                self.timeout.as_secs_f64(),
                self.last
            )));
        }
        Ok(Polled::Nothing)
    }

    /// Stops the replay if it is still running (read past `end`, an
    /// error, the task cut short) and closes its subscription.
    pub fn close(mut self, session: &mut ArchiveSession) {
        if !self.ended && self.last < self.range.replay_to {
            let _ = session.archive.stop_replay(self.replay_id);
        }
        let _ = self.subscription.close();
    }
}

/// The replay channel asking for a sparse log buffer unless it says
/// otherwise. A replay's publication has the recording's term length;
/// allocated in full (the driver's default), a 16 MiB-term recording costs
/// ~50 MB of zeroed pages and ~100 ms on every replay, so on every
/// micro-batch; sparse, a few ms.
pub fn sparse_channel(channel: &str) -> Result<String, String> {
    ChannelUri::parse(channel)
        .and_then(|u| u.with_default("sparse", "true"))
        .map(|u| u.to_string())
        .map_err(|e| e.to_string())
}

fn describe_errors(errors: &[(i64, i64, String)]) -> String {
    errors
        .iter()
        .map(|(_, code, text)| format!("{text} (code {code})"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The archive's errors about earlier requests, waiting briefly: an error
/// about a replay may come just after the replay's end of stream.
fn errors_after_end(session: &mut ArchiveSession) -> String {
    let deadline = Instant::now() + Duration::from_millis(200);
    loop {
        let errors = session.archive.poll_errors();
        if !errors.is_empty() || Instant::now() > deadline {
            return describe_errors(&errors);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_ask_for_a_sparse_log_buffer_unless_the_channel_says() {
        for (given, sent) in [
            ("aeron:ipc", "aeron:ipc?sparse=true"),
            (
                "aeron:udp?endpoint=10.0.0.1:9000",
                "aeron:udp?endpoint=10.0.0.1:9000|sparse=true",
            ),
            ("aeron:ipc?sparse=false", "aeron:ipc?sparse=false"),
        ] {
            assert_eq!(sparse_channel(given).unwrap(), sent);
        }
    }
}
