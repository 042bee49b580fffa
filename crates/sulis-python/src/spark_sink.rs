//! `sulis._native.SparkSinkTask`: one task of the sink
//! (`sulis_spark::sink_publisher`, at least once, or exactly once with
//! `exactly_once_target` and the sink's journal: the JVM sink's rules
//! too), for `sulis/spark/sink.py`. Converting only; every call that waits
//! releases the GIL.

use crate::gil;
use crate::publication::offer_batch::{BufferBatch, ReservedValues};
use crate::spark_error::{plan_error, spark_error};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;
use sulis_spark::exactly_once_target::TaskIdentity;
use sulis_spark::sink_journal::SinkJournal;
use sulis_spark::sink_publisher::{SinkFailure, SinkPublisher};
use sulis_spark::{OptionMap, WriterOptions};

fn sink_error(py: Python<'_>, f: SinkFailure) -> PyErr {
    let (class, text) = f.named();
    spark_error(py, class, text)
}

fn writer_options(py: Python<'_>, options: Vec<(String, String)>) -> PyResult<WriterOptions> {
    WriterOptions::parse(&OptionMap::new(options)).map_err(|e| plan_error(py, e))
}

/// On the Spark driver, as an exactly-once streaming write starts: the
/// archive records the sink's journal.
#[pyfunction]
pub fn spark_sink_record_journal(py: Python<'_>, options: Vec<(String, String)>) -> PyResult<()> {
    let opts = writer_options(py, options)?;
    gil::released(py, || {
        SinkJournal::of(&opts).and_then(|j| j.ensure_recorded())
    })
    .map_err(|f| sink_error(py, f))
}

/// The journal's entries that may matter to micro-batch `batch` of
/// `query`, as this process reads them (for tests and tools): a dict each,
/// every field of `sulis_spark::journal_entry::JournalEntry`.
#[pyfunction]
pub fn spark_sink_journal_entries<'py>(
    py: Python<'py>,
    options: Vec<(String, String)>,
    query: String,
    batch: i64,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let opts = writer_options(py, options)?;
    let entries = gil::released(py, || {
        SinkJournal::of(&opts).and_then(|j| j.entries(&query, batch))
    })
    .map_err(|f| sink_error(py, f))?;
    entries
        .into_iter()
        .map(|e| {
            let d = PyDict::new(py);
            d.set_item("kind", e.kind.name())?;
            d.set_item("query", e.query)?;
            d.set_item("batch", e.batch)?;
            d.set_item("partition", e.partition)?;
            d.set_item("target", e.target)?;
            d.set_item("attempt", e.attempt)?;
            d.set_item("session", e.session)?;
            d.set_item("start", e.start)?;
            d.set_item("skip", e.skip)?;
            d.set_item("count", e.count)?;
            d.set_item("crc", e.crc)?;
            d.set_item("end", e.end)?;
            d.set_item("why", e.why)?;
            d.set_item("position", e.position)?;
            Ok(d)
        })
        .collect()
}

/// One sink task. Exactly once, it claims its targets, skips (checked)
/// what earlier attempts published, publishes the rest and tells the
/// journal; at least once, it publishes every row.
#[pyclass(name = "SparkSinkTask", module = "sulis._native", frozen)]
pub struct PySparkSinkTask {
    publisher: Mutex<SinkPublisher>,
}

impl PySparkSinkTask {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl Send + FnOnce(&mut SinkPublisher) -> Result<T, SinkFailure>,
    ) -> PyResult<T> {
        gil::released(py, || {
            f(&mut self.publisher.lock().unwrap_or_else(|e| e.into_inner()))
        })
        .map_err(|e| sink_error(py, e))
    }
}

#[pymethods]
impl PySparkSinkTask {
    /// Exactly once as task attempt `task_attempt_id` of `partition` in
    /// micro-batch `batch` of streaming query `query` (a fixed target, both
    /// `channel` and `streamId`, is claimed at once); at least once where
    /// `query` is None.
    #[new]
    #[pyo3(signature = (options, query=None, batch=0, partition=0, task_attempt_id=0))]
    fn new(
        py: Python<'_>,
        options: Vec<(String, String)>,
        query: Option<String>,
        batch: i64,
        partition: i64,
        task_attempt_id: i64,
    ) -> PyResult<Self> {
        let opts = writer_options(py, options)?;
        let task = query.map(|query| TaskIdentity {
            query,
            batch,
            partition,
            task_attempt_id,
        });
        let publisher =
            gil::released(py, || SinkPublisher::new(opts, task)).map_err(|f| sink_error(py, f))?;
        Ok(PySparkSinkTask {
            publisher: Mutex::new(publisher),
        })
    }

    /// Publishes `values` (a pyarrow binary or string array) on
    /// `channel`/`stream_id` in order, `reserved_values` (None, an int for
    /// all, or one int64 per value) their reserved values.
    #[pyo3(signature = (channel, stream_id, values, reserved_values=None))]
    fn write(
        &self,
        py: Python<'_>,
        channel: String,
        stream_id: i32,
        values: &Bound<'_, PyAny>,
        reserved_values: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let Some(batch) = BufferBatch::from_arrow(values)? else {
            return Err(PyTypeError::new_err(
                "SparkSinkTask.write takes a pyarrow binary or string array",
            ));
        };
        let reserved = ReservedValues::from_arg(reserved_values, batch.len())?;
        let messages: Vec<&[u8]> = batch.messages().iter().collect();
        let messages = &messages;
        let reserved = &reserved;
        self.with(py, move |p| {
            let id = p.target_of(&channel, stream_id)?;
            p.offer_all(id, messages, |i| reserved.get(i))
        })
    }

    /// After the last row: every target's rows recorded and the journal
    /// told. `(published, skipped)`.
    fn finish(&self, py: Python<'_>) -> PyResult<(i64, i64)> {
        self.with(py, |p| p.finish())
    }

    /// After an error (`why`): the journal told how the attempt ended,
    /// where it can be.
    fn fail(&self, py: Python<'_>, why: String) -> PyResult<()> {
        self.with(py, move |p| {
            p.fail(&why);
            Ok(())
        })
    }

    /// What to log since the last call.
    fn drain_notes(&self) -> Vec<String> {
        self.publisher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain_notes()
    }
}
