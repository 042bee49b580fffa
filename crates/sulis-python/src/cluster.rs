//! `sulis._native.ClusterNode` (a consensus module and a service container
//! whose service is a Python object, each on a thread of its own) and
//! `Cluster` (what a service may do, during a callback); the client is
//! `cluster_client.rs`. The log is read in Rust; a service takes a log
//! entry a Python call, or back-to-back session messages in one
//! (`on_session_messages`). `sulis.cluster` gives them their final shape.

use crate::buffer::with_bytes;
use crate::errors::{offer_err, ConfigurationError, SulisError};
use crate::gil;
use crate::session_messages::PySessionMessages;
use pyo3::create_exception;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use sulis_client::OfferError;
use sulis_cluster::clustered_service_agent::{
    each_session_message, Cluster, ClusteredService, ClusteredServiceAgent, ServiceContext,
    ServiceOfferError, SnapshotWriter,
};
use sulis_cluster::consensus_module::{toggle, ConsensusModule, ConsensusModuleContext};
use sulis_cluster::consensus_module_agent::ModuleState;
use sulis_cluster::session_messages::SessionMessages;
use sulis_concurrent::idle::{IdleStrategy, Idler};
use sulis_protocol::options::Configured;

create_exception!(
    sulis,
    ClusterError,
    SulisError,
    "The cluster refused, failed or ended something; the message says what and where."
);

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

    /// Sends `payload` to session `session_id`'s client: the egress's new
    /// position, or an `OfferResult` as `Publication.offer` gives:
    /// BACK_PRESSURED and ADMIN_ACTION (offer again), NOT_CONNECTED (the
    /// client is gone), CLOSED, MAX_POSITION_EXCEEDED. On a follower nothing
    /// is sent and the offer succeeds (1, Aeron's MOCKED_OFFER).
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
    /// batch's: int64 ids, int32 offsets one more, any bytes-like data):
    /// how many went. Fewer than all: the next was refused (back pressure,
    /// or a client gone; offer it alone to learn which) and none after it
    /// was tried. A session not open raises `ClusterError`.
    fn offer_batch(
        &self,
        session_ids: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        self.not_stopping("offer_batch")?;
        let ids = with_bytes(session_ids, |b| {
            b.chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect::<Vec<i64>>()
        })?;
        let offs = with_bytes(offsets, |b| {
            b.chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect::<Vec<i32>>()
        })?;
        let sent = with_bytes(data, |d| self.with(|c| c.offer_batch(&ids, d, &offs)))??;
        match sent {
            Ok((n, None)) => Ok(n),
            Ok((n, Some(ServiceOfferError::Egress(_)))) => Ok(n),
            Ok((n, Some(ServiceOfferError::UnknownSession))) => {
                Err(ClusterError::new_err(format!(
                    "no open session {} (message {n} of the batch; the {n} before it went)",
                    ids[n]
                )))
            }
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
/// to it, so it never runs on past a failure.
struct PyService {
    obj: Py<PyAny>,
    /// The object has `on_session_messages`: it takes session messages in
    /// batches, one call each.
    batched: bool,
    handle: Option<Py<PyCluster>>,
    failed: Arc<Mutex<Option<String>>>,
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
    fn call(&mut self, cluster: &mut Cluster<'_>, name: &str, args: &[Arg<'_>]) {
        if let Err(text) = self.call_checked(cluster, name, args) {
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

/// The cluster's settings: defaults, the `SULIS_CLUSTER_*` variables (and
/// `SULIS_DIR`), then `cluster_dir`, `driver_dir` and the keywords, through
/// the options table; checked together.
fn cluster_context(
    cluster_dir: Option<String>,
    driver_dir: Option<String>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<ConsensusModuleContext> {
    let mut ctx = ConsensusModuleContext::default();
    ctx.apply_env().map_err(ConfigurationError::new_err)?;
    for (name, value) in [("cluster_dir", cluster_dir), ("driver_dir", driver_dir)] {
        if let Some(v) = value {
            ctx.set_option(name, &v)
                .map_err(ConfigurationError::new_err)?;
        }
    }
    crate::options::apply_keywords(&mut ctx, options)?;
    ctx.conclude().map_err(ConfigurationError::new_err)?;
    Ok(ctx)
}

/// (name, value, source, environment variable, doc) per option.
type ConfigRows = Vec<(String, String, String, String, String)>;

/// The cluster's effective settings (defaults, `SULIS_CLUSTER_*`, then
/// keywords) as (name, value, source, environment variable, doc), without
/// starting a node.
#[pyfunction]
#[pyo3(signature = (cluster_dir=None, driver_dir=None, **options))]
pub fn cluster_config(
    cluster_dir: Option<String>,
    driver_dir: Option<String>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<ConfigRows> {
    Ok(crate::options::rows(&cluster_context(
        cluster_dir,
        driver_dir,
        options,
    )?))
}

/// A cluster node: its consensus module and its service container, each on
/// a thread of its own, on a running media driver and archive.
#[pyclass(name = "ClusterNode", module = "sulis._native")]
pub struct PyClusterNode {
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    error: Arc<Mutex<Option<String>>>,
    /// Control toggle requests to the module's thread.
    requests: Mutex<mpsc::Sender<i64>>,
    cluster_dir: String,
    driver_dir: String,
    service_count: i32,
    status: Arc<NodeStatus>,
}

/// What the module's thread reports of itself, every duty cycle: plain
/// stores, no lock (the error text is written only when a snapshot fails,
/// before the failure count that announces it).
#[derive(Default)]
struct NodeStatus {
    snapshots: AtomicI64,
    failed_snapshots: AtomicI64,
    failed_snapshots_error: Mutex<Option<String>>,
    state: AtomicI64,
    /// Cluster purges acted on, and the last one's outcome here:
    /// (snapshot position, start position, segments deleted) or why not.
    purges: AtomicI64,
    last_purge: Mutex<Option<PurgeOutcome>>,
}

/// A purge's outcome on this member: (snapshot position, start position,
/// segments deleted), or why not.
type PurgeOutcome = Result<(i64, i64, i64), String>;

fn set_first(error: &Mutex<Option<String>>, e: String) {
    let mut slot = error.lock().unwrap();
    if slot.is_none() {
        *slot = Some(e);
    }
}

#[pymethods]
impl PyClusterNode {
    /// Starts the node and returns once the module leads its term (the
    /// services have joined, and replayed the log it had). Its settings
    /// come from the cluster's options table: defaults, `SULIS_CLUSTER_*`,
    /// then `cluster_dir`, `driver_dir` and the keywords.
    #[new]
    #[pyo3(signature = (service, cluster_dir=None, driver_dir=None, **options))]
    fn new(
        py: Python<'_>,
        service: Py<PyAny>,
        cluster_dir: Option<String>,
        driver_dir: Option<String>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let ctx = cluster_context(cluster_dir, driver_dir, options)?;
        let driver_dir = ctx.driver_dir.clone();
        let dirs = (
            ctx.cluster_dir.display().to_string(),
            ctx.driver_dir.display().to_string(),
            ctx.service_count as i32,
        );
        let stop = Arc::new(AtomicBool::new(false));
        let error = Arc::new(Mutex::new(None));
        let service_ctx = ServiceContext {
            driver_dir,
            service_id: 0,
            control_channel: ctx.control_channel.clone(),
            consensus_module_stream_id: ctx.consensus_module_stream_id,
            service_stream_id: ctx.service_stream_id,
            message_timeout: ctx.message_timeout,
            replay_stream_id: ctx.replay_stream_id,
            cluster_dir: Some(ctx.cluster_dir.clone()),
            log_fragment_limit: ctx.service_log_fragment_limit,
            ..ServiceContext::default()
        };
        let batched = service.bind(py).hasattr("on_session_messages")?;
        let (s, e) = (stop.clone(), error.clone());
        let idle = ctx.idle_strategy;
        // The service starts once the module holds the cluster directory: a
        // node started on a directory in use stops before its service
        // writes anything there (its mark file).
        let (claimed_tx, claimed_rx) = mpsc::channel::<()>();
        let service_thread = std::thread::Builder::new()
            .name("sulis-cluster-service".into())
            .spawn(move || {
                if claimed_rx.recv().is_err() {
                    return; // the module did not start: it says why
                }
                // One Python thread state for the thread's life, the GIL released
                // between callbacks: each callback's attach then only takes the
                // GIL. Without it every callback made and destroyed a thread state
                // (its frame stack mapped and unmapped: two syscalls and a TLB
                // flush a message, most of a member's CPU in the benchmark).
                Python::attach(|py| {
                    py.detach(move || {
                        let failed = Arc::new(Mutex::new(None));
                        let adapter = PyService {
                            obj: service,
                            batched,
                            handle: None,
                            failed: failed.clone(),
                            stop: s.clone(),
                            idle,
                        };
                        let mut agent =
                            match ClusteredServiceAgent::launch(service_ctx, Box::new(adapter)) {
                                Ok(a) => a,
                                Err(why) => {
                                    return set_first(&e, format!("service container: {why}"))
                                }
                            };
                        let mut idler = idle.idler();
                        while !s.load(Ordering::Acquire) {
                            match agent.do_work() {
                                Ok(n) => idler.idle(n),
                                Err(why) => {
                                    set_first(&e, format!("service container: {why}"));
                                    break;
                                }
                            }
                            if let Some(why) = failed.lock().unwrap().take() {
                                agent.record_error(&why);
                                set_first(&e, why);
                                break;
                            }
                            if agent.is_terminated() {
                                break; // the member stopped (shutdown or abort)
                            }
                        }
                        agent.close();
                    })
                })
            })
            .map_err(|e| ClusterError::new_err(format!("starting the service thread: {e}")))?;
        let (s, e) = (stop.clone(), error.clone());
        let idle = ctx.idle_strategy;
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let (request_tx, request_rx) = mpsc::channel::<i64>();
        let status = Arc::new(NodeStatus::default());
        let st = status.clone();
        let module_thread = std::thread::Builder::new()
            .name("sulis-consensus-module".into())
            .spawn(move || {
                let claimed = move || {
                    let _ = claimed_tx.send(());
                };
                let mut module = match ConsensusModule::launch_with(ctx, claimed) {
                    Ok(m) => m,
                    Err(why) => {
                        let _ = ready_tx.send(Err(why));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                let mut idler = idle.idler();
                let mut queued: std::collections::VecDeque<i64> = Default::default();
                while !s.load(Ordering::Acquire) {
                    queued.extend(request_rx.try_iter());
                    if let Some(&value) = queued.front() {
                        if module.request(value) {
                            queued.pop_front();
                        }
                    }
                    match module.do_work() {
                        Ok(n) => idler.idle(n),
                        Err(why) => {
                            set_first(&e, format!("consensus module: {why}"));
                            // The service stops with it (a callback retrying an
                            // offer is told, rather than retrying for ever).
                            s.store(true, Ordering::Release);
                            break;
                        }
                    }
                    let failed = module.failed_snapshot_count();
                    if st.failed_snapshots.load(Ordering::Relaxed) != failed {
                        *st.failed_snapshots_error.lock().unwrap() =
                            module.last_snapshot_error().map(str::to_string);
                        st.failed_snapshots.store(failed, Ordering::Release);
                    }
                    if st.purges.load(Ordering::Relaxed) != module.purge_count() {
                        *st.last_purge.lock().unwrap() = module.last_purge().map(|p| {
                            p.as_ref()
                                .map(|p| {
                                    (p.snapshot_position, p.start_position, p.segments_deleted)
                                })
                                .map_err(Clone::clone)
                        });
                        st.purges.store(module.purge_count(), Ordering::Release);
                    }
                    st.snapshots
                        .store(module.snapshot_count(), Ordering::Release);
                    st.state.store(module.state() as i64, Ordering::Release);
                    if module.is_closed() {
                        break; // a shutdown or an abort
                    }
                }
                module.close();
            })
            .map_err(|e| {
                ClusterError::new_err(format!("starting the consensus module thread: {e}"))
            })?;
        let node = PyClusterNode {
            stop,
            threads: Mutex::new(vec![module_thread, service_thread]),
            error,
            requests: Mutex::new(request_tx),
            status,
            cluster_dir: dirs.0,
            driver_dir: dirs.1,
            service_count: dirs.2,
        };
        let ready = gil::released(py, move || ready_rx.recv_timeout(Duration::from_secs(120)));
        let failure = match ready {
            Ok(Ok(())) => None,
            Ok(Err(why)) => Some(why),
            Err(_) => Some("the consensus module did not start within 120 s".to_string()),
        };
        if let Some(why) = failure {
            node.shutdown(py);
            let service = node.error.lock().unwrap().take();
            let detail = match service {
                Some(s) => format!("{why} ({s})"),
                None => why,
            };
            return Err(ClusterError::new_err(detail));
        }
        Ok(node)
    }

    /// The first error that stopped the module or the service, if any.
    #[getter]
    fn error(&self) -> Option<String> {
        self.error.lock().unwrap().clone()
    }

    /// True while both threads run.
    #[getter]
    fn is_running(&self) -> bool {
        let threads = self.threads.lock().unwrap();
        !threads.is_empty() && threads.iter().all(|t| !t.is_finished())
    }

    /// Stops the module and the service (the log's recording is stopped).
    fn close(&self, py: Python<'_>) {
        self.shutdown(py);
    }

    /// Takes a snapshot (every service's state and the module's, at one log
    /// position, recorded by the archive and named in the recording log)
    /// and returns once it is taken; raises `ClusterError` naming why it
    /// failed or did not finish within `timeout` seconds.
    #[pyo3(signature = (timeout=30.0))]
    fn snapshot(&self, py: Python<'_>, timeout: f64) -> PyResult<i64> {
        self.act(py, toggle::SNAPSHOT, timeout)
    }

    /// Suspends the cluster: clients' messages wait (back-pressured, none
    /// dropped) and timers do not fire until `resume`.
    #[pyo3(signature = (timeout=30.0))]
    fn suspend(&self, py: Python<'_>, timeout: f64) -> PyResult<i64> {
        self.act(py, toggle::SUSPEND, timeout)
    }

    /// Resumes a suspended cluster.
    #[pyo3(signature = (timeout=30.0))]
    fn resume(&self, py: Python<'_>, timeout: f64) -> PyResult<i64> {
        self.act(py, toggle::RESUME, timeout)
    }

    /// Deletes the log's segment files wholly before the latest snapshot
    /// (a restart replays only from there): {snapshot_position,
    /// start_position, segments_deleted}. Raises `ClusterError` without a
    /// snapshot. With `cluster`, on the leader: a PURGE_LOG action in the
    /// log has every member purge its own, refused (naming the member) if a
    /// member has not reported a log past the leader's snapshot.
    #[pyo3(signature = (cluster=false, timeout=30.0))]
    fn purge_log<'py>(
        &self,
        py: Python<'py>,
        cluster: bool,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        if !cluster {
            return crate::cluster_tool::purge_cluster_log(
                py,
                &self.cluster_dir,
                &self.driver_dir,
                self.service_count,
            );
        }
        let before = self.status.purges.load(Ordering::Acquire);
        self.act(py, toggle::PURGE_LOG, timeout)?;
        let status = self.status.clone();
        let done = gil::released(py, move || {
            let deadline = std::time::Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
            while status.purges.load(Ordering::Acquire) == before {
                if std::time::Instant::now() > deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            true
        });
        let last = self.status.last_purge.lock().unwrap().clone();
        match (done, last) {
            (true, Some(Ok((snapshot_position, start_position, segments_deleted)))) => {
                let d = PyDict::new(py);
                d.set_item("snapshot_position", snapshot_position)?;
                d.set_item("start_position", start_position)?;
                d.set_item("segments_deleted", segments_deleted)?;
                Ok(d)
            }
            (true, Some(Err(why))) => Err(ClusterError::new_err(why)),
            _ => Err(ClusterError::new_err(format!(
                "the cluster log purge was not acted on within {timeout} s (is this member the leader, and active?)"
            ))),
        }
    }

    /// Stops the member after a snapshot (a restart loads it and replays
    /// nothing), as `sulis cluster-tool shutdown` does; returns once it
    /// stopped, raising `ClusterError` if the snapshot failed (the member
    /// then goes on) or it did not stop within `timeout` seconds.
    #[pyo3(name = "shutdown", signature = (timeout=60.0))]
    fn shutdown_with_snapshot(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        self.act(py, toggle::SHUTDOWN, timeout)?;
        self.await_threads_ended(py, timeout)
    }

    /// Stops the member without a snapshot (a restart replays its log from
    /// the last snapshot); returns once it stopped.
    #[pyo3(signature = (timeout=60.0))]
    fn abort(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        self.act(py, toggle::ABORT, timeout)?;
        self.await_threads_ended(py, timeout)
    }

    /// Snapshots taken since the node started.
    #[getter]
    fn snapshot_count(&self) -> i64 {
        self.status.snapshots.load(Ordering::Acquire)
    }

    /// The module's state (`ModuleState`: 1 active, 2 suspended, 3 snapshot, ...).
    #[getter]
    fn state(&self) -> i64 {
        self.status.state.load(Ordering::Acquire)
    }
}

impl PyClusterNode {
    /// Waits until the module's and the service's threads ended (the
    /// member stopped itself).
    fn await_threads_ended(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let threads = &self.threads;
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
        let ended = gil::released(py, || loop {
            if threads.lock().unwrap().iter().all(|t| t.is_finished()) {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        });
        if ended {
            Ok(())
        } else {
            Err(ClusterError::new_err(format!(
                "the member did not stop within {timeout} s"
            )))
        }
    }

    /// Asks the module through its control toggle and waits until it acted:
    /// a snapshot counted (or failed), the state suspended or active.
    fn act(&self, py: Python<'_>, value: i64, timeout: f64) -> PyResult<i64> {
        let s = &self.status;
        let (state, suspended) = (
            s.state.load(Ordering::Acquire),
            ModuleState::Suspended as i64,
        );
        if value == toggle::SNAPSHOT && state == suspended {
            return Err(ClusterError::new_err(
                "the cluster is suspended: resume it before a snapshot",
            ));
        }
        if value == toggle::RESUME && state != suspended {
            return Err(ClusterError::new_err("the cluster is not suspended"));
        }
        let snapshots = s.snapshots.load(Ordering::Acquire);
        let failures = s.failed_snapshots.load(Ordering::Acquire);
        if self.requests.lock().unwrap().send(value).is_err() {
            return Err(ClusterError::new_err("the node is not running"));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
        let status = self.status.clone();
        let error = self.error.clone();
        let outcome = gil::released(py, move || loop {
            let (count, state) = (
                status.snapshots.load(Ordering::Acquire),
                status.state.load(Ordering::Acquire),
            );
            let done = match value {
                toggle::SNAPSHOT | toggle::SHUTDOWN
                    if status.failed_snapshots.load(Ordering::Acquire) > failures =>
                {
                    let why = status.failed_snapshots_error.lock().unwrap().clone();
                    return Err(format!(
                        "the snapshot failed: {}",
                        why.as_deref().unwrap_or("unknown")
                    ));
                }
                toggle::SNAPSHOT => count > snapshots,
                toggle::SHUTDOWN | toggle::ABORT => state == ModuleState::Closed as i64,
                toggle::SUSPEND => state == ModuleState::Suspended as i64,
                _ => state == ModuleState::Active as i64,
            };
            if done {
                return Ok(count);
            }
            if let Some(why) = error.lock().unwrap().clone() {
                return Err(why);
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("not done within {timeout} s"));
            }
            std::thread::sleep(Duration::from_millis(1));
        });
        outcome.map_err(ClusterError::new_err)
    }

    fn shutdown(&self, py: Python<'_>) {
        self.stop.store(true, Ordering::Release);
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *self.threads.lock().unwrap());
        gil::released(py, move || {
            for t in threads {
                let _ = t.join();
            }
        });
    }
}

impl Drop for PyClusterNode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// An offer's error as Aeron's code (`OfferResult`); raised if it has none.
pub(crate) fn offer_code(e: OfferError) -> PyResult<i64> {
    Ok(match e {
        OfferError::NotConnected => -1,
        OfferError::BackPressured => -2,
        OfferError::AdminAction => -3,
        OfferError::Closed => -4,
        OfferError::MaxPositionExceeded => -5,
        other => return Err(offer_err(other)),
    })
}

/// Registers the cluster's classes and exceptions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cluster_config, m)?)?;
    m.add_class::<PyClusterNode>()?;
    m.add_class::<PyCluster>()?;
    m.add_class::<PySnapshotWriter>()?;
    m.add("ClusterError", m.py().get_type::<ClusterError>())?;
    crate::cluster_client::register(m)
}
