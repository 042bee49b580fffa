//! Finding runs of missing frames in one term of a receiver's image.
//!
//! The receiver writes every frame it gets at the frame's own term offset
//! (docs/protocol.md §3.5), so a term fills in out of order and lost frames
//! leave holes of zeroes. A hole is recognised by its first word: a frame
//! length of 0 at an offset where a frame must start.
//!
//! ```text
//!  rebuild offset                                              limit (hwm, or
//!  │                                                           │  term end)
//!  ▼                                                           ▼
//!  ┌──────┬────┬─────────────┬──────────┬───────────┬────────┬─┐
//!  │ 1408 │ 97 │ 0 0 0 0 0 0 │   1408   │ 0 0 0 0 0 │  416   │0│
//!  └──────┴────┴─────────────┴──────────┴───────────┴────────┴─┘
//!   frame  frame  gap 1        frame      gap 2       frame
//!   (step by align(len, 32))   ▲ gap ends at the next non-zero word
//!                              │ on a 32-byte boundary
//! ```
//!
//! A present frame says where the next one starts (`offset +
//! align(frame_length, 32)`); inside a gap nothing does, so the scan steps 32
//! bytes at a time (the frame alignment) until it meets a non-zero word. That
//! word is taken as the end of the gap; if it is a well-formed header the scan
//! carries on from it to look for further gaps.
//!
//! The scan may run while the receiver inserts frames. An insert copies the
//! payload first and store-releases the header word last, so the scan can see
//! payload bytes of a frame whose header is not yet visible. Such a word ends
//! the gap (the NAK then asks for a few bytes that are already on their way:
//! harmless), but it is no frame boundary, so the scan stops there instead of
//! walking on from garbage. [`is_frame_header_at`] tells the two apart.

use sulis_concurrent::AtomicBuffer;
use sulis_protocol::frame::{
    align_frame, CURRENT_VERSION, FRAME_ALIGNMENT, HDR_TYPE_DATA, HDR_TYPE_PAD,
    TERM_OFFSET_FIELD_OFFSET, TYPE_FIELD_OFFSET, VERSION_FIELD_OFFSET,
};

/// The frame alignment as a term offset.
const ALIGNMENT: i32 = FRAME_ALIGNMENT as i32;

/// A run of missing bytes in one term, in the units of a NAK frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gap {
    /// Term the bytes belong to.
    pub term_id: i32,
    /// Offset of the first missing byte (a frame boundary, 32-aligned).
    pub term_offset: i32,
    /// Number of missing bytes (a multiple of 32 unless cut by an unaligned limit).
    pub length: i32,
}

impl Gap {
    /// Offset just past the gap.
    #[inline]
    pub fn end_offset(&self) -> i32 {
        self.term_offset + self.length
    }

    /// True if both gaps are in the same term and share at least one byte.
    #[inline]
    pub fn overlaps(&self, other: &Gap) -> bool {
        self.term_id == other.term_id
            && self.term_offset < other.end_offset()
            && other.term_offset < self.end_offset()
    }
}

/// True if a complete, well-formed DATA or PAD header starts at `offset`.
///
/// The frame length is read with acquire ordering; once it is positive the
/// rest of the header is visible (it was written before the release of the
/// first word). The header must name its own offset, carry protocol version 0
/// and a DATA or PAD type, and the frame must end inside the term. Payload
/// bytes that happen to sit on a 32-byte boundary almost never pass all four.
pub fn is_frame_header_at(term: &AtomicBuffer, offset: i32) -> bool {
    if offset < 0 || offset as usize + FRAME_ALIGNMENT > term.capacity() {
        return false;
    }
    let at = offset as usize;
    let frame_length = term.get_i32_volatile(at);
    if frame_length <= 0 || at + align_frame(frame_length as usize) > term.capacity() {
        return false;
    }
    term.get_i32(at + TERM_OFFSET_FIELD_OFFSET) == offset
        && term.get_u8(at + VERSION_FIELD_OFFSET) == CURRENT_VERSION
        && matches!(
            term.get_u16(at + TYPE_FIELD_OFFSET),
            HDR_TYPE_DATA | HDR_TYPE_PAD
        )
}

/// Scans `term` from `rebuild_offset` up to `limit_offset` and reports up to
/// `max_gaps` gaps, in order, to `on_gap`.
///
/// `rebuild_offset` must be a frame boundary (32-aligned); `limit_offset` is
/// the high-water mark's offset when it is in this term, else the term length.
/// A gap that reaches the limit ends there (the rest of the term, when the
/// high-water mark has moved on to the next term).
///
/// Returns the rebuild offset: the end of the run of frames present from
/// `rebuild_offset` on, which is the start of the first gap if there is one.
/// It can pass `limit_offset` only when a present frame straddles it.
pub fn scan_for_gaps<F: FnMut(Gap)>(
    term: &AtomicBuffer,
    term_id: i32,
    rebuild_offset: i32,
    limit_offset: i32,
    max_gaps: usize,
    mut on_gap: F,
) -> i32 {
    debug_assert!(rebuild_offset >= 0 && rebuild_offset % ALIGNMENT == 0);
    let capacity = term.capacity();
    // Terms are at most 1 GiB, so the capacity fits an i32.
    let limit = limit_offset.min(capacity as i32);
    let mut offset = rebuild_offset;
    let mut first_gap_offset: Option<i32> = None;
    let mut gaps = 0usize;

    while offset < limit {
        let frame_length = term.get_i32_volatile(offset as usize);
        if frame_length > 0 {
            let next = offset as usize + align_frame(frame_length as usize);
            if next > capacity {
                // A length no frame can have: never walk outside the term.
                break;
            }
            offset = next as i32;
            continue;
        }

        let gap_offset = offset;
        first_gap_offset.get_or_insert(gap_offset);
        if gaps == max_gaps {
            break;
        }
        let mut gap_end = gap_offset + ALIGNMENT;
        while gap_end < limit && term.get_i32_volatile(gap_end as usize) == 0 {
            gap_end += ALIGNMENT;
        }
        let gap_end = gap_end.min(limit);
        on_gap(Gap {
            term_id,
            term_offset: gap_offset,
            length: gap_end - gap_offset,
        });
        gaps += 1;
        offset = gap_end;
        if gap_end < limit && !is_frame_header_at(term, gap_end) {
            // Payload of a frame still being inserted: no boundary to walk on from.
            break;
        }
    }

    first_gap_offset.unwrap_or(offset)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sulis_protocol::frame::{pack_header_word, SESSION_ID_FIELD_OFFSET, UNFRAGMENTED};

    /// A zeroed, 8-byte aligned term for tests.
    pub(crate) struct TestTerm {
        _memory: Vec<u64>,
        pub(crate) buffer: AtomicBuffer,
    }

    impl TestTerm {
        pub(crate) fn new(term_length: usize) -> Self {
            let mut memory = vec![0u64; term_length / 8];
            // SAFETY: the Vec lives as long as the TestTerm, and is never resized.
            let buffer = unsafe { AtomicBuffer::new(memory.as_mut_ptr().cast(), term_length) };
            TestTerm {
                _memory: memory,
                buffer,
            }
        }

        /// Inserts a DATA frame the way the receiver does: payload, then the
        /// header words, then a release of the first 8 bytes.
        pub(crate) fn insert(&self, offset: i32, frame_length: i32, term_id: i32) {
            let at = offset as usize;
            let payload = frame_length as usize - 32;
            self.buffer.set_memory(at + 32, payload, 0xAB);
            self.buffer.put_i64(at + 24, 0);
            self.buffer.put_i32(at + 16, 1001);
            self.buffer.put_i32(at + 20, term_id);
            self.buffer.put_i32(at + TERM_OFFSET_FIELD_OFFSET, offset);
            self.buffer.put_i32(at + SESSION_ID_FIELD_OFFSET, 77);
            self.buffer.put_i64_ordered(
                at,
                pack_header_word(frame_length, UNFRAGMENTED, HDR_TYPE_DATA),
            );
        }

        /// Inserts back-to-back frames of `frame_length` over `[from, to)`.
        pub(crate) fn insert_run(&self, from: i32, to: i32, frame_length: i32, term_id: i32) {
            let step = align_frame(frame_length as usize) as i32;
            let mut offset = from;
            while offset < to {
                self.insert(offset, frame_length, term_id);
                offset += step;
            }
        }
    }

    const TERM_LENGTH: usize = 64 * 1024;
    const TERM_ID: i32 = 5;

    fn gaps_in(term: &TestTerm, from: i32, limit: i32, max_gaps: usize) -> (i32, Vec<Gap>) {
        let mut gaps = Vec::new();
        let rebuild = scan_for_gaps(&term.buffer, TERM_ID, from, limit, max_gaps, |g| {
            gaps.push(g)
        });
        (rebuild, gaps)
    }

    fn gap(term_offset: i32, length: i32) -> Gap {
        Gap {
            term_id: TERM_ID,
            term_offset,
            length,
        }
    }

    #[test]
    fn should_find_no_gap_in_contiguous_frames() {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert_run(0, 4096, 128, TERM_ID);
        assert_eq!(gaps_in(&term, 0, 4096, 16), (4096, vec![]));
        assert_eq!(gaps_in(&term, 1024, 4096, 16), (4096, vec![]));
    }

    #[test]
    fn should_find_a_gap_at_the_term_start() {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert(256, 64, TERM_ID);
        assert_eq!(gaps_in(&term, 0, 320, 16), (0, vec![gap(0, 256)]));
    }

    #[test]
    fn should_run_a_gap_to_the_term_end_when_the_limit_is_the_term_end() {
        let term = TestTerm::new(TERM_LENGTH);
        let last = TERM_LENGTH as i32 - 1024;
        term.insert_run(0, last, 1024, TERM_ID);
        let (rebuild, gaps) = gaps_in(&term, 0, TERM_LENGTH as i32, 16);
        assert_eq!(rebuild, last);
        assert_eq!(gaps, vec![gap(last, 1024)]);
    }

    #[test]
    fn should_step_over_frames_whose_length_is_not_a_multiple_of_32() {
        let term = TestTerm::new(TERM_LENGTH);
        // 33 → 64 bytes, 97 → 128, 63 → 64.
        term.insert(0, 33, TERM_ID);
        term.insert(64, 97, TERM_ID);
        term.insert(192, 63, TERM_ID);
        // gap [256, 320), then a 45-byte frame.
        term.insert(320, 45, TERM_ID);
        assert_eq!(gaps_in(&term, 0, 384, 16), (256, vec![gap(256, 64)]));
    }

    #[test]
    fn should_report_several_gaps_in_order_up_to_max_gaps() {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert(0, 1024, TERM_ID);
        term.insert(2048, 1024, TERM_ID);
        term.insert(4096, 1024, TERM_ID);
        term.insert(8192, 1024, TERM_ID);
        let all = vec![gap(1024, 1024), gap(3072, 1024), gap(5120, 3072)];
        assert_eq!(gaps_in(&term, 0, 9216, 16), (1024, all.clone()));
        assert_eq!(gaps_in(&term, 0, 9216, 2), (1024, all[..2].to_vec()));
        assert_eq!(gaps_in(&term, 0, 9216, 1), (1024, all[..1].to_vec()));
        assert_eq!(gaps_in(&term, 0, 9216, 0), (1024, vec![]));
    }

    #[test]
    fn should_stop_at_a_gap_end_that_is_not_a_frame_header() {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert(0, 64, TERM_ID);
        // A frame at 256 whose payload is in but whose header is not yet.
        term.buffer.set_memory(256 + 32, 224, 0xCD);
        // A later, complete frame and another gap that the scan cannot reach.
        term.insert(512, 64, TERM_ID);
        term.insert(1024, 64, TERM_ID);
        let (rebuild, gaps) = gaps_in(&term, 0, 1088, 16);
        assert_eq!(rebuild, 64);
        assert_eq!(gaps, vec![gap(64, 224)]);
    }

    #[test]
    fn should_recognise_well_formed_frame_headers_only() {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert(64, 100, TERM_ID);
        assert!(is_frame_header_at(&term.buffer, 64));
        assert!(!is_frame_header_at(&term.buffer, 0));
        assert!(!is_frame_header_at(&term.buffer, 96)); // payload
        term.buffer.put_i32(256, 32);
        assert!(!is_frame_header_at(&term.buffer, 256)); // wrong term offset field
        assert!(!is_frame_header_at(&term.buffer, TERM_LENGTH as i32));
    }

    #[test]
    fn should_not_walk_past_the_term_on_a_corrupt_length() {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert(0, 64, TERM_ID);
        term.buffer.put_i32_ordered(64, i32::MAX);
        let (rebuild, gaps) = gaps_in(&term, 0, TERM_LENGTH as i32, 16);
        assert_eq!(rebuild, 64);
        assert!(gaps.is_empty());
    }
}
