//! The raw CPython entry that replaces PyO3's `offer` of both publication
//! classes (see [`RawOffer`]).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};
use pyo3::PyTypeInfo;

/// `offer` as a raw `METH_FASTCALL` method, installed over the one PyO3
/// generates (see [`install_raw_offer`]).
///
/// A loop of `pub.offer(b)` spends as much in the call as in the append: for
/// every call PyO3's method parses its arguments into an array of optional
/// slots, enters its trampoline (two thread-local accesses, the deferred
/// reference pool, a result copied through memory) and only then offers. The
/// raw entry takes `data` and an optional `reserved_value` (an int or None),
/// by position or keyword, straight to the append and returns the position
/// as an int (or the `OfferResult` member); anything else (a wrong count, an
/// unknown or repeated keyword, a `reserved_value` of another type or out of
/// range) is handed to the PyO3 method it replaced, so parsing and its
/// errors stay PyO3's.
pub(super) trait RawOffer: PyTypeInfo {
    /// Offers `data`: the position, a negative code, or the error `offer`
    /// raises.
    ///
    /// # Safety
    /// `slf` is a live instance of `Self`, and the GIL is held.
    unsafe fn offer_raw(
        py: Python<'_>,
        slf: *mut ffi::PyObject,
        data: &Bound<'_, PyAny>,
        reserved: Option<i64>,
    ) -> PyResult<i64>;
    /// The PyO3 method the raw entry replaced.
    fn pyo3_offer() -> &'static PyOnceLock<Py<PyAny>>;
}

/// The raw `offer` (a `PyCFunctionFastWithKeywords`).
///
/// # Safety
/// Called by CPython only, through the method descriptor made in
/// [`install_raw_offer`]: the GIL is held (the module is abi3, which
/// free-threaded builds cannot load), `slf` is an instance of `T` (the
/// descriptor checks it; neither class can be subclassed) and `args` holds
/// `nargs` positional values followed by one per name in `kwnames`.
unsafe extern "C" fn offer_fastcall<T: RawOffer>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: the GIL is held (see above). PyO3's own count of attached
    // calls stays at what the caller left: the success paths make only
    // borrowed references and `Bound`s, and errors are raised inside
    // `Python::attach` (a `Py` dropped without the count is deferred, not lost).
    let py = unsafe { Python::assume_attached() };
    let (data, reserved) = if nargs == 1 && kwnames.is_null() {
        (unsafe { *args }, None)
    } else {
        match unsafe { offer_args(py, args, nargs, kwnames) } {
            Some(a) => a,
            None => return unsafe { offer_fallback::<T>(slf, args, nargs, kwnames) },
        }
    };
    let data = unsafe { Borrowed::from_ptr(py, data) };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        T::offer_raw(py, slf, &data, reserved)
    }));
    match result {
        Ok(Ok(position)) if position >= 0 => unsafe { ffi::PyLong_FromLongLong(position) },
        Ok(Ok(code)) => match crate::offer_result::to_py(py, code) {
            Ok(member) => member.into_ptr(),
            Err(e) => raise(e),
        },
        Ok(Err(e)) => raise(e),
        Err(payload) => raise(panic_error(payload)),
    }
}

/// `data` and `reserved_value` of any other call than `offer(data)`, or None
/// for what the PyO3 method is left to parse (and refuse).
///
/// # Safety
/// As [`offer_fastcall`].
#[inline(never)]
unsafe fn offer_args(
    py: Python<'_>,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> Option<(*mut ffi::PyObject, Option<i64>)> {
    let nargs = nargs as usize;
    let nkw = if kwnames.is_null() {
        0
    } else {
        unsafe { ffi::PyTuple_Size(kwnames) as usize }
    };
    if nargs > 2 || nargs + nkw > 2 {
        return None;
    }
    let mut slots = [std::ptr::null_mut(); 2];
    for (i, slot) in slots.iter_mut().enumerate().take(nargs) {
        *slot = unsafe { *args.add(i) };
    }
    for i in 0..nkw {
        // Names are interned where the call is compiled, as `intern!`'s
        // are: another spelling of the same name just goes to PyO3.
        let name = unsafe { ffi::PyTuple_GetItem(kwnames, i as ffi::Py_ssize_t) };
        let slot = if name == pyo3::intern!(py, "data").as_ptr() {
            0
        } else if name == pyo3::intern!(py, "reserved_value").as_ptr() {
            1
        } else {
            return None;
        };
        if !slots[slot].is_null() {
            return None;
        }
        slots[slot] = unsafe { *args.add(nargs + i) };
    }
    let [data, reserved] = slots;
    if data.is_null() {
        return None;
    }
    if reserved.is_null() || reserved == unsafe { ffi::Py_None() } {
        return Some((data, None));
    }
    // Exactly int (not bool, not an `__index__` that could run twice).
    if unsafe { ffi::Py_TYPE(reserved) != std::ptr::addr_of_mut!(ffi::PyLong_Type) } {
        return None;
    }
    let value = unsafe { ffi::PyLong_AsLongLong(reserved) };
    if value == -1 && unsafe { !ffi::PyErr_Occurred().is_null() } {
        // Out of range: PyO3 raises its OverflowError.
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    Some((data, Some(value)))
}

/// Sets `e` as the current exception (inside `Python::attach`, so that the
/// references PyO3 drops meanwhile go at once) and returns NULL.
#[cold]
#[inline(never)]
fn raise(e: PyErr) -> *mut ffi::PyObject {
    Python::attach(|py| e.restore(py));
    std::ptr::null_mut()
}

#[cold]
fn panic_error(payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let message = match (
        payload.downcast_ref::<String>(),
        payload.downcast_ref::<&str>(),
    ) {
        (Some(s), _) => s.clone(),
        (None, Some(s)) => s.to_string(),
        (None, None) => "panic from Rust code".to_string(),
    };
    pyo3::panic::PanicException::new_err((message,))
}

/// Any call of `offer` but `offer(data)`: calls the PyO3 method with the same
/// arguments.
///
/// # Safety
/// As [`offer_fastcall`].
#[cold]
#[inline(never)]
unsafe fn offer_fallback<T: RawOffer>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let call = |py: Python<'_>| -> PyResult<*mut ffi::PyObject> {
        let nargs = nargs as usize;
        let nkw = if kwnames.is_null() {
            0
        } else {
            unsafe { ffi::PyTuple_Size(kwnames) as usize }
        };
        let values: &[*mut ffi::PyObject] = if nargs + nkw == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(args, nargs + nkw) }
        };
        let arg = |p: *mut ffi::PyObject| unsafe { Borrowed::from_ptr(py, p) };
        let mut positional = vec![arg(slf)];
        positional.extend(values[..nargs].iter().map(|p| arg(*p)));
        let positional = PyTuple::new(py, positional)?;
        let kwargs = PyDict::new(py);
        if nkw > 0 {
            let names = unsafe { Borrowed::from_ptr(py, kwnames) }.cast::<PyTuple>()?;
            for (name, value) in names.iter().zip(&values[nargs..]) {
                kwargs.set_item(name, arg(*value))?;
            }
        }
        let original = T::pyo3_offer()
            .get(py)
            .expect("set before the raw entry is installed");
        Ok(original
            .bind(py)
            .call(positional, Some(&kwargs))?
            .into_ptr())
    };
    Python::attach(|py| {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(py)));
        match result.unwrap_or_else(|payload| Err(panic_error(payload))) {
            Ok(value) => value,
            Err(e) => {
                e.restore(py);
                std::ptr::null_mut()
            }
        }
    })
}

/// Replaces PyO3's `offer` of `T` by [`offer_fastcall`], keeping the PyO3
/// method for the other call shapes. Its name, text signature and doc are
/// copied, so introspection sees the same method.
pub(super) fn install<T: RawOffer>(py: Python<'_>) -> PyResult<()> {
    if T::pyo3_offer().get(py).is_some() {
        return Ok(());
    }
    let ty = py.get_type::<T>();
    let original = ty.getattr("offer")?;
    let doc = format!(
        "offer{}\n--\n\n{}",
        original
            .getattr("__text_signature__")?
            .extract::<String>()?,
        original.getattr("__doc__")?.extract::<String>()?
    );
    // The definition must outlive the type: both are leaked, once per class.
    let def = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: c"offer".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: offer_fastcall::<T>,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: std::ffi::CString::new(doc)?.into_raw(),
    }));
    // SAFETY: `def` is valid for the life of the process; the type is ours.
    let descr =
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), def))? };
    let _ = T::pyo3_offer().set(py, original.unbind());
    ty.setattr("offer", descr)
}
