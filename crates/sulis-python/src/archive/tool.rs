//! The offline archive tool (`sulis archive-tool`): reading and mending an
//! archive directory with no archive running.

use crate::errors::ConfigurationError;
use crate::gil::{self, NativeError};
use pyo3::prelude::*;
use std::path::PathBuf;
use sulis_archive::checksum::Checksum;

use super::recording_descriptor::{descriptor, PyRecordingDescriptor};
/// Catalog entries as (state, descriptor), and the problems found reading it.
type CatalogListing = (Vec<(i32, PyRecordingDescriptor)>, Vec<String>);

/// The catalog of the archive in `dir`, read without an archive running:
/// (state, descriptor) per entry (state 0 invalid, 1 valid, 2 deleted), and
/// what could not be read.
#[pyfunction]
pub fn archive_describe(dir: PathBuf) -> PyResult<CatalogListing> {
    let (entries, problems) =
        sulis_archive::tool::describe(&dir).map_err(ConfigurationError::new_err)?;
    Ok((
        entries
            .into_iter()
            .map(|e| (e.state, descriptor(e.descriptor)))
            .collect(),
        problems,
    ))
}

fn parse_checksum(name: &str) -> PyResult<Checksum> {
    Checksum::parse(name).map_err(ConfigurationError::new_err)
}

/// Checks every valid recording's segment files frame by frame, and with
/// `checksum` ("crc32" / "crc32c") each frame's and catalog entry's checksum:
/// (recording id, ok, message) per recording (id -1: a catalog problem).
#[pyfunction]
#[pyo3(signature = (dir, checksum=None))]
pub fn archive_verify(
    py: Python<'_>,
    dir: PathBuf,
    checksum: Option<String>,
) -> PyResult<Vec<(i64, bool, String)>> {
    let checksum = checksum.as_deref().map(parse_checksum).transpose()?;
    let interrupt = crate::errors::interrupt_check();
    let verdicts = gil::released(py, || {
        sulis_archive::tool::verify(&dir, checksum, &|| (interrupt.0)())
    })
    .map_err(signal_or)?;
    Ok(verdicts
        .into_iter()
        .map(|v| (v.recording_id, v.ok, v.message))
        .collect())
}

/// Writes `checksum`'s checksum into the DATA frames of the last segment
/// file (every one with `all_files`) of recording `recording_id` or of every
/// valid recording, and into the catalog entries: (recording id, files,
/// frames) per recording.
#[pyfunction]
#[pyo3(signature = (dir, checksum, recording_id=None, all_files=false))]
pub fn archive_checksum(
    py: Python<'_>,
    dir: PathBuf,
    checksum: &str,
    recording_id: Option<i64>,
    all_files: bool,
) -> PyResult<Vec<(i64, usize, u64)>> {
    let c = parse_checksum(checksum)?;
    let interrupt = crate::errors::interrupt_check();
    let stamped = gil::released(py, || {
        sulis_archive::tool::checksum(&dir, c, recording_id, all_files, &|| (interrupt.0)())
    })
    .map_err(signal_or)?;
    Ok(stamped
        .into_iter()
        .map(|s| (s.recording_id, s.files, s.frames))
        .collect())
}

/// Marks a recording VALID or INVALID in a stopped archive's catalog.
#[pyfunction]
pub fn archive_mark(dir: PathBuf, recording_id: i64, valid: bool) -> PyResult<()> {
    sulis_archive::tool::mark(&dir, recording_id, valid).map_err(ConfigurationError::new_err)
}

/// Removes INVALID and DELETED entries and their segment files: (entries
/// removed, files deleted).
#[pyfunction]
pub fn archive_compact(py: Python<'_>, dir: PathBuf) -> PyResult<(usize, Vec<String>)> {
    let c = gil::released_or_raise(py, || sulis_archive::tool::compact(&dir))?;
    Ok((c.entries_removed, c.files_deleted))
}

/// Deletes segment files no recording owns; returns their paths.
#[pyfunction]
pub fn archive_delete_orphaned_segments(py: Python<'_>, dir: PathBuf) -> PyResult<Vec<String>> {
    gil::released_or_raise(py, || sulis_archive::tool::delete_orphaned_segments(&dir))
}

/// A dumped frame: (position, frame length, type, flags, session id, stream
/// id, reserved value, first payload bytes).
type FrameTuple = (i64, i32, u16, u8, i32, i32, i64, Vec<u8>);
/// A dumped catalog entry: (state, descriptor, frames, error or None).
type DumpedEntry = (i32, PyRecordingDescriptor, Vec<FrameTuple>, Option<String>);

/// Every catalog entry with up to `frames` of its first frames:
/// (state, descriptor, frames, error or None).
#[pyfunction]
pub fn archive_dump(py: Python<'_>, dir: PathBuf, frames: usize) -> PyResult<Vec<DumpedEntry>> {
    let dumped = gil::released_or_raise(py, || sulis_archive::tool::dump(&dir, frames))?;
    Ok(dumped
        .into_iter()
        .map(|(e, list, error)| {
            let frames = list
                .into_iter()
                .map(|f| {
                    (
                        f.position,
                        f.frame_length,
                        f.frame_type,
                        f.flags,
                        f.session_id,
                        f.stream_id,
                        f.reserved_value,
                        f.payload_head,
                    )
                })
                .collect();
            (e.state, descriptor(e.descriptor), frames, error)
        })
        .collect())
}

/// The mark file: (pid, activity timestamp ms, archive id, control channel,
/// local control channel, driver directory, errors as (count, first ms,
/// last ms, text)); None if the directory has none.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn archive_mark_file(
    dir: PathBuf,
) -> PyResult<
    Option<(
        i64,
        i64,
        i64,
        String,
        String,
        String,
        Vec<(i32, i64, i64, String)>,
    )>,
> {
    let Some(m) = sulis_archive::mark_file::MarkFileReader::open(&dir) else {
        return Ok(None);
    };
    let h = m.header().map_err(ConfigurationError::new_err)?;
    Ok(Some((
        m.pid(),
        m.activity_timestamp(),
        h.archive_id,
        h.control_channel,
        h.local_control_channel,
        h.aeron_directory,
        m.errors(),
    )))
}

/// A tool's error, or the exception a signal handler raised while it ran.
fn signal_or(e: String) -> PyErr {
    crate::errors::pending_signal_error().unwrap_or_else(|| e.into_py_err())
}

/// A retention report row: (recording id, stream id, channel, start, stop,
/// rule or None, held from or None, what goes next, segments in the object
/// store, their bytes).
type RetentionRowTuple = (
    i64,
    i32,
    String,
    i64,
    i64,
    Option<String>,
    Option<i64>,
    String,
    usize,
    u64,
);
/// (rules, holds, rows).
type RetentionTuple = (Vec<String>, Vec<String>, Vec<RetentionRowTuple>);

/// The retention policy's rules, the holds, and per valid recording what
/// the policy removes at the next check: (rules, holds, rows).
#[pyfunction]
#[pyo3(signature = (dir, policy_file=None, hold_timeout="7d"))]
pub fn archive_retention(
    py: Python<'_>,
    dir: PathBuf,
    policy_file: Option<PathBuf>,
    hold_timeout: &str,
) -> PyResult<RetentionTuple> {
    let timeout = sulis_protocol::options::parse_duration(hold_timeout)
        .map_err(|e| ConfigurationError::new_err(format!("hold_timeout: {e}")))?;
    let report = gil::released_or_raise(py, || {
        sulis_archive::tool::retention_report(&dir, policy_file.as_deref(), timeout)
    })?;
    let rows = report
        .rows
        .into_iter()
        .map(|r| {
            (
                r.recording_id,
                r.stream_id,
                r.channel,
                r.start_position,
                r.stop_position,
                r.rule,
                r.held_from,
                r.next,
                r.in_store,
                r.in_store_bytes,
            )
        })
        .collect();
    Ok((report.rules, report.holds, rows))
}

/// (recording id, base, location, length, key).
type SegmentRowTuple = (i64, i64, String, u64, String);

/// Where each segment file of the valid recordings (or of `recording_id`)
/// is: (recording id, base position, "disk" | "store" | "disk and store" |
/// "missing", length, object key or "").
#[pyfunction]
#[pyo3(signature = (dir, recording_id=None))]
pub fn archive_segments(
    py: Python<'_>,
    dir: PathBuf,
    recording_id: Option<i64>,
) -> PyResult<Vec<SegmentRowTuple>> {
    let rows = gil::released_or_raise(py, || sulis_archive::tool::segments(&dir, recording_id))?;
    Ok(rows
        .into_iter()
        .map(|r| (r.recording_id, r.base, r.location, r.length, r.key))
        .collect())
}

/// Writes (or replaces) the hold `name` in the archive directory `dir`:
/// each (recording id, position) is kept from retention from that
/// position's segment on, for `retention_hold_timeout` after the last write.
#[pyfunction]
pub fn archive_hold(
    py: Python<'_>,
    dir: PathBuf,
    name: String,
    held: Vec<(i64, i64)>,
) -> PyResult<String> {
    let path = gil::released_or_raise(py, || {
        sulis_archive::holds::write_hold(&dir, &name, &held, None)
    })?;
    Ok(path.display().to_string())
}

/// Removes the hold `name`; False when there was none.
#[pyfunction]
pub fn archive_release_hold(py: Python<'_>, dir: PathBuf, name: String) -> PyResult<bool> {
    gil::released_or_raise(py, || sulis_archive::holds::release_hold(&dir, &name))
}
