//! The Spark source's rules (`sulis_spark`) for `python/sulis/spark/`:
//! converting only. A plan error raises the package's own `OptionError`
//! or `DataLossError` (`sulis.spark.errors`).

use crate::spark_error::plan_error;
use crate::spark_range::{from_tuple, RangeTuple};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;
use sulis_spark::range_planner::{self, PositionSpec};
use sulis_spark::{
    ArchiveAddress, Finished, OptionMap, ReaderOptions, SourceOffset, WriterOptions,
};

/// The offset's JSON text (`sulis_spark::source_offset`).
#[pyfunction]
#[pyo3(
    signature = (positions, stopped=None, pieces=None, finished_below=0, finished_stopped_by=-1),
    text_signature = "(positions, stopped=None, pieces=None, finished_below=0, finished_stopped_by=-1)"
)]
fn spark_offset_json(
    positions: BTreeMap<i64, i64>,
    stopped: Option<BTreeMap<i64, i64>>,
    pieces: Option<i64>,
    finished_below: i64,
    finished_stopped_by: i64,
) -> String {
    SourceOffset {
        positions,
        stopped: stopped.unwrap_or_default(),
        pieces,
        finished: Finished {
            below: finished_below,
            stopped_by: finished_stopped_by,
        },
    }
    .to_json()
}

/// An offset's JSON text read: (positions, stopped, pieces, (below,
/// stopped_by)); `ValueError` naming what is wrong.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn spark_parse_offset(
    text: &str,
) -> PyResult<(
    BTreeMap<i64, i64>,
    BTreeMap<i64, i64>,
    Option<i64>,
    (i64, i64),
)> {
    let o = SourceOffset::from_json(text).map_err(PyValueError::new_err)?;
    Ok((
        o.positions,
        o.stopped,
        o.pieces,
        (o.finished.below, o.finished.stopped_by),
    ))
}

/// Where a replay of `(start, ...]` begins.
#[pyfunction]
fn spark_replay_from(start: i64, recording_start: i64, term_length: i32) -> i64 {
    range_planner::replay_from(start, recording_start, term_length)
}

/// A position spec as Python holds it: `"earliest"`, `"latest"` or a dict.
fn spec_object<'py>(py: Python<'py>, spec: &PositionSpec) -> PyResult<Bound<'py, PyAny>> {
    Ok(match spec {
        PositionSpec::Earliest => "earliest".into_pyobject(py)?.into_any(),
        PositionSpec::Latest => "latest".into_pyobject(py)?.into_any(),
        PositionSpec::ById(m) => m.into_pyobject(py)?.into_any(),
    })
}

fn address_dict<'py>(py: Python<'py>, a: &ArchiveAddress) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("driver_dir", &a.driver_dir)?;
    d.set_item("control_channel", &a.control_channel)?;
    d.set_item("control_stream_id", a.control_stream_id)?;
    d.set_item("response_channel", &a.response_channel)?;
    d.set_item("response_stream_id", a.response_stream_id)?;
    d.set_item("message_timeout", a.message_timeout_s)?;
    Ok(d)
}

/// A reader's options checked and parsed (`sulis_spark::reader_options`):
/// a dict of `ReaderOptions`' fields, `archive` a dict of
/// `ArchiveAddress`'s, `value_schema` None or (schema, mode, corrupt
/// column); `OptionError` naming the first bad option.
#[pyfunction]
fn spark_reader_options<'py>(
    py: Python<'py>,
    options: Vec<(String, String)>,
    streaming: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let o =
        ReaderOptions::parse(&OptionMap::new(options), streaming).map_err(|e| plan_error(py, e))?;
    let d = PyDict::new(py);
    d.set_item("archive", address_dict(py, &o.archive)?)?;
    d.set_item("channel", &o.channel)?;
    d.set_item("stream_id", o.stream_id)?;
    d.set_item("recording_ids", &o.recording_ids)?;
    d.set_item("starting", spec_object(py, &o.starting)?)?;
    d.set_item("ending", spec_object(py, &o.ending)?)?;
    d.set_item("min_partitions", o.min_partitions)?;
    d.set_item("fail_on_data_loss", o.fail_on_data_loss)?;
    d.set_item("replay_channel", &o.replay_channel)?;
    d.set_item("replay_stream_id", o.replay_stream_id)?;
    d.set_item("fragment_limit", o.fragment_limit)?;
    d.set_item("max_bytes_per_trigger", o.max_bytes_per_trigger)?;
    d.set_item("max_messages_per_trigger", o.max_messages_per_trigger)?;
    d.set_item("min_messages_per_trigger", o.min_messages_per_trigger)?;
    d.set_item("max_trigger_delay_s", o.max_trigger_delay_s)?;
    d.set_item(
        "value_schema",
        o.value_schema
            .as_ref()
            .map(|v| (v.schema.clone(), v.mode.clone(), v.corrupt_column.clone())),
    )?;
    d.set_item("read_mode", &o.read_mode)?;
    d.set_item("archive_dir", &o.archive_dir)?;
    d.set_item("include_timestamp", o.include_timestamp)?;
    d.set_item("low_latency", o.low_latency)?;
    d.set_item("cluster_dir", &o.cluster_dir)?;
    Ok(d)
}

/// A writer's options checked and parsed (`sulis_spark::writer_options`),
/// as a dict of `WriterOptions`' fields.
#[pyfunction]
fn spark_writer_options<'py>(
    py: Python<'py>,
    options: Vec<(String, String)>,
) -> PyResult<Bound<'py, PyDict>> {
    let o = WriterOptions::parse(&OptionMap::new(options)).map_err(|e| plan_error(py, e))?;
    let d = PyDict::new(py);
    d.set_item("archive", address_dict(py, &o.archive)?)?;
    d.set_item("channel", &o.channel)?;
    d.set_item("stream_id", o.stream_id)?;
    d.set_item("exactly_once", o.exactly_once)?;
    d.set_item("stamp_timestamp", o.stamp_timestamp)?;
    d.set_item("replay", (o.replay_channel.clone(), o.replay_stream_id))?;
    d.set_item("journal", (o.journal_channel.clone(), o.journal_stream_id))?;
    Ok(d)
}

/// The log recordings `cluster_dir/recording.log` names; `OptionError`
/// naming the directory.
#[pyfunction]
fn spark_log_recording_ids(py: Python<'_>, cluster_dir: &str) -> PyResult<Vec<i64>> {
    sulis_spark::archive_catalog::log_recording_ids(cluster_dir).map_err(|e| plan_error(py, e))
}

/// The directory archive `archive_id` announces in the counters of the
/// media driver at `driver_dir`, if readable here and its mark file names
/// that archive.
#[pyfunction]
#[pyo3(signature = (driver_dir, archive_id))]
fn spark_announced_archive_dir(
    py: Python<'_>,
    driver_dir: Option<String>,
    archive_id: i64,
) -> Option<String> {
    crate::gil::released(py, || {
        sulis_spark::archive_files::announced_archive_dir(driver_dir.as_deref(), archive_id)
    })
}

/// Whether `dir`'s catalog has the range's recording as the queried
/// archive does (stream, session, term length, initial term id).
#[pyfunction]
fn spark_holds_recording(py: Python<'_>, dir: String, range: RangeTuple) -> bool {
    let r = from_tuple(range);
    crate::gil::released(py, || sulis_spark::archive_files::holds_recording(&dir, &r))
}

/// The write's columns (name, Spark simple type) checked for the sink
/// (`sulis_spark::sink_columns`); `OptionError` naming what is wrong.
#[pyfunction]
fn spark_check_sink_columns(
    py: Python<'_>,
    columns: Vec<(String, String)>,
    channel_option: bool,
    stream_option: bool,
    stamp_timestamp: bool,
) -> PyResult<()> {
    sulis_spark::sink_columns::check_columns(
        &columns,
        channel_option,
        stream_option,
        stamp_timestamp,
    )
    .map_err(|e| plan_error(py, e))
}

/// The text of a row the sink cannot publish: `kind` "null_channel",
/// "null_stream", "bad_stream" (`value` the stream id) or "stamp" (`value`
/// the timestamp in microseconds).
#[pyfunction]
fn spark_sink_row_error(kind: &str, row: i64, value: i64) -> PyResult<String> {
    use sulis_spark::sink_columns as c;
    Ok(match kind {
        "null_channel" => c::null_channel(row),
        "null_stream" => c::null_stream(row),
        "bad_stream" => c::bad_stream(row, value),
        "stamp" => c::stamp_before_1970(row, value),
        other => return Err(PyValueError::new_err(format!("no row error {other:?}"))),
    })
}

/// Registers the functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(spark_offset_json, m)?)?;
    m.add_function(wrap_pyfunction!(spark_parse_offset, m)?)?;
    m.add_function(wrap_pyfunction!(spark_replay_from, m)?)?;
    m.add_function(wrap_pyfunction!(spark_reader_options, m)?)?;
    m.add_function(wrap_pyfunction!(spark_writer_options, m)?)?;
    m.add_class::<crate::spark_planner::PySparkPlanner>()?;
    m.add_function(wrap_pyfunction!(spark_log_recording_ids, m)?)?;
    m.add_class::<crate::spark_reader::PySparkPartitionReader>()?;
    m.add_class::<crate::spark_rows::PySparkRowShape>()?;
    m.add_class::<crate::spark_rows::PyByteBuffer>()?;
    m.add_function(wrap_pyfunction!(spark_announced_archive_dir, m)?)?;
    m.add_function(wrap_pyfunction!(spark_holds_recording, m)?)?;
    m.add_function(wrap_pyfunction!(spark_check_sink_columns, m)?)?;
    m.add_function(wrap_pyfunction!(spark_sink_row_error, m)?)?;
    m.add_class::<crate::spark_sink::PySparkSinkTask>()?;
    m.add_function(wrap_pyfunction!(
        crate::spark_sink::spark_sink_record_journal,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        crate::spark_sink::spark_sink_journal_entries,
        m
    )?)?;
    Ok(())
}
