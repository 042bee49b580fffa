//! Flow control: how far a network publication may send, given what its
//! receivers report in status messages.
//!
//! The sender asks a publication's [`FlowControl`] for the sender limit on
//! every status message and every send turn. Unicast has one receiver: the
//! limit is the furthest position + window it reported. Multicast strategies
//! (Aeron's `min`, `max` and `tagged`, chosen by the channel's `fc`
//! parameter) plug in here when multicast comes.

use std::net::SocketAddr;
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

    /// Every send turn: returns the sender limit to use now (strategies that
    /// track receivers forget the ones that fell silent here).
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sm(window: i32) -> StatusMessageFrame {
        StatusMessageFrame {
            flags: 0,
            session_id: 1,
            stream_id: 2,
            consumption_term_id: 0,
            consumption_term_offset: 0,
            receiver_window: window,
            receiver_id: 9,
            group_tag: None,
        }
    }

    #[test]
    fn should_open_the_window_from_the_reported_position_and_never_move_back() {
        let mut fc = UnicastFlowControl;
        let rx: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(fc.on_status_message(&sm(1024), rx, 0, 0, 0), 1024);
        assert_eq!(fc.on_status_message(&sm(1024), rx, 4096, 1024, 1), 5120);
        // A late, older status message does not pull the limit back.
        assert_eq!(fc.on_status_message(&sm(1024), rx, 2048, 5120, 2), 5120);
        assert_eq!(fc.on_idle(3, 5120, 5000, false), 5120);
        assert!(fc.has_required_receivers());
    }
}
