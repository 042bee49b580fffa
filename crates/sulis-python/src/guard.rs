//! A cheap single-user guard for native objects that are not thread-safe.
//!
//! Exclusive publications and subscriptions keep single-writer state. The
//! guard turns a second thread's concurrent call into a Python error instead
//! of a data race, at the cost of one atomic swap per call.

use crate::errors::SulisError;
use pyo3::PyResult;
use std::sync::atomic::{AtomicBool, Ordering};

/// Marks an object in use.
#[derive(Default)]
pub struct InUse(AtomicBool);

/// Clears the mark when dropped.
pub struct InUseGuard<'a>(&'a AtomicBool);

impl InUse {
    /// Enters; fails if another thread is inside.
    #[inline(always)]
    pub fn enter(&self, what: &str) -> PyResult<InUseGuard<'_>> {
        if self.0.swap(true, Ordering::Acquire) {
            return Err(SulisError::new_err(format!(
                "{what} is not thread-safe: it is already in use by another thread (or re-entered from a callback)"
            )));
        }
        Ok(InUseGuard(&self.0))
    }
}

impl Drop for InUseGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
