//! The layout of a cluster member's `recording.log`, as Aeron's
//! `RecordingLog` and `ClusterTool recording-log` read it: a sequence of
//! entries, each 64-byte aligned, little-endian.
//!
//! ```text
//!   0  recording_id            i64   the archive recording (log or snapshot)
//!   8  leadership_term_id      i64
//!  16  term_base_log_position  i64   where the term begins
//!  24  log_position            i64   where it ends (-1 while open) / the snapshot's position
//!  32  timestamp               i64   cluster time
//!  40  service_id              i32   -1 for a term and the consensus module's snapshot
//!  44  entry_type              i32   TERM 0, SNAPSHOT 1, STANDBY_SNAPSHOT 2; bit 31 set = invalid
//!  48  archive_endpoint        u32 length + ASCII (standby snapshots only)
//! ```
//!
//! An entry is appended whole and changed in place only by its
//! `log_position` (a term's end) and its type word (invalidation), so a file
//! a crash cut short ends in a torn entry, which reading reports rather than
//! guesses at.

use std::fmt;

/// Entry type: a leadership term of the log.
pub const ENTRY_TYPE_TERM: i32 = 0;
/// Entry type: a snapshot of a service or the consensus module.
pub const ENTRY_TYPE_SNAPSHOT: i32 = 1;
/// Entry type: a snapshot held by a standby's archive, at `archive_endpoint`.
pub const ENTRY_TYPE_STANDBY_SNAPSHOT: i32 = 2;
/// Bit set in the type word of an invalidated entry.
pub const ENTRY_TYPE_INVALID_FLAG: i32 = 1 << 31;

/// Offset of `log_position` in an entry (changed in place when a term ends).
pub const LOG_POSITION_OFFSET: usize = 24;
/// Offset of the type word (changed in place when an entry is invalidated).
pub const ENTRY_TYPE_OFFSET: usize = 44;
/// Offset of a standby snapshot's endpoint.
pub const ENDPOINT_OFFSET: usize = 48;
/// Entries start at multiples of this.
pub const RECORD_ALIGNMENT: usize = 64;
/// The longest entry, endpoint included.
pub const MAX_ENTRY_LENGTH: usize = 4096;
/// The longest archive endpoint a standby snapshot entry can hold.
pub const MAX_ENDPOINT_LENGTH: usize = MAX_ENTRY_LENGTH - ENDPOINT_OFFSET - 4;
/// `service_id` of terms and of the consensus module's snapshot.
pub const SERVICE_ID_CONSENSUS_MODULE: i32 = -1;

/// One entry of the recording log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The archive recording: the log's for a term, the snapshot's otherwise.
    pub recording_id: i64,
    /// The leadership term.
    pub leadership_term_id: i64,
    /// Log position where the term begins.
    pub term_base_log_position: i64,
    /// Where the term ends (−1 while it is open), or the snapshot's position.
    pub log_position: i64,
    /// Cluster time of the entry.
    pub timestamp: i64,
    /// The service a snapshot is of (−1: the consensus module; terms: −1).
    pub service_id: i32,
    /// [`ENTRY_TYPE_TERM`], [`ENTRY_TYPE_SNAPSHOT`] or [`ENTRY_TYPE_STANDBY_SNAPSHOT`].
    pub entry_type: i32,
    /// A standby snapshot's archive endpoint (empty for the other types).
    pub archive_endpoint: String,
    /// False once invalidated.
    pub is_valid: bool,
}

/// What is wrong with a recording log's bytes or an entry to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordingLogError {
    /// Human-readable reason, naming the offset.
    pub message: String,
}

impl fmt::Display for RecordingLogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RecordingLogError {}

fn err(message: String) -> RecordingLogError {
    RecordingLogError { message }
}

const fn align(n: usize) -> usize {
    (n + RECORD_ALIGNMENT - 1) & !(RECORD_ALIGNMENT - 1)
}

impl Entry {
    /// A term entry, open (its end not known yet).
    pub fn term(
        recording_id: i64,
        leadership_term_id: i64,
        term_base: i64,
        timestamp: i64,
    ) -> Entry {
        Entry {
            recording_id,
            leadership_term_id,
            term_base_log_position: term_base,
            log_position: -1,
            timestamp,
            service_id: SERVICE_ID_CONSENSUS_MODULE,
            entry_type: ENTRY_TYPE_TERM,
            archive_endpoint: String::new(),
            is_valid: true,
        }
    }

    /// A snapshot entry of `service_id` (−1: the consensus module) at `log_position`.
    pub fn snapshot(
        recording_id: i64,
        leadership_term_id: i64,
        term_base: i64,
        log_position: i64,
        timestamp: i64,
        service_id: i32,
    ) -> Entry {
        Entry {
            recording_id,
            leadership_term_id,
            term_base_log_position: term_base,
            log_position,
            timestamp,
            service_id,
            entry_type: ENTRY_TYPE_SNAPSHOT,
            archive_endpoint: String::new(),
            is_valid: true,
        }
    }

    /// Bytes the entry takes in the file (a multiple of 64).
    pub fn length(&self) -> usize {
        if self.entry_type == ENTRY_TYPE_STANDBY_SNAPSHOT {
            align(ENDPOINT_OFFSET + 4 + self.archive_endpoint.len())
        } else {
            align(ENDPOINT_OFFSET)
        }
    }

    /// The entry as the file holds it.
    pub fn encode(&self) -> Result<Vec<u8>, RecordingLogError> {
        if !(ENTRY_TYPE_TERM..=ENTRY_TYPE_STANDBY_SNAPSHOT).contains(&self.entry_type) {
            return Err(err(format!(
                "entry type {} is not TERM, SNAPSHOT or STANDBY_SNAPSHOT",
                self.entry_type
            )));
        }
        if self.entry_type == ENTRY_TYPE_STANDBY_SNAPSHOT {
            if self.archive_endpoint.is_empty() || !self.archive_endpoint.is_ascii() {
                return Err(err(
                    "a standby snapshot entry needs an ASCII archive endpoint".into(),
                ));
            }
            if self.archive_endpoint.len() > MAX_ENDPOINT_LENGTH {
                return Err(err(format!(
                    "archive endpoint of {} bytes is longer than the {MAX_ENDPOINT_LENGTH} an entry holds",
                    self.archive_endpoint.len()
                )));
            }
        }
        let mut out = vec![0u8; self.length()];
        for (offset, v) in [
            (0, self.recording_id),
            (8, self.leadership_term_id),
            (16, self.term_base_log_position),
            (LOG_POSITION_OFFSET, self.log_position),
            (32, self.timestamp),
        ] {
            out[offset..offset + 8].copy_from_slice(&v.to_le_bytes());
        }
        out[40..44].copy_from_slice(&self.service_id.to_le_bytes());
        out[ENTRY_TYPE_OFFSET..ENTRY_TYPE_OFFSET + 4]
            .copy_from_slice(&self.type_word().to_le_bytes());
        if self.entry_type == ENTRY_TYPE_STANDBY_SNAPSHOT {
            let len = self.archive_endpoint.len();
            out[ENDPOINT_OFFSET..ENDPOINT_OFFSET + 4].copy_from_slice(&(len as u32).to_le_bytes());
            out[ENDPOINT_OFFSET + 4..ENDPOINT_OFFSET + 4 + len]
                .copy_from_slice(self.archive_endpoint.as_bytes());
        }
        Ok(out)
    }

    /// The type word as stored: the type, with [`ENTRY_TYPE_INVALID_FLAG`] when invalid.
    pub fn type_word(&self) -> i32 {
        if self.is_valid {
            self.entry_type
        } else {
            self.entry_type | ENTRY_TYPE_INVALID_FLAG
        }
    }

    /// Aeron's name for the entry's type.
    pub fn type_name(&self) -> &'static str {
        match self.entry_type {
            ENTRY_TYPE_TERM => "TERM",
            ENTRY_TYPE_SNAPSHOT => "SNAPSHOT",
            ENTRY_TYPE_STANDBY_SNAPSHOT => "STANDBY_SNAPSHOT",
            _ => "UNKNOWN",
        }
    }
}

/// An entry read from a file, with where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// Byte offset of the entry in the file.
    pub offset: usize,
    /// The entry.
    pub entry: Entry,
}

/// What a file holds: its entries in file order, and how many bytes at its
/// end are a torn entry (an append a crash cut short; 0 when none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// The entries, in the order they were appended.
    pub entries: Vec<Located>,
    /// Bytes after the last whole entry.
    pub torn_tail: usize,
}

/// Reads every entry of a recording log's bytes. An entry whose type word
/// names no type is an error naming its offset (a damaged file is never
/// read past a bad entry as if it ended there); a last entry too short to
/// be whole is reported in [`Decoded::torn_tail`].
pub fn decode(bytes: &[u8]) -> Result<Decoded, RecordingLogError> {
    let mut out = Decoded::default();
    let mut at = 0;
    while at < bytes.len() {
        let left = bytes.len() - at;
        if left < align(ENDPOINT_OFFSET) {
            out.torn_tail = left;
            break;
        }
        let b = &bytes[at..];
        let i64_at = |o: usize| i64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let i32_at = |o: usize| i32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let word = i32_at(ENTRY_TYPE_OFFSET);
        let entry_type = word & !ENTRY_TYPE_INVALID_FLAG;
        if !(ENTRY_TYPE_TERM..=ENTRY_TYPE_STANDBY_SNAPSHOT).contains(&entry_type) {
            return Err(err(format!(
                "recording log entry at byte {at}: type word {word:#x} is not a TERM, SNAPSHOT or \
                 STANDBY_SNAPSHOT entry (the file is damaged there)"
            )));
        }
        let mut archive_endpoint = String::new();
        if entry_type == ENTRY_TYPE_STANDBY_SNAPSHOT {
            let len =
                u32::from_le_bytes(b[ENDPOINT_OFFSET..ENDPOINT_OFFSET + 4].try_into().unwrap())
                    as usize;
            if len == 0 || len > MAX_ENDPOINT_LENGTH {
                return Err(err(format!(
                    "recording log entry at byte {at}: standby snapshot endpoint length {len} is outside 1..={MAX_ENDPOINT_LENGTH}"
                )));
            }
            if ENDPOINT_OFFSET + 4 + len > left {
                out.torn_tail = left;
                break;
            }
            let raw = &b[ENDPOINT_OFFSET + 4..ENDPOINT_OFFSET + 4 + len];
            if !raw.is_ascii() {
                return Err(err(format!(
                    "recording log entry at byte {at}: archive endpoint is not ASCII"
                )));
            }
            archive_endpoint = String::from_utf8(raw.to_vec()).expect("ASCII");
        }
        let entry = Entry {
            recording_id: i64_at(0),
            leadership_term_id: i64_at(8),
            term_base_log_position: i64_at(16),
            log_position: i64_at(LOG_POSITION_OFFSET),
            timestamp: i64_at(32),
            service_id: i32_at(40),
            entry_type,
            archive_endpoint,
            is_valid: word & ENTRY_TYPE_INVALID_FLAG == 0,
        };
        let length = entry.length();
        if length > left {
            out.torn_tail = left;
            break;
        }
        out.entries.push(Located { offset: at, entry });
        at += length;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standby(endpoint: &str) -> Entry {
        Entry {
            entry_type: ENTRY_TYPE_STANDBY_SNAPSHOT,
            archive_endpoint: endpoint.into(),
            ..Entry::snapshot(9, 2, 100, 4096, 77, 0)
        }
    }

    #[test]
    fn entries_are_64_byte_records_at_aerons_offsets() {
        let e = Entry::snapshot(5, 3, 1024, 2048, 1_700_000_000_000, 1);
        let b = e.encode().unwrap();
        assert_eq!(b.len(), 64);
        assert_eq!(i64::from_le_bytes(b[0..8].try_into().unwrap()), 5);
        assert_eq!(i64::from_le_bytes(b[8..16].try_into().unwrap()), 3);
        assert_eq!(i64::from_le_bytes(b[16..24].try_into().unwrap()), 1024);
        assert_eq!(i64::from_le_bytes(b[24..32].try_into().unwrap()), 2048);
        assert_eq!(
            i64::from_le_bytes(b[32..40].try_into().unwrap()),
            1_700_000_000_000
        );
        assert_eq!(i32::from_le_bytes(b[40..44].try_into().unwrap()), 1);
        assert_eq!(
            i32::from_le_bytes(b[44..48].try_into().unwrap()),
            ENTRY_TYPE_SNAPSHOT
        );
        assert_eq!(standby("host:8010").encode().unwrap().len(), 64);
        assert_eq!(standby(&"h".repeat(13)).encode().unwrap().len(), 128); // 48 + 4 + 13 > 64
    }

    #[test]
    fn a_file_reads_back_in_order_with_invalid_entries_flagged() {
        let mut term = Entry::term(0, 0, 0, 10);
        term.log_position = 4096;
        let mut bad = Entry::snapshot(1, 0, 0, 4096, 11, -1);
        bad.is_valid = false;
        let entries = vec![term, bad, standby("h2:8010"), Entry::term(0, 1, 4096, 12)];
        let file: Vec<u8> = entries.iter().flat_map(|e| e.encode().unwrap()).collect();
        let d = decode(&file).unwrap();
        assert_eq!(d.torn_tail, 0);
        assert_eq!(
            d.entries
                .iter()
                .map(|l| l.entry.clone())
                .collect::<Vec<_>>(),
            entries
        );
        assert_eq!(
            d.entries.iter().map(|l| l.offset).collect::<Vec<_>>(),
            vec![0, 64, 128, 192]
        );
        assert_eq!(
            i32::from_le_bytes(file[64 + 44..64 + 48].try_into().unwrap()) as u32,
            0x8000_0001
        );
    }

    #[test]
    fn a_torn_append_is_reported_and_a_damaged_type_fails_naming_the_offset() {
        let mut file: Vec<u8> = Entry::term(0, 0, 0, 1).encode().unwrap();
        file.extend_from_slice(&Entry::term(0, 1, 64, 2).encode().unwrap()[..40]);
        let d = decode(&file).unwrap();
        assert_eq!((d.entries.len(), d.torn_tail), (1, 40));

        let mut file: Vec<u8> = [Entry::term(0, 0, 0, 1), Entry::term(0, 1, 64, 2)]
            .iter()
            .flat_map(|e| e.encode().unwrap())
            .collect();
        file[64 + 44..64 + 48].copy_from_slice(&7i32.to_le_bytes());
        let e = decode(&file).unwrap_err();
        assert!(
            e.message.contains("at byte 64") && e.message.contains("0x7"),
            "{e}"
        );
    }

    #[test]
    fn standby_endpoints_are_checked_both_ways() {
        assert!(standby("").encode().is_err());
        assert!(standby(&"x".repeat(MAX_ENDPOINT_LENGTH + 1))
            .encode()
            .is_err());
        let mut file = standby("a:1").encode().unwrap();
        file[ENDPOINT_OFFSET..ENDPOINT_OFFSET + 4]
            .copy_from_slice(&(MAX_ENTRY_LENGTH as u32).to_le_bytes());
        assert!(decode(&file)
            .unwrap_err()
            .message
            .contains("endpoint length"));
    }
}
