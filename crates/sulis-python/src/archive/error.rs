//! `sulis.ArchiveError`, and the archive's native errors as Python exceptions.

use crate::errors::{ConfigurationError, SulisError};
use crate::gil;
use pyo3::create_exception;
use pyo3::prelude::*;
use sulis_archive::ArchiveError as RustArchiveError;
use sulis_archive::ArchiveStartError;

create_exception!(
    sulis,
    ArchiveError,
    SulisError,
    "The archive refused a request or did not answer; `code` carries the archive's error code (-1 if none)."
);

/// Why an archive could not start, as Python sees it: a wrong setting is a
/// `ConfigurationError`, a file that failed an `ArchiveIOError` (an
/// `OSError` with `errno`), anything else (a directory another archive
/// runs in, a catalog that cannot be used, no driver) a `SulisError`.
pub(super) fn start_err(e: ArchiveStartError) -> PyErr {
    match e {
        ArchiveStartError::Config(m) => ConfigurationError::new_err(m),
        ArchiveStartError::Io { message, os_error } => Python::attach(|py| {
            // sulis.ArchiveIOError is both a SulisError and an OSError
            // (defined in Python: one class of two exception bases).
            let made = py
                .import("sulis.errors")
                .and_then(|m| m.getattr("ArchiveIOError"))
                .and_then(|cls| match os_error {
                    Some(errno) => cls.call1((errno, message.clone())),
                    None => cls.call1((message.clone(),)),
                });
            match made {
                Ok(e) => PyErr::from_value(e),
                Err(e) => e,
            }
        }),
        other => SulisError::new_err(other.to_string()),
    }
}

impl gil::NativeError for ArchiveStartError {
    fn into_py_err(self) -> PyErr {
        start_err(self)
    }
}

impl gil::NativeError for RustArchiveError {
    fn into_py_err(self) -> PyErr {
        archive_err(self)
    }
}

pub(super) fn archive_err(e: RustArchiveError) -> PyErr {
    let (message, code) = match e {
        RustArchiveError::Archive { code, message } => {
            (format!("{message} (archive error code {code})"), code)
        }
        RustArchiveError::Interrupted(m) => {
            return crate::errors::client_err(sulis_client::ClientError::Interrupted(m))
        }
        RustArchiveError::Timeout(m)
        | RustArchiveError::Client(m)
        | RustArchiveError::Protocol(m) => (m, -1),
    };
    let err = ArchiveError::new_err(message);
    Python::attach(|py| {
        let _ = err.value(py).setattr("code", code);
    });
    err
}
