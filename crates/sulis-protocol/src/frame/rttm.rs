//! RTT MEASUREMENT / RTTM (0x06): a timestamp echoed between receiver and
//! sender to measure round-trip time. 40 bytes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |R|                    Frame Length (40)                        |  0
//! +---------------+-+-------------+-------------------------------+
//! |   Version     |R|    Flags    |          Type (0x06)          |  4
//! +---------------+-+-------------+-------------------------------+
//! |                          Session ID                           |  8
//! +---------------------------------------------------------------+
//! |                           Stream ID                           | 12
//! +---------------------------------------------------------------+
//! |                        Echo Timestamp                         | 16
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                        Reception Delta                        | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                          Receiver ID                          | 32
//! |                                                               |
//! +---------------------------------------------------------------+
//! ```
//! Flag: R = 0x80, "reply requested" (named REPLY in Aeron's sources). The
//! initiator sends an RTTM with R set and its clock in `Echo Timestamp`; the
//! peer answers at once with R clear, the same timestamp and its processing
//! delay; `rtt = now − echo_timestamp − reception_delta`. Little-endian.
//! See docs/protocol.md §1.8.

use super::header::{
    check_control_header, get_i32, get_i64, put_header, put_i32, put_i64, FrameError,
};
use super::HDR_TYPE_RTTM;

/// Offset of `session_id`.
pub const SESSION_ID_FIELD_OFFSET: usize = 8;
/// Offset of `stream_id`.
pub const STREAM_ID_FIELD_OFFSET: usize = 12;
/// Offset of `echo_timestamp_ns`.
pub const ECHO_TIMESTAMP_FIELD_OFFSET: usize = 16;
/// Offset of `reception_delta_ns`.
pub const RECEPTION_DELTA_FIELD_OFFSET: usize = 24;
/// Offset of `receiver_id`.
pub const RECEIVER_ID_FIELD_OFFSET: usize = 32;

/// An RTT measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RttmFrame {
    /// [`Self::REPLY_FLAG`].
    pub flags: u8,
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// The initiator's clock when it sent the request, nanoseconds.
    pub echo_timestamp_ns: i64,
    /// Time between receiving the request and sending the reply, nanoseconds.
    pub reception_delta_ns: i64,
    /// Random id of the receiving endpoint.
    pub receiver_id: i64,
}

impl RttmFrame {
    /// Encoded length in bytes.
    pub const LENGTH: usize = 40;
    /// Flag: the peer should reply with an RTTM echoing the timestamp.
    pub const REPLY_FLAG: u8 = 0x80;

    /// True if [`Self::REPLY_FLAG`] is set (a reply is requested).
    pub fn is_reply_requested(&self) -> bool {
        self.flags & Self::REPLY_FLAG != 0
    }

    /// Writes the 40-byte frame into the start of `buf`; returns 40.
    ///
    /// # Panics
    /// If `buf` is shorter than 40 bytes.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        put_header(buf, Self::LENGTH, self.flags, HDR_TYPE_RTTM);
        put_i32(buf, SESSION_ID_FIELD_OFFSET, self.session_id);
        put_i32(buf, STREAM_ID_FIELD_OFFSET, self.stream_id);
        put_i64(buf, ECHO_TIMESTAMP_FIELD_OFFSET, self.echo_timestamp_ns);
        put_i64(buf, RECEPTION_DELTA_FIELD_OFFSET, self.reception_delta_ns);
        put_i64(buf, RECEIVER_ID_FIELD_OFFSET, self.receiver_id);
        Self::LENGTH
    }

    /// The encoded 40 bytes.
    pub fn to_bytes(&self) -> [u8; Self::LENGTH] {
        let mut b = [0u8; Self::LENGTH];
        self.encode(&mut b);
        b
    }

    /// Decodes and checks an RTTM at the start of `buf`.
    ///
    /// Checks version 0, type, `frame_length` = 40 within `buf`, and
    /// `reception_delta_ns` ≥ 0 (both Aeron drivers send 0).
    pub fn decode(buf: &[u8]) -> Result<Self, FrameError> {
        let header = check_control_header(buf, HDR_TYPE_RTTM, Self::LENGTH, Self::LENGTH)?;
        let frame = RttmFrame {
            flags: header.flags,
            session_id: get_i32(buf, SESSION_ID_FIELD_OFFSET),
            stream_id: get_i32(buf, STREAM_ID_FIELD_OFFSET),
            echo_timestamp_ns: get_i64(buf, ECHO_TIMESTAMP_FIELD_OFFSET),
            reception_delta_ns: get_i64(buf, RECEPTION_DELTA_FIELD_OFFSET),
            receiver_id: get_i64(buf, RECEIVER_ID_FIELD_OFFSET),
        };
        if frame.reception_delta_ns < 0 {
            return Err(FrameError::new(
                Some(HDR_TYPE_RTTM),
                "reception_delta_ns",
                frame.reception_delta_ns,
                "negative",
            ));
        }
        Ok(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::test_util::{random_rttm, Corruption, XorShift};

    #[test]
    fn should_round_trip_random_rttms() {
        let mut rng = XorShift::new(11);
        for _ in 0..10_000 {
            let f = random_rttm(&mut rng);
            let mut buf = [0u8; 40];
            assert_eq!(f.encode(&mut buf), 40);
            assert_eq!(RttmFrame::decode(&buf).unwrap(), f);
        }
    }

    #[test]
    fn should_lay_out_rttm_as_in_spec() {
        let f = RttmFrame {
            flags: RttmFrame::REPLY_FLAG,
            session_id: 2,
            stream_id: 3,
            echo_timestamp_ns: 0x0102_0304_0506_0708,
            reception_delta_ns: 0,
            receiver_id: -1,
        };
        let b = f.to_bytes();
        assert_eq!(&b[..8], &[40, 0, 0, 0, 0, 0x80, 0x06, 0x00]);
        assert_eq!(&b[16..24], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&b[24..32], &[0; 8]);
        assert_eq!(&b[32..40], &[0xFF; 8]);
        let d = RttmFrame::decode(&b).unwrap();
        assert!(d.is_reply_requested());
        assert_eq!(d, f);
    }

    #[test]
    fn should_reject_each_malformed_field() {
        let good = random_rttm(&mut XorShift::new(12));
        let cases: Vec<Corruption> = vec![
            ("version", Box::new(|b: &mut [u8]| b[4] = 9)),
            ("type", Box::new(|b: &mut [u8]| b[6] = 0x05)),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 36))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 44))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, -1))),
            (
                "reception_delta_ns",
                Box::new(|b: &mut [u8]| put_i64(b, 24, -1)),
            ),
        ];
        for (field, corrupt) in cases {
            let mut buf = good.to_bytes();
            corrupt(&mut buf);
            assert_eq!(RttmFrame::decode(&buf).unwrap_err().field, field);
        }
    }

    #[test]
    fn should_reject_every_truncation() {
        let buf = random_rttm(&mut XorShift::new(13)).to_bytes();
        for cut in 0..40 {
            let e = RttmFrame::decode(&buf[..cut]).unwrap_err();
            assert!(matches!(e.field, "datagram_length" | "frame_length"), "{e}");
        }
    }
}
