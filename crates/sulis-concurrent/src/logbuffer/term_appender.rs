//! Appending frames to a term.
//!
//! Commit protocol for every frame (docs/protocol.md §3.3):
//! 1. reserve space: concurrent publications with an atomic add on the packed
//!    tail counter (wait-free across threads and processes), exclusive ones by
//!    advancing their own tail and store-releasing it;
//! 2. write the first 8 header bytes with a *negative* frame length (claimed),
//!    then the rest of the header, then the payload;
//! 3. store-release the positive frame length: readers treat `length <= 0` as
//!    "not yet there", so they never see a torn frame.
//!
//! A reservation that would cross the end of the term pads the rest of the
//! term instead and reports [`Append::Tripped`]: the caller rotates the log and
//! retries in the next term, so a message never spans two terms.

use crate::AtomicBuffer;
use sulis_protocol::frame::*;
use sulis_protocol::log_buffer_descriptor::{pack_tail, TERM_TAIL_COUNTERS_OFFSET};

/// Outcome of an append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Append {
    /// Written; the term offset just after the frame(s).
    Done(i32),
    /// The term is full: the remainder was padded (if any was left) and the
    /// log must rotate to the term after `term_id`.
    Tripped {
        /// Term id of the full term.
        term_id: i32,
    },
}

/// Stamps data headers for one publication (session and stream are fixed).
#[derive(Clone, Copy, Debug)]
pub struct HeaderWriter {
    /// Upper half of the first header word: version, flags, type.
    version_flags_type: i64,
    session_id: i32,
    stream_id: i32,
}

impl HeaderWriter {
    /// From a publication's default 32-byte header.
    pub fn new(default_header: &[u8; DATA_HEADER_LENGTH]) -> Self {
        let word = i64::from_le_bytes(default_header[0..8].try_into().unwrap());
        HeaderWriter {
            version_flags_type: word & !0xFFFF_FFFFi64,
            session_id: i32::from_le_bytes(default_header[12..16].try_into().unwrap()),
            stream_id: i32::from_le_bytes(default_header[16..20].try_into().unwrap()),
        }
    }

    /// Session id stamped on frames.
    pub fn session_id(&self) -> i32 {
        self.session_id
    }

    /// Stream id stamped on frames.
    pub fn stream_id(&self) -> i32 {
        self.stream_id
    }

    /// Writes a header with a negative (claimed) length; bytes 24..32 untouched.
    #[inline(always)]
    pub fn write(&self, term: &AtomicBuffer, offset: usize, frame_length: usize, term_id: i32) {
        let first = self.version_flags_type | ((-(frame_length as i64)) & 0xFFFF_FFFF);
        term.put_i64_ordered(offset, first);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        term.put_i64(
            offset + TERM_OFFSET_FIELD_OFFSET,
            ((self.session_id as i64) << 32) | (offset as i64 & 0xFFFF_FFFF),
        );
        term.put_i64(
            offset + STREAM_ID_FIELD_OFFSET,
            ((term_id as i64) << 32) | (self.stream_id as i64 & 0xFFFF_FFFF),
        );
    }
}

/// Writes a PAD frame of `length` bytes at `offset` and commits it.
#[inline]
pub fn write_padding(
    term: &AtomicBuffer,
    hw: &HeaderWriter,
    offset: usize,
    length: usize,
    term_id: i32,
) {
    hw.write(term, offset, length, term_id);
    term.put_u16(offset + TYPE_FIELD_OFFSET, HDR_TYPE_PAD);
    term.put_i32_ordered(offset + FRAME_LENGTH_FIELD_OFFSET, length as i32);
}

/// Where the frames go and how space is reserved.
#[derive(Clone, Copy, Debug)]
pub struct TermAppender {
    term: AtomicBuffer,
    meta: AtomicBuffer,
    tail_offset: usize,
}

impl TermAppender {
    /// Appender for partition `index` of a log with metadata `meta`.
    pub fn new(term: AtomicBuffer, meta: AtomicBuffer, index: usize) -> Self {
        TermAppender {
            term,
            meta,
            tail_offset: TERM_TAIL_COUNTERS_OFFSET + 8 * index,
        }
    }

    /// The term buffer.
    pub fn term(&self) -> AtomicBuffer {
        self.term
    }

    /// Atomically reserves `aligned` bytes; returns (term id, term offset) of the reservation.
    #[inline(always)]
    fn reserve_concurrent(&self, aligned: usize) -> (i32, i64) {
        let raw = self.meta.get_and_add_i64(self.tail_offset, aligned as i64);
        ((raw >> 32) as i32, raw & 0xFFFF_FFFF)
    }

    #[inline(always)]
    fn trip(&self, hw: &HeaderWriter, term_offset: i64, term_id: i32) -> Append {
        let cap = self.term.capacity() as i64;
        if term_offset < cap {
            write_padding(
                &self.term,
                hw,
                term_offset as usize,
                (cap - term_offset) as usize,
                term_id,
            );
        }
        Append::Tripped { term_id }
    }

    #[inline(always)]
    fn write_unfragmented(
        &self,
        hw: &HeaderWriter,
        offset: usize,
        term_id: i32,
        src: &[u8],
        reserved: Option<i64>,
    ) {
        let frame_length = src.len() + DATA_HEADER_LENGTH;
        hw.write(&self.term, offset, frame_length, term_id);
        self.term.put_bytes(offset + DATA_HEADER_LENGTH, src);
        if let Some(v) = reserved {
            self.term.put_i64(offset + RESERVED_VALUE_FIELD_OFFSET, v);
        }
        self.term.put_i32_ordered(offset, frame_length as i32);
    }

    #[inline(always)]
    fn write_fragments(
        &self,
        hw: &HeaderWriter,
        start: usize,
        term_id: i32,
        src: &[u8],
        max_payload: usize,
        reserved: Option<i64>,
    ) -> usize {
        let mut offset = start;
        let mut remaining = src;
        let mut flags = BEGIN_FLAG;
        loop {
            let n = remaining.len().min(max_payload);
            let last = n == remaining.len();
            if last {
                flags |= END_FLAG;
            }
            let frame_length = n + DATA_HEADER_LENGTH;
            hw.write(&self.term, offset, frame_length, term_id);
            self.term.put_u8(offset + FLAGS_FIELD_OFFSET, flags);
            self.term
                .put_bytes(offset + DATA_HEADER_LENGTH, &remaining[..n]);
            if let Some(v) = reserved {
                self.term.put_i64(offset + RESERVED_VALUE_FIELD_OFFSET, v);
            }
            self.term.put_i32_ordered(offset, frame_length as i32);
            offset += align_frame(frame_length);
            remaining = &remaining[n..];
            flags = 0;
            if last {
                return offset;
            }
        }
    }

    /// Concurrent append of a message that fits one frame.
    #[inline]
    pub fn append_unfragmented(
        &self,
        hw: &HeaderWriter,
        src: &[u8],
        reserved: Option<i64>,
    ) -> Append {
        let aligned = align_frame(src.len() + DATA_HEADER_LENGTH);
        let (term_id, term_offset) = self.reserve_concurrent(aligned);
        let resulting = term_offset + aligned as i64;
        if resulting > self.term.capacity() as i64 {
            return self.trip(hw, term_offset, term_id);
        }
        self.write_unfragmented(hw, term_offset as usize, term_id, src, reserved);
        Append::Done(resulting as i32)
    }

    /// Concurrent append of a message split into frames of at most `max_payload` bytes.
    pub fn append_fragmented(
        &self,
        hw: &HeaderWriter,
        src: &[u8],
        max_payload: usize,
        reserved: Option<i64>,
    ) -> Append {
        let required = fragmented_length(src.len(), max_payload);
        let (term_id, term_offset) = self.reserve_concurrent(required);
        let resulting = term_offset + required as i64;
        if resulting > self.term.capacity() as i64 {
            return self.trip(hw, term_offset, term_id);
        }
        self.write_fragments(
            hw,
            term_offset as usize,
            term_id,
            src,
            max_payload,
            reserved,
        );
        Append::Done(resulting as i32)
    }

    /// Concurrent claim of one frame with `length` payload bytes: the header is
    /// written with a negative length; the caller fills the payload and calls
    /// [`commit`] or [`abort`] with the returned frame offset.
    #[inline]
    pub fn claim(&self, hw: &HeaderWriter, length: usize) -> Result<(usize, i32), Append> {
        let frame_length = length + DATA_HEADER_LENGTH;
        let aligned = align_frame(frame_length);
        let (term_id, term_offset) = self.reserve_concurrent(aligned);
        let resulting = term_offset + aligned as i64;
        if resulting > self.term.capacity() as i64 {
            return Err(self.trip(hw, term_offset, term_id));
        }
        hw.write(&self.term, term_offset as usize, frame_length, term_id);
        Ok((term_offset as usize, resulting as i32))
    }

    // ---- exclusive (single writer): the caller owns the tail ----

    #[inline(always)]
    fn exclusive_reserve(&self, term_id: i32, term_offset: i32, aligned: usize) -> Option<i32> {
        let resulting = term_offset as i64 + aligned as i64;
        if resulting > self.term.capacity() as i64 {
            return None;
        }
        self.meta
            .put_i64_ordered(self.tail_offset, pack_tail(term_id, resulting as i32));
        Some(resulting as i32)
    }

    #[inline(always)]
    fn exclusive_trip(&self, hw: &HeaderWriter, term_id: i32, term_offset: i32) -> Append {
        let cap = self.term.capacity() as i32;
        if term_offset < cap {
            let len = (cap - term_offset) as usize;
            self.meta
                .put_i64_ordered(self.tail_offset, pack_tail(term_id, cap));
            write_padding(&self.term, hw, term_offset as usize, len, term_id);
        }
        Append::Tripped { term_id }
    }

    /// Single-writer append of a message that fits one frame at `term_offset`.
    #[inline]
    pub fn exclusive_append_unfragmented(
        &self,
        hw: &HeaderWriter,
        term_id: i32,
        term_offset: i32,
        src: &[u8],
        reserved: Option<i64>,
    ) -> Append {
        let aligned = align_frame(src.len() + DATA_HEADER_LENGTH);
        match self.exclusive_reserve(term_id, term_offset, aligned) {
            None => self.exclusive_trip(hw, term_id, term_offset),
            Some(resulting) => {
                self.write_unfragmented(hw, term_offset as usize, term_id, src, reserved);
                Append::Done(resulting)
            }
        }
    }

    /// Single-writer append of a fragmented message at `term_offset`.
    pub fn exclusive_append_fragmented(
        &self,
        hw: &HeaderWriter,
        term_id: i32,
        term_offset: i32,
        src: &[u8],
        max_payload: usize,
        reserved: Option<i64>,
    ) -> Append {
        let required = fragmented_length(src.len(), max_payload);
        match self.exclusive_reserve(term_id, term_offset, required) {
            None => self.exclusive_trip(hw, term_id, term_offset),
            Some(resulting) => {
                self.write_fragments(
                    hw,
                    term_offset as usize,
                    term_id,
                    src,
                    max_payload,
                    reserved,
                );
                Append::Done(resulting)
            }
        }
    }

    /// Single-writer claim (see [`TermAppender::claim`]).
    #[inline]
    pub fn exclusive_claim(
        &self,
        hw: &HeaderWriter,
        term_id: i32,
        term_offset: i32,
        length: usize,
    ) -> Result<(usize, i32), Append> {
        let frame_length = length + DATA_HEADER_LENGTH;
        match self.exclusive_reserve(term_id, term_offset, align_frame(frame_length)) {
            None => Err(self.exclusive_trip(hw, term_id, term_offset)),
            Some(resulting) => {
                hw.write(&self.term, term_offset as usize, frame_length, term_id);
                Ok((term_offset as usize, resulting))
            }
        }
    }
}

impl TermAppender {
    /// Single-writer append of a block of whole frames (a replay's frames,
    /// as a recording holds them) at `term_offset`: each frame keeps its
    /// length, flags, type and reserved value; its term offset, session id,
    /// stream id and term id become this log's. The first frame's length is
    /// written last, so a reader sees the block whole or not at all. Returns
    /// the resulting term offset, or `None` if the block does not fit the
    /// term (blocks never cross a term boundary).
    pub fn exclusive_append_block(
        &self,
        term_id: i32,
        term_offset: i32,
        block: &[u8],
        session_id: i32,
        stream_id: i32,
    ) -> Option<i32> {
        let start = term_offset as usize;
        let resulting = start + block.len();
        if resulting > self.term.capacity() {
            return None;
        }
        if block.len() < DATA_HEADER_LENGTH {
            return Some(term_offset);
        }
        // The first frame's length stays zero (a clean term) until the end:
        // readers stop there, so nothing of the block shows half written.
        self.term.put_bytes(start + 4, &block[4..]);
        let mut offset = 0usize;
        let mut first_length = 0i32;
        while offset + DATA_HEADER_LENGTH <= block.len() {
            let frame_length = i32::from_le_bytes(block[offset..offset + 4].try_into().unwrap());
            let at = start + offset;
            self.term
                .put_i32(at + TERM_OFFSET_FIELD_OFFSET, (start + offset) as i32);
            self.term.put_i32(at + SESSION_ID_FIELD_OFFSET, session_id);
            self.term.put_i32(at + STREAM_ID_FIELD_OFFSET, stream_id);
            self.term.put_i32(at + TERM_ID_FIELD_OFFSET, term_id);
            if offset == 0 {
                first_length = frame_length;
            }
            if frame_length <= 0 {
                break;
            }
            offset += align_frame(frame_length as usize);
        }
        self.meta
            .put_i64_ordered(self.tail_offset, pack_tail(term_id, resulting as i32));
        self.term.put_i32_ordered(start, first_length);
        Some(resulting as i32)
    }
}

/// Bytes a fragmented message occupies in a term.
pub fn fragmented_length(length: usize, max_payload: usize) -> usize {
    let full = length / max_payload;
    let rest = length % max_payload;
    let mut total = full * align_frame(max_payload + DATA_HEADER_LENGTH);
    if rest > 0 {
        total += align_frame(rest + DATA_HEADER_LENGTH);
    }
    total
}

/// Commits a claimed frame: store-release of its positive length.
#[inline]
pub fn commit(term: &AtomicBuffer, frame_offset: usize) {
    let length = term.get_i32(frame_offset);
    term.put_i32_ordered(frame_offset, length.wrapping_abs());
}

/// Aborts a claimed frame: it becomes padding that readers skip.
#[inline]
pub fn abort(term: &AtomicBuffer, frame_offset: usize) {
    let length = term.get_i32(frame_offset);
    term.put_u16(frame_offset + TYPE_FIELD_OFFSET, HDR_TYPE_PAD);
    term.put_i32_ordered(frame_offset, length.wrapping_abs());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logbuffer::meta;
    use crate::logbuffer::tests::temp_log;
    use sulis_protocol::log_buffer_descriptor::*;

    fn hw() -> HeaderWriter {
        HeaderWriter::new(&default_data_header(7, 10, 0))
    }

    #[test]
    fn should_append_and_commit_frames_in_order() {
        let (_d, logs) = temp_log(65536, 0);
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        assert_eq!(
            a.append_unfragmented(&hw(), b"hello", None),
            Append::Done(64)
        );
        assert_eq!(
            a.append_unfragmented(&hw(), &[1u8; 32], Some(42)),
            Append::Done(128)
        );
        let t = logs.term(0);
        assert_eq!(t.get_i32(0), 37);
        assert_eq!(t.get_i32(TERM_OFFSET_FIELD_OFFSET), 0);
        assert_eq!(t.get_i32(SESSION_ID_FIELD_OFFSET), 7);
        assert_eq!(t.get_i32(STREAM_ID_FIELD_OFFSET), 10);
        assert_eq!(t.slice(32, 5), b"hello");
        assert_eq!(t.get_i32(64), 64);
        assert_eq!(t.get_i32(64 + TERM_OFFSET_FIELD_OFFSET), 64);
        assert_eq!(t.get_i64(64 + RESERVED_VALUE_FIELD_OFFSET), 42);
        assert_eq!(
            term_offset(meta::raw_tail_volatile(&logs.meta(), 0), 65536),
            128
        );
    }

    #[test]
    fn should_pad_and_trip_at_end_of_term() {
        let (_d, logs) = temp_log(65536, 0);
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        // fill to 64 bytes before the end
        let big = vec![0u8; 65536 - 64 - 32];
        assert_eq!(
            a.append_unfragmented(&hw(), &big, None),
            Append::Done(65536 - 64)
        );
        assert_eq!(
            a.append_unfragmented(&hw(), &[0u8; 40], None),
            Append::Tripped { term_id: 0 }
        );
        let t = logs.term(0);
        assert_eq!(t.get_i32(65536 - 64), 64);
        assert_eq!(t.get_u16(65536 - 64 + TYPE_FIELD_OFFSET), HDR_TYPE_PAD);
        // a further racing writer past the end trips without writing
        assert_eq!(
            a.append_unfragmented(&hw(), b"x", None),
            Append::Tripped { term_id: 0 }
        );
    }

    #[test]
    fn should_fragment_with_begin_and_end_flags() {
        let (_d, logs) = temp_log(65536, 0);
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        let msg: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let r = a.append_fragmented(&hw(), &msg, 1376, None);
        assert_eq!(r, Append::Done(fragmented_length(3000, 1376) as i32));
        let t = logs.term(0);
        assert_eq!(t.get_u8(FLAGS_FIELD_OFFSET), BEGIN_FLAG);
        assert_eq!(t.get_u8(1408 + FLAGS_FIELD_OFFSET), 0);
        assert_eq!(t.get_u8(2816 + FLAGS_FIELD_OFFSET), END_FLAG);
        assert_eq!(t.get_i32(2816), 32 + 3000 - 2 * 1376);
    }

    #[test]
    fn should_commit_and_abort_claims() {
        let (_d, logs) = temp_log(65536, 0);
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        let (off, next) = a.claim(&hw(), 10).unwrap();
        assert_eq!((off, next), (0, 64));
        assert_eq!(logs.term(0).get_i32(0), -42);
        commit(&logs.term(0), off);
        assert_eq!(logs.term(0).get_i32(0), 42);
        let (off2, _) = a.claim(&hw(), 10).unwrap();
        abort(&logs.term(0), off2);
        assert_eq!(logs.term(0).get_i32(off2), 42);
        assert_eq!(logs.term(0).get_u16(off2 + TYPE_FIELD_OFFSET), HDR_TYPE_PAD);
    }

    #[test]
    fn should_append_exclusively_and_store_tail() {
        let (_d, logs) = temp_log(65536, 3);
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        assert_eq!(
            a.exclusive_append_unfragmented(&hw(), 3, 0, b"abc", None),
            Append::Done(64)
        );
        assert_eq!(meta::raw_tail_volatile(&logs.meta(), 0), pack_tail(3, 64));
        assert_eq!(
            a.exclusive_append_unfragmented(&hw(), 3, 65536 - 32, b"abc", None),
            Append::Tripped { term_id: 3 }
        );
        assert_eq!(
            logs.term(0).get_u16(65536 - 32 + TYPE_FIELD_OFFSET),
            HDR_TYPE_PAD
        );
    }

    #[test]
    fn should_append_concurrently_from_threads_without_losing_frames() {
        let (_d, logs) = temp_log(1 << 21, 0);
        let a = TermAppender::new(logs.term(0), logs.meta(), 0);
        let threads = 4;
        let per = 5000u32;
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || {
                    for i in 0..per {
                        let mut m = [0u8; 8];
                        m[..4].copy_from_slice(&(t as u32).to_le_bytes());
                        m[4..].copy_from_slice(&i.to_le_bytes());
                        assert!(matches!(
                            a.append_unfragmented(&hw(), &m, None),
                            Append::Done(_)
                        ));
                    }
                });
            }
        });
        let t = logs.term(0);
        let mut next = vec![0u32; threads];
        let mut off = 0;
        while off < (1 << 21) {
            let len = t.get_i32_volatile(off);
            if len <= 0 {
                break;
            }
            let th = t.get_u32(off + 32) as usize;
            let seq = t.get_u32(off + 36);
            assert_eq!(seq, next[th], "thread {th} out of order");
            next[th] += 1;
            off += align_frame(len as usize);
        }
        assert!(next.iter().all(|&n| n == per));
    }
}
