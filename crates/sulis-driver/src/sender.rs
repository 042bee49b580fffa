//! The sender agent: runs the network publications' send turns and hands
//! their receivers' control frames to them.
//!
//! The protocol of one publication (SETUP until a receiver answers, data
//! within the flow-control limit, heartbeats, retransmits, RTT replies)
//! lives in [`PublicationSender`]; this agent owns the send endpoints'
//! transports, applies the conductor's commands, gives every publication a
//! send turn per duty cycle and reads control frames: each is validated
//! first (a bad one is counted, logged with its source and dropped), then
//! passed to the publication its session and stream name.

use crate::agent::{Agent, ErrorReporter, NanoClock};
use crate::context::SenderConfig;
use crate::media::transport::FrameBatch;
use crate::media::transport::{send_control_frame, Transport};
use crate::media::transport_poller::TransportPoller;
use crate::media::udp_transport::RecvBatch;
use crate::multi_send_destination::{MdcMode, MultiSendDestination};
use crate::network_publication::{NetworkPublication, PublicationSender};
use crate::system_counters::SystemCounter;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::Arc;
use sulis_protocol::frame::{decode_datagram, Frame};
use sulis_protocol::frame::{
    FrameHeader, HDR_TYPE_DATA, HDR_TYPE_ERR, HDR_TYPE_NAK, HDR_TYPE_PAD, HDR_TYPE_RES,
    HDR_TYPE_RSP_SETUP, HDR_TYPE_RTTM, HDR_TYPE_SETUP, HDR_TYPE_SM,
};

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
        /// The bound transport.
        transport: Box<dyn Transport>,
        /// Multi-destination-cast: how its destinations come and go.
        mdc: Option<MdcMode>,
    },
    /// A destination of a manual MDC endpoint.
    AddDestination {
        /// The endpoint.
        endpoint_id: u64,
        /// The destination channel as the client gave it.
        channel: String,
        /// Its address.
        address: SocketAddr,
        /// Correlation id of the command that added it.
        registration_id: i64,
    },
    /// Removes a manual MDC endpoint's destination at `address`.
    RemoveDestination {
        /// The endpoint.
        endpoint_id: u64,
        /// The destination's address.
        address: SocketAddr,
    },
    /// Removes the manual MDC endpoint destination added by `registration_id`.
    RemoveDestinationById {
        /// The endpoint.
        endpoint_id: u64,
        /// Correlation id of the command that added it.
        registration_id: i64,
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

/// What the sender tells the conductor.
#[derive(Debug)]
pub enum SenderEvent {
    /// An RSP_SETUP for a request publication: the server's response
    /// publication has session `response_session_id`; the response
    /// subscription `response_correlation_id` is to take it.
    ResponseSetup {
        /// The request publication's `response-correlation-id`.
        response_correlation_id: i64,
        /// Session id of the server's response publication.
        response_session_id: i32,
    },
}

struct SendEndpoint {
    id: u64,
    transport: Box<dyn Transport>,
    publications: Vec<PublicationSender>,
    /// Where each (session id, stream id) is in `publications` (the first,
    /// should two share one): every control frame is looked up.
    slots: HashMap<(i32, i32), usize>,
    /// Multi-destination-cast: where everything goes.
    mdc: Option<MultiSendDestination>,
}

impl SendEndpoint {
    fn index_publications(&mut self) {
        self.slots.clear();
        for (i, p) in self.publications.iter().enumerate() {
            self.slots
                .entry((p.session_id(), p.stream_id()))
                .or_insert(i);
        }
    }
}

/// The sender agent.
pub struct Sender {
    commands: mpsc::Receiver<SenderCommand>,
    events: mpsc::Sender<SenderEvent>,
    endpoints: Vec<SendEndpoint>,
    clock: NanoClock,
    cfg: SenderConfig,
    errors: ErrorReporter,
    /// Control receive buffers; taken out (not copied) while their datagrams are handled.
    recv: Option<RecvBatch>,
    duty_cycles: usize,
    /// Which endpoints have control frames waiting, once there are many.
    poller: TransportPoller,
    /// An endpoint's heartbeats of one duty cycle, sent together.
    heartbeats: FrameBatch,
}

impl Sender {
    /// A sender reading commands from `commands` and telling the conductor
    /// of response setups on `events`.
    pub fn new(
        commands: mpsc::Receiver<SenderCommand>,
        events: mpsc::Sender<SenderEvent>,
        clock: NanoClock,
        cfg: SenderConfig,
        errors: ErrorReporter,
    ) -> Self {
        let poller = TransportPoller::new(cfg.poller_threshold);
        Sender {
            commands,
            events,
            endpoints: Vec::new(),
            clock,
            cfg,
            errors,
            recv: Some(RecvBatch::new(CONTROL_BATCH, CONTROL_SLOT)),
            duty_cycles: 0,
            poller,
            heartbeats: FrameBatch::default(),
        }
    }

    fn on_command(&mut self, cmd: SenderCommand, now_ns: i64) {
        match cmd {
            SenderCommand::AddEndpoint {
                id,
                mut transport,
                mdc,
            } => {
                transport.set_gso(self.cfg.gso);
                self.endpoints.push(SendEndpoint {
                    id,
                    transport,
                    publications: Vec::new(),
                    slots: HashMap::new(),
                    mdc: mdc.map(MultiSendDestination::new),
                })
            }
            SenderCommand::AddDestination {
                endpoint_id,
                channel,
                address,
                registration_id,
            } => {
                if let Some(m) = self.mdc(endpoint_id) {
                    m.add(&channel, address, registration_id, now_ns);
                }
                // A newcomer hears a SETUP at once, not after data it cannot place.
                if let Some(e) = self.endpoints.iter_mut().find(|e| e.id == endpoint_id) {
                    for p in e.publications.iter_mut() {
                        p.send_setup_soon(&self.cfg, now_ns);
                    }
                }
            }
            SenderCommand::RemoveDestination {
                endpoint_id,
                address,
            } => {
                if let Some(m) = self.mdc(endpoint_id) {
                    m.remove_address(address);
                }
            }
            SenderCommand::RemoveDestinationById {
                endpoint_id,
                registration_id,
            } => {
                if let Some(m) = self.mdc(endpoint_id) {
                    m.remove_registration(registration_id);
                }
            }
            SenderCommand::RemoveEndpoint { id } => self.endpoints.retain(|e| e.id != id),
            SenderCommand::AddPublication {
                endpoint_id,
                publication,
            } => {
                if let Some(e) = self.endpoints.iter_mut().find(|e| e.id == endpoint_id) {
                    let p = PublicationSender::new(publication, &self.cfg, now_ns);
                    e.slots
                        .entry((p.session_id(), p.stream_id()))
                        .or_insert(e.publications.len());
                    e.publications.push(p);
                }
            }
            SenderCommand::RemovePublication { registration_id } => {
                for e in self.endpoints.iter_mut() {
                    let before = e.publications.len();
                    e.publications
                        .retain(|s| s.publication.registration_id != registration_id);
                    if e.publications.len() != before {
                        e.index_publications();
                    }
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
                    .find(|s| s.publication.registration_id == registration_id);
                if let Some(sp) = moved {
                    sp.change_destination(destination, &self.cfg, now_ns);
                }
            }
        }
    }

    fn mdc(&mut self, endpoint_id: u64) -> Option<&mut MultiSendDestination> {
        self.endpoints
            .iter_mut()
            .find(|e| e.id == endpoint_id)
            .and_then(|e| e.mdc.as_mut())
    }

    fn poll_control(&mut self, now_ns: i64) -> usize {
        // With the poller, only the endpoints it names are read.
        let endpoints = &self.endpoints;
        let transports = || {
            endpoints
                .iter()
                .enumerate()
                .map(|(ei, e)| {
                    let mut fds = Vec::new();
                    e.transport.poll_fds(&mut fds);
                    (ei as u64, fds)
                })
                .collect()
        };
        if let Err(e) = self.poller.begin_cycle(transports) {
            self.errors.record(&format!("sender: {e}"));
        }
        let mut work = 0;
        for ei in 0..self.endpoints.len() {
            if !self.poller.should_read(ei as u64) {
                continue;
            }
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
                work += self.on_control(ei, bytes, src, now_ns) as usize;
            }
            self.recv = Some(batch);
        }
        work
    }

    /// [`Self::invalid`], for a control frame handler's answer: an invalid
    /// frame counts as work (a flood of them keeps the sender reading).
    fn invalid_seen(&self, ep: usize, src: SocketAddr, what: &str) -> bool {
        self.invalid(ep, src, what);
        true
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

    /// A control frame from `src`: checked, then handed to its publication.
    fn on_control(&mut self, ep: usize, bytes: &[u8], src: SocketAddr, now_ns: i64) -> bool {
        let header = match FrameHeader::decode(bytes) {
            Ok(h) => h,
            Err(e) => return self.invalid_seen(ep, src, &e.to_string()),
        };
        if matches!(
            header.frame_type,
            HDR_TYPE_DATA | HDR_TYPE_PAD | HDR_TYPE_SETUP
        ) {
            // Frames for receivers: a stale sender still sending to a port
            // the kernel has since given this endpoint, or a peer that
            // confused the two. Aeron ignores them; checked, then ignored
            // here too (the receiver does the same with control frames).
            if let Err(e) = decode_datagram(bytes) {
                self.invalid(ep, src, &e.to_string());
            }
            return true;
        }
        if !matches!(
            header.frame_type,
            HDR_TYPE_SM
                | HDR_TYPE_NAK
                | HDR_TYPE_RTTM
                | HDR_TYPE_ERR
                | HDR_TYPE_RES
                | HDR_TYPE_RSP_SETUP
        ) {
            return self.invalid_seen(
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
            Err(e) => return self.invalid_seen(ep, src, &e.to_string()),
        };
        if let Frame::Status(sm) = &frame {
            let e = &mut self.endpoints[ep];
            if let Some(m) = e.mdc.as_mut() {
                m.on_status_message(sm, src, now_ns);
                if sm.session_id == 0 && sm.stream_id == 0 && sm.is_send_setup() {
                    // A receiver's probe: it is a destination now, which is all
                    // it asks. A stream not yet connected sends it SETUPs; one
                    // that is sends it data, and its receiver asks that
                    // session for a SETUP. Not a SETUP request to every stream:
                    // a min flow control holds its limit on each (every second,
                    // while the subscription lasts) until a newcomer answers.
                    self.errors
                        .system()
                        .increment(SystemCounter::StatusMessagesReceived);
                    return false;
                }
            }
        }
        // Status messages say whether they told anything new; round-trip
        // measurements are not work; every other control frame is.
        let outcome: Result<bool, String> = match frame {
            Frame::Status(sm) => match self.find(ep, sm.session_id, sm.stream_id) {
                Some(pi) => self.endpoints[ep].publications[pi].on_status_message(
                    &sm,
                    src,
                    &self.cfg,
                    self.errors.system(),
                    now_ns,
                ),
                None => Ok(true),
            },
            Frame::Nak(nak) => match self.find(ep, nak.session_id, nak.stream_id) {
                Some(pi) => {
                    let e = &mut self.endpoints[ep];
                    let own = e.publications[pi].own_destination();
                    let targets = match e.mdc.as_mut() {
                        Some(m) => m.addresses(now_ns),
                        None => own.as_slice(),
                    };
                    e.publications[pi]
                        .on_nak(&mut *e.transport, targets, &nak, &self.errors, now_ns)
                        .map(|()| true)
                }
                None => Ok(true),
            },
            Frame::Rttm(r) if r.is_reply_requested() => {
                if let Some(pi) = self.find(ep, r.session_id, r.stream_id) {
                    let e = &mut self.endpoints[ep];
                    let (reply, to) = e.publications[pi].rttm_reply(&r, src);
                    send_control_frame(&mut *e.transport, &reply.to_bytes(), to, &self.errors);
                }
                // A measurement, not news for the stream.
                Ok(false)
            }
            Frame::RspSetup(r) => {
                // The server of a request publication names its response
                // publication's session; anything else is ignored.
                if let Some(pi) = self.find(ep, r.session_id, r.stream_id) {
                    let p = &self.endpoints[ep].publications[pi].publication;
                    if !p.is_response && p.response_correlation_id != -1 {
                        let _ = self.events.send(SenderEvent::ResponseSetup {
                            response_correlation_id: p.response_correlation_id,
                            response_session_id: r.response_session_id,
                        });
                    }
                }
                Ok(true)
            }
            Frame::Error(err) => {
                self.errors
                    .system()
                    .increment(SystemCounter::ErrorFramesReceived);
                if let Some(pi) = self.find(ep, err.session_id, err.stream_id) {
                    self.endpoints[ep].publications[pi].on_error_frame(
                        err.receiver_id,
                        err.group_tag,
                        now_ns,
                    );
                }
                self.errors.record(&format!(
                    "error frame from {src}: session {} stream {} receiver {} code {}: {}",
                    err.session_id,
                    err.stream_id,
                    err.receiver_id,
                    err.error_code,
                    err.error_message
                ));
                Ok(true)
            }
            _ => Ok(true),
        };
        outcome.unwrap_or_else(|what| self.invalid_seen(ep, src, &what))
    }

    fn find(&self, ep: usize, session_id: i32, stream_id: i32) -> Option<usize> {
        self.endpoints[ep]
            .slots
            .get(&(session_id, stream_id))
            .copied()
    }
}

impl Agent for Sender {
    fn do_work(&mut self) -> usize {
        let now_ns = self.clock.now_ns();
        let mut work = 0;
        while let Ok(cmd) = self.commands.try_recv() {
            self.on_command(cmd, now_ns);
            self.poller.mark_stale();
            work += 1;
        }
        let mut bytes_sent = 0;
        for e in self.endpoints.iter_mut() {
            let mdc = e.mdc.as_mut().map(|m| m.addresses(now_ns));
            for p in e.publications.iter_mut() {
                let own = p.own_destination();
                let targets = mdc.unwrap_or(own.as_slice());
                bytes_sent += p.send(
                    &mut *e.transport,
                    targets,
                    &self.cfg,
                    &self.errors,
                    &mut self.heartbeats,
                    now_ns,
                );
            }
            self.heartbeats.flush(0, &mut *e.transport, &self.errors);
            self.heartbeats.end_turn();
        }
        self.duty_cycles += 1;
        // Control frames are read when idle, and every other cycle while busy.
        if bytes_sent == 0 || self.duty_cycles.is_multiple_of(2) {
            work += self.poll_control(now_ns);
        }
        work + bytes_sent
    }
}
