//! Frame checksums, as Aeron's archive keeps them (`aeron.archive.record.checksum`,
//! `aeron.archive.replay.checksum`, ArchiveTool `checksum` / `verify -checksum`).
//!
//! With a record checksum, every DATA frame is written to its segment file
//! with its **session id field replaced by the checksum** of the frame's
//! body: the bytes after the 32-byte header up to the frame's aligned end
//! (the alignment bytes included). Padding frames keep theirs. The catalog
//! entry of each recording then carries a checksum of its descriptor body
//! too. A replay with a replay checksum recomputes each frame's and stops at
//! the first mismatch. The algorithms are the two Aeron ships, CRC-32
//! (`io.aeron.archive.checksum.Crc32`) and CRC-32C (`...Crc32c`), stored as
//! the `i32` of the CRC's 32 bits, little-endian like every field.
//!
//! ```text
//!  0               4       6       8              12              16
//!  +---------------+-------+-------+---------------+---------------+--- ...
//!  | frame length  |vr|fl  | type  | term offset   | CHECKSUM      |  stream id, term id, reserved value
//!  +---------------+-------+-------+---------------+---------------+--- ...
//!  |<------------------ header: 32 bytes ------------------------------->|<- body, to the aligned end: checked ->|
//! ```

use crate::frame_fields::{frame_length, frame_type, session_id};
use sulis_protocol::frame::{
    DATA_HEADER_LENGTH, FRAME_ALIGNMENT, HDR_TYPE_DATA, SESSION_ID_FIELD_OFFSET,
};

/// A checksum algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checksum {
    /// CRC-32 (IEEE 802.3), Aeron's `io.aeron.archive.checksum.Crc32`.
    Crc32,
    /// CRC-32C (Castagnoli), Aeron's `io.aeron.archive.checksum.Crc32c`.
    Crc32c,
}

impl Checksum {
    /// Parses `crc32` or `crc32c`, or Aeron's class names for them.
    pub fn parse(name: &str) -> Result<Checksum, String> {
        match name.trim() {
            "crc32" | "CRC32" | "io.aeron.archive.checksum.Crc32" => Ok(Checksum::Crc32),
            "crc32c" | "CRC32C" | "io.aeron.archive.checksum.Crc32c" => Ok(Checksum::Crc32c),
            other => Err(format!(
                "unknown checksum '{other}': use crc32 or crc32c (or Aeron's class names \
                 io.aeron.archive.checksum.Crc32 / Crc32c)"
            )),
        }
    }

    /// The short name (`crc32`, `crc32c`).
    pub fn name(self) -> &'static str {
        match self {
            Checksum::Crc32 => "crc32",
            Checksum::Crc32c => "crc32c",
        }
    }

    /// The checksum of `bytes`.
    pub fn compute(self, bytes: &[u8]) -> i32 {
        (match self {
            Checksum::Crc32 => crc32fast::hash(bytes),
            Checksum::Crc32c => crc32c::crc32c(bytes),
        }) as i32
    }

    /// Writes the checksum of every DATA frame of `frames` (whole, aligned
    /// frames) into its session id field.
    pub fn stamp(self, frames: &mut [u8]) {
        let mut at = 0;
        while at + DATA_HEADER_LENGTH <= frames.len() {
            let length = frame_length(frames, at);
            if length <= 0 {
                break;
            }
            let end = (at + align(length as usize)).min(frames.len());
            if frame_type(frames, at) == HDR_TYPE_DATA {
                let sum = self.compute(&frames[at + DATA_HEADER_LENGTH..end]);
                let field = at + SESSION_ID_FIELD_OFFSET;
                frames[field..field + 4].copy_from_slice(&sum.to_le_bytes());
            }
            at = end;
        }
    }

    /// Checks the DATA frame at the start of `frame` (its aligned length):
    /// `Err((recorded, computed))` when they differ.
    pub fn check(self, frame: &[u8]) -> Result<(), (i32, i32)> {
        if frame.len() < DATA_HEADER_LENGTH || frame_type(frame, 0) != HDR_TYPE_DATA {
            return Ok(());
        }
        let recorded = session_id(frame, 0);
        let computed = self.compute(&frame[DATA_HEADER_LENGTH..]);
        if recorded == computed {
            Ok(())
        } else {
            Err((recorded, computed))
        }
    }
}

fn align(length: usize) -> usize {
    (length + FRAME_ALIGNMENT - 1) & !(FRAME_ALIGNMENT - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sulis_protocol::frame::{HDR_TYPE_PAD, TYPE_FIELD_OFFSET};

    #[test]
    fn should_compute_the_standard_check_values() {
        // The check values of both CRCs over "123456789".
        assert_eq!(Checksum::Crc32.compute(b"123456789") as u32, 0xCBF4_3926);
        assert_eq!(Checksum::Crc32c.compute(b"123456789") as u32, 0xE306_9283);
    }

    #[test]
    fn should_parse_short_and_aeron_class_names_and_name_a_bad_one() {
        assert_eq!(Checksum::parse("crc32c"), Ok(Checksum::Crc32c));
        assert_eq!(
            Checksum::parse("io.aeron.archive.checksum.Crc32"),
            Ok(Checksum::Crc32)
        );
        let e = Checksum::parse("md5").unwrap_err();
        assert!(e.contains("unknown checksum 'md5'"), "{e}");
    }

    fn frame(kind: u16, payload: &[u8], session: i32) -> Vec<u8> {
        let mut f = vec![0u8; align(DATA_HEADER_LENGTH + payload.len())];
        f[0..4].copy_from_slice(&((DATA_HEADER_LENGTH + payload.len()) as i32).to_le_bytes());
        f[TYPE_FIELD_OFFSET..TYPE_FIELD_OFFSET + 2].copy_from_slice(&kind.to_le_bytes());
        f[SESSION_ID_FIELD_OFFSET..SESSION_ID_FIELD_OFFSET + 4]
            .copy_from_slice(&session.to_le_bytes());
        f[DATA_HEADER_LENGTH..DATA_HEADER_LENGTH + payload.len()].copy_from_slice(payload);
        f
    }

    #[test]
    fn should_stamp_data_frames_only_then_check_them_and_find_a_changed_byte() {
        let a = frame(HDR_TYPE_DATA, b"hello", 7);
        let pad = frame(HDR_TYPE_PAD, &[0; 40], 7);
        let b = frame(HDR_TYPE_DATA, &[9; 70], 7);
        let mut block = [a.clone(), pad.clone(), b.clone()].concat();
        for c in [Checksum::Crc32, Checksum::Crc32c] {
            c.stamp(&mut block);
            let (fa, rest) = block.split_at(a.len());
            let (fpad, fb) = rest.split_at(pad.len());
            // The body to the aligned end, padding bytes included.
            let want = c.compute(&a[DATA_HEADER_LENGTH..]);
            assert_eq!(
                &fa[SESSION_ID_FIELD_OFFSET..SESSION_ID_FIELD_OFFSET + 4],
                &want.to_le_bytes()
            );
            assert_eq!(fpad, &pad[..], "a padding frame keeps its session id");
            assert_eq!(c.check(fa), Ok(()));
            assert_eq!(c.check(fb), Ok(()));
            let mut bad = fb.to_vec();
            bad[DATA_HEADER_LENGTH + 3] ^= 1;
            let (recorded, computed) = c.check(&bad).unwrap_err();
            assert_ne!(recorded, computed);
        }
    }
}
