//! One-to-many broadcast buffer with Agrona's `BroadcastTransmitter` /
//! `BroadcastReceiver` / `CopyBroadcastReceiver` layout.
//!
//! This is the to-clients channel of the CnC file (docs/protocol.md §4.3): the
//! driver transmits, every client receives everything and filters.  The
//! transmitter never waits for receivers; a receiver that falls more than the
//! capacity behind is *lapped* and learns it from the tail-intent counter.
//!
//! ```text
//! 0                                    capacity              capacity + 128
//! | records ...                         | trailer                        |
//!
//! trailer:
//!   capacity + 0   tail intent  i64  (position the transmitter is about to reach)
//!   capacity + 8   tail         i64  (position after the last complete record)
//!   capacity + 16  latest       i64  (position of the last complete record)
//!
//! record (8-byte aligned):  +0 i32 length (header + body), +4 i32 type id (-1 = padding), +8 body
//! ```

use std::sync::atomic::{fence, Ordering};

use crate::atomic_buffer::{align, AtomicBuffer};
use crate::mpsc_ring_buffer::check_buffer;

/// Bytes after the data area holding the counters.
pub const TRAILER_LENGTH: usize = 128;
/// Offset of the tail-intent counter from the end of the data area.
pub const TAIL_INTENT_COUNTER_OFFSET: usize = 0;
/// Offset of the tail counter from the end of the data area.
pub const TAIL_COUNTER_OFFSET: usize = 8;
/// Offset of the latest-record counter from the end of the data area.
pub const LATEST_COUNTER_OFFSET: usize = 16;

/// Length of the record header: i32 length + i32 type id.
pub const RECORD_HEADER_LENGTH: usize = 8;
/// Records start on multiples of this.
pub const RECORD_ALIGNMENT: usize = 8;
/// Type id of a padding record (skipped by receivers).
pub const PADDING_MSG_TYPE_ID: i32 = -1;

/// Error text of a receiver that fell more than the capacity behind.
pub const LAPPED_ERROR: &str = "lapped by transmitter";

/// The single writer of a broadcast buffer.
#[derive(Debug)]
pub struct BroadcastTransmitter {
    buffer: AtomicBuffer,
    capacity: usize,
    max_msg_length: usize,
    tail_intent_index: usize,
    tail_index: usize,
    latest_index: usize,
}

impl BroadcastTransmitter {
    /// Wraps `buffer`: a power-of-two data area plus [`TRAILER_LENGTH`] bytes, 8-byte aligned.
    pub fn new(buffer: AtomicBuffer) -> Result<Self, String> {
        let capacity = check_buffer(&buffer, TRAILER_LENGTH, "broadcast buffer")?;
        Ok(BroadcastTransmitter {
            buffer,
            capacity,
            max_msg_length: capacity / 8,
            tail_intent_index: capacity + TAIL_INTENT_COUNTER_OFFSET,
            tail_index: capacity + TAIL_COUNTER_OFFSET,
            latest_index: capacity + LATEST_COUNTER_OFFSET,
        })
    }

    /// Size of the data area in bytes.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Largest message body accepted: capacity / 8.
    #[inline]
    pub fn max_msg_length(&self) -> usize {
        self.max_msg_length
    }

    /// Appends one message; never blocks.  `Err` for a type id below 1 or a body
    /// longer than [`max_msg_length`](Self::max_msg_length).
    pub fn transmit(&mut self, msg_type_id: i32, src: &[u8]) -> Result<(), String> {
        if msg_type_id < 1 {
            return Err(format!(
                "type id must be greater than zero, msgTypeId={msg_type_id}"
            ));
        }
        if src.len() > self.max_msg_length {
            return Err(format!(
                "encoded message exceeds maxMsgLength of {}, length={}",
                self.max_msg_length,
                src.len()
            ));
        }

        let buffer = &self.buffer;
        let capacity = self.capacity;
        let mut current_tail = buffer.get_i64(self.tail_index);
        let mut record_offset = (current_tail as usize) & (capacity - 1);
        let record_length = RECORD_HEADER_LENGTH + src.len();
        let aligned_length = align(record_length, RECORD_ALIGNMENT);
        let new_tail = current_tail + aligned_length as i64;
        let to_end = capacity - record_offset;

        if to_end < aligned_length {
            self.signal_tail_intent(new_tail + to_end as i64);
            buffer.put_i32(record_offset, to_end as i32);
            buffer.put_i32(record_offset + 4, PADDING_MSG_TYPE_ID);
            current_tail += to_end as i64;
            record_offset = 0;
        } else {
            self.signal_tail_intent(new_tail);
        }

        buffer.put_i32(record_offset, record_length as i32);
        buffer.put_i32(record_offset + 4, msg_type_id);
        buffer.put_bytes(record_offset + RECORD_HEADER_LENGTH, src);

        buffer.put_i64_ordered(self.latest_index, current_tail);
        buffer.put_i64_ordered(self.tail_index, current_tail + aligned_length as i64);
        Ok(())
    }

    /// Announces the tail about to be reached before any byte below it is overwritten.
    fn signal_tail_intent(&self, new_tail: i64) {
        self.buffer
            .put_i64_ordered(self.tail_intent_index, new_tail);
        // The record writes that follow must not become visible before the intent.
        fence(Ordering::Release);
    }
}

/// A receiver's cursor over a broadcast buffer.  Each receiver keeps its own.
///
/// The record it points at may be overwritten at any moment by a transmitter
/// that laps it: read what you need, then call [`validate`](Self::validate).
#[derive(Debug)]
pub struct BroadcastReceiver {
    buffer: AtomicBuffer,
    capacity: usize,
    tail_intent_index: usize,
    tail_index: usize,
    latest_index: usize,
    record_offset: usize,
    /// Length (header + body) of the current record, kept within the data area.
    record_length: usize,
    cursor: i64,
    next_record: i64,
    lapped_count: u64,
}

impl BroadcastReceiver {
    /// Wraps `buffer` and starts at the latest record transmitted (like Agrona):
    /// the first [`receive_next`](Self::receive_next) returns that record if there is one.
    pub fn new(buffer: AtomicBuffer) -> Result<Self, String> {
        let capacity = check_buffer(&buffer, TRAILER_LENGTH, "broadcast buffer")?;
        let latest_index = capacity + LATEST_COUNTER_OFFSET;
        let cursor = buffer.get_i64_volatile(latest_index);
        Ok(BroadcastReceiver {
            buffer,
            capacity,
            tail_intent_index: capacity + TAIL_INTENT_COUNTER_OFFSET,
            tail_index: capacity + TAIL_COUNTER_OFFSET,
            latest_index,
            record_offset: (cursor as usize) & (capacity - 1),
            record_length: RECORD_HEADER_LENGTH,
            cursor,
            next_record: cursor,
            lapped_count: 0,
        })
    }

    /// Size of the data area in bytes.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many times this receiver was lapped and skipped to the latest record.
    #[inline]
    pub fn lapped_count(&self) -> u64 {
        self.lapped_count
    }

    /// Moves to the next record; false if there is none yet.
    ///
    /// If the transmitter has lapped the cursor, the receiver jumps to the latest
    /// record and [`lapped_count`](Self::lapped_count) goes up.
    pub fn receive_next(&mut self) -> bool {
        let buffer = &self.buffer;
        let tail = buffer.get_i64_volatile(self.tail_index);
        let mut cursor = self.next_record;
        if tail <= cursor {
            return false;
        }

        let mask = self.capacity - 1;
        if !self.is_valid(cursor) {
            self.lapped_count += 1;
            cursor = buffer.get_i64_volatile(self.latest_index);
        }
        let mut record_offset = (cursor as usize) & mask;

        self.cursor = cursor;
        let mut record_length = self.record_length_at(record_offset);
        self.next_record = cursor + align(record_length, RECORD_ALIGNMENT) as i64;

        if buffer.get_i32(record_offset + 4) == PADDING_MSG_TYPE_ID {
            record_offset = 0;
            self.cursor = self.next_record;
            record_length = self.record_length_at(0);
            self.next_record += align(record_length, RECORD_ALIGNMENT) as i64;
        }

        self.record_offset = record_offset;
        self.record_length = record_length;
        true
    }

    /// The length field at `record_offset`, forced into a range that keeps the
    /// record inside the data area: a record being overwritten by a transmitter
    /// that lapped us can hold anything, and [`validate`](Self::validate) reports it.
    fn record_length_at(&self, record_offset: usize) -> usize {
        let length = self.buffer.get_i32(record_offset);
        let max = self.capacity - record_offset;
        if length < RECORD_HEADER_LENGTH as i32 {
            RECORD_HEADER_LENGTH
        } else {
            (length as usize).min(max)
        }
    }

    /// Type id of the current record.
    #[inline]
    pub fn type_id(&self) -> i32 {
        self.buffer.get_i32(self.record_offset + 4)
    }

    /// Buffer index of the current record's body.
    #[inline]
    pub fn offset(&self) -> usize {
        self.record_offset + RECORD_HEADER_LENGTH
    }

    /// Body length of the current record.
    #[inline]
    pub fn length(&self) -> usize {
        self.record_length - RECORD_HEADER_LENGTH
    }

    /// Body of the current record, straight from the shared buffer: check
    /// [`validate`](Self::validate) after using it.
    #[inline]
    pub fn body(&self) -> &[u8] {
        self.buffer.slice(self.offset(), self.length())
    }

    /// The underlying view (data area and trailer).
    #[inline]
    pub fn buffer(&self) -> AtomicBuffer {
        self.buffer
    }

    /// True if the current record has not been overwritten (so far): call after
    /// reading it.
    pub fn validate(&self) -> bool {
        // Reads of the record must complete before the tail intent is checked.
        fence(Ordering::Acquire);
        self.is_valid(self.cursor)
    }

    #[inline]
    fn is_valid(&self, cursor: i64) -> bool {
        cursor + self.capacity as i64 > self.buffer.get_i64_volatile(self.tail_intent_index)
    }
}

/// A receiver that copies each message out before handing it over, so handlers
/// see a stable copy and overwritten messages are detected.
#[derive(Debug)]
pub struct CopyBroadcastReceiver {
    receiver: BroadcastReceiver,
    scratch: Vec<u8>,
}

impl CopyBroadcastReceiver {
    /// Wraps `receiver` and skips everything transmitted so far (a new client only
    /// cares about what comes after it connects), like Agrona.
    pub fn new(mut receiver: BroadcastReceiver) -> Self {
        while receiver.receive_next() {}
        let scratch = Vec::with_capacity(receiver.capacity() / 8);
        CopyBroadcastReceiver { receiver, scratch }
    }

    /// Hands at most one message to `handler(type_id, body)`; returns how many (0 or 1).
    ///
    /// `Err(`[`LAPPED_ERROR`]`)` when the transmitter overwrote messages this
    /// receiver had not read yet (it fell more than the capacity behind): messages
    /// were lost and the caller must treat the connection as broken.
    pub fn receive<F: FnMut(i32, &[u8])>(&mut self, mut handler: F) -> Result<usize, String> {
        let receiver = &mut self.receiver;
        let lapped_before = receiver.lapped_count();
        if !receiver.receive_next() {
            return Ok(0);
        }
        if receiver.lapped_count() != lapped_before {
            return Err(LAPPED_ERROR.to_string());
        }

        let msg_type_id = receiver.type_id();
        let length = receiver.length();
        self.scratch.resize(length, 0);
        receiver
            .buffer()
            .get_bytes(receiver.offset(), &mut self.scratch);
        if !receiver.validate() {
            return Err(LAPPED_ERROR.to_string());
        }
        handler(msg_type_id, &self.scratch);
        Ok(1)
    }

    /// Hands up to `limit` messages to `handler`, stopping early when none is
    /// available; returns how many.  Errors as for [`receive`](Self::receive).
    pub fn receive_many<F: FnMut(i32, &[u8])>(
        &mut self,
        mut handler: F,
        limit: usize,
    ) -> Result<usize, String> {
        let mut count = 0;
        while count < limit {
            if self.receive(&mut handler)? == 0 {
                break;
            }
            count += 1;
        }
        Ok(count)
    }

    /// How many times the underlying receiver was lapped.
    pub fn lapped_count(&self) -> u64 {
        self.receiver.lapped_count()
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

    fn collect(rx: &mut CopyBroadcastReceiver) -> Result<Vec<(i32, Vec<u8>)>, String> {
        let mut out = Vec::new();
        rx.receive_many(|t, b| out.push((t, b.to_vec())), usize::MAX)?;
        Ok(out)
    }

    #[test]
    fn should_refuse_bad_capacity() {
        let (_w, b) = memory(1000 + TRAILER_LENGTH);
        assert!(BroadcastTransmitter::new(b).is_err());
        assert!(BroadcastReceiver::new(b).is_err());
    }

    #[test]
    fn should_transmit_and_receive_with_agrona_layout() {
        let (_w, b) = memory(1024 + TRAILER_LENGTH);
        let mut tx = BroadcastTransmitter::new(b).unwrap();
        let mut rx = BroadcastReceiver::new(b).unwrap();
        assert_eq!(tx.capacity(), 1024);
        assert_eq!(tx.max_msg_length(), 128);
        assert!(!rx.receive_next());

        tx.transmit(5, b"hello").unwrap();
        assert_eq!(b.get_i32(0), 13);
        assert_eq!(b.get_i32(4), 5);
        assert_eq!(b.get_i64(1024 + TAIL_INTENT_COUNTER_OFFSET), 16);
        assert_eq!(b.get_i64(1024 + TAIL_COUNTER_OFFSET), 16);
        assert_eq!(b.get_i64(1024 + LATEST_COUNTER_OFFSET), 0);

        tx.transmit(6, b"world!").unwrap();
        assert_eq!(b.get_i64(1024 + LATEST_COUNTER_OFFSET), 16);

        assert!(rx.receive_next());
        assert_eq!((rx.type_id(), rx.body()), (5, &b"hello"[..]));
        assert!(rx.validate());
        assert!(rx.receive_next());
        assert_eq!((rx.type_id(), rx.body()), (6, &b"world!"[..]));
        assert_eq!(rx.offset(), 24);
        assert_eq!(rx.length(), 6);
        assert!(rx.validate());
        assert!(!rx.receive_next());
        assert_eq!(rx.lapped_count(), 0);

        assert!(tx.transmit(0, b"x").is_err());
        assert!(tx.transmit(1, &[0u8; 129]).is_err());
    }

    #[test]
    fn should_start_new_receiver_at_latest_record() {
        let (_w, b) = memory(1024 + TRAILER_LENGTH);
        let mut tx = BroadcastTransmitter::new(b).unwrap();
        tx.transmit(1, b"old").unwrap();
        tx.transmit(2, b"latest").unwrap();

        let mut rx = BroadcastReceiver::new(b).unwrap();
        assert!(rx.receive_next());
        assert_eq!((rx.type_id(), rx.body()), (2, &b"latest"[..]));
        assert!(!rx.receive_next());

        let mut copy = CopyBroadcastReceiver::new(BroadcastReceiver::new(b).unwrap());
        assert_eq!(collect(&mut copy).unwrap(), vec![]);
        tx.transmit(3, b"new").unwrap();
        assert_eq!(collect(&mut copy).unwrap(), vec![(3, b"new".to_vec())]);
    }

    #[test]
    fn should_wrap_with_padding() {
        let (_w, b) = memory(1024 + TRAILER_LENGTH);
        let mut tx = BroadcastTransmitter::new(b).unwrap();
        let mut rx = CopyBroadcastReceiver::new(BroadcastReceiver::new(b).unwrap());
        let mut expected = Vec::new();
        // 100-byte bodies -> 112-byte records; the 10th (at 1008) needs a wrap.
        for i in 0..20u8 {
            tx.transmit(1 + i as i32, &[i; 100]).unwrap();
            expected.push((1 + i as i32, vec![i; 100]));
            if i % 3 == 2 {
                let got = collect(&mut rx).unwrap();
                assert_eq!(got, std::mem::take(&mut expected));
            }
        }
        assert_eq!(collect(&mut rx).unwrap(), expected);
        // Padding written at 1008 for the 10th record.
        assert_eq!(b.get_i32(1008), 16);
        assert_eq!(b.get_i32(1012), PADDING_MSG_TYPE_ID);
        assert_eq!(rx.lapped_count(), 0);
    }

    #[test]
    fn should_detect_lapping() {
        let (_w, b) = memory(1024 + TRAILER_LENGTH);
        let mut tx = BroadcastTransmitter::new(b).unwrap();
        let mut rx = CopyBroadcastReceiver::new(BroadcastReceiver::new(b).unwrap());
        tx.transmit(1, b"first").unwrap();
        assert_eq!(collect(&mut rx).unwrap().len(), 1);

        // Write more than the capacity without receiving.
        for i in 0..20u8 {
            tx.transmit(2, &[i; 100]).unwrap();
        }
        let err = rx.receive(|_, _| {}).unwrap_err();
        assert_eq!(err, LAPPED_ERROR);
        assert_eq!(rx.lapped_count(), 1);

        // The raw receiver jumps to the latest record and carries on.
        let mut raw = BroadcastReceiver::new(b).unwrap();
        for i in 20..40u8 {
            tx.transmit(3, &[i; 100]).unwrap();
        }
        assert!(raw.receive_next());
        assert_eq!(raw.lapped_count(), 1);
        assert_eq!((raw.type_id(), raw.body()), (3, &[39u8; 100][..]));
        assert!(raw.validate());
    }

    #[test]
    fn should_detect_record_overwritten_while_being_read() {
        let (_w, b) = memory(1024 + TRAILER_LENGTH);
        let mut tx = BroadcastTransmitter::new(b).unwrap();
        let mut rx = BroadcastReceiver::new(b).unwrap();
        tx.transmit(1, &[1u8; 100]).unwrap();
        assert!(rx.receive_next());
        assert!(rx.validate());
        for _ in 0..9 {
            tx.transmit(2, &[2u8; 100]).unwrap();
        }
        assert!(!rx.validate());
    }

    #[test]
    fn should_never_hand_out_torn_or_reordered_messages_under_concurrent_transmission() {
        use std::sync::atomic::{AtomicBool, Ordering};
        const MESSAGES: u64 = 200_000;
        let len = 64 * 1024 + TRAILER_LENGTH;
        let mut words = vec![0u64; len / 8];
        let b = unsafe { AtomicBuffer::new(words.as_mut_ptr() as *mut u8, len) };
        let mut rx = CopyBroadcastReceiver::new(BroadcastReceiver::new(b).unwrap());
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut tx = BroadcastTransmitter::new(b).unwrap();
                let mut msg = [0u8; 48];
                for seq in 0..MESSAGES {
                    let len = 8 + (seq % 33) as usize;
                    msg[..8].copy_from_slice(&seq.to_le_bytes());
                    msg[8..len].fill((seq % 251) as u8);
                    tx.transmit(1, &msg[..len]).unwrap();
                    if seq % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
                done.store(true, Ordering::Release);
            });

            // Every message handed out is intact and later than the previous one;
            // without a lap report, none is missing.
            let mut next_expected = 0u64;
            let mut gap_allowed = false;
            let mut ever_lapped = false;
            loop {
                let finished = done.load(Ordering::Acquire);
                match rx.receive(|_, body| {
                    let seq = u64::from_le_bytes(body[..8].try_into().unwrap());
                    if gap_allowed {
                        assert!(seq >= next_expected, "went backwards after a lap");
                    } else {
                        assert_eq!(seq, next_expected, "message lost without a lap report");
                    }
                    assert_eq!(body.len(), 8 + (seq % 33) as usize);
                    assert!(
                        body[8..].iter().all(|&x| x == (seq % 251) as u8),
                        "torn message"
                    );
                    next_expected = seq + 1;
                    gap_allowed = false;
                }) {
                    Ok(0) if finished => break,
                    Ok(_) => {}
                    Err(e) => {
                        assert_eq!(e, LAPPED_ERROR);
                        gap_allowed = true;
                        ever_lapped = true;
                    }
                }
            }
            // After a lap the very last message may be the one that was skipped.
            assert!(next_expected == MESSAGES || (ever_lapped && next_expected > 0));
        });
    }
}
