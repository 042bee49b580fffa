//! `sulis.Publication` and `sulis.ExclusivePublication`: one macro gives both
//! classes their methods; `fast_offer` replaces PyO3's `offer` by a raw
//! CPython entry, `claim` is `BufferClaim`, `offer_batch` the batch forms.
//!
//! `offer` is the hot path: the payload is read in place (bytes, or any
//! C-contiguous buffer) and appended by Rust with the GIL held — releasing the
//! GIL would cost more than the append itself.

mod claim;
mod fast_offer;
pub(crate) mod offer_batch;

pub use claim::PyBufferClaim;

use crate::buffer::{exact_bytes, with_bytes};
use crate::errors::{offer_err, ClosedError};
use crate::gil;
use crate::guard::InUse;
use claim::claim_result;
use fast_offer::RawOffer;
use offer_batch::{offer_sequence, BufferBatch, ReservedValues};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use std::cell::UnsafeCell;
use sulis_client::{ExclusivePublication, OfferError, Publication};

/// Adds both publication classes and `BufferClaim` to the module, and puts
/// the raw `offer` in place of PyO3's (it returns `OfferResult` members, so
/// `offer_result::register` must have run).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPublication>()?;
    m.add_class::<PyExclusivePublication>()?;
    m.add_class::<PyBufferClaim>()?;
    fast_offer::install::<PyPublication>(m.py())?;
    fast_offer::install::<PyExclusivePublication>(m.py())
}

#[inline(always)]
pub(super) fn offer_result(r: Result<i64, OfferError>) -> PyResult<i64> {
    match r {
        Ok(p) => Ok(p),
        Err(OfferError::Closed) => Err(ClosedError::new_err("publication is closed")),
        Err(e) => match e.code() {
            Some(code) => Ok(code),
            None => Err(offer_err(e)),
        },
    }
}

macro_rules! publication_methods {
    ($ty:ty, $kind:literal) => {
        impl $ty {
            /// `offer` up to the position or code: the one call site of the
            /// inlined append, for `bytes`; any other buffer goes through an
            /// out-of-line copy of it.
            #[inline(always)]
            fn offer_object(
                &self,
                data: &Bound<'_, PyAny>,
                reserved: Option<i64>,
            ) -> PyResult<i64> {
                let r = match exact_bytes(data) {
                    Some(b) => self.with_pub(|p| p.offer_with(b, reserved))?,
                    None => self.offer_buffer(data, reserved)?,
                };
                offer_result(r)
            }
        }

        impl RawOffer for $ty {
            #[inline(always)]
            unsafe fn offer_raw(
                py: Python<'_>,
                slf: *mut ffi::PyObject,
                data: &Bound<'_, PyAny>,
                reserved: Option<i64>,
            ) -> PyResult<i64> {
                // SAFETY: the caller passes a live instance of this class.
                let slf = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<$ty>() };
                slf.get().offer_object(data, reserved)
            }
            fn pyo3_offer() -> &'static PyOnceLock<Py<PyAny>> {
                static ORIGINAL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
                &ORIGINAL
            }
        }

        #[pymethods]
        impl $ty {
            /// Appends a message (bytes or any contiguous buffer). Returns the new
            /// stream position (an int > 0) or an OfferResult: NOT_CONNECTED,
            /// BACK_PRESSURED, ADMIN_ACTION or MAX_POSITION_EXCEEDED (an IntEnum
            /// equal to Aeron's negative codes, and false: `if pub.offer(m):`
            /// is true only when it went). Raises MessageTooLongError above
            /// `max_message_length`, ClosedError after close().
            #[pyo3(signature = (data, reserved_value=None))]
            fn offer(
                &self,
                py: Python<'_>,
                data: &Bound<'_, PyAny>,
                reserved_value: Option<i64>,
            ) -> PyResult<Py<PyAny>> {
                // Only the calls the raw entry hands over come here (a wrong
                // shape, a `reserved_value` that is not an int or None): no
                // inlined copy of the append.
                let r = self.offer_buffer(data, reserved_value)?;
                crate::offer_result::to_py(py, offer_result(r)?)
            }

            /// Publishes many messages with one call: `messages` is a pyarrow
            /// binary/large_binary/string/large_string Array or ChunkedArray,
            /// or a sequence of bytes-like objects; or pass `data=` and
            /// Arrow-layout `offsets=` buffers (n + 1 int32 or int64 offsets;
            /// raw bytes are read as int32). Each element is its own message
            /// (fragmented as by `offer`). Returns a PublishedBatch, the tuple
            /// `(published, result)`: how many went, then the position after
            /// the last one, or the code (BACK_PRESSURED, NOT_CONNECTED, ...)
            /// that stopped it, so the caller offers the rest later; true only
            /// if every message went. Buffer forms are checked
            /// first (a message over `max_message_length` raises
            /// MessageTooLongError and nothing is published) and appended
            /// with the GIL released.
            ///
            /// `reserved_values` stamps the messages' reserved values (every
            /// fragment's header): an int for all of them, or one int64 per
            /// message (a numpy int64 array, ...), as `offer(reserved_value=)`
            /// does for one; e.g. a publish time in epoch nanoseconds.
            #[pyo3(signature = (messages=None, *, data=None, offsets=None, reserved_values=None))]
            fn offer_batch(
                &self,
                py: Python<'_>,
                messages: Option<&Bound<'_, PyAny>>,
                data: Option<&Bound<'_, PyAny>>,
                offsets: Option<&Bound<'_, PyAny>>,
                reserved_values: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Py<PyAny>> {
                let batch = match (messages, data, offsets) {
                    (None, Some(d), Some(o)) => Some(BufferBatch::from_buffers(d, o)?),
                    (Some(m), None, None) => BufferBatch::from_arrow(m)?,
                    _ => return Err(pyo3::exceptions::PyTypeError::new_err(
                        "offer_batch takes messages (an Arrow array or a sequence of bytes-like \
                             objects), or data= and offsets= buffers",
                    )),
                };
                let Some(batch) = batch else {
                    let m = messages.expect("matched above");
                    let count = if reserved_values.is_some() {
                        m.len()?
                    } else {
                        0
                    };
                    let reserved = ReservedValues::from_arg(reserved_values, count)?;
                    let mut i = 0;
                    let (n, r) = offer_sequence(
                        m,
                        |b| {
                            let r = self.with_pub(|p| p.offer_with(b, reserved.get(i)));
                            if matches!(r, Ok(Ok(_))) {
                                i += 1;
                            }
                            r
                        },
                        || self.with_pub(|p| p.position()),
                    )?;
                    return crate::offer_result::published_batch_to_py(py, n, r);
                };
                let reserved = ReservedValues::from_arg(reserved_values, batch.len())?;
                batch.validate(self.with_pub(|p| p.max_message_length())?)?;
                let msgs = batch.messages();
                let (n, r) = gil::released(py, || {
                    self.with_pub(|p| p.offer_batch_with(msgs.iter(), |i| reserved.get(i)))
                })?;
                drop(reserved);
                drop(batch);
                crate::offer_result::published_batch_to_py(py, n, offer_result(r)?)
            }

            /// Claims `length` bytes (at most `max_payload_length`) in the log.
            /// Returns a BufferClaim to fill and commit, or an OfferResult
            /// (false: `if claim := pub.try_claim(n):` reads as it behaves).
            fn try_claim(&self, py: Python<'_>, length: usize) -> PyResult<Py<PyAny>> {
                let r = self.with_pub(|p| p.try_claim(length))?;
                claim_result(py, r)
            }

            /// True when a subscriber is connected.
            #[getter]
            fn is_connected(&self) -> PyResult<bool> {
                self.with_pub(|p| p.is_connected())
            }
            /// The publisher's stream position.
            #[getter]
            fn position(&self) -> PyResult<i64> {
                self.with_pub(|p| p.position())
            }
            /// Limit the driver allows the publisher to reach.
            #[getter]
            fn position_limit(&self) -> PyResult<i64> {
                self.with_pub(|p| p.position_limit())
            }
            /// Session id.
            #[getter]
            fn session_id(&self) -> PyResult<i32> {
                self.with_pub(|p| p.session_id())
            }
            /// Stream id.
            #[getter]
            fn stream_id(&self) -> PyResult<i32> {
                self.with_pub(|p| p.stream_id())
            }
            /// Channel URI.
            #[getter]
            fn channel(&self) -> PyResult<String> {
                self.with_pub(|p| p.channel().to_string())
            }
            /// Registration id of this publication.
            #[getter]
            fn registration_id(&self) -> PyResult<i64> {
                self.with_pub(|p| p.registration_id())
            }
            /// Largest message `offer` accepts: min(16 MiB, term length / 8).
            #[getter]
            fn max_message_length(&self) -> PyResult<usize> {
                self.with_pub(|p| p.max_message_length())
            }
            /// Largest fragment payload, and the largest claim: MTU - 32.
            #[getter]
            fn max_payload_length(&self) -> PyResult<usize> {
                self.with_pub(|p| p.max_payload_length())
            }
            /// Term buffer length.
            #[getter]
            fn term_buffer_length(&self) -> PyResult<usize> {
                self.with_pub(|p| p.term_buffer_length())
            }
            /// True once closed.
            #[getter]
            fn is_closed(&self) -> bool {
                self.with_pub(|p| p.is_closed()).unwrap_or(true)
            }
            /// Adds a destination to a manual multi-destination-cast
            /// publication (`aeron:udp?control-mode=manual`): `channel` is
            /// `aeron:udp?endpoint=HOST:PORT`. Waits for the driver; returns
            /// the destination's id (for `remove_destination_by_id`).
            /// Raises RegistrationError if the publication is not a manual
            /// MDC one or the channel names no address.
            fn add_destination(&self, py: Python<'_>, channel: &str) -> PyResult<i64> {
                let inner = self.raw();
                gil::released(py, || inner.add_destination(channel))
                    .map_err(crate::errors::client_err)
            }
            /// Removes the destination added with `channel` (one that is not
            /// there: nothing happens).
            fn remove_destination(&self, py: Python<'_>, channel: &str) -> PyResult<()> {
                let inner = self.raw();
                gil::released(py, || inner.remove_destination(channel))
                    .map_err(crate::errors::client_err)
            }
            /// Removes the destination whose `add_destination` returned `destination_id`.
            fn remove_destination_by_id(
                &self,
                py: Python<'_>,
                destination_id: i64,
            ) -> PyResult<()> {
                let inner = self.raw();
                gil::released(py, || inner.remove_destination_by_id(destination_id))
                    .map_err(crate::errors::client_err)
            }
            /// Closes the publication (idempotent).
            fn close(&self, py: Python<'_>) -> PyResult<()> {
                let inner = self.raw();
                // Closed on this side either way; a Ctrl-C while the driver
                // is asked to release it comes out as KeyboardInterrupt.
                gil::released(py, || inner.close()).map_err(crate::errors::client_err)
            }
            fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
                if slf.get().is_closed() {
                    return Err(ClosedError::new_err(concat!($kind, " is closed")));
                }
                Ok(slf)
            }
            #[pyo3(signature = (*_args))]
            fn __exit__(
                &self,
                py: Python<'_>,
                _args: &Bound<'_, pyo3::types::PyTuple>,
            ) -> PyResult<bool> {
                self.close(py)?;
                Ok(false)
            }
            fn __repr__(&self) -> String {
                self.with_pub(|p| {
                    format!(
                        concat!(
                            $kind,
                            "(channel={:?}, stream_id={}, session_id={}, position={})"
                        ),
                        p.channel(),
                        p.stream_id(),
                        p.session_id(),
                        p.position()
                    )
                })
                .unwrap_or_else(|_| concat!($kind, "(in use)").to_string())
            }
        }
    };
}

/// A concurrent publication: many threads and processes may offer to it.
#[pyclass(module = "sulis._native", name = "Publication", frozen)]
pub struct PyPublication {
    inner: Publication,
}

impl PyPublication {
    pub(crate) fn new(inner: Publication) -> Self {
        PyPublication { inner }
    }
    #[inline(always)]
    fn with_pub<R>(&self, f: impl FnOnce(&Publication) -> R) -> PyResult<R> {
        Ok(f(&self.inner))
    }
    fn raw(&self) -> &Publication {
        &self.inner
    }
    #[inline(never)]
    fn offer_buffer(
        &self,
        data: &Bound<'_, PyAny>,
        reserved: Option<i64>,
    ) -> PyResult<Result<i64, OfferError>> {
        with_bytes(data, |b| self.with_pub(|p| p.offer_with(b, reserved)))?
    }
}

publication_methods!(PyPublication, "Publication");

/// A single-writer publication: faster, never shared, its own session.
/// Calls from two threads at once raise an error instead of corrupting the log.
#[pyclass(module = "sulis._native", name = "ExclusivePublication", frozen)]
pub struct PyExclusivePublication {
    inner: UnsafeCell<ExclusivePublication>,
    in_use: InUse,
}

// SAFETY: every access to `inner` goes through `with_pub`, which holds the
// `in_use` flag, so at most one thread touches the publication at a time;
// `close` and the read-only accessors it shares only use atomics.
unsafe impl Sync for PyExclusivePublication {}

impl PyExclusivePublication {
    pub(crate) fn new(inner: ExclusivePublication) -> Self {
        PyExclusivePublication {
            inner: UnsafeCell::new(inner),
            in_use: InUse::default(),
        }
    }
    #[inline(always)]
    fn with_pub<R>(&self, f: impl FnOnce(&mut ExclusivePublication) -> R) -> PyResult<R> {
        let _g = self.in_use.enter("ExclusivePublication")?;
        // SAFETY: exclusive access guaranteed by the in-use flag.
        Ok(f(unsafe { &mut *self.inner.get() }))
    }
    fn raw(&self) -> &ExclusivePublication {
        // SAFETY: close() only touches atomics and the driver connection.
        unsafe { &*self.inner.get() }
    }
    #[inline(never)]
    fn offer_buffer(
        &self,
        data: &Bound<'_, PyAny>,
        reserved: Option<i64>,
    ) -> PyResult<Result<i64, OfferError>> {
        with_bytes(data, |b| self.with_pub(|p| p.offer_with(b, reserved)))?
    }
}

publication_methods!(PyExclusivePublication, "ExclusivePublication");
