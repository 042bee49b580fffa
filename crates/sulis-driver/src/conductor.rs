//! The driver conductor: reads client commands, owns every resource's life
//! cycle, tracks positions and runs the liveness timers.
//!
//! `do_work` reads the clock once, then adds up small duties (commands, stream
//! positions, timers) and returns the total so the idle strategy can back off.

use crate::agent::{Agent, ErrorReporter, NanoClock};
use crate::context::DriverContext;
use crate::ipc_publication::{IpcPublication, IpcSubscriber, PubState};
use crate::media::udp_channel::UdpChannel;
use crate::media::udp_transport::{SocketOptions, UdpTransport};
use crate::network_publication::{
    NetState, NetworkPublication, NetworkPublicationEntry, ReResolution,
};
use crate::publication_image::{ImageSubscriber, PublicationImage};
use crate::receiver::{ReceiverCommand, ReceiverEvent};
use crate::sender::SenderCommand;
use crate::system_counters::{
    stream_counter_key, stream_counter_label, type_id, SystemCounter, SystemCounters,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use sulis_concurrent::broadcast::BroadcastTransmitter;
use sulis_concurrent::cnc::Cnc;
use sulis_concurrent::counters::{CountersManager, NULL_COUNTER_ID};
use sulis_concurrent::error_log::SharedErrorLog;
use sulis_concurrent::logbuffer::{LogBuffers, LogParams};
use sulis_concurrent::mpsc_ring_buffer::ManyToOneRingBuffer;
use sulis_protocol::control::{error_code, Command, Event};
use sulis_protocol::driver_dir::{image_log_file, publication_log_file};
use sulis_protocol::frame::SetupFrame;
use sulis_protocol::log_buffer_descriptor::*;
use sulis_protocol::uri::{ChannelUri, Media, SessionIdParam};

/// Session ids in this range are left for users to choose (Aeron's reserved range).
const RESERVED_SESSION_ID_LOW: i32 = -1;
const RESERVED_SESSION_ID_HIGH: i32 = 1000;
/// How often the driver heartbeat in the CnC is refreshed.
const DRIVER_HEARTBEAT_INTERVAL_MS: i64 = 100;
/// Commands read per duty cycle.
const COMMAND_LIMIT: usize = 10;

struct ClientSession {
    client_id: i64,
    heartbeat_counter_id: i32,
    closed: bool,
}

struct PublicationLink {
    /// Correlation id of the add command: what the client removes by.
    registration_id: i64,
    client_id: i64,
    publication_id: i64,
}

struct SubscriptionLink {
    registration_id: i64,
    client_id: i64,
    stream_id: i32,
    channel: String,
    session_filter: Option<i32>,
    tether: bool,
    /// Receive endpoint of a UDP subscription (`None` for IPC).
    udp_endpoint: Option<u64>,
}

/// A socket shared by every channel with the same canonical form.
struct EndpointEntry {
    id: u64,
    key: String,
    ref_count: usize,
    /// Effective SO_RCVBUF (caps the receiver window).
    rcvbuf: usize,
    /// Receiver window from the first subscription's channel, if it set one.
    rcv_wnd: Option<usize>,
    /// `reliable` of the first subscription's channel (images NAK or pad over gaps).
    reliable: bool,
}

/// Conductor-side state of an image.
enum ImageState {
    Active,
    Lingering { until_ns: i64 },
}

struct ImageEntry {
    image: Arc<PublicationImage>,
    state: ImageState,
}

/// Channels to and from the network agents.
pub struct NetworkLinks {
    /// Commands to the sender.
    pub sender: mpsc::Sender<SenderCommand>,
    /// Commands to the receiver.
    pub receiver: mpsc::Sender<ReceiverCommand>,
    /// Requests from the receiver.
    pub receiver_events: mpsc::Receiver<ReceiverEvent>,
}

/// An add-subscription command that waits until the receiver has closed the
/// socket of a removed endpoint with the same address.
struct DeferredSubscription {
    key: String,
    client_id: i64,
    correlation_id: i64,
    stream_id: i32,
    channel: String,
}

struct ClientCounter {
    registration_id: i64,
    client_id: i64,
    counter_id: i32,
}

/// An existing concurrent publication a further publisher joins.
struct SharedPublication {
    registration_id: i64,
    session_id: i32,
    limit_counter_id: i32,
    term_length: usize,
    log_file: String,
}

impl SharedPublication {
    /// A joining publisher may not ask for another term length.
    fn check_term_length(&self, channel: &str, requested: Option<u32>) -> Result<(), CommandError> {
        match requested {
            Some(t) if t as usize != self.term_length => Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!(
                    "channel '{channel}': term-length={t} differs from the existing publication's {}",
                    self.term_length
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// A command failed: the code and message go back to the client.
struct CommandError {
    code: i32,
    message: String,
}

impl CommandError {
    fn new(code: i32, message: impl Into<String>) -> Self {
        CommandError {
            code,
            message: message.into(),
        }
    }
}

/// Parses a channel: validates it, checks the `stream-id` parameter against
/// the command's stream id and returns the URI with its fixed session id, if
/// any.
fn parse_channel(
    channel: &str,
    stream_id: i32,
    what: &str,
) -> Result<(ChannelUri, Option<i32>), CommandError> {
    let uri = ChannelUri::parse(channel)
        .map_err(|e| CommandError::new(error_code::INVALID_CHANNEL, e.to_string()))?;
    if uri.is_spy() {
        return Err(CommandError::new(
            error_code::NOT_SUPPORTED,
            format!("channel '{channel}': spy {what} are not supported by this driver version"),
        ));
    }
    let p = uri.params();
    if let Some(s) = p.stream_id {
        if s != stream_id {
            return Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': stream-id={s} does not match the stream id {stream_id} given"),
            ));
        }
    }
    let session = match &p.session_id {
        Some(SessionIdParam::Value(v)) => Some(*v),
        Some(SessionIdParam::Tag(_)) => {
            return Err(CommandError::new(
                error_code::NOT_SUPPORTED,
                "session-id=tag: is not supported yet",
            ))
        }
        None => None,
    };
    Ok((uri, session))
}

/// A name resolution slower than this is counted (Aeron's default, 5 s).
const NAME_RESOLVER_THRESHOLD_NS: i64 = 5_000_000_000;

/// The conductor agent.
pub struct DriverConductor {
    ctx: DriverContext,
    cnc: Arc<Cnc>,
    to_driver: ManyToOneRingBuffer,
    to_clients: BroadcastTransmitter,
    counters: CountersManager,
    errors: ErrorReporter,
    system: SystemCounters,
    clock: NanoClock,
    net: NetworkLinks,
    net_publications: Vec<NetworkPublicationEntry>,
    send_endpoints: Vec<EndpointEntry>,
    receive_endpoints: Vec<EndpointEntry>,
    /// Receive endpoints removed whose sockets the receiver has not yet
    /// closed: (id, canonical key).
    closing_receive_endpoints: Vec<(u64, String)>,
    /// Subscriptions waiting for the closing endpoint of their address.
    deferred_subscriptions: Vec<DeferredSubscription>,
    images: Vec<ImageEntry>,
    next_endpoint_id: u64,
    clients: Vec<ClientSession>,
    publications: Vec<IpcPublication>,
    publication_links: Vec<PublicationLink>,
    subscriptions: Vec<SubscriptionLink>,
    client_counters: Vec<ClientCounter>,
    next_session_id: i32,
    next_timer_ns: i64,
    next_re_resolution_check_ns: i64,
    last_heartbeat_ms: i64,
    last_command_consumer_position: i64,
    time_of_last_command_progress_ns: i64,
}

impl DriverConductor {
    /// Builds the conductor over a created (not yet ready) CnC.
    pub fn new(
        ctx: DriverContext,
        cnc: Arc<Cnc>,
        clock: NanoClock,
        net: NetworkLinks,
    ) -> Result<Self, String> {
        let to_driver = ManyToOneRingBuffer::new(cnc.to_driver_buffer())?;
        let to_clients = BroadcastTransmitter::new(cnc.to_clients_buffer())?;
        let mut counters = CountersManager::new(
            cnc.counters_metadata_buffer(),
            cnc.counters_values_buffer(),
            (ctx.counter_free_to_reuse_timeout_ns / 1_000_000) as i64,
        );
        let now_ms = clock.epoch_ms();
        let system = SystemCounters::allocate(&mut counters, now_ms)?;
        let errors = ErrorReporter::new(SharedErrorLog::new(cnc.error_log_buffer()), system);
        to_driver.set_consumer_heartbeat_time(now_ms);
        let seed = (now_ms as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ std::process::id() as u64;
        Ok(DriverConductor {
            ctx,
            cnc,
            to_driver,
            to_clients,
            counters,
            errors,
            system,
            clock,
            net,
            net_publications: Vec::new(),
            send_endpoints: Vec::new(),
            receive_endpoints: Vec::new(),
            closing_receive_endpoints: Vec::new(),
            deferred_subscriptions: Vec::new(),
            images: Vec::new(),
            next_endpoint_id: 1,
            clients: Vec::new(),
            publications: Vec::new(),
            publication_links: Vec::new(),
            subscriptions: Vec::new(),
            client_counters: Vec::new(),
            next_session_id: (seed >> 33) as i32,
            next_timer_ns: 0,
            next_re_resolution_check_ns: 0,
            last_heartbeat_ms: now_ms,
            last_command_consumer_position: 0,
            time_of_last_command_progress_ns: 0,
        })
    }

    /// The CnC the conductor serves.
    pub fn cnc(&self) -> &Cnc {
        &self.cnc
    }

    /// The error reporter the network agents share with the conductor.
    pub fn error_reporter(&self) -> ErrorReporter {
        self.errors.clone()
    }

    fn now_ns(&self) -> i64 {
        self.clock.now_ns()
    }

    /// One duty cycle.
    pub fn do_work(&mut self) -> usize {
        let now_ns = self.now_ns();
        let mut work = 0;
        let mut commands = Vec::new();
        work += self
            .to_driver
            .read(|t, body| commands.push((t, body.to_vec())), COMMAND_LIMIT);
        for (t, body) in commands {
            self.on_command(t, &body, now_ns);
        }
        // Limit updates are not counted as work: counted, they would keep the
        // conductor spinning for as long as any stream flows, stealing a core
        // from the publishers and subscribers. The publication window (half a
        // term) covers the conductor's idle back-off many times over.
        let linger_ns = self.ctx.publication_linger_timeout_ns as i64;
        let mut drained = Vec::new();
        for (i, p) in self.publications.iter_mut().enumerate() {
            p.update_publisher_limit();
            // Checked every cycle, not on the timer: subscribers learn that a
            // closed stream is over as soon as they have read it to the end.
            if matches!(p.state, PubState::Draining { .. }) && p.on_time_event(now_ns, linger_ns) {
                drained.push(i);
            }
        }
        for i in drained {
            self.withdraw_ipc_images(i);
            work += 1;
        }
        let connection_timeout_ns = self.ctx.publication_connection_timeout_ns as i64;
        for p in self.net_publications.iter_mut() {
            p.update_publisher_limit(now_ns, connection_timeout_ns);
        }
        while let Ok(ev) = self.net.receiver_events.try_recv() {
            match ev {
                ReceiverEvent::CreateImage {
                    endpoint_id,
                    setup,
                    source,
                } => self.on_create_image(endpoint_id, &setup, source, now_ns),
                ReceiverEvent::EndpointClosed { id } => self.on_receive_endpoint_closed(id),
            }
            work += 1;
        }
        let now_ms = self.clock.epoch_ms();
        if now_ms - self.last_heartbeat_ms >= DRIVER_HEARTBEAT_INTERVAL_MS {
            self.to_driver.set_consumer_heartbeat_time(now_ms);
            self.last_heartbeat_ms = now_ms;
        }
        if now_ns >= self.next_timer_ns {
            self.next_timer_ns = now_ns + self.ctx.timer_interval_ns as i64;
            work += self.on_timer(now_ns, now_ms);
        }
        let re_resolution_interval_ns = self.ctx.re_resolution_check_interval_ns as i64;
        if re_resolution_interval_ns > 0 && now_ns >= self.next_re_resolution_check_ns {
            self.next_re_resolution_check_ns = now_ns + re_resolution_interval_ns;
            work += self.check_for_re_resolutions(now_ns);
        }
        work
    }

    /// Frees everything (driver shutdown).
    pub fn on_close(&mut self) {
        for p in self.publications.drain(..) {
            let _ = std::fs::remove_file(p.logs.path());
        }
        for p in self.net_publications.drain(..) {
            let _ = std::fs::remove_file(p.publication.logs.path());
        }
        for i in self.images.drain(..) {
            let _ = std::fs::remove_file(i.image.logs.path());
        }
        // A clean stop is not a live driver: clients see the driver gone at
        // once, and a new driver may take the directory without waiting out
        // the driver timeout.
        self.to_driver.set_consumer_heartbeat_time(0);
    }

    fn record_error(&mut self, text: &str) {
        self.errors.record(text);
    }

    fn send(&mut self, event: Event) {
        let (t, body) = event.encode();
        if let Err(e) = self.to_clients.transmit(t, &body) {
            self.record_error(&format!("cannot broadcast event {t:#x}: {e}"));
        }
    }

    fn on_command(&mut self, type_id: i32, body: &[u8], now_ns: i64) {
        let cmd = match Command::decode(type_id, body) {
            Ok(c) => c,
            Err(e) => {
                // Logged and counted (Errors), not broadcast: the broadcast
                // goes to every client, and a buggy or hostile writer could
                // flood it until healthy clients are lapped. Whoever cannot
                // encode a command cannot be trusted with its correlation id.
                // Unknown type ids go under one entry: a writer of random
                // garbage would otherwise fill the distinct-error log and
                // crowd out every later, real error.
                let text = if Command::is_known_type(type_id) {
                    format!("malformed command type {type_id:#x}: {e}")
                } else {
                    "malformed command: unknown command type id".to_string()
                };
                self.record_error(&text);
                return;
            }
        };
        let client_id = cmd.client_id();
        // A client exists from its first add or keep-alive (clients send one
        // as they start); a remove or close from a client the driver does
        // not know creates nothing.
        if matches!(
            cmd,
            Command::AddPublication { .. }
                | Command::AddSubscription { .. }
                | Command::AddCounter { .. }
                | Command::ClientKeepalive { .. }
        ) {
            self.ensure_client(client_id);
        }
        let (correlation_id, result) = match cmd {
            Command::AddPublication {
                correlation_id,
                stream_id,
                channel,
                exclusive,
                ..
            } => (
                correlation_id,
                self.on_add_publication(
                    client_id,
                    correlation_id,
                    stream_id,
                    &channel,
                    exclusive,
                    now_ns,
                ),
            ),
            Command::RemovePublication {
                correlation_id,
                registration_id,
                ..
            } => (
                correlation_id,
                self.on_remove_publication(client_id, correlation_id, registration_id, now_ns),
            ),
            Command::AddSubscription {
                correlation_id,
                stream_id,
                channel,
                ..
            } => (
                correlation_id,
                self.on_add_subscription(client_id, correlation_id, stream_id, &channel),
            ),
            Command::RemoveSubscription {
                correlation_id,
                registration_id,
                ..
            } => (
                correlation_id,
                self.on_remove_subscription(client_id, correlation_id, registration_id),
            ),
            Command::AddCounter {
                correlation_id,
                type_id,
                key,
                label,
                ..
            } => (
                correlation_id,
                self.on_add_counter(client_id, correlation_id, type_id, &key, &label),
            ),
            Command::RemoveCounter {
                correlation_id,
                registration_id,
                ..
            } => (
                correlation_id,
                self.on_remove_counter(client_id, correlation_id, registration_id),
            ),
            Command::ClientKeepalive { .. } => {
                if let Some(c) = self.clients.iter().find(|c| c.client_id == client_id) {
                    self.counters
                        .set_counter_value(c.heartbeat_counter_id, self.clock.epoch_ms());
                }
                return;
            }
            Command::ClientClose { .. } => {
                self.release_client(client_id, now_ns);
                return;
            }
            Command::TerminateDriver { correlation_id, .. } => (
                correlation_id,
                Err(CommandError::new(
                    error_code::NOT_SUPPORTED,
                    "driver termination by command is not enabled; stop the driver process instead",
                )),
            ),
        };
        if let Err(e) = result {
            self.reply_error(client_id, correlation_id, e);
        }
    }

    /// A command failed: logged, and its client told.
    fn reply_error(&mut self, client_id: i64, correlation_id: i64, e: CommandError) {
        // The log entry leaves out what differs from one command to the next
        // (the correlation id; the unknown id of a remove), so repeats count
        // under one entry instead of filling the distinct-error log.
        let logged = match e.code {
            error_code::UNKNOWN_PUBLICATION => "remove of an unknown publication".to_string(),
            error_code::UNKNOWN_SUBSCRIPTION => "remove of an unknown subscription".to_string(),
            error_code::UNKNOWN_COUNTER => "remove of an unknown counter".to_string(),
            _ => format!("client {client_id}: {}", e.message),
        };
        self.record_error(&logged);
        self.send(Event::Error {
            correlation_id,
            code: e.code,
            message: e.message,
        });
    }

    fn ensure_client(&mut self, client_id: i64) {
        if self.clients.iter().any(|c| c.client_id == client_id) {
            return;
        }
        let now_ms = self.clock.epoch_ms();
        let label = format!("client-heartbeat: id={client_id}");
        match self.counters.allocate(
            type_id::CLIENT_HEARTBEAT,
            &client_id.to_le_bytes(),
            &label,
            client_id,
            client_id,
            0,
            now_ms,
        ) {
            Ok(id) => {
                self.counters.set_counter_value(id, now_ms);
                self.clients.push(ClientSession {
                    client_id,
                    heartbeat_counter_id: id,
                    closed: false,
                });
                self.send(Event::CounterReady {
                    correlation_id: client_id,
                    counter_id: id,
                });
            }
            Err(e) => self.record_error(&format!(
                "cannot allocate heartbeat counter for client {client_id}: {e}"
            )),
        }
    }

    fn allocate_session_id(&mut self, stream_id: i32) -> i32 {
        loop {
            let id = self.next_session_id;
            self.next_session_id = self.next_session_id.wrapping_add(1);
            if (RESERVED_SESSION_ID_LOW..=RESERVED_SESSION_ID_HIGH).contains(&id) {
                continue;
            }
            if !self
                .publications
                .iter()
                .any(|p| p.stream_id == stream_id && p.session_id == id)
                && !self
                    .net_publications
                    .iter()
                    .any(|p| p.publication.stream_id == stream_id && p.publication.session_id == id)
            {
                return id;
            }
        }
    }

    fn on_add_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        exclusive: bool,
        now_ns: i64,
    ) -> Result<(), CommandError> {
        let (uri, fixed_session) = parse_channel(channel, stream_id, "publications")?;
        let p = uri.params();
        let has_position = p.init_term_id.is_some();
        if has_position && !exclusive {
            return Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': init-term-id/term-id/term-offset are only valid for exclusive publications"),
            ));
        }
        if uri.media() == Media::Udp {
            return self.on_add_network_publication(
                client_id,
                correlation_id,
                stream_id,
                channel,
                &uri,
                fixed_session,
                exclusive,
            );
        }

        if !exclusive {
            // Concurrent publications on the same stream share one log.
            if let Some(existing) = self.publications.iter_mut().find(|x| {
                !x.exclusive
                    && x.is_active()
                    && x.stream_id == stream_id
                    && fixed_session.is_none_or(|s| s == x.session_id)
            }) {
                let shared = SharedPublication {
                    registration_id: existing.registration_id,
                    session_id: existing.session_id,
                    limit_counter_id: existing.pub_limit.id(),
                    term_length: existing.logs.term_length(),
                    log_file: existing.logs.path().display().to_string(),
                };
                shared.check_term_length(channel, p.term_length)?;
                existing.ref_count += 1;
                self.join_publication(client_id, correlation_id, stream_id, shared);
                return Ok(());
            }
        }
        if let Some(s) = fixed_session {
            if self
                .publications
                .iter()
                .any(|x| x.is_active() && x.stream_id == stream_id && x.session_id == s)
            {
                return Err(CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!("channel '{channel}': session-id={s} is already in use on stream {stream_id}"),
                ));
            }
        }

        let (logs, path, session_id, window) = self.create_publication_log(
            correlation_id,
            stream_id,
            channel,
            p,
            fixed_session,
            exclusive,
            false,
        )?;
        let now_ms = self.clock.epoch_ms();
        let pos_name = if exclusive {
            "pub-pos (sampled) exclusive"
        } else {
            "pub-pos (sampled) concurrent"
        };
        let ids = self
            .allocate_stream_counters(
                &[
                    (type_id::PUBLISHER_LIMIT, "pub-lmt"),
                    (type_id::PUBLISHER_POSITION, pos_name),
                ],
                (correlation_id, session_id, stream_id, channel),
                client_id,
                now_ms,
            )
            .map_err(|e| {
                let _ = std::fs::remove_file(&path);
                CommandError::new(error_code::GENERIC_ERROR, e)
            })?;
        let (limit_id, pos_id) = (ids[0], ids[1]);
        let reader = self.counters.reader();
        let publication = IpcPublication::new(
            correlation_id,
            session_id,
            stream_id,
            channel.to_string(),
            exclusive,
            logs,
            reader.counter_ref(limit_id),
            reader.counter_ref(pos_id),
            window as i64,
            now_ns,
        );
        self.publications.push(publication);
        self.publication_links.push(PublicationLink {
            registration_id: correlation_id,
            client_id,
            publication_id: correlation_id,
        });
        self.send(Event::PublicationReady {
            correlation_id,
            registration_id: correlation_id,
            session_id,
            stream_id,
            position_limit_counter_id: limit_id,
            channel_status_counter_id: NULL_COUNTER_ID,
            log_file: path.display().to_string(),
            exclusive,
        });
        // Link every matching subscription.
        let idx = self.publications.len() - 1;
        let subs: Vec<usize> = (0..self.subscriptions.len())
            .filter(|&i| {
                let s = &self.subscriptions[i];
                // An IPC publication feeds IPC subscriptions only: a network
                // subscription gets images from its own endpoint.
                s.udp_endpoint.is_none()
                    && s.stream_id == stream_id
                    && s.session_filter.is_none_or(|f| f == session_id)
            })
            .collect();
        for si in subs {
            self.link_subscriber(idx, si);
        }
        Ok(())
    }

    /// Allocates one stream counter per `(type id, name)` for the stream
    /// `(registration id, session id, stream id, channel)`; if one fails, frees
    /// those already allocated.
    fn allocate_stream_counters(
        &mut self,
        specs: &[(i32, &str)],
        stream: (i64, i32, i32, &str),
        owner_id: i64,
        now_ms: i64,
    ) -> Result<Vec<i32>, String> {
        let (registration_id, session_id, stream_id, channel) = stream;
        let key = stream_counter_key(registration_id, session_id, stream_id, channel);
        let mut ids = Vec::with_capacity(specs.len());
        for &(type_id, name) in specs {
            let label = stream_counter_label(name, registration_id, session_id, stream_id, channel);
            match self.counters.allocate(
                type_id,
                &key,
                &label,
                registration_id,
                owner_id,
                0,
                now_ms,
            ) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    for id in ids {
                        self.counters.free(id, now_ms);
                    }
                    return Err(format!("cannot allocate counter '{label}': {e}"));
                }
            }
        }
        Ok(ids)
    }

    /// Binds a UDP socket for `channel` at `bind`; returns a new endpoint id,
    /// the socket and its effective SO_RCVBUF.
    fn bind_endpoint(
        &mut self,
        bind: SocketAddr,
        p: &sulis_protocol::uri::ChannelParams,
        channel: &str,
    ) -> Result<(u64, UdpTransport, usize), CommandError> {
        let transport = UdpTransport::bind(bind, &self.socket_options(p)).map_err(|e| {
            CommandError::new(
                error_code::GENERIC_ERROR,
                format!("channel '{channel}': {e}"),
            )
        })?;
        let id = self.next_endpoint_id;
        self.next_endpoint_id += 1;
        let rcvbuf = transport.recv_buffer_size().unwrap_or(0);
        Ok((id, transport, rcvbuf))
    }

    /// Links a further publisher to an existing concurrent publication.
    fn join_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        shared: SharedPublication,
    ) {
        self.publication_links.push(PublicationLink {
            registration_id: correlation_id,
            client_id,
            publication_id: shared.registration_id,
        });
        self.send(Event::PublicationReady {
            correlation_id,
            registration_id: shared.registration_id,
            session_id: shared.session_id,
            stream_id,
            position_limit_counter_id: shared.limit_counter_id,
            channel_status_counter_id: NULL_COUNTER_ID,
            log_file: shared.log_file,
            exclusive: false,
        });
    }

    /// Creates a new publication's log file: term length, MTU, session id,
    /// initial position and window from the channel or the driver defaults.
    #[allow(clippy::too_many_arguments)]
    fn create_publication_log(
        &mut self,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        p: &sulis_protocol::uri::ChannelParams,
        fixed_session: Option<i32>,
        exclusive: bool,
        udp: bool,
    ) -> Result<(LogBuffers, PathBuf, i32, usize), CommandError> {
        let has_position = p.init_term_id.is_some();
        let term_length = p.term_length.map(|t| t as usize).unwrap_or(if udp {
            self.ctx.term_buffer_length
        } else {
            self.ctx.ipc_term_buffer_length
        });
        let mtu = p.mtu.map(|m| m as usize).unwrap_or(if udp {
            self.ctx.mtu_length
        } else {
            self.ctx.ipc_mtu_length
        });
        let max_message = compute_max_message_length(term_length);
        if mtu > max_message {
            return Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': mtu {mtu} exceeds the max message length {max_message} of term length {term_length}"),
            ));
        }
        let session_id = fixed_session.unwrap_or_else(|| self.allocate_session_id(stream_id));
        let (initial_term_id, active_term_id, term_offset) = if has_position {
            (
                p.init_term_id.unwrap(),
                p.term_id.unwrap(),
                p.term_offset.unwrap() as i32,
            )
        } else {
            let r = (self.clock.now_ns() as u64
                ^ (correlation_id as u64).wrapping_mul(0x2545_F491_4F6C_DD1D))
            .rotate_left(17) as i32;
            (r, r, 0)
        };
        if term_offset as usize >= term_length {
            return Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': term-offset={term_offset} is not below term length {term_length}"),
            ));
        }
        let window = if self.ctx.publication_term_window_length > 0 {
            self.ctx.publication_term_window_length.min(term_length / 2)
        } else {
            p.pub_wnd
                .map(|w| (w as usize).min(term_length / 2))
                .unwrap_or(term_length / 2)
        };
        let params = LogParams {
            correlation_id,
            term_length,
            page_size: self.ctx.file_page_size,
            mtu,
            initial_term_id,
            active_term_id,
            term_offset,
            session_id,
            stream_id,
            log_type: if exclusive {
                LOG_TYPE_EXCLUSIVE
            } else {
                LOG_TYPE_CONCURRENT
            },
            publication_window: window as i32,
            linger_ns: p
                .linger_ns
                .unwrap_or(self.ctx.publication_linger_timeout_ns) as i64,
            sparse: p.sparse.unwrap_or(self.ctx.term_buffer_sparse_file),
            signal_eos: p.eos.unwrap_or(true),
            tether: true,
        };
        let path = publication_log_file(&self.ctx.dir, correlation_id);
        let logs = LogBuffers::create(&path, &params).map_err(|e| {
            let code = if e.raw_os_error() == Some(libc::ENOSPC)
                || e.to_string().contains("insufficient storage")
            {
                error_code::STORAGE_SPACE
            } else {
                error_code::GENERIC_ERROR
            };
            CommandError::new(code, format!("cannot create log buffer: {e}"))
        })?;
        Ok((logs, path, session_id, window))
    }

    fn link_subscriber(&mut self, pub_index: usize, sub_index: usize) {
        let now_ms = self.clock.epoch_ms();
        let s = &self.subscriptions[sub_index];
        let p = &self.publications[pub_index];
        let join = p.join_position();
        let key = stream_counter_key(s.registration_id, p.session_id, p.stream_id, &s.channel);
        let label = format!(
            "{} @{join}",
            stream_counter_label(
                "sub-pos",
                s.registration_id,
                p.session_id,
                p.stream_id,
                &s.channel
            )
        );
        let (sub_id, client_id, tether, channel) =
            (s.registration_id, s.client_id, s.tether, s.channel.clone());
        let counter_id = match self.counters.allocate(
            type_id::SUBSCRIBER_POSITION,
            &key,
            &label,
            sub_id,
            client_id,
            p.registration_id,
            now_ms,
        ) {
            Ok(id) => id,
            Err(e) => {
                self.record_error(&format!(
                    "cannot allocate subscriber position for subscription {sub_id}: {e}"
                ));
                return;
            }
        };
        let position = self.counters.reader().counter_ref(counter_id);
        position.set_ordered(join);
        let p = &mut self.publications[pub_index];
        p.subscribers.push(IpcSubscriber {
            subscription_id: sub_id,
            client_id,
            position,
            tether,
        });
        let ev = Event::AvailableImage {
            correlation_id: p.registration_id,
            session_id: p.session_id,
            stream_id: p.stream_id,
            subscription_registration_id: sub_id,
            subscriber_position_id: counter_id,
            log_file: p.logs.path().display().to_string(),
            source_identity: "aeron:ipc".to_string(),
        };
        let _ = channel;
        self.send(ev);
    }

    fn on_remove_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        now_ns: i64,
    ) -> Result<(), CommandError> {
        let i = self
            .publication_links
            .iter()
            .position(|l| l.registration_id == registration_id && l.client_id == client_id)
            .ok_or_else(|| {
                CommandError::new(
                    error_code::UNKNOWN_PUBLICATION,
                    format!("unknown publication {registration_id}"),
                )
            })?;
        let link = self.publication_links.swap_remove(i);
        self.release_publication_link(link.publication_id, now_ns);
        self.send(Event::OperationSuccess { correlation_id });
        Ok(())
    }

    fn release_publication_link(&mut self, publication_id: i64, now_ns: i64) {
        if let Some(p) = self
            .publications
            .iter_mut()
            .find(|p| p.registration_id == publication_id)
        {
            p.ref_count = p.ref_count.saturating_sub(1);
            if p.ref_count == 0 {
                p.close(now_ns);
            }
        }
        if let Some(p) = self
            .net_publications
            .iter_mut()
            .find(|p| p.publication.registration_id == publication_id)
        {
            p.ref_count = p.ref_count.saturating_sub(1);
            if p.ref_count == 0 {
                p.close(now_ns);
            }
        }
    }

    fn on_add_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
    ) -> Result<(), CommandError> {
        let (uri, session_filter) = parse_channel(channel, stream_id, "subscriptions")?;
        if uri.media() == Media::Udp {
            return self.on_add_udp_subscription(
                client_id,
                correlation_id,
                stream_id,
                channel,
                &uri,
                session_filter,
            );
        }
        let p = uri.params();
        self.subscriptions.push(SubscriptionLink {
            registration_id: correlation_id,
            client_id,
            stream_id,
            channel: channel.to_string(),
            session_filter,
            tether: p.tether.unwrap_or(true),
            udp_endpoint: None,
        });
        self.send(Event::SubscriptionReady {
            correlation_id,
            channel_status_counter_id: NULL_COUNTER_ID,
        });
        let si = self.subscriptions.len() - 1;
        let pubs: Vec<usize> = (0..self.publications.len())
            .filter(|&i| {
                let x = &self.publications[i];
                x.is_active()
                    && x.stream_id == stream_id
                    && session_filter.is_none_or(|f| f == x.session_id)
            })
            .collect();
        for pi in pubs {
            self.link_subscriber(pi, si);
        }
        Ok(())
    }

    fn unlink_subscription(&mut self, link: &SubscriptionLink) {
        let registration_id = link.registration_id;
        let now_ms = self.clock.epoch_ms();
        for p in self.publications.iter_mut() {
            p.subscribers.retain(|s| {
                if s.subscription_id == registration_id {
                    self.counters.free(s.position.id(), now_ms);
                    false
                } else {
                    true
                }
            });
        }
        if let Some(endpoint_id) = link.udp_endpoint {
            for entry in self.images.iter() {
                let mut subs = entry
                    .image
                    .subscribers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                subs.retain(|s| {
                    if s.subscription_id == registration_id {
                        self.counters.free(s.position.id(), now_ms);
                        false
                    } else {
                        true
                    }
                });
            }
            let _ = self.net.receiver.send(ReceiverCommand::RemoveSubscription {
                endpoint_id,
                stream_id: link.stream_id,
            });
            if let Some(e) = self
                .receive_endpoints
                .iter_mut()
                .find(|e| e.id == endpoint_id)
            {
                e.ref_count -= 1;
            }
            self.close_receive_endpoint_if_unused(endpoint_id);
        }
    }

    /// Closes a receive endpoint once no subscription and no image (active or
    /// lingering) uses it. Until then a subscription on the same address
    /// takes it up again rather than trying to bind a second socket there.
    fn close_receive_endpoint_if_unused(&mut self, endpoint_id: u64) {
        let Some(i) = self
            .receive_endpoints
            .iter()
            .position(|e| e.id == endpoint_id)
        else {
            return;
        };
        if self.receive_endpoints[i].ref_count > 0
            || self
                .images
                .iter()
                .any(|m| m.image.endpoint_id == endpoint_id)
        {
            return;
        }
        let entry = self.receive_endpoints.swap_remove(i);
        self.closing_receive_endpoints.push((entry.id, entry.key));
        let _ = self
            .net
            .receiver
            .send(ReceiverCommand::RemoveEndpoint { id: endpoint_id });
    }

    /// The receiver closed a removed endpoint's socket: subscriptions that
    /// waited for its address can bind it now.
    fn on_receive_endpoint_closed(&mut self, id: u64) {
        let Some(i) = self
            .closing_receive_endpoints
            .iter()
            .position(|(e, _)| *e == id)
        else {
            return;
        };
        let (_, key) = self.closing_receive_endpoints.swap_remove(i);
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred_subscriptions)
            .into_iter()
            .partition(|d| d.key == key);
        self.deferred_subscriptions = waiting;
        for d in ready {
            if let Err(e) =
                self.on_add_subscription(d.client_id, d.correlation_id, d.stream_id, &d.channel)
            {
                self.reply_error(d.client_id, d.correlation_id, e);
            }
        }
    }

    fn on_remove_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
    ) -> Result<(), CommandError> {
        let i = self
            .subscriptions
            .iter()
            .position(|s| s.registration_id == registration_id && s.client_id == client_id)
            .ok_or_else(|| {
                CommandError::new(
                    error_code::UNKNOWN_SUBSCRIPTION,
                    format!("unknown subscription {registration_id}"),
                )
            })?;
        let link = self.subscriptions.swap_remove(i);
        self.unlink_subscription(&link);
        self.send(Event::OperationSuccess { correlation_id });
        Ok(())
    }

    fn on_add_counter(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        counter_type: i32,
        key: &[u8],
        label: &str,
    ) -> Result<(), CommandError> {
        let id = self
            .counters
            .allocate(
                counter_type,
                key,
                label,
                correlation_id,
                client_id,
                0,
                self.clock.epoch_ms(),
            )
            .map_err(|e| CommandError::new(error_code::GENERIC_ERROR, e))?;
        self.client_counters.push(ClientCounter {
            registration_id: correlation_id,
            client_id,
            counter_id: id,
        });
        self.send(Event::CounterReady {
            correlation_id,
            counter_id: id,
        });
        Ok(())
    }

    fn on_remove_counter(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
    ) -> Result<(), CommandError> {
        let i = self
            .client_counters
            .iter()
            .position(|c| c.registration_id == registration_id && c.client_id == client_id)
            .ok_or_else(|| {
                CommandError::new(
                    error_code::UNKNOWN_COUNTER,
                    format!("unknown counter {registration_id}"),
                )
            })?;
        let c = self.client_counters.swap_remove(i);
        self.counters.free(c.counter_id, self.clock.epoch_ms());
        self.send(Event::OperationSuccess { correlation_id });
        self.send(Event::UnavailableCounter {
            registration_id,
            counter_id: c.counter_id,
        });
        Ok(())
    }

    /// Releases everything a client holds (close or time-out).
    fn release_client(&mut self, client_id: i64, now_ns: i64) {
        self.deferred_subscriptions
            .retain(|d| d.client_id != client_id);
        let links: Vec<i64> = self
            .publication_links
            .iter()
            .filter(|l| l.client_id == client_id)
            .map(|l| l.publication_id)
            .collect();
        self.publication_links.retain(|l| l.client_id != client_id);
        for pid in links {
            self.release_publication_link(pid, now_ns);
        }
        let (subs, rest): (Vec<SubscriptionLink>, Vec<SubscriptionLink>) =
            std::mem::take(&mut self.subscriptions)
                .into_iter()
                .partition(|s| s.client_id == client_id);
        self.subscriptions = rest;
        for s in &subs {
            self.unlink_subscription(s);
        }
        let now_ms = self.clock.epoch_ms();
        let counters: Vec<ClientCounter> = {
            let (mine, rest) = std::mem::take(&mut self.client_counters)
                .into_iter()
                .partition(|c| c.client_id == client_id);
            self.client_counters = rest;
            mine
        };
        for c in counters {
            self.counters.free(c.counter_id, now_ms);
            self.send(Event::UnavailableCounter {
                registration_id: c.registration_id,
                counter_id: c.counter_id,
            });
        }
        if let Some(i) = self.clients.iter().position(|c| c.client_id == client_id) {
            let c = self.clients.swap_remove(i);
            self.counters.free(c.heartbeat_counter_id, now_ms);
            let _ = c.closed;
        }
    }

    // ----- UDP: publications, subscriptions, images -----

    fn socket_options(&self, p: &sulis_protocol::uri::ChannelParams) -> SocketOptions {
        SocketOptions {
            so_sndbuf: p
                .so_sndbuf
                .map(|v| v as usize)
                .unwrap_or(self.ctx.socket_sndbuf_length),
            so_rcvbuf: p
                .so_rcvbuf
                .map(|v| v as usize)
                .unwrap_or(self.ctx.socket_rcvbuf_length),
            reuse_address: false,
        }
    }

    /// Parses a UDP channel, resolving its host names (timed into the name
    /// resolver counters: a slow DNS stalls the conductor).
    fn resolve_udp(&mut self, channel: &str, uri: &ChannelUri) -> Result<UdpChannel, CommandError> {
        let resolved = self.timed_name_lookup(|| UdpChannel::from_uri(uri.clone()));
        let udp = resolved.map_err(|e| CommandError::new(error_code::INVALID_CHANNEL, e))?;
        if udp.is_multicast || udp.control.is_some() || udp.endpoint.is_none() {
            return Err(CommandError::new(
                error_code::NOT_SUPPORTED,
                format!("channel '{channel}': only unicast UDP with an endpoint is supported by this driver version (no multicast, control or MDC yet)"),
            ));
        }
        Ok(udp)
    }

    /// Runs a name look-up, timing it into the name resolver counters.
    fn timed_name_lookup<T>(&self, lookup: impl FnOnce() -> T) -> T {
        let start = std::time::Instant::now();
        let result = lookup();
        let took_ns = start.elapsed().as_nanos() as i64;
        let max = self.system.get(SystemCounter::NameResolverMaxTime);
        if took_ns > max.get() {
            max.set_ordered(took_ns);
        }
        if took_ns > NAME_RESOLVER_THRESHOLD_NS {
            self.system
                .increment(SystemCounter::NameResolverTimeThresholdExceeded);
        }
        result
    }

    /// Looks up again the endpoint names of publications that have heard no
    /// status message for the connection timeout: the host may have moved
    /// (a restarted container, a changed DNS record). A changed address is
    /// handed to the sender and counted in 'Resolution changes'; a failed
    /// look-up goes to the error log and the sender keeps the old address.
    fn check_for_re_resolutions(&mut self, now_ns: i64) -> usize {
        let timeout_ns = self.ctx.publication_connection_timeout_ns as i64;
        let mut work = 0;
        for i in 0..self.net_publications.len() {
            let entry = &self.net_publications[i];
            if !entry.is_due_for_re_resolution(now_ns, timeout_ns) {
                continue;
            }
            let name = entry
                .re_resolution
                .as_ref()
                .expect("due: a name")
                .name
                .clone();
            let looked_up =
                self.timed_name_lookup(|| crate::media::udp_channel::resolve("endpoint", &name));
            let entry = &mut self.net_publications[i];
            let r = entry.re_resolution.as_mut().expect("due: a name");
            r.last_lookup_ns = now_ns;
            work += 1;
            match looked_up {
                Ok(new) if new != r.address => {
                    r.address = new;
                    let _ = self.net.sender.send(SenderCommand::ChangeDestination {
                        registration_id: entry.publication.registration_id,
                        destination: new,
                    });
                    self.system.increment(SystemCounter::ResolutionChanges);
                }
                Ok(_) => {}
                Err(e) => self.errors.record(&format!(
                    "channel '{}': looking the endpoint up again: {e}",
                    entry.publication.channel
                )),
            }
        }
        work
    }

    #[allow(clippy::too_many_arguments)]
    fn on_add_network_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        uri: &ChannelUri,
        fixed_session: Option<i32>,
        exclusive: bool,
    ) -> Result<(), CommandError> {
        let udp = self.resolve_udp(channel, uri)?;
        let p = uri.params();
        let destination = udp.endpoint.expect("checked by resolve_udp");
        let key = udp.canonical.clone();
        if let Some(mtu) = p.mtu {
            if mtu as usize > crate::media::udp_transport::MAX_UDP_PAYLOAD_LENGTH {
                return Err(CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!("channel '{channel}': mtu={mtu} exceeds the largest UDP payload 65504"),
                ));
            }
        }
        if !exclusive {
            if let Some(existing) = self.net_publications.iter_mut().find(|x| {
                !x.publication.exclusive
                    && x.is_active()
                    && x.endpoint_key == key
                    && x.publication.stream_id == stream_id
                    && fixed_session.is_none_or(|s| s == x.publication.session_id)
            }) {
                let np = &existing.publication;
                let shared = SharedPublication {
                    registration_id: np.registration_id,
                    session_id: np.session_id,
                    limit_counter_id: np.pub_limit.id(),
                    term_length: np.term_length,
                    log_file: np.logs.path().display().to_string(),
                };
                shared.check_term_length(channel, p.term_length)?;
                existing.ref_count += 1;
                self.join_publication(client_id, correlation_id, stream_id, shared);
                return Ok(());
            }
        }
        if let Some(s) = fixed_session {
            if self.net_publications.iter().any(|x| {
                x.is_active()
                    && x.endpoint_key == key
                    && x.publication.stream_id == stream_id
                    && x.publication.session_id == s
            }) {
                return Err(CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!("channel '{channel}': session-id={s} is already in use on stream {stream_id}"),
                ));
            }
        }

        // The send endpoint: one socket per canonical channel.
        let endpoint_id = match self.send_endpoints.iter_mut().find(|e| e.key == key) {
            Some(e) => {
                e.ref_count += 1;
                e.id
            }
            None => {
                let local = match udp.interface {
                    Some(i) => SocketAddr::new(i.addr, i.port),
                    None => match destination.ip() {
                        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
                        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
                    },
                };
                let (id, transport, rcvbuf) = self.bind_endpoint(local, p, channel)?;
                let _ = self
                    .net
                    .sender
                    .send(SenderCommand::AddEndpoint { id, transport });
                self.send_endpoints.push(EndpointEntry {
                    id,
                    key: key.clone(),
                    ref_count: 1,
                    rcvbuf,
                    rcv_wnd: None,
                    reliable: true,
                });
                id
            }
        };

        let created = self.create_publication_log(
            correlation_id,
            stream_id,
            channel,
            p,
            fixed_session,
            exclusive,
            true,
        );
        let (logs, path, session_id, window) = match created {
            Ok(c) => c,
            Err(e) => {
                self.release_send_endpoint(endpoint_id);
                return Err(e);
            }
        };
        let now_ms = self.clock.epoch_ms();
        let ids = match self.allocate_stream_counters(
            &[
                (type_id::PUBLISHER_LIMIT, "pub-lmt"),
                (type_id::PUBLISHER_POSITION, "pub-pos (sampled)"),
                (type_id::SENDER_POSITION, "snd-pos"),
                (type_id::SENDER_LIMIT, "snd-lmt"),
            ],
            (correlation_id, session_id, stream_id, channel),
            client_id,
            now_ms,
        ) {
            Ok(ids) => ids,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                self.release_send_endpoint(endpoint_id);
                return Err(CommandError::new(error_code::GENERIC_ERROR, e));
            }
        };
        let reader = self.counters.reader();
        let term_length = logs.term_length();
        let publication = Arc::new(NetworkPublication {
            registration_id: correlation_id,
            session_id,
            stream_id,
            channel: channel.to_string(),
            destination,
            exclusive,
            bits: position_bits_to_shift(term_length),
            term_length,
            initial_term_id: logs.initial_term_id(),
            mtu: logs.mtu(),
            ttl: p.ttl.map(|t| t as i32).unwrap_or(0),
            logs,
            pub_limit: reader.counter_ref(ids[0]),
            pub_pos: reader.counter_ref(ids[1]),
            snd_pos: reader.counter_ref(ids[2]),
            snd_lmt: reader.counter_ref(ids[3]),
            time_of_last_sm_ns: AtomicI64::new(i64::MIN),
            status: AtomicU8::new(crate::network_publication::status::ACTIVE),
            signal_eos: p.eos.unwrap_or(true),
        });
        let mut entry = NetworkPublicationEntry::new(publication.clone(), key, window as i64);
        if let Some(name) = p
            .endpoint
            .as_deref()
            .filter(|e| e.parse::<SocketAddr>().is_err())
        {
            entry.re_resolution = Some(ReResolution {
                name: name.to_string(),
                address: destination,
                last_lookup_ns: self.clock.now_ns(),
            });
        }
        self.net_publications.push(entry);
        let _ = self.net.sender.send(SenderCommand::AddPublication {
            endpoint_id,
            publication: publication.clone(),
        });
        self.publication_links.push(PublicationLink {
            registration_id: correlation_id,
            client_id,
            publication_id: correlation_id,
        });
        self.send(Event::PublicationReady {
            correlation_id,
            registration_id: correlation_id,
            session_id,
            stream_id,
            position_limit_counter_id: ids[0],
            channel_status_counter_id: NULL_COUNTER_ID,
            log_file: path.display().to_string(),
            exclusive,
        });
        Ok(())
    }

    fn release_send_endpoint(&mut self, endpoint_id: u64) {
        if let Some(i) = self.send_endpoints.iter().position(|e| e.id == endpoint_id) {
            self.send_endpoints[i].ref_count -= 1;
            if self.send_endpoints[i].ref_count == 0 {
                self.send_endpoints.swap_remove(i);
                let _ = self
                    .net
                    .sender
                    .send(SenderCommand::RemoveEndpoint { id: endpoint_id });
            }
        }
    }

    fn on_add_udp_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        uri: &ChannelUri,
        session_filter: Option<i32>,
    ) -> Result<(), CommandError> {
        let udp = self.resolve_udp(channel, uri)?;
        let p = uri.params();
        let key = udp.canonical.clone();
        if self
            .closing_receive_endpoints
            .iter()
            .any(|(_, k)| *k == key)
        {
            // The receiver still holds the old socket on this address; bind
            // once it has closed it (a few microseconds at most).
            self.deferred_subscriptions.push(DeferredSubscription {
                key,
                client_id,
                correlation_id,
                stream_id,
                channel: channel.to_string(),
            });
            return Ok(());
        }
        let endpoint_id = match self.receive_endpoints.iter_mut().find(|e| e.key == key) {
            Some(e) => {
                if e.ref_count == 0 {
                    // Kept open only for lingering images: the new
                    // subscription's settings apply from now on.
                    e.rcv_wnd = p.rcv_wnd.map(|w| w as usize);
                    e.reliable = p.reliable.unwrap_or(true);
                }
                e.ref_count += 1;
                e.id
            }
            None => {
                let bind = udp.endpoint.expect("checked by resolve_udp");
                let (id, transport, rcvbuf) = self.bind_endpoint(bind, p, channel)?;
                let _ = self
                    .net
                    .receiver
                    .send(ReceiverCommand::AddEndpoint { id, transport });
                self.receive_endpoints.push(EndpointEntry {
                    id,
                    key,
                    ref_count: 1,
                    rcvbuf,
                    rcv_wnd: p.rcv_wnd.map(|w| w as usize),
                    reliable: p.reliable.unwrap_or(true),
                });
                id
            }
        };
        let _ = self.net.receiver.send(ReceiverCommand::AddSubscription {
            endpoint_id,
            stream_id,
        });
        self.subscriptions.push(SubscriptionLink {
            registration_id: correlation_id,
            client_id,
            stream_id,
            channel: channel.to_string(),
            session_filter,
            tether: p.tether.unwrap_or(true),
            udp_endpoint: Some(endpoint_id),
        });
        self.send(Event::SubscriptionReady {
            correlation_id,
            channel_status_counter_id: NULL_COUNTER_ID,
        });
        let si = self.subscriptions.len() - 1;
        let images: Vec<Arc<PublicationImage>> = self
            .images
            .iter()
            .filter(|i| {
                matches!(i.state, ImageState::Active)
                    && i.image.endpoint_id == endpoint_id
                    && i.image.stream_id == stream_id
                    && session_filter.is_none_or(|f| f == i.image.session_id)
            })
            .map(|i| i.image.clone())
            .collect();
        for image in images {
            self.link_image_subscriber(&image, si);
        }
        Ok(())
    }

    /// Gives subscription `sub_index` a position on `image` and tells its client.
    fn link_image_subscriber(&mut self, image: &Arc<PublicationImage>, sub_index: usize) {
        let now_ms = self.clock.epoch_ms();
        let s = &self.subscriptions[sub_index];
        let (sub_id, client_id) = (s.registration_id, s.client_id);
        let join = image
            .min_subscriber_position()
            .unwrap_or(image.rcv_pos.get_volatile());
        let key = stream_counter_key(sub_id, image.session_id, image.stream_id, &s.channel);
        let label = format!(
            "{} @{join}",
            stream_counter_label(
                "sub-pos",
                sub_id,
                image.session_id,
                image.stream_id,
                &s.channel
            )
        );
        let counter_id = match self.counters.allocate(
            type_id::SUBSCRIBER_POSITION,
            &key,
            &label,
            sub_id,
            client_id,
            image.correlation_id,
            now_ms,
        ) {
            Ok(id) => id,
            Err(e) => {
                self.record_error(&format!(
                    "cannot allocate subscriber position for subscription {sub_id}: {e}"
                ));
                return;
            }
        };
        let position = self.counters.reader().counter_ref(counter_id);
        position.set_ordered(join);
        image
            .subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ImageSubscriber {
                subscription_id: sub_id,
                position,
            });
        self.send(Event::AvailableImage {
            correlation_id: image.correlation_id,
            session_id: image.session_id,
            stream_id: image.stream_id,
            subscription_registration_id: sub_id,
            subscriber_position_id: counter_id,
            log_file: image.logs.path().display().to_string(),
            source_identity: image.source.to_string(),
        });
    }

    fn on_create_image(
        &mut self,
        endpoint_id: u64,
        setup: &SetupFrame,
        source: SocketAddr,
        now_ns: i64,
    ) {
        let refuse = |this: &mut Self| {
            this.system.increment(SystemCounter::ImagesRejected);
            let _ = this.net.receiver.send(ReceiverCommand::ImageRefused {
                endpoint_id,
                session_id: setup.session_id,
                stream_id: setup.stream_id,
            });
        };
        let Some(endpoint) = self.receive_endpoints.iter().find(|e| e.id == endpoint_id) else {
            return refuse(self);
        };
        let (rcvbuf, rcv_wnd, reliable) = (endpoint.rcvbuf, endpoint.rcv_wnd, endpoint.reliable);
        let subs: Vec<usize> = (0..self.subscriptions.len())
            .filter(|&i| {
                let s = &self.subscriptions[i];
                s.udp_endpoint == Some(endpoint_id)
                    && s.stream_id == setup.stream_id
                    && s.session_filter.is_none_or(|f| f == setup.session_id)
            })
            .collect();
        let exists = self.images.iter().any(|i| {
            matches!(i.state, ImageState::Active)
                && i.image.endpoint_id == endpoint_id
                && i.image.session_id == setup.session_id
                && i.image.stream_id == setup.stream_id
        });
        if subs.is_empty() || exists {
            return refuse(self);
        }
        let term_length = setup.term_length as usize;
        let mut window = rcv_wnd
            .unwrap_or(self.ctx.initial_window_length)
            .min(term_length / 2);
        if rcvbuf > 0 {
            window = window.min(rcvbuf);
        }
        let window = window & !31;
        let correlation_id = self.next_image_id();
        let params = LogParams {
            correlation_id,
            term_length,
            page_size: self.ctx.file_page_size,
            mtu: setup.mtu as usize,
            initial_term_id: setup.initial_term_id,
            active_term_id: setup.active_term_id,
            term_offset: setup.term_offset,
            session_id: setup.session_id,
            stream_id: setup.stream_id,
            log_type: LOG_TYPE_IMAGE,
            publication_window: 0,
            linger_ns: self.ctx.publication_linger_timeout_ns as i64,
            sparse: self.ctx.term_buffer_sparse_file,
            signal_eos: true,
            tether: true,
        };
        let path = image_log_file(&self.ctx.dir, correlation_id);
        let logs = match LogBuffers::create(&path, &params) {
            Ok(l) => l,
            Err(e) => {
                self.record_error(&format!(
                    "cannot create image log for session {} stream {} from {source}: {e}",
                    setup.session_id, setup.stream_id
                ));
                return refuse(self);
            }
        };
        let now_ms = self.clock.epoch_ms();
        let channel = self.subscriptions[subs[0]].channel.clone();
        let ids = match self.allocate_stream_counters(
            &[
                (type_id::RECEIVER_HWM, "rcv-hwm"),
                (type_id::RECEIVER_POSITION, "rcv-pos"),
            ],
            (correlation_id, setup.session_id, setup.stream_id, &channel),
            0,
            now_ms,
        ) {
            Ok(ids) => ids,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                self.record_error(&format!("cannot allocate image counters: {e}"));
                return refuse(self);
            }
        };
        let bits = position_bits_to_shift(term_length);
        let join = compute_position(
            setup.active_term_id,
            setup.term_offset,
            bits,
            setup.initial_term_id,
        );
        let reader = self.counters.reader();
        let image = Arc::new(PublicationImage {
            correlation_id,
            session_id: setup.session_id,
            stream_id: setup.stream_id,
            endpoint_id,
            channel: channel.clone(),
            source,
            logs,
            bits,
            term_length,
            initial_term_id: setup.initial_term_id,
            join_position: join,
            window_length: window as i32,
            reliable,
            hwm: reader.counter_ref(ids[0]),
            rcv_pos: reader.counter_ref(ids[1]),
            subscribers: Mutex::new(Vec::new()),
            time_of_last_packet_ns: AtomicI64::new(now_ns),
            eos_position: AtomicI64::new(i64::MAX),
            state: AtomicU8::new(crate::publication_image::state::ACTIVE),
        });
        image.hwm.set_ordered(join);
        image.rcv_pos.set_ordered(join);
        for si in subs {
            self.link_image_subscriber(&image, si);
        }
        self.images.push(ImageEntry {
            image: image.clone(),
            state: ImageState::Active,
        });
        let _ = self.net.receiver.send(ReceiverCommand::AddImage { image });
    }

    fn next_image_id(&mut self) -> i64 {
        // Image ids share the correlation id space with client commands:
        // counting down from the top keeps them apart.
        self.next_endpoint_id += 1;
        i64::MAX / 2 - self.next_endpoint_id as i64
    }

    fn on_network_timer(&mut self, now_ns: i64, now_ms: i64) -> usize {
        let mut work = 0;
        let linger_ns = self.ctx.publication_linger_timeout_ns as i64;
        let connection_timeout_ns = self.ctx.publication_connection_timeout_ns as i64;
        for p in self.net_publications.iter_mut() {
            // The channel's linger (written into the log) or the driver's.
            let linger_ns = p
                .publication
                .logs
                .meta()
                .get_i64(LOG_LINGER_TIMEOUT_NS_OFFSET);
            p.on_time_event(now_ns, linger_ns, connection_timeout_ns);
        }
        let mut i = 0;
        while i < self.net_publications.len() {
            if self.net_publications[i].state == NetState::Done {
                let entry = self.net_publications.swap_remove(i);
                let p = entry.publication;
                let _ = self.net.sender.send(SenderCommand::RemovePublication {
                    registration_id: p.registration_id,
                });
                for c in [&p.pub_limit, &p.pub_pos, &p.snd_pos, &p.snd_lmt] {
                    self.counters.free(c.id(), now_ms);
                }
                if let Some(e) = self
                    .send_endpoints
                    .iter()
                    .find(|e| e.key == entry.endpoint_key)
                {
                    let id = e.id;
                    self.release_send_endpoint(id);
                }
                if let Err(e) = std::fs::remove_file(p.logs.path()) {
                    self.system.increment(SystemCounter::FreeFails);
                    self.record_error(&format!("cannot delete {}: {e}", p.logs.path().display()));
                }
                work += 1;
            } else {
                i += 1;
            }
        }

        // Images: withdraw the silent, the finished and the unwanted; free after linger.
        let liveness_ns = self.ctx.image_liveness_timeout_ns as i64;
        let mut withdrawn = Vec::new();
        for entry in self.images.iter_mut() {
            if let ImageState::Active = entry.state {
                let img = &entry.image;
                let silent =
                    now_ns - img.time_of_last_packet_ns.load(Ordering::Acquire) > liveness_ns;
                let unwanted = img
                    .subscribers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_empty();
                if silent || unwanted || img.is_drained() {
                    img.state
                        .store(crate::publication_image::state::INACTIVE, Ordering::Release);
                    entry.state = ImageState::Lingering {
                        until_ns: now_ns + linger_ns,
                    };
                    withdrawn.push(img.clone());
                }
            }
        }
        for img in withdrawn {
            let subs: Vec<i64> = img
                .subscribers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|s| s.subscription_id)
                .collect();
            for sub_id in subs {
                let channel = self
                    .subscriptions
                    .iter()
                    .find(|s| s.registration_id == sub_id)
                    .map(|s| s.channel.clone())
                    .unwrap_or_default();
                self.send(Event::UnavailableImage {
                    correlation_id: img.correlation_id,
                    subscription_registration_id: sub_id,
                    stream_id: img.stream_id,
                    channel,
                });
            }
            work += 1;
        }
        let mut i = 0;
        while i < self.images.len() {
            let done = matches!(self.images[i].state, ImageState::Lingering { until_ns } if now_ns >= until_ns);
            if done {
                let entry = self.images.swap_remove(i);
                let img = entry.image;
                let subs =
                    std::mem::take(&mut *img.subscribers.lock().unwrap_or_else(|p| p.into_inner()));
                for s in subs {
                    self.counters.free(s.position.id(), now_ms);
                }
                self.counters.free(img.hwm.id(), now_ms);
                self.counters.free(img.rcv_pos.id(), now_ms);
                self.close_receive_endpoint_if_unused(img.endpoint_id);
                if let Err(e) = std::fs::remove_file(img.logs.path()) {
                    self.system.increment(SystemCounter::FreeFails);
                    self.record_error(&format!("cannot delete {}: {e}", img.logs.path().display()));
                }
                work += 1;
            } else {
                i += 1;
            }
        }
        work
    }

    fn on_timer(&mut self, now_ns: i64, now_ms: i64) -> usize {
        let mut work = 0;
        let mapped: usize = self
            .publications
            .iter()
            .map(|p| p.logs.mapped_length())
            .chain(
                self.net_publications
                    .iter()
                    .map(|p| p.publication.logs.mapped_length()),
            )
            .chain(self.images.iter().map(|i| i.image.logs.mapped_length()))
            .sum();
        self.system
            .get(SystemCounter::BytesCurrentlyMapped)
            .set_ordered(mapped as i64);
        // Client liveness: the heartbeat counter holds the client's last epoch ms.
        let timeout_ms = (self.ctx.client_liveness_timeout_ns / 1_000_000) as i64;
        let reader = self.counters.reader();
        let dead: Vec<i64> = self
            .clients
            .iter()
            .filter(|c| now_ms > reader.counter_value(c.heartbeat_counter_id) + timeout_ms)
            .map(|c| c.client_id)
            .collect();
        for client_id in dead {
            self.release_client(client_id, now_ns);
            self.system.increment(SystemCounter::ClientTimeouts);
            self.send(Event::ClientTimeout { client_id });
            work += 1;
        }
        // Publications: unblock, drain, linger, free.
        let unblock_ns = self.ctx.publication_unblock_timeout_ns as i64;
        let linger_ns = self.ctx.publication_linger_timeout_ns as i64;
        let mut unblocked = 0;
        let mut drained = Vec::new();
        for (i, p) in self.publications.iter_mut().enumerate() {
            if p.check_for_blocked_publisher(now_ns, unblock_ns) {
                unblocked += 1;
            }
            if p.on_time_event(now_ns, linger_ns) {
                drained.push(i);
            }
        }
        // A closed publication its subscribers have read to the end is
        // unavailable to them now, not after the linger (which only keeps the
        // log mapped for readers still inside a handler).
        for i in drained {
            self.withdraw_ipc_images(i);
            work += 1;
        }
        for _ in 0..unblocked {
            self.system.increment(SystemCounter::UnblockedPublications);
        }
        let mut i = 0;
        while i < self.publications.len() {
            if self.publications[i].state == PubState::Done {
                let p = self.publications.swap_remove(i);
                self.free_publication(p, now_ms);
                work += 1;
            } else {
                i += 1;
            }
        }
        work += self.check_for_blocked_commands(now_ns);
        work += self.on_network_timer(now_ns, now_ms);
        work
    }

    /// A client that died between claiming and committing a command blocks the
    /// ring buffer; after the client liveness timeout without progress the
    /// stuck record is turned into padding.
    fn check_for_blocked_commands(&mut self, now_ns: i64) -> usize {
        let consumer = self.to_driver.consumer_position();
        if consumer == self.last_command_consumer_position
            && self.to_driver.producer_position() > consumer
        {
            if now_ns
                > self.time_of_last_command_progress_ns + self.ctx.client_liveness_timeout_ns as i64
            {
                self.time_of_last_command_progress_ns = now_ns;
                if self.to_driver.unblock() {
                    self.system.increment(SystemCounter::UnblockedCommands);
                    return 1;
                }
            }
        } else {
            self.last_command_consumer_position = consumer;
            self.time_of_last_command_progress_ns = now_ns;
        }
        0
    }

    /// Tells every subscriber of IPC publication `index` its image is gone.
    fn withdraw_ipc_images(&mut self, index: usize) {
        let p = &self.publications[index];
        let events: Vec<Event> = p
            .subscribers
            .iter()
            .map(|s| Event::UnavailableImage {
                correlation_id: p.registration_id,
                subscription_registration_id: s.subscription_id,
                stream_id: p.stream_id,
                channel: self
                    .subscriptions
                    .iter()
                    .find(|x| x.registration_id == s.subscription_id)
                    .map(|x| x.channel.clone())
                    .unwrap_or_default(),
            })
            .collect();
        for ev in events {
            self.send(ev);
        }
    }

    fn free_publication(&mut self, p: IpcPublication, now_ms: i64) {
        // Its subscribers were told at the end of draining (withdraw_ipc_images).
        for s in &p.subscribers {
            self.counters.free(s.position.id(), now_ms);
        }
        self.counters.free(p.pub_limit.id(), now_ms);
        self.counters.free(p.pub_pos.id(), now_ms);
        if let Err(e) = std::fs::remove_file(p.logs.path()) {
            self.system.increment(SystemCounter::FreeFails);
            self.record_error(&format!("cannot delete {}: {e}", p.logs.path().display()));
        }
    }
}

impl Agent for DriverConductor {
    fn do_work(&mut self) -> usize {
        DriverConductor::do_work(self)
    }

    fn on_close(&mut self) {
        DriverConductor::on_close(self)
    }
}
