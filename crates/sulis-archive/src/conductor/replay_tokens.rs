//! Replay tokens (Aeron's `ArchiveConductor.generateReplayToken`): a control
//! session asks for one (ReplayTokenRequest) before it replays over a
//! response channel. The replay request then comes on a stream of its own
//! (a new request publication naming the replay's response subscription),
//! not the session's, and the token says which session and recording it is
//! for. A token is good until the connect timeout runs out or its session
//! closes, and may be used more than once meanwhile, as Aeron's.

use std::collections::BTreeMap;

/// What a token stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ReplayToken {
    /// The control session that asked for it.
    pub(super) control_session_id: i64,
    /// The recording it may replay.
    pub(super) recording_id: i64,
    /// Good until then (the archive's clock).
    pub(super) deadline_ns: i64,
}

/// The live tokens.
pub(super) struct ReplayTokens {
    tokens: BTreeMap<i64, ReplayToken>,
    state: u64,
}

impl ReplayTokens {
    /// No tokens; `seed` starts the generator (tokens are not guessable from
    /// session ids, and not the same from one archive run to the next).
    pub(super) fn new(seed: u64) -> Self {
        ReplayTokens {
            tokens: BTreeMap::new(),
            state: seed | 1,
        }
    }

    fn next_random(&mut self) -> i64 {
        // xorshift64*
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D) as i64
    }

    /// A new token for `recording_id`, issued to `control_session_id`, good
    /// until `deadline_ns`: never -1 (Aeron's null), never a live one.
    pub(super) fn issue(
        &mut self,
        control_session_id: i64,
        recording_id: i64,
        deadline_ns: i64,
    ) -> i64 {
        let token = loop {
            let t = self.next_random();
            if t != -1 && !self.tokens.contains_key(&t) {
                break t;
            }
        };
        self.tokens.insert(
            token,
            ReplayToken {
                control_session_id,
                recording_id,
                deadline_ns,
            },
        );
        token
    }

    /// The token's session if it is live at `now_ns` and for `recording_id`.
    pub(super) fn session_for(&self, token: i64, recording_id: i64, now_ns: i64) -> Option<i64> {
        self.tokens
            .get(&token)
            .filter(|t| t.recording_id == recording_id && now_ns <= t.deadline_ns)
            .map(|t| t.control_session_id)
    }

    /// Drops the tokens past their deadline; returns how many.
    pub(super) fn do_work(&mut self, now_ns: i64) -> usize {
        let before = self.tokens.len();
        self.tokens.retain(|_, t| now_ns <= t.deadline_ns);
        before - self.tokens.len()
    }

    /// Drops the tokens of sessions that are gone.
    pub(super) fn retain_sessions(&mut self, mut live: impl FnMut(i64) -> bool) {
        self.tokens.retain(|_, t| live(t.control_session_id));
    }

    /// Live tokens.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.tokens.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conductor::manual_clock;

    #[test]
    fn should_issue_distinct_tokens_good_for_their_recording_until_the_deadline() {
        let (clock, hand) = manual_clock();
        let mut t = ReplayTokens::new(42);
        let a = t.issue(1, 10, clock.now_ns() + 5_000);
        let b = t.issue(1, 10, clock.now_ns() + 5_000);
        assert!(a != b && a != -1 && b != -1);
        assert_eq!(t.session_for(a, 10, clock.now_ns()), Some(1));
        // Reusable until the deadline, for that recording only.
        assert_eq!(t.session_for(a, 10, clock.now_ns()), Some(1));
        assert_eq!(t.session_for(a, 11, clock.now_ns()), None);
        assert_eq!(t.session_for(12345, 10, clock.now_ns()), None);
        hand.advance_ns(5_000);
        assert_eq!(t.do_work(clock.now_ns()), 0);
        assert_eq!(t.session_for(b, 10, clock.now_ns()), Some(1));
        hand.advance_ns(1);
        assert_eq!(t.session_for(b, 10, clock.now_ns()), None);
        assert_eq!(t.do_work(clock.now_ns()), 2);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn should_drop_the_tokens_of_a_closed_session() {
        let (clock, _) = manual_clock();
        let mut t = ReplayTokens::new(7);
        let a = t.issue(1, 10, clock.now_ns() + 5_000);
        let b = t.issue(2, 10, clock.now_ns() + 5_000);
        t.retain_sessions(|s| s != 1);
        assert_eq!(t.session_for(a, 10, clock.now_ns()), None);
        assert_eq!(t.session_for(b, 10, clock.now_ns()), Some(2));
    }
}
