//! The consensus module's client sessions (Aeron's `SessionManager`): how a
//! connect becomes an open session in the log, how sessions time out and
//! close, what a follower keeps of them from the log, what a new leader does
//! with them, and what is rolled back when a leader's appends are not
//! committed.
//!
//! Everything it does to the outside goes through a [`SessionHost`] (egress
//! publications, the log) and an [`Authenticator`] (the archive's: one
//! authenticator type for the whole node), and it reads time only from its
//! arguments, so it runs on a manual clock in tests.
//!
//! Where Aeron leaves a client without an answer, this one answers:
//! * a session closed because a freshly started leader could not take it
//!   over (Aeron #1397: the client only ever times out) is sent CLOSED;
//! * a close that could not be appended at once (the log back-pressured) is
//!   retried on the next check, not only after the session timeout again;
//! * a session whose open is rolled back by an election is sent CLOSED.

use crate::module::cluster_session::{ClusterSession, SessionState};
use std::collections::{BTreeMap, VecDeque};
use sulis_archive::auth::{Authenticator, Decision};
use sulis_protocol::cluster::messages::{
    close_reason, event_code, Challenge, NewLeaderEvent, SessionCloseEvent, SessionEvent,
    SessionOpenEvent, CLIENT_PROTOCOL_VERSION, EXACTLY_ONCE, MESSAGES_COMMITTED,
    MESSAGES_COMMITTED_AT_CLOSE, NULL_POSITION, NULL_VALUE,
};
use sulis_protocol::sbe::{semantic_major, semantic_version_string};

/// What the session manager needs of the consensus module.
pub trait SessionHost {
    /// Starts connecting egress publication `key` to `channel`/`stream_id`
    /// (asynchronously: [`SessionHost::is_egress_connected`] says when);
    /// nothing if `key` has one already.
    fn connect_egress(&mut self, key: u64, channel: &str, stream_id: i32);
    /// True once egress `key` has a subscriber; `None` if it cannot be made
    /// (a bad channel): the session is then dropped.
    fn is_egress_connected(&mut self, key: u64) -> Option<bool>;
    /// Offers `message` on egress `key`; false if it could not go now.
    fn send_egress(&mut self, key: u64, message: &[u8]) -> bool;
    /// Closes egress `key`.
    fn close_egress(&mut self, key: u64);
    /// Appends `entry` to the log; the log position after it, or `None` if
    /// the log publication back-pressured (try again later).
    fn append_to_log(&mut self, entry: &[u8]) -> Option<i64>;
}

/// The settings the session manager runs with.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// This member's id.
    pub member_id: i32,
    /// A session not heard from for this long is closed (TIMEOUT).
    pub session_timeout_ns: i64,
    /// Most sessions, pending and open together.
    pub max_concurrent_sessions: usize,
    /// Told to clients in SessionEvent: how long they wait for a new leader.
    pub leader_heartbeat_timeout_ns: i64,
}

/// The term a call happens in, as clients are told of it.
#[derive(Clone, Debug)]
pub struct Term {
    /// The leadership term.
    pub leadership_term_id: i64,
    /// Its leader (−1 unknown).
    pub leader_member_id: i32,
    /// `id=endpoint,...`: where clients send ingress.
    pub ingress_endpoints: String,
}

/// A client's SessionConnectRequest, as the ingress adapter decoded it.
#[derive(Clone, Debug)]
pub struct ConnectRequest {
    /// The client's correlation id.
    pub correlation_id: i64,
    /// Egress stream id.
    pub response_stream_id: i32,
    /// Client protocol version.
    pub version: i32,
    /// Egress channel.
    pub response_channel: String,
    /// Credentials (empty if none).
    pub encoded_credentials: Vec<u8>,
    /// The ingress image it came on.
    pub ingress_image_correlation_id: i64,
}

/// An open or closing session as a snapshot keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSnapshot {
    /// Cluster session id.
    pub id: i64,
    /// Correlation id of its connect.
    pub correlation_id: i64,
    /// Log position after its SessionOpenEvent.
    pub opened_log_position: i64,
    /// When it was last heard from (ns).
    pub time_of_last_activity_ns: i64,
    /// Close reason if closing.
    pub close_reason: Option<i32>,
    /// Egress stream id.
    pub response_stream_id: i32,
    /// Egress channel.
    pub response_channel: String,
    /// How many of its messages the log holds up to the snapshot.
    pub messages_in_log: i64,
}

/// What a numbered message is to the session it names
/// ([`SessionManager::number_message`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageNumber {
    /// The session's next message: sequence it.
    Next,
    /// The log holds it already (a resend after a failover): drop it.
    Duplicate,
    /// Messages before it never reached the log: the session is closing,
    /// its client told which.
    Gap,
    /// Not an open session (dropped, as any such message).
    Unknown,
}

/// Detail of the ERROR for a client of another major protocol version.
pub const SESSION_INVALID_VERSION_MSG: &str = "invalid client version";
/// Detail of the ERROR when the session limit is reached.
pub const SESSION_LIMIT_MSG: &str = "concurrent session limit";
/// Detail of AUTHENTICATION_REJECTED.
pub const SESSION_REJECTED_MSG: &str = "session failed authentication";

/// The sessions of one consensus module.
pub struct SessionManager {
    cfg: SessionConfig,
    /// Open and closing sessions by id (ordered: a snapshot lists them alike
    /// on every member).
    sessions: BTreeMap<i64, ClusterSession>,
    /// Connecting, challenged or authenticated, not yet in the log.
    pending: Vec<ClusterSession>,
    /// Authentication decisions waiting for the session's egress.
    decisions: BTreeMap<u64, Decision>,
    /// To be told they are refused or redirected, then dropped.
    rejected: Vec<ClusterSession>,
    /// Closed by this leader after the commit position: restored as closing
    /// if the close is rolled back.
    uncommitted_closed: VecDeque<ClusterSession>,
    /// (log position after an open, the next committed session id it makes).
    uncommitted_next_committed: VecDeque<(i64, i64)>,
    /// (log position after a session's message, the session) for messages
    /// in the log past the commit position, oldest first.
    uncommitted_messages: VecDeque<(i64, i64)>,
    duplicates: u64,
    /// How far the log is committed (as last told): a CLOSED that carries a
    /// session's final count waits for its close to be committed.
    commit_position: i64,
    next_session_id: i64,
    next_committed_session_id: i64,
    next_egress_key: u64,
    timed_out: u64,
    /// The sessions `check_sessions` has something to do for (kept to
    /// spare an allocation per duty cycle).
    due: Vec<i64>,
    /// Pending sessions gone before they opened, for the authenticator to
    /// forget ([`SessionManager::take_dropped`]).
    dropped: Vec<i64>,
}

impl SessionManager {
    /// No sessions; the first gets id 1.
    pub fn new(cfg: SessionConfig) -> SessionManager {
        SessionManager {
            cfg,
            sessions: BTreeMap::new(),
            pending: Vec::new(),
            decisions: BTreeMap::new(),
            rejected: Vec::new(),
            uncommitted_closed: VecDeque::new(),
            uncommitted_next_committed: VecDeque::new(),
            uncommitted_messages: VecDeque::new(),
            duplicates: 0,
            commit_position: NULL_POSITION,
            next_session_id: 1,
            next_committed_session_id: 1,
            next_egress_key: 1,
            timed_out: 0,
            due: Vec::new(),
            dropped: Vec::new(),
        }
    }

    /// The pending sessions dropped since the last call (timed out, their
    /// egress never up, refused, or cut by a change of leadership): the
    /// authenticator forgets what it kept for them.
    pub fn take_dropped(&mut self) -> Vec<i64> {
        std::mem::take(&mut self.dropped)
    }

    /// Open or closing session `id`.
    pub fn session(&self, id: i64) -> Option<&ClusterSession> {
        self.sessions.get(&id)
    }

    /// The open and closing sessions, by id.
    pub fn sessions(&self) -> impl Iterator<Item = &ClusterSession> {
        self.sessions.values()
    }

    /// Sessions connecting or authenticating.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Sessions closed for want of activity (the timed-out-clients counter).
    pub fn timed_out_count(&self) -> u64 {
        self.timed_out
    }

    /// The id the next session gets.
    pub fn next_session_id(&self) -> i64 {
        self.next_session_id
    }

    /// The next session id as far as the committed log goes (a snapshot
    /// stores this one).
    pub fn next_committed_session_id(&self) -> i64 {
        self.next_committed_session_id
    }

    fn new_session(&mut self, id: i64, req: &ConnectRequest, now_ns: i64) -> ClusterSession {
        let key = self.next_egress_key;
        self.next_egress_key += 1;
        let mut s = ClusterSession::new(
            id,
            key,
            req.correlation_id,
            req.response_stream_id,
            &req.response_channel,
            now_ns,
        );
        s.ingress_image_correlation_id = req.ingress_image_correlation_id;
        s
    }

    /// A SessionConnectRequest. A follower redirects the client to the
    /// leader; the leader refuses another major version or one session too
    /// many, else gives it an id and asks the authenticator.
    pub fn on_session_connect(
        &mut self,
        host: &mut dyn SessionHost,
        auth: &mut dyn Authenticator,
        req: &ConnectRequest,
        is_leader: bool,
        term: &Term,
        now_ns: i64,
    ) {
        let id = if is_leader {
            let id = self.next_session_id;
            self.next_session_id += 1;
            id
        } else {
            NULL_VALUE
        };
        let mut session = self.new_session(id, req, now_ns);
        // The principal is what it connected with, whatever a challenge asks.
        session.encoded_principal = req.encoded_credentials.clone();
        host.connect_egress(
            session.egress_key,
            &session.response_channel,
            session.response_stream_id,
        );
        session.state = SessionState::Connecting;
        if !is_leader {
            session.reject(event_code::REDIRECT, &term.ingress_endpoints);
            self.rejected.push(session);
        } else if semantic_major(req.version) != semantic_major(CLIENT_PROTOCOL_VERSION) {
            let detail = format!(
                "{SESSION_INVALID_VERSION_MSG} {}, cluster is {}",
                semantic_version_string(req.version),
                semantic_version_string(CLIENT_PROTOCOL_VERSION)
            );
            session.reject(event_code::ERROR, &detail);
            self.rejected.push(session);
        } else if self.pending.len() + self.sessions.len() >= self.cfg.max_concurrent_sessions {
            session.reject(event_code::ERROR, SESSION_LIMIT_MSG);
            self.rejected.push(session);
        } else {
            let decision = auth.on_connect(id, &req.encoded_credentials, &req.response_channel);
            self.decisions.insert(session.egress_key, decision);
            self.pending.push(session);
        }
    }

    /// A ChallengeResponse for pending session `id`, read from the ingress
    /// image `image`. Only one from the image its connect came on counts: an
    /// answer forged from elsewhere (session ids are sequential) neither
    /// spends the challenge nor has the client refused.
    pub fn on_challenge_response(
        &mut self,
        auth: &mut dyn Authenticator,
        correlation_id: i64,
        id: i64,
        encoded_credentials: &[u8],
        image: i64,
        now_ns: i64,
    ) {
        let Some(s) = self.pending.iter_mut().find(|s| {
            s.id == id
                && s.state == SessionState::Challenged
                && s.ingress_image_correlation_id == image
        }) else {
            return;
        };
        s.time_of_last_activity_ns = now_ns;
        s.correlation_id = correlation_id;
        let decision = auth.on_challenge_response(id, encoded_credentials);
        self.decisions.insert(s.egress_key, decision);
    }

    /// Leader: moves pending sessions on (egress connected → authenticator's
    /// decision → SessionOpenEvent appended and OK sent); drops those timed
    /// out. `cluster_time` stamps the log entries. Returns work done.
    pub fn process_pending(
        &mut self,
        host: &mut dyn SessionHost,
        term: &Term,
        now_ns: i64,
        cluster_time: i64,
    ) -> usize {
        let mut work = 0;
        let mut i = 0;
        while i < self.pending.len() {
            let s = &mut self.pending[i];
            if s.state != SessionState::Invalid
                && s.has_timed_out(now_ns, self.cfg.session_timeout_ns)
            {
                let s = self.pending.swap_remove(i);
                self.decisions.remove(&s.egress_key);
                host.close_egress(s.egress_key);
                self.dropped.push(s.id);
                self.timed_out += 1;
                work += 1;
                continue;
            }
            if matches!(
                s.state,
                SessionState::Connecting | SessionState::Connected | SessionState::Challenged
            ) {
                match host.is_egress_connected(s.egress_key) {
                    None => s.state = SessionState::Invalid,
                    Some(true) => {
                        if s.state == SessionState::Connecting {
                            s.state = SessionState::Connected;
                            work += 1;
                        }
                        if let Some(decision) = self.decisions.remove(&s.egress_key) {
                            work += 1;
                            match decision {
                                Decision::Accept => s.state = SessionState::Authenticated,
                                Decision::Reject => s.reject(
                                    event_code::AUTHENTICATION_REJECTED,
                                    SESSION_REJECTED_MSG,
                                ),
                                Decision::Challenge(challenge) => {
                                    let m = Challenge {
                                        correlation_id: s.correlation_id,
                                        cluster_session_id: s.id,
                                        encoded_challenge: challenge.clone(),
                                    };
                                    if host.send_egress(s.egress_key, &m.encode()) {
                                        s.state = SessionState::Challenged;
                                    } else {
                                        self.decisions
                                            .insert(s.egress_key, Decision::Challenge(challenge));
                                    }
                                }
                            }
                        }
                    }
                    Some(false) => {}
                }
            }
            match s.state {
                SessionState::Invalid => {
                    let s = self.pending.swap_remove(i);
                    self.decisions.remove(&s.egress_key);
                    host.close_egress(s.egress_key);
                    self.dropped.push(s.id);
                    work += 1;
                    continue;
                }
                SessionState::Rejected => {
                    let s = self.pending.swap_remove(i);
                    self.dropped.push(s.id);
                    self.rejected.push(s);
                    work += 1;
                    continue;
                }
                SessionState::Authenticated => {
                    let open = SessionOpenEvent {
                        leadership_term_id: term.leadership_term_id,
                        correlation_id: s.correlation_id,
                        cluster_session_id: s.id,
                        timestamp: cluster_time,
                        response_stream_id: s.response_stream_id,
                        response_channel: s.response_channel.clone(),
                        encoded_principal: s.encoded_principal.clone(),
                    };
                    if let Some(position) = host.append_to_log(&open.encode()) {
                        let mut s = self.pending.swap_remove(i);
                        s.state = SessionState::Open;
                        s.opened_log_position = position;
                        s.time_of_last_activity_ns = now_ns;
                        // Aeron sends OK before the open is committed; the
                        // client's first message is sequenced after it.
                        s.has_open_event_pending =
                            !send_event(host, &s, term, &self.cfg, event_code::OK, EXACTLY_ONCE);
                        self.uncommitted_next_committed
                            .push_back((position, s.id + 1));
                        self.sessions.insert(s.id, s);
                        work += 1;
                        continue;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        work
    }

    /// Tells rejected, redirected and closed clients (once their egress is
    /// up), then closes their egress; gives up on those whose egress does not
    /// come up within the session timeout. Called in every role. Returns work
    /// done.
    pub fn send_rejections(
        &mut self,
        host: &mut dyn SessionHost,
        term: &Term,
        now_ns: i64,
    ) -> usize {
        let mut work = 0;
        let mut i = 0;
        while i < self.rejected.len() {
            let s = &self.rejected[i];
            let (code, detail) = s
                .response
                .clone()
                .unwrap_or((event_code::ERROR, String::new()));
            let connected = host.is_egress_connected(s.egress_key);
            if let (Some(up), Some(count)) = (connected, s.final_count) {
                if s.closed_log_position > self.commit_position {
                    // Its close is not committed yet: the count it carries
                    // would not be final (an election could cut the close).
                    i += 1;
                    continue;
                }
                if up {
                    let e = SessionEvent {
                        cluster_session_id: s.id,
                        correlation_id: count,
                        leadership_term_id: term.leadership_term_id,
                        leader_member_id: term.leader_member_id,
                        code: event_code::OK,
                        version: CLIENT_PROTOCOL_VERSION,
                        leader_heartbeat_timeout_ns: self.cfg.leader_heartbeat_timeout_ns,
                        detail: MESSAGES_COMMITTED_AT_CLOSE.to_string(),
                    };
                    if !host.send_egress(s.egress_key, &e.encode()) {
                        i += 1;
                        continue;
                    }
                    self.rejected[i].final_count = None;
                }
            }
            let s = &self.rejected[i];
            let done = match connected {
                Some(true) => send_event(host, s, term, &self.cfg, code, &detail),
                Some(false) => s.has_timed_out(now_ns, self.cfg.session_timeout_ns),
                None => true,
            };
            if done {
                let s = self.rejected.swap_remove(i);
                host.close_egress(s.egress_key);
                work += 1;
            } else {
                i += 1;
            }
        }
        work
    }

    /// Ingress from session `id` in term `leadership_term_id`: true if it is
    /// to be sequenced (the session is open and the client is in this term;
    /// anything else is dropped, as Aeron does). Call
    /// [`SessionManager::touch`] once it is appended.
    pub fn accepts_message(&self, id: i64, leadership_term_id: i64, term: &Term) -> bool {
        leadership_term_id == term.leadership_term_id
            && self.sessions.get(&id).is_some_and(|s| s.is_open())
    }

    /// Leader: message `number` (the client's, from 1) of open session `id`:
    /// whether it is the session's next, one the log holds, or one after a
    /// gap (the session then closes, its client told why). Only a client
    /// that numbers its messages (a timestamp above 0 in its header) is
    /// asked about; Aeron's client sends none and is sequenced as it sends.
    pub fn number_message(&mut self, id: i64, number: i64) -> MessageNumber {
        let Some(s) = self.sessions.get_mut(&id).filter(|s| s.is_open()) else {
            return MessageNumber::Unknown;
        };
        s.numbered = true;
        s.count_at_close = true;
        let next = s.messages_in_log + 1;
        if number < next {
            self.duplicates += 1;
            MessageNumber::Duplicate
        } else if number == next {
            MessageNumber::Next
        } else {
            // Closed as TIMEOUT (the client's messages stopped reaching
            // the cluster), so counted with the sessions closed for silence.
            s.closing(close_reason::TIMEOUT);
            self.timed_out += 1;
            s.close_detail = Some(format!(
                "message {number} of session {id} came when the log holds {} of its messages: {} never reached the cluster",
                s.messages_in_log,
                if number - next == 1 {
                    format!("message {next}")
                } else {
                    format!("messages {next} to {}", number - 1)
                }
            ));
            MessageNumber::Gap
        }
    }

    /// Leader: a message of session `id` was appended, ending at `position`.
    pub fn on_message_appended(&mut self, id: i64, position: i64) {
        if let Some(s) = self.sessions.get_mut(&id) {
            s.messages_in_log += 1;
            self.uncommitted_messages.push_back((position, id));
        }
    }

    /// A message of session `id` ending at `position` was applied from the
    /// log (a follower, a replay) with the log committed to `commit_position`.
    pub fn on_message_in_log(&mut self, id: i64, position: i64, commit_position: i64) {
        if let Some(s) = self.sessions.get_mut(&id) {
            s.messages_in_log += 1;
            if position <= commit_position {
                s.messages_committed += 1;
            } else {
                self.uncommitted_messages.push_back((position, id));
            }
        }
    }

    /// Messages up to `commit_position` are committed.
    pub fn commit_messages(&mut self, commit_position: i64) {
        self.commit_position = self.commit_position.max(commit_position);
        while let Some(&(position, id)) = self.uncommitted_messages.front() {
            if position > commit_position {
                break;
            }
            self.uncommitted_messages.pop_front();
            if let Some(s) = self.sessions.get_mut(&id) {
                s.messages_committed += 1;
            }
        }
    }

    /// Numbered messages dropped because the log held them (resends).
    pub fn duplicate_count(&self) -> u64 {
        self.duplicates
    }

    /// Leader: tells each client that numbers its messages how many of them
    /// are committed, when that rose (a SessionEvent OK whose correlation id
    /// is the count, detail [`MESSAGES_COMMITTED`]): it may forget them.
    pub fn send_message_acks(&mut self, host: &mut dyn SessionHost, term: &Term) -> usize {
        let mut work = 0;
        for s in self.sessions.values_mut() {
            if !s.is_open() || !s.numbered || s.messages_committed <= s.messages_acked {
                continue;
            }
            let e = SessionEvent {
                cluster_session_id: s.id,
                correlation_id: s.messages_committed,
                leadership_term_id: term.leadership_term_id,
                leader_member_id: term.leader_member_id,
                code: event_code::OK,
                version: CLIENT_PROTOCOL_VERSION,
                leader_heartbeat_timeout_ns: self.cfg.leader_heartbeat_timeout_ns,
                detail: MESSAGES_COMMITTED.to_string(),
            };
            if host.send_egress(s.egress_key, &e.encode()) {
                s.messages_acked = s.messages_committed;
                work += 1;
            }
        }
        work
    }

    /// Session `id` was heard from.
    pub fn touch(&mut self, id: i64, now_ns: i64) {
        if let Some(s) = self.sessions.get_mut(&id) {
            s.time_of_last_activity_ns = now_ns;
        }
    }

    /// A SessionKeepAlive: refreshes an open session of this term (not logged).
    pub fn on_keep_alive(
        &mut self,
        id: i64,
        leadership_term_id: i64,
        term: &Term,
        now_ns: i64,
    ) -> bool {
        if !self.accepts_message(id, leadership_term_id, term) {
            return false;
        }
        self.touch(id, now_ns);
        true
    }

    /// A SessionCloseRequest: the leader logs the close (CLIENT_ACTION; the
    /// client asked, so it is not sent CLOSED).
    pub fn on_session_close_request(
        &mut self,
        host: &mut dyn SessionHost,
        id: i64,
        term: &Term,
        now_ns: i64,
        cluster_time: i64,
    ) {
        let Some(s) = self.sessions.get_mut(&id) else {
            return;
        };
        if !s.is_open() {
            return;
        }
        s.closing(close_reason::CLIENT_ACTION);
        host.close_egress(s.egress_key);
        self.append_close(host, id, term, now_ns, cluster_time, false);
    }

    /// What session `id`'s client is told with its CLOSED instead of the
    /// close reason's name (an open session only).
    pub fn set_close_detail(&mut self, id: i64, detail: String) {
        if let Some(s) = self.sessions.get_mut(&id).filter(|s| s.is_open()) {
            s.close_detail = Some(detail);
        }
    }

    /// A service closed session `id`: the leader logs it (SERVICE_ACTION)
    /// and tells the client; a follower marks it closing (the leader's
    /// close comes through the log).
    pub fn on_service_close_session(
        &mut self,
        host: &mut dyn SessionHost,
        id: i64,
        is_active_leader: bool,
        term: &Term,
        now_ns: i64,
        cluster_time: i64,
    ) {
        let Some(s) = self.sessions.get_mut(&id) else {
            return;
        };
        s.closing(close_reason::SERVICE_ACTION);
        if is_active_leader {
            self.append_close(host, id, term, now_ns, cluster_time, true);
        }
    }

    /// Appends session `id`'s close; once in the log the session leaves the
    /// open set (kept until committed in case an election rolls it back).
    fn append_close(
        &mut self,
        host: &mut dyn SessionHost,
        id: i64,
        term: &Term,
        now_ns: i64,
        cluster_time: i64,
        tell_client: bool,
    ) -> bool {
        let s = &self.sessions[&id];
        let reason = s.close_reason.unwrap_or(close_reason::CLIENT_ACTION);
        let close = SessionCloseEvent {
            leadership_term_id: term.leadership_term_id,
            cluster_session_id: id,
            timestamp: cluster_time,
            close_reason: reason,
        };
        let Some(position) = host.append_to_log(&close.encode()) else {
            return false;
        };
        let mut s = self.sessions.remove(&id).expect("present");
        s.closed_log_position = position;
        s.state = SessionState::Closed;
        if tell_client {
            // Told like a rejection: once its egress is up (a new leader may
            // have only just connected it), within the session timeout.
            let mut notice = s.clone();
            notice.time_of_last_activity_ns = now_ns;
            let detail = s
                .close_detail
                .clone()
                .unwrap_or_else(|| close_reason_name(reason).to_string());
            notice.response = Some((event_code::CLOSED, detail));
            // Every message of the session lies before its close in the
            // log: once the close is committed, so are they, and no more
            // will be. A client that numbers its messages is told how many
            // (before the CLOSED, once the close is committed), so none of
            // what it sent is of unknown outcome.
            if s.count_at_close {
                notice.final_count = Some(s.messages_in_log);
            }
            self.rejected.push(notice);
        } else {
            host.close_egress(s.egress_key);
        }
        self.uncommitted_closed.push_back(s);
        true
    }

    /// Leader: times out silent sessions, logs the closes still due, and
    /// sends the OKs and NewLeaderEvents still owed. Returns work done.
    pub fn check_sessions(
        &mut self,
        host: &mut dyn SessionHost,
        term: &Term,
        now_ns: i64,
        cluster_time: i64,
    ) -> usize {
        let mut work = 0;
        // One pass over every session for the time-outs and what is owed;
        // the lookups and sends only for those (with a thousand quiet
        // sessions, collecting every id each duty cycle was most of it).
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        let timeout_ns = self.cfg.session_timeout_ns;
        for (&id, s) in self.sessions.iter_mut() {
            if s.is_open() && s.has_timed_out(now_ns, timeout_ns) {
                s.closing(close_reason::TIMEOUT);
                self.timed_out += 1;
            }
            if s.state == SessionState::Closing
                || (s.is_open() && (s.has_open_event_pending || s.has_new_leader_event_pending))
            {
                due.push(id);
            }
        }
        for &id in &due {
            let s = &self.sessions[&id];
            if s.state == SessionState::Closing {
                let tell = s.close_reason != Some(close_reason::CLIENT_ACTION);
                if self.append_close(host, id, term, now_ns, cluster_time, tell) {
                    work += 1;
                }
            } else if s.is_open() && s.has_open_event_pending {
                if send_event(host, s, term, &self.cfg, event_code::OK, EXACTLY_ONCE) {
                    self.session_mut(id).has_open_event_pending = false;
                    work += 1;
                }
            } else if s.is_open()
                && s.has_new_leader_event_pending
                && host.is_egress_connected(s.egress_key) == Some(true)
            {
                let m = NewLeaderEvent {
                    leadership_term_id: term.leadership_term_id,
                    cluster_session_id: id,
                    leader_member_id: term.leader_member_id,
                    ingress_endpoints: term.ingress_endpoints.clone(),
                };
                if host.send_egress(s.egress_key, &m.encode()) {
                    self.session_mut(id).has_new_leader_event_pending = false;
                    work += 1;
                }
            }
        }
        self.due = due;
        work
    }

    fn session_mut(&mut self, id: i64) -> &mut ClusterSession {
        self.sessions.get_mut(&id).expect("a listed session")
    }

    /// Follower (or replay): the log opened session `id`.
    pub fn on_replay_session_open(
        &mut self,
        log_position: i64,
        correlation_id: i64,
        id: i64,
        activity_ns: i64,
        response_stream_id: i32,
        response_channel: &str,
    ) {
        let key = self.next_egress_key;
        self.next_egress_key += 1;
        let mut s = ClusterSession::new(
            id,
            key,
            correlation_id,
            response_stream_id,
            response_channel,
            activity_ns,
        );
        s.state = SessionState::Open;
        s.opened_log_position = log_position;
        self.sessions.insert(id, s);
        self.next_session_id = self.next_session_id.max(id + 1);
        self.next_committed_session_id = self.next_committed_session_id.max(id + 1);
    }

    /// Follower (or replay): the log closed session `id`.
    pub fn on_replay_session_close(&mut self, id: i64, reason: i32) {
        if let Some(mut s) = self.sessions.remove(&id) {
            s.closing(reason);
        }
    }

    /// A snapshot's session.
    pub fn on_load_session(&mut self, snap: &SessionSnapshot) {
        self.on_replay_session_open(
            snap.opened_log_position,
            snap.correlation_id,
            snap.id,
            snap.time_of_last_activity_ns,
            snap.response_stream_id,
            &snap.response_channel,
        );
        let s = self.sessions.get_mut(&snap.id).expect("loaded");
        s.messages_in_log = snap.messages_in_log;
        s.messages_committed = snap.messages_in_log;
        if let Some(reason) = snap.close_reason {
            self.sessions
                .get_mut(&snap.id)
                .expect("loaded")
                .closing(reason);
        }
    }

    /// A snapshot's next session id.
    pub fn load_next_session_id(&mut self, next_session_id: i64) {
        self.next_session_id = next_session_id;
        self.next_committed_session_id = next_session_id;
    }

    /// The open and closing sessions for a snapshot, by id.
    pub fn snapshot(&self) -> Vec<SessionSnapshot> {
        self.sessions
            .values()
            .filter(|s| matches!(s.state, SessionState::Open | SessionState::Closing))
            .map(|s| SessionSnapshot {
                id: s.id,
                correlation_id: s.correlation_id,
                opened_log_position: s.opened_log_position,
                time_of_last_activity_ns: s.time_of_last_activity_ns,
                close_reason: if s.state == SessionState::Closing {
                    s.close_reason
                } else {
                    None
                },
                response_stream_id: s.response_stream_id,
                response_channel: s.response_channel.clone(),
                messages_in_log: s.messages_in_log,
            })
            .collect()
    }

    /// A new term begins with this member as leader. After a restart
    /// (`is_startup`) the sessions from the log cannot be taken over (their
    /// clients' egress is not known to be there): they are closed, and each
    /// client is told CLOSED if its egress can be reached. Otherwise each
    /// open session's egress is connected and it is sent a NewLeaderEvent.
    pub fn prepare_for_new_term(
        &mut self,
        host: &mut dyn SessionHost,
        is_startup: bool,
        now_ns: i64,
    ) {
        for s in self.sessions.values_mut() {
            if s.state != SessionState::Open {
                continue;
            }
            host.connect_egress(s.egress_key, &s.response_channel, s.response_stream_id);
            s.time_of_last_activity_ns = now_ns;
            // This leader has told the client nothing yet: its first
            // numbered message (a resend) makes it send the committed count,
            // which may cover all the client still keeps.
            s.messages_acked = 0;
            s.numbered = false;
            // Whether its client numbers its messages is not in the log: a
            // close is told the final count either way (an OK Aeron's client
            // passes to its listener, and ignores).
            s.count_at_close = true;
            if is_startup {
                s.closing(close_reason::TIMEOUT);
            } else {
                s.has_new_leader_event_pending = true;
            }
        }
    }

    /// Leaving leadership: every session's egress is closed (the next
    /// leader reconnects them) and pending clients are dropped (they time
    /// out and connect again); answers already due are still sent.
    pub fn disconnect_sessions(&mut self, host: &mut dyn SessionHost) {
        for s in self.sessions.values_mut() {
            host.close_egress(s.egress_key);
            s.has_new_leader_event_pending = false;
            s.has_open_event_pending = false;
        }
        for s in self.pending.drain(..) {
            host.close_egress(s.egress_key);
            self.dropped.push(s.id);
        }
        self.decisions.clear();
    }

    /// An election cut the log back to `log_position`: sessions opened after
    /// it never existed; their clients (and those still pending) are told
    /// CLOSED ("election").
    pub fn clear_sessions_after(
        &mut self,
        host: &mut dyn SessionHost,
        log_position: i64,
        now_ns: i64,
    ) {
        let gone: Vec<i64> = self
            .sessions
            .values()
            .filter(|s| s.opened_log_position > log_position)
            .map(|s| s.id)
            .collect();
        for id in gone {
            let mut s = self.sessions.remove(&id).expect("listed");
            s.state = SessionState::Closed;
            host.connect_egress(s.egress_key, &s.response_channel, s.response_stream_id);
            s.time_of_last_activity_ns = now_ns;
            s.response = Some((event_code::CLOSED, "election".to_string()));
            self.rejected.push(s);
        }
        for mut s in self.pending.drain(..) {
            self.dropped.push(s.id);
            s.time_of_last_activity_ns = now_ns;
            s.response = Some((event_code::CLOSED, "election".to_string()));
            self.rejected.push(s);
        }
        self.decisions.clear();
    }

    /// The log is committed to `commit_position`: closes and opens up to it
    /// can no longer be rolled back.
    pub fn sweep_uncommitted(&mut self, commit_position: i64) {
        while self
            .uncommitted_closed
            .front()
            .is_some_and(|s| s.closed_log_position <= commit_position)
        {
            self.uncommitted_closed.pop_front();
        }
        while let Some(&(position, next)) = self.uncommitted_next_committed.front() {
            if position > commit_position {
                break;
            }
            self.uncommitted_next_committed.pop_front();
            self.next_committed_session_id = self.next_committed_session_id.max(next);
        }
        self.commit_messages(commit_position);
    }

    /// Leadership lost with the log committed to `commit_position`: closes
    /// after it are undone (the sessions are closing again, for the next
    /// leader to log), and ids handed out after it are taken back.
    pub fn restore_uncommitted(&mut self, commit_position: i64) {
        while let Some(mut s) = self.uncommitted_closed.pop_front() {
            if s.closed_log_position > commit_position {
                s.closed_log_position = NULL_POSITION;
                s.state = SessionState::Closing;
                self.sessions.insert(s.id, s);
            }
        }
        // Messages after it leave the count (a replay of what stays counts them again).
        while let Some(&(position, id)) = self.uncommitted_messages.back() {
            if position <= commit_position {
                break;
            }
            self.uncommitted_messages.pop_back();
            if let Some(s) = self.sessions.get_mut(&id) {
                s.messages_in_log -= 1;
            }
        }
        self.sweep_uncommitted(commit_position);
        self.uncommitted_next_committed.clear();
    }

    /// After a snapshot (a pause for every member), no session has timed out.
    pub fn update_time_of_last_activity(&mut self, now_ns: i64) {
        for s in self.sessions.values_mut() {
            s.time_of_last_activity_ns = now_ns;
        }
    }

    /// Ingress image `image_correlation_id` went away: its open sessions
    /// close at the next check (TIMEOUT), as Aeron does.
    pub fn on_unavailable_ingress_image(&mut self, image_correlation_id: i64) {
        for s in self.sessions.values_mut() {
            if s.ingress_image_correlation_id == image_correlation_id && s.is_open() {
                s.closing(close_reason::TIMEOUT);
            }
        }
    }
}

fn send_event(
    host: &mut dyn SessionHost,
    s: &ClusterSession,
    term: &Term,
    cfg: &SessionConfig,
    code: i32,
    detail: &str,
) -> bool {
    let e = SessionEvent {
        cluster_session_id: s.id,
        correlation_id: s.correlation_id,
        leadership_term_id: term.leadership_term_id,
        leader_member_id: term.leader_member_id,
        code,
        version: CLIENT_PROTOCOL_VERSION,
        leader_heartbeat_timeout_ns: cfg.leader_heartbeat_timeout_ns,
        detail: detail.to_string(),
    };
    host.send_egress(s.egress_key, &e.encode())
}

/// Aeron's CloseReason names, the detail of a CLOSED event.
pub fn close_reason_name(reason: i32) -> &'static str {
    match reason {
        close_reason::CLIENT_ACTION => "CLIENT_ACTION",
        close_reason::SERVICE_ACTION => "SERVICE_ACTION",
        close_reason::TIMEOUT => "TIMEOUT",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sulis_archive::auth::{AllowAll, CredentialsAuthenticator};

    const MS: i64 = 1_000_000;
    const TIMEOUT_NS: i64 = 10_000 * MS;

    #[derive(Default)]
    struct Egress {
        connected: bool,
        sent: Vec<Vec<u8>>,
        closed: bool,
        connects: usize,
    }

    /// Egress publications that connect when told, and a log that takes
    /// entries unless back-pressured.
    #[derive(Default)]
    struct FakeHost {
        egress: BTreeMap<u64, Egress>,
        log: Vec<Vec<u8>>,
        position: i64,
        back_pressured: bool,
        egress_full: bool,
    }

    impl FakeHost {
        fn connect_all(&mut self) {
            for e in self.egress.values_mut() {
                e.connected = true;
            }
        }
        fn events(&self, key: u64) -> Vec<SessionEvent> {
            self.egress[&key]
                .sent
                .iter()
                .filter_map(|m| SessionEvent::decode(m).ok())
                .collect()
        }
    }

    impl SessionHost for FakeHost {
        fn connect_egress(&mut self, key: u64, _channel: &str, _stream_id: i32) {
            let e = self.egress.entry(key).or_default();
            if e.closed {
                *e = Egress::default();
            }
            e.connects += 1;
        }
        fn is_egress_connected(&mut self, key: u64) -> Option<bool> {
            self.egress.get(&key).map(|e| e.connected && !e.closed)
        }
        fn send_egress(&mut self, key: u64, message: &[u8]) -> bool {
            let full = self.egress_full;
            match self.egress.get_mut(&key) {
                Some(e) if e.connected && !e.closed && !full => {
                    e.sent.push(message.to_vec());
                    true
                }
                _ => false,
            }
        }
        fn close_egress(&mut self, key: u64) {
            if let Some(e) = self.egress.get_mut(&key) {
                e.closed = true;
            }
        }
        fn append_to_log(&mut self, entry: &[u8]) -> Option<i64> {
            if self.back_pressured {
                return None;
            }
            self.log.push(entry.to_vec());
            self.position += (32 + entry.len() as i64 + 31) & !31;
            Some(self.position)
        }
    }

    fn config() -> SessionConfig {
        SessionConfig {
            member_id: 0,
            session_timeout_ns: TIMEOUT_NS,
            max_concurrent_sessions: 3,
            leader_heartbeat_timeout_ns: 10_000 * MS,
        }
    }

    fn term() -> Term {
        Term {
            leadership_term_id: 4,
            leader_member_id: 0,
            ingress_endpoints: "0=h0:9000,1=h1:9000,2=h2:9000".into(),
        }
    }

    fn request(correlation_id: i64) -> ConnectRequest {
        ConnectRequest {
            correlation_id,
            response_stream_id: 102,
            version: CLIENT_PROTOCOL_VERSION,
            response_channel: "aeron:udp?endpoint=client:9010".into(),
            encoded_credentials: Vec::new(),
            ingress_image_correlation_id: 77,
        }
    }

    /// A leader's session through connect, open, messages and a timeout.
    fn open_one(m: &mut SessionManager, host: &mut FakeHost, now_ns: i64) -> i64 {
        let id = m.next_session_id();
        m.on_session_connect(
            host,
            &mut AllowAll,
            &request(100 + id),
            true,
            &term(),
            now_ns,
        );
        host.connect_all();
        m.process_pending(host, &term(), now_ns, now_ns / MS);
        assert!(m.session(id).is_some_and(|s| s.is_open()));
        id
    }

    #[test]
    fn a_leader_opens_a_session_once_its_egress_connects_and_logs_the_open_before_saying_ok() {
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        m.on_session_connect(&mut host, &mut AllowAll, &request(55), true, &term(), 0);
        assert_eq!(m.pending_count(), 1);
        assert_eq!(
            m.process_pending(&mut host, &term(), MS, 1),
            0,
            "egress not up yet"
        );
        assert!(host.log.is_empty());
        host.connect_all();
        m.process_pending(&mut host, &term(), 2 * MS, 2);
        let open = SessionOpenEvent::decode(&host.log[0]).expect("open in the log");
        assert_eq!(
            (
                open.cluster_session_id,
                open.correlation_id,
                open.leadership_term_id,
                open.timestamp
            ),
            (1, 55, 4, 2)
        );
        assert_eq!(open.response_channel, "aeron:udp?endpoint=client:9010");
        let key = m.session(1).expect("open").egress_key;
        let ok = &host.events(key)[0];
        assert_eq!(
            (ok.code, ok.cluster_session_id, ok.correlation_id),
            (event_code::OK, 1, 55)
        );
        assert_eq!(ok.leader_heartbeat_timeout_ns, 10_000 * MS);
        assert_eq!(
            m.session(1).expect("open").opened_log_position,
            host.position
        );
        // Messages: only from an open session in this term.
        assert!(m.accepts_message(1, 4, &term()));
        assert!(
            !m.accepts_message(1, 3, &term()),
            "an old term's message is dropped"
        );
        assert!(!m.accepts_message(2, 4, &term()), "no such session");
        // The next one gets id 2.
        assert_eq!(m.next_session_id(), 2);
    }

    #[test]
    fn a_silent_session_times_out_is_logged_closed_and_its_client_told() {
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        let id = open_one(&mut m, &mut host, 0);
        let key = m.session(id).expect("open").egress_key;
        // A keep-alive at 9 s keeps it past 10 s.
        assert!(m.on_keep_alive(id, 4, &term(), 9_000 * MS));
        assert!(!m.on_keep_alive(id, 3, &term(), 9_000 * MS), "wrong term");
        m.check_sessions(&mut host, &term(), 18_000 * MS, 18_000);
        assert!(m.session(id).is_some());
        m.check_sessions(&mut host, &term(), 19_000 * MS + 1, 19_000);
        assert!(m.session(id).is_none());
        let close =
            SessionCloseEvent::decode(host.log.last().expect("close")).expect("close event");
        assert_eq!(
            (close.cluster_session_id, close.close_reason),
            (id, close_reason::TIMEOUT)
        );
        assert_eq!(m.timed_out_count(), 1);
        m.send_rejections(&mut host, &term(), 19_000 * MS + 2);
        let closed = host.events(key).pop().expect("CLOSED");
        assert_eq!(
            (closed.code, closed.detail.as_str()),
            (event_code::CLOSED, "TIMEOUT")
        );
        assert!(host.egress[&key].closed);
    }

    #[test]
    fn a_follower_redirects_to_the_leader_and_a_leader_refuses_other_versions_and_too_many() {
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        let mut t = term();
        t.leader_member_id = 2;
        m.on_session_connect(&mut host, &mut AllowAll, &request(1), false, &t, 0);
        let mut old = request(2);
        old.version = sulis_protocol::sbe::semantic_version(1, 0, 0);
        m.on_session_connect(&mut host, &mut AllowAll, &old, true, &t, 0);
        for c in 3..7 {
            m.on_session_connect(&mut host, &mut AllowAll, &request(c), true, &t, 0);
        }
        assert_eq!(m.pending_count(), 3, "the limit is 3");
        assert_eq!(
            m.send_rejections(&mut host, &t, MS),
            0,
            "nobody's egress is up"
        );
        host.connect_all();
        assert_eq!(m.send_rejections(&mut host, &t, MS), 3);
        let answers: Vec<(i32, String, i64, i32)> = host
            .egress
            .values()
            .flat_map(|e| e.sent.iter())
            .filter_map(|b| SessionEvent::decode(b).ok())
            .map(|e| (e.code, e.detail, e.correlation_id, e.leader_member_id))
            .collect();
        assert!(answers.contains(&(event_code::REDIRECT, t.ingress_endpoints.clone(), 1, 2)));
        assert!(answers.contains(&(
            event_code::ERROR,
            "invalid client version 1.0.0, cluster is 0.3.0".into(),
            2,
            2
        )));
        assert!(answers.contains(&(event_code::ERROR, SESSION_LIMIT_MSG.into(), 6, 2)));
        assert_eq!(m.send_rejections(&mut host, &t, MS), 0, "each is told once");
    }

    #[test]
    fn a_rejected_client_whose_egress_never_comes_is_given_up_after_the_session_timeout() {
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        m.on_session_connect(&mut host, &mut AllowAll, &request(1), false, &term(), 0);
        assert_eq!(m.send_rejections(&mut host, &term(), TIMEOUT_NS), 0);
        assert_eq!(m.send_rejections(&mut host, &term(), TIMEOUT_NS + 1), 1);
        assert!(host.egress.values().all(|e| e.closed && e.sent.is_empty()));
    }

    #[test]
    fn a_challenge_is_sent_and_only_the_right_answer_opens_the_session() {
        let mut auth = CredentialsAuthenticator {
            credentials: vec![b"alice".to_vec()],
            challenge: Some(b"who?".to_vec()),
            challenge_response: b"me".to_vec(),
        };
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        let mut good = request(10);
        good.encoded_credentials = b"alice".to_vec();
        let mut bad = request(11);
        bad.encoded_credentials = b"mallory".to_vec();
        m.on_session_connect(&mut host, &mut auth, &good, true, &term(), 0);
        m.on_session_connect(&mut host, &mut auth, &bad, true, &term(), 0);
        host.connect_all();
        m.process_pending(&mut host, &term(), MS, 1);
        assert!(host.log.is_empty(), "nothing open yet");
        let challenge = host.egress[&1]
            .sent
            .iter()
            .find_map(|b| Challenge::decode(b).ok())
            .expect("challenge sent to alice");
        assert_eq!(
            (
                challenge.cluster_session_id,
                challenge.encoded_challenge.as_slice()
            ),
            (1, &b"who?"[..])
        );
        m.send_rejections(&mut host, &term(), MS);
        let refused = host.events(2).pop().expect("mallory told");
        assert_eq!(
            (refused.code, refused.detail.as_str()),
            (event_code::AUTHENTICATION_REJECTED, SESSION_REJECTED_MSG)
        );
        // A wrong session id or a wrong answer: no open.
        m.on_challenge_response(&mut auth, 12, 9, b"me", 77, 2 * MS);
        m.on_challenge_response(&mut auth, 12, 1, b"you", 77, 2 * MS);
        m.process_pending(&mut host, &term(), 2 * MS, 2);
        assert!(host.log.is_empty());
        m.send_rejections(&mut host, &term(), 2 * MS);
        assert_eq!(
            host.events(1).pop().expect("alice refused").code,
            event_code::AUTHENTICATION_REJECTED
        );

        // Again, answered right.
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        m.on_session_connect(&mut host, &mut auth, &good, true, &term(), 0);
        host.connect_all();
        m.process_pending(&mut host, &term(), MS, 1);
        // From another ingress image than its connect's (a forger: session ids are sequential), even a
        // wrong answer neither refuses the client nor spends its challenge.
        m.on_challenge_response(&mut auth, 14, 1, b"you", 99, 2 * MS);
        m.process_pending(&mut host, &term(), 2 * MS, 2);
        m.send_rejections(&mut host, &term(), 2 * MS);
        assert!(host.log.is_empty() && host.events(1).is_empty());
        m.on_challenge_response(&mut auth, 13, 1, b"me", 77, 2 * MS);
        m.process_pending(&mut host, &term(), 2 * MS, 2);
        let open = SessionOpenEvent::decode(&host.log[0]).expect("open");
        assert_eq!(
            (open.correlation_id, open.encoded_principal.as_slice()),
            (13, &b"alice"[..])
        );
        assert_eq!(
            host.events(1)[0].correlation_id,
            13,
            "OK answers the challenge response"
        );
    }

    #[test]
    fn a_challenged_session_that_times_out_is_handed_to_the_authenticator_to_forget() {
        let mut auth = sulis_archive::auth::KeyedChallengeAuthenticator::new([(
            b"alice".to_vec(),
            b"a secret of thirty-two bytes....".to_vec(),
        )]);
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        let mut alice = request(10);
        alice.encoded_credentials = b"alice".to_vec();
        m.on_session_connect(&mut host, &mut auth, &alice, true, &term(), 0);
        host.connect_all();
        m.process_pending(&mut host, &term(), MS, 1);
        assert!(host.egress[&1]
            .sent
            .iter()
            .any(|b| Challenge::decode(b).is_ok()));
        assert!(m.take_dropped().is_empty());
        m.process_pending(&mut host, &term(), TIMEOUT_NS + 2 * MS, 2);
        assert_eq!(m.pending_count(), 0);
        assert_eq!(m.take_dropped(), vec![1]);
        assert!(m.take_dropped().is_empty(), "handed over once");
    }

    #[test]
    fn back_pressure_delays_the_open_and_the_close_until_the_log_takes_them() {
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        m.on_session_connect(&mut host, &mut AllowAll, &request(1), true, &term(), 0);
        host.connect_all();
        host.back_pressured = true;
        m.process_pending(&mut host, &term(), MS, 1);
        assert_eq!(m.pending_count(), 1);
        host.back_pressured = false;
        host.egress_full = true;
        m.process_pending(&mut host, &term(), 2 * MS, 2);
        assert!(
            m.session(1).expect("open").has_open_event_pending,
            "OK could not go"
        );
        host.egress_full = false;
        m.check_sessions(&mut host, &term(), 3 * MS, 3);
        assert_eq!(host.events(1)[0].code, event_code::OK);
        // A close request while back-pressured is logged at the next check.
        host.back_pressured = true;
        m.on_session_close_request(&mut host, 1, &term(), 4 * MS, 4);
        assert_eq!(m.session(1).expect("closing").state, SessionState::Closing);
        assert!(!m.accepts_message(1, 4, &term()));
        host.back_pressured = false;
        m.check_sessions(&mut host, &term(), 5 * MS, 5);
        assert!(m.session(1).is_none());
        let close = SessionCloseEvent::decode(host.log.last().expect("close")).expect("close");
        assert_eq!(close.close_reason, close_reason::CLIENT_ACTION);
        m.send_rejections(&mut host, &term(), 6 * MS);
        assert_eq!(
            host.events(1).len(),
            1,
            "a client that asked to close is not sent CLOSED"
        );
    }

    #[test]
    fn closes_after_the_commit_position_are_undone_when_leadership_is_lost() {
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        let a = open_one(&mut m, &mut host, 0);
        let b = open_one(&mut m, &mut host, 0);
        let committed = host.position;
        m.sweep_uncommitted(committed);
        assert_eq!(m.next_committed_session_id(), 3);
        m.on_session_close_request(&mut host, a, &term(), MS, 1);
        let c = open_one(&mut m, &mut host, 2 * MS);
        assert_eq!(
            m.next_committed_session_id(),
            3,
            "c's open is not committed"
        );
        m.restore_uncommitted(committed);
        let restored = m.session(a).expect("a's close was not committed");
        assert_eq!(
            (restored.state, restored.closed_log_position),
            (SessionState::Closing, NULL_POSITION)
        );
        assert!(m.session(b).is_some_and(|s| s.is_open()));
        assert!(
            m.session(c).is_some(),
            "c is cut by the election (clear_sessions_after), not here"
        );
        assert_eq!(m.next_committed_session_id(), 3);
        // Committed closes stay closed.
        let mut m2 = SessionManager::new(config());
        let mut host2 = FakeHost::default();
        let d = open_one(&mut m2, &mut host2, 0);
        m2.on_session_close_request(&mut host2, d, &term(), MS, 1);
        m2.sweep_uncommitted(host2.position);
        m2.restore_uncommitted(host2.position);
        assert!(m2.session(d).is_none());
    }

    #[test]
    fn sessions_opened_in_a_cut_tail_are_closed_and_their_clients_told() {
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        let kept = open_one(&mut m, &mut host, 0);
        let cut_at = host.position;
        let cut = open_one(&mut m, &mut host, 0);
        m.on_session_connect(&mut host, &mut AllowAll, &request(9), true, &term(), 0);
        m.clear_sessions_after(&mut host, cut_at, MS);
        assert!(m.session(kept).is_some() && m.session(cut).is_none());
        assert_eq!(m.pending_count(), 0);
        host.connect_all();
        m.send_rejections(&mut host, &term(), 2 * MS);
        let key = 2;
        let told = host.events(key).pop().expect("cut session told");
        assert_eq!(
            (told.code, told.detail.as_str()),
            (event_code::CLOSED, "election")
        );
        assert_eq!(
            host.events(3).pop().expect("pending told").code,
            event_code::CLOSED
        );
    }

    #[test]
    fn a_new_leader_takes_sessions_over_and_after_a_restart_closes_them_telling_each_client() {
        // A follower learns sessions from the log, then wins an election.
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        m.on_replay_session_open(96, 5, 7, 0, 102, "aeron:udp?endpoint=client:9010");
        m.on_replay_session_open(192, 6, 8, 0, 102, "aeron:udp?endpoint=client:9011");
        m.on_replay_session_close(8, close_reason::CLIENT_ACTION);
        assert_eq!(m.next_session_id(), 9);
        assert!(host.egress.is_empty(), "a follower connects no egress");
        m.prepare_for_new_term(&mut host, false, 50 * MS);
        let key = m.session(7).expect("taken over").egress_key;
        assert_eq!(
            m.check_sessions(&mut host, &term(), 51 * MS, 51),
            0,
            "egress not up"
        );
        host.connect_all();
        m.check_sessions(&mut host, &term(), 52 * MS, 52);
        let e = NewLeaderEvent::decode(&host.egress[&key].sent[0]).expect("NewLeaderEvent");
        assert_eq!(
            (
                e.cluster_session_id,
                e.leadership_term_id,
                e.leader_member_id
            ),
            (7, 4, 0)
        );
        assert_eq!(e.ingress_endpoints, term().ingress_endpoints);
        m.check_sessions(&mut host, &term(), 53 * MS, 53);
        assert_eq!(host.egress[&key].sent.len(), 1, "sent once");

        // After a restart: closed, logged, and the client told once its egress is up.
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        m.on_replay_session_open(96, 5, 7, 0, 102, "aeron:udp?endpoint=client:9010");
        m.on_message_in_log(7, 150, 150);
        m.on_message_in_log(7, 200, 150);
        m.prepare_for_new_term(&mut host, true, 50 * MS);
        m.check_sessions(&mut host, &term(), 51 * MS, 51);
        let close = SessionCloseEvent::decode(&host.log[0]).expect("close logged");
        assert_eq!(
            (close.cluster_session_id, close.close_reason),
            (7, close_reason::TIMEOUT)
        );
        let key = *host.egress.keys().next().expect("egress");
        m.send_rejections(&mut host, &term(), 52 * MS);
        assert!(host.egress[&key].sent.is_empty());
        host.connect_all();
        m.send_rejections(&mut host, &term(), 60 * MS);
        assert!(
            host.egress[&key].sent.is_empty(),
            "the close carries the session's final count: told once it is committed"
        );
        m.commit_messages(1 << 40);
        m.send_rejections(&mut host, &term(), 61 * MS);
        let events = host.events(key);
        assert_eq!(
            events
                .iter()
                .map(|e| (
                    e.code,
                    e.cluster_session_id,
                    e.correlation_id,
                    e.detail.as_str()
                ))
                .collect::<Vec<_>>()[..1],
            [(event_code::OK, 7, 2, MESSAGES_COMMITTED_AT_CLOSE)],
            "both messages in the log are the session's for good"
        );
        let told = events
            .last()
            .expect("CLOSED after a restart (Aeron #1397 leaves it silent)");
        assert_eq!(
            (told.code, told.cluster_session_id, events.len()),
            (event_code::CLOSED, 7, 2)
        );
    }

    #[test]
    fn a_snapshot_of_sessions_loads_into_the_same_sessions() {
        let mut m = SessionManager::new(config());
        let mut host = FakeHost::default();
        for _ in 0..3 {
            open_one(&mut m, &mut host, 0);
        }
        m.on_service_close_session(&mut host, 2, false, &term(), MS, 1);
        let snap = m.snapshot();
        assert_eq!(snap.iter().map(|s| s.id).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(snap[1].close_reason, Some(close_reason::SERVICE_ACTION));
        let mut loaded = SessionManager::new(config());
        for s in &snap {
            loaded.on_load_session(s);
        }
        loaded.load_next_session_id(m.next_session_id());
        assert_eq!(loaded.snapshot(), snap);
        assert_eq!(loaded.next_session_id(), 4);
        // The image a session connected on goes: it closes.
        m.on_unavailable_ingress_image(77);
        assert!(m.sessions().all(|s| s.state == SessionState::Closing));
    }
}
