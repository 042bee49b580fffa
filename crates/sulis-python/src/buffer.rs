//! Reading a Python object's bytes in place: `bytes` by a pointer compare,
//! anything else through the buffer protocol, with no copy.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The contents of `data` when it is exactly `bytes` (not a subclass): a
/// pointer compare and one call, where `cast::<PyBytes>()` and `as_bytes()`
/// make three under abi3 (`PyType_GetFlags`, `PyBytes_AsString`,
/// `PyBytes_Size`).
#[inline(always)]
pub(crate) fn exact_bytes<'a>(data: &'a Bound<'_, PyAny>) -> Option<&'a [u8]> {
    // SAFETY: `ob_type` is part of the stable ABI; `PyBytes_Type` is a static.
    if unsafe { ffi::Py_TYPE(data.as_ptr()) != std::ptr::addr_of_mut!(ffi::PyBytes_Type) } {
        return None;
    }
    let mut ptr = std::ptr::null_mut();
    let mut len: ffi::Py_ssize_t = 0;
    // SAFETY: `data` is a bytes object (so this cannot fail), whose contents
    // are immutable and live as long as `data` is borrowed.
    unsafe {
        ffi::PyBytes_AsStringAndSize(data.as_ptr(), &mut ptr, &mut len);
        Some(std::slice::from_raw_parts(ptr as *const u8, len as usize))
    }
}

/// Calls `f` with the bytes of `data` (bytes fast path, else the buffer protocol).
///
/// The buffer is requested without a format, as raw bytes, so any exporter
/// works whatever its item type (numpy arrays of any dtype, `array.array`,
/// typed memoryviews), as long as it is C-contiguous.
#[inline(always)]
pub(crate) fn with_bytes<R>(data: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(b) = data.cast::<PyBytes>() {
        return Ok(f(b.as_bytes()));
    }
    let mut raw = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
    // SAFETY: on success the view is filled in place (it is never moved: an
    // exporter may point its shape and strides into it) and released below.
    if unsafe { ffi::PyObject_GetBuffer(data.as_ptr(), raw.as_mut_ptr(), ffi::PyBUF_STRIDES) } == -1
    {
        return Err(PyErr::fetch(data.py()));
    }
    let view = raw.as_mut_ptr();
    let result = if unsafe { ffi::PyBuffer_IsContiguous(view, b'C' as std::ffi::c_char) } == 0 {
        Err(pyo3::exceptions::PyBufferError::new_err(
            "offer needs a C-contiguous buffer",
        ))
    } else {
        // SAFETY: the exporter keeps `len` bytes at `buf` alive and unmoved until released.
        let (ptr, len) = unsafe { ((*view).buf as *const u8, (*view).len as usize) };
        let slice: &[u8] = if len == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(ptr, len) }
        };
        Ok(f(slice))
    };
    unsafe { ffi::PyBuffer_Release(view) };
    result
}

/// The width of an integer column's items from its buffer's item size and
/// struct format: 4 or 8 for little-endian (or native) int32 or int64
/// items, `raw` for bytes (read as packed little-endian integers of that
/// width, as an Arrow buffer holds them), `None` for anything else (floats,
/// int16, big-endian items...).
pub(crate) fn int_width(itemsize: usize, format: &str, raw: usize) -> Option<usize> {
    let kind = format.trim_start_matches(['@', '=', '<']);
    match (itemsize, kind) {
        (1, "B" | "b" | "c") => Some(raw),
        (4, "i" | "I" | "l" | "L") => Some(4),
        (8, "q" | "Q" | "l" | "L" | "n" | "N") => Some(8),
        _ => None,
    }
}

/// An integer column of `column` (`what` names it in errors): int32 or
/// int64 items (numpy, `array.array`, a typed memoryview) or bytes read as
/// packed little-endian integers of `raw` bytes (a pyarrow buffer), as i64s.
/// Items of another type raise `TypeError` rather than be misread (numpy
/// int64 offsets read as int32 would be pairs of wrong offsets).
pub(crate) fn int_column(column: &Bound<'_, PyAny>, what: &str, raw: usize) -> PyResult<Vec<i64>> {
    let packed = |b: &[u8], width: usize| -> PyResult<Vec<i64>> {
        if !b.len().is_multiple_of(width) {
            return Err(PyValueError::new_err(format!(
                "{what}: {} bytes is not a column of {width}-byte integers",
                b.len()
            )));
        }
        Ok(match width {
            4 => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")) as i64)
                .collect(),
            _ => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        })
    };
    if let Some(b) = exact_bytes(column) {
        return packed(b, raw);
    }
    let view = View::get(column, ffi::PyBUF_STRIDES | ffi::PyBUF_FORMAT, what)?;
    let format = view.format();
    let Some(width) = int_width(view.itemsize(), &format, raw) else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be int32 or int64 (got items of format '{format}', {} bytes)",
            view.itemsize()
        )));
    };
    packed(view.bytes(), width)
}

/// Arrow-layout offsets (`int_column` with raw bytes read as int32), each
/// checked to fit an int32.
pub(crate) fn offsets_column(column: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<i32>> {
    int_column(column, what, 4)?
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            i32::try_from(v).map_err(|_| {
                PyValueError::new_err(format!(
                    "{what}[{i}] = {v} does not fit a message offset (int32)"
                ))
            })
        })
        .collect()
}

/// A buffer view held open through the buffer protocol.
pub(crate) struct View(Box<ffi::Py_buffer>);

impl View {
    pub(crate) fn get(
        obj: &Bound<'_, PyAny>,
        flags: std::ffi::c_int,
        what: &str,
    ) -> PyResult<View> {
        // SAFETY: a zeroed Py_buffer is what PyObject_GetBuffer fills in; it
        // is boxed, so the address the exporter may keep stays put.
        let mut raw: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *raw, flags) } == -1 {
            let cause = PyErr::fetch(obj.py());
            return Err(PyTypeError::new_err(format!(
                "{what} must support the buffer protocol (bytes, bytearray, numpy array, \
                 pyarrow Buffer...): {cause}"
            )));
        }
        let view = View(raw);
        if unsafe { ffi::PyBuffer_IsContiguous(&*view.0, b'C' as std::ffi::c_char) } == 0 {
            return Err(PyValueError::new_err(format!(
                "{what} must be a C-contiguous buffer"
            )));
        }
        Ok(view)
    }

    pub(crate) fn ptr(&self) -> *const u8 {
        self.0.buf as *const u8
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len as usize
    }

    /// The viewed bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        if self.len() == 0 {
            return &[];
        }
        // SAFETY: the exporter keeps `len` bytes at `buf` alive and unmoved until released.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len()) }
    }

    pub(crate) fn itemsize(&self) -> usize {
        self.0.itemsize as usize
    }

    /// The struct-module format of the items ("B" when none was given).
    pub(crate) fn format(&self) -> String {
        if self.0.format.is_null() {
            return "B".into();
        }
        // SAFETY: a non-null format is a NUL-terminated string owned by the view.
        unsafe { std::ffi::CStr::from_ptr(self.0.format) }
            .to_string_lossy()
            .into_owned()
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: the view was filled by PyObject_GetBuffer and is released once.
        Python::attach(|_| unsafe { ffi::PyBuffer_Release(&mut *self.0) });
    }
}
