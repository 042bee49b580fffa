//! `sulis.Publication`, `sulis.ExclusivePublication` and `sulis.BufferClaim`.
//!
//! `offer` is the hot path: the payload is read in place (bytes, or any
//! C-contiguous buffer) and appended by Rust with the GIL held — releasing the
//! GIL would cost more than the append itself.

use crate::errors::{offer_err, ClosedError, MessageTooLongError};
use crate::guard::InUse;
use crate::offer_batch::BufferBatch;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::cell::UnsafeCell;
use sulis_client::{BufferClaim, ExclusivePublication, OfferError, Publication};

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

#[inline(always)]
fn offer_result(r: Result<i64, OfferError>) -> PyResult<i64> {
    match r {
        Ok(p) => Ok(p),
        Err(OfferError::Closed) => Err(ClosedError::new_err("publication is closed")),
        Err(e) => match e.code() {
            Some(code) => Ok(code),
            None => Err(offer_err(e)),
        },
    }
}

fn claim_result(py: Python<'_>, r: Result<BufferClaim, OfferError>) -> PyResult<Py<PyAny>> {
    match r {
        Ok(c) => Ok(Py::new(
            py,
            PyBufferClaim {
                claim: std::sync::Mutex::new(Some(c)),
                view: std::sync::Mutex::new(None),
            },
        )?
        .into_any()),
        Err(OfferError::MessageTooLong { length, max }) => Err(MessageTooLongError::new_err(
            format!("claim of {length} bytes exceeds the maximum payload length of {max} bytes"),
        )),
        Err(e) => offer_result(Err(e)).and_then(|code| crate::offer_result::to_py(py, code)),
    }
}

/// The sequence form of `offer_batch`: one Python object per message, so the
/// GIL stays held; still one call from Python for the whole batch.
fn offer_sequence(
    messages: &Bound<'_, PyAny>,
    mut offer: impl FnMut(&[u8]) -> PyResult<Result<i64, OfferError>>,
    position: impl Fn() -> PyResult<i64>,
) -> PyResult<(usize, i64)> {
    let mut count = 0;
    let mut last: Option<i64> = None;
    for item in messages.try_iter().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "offer_batch takes an Arrow array or a sequence of bytes-like objects, not {}",
            messages
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })? {
        let item = item?;
        let (n, r) = with_bytes(&item, |b| {
            sulis_client::publication::offer_each(std::iter::once(b), |m| {
                offer(m).unwrap_or(Err(OfferError::Closed))
            })
        })?;
        match r {
            Ok(p) => {
                count += n;
                last = p;
            }
            Err(OfferError::MessageTooLong { length, max }) => {
                return Err(MessageTooLongError::new_err(format!(
                    "offer_batch: message {count} of {length} bytes exceeds the maximum message \
                     length of {max} bytes; the {count} before it were published"
                )))
            }
            Err(e) => return Ok((count, offer_result(Err(e))?)),
        }
    }
    Ok((
        count,
        match last {
            Some(p) => p,
            None => position()?,
        },
    ))
}

macro_rules! publication_methods {
    ($ty:ty, $kind:literal) => {
        #[pymethods]
        impl $ty {
            /// Appends a message (bytes or any contiguous buffer). Returns the new
            /// stream position (an int >= 0) or an OfferResult: NOT_CONNECTED,
            /// BACK_PRESSURED, ADMIN_ACTION or MAX_POSITION_EXCEEDED (an IntEnum
            /// equal to Aeron's negative codes). Raises MessageTooLongError
            /// above `max_message_length`, ClosedError after close().
            #[pyo3(signature = (data, reserved_value=None))]
            fn offer(
                &self,
                py: Python<'_>,
                data: &Bound<'_, PyAny>,
                reserved_value: Option<i64>,
            ) -> PyResult<Py<PyAny>> {
                let r = with_bytes(data, |b| self.with_pub(|p| p.offer_with(b, reserved_value)))?;
                crate::offer_result::to_py(py, offer_result(r?)?)
            }

            /// Publishes many messages with one call: `messages` is a pyarrow
            /// binary/large_binary/string/large_string Array or ChunkedArray,
            /// or a sequence of bytes-like objects; or pass `data=` and
            /// Arrow-layout `offsets=` buffers (n + 1 int32 or int64 offsets;
            /// raw bytes are read as int32). Each element is its own message
            /// (fragmented as by `offer`). Returns `(published, result)`:
            /// how many went, then the position after the last one, or the
            /// code (BACK_PRESSURED, NOT_CONNECTED, ...) that stopped it, so
            /// the caller offers the rest later. Buffer forms are checked
            /// first (a message over `max_message_length` raises
            /// MessageTooLongError and nothing is published) and appended
            /// with the GIL released.
            #[pyo3(signature = (messages=None, *, data=None, offsets=None))]
            fn offer_batch(
                &self,
                py: Python<'_>,
                messages: Option<&Bound<'_, PyAny>>,
                data: Option<&Bound<'_, PyAny>>,
                offsets: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<(usize, Py<PyAny>)> {
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
                    let (n, r) = offer_sequence(
                        m,
                        |b| self.with_pub(|p| p.offer_with(b, None)),
                        || self.with_pub(|p| p.position()),
                    )?;
                    return Ok((n, crate::offer_result::to_py(py, r)?));
                };
                batch.validate(self.with_pub(|p| p.max_message_length())?)?;
                let msgs = batch.messages();
                let (n, r) = py.detach(|| self.with_pub(|p| p.offer_batch(msgs.iter())))?;
                drop(batch);
                Ok((n, crate::offer_result::to_py(py, offer_result(r)?)?))
            }

            /// Claims `length` bytes (at most `max_payload_length`) in the log.
            /// Returns a BufferClaim to fill and commit, or an OfferResult.
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
            /// Closes the publication (idempotent).
            fn close(&self, py: Python<'_>) -> PyResult<()> {
                let inner = self.raw();
                py.detach(|| inner.close());
                Ok(())
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
}

publication_methods!(PyExclusivePublication, "ExclusivePublication");

/// Space claimed in the log for one message. Write `buffer`, then `commit()`;
/// or `abort()`. As a context manager it commits on success and aborts on an
/// exception; a claim that is garbage-collected uncommitted is aborted, so it
/// never blocks the stream.
#[pyclass(module = "sulis._native", name = "BufferClaim", frozen)]
pub struct PyBufferClaim {
    claim: std::sync::Mutex<Option<BufferClaim>>,
    view: std::sync::Mutex<Option<Py<PyAny>>>,
}

impl PyBufferClaim {
    fn finish(&self, py: Python<'_>, commit: bool) -> PyResult<()> {
        if let Some(v) = self.view.lock().unwrap().take() {
            // Writes after commit would corrupt the stream: revoke the view.
            let _ = v.call_method0(py, "release");
        }
        match self.claim.lock().unwrap().take() {
            Some(mut c) => {
                if commit {
                    c.commit()
                } else {
                    c.abort()
                }
                Ok(())
            }
            None => Err(ClosedError::new_err("claim already committed or aborted")),
        }
    }
}

#[pymethods]
impl PyBufferClaim {
    /// Writable memoryview over the claimed payload (valid until commit/abort).
    #[getter]
    fn buffer(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut view = self.view.lock().unwrap();
        if let Some(v) = view.as_ref() {
            return Ok(v.clone_ref(py));
        }
        let guard = self.claim.lock().unwrap();
        let c = guard
            .as_ref()
            .ok_or_else(|| ClosedError::new_err("claim already committed or aborted"))?;
        let (ptr, len) = c.raw_parts();
        // SAFETY: the claim keeps the log mapped; the view is released on commit/abort.
        let mv = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                ffi::PyMemoryView_FromMemory(ptr as *mut _, len as isize, ffi::PyBUF_WRITE),
            )?
        };
        let mv = mv.unbind();
        *view = Some(mv.clone_ref(py));
        Ok(mv)
    }
    /// Claimed length.
    #[getter]
    fn length(&self) -> PyResult<usize> {
        self.claim
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| c.length())
            .ok_or_else(|| ClosedError::new_err("claim is done"))
    }
    /// Stream position after this message.
    #[getter]
    fn position(&self) -> PyResult<i64> {
        self.claim
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| c.position())
            .ok_or_else(|| ClosedError::new_err("claim is done"))
    }
    /// Sets the frame's reserved value.
    #[setter]
    fn set_reserved_value(&self, value: i64) -> PyResult<()> {
        self.claim
            .lock()
            .unwrap()
            .as_ref()
            .map(|c| c.set_reserved_value(value))
            .ok_or_else(|| ClosedError::new_err("claim is done"))
    }
    /// Publishes the message.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, true)
    }
    /// Withdraws the message (readers skip it).
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, false)
    }
    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if self.claim.lock().unwrap().is_some() {
            self.finish(py, exc_type.is_none_or(|t| t.is_none()))?;
        }
        Ok(false)
    }
}
