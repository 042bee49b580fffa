//! The consensus module's snapshot (Aeron's `ConsensusModuleSnapshotTaker`
//! and `ConsensusModuleSnapshotLoader`, snapshot type 1): what the module
//! holds beside the log at a log position — the next session id, the open
//! and closing sessions, the timers and each service's messages not yet in
//! the log — as schema 111's snapshot messages in Aeron's order, between
//! a BEGIN and an END marker. Pure encoding here; the messages are
//! recorded and read back by [`crate::service::snapshot_taker`].

use crate::module::consensus_module_agent::ConsensusModuleAgent;
use crate::module::pending_service_message_tracker::PendingServiceMessageTracker;
use crate::module::session_manager::SessionSnapshot;
use crate::module::timer_service::TimerService;
pub use crate::service::snapshot_taker::{
    marker, SnapshotMark, CONSENSUS_MODULE_SNAPSHOT_TYPE_ID, SERVICE_SNAPSHOT_TYPE_ID,
};
use sulis_protocol::cluster::messages::{
    snapshot_mark, ClusterSession, ConsensusModule as ConsensusModuleState, PendingMessageTracker,
    SessionMessageHeader, SnapshotMarker, Timer, NULL_VALUE, SESSION_HEADER_LENGTH,
};
use sulis_protocol::sbe::{semantic_major, semantic_version_string, Header as SbeHeader};

/// A service's tracker in a snapshot: next id, the log's last id, the messages kept.
type TrackerState = (i64, i64, Vec<(i64, Vec<u8>)>);

/// The module's state at `at` as a snapshot's messages, in order.
pub fn take(agent: &ConsensusModuleAgent, at: &SnapshotMark) -> Vec<Vec<u8>> {
    let mut out = vec![marker(
        CONSENSUS_MODULE_SNAPSHOT_TYPE_ID,
        snapshot_mark::BEGIN,
        at,
    )];
    let (next0, log0) = agent
        .trackers
        .first()
        .map_or((NULL_VALUE, NULL_VALUE), |t| {
            (t.next_service_session_id(), t.log_service_session_id())
        });
    out.push(
        ConsensusModuleState {
            next_session_id: agent.sessions.next_committed_session_id(),
            next_service_session_id: next0,
            log_service_session_id: log0,
            pending_message_capacity: 0,
        }
        .encode(),
    );
    for s in agent.sessions.snapshot() {
        out.push(
            ClusterSession {
                cluster_session_id: s.id,
                correlation_id: s.correlation_id,
                opened_log_position: s.opened_log_position,
                // Aeron writes −1: activity restarts at load.
                time_of_last_activity: NULL_VALUE,
                close_reason: s.close_reason.unwrap_or(NULL_VALUE as i32),
                response_stream_id: s.response_stream_id,
                messages_in_log: s.messages_in_log,
                response_channel: s.response_channel,
            }
            .encode(),
        );
    }
    for (correlation_id, deadline) in agent.timers.snapshot() {
        out.push(
            Timer {
                correlation_id,
                deadline,
            }
            .encode(),
        );
    }
    for tracker in &agent.trackers {
        let (next, log, messages) = tracker.snapshot();
        out.push(
            PendingMessageTracker {
                next_service_session_id: next,
                log_service_session_id: log,
                pending_message_capacity: 0,
                service_id: tracker.service_id(),
            }
            .encode(),
        );
        for (id, payload) in messages {
            let mut m = SessionMessageHeader {
                leadership_term_id: at.leadership_term_id,
                cluster_session_id: id,
                timestamp: 0,
            }
            .encode();
            m.extend_from_slice(&payload);
            out.push(m);
        }
    }
    out.push(marker(
        CONSENSUS_MODULE_SNAPSHOT_TYPE_ID,
        snapshot_mark::END,
        at,
    ));
    out
}

/// Loads a snapshot's messages into a module that has applied nothing;
/// returns its mark. `activity_ns` is the sessions' activity time (they
/// were last heard from no earlier than the snapshot). A snapshot of
/// another type, clock unit or major application version, or one without
/// its END, is an error naming what: loading it would make another replica.
pub fn load(
    agent: &mut ConsensusModuleAgent,
    messages: &[Vec<u8>],
    activity_ns: i64,
) -> Result<SnapshotMark, String> {
    let bad = |why: String| format!("the consensus module's snapshot: {why}");
    let first = messages.first().ok_or_else(|| bad("it is empty".into()))?;
    let begin = SnapshotMarker::decode(first).map_err(|e| bad(e.message))?;
    if begin.type_id != CONSENSUS_MODULE_SNAPSHOT_TYPE_ID || begin.mark != snapshot_mark::BEGIN {
        return Err(bad(format!(
            "it begins with a marker of type {} mark {}, not a consensus module's BEGIN",
            begin.type_id, begin.mark
        )));
    }
    let cfg = agent.config();
    if begin.time_unit != cfg.time_unit {
        return Err(bad(format!(
            "its cluster time unit is {}, this member's {}",
            begin.time_unit, cfg.time_unit
        )));
    }
    if semantic_major(begin.app_version) != semantic_major(cfg.app_version) {
        return Err(bad(format!(
            "it was written by application version {}, this member runs {} (majors must match)",
            semantic_version_string(begin.app_version),
            semantic_version_string(cfg.app_version)
        )));
    }
    let mark = SnapshotMark {
        log_position: begin.log_position,
        leadership_term_id: begin.leadership_term_id,
        time_unit: begin.time_unit,
        app_version: begin.app_version,
    };
    let mut timers = Vec::new();
    // The tracker the messages that follow a PendingMessageTracker belong to.
    let mut tracker: Option<usize> = None;
    let mut pending: Vec<TrackerState> =
        vec![(NULL_VALUE, NULL_VALUE, Vec::new()); agent.trackers.len()];
    let mut ended = false;
    for m in &messages[1..] {
        let h = SbeHeader::decode(m).map_err(|e| bad(e.message))?;
        match h.template_id {
            SnapshotMarker::TEMPLATE_ID => {
                let end = SnapshotMarker::decode(m).map_err(|e| bad(e.message))?;
                if end.mark == snapshot_mark::END {
                    ended = true;
                    break;
                }
            }
            ConsensusModuleState::TEMPLATE_ID => {
                let s = ConsensusModuleState::decode(m).map_err(|e| bad(e.message))?;
                agent.sessions.load_next_session_id(s.next_session_id);
            }
            ClusterSession::TEMPLATE_ID => {
                let s = ClusterSession::decode(m).map_err(|e| bad(e.message))?;
                agent.sessions.on_load_session(&SessionSnapshot {
                    id: s.cluster_session_id,
                    correlation_id: s.correlation_id,
                    opened_log_position: s.opened_log_position,
                    time_of_last_activity_ns: activity_ns,
                    close_reason: (s.close_reason != NULL_VALUE as i32).then_some(s.close_reason),
                    response_stream_id: s.response_stream_id,
                    response_channel: s.response_channel,
                    messages_in_log: s.messages_in_log,
                });
            }
            Timer::TEMPLATE_ID => {
                let t = Timer::decode(m).map_err(|e| bad(e.message))?;
                timers.push((t.correlation_id, t.deadline));
            }
            PendingMessageTracker::TEMPLATE_ID => {
                let t = PendingMessageTracker::decode(m).map_err(|e| bad(e.message))?;
                let slot = usize::try_from(t.service_id)
                    .ok()
                    .filter(|&i| i < pending.len())
                    .ok_or_else(|| {
                        bad(format!(
                            "it holds service {}'s messages; this member runs {} service(s)",
                            t.service_id,
                            pending.len()
                        ))
                    })?;
                pending[slot].0 = t.next_service_session_id;
                pending[slot].1 = t.log_service_session_id;
                tracker = Some(slot);
            }
            SessionMessageHeader::TEMPLATE_ID if m.len() >= SESSION_HEADER_LENGTH => {
                let header = SessionMessageHeader::decode(m).map_err(|e| bad(e.message))?;
                let slot =
                    tracker.ok_or_else(|| bad("a service message before its tracker".into()))?;
                pending[slot].2.push((
                    header.cluster_session_id,
                    m[SESSION_HEADER_LENGTH..].to_vec(),
                ));
            }
            // ClusterMembers (legacy) and extensions: not ours to load.
            _ => {}
        }
    }
    if !ended {
        return Err(bad(format!(
            "no END marker after {} messages (a snapshot cut short)",
            messages.len()
        )));
    }
    agent.timers = TimerService::restore(&timers);
    for (i, (next, log, kept)) in pending.into_iter().enumerate() {
        if next != NULL_VALUE {
            agent.trackers[i] =
                PendingServiceMessageTracker::restore(i as i32, next, log, kept).map_err(bad)?;
        }
    }
    agent.leadership_term_id = mark.leadership_term_id;
    agent.commit_position = mark.log_position;
    Ok(mark)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::consensus_module_agent::ConsensusConfig;
    use crate::module::session_manager::SessionConfig;
    use sulis_protocol::cluster::messages::time_unit;

    fn agent() -> ConsensusModuleAgent {
        ConsensusModuleAgent::new(ConsensusConfig {
            member_id: 0,
            service_count: 2,
            app_version: 1 << 16,
            time_unit: time_unit::MILLIS,
            sessions: SessionConfig {
                member_id: 0,
                session_timeout_ns: 10_000_000_000,
                max_concurrent_sessions: 10,
                leader_heartbeat_timeout_ns: 10_000_000_000,
            },
            leader_heartbeat_interval_ns: 200_000_000,
            leader_heartbeat_timeout_ns: 10_000_000_000,
        })
    }

    fn at() -> SnapshotMark {
        SnapshotMark {
            log_position: 4096,
            leadership_term_id: 3,
            time_unit: time_unit::MILLIS,
            app_version: 1 << 16,
        }
    }

    #[test]
    fn a_loaded_snapshot_holds_what_was_taken_sessions_timers_and_pending_service_messages() {
        let mut a = agent();
        a.sessions
            .on_replay_session_open(64, 7, 1, 0, 102, "aeron:udp?endpoint=localhost:9000");
        a.sessions
            .on_replay_session_open(128, 8, 2, 0, 102, "aeron:udp?endpoint=localhost:9001");
        a.sessions.on_replay_session_close(2, 0);
        a.sessions
            .on_replay_session_open(256, 9, 3, 0, 103, "aeron:ipc");
        // Session 3's client numbers its messages: the log holds 2 of them.
        a.sessions.on_message_in_log(3, 320, 4096);
        a.sessions.on_message_in_log(3, 384, 4096);
        a.timers.schedule(11, 5_000);
        a.timers.schedule(12, 1_000);
        a.trackers[1].enqueue(b"first".to_vec());
        a.trackers[1].enqueue(b"second".to_vec());
        let taken = take(&a, &at());

        let mut b = agent();
        let mark = load(&mut b, &taken, 99).unwrap();
        assert_eq!(mark, at());
        assert_eq!(b.leadership_term_id, 3);
        assert_eq!(b.commit_position, 4096);
        assert_eq!(b.sessions.next_committed_session_id(), 4);
        let ids: Vec<i64> = b.sessions.snapshot().iter().map(|s| s.id).collect();
        assert_eq!(ids, vec![1, 3]);
        let counts: Vec<i64> = b
            .sessions
            .snapshot()
            .iter()
            .map(|s| s.messages_in_log)
            .collect();
        assert_eq!(
            counts,
            vec![0, 2],
            "a resend after the load is still told from a new message"
        );
        assert_eq!(
            b.sessions.number_message(3, 2),
            crate::module::session_manager::MessageNumber::Duplicate
        );
        assert_eq!(
            b.sessions.number_message(3, 3),
            crate::module::session_manager::MessageNumber::Next
        );
        assert_eq!(b.timers.snapshot(), vec![(12, 1_000), (11, 5_000)]);
        assert_eq!(b.trackers[1].snapshot(), a.trackers[1].snapshot());
        assert_eq!(b.trackers[0].snapshot(), a.trackers[0].snapshot());
        // Taken again from the loaded module: the same messages.
        assert_eq!(take(&b, &at()), taken);
    }

    #[test]
    fn a_snapshot_cut_short_or_of_another_version_is_refused_naming_why() {
        let a = agent();
        let taken = take(&a, &at());
        let cut = &taken[..taken.len() - 1];
        let e = load(&mut agent(), cut, 0).unwrap_err();
        assert!(e.contains("no END marker"), "{e}");
        let mut other = at();
        other.app_version = 2 << 16;
        let e = load(&mut agent(), &take(&a, &other), 0).unwrap_err();
        assert!(e.contains("majors must match"), "{e}");
        let e = load(&mut agent(), &[], 0).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let service = vec![marker(
            SERVICE_SNAPSHOT_TYPE_ID,
            snapshot_mark::BEGIN,
            &at(),
        )];
        let e = load(&mut agent(), &service, 0).unwrap_err();
        assert!(e.contains("not a consensus module's BEGIN"), "{e}");
    }
}
