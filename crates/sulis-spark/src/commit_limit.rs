//! Real-time mode over a cluster member's log (`clusterDir`): a partition
//! follows the member's log recording, and the archive sends what it
//! records, which may run past the member's commit position (entries no
//! quorum holds yet, which the next election may take back). So a
//! partition hands a message over only once the member has committed it:
//! [`CommitLimit`] says whether it has, reading the member's commit
//! position again when a message past what it knew waits, at most every
//! [`RECHECK`] (the planner's rules: `archive_catalog::commit_position`,
//! a position once seen committed stays so).

use crate::archive_catalog::commit_position;
use crate::range_replay::ReadFailure;
use crate::PlanError;
use std::time::{Duration, Instant};

/// How often a waiting message asks for the commit position again.
pub const RECHECK: Duration = Duration::from_millis(1);

/// Where the commit position comes from: the member's counter, or a
/// test's.
pub type CommitSource = Box<dyn FnMut() -> Result<Option<i64>, PlanError> + Send>;

/// Whether messages of a member's log are committed (see the module doc).
pub struct CommitLimit {
    source: CommitSource,
    known: i64,
    checked: Option<Instant>,
}

impl CommitLimit {
    /// The member in `cluster_dir` whose media driver is at `driver_dir`.
    pub fn of_member(cluster_dir: String, driver_dir: Option<String>) -> CommitLimit {
        CommitLimit::with_source(Box::new(move || {
            commit_position(&cluster_dir, driver_dir.as_deref())
        }))
    }

    pub fn with_source(source: CommitSource) -> CommitLimit {
        CommitLimit {
            source,
            known: -1,
            checked: None,
        }
    }

    /// Whether the message ending at `position` is committed, as known at
    /// `now`.
    pub fn allows(&mut self, position: i64, now: Instant) -> Result<bool, ReadFailure> {
        if position <= self.known {
            return Ok(true);
        }
        if self
            .checked
            .is_some_and(|t| now.duration_since(t) < RECHECK)
        {
            return Ok(false);
        }
        self.checked = Some(now);
        let commit = (self.source)().map_err(|e| ReadFailure::Option(e.named().1))?;
        self.known = self.known.max(commit.unwrap_or(-1));
        Ok(position <= self.known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_message_waits_for_its_commit_and_the_counter_is_read_at_most_every_recheck() {
        let commit = Arc::new(AtomicI64::new(-1));
        let reads = Arc::new(AtomicUsize::new(0));
        let (c, n) = (commit.clone(), reads.clone());
        let mut limit = CommitLimit::with_source(Box::new(move || {
            n.fetch_add(1, Ordering::Relaxed);
            let v = c.load(Ordering::Relaxed);
            Ok((v >= 0).then_some(v))
        }));
        let t0 = Instant::now();
        // No commit position yet (the member not running): nothing is handed over.
        assert!(!limit.allows(64, t0).unwrap());
        commit.store(128, Ordering::Relaxed);
        assert!(!limit.allows(64, t0 + Duration::from_micros(500)).unwrap());
        assert_eq!(
            reads.load(Ordering::Relaxed),
            1,
            "read again before RECHECK"
        );
        assert!(limit.allows(64, t0 + RECHECK).unwrap());
        assert!(limit.allows(128, t0 + RECHECK).unwrap());
        assert!(!limit.allows(192, t0 + RECHECK).unwrap());
        assert_eq!(reads.load(Ordering::Relaxed), 2);
        // Below what is known: no read at all.
        assert!(limit.allows(96, t0 + RECHECK * 5).unwrap());
        assert_eq!(reads.load(Ordering::Relaxed), 2);
        // The counter going back (a restarted member) never takes a position back.
        commit.store(0, Ordering::Relaxed);
        assert!(limit.allows(128, t0 + RECHECK * 9).unwrap());
        commit.store(256, Ordering::Relaxed);
        assert!(limit.allows(192, t0 + RECHECK * 9).unwrap());
    }

    #[test]
    fn a_driver_with_two_members_counters_fails_naming_the_option() {
        let mut limit = CommitLimit::with_source(Box::new(|| {
            Err(PlanError::Option("option driverDir: two counters".into()))
        }));
        match limit.allows(64, Instant::now()) {
            Err(ReadFailure::Option(t)) => assert!(t.contains("driverDir"), "{t}"),
            other => panic!("{other:?}"),
        }
    }
}
