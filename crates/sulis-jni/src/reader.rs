//! `io.sulis.spark.Native.reader*`: the executor side (`PartitionReader`).
//!
//! A planned range's rows (what is a row and its columns:
//! `sulis_spark::row_shape`) go to the JVM as Arrow columns
//! (`readerColumns`), which a `ColumnarBatch` reads where they are.
//!
//! Real-time mode's rows go one at a time: `liveRows` fills a direct
//! `ByteBuffer` with records, each little-endian: the row's length (i32),
//! 0 (i32), the position its message ends at (i64), then the row in
//! Spark's `UnsafeRow` format (`sulis_spark::unsafe_row`), which the JVM
//! points an `UnsafeRow` at. It returns the number of records, -1 once the
//! range is read, or -n when the next row needs a buffer of n bytes (n > 1)
//! and the given one is smaller.

use crate::{reader_options, throw};
use jni::objects::{JByteBuffer, JClass, JLongArray, JObjectArray};
use jni::sys::{jint, jlong};
use jni::JNIEnv;
use std::sync::Mutex;
use sulis_client::Batch;
use sulis_spark::arrow_columns::ArrowColumns;
use sulis_spark::partition_reader::PartitionReader;
use sulis_spark::range_replay::ReadFailure;
use sulis_spark::row_shape::Cell;
use sulis_spark::unsafe_row::{row_length, write_row};
use sulis_spark::{RangeIds, RecordingRange, RowShape};

/// Bytes of a record before its row.
const RECORD_HEADER: usize = 16;

pub(crate) struct Reader {
    reader: Option<PartitionReader>,
    /// What the rows are, and the recording's ids they carry.
    shape: RowShape,
    ids: RangeIds,
    /// Messages read and not yet handed over, and the next of them.
    pending: Option<Batch>,
    next: usize,
    /// A followed recording (real-time mode): never at an end.
    live: bool,
    /// The columns readerColumns handed over last (their buffers reused).
    columns: Option<ArrowColumns>,
    /// The messages readerColumns handed over last as they are (plain rows).
    handed: Option<Batch>,
}

fn reader<'a>(handle: jlong) -> &'a Mutex<Reader> {
    // SAFETY: a handle is a Box<Mutex<Reader>> from readerOpen, freed only by
    // readerClose, which the Java object calls once.
    unsafe { &*(handle as *const Mutex<Reader>) }
}

/// The rows' shape of a reader's options; None with the error thrown.
fn row_shape(env: &mut JNIEnv, opts: &sulis_spark::ReaderOptions) -> Option<RowShape> {
    match opts.row_shape() {
        Ok(s) => Some(s),
        Err(e) => {
            crate::throw_plan(env, e);
            None
        }
    }
}

fn throw_read(env: &mut JNIEnv, f: ReadFailure) {
    let (class, text) = f.named();
    throw(env, class, &text);
}

#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_readerOpen<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
    range: JLongArray<'l>,
    archive_id: jlong,
) -> jlong {
    let Some(opts) = reader_options(&mut env, &keys, &values, false) else {
        return 0;
    };
    let mut r = [0i64; 11];
    if env.get_long_array_region(&range, 0, &mut r).is_err() {
        throw(
            &mut env,
            "ReadError",
            "a partition's range must be 11 longs",
        );
        return 0;
    }
    let range = RecordingRange {
        recording_id: r[0],
        stream_id: r[1] as i32,
        session_id: r[2] as i32,
        start: r[3],
        end: r[4],
        replay_from: r[5],
        replay_to: r[6],
        recording_start: r[7],
        term_length: r[8] as i32,
        segment_length: r[9] as i32,
        initial_term_id: r[10] as i32,
    };
    let archive_id = (archive_id >= 0).then_some(archive_id);
    let Some(shape) = row_shape(&mut env, &opts) else {
        return 0;
    };
    let ids = RangeIds {
        recording_id: range.recording_id,
        stream_id: range.stream_id,
        session_id: range.session_id,
    };
    match PartitionReader::open(&opts, range, archive_id) {
        Ok(reader) => Box::into_raw(Box::new(Mutex::new(Reader {
            reader: Some(reader),
            shape,
            ids,
            pending: None,
            next: 0,
            live: false,
            columns: None,
            handed: None,
        }))) as jlong,
        Err(f) => {
            throw_read(&mut env, f);
            0
        }
    }
}

/// Real-time mode: a followed recording (8 longs as plannerLivePartitions
/// gives them), read with liveRows.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_liveOpen<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
    part: JLongArray<'l>,
) -> jlong {
    let Some(opts) = reader_options(&mut env, &keys, &values, true) else {
        return 0;
    };
    let mut p = [0i64; 8];
    if env.get_long_array_region(&part, 0, &mut p).is_err() {
        throw(
            &mut env,
            "ReadError",
            "a real-time partition must be 8 longs",
        );
        return 0;
    }
    let info = sulis_spark::RecordingInfo {
        recording_id: p[0],
        stream_id: p[1] as i32,
        session_id: p[2] as i32,
        start: p[3],
        end: p[7],
        term_length: p[4] as i32,
        mtu_length: 0,
        live: true,
        segment_length: p[5] as i32,
        initial_term_id: p[6] as i32,
        stop_timestamp: -1,
        recorded: -1,
    };
    let Some(shape) = row_shape(&mut env, &opts) else {
        return 0;
    };
    let ids = RangeIds {
        recording_id: info.recording_id,
        stream_id: info.stream_id,
        session_id: info.session_id,
    };
    match PartitionReader::open_live(&opts, &info, p[7]) {
        Ok(reader) => Box::into_raw(Box::new(Mutex::new(Reader {
            reader: Some(reader),
            shape,
            ids,
            pending: None,
            next: 0,
            live: true,
            columns: None,
            handed: None,
        }))) as jlong,
        Err(f) => {
            throw_read(&mut env, f);
            0
        }
    }
}

/// Real-time mode: the next rows as `UnsafeRow` records (see the module
/// doc), waiting at most `timeout_ms` for a message (0 records then); a
/// followed recording that stopped and was read whole gives 0 records too.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_liveRows<'l>(
    env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
    buffer: JByteBuffer<'l>,
    timeout_ms: jlong,
) -> jint {
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms.max(0) as u64);
    rows(env, handle, buffer, Some(deadline))
}

/// Where a reader's rows go: a direct buffer of `UnsafeRow` records, or
/// Arrow columns.
trait RowSink {
    /// Takes the row of the message ending at `position`.
    fn take(&mut self, position: i64, cells: &[Cell]) -> Take;
    /// Rows taken so far.
    fn taken(&self) -> usize;
}

enum Take {
    Taken,
    /// Full: the row is not taken.
    Full,
    /// Not even one row fits: it needs this many bytes.
    TooSmall(usize),
}

/// `UnsafeRow` records (see the module doc) in a direct buffer.
struct UnsafeRecords<'a> {
    out: &'a mut [u8],
    at: usize,
    rows: usize,
}

impl RowSink for UnsafeRecords<'_> {
    fn take(&mut self, position: i64, cells: &[Cell]) -> Take {
        let need = RECORD_HEADER + row_length(cells);
        if self.at + need > self.out.len() {
            return if self.rows == 0 {
                Take::TooSmall(need)
            } else {
                Take::Full
            };
        }
        let at = self.at;
        let length = write_row(cells, &mut self.out[at + RECORD_HEADER..]);
        self.out[at..at + 4].copy_from_slice(&(length as i32).to_le_bytes());
        self.out[at + 4..at + 8].fill(0);
        self.out[at + 8..at + 16].copy_from_slice(&position.to_le_bytes());
        self.at += need;
        self.rows += 1;
        Take::Taken
    }

    fn taken(&self) -> usize {
        self.rows
    }
}

/// At most `limit` rows as Arrow columns.
struct ColumnRows<'a> {
    columns: &'a mut ArrowColumns,
    limit: usize,
}

impl RowSink for ColumnRows<'_> {
    fn take(&mut self, _: i64, cells: &[Cell]) -> Take {
        if self.columns.len >= self.limit {
            return Take::Full;
        }
        self.columns.push(cells);
        Take::Taken
    }

    fn taken(&self) -> usize {
        self.columns.len
    }
}

fn rows(
    mut env: JNIEnv,
    handle: jlong,
    buffer: JByteBuffer,
    deadline: Option<std::time::Instant>,
) -> jint {
    let (Ok(address), Ok(capacity)) = (
        env.get_direct_buffer_address(&buffer),
        env.get_direct_buffer_capacity(&buffer),
    ) else {
        throw(&mut env, "ReadError", "liveRows needs a direct ByteBuffer");
        return -1;
    };
    // SAFETY: the direct buffer's memory is `capacity` bytes the Java
    // caller owns and does not touch during this call.
    let out = unsafe { std::slice::from_raw_parts_mut(address, capacity) };
    let mut r = reader(handle).lock().unwrap_or_else(|e| e.into_inner());
    let mut sink = UnsafeRecords {
        out,
        at: 0,
        rows: 0,
    };
    fill(&mut env, &mut r, &mut sink, deadline)
}

/// Hands `sink` the reader's next rows: how many (0 when `deadline`
/// passed first), -1 at the range's end or with an exception thrown, or
/// -n when not even one row fits (it needs n bytes, n > 1).
fn fill(
    env: &mut JNIEnv,
    r: &mut Reader,
    sink: &mut impl RowSink,
    deadline: Option<std::time::Instant>,
) -> jint {
    loop {
        if let Some(batch) = r.pending.as_ref() {
            let mut too_small = 0;
            // Real-time mode over a cluster log: a message not yet committed waits.
            let mut waiting = false;
            let mut failed = None;
            let reader = &mut r.reader;
            let next = r.shape.rows(batch, r.next, &r.ids, |i, cells| {
                match reader.as_mut().map(|x| x.hands_over(batch.positions[i])) {
                    Some(Ok(false)) => {
                        waiting = true;
                        return false;
                    }
                    Some(Err(f)) => {
                        failed = Some(f);
                        return false;
                    }
                    _ => {}
                }
                match sink.take(batch.positions[i], cells) {
                    Take::Taken => true,
                    Take::Full => false,
                    Take::TooSmall(need) => {
                        too_small = need;
                        false
                    }
                }
            });
            let next = match next {
                Ok(n) => n,
                Err(e) => {
                    throw(env, "RowError", &e.0);
                    return -1;
                }
            };
            if let Some(f) = failed {
                throw_read(env, f);
                return -1;
            }
            if too_small > 0 {
                return -(too_small as jint).max(2);
            }
            r.next = next;
            if r.next >= batch.len() {
                r.pending = None;
                r.next = 0;
            }
            let taken = sink.taken();
            if taken > 0 {
                return taken as jint;
            }
            if waiting {
                if deadline.is_none_or(|d| std::time::Instant::now() >= d) {
                    return 0;
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
                continue;
            }
        }
        let Some(reader) = r.reader.as_mut() else {
            return -1;
        };
        let got = if r.live {
            reader.poll_messages()
        } else {
            reader.next_batch()
        };
        match got {
            Ok(Some(b)) => r.pending = Some(b),
            Ok(None) if !r.live => return -1,
            Ok(None) => {
                if deadline.is_none_or(|d| std::time::Instant::now() >= d) {
                    return 0;
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            Err(f) => {
                throw_read(env, f);
                return -1;
            }
        }
    }
}

/// The next rows as Arrow columns (see `sulis_spark::arrow_columns`): how
/// many, -1 at the range's end. `columns` gets four longs a column: the
/// address of its validity bit map (0 while no value is null), its null
/// count, the address of its int32 offsets (binary; 0 otherwise, -1 for a
/// column whose every row holds one value, the fourth long) and of its
/// data. They stay valid until the next call.
///
/// Plain rows (`RowShape::is_plain`) are the messages as read: their
/// columns are the batch's own buffers, copied nowhere, the range's ids
/// constant columns. Other rows are made into columns, at most `limit`.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_readerColumns<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
    columns: JLongArray<'l>,
    limit: jint,
) -> jint {
    let mut guard = reader(handle).lock().unwrap_or_else(|e| e.into_inner());
    let r = &mut *guard;
    if let (Some(b), Some(reader)) = (r.handed.take(), r.reader.as_mut()) {
        reader.recycle(b);
    }
    let (n, meta) = if r.shape.is_plain() {
        match plain_columns(&mut env, r) {
            Some(got) => got,
            None => return -1,
        }
    } else {
        let mut out = r.columns.take().unwrap_or_else(|| {
            let types = r.shape.columns().into_iter().map(|(_, t)| t).collect();
            ArrowColumns::new(types)
        });
        out.clear();
        let n = fill(
            &mut env,
            r,
            &mut ColumnRows {
                columns: &mut out,
                limit: limit.max(1) as usize,
            },
            None,
        );
        let mut meta = Vec::with_capacity(out.columns.len() * 4);
        for c in &out.columns {
            let validity = if c.null_count > 0 {
                c.validity.as_ptr() as jlong
            } else {
                0
            };
            let offsets = if c.offsets.is_empty() {
                0
            } else {
                c.offsets.as_ptr() as jlong
            };
            meta.extend([
                validity,
                c.null_count as jlong,
                offsets,
                c.data.as_ptr() as jlong,
            ]);
        }
        r.columns = Some(out);
        (n, meta)
    };
    if n > 0 && env.set_long_array_region(&columns, 0, &meta).is_err() {
        return -1; // the exception (an array too short) is thrown
    }
    n
}

/// The next messages' plain rows (see readerColumns): (how many, the
/// columns' longs), the messages kept in `r.handed`; (-1, _) at the range's
/// end; None with an exception thrown.
fn plain_columns(env: &mut JNIEnv, r: &mut Reader) -> Option<(jint, Vec<jlong>)> {
    if r.pending.is_none() {
        let reader = r.reader.as_mut()?;
        match reader.next_batch() {
            Ok(Some(b)) => r.pending = Some(b),
            Ok(None) => return Some((-1, Vec::new())),
            Err(f) => {
                throw_read(env, f);
                return None;
            }
        }
    }
    let batch = r.pending.take()?;
    let from = std::mem::take(&mut r.next);
    let at = |p: *const u8, width: usize| (p as usize + from * width) as jlong;
    let constant = |v: i64| [0, 0, -1, v];
    let mut meta = Vec::with_capacity(24);
    meta.extend([
        0,
        0,
        at(batch.offsets.as_ptr().cast(), 4),
        batch.data.as_ptr() as jlong,
    ]);
    meta.extend(constant(r.ids.recording_id));
    meta.extend(constant(r.ids.stream_id as i64));
    meta.extend(constant(r.ids.session_id as i64));
    meta.extend([0, 0, 0, at(batch.positions.as_ptr().cast(), 8)]);
    meta.extend([0, 0, 0, at(batch.reserved_values.as_ptr().cast(), 8)]);
    let n = (batch.len() - from) as jint;
    r.handed = Some(batch);
    Some((n, meta))
}

/// The address of a direct buffer's memory (the JVM points `UnsafeRow`s
/// into it), 0 if it is not direct.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_bufferAddress<'l>(
    env: JNIEnv<'l>,
    _: JClass<'l>,
    buffer: JByteBuffer<'l>,
) -> jlong {
    env.get_direct_buffer_address(&buffer)
        .map_or(0, |p| p as jlong)
}

/// Lines to log (info) since the last call.
#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_readerDrainLog<'l>(
    mut env: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) -> jni::sys::jobjectArray {
    let notes = {
        let mut r = reader(handle).lock().unwrap_or_else(|e| e.into_inner());
        r.reader
            .as_mut()
            .map(|x| x.drain_notes())
            .unwrap_or_default()
    };
    let lines: Vec<String> = notes.iter().map(|n| format!("I {n}")).collect();
    crate::string_array(&mut env, &lines)
}

#[no_mangle]
pub extern "system" fn Java_io_sulis_spark_Native_readerClose<'l>(
    _: JNIEnv<'l>,
    _: JClass<'l>,
    handle: jlong,
) {
    if handle != 0 {
        // SAFETY: see `reader`; the Java object calls this once.
        let r = unsafe { Box::from_raw(handle as *mut Mutex<Reader>) };
        if let Some(reader) = r
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .reader
            .take()
        {
            reader.close();
        }
    }
}
