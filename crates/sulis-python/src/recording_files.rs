//! `sulis._native.RecordingFileReader`: a recording's fragments read
//! straight from its segment files, as `Batch`es laid out exactly as
//! `Subscription.poll_batch` lays out a replay's fragments. The Spark
//! source's `readMode=files` reads with it when the archive's directory is
//! on the executor's host: no archive request, no replay, no driver.
//!
//! ```python
//! r = sulis._native.RecordingFileReader(archive_dir, recording_id, start_position,
//!                                       term_length, segment_file_length, initial_term_id,
//!                                       position, limit)
//! while len(batch := r.read_batch(65536)):
//!     ...   # batch.data, batch.offsets, batch.positions, batch.flags, batch.reserved_values
//! ```

use crate::archive::ArchiveError;
use crate::batch::PyBatch;
use crate::errors::ConfigurationError;
use crate::gil;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::Mutex;
use sulis_archive::segment::{FragmentReader, Geometry};
use sulis_client::Batch;

/// Fragments of one recording from `position` up to `limit`, read from its
/// segment files with every frame header checked (a torn or corrupt frame
/// raises `ArchiveError` naming the file, offset and position).
#[pyclass(module = "sulis._native", name = "RecordingFileReader", frozen)]
pub struct PyRecordingFileReader {
    reader: Mutex<FragmentReader>,
    recording_id: i64,
}

#[pymethods]
impl PyRecordingFileReader {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        archive_dir: PathBuf,
        recording_id: i64,
        start_position: i64,
        term_length: i64,
        segment_file_length: i64,
        initial_term_id: i32,
        position: i64,
        limit: i64,
    ) -> PyResult<Self> {
        let g = Geometry {
            recording_id,
            start_position,
            term_length,
            segment_length: segment_file_length,
            initial_term_id,
        };
        if !g.is_valid() {
            return Err(ConfigurationError::new_err(format!(
                "recording {recording_id}: term length {term_length} and segment file length \
                 {segment_file_length} are not a valid geometry"
            )));
        }
        if position < start_position || position % 32 != 0 || limit < position {
            return Err(ConfigurationError::new_err(format!(
                "recording {recording_id}: cannot read from position {position} to {limit} \
                 (it starts at {start_position}; positions are multiples of 32)"
            )));
        }
        if !archive_dir.is_dir() {
            return Err(ConfigurationError::new_err(format!(
                "archive directory {} is not a directory on this host",
                archive_dir.display()
            )));
        }
        // Segments the archive moved to its object store are fetched by this process.
        let tier = sulis_archive::tier::Tier::reader_for(
            &archive_dir,
            &sulis_archive::tier::reader_cache_dir(&archive_dir),
            sulis_archive::tier::READER_CACHE_SIZE,
            sulis_archive::tier::READER_TIMEOUT,
        )
        .map_err(ConfigurationError::new_err)?;
        Ok(PyRecordingFileReader {
            reader: Mutex::new(
                FragmentReader::new(&archive_dir, g, position, limit).with_tier(tier),
            ),
            recording_id,
        })
    }

    /// Up to `fragment_limit` fragments as one Batch; an empty one at the limit.
    #[pyo3(signature = (fragment_limit=65536))]
    fn read_batch(&self, py: Python<'_>, fragment_limit: usize) -> PyResult<PyBatch> {
        if fragment_limit == 0 {
            return Err(ConfigurationError::new_err(
                "read_batch: fragment_limit must be positive",
            ));
        }
        let recording_id = self.recording_id;
        gil::released(py, || {
            let mut reader = self.reader.lock().unwrap();
            let mut batch = Batch::with_capacity(fragment_limit.min(4096), 64 * 1024);
            match reader.read_into(&mut batch, fragment_limit) {
                Ok(_) => Ok(batch),
                Err(e) => Err(format!("recording {recording_id}: {e}")),
            }
        })
        .map(PyBatch::from_batch)
        .map_err(|text| {
            let err = ArchiveError::new_err(text);
            Python::attach(|py| {
                let _ = err.value(py).setattr("code", -1);
            });
            err
        })
    }

    /// The position after the last fragment read.
    #[getter]
    fn position(&self) -> i64 {
        self.reader.lock().unwrap().position()
    }

    /// The position nothing is read past.
    #[getter]
    fn limit(&self) -> i64 {
        self.reader.lock().unwrap().limit()
    }

    /// The recording read.
    #[getter]
    fn recording_id(&self) -> i64 {
        self.recording_id
    }

    fn __repr__(&self) -> String {
        let r = self.reader.lock().unwrap();
        format!(
            "RecordingFileReader(recording_id={}, position={}, limit={})",
            self.recording_id,
            r.position(),
            r.limit()
        )
    }
}
