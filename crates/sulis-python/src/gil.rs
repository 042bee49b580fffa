//! Releasing the GIL: every native call that may wait (connecting, adding a
//! resource, closing, a duty cycle, a request to the archive, a file tool, a
//! bulk copy) goes through `released` or `released_or_raise`, so other Python
//! threads run meanwhile; nothing per message does (the hot paths keep it).
//! `released_or_raise` also turns the call's error into its Python exception
//! ([`NativeError`]).

use pyo3::marker::Ungil;
use pyo3::prelude::*;

/// A native error that has one Python exception (`errors.rs` and the
/// archive's mappings implement it).
pub(crate) trait NativeError {
    fn into_py_err(self) -> PyErr;
}

/// Runs `f` with the GIL released.
#[inline]
pub(crate) fn released<T: Ungil>(py: Python<'_>, f: impl Ungil + FnOnce() -> T) -> T {
    py.detach(f)
}

/// Runs `f` with the GIL released; its error as the matching Python exception.
#[inline]
pub(crate) fn released_or_raise<T: Send, E: Send + NativeError>(
    py: Python<'_>,
    f: impl Ungil + FnOnce() -> Result<T, E>,
) -> PyResult<T> {
    py.detach(f).map_err(NativeError::into_py_err)
}
