//! `sulis._native.SparkPlanner`: the driver side of `format("sulis")`
//! (`sulis_spark::StreamPlanner` on the archive the options name), for the
//! Python source's readers. Converting only: offsets go in and out as their
//! JSON text, ranges as tuples in `RecordingRange`'s field order, and the
//! lines the planner wants logged as (level, text).

use crate::gil;
use crate::spark_range::{to_tuple, RangeTuple};
use pyo3::prelude::*;
use std::sync::Mutex;
use std::time::Instant;
use sulis_spark::archive_session::PLANNER_RESPONSE_STREAM_BASE;
use sulis_spark::{
    ArchiveCatalog, LogLine, OptionMap, PlanError, ReadLimit, ReaderOptions, SourceOffset,
    StreamPlanner,
};

struct Planner {
    planner: StreamPlanner<ArchiveCatalog>,
    epoch: Instant,
}

impl Planner {
    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }
}

/// The planner of one query (see the module doc).
#[pyclass(module = "sulis._native", name = "SparkPlanner", frozen)]
pub struct PySparkPlanner {
    inner: Mutex<Planner>,
}

fn offset(text: Option<&str>) -> PyResult<Option<SourceOffset>> {
    text.map(|t| SourceOffset::from_json(t).map_err(pyo3::exceptions::PyValueError::new_err))
        .transpose()
}

impl PySparkPlanner {
    /// Runs `f` on the planner with the GIL released; a plan error as the
    /// package's exception.
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl Send + FnOnce(&mut Planner) -> Result<T, PlanError>,
    ) -> PyResult<T> {
        let result = gil::released(py, || {
            let mut p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut p)
        });
        result.map_err(|e| crate::spark_error::plan_error(py, e))
    }
}

#[pymethods]
impl PySparkPlanner {
    /// A planner for a reader's options (as Spark passes them).
    #[new]
    fn new(py: Python<'_>, options: Vec<(String, String)>, streaming: bool) -> PyResult<Self> {
        let opts = ReaderOptions::parse(&OptionMap::new(options), streaming)
            .map_err(|e| crate::spark_error::plan_error(py, e))?;
        let catalog = ArchiveCatalog::new(opts.clone(), PLANNER_RESPONSE_STREAM_BASE);
        Ok(PySparkPlanner {
            inner: Mutex::new(Planner {
                planner: StreamPlanner::new(opts, catalog, 0.0),
                epoch: Instant::now(),
            }),
        })
    }

    /// A batch read's ranges.
    fn batch_ranges(&self, py: Python<'_>) -> PyResult<Vec<RangeTuple>> {
        self.call(py, |p| {
            Ok(p.planner
                .batch_ranges()?
                .into_iter()
                .map(to_tuple)
                .collect())
        })
    }

    /// Where a query with no checkpoint begins (offset text).
    fn initial_offset(&self, py: Python<'_>) -> PyResult<String> {
        self.call(py, |p| {
            let now = p.now();
            Ok(p.planner.initial_offset(now)?.to_json())
        })
    }

    /// The read limit the options set: (kind, n), kind one of "all",
    /// "max_bytes", "max_rows", "min_rows".
    fn default_read_limit(&self) -> (&'static str, i64) {
        let p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match p.planner.default_read_limit() {
            ReadLimit::AllAvailable => ("all", 0),
            ReadLimit::MaxBytes(n) => ("max_bytes", n),
            ReadLimit::MaxRows(n) => ("max_rows", n),
            ReadLimit::MinRows(n) => ("min_rows", n),
        }
    }

    /// `Trigger.AvailableNow`: nothing past what is recorded now.
    fn prepare_for_trigger_available_now(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, |p| {
            let now = p.now();
            p.planner.prepare_for_trigger_available_now(now)
        })
    }

    /// What is recorded, as last seen (offset text), None before anything was.
    fn report_latest_offset(&self) -> Option<String> {
        let p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        p.planner.report_latest_offset().map(|o| o.to_json())
    }

    /// Where the micro-batch after `start` ends within the limit (kind as
    /// `default_read_limit` says it); None: no batch yet.
    #[pyo3(signature = (start, kind, n))]
    fn latest_offset(
        &self,
        py: Python<'_>,
        start: Option<&str>,
        kind: &str,
        n: i64,
    ) -> PyResult<Option<String>> {
        let start = offset(start)?;
        let limit = match kind {
            "max_bytes" => ReadLimit::MaxBytes(n),
            "max_rows" => ReadLimit::MaxRows(n),
            "min_rows" => ReadLimit::MinRows(n),
            _ => ReadLimit::AllAvailable,
        };
        self.call(py, move |p| {
            let now = p.now();
            Ok(p.planner
                .latest_offset(start.as_ref(), limit, now)?
                .map(|o| o.to_json()))
        })
    }

    /// The ranges of the micro-batch `(start, end]`.
    #[pyo3(signature = (start, end))]
    fn ranges(&self, py: Python<'_>, start: Option<&str>, end: &str) -> PyResult<Vec<RangeTuple>> {
        let start = offset(start)?;
        let end = offset(Some(end))?.expect("given");
        self.call(py, move |p| {
            Ok(p.planner
                .ranges(start.as_ref(), &end)?
                .into_iter()
                .map(to_tuple)
                .collect())
        })
    }

    /// The archive's id.
    fn archive_id(&self, py: Python<'_>) -> PyResult<i64> {
        self.call(py, |p| {
            use sulis_spark::RecordingCatalog;
            p.planner.catalog().archive_id().map_err(|e| match e {
                PlanError::Archive(raw) => {
                    PlanError::Archive(format!("{}: {raw}", p.planner.opts.archive.describe()))
                }
                other => other,
            })
        })
    }

    /// On the Spark driver: `archiveDir`, where readable here, must be the
    /// directory of archive `archive_id`; `OptionError` if it is another's.
    fn check_archive_dir(&self, py: Python<'_>, archive_id: i64) -> PyResult<()> {
        self.call(py, move |p| {
            sulis_spark::archive_files::check_archive_dir(archive_id, &p.planner.opts)
        })
    }

    /// The lines to log since the last call: (level, text), level "info"
    /// or "warning".
    fn drain_log(&self) -> Vec<(&'static str, String)> {
        let mut p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<(&'static str, String)> = p
            .planner
            .catalog()
            .drain_warnings()
            .into_iter()
            .map(|t| ("warning", t))
            .collect();
        out.extend(p.planner.drain_log().into_iter().map(|l| match l {
            LogLine::Info(t) => ("info", t),
            LogLine::Warning(t) => ("warning", t),
        }));
        out
    }

    /// Spark committed the micro-batch ending at `end` (offset text): the
    /// query's retention hold moves there.
    fn commit(&self, py: Python<'_>, end: &str) -> PyResult<()> {
        let end = offset(Some(end))?.expect("given");
        self.call(py, move |p| {
            p.planner.commit(&end);
            Ok(())
        })
    }

    /// The query stops: its own retention hold goes (a named one stays).
    fn stop(&self, py: Python<'_>) {
        gil::released(py, || {
            let mut p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            p.planner.stop();
        })
    }

    /// Closes the archive session (the next call opens one again).
    fn close(&self, py: Python<'_>) {
        gil::released(py, || {
            use sulis_spark::RecordingCatalog;
            let mut p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            p.planner.catalog().reset();
        })
    }
}
