//! `io.sulis.spark.Native.sink*`: the JVM sink's writers
//! (`sulis_spark::sink_publisher`: at least once, or exactly once through
//! the sink's journal). Converting only.

use crate::{options, throw, throw_plan};
use jni::objects::{JByteArray, JClass, JObjectArray, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::JNIEnv;
use std::sync::Mutex;
use sulis_spark::exactly_once_target::TaskIdentity;
use sulis_spark::sink_columns::{check_sink_columns, stamp_before_1970};
use sulis_spark::sink_journal::SinkJournal;
use sulis_spark::sink_publisher::{SinkFailure, SinkPublisher};
use sulis_spark::WriterOptions;

struct Sink {
    publisher: SinkPublisher,
    stamp: bool,
    /// A reusable copy of the value offered.
    value: Vec<u8>,
}

fn sink<'a>(handle: jlong) -> &'a Mutex<Sink> {
    // SAFETY: a handle is a Box<Mutex<Sink>> from sinkOpen, freed only by
    // sinkClose, which the Java object calls once.
    unsafe { &*(handle as *const Mutex<Sink>) }
}

fn throw_sink(env: &mut JNIEnv, f: SinkFailure) {
    let (class, text) = f.named();
    throw(env, class, &text);
}

fn strings(env: &mut JNIEnv, array: &JObjectArray) -> Option<Vec<String>> {
    let n = env.get_array_length(array).ok()?;
    (0..n)
        .map(|i| {
            let s = JString::from(env.get_object_array_element(array, i).ok()?);
            crate::string(env, &s)
        })
        .collect()
}

/// The writer's options, None with the error thrown.
fn writer_options(
    env: &mut JNIEnv,
    keys: &JObjectArray,
    values: &JObjectArray,
) -> Option<WriterOptions> {
    let Some(map) = options(env, keys, values) else {
        throw(env, "OptionError", "the options could not be read");
        return None;
    };
    WriterOptions::parse(&map)
        .map_err(|e| throw_plan(env, e))
        .ok()
}

/// On the Spark driver, as a streaming write starts: with `exactlyOnce`,
/// the archive records the sink's journal.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_sinkRecordJournal<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
) {
    let Some(opts) = writer_options(&mut env, &keys, &values) else {
        return;
    };
    if !opts.exactly_once {
        return;
    }
    if let Err(f) = SinkJournal::of(&opts).and_then(|j| j.ensure_recorded()) {
        throw_sink(&mut env, f);
    }
}

/// The writer options and the write's columns (names, Spark simple types)
/// checked; a writer's handle (0 with the error thrown). `query` null (a
/// batch write) or `exactlyOnce=false`: at least once; else exactly once as
/// task attempt `attempt` of `partition` in micro-batch `batch` of
/// streaming query `query` (empty: the task had none).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_sulis_spark_Native_sinkOpen<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
    names: JObjectArray<'l>,
    types: JObjectArray<'l>,
    query: JString<'l>,
    batch: jlong,
    partition: jlong,
    attempt: jlong,
) -> jlong {
    let query = crate::string(&mut env, &query);
    let (Some(names), Some(types)) = (strings(&mut env, &names), strings(&mut env, &types)) else {
        throw(&mut env, "OptionError", "the columns could not be read");
        return 0;
    };
    let Some(opts) = writer_options(&mut env, &keys, &values) else {
        return 0;
    };
    let columns: Vec<(String, String)> = names.into_iter().zip(types).collect();
    if let Err(e) = check_sink_columns(&columns, &opts) {
        throw_plan(&mut env, e);
        return 0;
    }
    let stamp = opts.stamp_timestamp;
    let task = match query {
        Some(q) if opts.exactly_once && q.is_empty() => {
            throw(&mut env, "SinkError", "sulis sink: no streaming batch id or query id in the task (exactly-once needs them)");
            return 0;
        }
        Some(query) if opts.exactly_once => Some(TaskIdentity {
            query,
            batch,
            partition,
            task_attempt_id: attempt,
        }),
        _ => None,
    };
    match SinkPublisher::new(opts, task) {
        Ok(publisher) => Box::into_raw(Box::new(Mutex::new(Sink {
            publisher,
            stamp,
            value: Vec::new(),
        }))) as jlong,
        Err(f) => {
            throw_sink(&mut env, f);
            0
        }
    }
}

/// The id of row `row`'s target: its `channel` (null where the column is
/// null or absent) and `stream_id` (`stream_null`: null or absent).
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_sinkTarget<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
    row: jlong,
    channel: JString<'l>,
    stream_id: jlong,
    stream_null: jboolean,
) -> jint {
    let channel = crate::string(&mut env, &channel);
    let got = sink(handle)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .publisher
        .target(
            row,
            channel.as_deref(),
            (stream_null == 0).then_some(stream_id),
        );
    match got {
        Ok(id) => id as jint,
        Err(f) => {
            throw_sink(&mut env, f);
            -1
        }
    }
}

/// Offers `value` to target `target`. With `stampTimestamp` the reserved
/// value is the row's `timestamp` (`micros`; `has_time` false where the
/// column is null: 0, or absent: the time now), in epoch nanoseconds.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_sulis_spark_Native_sinkOffer<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
    row: jlong,
    target: jint,
    value: JByteArray<'l>,
    micros: jlong,
    time: jint,
) {
    let mut s = sink(handle).lock().unwrap_or_else(|e| e.into_inner());
    let s = &mut *s;
    let reserved = if !s.stamp {
        None
    } else {
        match time {
            // A timestamp column's value.
            1 if micros < 0 => {
                throw(&mut env, "OptionError", &stamp_before_1970(row, micros));
                return;
            }
            1 => Some(micros.saturating_mul(1000)),
            // Null.
            0 => Some(0),
            // No timestamp column: the time of publishing.
            _ => Some(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as i64),
            ),
        }
    };
    // A value that cannot be read fails the write, never publishes an empty
    // message in its place (the writer passes a null value as an empty one).
    let Ok(n) = env.get_array_length(&value) else {
        throw(
            &mut env,
            "SinkError",
            &format!("sulis sink: row {row}'s value could not be read"),
        );
        return;
    };
    s.value.resize(n as usize, 0);
    // SAFETY: i8 and u8 have one layout.
    let bytes = unsafe { &mut *(s.value.as_mut_slice() as *mut [u8] as *mut [i8]) };
    if env.get_byte_array_region(&value, 0, bytes).is_err() {
        return;
    }
    if let Err(f) = s.publisher.offer(target as usize, &s.value, reserved) {
        throw_sink(&mut env, f);
    }
}

/// After the last row: exactly once, every target's rows recorded and the
/// journal told. `{published, skipped}`.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_sinkFinish<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) -> jni::sys::jlongArray {
    let done = sink(handle)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .publisher
        .finish();
    match done {
        Ok((published, skipped)) => {
            let Ok(out) = env.new_long_array(2) else {
                return std::ptr::null_mut();
            };
            if env
                .set_long_array_region(&out, 0, &[published, skipped])
                .is_err()
            {
                return std::ptr::null_mut();
            }
            out.into_raw()
        }
        Err(f) => {
            throw_sink(&mut env, f);
            std::ptr::null_mut()
        }
    }
}

/// After an error (`why`): each exactly-once target tells the journal,
/// where it can, how its attempt ended.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_sinkFail<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
    why: JString<'l>,
) {
    let why = crate::string(&mut env, &why).unwrap_or_default();
    sink(handle)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .publisher
        .fail(&why);
}

/// What to log since the last call (a re-run that skipped rows, an attempt
/// that waited for another), one text each.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_sinkNotes<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) -> jni::sys::jobjectArray {
    let notes = sink(handle)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .publisher
        .drain_notes();
    crate::string_array(&mut env, &notes)
}

/// Frees a writer (its publications stay, kept for the process).
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_sinkClose<'l>(
    _: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) {
    if handle != 0 {
        // SAFETY: see `sink`; the Java object calls this once.
        drop(unsafe { Box::from_raw(handle as *mut Mutex<Sink>) });
    }
}
