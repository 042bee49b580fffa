//! The JNI binding of `sulis_spark` for the JVM source of `format("sulis")`
//! (`jvm/`: `io.sulis.spark.Native`). Converting only: the planner and
//! the partition readers are `sulis_spark`'s, the ones the Python source
//! runs too.
//!
//! A planner or reader lives on the Rust heap behind a `long` handle the
//! Java object holds and closes once. Offsets cross as their JSON text,
//! ranges as 11 longs each (`RecordingRange`'s fields in order), rows as
//! records in a direct `ByteBuffer` (`reader_rows`). A failure is thrown
//! as `io.sulis.spark.SulisException`'s subclass of the Python source's
//! name (`OptionError`, `DataLossError`, `ArchiveUnavailableError`,
//! `ReadError`, `ReadTimeoutError`, `NoMediaDriverError`).

mod planner;
mod reader;
mod sink;

use jni::objects::{JObjectArray, JString};
use jni::sys::jlongArray;
use jni::JNIEnv;
use sulis_spark::{OptionMap, PlanError, ReaderOptions};

/// Throws `io.sulis.spark.SulisException$<class>` with `text`.
pub(crate) fn throw(env: &mut JNIEnv, class: &str, text: &str) {
    let name = format!("io/sulis/spark/SulisException${class}");
    if env.throw_new(&name, text).is_err() {
        let _ = env.exception_clear();
        let _ = env.throw_new("java/lang/RuntimeException", text);
    }
}

/// Throws a plan error as its exception.
pub(crate) fn throw_plan(env: &mut JNIEnv, e: PlanError) {
    let (class, text) = e.named();
    throw(env, class, &text);
}

/// A Java string, or None for null.
pub(crate) fn string(env: &mut JNIEnv, s: &JString) -> Option<String> {
    if s.is_null() {
        return None;
    }
    env.get_string(s).ok().map(String::from)
}

/// A Java `String[]` of `texts` (null if it cannot be made).
pub(crate) fn string_array(env: &mut JNIEnv, texts: &[String]) -> jni::sys::jobjectArray {
    let Ok(array) = env.new_object_array(
        texts.len() as i32,
        "java/lang/String",
        jni::objects::JObject::null(),
    ) else {
        return std::ptr::null_mut();
    };
    for (i, t) in texts.iter().enumerate() {
        if let Ok(s) = env.new_string(t) {
            let _ = env.set_object_array_element(&array, i as i32, s);
        }
    }
    array.into_raw()
}

/// The options Spark passed, as two parallel arrays of names and values.
pub(crate) fn options(
    env: &mut JNIEnv,
    keys: &JObjectArray,
    values: &JObjectArray,
) -> Option<OptionMap> {
    let n = env.get_array_length(keys).ok()?;
    let mut pairs = Vec::with_capacity(n as usize);
    for i in 0..n {
        let k = JString::from(env.get_object_array_element(keys, i).ok()?);
        let v = JString::from(env.get_object_array_element(values, i).ok()?);
        pairs.push((string(env, &k)?, string(env, &v)?));
    }
    Some(OptionMap::new(pairs))
}

/// A reader's options, parsed and checked; None with the error thrown.
pub(crate) fn reader_options(
    env: &mut JNIEnv,
    keys: &JObjectArray,
    values: &JObjectArray,
    streaming: bool,
) -> Option<ReaderOptions> {
    let Some(map) = options(env, keys, values) else {
        throw(env, "OptionError", "the options could not be read");
        return None;
    };
    match ReaderOptions::parse(&map, streaming) {
        Ok(o) => Some(o),
        Err(e) => {
            throw_plan(env, e);
            None
        }
    }
}

/// A Java long[] of `values` (null if it cannot be made).
pub(crate) fn long_array(env: &mut JNIEnv, values: &[i64]) -> jlongArray {
    match env.new_long_array(values.len() as i32) {
        Ok(a) => {
            let _ = env.set_long_array_region(&a, 0, values);
            a.into_raw()
        }
        Err(_) => std::ptr::null_mut(),
    }
}
