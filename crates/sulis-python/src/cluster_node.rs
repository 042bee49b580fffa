//! `sulis._native.ClusterNode` (a consensus module and a service container
//! whose service is a Python object, each on a thread of its own, through
//! `cluster_service.rs`'s adapter); its settings are `cluster_config.rs`'s. The client is
//! `cluster_client.rs`; the exceptions `cluster_error.rs`. `sulis.cluster`
//! gives them their final shape.

use crate::cluster_config::cluster_context;
use crate::cluster_error::ClusterError;
use crate::cluster_service::PyService;
use crate::gil;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use sulis_cluster::module::consensus_module::{toggle, ConsensusModule};
use sulis_cluster::module::consensus_module_agent::ModuleState;
use sulis_cluster::service::clustered_service_agent::{ClusteredServiceAgent, ServiceContext};

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
            egress_queue_len: ctx.egress_queue_len as usize,
            egress_stall_timeout: ctx.egress_stall_timeout,
            ..ServiceContext::default()
        };
        let batched = service.bind(py).hasattr("on_session_messages")?;
        let skip_errors = ctx.service_errors == "skip";
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
                        let skipped: Arc<Mutex<Vec<String>>> = Arc::default();
                        let adapter = PyService::new(
                            service,
                            batched,
                            failed.clone(),
                            skip_errors.then(|| skipped.clone()),
                            s.clone(),
                            idle,
                        );
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
                            for why in std::mem::take(&mut *skipped.lock().unwrap()) {
                                agent.record_error(&why);
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
        let interrupt = crate::errors::interrupt_check();
        // The service's own failure while the module starts (it replays the
        // log into the service, which may raise on an entry it raised on
        // before): said at once, not after the module's wait for the service
        // to join ran out with a hint about the service container's driver.
        let service_error = node.error.clone();
        let ready = gil::released(py, move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            loop {
                if let Some(why) = service_error.lock().unwrap().clone() {
                    return Some(Err(why));
                }
                match ready_rx.recv_timeout(Duration::from_millis(20)) {
                    Ok(r) => return Some(r),
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        return Some(Err(
                            "the consensus module thread ended before it started".to_string()
                        ))
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                }
                if (interrupt.0)() {
                    return None;
                }
                if std::time::Instant::now() > deadline {
                    return Some(Err(
                        "the consensus module did not start within 120 s".to_string()
                    ));
                }
            }
        });
        let failure = match ready {
            Some(Ok(())) => None,
            Some(Err(why)) => Some(why),
            None => {
                // A signal: the threads are told to stop and left to it (a join
                // could wait on an election as long as it takes).
                node.stop.store(true, Ordering::Release);
                return Err(interrupted_or("interrupted while the member started"));
            }
        };
        if let Some(why) = failure {
            if node.error.lock().unwrap().as_deref() == Some(why.as_str()) {
                // The service failed while the module started: the module may
                // still wait for it to join. It is told to stop and left to it
                // (joining would wait that wait out), as after a signal.
                node.stop.store(true, Ordering::Release);
                return Err(ClusterError::new_err(why));
            }
            node.shutdown(py)?;
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
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.shutdown(py)
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
        let interrupt = crate::errors::interrupt_check();
        let done = gil::released(py, move || {
            let deadline = std::time::Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
            while status.purges.load(Ordering::Acquire) == before {
                if std::time::Instant::now() > deadline {
                    return Some(false);
                }
                if (interrupt.0)() {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Some(true)
        })
        .ok_or_else(|| interrupted_or("interrupted while waiting for the log purge"))?;
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
        let interrupt = crate::errors::interrupt_check();
        let ended = gil::released(py, || loop {
            if threads.lock().unwrap().iter().all(|t| t.is_finished()) {
                return Some(true);
            }
            if std::time::Instant::now() > deadline {
                return Some(false);
            }
            if (interrupt.0)() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        })
        .ok_or_else(|| interrupted_or("interrupted while the member stopped"))?;
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
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
        if matches!(value, toggle::SNAPSHOT | toggle::SHUTDOWN) {
            // A snapshot the policy asked for is being taken: its outcome is
            // not this request's, so the counts are read once it is over.
            let status = self.status.clone();
            let interrupt = crate::errors::interrupt_check();
            let interrupted = gil::released(py, move || {
                while status.state.load(Ordering::Acquire) == ModuleState::Snapshot as i64
                    && std::time::Instant::now() < deadline
                {
                    if (interrupt.0)() {
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                false
            });
            if interrupted {
                return Err(interrupted_or("interrupted while a snapshot was taken"));
            }
        }
        let snapshots = s.snapshots.load(Ordering::Acquire);
        let failures = s.failed_snapshots.load(Ordering::Acquire);
        if self.requests.lock().unwrap().send(value).is_err() {
            return Err(ClusterError::new_err("the node is not running"));
        }
        let status = self.status.clone();
        let error = self.error.clone();
        let interrupt = crate::errors::interrupt_check();
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
            if (interrupt.0)() {
                return Err("interrupted while waiting for the module to act".to_string());
            }
            std::thread::sleep(Duration::from_millis(1));
        });
        outcome.map_err(|e| match crate::errors::pending_signal_error() {
            Some(signal) => signal,
            None => ClusterError::new_err(e),
        })
    }

    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        self.stop.store(true, Ordering::Release);
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *self.threads.lock().unwrap());
        let interrupt = crate::errors::interrupt_check();
        let interrupted = gil::released(py, move || {
            // Joined once finished; a signal meanwhile leaves them to stop on
            // their own (told to already) and is raised by the caller's next
            // bytecode, as Python raises it.
            while !threads.iter().all(|t| t.is_finished()) {
                if (interrupt.0)() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            for t in threads {
                let _ = t.join();
            }
            false
        });
        if interrupted {
            return Err(interrupted_or("interrupted while the member stopped"));
        }
        Ok(())
    }
}

/// What a signal handler raised during a wait of the node, else `KeyboardInterrupt`.
fn interrupted_or(what: &str) -> PyErr {
    crate::errors::pending_signal_error()
        .unwrap_or_else(|| pyo3::exceptions::PyKeyboardInterrupt::new_err(what.to_string()))
}

impl Drop for PyClusterNode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Registers the node's classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyClusterNode>()
}
