//! Loss generators for testing: drop datagrams on purpose, on send or on
//! receive, data and control frames separately.
//!
//! A generator is off unless configured. Specifications:
//!
//! * `""` or `"off"`: never drop;
//! * `"random:0.1"` (or just `"0.1"`): drop each datagram with probability
//!   0.1, from a generator seeded by the driver's `loss_seed`, so a run is
//!   repeatable;
//! * `"every:10"` / `"every:10:3"`: drop datagrams 3, 13, 23 … (one in ten,
//!   starting at the given offset, default 0).
//!
//! ```
//! use sulis_driver::loss::{LossGenerator, LossSpec};
//! let spec = LossSpec::parse("every:4:1").unwrap();
//! let mut g = LossGenerator::new(spec, 7);
//! let dropped: Vec<bool> = (0..8).map(|_| g.should_drop()).collect();
//! assert_eq!(dropped, [false, true, false, false, false, true, false, false]);
//! assert_eq!(g.dropped(), 2);
//! ```

use super::XorShift64;

/// What a generator drops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LossSpec {
    /// Nothing.
    Off,
    /// Each datagram with this probability.
    Random {
        /// Probability in `[0, 1]`.
        rate: f64,
    },
    /// Datagram `offset`, `offset + n`, `offset + 2n` …
    Every {
        /// Period (≥ 1).
        n: u64,
        /// First datagram dropped (`< n`).
        offset: u64,
    },
}

impl LossSpec {
    /// Parses a specification (see the module documentation).
    pub fn parse(s: &str) -> Result<LossSpec, String> {
        let s = s.trim();
        let bad = |why: &str| format!("invalid loss specification '{s}': {why}");
        if s.is_empty() || s.eq_ignore_ascii_case("off") {
            return Ok(LossSpec::Off);
        }
        let rate_of = |r: &str| -> Result<LossSpec, String> {
            let rate: f64 = r
                .parse()
                .map_err(|_| bad("the rate must be a number in [0, 1]"))?;
            if !(0.0..=1.0).contains(&rate) {
                return Err(bad("the rate must be a number in [0, 1]"));
            }
            Ok(if rate == 0.0 {
                LossSpec::Off
            } else {
                LossSpec::Random { rate }
            })
        };
        if let Some(r) = s.strip_prefix("random:") {
            return rate_of(r);
        }
        if let Some(rest) = s.strip_prefix("every:") {
            let mut parts = rest.split(':');
            let n: u64 = parts
                .next()
                .and_then(|p| p.parse().ok())
                .filter(|&n| n >= 1)
                .ok_or_else(|| bad("expected every:N[:OFFSET] with N >= 1"))?;
            let offset: u64 = match parts.next() {
                Some(p) => p
                    .parse()
                    .ok()
                    .filter(|&o| o < n)
                    .ok_or_else(|| bad("the offset must be a whole number below N"))?,
                None => 0,
            };
            if parts.next().is_some() {
                return Err(bad("expected every:N[:OFFSET]"));
            }
            return Ok(LossSpec::Every { n, offset });
        }
        rate_of(s).map_err(|_| bad("expected off, random:RATE, RATE or every:N[:OFFSET]"))
    }

    /// True unless `Off`.
    pub fn is_on(&self) -> bool {
        !matches!(self, LossSpec::Off)
    }
}

impl std::fmt::Display for LossSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LossSpec::Off => f.write_str("off"),
            LossSpec::Random { rate } => write!(f, "random:{rate}"),
            LossSpec::Every { n, offset } => write!(f, "every:{n}:{offset}"),
        }
    }
}

/// Decides, datagram by datagram, whether to drop.
#[derive(Clone, Debug)]
pub struct LossGenerator {
    spec: LossSpec,
    rng: XorShift64,
    seen: u64,
    dropped: u64,
}

impl LossGenerator {
    /// A generator following `spec`, seeded with `seed`.
    pub fn new(spec: LossSpec, seed: u64) -> Self {
        LossGenerator {
            spec,
            rng: XorShift64::new(seed),
            seen: 0,
            dropped: 0,
        }
    }

    /// A generator that never drops.
    pub fn off() -> Self {
        Self::new(LossSpec::Off, 0)
    }

    /// True if this generator can drop anything.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.spec.is_on()
    }

    /// Decides for the next datagram.
    #[inline]
    pub fn should_drop(&mut self) -> bool {
        let drop = match self.spec {
            LossSpec::Off => false,
            LossSpec::Random { rate } => self.rng.next_f64() < rate,
            LossSpec::Every { n, offset } => self.seen % n == offset,
        };
        self.seen += 1;
        self.dropped += drop as u64;
        drop
    }

    /// Datagrams dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form_and_rejects_bad_ones() {
        assert_eq!(LossSpec::parse("").unwrap(), LossSpec::Off);
        assert_eq!(LossSpec::parse("off").unwrap(), LossSpec::Off);
        assert_eq!(LossSpec::parse("0").unwrap(), LossSpec::Off);
        assert_eq!(
            LossSpec::parse("0.25").unwrap(),
            LossSpec::Random { rate: 0.25 }
        );
        assert_eq!(
            LossSpec::parse("random:1").unwrap(),
            LossSpec::Random { rate: 1.0 }
        );
        assert_eq!(
            LossSpec::parse("every:3").unwrap(),
            LossSpec::Every { n: 3, offset: 0 }
        );
        for bad in [
            "random:1.5",
            "x",
            "every:0",
            "every:3:3",
            "every:3:1:1",
            "-0.1",
        ] {
            let e = LossSpec::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn random_loss_is_repeatable_and_near_its_rate() {
        let spec = LossSpec::Random { rate: 0.1 };
        let run = |seed| {
            let mut g = LossGenerator::new(spec, seed);
            (0..100_000).map(|_| g.should_drop()).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
        let dropped = run(42).iter().filter(|d| **d).count();
        assert!((9_000..11_000).contains(&dropped), "{dropped}");
    }

    #[test]
    fn off_never_drops() {
        let mut g = LossGenerator::off();
        assert!(!(0..1000).any(|_| g.should_drop()));
        assert_eq!(g.dropped(), 0);
    }
}
