//! A frame header's fields read where the frame lies in recorded bytes
//! (Aeron's layout, little-endian). The archive reads segment files raw and
//! checks what it reads itself, so these neither validate nor decode more
//! than the one field.

use sulis_protocol::frame::{
    RESERVED_VALUE_FIELD_OFFSET, SESSION_ID_FIELD_OFFSET, TERM_ID_FIELD_OFFSET,
    TERM_OFFSET_FIELD_OFFSET, TYPE_FIELD_OFFSET,
};

/// The little-endian i32 at `b[at..at + 4]`.
#[inline]
pub(crate) fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The little-endian i64 at `b[at..at + 8]`.
#[inline]
pub(crate) fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// `frame_length` of the frame at `at` (0 or less: nothing written there).
#[inline]
pub(crate) fn frame_length(b: &[u8], at: usize) -> i32 {
    i32_at(b, at)
}

/// The type (DATA, PAD, ...) of the frame at `at`.
#[inline]
pub(crate) fn frame_type(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at + TYPE_FIELD_OFFSET], b[at + TYPE_FIELD_OFFSET + 1]])
}

/// The term offset the frame at `at` says it lies at.
#[inline]
pub(crate) fn term_offset(b: &[u8], at: usize) -> i32 {
    i32_at(b, at + TERM_OFFSET_FIELD_OFFSET)
}

/// The term id the frame at `at` says it belongs to.
#[inline]
pub(crate) fn term_id(b: &[u8], at: usize) -> i32 {
    i32_at(b, at + TERM_ID_FIELD_OFFSET)
}

/// The session id field of the frame at `at` (a checksum in a checksummed recording).
#[inline]
pub(crate) fn session_id(b: &[u8], at: usize) -> i32 {
    i32_at(b, at + SESSION_ID_FIELD_OFFSET)
}

/// The reserved value of the frame at `at`.
#[inline]
pub(crate) fn reserved_value(b: &[u8], at: usize) -> i64 {
    i64_at(b, at + RESERVED_VALUE_FIELD_OFFSET)
}
