//! `sulis.Batch` and its `BatchColumn`s: many fragments copied out of the log
//! at once, exposed through the buffer protocol with no Python object per
//! fragment.

use pyo3::exceptions::{PyBufferError, PyIndexError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::ffi::{c_int, c_void, CStr};
use std::sync::Arc;
use sulis_client::Batch;

/// Which column of a batch a buffer exposes.
#[derive(Clone, Copy)]
enum Which {
    Data,
    Offsets,
    Positions,
    SessionIds,
    Flags,
    ReservedValues,
    Lengths,
}

/// Fills `view` with a read-only buffer of `len` bytes at `ptr` (items of
/// `item` bytes, struct format `fmt`) that `owner` keeps alive.
///
/// # Safety
/// `ptr..ptr + len` must stay valid and unchanged while `owner` lives; the
/// view holds a reference to `owner`.
pub(crate) unsafe fn fill_view(
    owner: Bound<'_, PyAny>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
    ptr: *const u8,
    len: usize,
    item: usize,
    fmt: &'static CStr,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("view is null"));
    }
    if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
        return Err(PyBufferError::new_err("batch columns are read-only"));
    }
    unsafe {
        (*view).obj = owner.into_ptr();
        (*view).buf = ptr as *mut c_void;
        (*view).len = len as isize;
        (*view).readonly = 1;
        (*view).itemsize = item as isize;
        (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
            fmt.as_ptr() as *mut _
        } else {
            std::ptr::null_mut()
        };
        (*view).ndim = 1;
        // shape must be in items, not bytes: keep a per-view item count in `internal`.
        if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
            let items = Box::into_raw(Box::new((len / item) as isize));
            (*view).internal = items as *mut c_void;
            (*view).shape = items;
        } else {
            (*view).internal = std::ptr::null_mut();
            (*view).shape = std::ptr::null_mut();
        }
        (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
            &mut (*view).itemsize
        } else {
            std::ptr::null_mut()
        };
        (*view).suboffsets = std::ptr::null_mut();
    }
    Ok(())
}

/// Frees what [`fill_view`] kept in the view.
///
/// # Safety
/// `view` must be one [`fill_view`] filled.
pub(crate) unsafe fn release_view(view: *mut ffi::Py_buffer) {
    unsafe {
        if !(*view).internal.is_null() {
            drop(Box::from_raw((*view).internal as *mut isize));
            (*view).internal = std::ptr::null_mut();
        }
    }
}

/// A read-only buffer over one column of a Batch, or of anything else Rust
/// filled and no longer changes (a batched service's `SessionMessages`):
/// the buffer protocol, so `memoryview`, `numpy.frombuffer` and
/// `pyarrow.py_buffer` read it without a copy. It keeps its owner alive.
#[pyclass(module = "sulis._native", name = "BatchColumn", frozen)]
pub struct PyColumn {
    _owner: Arc<dyn std::any::Any + Send + Sync>,
    ptr: usize,
    len: usize,
    item: usize,
    fmt: &'static CStr,
}

impl PyColumn {
    /// A column over `v`, which lies inside `owner` (immutable while any
    /// `Arc` of it lives); `fmt` is its struct format.
    pub(crate) fn of<T>(
        owner: Arc<dyn std::any::Any + Send + Sync>,
        v: &[T],
        fmt: &'static CStr,
    ) -> PyColumn {
        PyColumn {
            _owner: owner,
            ptr: v.as_ptr() as usize,
            len: std::mem::size_of_val(v),
            item: std::mem::size_of::<T>(),
            fmt,
        }
    }
}

#[pymethods]
impl PyColumn {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let c = slf.get();
        let (ptr, len, item, fmt) = (c.ptr as *const u8, c.len, c.item, c.fmt);
        // SAFETY: the column holds an Arc of its (immutable) owner.
        unsafe { fill_view(slf.into_any(), view, flags, ptr, len, item, fmt) }
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        unsafe { release_view(view) }
    }

    fn __len__(&self) -> usize {
        self.len / self.item
    }
}

/// Many fragments copied out of the log at once: `len(batch)` fragments, their
/// payloads back to back in `data`, and columns `offsets` (int32, len+1, Arrow
/// layout), `lengths` (int32), `positions` (int64), `session_ids` (int32),
/// `flags` (uint8), `reserved_values` (int64). No Python object per fragment.
#[pyclass(module = "sulis._native", name = "Batch", frozen)]
pub struct PyBatch {
    pub(crate) batch: Arc<Batch>,
}

impl PyBatch {
    /// A batch filled elsewhere (the segment-file reader).
    pub(crate) fn from_batch(batch: Batch) -> PyBatch {
        PyBatch {
            batch: Arc::new(batch),
        }
    }

    fn column(&self, which: Which) -> PyColumn {
        let b = &self.batch;
        let owner = || -> Arc<dyn std::any::Any + Send + Sync> { b.clone() };
        match which {
            Which::Data => PyColumn::of(owner(), &b.data, c"B"),
            Which::Offsets => PyColumn::of(owner(), &b.offsets, c"i"),
            Which::Positions => PyColumn::of(owner(), &b.positions, c"q"),
            Which::SessionIds => PyColumn::of(owner(), &b.session_ids, c"i"),
            Which::Flags => PyColumn::of(owner(), &b.flags, c"B"),
            Which::ReservedValues => PyColumn::of(owner(), &b.reserved_values, c"q"),
            Which::Lengths => {
                let lengths: Arc<Vec<i32>> =
                    Arc::new(b.offsets.windows(2).map(|w| w[1] - w[0]).collect());
                PyColumn::of(lengths.clone(), &lengths, c"i")
            }
        }
    }
}

#[pymethods]
impl PyBatch {
    /// A batch of whole messages ending at `positions` (unfragmented, of
    /// `session_id`, reserved values 0 unless given): for tests of code that
    /// takes batches.
    #[staticmethod]
    #[pyo3(signature = (messages, positions, reserved_values=None, session_id=0))]
    fn of(
        messages: Vec<Vec<u8>>,
        positions: Vec<i64>,
        reserved_values: Option<Vec<i64>>,
        session_id: i32,
    ) -> PyResult<PyBatch> {
        let reserved = reserved_values.unwrap_or_else(|| vec![0; messages.len()]);
        if positions.len() != messages.len() || reserved.len() != messages.len() {
            return Err(PyIndexError::new_err(
                "a position (and a reserved value) for each message",
            ));
        }
        let mut b = Batch::with_capacity(messages.len(), messages.iter().map(Vec::len).sum());
        for ((m, p), r) in messages.iter().zip(positions).zip(reserved) {
            b.data.extend_from_slice(m);
            b.offsets.push(b.data.len() as i32);
            b.positions.push(p);
            b.session_ids.push(session_id);
            b.flags.push(0xc0);
            b.reserved_values.push(r);
        }
        Ok(PyBatch::from_batch(b))
    }

    fn __len__(&self) -> usize {
        self.batch.len()
    }
    /// Payload bytes of every fragment, back to back.
    #[getter]
    fn data(&self) -> PyColumn {
        self.column(Which::Data)
    }
    /// Start of each payload in `data`, plus the end (int32, `len + 1` items).
    #[getter]
    fn offsets(&self) -> PyColumn {
        self.column(Which::Offsets)
    }
    /// Payload length of each fragment (int32).
    #[getter]
    fn lengths(&self) -> PyColumn {
        self.column(Which::Lengths)
    }
    /// Stream position after each fragment (int64).
    #[getter]
    fn positions(&self) -> PyColumn {
        self.column(Which::Positions)
    }
    /// Session id of each fragment (int32).
    #[getter]
    fn session_ids(&self) -> PyColumn {
        self.column(Which::SessionIds)
    }
    /// Frame flags of each fragment (uint8).
    #[getter]
    fn flags(&self) -> PyColumn {
        self.column(Which::Flags)
    }
    /// Reserved value of each fragment (int64).
    #[getter]
    fn reserved_values(&self) -> PyColumn {
        self.column(Which::ReservedValues)
    }
    /// Total payload bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.batch.data.len()
    }
    /// Fragment `i`'s payload as bytes (a copy).
    fn __getitem__<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyBytes>> {
        let n = self.batch.len() as isize;
        let j = if i < 0 { i + n } else { i };
        if j < 0 || j >= n {
            return Err(PyIndexError::new_err(format!(
                "batch index {i} out of range for {n} fragments"
            )));
        }
        Ok(PyBytes::new(py, self.batch.get(j as usize)))
    }
    /// Every payload as a list of bytes (copies).
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(
            py,
            (0..self.batch.len()).map(|i| PyBytes::new(py, self.batch.get(i))),
        )
    }
    fn __repr__(&self) -> String {
        format!(
            "Batch(fragments={}, bytes={})",
            self.batch.len(),
            self.batch.data.len()
        )
    }
}
