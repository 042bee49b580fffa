//! Publications: append messages to a stream's log.
//!
//! [`Publication`] is concurrent (many threads/processes share one log, space
//! is reserved with an atomic add); [`ExclusivePublication`] has one writer
//! and keeps its tail locally. Both refuse to run past the publisher limit the
//! driver maintains behind the slowest subscriber.

use crate::driver_proxy::{Destination, DriverProxy, Resource};
use crate::{offer_code, ClientError};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use sulis_concurrent::counters::CounterRef;
use sulis_concurrent::logbuffer::populator::Populator;
use sulis_concurrent::logbuffer::term_appender::{
    self, fragmented_length, Append, HeaderWriter, TermAppender,
};
use sulis_concurrent::logbuffer::{meta, LogBuffers};
use sulis_concurrent::AtomicBuffer;
use sulis_protocol::control::Event;
use sulis_protocol::frame::DATA_HEADER_LENGTH;
use sulis_protocol::log_buffer_descriptor::*;

/// Why an offer did not append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OfferError {
    /// No subscriber connected.
    NotConnected,
    /// Publisher limit reached.
    BackPressured,
    /// Term rotation: retry.
    AdminAction,
    /// Publication closed.
    Closed,
    /// Stream at its maximum position.
    MaxPositionExceeded,
    /// Message longer than the maximum message length.
    MessageTooLong {
        /// Offered length.
        length: usize,
        /// Maximum.
        max: usize,
    },
    /// The client failed (driver gone, timed out).
    Client(ClientError),
    /// The pages the message needed in the sparse log could not be had: the
    /// log's file system (`/dev/shm`) is full. Nothing was appended.
    StorageFull(String),
}

impl OfferError {
    /// Aeron's negative result code, where there is one.
    pub fn code(&self) -> Option<i64> {
        match self {
            OfferError::NotConnected => Some(offer_code::NOT_CONNECTED),
            OfferError::BackPressured => Some(offer_code::BACK_PRESSURED),
            OfferError::AdminAction => Some(offer_code::ADMIN_ACTION),
            OfferError::Closed => Some(offer_code::CLOSED),
            OfferError::MaxPositionExceeded => Some(offer_code::MAX_POSITION_EXCEEDED),
            _ => None,
        }
    }
}

/// What both publication kinds share.
struct LogState {
    logs: Arc<LogBuffers>,
    meta: AtomicBuffer,
    appenders: [TermAppender; PARTITION_COUNT],
    header: HeaderWriter,
    limit: CounterRef,
    /// Last value read from `limit` (see [`LogState::has_room`]).
    cached_limit: std::sync::atomic::AtomicI64,
    initial_term_id: i32,
    bits: u32,
    term_length: usize,
    max_payload: usize,
    max_message: usize,
    max_possible_position: i64,
    /// For a sparse log, the pages this writer has taken (see [`LogState::has_room`]).
    populator: Option<Populator>,
    /// Bytes past a position whose pages a one-frame append needs: the
    /// largest frame and the page a reader then waits on.
    page_margin: i64,
    /// Why pages could not be taken, for the offer that was refused.
    storage_error: std::sync::Mutex<Option<String>>,
}

impl LogState {
    fn map(driver: &DriverProxy, ev: &Event) -> Result<(LogState, i64, i32, i32), ClientError> {
        let Event::PublicationReady {
            registration_id,
            session_id,
            stream_id,
            position_limit_counter_id,
            log_file,
            ..
        } = ev
        else {
            return Err(ClientError::Config(format!(
                "unexpected driver response {ev:?}"
            )));
        };
        let logs = LogBuffers::map_existing(Path::new(log_file))
            .map_err(|e| ClientError::Config(format!("cannot map publication log: {e}")))?;
        let term_length = logs.term_length();
        let meta = logs.meta();
        let terms = logs.terms();
        let start = meta::producer_position(&meta, term_length, logs.initial_term_id());
        let appenders = [
            TermAppender::new(terms[0], meta, 0),
            TermAppender::new(terms[1], meta, 1),
            TermAppender::new(terms[2], meta, 2),
        ];
        let state = LogState {
            header: HeaderWriter::new(&logs.default_header()),
            initial_term_id: logs.initial_term_id(),
            bits: position_bits_to_shift(term_length),
            term_length,
            max_payload: logs.mtu() - DATA_HEADER_LENGTH,
            max_message: compute_max_message_length(term_length),
            max_possible_position: max_possible_position(term_length),
            limit: driver.counter(*position_limit_counter_id),
            cached_limit: std::sync::atomic::AtomicI64::new(i64::MIN),
            populator: Populator::new(&logs, start),
            page_margin: (logs.mtu() + logs.page_size()) as i64,
            storage_error: std::sync::Mutex::new(None),
            meta,
            appenders,
            logs: Arc::new(logs),
        };
        Ok((state, *registration_id, *session_id, *stream_id))
    }

    /// True when `position` is below the publisher limit.
    ///
    /// The driver rewrites the limit counter whenever subscribers advance, so
    /// reading it on every offer would pull its cache line across cores each
    /// time. A copy is kept instead and the counter re-read only when the copy
    /// is used up or the log is no longer connected (the driver then pulls the
    /// limit back to the producer position).
    ///
    /// In a sparse log the copy is also kept below the pages this writer has
    /// taken, less a frame and a page, so a one-frame append at any position
    /// under it (with the padding of a full term, or the page a reader waits
    /// on after it) touches only pages that exist.
    #[inline(always)]
    fn has_room(&self, position: i64) -> bool {
        if position < self.cached_limit.load(Ordering::Relaxed) && meta::is_connected(&self.meta) {
            return true;
        }
        self.refresh_limit(position)
    }

    #[inline(never)]
    fn refresh_limit(&self, position: i64) -> bool {
        let mut limit = self.limit.get_volatile();
        if let Some(p) = &self.populator {
            if position < limit {
                match p.ensure(&self.logs, position + self.page_margin) {
                    Ok(end) => limit = limit.min(end - self.page_margin + 1),
                    Err(e) => {
                        *self.storage_error.lock().unwrap() = Some(e.to_string());
                        limit = i64::MIN;
                    }
                }
            }
        }
        self.cached_limit.store(limit, Ordering::Relaxed);
        position < limit
    }

    /// Takes the pages of a sparse log up to `to` (and the page after it) before
    /// an append longer than a frame.
    fn ensure_pages(&self, to: i64) -> Result<(), OfferError> {
        match &self.populator {
            Some(p) => p
                .ensure(&self.logs, to + self.page_margin)
                .map(|_| ())
                .map_err(|e| OfferError::StorageFull(e.to_string())),
            None => Ok(()),
        }
    }

    #[cold]
    fn back_pressure_status(&self, position: i64, length: usize) -> OfferError {
        if let Some(e) = self.storage_error.lock().unwrap().take() {
            return OfferError::StorageFull(e);
        }
        if position + length as i64 >= self.max_possible_position {
            OfferError::MaxPositionExceeded
        } else if meta::is_connected(&self.meta) {
            OfferError::BackPressured
        } else {
            OfferError::NotConnected
        }
    }

    #[inline]
    fn check_length(&self, length: usize) -> Result<(), OfferError> {
        if length > self.max_message {
            return Err(OfferError::MessageTooLong {
                length,
                max: self.max_message,
            });
        }
        Ok(())
    }
}

/// What both publication kinds share: the mapped log, identity and life cycle.
/// Each publication derefs to it, so these accessors are theirs too.
pub struct PublicationCore {
    driver: DriverProxy,
    log: LogState,
    registration_id: i64,
    original_registration_id: i64,
    session_id: i32,
    stream_id: i32,
    channel: String,
    closed: AtomicBool,
}

impl PublicationCore {
    fn new(
        driver: DriverProxy,
        registration_id: i64,
        channel: &str,
        ev: Event,
    ) -> Result<Self, ClientError> {
        let (log, original_registration_id, session_id, stream_id) = LogState::map(&driver, &ev)?;
        Ok(PublicationCore {
            driver,
            log,
            registration_id,
            original_registration_id,
            session_id,
            stream_id,
            channel: channel.to_string(),
            closed: AtomicBool::new(false),
        })
    }

    /// Session id.
    pub fn session_id(&self) -> i32 {
        self.session_id
    }
    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        self.stream_id
    }
    /// Channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }
    /// Registration id of the log (shared by concurrent publications of one stream).
    pub fn original_registration_id(&self) -> i64 {
        self.original_registration_id
    }
    /// Registration id of this publication handle.
    pub fn registration_id(&self) -> i64 {
        self.registration_id
    }
    /// Largest message `offer` accepts.
    pub fn max_message_length(&self) -> usize {
        self.log.max_message
    }
    /// Largest payload of one fragment (and of a claim).
    pub fn max_payload_length(&self) -> usize {
        self.log.max_payload
    }
    /// Term length.
    pub fn term_buffer_length(&self) -> usize {
        self.log.term_length
    }
    /// Initial term id.
    pub fn initial_term_id(&self) -> i32 {
        self.log.initial_term_id
    }
    /// True when at least one subscriber is connected.
    pub fn is_connected(&self) -> bool {
        !self.is_closed() && meta::is_connected(&self.log.meta)
    }
    /// Position limit set by the driver.
    pub fn position_limit(&self) -> i64 {
        self.log.limit.get_volatile()
    }
    /// True once closed (or the client failed).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.driver.is_failed()
    }
    /// Adds a destination to a manual multi-destination-cast publication
    /// (`aeron:udp?control-mode=manual`): `channel` is
    /// `aeron:udp?endpoint=HOST:PORT`. Returns the destination's
    /// registration id (for [`remove_destination_by_id`](Self::remove_destination_by_id)).
    pub fn add_destination(&self, channel: &str) -> Result<i64, ClientError> {
        self.destination(Destination::Add(channel))
    }
    /// Removes the destination added with `channel`.
    pub fn remove_destination(&self, channel: &str) -> Result<(), ClientError> {
        self.destination(Destination::Remove(channel)).map(|_| ())
    }
    /// Removes the destination whose add returned `destination_id`.
    pub fn remove_destination_by_id(&self, destination_id: i64) -> Result<(), ClientError> {
        self.destination(Destination::RemoveById(destination_id))
            .map(|_| ())
    }
    fn destination(&self, change: Destination<'_>) -> Result<i64, ClientError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(ClientError::Closed(format!(
                "publication {} on {} is closed",
                self.registration_id, self.channel
            )));
        }
        self.driver.destination(self.registration_id, false, change)
    }
    /// Closes the publication (idempotent), waiting for the driver's answer.
    /// It is closed when this returns, even with an error: the only one is
    /// [`ClientError::Interrupted`], the interrupt check having fired while
    /// waiting for the answer.
    pub fn close(&self) -> Result<(), ClientError> {
        self.close_with(true)
    }
    /// Closes it without waiting for the driver's answer: what dropping does,
    /// so a drop never blocks (in Python it runs holding the GIL).
    pub fn close_without_waiting(&self) {
        let _ = self.close_with(false);
    }
    fn close_with(&self, wait: bool) -> Result<(), ClientError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.driver
            .remove(Resource::Publication, self.registration_id, wait)
    }
    /// Neither closed nor failed: the fast paths' check, without building an error.
    #[inline(always)]
    fn is_open(&self) -> bool {
        !self.closed.load(Ordering::Relaxed) && !self.driver.is_failed()
    }
    #[inline(always)]
    fn check_open(&self) -> Result<(), OfferError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(OfferError::Closed);
        }
        if self.driver.is_failed() {
            return Err(OfferError::Client(self.driver.failure()));
        }
        Ok(())
    }
}

/// A concurrent publication: safe to share between threads.
pub struct Publication {
    core: PublicationCore,
}

impl std::ops::Deref for Publication {
    type Target = PublicationCore;
    fn deref(&self) -> &PublicationCore {
        &self.core
    }
}

/// Offers `messages` one after another, each as its own message (fragmented
/// like any offer), until all are published or one is refused. Returns how
/// many were published and then the position after the last one (`None`
/// for no messages), or the refusal (back pressure, not connected, ...) at
/// which it stopped: the caller offers the rest again later. A term rotation
/// (ADMIN_ACTION) is not a refusal: the message is offered again at once.
/// `offer` gets each message with its index in this call.
pub fn offer_each<'a>(
    messages: impl IntoIterator<Item = &'a [u8]>,
    mut offer: impl FnMut(usize, &[u8]) -> Result<i64, OfferError>,
) -> (usize, Result<Option<i64>, OfferError>) {
    let mut count = 0;
    let mut last = Ok(None);
    for m in messages {
        let mut r = offer(count, m);
        // A rotation leaves the next term ready: the retry succeeds or is a
        // real refusal (a second rotation in a row cannot happen).
        for _ in 0..2 {
            if !matches!(r, Err(OfferError::AdminAction)) {
                break;
            }
            r = offer(count, m);
        }
        match r {
            Ok(p) => {
                count += 1;
                last = Ok(Some(p));
            }
            Err(e) => return (count, Err(e)),
        }
    }
    (count, last)
}

impl Publication {
    pub(crate) fn from_ready(
        driver: DriverProxy,
        registration_id: i64,
        channel: &str,
        ev: Event,
    ) -> Result<Self, ClientError> {
        Ok(Publication {
            core: PublicationCore::new(driver, registration_id, channel, ev)?,
        })
    }

    /// Position of the publisher (the log's tail).
    pub fn position(&self) -> i64 {
        meta::producer_position(
            &self.log.meta,
            self.log.term_length,
            self.log.initial_term_id,
        )
    }

    #[inline(always)]
    fn new_position(
        &self,
        term_count: i32,
        term_begin: i64,
        result: Append,
    ) -> Result<i64, OfferError> {
        match result {
            Append::Done(offset) => Ok(term_begin + offset as i64),
            Append::Tripped { term_id } => {
                if term_begin + self.log.term_length as i64 >= self.log.max_possible_position {
                    return Err(OfferError::MaxPositionExceeded);
                }
                meta::rotate_log(&self.log.meta, term_count, term_id);
                Err(OfferError::AdminAction)
            }
        }
    }

    /// Reads the active term; `None` when a rotation is in progress.
    #[inline(always)]
    fn active(&self) -> Option<(i32, usize, i64, i64)> {
        let l = &self.log;
        let term_count = meta::active_term_count(&l.meta);
        let index = index_by_term_count(term_count as i64);
        let raw = meta::raw_tail_volatile(&l.meta, index);
        let tid = term_id(raw);
        let offset = raw & 0xFFFF_FFFF;
        if term_count != tid.wrapping_sub(l.initial_term_id) {
            return None;
        }
        let term_begin = (term_count as i64) << l.bits;
        Some((
            term_count,
            index,
            term_begin,
            term_begin + offset.min(l.term_length as i64),
        ))
    }

    /// Appends a message; returns the new stream position.
    #[inline]
    pub fn offer(&self, src: &[u8]) -> Result<i64, OfferError> {
        self.offer_with(src, None)
    }

    /// Appends a message with a reserved value stamped on every fragment.
    ///
    /// The common case (open, one frame, room below the limit, no rotation)
    /// is inlined into the caller; everything else takes [`Self::offer_slow`],
    /// which checks again from the start, in the order that decides which
    /// error a refused offer gets.
    #[inline(always)]
    pub fn offer_with(&self, src: &[u8], reserved: Option<i64>) -> Result<i64, OfferError> {
        let l = &self.log;
        if src.len() <= l.max_payload && self.is_open() {
            if let Some((term_count, index, term_begin, position)) = self.active() {
                if l.has_room(position) {
                    let result = l.appenders[index].append_unfragmented(&l.header, src, reserved);
                    if let Append::Done(offset) = result {
                        return Ok(term_begin + offset as i64);
                    }
                    return self.new_position(term_count, term_begin, result);
                }
            }
        }
        self.offer_slow(src, reserved)
    }

    #[inline(never)]
    fn offer_slow(&self, src: &[u8], reserved: Option<i64>) -> Result<i64, OfferError> {
        self.check_open()?;
        let l = &self.log;
        let Some((term_count, index, term_begin, position)) = self.active() else {
            return Err(OfferError::AdminAction);
        };
        if !l.has_room(position) {
            l.check_length(src.len())?;
            return Err(l.back_pressure_status(position, src.len()));
        }
        let appender = &l.appenders[index];
        let result = if src.len() <= l.max_payload {
            appender.append_unfragmented(&l.header, src, reserved)
        } else {
            l.check_length(src.len())?;
            l.ensure_pages(position + fragmented_length(src.len(), l.max_payload) as i64)?;
            appender.append_fragmented(&l.header, src, l.max_payload, reserved)
        };
        self.new_position(term_count, term_begin, result)
    }

    /// Offers each message in turn (see [`offer_each`]).
    pub fn offer_batch<'a>(
        &self,
        messages: impl IntoIterator<Item = &'a [u8]>,
    ) -> (usize, Result<i64, OfferError>) {
        self.offer_batch_with(messages, |_| None)
    }

    /// As [`Publication::offer_batch`], message `i` (counted from the
    /// first of this call) stamped with `reserved(i)` as its reserved value.
    pub fn offer_batch_with<'a>(
        &self,
        messages: impl IntoIterator<Item = &'a [u8]>,
        mut reserved: impl FnMut(usize) -> Option<i64>,
    ) -> (usize, Result<i64, OfferError>) {
        let (n, r) = offer_each(messages, |i, m| self.offer_with(m, reserved(i)));
        (n, r.map(|p| p.unwrap_or_else(|| self.position())))
    }

    /// Claims space for one unfragmented message of `length` bytes; write it
    /// through the claim and commit (or abort) it.
    pub fn try_claim(&self, length: usize) -> Result<BufferClaim, OfferError> {
        self.check_open()?;
        let l = &self.log;
        if length > l.max_payload {
            return Err(OfferError::MessageTooLong {
                length,
                max: l.max_payload,
            });
        }
        let Some((term_count, index, term_begin, position)) = self.active() else {
            return Err(OfferError::AdminAction);
        };
        if !l.has_room(position) {
            return Err(l.back_pressure_status(position, length));
        }
        match l.appenders[index].claim(&l.header, length) {
            Ok((frame_offset, resulting)) => Ok(BufferClaim {
                logs: l.logs.clone(),
                term: l.appenders[index].term(),
                frame_offset,
                length,
                position: term_begin + resulting as i64,
                done: false,
            }),
            Err(tripped) => Err(self
                .new_position(term_count, term_begin, tripped)
                .unwrap_err()),
        }
    }
}

impl Drop for Publication {
    fn drop(&mut self) {
        self.close_without_waiting();
    }
}

/// A single-writer publication: faster, never shared, own session id.
pub struct ExclusivePublication {
    core: PublicationCore,
    term_id: i32,
    term_offset: i32,
    term_begin_position: i64,
    active_index: usize,
}

impl std::ops::Deref for ExclusivePublication {
    type Target = PublicationCore;
    fn deref(&self) -> &PublicationCore {
        &self.core
    }
}

impl ExclusivePublication {
    pub(crate) fn from_ready(
        driver: DriverProxy,
        registration_id: i64,
        channel: &str,
        ev: Event,
    ) -> Result<Self, ClientError> {
        let core = PublicationCore::new(driver, registration_id, channel, ev)?;
        let log = &core.log;
        let term_count = meta::active_term_count(&log.meta);
        let index = index_by_term_count(term_count as i64);
        let raw = meta::raw_tail_volatile(&log.meta, index);
        let tid = term_id(raw);
        let offset = term_offset(raw, log.term_length as i64);
        let term_begin_position = compute_position(tid, 0, log.bits, log.initial_term_id);
        Ok(ExclusivePublication {
            core,
            term_id: tid,
            term_offset: offset,
            term_begin_position,
            active_index: index,
        })
    }

    /// Position of the publisher.
    pub fn position(&self) -> i64 {
        self.term_begin_position + self.term_offset as i64
    }

    #[inline(always)]
    fn new_position(&mut self, result: Append) -> Result<i64, OfferError> {
        match result {
            Append::Done(offset) => {
                self.term_offset = offset;
                Ok(self.term_begin_position + offset as i64)
            }
            Append::Tripped { .. } => {
                if self.term_begin_position + self.log.term_length as i64
                    >= self.log.max_possible_position
                {
                    return Err(OfferError::MaxPositionExceeded);
                }
                self.rotate_term();
                Err(OfferError::AdminAction)
            }
        }
    }

    fn rotate_term(&mut self) {
        let next_term_id = self.term_id.wrapping_add(1);
        let next_count = next_term_id.wrapping_sub(self.log.initial_term_id);
        let next_index = index_by_term_count(next_count as i64);
        self.term_id = next_term_id;
        self.term_offset = 0;
        self.term_begin_position += self.log.term_length as i64;
        self.active_index = next_index;
        self.log.meta.put_i64_ordered(
            TERM_TAIL_COUNTERS_OFFSET + 8 * next_index,
            pack_tail(next_term_id, 0),
        );
        self.log
            .meta
            .put_i32_ordered(LOG_ACTIVE_TERM_COUNT_OFFSET, next_count);
    }

    /// Appends a message; returns the new stream position.
    #[inline]
    pub fn offer(&mut self, src: &[u8]) -> Result<i64, OfferError> {
        self.offer_with(src, None)
    }

    /// Offers each message in turn (see [`offer_each`]).
    pub fn offer_batch<'a>(
        &mut self,
        messages: impl IntoIterator<Item = &'a [u8]>,
    ) -> (usize, Result<i64, OfferError>) {
        self.offer_batch_with(messages, |_| None)
    }

    /// As [`ExclusivePublication::offer_batch`], message `i` (counted from
    /// the first of this call) stamped with `reserved(i)` as its reserved value.
    pub fn offer_batch_with<'a>(
        &mut self,
        messages: impl IntoIterator<Item = &'a [u8]>,
        mut reserved: impl FnMut(usize) -> Option<i64>,
    ) -> (usize, Result<i64, OfferError>) {
        let (n, r) = offer_each(messages, |i, m| self.offer_with(m, reserved(i)));
        (n, r.map(|p| p.unwrap_or_else(|| self.position())))
    }

    /// Appends a message with a reserved value stamped on every fragment.
    ///
    /// The common case (open, one frame, room below the limit, the term not
    /// full) is inlined into the caller; everything else takes
    /// [`Self::offer_slow`], which checks again from the start, in the order
    /// that decides which error a refused offer gets.
    #[inline(always)]
    pub fn offer_with(&mut self, src: &[u8], reserved: Option<i64>) -> Result<i64, OfferError> {
        let l = &self.log;
        let position = self.term_begin_position + self.term_offset as i64;
        if src.len() <= l.max_payload && self.is_open() && l.has_room(position) {
            let result = l.appenders[self.active_index].exclusive_append_unfragmented(
                &l.header,
                self.term_id,
                self.term_offset,
                src,
                reserved,
            );
            if let Append::Done(offset) = result {
                self.term_offset = offset;
                return Ok(self.term_begin_position + offset as i64);
            }
            return self.new_position(result);
        }
        self.offer_slow(src, reserved)
    }

    #[inline(never)]
    fn offer_slow(&mut self, src: &[u8], reserved: Option<i64>) -> Result<i64, OfferError> {
        self.check_open()?;
        let l = &self.log;
        let position = self.term_begin_position + self.term_offset as i64;
        if !l.has_room(position) {
            l.check_length(src.len())?;
            return Err(l.back_pressure_status(position, src.len()));
        }
        let appender = &l.appenders[self.active_index];
        let result = if src.len() <= l.max_payload {
            appender.exclusive_append_unfragmented(
                &l.header,
                self.term_id,
                self.term_offset,
                src,
                reserved,
            )
        } else {
            l.check_length(src.len())?;
            l.ensure_pages(position + fragmented_length(src.len(), l.max_payload) as i64)?;
            appender.exclusive_append_fragmented(
                &l.header,
                self.term_id,
                self.term_offset,
                src,
                l.max_payload,
                reserved,
            )
        };
        self.new_position(result)
    }

    /// Claims space for one unfragmented message (see [`Publication::try_claim`]).
    pub fn try_claim(&mut self, length: usize) -> Result<BufferClaim, OfferError> {
        self.check_open()?;
        let l = &self.log;
        if length > l.max_payload {
            return Err(OfferError::MessageTooLong {
                length,
                max: l.max_payload,
            });
        }
        let position = self.term_begin_position + self.term_offset as i64;
        if !l.has_room(position) {
            return Err(l.back_pressure_status(position, length));
        }
        let appender = l.appenders[self.active_index];
        match appender.exclusive_claim(&l.header, self.term_id, self.term_offset, length) {
            Ok((frame_offset, resulting)) => {
                let logs = l.logs.clone();
                self.term_offset = resulting;
                Ok(BufferClaim {
                    logs,
                    term: appender.term(),
                    frame_offset,
                    length,
                    position: self.term_begin_position + resulting as i64,
                    done: false,
                })
            }
            Err(tripped) => Err(self.new_position(tripped).unwrap_err()),
        }
    }
}

impl Drop for ExclusivePublication {
    fn drop(&mut self) {
        self.close_without_waiting();
    }
}

/// Space claimed in a term for one message. Dropping an uncommitted claim aborts it,
/// so a forgotten claim never blocks the stream.
pub struct BufferClaim {
    logs: Arc<LogBuffers>,
    term: AtomicBuffer,
    frame_offset: usize,
    length: usize,
    position: i64,
    done: bool,
}

impl BufferClaim {
    /// The writable payload (one view at a time: it borrows the claim mutably).
    pub fn buffer(&mut self) -> &mut [u8] {
        self.term
            .slice_mut(self.frame_offset + DATA_HEADER_LENGTH, self.length)
    }

    /// Address and length of the payload (for zero-copy views).
    pub fn raw_parts(&self) -> (*mut u8, usize) {
        (
            unsafe {
                self.term
                    .as_ptr()
                    .add(self.frame_offset + DATA_HEADER_LENGTH)
            },
            self.length,
        )
    }

    /// Payload length.
    pub fn length(&self) -> usize {
        self.length
    }

    /// Stream position after this message.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// Sets the reserved value of the frame.
    pub fn set_reserved_value(&self, value: i64) {
        self.term.put_i64(
            self.frame_offset + sulis_protocol::frame::RESERVED_VALUE_FIELD_OFFSET,
            value,
        );
    }

    /// True once committed or aborted.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Publishes the message.
    pub fn commit(&mut self) {
        if !self.done {
            self.done = true;
            term_appender::commit(&self.term, self.frame_offset);
        }
    }

    /// Withdraws the message: it becomes padding that readers skip.
    pub fn abort(&mut self) {
        if !self.done {
            self.done = true;
            term_appender::abort(&self.term, self.frame_offset);
        }
    }

    /// The log the claim lives in (kept mapped while the claim exists).
    pub fn logs(&self) -> &Arc<LogBuffers> {
        &self.logs
    }
}

impl Drop for BufferClaim {
    fn drop(&mut self) {
        self.abort();
    }
}

impl ExclusivePublication {
    /// Appends a block of whole, 32-byte aligned frames at the current
    /// position, as an archive replays a recording: each frame keeps its
    /// length, flags, type and reserved value (so fragmented messages stay
    /// fragmented as published), and takes this publication's session id,
    /// stream id, term id and term offset. The block must lie within the
    /// current term; a block that would cross the term's end is refused
    /// with [`OfferError::MessageTooLong`] naming the room left (read
    /// blocks up to the term boundary, as a recording's reader does).
    pub fn offer_block(&mut self, block: &[u8]) -> Result<i64, OfferError> {
        self.check_open()?;
        if block.is_empty() {
            return Ok(self.position());
        }
        let l = &self.log;
        let room = l.term_length - self.term_offset as usize;
        if block.len() > room || !block.len().is_multiple_of(32) {
            return Err(OfferError::MessageTooLong {
                length: block.len(),
                max: room,
            });
        }
        let position = self.term_begin_position + self.term_offset as i64;
        if !l.has_room(position + block.len() as i64 - 1) {
            return Err(l.back_pressure_status(position, block.len()));
        }
        let appender = l.appenders[self.active_index];
        let term_length = l.term_length;
        let max_possible_position = l.max_possible_position;
        let session_id = self.session_id();
        let stream_id = self.stream_id();
        match appender.exclusive_append_block(
            self.term_id,
            self.term_offset,
            block,
            session_id,
            stream_id,
        ) {
            Some(resulting) => {
                self.term_offset = resulting;
                // A block that fills the term moves the publication on to
                // the next one, as a padding frame would.
                if resulting as usize == term_length
                    && self.term_begin_position + (term_length as i64) < max_possible_position
                {
                    self.rotate_term();
                }
                Ok(self.position())
            }
            None => Err(OfferError::MessageTooLong {
                length: block.len(),
                max: room,
            }),
        }
    }
}
