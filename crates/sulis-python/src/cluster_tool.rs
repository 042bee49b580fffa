//! What `sulis cluster-tool` reads and sets (Aeron's `ClusterTool`): a
//! member's recording log and recovery plan, read without changing the
//! file, and its control toggle in its driver's counters.

use crate::cluster::ClusterError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::Path;
use std::time::Duration;
use sulis_archive::client::{ArchiveClient, ArchiveClientContext};
use sulis_client::{Client, ClientContext};
use sulis_cluster::consensus_module::{purge_log, toggle, LogPurge};
use sulis_cluster::recording_log::RecordingLog;
use sulis_protocol::cluster::recording_log::Entry;
use sulis_protocol::counters::type_id;

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
    let set = sulis_cluster::consensus_module::invalidate_latest_snapshot(
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
    let outcome = crate::gil::released(py, || -> Result<LogPurge, String> {
        let log = RecordingLog::read(Path::new(cluster_dir))?;
        let client = Client::connect(ClientContext {
            dir: driver_dir.into(),
            driver_timeout: Duration::from_secs(10),
            name: "sulis-cluster-tool".into(),
            interrupt: None,
        })
        .map_err(|e| format!("media driver {driver_dir}: {e}"))?;
        let mut archive = ArchiveClient::connect(&client, ArchiveClientContext::default())
            .map_err(|e| format!("the archive on {driver_dir}: {e}"))?;
        let purged = purge_log(&mut archive, &log, service_count);
        archive.close();
        client.close();
        purged
    })
    .map_err(ClusterError::new_err)?;
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
    let cnc = crate::counters::open_cnc(dir)?;
    let reader = sulis_concurrent::counters::CountersReader::new(
        cnc.counters_metadata_buffer(),
        cnc.counters_values_buffer(),
    );
    let mut found = Vec::new();
    reader.for_each(|id, t, _key, _label| {
        if t == type_id::CLUSTER_CONTROL_TOGGLE {
            found.push(id);
        }
    });
    let id = match found.as_slice() {
        [id] => *id,
        [] => {
            return Err(ClusterError::new_err(format!(
                "no cluster member runs on the driver in {dir} (no control toggle counter)"
            )))
        }
        _ => {
            return Err(ClusterError::new_err(format!(
                "{} cluster members run on the driver in {dir}: which one is ambiguous",
                found.len()
            )))
        }
    };
    let counter = reader.counter_ref(id);
    let was = counter.get();
    if was != toggle::NEUTRAL {
        return Err(ClusterError::new_err(format!(
            "the control toggle is {was}, not NEUTRAL (1): the member is starting, or still acting on an earlier request"
        )));
    }
    counter.set_ordered(value);
    Ok(was)
}
