//! STATUS MESSAGE / SM (0x03): a receiver reports how far it has consumed and
//! how much more it will accept. 36 bytes, or 44 with a group tag.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |R|                  Frame Length (36 or 44)                    |  0
//! +---------------+-+-+-----------+-------------------------------+
//! |   Version     |S|E|   Flags   |          Type (0x03)          |  4
//! +---------------+-+-+-----------+-------------------------------+
//! |                          Session ID                           |  8
//! +---------------------------------------------------------------+
//! |                           Stream ID                           | 12
//! +---------------------------------------------------------------+
//! |                      Consumption Term ID                      | 16
//! +---------------------------------------------------------------+
//! |                    Consumption Term Offset                    | 20
//! +---------------------------------------------------------------+
//! |                        Receiver Window                        | 24
//! +---------------------------------------------------------------+
//! |                          Receiver ID                          | 28
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                    Group Tag (optional)                       | 36
//! |                                                               |
//! +---------------------------------------------------------------+
//! ```
//! Flags: S = SEND_SETUP (0x80), E = EOS (0x40). `Receiver ID` and `Group Tag`
//! are i64 at unaligned offsets; all fields little-endian.
//! See docs/protocol.md §1.6.

use super::header::{
    check_control_header, check_term_offset_in_term, check_term_offset_shape, get_i32, get_i64,
    put_header, put_i32, put_i64, FrameError,
};
use super::HDR_TYPE_SM;

/// Offset of `session_id`.
pub const SESSION_ID_FIELD_OFFSET: usize = 8;
/// Offset of `stream_id`.
pub const STREAM_ID_FIELD_OFFSET: usize = 12;
/// Offset of `consumption_term_id`.
pub const CONSUMPTION_TERM_ID_FIELD_OFFSET: usize = 16;
/// Offset of `consumption_term_offset`.
pub const CONSUMPTION_TERM_OFFSET_FIELD_OFFSET: usize = 20;
/// Offset of `receiver_window`.
pub const RECEIVER_WINDOW_FIELD_OFFSET: usize = 24;
/// Offset of `receiver_id`.
pub const RECEIVER_ID_FIELD_OFFSET: usize = 28;
/// Offset of the optional `group_tag`.
pub const GROUP_TAG_FIELD_OFFSET: usize = 36;

/// A status message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusMessageFrame {
    /// [`Self::SEND_SETUP_FLAG`], [`Self::EOS_FLAG`].
    pub flags: u8,
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// Term id of the receiver's consumption position.
    pub consumption_term_id: i32,
    /// Term offset of the receiver's consumption position (32-aligned).
    pub consumption_term_offset: i32,
    /// Bytes the receiver accepts beyond its consumption position.
    pub receiver_window: i32,
    /// Random id of the receiving endpoint.
    pub receiver_id: i64,
    /// Group tag; present makes the frame 44 bytes long.
    pub group_tag: Option<i64>,
}

impl StatusMessageFrame {
    /// Length without a group tag.
    pub const LENGTH: usize = 36;
    /// Length with a group tag.
    pub const LENGTH_WITH_GROUP_TAG: usize = 44;
    /// Flag: the sender should send a SETUP.
    pub const SEND_SETUP_FLAG: u8 = 0x80;
    /// Flag: the receiver is going away.
    pub const EOS_FLAG: u8 = 0x40;

    /// The SM a receiver sends to elicit a SETUP: position 0, window 0,
    /// [`Self::SEND_SETUP_FLAG`].
    pub fn setup_eliciting(session_id: i32, stream_id: i32, receiver_id: i64) -> Self {
        StatusMessageFrame {
            flags: Self::SEND_SETUP_FLAG,
            session_id,
            stream_id,
            consumption_term_id: 0,
            consumption_term_offset: 0,
            receiver_window: 0,
            receiver_id,
            group_tag: None,
        }
    }

    /// True if [`Self::SEND_SETUP_FLAG`] is set.
    pub fn is_send_setup(&self) -> bool {
        self.flags & Self::SEND_SETUP_FLAG != 0
    }

    /// True if [`Self::EOS_FLAG`] is set.
    pub fn is_eos(&self) -> bool {
        self.flags & Self::EOS_FLAG != 0
    }

    /// Encoded length: 36, or 44 with a group tag.
    pub fn frame_length(&self) -> usize {
        if self.group_tag.is_some() {
            Self::LENGTH_WITH_GROUP_TAG
        } else {
            Self::LENGTH
        }
    }

    /// Writes the frame into the start of `buf`; returns its length.
    ///
    /// # Panics
    /// If `buf` is shorter than [`frame_length`](Self::frame_length).
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        let length = self.frame_length();
        put_header(buf, length, self.flags, HDR_TYPE_SM);
        put_i32(buf, SESSION_ID_FIELD_OFFSET, self.session_id);
        put_i32(buf, STREAM_ID_FIELD_OFFSET, self.stream_id);
        put_i32(
            buf,
            CONSUMPTION_TERM_ID_FIELD_OFFSET,
            self.consumption_term_id,
        );
        put_i32(
            buf,
            CONSUMPTION_TERM_OFFSET_FIELD_OFFSET,
            self.consumption_term_offset,
        );
        put_i32(buf, RECEIVER_WINDOW_FIELD_OFFSET, self.receiver_window);
        put_i64(buf, RECEIVER_ID_FIELD_OFFSET, self.receiver_id);
        if let Some(tag) = self.group_tag {
            put_i64(buf, GROUP_TAG_FIELD_OFFSET, tag);
        }
        length
    }

    /// The encoded bytes in a 44-byte array; the frame is the first
    /// [`frame_length`](Self::frame_length) of them.
    pub fn to_bytes(&self) -> [u8; Self::LENGTH_WITH_GROUP_TAG] {
        let mut b = [0u8; Self::LENGTH_WITH_GROUP_TAG];
        self.encode(&mut b);
        b
    }

    /// Decodes and checks an SM at the start of `buf`.
    ///
    /// Checks version 0, type, `frame_length` 36 or 44 and within `buf`;
    /// `consumption_term_offset` ≥ 0 and 32-aligned; `receiver_window`
    /// ≥ 0. The bounds that need the term length are in
    /// [`validate_against`](Self::validate_against).
    pub fn decode(buf: &[u8]) -> Result<Self, FrameError> {
        let header =
            check_control_header(buf, HDR_TYPE_SM, Self::LENGTH, Self::LENGTH_WITH_GROUP_TAG)?;
        let length = header.frame_length as usize;
        if length != Self::LENGTH && length != Self::LENGTH_WITH_GROUP_TAG {
            return Err(FrameError::new(
                Some(HDR_TYPE_SM),
                "frame_length",
                length,
                "an SM is 36 bytes, or 44 with a group tag",
            ));
        }
        let frame = StatusMessageFrame {
            flags: header.flags,
            session_id: get_i32(buf, SESSION_ID_FIELD_OFFSET),
            stream_id: get_i32(buf, STREAM_ID_FIELD_OFFSET),
            consumption_term_id: get_i32(buf, CONSUMPTION_TERM_ID_FIELD_OFFSET),
            consumption_term_offset: get_i32(buf, CONSUMPTION_TERM_OFFSET_FIELD_OFFSET),
            receiver_window: get_i32(buf, RECEIVER_WINDOW_FIELD_OFFSET),
            receiver_id: get_i64(buf, RECEIVER_ID_FIELD_OFFSET),
            group_tag: (length == Self::LENGTH_WITH_GROUP_TAG)
                .then(|| get_i64(buf, GROUP_TAG_FIELD_OFFSET)),
        };
        check_term_offset_shape(
            HDR_TYPE_SM,
            "consumption_term_offset",
            frame.consumption_term_offset,
        )?;
        if frame.receiver_window < 0 {
            return Err(FrameError::new(
                Some(HDR_TYPE_SM),
                "receiver_window",
                frame.receiver_window,
                "negative",
            ));
        }
        Ok(frame)
    }

    /// The sender's checks against its term length: consumption offset in
    /// `[0, term_length)` and 32-aligned, window in `[0, term_length / 2]`.
    ///
    /// The ±term_length/2 bound against the sender position needs the
    /// sender's state and is the caller's.
    pub fn validate_against(&self, term_length: usize) -> Result<(), FrameError> {
        let field = "consumption_term_offset";
        check_term_offset_shape(HDR_TYPE_SM, field, self.consumption_term_offset)?;
        check_term_offset_in_term(
            HDR_TYPE_SM,
            field,
            self.consumption_term_offset,
            term_length,
        )?;
        let window = self.receiver_window;
        if window < 0 || window as usize > term_length / 2 {
            return Err(FrameError::new(
                Some(HDR_TYPE_SM),
                "receiver_window",
                window,
                format_args!("outside [0, term_length / 2 = {}]", term_length / 2),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::test_util::{random_status, Corruption, XorShift};

    const TERM: usize = 64 * 1024;

    #[test]
    fn should_round_trip_random_status_messages() {
        let mut rng = XorShift::new(7);
        let mut tagged = 0;
        for _ in 0..10_000 {
            let f = random_status(&mut rng);
            let mut buf = [0u8; 64];
            let n = f.encode(&mut buf);
            assert_eq!(n, f.frame_length());
            tagged += f.group_tag.is_some() as usize;
            assert_eq!(StatusMessageFrame::decode(&buf[..n]).unwrap(), f);
            assert_eq!(f.to_bytes()[..n], buf[..n]);
        }
        assert!(tagged > 1000 && tagged < 9000);
    }

    #[test]
    fn should_lay_out_status_message_as_in_spec() {
        let mut f = StatusMessageFrame {
            flags: StatusMessageFrame::EOS_FLAG,
            session_id: 0x0102_0304,
            stream_id: 10,
            consumption_term_id: -5,
            consumption_term_offset: 0x0000_2040,
            receiver_window: 0x0002_0000,
            receiver_id: 0x1122_3344_5566_7788,
            group_tag: None,
        };
        #[rustfmt::skip]
        let expected: [u8; 36] = [
            36, 0, 0, 0,  0, 0x40, 0x03, 0x00,              // frame_length, version, flags, type
            0x04, 0x03, 0x02, 0x01,                         // 8  session_id
            0x0A, 0x00, 0x00, 0x00,                         // 12 stream_id
            0xFB, 0xFF, 0xFF, 0xFF,                         // 16 consumption_term_id = -5
            0x40, 0x20, 0x00, 0x00,                         // 20 consumption_term_offset
            0x00, 0x00, 0x02, 0x00,                         // 24 receiver_window = 128k
            0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // 28 receiver_id (unaligned)
        ];
        assert_eq!(f.to_bytes()[..36], expected);
        assert_eq!(StatusMessageFrame::decode(&expected).unwrap(), f);

        f.group_tag = Some(-2);
        let mut with_tag = [0u8; 44];
        with_tag[..36].copy_from_slice(&expected);
        with_tag[0] = 44;
        with_tag[36..].copy_from_slice(&[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert_eq!(f.to_bytes(), with_tag);
        assert_eq!(StatusMessageFrame::decode(&with_tag).unwrap(), f);
    }

    #[test]
    fn should_reject_each_malformed_field() {
        let good = StatusMessageFrame {
            flags: 0,
            session_id: 1,
            stream_id: 2,
            consumption_term_id: 3,
            consumption_term_offset: 4096,
            receiver_window: 32 * 1024,
            receiver_id: 99,
            group_tag: Some(5),
        };
        let cases: Vec<Corruption> = vec![
            ("version", Box::new(|b: &mut [u8]| b[4] = 3)),
            ("type", Box::new(|b: &mut [u8]| b[6] = 0x02)),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 40))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 35))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 52))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, -44))),
            (
                "consumption_term_offset",
                Box::new(|b: &mut [u8]| put_i32(b, 20, -32)),
            ),
            (
                "consumption_term_offset",
                Box::new(|b: &mut [u8]| put_i32(b, 20, 4097)),
            ),
            (
                "receiver_window",
                Box::new(|b: &mut [u8]| put_i32(b, 24, -1)),
            ),
        ];
        StatusMessageFrame::decode(&good.to_bytes()).unwrap();
        for (field, corrupt) in cases {
            let mut buf = [0u8; 52];
            good.encode(&mut buf);
            corrupt(&mut buf);
            let e = StatusMessageFrame::decode(&buf).unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
    }

    #[test]
    fn should_validate_against_term_length() {
        let mut f = StatusMessageFrame::setup_eliciting(1, 2, 3);
        f.validate_against(TERM).unwrap();
        f.consumption_term_offset = (TERM - 32) as i32;
        f.receiver_window = (TERM / 2) as i32;
        f.validate_against(TERM).unwrap();
        let e = StatusMessageFrame {
            consumption_term_offset: TERM as i32,
            ..f
        }
        .validate_against(TERM)
        .unwrap_err();
        assert_eq!(e.field, "consumption_term_offset");
        let e = StatusMessageFrame {
            consumption_term_offset: 48,
            ..f
        }
        .validate_against(TERM)
        .unwrap_err();
        assert_eq!(e.field, "consumption_term_offset");
        let e = StatusMessageFrame {
            receiver_window: (TERM / 2 + 1) as i32,
            ..f
        }
        .validate_against(TERM)
        .unwrap_err();
        assert_eq!(e.field, "receiver_window");
        assert_eq!(
            e.to_string(),
            "invalid SM frame: receiver_window=32769: outside [0, term_length / 2 = 32768]"
        );
    }

    #[test]
    fn should_reject_every_truncation() {
        let mut rng = XorShift::new(8);
        for _ in 0..20 {
            let f = random_status(&mut rng);
            let buf = f.to_bytes();
            for cut in 0..f.frame_length() {
                let e = StatusMessageFrame::decode(&buf[..cut]).unwrap_err();
                assert!(matches!(e.field, "datagram_length" | "frame_length"), "{e}");
            }
        }
    }
}
