//! `sulis.BufferClaim`: space claimed in the log for one message, written in
//! place through a memoryview and committed or aborted.

use super::offer_result;
use crate::errors::{ClosedError, MessageTooLongError};
use pyo3::ffi;
use pyo3::prelude::*;
use sulis_client::{BufferClaim, OfferError};

pub(super) fn claim_result(
    py: Python<'_>,
    r: Result<BufferClaim, OfferError>,
) -> PyResult<Py<PyAny>> {
    match r {
        Ok(c) => Ok(Py::new(
            py,
            PyBufferClaim {
                claim: std::sync::Mutex::new(Some(c)),
                view: std::sync::Mutex::new(None),
            },
        )?
        .into_any()),
        Err(OfferError::MessageTooLong { length, max }) => Err(MessageTooLongError::new_err(
            format!("claim of {length} bytes exceeds the maximum payload length of {max} bytes"),
        )),
        Err(e) => offer_result(Err(e)).and_then(|code| crate::offer_result::to_py(py, code)),
    }
}

/// Space claimed in the log for one message. Write `buffer`, then `commit()`;
/// or `abort()`. As a context manager it commits on success and aborts on an
/// exception; a claim that is garbage-collected uncommitted is aborted, so it
/// never blocks the stream.
#[pyclass(module = "sulis._native", name = "BufferClaim", frozen)]
pub struct PyBufferClaim {
    claim: std::sync::Mutex<Option<BufferClaim>>,
    view: std::sync::Mutex<Option<Py<PyAny>>>,
}

impl PyBufferClaim {
    fn finish(&self, py: Python<'_>, commit: bool) -> PyResult<()> {
        if let Some(v) = self.view.lock().unwrap().take() {
            // Writes after commit would corrupt the stream: revoke the view.
            let _ = v.call_method0(py, "release");
        }
        match self.claim.lock().unwrap().take() {
            Some(mut c) => {
                if commit {
                    c.commit()
                } else {
                    c.abort()
                }
                Ok(())
            }
            None => Err(ClosedError::new_err("claim already committed or aborted")),
        }
    }
}

#[pymethods]
impl PyBufferClaim {
    /// Writable memoryview over the claimed payload (valid until commit/abort).
    #[getter]
    fn buffer(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut view = self.view.lock().unwrap();
        if let Some(v) = view.as_ref() {
            return Ok(v.clone_ref(py));
        }
        let guard = self.claim.lock().unwrap();
        let c = guard
            .as_ref()
            .ok_or_else(|| ClosedError::new_err("claim already committed or aborted"))?;
        let (ptr, len) = c.raw_parts();
        // SAFETY: the claim keeps the log mapped; the view is released on commit/abort.
        let mv = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                ffi::PyMemoryView_FromMemory(ptr as *mut _, len as isize, ffi::PyBUF_WRITE),
            )?
        };
        let mv = mv.unbind();
        *view = Some(mv.clone_ref(py));
        Ok(mv)
    }
    /// Claimed length.
    #[getter]
    fn length(&self) -> PyResult<usize> {
        self.claim
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| c.length())
            .ok_or_else(|| ClosedError::new_err("claim is done"))
    }
    /// Stream position after this message.
    #[getter]
    fn position(&self) -> PyResult<i64> {
        self.claim
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| c.position())
            .ok_or_else(|| ClosedError::new_err("claim is done"))
    }
    /// Sets the frame's reserved value.
    #[setter]
    fn set_reserved_value(&self, value: i64) -> PyResult<()> {
        self.claim
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| c.set_reserved_value(value))
            .ok_or_else(|| ClosedError::new_err("claim is done"))
    }
    /// Publishes the message.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, true)
    }
    /// Withdraws the message (readers skip it).
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, false)
    }
    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if self.claim.lock().unwrap().is_some() {
            self.finish(py, exc_type.is_none_or(|t| t.is_none()))?;
        }
        Ok(false)
    }
}
