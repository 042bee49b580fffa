//! Messages a service sends to the cluster (Aeron's service messages), kept
//! until the log holds them committed, so each is in the log exactly once
//! whoever leads and however often the leadership changes.
//!
//! Every member's service applies the same log and so sends the same
//! messages; each gets the next cluster session id of its service
//! ([`service_session_id`]). The leader appends its pending messages to the
//! log and drops them once the commit position passes them; a follower drops
//! those the log shows it, and a message the log already holds when the
//! service sends it (a service behind its member's log) is not kept at all.
//! A leader that loses its term forgets where it appended what did not
//! commit ([`PendingServiceMessageTracker::restore_uncommitted`], when it enters the election, before
//! any other log replaces its own): should it lead again, those go again. A
//! member that becomes leader replays its log: what the committed part
//! holds it drops; what the uncommitted tail holds counts as appended there
//! ([`PendingServiceMessageTracker::on_log_tail`]), dropped once its term commits it and sent again
//! should the tail be cut (its term lost first).
//!
//! Aeron's `PendingServiceMessageTracker` keeps the same state in a ring of
//! encoded messages; here they are values.

use std::collections::VecDeque;

/// Most messages one [`PendingServiceMessageTracker::poll`] appends.
pub const SERVICE_MESSAGE_LIMIT: usize = 20;

/// The cluster session id of a service's message: the service id in the top
/// byte, a sequence below (Aeron's layout, so logs read alike).
pub fn service_session_id(service_id: i32, sequence: i64) -> i64 {
    ((service_id as i64) << 56) | sequence
}

/// The service a log's service message came from.
pub fn service_id_from_log_message(cluster_session_id: i64) -> i32 {
    ((cluster_session_id as u64 >> 56) & 0x7f) as i32
}

/// A message waiting for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingServiceMessage {
    /// Its cluster session id, the same on every member.
    pub cluster_session_id: i64,
    /// The bytes the service sent.
    pub payload: Vec<u8>,
    /// Where this member, leading, appended it (the position after it).
    append_position: Option<i64>,
}

/// One service's pending messages.
#[derive(Debug)]
pub struct PendingServiceMessageTracker {
    service_id: i32,
    /// The id the service's next message gets.
    next_service_session_id: i64,
    /// The last id the log is known to hold.
    log_service_session_id: i64,
    /// Oldest first; the appended ones (leading) are a prefix.
    pending: VecDeque<PendingServiceMessage>,
    appended: usize,
    /// Leading: this service's messages in the uncommitted tail of the log
    /// it leads with, (id, position after), that its service has not sent
    /// yet; sent, they count as appended there.
    tail: VecDeque<(i64, i64)>,
}

impl PendingServiceMessageTracker {
    /// A tracker of service `service_id` with nothing sent yet.
    pub fn new(service_id: i32) -> PendingServiceMessageTracker {
        let log = service_session_id(service_id, i64::MIN);
        PendingServiceMessageTracker {
            service_id,
            next_service_session_id: log + 1,
            log_service_session_id: log,
            pending: VecDeque::new(),
            appended: 0,
            tail: VecDeque::new(),
        }
    }

    /// The service's id.
    pub fn service_id(&self) -> i32 {
        self.service_id
    }

    /// The id the service's next message gets.
    pub fn next_service_session_id(&self) -> i64 {
        self.next_service_session_id
    }

    /// The last id the log is known to hold.
    pub fn log_service_session_id(&self) -> i64 {
        self.log_service_session_id
    }

    /// Messages kept.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True with none kept.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The service sent `payload`: it gets the next id (returned), and is
    /// kept unless the log already holds that id.
    pub fn enqueue(&mut self, payload: Vec<u8>) -> i64 {
        let id = self.next_service_session_id;
        self.next_service_session_id += 1;
        if id > self.log_service_session_id {
            let append_position = match self.tail.front() {
                Some(&(tail_id, position)) if tail_id == id => {
                    self.tail.pop_front();
                    self.appended += 1;
                    Some(position)
                }
                _ => None,
            };
            self.pending.push_back(PendingServiceMessage {
                cluster_session_id: id,
                payload,
                append_position,
            });
        }
        id
    }

    /// Becoming leader, replaying its log: message `cluster_session_id`
    /// ends at `position` in the log's uncommitted tail. It commits with the
    /// new term's first entries, or is cut should this leader lose its term
    /// first, so it is neither dropped now nor appended again: it counts as
    /// appended there (once the service sends it, if it has not yet).
    pub fn on_log_tail(&mut self, cluster_session_id: i64, position: i64) {
        if cluster_session_id <= self.log_service_session_id {
            return;
        }
        match self.pending.get_mut(self.appended) {
            Some(m) if m.cluster_session_id == cluster_session_id => {
                m.append_position = Some(position);
                self.appended += 1;
            }
            _ => self.tail.push_back((cluster_session_id, position)),
        }
    }

    /// Leading: appends up to [`SERVICE_MESSAGE_LIMIT`] messages not yet
    /// appended, oldest first, with `append(cluster_session_id, payload)`,
    /// which returns the log position after the message or `None`
    /// (back-pressured: the rest waits for the next poll). Returns how many
    /// went.
    pub fn poll(&mut self, mut append: impl FnMut(i64, &[u8]) -> Option<i64>) -> usize {
        let mut sent = 0;
        while sent < SERVICE_MESSAGE_LIMIT {
            let Some(m) = self.pending.get_mut(self.appended) else {
                break;
            };
            let Some(position) = append(m.cluster_session_id, &m.payload) else {
                break;
            };
            m.append_position = Some(position);
            self.appended += 1;
            sent += 1;
        }
        sent
    }

    /// Leading: drops the appended messages the commit position passed.
    pub fn sweep_leader(&mut self, commit_position: i64) {
        while let Some(&(id, position)) = self.tail.front() {
            if position > commit_position {
                break;
            }
            self.log_service_session_id = self.log_service_session_id.max(id);
            self.tail.pop_front();
        }
        while let Some(m) = self.pending.front() {
            match m.append_position {
                Some(p) if p <= commit_position => {
                    self.log_service_session_id =
                        self.log_service_session_id.max(m.cluster_session_id);
                    self.pending.pop_front();
                    self.appended -= 1;
                }
                _ => break,
            }
        }
    }

    /// The log holds this service's message `cluster_session_id` (a
    /// follower reading its log, or a new leader its own): it and those
    /// before it are dropped.
    pub fn sweep_follower(&mut self, cluster_session_id: i64) {
        self.log_service_session_id = self.log_service_session_id.max(cluster_session_id);
        while let Some(m) = self.pending.front() {
            if m.cluster_session_id > self.log_service_session_id {
                break;
            }
            self.pending.pop_front();
            self.appended = self.appended.saturating_sub(1);
        }
    }

    /// Entering an election with `commit_position` (Aeron's
    /// `prepareForNewLeadership`): the appended messages it passed are
    /// dropped, the others forget where they were appended (that log may
    /// be cut), so that leading again sends them again.
    pub fn restore_uncommitted(&mut self, commit_position: i64) {
        self.sweep_leader(commit_position);
        self.tail.clear();
        for m in self.pending.iter_mut() {
            m.append_position = None;
        }
        self.appended = 0;
    }

    /// What a snapshot keeps: the next id, the log's last id and the
    /// messages kept, oldest first.
    pub fn snapshot(&self) -> (i64, i64, Vec<(i64, Vec<u8>)>) {
        let messages = self
            .pending
            .iter()
            .map(|m| (m.cluster_session_id, m.payload.clone()))
            .collect();
        (
            self.next_service_session_id,
            self.log_service_session_id,
            messages,
        )
    }

    /// A tracker from a snapshot; `Err` names what does not add up (ids not
    /// following on from the log's last one, or the next id not after them).
    pub fn restore(
        service_id: i32,
        next_service_session_id: i64,
        log_service_session_id: i64,
        messages: Vec<(i64, Vec<u8>)>,
    ) -> Result<PendingServiceMessageTracker, String> {
        for (i, (id, _)) in messages.iter().enumerate() {
            let want = log_service_session_id + 1 + i as i64;
            if *id != want {
                return Err(format!(
                    "snapshot of service {service_id}: pending message {i} has cluster session id {id}, \
                     {want} expected after the log's {log_service_session_id}"
                ));
            }
        }
        let want_next = log_service_session_id + 1 + messages.len() as i64;
        if next_service_session_id != want_next {
            return Err(format!(
                "snapshot of service {service_id}: next service session id {next_service_session_id} \
                 with {} pending after the log's {log_service_session_id} ({want_next} expected)",
                messages.len()
            ));
        }
        Ok(PendingServiceMessageTracker {
            service_id,
            next_service_session_id,
            log_service_session_id,
            pending: messages
                .into_iter()
                .map(|(cluster_session_id, payload)| PendingServiceMessage {
                    cluster_session_id,
                    payload,
                    append_position: None,
                })
                .collect(),
            appended: 0,
            tail: VecDeque::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_the_service_in_the_top_byte() {
        let t = PendingServiceMessageTracker::new(3);
        assert_eq!(service_id_from_log_message(t.next_service_session_id()), 3);
        assert_eq!(service_id_from_log_message(service_session_id(0, 5)), 0);
        assert_eq!(service_id_from_log_message(service_session_id(127, 5)), 127);
    }

    #[test]
    fn the_leader_appends_in_order_and_drops_what_commits() {
        let mut t = PendingServiceMessageTracker::new(0);
        let a = t.enqueue(b"a".to_vec());
        let b = t.enqueue(b"b".to_vec());
        let mut log = Vec::new();
        assert_eq!(
            t.poll(|id, p| {
                log.push((id, p.to_vec()));
                Some(log.len() as i64 * 64)
            }),
            2
        );
        assert_eq!(log, vec![(a, b"a".to_vec()), (b, b"b".to_vec())]);
        assert_eq!(t.poll(|_, _| panic!("appended once")), 0);
        t.sweep_leader(64);
        assert_eq!((t.len(), t.log_service_session_id()), (1, a));
        t.sweep_leader(128);
        assert!(t.is_empty());
    }

    #[test]
    fn a_back_pressured_append_stops_the_poll_and_goes_again_next_time() {
        let mut t = PendingServiceMessageTracker::new(0);
        for i in 0..30u8 {
            t.enqueue(vec![i]);
        }
        fn append(log: &mut Vec<u8>, room: usize) -> impl FnMut(i64, &[u8]) -> Option<i64> + '_ {
            move |_, p| {
                if log.len() >= room {
                    return None;
                }
                log.push(p[0]);
                Some(log.len() as i64)
            }
        }
        let mut log = Vec::new();
        assert_eq!(t.poll(append(&mut log, 3)), 3);
        assert_eq!(t.poll(append(&mut log, usize::MAX)), SERVICE_MESSAGE_LIMIT);
        assert_eq!(t.poll(append(&mut log, usize::MAX)), 7);
        assert_eq!(log, (0..30).collect::<Vec<u8>>());
    }

    #[test]
    fn a_follower_drops_what_the_log_holds_and_keeps_nothing_it_already_saw() {
        let mut t = PendingServiceMessageTracker::new(1);
        let a = t.enqueue(b"a".to_vec());
        let _b = t.enqueue(b"b".to_vec());
        t.sweep_follower(a);
        assert_eq!(t.len(), 1);
        // The log is ahead of this member's service: c and d are in it already.
        t.sweep_follower(a + 3);
        assert!(t.is_empty());
        t.enqueue(b"c".to_vec());
        t.enqueue(b"d".to_vec());
        assert!(
            t.is_empty(),
            "sent again by a service behind the log: not kept"
        );
        let e = t.enqueue(b"e".to_vec());
        assert_eq!((t.len(), e), (1, a + 4));
    }

    #[test]
    fn a_new_leader_sends_again_what_it_appended_in_an_earlier_term_that_did_not_commit() {
        let mut t = PendingServiceMessageTracker::new(0);
        let ids: Vec<i64> = (0..4u8).map(|i| t.enqueue(vec![i])).collect();
        let mut n = 0;
        t.poll(|_, _| {
            n += 1;
            Some(n * 10)
        });
        t.sweep_leader(10); // the first committed
        t.restore_uncommitted(10); // the leader loses its term
                                   // It leads again: its log holds the second (a later leader kept
                                   // it), not the third or fourth.
        t.sweep_follower(ids[1]);
        let mut again = Vec::new();
        t.poll(|id, _| {
            again.push(id);
            Some(100)
        });
        assert_eq!(again, vec![ids[2], ids[3]]);
    }

    #[test]
    fn a_new_leaders_uncommitted_tail_counts_as_appended_until_its_term_commits_it() {
        let mut t = PendingServiceMessageTracker::new(0);
        let a = t.enqueue(b"a".to_vec());
        // It leads with a log whose uncommitted tail holds a, b and c (an
        // earlier leader appended them); its service has sent only a.
        let b = a + 1;
        let c = a + 2;
        for (id, position) in [(a, 100), (b, 200), (c, 300)] {
            t.on_log_tail(id, position);
        }
        assert_eq!(t.enqueue(b"b".to_vec()), b);
        assert_eq!(t.enqueue(b"c".to_vec()), c);
        let mut appended = Vec::new();
        t.poll(|id, _| {
            appended.push(id);
            Some(400)
        });
        assert_eq!(
            appended,
            vec![],
            "a, b and c are in the log already; nothing else was sent"
        );
        t.sweep_leader(250);
        assert_eq!((t.log_service_session_id(), t.len()), (b, 1));
        t.sweep_leader(400);
        assert!(t.is_empty());
        assert_eq!(t.log_service_session_id(), c);
    }

    #[test]
    fn a_tail_cut_before_it_commits_is_sent_again() {
        let mut t = PendingServiceMessageTracker::new(0);
        let a = t.enqueue(b"a".to_vec());
        t.on_log_tail(a, 100);
        t.on_log_tail(a + 1, 200); // b: its service has not sent it yet
                                   // This leader loses its term before its first entry commits; the next
                                   // leader's log lacks the tail.
        t.restore_uncommitted(0);
        let b = t.enqueue(b"b".to_vec());
        assert_eq!(b, a + 1);
        // Leading again, with neither in its log: both go.
        let mut appended = Vec::new();
        t.poll(|id, _| {
            appended.push(id);
            Some(50)
        });
        assert_eq!(appended, vec![a, b]);
    }

    #[test]
    fn a_snapshot_restores_and_a_wrong_one_is_refused_naming_the_service() {
        let mut t = PendingServiceMessageTracker::new(2);
        let a = t.enqueue(b"a".to_vec());
        t.enqueue(b"b".to_vec());
        t.enqueue(b"c".to_vec());
        t.sweep_follower(a);
        let (next, log, messages) = t.snapshot();
        let r = PendingServiceMessageTracker::restore(2, next, log, messages.clone()).unwrap();
        assert_eq!(r.snapshot(), (next, log, messages.clone()));
        let e =
            PendingServiceMessageTracker::restore(2, next + 1, log, messages.clone()).unwrap_err();
        assert!(
            e.contains("service 2") && e.contains("next service session id"),
            "{e}"
        );
        let mut gap = messages;
        gap.remove(0);
        let e = PendingServiceMessageTracker::restore(2, next, log, gap).unwrap_err();
        assert!(e.contains("pending message 0"), "{e}");
    }
}
