//! The archive conductor: control sessions, recordings and replays, run
//! from one duty cycle ([`ArchiveConductor::do_work`]).
//!
//! The archive is an ordinary client of a media driver. Control requests
//! arrive on its control subscriptions (UDP for remote clients, IPC for
//! local ones) as Aeron Archive's SBE messages; each client has a control
//! session answering on the response channel it named. A recording is a
//! subscription whose images are written block by block into segment files
//! listed in the catalog; a replay is an exclusive publication placed at
//! the recording's position and fed with the recorded frames as they are.

use crate::auth::{
    AllowAll, AllowAllRequests, Authenticator, Authoriser, CredentialsAuthenticator, Decision,
};
use crate::catalog::Catalog;
use crate::checksum::Checksum;
use crate::context::ArchiveContext;
use crate::mark_file::{ArchiveMarkFile, MarkFileClaim, MarkFileFields};
mod delete_segments_session;
mod replication;

use delete_segments_session::DeleteSegmentsSession;

use crate::segment::{recover_stop_position, Geometry, ReadError, RecordingWriter, SegmentReader};
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use sulis_client::{
    Client, ClientContext, Counter, ExclusivePublication, FragmentAssembler, Image, ImageEvent,
    OfferError, Publication, Subscription,
};
use sulis_protocol::archive::channel::{recording_key, strip_channel};
use sulis_protocol::archive::messages::*;
use sulis_protocol::archive::sbe::SbeError;
use sulis_protocol::counters::{
    recording_position_key, recording_position_label, type_id as counter_type,
};

/// Interval at which an authenticated session's connect answer is resent.
const RESEND_INTERVAL: Duration = Duration::from_millis(200);
/// A duty cycle longer than this is counted (Aeron's archive default).
const CYCLE_TIME_THRESHOLD: Duration = Duration::from_secs(1);
/// Control fragments read per subscription and duty cycle.
const CONTROL_FRAGMENT_LIMIT: usize = 10;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SessionState {
    /// Waiting for the response publication to connect.
    Connecting,
    /// Asked the client to answer a challenge.
    Challenged,
    /// Refused: the client is told so until the connect timeout.
    Rejected,
    /// Told the client it is connected; waiting for its first request.
    Authenticated,
    /// Serving requests.
    Active,
    /// To be closed.
    Done,
}

struct ControlSession {
    id: i64,
    connect_correlation_id: i64,
    publication: ExclusivePublication,
    state: SessionState,
    deadline: Instant,
    last_send: Instant,
    /// Which control subscription and image session the requests come from.
    control_subscription: usize,
    request_session_id: i32,
    invalid_version: Option<String>,
    /// What the client connected with.
    credentials: Vec<u8>,
    outbox: VecDeque<Vec<u8>>,
    /// When offers started failing (back pressure or not connected).
    send_failing_since: Option<Instant>,
    _counter: Option<Counter>,
}

impl ControlSession {
    fn queue(&mut self, message: Vec<u8>) {
        self.outbox.push_back(message);
    }

    fn respond(&mut self, correlation_id: i64, relevant_id: i64, code: i32, error: &str) {
        let m = ControlResponse {
            control_session_id: self.id,
            correlation_id,
            relevant_id,
            code,
            version: PROTOCOL_VERSION,
            error_message: error.to_string(),
        };
        self.queue(m.encode());
    }

    fn ok(&mut self, correlation_id: i64, relevant_id: i64) {
        self.respond(correlation_id, relevant_id, response_code::OK, "");
    }

    fn error(&mut self, correlation_id: i64, code: i64, message: &str) {
        self.respond(correlation_id, code, response_code::ERROR, message);
    }

    /// Offers what is queued; false once the session should end (the
    /// client stopped reading or went away).
    fn flush(&mut self, now: Instant, timeout: Duration) -> bool {
        while let Some(m) = self.outbox.front() {
            match self.publication.offer(m) {
                Ok(_) => {
                    self.outbox.pop_front();
                    self.send_failing_since = None;
                }
                Err(OfferError::AdminAction) => continue,
                Err(OfferError::BackPressured) | Err(OfferError::NotConnected) => {
                    let since = *self.send_failing_since.get_or_insert(now);
                    return now - since < timeout;
                }
                Err(_) => return false,
            }
        }
        true
    }
}

struct RecordingSubscription {
    subscription: Subscription,
    key: String,
    original_channel: String,
    stripped_channel: String,
    stream_id: i32,
    auto_stop: bool,
    control_session_id: i64,
    correlation_id: i64,
    /// Extending this recording (else each image is a new recording).
    extend: Option<i64>,
    /// Recording sessions running on its images.
    active: usize,
    /// Stop once its recordings end (auto stop, or stopped by request).
    closing: bool,
}

struct RecordingSession {
    recording_id: i64,
    subscription_id: i64,
    image: Arc<Image>,
    writer: RecordingWriter,
    counter: Counter,
    control_session_id: i64,
    correlation_id: i64,
    /// Stopped by request: end at once.
    aborted: bool,
    /// Live merge (replication): record up to this position, then go on
    /// with this image.
    merge_into: Option<(i64, Arc<Image>)>,
    /// The live image's subscription, kept open while it is recorded.
    live_subscription: Option<Subscription>,
    /// The recording's start position (for its events).
    start_position: i64,
    /// After a live merge that the replay had gone past: the live image's
    /// frames up to here were recorded from the replay and are skipped as
    /// they arrive (the image is never moved past what it received).
    skip_to: Option<i64>,
}

enum ReplayState {
    Connecting { deadline: Instant },
    Replaying,
}

/// The counter a bounded replay may not pass (a counter of the archive's driver).
#[derive(Clone, Copy)]
struct LimitCounter {
    id: i32,
    registration_id: i64,
    /// Its value when last read.
    last: i64,
    /// False once it was freed (or reused): `last` is where it ended.
    open: bool,
}

impl LimitCounter {
    /// Reads the counter; returns where the replay may go.
    fn read(&mut self, counters: &sulis_concurrent::counters::CountersReader) -> i64 {
        if self.open {
            if counters.counter_state(self.id) == sulis_concurrent::counters::RECORD_ALLOCATED
                && counters.counter_registration_id(self.id) == self.registration_id
            {
                self.last = counters.counter_value(self.id);
            } else {
                self.open = false;
            }
        }
        self.last
    }
}

struct ReplaySession {
    id: i64,
    /// Bounded by this counter too (BoundedReplayRequest).
    limit_counter: Option<LimitCounter>,
    recording_id: i64,
    control_session_id: i64,
    correlation_id: i64,
    publication: ExclusivePublication,
    reader: SegmentReader,
    /// Where the replay stops (`None`: follow the live recording).
    end: Option<i64>,
    state: ReplayState,
    buf: Vec<u8>,
    /// A block read but not yet published (back pressure).
    pending: usize,
    done: bool,
}

/// A recording request's parameters.
struct StartRecording {
    control_session_id: i64,
    correlation_id: i64,
    stream_id: i32,
    channel: String,
    auto_stop: bool,
    extend: Option<i64>,
    /// The publication is on this driver (`SourceLocation.LOCAL`): a UDP
    /// one is recorded by spying on its log, not through the receiver.
    local: bool,
}

/// The archive's state and duty cycle.
pub struct ArchiveConductor {
    ctx: ArchiveContext,
    client: Client,
    archive_id: i64,
    catalog: Catalog,
    control: Vec<Subscription>,
    assemblers: Vec<FragmentAssembler>,
    sessions: BTreeMap<i64, ControlSession>,
    next_session_id: i64,
    recording_subscriptions: Vec<RecordingSubscription>,
    recordings: Vec<RecordingSession>,
    replays: Vec<ReplaySession>,
    next_replay_id: i64,
    replications: Vec<replication::Replication>,
    next_replication_id: i64,
    /// Segment files being deleted, oldest request first.
    deletions: VecDeque<DeleteSegmentsSession>,
    /// Recordings that moved to their live image this cycle (live merge),
    /// with the position where they did.
    merged: Vec<(i64, i64)>,
    errors: Vec<String>,
    error_count: u64,
    mark_file: ArchiveMarkFile,
    last_activity: Instant,
    authenticator: Box<dyn Authenticator>,
    authoriser: Box<dyn Authoriser>,
    /// Sessions refused by the authenticator so far.
    rejected_sessions: u64,
    /// The archive-wide counters in the driver's CnC (Aeron's types 101, 102, 106, 109, 111, 112).
    counters: ArchiveCounters,
    /// Recording events, when enabled: best effort, as Aeron's (an event
    /// that finds no room is dropped, never waited for).
    events: Option<Publication>,
}

/// The archive's own counters, as Aeron's archive allocates them.
struct ArchiveCounters {
    errors: Option<Counter>,
    control_sessions: Option<Counter>,
    recording_sessions: Option<Counter>,
    replay_sessions: Option<Counter>,
    write_bytes: Option<Counter>,
    read_bytes: Option<Counter>,
    max_cycle_time: Option<Counter>,
    cycle_time_exceeded: Option<Counter>,
    max_write_time: Option<Counter>,
    total_write_time: Option<Counter>,
    max_read_time: Option<Counter>,
    total_read_time: Option<Counter>,
    /// sulis's: the directory, in the label (none when it does not fit one)
    _directory: Option<Counter>,
}

impl ArchiveCounters {
    fn new(client: &Client, archive_id: i64, archive_dir: &std::path::Path) -> ArchiveCounters {
        let key = archive_id.to_le_bytes();
        let add = |type_id: i32, label: &str| {
            client
                .add_counter(type_id, &key, &format!("{label} - archiveId={archive_id}"))
                .ok()
        };
        // Announced only when the whole path fits a label: a truncated one would name another directory.
        let dir = std::fs::canonicalize(archive_dir).unwrap_or_else(|_| archive_dir.to_path_buf());
        let directory = dir
            .to_str()
            .map(|d| format!("Archive Directory - archiveId={archive_id} dir={d}"))
            .filter(|label| label.len() <= sulis_concurrent::counters::MAX_LABEL_LENGTH)
            .and_then(|label| {
                client
                    .add_counter(counter_type::SULIS_ARCHIVE_DIRECTORY, &key, &label)
                    .ok()
            });
        if let Some(c) = &directory {
            c.set(archive_id);
        }
        ArchiveCounters {
            _directory: directory,
            errors: add(counter_type::ARCHIVE_ERROR_COUNT, "Archive Errors"),
            control_sessions: add(
                counter_type::ARCHIVE_CONTROL_SESSIONS,
                "Archive Control Sessions",
            ),
            recording_sessions: add(
                counter_type::ARCHIVE_RECORDING_SESSIONS,
                "Archive Recording Sessions",
            ),
            replay_sessions: add(
                counter_type::ARCHIVE_REPLAY_SESSIONS,
                "Archive Replay Sessions",
            ),
            write_bytes: add(
                counter_type::ARCHIVE_RECORDER_TOTAL_WRITE_BYTES,
                "archive-recorder total write bytes",
            ),
            read_bytes: add(
                counter_type::ARCHIVE_REPLAYER_TOTAL_READ_BYTES,
                "archive-replayer total read bytes",
            ),
            // One thread runs the conductor, recorder and replayer: SHARED.
            max_cycle_time: add(
                counter_type::ARCHIVE_MAX_CYCLE_TIME,
                "archive-conductor max cycle time in ns: SHARED",
            ),
            cycle_time_exceeded: add(
                counter_type::ARCHIVE_CYCLE_TIME_THRESHOLD_EXCEEDED,
                &format!(
                    "archive-conductor work cycle time exceeded count: threshold={}ns SHARED",
                    CYCLE_TIME_THRESHOLD.as_nanos()
                ),
            ),
            max_write_time: add(
                counter_type::ARCHIVE_RECORDER_MAX_WRITE_TIME,
                "archive-recorder max write time in ns",
            ),
            total_write_time: add(
                counter_type::ARCHIVE_RECORDER_TOTAL_WRITE_TIME,
                "archive-recorder total write time in ns",
            ),
            max_read_time: add(
                counter_type::ARCHIVE_REPLAYER_MAX_READ_TIME,
                "archive-replayer max read time in ns",
            ),
            total_read_time: add(
                counter_type::ARCHIVE_REPLAYER_TOTAL_READ_TIME,
                "archive-replayer total read time in ns",
            ),
        }
    }

    /// Adds one timed operation of `ns` to a total and a maximum.
    fn time(total: &Option<Counter>, max: &Option<Counter>, ns: i64) {
        Self::add(total, ns);
        if let Some(m) = max {
            if ns > m.get() {
                m.set(ns);
            }
        }
    }

    fn set(c: &Option<Counter>, value: i64) {
        if let Some(c) = c {
            c.set(value);
        }
    }

    fn add(c: &Option<Counter>, delta: i64) {
        if let Some(c) = c {
            c.set(c.get() + delta);
        }
    }
}

impl ArchiveConductor {
    /// Opens the archive directory (recovering recordings an earlier run
    /// left unfinished) and subscribes to the control channels.
    pub fn new(ctx: ArchiveContext) -> Result<ArchiveConductor, String> {
        Self::with_authoriser(ctx, Box::new(AllowAllRequests))
    }

    /// As [`ArchiveConductor::new`], deciding which requests a session may
    /// make with `authoriser`.
    pub fn with_authoriser(
        ctx: ArchiveContext,
        authoriser: Box<dyn Authoriser>,
    ) -> Result<ArchiveConductor, String> {
        let authenticator: Box<dyn Authenticator> = match &ctx.credentials {
            Some(credentials) => Box::new(CredentialsAuthenticator {
                credentials: credentials.clone(),
                challenge: ctx.challenge.clone(),
                challenge_response: ctx.challenge_response.clone(),
            }),
            None => Box::new(AllowAll),
        };
        Self::with_auth(ctx, authenticator, authoriser)
    }

    /// As [`ArchiveConductor::new`], deciding who may connect with `authenticator`.
    pub fn with_authenticator(
        ctx: ArchiveContext,
        authenticator: Box<dyn Authenticator>,
    ) -> Result<ArchiveConductor, String> {
        Self::with_auth(ctx, authenticator, Box::new(AllowAllRequests))
    }

    fn with_auth(
        ctx: ArchiveContext,
        authenticator: Box<dyn Authenticator>,
        authoriser: Box<dyn Authoriser>,
    ) -> Result<ArchiveConductor, String> {
        ctx.conclude()?;
        std::fs::create_dir_all(&ctx.archive_dir)
            .map_err(|e| format!("cannot create {}: {e}", ctx.archive_dir.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let _ =
                std::fs::set_permissions(&ctx.archive_dir, std::fs::Permissions::from_mode(0o700));
        }
        // The directory is claimed before anything in it is read or
        // written: a second archive started on a live one changes nothing.
        let claim = MarkFileClaim::claim(&ctx.archive_dir, now_ms())?;
        let mut catalog = Catalog::open(
            &ctx.archive_dir,
            ctx.catalog_capacity,
            ctx.catalog_file_sync_level,
        )
        .map_err(|e| e.to_string())?;
        catalog.set_checksum(ctx.record_checksum);
        let mut errors: Vec<String> = catalog.problems().to_vec();
        errors.extend(delete_segments_session::delete_leftovers(&ctx.archive_dir));
        recover(
            &ctx.archive_dir,
            &mut catalog,
            ctx.record_checksum,
            &mut errors,
        )?;
        let client = Client::connect(ClientContext {
            dir: ctx.driver_dir.clone(),
            driver_timeout: ctx.driver_timeout,
            name: "sulis-archive".into(),
            interrupt: None,
        })
        .map_err(|e| {
            format!(
                "archive cannot connect to the driver in {}: {e}",
                ctx.driver_dir.display()
            )
        })?;
        let archive_id = ctx.archive_id.unwrap_or_else(|| client.client_id());
        let mut mark_file = claim.create(&MarkFileFields {
            archive_id,
            control_channel: ctx.control_channel.as_deref().unwrap_or(""),
            control_stream_id: ctx.control_stream_id,
            local_control_channel: &ctx.local_control_channel,
            local_control_stream_id: ctx.local_control_stream_id,
            aeron_directory: &ctx.driver_dir.display().to_string(),
            error_buffer_length: sulis_protocol::archive::mark_file::DEFAULT_ERROR_BUFFER_LENGTH,
            now_ms: now_ms(),
        })?;
        for e in &errors {
            mark_file.record_error(e, now_ms());
        }
        let mut control = Vec::new();
        if let Some(channel) = &ctx.control_channel {
            control.push(
                client
                    .add_subscription(channel, ctx.control_stream_id)
                    .map_err(|e| format!("control channel '{channel}': {e}"))?,
            );
        }
        control.push(
            client
                .add_subscription(&ctx.local_control_channel, ctx.local_control_stream_id)
                .map_err(|e| {
                    format!("local control channel '{}': {e}", ctx.local_control_channel)
                })?,
        );
        let assemblers = control.iter().map(|_| FragmentAssembler::new()).collect();
        let events = if ctx.recording_events_enabled {
            let channel = &ctx.recording_events_channel;
            Some(
                client
                    .add_publication(channel, ctx.recording_events_stream_id)
                    .map_err(|e| format!("recording events channel '{channel}': {e}"))?,
            )
        } else {
            None
        };
        let counters = ArchiveCounters::new(&client, archive_id, &ctx.archive_dir);
        ArchiveCounters::set(&counters.errors, errors.len() as i64);
        let seed = (now_ms() as u64 ^ (std::process::id() as u64) << 20) & 0x3fff_ffff;
        Ok(ArchiveConductor {
            ctx,
            client,
            archive_id,
            catalog,
            control,
            assemblers,
            sessions: BTreeMap::new(),
            next_session_id: seed as i64,
            recording_subscriptions: Vec::new(),
            recordings: Vec::new(),
            replays: Vec::new(),
            next_replay_id: 1,
            replications: Vec::new(),
            next_replication_id: seed as i64,
            deletions: VecDeque::new(),
            merged: Vec::new(),
            error_count: errors.len() as u64,
            errors,
            mark_file,
            last_activity: Instant::now(),
            authenticator,
            authoriser,
            rejected_sessions: 0,
            counters,
            events,
        })
    }

    /// The archive's id.
    pub fn archive_id(&self) -> i64 {
        self.archive_id
    }

    /// Errors recorded so far (most recent last; the oldest are dropped past 1000).
    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// How many errors were recorded.
    pub fn error_count(&self) -> u64 {
        self.error_count
    }

    fn record_error(&mut self, message: String) {
        self.mark_file.record_error(&message, now_ms());
        self.error_count += 1;
        ArchiveCounters::set(&self.counters.errors, self.error_count as i64);
        if self.errors.len() >= 1000 {
            self.errors.remove(0);
        }
        self.errors.push(message);
    }

    /// One duty cycle; returns the work done (0: idle).
    pub fn do_work(&mut self) -> usize {
        let now = Instant::now();
        let mut work = 0;
        if now - self.last_activity >= Duration::from_secs(1) {
            self.last_activity = now;
            self.mark_file.update_activity(now_ms());
        }
        work += self.on_image_events();
        work += self.poll_control(now);
        work += self.run_sessions(now);
        work += self.run_recordings();
        work += self.run_replays(now);
        work += self.run_replications(now);
        work += self.run_deletions();
        ArchiveCounters::set(&self.counters.control_sessions, self.sessions.len() as i64);
        ArchiveCounters::set(
            &self.counters.recording_sessions,
            self.recordings.len() as i64,
        );
        ArchiveCounters::set(&self.counters.replay_sessions, self.replays.len() as i64);
        let cycle = now.elapsed();
        if let Some(m) = &self.counters.max_cycle_time {
            if cycle.as_nanos() as i64 > m.get() {
                m.set(cycle.as_nanos() as i64);
            }
        }
        if cycle > CYCLE_TIME_THRESHOLD {
            ArchiveCounters::add(&self.counters.cycle_time_exceeded, 1);
        }
        work
    }

    /// Stops everything: recordings end (stop positions written), replays
    /// and sessions close.
    pub fn close(&mut self) {
        for i in 0..self.recordings.len() {
            self.recordings[i].aborted = true;
        }
        self.run_recordings();
        // Dropping a replication stops its worker, which stops the source's replay.
        self.replications.clear();
        self.replays.clear();
        while !self.deletions.is_empty() {
            self.run_deletions();
        }
        self.sessions.clear();
        self.recording_subscriptions.clear();
        let _ = self.catalog.flush();
        self.mark_file.close();
        self.client.close();
    }

    // -- control ------------------------------------------------------------

    fn poll_control(&mut self, now: Instant) -> usize {
        let mut messages: Vec<(usize, i32, Vec<u8>)> = Vec::new();
        for (i, sub) in self.control.iter_mut().enumerate() {
            let assembler = &mut self.assemblers[i];
            let _ = sub.poll(
                |payload, header| {
                    if FragmentAssembler::is_unfragmented(header) {
                        messages.push((i, header.session_id(), payload.to_vec()));
                    } else if let Some(m) = assembler.on_fragment(payload, header) {
                        messages.push((i, header.session_id(), m.payload));
                    }
                    Ok::<(), ()>(())
                },
                CONTROL_FRAGMENT_LIMIT,
            );
        }
        let work = messages.len();
        for (sub, image_session, m) in messages {
            self.on_control_message(sub, image_session, &m, now);
        }
        work
    }

    fn on_control_message(&mut self, sub: usize, image_session: i32, m: &[u8], now: Instant) {
        let header = match control_header(m) {
            Ok(h) => h,
            Err(e) => return self.record_error(format!("control message dropped: {e}")),
        };
        match header.template_id {
            AuthConnectRequest::TEMPLATE_ID => match AuthConnectRequest::decode(m) {
                Ok(r) => self.on_connect(
                    sub,
                    image_session,
                    r.correlation_id,
                    r.response_stream_id,
                    r.version,
                    &r.response_channel,
                    r.encoded_credentials,
                    now,
                ),
                Err(e) => self.record_error(format!("connect request dropped: {e}")),
            },
            ConnectRequest::TEMPLATE_ID => match ConnectRequest::decode(m) {
                Ok(r) => self.on_connect(
                    sub,
                    image_session,
                    r.correlation_id,
                    r.response_stream_id,
                    r.version,
                    &r.response_channel,
                    Vec::new(),
                    now,
                ),
                Err(e) => self.record_error(format!("connect request dropped: {e}")),
            },
            _ => self.on_request(sub, image_session, header.template_id, m, now),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_connect(
        &mut self,
        sub: usize,
        image_session: i32,
        correlation_id: i64,
        response_stream_id: i32,
        version: i32,
        response_channel: &str,
        credentials: Vec<u8>,
        now: Instant,
    ) {
        let channel = match response_publication_channel(response_channel, &self.ctx) {
            Ok(c) => c,
            Err(e) => {
                return self.record_error(format!(
                    "connect request {correlation_id}: response channel '{response_channel}': {e}"
                ))
            }
        };
        let publication = match self.client.add_exclusive_publication(&channel, response_stream_id) {
            Ok(p) => p,
            Err(e) => {
                return self.record_error(format!(
                    "connect request {correlation_id}: cannot publish responses on '{channel}' stream {response_stream_id}: {e}"
                ))
            }
        };
        let id = self.next_session_id;
        self.next_session_id += 1;
        let invalid_version = (version >> 16 != 1).then(|| {
            format!(
                "invalid client version {}, archive is {}",
                version_string(version),
                version_string(PROTOCOL_VERSION)
            )
        });
        let counter = self
            .client
            .add_counter(
                counter_type::ARCHIVE_CONTROL_SESSION,
                &[self.archive_id.to_le_bytes(), id.to_le_bytes()].concat(),
                &format!(
                    "control-session: sessionId={image_session} - archiveId={}",
                    self.archive_id
                ),
            )
            .ok();
        if let Some(c) = &counter {
            c.set(id);
        }
        self.sessions.insert(
            id,
            ControlSession {
                id,
                connect_correlation_id: correlation_id,
                publication,
                state: SessionState::Connecting,
                deadline: now + self.ctx.connect_timeout,
                last_send: now - RESEND_INTERVAL,
                control_subscription: sub,
                request_session_id: image_session,
                invalid_version,
                credentials,
                outbox: VecDeque::new(),
                send_failing_since: None,
                _counter: counter,
            },
        );
    }

    fn run_sessions(&mut self, now: Instant) -> usize {
        let mut work = 0;
        let timeout = self.ctx.connect_timeout;
        let ping_interval = self.ctx.session_liveness_check_interval;
        let mut refused = Vec::new();
        for s in self.sessions.values_mut() {
            match s.state {
                SessionState::Connecting => {
                    if s.publication.is_connected() {
                        s.deadline = now + timeout;
                        s.state = match self.authenticator.on_connect(s.id, &s.credentials) {
                            Decision::Accept => SessionState::Authenticated,
                            Decision::Reject => {
                                refused.push(s.id);
                                SessionState::Rejected
                            }
                            Decision::Challenge(challenge) => {
                                s.queue(
                                    Challenge {
                                        control_session_id: s.id,
                                        correlation_id: s.connect_correlation_id,
                                        version: PROTOCOL_VERSION,
                                        encoded_challenge: challenge,
                                    }
                                    .encode(),
                                );
                                SessionState::Challenged
                            }
                        };
                        work += 1;
                    } else if now >= s.deadline {
                        s.state = SessionState::Done;
                    }
                }
                SessionState::Challenged => {
                    if now >= s.deadline {
                        s.state = SessionState::Done;
                    }
                }
                SessionState::Rejected => {
                    if now - s.last_send >= RESEND_INTERVAL && s.outbox.is_empty() {
                        s.last_send = now;
                        s.respond(
                            s.connect_correlation_id,
                            error_code::AUTHENTICATION_REJECTED,
                            response_code::ERROR,
                            "authentication rejected",
                        );
                    }
                    if now >= s.deadline {
                        s.state = SessionState::Done;
                    }
                }
                SessionState::Authenticated => {
                    if now - s.last_send >= RESEND_INTERVAL && s.outbox.is_empty() {
                        s.last_send = now;
                        match s.invalid_version.clone() {
                            Some(message) => s.respond(
                                s.connect_correlation_id,
                                s.id,
                                response_code::ERROR,
                                &message,
                            ),
                            None => s.ok(s.connect_correlation_id, s.id),
                        }
                        work += 1;
                    }
                    if now >= s.deadline {
                        s.state = SessionState::Done;
                    }
                }
                SessionState::Active => {
                    if now - s.last_send >= ping_interval && s.outbox.is_empty() {
                        s.last_send = now;
                        s.queue(
                            Ping {
                                control_session_id: s.id,
                            }
                            .encode(),
                        );
                    }
                }
                SessionState::Done => {}
            }
            if s.state != SessionState::Done && !s.outbox.is_empty() {
                work += 1;
                if !s.flush(now, timeout) {
                    s.state = SessionState::Done;
                }
            }
        }
        for id in refused {
            self.rejected_sessions += 1;
            self.record_error(format!(
                "control session {id}: authentication rejected ({} so far)",
                self.rejected_sessions
            ));
        }
        let before = self.sessions.len();
        self.sessions.retain(|_, s| s.state != SessionState::Done);
        work + before - self.sessions.len()
    }

    /// Sessions the authenticator refused so far.
    pub fn rejected_sessions(&self) -> u64 {
        self.rejected_sessions
    }

    fn on_request(
        &mut self,
        sub: usize,
        image_session: i32,
        template_id: u16,
        m: &[u8],
        now: Instant,
    ) {
        // Every request starts with the control session id, and all but
        // CloseSessionRequest with a correlation id after it.
        if m.len() < 8 + 8 {
            return self.record_error(format!(
                "control message (template {template_id}) of {} bytes dropped: too short for a request",
                m.len()
            ));
        }
        let session_id = i64::from_le_bytes(m[8..16].try_into().unwrap());
        let correlation_id = if m.len() >= 24 {
            i64::from_le_bytes(m[16..24].try_into().unwrap())
        } else {
            NULL_VALUE
        };
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return self.record_error(format!(
                "request (template {template_id}, correlation {correlation_id}) for unknown control session {session_id} dropped"
            ));
        };
        // A session is its client's: requests naming it count only from the
        // stream that opened it (Aeron drops those of another image).
        if session.control_subscription != sub || session.request_session_id != image_session {
            let opened_by = session.request_session_id;
            return self.record_error(format!(
                "request (template {template_id}, correlation {correlation_id}) for control session {session_id} \
                 came from stream session {image_session}, not {opened_by} that opened it: dropped"
            ));
        }
        if template_id == ChallengeResponse::TEMPLATE_ID
            && session.state == SessionState::Challenged
        {
            match ChallengeResponse::decode(m) {
                Ok(r) => {
                    let decision = self
                        .authenticator
                        .on_challenge_response(session_id, &r.encoded_credentials);
                    let s = self.session(session_id);
                    // Answers now go to the challenge response's correlation id.
                    s.connect_correlation_id = correlation_id;
                    s.last_send = now - RESEND_INTERVAL;
                    if decision == Decision::Accept {
                        s.state = SessionState::Authenticated;
                    } else {
                        s.state = SessionState::Rejected;
                        self.rejected_sessions += 1;
                        let n = self.rejected_sessions;
                        self.record_error(format!(
                            "control session {session_id}: challenge answered wrongly, authentication rejected ({n} so far)"
                        ));
                    }
                }
                Err(e) => self.record_error(format!("challenge response dropped: {e}")),
            }
            return;
        }
        match session.state {
            SessionState::Authenticated if session.invalid_version.is_none() => {
                session.state = SessionState::Active;
                session.last_send = now;
            }
            SessionState::Active => {}
            // Requests before the session is connected are dropped, as Aeron's.
            _ => return,
        }
        let name = template_name(template_id).unwrap_or("unknown request");
        let principal = &self.sessions[&session_id].credentials;
        if !self.authoriser.is_authorised(principal, template_id, name) {
            let message = format!("unauthorised action: {name}");
            self.session(session_id).error(
                correlation_id,
                error_code::UNAUTHORISED_ACTION,
                &message,
            );
            return self.record_error(format!("control session {session_id}: {message} refused"));
        }
        if let Err(e) = self.dispatch(template_id, m, session_id, correlation_id) {
            let message = format!("malformed request: {e}");
            if let Some(s) = self.sessions.get_mut(&session_id) {
                s.error(correlation_id, error_code::GENERIC, &message);
            }
            self.record_error(format!("control session {session_id}: {message}"));
        }
    }

    fn session(&mut self, id: i64) -> &mut ControlSession {
        self.sessions
            .get_mut(&id)
            .expect("request from a live session")
    }

    fn dispatch(&mut self, template_id: u16, m: &[u8], sid: i64, k: i64) -> Result<(), SbeError> {
        match template_id {
            KeepAliveRequest::TEMPLATE_ID => {
                KeepAliveRequest::decode(m)?;
            }
            CloseSessionRequest::TEMPLATE_ID => {
                self.session(sid).state = SessionState::Done;
            }
            ArchiveIdRequest::TEMPLATE_ID => {
                ArchiveIdRequest::decode(m)?;
                let id = self.archive_id;
                self.session(sid).ok(k, id);
            }
            StartRecordingRequest::TEMPLATE_ID => {
                let r = StartRecordingRequest::decode(m)?;
                self.start_recording(StartRecording {
                    control_session_id: sid,
                    correlation_id: k,
                    stream_id: r.stream_id,
                    channel: r.channel,
                    auto_stop: false,
                    extend: None,
                    local: r.source_location == source_location::LOCAL,
                });
            }
            StartRecordingRequest2::TEMPLATE_ID => {
                let r = StartRecordingRequest2::decode(m)?;
                self.start_recording(StartRecording {
                    control_session_id: sid,
                    correlation_id: k,
                    stream_id: r.stream_id,
                    channel: r.channel,
                    auto_stop: r.auto_stop == boolean_type::TRUE,
                    extend: None,
                    local: r.source_location == source_location::LOCAL,
                });
            }
            ExtendRecordingRequest::TEMPLATE_ID => {
                let r = ExtendRecordingRequest::decode(m)?;
                let local = r.source_location == source_location::LOCAL;
                self.extend_recording(sid, k, r.recording_id, r.stream_id, r.channel, false, local);
            }
            ExtendRecordingRequest2::TEMPLATE_ID => {
                let r = ExtendRecordingRequest2::decode(m)?;
                let auto_stop = r.auto_stop == boolean_type::TRUE;
                let local = r.source_location == source_location::LOCAL;
                self.extend_recording(
                    sid,
                    k,
                    r.recording_id,
                    r.stream_id,
                    r.channel,
                    auto_stop,
                    local,
                );
            }
            StopRecordingRequest::TEMPLATE_ID => {
                let r = StopRecordingRequest::decode(m)?;
                let key = recording_key(&r.channel, r.stream_id).ok();
                let found = key.and_then(|key| {
                    self.recording_subscriptions
                        .iter()
                        .position(|s| s.key == key && !s.closing)
                });
                match found {
                    Some(i) => {
                        self.stop_recording_subscription(i);
                        self.session(sid).ok(k, 0);
                    }
                    None => self.session(sid).error(
                        k,
                        error_code::UNKNOWN_SUBSCRIPTION,
                        &format!(
                            "no recording subscription for stream {} on '{}'",
                            r.stream_id, r.channel
                        ),
                    ),
                }
            }
            StopRecordingSubscriptionRequest::TEMPLATE_ID => {
                let r = StopRecordingSubscriptionRequest::decode(m)?;
                match self.recording_subscriptions.iter().position(|s| {
                    s.subscription.registration_id() == r.subscription_id && !s.closing
                }) {
                    Some(i) => {
                        self.stop_recording_subscription(i);
                        self.session(sid).ok(k, 0);
                    }
                    None => self.session(sid).error(
                        k,
                        error_code::UNKNOWN_SUBSCRIPTION,
                        &format!("unknown recording subscription {}", r.subscription_id),
                    ),
                }
            }
            StopRecordingByIdentityRequest::TEMPLATE_ID => {
                let r = StopRecordingByIdentityRequest::decode(m)?;
                if self.catalog.recording(r.recording_id).is_none() {
                    self.unknown_recording(sid, k, r.recording_id);
                    return Ok(());
                }
                let sub = self
                    .recordings
                    .iter()
                    .find(|s| s.recording_id == r.recording_id)
                    .map(|s| s.subscription_id);
                let stopped = match sub.and_then(|id| {
                    self.recording_subscriptions
                        .iter()
                        .position(|s| s.subscription.registration_id() == id)
                }) {
                    Some(i) => {
                        self.stop_recording_subscription(i);
                        1
                    }
                    None => 0,
                };
                self.session(sid).ok(k, stopped);
            }
            ListRecordingsRequest::TEMPLATE_ID => {
                let r = ListRecordingsRequest::decode(m)?;
                self.list(sid, k, r.from_recording_id, r.record_count, |_| true);
            }
            ListRecordingsForUriRequest::TEMPLATE_ID => {
                let r = ListRecordingsForUriRequest::decode(m)?;
                let fragment = strip_channel(&r.channel).unwrap_or(r.channel.clone());
                let stream_id = r.stream_id;
                self.list(sid, k, r.from_recording_id, r.record_count, move |d| {
                    d.stream_id == stream_id && d.stripped_channel.contains(&fragment)
                });
            }
            ListRecordingRequest::TEMPLATE_ID => {
                let r = ListRecordingRequest::decode(m)?;
                match self
                    .catalog
                    .entry(r.recording_id)
                    .filter(|e| e.state == recording_state::VALID)
                {
                    Some(e) => {
                        let bytes = sulis_protocol::archive::catalog::descriptor_message(
                            self.catalog.bytes(),
                            &e,
                            sid,
                            k,
                        );
                        self.session(sid).queue(bytes);
                    }
                    None => self.session(sid).respond(
                        k,
                        r.recording_id,
                        response_code::RECORDING_UNKNOWN,
                        "",
                    ),
                }
            }
            FindLastMatchingRecordingRequest::TEMPLATE_ID => {
                let r = FindLastMatchingRecordingRequest::decode(m)?;
                if r.min_recording_id < 0 {
                    self.session(sid).error(
                        k,
                        error_code::UNKNOWN_RECORDING,
                        &format!("min recording id {} is negative", r.min_recording_id),
                    );
                    return Ok(());
                }
                let fragment = strip_channel(&r.channel).unwrap_or(r.channel.clone());
                let found = self
                    .catalog
                    .valid_ids_from(r.min_recording_id)
                    .into_iter()
                    .rev()
                    .find(|&id| {
                        self.catalog.recording(id).is_some_and(|d| {
                            d.session_id == r.session_id
                                && d.stream_id == r.stream_id
                                && d.stripped_channel.contains(&fragment)
                        })
                    })
                    .unwrap_or(NULL_VALUE);
                self.session(sid).ok(k, found);
            }
            RecordingPositionRequest::TEMPLATE_ID => {
                let r = RecordingPositionRequest::decode(m)?;
                if self.catalog.recording(r.recording_id).is_none() {
                    self.unknown_recording(sid, k, r.recording_id);
                    return Ok(());
                }
                let live = self.live_position(r.recording_id).unwrap_or(NULL_VALUE);
                self.session(sid).ok(k, live);
            }
            StopPositionRequest::TEMPLATE_ID => {
                let r = StopPositionRequest::decode(m)?;
                match self.catalog.recording(r.recording_id) {
                    Some(d) => self.session(sid).ok(k, d.stop_position),
                    None => self.unknown_recording(sid, k, r.recording_id),
                }
            }
            StartPositionRequest::TEMPLATE_ID => {
                let r = StartPositionRequest::decode(m)?;
                match self.catalog.recording(r.recording_id) {
                    Some(d) => self.session(sid).ok(k, d.start_position),
                    None => self.unknown_recording(sid, k, r.recording_id),
                }
            }
            MaxRecordedPositionRequest::TEMPLATE_ID => {
                let r = MaxRecordedPositionRequest::decode(m)?;
                match self.catalog.recording(r.recording_id) {
                    Some(d) => {
                        let p = self
                            .live_position(r.recording_id)
                            .unwrap_or(d.stop_position);
                        self.session(sid).ok(k, p);
                    }
                    None => self.unknown_recording(sid, k, r.recording_id),
                }
            }
            ReplayRequest::TEMPLATE_ID => {
                let r = ReplayRequest::decode(m)?;
                self.start_replay(
                    sid,
                    k,
                    r.recording_id,
                    r.position,
                    r.length,
                    &r.replay_channel,
                    r.replay_stream_id,
                    None,
                );
            }
            BoundedReplayRequest::TEMPLATE_ID => {
                let r = BoundedReplayRequest::decode(m)?;
                // Bounded by its length and by a counter of this archive's
                // driver (a commit position, as Aeron Cluster's followers use).
                let counters = self.client.counters();
                let id = r.limit_counter_id;
                if !counters.is_valid_id(id)
                    || counters.counter_state(id) != sulis_concurrent::counters::RECORD_ALLOCATED
                {
                    self.session(sid).error(
                        k,
                        error_code::GENERIC,
                        &format!("limit counter id {id} is not a counter of this archive's driver"),
                    );
                    return Ok(());
                }
                let limit = LimitCounter {
                    id,
                    registration_id: counters.counter_registration_id(id),
                    last: counters.counter_value(id),
                    open: true,
                };
                self.start_replay(
                    sid,
                    k,
                    r.recording_id,
                    r.position,
                    r.length,
                    &r.replay_channel,
                    r.replay_stream_id,
                    Some(limit),
                );
            }
            StopReplayRequest::TEMPLATE_ID => {
                let r = StopReplayRequest::decode(m)?;
                for p in self
                    .replays
                    .iter_mut()
                    .filter(|p| p.id == r.replay_session_id)
                {
                    p.done = true;
                }
                self.session(sid).ok(k, 0);
            }
            StopAllReplaysRequest::TEMPLATE_ID => {
                let r = StopAllReplaysRequest::decode(m)?;
                for p in self
                    .replays
                    .iter_mut()
                    .filter(|p| r.recording_id == NULL_VALUE || p.recording_id == r.recording_id)
                {
                    p.done = true;
                }
                self.session(sid).ok(k, 0);
            }
            TruncateRecordingRequest::TEMPLATE_ID => {
                let r = TruncateRecordingRequest::decode(m)?;
                self.truncate(sid, k, r.recording_id, r.position);
            }
            PurgeRecordingRequest::TEMPLATE_ID => {
                let r = PurgeRecordingRequest::decode(m)?;
                self.purge(sid, k, r.recording_id);
            }
            DetachSegmentsRequest::TEMPLATE_ID => {
                let r = DetachSegmentsRequest::decode(m)?;
                if self.detach_segments(sid, k, r.recording_id, r.new_start_position) {
                    self.session(sid).ok(k, 0);
                }
            }
            DeleteDetachedSegmentsRequest::TEMPLATE_ID => {
                let r = DeleteDetachedSegmentsRequest::decode(m)?;
                self.delete_detached_segments(sid, k, r.recording_id);
            }
            PurgeSegmentsRequest::TEMPLATE_ID => {
                let r = PurgeSegmentsRequest::decode(m)?;
                if self.detach_segments(sid, k, r.recording_id, r.new_start_position) {
                    self.delete_detached_segments(sid, k, r.recording_id);
                }
            }
            AttachSegmentsRequest::TEMPLATE_ID => {
                let r = AttachSegmentsRequest::decode(m)?;
                self.attach_segments(sid, k, r.recording_id);
            }
            MigrateSegmentsRequest::TEMPLATE_ID => {
                let r = MigrateSegmentsRequest::decode(m)?;
                self.migrate_segments(sid, k, r.src_recording_id, r.dst_recording_id);
            }
            ReplicateRequest::TEMPLATE_ID => {
                let r = ReplicateRequest::decode(m)?;
                let p = replication::ReplicateParams::before_1_33(
                    r.src_recording_id,
                    r.dst_recording_id,
                    r.src_control_stream_id,
                    r.src_control_channel,
                    r.live_destination,
                );
                self.on_replicate(sid, k, p);
            }
            TaggedReplicateRequest::TEMPLATE_ID => {
                let r = TaggedReplicateRequest::decode(m)?;
                let p = replication::ReplicateParams::before_1_33(
                    r.src_recording_id,
                    r.dst_recording_id,
                    r.src_control_stream_id,
                    r.src_control_channel,
                    r.live_destination,
                );
                self.on_replicate(sid, k, p);
            }
            ReplicateRequest2::TEMPLATE_ID => {
                let r = ReplicateRequest2::decode(m)?;
                self.on_replicate(
                    sid,
                    k,
                    replication::ReplicateParams {
                        src_recording_id: r.src_recording_id,
                        dst_recording_id: r.dst_recording_id,
                        stop_position: r.stop_position,
                        src_control_stream_id: r.src_control_stream_id,
                        src_control_channel: r.src_control_channel,
                        live_destination: r.live_destination,
                        replication_channel: r.replication_channel,
                        replication_session_id: r.replication_session_id,
                        credentials: r.encoded_credentials,
                        src_response_channel: r.src_response_channel,
                    },
                );
            }
            StopReplicationRequest::TEMPLATE_ID => {
                let r = StopReplicationRequest::decode(m)?;
                self.on_stop_replication(sid, k, r.replication_id);
            }
            other => {
                // An unknown request of a newer client: say so rather than
                // leave it waiting for its timeout.
                self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!("request template id {other} is not supported by this archive"),
                );
            }
        }
        Ok(())
    }

    /// Why new recordings are refused, when the archive directory's file
    /// system has less usable space than the threshold.
    fn low_storage_space(&self) -> Option<String> {
        let threshold = self.ctx.low_storage_space_threshold;
        let usable = usable_space(&self.ctx.archive_dir)?;
        (usable < threshold).then(|| {
            format!(
                "low storage: {usable} bytes usable in {}, below the threshold of {threshold}",
                self.ctx.archive_dir.display()
            )
        })
    }

    fn unknown_recording(&mut self, sid: i64, k: i64, recording_id: i64) {
        self.session(sid).error(
            k,
            error_code::UNKNOWN_RECORDING,
            &format!("unknown recording id: {recording_id}"),
        );
    }

    fn list(
        &mut self,
        sid: i64,
        k: i64,
        from: i64,
        count: i32,
        matches: impl Fn(&RecordingDescriptor) -> bool,
    ) {
        let mut sent = 0;
        let mut next = from.max(0);
        let ids = self.catalog.valid_ids_from(from.max(0));
        let mut messages = Vec::new();
        for id in ids {
            if sent >= count {
                break;
            }
            next = id + 1;
            let Some(e) = self.catalog.entry(id) else {
                continue;
            };
            if matches(&e.descriptor) {
                messages.push(sulis_protocol::archive::catalog::descriptor_message(
                    self.catalog.bytes(),
                    &e,
                    sid,
                    k,
                ));
                sent += 1;
            }
        }
        let next = next.max(self.catalog.next_recording_id());
        let s = self.session(sid);
        for m in messages {
            s.queue(m);
        }
        if sent < count {
            s.respond(k, next, response_code::RECORDING_UNKNOWN, "");
        }
    }

    fn signal(
        &mut self,
        sid: i64,
        k: i64,
        recording_id: i64,
        subscription_id: i64,
        position: i64,
        signal: i32,
    ) {
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.queue(
                RecordingSignalEvent {
                    control_session_id: sid,
                    correlation_id: k,
                    recording_id,
                    subscription_id,
                    position,
                    signal,
                }
                .encode(),
            );
        }
    }

    // -- recording ----------------------------------------------------------

    fn start_recording(&mut self, r: StartRecording) {
        let (sid, k) = (r.control_session_id, r.correlation_id);
        match self.add_recording_subscription(r) {
            Ok(subscription_id) => self.session(sid).ok(k, subscription_id),
            Err((code, message)) => self.session(sid).error(k, code, &message),
        }
    }

    /// Adds a recording subscription; returns its registration id, or the
    /// error code and message to answer with.
    fn add_recording_subscription(&mut self, r: StartRecording) -> Result<i64, (i64, String)> {
        if let Some(message) = self.low_storage_space() {
            return Err((error_code::STORAGE_SPACE, message));
        }
        if self.recordings.len() >= self.ctx.max_concurrent_recordings {
            return Err((
                error_code::MAX_RECORDINGS,
                format!(
                    "max concurrent recordings reached: {}",
                    self.ctx.max_concurrent_recordings
                ),
            ));
        }
        let (key, stripped) = match (
            recording_key(&r.channel, r.stream_id),
            strip_channel(&r.channel),
        ) {
            (Ok(key), Ok(stripped)) => (key, stripped),
            (Err(e), _) | (_, Err(e)) => return Err((error_code::GENERIC, e.to_string())),
        };
        if self
            .recording_subscriptions
            .iter()
            .any(|s| s.key == key && !s.closing)
        {
            return Err((
                error_code::ACTIVE_SUBSCRIPTION,
                format!(
                    "recording exists for streamId={} channel={}",
                    r.stream_id, r.channel
                ),
            ));
        }
        // A UDP publication of this driver is read in place, as Aeron's
        // archive does: no trip through the sockets and the receiver. The
        // spy connects the publication (as a subscriber of an IPC stream
        // does), so recording needs no receiver nor a driver set to
        // `spies_simulate_connection`, which Aeron's archive needs.
        let subscribed = if r.local && stripped.starts_with("aeron:udp") {
            let sep = if stripped.contains('?') { '|' } else { '?' };
            format!("aeron-spy:{stripped}{sep}ssc=true")
        } else {
            stripped.clone()
        };
        let subscription = self
            .client
            .add_subscription(&subscribed, r.stream_id)
            .map_err(|e| (error_code::GENERIC, e.to_string()))?;
        let subscription_id = subscription.registration_id();
        self.recording_subscriptions.push(RecordingSubscription {
            subscription,
            key,
            original_channel: r.channel,
            stripped_channel: stripped,
            stream_id: r.stream_id,
            auto_stop: r.auto_stop,
            control_session_id: r.control_session_id,
            correlation_id: r.correlation_id,
            extend: r.extend,
            active: 0,
            closing: false,
        });
        Ok(subscription_id)
    }

    #[allow(clippy::too_many_arguments)]
    fn extend_recording(
        &mut self,
        sid: i64,
        k: i64,
        recording_id: i64,
        stream_id: i32,
        channel: String,
        auto_stop: bool,
        local: bool,
    ) {
        let Some(d) = self.catalog.recording(recording_id) else {
            return self.unknown_recording(sid, k, recording_id);
        };
        if d.stream_id != stream_id {
            return self.session(sid).error(
                k,
                error_code::UNKNOWN_RECORDING,
                &format!(
                    "cannot extend recording {recording_id}: its stream id is {}, not {stream_id}",
                    d.stream_id
                ),
            );
        }
        if self
            .recordings
            .iter()
            .any(|s| s.recording_id == recording_id)
            || self
                .recording_subscriptions
                .iter()
                .any(|s| s.extend == Some(recording_id) && !s.closing)
        {
            return self.session(sid).error(
                k,
                error_code::ACTIVE_RECORDING,
                &format!("cannot extend active recording {recording_id}"),
            );
        }
        self.start_recording(StartRecording {
            control_session_id: sid,
            correlation_id: k,
            stream_id,
            channel,
            auto_stop,
            extend: Some(recording_id),
            local,
        });
    }

    fn stop_recording_subscription(&mut self, i: usize) {
        let id = self.recording_subscriptions[i]
            .subscription
            .registration_id();
        self.recording_subscriptions[i].closing = true;
        for r in self
            .recordings
            .iter_mut()
            .filter(|r| r.subscription_id == id)
        {
            r.aborted = true;
        }
    }

    fn on_image_events(&mut self) -> usize {
        let events = self.client.take_image_events();
        let work = events.len();
        for ev in events {
            match ev {
                ImageEvent::Available {
                    subscription_id,
                    image,
                } => {
                    if let Some(i) = self
                        .recording_subscriptions
                        .iter()
                        .position(|s| s.subscription.registration_id() == subscription_id)
                    {
                        self.on_recorded_image(i, image);
                    }
                }
                ImageEvent::Unavailable {
                    subscription_id,
                    image,
                } => {
                    // A client whose request stream went away: its sessions end.
                    if let Some(c) = self
                        .control
                        .iter()
                        .position(|s| s.registration_id() == subscription_id)
                    {
                        self.assemblers[c].forget_session(image.session_id());
                        for s in self.sessions.values_mut().filter(|s| {
                            s.control_subscription == c
                                && s.request_session_id == image.session_id()
                        }) {
                            s.state = SessionState::Done;
                        }
                    }
                }
            }
        }
        work
    }

    fn on_recorded_image(&mut self, i: usize, image: Arc<Image>) {
        let rs = &self.recording_subscriptions[i];
        let (sid, k, subscription_id) = (
            rs.control_session_id,
            rs.correlation_id,
            rs.subscription.registration_id(),
        );
        if rs.closing {
            return;
        }
        let extend = rs.extend;
        let stream_id = rs.stream_id;
        let stripped = rs.stripped_channel.clone();
        let original = rs.original_channel.clone();
        let term_length = image.term_buffer_length() as i64;
        let join = image.join_position();
        let (recording_id, geometry, signal) = match extend {
            Some(id) => {
                let Some(d) = self.catalog.recording(id) else {
                    return;
                };
                let fits = d.stop_position == join
                    && d.initial_term_id == image.initial_term_id()
                    && d.term_buffer_length as i64 == term_length
                    && d.mtu_length as usize == image.mtu_length();
                if !fits {
                    let message = format!(
                        "cannot extend recording {id}: the stream joins at {join} with initial term id {}, term length {term_length}, mtu {}; \
                         the recording stopped at {} with {}, {}, {}",
                        image.initial_term_id(),
                        image.mtu_length(),
                        d.stop_position,
                        d.initial_term_id,
                        d.term_buffer_length,
                        d.mtu_length
                    );
                    if let Some(s) = self.sessions.get_mut(&sid) {
                        s.error(k, error_code::INVALID_EXTENSION, &message);
                    }
                    self.record_error(message);
                    return;
                }
                if let Err(e) = self.catalog.record_extend(id, sid, k, image.session_id()) {
                    return self.record_error(e.to_string());
                }
                let g = Geometry {
                    recording_id: id,
                    start_position: d.start_position,
                    term_length,
                    segment_length: d.segment_file_length as i64,
                    initial_term_id: d.initial_term_id,
                };
                (id, g, recording_signal::EXTEND)
            }
            None => {
                let segment_length = (self.ctx.segment_file_length as i64).max(term_length);
                let d = RecordingDescriptor {
                    control_session_id: sid,
                    correlation_id: k,
                    recording_id: 0,
                    start_timestamp: now_ms(),
                    stop_timestamp: NULL_VALUE,
                    start_position: join,
                    stop_position: NULL_VALUE,
                    initial_term_id: image.initial_term_id(),
                    segment_file_length: segment_length as i32,
                    term_buffer_length: term_length as i32,
                    mtu_length: image.mtu_length() as i32,
                    session_id: image.session_id(),
                    stream_id,
                    stripped_channel: stripped.clone(),
                    original_channel: original,
                    source_identity: image.source_identity().to_string(),
                };
                let id = match self.catalog.add_recording(d) {
                    Ok(id) => id,
                    Err(e) => return self.record_error(e.to_string()),
                };
                let g = Geometry {
                    recording_id: id,
                    start_position: join,
                    term_length,
                    segment_length,
                    initial_term_id: image.initial_term_id(),
                };
                (id, g, recording_signal::START)
            }
        };
        let counter = match self.client.add_counter(
            counter_type::ARCHIVE_RECORDING_POSITION,
            &recording_position_key(
                recording_id,
                image.session_id(),
                image.source_identity(),
                self.archive_id,
            ),
            &recording_position_label(
                recording_id,
                image.session_id(),
                stream_id,
                &stripped,
                self.archive_id,
            ),
        ) {
            Ok(c) => c,
            Err(e) => {
                return self.record_error(format!(
                    "recording {recording_id}: cannot add its position counter: {e}"
                ))
            }
        };
        counter.set(join);
        self.recording_subscriptions[i].active += 1;
        self.recordings.push(RecordingSession {
            recording_id,
            subscription_id,
            writer: RecordingWriter::new(
                &self.ctx.archive_dir,
                geometry,
                join,
                self.ctx.file_sync_level,
            )
            .with_checksum(self.ctx.record_checksum),
            image,
            counter,
            control_session_id: sid,
            correlation_id: k,
            aborted: false,
            merge_into: None,
            live_subscription: None,
            start_position: geometry.start_position,
            skip_to: None,
        });
        self.signal(sid, k, recording_id, subscription_id, join, signal);
        let r = self.recordings.last().expect("just pushed");
        let started = RecordingStarted {
            recording_id,
            start_position: geometry.start_position,
            session_id: r.image.session_id(),
            stream_id,
            channel: self
                .catalog
                .recording(recording_id)
                .map(|d| d.original_channel)
                .unwrap_or_default(),
            source_identity: r.image.source_identity().to_string(),
        };
        self.emit_event(&started.encode());
    }

    /// Offers a recording event, if events are on; dropped when there is no room.
    fn emit_event(&self, event: &[u8]) {
        if let Some(p) = &self.events {
            let _ = p.offer(event);
        }
    }

    fn run_recordings(&mut self) -> usize {
        let mut work = 0;
        let max = self.ctx.file_io_max_length;
        let mut ended = Vec::new();
        let mut progressed = Vec::new();
        for (i, r) in self.recordings.iter_mut().enumerate() {
            let mut failure = None;
            if let Some(skip_to) = r.skip_to.filter(|_| !r.aborted) {
                if r.image.position() < skip_to {
                    r.image.bounded_block_poll(max, skip_to, |_, _| {});
                }
                if r.image.position() < skip_to {
                    if r.image.is_end_of_stream() || r.image.is_closed() {
                        ended.push((i, None));
                    }
                    continue;
                }
                r.skip_to = None;
                work += 1;
            }
            if !r.aborted {
                let writer = &mut r.writer;
                let bound = r.merge_into.as_ref().map_or(i64::MAX, |(join, _)| *join);
                let mut took = Duration::ZERO;
                let n = r.image.bounded_block_poll(max, bound, |block, _| {
                    if failure.is_none() {
                        let started = Instant::now();
                        if let Err(e) = writer.write_block(block) {
                            failure = Some(e);
                        }
                        took = started.elapsed();
                    }
                });
                if n > 0 {
                    r.counter.set(r.writer.position());
                    progressed.push((r.recording_id, r.start_position, r.writer.position()));
                    ArchiveCounters::add(&self.counters.write_bytes, n as i64);
                    ArchiveCounters::time(
                        &self.counters.total_write_time,
                        &self.counters.max_write_time,
                        took.as_nanos() as i64,
                    );
                    work += 1;
                }
                if r.merge_into
                    .as_ref()
                    .is_some_and(|(join, _)| r.writer.position() >= *join)
                {
                    // Recorded up to where the live image stands: go on with
                    // it (past it only when the replay had already gone by:
                    // the live image skips what was recorded, up to a term,
                    // as it arrives).
                    let (_, live) = r.merge_into.take().expect("checked");
                    let at = r.writer.position();
                    if at - live.position() <= live.term_buffer_length() as i64 {
                        if live.position() < at {
                            r.skip_to = Some(at);
                        }
                        r.image = live;
                        self.merged.push((r.recording_id, at));
                    } else {
                        r.live_subscription = None;
                        self.merged.push((r.recording_id, NULL_VALUE));
                    }
                    work += 1;
                }
            }
            if failure.is_some() || r.aborted || r.image.is_end_of_stream() || r.image.is_closed() {
                ended.push((i, failure));
            }
        }
        if self.events.is_some() {
            for (recording_id, start_position, position) in progressed {
                let event = RecordingProgress {
                    recording_id,
                    start_position,
                    position,
                };
                self.emit_event(&event.encode());
            }
        }
        for (i, failure) in ended.into_iter().rev() {
            let r = self.recordings.swap_remove(i);
            self.end_recording(r, failure);
            work += 1;
        }
        work
    }

    fn end_recording(&mut self, r: RecordingSession, failure: Option<std::io::Error>) {
        let position = r.writer.position();
        if let Err(e) = self.catalog.record_stop(r.recording_id, position, now_ms()) {
            self.record_error(e.to_string());
        }
        if let Some(e) = failure {
            let message = format!("recording {} stopped at {position}: {e}", r.recording_id);
            if let Some(s) = self.sessions.get_mut(&r.control_session_id) {
                let code = if e.raw_os_error() == Some(libc::ENOSPC) {
                    error_code::STORAGE_SPACE
                } else {
                    error_code::GENERIC
                };
                s.error(r.correlation_id, code, &message);
            }
            self.record_error(message);
        }
        r.counter.close();
        self.signal(
            r.control_session_id,
            r.correlation_id,
            r.recording_id,
            r.subscription_id,
            position,
            recording_signal::STOP,
        );
        let stopped = RecordingStopped {
            recording_id: r.recording_id,
            start_position: r.start_position,
            stop_position: position,
        };
        self.emit_event(&stopped.encode());
        if let Some(i) = self
            .recording_subscriptions
            .iter()
            .position(|s| s.subscription.registration_id() == r.subscription_id)
        {
            let s = &mut self.recording_subscriptions[i];
            s.active = s.active.saturating_sub(1);
            if s.auto_stop || s.extend.is_some() {
                s.closing = true;
            }
            if s.closing && s.active == 0 {
                self.recording_subscriptions.swap_remove(i);
            }
        }
    }

    fn live_position(&self, recording_id: i64) -> Option<i64> {
        self.recordings
            .iter()
            .find(|r| r.recording_id == recording_id)
            .map(|r| r.writer.position())
    }

    // -- replay -------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn start_replay(
        &mut self,
        sid: i64,
        k: i64,
        recording_id: i64,
        position: i64,
        length: i64,
        replay_channel: &str,
        replay_stream_id: i32,
        limit_counter: Option<LimitCounter>,
    ) {
        if self.replays.len() >= self.ctx.max_concurrent_replays {
            let message = format!(
                "max concurrent replays reached: {}",
                self.ctx.max_concurrent_replays
            );
            return self
                .session(sid)
                .error(k, error_code::MAX_REPLAYS, &message);
        }
        let Some(d) = self.catalog.recording(recording_id) else {
            return self.unknown_recording(sid, k, recording_id);
        };
        if let Some(why) = crate::catalog::impossible_geometry(&d) {
            let message = format!("recording {recording_id} {why}: it cannot be replayed");
            return self.session(sid).error(k, error_code::GENERIC, &message);
        }
        let live = self.live_position(recording_id);
        let recorded_end = live.unwrap_or(d.stop_position);
        let start = if position == NULL_VALUE {
            d.start_position
        } else {
            position
        };
        if start & 31 != 0 || start < d.start_position || start > recorded_end {
            return self.session(sid).error(
                k,
                error_code::INVALID_POSITION,
                &format!(
                    "requested replay start position {start} is not a frame position within the recording {recording_id} \
                     [{}, {recorded_end}]",
                    d.start_position
                ),
            );
        }
        let g = Self::geometry_of(recording_id, &d);
        if start > d.start_position && start < recorded_end {
            // A frame must begin there, as Aeron checks: its header says so.
            let mut header = [0u8; 64];
            match SegmentReader::new(&self.ctx.archive_dir, g, start).read(&mut header, recorded_end) {
                Ok(_) | Err(ReadError::BufferTooSmall(_)) => {}
                Err(ReadError::Corrupt { reason, .. }) => {
                    return self.session(sid).error(
                        k,
                        error_code::INVALID_POSITION,
                        &format!(
                            "requested replay start position {start} of recording {recording_id} is not where a \
                             frame begins ({reason}): start at a message's position"
                        ),
                    )
                }
                Err(e) => return self.session(sid).error(k, error_code::GENERIC, &e.to_string()),
            }
        }
        let end = match length {
            REPLAY_ALL_AND_FOLLOW if live.is_some() => None,
            REPLAY_ALL_AND_FOLLOW | REPLAY_ALL_AND_STOP => Some(recorded_end),
            l if l >= 0 && l != i64::MAX => Some(match live {
                Some(_) => start.saturating_add(l),
                None => start.saturating_add(l).min(recorded_end),
            }),
            i64::MAX => {
                if live.is_some() {
                    None
                } else {
                    Some(recorded_end)
                }
            }
            l => {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!(
                        "replay length {l} is neither a length, -1 (follow) nor -2 (to the end)"
                    ),
                );
            }
        };
        let term_length = d.term_buffer_length as i64;
        let channel = match replay_publication_channel(replay_channel, &d, start) {
            Ok(c) => c,
            Err(e) => {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!("replay channel: {e}"),
                )
            }
        };
        let publication = match self
            .client
            .add_exclusive_publication(&channel, replay_stream_id)
        {
            Ok(p) => p,
            Err(e) => {
                return self
                    .session(sid)
                    .error(k, error_code::GENERIC, &e.to_string())
            }
        };
        let replay_id = self.next_replay_id;
        self.next_replay_id += 1;
        let id = (replay_id << 32) | (publication.session_id() as u32 as i64);
        let buf = vec![
            0u8;
            (self.ctx.file_io_max_length)
                .min(term_length as usize)
                .max(4096)
        ];
        self.replays.push(ReplaySession {
            id,
            limit_counter,
            recording_id,
            control_session_id: sid,
            correlation_id: k,
            publication,
            reader: SegmentReader::new(&self.ctx.archive_dir, g, start)
                .with_checksum(self.ctx.replay_checksum),
            end,
            state: ReplayState::Connecting {
                deadline: Instant::now() + self.ctx.connect_timeout,
            },
            buf,
            pending: 0,
            done: false,
        });
        self.session(sid).ok(k, id);
    }

    fn run_replays(&mut self, now: Instant) -> usize {
        let mut work = 0;
        let counters = self.client.counters();
        let mut failures: Vec<(i64, i64, String)> = Vec::new();
        for i in 0..self.replays.len() {
            let live = self.live_position(self.replays[i].recording_id);
            let stopped_at = if live.is_none() {
                self.catalog
                    .recording(self.replays[i].recording_id)
                    .map(|d| d.stop_position)
            } else {
                None
            };
            let p = &mut self.replays[i];
            if p.done {
                continue;
            }
            match p.state {
                ReplayState::Connecting { deadline } => {
                    if p.publication.is_connected() {
                        p.state = ReplayState::Replaying;
                        work += 1;
                    } else if now >= deadline {
                        failures.push((p.control_session_id, p.correlation_id, format!(
                            "replay {} of recording {}: no subscriber connected within the connect timeout",
                            p.id, p.recording_id
                        )));
                        p.done = true;
                        continue;
                    } else {
                        continue;
                    }
                }
                ReplayState::Replaying => {}
            }
            // What may be sent: to the end asked for, never past what is
            // recorded nor past a limit counter.
            let mut recorded = live.or(stopped_at).unwrap_or(NULL_VALUE);
            let mut counter_closed = false;
            if let Some(c) = &mut self.replays[i].limit_counter {
                recorded = recorded.min(c.read(&counters));
                counter_closed = !c.open;
            }
            let p = &mut self.replays[i];
            let limit = match p.end {
                Some(end) => end.min(recorded),
                None => recorded,
            };
            // Read no more than the publication can take now (its window).
            // (a frame that does not fit waits for the window to open).
            let window =
                (p.publication.position_limit() - p.publication.position()).max(0) as usize;
            let room = window.min(p.buf.len());
            if p.pending == 0 && p.reader.position() < limit && room >= 32 {
                let started = Instant::now();
                let read = p.reader.read(&mut p.buf[..room], limit);
                ArchiveCounters::time(
                    &self.counters.total_read_time,
                    &self.counters.max_read_time,
                    started.elapsed().as_nanos() as i64,
                );
                match read {
                    // The next frame ends past the end asked for (a length
                    // that ends inside a frame): the replay ends before it.
                    Ok(0) if p.end == Some(limit) => p.end = Some(p.reader.position()),
                    Ok(n) => {
                        p.pending = n;
                        ArchiveCounters::add(&self.counters.read_bytes, n as i64);
                    }
                    Err(ReadError::BufferTooSmall(_)) => {}
                    Err(e) => {
                        failures.push((p.control_session_id, p.correlation_id, e.to_string()));
                        p.done = true;
                        continue;
                    }
                }
            }
            if p.pending > 0 {
                match p.publication.offer_block(&p.buf[..p.pending]) {
                    Ok(_) => {
                        p.pending = 0;
                        work += 1;
                    }
                    Err(OfferError::BackPressured) | Err(OfferError::AdminAction) => {}
                    Err(OfferError::NotConnected) => {
                        // The replay's subscriber went away: nothing to replay to.
                        p.done = true;
                    }
                    Err(e) => {
                        failures.push((
                            p.control_session_id,
                            p.correlation_id,
                            format!("replay {} of recording {}: {e:?}", p.id, p.recording_id),
                        ));
                        p.done = true;
                    }
                }
            }
            let at = p.reader.position();
            let finished = p.pending == 0
                && if p.limit_counter.is_some() {
                    // A counter bound waits for the counter to move on: the
                    // replay ends at its length, at the end of a stopped
                    // recording, or where the counter was when it closed.
                    p.end.is_some_and(|end| at >= end)
                        || stopped_at.is_some_and(|stop| at >= stop)
                        || (counter_closed && at >= recorded)
                } else {
                    match p.end {
                        Some(end) => at >= end.min(recorded) && (live.is_none() || at >= end),
                        None => live.is_none() && at >= recorded,
                    }
                };
            if finished {
                p.done = true;
            }
        }
        for (sid, k, message) in failures {
            if let Some(s) = self.sessions.get_mut(&sid) {
                s.error(k, error_code::GENERIC, &message);
            }
            self.record_error(message);
        }
        let before = self.replays.len();
        self.replays.retain(|p| !p.done);
        work + before - self.replays.len()
    }

    // -- truncate and purge -------------------------------------------------

    fn check_idle(
        &mut self,
        sid: i64,
        k: i64,
        recording_id: i64,
        what: &str,
    ) -> Option<RecordingDescriptor> {
        let Some(d) = self.catalog.recording(recording_id) else {
            self.unknown_recording(sid, k, recording_id);
            return None;
        };
        if d.stop_position == NULL_VALUE
            || self
                .recordings
                .iter()
                .any(|r| r.recording_id == recording_id)
        {
            self.session(sid).error(
                k,
                error_code::ACTIVE_RECORDING,
                &format!("cannot {what} recording {recording_id}: it is recording"),
            );
            return None;
        }
        Some(d)
    }

    fn segment_files(&self, recording_id: i64) -> Vec<(i64, std::path::PathBuf)> {
        let mut files: Vec<(i64, std::path::PathBuf)> = std::fs::read_dir(&self.ctx.archive_dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let (id, base) = sulis_protocol::archive::segment::parse_segment_file_name(&name)?;
                (id == recording_id).then(|| (base, e.path()))
            })
            .collect();
        files.sort();
        files
    }

    fn truncate(&mut self, sid: i64, k: i64, recording_id: i64, position: i64) {
        let Some(d) = self.check_idle(sid, k, recording_id, "truncate") else {
            return;
        };
        if position & 31 != 0 || position < d.start_position || position > d.stop_position {
            return self.session(sid).error(
                k,
                error_code::INVALID_POSITION,
                &format!(
                    "invalid truncate position {position}: not a frame position within [{}, {}]",
                    d.start_position, d.stop_position
                ),
            );
        }
        for p in self
            .replays
            .iter_mut()
            .filter(|p| p.recording_id == recording_id)
        {
            p.done = true;
        }
        // The catalog first: from here on nothing past `position` is the
        // recording's, whatever happens to the files after.
        if let Err(e) = self.catalog.set_stop_position(recording_id, position) {
            return self.catalog_failed(sid, k, &format!("truncate recording {recording_id}"), e);
        }
        let g = Self::geometry_of(recording_id, &d);
        let keep_base = g.base_of(position);
        let mut doomed = Vec::new();
        for (base, path) in self.segment_files(recording_id) {
            if base > keep_base
                || (base == keep_base && position == base && position > d.start_position)
            {
                doomed.push(path);
            } else if base == keep_base {
                // Zero what lies past the new end, so nothing reads as a frame there.
                let erased = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| {
                        f.set_len((position - base) as u64)?;
                        f.set_len(d.segment_file_length as u64)
                    });
                if let Err(e) = erased {
                    self.record_error(format!(
                        "recording {recording_id} truncated to {position}: cannot erase what follows in {}: {e}",
                        path.display()
                    ));
                }
            }
        }
        let n = self.queue_deletion(sid, k, recording_id, doomed);
        self.session(sid).ok(k, n as i64);
    }

    /// A catalog change failed: nothing else of the request is done.
    fn catalog_failed(
        &mut self,
        sid: i64,
        k: i64,
        what: &str,
        e: sulis_protocol::archive::catalog::CatalogError,
    ) {
        let message = format!("cannot {what}: {e}");
        self.record_error(message.clone());
        self.session(sid).error(k, error_code::GENERIC, &message);
    }

    /// Queues `files` of a recording for deletion off the duty cycle (they
    /// are renamed at once); the request's Signal DELETE follows when they
    /// are gone. Returns how many were queued.
    fn queue_deletion(
        &mut self,
        sid: i64,
        k: i64,
        recording_id: i64,
        files: Vec<std::path::PathBuf>,
    ) -> usize {
        let (session, errors) = DeleteSegmentsSession::new(sid, k, recording_id, files);
        for e in errors {
            self.record_error(e);
        }
        let n = session.len();
        self.deletions.push_back(session);
        n
    }

    /// Deletes one queued file; signals the requests whose files are gone.
    fn run_deletions(&mut self) -> usize {
        let Some(d) = self.deletions.front_mut() else {
            return 0;
        };
        let work = match d.do_work() {
            Ok(n) => n,
            Err(e) => {
                self.record_error(e);
                1
            }
        };
        if self.deletions.front().is_some_and(|d| d.is_done()) {
            let d = self.deletions.pop_front().expect("checked");
            self.signal(
                d.control_session_id,
                d.correlation_id,
                d.recording_id,
                NULL_VALUE,
                NULL_VALUE,
                recording_signal::DELETE,
            );
            return work + 1;
        }
        work
    }

    fn geometry_of(recording_id: i64, d: &RecordingDescriptor) -> Geometry {
        Geometry {
            recording_id,
            ..Geometry::of(d)
        }
    }

    /// Moves a recording's start to `new_start` (a segment base above its
    /// first segment, not past its last), leaving the files before it
    /// detached. True when done; else the error was sent.
    fn detach_segments(&mut self, sid: i64, k: i64, recording_id: i64, new_start: i64) -> bool {
        let Some(d) = self.catalog.recording(recording_id) else {
            self.unknown_recording(sid, k, recording_id);
            return false;
        };
        let g = Self::geometry_of(recording_id, &d);
        let end = self.live_position(recording_id).unwrap_or(d.stop_position);
        let why = if g.base_of(new_start) != new_start {
            Some("is not the start of a segment file".to_string())
        } else if new_start <= g.base_of(d.start_position) {
            Some(format!(
                "is not after the first segment, which starts at {}",
                g.base_of(d.start_position)
            ))
        } else if new_start > g.base_of(end.max(d.start_position)) {
            Some(format!(
                "is past the segment in use, which starts at {}",
                g.base_of(end)
            ))
        } else if self
            .replays
            .iter()
            .any(|p| p.recording_id == recording_id && !p.done)
        {
            Some("cannot be applied while the recording is being replayed".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            self.session(sid).error(
                k,
                error_code::GENERIC,
                &format!("invalid segment start position {new_start} for recording {recording_id}: it {why}"),
            );
            return false;
        }
        if let Err(e) = self.catalog.set_start_position(recording_id, new_start) {
            self.session(sid)
                .error(k, error_code::GENERIC, &e.to_string());
            return false;
        }
        true
    }

    fn delete_detached_segments(&mut self, sid: i64, k: i64, recording_id: i64) {
        let Some(d) = self.catalog.recording(recording_id) else {
            return self.unknown_recording(sid, k, recording_id);
        };
        let g = Self::geometry_of(recording_id, &d);
        let first = g.base_of(d.start_position);
        let detached = self
            .segment_files(recording_id)
            .into_iter()
            .filter(|(base, _)| *base < first)
            .map(|(_, path)| path)
            .collect();
        let n = self.queue_deletion(sid, k, recording_id, detached);
        self.session(sid).ok(k, n as i64);
    }

    /// Attaches the detached segment files still there, from the one before
    /// the first attached segment downwards while they are contiguous.
    fn attach_segments(&mut self, sid: i64, k: i64, recording_id: i64) {
        let Some(d) = self.catalog.recording(recording_id) else {
            return self.unknown_recording(sid, k, recording_id);
        };
        let g = Self::geometry_of(recording_id, &d);
        let mut base = g.base_of(d.start_position);
        let mut attached = 0;
        while base - g.segment_length >= 0
            && g.path(&self.ctx.archive_dir, base - g.segment_length)
                .exists()
        {
            base -= g.segment_length;
            attached += 1;
        }
        if attached > 0 {
            // The lowest file may start before the recording did (it joined
            // mid-term): its first frame, not its base, is the start.
            let start = first_frame_position(&self.ctx.archive_dir, g, base).unwrap_or(base);
            if let Err(e) = self.catalog.set_start_position(recording_id, start) {
                return self
                    .session(sid)
                    .error(k, error_code::GENERIC, &e.to_string());
            }
        }
        self.session(sid).ok(k, attached);
    }

    /// Moves the segment files of stopped recording `src_id` to `dst_id`,
    /// which it joins end to start (either way round) at a segment boundary
    /// of both: `dst_id` then covers both, `src_id` is left empty (Aeron's
    /// MigrateSegments). Answers how many files moved.
    fn migrate_segments(&mut self, sid: i64, k: i64, src_id: i64, dst_id: i64) {
        let Some(src) = self.catalog.recording(src_id) else {
            return self.unknown_recording(sid, k, src_id);
        };
        let Some(dst) = self.catalog.recording(dst_id) else {
            return self.unknown_recording(sid, k, dst_id);
        };
        if src.stop_position == NULL_VALUE
            || self.recordings.iter().any(|r| r.recording_id == src_id)
        {
            return self.session(sid).error(
                k,
                error_code::ACTIVE_RECORDING,
                &format!("invalid migrate: recording {src_id} is still active"),
            );
        }
        for (what, a, b) in [
            (
                "segment file length",
                src.segment_file_length,
                dst.segment_file_length,
            ),
            (
                "term buffer length",
                src.term_buffer_length,
                dst.term_buffer_length,
            ),
            ("initial term id", src.initial_term_id, dst.initial_term_id),
            ("stream id", src.stream_id, dst.stream_id),
            ("mtu length", src.mtu_length, dst.mtu_length),
        ] {
            if a != b {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!("invalid migrate: the {what} of recording {src_id} is {a}, of recording {dst_id} {b}"),
                );
            }
        }
        let src_first = src.stop_position == dst.start_position;
        let join = if src_first {
            src.stop_position
        } else if src.start_position == dst.stop_position {
            src.start_position
        } else {
            return self.session(sid).error(
                k,
                error_code::GENERIC,
                &format!(
                    "invalid migrate: recordings {src_id} [{}, {}] and {dst_id} [{}, {}] are not contiguous",
                    src.start_position, src.stop_position, dst.start_position, dst.stop_position
                ),
            );
        };
        let (gs, gd) = (
            Self::geometry_of(src_id, &src),
            Self::geometry_of(dst_id, &dst),
        );
        for (label, g) in [("source", gs), ("destination", gd)] {
            if g.base_of(join) != join {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!(
                        "invalid migrate: the join position {join} is not on a segment boundary of the {label} recording \
                         (segment file length {})",
                        g.segment_length
                    ),
                );
            }
        }
        let dir = self.ctx.archive_dir.clone();
        let (first, last) = (
            gs.base_of(src.start_position),
            gs.base_of(src.stop_position),
        );
        let mut moves = Vec::new();
        let mut empty = Vec::new();
        let mut base = first;
        while base <= last {
            let (from, to) = (gs.path(&dir, base), gd.path(&dir, base));
            if base == src.stop_position {
                // The empty segment a recording stopped at a boundary leaves.
                empty.push(from);
            } else if !from.exists() {
                let message = format!(
                    "invalid migrate: source segment file {} is missing",
                    from.display()
                );
                return self.session(sid).error(k, error_code::GENERIC, &message);
            } else if to.exists() {
                let message = format!(
                    "invalid migrate: destination segment file {} exists already",
                    to.display()
                );
                return self.session(sid).error(k, error_code::GENERIC, &message);
            } else {
                moves.push((from, to));
            }
            base += gs.segment_length;
        }
        // The files get their destination names beside their source names
        // (hard links), then the catalog changes, then the source names go:
        // at every moment each recording's catalog entry describes bytes
        // that are there under its own name.
        let mut linked: Vec<std::path::PathBuf> = Vec::new();
        for (from, to) in &moves {
            if let Err(e) = std::fs::hard_link(from, to) {
                for l in &linked {
                    let _ = std::fs::remove_file(l);
                }
                let message = format!(
                    "migrate: cannot link {} to {}: {e}",
                    from.display(),
                    to.display()
                );
                self.record_error(message.clone());
                return self.session(sid).error(k, error_code::GENERIC, &message);
            }
            linked.push(to.clone());
        }
        let updated = if src_first {
            self.catalog.set_start_position(dst_id, src.start_position)
        } else {
            self.catalog.set_stop_position(dst_id, src.stop_position)
        };
        if let Err(e) = updated {
            for l in &linked {
                let _ = std::fs::remove_file(l);
            }
            let what = format!("migrate the segments of recording {src_id} to {dst_id}");
            return self.catalog_failed(sid, k, &what, e);
        }
        if let Err(e) = self.catalog.set_stop_position(src_id, src.start_position) {
            // The destination has the files; the source still describes its
            // own, so its names stay.
            let what = format!("empty recording {src_id} after migrating its segments to {dst_id}");
            return self.catalog_failed(sid, k, &what, e);
        }
        let mut doomed: Vec<std::path::PathBuf> =
            moves.iter().map(|(from, _)| from.clone()).collect();
        doomed.extend(empty);
        let n = moves.len();
        self.queue_deletion(sid, k, src_id, doomed);
        self.session(sid).ok(k, n as i64);
    }

    fn purge(&mut self, sid: i64, k: i64, recording_id: i64) {
        let Some(_) = self.check_idle(sid, k, recording_id, "purge") else {
            return;
        };
        if self
            .replays
            .iter()
            .any(|p| p.recording_id == recording_id && !p.done)
        {
            return self.session(sid).error(
                k,
                error_code::ACTIVE_RECORDING,
                &format!("cannot purge recording {recording_id}: it is being replayed"),
            );
        }
        if let Err(e) = self
            .catalog
            .set_state(recording_id, recording_state::DELETED)
        {
            return self.catalog_failed(sid, k, &format!("purge recording {recording_id}"), e);
        }
        let files = self
            .segment_files(recording_id)
            .into_iter()
            .map(|(_, path)| path)
            .collect();
        let n = self.queue_deletion(sid, k, recording_id, files);
        self.session(sid).ok(k, n as i64);
    }
}

/// The position of the first frame in the segment file at `base` (whose
/// header says it lies where it lies), scanning its first term.
fn first_frame_position(dir: &Path, g: Geometry, base: i64) -> Option<i64> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(g.path(dir, base)).ok()?;
    let mut term = vec![0u8; g.term_length as usize];
    file.read_exact_at(&mut term, 0).ok()?;
    let term_id = g.term_id_at(base);
    (0..term.len())
        .step_by(32)
        .find(|&o| {
            let h = &term[o..o + 32];
            i32::from_le_bytes(h[0..4].try_into().unwrap()) > 0
                && i32::from_le_bytes(h[8..12].try_into().unwrap()) == o as i32
                && i32::from_le_bytes(h[20..24].try_into().unwrap()) == term_id
        })
        .map(|o| base + o as i64)
}

/// Recordings an earlier run did not stop (killed mid-recording): their
/// stop position becomes the end of their last whole frame. The checksum
/// setting of this run only helps prove a last frame whole
/// ([`recover_stop_position`]).
fn recover(
    dir: &Path,
    catalog: &mut Catalog,
    checksum: Option<Checksum>,
    errors: &mut Vec<String>,
) -> Result<(), String> {
    for e in catalog.entries() {
        let d = e.descriptor;
        if e.state != recording_state::VALID || d.stop_position != NULL_VALUE {
            continue;
        }
        let g = Geometry::of(&d);
        match recover_stop_position(dir, g, d.start_position, checksum) {
            Ok(r) => {
                if let Some(why) = r.torn {
                    errors.push(format!("recording {}: {why}", d.recording_id));
                }
                catalog
                    .record_stop(d.recording_id, r.stop_position, now_ms())
                    .map_err(|e| {
                        format!(
                            "recording {}: cannot record its recovered stop position: {e}",
                            d.recording_id
                        )
                    })?;
            }
            Err(err) => errors.push(format!(
                "recording {}: cannot recover its stop position: {err}",
                d.recording_id
            )),
        }
    }
    Ok(())
}

/// Bytes an unprivileged writer may still use in `dir`'s file system.
fn usable_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct it is given.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statvfs(path.as_ptr(), &mut st) } == 0)
        .then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// The response publication's channel: the client's channel with the
/// archive's control term length (unless the client set one) and sparse files.
fn response_publication_channel(channel: &str, ctx: &ArchiveContext) -> Result<String, String> {
    let uri = sulis_protocol::uri::ChannelUri::parse(channel).map_err(|e| e.to_string())?;
    if uri.get("endpoint").is_some_and(|e| e.ends_with(":0")) {
        return Err(
            "its endpoint names port 0: a client must send the port its driver bound (Aeron's and sulis's clients do)"
                .into(),
        );
    }
    let mut out = channel.to_string();
    let mut add = |k: &str, v: String| {
        if uri.get(k).is_none() {
            out.push(if out.contains('?') { '|' } else { '?' });
            out.push_str(&format!("{k}={v}"));
        }
    };
    add("term-length", ctx.control_term_buffer_length.to_string());
    add("sparse", "true".into());
    Ok(out)
}

/// The replay publication's channel: the client's channel placed at the
/// recording's position, with its term length, initial term id and MTU, so
/// positions in the replay are the recording's.
fn replay_publication_channel(
    channel: &str,
    d: &RecordingDescriptor,
    position: i64,
) -> Result<String, String> {
    let uri = sulis_protocol::uri::ChannelUri::parse(channel).map_err(|e| e.to_string())?;
    for k in [
        "init-term-id",
        "term-id",
        "term-offset",
        "term-length",
        "mtu",
    ] {
        if uri.get(k).is_some() {
            return Err(format!(
                "'{k}' is set by the archive; leave it out of the replay channel '{channel}'"
            ));
        }
    }
    let term_length = d.term_buffer_length as i64;
    let term_id = d
        .initial_term_id
        .wrapping_add((position / term_length) as i32);
    let term_offset = position % term_length;
    let mut out = channel.to_string();
    out.push(if out.contains('?') { '|' } else { '?' });
    out.push_str(&format!(
        "init-term-id={}|term-id={term_id}|term-offset={term_offset}|term-length={term_length}|mtu={}",
        d.initial_term_id, d.mtu_length
    ));
    Ok(out)
}
