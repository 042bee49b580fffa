//! `sulis.Publication`, `sulis.ExclusivePublication` and `sulis.BufferClaim`.
//!
//! `offer` is the hot path: the payload is read in place (bytes, or any
//! C-contiguous buffer) and appended by Rust with the GIL held — releasing the
//! GIL would cost more than the append itself.

use crate::errors::{offer_err, ClosedError, MessageTooLongError};
use crate::guard::InUse;
use crate::offer_batch::{BufferBatch, ReservedValues};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use pyo3::PyTypeInfo;
use std::cell::UnsafeCell;
use sulis_client::{BufferClaim, ExclusivePublication, OfferError, Publication};

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
            sulis_client::publication::offer_each(std::iter::once(b), |_, m| {
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
            /// (fragmented as by `offer`). Returns `(published, result)`:
            /// how many went, then the position after the last one, or the
            /// code (BACK_PRESSURED, NOT_CONNECTED, ...) that stopped it, so
            /// the caller offers the rest later. Buffer forms are checked
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
                    return Ok((n, crate::offer_result::to_py(py, r)?));
                };
                let reserved = ReservedValues::from_arg(reserved_values, batch.len())?;
                batch.validate(self.with_pub(|p| p.max_message_length())?)?;
                let msgs = batch.messages();
                let (n, r) = py.detach(|| {
                    self.with_pub(|p| p.offer_batch_with(msgs.iter(), |i| reserved.get(i)))
                })?;
                drop(reserved);
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
                // Closed on this side either way; a Ctrl-C while the driver
                // is asked to release it comes out as KeyboardInterrupt.
                py.detach(|| inner.close())
                    .map_err(crate::errors::client_err)
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

/// `offer` as a raw `METH_FASTCALL` method, installed over the one PyO3
/// generates (see [`install_raw_offer`]).
///
/// A loop of `pub.offer(b)` spends as much in the call as in the append: for
/// every call PyO3's method parses its arguments into an array of optional
/// slots, enters its trampoline (two thread-local accesses, the deferred
/// reference pool, a result copied through memory) and only then offers. The
/// raw entry takes `data` and an optional `reserved_value` (an int or None),
/// by position or keyword, straight to the append and returns the position
/// as an int (or the `OfferResult` member); anything else (a wrong count, an
/// unknown or repeated keyword, a `reserved_value` of another type or out of
/// range) is handed to the PyO3 method it replaced, so parsing and its
/// errors stay PyO3's.
trait RawOffer: PyTypeInfo {
    /// Offers `data`: the position, a negative code, or the error `offer`
    /// raises.
    ///
    /// # Safety
    /// `slf` is a live instance of `Self`, and the GIL is held.
    unsafe fn offer_raw(
        py: Python<'_>,
        slf: *mut ffi::PyObject,
        data: &Bound<'_, PyAny>,
        reserved: Option<i64>,
    ) -> PyResult<i64>;
    /// The PyO3 method the raw entry replaced.
    fn pyo3_offer() -> &'static PyOnceLock<Py<PyAny>>;
}

/// The raw `offer` (a `PyCFunctionFastWithKeywords`).
///
/// # Safety
/// Called by CPython only, through the method descriptor made in
/// [`install_raw_offer`]: the GIL is held (the module is abi3, which
/// free-threaded builds cannot load), `slf` is an instance of `T` (the
/// descriptor checks it; neither class can be subclassed) and `args` holds
/// `nargs` positional values followed by one per name in `kwnames`.
unsafe extern "C" fn offer_fastcall<T: RawOffer>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: the GIL is held (see above). PyO3's own count of attached
    // calls stays at what the caller left: the success paths make only
    // borrowed references and `Bound`s, and errors are raised inside
    // `Python::attach` (a `Py` dropped without the count is deferred, not lost).
    let py = unsafe { Python::assume_attached() };
    let (data, reserved) = if nargs == 1 && kwnames.is_null() {
        (unsafe { *args }, None)
    } else {
        match unsafe { offer_args(py, args, nargs, kwnames) } {
            Some(a) => a,
            None => return unsafe { offer_fallback::<T>(slf, args, nargs, kwnames) },
        }
    };
    let data = unsafe { Borrowed::from_ptr(py, data) };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        T::offer_raw(py, slf, &data, reserved)
    }));
    match result {
        Ok(Ok(position)) if position >= 0 => unsafe { ffi::PyLong_FromLongLong(position) },
        Ok(Ok(code)) => match crate::offer_result::to_py(py, code) {
            Ok(member) => member.into_ptr(),
            Err(e) => raise(e),
        },
        Ok(Err(e)) => raise(e),
        Err(payload) => raise(panic_error(payload)),
    }
}

/// `data` and `reserved_value` of any other call than `offer(data)`, or None
/// for what the PyO3 method is left to parse (and refuse).
///
/// # Safety
/// As [`offer_fastcall`].
#[inline(never)]
unsafe fn offer_args(
    py: Python<'_>,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> Option<(*mut ffi::PyObject, Option<i64>)> {
    let nargs = nargs as usize;
    let nkw = if kwnames.is_null() {
        0
    } else {
        unsafe { ffi::PyTuple_Size(kwnames) as usize }
    };
    if nargs > 2 || nargs + nkw > 2 {
        return None;
    }
    let mut slots = [std::ptr::null_mut(); 2];
    for (i, slot) in slots.iter_mut().enumerate().take(nargs) {
        *slot = unsafe { *args.add(i) };
    }
    for i in 0..nkw {
        // Names are interned where the call is compiled, as `intern!`'s
        // are: another spelling of the same name just goes to PyO3.
        let name = unsafe { ffi::PyTuple_GetItem(kwnames, i as ffi::Py_ssize_t) };
        let slot = if name == pyo3::intern!(py, "data").as_ptr() {
            0
        } else if name == pyo3::intern!(py, "reserved_value").as_ptr() {
            1
        } else {
            return None;
        };
        if !slots[slot].is_null() {
            return None;
        }
        slots[slot] = unsafe { *args.add(nargs + i) };
    }
    let [data, reserved] = slots;
    if data.is_null() {
        return None;
    }
    if reserved.is_null() || reserved == unsafe { ffi::Py_None() } {
        return Some((data, None));
    }
    // Exactly int (not bool, not an `__index__` that could run twice).
    if unsafe { ffi::Py_TYPE(reserved) != std::ptr::addr_of_mut!(ffi::PyLong_Type) } {
        return None;
    }
    let value = unsafe { ffi::PyLong_AsLongLong(reserved) };
    if value == -1 && unsafe { !ffi::PyErr_Occurred().is_null() } {
        // Out of range: PyO3 raises its OverflowError.
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    Some((data, Some(value)))
}

/// Sets `e` as the current exception (inside `Python::attach`, so that the
/// references PyO3 drops meanwhile go at once) and returns NULL.
#[cold]
#[inline(never)]
fn raise(e: PyErr) -> *mut ffi::PyObject {
    Python::attach(|py| e.restore(py));
    std::ptr::null_mut()
}

#[cold]
fn panic_error(payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let message = match (
        payload.downcast_ref::<String>(),
        payload.downcast_ref::<&str>(),
    ) {
        (Some(s), _) => s.clone(),
        (None, Some(s)) => s.to_string(),
        (None, None) => "panic from Rust code".to_string(),
    };
    pyo3::panic::PanicException::new_err((message,))
}

/// Any call of `offer` but `offer(data)`: calls the PyO3 method with the same
/// arguments.
///
/// # Safety
/// As [`offer_fastcall`].
#[cold]
#[inline(never)]
unsafe fn offer_fallback<T: RawOffer>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let call = |py: Python<'_>| -> PyResult<*mut ffi::PyObject> {
        let nargs = nargs as usize;
        let nkw = if kwnames.is_null() {
            0
        } else {
            unsafe { ffi::PyTuple_Size(kwnames) as usize }
        };
        let values: &[*mut ffi::PyObject] = if nargs + nkw == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(args, nargs + nkw) }
        };
        let arg = |p: *mut ffi::PyObject| unsafe { Borrowed::from_ptr(py, p) };
        let mut positional = vec![arg(slf)];
        positional.extend(values[..nargs].iter().map(|p| arg(*p)));
        let positional = PyTuple::new(py, positional)?;
        let kwargs = PyDict::new(py);
        if nkw > 0 {
            let names = unsafe { Borrowed::from_ptr(py, kwnames) }.cast::<PyTuple>()?;
            for (name, value) in names.iter().zip(&values[nargs..]) {
                kwargs.set_item(name, arg(*value))?;
            }
        }
        let original = T::pyo3_offer()
            .get(py)
            .expect("set before the raw entry is installed");
        Ok(original
            .bind(py)
            .call(positional, Some(&kwargs))?
            .into_ptr())
    };
    Python::attach(|py| {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(py)));
        match result.unwrap_or_else(|payload| Err(panic_error(payload))) {
            Ok(value) => value,
            Err(e) => {
                e.restore(py);
                std::ptr::null_mut()
            }
        }
    })
}

/// Replaces PyO3's `offer` of both publication classes by [`offer_fastcall`],
/// keeping the PyO3 method for the other call shapes. Its name, text
/// signature and doc are copied, so introspection sees the same method.
pub(crate) fn install_raw_offer(py: Python<'_>) -> PyResult<()> {
    install::<PyPublication>(py)?;
    install::<PyExclusivePublication>(py)
}

fn install<T: RawOffer>(py: Python<'_>) -> PyResult<()> {
    if T::pyo3_offer().get(py).is_some() {
        return Ok(());
    }
    let ty = py.get_type::<T>();
    let original = ty.getattr("offer")?;
    let doc = format!(
        "offer{}\n--\n\n{}",
        original
            .getattr("__text_signature__")?
            .extract::<String>()?,
        original.getattr("__doc__")?.extract::<String>()?
    );
    // The definition must outlive the type: both are leaked, once per class.
    let def = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: c"offer".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: offer_fastcall::<T>,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: std::ffi::CString::new(doc)?.into_raw(),
    }));
    // SAFETY: `def` is valid for the life of the process; the type is ours.
    let descr =
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), def))? };
    let _ = T::pyo3_offer().set(py, original.unbind());
    ty.setattr("offer", descr)
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
