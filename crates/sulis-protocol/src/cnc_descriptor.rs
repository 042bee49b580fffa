//! Layout of the command-and-control file (`cnc.dat`) in the driver directory.
//!
//! ```text
//! +-----------------------------+  0
//! |  header (128 bytes)         |  version written last (0 = not ready)
//! +-----------------------------+  128
//! |  to-driver ring buffer      |  many-to-one, clients -> driver (+768 trailer)
//! +-----------------------------+
//! |  to-clients broadcast       |  driver -> all clients (+128 trailer)
//! +-----------------------------+
//! |  counters metadata          |  512 bytes per counter
//! +-----------------------------+
//! |  counters values            |  128 bytes per counter
//! +-----------------------------+
//! |  error log                  |  distinct errors
//! +-----------------------------+  rounded up to the page size
//! ```
//! Header fields (offset: meaning): 0 version i32, 4 to-driver length i32,
//! 8 to-clients length i32, 12 counters metadata length i32, 16 counters values
//! length i32, 20 error log length i32, 24 client liveness timeout ns i64,
//! 32 driver start time epoch ms i64, 40 driver pid i64, 48 file page size i32.
//! This is Aeron's CnC version 0.2.0 layout.

/// File name of the command-and-control file.
pub const CNC_FILE: &str = "cnc.dat";
/// Semantic version of the layout: major << 16 | minor << 8 | patch.
pub const CNC_VERSION: i32 = 0x0000_0200;
/// Length of the header.
pub const HEADER_LENGTH: usize = 128;

/// Version field (i32); written last with release ordering.
pub const CNC_VERSION_FIELD_OFFSET: usize = 0;
/// To-driver buffer length (i32).
pub const TO_DRIVER_BUFFER_LENGTH_FIELD_OFFSET: usize = 4;
/// To-clients buffer length (i32).
pub const TO_CLIENTS_BUFFER_LENGTH_FIELD_OFFSET: usize = 8;
/// Counters metadata buffer length (i32).
pub const COUNTERS_METADATA_BUFFER_LENGTH_FIELD_OFFSET: usize = 12;
/// Counters values buffer length (i32).
pub const COUNTERS_VALUES_BUFFER_LENGTH_FIELD_OFFSET: usize = 16;
/// Error log buffer length (i32).
pub const ERROR_LOG_BUFFER_LENGTH_FIELD_OFFSET: usize = 20;
/// Client liveness timeout in ns (i64).
pub const CLIENT_LIVENESS_TIMEOUT_FIELD_OFFSET: usize = 24;
/// Driver start timestamp, epoch ms (i64).
pub const START_TIMESTAMP_FIELD_OFFSET: usize = 32;
/// Driver process id (i64).
pub const PID_FIELD_OFFSET: usize = 40;
/// File page size (i32).
pub const FILE_PAGE_SIZE_FIELD_OFFSET: usize = 48;

pub use crate::sbe::{semantic_major as major, semantic_version_string as version_string};

/// Lengths of the sections, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CncLayout {
    /// To-driver ring buffer, trailer included.
    pub to_driver_len: usize,
    /// To-clients broadcast buffer, trailer included.
    pub to_clients_len: usize,
    /// Counter metadata.
    pub counters_metadata_len: usize,
    /// Counter values.
    pub counters_values_len: usize,
    /// Error log.
    pub error_log_len: usize,
}

impl CncLayout {
    /// Offset of the to-driver buffer.
    pub fn to_driver_offset(&self) -> usize {
        HEADER_LENGTH
    }
    /// Offset of the to-clients buffer.
    pub fn to_clients_offset(&self) -> usize {
        self.to_driver_offset() + self.to_driver_len
    }
    /// Offset of the counters metadata.
    pub fn counters_metadata_offset(&self) -> usize {
        self.to_clients_offset() + self.to_clients_len
    }
    /// Offset of the counter values.
    pub fn counters_values_offset(&self) -> usize {
        self.counters_metadata_offset() + self.counters_metadata_len
    }
    /// Offset of the error log.
    pub fn error_log_offset(&self) -> usize {
        self.counters_values_offset() + self.counters_values_len
    }
    /// File length, rounded up to `page_size`.
    pub fn file_length(&self, page_size: usize) -> usize {
        let raw = self.error_log_offset() + self.error_log_len;
        (raw + page_size - 1) & !(page_size - 1)
    }

    /// Reads the section lengths from a header, checking them against the file length.
    pub fn from_header(header: &[u8], file_len: usize) -> Result<CncLayout, String> {
        if header.len() < HEADER_LENGTH {
            return Err(format!("cnc file too short: {} bytes", header.len()));
        }
        let field = |off: usize| i32::from_le_bytes(header[off..off + 4].try_into().unwrap());
        let lens = [
            field(TO_DRIVER_BUFFER_LENGTH_FIELD_OFFSET),
            field(TO_CLIENTS_BUFFER_LENGTH_FIELD_OFFSET),
            field(COUNTERS_METADATA_BUFFER_LENGTH_FIELD_OFFSET),
            field(COUNTERS_VALUES_BUFFER_LENGTH_FIELD_OFFSET),
            field(ERROR_LOG_BUFFER_LENGTH_FIELD_OFFSET),
        ];
        if lens.iter().any(|&l| l <= 0) {
            return Err(format!(
                "cnc file has a non-positive section length: {lens:?}"
            ));
        }
        let layout = CncLayout {
            to_driver_len: lens[0] as usize,
            to_clients_len: lens[1] as usize,
            counters_metadata_len: lens[2] as usize,
            counters_values_len: lens[3] as usize,
            error_log_len: lens[4] as usize,
        };
        if layout.error_log_offset() + layout.error_log_len > file_len {
            return Err(format!(
                "cnc file sections need {} bytes but the file has {file_len}",
                layout.error_log_offset() + layout.error_log_len
            ));
        }
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_lay_sections_out_in_order() {
        let l = CncLayout {
            to_driver_len: 1024 + 768,
            to_clients_len: 1024 + 128,
            counters_metadata_len: 4096,
            counters_values_len: 1024,
            error_log_len: 2048,
        };
        assert_eq!(l.to_clients_offset(), 128 + 1792);
        assert_eq!(l.error_log_offset(), 128 + 1792 + 1152 + 4096 + 1024);
        assert_eq!(l.file_length(4096) % 4096, 0);
        assert_eq!(version_string(CNC_VERSION), "0.2.0");
        assert_eq!(major(CNC_VERSION), 0);
    }
}
