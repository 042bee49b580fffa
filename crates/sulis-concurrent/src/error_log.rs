//! Log of distinct errors with Agrona's `DistinctErrorLog` layout
//! (docs/protocol.md §4.5), read by error-stat tools while the driver runs.
//!
//! ```text
//! record (8-byte aligned, appended one after another from offset 0):
//!   +0  i32 length (24 + text bytes), written last with release: 0 = end of log
//!   +4  i32 observation count
//!   +8  i64 last observation (epoch ms)
//!   +16 i64 first observation (epoch ms)
//!   +24 error text, UTF-8
//! ```
//!
//! An error whose text was already recorded only bumps that record's count and
//! last-observation time, so a repeating failure cannot fill the log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::atomic_buffer::{align, AtomicBuffer};

/// Offset of the record length.
pub const LENGTH_OFFSET: usize = 0;
/// Offset of the observation count.
pub const OBSERVATION_COUNT_OFFSET: usize = 4;
/// Offset of the last observation time (epoch ms).
pub const LAST_OBSERVATION_TIMESTAMP_OFFSET: usize = 8;
/// Offset of the first observation time (epoch ms).
pub const FIRST_OBSERVATION_TIMESTAMP_OFFSET: usize = 16;
/// Offset of the error text.
pub const ENCODED_ERROR_OFFSET: usize = 24;
/// Records start on multiples of this.
pub const RECORD_ALIGNMENT: usize = 8;

/// Visits the complete records of an error log in order: `(offset, length)`.
/// Stops at the first zero length or at a length that cannot be right.
fn for_each_record(buffer: &AtomicBuffer, mut f: impl FnMut(usize, usize)) -> usize {
    let capacity = buffer.capacity();
    let mut offset = 0;
    while offset + ENCODED_ERROR_OFFSET <= capacity {
        let length = buffer.get_i32_volatile(offset + LENGTH_OFFSET);
        if length < ENCODED_ERROR_OFFSET as i32 || length as usize > capacity - offset {
            break;
        }
        let length = length as usize;
        f(offset, length);
        offset += align(length, RECORD_ALIGNMENT);
    }
    offset
}

/// Writer of the error log.  One writer per buffer (see [`SharedErrorLog`] to
/// share it between threads).
#[derive(Debug)]
pub struct DistinctErrorLog {
    buffer: AtomicBuffer,
    next_offset: usize,
    /// Offset of the record for each distinct error text.
    observations: HashMap<String, usize>,
}

impl DistinctErrorLog {
    /// Writes into `buffer` (8-byte aligned).  Records already in it (a log being
    /// taken over) are kept and count as known errors.
    pub fn new(buffer: AtomicBuffer) -> Self {
        let mut observations = HashMap::new();
        let next_offset = for_each_record(&buffer, |offset, length| {
            let text = String::from_utf8_lossy(
                buffer.slice(offset + ENCODED_ERROR_OFFSET, length - ENCODED_ERROR_OFFSET),
            )
            .into_owned();
            observations.entry(text).or_insert(offset);
        });
        DistinctErrorLog {
            buffer,
            next_offset,
            observations,
        }
    }

    /// The underlying buffer.
    pub fn buffer(&self) -> AtomicBuffer {
        self.buffer
    }

    /// Records one observation of `error_text` at `now_ms`; false if it is a new
    /// error and the log has no room left for it.
    pub fn record(&mut self, error_text: &str, now_ms: i64) -> bool {
        let buffer = &self.buffer;
        if let Some(&offset) = self.observations.get(error_text) {
            buffer.get_and_add_i32(offset + OBSERVATION_COUNT_OFFSET, 1);
            buffer.put_i64_ordered(offset + LAST_OBSERVATION_TIMESTAMP_OFFSET, now_ms);
            return true;
        }

        let length = ENCODED_ERROR_OFFSET + error_text.len();
        let offset = self.next_offset;
        if length > i32::MAX as usize || length > buffer.capacity().saturating_sub(offset) {
            return false;
        }
        buffer.put_bytes(offset + ENCODED_ERROR_OFFSET, error_text.as_bytes());
        buffer.put_i64(offset + FIRST_OBSERVATION_TIMESTAMP_OFFSET, now_ms);
        buffer.put_i64_ordered(offset + LAST_OBSERVATION_TIMESTAMP_OFFSET, now_ms);
        buffer.put_i32_ordered(offset + OBSERVATION_COUNT_OFFSET, 1);
        buffer.put_i32_ordered(offset + LENGTH_OFFSET, length as i32);

        self.next_offset = align(offset + length, RECORD_ALIGNMENT);
        self.observations.insert(error_text.to_owned(), offset);
        true
    }

    /// Number of distinct errors recorded.
    pub fn distinct_count(&self) -> usize {
        self.observations.len()
    }
}

/// A [`DistinctErrorLog`] shared between threads (cheap to clone).
#[derive(Clone, Debug)]
pub struct SharedErrorLog(Arc<Mutex<DistinctErrorLog>>);

impl SharedErrorLog {
    /// Shares a log writing into `buffer`.
    pub fn new(buffer: AtomicBuffer) -> Self {
        SharedErrorLog(Arc::new(Mutex::new(DistinctErrorLog::new(buffer))))
    }

    /// As [`DistinctErrorLog::record`].
    pub fn record(&self, error_text: &str, now_ms: i64) -> bool {
        // A panic while holding the lock leaves the log consistent (the length is
        // written last), so a poisoned lock is still usable.
        let mut log = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        log.record(error_text, now_ms)
    }
}

/// True if the log holds at least one record.
pub fn has_errors(buffer: AtomicBuffer) -> bool {
    buffer.capacity() >= ENCODED_ERROR_OFFSET && buffer.get_i32_volatile(LENGTH_OFFSET) != 0
}

/// Calls `f(count, first_ms, last_ms, text)` for each error last observed at or
/// after `since_ms`, in the order first seen; returns how many were visited.
pub fn read_error_log<F: FnMut(i32, i64, i64, &str)>(
    buffer: AtomicBuffer,
    since_ms: i64,
    mut f: F,
) -> usize {
    let mut entries = 0;
    for_each_record(&buffer, |offset, length| {
        let last = buffer.get_i64_volatile(offset + LAST_OBSERVATION_TIMESTAMP_OFFSET);
        if last >= since_ms {
            entries += 1;
            let text = String::from_utf8_lossy(
                buffer.slice(offset + ENCODED_ERROR_OFFSET, length - ENCODED_ERROR_OFFSET),
            );
            f(
                buffer.get_i32_volatile(offset + OBSERVATION_COUNT_OFFSET),
                buffer.get_i64(offset + FIRST_OBSERVATION_TIMESTAMP_OFFSET),
                last,
                &text,
            );
        }
    });
    entries
}

/// The error log in `buffer` as text, one paragraph per distinct error
/// (as Aeron prints a saved error log), and how many distinct errors it holds.
pub fn error_log_text(buffer: AtomicBuffer) -> (usize, String) {
    let mut text = String::new();
    let n = read_error_log(buffer, 0, |count, first, last, error| {
        text.push_str(&format!(
            "{count} observations from {} to {} for:\n {error}\n",
            utc(first),
            utc(last)
        ))
    });
    (n, text)
}

/// Days since 1970-01-01 as a civil date (year, month, day) of the
/// proleptic Gregorian calendar (Howard Hinnant's algorithm).
pub fn civil_date(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// `epoch_ms` as `YYYY-MM-DD HH:MM:SS.mmm` UTC.
pub fn utc(epoch_ms: i64) -> String {
    let (days, ms) = (
        epoch_ms.div_euclid(86_400_000),
        epoch_ms.rem_euclid(86_400_000),
    );
    let (year, month, day) = civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(len: usize) -> (Vec<u64>, AtomicBuffer) {
        let mut words = vec![0u64; len.div_ceil(8)];
        let buffer = unsafe { AtomicBuffer::new(words.as_mut_ptr() as *mut u8, len) };
        (words, buffer)
    }

    fn read_all(buffer: AtomicBuffer, since_ms: i64) -> Vec<(i32, i64, i64, String)> {
        let mut out = Vec::new();
        let n = read_error_log(buffer, since_ms, |c, first, last, text| {
            out.push((c, first, last, text.to_string()))
        });
        assert_eq!(n, out.len());
        out
    }

    #[test]
    fn should_record_with_agrona_layout() {
        let (_w, b) = memory(1024);
        let mut log = DistinctErrorLog::new(b);
        assert!(!has_errors(b));
        assert!(log.record("boom", 100));
        assert!(has_errors(b));
        assert_eq!(b.get_i32(0), 28);
        assert_eq!(b.get_i32(4), 1);
        assert_eq!(b.get_i64(8), 100);
        assert_eq!(b.get_i64(16), 100);
        assert_eq!(b.slice(24, 4), b"boom");
        assert!(log.record("second error", 150));
        assert_eq!(b.get_i32(32), 36); // next record 8-byte aligned
        assert_eq!(
            read_all(b, 0),
            vec![
                (1, 100, 100, "boom".into()),
                (1, 150, 150, "second error".into())
            ]
        );
    }

    #[test]
    fn should_deduplicate_identical_text_and_count() {
        let (_w, b) = memory(1024);
        let mut log = DistinctErrorLog::new(b);
        assert!(log.record("io error: refused", 10));
        assert!(log.record("io error: reset", 20));
        assert!(log.record("io error: refused", 30));
        assert!(log.record("io error: refused", 40));
        assert_eq!(log.distinct_count(), 2);
        assert_eq!(
            read_all(b, 0),
            vec![
                (3, 10, 40, "io error: refused".into()),
                (1, 20, 20, "io error: reset".into())
            ]
        );
        // Only errors seen since 25.
        assert_eq!(
            read_all(b, 25),
            vec![(3, 10, 40, "io error: refused".into())]
        );
        assert_eq!(read_all(b, 41), vec![]);
    }

    #[test]
    fn should_refuse_new_errors_when_full_but_keep_counting_known_ones() {
        let (_w, b) = memory(96);
        let mut log = DistinctErrorLog::new(b);
        assert!(log.record(&"x".repeat(40), 1)); // 64 bytes
        assert!(!log.record(&"y".repeat(9), 2)); // needs 33, 32 left
        assert!(log.record(&"z".repeat(8), 3)); // exactly 32
        assert!(!log.record("w", 4));
        assert!(log.record(&"x".repeat(40), 5));
        let all = read_all(b, 0);
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].0, all[0].2), (2, 5));
        assert!(!DistinctErrorLog::new(memory(16).1).record("", 0));
    }

    #[test]
    fn should_continue_an_existing_log() {
        let (_w, b) = memory(1024);
        let mut log = DistinctErrorLog::new(b);
        log.record("a", 1);
        log.record("bb", 2);
        let mut again = DistinctErrorLog::new(b);
        assert_eq!(again.distinct_count(), 2);
        again.record("bb", 3);
        again.record("ccc", 4);
        assert_eq!(
            read_all(b, 0),
            vec![
                (1, 1, 1, "a".into()),
                (2, 2, 3, "bb".into()),
                (1, 4, 4, "ccc".into())
            ]
        );
    }

    #[test]
    fn should_share_between_threads() {
        let (_w, b) = memory(4096);
        let log = SharedErrorLog::new(b);
        std::thread::scope(|s| {
            for t in 0..4 {
                let log = log.clone();
                s.spawn(move || {
                    for i in 0..1000 {
                        assert!(log.record(&format!("error {}", (i + t) % 5), i));
                    }
                });
            }
        });
        let all = read_all(b, 0);
        assert_eq!(all.len(), 5);
        assert_eq!(all.iter().map(|e| e.0).sum::<i32>(), 4000);
    }
}
