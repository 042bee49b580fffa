//! `sulis.FragmentAssembler`: whole messages for `Subscription.poll` handlers.

use crate::image::{with_view, PyHeader};
use pyo3::prelude::*;
use std::sync::Mutex;
use sulis_client::Header;

/// Reassembles fragmented messages for `Subscription.poll`: the wrapped
/// `handler(buffer, header)` sees whole messages; `header.frame_length` is
/// the whole message plus 32, flags are BEGIN|END. A message with a missing
/// fragment (lost on an unreliable channel, or joined mid-message) is
/// dropped, never handed over with a hole.
#[pyclass(module = "sulis._native", name = "FragmentAssembler", frozen)]
pub struct PyFragmentAssembler {
    handler: Py<PyAny>,
    assembler: Mutex<sulis_client::FragmentAssembler>,
}

impl PyFragmentAssembler {
    pub(crate) fn on_fragment(
        &self,
        py: Python<'_>,
        payload: &[u8],
        header: &Header,
    ) -> PyResult<()> {
        if sulis_client::FragmentAssembler::is_unfragmented(header) {
            let h = Py::new(py, PyHeader::new(*header))?;
            return with_view(py, payload, |v| self.handler.call1(py, (v, h)).map(|_| ()));
        }
        // The lock is not held while the handler runs.
        let complete = self.assembler.lock().unwrap().on_fragment(payload, header);
        if let Some(m) = complete {
            let h = Py::new(
                py,
                PyHeader {
                    h: m.header,
                    end_position: Some(m.end_position),
                },
            )?;
            return with_view(py, &m.payload, |v| {
                self.handler.call1(py, (v, h)).map(|_| ())
            });
        }
        Ok(())
    }
}

#[pymethods]
impl PyFragmentAssembler {
    #[new]
    fn new(handler: Py<PyAny>) -> Self {
        PyFragmentAssembler {
            handler,
            assembler: Mutex::new(sulis_client::FragmentAssembler::new()),
        }
    }

    /// The wrapped handler.
    #[getter]
    fn handler(&self, py: Python<'_>) -> Py<PyAny> {
        self.handler.clone_ref(py)
    }

    /// Handles one fragment (so an assembler can be called like any handler).
    fn __call__(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        header: &Bound<'_, PyHeader>,
    ) -> PyResult<()> {
        let h = header.get().h;
        crate::buffer::with_bytes(buffer, |b| self.on_fragment(py, b, &h))?
    }
}
