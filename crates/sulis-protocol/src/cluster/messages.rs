//! Aeron Cluster's messages: SBE schema 111, encoded at version 16 (the
//! 1.51 release train: Aeron 1.51's `AeronCluster` client and members read
//! it), decoded at any version by the SBE rules of [`crate::sbe`].
//!
//! One table, in the schema's terms, as the archive's: for every message
//! its template id, root block length, fixed fields (type, offset, the
//! version that added them, a null other than the type's) and var fields in
//! order. Messages with repeating groups (ClusterMembersExtendedResponse and
//! BackupResponse, written by hand; StandbySnapshot) and those deprecated since version 12
//! (dynamic join) are not in it.

/// Schema id of Aeron Cluster's messages.
pub const SCHEMA_ID: u16 = 111;
/// Schema version sulis encodes with.
pub const SCHEMA_VERSION: u16 = 16;
/// Length of the session header in front of every application message:
/// the 8-byte SBE header and SessionMessageHeader's 24-byte block.
pub const SESSION_HEADER_LENGTH: usize = 32;

/// The client protocol's semantic version (0.3.0), sent in SessionConnectRequest.
pub const CLIENT_PROTOCOL_VERSION: i32 = crate::sbe::semantic_version(0, 3, 0);
/// The consensus protocol's semantic version (1.0.0), sent in CanvassPosition and RequestVote.
pub const CONSENSUS_PROTOCOL_VERSION: i32 = crate::sbe::semantic_version(1, 0, 0);

/// Aeron's "none" for ids, positions and terms.
pub const NULL_VALUE: i64 = -1;
/// Aeron's "no position".
pub const NULL_POSITION: i64 = -1;

/// SessionEvent.code.
pub mod event_code {
    /// The session is open.
    pub const OK: i32 = 0;
    /// The connect failed; `detail` says why.
    pub const ERROR: i32 = 1;
    /// Not the leader: `detail` lists the ingress endpoints, `leader_member_id` the leader.
    pub const REDIRECT: i32 = 2;
    /// The authenticator refused the credentials.
    pub const AUTHENTICATION_REJECTED: i32 = 3;
    /// The session was closed.
    pub const CLOSED: i32 = 4;
}

/// SessionEvent.detail of an OK that tells a client numbering its messages
/// (sulis's exactly-once client) how many of them the log holds committed,
/// in `correlation_id`: it may forget those. sulis's own; Aeron's client
/// numbers nothing and is never sent one.
pub const MESSAGES_COMMITTED: &str = "messages committed";

/// SessionEvent.detail of the OK a session's client is sent just before the
/// CLOSED that ends it, once its close is committed: `correlation_id` is how
/// many of its messages the log holds, for good (every later one was not
/// and will not be applied). sulis's own, as [`MESSAGES_COMMITTED`].
pub const MESSAGES_COMMITTED_AT_CLOSE: &str = "messages committed at close";

/// SessionEvent.detail of the OK that opens a session on a sulis leader:
/// it sequences numbered messages once each (a client numbers its messages
/// only when told so; Aeron's leader sends an empty detail).
pub const EXACTLY_ONCE: &str = "exactly once";

/// SessionCloseEvent.close_reason.
pub mod close_reason {
    /// The client asked.
    pub const CLIENT_ACTION: i32 = 0;
    /// A service closed it.
    pub const SERVICE_ACTION: i32 = 1;
    /// Nothing was heard from it in the session timeout.
    pub const TIMEOUT: i32 = 2;
}

/// ClusterActionRequest.action.
pub mod cluster_action {
    /// Stop taking ingress and timers.
    pub const SUSPEND: i32 = 0;
    /// Take them again.
    pub const RESUME: i32 = 1;
    /// Every member and service snapshots at this position.
    pub const SNAPSHOT: i32 = 2;
    /// sulis only (Aeron has no such action): every member deletes its log's
    /// segment files wholly before its latest snapshot, as the leader found
    /// every member's log past its own latest snapshot.
    pub const PURGE_LOG: i32 = 100;
}

/// SnapshotMarker.mark.
pub mod snapshot_mark {
    /// The snapshot begins.
    pub const BEGIN: i32 = 0;
    /// A section begins.
    pub const SECTION: i32 = 1;
    /// The snapshot ends.
    pub const END: i32 = 2;
}

/// ClusterTimeUnit.
pub mod time_unit {
    /// Milliseconds (Aeron's default clock).
    pub const MILLIS: i32 = 0;
    /// Microseconds.
    pub const MICROS: i32 = 1;
    /// Nanoseconds.
    pub const NANOS: i32 = 2;
}

/// AdminResponse.response_code.
pub mod admin_response_code {
    /// Done or submitted.
    pub const OK: i32 = 0;
    /// It failed.
    pub const ERROR: i32 = 1;
    /// The principal may not do it.
    pub const UNAUTHORISED_ACCESS: i32 = 2;
}

/// AdminRequest.request_type.
pub mod admin_request_type {
    /// Take a snapshot.
    pub const SNAPSHOT: i32 = 0;
}

/// JoinLog.role and the node-role counter (Aeron's `Cluster.Role`).
pub mod role {
    /// Follows the leader's log.
    pub const FOLLOWER: i32 = 0;
    /// Stands for election.
    pub const CANDIDATE: i32 = 1;
    /// Sequences the log.
    pub const LEADER: i32 = 2;
}

/// AppendPosition.flags.
pub mod append_flags {
    /// The follower is catching up from the leader's archive.
    pub const CATCHUP: u8 = 1;
}

crate::sbe_messages! {
    schema SCHEMA_ID, version SCHEMA_VERSION;

    /// Both ways and in the log: the 32 bytes before every application message (ingress, egress, service messages).
    SessionMessageHeader = 1, block 24 {
        leadership_term_id: i64 @0,
        cluster_session_id: i64 @8,
        timestamp: i64 @16,
    } var {}

    /// Egress: a session was opened (OK), refused (ERROR, AUTHENTICATION_REJECTED), sent elsewhere (REDIRECT) or closed.
    SessionEvent = 2, block 44 {
        cluster_session_id: i64 @0,
        correlation_id: i64 @8,
        leadership_term_id: i64 @16,
        leader_member_id: i32 @24,
        code: i32 @28,
        version: i32 @32 since 6 null = 0,
        leader_heartbeat_timeout_ns: i64 @36 since 13,
    } var { detail: ascii }

    /// Ingress: open a session whose egress goes to `response_channel`/`response_stream_id`.
    SessionConnectRequest = 3, block 16 {
        correlation_id: i64 @0,
        response_stream_id: i32 @8,
        version: i32 @12 since 2 null = 0,
    } var { response_channel: ascii, encoded_credentials: data, client_info: ascii since 14 }

    /// Ingress: close the session.
    SessionCloseRequest = 4, block 16 {
        leadership_term_id: i64 @0,
        cluster_session_id: i64 @8,
    } var {}

    /// Ingress: the session is alive (refreshes its activity time; not logged).
    SessionKeepAlive = 5, block 16 {
        leadership_term_id: i64 @0,
        cluster_session_id: i64 @8,
    } var {}

    /// Egress: a new leader took the session over; ingress now goes to it.
    NewLeaderEvent = 6, block 20 {
        leadership_term_id: i64 @0,
        cluster_session_id: i64 @8,
        leader_member_id: i32 @16,
    } var { ingress_endpoints: ascii }

    /// Egress: the authenticator asks the client to answer a challenge.
    Challenge = 7, block 16 {
        correlation_id: i64 @0,
        cluster_session_id: i64 @8,
    } var { encoded_challenge: data }

    /// Ingress: the answer to a Challenge.
    ChallengeResponse = 8, block 16 {
        correlation_id: i64 @0,
        cluster_session_id: i64 @8,
    } var { encoded_credentials: data }

    /// Log: a timer fired on the leader.
    TimerEvent = 20, block 24 {
        leadership_term_id: i64 @0,
        correlation_id: i64 @8,
        timestamp: i64 @16,
    } var {}

    /// Log: a session was authenticated and opened.
    SessionOpenEvent = 21, block 36 {
        leadership_term_id: i64 @0,
        correlation_id: i64 @8,
        cluster_session_id: i64 @16,
        timestamp: i64 @24,
        response_stream_id: i32 @32,
    } var { response_channel: ascii, encoded_principal: data }

    /// Log: a session was closed (`close_reason`: CLIENT_ACTION, SERVICE_ACTION, TIMEOUT).
    SessionCloseEvent = 22, block 28 {
        leadership_term_id: i64 @0,
        cluster_session_id: i64 @8,
        timestamp: i64 @16,
        close_reason: i32 @24,
    } var {}

    /// Log: SUSPEND, RESUME or SNAPSHOT at `log_position` (the position after this entry).
    ClusterActionRequest = 23, block 32 {
        leadership_term_id: i64 @0,
        log_position: i64 @8,
        timestamp: i64 @16,
        action: i32 @24,
        flags: i32 @28 since 11,
    } var {}

    /// Log: the first entry of every leadership term.
    NewLeadershipTermEvent = 24, block 48 {
        leadership_term_id: i64 @0,
        log_position: i64 @8,
        timestamp: i64 @16,
        term_base_log_position: i64 @24,
        leader_member_id: i32 @32,
        log_session_id: i32 @36,
        time_unit: i32 @40 since 4,
        app_version: i32 @44 since 4 null = 0,
    } var {}

    /// Log (legacy, never written): a dynamic membership change.
    MembershipChangeEvent = 25, block 40 {
        leadership_term_id: i64 @0,
        log_position: i64 @8,
        timestamp: i64 @16,
        leader_member_id: i32 @24,
        cluster_size: i32 @28,
        change_type: i32 @32,
        member_id: i32 @36,
    } var { cluster_members: ascii }

    /// Ingress: an admin request (SNAPSHOT) from an open session.
    AdminRequest = 26, block 28 {
        leadership_term_id: i64 @0,
        cluster_session_id: i64 @8,
        correlation_id: i64 @16,
        request_type: i32 @24,
    } var { payload: data }

    /// Egress: the answer to an AdminRequest.
    AdminResponse = 27, block 24 {
        cluster_session_id: i64 @0,
        correlation_id: i64 @8,
        request_type: i32 @16,
        response_code: i32 @20,
    } var { message: ascii, payload: data }

    /// Service → consensus module: close a client session.
    CloseSession = 30, block 8 {
        cluster_session_id: i64 @0,
    } var {}

    /// Service → consensus module: schedule (or reschedule) a timer.
    ScheduleTimer = 31, block 16 {
        correlation_id: i64 @0,
        deadline: i64 @8,
    } var {}

    /// Service → consensus module: cancel a timer.
    CancelTimer = 32, block 8 {
        correlation_id: i64 @0,
    } var {}

    /// Service → consensus module: the service reached `log_position` (start, join, snapshot, termination).
    ServiceAck = 33, block 36 {
        log_position: i64 @0,
        timestamp: i64 @8,
        ack_id: i64 @16,
        relevant_id: i64 @24,
        service_id: i32 @32,
    } var {}

    /// Tool → consensus module: who the members and the leader are.
    ClusterMembersQuery = 34, block 12 {
        correlation_id: i64 @0,
        extended: i32 @8 since 5,
    } var {}

    /// Consensus module → service: follow the log from `log_position` on `log_channel`, session `log_session_id`.
    JoinLog = 40, block 40 {
        log_position: i64 @0,
        max_log_position: i64 @8,
        member_id: i32 @16,
        log_session_id: i32 @20,
        log_stream_id: i32 @24,
        is_startup: i32 @28,
        role: i32 @32,
        is_standby: i32 @36 since 16,
    } var { log_channel: ascii }

    /// Consensus module → tool: the members and the leader.
    ClusterMembersResponse = 41, block 12 {
        correlation_id: i64 @0,
        leader_member_id: i32 @8,
    } var { active_members: ascii, passive_followers: ascii }

    /// Consensus module → service: terminate at `log_position`.
    ServiceTerminationPosition = 42, block 8 {
        log_position: i64 @0,
    } var {}

    /// Consensus module → service: ack when you reach `log_position`.
    RequestServiceAck = 108, block 8 {
        log_position: i64 @0,
    } var {}

    /// Consensus: a member's log (last term, append position) while it canvasses.
    CanvassPosition = 50, block 32 {
        log_leadership_term_id: i64 @0,
        log_position: i64 @8,
        leadership_term_id: i64 @16,
        follower_member_id: i32 @24,
        protocol_version: i32 @28 since 9 null = 0,
    } var {}

    /// Consensus: a candidate asks for votes in `candidate_term_id`.
    RequestVote = 51, block 32 {
        log_leadership_term_id: i64 @0,
        log_position: i64 @8,
        candidate_term_id: i64 @16,
        candidate_member_id: i32 @24,
        protocol_version: i32 @28 since 9 null = 0,
    } var {}

    /// Consensus: the answer to a RequestVote (`vote`: BooleanType).
    Vote = 52, block 36 {
        candidate_term_id: i64 @0,
        log_leadership_term_id: i64 @8,
        log_position: i64 @16,
        candidate_member_id: i32 @24,
        follower_member_id: i32 @28,
        vote: i32 @32,
    } var {}

    /// Consensus: the leader announces its term, tailored to the follower's last term (`log_leadership_term_id`).
    NewLeadershipTerm = 53, block 96 {
        log_leadership_term_id: i64 @0,
        next_leadership_term_id: i64 @8,
        next_term_base_log_position: i64 @16,
        next_log_position: i64 @24,
        leadership_term_id: i64 @32,
        term_base_log_position: i64 @40,
        log_position: i64 @48,
        leader_recording_id: i64 @56,
        timestamp: i64 @64,
        leader_member_id: i32 @72,
        log_session_id: i32 @76,
        app_version: i32 @80 null = 0,
        is_startup: i32 @84,
        commit_position: i64 @88 since 15,
    } var {}

    /// Consensus: how much of the log a follower has recorded (`flags` bit 0: catching up).
    AppendPosition = 54, block 21 {
        leadership_term_id: i64 @0,
        log_position: i64 @8,
        follower_member_id: i32 @16,
        flags: u8 @20 since 8,
    } var {}

    /// Consensus: the quorum position the leader announces.
    CommitPosition = 55, block 20 {
        leadership_term_id: i64 @0,
        log_position: i64 @8,
        leader_member_id: i32 @16,
    } var {}

    /// Consensus: a follower asks for a catch-up replay from `log_position` to its `catchup_endpoint`.
    CatchupPosition = 56, block 20 {
        leadership_term_id: i64 @0,
        log_position: i64 @8,
        follower_member_id: i32 @16,
    } var { catchup_endpoint: ascii }

    /// Consensus: the follower caught up; stop its replay.
    StopCatchup = 57, block 12 {
        leadership_term_id: i64 @0,
        follower_member_id: i32 @8,
    } var {}

    /// Consensus: members stop at `log_position` (orderly shutdown).
    TerminationPosition = 75, block 16 {
        leadership_term_id: i64 @0,
        log_position: i64 @8,
    } var {}

    /// Consensus: a member reached the termination position.
    TerminationAck = 76, block 20 {
        leadership_term_id: i64 @0,
        log_position: i64 @8,
        member_id: i32 @16,
    } var {}

    /// Consensus: a backup or standby asks what to copy.
    BackupQuery = 77, block 24 {
        correlation_id: i64 @0,
        response_stream_id: i32 @8,
        version: i32 @12 since 2 null = 0,
        log_position: i64 @16 since 16,
    } var { response_channel: ascii, encoded_credentials: data }

    /// Consensus (sulis's own template): a member seeding itself from
    /// another asks for its recording log, answered on `response_channel`.
    RecordingLogQuery = 250, block 12 {
        correlation_id: i64 @0,
        response_stream_id: i32 @8,
    } var { response_channel: ascii }

    /// Consensus (sulis's own template): the answer to a RecordingLogQuery:
    /// the member's valid recording-log entries, each as `recording.log`
    /// holds it, its candidate term and how far its log is committed.
    RecordingLogResponse = 251, block 32 {
        correlation_id: i64 @0,
        candidate_term_id: i64 @8,
        commit_position: i64 @16,
        member_id: i32 @24,
        service_count: i32 @28,
    } var { entries: data }

    /// Consensus: a backup's liveness probe.
    HeartbeatRequest = 79, block 12 {
        correlation_id: i64 @0,
        response_stream_id: i32 @8,
    } var { response_channel: ascii, encoded_credentials: data }

    /// Consensus: the answer to a HeartbeatRequest.
    HeartbeatResponse = 80, block 8 {
        correlation_id: i64 @0,
    } var {}

    /// Snapshot: begin, section or end of a snapshot.
    SnapshotMarker = 100, block 40 {
        type_id: i64 @0,
        log_position: i64 @8,
        leadership_term_id: i64 @16,
        index: i32 @24,
        mark: i32 @28,
        time_unit: i32 @32 since 4,
        app_version: i32 @36 since 4 null = 0,
    } var {}

    /// Service snapshot: an open client session.
    ClientSession = 102, block 12 {
        cluster_session_id: i64 @0,
        response_stream_id: i32 @8,
    } var { response_channel: ascii, encoded_principal: data }

    /// Consensus module snapshot: a session. `messages_in_log` is sulis's,
    /// after Aeron's block (SBE's way to extend one: Aeron's decoder skips
    /// it by the block length): how many of the session's messages the log
    /// holds, the count a client that numbers its messages is deduplicated
    /// against (0 in a snapshot Aeron wrote).
    ClusterSession = 103, block 48 {
        cluster_session_id: i64 @0,
        correlation_id: i64 @8,
        opened_log_position: i64 @16,
        time_of_last_activity: i64 @24,
        close_reason: i32 @32,
        response_stream_id: i32 @36,
        messages_in_log: i64 @40 null = 0,
    } var { response_channel: ascii }

    /// Consensus module snapshot: a pending timer.
    Timer = 104, block 16 {
        correlation_id: i64 @0,
        deadline: i64 @8,
    } var {}

    /// Consensus module snapshot: its counters of session ids.
    ConsensusModule = 105, block 28 {
        next_session_id: i64 @0,
        next_service_session_id: i64 @8 since 3,
        log_service_session_id: i64 @16 since 3,
        pending_message_capacity: i32 @24 since 3 null = 0,
    } var {}

    /// Consensus module snapshot: the members (legacy).
    ClusterMembers = 106, block 8 {
        member_id: i32 @0,
        high_member_id: i32 @4,
    } var { cluster_members: ascii }

    /// Consensus module snapshot: a service's pending message ids.
    PendingMessageTracker = 107, block 24 {
        next_service_session_id: i64 @0,
        log_service_session_id: i64 @8,
        pending_message_capacity: i32 @16 null = 0,
        service_id: i32 @20,
    } var {}
}

/// A CloseSession that says why (sulis's, from a service container closing
/// a session whose egress could not take its answers): Aeron's block, then
/// the reason as an ASCII var field, which Aeron's decoder, reading the
/// block only, passes over. Non-ASCII is replaced by `?`.
pub fn close_session_with_detail(cluster_session_id: i64, detail: &str) -> Vec<u8> {
    let mut m = CloseSession { cluster_session_id }.encode();
    let text: Vec<u8> = detail
        .bytes()
        .map(|b| if b.is_ascii() { b } else { b'?' })
        .collect();
    m.extend_from_slice(&(text.len() as u32).to_le_bytes());
    m.extend_from_slice(&text);
    m
}

/// The reason a CloseSession carries after its block, if any
/// ([`close_session_with_detail`]); None for Aeron's.
pub fn close_session_detail(m: &[u8]) -> Option<String> {
    let rest = m.get(8 + 8..)?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let text = rest.get(4..4 + len)?;
    text.is_ascii()
        .then(|| String::from_utf8(text.to_vec()).expect("ASCII"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sbe::Header;

    #[test]
    fn the_session_header_is_the_32_bytes_aeron_puts_before_every_message() {
        let h = SessionMessageHeader {
            leadership_term_id: 3,
            cluster_session_id: 42,
            timestamp: 1_700_000_000_123,
        };
        let b = h.encode();
        assert_eq!(b.len(), SESSION_HEADER_LENGTH);
        assert_eq!(
            Header::decode(&b).unwrap(),
            Header {
                block_length: 24,
                template_id: 1,
                schema_id: 111,
                version: 16
            }
        );
        assert_eq!(i64::from_le_bytes(b[16..24].try_into().unwrap()), 42);
        assert_eq!(SessionMessageHeader::decode(&b).unwrap(), h);
    }

    #[test]
    fn connect_request_var_fields_follow_the_block_in_schema_order() {
        let m = SessionConnectRequest {
            correlation_id: 7,
            response_stream_id: 102,
            version: CLIENT_PROTOCOL_VERSION,
            response_channel: "aeron:udp?endpoint=127.0.0.1:9020".into(),
            encoded_credentials: vec![1, 2, 3],
            client_info: "name=sulis".into(),
        };
        let b = m.encode();
        let rc = 8 + 16;
        assert_eq!(
            u32::from_le_bytes(b[rc..rc + 4].try_into().unwrap()) as usize,
            m.response_channel.len()
        );
        assert_eq!(SessionConnectRequest::decode(&b).unwrap(), m);
        // A version-13 sender (before client_info) still decodes, client_info empty.
        let mut old = b[..b.len() - 4 - m.client_info.len()].to_vec();
        old[6..8].copy_from_slice(&13u16.to_le_bytes());
        let d = SessionConnectRequest::decode(&old).unwrap();
        assert_eq!(
            (d.client_info.as_str(), d.encoded_credentials.as_slice()),
            ("", &[1u8, 2, 3][..])
        );
    }

    #[test]
    fn fields_a_sender_predates_read_as_their_nulls() {
        let e = SessionEvent {
            cluster_session_id: 1,
            correlation_id: 2,
            leadership_term_id: 3,
            leader_member_id: 0,
            code: event_code::OK,
            version: CLIENT_PROTOCOL_VERSION,
            leader_heartbeat_timeout_ns: 10_000_000_000,
            detail: String::new(),
        };
        let mut b = e.encode();
        b[6..8].copy_from_slice(&5u16.to_le_bytes()); // before version (6) and the timeout (13)
        let d = SessionEvent::decode(&b).unwrap();
        assert_eq!((d.version, d.leader_heartbeat_timeout_ns), (0, i64::MIN));
        let a = AppendPosition {
            leadership_term_id: 1,
            log_position: 64,
            follower_member_id: 2,
            flags: 1,
        };
        let b = a.encode();
        assert_eq!(b.len(), 8 + 21);
        assert_eq!(AppendPosition::decode(&b).unwrap(), a);
    }

    #[test]
    fn every_consensus_message_round_trips_and_is_named() {
        let nlt = NewLeadershipTerm {
            log_leadership_term_id: 1,
            next_leadership_term_id: 2,
            next_term_base_log_position: 640,
            next_log_position: -1,
            leadership_term_id: 2,
            term_base_log_position: 640,
            log_position: 1024,
            leader_recording_id: 0,
            timestamp: 5,
            leader_member_id: 1,
            log_session_id: -77,
            app_version: 1,
            is_startup: 0,
            commit_position: 960,
        };
        assert_eq!(NewLeadershipTerm::decode(&nlt.encode()).unwrap(), nlt);
        let v = Vote {
            candidate_term_id: 4,
            log_leadership_term_id: 3,
            log_position: 320,
            candidate_member_id: 1,
            follower_member_id: 2,
            vote: 1,
        };
        assert_eq!(Vote::decode(&v.encode()).unwrap(), v);
        let c = CatchupPosition {
            leadership_term_id: 4,
            log_position: 64,
            follower_member_id: 2,
            catchup_endpoint: "10.0.0.3:9004".into(),
        };
        assert_eq!(CatchupPosition::decode(&c.encode()).unwrap(), c);
        assert_eq!(template_name(53), Some("NewLeadershipTerm"));
        assert_eq!(template_name(108), Some("RequestServiceAck"));
        assert_eq!(template_name(74), None); // JoinCluster: dynamic join, deprecated
        assert!(Vote::decode(&nlt.encode())
            .unwrap_err()
            .message
            .contains("template id 53"));
    }

    #[test]
    fn a_close_session_carries_its_reason_after_aerons_block() {
        let m = close_session_with_detail(7, "egress queue full");
        assert_eq!(CloseSession::decode(&m).unwrap().cluster_session_id, 7);
        assert_eq!(
            close_session_detail(&m).as_deref(),
            Some("egress queue full")
        );
        let aeron = CloseSession {
            cluster_session_id: 7,
        }
        .encode();
        assert_eq!(close_session_detail(&aeron), None);
    }
}
