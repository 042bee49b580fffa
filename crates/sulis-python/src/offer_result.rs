//! `sulis.OfferResult`: the codes `offer`, `offer_batch` and `try_claim`
//! return instead of a position, as an `enum.IntEnum`, so they print by name
//! and still compare equal to the plain ints (`-1` .. `-5`, as Aeron's).
//! Positions stay plain ints; only a failed offer pays for a member look-up.
//!
//! Every result is true only if what was offered went: a member is false
//! (a negative int is true in Python, so `if pub.offer(m):` and
//! `while not pub.offer(m):` read the opposite of what happened), a position
//! is a positive int, and a publication's `offer_batch` answers a
//! `PublishedBatch`, a tuple true only once the whole batch went.

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
static BATCH_RESULT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static PUBLISHED_BATCH: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `sulis.OfferBatchResult`: what a cluster's `offer_batch` returns.
const BATCH_RESULT_CODE: &str = r#"
class OfferBatchResult(int):
    """How many messages of a batch went, in order from the first (an ``int``: ``sent += result``), and
    ``code``: ``None`` once every message went, otherwise the ``OfferResult`` of the message the call stopped
    at (message ``result`` of the batch; none after it was tried). BACK_PRESSURED and ADMIN_ACTION pass with
    another try (``code in OFFER_AGAIN``); NOT_CONNECTED (the client is gone), CLOSED and MAX_POSITION_EXCEEDED
    never do: skip that message and go on with the rest."""

    code = None

    def __repr__(self):
        return f"OfferBatchResult({int(self)}, code={self.code!r})"


class PublishedBatch(tuple):
    """What a publication's ``offer_batch`` returns: ``(published, position or code)``, how many messages went
    (in order from the first) and the stream's position after them, or the ``OfferResult`` of the message it
    stopped at. A tuple, so ``n, result = pub.offer_batch(...)`` unpacks it; true only if every message went
    (``if pub.offer_batch(batch):``), false if it stopped."""

    __slots__ = ()

    def __bool__(self):
        return self[1] > 0

    def __repr__(self):
        return f"PublishedBatch({self[0]}, {self[1]!r})"


def never_went(self):
    """False: nothing was appended (a code is not a position)."""
    return False
"#;

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
    let code = std::ffi::CString::new(BATCH_RESULT_CODE).expect("no NUL");
    // A module of its own: run in `sulis._native` (already in sys.modules
    // while it initialises), the code would rewrite that module's __file__.
    let module = PyModule::from_code(
        py,
        &code,
        c"sulis_offer_batch_result.py",
        c"sulis._offer_batch_result",
    )?;
    class.setattr("__bool__", module.getattr("never_went")?)?;
    let mut members = Vec::with_capacity(MEMBERS.len());
    for (name, _, doc) in MEMBERS {
        let member = class.getattr(name)?;
        member.setattr("__doc__", doc)?;
        m.add(name, &member)?;
        members.push(member.unbind());
    }
    m.add("OfferResult", &class)?;
    let _ = BY_CODE.set(py, members);
    let batch = module.getattr("OfferBatchResult")?;
    batch.setattr("__module__", "sulis._native")?;
    m.add("OfferBatchResult", &batch)?;
    let _ = BATCH_RESULT.set(py, batch.unbind());
    let published = module.getattr("PublishedBatch")?;
    published.setattr("__module__", "sulis._native")?;
    m.add("PublishedBatch", &published)?;
    let _ = PUBLISHED_BATCH.set(py, published.unbind());
    Ok(())
}

/// A `PublishedBatch`: `published` messages went; `value` is the position
/// after them, or the code of the one the call stopped at.
pub(crate) fn published_batch_to_py(
    py: Python<'_>,
    published: usize,
    value: i64,
) -> PyResult<Py<PyAny>> {
    let class = PUBLISHED_BATCH
        .get(py)
        .expect("registered with the module")
        .bind(py);
    Ok(class.call1(((published, to_py(py, value)?),))?.unbind())
}

/// An `OfferBatchResult`: `sent` messages went; `code` (Aeron's, negative)
/// of the one the call stopped at, if it stopped.
pub(crate) fn batch_to_py(py: Python<'_>, sent: usize, code: Option<i64>) -> PyResult<Py<PyAny>> {
    let class = BATCH_RESULT
        .get(py)
        .expect("registered with the module")
        .bind(py);
    let result = class.call1((sent,))?;
    if let Some(code) = code {
        result.setattr("code", to_py(py, code)?)?;
    }
    Ok(result.unbind())
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
