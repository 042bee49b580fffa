//! Idle strategies: what an agent does when a duty cycle found no work.

use std::time::Duration;

/// How a polling loop waits when it had nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleStrategy {
    /// Spin without yielding: lowest latency, burns a core.
    BusySpin,
    /// `thread::yield_now` each idle cycle.
    Yielding,
    /// Spin, then yield (`max_yields` times; none by default), then park with
    /// exponentially growing sleeps up to `max_park`.
    Backoff {
        /// Spins before yielding.
        max_spins: u32,
        /// Yields before parking.
        max_yields: u32,
        /// First park duration.
        min_park: Duration,
        /// Longest park duration.
        max_park: Duration,
    },
    /// Sleep a fixed period each idle cycle.
    Sleeping(Duration),
}

impl Default for IdleStrategy {
    fn default() -> Self {
        IdleStrategy::backoff()
    }
}

impl IdleStrategy {
    /// The default back-off: 10 spins, then park 1 µs → 1 ms, doubling.
    ///
    /// **Differs from Aeron**, whose driver also yields 20 times between the
    /// spins and the parks. Where more threads are busy than there are cores
    /// (a driver beside a publisher and a subscriber that poll without rest,
    /// on two cores), a `sched_yield` hands the core away for a whole time
    /// slice, and the agent is not a sleeper the scheduler wakes first: the
    /// driver moved the publisher limit so late that one busy IPC stream with
    /// 1 MiB terms ran at 2.5 M msgs/s with the yields and at 27-46 M msgs/s
    /// without them (`bench/scale.py`). On idle cores a yield is a short spin,
    /// so dropping them only parks a few microseconds sooner.
    pub fn backoff() -> Self {
        IdleStrategy::Backoff {
            max_spins: 10,
            max_yields: 0,
            min_park: Duration::from_micros(1),
            max_park: Duration::from_millis(1),
        }
    }

    /// Parses `busy-spin`, `yielding`, `backoff`, `backoff:<longest park>`
    /// (e.g. `backoff:100us`: Aeron's back-off parking at most that long),
    /// `sleeping` or `sleeping:<duration>` (e.g. `sleeping:1ms`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let duration = |d: &str| {
            sulis_protocol::options::parse_duration(d)
                .map_err(|e| format!("idle strategy '{s}': {e}"))
        };
        match s {
            "busy-spin" | "busy_spin" | "spin" => Ok(IdleStrategy::BusySpin),
            "yielding" | "yield" => Ok(IdleStrategy::Yielding),
            "backoff" => Ok(IdleStrategy::backoff()),
            "sleeping" | "sleep" => Ok(IdleStrategy::Sleeping(Duration::from_millis(1))),
            _ => {
                if let Some(d) = s.strip_prefix("sleeping:") {
                    return Ok(IdleStrategy::Sleeping(duration(d)?));
                }
                if let Some(d) = s.strip_prefix("backoff:") {
                    let max_park = duration(d)?;
                    let IdleStrategy::Backoff {
                        max_spins,
                        max_yields,
                        min_park,
                        ..
                    } = IdleStrategy::backoff()
                    else {
                        unreachable!("backoff() is a Backoff")
                    };
                    if max_park < min_park {
                        return Err(format!(
                            "idle strategy '{s}': the longest park must be at least {} us",
                            min_park.as_micros()
                        ));
                    }
                    return Ok(IdleStrategy::Backoff {
                        max_spins,
                        max_yields,
                        min_park,
                        max_park,
                    });
                }
                Err(format!(
                    "unknown idle strategy '{s}' (expected busy-spin, yielding, backoff, backoff:<longest park>, \
                     sleeping or sleeping:<duration>)"
                ))
            }
        }
    }

    /// Name as accepted by [`IdleStrategy::parse`] (with its duration, when
    /// it is not the default one).
    pub fn name(&self) -> String {
        match self {
            IdleStrategy::BusySpin => "busy-spin".to_string(),
            IdleStrategy::Yielding => "yielding".to_string(),
            s @ IdleStrategy::Backoff { max_park, .. } => {
                if *s == IdleStrategy::backoff() {
                    "backoff".to_string()
                } else {
                    format!(
                        "backoff:{}",
                        sulis_protocol::options::show_duration(max_park)
                    )
                }
            }
            IdleStrategy::Sleeping(d) => {
                format!("sleeping:{}", sulis_protocol::options::show_duration(d))
            }
        }
    }

    /// A stateful idler for one thread.
    pub fn idler(&self) -> Idler {
        Idler {
            strategy: *self,
            spins: 0,
            yields: 0,
            park: Duration::ZERO,
        }
    }
}

/// Per-thread state of an idle strategy.
#[derive(Debug)]
pub struct Idler {
    strategy: IdleStrategy,
    spins: u32,
    yields: u32,
    park: Duration,
}

impl Idler {
    /// Called after each duty cycle with the amount of work it did.
    #[inline]
    pub fn idle(&mut self, work_count: usize) {
        if work_count > 0 {
            self.reset();
            return;
        }
        match self.strategy {
            IdleStrategy::BusySpin => std::hint::spin_loop(),
            IdleStrategy::Yielding => std::thread::yield_now(),
            IdleStrategy::Sleeping(d) => std::thread::sleep(d),
            IdleStrategy::Backoff {
                max_spins,
                max_yields,
                min_park,
                max_park,
            } => {
                if self.spins < max_spins {
                    self.spins += 1;
                    std::hint::spin_loop();
                } else if self.yields < max_yields {
                    self.yields += 1;
                    std::thread::yield_now();
                } else {
                    self.park = if self.park.is_zero() {
                        min_park
                    } else {
                        (self.park * 2).min(max_park)
                    };
                    std::thread::sleep(self.park);
                }
            }
        }
    }

    /// Back to the most eager state.
    #[inline]
    pub fn reset(&mut self) {
        self.spins = 0;
        self.yields = 0;
        self.park = Duration::ZERO;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_parse_every_strategy() {
        assert_eq!(
            IdleStrategy::parse("busy-spin").unwrap(),
            IdleStrategy::BusySpin
        );
        assert_eq!(
            IdleStrategy::parse("yielding").unwrap(),
            IdleStrategy::Yielding
        );
        assert_eq!(IdleStrategy::parse("backoff").unwrap().name(), "backoff");
        assert_eq!(
            IdleStrategy::parse("sleeping:2ms").unwrap(),
            IdleStrategy::Sleeping(Duration::from_millis(2))
        );
        assert!(IdleStrategy::parse("nap").unwrap_err().contains("nap"));
        let short = IdleStrategy::parse("backoff:100us").unwrap();
        assert!(
            matches!(short, IdleStrategy::Backoff { max_park, max_spins: 10, .. }
            if max_park == Duration::from_micros(100))
        );
        assert_eq!(short.name(), "backoff:100us");
        assert_eq!(
            IdleStrategy::parse("backoff:1ms").unwrap().name(),
            "backoff"
        );
        assert_eq!(
            IdleStrategy::parse("sleeping:2ms").unwrap().name(),
            "sleeping:2ms"
        );
        assert!(IdleStrategy::parse("backoff:0ns")
            .unwrap_err()
            .contains("at least 1 us"));
    }
}
