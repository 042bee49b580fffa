//! Images of remote publications: the part shared by the conductor and the
//! receiver.
//!
//! The conductor creates an image when the receiver sees a SETUP for a stream
//! someone subscribes to: a log file under `images/`, the receiver's
//! high-water-mark and position counters, a subscriber position per
//! subscription. The receiver writes received frames into the log, NAKs
//! gaps, sends status messages and cleans behind the slowest subscriber. The
//! conductor retires the image when its source falls silent (image liveness
//! timeout) or it reaches end of stream and every subscriber has read it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::Mutex;
use sulis_concurrent::counters::CounterRef;
use sulis_concurrent::logbuffer::LogBuffers;

/// Shared image state.
pub mod state {
    /// Receiving.
    pub const ACTIVE: u8 = 0;
    /// Retired by the conductor: the receiver drops it and ignores its packets.
    pub const INACTIVE: u8 = 1;
}

/// One subscriber's position on an image.
#[derive(Debug)]
pub struct ImageSubscriber {
    /// Registration id of the subscription.
    pub subscription_id: i64,
    /// Its position counter.
    pub position: CounterRef,
}

/// A remote publication's image.
pub struct PublicationImage {
    /// Correlation id (names the log file).
    pub correlation_id: i64,
    /// Session id.
    pub session_id: i32,
    /// Stream id.
    pub stream_id: i32,
    /// Conductor's id of the receive endpoint.
    pub endpoint_id: u64,
    /// Channel of the subscription that asked for it (for reports).
    pub channel: String,
    /// Where the publication's frames come from; status messages and NAKs go here.
    pub source: SocketAddr,
    /// The log.
    pub logs: LogBuffers,
    /// log2 of the term length.
    pub bits: u32,
    /// Term length.
    pub term_length: usize,
    /// Initial term id.
    pub initial_term_id: i32,
    /// Position the image started at.
    pub join_position: i64,
    /// Receiver window length.
    pub window_length: i32,
    /// NAK gaps (true) or pad over them (`reliable=false`).
    pub reliable: bool,
    /// High-water mark (receiver).
    pub hwm: CounterRef,
    /// Rebuild position: everything before it is received (receiver).
    pub rcv_pos: CounterRef,
    /// Subscriber positions (conductor adds and removes; receiver reads).
    pub subscribers: Mutex<Vec<ImageSubscriber>>,
    /// Receiver's clock time of the last frame from the source.
    pub time_of_last_packet_ns: AtomicI64,
    /// End-of-stream position seen on a heartbeat (`i64::MAX` until then).
    pub eos_position: AtomicI64,
    /// See [`state`].
    pub state: AtomicU8,
}

impl PublicationImage {
    /// The slowest subscriber's position (`None` without subscribers).
    pub fn min_subscriber_position(&self) -> Option<i64> {
        let subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subs.iter().map(|s| s.position.get_volatile()).min()
    }

    /// True once retired by the conductor.
    #[inline]
    pub fn is_inactive(&self) -> bool {
        self.state.load(Ordering::Acquire) == state::INACTIVE
    }

    /// True once the stream ended and every subscriber read it all.
    pub fn is_drained(&self) -> bool {
        let eos = self.eos_position.load(Ordering::Acquire);
        eos != i64::MAX
            && self.rcv_pos.get_volatile() >= eos
            && self.min_subscriber_position().is_none_or(|m| m >= eos)
    }
}
