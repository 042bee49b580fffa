//! A sender's replay window: which of its datagram counters a receiver has
//! already taken, over the last [`WINDOW`] counters (as IPsec's and
//! WireGuard's sliding windows).
//!
//! A counter above the highest seen is new; one within the window is new
//! if its bit is clear; one below the window is refused (too old to tell).

/// How many counters behind the highest one are remembered.
pub const WINDOW: u64 = 4096;

const WORDS: usize = (WINDOW / 64) as usize;

/// The window of one sender.
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    highest: u64,
    /// Bit `c % WINDOW` is set when counter `c` (within the window) was taken.
    bits: [u64; WORDS],
}

/// What the window says of a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not seen: take it (then [`ReplayWindow::mark`] it once it is authentic).
    New,
    /// Taken before: a replay.
    Seen,
    /// Below the window: can no longer be told from a replay.
    TooOld,
}

impl ReplayWindow {
    /// A window whose first counter is `first` (taken).
    pub fn new(first: u64) -> ReplayWindow {
        let mut w = ReplayWindow {
            highest: first,
            bits: [0; WORDS],
        };
        w.set(first);
        w
    }

    /// Whether `counter` is new, without changing anything (the datagram's
    /// tag is checked after this, and only an authentic one is marked).
    pub fn check(&self, counter: u64) -> Verdict {
        if counter > self.highest {
            Verdict::New
        } else if self.highest - counter >= WINDOW {
            Verdict::TooOld
        } else if self.is_set(counter) {
            Verdict::Seen
        } else {
            Verdict::New
        }
    }

    /// Takes `counter` (which [`ReplayWindow::check`] found new).
    pub fn mark(&mut self, counter: u64) {
        if counter > self.highest {
            let advance = counter - self.highest;
            if advance >= WINDOW {
                self.bits = [0; WORDS];
            } else {
                for c in self.highest + 1..counter {
                    self.clear(c);
                }
            }
            self.highest = counter;
        }
        self.set(counter);
    }

    /// The highest counter taken.
    pub fn highest(&self) -> u64 {
        self.highest
    }

    fn set(&mut self, c: u64) {
        let i = (c % WINDOW) as usize;
        self.bits[i / 64] |= 1 << (i % 64);
    }

    fn clear(&mut self, c: u64) {
        let i = (c % WINDOW) as usize;
        self.bits[i / 64] &= !(1 << (i % 64));
    }

    fn is_set(&self, c: u64) -> bool {
        let i = (c % WINDOW) as usize;
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_take_each_counter_once_in_any_order_within_the_window() {
        let mut w = ReplayWindow::new(100);
        assert_eq!(w.check(100), Verdict::Seen);
        for c in [105, 101, 104, 102, 103] {
            assert_eq!(w.check(c), Verdict::New, "{c}");
            w.mark(c);
            assert_eq!(w.check(c), Verdict::Seen, "{c}");
        }
        // Before the first one seen, but within the window: still new once.
        assert_eq!(w.check(50), Verdict::New);
        w.mark(50);
        assert_eq!(w.check(50), Verdict::Seen);
        assert_eq!(w.highest(), 105);
    }

    #[test]
    fn should_refuse_what_fell_below_the_window_and_forget_bits_it_moved_past() {
        let mut w = ReplayWindow::new(10);
        w.mark(11);
        w.mark(10 + WINDOW);
        assert_eq!(w.check(10), Verdict::TooOld);
        // 11 is still inside (WINDOW - 1 behind) and was taken.
        assert_eq!(w.check(11), Verdict::Seen);
        // The slot 12 shares with 12 + WINDOW was cleared on the way.
        assert_eq!(w.check(12 + WINDOW), Verdict::New);
        w.mark(12 + WINDOW);
        assert_eq!(w.check(12), Verdict::TooOld);
        assert_eq!(w.check(11 + WINDOW), Verdict::New);
        // A jump past the whole window forgets everything before it.
        w.mark(100 * WINDOW);
        assert_eq!(w.check(100 * WINDOW - 1), Verdict::New);
        assert_eq!(w.check(100 * WINDOW - WINDOW), Verdict::TooOld);
    }
}
