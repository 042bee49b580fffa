//! What `sulis cluster-tool` reads and sets (Aeron's `ClusterTool`), as
//! Python values: a member's recording log and recovery plan, read without
//! changing the file, its mark files, and (the logic in
//! `sulis_cluster::module::tool`) its log purged, its control toggle set and its
//! members asked for.

use crate::cluster_error::ClusterError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::Path;
use std::time::Duration;
use sulis_cluster::module::recording_log::RecordingLog;
use sulis_cluster::module::tool;
use sulis_cluster::service::cluster_mark_file::MarkFileReader;
use sulis_protocol::cluster::recording_log::Entry;

fn entry_dict<'py>(py: Python<'py>, index: usize, e: &Entry) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("index", index)?;
    d.set_item("type", e.type_name())?;
    d.set_item("recording_id", e.recording_id)?;
    d.set_item("leadership_term_id", e.leadership_term_id)?;
    d.set_item("term_base_log_position", e.term_base_log_position)?;
    d.set_item("log_position", e.log_position)?;
    d.set_item("timestamp", e.timestamp)?;
    d.set_item("service_id", e.service_id)?;
    d.set_item("valid", e.is_valid)?;
    Ok(d)
}

/// The entries of `cluster_dir/recording.log`, in the order appended
/// (invalidated ones too), and the bytes of a torn last entry (left in
/// place: the file is not changed).
#[pyfunction]
pub fn read_recording_log<'py>(
    py: Python<'py>,
    cluster_dir: &str,
) -> PyResult<(Vec<Bound<'py, PyDict>>, usize)> {
    let log = RecordingLog::read(Path::new(cluster_dir)).map_err(ClusterError::new_err)?;
    let entries = log
        .entries()
        .enumerate()
        .map(|(i, e)| entry_dict(py, i, e))
        .collect::<PyResult<Vec<_>>>()?;
    Ok((entries, log.torn_tail_dropped()))
}

/// What a member on `cluster_dir` with `service_count` services starts
/// from: `snapshots` (the latest whole set, the consensus module's first;
/// empty without one) and `last_term` (the log's last term entry, or None).
#[pyfunction]
pub fn recovery_plan<'py>(
    py: Python<'py>,
    cluster_dir: &str,
    service_count: i32,
) -> PyResult<Bound<'py, PyDict>> {
    let log = RecordingLog::read(Path::new(cluster_dir)).map_err(ClusterError::new_err)?;
    let index_of = |target: &Entry| log.entries().position(|e| e == target).unwrap_or(0);
    let plan = PyDict::new(py);
    let snapshots = log
        .latest_snapshot(service_count)
        .unwrap_or_default()
        .into_iter()
        .map(|e| entry_dict(py, index_of(e), e))
        .collect::<PyResult<Vec<_>>>()?;
    plan.set_item("snapshots", snapshots)?;
    match log.last_term() {
        Some(t) => plan.set_item("last_term", entry_dict(py, index_of(t), t)?)?,
        None => plan.set_item("last_term", py.None())?,
    }
    Ok(plan)
}

/// Marks the latest snapshot set of the member on `cluster_dir` invalid
/// (refused while its module runs); returns the entries invalidated.
#[pyfunction]
pub fn invalidate_latest_snapshot<'py>(
    py: Python<'py>,
    cluster_dir: &str,
    service_count: i32,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let set = sulis_cluster::module::consensus_module::invalidate_latest_snapshot(
        Path::new(cluster_dir),
        service_count,
    )
    .map_err(ClusterError::new_err)?;
    set.iter()
        .map(|e| {
            let d = entry_dict(py, 0, e)?;
            d.del_item("index")?;
            Ok(d)
        })
        .collect()
}

/// Deletes the log segments wholly before the latest snapshot of the member
/// on `cluster_dir` through the archive of the driver in `driver_dir`:
/// {snapshot_position, start_position, segments_deleted}.
#[pyfunction]
pub fn purge_cluster_log<'py>(
    py: Python<'py>,
    cluster_dir: &str,
    driver_dir: &str,
    service_count: i32,
) -> PyResult<Bound<'py, PyDict>> {
    let interrupt = Some(crate::errors::interrupt_check());
    let outcome = crate::gil::released(py, || {
        tool::purge_member_log(Path::new(cluster_dir), driver_dir, service_count, interrupt)
    })
    .map_err(|e| {
        crate::errors::pending_signal_error().unwrap_or_else(|| ClusterError::new_err(e))
    })?;
    let d = PyDict::new(py);
    d.set_item("snapshot_position", outcome.snapshot_position)?;
    d.set_item("start_position", outcome.start_position)?;
    d.set_item("segments_deleted", outcome.segments_deleted)?;
    Ok(d)
}

/// Sets the control toggle of the cluster member on the driver in `dir`
/// to `value` if it is NEUTRAL (nothing asked); returns what it was. An
/// error names the driver without a member, or the request still pending.
#[pyfunction]
pub fn set_cluster_toggle(dir: &str, value: i64) -> PyResult<i64> {
    tool::set_toggle(dir, value).map_err(ClusterError::new_err)
}

fn mark_file_dict<'py>(py: Python<'py>, path: &Path) -> PyResult<Bound<'py, PyDict>> {
    use sulis_protocol::cluster::mark_file::{component_type, MARK_FILE_VERSION, VERSION_FAILED};
    let d = PyDict::new(py);
    d.set_item("file", path.display().to_string())?;
    let reader = match MarkFileReader::open(path) {
        Ok(r) => r,
        Err(why) => {
            d.set_item("unreadable", why)?;
            return Ok(d);
        }
    };
    let h = reader.header();
    let component = match h.component_type {
        component_type::CONSENSUS_MODULE => "consensus module".to_string(),
        component_type::CONTAINER => format!("service {}", h.service_id),
        component_type::BACKUP => "backup".to_string(),
        other => format!("component type {other}"),
    };
    d.set_item("component", component)?;
    d.set_item(
        "started",
        match h.version {
            0 => "starting",
            VERSION_FAILED => "failed",
            v if v == MARK_FILE_VERSION => "yes",
            _ => "unknown version",
        },
    )?;
    d.set_item("pid", h.pid)?;
    d.set_item("member_id", h.member_id)?;
    d.set_item("service_id", h.service_id)?;
    d.set_item("cluster_id", h.cluster_id)?;
    d.set_item("start_timestamp", h.start_timestamp)?;
    d.set_item("activity_timestamp", h.activity_timestamp)?;
    d.set_item("aeron_directory", h.aeron_directory)?;
    d.set_item("control_channel", h.control_channel)?;
    d.set_item("ingress_channel", h.ingress_channel)?;
    d.set_item("service_stream_id", h.service_stream_id)?;
    d.set_item("consensus_module_stream_id", h.consensus_module_stream_id)?;
    d.set_item("ingress_stream_id", h.ingress_stream_id)?;
    d.set_item("errors", reader.errors())?;
    Ok(d)
}

/// The mark files in `cluster_dir` (the consensus module's, then each
/// service's; Aeron's layout, so an Aeron member's directory reads too):
/// who wrote each, whether it started, and its error log.
#[pyfunction]
pub fn cluster_mark_files<'py>(
    py: Python<'py>,
    cluster_dir: &str,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    sulis_cluster::service::cluster_mark_file::mark_files(Path::new(cluster_dir))
        .iter()
        .map(|p| mark_file_dict(py, p))
        .collect()
}

/// Asks the consensus module whose mark file is in `cluster_dir` who the
/// members and the leader are (Aeron's ClusterMembersQuery, extended),
/// through the driver and control channel its mark file names.
#[pyfunction]
pub fn query_cluster_members<'py>(
    py: Python<'py>,
    cluster_dir: &str,
    timeout: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let interrupt = Some(crate::errors::interrupt_check());
    let answer = crate::gil::released(py, || {
        tool::query_members(
            cluster_dir,
            Duration::from_secs_f64(timeout.max(0.1)),
            interrupt,
        )
    })
    .map_err(|e| {
        crate::errors::pending_signal_error().unwrap_or_else(|| ClusterError::new_err(e))
    })?;
    let d = PyDict::new(py);
    d.set_item("current_time_ns", answer.current_time_ns)?;
    d.set_item("leader_member_id", answer.leader_member_id)?;
    d.set_item("member_id", answer.member_id)?;
    let members = answer
        .active_members
        .iter()
        .map(|m| {
            let e = PyDict::new(py);
            e.set_item("member_id", m.member_id)?;
            e.set_item("leadership_term_id", m.leadership_term_id)?;
            e.set_item("log_position", m.log_position)?;
            e.set_item("time_of_last_append_ns", m.time_of_last_append_ns)?;
            e.set_item(
                "endpoints",
                [
                    &m.ingress_endpoint,
                    &m.consensus_endpoint,
                    &m.log_endpoint,
                    &m.catchup_endpoint,
                    &m.archive_endpoint,
                ]
                .map(String::as_str)
                .join(","),
            )?;
            Ok(e)
        })
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("active_members", members)?;
    Ok(d)
}
