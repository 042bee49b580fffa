//! RSP_SETUP (0x0B): on a response channel, the request-side receiver tells
//! the requester which session id the responder's publication uses. 20 bytes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |R|                    Frame Length (20)                        |  0
//! +---------------+---------------+-------------------------------+
//! |   Version     |     Flags     |          Type (0x0B)          |  4
//! +---------------+---------------+-------------------------------+
//! |                          Session ID                           |  8
//! +---------------------------------------------------------------+
//! |                           Stream ID                           | 12
//! +---------------------------------------------------------------+
//! |                      Response Session ID                      | 16
//! +---------------------------------------------------------------+
//! ```
//! All fields i32, little-endian; no flags are defined.
//! See docs/protocol.md §1.11.

use super::header::{check_control_header, get_i32, put_header, put_i32, FrameError};
use super::HDR_TYPE_RSP_SETUP;

/// Offset of `session_id`.
pub const SESSION_ID_FIELD_OFFSET: usize = 8;
/// Offset of `stream_id`.
pub const STREAM_ID_FIELD_OFFSET: usize = 12;
/// Offset of `response_session_id`.
pub const RESPONSE_SESSION_ID_FIELD_OFFSET: usize = 16;

/// A response-setup frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RspSetupFrame {
    /// Session of the request stream.
    pub session_id: i32,
    /// Stream id of the request stream.
    pub stream_id: i32,
    /// Session id of the responder's publication.
    pub response_session_id: i32,
}

impl RspSetupFrame {
    /// Encoded length in bytes.
    pub const LENGTH: usize = 20;

    /// Writes the 20-byte frame into the start of `buf`; returns 20.
    ///
    /// # Panics
    /// If `buf` is shorter than 20 bytes.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        put_header(buf, Self::LENGTH, 0, HDR_TYPE_RSP_SETUP);
        put_i32(buf, SESSION_ID_FIELD_OFFSET, self.session_id);
        put_i32(buf, STREAM_ID_FIELD_OFFSET, self.stream_id);
        put_i32(
            buf,
            RESPONSE_SESSION_ID_FIELD_OFFSET,
            self.response_session_id,
        );
        Self::LENGTH
    }

    /// The encoded 20 bytes.
    pub fn to_bytes(&self) -> [u8; Self::LENGTH] {
        let mut b = [0u8; Self::LENGTH];
        self.encode(&mut b);
        b
    }

    /// Decodes an RSP_SETUP at the start of `buf`: version 0, type,
    /// `frame_length` = 20 within `buf`. Every id value is valid; flags are
    /// ignored.
    pub fn decode(buf: &[u8]) -> Result<Self, FrameError> {
        check_control_header(buf, HDR_TYPE_RSP_SETUP, Self::LENGTH, Self::LENGTH)?;
        Ok(RspSetupFrame {
            session_id: get_i32(buf, SESSION_ID_FIELD_OFFSET),
            stream_id: get_i32(buf, STREAM_ID_FIELD_OFFSET),
            response_session_id: get_i32(buf, RESPONSE_SESSION_ID_FIELD_OFFSET),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::test_util::{random_rsp_setup, Corruption, XorShift};

    #[test]
    fn should_round_trip_random_rsp_setups() {
        let mut rng = XorShift::new(16);
        for _ in 0..10_000 {
            let f = random_rsp_setup(&mut rng);
            assert_eq!(RspSetupFrame::decode(&f.to_bytes()).unwrap(), f);
        }
    }

    #[test]
    fn should_lay_out_rsp_setup_as_in_spec() {
        let f = RspSetupFrame {
            session_id: 1,
            stream_id: -2,
            response_session_id: 0x0304,
        };
        #[rustfmt::skip]
        let expected: [u8; 20] = [
            20, 0, 0, 0,  0, 0, 0x0B, 0x00,
            1, 0, 0, 0,
            0xFE, 0xFF, 0xFF, 0xFF,
            0x04, 0x03, 0, 0,
        ];
        assert_eq!(f.to_bytes(), expected);
        assert_eq!(RspSetupFrame::decode(&expected).unwrap(), f);
    }

    #[test]
    fn should_reject_each_malformed_field() {
        let good = RspSetupFrame {
            session_id: 1,
            stream_id: 2,
            response_session_id: 3,
        };
        let cases: Vec<Corruption> = vec![
            ("version", Box::new(|b: &mut [u8]| b[4] = 1)),
            ("type", Box::new(|b: &mut [u8]| b[6] = 0x0A)),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 16))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 24))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, -20))),
        ];
        for (field, corrupt) in cases {
            let mut buf = good.to_bytes();
            corrupt(&mut buf);
            assert_eq!(RspSetupFrame::decode(&buf).unwrap_err().field, field);
        }
    }

    #[test]
    fn should_reject_every_truncation() {
        let buf = random_rsp_setup(&mut XorShift::new(17)).to_bytes();
        for cut in 0..20 {
            let e = RspSetupFrame::decode(&buf[..cut]).unwrap_err();
            assert!(matches!(e.field, "datagram_length" | "frame_length"), "{e}");
        }
    }
}
