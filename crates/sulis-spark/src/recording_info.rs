//! A recording as planning sees it.

/// A recording selected by a query, with its current end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingInfo {
    pub recording_id: i64,
    pub stream_id: i32,
    pub session_id: i32,
    /// Where the recording starts (moved up by a purge or detach).
    pub start: i64,
    /// Its stop position, or what is recorded (readable) while live; a
    /// cluster log's is cut to the commit position.
    pub end: i64,
    pub term_length: i32,
    pub mtu_length: i32,
    pub live: bool,
    pub segment_length: i32,
    pub initial_term_id: i32,
    /// The archive's time (ms) of its stop, -1 while it has none.
    pub stop_timestamp: i64,
    /// A cluster log's recorded end when `end` is cut to the commit
    /// position, else -1.
    pub recorded: i64,
}

impl RecordingInfo {
    /// What is recorded, whatever may be read of it: a recording truncated
    /// below a position read to lost data; one whose readable end is the
    /// commit position did not.
    pub fn recorded_end(&self) -> i64 {
        self.end.max(self.recorded)
    }
}
