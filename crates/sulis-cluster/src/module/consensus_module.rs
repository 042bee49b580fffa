//! The consensus module of a member (Aeron's `ConsensusModule` with the
//! I/O half of its agent), one type whatever the cluster's size: the log
//! publication and its recording, the recording log, ingress, egress, the
//! control streams to the services, the commit-position counter, control
//! toggles, snapshots and termination, all driven by
//! [`ConsensusModule::do_work`] around the
//! [`crate::module::consensus_module_agent::ConsensusModuleAgent`]'s logic.
//!
//! At start a member recovers from its latest snapshot and replays the log
//! it recorded after it through its own state and its services, so timers
//! and the services' state survive a restart (the sessions of the old terms
//! are closed in the new one, as Aeron closes them at startup). It then
//! runs the election (`replicated`), replicates or follows the log and
//! commits what a quorum's archives recorded. A member alone runs the same
//! election, as Aeron's does: it elects itself at once, its quorum itself,
//! so its log is committed as far as its own archive recorded it, and its
//! log stays on IPC when the log channel is. A member may first seed itself
//! from another's snapshot (`seed`).

use crate::module::cluster_member::ClusterMember;
use crate::module::consensus_module_agent::{ConsensusConfig, ConsensusModuleAgent, ModuleState};
use crate::module::consensus_module_snapshot::{self as cm_snapshot, SnapshotMark};
use crate::module::recording_log::RecordingLog;
use crate::module::session_manager::{ConnectRequest, SessionConfig, SessionHost, Term};
use crate::service::cluster_mark_file::{ClusterMarkFile, MarkFields};
use crate::service::recovery_state::{RecoveryState, RECOVERY_STATE_TYPE_ID};
use crate::service::snapshot_taker::{load_snapshot, SnapshotTaker};
use std::collections::HashMap;

mod replicated;
mod seed;
pub use replicated::CONSENSUS_STREAM_ID;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use sulis_archive::auth::{AllowAll, Authenticator};
use sulis_archive::client::{ArchiveClient, ArchiveClientContext};
use sulis_client::{
    AssembledMessages, Client, ClientContext, Counter, ExclusivePublication, FragmentAssembler,
    Publication, Subscription,
};
use sulis_protocol::cluster::mark_file::{component_type, DEFAULT_ERROR_BUFFER_LENGTH, MARK_FILE};
use sulis_protocol::cluster::messages::close_session_detail;
use sulis_protocol::cluster::messages::{
    cluster_action, role, time_unit, CancelTimer, ChallengeResponse, CloseSession,
    ClusterActionRequest, ClusterMembersQuery, JoinLog, ScheduleTimer, ServiceAck,
    ServiceTerminationPosition, SessionCloseRequest, SessionConnectRequest, SessionKeepAlive,
    SessionMessageHeader, NULL_POSITION, SCHEMA_ID, SESSION_HEADER_LENGTH,
};
use sulis_protocol::counters::{type_id, RecordingPositionKey};
use sulis_protocol::options::{
    parse_duration as duration, parse_int as int, parse_text as text, show, show_duration,
    Configured, OptionSpec, Sources,
};
use sulis_protocol::sbe::Header as SbeHeader;
use sulis_protocol::values::parse_size;

/// Counter type of a cluster's commit position (Aeron's `Cluster commit-pos`).
pub const COMMIT_POSITION_TYPE_ID: i32 = type_id::CLUSTER_COMMIT_POSITION;
/// Counter type of the module's state ([`ModuleState`]'s values).
pub const MODULE_STATE_TYPE_ID: i32 = type_id::CLUSTER_MODULE_STATE;
/// Counter type of the node's role (`role::*`).
pub const NODE_ROLE_TYPE_ID: i32 = type_id::CLUSTER_NODE_ROLE;
/// Counter type of the cluster control toggle ([`toggle`]).
pub const CONTROL_TOGGLE_TYPE_ID: i32 = type_id::CLUSTER_CONTROL_TOGGLE;
/// Counter type of the number of snapshots taken.
pub const SNAPSHOT_COUNTER_TYPE_ID: i32 = type_id::CLUSTER_SNAPSHOT_COUNT;
/// The election's state (type 207).
pub const ELECTION_STATE_TYPE_ID: i32 = type_id::CLUSTER_ELECTION_STATE;
/// Counter type: client sessions timed out (Aeron's 213).
pub const TIMED_OUT_CLIENT_COUNT_TYPE_ID: i32 = type_id::CLUSTER_TIMED_OUT_CLIENT_COUNT;
/// Counter type: elections begun (Aeron's 238).
pub const ELECTION_COUNT_TYPE_ID: i32 = type_id::CLUSTER_ELECTION_COUNT;
/// Counter type: the current leadership term id (Aeron's 239).
pub const LEADERSHIP_TERM_ID_TYPE_ID: i32 = type_id::CLUSTER_LEADERSHIP_TERM_ID;
/// Client messages dropped as already in the log (exactly-once resends).
pub const DUPLICATE_MESSAGES_TYPE_ID: i32 = type_id::SULIS_CLUSTER_DUPLICATE_MESSAGES;
/// The stream the consensus module's snapshot is written on.
pub const CONSENSUS_MODULE_SNAPSHOT_STREAM_ID: i32 = 107;

/// The cluster control toggle's values (Aeron's `ClusterControl.ToggleState`):
/// an operator (`sulis cluster-tool`) sets it, the leader acts on it and
/// sets it back to `NEUTRAL`.
pub mod toggle {
    /// Not yet running.
    pub const INACTIVE: i64 = 0;
    /// Nothing asked.
    pub const NEUTRAL: i64 = 1;
    /// Stop taking ingress and firing timers.
    pub const SUSPEND: i64 = 2;
    /// Take them again.
    pub const RESUME: i64 = 3;
    /// Take a snapshot on every member.
    pub const SNAPSHOT: i64 = 4;
    /// Snapshot, then stop.
    pub const SHUTDOWN: i64 = 5;
    /// Stop without a snapshot.
    pub const ABORT: i64 = 6;
    /// sulis only: every member purges its log before its latest snapshot,
    /// if every member's log is past the leader's latest snapshot.
    pub const PURGE_LOG: i64 = 100;
}

/// What a consensus module runs with (Aeron's `ConsensusModule.Context`,
/// the part this version reads).
#[derive(Clone, Debug)]
pub struct ConsensusModuleContext {
    /// The cluster directory (`recording.log`).
    pub cluster_dir: PathBuf,
    /// The media driver's directory.
    pub driver_dir: PathBuf,
    /// This member's id.
    pub member_id: i32,
    /// `cluster.members`, Aeron's format.
    pub members: String,
    /// Ingress channel; the member's ingress endpoint is added as `endpoint`.
    pub ingress_channel: String,
    /// Ingress stream (101).
    pub ingress_stream_id: i32,
    /// The log's channel (a one-member cluster's log is IPC; a cluster of
    /// several uses UDP, plain UDP when this is IPC).
    pub log_channel: String,
    /// The log's stream (100).
    pub log_stream_id: i32,
    /// The log publication's term length.
    pub log_term_length: i32,
    /// Durable commits: the `file_sync_level` the log's recording must be
    /// written at (0: the page cache; 1: data synced; 2: and metadata), so
    /// the commit position, a quorum's recorded positions, only counts what
    /// they synced.
    pub file_sync_level: u8,
    /// The stream the log is replayed on at start (103).
    pub replay_stream_id: i32,
    /// The control channel between the module and its services.
    pub control_channel: String,
    /// Services → module (105).
    pub consensus_module_stream_id: i32,
    /// Module → services (104).
    pub service_stream_id: i32,
    /// Services on this member.
    pub service_count: usize,
    /// Log fragments the service container takes per duty cycle.
    pub service_log_fragment_limit: usize,
    /// What an exception in a Python service's message or timer callback
    /// does: `stop` the service (and the member), or `skip` (record it and
    /// go on with the next entry, as Aeron's container does).
    pub service_errors: String,
    /// Clients (and backups) must connect with one of the credentials in
    /// this file, one a line (`None`: everyone may, as Aeron's default).
    pub credentials_file: Option<PathBuf>,
    /// Clients must connect with a principal named in this file
    /// (`principal secret` lines) and answer a random challenge with its
    /// HMAC under that principal's secret: the secret never crosses the
    /// wire. A backup's query is challenged the same way, answered on the
    /// consensus stream (`None`: not asked).
    pub client_keys_file: Option<PathBuf>,
    /// A client session not heard from for this long is closed.
    pub session_timeout: Duration,
    /// Most client sessions.
    pub max_concurrent_sessions: usize,
    /// Heartbeats between members, at least this often.
    pub leader_heartbeat_interval: Duration,
    /// A member not heard from for this long is gone.
    pub leader_heartbeat_timeout: Duration,
    /// Channel between members (each member's consensus endpoint is added).
    pub consensus_channel: String,
    /// The consensus stream (108).
    pub consensus_stream_id: i32,
    /// How long a ballot lasts (the nomination delay is random within half of it).
    pub election_timeout: Duration,
    /// How often a member canvasses while an election runs.
    pub election_status_interval: Duration,
    /// At node start, how long an election waits for every member before a quorum may elect.
    pub startup_canvass_timeout: Duration,
    /// The control stream of the members' archives (each at its member's archive endpoint).
    pub archive_control_stream_id: i32,
    /// Where this member's archive receives a log copied from the leader's.
    pub replication_channel: String,
    /// The application's semantic version (majors must match across a log).
    pub app_version: i32,
    /// How long to wait for the driver and the archive.
    pub message_timeout: Duration,
    /// What the module's and the service container's threads do when a
    /// duty cycle found nothing to do.
    pub idle_strategy: sulis_concurrent::idle::IdleStrategy,
    /// A Python service that reads the wall clock or unseeded randomness in
    /// a callback stops, naming the call: the Python service container
    /// checks it (`sulis.cluster.determinism`); the module only carries it.
    pub check_determinism: bool,
    /// A member starting with an empty directory copies another member's
    /// latest snapshot, and that member's log up to it, before it joins
    /// (`cluster_seed`): how a member is replaced after the log was purged.
    pub seed_from_snapshot: bool,
    /// The leader takes a snapshot (every member, at one log position) once
    /// this much log was appended since the latest one (0: never by size).
    pub snapshot_log_len: u64,
    /// ... and once this long passed since it with log appended since (zero:
    /// never by time).
    pub snapshot_interval: Duration,
    /// The most bytes of answers a session's queue in the service container
    /// holds while its egress cannot take them (then the session is closed).
    pub egress_queue_len: u64,
    /// A session whose egress took none of its waiting answers for this
    /// long is closed.
    pub egress_stall_timeout: Duration,
    /// Where each option's value came from.
    pub sources: Sources,
}

/// [`ConsensusModuleContext::snapshot_log_len`]'s default: a restarted
/// member replays at most this much log after its snapshot (docs/cluster.md,
/// the rejoin figures, says why this size).
pub const SNAPSHOT_LOG_LEN_DEFAULT: u64 = 64 << 20;
/// [`ConsensusModuleContext::snapshot_interval`]'s default.
pub const SNAPSHOT_INTERVAL_DEFAULT: Duration = Duration::from_secs(3600);

impl Default for ConsensusModuleContext {
    fn default() -> Self {
        ConsensusModuleContext {
            cluster_dir: PathBuf::from("cluster"),
            driver_dir: sulis_client::conductor::sulis_default_dir(),
            member_id: 0,
            members: String::new(),
            ingress_channel: "aeron:udp".into(),
            ingress_stream_id: 101,
            log_channel: "aeron:ipc".into(),
            log_stream_id: 100,
            log_term_length: 16 * 1024 * 1024,
            replay_stream_id: 103,
            control_channel: "aeron:ipc?term-length=128k".into(),
            consensus_module_stream_id: 105,
            service_stream_id: 104,
            service_count: 1,
            service_log_fragment_limit: 50,
            service_errors: "stop".into(),
            credentials_file: None,
            client_keys_file: None,
            file_sync_level: 0,
            session_timeout: Duration::from_secs(10),
            max_concurrent_sessions: 10,
            leader_heartbeat_interval: Duration::from_millis(200),
            leader_heartbeat_timeout: Duration::from_secs(10),
            consensus_channel: "aeron:udp?term-length=64k".into(),
            consensus_stream_id: replicated::CONSENSUS_STREAM_ID,
            election_timeout: Duration::from_secs(1),
            election_status_interval: Duration::from_millis(100),
            startup_canvass_timeout: Duration::from_secs(60),
            archive_control_stream_id: 10,
            replication_channel: "aeron:udp?endpoint=localhost:0".into(),
            app_version: 0,
            message_timeout: Duration::from_secs(10),
            idle_strategy: sulis_concurrent::idle::IdleStrategy::backoff(),
            check_determinism: false,
            seed_from_snapshot: false,
            snapshot_log_len: SNAPSHOT_LOG_LEN_DEFAULT,
            snapshot_interval: SNAPSHOT_INTERVAL_DEFAULT,
            egress_queue_len: crate::service::clustered_service_agent::EGRESS_QUEUE_LEN_DEFAULT
                as u64,
            egress_stall_timeout:
                crate::service::clustered_service_agent::EGRESS_STALL_TIMEOUT_DEFAULT,
            sources: Sources::default(),
        }
    }
}

fn show_text(v: &str) -> String {
    v.to_string()
}
fn path(s: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(s))
}
fn show_path(v: &std::path::Path) -> String {
    v.display().to_string()
}
fn size(s: &str) -> Result<i32, String> {
    let v = parse_size(s)?;
    i32::try_from(v).map_err(|_| format!("{s:?}: more than 1g"))
}
fn version(s: &str) -> Result<i32, String> {
    let parts: Vec<&str> = s.trim().split('.').collect();
    let number = |p: &str| {
        p.parse::<i32>()
            .ok()
            .filter(|v| (0..=255).contains(v))
            .ok_or_else(|| format!("{s:?}: a semantic version is major.minor.patch, each 0 to 255"))
    };
    match parts.as_slice() {
        [major, minor, patch] => Ok(sulis_protocol::sbe::semantic_version(
            number(major)?,
            number(minor)?,
            number(patch)?,
        )),
        _ => Err(format!("{s:?}: a semantic version is major.minor.patch")),
    }
}
fn service_errors(s: &str) -> Result<String, String> {
    match s.trim() {
        v @ ("stop" | "skip") => Ok(v.to_string()),
        _ => Err(format!("{s:?}: stop or skip")),
    }
}
fn size64(s: &str) -> Result<u64, String> {
    parse_size(s)
}
fn show_size64(v: &u64) -> String {
    v.to_string()
}
fn show_version(v: &i32) -> String {
    sulis_protocol::sbe::semantic_version_string(*v)
}

/// Who may open a session: everyone; or (with `credentials_file`) a client
/// whose credentials are a line of the file; or (with `client_keys_file`)
/// a client that connects with a principal of the file and answers its
/// challenge with the HMAC under that principal's secret.
fn authenticator(ctx: &ConsensusModuleContext) -> Result<Box<dyn Authenticator>, String> {
    match (&ctx.credentials_file, &ctx.client_keys_file) {
        (Some(_), Some(_)) => Err(
            "credentials_file and client_keys_file are both set: a member checks clients one way; \
             keep client_keys_file (its secrets never cross the wire)"
                .to_string(),
        ),
        (None, None) => Ok(Box::new(AllowAll)),
        (None, Some(path)) => {
            let (text, _) =
                sulis_concurrent::mapped_file::read_private_file(path, "client_keys_file")?;
            let name = format!("client_keys_file {}", path.display());
            Ok(Box::new(
                sulis_archive::auth::KeyedChallengeAuthenticator::from_text(&text, &name)?,
            ))
        }
        (Some(path), None) => {
            let name = path.display();
            let (text, _) =
                sulis_concurrent::mapped_file::read_private_file(path, "credentials_file")?;
            let credentials: Vec<Vec<u8>> = text
                .lines()
                .map(|l| l.split('#').next().unwrap_or("").trim())
                .filter(|l| !l.is_empty())
                .map(|l| l.as_bytes().to_vec())
                .collect();
            if credentials.is_empty() {
                return Err(format!(
                    "credentials_file {name} holds no credentials: no client could connect"
                ));
            }
            Ok(Box::new(sulis_archive::auth::CredentialsAuthenticator {
                credentials,
                challenge: None,
                challenge_response: Vec::new(),
            }))
        }
    }
}

/// Every option of a cluster node's consensus module.
pub static OPTIONS: &[OptionSpec<ConsensusModuleContext>] = &[
    sulis_protocol::option!(cluster_dir, "SULIS_CLUSTER_DIR", "path", "The member's directory (recording.log and its lock).", path, |v: &PathBuf| show_path(v)),
    sulis_protocol::option!(driver_dir, "SULIS_DIR", "path", "The media driver's directory (the local archive is on the same driver).", path, |v: &PathBuf| show_path(v)),
    sulis_protocol::option!(member_id, "SULIS_CLUSTER_MEMBER_ID", "", "This member's id in cluster_members.", int::<i32>, show),
    sulis_protocol::option!(members as "cluster_members", "SULIS_CLUSTER_MEMBERS", "", "Aeron's cluster.members: id,ingress,consensus,log,catchup,archive per member, separated by |.", text, |v: &String| show_text(v)),
    sulis_protocol::option!(ingress_channel, "SULIS_CLUSTER_INGRESS_CHANNEL", "channel", "Channel clients send to; the member's ingress endpoint is added as endpoint.", text, |v: &String| show_text(v)),
    sulis_protocol::option!(ingress_stream_id, "SULIS_CLUSTER_INGRESS_STREAM_ID", "", "Ingress stream (Aeron's 101).", int::<i32>, show),
    sulis_protocol::option!(log_channel, "SULIS_CLUSTER_LOG_CHANNEL", "channel", "The log's channel: a one-member cluster's log is IPC; a cluster of several sends it over UDP (plain aeron:udp when this is IPC).", text, |v: &String| show_text(v)),
    sulis_protocol::option!(log_stream_id, "SULIS_CLUSTER_LOG_STREAM_ID", "", "The log's stream (Aeron's 100).", int::<i32>, show),
    sulis_protocol::option!(log_term_length, "SULIS_CLUSTER_LOG_TERM_LENGTH", "bytes", "Term length of the log publication, a power of two from 64k to 1g; fixed for the life of the log.", size, show),
    sulis_protocol::option!(file_sync_level, "SULIS_CLUSTER_FILE_SYNC_LEVEL", "", "Durable commits: 0 commits what a quorum's archives wrote (the page cache: a killed process loses nothing, a machine crash may lose what was acknowledged); 1 only what a quorum synced to disk (fdatasync per block recorded, many messages a sync), 2 data and metadata. The member's archive must record at this file_sync_level or above (sulis cluster-node starts its archive so); the module checks the log's recording and stops, naming the archive, if not.", sulis_archive::context::sync_level, show),
    sulis_protocol::option!(replay_stream_id, "SULIS_CLUSTER_REPLAY_STREAM_ID", "", "Stream the log is replayed on at start (Aeron's 103).", int::<i32>, show),
    sulis_protocol::option!(control_channel, "SULIS_CLUSTER_CONTROL_CHANNEL", "channel", "Channel between the consensus module and its services.", text, |v: &String| show_text(v)),
    sulis_protocol::option!(consensus_module_stream_id, "SULIS_CLUSTER_CONSENSUS_MODULE_STREAM_ID", "", "Services to module (Aeron's 105).", int::<i32>, show),
    sulis_protocol::option!(service_stream_id, "SULIS_CLUSTER_SERVICE_STREAM_ID", "", "Module to services (Aeron's 104).", int::<i32>, show),
    sulis_protocol::option!(service_log_fragment_limit, "SULIS_CLUSTER_SERVICE_LOG_FRAGMENT_LIMIT", "", "Log fragments the service container takes per duty cycle (Aeron's log fragment limit, 50): the most session messages a batched service (on_session_messages) gets in one call; a batched service started by ClusterNode or sulis cluster-node gets 1000 unless this is set (a batched ledger ran 1.9x the throughput of 50).", int::<usize>, show),
    sulis_protocol::option!(service_errors, "SULIS_CLUSTER_SERVICE_ERRORS", "", "What an exception raised by a Python service's on_session_message, on_session_messages or on_timer_event does: stop (the service stops at that log position and so does the member; every restart replays the entry into the same exception) or skip (the entry counts as applied with whatever the callback did before raising, the exception is printed and recorded in the service's error log, which cluster-tool errors shows, and the service goes on with the next entry, as Aeron's container does). Each member applies its log alone, so skip keeps members alike only when the exception is deterministic (it depends on the entry and the service's state, not on the member).", service_errors, |v: &String| show_text(v)),
    sulis_protocol::option!(credentials_file, "SULIS_CLUSTER_CREDENTIALS_FILE", "path", "Clients must connect with one of the credentials in this file (one a line, as the client sends them; # starts a comment; mode 600), or are refused with AUTHENTICATION_REJECTED; so must a ClusterBackup's queries (none: everyone may, as Aeron's default).", |s: &str| Ok::<_, String>(if s.is_empty() || s == "none" { None } else { Some(PathBuf::from(s)) }), |v: &Option<PathBuf>| v.as_ref().map_or("none".to_string(), |p| show_path(p))),
    sulis_protocol::option!(client_keys_file, "SULIS_CLUSTER_CLIENT_KEYS_FILE", "path", "Clients must connect with a principal named in this file ('principal secret' a line, secrets of 16 bytes or more; # starts a comment; mode 600) and answer a random challenge with the HMAC-SHA256 of it and the connect's response channel under that principal's secret (ClusterClient(credentials=principal, secret=...)): the secret never crosses the wire, and a captured answer opens no other session. Refused: AUTHENTICATION_REJECTED. A ClusterBackup's query is challenged the same way (its principal a line of the file). Not with credentials_file (none: not asked).", |s: &str| Ok::<_, String>(if s.is_empty() || s == "none" { None } else { Some(PathBuf::from(s)) }), |v: &Option<PathBuf>| v.as_ref().map_or("none".to_string(), |p| show_path(p))),
    sulis_protocol::option!(session_timeout, "SULIS_CLUSTER_SESSION_TIMEOUT", "duration", "A client session not heard from (messages, keep-alives) for this long is closed, its client told.", duration, show_duration),
    sulis_protocol::option!(max_concurrent_sessions, "SULIS_CLUSTER_MAX_CONCURRENT_SESSIONS", "", "Client sessions at once, pending and open; more are refused with an ERROR naming the limit.", int::<usize>, show),
    sulis_protocol::option!(leader_heartbeat_interval, "SULIS_CLUSTER_LEADER_HEARTBEAT_INTERVAL", "duration", "The leader sends its commit position at least this often.", duration, show_duration),
    sulis_protocol::option!(leader_heartbeat_timeout, "SULIS_CLUSTER_LEADER_HEARTBEAT_TIMEOUT", "duration", "A member not heard from for this long is not counted; also told to clients.", duration, show_duration),
    sulis_protocol::option!(consensus_channel, "SULIS_CLUSTER_CONSENSUS_CHANNEL", "channel", "Channel between members; each member's consensus endpoint is added as endpoint.", text, |v: &String| show_text(v)),
    sulis_protocol::option!(consensus_stream_id, "SULIS_CLUSTER_CONSENSUS_STREAM_ID", "", "Consensus stream between members (Aeron's 108).", int::<i32>, show),
    sulis_protocol::option!(election_timeout, "SULIS_CLUSTER_ELECTION_TIMEOUT", "duration", "How long a ballot lasts; a member's nomination waits a random part of half of it.", duration, show_duration),
    sulis_protocol::option!(election_status_interval, "SULIS_CLUSTER_ELECTION_STATUS_INTERVAL", "duration", "How often a member canvasses the others while an election runs.", duration, show_duration),
    sulis_protocol::option!(startup_canvass_timeout, "SULIS_CLUSTER_STARTUP_CANVASS_TIMEOUT", "duration", "At node start, how long an election waits to hear every member before a quorum may elect.", duration, show_duration),
    sulis_protocol::option!(archive_control_stream_id, "SULIS_CLUSTER_ARCHIVE_CONTROL_STREAM_ID", "", "Control stream of the members' archives, each at its member's archive endpoint (Aeron's 10).", int::<i32>, show),
    sulis_protocol::option!(replication_channel, "SULIS_CLUSTER_REPLICATION_CHANNEL", "channel", "Where this member's archive receives terms of the log copied from the leader's archive.", text, |v: &String| show_text(v)),
    sulis_protocol::option!(app_version, "SULIS_CLUSTER_APP_VERSION", "", "The service's semantic version major.minor.patch, written with each term: a log of another major version is refused.", version, show_version),
    sulis_protocol::option!(message_timeout, "SULIS_CLUSTER_MESSAGE_TIMEOUT", "duration", "How long to wait for the driver, the archive and the services at start.", duration, show_duration),
    sulis_protocol::option!(idle_strategy, "SULIS_CLUSTER_IDLE_STRATEGY", "", "What the module's and the service's threads do when idle: backoff (spin, then park 1 us to 1 ms; Aeron's also yields, which starves an agent on busy cores), backoff:<longest park>, busy-spin, yielding, sleeping or sleeping:<duration>.", sulis_concurrent::idle::IdleStrategy::parse, |v: &sulis_concurrent::idle::IdleStrategy| v.name()),
    sulis_protocol::option!(check_determinism, "SULIS_CLUSTER_CHECK_DETERMINISM", "bool", "A Python service that reads the wall clock (time.time, datetime.now, ...) or unseeded randomness (random, os.urandom, uuid4) in a callback stops, naming the call and the log position; a development check costing a Python call per entry.", sulis_protocol::values::parse_bool, show),
    sulis_protocol::option!(snapshot_log_len, "SULIS_CLUSTER_SNAPSHOT_LOG_LEN", "bytes", "The leader takes a snapshot (every member's services and module, at one log position) once this much log was appended since the latest one, so a restarted member replays at most this much before it rejoins (etcd's snapshot-count, by size); 0: never by size. A service without on_take_snapshot is never snapshotted; a failed snapshot is tried again after 1 minute, then 2, up to an hour.", size64, show_size64),
    sulis_protocol::option!(snapshot_interval, "SULIS_CLUSTER_SNAPSHOT_INTERVAL", "duration", "The leader also takes a snapshot once this long passed since the latest one (or since it led) with log appended since; 0: never by time.", duration, show_duration),
    sulis_protocol::option!(egress_queue_len, "SULIS_CLUSTER_EGRESS_QUEUE_LEN", "bytes", "A service's answers its client's egress cannot take now (back-pressured, or not connected) wait in the session's queue in the service container, so offer never waits for one client; past this many bytes waiting the session is closed and its client told why.", size64, show_size64),
    sulis_protocol::option!(egress_stall_timeout, "SULIS_CLUSTER_EGRESS_STALL_TIMEOUT", "duration", "A session whose egress took none of its waiting answers for this long (a client that does not read, or is gone) is closed and its client told why.", duration, show_duration),
    sulis_protocol::option!(seed_from_snapshot, "SULIS_CLUSTER_SEED_FROM_SNAPSHOT", "bool", "A member starting with no recording log copies the latest snapshot another member holds, and that member's log up to it, from its archive before it joins (how a lost member is replaced after a log purge); with no snapshot anywhere it starts empty, and with no member answering within message_timeout it fails.", sulis_protocol::values::parse_bool, show),
];

impl Configured for ConsensusModuleContext {
    const WHAT: &'static str = "cluster";
    fn table() -> &'static [OptionSpec<Self>] {
        OPTIONS
    }
    fn sources_mut(&mut self) -> &mut Sources {
        &mut self.sources
    }
    fn sources(&self) -> &Sources {
        &self.sources
    }
}

impl ConsensusModuleContext {
    /// Checks the settings together; an error names the setting.
    pub fn conclude(&self) -> Result<(), String> {
        let length = self.log_term_length;
        if !(64 * 1024..=1024 * 1024 * 1024).contains(&length) || length.count_ones() != 1 {
            return Err(format!(
                "log_term_length {length}: a power of two from 64k to 1g"
            ));
        }
        if !(1..=1 << 20).contains(&self.service_log_fragment_limit) {
            return Err(format!(
                "service_log_fragment_limit {}: 1 to 1048576",
                self.service_log_fragment_limit
            ));
        }
        if !(1..=9).contains(&self.service_count) {
            return Err(format!(
                "service_count {}: 1 to 9 (the recovery-state counter's key holds 9 snapshot recording ids)",
                self.service_count
            ));
        }
        for (name, d) in [
            ("session_timeout", self.session_timeout),
            ("leader_heartbeat_interval", self.leader_heartbeat_interval),
            ("leader_heartbeat_timeout", self.leader_heartbeat_timeout),
            ("message_timeout", self.message_timeout),
            ("election_timeout", self.election_timeout),
            ("election_status_interval", self.election_status_interval),
            ("startup_canvass_timeout", self.startup_canvass_timeout),
        ] {
            if d.is_zero() {
                return Err(format!("{name} must be more than 0"));
            }
        }
        if self.leader_heartbeat_interval >= self.leader_heartbeat_timeout {
            return Err(format!(
                "leader_heartbeat_interval {} is not below leader_heartbeat_timeout {}",
                show_duration(&self.leader_heartbeat_interval),
                show_duration(&self.leader_heartbeat_timeout)
            ));
        }
        if self.max_concurrent_sessions == 0 {
            return Err("max_concurrent_sessions must be at least 1".into());
        }
        Ok(())
    }
}

/// The module's publications, as the session manager and the agent reach
/// them.
struct Io {
    client: Client,
    log: ExclusivePublication,
    /// Egress by the session manager's key (`None`: could not be made).
    egress: HashMap<u64, Option<Publication>>,
}

impl SessionHost for Io {
    fn connect_egress(&mut self, key: u64, channel: &str, stream_id: i32) {
        if self.egress.contains_key(&key) {
            return;
        }
        let publication = self.client.add_publication(channel, stream_id).ok();
        self.egress.insert(key, publication);
    }

    fn is_egress_connected(&mut self, key: u64) -> Option<bool> {
        match self.egress.get(&key) {
            Some(Some(p)) => Some(p.is_connected()),
            _ => None,
        }
    }

    fn send_egress(&mut self, key: u64, message: &[u8]) -> bool {
        match self.egress.get(&key) {
            Some(Some(p)) => p.offer(message).is_ok(),
            _ => false,
        }
    }

    fn close_egress(&mut self, key: u64) {
        if let Some(Some(p)) = self.egress.remove(&key) {
            p.close_without_waiting();
        }
    }

    fn append_to_log(&mut self, entry: &[u8]) -> Option<i64> {
        self.log.offer(entry).ok()
    }
}

/// A running consensus module.
pub struct ConsensusModule {
    /// The directory's lock, held while the module runs (the kernel drops
    /// it when the process dies, however it dies).
    _lock: std::fs::File,
    /// `cluster-mark.dat`: who runs here, and the errors it met.
    mark: ClusterMarkFile,
    /// How far the log's times ran ahead of this member's wall clock (ms,
    /// never below 0): added to what it writes ([`Self::log_time`]).
    clock_offset_ms: i64,
    /// When the mark file's activity timestamp is next moved (epoch ms).
    next_activity_ms: i64,
    ctx: ConsensusModuleContext,
    io: Io,
    archive: ArchiveClient,
    recording_log: RecordingLog,
    agent: ConsensusModuleAgent,
    members: Vec<ClusterMember>,
    auth: Box<dyn Authenticator>,
    ingress: Subscription,
    ingress_assembler: FragmentAssembler,
    /// The ingress messages of a poll (kept for their buffers).
    ingress_messages: AssembledMessages,
    /// Ingress messages the log could not take yet, with their images, in order.
    pending_ingress: std::collections::VecDeque<(Vec<u8>, i64)>,
    to_services: ExclusivePublication,
    from_services: Subscription,
    control_assembler: FragmentAssembler,
    /// Services' requests read while waiting for their acks.
    deferred_control: Vec<Vec<u8>>,
    commit: Counter,
    module_state: Counter,
    node_role: Counter,
    control_toggle: Counter,
    snapshot_count: Counter,
    election_state: Counter,
    /// Elections begun here (Aeron's counts each `Election` made).
    election_count: Counter,
    /// The term this member is in, as Aeron's counter shows it.
    leadership_term_id: Counter,
    /// Sessions the leader closed for silence.
    timed_out_clients: Counter,
    duplicate_messages: Counter,
    /// Tells the services what they recover from, until they joined.
    recovery_state: Option<Counter>,
    /// A snapshot the services are taking: where, and their acks.
    snapshot: Option<PendingSnapshot>,
    /// Where this member's current term begins.
    term_base_log_position: i64,
    /// Why the last snapshot failed, if it did.
    last_snapshot_error: Option<String>,
    /// PURGE_LOG actions acted on, and the last one's outcome here.
    purge_count: i64,
    last_purge: Option<Result<LogPurge, String>>,
    /// Snapshots that failed since the module started.
    failed_snapshot_count: i64,
    /// The snapshot policy's state (`check_auto_snapshot`).
    auto_snapshot: AutoSnapshot,
    termination: Option<Termination>,
    recording_position_counter: i32,
    recording_id: i64,
    term: Term,
    join_log: JoinLog,
    join_log_sent: bool,
    /// Elections and the replicated log (`None` only until the launch
    /// starts them, whatever the member count).
    replicated: Option<Box<replicated::Replicated>>,
}

/// The snapshot policy's state.
#[derive(Default)]
struct AutoSnapshot {
    /// When it looks next (it looks every 100 ms).
    next_check_ns: i64,
    /// Cluster time it began counting from when no snapshot was taken yet
    /// (it first looked as leader).
    since_ms: Option<i64>,
    /// Snapshots it asked for that failed in a row, and when it may ask again.
    failures: u32,
    retry_at_ns: i64,
    /// The failed-snapshot count when it last asked.
    failed_seen: i64,
    /// It asked, and the snapshot is not yet over.
    asked: bool,
}

/// How often the snapshot policy looks.
const AUTO_SNAPSHOT_CHECK_NS: i64 = 100_000_000;
/// The first wait after a failed snapshot the policy asked for (doubling, up
/// to [`AUTO_SNAPSHOT_RETRY_MAX_NS`]).
const AUTO_SNAPSHOT_RETRY_NS: i64 = 60_000_000_000;
const AUTO_SNAPSHOT_RETRY_MAX_NS: i64 = 3_600_000_000_000;

/// A snapshot being taken at `mark`: each service's recording once it acked.
struct PendingSnapshot {
    mark: SnapshotMark,
    timestamp: i64,
    acks: Vec<Option<i64>>,
    /// A service that has not acked by then fails the set.
    deadline: Instant,
    /// A shutdown: the member stops once the set is recorded.
    then_terminate: bool,
}

/// The member stopping: the log position its services stop at, when the
/// module stops waiting for them, and which acknowledged.
struct Termination {
    log_position: i64,
    deadline: Instant,
    acked: Vec<bool>,
}

fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl ConsensusModule {
    /// Starts the module: opens the recording log, replays the log it holds
    /// (the services replay it too), then leads a new term.
    pub fn launch(ctx: ConsensusModuleContext) -> Result<ConsensusModule, String> {
        Self::launch_with(ctx, || {})
    }

    /// [`Self::launch`], calling `on_claimed` once the cluster directory is
    /// this module's (its lock taken, its mark file written): a runner
    /// starts the services' containers then, so that a second node started
    /// on a directory in use stops before its services touch anything there.
    pub fn launch_with(
        ctx: ConsensusModuleContext,
        on_claimed: impl FnOnce(),
    ) -> Result<ConsensusModule, String> {
        ctx.conclude()?;
        let members = ClusterMember::parse(&ctx.members).map_err(|e| err("cluster members", e))?;
        let me = members
            .iter()
            .find(|m| m.id == ctx.member_id)
            .cloned()
            .ok_or_else(|| {
                format!(
                    "member id {} is not in cluster members '{}'",
                    ctx.member_id, ctx.members
                )
            })?;
        std::fs::create_dir_all(&ctx.cluster_dir)
            .map_err(|e| err(&ctx.cluster_dir.display().to_string(), e))?;
        // Before anything in the directory is read or repaired: one module
        // per directory, whoever else tries.
        let lock = claim_dir(&ctx.cluster_dir)?;
        let fields = MarkFields {
            component_type: component_type::CONSENSUS_MODULE,
            member_id: ctx.member_id,
            service_id: -1,
            cluster_id: 0,
            archive_stream_id: ctx.archive_control_stream_id,
            service_stream_id: ctx.service_stream_id,
            consensus_module_stream_id: ctx.consensus_module_stream_id,
            ingress_stream_id: ctx.ingress_stream_id,
            aeron_directory: ctx.driver_dir.display().to_string(),
            control_channel: ctx.control_channel.clone(),
            ingress_channel: ctx.ingress_channel.clone(),
            service_name: String::new(),
            error_buffer_length: DEFAULT_ERROR_BUFFER_LENGTH,
        };
        let mark =
            ClusterMarkFile::create(&ctx.cluster_dir, MARK_FILE, &fields, Self::cluster_time())
                .map_err(|e| format!("the cluster's mark file: {e}"))?;
        on_claimed();
        match Self::launch_claimed(ctx, members, me, lock, mark.clone()) {
            Ok(module) => {
                mark.signal_ready(Self::cluster_time());
                Ok(module)
            }
            Err(why) => {
                mark.record_error(&why, Self::cluster_time());
                mark.signal_failed();
                Err(why)
            }
        }
    }

    /// The rest of [`Self::launch`], once the directory is claimed and its
    /// mark file written.
    fn launch_claimed(
        ctx: ConsensusModuleContext,
        members: Vec<ClusterMember>,
        me: ClusterMember,
        lock: std::fs::File,
        mark: ClusterMarkFile,
    ) -> Result<ConsensusModule, String> {
        let client = Client::connect(ClientContext {
            dir: ctx.driver_dir.clone(),
            driver_timeout: ctx.message_timeout,
            name: format!("sulis-consensus-module-{}", ctx.member_id),
            interrupt: None,
        })
        .map_err(|e| err("media driver", e))?;
        let archive = ArchiveClient::connect(
            &client,
            ArchiveClientContext {
                message_timeout: ctx.message_timeout,
                ..ArchiveClientContext::default()
            },
        )
        .map_err(|e| err("local archive", e))?;
        let recording_log = RecordingLog::open(&ctx.cluster_dir)?;
        let agent = ConsensusModuleAgent::new(ConsensusConfig {
            member_id: ctx.member_id,
            service_count: ctx.service_count,
            app_version: ctx.app_version,
            time_unit: time_unit::MILLIS,
            sessions: SessionConfig {
                member_id: ctx.member_id,
                session_timeout_ns: ctx.session_timeout.as_nanos() as i64,
                max_concurrent_sessions: ctx.max_concurrent_sessions,
                leader_heartbeat_timeout_ns: ctx.leader_heartbeat_timeout.as_nanos() as i64,
            },
            leader_heartbeat_interval_ns: ctx.leader_heartbeat_interval.as_nanos() as i64,
            leader_heartbeat_timeout_ns: ctx.leader_heartbeat_timeout.as_nanos() as i64,
        });
        let ingress_channel = with_param(
            &ctx.ingress_channel,
            &format!("endpoint={}", me.ingress_endpoint),
        );
        let ingress = client
            .add_subscription(&ingress_channel, ctx.ingress_stream_id)
            .map_err(|e| err(&ingress_channel, e))?;
        let to_services = client
            .add_exclusive_publication(&ctx.control_channel, ctx.service_stream_id)
            .map_err(|e| err(&ctx.control_channel, e))?;
        let from_services = client
            .add_subscription(&ctx.control_channel, ctx.consensus_module_stream_id)
            .map_err(|e| err(&ctx.control_channel, e))?;
        let commit = client
            .add_counter(
                COMMIT_POSITION_TYPE_ID,
                &0i32.to_le_bytes(),
                "Cluster commit-pos: clusterId=0",
            )
            .map_err(|e| err("commit-pos counter", e))?;
        let counter = |type_id: i32, name: &str| {
            client
                .add_counter(
                    type_id,
                    &0i32.to_le_bytes(),
                    &format!("{name}: clusterId=0"),
                )
                .map_err(|e| err(name, e))
        };
        let module_state = counter(MODULE_STATE_TYPE_ID, "Consensus Module state")?;
        let node_role = counter(NODE_ROLE_TYPE_ID, "Cluster node role")?;
        let control_toggle = counter(CONTROL_TOGGLE_TYPE_ID, "Cluster control toggle")?;
        let snapshot_count = counter(SNAPSHOT_COUNTER_TYPE_ID, "Snapshot count")?;
        let election_state = counter(ELECTION_STATE_TYPE_ID, "Election state")?;
        let election_count = counter(ELECTION_COUNT_TYPE_ID, "Cluster election count")?;
        let leadership_term_id = counter(LEADERSHIP_TERM_ID_TYPE_ID, "Cluster leadership term id")?;
        leadership_term_id.set(-1);
        let timed_out_clients = counter(
            TIMED_OUT_CLIENT_COUNT_TYPE_ID,
            "Cluster timed out client count",
        )?;
        let duplicate_messages = counter(
            DUPLICATE_MESSAGES_TYPE_ID,
            "Cluster duplicate client messages dropped",
        )?;
        // No election yet: the launch begins one (INIT), whatever the count.
        election_state.set(crate::module::election::ElectionState::Init.code() as i64);
        module_state.set(ModuleState::Init as i64);
        control_toggle.set(toggle::INACTIVE);
        // A placeholder log publication until the term's is made below: the
        // smallest term, sparse (the driver's IPC default reserves 192 MB).
        let placeholder = client
            .add_exclusive_publication(
                "aeron:ipc?alias=log-placeholder|term-length=64k|sparse=true",
                ctx.log_stream_id + 1000,
            )
            .map_err(|e| err("log", e))?;
        let mut module = ConsensusModule {
            _lock: lock,
            mark,
            next_activity_ms: 0,
            io: Io {
                client,
                log: placeholder,
                egress: HashMap::new(),
            },
            archive,
            recording_log,
            agent,
            members,
            auth: authenticator(&ctx)?,
            ingress,
            ingress_assembler: FragmentAssembler::new(),
            ingress_messages: AssembledMessages::new(),
            pending_ingress: std::collections::VecDeque::new(),
            to_services,
            from_services,
            control_assembler: FragmentAssembler::new(),
            deferred_control: Vec::new(),
            commit,
            module_state,
            node_role,
            control_toggle,
            snapshot_count,
            election_state,
            election_count,
            leadership_term_id,
            timed_out_clients,
            duplicate_messages,
            recovery_state: None,
            snapshot: None,
            term_base_log_position: 0,
            last_snapshot_error: None,
            purge_count: 0,
            last_purge: None,
            failed_snapshot_count: 0,
            auto_snapshot: AutoSnapshot::default(),
            termination: None,
            recording_position_counter: -1,
            recording_id: -1,
            clock_offset_ms: 0,
            term: Term {
                leadership_term_id: -1,
                leader_member_id: ctx.member_id,
                ingress_endpoints: format!("{}={}", me.id, me.ingress_endpoint),
            },
            join_log: JoinLog::default(),
            join_log_sent: false,
            replicated: None,
            ctx,
        };
        // The election decides who leads, and replays the local log (as far
        // as it is committed) before the services join the new term; a
        // member alone runs it too, as Aeron's does, electing itself at once.
        if module.ctx.seed_from_snapshot {
            module.seed_from_snapshot()?;
        }
        let base = module.recover_replicated()?;
        module.start_replicated(base)?;
        if module.members.len() == 1 {
            module.elect_alone()?;
        }
        Ok(module)
    }

    /// A member alone has nobody to wait for: its election (replaying its
    /// log first) runs here to its end, so the launch returns once it leads
    /// its term, as it did before it ran one. Its services, running beside
    /// it, join the log meanwhile.
    fn elect_alone(&mut self) -> Result<(), String> {
        while self.election_state().is_some() {
            if self.do_work()? == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        Ok(())
    }

    /// Sets the authenticator for client sessions (default: everyone).
    pub fn set_authenticator(&mut self, auth: Box<dyn Authenticator>) {
        self.auth = auth;
    }

    /// The term this member leads.
    pub fn leadership_term_id(&self) -> i64 {
        self.term.leadership_term_id
    }

    /// How far the log is committed.
    pub fn commit_position(&self) -> i64 {
        self.agent.commit_position
    }

    /// The archive recording holding the log.
    pub fn log_recording_id(&self) -> i64 {
        self.recording_id
    }

    /// The open sessions.
    pub fn session_count(&self) -> usize {
        self.agent.sessions.sessions().count()
    }

    /// The module's clock for sessions and heartbeats: the cluster clock in
    /// nanoseconds, so the activity times of sessions replayed from the log
    /// (their entries' cluster times) and live ones compare.
    fn now_ns(&self) -> i64 {
        Self::cluster_time().saturating_mul(1_000_000)
    }

    /// The cluster time this member puts into the log (ms): its wall clock,
    /// moved ahead by as much as the log's latest time (applied, replayed or
    /// appended) was ever ahead of it. Members' clocks disagree; a leader
    /// whose clock is behind the last leader's would otherwise write times
    /// before those already in the log, and services would see cluster time
    /// go back. With the offset it never does, and it goes on advancing at
    /// the wall clock's rate rather than standing still until this clock
    /// catches up. The cost: after a leader whose clock ran ahead, cluster
    /// time stays ahead of the true time by as much (docs/cluster.md).
    /// Timeouts between members use the wall clock unmoved ([`Self::now_ns`]).
    fn log_time(&mut self) -> i64 {
        let wall = Self::cluster_time();
        self.clock_offset_ms = self.clock_offset_ms.max(self.agent.cluster_time - wall);
        wall + self.clock_offset_ms
    }

    fn cluster_time() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }

    /// Takes the log's recording as this member's and returns where it
    /// stopped: refused while it is still recorded (a module still running
    /// on the directory, or one killed moments ago) or when it ends before
    /// the snapshot `from` it recovers from.
    fn stopped_log_end(&mut self, recording_id: i64, from: i64) -> Result<i64, String> {
        self.recording_id = recording_id;
        let stop = self
            .archive
            .get_stop_position(recording_id)
            .map_err(|e| format!("the log's recording {recording_id}: {e}"))?;
        if stop == NULL_POSITION {
            return Err(format!(
                "the log's recording {recording_id} is still being recorded (a consensus module on {} still running, or one killed moments ago whose publication the driver has not yet timed out)",
                self.ctx.cluster_dir.display()
            ));
        }
        if stop < from {
            return Err(format!(
                "the log's recording {recording_id} ends at {stop}, before the snapshot it recovers from at {from} ({})",
                self.recording_log.path().display()
            ));
        }
        Ok(stop)
    }

    /// Loads the latest whole snapshot set the recording log names into
    /// this module, and tells the services theirs (the recovery-state
    /// counter, made here, before any JoinLog). Returns the log position to
    /// replay from: the snapshot's, or 0 without one.
    fn load_latest_snapshot(&mut self) -> Result<i64, String> {
        let n = self.ctx.service_count;
        let plan: Option<Vec<sulis_protocol::cluster::recording_log::Entry>> = self
            .recording_log
            .latest_snapshot(n as i32)
            .map(|set| set.into_iter().cloned().collect());
        let mut recovery = RecoveryState {
            leadership_term_id: NULL_POSITION,
            log_position: 0,
            timestamp: 0,
            replay_required: true,
            cluster_id: 0,
            snapshot_recording_ids: vec![NULL_POSITION; n],
        };
        if let Some(set) = &plan {
            let cm = &set[0];
            let messages = load_snapshot(
                &self.io.client,
                &mut self.archive,
                cm.recording_id,
                self.ctx.replay_stream_id,
                self.ctx.message_timeout * 6,
            )
            .map_err(|e| format!("the consensus module's {e}"))?;
            let activity_ns = cm.timestamp.saturating_mul(self.agent.ns_per_unit());
            let mark = cm_snapshot::load(&mut self.agent, &messages, activity_ns)?;
            if mark.log_position != cm.log_position {
                return Err(format!(
                    "the consensus module's snapshot (recording {}) is of log position {}; {} says {}",
                    cm.recording_id,
                    mark.log_position,
                    self.recording_log.path().display(),
                    cm.log_position
                ));
            }
            self.agent.cluster_time = cm.timestamp;
            recovery.leadership_term_id = cm.leadership_term_id;
            recovery.log_position = cm.log_position;
            recovery.timestamp = cm.timestamp;
            for e in &set[1..] {
                recovery.snapshot_recording_ids[e.service_id as usize] = e.recording_id;
            }
            self.commit.set(cm.log_position);
        }
        let counter = self
            .io
            .client
            .add_counter(RECOVERY_STATE_TYPE_ID, &recovery.key(), &recovery.label())
            .map_err(|e| err("recovery-state counter", e))?;
        self.recovery_state = Some(counter);
        Ok(recovery.log_position)
    }

    /// Sends JoinLog and waits for every service's ServiceAck at `position`
    /// (Aeron's `awaitServicesReady`).
    fn await_services_joined(&mut self, position: i64) -> Result<(), String> {
        // A service first loads its snapshot, given as long (6 message timeouts).
        let wait = self.ctx.message_timeout * 6;
        let deadline = Instant::now() + wait;
        let encoded = self.join_log.encode();
        while self.to_services.offer(&encoded).is_err() {
            if Instant::now() > deadline {
                return Err(format!(
                    "no service took JoinLog within {:?} (is the service container running on driver {}?)",
                    wait,
                    self.ctx.driver_dir.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.join_log_sent = true;
        let mut acked = vec![false; self.ctx.service_count];
        while acked.iter().any(|a| !a) {
            if Instant::now() > deadline {
                let missing: Vec<usize> = (0..acked.len()).filter(|&i| !acked[i]).collect();
                return Err(format!(
                    "service(s) {missing:?} did not join the log at {position} within {:?}",
                    wait
                ));
            }
            let mut acks = Vec::new();
            let deferred = &mut self.deferred_control;
            let assembler = &mut self.control_assembler;
            let n = self
                .from_services
                .poll(
                    |payload, header| -> Result<(), ()> {
                        if let Some(m) = assembler.on_fragment(payload, header) {
                            match ServiceAck::decode(&m.payload) {
                                Ok(a) => acks.push(a),
                                // A service replaying the log schedules
                                // timers before it acks: kept, in order.
                                Err(_) => deferred.push(m.payload),
                            }
                        }
                        Ok(())
                    },
                    10,
                )
                .unwrap_or(0);
            for a in acks {
                if a.log_position != position {
                    return Err(format!(
                        "service {} acknowledged position {} joining the log at {position}",
                        a.service_id, a.log_position
                    ));
                }
                if let Some(slot) = acked.get_mut(a.service_id as usize) {
                    *slot = true;
                }
            }
            if n == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }

    /// The election's state, or "no election" (for the module's lines).
    fn election_state_name(&self) -> &'static str {
        self.election_state().map_or("no election", |s| s.name())
    }

    /// One duty cycle; returns the work done. An error is fatal (the
    /// module cannot go on as a replica); it is also recorded in the mark
    /// file's error log, where `cluster-tool errors` finds it afterwards.
    pub fn do_work(&mut self) -> Result<usize, String> {
        let now_ms = Self::cluster_time();
        if now_ms >= self.next_activity_ms {
            self.mark.update_activity(now_ms);
            self.next_activity_ms = now_ms + 1000;
        }
        let (before, started) = (self.election_state_name(), Instant::now());
        let outcome = self.duty_cycle();
        // A duty cycle never waits by design; a call that did (an fsync of
        // the node-state file or the recording log, an archive request, a
        // driver's answer) is said, so a stall names where the module was
        // rather than leaving a silence in its lines.
        let spent = started.elapsed();
        if spent >= Duration::from_secs(1) {
            self.log_event(format!(
                "member {} spent {} ms in one duty cycle ({} -> {}), doing nothing else",
                self.ctx.member_id,
                spent.as_millis(),
                before,
                self.election_state_name()
            ));
        }
        if let Err(why) = &outcome {
            self.mark.record_error(why, now_ms);
        }
        outcome
    }

    fn duty_cycle(&mut self) -> Result<usize, String> {
        let now_ns = self.now_ns();
        let cluster_time = self.log_time();
        let mut work = 0;
        if self.replicated.is_some() {
            work += self.replicated_work()?;
            if self.election_state().is_some() {
                return Ok(work + self.answer_queries_in_election());
            }
        }
        let leading = self.agent.role == role::LEADER;
        work += self.poll_services(now_ns, cluster_time)?;
        work += self.check_auto_snapshot(now_ns, cluster_time);
        work += self.check_control_toggle(cluster_time);
        work += self.check_snapshot()?;
        work += self.check_termination();
        // What the authenticator kept for sessions gone before they opened
        // (a challenge never answered) goes with them, in any role.
        for id in self.agent.sessions.take_dropped() {
            self.auth.on_session_dropped(id);
        }
        // Suspended, or while a snapshot is taken, the log takes nothing:
        // the module's snapshot is of its state at the action's position,
        // and ingress waits in its image (clients are back-pressured, nothing
        // is dropped); no session times out meanwhile (activity restarts when
        // the module is active again).
        if self.agent.state == ModuleState::Active {
            work += self.poll_ingress(now_ns, cluster_time);
            let term = self.term.clone();
            let sessions = &mut self.agent.sessions;
            work += sessions.process_pending(&mut self.io, &term, now_ns, cluster_time);
            // Only a leader appends: session timeouts, timers and service
            // messages come to a follower through the log.
            if leading {
                work += sessions.check_sessions(&mut self.io, &term, now_ns, cluster_time);
                // No committed count before the term's first entry commits:
                // what the election replayed is this leader's, not yet a
                // quorum's in this term (Raft's figure 8).
                if self.agent.commit_position >= self.agent.term_first_entry_end {
                    work += sessions.send_message_acks(&mut self.io, &term);
                }
                self.timed_out_clients
                    .set(sessions.timed_out_count() as i64);
                self.duplicate_messages
                    .set(sessions.duplicate_count() as i64);
            }
            work += sessions.send_rejections(&mut self.io, &term, now_ns);
            if leading {
                work += self
                    .agent
                    .poll_timers_and_service_messages(&mut self.io, cluster_time);
            }
        }
        // The commit position moved in `replicated_work` above: the quorum
        // of the members' recorded positions (a member alone: its own).
        Ok(work)
    }

    /// The log's recording and its position counter, found once the archive
    /// records the log: the positions this member appends (and, leading,
    /// commits) count from it. Durable commits (`file_sync_level` > 0) need
    /// the archive to sync the recording at that level or above: a position
    /// it only wrote to the page cache would count as appended and a machine
    /// crash could lose what was acknowledged. Refused, naming the archive.
    pub(crate) fn count_recording(
        &mut self,
        counter_id: i32,
        key: RecordingPositionKey,
    ) -> Result<(), String> {
        let level = key.file_sync_level.unwrap_or(0);
        if level < self.ctx.file_sync_level {
            return Err(format!(
                "file_sync_level {}: the log's recording {} is written by archive {} at file_sync_level {level}{}, \
                 so a commit could count what a machine crash loses; start the member's archive with \
                 file_sync_level {} or above",
                self.ctx.file_sync_level,
                key.recording_id,
                key.archive_id,
                if key.file_sync_level.is_none() {
                    " (its counter does not say: not a sulis archive)"
                } else {
                    ""
                },
                self.ctx.file_sync_level
            ));
        }
        self.recording_position_counter = counter_id;
        self.recording_id = key.recording_id;
        if let Some(rep) = self.replicated.as_mut() {
            rep.recording_lost_in_election = false;
            // The others hear the level the log is recorded at (at least
            // this module's, checked above): a leader that commits only what
            // a quorum synced counts this member only if it is high enough.
            rep.set_file_sync_level(level);
        }
        Ok(())
    }

    /// The module's state and role as counters, for tools.
    fn publish_state(&self) {
        self.module_state.set(self.agent.state as i64);
        self.node_role.set(self.agent.role as i64);
        self.leadership_term_id.set(self.agent.leadership_term_id);
    }

    /// How many snapshots this module has taken since it started.
    pub fn snapshot_count(&self) -> i64 {
        self.snapshot_count.get()
    }

    /// Snapshots that failed since the module started.
    pub fn failed_snapshot_count(&self) -> i64 {
        self.failed_snapshot_count
    }

    /// Why the last snapshot failed, if it did.
    pub fn last_snapshot_error(&self) -> Option<&str> {
        self.last_snapshot_error.as_deref()
    }

    /// The module's state now.
    pub fn state(&self) -> ModuleState {
        self.agent.state
    }

    /// Asks for what `sulis cluster-tool` asks through the control toggle
    /// (`toggle::SNAPSHOT`, `SUSPEND`, `RESUME`); false if another request
    /// is still being acted on.
    pub fn request(&self, value: i64) -> bool {
        if self.control_toggle.get() != toggle::NEUTRAL {
            return false;
        }
        self.control_toggle.set(value);
        true
    }

    /// Leader: acts on the control toggle. A snapshot, suspend or resume
    /// goes into the log as a cluster action (every member acts on it at
    /// the same position); a request the state does not allow (a snapshot
    /// while suspended, resume while active) is dropped and the toggle set
    /// back, as Aeron does.
    fn check_control_toggle(&mut self, cluster_time: i64) -> usize {
        let value = self.control_toggle.get();
        if value == toggle::NEUTRAL || value == toggle::INACTIVE || self.agent.role != role::LEADER
        {
            return 0;
        }
        let state = self.agent.state;
        let action = match (value, state) {
            (toggle::SNAPSHOT | toggle::SHUTDOWN, ModuleState::Active) => cluster_action::SNAPSHOT,
            (toggle::SUSPEND, ModuleState::Active) => cluster_action::SUSPEND,
            (toggle::RESUME, ModuleState::Suspended) => cluster_action::RESUME,
            (toggle::PURGE_LOG, ModuleState::Active) => match self.cluster_purge_refusal() {
                None => cluster_action::PURGE_LOG,
                Some(why) => {
                    let why = format!("cluster log purge refused: {why}");
                    eprintln!("sulis cluster: {why}");
                    self.mark.record_error(&why, cluster_time);
                    self.last_purge = Some(Err(why));
                    self.purge_count += 1;
                    self.control_toggle.set(toggle::NEUTRAL);
                    return 1;
                }
            },
            (toggle::ABORT, ModuleState::Active | ModuleState::Suspended) => {
                self.begin_termination();
                return 1;
            }
            // Being acted on.
            (toggle::SNAPSHOT | toggle::SHUTDOWN, ModuleState::Snapshot) => return 0,
            (toggle::SHUTDOWN | toggle::ABORT, ModuleState::Terminating) => return 0,
            _ => {
                self.control_toggle.set(toggle::NEUTRAL);
                return 1;
            }
        };
        let mut request = ClusterActionRequest {
            leadership_term_id: self.term.leadership_term_id,
            log_position: 0,
            timestamp: cluster_time,
            action,
            flags: 0,
        };
        let length = request.encode().len() as i64;
        request.log_position = self.io.log.position() + align32(32 + length);
        let Some(position) = self.io.append_to_log(&request.encode()) else {
            return 0; // back-pressured: the toggle stays, tried again next cycle
        };
        self.agent.cluster_time = cluster_time;
        match action {
            cluster_action::SNAPSHOT => {
                let term = self.term.leadership_term_id;
                self.begin_snapshot(position, term, cluster_time, value == toggle::SHUTDOWN);
            }
            cluster_action::SUSPEND => {
                self.agent.state = ModuleState::Suspended;
                self.control_toggle.set(toggle::NEUTRAL);
            }
            cluster_action::PURGE_LOG => {
                self.purge_own_log();
                self.control_toggle.set(toggle::NEUTRAL);
            }
            _ => self.activate(),
        }
        self.publish_state();
        1
    }

    /// Why the leader may not have every member purge its log, if it may
    /// not: it has no snapshot, or a member has not reported a log past the
    /// leader's latest snapshot within the heartbeat timeout (a member
    /// behind, down or cut off would need the log before it to catch up).
    fn cluster_purge_refusal(&self) -> Option<String> {
        let Some(snapshot) = self
            .recording_log
            .latest_snapshot(self.ctx.service_count as i32)
            .map(|set| set[0].log_position)
        else {
            return Some("the leader has no snapshot".into());
        };
        let now_ns = self.now_ns();
        let timeout_ns = self.ctx.leader_heartbeat_timeout.as_nanos() as i64;
        self.members
            .iter()
            .filter(|m| m.id != self.ctx.member_id)
            .find(|m| {
                m.log_position < snapshot
                    || now_ns - m.time_of_last_append_position_ns > timeout_ns
            })
            .map(|m| {
                format!(
                    "member {} has not reported a log past the leader's snapshot at {snapshot} within the heartbeat timeout (it reported {} {} ms ago): it could need the log before the snapshot to catch up",
                    m.id,
                    m.log_position,
                    (now_ns - m.time_of_last_append_position_ns) / 1_000_000
                )
            })
    }

    /// Deletes this member's log segments wholly before its own latest
    /// snapshot (a PURGE_LOG action, appended as leader or applied as
    /// follower); a failure is recorded, never fatal.
    fn purge_own_log(&mut self) {
        let outcome = purge_log(
            &mut self.archive,
            &self.recording_log,
            self.ctx.service_count as i32,
        );
        if let Err(why) = &outcome {
            let why = format!(
                "cluster log purge failed on member {}: {why}",
                self.ctx.member_id
            );
            eprintln!("sulis cluster: {why}");
            self.mark.record_error(&why, Self::cluster_time());
        }
        self.last_purge = Some(outcome);
        self.purge_count += 1;
    }

    /// Purges acted on since the module started (done, refused or failed).
    pub fn purge_count(&self) -> i64 {
        self.purge_count
    }

    /// The last purge's outcome on this member, if any.
    pub fn last_purge(&self) -> Option<&Result<LogPurge, String>> {
        self.last_purge.as_ref()
    }

    /// Leader: the snapshot policy. Once `snapshot_log_len` bytes of log
    /// were appended since the latest snapshot, or `snapshot_interval`
    /// passed since it with log appended since, it asks for a snapshot as an
    /// operator would (the control toggle: a SNAPSHOT action in the log, so
    /// every member snapshots at one position), so a restarted member
    /// replays a bounded log whatever the cluster's age. A snapshot it asked
    /// for that fails is asked again after 1 minute, then 2, 4... up to an
    /// hour (each failure is said, as any snapshot's).
    fn check_auto_snapshot(&mut self, now_ns: i64, cluster_time: i64) -> usize {
        let (len, interval) = (self.ctx.snapshot_log_len, self.ctx.snapshot_interval);
        let auto = &mut self.auto_snapshot;
        if now_ns < auto.next_check_ns || (len == 0 && interval.is_zero()) {
            return 0;
        }
        auto.next_check_ns = now_ns + AUTO_SNAPSHOT_CHECK_NS;
        if auto.asked && self.snapshot.is_none() && self.agent.state != ModuleState::Snapshot {
            // The snapshot it asked for is over (or was dropped): how it went.
            if self.control_toggle.get() == toggle::SNAPSHOT {
                return 0; // not acted on yet
            }
            auto.asked = false;
            if self.failed_snapshot_count > auto.failed_seen {
                let wait = AUTO_SNAPSHOT_RETRY_NS
                    .saturating_mul(1i64 << auto.failures.min(10))
                    .min(AUTO_SNAPSHOT_RETRY_MAX_NS);
                auto.failures += 1;
                auto.retry_at_ns = now_ns + wait;
            } else {
                auto.failures = 0;
            }
        }
        if self.agent.role != role::LEADER
            || self.agent.state != ModuleState::Active
            || self.snapshot.is_some()
            || self.control_toggle.get() != toggle::NEUTRAL
            || now_ns < auto.retry_at_ns
        {
            if self.agent.role != role::LEADER {
                auto.since_ms = None;
            }
            return 0;
        }
        let latest = self
            .recording_log
            .latest_snapshot(self.ctx.service_count as i32)
            .map(|set| (set[0].log_position, set[0].timestamp));
        let position = self.io.log.position();
        let (last_position, last_ms) = match latest {
            Some(at) => at,
            None => (0, *auto.since_ms.get_or_insert(cluster_time)),
        };
        let by_len = len > 0 && position.saturating_sub(last_position) >= len as i64;
        let by_time = !interval.is_zero()
            && position > last_position
            && cluster_time.saturating_sub(last_ms) >= interval.as_millis() as i64;
        if !(by_len || by_time) || !self.request(toggle::SNAPSHOT) {
            return 0;
        }
        let auto = &mut self.auto_snapshot;
        auto.asked = true;
        auto.failed_seen = self.failed_snapshot_count;
        eprintln!(
            "sulis cluster: member {} takes a snapshot: {} bytes of log since the latest{}",
            self.ctx.member_id,
            position - last_position,
            if by_len {
                format!(" (snapshot_log_len {len})")
            } else {
                format!(" and {} ms (snapshot_interval)", cluster_time - last_ms)
            }
        );
        1
    }

    /// Every service writes its state at `log_position` (the SNAPSHOT
    /// action's), then this module writes its own (`check_snapshot`): the
    /// leader when it appends the action, a follower when it applies it.
    fn begin_snapshot(
        &mut self,
        log_position: i64,
        leadership_term_id: i64,
        timestamp: i64,
        then_terminate: bool,
    ) {
        self.agent.state = ModuleState::Snapshot;
        self.snapshot = Some(PendingSnapshot {
            mark: SnapshotMark {
                log_position,
                leadership_term_id,
                time_unit: time_unit::MILLIS,
                app_version: self.ctx.app_version,
            },
            timestamp,
            acks: vec![None; self.ctx.service_count],
            deadline: Instant::now() + self.ctx.message_timeout * 6,
            then_terminate,
        });
    }

    /// Back to ACTIVE after a snapshot or a suspension: the toggle's request
    /// is done, and no session has timed out meanwhile (none could talk).
    fn activate(&mut self) {
        self.agent.state = ModuleState::Active;
        self.agent
            .sessions
            .update_time_of_last_activity(self.now_ns());
        self.control_toggle.set(toggle::NEUTRAL);
    }

    /// Once every service acknowledged the snapshot (each wrote its own at
    /// the action's position), writes the module's, then records the set in
    /// the recording log — services first, the module's last, so a crash
    /// part way leaves an incomplete set that recovery passes over — and
    /// goes back to ACTIVE. A service that could not write its snapshot
    /// fails the whole set: nothing is recorded, the previous set stays the
    /// one to recover from.
    fn check_snapshot(&mut self) -> Result<usize, String> {
        let Some(pending) = &self.snapshot else {
            return Ok(0);
        };
        let missing: Vec<usize> = (0..pending.acks.len())
            .filter(|&i| pending.acks[i].is_none())
            .collect();
        let timed_out = Instant::now() > pending.deadline;
        if !missing.is_empty() && !timed_out {
            return Ok(0);
        }
        let pending = self.snapshot.take().expect("checked above");
        let result = if missing.is_empty() {
            self.record_snapshot_set(&pending)
        } else {
            Err(format!(
                "service(s) {missing:?} did not acknowledge the snapshot at {} within {:?}",
                pending.mark.log_position,
                self.ctx.message_timeout * 6
            ))
        };
        match result {
            Ok(()) => {
                self.snapshot_count.set(self.snapshot_count.get() + 1);
                self.last_snapshot_error = None;
            }
            Err(why) => {
                eprintln!("sulis cluster: failed to take snapshot: {why}");
                self.mark.record_error(
                    &format!("failed to take snapshot: {why}"),
                    Self::cluster_time(),
                );
                self.last_snapshot_error = Some(why);
                self.failed_snapshot_count += 1;
            }
        }
        if pending.then_terminate && self.last_snapshot_error.is_none() {
            self.begin_termination();
        } else {
            self.activate();
        }
        self.publish_state();
        Ok(1)
    }

    /// Stops the member (a shutdown after its snapshot, or an abort): the
    /// log takes nothing more; the services are told to stop once they have
    /// applied it to its end (ServiceTerminationPosition), and the module
    /// is CLOSED when each acknowledged, or after a message timeout.
    fn begin_termination(&mut self) {
        let log_position = self.io.log.position();
        self.agent.state = ModuleState::Terminating;
        let message = ServiceTerminationPosition { log_position }.encode();
        let deadline = Instant::now() + self.ctx.message_timeout;
        while self.to_services.offer(&message).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.termination = Some(Termination {
            log_position,
            deadline,
            acked: vec![false; self.ctx.service_count],
        });
        self.publish_state();
    }

    fn check_termination(&mut self) -> usize {
        let Some(t) = &self.termination else {
            return 0;
        };
        if t.acked.iter().all(|a| *a) || Instant::now() > t.deadline {
            self.termination = None;
            self.agent.state = ModuleState::Closed;
            self.control_toggle.set(toggle::NEUTRAL);
            self.publish_state();
            return 1;
        }
        0
    }

    /// True once the member stopped (a shutdown or an abort): close it.
    pub fn is_closed(&self) -> bool {
        self.agent.state == ModuleState::Closed
    }

    fn record_snapshot_set(&mut self, pending: &PendingSnapshot) -> Result<(), String> {
        let at = pending.mark.log_position;
        for (service, ack) in pending.acks.iter().enumerate() {
            if *ack == Some(NULL_POSITION) {
                return Err(format!(
                    "service {service} could not write its snapshot at {at}"
                ));
            }
        }
        let what = format!("the consensus module's snapshot at log position {at}");
        let mut taker = SnapshotTaker::start(
            &self.io.client,
            &mut self.archive,
            CONSENSUS_MODULE_SNAPSHOT_STREAM_ID,
            self.ctx.message_timeout,
            &what,
        )?;
        for m in cm_snapshot::take(&self.agent, &pending.mark) {
            if let Err(e) = taker.offer(&m) {
                taker.abort(&mut self.archive);
                return Err(e);
            }
        }
        let cm_recording = taker.finish(&self.io.client, &mut self.archive)?;
        let (term, base) = (pending.mark.leadership_term_id, self.term_base_log_position);
        for service in (0..pending.acks.len()).rev() {
            let recording = pending.acks[service].expect("every service acked");
            self.recording_log.append_snapshot(
                recording,
                term,
                base,
                at,
                pending.timestamp,
                service as i32,
            )?;
        }
        self.recording_log
            .append_snapshot(cm_recording, term, base, at, pending.timestamp, -1)
    }

    fn poll_ingress(&mut self, now_ns: i64, cluster_time: i64) -> usize {
        let mut work = 0;
        // What the log could not take before goes first, in order; nothing
        // new is read until it is in.
        while let Some((message, image)) = self.pending_ingress.pop_front() {
            if !self.on_ingress(&message, image, now_ns, cluster_time) {
                self.pending_ingress.push_front((message, image));
                return work;
            }
            work += 1;
        }
        // The poll's messages in one buffer kept from poll to poll: no allocation per message.
        let mut messages = std::mem::take(&mut self.ingress_messages);
        messages.clear();
        let assembler = &mut self.ingress_assembler;
        work += self
            .ingress
            .poll(
                |payload, header| -> Result<(), ()> {
                    assembler.on_fragment_into(payload, header, &mut messages);
                    Ok(())
                },
                50,
            )
            .unwrap_or(0);
        if messages.is_empty() {
            self.ingress_messages = messages;
            return work;
        }
        for (message, _, session) in messages.iter() {
            // Looked up per message, not a map of every image per poll: with
            // a thousand sessions that map was rebuilt a thousand times a
            // second.
            let image = self
                .ingress
                .image_by_session_id(session)
                .map_or(-1, |i| i.correlation_id());
            if !self.pending_ingress.is_empty()
                || !self.on_ingress(message, image, now_ns, cluster_time)
            {
                self.pending_ingress.push_back((message.to_vec(), image));
            }
        }
        self.ingress_messages = messages;
        work
    }

    /// Handles one ingress message; false if the log back-pressured.
    fn on_ingress(&mut self, message: &[u8], image: i64, now_ns: i64, cluster_time: i64) -> bool {
        let Ok(h) = SbeHeader::decode(message) else {
            return true;
        };
        if h.schema_id != SCHEMA_ID {
            return true;
        }
        let term = self.term.clone();
        match h.template_id {
            SessionMessageHeader::TEMPLATE_ID if message.len() >= SESSION_HEADER_LENGTH => {
                let Ok(header) = SessionMessageHeader::decode(message) else {
                    return true;
                };
                let r = self.agent.on_ingress_message(
                    &mut self.io,
                    &term,
                    &header,
                    &message[SESSION_HEADER_LENGTH..],
                    now_ns,
                    cluster_time,
                );
                r != crate::module::consensus_module_agent::IngressResult::BackPressured
            }
            SessionConnectRequest::TEMPLATE_ID => {
                if let Ok(r) = SessionConnectRequest::decode(message) {
                    let req = ConnectRequest {
                        correlation_id: r.correlation_id,
                        response_stream_id: r.response_stream_id,
                        version: r.version,
                        response_channel: r.response_channel,
                        encoded_credentials: r.encoded_credentials,
                        ingress_image_correlation_id: image,
                    };
                    let is_leader = self.agent.role == role::LEADER;
                    self.agent.sessions.on_session_connect(
                        &mut self.io,
                        self.auth.as_mut(),
                        &req,
                        is_leader,
                        &term,
                        now_ns,
                    );
                }
                true
            }
            SessionKeepAlive::TEMPLATE_ID => {
                if let Ok(k) = SessionKeepAlive::decode(message) {
                    self.agent.sessions.on_keep_alive(
                        k.cluster_session_id,
                        k.leadership_term_id,
                        &term,
                        now_ns,
                    );
                }
                true
            }
            SessionCloseRequest::TEMPLATE_ID => {
                if let Ok(c) = SessionCloseRequest::decode(message) {
                    if c.leadership_term_id == term.leadership_term_id {
                        self.agent.sessions.on_session_close_request(
                            &mut self.io,
                            c.cluster_session_id,
                            &term,
                            now_ns,
                            cluster_time,
                        );
                    }
                }
                true
            }
            ChallengeResponse::TEMPLATE_ID => {
                if let Ok(c) = ChallengeResponse::decode(message) {
                    self.agent.sessions.on_challenge_response(
                        self.auth.as_mut(),
                        c.correlation_id,
                        c.cluster_session_id,
                        &c.encoded_credentials,
                        image,
                        now_ns,
                    );
                }
                true
            }
            _ => true,
        }
    }

    /// Up to `limit` fragments from the services' control stream, appended
    /// to `messages` as whole messages.
    fn read_control(&mut self, messages: &mut Vec<Vec<u8>>, limit: usize) {
        let assembler = &mut self.control_assembler;
        self.from_services
            .poll(
                |payload, header| -> Result<(), ()> {
                    if let Some(m) = assembler.on_fragment(payload, header) {
                        messages.push(m.payload);
                    }
                    Ok(())
                },
                limit,
            )
            .unwrap_or(0);
    }

    /// During an election the services' messages wait, but a tool's
    /// members query is answered (the leader reads −1): `list-members`
    /// shows an election that does not end, when it matters most.
    fn answer_queries_in_election(&mut self) -> usize {
        let mut messages = Vec::new();
        self.read_control(&mut messages, 10);
        let work = messages.len();
        for m in messages {
            match ClusterMembersQuery::decode(&m) {
                Ok(q) => self.answer_members_query(&q),
                Err(_) => self.deferred_control.push(m),
            }
        }
        work
    }

    /// Answers a tool's members query on the services' stream, where the
    /// tool listens (a lost answer is the tool's timeout).
    fn answer_members_query(&mut self, q: &ClusterMembersQuery) {
        let answer = self.members_answer(q.correlation_id, q.extended == 1);
        let _ = self.to_services.offer(&answer);
    }

    /// The services' requests: timers, session closes, messages to the cluster, acks.
    fn poll_services(&mut self, now_ns: i64, cluster_time: i64) -> Result<usize, String> {
        let mut messages = std::mem::take(&mut self.deferred_control);
        self.read_control(&mut messages, 50);
        let work = messages.len();
        let term = self.term.clone();
        let mut messages = messages.into_iter();
        while let Some(m) = messages.next() {
            if self
                .snapshot
                .as_ref()
                .is_some_and(|p| p.acks.iter().all(Option::is_some))
            {
                // The set is complete: what the services sent after their
                // acks waits until the module's snapshot is written, so that
                // it is of the module's state at the action's position.
                self.deferred_control.push(m);
                self.deferred_control.extend(messages);
                break;
            }
            let Ok(h) = SbeHeader::decode(&m) else {
                continue;
            };
            match h.template_id {
                ScheduleTimer::TEMPLATE_ID => {
                    if let Ok(t) = ScheduleTimer::decode(&m) {
                        self.agent
                            .timers
                            .schedule_from_service(t.correlation_id, t.deadline);
                    }
                }
                CancelTimer::TEMPLATE_ID => {
                    if let Ok(t) = CancelTimer::decode(&m) {
                        self.agent.timers.cancel(t.correlation_id);
                    }
                }
                ClusterMembersQuery::TEMPLATE_ID => {
                    // A tool's `list-members`.
                    if let Ok(q) = ClusterMembersQuery::decode(&m) {
                        self.answer_members_query(&q);
                    }
                }
                CloseSession::TEMPLATE_ID => {
                    if let Ok(c) = CloseSession::decode(&m) {
                        // Suspended or snapshotting, nothing goes into the log:
                        // the session is marked closing and its close is
                        // logged once the module is active again.
                        let active = self.agent.state == ModuleState::Active;
                        // The container closing a session its egress could
                        // not serve says why; its client is told so.
                        if let Some(detail) = close_session_detail(&m) {
                            self.agent
                                .sessions
                                .set_close_detail(c.cluster_session_id, detail);
                        }
                        self.agent.sessions.on_service_close_session(
                            &mut self.io,
                            c.cluster_session_id,
                            active,
                            &term,
                            now_ns,
                            cluster_time,
                        );
                    }
                }
                SessionMessageHeader::TEMPLATE_ID if m.len() >= SESSION_HEADER_LENGTH => {
                    if let Ok(header) = SessionMessageHeader::decode(&m) {
                        // A service's message: its id in cluster_session_id.
                        let service = header.cluster_session_id as usize;
                        let Some(tracker) = self.agent.trackers.get_mut(service) else {
                            return Err(format!(
                                "a message to the cluster from service {service}; this member runs {}",
                                self.ctx.service_count
                            ));
                        };
                        tracker.enqueue(m[SESSION_HEADER_LENGTH..].to_vec());
                    }
                }
                ServiceAck::TEMPLATE_ID if self.termination.is_some() => {
                    let t = self.termination.as_mut().expect("matched");
                    if let Ok(a) = ServiceAck::decode(&m) {
                        if a.log_position == t.log_position {
                            if let Some(slot) = t.acked.get_mut(a.service_id as usize) {
                                *slot = true;
                            }
                        }
                    }
                }
                ServiceAck::TEMPLATE_ID => {
                    if let (Ok(a), Some(pending)) = (ServiceAck::decode(&m), &mut self.snapshot) {
                        if a.log_position == pending.mark.log_position {
                            if let Some(slot) = pending.acks.get_mut(a.service_id as usize) {
                                *slot = Some(a.relevant_id);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(work)
    }

    /// Stops recording the log and closes everything.
    pub fn close(mut self) {
        let ids: Vec<u64> = self.io.egress.keys().copied().collect();
        for key in ids {
            self.io.close_egress(key);
        }
        let _ = self.archive.stop_recording_by_identity(self.recording_id);
        self.archive.close();
        self.io.log.close_without_waiting();
        self.commit.close();
        self.io.client.close();
    }
}

/// The lock file in a cluster directory.
pub const LOCK_FILE: &str = "consensus-module.lck";

/// Opens `dir`'s lock file and takes its lock (`flock`, exclusive, not
/// waiting); `Err(Ok(pid text))` when another process holds it.
fn lock_dir(dir: &std::path::Path) -> Result<std::fs::File, Result<String, String>> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Err(err(&path.display().to_string(), e)))?;
    // SAFETY: flock on a descriptor this function owns (released when it is dropped).
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        return Err(Ok(holder.trim().to_string()));
    }
    Ok(file)
}

/// Takes the directory's lock and writes this process's id in it; a lock
/// held elsewhere is an error naming the process that holds it and the file.
fn claim_dir(dir: &std::path::Path) -> Result<std::fs::File, String> {
    use std::io::{Seek, Write};
    let mut file = lock_dir(dir).map_err(|held| match held {
        Ok(pid) => format!(
            "a consensus module (pid {pid}) is running on {}: it holds {}",
            dir.display(),
            dir.join(LOCK_FILE).display()
        ),
        Err(e) => e,
    })?;
    let _ = file.set_len(0);
    let _ = file.seek(std::io::SeekFrom::Start(0));
    let _ = writeln!(file, "{}", std::process::id());
    Ok(file)
}

/// What a log purge did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPurge {
    /// The latest snapshot's log position: a restart replays from there.
    pub snapshot_position: i64,
    /// Where the log's recording starts now.
    pub start_position: i64,
    /// Segment files deleted.
    pub segments_deleted: i64,
}

/// Deletes the segment files of the member's log recording that lie wholly
/// before its latest snapshot (the archive's purge-segments): a restart
/// loads that snapshot and replays the log only from its position, so the
/// log before it is not needed on this member. Refused without a snapshot.
/// Nothing is deleted when no whole segment lies before the snapshot.
pub fn purge_log(
    archive: &mut ArchiveClient,
    log: &RecordingLog,
    service_count: i32,
) -> Result<LogPurge, String> {
    let snapshot_position = log
        .latest_snapshot(service_count)
        .map(|set| set[0].log_position)
        .ok_or_else(|| {
            format!(
                "{}: no snapshot, so a restart needs the whole log: nothing purged",
                log.path().display()
            )
        })?;
    let recording_id = log
        .last_term()
        .map(|t| t.recording_id)
        .ok_or_else(|| format!("{}: no log", log.path().display()))?;
    let what = |e: sulis_archive::client::ArchiveError| {
        format!("purging the log's recording {recording_id}: {e}")
    };
    let d = archive
        .list_recording(recording_id)
        .map_err(what)?
        .ok_or_else(|| format!("the log's recording {recording_id} is not in the archive"))?;
    let g = sulis_archive::segment::Geometry::of(&d);
    let new_start = g.base_of(snapshot_position);
    if new_start <= g.base_of(d.start_position) {
        return Ok(LogPurge {
            snapshot_position,
            start_position: d.start_position,
            segments_deleted: 0,
        });
    }
    let segments_deleted = archive
        .purge_segments(recording_id, new_start)
        .map_err(what)?;
    Ok(LogPurge {
        snapshot_position,
        start_position: new_start,
        segments_deleted,
    })
}

/// Marks the latest whole snapshot set of the member on `dir` invalid
/// (Aeron's `ClusterTool invalidate-latest-snapshot`), so that it next
/// starts from the set before it, or from the log's beginning, and replays
/// the log from there: for a snapshot that cannot be loaded. Refused while
/// a consensus module runs there (the directory's lock is held, and taken
/// here meanwhile, its pid left as it was). Returns the entries invalidated.
pub fn invalidate_latest_snapshot(
    dir: &std::path::Path,
    service_count: i32,
) -> Result<Vec<sulis_protocol::cluster::recording_log::Entry>, String> {
    // Held while the log changes, its pid left as it was (`sulis cluster-node`
    // reads it to reclaim its dead node's driver).
    let _lock = lock_dir(dir).map_err(|held| match held {
        Ok(pid) => format!(
            "a consensus module (pid {pid}) is running on {}: stop it first",
            dir.display()
        ),
        Err(e) => e,
    })?;
    let mut log = RecordingLog::open(dir)?;
    let Some(set) = log.latest_snapshot(service_count) else {
        return Err(format!(
            "{}: no snapshot to invalidate",
            log.path().display()
        ));
    };
    let set: Vec<_> = set.into_iter().cloned().collect();
    let all: Vec<_> = log.entries().cloned().collect();
    for e in &set {
        let index = all
            .iter()
            .position(|x| x == e)
            .expect("an entry of the log");
        log.invalidate(index)?;
    }
    Ok(set)
}

fn align32(n: i64) -> i64 {
    (n + 31) & !31
}

fn with_param(channel: &str, param: &str) -> String {
    format!(
        "{channel}{}{param}",
        if channel.contains('?') { "|" } else { "?" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sulis_protocol::options::Source;

    #[test]
    fn the_options_table_sets_and_shows_every_option_and_conclude_names_what_is_wrong() {
        let mut ctx = ConsensusModuleContext::default();
        for (name, value) in [
            ("cluster_members", "0,h:1,h:2,h:3,h:0,h:4"),
            ("log_term_length", "1m"),
            ("session_timeout", "5s"),
            ("app_version", "2.1.0"),
        ] {
            ctx.set_option(name, value).unwrap();
        }
        assert_eq!(ctx.members, "0,h:1,h:2,h:3,h:0,h:4");
        assert_eq!(ctx.log_term_length, 1024 * 1024);
        assert_eq!(ctx.session_timeout, Duration::from_secs(5));
        assert_eq!(
            ctx.app_version,
            sulis_protocol::sbe::semantic_version(2, 1, 0)
        );
        let described = ctx.describe_options();
        let row = |n: &str| {
            described
                .iter()
                .find(|(o, _, _)| o.name == n)
                .cloned()
                .unwrap()
        };
        assert_eq!(
            (row("app_version").1, row("app_version").2),
            ("2.1.0".to_string(), Source::Explicit)
        );
        assert_eq!(row("ingress_stream_id").2, Source::Default);
        assert!(ctx
            .set_option("app_version", "2.1")
            .unwrap_err()
            .contains("major.minor.patch"));
        assert!(ctx.set_option("log_term_length", "2g").is_err());
        ctx.conclude().unwrap();
        ctx.log_term_length = 100_000;
        assert!(ctx
            .conclude()
            .unwrap_err()
            .starts_with("log_term_length 100000"));
        ctx.log_term_length = 64 * 1024;
        ctx.leader_heartbeat_interval = Duration::from_secs(20);
        assert!(ctx
            .conclude()
            .unwrap_err()
            .contains("is not below leader_heartbeat_timeout"));
    }
}
