//! The driver conductor: reads client commands, owns every resource's life
//! cycle, tracks positions and runs the liveness timers.
//!
//! `do_work` reads the clock once, then adds up small duties (commands, stream
//! positions, timers) and returns the total so the idle strategy can back off.

use crate::context::DriverContext;
use crate::ipc_publication::{IpcPublication, IpcSubscriber, PubState};
use crate::system_counters::{
    stream_counter_key, stream_counter_label, type_id, SystemCounter, SystemCounters,
};
use std::path::PathBuf;
use std::time::Instant;
use sulis_concurrent::broadcast::BroadcastTransmitter;
use sulis_concurrent::cnc::{epoch_ms, Cnc};
use sulis_concurrent::counters::{CountersManager, NULL_COUNTER_ID};
use sulis_concurrent::error_log::DistinctErrorLog;
use sulis_concurrent::logbuffer::{LogBuffers, LogParams};
use sulis_concurrent::mpsc_ring_buffer::ManyToOneRingBuffer;
use sulis_protocol::control::{error_code, Command, Event};
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
}

struct ClientCounter {
    registration_id: i64,
    client_id: i64,
    counter_id: i32,
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

/// Parses a channel for this driver (IPC only so far): validates it, checks
/// the `stream-id` parameter against the command's stream id and returns the
/// URI with its fixed session id, if any.
fn parse_ipc_channel(
    channel: &str,
    stream_id: i32,
    what: &str,
) -> Result<(ChannelUri, Option<i32>), CommandError> {
    let uri = ChannelUri::parse(channel)
        .map_err(|e| CommandError::new(error_code::INVALID_CHANNEL, e.to_string()))?;
    if uri.media() != Media::Ipc || uri.is_spy() {
        return Err(CommandError::new(
            error_code::NOT_SUPPORTED,
            format!(
                "channel '{channel}': only aeron:ipc {what} are supported by this driver version"
            ),
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

/// The conductor agent.
pub struct DriverConductor {
    ctx: DriverContext,
    cnc: Cnc,
    to_driver: ManyToOneRingBuffer,
    to_clients: BroadcastTransmitter,
    counters: CountersManager,
    errors: DistinctErrorLog,
    system: SystemCounters,
    clients: Vec<ClientSession>,
    publications: Vec<IpcPublication>,
    publication_links: Vec<PublicationLink>,
    subscriptions: Vec<SubscriptionLink>,
    client_counters: Vec<ClientCounter>,
    next_session_id: i32,
    clock_start: Instant,
    next_timer_ns: i64,
    last_heartbeat_ms: i64,
    publications_dir: PathBuf,
    last_command_consumer_position: i64,
    time_of_last_command_progress_ns: i64,
}

impl DriverConductor {
    /// Builds the conductor over a created (not yet ready) CnC.
    pub fn new(ctx: DriverContext, cnc: Cnc) -> Result<Self, String> {
        let to_driver = ManyToOneRingBuffer::new(cnc.to_driver_buffer())?;
        let to_clients = BroadcastTransmitter::new(cnc.to_clients_buffer())?;
        let mut counters = CountersManager::new(
            cnc.counters_metadata_buffer(),
            cnc.counters_values_buffer(),
            (ctx.counter_free_to_reuse_timeout_ns / 1_000_000) as i64,
        );
        let now_ms = epoch_ms();
        let system = SystemCounters::allocate(&mut counters, now_ms)?;
        let errors = DistinctErrorLog::new(cnc.error_log_buffer());
        to_driver.set_consumer_heartbeat_time(now_ms);
        let seed = (now_ms as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ std::process::id() as u64;
        let publications_dir = ctx.dir.join("publications");
        Ok(DriverConductor {
            ctx,
            cnc,
            to_driver,
            to_clients,
            counters,
            errors,
            system,
            clients: Vec::new(),
            publications: Vec::new(),
            publication_links: Vec::new(),
            subscriptions: Vec::new(),
            client_counters: Vec::new(),
            next_session_id: (seed >> 33) as i32,
            clock_start: Instant::now(),
            next_timer_ns: 0,
            last_heartbeat_ms: now_ms,
            publications_dir,
            last_command_consumer_position: 0,
            time_of_last_command_progress_ns: 0,
        })
    }

    /// The CnC the conductor serves.
    pub fn cnc(&self) -> &Cnc {
        &self.cnc
    }

    fn now_ns(&self) -> i64 {
        self.clock_start.elapsed().as_nanos() as i64
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
        for p in self.publications.iter_mut() {
            p.update_publisher_limit();
        }
        let now_ms = epoch_ms();
        if now_ms - self.last_heartbeat_ms >= DRIVER_HEARTBEAT_INTERVAL_MS {
            self.to_driver.set_consumer_heartbeat_time(now_ms);
            self.last_heartbeat_ms = now_ms;
        }
        if now_ns >= self.next_timer_ns {
            self.next_timer_ns = now_ns + self.ctx.timer_interval_ns as i64;
            work += self.on_timer(now_ns, now_ms);
        }
        work
    }

    /// Frees everything (driver shutdown).
    pub fn on_close(&mut self) {
        for p in self.publications.drain(..) {
            let _ = std::fs::remove_file(p.logs.path());
        }
        // A clean stop is not a live driver: clients see the driver gone at
        // once, and a new driver may take the directory without waiting out
        // the driver timeout.
        self.to_driver.set_consumer_heartbeat_time(0);
    }

    fn record_error(&mut self, text: &str) {
        self.system.increment(SystemCounter::Errors);
        self.errors.record(text, epoch_ms());
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
                // Without a decodable correlation id nobody can be told; log it.
                let correlation_id = if body.len() >= 16 {
                    i64::from_le_bytes(body[8..16].try_into().unwrap())
                } else {
                    -1
                };
                self.record_error(&format!("malformed command type {type_id:#x}: {e}"));
                if correlation_id >= 0 {
                    self.send(Event::Error {
                        correlation_id,
                        code: error_code::MALFORMED_COMMAND,
                        message: format!("malformed command: {e}"),
                    });
                }
                return;
            }
        };
        let client_id = cmd.client_id();
        if !matches!(cmd, Command::ClientClose { .. }) {
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
                        .set_counter_value(c.heartbeat_counter_id, epoch_ms());
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
            self.record_error(&format!(
                "client {client_id} command {correlation_id}: {}",
                e.message
            ));
            self.send(Event::Error {
                correlation_id,
                code: e.code,
                message: e.message,
            });
        }
    }

    fn ensure_client(&mut self, client_id: i64) {
        if self.clients.iter().any(|c| c.client_id == client_id) {
            return;
        }
        let now_ms = epoch_ms();
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
        let (uri, fixed_session) = parse_ipc_channel(channel, stream_id, "publications")?;
        let p = uri.params();
        let has_position = p.init_term_id.is_some();
        if has_position && !exclusive {
            return Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': init-term-id/term-id/term-offset are only valid for exclusive publications"),
            ));
        }

        if !exclusive {
            // Concurrent publications on the same stream share one log.
            if let Some(existing) = self.publications.iter_mut().find(|x| {
                !x.exclusive
                    && x.is_active()
                    && x.stream_id == stream_id
                    && fixed_session.is_none_or(|s| s == x.session_id)
            }) {
                let term_length = p.term_length.map(|t| t as usize);
                if let Some(t) = term_length {
                    if t != existing.logs.term_length() {
                        return Err(CommandError::new(
                            error_code::INVALID_CHANNEL,
                            format!(
                                "channel '{channel}': term-length={t} differs from the existing publication's {}",
                                existing.logs.term_length()
                            ),
                        ));
                    }
                }
                existing.ref_count += 1;
                let ev = Event::PublicationReady {
                    correlation_id,
                    registration_id: existing.registration_id,
                    session_id: existing.session_id,
                    stream_id,
                    position_limit_counter_id: existing.pub_limit.id(),
                    channel_status_counter_id: NULL_COUNTER_ID,
                    log_file: existing.logs.path().display().to_string(),
                    exclusive: false,
                };
                let publication_id = existing.registration_id;
                self.publication_links.push(PublicationLink {
                    registration_id: correlation_id,
                    client_id,
                    publication_id,
                });
                self.send(ev);
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

        let term_length = p
            .term_length
            .map(|t| t as usize)
            .unwrap_or(self.ctx.ipc_term_buffer_length);
        let mtu = p.mtu.map(|m| m as usize).unwrap_or(self.ctx.ipc_mtu_length);
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
            let r = (self.clock_start.elapsed().as_nanos() as u64
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
        let path = self
            .publications_dir
            .join(format!("{correlation_id}.logbuffer"));
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
        let now_ms = epoch_ms();
        let key = stream_counter_key(correlation_id, session_id, stream_id, channel);
        let alloc = |counters: &mut CountersManager, t: i32, name: &str| {
            counters.allocate(
                t,
                &key,
                &stream_counter_label(name, correlation_id, session_id, stream_id, channel),
                correlation_id,
                client_id,
                0,
                now_ms,
            )
        };
        let limit_id = alloc(&mut self.counters, type_id::PUBLISHER_LIMIT, "pub-lmt");
        let pos_id = alloc(
            &mut self.counters,
            type_id::PUBLISHER_POSITION,
            if exclusive {
                "pub-pos (sampled) exclusive"
            } else {
                "pub-pos (sampled) concurrent"
            },
        );
        let (limit_id, pos_id) = match (limit_id, pos_id) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                for id in [a.ok(), b.ok()].into_iter().flatten() {
                    self.counters.free(id, now_ms);
                }
                let _ = std::fs::remove_file(&path);
                return Err(CommandError::new(
                    error_code::GENERIC_ERROR,
                    "counters buffer is full",
                ));
            }
        };
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
                s.stream_id == stream_id && s.session_filter.is_none_or(|f| f == session_id)
            })
            .collect();
        for si in subs {
            self.link_subscriber(idx, si);
        }
        Ok(())
    }

    fn link_subscriber(&mut self, pub_index: usize, sub_index: usize) {
        let now_ms = epoch_ms();
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
    }

    fn on_add_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
    ) -> Result<(), CommandError> {
        let (uri, session_filter) = parse_ipc_channel(channel, stream_id, "subscriptions")?;
        let p = uri.params();
        self.subscriptions.push(SubscriptionLink {
            registration_id: correlation_id,
            client_id,
            stream_id,
            channel: channel.to_string(),
            session_filter,
            tether: p.tether.unwrap_or(true),
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

    fn unlink_subscription(&mut self, registration_id: i64) {
        let now_ms = epoch_ms();
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
        self.subscriptions.swap_remove(i);
        self.unlink_subscription(registration_id);
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
                epoch_ms(),
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
        self.counters.free(c.counter_id, epoch_ms());
        self.send(Event::OperationSuccess { correlation_id });
        self.send(Event::UnavailableCounter {
            registration_id,
            counter_id: c.counter_id,
        });
        Ok(())
    }

    /// Releases everything a client holds (close or time-out).
    fn release_client(&mut self, client_id: i64, now_ns: i64) {
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
        let subs: Vec<i64> = self
            .subscriptions
            .iter()
            .filter(|s| s.client_id == client_id)
            .map(|s| s.registration_id)
            .collect();
        self.subscriptions.retain(|s| s.client_id != client_id);
        for s in subs {
            self.unlink_subscription(s);
        }
        let now_ms = epoch_ms();
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

    fn on_timer(&mut self, now_ns: i64, now_ms: i64) -> usize {
        let mut work = 0;
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
        for p in self.publications.iter_mut() {
            if p.check_for_blocked_publisher(now_ns, unblock_ns) {
                unblocked += 1;
            }
            p.on_time_event(now_ns, linger_ns);
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

    fn free_publication(&mut self, p: IpcPublication, now_ms: i64) {
        for s in &p.subscribers {
            let channel = self
                .subscriptions
                .iter()
                .find(|x| x.registration_id == s.subscription_id)
                .map(|x| x.channel.clone())
                .unwrap_or_default();
            self.send(Event::UnavailableImage {
                correlation_id: p.registration_id,
                subscription_registration_id: s.subscription_id,
                stream_id: p.stream_id,
                channel,
            });
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
