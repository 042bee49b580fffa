//! UDP publications: the part shared by the conductor and the sender.
//!
//! Publishers append to the log as for IPC; the sender agent sends what they
//! committed, never beyond the sender limit that status messages open
//! (flow control); the conductor keeps the publisher limit one window ahead
//! of the sender position while a receiver is connected, cleans the term
//! behind the sender and runs the close sequence.
//!
//! Spy subscriptions (`aeron-spy:aeron:udp?...`) read the log in place, as
//! IPC subscribers do. A tethered spy holds the publisher back like a slow
//! receiver: the publisher limit is the slowest of the sender and the
//! tethered spies plus the window. Spies alone do not make the publication
//! connected unless it has `ssc=true` (or the driver's
//! `spies_simulate_connection`), or a spy itself was added with `ssc=true`
//! (a sulis extension the archive uses for local recordings): then, with no
//! receiver, the sender skips ahead to the fastest spy (so the spies set
//! the pace, and a receiver that joins later starts where they are; its
//! first status message counts up to a term behind, what the sender skipped
//! since its SETUP is resent to it, and a receiver lapped further ends its
//! image and joins again, see `ImageReceiver::on_setup`) while
//! the limit stays the slowest of the sender and the tethered spies, as
//! Aeron's, so cleaning never passes a sender that has not caught up.
//!
//! Life cycle ([`PublicationState`], kept by the conductor; the sender sees
//! it as [`status`]): draining lasts until everything is sent (or no
//! receiver is left); while lingering the sender keeps sending end-of-stream
//! heartbeats and serving NAKs; then the sender drops it, counters are
//! freed and the file is deleted.

use crate::agent::ErrorReporter;
use crate::context::SenderConfig;
use crate::flow_control::{FlowControl, FlowControlSpec, TrackedReceiver};
use crate::ipc_publication::{reader_position, tethered_position, LocalSubscriber};
use crate::lifecycle::PublicationState;
use crate::loss::{NakOutcome, RetransmitHandler, StaticDelayGenerator};
use crate::media::transport::{send_control_frame, FrameBatch, Transport};
use crate::system_counters::{SystemCounter, SystemCounters};
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use sulis_concurrent::counters::CounterRef;
use sulis_concurrent::logbuffer::term_scanner::scan_for_availability;
use sulis_concurrent::logbuffer::{self, meta, LogBuffers};
use sulis_protocol::frame::{
    DataHeader, NakFrame, RttmFrame, SetupFrame, StatusMessageFrame, BEGIN_FLAG, END_FLAG, EOS_FLAG,
};
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
    /// Where data goes (a unicast host, or the multicast data group); `None`
    /// for a response publication, which learns it from the first
    /// setup-eliciting status message.
    pub destination: Option<SocketAddr>,
    /// Group semantics (multicast or multi-destination): SETUP says so
    /// (GROUP flag), receivers back off their NAKs, several retransmits may
    /// run at once.
    pub group: bool,
    /// The flow-control strategy the sender runs for it.
    pub flow_control: FlowControlSpec,
    /// Retransmits that may run at once (group semantics; `max-resend`).
    pub max_resend: usize,
    /// `control-mode=response`: answers a request stream over the address its
    /// requester's setup-eliciting status message came from.
    pub is_response: bool,
    /// `response-correlation-id` (-1 if none). On a request publication (not
    /// response mode) it names the requester's response subscription, and
    /// SETUP frames carry SEND_RESPONSE_SETUP; on a response publication,
    /// the request image it answers.
    pub response_correlation_id: i64,
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
    /// Spies count as a connection when no receiver is there (`ssc`).
    pub spies_simulate_connection: bool,
    /// While spies stand in for receivers: the fastest spy's position, which
    /// the sender skips ahead to (set by the conductor); else
    /// [`NO_CATCH_UP`].
    pub spy_catch_up: AtomicI64,
    /// The flow control has the receivers it waits for (`g:/N`; always true
    /// for strategies that wait for none). Set by the sender.
    pub required_receivers: AtomicBool,
    /// The receivers the flow control tracks (`min`, `tagged`), as the sender
    /// last published them (at most every [`RECEIVERS_PUBLISH_INTERVAL_NS`],
    /// and whenever one comes or goes), for counters and tools.
    pub receivers: ArcSwap<Vec<TrackedReceiver>>,
}

/// How often the sender publishes the tracked receivers' positions at most.
pub const RECEIVERS_PUBLISH_INTERVAL_NS: i64 = 100_000_000;

/// [`NetworkPublication::spy_catch_up`] when there is nothing to skip to.
pub const NO_CATCH_UP: i64 = i64::MIN;

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
    /// Where it is in the life cycle (conductor).
    pub state: PublicationState,
    /// Spy subscriptions reading the log.
    pub spies: Vec<LocalSubscriber>,
    term_window: i64,
    clean_position: i64,
    connected: bool,
    /// What the conductor last wrote to `pub_pos` and `pub_limit` (only it
    /// writes them while the publication is active): compared here, not by
    /// reading the counters, so an idle publication's duty cycle touches no
    /// counter line.
    pub_pos_written: i64,
    pub_limit_written: i64,
    /// A response publication no receiver has connected to yet: its request
    /// image sends RSP_SETUP frames until one does.
    pub awaiting_response_connect: bool,
    /// Set when the endpoint was given as a host name.
    pub re_resolution: Option<ReResolution>,
    /// `min`/`tagged` flow control: its counters (conductor).
    pub flow_control_counters: Option<FlowControlCounters>,
}

/// The counters of a flow control that tracks receivers: how many there
/// are (`fc-receivers`) and one per receiver with the position it reported,
/// kept in step with what the sender publishes
/// ([`NetworkPublication::receivers`]).
pub struct FlowControlCounters {
    /// The `fc-receivers` counter id.
    pub receivers_counter_id: i32,
    /// (receiver id, its `fc-receiver` counter).
    pub per_receiver: Vec<(i64, CounterRef)>,
    /// The receivers the counters show (compared by pointer: the sender
    /// swaps in a new list when anything changed).
    pub shown: std::sync::Arc<Vec<TrackedReceiver>>,
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
            state: PublicationState::Active,
            spies: Vec::new(),
            term_window,
            clean_position: start,
            connected: false,
            pub_pos_written: start,
            pub_limit_written: start,
            awaiting_response_connect: false,
            re_resolution: None,
            flow_control_counters: None,
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
        self.state.is_active()
    }

    /// Where a new spy starts reading: where the spies are, else where the
    /// sender is.
    pub fn spy_join_position(&self) -> i64 {
        reader_position(&self.spies).unwrap_or_else(|| self.publication.snd_pos.get_volatile())
    }

    /// Every conductor duty cycle: connection state and publisher limit.
    pub fn update_publisher_limit(&mut self, now_ns: i64, connection_timeout_ns: i64) -> usize {
        let p = &self.publication;
        // Shared lines are written only when their value changes: written
        // every cycle, each idle stream's cost a store to lines other threads read.
        let producer = p.producer_position();
        if producer != self.pub_pos_written {
            p.pub_pos.set_ordered(producer);
            self.pub_pos_written = producer;
        }
        if !self.state.is_active() {
            p.spy_catch_up.store(NO_CATCH_UP, Ordering::Release);
            return 0;
        }
        let mut work = 0;
        let receivers = p.has_receivers(now_ns, connection_timeout_ns)
            && p.required_receivers.load(Ordering::Acquire);
        let simulated = !receivers
            && self
                .spies
                .iter()
                .any(|s| p.spies_simulate_connection || s.simulates_connection);
        let connected = receivers || simulated;
        if connected != self.connected {
            self.connected = connected;
            meta::set_connected(&p.logs.meta(), connected);
            work += 1;
        }
        let fastest_spy = self.spies.iter().map(|s| s.position.get_volatile()).max();
        let catch_up = fastest_spy.filter(|_| simulated).unwrap_or(NO_CATCH_UP);
        if p.spy_catch_up.load(Ordering::Relaxed) != catch_up {
            p.spy_catch_up.store(catch_up, Ordering::Release);
        }
        let sender = p.snd_pos.get_volatile();
        if connected {
            // The sender, held back by tethered spies. While spies stand in
            // for receivers the sender skips ahead to the fastest spy, so
            // they set the pace; it is still counted, so cleaning never
            // passes a sender that has not caught up yet.
            let consumer = tethered_position(&self.spies).map_or(sender, |s| s.min(sender));
            let proposed = consumer + self.term_window;
            if proposed > self.pub_limit_written {
                // One term behind the slowest reader: the term the writer
                // moves into next is clean, and NAKs within the last term can
                // be served.
                let target = consumer - p.term_length as i64;
                while self.clean_position < target {
                    self.clean_position = logbuffer::clean_to(&p.logs, self.clean_position, target);
                }
                p.pub_limit.set_ordered(proposed);
                self.pub_limit_written = proposed;
                work += 1;
            }
        } else if self.pub_limit_written > sender.max(producer) {
            // Nobody listening: publishers see back pressure / not connected
            // once they reach what has been sent.
            p.pub_limit.set_ordered(sender.max(producer));
            self.pub_limit_written = sender.max(producer);
        }
        work
    }

    /// The last publisher went away: mark end of stream and start draining.
    pub fn close(&mut self, now_ns: i64) {
        let p = &self.publication;
        if self
            .state
            .close(&p.logs, &p.pub_limit, p.producer_position(), now_ns)
        {
            p.status.store(status::DRAINING, Ordering::Release);
        }
    }

    /// Step of the close sequence. Draining lasts while receivers are
    /// connected and data is left to send (a slow receiver still gets
    /// everything, as with Aeron), and while spies have not read to the end
    /// (at most `linger_ns`); lingering lasts `linger_ns`. Returns true when
    /// draining ends: the spies are to be told their image is gone.
    pub fn on_time_event(
        &mut self,
        now_ns: i64,
        linger_ns: i64,
        connection_timeout_ns: i64,
    ) -> bool {
        if let Some(since_ns) = self.state.draining_since() {
            let p = &self.publication;
            let producer = p.producer_position();
            let sent = p.snd_pos.get_volatile() >= producer;
            let abandoned = !p.has_receivers(now_ns, connection_timeout_ns)
                && now_ns > since_ns + connection_timeout_ns.min(linger_ns);
            // Spies (the archive recording a local stream) read to the end,
            // however long that takes, as IPC subscribers do.
            let spied = self
                .spies
                .iter()
                .all(|s| s.position.get_volatile() >= producer);
            if (sent || abandoned) && spied && self.state.finish_draining(now_ns, linger_ns) {
                p.status.store(status::LINGERING, Ordering::Release);
                return true;
            }
            return false;
        }
        self.state.check_linger(now_ns);
        false
    }
}

/// Datagrams gathered into one `sendmmsg` per publication and send turn.
const SEND_BATCH: usize = 32;

/// The sender agent's side of a network publication: the protocol it runs
/// with its receivers. SETUP until a receiver answers, data within the
/// flow-control limit, heartbeats while idle (end of stream once closed and
/// sent), retransmits of what receivers NAK, answers to RTT requests.
pub struct PublicationSender {
    /// The shared part.
    pub publication: std::sync::Arc<NetworkPublication>,
    /// Where its frames go (the publication's, until a re-resolution moves
    /// it; for a response publication, where the last setup-eliciting status
    /// message came from, nowhere before the first).
    destination: Option<SocketAddr>,
    should_send_setup: bool,
    time_of_last_setup_ns: i64,
    time_of_last_send_ns: i64,
    /// An end-of-stream heartbeat went out (the first is sent at once, not a heartbeat interval later).
    eos_sent: bool,
    sender_limit: i64,
    flow_limited: bool,
    retransmit: RetransmitHandler,
    flow_control: Box<dyn FlowControl>,
    /// A receiver asked for the SETUP that goes out next (the flow control hears of it).
    setup_elicited: bool,
    /// The tracked receivers as last published, and when.
    published_receivers: usize,
    time_of_receivers_publish_ns: i64,
    /// Until when send turns may pass this publication by (`i64::MIN`: they
    /// may not), and the sender position then: after a turn with nothing to
    /// send, no SETUP, retransmit or end of stream due, up to its next
    /// heartbeat or the status messages' timeout. A frame written at that
    /// position, an end of stream, spies to catch up with, or any control
    /// frame for it ends the quiet.
    quiet_until_ns: i64,
    quiet_position: i64,
    /// Ranges to resend, gathered before sending (no allocation per NAK).
    resends: Vec<(i32, i32, i32)>,
    /// Where the first receiver counted after the sender skipped ahead to
    /// spies joined: what lies between there and the sender position goes
    /// to it at the next send turn (it cannot ask for it: it hears of
    /// nothing that far past its status messages).
    join_resend_from: Option<i64>,
}

impl PublicationSender {
    /// Starts sending `publication`: a SETUP goes out on the first turn.
    pub fn new(
        publication: std::sync::Arc<NetworkPublication>,
        cfg: &SenderConfig,
        now_ns: i64,
    ) -> PublicationSender {
        let delay = Box::new(StaticDelayGenerator::new(
            cfg.retransmit_delay_ns,
            cfg.retransmit_delay_ns == 0,
        ));
        let mut retransmit = if publication.group {
            // One retransmit per gap however many receivers NAK it; several
            // gaps (of several receivers) at once.
            RetransmitHandler::new(
                delay,
                cfg.retransmit_group_linger_ns,
                publication.max_resend,
            )
        } else {
            RetransmitHandler::new_unicast(delay, cfg.retransmit_linger_ns)
        };
        if let Some(rrwm) = publication.flow_control.retransmit_receiver_window_multiple {
            retransmit = retransmit.with_rrwm(rrwm.min(i32::MAX as u32) as i32);
        }
        let flow_control = publication.flow_control.build();
        publication
            .required_receivers
            .store(flow_control.has_required_receivers(), Ordering::Release);
        PublicationSender {
            destination: publication.destination,
            sender_limit: publication.snd_pos.get(),
            publication,
            should_send_setup: true,
            time_of_last_setup_ns: now_ns - cfg.setup_interval_ns,
            time_of_last_send_ns: now_ns,
            eos_sent: false,
            flow_limited: false,
            retransmit,
            flow_control,
            setup_elicited: false,
            published_receivers: 0,
            time_of_receivers_publish_ns: i64::MIN / 2,
            quiet_until_ns: i64::MIN,
            quiet_position: 0,
            resends: Vec::new(),
            join_resend_from: None,
        }
    }

    /// Session id.
    pub fn session_id(&self) -> i32 {
        self.publication.session_id
    }

    /// Where this publication's own datagrams go (unicast, multicast, a
    /// response publication's requester); an MDC endpoint's destinations
    /// are the sender's to pass in instead.
    pub fn own_destination(&self) -> Option<SocketAddr> {
        self.destination
    }

    /// A SETUP at the next send turn (a manual MDC destination was added),
    /// not a receiver's request: the flow control does not hear of it.
    pub fn send_setup_soon(&mut self, cfg: &SenderConfig, now_ns: i64) {
        self.trigger_setup(cfg, now_ns);
    }

    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        self.publication.stream_id
    }

    /// The publication's host moved: send there from now on, SETUP first.
    pub fn change_destination(&mut self, destination: SocketAddr, cfg: &SenderConfig, now_ns: i64) {
        self.destination = Some(destination);
        self.trigger_setup(cfg, now_ns);
    }

    fn trigger_setup(&mut self, cfg: &SenderConfig, now_ns: i64) {
        self.quiet_until_ns = i64::MIN;
        self.should_send_setup = true;
        self.time_of_last_setup_ns = now_ns - cfg.setup_interval_ns;
    }

    /// A status message for this publication from `src`. `Err` names what
    /// was wrong with it (the sender logs and counts it as invalid); `Ok`
    /// says whether it told anything new (a SETUP wanted, a receiver heard
    /// for the first time or again, a moved limit): one that only repeats the
    /// last is an idle stream's upkeep, not work for the sender's back-off.
    pub fn on_status_message(
        &mut self,
        sm: &StatusMessageFrame,
        src: SocketAddr,
        cfg: &SenderConfig,
        system: &SystemCounters,
        now_ns: i64,
    ) -> Result<bool, String> {
        self.quiet_until_ns = i64::MIN;
        let p = self.publication.clone();
        if sm.is_send_setup() {
            system.increment(SystemCounter::StatusMessagesReceived);
            if p.is_response {
                // The requester's response socket: the only address this
                // publication sends to (behind NAT too: every datagram
                // answers one the requester sent).
                self.destination = Some(src);
            }
            self.flow_control.on_trigger_send_setup(sm, now_ns);
            self.setup_elicited = true;
            self.trigger_setup(cfg, now_ns);
            return Ok(true);
        }
        if let Err(e) = sm.validate_against(p.term_length) {
            system.increment(SystemCounter::StatusMessagesRejected);
            return Err(e.to_string());
        }
        let position = compute_position(
            sm.consumption_term_id,
            sm.consumption_term_offset,
            p.bits,
            p.initial_term_id,
        );
        // Out of the transmission window (half a term either side of the sender): dropped and
        // counted, not logged, as Aeron does. A stale one is normal: padding to a term's end moves
        // the sender past the limit an older status message gave.
        let sender_position = p.snd_pos.get();
        let half = (p.term_length / 2) as i64;
        // A receiver that answered a SETUP while nobody was counted may be up to a term behind:
        // spies that stand in for receivers let the sender skip ahead between the SETUP and the
        // answer. What it needs is still in the log (cleaning stays a term behind the sender, and
        // NAKs are served that far), so it is counted, and the sender waits for it; rejected, it
        // was never counted, the sender skipped on and cleaned where it joined.
        let counted = p.has_receivers(now_ns, cfg.connection_timeout_ns);
        let behind = if counted { half } else { p.term_length as i64 };
        if position > sender_position + half || position < sender_position - behind {
            system.increment(SystemCounter::StatusMessagesRejected);
            return Ok(false);
        }
        if !counted && position < sender_position {
            self.join_resend_from = Some(position);
        }
        system.increment(SystemCounter::StatusMessagesReceived);
        let (limit_before, was_setting_up) = (self.sender_limit, self.should_send_setup);
        let limit =
            self.flow_control
                .on_status_message(sm, src, position, self.sender_limit, now_ns);
        self.set_sender_limit(limit);
        self.should_send_setup = false;
        p.time_of_last_sm_ns.store(now_ns, Ordering::Release);
        self.after_flow_control(now_ns);
        Ok(!counted || was_setting_up || self.sender_limit != limit_before)
    }

    /// A receiver rejected the stream (an error frame): the flow control
    /// stops counting it.
    pub fn on_error_frame(&mut self, receiver_id: i64, group_tag: Option<i64>, now_ns: i64) {
        self.quiet_until_ns = i64::MIN;
        self.flow_control.on_error(receiver_id, group_tag);
        self.after_flow_control(now_ns);
    }

    /// Publishes what the flow control decided for the conductor: whether
    /// its required receivers are there, and the receivers it tracks (when
    /// one came or went, else at most every
    /// [`RECEIVERS_PUBLISH_INTERVAL_NS`]).
    fn after_flow_control(&mut self, now_ns: i64) {
        let p = &self.publication;
        let required = self.flow_control.has_required_receivers();
        if p.required_receivers.load(Ordering::Relaxed) != required {
            p.required_receivers.store(required, Ordering::Release);
        }
        let receivers = self.flow_control.receivers();
        if receivers.len() != self.published_receivers
            || (!receivers.is_empty()
                && now_ns - self.time_of_receivers_publish_ns >= RECEIVERS_PUBLISH_INTERVAL_NS)
        {
            p.receivers.store(std::sync::Arc::new(receivers.to_vec()));
            self.published_receivers = receivers.len();
            self.time_of_receivers_publish_ns = now_ns;
        }
    }

    fn set_sender_limit(&mut self, limit: i64) {
        if limit != self.sender_limit {
            self.sender_limit = limit;
            self.publication.snd_lmt.set_ordered(limit);
        }
    }

    /// A NAK for this publication: resends the range now or after the
    /// retransmit delay. `Err` names what was wrong with it.
    pub fn on_nak(
        &mut self,
        transport: &mut dyn Transport,
        targets: &[SocketAddr],
        nak: &NakFrame,
        errors: &ErrorReporter,
        now_ns: i64,
    ) -> Result<(), String> {
        self.quiet_until_ns = i64::MIN;
        let p = self.publication.clone();
        nak.validate_against(p.term_length)
            .map_err(|e| e.to_string())?;
        errors
            .system()
            .increment(SystemCounter::NakMessagesReceived);
        let position = compute_position(nak.term_id, nak.term_offset, p.bits, p.initial_term_id);
        let sender_position = p.snd_pos.get();
        if position >= sender_position || position < sender_position - p.term_length as i64 {
            // Not sent yet, or older than the log keeps: nothing to resend.
            return Ok(());
        }
        let mut resends = std::mem::take(&mut self.resends);
        resends.clear();
        let outcome = self.retransmit.on_nak(
            nak.term_id,
            nak.term_offset,
            nak.length,
            p.term_length as i32,
            now_ns,
            &mut |t, o, l| resends.push((t, o, l)),
        );
        if outcome == NakOutcome::Overflow {
            errors.system().increment(SystemCounter::RetransmitOverflow);
        }
        for &(t, o, l) in &resends {
            self.resend(transport, targets, t, o, l, errors);
        }
        self.resends = resends;
        Ok(())
    }

    /// The reply to a receiver's RTT measurement request from `src`, and
    /// where it goes: back to `src`, or for a group to where the data goes
    /// (a multicast receiver's socket listens on the data group only; the
    /// receiver id in the reply tells the asker).
    pub fn rttm_reply(&self, request: &RttmFrame, src: SocketAddr) -> (RttmFrame, SocketAddr) {
        let reply = RttmFrame {
            flags: 0,
            reception_delta_ns: 0,
            ..*request
        };
        let to = match self.destination {
            Some(d) if self.publication.group => d,
            _ => src,
        };
        (reply, to)
    }

    /// Resends what lies between positions `from` and `to`, a term at a
    /// time; returns the bytes resent.
    fn resend_range(
        &mut self,
        transport: &mut dyn Transport,
        targets: &[SocketAddr],
        from: i64,
        to: i64,
        errors: &ErrorReporter,
    ) -> usize {
        let p = self.publication.clone();
        let term_length = p.term_length as i64;
        let mut at = from;
        let mut resent = 0;
        while at < to {
            let term_end = (at / term_length + 1) * term_length;
            let end = to.min(term_end);
            resent += self.resend(
                transport,
                targets,
                compute_term_id_from_position(at, p.bits, p.initial_term_id),
                compute_term_offset_from_position(at, p.bits),
                (end - at) as i32,
                errors,
            );
            at = end;
        }
        resent
    }

    /// Resends whole frames from (`term_id`, `term_offset`) for `length`
    /// bytes to every target; returns the bytes resent (to each).
    fn resend(
        &mut self,
        transport: &mut dyn Transport,
        targets: &[SocketAddr],
        term_id: i32,
        term_offset: i32,
        length: i32,
        errors: &ErrorReporter,
    ) -> usize {
        let p = &self.publication;
        if targets.is_empty() {
            return 0;
        }
        let position = compute_position(term_id, term_offset, p.bits, p.initial_term_id);
        let sender_position = p.snd_pos.get();
        if position >= sender_position || position < sender_position - p.term_length as i64 {
            return 0;
        }
        let end = (position + length as i64).min(sender_position);
        let term = p.logs.term(index_by_term(p.initial_term_id, term_id));
        let mut offset = term_offset as usize;
        let end_offset = (term_offset as i64 + (end - position)) as usize;
        let system = errors.system();
        let mut resent = 0;
        while offset < end_offset {
            let a = scan_for_availability(&term, offset, p.mtu.min(end_offset - offset).max(32));
            if a.send_length == 0 {
                break;
            }
            let mut short = false;
            for &destination in targets {
                match transport.send_to(term.slice(offset, a.send_length), destination) {
                    Ok(0) => {
                        system.increment(SystemCounter::ShortSends);
                        short = true;
                    }
                    Ok(n) => system.add(SystemCounter::BytesSent, n as i64),
                    Err(e) => {
                        errors.record(&format!("retransmit to {destination} failed: {e}"));
                        short = true;
                    }
                }
            }
            if short {
                break;
            }
            system.increment(SystemCounter::RetransmitsSent);
            system.add(SystemCounter::RetransmittedBytes, a.send_length as i64);
            resent += a.send_length;
            offset += a.send_length + a.padding;
        }
        resent
    }

    /// One send turn: SETUP, data, heartbeat, due retransmits. Returns the
    /// bytes sent (at least 1 if the sender position moved) plus the
    /// retransmits done.
    pub fn send(
        &mut self,
        transport: &mut dyn Transport,
        targets: &[SocketAddr],
        cfg: &SenderConfig,
        errors: &ErrorReporter,
        heartbeats: &mut FrameBatch,
        now_ns: i64,
    ) -> usize {
        if now_ns < self.quiet_until_ns && self.still_quiet() {
            return 0;
        }
        self.quiet_until_ns = i64::MIN;
        let p = self.publication.clone();
        if targets.is_empty() {
            // A response publication nobody has asked for a SETUP yet, an
            // MDC endpoint without a destination.
            return 0;
        }
        let system = errors.system();
        let mut sender_position = p.snd_pos.get();
        let catch_up = p.spy_catch_up.load(Ordering::Acquire);
        if catch_up > sender_position && !p.has_receivers(now_ns, cfg.connection_timeout_ns) {
            // Spies stand in for receivers: nobody is there to send what
            // they have read to.
            sender_position = catch_up;
            p.snd_pos.set_ordered(catch_up);
            self.set_sender_limit(self.sender_limit.max(catch_up));
        }
        let is_eos = p.status() != status::ACTIVE;
        let limit = self
            .flow_control
            .on_idle(now_ns, self.sender_limit, sender_position, is_eos);
        self.set_sender_limit(limit);
        self.after_flow_control(now_ns);

        // SETUP until a receiver answers (or when one asks for it).
        if !self.should_send_setup && !is_eos && !p.has_receivers(now_ns, cfg.connection_timeout_ns)
        {
            self.should_send_setup = true;
        }
        if self.should_send_setup
            && !is_eos
            && now_ns - self.time_of_last_setup_ns >= cfg.setup_interval_ns
        {
            if std::mem::take(&mut self.setup_elicited) {
                self.flow_control.on_setup(self.sender_limit, now_ns);
            }
            let mut flags = if !p.is_response && p.response_correlation_id != -1 {
                SetupFrame::SEND_RESPONSE_SETUP_FLAG
            } else {
                0
            };
            if p.group {
                flags |= SetupFrame::GROUP_FLAG;
            }
            let setup = SetupFrame {
                flags,
                term_offset: compute_term_offset_from_position(sender_position, p.bits),
                session_id: p.session_id,
                stream_id: p.stream_id,
                initial_term_id: p.initial_term_id,
                active_term_id: compute_term_id_from_position(
                    sender_position,
                    p.bits,
                    p.initial_term_id,
                ),
                term_length: p.term_length as i32,
                mtu: p.mtu as i32,
                ttl: p.ttl,
            };
            let bytes = setup.to_bytes();
            for &destination in targets {
                send_control_frame(transport, &bytes, destination, errors);
            }
            self.time_of_last_setup_ns = now_ns;
        }

        let mut bytes_sent = self.send_data(transport, errors, targets, sender_position, now_ns);
        if let Some(from) = self.join_resend_from.take() {
            bytes_sent += self.resend_range(transport, targets, from, p.snd_pos.get(), errors);
        }

        // Heartbeat while idle; end of stream once everything is sent, the first at once: a
        // linger shorter than the heartbeat interval would otherwise remove the publication
        // before its receivers heard the end (they would wait out the image liveness timeout).
        let position = p.snd_pos.get();
        let at_eos = p.signal_eos && is_eos && position >= p.end_of_stream_position();
        if bytes_sent == 0
            && ((at_eos && !self.eos_sent)
                || now_ns - self.time_of_last_send_ns >= cfg.heartbeat_interval_ns)
        {
            let mut h = DataHeader::heartbeat(
                p.session_id,
                p.stream_id,
                compute_term_id_from_position(position, p.bits, p.initial_term_id),
                compute_term_offset_from_position(position, p.bits),
            );
            h.flags = BEGIN_FLAG | END_FLAG;
            if at_eos {
                h.flags |= EOS_FLAG;
                self.eos_sent = true;
            }
            let bytes = h.to_bytes();
            for &destination in targets {
                heartbeats.push(0, destination, &bytes);
            }
            system.increment(SystemCounter::HeartbeatsSent);
            self.time_of_last_send_ns = now_ns;
        }

        // Delayed retransmits that are due.
        let mut resends = std::mem::take(&mut self.resends);
        resends.clear();
        let w = self
            .retransmit
            .process_timeouts(now_ns, &mut |t, o, l| resends.push((t, o, l)));
        for &(t, o, l) in &resends {
            self.resend(transport, targets, t, o, l, errors);
        }
        self.resends = resends;
        bytes_sent += w;
        if bytes_sent == 0
            && !self.should_send_setup
            && !is_eos
            && self.retransmit.active_count() == 0
            && self.join_resend_from.is_none()
            && p.spy_catch_up.load(Ordering::Relaxed) == NO_CATCH_UP
            && self.flow_control.is_still_when_idle()
        {
            // Idle: the next turn with anything to do is the heartbeat's, or
            // the one that finds the receivers gone (SETUP again), unless a
            // frame or a control frame comes first.
            let last_sm = p.time_of_last_sm_ns.load(Ordering::Relaxed);
            self.quiet_until_ns = (self.time_of_last_send_ns + cfg.heartbeat_interval_ns)
                .min(last_sm.saturating_add(cfg.connection_timeout_ns + 1));
            self.quiet_position = p.snd_pos.get();
        }
        bytes_sent
    }

    /// While quiet: nothing written at the sender position, the stream not
    /// ending, no spies to catch up with.
    #[inline]
    fn still_quiet(&self) -> bool {
        let p = &*self.publication;
        let index = index_by_position(self.quiet_position, p.bits);
        let offset = (self.quiet_position & (p.term_length as i64 - 1)) as usize;
        p.logs.term(index).get_i32_volatile(offset) == 0
            && p.status() == status::ACTIVE
            && p.spy_catch_up.load(Ordering::Relaxed) == NO_CATCH_UP
    }

    /// Whole frames up to the MTU per datagram, several datagrams per
    /// system call, within the sender limit, to every target: the sender
    /// position moves by what went to all of them (the rest goes again next
    /// turn; a receiver that has it drops the copy). Returns the bytes sent
    /// (at least 1 if the sender position moved).
    fn send_data(
        &mut self,
        transport: &mut dyn Transport,
        errors: &ErrorReporter,
        targets: &[SocketAddr],
        sender_position: i64,
        now_ns: i64,
    ) -> usize {
        let p = &self.publication;
        let system = errors.system();
        let limit = self.sender_limit;
        let terms = p.logs.terms();
        let mut position = sender_position;
        let mut slices: [&[u8]; SEND_BATCH] = [&[]; SEND_BATCH];
        // Stream bytes up to the end of each datagram (its padding included).
        let mut ends = [0i64; SEND_BATCH];
        let mut count = 0;
        while count < SEND_BATCH && position < limit {
            let index = index_by_position(position, p.bits);
            let offset = (position & (p.term_length as i64 - 1)) as usize;
            let window = (limit - position) as usize;
            let a = scan_for_availability(&terms[index], offset, p.mtu.min(window));
            if a.send_length == 0 {
                break;
            }
            slices[count] = terms[index].slice(offset, a.send_length);
            position += (a.send_length + a.padding) as i64;
            ends[count] = position - sender_position;
            count += 1;
        }
        if position >= limit && !self.flow_limited && p.producer_position() > position {
            self.flow_limited = true;
            system.increment(SystemCounter::SenderFlowControlLimits);
        } else if position < limit {
            self.flow_limited = false;
        }
        if count == 0 {
            return 0;
        }
        let slices = &slices[..count];
        let mut sent = count;
        for &destination in targets {
            let to_this = match transport.send_batch(&slices[..sent], destination) {
                Ok(n) => n,
                Err(e) => {
                    // Treated as lost on the way: receivers NAK what they miss.
                    errors.record(&format!("send to {destination} failed: {e}"));
                    sent
                }
            };
            sent = sent.min(to_this);
        }
        if sent < count {
            system.increment(SystemCounter::ShortSends);
        }
        let mut bytes_sent: usize = slices[..sent].iter().map(|s| s.len()).sum();
        system.add(SystemCounter::BytesSent, bytes_sent as i64);
        if sent > 0 {
            p.snd_pos.set_ordered(sender_position + ends[sent - 1]);
            self.time_of_last_send_ns = now_ns;
            bytes_sent = bytes_sent.max(1);
        }
        bytes_sent
    }
}
