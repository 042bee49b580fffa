//! What a member keeps and does beside the module's own state
//! ([`Replicated`]; in Aeron, the parts of `ConsensusModuleAgent` around its
//! `Election`), whatever the member count: the module is the election's
//! host on the real media driver and archive, and after it the leader
//! replicates its log and commits what a quorum recorded, a follower
//! records the leader's log and applies what the leader says is committed.
//! A member alone elects itself at once and has nobody to replicate to.
//!
//! The log's path is the one `tests/log_path.rs` checks: the leader's log
//! is an exclusive publication in manual MDC mode with a destination per
//! follower's log endpoint, recorded by its own archive (LOCAL) and read by
//! its services through a spy; a follower subscribes in manual MDS mode
//! with its log endpoint as a destination, and its archive (REMOTE) and its
//! services subscribe through that subscription's tag.
//!
//! In an election the module replays its own log's committed part
//! (`LogReplay`), copies terms it lacks from the leader's archive
//! (`LogReplication`), truncates an uncommitted tail the leader lacks, and a
//! follower behind the leader's term catches up from the leader's archive:
//! the leader replays its recording to the follower's catch-up endpoint with
//! the log's session id, so the replay and then the live log fill one image.

use super::{err, with_param, ConsensusModule};
use crate::module::consensus_adapter::ConsensusAdapter;
use crate::module::consensus_publisher::{ConsensusPublisher, Outbound};
use crate::module::election::{
    beyond_term, split_sync_level, BeyondTerm, ConsensusMessage, Election, ElectionHost,
    ElectionStart, ElectionState, ElectionTimeouts, JoinStatus, LeaderTerm, ReplicationProgress,
    TermEntry, TermEvent,
};
use crate::module::log_replay::LogReplay;
use crate::module::log_replication::LogReplication;
use crate::module::node_state_file::NodeStateFile;
use crate::service::log_adapter::LogEntry;
use crate::service::snapshot_taker::{find_recording_counter, RECORDING_POSITION_TYPE_ID};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};
use sulis_archive::client::Replication;
use sulis_client::{AssembledMessages, FragmentAssembler, Subscription};
use sulis_protocol::archive::messages::source_location;
use sulis_protocol::cluster::members_response::{ClusterMembersExtendedResponse, MemberStatus};
use sulis_protocol::cluster::messages::{
    role, AppendPosition, BackupQuery, ChallengeResponse, ClusterMembersResponse, JoinLog,
    NewLeadershipTermEvent, RecordingLogQuery, NULL_POSITION,
};
use sulis_protocol::counters::parse_recording_position_key;

/// The consensus stream's id (Aeron's 108).
pub const CONSENSUS_STREAM_ID: i32 = 108;

/// Most challenged backup queries waiting for their answers at once (one
/// per image); past it the oldest is given up.
const MAX_BACKUP_CHALLENGES: usize = 16;

/// The id the authenticator knows a backup query from `image` by: below
/// every client session's (which are not negative) and -1, one per image.
/// On the wire a backup query's session id is -1, as in Aeron.
fn backup_auth_id(image: i32) -> i64 {
    -(1i64 << 32) - i64::from(image)
}

/// What a member keeps beside the module's own state: its election and replication.
pub(super) struct Replicated {
    node_state: NodeStateFile,
    publisher: ConsensusPublisher,
    adapter: ConsensusAdapter,
    pub(super) election: Option<Election>,
    timeouts: ElectionTimeouts,
    /// The log's UDP channel (the option's, or plain UDP for an IPC one).
    log_udp: String,
    /// Follower: the MDS subscription the log arrives on, and its tag
    /// (shared by the archive's and the services' subscriptions). Kept
    /// across terms, and made anew when an election attempt finds an
    /// earlier attempt's image of the session it must join
    /// (`replace_follower_log`).
    follower_log: Option<(Subscription, i64)>,
    /// Whether the live log endpoint is one of its destinations.
    live_destination: bool,
    /// The last failure to add it, said once.
    last_destination_error: Option<String>,
    /// The leader's log session this member follows (or joins) now.
    follower_session: Option<i32>,
    follower_assembler: FragmentAssembler,
    /// Entries read after a SNAPSHOT action, applied once the snapshot is
    /// recorded.
    deferred: AssembledMessages,
    /// The followed log's entries of a poll (kept for their buffers).
    follower_messages: AssembledMessages,
    /// Members whose AppendPositions were refused for their sync level,
    /// and in which term: said once each.
    unsynced_said: Vec<(i32, i64)>,
    /// The sync level each member's last AppendPosition said.
    sync_levels: Vec<(i32, u8)>,
    /// The leader of the term this member runs (after its election).
    leader_member_id: i32,
    log_session_id: i32,
    /// The election ended (`election_complete`); the module takes it.
    completed: bool,
    /// What the elections this process ran know of its votes
    /// (`Election::voted_through`); None before the first ends.
    voted_through: Option<i64>,
    /// Services joined the log of this term (JoinLog acked).
    services_joined: bool,
    /// The leader of this term had just started (its sessions are closed, not taken over).
    is_leader_startup: bool,
    /// Why the node must stop (the new leader lacks what it applied).
    restart: Option<String>,
    /// The log's recording stopped during an election and was not started
    /// again since: checked once the election ends (a full disk in a
    /// leader's LEADER_READY must not leave it leading unrecorded).
    pub(super) recording_lost_in_election: bool,
    /// Why the member leaves its term for an election (its log's recording
    /// stopped with no error), taken at the end of the duty cycle.
    step_down: Option<String>,
    /// When this member last heard its leader (after the election).
    last_leader_update_ns: i64,
    /// The last request for votes ignored for stickiness (candidate, term),
    /// so the log says so once, not on every retry.
    ignored_request_vote: (i32, i64),
    /// A copy of terms this member lacks from the leader's archive, or why
    /// it could not start.
    replication: Option<Result<LogReplication, String>>,
    /// The local log replayed through the module and services in an election.
    replay: Option<LogReplay>,
    /// Leader: each catching-up follower's replay from this member's
    /// archive to its catch-up endpoint (member id, replay session id).
    catchups: Vec<(i32, i64)>,
    /// Follower catching up: the leader and term it asked, its last
    /// AppendPosition (position, when), and whether the leader said it is done.
    catchup_of: Option<(i32, i64)>,
    catchup_reported: (i64, i64),
    catchup_done: bool,
    /// Answers to members seeding themselves (RecordingLogQuery), offered
    /// until taken or their deadline passes: publication, message, deadline.
    seed_answers: Vec<(sulis_client::Publication, Vec<u8>, i64)>,
    /// Backup queries the authenticator challenged, waiting for their
    /// ClusterBackup's answers: the image each came on (its answer is taken
    /// only from there), the query, and when it is given up. One per image,
    /// at most [`MAX_BACKUP_CHALLENGES`].
    backup_challenges: Vec<(i32, BackupQuery, i64)>,
}

impl Replicated {
    /// The file sync level this member's AppendPositions say.
    pub(super) fn set_file_sync_level(&mut self, level: u8) {
        self.publisher.set_file_sync_level(level);
    }
}

static NEXT_TAG: AtomicI64 = AtomicI64::new(0);

/// A tag no other subscription of this driver uses (Aeron takes a
/// correlation id): the process id and a count.
fn next_tag() -> i64 {
    ((std::process::id() as i64) << 24) + NEXT_TAG.fetch_add(1, Ordering::Relaxed) + 1
}

fn host_of(endpoint: &str) -> &str {
    endpoint.rsplit_once(':').map_or(endpoint, |(h, _)| h)
}

impl ConsensusModule {
    /// Starts the member's election (a member alone elects itself), from
    /// its latest snapshot's position `base`.
    pub(super) fn start_replicated(&mut self, base: i64) -> Result<(), String> {
        let ctx = &self.ctx;
        let node_state = NodeStateFile::open(&ctx.cluster_dir)?;
        let publisher = ConsensusPublisher::connect(
            &self.io.client,
            &self.members,
            ctx.member_id,
            &ctx.consensus_channel,
            ctx.consensus_stream_id,
        )?;
        let me = self
            .members
            .iter()
            .find(|m| m.id == ctx.member_id)
            .expect("checked at launch");
        let consensus = with_param(
            &ctx.consensus_channel,
            &format!("endpoint={}", me.consensus_endpoint),
        );
        let subscription = self
            .io
            .client
            .add_subscription(&consensus, ctx.consensus_stream_id)
            .map_err(|e| err(&consensus, e))?;
        let log_udp = if ctx.log_channel.starts_with("aeron:ipc") {
            "aeron:udp".to_string()
        } else {
            ctx.log_channel.clone()
        };
        let timeouts = ElectionTimeouts {
            election_timeout_ns: ctx.election_timeout.as_nanos() as i64,
            election_status_interval_ns: ctx.election_status_interval.as_nanos() as i64,
            leader_heartbeat_timeout_ns: ctx.leader_heartbeat_timeout.as_nanos() as i64,
            leader_heartbeat_interval_ns: ctx.leader_heartbeat_interval.as_nanos() as i64,
            startup_canvass_timeout_ns: ctx.startup_canvass_timeout.as_nanos() as i64,
        };
        self.replicated = Some(Box::new(Replicated {
            node_state,
            publisher,
            adapter: ConsensusAdapter::new(subscription),
            election: None,
            timeouts,
            log_udp,
            follower_log: None,
            live_destination: false,
            last_destination_error: None,
            follower_session: None,
            follower_assembler: FragmentAssembler::new(),
            deferred: AssembledMessages::new(),
            follower_messages: AssembledMessages::new(),
            leader_member_id: -1,
            log_session_id: 0,
            completed: false,
            voted_through: None,
            services_joined: false,
            is_leader_startup: true,
            restart: None,
            recording_lost_in_election: false,
            step_down: None,
            last_leader_update_ns: 0,
            ignored_request_vote: (-1, -1),
            replication: None,
            replay: None,
            catchups: Vec::new(),
            catchup_of: None,
            catchup_reported: (NULL_POSITION, 0),
            catchup_done: false,
            seed_answers: Vec::new(),
            backup_challenges: Vec::new(),
            unsynced_said: Vec::new(),
            sync_levels: Vec::new(),
        }));
        let level = self.ctx.file_sync_level;
        self.rep().set_file_sync_level(level);
        self.term_base_log_position = base;
        self.begin_election(true, base);
        Ok(())
    }

    /// A member at start: loads its latest snapshot and finds
    /// its log's recording, which must have stopped; returns the snapshot's
    /// position (0 without one), where the election's replay begins.
    pub(super) fn recover_replicated(&mut self) -> Result<i64, String> {
        let from = self.load_latest_snapshot()?;
        if let Some(last) = self.recording_log.last_term().cloned() {
            self.stopped_log_end(last.recording_id, from)?;
        }
        self.agent.commit_position = from;
        Ok(from)
    }

    /// One of this member's endpoints (`which` picks it), from the members string.
    fn own_endpoint(
        &self,
        which: fn(&crate::module::cluster_member::ClusterMember) -> &String,
    ) -> String {
        self.members
            .iter()
            .find(|m| m.id == self.ctx.member_id)
            .map(|m| which(m).clone())
            .unwrap_or_default()
    }

    fn rep(&mut self) -> &mut Replicated {
        self.replicated
            .as_mut()
            .expect("a cluster of several members")
    }

    /// A new election from where this member's log stands.
    fn begin_election(&mut self, is_node_startup: bool, log_position: i64) {
        let now_ns = self.now_ns();
        let append = self.recorded_position().max(log_position);
        let last_term = self
            .recording_log
            .last_term()
            .map_or(-1, |t| t.leadership_term_id);
        let start = ElectionStart {
            is_node_startup,
            graceful_closed_leader_id: -1,
            leadership_term_id: last_term,
            log_position,
            append_position: append,
            this_member_id: self.ctx.member_id,
            app_version: self.ctx.app_version,
            seed: now_ns as u64 ^ ((self.ctx.member_id as u64 + 1) << 40),
            voted_through: self.replicated.as_ref().and_then(|r| {
                r.election
                    .as_ref()
                    .map(|e| e.voted_through())
                    .or(r.voted_through)
            }),
        };
        // A leader's catch-up replays end with its term, and so does a
        // follower's catch-up (its destination goes).
        for (_, replay) in std::mem::take(&mut self.rep().catchups) {
            let _ = self.archive.stop_replay(replay);
        }
        if self
            .replicated
            .as_ref()
            .is_some_and(|r| r.catchup_of.is_some())
        {
            ElectionHost::stop_catchup(self);
        }
        // So does a snapshot being taken (the services' acks are not read
        // in an election): the set is not recorded, the one before stays the
        // one to recover from. Entries read after its action were not
        // applied: the election replays them from this member's log.
        self.rep().deferred.clear();
        if let Some(pending) = self.snapshot.take() {
            let why = format!(
                "the term ended while the snapshot at {} was taken",
                pending.mark.log_position
            );
            self.log_event(format!("member {}: {why}", self.ctx.member_id));
            self.last_snapshot_error = Some(why);
            self.failed_snapshot_count += 1;
        }
        let members = self.members.clone();
        let rep = self.rep();
        rep.completed = false;
        rep.services_joined = false;
        let timeouts = rep.timeouts;
        rep.election = Some(Election::new(start, members, timeouts, now_ns));
        self.election_state.set(ElectionState::Init.code() as i64);
        self.election_count.set(self.election_count.get() + 1);
        self.agent.state = crate::module::consensus_module_agent::ModuleState::Init;
        self.publish_state();
    }

    /// The election's state (for the election-state counter and tools).
    pub fn election_state(&self) -> Option<ElectionState> {
        self.replicated
            .as_ref()
            .and_then(|r| r.election.as_ref().map(|e| e.state()))
    }

    /// The member leading the term this member runs (−1 during an election).
    pub fn leader_member_id(&self) -> i32 {
        match &self.replicated {
            Some(r) if r.election.is_none() => r.leader_member_id,
            Some(_) => -1,
            None => self.ctx.member_id,
        }
    }

    /// The answer to a ClusterMembersQuery (`list-members`, Aeron's
    /// ClusterTool too): the members, the leader this member knows (−1
    /// during an election) and each member's log as last reported to it
    /// (its own: its recording's end now).
    pub(super) fn members_answer(&self, correlation_id: i64, extended: bool) -> Vec<u8> {
        let leader = self.leader_member_id();
        if !extended {
            let active = self
                .members
                .iter()
                .map(|m| format!("{},{}", m.id, m.endpoints()))
                .collect::<Vec<_>>()
                .join("|");
            return ClusterMembersResponse {
                correlation_id,
                leader_member_id: leader,
                active_members: active,
                passive_followers: String::new(),
            }
            .encode();
        }
        let now_ns = self.now_ns();
        let me = self.ctx.member_id;
        let own = self.append_position();
        let heard_from_leader = self.time_of_last_leader_update_ns();
        let active_members = self
            .members
            .iter()
            .map(|m| {
                let (term, position, time) = if m.id == me {
                    (self.agent.leadership_term_id, own, now_ns)
                } else if m.id == leader && leader != me && leader >= 0 {
                    // A follower hears its leader's commit position, not its
                    // appends: that is what it can say of the leader (before,
                    // the leader showed as term -1 with no position).
                    (
                        self.agent.leadership_term_id,
                        self.agent.notified_commit_position,
                        heard_from_leader,
                    )
                } else {
                    (
                        m.leadership_term_id,
                        m.log_position,
                        m.time_of_last_append_position_ns,
                    )
                };
                MemberStatus {
                    leadership_term_id: term,
                    log_position: position,
                    time_of_last_append_ns: time,
                    member_id: m.id,
                    ingress_endpoint: m.ingress_endpoint.clone(),
                    consensus_endpoint: m.consensus_endpoint.clone(),
                    log_endpoint: m.log_endpoint.clone(),
                    catchup_endpoint: m.catchup_endpoint.clone(),
                    archive_endpoint: m.archive_endpoint.clone(),
                }
            })
            .collect();
        ClusterMembersExtendedResponse {
            correlation_id,
            current_time_ns: now_ns,
            leader_member_id: leader,
            member_id: me,
            active_members,
            passive_members: Vec::new(),
        }
        .encode()
    }

    /// The log recording's position counter, while it counts this
    /// recording: a recording that stopped (its image gone) frees its
    /// counter, whose slot then reads 0 or another counter's value.
    fn live_recorded_position(&self) -> Option<i64> {
        let id = self.recording_position_counter;
        if id < 0 {
            return None;
        }
        let counters = self.io.client.counters();
        let value = counters.counter_ref(id).get_volatile();
        let ours = counters.counter_state(id) == sulis_concurrent::counters::RECORD_ALLOCATED
            && counters.counter_type_id(id) == RECORDING_POSITION_TYPE_ID
            && parse_recording_position_key(counters.counter_key(id))
                .is_some_and(|k| k.recording_id == self.recording_id);
        ours.then_some(value)
    }

    /// The log's recording stopped while this member runs a term. It does
    /// when the archive cannot write it (a full disk): then the archive
    /// reports an error about it, and the member, unable to record the log,
    /// must not go on as if it could. It stops, naming the recording and the
    /// archive's reason (its mark file keeps it). What it did not record it
    /// never reported, so no commit counted on it. The error is waited for
    /// briefly: it may arrive just after the recording's counter went.
    ///
    /// Without an error (its image ended: the leader went; or someone
    /// stopped the recording) the member leaves its term for an election,
    /// which records the log again, as Aeron's does on the recording's STOP
    /// signal. A stop during an election is taken up when the election ends,
    /// unless the election recorded the log again by then.
    fn on_log_recording_stopped(&mut self) {
        if self.replicated.is_none() || self.termination.is_some() {
            return;
        }
        if self.election_state().is_some() {
            self.rep().recording_lost_in_election = true;
            return;
        }
        let id = self.recording_id;
        let about = format!("recording {id} ");
        let deadline = Instant::now() + Duration::from_millis(200);
        let reason = loop {
            let found = self
                .archive
                .poll_errors()
                .into_iter()
                .map(|(_, _, message)| message)
                .find(|m| m.contains(&about));
            if found.is_some() || Instant::now() >= deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let Some(reason) = reason else {
            self.rep().step_down = Some(format!(
                "its log's recording {id} stopped with no error from the archive (its image ended, or it was stopped)"
            ));
            return;
        };
        let why = format!(
            "member {}: the log's recording {id} stopped while it runs term {}: {reason}; it cannot record the log, so it stops (restart it once the archive can write again)",
            self.ctx.member_id, self.agent.leadership_term_id
        );
        self.log_event(why.clone());
        self.rep().restart = Some(why);
    }

    /// Where this member's log recording ends now (0 before any).
    fn recorded_position(&mut self) -> i64 {
        if let Some(p) = self.live_recorded_position() {
            return p;
        }
        if self.recording_position_counter >= 0 {
            // Stopped since: the archive has its stop position.
            self.recording_position_counter = -1;
            self.on_log_recording_stopped();
        }
        if self.recording_id >= 0 {
            if let Ok(p) = self.archive.get_stop_position(self.recording_id) {
                if p != NULL_POSITION {
                    return p;
                }
            }
        }
        self.term_base_log_position.max(self.agent.commit_position)
    }

    /// One duty cycle's share of a cluster of several: the consensus
    /// stream, the election while one runs, else the leader's commit or
    /// the follower's log. `Err`: the node must stop.
    pub(super) fn replicated_work(&mut self) -> Result<usize, String> {
        let now_ns = self.now_ns();
        let mut work = 0;
        let mut inbox = Vec::new();
        work += self
            .rep()
            .adapter
            .poll(20, |m, image| inbox.push((m, image)));
        for (m, image) in inbox {
            match m {
                Outbound::BackupQuery(q) => self.on_backup_query(q, image, now_ns),
                Outbound::ChallengeResponse(r) => {
                    self.on_backup_challenge_response(&r, image, now_ns)
                }
                m => self.on_consensus(m, now_ns),
            }
        }
        work += self.offer_seed_answers(now_ns);
        self.expire_backup_challenges(now_ns);
        if let Some(mut election) = self.rep().election.take() {
            work += election.do_work(self, now_ns).max(0) as usize;
            self.election_state.set(election.state().code() as i64);
            let rep = self.replicated.as_mut().expect("started at launch");
            if rep.completed {
                let leader = election.leader_member_id().unwrap_or(-1);
                rep.leader_member_id = leader;
                rep.log_session_id = election.log_session_id().unwrap_or(0);
                rep.last_leader_update_ns = now_ns;
                // The term this member now runs, leader or follower: its
                // AppendPositions and the redirects it answers name it.
                self.agent.leadership_term_id = election.leadership_term_id();
                self.term.leadership_term_id = election.leadership_term_id();
                self.term.leader_member_id = leader;
                self.publish_state();
                self.log_event(format!(
                    "member {} runs term {} with leader {leader}",
                    self.ctx.member_id,
                    election.leadership_term_id()
                ));
                self.rep().voted_through = Some(election.voted_through());
                self.members = election.into_members();
                if std::mem::take(&mut self.rep().recording_lost_in_election) {
                    self.on_log_recording_stopped();
                }
            } else {
                rep.election = Some(election);
            }
        } else if self.agent.role == role::LEADER {
            work += self.leader_work(now_ns);
        } else {
            work += self.follower_work(now_ns)?;
        }
        if let Some(why) = self.rep().restart.take() {
            return Err(why);
        }
        if let Some(why) = self.rep().step_down.take() {
            if self.election_state().is_none() {
                self.step_down(now_ns, &why);
            }
        }
        Ok(work)
    }

    /// A member seeding itself asked for this member's recording log
    /// (`cluster_seed`): answered on its channel, in an election too (the
    /// answer is of files, not of the term). An answer that cannot be made
    /// is recorded in the mark file; the asker hears nothing and says so.
    fn answer_recording_log_query(&mut self, q: &RecordingLogQuery, now_ns: i64) {
        let candidate_term_id = self.rep().node_state.candidate_term_id();
        let answer = crate::module::cluster_seed::answer(
            &self.recording_log,
            q.correlation_id,
            self.ctx.member_id,
            candidate_term_id,
            self.agent.commit_position,
            self.ctx.service_count as i32,
        )
        .map(|a| a.encode());
        let bytes = match answer {
            Ok(b) => b,
            Err(e) => {
                self.mark.record_error(
                    &format!("answering a recording log query: {e}"),
                    now_ns / 1_000_000,
                );
                return;
            }
        };
        // The whole answer is one message: a term a few times its length.
        self.queue_answer(
            &q.response_channel,
            q.response_stream_id,
            bytes,
            "a recording log query",
            now_ns,
        );
    }

    /// Offers `bytes`, an answer to `what`, on `response_channel` (until
    /// taken or the message timeout): the whole answer is one message, so
    /// the channel gets a term a few times its length unless it names one.
    /// The channel used, or None (the failure is in the mark file).
    fn queue_answer(
        &mut self,
        response_channel: &str,
        stream_id: i32,
        bytes: Vec<u8>,
        what: &str,
        now_ns: i64,
    ) -> Option<String> {
        let term_length = (bytes.len() as u64 * 8 + 4096)
            .next_power_of_two()
            .clamp(64 * 1024, 1 << 30);
        let channel = if response_channel.contains("term-length=") {
            response_channel.to_string()
        } else {
            with_param(response_channel, &format!("term-length={term_length}"))
        };
        match self.io.client.add_publication(&channel, stream_id) {
            Ok(p) => {
                let deadline = now_ns + self.ctx.message_timeout.as_nanos() as i64;
                self.rep().seed_answers.push((p, bytes, deadline));
                Some(channel)
            }
            Err(e) => {
                self.mark.record_error(
                    &format!("answering {what} on {channel}: {e}"),
                    now_ns / 1_000_000,
                );
                None
            }
        }
    }

    /// Aeron's ClusterBackup asked what to copy (BackupQuery) on the image
    /// with session id `image`. As in Aeron, a query is heard only outside
    /// an election by a module that is active, suspended or taking a
    /// snapshot (the backup asks again). Its credentials then go to the
    /// member's authenticator, as a client's do: accepted, it is answered
    /// ([`Self::answer_backup_query`]); refused, it is told
    /// AUTHENTICATION_REJECTED in a SessionEvent on its response channel, as
    /// Aeron's members do; challenged, the Challenge (session id -1, as
    /// Aeron gives a backup query) goes to its response channel and the
    /// query waits, a session timeout at most, for the backup's
    /// ChallengeResponse on the consensus stream from the same image. The
    /// authenticator knows each image's query by an id of its own
    /// ([`backup_auth_id`]): a query from elsewhere never displaces it.
    fn on_backup_query(&mut self, q: BackupQuery, image: i32, now_ns: i64) {
        use sulis_archive::auth::Decision;
        if !self.hears_backup_queries() {
            return;
        }
        let id = backup_auth_id(image);
        // A new query from the same image gives up the one before.
        self.drop_backup_challenge(image);
        match self
            .auth
            .on_connect(id, &q.encoded_credentials, &q.response_channel)
        {
            Decision::Accept => self.answer_backup_query(&q, now_ns),
            Decision::Reject => self.refuse_backup_query(&q, now_ns),
            Decision::Challenge(challenge) => {
                let m = sulis_protocol::cluster::messages::Challenge {
                    correlation_id: q.correlation_id,
                    cluster_session_id: -1,
                    encoded_challenge: challenge,
                };
                let Some(channel) = self.queue_answer(
                    &q.response_channel,
                    q.response_stream_id,
                    m.encode(),
                    "a challenged backup query",
                    now_ns,
                ) else {
                    self.auth.on_session_dropped(id);
                    return;
                };
                self.log_event(format!(
                    "member {} challenges a backup query answering on {channel}",
                    self.ctx.member_id
                ));
                if self.rep().backup_challenges.len() >= MAX_BACKUP_CHALLENGES {
                    let (oldest, _, _) = self.rep().backup_challenges.remove(0);
                    self.auth.on_session_dropped(backup_auth_id(oldest));
                }
                let deadline = now_ns + self.ctx.session_timeout.as_nanos() as i64;
                self.rep().backup_challenges.push((image, q, deadline));
            }
        }
    }

    /// Outside an election, active, suspended or taking a snapshot: when
    /// Aeron's members hear (and answer) a backup query.
    fn hears_backup_queries(&self) -> bool {
        use crate::module::consensus_module_agent::ModuleState;
        self.election_state().is_none()
            && matches!(
                self.agent.state,
                ModuleState::Active | ModuleState::Suspended | ModuleState::Snapshot
            )
    }

    /// The challenged query from `image`, taken off the waiting ones.
    fn take_backup_challenge(&mut self, image: i32) -> Option<BackupQuery> {
        let waiting = &mut self.rep().backup_challenges;
        let at = waiting.iter().position(|(i, _, _)| *i == image)?;
        Some(waiting.remove(at).1)
    }

    /// Forgets the challenged query from `image`, if one waits.
    fn drop_backup_challenge(&mut self, image: i32) {
        if self.take_backup_challenge(image).is_some() {
            self.auth.on_session_dropped(backup_auth_id(image));
        }
    }

    /// A ChallengeResponse on the consensus stream: the answer of the
    /// backup whose query waits from the same image (anyone can reach the
    /// endpoint, and a stranger's answer must not spend a backup's
    /// challenge); anything else is passed over. Right, the query is
    /// answered; wrong, it is refused; either under the answer's
    /// correlation id, which Aeron's ClusterBackup waits on from then (as
    /// Aeron's members answer).
    fn on_backup_challenge_response(&mut self, r: &ChallengeResponse, image: i32, now_ns: i64) {
        use sulis_archive::auth::Decision;
        if r.cluster_session_id != -1 {
            return;
        }
        let Some(mut q) = self.take_backup_challenge(image) else {
            return;
        };
        q.correlation_id = r.correlation_id;
        match self
            .auth
            .on_challenge_response(backup_auth_id(image), &r.encoded_credentials)
        {
            Decision::Accept => self.answer_backup_query(&q, now_ns),
            _ => self.refuse_backup_query(&q, now_ns),
        }
    }

    /// Challenged backup queries not answered within the session timeout
    /// are given up, their challenges forgotten.
    fn expire_backup_challenges(&mut self, now_ns: i64) {
        let waiting = &mut self.rep().backup_challenges;
        if !waiting.iter().any(|(_, _, deadline)| now_ns >= *deadline) {
            return;
        }
        let (expired, kept): (Vec<_>, Vec<_>) = std::mem::take(waiting)
            .into_iter()
            .partition(|(_, _, deadline)| now_ns >= *deadline);
        self.rep().backup_challenges = kept;
        for (image, _, _) in expired {
            self.auth.on_session_dropped(backup_auth_id(image));
            self.log_event(format!(
                "member {} gives up a challenged backup query: no answer within the session timeout",
                self.ctx.member_id
            ));
        }
    }

    /// Tells a backup query AUTHENTICATION_REJECTED on its response channel.
    fn refuse_backup_query(&mut self, q: &BackupQuery, now_ns: i64) {
        let refusal = sulis_protocol::cluster::messages::SessionEvent {
            cluster_session_id: -1,
            correlation_id: q.correlation_id,
            leadership_term_id: self.term.leadership_term_id,
            leader_member_id: self.leader_member_id(),
            code: sulis_protocol::cluster::messages::event_code::AUTHENTICATION_REJECTED,
            version: sulis_protocol::cluster::messages::CLIENT_PROTOCOL_VERSION,
            leader_heartbeat_timeout_ns: self.ctx.leader_heartbeat_timeout.as_nanos() as i64,
            detail: "backup query failed authentication".to_string(),
        };
        if let Some(channel) = self.queue_answer(
            &q.response_channel,
            q.response_stream_id,
            refusal.encode(),
            "a refused backup query",
            now_ns,
        ) {
            self.log_event(format!(
                "member {} refuses a backup query answering on {channel}: its credentials fail authentication",
                self.ctx.member_id
            ));
        }
    }

    /// An authenticated backup query answered, as Aeron's members answer,
    /// on the query's channel: this member's log recording and
    /// last term, its commit-position counter (a replay of the log bounded
    /// by it never passes the commit position), the latest snapshot set at
    /// or before the position asked for, and the members. A member with no
    /// term yet does not answer (the backup asks again).
    fn answer_backup_query(&mut self, q: &BackupQuery, now_ns: i64) {
        use sulis_protocol::cluster::backup_response::{BackupResponse, BackupSnapshot};
        // A challenged query's answer may come in an election begun since.
        if !self.hears_backup_queries() {
            return;
        }
        let Some(last) = self.recording_log.last_term().cloned() else {
            return;
        };
        // Before version 16 a query names no position: the latest set.
        let at_or_before = if q.log_position < 0 {
            i64::MAX
        } else {
            q.log_position
        };
        let snapshots = crate::module::recording_log::latest_snapshot(
            self.recording_log
                .entries()
                .filter(|e| e.is_valid && e.log_position <= at_or_before),
            self.ctx.service_count as i32,
        )
        .unwrap_or_default()
        .into_iter()
        .map(|e| BackupSnapshot {
            recording_id: e.recording_id,
            leadership_term_id: e.leadership_term_id,
            term_base_log_position: e.term_base_log_position,
            log_position: e.log_position,
            timestamp: e.timestamp,
            service_id: e.service_id,
        })
        .collect();
        let answer = BackupResponse {
            correlation_id: q.correlation_id,
            log_recording_id: last.recording_id,
            log_leadership_term_id: last.leadership_term_id,
            log_term_base_log_position: last.term_base_log_position,
            last_leadership_term_id: last.leadership_term_id,
            last_term_base_log_position: last.term_base_log_position,
            commit_position_counter_id: self.commit.id(),
            leader_member_id: self.leader_member_id(),
            member_id: self.ctx.member_id,
            snapshots,
            cluster_members: self
                .members
                .iter()
                .map(|m| format!("{},{}", m.id, m.endpoints()))
                .collect::<Vec<_>>()
                .join("|"),
        };
        let snapshots = answer.snapshots.len();
        if let Some(channel) = self.queue_answer(
            &q.response_channel,
            q.response_stream_id,
            answer.encode(),
            "a backup query",
            now_ns,
        ) {
            self.log_event(format!(
                "member {} answers a backup query on {channel} (log recording {}, term {}, {snapshots} snapshots)",
                self.ctx.member_id, last.recording_id, last.leadership_term_id
            ));
        }
    }

    /// Offers the answers not yet taken; drops those past their deadline.
    fn offer_seed_answers(&mut self, now_ns: i64) -> usize {
        let answers = &mut self.rep().seed_answers;
        let before = answers.len();
        answers.retain(|(p, bytes, deadline)| {
            let sent = p.is_connected() && p.offer(bytes).is_ok();
            let keep = !sent && now_ns < *deadline;
            if !keep {
                p.close_without_waiting();
            }
            keep
        });
        before - answers.len()
    }

    fn on_consensus(&mut self, m: Outbound, now_ns: i64) {
        let m = match m {
            Outbound::Election(m) => m,
            Outbound::RecordingLogQuery(q) => {
                self.answer_recording_log_query(&q, now_ns);
                return;
            }
            Outbound::StopCatchup(x) => {
                if x.follower_member_id == self.ctx.member_id {
                    self.rep().catchup_done = true;
                }
                return;
            }
            _ => return, // termination across members is not wired yet
        };
        let m = match m {
            ConsensusMessage::AppendPosition(x) => match self.synced_enough(x) {
                Ok(x) => ConsensusMessage::AppendPosition(x),
                Err(x) => {
                    // Heard, not counted: a leader keeps its term with the
                    // member active (and its catch-up tracked), and its
                    // commit waits for a quorum that synced (in an election
                    // its AppendPositions count for nothing).
                    let leading = self.agent.role == role::LEADER;
                    if leading
                        && self.rep().election.is_none()
                        && x.leadership_term_id == self.agent.leadership_term_id
                    {
                        if let Some(f) = self
                            .members
                            .iter_mut()
                            .find(|f| f.id == x.follower_member_id)
                        {
                            f.time_of_last_append_position_ns = now_ns;
                        }
                        self.track_catchup(x.follower_member_id, x.log_position);
                    }
                    return;
                }
            },
            m => m,
        };
        if let ConsensusMessage::CatchupPosition(x) = &m {
            if self.agent.role == role::LEADER {
                self.start_catchup_replay(x);
            }
            return;
        }
        if let ConsensusMessage::AppendPosition(x) = &m {
            if self.agent.role == role::LEADER {
                self.track_catchup(x.follower_member_id, x.log_position);
            }
        }
        if let Some(mut e) = self.rep().election.take() {
            match &m {
                ConsensusMessage::CanvassPosition(x) => e.on_canvass_position(self, x, now_ns),
                ConsensusMessage::RequestVote(x) => e.on_request_vote(self, x, now_ns),
                ConsensusMessage::Vote(x) => e.on_vote(x, now_ns),
                ConsensusMessage::NewLeadershipTerm(x) => e.on_new_leadership_term(self, x, now_ns),
                ConsensusMessage::AppendPosition(x) => e.on_append_position(self, x, now_ns),
                ConsensusMessage::CommitPosition(x) => e.on_commit_position(self, x, now_ns),
                ConsensusMessage::CatchupPosition(_) => {}
            }
            self.rep().election = Some(e);
            return;
        }
        let term = self.agent.leadership_term_id;
        match beyond_term(&m, term, || self.has_lease(now_ns)) {
            BeyondTerm::No => {}
            BeyondTerm::Ignored => {
                if let ConsensusMessage::RequestVote(x) = &m {
                    let rep = self.rep();
                    if rep.ignored_request_vote != (x.candidate_member_id, x.candidate_term_id) {
                        rep.ignored_request_vote = (x.candidate_member_id, x.candidate_term_id);
                        let (member, role) = (self.ctx.member_id, self.agent.role);
                        self.log_event(format!(
                            "member {member} ignores member {}'s request for votes in term {}: {}",
                            x.candidate_member_id,
                            x.candidate_term_id,
                            if role == role::LEADER {
                                "a quorum of followers is active in this term"
                            } else {
                                "this term's leader is active"
                            }
                        ));
                    }
                }
                return;
            }
            BeyondTerm::Leave(why) => {
                self.step_down(now_ns, &why);
                if !matches!(m, ConsensusMessage::CommitPosition(_)) {
                    self.on_consensus(Outbound::Election(m), now_ns);
                }
                return;
            }
        }
        let leading = self.agent.role == role::LEADER;
        let leader = self.rep().leader_member_id;
        match m {
            ConsensusMessage::AppendPosition(x) if leading => {
                self.agent.on_append_position(&mut self.members, &x, now_ns);
            }
            ConsensusMessage::CommitPosition(x)
                if x.leader_member_id == leader && x.leadership_term_id == term =>
            {
                self.agent.on_commit_position(&x, leader, now_ns);
                self.rep().last_leader_update_ns = now_ns;
            }
            ConsensusMessage::NewLeadershipTerm(x)
                if x.leader_member_id == leader && x.leadership_term_id == term =>
            {
                self.rep().last_leader_update_ns = now_ns;
            }
            ConsensusMessage::CanvassPosition(x) if leading && x.log_leadership_term_id <= term => {
                // A member that restarted canvasses: answer with this term,
                // tailored to its log.
                // Its position counts towards the commit only if the member
                // is known to sync the log at this member's level (a canvass
                // does not say; its AppendPositions do).
                let counted =
                    self.synced_level_of(x.follower_member_id) >= self.ctx.file_sync_level;
                if let Some(member) = self
                    .members
                    .iter_mut()
                    .find(|y| y.id == x.follower_member_id)
                {
                    if counted {
                        member.leadership_term_id = x.log_leadership_term_id;
                        member.log_position = x.log_position;
                    }
                    member.time_of_last_append_position_ns = now_ns;
                }
                let append = self.recorded_position();
                let leader_term = LeaderTerm {
                    leader_member_id: self.ctx.member_id,
                    leadership_term_id: term,
                    term_base_log_position: self.term_base_log_position,
                    append_position: append,
                    commit_position: self.agent.commit_position,
                    log_recording_id: self.recording_id,
                    log_session_id: self.rep().log_session_id,
                    app_version: self.ctx.app_version,
                    is_startup: false,
                };
                let answer = {
                    let log = &self.recording_log;
                    let entry = |t: i64| term_entry_of(log, t);
                    leader_term.for_rejoining_member(x.log_leadership_term_id, &entry, now_ns)
                };
                let to = x.follower_member_id;
                self.rep().publisher.send(
                    to,
                    &Outbound::Election(ConsensusMessage::NewLeadershipTerm(answer)),
                );
            }
            _ => {}
        }
    }

    /// An AppendPosition with its sender's sync level taken off its flags:
    /// `Err` when that level is below this member's `file_sync_level`, for
    /// what that member holds may be in its page cache only, and a commit
    /// that counted it could be lost by a machine crash. Its position then
    /// counts towards no quorum (in a term or an election), and this is said
    /// once per member and term, on stderr and in the mark file
    /// (`cluster-tool errors`).
    fn synced_enough(&mut self, mut x: AppendPosition) -> Result<AppendPosition, AppendPosition> {
        let (level, others) = split_sync_level(x.flags);
        x.flags = others;
        let levels = &mut self.rep().sync_levels;
        match levels
            .iter_mut()
            .find(|(id, _)| *id == x.follower_member_id)
        {
            Some(known) => known.1 = level,
            None => levels.push((x.follower_member_id, level)),
        }
        if level >= self.ctx.file_sync_level {
            return Ok(x);
        }
        let said = (x.follower_member_id, x.leadership_term_id);
        if !self.rep().unsynced_said.contains(&said) {
            self.rep().unsynced_said.push(said);
            let why = format!(
                "member {} records the log at file_sync_level {level}, below this member's {}: its positions \
                 (term {}) do not count towards the commit; start it with --file-sync-level {} or above",
                x.follower_member_id,
                self.ctx.file_sync_level,
                x.leadership_term_id,
                self.ctx.file_sync_level
            );
            self.log_event(why.clone());
            self.mark.record_error(&why, Self::cluster_time());
        }
        Err(x)
    }

    /// The sync level member `id`'s last AppendPosition said (0 before any).
    fn synced_level_of(&mut self, id: i32) -> u8 {
        self.rep()
            .sync_levels
            .iter()
            .find(|(m, _)| *m == id)
            .map_or(0, |(_, level)| *level)
    }

    /// Leader: replays its log from the follower's position to the
    /// follower's catch-up endpoint, with the log's session id, so the
    /// replay and then the live log fill one image there.
    fn start_catchup_replay(&mut self, m: &sulis_protocol::cluster::messages::CatchupPosition) {
        let member = m.follower_member_id;
        // A request of another term (a follower's late retry) is not this term's catch-up.
        if self.recording_id < 0 || m.leadership_term_id != self.agent.leadership_term_id {
            return;
        }
        // Asked again, the follower gave up the earlier catch-up (its
        // election attempt failed): that replay stops and a new one starts
        // where it is now. Ignored instead, the follower waited for a replay
        // that never came, attempt after attempt (a fault run showed it).
        if let Some(i) = self.rep().catchups.iter().position(|(id, _)| *id == member) {
            let (_, old) = self.rep().catchups.swap_remove(i);
            let _ = self.archive.stop_replay(old);
        }
        // A follower behind the start of a purged log can never catch up
        // from here: said where the operator looks (this member's mark
        // file), with the way out, once per request.
        if let Ok(start) = self.archive.get_start_position(self.recording_id) {
            if m.log_position < start {
                let why = format!(
                    "member {member} asks to catch up from log position {}, but this member's log starts at {start} (purged before it): it cannot catch up; replace it from a snapshot (empty directories, --seed-from-snapshot true)",
                    m.log_position
                );
                self.log_event(why.clone());
                self.mark
                    .record_error(&why, sulis_concurrent::cnc::epoch_ms());
                return;
            }
        }
        let session = self.rep().log_session_id;
        let channel = format!(
            "aeron:udp?endpoint={}|session-id={session}|linger=0|eos=false",
            m.catchup_endpoint
        );
        match self.archive.start_replay(
            self.recording_id,
            m.log_position,
            i64::MAX,
            &channel,
            self.ctx.log_stream_id,
        ) {
            Ok(replay) => {
                self.log_event(format!(
                    "member {member} catches up from {} ({channel})",
                    m.log_position
                ));
                self.rep().catchups.push((member, replay));
            }
            Err(e) => self.log_event(format!("catch-up replay for member {member}: {e}")),
        }
    }

    /// Leader: a catching-up follower that reached the live log is told to
    /// stop catching up, and its replay stops.
    fn track_catchup(&mut self, member: i32, position: i64) {
        let live = self.io.log.position();
        let Some(i) = self.rep().catchups.iter().position(|(id, _)| *id == member) else {
            return;
        };
        if position < live {
            return;
        }
        let (_, replay) = self.rep().catchups.swap_remove(i);
        let _ = self.archive.stop_replay(replay);
        let stop = sulis_protocol::cluster::messages::StopCatchup {
            leadership_term_id: self.agent.leadership_term_id,
            follower_member_id: member,
        };
        self.rep()
            .publisher
            .send(member, &Outbound::StopCatchup(stop));
    }

    /// This member is sure of its term's leader now: as leader, a quorum of
    /// followers reported within the leader heartbeat timeout; as follower,
    /// the leader did.
    fn has_lease(&mut self, now_ns: i64) -> bool {
        match self.agent.role {
            role::LEADER => !self.agent.has_lost_follower_quorum(&self.members, now_ns),
            role::FOLLOWER => !self.leader_silent(now_ns),
            _ => false,
        }
    }

    /// Follower: nothing heard from the leader for the heartbeat timeout.
    fn leader_silent(&mut self, now_ns: i64) -> bool {
        now_ns - self.rep().last_leader_update_ns
            >= self.ctx.leader_heartbeat_timeout.as_nanos() as i64
    }

    /// The term this member runs is over: a new election, from the commit position.
    fn step_down(&mut self, _now_ns: i64, why: &str) {
        self.log_event(format!(
            "member {} leaves term {}: {why}",
            self.ctx.member_id, self.agent.leadership_term_id
        ));
        let commit = self.agent.commit_position;
        self.begin_election(false, commit);
    }

    /// Has the archive record the log session (`recorded`, from `source`)
    /// and the services join it (`services_channel`) at `log_position`.
    /// Both waits block the duty cycle, nothing else runs meanwhile: a wait
    /// of a second or more is said, with its length, until they become
    /// states the election polls (a busy CI run saw followers stuck 53 s).
    #[allow(clippy::too_many_arguments)]
    fn record_and_join_log(
        &mut self,
        recorded: &str,
        source: i32,
        services_channel: String,
        log_session_id: i32,
        log_position: i64,
        role: i32,
        is_startup: bool,
    ) -> Result<(), String> {
        let say_if_long = |this: &Self, what: &str, since: Instant| {
            let waited = since.elapsed();
            if waited >= Duration::from_secs(1) {
                this.log_event(format!(
                    "member {} waited {} ms {what}, doing nothing else",
                    this.ctx.member_id,
                    waited.as_millis()
                ));
            }
        };
        let started = Instant::now();
        self.record_log(recorded, log_session_id, source)?;
        say_if_long(self, "for the archive to record the log", started);
        let joining = Instant::now();
        let joined = self.join_services(
            services_channel,
            log_session_id,
            log_position,
            role,
            is_startup,
        );
        say_if_long(self, "for its services to join the log", joining);
        joined
    }

    pub(super) fn log_event(&self, line: String) {
        // The time of day (UTC, ms) first: members' lines compared across
        // processes show what each did while another waited.
        let now = sulis_concurrent::error_log::utc(sulis_concurrent::cnc::epoch_ms());
        eprintln!("sulis cluster: {} {line}", &now[11..]);
    }

    /// Leader: commits what a quorum recorded and tells the followers.
    fn leader_work(&mut self, now_ns: i64) -> usize {
        if self.agent.has_lost_follower_quorum(&self.members, now_ns) {
            self.step_down(now_ns, "under a quorum of active followers");
            return 1;
        }
        let recorded = self.recorded_position();
        let before = self.agent.commit_position;
        let message = self
            .agent
            .update_leader_position(&mut self.members, now_ns, recorded);
        if self.agent.commit_position > before {
            self.commit.set(self.agent.commit_position);
        }
        match message {
            Some(m) => {
                self.rep()
                    .publisher
                    .broadcast(&Outbound::Election(ConsensusMessage::CommitPosition(m)));
                1
            }
            None => 0,
        }
    }

    /// Follower: applies the log up to what the leader said is committed,
    /// reports what it recorded, and stands for election when the leader
    /// falls silent.
    fn follower_work(&mut self, now_ns: i64) -> Result<usize, String> {
        if self.leader_silent(now_ns) {
            self.step_down(now_ns, "leader heartbeat timeout");
            return Ok(1);
        }
        let mut work = 0;
        let recorded = self.recorded_position();
        let limit = self.agent.follower_commit_limit(recorded);
        work += self.apply_followed_log(limit, None)?;
        if let Some(m) = self.agent.follower_append_position(now_ns, recorded) {
            let leader = self.rep().leader_member_id;
            self.rep().publisher.send(
                leader,
                &Outbound::Election(ConsensusMessage::AppendPosition(m)),
            );
            work += 1;
        }
        Ok(work)
    }

    /// Follower: applies the followed session's log (live or catch-up) up
    /// to `limit`, the terms it begins into `terms`; the commit-position
    /// counter follows. Only this term's session is read: an old leader's
    /// image may linger on the same subscription.
    fn apply_followed_log(
        &mut self,
        limit: i64,
        mut terms: Option<&mut Vec<TermEvent>>,
    ) -> Result<usize, String> {
        // While this member takes a snapshot, its state stays that of the
        // action's position: nothing more is applied until it is recorded.
        if self.snapshot.is_some() {
            return Ok(0);
        }
        // What a snapshot held back, else this poll's entries, in a buffer kept from poll to poll.
        let mut entries = std::mem::take(&mut self.rep().deferred);
        if let (true, Some(rep)) = (entries.is_empty(), self.replicated.as_mut()) {
            entries = std::mem::take(&mut rep.follower_messages);
            entries.clear();
            let session = rep.follower_session;
            if let Some((sub, _)) = rep.follower_log.as_mut() {
                if let Some(image) = sub
                    .images()
                    .into_iter()
                    .find(|i| Some(i.session_id()) == session)
                {
                    let assembler = &mut rep.follower_assembler;
                    let _ = image.bounded_poll(
                        |payload, header| -> Result<(), ()> {
                            assembler.on_fragment_into(payload, header, &mut entries);
                            Ok(())
                        },
                        limit,
                        50,
                    );
                }
            }
        }
        let mut applied = 0;
        for i in 0..entries.len() {
            let (message, position, _) = entries.get(i);
            let entry = crate::service::log_adapter::decode(message, position)
                .map_err(|e| format!("the log at {position}: {e}"))?;
            if let (Some(terms), LogEntry::NewLeadershipTerm(e)) = (terms.as_deref_mut(), &entry) {
                terms.push(TermEvent {
                    leadership_term_id: e.leadership_term_id,
                    log_position: position,
                    term_base_log_position: e.term_base_log_position,
                });
            }
            let outcome = self.agent.on_log_entry(&entry, position)?;
            self.agent.on_follower_applied(position);
            applied += 1;
            if let (None, crate::module::consensus_module_agent::Applied::PurgeLog) =
                (terms.as_deref(), &outcome)
            {
                self.purge_own_log();
                continue;
            }
            // A SNAPSHOT action, applied after the election: this member
            // snapshots at the same position as the leader (its services do
            // as they apply it); what was read after it waits meanwhile.
            if let (
                None,
                crate::module::consensus_module_agent::Applied::TakeSnapshot {
                    log_position,
                    leadership_term_id,
                    timestamp,
                },
            ) = (terms.as_deref(), outcome)
            {
                self.begin_snapshot(log_position, leadership_term_id, timestamp, false);
                let mut rest = AssembledMessages::new();
                for j in i + 1..entries.len() {
                    let (m, p, s) = entries.get(j);
                    rest.push(m, p, s);
                }
                self.rep().deferred = rest;
                break;
            }
        }
        if let Some(rep) = self.replicated.as_mut() {
            rep.follower_messages = entries;
        }
        if self.agent.commit_position > self.commit.get() {
            self.commit.set(self.agent.commit_position);
        }
        Ok(applied)
    }

    /// Starts (or extends) the archive's recording of the log session and
    /// waits for its position counter.
    fn record_log(&mut self, channel: &str, session_id: i32, source: i32) -> Result<(), String> {
        let stream = self.ctx.log_stream_id;
        if self.recording_id < 0 {
            self.archive
                .start_recording(channel, stream, source, false)
                .map_err(|e| err("recording the log", e))?;
        } else {
            self.archive
                .extend_recording(self.recording_id, channel, stream, source, false)
                .map_err(|e| err("extending the log's recording", e))?;
        }
        let deadline = Instant::now() + self.ctx.message_timeout;
        loop {
            if let Some((id, key)) = find_recording_counter(&self.io.client, session_id) {
                return self.count_recording(id, key);
            }
            if Instant::now() > deadline {
                let stop = self.archive.get_stop_position(self.recording_id);
                return Err(format!(
                    "the archive did not start recording the log (session {session_id}, {channel}, recording {} stopped at {stop:?}); its errors: {:?}",
                    self.recording_id,
                    self.archive.poll_errors()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Tells the services to follow the log session on `channel` from
    /// `position` and waits for them.
    fn join_services(
        &mut self,
        channel: String,
        session_id: i32,
        position: i64,
        role: i32,
        is_startup: bool,
    ) -> Result<(), String> {
        self.join_log = JoinLog {
            log_position: position,
            max_log_position: i64::MAX,
            member_id: self.ctx.member_id,
            log_session_id: session_id,
            log_stream_id: self.ctx.log_stream_id,
            is_startup: is_startup as i32,
            role,
            is_standby: 0,
            log_channel: channel,
        };
        self.await_services_joined(position)?;
        if let Some(c) = self.recovery_state.take() {
            c.close();
        }
        self.rep().services_joined = true;
        Ok(())
    }

    fn fail(&mut self, why: String) {
        self.log_event(why.clone());
        let rep = self.rep();
        if rep.restart.is_none() {
            rep.restart = Some(why);
        }
    }

    /// Adds `endpoint` to the follower's log subscription. A failure is
    /// logged and tried again while the election waits for the log's image
    /// (a module restarted at once may find its endpoint still held by the
    /// subscriptions of the one before, which the driver is closing).
    fn add_log_destination(&mut self, endpoint: &str, catchup: bool) -> bool {
        let destination = format!("aeron:udp?endpoint={endpoint}");
        let Some((sub, _)) = self.rep().follower_log.as_ref() else {
            return false;
        };
        // An earlier try the driver finished after the client stopped
        // waiting for it counts: the destination is there.
        let added = sub.add_destination(&destination).or_else(|e| {
            if e.to_string()
                .contains("is a destination of this subscription already")
            {
                Ok(0)
            } else {
                Err(e)
            }
        });
        match added {
            Ok(_) => {
                if !catchup {
                    self.rep().live_destination = true;
                }
                true
            }
            Err(e) => {
                // Once per election attempt is enough to say why it waits.
                let what = format!("the follower's log destination {destination}: {e}");
                if self.rep().last_destination_error.as_deref() != Some(what.as_str()) {
                    self.log_event(format!("{what} (tried again while the election waits)"));
                    self.rep().last_destination_error = Some(what);
                }
                false
            }
        }
    }

    /// Closes the follower's log subscription after removing its
    /// destinations (the endpoint may live on in the services' and the
    /// archive's subscriptions of its tag, but it no longer holds the log
    /// port, so a new subscription can bind it).
    fn replace_follower_log(&mut self, why: &str) {
        let live = format!(
            "aeron:udp?endpoint={}",
            self.own_endpoint(|m| &m.log_endpoint)
        );
        let catchup = format!(
            "aeron:udp?endpoint={}",
            self.own_endpoint(|m| &m.catchup_endpoint)
        );
        let rep = self.rep();
        let live_added = std::mem::replace(&mut rep.live_destination, false);
        if let Some((mut sub, tag)) = rep.follower_log.take() {
            if live_added {
                let _ = sub.remove_destination(&live);
            }
            let _ = sub.remove_destination(&catchup);
            let _ = sub.close();
            self.log_event(format!(
                "member {} makes a new log subscription (tag {tag}): {why}",
                self.ctx.member_id
            ));
        }
    }

    /// The leader's log: the channel its publication is added on, and the
    /// one its archive records and its services read. A member alone on an
    /// IPC log channel (the default) publishes the log over IPC, recorded
    /// and read there, as a one-member Aeron cluster may; otherwise the log
    /// is UDP in manual MDC mode (a destination per follower, none alone),
    /// recorded and read through a spy.
    fn leader_log_channels(&mut self) -> (String, String) {
        if self.members.len() == 1 && self.ctx.log_channel.starts_with("aeron:ipc") {
            let ipc = self.ctx.log_channel.clone();
            return (ipc.clone(), ipc);
        }
        let spy = self.leader_spy_channel();
        (spy.clone(), format!("aeron-spy:{spy}"))
    }

    fn leader_spy_channel(&mut self) -> String {
        let host = self
            .members
            .iter()
            .find(|m| m.id == self.ctx.member_id)
            .map(|m| host_of(&m.log_endpoint).to_string())
            .unwrap_or_else(|| "127.0.0.1".into());
        with_param(
            &self.rep().log_udp.clone(),
            &format!("control-mode=manual|control={host}:0"),
        )
    }
}

fn me_id(m: &ConsensusModule) -> i32 {
    m.ctx.member_id
}

/// The recording log's entry of a term, as the election reads it.
fn term_entry_of(log: &crate::module::recording_log::RecordingLog, t: i64) -> Option<TermEntry> {
    log.find_term(t).map(|e| TermEntry {
        leadership_term_id: e.leadership_term_id,
        term_base_log_position: e.term_base_log_position,
        log_position: e.log_position,
    })
}

impl ElectionHost for ConsensusModule {
    fn send(&mut self, to: i32, message: ConsensusMessage) -> bool {
        if let ConsensusMessage::CatchupPosition(c) = &message {
            let rep = self.rep();
            rep.catchup_of = Some((to, c.leadership_term_id));
            rep.catchup_done = false;
            rep.catchup_reported = (NULL_POSITION, 0);
        }
        self.rep().publisher.send(to, &Outbound::Election(message))
    }

    fn set_role(&mut self, role: i32) {
        self.agent.role = role;
        self.node_role.set(role as i64);
    }

    fn role(&self) -> i32 {
        self.agent.role
    }

    fn candidate_term_id(&self) -> i64 {
        self.replicated
            .as_ref()
            .map_or(-1, |r| r.node_state.candidate_term_id())
    }

    fn propose_max_candidate_term_id(
        &mut self,
        candidate_term_id: i64,
        log_position: i64,
        _now_ns: i64,
    ) -> i64 {
        let timestamp = Self::cluster_time();
        match self.rep().node_state.propose_max_candidate_term_id(
            candidate_term_id,
            log_position,
            timestamp,
        ) {
            Ok(id) => id,
            Err(e) => {
                // A term it could forget: the member must not stand or vote.
                self.fail(format!("node-state.dat: {e}"));
                self.rep().node_state.candidate_term_id()
            }
        }
    }

    fn prepare_for_new_leadership(&mut self, _log_position: i64, now_ns: i64) -> i64 {
        self.rep().follower_session = None;
        let mut recorded = NULL_POSITION;
        if self.recording_id >= 0 {
            // The log's recording stops (if its image has not ended it
            // already); where it stopped is the log's end, which the next
            // term's log publication starts from.
            let _ = self.archive.stop_recording_by_identity(self.recording_id);
            self.recording_position_counter = -1;
            let deadline = Instant::now() + self.ctx.message_timeout;
            loop {
                match self.archive.get_stop_position(self.recording_id) {
                    Ok(p) if p != NULL_POSITION => {
                        recorded = p;
                        break;
                    }
                    Ok(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Ok(_) => {
                        self.fail(format!(
                            "the log's recording {} did not stop within {:?}",
                            self.recording_id, self.ctx.message_timeout
                        ));
                        break;
                    }
                    Err(e) => {
                        self.fail(format!("the log's recording {}: {e}", self.recording_id));
                        break;
                    }
                }
            }
        }
        let commit = self.agent.commit_position;
        self.agent
            .prepare_for_new_leadership(&mut self.io, commit, now_ns);
        self.agent.role = role::FOLLOWER;
        self.node_role.set(role::FOLLOWER as i64);
        recorded
    }

    fn truncate_log_entry(&mut self, log_leadership_term_id: i64, position: i64) {
        // The election cuts only what this member's services have not
        // applied (else it asks for a restart): the recording (stopped by
        // `prepare_for_new_leadership`) is truncated there, the term ends
        // there and the terms after it go from the recording log.
        if self.recording_id >= 0 {
            if let Err(e) = self.archive.truncate_recording(self.recording_id, position) {
                self.fail(format!(
                    "truncating the log's recording {} to {position}: {e}",
                    self.recording_id
                ));
                return;
            }
        }
        if let Err(e) = self
            .recording_log
            .invalidate_terms_after(log_leadership_term_id)
        {
            self.fail(format!("the recording log: {e}"));
            return;
        }
        if self
            .recording_log
            .find_term(log_leadership_term_id)
            .is_some()
        {
            if let Err(e) = self
                .recording_log
                .commit_log_position(log_leadership_term_id, position)
            {
                self.fail(format!("the recording log: {e}"));
                return;
            }
        }
        self.log_event(format!(
            "member {} cut its log back to {position} (term {log_leadership_term_id})",
            self.ctx.member_id
        ));
    }

    fn add_log_publication(&mut self, append_position: i64) -> i32 {
        let length = self.ctx.log_term_length as i64;
        let (published, _) = self.leader_log_channels();
        let channel = with_param(
            &published,
            &format!(
                "alias=log|term-length={length}|init-term-id=0|term-id={}|term-offset={}",
                append_position / length,
                append_position % length
            ),
        );
        let log = match self
            .io
            .client
            .add_exclusive_publication(&channel, self.ctx.log_stream_id)
        {
            Ok(p) => p,
            Err(e) => {
                self.fail(err(&channel, e));
                return 0;
            }
        };
        for m in self.members.iter().filter(|m| m.id != self.ctx.member_id) {
            let d = format!("aeron:udp?endpoint={}", m.log_endpoint);
            if let Err(e) = log.add_destination(&d) {
                self.log_event(format!("log destination {d}: {e}"));
            }
        }
        let session_id = log.session_id();
        let old = std::mem::replace(&mut self.io.log, log);
        old.close_without_waiting();
        session_id
    }

    fn log_recording_id(&self) -> i64 {
        self.recording_id
    }

    fn term_entry(&self, leadership_term_id: i64) -> Option<TermEntry> {
        term_entry_of(&self.recording_log, leadership_term_id)
    }

    fn update_recording_log(
        &mut self,
        leadership_term_id: i64,
        term_base_log_position: i64,
        log_position: i64,
        _now_ns: i64,
    ) {
        let timestamp = self.log_time();
        let result = self.recording_log.update_term(
            self.recording_id,
            leadership_term_id,
            term_base_log_position,
            log_position,
            timestamp,
        );
        if let Err(e) = result {
            self.fail(format!("the recording log: {e}"));
        }
    }

    fn start_log_replay(&mut self, from: i64, to: i64) {
        // What the election replays is committed (its target is bounded by
        // the leader's commit position): the services may apply it at once.
        let started = LogReplay::start(
            &self.io.client,
            &mut self.archive,
            self.recording_id,
            from..to,
            Some(self.commit.id()),
            self.ctx.replay_stream_id,
            self.ctx.message_timeout * 6,
        );
        let replay = match started {
            Ok(r) => r,
            Err(e) => {
                self.fail(format!("replaying the log from {from} to {to}: {e}"));
                return;
            }
        };
        self.join_log = JoinLog {
            log_position: from,
            max_log_position: to,
            member_id: self.ctx.member_id,
            log_session_id: replay.session_id(),
            log_stream_id: self.ctx.replay_stream_id,
            is_startup: 0,
            role: role::FOLLOWER,
            is_standby: 0,
            log_channel: "aeron:ipc".into(),
        };
        if let Err(e) = self.await_services_joined(from) {
            self.fail(format!(
                "the services joining the log replay at {from}: {e}"
            ));
            replay.close(&mut self.archive);
            return;
        }
        if let Some(c) = self.recovery_state.take() {
            c.close();
        }
        self.commit.set(to);
        self.rep().replay = Some(replay);
    }

    fn poll_log_replay(&mut self, terms: &mut Vec<TermEvent>) -> Option<i64> {
        let mut replay = self.rep().replay.take()?;
        let mut met = Vec::new();
        let agent = &mut self.agent;
        let polled = replay.poll(100, |entry, end| {
            if let LogEntry::NewLeadershipTerm(e) = entry {
                met.push(TermEvent {
                    leadership_term_id: e.leadership_term_id,
                    log_position: end,
                    term_base_log_position: e.term_base_log_position,
                });
            }
            agent.on_log_entry(entry, end).map(|_| ())
        });
        terms.extend(met);
        match polled {
            Ok(Some(end)) => {
                self.agent.committed_to(end);
                replay.close(&mut self.archive);
                Some(end)
            }
            Ok(None) => {
                self.rep().replay = Some(replay);
                None
            }
            Err(e) => {
                replay.close(&mut self.archive);
                self.fail(format!("replaying the log: {e}"));
                None
            }
        }
    }

    fn stop_log_replay(&mut self) {
        if let Some(replay) = self.rep().replay.take() {
            replay.close(&mut self.archive);
        }
    }

    fn start_log_replication(
        &mut self,
        leader_member_id: i32,
        leader_recording_id: i64,
        stop_position: i64,
        now_ns: i64,
    ) {
        let Some(leader) = self
            .members
            .iter()
            .find(|m| m.id == leader_member_id)
            .cloned()
        else {
            self.rep().replication = Some(Err(format!(
                "no member {leader_member_id} to copy the log from"
            )));
            return;
        };
        let r = Replication {
            src_recording_id: leader_recording_id,
            dst_recording_id: self.recording_id,
            stop_position,
            src_control_channel: format!("aeron:udp?endpoint={}", leader.archive_endpoint),
            src_control_stream_id: self.ctx.archive_control_stream_id,
            replication_channel: self.ctx.replication_channel.clone(),
            ..Replication::default()
        };
        let start = self.recorded_position();
        let timeout = self.ctx.leader_heartbeat_timeout.as_nanos() as i64;
        let started = LogReplication::start(&mut self.archive, &r, start, timeout, now_ns);
        self.rep().replication = Some(started);
    }

    fn poll_log_replication(&mut self, now_ns: i64) -> Result<ReplicationProgress, String> {
        let Some(replication) = self.rep().replication.take() else {
            return Err("no log replication running".into());
        };
        let mut replication = replication?;
        let progress = replication.poll(&mut self.archive, now_ns);
        if replication.recording_id() >= 0 {
            self.recording_id = replication.recording_id();
        }
        self.rep().replication = Some(Ok(replication));
        progress
    }

    fn stop_log_replication(&mut self) {
        if let Some(Ok(replication)) = self.rep().replication.take() {
            replication.close(&mut self.archive);
        }
    }

    fn join_log_as_leader(
        &mut self,
        leadership_term_id: i64,
        log_position: i64,
        log_session_id: i32,
        is_startup: bool,
    ) {
        let (published, services) = self.leader_log_channels();
        let recorded = with_param(&published, &format!("session-id={log_session_id}"));
        let result = self.record_and_join_log(
            &recorded,
            source_location::LOCAL,
            services,
            log_session_id,
            log_position,
            role::LEADER,
            is_startup,
        );
        if let Err(e) = result {
            self.fail(format!(
                "joining the log as leader of term {leadership_term_id}: {e}"
            ));
            return;
        }
        self.term_base_log_position = log_position;
        self.agent.leadership_term_id = leadership_term_id;
        let me = self.ctx.member_id;
        let rep = self.rep();
        rep.log_session_id = log_session_id;
        rep.leader_member_id = me;
        rep.is_leader_startup = is_startup;
    }

    fn update_leader_position(
        &mut self,
        now_ns: i64,
        _append_position: i64,
        quorum_position: i64,
    ) -> i32 {
        let _ = now_ns;
        if quorum_position > self.agent.commit_position {
            self.agent.commit_position = quorum_position;
            self.commit.set(quorum_position);
            let m = sulis_protocol::cluster::messages::CommitPosition {
                leadership_term_id: self.agent.leadership_term_id,
                log_position: quorum_position,
                leader_member_id: self.ctx.member_id,
            };
            self.rep()
                .publisher
                .broadcast(&Outbound::Election(ConsensusMessage::CommitPosition(m)));
            return 1;
        }
        0
    }

    fn append_new_leadership_term_event(&mut self, _now_ns: i64) -> bool {
        let base = self.term_base_log_position;
        let mut event = NewLeadershipTermEvent {
            leadership_term_id: self.agent.leadership_term_id,
            log_position: 0,
            timestamp: self.log_time(),
            term_base_log_position: base,
            leader_member_id: self.ctx.member_id,
            log_session_id: self.rep().log_session_id,
            time_unit: sulis_protocol::cluster::messages::time_unit::MILLIS,
            app_version: self.ctx.app_version,
        };
        let length = event.encode().len() as i64;
        event.log_position = base + super::align32(32 + length);
        let encoded = event.encode();
        use crate::module::session_manager::SessionHost;
        if self.io.append_to_log(&encoded).is_none() {
            return false;
        }
        self.agent.term_first_entry_end = event.log_position;
        true
    }

    fn election_complete(&mut self, now_ns: i64) {
        let me = self.ctx.member_id;
        self.rep().completed = true;
        let leading = self.agent.role == role::LEADER;
        self.agent.state = crate::module::consensus_module_agent::ModuleState::Active;
        self.term.leadership_term_id = self.agent.leadership_term_id;
        self.term.ingress_endpoints =
            crate::module::cluster_member::ingress_endpoints(&self.members);
        if leading {
            self.term.leader_member_id = me;
            // A leader just started closes the sessions of old terms; one
            // taking over keeps them and tells their clients where it is.
            let startup = self.rep().is_leader_startup;
            self.agent
                .sessions
                .prepare_for_new_term(&mut self.io, startup, now_ns);
        }
        self.agent.time_of_last_leader_update_ns = now_ns;
        self.publish_state();
        self.control_toggle.set(super::toggle::NEUTRAL);
    }

    fn add_follower_subscription(&mut self, log_session_id: i32, catchup: bool) {
        // An image of this session left by an earlier attempt joined where
        // this member could not follow; the replay's data and the live
        // log's would go on filling it (for as long as the leader sends, it
        // never times out). Start on a fresh subscription, as Aeron makes
        // one per attempt.
        let stale = self.rep().follower_log.as_mut().is_some_and(|(sub, _)| {
            sub.images()
                .iter()
                .any(|i| i.session_id() == log_session_id)
        });
        if stale {
            self.replace_follower_log(&format!(
                "an earlier attempt's image of log session {log_session_id}"
            ));
        }
        let endpoint = if catchup {
            self.own_endpoint(|m| &m.catchup_endpoint)
        } else {
            self.own_endpoint(|m| &m.log_endpoint)
        };
        if self.rep().follower_log.is_none() {
            let tag = next_tag();
            let udp = self.rep().log_udp.clone();
            let channel = with_param(
                &udp,
                &format!("control-mode=manual|tags={tag}|rejoin=false|alias=log"),
            );
            match self
                .io
                .client
                .add_subscription(&channel, self.ctx.log_stream_id)
            {
                Ok(sub) => self.rep().follower_log = Some((sub, tag)),
                Err(e) => {
                    self.fail(format!("the follower's log subscription {channel}: {e}"));
                    return;
                }
            }
        }
        let rep = self.rep();
        rep.follower_session = Some(log_session_id);
        rep.follower_assembler = FragmentAssembler::new();
        if catchup || !rep.live_destination {
            self.add_log_destination(&endpoint, catchup);
        }
    }

    /// The catch-up endpoint to tell the leader: this member's, with the
    /// port the driver bound in place of `host:0` (Aeron's
    /// `tryResolveChannelEndpointPort`), or `None` until it is bound (the
    /// election then asks again): a replay sent to port 0 goes nowhere.
    fn catchup_endpoint(&self) -> Option<String> {
        let configured = self.own_endpoint(|m| &m.catchup_endpoint);
        if configured.is_empty() {
            return None;
        }
        let Some(host) = configured.strip_suffix(":0") else {
            return Some(configured);
        };
        let live = self.own_endpoint(|m| &m.log_endpoint);
        let live_port = live.rsplit_once(':').map_or("", |(_, p)| p);
        let (sub, _) = self.replicated.as_ref()?.follower_log.as_ref()?;
        sub.local_socket_addresses()
            .iter()
            .filter_map(|a| a.rsplit_once(':').map(|(_, p)| p))
            .find(|p| *p != live_port && *p != "0")
            .map(|p| format!("{host}:{p}"))
    }

    fn try_join_log_as_follower(
        &mut self,
        log_session_id: i32,
        log_position: i64,
        is_startup: bool,
        _now_ns: i64,
    ) -> JoinStatus {
        // Catching up, the live endpoint is added only near the live log
        // (`catchup_poll`): added now, the live log could make the image
        // first, at the leader's position rather than the replay's.
        if !self.rep().live_destination && self.rep().catchup_of.is_none() {
            let endpoint = self.own_endpoint(|m| &m.log_endpoint);
            if !self.add_log_destination(&endpoint, false) {
                return JoinStatus::NoImage;
            }
        }
        let Some((sub, tag)) = self.rep().follower_log.as_mut() else {
            return JoinStatus::Failed("no log subscription".into());
        };
        let tag = *tag;
        let Some(image) = sub
            .images()
            .into_iter()
            .find(|i| i.session_id() == log_session_id)
        else {
            return JoinStatus::NoImage;
        };
        let join_position = image.join_position();
        if join_position != log_position {
            return JoinStatus::Joining { join_position };
        }
        let udp = self.rep().log_udp.clone();
        let tagged = with_param(&udp, &format!("tags={tag}"));
        let recorded = with_param(
            &tagged,
            &format!("session-id={log_session_id}|rejoin=false"),
        );
        let result = self.record_and_join_log(
            &recorded,
            source_location::REMOTE,
            tagged,
            log_session_id,
            log_position,
            role::FOLLOWER,
            is_startup,
        );
        match result {
            Ok(()) => {
                self.term_base_log_position = log_position;
                JoinStatus::Joined { join_position }
            }
            Err(e) => JoinStatus::Failed(e),
        }
    }

    fn catchup_poll(
        &mut self,
        limit: i64,
        catchup_join_position: i64,
        now_ns: i64,
        terms: &mut Vec<TermEvent>,
    ) -> i32 {
        let mut work = 0;
        match self.apply_followed_log(limit, Some(terms)) {
            Ok(n) => work += n as i32,
            Err(e) => {
                self.fail(format!("catching up: {e}"));
                return work;
            }
        }
        // Near the live log: its destination too (both fill one image).
        let recorded = self.recorded_position();
        let window = self.ctx.log_term_length as i64 / 4;
        if !self.rep().live_destination && recorded + window >= catchup_join_position {
            let endpoint = self.own_endpoint(|m| &m.log_endpoint);
            self.add_log_destination(&endpoint, false);
            work += 1;
        }
        // Tell the leader how far it got (with the catch-up flag).
        let interval = self.ctx.leader_heartbeat_interval.as_nanos() as i64;
        let (last, at) = self.rep().catchup_reported;
        if let Some((leader, term)) = self.rep().catchup_of {
            if recorded > last || now_ns - at >= interval {
                let m = sulis_protocol::cluster::messages::AppendPosition {
                    leadership_term_id: term,
                    log_position: recorded,
                    follower_member_id: me_id(self),
                    flags: crate::module::election::APPEND_FLAG_CATCHUP,
                };
                if self.rep().publisher.send(
                    leader,
                    &Outbound::Election(ConsensusMessage::AppendPosition(m)),
                ) {
                    self.rep().catchup_reported = (recorded, now_ns);
                    work += 1;
                }
            }
        }
        work
    }

    fn is_catchup_done(&self) -> bool {
        self.replicated.as_ref().is_some_and(|r| r.catchup_done)
    }

    fn stop_catchup(&mut self) {
        let endpoint = self.own_endpoint(|m| &m.catchup_endpoint);
        let rep = self.rep();
        rep.catchup_of = None;
        if let Some((sub, _)) = rep.follower_log.as_ref() {
            // Gone already, or never added: nothing to do either way.
            let _ = sub.remove_destination(&format!("aeron:udp?endpoint={endpoint}"));
        }
    }

    fn close_log_subscription(&mut self) {
        // The subscription stays (see `Replicated::follower_log`); this
        // member follows no session until the next attempt names one.
        self.rep().follower_session = None;
    }

    fn commit_position(&self) -> i64 {
        self.agent.commit_position
    }

    fn append_position(&self) -> i64 {
        self.live_recorded_position()
            .unwrap_or_else(|| self.term_base_log_position.max(self.agent.commit_position))
    }

    fn is_snapshotting(&self) -> bool {
        self.snapshot.is_some()
    }

    fn track_catchup_completion(&mut self, _member_id: i32, _leadership_term_id: i64, _flags: u8) {}

    fn time_of_last_leader_update_ns(&self) -> i64 {
        self.replicated
            .as_ref()
            .map_or(0, |r| r.last_leader_update_ns)
    }

    fn log(&mut self, line: String) {
        self.log_event(line);
    }

    fn record_error(&mut self, line: &str) {
        self.mark.record_error(line, Self::cluster_time());
    }

    fn restart_required(&mut self, why: String) {
        self.fail(why);
    }
}
