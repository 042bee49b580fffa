//! UDP publications: the part shared by the conductor and the sender.
//!
//! Publishers append to the log as for IPC; the sender agent sends what they
//! committed, never beyond the sender limit that status messages open
//! (flow control); the conductor keeps the publisher limit one window ahead
//! of the sender position while a receiver is connected, cleans the term
//! behind the sender and runs the close sequence.
//!
//! Life cycle (conductor): `Active` → (last publisher gone) `Draining`
//! (end-of-stream position set; the sender finishes sending) → `Lingering`
//! (the sender keeps sending end-of-stream heartbeats and serving NAKs) →
//! `Done` (the sender drops it, counters are freed, the file is deleted).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use sulis_concurrent::counters::CounterRef;
use sulis_concurrent::logbuffer::{self, meta, LogBuffers};
use sulis_protocol::log_buffer_descriptor::*;

/// Shared status: set by the conductor, read by the sender.
pub mod status {
    /// Publishers attached.
    pub const ACTIVE: u8 = 0;
    /// Closed by its publishers; sending what is left, then end of stream.
    pub const DRAINING: u8 = 1;
    /// Everything sent; end-of-stream heartbeats, NAKs still served.
    pub const LINGERING: u8 = 2;
}

/// A UDP publication: the log and the counters both agents use.
pub struct NetworkPublication {
    /// Registration id (correlation id of the first add).
    pub registration_id: i64,
    /// Session id.
    pub session_id: i32,
    /// Stream id.
    pub stream_id: i32,
    /// Channel as the first publisher gave it.
    pub channel: String,
    /// Where data goes.
    pub destination: SocketAddr,
    /// Exclusive publication.
    pub exclusive: bool,
    /// The log.
    pub logs: LogBuffers,
    /// log2 of the term length.
    pub bits: u32,
    /// Term length.
    pub term_length: usize,
    /// Initial term id.
    pub initial_term_id: i32,
    /// MTU: largest datagram.
    pub mtu: usize,
    /// Time to live for multicast (0 = OS default).
    pub ttl: i32,
    /// Publisher limit (conductor).
    pub pub_limit: CounterRef,
    /// Publisher position, sampled (conductor).
    pub pub_pos: CounterRef,
    /// Sender position (sender).
    pub snd_pos: CounterRef,
    /// Sender limit: how far status messages allow sending (sender).
    pub snd_lmt: CounterRef,
    /// Sender's clock time of the last valid status message, `i64::MIN` if none.
    pub time_of_last_sm_ns: AtomicI64,
    /// See [`status`].
    pub status: AtomicU8,
    /// Send end-of-stream when closed.
    pub signal_eos: bool,
}

impl NetworkPublication {
    /// Producer position, from the log's tail.
    pub fn producer_position(&self) -> i64 {
        meta::producer_position(&self.logs.meta(), self.term_length, self.initial_term_id)
    }

    /// End-of-stream position (`i64::MAX` while open).
    pub fn end_of_stream_position(&self) -> i64 {
        meta::end_of_stream_position(&self.logs.meta())
    }

    /// Current status (see [`status`]).
    #[inline]
    pub fn status(&self) -> u8 {
        self.status.load(Ordering::Acquire)
    }

    /// True if a status message arrived within `timeout_ns` of `now_ns`.
    pub fn has_receivers(&self, now_ns: i64, timeout_ns: i64) -> bool {
        let t = self.time_of_last_sm_ns.load(Ordering::Acquire);
        t != i64::MIN && now_ns - t <= timeout_ns
    }
}

/// The conductor's view of a network publication.
pub struct NetworkPublicationEntry {
    /// The shared part.
    pub publication: std::sync::Arc<NetworkPublication>,
    /// Key of the send endpoint it goes out on.
    pub endpoint_key: String,
    /// Publisher links holding it open.
    pub ref_count: usize,
    /// Conductor-side state.
    pub state: NetState,
    term_window: i64,
    clean_position: i64,
    connected: bool,
    /// Set when the endpoint was given as a host name.
    pub re_resolution: Option<ReResolution>,
}

/// A publication's endpoint host name, looked up again when the publication
/// has heard no status message for a while (the host may have moved).
#[derive(Clone, Debug)]
pub struct ReResolution {
    /// The endpoint as the channel gave it (`host:port`).
    pub name: String,
    /// The address the sender sends to now.
    pub address: SocketAddr,
    /// When the name was last looked up (the conductor's clock).
    pub last_lookup_ns: i64,
}

/// Conductor-side state of a network publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetState {
    /// Publishers attached.
    Active,
    /// No publisher left; the sender finishes sending.
    Draining {
        /// When draining began.
        since_ns: i64,
    },
    /// Sent; lingering for late NAKs.
    Lingering {
        /// When lingering ends.
        until_ns: i64,
    },
    /// Ready to be removed from the sender and freed.
    Done,
}

impl NetworkPublicationEntry {
    /// Wraps a new publication; the limits start at the producer position.
    pub fn new(
        publication: std::sync::Arc<NetworkPublication>,
        endpoint_key: String,
        term_window: i64,
    ) -> Self {
        let start = publication.producer_position();
        for c in [
            &publication.pub_limit,
            &publication.pub_pos,
            &publication.snd_pos,
            &publication.snd_lmt,
        ] {
            c.set_ordered(start);
        }
        NetworkPublicationEntry {
            publication,
            endpoint_key,
            ref_count: 1,
            state: NetState::Active,
            term_window,
            clean_position: start,
            connected: false,
            re_resolution: None,
        }
    }

    /// True if the endpoint is a host name and the publication, still open
    /// to publishers, has had no status message for `timeout_ns`, nor a
    /// look-up of its name.
    pub fn is_due_for_re_resolution(&self, now_ns: i64, timeout_ns: i64) -> bool {
        let Some(r) = &self.re_resolution else {
            return false;
        };
        let last_sm = self.publication.time_of_last_sm_ns.load(Ordering::Acquire);
        self.is_active() && now_ns - last_sm.max(r.last_lookup_ns) >= timeout_ns
    }

    /// True while publishers can attach.
    pub fn is_active(&self) -> bool {
        self.state == NetState::Active
    }

    /// Every conductor duty cycle: connection state and publisher limit.
    pub fn update_publisher_limit(&mut self, now_ns: i64, connection_timeout_ns: i64) -> usize {
        let p = &self.publication;
        let producer = p.producer_position();
        p.pub_pos.set_ordered(producer);
        if self.state != NetState::Active {
            return 0;
        }
        let mut work = 0;
        let connected = p.has_receivers(now_ns, connection_timeout_ns);
        if connected != self.connected {
            self.connected = connected;
            meta::set_connected(&p.logs.meta(), connected);
            work += 1;
        }
        let sender = p.snd_pos.get_volatile();
        if connected {
            let proposed = sender + self.term_window;
            if proposed > p.pub_limit.get() {
                // One term behind the sender: the term the writer moves into
                // next is clean, and NAKs within the last term can be served.
                let target = sender - p.term_length as i64;
                while self.clean_position < target {
                    self.clean_position = logbuffer::clean_to(&p.logs, self.clean_position, target);
                }
                p.pub_limit.set_ordered(proposed);
                work += 1;
            }
        } else if p.pub_limit.get() > sender.max(producer) {
            // Nobody listening: publishers see back pressure / not connected
            // once they reach what has been sent.
            p.pub_limit.set_ordered(sender.max(producer));
        }
        work
    }

    /// The last publisher went away: mark end of stream and start draining.
    pub fn close(&mut self, now_ns: i64) {
        if self.state == NetState::Active {
            let p = &self.publication;
            let producer = p.producer_position();
            p.logs
                .meta()
                .put_i64_ordered(LOG_END_OF_STREAM_POSITION_OFFSET, producer);
            meta::set_connected(&p.logs.meta(), false);
            p.pub_limit.set_ordered(producer);
            p.status.store(status::DRAINING, Ordering::Release);
            self.state = NetState::Draining { since_ns: now_ns };
        }
    }

    /// Timer step of the close sequence. Draining lasts while receivers are
    /// connected and data is left to send (a slow receiver still gets
    /// everything, as with Aeron); lingering lasts `linger_ns`.
    pub fn on_time_event(&mut self, now_ns: i64, linger_ns: i64, connection_timeout_ns: i64) {
        match self.state {
            NetState::Active | NetState::Done => {}
            NetState::Draining { since_ns } => {
                let p = &self.publication;
                let sent = p.snd_pos.get_volatile() >= p.producer_position();
                let abandoned = !p.has_receivers(now_ns, connection_timeout_ns)
                    && now_ns > since_ns + connection_timeout_ns.min(linger_ns);
                if sent || abandoned {
                    p.status.store(status::LINGERING, Ordering::Release);
                    self.state = NetState::Lingering {
                        until_ns: now_ns + linger_ns,
                    };
                }
            }
            NetState::Lingering { until_ns } => {
                if now_ns >= until_ns {
                    self.state = NetState::Done;
                }
            }
        }
    }
}
