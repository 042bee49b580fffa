//! What agents share, in the driver, the archive and the cluster: the
//! duty-cycle trait, a nanosecond clock that tests can move by hand, and
//! the tracking of duty-cycle times (Agrona's `Agent`, `NanoClock` and
//! Aeron's `DutyCycleTracker`).
//!
//! An [`Agent`]'s `do_work` does a bounded amount of work and says how
//! much, so the idle strategy can back off; [`run_agents`] runs several on
//! one thread (a threading mode decides which share one).

use crate::cnc::epoch_ms;
use crate::counters::CounterRef;
use crate::idle::IdleStrategy;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One agent: a duty cycle run by a thread of its own or shared with others.
pub trait Agent: Send {
    /// A bounded slice of work; returns how much was done (0 = idle).
    fn do_work(&mut self) -> usize;
    /// Called once on the agent's thread after the last `do_work`.
    fn on_close(&mut self) {}
}

/// Times an agent's duty cycles (its `do_work`, idling excluded) into two
/// system counters: the longest so far, and how many took longer than a
/// threshold (Aeron's "max cycle time" / "cycle time threshold exceeded").
pub struct DutyCycleTracker {
    max: Option<CounterRef>,
    exceeded: Option<CounterRef>,
    threshold_ns: i64,
    max_ns: i64,
}

impl DutyCycleTracker {
    /// A tracker writing to the counters `max` and `exceeded` (either may be
    /// missing: a service whose counters could not be allocated still runs).
    pub fn new(max: Option<CounterRef>, exceeded: Option<CounterRef>, threshold_ns: i64) -> Self {
        DutyCycleTracker {
            max,
            exceeded,
            threshold_ns,
            max_ns: 0,
        }
    }

    /// Records one duty cycle of `cycle_ns`.
    #[inline]
    pub fn record(&mut self, cycle_ns: i64) {
        if cycle_ns > self.max_ns {
            self.max_ns = cycle_ns;
            if let Some(m) = &self.max {
                m.set_ordered(cycle_ns);
            }
        }
        if cycle_ns > self.threshold_ns {
            if let Some(e) = &self.exceeded {
                e.increment_ordered();
            }
        }
    }
}

/// An agent and the tracker timing its duty cycles.
pub type TrackedAgent = (Box<dyn Agent>, DutyCycleTracker);

/// Runs `agents` in turn on the calling thread until `running` turns false,
/// timing each one's duty cycle with its tracker.
pub fn run_agents(
    mut agents: Vec<TrackedAgent>,
    idle: IdleStrategy,
    running: Arc<AtomicBool>,
    clock: NanoClock,
) {
    let mut idler = idle.idler();
    while running.load(Ordering::Acquire) {
        let mut work = 0;
        let mut start_ns = clock.now_ns();
        for (agent, tracker) in agents.iter_mut() {
            work += agent.do_work();
            let end_ns = clock.now_ns();
            tracker.record(end_ns - start_ns);
            start_ns = end_ns;
        }
        idler.idle(work);
    }
    for (agent, _) in agents.iter_mut() {
        agent.on_close();
    }
}

/// The clock every agent reads: monotonic nanoseconds since the service
/// started, and the epoch milliseconds written into the CnC (heartbeats,
/// counter timestamps). Times shared between agents (last status message,
/// last packet) are on this clock.
///
/// A real clock reads the machine's; a manual one ([`NanoClock::manual`])
/// moves only when a test advances it, so timeouts and retries in an agent
/// can be stepped deterministically.
#[derive(Clone, Copy, Debug)]
pub enum NanoClock {
    /// The machine's clocks.
    Real {
        /// When the driver started.
        start: Instant,
    },
    /// A test's clock: nanoseconds set by [`ManualClock`], epoch derived from them.
    Manual {
        /// Current nanoseconds.
        now_ns: &'static AtomicI64,
        /// Epoch milliseconds at nanosecond 0.
        epoch_base_ms: i64,
    },
}

/// The handle a test uses to move a manual [`NanoClock`].
#[derive(Clone, Copy, Debug)]
pub struct ManualClock {
    now_ns: &'static AtomicI64,
}

impl ManualClock {
    /// Moves the clock forward by `ns`.
    pub fn advance_ns(&self, ns: i64) {
        self.now_ns.fetch_add(ns, Ordering::AcqRel);
    }
    /// Current nanoseconds.
    pub fn now_ns(&self) -> i64 {
        self.now_ns.load(Ordering::Acquire)
    }
}

impl NanoClock {
    /// A real clock starting now.
    pub fn new() -> Self {
        NanoClock::Real {
            start: Instant::now(),
        }
    }

    /// A manual clock at 0 ns (epoch: now) and the handle that moves it.
    /// Each one leaks a word: meant for tests.
    pub fn manual() -> (NanoClock, ManualClock) {
        let now_ns: &'static AtomicI64 = Box::leak(Box::new(AtomicI64::new(0)));
        (
            NanoClock::Manual {
                now_ns,
                epoch_base_ms: epoch_ms(),
            },
            ManualClock { now_ns },
        )
    }

    /// Nanoseconds since the clock started.
    #[inline]
    pub fn now_ns(&self) -> i64 {
        match self {
            NanoClock::Real { start } => start.elapsed().as_nanos() as i64,
            NanoClock::Manual { now_ns, .. } => now_ns.load(Ordering::Acquire),
        }
    }

    /// Milliseconds since the Unix epoch, as written into the CnC.
    #[inline]
    pub fn epoch_ms(&self) -> i64 {
        match self {
            NanoClock::Real { .. } => epoch_ms(),
            NanoClock::Manual {
                now_ns,
                epoch_base_ms,
            } => epoch_base_ms + now_ns.load(Ordering::Acquire) / 1_000_000,
        }
    }
}

impl Default for NanoClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_its_epoch_follows() {
        let (clock, hand) = NanoClock::manual();
        let epoch = clock.epoch_ms();
        assert_eq!(clock.now_ns(), 0);
        hand.advance_ns(2_500_000_000);
        assert_eq!(
            (clock.now_ns(), hand.now_ns()),
            (2_500_000_000, 2_500_000_000)
        );
        assert_eq!(clock.epoch_ms(), epoch + 2500);
    }
}
