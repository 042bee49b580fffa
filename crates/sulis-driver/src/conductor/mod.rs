//! The driver conductor: reads client commands, owns every resource's life
//! cycle, tracks positions and runs the liveness timers.
//!
//! `do_work` reads the clock once, then adds up small duties (commands, stream
//! positions, timers) and returns the total so the idle strategy can back off.
//!
//! This module holds the agent, command dispatch, the timers and shared
//! helpers; each entity the conductor manages has its own child module,
//! one `impl DriverConductor` block each.

mod clients;
mod destinations;
mod endpoints;
mod images;
mod ipc_publications;
mod network_publications;
mod responses;
mod subscriptions;

use clients::{ClientCounter, ClientSession};
use destinations::DeferredDestination;
use endpoints::EndpointEntry;
use images::ImageEntry;
use ipc_publications::PublicationLink;
use subscriptions::{DeferredSubscription, SubscriptionLink};

use crate::agent::{Agent, ErrorReporter, NanoClock};
use crate::context::DriverContext;
use crate::ipc_publication::IpcPublication;
use crate::lifecycle::PublicationState;
use crate::media::transport::TransportFactory;
use crate::network_publication::NetworkPublicationEntry;
use crate::receiver::{ReceiverCommand, ReceiverEvent};
use crate::sender::{SenderCommand, SenderEvent};
use crate::system_counters::{
    stream_counter_key, stream_counter_label, SystemCounter, SystemCounters,
};
use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use sulis_concurrent::broadcast::BroadcastTransmitter;
use sulis_concurrent::cnc::Cnc;
use sulis_concurrent::counters::CountersManager;
use sulis_concurrent::error_log::SharedErrorLog;
use sulis_concurrent::mpsc_ring_buffer::ManyToOneRingBuffer;
use sulis_protocol::control::{command_type, correlated_header, error_code, Command, Event};
use sulis_protocol::uri::{ChannelUri, SessionIdParam};

/// How often the driver heartbeat in the CnC is refreshed.
const DRIVER_HEARTBEAT_INTERVAL_MS: i64 = 100;
/// Commands read per duty cycle.
const COMMAND_LIMIT: usize = 10;

/// Channels to and from the network agents.
pub struct NetworkLinks {
    /// Commands to the sender.
    pub sender: mpsc::Sender<SenderCommand>,
    /// Commands to the receiver.
    pub receiver: mpsc::Sender<ReceiverCommand>,
    /// Requests from the receiver.
    pub receiver_events: mpsc::Receiver<ReceiverEvent>,
    /// News from the sender.
    pub sender_events: mpsc::Receiver<SenderEvent>,
    /// Makes the endpoints' transports (UDP sockets, or a test's network).
    pub transports: Arc<dyn TransportFactory>,
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
    if uri.is_spy() && what != "subscriptions" {
        return Err(CommandError::new(
            error_code::INVALID_CHANNEL,
            format!("channel '{channel}': aeron-spy: is for subscriptions: {what} cannot spy (drop the prefix)"),
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
        // A publication's: resolved by `tagged_session` against the tagged publication.
        Some(SessionIdParam::Tag(_)) if what == "publications" => None,
        Some(SessionIdParam::Tag(t)) => {
            return Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': session-id=tag:{t}: a subscription's session-id is a number (tags name publications)"),
            ))
        }
        None => None,
    };
    Ok((uri, session))
}

/// A channel's entity tag: the second of its `tags=` (the first is the channel tag).
fn entity_tag(channel: &str) -> Option<i64> {
    ChannelUri::parse(channel)
        .ok()
        .and_then(|u| u.params().tags)
        .and_then(|(_, entity)| entity)
}

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
    /// The keyring and clock of secured channels (`None`: no keyring).
    security: Option<crate::security::SecurityContext>,
    net_publications: Vec<NetworkPublicationEntry>,
    send_endpoints: Vec<EndpointEntry>,
    receive_endpoints: Vec<EndpointEntry>,
    /// Receive endpoints removed whose sockets the receiver has not yet
    /// closed: (id, canonical key).
    closing_receive_endpoints: Vec<(u64, String)>,
    /// Subscriptions waiting for the closing endpoint of their address.
    deferred_subscriptions: Vec<DeferredSubscription>,
    /// Multi-destination subscriptions' destinations removed (alone or with
    /// their endpoint) whose sockets the receiver has not yet closed:
    /// (endpoint id, bound address).
    closing_destinations: Vec<(u64, SocketAddr)>,
    /// ADD_RCV_DESTINATION and REMOVE_RCV_DESTINATION commands waiting for a
    /// closing destination's address, in the order they came.
    deferred_destinations: Vec<DeferredDestination>,
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
        let errors = ErrorReporter::new(SharedErrorLog::new(cnc.error_log_buffer()), system, clock);
        to_driver.set_consumer_heartbeat_time(now_ms);
        let security = match &ctx.keyring_file {
            Some(path) => Some(crate::security::SecurityContext {
                keyring: crate::security::Keyring::load(path)?,
                clock,
                errors: errors.clone(),
                clock_window_s: (ctx.security_clock_window_ns / 1_000_000_000).max(1),
            }),
            None if ctx.security.is_some() => {
                return Err(format!(
                    "security={} needs a keyring: set keyring_file (--keyring-file FILE or SULIS_KEYRING_FILE)",
                    crate::security::SecurityMode::name(ctx.security)
                ))
            }
            None => None,
        };
        if let Some(sec) = &security {
            system
                .get(SystemCounter::SecuritySealingKeyId)
                .set_ordered(sec.keyring.keys().send_id() as i64);
            system.increment(SystemCounter::SecurityKeyringReads);
        }
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
            security,
            net_publications: Vec::new(),
            send_endpoints: Vec::new(),
            receive_endpoints: Vec::new(),
            closing_receive_endpoints: Vec::new(),
            deferred_subscriptions: Vec::new(),
            closing_destinations: Vec::new(),
            deferred_destinations: Vec::new(),
            images: Vec::new(),
            next_endpoint_id: 1,
            clients: Vec::new(),
            publications: Vec::new(),
            publication_links: Vec::new(),
            subscriptions: Vec::new(),
            client_counters: Vec::new(),
            next_session_id: first_session_id(),
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
        // A moved limit counts as work, as in Aeron's conductor: uncounted, the
        // conductor parked up to its longest back-off (1 ms) between moves, and
        // a publisher with a small window (a 1 MiB term's is 512 KiB) waited
        // out each park: one busy IPC stream ran at an eighth of its rate
        // through Aeron's driver. The cost is a conductor that spins while a
        // stream flows, as Aeron's does.
        let mut drained = Vec::new();
        let timer_due = now_ns >= self.next_timer_ns;
        for (i, p) in self.publications.iter_mut().enumerate() {
            if timer_due || !p.is_still() {
                work += p.update_publisher_limit();
            }
            // Checked every cycle, not on the timer: subscribers learn that a
            // closed stream is over as soon as they have read it to the end.
            if p.state.draining_since().is_some() && p.on_time_event(now_ns, p.linger_ns()) {
                drained.push(i);
            }
        }
        for i in drained {
            self.withdraw_ipc_images(i);
            work += 1;
        }
        let connection_timeout_ns = self.ctx.publication_connection_timeout_ns as i64;
        for i in 0..self.net_publications.len() {
            self.sync_flow_control_counters(i);
            let p = &mut self.net_publications[i];
            work += p.update_publisher_limit(now_ns, connection_timeout_ns);
            if p.awaiting_response_connect
                && p.publication.has_receivers(now_ns, connection_timeout_ns)
            {
                work += self.on_response_connected(i);
            }
            let p = &self.net_publications[i];
            // As for IPC: spies learn a closed stream is over once read.
            if p.state.draining_since().is_some() && !p.spies.is_empty() {
                work += self.step_network_publication_close(i, now_ns);
            }
        }
        while let Ok(ev) = self.net.receiver_events.try_recv() {
            match ev {
                ReceiverEvent::CreateImage {
                    endpoint_id,
                    transport_index,
                    setup,
                    source,
                    control,
                } => self.on_create_image(
                    endpoint_id,
                    transport_index,
                    &setup,
                    source,
                    control,
                    now_ns,
                ),
                ReceiverEvent::EndpointClosed { id } => self.on_receive_endpoint_closed(id),
                ReceiverEvent::DestinationClosed {
                    endpoint_id,
                    address,
                } => self.on_receive_destination_closed(endpoint_id, address),
            }
            work += 1;
        }
        while let Ok(ev) = self.net.sender_events.try_recv() {
            match ev {
                SenderEvent::ResponseSetup {
                    response_correlation_id,
                    response_session_id,
                } => self.on_response_setup(response_correlation_id, response_session_id),
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
            Err(_) if command_type::unimplemented_name(type_id).is_some() => {
                self.on_unimplemented_command(type_id, body);
                return;
            }
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
            Command::GetNextAvailableSessionId {
                correlation_id,
                stream_id,
                ..
            } => {
                // As Aeron's: the next id in turn (the reserved range skipped)
                // that no active publication of the stream has; the counter
                // moves on, so the next publication does not take it.
                let session_id = self.allocate_session_id(stream_id);
                self.send(Event::NextAvailableSessionId {
                    correlation_id,
                    session_id,
                });
                return;
            }
            Command::AddDestination {
                correlation_id,
                registration_id,
                channel,
                receive,
                ..
            } => (
                correlation_id,
                self.on_add_destination(
                    client_id,
                    correlation_id,
                    registration_id,
                    &channel,
                    receive,
                ),
            ),
            Command::RemoveDestination {
                correlation_id,
                registration_id,
                channel,
                receive,
                ..
            } => (
                correlation_id,
                self.on_remove_destination(
                    client_id,
                    correlation_id,
                    registration_id,
                    &channel,
                    receive,
                ),
            ),
            Command::RemoveDestinationById {
                correlation_id,
                registration_id,
                destination_registration_id,
                ..
            } => (
                correlation_id,
                self.on_remove_destination_by_id(
                    client_id,
                    correlation_id,
                    registration_id,
                    destination_registration_id,
                ),
            ),
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

    /// One of Aeron's commands this driver does not implement (an Aeron
    /// client may send it): answered with ON_ERROR UNKNOWN_COMMAND_TYPE_ID
    /// addressed to its correlation id, so the client does not wait out its
    /// timeout. Its type says the body starts with Aeron's correlated header;
    /// one too short for that is malformed, logged and counted only.
    fn on_unimplemented_command(&mut self, type_id: i32, body: &[u8]) {
        let name = command_type::unimplemented_name(type_id).unwrap_or("?");
        match correlated_header(body) {
            Some((client_id, correlation_id)) => self.reply_error(
                client_id,
                correlation_id,
                CommandError::new(
                    error_code::UNKNOWN_COMMAND_TYPE_ID,
                    format!("command type {type_id:#x} ({name}) is not supported by this driver"),
                ),
            ),
            None => self.record_error(&format!(
                "malformed command type {type_id:#x} ({name}): {} bytes, shorter than its 16-byte header",
                body.len()
            )),
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
            // Names the command type only: one entry per type.
            error_code::UNKNOWN_COMMAND_TYPE_ID => e.message.clone(),
            _ => format!("client {client_id}: {}", e.message),
        };
        self.record_error(&logged);
        self.send(Event::Error {
            correlation_id,
            code: e.code,
            message: e.message,
        });
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
        let mut unblocked = 0;
        let mut drained = Vec::new();
        for (i, p) in self.publications.iter_mut().enumerate() {
            if p.check_for_blocked_publisher(now_ns, unblock_ns) {
                unblocked += 1;
            }
            // The channel's linger (written into the log) or the driver's.
            if p.on_time_event(now_ns, p.linger_ns()) {
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
            if self.publications[i].state == PublicationState::Done {
                let p = self.publications.swap_remove(i);
                self.free_publication(p, now_ms);
                work += 1;
            } else {
                i += 1;
            }
        }
        work += self.check_for_blocked_commands(now_ns);
        work += self.reload_keyring();
        work += self.on_network_publications_timer(now_ns, now_ms);
        work += self.on_images_timer(now_ns, now_ms);
        work
    }

    /// Reads the keyring again if its file changed: every secured socket
    /// takes the new keys at its next send or receive. A file that cannot be
    /// used is reported and the keys in use stay.
    fn reload_keyring(&mut self) -> usize {
        let Some(security) = &self.security else {
            return 0;
        };
        match security.keyring.refresh() {
            Ok(None) => 0,
            Ok(Some(ids)) => {
                let keys = security.keyring.keys();
                self.system
                    .get(SystemCounter::SecuritySealingKeyId)
                    .set_ordered(keys.send_id() as i64);
                self.system.increment(SystemCounter::SecurityKeyringReads);
                eprintln!(
                    "sulis driver: keyring {} read again: keys {ids:?}, sealing with key {}",
                    security.keyring.path().display(),
                    keys.send_id()
                );
                1
            }
            Err(e) => {
                self.errors
                    .record(&format!("{e} (the keys read before stay in use)"));
                1
            }
        }
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
}

impl Agent for DriverConductor {
    fn do_work(&mut self) -> usize {
        DriverConductor::do_work(self)
    }

    fn on_close(&mut self) {
        DriverConductor::on_close(self)
    }
}

/// This driver's first session id, random as Aeron's
/// (`BitUtil.generateRandomisedId`). Not from the clock and the process
/// id: shifted down to 31 bits those left only the millisecond, and drivers
/// started in the same millisecond (a cluster's members, launched together)
/// handed out the same session ids, so a member receiving the consensus
/// streams of two others on one endpoint took both as one image and never
/// heard the second.
fn first_session_id() -> i32 {
    (sulis_concurrent::bit_util::generate_randomised_id() >> 33) as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use sulis_concurrent::cnc::CncHeader;
    use sulis_concurrent::{broadcast, mpsc_ring_buffer};
    use sulis_protocol::cnc_descriptor::{CncLayout, CNC_FILE};

    /// A conductor over a fresh CnC in its own directory, on a manual clock.
    /// Nothing runs it: a test calls its methods. Removes the directory on drop.
    pub(super) struct TestConductor {
        pub(super) conductor: DriverConductor,
        dir: PathBuf,
    }

    impl TestConductor {
        pub(super) fn new(name: &str) -> TestConductor {
            let mut ctx = DriverContext::default();
            ctx.dir =
                std::env::temp_dir().join(format!("sulis-conductor-{name}-{}", std::process::id()));
            ctx.ipc_term_buffer_length = 64 * 1024;
            ctx.term_buffer_sparse_file = true;
            let _ = std::fs::remove_dir_all(&ctx.dir);
            std::fs::create_dir_all(ctx.dir.join(sulis_protocol::driver_dir::PUBLICATIONS_DIR))
                .unwrap();
            let layout = CncLayout {
                to_driver_len: 64 * 1024 + mpsc_ring_buffer::TRAILER_LENGTH,
                to_clients_len: 64 * 1024 + broadcast::TRAILER_LENGTH,
                counters_metadata_len: 4 * 64 * 1024,
                counters_values_len: 64 * 1024,
                error_log_len: 64 * 1024,
            };
            let header = CncHeader {
                client_liveness_timeout_ns: ctx.client_liveness_timeout_ns as i64,
                start_timestamp_ms: 0,
                pid: std::process::id() as i64,
                page_size: ctx.file_page_size,
            };
            let cnc = Arc::new(Cnc::create(&ctx.dir.join(CNC_FILE), layout, header).unwrap());
            let (sender, _) = mpsc::channel();
            let (receiver, _) = mpsc::channel();
            let (_, receiver_events) = mpsc::channel();
            let (_, sender_events) = mpsc::channel();
            let net = NetworkLinks {
                sender,
                receiver,
                receiver_events,
                sender_events,
                transports: Arc::new(crate::media::memory::MemoryNetwork::new()),
            };
            let dir = ctx.dir.clone();
            let (clock, _) = NanoClock::manual();
            let conductor = DriverConductor::new(ctx, cnc, clock, net).unwrap();
            TestConductor { conductor, dir }
        }
    }

    impl Drop for TestConductor {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// The error of a command that must fail (`CommandError` is not `Debug`).
    pub(super) fn command_error<T>(r: Result<T, CommandError>) -> CommandError {
        match r {
            Ok(_) => panic!("the command succeeded"),
            Err(e) => e,
        }
    }

    /// Drivers started in the same millisecond (and here in one process)
    /// hand out different session ids: three cluster members launched
    /// together once did not, and one member took two others' consensus
    /// streams for one.
    #[test]
    fn drivers_started_in_the_same_millisecond_hand_out_different_session_ids() {
        let firsts: std::collections::HashSet<i32> = (0..8).map(|_| first_session_id()).collect();
        assert_eq!(firsts.len(), 8, "{firsts:?}");
    }

    #[test]
    fn should_return_the_fixed_session_id_of_a_channel() {
        let (uri, session) = parse_channel("aeron:ipc?session-id=42", 7, "publications")
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(uri.media(), sulis_protocol::uri::Media::Ipc);
        assert_eq!(session, Some(42));
        let (_, session) = parse_channel("aeron:ipc?stream-id=7", 7, "publications")
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(session, None);
    }

    #[test]
    fn should_reject_a_channel_that_does_not_parse() {
        let e = command_error(parse_channel("aeron:tcp", 7, "publications"));
        assert_eq!(e.code, error_code::INVALID_CHANNEL);
        assert!(!e.message.is_empty());
    }

    #[test]
    fn should_reject_a_stream_id_parameter_other_than_the_command_stream_id() {
        let e = command_error(parse_channel("aeron:ipc?stream-id=7", 8, "subscriptions"));
        assert_eq!(e.code, error_code::INVALID_CHANNEL);
        assert_eq!(
            e.message,
            "channel 'aeron:ipc?stream-id=7': stream-id=7 does not match the stream id 8 given"
        );
    }

    #[test]
    fn should_take_spies_for_subscriptions_only() {
        let spy = "aeron-spy:aeron:udp?endpoint=localhost:40123";
        let (uri, _) =
            parse_channel(spy, 7, "subscriptions").unwrap_or_else(|e| panic!("{}", e.message));
        assert!(uri.is_spy());
        let e = command_error(parse_channel(spy, 7, "publications"));
        assert_eq!(e.code, error_code::INVALID_CHANNEL);
        assert_eq!(
            e.message,
            "channel 'aeron-spy:aeron:udp?endpoint=localhost:40123': aeron-spy: is for subscriptions: publications cannot spy (drop the prefix)"
        );
    }

    #[test]
    fn should_leave_a_publications_session_tag_to_resolve_and_refuse_a_subscriptions() {
        let (_, session) = parse_channel("aeron:ipc?session-id=tag:5", 7, "publications")
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(
            session, None,
            "resolved against the tagged publication later"
        );
        let e = command_error(parse_channel(
            "aeron:ipc?session-id=tag:5",
            7,
            "subscriptions",
        ));
        assert_eq!(e.code, error_code::INVALID_CHANNEL);
        assert!(
            e.message
                .contains("a subscription's session-id is a number"),
            "{}",
            e.message
        );
        assert_eq!(entity_tag("aeron:ipc?tags=1,2"), Some(2));
        assert_eq!(entity_tag("aeron:ipc?tags=1"), None);
    }
}
