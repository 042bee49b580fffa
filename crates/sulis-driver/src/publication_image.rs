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

use crate::agent::ErrorReporter;
use crate::congestion_control::{CongestionControl, CongestionControlSpec};
use crate::context::ReceiverConfig;
use crate::loss::{
    fill_gap, LossDetector, OptimalMulticastDelayGenerator, StaticDelayGenerator, XorShift64,
};
use crate::media::transport::{send_control_frame, FrameBatch, Transport};
use crate::system_counters::{SystemCounter, SystemCounters};
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;
use sulis_concurrent::counters::CounterRef;
use sulis_concurrent::logbuffer::populator::Populator;
use sulis_concurrent::logbuffer::{self, term_rebuilder, LogBuffers};
use sulis_concurrent::loss_report::EntryHandle;
use sulis_protocol::frame::{
    DataDatagram, NakFrame, RspSetupFrame, RttmFrame, SetupFrame, StatusMessageFrame, EOS_FLAG,
};
use sulis_protocol::log_buffer_descriptor::*;

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
    /// Where the publication's frames come from.
    pub source: SocketAddr,
    /// Where status messages, NAKs and RTT requests go: the source, or a
    /// multicast channel's control group, or an MDC publication's control address.
    pub control_address: SocketAddr,
    /// The endpoint's transport the SETUP came in on (0 but for a
    /// multi-destination subscription, whose endpoint has one per destination).
    pub transport_index: usize,
    /// Group semantics (multicast, or the SETUP's GROUP flag, or `group=true`):
    /// NAKs wait a random back-off so that one, not one per receiver, reaches
    /// the sender.
    pub group: bool,
    /// Group tag its status messages carry (the subscription's `gtag`).
    pub group_tag: Option<i64>,
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
    /// Receiver window length: the most its congestion control offers.
    pub window_length: i32,
    /// The sender's MTU (from its SETUP).
    pub mtu: i32,
    /// Its congestion control (the subscription's `cc=`, else the driver's).
    pub congestion: CongestionControlSpec,
    /// CUBIC's round trip and window counters (`rcv-cc-cubic-rtt`, `-wnd`).
    pub cc_counters: Option<(CounterRef, CounterRef)>,
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
    /// The SETUP that made the image asked for a response channel
    /// (SEND_RESPONSE_SETUP): a response publication may name this image.
    pub send_response_setup: bool,
    /// Session id of the response publication the source is to be told of
    /// with RSP_SETUP frames, [`NO_RESPONSE_SESSION`] when none is due (set
    /// by the conductor, read by the receiver).
    pub response_session_id: AtomicI64,
    /// The conductor asks the receiver to send this period's status frames
    /// (status message, RSP_SETUP) on its next duty cycle.
    status_now: AtomicBool,
    /// Where the receiver gave up, stuck behind data its sender no longer
    /// keeps ([`NOT_GIVEN_UP`] until then): the conductor ends the image and
    /// the session is joined again at the stream's current position.
    pub given_up_at: AtomicI64,
}

/// [`PublicationImage::given_up_at`] while the image goes on.
pub const NOT_GIVEN_UP: i64 = i64::MIN;

/// [`PublicationImage::response_session_id`] when no RSP_SETUP is due.
pub const NO_RESPONSE_SESSION: i64 = i64::MIN;

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
    /// See [`PublicationImage::control_address`].
    pub control_address: SocketAddr,
    /// See [`PublicationImage::transport_index`].
    pub transport_index: usize,
    /// See [`PublicationImage::group`].
    pub group: bool,
    /// See [`PublicationImage::group_tag`].
    pub group_tag: Option<i64>,
    /// See [`PublicationImage::logs`].
    pub logs: LogBuffers,
    /// See [`PublicationImage::initial_term_id`].
    pub initial_term_id: i32,
    /// See [`PublicationImage::join_position`].
    pub join_position: i64,
    /// See [`PublicationImage::window_length`].
    pub window_length: i32,
    /// See [`PublicationImage::mtu`].
    pub mtu: i32,
    /// See [`PublicationImage::congestion`].
    pub congestion: CongestionControlSpec,
    /// See [`PublicationImage::cc_counters`].
    pub cc_counters: Option<(CounterRef, CounterRef)>,
    /// See [`PublicationImage::reliable`].
    pub reliable: bool,
    /// See [`PublicationImage::hwm`].
    pub hwm: CounterRef,
    /// See [`PublicationImage::rcv_pos`].
    pub rcv_pos: CounterRef,
    /// See [`PublicationImage::send_response_setup`].
    pub send_response_setup: bool,
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
            control_address: p.control_address,
            transport_index: p.transport_index,
            group: p.group,
            group_tag: p.group_tag,
            logs: p.logs,
            bits: term_length.trailing_zeros(),
            term_length,
            initial_term_id: p.initial_term_id,
            join_position: p.join_position,
            window_length: p.window_length,
            mtu: p.mtu,
            congestion: p.congestion,
            cc_counters: p.cc_counters,
            reliable: p.reliable,
            hwm: p.hwm,
            rcv_pos: p.rcv_pos,
            subscribers: ArcSwap::from_pointee(Vec::new()),
            time_of_last_packet_ns: AtomicI64::new(p.now_ns),
            eos_position: AtomicI64::new(i64::MAX),
            state: AtomicU8::new(state::ACTIVE),
            send_response_setup: p.send_response_setup,
            response_session_id: AtomicI64::new(NO_RESPONSE_SESSION),
            status_now: AtomicBool::new(false),
            given_up_at: AtomicI64::new(NOT_GIVEN_UP),
        }
    }

    /// True once the receiver gave up on it (see [`PublicationImage::given_up_at`]).
    pub fn has_given_up(&self) -> bool {
        self.given_up_at.load(Ordering::Acquire) != NOT_GIVEN_UP
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

    /// Asks the receiver for a status message (and an RSP_SETUP if one is
    /// due) on its next duty cycle instead of at the end of the period.
    pub fn request_status_now(&self) {
        self.status_now.store(true, Ordering::Release);
    }

    /// True once the stream ended and every subscriber read it all.
    pub fn is_drained(&self) -> bool {
        let eos = self.eos_position.load(Ordering::Acquire);
        eos != i64::MAX
            && self.rcv_pos.get_volatile() >= eos
            && self.min_subscriber_position().is_none_or(|m| m >= eos)
    }
}

/// With adaptive NAK retries, each image asks its sender for a round-trip
/// measurement this often: a sample the repair time estimate can always use
/// (a repair that took more than one NAK cannot be timed, so on its own the
/// estimate could not follow a path that got slower).
const RTTM_INTERVAL_NS: i64 = 100_000_000;
/// Round trips longer than this are taken for stale replies, not samples.
const RTTM_MAX_SAMPLE_NS: i64 = 10_000_000_000;

/// The receiver agent's side of an image: the protocol it runs with the
/// image's sender. Frames go into the log within the receiver window; the
/// rebuild position follows contiguous frames; gaps are NAKed (or padded
/// over when `reliable=false`); status messages report the slowest
/// subscriber; terms behind it are cleaned for reuse.
pub struct ImageReceiver {
    /// The shared part.
    pub image: Arc<PublicationImage>,
    loss: LossDetector,
    rebuild_position: i64,
    hwm_position: i64,
    /// The slowest subscriber's position at the last duty cycle (`i64::MIN`
    /// until read).
    consumed: i64,
    /// Until when duty cycles may pass this image by (`i64::MIN`: they may
    /// not): after a turn that found it idle (all it received rebuilt and
    /// read, no work done), up to when its next status message, persist
    /// message or round-trip measurement is due. Any frame for it, a reply,
    /// a removed way in, ends it.
    quiet_until_ns: i64,
    last_sm_position: i64,
    time_of_last_sm_ns: i64,
    /// The edge (position + window) our status messages offered.
    granted_edge: i64,
    /// How long a silence lasts before the status message goes again
    /// (doubling each time, up to the status-message timeout), and the
    /// high-water mark the silence started at.
    persist_ns: i64,
    persist_hwm: i64,
    time_of_last_rttm_ns: i64,
    /// The high-water mark when the last round-trip measurement went.
    rttm_hwm: i64,
    clean_position: i64,
    /// The furthest position any frame of the session reached (dropped
    /// over-runs included): how far the sender is.
    sender_position_seen: i64,
    /// The rebuild position last seen move, and since when it stood there.
    stuck_at: i64,
    stuck_since_ns: i64,
    /// This image's loss report entry, once it lost something.
    pub loss_entry: Option<EntryHandle>,
    /// Gaps to NAK, gathered before sending (no allocation per scan).
    naks: Vec<(i32, i32, i32)>,
    /// For a sparse log, the pages taken so far: a frame is written only
    /// once its pages (and the one after it, where a subscriber waits) exist.
    populator: Option<Populator>,
    page: i64,
    /// Why frames were dropped for want of pages, to report in the duty cycle.
    storage_error: Option<String>,
    /// Where control frames go: one connection per transport the session's
    /// frames arrive on (several for a multi-destination subscription).
    connections: Vec<Connection>,
    /// The window its status messages offer.
    cc: Box<dyn CongestionControl>,
    /// The window of the last status message.
    sm_window: i32,
    /// An end of stream came on some way since the last duty cycle: whether
    /// every way ended is decided there, after the receiver read all the
    /// endpoint's transports this cycle.
    eos_pending: bool,
}

/// One way the image's session reaches it (Aeron's `ImageConnection`): the
/// endpoint transport its frames arrive on, and where that transport sends
/// status messages and NAKs.
#[derive(Clone, Copy, Debug)]
struct Connection {
    transport_index: usize,
    control: SocketAddr,
    time_of_last_frame_ns: i64,
    /// Where this way's source ended its stream (an end-of-stream heartbeat
    /// came on it). The image ends only when every way has: a catch-up
    /// replay that ends on one destination of a multi-destination
    /// subscription does not end the live stream arriving on another.
    eos_position: Option<i64>,
}

impl ImageReceiver {
    /// Starts receiving `image` at its join position.
    pub fn new(image: Arc<PublicationImage>, cfg: &ReceiverConfig) -> ImageReceiver {
        let loss = if image.group {
            // A random back-off per NAK, so that of a group seeing the same
            // loss one asks and the sender's multicast retransmit answers all.
            let seed = (cfg.receiver_id as u64) ^ (image.correlation_id as u64).rotate_left(32);
            LossDetector::new(
                Box::new(OptimalMulticastDelayGenerator::new(
                    cfg.nak_multicast_max_backoff_ns,
                    cfg.nak_multicast_group_size,
                    XorShift64::new(seed | 1),
                )),
                cfg.max_gaps,
            )
        } else {
            let delay = StaticDelayGenerator::new(cfg.nak_delay_ns, cfg.nak_delay_ns == 0)
                .with_retry_delay_ns(cfg.nak_retry_ns);
            let mut loss = LossDetector::new(Box::new(delay), cfg.max_gaps);
            if let Some(max) = cfg.nak_retry_adaptive_max_ns {
                loss = loss.with_adaptive_retry(max);
            }
            loss
        };
        let join = image.join_position;
        let cc = image.congestion.build(
            image.window_length,
            image.mtu,
            image.time_of_last_packet_ns.load(Ordering::Relaxed),
        );
        if let Some((_, window)) = &image.cc_counters {
            window.set_ordered(cc.initial_window() as i64);
        }
        ImageReceiver {
            eos_pending: false,
            sm_window: cc.initial_window(),
            cc,
            loss,
            rebuild_position: join,
            hwm_position: join,
            consumed: i64::MIN,
            quiet_until_ns: i64::MIN,
            last_sm_position: join,
            time_of_last_sm_ns: i64::MIN / 2,
            granted_edge: join,
            persist_ns: 0,
            persist_hwm: join,
            time_of_last_rttm_ns: i64::MIN / 2,
            rttm_hwm: i64::MIN,
            clean_position: join,
            sender_position_seen: join,
            stuck_at: join,
            // Stuck, if at all, since it joined: not since the clock's start (an
            // image that never moved gave up at once and said it had waited for ages).
            stuck_since_ns: image.time_of_last_packet_ns.load(Ordering::Relaxed),
            loss_entry: None,
            naks: Vec::new(),
            populator: Populator::new(&image.logs, join),
            page: image.logs.page_size() as i64,
            storage_error: None,
            connections: vec![Connection {
                transport_index: image.transport_index,
                control: image.control_address,
                time_of_last_frame_ns: image.time_of_last_packet_ns.load(Ordering::Relaxed),
                eos_position: None,
            }],
            image,
        }
    }

    /// A frame of the session came in on `transport_index`, whose control
    /// frames go to `control`: a connection of its own if it is new.
    pub fn track_connection(&mut self, transport_index: usize, control: SocketAddr, now_ns: i64) {
        self.quiet_until_ns = i64::MIN;
        match self
            .connections
            .iter_mut()
            .find(|c| c.transport_index == transport_index)
        {
            Some(c) => {
                c.time_of_last_frame_ns = now_ns;
                c.control = control;
            }
            None => self.connections.push(Connection {
                transport_index,
                control,
                time_of_last_frame_ns: now_ns,
                eos_position: None,
            }),
        }
    }

    /// A SETUP of this image's session came (on `transport_index`). Another
    /// way in of a multi-destination subscription is tracked. Otherwise it
    /// tells something: a sender SETUPs only while it counts no receiver. If
    /// it is a term or more past where this image joined and the image has
    /// taken nothing yet, what the image joined at is gone from the sender's
    /// log: spies that stand in for receivers let the sender skip ahead
    /// before this receiver's first status message was counted. No NAK can
    /// fill that, and nothing was delivered from the image, so it is a join
    /// that failed, not a loss: the image ends (its subscribers are told it is
    /// unavailable), with no error, and the session is joined again where the
    /// sender is. Returns true if it ended.
    pub fn on_setup(
        &mut self,
        setup: &SetupFrame,
        transport_index: usize,
        control: SocketAddr,
        now_ns: i64,
    ) -> bool {
        let one_way =
            self.connections.len() == 1 && self.connections[0].transport_index == transport_index;
        self.track_connection(transport_index, control, now_ns);
        let img = &self.image;
        if !one_way || self.rebuild_position != img.join_position || img.has_given_up() {
            return false;
        }
        let at = compute_position(
            setup.active_term_id,
            setup.term_offset,
            img.bits,
            img.initial_term_id,
        );
        if at - self.rebuild_position < img.term_length as i64 {
            return false;
        }
        img.given_up_at
            .store(self.rebuild_position, Ordering::Release);
        true
    }

    /// A destination of a multi-destination subscription went: its transport
    /// is gone (and if every way left had ended its stream, the image ends).
    pub fn remove_connection(&mut self, transport_index: usize) {
        self.quiet_until_ns = i64::MIN;
        self.connections
            .retain(|c| c.transport_index != transport_index);
        self.end_stream_if_every_way_ended();
    }

    /// The end of stream came on `transport_index` at `position`. Whether
    /// the image ends is decided in the duty cycle, once the receiver read
    /// every transport of the endpoint: a catch-up replay's end read from
    /// its destination before the live log's first frame, sent earlier but
    /// waiting on the other destination's socket, ended the whole image
    /// mid-stream (the log path test, once under load).
    fn on_end_of_stream(&mut self, transport_index: usize, position: i64) {
        if let Some(c) = self
            .connections
            .iter_mut()
            .find(|c| c.transport_index == transport_index)
        {
            c.eos_position.get_or_insert(position);
        }
        self.eos_pending = true;
    }

    fn end_stream_if_every_way_ended(&mut self) {
        let img = &self.image;
        if img.eos_position.load(Ordering::Relaxed) != i64::MAX || self.connections.is_empty() {
            return;
        }
        let mut end = i64::MIN;
        for c in &self.connections {
            match c.eos_position {
                Some(p) => end = end.max(p),
                None => return,
            }
        }
        img.eos_position.store(end, Ordering::Release);
        img.logs
            .meta()
            .put_i64_ordered(LOG_END_OF_STREAM_POSITION_OFFSET, end);
    }

    /// The ways a control frame goes: every connection heard from within
    /// the connection timeout, or the newest one if none was.
    fn control_ways(&self, cfg: &ReceiverConfig, now_ns: i64) -> impl Iterator<Item = &Connection> {
        let timeout_ns = cfg.connection_timeout_ns;
        let live = move |c: &&Connection| now_ns - c.time_of_last_frame_ns < timeout_ns;
        let any_live = self.connections.iter().any(|c| live(&c));
        let newest = (!any_live)
            .then(|| {
                self.connections
                    .iter()
                    .max_by_key(|c| c.time_of_last_frame_ns)
            })
            .flatten();
        self.connections
            .iter()
            .filter(move |c| any_live && live(c))
            .chain(newest)
    }

    /// Sends a control frame on its ways ([`Self::control_ways`]); true if it went on one.
    fn send_control(
        &self,
        transports: &mut [Option<Box<dyn Transport>>],
        bytes: &[u8],
        cfg: &ReceiverConfig,
        errors: &ErrorReporter,
        now_ns: i64,
    ) -> bool {
        let mut sent = false;
        for c in self.control_ways(cfg, now_ns) {
            if let Some(Some(t)) = transports.get_mut(c.transport_index) {
                sent |= send_control_frame(&mut **t, bytes, c.control, errors);
            }
        }
        sent
    }

    /// As [`Self::send_control`], into `batch`: sent at the end of the endpoint's turn.
    fn queue_control(
        &self,
        batch: &mut FrameBatch,
        bytes: &[u8],
        cfg: &ReceiverConfig,
        now_ns: i64,
    ) {
        for c in self.control_ways(cfg, now_ns) {
            batch.push(c.transport_index, c.control, bytes);
        }
    }

    /// Gives up on an image stuck behind data its sender no longer keeps:
    /// the rebuild position has not moved for `stall_timeout` while the
    /// sender is more than half a term ahead (no sender resends what lies
    /// that far behind it: Aeron's keeps half a term, sulis's a term). A
    /// multicast receiver that fell behind a `max` stream ends there: Aeron's
    /// would wait for good. The image is marked for the conductor to end
    /// (its subscribers are told it is unavailable) and the session is joined
    /// again where the stream is; returns the bytes skipped, for the loss report.
    fn give_up_if_stuck(
        &mut self,
        cfg: &ReceiverConfig,
        errors: &ErrorReporter,
        now_ns: i64,
    ) -> Option<i64> {
        let img = &self.image;
        if self.rebuild_position != self.stuck_at {
            self.stuck_at = self.rebuild_position;
            self.stuck_since_ns = now_ns;
            return None;
        }
        let behind = self.sender_position_seen - self.rebuild_position;
        if cfg.stall_timeout_ns == 0
            || !img.reliable
            || img.has_given_up()
            || behind <= (img.term_length / 2) as i64
            || now_ns - self.stuck_since_ns < cfg.stall_timeout_ns
        {
            return None;
        }
        img.given_up_at
            .store(self.rebuild_position, Ordering::Release);
        errors.record(&format!(
            "image of session {} stream {} from {} on '{}': stuck at position {} for {} ms, {} bytes behind a sender \
             that no longer keeps them: skipped, the session is joined again where the stream is",
            img.session_id,
            img.stream_id,
            img.source,
            img.channel,
            self.rebuild_position,
            (now_ns - self.stuck_since_ns) / 1_000_000,
            behind
        ));
        Some(behind)
    }

    /// The persist timer (TCP's, for lost window updates): we have all the
    /// data there is up to the high-water mark and the subscribers consumed
    /// it, our status messages offered the sender more, yet nothing came for
    /// a repair time. The sender may be waiting at a limit it heard of
    /// before our last status messages were lost (a stream paced by its
    /// window loses the latest one or two to a 10 % loss now and then), which
    /// without this would last a status-message timeout (200 ms): the status
    /// message goes again, after twice the wait each time the silence goes on
    /// (a publisher with nothing to send costs a few status messages, each
    /// time it pauses).
    fn persist_due(&mut self, consumed: i64, cfg: &ReceiverConfig, now_ns: i64) -> bool {
        if self.hwm_position != self.persist_hwm {
            // Data came: the sender is not stuck; a silence starts over.
            self.persist_hwm = self.hwm_position;
            self.persist_ns = 0;
        }
        let waiting = self.granted_edge > self.hwm_position
            && self.rebuild_position >= self.hwm_position
            && consumed >= self.hwm_position;
        if !waiting {
            return false;
        }
        if self.persist_ns == 0 {
            self.persist_ns = self.loss.retry_delay_ns().max(1);
        }
        let last_packet = self.image.time_of_last_packet_ns.load(Ordering::Relaxed);
        let quiet = now_ns - last_packet.max(self.time_of_last_sm_ns);
        quiet >= self.persist_ns && self.persist_ns < cfg.status_message_timeout_ns
    }

    /// A sender's reply to one of our round-trip measurements, received at `now_ns`.
    pub fn on_rttm_reply(&mut self, r: &RttmFrame, now_ns: i64) {
        self.quiet_until_ns = i64::MIN;
        let rtt_ns = now_ns - r.echo_timestamp_ns - r.reception_delta_ns.max(0);
        if (0..RTTM_MAX_SAMPLE_NS).contains(&rtt_ns) {
            self.loss.on_round_trip(rtt_ns);
            self.cc.on_rtt_measurement(now_ns, rtt_ns);
            if let Some((rtt, _)) = &self.image.cc_counters {
                rtt.set_ordered(rtt_ns);
            }
        }
    }

    /// A DATA, PAD or heartbeat datagram of this image's session. Returns
    /// false for a heartbeat that told nothing new (no higher position, no
    /// end of stream): an idle stream's upkeep, which is not work for the
    /// receiver's back-off.
    pub fn insert_packet(
        &mut self,
        d: &DataDatagram<'_>,
        transport_index: usize,
        system: &SystemCounters,
        now_ns: i64,
    ) -> bool {
        let img = &self.image;
        let h = d.first();
        let position = compute_position(h.term_id, h.term_offset, img.bits, img.initial_term_id);
        // What the log can take: up to half a term past the last status
        // message, as Aeron's receiver takes (its over-run threshold). Not
        // just the window: a multicast sender paced by a faster receiver may
        // run ahead of this one's window, and what lands within half a term
        // is kept, its gaps NAKed, instead of dropped unseen.
        let over_run = self.last_sm_position + (img.term_length / 2) as i64;
        let reached = if d.is_heartbeat() {
            position
        } else {
            position + d.bytes().len() as i64
        };
        self.sender_position_seen = self.sender_position_seen.max(reached);
        // Any well-formed frame of the session shows the source is alive.
        img.time_of_last_packet_ns.store(now_ns, Ordering::Release);
        if d.is_heartbeat() {
            system.increment(SystemCounter::HeartbeatsReceived);
            // A heartbeat ahead tells of data sent and lost: the rebuild sees the gap.
            if position > over_run {
                system.increment(SystemCounter::FlowControlOverRuns);
                return false;
            }
            if position < self.last_sm_position - img.term_length as i64 {
                system.increment(SystemCounter::FlowControlUnderRuns);
                return false;
            }
            let mut news = false;
            if position > self.hwm_position {
                self.hwm_position = position;
                img.hwm.set_ordered(position);
                news = true;
            }
            if h.flags & EOS_FLAG != 0 {
                self.on_end_of_stream(transport_index, position);
                news = true;
            }
            return news;
        }
        // As in Aeron, a datagram occupies its own length in the window: a PAD
        // frame's body is not sent, so a padded term end never looks like an
        // over-run (the sender counted only the PAD header against its limit).
        let end = position + d.bytes().len() as i64;
        if position < self.last_sm_position {
            system.increment(SystemCounter::FlowControlUnderRuns);
            return true;
        }
        if end > over_run {
            system.increment(SystemCounter::FlowControlOverRuns);
            return true;
        }
        if let Some(Err(e)) = self
            .populator
            .as_ref()
            .map(|p| p.ensure(&img.logs, end + self.page))
        {
            // Dropped as an over-run is: NAKed and sent again once there is room.
            system.increment(SystemCounter::FlowControlOverRuns);
            self.storage_error.get_or_insert_with(|| e.to_string());
            return true;
        }
        let term = img.logs.term(index_by_term(img.initial_term_id, h.term_id));
        term_rebuilder::insert(&term, h.term_offset as usize, d.bytes());
        if end > self.hwm_position {
            self.hwm_position = end;
            img.hwm.set_ordered(end);
        }
        true
    }

    /// True if this duty cycle may pass the image by (see `quiet_until_ns`;
    /// a status message the conductor asked for ends the quiet too).
    #[inline]
    pub fn is_quiet(&self, now_ns: i64) -> bool {
        now_ns < self.quiet_until_ns && !self.image.status_now.load(Ordering::Relaxed)
    }

    /// When the next duty of an idle image falls due, if it may be passed by
    /// until then (`None`: every cycle, as while it has anything to do).
    fn quiet_until(&self, cfg: &ReceiverConfig, work: usize) -> Option<i64> {
        if work != 0
            || self.rebuild_position != self.hwm_position
            || self.consumed != self.hwm_position
            || self.eos_pending
            || self.storage_error.is_some()
            || !self.cc.is_static()
        {
            return None;
        }
        let mut until = self.time_of_last_sm_ns + cfg.status_message_timeout_ns;
        if self.persist_ns != 0 && self.persist_ns < cfg.status_message_timeout_ns {
            let last_packet = self.image.time_of_last_packet_ns.load(Ordering::Relaxed);
            until = until.min(last_packet.max(self.time_of_last_sm_ns) + self.persist_ns);
        }
        if cfg.nak_retry_adaptive_max_ns.is_some()
            && self.image.reliable
            && self.hwm_position != self.rttm_hwm
        {
            until = until.min(self.time_of_last_rttm_ns + RTTM_INTERVAL_NS);
        }
        Some(until)
    }

    /// One duty cycle: rebuild, NAKs (or gap fills), status message, RTT
    /// request, cleaning. Returns the work done and the gaps newly detected
    /// (count, bytes) for the loss report.
    pub fn do_duties(
        &mut self,
        transports: &mut [Option<Box<dyn Transport>>],
        cfg: &ReceiverConfig,
        errors: &ErrorReporter,
        upkeep: &mut FrameBatch,
        now_ns: i64,
    ) -> (usize, (u64, i64)) {
        let mut work = 0;
        if std::mem::take(&mut self.eos_pending) {
            self.end_stream_if_every_way_ended();
            work += 1;
        }
        if let Some(e) = self.storage_error.take() {
            errors.record(&format!(
                "image of session {} stream {} drops frames until there is room for its pages: {e}",
                self.image.session_id, self.image.stream_id
            ));
            work += 1;
        }
        let system = errors.system();
        let img = self.image.clone();
        let mut naks = std::mem::take(&mut self.naks);
        naks.clear();
        for _ in 0..PARTITION_COUNT {
            if self.rebuild_position >= self.hwm_position {
                self.loss.clear();
                break;
            }
            let term = img
                .logs
                .term(index_by_position(self.rebuild_position, img.bits));
            let (next, w) = self.loss.scan(
                &term,
                self.rebuild_position,
                self.hwm_position,
                img.initial_term_id,
                img.bits,
                now_ns,
                &mut |t, o, l| naks.push((t, o, l)),
            );
            work += w;
            let advanced = next > self.rebuild_position;
            self.rebuild_position = next;
            // Moving into the next term: scan it too; otherwise a gap holds us.
            if !advanced || next & (img.term_length as i64 - 1) != 0 {
                break;
            }
        }
        img.rcv_pos.set_ordered(self.rebuild_position);
        let mut new_loss = self.loss.take_new_loss();
        if let Some(skipped) = self.give_up_if_stuck(cfg, errors, now_ns) {
            new_loss = (new_loss.0 + 1, new_loss.1 + skipped);
            work += 1;
        }

        // Subscribers read no further than the rebuild position, and one
        // linked later starts at the slowest one: once they all read up to
        // the high-water mark, with nothing missing below it, their positions
        // cannot move until data comes, so they are not read again (a pointer
        // chase to each subscriber's counter, every cycle, for every idle
        // image: a fifth of a driver's time with thousands of idle streams).
        let consumed =
            if self.consumed == self.hwm_position && self.rebuild_position == self.hwm_position {
                self.consumed
            } else {
                img.min_subscriber_position()
                    .unwrap_or(self.rebuild_position)
            };
        self.consumed = consumed;
        let cc = self
            .cc
            .on_track_rebuild(now_ns, consumed, self.last_sm_position, new_loss.0 > 0);
        if cc.window != self.sm_window {
            if let Some((_, window)) = &img.cc_counters {
                window.set_ordered(cc.window as i64);
            }
        }
        let threshold = (cc.window / 4) as i64;
        let status_now =
            img.status_now.load(Ordering::Relaxed) && img.status_now.swap(false, Ordering::AcqRel);
        let sm_timed_out =
            status_now || now_ns - self.time_of_last_sm_ns >= cfg.status_message_timeout_ns;
        let persist = self.persist_due(consumed, cfg, now_ns);
        // A status message for news (consumption, window, a request) is work;
        // one that only repeats the last on its timer (or the persist timer's)
        // is upkeep: counted as work, a thousand idle images kept the driver
        // from ever backing off.
        let news = consumed - self.last_sm_position >= threshold.max(1)
            || status_now
            || cc.force_status_message
            || cc.window != self.sm_window;
        let send_sm = news || sm_timed_out || persist;
        let target = consumed - img.term_length as i64;
        while self.clean_position < target {
            self.clean_position = logbuffer::clean_to(&img.logs, self.clean_position, target);
        }
        if send_sm && consumed >= self.last_sm_position {
            self.last_sm_position = consumed;
            self.time_of_last_sm_ns = now_ns;
        }
        if send_sm {
            self.sm_window = cc.window;
            self.granted_edge = self
                .granted_edge
                .max(self.last_sm_position + cc.window as i64);
            if persist {
                self.persist_ns *= 2;
            }
        }
        let sm_position = self.last_sm_position;

        for &(term_id, term_offset, length) in &naks {
            if !img.reliable {
                // reliable=false: pad over the gap instead of asking for it.
                let term = img.logs.term(index_by_term(img.initial_term_id, term_id));
                if fill_gap(
                    &term,
                    term_offset,
                    length,
                    term_id,
                    img.session_id,
                    img.stream_id,
                ) {
                    system.increment(SystemCounter::LossGapFills);
                    work += 1;
                }
                continue;
            }
            let nak = NakFrame {
                session_id: img.session_id,
                stream_id: img.stream_id,
                term_id,
                term_offset,
                length,
            };
            self.send_control(transports, &nak.to_bytes(), cfg, errors, now_ns);
            system.increment(SystemCounter::NakMessagesSent);
            work += 1;
        }
        self.naks = naks;
        let response_session_id = if sm_timed_out {
            img.response_session_id.load(Ordering::Acquire)
        } else {
            NO_RESPONSE_SESSION
        };
        if response_session_id != NO_RESPONSE_SESSION {
            // A response publication answers this stream: tell its source
            // the session, every status-message period until the response
            // publication hears from it.
            let rsp = RspSetupFrame {
                session_id: img.session_id,
                stream_id: img.stream_id,
                response_session_id: response_session_id as i32,
            };
            self.send_control(transports, &rsp.to_bytes(), cfg, errors, now_ns);
            work += 1;
        }
        if send_sm {
            let sm = StatusMessageFrame {
                flags: 0,
                session_id: img.session_id,
                stream_id: img.stream_id,
                consumption_term_id: compute_term_id_from_position(
                    sm_position,
                    img.bits,
                    img.initial_term_id,
                ),
                consumption_term_offset: compute_term_offset_from_position(sm_position, img.bits),
                receiver_window: self.sm_window,
                receiver_id: cfg.receiver_id,
                group_tag: img.group_tag,
            };
            let mut buf = [0u8; StatusMessageFrame::LENGTH_WITH_GROUP_TAG];
            let len = sm.encode(&mut buf);
            if news {
                self.send_control(transports, &buf[..len], cfg, errors, now_ns);
            } else {
                // Only repeats what the sender heard: it goes with the cycle's other repeats.
                self.queue_control(upkeep, &buf[..len], cfg, now_ns);
            }
            system.increment(SystemCounter::StatusMessagesSent);
            work += news as usize;
        }
        // Only while the stream moves or a gap is open: an idle image needs
        // no repair time, and a measurement per image every 100 ms doubled
        // the packets of a thousand idle streams (each answered by its
        // sender) over Aeron's heartbeats and status messages.
        let for_naks = cfg.nak_retry_adaptive_max_ns.is_some()
            && img.reliable
            && now_ns - self.time_of_last_rttm_ns >= RTTM_INTERVAL_NS
            && (self.hwm_position != self.rttm_hwm || self.rebuild_position < self.hwm_position);
        if for_naks || self.cc.should_measure_rtt(now_ns) {
            self.time_of_last_rttm_ns = now_ns;
            self.rttm_hwm = self.hwm_position;
            self.cc.on_rtt_measurement_sent(now_ns);
            let rttm = RttmFrame {
                flags: RttmFrame::REPLY_FLAG,
                session_id: img.session_id,
                stream_id: img.stream_id,
                echo_timestamp_ns: now_ns,
                reception_delta_ns: 0,
                receiver_id: cfg.receiver_id,
            };
            self.send_control(transports, &rttm.to_bytes(), cfg, errors, now_ns);
        }
        self.quiet_until_ns = if new_loss.0 == 0 {
            self.quiet_until(cfg, work).unwrap_or(i64::MIN)
        } else {
            i64::MIN
        };
        (work, new_loss)
    }
}
