//! A small seedable pseudo-random generator for NAK back-off.
//!
//! The loss-recovery logic never reads a clock or an entropy source itself
//! (docs/STYLE.md §3): whoever builds a delay generator hands it an
//! [`XorShift64`] seeded however it likes (the driver from its own entropy, a
//! test from a constant), so every run of a test draws the same delays.
//!
//! The generator is xorshift64* (Marsaglia's xorshift with Vigna's
//! multiplicative output scramble). It is fast and plenty random for spreading
//! timers; it is not for anything cryptographic.

/// Multiplier of the xorshift64* output scramble.
const OUTPUT_MULTIPLIER: u64 = 0x2545_F491_4F6C_DD1D;

/// A xorshift64* pseudo-random generator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XorShift64 {
    /// Never zero: zero is the one state xorshift cannot leave.
    state: u64,
}

impl XorShift64 {
    /// A generator whose sequence is fixed by `seed` (any value, zero included).
    ///
    /// The seed is first passed through the splitmix64 finaliser so that
    /// neighbouring seeds (0, 1, 2 …) start far apart in the sequence.
    pub fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        XorShift64 {
            state: if z == 0 { OUTPUT_MULTIPLIER } else { z },
        }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(OUTPUT_MULTIPLIER)
    }

    /// A uniform `f64` in `[0, 1)` (53 random mantissa bits).
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
        (self.next_u64() >> 11) as f64 * SCALE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_repeat_the_sequence_for_the_same_seed() {
        let mut a = XorShift64::new(42);
        let mut b = XorShift64::new(42);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn should_start_neighbouring_seeds_apart() {
        let mut zero = XorShift64::new(0);
        let mut one = XorShift64::new(1);
        let same = (0..100)
            .filter(|_| zero.next_u64() == one.next_u64())
            .count();
        assert_eq!(same, 0);
    }

    #[test]
    fn should_draw_floats_uniformly_in_the_unit_interval() {
        let mut rng = XorShift64::new(7);
        let n = 100_000;
        let mut buckets = [0u32; 10];
        for _ in 0..n {
            let x = rng.next_f64();
            assert!((0.0..1.0).contains(&x), "{x} outside [0, 1)");
            buckets[(x * 10.0) as usize] += 1;
        }
        for count in buckets {
            // Each bucket expects n/10 = 10 000 (sd ~95); allow a wide 5%.
            assert!((9_500..=10_500).contains(&count), "bucket {count}");
        }
    }
}
