//! The Spark bindings' errors: the package's own exceptions
//! (`sulis.spark.errors`), raised by every `spark*` binding file. A file of
//! its own, so the bindings that raise them and `spark.rs`, which registers
//! those bindings, import it and not each other.

use pyo3::prelude::*;
use sulis_spark::range_planner::PlanError;

/// The package's exception `class` (`sulis.spark.errors`) saying `text`.
pub(crate) fn spark_error(py: Python<'_>, class: &str, text: String) -> PyErr {
    // A wait a signal ended: the handler's exception (KeyboardInterrupt, or
    // what a SIGTERM handler raised), not the wait's error.
    if let Some(e) = crate::errors::pending_signal_error() {
        return e;
    }
    match py
        .import("sulis.spark.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1((text,)))
    {
        Ok(err) => PyErr::from_value(err),
        Err(e) => e,
    }
}

/// A plan error as the package's exception.
pub(crate) fn plan_error(py: Python<'_>, e: PlanError) -> PyErr {
    let (class, text) = e.named();
    spark_error(py, class, text)
}
