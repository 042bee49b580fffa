//! NAK (0x02): a receiver asks for a gap in a term to be retransmitted.
//! 28 bytes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |R|                    Frame Length (28)                        |  0
//! +---------------+---------------+-------------------------------+
//! |   Version     |     Flags     |          Type (0x02)          |  4
//! +---------------+---------------+-------------------------------+
//! |                          Session ID                           |  8
//! +---------------------------------------------------------------+
//! |                           Stream ID                           | 12
//! +---------------------------------------------------------------+
//! |                            Term ID                            | 16
//! +---------------------------------------------------------------+
//! |                          Term Offset                          | 20
//! +---------------------------------------------------------------+
//! |                            Length                             | 24
//! +---------------------------------------------------------------+
//! ```
//! All fields i32, little-endian; no flags are defined.
//! See docs/protocol.md §1.7.

use super::header::{
    check_control_header, check_term_offset_in_term, check_term_offset_shape, get_i32, put_header,
    put_i32, FrameError,
};
use super::HDR_TYPE_NAK;

/// Offset of `session_id`.
pub const SESSION_ID_FIELD_OFFSET: usize = 8;
/// Offset of `stream_id`.
pub const STREAM_ID_FIELD_OFFSET: usize = 12;
/// Offset of `term_id`.
pub const TERM_ID_FIELD_OFFSET: usize = 16;
/// Offset of `term_offset`.
pub const TERM_OFFSET_FIELD_OFFSET: usize = 20;
/// Offset of `length`.
pub const LENGTH_FIELD_OFFSET: usize = 24;

/// A NAK: retransmit `length` bytes of term `term_id` from `term_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NakFrame {
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// Term holding the gap.
    pub term_id: i32,
    /// Start of the gap within the term (32-aligned).
    pub term_offset: i32,
    /// Length of the gap in bytes.
    pub length: i32,
}

impl NakFrame {
    /// Encoded length in bytes.
    pub const LENGTH: usize = 28;

    /// Writes the 28-byte frame into the start of `buf`; returns 28.
    ///
    /// # Panics
    /// If `buf` is shorter than 28 bytes.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        put_header(buf, Self::LENGTH, 0, HDR_TYPE_NAK);
        put_i32(buf, SESSION_ID_FIELD_OFFSET, self.session_id);
        put_i32(buf, STREAM_ID_FIELD_OFFSET, self.stream_id);
        put_i32(buf, TERM_ID_FIELD_OFFSET, self.term_id);
        put_i32(buf, TERM_OFFSET_FIELD_OFFSET, self.term_offset);
        put_i32(buf, LENGTH_FIELD_OFFSET, self.length);
        Self::LENGTH
    }

    /// The encoded 28 bytes.
    pub fn to_bytes(&self) -> [u8; Self::LENGTH] {
        let mut b = [0u8; Self::LENGTH];
        self.encode(&mut b);
        b
    }

    /// Decodes and checks a NAK at the start of `buf`.
    ///
    /// Checks version 0, type, `frame_length` = 28 within `buf`;
    /// `term_offset` ≥ 0 and 32-aligned; `length` ≥ 0. The bounds that need
    /// the term length are in [`validate_against`](Self::validate_against).
    /// Flags are ignored.
    pub fn decode(buf: &[u8]) -> Result<Self, FrameError> {
        check_control_header(buf, HDR_TYPE_NAK, Self::LENGTH, Self::LENGTH)?;
        let frame = NakFrame {
            session_id: get_i32(buf, SESSION_ID_FIELD_OFFSET),
            stream_id: get_i32(buf, STREAM_ID_FIELD_OFFSET),
            term_id: get_i32(buf, TERM_ID_FIELD_OFFSET),
            term_offset: get_i32(buf, TERM_OFFSET_FIELD_OFFSET),
            length: get_i32(buf, LENGTH_FIELD_OFFSET),
        };
        check_term_offset_shape(HDR_TYPE_NAK, "term_offset", frame.term_offset)?;
        if frame.length < 0 {
            return Err(FrameError::new(
                Some(HDR_TYPE_NAK),
                "length",
                frame.length,
                "negative",
            ));
        }
        Ok(frame)
    }

    /// The sender's checks against its term length: `term_offset` in
    /// `[0, term_length)` and 32-aligned, `length` ≥ 0 and
    /// `term_offset + length` ≤ `term_length`.
    pub fn validate_against(&self, term_length: usize) -> Result<(), FrameError> {
        check_term_offset_shape(HDR_TYPE_NAK, "term_offset", self.term_offset)?;
        check_term_offset_in_term(HDR_TYPE_NAK, "term_offset", self.term_offset, term_length)?;
        if self.length < 0 || self.term_offset as usize + self.length as usize > term_length {
            return Err(FrameError::new(
                Some(HDR_TYPE_NAK),
                "length",
                self.length,
                format_args!(
                    "gap from term_offset {} runs outside the {term_length}-byte term",
                    self.term_offset
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::test_util::{random_nak, Corruption, XorShift};

    const TERM: usize = 64 * 1024;

    #[test]
    fn should_round_trip_random_naks() {
        let mut rng = XorShift::new(9);
        for _ in 0..10_000 {
            let f = random_nak(&mut rng);
            let mut buf = [0u8; 40];
            assert_eq!(f.encode(&mut buf), 28);
            assert_eq!(NakFrame::decode(&buf[..28]).unwrap(), f);
            assert_eq!(NakFrame::decode(&buf).unwrap(), f);
        }
    }

    #[test]
    fn should_lay_out_nak_as_in_spec() {
        let f = NakFrame {
            session_id: -1,
            stream_id: 0x1001,
            term_id: 0x7FFF_FFFF,
            term_offset: 0x0001_0020,
            length: 1408,
        };
        #[rustfmt::skip]
        let expected: [u8; 28] = [
            28, 0, 0, 0,  0, 0, 0x02, 0x00, // frame_length, version, flags, type
            0xFF, 0xFF, 0xFF, 0xFF,         // 8  session_id = -1
            0x01, 0x10, 0x00, 0x00,         // 12 stream_id
            0xFF, 0xFF, 0xFF, 0x7F,         // 16 term_id
            0x20, 0x00, 0x01, 0x00,         // 20 term_offset
            0x80, 0x05, 0x00, 0x00,         // 24 length = 1408
        ];
        assert_eq!(f.to_bytes(), expected);
        assert_eq!(NakFrame::decode(&expected).unwrap(), f);
    }

    #[test]
    fn should_reject_each_malformed_field() {
        let good = NakFrame {
            session_id: 1,
            stream_id: 2,
            term_id: 3,
            term_offset: 64,
            length: 100,
        };
        let cases: Vec<Corruption> = vec![
            ("version", Box::new(|b: &mut [u8]| b[4] = 1)),
            ("type", Box::new(|b: &mut [u8]| b[6] = 0x03)),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 27))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 32))),
            (
                "frame_length",
                Box::new(|b: &mut [u8]| put_i32(b, 0, i32::MIN)),
            ),
            ("term_offset", Box::new(|b: &mut [u8]| put_i32(b, 20, -64))),
            ("term_offset", Box::new(|b: &mut [u8]| put_i32(b, 20, 65))),
            ("length", Box::new(|b: &mut [u8]| put_i32(b, 24, -1))),
        ];
        for (field, corrupt) in cases {
            let mut buf = good.to_bytes();
            corrupt(&mut buf);
            let e = NakFrame::decode(&buf).unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
    }

    #[test]
    fn should_validate_against_term_length() {
        let f = NakFrame {
            session_id: 1,
            stream_id: 2,
            term_id: 3,
            term_offset: (TERM - 64) as i32,
            length: 64,
        };
        f.validate_against(TERM).unwrap();
        NakFrame { length: 0, ..f }.validate_against(TERM).unwrap();
        let e = NakFrame { length: 65, ..f }
            .validate_against(TERM)
            .unwrap_err();
        assert_eq!(e.field, "length");
        let e = NakFrame {
            length: i32::MAX,
            ..f
        }
        .validate_against(TERM)
        .unwrap_err();
        assert_eq!(e.field, "length");
        let e = NakFrame {
            term_offset: TERM as i32,
            length: 0,
            ..f
        }
        .validate_against(TERM)
        .unwrap_err();
        assert_eq!(e.field, "term_offset");
        let e = NakFrame {
            term_offset: 16,
            ..f
        }
        .validate_against(TERM)
        .unwrap_err();
        assert_eq!(e.field, "term_offset");
        let e = NakFrame { length: -1, ..f }
            .validate_against(TERM)
            .unwrap_err();
        assert_eq!(e.field, "length");
    }

    #[test]
    fn should_reject_every_truncation() {
        let buf = random_nak(&mut XorShift::new(10)).to_bytes();
        for cut in 0..28 {
            let e = NakFrame::decode(&buf[..cut]).unwrap_err();
            assert!(matches!(e.field, "datagram_length" | "frame_length"), "{e}");
        }
    }
}
