//! Replays (Aeron's `ReplaySession`): an exclusive publication placed at
//! the recording's position, fed with the recorded frames as they are.

use super::*;

/// How many replays may wait for a slot, as a multiple of the limit.
pub(super) const REPLAY_QUEUE_FACTOR: usize = 8;

/// What a replay request asks for.
pub(super) struct ReplayParams {
    pub(super) recording_id: i64,
    pub(super) position: i64,
    pub(super) length: i64,
    pub(super) replay_channel: String,
    pub(super) replay_stream_id: i32,
    /// Cap on each read (`-1` or `0`: the archive's `file_io_max_length`).
    pub(super) file_io_max_length: i32,
    pub(super) limit_counter: Option<LimitCounter>,
}

pub(super) enum ReplayState {
    Connecting { deadline_ns: i64 },
    Replaying,
}

/// The counter a bounded replay may not pass (a counter of the archive's driver).
#[derive(Clone, Copy)]
pub(super) struct LimitCounter {
    pub(super) id: i32,
    pub(super) registration_id: i64,
    /// Its value when last read.
    pub(super) last: i64,
    /// False once it was freed (or reused): `last` is where it ended.
    pub(super) open: bool,
}

impl LimitCounter {
    /// Reads the counter; returns where the replay may go.
    pub(super) fn read(&mut self, counters: &sulis_concurrent::counters::CountersReader) -> i64 {
        if self.open {
            if counters.counter_state(self.id) == sulis_concurrent::counters::RECORD_ALLOCATED
                && counters.counter_registration_id(self.id) == self.registration_id
            {
                self.last = counters.counter_value(self.id);
            } else {
                self.open = false;
            }
        }
        self.last
    }
}

/// Where a replay's frames go: its exclusive publication (a fake in tests).
pub(super) trait ReplayPublication: Send {
    /// Its subscriber is there.
    fn is_connected(&self) -> bool;
    /// Its position.
    fn position(&self) -> i64;
    /// How far it may go now (its window).
    fn position_limit(&self) -> i64;
    /// Appends a block of whole frames as they are.
    fn offer_block(&mut self, block: &[u8]) -> Result<(), OfferError>;
}

impl ReplayPublication for ExclusivePublication {
    fn is_connected(&self) -> bool {
        (**self).is_connected()
    }
    fn position(&self) -> i64 {
        ExclusivePublication::position(self)
    }
    fn position_limit(&self) -> i64 {
        (**self).position_limit()
    }
    fn offer_block(&mut self, block: &[u8]) -> Result<(), OfferError> {
        ExclusivePublication::offer_block(self, block).map(|_| ())
    }
}

/// What the recording being replayed is doing, as the conductor sees it.
#[derive(Clone, Copy, Debug)]
pub(super) struct RecordingNow {
    /// Recorded so far, while it records.
    pub(super) live: Option<i64>,
    /// Its stop position, once stopped.
    pub(super) stopped_at: Option<i64>,
}

pub(super) struct ReplaySession {
    pub(super) id: i64,
    /// Bounded by this counter too (BoundedReplayRequest).
    pub(super) limit_counter: Option<LimitCounter>,
    pub(super) recording_id: i64,
    pub(super) control_session_id: i64,
    pub(super) correlation_id: i64,
    pub(super) publication: Box<dyn ReplayPublication>,
    pub(super) reader: SegmentReader,
    /// Where the replay stops (`None`: follow the live recording).
    pub(super) end: Option<i64>,
    pub(super) state: ReplayState,
    pub(super) buf: Vec<u8>,
    /// A block read but not yet published (back pressure).
    pub(super) pending: usize,
    pub(super) done: bool,
    /// Where it reads next, for the conductor: retention leaves every
    /// segment from this one on.
    pub(super) read_position: Arc<std::sync::atomic::AtomicI64>,
}

/// A replay the replayer runs, as the conductor sees it.
pub(super) struct ActiveReplay {
    pub(super) recording_id: i64,
    /// The replay's [`ReplaySession::read_position`].
    pub(super) read_position: Arc<std::sync::atomic::AtomicI64>,
}

impl ArchiveConductor {
    /// A replay request: answered OK with the replay session id once its
    /// publication is there. Beyond `max_concurrent_replays` replays at
    /// once, a replay waits (its subscriber connected) until one ends, as
    /// many Spark tasks starting together need; only past
    /// [`REPLAY_QUEUE_FACTOR`] times the limit is one refused.
    pub(super) fn start_replay(&mut self, sid: i64, k: i64, p: ReplayParams) {
        let ReplayParams {
            recording_id,
            position,
            length,
            replay_channel,
            replay_stream_id,
            file_io_max_length,
            limit_counter,
        } = p;
        let replay_channel = replay_channel.as_str();
        let max = self.ctx.max_concurrent_replays;
        if self.active_replays.len() >= max.saturating_mul(REPLAY_QUEUE_FACTOR) {
            let waiting = self.active_replays.len().saturating_sub(max);
            let message =
                format!("max concurrent replays reached: {max} replaying and {waiting} waiting");
            return self
                .session(sid)
                .error(k, error_code::MAX_REPLAYS, &message);
        }
        let Some(d) = self.catalog.recording(recording_id) else {
            return self.unknown_recording(sid, k, recording_id);
        };
        if let Some(why) = crate::catalog::impossible_geometry(&d) {
            let message = format!("recording {recording_id} {why}: it cannot be replayed");
            return self.session(sid).error(k, error_code::GENERIC, &message);
        }
        if file_io_max_length > 0 && file_io_max_length < d.mtu_length {
            let message = format!(
                "fileIoMaxLength {file_io_max_length} is below the MTU of recording {recording_id} ({})",
                d.mtu_length
            );
            return self.session(sid).error(k, error_code::GENERIC, &message);
        }
        let live = self.live_position(recording_id);
        let recorded_end = live.unwrap_or(d.stop_position);
        let start = if position == NULL_VALUE {
            d.start_position
        } else {
            position
        };
        if start & 31 != 0 || start < d.start_position || start > recorded_end {
            return self.session(sid).error(
                k,
                error_code::INVALID_POSITION,
                &format!(
                    "requested replay start position {start} is not a frame position within the recording {recording_id} \
                     [{}, {recorded_end}]",
                    d.start_position
                ),
            );
        }
        let g = Self::geometry_of(recording_id, &d);
        if start > d.start_position && start < recorded_end {
            // A frame must begin there, as Aeron checks: its header says so.
            let mut header = [0u8; 64];
            // A segment in the object store is not waited for here (its fetch starts, for the replay to
            // read): the replay checks its frames as it reads them.
            let mut reader =
                SegmentReader::new(&self.ctx.archive_dir, g, start).with_tier(self.tier.clone());
            match reader.read(&mut header, recorded_end) {
                Ok(_) | Err(ReadError::BufferTooSmall(_)) | Err(ReadError::Fetching) => {}
                Err(ReadError::Corrupt { reason, .. }) => {
                    return self.session(sid).error(
                        k,
                        error_code::INVALID_POSITION,
                        &format!(
                            "requested replay start position {start} of recording {recording_id} is not where a \
                             frame begins ({reason}): start at a message's position"
                        ),
                    )
                }
                Err(e) => return self.session(sid).error(k, error_code::GENERIC, &e.to_string()),
            }
        }
        let end = match length {
            REPLAY_ALL_AND_FOLLOW if live.is_some() => None,
            REPLAY_ALL_AND_FOLLOW | REPLAY_ALL_AND_STOP => Some(recorded_end),
            l if l >= 0 && l != i64::MAX => Some(match live {
                Some(_) => start.saturating_add(l),
                None => start.saturating_add(l).min(recorded_end),
            }),
            i64::MAX => {
                if live.is_some() {
                    None
                } else {
                    Some(recorded_end)
                }
            }
            l => {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!(
                        "replay length {l} is neither a length, -1 (follow) nor -2 (to the end)"
                    ),
                );
            }
        };
        let term_length = d.term_buffer_length as i64;
        let channel = match replay_publication_channel(replay_channel, &d, start) {
            Ok(c) => c,
            Err(e) => {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!("replay channel: {e}"),
                )
            }
        };
        let publication = match self
            .client
            .add_exclusive_publication(&channel, replay_stream_id)
        {
            Ok(p) => p,
            Err(e) => {
                return self
                    .session(sid)
                    .error(k, error_code::GENERIC, &e.to_string())
            }
        };
        let replay_id = self.next_replay_id;
        self.next_replay_id += 1;
        let id = (replay_id << 32) | (publication.session_id() as u32 as i64);
        // The request's fileIoMaxLength (Aeron 1.40+) caps the reads, as
        // long as a frame fits.
        let io_max = match file_io_max_length {
            n if n <= 0 => self.ctx.file_io_max_length,
            n => n as usize,
        };
        let buf = vec![0u8; io_max.min(term_length as usize).max(4096)];
        let read_position = Arc::new(std::sync::atomic::AtomicI64::new(start));
        let session = ReplaySession {
            id,
            limit_counter,
            recording_id,
            control_session_id: sid,
            correlation_id: k,
            publication: Box::new(publication),
            reader: SegmentReader::new(&self.ctx.archive_dir, g, start)
                .with_checksum(self.ctx.replay_checksum)
                .with_tier(self.tier.clone()),
            end,
            state: ReplayState::Connecting {
                deadline_ns: self.now_ns() + self.ctx.connect_timeout.as_nanos() as i64,
            },
            buf,
            pending: 0,
            done: false,
            read_position: read_position.clone(),
        };
        let watch = RecordingWatch {
            live: self
                .active_recordings
                .get(&recording_id)
                .map(|a| a.position.clone()),
            stopped_at: live.is_none().then_some(d.stop_position),
        };
        self.active_replays.insert(
            id,
            ActiveReplay {
                recording_id,
                read_position,
            },
        );
        let _ = self
            .replayer_link
            .commands
            .send(ReplayerCommand::Add(Box::new(session), watch));
        self.session(sid).ok(k, id);
    }

    /// Stops the replays `which(replay id, recording id)` picks. They count
    /// as ended from now on (the replayer takes the command before it
    /// reads again), so a request right after sees none of them.
    pub(super) fn stop_replays(&mut self, which: impl Fn(i64, i64) -> bool) {
        let stopped: Vec<i64> = self
            .active_replays
            .iter()
            .filter(|(&id, r)| which(id, r.recording_id))
            .map(|(&id, _)| id)
            .collect();
        for id in stopped {
            self.active_replays.remove(&id);
            let _ = self.replayer_link.commands.send(ReplayerCommand::Stop(id));
        }
    }

    /// Runs the replayer (when it shares this thread) and takes what it reported.
    pub(super) fn run_replays(&mut self, _now_ns: i64) -> usize {
        let mut work = self.replayer.as_mut().map_or(0, |r| r.do_work());
        while let Ok(event) = self.replayer_link.events.try_recv() {
            work += 1;
            match event {
                ReplayerEvent::Failed {
                    control_session_id,
                    correlation_id,
                    message,
                } => {
                    if let Some(s) = self.sessions.get_mut(&control_session_id) {
                        s.error(correlation_id, error_code::GENERIC, &message);
                    }
                    self.record_error(message);
                }
                ReplayerEvent::Ended(id) => {
                    self.active_replays.remove(&id);
                }
            }
        }
        work
    }
}

impl ReplaySession {
    /// One duty cycle at `now_ns`: waits for the subscriber, then reads
    /// what the publication's window takes (never past the end asked for,
    /// what is recorded, or a limit counter) and offers it. Returns the
    /// work done; an error (the replay is then done) names what failed.
    /// A connected replay starts only when `may_start` (a slot is free);
    /// until then it waits, connected, with no deadline.
    pub(super) fn do_work(
        &mut self,
        now_ns: i64,
        rec: RecordingNow,
        may_start: bool,
        counters: &sulis_concurrent::counters::CountersReader,
        stats: &ReplayerCounters,
    ) -> Result<usize, String> {
        if self.done {
            return Ok(0);
        }
        let mut work = 0;
        if let ReplayState::Connecting { deadline_ns } = self.state {
            if self.publication.is_connected() {
                if !may_start {
                    return Ok(0);
                }
                self.state = ReplayState::Replaying;
                work += 1;
            } else if now_ns >= deadline_ns {
                self.done = true;
                return Err(format!(
                    "replay {} of recording {}: no subscriber connected within the connect timeout",
                    self.id, self.recording_id
                ));
            } else {
                return Ok(0);
            }
        }
        // What may be sent: to the end asked for, never past what is
        // recorded nor past a limit counter.
        let mut recorded = rec.live.or(rec.stopped_at).unwrap_or(NULL_VALUE);
        let mut counter_closed = false;
        if let Some(c) = &mut self.limit_counter {
            recorded = recorded.min(c.read(counters));
            counter_closed = !c.open;
        }
        let limit = match self.end {
            Some(end) => end.min(recorded),
            None => recorded,
        };
        // Read no more than the publication can take now (its window): a
        // frame that does not fit waits for the window to open.
        let window =
            (self.publication.position_limit() - self.publication.position()).max(0) as usize;
        let room = window.min(self.buf.len());
        if self.pending == 0 && self.reader.position() < limit && room >= 32 {
            let started = Instant::now();
            let read = self.reader.read(&mut self.buf[..room], limit);
            ArchiveCounters::time(
                &stats.total_read_time,
                &stats.max_read_time,
                started.elapsed().as_nanos() as i64,
            );
            match read {
                // The next frame ends past the end asked for (a length
                // that ends inside a frame): the replay ends before it.
                Ok(0) if self.end == Some(limit) => self.end = Some(self.reader.position()),
                Ok(n) => {
                    self.pending = n;
                    self.read_position
                        .store(self.reader.position(), std::sync::atomic::Ordering::Release);
                    ArchiveCounters::add(&stats.read_bytes, n as i64);
                }
                Err(ReadError::BufferTooSmall(_)) | Err(ReadError::Fetching) => {}
                Err(e) => {
                    self.done = true;
                    return Err(e.to_string());
                }
            }
        }
        if self.pending > 0 {
            match self.publication.offer_block(&self.buf[..self.pending]) {
                Ok(()) => {
                    self.pending = 0;
                    work += 1;
                }
                Err(OfferError::BackPressured) | Err(OfferError::AdminAction) => {}
                Err(OfferError::NotConnected) => {
                    // The replay's subscriber went away: nothing to replay to.
                    self.done = true;
                }
                Err(e) => {
                    self.done = true;
                    return Err(format!(
                        "replay {} of recording {}: {e:?}",
                        self.id, self.recording_id
                    ));
                }
            }
        }
        let at = self.reader.position();
        let finished = self.pending == 0
            && if self.limit_counter.is_some() {
                // A counter bound waits for the counter to move on: the
                // replay ends at its length, at the end of a stopped
                // recording, or where the counter was when it closed.
                self.end.is_some_and(|end| at >= end)
                    || rec.stopped_at.is_some_and(|stop| at >= stop)
                    || (counter_closed && at >= recorded)
            } else {
                match self.end {
                    Some(end) => at >= end.min(recorded) && (rec.live.is_none() || at >= end),
                    None => rec.live.is_none() && at >= recorded,
                }
            };
        if finished {
            self.done = true;
        }
        Ok(work)
    }
}

/// The replay publication's channel: the client's channel placed at the
/// recording's position, with its term length, initial term id and MTU, so
/// positions in the replay are the recording's.
pub(super) fn replay_publication_channel(
    channel: &str,
    d: &RecordingDescriptor,
    position: i64,
) -> Result<String, String> {
    let uri = sulis_protocol::uri::ChannelUri::parse(channel).map_err(|e| e.to_string())?;
    for k in [
        "init-term-id",
        "term-id",
        "term-offset",
        "term-length",
        "mtu",
    ] {
        if uri.get(k).is_some() {
            return Err(format!(
                "'{k}' is set by the archive; leave it out of the replay channel '{channel}'"
            ));
        }
    }
    let term_length = d.term_buffer_length as i64;
    let term_id = d
        .initial_term_id
        .wrapping_add((position / term_length) as i32);
    let term_offset = position % term_length;
    let mut out = channel.to_string();
    out.push(if out.contains('?') { '|' } else { '?' });
    out.push_str(&format!(
        "init-term-id={}|term-id={term_id}|term-offset={term_offset}|term-length={term_length}|mtu={}",
        d.initial_term_id, d.mtu_length
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::tests::{geometry, record, TempDir, TERM};
    use std::sync::{Arc, Mutex};
    use sulis_concurrent::counters::CountersReader;
    use sulis_concurrent::AtomicBuffer;

    /// A replay publication that keeps what it is given, with a window and
    /// a connection the test sets.
    #[derive(Clone)]
    struct Pub(Arc<Mutex<PubState>>);

    struct PubState {
        connected: bool,
        window: i64,
        refuse: Option<OfferError>,
        bytes: Vec<u8>,
        start: i64,
    }

    impl ReplayPublication for Pub {
        fn is_connected(&self) -> bool {
            self.0.lock().unwrap().connected
        }
        fn position(&self) -> i64 {
            let s = self.0.lock().unwrap();
            s.start + s.bytes.len() as i64
        }
        fn position_limit(&self) -> i64 {
            let s = self.0.lock().unwrap();
            s.start + s.bytes.len() as i64 + s.window
        }
        fn offer_block(&mut self, block: &[u8]) -> Result<(), OfferError> {
            let mut s = self.0.lock().unwrap();
            if let Some(e) = s.refuse.clone() {
                return Err(e);
            }
            s.bytes.extend_from_slice(block);
            Ok(())
        }
    }

    fn no_counters() -> CountersReader {
        let buf: &'static mut [u64] = Box::leak(vec![0u64; 64].into_boxed_slice());
        // SAFETY: a leaked buffer, alive for the test.
        let b = unsafe { AtomicBuffer::new(buf.as_mut_ptr() as *mut u8, 0) };
        CountersReader::new(b, b)
    }

    fn replay(dir: &TempDir, from: i64, end: Option<i64>, now_ns: i64) -> (ReplaySession, Pub) {
        let p = Pub(Arc::new(Mutex::new(PubState {
            connected: false,
            window: 1 << 20,
            refuse: None,
            bytes: Vec::new(),
            start: from,
        })));
        let session = ReplaySession {
            id: 1,
            limit_counter: None,
            recording_id: 4,
            control_session_id: 2,
            correlation_id: 3,
            publication: Box::new(p.clone()),
            reader: SegmentReader::new(&dir.0, geometry(0), from),
            end,
            state: ReplayState::Connecting {
                deadline_ns: now_ns + 5_000_000_000,
            },
            buf: vec![0u8; TERM as usize],
            pending: 0,
            done: false,
            read_position: Arc::new(std::sync::atomic::AtomicI64::new(from)),
        };
        (session, p)
    }

    fn recorded_bytes(frames: &[(i64, Vec<u8>)], from: i64, to: i64) -> Vec<u8> {
        let mut out = Vec::new();
        for (p, f) in frames.iter().filter(|(p, _)| *p >= from && *p < to) {
            let mut f = f.clone();
            if f[6] == 0 && f[7] == 0 && *p >= 0 {
                // Padding: only its header is on disk, its body reads as zeros.
                f[32..].fill(0);
            }
            out.extend_from_slice(&f);
        }
        out
    }

    #[test]
    fn should_wait_for_its_subscriber_until_the_connect_timeout() {
        let dir = TempDir::new("replay-connect");
        let (clock, hand) = NanoClock::manual();
        record(&dir.0, geometry(0), 0, 4096, 100);
        let (mut r, p) = replay(&dir, 0, Some(4096), clock.now_ns());
        let stopped = RecordingNow {
            live: None,
            stopped_at: Some(4096),
        };
        let (counters, stats) = (no_counters(), ReplayerCounters::default());
        hand.advance_ns(4_999_999_999);
        assert_eq!(
            r.do_work(clock.now_ns(), stopped, true, &counters, &stats),
            Ok(0)
        );
        assert!(!r.done);
        hand.advance_ns(1);
        let err = r
            .do_work(clock.now_ns(), stopped, true, &counters, &stats)
            .unwrap_err();
        assert!(
            err.contains("no subscriber connected within the connect timeout"),
            "{err}"
        );
        assert!(r.done && p.0.lock().unwrap().bytes.is_empty());
    }

    #[test]
    fn should_send_a_stopped_recording_as_recorded_within_the_window_and_through_back_pressure() {
        let dir = TempDir::new("replay-stopped");
        let g = geometry(0);
        let frames = record(&dir.0, g, 0, 3 * TERM + 1000, 300);
        let stop = frames.last().map(|(p, f)| p + f.len() as i64).unwrap();
        let (clock, _) = NanoClock::manual();
        let (mut r, p) = replay(&dir, 0, Some(stop), clock.now_ns());
        let now = RecordingNow {
            live: None,
            stopped_at: Some(stop),
        };
        let (counters, stats) = (no_counters(), ReplayerCounters::default());
        {
            let mut s = p.0.lock().unwrap();
            s.connected = true;
            s.window = 1000; // room for three 352-byte frames at most
        }
        r.do_work(clock.now_ns(), now, true, &counters, &stats)
            .unwrap();
        assert_eq!(
            p.0.lock().unwrap().bytes.len(),
            2 * 352,
            "no more than the window takes"
        );
        p.0.lock().unwrap().refuse = Some(OfferError::BackPressured);
        p.0.lock().unwrap().window = 1 << 20;
        for _ in 0..3 {
            r.do_work(clock.now_ns(), now, true, &counters, &stats)
                .unwrap();
        }
        assert_eq!(
            p.0.lock().unwrap().bytes.len(),
            2 * 352,
            "held while back pressured"
        );
        assert!(
            r.pending > 0,
            "the block read stays in hand, not read again"
        );
        p.0.lock().unwrap().refuse = None;
        while !r.done {
            r.do_work(clock.now_ns(), now, true, &counters, &stats)
                .unwrap();
        }
        assert_eq!(p.0.lock().unwrap().bytes, recorded_bytes(&frames, 0, stop));
    }

    #[test]
    fn should_wait_connected_for_a_free_slot_without_a_deadline() {
        let dir = TempDir::new("replay-queued");
        let frames = record(&dir.0, geometry(0), 0, 4096, 100);
        let stop = frames.last().map(|(p, f)| p + f.len() as i64).unwrap();
        let (clock, hand) = NanoClock::manual();
        let (mut r, p) = replay(&dir, 0, Some(stop), clock.now_ns());
        p.0.lock().unwrap().connected = true;
        let now = RecordingNow {
            live: None,
            stopped_at: Some(stop),
        };
        let (counters, stats) = (no_counters(), ReplayerCounters::default());
        hand.advance_ns(60_000_000_000);
        assert_eq!(
            r.do_work(clock.now_ns(), now, false, &counters, &stats),
            Ok(0)
        );
        assert!(
            !r.done && p.0.lock().unwrap().bytes.is_empty(),
            "waiting, past the connect timeout"
        );
        while !r.done {
            r.do_work(clock.now_ns(), now, true, &counters, &stats)
                .unwrap();
        }
        assert_eq!(p.0.lock().unwrap().bytes, recorded_bytes(&frames, 0, stop));
    }

    #[test]
    fn should_follow_a_live_recording_and_end_when_it_stops() {
        let dir = TempDir::new("replay-live");
        let g = geometry(0);
        let frames = record(&dir.0, g, 0, 8 * 1024, 200);
        let (clock, _) = NanoClock::manual();
        let (mut r, p) = replay(&dir, 0, None, clock.now_ns());
        p.0.lock().unwrap().connected = true;
        let (counters, stats) = (no_counters(), ReplayerCounters::default());
        let half = frames[frames.len() / 2].0;
        let live = RecordingNow {
            live: Some(half),
            stopped_at: None,
        };
        for _ in 0..4 {
            r.do_work(clock.now_ns(), live, true, &counters, &stats)
                .unwrap();
        }
        assert_eq!(
            p.0.lock().unwrap().bytes,
            recorded_bytes(&frames, 0, half),
            "up to what is recorded"
        );
        assert!(!r.done, "following");
        let stop = frames.last().map(|(p, f)| p + f.len() as i64).unwrap();
        let stopped = RecordingNow {
            live: None,
            stopped_at: Some(stop),
        };
        while !r.done {
            r.do_work(clock.now_ns(), stopped, true, &counters, &stats)
                .unwrap();
        }
        assert_eq!(p.0.lock().unwrap().bytes, recorded_bytes(&frames, 0, stop));
    }

    #[test]
    fn should_fail_naming_the_file_at_a_torn_frame_after_sending_the_frames_before_it() {
        let dir = TempDir::new("replay-torn");
        let g = geometry(0);
        let frames = record(&dir.0, g, 0, 4096, 100);
        let (bad, _) = frames[5];
        crate::segment::tests::tear(&dir.0, g, bad);
        let (clock, _) = NanoClock::manual();
        let (mut r, p) = replay(&dir, 0, Some(4096), clock.now_ns());
        p.0.lock().unwrap().connected = true;
        let now = RecordingNow {
            live: None,
            stopped_at: Some(4096),
        };
        let (counters, stats) = (no_counters(), ReplayerCounters::default());
        let mut result = Ok(0);
        while !r.done {
            result = r.do_work(clock.now_ns(), now, true, &counters, &stats);
        }
        let err = result.unwrap_err();
        assert!(
            err.contains("4-0.rec") && err.contains(&format!("position {bad}")),
            "{err}"
        );
        assert_eq!(p.0.lock().unwrap().bytes, recorded_bytes(&frames, 0, bad));
    }
}
