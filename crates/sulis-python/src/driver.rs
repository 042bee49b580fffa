//! `sulis.MediaDriver`: an embedded media driver.

use crate::errors::{ActiveDriverError, ClosedError, ConfigurationError};
use crate::gil;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;
use sulis_driver::{DriverContext, DriverError, MediaDriver as NativeDriver};

fn build_context(
    dir: Option<String>,
    threading_mode: Option<String>,
    idle_strategy: Option<String>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<DriverContext> {
    let mut ctx = DriverContext::from_env().map_err(ConfigurationError::new_err)?;
    let mut set = |k: &str, v: &str| ctx.set(k, v).map_err(ConfigurationError::new_err);
    if let Some(d) = dir {
        set("dir", &d)?;
    }
    if let Some(t) = threading_mode {
        set("threading_mode", &t)?;
    }
    if let Some(i) = idle_strategy {
        set("idle_strategy", &i)?;
    }
    crate::options::apply_keywords(&mut ctx, options)?;
    ctx.conclude().map_err(ConfigurationError::new_err)?;
    Ok(ctx)
}

/// An embedded media driver: conductor, sender and receiver agents on Rust
/// threads in this process (no driver thread holds the GIL), or, with
/// `threading_mode="invoker"`, on no thread of their own: the embedding code
/// runs them by calling `do_work()`.
///
/// `MediaDriver(dir=None, threading_mode=None, idle_strategy=None, **options)`;
/// options are the driver options by name (see `sulis driver --print-config`).
#[pyclass(module = "sulis._native", name = "MediaDriver", subclass)]
pub struct PyMediaDriver {
    driver: Mutex<Option<NativeDriver>>,
    dir: String,
    config: Vec<(String, String, String, String, String)>,
}

#[pymethods]
impl PyMediaDriver {
    #[new]
    #[pyo3(signature = (dir=None, threading_mode=None, idle_strategy=None, **options))]
    fn new(
        py: Python<'_>,
        dir: Option<String>,
        threading_mode: Option<String>,
        idle_strategy: Option<String>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let ctx = build_context(dir, threading_mode, idle_strategy, options)?;
        let config = crate::options::rows(&ctx);
        let dir = ctx.dir.display().to_string();
        let driver = gil::released(py, move || NativeDriver::launch(ctx)).map_err(|e| match e {
            DriverError::ActiveDriver(m) => ActiveDriverError::new_err(m),
            DriverError::Config(m) => ConfigurationError::new_err(m),
            DriverError::Io(e) => PyOSError::new_err(e.to_string()),
        })?;
        Ok(PyMediaDriver {
            driver: Mutex::new(Some(driver)),
            dir,
            config,
        })
    }

    /// The driver directory.
    #[getter]
    fn dir(&self) -> String {
        self.dir.clone()
    }

    /// True until closed.
    #[getter]
    fn is_running(&self) -> bool {
        self.driver.lock().unwrap().is_some()
    }

    /// Effective settings: (name, value, source, env var, doc) for every option.
    fn config(&self) -> Vec<(String, String, String, String, String)> {
        self.config.clone()
    }

    /// Invoker mode (`threading_mode="invoker"`): runs one duty cycle of
    /// the conductor, sender and receiver on the calling thread, with the
    /// GIL released, and returns the work done (0 = idle). Clients of an
    /// invoker-mode driver need something calling this (a loop, an event
    /// loop's idle hook) while they wait for it. Raises ConfigurationError
    /// in the threaded modes; returns 0 once closed.
    fn do_work(&self, py: Python<'_>) -> PyResult<usize> {
        gil::released(py, || {
            let mut guard = self.driver.lock().unwrap();
            match guard.as_mut() {
                None => Ok(0),
                Some(d) if !d.is_invoker() => Err(()),
                Some(d) => Ok(d.do_work()),
            }
        })
        .map_err(|()| {
            ConfigurationError::new_err(
                "do_work() runs the agents only in threading_mode='invoker'; this driver has its own threads",
            )
        })
    }

    /// Stops the driver's agents (idempotent).
    fn close(&self, py: Python<'_>) {
        let d = self.driver.lock().unwrap().take();
        if let Some(mut d) = d {
            gil::released(py, move || d.close());
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        if !slf.borrow().is_running() {
            return Err(ClosedError::new_err("media driver is closed"));
        }
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "MediaDriver(dir={:?}, running={})",
            self.dir,
            self.is_running()
        )
    }
}

/// Effective default configuration (from the environment) without starting a driver.
#[pyfunction]
#[pyo3(signature = (dir=None, threading_mode=None, idle_strategy=None, **options))]
pub fn driver_config(
    dir: Option<String>,
    threading_mode: Option<String>,
    idle_strategy: Option<String>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<crate::options::OptionRow>> {
    let ctx = build_context(dir, threading_mode, idle_strategy, options)?;
    Ok(crate::options::rows(&ctx))
}

/// Describes a live driver owning `dir`, or None.
#[pyfunction]
#[pyo3(signature = (dir, timeout_ms=10_000))]
pub fn active_driver(dir: &str, timeout_ms: i64) -> Option<String> {
    sulis_driver::active_driver(std::path::Path::new(dir), timeout_ms)
}
