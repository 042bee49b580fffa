//! The loss report: what data each image lost, in a file any process can read.
//!
//! `<dir>/loss-report.dat` (docs/protocol.md §4.6, Aeron's layout, so Aeron's
//! `LossStat` reads it too). One entry per image that has lost data, appended
//! by the receiver (the single writer) the first time it detects a gap in that
//! image, then updated on every further gap:
//!
//! ```text
//!  0  observation count   i64   written last when an entry is created: > 0 = entry present
//!  8  total bytes lost    i64
//! 16  first observation   i64   epoch ms
//! 24  last observation    i64   epoch ms
//! 32  session id          i32
//! 36  stream id           i32
//! 40  channel             i32 length + UTF-8, padded to a multiple of 4
//!  …  source              i32 length + UTF-8 (the sender's address), at
//!                         40 + align(4 + channel length, 4), where Aeron's
//!                         LossReportReader looks for it
//!     padding to a multiple of 64 bytes
//! ```
//!
//! A gap counts once, when first detected: NAK retries and a gap shrinking as
//! repairs arrive are the same loss. "Bytes lost" is the gap's length at
//! detection, i.e. the data that had to be repaired (or, with
//! `reliable=false`, was padded over).

use crate::{align, AtomicBuffer};

/// File name in the driver directory.
pub const LOSS_REPORT_FILE: &str = "loss-report.dat";
/// Default file length (`loss_report_buffer_length`): 1 MiB.
pub const LOSS_REPORT_LENGTH_DEFAULT: usize = 1024 * 1024;
/// Entries start on multiples of this.
pub const ENTRY_ALIGNMENT: usize = 64;

const OBSERVATION_COUNT_OFFSET: usize = 0;
const TOTAL_BYTES_LOST_OFFSET: usize = 8;
const FIRST_OBSERVATION_OFFSET: usize = 16;
const LAST_OBSERVATION_OFFSET: usize = 24;
const SESSION_ID_OFFSET: usize = 32;
const STREAM_ID_OFFSET: usize = 36;
const CHANNEL_OFFSET: usize = 40;

/// Where an entry's source lies in it, after a channel of `channel_len`
/// bytes: the channel's length and text padded to 4 bytes, as Aeron's
/// `LossReport` writes it (and its `LossReportReader` reads it).
fn source_offset(channel_len: usize) -> usize {
    CHANNEL_OFFSET + align(4 + channel_len, 4)
}

/// One image's losses, as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LossEntry {
    /// Gaps detected.
    pub observation_count: i64,
    /// Sum of their lengths at detection.
    pub total_bytes_lost: i64,
    /// Epoch ms of the first gap.
    pub first_observation_ms: i64,
    /// Epoch ms of the latest gap.
    pub last_observation_ms: i64,
    /// Session id of the image.
    pub session_id: i32,
    /// Stream id of the image.
    pub stream_id: i32,
    /// Channel of the subscription.
    pub channel: String,
    /// Where the image's data comes from.
    pub source: String,
}

/// Writer side: appends and updates entries (one writer thread).
pub struct LossReport {
    buffer: AtomicBuffer,
    next_offset: usize,
}

/// Where an entry lives, for [`LossReport::record_observation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHandle(usize);

impl LossReport {
    /// A report writing into `buffer` (zeroed, or holding entries of a
    /// previous writer to append after).
    pub fn new(buffer: AtomicBuffer) -> Self {
        let next_offset = entries_end(&buffer);
        LossReport {
            buffer,
            next_offset,
        }
    }

    /// Adds an entry for the first `observations` gaps, `bytes_lost` in all,
    /// at `now_ms`; `None` when the report has no room left for it.
    #[allow(clippy::too_many_arguments)]
    pub fn create_entry(
        &mut self,
        observations: i64,
        bytes_lost: i64,
        now_ms: i64,
        session_id: i32,
        stream_id: i32,
        channel: &str,
        source: &str,
    ) -> Option<EntryHandle> {
        let length = align(
            source_offset(channel.len()) + 4 + source.len(),
            ENTRY_ALIGNMENT,
        );
        let offset = self.next_offset;
        if offset + length > self.buffer.capacity() {
            return None;
        }
        let b = &self.buffer;
        b.put_i64(offset + TOTAL_BYTES_LOST_OFFSET, bytes_lost);
        b.put_i64(offset + FIRST_OBSERVATION_OFFSET, now_ms);
        b.put_i64(offset + LAST_OBSERVATION_OFFSET, now_ms);
        b.put_i32(offset + SESSION_ID_OFFSET, session_id);
        b.put_i32(offset + STREAM_ID_OFFSET, stream_id);
        b.put_string(offset + CHANNEL_OFFSET, channel);
        b.put_string(offset + source_offset(channel.len()), source);
        // Publishes the entry: readers stop at the first count of 0.
        b.put_i64_ordered(offset + OBSERVATION_COUNT_OFFSET, observations.max(1));
        self.next_offset = offset + length;
        Some(EntryHandle(offset))
    }

    /// Records `count` further gaps of `bytes_lost` bytes in all at `now_ms`.
    pub fn record_observation(&self, entry: EntryHandle, count: i64, bytes_lost: i64, now_ms: i64) {
        let b = &self.buffer;
        b.put_i64_ordered(entry.0 + LAST_OBSERVATION_OFFSET, now_ms);
        b.get_and_add_i64(entry.0 + TOTAL_BYTES_LOST_OFFSET, bytes_lost);
        b.get_and_add_i64(entry.0 + OBSERVATION_COUNT_OFFSET, count);
    }
}

/// Offset after the last published entry.
fn entries_end(buffer: &AtomicBuffer) -> usize {
    let mut offset = 0;
    while let Ok(Some((_, next))) = read_entry(buffer, offset) {
        offset = next;
    }
    offset
}

/// The entry at `offset` and the offset after it; `None` at the end.
fn read_entry(buffer: &AtomicBuffer, offset: usize) -> Result<Option<(LossEntry, usize)>, String> {
    let capacity = buffer.capacity();
    if offset + CHANNEL_OFFSET + 8 > capacity {
        return Ok(None);
    }
    let count = buffer.get_i64_volatile(offset + OBSERVATION_COUNT_OFFSET);
    if count == 0 {
        return Ok(None);
    }
    let corrupt = |what: &str| format!("loss report entry at offset {offset}: {what}");
    if count < 0 {
        return Err(corrupt(&format!("negative observation count {count}")));
    }
    let channel = buffer
        .get_string(offset + CHANNEL_OFFSET)
        .ok_or_else(|| corrupt("channel length runs past the end of the file"))?;
    let source_offset = offset + source_offset(channel.len());
    if source_offset + 4 > capacity {
        return Err(corrupt("source runs past the end of the file"));
    }
    let source = buffer
        .get_string(source_offset)
        .ok_or_else(|| corrupt("source length runs past the end of the file"))?;
    let entry = LossEntry {
        observation_count: count,
        total_bytes_lost: buffer.get_i64_volatile(offset + TOTAL_BYTES_LOST_OFFSET),
        first_observation_ms: buffer.get_i64(offset + FIRST_OBSERVATION_OFFSET),
        last_observation_ms: buffer.get_i64_volatile(offset + LAST_OBSERVATION_OFFSET),
        session_id: buffer.get_i32(offset + SESSION_ID_OFFSET),
        stream_id: buffer.get_i32(offset + STREAM_ID_OFFSET),
        channel,
        source,
    };
    let next = align(source_offset + 4 + entry.source.len(), ENTRY_ALIGNMENT);
    Ok(Some((entry, next)))
}

/// Every entry of a loss report (for tools; works while the driver writes).
/// A malformed entry is an error naming its offset.
pub fn read_loss_report(buffer: &AtomicBuffer) -> Result<Vec<LossEntry>, String> {
    let mut entries = Vec::new();
    let mut offset = 0;
    while let Some((entry, next)) = read_entry(buffer, offset)? {
        entries.push(entry);
        offset = next;
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(mem: &mut Vec<u64>) -> AtomicBuffer {
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr() as *mut u8, mem.len() * 8) };
        AtomicBuffer::wrap(bytes)
    }

    #[test]
    fn should_create_entries_record_observations_and_read_them_back() {
        let mut mem = vec![0u64; 64];
        let b = buffer(&mut mem);
        let mut report = LossReport::new(b);
        let a = report
            .create_entry(
                1,
                1408,
                1000,
                7,
                10,
                "aeron:udp?endpoint=127.0.0.1:40123",
                "127.0.0.1:5555",
            )
            .unwrap();
        let c = report
            .create_entry(1, 64, 1500, -3, 11, "aeron:udp?endpoint=h:1", "10.0.0.1:1")
            .unwrap();
        report.record_observation(a, 2, 2816, 2000);

        let entries = read_loss_report(&b).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[0],
            LossEntry {
                observation_count: 3,
                total_bytes_lost: 4224,
                first_observation_ms: 1000,
                last_observation_ms: 2000,
                session_id: 7,
                stream_id: 10,
                channel: "aeron:udp?endpoint=127.0.0.1:40123".into(),
                source: "127.0.0.1:5555".into(),
            }
        );
        assert_eq!(
            (
                entries[1].observation_count,
                entries[1].session_id,
                entries[1].source.as_str()
            ),
            (1, -3, "10.0.0.1:1")
        );
        assert_ne!(a, c);
        // Entries are 64-byte aligned: a reopened writer appends after them.
        let again = LossReport::new(b);
        assert_eq!(again.next_offset % ENTRY_ALIGNMENT, 0);
        assert_eq!(again.next_offset, report.next_offset);
    }

    #[test]
    fn should_place_the_source_where_aerons_loss_stat_reads_it() {
        let mut mem = vec![0u64; 32];
        let b = buffer(&mut mem);
        let mut report = LossReport::new(b);
        // 34 characters: not a multiple of 4, so the source is after 2 bytes of padding.
        let channel = "aeron:udp?endpoint=127.0.0.1:40123";
        report
            .create_entry(1, 64, 1, 1, 1, channel, "127.0.0.1:5555")
            .unwrap();
        assert_eq!(b.get_i32(CHANNEL_OFFSET), 34);
        assert_eq!(
            b.get_i32(CHANNEL_OFFSET + 40),
            14,
            "source length at 40 + align(4 + 34, 4)"
        );
        assert_eq!(
            b.get_string(CHANNEL_OFFSET + 40).as_deref(),
            Some("127.0.0.1:5555")
        );
    }

    #[test]
    fn should_refuse_an_entry_that_does_not_fit() {
        let mut mem = vec![0u64; 16]; // 128 bytes: one 128-byte entry at most
        let b = buffer(&mut mem);
        let mut report = LossReport::new(b);
        assert!(report
            .create_entry(1, 1, 1, 1, 1, "aeron:udp?endpoint=a:1", "b:2")
            .is_some());
        assert!(report.create_entry(1, 1, 1, 1, 1, "c", "d").is_none());
        assert_eq!(read_loss_report(&b).unwrap().len(), 1);
    }

    #[test]
    fn should_report_a_corrupt_entry_with_its_offset() {
        let mut mem = vec![0u64; 32];
        let b = buffer(&mut mem);
        let mut report = LossReport::new(b);
        report.create_entry(1, 1, 1, 1, 1, "x", "y").unwrap();
        b.put_i32(64 + CHANNEL_OFFSET, 1 << 20);
        b.put_i64(64, 1);
        let err = read_loss_report(&b).unwrap_err();
        assert!(
            err.contains("offset 64") && err.contains("channel"),
            "{err}"
        );
        b.put_i64(64, -5);
        assert!(read_loss_report(&b).unwrap_err().contains("negative"));
    }
}
