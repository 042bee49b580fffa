//! The receiver agent: reads data from receive endpoints into images and
//! feeds back status messages and NAKs.
//!
//! A receive endpoint is a socket bound to a subscription channel's
//! endpoint; it serves every stream subscribed on that channel. For each
//! datagram:
//!
//! * DATA/PAD for a known image is validated against the image's term and
//!   written into its log if it lies within the receiver window (below it:
//!   an under-run, above it: an over-run, both counted and dropped);
//! * DATA for a subscribed stream without an image asks the source for a
//!   SETUP (a status message with the SEND_SETUP flag);
//! * SETUP for a subscribed stream asks the conductor to create the image.
//!
//! Per image and duty cycle ([`ImageReceiver::do_duties`]): the rebuild
//! position advances over contiguous frames and the loss detector NAKs up
//! to `max_gaps` gaps at once; a status message goes out when the slowest
//! subscriber moved a quarter window or the status-message timeout passed;
//! terms behind the slowest subscriber are cleaned for reuse.

use crate::agent::{Agent, ErrorReporter, NanoClock};
use crate::context::ReceiverConfig;
use crate::media::transport::{send_control_frame, FrameBatch, Transport};
use crate::media::transport_poller::TransportPoller;
use crate::media::udp_transport::{RecvBatch, MAX_UDP_PAYLOAD_LENGTH};
use crate::publication_image::{ImageReceiver, PublicationImage};
use crate::system_counters::SystemCounter;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::Arc;
use sulis_concurrent::loss_report::LossReport;
use sulis_concurrent::mapped_file::MappedFile;
use sulis_protocol::frame::{
    decode_datagram, parse_data_datagram, Frame, FrameHeader, RttmFrame, SetupFrame,
    StatusMessageFrame, DATA_HEADER_LENGTH, EOS_FLAG, HDR_TYPE_DATA, HDR_TYPE_ERR, HDR_TYPE_NAK,
    HDR_TYPE_PAD, HDR_TYPE_RES, HDR_TYPE_RSP_SETUP, HDR_TYPE_RTTM, HDR_TYPE_SETUP, HDR_TYPE_SM,
    SESSION_ID_FIELD_OFFSET, STREAM_ID_FIELD_OFFSET,
};

/// How often an MDC receive endpoint probes its publication's control address (Aeron's, fixed).
pub const PROBE_INTERVAL_NS: i64 = 1_000_000_000;

/// Datagrams read per endpoint and `recvmmsg`.
const RECV_BATCH: usize = 32;
/// `recvmmsg` calls per endpoint and duty cycle while datagrams keep coming.
const RECV_ROUNDS: usize = 4;

/// What the conductor tells the receiver.
pub enum ReceiverCommand {
    /// A new receive endpoint (bound socket).
    AddEndpoint {
        /// Conductor's id for it.
        id: u64,
        /// The bound transport (`None`: a multi-destination subscription's
        /// endpoint, whose transports come with its destinations).
        transport: Option<Box<dyn Transport>>,
        /// Where setup-eliciting status messages go: the multicast control
        /// group, or an MDC publication's control address (`None`: back to
        /// the source of the data).
        control: Option<SocketAddr>,
        /// An MDC publication's explicit control address: a probe (a
        /// setup-eliciting status message for session 0, stream 0) goes there
        /// every [`PROBE_INTERVAL_NS`] while any stream is subscribed, so the
        /// publication learns of this receiver before any stream exists.
        probe: bool,
        /// Group tag its status messages carry.
        group_tag: Option<i64>,
        /// A multicast endpoint's TTL (its channel's `ttl`, else the
        /// driver's; 0: the OS default): a SETUP with a greater one counts a
        /// possible TTL asymmetry. `None`: not multicast.
        multicast_ttl: Option<u8>,
    },
    /// Close an endpoint (no subscription or image uses it any more); the
    /// receiver answers with [`ReceiverEvent::EndpointClosed`] once its socket
    /// is closed, so the address can be bound again.
    RemoveEndpoint {
        /// Its id.
        id: u64,
    },
    /// A destination of a multi-destination subscription's endpoint: a
    /// transport of its own, whose images' control frames go back to each
    /// source (or, with `control`, to an MDC publication's control address,
    /// probed as [`ReceiverCommand::AddEndpoint`]'s).
    AddDestination {
        /// The endpoint.
        endpoint_id: u64,
        /// The bound transport.
        transport: Box<dyn Transport>,
        /// Where its images' control frames go: a multicast control group,
        /// or an MDC publication's control address (`None`: each source).
        control: Option<SocketAddr>,
        /// `control` is an MDC publication's, to probe every [`PROBE_INTERVAL_NS`].
        probe: bool,
        /// A multicast destination's TTL, as [`ReceiverCommand::AddEndpoint`]'s.
        multicast_ttl: Option<u8>,
    },
    /// Closes the destination transport bound at `address`; the receiver
    /// answers with [`ReceiverEvent::DestinationClosed`] once it is closed
    /// (or was already), so the address can be bound again.
    RemoveDestination {
        /// The endpoint.
        endpoint_id: u64,
        /// Its bound address.
        address: SocketAddr,
    },
    /// A subscription on `stream_id` (counted: one per subscription).
    AddSubscription {
        /// Endpoint id.
        endpoint_id: u64,
        /// Stream id.
        stream_id: i32,
    },
    /// A subscription went away.
    RemoveSubscription {
        /// Endpoint id.
        endpoint_id: u64,
        /// Stream id.
        stream_id: i32,
    },
    /// Start filling an image the conductor created.
    AddImage {
        /// The image.
        image: Arc<PublicationImage>,
    },
    /// A response subscription learnt its session (or the server repeated
    /// the news): ask the server's response publication for a SETUP, from
    /// this endpoint's socket, so it learns where to send.
    ElicitSetup {
        /// Endpoint id.
        endpoint_id: u64,
        /// Session id of the response publication.
        session_id: i32,
        /// Stream id.
        stream_id: i32,
        /// The server's response port (the subscription's `control`).
        to: SocketAddr,
    },
    /// The conductor could not create an image; forget the pending setup.
    ImageRefused {
        /// Endpoint id.
        endpoint_id: u64,
        /// Session id.
        session_id: i32,
        /// Stream id.
        stream_id: i32,
    },
}

/// What the receiver asks of the conductor.
#[derive(Debug)]
pub enum ReceiverEvent {
    /// A SETUP arrived for a subscribed stream without an image.
    CreateImage {
        /// Endpoint id.
        endpoint_id: u64,
        /// The endpoint's transport it came in on.
        transport_index: usize,
        /// The SETUP.
        setup: SetupFrame,
        /// Where it came from.
        source: SocketAddr,
        /// Where the image's control frames go (the source, a multicast
        /// control group, an MDC publication's control address).
        control: SocketAddr,
    },
    /// The socket of a removed endpoint is closed: its address is free again.
    EndpointClosed {
        /// Endpoint id.
        id: u64,
    },
    /// The socket of a removed destination is closed: its address is free again.
    DestinationClosed {
        /// The endpoint it was a destination of.
        endpoint_id: u64,
        /// Where it was bound.
        address: SocketAddr,
    },
}

struct Pending {
    session_id: i32,
    stream_id: i32,
    /// True once the conductor was asked for an image.
    requested: bool,
    until_ns: i64,
}

/// What a transport of a receive endpoint sends control frames to, and
/// whether it probes an MDC publication's control address.
#[derive(Clone, Copy)]
struct TransportControl {
    control: Option<SocketAddr>,
    probe: bool,
    time_of_last_probe_ns: i64,
    /// A multicast transport's TTL (`None`: unicast).
    multicast_ttl: Option<u8>,
}

struct ReceiveEndpoint {
    id: u64,
    /// One transport, or a multi-destination subscription's, one per
    /// destination: indices are stable (a removed one leaves `None`).
    transports: Vec<Option<Box<dyn Transport>>>,
    controls: Vec<TransportControl>,
    group_tag: Option<i64>,
    /// Subscriptions by stream id. A map, as the images: every datagram is
    /// looked up, and walking a list of thousands per heartbeat cost more
    /// than all else a thousand idle streams needed.
    streams: HashMap<i32, usize>,
    images: Vec<ImageReceiver>,
    /// Where each session's image is in `images` (the newest, while a retired
    /// one of the same session waits to be dropped).
    image_slots: HashMap<(i32, i32), usize>,
    pending: Vec<Pending>,
    cool_down: Vec<(i32, i32, i64)>,
}

impl ReceiveEndpoint {
    /// A new transport's index. Indices are never reused: an image being
    /// made for a removed destination must not find another one there.
    fn add_transport(&mut self, transport: Box<dyn Transport>, control: TransportControl) -> usize {
        self.transports.push(Some(transport));
        self.controls.push(control);
        self.transports.len() - 1
    }

    fn local_addr(&self, ti: usize) -> String {
        match self.transports.get(ti) {
            Some(Some(t)) => t.local_addr().to_string(),
            _ => "(closed)".into(),
        }
    }

    fn is_subscribed(&self, stream_id: i32) -> bool {
        self.streams.contains_key(&stream_id)
    }

    fn image_index(&self, session_id: i32, stream_id: i32) -> Option<usize> {
        self.image_slots.get(&(session_id, stream_id)).copied()
    }

    fn add_image(&mut self, image: ImageReceiver) {
        let key = (image.image.session_id, image.image.stream_id);
        self.image_slots.insert(key, self.images.len());
        self.images.push(image);
    }

    /// Removes the image at `i`; the last one takes its place.
    fn remove_image(&mut self, i: usize) -> ImageReceiver {
        let last = self.images.len() - 1;
        let removed = self.images.swap_remove(i);
        let key = (removed.image.session_id, removed.image.stream_id);
        if self.image_slots.get(&key) == Some(&i) {
            self.image_slots.remove(&key);
        }
        if i < last {
            let moved = &self.images[i].image;
            if let Some(slot) = self
                .image_slots
                .get_mut(&(moved.session_id, moved.stream_id))
            {
                if *slot == last {
                    *slot = i;
                }
            }
        }
        removed
    }

    fn retain_images(&mut self, keep: impl FnMut(&ImageReceiver) -> bool) {
        self.images.retain(keep);
        self.image_slots.clear();
        for (i, image) in self.images.iter().enumerate() {
            self.image_slots
                .insert((image.image.session_id, image.image.stream_id), i);
        }
    }

    fn pending_index(&self, session_id: i32, stream_id: i32) -> Option<usize> {
        self.pending
            .iter()
            .position(|p| p.session_id == session_id && p.stream_id == stream_id)
    }

    fn cooling(&self, session_id: i32, stream_id: i32) -> bool {
        self.cool_down
            .iter()
            .any(|&(se, st, _)| se == session_id && st == stream_id)
    }
}

/// The receiver agent.
pub struct Receiver {
    commands: mpsc::Receiver<ReceiverCommand>,
    events: mpsc::Sender<ReceiverEvent>,
    endpoints: Vec<ReceiveEndpoint>,
    clock: NanoClock,
    cfg: ReceiverConfig,
    errors: ErrorReporter,
    /// Receive buffers; taken out (not copied) while their datagrams are handled.
    recv: Option<RecvBatch>,
    /// The loss report and the file it lives in.
    loss_report: Option<(LossReport, MappedFile)>,
    loss_report_full: bool,
    /// Which transports have datagrams waiting, once there are many.
    poller: TransportPoller,
    /// Status messages that only repeat, sent together at the end of an endpoint's turn.
    upkeep: FrameBatch,
}

/// A transport's key in the poller: its endpoint's and its own index.
fn poller_key(ep: usize, ti: usize) -> u64 {
    ((ep as u64) << 32) | ti as u64
}

/// Every open transport, keyed for the poller, with its descriptors.
fn poller_transports(endpoints: &[ReceiveEndpoint]) -> Vec<(u64, Vec<std::os::fd::RawFd>)> {
    let mut transports = Vec::new();
    for (ep, e) in endpoints.iter().enumerate() {
        for (ti, t) in e.transports.iter().enumerate() {
            if let Some(t) = t {
                let mut fds = Vec::new();
                t.poll_fds(&mut fds);
                transports.push((poller_key(ep, ti), fds));
            }
        }
    }
    transports
}

impl Receiver {
    /// A receiver reading commands from `commands` and asking for images on `events`.
    pub fn new(
        commands: mpsc::Receiver<ReceiverCommand>,
        events: mpsc::Sender<ReceiverEvent>,
        clock: NanoClock,
        cfg: ReceiverConfig,
        errors: ErrorReporter,
    ) -> Self {
        let poller = TransportPoller::new(cfg.poller_threshold);
        Receiver {
            commands,
            events,
            endpoints: Vec::new(),
            clock,
            cfg,
            errors,
            recv: Some(RecvBatch::new(RECV_BATCH, MAX_UDP_PAYLOAD_LENGTH + 32)),
            loss_report: None,
            loss_report_full: false,
            poller,
            upkeep: FrameBatch::default(),
        }
    }

    /// Records every gap the images detect in the loss report mapped from `file`.
    pub fn with_loss_report(mut self, file: MappedFile) -> Self {
        self.loss_report = Some((LossReport::new(file.buffer()), file));
        self
    }

    /// Adds `gaps` newly detected gaps of `bytes` in all to the image's entry.
    fn report_loss(&mut self, ep: usize, ii: usize, gaps: u64, bytes: i64) {
        let Some((report, _)) = self.loss_report.as_mut() else {
            return;
        };
        let now_ms = self.clock.epoch_ms();
        let ri = &mut self.endpoints[ep].images[ii];
        match ri.loss_entry {
            Some(entry) => report.record_observation(entry, gaps as i64, bytes, now_ms),
            None => {
                let img = &ri.image;
                match report.create_entry(
                    gaps as i64,
                    bytes,
                    now_ms,
                    img.session_id,
                    img.stream_id,
                    &img.channel,
                    &img.source.to_string(),
                ) {
                    Some(entry) => ri.loss_entry = Some(entry),
                    None if !self.loss_report_full => {
                        self.loss_report_full = true;
                        self.errors.record(
                            "loss report is full: losses of further images are not reported \
                             (raise loss_report_buffer_length)",
                        );
                    }
                    None => {}
                }
            }
        }
    }

    fn endpoint(&mut self, id: u64) -> Option<&mut ReceiveEndpoint> {
        self.endpoints.iter_mut().find(|e| e.id == id)
    }

    fn on_command(&mut self, cmd: ReceiverCommand) {
        match cmd {
            ReceiverCommand::AddEndpoint {
                id,
                transport,
                control,
                probe,
                group_tag,
                multicast_ttl,
            } => {
                let mut e = ReceiveEndpoint {
                    id,
                    transports: Vec::new(),
                    controls: Vec::new(),
                    group_tag,
                    streams: HashMap::new(),
                    images: Vec::new(),
                    image_slots: HashMap::new(),
                    pending: Vec::new(),
                    cool_down: Vec::new(),
                };
                // A multi-destination subscription's endpoint starts without one.
                if let Some(mut transport) = transport {
                    if self.cfg.gro {
                        transport.enable_gro();
                    }
                    e.add_transport(
                        transport,
                        TransportControl {
                            control,
                            probe,
                            time_of_last_probe_ns: i64::MIN / 2,
                            multicast_ttl,
                        },
                    );
                }
                self.endpoints.push(e);
            }
            ReceiverCommand::AddDestination {
                endpoint_id,
                mut transport,
                control,
                probe,
                multicast_ttl,
            } => {
                if self.cfg.gro {
                    transport.enable_gro();
                }
                if let Some(e) = self.endpoint(endpoint_id) {
                    e.add_transport(
                        transport,
                        TransportControl {
                            control,
                            probe,
                            time_of_last_probe_ns: i64::MIN / 2,
                            multicast_ttl,
                        },
                    );
                }
            }
            ReceiverCommand::RemoveDestination {
                endpoint_id,
                address,
            } => {
                if let Some(e) = self.endpoint(endpoint_id) {
                    let found = e
                        .transports
                        .iter()
                        .position(|t| t.as_ref().is_some_and(|t| t.local_addr() == address));
                    if let Some(ti) = found {
                        e.transports[ti] = None;
                        for image in e.images.iter_mut() {
                            image.remove_connection(ti);
                        }
                    }
                }
                // Closed now, or with its endpoint before: either way free.
                let _ = self.events.send(ReceiverEvent::DestinationClosed {
                    endpoint_id,
                    address,
                });
            }
            ReceiverCommand::RemoveEndpoint { id } => {
                // Dropping the endpoint closes its socket before the
                // conductor hears of it.
                self.endpoints.retain(|e| e.id != id);
                let _ = self.events.send(ReceiverEvent::EndpointClosed { id });
            }
            ReceiverCommand::AddSubscription {
                endpoint_id,
                stream_id,
            } => {
                if let Some(e) = self.endpoint(endpoint_id) {
                    match e.streams.get_mut(&stream_id) {
                        Some(n) => *n += 1,
                        None => {
                            // A stream subscribed again after nobody wanted
                            // it: the images the conductor withdrew for want
                            // of subscribers go now, and their sessions may
                            // join at once instead of after the cool-down.
                            e.streams.insert(stream_id, 1);
                            e.retain_images(|i| {
                                !(i.image.stream_id == stream_id && i.image.is_inactive())
                            });
                            e.cool_down.retain(|c| c.1 != stream_id);
                        }
                    }
                }
            }
            ReceiverCommand::RemoveSubscription {
                endpoint_id,
                stream_id,
            } => {
                if let Some(e) = self.endpoint(endpoint_id) {
                    if let Some(n) = e.streams.get_mut(&stream_id) {
                        *n -= 1;
                        if *n == 0 {
                            e.streams.remove(&stream_id);
                            e.pending.retain(|p| p.stream_id != stream_id);
                            e.cool_down.retain(|c| c.1 != stream_id);
                        }
                    }
                }
            }
            ReceiverCommand::AddImage { image } => {
                let receiver = ImageReceiver::new(image, &self.cfg);
                let image = &receiver.image;
                let Some(e) = self
                    .endpoints
                    .iter_mut()
                    .find(|e| e.id == image.endpoint_id)
                else {
                    return;
                };
                e.pending.retain(|p| {
                    !(p.session_id == image.session_id && p.stream_id == image.stream_id)
                });
                e.add_image(receiver);
            }
            ReceiverCommand::ElicitSetup {
                endpoint_id,
                session_id,
                stream_id,
                to,
            } => {
                if let Some(ep) = self.endpoints.iter().position(|e| e.id == endpoint_id) {
                    let sm = StatusMessageFrame {
                        group_tag: self.endpoints[ep].group_tag,
                        ..StatusMessageFrame::setup_eliciting(
                            session_id,
                            stream_id,
                            self.cfg.receiver_id,
                        )
                    };
                    let mut buf = [0u8; StatusMessageFrame::LENGTH_WITH_GROUP_TAG];
                    let len = sm.encode(&mut buf);
                    if self.send_control(ep, 0, &buf[..len], to) {
                        self.errors
                            .system()
                            .increment(SystemCounter::StatusMessagesSent);
                    }
                }
            }
            ReceiverCommand::ImageRefused {
                endpoint_id,
                session_id,
                stream_id,
            } => {
                if let Some(e) = self.endpoint(endpoint_id) {
                    e.pending
                        .retain(|p| !(p.session_id == session_id && p.stream_id == stream_id));
                }
            }
        }
    }

    fn invalid(&self, ep: usize, ti: usize, src: SocketAddr, what: &str) {
        self.errors
            .system()
            .increment(SystemCounter::InvalidPackets);
        self.errors.record(&format!(
            "invalid datagram from {src} on receive endpoint {}: {what}",
            self.endpoints[ep].local_addr(ti)
        ));
    }

    /// [`Self::invalid`], for a datagram handler's answer: an invalid
    /// datagram counts as work (a flood of them keeps the receiver reading).
    fn invalid_seen(&self, ep: usize, ti: usize, src: SocketAddr, what: &str) -> bool {
        self.invalid(ep, ti, src, what);
        true
    }

    fn send_control(&mut self, ep: usize, ti: usize, bytes: &[u8], to: SocketAddr) -> bool {
        match self.endpoints[ep].transports.get_mut(ti) {
            Some(Some(t)) => send_control_frame(&mut **t, bytes, to, &self.errors),
            _ => false,
        }
    }

    fn poll(&mut self, ep: usize, ti: usize, now_ns: i64) -> usize {
        let mut work = 0;
        let mut batch = self
            .recv
            .take()
            .expect("receive buffers are put back after use");
        for _ in 0..RECV_ROUNDS {
            let Some(Some(transport)) = self.endpoints[ep].transports.get_mut(ti) else {
                break;
            };
            let n = match transport.recv_batch(&mut batch) {
                Ok(n) => n,
                Err(e) => {
                    self.errors.record(&format!(
                        "receive endpoint {}: receive failed: {e}",
                        self.endpoints[ep].local_addr(ti)
                    ));
                    0
                }
            };
            for i in 0..n {
                let (bytes, src) = batch.get(i);
                if let Some(src) = src {
                    self.errors
                        .system()
                        .add(SystemCounter::BytesReceived, bytes.len() as i64);
                    if bytes.is_empty() {
                        self.invalid(ep, ti, src, "empty datagram");
                        continue;
                    }
                    // One datagram, or several the kernel coalesced (GRO).
                    for datagram in bytes.chunks(batch.segment_size(i).max(1)) {
                        work += self.on_datagram(ep, ti, datagram, src, now_ns) as usize;
                    }
                }
            }
            if n < RECV_BATCH {
                break;
            }
        }
        self.recv = Some(batch);
        work
    }

    fn on_datagram(
        &mut self,
        ep: usize,
        ti: usize,
        bytes: &[u8],
        src: SocketAddr,
        now_ns: i64,
    ) -> bool {
        let header = match FrameHeader::decode(bytes) {
            Ok(h) => h,
            Err(e) => return self.invalid_seen(ep, ti, src, &e.to_string()),
        };
        // Where control frames about what came in on this transport go.
        let control = self.endpoints[ep].controls[ti].control.unwrap_or(src);
        match header.frame_type {
            HDR_TYPE_DATA | HDR_TYPE_PAD => {
                if bytes.len() < DATA_HEADER_LENGTH {
                    return self.invalid_seen(
                        ep,
                        ti,
                        src,
                        &format!(
                            "data datagram of {} bytes is shorter than the 32-byte data header",
                            bytes.len()
                        ),
                    );
                }
                let get = |o: usize| i32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
                let (session_id, stream_id) =
                    (get(SESSION_ID_FIELD_OFFSET), get(STREAM_ID_FIELD_OFFSET));
                let e = &self.endpoints[ep];
                if !e.is_subscribed(stream_id) {
                    return true;
                }
                if let Some(ii) = e.image_index(session_id, stream_id) {
                    let term_length = e.images[ii].image.term_length;
                    return match parse_data_datagram(bytes, term_length) {
                        Ok(d) => {
                            let system = *self.errors.system();
                            let image = &mut self.endpoints[ep].images[ii];
                            image.track_connection(ti, control, now_ns);
                            image.insert_packet(&d, ti, &system, now_ns)
                        }
                        Err(err) => self.invalid_seen(ep, ti, src, &err.to_string()),
                    };
                }
                let first = match decode_datagram(bytes) {
                    Ok(Frame::Data { header, .. })
                    | Ok(Frame::Heartbeat(header))
                    | Ok(Frame::Pad(header)) => header,
                    Ok(_) => return true,
                    Err(err) => return self.invalid_seen(ep, ti, src, &err.to_string()),
                };
                if first.flags & EOS_FLAG != 0
                    || e.cooling(session_id, stream_id)
                    || e.pending_index(session_id, stream_id).is_some()
                {
                    return true;
                }
                // A stream we want from a source we have no image of: ask it
                // (or, multicast, the group's control address) for a SETUP,
                // then wait a status-message period before asking again.
                let sm = StatusMessageFrame {
                    group_tag: e.group_tag,
                    ..StatusMessageFrame::setup_eliciting(
                        session_id,
                        stream_id,
                        self.cfg.receiver_id,
                    )
                };
                let to = control;
                let until_ns = now_ns + self.cfg.status_message_timeout_ns;
                self.endpoints[ep].pending.push(Pending {
                    session_id,
                    stream_id,
                    requested: false,
                    until_ns,
                });
                let mut buf = [0u8; StatusMessageFrame::LENGTH_WITH_GROUP_TAG];
                let len = sm.encode(&mut buf);
                self.send_control(ep, ti, &buf[..len], to);
                self.errors
                    .system()
                    .increment(SystemCounter::StatusMessagesSent);
            }
            HDR_TYPE_SETUP => {
                let setup = match SetupFrame::decode(bytes) {
                    Ok(s) => s,
                    Err(err) => return self.invalid_seen(ep, ti, src, &err.to_string()),
                };
                let e = &mut self.endpoints[ep];
                if let Some(ii) = e.image_index(setup.session_id, setup.stream_id) {
                    // The session by another way (a multi-destination
                    // subscription's other destination): answered there too;
                    // or by the same way, from a sender that never counted
                    // this image and is past what it joined at (it ends).
                    e.images[ii].on_setup(&setup, ti, control, now_ns);
                    return true;
                }
                if !e.is_subscribed(setup.stream_id) || e.cooling(setup.session_id, setup.stream_id)
                {
                    return true;
                }
                let until_ns = now_ns + 10 * self.cfg.status_message_timeout_ns;
                match e.pending_index(setup.session_id, setup.stream_id) {
                    Some(i) if e.pending[i].requested => return true,
                    Some(i) => {
                        e.pending[i].requested = true;
                        e.pending[i].until_ns = until_ns;
                    }
                    None => e.pending.push(Pending {
                        session_id: setup.session_id,
                        stream_id: setup.stream_id,
                        requested: true,
                        until_ns,
                    }),
                }
                // As Aeron's: a multicast source sending with a greater TTL
                // than ours may reach us while our status messages and NAKs
                // do not reach it.
                if e.controls[ti]
                    .multicast_ttl
                    .is_some_and(|ttl| i32::from(ttl) < setup.ttl)
                {
                    self.errors
                        .system()
                        .increment(SystemCounter::PossibleTtlAsymmetry);
                }
                let _ = self.events.send(ReceiverEvent::CreateImage {
                    endpoint_id: e.id,
                    transport_index: ti,
                    setup,
                    source: src,
                    control,
                });
            }
            HDR_TYPE_RTTM => {
                // A measurement's reply is not news for the stream.
                return match decode_datagram(bytes) {
                    Ok(Frame::Rttm(r)) => {
                        self.on_rttm(ep, &r, now_ns);
                        false
                    }
                    Ok(_) => false,
                    Err(err) => self.invalid_seen(ep, ti, src, &err.to_string()),
                };
            }
            HDR_TYPE_SM | HDR_TYPE_NAK | HDR_TYPE_ERR | HDR_TYPE_RES | HDR_TYPE_RSP_SETUP => {
                // Control frames for senders, or features this receiver does
                // not use: checked, then ignored.
                if let Err(err) = decode_datagram(bytes) {
                    self.invalid(ep, ti, src, &err.to_string());
                }
            }
            other => self.invalid(
                ep,
                ti,
                src,
                &format!("frame type {other:#x} is not one a receiver accepts"),
            ),
        }
        true
    }

    /// An MDC receive endpoint subscribing to anything probes its
    /// publication's control address every [`PROBE_INTERVAL_NS`].
    fn probe(&mut self, ep: usize, ti: usize, now_ns: i64) -> usize {
        let e = &mut self.endpoints[ep];
        let subscribed = !e.streams.is_empty();
        let c = &mut e.controls[ti];
        let Some(to) = c.control.filter(|_| c.probe && subscribed) else {
            return 0;
        };
        if now_ns - c.time_of_last_probe_ns < PROBE_INTERVAL_NS {
            return 0;
        }
        c.time_of_last_probe_ns = now_ns;
        let sm = StatusMessageFrame {
            group_tag: e.group_tag,
            ..StatusMessageFrame::setup_eliciting(0, 0, self.cfg.receiver_id)
        };
        let mut buf = [0u8; StatusMessageFrame::LENGTH_WITH_GROUP_TAG];
        let len = sm.encode(&mut buf);
        if self.send_control(ep, ti, &buf[..len], to) {
            self.errors
                .system()
                .increment(SystemCounter::StatusMessagesSent);
        }
        1
    }

    /// A sender's reply to one of our round-trip measurements: a repair time
    /// sample for the image's loss detector. Requests (a sender measuring
    /// us) and replies meant for another receiver are ignored.
    fn on_rttm(&mut self, ep: usize, r: &RttmFrame, now_ns: i64) {
        if r.is_reply_requested() || r.receiver_id != self.cfg.receiver_id {
            return;
        }
        let e = &mut self.endpoints[ep];
        if let Some(ii) = e.image_index(r.session_id, r.stream_id) {
            e.images[ii].on_rttm_reply(r, now_ns);
        }
    }

    /// Rebuild, NAKs, status message and cleaning for one image.
    fn image_duties(&mut self, ep: usize, ii: usize, now_ns: i64) -> usize {
        let e = &mut self.endpoints[ep];
        let (work, new_loss) = e.images[ii].do_duties(
            &mut e.transports,
            &self.cfg,
            &self.errors,
            &mut self.upkeep,
            now_ns,
        );
        if new_loss.0 > 0 {
            self.report_loss(ep, ii, new_loss.0, new_loss.1);
        }
        work
    }
}

impl Agent for Receiver {
    fn do_work(&mut self) -> usize {
        let now_ns = self.clock.now_ns();
        let mut work = 0;
        while let Ok(cmd) = self.commands.try_recv() {
            self.on_command(cmd);
            self.poller.mark_stale();
            work += 1;
        }
        // With the poller, only the transports it names are read.
        let endpoints = &self.endpoints;
        if let Err(e) = self.poller.begin_cycle(|| poller_transports(endpoints)) {
            self.errors.record(&format!("receiver: {e}"));
        }
        for ep in 0..self.endpoints.len() {
            for ti in 0..self.endpoints[ep].transports.len() {
                if self.endpoints[ep].transports[ti].is_some() {
                    work += self.probe(ep, ti, now_ns);
                    if self.poller.should_read(poller_key(ep, ti)) {
                        work += self.poll(ep, ti, now_ns);
                    }
                }
            }
            let cool_down_ns = self.cfg.image_cool_down_ns;
            let status_period_ns = self.cfg.status_message_timeout_ns;
            let e = &mut self.endpoints[ep];
            e.pending.retain(|p| p.until_ns > now_ns);
            e.cool_down.retain(|c| c.2 > now_ns);
            // One pass: an image is looked at once per cycle, and an idle one
            // whose timers are not due is passed by.
            let mut ii = 0;
            while ii < self.endpoints[ep].images.len() {
                let e = &mut self.endpoints[ep];
                let r = &e.images[ii];
                if r.image.is_inactive() {
                    // Retired by the conductor: its session is ignored for a
                    // while; one given up on is joined again soon (its sender
                    // is there).
                    let img = e.remove_image(ii).image;
                    let pause_ns = if img.has_given_up() {
                        status_period_ns
                    } else {
                        cool_down_ns
                    };
                    e.cool_down
                        .push((img.session_id, img.stream_id, now_ns + pause_ns));
                    continue;
                }
                if !r.is_quiet(now_ns) {
                    work += self.image_duties(ep, ii, now_ns);
                }
                ii += 1;
            }
            for (ti, t) in self.endpoints[ep].transports.iter_mut().enumerate() {
                if let Some(t) = t {
                    self.upkeep.flush(ti, &mut **t, &self.errors);
                }
            }
            self.upkeep.end_turn();
        }
        work
    }
}
