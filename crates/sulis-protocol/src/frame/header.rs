//! The common 8-byte header every frame starts with, the error every decoder
//! returns, and the little-endian accessors the frame codecs share.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |R|                       Frame Length                          |  0
//! +---------------+---------------+-------------------------------+
//! |   Version     |     Flags     |             Type              |  4
//! +---------------+---------------+-------------------------------+
//! ```
//! `Frame Length` is an i32 (bit 31, "R", is reserved, so a negative length is
//! always invalid), `Type` a u16; all little-endian. See docs/protocol.md §1.1.

use std::fmt;

use super::{
    CURRENT_VERSION, FLAGS_FIELD_OFFSET, FRAME_LENGTH_FIELD_OFFSET, HDR_TYPE_DATA, HDR_TYPE_ERR,
    HDR_TYPE_NAK, HDR_TYPE_PAD, HDR_TYPE_RES, HDR_TYPE_RSP_SETUP, HDR_TYPE_RTTM, HDR_TYPE_SETUP,
    HDR_TYPE_SM, HEADER_LENGTH, TYPE_FIELD_OFFSET, VERSION_FIELD_OFFSET,
};

/// Why a datagram or frame was rejected.
///
/// `field` names the offending field as spelled in the decoded struct (the
/// protocol table's name, with a unit suffix where it has one, e.g.
/// `term_length`, `reception_delta_ns`), or `datagram_length` when the
/// datagram itself has the wrong size, or `entry_length` for a RES entry cut
/// off by the end of its frame; `reason` starts with the offending value. `Display` gives one
/// line suitable for a log entry next to the source address, e.g.
/// `invalid SETUP frame: term_length=100000: not a power of two in [64k, 1g]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError {
    /// Type code of the frame being decoded, `None` if the datagram was too
    /// short to hold one.
    pub frame_type: Option<u16>,
    /// The field that is wrong, or `datagram_length` / `entry_length`.
    pub field: &'static str,
    /// The offending value, a colon, and what is wrong with it.
    pub reason: String,
}

impl FrameError {
    /// Builds an error whose reason reads `"{value}: {why}"`.
    pub fn new(
        frame_type: Option<u16>,
        field: &'static str,
        value: impl fmt::Display,
        why: impl fmt::Display,
    ) -> Self {
        FrameError {
            frame_type,
            field,
            reason: format!("{value}: {why}"),
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.frame_type {
            Some(t) => match frame_type_name(t) {
                Some(name) => write!(f, "invalid {name} frame: ")?,
                None => write!(f, "invalid frame of type {t:#06x}: ")?,
            },
            None => f.write_str("invalid frame: ")?,
        }
        write!(f, "{}={}", self.field, self.reason)
    }
}

impl std::error::Error for FrameError {}

/// Short name of a frame type as used in the protocol tables (`"SETUP"`,
/// `"SM"`, ...), `None` for codes protocol version 0 does not define for
/// open-source Aeron.
pub const fn frame_type_name(frame_type: u16) -> Option<&'static str> {
    Some(match frame_type {
        HDR_TYPE_PAD => "PAD",
        HDR_TYPE_DATA => "DATA",
        HDR_TYPE_NAK => "NAK",
        HDR_TYPE_SM => "SM",
        HDR_TYPE_ERR => "ERR",
        HDR_TYPE_SETUP => "SETUP",
        HDR_TYPE_RTTM => "RTTM",
        HDR_TYPE_RES => "RES",
        HDR_TYPE_RSP_SETUP => "RSP_SETUP",
        super::sealed::HDR_TYPE_SEALED => "SEALED",
        _ => return None,
    })
}

/// The common 8-byte header, decoded without judging it.
///
/// Use it to peek at a datagram's type before choosing a decoder; the typed
/// decoders ([`super::decode_datagram`] and each frame's `decode`) do the
/// validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameHeader {
    /// Length of the frame in bytes (see each frame type for what it covers).
    pub frame_length: i32,
    /// Protocol version; only [`CURRENT_VERSION`] is accepted by the decoders.
    pub version: u8,
    /// Per-type flag bits.
    pub flags: u8,
    /// Type code, one of the `HDR_TYPE_*` constants.
    pub frame_type: u16,
}

impl FrameHeader {
    /// Encoded length in bytes.
    pub const LENGTH: usize = HEADER_LENGTH;

    /// Reads the first 8 bytes of `buf`. Fails only if `buf` is shorter.
    pub fn decode(buf: &[u8]) -> Result<Self, FrameError> {
        if buf.len() < HEADER_LENGTH {
            return Err(FrameError::new(
                None,
                "datagram_length",
                buf.len(),
                "shorter than the 8-byte common frame header",
            ));
        }
        Ok(FrameHeader {
            frame_length: get_i32(buf, FRAME_LENGTH_FIELD_OFFSET),
            version: buf[VERSION_FIELD_OFFSET],
            flags: buf[FLAGS_FIELD_OFFSET],
            frame_type: get_u16(buf, TYPE_FIELD_OFFSET),
        })
    }

    /// Writes the 8 bytes into the start of `buf` and returns 8.
    ///
    /// # Panics
    /// If `buf` is shorter than 8 bytes.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        put_i32(buf, FRAME_LENGTH_FIELD_OFFSET, self.frame_length);
        buf[VERSION_FIELD_OFFSET] = self.version;
        buf[FLAGS_FIELD_OFFSET] = self.flags;
        put_u16(buf, TYPE_FIELD_OFFSET, self.frame_type);
        HEADER_LENGTH
    }
}

/// Writes a version-0 common header for a control frame.
pub(crate) fn put_header(buf: &mut [u8], frame_length: usize, flags: u8, frame_type: u16) {
    FrameHeader {
        frame_length: frame_length as i32,
        version: CURRENT_VERSION,
        flags,
        frame_type,
    }
    .encode(buf);
}

/// Checks the common header of a control frame of type `frame_type` whose
/// `frame_length` must lie in `[min_len, max_len]` and within `buf`.
///
/// Bytes of `buf` beyond `frame_length` are ignored, as Aeron does.
pub(crate) fn check_control_header(
    buf: &[u8],
    frame_type: u16,
    min_len: usize,
    max_len: usize,
) -> Result<FrameHeader, FrameError> {
    let ty = Some(frame_type);
    let name = frame_type_name(frame_type).unwrap_or("?");
    if buf.len() < HEADER_LENGTH {
        return Err(FrameError::new(
            ty,
            "datagram_length",
            buf.len(),
            "shorter than the 8-byte common frame header",
        ));
    }
    let header = FrameHeader::decode(buf)?;
    if header.frame_type != frame_type {
        return Err(FrameError::new(
            ty,
            "type",
            format_args!("{:#06x}", header.frame_type),
            format_args!("expected {frame_type:#06x} ({name})"),
        ));
    }
    check_version(&header)?;
    let length = header.frame_length;
    if length < 0 {
        return Err(FrameError::new(
            ty,
            "frame_length",
            length,
            "negative (reserved bit 31 set)",
        ));
    }
    let length = length as usize;
    if length < min_len || length > max_len {
        let why = if min_len == max_len {
            format!("a {name} frame is {min_len} bytes")
        } else if length < min_len {
            format!("shorter than the {min_len}-byte {name} frame")
        } else {
            format!("longer than the largest {name} frame of {max_len} bytes")
        };
        return Err(FrameError::new(ty, "frame_length", length, why));
    }
    if length > buf.len() {
        return Err(FrameError::new(
            ty,
            "frame_length",
            length,
            format_args!(
                "exceeds the datagram's {} bytes (truncated frame)",
                buf.len()
            ),
        ));
    }
    Ok(header)
}

/// Rejects any version but [`CURRENT_VERSION`].
pub(crate) fn check_version(header: &FrameHeader) -> Result<(), FrameError> {
    if header.version != CURRENT_VERSION {
        return Err(FrameError::new(
            Some(header.frame_type),
            "version",
            header.version,
            format_args!("only protocol version {CURRENT_VERSION} is supported"),
        ));
    }
    Ok(())
}

/// Rejects a term offset that is negative or not a multiple of 32.
pub(crate) fn check_term_offset_shape(
    frame_type: u16,
    field: &'static str,
    term_offset: i32,
) -> Result<(), FrameError> {
    if term_offset < 0 {
        return Err(FrameError::new(
            Some(frame_type),
            field,
            term_offset,
            "negative",
        ));
    }
    if term_offset as usize & (super::FRAME_ALIGNMENT - 1) != 0 {
        return Err(FrameError::new(
            Some(frame_type),
            field,
            term_offset,
            "not a multiple of the 32-byte frame alignment",
        ));
    }
    Ok(())
}

/// Rejects a (shape-checked) term offset that does not lie inside the term.
pub(crate) fn check_term_offset_in_term(
    frame_type: u16,
    field: &'static str,
    term_offset: i32,
    term_length: usize,
) -> Result<(), FrameError> {
    if term_offset < 0 || term_offset as usize >= term_length {
        return Err(FrameError::new(
            Some(frame_type),
            field,
            term_offset,
            format_args!("outside the term [0, {term_length})"),
        ));
    }
    Ok(())
}

// Little-endian accessors. Callers check the buffer length first; an
// out-of-range index panics like any slice access.

#[inline]
pub(crate) fn get_u16(buf: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([buf[offset], buf[offset + 1]])
}

#[inline]
pub(crate) fn get_i16(buf: &[u8], offset: usize) -> i16 {
    i16::from_le_bytes([buf[offset], buf[offset + 1]])
}

#[inline]
pub(crate) fn get_i32(buf: &[u8], offset: usize) -> i32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[offset..offset + 4]);
    i32::from_le_bytes(b)
}

#[inline]
pub(crate) fn get_i64(buf: &[u8], offset: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[offset..offset + 8]);
    i64::from_le_bytes(b)
}

#[inline]
pub(crate) fn put_u16(buf: &mut [u8], offset: usize, value: u16) {
    buf[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
}

#[inline]
pub(crate) fn put_i16(buf: &mut [u8], offset: usize, value: i16) {
    buf[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
}

#[inline]
pub(crate) fn put_i32(buf: &mut [u8], offset: usize, value: i32) {
    buf[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

#[inline]
pub(crate) fn put_i64(buf: &mut [u8], offset: usize, value: i64) {
    buf[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_format_error_with_frame_field_and_reason() {
        let e = FrameError::new(
            Some(HDR_TYPE_SETUP),
            "term_length",
            100000,
            "not a power of two in [64k, 1g]",
        );
        assert_eq!(
            e.to_string(),
            "invalid SETUP frame: term_length=100000: not a power of two in [64k, 1g]"
        );
        let e = FrameError::new(Some(0x0C), "type", "0x000c", "unknown");
        assert_eq!(
            e.to_string(),
            "invalid frame of type 0x000c: type=0x000c: unknown"
        );
        let e = FrameError::new(None, "datagram_length", 3, "too short");
        assert_eq!(e.to_string(), "invalid frame: datagram_length=3: too short");
    }

    #[test]
    fn should_round_trip_common_header() {
        let h = FrameHeader {
            frame_length: -5,
            version: 1,
            flags: 0xA5,
            frame_type: 0xBEEF,
        };
        let mut buf = [0u8; 8];
        assert_eq!(h.encode(&mut buf), 8);
        assert_eq!(buf, [0xFB, 0xFF, 0xFF, 0xFF, 0x01, 0xA5, 0xEF, 0xBE]);
        assert_eq!(FrameHeader::decode(&buf).unwrap(), h);
        assert_eq!(
            FrameHeader::decode(&buf[..7]).unwrap_err().field,
            "datagram_length"
        );
    }
}
