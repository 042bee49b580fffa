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

use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;
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
#[derive(Clone, Copy, Debug)]
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
    /// Subscriber positions. The conductor replaces the whole list when a
    /// subscriber comes or goes ([`PublicationImage::add_subscriber`],
    /// [`PublicationImage::remove_subscribers`]); the receiver reads it every
    /// duty cycle without a lock (an atomic pointer load), as Aeron's
    /// receiver reads the volatile array the conductor swaps.
    subscribers: ArcSwap<Vec<ImageSubscriber>>,
    /// Receiver's clock time of the last frame from the source.
    pub time_of_last_packet_ns: AtomicI64,
    /// End-of-stream position seen on a heartbeat (`i64::MAX` until then).
    pub eos_position: AtomicI64,
    /// See [`state`].
    pub state: AtomicU8,
}

/// Shared image state as created by the conductor (counters already set).
pub struct ImageParts {
    /// See [`PublicationImage::correlation_id`].
    pub correlation_id: i64,
    /// See [`PublicationImage::session_id`].
    pub session_id: i32,
    /// See [`PublicationImage::stream_id`].
    pub stream_id: i32,
    /// See [`PublicationImage::endpoint_id`].
    pub endpoint_id: u64,
    /// See [`PublicationImage::channel`].
    pub channel: String,
    /// See [`PublicationImage::source`].
    pub source: SocketAddr,
    /// See [`PublicationImage::logs`].
    pub logs: LogBuffers,
    /// See [`PublicationImage::initial_term_id`].
    pub initial_term_id: i32,
    /// See [`PublicationImage::join_position`].
    pub join_position: i64,
    /// See [`PublicationImage::window_length`].
    pub window_length: i32,
    /// See [`PublicationImage::reliable`].
    pub reliable: bool,
    /// See [`PublicationImage::hwm`].
    pub hwm: CounterRef,
    /// See [`PublicationImage::rcv_pos`].
    pub rcv_pos: CounterRef,
    /// Receiver clock time it was created at.
    pub now_ns: i64,
}

impl PublicationImage {
    /// An active image without subscribers; the counters start at the join position.
    pub fn new(p: ImageParts) -> PublicationImage {
        let term_length = p.logs.term_length();
        p.hwm.set_ordered(p.join_position);
        p.rcv_pos.set_ordered(p.join_position);
        PublicationImage {
            correlation_id: p.correlation_id,
            session_id: p.session_id,
            stream_id: p.stream_id,
            endpoint_id: p.endpoint_id,
            channel: p.channel,
            source: p.source,
            logs: p.logs,
            bits: term_length.trailing_zeros(),
            term_length,
            initial_term_id: p.initial_term_id,
            join_position: p.join_position,
            window_length: p.window_length,
            reliable: p.reliable,
            hwm: p.hwm,
            rcv_pos: p.rcv_pos,
            subscribers: ArcSwap::from_pointee(Vec::new()),
            time_of_last_packet_ns: AtomicI64::new(p.now_ns),
            eos_position: AtomicI64::new(i64::MAX),
            state: AtomicU8::new(state::ACTIVE),
        }
    }

    /// The subscribers now (a snapshot: later changes do not show in it).
    pub fn subscribers(&self) -> Arc<Vec<ImageSubscriber>> {
        self.subscribers.load_full()
    }

    /// True while some subscription reads the image.
    pub fn has_subscribers(&self) -> bool {
        !self.subscribers.load().is_empty()
    }

    /// Adds a subscriber (conductor only: the list is replaced, not changed
    /// in place, so a concurrent reader sees the old or the new list whole).
    pub fn add_subscriber(&self, subscriber: ImageSubscriber) {
        let mut next = Vec::clone(&self.subscribers.load());
        next.push(subscriber);
        self.subscribers.store(Arc::new(next));
    }

    /// Removes the subscribers `remove` picks and returns them (conductor only).
    pub fn remove_subscribers(
        &self,
        mut remove: impl FnMut(&ImageSubscriber) -> bool,
    ) -> Vec<ImageSubscriber> {
        let current = self.subscribers.load_full();
        let (gone, kept): (Vec<_>, Vec<_>) = current.iter().partition(|s| remove(s));
        if !gone.is_empty() {
            self.subscribers.store(Arc::new(kept));
        }
        gone
    }

    /// The slowest subscriber's position (`None` without subscribers). No
    /// lock: the receiver calls this every duty cycle.
    pub fn min_subscriber_position(&self) -> Option<i64> {
        self.subscribers
            .load()
            .iter()
            .map(|s| s.position.get_volatile())
            .min()
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
