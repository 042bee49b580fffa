//! Congestion control of an image (Aeron's `CongestionControl`, on the
//! receiver's side): the receiver window its status messages offer the
//! sender. `cc=static` (the default, `StaticWindowCongestionControl`)
//! offers the whole window all the time; `cc=cubic` (Aeron's
//! `CubicCongestionControl`, RFC 8312's window curve) opens a congestion
//! window of whole MTUs from ten, shrinks it by a fifth at each new loss and
//! grows it back along the cubic curve, measuring the round trip with RTTM
//! frames.
//!
//! No I/O and no clock: `now_ns` comes in.

/// Which congestion control an image runs, and its settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CongestionControlSpec {
    /// The whole receiver window, always.
    Static,
    /// CUBIC.
    Cubic(CubicParams),
}

/// Settings of [`Cubic`] (Aeron's `CubicCongestionControlConfiguration`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CubicParams {
    /// The round trip assumed before one is measured; also how often the window may grow.
    pub initial_rtt_ns: i64,
    /// Measure the round trip with RTTM frames (Aeron's default: off).
    pub measure_rtt: bool,
    /// Grow at least as fast as TCP Reno would in the same time (RFC 8312 §4.2;
    /// on by default here and in Linux, off in Aeron).
    pub tcp_mode: bool,
}

impl Default for CubicParams {
    fn default() -> Self {
        CubicParams {
            initial_rtt_ns: 100_000,
            measure_rtt: true,
            tcp_mode: true,
        }
    }
}

/// What the image does after a rebuild: the window to offer and whether a
/// status message must go now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Receiver window to put in status messages.
    pub window: i32,
    /// Send a status message now.
    pub force_status_message: bool,
}

/// The receiver window of one image.
pub trait CongestionControl: Send {
    /// The window of the first status message.
    fn initial_window(&self) -> i32;
    /// The most it offers.
    fn max_window(&self) -> i32;
    /// A round trip is due to be measured (an RTTM request sent).
    fn should_measure_rtt(&self, now_ns: i64) -> bool;
    /// An RTTM request went.
    fn on_rtt_measurement_sent(&mut self, now_ns: i64);
    /// The reply to one came: the round trip took `rtt_ns`.
    fn on_rtt_measurement(&mut self, now_ns: i64, rtt_ns: i64);
    /// After each rebuild scan: `consumption` is the slowest subscriber's
    /// position, `last_sm` where the last status message said it was,
    /// `loss` whether the scan found a new gap.
    fn on_track_rebuild(
        &mut self,
        now_ns: i64,
        consumption: i64,
        last_sm: i64,
        loss: bool,
    ) -> Outcome;
    /// The round trip it goes by, for its counter (`None`: it measures none).
    fn rtt_ns(&self) -> Option<i64> {
        None
    }
    /// True if it never changes by itself: no measurement falls due, no
    /// window moves, without a frame or a reply coming. An idle image under
    /// such a control needs a duty cycle only when its timers say so.
    fn is_static(&self) -> bool {
        false
    }
}

impl CongestionControlSpec {
    /// The strategy of an image whose receiver window is at most
    /// `max_window` and whose sender's MTU is `mtu`, starting at `now_ns`.
    pub fn build(&self, max_window: i32, mtu: i32, now_ns: i64) -> Box<dyn CongestionControl> {
        match self {
            CongestionControlSpec::Static => Box::new(StaticWindow { window: max_window }),
            CongestionControlSpec::Cubic(p) => Box::new(Cubic::new(*p, max_window, mtu, now_ns)),
        }
    }

    /// `cc=` of a channel: `static` or `cubic`.
    pub fn parse(value: &str, cubic: CubicParams) -> Result<CongestionControlSpec, String> {
        match value {
            "static" => Ok(CongestionControlSpec::Static),
            "cubic" => Ok(CongestionControlSpec::Cubic(cubic)),
            other => Err(format!("cc={other}: congestion control is static or cubic")),
        }
    }
}

/// The whole window, always (Aeron's `StaticWindowCongestionControl`).
#[derive(Debug)]
pub struct StaticWindow {
    window: i32,
}

impl CongestionControl for StaticWindow {
    fn initial_window(&self) -> i32 {
        self.window
    }
    fn max_window(&self) -> i32 {
        self.window
    }
    fn should_measure_rtt(&self, _now_ns: i64) -> bool {
        false
    }
    fn is_static(&self) -> bool {
        true
    }
    fn on_rtt_measurement_sent(&mut self, _now_ns: i64) {}
    fn on_rtt_measurement(&mut self, _now_ns: i64, _rtt_ns: i64) {}
    fn on_track_rebuild(&mut self, _: i64, _: i64, _: i64, _: bool) -> Outcome {
        Outcome {
            window: self.window,
            force_status_message: false,
        }
    }
}

/// Initial congestion window, in MTUs (RFC 6928's ten).
const INITIAL_CWND: i32 = 10;
/// Round trips between measurements.
const RTT_TIMEOUT_MULTIPLE: i64 = 4;
/// The cubic curve's scale (RFC 8312's C).
const C: f64 = 0.4;
/// The decrease at a loss (RFC 8312's 1 - beta).
const B: f64 = 0.2;

/// CUBIC, as Aeron's `CubicCongestionControl`: the window is `cwnd` MTUs;
/// a new loss remembers `w_max = cwnd`, cuts `cwnd` by a fifth and restarts
/// the curve `cwnd(t) = C (t - K)^3 + w_max` (t seconds since that loss,
/// `K = cbrt(w_max B / C)`: the curve is back at `w_max` after K seconds),
/// evaluated at most once per initial round trip, capped at the receiver
/// window. At one MTU a status message goes whenever the subscriber moves.
#[derive(Debug)]
pub struct Cubic {
    params: CubicParams,
    mtu: i32,
    max_cwnd: i32,
    cwnd: i32,
    w_max: i32,
    k: f64,
    window: i32,
    initial_window: i32,
    max_window: i32,
    last_update_ns: i64,
    last_loss_ns: i64,
    last_rtt_ns: i64,
    rtt_ns: i64,
    rtt_timeout_ns: i64,
    update_interval_ns: i64,
}

impl Cubic {
    /// A window of at most `max_window` bytes in MTUs of `mtu`.
    pub fn new(params: CubicParams, max_window: i32, mtu: i32, now_ns: i64) -> Cubic {
        let mtu = mtu.max(1);
        let max_cwnd = (max_window / mtu).max(1);
        let cwnd = INITIAL_CWND.min(max_cwnd);
        // w_max starts at the most: the curve starts in its concave part, growing fast.
        let w_max = max_cwnd;
        Cubic {
            params,
            mtu,
            max_cwnd,
            cwnd,
            w_max,
            k: (w_max as f64 * B / C).cbrt(),
            window: (cwnd * mtu).min(max_window),
            initial_window: (cwnd * mtu).min(max_window),
            max_window,
            last_update_ns: now_ns,
            last_loss_ns: now_ns,
            last_rtt_ns: i64::MIN / 2,
            rtt_ns: params.initial_rtt_ns,
            rtt_timeout_ns: params.initial_rtt_ns * RTT_TIMEOUT_MULTIPLE,
            update_interval_ns: params.initial_rtt_ns,
        }
    }

    /// The congestion window in MTUs.
    pub fn cwnd(&self) -> i32 {
        self.cwnd
    }
}

impl CongestionControl for Cubic {
    fn initial_window(&self) -> i32 {
        self.initial_window
    }

    fn max_window(&self) -> i32 {
        self.max_window
    }

    fn should_measure_rtt(&self, now_ns: i64) -> bool {
        self.params.measure_rtt && now_ns - self.last_rtt_ns > self.rtt_timeout_ns
    }

    fn on_rtt_measurement_sent(&mut self, now_ns: i64) {
        self.last_rtt_ns = now_ns;
    }

    fn on_rtt_measurement(&mut self, now_ns: i64, rtt_ns: i64) {
        self.last_rtt_ns = now_ns;
        self.rtt_ns = rtt_ns;
        self.rtt_timeout_ns = rtt_ns.max(self.params.initial_rtt_ns) * RTT_TIMEOUT_MULTIPLE;
    }

    fn on_track_rebuild(
        &mut self,
        now_ns: i64,
        consumption: i64,
        last_sm: i64,
        loss: bool,
    ) -> Outcome {
        let mut force = false;
        if loss {
            force = true;
            self.w_max = self.cwnd;
            self.k = (self.w_max as f64 * B / C).cbrt();
            self.cwnd = ((self.cwnd as f64 * (1.0 - B)) as i32).max(1);
            self.window = (self.cwnd * self.mtu).min(self.max_window);
            self.last_loss_ns = now_ns;
        } else if self.cwnd < self.max_cwnd
            && now_ns - self.last_update_ns > self.update_interval_ns
        {
            let t = (now_ns - self.last_loss_ns) as f64 / 1e9;
            let d = t - self.k;
            let grown = (self.w_max as f64 + C * d * d * d).clamp(1.0, self.max_cwnd as f64);
            self.cwnd = grown as i32;
            if self.params.tcp_mode && self.cwnd < self.w_max {
                let rtt = (self.rtt_ns.max(1)) as f64 / 1e9;
                let tcp = self.w_max as f64 * (1.0 - B) + (3.0 * B / (2.0 - B)) * (t / rtt);
                self.cwnd = self.cwnd.max((tcp as i32).min(self.max_cwnd));
            }
            self.window = (self.cwnd * self.mtu).min(self.max_window);
            self.last_update_ns = now_ns;
        } else if self.cwnd == 1 && consumption > last_sm {
            force = true;
        }
        Outcome {
            window: self.window,
            force_status_message: force,
        }
    }

    fn rtt_ns(&self) -> Option<i64> {
        Some(self.rtt_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;
    const S: i64 = 1_000 * MS;

    /// The curve alone (no TCP-friendly region), as Aeron's default.
    fn cubic(max_window: i32) -> Cubic {
        let p = CubicParams {
            tcp_mode: false,
            ..CubicParams::default()
        };
        Cubic::new(p, max_window, 1408, 0)
    }

    #[test]
    fn should_start_at_ten_mtus_and_grow_to_the_receiver_window() {
        let mut c = cubic(1408 * 100);
        assert_eq!(c.initial_window(), 1408 * 10);
        assert_eq!(c.max_window(), 1408 * 100);
        // w_max starts at the most, K = cbrt(100 * 0.2 / 0.4) = 3.68 s: the curve reaches it then.
        let early = c.on_track_rebuild(S, 0, 0, false).window;
        assert!(early > 1408 * 10 && early < 1408 * 100, "{early}");
        let later = c.on_track_rebuild(4 * S, 0, 0, false).window;
        assert_eq!(later, 1408 * 100);
    }

    #[test]
    fn should_cut_the_window_by_a_fifth_at_a_loss_and_climb_back_along_the_curve() {
        let mut c = cubic(1408 * 100);
        c.on_track_rebuild(10 * S, 0, 0, false);
        assert_eq!(c.cwnd(), 100);
        let o = c.on_track_rebuild(10 * S + 1, 0, 0, true);
        assert_eq!(c.cwnd(), 80);
        assert_eq!(
            o,
            Outcome {
                window: 80 * 1408,
                force_status_message: true
            }
        );
        // K = cbrt(100 * 0.2 / 0.4) = 3.68 s: halfway there the window is below w_max and above the cut.
        let half = c.on_track_rebuild(10 * S + 1_840 * MS, 0, 0, false);
        assert!(
            half.window > 80 * 1408 && half.window < 100 * 1408,
            "{half:?}"
        );
        assert!(!half.force_status_message);
        // Past K it is back at w_max (and stays within the receiver window).
        let back = c.on_track_rebuild(10 * S + 5 * S, 0, 0, false);
        assert_eq!(back.window, 100 * 1408);
        // Losses in a row shrink it to one MTU, never below.
        for i in 0..40 {
            c.on_track_rebuild(20 * S + i, 0, 0, true);
        }
        assert_eq!(c.cwnd(), 1);
    }

    #[test]
    fn should_grow_no_more_often_than_once_per_initial_round_trip() {
        let mut c = cubic(1408 * 100);
        let first = c.on_track_rebuild(2 * S, 0, 0, false).window;
        // 50 µs later (within 100 µs): unchanged even though the curve moved.
        assert_eq!(
            c.on_track_rebuild(2 * S + 50_000, 0, 0, false).window,
            first
        );
    }

    #[test]
    fn should_never_offer_more_than_the_receiver_window_whatever_the_mtu() {
        // A sender's MTU (from its SETUP) larger than the window: one MTU would be too much.
        let mut c = Cubic::new(CubicParams::default(), 32 * 1024, 65504, 0);
        assert_eq!(c.initial_window(), 32 * 1024);
        assert!(c.on_track_rebuild(S, 0, 0, false).window <= 32 * 1024);
        assert!(c.on_track_rebuild(2 * S, 0, 0, true).window <= 32 * 1024);
    }

    #[test]
    fn should_force_a_status_message_at_one_mtu_when_the_subscriber_moves() {
        let mut c = cubic(1408);
        assert_eq!(c.cwnd(), 1);
        assert!(!c.on_track_rebuild(S, 100, 100, false).force_status_message);
        assert!(c.on_track_rebuild(S, 200, 100, false).force_status_message);
    }

    #[test]
    fn should_measure_the_round_trip_every_four_of_them() {
        let mut c = cubic(1408 * 100);
        assert!(c.should_measure_rtt(0));
        c.on_rtt_measurement_sent(0);
        assert!(!c.should_measure_rtt(300_000));
        c.on_rtt_measurement(300_000, 2 * MS);
        assert_eq!(c.rtt_ns(), Some(2 * MS));
        assert!(!c.should_measure_rtt(300_000 + 7 * MS));
        assert!(c.should_measure_rtt(300_000 + 9 * MS));
        let no = Cubic::new(
            CubicParams {
                measure_rtt: false,
                ..CubicParams::default()
            },
            1408 * 100,
            1408,
            0,
        );
        assert!(!no.should_measure_rtt(S));
    }

    #[test]
    fn should_grow_as_fast_as_tcp_would_in_tcp_mode() {
        let p = CubicParams {
            tcp_mode: true,
            initial_rtt_ns: MS,
            measure_rtt: false,
        };
        let mut c = Cubic::new(p, 1408 * 1000, 1408, 0);
        c.on_track_rebuild(100 * S, 0, 0, false);
        c.on_track_rebuild(100 * S + 1, 0, 0, true); // w_max 1000, cwnd 800, K = 7.9 s
        let mut plain = Cubic::new(
            CubicParams {
                tcp_mode: false,
                ..p
            },
            1408 * 1000,
            1408,
            0,
        );
        plain.on_track_rebuild(100 * S, 0, 0, false);
        plain.on_track_rebuild(100 * S + 1, 0, 0, true);
        // 1 s on: the cubic curve is at 1000 + 0.4 (1 - 7.94)^3 = 866; TCP's line, 800 + 0.33 per
        // 1 ms round trip, is past the receiver window (1000) by then.
        let t = 101 * S;
        assert!(
            c.on_track_rebuild(t, 0, 0, false).window
                > plain.on_track_rebuild(t, 0, 0, false).window
        );
    }

    #[test]
    fn should_offer_the_whole_window_statically_and_parse_cc() {
        let mut s = CongestionControlSpec::Static.build(65536, 1408, 0);
        assert_eq!(s.initial_window(), 65536);
        assert_eq!(s.on_track_rebuild(S, 0, 0, true).window, 65536);
        assert!(!s.should_measure_rtt(S));
        let cubic = CubicParams::default();
        assert_eq!(
            CongestionControlSpec::parse("cubic", cubic),
            Ok(CongestionControlSpec::Cubic(cubic))
        );
        assert!(CongestionControlSpec::parse("reno", cubic)
            .unwrap_err()
            .contains("cc=reno"));
    }
}
