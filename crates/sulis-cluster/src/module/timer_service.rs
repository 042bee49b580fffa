//! The consensus module's timers: services schedule them by correlation id
//! (`ScheduleTimer`), the leader fires each once its deadline passes by
//! appending a `TimerEvent` to the log, and every member keeps them in its
//! snapshot. Aeron's `TimerService` contract: scheduling a correlation id
//! again moves its deadline, a handler that cannot act yet (the log
//! publication back-pressured) keeps the timer and ends the poll, and at
//! most [`POLL_LIMIT`] timers expire per poll.
//!
//! Timers with the same deadline expire in the order they were scheduled,
//! so two members that scheduled the same timers in the same order (the
//! log's) expire them alike, and a snapshot keeps that order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Most timers expired by one [`TimerService::poll`].
pub const POLL_LIMIT: usize = 20;

/// Timers by correlation id, expired in deadline order.
#[derive(Debug, Default)]
pub struct TimerService {
    /// (deadline, schedule sequence, correlation id), soonest on top; an
    /// entry no longer in `live` (cancelled or moved) is stale and skipped.
    heap: BinaryHeap<Reverse<(i64, u64, i64)>>,
    /// The live timers: correlation id → (deadline, schedule sequence).
    live: HashMap<i64, (i64, u64)>,
    next_sequence: u64,
    /// Follower: timers the log says fired before this member's service
    /// scheduled them, by correlation id: that many later schedules of the
    /// id are ignored.
    expired_early: HashMap<i64, u32>,
}

impl TimerService {
    /// No timers.
    pub fn new() -> TimerService {
        TimerService::default()
    }

    /// Schedules the timer `correlation_id` for `deadline`, in place of one
    /// it had.
    pub fn schedule(&mut self, correlation_id: i64, deadline: i64) {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.live.insert(correlation_id, (deadline, sequence));
        self.heap
            .push(Reverse((deadline, sequence, correlation_id)));
        // Moved and cancelled timers leave stale entries: keep them a minority.
        if self.heap.len() > 2 * self.live.len() + 64 {
            self.compact();
        }
    }

    /// A service's ScheduleTimer: schedules it, unless the log already
    /// said it fired ([`TimerService::on_replayed_timer_event`] before the
    /// service got here, as a follower's may). Returns whether it was
    /// scheduled.
    pub fn schedule_from_service(&mut self, correlation_id: i64, deadline: i64) -> bool {
        if let Some(count) = self.expired_early.get_mut(&correlation_id) {
            *count -= 1;
            if *count == 0 {
                self.expired_early.remove(&correlation_id);
            }
            return false;
        }
        self.schedule(correlation_id, deadline);
        true
    }

    /// Follower: the log holds a TimerEvent for `correlation_id` (it fired
    /// on the leader). The timer is gone here too; if this member's service
    /// has not scheduled it yet, its schedule is to be ignored when it
    /// comes, so the timer fires once, not again on this member if it leads.
    pub fn on_replayed_timer_event(&mut self, correlation_id: i64) {
        if !self.cancel(correlation_id) {
            *self.expired_early.entry(correlation_id).or_insert(0) += 1;
        }
    }

    /// Cancels timer `correlation_id`; `false` if there was none.
    pub fn cancel(&mut self, correlation_id: i64) -> bool {
        self.live.remove(&correlation_id).is_some()
    }

    /// Live timers.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// True with no live timer.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Deadline of timer `correlation_id`, if it is live.
    pub fn deadline(&self, correlation_id: i64) -> Option<i64> {
        self.live.get(&correlation_id).map(|&(d, _)| d)
    }

    /// The soonest deadline.
    pub fn next_deadline(&mut self) -> Option<i64> {
        self.drop_stale_top();
        self.heap.peek().map(|Reverse((d, _, _))| *d)
    }

    /// Expires the timers whose deadline is at or before `now`, soonest
    /// first, calling `on_timer(correlation_id)` for each: `true` and the
    /// timer is gone; `false` keeps it and ends the poll (it expires on a
    /// later poll). Returns the timers expired, at most [`POLL_LIMIT`].
    pub fn poll(&mut self, now: i64, mut on_timer: impl FnMut(i64) -> bool) -> usize {
        let mut expired = 0;
        while expired < POLL_LIMIT {
            self.drop_stale_top();
            let Some(&Reverse((deadline, _, correlation_id))) = self.heap.peek() else {
                break;
            };
            if deadline > now || !on_timer(correlation_id) {
                break;
            }
            self.heap.pop();
            self.live.remove(&correlation_id);
            expired += 1;
        }
        expired
    }

    /// The live timers as `(correlation_id, deadline)`, in the order they
    /// expire, for a snapshot; [`TimerService::restore`] of them in this
    /// order gives a service that expires them alike.
    pub fn snapshot(&self) -> Vec<(i64, i64)> {
        let mut timers: Vec<(i64, u64, i64)> = self
            .live
            .iter()
            .map(|(&id, &(deadline, sequence))| (deadline, sequence, id))
            .collect();
        timers.sort_unstable();
        timers.into_iter().map(|(d, _, id)| (id, d)).collect()
    }

    /// A service holding the timers of a snapshot.
    pub fn restore(timers: &[(i64, i64)]) -> TimerService {
        let mut service = TimerService::new();
        for &(correlation_id, deadline) in timers {
            service.schedule(correlation_id, deadline);
        }
        service
    }

    fn is_stale(&self, deadline: i64, sequence: u64, correlation_id: i64) -> bool {
        self.live.get(&correlation_id) != Some(&(deadline, sequence))
    }

    fn drop_stale_top(&mut self) {
        while let Some(&Reverse((d, s, id))) = self.heap.peek() {
            if !self.is_stale(d, s, id) {
                break;
            }
            self.heap.pop();
        }
    }

    fn compact(&mut self) {
        let heap = std::mem::take(&mut self.heap);
        self.heap = heap
            .into_iter()
            .filter(|Reverse((d, s, id))| !self.is_stale(*d, *s, *id))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expire_all(t: &mut TimerService, now: i64) -> Vec<i64> {
        let mut fired = Vec::new();
        while t.poll(now, |id| {
            fired.push(id);
            true
        }) > 0
        {}
        fired
    }

    #[test]
    fn a_timer_the_log_says_fired_before_it_was_scheduled_here_is_not_scheduled() {
        let mut t = TimerService::new();
        // Scheduled, then the leader's TimerEvent: cancelled.
        assert!(t.schedule_from_service(1, 100));
        t.on_replayed_timer_event(1);
        assert!(t.is_empty());
        // The TimerEvent first (twice, the id reused), then the schedules: ignored, twice.
        t.on_replayed_timer_event(2);
        t.on_replayed_timer_event(2);
        assert!(!t.schedule_from_service(2, 100));
        assert!(!t.schedule_from_service(2, 100));
        assert!(t.is_empty());
        // A third schedule of the id is a new timer.
        assert!(t.schedule_from_service(2, 300));
        assert_eq!(expire_all(&mut t, 300), vec![2]);
    }

    #[test]
    fn timers_expire_soonest_first_and_those_due_together_in_schedule_order() {
        let mut t = TimerService::new();
        t.schedule(1, 300);
        t.schedule(2, 100);
        t.schedule(3, 200);
        t.schedule(4, 100);
        assert_eq!(t.next_deadline(), Some(100));
        assert_eq!(expire_all(&mut t, 99), Vec::<i64>::new());
        assert_eq!(expire_all(&mut t, 200), vec![2, 4, 3]);
        assert_eq!(expire_all(&mut t, 1_000), vec![1]);
        assert!(t.is_empty());
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn scheduling_a_correlation_id_again_moves_its_timer_and_cancel_removes_it() {
        let mut t = TimerService::new();
        t.schedule(7, 100);
        t.schedule(7, 500);
        t.schedule(8, 200);
        assert_eq!(t.len(), 2);
        assert_eq!(t.deadline(7), Some(500));
        assert_eq!(expire_all(&mut t, 400), vec![8]);
        assert!(t.cancel(7));
        assert!(!t.cancel(7), "a timer is cancelled once");
        assert_eq!(expire_all(&mut t, 1_000), Vec::<i64>::new());
    }

    #[test]
    fn a_handler_that_cannot_act_keeps_the_timer_and_ends_the_poll() {
        let mut t = TimerService::new();
        t.schedule(1, 10);
        t.schedule(2, 20);
        let mut calls = Vec::new();
        let expired = t.poll(100, |id| {
            calls.push(id);
            false // the log publication is back-pressured
        });
        assert_eq!((expired, calls), (0, vec![1]));
        assert_eq!(t.len(), 2);
        assert_eq!(
            expire_all(&mut t, 100),
            vec![1, 2],
            "it fires on a later poll, once"
        );
    }

    #[test]
    fn one_poll_expires_at_most_the_poll_limit() {
        let mut t = TimerService::new();
        for id in 0..(POLL_LIMIT as i64 + 5) {
            t.schedule(id, 1);
        }
        assert_eq!(t.poll(1, |_| true), POLL_LIMIT);
        assert_eq!(t.poll(1, |_| true), 5);
        assert_eq!(t.poll(1, |_| true), 0);
    }

    #[test]
    fn a_restored_snapshot_expires_its_timers_alike() {
        let mut t = TimerService::new();
        for (id, deadline) in [(5, 50), (1, 10), (9, 50), (3, 30), (4, 10)] {
            t.schedule(id, deadline);
        }
        t.schedule(3, 50); // moved behind the others due at 50
        assert!(t.cancel(4));
        let snapshot = t.snapshot();
        assert_eq!(snapshot, vec![(1, 10), (5, 50), (9, 50), (3, 50)]);
        let mut restored = TimerService::restore(&snapshot);
        assert_eq!(expire_all(&mut restored, 100), expire_all(&mut t, 100));
    }

    /// Random schedules, moves, cancels and polls against the plainest model:
    /// a list searched for the soonest (deadline, schedule order) each time.
    #[test]
    fn random_operations_match_a_plain_model() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut t = TimerService::new();
        let mut model: Vec<(i64, u64, i64)> = Vec::new(); // (deadline, order, id)
        let mut order = 0u64;
        let mut now = 0i64;
        for _ in 0..20_000 {
            match next(10) {
                0..=4 => {
                    let (id, deadline) = (next(64) as i64, now + next(200) as i64);
                    t.schedule(id, deadline);
                    model.retain(|m| m.2 != id);
                    model.push((deadline, order, id));
                    order += 1;
                }
                5 => {
                    let id = next(64) as i64;
                    let had = model.iter().any(|m| m.2 == id);
                    model.retain(|m| m.2 != id);
                    assert_eq!(t.cancel(id), had);
                }
                _ => {
                    now += next(50) as i64;
                    let refuse_after = next(30) as usize;
                    let mut fired = Vec::new();
                    t.poll(now, |id| {
                        if fired.len() == refuse_after {
                            return false;
                        }
                        fired.push(id);
                        true
                    });
                    let mut want = Vec::new();
                    while want.len() < POLL_LIMIT.min(refuse_after) {
                        let Some(i) = (0..model.len())
                            .filter(|&i| model[i].0 <= now)
                            .min_by_key(|&i| (model[i].0, model[i].1))
                        else {
                            break;
                        };
                        want.push(model.remove(i).2);
                    }
                    assert_eq!(fired, want);
                }
            }
            assert_eq!(t.len(), model.len());
            assert!(
                t.heap.len() <= 2 * t.live.len() + 65,
                "stale entries are compacted"
            );
        }
    }
}
