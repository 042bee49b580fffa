//! Arguments converted with errors that name them: PyO3's own conversion of
//! `stream_id="10"` or `2**31` said only "'str' object cannot be
//! interpreted as an integer" or "out of range integral type conversion
//! attempted", naming neither the parameter nor what it takes.

use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

/// A 32-bit signed int argument called `name`.
fn i32_named(v: &Bound<'_, PyAny>, name: &str) -> PyResult<i32> {
    if !v.is_instance_of::<PyInt>() || v.is_instance_of::<PyBool>() {
        let type_name = v
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into());
        let shown = v.repr().map(|r| r.to_string()).unwrap_or_default();
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {type_name} ({shown})"
        )));
    }
    v.extract::<i32>().map_err(|_| {
        PyOverflowError::new_err(format!(
            "{name}={v}: out of range; a {} is a 32-bit signed int, -2147483648 to 2147483647",
            name.replace('_', " ")
        ))
    })
}

/// A `stream_id` argument.
pub(crate) fn stream_id(v: &Bound<'_, PyAny>) -> PyResult<i32> {
    i32_named(v, "stream_id")
}
