//! Receiver-side loss detection: which gaps to NAK, and when.
//!
//! docs/protocol.md §5.4. Each scan walks the rebuild position's term from
//! the rebuild position towards the high-water mark (never past the end of
//! that term) and collects its gaps. Every gap carries a timer:
//!
//! ```text
//!  new gap ──► timer = now + delay            (or now, if immediate)
//!  timer expired ──► NAK(term_id, term_offset, length)
//!                    timer = now + retry delay
//!  gap no longer found (filled, or behind the rebuild position) ──► dropped
//! ```
//!
//! Aeron tracks only the *first* gap, so a burst that loses three separate
//! datagrams costs three NAK round trips: the second gap is only noticed once
//! the first is repaired. This detector tracks up to `max_gaps` gaps at once
//! (16 by default) and NAKs all of them as their timers expire, so they are
//! repaired in parallel. What goes on the wire is unchanged: one ordinary NAK
//! frame per gap, which any Aeron sender serves (it handles each NAK on its
//! own; several in a row are fine). With `max_gaps = 1` the detector behaves
//! like Aeron's.
//!
//! A gap keeps its timer while it shrinks or splits: a scanned gap that
//! overlaps a gap tracked by the previous scan inherits that gap's timer. So a
//! retransmit arriving datagram by datagram, which moves the gap's start on
//! every scan, does not look like a new loss each time (with immediate unicast
//! feedback that would send a fresh NAK per datagram).
//!
//! Retries can follow the path instead of a fixed period
//! ([`LossDetector::with_adaptive_retry`]), as TCP's retransmission timer
//! follows its round trip (RFC 6298):
//!
//! * a gap repaired after a single NAK gives a sample, the time from that NAK
//!   to the repair; a gap NAKed more than once gives none (Karn's rule: which
//!   NAK was served is unknown, and taking the first would feed every lost
//!   retransmit's retry delay back into the estimate, which then only grows).
//!   The one exception is the first sample, taken from the first NAK of any
//!   repaired gap: on a path longer than the retry delay every early gap is
//!   retried, so Karn's rule alone would never start;
//! * samples are smoothed, with their mean deviation; a retry waits for the
//!   smoothed repair time plus four deviations, never less than the
//!   generator's retry delay and never more than the cap.
//!
//! Unlike TCP, a gap's later retries do not back off: a sender ignores the
//! NAKs for a range it resent within its linger time, so on a fast path,
//! where the estimate is a few milliseconds, doubling waits would let a lost
//! retransmit wait for several of them (recovery at 10 % loss on loopback took
//! 0.90 s instead of 0.54 s). For the same reason a sulis sender's unicast
//! linger (200 µs) is no longer than the least retry delay (200 µs): with a
//! 10 ms linger, every lost retransmit stalled its gap for 10 ms, and moving
//! mixed-size messages at 10 % loss each way took 11.8 times as long as
//! without loss (1.5 times with the two equal). A path that becomes slower than
//! the estimate gets no repair samples then (Karn's rule); the receiver also
//! measures the round trip itself (an RTTM frame every 100 ms, echoed by the
//! sender) and hands each one in as a sample ([`LossDetector::on_round_trip`]),
//! so the estimate grows with the path all the same.
//!
//! On a 20 ms path a fixed 1 ms retry sends some 20 NAKs per loss; the
//! adaptive one little more than one.
//!
//! No I/O and no clock: the caller passes `now_ns` and receives NAKs through a
//! callback. For `reliable=false` images the same callback can fill gaps with
//! padding instead (see [`super::gap_filler`]).

use super::feedback_delay::FeedbackDelayGenerator;
use super::gap_scanner::{scan_for_gaps, Gap};
use sulis_concurrent::AtomicBuffer;
use sulis_protocol::log_buffer_descriptor::{
    compute_term_id_from_position, compute_term_offset_from_position,
};

/// Default number of gaps tracked at once.
pub const LOSS_DETECTOR_MAX_GAPS_DEFAULT: usize = 16;

/// The longest an adaptive NAK retry waits, ns.
pub const NAK_RETRY_ADAPTIVE_MAX_NS: i64 = 200_000_000;

/// A gap being tracked, with its NAK timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackedGap {
    /// The missing range.
    pub gap: Gap,
    /// When the next NAK for it is due, ns.
    pub expiry_ns: i64,
    /// NAKs sent for it so far.
    pub naks_sent: u32,
    /// When the first NAK for it was sent, ns (meaningless while `naks_sent` is 0).
    pub first_nak_at_ns: i64,
}

/// Smoothed repair time of an image's NAKs (RFC 6298's estimator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairTime {
    /// Smoothed repair time, ns (0: no sample yet).
    pub smoothed_ns: i64,
    /// Its mean deviation, ns.
    pub deviation_ns: i64,
    /// Samples taken.
    pub samples: u64,
}

impl RepairTime {
    fn add(&mut self, sample_ns: i64) {
        let sample_ns = sample_ns.max(0);
        if self.samples == 0 {
            self.smoothed_ns = sample_ns;
            self.deviation_ns = sample_ns / 2;
        } else {
            let error = (self.smoothed_ns - sample_ns).abs();
            self.deviation_ns += (error - self.deviation_ns) / 4;
            self.smoothed_ns += (sample_ns - self.smoothed_ns) / 8;
        }
        self.samples += 1;
    }

    /// The retry timeout: smoothed time plus four deviations (None without samples).
    pub fn timeout_ns(&self) -> Option<i64> {
        (self.samples > 0).then(|| {
            self.smoothed_ns
                .saturating_add(self.deviation_ns.saturating_mul(4))
        })
    }
}

/// Tracks up to `max_gaps` gaps of one image and decides when to NAK them.
pub struct LossDetector {
    delay: Box<dyn FeedbackDelayGenerator>,
    max_gaps: usize,
    /// Gaps from the last scan, in term order.
    gaps: Vec<TrackedGap>,
    /// Scratch space for a scan's gaps (kept to avoid allocating per scan).
    scanned: Vec<Gap>,
    /// Scratch space for the next `gaps`.
    next: Vec<TrackedGap>,
    naks_sent: u64,
    gaps_detected: u64,
    /// Gaps detected since the last [`LossDetector::take_new_loss`], and their bytes.
    new_gaps: u64,
    new_bytes: i64,
    /// With adaptive retries: the most a retry waits, ns.
    adaptive_max_ns: Option<i64>,
    repair: RepairTime,
}

impl std::fmt::Debug for LossDetector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LossDetector")
            .field("max_gaps", &self.max_gaps)
            .field("gaps", &self.gaps)
            .field("naks_sent", &self.naks_sent)
            .field("gaps_detected", &self.gaps_detected)
            .field("repair", &self.repair)
            .finish_non_exhaustive()
    }
}

impl LossDetector {
    /// A detector timing NAKs with `delay` and tracking at most `max_gaps`
    /// gaps (at least 1; 1 gives Aeron's one-gap-at-a-time behaviour).
    pub fn new(delay: Box<dyn FeedbackDelayGenerator>, max_gaps: usize) -> Self {
        let max_gaps = max_gaps.max(1);
        LossDetector {
            delay,
            max_gaps,
            gaps: Vec::with_capacity(max_gaps),
            scanned: Vec::with_capacity(max_gaps),
            next: Vec::with_capacity(max_gaps),
            naks_sent: 0,
            gaps_detected: 0,
            new_gaps: 0,
            new_bytes: 0,
            adaptive_max_ns: None,
            repair: RepairTime::default(),
        }
    }

    /// The same detector pacing retries by the measured repair time (see the
    /// module's documentation): at least the generator's retry delay, at most
    /// `max_retry_ns`.
    pub fn with_adaptive_retry(mut self, max_retry_ns: i64) -> Self {
        self.adaptive_max_ns = Some(max_retry_ns);
        self
    }

    /// The repair time measured so far (samples are taken with adaptive retries only).
    pub fn repair_time(&self) -> RepairTime {
        self.repair
    }

    /// Takes a measured round trip (an RTT measurement frame's reply) as a
    /// repair time sample, with adaptive retries only. Unlike a timed repair
    /// it is never ambiguous, so the estimate also follows a path that got
    /// slower, whose repairs all need a retry and so are never sampled.
    pub fn on_round_trip(&mut self, rtt_ns: i64) {
        if self.adaptive_max_ns.is_some() {
            self.repair.add(rtt_ns);
        }
    }

    /// The delay before the next retry of a NAK sent now: the generator's
    /// retry delay, or with adaptive retries the measured repair time plus
    /// four deviations, within that delay and the cap.
    pub fn retry_delay_ns(&mut self) -> i64 {
        let fixed = self.delay.retry_delay_ns();
        match (self.adaptive_max_ns, self.repair.timeout_ns()) {
            (Some(max), Some(timeout)) => fixed.max(timeout.min(max)),
            _ => fixed,
        }
    }

    /// Samples the repair time of the gaps NAKed once that `still_open` no longer overlaps
    /// (before the first sample: of every NAKed gap).
    fn sample_repairs(&mut self, now_ns: i64, still_open: &[Gap]) {
        if self.adaptive_max_ns.is_none() {
            return;
        }
        for tracked in &self.gaps {
            let sampled =
                tracked.naks_sent == 1 || (tracked.naks_sent > 1 && self.repair.samples == 0);
            if sampled && !still_open.iter().any(|gap| gap.overlaps(&tracked.gap)) {
                self.repair.add(now_ns - tracked.first_nak_at_ns);
            }
        }
    }

    /// Most gaps tracked at once.
    pub fn max_gaps(&self) -> usize {
        self.max_gaps
    }

    /// The gaps found by the last scan, in term order, with their timers.
    pub fn gaps(&self) -> &[TrackedGap] {
        &self.gaps
    }

    /// NAKs requested through `on_nak` since creation (the "NAKs sent" counter).
    pub fn naks_sent(&self) -> u64 {
        self.naks_sent
    }

    /// Distinct losses seen since creation (gaps that did not continue a
    /// tracked one); the loss report's count.
    pub fn gaps_detected(&self) -> u64 {
        self.gaps_detected
    }

    /// Gaps newly detected since the last call and their total length at
    /// detection (for the loss report); resets both.
    pub fn take_new_loss(&mut self) -> (u64, i64) {
        let taken = (self.new_gaps, self.new_bytes);
        self.new_gaps = 0;
        self.new_bytes = 0;
        taken
    }

    /// Forgets every tracked gap (for example when an image is rejoined).
    pub fn clear(&mut self) {
        self.gaps.clear();
    }

    /// Scans the rebuild position's term and NAKs the gaps whose timer expired.
    ///
    /// * `term`: the partition holding `rebuild_position` (its capacity is the
    ///   term length, `1 << bits`);
    /// * `rebuild_position`: highest contiguous position (a frame boundary);
    /// * `hwm_position`: the high-water mark; the scan stops at it, or at the
    ///   end of the rebuild term if the mark is in a later term;
    /// * `on_nak(term_id, term_offset, length)`: called once per NAK due now,
    ///   in term order.
    ///
    /// Returns the new rebuild position (end of the frames present from
    /// `rebuild_position` on) and the work done: gaps newly detected plus NAKs
    /// requested.
    #[allow(clippy::too_many_arguments)]
    pub fn scan(
        &mut self,
        term: &AtomicBuffer,
        rebuild_position: i64,
        hwm_position: i64,
        initial_term_id: i32,
        bits: u32,
        now_ns: i64,
        on_nak: &mut dyn FnMut(i32, i32, i32),
    ) -> (i64, usize) {
        if rebuild_position >= hwm_position {
            // Nothing outstanding: whatever was tracked has been filled.
            self.sample_repairs(now_ns, &[]);
            self.gaps.clear();
            return (rebuild_position, 0);
        }
        debug_assert_eq!(
            term.capacity(),
            1usize << bits,
            "term is not the rebuild term"
        );

        let term_id = compute_term_id_from_position(rebuild_position, bits, initial_term_id);
        let rebuild_offset = compute_term_offset_from_position(rebuild_position, bits);
        let limit_offset = if hwm_position >> bits == rebuild_position >> bits {
            compute_term_offset_from_position(hwm_position, bits)
        } else {
            // Terms are at most 1 GiB = 1 << 30, so the length fits an i32.
            (1i64 << bits) as i32
        };

        self.scanned.clear();
        let scanned = &mut self.scanned;
        let contiguous_offset = scan_for_gaps(
            term,
            term_id,
            rebuild_offset,
            limit_offset,
            self.max_gaps,
            |gap| scanned.push(gap),
        );
        let new_rebuild_position =
            rebuild_position - rebuild_offset as i64 + contiguous_offset as i64;

        let mut work = 0;
        self.next.clear();
        for gap in &self.scanned {
            let continued = self.gaps.iter().find(|tracked| tracked.gap.overlaps(gap));
            let tracked = match continued {
                Some(previous) => TrackedGap {
                    gap: *gap,
                    ..*previous
                },
                None => {
                    work += 1;
                    self.gaps_detected += 1;
                    self.new_gaps += 1;
                    self.new_bytes += gap.length as i64;
                    let expiry_ns = if self.delay.should_feedback_immediately() {
                        now_ns
                    } else {
                        now_ns.saturating_add(self.delay.generate_delay_ns())
                    };
                    TrackedGap {
                        gap: *gap,
                        expiry_ns,
                        naks_sent: 0,
                        first_nak_at_ns: 0,
                    }
                }
            };
            self.next.push(tracked);
        }

        let scanned = std::mem::take(&mut self.scanned);
        self.sample_repairs(now_ns, &scanned);
        self.scanned = scanned;

        let mut next = std::mem::take(&mut self.next);
        for tracked in &mut next {
            if now_ns >= tracked.expiry_ns {
                let gap = tracked.gap;
                on_nak(gap.term_id, gap.term_offset, gap.length);
                if tracked.naks_sent == 0 {
                    tracked.first_nak_at_ns = now_ns;
                }
                tracked.naks_sent = tracked.naks_sent.saturating_add(1);
                tracked.expiry_ns = now_ns.saturating_add(self.retry_delay_ns());
                self.naks_sent += 1;
                work += 1;
            }
        }
        self.next = next;

        std::mem::swap(&mut self.gaps, &mut self.next);
        (new_rebuild_position, work)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::feedback_delay::StaticDelayGenerator;
    use crate::loss::gap_scanner::tests::TestTerm;
    use sulis_protocol::log_buffer_descriptor::{compute_position, position_bits_to_shift};

    const TERM_LENGTH: usize = 64 * 1024;
    const INITIAL_TERM_ID: i32 = -3;
    const DELAY_NS: i64 = 20_000;
    const RETRY_NS: i64 = 1_000_000;

    fn bits() -> u32 {
        position_bits_to_shift(TERM_LENGTH)
    }

    fn position(term_id: i32, term_offset: i32) -> i64 {
        compute_position(term_id, term_offset, bits(), INITIAL_TERM_ID)
    }

    /// Delayed (not immediate) NAKs: 20 µs, retried every 1 ms.
    fn delayed_detector(max_gaps: usize) -> LossDetector {
        let delay = StaticDelayGenerator::new(DELAY_NS, false).with_retry_delay_ns(RETRY_NS);
        LossDetector::new(Box::new(delay), max_gaps)
    }

    /// A term with frames at [0, 1024) and [2048, 3072): one gap, [1024, 2048); and its high-water mark.
    fn one_gap_term() -> (TestTerm, i64) {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert(0, 1024, INITIAL_TERM_ID);
        term.insert(2048, 1024, INITIAL_TERM_ID);
        (term, position(INITIAL_TERM_ID, 3072))
    }

    /// Runs one scan and returns (new rebuild position, work, NAKs).
    fn scan(
        detector: &mut LossDetector,
        term: &TestTerm,
        rebuild: i64,
        hwm: i64,
        now_ns: i64,
    ) -> (i64, usize, Vec<(i32, i32, i32)>) {
        let mut naks = Vec::new();
        let (rebuild, work) = detector.scan(
            &term.buffer,
            rebuild,
            hwm,
            INITIAL_TERM_ID,
            bits(),
            now_ns,
            &mut |term_id, term_offset, length| naks.push((term_id, term_offset, length)),
        );
        (rebuild, work, naks)
    }

    #[test]
    fn should_nak_a_single_gap_after_the_delay_and_retry_every_retry_interval() {
        let (term, hwm) = one_gap_term();
        let term_id = INITIAL_TERM_ID;
        let mut detector = delayed_detector(16);

        let (rebuild, work, naks) = scan(&mut detector, &term, 0, hwm, 0);
        assert_eq!((rebuild, work), (1024, 1), "gap detected, timer armed");
        assert!(naks.is_empty());
        assert_eq!(
            detector.take_new_loss(),
            (1, 1024),
            "one loss for the report"
        );
        assert_eq!(detector.take_new_loss(), (0, 0));
        assert!(scan(&mut detector, &term, 1024, hwm, DELAY_NS - 1)
            .2
            .is_empty());

        let (_, work, naks) = scan(&mut detector, &term, 1024, hwm, DELAY_NS);
        assert_eq!(naks, vec![(term_id, 1024, 1024)]);
        assert_eq!(work, 1);

        // Retries: nothing until the retry delay, then one NAK per interval.
        assert!(
            scan(&mut detector, &term, 1024, hwm, DELAY_NS + RETRY_NS - 1)
                .2
                .is_empty()
        );
        for round in 1..=3 {
            let now = DELAY_NS + round * RETRY_NS;
            assert_eq!(
                scan(&mut detector, &term, 1024, hwm, now).2,
                vec![(term_id, 1024, 1024)]
            );
            assert!(scan(&mut detector, &term, 1024, hwm, now + 1).2.is_empty());
        }
        assert_eq!(detector.naks_sent(), 4);
        assert_eq!(detector.gaps()[0].naks_sent, 4);
        assert_eq!(detector.gaps_detected(), 1);
        assert_eq!(
            detector.take_new_loss(),
            (0, 0),
            "retries are not new losses"
        );
    }

    #[test]
    fn should_nak_at_once_with_the_unicast_default() {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert(0, 1024, INITIAL_TERM_ID);
        term.insert(2048, 1024, INITIAL_TERM_ID);
        let hwm = position(INITIAL_TERM_ID, 3072);
        let mut detector = LossDetector::new(
            Box::new(StaticDelayGenerator::unicast_nak_default()),
            LOSS_DETECTOR_MAX_GAPS_DEFAULT,
        );

        let (_, work, naks) = scan(&mut detector, &term, 0, hwm, 500);
        assert_eq!(naks, vec![(INITIAL_TERM_ID, 1024, 1024)]);
        assert_eq!(work, 2, "one new gap, one NAK");
        // Retry every 1 µs × 100.
        assert!(scan(&mut detector, &term, 1024, hwm, 500 + 99_999)
            .2
            .is_empty());
        assert_eq!(
            scan(&mut detector, &term, 1024, hwm, 500 + 100_000).2.len(),
            1
        );
    }

    #[test]
    fn should_stop_naking_once_the_gap_is_filled() {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert(0, 1024, INITIAL_TERM_ID);
        term.insert(2048, 1024, INITIAL_TERM_ID);
        let hwm = position(INITIAL_TERM_ID, 3072);
        let mut detector = delayed_detector(16);
        scan(&mut detector, &term, 0, hwm, 0);
        assert_eq!(scan(&mut detector, &term, 1024, hwm, DELAY_NS).2.len(), 1);

        term.insert(1024, 1024, INITIAL_TERM_ID);
        let (rebuild, work, naks) = scan(&mut detector, &term, 1024, hwm, DELAY_NS + 1);
        assert_eq!(
            (rebuild, work),
            (hwm, 0),
            "rebuilt up to the high-water mark"
        );
        assert!(naks.is_empty());
        assert!(detector.gaps().is_empty());
        for round in 1..=5 {
            let (_, _, naks) = scan(&mut detector, &term, rebuild, hwm, round * RETRY_NS);
            assert!(naks.is_empty());
        }
        assert_eq!(detector.naks_sent(), 1);
    }

    /// Three lost datagrams: [1024, 2048), [3072, 4096), [5120, 8192).
    fn term_with_three_gaps() -> TestTerm {
        let term = TestTerm::new(TERM_LENGTH);
        for offset in [0, 2048, 4096, 8192] {
            term.insert(offset, 1024, INITIAL_TERM_ID);
        }
        term
    }

    const THREE_GAPS: [(i32, i32, i32); 3] = [
        (INITIAL_TERM_ID, 1024, 1024),
        (INITIAL_TERM_ID, 3072, 1024),
        (INITIAL_TERM_ID, 5120, 3072),
    ];

    #[test]
    fn should_nak_three_separate_gaps_in_the_first_scan_after_the_delay() {
        let term = term_with_three_gaps();
        let hwm = position(INITIAL_TERM_ID, 9216);
        let mut detector = delayed_detector(16);

        let (rebuild, work, naks) = scan(&mut detector, &term, 0, hwm, 0);
        assert_eq!((rebuild, work), (1024, 3));
        assert!(naks.is_empty());
        assert_eq!(detector.gaps().len(), 3);

        let (_, work, naks) = scan(&mut detector, &term, 1024, hwm, DELAY_NS);
        assert_eq!(naks, THREE_GAPS.to_vec(), "all three repaired in parallel");
        assert_eq!(work, 3);

        // All three are retried together too.
        let (_, _, naks) = scan(&mut detector, &term, 1024, hwm, DELAY_NS + RETRY_NS);
        assert_eq!(naks, THREE_GAPS.to_vec());
    }

    #[test]
    fn should_nak_one_gap_at_a_time_when_max_gaps_is_one() {
        let term = term_with_three_gaps();
        let hwm = position(INITIAL_TERM_ID, 9216);
        let mut detector = delayed_detector(1);
        let mut rebuild = 0;
        let mut now = 0;
        let mut naks_at = Vec::new();

        // Each gap is only seen once the one before it is repaired: one
        // delay (plus, on a real network, one NAK round trip) per gap.
        for (term_id, offset, length) in THREE_GAPS {
            let (r, _, naks) = scan(&mut detector, &term, rebuild, hwm, now);
            assert!(naks.is_empty(), "the next gap is new: its timer starts now");
            assert_eq!(detector.gaps().len(), 1);
            rebuild = r;
            now += DELAY_NS;
            let (_, _, naks) = scan(&mut detector, &term, rebuild, hwm, now);
            assert_eq!(naks, vec![(term_id, offset, length)], "only the first gap");
            naks_at.push(now);
            // The retransmit arrives.
            term.insert_run(offset, offset + length, 1024, term_id);
            now += 1;
        }
        assert_eq!(naks_at, vec![DELAY_NS, 2 * DELAY_NS + 1, 3 * DELAY_NS + 2]);

        let (rebuild, _, naks) = scan(&mut detector, &term, rebuild, hwm, now);
        assert_eq!(rebuild, hwm);
        assert!(naks.is_empty());

        // The multi-gap detector asked for all three at DELAY_NS.
        let term = term_with_three_gaps();
        let mut multi = delayed_detector(16);
        scan(&mut multi, &term, 0, hwm, 0);
        assert_eq!(scan(&mut multi, &term, 1024, hwm, DELAY_NS).2.len(), 3);
    }

    #[test]
    fn should_track_no_more_than_max_gaps() {
        let term = TestTerm::new(TERM_LENGTH);
        // 20 gaps: a frame at every 2 KiB.
        for i in 0..=20 {
            term.insert(i * 2048, 1024, INITIAL_TERM_ID);
        }
        let hwm = position(INITIAL_TERM_ID, 20 * 2048 + 1024);
        let mut detector = delayed_detector(16);
        scan(&mut detector, &term, 0, hwm, 0);
        let (_, _, naks) = scan(&mut detector, &term, 1024, hwm, DELAY_NS);
        assert_eq!(naks.len(), 16);
        assert_eq!(naks[15], (INITIAL_TERM_ID, 15 * 2048 + 1024, 1024));

        // As early gaps fill, later ones come into view.
        term.insert(1024, 1024, INITIAL_TERM_ID);
        let (rebuild, work, _) = scan(&mut detector, &term, 1024, hwm, DELAY_NS + 1);
        assert_eq!(rebuild, 3072);
        assert_eq!(work, 1, "the 17th gap is detected");
        assert_eq!(
            detector.gaps().last().unwrap().gap.term_offset,
            16 * 2048 + 1024
        );
    }

    #[test]
    fn should_detect_a_gap_at_the_term_start() {
        let term = TestTerm::new(TERM_LENGTH);
        let term_id = INITIAL_TERM_ID + 4;
        term.insert(512, 512, term_id);
        let base = position(term_id, 0);
        let hwm = base + 1024;
        let mut detector = delayed_detector(16);
        let (rebuild, _, _) = scan(&mut detector, &term, base, hwm, 0);
        assert_eq!(rebuild, base);
        let (_, _, naks) = scan(&mut detector, &term, base, hwm, DELAY_NS);
        assert_eq!(naks, vec![(term_id, 0, 512)]);
    }

    #[test]
    fn should_scan_only_to_the_term_end_when_the_hwm_is_in_the_next_term() {
        let term = TestTerm::new(TERM_LENGTH);
        let term_id = INITIAL_TERM_ID + 1;
        let end = TERM_LENGTH as i32;
        // Frames up to 4 KiB before the end, gap in the middle, tail missing.
        term.insert_run(0, 8192, 1024, term_id);
        term.insert_run(16384, end - 4096, 1024, term_id);
        let rebuild = position(term_id, 0);
        let hwm = position(term_id + 1, 2048);
        let mut detector = delayed_detector(16);

        let (new_rebuild, work, _) = scan(&mut detector, &term, rebuild, hwm, 0);
        assert_eq!(new_rebuild, position(term_id, 8192));
        assert_eq!(work, 2);
        let (_, _, naks) = scan(&mut detector, &term, new_rebuild, hwm, DELAY_NS);
        assert_eq!(
            naks,
            vec![(term_id, 8192, 8192), (term_id, end - 4096, 4096)],
            "the tail gap ends at the term end, and no NAK names the next term"
        );

        // Once the term is complete the rebuild position moves to the next term.
        term.insert_run(8192, 16384, 1024, term_id);
        term.insert_run(end - 4096, end, 1024, term_id);
        let (rebuild, _, naks) = scan(&mut detector, &term, new_rebuild, hwm, DELAY_NS + 1);
        assert_eq!(rebuild, position(term_id + 1, 0));
        assert!(naks.is_empty());
    }

    #[test]
    fn should_drop_gaps_of_a_finished_term() {
        let term = TestTerm::new(TERM_LENGTH);
        let next_term = TestTerm::new(TERM_LENGTH);
        let term_id = INITIAL_TERM_ID;
        term.insert_run(0, TERM_LENGTH as i32 - 1024, 1024, term_id);
        let hwm = position(term_id + 1, 4096);
        let mut detector = delayed_detector(16);
        scan(&mut detector, &term, 0, hwm, 0);
        assert_eq!(detector.gaps().len(), 1);

        // Tail repaired; the next scan is of the next term, which has its own gap.
        term.insert(TERM_LENGTH as i32 - 1024, 1024, term_id);
        next_term.insert(2048, 2048, term_id + 1);
        let (rebuild, _, _) = scan(&mut detector, &term, 0, hwm, 1);
        assert_eq!(rebuild, position(term_id + 1, 0));
        let (rebuild, work, _) = scan(&mut detector, &next_term, rebuild, hwm, 2);
        assert_eq!(rebuild, position(term_id + 1, 0));
        assert_eq!(work, 1);
        assert_eq!(
            detector.gaps()[0].gap,
            Gap {
                term_id: term_id + 1,
                term_offset: 0,
                length: 2048
            }
        );
    }

    #[test]
    fn should_handle_frame_lengths_that_are_not_multiples_of_32() {
        let term = TestTerm::new(TERM_LENGTH);
        let term_id = INITIAL_TERM_ID;
        term.insert(0, 33, term_id); // 64
        term.insert(64, 1000, term_id); // 1024 → ends at 1088
        term.insert(1184, 95, term_id); // gap [1088, 1184), frame ends at 1280
        term.insert(1312, 45, term_id); // gap [1280, 1312), frame ends at 1376
        let hwm = position(term_id, 1376);
        let mut detector = delayed_detector(16);
        let (rebuild, _, _) = scan(&mut detector, &term, 0, hwm, 0);
        assert_eq!(rebuild, 1088);
        let (_, _, naks) = scan(&mut detector, &term, rebuild, hwm, DELAY_NS);
        assert_eq!(naks, vec![(term_id, 1088, 96), (term_id, 1280, 32)]);
    }

    #[test]
    fn should_keep_the_timer_while_a_gap_shrinks_under_a_retransmit() {
        let term = TestTerm::new(TERM_LENGTH);
        let term_id = INITIAL_TERM_ID;
        term.insert(0, 1024, term_id);
        term.insert(8192, 1024, term_id);
        let hwm = position(term_id, 9216);
        let mut detector = LossDetector::new(
            Box::new(StaticDelayGenerator::unicast_nak_default()),
            LOSS_DETECTOR_MAX_GAPS_DEFAULT,
        );
        assert_eq!(
            scan(&mut detector, &term, 0, hwm, 0).2,
            vec![(term_id, 1024, 7168)]
        );

        // The retransmit lands datagram by datagram, and one in the middle
        // first: the gap shrinks and splits but is the same loss.
        term.insert(4096, 1024, term_id);
        term.insert(1024, 1024, term_id);
        let (rebuild, work, naks) = scan(&mut detector, &term, 1024, hwm, 10);
        assert_eq!(rebuild, 2048);
        assert_eq!(work, 0, "no new gap, no NAK");
        assert!(naks.is_empty());
        // The remainders are re-NAKed together at the retry time of the original.
        let (_, _, naks) = scan(&mut detector, &term, rebuild, hwm, 100_000);
        assert_eq!(naks, vec![(term_id, 2048, 2048), (term_id, 5120, 3072)]);
        assert_eq!(detector.gaps_detected(), 1);
    }

    #[test]
    fn should_do_nothing_when_rebuilt_up_to_the_hwm() {
        let term = TestTerm::new(TERM_LENGTH);
        let mut detector = delayed_detector(16);
        let hwm = position(INITIAL_TERM_ID, 4096);
        assert_eq!(scan(&mut detector, &term, hwm, hwm, 0), (hwm, 0, vec![]));
        assert!(detector.gaps().is_empty());
    }

    #[test]
    fn should_fill_gaps_instead_of_naking_when_unreliable() {
        use crate::loss::gap_filler::GapFiller;
        let term = term_with_three_gaps();
        let hwm = position(INITIAL_TERM_ID, 9216);
        // Unreliable images act on a gap as soon as it is seen.
        let mut detector = LossDetector::new(Box::new(StaticDelayGenerator::new(0, true)), 16);
        let mut filler = GapFiller::new();
        let buffer = term.buffer;
        let (rebuild, _) = detector.scan(
            &term.buffer,
            0,
            hwm,
            INITIAL_TERM_ID,
            bits(),
            0,
            &mut |term_id, term_offset, length| {
                assert!(filler.fill_gap(&buffer, term_offset, length, term_id, 77, 1001));
            },
        );
        assert_eq!(rebuild, 1024);
        assert_eq!(filler.gap_fills(), 3);
        let (rebuild, work, naks) = scan(&mut detector, &term, rebuild, hwm, 1);
        assert_eq!(
            (rebuild, work, naks),
            (hwm, 0, vec![]),
            "padding closes every gap"
        );
    }

    /// Immediate NAKs, retried after the repair time, between 1 ms and 200 ms.
    fn adaptive_detector() -> LossDetector {
        let delay = StaticDelayGenerator::new(0, true).with_retry_delay_ns(RETRY_NS);
        LossDetector::new(Box::new(delay), 16).with_adaptive_retry(200 * RETRY_NS)
    }

    #[test]
    fn adaptive_retries_wait_for_the_measured_repair_time() {
        let (term, hwm) = one_gap_term();
        let id = INITIAL_TERM_ID;
        let mut detector = adaptive_detector();

        // A first loss, NAKed at once and repaired 20 ms later: one sample.
        assert_eq!(
            scan(&mut detector, &term, 0, hwm, 0).2,
            vec![(id, 1024, 1024)]
        );
        assert!(scan(&mut detector, &term, 1024, hwm, RETRY_NS - 1)
            .2
            .is_empty());
        term.insert(1024, 1024, id);
        let (rebuild, _, naks) = scan(&mut detector, &term, 1024, hwm, 20 * RETRY_NS);
        assert_eq!((rebuild, naks), (hwm, vec![]));
        assert_eq!(
            detector.repair_time(),
            RepairTime {
                smoothed_ns: 20 * RETRY_NS,
                deviation_ns: 10 * RETRY_NS,
                samples: 1
            }
        );

        // The next loss is retried after 20 + 4 x 10 ms, not after 1 ms.
        term.insert(4096, 1024, id);
        let hwm = position(id, 5120);
        let t = 30 * RETRY_NS;
        assert_eq!(
            scan(&mut detector, &term, hwm - 2048, hwm, t).2,
            vec![(id, 3072, 1024)]
        );
        for now in [t + RETRY_NS, t + 60 * RETRY_NS - 1] {
            assert!(scan(&mut detector, &term, hwm - 2048, hwm, now)
                .2
                .is_empty());
        }
        // And so does every further retry of it.
        for due in [60, 120, 180, 240] {
            assert!(
                scan(
                    &mut detector,
                    &term,
                    hwm - 2048,
                    hwm,
                    t + due * RETRY_NS - 1
                )
                .2
                .is_empty(),
                "early retry before {due} ms"
            );
            assert_eq!(
                scan(&mut detector, &term, hwm - 2048, hwm, t + due * RETRY_NS).2,
                vec![(id, 3072, 1024)],
                "retry at {due} ms"
            );
        }

        // Repaired after five NAKs: no sample (Karn's rule), the estimate stays.
        term.insert(3072, 1024, id);
        let (rebuild, _, _) = scan(&mut detector, &term, hwm - 2048, hwm, t + 241 * RETRY_NS);
        assert_eq!(rebuild, hwm);
        assert_eq!(detector.repair_time().samples, 1);
        assert_eq!(detector.repair_time().smoothed_ns, 20 * RETRY_NS);
    }

    #[test]
    fn the_first_sample_comes_from_any_repaired_gap() {
        // On a 20 ms path with 1 ms retries every early gap is retried: the first
        // sample is taken all the same, from its first NAK.
        let (term, hwm) = one_gap_term();
        let id = INITIAL_TERM_ID;
        let mut detector = adaptive_detector();
        let mut naks = 0;
        for now in (0..20 * RETRY_NS).step_by(100_000) {
            naks += scan(&mut detector, &term, 1024, hwm, now).2.len();
        }
        assert_eq!(naks, 20, "NAKs at 0, 1, ... 19 ms");
        term.insert(1024, 1024, id);
        assert_eq!(scan(&mut detector, &term, 1024, hwm, 20 * RETRY_NS).0, hwm);
        assert_eq!(detector.repair_time().samples, 1);
        assert_eq!(detector.repair_time().smoothed_ns, 20 * RETRY_NS);
    }

    #[test]
    fn adaptive_retries_stay_between_the_retry_delay_and_the_cap() {
        let mut detector = adaptive_detector();
        assert_eq!(detector.retry_delay_ns(), RETRY_NS, "no sample yet");
        detector.repair.add(10_000);
        assert_eq!(detector.retry_delay_ns(), RETRY_NS, "a loopback repair");
        let mut detector = adaptive_detector();
        detector.repair.add(1_000_000_000);
        assert_eq!(detector.retry_delay_ns(), 200 * RETRY_NS, "capped");
    }

    #[test]
    fn the_repair_time_is_smoothed_as_tcp_smooths_its_round_trip() {
        let mut repair = RepairTime::default();
        assert_eq!(repair.timeout_ns(), None);
        repair.add(20_000_000);
        assert_eq!(repair.timeout_ns(), Some(60_000_000));
        repair.add(28_000_000);
        assert_eq!(
            repair,
            RepairTime {
                smoothed_ns: 21_000_000,
                deviation_ns: 9_500_000,
                samples: 2
            }
        );
        assert_eq!(repair.timeout_ns(), Some(59_000_000));
    }

    #[test]
    fn measured_round_trips_let_the_retry_time_grow_with_a_slower_path() {
        // Repairs timed at 2 ms; then the path takes 30 ms, so every repair
        // needs retries and none is sampled. Round trips still are.
        let mut detector = adaptive_detector();
        detector.repair.add(2 * RETRY_NS);
        let short = detector.retry_delay_ns();
        assert!(short < 30 * RETRY_NS);
        for _ in 0..10 {
            detector.on_round_trip(30 * RETRY_NS);
        }
        assert_eq!(detector.repair_time().samples, 11);
        assert!(
            detector.retry_delay_ns() > 30 * RETRY_NS,
            "retry after {} ns on a 30 ms path",
            detector.retry_delay_ns()
        );
        // And shrink again when the path is short once more.
        for _ in 0..100 {
            detector.on_round_trip(2 * RETRY_NS);
        }
        assert!(detector.retry_delay_ns() < 3 * RETRY_NS);
    }

    #[test]
    fn fixed_retries_take_no_samples() {
        let (term, hwm) = one_gap_term();
        let id = INITIAL_TERM_ID;
        let mut detector = delayed_detector(16);
        scan(&mut detector, &term, 0, hwm, 0);
        assert_eq!(scan(&mut detector, &term, 1024, hwm, DELAY_NS).2.len(), 1);
        term.insert(1024, 1024, id);
        assert_eq!(scan(&mut detector, &term, 1024, hwm, 20 * RETRY_NS).0, hwm);
        detector.on_round_trip(20 * RETRY_NS);
        assert_eq!(detector.repair_time(), RepairTime::default());
        assert_eq!(detector.retry_delay_ns(), RETRY_NS);
    }
}
