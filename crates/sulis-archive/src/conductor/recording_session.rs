//! Recording (Aeron's `RecordingSession` and the conductor's part): a
//! subscription per request, a recording per image, its frames written
//! block by block into segment files, its end written to the catalog.

use super::*;

pub(super) struct RecordingSubscription {
    pub(super) subscription: Subscription,
    pub(super) key: String,
    pub(super) original_channel: String,
    pub(super) stripped_channel: String,
    pub(super) stream_id: i32,
    pub(super) auto_stop: bool,
    pub(super) control_session_id: i64,
    pub(super) correlation_id: i64,
    /// Extending this recording (else each image is a new recording).
    pub(super) extend: Option<i64>,
    /// Recording sessions running on its images.
    pub(super) active: usize,
    /// Stop once its recordings end (auto stop, or stopped by request).
    pub(super) closing: bool,
}

/// What a recording reads: an image of the recorded stream (a fake in tests).
pub(super) trait RecordedImage: Send + Sync {
    /// Where it is.
    fn position(&self) -> i64;
    /// Hands over blocks of whole frames of one term (a padding frame
    /// alone), at most `max` bytes, never past `limit`; returns the bytes.
    fn block_poll(&self, max: usize, limit: i64, f: &mut dyn FnMut(&[u8])) -> usize;
    /// Its publication ended it.
    fn is_end_of_stream(&self) -> bool;
    /// Gone.
    fn is_closed(&self) -> bool;
    /// Its term length.
    fn term_buffer_length(&self) -> usize;
}

impl RecordedImage for Image {
    fn position(&self) -> i64 {
        Image::position(self)
    }
    fn block_poll(&self, max: usize, limit: i64, f: &mut dyn FnMut(&[u8])) -> usize {
        self.bounded_block_poll(max, limit, |block, _| f(block))
    }
    fn is_end_of_stream(&self) -> bool {
        Image::is_end_of_stream(self)
    }
    fn is_closed(&self) -> bool {
        Image::is_closed(self)
    }
    fn term_buffer_length(&self) -> usize {
        Image::term_buffer_length(self)
    }
}

/// What one duty cycle of a recording did.
#[derive(Default)]
pub(super) struct RecordingWork {
    pub(super) work: usize,
    /// It moved on (a progress event is due).
    pub(super) progressed: bool,
    /// It moved to its live image at this position (`NULL_VALUE`: the
    /// live image was too far behind, so it goes on alone).
    pub(super) merged: Option<i64>,
    /// It ended, with the write failure that ended it, if any.
    pub(super) ended: Option<Option<std::io::Error>>,
}

pub(super) struct RecordingSession {
    pub(super) recording_id: i64,
    pub(super) subscription_id: i64,
    pub(super) image: Arc<dyn RecordedImage>,
    pub(super) writer: RecordingWriter,
    /// Its position counter in the driver's CnC (none in tests).
    pub(super) counter: Option<Counter>,
    /// Its position, for the conductor (the recorder may run on another thread).
    pub(super) position: Arc<std::sync::atomic::AtomicI64>,
    pub(super) control_session_id: i64,
    pub(super) correlation_id: i64,
    /// Stopped by request: end at once.
    pub(super) aborted: bool,
    /// Live merge (replication): record up to this position, then go on
    /// with this image.
    pub(super) merge_into: Option<(i64, Arc<dyn RecordedImage>)>,
    /// The live image's subscription, kept open while it is recorded.
    pub(super) live_subscription: Option<Subscription>,
    /// The recording's start position (for its events).
    pub(super) start_position: i64,
    /// After a live merge that the replay had gone past: the live image's
    /// frames up to here were recorded from the replay and are skipped as
    /// they arrive (the image is never moved past what it received).
    pub(super) skip_to: Option<i64>,
}

/// A recording request's parameters.
pub(super) struct StartRecording {
    pub(super) control_session_id: i64,
    pub(super) correlation_id: i64,
    pub(super) stream_id: i32,
    pub(super) channel: String,
    pub(super) auto_stop: bool,
    pub(super) extend: Option<i64>,
    /// The publication is on this driver (`SourceLocation.LOCAL`): a UDP
    /// one is recorded by spying on its log, not through the receiver.
    pub(super) local: bool,
}

impl ArchiveConductor {
    pub(super) fn start_recording(&mut self, r: StartRecording) {
        let (sid, k) = (r.control_session_id, r.correlation_id);
        match self.add_recording_subscription(r) {
            Ok(subscription_id) => self.session(sid).ok(k, subscription_id),
            Err((code, message)) => self.session(sid).error(k, code, &message),
        }
    }

    /// Adds a recording subscription; returns its registration id, or the
    /// error code and message to answer with.
    pub(super) fn add_recording_subscription(
        &mut self,
        r: StartRecording,
    ) -> Result<i64, (i64, String)> {
        if let Some(message) = self.low_storage_space() {
            return Err((error_code::STORAGE_SPACE, message));
        }
        if self.active_recordings.len() >= self.ctx.max_concurrent_recordings {
            return Err((
                error_code::MAX_RECORDINGS,
                format!(
                    "max concurrent recordings reached: {}",
                    self.ctx.max_concurrent_recordings
                ),
            ));
        }
        let (key, stripped) = match (
            recording_key(&r.channel, r.stream_id),
            strip_channel(&r.channel),
        ) {
            (Ok(key), Ok(stripped)) => (key, stripped),
            (Err(e), _) | (_, Err(e)) => return Err((error_code::GENERIC, e.to_string())),
        };
        if self
            .recording_subscriptions
            .iter()
            .any(|s| s.key == key && !s.closing)
        {
            return Err((
                error_code::ACTIVE_SUBSCRIPTION,
                format!(
                    "recording exists for streamId={} channel={}",
                    r.stream_id, r.channel
                ),
            ));
        }
        // A UDP publication of this driver is read in place, as Aeron's
        // archive does: no trip through the sockets and the receiver. The
        // spy connects the publication (as a subscriber of an IPC stream
        // does), so recording needs no receiver nor a driver set to
        // `spies_simulate_connection`, which Aeron's archive needs.
        let subscribed = if r.local && stripped.starts_with("aeron:udp") {
            sulis_protocol::uri::ChannelUri::parse(&stripped)
                .and_then(|u| u.with("ssc", "true"))
                .map(|u| u.as_spy().to_string())
                .map_err(|e| (error_code::GENERIC, e.to_string()))?
        } else {
            stripped.clone()
        };
        let subscription = self
            .client
            .add_subscription(&subscribed, r.stream_id)
            .map_err(|e| (error_code::GENERIC, e.to_string()))?;
        let subscription_id = subscription.registration_id();
        self.recording_subscriptions.push(RecordingSubscription {
            subscription,
            key,
            original_channel: r.channel,
            stripped_channel: stripped,
            stream_id: r.stream_id,
            auto_stop: r.auto_stop,
            control_session_id: r.control_session_id,
            correlation_id: r.correlation_id,
            extend: r.extend,
            active: 0,
            closing: false,
        });
        Ok(subscription_id)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn extend_recording(
        &mut self,
        sid: i64,
        k: i64,
        recording_id: i64,
        stream_id: i32,
        channel: String,
        auto_stop: bool,
        local: bool,
    ) {
        let Some(d) = self.catalog.recording(recording_id) else {
            return self.unknown_recording(sid, k, recording_id);
        };
        if d.stream_id != stream_id {
            return self.session(sid).error(
                k,
                error_code::UNKNOWN_RECORDING,
                &format!(
                    "cannot extend recording {recording_id}: its stream id is {}, not {stream_id}",
                    d.stream_id
                ),
            );
        }
        if self.active_recordings.contains_key(&recording_id)
            || self
                .recording_subscriptions
                .iter()
                .any(|s| s.extend == Some(recording_id) && !s.closing)
        {
            return self.session(sid).error(
                k,
                error_code::ACTIVE_RECORDING,
                &format!("cannot extend active recording {recording_id}"),
            );
        }
        self.start_recording(StartRecording {
            control_session_id: sid,
            correlation_id: k,
            stream_id,
            channel,
            auto_stop,
            extend: Some(recording_id),
            local,
        });
    }

    /// Lists a stopped recording under another channel (UpdateChannel).
    pub(super) fn update_channel(&mut self, sid: i64, k: i64, recording_id: i64, channel: &str) {
        if self
            .check_idle(sid, k, recording_id, "update the channel of")
            .is_none()
        {
            return;
        }
        let stripped = match strip_channel(channel) {
            Ok(s) => s,
            Err(e) => {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!("channel '{channel}': {e}"),
                )
            }
        };
        match self
            .catalog
            .replace_channels(recording_id, channel, &stripped)
        {
            Ok(()) => self.session(sid).ok(k, 0),
            Err(e) => self.catalog_failed(
                sid,
                k,
                &format!("update the channel of recording {recording_id}"),
                e,
            ),
        }
    }

    pub(super) fn stop_recording_subscription(&mut self, i: usize) {
        let id = self.recording_subscriptions[i]
            .subscription
            .registration_id();
        self.recording_subscriptions[i].closing = true;
        let _ = self
            .recorder_link
            .commands
            .send(RecorderCommand::AbortSubscription(id));
    }

    pub(super) fn on_image_events(&mut self) -> usize {
        let events = self.client.take_image_events();
        let work = events.len();
        for ev in events {
            match ev {
                ImageEvent::Available {
                    subscription_id,
                    image,
                } => {
                    if let Some(i) = self
                        .recording_subscriptions
                        .iter()
                        .position(|s| s.subscription.registration_id() == subscription_id)
                    {
                        self.on_recorded_image(i, image);
                    }
                }
                ImageEvent::Unavailable {
                    subscription_id,
                    image,
                } => {
                    // A client whose request stream went away: its sessions end.
                    if let Some(c) = self
                        .control
                        .iter()
                        .position(|s| s.registration_id() == subscription_id)
                    {
                        self.assemblers[c].forget_session(image.session_id());
                        for s in self.sessions.values_mut().filter(|s| {
                            s.control_subscription == c
                                && s.request_session_id == image.session_id()
                        }) {
                            s.state = SessionState::Done;
                        }
                    }
                }
            }
        }
        work
    }

    pub(super) fn on_recorded_image(&mut self, i: usize, image: Arc<Image>) {
        let rs = &self.recording_subscriptions[i];
        let (sid, k, subscription_id) = (
            rs.control_session_id,
            rs.correlation_id,
            rs.subscription.registration_id(),
        );
        if rs.closing {
            return;
        }
        let extend = rs.extend;
        let stream_id = rs.stream_id;
        let stripped = rs.stripped_channel.clone();
        let original = rs.original_channel.clone();
        let term_length = image.term_buffer_length() as i64;
        let join = image.join_position();
        let (recording_id, geometry, signal) = match extend {
            Some(id) => {
                let Some(d) = self.catalog.recording(id) else {
                    return;
                };
                let fits = d.stop_position == join
                    && d.initial_term_id == image.initial_term_id()
                    && d.term_buffer_length as i64 == term_length
                    && d.mtu_length as usize == image.mtu_length();
                if !fits {
                    let message = format!(
                        "cannot extend recording {id}: the stream joins at {join} with initial term id {}, term length {term_length}, mtu {}; \
                         the recording stopped at {} with {}, {}, {}",
                        image.initial_term_id(),
                        image.mtu_length(),
                        d.stop_position,
                        d.initial_term_id,
                        d.term_buffer_length,
                        d.mtu_length
                    );
                    if let Some(s) = self.sessions.get_mut(&sid) {
                        s.error(k, error_code::INVALID_EXTENSION, &message);
                    }
                    self.record_error(message);
                    return;
                }
                if let Err(e) = self.catalog.record_extend(id, sid, k, image.session_id()) {
                    return self.record_error(e.to_string());
                }
                let g = Geometry {
                    recording_id: id,
                    start_position: d.start_position,
                    term_length,
                    segment_length: d.segment_file_length as i64,
                    initial_term_id: d.initial_term_id,
                };
                (id, g, recording_signal::EXTEND)
            }
            None => {
                let segment_length = (self.ctx.segment_file_length as i64).max(term_length);
                let d = RecordingDescriptor {
                    control_session_id: sid,
                    correlation_id: k,
                    recording_id: 0,
                    start_timestamp: now_ms(),
                    stop_timestamp: NULL_VALUE,
                    start_position: join,
                    stop_position: NULL_VALUE,
                    initial_term_id: image.initial_term_id(),
                    segment_file_length: segment_length as i32,
                    term_buffer_length: term_length as i32,
                    mtu_length: image.mtu_length() as i32,
                    session_id: image.session_id(),
                    stream_id,
                    stripped_channel: stripped.clone(),
                    original_channel: original,
                    source_identity: image.source_identity().to_string(),
                };
                let id = match self.catalog.add_recording(d) {
                    Ok(id) => id,
                    Err(e) => return self.record_error(e.to_string()),
                };
                let g = Geometry {
                    recording_id: id,
                    start_position: join,
                    term_length,
                    segment_length,
                    initial_term_id: image.initial_term_id(),
                };
                (id, g, recording_signal::START)
            }
        };
        let counter = match self.client.add_counter(
            counter_type::ARCHIVE_RECORDING_POSITION,
            &recording_position_key(
                recording_id,
                image.session_id(),
                image.source_identity(),
                self.archive_id,
                self.ctx.file_sync_level,
            ),
            &recording_position_label(
                recording_id,
                image.session_id(),
                stream_id,
                &stripped,
                self.archive_id,
            ),
        ) {
            Ok(c) => c,
            Err(e) => {
                return self.record_error(format!(
                    "recording {recording_id}: cannot add its position counter: {e}"
                ))
            }
        };
        counter.set(join);
        self.recording_subscriptions[i].active += 1;
        let position = Arc::new(std::sync::atomic::AtomicI64::new(join));
        self.active_recordings.insert(
            recording_id,
            ActiveRecording {
                subscription_id,
                position: position.clone(),
            },
        );
        let session = RecordingSession {
            recording_id,
            subscription_id,
            writer: RecordingWriter::new(
                &self.ctx.archive_dir,
                geometry,
                join,
                self.ctx.file_sync_level,
            )
            .with_checksum(self.ctx.record_checksum),
            image: image.clone(),
            counter: Some(counter),
            control_session_id: sid,
            correlation_id: k,
            aborted: false,
            merge_into: None,
            live_subscription: None,
            start_position: geometry.start_position,
            skip_to: None,
            position,
        };
        let _ = self
            .recorder_link
            .commands
            .send(RecorderCommand::Add(Box::new(session)));
        self.signal(sid, k, recording_id, subscription_id, join, signal);
        let started = RecordingStarted {
            recording_id,
            start_position: geometry.start_position,
            session_id: image.session_id(),
            stream_id,
            channel: self
                .catalog
                .recording(recording_id)
                .map(|d| d.original_channel)
                .unwrap_or_default(),
            source_identity: image.source_identity().to_string(),
        };
        self.emit_event(&started.encode());
    }

    /// Offers a recording event, if events are on; dropped when there is no room.
    pub(super) fn emit_event(&self, event: &[u8]) {
        if let Some(p) = &self.events {
            let _ = p.offer(event);
        }
    }

    /// Runs the recorder (when it shares this thread) and takes what it reported.
    pub(super) fn run_recordings(&mut self) -> usize {
        let mut work = self.recorder.as_mut().map_or(0, |r| r.do_work());
        while let Ok(event) = self.recorder_link.events.try_recv() {
            work += 1;
            match event {
                RecorderEvent::Ended(r, failure) => {
                    self.active_recordings.remove(&r.recording_id);
                    self.end_recording(*r, failure);
                }
                RecorderEvent::Merged(recording_id, at) => self.merged.push((recording_id, at)),
                RecorderEvent::Progressed(recording_id, start_position, position) => {
                    let event = RecordingProgress {
                        recording_id,
                        start_position,
                        position,
                    };
                    self.emit_event(&event.encode());
                }
            }
        }
        work
    }

    pub(super) fn end_recording(&mut self, r: RecordingSession, failure: Option<std::io::Error>) {
        let position = r.writer.position();
        let _ = self
            .replayer_link
            .commands
            .send(ReplayerCommand::RecordingStopped {
                recording_id: r.recording_id,
                stop_position: position,
            });
        if let Err(e) = self.catalog.record_stop(r.recording_id, position, now_ms()) {
            self.record_error(e.to_string());
        }
        if let Some(e) = failure {
            let message = format!("recording {} stopped at {position}: {e}", r.recording_id);
            if let Some(s) = self.sessions.get_mut(&r.control_session_id) {
                let code = if e.raw_os_error() == Some(libc::ENOSPC) {
                    error_code::STORAGE_SPACE
                } else {
                    error_code::GENERIC
                };
                s.error(r.correlation_id, code, &message);
            }
            self.record_error(message);
        }
        if let Some(c) = &r.counter {
            c.close();
        }
        self.signal(
            r.control_session_id,
            r.correlation_id,
            r.recording_id,
            r.subscription_id,
            position,
            recording_signal::STOP,
        );
        let stopped = RecordingStopped {
            recording_id: r.recording_id,
            start_position: r.start_position,
            stop_position: position,
        };
        self.emit_event(&stopped.encode());
        if let Some(i) = self
            .recording_subscriptions
            .iter()
            .position(|s| s.subscription.registration_id() == r.subscription_id)
        {
            let s = &mut self.recording_subscriptions[i];
            s.active = s.active.saturating_sub(1);
            if s.auto_stop || s.extend.is_some() {
                s.closing = true;
            }
            if s.closing && s.active == 0 {
                self.recording_subscriptions.swap_remove(i);
            }
        }
    }

    pub(super) fn live_position(&self, recording_id: i64) -> Option<i64> {
        self.active_recordings
            .get(&recording_id)
            .map(|a| a.position())
    }
}

impl RecordingSession {
    /// One duty cycle: writes what the image has (at most `max` bytes, up
    /// to a live merge's join position), moves to the live image once
    /// there, and says whether the recording ended.
    pub(super) fn do_work(&mut self, max: usize, stats: &RecorderCounters) -> RecordingWork {
        let mut out = RecordingWork::default();
        let gone = |image: &dyn RecordedImage| image.is_end_of_stream() || image.is_closed();
        if let Some(skip_to) = self.skip_to.filter(|_| !self.aborted) {
            if self.image.position() < skip_to {
                self.image.block_poll(max, skip_to, &mut |_| {});
            }
            if self.image.position() < skip_to {
                if gone(self.image.as_ref()) {
                    out.ended = Some(None);
                }
                return out;
            }
            self.skip_to = None;
            out.work += 1;
        }
        let mut failure = None;
        if !self.aborted {
            let writer = &mut self.writer;
            let bound = self.merge_into.as_ref().map_or(i64::MAX, |(join, _)| *join);
            let mut took = Duration::ZERO;
            let n = self.image.block_poll(max, bound, &mut |block| {
                if failure.is_none() {
                    let started = Instant::now();
                    if let Err(e) = writer.write_block(block) {
                        failure = Some(e);
                    }
                    took = started.elapsed();
                }
            });
            if n > 0 {
                if let Some(c) = &self.counter {
                    c.set(self.writer.position());
                }
                self.position
                    .store(self.writer.position(), std::sync::atomic::Ordering::Release);
                out.progressed = true;
                ArchiveCounters::add(&stats.write_bytes, n as i64);
                ArchiveCounters::time(
                    &stats.total_write_time,
                    &stats.max_write_time,
                    took.as_nanos() as i64,
                );
                out.work += 1;
            }
            if self
                .merge_into
                .as_ref()
                .is_some_and(|(join, _)| self.writer.position() >= *join)
            {
                // Recorded up to where the live image stands: go on with
                // it (past it only when the replay had already gone by:
                // the live image skips what was recorded, up to a term,
                // as it arrives).
                let (_, live) = self.merge_into.take().expect("checked");
                let at = self.writer.position();
                if at - live.position() <= live.term_buffer_length() as i64 {
                    if live.position() < at {
                        self.skip_to = Some(at);
                    }
                    self.image = live;
                    out.merged = Some(at);
                } else {
                    self.live_subscription = None;
                    out.merged = Some(NULL_VALUE);
                }
                out.work += 1;
            }
        }
        if failure.is_some() || self.aborted || gone(self.image.as_ref()) {
            out.ended = Some(failure);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::tests::{frame, geometry, TempDir, TERM};
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
    use std::sync::Mutex;

    /// An image over frames the test appends, as a log hands them over.
    struct FakeImage {
        frames: Mutex<Vec<(i64, Vec<u8>)>>,
        position: AtomicI64,
        eos: AtomicBool,
    }

    impl FakeImage {
        fn new(position: i64) -> Arc<FakeImage> {
            Arc::new(FakeImage {
                frames: Mutex::new(Vec::new()),
                position: AtomicI64::new(position),
                eos: AtomicBool::new(false),
            })
        }
        /// Appends `n` frames of `payload` bytes from its end; returns them.
        fn append(&self, n: usize, payload: usize) -> Vec<(i64, Vec<u8>)> {
            let g = geometry(0);
            let mut frames = self.frames.lock().unwrap();
            let mut at = frames
                .last()
                .map_or(self.position.load(Ordering::Acquire), |(p, f)| {
                    p + f.len() as i64
                });
            let mut added = Vec::new();
            for i in 0..n {
                let f = frame(&g, at, payload, i as u8 + 1);
                assert!(
                    (at % TERM) as usize + f.len() <= TERM as usize,
                    "keep tests within a term"
                );
                added.push((at, f.clone()));
                frames.push((at, f));
                at += added.last().unwrap().1.len() as i64;
            }
            added
        }
    }

    impl RecordedImage for FakeImage {
        fn position(&self) -> i64 {
            self.position.load(Ordering::Acquire)
        }
        fn block_poll(&self, max: usize, limit: i64, f: &mut dyn FnMut(&[u8])) -> usize {
            let frames = self.frames.lock().unwrap();
            let from = self.position();
            let mut block = Vec::new();
            for (p, fr) in frames.iter().filter(|(p, _)| *p >= from) {
                if block.len() + fr.len() > max || p + fr.len() as i64 > limit {
                    break;
                }
                block.extend_from_slice(fr);
            }
            if !block.is_empty() {
                f(&block);
                self.position
                    .fetch_add(block.len() as i64, Ordering::AcqRel);
            }
            block.len()
        }
        fn is_end_of_stream(&self) -> bool {
            self.eos.load(Ordering::Acquire)
                && self
                    .frames
                    .lock()
                    .unwrap()
                    .last()
                    .is_none_or(|(p, f)| p + f.len() as i64 <= self.position())
        }
        fn is_closed(&self) -> bool {
            false
        }
        fn term_buffer_length(&self) -> usize {
            TERM as usize
        }
    }

    fn session(dir: &TempDir, image: Arc<FakeImage>) -> RecordingSession {
        let start = image.position();
        RecordingSession {
            recording_id: 4,
            subscription_id: 1,
            image,
            writer: RecordingWriter::new(&dir.0, geometry(0), start, 0),
            counter: None,
            position: Arc::new(std::sync::atomic::AtomicI64::new(start)),
            control_session_id: 2,
            correlation_id: 3,
            aborted: false,
            merge_into: None,
            live_subscription: None,
            start_position: start,
            skip_to: None,
        }
    }

    fn on_disk(dir: &TempDir, from: i64, to: i64) -> Vec<u8> {
        let bytes = std::fs::read(geometry(0).path(&dir.0, 0)).unwrap();
        bytes[from as usize..to as usize].to_vec()
    }

    #[test]
    fn should_write_what_the_image_has_until_its_end_of_stream() {
        let dir = TempDir::new("recording-eos");
        let image = FakeImage::new(0);
        let mut r = session(&dir, image.clone());
        let stats = RecorderCounters::default();
        let frames = image.append(10, 100);
        let w = r.do_work(512, &stats);
        assert!(w.progressed && w.ended.is_none());
        assert_eq!(
            r.writer.position(),
            3 * 160,
            "no more than file_io_max_length a cycle"
        );
        while r.writer.position() < image.position() || r.do_work(512, &stats).work > 0 {}
        assert_eq!(r.writer.position(), 1600);
        assert!(r.do_work(512, &stats).ended.is_none(), "idle, not ended");
        image.eos.store(true, Ordering::Release);
        assert!(matches!(r.do_work(512, &stats).ended, Some(None)));
        let expect: Vec<u8> = frames.into_iter().flat_map(|(_, f)| f).collect();
        assert_eq!(on_disk(&dir, 0, 1600), expect);
    }

    #[test]
    fn should_end_at_once_when_stopped_and_with_the_error_when_a_write_fails() {
        let dir = TempDir::new("recording-stop");
        let image = FakeImage::new(0);
        image.append(4, 100);
        let mut r = session(&dir, image.clone());
        let stats = RecorderCounters::default();
        r.aborted = true;
        let w = r.do_work(1 << 20, &stats);
        assert!(
            matches!(w.ended, Some(None)) && !w.progressed,
            "stopped: nothing more is written"
        );
        // A segment file in the way where a new one must start.
        let dir = TempDir::new("recording-fail");
        std::fs::write(geometry(0).path(&dir.0, 0), b"someone else's").unwrap();
        let mut r = session(&dir, image);
        match r.do_work(1 << 20, &stats).ended {
            Some(Some(e)) => assert!(e.to_string().contains("already exists"), "{e}"),
            _ => panic!("a failed write ends the recording with its error"),
        }
    }

    #[test]
    fn should_merge_into_the_live_image_at_the_join_and_skip_what_the_replay_delivered() {
        let dir = TempDir::new("recording-merge");
        let replay = FakeImage::new(0);
        let replayed = replay.append(20, 100);
        let join = replayed[12].0;
        // The live image is behind the replay: it is at frame 10 while the
        // join (where the replay stands) is frame 12.
        let live = FakeImage::new(0);
        live.append(20, 100);
        live.position.store(replayed[10].0, Ordering::Release);
        let mut r = session(&dir, replay);
        r.merge_into = Some((join, live.clone() as Arc<dyn RecordedImage>));
        let stats = RecorderCounters::default();
        let mut merged = None;
        while merged.is_none() {
            merged = r.do_work(1 << 20, &stats).merged;
        }
        assert_eq!(merged, Some(join), "moved to the live image at the join");
        assert_eq!(
            r.skip_to,
            Some(join),
            "what the replay delivered is skipped as it arrives"
        );
        let end = replayed.last().map(|(p, f)| p + f.len() as i64).unwrap();
        while r.writer.position() < end {
            assert!(r.do_work(1 << 20, &stats).ended.is_none());
        }
        let expect: Vec<u8> = replayed.into_iter().flat_map(|(_, f)| f).collect();
        assert!(
            on_disk(&dir, 0, end) == expect,
            "every frame once, in order"
        );
    }
}
