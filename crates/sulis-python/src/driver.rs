//! `sulis.MediaDriver`: an embedded media driver.

use crate::errors::{ActiveDriverError, ClosedError, ConfigurationError};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;
use sulis_driver::{DriverContext, DriverError, MediaDriver as NativeDriver};

fn value_text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(b) = v.extract::<bool>() {
        return Ok(b.to_string());
    }
    if let Ok(f) = v.extract::<f64>() {
        // Floats are seconds (durations). A negative or non-finite one is
        // passed on as written, to be refused, not saturated to 0 ns.
        if !v.is_instance_of::<pyo3::types::PyInt>() && f.is_finite() && f >= 0.0 {
            return Ok(format!("{}ns", (f * 1e9).round() as u64));
        }
    }
    Ok(v.str()?.to_string())
}

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
    if let Some(opts) = options {
        for (k, v) in opts.iter() {
            let key: String = k.extract()?;
            let mut name = key.clone();
            // Durations may be given without the _ns suffix (seconds as float, or "5s").
            if sulis_driver::context::OPTIONS
                .iter()
                .all(|o| o.name != name.replace('-', "_"))
            {
                name = format!("{key}_ns");
            }
            set(&name, &value_text(&v)?).map_err(|_| {
                ConfigurationError::new_err(format!(
                    "{key}={}: {}",
                    value_text(&v).unwrap_or_default(),
                    ctx_err_text(&key, &v)
                ))
            })?;
        }
    }
    ctx.conclude().map_err(ConfigurationError::new_err)?;
    Ok(ctx)
}

fn ctx_err_text(key: &str, v: &Bound<'_, PyAny>) -> String {
    let text = value_text(v).unwrap_or_default();
    let known = |n: &str| {
        sulis_driver::context::OPTIONS
            .iter()
            .any(|o| o.name == n.replace('-', "_"))
    };
    // Resolve the name as build_context does: as given, else with the _ns suffix.
    let name = if known(key) {
        key.to_string()
    } else if known(&format!("{key}_ns")) {
        format!("{key}_ns")
    } else {
        return format!("unknown driver option '{key}'");
    };
    let mut c = DriverContext::default();
    match c.set(&name, &text) {
        Ok(()) => "invalid value".to_string(),
        // The caller already names the option as the user wrote it.
        Err(e) => e
            .strip_prefix(&format!("{name}={text}: "))
            .unwrap_or(&e)
            .to_string(),
    }
}

/// An embedded media driver: conductor (and later sender and receiver) agents
/// on Rust threads in this process. No driver thread holds the GIL.
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
        let config = ctx
            .describe()
            .into_iter()
            .map(|(o, v, s)| {
                (
                    o.name.to_string(),
                    v,
                    s.name().to_string(),
                    o.env.to_string(),
                    o.doc.to_string(),
                )
            })
            .collect();
        let dir = ctx.dir.display().to_string();
        let driver = py
            .detach(move || NativeDriver::launch(ctx))
            .map_err(|e| match e {
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

    /// Stops the driver's agents (idempotent).
    fn close(&self, py: Python<'_>) {
        let d = self.driver.lock().unwrap().take();
        if let Some(mut d) = d {
            py.detach(move || d.close());
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
) -> PyResult<Vec<(String, String, String, String, String)>> {
    let ctx = build_context(dir, threading_mode, idle_strategy, options)?;
    Ok(ctx
        .describe()
        .into_iter()
        .map(|(o, v, s)| {
            (
                o.name.to_string(),
                v,
                s.name().to_string(),
                o.env.to_string(),
                o.doc.to_string(),
            )
        })
        .collect())
}

/// Describes a live driver owning `dir`, or None.
#[pyfunction]
#[pyo3(signature = (dir, timeout_ms=10_000))]
pub fn active_driver(dir: &str, timeout_ms: i64) -> Option<String> {
    sulis_driver::active_driver(std::path::Path::new(dir), timeout_ms)
}
