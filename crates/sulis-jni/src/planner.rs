//! `io.sulis.spark.Native.planner*`: the driver side (`StreamPlanner` on
//! the archive the options name).

use crate::{long_array, reader_options, string, throw, throw_plan};
use jni::objects::{JClass, JObjectArray, JString};
use jni::sys::{jboolean, jint, jlong, jlongArray, jobjectArray, jstring, JNI_TRUE};
use jni::JNIEnv;
use std::sync::Mutex;
use std::time::Instant;
use sulis_spark::archive_session::PLANNER_RESPONSE_STREAM_BASE;
use sulis_spark::{
    ArchiveCatalog, LogLine, PlanError, ReadLimit, RecordingCatalog, RecordingRange, SourceOffset,
    StreamPlanner,
};

pub(crate) struct Planner {
    planner: StreamPlanner<ArchiveCatalog>,
    epoch: Instant,
}

fn planner<'a>(handle: jlong) -> &'a Mutex<Planner> {
    // SAFETY: a handle is a Box<Mutex<Planner>> from plannerOpen, freed only
    // by plannerClose, which the Java object calls once.
    unsafe { &*(handle as *const Mutex<Planner>) }
}

/// Ranges as 11 longs each.
pub(crate) fn ranges_array(env: &mut JNIEnv, ranges: Vec<RecordingRange>) -> jlongArray {
    let mut flat = Vec::with_capacity(ranges.len() * 11);
    for r in ranges {
        flat.extend([
            r.recording_id,
            r.stream_id as i64,
            r.session_id as i64,
            r.start,
            r.end,
            r.replay_from,
            r.replay_to,
            r.recording_start,
            r.term_length as i64,
            r.segment_length as i64,
            r.initial_term_id as i64,
        ]);
    }
    long_array(env, &flat)
}

fn offset(env: &mut JNIEnv, text: &JString) -> Result<Option<SourceOffset>, ()> {
    match string(env, text) {
        None => Ok(None),
        Some(t) => SourceOffset::from_json(&t)
            .map(Some)
            .map_err(|e| throw(env, "OptionError", &e)),
    }
}

fn new_string(env: &mut JNIEnv, s: &str) -> jstring {
    env.new_string(s)
        .map(|s| s.into_raw())
        .unwrap_or(std::ptr::null_mut())
}

/// Runs `f` on the planner; a plan error is thrown.
fn with<T>(
    env: &mut JNIEnv,
    handle: jlong,
    f: impl FnOnce(&mut Planner) -> Result<T, PlanError>,
) -> Option<T> {
    let mut p = planner(handle).lock().unwrap_or_else(|e| e.into_inner());
    match f(&mut p) {
        Ok(v) => Some(v),
        Err(e) => {
            drop(p);
            throw_plan(env, e);
            None
        }
    }
}

#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerOpen<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
    streaming: jboolean,
) -> jlong {
    let Some(opts) = reader_options(&mut env, &keys, &values, streaming == JNI_TRUE) else {
        return 0;
    };
    let catalog = ArchiveCatalog::new(opts.clone(), PLANNER_RESPONSE_STREAM_BASE);
    let p = Planner {
        planner: StreamPlanner::new(opts, catalog, 0.0),
        epoch: Instant::now(),
    };
    Box::into_raw(Box::new(Mutex::new(p))) as jlong
}

#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerClose<'l>(
    _: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) {
    if handle != 0 {
        // SAFETY: see `planner`; the Java object calls this once.
        let p = unsafe { Box::from_raw(handle as *mut Mutex<Planner>) };
        // The query stops: a retention hold of its own goes.
        p.lock().unwrap_or_else(|e| e.into_inner()).planner.stop();
    }
}

/// Spark committed the micro-batch ending at `end` (the query's retention hold moves there).
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerCommit<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
    end: JString<'l>,
) {
    let Ok(Some(end)) = offset(&mut env, &end) else {
        return;
    };
    with(&mut env, handle, |p| {
        p.planner.commit(&end);
        Ok(())
    });
}

#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerBatchRanges<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) -> jlongArray {
    match with(&mut env, handle, |p| p.planner.batch_ranges()) {
        Some(r) => ranges_array(&mut env, r),
        None => std::ptr::null_mut(),
    }
}

#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerInitialOffset<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) -> jstring {
    match with(&mut env, handle, |p| {
        let now = p.epoch.elapsed().as_secs_f64();
        p.planner.initial_offset(now)
    }) {
        Some(o) => new_string(&mut env, &o.to_json()),
        None => std::ptr::null_mut(),
    }
}

/// {kind, n}: kind 0 all available, 1 max bytes, 2 max rows, 3 min rows.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerDefaultReadLimit<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) -> jlongArray {
    let limit = planner(handle)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .planner
        .default_read_limit();
    let pair = match limit {
        ReadLimit::AllAvailable => [0, 0],
        ReadLimit::MaxBytes(n) => [1, n],
        ReadLimit::MaxRows(n) => [2, n],
        ReadLimit::MinRows(n) => [3, n],
    };
    long_array(&mut env, &pair)
}

#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerPrepareAvailableNow<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) {
    with(&mut env, handle, |p| {
        let now = p.epoch.elapsed().as_secs_f64();
        p.planner.prepare_for_trigger_available_now(now)
    });
}

#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerReportLatestOffset<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) -> jstring {
    let o = planner(handle)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .planner
        .report_latest_offset();
    match o {
        Some(o) => new_string(&mut env, &o.to_json()),
        None => std::ptr::null_mut(),
    }
}

/// The offset after `start` within the limit (kind as plannerDefaultReadLimit),
/// null: no batch yet.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerLatestOffset<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
    start: JString<'l>,
    kind: jint,
    n: jlong,
) -> jstring {
    let Ok(start) = offset(&mut env, &start) else {
        return std::ptr::null_mut();
    };
    let limit = match kind {
        1 => ReadLimit::MaxBytes(n),
        2 => ReadLimit::MaxRows(n),
        3 => ReadLimit::MinRows(n),
        _ => ReadLimit::AllAvailable,
    };
    match with(&mut env, handle, |p| {
        let now = p.epoch.elapsed().as_secs_f64();
        p.planner.latest_offset(start.as_ref(), limit, now)
    }) {
        Some(Some(o)) => new_string(&mut env, &o.to_json()),
        _ => std::ptr::null_mut(),
    }
}

#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerRanges<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
    start: JString<'l>,
    end: JString<'l>,
) -> jlongArray {
    let (Ok(start), Ok(Some(end))) = (offset(&mut env, &start), offset(&mut env, &end)) else {
        return std::ptr::null_mut();
    };
    match with(&mut env, handle, |p| p.planner.ranges(start.as_ref(), &end)) {
        Some(r) => ranges_array(&mut env, r),
        None => std::ptr::null_mut(),
    }
}

#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerArchiveId<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) -> jlong {
    with(&mut env, handle, |p| {
        let id = p.planner.catalog().archive_id();
        if let Ok(id) = &id {
            sulis_spark::archive_files::check_archive_dir(*id, &p.planner.opts)?;
        }
        id.map_err(|e| match e {
            PlanError::Archive(raw) => {
                PlanError::Archive(format!("{}: {raw}", p.planner.opts.archive.describe()))
            }
            other => other,
        })
    })
    .unwrap_or(-1)
}

/// The lines to log since the last call, each "W " or "I " then the text.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerDrainLog<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) -> jobjectArray {
    let lines: Vec<String> = {
        let mut p = planner(handle).lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<String> = p
            .planner
            .catalog()
            .drain_warnings()
            .into_iter()
            .map(|t| format!("W {t}"))
            .collect();
        out.extend(p.planner.drain_log().into_iter().map(|l| match l {
            LogLine::Info(t) => format!("I {t}"),
            LogLine::Warning(t) => format!("W {t}"),
        }));
        out
    };
    crate::string_array(&mut env, &lines)
}

/// Real-time mode: a partition per followed recording, 8 longs each:
/// recording id, stream id, session id, recording start, term length,
/// segment length, initial term id, the position read on from.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerLivePartitions<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
    start: JString<'l>,
) -> jlongArray {
    let Ok(start) = offset(&mut env, &start) else {
        return std::ptr::null_mut();
    };
    let Some(live) = with(&mut env, handle, |p| {
        let now = p.epoch.elapsed().as_secs_f64();
        p.planner.live_starts(start.as_ref(), now)
    }) else {
        return std::ptr::null_mut();
    };
    let mut flat = Vec::with_capacity(live.len() * 8);
    for (r, from) in live {
        flat.extend([
            r.recording_id,
            r.stream_id as i64,
            r.session_id as i64,
            r.start,
            r.term_length as i64,
            r.segment_length as i64,
            r.initial_term_id as i64,
            from,
        ]);
    }
    long_array(&mut env, &flat)
}

/// Real-time mode: the offset a batch from `start` ended at, `pairs` the
/// (recording id, position read to) of its partitions.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_plannerMergeOffsets<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
    start: JString<'l>,
    pairs: jni::objects::JLongArray<'l>,
) -> jstring {
    let Ok(start) = offset(&mut env, &start) else {
        return std::ptr::null_mut();
    };
    let n = env.get_array_length(&pairs).unwrap_or(0) as usize;
    let mut flat = vec![0i64; n];
    let _ = env.get_long_array_region(&pairs, 0, &mut flat);
    let read_to: Vec<(i64, i64)> = flat.chunks_exact(2).map(|c| (c[0], c[1])).collect();
    let end = planner(handle)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .planner
        .merge_offsets(start.as_ref(), &read_to);
    new_string(&mut env, &end.to_json())
}

/// The schema of the table a format lookup makes: the rows' of a read
/// (as `optionsSchema`), or, for options a write takes and a read does not,
/// the rows' without options (a write's schema is its data frame's); the
/// read's error when the options are neither.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_tableSchema<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
) -> jstring {
    let Some(map) = crate::options(&mut env, &keys, &values) else {
        crate::throw(&mut env, "OptionError", "the options could not be read");
        return std::ptr::null_mut();
    };
    let shape = match sulis_spark::ReaderOptions::parse(&map, false).and_then(|o| o.row_shape()) {
        Ok(shape) => shape,
        Err(read) => match sulis_spark::WriterOptions::parse(&map) {
            Ok(_) => sulis_spark::RowShape::new(None, false, false).expect("no options"),
            // A write's options (one a read does not take among them) get the write's error.
            Err(write) if writes(&map) => {
                crate::throw_plan(&mut env, write);
                return std::ptr::null_mut();
            }
            Err(_) => {
                crate::throw_plan(&mut env, read);
                return std::ptr::null_mut();
            }
        },
    };
    env.new_string(shape.ddl())
        .map(|s| s.into_raw())
        .unwrap_or(std::ptr::null_mut())
}

/// Whether `map` names an option only a write takes.
fn writes(map: &sulis_spark::OptionMap) -> bool {
    use sulis_spark::reader_options::READER_OPTIONS;
    use sulis_spark::writer_options::WRITER_OPTIONS;
    map.names().any(|n| {
        let known = |list: &[&str]| list.iter().any(|k| k.eq_ignore_ascii_case(n));
        known(WRITER_OPTIONS) && !known(READER_OPTIONS)
    })
}

/// The options checked (the first bad one thrown); the rows' schema as
/// Spark DDL (`sulis_spark::row_shape`, the Python source's).
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_optionsSchema<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
) -> jni::sys::jstring {
    let Some(opts) = reader_options(&mut env, &keys, &values, false) else {
        return std::ptr::null_mut();
    };
    match opts.row_shape() {
        Ok(shape) => env
            .new_string(shape.ddl())
            .map(|s| s.into_raw())
            .unwrap_or(std::ptr::null_mut()),
        Err(e) => {
            crate::throw_plan(&mut env, e);
            std::ptr::null_mut()
        }
    }
}
