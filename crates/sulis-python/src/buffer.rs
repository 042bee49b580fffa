//! Reading a Python object's bytes in place: `bytes` by a pointer compare,
//! anything else through the buffer protocol, with no copy.

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
