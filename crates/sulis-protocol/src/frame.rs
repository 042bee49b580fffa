//! Frame header layout shared by the wire and the log buffers.
//!
//! Every frame starts with the common 8-byte header; DATA and PAD frames carry
//! the 32-byte data header, which is also the layout of every frame stored in a
//! term, so a term's bytes can be sent to the network unchanged.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |R|                       Frame Length                          |  0
//! +---------------+---------------+-------------------------------+
//! |   Version     |B|E|S|R| Flags |             Type              |  4
//! +---------------+---------------+-------------------------------+
//! |                          Term Offset                          |  8
//! +---------------------------------------------------------------+
//! |                          Session ID                           | 12
//! +---------------------------------------------------------------+
//! |                           Stream ID                           | 16
//! +---------------------------------------------------------------+
//! |                            Term ID                            | 20
//! +---------------------------------------------------------------+
//! |                        Reserved Value                         | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                         Payload ...                           | 32
//! ```
//! All fields little-endian. See docs/protocol.md.

/// Protocol version carried in every frame.
pub const CURRENT_VERSION: u8 = 0;

/// Offset of the frame length (i32) in every frame.
pub const FRAME_LENGTH_FIELD_OFFSET: usize = 0;
/// Offset of the version byte.
pub const VERSION_FIELD_OFFSET: usize = 4;
/// Offset of the flags byte.
pub const FLAGS_FIELD_OFFSET: usize = 5;
/// Offset of the type (u16).
pub const TYPE_FIELD_OFFSET: usize = 6;
/// Offset of the term offset (i32) in DATA/PAD frames.
pub const TERM_OFFSET_FIELD_OFFSET: usize = 8;
/// Offset of the session id (i32) in DATA/PAD frames.
pub const SESSION_ID_FIELD_OFFSET: usize = 12;
/// Offset of the stream id (i32) in DATA/PAD frames.
pub const STREAM_ID_FIELD_OFFSET: usize = 16;
/// Offset of the term id (i32) in DATA/PAD frames.
pub const TERM_ID_FIELD_OFFSET: usize = 20;
/// Offset of the reserved value (i64) in DATA/PAD frames.
pub const RESERVED_VALUE_FIELD_OFFSET: usize = 24;

/// Length of the common frame header.
pub const HEADER_LENGTH: usize = 8;
/// Length of the DATA/PAD header, also the length of a heartbeat datagram.
pub const DATA_HEADER_LENGTH: usize = 32;
/// Every frame in a term starts on a multiple of this.
pub const FRAME_ALIGNMENT: usize = 32;

/// Frame type: padding.
pub const HDR_TYPE_PAD: u16 = 0x00;
/// Frame type: application data.
pub const HDR_TYPE_DATA: u16 = 0x01;
/// Frame type: negative acknowledgement.
pub const HDR_TYPE_NAK: u16 = 0x02;
/// Frame type: status message.
pub const HDR_TYPE_SM: u16 = 0x03;
/// Frame type: error.
pub const HDR_TYPE_ERR: u16 = 0x04;
/// Frame type: setup.
pub const HDR_TYPE_SETUP: u16 = 0x05;
/// Frame type: round-trip-time measurement.
pub const HDR_TYPE_RTTM: u16 = 0x06;
/// Frame type: name resolution.
pub const HDR_TYPE_RES: u16 = 0x07;
/// Frame type: response setup.
pub const HDR_TYPE_RSP_SETUP: u16 = 0x0B;

/// DATA flag: first fragment of a message.
pub const BEGIN_FLAG: u8 = 0x80;
/// DATA flag: last fragment of a message.
pub const END_FLAG: u8 = 0x40;
/// DATA flags of an unfragmented message.
pub const UNFRAGMENTED: u8 = BEGIN_FLAG | END_FLAG;
/// DATA flag on heartbeats: end of stream.
pub const EOS_FLAG: u8 = 0x20;
/// DATA flag on EOS heartbeats: publication revoked.
pub const REVOKED_FLAG: u8 = 0x10;

/// Rounds a frame length up to the frame alignment.
#[inline(always)]
pub const fn align_frame(length: usize) -> usize {
    (length + FRAME_ALIGNMENT - 1) & !(FRAME_ALIGNMENT - 1)
}

/// Packs the second 4 bytes of the common header (version, flags, type) with the
/// frame length into the 8-byte word stored first when a frame is written.
#[inline(always)]
pub const fn pack_header_word(frame_length: i32, flags: u8, frame_type: u16) -> i64 {
    ((frame_length as u32) as i64)
        | ((CURRENT_VERSION as i64) << 32)
        | ((flags as i64) << 40)
        | ((frame_type as i64) << 48)
}

/// Builds the 32-byte default data header a publication stamps on each frame.
pub fn default_data_header(
    session_id: i32,
    stream_id: i32,
    initial_term_id: i32,
) -> [u8; DATA_HEADER_LENGTH] {
    let mut h = [0u8; DATA_HEADER_LENGTH];
    h[VERSION_FIELD_OFFSET] = CURRENT_VERSION;
    h[FLAGS_FIELD_OFFSET] = UNFRAGMENTED;
    h[TYPE_FIELD_OFFSET..TYPE_FIELD_OFFSET + 2].copy_from_slice(&HDR_TYPE_DATA.to_le_bytes());
    h[SESSION_ID_FIELD_OFFSET..SESSION_ID_FIELD_OFFSET + 4]
        .copy_from_slice(&session_id.to_le_bytes());
    h[STREAM_ID_FIELD_OFFSET..STREAM_ID_FIELD_OFFSET + 4].copy_from_slice(&stream_id.to_le_bytes());
    h[TERM_ID_FIELD_OFFSET..TERM_ID_FIELD_OFFSET + 4]
        .copy_from_slice(&initial_term_id.to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_pack_header_word_in_wire_order() {
        let w = pack_header_word(-64, UNFRAGMENTED, HDR_TYPE_DATA);
        let bytes = w.to_le_bytes();
        assert_eq!(i32::from_le_bytes(bytes[0..4].try_into().unwrap()), -64);
        assert_eq!(bytes[4], CURRENT_VERSION);
        assert_eq!(bytes[5], 0xC0);
        assert_eq!(u16::from_le_bytes([bytes[6], bytes[7]]), HDR_TYPE_DATA);
    }

    #[test]
    fn should_build_default_header() {
        let h = default_data_header(7, 10, 99);
        assert_eq!(h[5], 0xC0);
        assert_eq!(i32::from_le_bytes(h[12..16].try_into().unwrap()), 7);
        assert_eq!(i32::from_le_bytes(h[20..24].try_into().unwrap()), 99);
        assert_eq!(align_frame(33), 64);
    }
}
