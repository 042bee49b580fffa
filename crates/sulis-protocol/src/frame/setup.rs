//! SETUP (0x05): a sender announces a publication's term geometry so a
//! receiver can create the image. 40 bytes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |R|                    Frame Length (40)                        |  0
//! +---------------+-+-+-----------+-------------------------------+
//! |   Version     |S|G|   Flags   |          Type (0x05)          |  4
//! +---------------+-+-+-----------+-------------------------------+
//! |                          Term Offset                          |  8
//! +---------------------------------------------------------------+
//! |                          Session ID                           | 12
//! +---------------------------------------------------------------+
//! |                           Stream ID                           | 16
//! +---------------------------------------------------------------+
//! |                        Initial Term ID                        | 20
//! +---------------------------------------------------------------+
//! |                        Active Term ID                         | 24
//! +---------------------------------------------------------------+
//! |                          Term Length                          | 28
//! +---------------------------------------------------------------+
//! |                          MTU Length                           | 32
//! +---------------------------------------------------------------+
//! |                              TTL                              | 36
//! +---------------------------------------------------------------+
//! ```
//! Flags: S = SEND_RESPONSE_SETUP (0x80), G = GROUP (0x40). All fields i32,
//! little-endian. See docs/protocol.md §1.5.

use super::header::{
    check_control_header, check_term_offset_in_term, check_term_offset_shape, get_i32, put_header,
    put_i32, FrameError,
};
use super::{FRAME_ALIGNMENT, HDR_TYPE_SETUP};
use crate::log_buffer_descriptor::{TERM_MAX_LENGTH, TERM_MIN_LENGTH};

/// Offset of `term_offset`.
pub const TERM_OFFSET_FIELD_OFFSET: usize = 8;
/// Offset of `session_id`.
pub const SESSION_ID_FIELD_OFFSET: usize = 12;
/// Offset of `stream_id`.
pub const STREAM_ID_FIELD_OFFSET: usize = 16;
/// Offset of `initial_term_id`.
pub const INITIAL_TERM_ID_FIELD_OFFSET: usize = 20;
/// Offset of `active_term_id`.
pub const ACTIVE_TERM_ID_FIELD_OFFSET: usize = 24;
/// Offset of `term_length`.
pub const TERM_LENGTH_FIELD_OFFSET: usize = 28;
/// Offset of `mtu`.
pub const MTU_FIELD_OFFSET: usize = 32;
/// Offset of `ttl`.
pub const TTL_FIELD_OFFSET: usize = 36;

/// Largest UDP payload an MTU may describe.
pub const MAX_UDP_PAYLOAD_LENGTH: usize = 65504;
/// Largest multicast TTL.
pub const MAX_TTL: i32 = 255;

/// A SETUP frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SetupFrame {
    /// [`Self::SEND_RESPONSE_SETUP_FLAG`], [`Self::GROUP_FLAG`].
    pub flags: u8,
    /// Sender's current offset within the active term.
    pub term_offset: i32,
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// Term id of the publication's first term.
    pub initial_term_id: i32,
    /// Term id the sender is currently in.
    pub active_term_id: i32,
    /// Length of each term in bytes.
    pub term_length: i32,
    /// Sender MTU in bytes (largest datagram it sends).
    pub mtu: i32,
    /// Multicast TTL of the sender, 0 if unset.
    pub ttl: i32,
}

impl SetupFrame {
    /// Encoded length in bytes.
    pub const LENGTH: usize = 40;
    /// Flag: the publication is the request side of a response channel and
    /// wants an RSP_SETUP back.
    pub const SEND_RESPONSE_SETUP_FLAG: u8 = 0x80;
    /// Flag: the publication has group semantics (e.g. MDC); receivers back
    /// off NAKs as for multicast.
    pub const GROUP_FLAG: u8 = 0x40;

    /// True if [`Self::SEND_RESPONSE_SETUP_FLAG`] is set.
    pub fn is_send_response_setup(&self) -> bool {
        self.flags & Self::SEND_RESPONSE_SETUP_FLAG != 0
    }

    /// True if [`Self::GROUP_FLAG`] is set.
    pub fn is_group(&self) -> bool {
        self.flags & Self::GROUP_FLAG != 0
    }

    /// Writes the 40-byte frame into the start of `buf`; returns 40.
    ///
    /// # Panics
    /// If `buf` is shorter than 40 bytes.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        put_header(buf, Self::LENGTH, self.flags, HDR_TYPE_SETUP);
        put_i32(buf, TERM_OFFSET_FIELD_OFFSET, self.term_offset);
        put_i32(buf, SESSION_ID_FIELD_OFFSET, self.session_id);
        put_i32(buf, STREAM_ID_FIELD_OFFSET, self.stream_id);
        put_i32(buf, INITIAL_TERM_ID_FIELD_OFFSET, self.initial_term_id);
        put_i32(buf, ACTIVE_TERM_ID_FIELD_OFFSET, self.active_term_id);
        put_i32(buf, TERM_LENGTH_FIELD_OFFSET, self.term_length);
        put_i32(buf, MTU_FIELD_OFFSET, self.mtu);
        put_i32(buf, TTL_FIELD_OFFSET, self.ttl);
        Self::LENGTH
    }

    /// The encoded 40 bytes.
    pub fn to_bytes(&self) -> [u8; Self::LENGTH] {
        let mut b = [0u8; Self::LENGTH];
        self.encode(&mut b);
        b
    }

    /// Decodes and validates a SETUP frame at the start of `buf`.
    ///
    /// Checks version 0, type, `frame_length` = 40 within `buf`; `term_length`
    /// a power of two in [64k, 1g]; `mtu` a multiple of 32 in
    /// (32, 65504]; `term_offset` in `[0, term_length)` and 32-aligned;
    /// `ttl` in [0, 255].
    pub fn decode(buf: &[u8]) -> Result<Self, FrameError> {
        let header = check_control_header(buf, HDR_TYPE_SETUP, Self::LENGTH, Self::LENGTH)?;
        let frame = SetupFrame {
            flags: header.flags,
            term_offset: get_i32(buf, TERM_OFFSET_FIELD_OFFSET),
            session_id: get_i32(buf, SESSION_ID_FIELD_OFFSET),
            stream_id: get_i32(buf, STREAM_ID_FIELD_OFFSET),
            initial_term_id: get_i32(buf, INITIAL_TERM_ID_FIELD_OFFSET),
            active_term_id: get_i32(buf, ACTIVE_TERM_ID_FIELD_OFFSET),
            term_length: get_i32(buf, TERM_LENGTH_FIELD_OFFSET),
            mtu: get_i32(buf, MTU_FIELD_OFFSET),
            ttl: get_i32(buf, TTL_FIELD_OFFSET),
        };
        frame.validate()?;
        Ok(frame)
    }

    /// The field checks of [`decode`](Self::decode), for a frame built locally.
    pub fn validate(&self) -> Result<(), FrameError> {
        let ty = Some(HDR_TYPE_SETUP);
        let term_length = self.term_length;
        if term_length < 0
            || !(TERM_MIN_LENGTH..=TERM_MAX_LENGTH).contains(&(term_length as usize))
            || !(term_length as u32).is_power_of_two()
        {
            return Err(FrameError::new(
                ty,
                "term_length",
                term_length,
                "not a power of two in [64k, 1g]",
            ));
        }
        let mtu = self.mtu;
        if mtu <= FRAME_ALIGNMENT as i32
            || mtu as usize > MAX_UDP_PAYLOAD_LENGTH
            || mtu as usize & (FRAME_ALIGNMENT - 1) != 0
        {
            return Err(FrameError::new(
                ty,
                "mtu",
                mtu,
                format_args!("not a multiple of 32 in (32, {MAX_UDP_PAYLOAD_LENGTH}]"),
            ));
        }
        check_term_offset_shape(HDR_TYPE_SETUP, "term_offset", self.term_offset)?;
        check_term_offset_in_term(
            HDR_TYPE_SETUP,
            "term_offset",
            self.term_offset,
            term_length as usize,
        )?;
        if !(0..=MAX_TTL).contains(&self.ttl) {
            return Err(FrameError::new(ty, "ttl", self.ttl, "not in [0, 255]"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::test_util::{random_setup, Corruption, XorShift};

    #[test]
    fn should_round_trip_random_setups() {
        let mut rng = XorShift::new(5);
        for _ in 0..10_000 {
            let f = random_setup(&mut rng);
            let mut buf = [0u8; 64];
            assert_eq!(f.encode(&mut buf), 40);
            assert_eq!(SetupFrame::decode(&buf[..40]).unwrap(), f);
            assert_eq!(SetupFrame::decode(&buf).unwrap(), f);
            assert_eq!(f.to_bytes()[..], buf[..40]);
        }
    }

    #[test]
    fn should_lay_out_setup_as_in_spec() {
        let f = SetupFrame {
            flags: SetupFrame::SEND_RESPONSE_SETUP_FLAG | SetupFrame::GROUP_FLAG,
            term_offset: 0x0000_1000,
            session_id: -1_234_567,
            stream_id: 1001,
            initial_term_id: 0x0A0B_0C0D,
            active_term_id: 0x0A0B_0C0E,
            term_length: 0x0001_0000,
            mtu: 1408,
            ttl: 16,
        };
        #[rustfmt::skip]
        let expected: [u8; 40] = [
            40, 0, 0, 0,  0, 0xC0, 0x05, 0x00, // frame_length, version, flags, type
            0x00, 0x10, 0x00, 0x00,            // 8  term_offset
            0x79, 0x29, 0xED, 0xFF,            // 12 session_id = -1234567
            0xE9, 0x03, 0x00, 0x00,            // 16 stream_id = 1001
            0x0D, 0x0C, 0x0B, 0x0A,            // 20 initial_term_id
            0x0E, 0x0C, 0x0B, 0x0A,            // 24 active_term_id
            0x00, 0x00, 0x01, 0x00,            // 28 term_length = 64k
            0x80, 0x05, 0x00, 0x00,            // 32 mtu = 1408
            0x10, 0x00, 0x00, 0x00,            // 36 ttl = 16
        ];
        assert_eq!(f.to_bytes(), expected);
        let d = SetupFrame::decode(&expected).unwrap();
        assert!(d.is_send_response_setup() && d.is_group());
        assert_eq!(d, f);
    }

    #[test]
    fn should_reject_each_malformed_field() {
        let good = SetupFrame {
            flags: 0,
            term_offset: 4096,
            session_id: 1,
            stream_id: 2,
            initial_term_id: 3,
            active_term_id: 4,
            term_length: 1 << 16,
            mtu: 1408,
            ttl: 0,
        };
        let cases: Vec<Corruption> = vec![
            ("version", Box::new(|b: &mut [u8]| b[4] = 1)),
            ("type", Box::new(|b: &mut [u8]| b[6] = 0x03)),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 39))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 41))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, -40))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 0))),
            (
                "term_length",
                Box::new(|b: &mut [u8]| put_i32(b, 28, 100_000)),
            ),
            (
                "term_length",
                Box::new(|b: &mut [u8]| put_i32(b, 28, 32 * 1024)),
            ),
            (
                "term_length",
                Box::new(|b: &mut [u8]| put_i32(b, 28, i32::MIN)),
            ),
            ("term_length", Box::new(|b: &mut [u8]| put_i32(b, 28, 0))),
            (
                "term_length",
                Box::new(|b: &mut [u8]| put_i32(b, 28, -65536)),
            ),
            ("mtu", Box::new(|b: &mut [u8]| put_i32(b, 32, 32))),
            ("mtu", Box::new(|b: &mut [u8]| put_i32(b, 32, 1400))),
            ("mtu", Box::new(|b: &mut [u8]| put_i32(b, 32, 65536))),
            ("mtu", Box::new(|b: &mut [u8]| put_i32(b, 32, -64))),
            ("mtu", Box::new(|b: &mut [u8]| put_i32(b, 32, 0))),
            ("term_offset", Box::new(|b: &mut [u8]| put_i32(b, 8, 65536))),
            ("term_offset", Box::new(|b: &mut [u8]| put_i32(b, 8, 100))),
            ("term_offset", Box::new(|b: &mut [u8]| put_i32(b, 8, -32))),
            ("ttl", Box::new(|b: &mut [u8]| put_i32(b, 36, 256))),
            ("ttl", Box::new(|b: &mut [u8]| put_i32(b, 36, -1))),
        ];
        let mut buf = good.to_bytes();
        SetupFrame::decode(&buf).unwrap();
        for (field, corrupt) in cases {
            buf = good.to_bytes();
            corrupt(&mut buf);
            let e = SetupFrame::decode(&buf).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert_eq!(e.frame_type, Some(HDR_TYPE_SETUP));
        }
        // Edges that are valid.
        for (offset, value) in [(32, 65504), (32, 64), (28, 1 << 30), (36, 255), (8, 65504)] {
            buf = good.to_bytes();
            put_i32(&mut buf, offset, value);
            SetupFrame::decode(&buf).unwrap();
        }
    }

    #[test]
    fn should_explain_bad_term_length() {
        let mut buf = SetupFrame {
            flags: 0,
            term_offset: 0,
            session_id: 0,
            stream_id: 0,
            initial_term_id: 0,
            active_term_id: 0,
            term_length: 100_000,
            mtu: 1408,
            ttl: 0,
        }
        .to_bytes();
        let e = SetupFrame::decode(&buf).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid SETUP frame: term_length=100000: not a power of two in [64k, 1g]"
        );
        put_i32(&mut buf, 28, 65536);
        assert!(SetupFrame::decode(&buf).is_ok());
    }

    #[test]
    fn should_reject_every_truncation() {
        let mut rng = XorShift::new(6);
        let f = random_setup(&mut rng);
        let buf = f.to_bytes();
        for cut in 0..40 {
            let e = SetupFrame::decode(&buf[..cut]).unwrap_err();
            assert!(matches!(e.field, "datagram_length" | "frame_length"), "{e}");
        }
    }
}
