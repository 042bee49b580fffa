//! Where an archive's segment files are readable on this host
//! (`readMode=files`, or `auto`).
//!
//! The directory is `archiveDir` if given; else the one a sulis archive
//! announces in its media driver's counters (type `SULIS_ARCHIVE_DIRECTORY`,
//! label `... dir=PATH`), found through this host's driver and taken only
//! if its mark file names the queried archive's id and its catalog has the
//! range's recording as the queried archive does (archive ids are a
//! driver's client id by default, so archives on two hosts can share one).
//! An Aeron archive announces none: its ranges are replayed.

use crate::range_planner::RecordingRange;
use crate::{PlanError, ReaderOptions};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use sulis_concurrent::cnc::Cnc;
use sulis_concurrent::counters::CountersReader;
use sulis_protocol::cnc_descriptor::CNC_FILE;
use sulis_protocol::counters::type_id;

/// The catalog file every archive directory holds (Aeron's name).
pub const CATALOG_FILE: &str = "archive.catalog";
const DIR_MARKER: &str = " dir=";

type AnnouncedKey = (Option<String>, i64);
static ANNOUNCED: Mutex<Option<HashMap<AnnouncedKey, String>>> = Mutex::new(None);
type HeldKey = (String, i64);
/// Stream, session, term length and initial term id of a recording.
type Identity = (i32, i32, i32, i32);
static HELD: Mutex<Option<HashMap<HeldKey, Identity>>> = Mutex::new(None);

/// True when `dir` holds a readable archive catalog on this host.
pub fn files_readable(dir: Option<&str>) -> bool {
    dir.is_some_and(|d| std::fs::File::open(Path::new(d).join(CATALOG_FILE)).is_ok())
}

/// The archive id a directory's mark file names.
pub fn mark_file_archive_id(dir: &str) -> Option<i64> {
    let m = sulis_archive::mark_file::MarkFileReader::open(Path::new(dir))?;
    m.header().ok().map(|h| h.archive_id)
}

/// The directory archive `archive_id` announces in the counters of the
/// media driver at `driver_dir` (this host's), if readable here and its
/// mark file names that archive.
pub fn announced_archive_dir(driver_dir: Option<&str>, archive_id: i64) -> Option<String> {
    let key = (driver_dir.map(str::to_string), archive_id);
    {
        let cache = ANNOUNCED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = cache.as_ref().and_then(|c| c.get(&key)) {
            if files_readable(Some(known)) {
                return Some(known.clone());
            }
        }
    }
    let dir = driver_dir
        .map(PathBuf::from)
        .unwrap_or_else(sulis_protocol::driver_dir::default_dir);
    let cnc = Cnc::open(&dir.join(CNC_FILE)).ok()?; // no driver here: replay
    let reader = CountersReader::new(cnc.counters_metadata_buffer(), cnc.counters_values_buffer());
    let mut found = None;
    reader.for_each(|id, t, _, label| {
        if found.is_some()
            || t != type_id::SULIS_ARCHIVE_DIRECTORY
            || reader.counter_value(id) != archive_id
        {
            return;
        }
        if let Some((_, path)) = label.split_once(DIR_MARKER) {
            if files_readable(Some(path)) && mark_file_archive_id(path) == Some(archive_id) {
                found = Some(path.to_string());
            }
        }
    });
    if let Some(path) = &found {
        let mut cache = ANNOUNCED.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get_or_insert_with(HashMap::new)
            .insert(key, path.clone());
    }
    found
}

/// Whether `dir`'s catalog has the range's recording as the queried
/// archive does (stream, session, term length, initial term id).
pub fn holds_recording(dir: &str, r: &RecordingRange) -> bool {
    let want = (r.stream_id, r.session_id, r.term_length, r.initial_term_id);
    let key = (dir.to_string(), r.recording_id);
    {
        let cache = HELD.lock().unwrap_or_else(|e| e.into_inner());
        if cache.as_ref().and_then(|c| c.get(&key)) == Some(&want) {
            return true;
        }
    }
    let Ok((entries, _)) = sulis_archive::tool::describe(Path::new(dir)) else {
        return false;
    };
    let Some(d) = entries
        .iter()
        .map(|e| &e.descriptor)
        .find(|d| d.recording_id == r.recording_id)
    else {
        return false;
    };
    let got = (
        d.stream_id,
        d.session_id,
        d.term_buffer_length,
        d.initial_term_id,
    );
    let mut cache = HELD.lock().unwrap_or_else(|e| e.into_inner());
    cache.get_or_insert_with(HashMap::new).insert(key, got);
    got == want
}

/// On the Spark driver: `archiveDir`, where readable here, must be the
/// queried archive's directory (its mark file names the archive id), else
/// files would be read from another one.
pub fn check_archive_dir(archive_id: i64, opts: &ReaderOptions) -> Result<(), PlanError> {
    let Some(dir) = opts.archive_dir.as_deref() else {
        return Ok(());
    };
    if opts.read_mode == "replay" || !files_readable(Some(dir)) {
        return Ok(());
    }
    match mark_file_archive_id(dir) {
        Some(id) if id != archive_id => Err(PlanError::Option(format!(
            "option archiveDir: {} is the directory of archive id {id}, but {} is archive id {archive_id}",
            crate::option_values::repr(dir),
            opts.archive.describe()
        ))),
        _ => Ok(()),
    }
}

/// The directory a range is read from as files, or None to replay it
/// (`readMode` and where the files are); an option error where
/// `readMode=files` cannot be honoured here.
pub fn files_dir_for(
    opts: &ReaderOptions,
    r: &RecordingRange,
    archive_id: Option<i64>,
) -> Result<Option<String>, PlanError> {
    let mut dir = opts.archive_dir.clone();
    if dir.is_none() && opts.read_mode != "replay" {
        if let Some(id) = archive_id {
            dir = announced_archive_dir(opts.archive.driver_dir.as_deref(), id)
                .filter(|d| holds_recording(d, r)); // not one of the same id that is not the queried one
        }
    }
    let files = match opts.read_mode.as_str() {
        "auto" => files_readable(dir.as_deref()),
        "files" => true,
        _ => false,
    };
    if !files {
        return Ok(None);
    }
    let host = crate::archive_session::hostname();
    let Some(dir) = dir else {
        return Err(PlanError::Option(format!(
            "option readMode=files: no archiveDir given, and {} (archive id {}) announces no directory readable on host {host} through media driver {}",
            opts.archive.describe(),
            archive_id.map_or("None".into(), |i| i.to_string()),
            opts.archive.driver_dir.as_deref().unwrap_or("default")
        )));
    };
    if !files_readable(Some(&dir)) {
        return Err(PlanError::Option(format!(
            "option readMode=files: archiveDir {} holds no readable {CATALOG_FILE} on host {host}; readMode=auto replays from {} where the files are not local",
            crate::option_values::repr(&dir),
            opts.archive.describe()
        )));
    }
    Ok(Some(dir))
}
