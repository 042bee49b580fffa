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
use crate::context::ArchiveContext;
use crate::error::ArchiveStartError;
use crate::mark_file::{ArchiveMarkFile, MarkFileClaim, MarkFileFields};
mod control_session;
mod control_session_adapter;
mod counters;
mod delete_segments_session;
mod list_recordings_session;
mod recorder;
mod recording_session;
mod replay_session;
mod replay_tokens;
mod replayer;
mod replication;
mod retention_enforcer;
mod segments;
mod tiering;

use control_session::*;
use counters::*;
use list_recordings_session::*;
use recorder::*;
use recording_session::*;
use replay_session::*;
use replay_tokens::ReplayTokens;
use replayer::*;
use retention_enforcer::RetentionEnforcer;

use delete_segments_session::DeleteSegmentsSession;

use crate::segment::{Geometry, ReadError, RecordingWriter, SegmentReader};
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use sulis_client::{
    Client, ClientContext, Counter, ExclusivePublication, FragmentAssembler, Image, ImageEvent,
    OfferError, Publication, Subscription,
};
use sulis_concurrent::agent::{run_agents, Agent, DutyCycleTracker, NanoClock};
use sulis_concurrent::counters::CounterRef;
use sulis_protocol::archive::channel::{recording_key, strip_channel};
use sulis_protocol::archive::messages::*;
use sulis_protocol::counters::{
    recording_position_key, recording_position_label, type_id as counter_type,
};
use sulis_protocol::sbe::SbeError;

/// A first control-session or replication id: random, as the driver's session
/// ids are, in 30 bits (room to count up in Aeron's int fields). From
/// `now_ms ^ pid << 20` two archives started in one millisecond shared them.
fn first_id() -> i64 {
    (sulis_concurrent::bit_util::generate_randomised_id() & 0x3fff_ffff) as i64
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
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
    /// The recorder, when it runs on this thread (SHARED); `None` once it
    /// runs on its own (DEDICATED).
    recorder: Option<Recorder>,
    recorder_link: RecorderLink,
    /// The replayer, when it runs on this thread (SHARED).
    replayer: Option<Replayer>,
    replayer_link: ReplayerLink,
    /// The replays the replayer runs, by replay session id.
    active_replays: BTreeMap<i64, ActiveReplay>,
    /// The recordings the recorder runs, by recording id.
    active_recordings: BTreeMap<i64, ActiveRecording>,
    /// Agents running on threads of their own (DEDICATED): stop flag and thread.
    workers: Vec<(
        Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<()>,
    )>,
    /// The workers' duty-cycle counters, kept while they run.
    worker_counters: Vec<Counter>,
    next_replay_id: i64,
    replications: Vec<replication::Replication>,
    next_replication_id: i64,
    /// Tokens for replays over response channels.
    replay_tokens: ReplayTokens,
    /// Listings being sent.
    listings: Vec<ListRecordingsSession>,
    /// Segment files being deleted, oldest request first.
    deletions: VecDeque<DeleteSegmentsSession>,
    /// Recordings that moved to their live image this cycle (live merge),
    /// with the position where they did.
    merged: Vec<(i64, i64)>,
    errors: Vec<String>,
    error_count: u64,
    mark_file: ArchiveMarkFile,
    /// When the mark file's activity timestamp was last written.
    last_activity_ns: i64,
    /// The clock every time of the archive is read from (a manual one in tests).
    clock: NanoClock,
    authenticator: Box<dyn Authenticator>,
    authoriser: Box<dyn Authoriser>,
    /// Sessions refused by the authenticator so far.
    rejected_sessions: u64,
    /// The archive-wide counters in the driver's CnC (Aeron's types 101, 102, 106, 109, 111, 112).
    counters: ArchiveCounters,
    /// Recording events, when enabled: best effort, as Aeron's (an event
    /// that finds no room is dropped, never waited for).
    events: Option<Publication>,
    /// What the retention policy removes, and when it is looked at next.
    retention: RetentionEnforcer,
    /// The object store segments move to (`tier_store`), if any.
    tier: Option<Arc<crate::tier::Tier>>,
}

impl ArchiveConductor {
    /// Opens the archive directory (recovering recordings an earlier run
    /// left unfinished) and subscribes to the control channels.
    pub fn new(ctx: ArchiveContext) -> Result<ArchiveConductor, ArchiveStartError> {
        Self::with_authoriser(ctx, Box::new(AllowAllRequests))
    }

    /// As [`ArchiveConductor::new`], deciding which requests a session may
    /// make with `authoriser`.
    pub fn with_authoriser(
        ctx: ArchiveContext,
        authoriser: Box<dyn Authoriser>,
    ) -> Result<ArchiveConductor, ArchiveStartError> {
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
    ) -> Result<ArchiveConductor, ArchiveStartError> {
        Self::with_auth(ctx, authenticator, Box::new(AllowAllRequests))
    }

    fn with_auth(
        mut ctx: ArchiveContext,
        authenticator: Box<dyn Authenticator>,
        authoriser: Box<dyn Authoriser>,
    ) -> Result<ArchiveConductor, ArchiveStartError> {
        ctx.conclude().map_err(ArchiveStartError::Config)?;
        // The driver first: an archive that cannot start leaves no catalog
        // behind in a directory it made (a 1 MiB catalog and a mark file were
        // left by every start with no driver to connect to).
        let client = Client::connect(ClientContext {
            dir: ctx.driver_dir.clone(),
            driver_timeout: ctx.driver_timeout,
            name: "sulis-archive".into(),
            interrupt: ctx.interrupt.clone(),
        })
        .map_err(|e| {
            ArchiveStartError::Driver(format!(
                "archive cannot connect to the driver in {}: {e}",
                ctx.driver_dir.display()
            ))
        })?;
        let created = !ctx.archive_dir.exists();
        std::fs::create_dir_all(&ctx.archive_dir).map_err(|e| {
            ArchiveStartError::io(
                format_args!("cannot create {}", ctx.archive_dir.display()),
                &e,
            )
        })?;
        if created {
            // Its name on disk before the catalog in it is synced (whatever the sync level: the
            // archive must open again after a power cut).
            if let Some(parent) = ctx.archive_dir.parent() {
                let _ = sulis_concurrent::mapped_file::sync_dir(parent);
            }
        }
        // A directory this start made goes again if the start fails.
        let mut made = MadeDirectory {
            path: ctx.archive_dir.clone(),
            remove: created,
        };
        {
            use std::os::unix::fs::PermissionsExt;
            let _ =
                std::fs::set_permissions(&ctx.archive_dir, std::fs::Permissions::from_mode(0o700));
        }
        // The directory is claimed before anything in it is read or
        // written: a second archive started on a live one changes nothing.
        let claim = MarkFileClaim::claim(&ctx.archive_dir, now_ms())?;
        // A retention policy that does not read stops the start, naming its line.
        let (retention, retention_notes) =
            RetentionEnforcer::new(&ctx).map_err(ArchiveStartError::Config)?;
        // An object store that cannot be reached, or no credentials for it, stops the start.
        let tier = match &ctx.tier_store {
            Some(spec) => Some(tiering::start_tier(&ctx, spec).map_err(ArchiveStartError::Config)?),
            None => None,
        };
        let mut catalog = Catalog::open(
            &ctx.archive_dir,
            ctx.catalog_capacity,
            ctx.catalog_sync_level(),
        )?;
        catalog.set_checksum(ctx.record_checksum);
        let mut errors: Vec<String> = catalog.problems().to_vec();
        // Segments in the object store are the recordings' own, whether or not a store is set now.
        let tiered = crate::tier::tier_log::read_tier_log(&ctx.archive_dir)
            .map_err(|e| ArchiveStartError::io(format_args!("cannot read the tier log"), &e))?;
        if tier.is_none() && !tiered.is_empty() {
            errors.push(format!(
                "{} segments are in an object store ({}), and no tier_store is set: replays reaching them \
                 fail until it is",
                tiered.len(),
                crate::tier::read_store_file(&ctx.archive_dir)
                    .ok()
                    .flatten()
                    .map_or("tiered.log".to_string(), |l| l.describe())
            ));
        }
        errors.extend(delete_segments_session::delete_leftovers(&ctx.archive_dir));
        let (problems, recovered) = catalog.recover(&ctx.archive_dir, ctx.record_checksum)?;
        errors.extend(problems);
        for note in recovered.iter().chain(&retention_notes) {
            eprintln!("sulis archive {}: {note}", ctx.archive_dir.display());
        }
        if !claim.previous_stopped_cleanly() {
            // What the page cache may still have held at the crash: recordings stopped within a
            // generous multiple of the kernel's writeback delay before the archive was last alive.
            let last_alive = claim.previous_activity_ms().unwrap_or_else(now_ms);
            let since = last_alive - writeback_window_ms();
            errors.extend(catalog.verify_recent_stops_with(
                &ctx.archive_dir,
                since,
                ctx.record_checksum,
                &|id, base| tiered.contains_key(&(id, base)),
            )?);
        }
        errors.extend(
            catalog.finish_interrupted_changes(&ctx.archive_dir, !claim.previous_stopped_cleanly()),
        );
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
            // Said where the user looks too: what a crash left and what was done about it.
            eprintln!("sulis archive {}: {e}", ctx.archive_dir.display());
        }
        let mut control = Vec::new();
        if let Some(channel) = &ctx.control_channel {
            control.push(
                client
                    .add_subscription(channel, ctx.control_stream_id)
                    .map_err(|e| {
                        ArchiveStartError::Driver(format!("control channel '{channel}': {e}"))
                    })?,
            );
        }
        control.push(
            client
                .add_subscription(&ctx.local_control_channel, ctx.local_control_stream_id)
                .map_err(|e| {
                    ArchiveStartError::Driver(format!(
                        "local control channel '{}': {e}",
                        ctx.local_control_channel
                    ))
                })?,
        );
        let assemblers = control.iter().map(|_| FragmentAssembler::new()).collect();
        let events = if ctx.recording_events_enabled {
            let channel = &ctx.recording_events_channel;
            Some(
                client
                    .add_publication(channel, ctx.recording_events_stream_id)
                    .map_err(|e| {
                        ArchiveStartError::Driver(format!(
                            "recording events channel '{channel}': {e}"
                        ))
                    })?,
            )
        } else {
            None
        };
        let mode = match ctx.threading_mode {
            crate::context::ArchiveThreadingMode::Shared => "SHARED",
            crate::context::ArchiveThreadingMode::Dedicated => "DEDICATED",
        };
        let mut counters = ArchiveCounters::new(&client, archive_id, &ctx.archive_dir, mode);
        let clock = NanoClock::new();
        let (replayer, replayer_link) = Replayer::new(
            ctx.max_concurrent_replays,
            client.counters(),
            counters.take_replayer_counters(),
            clock,
        );
        let (recorder, recorder_link) = Recorder::new(
            ctx.file_io_max_length,
            counters.take_recorder_counters(),
            ctx.recording_events_enabled,
        );
        ArchiveCounters::set(&counters.errors, errors.len() as i64);
        let mut conductor = ArchiveConductor {
            ctx,
            client,
            archive_id,
            catalog,
            control,
            assemblers,
            sessions: BTreeMap::new(),
            next_session_id: first_id(),
            recording_subscriptions: Vec::new(),
            recorder: Some(recorder),
            replayer: Some(replayer),
            replayer_link,
            active_replays: BTreeMap::new(),
            recorder_link,
            active_recordings: BTreeMap::new(),
            workers: Vec::new(),
            worker_counters: Vec::new(),
            next_replay_id: 1,
            replications: Vec::new(),
            next_replication_id: first_id(),
            replay_tokens: ReplayTokens::new(sulis_concurrent::bit_util::generate_randomised_id()),
            deletions: VecDeque::new(),
            listings: Vec::new(),
            merged: Vec::new(),
            error_count: errors.len() as u64,
            errors,
            mark_file,
            last_activity_ns: i64::MIN / 2,
            clock,
            authenticator,
            authoriser,
            rejected_sessions: 0,
            counters,
            events,
            retention,
            tier,
        };
        if conductor.ctx.threading_mode == crate::context::ArchiveThreadingMode::Dedicated {
            conductor.start_workers()?;
        }
        made.remove = false;
        Ok(conductor)
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
        let now_ns = self.clock.now_ns();
        let mut work = 0;
        if now_ns - self.last_activity_ns >= 1_000_000_000 {
            self.last_activity_ns = now_ns;
            self.mark_file.update_activity(self.clock.epoch_ms());
        }
        work += self.on_image_events();
        // What the recorder and replayer reported comes before new requests:
        // a request sees every recording and replay that ended as ended.
        work += self.run_recordings();
        work += self.run_replays(now_ns);
        work += self.poll_control(now_ns);
        work += self.run_listings();
        work += self.run_sessions(now_ns);
        work += self.replay_tokens.do_work(now_ns);
        work += self.run_replications(Instant::now());
        work += self.run_deletions();
        work += self.run_retention(now_ns);
        work += self.run_tier_events();
        ArchiveCounters::set(&self.counters.control_sessions, self.sessions.len() as i64);
        ArchiveCounters::set(
            &self.counters.recording_sessions,
            self.active_recordings.len() as i64,
        );
        ArchiveCounters::set(
            &self.counters.replay_sessions,
            self.active_replays.len() as i64,
        );
        work
    }

    /// A tracker of this archive's duty cycles into its max cycle time
    /// and cycle-time-exceeded counters (Aeron's 103 and 104).
    pub fn duty_cycle_tracker(&self) -> DutyCycleTracker {
        let values = self.client.counters().values_buffer();
        let counter = |c: &Option<Counter>| c.as_ref().map(|c| CounterRef::new(values, c.id()));
        DutyCycleTracker::new(
            counter(&self.counters.max_cycle_time),
            counter(&self.counters.cycle_time_exceeded),
            CYCLE_TIME_THRESHOLD.as_nanos() as i64,
        )
    }

    /// Stops everything: recordings end (stop positions written), replays
    /// and sessions close.
    pub fn close(&mut self) {
        // The workers end their sessions where they stand and report them.
        for (running, _) in &self.workers {
            running.store(false, std::sync::atomic::Ordering::Release);
        }
        for (_, thread) in self.workers.drain(..) {
            let _ = thread.join();
        }
        if let Some(r) = self.recorder.as_mut() {
            r.abort_all();
        }
        self.run_recordings();
        // Dropping a replication stops its worker, which stops the source's replay.
        self.replications.clear();
        if let Some(r) = self.replayer.as_mut() {
            r.close_all();
        }
        self.run_replays(self.clock.now_ns());
        while !self.deletions.is_empty() {
            self.run_deletions();
        }
        if let Some(t) = &self.tier {
            t.close();
        }
        self.sessions.clear();
        self.recording_subscriptions.clear();
        let _ = self.catalog.flush();
        self.mark_file.close();
        self.client.close();
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
}

impl ArchiveConductor {
    /// DEDICATED: the recorder and the replayer leave this thread for
    /// threads of their own.
    fn start_workers(&mut self) -> Result<(), ArchiveStartError> {
        let recorder = self
            .recorder
            .take()
            .map(|r| ("recorder", Box::new(r) as Box<dyn Agent>));
        let replayer = self
            .replayer
            .take()
            .map(|r| ("replayer", Box::new(r) as Box<dyn Agent>));
        let values = self.client.counters().values_buffer();
        let idle = self.ctx.idle_strategy;
        for (name, agent) in recorder.into_iter().chain(replayer) {
            let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let r = running.clone();
            let (max, exceeded) =
                ArchiveCounters::duty_cycle_counters(&self.client, self.archive_id, name);
            let counter = |c: &Option<Counter>| c.as_ref().map(|c| CounterRef::new(values, c.id()));
            let tracker = DutyCycleTracker::new(
                counter(&max),
                counter(&exceeded),
                CYCLE_TIME_THRESHOLD.as_nanos() as i64,
            );
            self.worker_counters.extend(max.into_iter().chain(exceeded));
            let thread = std::thread::Builder::new()
                .name(format!("sulis-archive-{name}"))
                .spawn(move || run_agents(vec![(agent, tracker)], idle, r, NanoClock::new()))
                .map_err(|e| {
                    ArchiveStartError::io(
                        format_args!("cannot start the archive's {name} thread"),
                        &e,
                    )
                })?;
            self.workers.push((running, thread));
        }
        Ok(())
    }
}

impl Drop for ArchiveConductor {
    fn drop(&mut self) {
        // Workers of a conductor that was never closed (a panic) stop too.
        for (running, _) in &self.workers {
            running.store(false, std::sync::atomic::Ordering::Release);
        }
        if let Some(t) = &self.tier {
            t.close();
        }
    }
}

impl Agent for ArchiveConductor {
    fn do_work(&mut self) -> usize {
        ArchiveConductor::do_work(self)
    }

    fn on_close(&mut self) {
        self.close();
    }
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

/// How long data may sit in the page cache before the kernel writes it back,
/// with a wide margin: four times `vm.dirty_expire_centisecs` plus
/// `vm.dirty_writeback_centisecs`, and never under ten minutes.
fn writeback_window_ms() -> i64 {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/vm/{name}"))
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(0)
    };
    let centis = read("dirty_expire_centisecs") + read("dirty_writeback_centisecs");
    (4 * centis * 10).max(600_000)
}

/// A directory an archive start made: removed when dropped while `remove`
/// (the start failed after making it).
struct MadeDirectory {
    path: std::path::PathBuf,
    remove: bool,
}

impl Drop for MadeDirectory {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    /// Archives started in the same millisecond (one process or several)
    /// hand out different control-session and replication ids.
    #[test]
    fn archives_started_at_once_have_different_first_ids() {
        let firsts: std::collections::HashSet<i64> = (0..8).map(|_| super::first_id()).collect();
        assert_eq!(firsts.len(), 8, "{firsts:?}");
        assert!(firsts.iter().all(|&id| (0..1 << 30).contains(&id)));
    }
}
