//! Reading committed frames from a term.

use crate::AtomicBuffer;
use sulis_protocol::frame::*;

/// Reads up to `fragments_limit` committed frames starting at `offset`.
///
/// `handler(frame_offset, frame_length)` is called for each DATA frame; PAD
/// frames are consumed silently. Stops at the first frame whose length is not
/// yet positive (still being written, or not written). Returns
/// `(fragments delivered, offset after the last consumed frame)`.
#[inline]
pub fn read<F: FnMut(usize, usize)>(
    term: &AtomicBuffer,
    mut offset: usize,
    fragments_limit: usize,
    mut handler: F,
) -> (usize, usize) {
    let capacity = term.capacity();
    let mut fragments = 0;
    while fragments < fragments_limit && offset < capacity {
        let frame_length = term.get_i32_volatile(offset);
        if frame_length <= 0 {
            break;
        }
        let frame_offset = offset;
        offset += align_frame(frame_length as usize);
        if term.get_u16(frame_offset + TYPE_FIELD_OFFSET) != HDR_TYPE_PAD {
            fragments += 1;
            handler(frame_offset, frame_length as usize);
        }
    }
    (fragments, offset.min(capacity))
}

/// True if the frame at `offset` is padding.
#[inline]
pub fn is_padding(term: &AtomicBuffer, offset: usize) -> bool {
    term.get_u16(offset + TYPE_FIELD_OFFSET) == HDR_TYPE_PAD
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logbuffer::term_appender::{Append, HeaderWriter, TermAppender};
    use crate::logbuffer::tests::temp_log;

    #[test]
    fn should_read_frames_and_skip_padding() {
        let (_d, logs) = temp_log(65536, 0);
        let hw = HeaderWriter::new(&default_data_header(1, 2, 0));
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        a.append_unfragmented(&hw, b"one", None);
        let (off, _) = a.claim(&hw, 8).unwrap();
        crate::logbuffer::term_appender::abort(&logs.term(0), off);
        a.append_unfragmented(&hw, b"three", None);
        let mut seen = vec![];
        let (n, next) = read(&logs.term(0), 0, 10, |o, l| {
            seen.push(logs.term(0).slice(o + 32, l - 32).to_vec())
        });
        assert_eq!(n, 2);
        assert_eq!(next, 3 * 64);
        assert_eq!(seen, vec![b"one".to_vec(), b"three".to_vec()]);
        // limit respected
        let (n, next) = read(&logs.term(0), 0, 1, |_, _| {});
        assert_eq!((n, next), (1, 64));
        // a claimed (negative) frame stops the reader
        let (_claimed, _) = a.claim(&hw, 8).unwrap();
        let (n, next) = read(&logs.term(0), 192, 10, |_, _| {});
        assert_eq!((n, next), (0, 192));
        let _ = Append::Done(0);
    }
}
