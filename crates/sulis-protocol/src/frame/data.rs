//! DATA (0x01), PAD (0x00) and heartbeat frames, and the walk over a datagram
//! that batches several of them.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |R|                       Frame Length                          |  0
//! +---------------+-+-+-+-+-------+-------------------------------+
//! |   Version     |B|E|S|R|       |       Type (0x01 or 0x00)     |  4
//! +---------------+-+-+-+-+-------+-------------------------------+
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
//! Flags: B = BEGIN (0x80), E = END (0x40), S = EOS (0x20), R = REVOKED (0x10).
//! All fields little-endian. See docs/protocol.md §1.3–1.4.
//!
//! * DATA: `frame_length` = 32 + payload length, **unaligned**; the frame
//!   occupies `align_frame(frame_length)` bytes of the term and the datagram.
//! * PAD: `frame_length` covers the padded region (often to the end of the
//!   term) but only the 32-byte header is sent.
//! * Heartbeat: a DATA frame with `frame_length` 0, alone in a 32-byte datagram.

use super::header::{
    check_term_offset_in_term, check_term_offset_shape, check_version, get_i32, get_i64, get_u16,
    put_i32, put_i64, FrameError, FrameHeader,
};
use super::{
    align_frame, pack_header_word, BEGIN_FLAG, DATA_HEADER_LENGTH, END_FLAG, EOS_FLAG,
    FRAME_ALIGNMENT, HDR_TYPE_DATA, HDR_TYPE_PAD, RESERVED_VALUE_FIELD_OFFSET, REVOKED_FLAG,
    SESSION_ID_FIELD_OFFSET, STREAM_ID_FIELD_OFFSET, TERM_ID_FIELD_OFFSET,
    TERM_OFFSET_FIELD_OFFSET, UNFRAGMENTED,
};
use crate::log_buffer_descriptor::TERM_MAX_LENGTH;

/// The 32-byte header of a DATA, PAD or heartbeat frame.
///
/// The version is not a field: [`encode`](Self::encode) always writes
/// version 0 and [`decode`](Self::decode) rejects any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DataHeader {
    /// DATA: 32 + payload length (unaligned), 0 for a heartbeat.
    /// PAD: length of the padded region including this header.
    pub frame_length: i32,
    /// `BEGIN_FLAG`, `END_FLAG`, `EOS_FLAG`, `REVOKED_FLAG`. Other bits are
    /// carried but have no meaning.
    pub flags: u8,
    /// [`HDR_TYPE_DATA`] or [`HDR_TYPE_PAD`].
    pub frame_type: u16,
    /// Offset of this frame within its term, a multiple of 32.
    pub term_offset: i32,
    /// Publication session.
    pub session_id: i32,
    /// Stream within the channel.
    pub stream_id: i32,
    /// Term the frame belongs to.
    pub term_id: i32,
    /// Application or driver defined; 0 by default.
    pub reserved_value: i64,
}

impl DataHeader {
    /// Encoded length in bytes.
    pub const LENGTH: usize = DATA_HEADER_LENGTH;

    /// Header of an unfragmented DATA frame carrying `payload_len` bytes.
    pub fn data(
        session_id: i32,
        stream_id: i32,
        term_id: i32,
        term_offset: i32,
        payload_len: usize,
    ) -> Self {
        DataHeader {
            frame_length: (DATA_HEADER_LENGTH + payload_len) as i32,
            flags: UNFRAGMENTED,
            frame_type: HDR_TYPE_DATA,
            term_offset,
            session_id,
            stream_id,
            term_id,
            reserved_value: 0,
        }
    }

    /// Heartbeat at the sender position `(term_id, term_offset)`; add
    /// [`EOS_FLAG`] (and [`REVOKED_FLAG`]) to `flags` when the stream ended.
    pub fn heartbeat(session_id: i32, stream_id: i32, term_id: i32, term_offset: i32) -> Self {
        DataHeader {
            frame_length: 0,
            ..Self::data(session_id, stream_id, term_id, term_offset, 0)
        }
    }

    /// PAD frame covering `padding_len` bytes (header included) from `term_offset`.
    pub fn pad(
        session_id: i32,
        stream_id: i32,
        term_id: i32,
        term_offset: i32,
        padding_len: usize,
    ) -> Self {
        DataHeader {
            frame_length: padding_len as i32,
            frame_type: HDR_TYPE_PAD,
            ..Self::data(session_id, stream_id, term_id, term_offset, 0)
        }
    }

    /// True for a zero-length DATA frame.
    pub fn is_heartbeat(&self) -> bool {
        self.frame_type == HDR_TYPE_DATA && self.frame_length == 0
    }

    /// True for a PAD frame.
    pub fn is_pad(&self) -> bool {
        self.frame_type == HDR_TYPE_PAD
    }

    /// True if the BEGIN flag is set (first fragment of a message).
    pub fn is_begin(&self) -> bool {
        self.flags & BEGIN_FLAG != 0
    }

    /// True if the END flag is set (last fragment of a message).
    pub fn is_end(&self) -> bool {
        self.flags & END_FLAG != 0
    }

    /// True if the EOS flag is set (end of stream; meaningful on heartbeats).
    pub fn is_eos(&self) -> bool {
        self.flags & EOS_FLAG != 0
    }

    /// True if the REVOKED flag is set (publication revoked; with EOS).
    pub fn is_revoked(&self) -> bool {
        self.flags & REVOKED_FLAG != 0
    }

    /// Bytes this frame occupies in the term (`frame_length` rounded up to
    /// 32); 0 for a heartbeat or a negative length.
    pub fn aligned_length(&self) -> usize {
        if self.frame_length <= 0 {
            0
        } else {
            align_frame(self.frame_length as usize)
        }
    }

    /// Payload length in bytes of a DATA frame (0 for heartbeat, PAD and a
    /// negative length).
    pub fn payload_len(&self) -> usize {
        if self.frame_type == HDR_TYPE_DATA && self.frame_length > DATA_HEADER_LENGTH as i32 {
            self.frame_length as usize - DATA_HEADER_LENGTH
        } else {
            0
        }
    }

    /// Writes the 32-byte header into the start of `buf`; returns 32.
    ///
    /// # Panics
    /// If `buf` is shorter than 32 bytes.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        let word = pack_header_word(self.frame_length, self.flags, self.frame_type);
        put_i64(buf, 0, word);
        put_i32(buf, TERM_OFFSET_FIELD_OFFSET, self.term_offset);
        put_i32(buf, SESSION_ID_FIELD_OFFSET, self.session_id);
        put_i32(buf, STREAM_ID_FIELD_OFFSET, self.stream_id);
        put_i32(buf, TERM_ID_FIELD_OFFSET, self.term_id);
        put_i64(buf, RESERVED_VALUE_FIELD_OFFSET, self.reserved_value);
        DATA_HEADER_LENGTH
    }

    /// The encoded 32 bytes.
    pub fn to_bytes(&self) -> [u8; DATA_HEADER_LENGTH] {
        let mut b = [0u8; DATA_HEADER_LENGTH];
        self.encode(&mut b);
        b
    }

    /// Decodes and checks the header of the frame at the start of `buf`.
    ///
    /// Checks: `buf` holds 32 bytes; version 0; type DATA or PAD;
    /// `term_offset` ≥ 0 and 32-aligned; `frame_length` is 0 (heartbeat, DATA
    /// only) or ≥ 32; a DATA frame's `frame_length` fits in `buf` (a PAD's
    /// may extend past it). Whether the datagram as a whole is valid is
    /// [`walk_data_frames`]'s job; the term bound is
    /// [`validate_against`](Self::validate_against)'s.
    pub fn decode(buf: &[u8]) -> Result<Self, FrameError> {
        let h = decode_shape(buf)?;
        if h.frame_type == HDR_TYPE_DATA && h.frame_length as usize > buf.len() {
            return Err(FrameError::new(
                Some(h.frame_type),
                "frame_length",
                h.frame_length,
                format_args!(
                    "exceeds the {} bytes available (truncated frame)",
                    buf.len()
                ),
            ));
        }
        Ok(h)
    }

    /// Checks the header against the term it claims to belong to:
    /// `term_offset` in `[0, term_length)` and the aligned frame within the term.
    pub fn validate_against(&self, term_length: usize) -> Result<(), FrameError> {
        let ty = self.frame_type;
        check_term_offset_shape(ty, "term_offset", self.term_offset)?;
        check_term_offset_in_term(ty, "term_offset", self.term_offset, term_length)?;
        let end = self.term_offset as usize + self.aligned_length();
        if end > term_length {
            return Err(FrameError::new(
                Some(ty),
                "frame_length",
                self.frame_length,
                format_args!(
                    "frame at term_offset {} runs past the end of the {term_length}-byte term",
                    self.term_offset
                ),
            ));
        }
        Ok(())
    }

    /// Reads the fields without any check; `buf` holds at least 32 bytes.
    fn read(buf: &[u8]) -> Self {
        DataHeader {
            frame_length: get_i32(buf, 0),
            flags: buf[super::FLAGS_FIELD_OFFSET],
            frame_type: get_u16(buf, super::TYPE_FIELD_OFFSET),
            term_offset: get_i32(buf, TERM_OFFSET_FIELD_OFFSET),
            session_id: get_i32(buf, SESSION_ID_FIELD_OFFSET),
            stream_id: get_i32(buf, STREAM_ID_FIELD_OFFSET),
            term_id: get_i32(buf, TERM_ID_FIELD_OFFSET),
            reserved_value: get_i64(buf, RESERVED_VALUE_FIELD_OFFSET),
        }
    }
}

/// Header checks that need nothing but the header's own 32 bytes.
fn decode_shape(buf: &[u8]) -> Result<DataHeader, FrameError> {
    let common = FrameHeader::decode(buf)?;
    let ty = Some(common.frame_type);
    if buf.len() < DATA_HEADER_LENGTH {
        return Err(FrameError::new(
            ty,
            "datagram_length",
            buf.len(),
            "shorter than the 32-byte data header",
        ));
    }
    if common.frame_type != HDR_TYPE_DATA && common.frame_type != HDR_TYPE_PAD {
        return Err(FrameError::new(
            Some(HDR_TYPE_DATA),
            "type",
            format_args!("{:#06x}", common.frame_type),
            "expected DATA (0x0001) or PAD (0x0000)",
        ));
    }
    check_version(&common)?;
    let h = DataHeader::read(buf);
    check_term_offset_shape(h.frame_type, "term_offset", h.term_offset)?;
    if h.frame_length < 0 {
        return Err(FrameError::new(
            ty,
            "frame_length",
            h.frame_length,
            "negative (reserved bit 31 set)",
        ));
    }
    if h.frame_length == 0 && h.frame_type == HDR_TYPE_PAD {
        return Err(FrameError::new(
            ty,
            "frame_length",
            0,
            "a PAD frame covers at least its header",
        ));
    }
    if h.frame_length > 0 && (h.frame_length as usize) < DATA_HEADER_LENGTH {
        return Err(FrameError::new(
            ty,
            "frame_length",
            h.frame_length,
            "shorter than the 32-byte data header",
        ));
    }
    Ok(h)
}

/// A DATA/PAD datagram that passed [`parse_data_datagram`]: one heartbeat, or
/// one or more consecutive frames of one term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataDatagram<'a> {
    bytes: &'a [u8],
    first: DataHeader,
    frame_count: usize,
}

impl<'a> DataDatagram<'a> {
    /// Header of the first frame; its ids name the image the datagram is for.
    pub fn first(&self) -> &DataHeader {
        &self.first
    }

    /// Number of frames (1 for a heartbeat).
    pub fn frame_count(&self) -> usize {
        self.frame_count
    }

    /// True if the datagram is a heartbeat.
    pub fn is_heartbeat(&self) -> bool {
        self.first.is_heartbeat()
    }

    /// The datagram's bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The frames, each with its offset in the datagram.
    pub fn frames(&self) -> DataFrames<'a> {
        DataFrames {
            bytes: self.bytes,
            offset: 0,
            remaining: self.frame_count,
        }
    }
}

/// Iterator over the frames of a validated [`DataDatagram`].
#[derive(Debug, Clone)]
pub struct DataFrames<'a> {
    bytes: &'a [u8],
    offset: usize,
    remaining: usize,
}

impl Iterator for DataFrames<'_> {
    type Item = (usize, DataHeader);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        // Validated: every frame header lies inside the datagram.
        let h = DataHeader::read(&self.bytes[self.offset..]);
        let item = (self.offset, h);
        self.offset += h.aligned_length();
        self.remaining -= 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for DataFrames<'_> {}

/// Validates a DATA/PAD datagram for a term of `term_length` bytes without
/// allocating; see [`walk_data_frames`] for the rules.
pub fn parse_data_datagram(
    datagram: &[u8],
    term_length: usize,
) -> Result<DataDatagram<'_>, FrameError> {
    walk(datagram, Some(term_length), |_, _| {})
}

/// Validates a DATA/PAD datagram for a term of `term_length` bytes and
/// returns every frame with its offset in the datagram.
///
/// The datagram is accepted when:
/// * it is a heartbeat: exactly 32 bytes, DATA, `frame_length` 0; or
/// * its length is a non-zero multiple of 32, and walking it frame by frame
///   (each frame taking `align_frame(frame_length)` bytes) consumes it exactly,
///   or ends with a PAD frame whose length extends past the datagram;
///
/// and every frame has version 0, type DATA or PAD, `frame_length` ≥ 32,
/// `term_offset` in `[0, term_length)` and 32-aligned, fits in the term, and
/// continues the previous frame (`term_offset` = previous `term_offset` +
/// previous aligned length, same session, stream and term id).
pub fn walk_data_frames(
    datagram: &[u8],
    term_length: usize,
) -> Result<Vec<(usize, DataHeader)>, FrameError> {
    let mut frames = Vec::new();
    walk(datagram, Some(term_length), |offset, h| {
        frames.push((offset, *h))
    })?;
    Ok(frames)
}

/// The walk behind [`walk_data_frames`]; without a `term_length` the term
/// bound is the largest term length.
pub(crate) fn walk<'a>(
    datagram: &'a [u8],
    term_length: Option<usize>,
    mut visit: impl FnMut(usize, &DataHeader),
) -> Result<DataDatagram<'a>, FrameError> {
    let len = datagram.len();
    let term_bound = term_length.unwrap_or(TERM_MAX_LENGTH);
    let first = decode_shape(datagram)?;
    let ty = Some(first.frame_type);

    if first.is_heartbeat() {
        if len != DATA_HEADER_LENGTH {
            return Err(FrameError::new(
                ty,
                "frame_length",
                0,
                format_args!(
                    "a heartbeat must be alone in a 32-byte datagram, this one has {len} bytes"
                ),
            ));
        }
        check_term_offset_in_term(HDR_TYPE_DATA, "term_offset", first.term_offset, term_bound)?;
        visit(0, &first);
        return Ok(DataDatagram {
            bytes: datagram,
            first,
            frame_count: 1,
        });
    }
    if len & (FRAME_ALIGNMENT - 1) != 0 {
        return Err(FrameError::new(
            ty,
            "datagram_length",
            len,
            "not a multiple of the 32-byte frame alignment",
        ));
    }

    let mut offset = 0usize;
    let mut frame_count = 0usize;
    let mut expected_term_offset = first.term_offset as usize;
    loop {
        // `offset` is 32-aligned and below `len`, a multiple of 32: the whole
        // header is in the datagram.
        let h = if offset == 0 {
            first
        } else {
            decode_shape(&datagram[offset..]).map_err(|mut e| {
                e.reason = format!("{} (frame at datagram offset {offset})", e.reason);
                e
            })?
        };
        let ty = Some(h.frame_type);
        if offset > 0 {
            if h.term_offset as usize != expected_term_offset {
                return Err(FrameError::new(
                    ty,
                    "term_offset",
                    h.term_offset,
                    format_args!(
                        "frame at datagram offset {offset} does not continue the previous one \
                         (expected {expected_term_offset})"
                    ),
                ));
            }
            let same_image = [
                ("session_id", h.session_id, first.session_id),
                ("stream_id", h.stream_id, first.stream_id),
                ("term_id", h.term_id, first.term_id),
            ];
            for (field, value, expected) in same_image {
                if value != expected {
                    return Err(FrameError::new(
                        ty,
                        field,
                        value,
                        format_args!(
                            "frame at datagram offset {offset} differs from the first frame's \
                             {expected}"
                        ),
                    ));
                }
            }
            if h.frame_length == 0 {
                return Err(FrameError::new(
                    ty,
                    "frame_length",
                    0,
                    format_args!("zero-length frame at datagram offset {offset} of a batch"),
                ));
            }
        }
        check_term_offset_in_term(h.frame_type, "term_offset", h.term_offset, term_bound)?;
        let aligned = h.aligned_length();
        if h.term_offset as usize + aligned > term_bound {
            return Err(FrameError::new(
                ty,
                "frame_length",
                h.frame_length,
                format_args!(
                    "frame at term_offset {} runs past the end of the {term_bound}-byte term",
                    h.term_offset
                ),
            ));
        }
        visit(offset, &h);
        frame_count += 1;
        let left = len - offset;
        if aligned > left {
            if h.is_pad() {
                // Only a PAD's header travels; its padding lies beyond the datagram.
                break;
            }
            return Err(FrameError::new(
                ty,
                "frame_length",
                h.frame_length,
                format_args!(
                    "DATA frame at datagram offset {offset} needs {aligned} bytes, {left} remain"
                ),
            ));
        }
        offset += aligned;
        if offset == len {
            break;
        }
        expected_term_offset = h.term_offset as usize + aligned;
    }
    Ok(DataDatagram {
        bytes: datagram,
        first,
        frame_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::test_util::{Corruption, VecCorruption, XorShift};

    const TERM: usize = 64 * 1024;

    fn random_header(rng: &mut XorShift) -> DataHeader {
        let frame_type = if rng.below(4) == 0 {
            HDR_TYPE_PAD
        } else {
            HDR_TYPE_DATA
        };
        let frame_length = match rng.below(3) {
            0 if frame_type == HDR_TYPE_DATA => 0,
            _ => 32 + rng.below(1000) as i32,
        };
        DataHeader {
            frame_length,
            flags: rng.next_u8(),
            frame_type,
            term_offset: (rng.below(1 << 20) as i32) * 32,
            session_id: rng.next_i32(),
            stream_id: rng.next_i32(),
            term_id: rng.next_i32(),
            reserved_value: rng.next_i64(),
        }
    }

    /// Encodes frames of `payload_lens` back to back from `term_offset`.
    fn batch(term_offset: i32, payload_lens: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut to = term_offset;
        for (i, &n) in payload_lens.iter().enumerate() {
            let mut h = DataHeader::data(7, 10, 3, to, n);
            h.reserved_value = i as i64;
            let start = out.len();
            out.resize(start + align_frame(32 + n), 0);
            h.encode(&mut out[start..]);
            for (k, b) in out[start + 32..start + 32 + n].iter_mut().enumerate() {
                *b = k as u8;
            }
            to += align_frame(32 + n) as i32;
        }
        out
    }

    #[test]
    fn should_round_trip_random_headers() {
        let mut rng = XorShift::new(1);
        for _ in 0..10_000 {
            let h = random_header(&mut rng);
            let mut buf = vec![0u8; 32 + 1000];
            assert_eq!(h.encode(&mut buf), 32);
            assert_eq!(DataHeader::decode(&buf).unwrap(), h);
            assert_eq!(h.to_bytes()[..], buf[..32]);
        }
    }

    #[test]
    fn should_lay_out_data_header_as_in_spec() {
        let h = DataHeader {
            frame_length: 0x0000_0123,
            flags: BEGIN_FLAG | END_FLAG,
            frame_type: HDR_TYPE_DATA,
            term_offset: 0x0102_0300,
            session_id: -2,
            stream_id: 0x0A0B_0C0D,
            term_id: 0x1122_3344,
            reserved_value: 0x0102_0304_0506_0708,
        };
        #[rustfmt::skip]
        let expected: [u8; 32] = [
            0x23, 0x01, 0x00, 0x00,  0x00, 0xC0, 0x01, 0x00, // length, version, flags, type
            0x00, 0x03, 0x02, 0x01,                          // 8  term_offset
            0xFE, 0xFF, 0xFF, 0xFF,                          // 12 session_id
            0x0D, 0x0C, 0x0B, 0x0A,                          // 16 stream_id
            0x44, 0x33, 0x22, 0x11,                          // 20 term_id
            0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // 24 reserved_value
        ];
        assert_eq!(h.to_bytes(), expected);
        let mut dgram = vec![0u8; align_frame(0x123)];
        dgram[..32].copy_from_slice(&expected);
        assert_eq!(DataHeader::decode(&dgram).unwrap(), h);
    }

    #[test]
    fn should_build_heartbeat_with_eos_and_revoked_flags() {
        let mut h = DataHeader::heartbeat(1, 2, 3, 4096);
        assert!(h.is_heartbeat() && h.is_begin() && h.is_end() && !h.is_eos());
        h.flags |= EOS_FLAG | REVOKED_FLAG;
        let b = h.to_bytes();
        assert_eq!(b[5], 0xF0);
        assert_eq!(&b[0..4], &[0, 0, 0, 0]);
        let d = parse_data_datagram(&b, TERM).unwrap();
        assert!(d.is_heartbeat() && d.first().is_eos() && d.first().is_revoked());
        assert_eq!(walk_data_frames(&b, TERM).unwrap(), vec![(0, h)]);
    }

    #[test]
    fn should_reject_each_malformed_header_field() {
        let good = DataHeader::data(7, 10, 3, 64, 40);
        let cases: Vec<Corruption> = vec![
            ("version", Box::new(|b: &mut [u8]| b[4] = 1)),
            ("type", Box::new(|b: &mut [u8]| b[6] = 0x02)),
            ("type", Box::new(|b: &mut [u8]| b[7] = 0x01)),
            ("term_offset", Box::new(|b: &mut [u8]| put_i32(b, 8, -32))),
            ("term_offset", Box::new(|b: &mut [u8]| put_i32(b, 8, 65))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, -1))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 31))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 1))),
            ("frame_length", Box::new(|b: &mut [u8]| put_i32(b, 0, 97))),
            (
                "frame_length",
                Box::new(|b: &mut [u8]| {
                    put_i32(b, 0, 0);
                    b[6] = 0;
                }),
            ),
        ];
        for (field, corrupt) in cases {
            let mut buf = [0u8; 96];
            good.encode(&mut buf);
            corrupt(&mut buf);
            let e = DataHeader::decode(&buf).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            let e = walk_data_frames(&buf, TERM).unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
        assert_eq!(
            DataHeader::decode(&[0u8; 31]).unwrap_err().field,
            "datagram_length"
        );
    }

    #[test]
    fn should_check_header_against_term() {
        let h = DataHeader::data(1, 2, 3, (TERM - 64) as i32, 32);
        h.validate_against(TERM).unwrap();
        let e = DataHeader {
            term_offset: TERM as i32,
            ..h
        }
        .validate_against(TERM)
        .unwrap_err();
        assert_eq!(e.field, "term_offset");
        let e = DataHeader {
            frame_length: 65,
            ..h
        }
        .validate_against(TERM)
        .unwrap_err();
        assert_eq!(e.field, "frame_length");
    }

    #[test]
    fn should_walk_consecutive_frames() {
        let d = batch(1024, &[0, 100, 33, 1376]);
        let frames = walk_data_frames(&d, TERM).unwrap();
        let offsets: Vec<usize> = frames.iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets, vec![0, 32, 192, 288]);
        assert_eq!(frames[1].1.term_offset, 1024 + 32);
        assert_eq!(frames[3].1.payload_len(), 1376);
        let parsed = parse_data_datagram(&d, TERM).unwrap();
        assert_eq!(parsed.frame_count(), 4);
        assert_eq!(parsed.frames().collect::<Vec<_>>(), frames);
        assert_eq!(parsed.bytes().len(), d.len());
    }

    #[test]
    fn should_accept_trailing_pad_extending_past_datagram() {
        let mut d = batch(TERM as i32 - 256, &[64]);
        let pad = DataHeader::pad(7, 10, 3, TERM as i32 - 160, 160);
        d.extend_from_slice(&pad.to_bytes());
        let frames = walk_data_frames(&d, TERM).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1], (96, pad));
        // A DATA frame may not do the same.
        let mut d = batch(0, &[0]);
        d.extend_from_slice(&DataHeader::data(7, 10, 3, 32, 64).to_bytes());
        let e = walk_data_frames(&d, TERM).unwrap_err();
        assert_eq!(
            (e.field, e.frame_type),
            ("frame_length", Some(HDR_TYPE_DATA))
        );
        // Nor may a PAD run past the end of the term.
        let pad = DataHeader::pad(7, 10, 3, TERM as i32 - 64, 96);
        let e = walk_data_frames(&pad.to_bytes(), TERM).unwrap_err();
        assert_eq!(e.field, "frame_length");
    }

    #[test]
    fn should_reject_malformed_batches() {
        let base = batch(512, &[10, 70, 0]);
        let cases: Vec<VecCorruption> = vec![
            (
                "term_offset",
                Box::new(|d: &mut Vec<u8>| put_i32(d, 64 + 8, 512 + 64 + 32)),
            ),
            (
                "term_offset",
                Box::new(|d: &mut Vec<u8>| put_i32(d, 64 + 8, 512)),
            ),
            (
                "session_id",
                Box::new(|d: &mut Vec<u8>| put_i32(d, 64 + 12, 8)),
            ),
            (
                "stream_id",
                Box::new(|d: &mut Vec<u8>| put_i32(d, 64 + 16, 11)),
            ),
            (
                "term_id",
                Box::new(|d: &mut Vec<u8>| put_i32(d, 64 + 20, 4)),
            ),
            (
                "frame_length",
                Box::new(|d: &mut Vec<u8>| put_i32(d, 64, 0)),
            ),
            (
                "frame_length",
                Box::new(|d: &mut Vec<u8>| put_i32(d, 64, -32)),
            ),
            (
                "frame_length",
                Box::new(|d: &mut Vec<u8>| put_i32(d, 64, 16)),
            ),
            // The first frame's payload is then read as the next header.
            ("type", Box::new(|d: &mut Vec<u8>| put_i32(d, 0, 32))),
            (
                "frame_length",
                Box::new(|d: &mut Vec<u8>| put_i32(d, 0, 250)),
            ),
            ("type", Box::new(|d: &mut Vec<u8>| d[64 + 6] = 0x05)),
            ("version", Box::new(|d: &mut Vec<u8>| d[192 + 4] = 2)),
            ("datagram_length", Box::new(|d: &mut Vec<u8>| d.push(0))),
            (
                "datagram_length",
                Box::new(|d: &mut Vec<u8>| d.truncate(16)),
            ),
            ("frame_length", Box::new(|d: &mut Vec<u8>| d.truncate(32))),
            (
                "frame_length",
                Box::new(|d: &mut Vec<u8>| d.extend_from_slice(&[0u8; 32])),
            ),
            (
                "term_offset",
                Box::new(|d: &mut Vec<u8>| put_i32(d, 8, TERM as i32)),
            ),
        ];
        walk_data_frames(&base, TERM).unwrap();
        for (i, (field, corrupt)) in cases.into_iter().enumerate() {
            let mut d = base.clone();
            corrupt(&mut d);
            let e = walk_data_frames(&d, TERM).unwrap_err();
            assert_eq!(e.field, field, "case {i}: {e}");
        }
    }

    #[test]
    fn should_reject_heartbeat_that_is_not_alone() {
        let mut d = DataHeader::heartbeat(1, 2, 3, 0).to_bytes().to_vec();
        d.extend_from_slice(&[0u8; 32]);
        let e = walk_data_frames(&d, TERM).unwrap_err();
        assert_eq!(e.field, "frame_length");
        assert!(e.reason.contains("64 bytes"), "{e}");
        let hb = DataHeader::heartbeat(1, 2, 3, TERM as i32);
        assert_eq!(
            walk_data_frames(&hb.to_bytes(), TERM).unwrap_err().field,
            "term_offset"
        );
    }

    #[test]
    fn should_reject_every_truncation_without_panicking() {
        for lens in [
            &[0usize][..],
            &[1],
            &[31],
            &[32],
            &[100],
            &[1376],
            &[0, 0],
            &[64, 5],
        ] {
            let d = batch(2048, lens);
            walk_data_frames(&d, TERM).unwrap();
            let boundaries: Vec<usize> = walk_data_frames(&d, TERM)
                .unwrap()
                .iter()
                .map(|(o, _)| *o)
                .skip(1)
                .collect();
            for cut in 0..d.len() {
                let r = walk_data_frames(&d[..cut], TERM);
                if boundaries.contains(&cut) {
                    // Cutting a batch at a frame boundary leaves a valid, shorter batch.
                    assert!(r.is_ok());
                } else {
                    assert!(r.is_err(), "{lens:?} cut at {cut}");
                }
                if cut >= 32 && cut < 32 + lens[0] {
                    assert!(DataHeader::decode(&d[..cut]).is_err());
                }
            }
        }
        let hb = DataHeader::heartbeat(1, 2, 3, 0).to_bytes();
        for cut in 0..32 {
            assert_eq!(
                walk_data_frames(&hb[..cut], TERM).unwrap_err().field,
                "datagram_length"
            );
        }
    }
}
