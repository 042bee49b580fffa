//! `sulis.archive.RecordingSignal` (an `IntEnum` of Aeron's values, from
//! `sulis-protocol`), `RecordingState`, and `RecordingSignalEvent`, what
//! `ArchiveClient.await_signal` and `poll_signals` return.

use crate::int_enum::add_int_enum;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use sulis_protocol::archive::messages::{
    recording_signal as signal, recording_state as state, RecordingSignalEvent,
};

static SIGNAL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// A recording signal: the request it answers, the recording, where.
#[pyclass(
    module = "sulis._native",
    name = "RecordingSignalEvent",
    frozen,
    eq,
    hash
)]
#[derive(PartialEq, Eq, Hash)]
pub struct PyRecordingSignalEvent {
    #[pyo3(get)]
    correlation_id: i64,
    #[pyo3(get)]
    recording_id: i64,
    #[pyo3(get)]
    subscription_id: i64,
    #[pyo3(get)]
    position: i64,
    code: i32,
}

impl From<RecordingSignalEvent> for PyRecordingSignalEvent {
    fn from(s: RecordingSignalEvent) -> Self {
        PyRecordingSignalEvent {
            correlation_id: s.correlation_id,
            recording_id: s.recording_id,
            subscription_id: s.subscription_id,
            position: s.position,
            code: s.signal,
        }
    }
}

#[pymethods]
impl PyRecordingSignalEvent {
    /// What happened: a `RecordingSignal` member (the plain int for a value
    /// this version does not know).
    #[getter]
    fn signal(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = self.code.into_pyobject(py)?.into_any();
        match SIGNAL.get(py) {
            Some(class) => Ok(class.call1(py, (value.clone(),)).unwrap_or(value.unbind())),
            None => Ok(value.unbind()),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "RecordingSignalEvent(correlation_id={}, recording_id={}, subscription_id={}, position={}, signal={})",
            self.correlation_id,
            self.recording_id,
            self.subscription_id,
            self.position,
            self.signal(py)?.bind(py).repr()?
        ))
    }
}

/// Adds `RecordingSignal`, `RecordingState`, `RecordingSignalEvent` and the
/// replay lengths to the module.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let signals = add_int_enum(
        m,
        "RecordingSignal",
        "What happened to a recording (Aeron's RecordingSignal values).",
        &[
            ("START", signal::START as i64, "A recording started."),
            ("STOP", signal::STOP as i64, "A recording stopped."),
            ("EXTEND", signal::EXTEND as i64, "A recording was extended."),
            (
                "REPLICATE",
                signal::REPLICATE as i64,
                "A replication created or replaced the recording.",
            ),
            (
                "MERGE",
                signal::MERGE as i64,
                "A replication merged with the live stream.",
            ),
            (
                "SYNC",
                signal::SYNC as i64,
                "A replication caught up with its source.",
            ),
            ("DELETE", signal::DELETE as i64, "Segments were deleted."),
            (
                "REPLICATE_END",
                signal::REPLICATE_END as i64,
                "A replication ended.",
            ),
        ],
    )?;
    let _ = SIGNAL.set(m.py(), signals.unbind());
    add_int_enum(
        m,
        "RecordingState",
        "A catalog entry's state (Aeron's RecordingState values).",
        &[
            (
                "INVALID",
                state::INVALID as i64,
                "Not usable (marked so, or damaged).",
            ),
            ("VALID", state::VALID as i64, "In use."),
            ("DELETED", state::DELETED as i64, "Purged."),
        ],
    )?;
    m.add_class::<PyRecordingSignalEvent>()?;
    m.add(
        "REPLAY_ALL_AND_FOLLOW",
        sulis_protocol::archive::messages::REPLAY_ALL_AND_FOLLOW,
    )?;
    m.add(
        "REPLAY_ALL_AND_STOP",
        sulis_protocol::archive::messages::REPLAY_ALL_AND_STOP,
    )?;
    Ok(())
}
