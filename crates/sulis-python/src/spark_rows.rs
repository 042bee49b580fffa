//! `sulis._native.SparkRowShape`: a read's rows (`sulis_spark::row_shape`)
//! as Arrow column buffers for the Python source, which wraps them with
//! `pyarrow.Array.from_buffers` without a copy. Converting only.

use crate::batch::{fill_view, release_view, PyBatch};
use crate::gil;
use crate::spark_error::{plan_error, spark_error};
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::c_int;
use sulis_spark::arrow_columns::ArrowColumns;
use sulis_spark::row_shape::ValueSchemaOptions;
use sulis_spark::{RangeIds, RowShape};

/// What a buffer holds: bytes, or int32s (a binary column's offsets, kept
/// as they were filled rather than copied into bytes).
enum Storage {
    Bytes(Vec<u8>),
    Ints(Vec<i32>),
}

/// Bytes Rust filled, read-only through the buffer protocol.
#[pyclass(module = "sulis._native", name = "ByteBuffer", frozen)]
pub struct PyByteBuffer {
    bytes: Storage,
}

impl PyByteBuffer {
    fn raw(&self) -> (*const u8, usize) {
        match &self.bytes {
            Storage::Bytes(v) => (v.as_ptr(), v.len()),
            Storage::Ints(v) => (v.as_ptr() as *const u8, std::mem::size_of_val(v.as_slice())),
        }
    }
}

#[pymethods]
impl PyByteBuffer {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let (ptr, len) = slf.get().raw();
        // SAFETY: the bytes never change and live as long as the object.
        unsafe { fill_view(slf.into_any(), view, flags, ptr, len, 1, c"B") }
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        unsafe { release_view(view) }
    }

    fn __len__(&self) -> usize {
        self.raw().1
    }
}

fn buffer(bytes: Vec<u8>) -> PyByteBuffer {
    PyByteBuffer {
        bytes: Storage::Bytes(bytes),
    }
}

/// One column: (validity or None, offsets or None, data, null count).
type ColumnBuffers = (
    Option<PyByteBuffer>,
    Option<PyByteBuffer>,
    PyByteBuffer,
    usize,
);

/// What a read's rows are.
#[pyclass(module = "sulis._native", name = "SparkRowShape", frozen)]
pub struct PySparkRowShape {
    shape: RowShape,
}

#[pymethods]
impl PySparkRowShape {
    /// `value_schema`: None or (schema, mode, corrupt column), as
    /// `spark_reader_options` gives it; `OptionError` naming a bad one.
    #[new]
    fn new(
        py: Python<'_>,
        value_schema: Option<(String, String, String)>,
        include_timestamp: bool,
        cluster: bool,
    ) -> PyResult<Self> {
        let v = value_schema.map(|(schema, mode, corrupt_column)| ValueSchemaOptions {
            schema,
            mode,
            corrupt_column,
        });
        let shape =
            RowShape::new(v.as_ref(), include_timestamp, cluster).map_err(|e| plan_error(py, e))?;
        Ok(PySparkRowShape { shape })
    }

    /// The columns as Spark DDL.
    fn ddl(&self) -> String {
        self.shape.ddl()
    }

    /// The columns: (name, Spark DDL type).
    fn columns(&self) -> Vec<(String, &'static str)> {
        self.shape
            .columns()
            .into_iter()
            .map(|(n, t)| (n, t.ddl()))
            .collect()
    }

    /// The rows among `batch`'s messages, read from a range of
    /// (recording_id, stream_id, session_id): (row count, one
    /// `(validity, offsets, data, null_count)` a column, in Arrow's layout);
    /// `RowError` naming a malformed payload (`valueSchema`'s FAILFAST).
    fn arrow(
        &self,
        py: Python<'_>,
        batch: &PyBatch,
        ids: (i64, i32, i32),
    ) -> PyResult<(usize, Vec<ColumnBuffers>)> {
        let ids = RangeIds {
            recording_id: ids.0,
            stream_id: ids.1,
            session_id: ids.2,
        };
        let types = self.shape.columns().into_iter().map(|(_, t)| t).collect();
        let got = gil::released(py, || {
            let mut out = ArrowColumns::new(types);
            self.shape
                .rows(&batch.batch, 0, &ids, |_, cells| {
                    out.push(cells);
                    true
                })
                .map(|_| out)
        });
        let out = got.map_err(|e| spark_error(py, "RowError", e.0))?;
        let columns = out
            .columns
            .into_iter()
            .map(|c| {
                let binary = !c.offsets.is_empty();
                let offsets = binary.then_some(PyByteBuffer {
                    bytes: Storage::Ints(c.offsets),
                });
                (
                    (c.null_count > 0).then(|| buffer(c.validity)),
                    offsets,
                    buffer(c.data),
                    c.null_count,
                )
            })
            .collect();
        Ok((out.len, columns))
    }
}
