//! Gap fill for `reliable=false` images: pad over a gap instead of NAKing it.
//!
//! docs/protocol.md §3.7. An unreliable subscriber would rather skip lost data
//! than wait for it. When the loss detector reports a gap, the receiver writes
//! one PAD frame covering it; readers step over padding, so the image moves on.
//!
//! ```text
//!  before   ┌───────┬───────────────────────────┬───────┐
//!           │ frame │ 0 0 0 0 0 0 0 0 0 0 0 0 0 │ frame │
//!           └───────┴───────────────────────────┴───────┘
//!  after    ┌───────┬────────┬──────────────────┬───────┐
//!           │ frame │ PAD    │ (still zero)     │ frame │
//!           │       │ len=gap│                  │       │
//!           └───────┴────────┴──────────────────┴───────┘
//!                    32-byte header; its length covers the whole gap
//! ```
//!
//! The fill happens only if the gap is still empty: every 32-byte boundary
//! inside it must still hold a zero frame length. That check is only
//! trustworthy on the thread that inserts frames into the term (the
//! receiver): run the fill there, so no insert can land between the check and
//! the write. Header fields go in with plain stores and the frame length is
//! store-released last (in one 8-byte word with version, flags and type), so a
//! reader that sees the length sees the whole header.

use sulis_concurrent::AtomicBuffer;
use sulis_protocol::frame::{
    pack_header_word, FRAME_ALIGNMENT, HDR_TYPE_PAD, RESERVED_VALUE_FIELD_OFFSET,
    SESSION_ID_FIELD_OFFSET, STREAM_ID_FIELD_OFFSET, TERM_ID_FIELD_OFFSET,
    TERM_OFFSET_FIELD_OFFSET, UNFRAGMENTED,
};

/// Writes a PAD frame over `[term_offset, term_offset + length)` if that range
/// is still empty. Returns true if it was filled.
///
/// `term_offset` and `length` must be multiples of 32 and the range inside
/// the term; otherwise nothing is written and false is returned.
pub fn fill_gap(
    term: &AtomicBuffer,
    term_offset: i32,
    length: i32,
    term_id: i32,
    session_id: i32,
    stream_id: i32,
) -> bool {
    let alignment = FRAME_ALIGNMENT as i32;
    if term_offset < 0
        || length <= 0
        || term_offset % alignment != 0
        || length % alignment != 0
        || term_offset as usize + length as usize > term.capacity()
    {
        return false;
    }
    let start = term_offset as usize;
    let end = start + length as usize;
    let still_empty = (start..end)
        .step_by(FRAME_ALIGNMENT)
        .all(|offset| term.get_i32_volatile(offset) == 0);
    if !still_empty {
        return false;
    }

    term.put_i32(start + TERM_OFFSET_FIELD_OFFSET, term_offset);
    term.put_i32(start + SESSION_ID_FIELD_OFFSET, session_id);
    term.put_i32(start + STREAM_ID_FIELD_OFFSET, stream_id);
    term.put_i32(start + TERM_ID_FIELD_OFFSET, term_id);
    term.put_i64(start + RESERVED_VALUE_FIELD_OFFSET, 0);
    // Release: everything above is visible before the length is.
    term.put_i64_ordered(start, pack_header_word(length, UNFRAGMENTED, HDR_TYPE_PAD));
    true
}

/// Fills gaps of one unreliable image and counts the fills ("Loss gap fills").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GapFiller {
    gap_fills: u64,
}

impl GapFiller {
    /// A filler with a zero count.
    pub fn new() -> Self {
        GapFiller::default()
    }

    /// [`fill_gap`], counting successful fills.
    pub fn fill_gap(
        &mut self,
        term: &AtomicBuffer,
        term_offset: i32,
        length: i32,
        term_id: i32,
        session_id: i32,
        stream_id: i32,
    ) -> bool {
        let filled = fill_gap(term, term_offset, length, term_id, session_id, stream_id);
        if filled {
            self.gap_fills += 1;
        }
        filled
    }

    /// Gaps filled so far.
    pub fn gap_fills(&self) -> u64 {
        self.gap_fills
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::gap_scanner::tests::TestTerm;
    use crate::loss::gap_scanner::{is_frame_header_at, scan_for_gaps};
    use sulis_concurrent::logbuffer::term_reader;
    use sulis_protocol::frame::{FLAGS_FIELD_OFFSET, TYPE_FIELD_OFFSET, VERSION_FIELD_OFFSET};

    const TERM_LENGTH: usize = 64 * 1024;

    #[test]
    fn should_write_a_pad_header_over_an_empty_gap() {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert(0, 1024, 9);
        term.insert(4096, 1024, 9);
        let mut filler = GapFiller::new();
        assert!(filler.fill_gap(&term.buffer, 1024, 3072, 9, 77, 1001));
        assert_eq!(filler.gap_fills(), 1);

        let b = &term.buffer;
        assert_eq!(b.get_i32_volatile(1024), 3072);
        assert_eq!(b.get_u8(1024 + VERSION_FIELD_OFFSET), 0);
        assert_eq!(b.get_u8(1024 + FLAGS_FIELD_OFFSET), UNFRAGMENTED);
        assert_eq!(b.get_u16(1024 + TYPE_FIELD_OFFSET), HDR_TYPE_PAD);
        assert_eq!(b.get_i32(1024 + TERM_OFFSET_FIELD_OFFSET), 1024);
        assert_eq!(b.get_i32(1024 + SESSION_ID_FIELD_OFFSET), 77);
        assert_eq!(b.get_i32(1024 + STREAM_ID_FIELD_OFFSET), 1001);
        assert_eq!(b.get_i32(1024 + TERM_ID_FIELD_OFFSET), 9);
        assert!(is_frame_header_at(b, 1024));

        // No gap left, and a reader skips the padding.
        let rebuild = scan_for_gaps(b, 9, 0, 5120, 16, |g| panic!("gap {g:?}"));
        assert_eq!(rebuild, 5120);
        let mut delivered = Vec::new();
        let (fragments, offset) = term_reader::read(b, 0, 10, |o, _| delivered.push(o));
        assert_eq!((fragments, offset), (2, 5120));
        assert_eq!(delivered, vec![0, 4096]);
    }

    #[test]
    fn should_not_fill_a_gap_that_a_frame_has_landed_in() {
        let term = TestTerm::new(TERM_LENGTH);
        term.insert(2048, 1024, 9);
        let mut filler = GapFiller::new();
        assert!(!filler.fill_gap(&term.buffer, 1024, 3072, 9, 77, 1001));
        assert_eq!(filler.gap_fills(), 0);
        assert_eq!(term.buffer.get_i32_volatile(1024), 0, "nothing written");
    }

    #[test]
    fn should_reject_misaligned_or_out_of_term_ranges() {
        let term = TestTerm::new(TERM_LENGTH);
        let b = &term.buffer;
        assert!(!fill_gap(b, 16, 64, 9, 1, 1));
        assert!(!fill_gap(b, 64, 48, 9, 1, 1));
        assert!(!fill_gap(b, 64, 0, 9, 1, 1));
        assert!(!fill_gap(b, -32, 64, 9, 1, 1));
        assert!(!fill_gap(b, TERM_LENGTH as i32 - 32, 64, 9, 1, 1));
        assert!(fill_gap(b, TERM_LENGTH as i32 - 32, 32, 9, 1, 1));
    }
}
