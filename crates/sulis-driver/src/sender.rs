//! The sender agent: puts network publications on the wire and serves their
//! receivers' control frames.
//!
//! Per publication and duty cycle: a SETUP every setup interval until a
//! status message arrives; then the committed frames between the sender
//! position and the sender limit, several whole frames per datagram up to
//! the MTU and several datagrams per `sendmmsg`; a heartbeat (zero-length
//! DATA, with EOS once the stream ended) when nothing was sent for a
//! heartbeat interval; delayed retransmits that fell due.
//!
//! Control frames arrive on each endpoint's socket: status messages move the
//! sender limit (unicast flow control: the highest position + window any
//! receiver reported), NAKs become retransmits through the
//! [`RetransmitHandler`], RTT requests are answered, ERR frames logged.
//! Every frame is validated first; a bad one is counted, logged with its
//! source and dropped.

use crate::agent::{Agent, ErrorReporter, NanoClock};
use crate::loss::{LossGenerator, RetransmitHandler, StaticDelayGenerator};
use crate::media::udp_transport::{RecvBatch, UdpTransport};
use crate::network_publication::{status, NetworkPublication};
use crate::system_counters::SystemCounter;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use sulis_concurrent::logbuffer::term_scanner::scan_for_availability;
use sulis_protocol::frame::{decode_datagram, Frame};
use sulis_protocol::frame::{
    DataHeader, FrameHeader, NakFrame, RttmFrame, SetupFrame, StatusMessageFrame, BEGIN_FLAG,
    END_FLAG, EOS_FLAG, HDR_TYPE_ERR, HDR_TYPE_NAK, HDR_TYPE_RES, HDR_TYPE_RTTM, HDR_TYPE_SM,
};
use sulis_protocol::log_buffer_descriptor::*;

/// Datagrams gathered into one `sendmmsg` per publication and duty cycle.
const SEND_BATCH: usize = 32;
/// Control datagrams read per endpoint and poll.
const CONTROL_BATCH: usize = 16;
/// Control datagrams are small; anything longer is not a valid control frame.
const CONTROL_SLOT: usize = 2048;

/// What the conductor tells the sender.
pub enum SenderCommand {
    /// A new send endpoint (socket).
    AddEndpoint {
        /// Conductor's id for it.
        id: u64,
        /// The bound socket.
        transport: UdpTransport,
    },
    /// Close an endpoint (no publication uses it any more).
    RemoveEndpoint {
        /// Its id.
        id: u64,
    },
    /// Start sending a publication.
    AddPublication {
        /// Endpoint to send on.
        endpoint_id: u64,
        /// The publication.
        publication: Arc<NetworkPublication>,
    },
    /// Stop sending a publication.
    RemovePublication {
        /// Its registration id.
        registration_id: i64,
    },
    /// The publication's endpoint host name now resolves elsewhere: send
    /// there from now on, starting with a SETUP.
    ChangeDestination {
        /// The publication's registration id.
        registration_id: i64,
        /// The new address.
        destination: SocketAddr,
    },
}

/// Sender timing and loss settings.
#[derive(Clone, Debug)]
pub struct SenderConfig {
    /// SETUP period while no receiver answered.
    pub setup_interval_ns: i64,
    /// Heartbeat period while idle.
    pub heartbeat_interval_ns: i64,
    /// Receivers silent this long are gone (SETUP resumes).
    pub connection_timeout_ns: i64,
    /// Delay before resending a NAKed range (0 = at once).
    pub retransmit_delay_ns: i64,
    /// Time a resent range ignores further NAKs.
    pub retransmit_linger_ns: i64,
    /// Loss on data frames sent.
    pub data_loss: LossGenerator,
    /// Loss on control frames sent (SETUP, RTT replies).
    pub control_send_loss: LossGenerator,
    /// Loss on control frames received (SM, NAK, RTTM).
    pub control_receive_loss: LossGenerator,
    /// Send runs of full datagrams as one message for the kernel to split (UDP GSO).
    pub gso: bool,
}

struct SenderPublication {
    p: Arc<NetworkPublication>,
    /// Where its frames go (the publication's, until a re-resolution moves it).
    destination: SocketAddr,
    should_send_setup: bool,
    time_of_last_setup_ns: i64,
    time_of_last_send_ns: i64,
    sender_limit: i64,
    flow_limited: bool,
    retransmit: RetransmitHandler,
}

struct SendEndpoint {
    id: u64,
    transport: UdpTransport,
    publications: Vec<SenderPublication>,
}

/// The sender agent.
pub struct Sender {
    commands: mpsc::Receiver<SenderCommand>,
    endpoints: Vec<SendEndpoint>,
    clock: NanoClock,
    cfg: SenderConfig,
    errors: ErrorReporter,
    /// Control receive buffers; taken out (not copied) while their datagrams are handled.
    recv: Option<RecvBatch>,
    resends: Vec<(i32, i32, i32)>,
    duty_cycles: usize,
}

impl Sender {
    /// A sender reading commands from `commands`.
    pub fn new(
        commands: mpsc::Receiver<SenderCommand>,
        clock: NanoClock,
        cfg: SenderConfig,
        errors: ErrorReporter,
    ) -> Self {
        Sender {
            commands,
            endpoints: Vec::new(),
            clock,
            cfg,
            errors,
            recv: Some(RecvBatch::new(CONTROL_BATCH, CONTROL_SLOT)),
            resends: Vec::new(),
            duty_cycles: 0,
        }
    }

    fn on_command(&mut self, cmd: SenderCommand, now_ns: i64) {
        match cmd {
            SenderCommand::AddEndpoint { id, transport } => {
                transport.set_gso(self.cfg.gso);
                self.endpoints.push(SendEndpoint {
                    id,
                    transport,
                    publications: Vec::new(),
                })
            }
            SenderCommand::RemoveEndpoint { id } => self.endpoints.retain(|e| e.id != id),
            SenderCommand::AddPublication {
                endpoint_id,
                publication,
            } => {
                let Some(e) = self.endpoints.iter_mut().find(|e| e.id == endpoint_id) else {
                    return;
                };
                let limit = publication.snd_pos.get();
                let retransmit = RetransmitHandler::new_unicast(
                    Box::new(StaticDelayGenerator::new(
                        self.cfg.retransmit_delay_ns,
                        self.cfg.retransmit_delay_ns == 0,
                    )),
                    self.cfg.retransmit_linger_ns,
                );
                e.publications.push(SenderPublication {
                    destination: publication.destination,
                    p: publication,
                    should_send_setup: true,
                    time_of_last_setup_ns: now_ns - self.cfg.setup_interval_ns,
                    time_of_last_send_ns: now_ns,
                    sender_limit: limit,
                    flow_limited: false,
                    retransmit,
                });
            }
            SenderCommand::RemovePublication { registration_id } => {
                for e in self.endpoints.iter_mut() {
                    e.publications
                        .retain(|s| s.p.registration_id != registration_id);
                }
            }
            SenderCommand::ChangeDestination {
                registration_id,
                destination,
            } => {
                let moved = self
                    .endpoints
                    .iter_mut()
                    .flat_map(|e| e.publications.iter_mut())
                    .find(|s| s.p.registration_id == registration_id);
                if let Some(sp) = moved {
                    sp.destination = destination;
                    sp.should_send_setup = true;
                    sp.time_of_last_setup_ns = now_ns - self.cfg.setup_interval_ns;
                }
            }
        }
    }

    fn poll_control(&mut self, now_ns: i64) -> usize {
        let mut work = 0;
        for ei in 0..self.endpoints.len() {
            let mut batch = self
                .recv
                .take()
                .expect("receive buffers are put back after use");
            let n = match self.endpoints[ei].transport.recv_batch(&mut batch) {
                Ok(n) => n,
                Err(e) => {
                    self.errors.record(&format!(
                        "send endpoint {}: receive failed: {e}",
                        self.endpoints[ei].transport.local_addr()
                    ));
                    0
                }
            };
            for i in 0..n {
                let (bytes, src) = batch.get(i);
                let Some(src) = src else { continue };
                self.errors
                    .system()
                    .add(SystemCounter::BytesReceived, bytes.len() as i64);
                if self.cfg.control_receive_loss.is_on()
                    && self.cfg.control_receive_loss.should_drop()
                {
                    continue;
                }
                self.on_control(ei, bytes, src, now_ns);
                work += 1;
            }
            self.recv = Some(batch);
        }
        work
    }

    fn invalid(&self, ep: usize, src: SocketAddr, what: &str) {
        self.errors
            .system()
            .increment(SystemCounter::InvalidPackets);
        self.errors.record(&format!(
            "invalid datagram from {src} on send endpoint {}: {what}",
            self.endpoints[ep].transport.local_addr()
        ));
    }

    fn on_control(&mut self, ep: usize, bytes: &[u8], src: SocketAddr, now_ns: i64) {
        let header = match FrameHeader::decode(bytes) {
            Ok(h) => h,
            Err(e) => return self.invalid(ep, src, &e.to_string()),
        };
        if !matches!(
            header.frame_type,
            HDR_TYPE_SM | HDR_TYPE_NAK | HDR_TYPE_RTTM | HDR_TYPE_ERR | HDR_TYPE_RES
        ) {
            return self.invalid(
                ep,
                src,
                &format!(
                    "frame type {:#x} is not a control frame a sender accepts",
                    header.frame_type
                ),
            );
        }
        let frame = match decode_datagram(bytes) {
            Ok(f) => f,
            Err(e) => return self.invalid(ep, src, &e.to_string()),
        };
        match frame {
            Frame::Status(sm) => self.on_status_message(ep, &sm, src, now_ns),
            Frame::Nak(nak) => self.on_nak(ep, &nak, src, now_ns),
            Frame::Rttm(r)
                if r.is_reply_requested() && self.find(ep, r.session_id, r.stream_id).is_some() =>
            {
                let reply = RttmFrame {
                    flags: 0,
                    reception_delta_ns: 0,
                    ..r
                };
                self.send_control(ep, &reply.to_bytes(), src);
            }
            Frame::Error(err) => {
                self.errors
                    .system()
                    .increment(SystemCounter::ErrorFramesReceived);
                self.errors.record(&format!(
                    "error frame from {src}: session {} stream {} receiver {} code {}: {}",
                    err.session_id,
                    err.stream_id,
                    err.receiver_id,
                    err.error_code,
                    err.error_message
                ));
            }
            _ => {}
        }
    }

    fn find(&self, ep: usize, session_id: i32, stream_id: i32) -> Option<usize> {
        self.endpoints[ep]
            .publications
            .iter()
            .position(|s| s.p.session_id == session_id && s.p.stream_id == stream_id)
    }

    fn on_status_message(
        &mut self,
        ep: usize,
        sm: &StatusMessageFrame,
        src: SocketAddr,
        now_ns: i64,
    ) {
        let Some(pi) = self.find(ep, sm.session_id, sm.stream_id) else {
            return;
        };
        let system = *self.errors.system();
        let sp = &mut self.endpoints[ep].publications[pi];
        let p = sp.p.clone();
        if sm.is_send_setup() {
            system.increment(SystemCounter::StatusMessagesReceived);
            sp.should_send_setup = true;
            sp.time_of_last_setup_ns = now_ns - self.cfg.setup_interval_ns;
            return;
        }
        if let Err(e) = sm.validate_against(p.term_length) {
            system.increment(SystemCounter::StatusMessagesRejected);
            return self.invalid(ep, src, &e.to_string());
        }
        let position = compute_position(
            sm.consumption_term_id,
            sm.consumption_term_offset,
            p.bits,
            p.initial_term_id,
        );
        let sender_position = p.snd_pos.get();
        let half = (p.term_length / 2) as i64;
        if (position - sender_position).abs() > half {
            system.increment(SystemCounter::StatusMessagesRejected);
            return self.invalid(
                ep,
                src,
                &format!(
                    "status message for session {} stream {}: position {position} is not within term_length/2 of the sender position {sender_position}",
                    sm.session_id, sm.stream_id
                ),
            );
        }
        system.increment(SystemCounter::StatusMessagesReceived);
        let proposed = position + sm.receiver_window as i64;
        if proposed > sp.sender_limit {
            sp.sender_limit = proposed;
            p.snd_lmt.set_ordered(proposed);
        }
        sp.should_send_setup = false;
        p.time_of_last_sm_ns.store(now_ns, Ordering::Release);
    }

    fn on_nak(&mut self, ep: usize, nak: &NakFrame, src: SocketAddr, now_ns: i64) {
        let Some(pi) = self.find(ep, nak.session_id, nak.stream_id) else {
            return;
        };
        let p = self.endpoints[ep].publications[pi].p.clone();
        if let Err(e) = nak.validate_against(p.term_length) {
            return self.invalid(ep, src, &e.to_string());
        }
        self.errors
            .system()
            .increment(SystemCounter::NakMessagesReceived);
        let position = compute_position(nak.term_id, nak.term_offset, p.bits, p.initial_term_id);
        let sender_position = p.snd_pos.get();
        if position >= sender_position || position < sender_position - p.term_length as i64 {
            // Not sent yet, or older than the log keeps: nothing to resend.
            return;
        }
        self.resends.clear();
        let resends = &mut self.resends;
        let sp = &mut self.endpoints[ep].publications[pi];
        let outcome = sp.retransmit.on_nak(
            nak.term_id,
            nak.term_offset,
            nak.length,
            p.term_length as i32,
            now_ns,
            &mut |t, o, l| resends.push((t, o, l)),
        );
        if outcome == crate::loss::NakOutcome::Overflow {
            self.errors
                .system()
                .increment(SystemCounter::RetransmitOverflow);
        }
        let resends = std::mem::take(&mut self.resends);
        for &(t, o, l) in &resends {
            self.resend(ep, pi, t, o, l);
        }
        self.resends = resends;
    }

    /// Resends whole frames from (`term_id`, `term_offset`) for `length` bytes.
    fn resend(&mut self, ep: usize, pi: usize, term_id: i32, term_offset: i32, length: i32) {
        let p = self.endpoints[ep].publications[pi].p.clone();
        let destination = self.endpoints[ep].publications[pi].destination;
        let position = compute_position(term_id, term_offset, p.bits, p.initial_term_id);
        let sender_position = p.snd_pos.get();
        if position >= sender_position || position < sender_position - p.term_length as i64 {
            return;
        }
        let end = (position + length as i64).min(sender_position);
        let term = p.logs.term(index_by_term(p.initial_term_id, term_id));
        let mut offset = term_offset as usize;
        let end_offset = (term_offset as i64 + (end - position)) as usize;
        let system = *self.errors.system();
        while offset < end_offset {
            let a = scan_for_availability(&term, offset, p.mtu.min(end_offset - offset).max(32));
            if a.send_length == 0 {
                break;
            }
            let datagram = term.slice(offset, a.send_length);
            if !(self.cfg.data_loss.is_on() && self.cfg.data_loss.should_drop()) {
                match self.endpoints[ep].transport.send_to(datagram, destination) {
                    Ok(0) => {
                        system.increment(SystemCounter::ShortSends);
                        break;
                    }
                    Ok(n) => {
                        system.add(SystemCounter::BytesSent, n as i64);
                    }
                    Err(e) => {
                        self.errors
                            .record(&format!("retransmit to {} failed: {e}", destination));
                        break;
                    }
                }
            }
            system.increment(SystemCounter::RetransmitsSent);
            system.add(SystemCounter::RetransmittedBytes, a.send_length as i64);
            offset += a.send_length + a.padding;
        }
    }

    fn send_control(&mut self, ep: usize, bytes: &[u8], to: SocketAddr) {
        if self.cfg.control_send_loss.is_on() && self.cfg.control_send_loss.should_drop() {
            return;
        }
        match self.endpoints[ep].transport.send_to(bytes, to) {
            Ok(n) => {
                self.errors.system().add(SystemCounter::BytesSent, n as i64);
            }
            Err(e) => self
                .errors
                .record(&format!("send of a control frame to {to} failed: {e}")),
        }
    }

    /// One publication's turn: setup, data, heartbeat, due retransmits.
    fn send_publication(&mut self, ep: usize, pi: usize, now_ns: i64) -> usize {
        let p = self.endpoints[ep].publications[pi].p.clone();
        let destination = self.endpoints[ep].publications[pi].destination;
        let system = *self.errors.system();
        let sender_position = p.snd_pos.get();
        let term_offset = compute_term_offset_from_position(sender_position, p.bits);
        let active_term_id =
            compute_term_id_from_position(sender_position, p.bits, p.initial_term_id);

        // SETUP until a receiver answers (or when one asks for it).
        {
            let sp = &mut self.endpoints[ep].publications[pi];
            if !sp.should_send_setup
                && p.status() == status::ACTIVE
                && !p.has_receivers(now_ns, self.cfg.connection_timeout_ns)
            {
                sp.should_send_setup = true;
            }
        }
        let sp = &self.endpoints[ep].publications[pi];
        if sp.should_send_setup
            && p.status() == status::ACTIVE
            && now_ns - sp.time_of_last_setup_ns >= self.cfg.setup_interval_ns
        {
            let setup = SetupFrame {
                flags: 0,
                term_offset,
                session_id: p.session_id,
                stream_id: p.stream_id,
                initial_term_id: p.initial_term_id,
                active_term_id,
                term_length: p.term_length as i32,
                mtu: p.mtu as i32,
                ttl: p.ttl,
            };
            self.send_control(ep, &setup.to_bytes(), destination);
            self.endpoints[ep].publications[pi].time_of_last_setup_ns = now_ns;
        }

        // Data: whole frames up to the MTU per datagram, within the sender limit.
        let sp = &mut self.endpoints[ep].publications[pi];
        let mut position = sender_position;
        let limit = sp.sender_limit;
        let terms = p.logs.terms();
        let mut datagrams: [(usize, usize, usize, usize); SEND_BATCH] = [(0, 0, 0, 0); SEND_BATCH];
        let mut count = 0;
        while count < SEND_BATCH && position < limit {
            let index = index_by_position(position, p.bits);
            let offset = (position & (p.term_length as i64 - 1)) as usize;
            let window = (limit - position) as usize;
            let a = scan_for_availability(&terms[index], offset, p.mtu.min(window));
            if a.send_length == 0 {
                break;
            }
            datagrams[count] = (index, offset, a.send_length, a.padding);
            count += 1;
            position += (a.send_length + a.padding) as i64;
        }
        if position >= limit && !sp.flow_limited && p.producer_position() > position {
            sp.flow_limited = true;
            system.increment(SystemCounter::SenderFlowControlLimits);
        } else if position < limit {
            sp.flow_limited = false;
        }
        let mut bytes_sent = 0usize;
        if count > 0 {
            // Datagrams the loss generator drops count as sent.
            let mut slices: [&[u8]; SEND_BATCH] = [&[]; SEND_BATCH];
            let mut kept = 0;
            let mut ends = [0i64; SEND_BATCH];
            let mut cumulative = 0i64;
            for &(index, offset, len, pad) in &datagrams[..count] {
                cumulative += (len + pad) as i64;
                if self.cfg.data_loss.is_on() && self.cfg.data_loss.should_drop() {
                    continue;
                }
                ends[kept] = cumulative;
                slices[kept] = terms[index].slice(offset, len);
                kept += 1;
            }
            let slices = &slices[..kept];
            let sent = if slices.is_empty() {
                0
            } else {
                match self.endpoints[ep].transport.send_batch(slices, destination) {
                    Ok(n) => n,
                    Err(e) => {
                        // Treated as lost on the way: receivers NAK what they miss.
                        self.errors
                            .record(&format!("send to {} failed: {e}", destination));
                        slices.len()
                    }
                }
            };
            let moved = if sent == slices.len() {
                cumulative
            } else {
                system.increment(SystemCounter::ShortSends);
                if sent == 0 {
                    0
                } else {
                    ends[sent - 1]
                }
            };
            bytes_sent = slices[..sent].iter().map(|s| s.len()).sum();
            system.add(SystemCounter::BytesSent, bytes_sent as i64);
            if moved > 0 {
                p.snd_pos.set_ordered(sender_position + moved);
                self.endpoints[ep].publications[pi].time_of_last_send_ns = now_ns;
                bytes_sent = bytes_sent.max(1);
            }
        }

        // Heartbeat while idle; end of stream once everything is sent.
        let sp = &self.endpoints[ep].publications[pi];
        if bytes_sent == 0 && now_ns - sp.time_of_last_send_ns >= self.cfg.heartbeat_interval_ns {
            let position = p.snd_pos.get();
            let mut h = DataHeader::heartbeat(
                p.session_id,
                p.stream_id,
                compute_term_id_from_position(position, p.bits, p.initial_term_id),
                compute_term_offset_from_position(position, p.bits),
            );
            h.flags = BEGIN_FLAG | END_FLAG;
            if p.signal_eos
                && p.status() != status::ACTIVE
                && position >= p.end_of_stream_position()
            {
                h.flags |= EOS_FLAG;
            }
            let bytes = h.to_bytes();
            if !(self.cfg.data_loss.is_on() && self.cfg.data_loss.should_drop()) {
                match self.endpoints[ep].transport.send_to(&bytes, destination) {
                    Ok(n) => {
                        system.add(SystemCounter::BytesSent, n as i64);
                    }
                    Err(e) => self
                        .errors
                        .record(&format!("heartbeat to {} failed: {e}", destination)),
                }
            }
            system.increment(SystemCounter::HeartbeatsSent);
            self.endpoints[ep].publications[pi].time_of_last_send_ns = now_ns;
        }

        // Delayed retransmits that are due.
        self.resends.clear();
        let resends = &mut self.resends;
        let w = self.endpoints[ep].publications[pi]
            .retransmit
            .process_timeouts(now_ns, &mut |t, o, l| resends.push((t, o, l)));
        let resends = std::mem::take(&mut self.resends);
        for &(t, o, l) in &resends {
            self.resend(ep, pi, t, o, l);
        }
        self.resends = resends;
        bytes_sent + w
    }
}

impl Agent for Sender {
    fn do_work(&mut self) -> usize {
        let now_ns = self.clock.now_ns();
        let mut work = 0;
        while let Ok(cmd) = self.commands.try_recv() {
            self.on_command(cmd, now_ns);
            work += 1;
        }
        let mut bytes_sent = 0;
        for ep in 0..self.endpoints.len() {
            for pi in 0..self.endpoints[ep].publications.len() {
                bytes_sent += self.send_publication(ep, pi, now_ns);
            }
        }
        self.duty_cycles += 1;
        // Control frames are read when idle, and every other cycle while busy.
        if bytes_sent == 0 || self.duty_cycles.is_multiple_of(2) {
            work += self.poll_control(now_ns);
        }
        work + bytes_sent
    }
}
