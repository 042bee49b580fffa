//! Unblocking a log after a publisher died between claiming and committing.
//!
//! A concurrent publisher reserves space with an atomic add and only then
//! writes the frame; if its process dies in between, readers stop at the
//! uncommitted frame forever. After a timeout the driver turns the stuck
//! region into padding so consumers, and the other publishers, carry on.

use super::meta;
use super::term_appender::{write_padding, HeaderWriter};
use super::LogBuffers;
use crate::AtomicBuffer;
use sulis_protocol::frame::FRAME_ALIGNMENT;
use sulis_protocol::log_buffer_descriptor::*;

/// What an unblock attempt did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unblock {
    /// Nothing to do (no stuck frame found).
    NoAction,
    /// A stuck frame or gap was padded.
    Unblocked,
    /// The rest of the term was padded.
    UnblockedToEnd,
}

fn all_zero_back_to(term: &AtomicBuffer, from: usize, to: usize) -> bool {
    let mut off = from;
    while off > to {
        off -= FRAME_ALIGNMENT;
        if term.get_i32_volatile(off) != 0 {
            return false;
        }
    }
    true
}

/// Unblocks the frame at `blocked_offset` of one term whose tail is `tail_offset`.
pub fn unblock_term(
    term: &AtomicBuffer,
    hw: &HeaderWriter,
    blocked_offset: usize,
    tail_offset: usize,
    term_id: i32,
) -> Unblock {
    let frame_length = term.get_i32_volatile(blocked_offset);
    if frame_length < 0 {
        // Claimed but never committed: pad exactly the claimed length.
        let length = (-frame_length) as usize;
        write_padding(
            term,
            hw,
            blocked_offset,
            sulis_protocol::frame::align_frame(length),
            term_id,
        );
        return Unblock::Unblocked;
    }
    if frame_length > 0 {
        return Unblock::NoAction;
    }
    // Reserved but the header was never written: pad to the next written frame.
    let mut off = blocked_offset + FRAME_ALIGNMENT;
    while off < tail_offset {
        if term.get_i32_volatile(off) != 0 {
            if all_zero_back_to(term, off, blocked_offset) {
                write_padding(term, hw, blocked_offset, off - blocked_offset, term_id);
                return Unblock::Unblocked;
            }
            return Unblock::NoAction;
        }
        off += FRAME_ALIGNMENT;
    }
    if off >= term.capacity() && term.get_i32_volatile(blocked_offset) == 0 {
        write_padding(
            term,
            hw,
            blocked_offset,
            term.capacity() - blocked_offset,
            term_id,
        );
        return Unblock::UnblockedToEnd;
    }
    Unblock::NoAction
}

/// Unblocks a log whose consumers are stuck at `blocked_position`.
/// Returns true if something was unblocked.
pub fn unblock_log(logs: &LogBuffers, blocked_position: i64) -> bool {
    let term_length = logs.term_length();
    let bits = position_bits_to_shift(term_length);
    let m = logs.meta();
    let initial_term_id = logs.initial_term_id();
    let index = index_by_position(blocked_position, bits);
    let blocked_term_count = (blocked_position >> bits) as i32;
    let blocked_offset = (blocked_position & (term_length as i64 - 1)) as usize;
    let active_count = meta::active_term_count(&m);
    let hw = HeaderWriter::new(&logs.default_header());

    if active_count == blocked_term_count.wrapping_sub(1) && blocked_offset == 0 {
        // The writer that tripped the previous term died before rotating.
        let raw = meta::raw_tail_volatile(&m, index_by_term_count(active_count as i64));
        return meta::rotate_log(&m, active_count, term_id(raw));
    }
    let raw = meta::raw_tail_volatile(&m, index);
    let tid = term_id(raw);
    let expected_tid = blocked_term_count.wrapping_add(initial_term_id);
    if tid != expected_tid {
        return false;
    }
    let tail = term_offset(raw, term_length as i64) as usize;
    match unblock_term(&logs.term(index), &hw, blocked_offset, tail, tid) {
        Unblock::NoAction => false,
        Unblock::Unblocked => true,
        Unblock::UnblockedToEnd => {
            meta::rotate_log(&m, blocked_term_count, tid);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logbuffer::term_appender::{Append, TermAppender};
    use crate::logbuffer::term_reader;
    use crate::logbuffer::tests::temp_log;
    use sulis_protocol::frame::default_data_header;

    #[test]
    fn should_pad_a_claimed_but_uncommitted_frame() {
        let (_d, logs) = temp_log(65536, 0);
        let hw = HeaderWriter::new(&default_data_header(1, 2, 0));
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        let _abandoned = a.claim(&hw, 100).unwrap();
        assert!(matches!(
            a.append_unfragmented(&hw, b"after", None),
            Append::Done(_)
        ));
        assert_eq!(term_reader::read(&logs.term(0), 0, 10, |_, _| {}).0, 0);
        assert!(unblock_log(&logs, 0));
        let mut got = vec![];
        term_reader::read(&logs.term(0), 0, 10, |o, l| {
            got.push(logs.term(0).slice(o + 32, l - 32).to_vec())
        });
        assert_eq!(got, vec![b"after".to_vec()]);
    }

    #[test]
    fn should_pad_a_reserved_but_unwritten_gap() {
        let (_d, logs) = temp_log(65536, 0);
        let hw = HeaderWriter::new(&default_data_header(1, 2, 0));
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        // a writer reserved 96 bytes and died before writing anything
        logs.meta().get_and_add_i64(TERM_TAIL_COUNTERS_OFFSET, 96);
        a.append_unfragmented(&hw, b"later", None);
        assert!(unblock_log(&logs, 0));
        let (n, _) = term_reader::read(&logs.term(0), 0, 10, |_, _| {});
        assert_eq!(n, 1);
    }

    #[test]
    fn should_rotate_when_the_tripping_writer_died() {
        let (_d, logs) = temp_log(65536, 0);
        // tail advanced past the end but nobody padded or rotated
        logs.meta()
            .get_and_add_i64(TERM_TAIL_COUNTERS_OFFSET, 65536 + 64);
        assert!(unblock_log(&logs, 0), "pads the whole term");
        assert_eq!(meta::active_term_count(&logs.meta()), 1);
    }
}
