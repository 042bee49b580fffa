//! `sulis.RecordingDescriptor`: a recording as the archive's catalog describes it.

use pyo3::prelude::*;
use sulis_protocol::archive::messages::RecordingDescriptor;

/// A recording, as the archive's catalog describes it.
#[pyclass(
    module = "sulis._native",
    name = "RecordingDescriptor",
    frozen,
    get_all,
    eq
)]
#[derive(Clone, PartialEq)]
pub struct PyRecordingDescriptor {
    /// Recording id.
    recording_id: i64,
    /// When it started (epoch ms).
    start_timestamp: i64,
    /// When it stopped (epoch ms), -1 while recording.
    stop_timestamp: i64,
    /// Stream position it starts at.
    start_position: i64,
    /// Stream position it stops at, -1 while recording.
    stop_position: i64,
    /// Initial term id of the recorded stream.
    initial_term_id: i32,
    /// Segment file length.
    segment_file_length: i32,
    /// Term length of the recorded stream.
    term_buffer_length: i32,
    /// MTU of the recorded stream.
    mtu_length: i32,
    /// Session id of the recorded stream.
    session_id: i32,
    /// Stream id.
    stream_id: i32,
    /// The channel without its tuning parameters.
    stripped_channel: String,
    /// The channel as the recording was asked for.
    original_channel: String,
    /// Where the stream came from.
    source_identity: String,
}

#[pymethods]
impl PyRecordingDescriptor {
    fn __repr__(&self) -> String {
        format!(
            "RecordingDescriptor(recording_id={}, stream_id={}, session_id={}, start_position={}, \
             stop_position={}, channel={:?})",
            self.recording_id,
            self.stream_id,
            self.session_id,
            self.start_position,
            self.stop_position,
            self.original_channel
        )
    }
}

pub(super) fn descriptor(d: RecordingDescriptor) -> PyRecordingDescriptor {
    PyRecordingDescriptor {
        recording_id: d.recording_id,
        start_timestamp: d.start_timestamp,
        stop_timestamp: d.stop_timestamp,
        start_position: d.start_position,
        stop_position: d.stop_position,
        initial_term_id: d.initial_term_id,
        segment_file_length: d.segment_file_length,
        term_buffer_length: d.term_buffer_length,
        mtu_length: d.mtu_length,
        session_id: d.session_id,
        stream_id: d.stream_id,
        stripped_channel: d.stripped_channel,
        original_channel: d.original_channel,
        source_identity: d.source_identity,
    }
}
