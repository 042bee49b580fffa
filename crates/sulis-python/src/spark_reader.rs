//! `sulis._native.SparkPartitionReader`: a planned range read as whole
//! messages (`sulis_spark::PartitionReader`: segment files or a replay, as
//! `readMode` says), each `next_batch` a `Batch` of messages for the Python
//! source to turn into Arrow columns. Converting only.

use crate::batch::PyBatch;
use crate::gil;
use crate::spark_range::{from_tuple, RangeTuple};
use pyo3::prelude::*;
use std::sync::Mutex;
use sulis_spark::partition_reader::PartitionReader;
use sulis_spark::range_replay::ReadFailure;
use sulis_spark::{ArchiveAddress, ReaderOptions};

/// A read failure as the package's exception (`sulis.spark.errors`).
fn failure(py: Python<'_>, f: ReadFailure) -> PyErr {
    let (class, text) = f.named();
    crate::spark_error::spark_error(py, class, text)
}

/// One range's reader (see the module doc).
#[pyclass(module = "sulis._native", name = "SparkPartitionReader", frozen)]
pub struct PySparkPartitionReader {
    reader: Mutex<Option<PartitionReader>>,
}

#[pymethods]
impl PySparkPartitionReader {
    /// Opens the read of `range` (RecordingRange's fields in order) from the
    /// archive `address` (driver_dir, control channel, control stream,
    /// response channel, response stream or None, message timeout in s).
    #[new]
    #[pyo3(signature = (address, replay_channel, replay_stream_id, fragment_limit, read_mode, archive_dir, range, archive_id))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        address: (Option<String>, String, i32, String, Option<i32>, f64),
        replay_channel: String,
        replay_stream_id: i32,
        fragment_limit: i64,
        read_mode: &str,
        archive_dir: Option<String>,
        range: RangeTuple,
        archive_id: Option<i64>,
    ) -> PyResult<Self> {
        let archive = ArchiveAddress {
            driver_dir: address.0,
            control_channel: address.1,
            control_stream_id: address.2,
            response_channel: address.3,
            response_stream_id: address.4,
            message_timeout_s: address.5,
        };
        let opts = ReaderOptions::for_reading(
            archive,
            (replay_channel, replay_stream_id),
            fragment_limit,
            read_mode,
            archive_dir,
        );
        let r = from_tuple(range);
        let reader = gil::released(py, || PartitionReader::open(&opts, r, archive_id));
        Ok(PySparkPartitionReader {
            reader: Mutex::new(Some(reader.map_err(|f| failure(py, f))?)),
        })
    }

    /// The next messages (a Batch: data, offsets, positions, session_ids,
    /// flags, reserved_values), None once the range is read; waits while a
    /// replay has nothing yet, the GIL released.
    fn next_batch(&self, py: Python<'_>) -> PyResult<Option<PyBatch>> {
        let got = gil::released(py, || {
            let mut guard = self.reader.lock().unwrap_or_else(|e| e.into_inner());
            match guard.as_mut() {
                Some(r) => r.next_batch(),
                None => Ok(None),
            }
        });
        got.map(|b| b.map(PyBatch::from_batch))
            .map_err(|f| failure(py, f))
    }

    /// Lines to log (info) since the last call.
    fn drain_log(&self) -> Vec<String> {
        let mut guard = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_mut().map(|r| r.drain_notes()).unwrap_or_default()
    }

    /// The directory the files are read from, None for a replay.
    #[getter]
    fn files_dir(&self) -> Option<String> {
        let guard = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .as_ref()
            .and_then(|r| r.files_dir().map(str::to_string))
    }

    /// Stops a replay still running.
    fn close(&self, py: Python<'_>) {
        gil::released(py, || {
            if let Some(r) = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take() {
                r.close();
            }
        })
    }
}
