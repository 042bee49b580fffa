//! Python `enum.IntEnum`s made from Rust's constants, so each value is
//! written once (in `sulis-protocol`) and prints by name in Python.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Makes `IntEnum` `name` of `members` (name, value, doc) in module
/// `sulis._native`, adds it to `m` and returns it.
pub(crate) fn add_int_enum<'py>(
    m: &Bound<'py, PyModule>,
    name: &str,
    doc: &str,
    members: &[(&str, i64, &str)],
) -> PyResult<Bound<'py, PyAny>> {
    let py = m.py();
    let pairs = PyList::empty(py);
    for (member, value, _) in members {
        pairs.append((*member, *value))?;
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("module", "sulis._native")?;
    let class = py
        .import("enum")?
        .getattr("IntEnum")?
        .call((name, pairs), Some(&kwargs))?;
    class.setattr("__doc__", doc)?;
    for (member, _, member_doc) in members {
        class.getattr(*member)?.setattr("__doc__", *member_doc)?;
    }
    m.add(name, &class)?;
    Ok(class)
}
