//! The layout of `archive.catalog` (Aeron Archive catalog version 3.1.0):
//! what Aeron's ArchiveTool and archive read, and what sulis writes.
//!
//! ```text
//! 0                   32                                          capacity
//! +-------------------+----------------+----------------+---- ... ---+
//! | CatalogHeader     | entry 0        | entry 1        |   zeros    |
//! +-------------------+----------------+----------------+---- ... ---+
//!
//! CatalogHeader (32 bytes): version i32 @0 (0x030100), length i32 @4 (32),
//!   nextRecordingId i64 @8, alignment i32 @16 (64), zeros to 32.
//!
//! entry: RecordingDescriptorHeader (32 bytes): length i32 @0 (the entry's
//!   length less this header, padding included), state i32 @4
//!   (INVALID 0 / VALID 1 / DELETED 2), checksum i32 @8, zeros to 32;
//!   then the RecordingDescriptor's 80-byte block (no SBE header) and its
//!   three var strings (stripped channel, original channel, source
//!   identity), padded with zeros to the alignment.
//! ```
//!
//! Entries follow each other; the first with `length <= 0` ends the list.
//! Everything is little-endian. The functions here work on byte slices and
//! check every length: a torn or corrupt catalog gives a [`CatalogError`]
//! naming the entry and what was wrong with it.

use super::messages::{recording_state, RecordingDescriptor};
use crate::sbe::HEADER_LENGTH;
use std::fmt;

/// File name inside the archive directory.
pub const CATALOG_FILE: &str = "archive.catalog";
/// Catalog format 3.1.0, packed as a semantic version.
pub const CATALOG_VERSION: i32 = 0x03_01_00;
/// Major version a reader accepts.
pub const CATALOG_MAJOR_VERSION: i32 = 3;
/// Length of the catalog header (and offset of the first entry).
pub const CATALOG_HEADER_LENGTH: usize = 32;
/// Length of an entry's header.
pub const DESCRIPTOR_HEADER_LENGTH: usize = 32;
/// Entry alignment of new catalogs (a cache line).
pub const CATALOG_ALIGNMENT: usize = 64;
/// Catalog capacity of a new archive (Aeron's default, 1 MiB).
pub const DEFAULT_CATALOG_CAPACITY: usize = 1024 * 1024;

/// CatalogHeader field offsets.
pub mod header {
    /// Format version, i32.
    pub const VERSION: usize = 0;
    /// Header length, i32.
    pub const LENGTH: usize = 4;
    /// Id the next recording gets, i64.
    pub const NEXT_RECORDING_ID: usize = 8;
    /// Entry alignment, i32.
    pub const ALIGNMENT: usize = 16;
}

/// RecordingDescriptorHeader field offsets (from the entry's start).
pub mod entry {
    /// Body length (entry length less the 32-byte header), i32.
    pub const LENGTH: usize = 0;
    /// Recording state, i32.
    pub const STATE: usize = 4;
    /// Checksum of the body, i32 (0 without a checksum).
    pub const CHECKSUM: usize = 8;
}

/// Offsets of the RecordingDescriptor fields from the entry's start (the
/// header, then the 80-byte block).
pub mod descriptor {
    use super::DESCRIPTOR_HEADER_LENGTH as H;
    /// i64: the session that last changed the entry.
    pub const CONTROL_SESSION_ID: usize = H;
    /// i64: the request that last changed the entry.
    pub const CORRELATION_ID: usize = H + 8;
    /// i64.
    pub const RECORDING_ID: usize = H + 16;
    /// i64, epoch ms.
    pub const START_TIMESTAMP: usize = H + 24;
    /// i64, epoch ms; −1 while recording.
    pub const STOP_TIMESTAMP: usize = H + 32;
    /// i64.
    pub const START_POSITION: usize = H + 40;
    /// i64; −1 while recording.
    pub const STOP_POSITION: usize = H + 48;
    /// i32.
    pub const INITIAL_TERM_ID: usize = H + 56;
    /// i32.
    pub const SEGMENT_FILE_LENGTH: usize = H + 60;
    /// i32.
    pub const TERM_BUFFER_LENGTH: usize = H + 64;
    /// i32.
    pub const MTU_LENGTH: usize = H + 68;
    /// i32.
    pub const SESSION_ID: usize = H + 72;
    /// i32.
    pub const STREAM_ID: usize = H + 76;
    /// Start of the var strings.
    pub const VAR_DATA: usize = H + 80;
}

/// Block length of a RecordingDescriptor.
pub const DESCRIPTOR_BLOCK_LENGTH: usize = 80;

/// What is wrong with a catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogError {
    /// Human-readable reason.
    pub message: String,
    /// The operating system's error number, when a file operation failed.
    pub os_error: Option<i32>,
}

impl CatalogError {
    /// A reason that is not the operating system's.
    pub fn new(message: impl Into<String>) -> CatalogError {
        CatalogError {
            message: message.into(),
            os_error: None,
        }
    }
}

impl fmt::Display for CatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CatalogError {}

fn get_i32(b: &[u8], o: usize) -> i32 {
    i32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn get_i64(b: &[u8], o: usize) -> i64 {
    i64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// `n` rounded up to a multiple of `alignment` (a power of two).
pub fn align(n: usize, alignment: usize) -> usize {
    (n + alignment - 1) & !(alignment - 1)
}

/// A catalog header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatalogHeader {
    /// Format version.
    pub version: i32,
    /// Id the next recording gets.
    pub next_recording_id: i64,
    /// Entry alignment.
    pub alignment: usize,
}

impl CatalogHeader {
    /// The header of a new catalog.
    pub fn new() -> CatalogHeader {
        CatalogHeader {
            version: CATALOG_VERSION,
            next_recording_id: 0,
            alignment: CATALOG_ALIGNMENT,
        }
    }

    /// Writes the header into the first 32 bytes of `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[..CATALOG_HEADER_LENGTH].fill(0);
        b[header::VERSION..header::VERSION + 4].copy_from_slice(&self.version.to_le_bytes());
        b[header::LENGTH..header::LENGTH + 4]
            .copy_from_slice(&(CATALOG_HEADER_LENGTH as i32).to_le_bytes());
        b[header::NEXT_RECORDING_ID..header::NEXT_RECORDING_ID + 8]
            .copy_from_slice(&self.next_recording_id.to_le_bytes());
        b[header::ALIGNMENT..header::ALIGNMENT + 4]
            .copy_from_slice(&(self.alignment as i32).to_le_bytes());
    }

    /// Reads and checks the header at the start of `b`.
    pub fn read(b: &[u8]) -> Result<CatalogHeader, CatalogError> {
        if b.len() < CATALOG_HEADER_LENGTH {
            return Err(CatalogError::new(format!(
                "catalog of {} bytes is shorter than its {CATALOG_HEADER_LENGTH}-byte header",
                b.len()
            )));
        }
        let version = get_i32(b, header::VERSION);
        if version >> 16 != CATALOG_MAJOR_VERSION {
            return Err(CatalogError::new(format!(
                "catalog version {}.{}.{} is not {CATALOG_MAJOR_VERSION}.x (Aeron Archive's 3.1.0 format); \
                 older catalogs need Aeron's ArchiveTool migrate",
                (version >> 16) & 0xff,
                (version >> 8) & 0xff,
                version & 0xff
            )));
        }
        let length = get_i32(b, header::LENGTH);
        if length != CATALOG_HEADER_LENGTH as i32 {
            return Err(CatalogError::new(format!(
                "catalog header length {length} is not {CATALOG_HEADER_LENGTH}"
            )));
        }
        let alignment = get_i32(b, header::ALIGNMENT);
        if alignment <= 0 || !(alignment as u32).is_power_of_two() || alignment < 32 {
            return Err(CatalogError::new(format!(
                "catalog alignment {alignment} is not a power of two of at least 32"
            )));
        }
        let next_recording_id = get_i64(b, header::NEXT_RECORDING_ID);
        if next_recording_id < 0 {
            return Err(CatalogError::new(format!(
                "catalog next recording id {next_recording_id} is negative"
            )));
        }
        Ok(CatalogHeader {
            version,
            next_recording_id,
            alignment: alignment as usize,
        })
    }
}

impl Default for CatalogHeader {
    fn default() -> Self {
        CatalogHeader::new()
    }
}

/// An entry as stored: its state, checksum and descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogEntry {
    /// Where the entry starts in the file.
    pub offset: usize,
    /// Its whole length (header included, padding included).
    pub frame_length: usize,
    /// INVALID, VALID or DELETED ([`recording_state`]).
    pub state: i32,
    /// Checksum field.
    pub checksum: i32,
    /// The descriptor (control session and correlation ids as stored).
    pub descriptor: RecordingDescriptor,
}

/// The whole length an entry for `d` takes at `alignment`.
pub fn entry_length(d: &RecordingDescriptor, alignment: usize) -> usize {
    align(
        DESCRIPTOR_HEADER_LENGTH
            + DESCRIPTOR_BLOCK_LENGTH
            + 12
            + d.stripped_channel.len()
            + d.original_channel.len()
            + d.source_identity.len(),
        alignment,
    )
}

/// Encodes an entry for `d` (header, block, strings, zero padding).
pub fn encode_entry(d: &RecordingDescriptor, state: i32, alignment: usize) -> Vec<u8> {
    let frame_length = entry_length(d, alignment);
    let mut out = Vec::with_capacity(frame_length);
    out.extend_from_slice(&((frame_length - DESCRIPTOR_HEADER_LENGTH) as i32).to_le_bytes());
    out.extend_from_slice(&state.to_le_bytes());
    out.resize(DESCRIPTOR_HEADER_LENGTH, 0);
    // The block and strings of the SBE message, without its header.
    out.extend_from_slice(&d.encode()[HEADER_LENGTH..]);
    out.resize(frame_length, 0);
    out
}

/// Decodes the entry at `offset` of `catalog`: `Ok(None)` at the end of the
/// list (a zero or negative length, or no room left for a header).
pub fn decode_entry(catalog: &[u8], offset: usize) -> Result<Option<CatalogEntry>, CatalogError> {
    if offset + DESCRIPTOR_HEADER_LENGTH > catalog.len() {
        return Ok(None);
    }
    let length = get_i32(catalog, offset + entry::LENGTH);
    if length <= 0 {
        return Ok(None);
    }
    let frame_length = DESCRIPTOR_HEADER_LENGTH + length as usize;
    let bad = |what: String| CatalogError::new(format!("catalog entry at offset {offset}: {what}"));
    if offset + frame_length > catalog.len() {
        return Err(bad(format!(
            "length {length} runs past the end of the catalog ({} bytes)",
            catalog.len()
        )));
    }
    if (length as usize) < DESCRIPTOR_BLOCK_LENGTH + 12 {
        return Err(bad(format!(
            "length {length} cannot hold a recording descriptor"
        )));
    }
    let state = get_i32(catalog, offset + entry::STATE);
    if !(recording_state::INVALID..=recording_state::DELETED).contains(&state) {
        return Err(bad(format!(
            "state {state} is none of INVALID, VALID, DELETED"
        )));
    }
    // Re-frame the body as an SBE message to decode it with the one codec.
    let body = &catalog[offset + DESCRIPTOR_HEADER_LENGTH..offset + frame_length];
    let mut message = Vec::with_capacity(HEADER_LENGTH + body.len());
    crate::sbe::Header {
        block_length: DESCRIPTOR_BLOCK_LENGTH as u16,
        template_id: RecordingDescriptor::TEMPLATE_ID,
        schema_id: super::messages::SCHEMA_ID,
        version: super::messages::SCHEMA_VERSION,
    }
    .encode(&mut message);
    message.extend_from_slice(body);
    let descriptor = RecordingDescriptor::decode(&message).map_err(|e| bad(e.message))?;
    Ok(Some(CatalogEntry {
        offset,
        frame_length,
        state,
        checksum: get_i32(catalog, offset + entry::CHECKSUM),
        descriptor,
    }))
}

/// The bytes of the entry at `offset` as a RecordingDescriptor message on
/// the wire: the SBE header, then the entry's body (padding included, as
/// Aeron's archive sends it), with the given session and correlation ids.
pub fn descriptor_message(
    catalog: &[u8],
    e: &CatalogEntry,
    control_session_id: i64,
    correlation_id: i64,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LENGTH + e.frame_length);
    crate::sbe::Header {
        block_length: DESCRIPTOR_BLOCK_LENGTH as u16,
        template_id: RecordingDescriptor::TEMPLATE_ID,
        schema_id: super::messages::SCHEMA_ID,
        version: super::messages::SCHEMA_VERSION,
    }
    .encode(&mut out);
    out.extend_from_slice(&control_session_id.to_le_bytes());
    out.extend_from_slice(&correlation_id.to_le_bytes());
    out.extend_from_slice(&catalog[e.offset + descriptor::RECORDING_ID..e.offset + e.frame_length]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(id: i64) -> RecordingDescriptor {
        RecordingDescriptor {
            control_session_id: 0,
            correlation_id: 0,
            recording_id: id,
            start_timestamp: 1_700_000_000_000,
            stop_timestamp: -1,
            start_position: 0,
            stop_position: -1,
            initial_term_id: 7,
            segment_file_length: 128 * 1024 * 1024,
            term_buffer_length: 64 * 1024,
            mtu_length: 1408,
            session_id: -5,
            stream_id: 1001,
            stripped_channel: "aeron:udp?endpoint=localhost:40123".into(),
            original_channel: "aeron:udp?endpoint=localhost:40123|alias=x".into(),
            source_identity: "127.0.0.1:55555".into(),
        }
    }

    #[test]
    fn should_lay_out_an_entry_as_aeron_does() {
        let d = descriptor(3);
        let e = encode_entry(&d, recording_state::VALID, CATALOG_ALIGNMENT);
        // 32 + 80 + 12 + 34 + 42 + 15 = 215 → 256.
        assert_eq!(e.len(), 256);
        assert_eq!(get_i32(&e, entry::LENGTH), 224);
        assert_eq!(get_i32(&e, entry::STATE), 1);
        assert_eq!(get_i64(&e, descriptor::RECORDING_ID), 3);
        assert_eq!(get_i64(&e, descriptor::STOP_POSITION), -1);
        assert_eq!(get_i32(&e, descriptor::STREAM_ID), 1001);
        assert_eq!(get_i32(&e, descriptor::VAR_DATA), 34);
        let mut catalog = vec![0u8; 1024];
        CatalogHeader::new().write(&mut catalog);
        catalog[32..32 + e.len()].copy_from_slice(&e);
        let got = decode_entry(&catalog, 32).unwrap().unwrap();
        assert_eq!(got.descriptor, d);
        assert_eq!(got.frame_length, 256);
        assert_eq!(
            decode_entry(&catalog, 32 + 256).unwrap(),
            None,
            "end of the list"
        );
        // On the wire: header, ids, then the stored bytes from recordingId on.
        let wire = descriptor_message(&catalog, &got, 9, 10);
        assert_eq!(wire.len(), 8 + 256 - 32);
        let decoded = RecordingDescriptor::decode(&wire).unwrap();
        assert_eq!(
            (decoded.control_session_id, decoded.correlation_id),
            (9, 10)
        );
        assert_eq!(decoded.source_identity, d.source_identity);
    }

    #[test]
    fn should_read_and_check_the_header() {
        let mut b = vec![0u8; 64];
        let h = CatalogHeader {
            next_recording_id: 42,
            ..CatalogHeader::new()
        };
        h.write(&mut b);
        assert_eq!(&b[..4], &[0, 1, 3, 0]);
        assert_eq!(CatalogHeader::read(&b).unwrap(), h);
        let mut old = b.clone();
        old[..4].copy_from_slice(&0x02_00_00i32.to_le_bytes());
        assert!(CatalogHeader::read(&old)
            .unwrap_err()
            .message
            .contains("catalog version 2.0.0 is not 3.x"));
        let mut odd = b.clone();
        odd[16..20].copy_from_slice(&48i32.to_le_bytes());
        assert!(CatalogHeader::read(&odd)
            .unwrap_err()
            .message
            .contains("alignment 48"));
        assert!(CatalogHeader::read(&b[..10])
            .unwrap_err()
            .message
            .contains("shorter than its 32-byte header"));
    }

    #[test]
    fn should_name_the_entry_and_the_fault_in_a_corrupt_catalog() {
        let e = encode_entry(&descriptor(0), recording_state::VALID, 64);
        let mut catalog = vec![0u8; 32 + e.len()];
        catalog[32..].copy_from_slice(&e);
        let err = |c: &[u8]| decode_entry(c, 32).unwrap_err().message;
        let mut long = catalog.clone();
        long[32..36].copy_from_slice(&4096i32.to_le_bytes());
        assert!(err(&long).contains("offset 32: length 4096 runs past the end"));
        let mut state = catalog.clone();
        state[36..40].copy_from_slice(&9i32.to_le_bytes());
        assert!(err(&state).contains("state 9"));
        let mut string = catalog.clone();
        string[32 + 32 + 80..32 + 32 + 84].copy_from_slice(&999i32.to_le_bytes());
        assert!(err(&string).contains("stripped_channel claims 999 bytes"));
        let mut short = catalog.clone();
        short[32..36].copy_from_slice(&40i32.to_le_bytes());
        assert!(err(&short).contains("cannot hold a recording descriptor"));
    }
}
