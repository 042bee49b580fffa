//! `sulis._native.Cluster` (what a service may do, valid during the callback
//! it is passed to), `SnapshotWriter`, and the adapter that runs a Python
//! object as the service container's `ClusteredService`: a log entry a
//! Python call, or back-to-back session messages in one
//! (`on_session_messages`, with `SessionMessages`). The node that runs it:
//! `cluster_node.rs`.

use crate::buffer::with_bytes;
use crate::cluster_error::{offer_code, ClusterError};
use crate::gil;
use crate::session_messages::PySessionMessages;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};
use sulis_cluster::client::session_messages::SessionMessages;
use sulis_cluster::service::clustered_service_agent::{
    each_session_message, Cluster, ClusteredService, ServiceOfferError, SnapshotWriter,
};
use sulis_concurrent::idle::{IdleStrategy, Idler};

/// What a service may do, valid during the callback it is passed to.
#[pyclass(name = "Cluster", frozen, module = "sulis._native")]
pub struct PyCluster {
    /// The container's handle while a callback runs; null otherwise.
    current: AtomicPtr<Cluster<'static>>,
    /// The service thread, the only one that may use it.
    owner: std::thread::ThreadId,
    /// The node is stopping (closed, or its module ended): a service that
    /// retries an offer is told so instead of retrying for ever.
    stop: Arc<AtomicBool>,
    /// `idle()`'s state (the service's idle strategy).
    idler: Mutex<Idler>,
}

impl PyCluster {
    fn with<T>(&self, f: impl FnOnce(&mut Cluster<'static>) -> T) -> PyResult<T> {
        let ptr = self.current.load(Ordering::Acquire);
        if ptr.is_null() || std::thread::current().id() != self.owner {
            return Err(ClusterError::new_err(
                "the Cluster object is valid only during the callback it was passed to",
            ));
        }
        // SAFETY: set by `PyService::call` on the service thread (checked
        // above) to a handle that lives for the whole callback, and cleared
        // before the callback's frame ends.
        Ok(f(unsafe { &mut *ptr }))
    }

    /// An error once the node stops: what a retry loop must not outlive.
    fn not_stopping(&self, what: &str) -> PyResult<()> {
        if self.stop.load(Ordering::Acquire) {
            return Err(ClusterError::new_err(format!(
                "{what}: the cluster node is stopping (closed, or its consensus module ended); the callback cannot go on"
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl PyCluster {
    /// The cluster time of the entry being handled (ms since the epoch).
    #[getter]
    fn time(&self) -> PyResult<i64> {
        self.with(|c| c.time())
    }

    /// The log position after the entry being handled.
    #[getter]
    fn log_position(&self) -> PyResult<i64> {
        self.with(|c| c.log_position())
    }

    /// This member's role: 0 follower, 1 candidate, 2 leader.
    #[getter]
    fn role(&self) -> PyResult<i32> {
        self.with(|c| c.role())
    }

    /// This member's id.
    #[getter]
    fn member_id(&self) -> PyResult<i32> {
        self.with(|c| c.member_id())
    }

    /// The open sessions' ids.
    fn session_ids(&self) -> PyResult<Vec<i64>> {
        self.with(|c| c.session_ids())
    }

    /// Sends `payload` to session `session_id`'s client, never waiting: the
    /// egress's new position, or 1 when it waits in the session's egress
    /// queue (sent in order as the egress takes it), or an `OfferResult`
    /// when it cannot go: NOT_CONNECTED (the client is gone, or its session
    /// is being closed because its egress fell too far behind), CLOSED,
    /// MAX_POSITION_EXCEEDED. On a follower nothing is sent and the offer
    /// succeeds (1, Aeron's MOCKED_OFFER).
    fn offer(&self, py: Python<'_>, session_id: i64, payload: &[u8]) -> PyResult<Py<PyAny>> {
        self.not_stopping("offer")?;
        let value = match self.with(|c| c.offer(session_id, payload))? {
            Ok(position) => position,
            Err(ServiceOfferError::Egress(e)) => offer_code(e)?,
            Err(ServiceOfferError::UnknownSession) => {
                return Err(ClusterError::new_err(format!(
                    "no open session {session_id}"
                )))
            }
        };
        crate::offer_result::to_py(py, value)
    }

    /// Sends message `i` (`data[offsets[i]:offsets[i + 1]]`) to session
    /// `session_ids[i]`'s client, in order, as `offer` each (columns as a
    /// batch's: int64 ids, int32 or int64 offsets one more, any bytes-like
    /// data; other items raise `TypeError`): an `OfferBatchResult`, how many
    /// went (an int) and `code`, None once all went, otherwise the
    /// `OfferResult` of the message it stopped at (none after it was tried):
    /// BACK_PRESSURED or ADMIN_ACTION (idle, offer the rest again), or
    /// NOT_CONNECTED, CLOSED, MAX_POSITION_EXCEEDED (that answer cannot go:
    /// skip it). A session not open raises `ClusterError` whose `sent` is how
    /// many went before it and `session_id` the one not open.
    fn offer_batch(
        &self,
        py: Python<'_>,
        session_ids: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        self.not_stopping("offer_batch")?;
        let ids = crate::buffer::int_column(session_ids, "offer_batch: session_ids", 8)?;
        let offs = crate::buffer::offsets_column(offsets, "offer_batch: offsets")?;
        let sent = with_bytes(data, |d| self.with(|c| c.offer_batch(&ids, d, &offs)))??;
        let stopped = |n: usize, err: PyErr| {
            let _ = err.value(py).setattr("sent", n);
            let _ = err.value(py).setattr("session_id", ids[n]);
            err
        };
        match sent {
            Ok((n, None)) => crate::offer_result::batch_to_py(py, n, None),
            Ok((n, Some(ServiceOfferError::Egress(e)))) => {
                let code = offer_code(e).map_err(|err| stopped(n, err))?;
                crate::offer_result::batch_to_py(py, n, Some(code))
            }
            Ok((n, Some(ServiceOfferError::UnknownSession))) => Err(stopped(
                n,
                ClusterError::new_err(format!(
                    "no open session {} (message {n} of the batch; the {n} before it went)",
                    ids[n]
                )),
            )),
            Err(e) => Err(ClusterError::new_err(format!("offer_batch: {e}"))),
        }
    }

    /// Schedules (or moves) timer `correlation_id` for cluster time `deadline`.
    fn schedule_timer(&self, correlation_id: i64, deadline: i64) -> PyResult<bool> {
        self.with(|c| c.schedule_timer(correlation_id, deadline))
    }

    /// Cancels timer `correlation_id`.
    fn cancel_timer(&self, correlation_id: i64) -> PyResult<bool> {
        self.with(|c| c.cancel_timer(correlation_id))
    }

    /// Closes session `session_id` (its client is told SERVICE_ACTION).
    fn close_session(&self, session_id: i64) -> PyResult<bool> {
        self.with(|c| c.close_session(session_id))
    }

    /// Puts `payload` into the log as this service's message.
    fn offer_to_cluster(&self, payload: &[u8]) -> PyResult<bool> {
        self.not_stopping("offer_to_cluster")?;
        self.with(|c| c.offer_to_cluster(payload))
    }

    /// Idles the service's thread once, by the node's idle strategy (call
    /// it between retries of an offer; `work_count` > 0 resets a back-off).
    /// Raises `ClusterError` once the node stops, so a retry loop ends.
    #[pyo3(signature = (work_count=0))]
    fn idle(&self, py: Python<'_>, work_count: usize) -> PyResult<()> {
        self.with(|_| ())?;
        self.not_stopping("idle")?;
        gil::released(py, || self.idler.lock().unwrap().idle(work_count));
        self.not_stopping("idle")
    }
}

/// Where `on_take_snapshot` writes the service's state, valid during that
/// call only.
#[pyclass(name = "SnapshotWriter", frozen, module = "sulis._native")]
pub struct PySnapshotWriter {
    current: AtomicPtr<SnapshotWriter<'static>>,
    owner: std::thread::ThreadId,
}

#[pymethods]
impl PySnapshotWriter {
    /// Appends one message of the service's state (any length: long ones
    /// come back whole); `on_start` gets them in this order.
    fn write(&self, data: &[u8]) -> PyResult<()> {
        let ptr = self.current.load(Ordering::Acquire);
        if ptr.is_null() || std::thread::current().id() != self.owner {
            return Err(ClusterError::new_err(
                "the snapshot writer is valid only during on_take_snapshot",
            ));
        }
        // SAFETY: set by `on_take_snapshot` on the service thread (checked
        // above) to a writer that outlives the call, cleared before it ends.
        unsafe { &mut *ptr }
            .write(data)
            .map_err(ClusterError::new_err)
    }

    /// Messages written so far.
    #[getter]
    fn written(&self) -> PyResult<usize> {
        let ptr = self.current.load(Ordering::Acquire);
        if ptr.is_null() || std::thread::current().id() != self.owner {
            return Err(ClusterError::new_err(
                "the snapshot writer is valid only during on_take_snapshot",
            ));
        }
        // SAFETY: as in `write`.
        Ok(unsafe { &*ptr }.written())
    }
}

/// A Python object as the service: each callback is one method call. The
/// first exception stops the service (its container ends with an error
/// naming the callback and the log position); later entries are not given
/// to it, so it never runs on past a failure. With `service_errors=skip`
/// an exception in a message or timer callback is handed to `skipped`
/// instead (the node records it) and the next entry comes.
pub(crate) struct PyService {
    obj: Py<PyAny>,
    /// The object has `on_session_messages`: it takes session messages in
    /// batches, one call each.
    batched: bool,
    handle: Option<Py<PyCluster>>,
    failed: Arc<Mutex<Option<String>>>,
    /// With `service_errors=skip`: where a message or timer callback's exception goes.
    skipped: Option<Arc<Mutex<Vec<String>>>>,
    /// The node's stop flag and idle strategy, for the `Cluster` handle.
    stop: Arc<AtomicBool>,
    idle: IdleStrategy,
}

/// A callback's arguments after the Cluster handle.
enum Arg<'a> {
    Int(i64),
    OptInt(Option<i64>),
    Bytes(&'a [u8]),
    /// A list of bytes, or None.
    Messages(Option<&'a [Vec<u8>]>),
    Object(Py<PyAny>),
    /// Session messages, handed over (their columns are views of them).
    Batch(std::cell::Cell<Option<SessionMessages>>),
}

impl PyService {
    /// The adapter for `obj` (batched if it has `on_session_messages`); its
    /// first failure goes to `failed`; `stop` and `idle` are the node's.
    pub(crate) fn new(
        obj: Py<PyAny>,
        batched: bool,
        failed: Arc<Mutex<Option<String>>>,
        skipped: Option<Arc<Mutex<Vec<String>>>>,
        stop: Arc<AtomicBool>,
        idle: IdleStrategy,
    ) -> PyService {
        PyService {
            obj,
            batched,
            handle: None,
            failed,
            skipped,
            stop,
            idle,
        }
    }

    fn call(&mut self, cluster: &mut Cluster<'_>, name: &str, args: &[Arg<'_>]) {
        if let Err(text) = self.call_checked(cluster, name, args) {
            // The entries of the log, not the service's life: those are
            // what service_errors=skip passes over.
            let skippable = matches!(
                name,
                "on_session_message" | "on_session_messages" | "on_timer_event"
            );
            if let Some(skipped) = self.skipped.as_ref().filter(|_| skippable) {
                if self.failed.lock().unwrap().is_none() {
                    skipped.lock().unwrap().push(format!(
                        "{text} (service_errors=skip: the entry counts as applied)"
                    ));
                    return;
                }
            }
            let mut failed = self.failed.lock().unwrap();
            if failed.is_none() {
                *failed = Some(text);
            }
        }
    }

    /// Calls `name`; an exception is printed and returned as text.
    fn call_checked(
        &mut self,
        cluster: &mut Cluster<'_>,
        name: &str,
        args: &[Arg<'_>],
    ) -> Result<(), String> {
        if self.failed.lock().unwrap().is_some() {
            return Err("the service stopped at an earlier error".into());
        }
        let position = cluster.log_position();
        Python::attach(|py| {
            let outcome = (|| -> PyResult<()> {
                if self.handle.is_none() {
                    let h = Py::new(
                        py,
                        PyCluster {
                            current: AtomicPtr::new(std::ptr::null_mut()),
                            owner: std::thread::current().id(),
                            stop: self.stop.clone(),
                            idler: Mutex::new(self.idle.idler()),
                        },
                    )?;
                    self.handle = Some(h);
                }
                let handle = self.handle.as_ref().expect("made above").clone_ref(py);
                let mut items: Vec<Py<PyAny>> = vec![handle.clone_ref(py).into_any()];
                for a in args {
                    items.push(match a {
                        Arg::Int(v) => v.into_pyobject(py)?.into_any().unbind(),
                        Arg::OptInt(Some(v)) => v.into_pyobject(py)?.into_any().unbind(),
                        Arg::OptInt(None) => py.None(),
                        Arg::Bytes(b) => PyBytes::new(py, b).into_any().unbind(),
                        Arg::Messages(None) => py.None(),
                        Arg::Messages(Some(m)) => {
                            pyo3::types::PyList::new(py, m.iter().map(|b| PyBytes::new(py, b)))?
                                .into_any()
                                .unbind()
                        }
                        Arg::Object(o) => o.clone_ref(py),
                        Arg::Batch(m) => {
                            let m = m.take().unwrap_or_default();
                            Py::new(py, PySessionMessages::new(m))?.into_any()
                        }
                    });
                }
                let tuple = PyTuple::new(py, items)?;
                let ptr: *mut Cluster<'static> = std::ptr::from_mut(cluster).cast();
                handle.get().current.store(ptr, Ordering::Release);
                let result = self.obj.call_method1(py, name, tuple);
                handle
                    .get()
                    .current
                    .store(std::ptr::null_mut(), Ordering::Release);
                result.map(|_| ())
            })();
            match outcome {
                Ok(()) => Ok(()),
                Err(e) => {
                    let text =
                        format!("the service's {name} raised at log position {position}: {e}");
                    e.print(py);
                    Err(text)
                }
            }
        })
    }
}

impl ClusteredService for PyService {
    fn on_start(&mut self, cluster: &mut Cluster<'_>, snapshot: Option<&[Vec<u8>]>) {
        self.call(cluster, "on_start", &[Arg::Messages(snapshot)]);
    }
    /// An exception fails this snapshot (printed, and the module keeps the
    /// previous one); the service goes on, as Aeron's does.
    fn on_take_snapshot(
        &mut self,
        cluster: &mut Cluster<'_>,
        snapshot: &mut SnapshotWriter<'_>,
    ) -> Result<(), String> {
        let writer = Python::attach(|py| {
            Py::new(
                py,
                PySnapshotWriter {
                    current: AtomicPtr::new(std::ptr::null_mut()),
                    owner: std::thread::current().id(),
                },
            )
        })
        .map_err(|e| e.to_string())?;
        let ptr: *mut SnapshotWriter<'static> = std::ptr::from_mut(snapshot).cast();
        writer.get().current.store(ptr, Ordering::Release);
        let object = Python::attach(|py| writer.clone_ref(py).into_any());
        let result = self.call_checked(cluster, "on_take_snapshot", &[Arg::Object(object)]);
        writer
            .get()
            .current
            .store(std::ptr::null_mut(), Ordering::Release);
        result
    }
    fn on_session_open(&mut self, cluster: &mut Cluster<'_>, session_id: i64, timestamp: i64) {
        self.call(
            cluster,
            "on_session_open",
            &[Arg::Int(session_id), Arg::Int(timestamp)],
        );
    }
    fn on_session_close(
        &mut self,
        cluster: &mut Cluster<'_>,
        session_id: i64,
        timestamp: i64,
        close_reason: i32,
    ) {
        self.call(
            cluster,
            "on_session_close",
            &[
                Arg::Int(session_id),
                Arg::Int(timestamp),
                Arg::Int(close_reason as i64),
            ],
        );
    }
    fn on_session_message(
        &mut self,
        cluster: &mut Cluster<'_>,
        session_id: Option<i64>,
        timestamp: i64,
        payload: &[u8],
    ) {
        self.call(
            cluster,
            "on_session_message",
            &[
                Arg::OptInt(session_id),
                Arg::Int(timestamp),
                Arg::Bytes(payload),
            ],
        );
    }
    fn on_session_messages(&mut self, cluster: &mut Cluster<'_>, messages: SessionMessages) {
        if self.batched {
            self.call(
                cluster,
                "on_session_messages",
                &[Arg::Batch(std::cell::Cell::new(Some(messages)))],
            );
        } else {
            each_session_message(self, cluster, &messages);
        }
    }
    fn on_timer_event(&mut self, cluster: &mut Cluster<'_>, correlation_id: i64, timestamp: i64) {
        self.call(
            cluster,
            "on_timer_event",
            &[Arg::Int(correlation_id), Arg::Int(timestamp)],
        );
    }
    fn on_role_change(&mut self, cluster: &mut Cluster<'_>, role: i32) {
        self.call(cluster, "on_role_change", &[Arg::Int(role as i64)]);
    }
}

/// Registers the service's classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCluster>()?;
    m.add_class::<PySnapshotWriter>()
}
