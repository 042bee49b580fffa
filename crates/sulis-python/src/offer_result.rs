//! `sulis.OfferResult`: the codes `offer`, `offer_batch` and `try_claim`
//! return instead of a position, as an `enum.IntEnum`, so they print by name
//! and still compare equal to the plain ints (`-1` .. `-5`, as Aeron's).
//! Positions stay plain ints; only a failed offer pays for a member look-up.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
use sulis_client::offer_code;

/// Members by code, from `-1` (index 0) down to `-5`.
const MEMBERS: [(&str, i64, &str); 5] = [
    (
        "NOT_CONNECTED",
        offer_code::NOT_CONNECTED,
        "No subscriber is connected.",
    ),
    (
        "BACK_PRESSURED",
        offer_code::BACK_PRESSURED,
        "Connected, but the publication window is full: retry later.",
    ),
    (
        "ADMIN_ACTION",
        offer_code::ADMIN_ACTION,
        "A term rotation happened: retry at once.",
    ),
    ("CLOSED", offer_code::CLOSED, "The publication is closed."),
    (
        "MAX_POSITION_EXCEEDED",
        offer_code::MAX_POSITION_EXCEEDED,
        "The stream reached its maximum position: no more can be offered.",
    ),
];

static BY_CODE: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();

/// Creates the enum and adds it and its members to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let pairs = PyList::empty(py);
    for (name, code, _) in MEMBERS {
        pairs.append((name, code))?;
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("module", "sulis._native")?;
    let class = py
        .import("enum")?
        .getattr("IntEnum")?
        .call(("OfferResult", pairs), Some(&kwargs))?;
    class.setattr(
        "__doc__",
        "Why an offer or claim did not append: the negative codes returned in \
         place of a position. An IntEnum, so each equals its Aeron code.",
    )?;
    let mut members = Vec::with_capacity(MEMBERS.len());
    for (name, _, doc) in MEMBERS {
        let member = class.getattr(name)?;
        member.setattr("__doc__", doc)?;
        m.add(name, &member)?;
        members.push(member.unbind());
    }
    m.add("OfferResult", &class)?;
    let _ = BY_CODE.set(py, members);
    Ok(())
}

/// A position as an int, a code as its `OfferResult` member.
#[inline(always)]
pub(crate) fn to_py(py: Python<'_>, value: i64) -> PyResult<Py<PyAny>> {
    if value < 0 {
        let index = (-value - 1) as usize;
        if let Some(member) = BY_CODE.get(py).and_then(|m| m.get(index)) {
            return Ok(member.clone_ref(py));
        }
    }
    Ok(value.into_pyobject(py)?.into_any().unbind())
}
