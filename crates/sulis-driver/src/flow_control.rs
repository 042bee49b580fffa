//! Flow control: how far a network publication may send, given what its
//! receivers report in status messages (Aeron's `FlowControl` strategies).
//!
//! The sender asks a publication's [`FlowControl`] for the sender limit on
//! every status message and every send turn. Which strategy a publication
//! runs follows its channel ([`FlowControlSpec`]):
//!
//! * **unicast** — one receiver: the limit is the furthest position + window
//!   it reported ([`UnicastFlowControl`]);
//! * **max** — the multicast and multi-destination default: the same rule
//!   over every receiver, so the fastest paces and a slow one may fall
//!   behind ([`MaxFlowControl`]);
//! * **min** — the slowest receiver paces: every receiver is tracked by its
//!   receiver id; one silent for the receiver timeout (5 s), or that said
//!   end of stream, stops counting ([`MinFlowControl`]);
//! * **tagged** — min over the receivers whose status messages carry the
//!   publication's group tag (`gtag=` on the subscription); the others are
//!   not tracked.
//!
//! `min` and `tagged` may wait for a minimum group (`g:/N`): until N
//! receivers are tracked the publication is not connected and the limit
//! does not move. A receiver joins the group only if it is at most one
//! window behind the slowest (one further behind could never catch up
//! without stalling everybody; it recovers from the sender's log or, for
//! `max`, skips what it lost). While a new receiver of the group asks for a
//! SETUP, the limit is held where it was when the SETUP went out, so the
//! newcomer is not left behind before its first status message counts.
//!
//! Every strategy is clock-free: time comes in as `now_ns`.

use std::net::SocketAddr;
use sulis_protocol::flow_control_params::{FlowControlParams, FlowControlStrategy};
use sulis_protocol::frame::StatusMessageFrame;

/// A publication's flow-control strategy.
pub trait FlowControl: Send + std::fmt::Debug {
    /// A valid status message from `receiver`, which has consumed up to
    /// `position`: returns the new sender limit (the current one is
    /// `sender_limit`).
    fn on_status_message(
        &mut self,
        sm: &StatusMessageFrame,
        receiver: SocketAddr,
        position: i64,
        sender_limit: i64,
        now_ns: i64,
    ) -> i64;

    /// A receiver asked for a SETUP (a status message with SEND_SETUP).
    fn on_trigger_send_setup(&mut self, _sm: &StatusMessageFrame, _now_ns: i64) {}

    /// An elicited SETUP is about to go out with the limit at `sender_limit`.
    fn on_setup(&mut self, _sender_limit: i64, _now_ns: i64) {}

    /// A receiver sent an error frame (it rejected the stream): it stops
    /// counting at the next turn.
    fn on_error(&mut self, _receiver_id: i64, _group_tag: Option<i64>) {}

    /// Every send turn: returns the sender limit to use now (strategies that
    /// track receivers forget the ones that fell silent here, which may
    /// move the limit back to a slower receiver's or forward past a gone one).
    fn on_idle(
        &mut self,
        now_ns: i64,
        sender_limit: i64,
        sender_position: i64,
        is_eos: bool,
    ) -> i64;

    /// True while the receivers the strategy waits for are connected (a
    /// publication reports itself connected only then).
    fn has_required_receivers(&self) -> bool {
        true
    }

    /// True if `on_idle` leaves the limit as it is, whatever the time: an
    /// idle publication's send turns may then be passed by until a timer of
    /// its own falls due.
    fn is_still_when_idle(&self) -> bool {
        false
    }

    /// The receivers tracked (empty for strategies that track none).
    fn receivers(&self) -> &[TrackedReceiver] {
        &[]
    }
}

/// A receiver as [`MinFlowControl`] tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackedReceiver {
    /// Its receiver id (one per receiving driver endpoint).
    pub receiver_id: i64,
    /// Where its status messages come from.
    pub address: SocketAddr,
    /// The furthest position it reported consumed.
    pub position: i64,
    /// Its last reported position plus its window: how far it lets the sender go.
    pub limit: i64,
    /// Sender's clock time of its last status message.
    pub time_of_last_sm_ns: i64,
    /// It said end of stream (or sent an error): dropped at the next turn.
    pub eos: bool,
}

/// Unicast: one receiver; the limit only moves forward, to the reported
/// position plus the receiver's window.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnicastFlowControl;

impl FlowControl for UnicastFlowControl {
    fn on_status_message(
        &mut self,
        sm: &StatusMessageFrame,
        _receiver: SocketAddr,
        position: i64,
        sender_limit: i64,
        _now_ns: i64,
    ) -> i64 {
        sender_limit.max(position + sm.receiver_window as i64)
    }

    fn on_idle(
        &mut self,
        _now_ns: i64,
        sender_limit: i64,
        _sender_position: i64,
        _is_eos: bool,
    ) -> i64 {
        sender_limit
    }

    fn is_still_when_idle(&self) -> bool {
        true
    }
}

/// `fc=max`: the fastest receiver paces (unicast's rule over every receiver).
#[derive(Clone, Copy, Debug, Default)]
pub struct MaxFlowControl;

impl FlowControl for MaxFlowControl {
    fn on_status_message(
        &mut self,
        sm: &StatusMessageFrame,
        receiver: SocketAddr,
        position: i64,
        sender_limit: i64,
        now_ns: i64,
    ) -> i64 {
        UnicastFlowControl.on_status_message(sm, receiver, position, sender_limit, now_ns)
    }

    fn on_idle(
        &mut self,
        _now_ns: i64,
        sender_limit: i64,
        _sender_position: i64,
        _is_eos: bool,
    ) -> i64 {
        sender_limit
    }

    fn is_still_when_idle(&self) -> bool {
        true
    }
}

/// `fc=min` and `fc=tagged`: the slowest tracked receiver paces.
#[derive(Clone, Debug)]
pub struct MinFlowControl {
    /// `Some(tag)` for `tagged`: only receivers carrying it are tracked.
    group_tag: Option<i64>,
    group_min_size: usize,
    receiver_timeout_ns: i64,
    receivers: Vec<TrackedReceiver>,
    /// The limit when an elicited SETUP went out while the group had
    /// members, and when: held until the newcomer is tracked or the
    /// receiver timeout passes.
    setup_limit: Option<(i64, i64)>,
    setup_triggered: bool,
}

impl MinFlowControl {
    /// `fc=min` (`group_tag` None) or `fc=tagged` (the tag receivers must carry).
    pub fn new(group_tag: Option<i64>, group_min_size: usize, receiver_timeout_ns: i64) -> Self {
        MinFlowControl {
            group_tag,
            group_min_size,
            receiver_timeout_ns,
            receivers: Vec::new(),
            setup_limit: None,
            setup_triggered: false,
        }
    }

    fn matches(&self, tag: Option<i64>) -> bool {
        self.group_tag.is_none_or(|t| tag == Some(t))
    }

    /// The held SETUP limit, forgotten once the receiver timeout passed.
    fn held_setup_limit(&mut self, now_ns: i64) -> i64 {
        match self.setup_limit {
            Some((limit, at)) if now_ns - at < self.receiver_timeout_ns => limit,
            Some(_) => {
                self.setup_limit = None;
                i64::MAX
            }
            None => i64::MAX,
        }
    }

    fn enough(&self) -> bool {
        !self.receivers.is_empty() && self.receivers.len() >= self.group_min_size
    }
}

impl FlowControl for MinFlowControl {
    fn on_status_message(
        &mut self,
        sm: &StatusMessageFrame,
        receiver: SocketAddr,
        position: i64,
        sender_limit: i64,
        now_ns: i64,
    ) -> i64 {
        let window = sm.receiver_window as i64;
        let edge = position + window;
        let matches = self.matches(sm.group_tag);
        let mut min = self.held_setup_limit(now_ns);
        let mut known = false;
        for r in self.receivers.iter_mut() {
            if matches && r.receiver_id == sm.receiver_id {
                r.eos = sm.is_eos();
                r.position = r.position.max(position);
                r.limit = edge;
                r.address = receiver;
                r.time_of_last_sm_ns = now_ns;
                known = true;
            }
            min = min.min(r.limit);
        }
        if matches && !known && !sm.is_eos() && (self.receivers.is_empty() || edge >= min - window)
        {
            self.receivers.push(TrackedReceiver {
                receiver_id: sm.receiver_id,
                address: receiver,
                position,
                limit: edge,
                time_of_last_sm_ns: now_ns,
                eos: false,
            });
            min = min.min(edge);
            // The newcomer counts now: the SETUP hold has done its work.
            self.setup_limit = None;
        }
        if self.receivers.len() < self.group_min_size {
            sender_limit
        } else if self.receivers.is_empty() {
            // No receiver of the group yet (a tagged publication hearing
            // only others): as max, so the stream is not held for nobody.
            sender_limit.max(edge)
        } else {
            sender_limit.max(min)
        }
    }

    fn on_trigger_send_setup(&mut self, sm: &StatusMessageFrame, _now_ns: i64) {
        self.setup_triggered |= self.matches(sm.group_tag);
    }

    fn on_setup(&mut self, sender_limit: i64, now_ns: i64) {
        if self.setup_triggered && !self.receivers.is_empty() {
            self.setup_limit = Some((sender_limit, now_ns));
        }
        self.setup_triggered = false;
    }

    fn on_error(&mut self, receiver_id: i64, group_tag: Option<i64>) {
        if self.matches(group_tag) {
            for r in self
                .receivers
                .iter_mut()
                .filter(|r| r.receiver_id == receiver_id)
            {
                r.eos = true;
            }
        }
    }

    fn on_idle(
        &mut self,
        now_ns: i64,
        sender_limit: i64,
        _sender_position: i64,
        _is_eos: bool,
    ) -> i64 {
        let timeout = self.receiver_timeout_ns;
        self.receivers
            .retain(|r| !r.eos && now_ns - r.time_of_last_sm_ns < timeout);
        let mut min = self.held_setup_limit(now_ns);
        for r in &self.receivers {
            min = min.min(r.limit);
        }
        if self.enough() {
            min
        } else {
            sender_limit
        }
    }

    fn has_required_receivers(&self) -> bool {
        self.receivers.len() >= self.group_min_size
    }

    fn receivers(&self) -> &[TrackedReceiver] {
        &self.receivers
    }
}

/// Which strategy a publication runs, from its channel and the driver's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowControlSpec {
    /// `None`: unicast.
    pub strategy: Option<FlowControlStrategy>,
    /// Tag receivers must carry (tagged).
    pub group_tag: i64,
    /// Receivers needed before the publication is connected.
    pub group_min_size: usize,
    /// A tracked receiver silent this long is dropped.
    pub receiver_timeout_ns: i64,
    /// Receiver windows one retransmit may cover (`None`: the retransmit handler's default).
    pub retransmit_receiver_window_multiple: Option<u32>,
}

/// The driver's flow-control defaults (its options).
#[derive(Clone, Copy, Debug)]
pub struct FlowControlDefaults {
    /// Strategy of multicast and multi-destination publications without `fc`.
    pub multicast_strategy: FlowControlStrategy,
    /// Group tag of `tagged` without `g:TAG`.
    pub group_tag: i64,
    /// Minimum group size without `g:/N`.
    pub group_min_size: usize,
    /// Receiver timeout without `t:`.
    pub receiver_timeout_ns: i64,
}

impl FlowControlSpec {
    /// The strategy of a publication whose channel has `fc` (parsed) and is
    /// `group` (multicast or multi-destination). `Err` names the problem:
    /// `fc` on a unicast channel, as Aeron refuses it.
    pub fn of(
        fc: Option<&str>,
        group: bool,
        defaults: &FlowControlDefaults,
    ) -> Result<FlowControlSpec, String> {
        let mut spec = FlowControlSpec {
            strategy: None,
            group_tag: defaults.group_tag,
            group_min_size: defaults.group_min_size,
            receiver_timeout_ns: defaults.receiver_timeout_ns,
            retransmit_receiver_window_multiple: None,
        };
        let Some(fc) = fc else {
            if group {
                spec.strategy = Some(defaults.multicast_strategy);
            }
            return Ok(spec);
        };
        if !group {
            return Err(format!(
                "fc={fc}: flow control strategies are for multicast and multi-destination channels; a unicast publication has one receiver"
            ));
        }
        let p = FlowControlParams::parse(fc).map_err(|e| format!("fc={fc}: {e}"))?;
        spec.strategy = Some(p.strategy);
        if let Some(tag) = p.group_tag {
            spec.group_tag = tag;
        }
        if let Some(n) = p.group_min_size {
            spec.group_min_size = n as usize;
        }
        if let Some(t) = p.receiver_timeout_ns {
            spec.receiver_timeout_ns = t.min(i64::MAX as u64) as i64;
        }
        spec.retransmit_receiver_window_multiple = p.retransmit_receiver_window_multiple;
        Ok(spec)
    }

    /// A fresh strategy of this kind.
    pub fn build(&self) -> Box<dyn FlowControl> {
        match self.strategy {
            None => Box::new(UnicastFlowControl),
            Some(FlowControlStrategy::Max) => Box::new(MaxFlowControl),
            Some(FlowControlStrategy::Min) => Box::new(MinFlowControl::new(
                None,
                self.group_min_size,
                self.receiver_timeout_ns,
            )),
            Some(FlowControlStrategy::Tagged) => Box::new(MinFlowControl::new(
                Some(self.group_tag),
                self.group_min_size,
                self.receiver_timeout_ns,
            )),
        }
    }

    /// True for `min` and `tagged`, which track receivers.
    pub fn tracks_receivers(&self) -> bool {
        matches!(
            self.strategy,
            Some(FlowControlStrategy::Min | FlowControlStrategy::Tagged)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn sm(receiver_id: i64, window: i32) -> StatusMessageFrame {
        StatusMessageFrame {
            flags: 0,
            session_id: 1,
            stream_id: 2,
            consumption_term_id: 0,
            consumption_term_offset: 0,
            receiver_window: window,
            receiver_id,
            group_tag: None,
        }
    }

    fn tagged(receiver_id: i64, tag: i64) -> StatusMessageFrame {
        StatusMessageFrame {
            group_tag: Some(tag),
            ..sm(receiver_id, 1000)
        }
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    #[test]
    fn should_open_the_window_from_the_reported_position_and_never_move_back() {
        let mut fc = UnicastFlowControl;
        let rx = addr(4000);
        assert_eq!(fc.on_status_message(&sm(9, 1024), rx, 0, 0, 0), 1024);
        assert_eq!(fc.on_status_message(&sm(9, 1024), rx, 4096, 1024, 1), 5120);
        // A late, older status message does not pull the limit back.
        assert_eq!(fc.on_status_message(&sm(9, 1024), rx, 2048, 5120, 2), 5120);
        assert_eq!(fc.on_idle(3, 5120, 5000, false), 5120);
        assert!(fc.has_required_receivers());
    }

    #[test]
    fn should_let_the_fastest_receiver_pace_a_max_stream() {
        let mut fc = MaxFlowControl;
        assert_eq!(
            fc.on_status_message(&sm(1, 1000), addr(1), 5000, 0, 0),
            6000
        );
        // The slow one does not hold the limit back.
        assert_eq!(
            fc.on_status_message(&sm(2, 1000), addr(2), 100, 6000, 1),
            6000
        );
        assert_eq!(fc.on_idle(10 * S, 6000, 6000, false), 6000);
        assert!(fc.receivers().is_empty());
    }

    #[test]
    fn should_let_the_slowest_receiver_pace_a_min_stream_until_it_times_out() {
        let mut fc = MinFlowControl::new(None, 0, 5 * S);
        assert_eq!(
            fc.on_status_message(&sm(1, 1000), addr(1), 5000, 0, 0),
            6000
        );
        // A second receiver a window behind joins and holds the stream back
        // on the next turn (a status message never lowers the limit).
        assert_eq!(
            fc.on_status_message(&sm(2, 1000), addr(2), 4200, 6000, 1),
            6000
        );
        assert_eq!(fc.on_idle(2, 6000, 5200, false), 5200);
        assert_eq!(fc.receivers().len(), 2);
        // The fast one moves on: still the slow one's edge.
        assert_eq!(
            fc.on_status_message(&sm(1, 1000), addr(1), 5200, 5200, 3),
            5200
        );
        // The slow one catches up: the fast one's edge.
        assert_eq!(
            fc.on_status_message(&sm(2, 1000), addr(2), 5200, 5200, 4),
            6200
        );
        // The slow one falls silent; the fast one keeps talking: after the
        // timeout only the fast one paces.
        for t in 1..6 {
            fc.on_status_message(&sm(1, 1000), addr(1), 5200 + t * 10, 6200, t * S);
        }
        assert_eq!(fc.on_idle(5 * S + 4, 6200, 6200, false), 6250);
        assert_eq!(fc.receivers().len(), 1);
        assert_eq!(fc.receivers()[0].receiver_id, 1);
    }

    #[test]
    fn should_drop_a_receiver_that_says_end_of_stream_or_errs() {
        let mut fc = MinFlowControl::new(None, 0, 5 * S);
        fc.on_status_message(&sm(1, 1000), addr(1), 5000, 0, 0);
        fc.on_status_message(&sm(2, 1000), addr(2), 4500, 6000, 0);
        assert_eq!(fc.on_idle(1, 6000, 5000, false), 5500);
        let eos = StatusMessageFrame {
            flags: StatusMessageFrame::EOS_FLAG,
            ..sm(2, 1000)
        };
        fc.on_status_message(&eos, addr(2), 4500, 5500, 2);
        assert_eq!(fc.on_idle(3, 5500, 5000, false), 6000);
        fc.on_error(1, None);
        // Nobody left: the limit stays where it is.
        assert_eq!(fc.on_idle(4, 6000, 6000, false), 6000);
        assert!(fc.receivers().is_empty());
        // An end-of-stream status message never adds a receiver.
        fc.on_status_message(&eos, addr(2), 4500, 6000, 5);
        assert!(fc.receivers().is_empty());
    }

    #[test]
    fn should_not_let_a_receiver_more_than_a_window_behind_join_the_group() {
        let mut fc = MinFlowControl::new(None, 0, 5 * S);
        fc.on_status_message(&sm(1, 1000), addr(1), 50_000, 0, 0);
        // 2,000 behind the group's edge of 51,000 with a window of 1,000: it
        // would stall everybody; it is not tracked.
        assert_eq!(
            fc.on_status_message(&sm(2, 1000), addr(2), 48_000, 51_000, 1),
            51_000
        );
        assert_eq!(fc.receivers().len(), 1);
        // Within a window: tracked.
        fc.on_status_message(&sm(2, 1000), addr(2), 49_500, 51_000, 2);
        assert_eq!(fc.receivers().len(), 2);
    }

    #[test]
    fn should_wait_for_the_minimum_group_before_it_connects_or_moves() {
        let mut fc = MinFlowControl::new(None, 2, 5 * S);
        assert!(!fc.has_required_receivers());
        assert_eq!(fc.on_status_message(&sm(1, 1000), addr(1), 0, 0, 0), 0);
        assert_eq!(fc.on_idle(1, 0, 0, false), 0);
        assert!(!fc.has_required_receivers());
        assert_eq!(fc.on_status_message(&sm(2, 1000), addr(2), 0, 0, 2), 1000);
        assert!(fc.has_required_receivers());
        // One times out: disconnected again, the limit stays.
        fc.on_status_message(&sm(1, 1000), addr(1), 500, 1000, 4 * S);
        assert_eq!(fc.on_idle(5 * S + 3, 1000, 1000, false), 1000);
        assert!(!fc.has_required_receivers());
    }

    #[test]
    fn should_track_only_the_receivers_of_its_group_when_tagged() {
        let mut fc = MinFlowControl::new(Some(7), 0, 5 * S);
        // Untagged and other groups are not tracked; with nobody of the
        // group yet, the limit follows them as max does.
        assert_eq!(fc.on_status_message(&sm(1, 1000), addr(1), 100, 0, 0), 1100);
        assert_eq!(
            fc.on_status_message(&tagged(2, 8), addr(2), 200, 1100, 0),
            1200
        );
        assert!(fc.receivers().is_empty());
        // A member of the group paces from now on; others do not hold it back.
        assert_eq!(
            fc.on_status_message(&tagged(3, 7), addr(3), 300, 1200, 1),
            1300
        );
        assert_eq!(
            fc.on_status_message(&sm(1, 1000), addr(1), 5000, 1300, 2),
            1300
        );
        assert_eq!(fc.on_idle(3, 1300, 1300, false), 1300);
        assert_eq!(fc.receivers().len(), 1);
        // An error frame from another group does not drop our member.
        fc.on_error(3, Some(8));
        assert_eq!(fc.on_idle(4, 1300, 1300, false), 1300);
        assert_eq!(fc.receivers().len(), 1);
    }

    #[test]
    fn should_hold_the_limit_while_a_newcomer_asks_for_a_setup() {
        let mut fc = MinFlowControl::new(None, 0, 5 * S);
        fc.on_status_message(&sm(1, 1000), addr(1), 10_000, 0, 0);
        let eliciting = StatusMessageFrame::setup_eliciting(1, 2, 2);
        fc.on_trigger_send_setup(&eliciting, 1);
        fc.on_setup(11_000, 1);
        // The member moves on, the limit stays where the SETUP found it...
        assert_eq!(
            fc.on_status_message(&sm(1, 1000), addr(1), 11_000, 11_000, 2),
            11_000
        );
        assert_eq!(fc.on_idle(3, 11_000, 11_000, false), 11_000);
        // ... until the newcomer is tracked,
        fc.on_status_message(&sm(2, 1000), addr(2), 10_500, 11_000, 4);
        assert_eq!(fc.on_idle(5, 11_000, 11_000, false), 11_500);
        // or, had it never come, the receiver timeout passed.
        let mut fc = MinFlowControl::new(None, 0, 5 * S);
        fc.on_status_message(&sm(1, 1000), addr(1), 10_000, 0, 0);
        fc.on_trigger_send_setup(&eliciting, 1);
        fc.on_setup(11_000, 1);
        fc.on_status_message(&sm(1, 1000), addr(1), 20_000, 11_000, 5 * S);
        assert_eq!(fc.on_idle(5 * S + 2, 11_000, 11_000, false), 21_000);
    }

    #[test]
    fn should_choose_the_strategy_from_the_channel_and_the_defaults() {
        let defaults = FlowControlDefaults {
            multicast_strategy: FlowControlStrategy::Max,
            group_tag: -1,
            group_min_size: 0,
            receiver_timeout_ns: 5 * S,
        };
        let unicast = FlowControlSpec::of(None, false, &defaults).unwrap();
        assert_eq!(unicast.strategy, None);
        assert!(!unicast.tracks_receivers());
        assert_eq!(
            FlowControlSpec::of(None, true, &defaults).unwrap().strategy,
            Some(FlowControlStrategy::Max)
        );
        let tagged =
            FlowControlSpec::of(Some("tagged,g:9/2,t:1s,rrwm:2"), true, &defaults).unwrap();
        assert_eq!(tagged.strategy, Some(FlowControlStrategy::Tagged));
        assert_eq!((tagged.group_tag, tagged.group_min_size), (9, 2));
        assert_eq!(tagged.receiver_timeout_ns, S);
        assert_eq!(tagged.retransmit_receiver_window_multiple, Some(2));
        assert!(tagged.tracks_receivers());
        // The driver's default tag when the channel names none.
        assert_eq!(
            FlowControlSpec::of(Some("tagged"), true, &defaults)
                .unwrap()
                .group_tag,
            -1
        );
        let e = FlowControlSpec::of(Some("min"), false, &defaults).unwrap_err();
        assert!(e.contains("fc=min") && e.contains("multicast"), "{e}");
    }
}
