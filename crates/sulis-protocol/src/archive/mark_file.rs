//! `archive-mark.dat`: the archive's mark file, laid out as Aeron's
//! (`ArchiveMarkFile`, mark-file schema 100, template 200, version 2), so
//! Aeron's ArchiveTool can describe and dump a sulis archive directory.
//!
//! ```text
//! 0       8                         136                         8192
//! +-------+-------------------------+-----------------------+---------------------+
//! | SBE   | MarkFileHeader block    | var strings (control, | error log (Aeron's  |
//! | header| (128 bytes, below)      | local control, events,| distinct error log) |
//! |       |                         | aeron directory)      | to the end          |
//! +-------+-------------------------+-----------------------+---------------------+
//! ```
//!
//! `version` is written last (3.1.0 once the file is ready); the activity
//! timestamp moves every second while the archive runs and is −1 after a
//! clean stop. An archive whose activity is younger than
//! [`LIVENESS_TIMEOUT_MS`] is alive: a second one must not open the directory.

/// File name inside the archive directory (Aeron's).
pub const MARK_FILE: &str = "archive-mark.dat";
/// Bytes before the error log.
pub const HEADER_LENGTH: usize = 8192;
/// Default error log length (Aeron's: 1 MiB).
pub const DEFAULT_ERROR_BUFFER_LENGTH: usize = 1024 * 1024;
/// An archive whose activity timestamp is older than this is gone.
pub const LIVENESS_TIMEOUT_MS: i64 = 10_000;
/// Mark file schema id.
pub const SCHEMA_ID: u16 = 100;
/// Mark file schema version.
pub const SCHEMA_VERSION: u16 = 2;

crate::sbe_messages! {
    schema SCHEMA_ID, version SCHEMA_VERSION;

    /// The mark file's header.
    MarkFileHeader = 200, block 128 {
        version: i32 @0,
        activity_timestamp: i64 @8,
        start_timestamp: i64 @16,
        pid: i64 @24,
        control_stream_id: i32 @32,
        local_control_stream_id: i32 @36,
        events_stream_id: i32 @40,
        header_length: i32 @44,
        error_buffer_length: i32 @48,
        archive_id: i64 @56,
    } var {
        control_channel: ascii,
        local_control_channel: ascii,
        events_channel: ascii,
        aeron_directory: ascii,
    }
}

/// File offset of the version field (the SBE header, then the block).
pub const VERSION_OFFSET: usize = 8;
/// File offset of the activity timestamp.
pub const ACTIVITY_TIMESTAMP_OFFSET: usize = 8 + 8;
/// File offset of the archive's process id.
pub const PID_OFFSET: usize = 8 + 24;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_lay_the_header_out_as_aeron_does() {
        let h = MarkFileHeader {
            version: 0x030100,
            activity_timestamp: 5,
            pid: 42,
            control_stream_id: 10,
            header_length: 8192,
            archive_id: 7,
            aeron_directory: "/dev/shm/x".into(),
            ..Default::default()
        };
        let b = h.encode();
        assert_eq!(&b[..8], &[128, 0, 200, 0, 100, 0, 2, 0]);
        assert_eq!(
            &b[VERSION_OFFSET..VERSION_OFFSET + 4],
            &0x030100i32.to_le_bytes()
        );
        assert_eq!(
            &b[ACTIVITY_TIMESTAMP_OFFSET..ACTIVITY_TIMESTAMP_OFFSET + 8],
            &5i64.to_le_bytes()
        );
        assert_eq!(&b[8 + 56..8 + 64], &7i64.to_le_bytes());
        assert_eq!(MarkFileHeader::decode(&b).unwrap(), h);
    }
}
