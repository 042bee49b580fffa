//! The service container (Aeron's `ClusteredServiceAgent`): it follows the
//! log its consensus module tells it to join (JoinLog on the control
//! stream), never past the commit-position counter, and hands each entry
//! to the user's [`ClusteredService`]: sessions opened and closed, client
//! and service messages, timers. What the service asks of the cluster —
//! timers, closing a session, a message into the log — goes to the module
//! on the control stream; what it sends a client goes out on the session's
//! egress, from the leader only (a follower's offers are accepted and
//! dropped, as Aeron's are, so every member's service runs alike).
//!
//! An answer the egress cannot take now (back pressure, a client not
//! connected) waits in the session's [`EgressQueue`] and the offer returns
//! at once: one slow or vanished client never holds the log for the
//! others (Aeron's service spins on it). The container sends what waits as
//! the egress takes it, and closes a session whose queue outgrows
//! [`ServiceContext::egress_queue_len`] or that took nothing for
//! [`ServiceContext::egress_stall_timeout`], telling the client why; the
//! close goes through the log, so every member's service sees it alike.

use crate::client::session_messages::SessionMessages;
use crate::service::cluster_mark_file::{ClusterMarkFile, MarkFields};
use crate::service::egress_queue::EgressQueue;
use crate::service::log_adapter::{self, LogEntry};
use crate::service::recovery_state::RecoveryState;
use crate::service::snapshot_taker::{load_snapshot, SnapshotTaker};
use crate::service::snapshot_taker::{marker, SnapshotMark, SERVICE_SNAPSHOT_TYPE_ID};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use sulis_archive::client::{ArchiveClient, ArchiveClientContext};
use sulis_client::{
    AssembledMessages, Client, ClientContext, ExclusivePublication, FragmentAssembler, OfferError,
    Publication, Subscription,
};
use sulis_concurrent::cnc::epoch_ms;
use sulis_protocol::cluster::mark_file::{component_type, service_file_name};
use sulis_protocol::cluster::messages::{
    close_session_with_detail, cluster_action, role, snapshot_mark, time_unit, CancelTimer,
    ClientSession, CloseSession, JoinLog, ScheduleTimer, ServiceAck, ServiceTerminationPosition,
    SessionMessageHeader, SnapshotMarker, NULL_VALUE,
};
use sulis_protocol::sbe::Header as SbeHeader;

/// The user's replicated state machine. Every member's service sees the
/// same calls in the same order with the same arguments; it must do the
/// same with them (no wall clock, no randomness, no I/O of its own).
pub trait ClusteredService {
    /// The service joined the log (before any entry). `snapshot` holds the
    /// messages the service wrote in [`ClusteredService::on_take_snapshot`]
    /// when the member recovers from a snapshot (the log after it follows),
    /// `None` when it starts from the log's beginning.
    fn on_start(&mut self, _cluster: &mut Cluster<'_>, _snapshot: Option<&[Vec<u8>]>) {}
    /// Every member's service writes its state at this log position: the
    /// messages written go, in order, to `on_start` of a service that
    /// recovers from this snapshot. An error (or `false` from `write`)
    /// fails this snapshot; the member goes on and keeps the previous one.
    /// A service that does not implement it cannot be snapshotted (its state
    /// would not survive a restart from the snapshot): the snapshot fails.
    fn on_take_snapshot(
        &mut self,
        _cluster: &mut Cluster<'_>,
        _snapshot: &mut SnapshotWriter<'_>,
    ) -> Result<(), String> {
        Err("the service does not implement on_take_snapshot: its state could not be restored from a snapshot".into())
    }
    /// Session `session_id` opened.
    fn on_session_open(&mut self, _cluster: &mut Cluster<'_>, _session_id: i64, _timestamp: i64) {}
    /// Session `session_id` closed (`close_reason::*`).
    fn on_session_close(
        &mut self,
        _cluster: &mut Cluster<'_>,
        _session_id: i64,
        _timestamp: i64,
        _close_reason: i32,
    ) {
    }
    /// A client's message (`session_id` is `Some`) or a service's (`None`).
    fn on_session_message(
        &mut self,
        _cluster: &mut Cluster<'_>,
        _session_id: Option<i64>,
        _timestamp: i64,
        _payload: &[u8],
    ) {
    }
    /// Session messages the log held back to back (no other entry between
    /// them), in log order, at most a poll's worth
    /// ([`ServiceContext::log_fragment_limit`]): a batched service takes
    /// them in one call. During it [`Cluster::time`] and
    /// [`Cluster::log_position`] are the last message's; each message's own
    /// are in `messages`. Timers, session events and snapshots come between
    /// batches exactly where the log has them. By default each message goes
    /// to [`ClusteredService::on_session_message`] with its own time and
    /// position, as without batches.
    fn on_session_messages(&mut self, cluster: &mut Cluster<'_>, messages: SessionMessages) {
        each_session_message(self, cluster, &messages);
    }
    /// Timer `correlation_id` fired.
    fn on_timer_event(
        &mut self,
        _cluster: &mut Cluster<'_>,
        _correlation_id: i64,
        _timestamp: i64,
    ) {
    }
    /// This member's role changed (`role::*`).
    fn on_role_change(&mut self, _cluster: &mut Cluster<'_>, _role: i32) {}
}

/// Hands each of `messages` to `service.on_session_message`, the cluster's
/// time and log position its own: what a service that does not take
/// batches gets.
pub fn each_session_message<S: ClusteredService + ?Sized>(
    service: &mut S,
    cluster: &mut Cluster<'_>,
    messages: &SessionMessages,
) {
    for i in 0..messages.len() {
        cluster.state.log_position = messages.positions[i];
        cluster.state.time = messages.timestamps[i];
        service.on_session_message(
            cluster,
            messages.session(i),
            messages.timestamps[i],
            messages.payload(i),
        );
    }
}

/// Where a service writes its snapshot (valid during
/// [`ClusteredService::on_take_snapshot`]).
pub struct SnapshotWriter<'a> {
    taker: &'a mut SnapshotTaker,
    written: usize,
    /// The first write that failed: the snapshot fails with it, whatever
    /// the service does with the error.
    failed: Option<String>,
}

/// A service's snapshot message is framed so that any length goes: one
/// byte, then up to [`SNAPSHOT_CHUNK`] bytes of it; `WHOLE` for a message
/// in one piece, else `PART`s and a `LAST`.
const WHOLE: u8 = b'W';
const PART: u8 = b'P';
const LAST: u8 = b'L';
/// The most of a service's message one snapshot message carries.
pub const SNAPSHOT_CHUNK: usize = 1024 * 1024;

impl SnapshotWriter<'_> {
    /// Appends one message of the service's state, of any length (it comes
    /// back whole, in order, to `on_start`).
    pub fn write(&mut self, message: &[u8]) -> Result<(), String> {
        if let Some(e) = &self.failed {
            return Err(format!("an earlier write failed: {e}"));
        }
        let written = self.write_framed(message);
        if let Err(e) = &written {
            self.failed = Some(e.clone());
        }
        written
    }

    fn write_framed(&mut self, message: &[u8]) -> Result<(), String> {
        if message.len() <= SNAPSHOT_CHUNK {
            let mut m = Vec::with_capacity(message.len() + 1);
            m.push(WHOLE);
            m.extend_from_slice(message);
            self.taker.offer(&m)?;
        } else {
            let chunks = message.chunks(SNAPSHOT_CHUNK);
            let n = chunks.len();
            let mut m = Vec::with_capacity(SNAPSHOT_CHUNK + 1);
            for (i, chunk) in chunks.enumerate() {
                m.clear();
                m.push(if i + 1 == n { LAST } else { PART });
                m.extend_from_slice(chunk);
                self.taker.offer(&m)?;
            }
        }
        self.written += 1;
        Ok(())
    }

    /// Messages written so far.
    pub fn written(&self) -> usize {
        self.written
    }
}

/// The service's messages of a snapshot, from the framed ones after its END
/// marker; an error if one is cut short or framed otherwise.
fn unframe(framed: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut partial: Option<Vec<u8>> = None;
    for (i, m) in framed.iter().enumerate() {
        match (m.first().copied(), &mut partial) {
            (Some(WHOLE), None) => out.push(m[1..].to_vec()),
            (Some(PART), Some(p)) => p.extend_from_slice(&m[1..]),
            (Some(PART), None) => partial = Some(m[1..].to_vec()),
            (Some(LAST), Some(p)) => {
                p.extend_from_slice(&m[1..]);
                out.push(partial.take().expect("matched Some"));
            }
            (first, _) => {
                return Err(format!(
                    "the service's message {i} after the END marker is framed {first:?} where {} was expected",
                    if partial.is_some() { "a part" } else { "a whole message or a first part" }
                ))
            }
        }
    }
    if partial.is_some() {
        return Err("the service's last message is cut short".into());
    }
    Ok(out)
}

/// What the service container runs with.
#[derive(Clone, Debug)]
pub struct ServiceContext {
    /// The media driver's directory.
    pub driver_dir: PathBuf,
    /// This service's id (0 to 9).
    pub service_id: i32,
    /// The control channel to its consensus module.
    pub control_channel: String,
    /// Service → module (105).
    pub consensus_module_stream_id: i32,
    /// Module → service (104).
    pub service_stream_id: i32,
    /// How long to wait for the driver and for the log's image.
    pub message_timeout: Duration,
    /// The stream a snapshot is written on (106).
    pub snapshot_stream_id: i32,
    /// The stream a snapshot is read back on (103).
    pub replay_stream_id: i32,
    /// The member's cluster directory, where the service's mark file
    /// (`cluster-mark-service-<id>.dat`, its error log) is written; none
    /// without one.
    pub cluster_dir: Option<PathBuf>,
    /// Log fragments taken per duty cycle (Aeron's `logFragmentLimit`): the
    /// most session messages one `on_session_messages` call gets.
    pub log_fragment_limit: usize,
    /// The most bytes of answers a session's queue holds while its egress
    /// cannot take them; past it the session is closed.
    pub egress_queue_len: usize,
    /// A session whose egress took none of its queued answers for this long
    /// (back-pressured: a client that does not read; not connected: a client
    /// gone) is closed.
    pub egress_stall_timeout: Duration,
}

/// [`ServiceContext::egress_queue_len`]'s default.
pub const EGRESS_QUEUE_LEN_DEFAULT: usize = 8 << 20;
/// [`ServiceContext::egress_stall_timeout`]'s default: Aeron's publication
/// connection timeout.
pub const EGRESS_STALL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

impl Default for ServiceContext {
    fn default() -> Self {
        ServiceContext {
            driver_dir: sulis_client::conductor::sulis_default_dir(),
            service_id: 0,
            control_channel: "aeron:ipc?term-length=128k".into(),
            consensus_module_stream_id: 105,
            service_stream_id: 104,
            message_timeout: Duration::from_secs(10),
            snapshot_stream_id: 106,
            replay_stream_id: 103,
            cluster_dir: None,
            log_fragment_limit: 50,
            egress_queue_len: EGRESS_QUEUE_LEN_DEFAULT,
            egress_stall_timeout: EGRESS_STALL_TIMEOUT_DEFAULT,
        }
    }
}

struct ServiceSession {
    response_channel: String,
    response_stream_id: i32,
    egress: Option<Publication>,
    /// Answers the egress has not taken yet (the leader's only).
    queue: EgressQueue,
    /// Since when the queue has waited with nothing taken (None while empty).
    stalled_since: Option<Instant>,
    /// Its close was asked for (its queue overflowed or stalled, or its
    /// egress failed): what the service offers it now is dropped.
    closing: bool,
    /// The close still to be asked of the module, and why (the control
    /// stream took nothing when it was first asked).
    close_pending: Option<String>,
}

/// What a drain of a session's queue came to.
enum Drained {
    /// Something went.
    Went,
    /// Nothing went; the egress may take it later.
    Nothing,
    /// The egress failed for good (closed, at its end): the session cannot be served.
    Failed(OfferError),
}

impl ServiceSession {
    fn new(response_channel: String, response_stream_id: i32, egress: Option<Publication>) -> Self {
        ServiceSession {
            response_channel,
            response_stream_id,
            egress,
            queue: EgressQueue::default(),
            stalled_since: None,
            closing: false,
            close_pending: None,
        }
    }

    /// A new egress (this member leads): nothing waits on it yet, and a close
    /// asked as an earlier leader is the module's to finish (it logs the
    /// closes still due when it leads), so the session is served again.
    fn set_egress(&mut self, egress: Option<Publication>) {
        self.egress = egress;
        self.queue.clear();
        self.stalled_since = None;
        self.closing = false;
        self.close_pending = None;
    }

    /// Sends what waits, oldest first, as far as the egress takes it.
    fn drain(&mut self) -> Drained {
        let Some(egress) = &self.egress else {
            return Drained::Nothing;
        };
        let mut went = false;
        while let Some(message) = self.queue.front() {
            match egress.offer(message) {
                Ok(_) => {}
                Err(
                    OfferError::BackPressured | OfferError::AdminAction | OfferError::NotConnected,
                ) => break,
                Err(e) => return Drained::Failed(e),
            }
            self.queue.pop_front();
            went = true;
        }
        if self.queue.is_empty() {
            self.stalled_since = None;
        } else if went {
            self.stalled_since = Some(Instant::now());
        }
        if went {
            Drained::Went
        } else {
            Drained::Nothing
        }
    }
}

/// What an offer returns when its message waits in the session's queue:
/// accepted (positive, as every offer that succeeds), to be sent as the
/// egress takes it.
pub const QUEUED_OFFER: i64 = 1;

/// An offer on a follower: accepted and dropped, as Aeron's `MOCKED_OFFER`.
pub const MOCKED_OFFER: i64 = 1;

/// The container's side of the cluster, as a service reaches it.
struct State {
    client: Client,
    to_module: ExclusivePublication,
    sessions: BTreeMap<i64, ServiceSession>,
    service_id: i32,
    member_id: i32,
    role: i32,
    leadership_term_id: i64,
    time: i64,
    log_position: i64,
    next_ack_id: i64,
    /// The log's clock unit and application version (its terms' events).
    time_unit: i32,
    app_version: i32,
    /// Writing a snapshot: requests to the module are refused.
    snapshotting: bool,
    /// An egress message being made (header and payload): one buffer for every offer.
    egress_message: Vec<u8>,
    /// The most bytes a session's queue holds (the context's).
    egress_queue_len: usize,
    /// Sessions with answers waiting.
    queued_sessions: usize,
    /// Sessions whose close is still to be asked of the module.
    closes_pending: usize,
}

/// Why an offer did not go.
#[derive(Debug, PartialEq, Eq)]
pub enum ServiceOfferError {
    /// No such open session.
    UnknownSession,
    /// The answer cannot go, and no retry would get it through:
    /// NotConnected (the egress could not be added, or the session is being
    /// closed because its egress could not take its answers), Closed,
    /// MaxPositionExceeded, or a message longer than the egress takes. Back
    /// pressure never reaches the service: what the egress cannot take now
    /// waits in the session's queue.
    Egress(OfferError),
}

impl State {
    /// Closes session `id`, whose egress cannot take its answers: its queue
    /// is dropped, and what the service offers it from now on too, and the
    /// module is asked to close it, telling its client `detail` (asked again
    /// at each duty cycle until the control stream takes it).
    fn close_for_egress(&mut self, id: i64, detail: String) {
        let Some(s) = self.sessions.get_mut(&id) else {
            return;
        };
        if !s.queue.is_empty() {
            self.queued_sessions -= 1;
        }
        s.queue.clear();
        s.stalled_since = None;
        s.closing = true;
        eprintln!("sulis cluster: closing session {id}: {detail}");
        s.close_pending = Some(detail);
        self.closes_pending += 1;
        self.ask_pending_closes();
    }

    /// Asks the module for the closes not yet taken; work done.
    fn ask_pending_closes(&mut self) -> usize {
        if self.closes_pending == 0 {
            return 0;
        }
        let mut work = 0;
        for (&id, s) in self.sessions.iter_mut() {
            let Some(detail) = &s.close_pending else {
                continue;
            };
            let message = close_session_with_detail(id, detail);
            if !send_to_module(&mut self.to_module, self.snapshotting, &message) {
                break;
            }
            s.close_pending = None;
            self.closes_pending -= 1;
            work += 1;
        }
        work
    }

    /// Leader: sends what the sessions' queues hold as their egresses take
    /// it, and closes a session whose egress took nothing for `stall` or
    /// failed for good.
    fn drain_egress(&mut self, stall: Duration) -> usize {
        let mut work = self.ask_pending_closes();
        if self.queued_sessions == 0 {
            return work;
        }
        let mut stalled = Vec::new();
        for (&id, s) in self.sessions.iter_mut() {
            if s.queue.is_empty() {
                continue;
            }
            match s.drain() {
                Drained::Went => {
                    work += 1;
                    if s.queue.is_empty() {
                        self.queued_sessions -= 1;
                    }
                }
                Drained::Failed(e) => stalled.push((
                    id,
                    format!(
                        "the session's egress ({} stream {}) failed: {e:?}",
                        s.response_channel, s.response_stream_id
                    ),
                )),
                Drained::Nothing if s.stalled_since.is_some_and(|t| t.elapsed() >= stall) => {
                    let connected = s.egress.as_ref().is_some_and(|e| e.is_connected());
                    stalled.push((
                        id,
                        format!(
                            "the session's egress ({} stream {}) {} for {:?} with {} answers ({} bytes) waiting (egress_stall_timeout)",
                            s.response_channel,
                            s.response_stream_id,
                            if connected {
                                "took nothing (back-pressured: the client does not read it)"
                            } else {
                                "was not connected (the client is gone)"
                            },
                            stall,
                            s.queue.len(),
                            s.queue.bytes()
                        ),
                    ));
                }
                Drained::Nothing => {}
            }
        }
        for (id, detail) in stalled {
            self.close_for_egress(id, detail);
            work += 1;
        }
        work
    }

    /// No longer the leader: what waits is dropped (answers are at most once
    /// across a leader change; the next leader's service answers anew), and
    /// so are closes not yet asked (the next leader's container decides).
    fn drop_egress_queues(&mut self) {
        for s in self.sessions.values_mut() {
            s.queue.clear();
            s.stalled_since = None;
            s.close_pending = None;
        }
        self.queued_sessions = 0;
        self.closes_pending = 0;
    }
}

/// Offers `message` to the module on `to_module`, a few tries (IPC to the
/// local module: back pressure is brief); false while a snapshot is written
/// (no replay would ask again) or when it took nothing.
fn send_to_module(
    to_module: &mut ExclusivePublication,
    snapshotting: bool,
    message: &[u8],
) -> bool {
    if snapshotting {
        return false;
    }
    for _ in 0..1000 {
        if to_module.offer(message).is_ok() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

/// What a service may do, during a callback.
pub struct Cluster<'a> {
    state: &'a mut State,
}

impl Cluster<'_> {
    /// The cluster time of the entry being handled.
    pub fn time(&self) -> i64 {
        self.state.time
    }
    /// The log position after the entry being handled.
    pub fn log_position(&self) -> i64 {
        self.state.log_position
    }
    /// This member's role (`role::*`).
    pub fn role(&self) -> i32 {
        self.state.role
    }
    /// This member's id.
    pub fn member_id(&self) -> i32 {
        self.state.member_id
    }
    /// The open sessions.
    pub fn session_ids(&self) -> Vec<i64> {
        self.state.sessions.keys().copied().collect()
    }

    /// Sends `payload` to session `session_id`'s client (behind a session
    /// header carrying the entry's time): the egress's new position, or
    /// [`QUEUED_OFFER`] when it waits in the session's queue (the egress
    /// back-pressured or not connected; sent in order as it takes it), or
    /// why it cannot go at all. It never waits and never asks to be offered
    /// again. A queue past [`ServiceContext::egress_queue_len`] closes the
    /// session (its client told why) and the answer is dropped
    /// (NotConnected). On a follower nothing is sent and the offer succeeds
    /// ([`MOCKED_OFFER`]), as on Aeron's followers.
    pub fn offer(&mut self, session_id: i64, payload: &[u8]) -> Result<i64, ServiceOfferError> {
        let s = &mut *self.state;
        let Some(session) = s.sessions.get_mut(&session_id) else {
            return Err(ServiceOfferError::UnknownSession);
        };
        if s.role != role::LEADER {
            return Ok(MOCKED_OFFER);
        }
        if session.closing {
            return Err(ServiceOfferError::Egress(OfferError::NotConnected));
        }
        let Some(egress) = &session.egress else {
            // The egress could not be added: it never will be.
            return Err(ServiceOfferError::Egress(OfferError::NotConnected));
        };
        let message = &mut s.egress_message;
        message.clear();
        SessionMessageHeader {
            leadership_term_id: s.leadership_term_id,
            cluster_session_id: session_id,
            timestamp: s.time,
        }
        .encode_into(message);
        message.extend_from_slice(payload);
        if message.len() > egress.max_message_length() {
            // Never queued: it could not go later either.
            return Err(ServiceOfferError::Egress(OfferError::MessageTooLong {
                length: message.len(),
                max: egress.max_message_length(),
            }));
        }
        if session.queue.is_empty() {
            match egress.offer(message) {
                Ok(position) => return Ok(position),
                Err(
                    OfferError::BackPressured | OfferError::AdminAction | OfferError::NotConnected,
                ) => {}
                Err(e) => return Err(ServiceOfferError::Egress(e)),
            }
        }
        if session.queue.bytes() + message.len() > s.egress_queue_len {
            let detail = format!(
                "the session's egress ({} stream {}) fell {} bytes of answers behind (egress_queue_len {}): a client that reads its egress too slowly, or not at all",
                session.response_channel,
                session.response_stream_id,
                session.queue.bytes() + message.len(),
                s.egress_queue_len
            );
            s.close_for_egress(session_id, detail);
            return Err(ServiceOfferError::Egress(OfferError::NotConnected));
        }
        if session.queue.is_empty() {
            s.queued_sessions += 1;
            session.stalled_since = Some(Instant::now());
        }
        session.queue.push(message);
        Ok(QUEUED_OFFER)
    }

    /// Schedules (or moves) timer `correlation_id` for cluster time `deadline`.
    pub fn schedule_timer(&mut self, correlation_id: i64, deadline: i64) -> bool {
        self.send_to_module(
            &ScheduleTimer {
                correlation_id,
                deadline,
            }
            .encode(),
        )
    }

    /// Cancels timer `correlation_id`.
    pub fn cancel_timer(&mut self, correlation_id: i64) -> bool {
        self.send_to_module(&CancelTimer { correlation_id }.encode())
    }

    /// Closes session `session_id` (its client is told SERVICE_ACTION).
    pub fn close_session(&mut self, session_id: i64) -> bool {
        self.send_to_module(
            &CloseSession {
                cluster_session_id: session_id,
            }
            .encode(),
        )
    }

    /// Puts `payload` into the log as this service's message (each member's
    /// service sends it; the log holds it once).
    /// Offers message `i` (`data[offsets[i]..offsets[i + 1]]`) to session
    /// `session_ids[i]`, in order, as [`Cluster::offer`] each: how many
    /// went, stopping at the first that did not (and why). An error when
    /// the columns do not fit together (`offsets`: Arrow's layout, one more
    /// than `session_ids`, rising, within `data`).
    pub fn offer_batch(
        &mut self,
        session_ids: &[i64],
        data: &[u8],
        offsets: &[i32],
    ) -> Result<(usize, Option<ServiceOfferError>), String> {
        let count = crate::client::session_messages::message_count(offsets, data.len())?;
        if count != session_ids.len() {
            return Err(format!(
                "{} offsets for {} session ids: one more than messages expected",
                offsets.len(),
                session_ids.len()
            ));
        }
        for (i, &session) in session_ids.iter().enumerate() {
            let payload = &data[offsets[i] as usize..offsets[i + 1] as usize];
            if let Err(e) = self.offer(session, payload) {
                return Ok((i, Some(e)));
            }
        }
        Ok((session_ids.len(), None))
    }

    pub fn offer_to_cluster(&mut self, payload: &[u8]) -> bool {
        let mut message = SessionMessageHeader {
            leadership_term_id: self.state.leadership_term_id,
            cluster_session_id: self.state.service_id as i64,
            timestamp: 0,
        }
        .encode();
        message.extend_from_slice(payload);
        self.send_to_module(&message)
    }

    fn send_to_module(&mut self, message: &[u8]) -> bool {
        let state = &mut *self.state;
        send_to_module(&mut state.to_module, state.snapshotting, message)
    }
}

/// A running service container.
pub struct ClusteredServiceAgent {
    ctx: ServiceContext,
    state: State,
    service: Box<dyn ClusteredService + Send>,
    from_module: Subscription,
    control_assembler: FragmentAssembler,
    log: Option<Subscription>,
    log_assembler: FragmentAssembler,
    /// The messages of a poll of the log (kept for their buffers).
    log_messages: AssembledMessages,
    pending_joins: std::collections::VecDeque<JoinLog>,
    commit_counter: i32,
    started: bool,
    /// The local archive, reached when a snapshot is first written or read.
    archive: Option<ArchiveClient>,
    /// The log followed now is the live one (snapshot actions met while
    /// replaying at start were taken, or failed, before the restart).
    live: bool,
    /// The service's messages of the snapshot it recovered from, until `on_start`.
    loaded: Option<Vec<Vec<u8>>>,
    /// Where the member stops, once the module said so.
    termination_position: Option<i64>,
    terminated: bool,
    /// `cluster-mark-service-<id>.dat`, if the context named a directory.
    mark: Option<ClusterMarkFile>,
    /// When the mark file's activity timestamp is next moved (epoch ms).
    next_activity_ms: i64,
}

impl ClusteredServiceAgent {
    /// Connects to the driver and waits for its module's JoinLog in `do_work`.
    pub fn launch(
        ctx: ServiceContext,
        service: Box<dyn ClusteredService + Send>,
    ) -> Result<ClusteredServiceAgent, String> {
        let client = Client::connect(ClientContext {
            dir: ctx.driver_dir.clone(),
            driver_timeout: ctx.message_timeout,
            name: format!("sulis-clustered-service-{}", ctx.service_id),
            interrupt: None,
        })
        .map_err(|e| format!("media driver: {e}"))?;
        let mark = match &ctx.cluster_dir {
            Some(dir) => {
                let fields = MarkFields {
                    component_type: component_type::CONTAINER,
                    member_id: -1,
                    service_id: ctx.service_id,
                    cluster_id: 0,
                    archive_stream_id: 10,
                    service_stream_id: ctx.service_stream_id,
                    consensus_module_stream_id: ctx.consensus_module_stream_id,
                    ingress_stream_id: -1,
                    aeron_directory: ctx.driver_dir.display().to_string(),
                    control_channel: ctx.control_channel.clone(),
                    ingress_channel: String::new(),
                    service_name: format!("service-{}", ctx.service_id),
                    error_buffer_length: 0,
                };
                let file = service_file_name(ctx.service_id);
                let mark = ClusterMarkFile::create(dir, &file, &fields, epoch_ms())
                    .map_err(|e| format!("the service's mark file: {e}"))?;
                mark.signal_ready(epoch_ms());
                Some(mark)
            }
            None => None,
        };
        let to_module = client
            .add_exclusive_publication(&ctx.control_channel, ctx.consensus_module_stream_id)
            .map_err(|e| format!("{}: {e}", ctx.control_channel))?;
        let from_module = client
            .add_subscription(&ctx.control_channel, ctx.service_stream_id)
            .map_err(|e| format!("{}: {e}", ctx.control_channel))?;
        Ok(ClusteredServiceAgent {
            state: State {
                client,
                to_module,
                sessions: BTreeMap::new(),
                service_id: ctx.service_id,
                member_id: NULL_VALUE as i32,
                role: role::FOLLOWER,
                leadership_term_id: NULL_VALUE,
                time: 0,
                log_position: 0,
                next_ack_id: 0,
                time_unit: time_unit::MILLIS,
                app_version: 0,
                snapshotting: false,
                egress_message: Vec::new(),
                egress_queue_len: ctx.egress_queue_len,
                queued_sessions: 0,
                closes_pending: 0,
            },
            ctx,
            service,
            from_module,
            control_assembler: FragmentAssembler::new(),
            log: None,
            log_assembler: FragmentAssembler::new(),
            log_messages: AssembledMessages::new(),
            pending_joins: std::collections::VecDeque::new(),
            commit_counter: -1,
            started: false,
            archive: None,
            live: false,
            loaded: None,
            termination_position: None,
            terminated: false,
            mark,
            next_activity_ms: 0,
        })
    }

    /// The log position this service has applied.
    pub fn log_position(&self) -> i64 {
        self.state.log_position
    }

    /// The service.
    pub fn service(&self) -> &(dyn ClusteredService + Send) {
        self.service.as_ref()
    }

    /// One duty cycle: the module's messages, then the committed log. An
    /// error (fatal to the service) is also recorded in its mark file.
    pub fn do_work(&mut self) -> Result<usize, String> {
        let now_ms = epoch_ms();
        if now_ms >= self.next_activity_ms {
            if let Some(mark) = &self.mark {
                mark.update_activity(now_ms);
            }
            self.next_activity_ms = now_ms + 1000;
        }
        let outcome = self.duty_cycle();
        if let Err(why) = &outcome {
            self.record_error(why);
        }
        outcome
    }

    /// Records `text` in the service's mark file's error log (the runner's
    /// own errors: an exception in the service's callback).
    pub fn record_error(&self, text: &str) {
        if let Some(mark) = &self.mark {
            mark.record_error(text, epoch_ms());
        }
    }

    fn duty_cycle(&mut self) -> Result<usize, String> {
        let mut work = 0;
        let mut joins = Vec::new();
        let mut termination = None;
        let assembler = &mut self.control_assembler;
        self.from_module
            .poll(
                |payload, header| -> Result<(), ()> {
                    if let Some(m) = assembler.on_fragment(payload, header) {
                        match SbeHeader::decode(&m.payload).map(|h| h.template_id) {
                            Ok(JoinLog::TEMPLATE_ID) => joins.push(m.payload),
                            Ok(ServiceTerminationPosition::TEMPLATE_ID) => {
                                termination = ServiceTerminationPosition::decode(&m.payload).ok()
                            }
                            _ => {}
                        }
                    }
                    Ok(())
                },
                10,
            )
            .unwrap_or(0);
        if let Some(t) = termination {
            self.termination_position = Some(t.log_position);
        }
        for j in joins {
            self.pending_joins
                .push_back(JoinLog::decode(&j).map_err(|e| e.message)?);
        }
        // A JoinLog is taken once the log being followed reached where the
        // next begins (a replay at start, then the live log).
        while let Some(join) = self.pending_joins.front() {
            if self.log.is_some() && self.state.log_position < join.log_position {
                break;
            }
            let join = self.pending_joins.pop_front().expect("front");
            self.join_log(&join)?;
            work += 1;
        }
        if let Some(log) = &mut self.log {
            if self.commit_counter < 0 {
                self.commit_counter = find_counter(
                    &self.state.client,
                    sulis_protocol::counters::type_id::CLUSTER_COMMIT_POSITION,
                );
            }
            if self.commit_counter >= 0 {
                let limit = self
                    .state
                    .client
                    .counters()
                    .counter_ref(self.commit_counter)
                    .get();
                // The poll's messages in one buffer kept from poll to poll: no allocation per message.
                let mut messages = std::mem::take(&mut self.log_messages);
                messages.clear();
                let assembler = &mut self.log_assembler;
                log.bounded_poll(
                    |payload, header| -> Result<(), ()> {
                        assembler.on_fragment_into(payload, header, &mut messages);
                        Ok(())
                    },
                    limit,
                    self.ctx.log_fragment_limit.max(1),
                )
                .unwrap_or(0);
                // Session messages back to back go to the service together; any other
                // entry first hands over the ones before it, so the order is the log's.
                let mut run = SessionMessages::default();
                for (message, position, _) in messages.iter() {
                    let entry =
                        log_adapter::decode(message, position).map_err(|e| e.to_string())?;
                    if let LogEntry::SessionMessage {
                        cluster_session_id,
                        timestamp,
                        payload,
                        ..
                    } = entry
                    {
                        run.push(cluster_session_id, timestamp, position, payload);
                    } else {
                        self.hand_over(&mut run);
                        if self.apply(&entry, position) && self.live {
                            self.take_snapshot(position)?;
                        }
                    }
                    work += 1;
                }
                self.hand_over(&mut run);
                self.log_messages = messages;
            }
        }
        if self.state.role == role::LEADER {
            work += self.state.drain_egress(self.ctx.egress_stall_timeout);
        }
        if let Some(end) = self.termination_position {
            if self.state.log_position >= end && !self.terminated {
                // Everything up to where the member stops is applied: say so, and stop.
                let ack = ServiceAck {
                    log_position: end,
                    timestamp: self.state.time,
                    ack_id: self.state.next_ack_id,
                    relevant_id: NULL_VALUE,
                    service_id: self.ctx.service_id,
                };
                self.state.next_ack_id += 1;
                let _ = (Cluster {
                    state: &mut self.state,
                })
                .send_to_module(&ack.encode());
                self.terminated = true;
                work += 1;
            }
        }
        Ok(work)
    }

    /// True once the member stopped (a shutdown or an abort) and this
    /// service applied the log to where it stopped: close it.
    pub fn is_terminated(&self) -> bool {
        self.terminated
    }

    /// Follows the log the module names, from the position it names; acks.
    fn join_log(&mut self, join: &JoinLog) -> Result<(), String> {
        if !self.started {
            self.recover_from_snapshot()?;
        }
        if join.log_position != self.state.log_position {
            return Err(format!(
                "Cluster log must be contiguous: service {} is at {} and was asked to join at {}",
                self.ctx.service_id, self.state.log_position, join.log_position
            ));
        }
        let channel = format!(
            "{}{}session-id={}",
            join.log_channel,
            if join.log_channel.contains('?') {
                "|"
            } else {
                "?"
            },
            join.log_session_id
        );
        let mut sub = self
            .state
            .client
            .add_subscription(&channel, join.log_stream_id)
            .map_err(|e| format!("{channel}: {e}"))?;
        let deadline = Instant::now() + self.ctx.message_timeout;
        while sub.images().is_empty() {
            if Instant::now() > deadline {
                return Err(format!(
                    "no image of the log ({channel}) within {:?}",
                    self.ctx.message_timeout
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let joined = sub.images()[0].join_position();
        if joined != join.log_position {
            return Err(format!(
                "Cluster log must be contiguous: the log's image starts at {joined}, service {} is at {}",
                self.ctx.service_id, join.log_position
            ));
        }
        if let Some(mut old) = self.log.replace(sub) {
            let _ = old.close();
        }
        self.live = join.max_log_position == i64::MAX;
        self.state.member_id = join.member_id;
        if let Some(mark) = &self.mark {
            mark.set_member_id(join.member_id);
        }
        let was = self.state.role;
        self.state.role = join.role;
        let ack = ServiceAck {
            log_position: join.log_position,
            timestamp: self.state.time,
            ack_id: self.state.next_ack_id,
            relevant_id: NULL_VALUE,
            service_id: self.ctx.service_id,
        };
        self.state.next_ack_id += 1;
        let mut cluster = Cluster {
            state: &mut self.state,
        };
        if !cluster.send_to_module(&ack.encode()) {
            return Err("the consensus module's control stream took no ServiceAck".into());
        }
        if !self.started {
            self.started = true;
            let loaded = self.loaded.take();
            self.service.on_start(&mut cluster, loaded.as_deref());
        }
        if was != join.role {
            if was == role::LEADER {
                cluster.state.drop_egress_queues();
            }
            if join.role == role::LEADER {
                for s in cluster.state.sessions.values_mut() {
                    let egress = cluster
                        .state
                        .client
                        .add_publication(&s.response_channel, s.response_stream_id)
                        .ok();
                    s.set_egress(egress);
                }
                // Every queue and pending close was cleared with the egresses.
                cluster.state.queued_sessions = 0;
                cluster.state.closes_pending = 0;
            }
            self.service.on_role_change(&mut cluster, join.role);
        }
        Ok(())
    }

    /// Hands the session messages `run` holds (if any) to the service.
    fn hand_over(&mut self, run: &mut SessionMessages) {
        if run.is_empty() {
            return;
        }
        let messages = std::mem::take(run);
        let state = &mut self.state;
        state.log_position = *messages.positions.last().expect("not empty");
        state.time = *messages.timestamps.last().expect("not empty");
        self.service
            .on_session_messages(&mut Cluster { state }, messages);
    }

    /// Applies an entry; true if it is a snapshot action of this term.
    fn apply(&mut self, entry: &LogEntry<'_>, position: i64) -> bool {
        let state = &mut self.state;
        state.log_position = position;
        match entry {
            LogEntry::SessionMessage {
                cluster_session_id,
                timestamp,
                payload,
                ..
            } => {
                // (do_work gathers these into runs; one alone is a run of one.)
                state.time = *timestamp;
                let mut one = SessionMessages::default();
                one.push(*cluster_session_id, *timestamp, position, payload);
                self.service
                    .on_session_messages(&mut Cluster { state }, one);
            }
            LogEntry::Timer(t) => {
                state.time = t.timestamp;
                self.service
                    .on_timer_event(&mut Cluster { state }, t.correlation_id, t.timestamp);
            }
            LogEntry::SessionOpen(o) => {
                state.time = o.timestamp;
                let egress = if state.role == role::LEADER {
                    state
                        .client
                        .add_publication(&o.response_channel, o.response_stream_id)
                        .ok()
                } else {
                    None
                };
                state.sessions.insert(
                    o.cluster_session_id,
                    ServiceSession::new(o.response_channel.clone(), o.response_stream_id, egress),
                );
                self.service.on_session_open(
                    &mut Cluster { state },
                    o.cluster_session_id,
                    o.timestamp,
                );
            }
            LogEntry::SessionClose(c) => {
                state.time = c.timestamp;
                if let Some(s) = state.sessions.remove(&c.cluster_session_id) {
                    if !s.queue.is_empty() {
                        state.queued_sessions -= 1;
                    }
                    if s.close_pending.is_some() {
                        state.closes_pending -= 1;
                    }
                    if let Some(p) = s.egress {
                        p.close_without_waiting();
                    }
                }
                self.service.on_session_close(
                    &mut Cluster { state },
                    c.cluster_session_id,
                    c.timestamp,
                    c.close_reason,
                );
            }
            LogEntry::NewLeadershipTerm(t) => {
                state.time = t.timestamp;
                state.leadership_term_id = t.leadership_term_id;
                state.time_unit = t.time_unit;
                state.app_version = t.app_version;
            }
            LogEntry::ClusterAction(a) => {
                state.time = a.timestamp;
                return a.action == cluster_action::SNAPSHOT
                    && a.flags == 0
                    && a.leadership_term_id == state.leadership_term_id;
            }
            LogEntry::MembershipChange => {}
        }
        false
    }

    fn archive(&mut self) -> Result<&mut ArchiveClient, String> {
        if self.archive.is_none() {
            let archive = ArchiveClient::connect(
                &self.state.client,
                ArchiveClientContext {
                    message_timeout: self.ctx.message_timeout,
                    ..ArchiveClientContext::default()
                },
            )
            .map_err(|e| format!("service {}: the local archive: {e}", self.ctx.service_id))?;
            self.archive = Some(archive);
        }
        Ok(self.archive.as_mut().expect("connected above"))
    }

    /// Writes this service's snapshot at `log_position` and tells the
    /// module: ServiceAck with the snapshot's recording id, or with
    /// `NULL_VALUE` if it could not be written, the service's own error
    /// included (the module then keeps the previous snapshot and the
    /// service goes on, as Aeron's does).
    fn take_snapshot(&mut self, log_position: i64) -> Result<(), String> {
        let written = self.write_snapshot(log_position);
        let relevant_id = match &written {
            Ok(recording_id) => *recording_id,
            Err(_) => NULL_VALUE,
        };
        let ack = ServiceAck {
            log_position,
            timestamp: self.state.time,
            ack_id: self.state.next_ack_id,
            relevant_id,
            service_id: self.ctx.service_id,
        };
        self.state.next_ack_id += 1;
        if !(Cluster {
            state: &mut self.state,
        })
        .send_to_module(&ack.encode())
        {
            return Err("the consensus module's control stream took no snapshot ServiceAck".into());
        }
        if let Err(e) = written {
            // The member goes on; the module keeps its previous snapshot.
            eprintln!("sulis cluster: {e}");
            self.record_error(&e);
        }
        Ok(())
    }

    fn write_snapshot(&mut self, log_position: i64) -> Result<i64, String> {
        let what = format!(
            "service {}'s snapshot at log position {log_position}",
            self.ctx.service_id
        );
        let (stream, timeout) = (self.ctx.snapshot_stream_id, self.ctx.message_timeout);
        self.archive()?;
        let archive = self.archive.as_mut().expect("connected above");
        let mut taker = SnapshotTaker::start(&self.state.client, archive, stream, timeout, &what)?;
        let mark = SnapshotMark {
            log_position,
            leadership_term_id: self.state.leadership_term_id,
            time_unit: self.state.time_unit,
            app_version: self.state.app_version,
        };
        let mut framing = vec![marker(
            SERVICE_SNAPSHOT_TYPE_ID,
            snapshot_mark::BEGIN,
            &mark,
        )];
        for (&id, s) in &self.state.sessions {
            framing.push(
                ClientSession {
                    cluster_session_id: id,
                    response_stream_id: s.response_stream_id,
                    response_channel: s.response_channel.clone(),
                    encoded_principal: Vec::new(),
                }
                .encode(),
            );
        }
        framing.push(marker(SERVICE_SNAPSHOT_TYPE_ID, snapshot_mark::END, &mark));
        for m in &framing {
            if let Err(e) = taker.offer(m) {
                taker.abort(archive);
                return Err(e);
            }
        }
        let mut writer = SnapshotWriter {
            taker: &mut taker,
            written: 0,
            failed: None,
        };
        // What the service asks of the cluster while it writes its snapshot
        // is refused: no replay would ask it again.
        self.state.snapshotting = true;
        let mut taken = self.service.on_take_snapshot(
            &mut Cluster {
                state: &mut self.state,
            },
            &mut writer,
        );
        self.state.snapshotting = false;
        if let (Ok(()), Some(e)) = (&taken, writer.failed.take()) {
            taken = Err(format!("a write failed and the service went on: {e}"));
        }
        if let Err(e) = taken {
            taker.abort(archive);
            return Err(format!(
                "the service's on_take_snapshot failed ({what}): {e}"
            ));
        }
        taker.finish(&self.state.client, archive)
    }

    /// At start: loads this service's snapshot if the module recovers from
    /// one (the recovery-state counter names it), so the service joins the
    /// log where the snapshot was taken.
    fn recover_from_snapshot(&mut self) -> Result<(), String> {
        let Some(recovery) = RecoveryState::find(&self.state.client) else {
            return Ok(());
        };
        let id = self.ctx.service_id;
        let Some(&recording_id) = recovery.snapshot_recording_ids.get(id as usize) else {
            return Err(format!(
                "the module recovers {} service(s); this is service {id}",
                recovery.snapshot_recording_ids.len()
            ));
        };
        if recording_id < 0 {
            return Ok(());
        }
        let (stream, timeout) = (self.ctx.replay_stream_id, self.ctx.message_timeout);
        self.archive()?;
        let archive = self.archive.as_mut().expect("connected above");
        let messages = load_snapshot(
            &self.state.client,
            archive,
            recording_id,
            stream,
            timeout * 6,
        )?;
        let bad =
            |why: String| format!("service {id}'s snapshot (recording {recording_id}): {why}");
        let first = messages.first().ok_or_else(|| bad("it is empty".into()))?;
        let begin = SnapshotMarker::decode(first).map_err(|e| bad(e.message))?;
        if begin.type_id != SERVICE_SNAPSHOT_TYPE_ID || begin.mark != snapshot_mark::BEGIN {
            return Err(bad(format!(
                "it begins with a marker of type {} mark {}, not a service's BEGIN",
                begin.type_id, begin.mark
            )));
        }
        if begin.log_position != recovery.log_position {
            return Err(bad(format!(
                "it is of log position {}, the module recovers from {}",
                begin.log_position, recovery.log_position
            )));
        }
        let mut end = None;
        for (i, m) in messages.iter().enumerate().skip(1) {
            if let Ok(marker) = SnapshotMarker::decode(m) {
                if marker.mark == snapshot_mark::END {
                    end = Some(i);
                    break;
                }
            }
            let s = ClientSession::decode(m).map_err(|e| bad(e.message))?;
            self.state.sessions.insert(
                s.cluster_session_id,
                ServiceSession::new(s.response_channel, s.response_stream_id, None),
            );
        }
        let end = end.ok_or_else(|| bad("no END marker (a snapshot cut short)".into()))?;
        let state = &mut self.state;
        state.log_position = begin.log_position;
        state.leadership_term_id = begin.leadership_term_id;
        state.time = recovery.timestamp;
        state.time_unit = begin.time_unit;
        state.app_version = begin.app_version;
        self.loaded = Some(unframe(&messages[end + 1..]).map_err(bad)?);
        Ok(())
    }

    /// Closes the container's publications and subscriptions.
    pub fn close(mut self) {
        for s in std::mem::take(&mut self.state.sessions).into_values() {
            if let Some(p) = s.egress {
                p.close_without_waiting();
            }
        }
        self.state.client.close();
    }
}

fn find_counter(client: &Client, type_id: i32) -> i32 {
    let mut found = -1;
    client.counters().for_each(|id, t, _key, _label| {
        if t == type_id {
            found = id;
        }
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(message: &[u8]) -> Vec<Vec<u8>> {
        if message.len() <= SNAPSHOT_CHUNK {
            return vec![[&[WHOLE][..], message].concat()];
        }
        let n = message.chunks(SNAPSHOT_CHUNK).len();
        message
            .chunks(SNAPSHOT_CHUNK)
            .enumerate()
            .map(|(i, c)| [&[if i + 1 == n { LAST } else { PART }][..], c].concat())
            .collect()
    }

    #[test]
    fn snapshot_messages_of_any_length_come_back_whole_and_a_cut_one_is_an_error() {
        let long: Vec<u8> = (0..SNAPSHOT_CHUNK * 2 + 5).map(|i| i as u8).collect();
        let mut framed = frame(b"first");
        framed.extend(frame(&long));
        framed.extend(frame(b""));
        assert_eq!(framed.len(), 5);
        assert_eq!(
            unframe(&framed).unwrap(),
            vec![b"first".to_vec(), long.clone(), Vec::new()]
        );
        let e = unframe(&framed[..3]).unwrap_err();
        assert!(
            e.contains("framed Some(87)") || e.contains("cut short"),
            "{e}"
        );
        assert!(unframe(&framed[..2]).unwrap_err().contains("cut short"));
        assert!(unframe(&[b"?".to_vec()])
            .unwrap_err()
            .contains("framed Some(63)"));
    }
}
