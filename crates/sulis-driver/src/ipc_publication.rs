//! IPC publications: a log that publishers append to and subscribers read in
//! place, with the driver keeping the publisher limit behind the slowest
//! subscriber, cleaning terms behind it and unblocking dead writers.
//!
//! Life cycle ([`PublicationState`]): draining lasts until the subscribers
//! read to the end of stream, however long that takes, as Aeron's
//! `IpcPublication` drains (a subscriber whose client dies is removed by
//! client liveness, so draining always ends); then the images are
//! withdrawn, and after the linger the counters are freed and the file
//! deleted.

use crate::lifecycle::PublicationState;
use sulis_concurrent::counters::CounterRef;
use sulis_concurrent::logbuffer::{self, meta, unblocker, LogBuffers};

/// A subscriber on this host reading a publication's log in place: an IPC
/// subscriber, or a spy on a UDP publication.
#[derive(Debug)]
pub struct LocalSubscriber {
    /// Registration id of the subscription.
    pub subscription_id: i64,
    /// Client owning the subscription.
    pub client_id: i64,
    /// Subscriber position counter.
    pub position: CounterRef,
    /// Whether this subscriber holds the publisher back.
    pub tether: bool,
    /// A spy with `ssc=true`: makes the UDP publication connected without
    /// receivers, whatever the publication's `ssc` (IPC subscribers always
    /// connect).
    pub simulates_connection: bool,
}

/// The position local subscribers hold a publication at: the slowest
/// tethered one's; when none is tethered, the fastest one's, so cleaning
/// never overtakes a reader; `None` without subscribers. A new subscriber
/// joins there too, so it gets what is still in the log for the others.
pub fn reader_position(subscribers: &[LocalSubscriber]) -> Option<i64> {
    let positions = || {
        subscribers
            .iter()
            .map(|s| (s.tether, s.position.get_volatile()))
    };
    positions()
        .filter(|&(tether, _)| tether)
        .map(|(_, p)| p)
        .min()
        .or_else(|| positions().map(|(_, p)| p).max())
}

/// The slowest tethered subscriber's position, if any is tethered.
pub fn tethered_position(subscribers: &[LocalSubscriber]) -> Option<i64> {
    subscribers
        .iter()
        .filter(|s| s.tether)
        .map(|s| s.position.get_volatile())
        .min()
}

/// How far the conductor cleans an IPC log when it moves the limit: up to
/// the slowest subscriber, as Aeron's `IpcPublication.cleanBufferTo`, so the
/// zeroing lands on lines the reader has just had in cache; a term behind,
/// zeroing lines long gone to memory, one busy stream with 64 MiB terms ran
/// at 0.7x the rate. An untethered subscriber may read behind `min` (the
/// tethered readers' position): it keeps its data until it is a term behind,
/// never more, so the term the writer moves into next is always clean.
fn clean_target(subscribers: &[LocalSubscriber], min: i64, term_length: usize) -> i64 {
    let slowest = subscribers
        .iter()
        .map(|s| s.position.get_volatile())
        .min()
        .unwrap_or(min);
    slowest.clamp(min - term_length as i64, min)
}

/// An IPC publication owned by the driver conductor.
pub struct IpcPublication {
    /// Registration id (correlation id of the first add).
    pub registration_id: i64,
    /// Session id.
    pub session_id: i32,
    /// Stream id.
    pub stream_id: i32,
    /// Channel as given by the first publisher.
    pub channel: String,
    /// Exclusive (single writer, never shared).
    pub exclusive: bool,
    /// The log.
    pub logs: LogBuffers,
    /// Publisher limit counter.
    pub pub_limit: CounterRef,
    /// Publisher position counter (sampled by the driver).
    pub pub_pos: CounterRef,
    /// Publisher links holding it open.
    pub ref_count: usize,
    /// Subscribers.
    pub subscribers: Vec<LocalSubscriber>,
    /// Where it is in the life cycle.
    pub state: PublicationState,
    /// `control-mode=response`.
    pub is_response: bool,
    /// `response-correlation-id` (-1 if none): on a request publication, the
    /// requester's response subscription.
    pub response_correlation_id: i64,
    term_window: i64,
    /// The limit moves only once it can move by an eighth of the window
    /// (Aeron's trip gain): a stream in flow then wakes the conductor a few
    /// times a window, not on every duty cycle.
    trip_limit: i64,
    /// The channel's `linger`, else the driver's publication linger: as
    /// written into the log when it was created.
    linger_ns: i64,
    clean_position: i64,
    consumer_position: i64,
    last_consumer_position: i64,
    time_of_last_consumer_change_ns: i64,
    connected: bool,
    /// What this conductor last wrote to `pub_pos` and `pub_limit` (only it
    /// writes them while the publication is active): compared here, not by
    /// reading the counters, so an idle publication's duty cycle touches no
    /// counter line (thousands of idle publications each cost a cache miss
    /// per cycle, which a busy stream beside them waited out).
    pub_pos_written: i64,
    pub_limit_written: i64,
}

impl IpcPublication {
    /// Wraps a freshly created log.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        registration_id: i64,
        session_id: i32,
        stream_id: i32,
        channel: String,
        exclusive: bool,
        logs: LogBuffers,
        pub_limit: CounterRef,
        pub_pos: CounterRef,
        term_window: i64,
        now_ns: i64,
    ) -> Self {
        let start =
            meta::producer_position(&logs.meta(), logs.term_length(), logs.initial_term_id());
        pub_limit.set_ordered(start);
        pub_pos.set_ordered(start);
        // Read before any client maps the log: no client can have changed it.
        let linger_ns = logs
            .meta()
            .get_i64(sulis_protocol::log_buffer_descriptor::LOG_LINGER_TIMEOUT_NS_OFFSET);
        IpcPublication {
            registration_id,
            session_id,
            stream_id,
            channel,
            exclusive,
            logs,
            pub_limit,
            pub_pos,
            ref_count: 1,
            subscribers: Vec::new(),
            state: PublicationState::Active,
            is_response: false,
            response_correlation_id: -1,
            term_window,
            trip_limit: start,
            pub_pos_written: start,
            pub_limit_written: start,
            linger_ns,
            clean_position: start,
            consumer_position: start,
            last_consumer_position: start,
            time_of_last_consumer_change_ns: now_ns,
            connected: false,
        }
    }

    /// How long this publication may drain and then linger once closed: the
    /// channel's `linger` parameter, else the driver's
    /// `publication_linger_timeout`.
    pub fn linger_ns(&self) -> i64 {
        self.linger_ns
    }

    /// Current producer position, read from the log's tail.
    pub fn producer_position(&self) -> i64 {
        meta::producer_position(
            &self.logs.meta(),
            self.logs.term_length(),
            self.logs.initial_term_id(),
        )
    }

    /// Where a new subscriber starts reading: where the existing subscribers
    /// are (the slowest that holds the publisher back, else the fastest), so
    /// it gets what is still in the log for them; the producer position when
    /// there is none.
    pub fn join_position(&self) -> i64 {
        reader_position(&self.subscribers).unwrap_or_else(|| self.producer_position())
    }

    /// True while publishers can attach.
    pub fn is_active(&self) -> bool {
        self.state.is_active()
    }

    /// Every duty cycle: move the publisher limit up behind the slowest
    /// tethered subscriber, cleaning the term the publisher will reuse first.
    /// True while nothing `update_publisher_limit` reads can have moved:
    /// nobody reads, and the limit stands where the producer was, so no
    /// publisher can append (an offer needs its position below the limit).
    /// The conductor then passes it by between timer ticks instead of
    /// reading its log every cycle (a cache miss per publication per cycle:
    /// 5,000 idle publications slowed a busy stream beside them by a
    /// quarter). A publisher that appends on a limit it cached before the
    /// subscribers left is seen at the next timer tick.
    pub fn is_still(&self) -> bool {
        self.subscribers.is_empty()
            && !self.connected
            && self.state.is_active()
            && self.pub_limit_written == self.pub_pos_written
    }

    pub fn update_publisher_limit(&mut self) -> usize {
        let mut work = 0;
        let producer = self.producer_position();
        if producer != self.pub_pos_written {
            self.pub_pos.set_ordered(producer);
            self.pub_pos_written = producer;
        }
        // Stays put if nobody reads.
        let min = reader_position(&self.subscribers).unwrap_or(producer);
        self.consumer_position = min;
        let has_subscribers = !self.subscribers.is_empty();
        if has_subscribers != self.connected && self.state.is_active() {
            self.connected = has_subscribers;
            meta::set_connected(&self.logs.meta(), has_subscribers);
            work += 1;
        }
        if has_subscribers && self.state.is_active() {
            let proposed = min + self.term_window;
            if proposed >= self.trip_limit && proposed > self.pub_limit_written {
                let target = clean_target(&self.subscribers, min, self.logs.term_length());
                while self.clean_position < target {
                    self.clean_position =
                        logbuffer::clean_to(&self.logs, self.clean_position, target);
                }
                self.pub_limit.set_ordered(proposed);
                self.pub_limit_written = proposed;
                self.trip_limit = proposed + (self.term_window >> 3);
                work += 1;
            }
        } else if self.state.is_active() && self.pub_limit_written != producer {
            self.pub_limit.set_ordered(producer);
            self.pub_limit_written = producer;
            self.trip_limit = producer;
            work += 1;
        }
        work
    }

    /// Timer check: a writer that died mid-claim blocks readers; after
    /// `unblock_timeout_ns` without progress the stuck frame is padded.
    /// Returns true if it unblocked something.
    pub fn check_for_blocked_publisher(&mut self, now_ns: i64, unblock_timeout_ns: i64) -> bool {
        let producer = self.producer_position();
        let consumer = self.consumer_position;
        if consumer == self.last_consumer_position
            && producer > consumer
            && !self.subscribers.is_empty()
        {
            if now_ns > self.time_of_last_consumer_change_ns + unblock_timeout_ns {
                self.time_of_last_consumer_change_ns = now_ns;
                return unblocker::unblock_log(&self.logs, consumer);
            }
        } else {
            self.last_consumer_position = consumer;
            self.time_of_last_consumer_change_ns = now_ns;
        }
        false
    }

    /// The last publisher went away: mark end of stream and start draining.
    pub fn close(&mut self, now_ns: i64) {
        let producer = self.producer_position();
        self.state
            .close(&self.logs, &self.pub_limit, producer, now_ns);
    }

    /// Timer step of the close sequence. Returns true when draining ends:
    /// every subscriber has read to the end of the stream and is to be told
    /// the image is gone; the publication then lingers for `linger_ns`. A
    /// slow subscriber is never cut off before the end (it would lose the
    /// stream's last messages, as a replay's subscriber did under load).
    pub fn on_time_event(&mut self, now_ns: i64, linger_ns: i64) -> bool {
        if self.state.draining_since().is_some() {
            let producer = self.producer_position();
            let drained = self
                .subscribers
                .iter()
                .all(|s| s.position.get_volatile() >= producer);
            return drained && self.state.finish_draining(now_ns, linger_ns);
        }
        self.state.check_linger(now_ns);
        false
    }
}
