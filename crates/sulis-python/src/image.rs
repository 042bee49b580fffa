//! `sulis.Image` (one publisher's stream within a subscription) and
//! `sulis.Header`; `with_view` hands handlers a read-only memoryview straight
//! over the log (no copy), released when the handler returns, so a handler
//! that keeps it gets a clear error on use instead of reading bytes that were
//! overwritten.

use crate::errors::ConfigurationError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use std::sync::Arc;
use sulis_client::{Header, Image};

/// Calls `f(view)` with a read-only memoryview over `bytes`, released afterwards.
#[inline(always)]
pub(crate) fn with_view<'py, R>(
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
    pub(crate) h: Header,
    /// A reassembled message's header is its first fragment's; its position
    /// is the one after the last fragment (the first one's would be wrong).
    pub(crate) end_position: Option<i64>,
}

impl PyHeader {
    pub(crate) fn new(h: Header) -> Self {
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
