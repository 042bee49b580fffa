//! ERR (0x04): a receiver tells the sender why it rejected the stream (e.g.
//! a subscriber called `Image.reject`). 40 bytes plus a message of at most
//! 1023 bytes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |R|                 Frame Length (40 + message)                 |  0
//! +---------------+-------+-+-----+-------------------------------+
//! |   Version     |       |G|Flags|          Type (0x04)          |  4
//! +---------------+-------+-+-----+-------------------------------+
//! |                          Session ID                           |  8
//! +---------------------------------------------------------------+
//! |                           Stream ID                           | 12
//! +---------------------------------------------------------------+
//! |                          Receiver ID                          | 16
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                   Group Tag (valid if G set)                  | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                          Error Code                           | 32
//! +---------------------------------------------------------------+
//! |                         Error Length                          | 36
//! +---------------------------------------------------------------+
//! |                   Error Message (ASCII) ...                   | 40
//! ```
//! Flag: G = HAS_GROUP_TAG (0x08). Little-endian. See docs/protocol.md §1.9.

use super::header::{
    check_control_header, get_i32, get_i64, put_header, put_i32, put_i64, FrameError,
};
use super::HDR_TYPE_ERR;

/// Offset of `session_id`.
pub const SESSION_ID_FIELD_OFFSET: usize = 8;
/// Offset of `stream_id`.
pub const STREAM_ID_FIELD_OFFSET: usize = 12;
/// Offset of `receiver_id`.
pub const RECEIVER_ID_FIELD_OFFSET: usize = 16;
/// Offset of `group_tag`.
pub const GROUP_TAG_FIELD_OFFSET: usize = 24;
/// Offset of `error_code`.
pub const ERROR_CODE_FIELD_OFFSET: usize = 32;
/// Offset of `error_length`.
pub const ERROR_LENGTH_FIELD_OFFSET: usize = 36;
/// Offset of the message bytes.
pub const ERROR_MESSAGE_OFFSET: usize = 40;

/// An ERR frame.
///
/// The only flag, HAS_GROUP_TAG, is carried by `group_tag` being `Some`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ErrorFrame {
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// Random id of the rejecting receive endpoint.
    pub receiver_id: i64,
    /// Group tag of the receiver, if it has one.
    pub group_tag: Option<i64>,
    /// Client error code (e.g. 13 = IMAGE_REJECTED).
    pub error_code: i32,
    /// Human-readable reason. Sent as at most 1023 bytes; decoded lossily
    /// from UTF-8 (ASCII in practice).
    pub error_message: String,
}

impl ErrorFrame {
    /// Length of the fixed part before the message.
    pub const HEADER_LENGTH: usize = 40;
    /// Longest message in bytes.
    pub const MAX_MESSAGE_LENGTH: usize = 1023;
    /// Longest frame.
    pub const MAX_FRAME_LENGTH: usize = Self::HEADER_LENGTH + Self::MAX_MESSAGE_LENGTH;
    /// Flag: `group_tag` is valid.
    pub const HAS_GROUP_TAG_FLAG: u8 = 0x08;

    /// The message bytes as sent: cut to at most 1023 bytes at a character
    /// boundary.
    pub fn message_bytes(&self) -> &[u8] {
        let msg = &self.error_message;
        let mut end = msg.len().min(Self::MAX_MESSAGE_LENGTH);
        while !msg.is_char_boundary(end) {
            end -= 1;
        }
        &msg.as_bytes()[..end]
    }

    /// Encoded length: 40 + message bytes sent.
    pub fn frame_length(&self) -> usize {
        Self::HEADER_LENGTH + self.message_bytes().len()
    }

    /// Writes the frame into the start of `buf`; returns its length.
    /// A message longer than 1023 bytes is cut (see
    /// [`message_bytes`](Self::message_bytes)).
    ///
    /// # Panics
    /// If `buf` is shorter than [`frame_length`](Self::frame_length).
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        let msg = self.message_bytes();
        let length = Self::HEADER_LENGTH + msg.len();
        let flags = if self.group_tag.is_some() {
            Self::HAS_GROUP_TAG_FLAG
        } else {
            0
        };
        put_header(buf, length, flags, HDR_TYPE_ERR);
        put_i32(buf, SESSION_ID_FIELD_OFFSET, self.session_id);
        put_i32(buf, STREAM_ID_FIELD_OFFSET, self.stream_id);
        put_i64(buf, RECEIVER_ID_FIELD_OFFSET, self.receiver_id);
        put_i64(buf, GROUP_TAG_FIELD_OFFSET, self.group_tag.unwrap_or(0));
        put_i32(buf, ERROR_CODE_FIELD_OFFSET, self.error_code);
        put_i32(buf, ERROR_LENGTH_FIELD_OFFSET, msg.len() as i32);
        buf[ERROR_MESSAGE_OFFSET..length].copy_from_slice(msg);
        length
    }

    /// The encoded frame.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.frame_length()];
        self.encode(&mut v);
        v
    }

    /// Decodes and checks an ERR frame at the start of `buf`.
    ///
    /// Checks version 0, type, `frame_length` in [40, 1063] within `buf`;
    /// `error_length` in [0, 1023] and within `frame_length`.
    pub fn decode(buf: &[u8]) -> Result<Self, FrameError> {
        let header = check_control_header(
            buf,
            HDR_TYPE_ERR,
            Self::HEADER_LENGTH,
            Self::MAX_FRAME_LENGTH,
        )?;
        let ty = Some(HDR_TYPE_ERR);
        let frame_length = header.frame_length as usize;
        let error_length = get_i32(buf, ERROR_LENGTH_FIELD_OFFSET);
        if error_length < 0 || error_length as usize > Self::MAX_MESSAGE_LENGTH {
            return Err(FrameError::new(
                ty,
                "error_length",
                error_length,
                format_args!("not in [0, {}]", Self::MAX_MESSAGE_LENGTH),
            ));
        }
        let end = Self::HEADER_LENGTH + error_length as usize;
        if end > frame_length {
            return Err(FrameError::new(
                ty,
                "error_length",
                error_length,
                format_args!("message runs past the frame_length of {frame_length}"),
            ));
        }
        let has_tag = header.flags & Self::HAS_GROUP_TAG_FLAG != 0;
        Ok(ErrorFrame {
            session_id: get_i32(buf, SESSION_ID_FIELD_OFFSET),
            stream_id: get_i32(buf, STREAM_ID_FIELD_OFFSET),
            receiver_id: get_i64(buf, RECEIVER_ID_FIELD_OFFSET),
            group_tag: has_tag.then(|| get_i64(buf, GROUP_TAG_FIELD_OFFSET)),
            error_code: get_i32(buf, ERROR_CODE_FIELD_OFFSET),
            error_message: String::from_utf8_lossy(&buf[ERROR_MESSAGE_OFFSET..end]).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::test_util::{random_error, Corruption, XorShift};

    #[test]
    fn should_round_trip_random_errors() {
        let mut rng = XorShift::new(14);
        for _ in 0..5_000 {
            let f = random_error(&mut rng);
            let bytes = f.to_vec();
            assert_eq!(bytes.len(), 40 + f.error_message.len());
            assert_eq!(ErrorFrame::decode(&bytes).unwrap(), f);
        }
    }

    #[test]
    fn should_lay_out_error_as_in_spec() {
        let f = ErrorFrame {
            session_id: 5,
            stream_id: 6,
            receiver_id: 7,
            group_tag: Some(8),
            error_code: 13,
            error_message: "no".into(),
        };
        #[rustfmt::skip]
        let expected: [u8; 42] = [
            42, 0, 0, 0,  0, 0x08, 0x04, 0x00,
            5, 0, 0, 0,
            6, 0, 0, 0,
            7, 0, 0, 0, 0, 0, 0, 0,
            8, 0, 0, 0, 0, 0, 0, 0,
            13, 0, 0, 0,
            2, 0, 0, 0,
            b'n', b'o',
        ];
        assert_eq!(f.to_vec(), expected);
        assert_eq!(ErrorFrame::decode(&expected).unwrap(), f);
        let untagged = ErrorFrame {
            group_tag: None,
            ..f
        };
        assert_eq!(untagged.to_vec()[5], 0);
        assert_eq!(&untagged.to_vec()[24..32], &[0; 8]);
    }

    #[test]
    fn should_cut_long_message_at_char_boundary() {
        let f = ErrorFrame {
            session_id: 0,
            stream_id: 0,
            receiver_id: 0,
            group_tag: None,
            error_code: 1,
            error_message: format!("{}é", "x".repeat(1022)),
        };
        assert_eq!(f.frame_length(), 40 + 1022);
        let d = ErrorFrame::decode(&f.to_vec()).unwrap();
        assert_eq!(d.error_message, "x".repeat(1022));
        let max = ErrorFrame {
            error_message: "y".repeat(1023),
            ..f
        };
        assert_eq!(max.frame_length(), ErrorFrame::MAX_FRAME_LENGTH);
        assert_eq!(ErrorFrame::decode(&max.to_vec()).unwrap(), max);
    }

    #[test]
    fn should_reject_each_malformed_field() {
        let good = ErrorFrame {
            session_id: 1,
            stream_id: 2,
            receiver_id: 3,
            group_tag: None,
            error_code: 13,
            error_message: "rejected".into(),
        };
        let cases: Vec<Corruption> = vec![
            ("version", Box::new(|b: &mut [u8]| b[4] = 1)),
            ("type", Box::new(|b: &mut [u8]| b[6] = 0x06)),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 39))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 1064))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 49))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, -48))),
            ("error_length", Box::new(|b: &mut [u8]| put_i32(b, 36, -1))),
            ("error_length", Box::new(|b: &mut [u8]| put_i32(b, 36, 9))),
            (
                "error_length",
                Box::new(|b: &mut [u8]| put_i32(b, 36, 1024)),
            ),
        ];
        for (field, corrupt) in cases {
            let mut buf = good.to_vec();
            corrupt(&mut buf);
            let e = ErrorFrame::decode(&buf).unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
        // A shorter message than the frame leaves room: accepted.
        let mut buf = good.to_vec();
        put_i32(&mut buf, 36, 3);
        assert_eq!(ErrorFrame::decode(&buf).unwrap().error_message, "rej");
    }

    #[test]
    fn should_reject_every_truncation() {
        let mut rng = XorShift::new(15);
        for _ in 0..10 {
            let bytes = random_error(&mut rng).to_vec();
            for cut in 0..bytes.len() {
                let e = ErrorFrame::decode(&bytes[..cut]).unwrap_err();
                assert!(matches!(e.field, "datagram_length" | "frame_length"), "{e}");
            }
        }
    }
}
