//! Images: one publisher's stream as seen by one subscription.
//!
//! An image reads the log in place from its subscriber position, hands each
//! committed fragment to a handler and then store-releases the new position
//! into its `sub-pos` counter, which is what lets the publisher move on.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use sulis_concurrent::counters::CounterRef;
use sulis_concurrent::logbuffer::{meta, LogBuffers};
use sulis_concurrent::AtomicBuffer;
use sulis_protocol::frame::*;
use sulis_protocol::log_buffer_descriptor::*;

/// What a controlled handler wants done with a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlledAction {
    /// Do not consume this fragment; stop polling.
    Abort,
    /// Consume it, then stop polling.
    Break,
    /// Consume it and commit the position now.
    Commit,
    /// Consume it and go on.
    Continue,
}

/// The 32-byte header of the fragment being handled.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    raw: [u8; DATA_HEADER_LENGTH],
    initial_term_id: i32,
    bits: u32,
}

impl Header {
    #[inline(always)]
    fn read(term: &AtomicBuffer, offset: usize, initial_term_id: i32, bits: u32) -> Header {
        let mut raw = [0u8; DATA_HEADER_LENGTH];
        term.get_bytes(offset, &mut raw);
        Header {
            raw,
            initial_term_id,
            bits,
        }
    }

    /// Builds a header from raw bytes (e.g. for assembled messages).
    pub fn from_raw(raw: [u8; DATA_HEADER_LENGTH], initial_term_id: i32, bits: u32) -> Header {
        Header {
            raw,
            initial_term_id,
            bits,
        }
    }

    #[inline(always)]
    fn i32_at(&self, off: usize) -> i32 {
        i32::from_le_bytes(self.raw[off..off + 4].try_into().unwrap())
    }

    /// Frame length (header + payload).
    pub fn frame_length(&self) -> i32 {
        self.i32_at(FRAME_LENGTH_FIELD_OFFSET)
    }
    /// Flags (BEGIN 0x80, END 0x40, EOS 0x20).
    pub fn flags(&self) -> u8 {
        self.raw[FLAGS_FIELD_OFFSET]
    }
    /// Frame type.
    pub fn frame_type(&self) -> u16 {
        u16::from_le_bytes([self.raw[TYPE_FIELD_OFFSET], self.raw[TYPE_FIELD_OFFSET + 1]])
    }
    /// Offset of the frame in its term.
    pub fn term_offset(&self) -> i32 {
        self.i32_at(TERM_OFFSET_FIELD_OFFSET)
    }
    /// Session id.
    pub fn session_id(&self) -> i32 {
        self.i32_at(SESSION_ID_FIELD_OFFSET)
    }
    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        self.i32_at(STREAM_ID_FIELD_OFFSET)
    }
    /// Term id.
    pub fn term_id(&self) -> i32 {
        self.i32_at(TERM_ID_FIELD_OFFSET)
    }
    /// Reserved value.
    pub fn reserved_value(&self) -> i64 {
        i64::from_le_bytes(
            self.raw[RESERVED_VALUE_FIELD_OFFSET..RESERVED_VALUE_FIELD_OFFSET + 8]
                .try_into()
                .unwrap(),
        )
    }
    /// Initial term id of the stream.
    pub fn initial_term_id(&self) -> i32 {
        self.initial_term_id
    }
    /// Stream position just after this fragment.
    pub fn position(&self) -> i64 {
        let next =
            self.term_offset() as i64 + align_frame(self.frame_length().max(0) as usize) as i64;
        compute_position(self.term_id(), 0, self.bits, self.initial_term_id) + next
    }
    /// Raw header bytes.
    pub fn raw(&self) -> &[u8; DATA_HEADER_LENGTH] {
        &self.raw
    }
    /// Overrides the flags (used by assemblers).
    pub fn set_flags(&mut self, flags: u8) {
        self.raw[FLAGS_FIELD_OFFSET] = flags;
    }
    /// Overrides the frame length (used by assemblers to report the whole message).
    pub fn set_frame_length(&mut self, length: i32) {
        self.raw[0..4].copy_from_slice(&length.to_le_bytes());
    }
}

/// A publisher's stream within a subscription.
pub struct Image {
    correlation_id: i64,
    session_id: i32,
    stream_id: i32,
    subscription_id: i64,
    join_position: i64,
    logs: Arc<LogBuffers>,
    terms: [AtomicBuffer; PARTITION_COUNT],
    position: CounterRef,
    /// Where this subscriber is: the image reads from here and stores it in
    /// `position` for the driver. Past the join the client is the counter's
    /// only writer, and the driver frees (zeroes, later reuses) the counter
    /// when it withdraws the image, which a client that has not yet heard
    /// of it (stopped, or busy) must not read back as its position: it
    /// would read the log from 0, another term's stale frames.
    last_position: AtomicI64,
    bits: u32,
    term_mask: i64,
    initial_term_id: i32,
    source_identity: String,
    closed: AtomicBool,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Image(session={}, stream={}, position={})",
            self.session_id,
            self.stream_id,
            self.position()
        )
    }
}

impl Image {
    pub(crate) fn new(
        correlation_id: i64,
        session_id: i32,
        stream_id: i32,
        subscription_id: i64,
        logs: Arc<LogBuffers>,
        position: CounterRef,
        source_identity: String,
    ) -> Image {
        let term_length = logs.term_length();
        let join_position = position.get_volatile();
        Image {
            correlation_id,
            session_id,
            stream_id,
            subscription_id,
            join_position,
            last_position: AtomicI64::new(join_position),
            terms: logs.terms(),
            bits: position_bits_to_shift(term_length),
            term_mask: term_length as i64 - 1,
            initial_term_id: logs.initial_term_id(),
            logs,
            position,
            source_identity,
            closed: AtomicBool::new(false),
        }
    }

    /// Correlation id of the image (the publication's registration id for IPC).
    pub fn correlation_id(&self) -> i64 {
        self.correlation_id
    }
    /// Session id.
    pub fn session_id(&self) -> i32 {
        self.session_id
    }
    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        self.stream_id
    }
    /// Registration id of the owning subscription.
    pub fn subscription_registration_id(&self) -> i64 {
        self.subscription_id
    }
    /// Where this subscriber joined the stream.
    pub fn join_position(&self) -> i64 {
        self.join_position
    }
    /// Current subscriber position (the final one once closed).
    pub fn position(&self) -> i64 {
        self.last_position.load(Ordering::Acquire)
    }

    #[inline(always)]
    fn set_position(&self, position: i64) {
        self.last_position.store(position, Ordering::Release);
        self.position.set_ordered(position);
    }
    /// Where the sender is (`aeron:ipc` for IPC).
    pub fn source_identity(&self) -> &str {
        &self.source_identity
    }
    /// Term length.
    pub fn term_buffer_length(&self) -> usize {
        self.logs.term_length()
    }
    /// Initial term id.
    pub fn initial_term_id(&self) -> i32 {
        self.initial_term_id
    }
    /// MTU of the stream.
    pub fn mtu_length(&self) -> usize {
        self.logs.mtu()
    }
    /// End-of-stream position (`i64::MAX` while the stream is open).
    pub fn end_of_stream_position(&self) -> i64 {
        meta::end_of_stream_position(&self.logs.meta())
    }
    /// True once the publisher closed and everything it wrote was consumed.
    pub fn is_end_of_stream(&self) -> bool {
        self.position() >= self.end_of_stream_position()
    }
    /// True once the driver withdrew the image or its subscription closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Reads up to `limit` committed DATA frames from the subscriber position,
    /// calling `f(term, frame_offset, frame_length, position_after)` for each;
    /// what `f` returns decides consumption (see [`ControlledAction`]). The new
    /// position is store-released at the end (and at each COMMIT). An error
    /// from `f` stops the read; frames handled so far, the failing one
    /// included, count as consumed.
    #[inline(always)]
    fn scan<E>(
        &self,
        limit: usize,
        mut f: impl FnMut(&AtomicBuffer, usize, usize, i64) -> Result<ControlledAction, E>,
    ) -> Result<usize, E> {
        if self.is_closed() || limit == 0 {
            return Ok(0);
        }
        let mut committed = self.position();
        let term = &self.terms[index_by_position(committed, self.bits)];
        let mut committed_offset = (committed & self.term_mask) as usize;
        let term_base = committed - committed_offset as i64;
        let capacity = term.capacity();
        let mut offset = committed_offset;
        let mut fragments = 0;
        let mut result = Ok(());
        while fragments < limit && offset < capacity {
            let frame_length = term.get_i32_volatile(offset);
            if frame_length <= 0 {
                break;
            }
            let frame_offset = offset;
            let aligned = align_frame(frame_length as usize);
            offset += aligned;
            if term.get_u16(frame_offset + TYPE_FIELD_OFFSET) == HDR_TYPE_PAD {
                continue;
            }
            fragments += 1;
            match f(
                term,
                frame_offset,
                frame_length as usize,
                term_base + offset as i64,
            ) {
                Ok(ControlledAction::Continue) => {}
                Ok(ControlledAction::Abort) => {
                    fragments -= 1;
                    offset -= aligned;
                    break;
                }
                Ok(ControlledAction::Break) => break,
                Ok(ControlledAction::Commit) => {
                    committed += (offset - committed_offset) as i64;
                    committed_offset = offset;
                    self.set_position(committed);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if offset > committed_offset {
            self.set_position(committed + (offset - committed_offset) as i64);
        }
        result.map(|_| fragments)
    }

    /// Polls up to `limit` fragments: `handler(payload, header)`. A handler
    /// error stops the poll; fragments handled so far (including the failing
    /// one) count as consumed.
    #[inline]
    pub fn poll<E, F: FnMut(&[u8], &Header) -> Result<(), E>>(
        &self,
        mut handler: F,
        limit: usize,
    ) -> Result<usize, E> {
        self.controlled_poll(
            |payload, header| handler(payload, header).map(|_| ControlledAction::Continue),
            limit,
        )
    }

    /// Polls with per-fragment control of consumption (see [`ControlledAction`]).
    pub fn controlled_poll<E, F: FnMut(&[u8], &Header) -> Result<ControlledAction, E>>(
        &self,
        mut handler: F,
        limit: usize,
    ) -> Result<usize, E> {
        self.scan(limit, |term, frame_offset, frame_length, _| {
            let header = Header::read(term, frame_offset, self.initial_term_id, self.bits);
            handler(
                term.slice(
                    frame_offset + DATA_HEADER_LENGTH,
                    frame_length - DATA_HEADER_LENGTH,
                ),
                &header,
            )
        })
    }

    /// As [`Image::poll`], never reading past `limit_position`: a frame
    /// that would end beyond it stays for later (Aeron's `boundedPoll`).
    pub fn bounded_poll<E, F: FnMut(&[u8], &Header) -> Result<(), E>>(
        &self,
        mut handler: F,
        limit_position: i64,
        limit: usize,
    ) -> Result<usize, E> {
        self.scan(limit, |term, frame_offset, frame_length, position| {
            if position > limit_position {
                return Ok(ControlledAction::Abort);
            }
            let header = Header::read(term, frame_offset, self.initial_term_id, self.bits);
            handler(
                term.slice(
                    frame_offset + DATA_HEADER_LENGTH,
                    frame_length - DATA_HEADER_LENGTH,
                ),
                &header,
            )
            .map(|_| ControlledAction::Continue)
        })
    }

    /// Moves the subscriber position forward to `position` without reading
    /// what lies between (Aeron's `Image.position(long)`): it must be a frame
    /// position (32-byte aligned) from the current one to at most a term
    /// length ahead.
    pub fn seek(&self, position: i64) -> Result<(), String> {
        let current = self.position();
        let term_length = self.logs.term_length() as i64;
        if position & (FRAME_ALIGNMENT as i64 - 1) != 0 {
            return Err(format!(
                "position {position} is not a frame position (a multiple of {FRAME_ALIGNMENT})"
            ));
        }
        if position < current || position > current + term_length {
            return Err(format!(
                "position {position} is outside [{current}, {}]: an image moves forward by at most a term length",
                current + term_length
            ));
        }
        if !self.is_closed() {
            self.set_position(position);
        }
        Ok(())
    }

    /// Copies up to `limit` fragments into `batch` (payloads back to back).
    pub fn poll_into(&self, batch: &mut crate::batch::Batch, limit: usize) -> usize {
        self.bounded_poll_into(batch, i64::MAX, limit)
    }

    /// As [`Image::poll_into`], never reading past `limit_position`.
    pub fn bounded_poll_into(
        &self,
        batch: &mut crate::batch::Batch,
        limit_position: i64,
        limit: usize,
    ) -> usize {
        let r: Result<usize, std::convert::Infallible> =
            self.scan(limit, |term, frame_offset, frame_length, position| {
                if position > limit_position {
                    return Ok(ControlledAction::Abort);
                }
                batch.push(
                    term.slice(
                        frame_offset + DATA_HEADER_LENGTH,
                        frame_length - DATA_HEADER_LENGTH,
                    ),
                    position,
                    self.session_id,
                    term.get_u8(frame_offset + FLAGS_FIELD_OFFSET),
                    term.get_i64(frame_offset + RESERVED_VALUE_FIELD_OFFSET),
                );
                Ok(ControlledAction::Continue)
            });
        match r {
            Ok(n) => n,
            Err(never) => match never {},
        }
    }
}

impl Image {
    /// Hands over the committed frames from the subscriber position as one
    /// block of the term, up to `max_length` bytes and never past the
    /// term's end, then moves the position past them: what an archive's
    /// recorder writes to disk with one call. A padding frame comes as a
    /// block of its own (its whole length; only its header is meaningful).
    /// `f(block, position)` gets the bytes and the stream position of their
    /// start. Returns the bytes consumed (0: nothing new, or closed).
    pub fn block_poll(&self, max_length: usize, f: impl FnMut(&[u8], i64)) -> usize {
        self.bounded_block_poll(max_length, i64::MAX, f)
    }

    /// As [`Image::block_poll`], never past `limit_position` (a frame that
    /// would end beyond it stays).
    pub fn bounded_block_poll(
        &self,
        max_length: usize,
        limit_position: i64,
        mut f: impl FnMut(&[u8], i64),
    ) -> usize {
        if self.is_closed() {
            return 0;
        }
        let position = self.position();
        if position >= limit_position {
            return 0;
        }
        let offset = (position & self.term_mask) as usize;
        let term = &self.terms[index_by_position(position, self.bits)];
        let capacity = term.capacity();
        let room = usize::try_from(limit_position - position).unwrap_or(usize::MAX);
        let hard_limit = offset.saturating_add(room);
        let limit = capacity
            .min(offset.saturating_add(max_length.max(32)))
            .min(hard_limit);
        let mut end = offset;
        while end < limit {
            let frame_length = term.get_i32_volatile(end);
            if frame_length <= 0 {
                break;
            }
            let aligned = align_frame(frame_length as usize);
            if end + aligned > hard_limit {
                break;
            }
            let is_padding = term.get_u16(end + TYPE_FIELD_OFFSET) == HDR_TYPE_PAD;
            if is_padding {
                if end == offset {
                    end += aligned;
                }
                break;
            }
            // At least one frame, even one longer than `max_length`.
            if end + aligned > limit && end > offset {
                break;
            }
            end += aligned;
        }
        if end == offset {
            return 0;
        }
        f(term.slice(offset, end - offset), position);
        self.set_position(position + (end - offset) as i64);
        end - offset
    }
}
