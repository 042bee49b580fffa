//! A follower copying whole terms it lacks from the leader's archive into
//! its own log recording (Aeron's `LogReplication`): the local archive
//! replicates the leader's log recording up to a stop position, and the
//! archive's recording signals say how far it got.
//!
//! It is done when the local recording has stopped at the stop position.
//! It fails, naming why, when the archive reports an error for it, when the
//! recording stops short of the stop position, or when its position has
//! not moved for the progress timeout (a leader gone, a link down): the
//! election then starts again rather than wait for ever (Aeron #1657 is an
//! election that retried a failed replication without end; the caller
//! backs off between attempts).

use crate::module::election::ReplicationProgress;
use sulis_archive::client::{ArchiveClient, RecordingSignal, Replication};
use sulis_protocol::archive::messages::recording_signal;

/// One replication of the log.
#[derive(Debug)]
pub struct LogReplication {
    replication_id: i64,
    /// The local recording it extends (−1 until the archive names it).
    recording_id: i64,
    stop_position: i64,
    position: i64,
    progress_timeout_ns: i64,
    last_progress_ns: i64,
    stopped: bool,
    error: Option<String>,
    finished: bool,
}

impl LogReplication {
    /// Asks the local archive to replicate `r` (its stop position must be
    /// set: a log replication copies whole terms, never the live one).
    pub fn start(
        archive: &mut ArchiveClient,
        r: &Replication,
        start_position: i64,
        progress_timeout_ns: i64,
        now_ns: i64,
    ) -> Result<LogReplication, String> {
        if r.stop_position < 0 {
            return Err("a log replication needs a stop position".into());
        }
        let replication_id = archive.replicate(r).map_err(|e| {
            format!(
                "replicating the leader's log recording {} from {}: {e}",
                r.src_recording_id, r.src_control_channel
            )
        })?;
        Ok(LogReplication::started(
            replication_id,
            r.dst_recording_id,
            start_position,
            r.stop_position,
            progress_timeout_ns,
            now_ns,
        ))
    }

    /// A replication the archive accepted as `replication_id` (for tests,
    /// and [`LogReplication::start`]).
    pub fn started(
        replication_id: i64,
        recording_id: i64,
        start_position: i64,
        stop_position: i64,
        progress_timeout_ns: i64,
        now_ns: i64,
    ) -> LogReplication {
        LogReplication {
            replication_id,
            recording_id,
            stop_position,
            position: start_position,
            progress_timeout_ns,
            last_progress_ns: now_ns,
            stopped: false,
            error: None,
            finished: false,
        }
    }

    /// The id the archive gave it.
    pub fn replication_id(&self) -> i64 {
        self.replication_id
    }

    /// The local recording it writes (−1 until known).
    pub fn recording_id(&self) -> i64 {
        self.recording_id
    }

    /// A recording signal of the local archive; those of other
    /// replications or recordings are ignored.
    pub fn on_signal(&mut self, s: &RecordingSignal, now_ns: i64) {
        if s.correlation_id != self.replication_id {
            return;
        }
        if self.recording_id < 0 && s.recording_id >= 0 {
            self.recording_id = s.recording_id;
        }
        if s.recording_id != self.recording_id {
            return;
        }
        if s.position > self.position {
            self.position = s.position;
            self.last_progress_ns = now_ns;
        }
        match s.signal {
            recording_signal::STOP => self.stopped = true,
            recording_signal::REPLICATE_END => self.finished = true,
            _ => {}
        }
    }

    /// The archive refused or failed the replication.
    pub fn on_error(&mut self, message: &str) {
        if self.error.is_none() {
            self.error = Some(format!(
                "the log replication {} failed: {message}",
                self.replication_id
            ));
        }
    }

    /// Where it stands at `now_ns`.
    pub fn progress(&self, now_ns: i64) -> Result<ReplicationProgress, String> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let done = self.stopped && self.position >= self.stop_position;
        if !done && (self.stopped || self.finished) && self.position < self.stop_position {
            return Err(format!(
                "the log replication {} ended at {} short of {} (recording {})",
                self.replication_id, self.position, self.stop_position, self.recording_id
            ));
        }
        if !done && now_ns - self.last_progress_ns >= self.progress_timeout_ns {
            return Err(format!(
                "the log replication {} made no progress for {} ms at {} of {} (the leader's archive unreachable?)",
                self.replication_id,
                self.progress_timeout_ns / 1_000_000,
                self.position,
                self.stop_position
            ));
        }
        Ok(ReplicationProgress {
            position: self.position,
            done,
        })
    }

    /// Reads the local archive's signals and errors, then reports progress.
    pub fn poll(
        &mut self,
        archive: &mut ArchiveClient,
        now_ns: i64,
    ) -> Result<ReplicationProgress, String> {
        for (correlation_id, _, message) in archive.poll_errors() {
            if correlation_id == self.replication_id {
                self.on_error(&message);
            }
        }
        for s in archive.poll_signals() {
            self.on_signal(&s, now_ns);
        }
        self.progress(now_ns)
    }

    /// Stops it if it is still running.
    pub fn close(self, archive: &mut ArchiveClient) {
        if !(self.stopped || self.finished) && self.error.is_none() {
            let _ = archive.stop_replication(self.replication_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn signal(
        correlation_id: i64,
        recording_id: i64,
        position: i64,
        signal: i32,
    ) -> RecordingSignal {
        RecordingSignal {
            control_session_id: 1,
            correlation_id,
            recording_id,
            subscription_id: -1,
            position,
            signal,
        }
    }

    #[test]
    fn done_once_the_local_recording_stops_at_the_stop_position() {
        let mut r = LogReplication::started(9, 4, 1024, 8192, 10_000 * MS, 0);
        assert_eq!(
            r.progress(MS),
            Ok(ReplicationProgress {
                position: 1024,
                done: false
            })
        );
        r.on_signal(&signal(9, 4, 4096, recording_signal::EXTEND), 2 * MS);
        r.on_signal(&signal(8, 4, 9000, recording_signal::STOP), 3 * MS); // another replication's
        r.on_signal(&signal(9, 5, 9000, recording_signal::STOP), 3 * MS); // another recording's
        assert_eq!(
            r.progress(3 * MS),
            Ok(ReplicationProgress {
                position: 4096,
                done: false
            })
        );
        r.on_signal(&signal(9, 4, 8192, recording_signal::STOP), 4 * MS);
        assert_eq!(
            r.progress(4 * MS),
            Ok(ReplicationProgress {
                position: 8192,
                done: true
            })
        );
        // Done stays done, however long after.
        assert!(r.progress(60_000 * MS).unwrap().done);
    }

    #[test]
    fn a_new_local_recording_is_learnt_from_the_first_signal() {
        let mut r = LogReplication::started(9, -1, 0, 640, 10_000 * MS, 0);
        r.on_signal(&signal(9, 12, 0, recording_signal::REPLICATE), MS);
        assert_eq!(r.recording_id(), 12);
        r.on_signal(&signal(9, 12, 640, recording_signal::STOP), 2 * MS);
        assert!(r.progress(2 * MS).unwrap().done);
    }

    #[test]
    fn no_progress_for_the_timeout_fails_naming_where_it_stood() {
        let mut r = LogReplication::started(9, 4, 0, 8192, 10_000 * MS, 0);
        r.on_signal(&signal(9, 4, 2048, recording_signal::EXTEND), 5_000 * MS);
        assert!(r.progress(14_999 * MS).is_ok());
        let e = r.progress(15_000 * MS).unwrap_err();
        assert!(
            e.contains("no progress") && e.contains("2048 of 8192"),
            "{e}"
        );
    }

    #[test]
    fn an_archive_error_or_a_short_stop_fails_it() {
        let mut r = LogReplication::started(9, 4, 0, 8192, 10_000 * MS, 0);
        r.on_error("unknown src recording id 3");
        r.on_error("a second error");
        let e = r.progress(MS).unwrap_err();
        assert!(e.contains("unknown src recording id 3"), "{e}");
        let mut r = LogReplication::started(9, 4, 0, 8192, 10_000 * MS, 0);
        r.on_signal(&signal(9, 4, 4096, recording_signal::STOP), MS);
        let e = r.progress(MS).unwrap_err();
        assert!(e.contains("ended at 4096 short of 8192"), "{e}");
    }
}
