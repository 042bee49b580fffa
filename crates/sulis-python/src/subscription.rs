//! `sulis.Subscription`: poll, controlled poll and batch poll over its
//! images (`image.rs`, `batch.rs`; whole messages through `assembler.rs`).

use crate::assembler::PyFragmentAssembler;
use crate::batch::PyBatch;
use crate::errors::{client_err, ClosedError, ConfigurationError};
use crate::gil;
use crate::guard::InUse;
use crate::image::{with_view, PyHeader, PyImage};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use std::cell::UnsafeCell;
use std::sync::Arc;
use sulis_client::{Batch, ControlledAction, Subscription, SubscriptionShared};

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

    /// Adds a destination to a multi-destination subscription
    /// (``aeron:udp?control-mode=manual``): ``aeron:udp?endpoint=HOST:PORT``
    /// (port 0: any free one, see ``local_socket_addresses``), a multicast
    /// group, or ``...|control=HOST:PORT`` for a dynamic MDC stream. A
    /// session's frames from any destination feed one image. Waits for the
    /// driver; returns the destination's id.
    fn add_destination(&self, py: Python<'_>, channel: &str) -> PyResult<i64> {
        self.with_sub(|s| {
            let s = &*s;
            gil::released(py, || s.add_destination(channel)).map_err(client_err)
        })
    }

    /// Removes the destination added with ``channel`` (its socket closes).
    fn remove_destination(&self, py: Python<'_>, channel: &str) -> PyResult<()> {
        self.with_sub(|s| {
            let s = &*s;
            gil::released(py, || s.remove_destination(channel)).map_err(client_err)
        })
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
