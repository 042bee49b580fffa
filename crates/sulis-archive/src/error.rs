//! Why an archive could not start: typed, so a caller (and Python) can tell
//! a wrong setting from a full disk from a directory that is taken.

use std::fmt;
use sulis_protocol::archive::catalog::CatalogError;

/// Why an archive could not start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArchiveStartError {
    /// A setting is wrong (the message names it).
    Config(String),
    /// Another archive runs in the directory.
    DirectoryInUse(String),
    /// A file of the archive could not be created, read or written.
    Io {
        /// What, and which file.
        message: String,
        /// The operating system's error number, if it gave one.
        os_error: Option<i32>,
    },
    /// The catalog cannot be used (not a catalog, or damage that makes
    /// starting unsafe).
    Catalog(String),
    /// The media driver cannot be reached, or refused a channel.
    Driver(String),
}

impl ArchiveStartError {
    /// An I/O failure of `what`.
    pub fn io(what: impl fmt::Display, e: &std::io::Error) -> ArchiveStartError {
        ArchiveStartError::Io {
            message: format!("{what}: {e}"),
            os_error: e.raw_os_error(),
        }
    }
}

impl fmt::Display for ArchiveStartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchiveStartError::Config(m)
            | ArchiveStartError::DirectoryInUse(m)
            | ArchiveStartError::Catalog(m)
            | ArchiveStartError::Driver(m)
            | ArchiveStartError::Io { message: m, .. } => f.write_str(m),
        }
    }
}

impl std::error::Error for ArchiveStartError {}

impl From<CatalogError> for ArchiveStartError {
    fn from(e: CatalogError) -> Self {
        match e.os_error {
            Some(_) => ArchiveStartError::Io {
                message: e.message,
                os_error: e.os_error,
            },
            None => ArchiveStartError::Catalog(e.message),
        }
    }
}
