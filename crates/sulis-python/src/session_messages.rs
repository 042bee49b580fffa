//! `sulis.cluster.SessionMessages`: the session messages a batched service
//! gets in one `on_session_messages` call, its columns exposed through the
//! buffer protocol (`numpy.frombuffer`, `pyarrow.py_buffer`, `memoryview`)
//! without a copy and without a Python object per message.

use crate::batch::{fill_view, parts, release_view};
use pyo3::exceptions::PyIndexError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::ffi::{c_int, CStr};
use std::sync::Arc;
use sulis_cluster::session_messages::SessionMessages;

#[derive(Clone, Copy)]
enum Which {
    SessionIds,
    Timestamps,
    Positions,
    Data,
    Offsets,
}

/// A read-only buffer over one column of a `SessionMessages`.
#[pyclass(module = "sulis._native", name = "SessionMessagesColumn", frozen)]
pub struct PySessionMessagesColumn {
    messages: Arc<SessionMessages>,
    which: Which,
}

impl PySessionMessagesColumn {
    fn raw(&self) -> (*const u8, usize, usize, &'static CStr) {
        let m = &self.messages;
        let ((p, len, item), fmt) = match self.which {
            Which::SessionIds => (parts(&m.session_ids), c"q"),
            Which::Timestamps => (parts(&m.timestamps), c"q"),
            Which::Positions => (parts(&m.positions), c"q"),
            Which::Data => (parts(&m.data), c"B"),
            Which::Offsets => (parts(&m.offsets), c"i"),
        };
        (p, len, item, fmt)
    }
}

#[pymethods]
impl PySessionMessagesColumn {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let (ptr, len, item, fmt) = slf.get().raw();
        // SAFETY: the column holds an Arc of the messages, never changed.
        unsafe { fill_view(slf.into_any(), view, flags, ptr, len, item, fmt) }
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        unsafe { release_view(view) }
    }

    fn __len__(&self) -> usize {
        let (_, len, item, _) = self.raw();
        len / item
    }
}

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

    fn column(&self, which: Which) -> PySessionMessagesColumn {
        PySessionMessagesColumn {
            messages: self.messages.clone(),
            which,
        }
    }
}

#[pymethods]
impl PySessionMessages {
    fn __len__(&self) -> usize {
        self.messages.len()
    }
    /// The client session of each message (int64; not > 0: the service's own).
    #[getter]
    fn session_ids(&self) -> PySessionMessagesColumn {
        self.column(Which::SessionIds)
    }
    /// The cluster time of each message (int64).
    #[getter]
    fn timestamps(&self) -> PySessionMessagesColumn {
        self.column(Which::Timestamps)
    }
    /// The log position after each message (int64).
    #[getter]
    fn positions(&self) -> PySessionMessagesColumn {
        self.column(Which::Positions)
    }
    /// The payloads, back to back.
    #[getter]
    fn data(&self) -> PySessionMessagesColumn {
        self.column(Which::Data)
    }
    /// Where each payload starts in `data`, plus the end (int32, `len + 1`).
    #[getter]
    fn offsets(&self) -> PySessionMessagesColumn {
        self.column(Which::Offsets)
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
