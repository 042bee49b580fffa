//! Seeding a member from another member's snapshot (sulis's own; Aeron's
//! nearest is ClusterBackup). A member whose files are gone can copy the
//! leader's log from 0 only while nothing of it was purged; after a purge it
//! needs a snapshot. Starting with `seed_from_snapshot` and an empty
//! recording log, it asks the other members for their recording logs
//! (RecordingLogQuery, a sulis template on the consensus stream; any member
//! answers, in an election too), takes the answer with the latest whole
//! snapshot set ([`plan`]), copies those snapshot recordings and the
//! answering member's log up to the snapshot's position from that member's
//! archive, and records the terms up to the snapshot's and the snapshot as
//! its own ([`SeedPlan::record`]). It then starts as a member that stopped
//! at the snapshot's position would, and the election copies the rest of
//! the log from the leader.
//!
//! What is copied is committed: a snapshot is taken at a position the
//! member applied, and the terms ending before it are over. The term of the
//! snapshot is recorded open (this member's log ends inside it), the terms
//! after it are not recorded: the election learns them from the leader.

use crate::module::recording_log::{latest_snapshot, RecordingLog};
use sulis_protocol::cluster::messages::{RecordingLogResponse, NULL_POSITION};
use sulis_protocol::cluster::recording_log::{decode, Entry, ENTRY_TYPE_TERM};

/// A member's answer to a RecordingLogQuery: its valid terms and its latest
/// whole snapshot set, each entry as `recording.log` holds it.
pub fn answer(
    log: &RecordingLog,
    correlation_id: i64,
    member_id: i32,
    candidate_term_id: i64,
    commit_position: i64,
    service_count: i32,
) -> Result<RecordingLogResponse, String> {
    let mut entries = Vec::new();
    let terms = log
        .entries()
        .filter(|e| e.is_valid && e.entry_type == ENTRY_TYPE_TERM);
    let snapshot = log.latest_snapshot(service_count).unwrap_or_default();
    for e in terms.chain(snapshot) {
        entries.extend(e.encode().map_err(|e| e.to_string())?);
    }
    Ok(RecordingLogResponse {
        correlation_id,
        candidate_term_id,
        commit_position,
        member_id,
        service_count,
        entries,
    })
}

/// What a member copies to seed itself, from one member's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedPlan {
    /// The member it copies from.
    pub source_member_id: i32,
    /// That member's candidate term: the seeded member votes in none before.
    pub candidate_term_id: i64,
    /// The source's log recording, copied up to `log_position`.
    pub log_recording_id: i64,
    /// The snapshot's log position.
    pub log_position: i64,
    /// The terms to record, oldest first; the last is the snapshot's, open.
    pub terms: Vec<Entry>,
    /// The snapshot set, the consensus module's first (the source's recordings).
    pub snapshots: Vec<Entry>,
}

impl SeedPlan {
    /// Records the copy in this member's empty `log`: the terms on
    /// `log_recording_id` and the snapshots on `snapshot_recording_ids`
    /// (this member's archive's, in the plan's order).
    pub fn record(
        &self,
        log: &mut RecordingLog,
        log_recording_id: i64,
        snapshot_recording_ids: &[i64],
    ) -> Result<(), String> {
        if log.entries().next().is_some() {
            return Err(format!(
                "{} is not empty: a member is seeded only from nothing",
                log.path().display()
            ));
        }
        if snapshot_recording_ids.len() != self.snapshots.len() {
            return Err(format!(
                "{} snapshot recordings copied for a set of {}",
                snapshot_recording_ids.len(),
                self.snapshots.len()
            ));
        }
        for t in &self.terms {
            log.append_term(
                log_recording_id,
                t.leadership_term_id,
                t.term_base_log_position,
                t.timestamp,
            )?;
            if t.log_position != NULL_POSITION {
                log.commit_log_position(t.leadership_term_id, t.log_position)?;
            }
        }
        for (s, &id) in self.snapshots.iter().zip(snapshot_recording_ids) {
            log.append_snapshot(
                id,
                s.leadership_term_id,
                s.term_base_log_position,
                s.log_position,
                s.timestamp,
                s.service_id,
            )?;
        }
        Ok(())
    }
}

/// The plan from the answer holding the latest snapshot set (`Ok(None)`:
/// no answer holds one, there is nothing to seed from). An answer that
/// does not decode, or whose terms do not reach its snapshot, is an error
/// naming the member.
pub fn plan(
    answers: &[RecordingLogResponse],
    service_count: i32,
) -> Result<Option<SeedPlan>, String> {
    let mut best: Option<SeedPlan> = None;
    for a in answers {
        let member = a.member_id;
        let entries: Vec<Entry> = decode(&a.entries)
            .map_err(|e| format!("member {member}'s recording log: {e}"))?
            .entries
            .into_iter()
            .map(|l| l.entry)
            .filter(|e| e.is_valid)
            .collect();
        let Some(set) = latest_snapshot(entries.iter(), service_count) else {
            continue;
        };
        let snapshots: Vec<Entry> = set.into_iter().cloned().collect();
        let at = snapshots[0].log_position;
        let term = snapshots[0].leadership_term_id;
        if best.as_ref().is_some_and(|b| b.log_position >= at) {
            continue;
        }
        let mut terms: Vec<Entry> = entries
            .iter()
            .filter(|e| {
                e.entry_type == ENTRY_TYPE_TERM
                    && e.leadership_term_id <= term
                    && e.term_base_log_position <= at
            })
            .cloned()
            .collect();
        terms.sort_by_key(|e| e.leadership_term_id);
        let Some(last) = terms.last_mut() else {
            return Err(format!(
                "member {member}'s recording log has a snapshot at {at} of term {term} but no term entry up to it"
            ));
        };
        if last.leadership_term_id != term {
            return Err(format!(
                "member {member}'s recording log has a snapshot at {at} of term {term}, but its last term up to it is {}",
                last.leadership_term_id
            ));
        }
        last.log_position = NULL_POSITION;
        let log_recording_id = last.recording_id;
        best = Some(SeedPlan {
            source_member_id: member,
            candidate_term_id: a.candidate_term_id,
            log_recording_id,
            log_position: at,
            terms,
            snapshots,
        });
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::recording_log::tests::{dir, TempDir};

    /// A source member's log: terms 0 to 3 on recording 7, a whole set at
    /// 5000 (term 1), a later set at 9000 (term 2) missing service 1, and an
    /// invalidated term.
    fn source(d: &TempDir) -> RecordingLog {
        let mut log = RecordingLog::open(d).unwrap();
        log.append_term(7, 0, 0, 100).unwrap();
        log.commit_log_position(0, 4096).unwrap();
        log.append_term(7, 1, 4096, 200).unwrap();
        for service in [-1, 0, 1] {
            log.append_snapshot(20 + service as i64, 1, 4096, 5000, 250, service)
                .unwrap();
        }
        log.commit_log_position(1, 6000).unwrap();
        log.append_term(7, 2, 6000, 300).unwrap();
        log.append_snapshot(30, 2, 6000, 9000, 350, -1).unwrap();
        log.append_snapshot(31, 2, 6000, 9000, 350, 0).unwrap();
        log.commit_log_position(2, 12000).unwrap();
        log.append_term(7, 3, 12000, 400).unwrap();
        log.append_term(7, 4, 13000, 500).unwrap();
        let last = log.entries().count() - 1;
        log.invalidate(last).unwrap();
        log
    }

    fn response(log: &RecordingLog, member: i32, services: i32) -> RecordingLogResponse {
        let r = answer(log, 5, member, 9, 12500, services).unwrap();
        RecordingLogResponse::decode(&r.encode()).expect("decodes as sent")
    }

    #[test]
    fn the_latest_whole_set_is_copied_with_the_terms_up_to_it_and_its_term_left_open() {
        let src = dir("seed-src");
        let log = source(&src);
        let p = plan(&[response(&log, 2, 2)], 2).unwrap().expect("a set");
        assert_eq!(
            (
                p.source_member_id,
                p.candidate_term_id,
                p.log_recording_id,
                p.log_position
            ),
            (2, 9, 7, 5000)
        );
        let terms: Vec<(i64, i64, i64)> = p
            .terms
            .iter()
            .map(|t| {
                (
                    t.leadership_term_id,
                    t.term_base_log_position,
                    t.log_position,
                )
            })
            .collect();
        assert_eq!(terms, vec![(0, 0, 4096), (1, 4096, NULL_POSITION)]);
        let ids: Vec<(i64, i32)> = p
            .snapshots
            .iter()
            .map(|s| (s.recording_id, s.service_id))
            .collect();
        assert_eq!(ids, vec![(19, -1), (20, 0), (21, 1)]);
        // Recorded here on this member's recordings, it starts from that set.
        let dst = dir("seed-dst");
        let mut mine = RecordingLog::open(&dst).unwrap();
        p.record(&mut mine, 3, &[40, 41, 42]).unwrap();
        drop(mine);
        let mine = RecordingLog::open(&dst).unwrap();
        let set: Vec<(i64, i64)> = mine
            .latest_snapshot(2)
            .unwrap()
            .iter()
            .map(|e| (e.recording_id, e.log_position))
            .collect();
        assert_eq!(set, vec![(40, 5000), (41, 5000), (42, 5000)]);
        let last = mine.last_term().unwrap();
        assert_eq!(
            (
                last.recording_id,
                last.leadership_term_id,
                last.log_position
            ),
            (3, 1, NULL_POSITION)
        );
        assert!(
            p.record(&mut RecordingLog::open(&dst).unwrap(), 3, &[40, 41, 42])
                .unwrap_err()
                .contains("not empty"),
            "never over a member's own log"
        );
    }

    #[test]
    fn the_answer_with_the_latest_snapshot_wins_and_no_snapshot_is_nothing_to_seed() {
        let a = dir("seed-a");
        let log = source(&a);
        // With one service, member 1's set at 9000 is whole and later.
        let older = response(&log, 2, 2);
        let mut newer = response(&log, 1, 1);
        newer.service_count = 1;
        let p = plan(&[older.clone(), newer], 1).unwrap().unwrap();
        assert_eq!((p.source_member_id, p.log_position), (1, 9000));
        assert_eq!(p.terms.last().unwrap().leadership_term_id, 2);
        let empty = dir("seed-empty");
        let none = RecordingLog::open(&empty).unwrap();
        assert_eq!(plan(&[response(&none, 0, 1)], 1).unwrap(), None);
        assert_eq!(plan(&[], 1).unwrap(), None);
        let mut bad = older;
        bad.entries[44] = 9;
        assert!(plan(&[bad], 2).unwrap_err().contains("member 2"));
    }
}
