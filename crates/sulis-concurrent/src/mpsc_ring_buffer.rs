//! Many-producer, single-consumer ring buffer with Agrona's `ManyToOneRingBuffer` layout.
//!
//! This is the to-driver command channel of the CnC file (docs/protocol.md §4.2):
//! clients in any number of threads and processes write commands, the driver's
//! conductor is the only reader.
//!
//! ```text
//! 0                                         capacity                capacity + 768
//! | records ...                              | trailer                          |
//!
//! trailer (each field on its own pair of cache lines):
//!   capacity + 128  tail position        i64  (producers, CAS)
//!   capacity + 256  head cache position  i64  (producers' cached copy of head)
//!   capacity + 384  head position        i64  (consumer, store-release)
//!   capacity + 512  correlation counter  i64  (get-and-add, ids for the whole system)
//!   capacity + 640  consumer heartbeat   i64  (epoch ms, driver liveness)
//!
//! record (8-byte aligned):
//!   +0 i32 length (header + body); negative while claimed, positive once committed
//!   +4 i32 message type id (> 0; -1 = padding)
//!   +8 body
//! ```
//!
//! Positions are ever-increasing byte counts; the index in the data area is
//! `position & (capacity - 1)`.  A producer reserves space with a CAS on the tail,
//! publishes `-length` (release), writes type and body, then publishes `+length`
//! (release).  The consumer reads committed records from the head, zeroes what it
//! consumed (so a later claim always starts from zeroed memory) and store-releases
//! the new head.

use std::sync::atomic::{fence, Ordering};

use crate::atomic_buffer::{align, AtomicBuffer};

/// Bytes after the data area holding the positions and counters.
pub const TRAILER_LENGTH: usize = 768;
/// Offset of the tail position from the end of the data area.
pub const TAIL_POSITION_OFFSET: usize = 128;
/// Offset of the producers' cached head position from the end of the data area.
pub const HEAD_CACHE_POSITION_OFFSET: usize = 256;
/// Offset of the head position from the end of the data area.
pub const HEAD_POSITION_OFFSET: usize = 384;
/// Offset of the correlation id counter from the end of the data area.
pub const CORRELATION_COUNTER_OFFSET: usize = 512;
/// Offset of the consumer heartbeat (epoch ms) from the end of the data area.
pub const CONSUMER_HEARTBEAT_OFFSET: usize = 640;

/// Length of the record header: i32 length + i32 message type id.
pub const RECORD_HEADER_LENGTH: usize = 8;
/// Records start on multiples of this.
pub const RECORD_ALIGNMENT: usize = 8;
/// Message type id of a padding record (skipped by the consumer).
pub const PADDING_MSG_TYPE_ID: i32 = -1;

/// Smallest data capacity accepted: below it a maximal record could be larger
/// than half the buffer and never find room on either side of the wrap point.
pub const MIN_CAPACITY: usize = 32;

#[inline(always)]
fn length_offset(record_index: usize) -> usize {
    record_index
}

#[inline(always)]
fn type_offset(record_index: usize) -> usize {
    record_index + 4
}

#[inline(always)]
fn body_offset(record_index: usize) -> usize {
    record_index + RECORD_HEADER_LENGTH
}

/// Checks that `buffer` is a power-of-two data area followed by `trailer` bytes
/// and returns the data capacity.  Shared with the broadcast buffer.
pub(crate) fn check_buffer(
    buffer: &AtomicBuffer,
    trailer: usize,
    what: &str,
) -> Result<usize, String> {
    let total = buffer.capacity();
    let capacity = total.checked_sub(trailer).ok_or_else(|| {
        format!("{what}: buffer of {total} bytes is smaller than the {trailer}-byte trailer")
    })?;
    if !capacity.is_power_of_two() || !(MIN_CAPACITY..=(1 << 30)).contains(&capacity) {
        return Err(format!(
            "{what}: capacity must be a power of 2 in [{MIN_CAPACITY}, 2^30] + TRAILER_LENGTH ({trailer}): capacity={capacity}"
        ));
    }
    if buffer.as_ptr() as usize & (RECORD_ALIGNMENT - 1) != 0 {
        return Err(format!(
            "{what}: buffer address must be {RECORD_ALIGNMENT}-byte aligned"
        ));
    }
    Ok(capacity)
}

/// A view over a many-to-one ring buffer in (possibly shared) memory.
///
/// Cheap to copy; any number of copies may write concurrently from any thread or
/// process, but only one thread in the whole system may call the consumer
/// methods ([`read`](Self::read), [`unblock`](Self::unblock)).
#[derive(Clone, Copy, Debug)]
pub struct ManyToOneRingBuffer {
    buffer: AtomicBuffer,
    capacity: usize,
    max_msg_length: usize,
    tail_position_index: usize,
    head_cache_position_index: usize,
    head_position_index: usize,
    correlation_counter_index: usize,
    consumer_heartbeat_index: usize,
}

impl ManyToOneRingBuffer {
    /// Wraps `buffer`, which must be a power-of-two data area plus [`TRAILER_LENGTH`]
    /// bytes, 8-byte aligned.  The memory is used as is (a fresh buffer is all zero).
    pub fn new(buffer: AtomicBuffer) -> Result<Self, String> {
        let capacity = check_buffer(&buffer, TRAILER_LENGTH, "many-to-one ring buffer")?;
        Ok(ManyToOneRingBuffer {
            buffer,
            capacity,
            max_msg_length: capacity / 8,
            tail_position_index: capacity + TAIL_POSITION_OFFSET,
            head_cache_position_index: capacity + HEAD_CACHE_POSITION_OFFSET,
            head_position_index: capacity + HEAD_POSITION_OFFSET,
            correlation_counter_index: capacity + CORRELATION_COUNTER_OFFSET,
            consumer_heartbeat_index: capacity + CONSUMER_HEARTBEAT_OFFSET,
        })
    }

    /// Size of the data area in bytes (excluding the trailer).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Largest message body accepted: capacity / 8.
    #[inline]
    pub fn max_msg_length(&self) -> usize {
        self.max_msg_length
    }

    /// The underlying view (data area and trailer).
    #[inline]
    pub fn buffer(&self) -> AtomicBuffer {
        self.buffer
    }

    fn check_type_id(msg_type_id: i32) -> Result<(), String> {
        if msg_type_id < 1 {
            return Err(format!(
                "message type id must be greater than zero, msgTypeId={msg_type_id}"
            ));
        }
        Ok(())
    }

    fn check_msg_length(&self, length: usize) -> Result<(), String> {
        if length > self.max_msg_length {
            return Err(format!(
                "encoded message exceeds maxMsgLength of {}, length={length}",
                self.max_msg_length
            ));
        }
        Ok(())
    }

    /// Copies one message in.  `Ok(false)` when there is not enough free space
    /// right now (the caller retries or reports back pressure); `Err` for a type
    /// id below 1 or a body longer than [`max_msg_length`](Self::max_msg_length).
    pub fn write(&self, msg_type_id: i32, src: &[u8]) -> Result<bool, String> {
        Self::check_type_id(msg_type_id)?;
        self.check_msg_length(src.len())?;

        let record_length = src.len() + RECORD_HEADER_LENGTH;
        let record_index = match self.claim_capacity(align(record_length, RECORD_ALIGNMENT)) {
            Some(index) => index,
            None => return Ok(false),
        };

        let buffer = &self.buffer;
        buffer.put_i32_ordered(length_offset(record_index), -(record_length as i32));
        // Keep the claim marker ahead of the body in store order (see `unblock`).
        fence(Ordering::Release);
        buffer.put_bytes(body_offset(record_index), src);
        buffer.put_i32(type_offset(record_index), msg_type_id);
        buffer.put_i32_ordered(length_offset(record_index), record_length as i32);
        Ok(true)
    }

    /// Reserves room for a `length`-byte message to be written in place.
    ///
    /// Returns the buffer index of the body (`Ok(None)` when full).  The caller
    /// fills `length` bytes at that index through [`buffer`](Self::buffer) and then
    /// must call exactly one of [`commit`](Self::commit) or [`abort`](Self::abort)
    /// with the same index, promptly: the consumer stops at a claimed record.
    pub fn try_claim(&self, msg_type_id: i32, length: usize) -> Result<Option<usize>, String> {
        Self::check_type_id(msg_type_id)?;
        self.check_msg_length(length)?;

        let record_length = length + RECORD_HEADER_LENGTH;
        let record_index = match self.claim_capacity(align(record_length, RECORD_ALIGNMENT)) {
            Some(index) => index,
            None => return Ok(None),
        };

        let buffer = &self.buffer;
        buffer.put_i32_ordered(length_offset(record_index), -(record_length as i32));
        fence(Ordering::Release);
        buffer.put_i32(type_offset(record_index), msg_type_id);
        Ok(Some(body_offset(record_index)))
    }

    /// Publishes a record reserved by [`try_claim`](Self::try_claim).
    ///
    /// # Panics
    /// If `index` is not a claimed body index, or the claim was already committed or aborted.
    pub fn commit(&self, index: usize) {
        let record_index = self.claimed_record_index(index);
        let length = self.verify_claimed_space_not_released(record_index);
        self.buffer
            .put_i32_ordered(length_offset(record_index), -length);
    }

    /// Turns a record reserved by [`try_claim`](Self::try_claim) into padding.
    ///
    /// # Panics
    /// As for [`commit`](Self::commit).
    pub fn abort(&self, index: usize) {
        let record_index = self.claimed_record_index(index);
        let length = self.verify_claimed_space_not_released(record_index);
        self.buffer
            .put_i32(type_offset(record_index), PADDING_MSG_TYPE_ID);
        self.buffer
            .put_i32_ordered(length_offset(record_index), -length);
    }

    fn claimed_record_index(&self, index: usize) -> usize {
        if index < RECORD_HEADER_LENGTH
            || index > self.capacity
            || index & (RECORD_ALIGNMENT - 1) != 0
        {
            panic!("invalid message index {index}");
        }
        index - RECORD_HEADER_LENGTH
    }

    fn verify_claimed_space_not_released(&self, record_index: usize) -> i32 {
        let length = self.buffer.get_i32(length_offset(record_index));
        if length < 0 {
            return length;
        }
        let how = if self.buffer.get_i32(type_offset(record_index)) == PADDING_MSG_TYPE_ID {
            "aborted"
        } else {
            "committed"
        };
        panic!("claimed space previously {how}");
    }

    /// Reserves `required` (aligned) bytes by advancing the tail; returns the record
    /// index, or `None` when the consumer has not freed enough space.
    ///
    /// If the record does not fit before the end of the data area, the rest of the
    /// area is claimed too, published as a padding record, and the record goes to 0.
    fn claim_capacity(&self, required: usize) -> Option<usize> {
        let buffer = &self.buffer;
        let capacity = self.capacity;
        let mask = capacity - 1;
        let required_i = required as i64;

        let mut head = buffer.get_i64_volatile(self.head_cache_position_index);
        loop {
            let tail = buffer.get_i64_volatile(self.tail_position_index);
            if required_i > capacity as i64 - (tail - head) {
                head = buffer.get_i64_volatile(self.head_position_index);
                if required_i > capacity as i64 - (tail - head) {
                    return None;
                }
                buffer.put_i64_ordered(self.head_cache_position_index, head);
            }

            let tail_index = (tail as usize) & mask;
            let to_buffer_end = capacity - tail_index;
            let mut padding = 0usize;
            if required > to_buffer_end {
                // Must wrap: the record goes to index 0, which needs `required`
                // bytes free before the head.
                let mut head_index = (head as usize) & mask;
                if required > head_index {
                    head = buffer.get_i64_volatile(self.head_position_index);
                    head_index = (head as usize) & mask;
                    if required > head_index {
                        return None;
                    }
                    buffer.put_i64_ordered(self.head_cache_position_index, head);
                }
                padding = to_buffer_end;
            }

            let new_tail = tail + (required + padding) as i64;
            if buffer.compare_and_set_i64(self.tail_position_index, tail, new_tail) {
                if padding != 0 {
                    buffer.put_i32_ordered(length_offset(tail_index), -(padding as i32));
                    fence(Ordering::Release);
                    buffer.put_i32(type_offset(tail_index), PADDING_MSG_TYPE_ID);
                    buffer.put_i32_ordered(length_offset(tail_index), padding as i32);
                    return Some(0);
                }
                return Some(tail_index);
            }
        }
    }

    /// Consumer: hands up to `limit` committed messages to `handler(type_id, body)`
    /// and returns how many were handled.
    ///
    /// Reads at most up to the end of the data area per call (one contiguous
    /// block).  Consumed bytes are zeroed and the head is store-released
    /// afterwards, also if `handler` panics (the message being handled then counts
    /// as consumed).  The body slice is only valid during the call.
    pub fn read<F: FnMut(i32, &[u8])>(&self, mut handler: F, limit: usize) -> usize {
        let buffer = &self.buffer;
        let head = buffer.get_i64(self.head_position_index);
        let capacity = self.capacity;
        let head_index = (head as usize) & (capacity - 1);
        let max_block_length = capacity - head_index;

        let mut guard = ConsumedBlock {
            ring: self,
            head,
            head_index,
            bytes_read: 0,
        };
        let mut messages_read = 0;
        while guard.bytes_read < max_block_length && messages_read < limit {
            let record_index = head_index + guard.bytes_read;
            let record_length = buffer.get_i32_volatile(length_offset(record_index));
            if record_length <= 0 {
                break;
            }
            let record_length = record_length as usize;
            let aligned_length = align(record_length, RECORD_ALIGNMENT);
            if record_length < RECORD_HEADER_LENGTH
                || aligned_length > max_block_length - guard.bytes_read
            {
                // Corrupt length (not something a well-behaved producer writes):
                // refuse to read past it rather than outside the data area.
                break;
            }
            guard.bytes_read += aligned_length;

            let msg_type_id = buffer.get_i32(type_offset(record_index));
            if msg_type_id == PADDING_MSG_TYPE_ID {
                continue;
            }
            messages_read += 1;
            handler(
                msg_type_id,
                buffer.slice(
                    body_offset(record_index),
                    record_length - RECORD_HEADER_LENGTH,
                ),
            );
        }
        messages_read
    }

    /// Consumer: frees a record that blocks consumption, and says whether it did.
    ///
    /// Meant for the driver after the head has not moved for the client liveness
    /// timeout (a client died mid-write).  Two cases are handled:
    /// * the record at the head is claimed but not committed (negative length):
    ///   it becomes a padding record of that length;
    /// * the head points at zeroed memory (a producer advanced the tail and died
    ///   before writing its length) followed by a record some other producer
    ///   wrote: the zeroed gap becomes a padding record.  If the producers have
    ///   already wrapped and the gap runs to the end of the data area, the gap up
    ///   to the end becomes padding.
    pub fn unblock(&self) -> bool {
        let buffer = &self.buffer;
        let head = buffer.get_i64_volatile(self.head_position_index);
        let tail = buffer.get_i64_volatile(self.tail_position_index);
        if head == tail {
            return false;
        }

        let capacity = self.capacity;
        let mask = capacity - 1;
        let consumer_index = (head as usize) & mask;
        let producer_index = (tail as usize) & mask;

        let length = buffer.get_i32_volatile(length_offset(consumer_index));
        if length < 0 {
            buffer.put_i32(type_offset(consumer_index), PADDING_MSG_TYPE_ID);
            buffer.put_i32_ordered(length_offset(consumer_index), -length);
            return true;
        }
        if length > 0 {
            return false;
        }

        // Zeroed gap: look for the next record start (lengths sit on 8-byte boundaries).
        let limit = if producer_index > consumer_index {
            producer_index
        } else {
            capacity
        };
        let mut i = consumer_index + RECORD_ALIGNMENT;
        while i < limit {
            if buffer.get_i32_volatile(length_offset(i)) != 0 {
                return self.pad_gap_if_still_zeroed(consumer_index, i);
            }
            i += RECORD_ALIGNMENT;
        }
        if limit == capacity {
            // The tail is already past the end of the data area, so everything from
            // the head to the end was claimed and nothing was ever written there.
            return self.pad_gap_if_still_zeroed(consumer_index, capacity);
        }
        false
    }

    /// Writes a padding record over `[from, to)` if every 8-byte slot in it still
    /// reads zero (a late producer may have written meanwhile).
    fn pad_gap_if_still_zeroed(&self, from: usize, to: usize) -> bool {
        let buffer = &self.buffer;
        let mut i = to;
        while i > from {
            i -= RECORD_ALIGNMENT;
            if buffer.get_i32_volatile(i) != 0 {
                return false;
            }
        }
        buffer.put_i32(type_offset(from), PADDING_MSG_TYPE_ID);
        buffer.put_i32_ordered(length_offset(from), (to - from) as i32);
        true
    }

    /// Next value of the system-wide correlation counter (client ids, correlation ids).
    #[inline]
    pub fn next_correlation_id(&self) -> i64 {
        self.buffer
            .get_and_add_i64(self.correlation_counter_index, 1)
    }

    /// Last heartbeat of the consumer (epoch ms); 0 if never set.
    #[inline]
    pub fn consumer_heartbeat_time(&self) -> i64 {
        self.buffer.get_i64_volatile(self.consumer_heartbeat_index)
    }

    /// Consumer: publishes its heartbeat (epoch ms).
    #[inline]
    pub fn set_consumer_heartbeat_time(&self, epoch_ms: i64) {
        self.buffer
            .put_i64_ordered(self.consumer_heartbeat_index, epoch_ms)
    }

    /// Total bytes claimed by producers so far (the tail position).
    #[inline]
    pub fn producer_position(&self) -> i64 {
        self.buffer.get_i64_volatile(self.tail_position_index)
    }

    /// Total bytes consumed so far (the head position).
    #[inline]
    pub fn consumer_position(&self) -> i64 {
        self.buffer.get_i64_volatile(self.head_position_index)
    }

    /// Bytes between head and tail (claimed, not yet consumed), from a consistent snapshot.
    pub fn size(&self) -> usize {
        let buffer = &self.buffer;
        let mut head_after = buffer.get_i64_volatile(self.head_position_index);
        let tail = loop {
            let head_before = head_after;
            let tail = buffer.get_i64_volatile(self.tail_position_index);
            head_after = buffer.get_i64_volatile(self.head_position_index);
            if head_after == head_before {
                break tail;
            }
        };
        (tail - head_after).clamp(0, self.capacity as i64) as usize
    }
}

/// Zeroes the bytes a `read` consumed and moves the head past them when dropped,
/// so the work is done even if the handler unwinds.
struct ConsumedBlock<'a> {
    ring: &'a ManyToOneRingBuffer,
    head: i64,
    head_index: usize,
    bytes_read: usize,
}

impl Drop for ConsumedBlock<'_> {
    fn drop(&mut self) {
        if self.bytes_read > 0 {
            let buffer = &self.ring.buffer;
            buffer.set_memory(self.head_index, self.bytes_read, 0);
            buffer.put_i64_ordered(
                self.ring.head_position_index,
                self.head + self.bytes_read as i64,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(len: usize) -> (Vec<u64>, AtomicBuffer) {
        let mut words = vec![0u64; len.div_ceil(8)];
        let buffer = unsafe { AtomicBuffer::new(words.as_mut_ptr() as *mut u8, len) };
        (words, buffer)
    }

    fn ring(capacity: usize) -> (Vec<u64>, ManyToOneRingBuffer) {
        let (words, buffer) = memory(capacity + TRAILER_LENGTH);
        (words, ManyToOneRingBuffer::new(buffer).unwrap())
    }

    /// Reads until a call neither handles a message nor moves the head.
    fn drain(rb: &ManyToOneRingBuffer) -> Vec<(i32, Vec<u8>)> {
        let mut out = Vec::new();
        loop {
            let before = rb.consumer_position();
            let n = rb.read(|t, body| out.push((t, body.to_vec())), usize::MAX);
            if n == 0 && rb.consumer_position() == before {
                return out;
            }
        }
    }

    #[test]
    fn should_refuse_bad_capacity() {
        let (_w, b) = memory(1000 + TRAILER_LENGTH);
        assert!(ManyToOneRingBuffer::new(b).is_err());
        let (_w, b) = memory(100);
        assert!(ManyToOneRingBuffer::new(b).is_err());
        let (_w, b) = memory(1024 + TRAILER_LENGTH);
        let rb = ManyToOneRingBuffer::new(b).unwrap();
        assert_eq!(rb.capacity(), 1024);
        assert_eq!(rb.max_msg_length(), 128);
    }

    #[test]
    fn should_write_and_read_a_message_with_agrona_layout() {
        let (_w, rb) = ring(1024);
        assert!(rb.write(7, b"hello").unwrap());
        let b = rb.buffer();
        assert_eq!(b.get_i32(0), 13);
        assert_eq!(b.get_i32(4), 7);
        assert_eq!(b.slice(8, 5), b"hello");
        assert_eq!(b.get_i64(1024 + TAIL_POSITION_OFFSET), 16);
        assert_eq!(rb.producer_position(), 16);
        assert_eq!(rb.size(), 16);

        let mut seen = Vec::new();
        assert_eq!(rb.read(|t, body| seen.push((t, body.to_vec())), 10), 1);
        assert_eq!(seen, vec![(7, b"hello".to_vec())]);
        assert_eq!(rb.consumer_position(), 16);
        assert_eq!(b.get_i64(1024 + HEAD_POSITION_OFFSET), 16);
        assert_eq!(b.slice(0, 16), &[0u8; 16]);
        assert_eq!(rb.size(), 0);
        assert_eq!(rb.read(|_, _| panic!("nothing to read"), 10), 0);
    }

    #[test]
    fn should_reject_bad_type_id_and_oversized_message() {
        let (_w, rb) = ring(1024);
        assert!(rb.write(0, b"x").is_err());
        assert!(rb.write(PADDING_MSG_TYPE_ID, b"x").is_err());
        assert!(rb.write(1, &[0u8; 129]).is_err());
        assert!(rb.write(1, &[0u8; 128]).unwrap());
        assert!(rb.try_claim(0, 4).is_err());
        assert!(rb.try_claim(1, 129).is_err());
    }

    #[test]
    fn should_respect_read_limit() {
        let (_w, rb) = ring(1024);
        for i in 0..5u8 {
            assert!(rb.write(1, &[i]).unwrap());
        }
        let mut seen = Vec::new();
        assert_eq!(rb.read(|_, b| seen.push(b[0]), 2), 2);
        assert_eq!(rb.read(|_, b| seen.push(b[0]), 10), 3);
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn should_report_full_buffer() {
        let (_w, rb) = ring(1024);
        // 128-byte body -> 136-byte record; 7 fit in 1024 (952 bytes), the 8th does not.
        for _ in 0..7 {
            assert!(rb.write(1, &[1u8; 128]).unwrap());
        }
        assert!(!rb.write(1, &[1u8; 128]).unwrap());
        assert_eq!(rb.try_claim(1, 128).unwrap(), None);
        assert!(rb.write(1, &[1u8; 64]).unwrap()); // 72 bytes still fit
        assert_eq!(rb.read(|_, _| {}, 1), 1);
        assert!(rb.write(1, &[1u8; 128]).unwrap());
    }

    #[test]
    fn should_wrap_with_padding_record() {
        let (_w, rb) = ring(1024);
        let b = rb.buffer();
        // Fill 992 bytes: 31 records of 32 bytes (24-byte bodies).
        for i in 0..31u8 {
            assert!(rb.write(2, &[i; 24]).unwrap());
        }
        assert_eq!(rb.read(|_, _| {}, usize::MAX), 31);
        // 32 bytes left before the end; a 40-byte record must wrap.
        assert!(rb.write(3, &[9u8; 32]).unwrap());
        assert_eq!(b.get_i32(992), 32);
        assert_eq!(b.get_i32(996), PADDING_MSG_TYPE_ID);
        assert_eq!(b.get_i32(0), 40);
        assert_eq!(b.get_i32(4), 3);
        assert_eq!(rb.producer_position(), 1024 + 40);

        let mut seen = Vec::new();
        // The first read consumes the padding up to the end of the block.
        assert_eq!(rb.read(|t, body| seen.push((t, body.to_vec())), 10), 0);
        assert_eq!(rb.consumer_position(), 1024);
        assert_eq!(rb.read(|t, body| seen.push((t, body.to_vec())), 10), 1);
        assert_eq!(seen, vec![(3, vec![9u8; 32])]);
        assert_eq!(rb.consumer_position(), 1064);
        assert_eq!(b.slice(992, 32), &[0u8; 32]);
    }

    #[test]
    fn should_not_wrap_over_unconsumed_records() {
        let (_w, rb) = ring(1024);
        for i in 0..31u8 {
            assert!(rb.write(2, &[i; 24]).unwrap());
        }
        // Head still at 0: wrapping needs 40 bytes before index 0 — none.
        assert!(!rb.write(3, &[9u8; 32]).unwrap());
        // Consume only the first record (32 bytes): still not enough room before head.
        assert_eq!(rb.read(|_, _| {}, 1), 1);
        assert!(!rb.write(3, &[9u8; 32]).unwrap());
        assert_eq!(rb.read(|_, _| {}, 1), 1);
        assert!(rb.write(3, &[9u8; 32]).unwrap());
        let got = drain(&rb);
        assert_eq!(got.len(), 30);
        assert_eq!(got[29], (3, vec![9u8; 32]));
    }

    #[test]
    fn should_claim_commit_and_abort() {
        let (_w, rb) = ring(1024);
        let b = rb.buffer();
        let i1 = rb.try_claim(5, 4).unwrap().unwrap();
        assert_eq!(i1, 8);
        assert_eq!(b.get_i32(0), -12);
        b.put_bytes(i1, b"abcd");
        let i2 = rb.try_claim(6, 3).unwrap().unwrap();
        assert_eq!(i2, 24);
        b.put_bytes(i2, b"xyz");

        // Nothing is visible while the first record is claimed.
        assert_eq!(rb.read(|_, _| panic!("claimed record read"), 10), 0);
        rb.commit(i1);
        rb.abort(i2);
        assert!(rb.write(7, b"!").unwrap());

        let got = drain(&rb);
        assert_eq!(got, vec![(5, b"abcd".to_vec()), (7, b"!".to_vec())]);
    }

    #[test]
    #[should_panic(expected = "claimed space previously committed")]
    fn should_refuse_double_commit() {
        let (_w, rb) = ring(1024);
        let i = rb.try_claim(5, 4).unwrap().unwrap();
        rb.commit(i);
        rb.commit(i);
    }

    #[test]
    fn should_count_correlation_ids_and_heartbeat() {
        let (_w, rb) = ring(1024);
        assert_eq!(rb.next_correlation_id(), 0);
        assert_eq!(rb.next_correlation_id(), 1);
        assert_eq!(rb.buffer().get_i64(1024 + CORRELATION_COUNTER_OFFSET), 2);
        assert_eq!(rb.consumer_heartbeat_time(), 0);
        rb.set_consumer_heartbeat_time(1234);
        assert_eq!(rb.consumer_heartbeat_time(), 1234);
        assert_eq!(rb.buffer().get_i64(1024 + CONSUMER_HEARTBEAT_OFFSET), 1234);
    }

    #[test]
    fn should_unblock_abandoned_claim() {
        let (_w, rb) = ring(1024);
        assert!(!rb.unblock());
        let _abandoned = rb.try_claim(5, 20).unwrap().unwrap();
        assert!(rb.write(6, b"after").unwrap());
        assert_eq!(rb.read(|_, _| {}, 10), 0);

        assert!(rb.unblock());
        let got = drain(&rb);
        assert_eq!(got, vec![(6, b"after".to_vec())]);
        assert_eq!(rb.size(), 0);
        assert!(!rb.unblock());
    }

    #[test]
    fn should_unblock_zeroed_gap_left_by_dead_producer() {
        let (_w, rb) = ring(1024);
        let b = rb.buffer();
        // A producer advanced the tail by 32 bytes and died before writing anything.
        assert!(b.compare_and_set_i64(1024 + TAIL_POSITION_OFFSET, 0, 32));
        assert!(rb.write(6, b"after").unwrap());
        assert_eq!(b.get_i32(32), 13);
        assert_eq!(rb.read(|_, _| {}, 10), 0);

        assert!(rb.unblock());
        assert_eq!(b.get_i32(0), 32);
        assert_eq!(b.get_i32(4), PADDING_MSG_TYPE_ID);
        assert_eq!(drain(&rb), vec![(6, b"after".to_vec())]);

        // A gap at the tail with nothing after it is left alone.
        assert!(b.compare_and_set_i64(1024 + TAIL_POSITION_OFFSET, 48, 80));
        assert!(!rb.unblock());
    }

    #[test]
    fn should_unblock_abandoned_wrap_padding() {
        let (_w, rb) = ring(1024);
        let b = rb.buffer();
        for i in 0..31u8 {
            assert!(rb.write(2, &[i; 24]).unwrap());
        }
        assert_eq!(rb.read(|_, _| {}, usize::MAX), 31);
        // A producer claimed the 32 bytes to the end plus 40 at 0, then died.
        assert!(b.compare_and_set_i64(1024 + TAIL_POSITION_OFFSET, 992, 1024 + 40));
        assert!(rb.write(6, b"next").unwrap());
        assert_eq!(rb.read(|_, _| {}, 10), 0);

        assert!(rb.unblock()); // gap to the end of the data area
        assert_eq!(rb.read(|_, _| {}, 10), 0);
        assert_eq!(rb.consumer_position(), 1024);
        assert!(rb.unblock()); // gap at 0
        assert_eq!(drain(&rb), vec![(6, b"next".to_vec())]);
    }

    #[test]
    fn should_advance_head_when_handler_panics() {
        let (_w, rb) = ring(1024);
        assert!(rb.write(1, b"a").unwrap());
        assert!(rb.write(1, b"b").unwrap());
        let r = std::panic::catch_unwind(|| rb.read(|_, _| panic!("handler failed"), 10));
        assert!(r.is_err());
        assert_eq!(rb.consumer_position(), 16);
        assert_eq!(drain(&rb), vec![(1, b"b".to_vec())]);
    }

    #[test]
    fn should_pass_messages_from_concurrent_producers_without_loss_or_tearing() {
        const THREADS: u32 = 4;
        const MESSAGES: u64 = 100_000;
        let (_w, rb) = ring(64 * 1024);

        std::thread::scope(|s| {
            for tid in 0..THREADS {
                s.spawn(move || {
                    let mut msg = [0u8; 64];
                    for seq in 0..MESSAGES {
                        let filler = (seq % 41) as usize;
                        msg[0..4].copy_from_slice(&tid.to_le_bytes());
                        msg[4..12].copy_from_slice(&seq.to_le_bytes());
                        for (k, byte) in msg[12..12 + filler].iter_mut().enumerate() {
                            *byte = (seq as u8).wrapping_add(k as u8);
                        }
                        let body = &msg[..12 + filler];
                        if seq % 2 == 0 {
                            while !rb.write(100 + tid as i32, body).unwrap() {
                                std::thread::yield_now();
                            }
                        } else {
                            let index = loop {
                                match rb.try_claim(100 + tid as i32, body.len()).unwrap() {
                                    Some(index) => break index,
                                    None => std::thread::yield_now(),
                                }
                            };
                            rb.buffer().put_bytes(index, body);
                            rb.commit(index);
                        }
                    }
                });
            }

            let mut next = [0u64; THREADS as usize];
            let mut total = 0u64;
            while total < THREADS as u64 * MESSAGES {
                let n = rb.read(
                    |type_id, body| {
                        let tid = u32::from_le_bytes(body[0..4].try_into().unwrap());
                        let seq = u64::from_le_bytes(body[4..12].try_into().unwrap());
                        assert_eq!(type_id, 100 + tid as i32);
                        assert_eq!(seq, next[tid as usize], "thread {tid} out of order");
                        assert_eq!(body.len(), 12 + (seq % 41) as usize);
                        for (k, byte) in body[12..].iter().enumerate() {
                            assert_eq!(*byte, (seq as u8).wrapping_add(k as u8), "torn message");
                        }
                        next[tid as usize] += 1;
                    },
                    64,
                );
                total += n as u64;
                if n == 0 {
                    std::thread::yield_now();
                }
            }
            assert!(next.iter().all(|&n| n == MESSAGES));
        });
        assert_eq!(rb.size(), 0);
    }
}
