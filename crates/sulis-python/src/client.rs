//! `sulis.Client`: a connection to a media driver, and the image-callback dispatcher.

use crate::errors::ClosedError;
use crate::gil;
use crate::image::PyImage;
use crate::publication::{PyExclusivePublication, PyPublication};
use crate::subscription::PySubscription;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use sulis_client::{Client, ClientContext, ImageEvent, ImageEvents};

/// A subscription's image callbacks, shared so that the dispatcher can run
/// them without holding the lock of the table.
type Callbacks = Arc<(Option<Py<PyAny>>, Option<Py<PyAny>>)>;

struct Dispatch {
    /// Held while a subscription is added and its callbacks registered, and
    /// while the dispatcher looks up the callbacks of the events it took: no
    /// event can overtake its callbacks. Never held while a callback runs, so
    /// a callback may call the client (add a subscription, close it, ...).
    callbacks: Mutex<HashMap<i64, Callbacks>>,
    running: AtomicBool,
}

/// A connection to a media driver (in this or another process).
///
/// `Client(dir=None, driver_timeout=10.0, name=None)`: `dir` defaults to
/// `$SULIS_DIR` or `/dev/shm/sulis-$USER`. A `dir` that does not exist fails
/// at once (`DriverTimeoutError`, naming `sulis driver --dir`); one whose
/// `cnc.dat` is not there yet (a driver starting) is waited for up to
/// `driver_timeout` seconds. `name` (at most 100 bytes) is shown
/// in the label of the client's heartbeat counter (`sulis stat`:
/// `client-heartbeat: id=<id> name=<name>`). Image callbacks run on a dispatcher thread of the
/// client; keep-alive runs on a Rust thread that never needs the GIL, so a
/// slow callback never gets the client timed out.
#[pyclass(module = "sulis._native", name = "Client", frozen, subclass)]
pub struct PyClient {
    /// Locked only to take a reference or to take the client out (close),
    /// never while a call waits: a call that waits for the driver holds an
    /// `Arc` of its own and does not keep another thread (holding the GIL)
    /// from reaching the client.
    client: Mutex<Option<Arc<Client>>>,
    dispatch: Arc<Dispatch>,
    thread: Mutex<Option<JoinHandle<()>>>,
    dir: String,
}

impl PyClient {
    /// The client itself, to share (a cluster session runs on it).
    pub(crate) fn shared(&self) -> PyResult<Arc<Client>> {
        self.client
            .lock()
            .unwrap()
            .clone()
            .ok_or_else(|| ClosedError::new_err("client is closed"))
    }

    pub(crate) fn with_client<T>(&self, f: impl FnOnce(&Client) -> PyResult<T>) -> PyResult<T> {
        let client = self.client.lock().unwrap().clone();
        match client {
            Some(c) => f(&c),
            None => Err(ClosedError::new_err("client is closed")),
        }
    }
}

fn dispatch_loop(events: ImageEvents, dispatch: Arc<Dispatch>) {
    while dispatch.running.load(Ordering::Acquire) {
        let events = events.wait(Duration::from_millis(100));
        if events.is_empty() {
            continue;
        }
        // The callbacks of these events, looked up under the lock (which an
        // add_subscription in progress holds until its callbacks are in), then
        // run without it.
        let calls: Vec<(Callbacks, Arc<sulis_client::Image>, bool)> = {
            let callbacks = dispatch.callbacks.lock().unwrap();
            events
                .into_iter()
                .filter_map(|ev| {
                    let (sub_id, image, available) = match ev {
                        ImageEvent::Available {
                            subscription_id,
                            image,
                        } => (subscription_id, image, true),
                        ImageEvent::Unavailable {
                            subscription_id,
                            image,
                        } => (subscription_id, image, false),
                    };
                    callbacks
                        .get(&sub_id)
                        .map(|cbs| (cbs.clone(), image, available))
                })
                .collect()
        };
        if calls.is_empty() {
            continue;
        }
        Python::attach(|py| {
            for (callbacks, image, available) in calls {
                // A callback may have closed the client.
                if !dispatch.running.load(Ordering::Acquire) {
                    return;
                }
                let cb = if available {
                    &callbacks.0
                } else {
                    &callbacks.1
                };
                if let Some(cb) = cb {
                    match Py::new(py, PyImage::new(image)) {
                        Ok(img) => {
                            if let Err(e) = cb.call1(py, (img,)) {
                                e.write_unraisable(py, Some(cb.bind(py)));
                            }
                        }
                        Err(e) => e.write_unraisable(py, None),
                    }
                }
            }
        });
    }
}

#[pymethods]
impl PyClient {
    #[new]
    #[pyo3(signature = (dir=None, driver_timeout=10.0, name=None))]
    fn new(
        py: Python<'_>,
        dir: Option<String>,
        driver_timeout: f64,
        name: Option<String>,
    ) -> PyResult<Self> {
        // Written so that NaN is refused too.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        if !(driver_timeout > 0.0) {
            return Err(crate::errors::ConfigurationError::new_err(format!(
                "driver_timeout={driver_timeout}: must be a positive number of seconds"
            )));
        }
        let mut ctx = ClientContext::default();
        if let Some(d) = dir {
            ctx.dir = PathBuf::from(d);
        }
        ctx.driver_timeout = Duration::from_secs_f64(driver_timeout);
        ctx.name = name.unwrap_or_default();
        ctx.interrupt = Some(crate::errors::interrupt_check());
        let dir = ctx.dir.display().to_string();
        let client = gil::released_or_raise(py, move || Client::connect(ctx))?;
        let events = client.image_events();
        let client = Mutex::new(Some(Arc::new(client)));
        let dispatch = Arc::new(Dispatch {
            callbacks: Mutex::new(HashMap::new()),
            running: AtomicBool::new(true),
        });
        let d = dispatch.clone();
        let thread = std::thread::Builder::new()
            .name("sulis-callbacks".into())
            .spawn(move || dispatch_loop(events, d))
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
        Ok(PyClient {
            client,
            dispatch,
            thread: Mutex::new(Some(thread)),
            dir,
        })
    }

    /// The driver directory.
    #[getter]
    fn dir(&self) -> String {
        self.dir.clone()
    }

    /// This client's id (as the driver knows it).
    #[getter]
    fn client_id(&self) -> PyResult<i64> {
        self.with_client(|c| Ok(c.client_id()))
    }

    /// How many times this client fell more than the driver's broadcast
    /// buffer behind (lapped) and re-synchronised.
    #[getter]
    fn lapped_count(&self) -> PyResult<u64> {
        self.with_client(|c| Ok(c.lapped_count()))
    }

    /// True until closed.
    #[getter]
    fn is_closed(&self) -> bool {
        let client = self.client.lock().unwrap().clone();
        match client {
            Some(c) => c.check().is_err(),
            None => true,
        }
    }

    /// Adds a concurrent publication (thread-safe; shares the session of other
    /// concurrent publications of the same stream in this driver).
    fn add_publication(
        &self,
        py: Python<'_>,
        channel: &str,
        #[pyo3(from_py_with = crate::args::stream_id)] stream_id: i32,
    ) -> PyResult<PyPublication> {
        let publication = self.with_client(|c| {
            let ch = channel.to_string();
            gil::released_or_raise(py, || c.add_publication(&ch, stream_id))
        })?;
        Ok(PyPublication::new(publication))
    }

    /// Adds an exclusive (single-writer) publication with its own session.
    fn add_exclusive_publication(
        &self,
        py: Python<'_>,
        channel: &str,
        #[pyo3(from_py_with = crate::args::stream_id)] stream_id: i32,
    ) -> PyResult<PyExclusivePublication> {
        let publication = self.with_client(|c| {
            let ch = channel.to_string();
            gil::released_or_raise(py, || c.add_exclusive_publication(&ch, stream_id))
        })?;
        Ok(PyExclusivePublication::new(publication))
    }

    /// Adds a subscription; `on_available_image(image)` / `on_unavailable_image(image)`
    /// are called from the client's dispatcher thread as publishers come and go.
    #[pyo3(signature = (channel, stream_id, on_available_image=None, on_unavailable_image=None))]
    fn add_subscription(
        &self,
        py: Python<'_>,
        channel: &str,
        #[pyo3(from_py_with = crate::args::stream_id)] stream_id: i32,
        on_available_image: Option<Py<PyAny>>,
        on_unavailable_image: Option<Py<PyAny>>,
    ) -> PyResult<PySubscription> {
        let dispatch = self.dispatch.clone();
        let subscription = self.with_client(|c| {
            let ch = channel.to_string();
            gil::released_or_raise(py, || {
                let mut callbacks = dispatch.callbacks.lock().unwrap();
                let s = c.add_subscription(&ch, stream_id)?;
                callbacks.insert(
                    s.registration_id(),
                    Arc::new((on_available_image, on_unavailable_image)),
                );
                Ok::<_, sulis_client::ClientError>(s)
            })
        })?;
        Ok(PySubscription::new(subscription))
    }

    /// Closes the client: the driver releases everything it held (idempotent).
    /// Waits for a callback that is running, unless called from one.
    fn close(&self, py: Python<'_>) {
        self.dispatch.running.store(false, Ordering::Release);
        let thread = self.thread.lock().unwrap().take();
        let client = self.client.lock().unwrap().take();
        let dispatch = self.dispatch.clone();
        gil::released(py, move || {
            if let Some(t) = thread {
                // From a callback (the dispatcher thread itself) there is
                // nothing to wait for: the dispatcher stops when it returns.
                if t.thread().id() != std::thread::current().id() {
                    let _ = t.join();
                }
            }
            if let Some(c) = client {
                c.close();
            }
            dispatch.callbacks.lock().unwrap().clear();
        });
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        if slf.get().is_closed() {
            return Err(ClosedError::new_err("client is closed"));
        }
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!("Client(dir={:?}, closed={})", self.dir, self.is_closed())
    }
}

impl Drop for PyClient {
    fn drop(&mut self) {
        self.dispatch.running.store(false, Ordering::Release);
        // The dispatcher may be waiting for the GIL we hold: do not join it here;
        // it exits on its next wake-up. Closing the native client releases driver resources.
        let client = self.client.lock().ok().and_then(|mut g| g.take());
        if let Some(c) = client {
            c.close();
        }
    }
}
