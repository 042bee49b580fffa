//! `sulis.cluster.SessionMessages`: the session messages a batched service
//! gets in one `on_session_messages` call, its columns exposed through the
//! buffer protocol (`BatchColumn`s: `numpy.frombuffer`, `pyarrow.py_buffer`,
//! `memoryview`) without a copy and without a Python object per message.

use crate::batch::PyColumn;
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::ffi::CStr;
use std::sync::Arc;
use sulis_cluster::client::session_messages::SessionMessages;

/// Session messages the log held back to back, in log order: `len()` of
/// them, payloads back to back in `data` with `offsets` (int32, `len + 1`,
/// Arrow's layout), and per message `session_ids` (int64; not > 0 for the
/// service's own messages), `timestamps` (int64, cluster time) and
/// `positions` (int64, the log position after it). Each column keeps the
/// messages alive: a view may outlive the callback.
#[pyclass(module = "sulis._native", name = "SessionMessages", frozen)]
pub struct PySessionMessages {
    messages: Arc<SessionMessages>,
}

impl PySessionMessages {
    pub(crate) fn new(messages: SessionMessages) -> PySessionMessages {
        PySessionMessages {
            messages: Arc::new(messages),
        }
    }

    fn column<T>(&self, v: impl Fn(&SessionMessages) -> &[T], fmt: &'static CStr) -> PyColumn {
        PyColumn::of(self.messages.clone(), v(&self.messages), fmt)
    }
}

#[pymethods]
impl PySessionMessages {
    fn __len__(&self) -> usize {
        self.messages.len()
    }
    /// The client session of each message (int64; not > 0: the service's own).
    #[getter]
    fn session_ids(&self) -> PyColumn {
        self.column(|m| &m.session_ids, c"q")
    }
    /// The cluster time of each message (int64).
    #[getter]
    fn timestamps(&self) -> PyColumn {
        self.column(|m| &m.timestamps, c"q")
    }
    /// The log position after each message (int64).
    #[getter]
    fn positions(&self) -> PyColumn {
        self.column(|m| &m.positions, c"q")
    }
    /// The payloads, back to back.
    #[getter]
    fn data(&self) -> PyColumn {
        self.column(|m| &m.data, c"B")
    }
    /// Where each payload starts in `data`, plus the end (int32, `len + 1`).
    #[getter]
    fn offsets(&self) -> PyColumn {
        self.column(|m| &m.offsets, c"i")
    }
    /// Message `i`'s payload as bytes (a copy).
    fn __getitem__<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyBytes>> {
        let n = self.messages.len() as isize;
        let j = if i < 0 { i + n } else { i };
        if j < 0 || j >= n {
            return Err(PyIndexError::new_err(format!(
                "index {i} out of range for {n} messages"
            )));
        }
        Ok(PyBytes::new(py, self.messages.payload(j as usize)))
    }
    /// Every payload as bytes (a copy each).
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let m = &self.messages;
        PyList::new(py, (0..m.len()).map(|i| PyBytes::new(py, m.payload(i))))
    }
}
