//! The consensus module (Aeron's `ConsensusModuleAgent`), growing here part
//! by part. This part is the state every member keeps beside its services —
//! sessions, timers, the services' pending messages, the module state
//! (ACTIVE, SUSPENDED, SNAPSHOT, ...) and the term — and how a member
//! applies the log to it: a follower as the leader's log commits, any
//! member when it replays its log at start or in an election (fix 7 of the
//! election makes that the module's job). A member that applied a log holds
//! what the leader that wrote it held, so it can take over.

use crate::log_adapter::LogEntry;
use crate::pending_service_message_tracker::{
    service_id_from_log_message, PendingServiceMessageTracker,
};
use crate::session_manager::{SessionConfig, SessionManager};
use crate::timer_service::TimerService;
use sulis_protocol::cluster::messages::{cluster_action, role, time_unit, NULL_VALUE};

/// The module's state (Aeron's `ConsensusModule.State`; the values are the
/// module-state counter's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleState {
    /// Starting.
    Init = 0,
    /// Sequencing (leader) or following.
    Active = 1,
    /// The leader takes no ingress and fires no timers.
    Suspended = 2,
    /// Taking a snapshot.
    Snapshot = 3,
    /// Leaving the cluster.
    Quitting = 4,
    /// Shutting down with the cluster.
    Terminating = 5,
    /// Stopped.
    Closed = 6,
}

/// What the module runs with.
#[derive(Clone, Debug)]
pub struct ConsensusConfig {
    /// This member's id.
    pub member_id: i32,
    /// Services on this member (1 to 10).
    pub service_count: usize,
    /// The application's semantic version: a log written by another major
    /// version is refused.
    pub app_version: i32,
    /// The cluster clock's unit (`time_unit::*`).
    pub time_unit: i32,
    /// The sessions' settings.
    pub sessions: SessionConfig,
}

/// What applying an entry asks of the rest of the module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Nothing more.
    Nothing,
    /// Every member snapshots here (a SNAPSHOT action).
    TakeSnapshot {
        /// The position the snapshot is of.
        log_position: i64,
        /// Its term.
        leadership_term_id: i64,
        /// The action's cluster time.
        timestamp: i64,
    },
    /// A term begins: the recording log is to hold it.
    NewTerm {
        /// The term.
        leadership_term_id: i64,
        /// Where it begins.
        term_base_log_position: i64,
        /// Its leader.
        leader_member_id: i32,
        /// Its log session.
        log_session_id: i32,
        /// The term's first cluster time.
        timestamp: i64,
    },
}

/// The consensus module's replicated state.
pub struct ConsensusModuleAgent {
    cfg: ConsensusConfig,
    /// See [`ModuleState`].
    pub state: ModuleState,
    /// `role::*`.
    pub role: i32,
    /// The term whose log is applied (−1 before any).
    pub leadership_term_id: i64,
    /// The cluster time of the last entry applied.
    pub cluster_time: i64,
    /// The client sessions.
    pub sessions: SessionManager,
    /// The services' timers.
    pub timers: TimerService,
    /// Each service's messages to the cluster.
    pub trackers: Vec<PendingServiceMessageTracker>,
}

impl ConsensusModuleAgent {
    /// A module with nothing applied.
    pub fn new(cfg: ConsensusConfig) -> ConsensusModuleAgent {
        let trackers = (0..cfg.service_count as i32)
            .map(PendingServiceMessageTracker::new)
            .collect();
        ConsensusModuleAgent {
            sessions: SessionManager::new(cfg.sessions.clone()),
            cfg,
            state: ModuleState::Init,
            role: role::FOLLOWER,
            leadership_term_id: NULL_VALUE,
            cluster_time: 0,
            timers: TimerService::new(),
            trackers,
        }
    }

    /// Nanoseconds in one unit of cluster time.
    pub fn ns_per_unit(&self) -> i64 {
        match self.cfg.time_unit {
            time_unit::NANOS => 1,
            time_unit::MICROS => 1_000,
            _ => 1_000_000,
        }
    }

    /// Applies the log entry that ends at `position`. An entry this member
    /// cannot apply as the leader did (another application major version,
    /// another clock unit, a service it does not run) is an error naming the
    /// position: going on would make it a different replica.
    pub fn on_log_entry(&mut self, entry: &LogEntry<'_>, position: i64) -> Result<Applied, String> {
        let at = |reason: String| format!("log entry ending at position {position}: {reason}");
        match entry {
            LogEntry::SessionMessage {
                cluster_session_id,
                timestamp,
                ..
            } => {
                self.cluster_time = *timestamp;
                if *cluster_session_id < 0 {
                    let service = service_id_from_log_message(*cluster_session_id) as usize;
                    let Some(tracker) = self.trackers.get_mut(service) else {
                        return Err(at(format!(
                            "a message of service {service}; this member runs {} service(s)",
                            self.cfg.service_count
                        )));
                    };
                    tracker.sweep_follower(*cluster_session_id);
                } else {
                    let ns = timestamp.saturating_mul(self.ns_per_unit());
                    self.sessions.touch(*cluster_session_id, ns);
                }
            }
            LogEntry::Timer(t) => {
                self.cluster_time = t.timestamp;
                self.timers.on_replayed_timer_event(t.correlation_id);
            }
            LogEntry::SessionOpen(o) => {
                self.cluster_time = o.timestamp;
                self.sessions.on_replay_session_open(
                    position,
                    o.correlation_id,
                    o.cluster_session_id,
                    o.timestamp.saturating_mul(self.ns_per_unit()),
                    o.response_stream_id,
                    &o.response_channel,
                );
            }
            LogEntry::SessionClose(c) => {
                self.cluster_time = c.timestamp;
                self.sessions
                    .on_replay_session_close(c.cluster_session_id, c.close_reason);
            }
            LogEntry::ClusterAction(a) => {
                self.cluster_time = a.timestamp;
                if a.leadership_term_id != self.leadership_term_id {
                    // Aeron acts only on its own term's actions.
                    return Ok(Applied::Nothing);
                }
                match a.action {
                    cluster_action::SUSPEND => self.state = ModuleState::Suspended,
                    cluster_action::RESUME => self.state = ModuleState::Active,
                    cluster_action::SNAPSHOT if a.flags == 0 => {
                        self.state = ModuleState::Snapshot;
                        return Ok(Applied::TakeSnapshot {
                            log_position: position,
                            leadership_term_id: a.leadership_term_id,
                            timestamp: a.timestamp,
                        });
                    }
                    // A standby snapshot (flag 1) is for standbys, which sulis has not.
                    cluster_action::SNAPSHOT => {}
                    other => return Err(at(format!("unknown cluster action {other}"))),
                }
            }
            LogEntry::NewLeadershipTerm(t) => {
                if t.time_unit != self.cfg.time_unit {
                    return Err(at(format!(
                        "the log's cluster time unit is {}, this member's {}",
                        unit_name(t.time_unit),
                        unit_name(self.cfg.time_unit)
                    )));
                }
                if major(t.app_version) != major(self.cfg.app_version) {
                    return Err(at(format!(
                        "the log was written by application version {}, this member runs {} (majors must match)",
                        version_string(t.app_version),
                        version_string(self.cfg.app_version)
                    )));
                }
                self.cluster_time = t.timestamp;
                self.leadership_term_id = t.leadership_term_id;
                return Ok(Applied::NewTerm {
                    leadership_term_id: t.leadership_term_id,
                    term_base_log_position: t.term_base_log_position,
                    leader_member_id: t.leader_member_id,
                    log_session_id: t.log_session_id,
                    timestamp: t.timestamp,
                });
            }
            LogEntry::MembershipChange => {}
        }
        Ok(Applied::Nothing)
    }

    /// The settings.
    pub fn config(&self) -> &ConsensusConfig {
        &self.cfg
    }
}

fn unit_name(unit: i32) -> String {
    match unit {
        time_unit::MILLIS => "MILLISECONDS".into(),
        time_unit::MICROS => "MICROSECONDS".into(),
        time_unit::NANOS => "NANOSECONDS".into(),
        other => format!("unknown ({other})"),
    }
}

fn major(version: i32) -> i32 {
    (version >> 16) & 0xff
}

fn version_string(version: i32) -> String {
    format!(
        "{}.{}.{}",
        major(version),
        (version >> 8) & 0xff,
        version & 0xff
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log_adapter::decode;
    use crate::pending_service_message_tracker::service_session_id;
    use crate::session_manager::{ConnectRequest, SessionHost, Term};
    use sulis_archive::auth::AllowAll;
    use sulis_protocol::cluster::messages::{
        ClusterActionRequest, NewLeadershipTermEvent, SessionMessageHeader, TimerEvent,
        CLIENT_PROTOCOL_VERSION,
    };
    use sulis_protocol::sbe::semantic_version;

    const MS: i64 = 1_000_000;

    fn config() -> ConsensusConfig {
        ConsensusConfig {
            member_id: 1,
            service_count: 2,
            app_version: semantic_version(2, 1, 0),
            time_unit: time_unit::MILLIS,
            sessions: SessionConfig {
                member_id: 1,
                session_timeout_ns: 10_000 * MS,
                max_concurrent_sessions: 10,
                leader_heartbeat_timeout_ns: 10_000 * MS,
            },
        }
    }

    /// The leader's side: its log, its egress always up.
    #[derive(Default)]
    struct Leader {
        log: Vec<(Vec<u8>, i64)>,
        position: i64,
    }

    impl Leader {
        fn append(&mut self, entry: Vec<u8>) -> i64 {
            self.position += (32 + entry.len() as i64 + 31) & !31;
            self.log.push((entry, self.position));
            self.position
        }
    }

    impl SessionHost for Leader {
        fn connect_egress(&mut self, _key: u64, _channel: &str, _stream_id: i32) {}
        fn is_egress_connected(&mut self, _key: u64) -> Option<bool> {
            Some(true)
        }
        fn send_egress(&mut self, _key: u64, _message: &[u8]) -> bool {
            true
        }
        fn close_egress(&mut self, _key: u64) {}
        fn append_to_log(&mut self, entry: &[u8]) -> Option<i64> {
            Some(self.append(entry.to_vec()))
        }
    }

    fn term_event(term: i64, base: i64, app_version: i32, unit: i32) -> Vec<u8> {
        NewLeadershipTermEvent {
            leadership_term_id: term,
            log_position: base + 96,
            timestamp: 1_000,
            term_base_log_position: base,
            leader_member_id: 0,
            log_session_id: 55,
            time_unit: unit,
            app_version,
        }
        .encode()
    }

    fn message(term: i64, session: i64, timestamp: i64) -> Vec<u8> {
        let mut m = SessionMessageHeader {
            leadership_term_id: term,
            cluster_session_id: session,
            timestamp,
        }
        .encode();
        m.extend_from_slice(b"payload");
        m
    }

    #[test]
    fn a_follower_that_applies_the_leaders_log_holds_the_leaders_sessions_timers_and_service_messages(
    ) {
        // The leader: a term, three sessions, one closed, messages, a timer
        // fired, service messages.
        let mut leader = Leader::default();
        let mut sessions = SessionManager::new(config().sessions);
        let term = Term {
            leadership_term_id: 0,
            leader_member_id: 0,
            ingress_endpoints: String::new(),
        };
        leader.append(term_event(
            0,
            0,
            semantic_version(2, 1, 0),
            time_unit::MILLIS,
        ));
        for c in 0..3 {
            let req = ConnectRequest {
                correlation_id: 40 + c,
                response_stream_id: 102,
                version: CLIENT_PROTOCOL_VERSION,
                response_channel: format!("aeron:udp?endpoint=client{c}:9010"),
                encoded_credentials: Vec::new(),
                ingress_image_correlation_id: 1,
            };
            let now = 1_000 + c;
            sessions.on_session_connect(&mut leader, &mut AllowAll, &req, true, &term, now * MS);
            sessions.process_pending(&mut leader, &term, now * MS, now);
        }
        leader.append(message(0, 2, 1_500));
        sessions.touch(2, 1_500 * MS);
        sessions.on_session_close_request(&mut leader, 1, &term, 1_600 * MS, 1_600);
        leader.append(
            TimerEvent {
                leadership_term_id: 0,
                correlation_id: 7,
                timestamp: 1_700,
            }
            .encode(),
        );
        leader.append(message(0, service_session_id(1, i64::MIN + 1), 1_800));

        // The follower: its service scheduled timers 7 and 8, and sent the
        // same service message the leader's did.
        let mut f = ConsensusModuleAgent::new(config());
        f.timers.schedule_from_service(7, 1_700);
        f.timers.schedule_from_service(8, 9_000);
        assert_eq!(
            f.trackers[1].enqueue(b"svc".to_vec()),
            service_session_id(1, i64::MIN + 1)
        );
        let mut applied = Vec::new();
        for (entry, position) in &leader.log {
            let e = decode(entry, *position).expect("a log entry");
            applied.push(f.on_log_entry(&e, *position).expect("applies"));
        }
        assert_eq!(
            applied[0],
            Applied::NewTerm {
                leadership_term_id: 0,
                term_base_log_position: 0,
                leader_member_id: 0,
                log_session_id: 55,
                timestamp: 1_000
            }
        );
        assert_eq!(f.leadership_term_id, 0);
        assert_eq!(
            f.sessions.snapshot(),
            sessions.snapshot(),
            "the same sessions as the leader"
        );
        assert_eq!(f.sessions.next_session_id(), sessions.next_session_id());
        assert_eq!(
            f.sessions
                .session(2)
                .expect("open")
                .time_of_last_activity_ns,
            1_500 * MS,
            "activity from the message's cluster time"
        );
        assert_eq!(
            f.timers.snapshot(),
            vec![(8, 9_000)],
            "timer 7 fired on the leader"
        );
        assert!(
            f.trackers[1].is_empty(),
            "the log holds the service's message"
        );
        assert_eq!(f.cluster_time, 1_800);
    }

    #[test]
    fn a_timer_event_applied_before_the_service_schedules_it_does_not_fire_again() {
        let mut f = ConsensusModuleAgent::new(config());
        let t = TimerEvent {
            leadership_term_id: 0,
            correlation_id: 3,
            timestamp: 10,
        }
        .encode();
        f.on_log_entry(&decode(&t, 64).expect("entry"), 64)
            .expect("applies");
        assert!(!f.timers.schedule_from_service(3, 10));
        assert!(f.timers.is_empty());
    }

    #[test]
    fn cluster_actions_of_the_current_term_change_the_module_state() {
        let mut f = ConsensusModuleAgent::new(config());
        let term = term_event(2, 0, semantic_version(2, 0, 0), time_unit::MILLIS);
        f.on_log_entry(&decode(&term, 96).expect("entry"), 96)
            .expect("applies");
        let action = |term: i64, action: i32, flags: i32| {
            ClusterActionRequest {
                leadership_term_id: term,
                log_position: 0,
                timestamp: 5,
                action,
                flags,
            }
            .encode()
        };
        let suspend = action(2, cluster_action::SUSPEND, 0);
        f.on_log_entry(&decode(&suspend, 128).expect("entry"), 128)
            .expect("applies");
        assert_eq!(f.state, ModuleState::Suspended);
        let resume = action(2, cluster_action::RESUME, 0);
        f.on_log_entry(&decode(&resume, 160).expect("entry"), 160)
            .expect("applies");
        assert_eq!(f.state, ModuleState::Active);
        let old = action(1, cluster_action::SUSPEND, 0);
        f.on_log_entry(&decode(&old, 192).expect("entry"), 192)
            .expect("applies");
        assert_eq!(
            f.state,
            ModuleState::Active,
            "another term's action is not acted on"
        );
        let standby = action(2, cluster_action::SNAPSHOT, 1);
        assert_eq!(
            f.on_log_entry(&decode(&standby, 224).expect("entry"), 224),
            Ok(Applied::Nothing)
        );
        let snapshot = action(2, cluster_action::SNAPSHOT, 0);
        assert_eq!(
            f.on_log_entry(&decode(&snapshot, 256).expect("entry"), 256),
            Ok(Applied::TakeSnapshot {
                log_position: 256,
                leadership_term_id: 2,
                timestamp: 5
            })
        );
        assert_eq!(f.state, ModuleState::Snapshot);
    }

    #[test]
    fn a_log_of_another_major_version_clock_unit_or_service_is_refused_naming_the_position() {
        let mut f = ConsensusModuleAgent::new(config());
        let other_major = term_event(0, 0, semantic_version(3, 0, 0), time_unit::MILLIS);
        let e = f
            .on_log_entry(&decode(&other_major, 96).expect("entry"), 96)
            .unwrap_err();
        assert_eq!(
            e,
            "log entry ending at position 96: the log was written by application version 3.0.0, this member runs 2.1.0 (majors must match)"
        );
        let nanos = term_event(0, 0, semantic_version(2, 9, 9), time_unit::NANOS);
        let e = f
            .on_log_entry(&decode(&nanos, 96).expect("entry"), 96)
            .unwrap_err();
        assert!(
            e.contains("cluster time unit is NANOSECONDS, this member's MILLISECONDS"),
            "{e}"
        );
        assert_eq!(f.leadership_term_id, NULL_VALUE, "nothing applied");
        let stranger = message(0, service_session_id(5, i64::MIN + 1), 1);
        let e = f
            .on_log_entry(&decode(&stranger, 128).expect("entry"), 128)
            .unwrap_err();
        assert!(
            e.contains("a message of service 5; this member runs 2 service(s)"),
            "{e}"
        );
    }
}
