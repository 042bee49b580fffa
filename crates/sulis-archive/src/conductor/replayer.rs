//! The replayer (Aeron's `Replayer`): the agent that runs the replay
//! sessions, on the conductor's thread (SHARED) or on a thread of its own
//! (DEDICATED). The conductor hands it replays and commands through a queue
//! and hears of failures and ends through another; a live recording's
//! position comes from the atomic its recording session publishes.

use super::*;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};

/// What a replay knows of the recording it replays.
pub(super) struct RecordingWatch {
    /// While it records: where it has recorded to.
    pub(super) live: Option<Arc<AtomicI64>>,
    /// Once stopped: its stop position.
    pub(super) stopped_at: Option<i64>,
}

impl RecordingWatch {
    fn now(&self) -> RecordingNow {
        RecordingNow {
            live: self.live.as_ref().map(|p| p.load(Ordering::Acquire)),
            stopped_at: self.stopped_at,
        }
    }
}

/// What the conductor asks of the replayer.
pub(super) enum ReplayerCommand {
    /// Run this replay.
    Add(Box<ReplaySession>, RecordingWatch),
    /// Stop the replay with this id.
    Stop(i64),
    /// A recording stopped here: its replays end there.
    RecordingStopped {
        recording_id: i64,
        stop_position: i64,
    },
}

/// What the replayer tells the conductor.
pub(super) enum ReplayerEvent {
    /// A replay failed: its client is told why.
    Failed {
        control_session_id: i64,
        correlation_id: i64,
        message: String,
    },
    /// A replay ended (done, stopped or failed).
    Ended(i64),
}

/// The read counters the replayer keeps (Aeron's 108-110).
#[derive(Default)]
pub(super) struct ReplayerCounters {
    pub(super) read_bytes: Option<Counter>,
    pub(super) total_read_time: Option<Counter>,
    pub(super) max_read_time: Option<Counter>,
}

pub(super) struct Replayer {
    sessions: Vec<(ReplaySession, RecordingWatch)>,
    commands: Receiver<ReplayerCommand>,
    events: Sender<ReplayerEvent>,
    max_concurrent_replays: usize,
    counters_reader: sulis_concurrent::counters::CountersReader,
    counters: ReplayerCounters,
    clock: NanoClock,
}

/// The conductor's end of the replayer's queues.
pub(super) struct ReplayerLink {
    pub(super) commands: Sender<ReplayerCommand>,
    pub(super) events: Receiver<ReplayerEvent>,
}

impl Replayer {
    pub(super) fn new(
        max_concurrent_replays: usize,
        counters_reader: sulis_concurrent::counters::CountersReader,
        counters: ReplayerCounters,
        clock: NanoClock,
    ) -> (Replayer, ReplayerLink) {
        let (commands_tx, commands) = channel();
        let (events, events_rx) = channel();
        let replayer = Replayer {
            sessions: Vec::new(),
            commands,
            events,
            max_concurrent_replays,
            counters_reader,
            counters,
            clock,
        };
        let link = ReplayerLink {
            commands: commands_tx,
            events: events_rx,
        };
        (replayer, link)
    }

    fn on_command(&mut self, c: ReplayerCommand) {
        match c {
            ReplayerCommand::Add(s, watch) => self.sessions.push((*s, watch)),
            ReplayerCommand::Stop(id) => {
                for (s, _) in self.sessions.iter_mut().filter(|(s, _)| s.id == id) {
                    s.done = true;
                }
            }
            ReplayerCommand::RecordingStopped {
                recording_id,
                stop_position,
            } => {
                for (_, w) in self
                    .sessions
                    .iter_mut()
                    .filter(|(s, _)| s.recording_id == recording_id)
                {
                    w.live = None;
                    w.stopped_at = Some(stop_position);
                }
            }
        }
    }

    /// One duty cycle: takes commands, runs every replay once, reports.
    pub(super) fn do_work(&mut self) -> usize {
        let mut work = 0;
        while let Ok(c) = self.commands.try_recv() {
            self.on_command(c);
            work += 1;
        }
        let now_ns = self.clock.now_ns();
        let mut replaying = self
            .sessions
            .iter()
            .filter(|(s, _)| !s.done && matches!(s.state, ReplayState::Replaying))
            .count();
        for (s, watch) in self.sessions.iter_mut() {
            let waiting = !matches!(s.state, ReplayState::Replaying);
            let may_start = replaying < self.max_concurrent_replays;
            let result = s.do_work(
                now_ns,
                watch.now(),
                may_start,
                &self.counters_reader,
                &self.counters,
            );
            if waiting && matches!(s.state, ReplayState::Replaying) {
                replaying += 1;
            }
            match result {
                Ok(w) => work += w,
                Err(message) => {
                    let _ = self.events.send(ReplayerEvent::Failed {
                        control_session_id: s.control_session_id,
                        correlation_id: s.correlation_id,
                        message,
                    });
                }
            }
        }
        let events = &self.events;
        self.sessions.retain(|(s, _)| {
            if s.done {
                let _ = events.send(ReplayerEvent::Ended(s.id));
            }
            !s.done
        });
        work
    }

    /// Ends every replay (the archive closes).
    pub(super) fn close_all(&mut self) {
        while let Ok(c) = self.commands.try_recv() {
            self.on_command(c);
        }
        for (s, _) in self.sessions.drain(..) {
            let _ = self.events.send(ReplayerEvent::Ended(s.id));
        }
    }
}

impl Agent for Replayer {
    fn do_work(&mut self) -> usize {
        Replayer::do_work(self)
    }

    fn on_close(&mut self) {
        self.close_all();
    }
}
