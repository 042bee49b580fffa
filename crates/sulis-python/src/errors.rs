//! Python exceptions of sulis and the mapping from Rust errors.
//!
//! One base, `SulisError`, with a subclass per failure kind, so callers can
//! `except` exactly what they handle. Hot-path outcomes (back pressure, not
//! connected, admin action) are result codes, not exceptions.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use sulis_client::{ClientError, OfferError};
use sulis_protocol::control::error_code;

create_exception!(
    sulis,
    SulisError,
    PyException,
    "Base class of every sulis error."
);
create_exception!(
    sulis,
    ConfigurationError,
    SulisError,
    "An invalid channel URI, option or argument; the message names the offending part."
);
create_exception!(
    sulis,
    DriverTimeoutError,
    SulisError,
    "The media driver is not running, not answering, or has stopped heartbeating."
);
create_exception!(
    sulis,
    ClientTimeoutError,
    SulisError,
    "The media driver timed this client out (it stopped heartbeating)."
);
create_exception!(
    sulis,
    RegistrationError,
    SulisError,
    "The media driver refused a command; `code` carries Aeron's error code."
);
create_exception!(
    sulis,
    ClosedError,
    SulisError,
    "The object (or its client) is closed."
);
create_exception!(
    sulis,
    ActiveDriverError,
    SulisError,
    "Another live media driver owns the directory."
);
create_exception!(
    sulis,
    MessageTooLongError,
    ConfigurationError,
    "The message exceeds the publication's maximum message (or claim) length."
);

create_exception!(
    sulis,
    StorageSpaceError,
    SulisError,
    "A sparse log's pages could not be had: its file system (/dev/shm) is full. Nothing was appended; \
     the offer can be retried once there is room."
);

thread_local! {
    /// The exception a signal handler raised while this thread waited in a
    /// blocking call (see [`interrupt_check`]): raised in place of the wait's
    /// `Interrupted` error.
    static PENDING_SIGNAL_ERROR: std::cell::RefCell<Option<PyErr>> =
        const { std::cell::RefCell::new(None) };
}

/// The interrupt check of every client: runs Python's signal handlers (the
/// GIL is taken for it; the wait itself holds no GIL), so Ctrl-C ends a
/// blocking call with KeyboardInterrupt within one check period. Handlers
/// run on the main thread only; elsewhere this never fires.
pub fn interrupt_check() -> sulis_client::Interrupt {
    // At most every 10 ms, whoever calls: a wait that polls in a tight loop
    // (the archive client's) would otherwise take the GIL every few µs.
    let next = std::sync::Mutex::new(std::time::Instant::now());
    sulis_client::Interrupt(std::sync::Arc::new(move || {
        {
            let now = std::time::Instant::now();
            let mut next = next.lock().unwrap();
            if now < *next {
                return false;
            }
            *next = now + std::time::Duration::from_millis(10);
        }
        Python::attach(|py| match py.check_signals() {
            Ok(()) => false,
            Err(e) => {
                PENDING_SIGNAL_ERROR.with(|p| *p.borrow_mut() = Some(e));
                true
            }
        })
    }))
}

/// The exception a signal handler raised during this thread's last native
/// wait, if any: for waits whose errors are not [`ClientError`]s (a cluster
/// session's connect reports text), raised in place of their error.
pub fn pending_signal_error() -> Option<PyErr> {
    PENDING_SIGNAL_ERROR.with(|p| p.borrow_mut().take())
}

/// Converts a client error into the matching Python exception.
pub fn client_err(e: ClientError) -> PyErr {
    match e {
        ClientError::Interrupted(m) => PENDING_SIGNAL_ERROR
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| pyo3::exceptions::PyKeyboardInterrupt::new_err(m)),
        ClientError::DriverTimeout(m) => DriverTimeoutError::new_err(m),
        ClientError::ClientTimeout(m) => ClientTimeoutError::new_err(m),
        ClientError::Config(m) => ConfigurationError::new_err(m),
        ClientError::Closed(m) => ClosedError::new_err(m),
        ClientError::Registration { code, message } => {
            if code == error_code::INVALID_CHANNEL {
                ConfigurationError::new_err(message)
            } else {
                let err = RegistrationError::new_err(format!("{message} (error code {code})"));
                Python::attach(|py| {
                    let _ = err.value(py).setattr("code", code);
                });
                err
            }
        }
    }
}

/// Converts an offer failure that is not a result code into an exception.
pub fn offer_err(e: OfferError) -> PyErr {
    match e {
        OfferError::MessageTooLong { length, max } => MessageTooLongError::new_err(format!(
            "message of {length} bytes exceeds the maximum of {max} bytes"
        )),
        OfferError::Client(c) => client_err(c),
        OfferError::Closed => ClosedError::new_err("publication is closed"),
        OfferError::StorageFull(m) => StorageSpaceError::new_err(m),
        other => SulisError::new_err(format!("unexpected offer outcome {other:?}")),
    }
}

/// Registers the exceptions on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SulisError", py.get_type::<SulisError>())?;
    m.add("ConfigurationError", py.get_type::<ConfigurationError>())?;
    m.add("DriverTimeoutError", py.get_type::<DriverTimeoutError>())?;
    m.add("ClientTimeoutError", py.get_type::<ClientTimeoutError>())?;
    m.add("RegistrationError", py.get_type::<RegistrationError>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    m.add("ActiveDriverError", py.get_type::<ActiveDriverError>())?;
    m.add("MessageTooLongError", py.get_type::<MessageTooLongError>())?;
    m.add("StorageSpaceError", py.get_type::<StorageSpaceError>())?;
    Ok(())
}

impl crate::gil::NativeError for ClientError {
    fn into_py_err(self) -> PyErr {
        client_err(self)
    }
}

/// The archive tool's and the file readers' errors: a message naming the
/// file or setting at fault.
impl crate::gil::NativeError for String {
    fn into_py_err(self) -> PyErr {
        ConfigurationError::new_err(self)
    }
}
