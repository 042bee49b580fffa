//! A cheap single-user guard for native objects that are not thread-safe.
//!
//! Exclusive publications and subscriptions keep single-writer state. The
//! guard turns a second use while one is under way (another thread's call
//! made while this one released the GIL, or a callback re-entering the
//! object) into a Python error instead of a data race, at the cost of a
//! relaxed load and store per call (see `enter`).

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
        // Every caller holds the GIL (the module is abi3, which free-threaded
        // builds cannot load), so a load and a store suffice: no atomic swap
        // on the hot path. The flag still catches re-entry from a callback and
        // use from a thread that released the GIL inside a call.
        if self.0.load(Ordering::Relaxed) {
            return Err(SulisError::new_err(format!(
                "{what} is not thread-safe: it is already in use by another thread (or re-entered from a callback)"
            )));
        }
        self.0.store(true, Ordering::Relaxed);
        Ok(InUseGuard(&self.0))
    }
}

impl Drop for InUseGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}
