//! `sulis._native.Archive` (the archive service embedded in a Python
//! process, here), `ArchiveClient` (a control session with an archive,
//! sulis's or Aeron's: `client.rs`) and the offline archive tool (`tool.rs`).
//! Every call that waits releases the GIL; the Python layer (`sulis.archive`)
//! gives them their final shape.

mod client;
mod error;
mod recording_descriptor;
mod recording_event;
mod recording_signal;
mod tool;

use client::seconds;
pub(crate) use error::ArchiveError;
use recording_descriptor::PyRecordingDescriptor;

use crate::errors::ConfigurationError;
use crate::gil;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::Mutex;
use sulis_archive::auth::{AllowAllRequests, Authoriser};
use sulis_archive::checksum::Checksum;
use sulis_archive::{Archive, ArchiveContext, ArchiveThreadingMode};

/// `credentials=`: one bytes-like or a sequence of them, each a principal.
fn accepted_credentials(c: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    if let Ok(one) = c.extract::<Vec<u8>>() {
        if !c.is_instance_of::<pyo3::types::PyList>() && !c.is_instance_of::<pyo3::types::PyTuple>()
        {
            return Ok(vec![one]);
        }
    }
    c.try_iter()
        .and_then(|items| items.map(|i| i?.extract::<Vec<u8>>()).collect())
        .map_err(|_| {
            ConfigurationError::new_err(
                "credentials must be bytes or a list of bytes (each a principal)",
            )
        })
}

/// `authorise=`: a Python callable asked, on the archive's thread, for
/// every request: `authorise(principal: bytes, request: str) -> bool`. An
/// exception counts as a refusal (and is printed).
struct PyAuthoriser(Py<PyAny>);

impl Authoriser for PyAuthoriser {
    fn is_authorised(&mut self, principal: &[u8], _template_id: u16, request: &str) -> bool {
        Python::attach(|py| {
            let principal = pyo3::types::PyBytes::new(py, principal);
            match self
                .0
                .call1(py, (principal, request))
                .and_then(|r| r.is_truthy(py))
            {
                Ok(allowed) => allowed,
                Err(e) => {
                    e.print(py);
                    false
                }
            }
        })
    }
}

/// An archive running in this process.
#[pyclass(module = "sulis._native", name = "Archive", frozen, subclass)]
pub struct PyArchive {
    archive: Mutex<Option<Archive>>,
    dir: String,
    archive_id: i64,
}

#[pymethods]
impl PyArchive {
    #[new]
    #[pyo3(signature = (
        dir, driver_dir, control_channel=None, control_stream_id=10,
        local_control_channel="aeron:ipc".to_string(), local_control_stream_id=10,
        archive_id=None, segment_file_length=128 * 1024 * 1024, file_sync_level=0,
        catalog_file_sync_level=0, max_concurrent_recordings=20, max_concurrent_replays=20,
        connect_timeout=5.0, replication_channel=None, credentials=None, challenge=None,
        challenge_response=None, record_checksum=None, replay_checksum=None,
        recording_events_enabled=false, recording_events_channel="aeron:ipc".to_string(),
        recording_events_stream_id=30, low_storage_space_threshold=128 * 1024 * 1024, authorise=None,
        threading_mode="shared".to_string()
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dir: PathBuf,
        driver_dir: PathBuf,
        control_channel: Option<String>,
        control_stream_id: i32,
        local_control_channel: String,
        local_control_stream_id: i32,
        archive_id: Option<i64>,
        segment_file_length: usize,
        file_sync_level: u8,
        catalog_file_sync_level: u8,
        max_concurrent_recordings: usize,
        max_concurrent_replays: usize,
        connect_timeout: f64,
        replication_channel: Option<String>,
        credentials: Option<Bound<'_, PyAny>>,
        challenge: Option<Vec<u8>>,
        challenge_response: Option<Vec<u8>>,
        record_checksum: Option<String>,
        replay_checksum: Option<String>,
        recording_events_enabled: bool,
        recording_events_channel: String,
        recording_events_stream_id: i32,
        low_storage_space_threshold: u64,
        authorise: Option<Py<PyAny>>,
        threading_mode: String,
    ) -> PyResult<Self> {
        let checksum = |name: Option<String>, what: &str| {
            name.map(|n| {
                Checksum::parse(&n).map_err(|e| ConfigurationError::new_err(format!("{what}: {e}")))
            })
            .transpose()
        };
        let ctx = ArchiveContext {
            archive_dir: dir.clone(),
            driver_dir,
            control_channel,
            control_stream_id,
            local_control_channel,
            local_control_stream_id,
            archive_id,
            segment_file_length,
            file_sync_level,
            catalog_file_sync_level: catalog_file_sync_level.max(file_sync_level),
            max_concurrent_recordings,
            max_concurrent_replays,
            connect_timeout: seconds(connect_timeout, "connect_timeout")?,
            replication_channel,
            credentials: credentials.map(|c| accepted_credentials(&c)).transpose()?,
            challenge,
            challenge_response: challenge_response.unwrap_or_default(),
            record_checksum: checksum(record_checksum, "record_checksum")?,
            replay_checksum: checksum(replay_checksum, "replay_checksum")?,
            recording_events_enabled,
            recording_events_channel,
            recording_events_stream_id,
            low_storage_space_threshold,
            threading_mode: ArchiveThreadingMode::parse(&threading_mode)
                .map_err(ConfigurationError::new_err)?,
            ..ArchiveContext::default()
        };
        ctx.conclude().map_err(ConfigurationError::new_err)?;
        let authoriser: Box<dyn Authoriser> = match authorise {
            Some(f) => Box::new(PyAuthoriser(f)),
            None => Box::new(AllowAllRequests),
        };
        let archive = gil::released_or_raise(py, || Archive::launch_with(ctx, authoriser))?;
        Ok(PyArchive {
            archive_id: archive.archive_id(),
            archive: Mutex::new(Some(archive)),
            dir: dir.display().to_string(),
        })
    }

    /// The archive directory.
    #[getter]
    fn dir(&self) -> &str {
        &self.dir
    }

    /// The archive's id.
    #[getter]
    fn archive_id(&self) -> i64 {
        self.archive_id
    }

    /// Errors the archive recorded (most recent last).
    fn errors(&self) -> Vec<String> {
        self.archive
            .lock()
            .unwrap()
            .as_ref()
            .map(|a| a.errors())
            .unwrap_or_default()
    }

    /// True until closed (or until the archive's thread died: see ``errors()``).
    #[getter]
    fn is_running(&self) -> bool {
        self.archive
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|a| a.is_running())
    }

    /// Stops the archive: recordings end with their stop positions written (idempotent).
    fn close(&self, py: Python<'_>) {
        let archive = self.archive.lock().unwrap().take();
        if let Some(mut a) = archive {
            gil::released(py, move || a.close());
        }
    }
}

/// Registers the archive classes and exception.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tool::archive_describe, m)?)?;
    m.add_function(wrap_pyfunction!(tool::archive_verify, m)?)?;
    m.add_function(wrap_pyfunction!(tool::archive_mark, m)?)?;
    m.add_function(wrap_pyfunction!(tool::archive_checksum, m)?)?;
    m.add_function(wrap_pyfunction!(
        recording_event::decode_recording_event,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(tool::archive_compact, m)?)?;
    m.add_function(wrap_pyfunction!(tool::archive_delete_orphaned_segments, m)?)?;
    m.add_function(wrap_pyfunction!(tool::archive_dump, m)?)?;
    m.add_function(wrap_pyfunction!(tool::archive_mark_file, m)?)?;
    m.add_class::<PyArchive>()?;
    m.add_class::<client::PyArchiveClient>()?;
    m.add_class::<PyRecordingDescriptor>()?;
    recording_signal::register(m)?;
    m.add_class::<recording_event::PyRecordingEvent>()?;
    m.add("ArchiveError", m.py().get_type::<ArchiveError>())?;
    Ok(())
}
