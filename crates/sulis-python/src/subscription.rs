//! `sulis.Subscription`, `sulis.Image`, `sulis.Header`, `sulis.Batch` and
//! `sulis.FragmentAssembler`.
//!
//! Handlers receive a read-only memoryview straight over the log: no copy.
//! The view is released when the handler returns, so a handler that keeps it
//! gets a clear error on use instead of reading bytes that were overwritten.

use crate::errors::{client_err, ClosedError, ConfigurationError};
use crate::gil;
use crate::guard::InUse;
use pyo3::exceptions::{PyBufferError, PyIndexError, PyTypeError};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void, CStr};
use std::sync::{Arc, Mutex};
use sulis_client::{Batch, ControlledAction, Header, Image, Subscription, SubscriptionShared};

/// Calls `f(view)` with a read-only memoryview over `bytes`, released afterwards.
#[inline(always)]
fn with_view<'py, R>(
    py: Python<'py>,
    bytes: &[u8],
    f: impl FnOnce(&Bound<'py, PyAny>) -> PyResult<R>,
) -> PyResult<R> {
    // SAFETY: the view is released below, before `bytes` can change or unmap.
    let view = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyMemoryView_FromMemory(
                bytes.as_ptr() as *mut _,
                bytes.len() as isize,
                ffi::PyBUF_READ,
            ),
        )?
    };
    let r = f(&view);
    let _ = view.call_method0(intern!(py, "release"));
    r
}

/// The header of the fragment being handled (a copy: safe to keep).
#[pyclass(module = "sulis._native", name = "Header", frozen)]
pub struct PyHeader {
    h: Header,
    /// A reassembled message's header is its first fragment's; its position
    /// is the one after the last fragment (the first one's would be wrong).
    end_position: Option<i64>,
}

impl PyHeader {
    fn new(h: Header) -> Self {
        PyHeader {
            h,
            end_position: None,
        }
    }
}

#[pymethods]
impl PyHeader {
    /// Stream position just after this fragment (after the whole message for
    /// a message reassembled by a FragmentAssembler).
    #[getter]
    fn position(&self) -> i64 {
        self.end_position.unwrap_or_else(|| self.h.position())
    }
    /// Session id.
    #[getter]
    fn session_id(&self) -> i32 {
        self.h.session_id()
    }
    /// Stream id.
    #[getter]
    fn stream_id(&self) -> i32 {
        self.h.stream_id()
    }
    /// Term id.
    #[getter]
    fn term_id(&self) -> i32 {
        self.h.term_id()
    }
    /// Offset of the frame in its term.
    #[getter]
    fn term_offset(&self) -> i32 {
        self.h.term_offset()
    }
    /// Frame flags: BEGIN 0x80, END 0x40 (both for an unfragmented message).
    #[getter]
    fn flags(&self) -> u8 {
        self.h.flags()
    }
    /// Reserved value of the frame.
    #[getter]
    fn reserved_value(&self) -> i64 {
        self.h.reserved_value()
    }
    /// Frame length (header + payload; the whole message for assembled messages).
    #[getter]
    fn frame_length(&self) -> i32 {
        self.h.frame_length()
    }
    /// Frame type (1 = DATA).
    #[getter]
    fn frame_type(&self) -> u16 {
        self.h.frame_type()
    }
    /// Initial term id of the stream.
    #[getter]
    fn initial_term_id(&self) -> i32 {
        self.h.initial_term_id()
    }
    fn __repr__(&self) -> String {
        format!(
            "Header(session_id={}, stream_id={}, position={}, flags={:#04x})",
            self.h.session_id(),
            self.h.stream_id(),
            self.position(),
            self.h.flags()
        )
    }
}

/// One publisher's stream within a subscription.
#[pyclass(module = "sulis._native", name = "Image", frozen)]
pub struct PyImage {
    image: Arc<Image>,
}

impl PyImage {
    pub(crate) fn new(image: Arc<Image>) -> Self {
        PyImage { image }
    }
}

#[pymethods]
impl PyImage {
    /// Session id of the publisher.
    #[getter]
    fn session_id(&self) -> i32 {
        self.image.session_id()
    }
    /// Correlation id of the image.
    #[getter]
    fn correlation_id(&self) -> i64 {
        self.image.correlation_id()
    }
    /// Position at which this subscriber joined.
    #[getter]
    fn join_position(&self) -> i64 {
        self.image.join_position()
    }
    /// Current subscriber position.
    #[getter]
    fn position(&self) -> i64 {
        self.image.position()
    }
    /// Moves the subscriber position forward to `position` without reading
    /// what lies between (Aeron's Image.position(long)): a frame position at
    /// most a term length ahead of the current one.
    fn set_position(&self, position: i64) -> PyResult<()> {
        self.image
            .seek(position)
            .map_err(ConfigurationError::new_err)
    }
    /// True once the publisher closed and everything was consumed.
    #[getter]
    fn is_end_of_stream(&self) -> bool {
        self.image.is_end_of_stream()
    }
    /// True once the image is gone.
    #[getter]
    fn is_closed(&self) -> bool {
        self.image.is_closed()
    }
    /// Where the publisher is (`aeron:ipc` for IPC).
    #[getter]
    fn source_identity(&self) -> String {
        self.image.source_identity().to_string()
    }
    /// Term length.
    #[getter]
    fn term_buffer_length(&self) -> usize {
        self.image.term_buffer_length()
    }
    /// Initial term id.
    #[getter]
    fn initial_term_id(&self) -> i32 {
        self.image.initial_term_id()
    }
    /// MTU of the stream.
    #[getter]
    fn mtu_length(&self) -> usize {
        self.image.mtu_length()
    }
    fn __repr__(&self) -> String {
        format!(
            "Image(session_id={}, position={}, end_of_stream={})",
            self.image.session_id(),
            self.image.position(),
            self.image.is_end_of_stream()
        )
    }
}

/// Reassembles fragmented messages for `Subscription.poll`: the wrapped
/// `handler(buffer, header)` sees whole messages; `header.frame_length` is
/// the whole message plus 32, flags are BEGIN|END. A message with a missing
/// fragment (lost on an unreliable channel, or joined mid-message) is
/// dropped, never handed over with a hole.
#[pyclass(module = "sulis._native", name = "FragmentAssembler", frozen)]
pub struct PyFragmentAssembler {
    handler: Py<PyAny>,
    assembler: Mutex<sulis_client::FragmentAssembler>,
}

impl PyFragmentAssembler {
    fn on_fragment(&self, py: Python<'_>, payload: &[u8], header: &Header) -> PyResult<()> {
        if sulis_client::FragmentAssembler::is_unfragmented(header) {
            let h = Py::new(py, PyHeader::new(*header))?;
            return with_view(py, payload, |v| self.handler.call1(py, (v, h)).map(|_| ()));
        }
        // The lock is not held while the handler runs.
        let complete = self.assembler.lock().unwrap().on_fragment(payload, header);
        if let Some(m) = complete {
            let h = Py::new(
                py,
                PyHeader {
                    h: m.header,
                    end_position: Some(m.end_position),
                },
            )?;
            return with_view(py, &m.payload, |v| {
                self.handler.call1(py, (v, h)).map(|_| ())
            });
        }
        Ok(())
    }
}

#[pymethods]
impl PyFragmentAssembler {
    #[new]
    fn new(handler: Py<PyAny>) -> Self {
        PyFragmentAssembler {
            handler,
            assembler: Mutex::new(sulis_client::FragmentAssembler::new()),
        }
    }

    /// The wrapped handler.
    #[getter]
    fn handler(&self, py: Python<'_>) -> Py<PyAny> {
        self.handler.clone_ref(py)
    }

    /// Handles one fragment (so an assembler can be called like any handler).
    fn __call__(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        header: &Bound<'_, PyHeader>,
    ) -> PyResult<()> {
        let h = header.get().h;
        crate::buffer::with_bytes(buffer, |b| self.on_fragment(py, b, &h))?
    }
}

/// Which column of a batch a buffer exposes.
#[derive(Clone, Copy)]
enum Which {
    Data,
    Offsets,
    Positions,
    SessionIds,
    Flags,
    ReservedValues,
    Lengths,
}

/// A read-only buffer over one column of a Batch (buffer protocol: works with
/// `memoryview`, `numpy.frombuffer` and `pyarrow.py_buffer` without a copy).
#[pyclass(module = "sulis._native", name = "BatchColumn", frozen)]
pub struct PyColumn {
    batch: Arc<Batch>,
    lengths: Option<Vec<i32>>,
    which: Which,
}

impl PyColumn {
    fn raw(&self) -> (*const u8, usize, usize, &'static CStr) {
        let b = &self.batch;
        fn parts<T>(v: &[T]) -> (*const u8, usize, usize) {
            (
                v.as_ptr() as *const u8,
                std::mem::size_of_val(v),
                std::mem::size_of::<T>(),
            )
        }
        let ((p, len, item), fmt) = match self.which {
            Which::Data => (parts(&b.data), c"B"),
            Which::Offsets => (parts(&b.offsets), c"i"),
            Which::Positions => (parts(&b.positions), c"q"),
            Which::SessionIds => (parts(&b.session_ids), c"i"),
            Which::Flags => (parts(&b.flags), c"B"),
            Which::ReservedValues => (parts(&b.reserved_values), c"q"),
            Which::Lengths => (parts(self.lengths.as_deref().unwrap_or(&[])), c"i"),
        };
        (p, len, item, fmt)
    }
}

#[pymethods]
impl PyColumn {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("view is null"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("batch columns are read-only"));
        }
        let (ptr, len, item, fmt) = slf.get().raw();
        // SAFETY: the column object owns an Arc of the (immutable) batch, and
        // `obj` keeps the column alive for as long as the view exists.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = ptr as *mut c_void;
            (*view).len = len as isize;
            (*view).readonly = 1;
            (*view).itemsize = item as isize;
            (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                fmt.as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                &mut (*view).len
            } else {
                std::ptr::null_mut()
            };
            // shape must be in items, not bytes: keep a per-view item count in `internal`.
            if !(*view).shape.is_null() {
                let items = Box::into_raw(Box::new((len / item) as isize));
                (*view).internal = items as *mut c_void;
                (*view).shape = items;
            } else {
                (*view).internal = std::ptr::null_mut();
            }
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                &mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        unsafe {
            if !(*view).internal.is_null() {
                drop(Box::from_raw((*view).internal as *mut isize));
                (*view).internal = std::ptr::null_mut();
            }
        }
    }

    fn __len__(&self) -> usize {
        let (_, len, item, _) = self.raw();
        len / item
    }
}

/// Many fragments copied out of the log at once: `len(batch)` fragments, their
/// payloads back to back in `data`, and columns `offsets` (int32, len+1, Arrow
/// layout), `lengths` (int32), `positions` (int64), `session_ids` (int32),
/// `flags` (uint8), `reserved_values` (int64). No Python object per fragment.
#[pyclass(module = "sulis._native", name = "Batch", frozen)]
pub struct PyBatch {
    batch: Arc<Batch>,
}

impl PyBatch {
    /// A batch filled elsewhere (the segment-file reader).
    pub(crate) fn from_batch(batch: Batch) -> PyBatch {
        PyBatch {
            batch: Arc::new(batch),
        }
    }

    fn column(&self, which: Which) -> PyColumn {
        let lengths = matches!(which, Which::Lengths).then(|| {
            self.batch
                .offsets
                .windows(2)
                .map(|w| w[1] - w[0])
                .collect::<Vec<i32>>()
        });
        PyColumn {
            batch: self.batch.clone(),
            lengths,
            which,
        }
    }
}

#[pymethods]
impl PyBatch {
    fn __len__(&self) -> usize {
        self.batch.len()
    }
    /// Payload bytes of every fragment, back to back.
    #[getter]
    fn data(&self) -> PyColumn {
        self.column(Which::Data)
    }
    /// Start of each payload in `data`, plus the end (int32, `len + 1` items).
    #[getter]
    fn offsets(&self) -> PyColumn {
        self.column(Which::Offsets)
    }
    /// Payload length of each fragment (int32).
    #[getter]
    fn lengths(&self) -> PyColumn {
        self.column(Which::Lengths)
    }
    /// Stream position after each fragment (int64).
    #[getter]
    fn positions(&self) -> PyColumn {
        self.column(Which::Positions)
    }
    /// Session id of each fragment (int32).
    #[getter]
    fn session_ids(&self) -> PyColumn {
        self.column(Which::SessionIds)
    }
    /// Frame flags of each fragment (uint8).
    #[getter]
    fn flags(&self) -> PyColumn {
        self.column(Which::Flags)
    }
    /// Reserved value of each fragment (int64).
    #[getter]
    fn reserved_values(&self) -> PyColumn {
        self.column(Which::ReservedValues)
    }
    /// Total payload bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.batch.data.len()
    }
    /// Fragment `i`'s payload as bytes (a copy).
    fn __getitem__<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyBytes>> {
        let n = self.batch.len() as isize;
        let j = if i < 0 { i + n } else { i };
        if j < 0 || j >= n {
            return Err(PyIndexError::new_err(format!(
                "batch index {i} out of range for {n} fragments"
            )));
        }
        Ok(PyBytes::new(py, self.batch.get(j as usize)))
    }
    /// Every payload as a list of bytes (copies).
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(
            py,
            (0..self.batch.len()).map(|i| PyBytes::new(py, self.batch.get(i))),
        )
    }
    fn __repr__(&self) -> String {
        format!(
            "Batch(fragments={}, bytes={})",
            self.batch.len(),
            self.batch.data.len()
        )
    }
}

/// Actions a `controlled_poll` handler returns (Aeron's order).
fn action_from(obj: &Bound<'_, PyAny>) -> PyResult<ControlledAction> {
    match obj.extract::<i64>() {
        Ok(1) => Ok(ControlledAction::Abort),
        Ok(2) => Ok(ControlledAction::Break),
        Ok(3) => Ok(ControlledAction::Commit),
        Ok(4) => Ok(ControlledAction::Continue),
        _ => Err(PyTypeError::new_err(format!(
            "controlled_poll handler must return a sulis.Action (ABORT, BREAK, COMMIT or CONTINUE), got {}",
            obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into())
        ))),
    }
}

/// A subscription to a channel and stream. Not thread-safe: poll it from one
/// thread at a time (a concurrent call raises instead of racing).
#[pyclass(module = "sulis._native", name = "Subscription", frozen)]
pub struct PySubscription {
    inner: UnsafeCell<Subscription>,
    shared: Arc<SubscriptionShared>,
    in_use: InUse,
    stream_id: i32,
    channel: String,
    registration_id: i64,
    /// The last batch handed out: refilled by the next poll_batch once
    /// Python let go of it, so a reader that drops each batch reuses one
    /// buffer instead of faulting in fresh memory per call (touched only
    /// under the `in_use` guard).
    spare: UnsafeCell<Option<Arc<Batch>>>,
}

// SAFETY: `inner` and `spare` are only touched under the `in_use` guard.
unsafe impl Sync for PySubscription {}

impl PySubscription {
    pub(crate) fn new(inner: Subscription) -> Self {
        PySubscription {
            shared: inner.shared(),
            stream_id: inner.stream_id(),
            channel: inner.channel().to_string(),
            registration_id: inner.registration_id(),
            spare: UnsafeCell::new(None),
            inner: UnsafeCell::new(inner),
            in_use: InUse::default(),
        }
    }

    /// The registration id and the image list shared with the client's
    /// thread (for waiting on an image from another call).
    pub(crate) fn shared(&self) -> (i64, Arc<SubscriptionShared>) {
        (self.registration_id, self.shared.clone())
    }

    #[inline(always)]
    fn with_sub<R>(&self, f: impl FnOnce(&mut Subscription) -> PyResult<R>) -> PyResult<R> {
        let _g = self.in_use.enter("Subscription")?;
        // SAFETY: exclusive access under the guard.
        let s = unsafe { &mut *self.inner.get() };
        if s.is_closed() {
            s.check().map_err(client_err)?;
            return Err(ClosedError::new_err("subscription is closed"));
        }
        f(s)
    }
}

#[pymethods]
impl PySubscription {
    /// Calls `handler(buffer, header)` for up to `fragment_limit` fragments;
    /// returns how many. `buffer` is a read-only memoryview valid only during
    /// the call. Wrap the handler in a FragmentAssembler to get whole messages.
    #[pyo3(signature = (handler, fragment_limit=10))]
    fn poll(
        &self,
        py: Python<'_>,
        handler: &Bound<'_, PyAny>,
        fragment_limit: usize,
    ) -> PyResult<usize> {
        if let Ok(asm) = handler.cast::<PyFragmentAssembler>() {
            let asm = asm.get();
            return self.with_sub(|s| {
                s.poll(
                    |payload, header| asm.on_fragment(py, payload, header),
                    fragment_limit,
                )
            });
        }
        self.with_sub(|s| {
            s.poll(
                |payload, header| {
                    let h = Py::new(py, PyHeader::new(*header))?;
                    with_view(py, payload, |v| handler.call1((v, h)).map(|_| ()))
                },
                fragment_limit,
            )
        })
    }

    /// Like poll, but reads no fragment that ends past `limit_position`
    /// (it stays for a later poll): Aeron's boundedPoll.
    #[pyo3(signature = (handler, limit_position, fragment_limit=10))]
    fn bounded_poll(
        &self,
        py: Python<'_>,
        handler: &Bound<'_, PyAny>,
        limit_position: i64,
        fragment_limit: usize,
    ) -> PyResult<usize> {
        if let Ok(asm) = handler.cast::<PyFragmentAssembler>() {
            let asm = asm.get();
            return self.with_sub(|s| {
                s.bounded_poll(
                    |payload, header| asm.on_fragment(py, payload, header),
                    limit_position,
                    fragment_limit,
                )
            });
        }
        self.with_sub(|s| {
            s.bounded_poll(
                |payload, header| {
                    let h = Py::new(py, PyHeader::new(*header))?;
                    with_view(py, payload, |v| handler.call1((v, h)).map(|_| ()))
                },
                limit_position,
                fragment_limit,
            )
        })
    }

    /// Like poll, but `handler` returns a sulis.Action: ABORT (leave this
    /// fragment, stop), BREAK (consume, stop), COMMIT (consume, commit
    /// position now), CONTINUE (consume, go on).
    #[pyo3(signature = (handler, fragment_limit=10))]
    fn controlled_poll(
        &self,
        py: Python<'_>,
        handler: &Bound<'_, PyAny>,
        fragment_limit: usize,
    ) -> PyResult<usize> {
        self.with_sub(|s| {
            s.controlled_poll(
                |payload, header| {
                    let h = Py::new(py, PyHeader::new(*header))?;
                    let r = with_view(py, payload, |v| handler.call1((v, h)))?;
                    action_from(&r)
                },
                fragment_limit,
            )
        })
    }

    /// Copies up to `fragment_limit` fragments into one Batch (no Python object
    /// per fragment). Returns an empty batch when nothing is available.
    /// With `limit_position`, no fragment that ends past it is read.
    #[pyo3(signature = (fragment_limit=4096, limit_position=None))]
    fn poll_batch(&self, fragment_limit: usize, limit_position: Option<i64>) -> PyResult<PyBatch> {
        if fragment_limit == 0 {
            return Err(ConfigurationError::new_err(
                "poll_batch: fragment_limit must be positive",
            ));
        }
        self.with_sub(|s| {
            // SAFETY: under the `in_use` guard taken by with_sub.
            let spare = unsafe { &mut *self.spare.get() };
            let mut batch = match spare.take() {
                Some(b) if Arc::strong_count(&b) == 1 && Arc::weak_count(&b) == 0 => b,
                _ => Arc::new(Batch::with_capacity(
                    fragment_limit.min(4096),
                    fragment_limit.min(4096) * 64,
                )),
            };
            let b = Arc::get_mut(&mut batch).expect("only the subscription holds it");
            b.clear();
            s.bounded_poll_batch_into(b, limit_position.unwrap_or(i64::MAX), fragment_limit);
            *spare = Some(batch.clone());
            Ok(PyBatch { batch })
        })
    }

    /// True when at least one image is connected.
    #[getter]
    fn is_connected(&self) -> bool {
        !self.shared.is_closed() && self.shared.images().iter().any(|i| !i.is_closed())
    }

    /// The current images.
    #[getter]
    fn images(&self) -> Vec<PyImage> {
        self.shared.images().into_iter().map(PyImage::new).collect()
    }

    /// Number of images.
    #[getter]
    fn image_count(&self) -> usize {
        self.shared.images().len()
    }

    /// Stream id.
    #[getter]
    fn stream_id(&self) -> i32 {
        self.stream_id
    }

    /// Channel URI.
    #[getter]
    fn channel(&self) -> String {
        self.channel.clone()
    }

    /// Registration id.
    #[getter]
    fn registration_id(&self) -> i64 {
        self.registration_id
    }

    /// The channel with the port its driver bound in place of an
    /// ``endpoint=host:0`` (Aeron's ``tryResolveChannelEndpointPort``): what
    /// a peer that must send here is told. The channel itself when its
    /// endpoint names a port; ``None`` while the port is not known.
    fn resolved_channel(&self) -> PyResult<Option<String>> {
        self.with_sub(|s| Ok(s.resolved_channel()))
    }

    /// The addresses (``host:port``) this subscription's UDP endpoint is
    /// bound to, from the driver's counters (Aeron's ``localSocketAddresses``).
    fn local_socket_addresses(&self) -> PyResult<Vec<String>> {
        self.with_sub(|s| Ok(s.local_socket_addresses()))
    }

    /// True once closed.
    #[getter]
    fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Closes the subscription (idempotent). It is closed even when Ctrl-C
    /// ends the wait for the driver's answer (KeyboardInterrupt).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let _g = self.in_use.enter("Subscription")?;
        // SAFETY: exclusive access under the guard.
        let s = unsafe { &mut *self.inner.get() };
        gil::released_or_raise(py, || s.close())
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        if slf.get().is_closed() {
            return Err(ClosedError::new_err("subscription is closed"));
        }
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "Subscription(channel={:?}, stream_id={}, images={})",
            self.channel,
            self.stream_id,
            self.shared.images().len()
        )
    }
}
