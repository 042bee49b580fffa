//! Sender-side NAK handling: which ranges to retransmit, and when.
//!
//! docs/protocol.md §5.4. Each accepted NAK becomes a *retransmit action*:
//!
//! ```text
//!             NAK, delay = 0                      linger expired
//!  INACTIVE ──────────────────► resend ─► LINGERING ──────────────► INACTIVE
//!     │                                     ▲
//!     │ NAK, delay > 0                      │ delay expired: resend
//!     └──────────────────────► DELAYED ─────┘
//! ```
//!
//! While an action is DELAYED or LINGERING, a NAK whose start falls inside its
//! range is a duplicate and is ignored, so receivers that NAK the same loss
//! (a multicast group, or one receiver retrying before the retransmit lands)
//! get one retransmit, not one each. A NAK that starts before an active range
//! and runs into it is cut short at that range's start, so the part already
//! being handled is not sent twice.
//!
//! * **Unicast** keeps up to `max_actions` actions too (16 by default), so
//!   every range a receiver NAKs in a row lingers on its own: a sulis
//!   receiver NAKs up to 16 gaps at once and retries each every millisecond,
//!   and with a single action (Aeron's choice, fine for its one-gap-at-a-time
//!   receivers) every range but the last would be resent again on each retry
//!   while its first retransmit is still in flight — on a path whose round
//!   trip exceeds the retry delay that multiplies retransmits by RTT/retry.
//!   When every action is busy a NAK still never goes unserved: it takes over
//!   the action closest to its expiry (a displaced DELAYED range is resent
//!   first, so no accepted request is dropped).
//! * **Group** semantics (multicast, MDC) keep up to `max_actions` actions
//!   (16 by default, at most 256); a NAK arriving when all are busy is counted
//!   as a retransmit overflow and dropped (the receiver will NAK again).
//!
//! The length is clamped to `min(length, rrwm × min(receiver window, term/2),
//! rest of term)`: a receiver never needs more than its window multiplied by
//! the retransmit receiver window multiple (`rrwm`), and a retransmit never
//! spans terms. Whether a range is still in the log (not older than
//! `sender position − term/2 − max message length`) is the resend callback's
//! business.
//!
//! No I/O and no clock: the caller passes `now_ns` and performs the resends.

use super::feedback_delay::FeedbackDelayGenerator;
use sulis_protocol::frame::{DATA_HEADER_LENGTH, FRAME_ALIGNMENT};

/// Default retransmit delay for unicast (`aeron.retransmit.unicast.delay`): immediate.
pub const RETRANSMIT_UNICAST_DELAY_NS_DEFAULT: i64 = 0;
/// Default linger after a retransmit (`aeron.retransmit.unicast.linger`): 10 ms.
pub const RETRANSMIT_UNICAST_LINGER_NS_DEFAULT: i64 = 10_000_000;
/// Default concurrent retransmit actions under group semantics (`aeron.max.resend`).
pub const MAX_RESEND_DEFAULT: usize = 16;
/// Largest allowed `max_resend`.
pub const MAX_RESEND_MAX: usize = 256;
/// Default retransmit receiver window multiple for unicast flow control.
pub const RRWM_UNICAST_DEFAULT: i32 = 16;
/// Default retransmit receiver window multiple for multicast flow control.
pub const RRWM_MULTICAST_DEFAULT: i32 = 4;
/// Receiver window assumed when clamping retransmits
/// (`aeron.rcv.initial.window.length`): 128 KiB.
pub const RECEIVER_WINDOW_LEN_DEFAULT: i32 = 128 * 1024;

/// What [`RetransmitHandler::on_nak`] did with a NAK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakOutcome {
    /// Resent at once; `length` bytes (after clamping).
    Resent {
        /// Bytes resent.
        length: i32,
    },
    /// Scheduled to be resent after the retransmit delay.
    Delayed {
        /// Bytes to resend.
        length: i32,
    },
    /// The range is already being delayed or lingering: ignored.
    Duplicate,
    /// Every group action is busy: dropped and counted.
    Overflow,
    /// Offset outside the term or not frame-aligned: dropped and counted.
    Invalid,
    /// Zero or negative length: nothing to do.
    Empty,
}

/// State of one retransmit action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ActionState {
    Inactive,
    Delayed,
    Lingering,
}

#[derive(Clone, Copy, Debug)]
struct RetransmitAction {
    state: ActionState,
    term_id: i32,
    term_offset: i32,
    length: i32,
    expiry_ns: i64,
}

impl RetransmitAction {
    const INACTIVE: RetransmitAction = RetransmitAction {
        state: ActionState::Inactive,
        term_id: 0,
        term_offset: 0,
        length: 0,
        expiry_ns: 0,
    };

    fn is_active(&self) -> bool {
        self.state != ActionState::Inactive
    }

    fn end_offset(&self) -> i32 {
        self.term_offset + self.length
    }
}

/// Turns NAKs into retransmits for one network publication.
pub struct RetransmitHandler {
    delay: Box<dyn FeedbackDelayGenerator>,
    linger_ns: i64,
    group: bool,
    /// Fixed pool of `max_actions` slots.
    actions: Vec<RetransmitAction>,
    /// Slots delayed or lingering: with none, a duty cycle does not walk the
    /// pool (a thousand idle publications walked sixteen slots each per cycle).
    active: usize,
    rrwm: i32,
    receiver_window_len: i32,
    retransmits: u64,
    overflows: u64,
    invalid_naks: u64,
}

impl std::fmt::Debug for RetransmitHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetransmitHandler")
            .field("linger_ns", &self.linger_ns)
            .field("group", &self.group)
            .field("max_actions", &self.actions.len())
            .field("active", &self.active_count())
            .field("rrwm", &self.rrwm)
            .field("retransmits", &self.retransmits)
            .field("overflows", &self.overflows)
            .finish_non_exhaustive()
    }
}

impl RetransmitHandler {
    /// A handler with group semantics: up to `max_actions` concurrent actions
    /// (clamped to `1..=256`), overflow counted beyond that; `rrwm` defaults
    /// to [`RRWM_MULTICAST_DEFAULT`].
    ///
    /// `delay` gives each action's retransmit delay; a delay of 0 (or a
    /// generator that feeds back immediately) resends at once.
    pub fn new(delay: Box<dyn FeedbackDelayGenerator>, linger_ns: i64, max_actions: usize) -> Self {
        let max_actions = max_actions.clamp(1, MAX_RESEND_MAX);
        RetransmitHandler {
            delay,
            linger_ns,
            group: true,
            actions: vec![RetransmitAction::INACTIVE; max_actions],
            active: 0,
            rrwm: RRWM_MULTICAST_DEFAULT,
            receiver_window_len: RECEIVER_WINDOW_LEN_DEFAULT,
            retransmits: 0,
            overflows: 0,
            invalid_naks: 0,
        }
    }

    /// A handler with unicast semantics: [`MAX_RESEND_DEFAULT`] actions, a NAK
    /// finding all busy takes over the one closest to expiry; `rrwm` defaults
    /// to [`RRWM_UNICAST_DEFAULT`].
    pub fn new_unicast(delay: Box<dyn FeedbackDelayGenerator>, linger_ns: i64) -> Self {
        Self::new_unicast_with(delay, linger_ns, MAX_RESEND_DEFAULT)
    }

    /// [`Self::new_unicast`] with a pool of `max_actions` (clamped to `1..=256`;
    /// 1 gives Aeron's single unicast action).
    pub fn new_unicast_with(
        delay: Box<dyn FeedbackDelayGenerator>,
        linger_ns: i64,
        max_actions: usize,
    ) -> Self {
        let mut handler = Self::new(delay, linger_ns, max_actions);
        handler.group = false;
        handler.rrwm = RRWM_UNICAST_DEFAULT;
        handler
    }

    /// Sets the retransmit receiver window multiple (`fc=...,rrwm:N`; at least 1).
    pub fn with_rrwm(mut self, rrwm: i32) -> Self {
        self.rrwm = rrwm.max(1);
        self
    }

    /// Sets the receiver window assumed when clamping (default 128 KiB).
    pub fn with_receiver_window_len(mut self, receiver_window_len: i32) -> Self {
        self.receiver_window_len = receiver_window_len.max(FRAME_ALIGNMENT as i32);
        self
    }

    /// True for group semantics, false for unicast.
    pub fn has_group_semantics(&self) -> bool {
        self.group
    }

    /// Size of the action pool.
    pub fn max_actions(&self) -> usize {
        self.actions.len()
    }

    /// Actions currently delayed or lingering.
    pub fn active_count(&self) -> usize {
        debug_assert_eq!(
            self.active,
            self.actions.iter().filter(|a| a.is_active()).count()
        );
        self.active
    }

    /// Resends requested so far (immediate and delayed).
    pub fn retransmits(&self) -> u64 {
        self.retransmits
    }

    /// NAKs dropped because every group action was busy ("Retransmit Pool
    /// Overflow count").
    pub fn overflow_count(&self) -> u64 {
        self.overflows
    }

    /// NAKs dropped for an offset outside the term or off the frame alignment
    /// (for the "Invalid packets" counter).
    pub fn invalid_count(&self) -> u64 {
        self.invalid_naks
    }

    /// The most a NAK for `length` bytes at `term_offset` gets resent:
    /// `min(length, rrwm × min(receiver window, term/2), term_length − term_offset)`.
    pub fn max_retransmit_length(&self, term_offset: i32, length: i32, term_length: i32) -> i32 {
        let window = self.receiver_window_len.min(term_length / 2) as i64;
        let by_window = (self.rrwm as i64 * window).min(i32::MAX as i64) as i32;
        length.min(by_window).min(term_length - term_offset)
    }

    /// Handles a NAK for `length` bytes at (`term_id`, `term_offset`).
    ///
    /// `resend(term_id, term_offset, length)` is called at once if the NAK is
    /// accepted and the delay is zero (and, for unicast, to flush a delayed
    /// range the NAK displaces).
    #[allow(clippy::too_many_arguments)]
    pub fn on_nak(
        &mut self,
        term_id: i32,
        term_offset: i32,
        length: i32,
        term_length: i32,
        now_ns: i64,
        resend: &mut dyn FnMut(i32, i32, i32),
    ) -> NakOutcome {
        if term_offset < 0
            || term_offset > term_length - DATA_HEADER_LENGTH as i32
            || term_offset % FRAME_ALIGNMENT as i32 != 0
        {
            self.invalid_naks += 1;
            return NakOutcome::Invalid;
        }
        if length <= 0 {
            return NakOutcome::Empty;
        }

        let mut end = term_offset + self.max_retransmit_length(term_offset, length, term_length);
        for action in self
            .actions
            .iter()
            .filter(|a| a.is_active() && a.term_id == term_id)
        {
            if action.term_offset <= term_offset && term_offset < action.end_offset() {
                return NakOutcome::Duplicate;
            }
            if term_offset < action.term_offset && action.term_offset < end {
                end = action.term_offset;
            }
        }
        let length = end - term_offset;

        let slot = match self.actions.iter().position(|a| !a.is_active()) {
            Some(slot) => slot,
            None if self.group => {
                self.overflows += 1;
                return NakOutcome::Overflow;
            }
            None => {
                // Unicast: never leave a NAK unserved; the action nearest its
                // expiry gives way (lingering ones first: they are done).
                let slot = (0..self.actions.len())
                    .min_by_key(|&i| {
                        let a = &self.actions[i];
                        (a.state == ActionState::Delayed, a.expiry_ns)
                    })
                    .expect("the pool has at least one slot");
                let displaced = self.actions[slot];
                if displaced.state == ActionState::Delayed {
                    resend(displaced.term_id, displaced.term_offset, displaced.length);
                    self.retransmits += 1;
                }
                slot
            }
        };

        if !self.actions[slot].is_active() {
            self.active += 1;
        }
        let delay_ns = self.delay.generate_delay_ns();
        let immediate = self.delay.should_feedback_immediately() || delay_ns <= 0;
        let action = &mut self.actions[slot];
        action.term_id = term_id;
        action.term_offset = term_offset;
        action.length = length;
        if immediate {
            resend(term_id, term_offset, length);
            self.retransmits += 1;
            action.state = ActionState::Lingering;
            action.expiry_ns = now_ns.saturating_add(self.linger_ns);
            NakOutcome::Resent { length }
        } else {
            action.state = ActionState::Delayed;
            action.expiry_ns = now_ns.saturating_add(delay_ns);
            NakOutcome::Delayed { length }
        }
    }

    /// Resends delayed actions whose delay is over (they then linger) and
    /// frees lingering actions whose linger is over. Returns the work done.
    pub fn process_timeouts(
        &mut self,
        now_ns: i64,
        resend: &mut dyn FnMut(i32, i32, i32),
    ) -> usize {
        if self.active == 0 {
            return 0;
        }
        let mut work = 0;
        for action in &mut self.actions {
            match action.state {
                ActionState::Delayed if now_ns >= action.expiry_ns => {
                    resend(action.term_id, action.term_offset, action.length);
                    self.retransmits += 1;
                    action.state = ActionState::Lingering;
                    action.expiry_ns = now_ns.saturating_add(self.linger_ns);
                    work += 1;
                }
                ActionState::Lingering if now_ns >= action.expiry_ns => {
                    action.state = ActionState::Inactive;
                    self.active -= 1;
                    work += 1;
                }
                _ => {}
            }
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::feedback_delay::StaticDelayGenerator;

    const TERM_LENGTH: i32 = 64 * 1024;
    const LINGER_NS: i64 = RETRANSMIT_UNICAST_LINGER_NS_DEFAULT;
    const DELAY_NS: i64 = 30_000;

    fn immediate() -> Box<dyn FeedbackDelayGenerator> {
        Box::new(StaticDelayGenerator::new(0, false))
    }

    fn delayed() -> Box<dyn FeedbackDelayGenerator> {
        Box::new(StaticDelayGenerator::new(DELAY_NS, false))
    }

    /// Sends a NAK and returns the outcome and the resends it caused.
    fn nak(
        handler: &mut RetransmitHandler,
        term_offset: i32,
        length: i32,
        now_ns: i64,
    ) -> (NakOutcome, Vec<(i32, i32, i32)>) {
        let mut resent = Vec::new();
        let outcome = handler.on_nak(
            7,
            term_offset,
            length,
            TERM_LENGTH,
            now_ns,
            &mut |t, o, l| resent.push((t, o, l)),
        );
        (outcome, resent)
    }

    fn timeouts(handler: &mut RetransmitHandler, now_ns: i64) -> (usize, Vec<(i32, i32, i32)>) {
        let mut resent = Vec::new();
        let work = handler.process_timeouts(now_ns, &mut |t, o, l| resent.push((t, o, l)));
        (work, resent)
    }

    #[test]
    fn should_resend_at_once_when_the_delay_is_zero() {
        let mut handler = RetransmitHandler::new_unicast(immediate(), LINGER_NS);
        let (outcome, resent) = nak(&mut handler, 1024, 2048, 0);
        assert_eq!(outcome, NakOutcome::Resent { length: 2048 });
        assert_eq!(resent, vec![(7, 1024, 2048)]);
        assert_eq!(handler.active_count(), 1);
        assert_eq!(handler.retransmits(), 1);
    }

    #[test]
    fn should_ignore_duplicate_naks_while_lingering() {
        let mut handler = RetransmitHandler::new_unicast(immediate(), LINGER_NS);
        nak(&mut handler, 1024, 2048, 0);
        // Same range, a range starting inside it, at any time within the linger.
        for (offset, now) in [(1024, 1), (2048, 5_000_000), (3040, LINGER_NS - 1)] {
            assert_eq!(
                nak(&mut handler, offset, 1024, now),
                (NakOutcome::Duplicate, vec![])
            );
            assert_eq!(timeouts(&mut handler, now), (0, vec![]));
        }
        assert_eq!(handler.retransmits(), 1);

        // Linger over: the action is freed and the same NAK is served again.
        assert_eq!(timeouts(&mut handler, LINGER_NS), (1, vec![]));
        assert_eq!(handler.active_count(), 0);
        let (outcome, resent) = nak(&mut handler, 1024, 2048, LINGER_NS + 1);
        assert_eq!(outcome, NakOutcome::Resent { length: 2048 });
        assert_eq!(resent.len(), 1);
    }

    #[test]
    fn should_resend_after_the_delay_and_then_linger() {
        let mut handler = RetransmitHandler::new(delayed(), LINGER_NS, MAX_RESEND_DEFAULT);
        assert_eq!(
            nak(&mut handler, 0, 1024, 100),
            (NakOutcome::Delayed { length: 1024 }, vec![])
        );
        assert_eq!(
            nak(&mut handler, 0, 1024, 200),
            (NakOutcome::Duplicate, vec![]),
            "dup while delayed"
        );
        assert_eq!(timeouts(&mut handler, 100 + DELAY_NS - 1), (0, vec![]));
        assert_eq!(
            timeouts(&mut handler, 100 + DELAY_NS),
            (1, vec![(7, 0, 1024)])
        );
        // Lingering now: still a duplicate, no second resend.
        assert_eq!(
            nak(&mut handler, 0, 1024, 100 + DELAY_NS + 1).0,
            NakOutcome::Duplicate
        );
        assert_eq!(
            timeouts(&mut handler, 100 + DELAY_NS + LINGER_NS - 1),
            (0, vec![])
        );
        assert_eq!(
            timeouts(&mut handler, 100 + DELAY_NS + LINGER_NS),
            (1, vec![])
        );
        assert_eq!(handler.active_count(), 0);
        assert_eq!(handler.retransmits(), 1);
    }

    #[test]
    fn should_count_overflow_when_every_group_action_is_busy() {
        let mut handler = RetransmitHandler::new(immediate(), LINGER_NS, 4);
        for i in 0..4 {
            assert!(matches!(
                nak(&mut handler, i * 1024, 1024, 0).0,
                NakOutcome::Resent { .. }
            ));
        }
        assert_eq!(
            nak(&mut handler, 8192, 1024, 1),
            (NakOutcome::Overflow, vec![])
        );
        assert_eq!(nak(&mut handler, 9216, 1024, 2).0, NakOutcome::Overflow);
        assert_eq!(handler.overflow_count(), 2);
        // Duplicates are not overflows.
        assert_eq!(nak(&mut handler, 0, 1024, 3).0, NakOutcome::Duplicate);
        assert_eq!(handler.overflow_count(), 2);

        timeouts(&mut handler, LINGER_NS);
        assert!(matches!(
            nak(&mut handler, 8192, 1024, LINGER_NS).0,
            NakOutcome::Resent { .. }
        ));
    }

    #[test]
    fn should_keep_up_to_256_group_actions() {
        assert_eq!(
            RetransmitHandler::new(immediate(), LINGER_NS, 1000).max_actions(),
            256
        );
        assert_eq!(
            RetransmitHandler::new(immediate(), LINGER_NS, 0).max_actions(),
            1
        );
        let unicast = RetransmitHandler::new_unicast(immediate(), LINGER_NS);
        assert_eq!(unicast.max_actions(), MAX_RESEND_DEFAULT);
        assert!(!unicast.has_group_semantics());
        let single = RetransmitHandler::new_unicast_with(immediate(), LINGER_NS, 1);
        assert_eq!(single.max_actions(), 1);
    }

    #[test]
    fn should_serve_naks_for_several_gaps_in_a_row_and_let_each_linger() {
        let mut handler = RetransmitHandler::new_unicast(immediate(), LINGER_NS);
        let mut all = Vec::new();
        for (offset, length) in [(1024, 1024), (3072, 1024), (5120, 3072)] {
            let (outcome, resent) = nak(&mut handler, offset, length, 10);
            assert_eq!(outcome, NakOutcome::Resent { length });
            all.extend(resent);
        }
        assert_eq!(all, vec![(7, 1024, 1024), (7, 3072, 1024), (7, 5120, 3072)]);
        assert_eq!(handler.overflow_count(), 0);
        // A receiver retrying every gap before the retransmits land gets no
        // second copy of any of them while they linger...
        for (offset, length) in [(1024, 1024), (3072, 1024), (5120, 3072)] {
            assert_eq!(
                nak(&mut handler, offset, length, 11).0,
                NakOutcome::Duplicate
            );
        }
        // ...and all of them again once the linger is over.
        timeouts(&mut handler, 10 + LINGER_NS);
        assert_eq!(handler.active_count(), 0);
        assert_eq!(
            nak(&mut handler, 1024, 1024, 11 + LINGER_NS).0,
            NakOutcome::Resent { length: 1024 }
        );
    }

    #[test]
    fn should_displace_the_action_nearest_expiry_when_every_unicast_action_is_busy() {
        let mut handler = RetransmitHandler::new_unicast_with(immediate(), LINGER_NS, 2);
        nak(&mut handler, 0, 1024, 0);
        nak(&mut handler, 4096, 1024, 5);
        let (outcome, resent) = nak(&mut handler, 8192, 1024, 6);
        assert_eq!(outcome, NakOutcome::Resent { length: 1024 });
        assert_eq!(resent, vec![(7, 8192, 1024)]);
        assert_eq!(handler.overflow_count(), 0, "unicast never drops a NAK");
        // The oldest range (0) gave way; the other two still linger.
        assert_eq!(
            nak(&mut handler, 0, 1024, 7).0,
            NakOutcome::Resent { length: 1024 }
        );
        assert_eq!(nak(&mut handler, 8192, 1024, 8).0, NakOutcome::Duplicate);
    }

    #[test]
    fn should_flush_a_delayed_unicast_range_that_a_new_nak_displaces() {
        let mut handler = RetransmitHandler::new_unicast_with(delayed(), LINGER_NS, 1);
        assert_eq!(
            nak(&mut handler, 0, 1024, 0).0,
            NakOutcome::Delayed { length: 1024 }
        );
        let (outcome, resent) = nak(&mut handler, 4096, 1024, 5);
        assert_eq!(outcome, NakOutcome::Delayed { length: 1024 });
        assert_eq!(
            resent,
            vec![(7, 0, 1024)],
            "the displaced range is not lost"
        );
        assert_eq!(
            timeouts(&mut handler, 5 + DELAY_NS).1,
            vec![(7, 4096, 1024)]
        );
        assert_eq!(handler.retransmits(), 2);
    }

    #[test]
    fn should_clamp_the_length_to_the_rrwm_window_and_the_term_end() {
        let big_term = 16 * 1024 * 1024;
        let handler = RetransmitHandler::new_unicast(immediate(), LINGER_NS);
        // 16 × min(128 KiB, 8 MiB) = 2 MiB.
        assert_eq!(
            handler.max_retransmit_length(0, 4 * 1024 * 1024, big_term),
            2 * 1024 * 1024
        );
        assert_eq!(handler.max_retransmit_length(0, 1024, big_term), 1024);
        // Rest of term.
        assert_eq!(
            handler.max_retransmit_length(big_term - 512, 4096, big_term),
            512
        );
        // term/2 caps the window on small terms: 16 × 32 KiB.
        assert_eq!(
            handler.max_retransmit_length(0, i32::MAX, TERM_LENGTH),
            TERM_LENGTH
        );
        // Group default rrwm is 4: 4 × 128 KiB.
        let group = RetransmitHandler::new(immediate(), LINGER_NS, 16);
        assert_eq!(
            group.max_retransmit_length(0, i32::MAX, big_term),
            512 * 1024
        );
        let group = group.with_rrwm(1);
        assert_eq!(
            group.max_retransmit_length(0, i32::MAX, TERM_LENGTH),
            32 * 1024
        );

        let mut handler = handler.with_rrwm(1);
        let mut resent = Vec::new();
        let outcome = handler.on_nak(7, 0, 4 * 1024 * 1024, big_term, 0, &mut |t, o, l| {
            resent.push((t, o, l))
        });
        assert_eq!(outcome, NakOutcome::Resent { length: 128 * 1024 });
        assert_eq!(resent, vec![(7, 0, 128 * 1024)]);
    }

    #[test]
    fn should_cut_a_nak_short_where_a_range_in_hand_begins() {
        let mut handler = RetransmitHandler::new(immediate(), LINGER_NS, 16);
        nak(&mut handler, 4096, 1024, 0);
        let (outcome, resent) = nak(&mut handler, 1024, 8192, 1);
        assert_eq!(outcome, NakOutcome::Resent { length: 3072 });
        assert_eq!(resent, vec![(7, 1024, 3072)]);
        // Other terms are not affected.
        let mut resent = Vec::new();
        handler.on_nak(8, 4096, 1024, TERM_LENGTH, 2, &mut |t, o, l| {
            resent.push((t, o, l))
        });
        assert_eq!(resent, vec![(8, 4096, 1024)]);
    }

    #[test]
    fn should_drop_naks_with_invalid_offsets_and_ignore_empty_ones() {
        let mut handler = RetransmitHandler::new_unicast(immediate(), LINGER_NS);
        assert_eq!(nak(&mut handler, -32, 64, 0), (NakOutcome::Invalid, vec![]));
        assert_eq!(nak(&mut handler, TERM_LENGTH, 64, 0).0, NakOutcome::Invalid);
        assert_eq!(
            nak(&mut handler, TERM_LENGTH - 16, 16, 0).0,
            NakOutcome::Invalid
        );
        assert_eq!(nak(&mut handler, 100, 64, 0).0, NakOutcome::Invalid);
        assert_eq!(handler.invalid_count(), 4);
        assert_eq!(nak(&mut handler, 64, 0, 0), (NakOutcome::Empty, vec![]));
        assert_eq!(
            nak(&mut handler, TERM_LENGTH - 32, 64, 0).0,
            NakOutcome::Resent { length: 32 }
        );
    }
}
