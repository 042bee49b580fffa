//! The recorder (Aeron's `Recorder`): the agent that runs the recording
//! sessions, on the conductor's thread (SHARED) or on a thread of its own
//! (DEDICATED). The conductor hands it sessions and commands through a
//! queue and learns what happened through another; a recording's position
//! is published in an atomic the conductor reads (and in its counter), so
//! neither side ever waits for the other's writes.

use super::*;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};

/// What the conductor asks of the recorder.
pub(super) enum RecorderCommand {
    /// Run this session.
    Add(Box<RecordingSession>),
    /// Stop the sessions of a recording subscription at once.
    AbortSubscription(i64),
    /// Record the replay up to `join`, then go on with `image` (live merge).
    MergeInto {
        subscription_id: i64,
        join: i64,
        image: Arc<dyn RecordedImage>,
        live_subscription: Option<Subscription>,
    },
}

/// What the recorder tells the conductor.
pub(super) enum RecorderEvent {
    /// A session ended (its writer's position is where), with the write
    /// failure that ended it, if any.
    Ended(Box<RecordingSession>, Option<std::io::Error>),
    /// A recording moved to its live image at this position (`NULL_VALUE`:
    /// the live image was too far behind).
    Merged(i64, i64),
    /// A recording moved on: (recording id, start position, position).
    Progressed(i64, i64, i64),
}

/// The write counters the recorder keeps (Aeron's 105-107).
#[derive(Default)]
pub(super) struct RecorderCounters {
    pub(super) write_bytes: Option<Counter>,
    pub(super) total_write_time: Option<Counter>,
    pub(super) max_write_time: Option<Counter>,
}

pub(super) struct Recorder {
    sessions: Vec<RecordingSession>,
    commands: Receiver<RecorderCommand>,
    events: Sender<RecorderEvent>,
    /// Bytes read from an image per duty cycle and session.
    file_io_max_length: usize,
    counters: RecorderCounters,
    /// Progress events wanted (recording events are on).
    progress_events: bool,
}

/// The conductor's end of the recorder's queues.
pub(super) struct RecorderLink {
    pub(super) commands: Sender<RecorderCommand>,
    pub(super) events: Receiver<RecorderEvent>,
}

impl Recorder {
    pub(super) fn new(
        file_io_max_length: usize,
        counters: RecorderCounters,
        progress_events: bool,
    ) -> (Recorder, RecorderLink) {
        let (commands_tx, commands) = channel();
        let (events, events_rx) = channel();
        let recorder = Recorder {
            sessions: Vec::new(),
            commands,
            events,
            file_io_max_length,
            counters,
            progress_events,
        };
        let link = RecorderLink {
            commands: commands_tx,
            events: events_rx,
        };
        (recorder, link)
    }

    fn on_command(&mut self, c: RecorderCommand) {
        match c {
            RecorderCommand::Add(s) => self.sessions.push(*s),
            RecorderCommand::AbortSubscription(id) => {
                for s in self.sessions.iter_mut().filter(|s| s.subscription_id == id) {
                    s.aborted = true;
                }
            }
            RecorderCommand::MergeInto {
                subscription_id,
                join,
                image,
                live_subscription,
            } => {
                if let Some(s) = self
                    .sessions
                    .iter_mut()
                    .find(|s| s.subscription_id == subscription_id)
                {
                    s.merge_into = Some((join, image));
                    s.live_subscription = live_subscription;
                }
            }
        }
    }

    /// One duty cycle: takes commands, runs every session once, reports.
    pub(super) fn do_work(&mut self) -> usize {
        let mut work = 0;
        while let Ok(c) = self.commands.try_recv() {
            self.on_command(c);
            work += 1;
        }
        let mut i = 0;
        while i < self.sessions.len() {
            let w = self.sessions[i].do_work(self.file_io_max_length, &self.counters);
            work += w.work;
            let s = &self.sessions[i];
            if w.progressed && self.progress_events {
                let _ = self.events.send(RecorderEvent::Progressed(
                    s.recording_id,
                    s.start_position,
                    s.writer.position(),
                ));
            }
            if let Some(at) = w.merged {
                let _ = self.events.send(RecorderEvent::Merged(s.recording_id, at));
            }
            match w.ended {
                Some(failure) => {
                    let s = self.sessions.swap_remove(i);
                    let _ = self.events.send(RecorderEvent::Ended(Box::new(s), failure));
                    work += 1;
                }
                None => i += 1,
            }
        }
        work
    }

    /// Ends every session where it stands (the archive closes).
    pub(super) fn abort_all(&mut self) {
        while let Ok(c) = self.commands.try_recv() {
            self.on_command(c);
        }
        for s in self.sessions.iter_mut() {
            s.aborted = true;
        }
        while !self.sessions.is_empty() {
            self.do_work();
        }
    }
}

impl Agent for Recorder {
    fn do_work(&mut self) -> usize {
        Recorder::do_work(self)
    }

    fn on_close(&mut self) {
        self.abort_all();
    }
}

/// A recording the recorder runs, as the conductor knows it.
pub(super) struct ActiveRecording {
    pub(super) subscription_id: i64,
    /// Where it has recorded to, published by its session after each write.
    pub(super) position: Arc<AtomicI64>,
}

impl ActiveRecording {
    pub(super) fn position(&self) -> i64 {
        self.position.load(Ordering::Acquire)
    }
}
