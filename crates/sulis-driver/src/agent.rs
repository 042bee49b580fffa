//! What the driver's agents share: the agent primitives of
//! `sulis_concurrent::agent` (re-exported here), a duty-cycle tracker on
//! the system counters, and the error reporter.
//!
//! The conductor, sender and receiver are each an [`Agent`]: `do_work` does a
//! bounded amount of work and says how much, so the idle strategy can back
//! off. The threading mode decides which agents share a thread
//! ([`run_agents`]).

use crate::system_counters::{SystemCounter, SystemCounters};
pub use sulis_concurrent::agent::{
    run_agents, Agent, DutyCycleTracker, ManualClock, NanoClock, TrackedAgent,
};
use sulis_concurrent::error_log::SharedErrorLog;

/// A tracker of an agent's duty cycles into the system counters `max` and `exceeded`.
pub fn duty_cycle_tracker(
    system: &SystemCounters,
    max: SystemCounter,
    exceeded: SystemCounter,
    threshold_ns: i64,
) -> DutyCycleTracker {
    DutyCycleTracker::new(
        Some(system.get(max)),
        Some(system.get(exceeded)),
        threshold_ns,
    )
}

/// Records errors in the CnC's distinct error log and counts them.
#[derive(Clone)]
pub struct ErrorReporter {
    log: SharedErrorLog,
    system: SystemCounters,
    /// The driver's clock: error timestamps agree with the heartbeats and
    /// counter deadlines in the CnC, a manual clock's included.
    clock: NanoClock,
}

impl ErrorReporter {
    /// Reports into `log`, counting in the system `Errors` counter, with
    /// timestamps from `clock`.
    pub fn new(log: SharedErrorLog, system: SystemCounters, clock: NanoClock) -> Self {
        ErrorReporter { log, system, clock }
    }

    /// Records one error.
    pub fn record(&self, text: &str) {
        self.system.increment(SystemCounter::Errors);
        self.log.record(text, self.clock.epoch_ms());
    }

    /// The system counters, for agents that count beside reporting.
    pub fn system(&self) -> &SystemCounters {
        &self.system
    }
}
