//! Sender side: how much of a term is ready to go on the wire.
//!
//! The sender sends committed frames as they lie in the term, several per
//! datagram up to the MTU. A PAD frame ends a batch: only its 32-byte header
//! is sent, and the sender position jumps over the whole padded region.

use crate::AtomicBuffer;
use sulis_protocol::frame::{align_frame, DATA_HEADER_LENGTH, HDR_TYPE_PAD, TYPE_FIELD_OFFSET};

/// Result of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Available {
    /// Bytes to send, starting at the scanned offset (whole aligned frames).
    pub send_length: usize,
    /// Bytes to skip after them without sending (the body of a PAD frame).
    pub padding: usize,
}

/// Scans committed frames from `offset`, at most `max_length` bytes to send.
pub fn scan_for_availability(term: &AtomicBuffer, offset: usize, max_length: usize) -> Available {
    let capacity = term.capacity();
    let mut send_length = 0;
    let mut padding = 0;
    let mut at = offset;
    while at < capacity {
        let frame_length = term.get_i32_volatile(at);
        if frame_length <= 0 {
            break;
        }
        let mut aligned = align_frame(frame_length as usize);
        let is_pad = term.get_u16(at + TYPE_FIELD_OFFSET) == HDR_TYPE_PAD;
        let mut pad_body = 0;
        if is_pad {
            pad_body = aligned - DATA_HEADER_LENGTH;
            aligned = DATA_HEADER_LENGTH;
        }
        if send_length + aligned > max_length {
            break;
        }
        send_length += aligned;
        at += aligned;
        if is_pad {
            padding = pad_body;
            break;
        }
    }
    Available {
        send_length,
        padding,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logbuffer::term_appender::{write_padding, HeaderWriter, TermAppender};
    use crate::logbuffer::tests::temp_log;
    use sulis_protocol::frame::default_data_header;

    #[test]
    fn should_batch_whole_frames_up_to_the_limit() {
        let (_d, logs) = temp_log(65536, 0);
        let hw = HeaderWriter::new(&default_data_header(1, 2, 0));
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        for _ in 0..10 {
            a.append_unfragmented(&hw, &[7u8; 100], None); // 132 → 160 aligned
        }
        let r = scan_for_availability(&logs.term(0), 0, 1408);
        assert_eq!(
            r,
            Available {
                send_length: 8 * 160,
                padding: 0
            }
        );
        let r = scan_for_availability(&logs.term(0), 8 * 160, 1408);
        assert_eq!(
            r,
            Available {
                send_length: 2 * 160,
                padding: 0
            }
        );
        assert_eq!(
            scan_for_availability(&logs.term(0), 10 * 160, 1408).send_length,
            0
        );
    }

    #[test]
    fn should_send_only_the_header_of_padding_and_stop() {
        let (_d, logs) = temp_log(65536, 0);
        let hw = HeaderWriter::new(&default_data_header(1, 2, 0));
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        a.append_unfragmented(&hw, &[1u8; 32], None);
        write_padding(&logs.term(0), &hw, 64, 65536 - 64, 0);
        let r = scan_for_availability(&logs.term(0), 0, 1408);
        assert_eq!(
            r,
            Available {
                send_length: 64 + 32,
                padding: 65536 - 64 - 32
            }
        );
    }

    #[test]
    fn should_stop_at_an_uncommitted_frame() {
        let (_d, logs) = temp_log(65536, 0);
        let hw = HeaderWriter::new(&default_data_header(1, 2, 0));
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        a.append_unfragmented(&hw, b"x", None);
        let _claimed = a.claim(&hw, 10).unwrap();
        a.append_unfragmented(&hw, b"y", None);
        assert_eq!(
            scan_for_availability(&logs.term(0), 0, 1408).send_length,
            64
        );
    }
}
