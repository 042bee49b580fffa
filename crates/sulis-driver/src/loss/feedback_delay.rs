//! How long a receiver waits before sending (or re-sending) a NAK.
//!
//! docs/protocol.md §5.4. A unicast receiver is the only one that can ask for
//! its loss, so it asks at once ([`StaticDelayGenerator`], 1 µs, immediate) and
//! re-asks every `delay × 100` while the gap persists. Receivers in a group
//! (multicast, or `group=true`) all see the same loss at about the same time; if
//! every one of them NAKed at once the sender would drown in identical NAKs
//! ("NAK implosion"). Each one instead waits a random back-off drawn by
//! [`OptimalMulticastDelayGenerator`]; the first NAK to reach the sender
//! triggers a multicast retransmit that fills everyone's gap, and the receivers
//! still waiting never send theirs.
//!
//! Generators hold no clock: the caller adds the returned delay to its own
//! `now_ns`.

use super::xorshift::XorShift64;

/// Default unicast NAK delay (`aeron.nak.unicast.delay`): 1 µs.
pub const NAK_UNICAST_DELAY_NS_DEFAULT: i64 = 1_000;
/// Default ratio of unicast NAK retry delay to NAK delay
/// (`aeron.nak.unicast.retry.delay.ratio`).
pub const NAK_UNICAST_RETRY_DELAY_RATIO_DEFAULT: i64 = 100;
/// Default maximum multicast NAK back-off (`aeron.nak.multicast.max.backoff`): 10 ms.
pub const NAK_MULTICAST_MAX_BACKOFF_NS_DEFAULT: i64 = 10_000_000;
/// Default estimate of a multicast group's size (`aeron.nak.multicast.group.size`).
pub const NAK_MULTICAST_GROUP_SIZE_DEFAULT: u32 = 10;

/// Source of feedback (NAK, retransmit) delays.
///
/// `Send` so that a detector or handler owning a boxed generator can move to
/// the agent thread that runs it.
pub trait FeedbackDelayGenerator: Send {
    /// Delay in ns before the first feedback for a newly seen event.
    fn generate_delay_ns(&mut self) -> i64;

    /// True if the first feedback goes out at once, without waiting for
    /// [`generate_delay_ns`](Self::generate_delay_ns).
    fn should_feedback_immediately(&self) -> bool;

    /// Delay in ns before feedback is repeated for an event that persists.
    ///
    /// Defaults to a fresh [`generate_delay_ns`](Self::generate_delay_ns): for
    /// randomised back-off every retry is a new suppression round.
    fn retry_delay_ns(&mut self) -> i64 {
        self.generate_delay_ns()
    }
}

/// A constant delay: unicast NAKs, and the sender's retransmit delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticDelayGenerator {
    /// Delay before the first feedback, ns.
    pub delay_ns: i64,
    /// Send the first feedback at once instead of after `delay_ns`.
    pub immediate: bool,
    /// Delay between repeats, ns.
    pub retry_delay_ns: i64,
}

impl StaticDelayGenerator {
    /// A generator with `retry_delay_ns = delay_ns × 100`
    /// ([`NAK_UNICAST_RETRY_DELAY_RATIO_DEFAULT`]).
    pub fn new(delay_ns: i64, immediate: bool) -> Self {
        StaticDelayGenerator {
            delay_ns,
            immediate,
            retry_delay_ns: delay_ns.saturating_mul(NAK_UNICAST_RETRY_DELAY_RATIO_DEFAULT),
        }
    }

    /// The same generator with another retry delay.
    pub fn with_retry_delay_ns(mut self, retry_delay_ns: i64) -> Self {
        self.retry_delay_ns = retry_delay_ns;
        self
    }

    /// The unicast NAK default: 1 µs, immediate, retry every 100 µs.
    pub fn unicast_nak_default() -> Self {
        Self::new(NAK_UNICAST_DELAY_NS_DEFAULT, true)
    }
}

impl FeedbackDelayGenerator for StaticDelayGenerator {
    fn generate_delay_ns(&mut self) -> i64 {
        self.delay_ns
    }

    fn should_feedback_immediately(&self) -> bool {
        self.immediate
    }

    fn retry_delay_ns(&mut self) -> i64 {
        self.retry_delay_ns
    }
}

/// Randomised NAK back-off for receivers in a group, after Nonnenmacher and
/// Biersack's "optimal multicast feedback".
///
/// # The distribution
///
/// With `T` = `max_backoff_ns` and `λ = ln(group_size) + 1`, delays follow a
/// *truncated exponential* on `[0, T]` that rises towards `T`:
///
/// ```text
/// density f(t) = (λ/T) · e^(λt/T) / (e^λ − 1)          0 ≤ t ≤ T
/// CDF     F(t) = (e^(λt/T) − 1) / (e^λ − 1)             F(0) = 0, F(T) = 1
///
///  f(t)                                   ▁▂▃▅█   few receivers draw a short
///   │                          ▁▁▂▂▃▃▄▅▆▇███    delay; the first of them NAKs
///   │        ▁▁▁▁▂▂▂▂▃▃▃▃▄▄▄▅▅▆▆▇▇███████████    and the retransmit usually
///   └──────────────────────────────────────── t  lands before the rest expire
///   0                                       T
/// ```
///
/// Inverting `F` for a uniform `u ∈ [0, 1)` gives the delay
///
/// ```text
/// t = (T/λ) · ln(1 + u·(e^λ − 1))
/// ```
///
/// which is docs/protocol.md's `t = (T/λ)·ln(x·(e^λ−1)·T/λ)` with the
/// substitution `x = λ/(T·(e^λ−1)) + u·λ/T`: there "x uniform" means uniform
/// on `[λ/(T(e^λ−1)), λ/(T(e^λ−1)) + λ/T)`, not on `[0, 1)` (with `x` on
/// `[0, 1)` the logarithm would go negative). The `1 + u(e^λ−1)` form is
/// what is computed here; a test checks both agree.
///
/// Larger groups give a larger `λ`, pushing delays towards `T` (more
/// suppression); a group of one gives `λ = 1`, still skewed late. Every
/// delay lies in `[0, T]`.
#[derive(Clone, Debug)]
pub struct OptimalMulticastDelayGenerator {
    /// Largest delay `T`, ns.
    pub max_backoff_ns: i64,
    /// Estimated number of receivers in the group (values below 1 count as 1).
    pub group_size: u32,
    /// Source of the uniform draws.
    pub rng: XorShift64,
}

impl OptimalMulticastDelayGenerator {
    /// A generator for a group of about `group_size` receivers.
    pub fn new(max_backoff_ns: i64, group_size: u32, rng: XorShift64) -> Self {
        OptimalMulticastDelayGenerator {
            max_backoff_ns,
            group_size,
            rng,
        }
    }

    /// `λ = ln(group_size) + 1`.
    pub fn lambda(&self) -> f64 {
        (self.group_size.max(1) as f64).ln() + 1.0
    }

    /// The delay, in (fractional) ns, that the uniform draw `u ∈ [0, 1]` maps to.
    pub fn delay_for_uniform(&self, u: f64) -> f64 {
        let max_backoff = self.max_backoff_ns.max(0) as f64;
        let lambda = self.lambda();
        // ln_1p keeps precision for small u, where 1 + u(e^λ − 1) is close to 1.
        (max_backoff / lambda) * (u * lambda.exp_m1()).ln_1p()
    }

    /// Probability that a generated delay is at most `delay_ns` (the CDF `F`).
    pub fn probability_within(&self, delay_ns: f64) -> f64 {
        let max_backoff = self.max_backoff_ns.max(0) as f64;
        if max_backoff == 0.0 || delay_ns >= max_backoff {
            return 1.0;
        }
        if delay_ns <= 0.0 {
            return 0.0;
        }
        let lambda = self.lambda();
        (lambda * delay_ns / max_backoff).exp_m1() / lambda.exp_m1()
    }
}

impl FeedbackDelayGenerator for OptimalMulticastDelayGenerator {
    fn generate_delay_ns(&mut self) -> i64 {
        let u = self.rng.next_f64();
        // u < 1 keeps the result below T; the clamp guards rounding anyway.
        (self.delay_for_uniform(u) as i64).clamp(0, self.max_backoff_ns.max(0))
    }

    fn should_feedback_immediately(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn multicast_default(seed: u64) -> OptimalMulticastDelayGenerator {
        OptimalMulticastDelayGenerator::new(
            NAK_MULTICAST_MAX_BACKOFF_NS_DEFAULT,
            NAK_MULTICAST_GROUP_SIZE_DEFAULT,
            XorShift64::new(seed),
        )
    }

    #[test]
    fn should_nak_unicast_immediately_and_retry_after_delay_times_100() {
        let mut generator = StaticDelayGenerator::unicast_nak_default();
        assert!(generator.should_feedback_immediately());
        assert_eq!(generator.generate_delay_ns(), 1_000);
        assert_eq!(generator.retry_delay_ns(), 100_000);
    }

    #[test]
    fn should_use_an_explicit_retry_delay() {
        let mut generator = StaticDelayGenerator::new(20_000, false).with_retry_delay_ns(7);
        assert!(!generator.should_feedback_immediately());
        assert_eq!(generator.generate_delay_ns(), 20_000);
        assert_eq!(generator.retry_delay_ns(), 7);
    }

    #[test]
    fn should_keep_multicast_delays_within_max_backoff() {
        for group_size in [0, 1, 2, 10, 1000] {
            let mut generator = OptimalMulticastDelayGenerator::new(
                NAK_MULTICAST_MAX_BACKOFF_NS_DEFAULT,
                group_size,
                XorShift64::new(group_size as u64),
            );
            assert!(!generator.should_feedback_immediately());
            for _ in 0..100_000 {
                let delay = generator.generate_delay_ns();
                assert!(
                    (0..=NAK_MULTICAST_MAX_BACKOFF_NS_DEFAULT).contains(&delay),
                    "group {group_size}: delay {delay} outside [0, T]"
                );
                let retry = generator.retry_delay_ns();
                assert!((0..=NAK_MULTICAST_MAX_BACKOFF_NS_DEFAULT).contains(&retry));
            }
        }
    }

    #[test]
    fn should_map_the_ends_of_the_uniform_range_to_zero_and_max_backoff() {
        let generator = multicast_default(1);
        assert_eq!(generator.delay_for_uniform(0.0), 0.0);
        let at_one = generator.delay_for_uniform(1.0);
        assert!((at_one - NAK_MULTICAST_MAX_BACKOFF_NS_DEFAULT as f64).abs() < 1e-3);
    }

    #[test]
    fn should_follow_the_truncated_exponential_distribution() {
        let mut generator = multicast_default(99);
        let max_backoff = NAK_MULTICAST_MAX_BACKOFF_NS_DEFAULT as f64;
        let n = 50_000;
        let mut delays: Vec<i64> = (0..n).map(|_| generator.generate_delay_ns()).collect();
        delays.sort_unstable();
        // Empirical CDF against F at several points: with n = 50 000 the
        // standard error is at most 0.0023, so 0.015 is > 6 sigma.
        for fraction in [0.1, 0.25, 0.5, 0.75, 0.9, 0.99] {
            let t = fraction * max_backoff;
            let empirical = delays.partition_point(|&d| (d as f64) <= t) as f64 / n as f64;
            let expected = generator.probability_within(t);
            assert!(
                (empirical - expected).abs() < 0.015,
                "F({fraction}T): empirical {empirical}, expected {expected}"
            );
        }
        // Skewed late: with λ = ln 10 + 1 the median is ~0.8 T, and most
        // receivers wait more than half the back-off.
        let median = delays[n / 2] as f64 / max_backoff;
        assert!((0.77..0.83).contains(&median), "median {median} T");
    }

    #[test]
    fn should_push_delays_later_for_larger_groups() {
        let mean = |group_size: u32| {
            let mut generator =
                OptimalMulticastDelayGenerator::new(1_000_000, group_size, XorShift64::new(5));
            (0..20_000)
                .map(|_| generator.generate_delay_ns())
                .sum::<i64>()
                / 20_000
        };
        assert!(mean(1) < mean(10));
        assert!(mean(10) < mean(1000));
    }

    #[test]
    fn should_agree_with_the_spec_formula_over_shifted_uniform_x() {
        let generator = multicast_default(3);
        let t = generator.max_backoff_ns as f64;
        let lambda = generator.lambda();
        let factor = (lambda.exp() - 1.0) * (t / lambda);
        let base_x = lambda / (t * (lambda.exp() - 1.0));
        let x_range = lambda / t;
        let mut rng = XorShift64::new(11);
        for _ in 0..1000 {
            let u = rng.next_f64();
            let x = base_x + u * x_range;
            let spec = (t / lambda) * (x * factor).ln();
            let ours = generator.delay_for_uniform(u);
            assert!(
                (spec - ours).abs() < 1e-3,
                "u={u}: spec {spec}, ours {ours}"
            );
        }
    }

    #[test]
    fn should_give_zero_delay_for_zero_backoff() {
        let mut generator = OptimalMulticastDelayGenerator::new(0, 10, XorShift64::new(1));
        for _ in 0..100 {
            assert_eq!(generator.generate_delay_ns(), 0);
        }
    }

    #[test]
    fn should_repeat_delays_for_the_same_seed() {
        let mut a = multicast_default(8);
        let mut b = multicast_default(8);
        for _ in 0..100 {
            assert_eq!(a.generate_delay_ns(), b.generate_delay_ns());
        }
    }
}
