//! One client's session with the cluster, as the consensus module keeps it
//! (Aeron's `ClusterSession`): who it is (the cluster session id the leader
//! gave it), where its egress goes (response channel and stream), what it
//! authenticated as, where in the log it was opened and closed, and when it
//! was last heard from.
//!
//! A session moves CONNECTING → CONNECTED (its egress publication is up) →
//! CHALLENGED (optional) → AUTHENTICATED → OPEN (its SessionOpenEvent is in
//! the log) → CLOSING (a close is due but not yet in the log) → CLOSED, or
//! to REJECTED (it is told why, then dropped). The transitions are made by
//! the [`crate::module::session_manager::SessionManager`]; this file holds the state.

use sulis_protocol::cluster::messages::NULL_POSITION;

/// A session's state (Aeron's `ClusterSession.State`, in its order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionState {
    /// Made, nothing started.
    Init,
    /// Its egress publication is being connected.
    Connecting,
    /// Its egress publication is connected; the authenticator decides.
    Connected,
    /// It was sent a challenge and owes an answer.
    Challenged,
    /// Let in; its SessionOpenEvent goes into the log next.
    Authenticated,
    /// Refused; it is told so, then dropped.
    Rejected,
    /// In the log: its messages are sequenced.
    Open,
    /// A close is due but not yet in the log.
    Closing,
    /// Unusable (its egress could not be made).
    Invalid,
    /// Gone.
    Closed,
}

/// One client session.
#[derive(Clone, Debug)]
pub struct ClusterSession {
    /// The cluster session id (−1 for one a follower redirects or the leader
    /// rejects before giving it one).
    pub id: i64,
    /// Which egress publication of the consensus module's is this session's
    /// (unique per manager, unlike `id`, which redirected sessions lack).
    pub egress_key: u64,
    /// Correlation id of the client's last connect or challenge response:
    /// the SessionEvent answering it carries it.
    pub correlation_id: i64,
    /// Egress stream id.
    pub response_stream_id: i32,
    /// Egress channel.
    pub response_channel: String,
    /// What the session authenticated as (its credentials, as the archive's).
    pub encoded_principal: Vec<u8>,
    /// See [`SessionState`].
    pub state: SessionState,
    /// Why it is closing or closed (`close_reason::*`).
    pub close_reason: Option<i32>,
    /// Log position after its SessionOpenEvent ([`NULL_POSITION`] until open).
    pub opened_log_position: i64,
    /// Log position after its SessionCloseEvent ([`NULL_POSITION`] until then).
    pub closed_log_position: i64,
    /// When it was last heard from (ns, the consensus module's clock).
    pub time_of_last_activity_ns: i64,
    /// The ingress image its connect came on (−1 unknown): the session times
    /// out at once when that image goes.
    pub ingress_image_correlation_id: i64,
    /// The SessionEvent a rejected or redirected session is to be sent:
    /// (code, detail).
    pub response: Option<(i32, String)>,
    /// The OK for its open is still to be sent (the egress was full).
    pub has_open_event_pending: bool,
    /// A NewLeaderEvent is to be sent (a new leader took it over).
    pub has_new_leader_event_pending: bool,
    /// How many of its messages the log holds, here (committed or appended
    /// by this leader): a client that numbers its messages (sulis's) has
    /// message n sequenced only as the session's n-th, so a message resent
    /// after a failover is applied once. Deterministic: every member counts
    /// the same log.
    pub messages_in_log: i64,
    /// Of them, how many are committed (what the client may forget).
    pub messages_committed: i64,
    /// The committed count last sent to the client.
    pub messages_acked: i64,
    /// Its client numbers its messages (this leader has seen one numbered):
    /// it is told the committed count as it rises.
    pub numbered: bool,
    /// Said to the client with CLOSED instead of the close reason's name.
    pub close_detail: Option<String>,
    /// Its client is told, with the CLOSED, how many of its messages the
    /// log holds for good (its client numbered a message, or the session
    /// is closed at a restarted leader's start, where that is not known).
    pub count_at_close: bool,
    /// A close notice's count still to be sent (an OK, detail
    /// `MESSAGES_COMMITTED_AT_CLOSE`, before the CLOSED).
    pub final_count: Option<i64>,
}

impl ClusterSession {
    /// A session starting to connect its egress.
    pub fn new(
        id: i64,
        egress_key: u64,
        correlation_id: i64,
        response_stream_id: i32,
        response_channel: &str,
        now_ns: i64,
    ) -> ClusterSession {
        ClusterSession {
            id,
            egress_key,
            correlation_id,
            response_stream_id,
            response_channel: response_channel.to_string(),
            encoded_principal: Vec::new(),
            state: SessionState::Init,
            close_reason: None,
            opened_log_position: NULL_POSITION,
            closed_log_position: NULL_POSITION,
            time_of_last_activity_ns: now_ns,
            ingress_image_correlation_id: -1,
            response: None,
            has_open_event_pending: false,
            has_new_leader_event_pending: false,
            messages_in_log: 0,
            messages_committed: 0,
            messages_acked: 0,
            numbered: false,
            close_detail: None,
            count_at_close: false,
            final_count: None,
        }
    }

    /// True while open (its messages are taken).
    pub fn is_open(&self) -> bool {
        self.state == SessionState::Open
    }

    /// Marks it closing for `reason`.
    pub fn closing(&mut self, reason: i32) {
        self.state = SessionState::Closing;
        self.close_reason = Some(reason);
    }

    /// Marks it rejected, to be told `code` and `detail`.
    pub fn reject(&mut self, code: i32, detail: &str) {
        self.state = SessionState::Rejected;
        self.response = Some((code, detail.to_string()));
    }

    /// True once nothing was heard from it for longer than `timeout_ns`.
    pub fn has_timed_out(&self, now_ns: i64, timeout_ns: i64) -> bool {
        now_ns > self.time_of_last_activity_ns.saturating_add(timeout_ns)
    }
}
