//! Receiver side: writing received frames into an image's term.
//!
//! A datagram's frames are copied in at their term offset only if that slot
//! is still empty (duplicates are ignored). Everything after the first 8
//! bytes is written first, then the first 8 bytes (frame length, version,
//! flags, type) with release ordering, so a reader that sees the length sees
//! the whole datagram's frames.

use crate::AtomicBuffer;
use sulis_protocol::frame::DATA_HEADER_LENGTH;

/// Inserts `frames` (one or more whole frames as received) at `term_offset`.
/// Returns false, writing nothing, if the slot was already filled.
pub fn insert(term: &AtomicBuffer, term_offset: usize, frames: &[u8]) -> bool {
    debug_assert!(frames.len() >= DATA_HEADER_LENGTH);
    if term.get_i32_volatile(term_offset) != 0 {
        return false;
    }
    term.put_bytes(term_offset + 8, &frames[8..]);
    let first = i64::from_le_bytes(frames[..8].try_into().unwrap());
    term.put_i64_ordered(term_offset, first);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logbuffer::term_reader;
    use crate::logbuffer::tests::temp_log;
    use sulis_protocol::frame::{align_frame, default_data_header};

    fn frame(term_offset: i32, payload: &[u8]) -> Vec<u8> {
        let mut f = default_data_header(5, 6, 0).to_vec();
        f[0..4].copy_from_slice(&((32 + payload.len()) as i32).to_le_bytes());
        f[8..12].copy_from_slice(&term_offset.to_le_bytes());
        f.extend_from_slice(payload);
        f.resize(align_frame(f.len()), 0);
        f
    }

    #[test]
    fn should_insert_once_and_ignore_duplicates() {
        let (_d, logs) = temp_log(65536, 0);
        let t = logs.term(0);
        let mut datagram = frame(0, b"first");
        datagram.extend(frame(64, b"second"));
        assert!(insert(&t, 0, &datagram));
        assert!(
            !insert(&t, 0, &frame(0, b"other")),
            "duplicate must be ignored"
        );
        let mut got = vec![];
        let (n, next) =
            term_reader::read(&t, 0, 10, |o, l| got.push(t.slice(o + 32, l - 32).to_vec()));
        assert_eq!((n, next), (2, 128));
        assert_eq!(got, vec![b"first".to_vec(), b"second".to_vec()]);
    }

    #[test]
    fn should_fill_a_gap_out_of_order() {
        let (_d, logs) = temp_log(65536, 0);
        let t = logs.term(0);
        assert!(insert(&t, 64, &frame(64, b"later")));
        assert_eq!(
            term_reader::read(&t, 0, 10, |_, _| {}).0,
            0,
            "gap at 0 blocks the reader"
        );
        assert!(insert(&t, 0, &frame(0, b"early")));
        assert_eq!(term_reader::read(&t, 0, 10, |_, _| {}).0, 2);
    }
}
