//! `sulis.MediaDriver`: an embedded media driver.

use crate::errors::{ActiveDriverError, ClosedError, ConfigurationError};
use crate::gil;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::types::PyInt;
use std::sync::Mutex;
use sulis_driver::context::{OptionSpec, OPTIONS};
use sulis_driver::{DriverContext, DriverError, MediaDriver as NativeDriver};

/// The text an option's Python value stands for. Floats are seconds for
/// durations; a bare int for a duration is refused (is `5` seconds or
/// nanoseconds?) unless it is 0; anything else is passed on as `str(v)`.
fn value_text(spec: Option<&OptionSpec>, v: &Bound<'_, PyAny>) -> Result<String, String> {
    if let Ok(b) = v.extract::<bool>() {
        return Ok(b.to_string());
    }
    let is_duration = spec.is_some_and(|o| o.unit == "duration");
    if is_duration && v.is_instance_of::<PyInt>() {
        return match v.extract::<i64>() {
            Ok(0) => Ok("0".into()),
            _ => Err(format!(
                "a bare number is ambiguous for a duration; give seconds as a float ({v}.0) \
                 or a string with a unit ('{v}s', '{v}ms', '{v}ns')"
            )),
        };
    }
    if is_duration {
        if let Ok(f) = v.extract::<f64>() {
            if !(f.is_finite() && f >= 0.0) {
                return Err(format!(
                    "{v} is not a duration: seconds must be finite and not negative"
                ));
            }
            if f * 1e9 >= u64::MAX as f64 {
                return Err(format!("{v} seconds is too long a duration"));
            }
            return Ok(format!("{}ns", (f * 1e9).round() as u64));
        }
    }
    v.str().map(|t| t.to_string()).map_err(|e| e.to_string())
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
            let spec = OPTIONS.iter().find(|o| o.name == key.replace('-', "_"));
            // Errors name the option and the value as the caller wrote them.
            let shown = v.str().map(|r| r.to_string()).unwrap_or_default();
            let text = value_text(spec, &v)
                .map_err(|e| ConfigurationError::new_err(format!("{key}={shown}: {e}")))?;
            set(&key, &text).map_err(|e| {
                let msg = e.to_string();
                let reason = msg
                    .strip_prefix(&format!("{key}={text}: "))
                    .unwrap_or(&msg)
                    .to_string();
                if spec.is_some() {
                    ConfigurationError::new_err(format!("{key}={shown}: {reason}"))
                } else {
                    ConfigurationError::new_err(reason)
                }
            })?;
        }
    }
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
