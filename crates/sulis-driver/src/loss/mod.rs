//! Loss recovery for the UDP transport: finding gaps, NAKing them, serving
//! retransmits, and padding over gaps on unreliable images.
//!
//! docs/protocol.md §5.4 and §3.7. Everything here is pure logic: no sockets
//! and no clock (docs/STYLE.md §3). Callers pass `now_ns` and get NAKs and
//! resends back through callbacks, so tests run on fake time.
//!
//! ```text
//!  receiver                                            sender
//!  ─────────                                           ──────
//!  image term ─► LossDetector::scan ─► on_nak ─ NAK ─► RetransmitHandler::on_nak
//!  (gap_scanner)   timers per gap       (or GapFiller      │ immediate, or
//!                  FeedbackDelayGenerator  if unreliable)  │ process_timeouts
//!                                                          ▼
//!  image term ◄──────────────── retransmitted DATA ◄────── resend
//! ```
//!
//! * [`feedback_delay`]: when to NAK. [`StaticDelayGenerator`] for unicast
//!   (1 µs, immediate, retry every 100 µs); [`OptimalMulticastDelayGenerator`]
//!   spreads NAKs of a group over `[0, max backoff]`, seeded by an injected
//!   [`XorShift64`].
//! * [`gap_scanner`]: the gaps of one term between the rebuild position and
//!   the high-water mark.
//! * [`loss_detector`]: [`LossDetector`] keeps a timer per gap for up to
//!   `max_gaps` gaps (16 by default; Aeron keeps one), so separate losses are
//!   repaired in parallel with ordinary NAK frames.
//! * [`gap_filler`]: [`GapFiller`] pads gaps of `reliable=false` images.
//! * [`retransmit`]: [`RetransmitHandler`] dedups NAKs, delays and lingers
//!   retransmits, and clamps their length.
//!
//! # Example
//!
//! ```
//! use sulis_concurrent::AtomicBuffer;
//! use sulis_driver::loss::{LossDetector, RetransmitHandler, StaticDelayGenerator};
//! use sulis_protocol::frame::{pack_header_word, HDR_TYPE_DATA, TERM_OFFSET_FIELD_OFFSET};
//!
//! const TERM_LENGTH: usize = 64 * 1024;
//! let bits = TERM_LENGTH.trailing_zeros();
//! let mut memory = vec![0u64; TERM_LENGTH / 8];
//! // SAFETY: `memory` outlives `term` and is never resized.
//! let term = unsafe { AtomicBuffer::new(memory.as_mut_ptr().cast(), TERM_LENGTH) };
//! let insert = |offset: i32, frame_length: i32| {
//!     term.put_i32(offset as usize + TERM_OFFSET_FIELD_OFFSET, offset);
//!     term.put_i64_ordered(offset as usize, pack_header_word(frame_length, 0xC0, HDR_TYPE_DATA));
//! };
//! // Frames at 0 and 2048 arrived; the one at 1024 was lost.
//! insert(0, 1024);
//! insert(2048, 1024);
//!
//! let mut detector = LossDetector::new(Box::new(StaticDelayGenerator::unicast_nak_default()), 16);
//! let mut naks = Vec::new();
//! let (rebuild, _work) = detector.scan(&term, 0, 3072, 0, bits, 1_000, &mut |t, o, l| {
//!     naks.push((t, o, l))
//! });
//! assert_eq!(rebuild, 1024);
//! assert_eq!(naks, vec![(0, 1024, 1024)]); // unicast: NAKed at once
//!
//! // The sender resends the range once and ignores repeats while it lingers.
//! let mut sender = RetransmitHandler::new_unicast(Box::new(StaticDelayGenerator::new(0, false)), 10_000_000);
//! let mut resent = Vec::new();
//! for &(term_id, offset, length) in naks.iter().chain(naks.iter()) {
//!     sender.on_nak(term_id, offset, length, TERM_LENGTH as i32, 2_000, &mut |t, o, l| {
//!         resent.push((t, o, l))
//!     });
//! }
//! assert_eq!(resent, vec![(0, 1024, 1024)]);
//! ```

pub mod feedback_delay;
pub mod gap_filler;
pub mod gap_scanner;
pub mod generator;
pub mod loss_detector;
pub mod retransmit;
pub mod xorshift;

pub use feedback_delay::{
    FeedbackDelayGenerator, OptimalMulticastDelayGenerator, StaticDelayGenerator,
};
pub use gap_filler::{fill_gap, GapFiller};
pub use gap_scanner::{scan_for_gaps, Gap};
pub use generator::{LossGenerator, LossSpec};
pub use loss_detector::{
    LossDetector, RepairTime, TrackedGap, LOSS_DETECTOR_MAX_GAPS_DEFAULT, NAK_RETRY_ADAPTIVE_MAX_NS,
};
pub use retransmit::{NakOutcome, RetransmitHandler};
pub use xorshift::XorShift64;

#[cfg(test)]
mod tests {
    //! Receiver and sender together, over a "network" that loses three
    //! datagrams once and then delivers everything.

    use super::gap_scanner::tests::TestTerm;
    use super::*;
    use sulis_protocol::frame::align_frame;
    use sulis_protocol::log_buffer_descriptor::position_bits_to_shift;

    const TERM_LENGTH: usize = 64 * 1024;
    const FRAME: i32 = 1024;
    const HWM: i64 = 16 * FRAME as i64;
    const LINGER_NS: i64 = 10_000_000;
    /// One-way network latency of the fake network.
    const LATENCY_NS: i64 = 50_000;

    /// Copies the frames of `[offset, offset + length)` from the sender's
    /// term into the receiver's, payload first and header word last.
    fn deliver(from: &TestTerm, to: &TestTerm, offset: i32, length: i32) {
        let mut at = offset as usize;
        let end = (offset + length) as usize;
        while at < end {
            let frame_length = from.buffer.get_i32_volatile(at);
            let aligned = align_frame(frame_length as usize);
            if to.buffer.get_i32_volatile(at) == 0 {
                to.buffer
                    .put_bytes(at + 8, from.buffer.slice(at + 8, aligned - 8));
                to.buffer.put_i64_ordered(at, from.buffer.get_i64(at));
            }
            at += aligned;
        }
    }

    /// Runs loss recovery until the receiver is rebuilt to `HWM`; returns
    /// (time taken, NAKs sent, retransmits).
    fn recover(max_gaps: usize) -> (i64, u64, u64) {
        let sender_term = TestTerm::new(TERM_LENGTH);
        sender_term.insert_run(0, HWM as i32, FRAME, 0);
        let receiver_term = TestTerm::new(TERM_LENGTH);
        // Datagrams 2, 6 and 11 were lost.
        for i in (0..16).filter(|i| ![2, 6, 11].contains(i)) {
            deliver(&sender_term, &receiver_term, i * FRAME, FRAME);
        }

        let bits = position_bits_to_shift(TERM_LENGTH);
        let mut detector = LossDetector::new(
            Box::new(StaticDelayGenerator::unicast_nak_default()),
            max_gaps,
        );
        let mut sender = RetransmitHandler::new_unicast(
            Box::new(StaticDelayGenerator::new(0, false)),
            LINGER_NS,
        );
        // Retransmits in flight: (arrival time, offset, length).
        let mut in_flight: Vec<(i64, i32, i32)> = Vec::new();
        let mut rebuild = 0;
        let mut now = 0;
        while rebuild < HWM {
            assert!(now < 1_000_000_000, "no progress");
            for &(_, offset, length) in in_flight.iter().filter(|f| f.0 <= now) {
                deliver(&sender_term, &receiver_term, offset, length);
            }
            in_flight.retain(|f| f.0 > now);

            let mut naks = Vec::new();
            let (position, _) = detector.scan(
                &receiver_term.buffer,
                rebuild,
                HWM,
                0,
                bits,
                now,
                &mut |t, o, l| naks.push((t, o, l)),
            );
            rebuild = position;
            // NAKs reach the sender one latency later; its resends one more after that.
            for (term_id, offset, length) in naks {
                sender.on_nak(
                    term_id,
                    offset,
                    length,
                    TERM_LENGTH as i32,
                    now + LATENCY_NS,
                    &mut |_, o, l| in_flight.push((now + 2 * LATENCY_NS, o, l)),
                );
            }
            now += 1_000;
        }
        (now, detector.naks_sent(), sender.retransmits())
    }

    #[test]
    fn should_repair_three_gaps_in_one_round_trip() {
        let (multi_ns, multi_naks, multi_resends) = recover(LOSS_DETECTOR_MAX_GAPS_DEFAULT);
        let (single_ns, single_naks, single_resends) = recover(1);
        assert_eq!((multi_naks, multi_resends), (3, 3));
        assert_eq!((single_naks, single_resends), (3, 3));
        // One round trip for all three gaps, against one per gap.
        assert!(
            multi_ns <= 2 * LATENCY_NS + 2_000,
            "multi-gap took {multi_ns} ns"
        );
        assert!(
            single_ns >= 3 * 2 * LATENCY_NS,
            "one-at-a-time took {single_ns} ns"
        );
    }
}
