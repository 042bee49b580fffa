//! The election: how the members agree on a leader for a new leadership
//! term and bring their logs into line with its log, as Aeron Cluster's
//! `Election` does (states, messages, timeouts and the log positions they
//! carry are Aeron's, so an operator reads the same counters and events).
//!
//! The election is a state machine advanced by [`Election::do_work`] with
//! the time it is given; messages from other members arrive through the
//! `on_*` methods. Everything it does to the world (send a consensus
//! message, persist a candidate term, create the log publication, truncate,
//! replay or replicate the log, join the leader's log) goes through the
//! [`ElectionHost`] the consensus module implements, so the same code runs
//! in a node and in simulations on a manual clock.
//!
//! Where Aeron's users suffer, it differs, each said where it is done:
//! a ballot a majority won is won whatever one member voted
//! ([`crate::module::cluster_member::is_quorum_leader`]); an election that keeps
//! failing backs off between attempts and keeps the cause
//! ([`Election::last_error`]) instead of retrying INIT at full speed
//! (aeron#1657).

use std::fmt;

use sulis_protocol::cluster::messages::{
    role, AppendPosition, CanvassPosition, CatchupPosition, CommitPosition, NewLeadershipTerm,
    RequestVote, Vote, CONSENSUS_PROTOCOL_VERSION, NULL_POSITION,
};

use crate::module::cluster_member::{
    self, become_candidate, compare_log, has_quorum_at_position, is_quorum_candidate,
    is_quorum_leader, is_unanimous_candidate, is_unanimous_leader, ClusterMember, NULL_VALUE,
};

/// The election's states, with the codes Aeron's election-state counter shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ElectionState {
    /// Prepare: roll back what was not committed, find the candidate term.
    Init = 0,
    /// Exchange log positions with the other members.
    Canvass = 1,
    /// Wait a random delay, then stand.
    Nominate = 2,
    /// Ask for votes.
    CandidateBallot = 3,
    /// Voted for a candidate; wait for its new term.
    FollowerBallot = 4,
    /// Leader: wait until a quorum holds its whole log.
    LeaderLogReplication = 5,
    /// Leader: replay its log from the commit position to its end.
    LeaderReplay = 6,
    /// Leader: start the new term's log.
    LeaderInit = 7,
    /// Leader: wait for a quorum in the new term, then append its first entry.
    LeaderReady = 8,
    /// Follower: copy whole terms it misses from the leader's archive.
    FollowerLogReplication = 9,
    /// Follower: replay its log up to the commit position.
    FollowerReplay = 10,
    /// Follower: ask the leader for a catch-up replay.
    FollowerCatchupInit = 11,
    /// Follower: wait for the catch-up replay's image.
    FollowerCatchupAwait = 12,
    /// Follower: consume the catch-up replay until it meets the live log.
    FollowerCatchup = 13,
    /// Follower: subscribe to the live log.
    FollowerLogInit = 14,
    /// Follower: wait for the live log's image.
    FollowerLogAwait = 15,
    /// Follower: tell the leader where it is.
    FollowerReady = 16,
    /// Over.
    Closed = 17,
}

impl ElectionState {
    /// The counter value.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// Aeron's name of the state.
    pub fn name(self) -> &'static str {
        use ElectionState::*;
        match self {
            Init => "INIT",
            Canvass => "CANVASS",
            Nominate => "NOMINATE",
            CandidateBallot => "CANDIDATE_BALLOT",
            FollowerBallot => "FOLLOWER_BALLOT",
            LeaderLogReplication => "LEADER_LOG_REPLICATION",
            LeaderReplay => "LEADER_REPLAY",
            LeaderInit => "LEADER_INIT",
            LeaderReady => "LEADER_READY",
            FollowerLogReplication => "FOLLOWER_LOG_REPLICATION",
            FollowerReplay => "FOLLOWER_REPLAY",
            FollowerCatchupInit => "FOLLOWER_CATCHUP_INIT",
            FollowerCatchupAwait => "FOLLOWER_CATCHUP_AWAIT",
            FollowerCatchup => "FOLLOWER_CATCHUP",
            FollowerLogInit => "FOLLOWER_LOG_INIT",
            FollowerLogAwait => "FOLLOWER_LOG_AWAIT",
            FollowerReady => "FOLLOWER_READY",
            Closed => "CLOSED",
        }
    }
}

impl fmt::Display for ElectionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The timeouts and intervals an election runs by (Aeron's defaults in
/// [`ElectionTimeouts::default`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElectionTimeouts {
    /// How long a ballot lasts; the nomination delay is random in [0, half of it).
    pub election_timeout_ns: i64,
    /// How often CanvassPosition is sent.
    pub election_status_interval_ns: i64,
    /// Silence after which a member counts as gone; the deadline of most waits.
    pub leader_heartbeat_timeout_ns: i64,
    /// How often NewLeadershipTerm, CommitPosition and AppendPosition are repeated.
    pub leader_heartbeat_interval_ns: i64,
    /// At node start, how long to wait for every member before a quorum may elect.
    pub startup_canvass_timeout_ns: i64,
}

impl Default for ElectionTimeouts {
    fn default() -> ElectionTimeouts {
        ElectionTimeouts {
            election_timeout_ns: 1_000_000_000,
            election_status_interval_ns: 100_000_000,
            leader_heartbeat_timeout_ns: 10_000_000_000,
            leader_heartbeat_interval_ns: 200_000_000,
            startup_canvass_timeout_ns: 60_000_000_000,
        }
    }
}

/// A consensus message for one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsensusMessage {
    /// A member's log, while canvassing.
    CanvassPosition(CanvassPosition),
    /// A candidate asks for a vote.
    RequestVote(RequestVote),
    /// A vote.
    Vote(Vote),
    /// The leader's new term, tailored to the follower's log.
    NewLeadershipTerm(NewLeadershipTerm),
    /// A follower's recorded position.
    AppendPosition(AppendPosition),
    /// The leader's commit position.
    CommitPosition(CommitPosition),
    /// A follower asks for a catch-up replay.
    CatchupPosition(CatchupPosition),
}

/// A term of the recording log, as the leader tells a follower about its next term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermEntry {
    /// The term.
    pub leadership_term_id: i64,
    /// Where it begins.
    pub term_base_log_position: i64,
    /// Where it ends (−1 while open).
    pub log_position: i64,
}

/// A NewLeadershipTermEvent met while consuming the log (replay or catch-up):
/// the follower's recording log gets the term from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermEvent {
    /// The term it begins.
    pub leadership_term_id: i64,
    /// The position after the event.
    pub log_position: i64,
    /// Where the term begins.
    pub term_base_log_position: i64,
}

/// How a log replication from the leader's archive is going.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicationProgress {
    /// Position copied so far.
    pub position: i64,
    /// It has ended (reached its stop position) and its recording stopped.
    pub done: bool,
}

/// How joining the leader's log (catch-up or live) is going.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinStatus {
    /// No image of the log session yet.
    NoImage,
    /// The image is there at `join_position`, but the join is not done yet.
    Joining {
        /// Where the image starts.
        join_position: i64,
    },
    /// Joined at `join_position`: recording and the services follow it.
    Joined {
        /// Where the image starts.
        join_position: i64,
    },
    /// The subscription failed (its channel errored).
    Failed(String),
}

/// What the election needs from its consensus module: the network, the
/// node-state file, the archive and the log. `send` and the join/replay
/// calls may report "not yet" (false, [`JoinStatus::NoImage`], `None`): the
/// election retries on its next `do_work`.
pub trait ElectionHost {
    /// Sends a consensus message to member `to`; false if it could not go now.
    fn send(&mut self, to: i32, message: ConsensusMessage) -> bool;
    /// The node's role changes (the node-role counter).
    fn set_role(&mut self, role: i32);
    /// The node's role now.
    fn role(&self) -> i32;
    /// The candidate term on disk (node-state file; −1 when none).
    fn candidate_term_id(&self) -> i64;
    /// Persists `candidate_term_id` if higher than the one on disk (synced
    /// before it returns) and returns the one on disk after.
    fn propose_max_candidate_term_id(
        &mut self,
        candidate_term_id: i64,
        log_position: i64,
        now_ns: i64,
    ) -> i64;
    /// Gives up any leadership or following: closes the log publication,
    /// subscription and recording, rolls back what was not committed after
    /// `log_position`. Returns the log's recorded end (`NULL_POSITION` if unknown).
    fn prepare_for_new_leadership(&mut self, log_position: i64, now_ns: i64) -> i64;
    /// Cuts the log back to `position` (uncommitted data of a term the leader does not have).
    fn truncate_log_entry(&mut self, log_leadership_term_id: i64, position: i64);
    /// Creates the leader's log publication, whose stream starts at `append_position`; returns its session id.
    fn add_log_publication(&mut self, append_position: i64) -> i32;
    /// The archive recording holding the log (−1 none yet).
    fn log_recording_id(&self) -> i64;
    /// The recording log's entry for term `leadership_term_id`.
    fn term_entry(&self, leadership_term_id: i64) -> Option<TermEntry>;
    /// Makes the recording log hold term `leadership_term_id` from
    /// `term_base_log_position` (−1 or a term it holds already: where the
    /// recording log has it; a term's base never moves) ending
    /// at `log_position` (−1: open), and every term before it (terms no
    /// entry reached here as empty ones, as Aeron's `ensureCoherent`); terms
    /// recorded after it are dropped (elections that never appended an
    /// entry here: the log's entries are of this term or earlier ones) when
    /// it is new or given no base (−1 for a term it holds: its own last term
    /// going on, the rest copied from the leader); a term it holds given its
    /// base keeps them (a replay meeting an earlier term's event).
    fn update_recording_log(
        &mut self,
        leadership_term_id: i64,
        term_base_log_position: i64,
        log_position: i64,
        now_ns: i64,
    );
    /// Starts replaying the local log from `from` to `to` through the consensus module and services.
    fn start_log_replay(&mut self, from: i64, to: i64);
    /// The replay's end position once it is done; the NewLeadershipTermEvents
    /// it met on the way go into `terms`.
    fn poll_log_replay(&mut self, terms: &mut Vec<TermEvent>) -> Option<i64>;
    /// Stops a replay.
    fn stop_log_replay(&mut self);
    /// Starts copying the leader's log recording up to `stop_position` into the local one.
    fn start_log_replication(
        &mut self,
        leader_member_id: i32,
        leader_recording_id: i64,
        stop_position: i64,
        now_ns: i64,
    );
    /// How the replication goes; an error ends the election attempt.
    fn poll_log_replication(&mut self, now_ns: i64) -> Result<ReplicationProgress, String>;
    /// Stops a replication.
    fn stop_log_replication(&mut self);
    /// Leader: records the new term's log and starts the services on it.
    fn join_log_as_leader(
        &mut self,
        leadership_term_id: i64,
        log_position: i64,
        log_session_id: i32,
        is_startup: bool,
    );
    /// Leader in LEADER_READY: publish the commit position when it rises; returns work done.
    fn update_leader_position(
        &mut self,
        now_ns: i64,
        append_position: i64,
        quorum_position: i64,
    ) -> i32;
    /// Leader: appends the term's NewLeadershipTermEvent; false if the log back-pressured.
    fn append_new_leadership_term_event(&mut self, now_ns: i64) -> bool;
    /// The election is over; the node runs its term.
    fn election_complete(&mut self, now_ns: i64);
    /// Follower: subscribes to the leader's log session, through the catch-up
    /// destination (`catchup`) or the live one.
    fn add_follower_subscription(&mut self, log_session_id: i32, catchup: bool);
    /// Follower: the catch-up endpoint to give the leader (its port resolved), once known.
    fn catchup_endpoint(&self) -> Option<String>;
    /// Follower: tries to join the log session's image as a follower at `log_position`.
    fn try_join_log_as_follower(
        &mut self,
        log_session_id: i32,
        log_position: i64,
        is_startup: bool,
        now_ns: i64,
    ) -> JoinStatus;
    /// Follower: consumes the catch-up up to `limit`; adds the live destination
    /// when near live; the NewLeadershipTermEvents met go into `terms`; returns work done.
    fn catchup_poll(
        &mut self,
        limit: i64,
        catchup_join_position: i64,
        now_ns: i64,
        terms: &mut Vec<TermEvent>,
    ) -> i32;
    /// Follower: the leader stopped the catch-up replay (its destination is gone).
    fn is_catchup_done(&self) -> bool;
    /// Follower: stops any catch-up.
    fn stop_catchup(&mut self);
    /// Follower: closes the log subscription (a new attempt makes a new one).
    fn close_log_subscription(&mut self);
    /// The commit-position counter: how far the consensus module has
    /// applied the log (never past what a leader said is committed).
    fn commit_position(&self) -> i64;
    /// Where the local log (its recording) ends.
    fn append_position(&self) -> i64;
    /// The consensus module is taking a snapshot.
    fn is_snapshotting(&self) -> bool;
    /// Leader: a follower's AppendPosition carried `flags` (catch-up tracking).
    fn track_catchup_completion(&mut self, member_id: i32, leadership_term_id: i64, flags: u8);
    /// When the leader was last heard from (ns).
    fn time_of_last_leader_update_ns(&self) -> i64;
    /// A state change or an error, for the event log.
    fn log(&mut self, line: String);
    /// An error that keeps elections failing, for the member's error log
    /// (its mark file: `cluster-tool errors`), as well as the event log.
    fn record_error(&mut self, _line: &str) {}
    /// The new leader lacks entries this member's services have applied
    /// (a leader that lost its term before its first entry was committed
    /// replayed its own tail): the log cannot be cut under them, so the
    /// node must stop and rebuild its services from a snapshot and the log.
    fn restart_required(&mut self, why: String);
}

/// What a member outside an election does with another member's message
/// of a later term than its own ([`beyond_term`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BeyondTerm {
    /// Nothing of a later term.
    No,
    /// A request for votes in a later term, ignored: this member is sure of
    /// its term's leader (Raft's leader stickiness, Ongaro's thesis, section 9.6).
    Ignored,
    /// It leaves its term for an election, for this reason.
    Leave(String),
}

/// Outside an election, in `term`: a later term's leader, commit position
/// or canvass ends this member's term (a member that voted in a later term
/// will not follow this one's leader; only an election ends the split); a
/// request for votes in a later term ends it only if the member holds no
/// lease: `leased` (asked only then) says whether, as leader, a quorum of followers reported, or,
/// as follower, its leader did, within the leader heartbeat timeout. So a
/// member back from a pause or a partition that asks for votes on a stale
/// log does not unseat a leader that works (a healthy leader stepped down
/// for it, and clients lost 1-6 s, in 2 of 4 runs of a paused leader).
pub fn beyond_term(m: &ConsensusMessage, term: i64, leased: impl FnOnce() -> bool) -> BeyondTerm {
    match m {
        ConsensusMessage::RequestVote(x) if x.candidate_term_id > term => {
            if leased() {
                BeyondTerm::Ignored
            } else {
                BeyondTerm::Leave("a vote requested for a later term".into())
            }
        }
        ConsensusMessage::NewLeadershipTerm(x) if x.leadership_term_id > term => {
            BeyondTerm::Leave("a later term's leader".into())
        }
        ConsensusMessage::CommitPosition(x) if x.leadership_term_id > term => {
            BeyondTerm::Leave("a later term's commit position".into())
        }
        ConsensusMessage::CanvassPosition(x) if x.leadership_term_id > term => {
            BeyondTerm::Leave(format!(
                "member {} canvasses in term {}, later than this one",
                x.follower_member_id, x.leadership_term_id
            ))
        }
        _ => BeyondTerm::No,
    }
}

/// A term entry that holds entries: open, or ending after its base.
fn holds_entries(e: &TermEntry) -> bool {
    e.log_position == NULL_POSITION || e.log_position > e.term_base_log_position
}

/// What a leader tells followers of its term; the election and, after it,
/// the consensus module (answering a restarted member's canvass) both send
/// NewLeadershipTerm from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderTerm {
    /// The leader.
    pub leader_member_id: i32,
    /// Its term.
    pub leadership_term_id: i64,
    /// Where its term begins in the log.
    pub term_base_log_position: i64,
    /// How far its log is recorded.
    pub append_position: i64,
    /// The commit (quorum) position.
    pub commit_position: i64,
    /// Its log recording.
    pub log_recording_id: i64,
    /// Its log publication's session.
    pub log_session_id: i32,
    /// The application version.
    pub app_version: i32,
    /// It had just started when elected.
    pub is_startup: bool,
}

impl LeaderTerm {
    /// NewLeadershipTerm for a follower whose log's last term is
    /// `log_leadership_term_id`: where its next term (`next`, the leader's
    /// recording-log entry for that term, if any) begins and ends in this
    /// leader's log, so the follower can cut a suffix the leader does not
    /// have or copy the terms it misses.
    ///
    /// `own` is the leader's entry for the follower's last term. When the
    /// leader holds nothing of that term (no entry, or an empty one), the
    /// follower's entries of it are in no leader's log and were never
    /// committed: the message says so with the follower's own term as the
    /// next term ([`NewLeadershipTerm::next_leadership_term_id`] ==
    /// `log_leadership_term_id`) and, for an empty entry, where it lies, and
    /// the follower cuts its log back to where that term began there.
    /// Aeron's leader tells such a follower the leader's next term begins
    /// at its append position, and the follower copies the leader's log
    /// onto entries of a term the leader never had (a simulation found the
    /// logs diverging so).
    ///
    /// `terms` looks a term up in the leader's recording log. The next term
    /// is the first after the follower's that holds entries: terms an
    /// election filled in empty are skipped, so a follower never records an
    /// empty term as the end of its log.
    pub fn new_leadership_term(
        &self,
        log_leadership_term_id: i64,
        terms: &dyn Fn(i64) -> Option<TermEntry>,
        now_ns: i64,
    ) -> NewLeadershipTerm {
        let own = terms(log_leadership_term_id);
        let next = (log_leadership_term_id + 1..=self.leadership_term_id)
            .filter_map(terms)
            .find(holds_entries);
        let lacking = self.lacks(log_leadership_term_id, own);
        let (next_term, next_base, next_log) = match next {
            _ if lacking => (
                log_leadership_term_id,
                own.map_or(NULL_POSITION, |e| e.term_base_log_position),
                NULL_POSITION,
            ),
            Some(e) => (
                e.leadership_term_id,
                e.term_base_log_position,
                if e.log_position != NULL_POSITION {
                    e.log_position
                } else {
                    self.append_position
                },
            ),
            None => (self.leadership_term_id, self.append_position, NULL_POSITION),
        };
        NewLeadershipTerm {
            log_leadership_term_id,
            next_leadership_term_id: next_term,
            next_term_base_log_position: next_base,
            next_log_position: next_log,
            leadership_term_id: self.leadership_term_id,
            term_base_log_position: self.term_base_log_position,
            log_position: self.append_position,
            leader_recording_id: self.log_recording_id,
            timestamp: now_ns / 1_000_000,
            leader_member_id: self.leader_member_id,
            log_session_id: self.log_session_id,
            app_version: self.app_version,
            is_startup: self.is_startup as i32,
            commit_position: self.commit_position,
        }
    }

    /// The leader holds nothing of a follower's last log term
    /// `log_leadership_term_id` (its own entry `own` is missing or empty).
    fn lacks(&self, log_leadership_term_id: i64, own: Option<TermEntry>) -> bool {
        log_leadership_term_id != NULL_VALUE
            && log_leadership_term_id < self.leadership_term_id
            && !own.as_ref().is_some_and(holds_entries)
    }

    /// NewLeadershipTerm from a leader past its election, for a member that
    /// canvasses (it restarted) with a log whose last term is
    /// `log_leadership_term_id`: its next term's bounds when it is behind by
    /// a term or more (`next`, or this term from its base when the
    /// recording log has no entry after the member's term), none when it is
    /// in this term.
    pub fn for_rejoining_member(
        &self,
        log_leadership_term_id: i64,
        terms: &dyn Fn(i64) -> Option<TermEntry>,
        now_ns: i64,
    ) -> NewLeadershipTerm {
        let mut m = self.new_leadership_term(log_leadership_term_id, terms, now_ns);
        let next = (log_leadership_term_id + 1..=self.leadership_term_id)
            .filter_map(terms)
            .find(holds_entries);
        if self.lacks(log_leadership_term_id, terms(log_leadership_term_id)) {
            // The leader holds nothing of the member's last term: as made.
        } else if log_leadership_term_id < self.leadership_term_id {
            let (t, b, p) = match next {
                Some(e) => (
                    e.leadership_term_id,
                    e.term_base_log_position,
                    e.log_position,
                ),
                None => (
                    self.leadership_term_id,
                    self.term_base_log_position,
                    NULL_POSITION,
                ),
            };
            m.next_leadership_term_id = t;
            m.next_term_base_log_position = b;
            m.next_log_position = p;
        } else {
            m.next_leadership_term_id = NULL_VALUE;
            m.next_term_base_log_position = NULL_POSITION;
            m.next_log_position = NULL_POSITION;
        }
        m
    }
}

/// Why an election attempt went back to INIT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionError(pub String);

impl fmt::Display for ElectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Step = Result<i32, ElectionError>;

fn event(message: String) -> ElectionError {
    ElectionError(message)
}

/// Where an election starts from.
#[derive(Clone, Debug)]
pub struct ElectionStart {
    /// The node just started (the canvass waits for every member, up to the startup timeout).
    pub is_node_startup: bool,
    /// A leader that closed gracefully, not waited for (−1 none).
    pub graceful_closed_leader_id: i32,
    /// The last term in the log that holds entries (a term recorded by an
    /// election that never appended its first entry does not count).
    pub leadership_term_id: i64,
    /// How far the log has been applied (the commit position).
    pub log_position: i64,
    /// How far it is recorded.
    pub append_position: i64,
    /// This member's id.
    pub this_member_id: i32,
    /// The application version sent in NewLeadershipTerm.
    pub app_version: i32,
    /// Seed of the nomination delay.
    pub seed: u64,
    /// The latest term whose leader this member may have helped elect, as
    /// the elections this process ran left it ([`Election::voted_through`]);
    /// None when none has run yet: then the candidate term on disk counts
    /// (whom that vote went to is not known).
    pub voted_through: Option<i64>,
}

/// One election.
pub struct Election {
    members: Vec<ClusterMember>,
    this_member: usize,
    leader: Option<usize>,
    timeouts: ElectionTimeouts,
    app_version: i32,
    rng: u64,

    state: ElectionState,
    is_node_startup: bool,
    is_first_init: bool,
    is_extended_canvass: bool,
    is_leader_startup: bool,
    graceful_closed_leader_id: i32,

    log_position: i64,
    append_position: i64,
    notified_commit_position: i64,
    catchup_join_position: i64,
    /// Where the leader's term begins (its NewLeadershipTerm), for a
    /// follower joining it through catch-up.
    leader_term_base_log_position: i64,
    leadership_term_id: i64,
    log_leadership_term_id: i64,
    candidate_term_id: i64,
    /// The latest term whose leader this member may have helped elect: a
    /// term it voted yes in for another member, or won itself, or (not
    /// known which) the candidate term on disk when the election began. A
    /// ballot it stood in and lost elected no one with its vote, so it may
    /// follow a leader of an earlier term than the one it stood in.
    voted_through: i64,
    voted_through_known: bool,
    /// CANVASS: a leader of a term before `voted_through` (or before this
    /// member's own term) was refused since the canvass began: its term and
    /// the term it was below.
    refused_earlier_leader: Option<(i64, i64)>,
    /// CANVASS: positions received before this time do not count towards
    /// a candidacy (one status interval after the canvass began). A member
    /// that was paused or cut off finds the others' canvass positions of an
    /// election long over queued for it; counted, they made it stand at once
    /// on a stale log, and its request for a later term made the healthy
    /// leader step down. A member that canvasses now sends its position again
    /// within the interval, so only the members still canvassing count: the
    /// canvass is the pre-vote Raft asks for.
    canvass_counts_from_ns: i64,
    /// LEADER_READY: since when a quorum has joined the term's log.
    quorum_joined_at_ns: Option<i64>,
    leader_recording_id: i64,
    log_session_id: Option<i32>,

    replication_leadership_term_id: i64,
    replication_stop_position: i64,
    replication_term_base_log_position: i64,
    replication_deadline_ns: i64,
    replicating: bool,
    replaying: bool,
    /// Where the follower's replay was started to (the commit position may
    /// rise while it runs: the replay is done at this target, the rest is
    /// applied from the leader's log).
    replay_target: i64,
    /// Catch-up: the commit position last reached, and when.
    catchup_progress: (i64, i64),
    /// Leader: the commit position it knew when it won. Until its term's
    /// first entry is on a quorum, no commit position it publishes goes
    /// beyond it (Raft's rule that a leader commits an earlier term's
    /// entries only through one of its own term).
    commit_bound: i64,
    subscribed: bool,

    initial_time_of_last_update_ns: i64,
    time_of_last_state_change_ns: i64,
    time_of_last_update_ns: i64,
    time_of_last_commit_position_update_ns: i64,
    nomination_deadline_ns: i64,
    last_published_commit_position: i64,
    last_published_append_position: i64,

    errors_in_a_row: u32,
    retry_at_ns: i64,
    last_error: Option<String>,
}

const DAY_NS: i64 = 86_400_000_000_000;

/// AppendPosition flags: Aeron's catch-up progress (1), and sulis's report
/// of a follower that has not joined the term's log yet (2: the tail it
/// holds, what it replicated). Only a report with neither tells the leader
/// that the follower listens to its log.
pub const APPEND_FLAG_CATCHUP: u8 = 1;
pub const APPEND_FLAG_NOT_JOINED: u8 = 2;
/// AppendPosition flags, bits 2-3: the file sync level (0-2) the sender's
/// archive records the log at, so that a leader committing only what a
/// quorum synced counts no follower that merely wrote to its page cache.
/// The consensus publisher sets them on every AppendPosition it sends and
/// the receiving module takes them off before anything else reads the
/// flags; a member that does not set them (Aeron's) reports level 0.
pub const APPEND_FLAG_SYNC_LEVEL_SHIFT: u8 = 2;
pub const APPEND_FLAG_SYNC_LEVEL_MASK: u8 = 0b1100;

/// The flag bits that say sync level `level` (0-2).
pub fn sync_level_flags(level: u8) -> u8 {
    (level.min(2) << APPEND_FLAG_SYNC_LEVEL_SHIFT) & APPEND_FLAG_SYNC_LEVEL_MASK
}

/// AppendPosition `flags` split into the sync level they say and the
/// other flags.
pub fn split_sync_level(flags: u8) -> (u8, u8) {
    (
        (flags & APPEND_FLAG_SYNC_LEVEL_MASK) >> APPEND_FLAG_SYNC_LEVEL_SHIFT,
        flags & !APPEND_FLAG_SYNC_LEVEL_MASK,
    )
}

impl Election {
    /// An election of `members` (this member among them) starting at `now_ns`.
    pub fn new(
        start: ElectionStart,
        members: Vec<ClusterMember>,
        timeouts: ElectionTimeouts,
        now_ns: i64,
    ) -> Election {
        let this_member = members
            .iter()
            .position(|m| m.id == start.this_member_id)
            .expect("this member is one of the members");
        let initial = now_ns - DAY_NS;
        Election {
            members,
            this_member,
            leader: None,
            timeouts,
            app_version: start.app_version,
            rng: start.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            state: ElectionState::Init,
            is_node_startup: start.is_node_startup,
            is_first_init: true,
            is_extended_canvass: start.is_node_startup,
            is_leader_startup: false,
            graceful_closed_leader_id: start.graceful_closed_leader_id,
            log_position: start.log_position,
            append_position: start.append_position,
            notified_commit_position: 0,
            catchup_join_position: NULL_POSITION,
            leader_term_base_log_position: NULL_POSITION,
            leadership_term_id: start.leadership_term_id,
            log_leadership_term_id: start.leadership_term_id,
            candidate_term_id: start.leadership_term_id,
            voted_through: start
                .voted_through
                .unwrap_or(NULL_VALUE)
                .max(start.leadership_term_id),
            voted_through_known: start.voted_through.is_some(),
            refused_earlier_leader: None,
            canvass_counts_from_ns: now_ns,
            quorum_joined_at_ns: None,
            leader_recording_id: NULL_VALUE,
            log_session_id: None,
            replication_leadership_term_id: NULL_VALUE,
            replication_stop_position: NULL_POSITION,
            replication_term_base_log_position: NULL_VALUE,
            replication_deadline_ns: 0,
            replicating: false,
            replaying: false,
            replay_target: NULL_POSITION,
            catchup_progress: (NULL_POSITION, now_ns),
            commit_bound: 0,
            subscribed: false,
            initial_time_of_last_update_ns: initial,
            time_of_last_state_change_ns: now_ns,
            time_of_last_update_ns: initial,
            time_of_last_commit_position_update_ns: initial,
            nomination_deadline_ns: 0,
            last_published_commit_position: 0,
            last_published_append_position: 0,
            errors_in_a_row: 0,
            retry_at_ns: 0,
            last_error: None,
        }
    }

    /// The state now.
    pub fn state(&self) -> ElectionState {
        self.state
    }

    /// The leader chosen (once known).
    pub fn leader_member_id(&self) -> Option<i32> {
        self.leader.map(|i| self.members[i].id)
    }

    /// The latest term whose leader this member may have helped elect (for
    /// the next election's [`ElectionStart::voted_through`]).
    pub fn voted_through(&self) -> i64 {
        self.voted_through
    }

    /// The new term (once known).
    pub fn leadership_term_id(&self) -> i64 {
        self.leadership_term_id
    }

    /// The term being stood or voted for.
    pub fn candidate_term_id(&self) -> i64 {
        self.candidate_term_id
    }

    /// How far the log is applied.
    pub fn log_position(&self) -> i64 {
        self.log_position
    }

    /// How far the log is recorded.
    pub fn append_position(&self) -> i64 {
        self.append_position
    }

    /// The log publication's session id of the new term.
    pub fn log_session_id(&self) -> Option<i32> {
        self.log_session_id
    }

    /// The highest commit position the leader announced.
    pub fn notified_commit_position(&self) -> i64 {
        self.notified_commit_position
    }

    /// The new leader had just started (its sessions are closed, not followed).
    pub fn is_leader_startup(&self) -> bool {
        self.is_leader_startup
    }

    /// The members and what is known of them.
    pub fn members(&self) -> &[ClusterMember] {
        &self.members
    }

    /// The members, handed to the consensus module when the election ends.
    pub fn into_members(self) -> Vec<ClusterMember> {
        self.members
    }

    /// Why the last attempt went back to INIT, and how many attempts failed in a row.
    pub fn last_error(&self) -> Option<(&str, u32)> {
        self.last_error
            .as_deref()
            .map(|e| (e, self.errors_in_a_row))
    }

    fn this_id(&self) -> i32 {
        self.members[self.this_member].id
    }

    fn member_index(&self, id: i32) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    /// Advances the election; returns the work done.
    pub fn do_work(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> i32 {
        use ElectionState::*;
        let step = match self.state {
            Init => self.init(host, now_ns),
            Canvass => self.canvass(host, now_ns),
            Nominate => self.nominate(host, now_ns),
            CandidateBallot => self.candidate_ballot(host, now_ns),
            FollowerBallot => self.follower_ballot(host, now_ns),
            LeaderLogReplication => self.leader_log_replication(host, now_ns),
            LeaderReplay => self.leader_replay(host, now_ns),
            LeaderInit => self.leader_init(host, now_ns),
            LeaderReady => self.leader_ready(host, now_ns),
            FollowerLogReplication => self.follower_log_replication(host, now_ns),
            FollowerReplay => self.follower_replay(host, now_ns),
            FollowerCatchupInit => self.follower_catchup_init(host, now_ns),
            FollowerCatchupAwait => self.follower_catchup_await(host, now_ns),
            FollowerCatchup => self.follower_catchup(host, now_ns),
            FollowerLogInit => self.follower_log_init(host, now_ns),
            FollowerLogAwait => self.follower_log_await(host, now_ns),
            FollowerReady => self.follower_ready(host, now_ns),
            Closed => Ok(0),
        };
        match step {
            Ok(work) => work,
            Err(e) => {
                self.handle_error(host, now_ns, e);
                1
            }
        }
    }

    /// An attempt failed: log it, fall back to the commit position and
    /// start again from INIT, after a back-off that doubles with every
    /// failure in a row (from the status interval up to the heartbeat timeout).
    fn handle_error(&mut self, host: &mut dyn ElectionHost, now_ns: i64, e: ElectionError) {
        self.errors_in_a_row += 1;
        let shift = (self.errors_in_a_row - 1).min(20);
        let backoff = (self.timeouts.election_status_interval_ns << shift)
            .min(self.timeouts.leader_heartbeat_timeout_ns);
        self.retry_at_ns = now_ns + if self.errors_in_a_row > 1 { backoff } else { 0 };
        let line = format!(
            "election member {}: {} (attempt {} failed in a row{})",
            self.this_id(),
            e,
            self.errors_in_a_row,
            if self.errors_in_a_row > 1 {
                format!(", next in {} ms", backoff / 1_000_000)
            } else {
                String::new()
            }
        );
        // The error log too (a member that cannot join, e.g. its archive's disk is full, says so where an
        // operator looks), at the first failure and every tenth in a row after.
        if self.errors_in_a_row % 10 == 1 {
            host.record_error(&line);
        }
        host.log(line);
        self.last_error = Some(e.0);
        self.log_position = host.commit_position();
        self.set_state(host, ElectionState::Init, now_ns, "error");
    }

    // -- messages ---------------------------------------------------------

    /// A member's CanvassPosition.
    pub fn on_canvass_position(
        &mut self,
        host: &mut dyn ElectionHost,
        m: &CanvassPosition,
        now_ns: i64,
    ) {
        if self.state == ElectionState::Init {
            return;
        }
        if m.follower_member_id == self.graceful_closed_leader_id {
            self.graceful_closed_leader_id = NULL_VALUE as i32;
        }
        let Some(i) = self.member_index(m.follower_member_id) else {
            return;
        };
        if i == self.this_member {
            return;
        }
        if self.state != ElectionState::Canvass || now_ns >= self.canvass_counts_from_ns {
            self.update_member(i, m.log_leadership_term_id, m.log_position, false, now_ns);
        }
        if m.log_leadership_term_id.max(m.leadership_term_id) > self.leadership_term_id
            && matches!(
                self.state,
                ElectionState::LeaderLogReplication | ElectionState::LeaderReady
            )
        {
            let e = event(format!(
                "potential new election in progress: member {} is in term {} (its log's {}) beyond this leader's {}",
                m.follower_member_id, m.leadership_term_id, m.log_leadership_term_id, self.leadership_term_id
            ));
            self.handle_error(host, now_ns, e);
        } else if m.log_leadership_term_id < self.leadership_term_id && host.role() == role::LEADER
        {
            let quorum = self.quorum_position_bounded(now_ns);
            self.publish_new_leadership_term_to(host, i, m.log_leadership_term_id, quorum, now_ns);
        }
    }

    /// A candidate's RequestVote.
    pub fn on_request_vote(&mut self, host: &mut dyn ElectionHost, m: &RequestVote, now_ns: i64) {
        use ElectionState::*;
        if self.state == Init || m.candidate_member_id == self.this_id() {
            return;
        }
        if m.candidate_term_id <= self.candidate_term_id {
            self.place_vote(host, m.candidate_term_id, m.candidate_member_id, false);
        } else if compare_log(
            self.log_leadership_term_id,
            self.append_position,
            m.log_leadership_term_id,
            m.log_position,
        ) == std::cmp::Ordering::Greater
        {
            self.candidate_term_id =
                host.propose_max_candidate_term_id(m.candidate_term_id, m.log_position, now_ns);
            self.place_vote(host, m.candidate_term_id, m.candidate_member_id, false);
            if let Some(i) = self.member_index(m.candidate_member_id) {
                if host.role() == role::LEADER {
                    let quorum = self.quorum_position_bounded(now_ns);
                    self.publish_new_leadership_term_to(
                        host,
                        i,
                        m.log_leadership_term_id,
                        quorum,
                        now_ns,
                    );
                }
            }
        } else if matches!(
            self.state,
            Canvass | Nominate | CandidateBallot | FollowerBallot
        ) {
            self.candidate_term_id =
                host.propose_max_candidate_term_id(m.candidate_term_id, m.log_position, now_ns);
            self.voted_through = self.voted_through.max(m.candidate_term_id);
            self.place_vote(host, m.candidate_term_id, m.candidate_member_id, true);
            self.set_state(host, FollowerBallot, now_ns, "voted");
        }
    }

    /// A member's Vote.
    pub fn on_vote(&mut self, m: &Vote, now_ns: i64) {
        if self.state != ElectionState::CandidateBallot
            || m.candidate_term_id != self.candidate_term_id
            || m.candidate_member_id != self.this_id()
        {
            return;
        }
        if let Some(i) = self.member_index(m.follower_member_id) {
            self.members[i].candidate_term_id = m.candidate_term_id;
            self.members[i].vote = Some(m.vote == 1);
            self.update_member(i, m.log_leadership_term_id, m.log_position, false, now_ns);
        }
    }

    /// The leader's NewLeadershipTerm.
    pub fn on_new_leadership_term(
        &mut self,
        host: &mut dyn ElectionHost,
        m: &NewLeadershipTerm,
        now_ns: i64,
    ) {
        if let Err(e) = self.new_leadership_term(host, m, now_ns) {
            self.handle_error(host, now_ns, e);
        }
    }

    fn new_leadership_term(
        &mut self,
        host: &mut dyn ElectionHost,
        m: &NewLeadershipTerm,
        now_ns: i64,
    ) -> Step {
        use ElectionState::*;
        if self.state == Init {
            return Ok(0);
        }
        let Some(leader) = self.member_index(m.leader_member_id) else {
            return Ok(0);
        };
        if leader == self.this_member && m.leadership_term_id == self.leadership_term_id {
            return Ok(0);
        }
        if m.leader_member_id == self.graceful_closed_leader_id {
            self.graceful_closed_leader_id = NULL_VALUE as i32;
        }
        let in_ballot = matches!(self.state, FollowerBallot | CandidateBallot)
            && m.leadership_term_id == self.candidate_term_id;
        // A member that voted in a later term never follows an earlier
        // term's leader: its vote may have elected a leader whose log lacks
        // what this one would append and commit, which that leader would
        // then cut. Aeron's election takes any term's leader while it
        // canvasses; a simulation found it losing committed entries so. A
        // ballot this member stood in and lost elected no one with its vote:
        // it does not count (refusing the leader that won meanwhile left a
        // member canvassing for good while the others went on).
        let floor = self.leadership_term_id.max(self.voted_through);
        let canvassing = self.state == Canvass && m.leadership_term_id >= floor;
        if self.state == Canvass && !canvassing {
            self.refused_earlier_leader = Some((m.leadership_term_id, floor));
        }
        if in_ballot || canvassing {
            if m.log_leadership_term_id != self.log_leadership_term_id {
                // Not tailored to this log: wait for one that is.
                self.set_state(
                    host,
                    Canvass,
                    now_ns,
                    "new leadership term for another log term",
                );
            } else {
                if m.next_leadership_term_id == m.log_leadership_term_id
                    && m.log_leadership_term_id != NULL_VALUE
                {
                    return Err(self.cut_a_term_the_leader_lacks(host, m));
                }
                if m.next_term_base_log_position != NULL_POSITION
                    && m.next_term_base_log_position < self.append_position
                {
                    // The suffix after the leader's next term base is of a term the
                    // leader does not have: never committed, so cut it and start again.
                    let old = self.append_position;
                    self.refuse_to_cut_applied(
                        host,
                        m.next_term_base_log_position,
                        m.leader_member_id,
                    )?;
                    host.truncate_log_entry(
                        m.log_leadership_term_id,
                        m.next_term_base_log_position,
                    );
                    self.append_position = m.next_term_base_log_position;
                    return Err(event(format!(
                        "truncating the cluster log of member {} from {old} to {} (term {} ends there on leader {})",
                        self.this_id(),
                        m.next_term_base_log_position,
                        m.log_leadership_term_id,
                        m.leader_member_id
                    )));
                }
                self.leader = Some(leader);
                self.is_leader_startup = m.is_startup == 1;
                self.leadership_term_id = m.leadership_term_id;
                self.candidate_term_id = self.candidate_term_id.max(m.leadership_term_id);
                self.log_session_id = Some(m.log_session_id);
                self.leader_recording_id = m.leader_recording_id;
                self.leader_term_base_log_position = m.term_base_log_position;
                self.catchup_join_position = if self.append_position < m.log_position {
                    m.log_position
                } else {
                    NULL_POSITION
                };
                self.notified_commit_position =
                    self.notified_commit_position.max(m.commit_position);
                if self.append_position < m.term_base_log_position {
                    if m.next_leadership_term_id == NULL_VALUE {
                        return Err(event(format!(
                            "invalid NewLeadershipTerm from member {}: append position {} < term base {} with no next term",
                            m.leader_member_id, self.append_position, m.term_base_log_position
                        )));
                    }
                    if self.append_position < m.next_term_base_log_position {
                        self.replication_leadership_term_id = m.log_leadership_term_id;
                        self.replication_stop_position = m.next_term_base_log_position;
                        self.replication_term_base_log_position = NULL_VALUE;
                        self.set_state(
                            host,
                            FollowerLogReplication,
                            now_ns,
                            "missing the rest of its term",
                        );
                    } else if self.append_position == m.next_term_base_log_position
                        && m.next_log_position != NULL_POSITION
                    {
                        self.replication_leadership_term_id = m.next_leadership_term_id;
                        self.replication_stop_position = m.next_log_position;
                        self.replication_term_base_log_position = m.next_term_base_log_position;
                        self.set_state(
                            host,
                            FollowerLogReplication,
                            now_ns,
                            "missing the next term",
                        );
                    }
                } else {
                    self.set_state(host, FollowerReplay, now_ns, "new leadership term");
                }
            }
        }
        if self.state == FollowerLogReplication
            && m.log_leadership_term_id == self.log_leadership_term_id
            && self.leader == Some(leader)
        {
            self.replication_deadline_ns = now_ns + self.timeouts.leader_heartbeat_timeout_ns;
        }
        Ok(1)
    }

    /// Cutting the log to `position` would take entries the services have
    /// applied: say so loudly and have the node restart (it rebuilds its
    /// services from a snapshot and the log, then cuts).
    fn refuse_to_cut_applied(
        &mut self,
        host: &mut dyn ElectionHost,
        position: i64,
        leader: i32,
    ) -> Result<(), ElectionError> {
        let applied = host.commit_position();
        if position < applied {
            let why = format!(
                "member {} must restart: leader {leader} lacks entries from {position} that its services applied up to {applied}",
                self.this_id()
            );
            host.restart_required(why.clone());
            return Err(event(why));
        }
        Ok(())
    }

    /// The leader holds nothing of this log's last term: its entries of
    /// that term were never committed. The log goes back to where the term
    /// began (or where the leader's empty entry of it lies, if lower), the
    /// recording log to the terms before it, and the election starts again.
    fn cut_a_term_the_leader_lacks(
        &mut self,
        host: &mut dyn ElectionHost,
        m: &NewLeadershipTerm,
    ) -> ElectionError {
        let term = m.log_leadership_term_id;
        let own_base = host
            .term_entry(term)
            .map_or(0, |e| e.term_base_log_position);
        let cut = if m.next_term_base_log_position == NULL_POSITION {
            own_base
        } else {
            own_base.min(m.next_term_base_log_position)
        };
        // The last term before it that holds entries: empty terms filled in
        // between go with it.
        let previous = (0..term)
            .rev()
            .find(|&t| host.term_entry(t).as_ref().is_some_and(holds_entries))
            .unwrap_or(NULL_VALUE);
        let old = self.append_position;
        if let Err(e) = self.refuse_to_cut_applied(host, cut.min(old), m.leader_member_id) {
            return e;
        }
        host.truncate_log_entry(previous, cut.min(old));
        self.append_position = cut.min(old);
        self.log_leadership_term_id = previous;
        event(format!(
            "truncating the cluster log of member {} from {old} to {}: leader {} holds nothing of its last term {term}",
            self.this_id(),
            self.append_position,
            m.leader_member_id
        ))
    }

    /// A follower's AppendPosition.
    pub fn on_append_position(
        &mut self,
        host: &mut dyn ElectionHost,
        m: &AppendPosition,
        now_ns: i64,
    ) {
        if self.state == ElectionState::Init || m.leadership_term_id > self.leadership_term_id {
            return;
        }
        if let Some(i) = self.member_index(m.follower_member_id) {
            let joined = m.flags == 0;
            self.update_member(i, m.leadership_term_id, m.log_position, joined, now_ns);
            host.track_catchup_completion(m.follower_member_id, m.leadership_term_id, m.flags);
        }
    }

    /// The leader's CommitPosition.
    pub fn on_commit_position(
        &mut self,
        host: &mut dyn ElectionHost,
        m: &CommitPosition,
        now_ns: i64,
    ) {
        if self.state == ElectionState::Init {
            return;
        }
        // Only the commit position of this term's leader: the same member
        // leading a later term commits a log this one may not share (Aeron
        // takes any term's, for senders of old that got the term wrong; a
        // simulation found a follower replaying its own uncommitted entries
        // as committed so).
        if self.leader.map(|i| self.members[i].id) == Some(m.leader_member_id)
            && m.leadership_term_id == self.leadership_term_id
        {
            self.notified_commit_position = self.notified_commit_position.max(m.log_position);
            if self.state == ElectionState::FollowerLogReplication {
                self.replication_deadline_ns = now_ns + self.timeouts.leader_heartbeat_timeout_ns;
            }
        } else if m.leadership_term_id > self.leadership_term_id
            && self.state == ElectionState::LeaderReady
        {
            let e = event(format!(
                "new leader detected by its commit position: member {} in term {} (this term {})",
                m.leader_member_id, m.leadership_term_id, self.leadership_term_id
            ));
            self.handle_error(host, now_ns, e);
        }
    }

    /// NewLeadershipTermEvents met while replaying or catching up: the
    /// recording log gets their terms, and the log its last term.
    fn replayed_terms(&mut self, host: &mut dyn ElectionHost, terms: Vec<TermEvent>, now_ns: i64) {
        if !matches!(
            self.state,
            ElectionState::FollowerCatchup | ElectionState::FollowerReplay
        ) {
            return;
        }
        for t in terms {
            host.update_recording_log(
                t.leadership_term_id,
                t.term_base_log_position,
                NULL_POSITION,
                now_ns,
            );
            self.log_position = t.log_position;
            self.log_leadership_term_id = t.leadership_term_id;
        }
    }

    fn update_member(
        &mut self,
        i: usize,
        leadership_term_id: i64,
        log_position: i64,
        joined: bool,
        now_ns: i64,
    ) {
        let m = &mut self.members[i];
        m.leadership_term_id = leadership_term_id;
        m.log_position = log_position;
        m.has_joined_log = joined;
        m.time_of_last_append_position_ns = now_ns;
    }

    // -- states -----------------------------------------------------------

    fn init(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        if now_ns < self.retry_at_ns {
            return Ok(0);
        }
        if self.is_first_init {
            self.is_first_init = false;
            if !self.voted_through_known {
                self.voted_through = self.voted_through.max(host.candidate_term_id());
            }
            if !self.is_node_startup {
                self.prepare_for_new_leadership(host, now_ns);
            }
        } else {
            self.stop_log_replication(host);
            host.stop_catchup();
            self.catchup_join_position = NULL_POSITION;
            self.prepare_for_new_leadership(host, now_ns);
            self.log_session_id = None;
            self.stop_replay(host);
            if self.subscribed {
                host.close_log_subscription();
                self.subscribed = false;
            }
        }
        self.notified_commit_position = 0;
        self.candidate_term_id = host.candidate_term_id().max(self.leadership_term_id);
        if self.members.len() == 1 {
            self.candidate_term_id = host.propose_max_candidate_term_id(
                self.candidate_term_id + 1,
                self.log_position,
                now_ns,
            );
            self.leader = Some(self.this_member);
            self.leadership_term_id = self.candidate_term_id;
            // As a canvass would: its own log counts towards its quorum.
            self.count_own_log();
            self.set_state(
                host,
                ElectionState::LeaderLogReplication,
                now_ns,
                "single-member cluster",
            );
        } else {
            self.set_state(host, ElectionState::Canvass, now_ns, "");
        }
        Ok(1)
    }

    fn canvass(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        let mut work = 0;
        let deadline = if self.is_extended_canvass {
            self.time_of_last_state_change_ns + self.timeouts.startup_canvass_timeout_ns
        } else {
            host.time_of_last_leader_update_ns() + self.timeouts.leader_heartbeat_timeout_ns
        };
        if self.update_interval_expired(now_ns, self.timeouts.election_status_interval_ns) {
            self.time_of_last_update_ns = now_ns;
            self.publish_canvass_position(host);
            work += 1;
        }
        let me = &self.members[self.this_member];
        // A leader of a term before one this member voted in leads the
        // others (they are past their election: none canvasses back). This
        // member will not follow it, and with a shorter log it may never be
        // a quorum candidate: it stands anyway, as a Raft member whose term
        // is ahead does, and its request for a later term ends the old one.
        // The leader steps down, refuses the shorter log and wins the next
        // ballot, a term this member follows.
        let past_earlier_leader = self.refused_earlier_leader.filter(|_| {
            now_ns >= self.time_of_last_state_change_ns + self.timeouts.election_timeout_ns
        });
        if is_unanimous_candidate(&self.members, me, self.graceful_closed_leader_id)
            || (now_ns >= deadline && is_quorum_candidate(&self.members, me))
            || past_earlier_leader.is_some()
        {
            let delay =
                (self.next_random() % (self.timeouts.election_timeout_ns as u64 / 2).max(1)) as i64;
            self.nomination_deadline_ns = now_ns + delay;
            let why = past_earlier_leader.map(|(term, floor)| {
                format!(
                    "the leader of term {term} is before term {floor}, which this member voted in or ran: standing to end its term"
                )
            });
            self.set_state(
                host,
                ElectionState::Nominate,
                now_ns,
                why.as_deref().unwrap_or(""),
            );
            work += 1;
        }
        Ok(work)
    }

    fn nominate(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        if now_ns >= self.nomination_deadline_ns {
            self.candidate_term_id = host.propose_max_candidate_term_id(
                self.candidate_term_id + 1,
                self.log_position,
                now_ns,
            );
            let id = self.this_id();
            become_candidate(&mut self.members, self.candidate_term_id, id);
            self.set_state(host, ElectionState::CandidateBallot, now_ns, "");
            return Ok(1);
        }
        if self.update_interval_expired(now_ns, self.timeouts.election_status_interval_ns) {
            self.time_of_last_update_ns = now_ns;
            self.publish_canvass_position(host);
            return Ok(1);
        }
        Ok(0)
    }

    fn candidate_ballot(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        if is_unanimous_leader(
            &self.members,
            self.candidate_term_id,
            self.graceful_closed_leader_id,
        ) {
            self.leader = Some(self.this_member);
            self.leadership_term_id = self.candidate_term_id;
            self.set_state(
                host,
                ElectionState::LeaderLogReplication,
                now_ns,
                "unanimous leader",
            );
            return Ok(1);
        }
        if now_ns >= self.time_of_last_state_change_ns + self.timeouts.election_timeout_ns {
            if is_quorum_leader(&self.members, self.candidate_term_id) {
                self.leader = Some(self.this_member);
                self.leadership_term_id = self.candidate_term_id;
                self.set_state(
                    host,
                    ElectionState::LeaderLogReplication,
                    now_ns,
                    "quorum leader",
                );
            } else {
                self.set_state(host, ElectionState::Canvass, now_ns, "ballot lost");
            }
            return Ok(1);
        }
        let mut work = 0;
        let request = RequestVote {
            log_leadership_term_id: self.log_leadership_term_id,
            log_position: self.append_position,
            candidate_term_id: self.candidate_term_id,
            candidate_member_id: self.this_id(),
            protocol_version: CONSENSUS_PROTOCOL_VERSION,
        };
        for i in 0..self.members.len() {
            if !self.members[i].is_ballot_sent {
                work += 1;
                let to = self.members[i].id;
                self.members[i].is_ballot_sent =
                    host.send(to, ConsensusMessage::RequestVote(request.clone()));
            }
        }
        Ok(work)
    }

    fn follower_ballot(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        if now_ns >= self.time_of_last_state_change_ns + self.timeouts.election_timeout_ns {
            self.set_state(
                host,
                ElectionState::Canvass,
                now_ns,
                "no new leadership term",
            );
            return Ok(1);
        }
        Ok(0)
    }

    fn leader_log_replication(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        self.mark_self(now_ns);
        let quorum = self.quorum_position_bounded(now_ns);
        let mut work = self.publish_new_leadership_term_on_interval(host, quorum, now_ns);
        work += self.publish_commit_position_on_interval(host, quorum, now_ns);
        if quorum >= self.append_position {
            self.set_state(
                host,
                ElectionState::LeaderReplay,
                now_ns,
                "a quorum holds the leader's log",
            );
            work += 1;
        } else if self.state_timed_out(now_ns) {
            // Aeron waits here for ever; a leader no quorum follows gives way.
            return Err(event(format!(
                "no quorum came to hold the log of leader {} in term {} within {} ms (quorum at {quorum} of {})",
                self.this_id(),
                self.leadership_term_id,
                self.timeouts.leader_heartbeat_timeout_ns / 1_000_000,
                self.append_position
            )));
        }
        Ok(work)
    }

    fn leader_replay(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        let mut work = 0;
        if !self.replaying {
            if self.log_position < self.append_position {
                host.start_log_replay(self.log_position, self.append_position);
                self.replaying = true;
            } else {
                self.set_state(host, ElectionState::LeaderInit, now_ns, "nothing to replay");
            }
            work += 1;
            self.is_leader_startup = self.is_node_startup;
            let term = self.leadership_term_id;
            self.members[self.this_member].leadership_term_id = term;
            self.mark_self(now_ns);
        } else if host.poll_log_replay(&mut Vec::new()).is_some() {
            self.stop_replay(host);
            self.log_position = self.append_position;
            self.set_state(host, ElectionState::LeaderInit, now_ns, "replay done");
            work += 1;
        }
        let quorum = self.quorum_position_bounded(now_ns);
        work += self.publish_new_leadership_term_on_interval(host, quorum, now_ns);
        work += self.publish_commit_position_on_interval(host, quorum, now_ns);
        Ok(work)
    }

    fn leader_init(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        let session = self
            .log_session_id
            .expect("the leader's log publication exists");
        host.join_log_as_leader(
            self.leadership_term_id,
            self.log_position,
            session,
            self.is_leader_startup,
        );
        host.update_recording_log(
            self.leadership_term_id,
            self.log_position,
            NULL_POSITION,
            now_ns,
        );
        // The log's last term stays the one that holds its last entry: the
        // new term holds none until its first entry is appended, and a
        // leader that fails before then must not look more up to date
        // than the members holding entries it lacks (Aeron's election takes
        // the new term here; a simulation found a failed leader so elected
        // again over committed entries it never had).
        self.set_state(host, ElectionState::LeaderReady, now_ns, "");
        Ok(1)
    }

    fn leader_ready(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        self.mark_self(now_ns);
        let term = self.leadership_term_id;
        self.members[self.this_member].leadership_term_id = term;
        let quorum = self.quorum_position_bounded(now_ns);
        let mut work = host.update_leader_position(
            now_ns,
            self.append_position,
            quorum.min(self.commit_bound),
        );
        work += self.publish_new_leadership_term_on_interval(host, quorum, now_ns);
        let joined = has_quorum_at_position(
            &self.members,
            self.leadership_term_id,
            self.log_position,
            now_ns,
            self.timeouts.leader_heartbeat_timeout_ns,
        );
        self.quorum_joined_at_ns = joined.then(|| self.quorum_joined_at_ns.unwrap_or(now_ns));
        // Once a quorum joined, the log publication gets a heartbeat timeout
        // of its own to take the term's first entry (its receivers' status
        // messages must reach it first): on starved CPUs leaders gave their
        // term up 0.3 s after both followers had joined it, and elections
        // followed one another for 11-34 s.
        let deadline_from = self
            .quorum_joined_at_ns
            .unwrap_or(self.time_of_last_state_change_ns);
        if joined && host.append_new_leadership_term_event(now_ns) {
            self.complete(host, now_ns);
            work += 1;
        } else if now_ns >= deadline_from + self.timeouts.leader_heartbeat_timeout_ns {
            // Which of the two failed, and what each member last said: a
            // quorum that joined but a log that refused the term's first
            // entry is another fault than members that never joined.
            let heard: Vec<String> = self
                .members
                .iter()
                .filter(|m| m.id != self.this_id())
                .map(|m| {
                    format!(
                        "member {} at {} in term {}{} {} ms ago",
                        m.id,
                        m.log_position,
                        m.leadership_term_id,
                        if m.has_joined_log { ", joined," } else { "" },
                        (now_ns - m.time_of_last_append_position_ns) / 1_000_000
                    )
                })
                .collect();
            let why = if joined {
                "a quorum joined, but the log publication did not take the term's first entry"
            } else {
                "no quorum joined"
            };
            return Err(event(format!(
                "{why} at log position {} in term {} of leader {} within {} ms ({})",
                self.log_position,
                self.leadership_term_id,
                self.this_id(),
                self.timeouts.leader_heartbeat_timeout_ns / 1_000_000,
                heard.join("; ")
            )));
        }
        Ok(work)
    }

    fn follower_log_replication(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        let mut work = 0;
        if !self.replicating {
            if self.append_position < self.replication_stop_position {
                let leader = self
                    .leader
                    .map(|i| self.members[i].id)
                    .expect("a leader to replicate from");
                host.start_log_replication(
                    leader,
                    self.leader_recording_id,
                    self.replication_stop_position,
                    now_ns,
                );
                self.replicating = true;
                self.replication_deadline_ns = now_ns + self.timeouts.leader_heartbeat_timeout_ns;
                work += 1;
            } else {
                host.update_recording_log(
                    self.replication_leadership_term_id,
                    self.replication_term_base_log_position,
                    self.replication_stop_position,
                    now_ns,
                );
                self.log_leadership_term_id = self.replication_leadership_term_id;
                self.set_state(host, ElectionState::Canvass, now_ns, "replicated");
            }
            return Ok(work);
        }
        let progress = host.poll_log_replication(now_ns).map_err(|e| {
            event(format!(
                "log replication from leader {:?} to {} failed: {e}",
                self.leader_member_id(),
                self.replication_stop_position
            ))
        })?;
        // Bytes copied of the leader's next term are that term's from the
        // first one on: the recording log says so at once, so that a
        // replication cut short is never taken for a suffix of the old term
        // and cut off (its position was reported, and may have been counted
        // towards a commit).
        if self.replication_term_base_log_position != NULL_VALUE
            && progress.position > self.replication_term_base_log_position
            && self.log_leadership_term_id < self.replication_leadership_term_id
        {
            host.update_recording_log(
                self.replication_leadership_term_id,
                self.replication_term_base_log_position,
                NULL_POSITION,
                now_ns,
            );
            self.log_leadership_term_id = self.replication_leadership_term_id;
        }
        // More of its own last term: the recording log holds that term open
        // again (a cut or an election since undone may have closed it lower).
        if self.replication_term_base_log_position == NULL_VALUE
            && progress.position > self.append_position
        {
            host.update_recording_log(
                self.replication_leadership_term_id,
                NULL_VALUE,
                NULL_POSITION,
                now_ns,
            );
        }
        work += self.publish_follower_replication_position(host, progress.position, now_ns);
        if progress.done {
            // What it copied commits with the new term, as the leader's own
            // copy does: waiting here for a commit position that needs this
            // follower in the new term would wait for ever.
            self.append_position = progress.position;
            self.stop_log_replication(host);
            host.update_recording_log(
                self.replication_leadership_term_id,
                self.replication_term_base_log_position,
                self.replication_stop_position,
                now_ns,
            );
            self.log_leadership_term_id = self.replication_leadership_term_id;
            self.set_state(host, ElectionState::Canvass, now_ns, "replicated");
            work += 1;
        } else if now_ns >= self.replication_deadline_ns {
            return Err(event(format!(
                "log replication made no progress for {} ms at {} of {}",
                self.timeouts.leader_heartbeat_timeout_ns / 1_000_000,
                progress.position,
                self.replication_stop_position
            )));
        }
        Ok(work)
    }

    fn follower_replay(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        let next = |e: &Election| {
            if e.catchup_join_position != NULL_POSITION {
                ElectionState::FollowerCatchupInit
            } else {
                ElectionState::FollowerLogInit
            }
        };
        // The log up to the append position is a prefix of the leader's
        // (its NewLeadershipTerm was taken without a cut), so a follower
        // with a tail beyond what it applied says so in the new term (the
        // leader counts only positions reported in its log's term or the new
        // one) and hears the commit position it needs. While it replays, the
        // report is flagged APPEND_FLAG_NOT_JOINED: the leader appends only
        // once a quorum reported after joining its log, and the replay may
        // well reach the append position (the commit covered it), after
        // which this follower joins the live log at the log position, as
        // long as the leader has not appended (three members on real drivers
        // showed the image joining past it otherwise). A tail still beyond
        // the commit position once the replay is done is reported unflagged:
        // the leader cannot commit it before its term's first entry (see
        // commit_bound), so it appends, and this follower joins the new term
        // through catch-up from its applied position. One with nothing
        // beyond says nothing before it joined, as Aeron's followers.
        let tail = self.log_position < self.append_position;
        let work = if tail {
            self.publish_follower_append_position(host, now_ns, APPEND_FLAG_NOT_JOINED, false)
        } else {
            0
        };
        // Only what the leader says is committed is replayed; the rest up to
        // the append position is applied once the new term commits it (a
        // log may end in entries of an earlier term, committed only with
        // the new term's first entry, which this follower gets by joining).
        let target = self.append_position.min(self.notified_commit_position);
        if !self.replaying {
            if self.log_position < target {
                host.start_log_replay(self.log_position, target);
                self.replaying = true;
                self.replay_target = target;
                return Ok(work + 1);
            }
            self.report_uncommitted_tail(host, now_ns);
            let to = next(self);
            self.set_state(host, to, now_ns, "nothing committed to replay");
            return Ok(work + 1);
        }
        let mut terms = Vec::new();
        let done = host.poll_log_replay(&mut terms);
        self.replayed_terms(host, terms, now_ns);
        if let Some(position) = done {
            self.stop_replay(host);
            // Done at the target it was started to, though the commit
            // position may have risen since: judged against the risen one,
            // a whole replay counted as short, and the next attempt replayed
            // from before what this member and its services had applied
            // (a fault run with snapshots: "Cluster log must be contiguous").
            let replayed_to = self.replay_target;
            if position >= replayed_to {
                self.log_position = position;
                // The commit position rose meanwhile: replay on to it (the
                // next call starts there), so what is committed is applied
                // before this member joins the term.
                if self.append_position.min(self.notified_commit_position) > position {
                    return Ok(work + 1);
                }
                self.report_uncommitted_tail(host, now_ns);
                let to = next(self);
                self.set_state(host, to, now_ns, "log replay done");
            } else {
                let reason = format!(
                    "incomplete log replay: to {position} of {replayed_to} (log position {})",
                    self.log_position
                );
                self.log_position = self.log_position.max(position);
                self.set_state(host, ElectionState::Canvass, now_ns, &reason);
            }
            return Ok(work + 1);
        }
        Ok(work)
    }

    /// Replayed what is committed: a tail beyond it is reported as this
    /// follower's position in the new term (see follower_replay).
    fn report_uncommitted_tail(&mut self, host: &mut dyn ElectionHost, now_ns: i64) {
        if self.log_position < self.append_position {
            self.publish_follower_append_position(host, now_ns, 0, true);
        }
    }

    fn follower_catchup_init(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        if !self.subscribed {
            host.add_follower_subscription(
                self.log_session_id.expect("the leader's log session"),
                true,
            );
            self.subscribed = true;
        }
        if let Some(endpoint) = host.catchup_endpoint() {
            let message = CatchupPosition {
                leadership_term_id: self.leadership_term_id,
                log_position: self.log_position,
                follower_member_id: self.this_id(),
                catchup_endpoint: endpoint,
            };
            let leader = self.leader_member_id().expect("a leader");
            if host.send(leader, ConsensusMessage::CatchupPosition(message)) {
                self.time_of_last_update_ns = now_ns;
                self.set_state(host, ElectionState::FollowerCatchupAwait, now_ns, "");
                return Ok(1);
            }
        }
        if self.state_timed_out(now_ns) {
            return Err(event(
                "failed to send the catch-up position to the leader".into(),
            ));
        }
        Ok(1)
    }

    fn follower_catchup_await(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        self.publish_follower_append_position(host, now_ns, APPEND_FLAG_NOT_JOINED, false);
        if !self.join_log(host, now_ns, "FOLLOWER_CATCHUP_AWAIT", "catch-up log")? {
            return Ok(0);
        }
        self.catchup_progress = (host.append_position(), now_ns);
        self.set_state(host, ElectionState::FollowerCatchup, now_ns, "");
        Ok(1)
    }

    fn follower_catchup(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        let mut terms = Vec::new();
        let work = host.catchup_poll(
            self.notified_commit_position,
            self.catchup_join_position,
            now_ns,
            &mut terms,
        );
        self.replayed_terms(host, terms, now_ns);
        // Progress is the log growing: what it copies of the new term commits
        // only once enough followers hold it, this one perhaps among them.
        let position = host.append_position();
        let applied = host.commit_position();
        if position > self.catchup_progress.0 {
            self.catchup_progress = (position, now_ns);
        } else if now_ns - self.catchup_progress.1 >= self.timeouts.leader_heartbeat_timeout_ns {
            return Err(event(format!(
                "no catch-up progress for {} ms at {position} (joining at {}, commit notified {})",
                self.timeouts.leader_heartbeat_timeout_ns / 1_000_000,
                self.catchup_join_position,
                self.notified_commit_position
            )));
        }
        if position >= self.catchup_join_position
            && applied >= self.notified_commit_position.min(position)
            && host.is_catchup_done()
            && !host.is_snapshotting()
        {
            // The leader stopped its replay: its destination goes (Aeron's
            // follower removes it on StopCatchup), the live one stays.
            host.stop_catchup();
            // The term's first entry is in this member's log now (the
            // catch-up reached past the term's base), though perhaps not
            // applied: the recording log says so, as a live join does at
            // its join position. Left to the entry's application, a member
            // caught up into a term reported its log as of the term before
            // in the next election, and was told to cut entries its
            // services had applied (a five-member fault run showed it).
            let base = self.leader_term_base_log_position;
            if base != NULL_POSITION && position > base {
                host.update_recording_log(self.leadership_term_id, base, NULL_POSITION, now_ns);
                self.log_leadership_term_id = self.leadership_term_id;
            }
            self.append_position = position;
            self.log_position = applied;
            self.set_state(host, ElectionState::FollowerLogInit, now_ns, "caught up");
            return Ok(work + 1);
        }
        Ok(work)
    }

    fn follower_log_init(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        // No AppendPosition until it joined (follower_ready): see follower_replay.
        if !self.subscribed {
            if let Some(session) = self.log_session_id {
                host.add_follower_subscription(session, false);
                self.subscribed = true;
                self.set_state(host, ElectionState::FollowerLogAwait, now_ns, "");
            }
        } else {
            self.set_state(host, ElectionState::FollowerReady, now_ns, "");
        }
        Ok(1)
    }

    fn follower_log_await(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        if !self.join_log(host, now_ns, "FOLLOWER_LOG_AWAIT", "live log")? {
            return Ok(0);
        }
        host.update_recording_log(
            self.leadership_term_id,
            self.log_position,
            NULL_POSITION,
            now_ns,
        );
        // Its last log term moves on when the term's first entry arrives,
        // not on joining (see leader_init).
        self.set_state(host, ElectionState::FollowerReady, now_ns, "");
        Ok(1)
    }

    fn follower_ready(&mut self, host: &mut dyn ElectionHost, now_ns: i64) -> Step {
        let leader = self.leader_member_id().expect("a leader");
        let message = AppendPosition {
            leadership_term_id: self.leadership_term_id,
            log_position: self.log_position,
            follower_member_id: self.this_id(),
            flags: 0,
        };
        if host.send(leader, ConsensusMessage::AppendPosition(message)) {
            self.complete(host, now_ns);
        } else if self.state_timed_out(now_ns) {
            return Err(event(
                "the ready follower could not reach the leader".into(),
            ));
        }
        Ok(1)
    }

    // -- helpers ----------------------------------------------------------

    fn complete(&mut self, host: &mut dyn ElectionHost, now_ns: i64) {
        self.errors_in_a_row = 0;
        self.retry_at_ns = 0;
        host.election_complete(now_ns);
        self.set_state(host, ElectionState::Closed, now_ns, "");
    }

    /// The state has lasted a leader heartbeat timeout.
    fn state_timed_out(&self, now_ns: i64) -> bool {
        now_ns >= self.time_of_last_state_change_ns + self.timeouts.leader_heartbeat_timeout_ns
    }

    /// Tries to join the leader's log session (catch-up or live, `what`):
    /// true once joined at this log's position; an error when the join
    /// fails, lands elsewhere or takes a heartbeat timeout.
    fn join_log(
        &mut self,
        host: &mut dyn ElectionHost,
        now_ns: i64,
        state: &str,
        what: &str,
    ) -> Result<bool, ElectionError> {
        let session = self.log_session_id.expect("the leader's log session");
        match host.try_join_log_as_follower(
            session,
            self.log_position,
            self.is_leader_startup,
            now_ns,
        ) {
            JoinStatus::Joined { join_position } => {
                self.verify_join_position(state, join_position)?;
                return Ok(true);
            }
            JoinStatus::Joining { join_position } => {
                self.verify_join_position(state, join_position)?
            }
            JoinStatus::Failed(why) => {
                return Err(event(format!(
                    "failed to add the {what} as follower: {why}"
                )))
            }
            JoinStatus::NoImage => {}
        }
        if self.state_timed_out(now_ns) {
            return Err(event(format!("timed out joining the {what}")));
        }
        Ok(false)
    }

    fn verify_join_position(&self, state: &str, join_position: i64) -> Result<(), ElectionError> {
        if join_position != self.log_position {
            return Err(event(format!(
                "{state}: join position {join_position} is {} than the log position {}",
                if join_position < self.log_position {
                    "less"
                } else {
                    "greater"
                },
                self.log_position
            )));
        }
        Ok(())
    }

    /// This member's own log, in the last term it holds, as the others'
    /// canvass positions are counted.
    fn count_own_log(&mut self) {
        let (term, append) = (self.log_leadership_term_id, self.append_position);
        let me = &mut self.members[self.this_member];
        me.leadership_term_id = term;
        me.log_position = append;
    }

    fn mark_self(&mut self, now_ns: i64) {
        let append = self.append_position;
        let me = &mut self.members[self.this_member];
        me.log_position = append;
        me.has_joined_log = true;
        me.time_of_last_append_position_ns = now_ns;
    }

    /// How far this new leader may say is committed before its term's first
    /// entry is on a quorum: what it had applied when it won, as Raft asks
    /// (an earlier term's entries are committed only through one of the new
    /// term) — unless the new term follows the log's last term directly.
    /// Then no leader of a term between them can have written entries that
    /// a later election could prefer over the ones a quorum holds now (Raft's
    /// "figure 8" needs such a term: its leader's entries on a minority, a
    /// higher last term than the quorum's), so what a quorum holds of this
    /// log is committed as Aeron's election counts it. A whole cluster
    /// restarted on its log is this case: the followers then replay their
    /// own logs while the leader replays its own, rather than failing to join
    /// a log whose tail nobody may apply until the leader's first entry.
    fn commit_bound_on_winning(&self) -> i64 {
        if self.leadership_term_id == self.log_leadership_term_id + 1 {
            i64::MAX
        } else {
            self.log_position
        }
    }

    fn quorum_position_bounded(&mut self, now_ns: i64) -> i64 {
        if self.leader == Some(self.this_member) {
            self.mark_self(now_ns);
        }
        // Members count with logs that end in this leader's last log term
        // (the same entries up to the shorter) or that joined the new term.
        let terms = [self.log_leadership_term_id, self.leadership_term_id];
        cluster_member::quorum_position(
            &self.members,
            &terms,
            now_ns,
            self.timeouts.leader_heartbeat_timeout_ns,
        )
        .min(self.append_position)
    }

    fn update_interval_expired(&self, now_ns: i64, interval_ns: i64) -> bool {
        now_ns - self.time_of_last_update_ns >= interval_ns
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: a deterministic delay per seed, so simulations replay.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn prepare_for_new_leadership(&mut self, host: &mut dyn ElectionHost, now_ns: i64) {
        let last = host.prepare_for_new_leadership(self.log_position, now_ns);
        if last != NULL_POSITION {
            self.append_position = last;
        }
    }

    fn stop_replay(&mut self, host: &mut dyn ElectionHost) {
        if self.replaying {
            host.stop_log_replay();
            self.replaying = false;
        }
        self.last_published_append_position = 0;
    }

    fn stop_log_replication(&mut self, host: &mut dyn ElectionHost) {
        if self.replicating {
            host.stop_log_replication();
            self.replicating = false;
        }
        self.replication_deadline_ns = 0;
        self.last_published_commit_position = 0;
    }

    fn place_vote(
        &mut self,
        host: &mut dyn ElectionHost,
        candidate_term_id: i64,
        candidate_id: i32,
        vote: bool,
    ) {
        if self.member_index(candidate_id).is_some() {
            let message = Vote {
                candidate_term_id,
                log_leadership_term_id: self.log_leadership_term_id,
                log_position: self.append_position,
                candidate_member_id: candidate_id,
                follower_member_id: self.this_id(),
                vote: vote as i32,
            };
            host.send(candidate_id, ConsensusMessage::Vote(message));
        }
    }

    fn publish_canvass_position(&mut self, host: &mut dyn ElectionHost) {
        // Its term is the latest it voted in, too: a leader of an earlier
        // term, which this member will never follow, learns from it that it
        // must step down (as a Raft leader does on any message of a later
        // term), since it ignores requests for votes while a quorum follows it.
        let message = CanvassPosition {
            log_leadership_term_id: self.log_leadership_term_id,
            log_position: self.append_position,
            leadership_term_id: self.leadership_term_id.max(self.voted_through),
            follower_member_id: self.this_id(),
            protocol_version: CONSENSUS_PROTOCOL_VERSION,
        };
        for m in &self.members {
            if m.id != self.members[self.this_member].id {
                host.send(m.id, ConsensusMessage::CanvassPosition(message.clone()));
            }
        }
    }

    fn publish_new_leadership_term_on_interval(
        &mut self,
        host: &mut dyn ElectionHost,
        quorum: i64,
        now_ns: i64,
    ) -> i32 {
        if self.update_interval_expired(now_ns, self.timeouts.leader_heartbeat_interval_ns) {
            self.time_of_last_update_ns = now_ns;
            for i in 0..self.members.len() {
                let log_term = self.log_leadership_term_id;
                self.publish_new_leadership_term_to(host, i, log_term, quorum, now_ns);
            }
            return 1;
        }
        0
    }

    /// NewLeadershipTerm to member `i`, tailored to the log it reported.
    fn publish_new_leadership_term_to(
        &mut self,
        host: &mut dyn ElectionHost,
        i: usize,
        log_leadership_term_id: i64,
        quorum: i64,
        now_ns: i64,
    ) {
        let Some(session) = self.log_session_id else {
            return;
        };
        if i == self.this_member {
            return;
        }
        let leader = LeaderTerm {
            leader_member_id: self.this_id(),
            leadership_term_id: self.leadership_term_id,
            term_base_log_position: self.append_position,
            append_position: self.append_position,
            commit_position: quorum.min(self.commit_bound),
            log_recording_id: host.log_recording_id(),
            log_session_id: session,
            app_version: self.app_version,
            is_startup: self.is_leader_startup,
        };
        let message =
            leader.new_leadership_term(log_leadership_term_id, &|t| host.term_entry(t), now_ns);
        host.send(
            self.members[i].id,
            ConsensusMessage::NewLeadershipTerm(message),
        );
    }

    fn publish_commit_position_on_interval(
        &mut self,
        host: &mut dyn ElectionHost,
        quorum: i64,
        now_ns: i64,
    ) -> i32 {
        let quorum = quorum.min(self.commit_bound);
        if self.last_published_commit_position < quorum
            || (self.last_published_commit_position == quorum
                && now_ns - self.time_of_last_commit_position_update_ns
                    >= self.timeouts.leader_heartbeat_interval_ns)
        {
            self.time_of_last_commit_position_update_ns = now_ns;
            self.last_published_commit_position = quorum;
            let message = CommitPosition {
                leadership_term_id: self.leadership_term_id,
                log_position: quorum,
                leader_member_id: self.this_id(),
            };
            for m in &self.members {
                if m.id != self.members[self.this_member].id {
                    host.send(m.id, ConsensusMessage::CommitPosition(message.clone()));
                }
            }
            return 1;
        }
        0
    }

    fn publish_follower_replication_position(
        &mut self,
        host: &mut dyn ElectionHost,
        position: i64,
        now_ns: i64,
    ) -> i32 {
        if position > self.append_position
            || (position == self.append_position
                && self.update_interval_expired(now_ns, self.timeouts.leader_heartbeat_interval_ns))
        {
            let leader = self.leader_member_id().expect("a leader");
            let message = AppendPosition {
                leadership_term_id: self.leadership_term_id,
                log_position: position,
                follower_member_id: self.this_id(),
                flags: APPEND_FLAG_NOT_JOINED,
            };
            if host.send(leader, ConsensusMessage::AppendPosition(message)) {
                self.append_position = position;
                self.time_of_last_update_ns = now_ns;
                return 1;
            }
        }
        0
    }

    /// Reports the append position (on change or interval, or now when
    /// `force`d) with `flags`.
    fn publish_follower_append_position(
        &mut self,
        host: &mut dyn ElectionHost,
        now_ns: i64,
        flags: u8,
        force: bool,
    ) -> i32 {
        if force
            || self.last_published_append_position != self.append_position
            || self.update_interval_expired(now_ns, self.timeouts.leader_heartbeat_interval_ns)
        {
            let leader = self.leader_member_id().expect("a leader");
            let message = AppendPosition {
                leadership_term_id: self.leadership_term_id,
                log_position: self.append_position,
                follower_member_id: self.this_id(),
                flags,
            };
            if host.send(leader, ConsensusMessage::AppendPosition(message)) {
                self.last_published_append_position = self.append_position;
                self.time_of_last_update_ns = now_ns;
                return 1;
            }
        }
        0
    }

    fn set_state(
        &mut self,
        host: &mut dyn ElectionHost,
        new_state: ElectionState,
        now_ns: i64,
        reason: &str,
    ) {
        if new_state == self.state {
            return;
        }
        if self.state == ElectionState::Canvass {
            self.is_extended_canvass = false;
        }
        match new_state {
            ElectionState::Canvass => {
                self.refused_earlier_leader = None;
                self.canvass_counts_from_ns = now_ns + self.timeouts.election_status_interval_ns;
                for m in self.members.iter_mut() {
                    m.reset();
                }
                self.count_own_log();
                self.leader = None;
                host.set_role(role::FOLLOWER);
            }
            ElectionState::CandidateBallot => host.set_role(role::CANDIDATE),
            ElectionState::LeaderReady => self.quorum_joined_at_ns = None,
            ElectionState::LeaderLogReplication => {
                self.voted_through = self.voted_through.max(self.leadership_term_id);
                self.commit_bound = self.commit_bound_on_winning();
                host.set_role(role::LEADER);
                self.log_session_id = Some(host.add_log_publication(self.append_position));
            }
            ElectionState::FollowerLogReplication | ElectionState::FollowerReplay => {
                host.set_role(role::FOLLOWER)
            }
            _ => {}
        }
        host.log(format!(
            "election member {}: {} -> {}{}{} leader={:?} candidateTermId={} leadershipTermId={} logPosition={} \
             logLeadershipTermId={} appendPosition={} catchupJoinPosition={} notifiedCommitPosition={}",
            self.this_id(),
            self.state,
            new_state,
            if reason.is_empty() { "" } else { ": " },
            reason,
            self.leader_member_id(),
            self.candidate_term_id,
            self.leadership_term_id,
            self.log_position,
            self.log_leadership_term_id,
            self.append_position,
            self.catchup_join_position,
            self.notified_commit_position
        ));
        self.state = new_state;
        self.time_of_last_state_change_ns = now_ns;
        self.time_of_last_update_ns = self.initial_time_of_last_update_ns;
        self.time_of_last_commit_position_update_ns = self.initial_time_of_last_update_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// A host that records what the election does and answers as told.
    #[derive(Default)]
    struct Fake {
        sent: Vec<(i32, ConsensusMessage)>,
        role: i32,
        candidate_term_on_disk: i64,
        append_position: i64,
        truncated_to: Option<i64>,
        replication_error: Option<String>,
        replications: u32,
        /// The replication copies up to here and is done.
        replication_done_at: Option<i64>,
        log: Vec<String>,
        /// The recording log's terms.
        terms: Vec<TermEntry>,
        /// Terms the election recorded: (term, base).
        recorded: Vec<(i64, i64)>,
        /// A catch-up (or live) image joins at this position.
        join_at: Option<i64>,
        /// The catch-up copied up to here and the leader said it is done.
        caught_up_to: Option<i64>,
        /// Where the last log replay was started to (a replay ends there).
        replay_to: Option<i64>,
        /// The log publication refuses the term's first entry (not connected yet).
        append_refused: bool,
    }

    impl ElectionHost for Fake {
        fn send(&mut self, to: i32, message: ConsensusMessage) -> bool {
            self.sent.push((to, message));
            true
        }
        fn set_role(&mut self, role: i32) {
            self.role = role;
        }
        fn role(&self) -> i32 {
            self.role
        }
        fn candidate_term_id(&self) -> i64 {
            self.candidate_term_on_disk
        }
        fn propose_max_candidate_term_id(&mut self, term: i64, _p: i64, _n: i64) -> i64 {
            self.candidate_term_on_disk = self.candidate_term_on_disk.max(term);
            self.candidate_term_on_disk
        }
        fn prepare_for_new_leadership(&mut self, _p: i64, _n: i64) -> i64 {
            self.append_position
        }
        fn truncate_log_entry(&mut self, _t: i64, position: i64) {
            self.truncated_to = Some(position);
            self.append_position = position;
        }
        fn add_log_publication(&mut self, _a: i64) -> i32 {
            99
        }
        fn log_recording_id(&self) -> i64 {
            0
        }
        fn term_entry(&self, t: i64) -> Option<TermEntry> {
            self.terms
                .iter()
                .find(|e| e.leadership_term_id == t)
                .copied()
        }
        fn update_recording_log(&mut self, t: i64, b: i64, _p: i64, _n: i64) {
            self.recorded.push((t, b));
        }
        fn start_log_replay(&mut self, _f: i64, to: i64) {
            self.replay_to = Some(to);
        }
        fn poll_log_replay(&mut self, _t: &mut Vec<TermEvent>) -> Option<i64> {
            Some(self.replay_to.unwrap_or(self.append_position))
        }
        fn stop_log_replay(&mut self) {}
        fn start_log_replication(&mut self, _l: i32, _r: i64, _s: i64, _n: i64) {
            self.replications += 1;
        }
        fn poll_log_replication(&mut self, _n: i64) -> Result<ReplicationProgress, String> {
            match &self.replication_error {
                Some(e) => Err(e.clone()),
                None => {
                    if let Some(end) = self.replication_done_at {
                        self.append_position = end;
                    }
                    Ok(ReplicationProgress {
                        position: self.append_position,
                        done: self.replication_done_at.is_some(),
                    })
                }
            }
        }
        fn stop_log_replication(&mut self) {}
        fn join_log_as_leader(&mut self, _t: i64, _p: i64, _s: i32, _i: bool) {}
        fn update_leader_position(&mut self, _n: i64, _a: i64, _q: i64) -> i32 {
            0
        }
        fn append_new_leadership_term_event(&mut self, _n: i64) -> bool {
            !self.append_refused
        }
        fn election_complete(&mut self, _n: i64) {}
        fn add_follower_subscription(&mut self, _s: i32, _c: bool) {}
        fn catchup_endpoint(&self) -> Option<String> {
            self.join_at.map(|_| "h:9".to_string())
        }
        fn try_join_log_as_follower(&mut self, _s: i32, _p: i64, _i: bool, _n: i64) -> JoinStatus {
            match self.join_at {
                Some(join_position) => JoinStatus::Joined { join_position },
                None => JoinStatus::NoImage,
            }
        }
        fn catchup_poll(&mut self, _l: i64, _j: i64, _n: i64, _t: &mut Vec<TermEvent>) -> i32 {
            0
        }
        fn is_catchup_done(&self) -> bool {
            self.caught_up_to.is_some()
        }
        fn stop_catchup(&mut self) {}
        fn close_log_subscription(&mut self) {}
        fn commit_position(&self) -> i64 {
            0
        }
        fn append_position(&self) -> i64 {
            self.caught_up_to.unwrap_or(0)
        }
        fn is_snapshotting(&self) -> bool {
            false
        }
        fn track_catchup_completion(&mut self, _m: i32, _t: i64, _f: u8) {}
        fn time_of_last_leader_update_ns(&self) -> i64 {
            0
        }
        fn log(&mut self, line: String) {
            self.log.push(line);
        }
        fn restart_required(&mut self, why: String) {
            self.log.push(why);
        }
    }

    fn three() -> Vec<ClusterMember> {
        (0..3)
            .map(|i| ClusterMember::new(i, ["h:1", "h:2", "h:3", "h:4", "h:5"]))
            .collect()
    }

    /// Member 0 with a log of term `term` ending at `append`, in CANVASS at 0 ns.
    fn canvassing(term: i64, append: i64, host: &mut Fake) -> Election {
        host.append_position = append;
        let start = ElectionStart {
            is_node_startup: false,
            graceful_closed_leader_id: -1,
            leadership_term_id: term,
            log_position: 0,
            append_position: append,
            this_member_id: 0,
            app_version: 1,
            seed: 1,
            voted_through: None,
        };
        let mut e = Election::new(start, three(), ElectionTimeouts::default(), 0);
        e.do_work(host, 0);
        assert_eq!(e.state(), ElectionState::Canvass);
        e
    }

    fn votes(host: &Fake) -> Vec<(i32, bool)> {
        host.sent
            .iter()
            .filter_map(|(to, m)| match m {
                ConsensusMessage::Vote(v) => Some((*to, v.vote == 1)),
                _ => None,
            })
            .collect()
    }

    fn canvass(from: i32, log_term: i64, position: i64) -> CanvassPosition {
        CanvassPosition {
            log_leadership_term_id: log_term,
            log_position: position,
            leadership_term_id: log_term,
            follower_member_id: from,
            protocol_version: CONSENSUS_PROTOCOL_VERSION,
        }
    }

    fn request(term: i64, log_term: i64, position: i64, candidate: i32) -> RequestVote {
        RequestVote {
            log_leadership_term_id: log_term,
            log_position: position,
            candidate_term_id: term,
            candidate_member_id: candidate,
            protocol_version: CONSENSUS_PROTOCOL_VERSION,
        }
    }

    #[test]
    fn a_member_alone_elects_itself_at_once_over_a_log_of_an_earlier_term() {
        // A restarted one-member cluster: its log holds term 2 up to 640.
        // It leads term 3 without a canvass or a ballot, and its own log is
        // its quorum: it goes on to replay it (the quorum once stood at 0,
        // its own entry being of no term the leader counted, and the
        // election gave up).
        let mut host = Fake {
            append_position: 640,
            ..Fake::default()
        };
        let start = ElectionStart {
            is_node_startup: true,
            graceful_closed_leader_id: -1,
            leadership_term_id: 2,
            log_position: 0,
            append_position: 640,
            this_member_id: 0,
            app_version: 1,
            seed: 1,
            voted_through: None,
        };
        let alone = vec![ClusterMember::new(0, ["h:1", "h:2", "h:3", "h:4", "h:5"])];
        let mut e = Election::new(start, alone, ElectionTimeouts::default(), 0);
        e.do_work(&mut host, 0);
        assert_eq!(
            (e.state(), e.leader_member_id(), e.leadership_term_id()),
            (ElectionState::LeaderLogReplication, Some(0), 3)
        );
        e.do_work(&mut host, MS);
        assert_eq!(e.state(), ElectionState::LeaderReplay);
        assert!(host.sent.is_empty(), "nobody to ask: {:?}", host.sent);
    }

    #[test]
    fn a_vote_goes_once_per_term_to_a_log_at_least_as_up_to_date_and_the_term_is_on_disk_first() {
        let mut host = Fake::default();
        let mut e = canvassing(2, 640, &mut host);
        e.on_request_vote(&mut host, &request(3, 2, 320, 1), 10 * MS); // shorter log: no
        assert_eq!(votes(&host), vec![(1, false)]);
        assert_eq!(
            host.candidate_term_on_disk, 3,
            "the term is persisted even when refusing"
        );
        e.on_request_vote(&mut host, &request(3, 2, 640, 2), 11 * MS); // same term again: no
        e.on_request_vote(&mut host, &request(4, 2, 640, 2), 12 * MS); // later term, log as good: yes
        assert_eq!(votes(&host), vec![(1, false), (2, false), (2, true)]);
        assert_eq!(
            (host.candidate_term_on_disk, e.state()),
            (4, ElectionState::FollowerBallot)
        );
        e.on_request_vote(&mut host, &request(4, 3, 0, 1), 13 * MS); // another candidate, same term
        assert_eq!(votes(&host).last(), Some(&(1, false)));
    }

    #[test]
    fn a_member_that_hears_every_log_no_better_than_its_own_stands_and_wins_with_a_majority() {
        let mut host = Fake::default();
        let mut e = canvassing(1, 640, &mut host);
        for (id, pos) in [(1, 320), (2, 640)] {
            e.on_canvass_position(&mut host, &canvass(id, 1, pos), 100 * MS);
        }
        e.do_work(&mut host, 102 * MS);
        assert_eq!(e.state(), ElectionState::Nominate);
        e.do_work(&mut host, 600 * MS); // past any nomination delay (< election timeout / 2)
        assert_eq!(
            (e.state(), e.candidate_term_id()),
            (ElectionState::CandidateBallot, 2)
        );
        e.do_work(&mut host, 601 * MS);
        let asked: Vec<i32> = host
            .sent
            .iter()
            .filter(|(_, m)| matches!(m, ConsensusMessage::RequestVote(_)))
            .map(|x| x.0)
            .collect();
        assert_eq!(asked, vec![1, 2]);
        let vote = |from: i32, yes: bool| Vote {
            candidate_term_id: 2,
            log_leadership_term_id: 1,
            log_position: 320,
            candidate_member_id: 0,
            follower_member_id: from,
            vote: yes as i32,
        };
        e.on_vote(&vote(1, true), 602 * MS);
        e.on_vote(&vote(2, false), 602 * MS);
        e.do_work(&mut host, 700 * MS);
        assert_eq!(
            e.state(),
            ElectionState::CandidateBallot,
            "not unanimous: the ballot runs its time"
        );
        e.do_work(&mut host, 1_700 * MS);
        assert_eq!(
            e.state(),
            ElectionState::LeaderLogReplication,
            "a majority of yes wins despite a no"
        );
        assert_eq!(
            (e.leader_member_id(), host.role, e.log_session_id()),
            (Some(0), role::LEADER, Some(99))
        );
    }

    #[test]
    fn a_suffix_the_new_leader_lacks_is_truncated_and_the_election_restarts() {
        let mut host = Fake::default();
        let mut e = canvassing(1, 960, &mut host);
        let nlt = LeaderTerm {
            leader_member_id: 1,
            leadership_term_id: 2,
            term_base_log_position: 640,
            append_position: 700,
            commit_position: 640,
            log_recording_id: 0,
            log_session_id: 5,
            app_version: 1,
            is_startup: false,
        }
        .new_leadership_term(
            1,
            &|t| match t {
                1 => Some(TermEntry {
                    leadership_term_id: 1,
                    term_base_log_position: 0,
                    log_position: 640,
                }),
                2 => Some(TermEntry {
                    leadership_term_id: 2,
                    term_base_log_position: 640,
                    log_position: -1,
                }),
                _ => None,
            },
            0,
        );
        e.on_new_leadership_term(&mut host, &nlt, 5 * MS);
        assert_eq!(host.truncated_to, Some(640));
        assert_eq!((e.state(), e.append_position()), (ElectionState::Init, 640));
        assert!(e
            .last_error()
            .unwrap()
            .0
            .contains("truncating the cluster log of member 0 from 960 to 640"));
    }

    #[test]
    fn failing_attempts_back_off_doubling_and_keep_the_cause() {
        let mut host = Fake {
            replication_error: Some("archive at h:5 refused".into()),
            ..Fake::default()
        };
        let mut e = canvassing(0, 0, &mut host);
        let nlt = |commit| {
            LeaderTerm {
                leader_member_id: 1,
                leadership_term_id: 3,
                term_base_log_position: 640,
                append_position: 640,
                commit_position: commit,
                log_recording_id: 0,
                log_session_id: 5,
                app_version: 1,
                is_startup: false,
            }
            .new_leadership_term(
                0,
                &|t| match t {
                    0 => Some(TermEntry {
                        leadership_term_id: 0,
                        term_base_log_position: 0,
                        log_position: 320,
                    }),
                    1 => Some(TermEntry {
                        leadership_term_id: 1,
                        term_base_log_position: 320,
                        log_position: 640,
                    }),
                    _ => None,
                },
                0,
            )
        };
        let mut now = MS;
        let mut restarts = Vec::new();
        for _ in 0..5 {
            e.on_new_leadership_term(&mut host, &nlt(640), now);
            assert_eq!(e.state(), ElectionState::FollowerLogReplication);
            e.do_work(&mut host, now); // starts the replication
            e.do_work(&mut host, now); // its poll fails
            assert_eq!(e.state(), ElectionState::Init);
            let failed_at = now;
            while e.state() == ElectionState::Init {
                now += MS;
                e.do_work(&mut host, now);
            }
            restarts.push((now - failed_at) / MS);
        }
        // The first retry at once, then 200, 400, 800, 1600 ms: never a tight loop.
        assert_eq!(restarts, vec![1, 200, 400, 800, 1_600]);
        let (why, in_a_row) = e.last_error().unwrap();
        assert!(
            why.contains("archive at h:5 refused") && why.contains("log replication"),
            "{why}"
        );
        assert_eq!(in_a_row, 5);
        assert_eq!(host.replications, 5);
    }

    fn term(id: i64, base: i64, end: i64) -> TermEntry {
        TermEntry {
            leadership_term_id: id,
            term_base_log_position: base,
            log_position: end,
        }
    }

    fn leader_term(term: i64, append: i64) -> LeaderTerm {
        LeaderTerm {
            leader_member_id: 1,
            leadership_term_id: term,
            term_base_log_position: append,
            append_position: append,
            commit_position: 0,
            log_recording_id: 0,
            log_session_id: 5,
            app_version: 1,
            is_startup: false,
        }
    }

    /// Leader 1's NewLeadershipTerm of `new_term` for a member whose log is
    /// all of term 1, 0..640: the leader holds term 1 there too, and its
    /// own term (if another) from 640.
    fn new_term_after_term_1(new_term: i64) -> NewLeadershipTerm {
        let next = |t| {
            (t == 1)
                .then(|| term(1, 0, 640))
                .or_else(|| (t == new_term).then(|| term(new_term, 640, -1)))
        };
        leader_term(new_term, 640).new_leadership_term(1, &next, 0)
    }

    #[test]
    fn a_member_that_voted_in_a_later_term_follows_no_earlier_terms_leader() {
        let mut host = Fake::default();
        let mut e = canvassing(1, 640, &mut host);
        e.on_request_vote(&mut host, &request(3, 1, 640, 2), MS);
        assert_eq!(votes(&host), vec![(2, true)]);
        e.do_work(&mut host, 1_500 * MS); // the ballot times out: canvass again
        assert_eq!(e.state(), ElectionState::Canvass);
        let term_2 = new_term_after_term_1(2);
        e.on_new_leadership_term(&mut host, &term_2, 1_501 * MS);
        assert_eq!(
            e.state(),
            ElectionState::Canvass,
            "a term below the one it voted in"
        );
        // The leader of term 2 goes on leading the others, who canvass no
        // more: after an election timeout this member stands, with a term past
        // the one it voted in, which makes that leader step down.
        e.do_work(&mut host, 2_400 * MS);
        assert_eq!(
            e.state(),
            ElectionState::Canvass,
            "not before an election timeout"
        );
        e.do_work(&mut host, 2_501 * MS);
        assert_eq!(e.state(), ElectionState::Nominate);
        assert!(
            host.log
                .iter()
                .any(|l| l.contains("the leader of term 2 is before term 3")),
            "{:?}",
            host.log
        );
        e.do_work(&mut host, 3_100 * MS);
        assert_eq!(
            (e.state(), e.candidate_term_id()),
            (ElectionState::CandidateBallot, 4)
        );
        e.do_work(&mut host, 4_200 * MS); // every member refused its shorter log
        assert_eq!(e.state(), ElectionState::Canvass);
        let term_3 = new_term_after_term_1(3);
        e.on_new_leadership_term(&mut host, &term_3, 4_201 * MS);
        assert_eq!(e.state(), ElectionState::FollowerReplay);
    }

    #[test]
    fn a_member_that_stood_in_a_later_term_and_lost_follows_the_leader_elected_meanwhile() {
        // Its own vote went to itself: no leader of that term owes it its
        // election, so following an earlier term's leader loses nothing. A
        // clean-clone CI run saw a member refuse so and canvass for good.
        let mut host = Fake::default();
        let mut e = canvassing(1, 640, &mut host);
        for (round, at) in [(2, 0), (3, 2_000)] {
            // Counted from one status interval after the canvass began.
            e.on_canvass_position(&mut host, &canvass(1, 1, 320), (at + 101) * MS);
            e.on_canvass_position(&mut host, &canvass(2, 1, 640), (at + 101) * MS);
            e.do_work(&mut host, (at + 102) * MS);
            e.do_work(&mut host, (at + 600) * MS);
            assert_eq!(
                (e.state(), e.candidate_term_id()),
                (ElectionState::CandidateBallot, round)
            );
            e.do_work(&mut host, (at + 1_700) * MS); // no votes: lost
            assert_eq!(e.state(), ElectionState::Canvass);
        }
        // Member 1 won term 2 with member 2's vote while this member stood in term 3.
        let term_2 = new_term_after_term_1(2);
        e.on_new_leadership_term(&mut host, &term_2, 3_701 * MS);
        assert_eq!(e.state(), ElectionState::FollowerReplay);

        // Had it voted yes for member 2 in term 2, it would not (the test above).
        let mut host = Fake::default();
        let mut e = canvassing(1, 640, &mut host);
        e.on_request_vote(&mut host, &request(2, 1, 640, 2), MS);
        e.do_work(&mut host, 1_500 * MS);
        let term_1 = new_term_after_term_1(1);
        e.on_new_leadership_term(&mut host, &term_1, 1_501 * MS);
        assert_eq!(e.state(), ElectionState::Canvass);
    }

    #[test]
    fn canvass_positions_queued_before_the_canvass_began_do_not_make_a_member_stand() {
        // A leader paused past the heartbeat timeout comes back to the others'
        // positions from an election long over, queued for it. Counted, they
        // made it stand at once on a stale log (2 of 4 runs of a pause) and
        // the leader elected meanwhile stepped down for its request.
        let mut host = Fake::default();
        let mut e = canvassing(1, 640, &mut host);
        for (id, pos) in [(1, 640), (2, 320)] {
            e.on_canvass_position(&mut host, &canvass(id, 1, pos), MS);
        }
        e.do_work(&mut host, 2 * MS);
        e.do_work(&mut host, 99 * MS);
        assert_eq!(
            e.state(),
            ElectionState::Canvass,
            "stale positions do not count"
        );
        e.do_work(&mut host, 20_000 * MS); // past the heartbeat timeout: still no quorum heard
        assert_eq!(e.state(), ElectionState::Canvass);
        // The leader's answer to its own canvass: it follows.
        let term_2 = new_term_after_term_1(2);
        e.on_new_leadership_term(&mut host, &term_2, 20_001 * MS);
        assert_eq!(e.state(), ElectionState::FollowerReplay);

        // Members that canvass now send their positions again within the
        // status interval, and those count.
        let mut host = Fake::default();
        let mut e = canvassing(1, 640, &mut host);
        e.on_canvass_position(&mut host, &canvass(1, 1, 640), MS);
        e.on_canvass_position(&mut host, &canvass(1, 1, 640), 100 * MS);
        e.on_canvass_position(&mut host, &canvass(2, 1, 320), 150 * MS);
        e.do_work(&mut host, 151 * MS);
        assert_eq!(e.state(), ElectionState::Nominate);
    }

    #[test]
    fn a_canvass_says_the_latest_term_the_member_voted_in() {
        // So a leader of an earlier term, which ignores requests for votes
        // while a quorum follows it, learns that this member will not follow
        // it and steps down.
        let mut host = Fake::default();
        let mut e = canvassing(1, 640, &mut host);
        e.on_request_vote(&mut host, &request(3, 1, 640, 2), MS);
        e.do_work(&mut host, 1_500 * MS); // the ballot times out: canvass again
        assert_eq!(e.state(), ElectionState::Canvass);
        host.sent.clear();
        e.do_work(&mut host, 1_700 * MS);
        let terms: Vec<(i64, i64)> = host
            .sent
            .iter()
            .filter_map(|(_, m)| match m {
                ConsensusMessage::CanvassPosition(c) => {
                    Some((c.log_leadership_term_id, c.leadership_term_id))
                }
                _ => None,
            })
            .collect();
        assert_eq!(terms, vec![(1, 3), (1, 3)]);
    }

    #[test]
    fn only_the_current_terms_commit_position_is_taken() {
        let mut host = Fake::default();
        let mut e = canvassing(1, 640, &mut host);
        let nlt =
            leader_term(2, 640).new_leadership_term(1, &|t| (t == 1).then(|| term(1, 0, 640)), 0);
        e.on_new_leadership_term(&mut host, &nlt, MS);
        assert_eq!(e.state(), ElectionState::FollowerReplay);
        let commit = |term, position| CommitPosition {
            leadership_term_id: term,
            log_position: position,
            leader_member_id: 1,
        };
        e.on_commit_position(&mut host, &commit(3, 9_000), 2 * MS); // the same leader, a later term
        assert_eq!(e.notified_commit_position(), 0);
        e.on_commit_position(&mut host, &commit(2, 320), 3 * MS);
        assert_eq!(e.notified_commit_position(), 320);
    }

    #[test]
    fn a_follower_joins_the_new_term_without_waiting_for_its_tail_to_commit() {
        // Its log (0..640, all of term 1) is the leader's; none of it is
        // committed yet: it commits with the new term's first entry, which
        // needs this follower in the new term (a 5-member cluster with two
        // down). Waiting in FOLLOWER_REPLAY for a commit position to replay
        // to would wait for ever (the simulation's 5-member seed 3888).
        let mut host = Fake::default();
        let mut e = canvassing(1, 640, &mut host);
        let nlt =
            leader_term(2, 640).new_leadership_term(1, &|t| (t == 1).then(|| term(1, 0, 640)), 0);
        e.on_new_leadership_term(&mut host, &nlt, MS);
        assert_eq!(e.state(), ElectionState::FollowerReplay);
        assert_eq!(e.notified_commit_position(), 0);
        e.do_work(&mut host, 2 * MS);
        assert_eq!(e.state(), ElectionState::FollowerLogInit, "{:?}", host.log);
        assert_eq!(
            e.log_position(),
            0,
            "nothing replayed: nothing is committed"
        );
    }

    #[test]
    fn a_replay_done_at_its_target_is_done_though_the_commit_position_rose_meanwhile() {
        // It holds term 1 to 640; the leader says 320 is committed, so it
        // replays to 320; the commit position rises to 640 before the
        // replay's end is seen. The replay is whole: the follower's log
        // position is 320 (judged against 640 it was taken as short, and
        // the next attempt replayed from before what the services had
        // applied), and it replays on from there to 640.
        let mut host = Fake::default();
        let mut e = canvassing(1, 640, &mut host);
        let leader = LeaderTerm {
            commit_position: 320,
            ..leader_term(2, 640)
        };
        let nlt = leader.new_leadership_term(1, &|t| (t == 1).then(|| term(1, 0, 640)), 0);
        e.on_new_leadership_term(&mut host, &nlt, MS);
        assert_eq!(e.state(), ElectionState::FollowerReplay);
        e.do_work(&mut host, 2 * MS); // starts the replay to 320
        assert_eq!(host.replay_to, Some(320));
        let commit = CommitPosition {
            leadership_term_id: 2,
            log_position: 640,
            leader_member_id: 1,
        };
        e.on_commit_position(&mut host, &commit, 3 * MS);
        e.do_work(&mut host, 4 * MS); // the replay's end: whole, and more is committed now
        assert_eq!(e.state(), ElectionState::FollowerReplay, "{:?}", host.log);
        assert_eq!(e.log_position(), 320);
        e.do_work(&mut host, 5 * MS); // replays on from 320 to 640
        assert_eq!(host.replay_to, Some(640));
        e.do_work(&mut host, 6 * MS);
        assert_eq!(e.state(), ElectionState::FollowerLogInit, "{:?}", host.log);
        assert_eq!(e.log_position(), 640);
    }

    #[test]
    fn a_follower_caught_up_into_the_leaders_term_records_that_term_in_its_recording_log() {
        // Its log is term 1 up to 640; the leader's term 2 began at 640 and
        // has entries to 800. The follower catches up to 800, none of term
        // 2 applied yet: its log's last term is 2 from here on (else the
        // next election would compare its log as of term 1 and have it cut
        // term 2's entries, applied by then; a five-member fault run).
        let mut host = Fake {
            join_at: Some(0),
            ..Fake::default()
        };
        let mut e = canvassing(1, 640, &mut host);
        let leader = LeaderTerm {
            term_base_log_position: 640,
            ..leader_term(2, 800)
        };
        let nlt = leader.new_leadership_term(1, &|t| (t == 1).then(|| term(1, 0, 640)), 0);
        e.on_new_leadership_term(&mut host, &nlt, MS);
        assert_eq!(e.state(), ElectionState::FollowerReplay);
        for at in 2..6 {
            e.do_work(&mut host, at * MS);
        }
        assert_eq!(e.state(), ElectionState::FollowerCatchup, "{:?}", host.log);
        assert!(host.recorded.is_empty());
        host.caught_up_to = Some(800);
        e.do_work(&mut host, 7 * MS);
        assert_eq!(e.state(), ElectionState::FollowerLogInit, "{:?}", host.log);
        assert_eq!(host.recorded, vec![(2, 640)]);
    }

    #[test]
    fn a_follower_that_copied_what_it_lacked_goes_on_without_waiting_for_it_to_commit() {
        // It holds term 1 up to 320; the leader's term 1 ends at 640 and
        // nothing of it is committed yet (it commits with term 2's first
        // entry, which may need this follower). Once copied, it canvasses
        // again and joins; waiting for a commit position of 640 here would
        // wait for ever (the simulation's 5-member seed 3888).
        let mut host = Fake {
            replication_done_at: Some(640),
            ..Fake::default()
        };
        let mut e = canvassing(1, 320, &mut host);
        let nlt =
            leader_term(2, 640).new_leadership_term(1, &|t| (t == 1).then(|| term(1, 0, 640)), 0);
        e.on_new_leadership_term(&mut host, &nlt, MS);
        assert_eq!(e.state(), ElectionState::FollowerLogReplication);
        assert_eq!(e.notified_commit_position(), 0);
        e.do_work(&mut host, 2 * MS); // starts the replication
        e.do_work(&mut host, 3 * MS); // done
        assert_eq!(e.state(), ElectionState::Canvass, "{:?}", host.log);
        assert_eq!(e.append_position(), 640);
    }

    #[test]
    fn a_leader_lacking_the_followers_last_term_has_it_cut_back_to_where_that_term_began() {
        // The leader's log went from term 2 to term 5: it never had term 3.
        let leader = leader_term(5, 2_000);
        let terms = |t| match t {
            2 => Some(term(2, 0, 1_280)),
            4 => Some(term(4, 1_280, 1_280)), // filled in empty
            _ => None,
        };
        let nlt = leader.new_leadership_term(3, &terms, 0);
        assert_eq!(
            (nlt.next_leadership_term_id, nlt.next_term_base_log_position),
            (3, NULL_POSITION)
        );
        let mut host = Fake {
            terms: vec![term(2, 0, 1_024), term(3, 1_024, -1)],
            ..Fake::default()
        };
        let mut e = canvassing(3, 1_600, &mut host);
        e.on_new_leadership_term(&mut host, &nlt, MS);
        assert_eq!(
            host.truncated_to,
            Some(1_024),
            "back to where its term 3 began"
        );
        assert_eq!(e.state(), ElectionState::Init);
        assert!(e
            .last_error()
            .unwrap()
            .0
            .contains("holds nothing of its last term 3"));
    }

    /// Member 0 with a log of term 1 to 640, applied to 0, wins term 2 with
    /// both others at the same log.
    fn leader_of_term_2(host: &mut Fake) -> Election {
        leader_of_term(host, 2)
    }

    /// A member whose log ends at 640 in term 1, leader of `term` (a term
    /// above 2: the terms between were voted on but never led).
    fn leader_of_term(host: &mut Fake, term: i64) -> Election {
        host.candidate_term_on_disk = term - 1;
        let mut e = canvassing(1, 640, host);
        for id in [1, 2] {
            let c = CanvassPosition {
                log_leadership_term_id: 1,
                log_position: 640,
                leadership_term_id: 1,
                follower_member_id: id,
                protocol_version: CONSENSUS_PROTOCOL_VERSION,
            };
            e.on_canvass_position(host, &c, 100 * MS); // one status interval into the canvass
        }
        e.do_work(host, 101 * MS);
        e.do_work(host, 600 * MS);
        for id in [1, 2] {
            let v = Vote {
                candidate_term_id: term,
                log_leadership_term_id: 1,
                log_position: 640,
                candidate_member_id: 0,
                follower_member_id: id,
                vote: 1,
            };
            e.on_vote(&v, 601 * MS);
        }
        e.do_work(host, 602 * MS);
        assert_eq!(e.state(), ElectionState::LeaderLogReplication);
        e
    }

    #[test]
    fn a_leader_gives_its_log_a_heartbeat_timeout_from_when_a_quorum_joined() {
        // On starved CPUs a follower joined late in LEADER_READY, and its
        // leader gave the term up 0.3 s later while the log publication had
        // not yet taken the term's first entry.
        for taken_at in [None, Some(12_000)] {
            let mut host = Fake {
                append_refused: true,
                ..Fake::default()
            };
            let mut e = leader_of_term_2(&mut host);
            let mut t = 603;
            while e.state() != ElectionState::LeaderReady {
                e.do_work(&mut host, t * MS);
                t += 1;
                assert!(t < 700, "{:?}", e.state());
            }
            let joined = |at: i64, e: &mut Election, host: &mut Fake| {
                let m = AppendPosition {
                    leadership_term_id: 2,
                    log_position: 640,
                    follower_member_id: 1,
                    flags: 0,
                };
                e.on_append_position(host, &m, at * MS);
            };
            joined(t + 9_500, &mut e, &mut host);
            e.do_work(&mut host, (t + 9_501) * MS);
            e.do_work(&mut host, (t + 10_500) * MS);
            assert_eq!(
                e.state(),
                ElectionState::LeaderReady,
                "past the state's timeout, but the quorum joined 1 s ago"
            );
            joined(t + 15_000, &mut e, &mut host);
            if let Some(at) = taken_at {
                host.append_refused = false;
                e.do_work(&mut host, (t + at) * MS);
                assert_eq!(e.state(), ElectionState::Closed);
                continue;
            }
            e.do_work(&mut host, (t + 19_000) * MS);
            assert_eq!(e.state(), ElectionState::LeaderReady);
            e.do_work(&mut host, (t + 19_600) * MS);
            assert_ne!(e.state(), ElectionState::LeaderReady);
            let (why, _) = e.last_error().expect("the cause kept");
            assert!(
                why.contains(
                    "a quorum joined, but the log publication did not take the term's first entry"
                ) && why.contains("member 1 at 640 in term 2, joined,"),
                "{why}"
            );
        }
    }

    /// The commit positions a new leader announced (CommitPosition and
    /// NewLeadershipTerm) once a quorum holds its whole log, of term 1.
    fn commits_announced(term: i64) -> Vec<i64> {
        let mut host = Fake::default();
        let mut e = leader_of_term(&mut host, term);
        assert_eq!(e.leadership_term_id, term);
        host.sent.clear();
        e.do_work(&mut host, 603 * MS);
        host.sent
            .iter()
            .filter_map(|(_, m)| match m {
                ConsensusMessage::CommitPosition(c) => Some(c.log_position),
                ConsensusMessage::NewLeadershipTerm(n) => Some(n.commit_position),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_new_leader_announces_no_commit_beyond_what_it_had_when_it_won() {
        // Term 2 was voted on and never led: a term between the log's and
        // this one, so the quorum's copies of term 1 prove nothing yet.
        let commits = commits_announced(3);
        assert!(
            !commits.is_empty() && commits.iter().all(|&c| c == 0),
            "{commits:?}"
        );
    }

    #[test]
    fn a_leader_of_the_term_after_its_logs_commits_what_a_quorum_holds() {
        // A whole cluster restarted on its log elects the term after the
        // log's: the followers hear the quorum's position and replay their
        // own logs while the leader replays its own. Bounded at 0 they had
        // nothing to replay, failed to join a log 640 ahead of them, and
        // called election after election until the leader's first entry.
        let commits = commits_announced(2);
        assert!(
            !commits.is_empty() && commits.iter().all(|&c| c == 640),
            "{commits:?}"
        );
    }

    #[test]
    fn a_leader_that_fails_before_its_first_entry_keeps_its_log_term() {
        let mut host = Fake::default();
        let mut e = leader_of_term_2(&mut host);
        for t in 603..=606 {
            e.do_work(&mut host, t * MS); // replay, init: ready, its term recorded
        }
        assert_eq!(e.state(), ElectionState::LeaderReady);
        e.do_work(&mut host, 20_000 * MS); // no quorum joins: it gives way
        e.do_work(&mut host, 20_001 * MS);
        host.sent.clear();
        e.do_work(&mut host, 21_000 * MS);
        let canvass: Vec<i64> = host
            .sent
            .iter()
            .filter_map(|(_, m)| match m {
                ConsensusMessage::CanvassPosition(c) => Some(c.log_leadership_term_id),
                _ => None,
            })
            .collect();
        assert!(
            !canvass.is_empty() && canvass.iter().all(|&t| t == 1),
            "{canvass:?}"
        );
    }
}
