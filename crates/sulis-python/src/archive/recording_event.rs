//! `sulis.archive.RecordingEvent`: one message of an archive's recording
//! events stream (Aeron's RecordingStarted / RecordingProgress /
//! RecordingStopped), decoded.

use super::error::ArchiveError;
use pyo3::prelude::*;

/// An event of an archive's recording events stream: ``kind`` is
/// ``"started"``, ``"progress"`` or ``"stopped"``; ``position`` is the start,
/// the recorded or the stop position. Only a started event carries the
/// image's ``session_id``, ``stream_id``, ``channel`` and ``source_identity``
/// (-1 and empty otherwise).
#[pyclass(module = "sulis._native", name = "RecordingEvent", frozen, eq, get_all)]
#[derive(PartialEq, Eq)]
pub struct PyRecordingEvent {
    kind: &'static str,
    recording_id: i64,
    start_position: i64,
    position: i64,
    session_id: i32,
    stream_id: i32,
    channel: String,
    source_identity: String,
}

#[pymethods]
impl PyRecordingEvent {
    fn __repr__(&self) -> String {
        format!(
            "RecordingEvent(kind={:?}, recording_id={}, start_position={}, position={}, session_id={}, \
             stream_id={}, channel={:?}, source_identity={:?})",
            self.kind,
            self.recording_id,
            self.start_position,
            self.position,
            self.session_id,
            self.stream_id,
            self.channel,
            self.source_identity
        )
    }
}

/// Decodes one message of an archive's recording events stream (Aeron's
/// RecordingStarted / RecordingProgress / RecordingStopped).
#[pyfunction]
pub fn decode_recording_event(message: &[u8]) -> PyResult<PyRecordingEvent> {
    use sulis_protocol::archive::messages::{
        control_header, RecordingProgress, RecordingStarted, RecordingStopped,
    };
    let bad = |e: sulis_protocol::sbe::SbeError| {
        ArchiveError::new_err(format!("not a recording event: {e}"))
    };
    let h = control_header(message).map_err(bad)?;
    Ok(match h.template_id {
        RecordingStarted::TEMPLATE_ID => {
            let e = RecordingStarted::decode(message).map_err(bad)?;
            let p = e.start_position;
            PyRecordingEvent {
                kind: "started",
                recording_id: e.recording_id,
                start_position: p,
                position: p,
                session_id: e.session_id,
                stream_id: e.stream_id,
                channel: e.channel,
                source_identity: e.source_identity,
            }
        }
        RecordingProgress::TEMPLATE_ID => {
            let e = RecordingProgress::decode(message).map_err(bad)?;
            PyRecordingEvent {
                kind: "progress",
                recording_id: e.recording_id,
                start_position: e.start_position,
                position: e.position,
                session_id: -1,
                stream_id: -1,
                channel: String::new(),
                source_identity: String::new(),
            }
        }
        RecordingStopped::TEMPLATE_ID => {
            let e = RecordingStopped::decode(message).map_err(bad)?;
            PyRecordingEvent {
                kind: "stopped",
                recording_id: e.recording_id,
                start_position: e.start_position,
                position: e.stop_position,
                session_id: -1,
                stream_id: -1,
                channel: String::new(),
                source_identity: String::new(),
            }
        }
        other => {
            return Err(ArchiveError::new_err(format!(
                "not a recording event: template id {other} (101-103 are)"
            )))
        }
    })
}
