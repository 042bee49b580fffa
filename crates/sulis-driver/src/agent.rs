//! What the driver's agents share: the duty-cycle trait, one nanosecond clock
//! and the error reporter.
//!
//! The conductor, sender and receiver are each an [`Agent`]: `do_work` does a
//! bounded amount of work and says how much, so the idle strategy can back
//! off. The threading mode decides which agents share a thread
//! ([`run_agents`]).

use crate::system_counters::{SystemCounter, SystemCounters};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use sulis_concurrent::cnc::epoch_ms;
use sulis_concurrent::counters::CounterRef;
use sulis_concurrent::error_log::SharedErrorLog;
use sulis_concurrent::idle::IdleStrategy;

/// One agent of the driver.
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
    max: CounterRef,
    exceeded: CounterRef,
    threshold_ns: i64,
    max_ns: i64,
}

impl DutyCycleTracker {
    /// A tracker writing to the system counters `max` and `exceeded`.
    pub fn new(
        system: &SystemCounters,
        max: SystemCounter,
        exceeded: SystemCounter,
        threshold_ns: i64,
    ) -> Self {
        DutyCycleTracker {
            max: system.get(max),
            exceeded: system.get(exceeded),
            threshold_ns,
            max_ns: 0,
        }
    }

    /// Records one duty cycle of `cycle_ns`.
    #[inline]
    pub fn record(&mut self, cycle_ns: i64) {
        if cycle_ns > self.max_ns {
            self.max_ns = cycle_ns;
            self.max.set_ordered(cycle_ns);
        }
        if cycle_ns > self.threshold_ns {
            self.exceeded.increment_ordered();
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

/// The monotonic clock every agent reads: nanoseconds since the driver
/// started. Times shared between agents (last status message, last packet)
/// are on this clock.
#[derive(Clone, Copy, Debug)]
pub struct NanoClock {
    start: Instant,
}

impl NanoClock {
    /// A clock starting now.
    pub fn new() -> Self {
        NanoClock {
            start: Instant::now(),
        }
    }

    /// Nanoseconds since the clock started.
    #[inline]
    pub fn now_ns(&self) -> i64 {
        self.start.elapsed().as_nanos() as i64
    }
}

impl Default for NanoClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Records errors in the CnC's distinct error log and counts them.
#[derive(Clone)]
pub struct ErrorReporter {
    log: SharedErrorLog,
    system: SystemCounters,
}

impl ErrorReporter {
    /// Reports into `log`, counting in the system `Errors` counter.
    pub fn new(log: SharedErrorLog, system: SystemCounters) -> Self {
        ErrorReporter { log, system }
    }

    /// Records one error.
    pub fn record(&self, text: &str) {
        self.system.increment(SystemCounter::Errors);
        self.log.record(text, epoch_ms());
    }

    /// The system counters, for agents that count beside reporting.
    pub fn system(&self) -> &SystemCounters {
        &self.system
    }
}
