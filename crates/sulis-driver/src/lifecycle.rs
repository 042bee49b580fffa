//! The life cycle every driver publication goes through, IPC or network.
//!
//! `Active` (publishers attached) → the last publisher leaves: `Draining`
//! (end of stream marked in the log; subscribers read, or the sender sends,
//! what is left) → `Lingering` (the log stays mapped so late readers and
//! late NAKs are safe) → `Done` (the conductor frees counters and file).
//! What "drained" means differs by kind and is the caller's to say; the
//! states, the end-of-stream marking and the timing are shared.

use sulis_concurrent::counters::CounterRef;
use sulis_concurrent::logbuffer::{meta, LogBuffers};
use sulis_protocol::log_buffer_descriptor::LOG_END_OF_STREAM_POSITION_OFFSET;

/// Where a publication is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublicationState {
    /// Publishers attached.
    Active,
    /// No publisher left; what was published is still being delivered.
    Draining {
        /// When draining began.
        since_ns: i64,
    },
    /// Delivered; the log stays for late readers and NAKs.
    Lingering {
        /// When lingering ends.
        until_ns: i64,
    },
    /// Ready to be freed.
    Done,
}

impl PublicationState {
    /// True while publishers can attach.
    pub fn is_active(self) -> bool {
        self == PublicationState::Active
    }

    /// The last publisher left at `producer`: marks the end of stream in the
    /// log, tells publishers it is no longer connected, stops the limit
    /// there and starts draining. False (nothing done) unless active.
    pub fn close(
        &mut self,
        logs: &LogBuffers,
        pub_limit: &CounterRef,
        producer: i64,
        now_ns: i64,
    ) -> bool {
        if !self.is_active() {
            return false;
        }
        logs.meta()
            .put_i64_ordered(LOG_END_OF_STREAM_POSITION_OFFSET, producer);
        meta::set_connected(&logs.meta(), false);
        pub_limit.set_ordered(producer);
        *self = PublicationState::Draining { since_ns: now_ns };
        true
    }

    /// When draining began (`None` unless draining).
    pub fn draining_since(self) -> Option<i64> {
        match self {
            PublicationState::Draining { since_ns } => Some(since_ns),
            _ => None,
        }
    }

    /// Draining ends: linger for `linger_ns` from `now_ns`. False unless draining.
    pub fn finish_draining(&mut self, now_ns: i64, linger_ns: i64) -> bool {
        if self.draining_since().is_none() {
            return false;
        }
        *self = PublicationState::Lingering {
            until_ns: now_ns + linger_ns,
        };
        true
    }

    /// Timer step while lingering: `Done` once the linger passed. True on
    /// that transition.
    pub fn check_linger(&mut self, now_ns: i64) -> bool {
        match *self {
            PublicationState::Lingering { until_ns } if now_ns >= until_ns => {
                *self = PublicationState::Done;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sulis_concurrent::logbuffer::LogParams;
    use sulis_concurrent::AtomicBuffer;
    use sulis_protocol::log_buffer_descriptor::LOG_TYPE_CONCURRENT;

    #[test]
    fn should_go_through_draining_and_lingering_to_done_in_order_only() {
        let dir = std::env::temp_dir().join(format!("sulis-lifecycle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let params = LogParams {
            correlation_id: 1,
            term_length: 64 * 1024,
            page_size: 4096,
            mtu: 1408,
            initial_term_id: 0,
            active_term_id: 0,
            term_offset: 0,
            session_id: 1,
            stream_id: 1,
            log_type: LOG_TYPE_CONCURRENT,
            publication_window: 0,
            linger_ns: 0,
            sparse: true,
            signal_eos: true,
            tether: true,
            reliable: true,
            spies_simulate_connection: false,
        };
        let logs = LogBuffers::create(&dir.join("1.logbuffer"), &params).unwrap();
        let mut values = vec![0u8; 4096];
        let limit = CounterRef::new(AtomicBuffer::wrap(&mut values), 0);
        limit.set_ordered(4096);
        meta::set_connected(&logs.meta(), true);

        let mut s = PublicationState::Active;
        assert!(!s.finish_draining(1, 10), "not draining yet");
        assert!(!s.check_linger(1));
        assert!(s.close(&logs, &limit, 640, 5));
        assert_eq!(s, PublicationState::Draining { since_ns: 5 });
        assert_eq!(meta::end_of_stream_position(&logs.meta()), 640);
        assert!(!meta::is_connected(&logs.meta()));
        assert_eq!(limit.get(), 640);
        assert!(!s.close(&logs, &limit, 999, 6), "closes once");
        assert_eq!(s.draining_since(), Some(5));
        assert!(s.finish_draining(20, 100));
        assert_eq!(s, PublicationState::Lingering { until_ns: 120 });
        assert!(!s.check_linger(119));
        assert!(s.check_linger(120));
        assert_eq!(s, PublicationState::Done);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
