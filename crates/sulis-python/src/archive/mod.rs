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

pub(crate) use error::ArchiveError;
use recording_descriptor::PyRecordingDescriptor;

use crate::errors::ConfigurationError;
use crate::gil;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;
use sulis_archive::auth::{AllowAllRequests, Authoriser};
use sulis_archive::{Archive, ArchiveContext};
use sulis_protocol::options::Configured;

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

/// The archive's settings: defaults, then the `SULIS_ARCHIVE_*` variables,
/// then `dir`, `driver_dir` and the keywords, through the options table.
fn archive_context(
    dir: Option<String>,
    driver_dir: Option<String>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<ArchiveContext> {
    let mut ctx = ArchiveContext::default();
    ctx.apply_env().map_err(ConfigurationError::new_err)?;
    for (name, value) in [("archive_dir", dir), ("driver_dir", driver_dir)] {
        if let Some(v) = value {
            ctx.set_option(name, &v)
                .map_err(ConfigurationError::new_err)?;
        }
    }
    crate::options::apply_keywords(&mut ctx, options)?;
    Ok(ctx)
}

/// The archive's effective settings (defaults, `SULIS_ARCHIVE_*`, then
/// keywords) as (name, value, source, environment variable, doc), without
/// starting one: `sulis archive --print-config` and its flags come from it.
#[pyfunction]
#[pyo3(signature = (dir=None, driver_dir=None, **options))]
pub fn archive_config(
    dir: Option<String>,
    driver_dir: Option<String>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<crate::options::OptionRow>> {
    let mut ctx = archive_context(dir, driver_dir, options)?;
    ctx.conclude().map_err(ConfigurationError::new_err)?;
    Ok(crate::options::rows(&ctx))
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
        dir, driver_dir=None, *, credentials=None, challenge=None, challenge_response=None, authorise=None,
        **options
    ))]
    #[allow(clippy::too_many_arguments)] // Python keywords, as the signature above lists them
    fn new(
        py: Python<'_>,
        dir: String,
        driver_dir: Option<String>,
        credentials: Option<Bound<'_, PyAny>>,
        challenge: Option<Vec<u8>>,
        challenge_response: Option<Vec<u8>>,
        authorise: Option<Py<PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut ctx = archive_context(Some(dir), driver_dir, options)?;
        ctx.credentials = credentials.map(|c| accepted_credentials(&c)).transpose()?;
        ctx.challenge = challenge;
        ctx.challenge_response = challenge_response.unwrap_or_default();
        ctx.conclude().map_err(ConfigurationError::new_err)?;
        let dir = ctx.archive_dir.clone();
        let authoriser: Box<dyn Authoriser> = match authorise {
            Some(f) => Box::new(PyAuthoriser(f)),
            None => Box::new(AllowAllRequests),
        };
        ctx.interrupt = Some(crate::errors::interrupt_check());
        let archive = gil::released(py, || Archive::launch_with(ctx, authoriser)).map_err(|e| {
            crate::errors::pending_signal_error()
                .unwrap_or_else(|| crate::gil::NativeError::into_py_err(e))
        })?;
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
    m.add_function(wrap_pyfunction!(archive_config, m)?)?;
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
    m.add_function(wrap_pyfunction!(tool::archive_retention, m)?)?;
    m.add_function(wrap_pyfunction!(tool::archive_segments, m)?)?;
    m.add_function(wrap_pyfunction!(tool::archive_hold, m)?)?;
    m.add_function(wrap_pyfunction!(tool::archive_release_hold, m)?)?;
    m.add_class::<PyArchive>()?;
    m.add_class::<client::PyArchiveClient>()?;
    m.add_class::<PyRecordingDescriptor>()?;
    recording_signal::register(m)?;
    m.add_class::<recording_event::PyRecordingEvent>()?;
    m.add("ArchiveError", m.py().get_type::<ArchiveError>())?;
    Ok(())
}
