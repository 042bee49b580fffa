//! A replay of this member's own log recording through its consensus
//! module (Aeron's `LogReplay`): the local archive replays the recording
//! from one position to another over IPC, and every whole entry is handed
//! to the caller, which applies it. The services replay the same session
//! (the module sends them JoinLog with its session id).
//!
//! The replay ends when its position reaches the end asked for. It fails,
//! naming the recording and where it stood, when an entry does not decode
//! or the position has not moved for the progress timeout.

use crate::service::log_adapter::{self, LogEntry};
use std::time::{Duration, Instant};
use sulis_archive::client::ArchiveClient;
use sulis_client::{Client, FragmentAssembler, Subscription};

/// One replay of the local log.
pub struct LogReplay {
    recording_id: i64,
    replay_session_id: i64,
    subscription: Subscription,
    assembler: FragmentAssembler,
    to: i64,
    position: i64,
    progress_timeout: Duration,
    last_progress: Instant,
}

impl LogReplay {
    /// Replays `recording_id` over `span` (from its start to its end) on
    /// `aeron:ipc` stream `stream_id`, bounded by counter `limit_counter_id`
    /// if given (the archive replays no further than its value).
    pub fn start(
        client: &Client,
        archive: &mut ArchiveClient,
        recording_id: i64,
        span: std::ops::Range<i64>,
        limit_counter_id: Option<i32>,
        stream_id: i32,
        progress_timeout: Duration,
    ) -> Result<LogReplay, String> {
        let (from, to) = (span.start, span.end);
        let what = |e: sulis_archive::client::ArchiveError| {
            format!("replaying the log's recording {recording_id} from {from} to {to}: {e}")
        };
        let replay_session_id = match limit_counter_id {
            Some(counter) => archive
                .start_bounded_replay(
                    recording_id,
                    from,
                    to - from,
                    counter,
                    "aeron:ipc",
                    stream_id,
                )
                .map_err(what)?,
            None => archive
                .start_replay(recording_id, from, to - from, "aeron:ipc", stream_id)
                .map_err(what)?,
        };
        let channel = format!("aeron:ipc?session-id={}", replay_session_id as i32);
        let subscription = client
            .add_subscription(&channel, stream_id)
            .map_err(|e| format!("the log's replay ({channel}): {e}"))?;
        Ok(LogReplay {
            recording_id,
            replay_session_id,
            subscription,
            assembler: FragmentAssembler::new(),
            to,
            position: from,
            progress_timeout,
            last_progress: Instant::now(),
        })
    }

    /// The replay's session id (the services' JoinLog names it).
    pub fn session_id(&self) -> i32 {
        self.replay_session_id as i32
    }

    /// Where it has got to.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// Reads up to `limit` fragments and hands each whole entry, with the
    /// position after it, to `on_entry`. Returns the end position once
    /// reached, `None` before.
    pub fn poll(
        &mut self,
        limit: usize,
        mut on_entry: impl FnMut(&LogEntry<'_>, i64) -> Result<(), String>,
    ) -> Result<Option<i64>, String> {
        if self.position >= self.to {
            return Ok(Some(self.position));
        }
        let mut messages = Vec::new();
        let assembler = &mut self.assembler;
        let n = self
            .subscription
            .poll(
                |payload, header| -> Result<(), ()> {
                    if let Some(m) = assembler.on_fragment(payload, header) {
                        messages.push((m.payload, m.end_position));
                    }
                    Ok(())
                },
                limit,
            )
            .unwrap_or(0);
        for (message, end) in messages {
            let entry = log_adapter::decode(&message, end)
                .map_err(|e| format!("replaying the log's recording {}: {e}", self.recording_id))?;
            on_entry(&entry, end)?;
            self.position = end;
        }
        if n > 0 {
            self.last_progress = Instant::now();
        } else if self.last_progress.elapsed() >= self.progress_timeout {
            return Err(format!(
                "replaying the log's recording {} stopped at {} of {} (nothing for {:?})",
                self.recording_id, self.position, self.to, self.progress_timeout
            ));
        }
        Ok((self.position >= self.to).then_some(self.position))
    }

    /// Stops the replay (if the archive is still at it) and closes the subscription.
    pub fn close(mut self, archive: &mut ArchiveClient) {
        if self.position < self.to {
            let _ = archive.stop_replay(self.replay_session_id);
        }
        let _ = self.subscription.close();
    }
}
