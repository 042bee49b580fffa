//! Multi-destination-cast: the destinations of an MDC send endpoint (Aeron's
//! `MultiSndDestination`). Every publication on the endpoint sends each
//! datagram (data, SETUP, heartbeats, retransmits) to every destination.
//!
//! * **dynamic** (`control-mode=dynamic|control=HOST:PORT`): receivers join by
//!   sending status messages to the control address (a subscription with
//!   `control=` sends a setup-eliciting one, session 0 stream 0, every
//!   second while it subscribes, even before any stream exists); each one's
//!   source address becomes a destination, known by (receiver id, port), and
//!   one that sends nothing for [`DESTINATION_TIMEOUT_NS`] (5 s, as Aeron's)
//!   is dropped.
//! * **manual** (`control-mode=manual`): the publication's client adds and
//!   removes destinations (`add_destination("aeron:udp?endpoint=HOST:PORT")`);
//!   they stay until removed. A destination learns its receiver's id from
//!   the first status message that comes from its address.
//!
//! No I/O and no clock: `now_ns` comes in.

use std::net::SocketAddr;
use sulis_protocol::frame::StatusMessageFrame;

/// A dynamic destination silent this long is dropped (Aeron's, fixed).
pub const DESTINATION_TIMEOUT_NS: i64 = 5_000_000_000;

/// How destinations come and go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MdcMode {
    /// Learnt from the status messages sent to the control address.
    Dynamic,
    /// Added and removed by the publication's client.
    Manual,
}

/// One destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// Where datagrams go.
    pub address: SocketAddr,
    /// The receiver there, once a status message named it.
    pub receiver_id: Option<i64>,
    /// When a status message last came from it (dynamic: its liveness).
    pub time_of_last_activity_ns: i64,
    /// Manual: the correlation id of the command that added it (-1: dynamic).
    pub registration_id: i64,
    /// Manual: the channel it was added with.
    pub channel: String,
}

/// The destinations of one MDC send endpoint.
#[derive(Clone, Debug)]
pub struct MultiSendDestination {
    mode: MdcMode,
    destinations: Vec<Destination>,
    /// The addresses sent to, kept in step with `destinations`.
    addresses: Vec<SocketAddr>,
}

impl MultiSendDestination {
    /// An endpoint with no destination yet.
    pub fn new(mode: MdcMode) -> MultiSendDestination {
        MultiSendDestination {
            mode,
            destinations: Vec::new(),
            addresses: Vec::new(),
        }
    }

    /// Dynamic or manual.
    pub fn mode(&self) -> MdcMode {
        self.mode
    }

    /// The destinations now.
    pub fn destinations(&self) -> &[Destination] {
        &self.destinations
    }

    /// Where every datagram goes now. Dynamic destinations silent for the
    /// timeout are dropped first.
    pub fn addresses(&mut self, now_ns: i64) -> &[SocketAddr] {
        if self.mode == MdcMode::Dynamic {
            let before = self.destinations.len();
            self.destinations
                .retain(|d| now_ns - d.time_of_last_activity_ns < DESTINATION_TIMEOUT_NS);
            if self.destinations.len() != before {
                self.refresh();
            }
        }
        &self.addresses
    }

    /// A status message (any session and stream, setup-eliciting ones and
    /// the session 0 / stream 0 probes included) came from `src`: dynamic,
    /// its source becomes or stays a destination; manual, the destination
    /// at that address learns its receiver id and is marked active.
    pub fn on_status_message(&mut self, sm: &StatusMessageFrame, src: SocketAddr, now_ns: i64) {
        let dynamic = self.mode == MdcMode::Dynamic;
        // A dynamic destination follows its receiver (id and port) to a new
        // address; a manual one is where its client put it, whoever talks.
        let known = self.destinations.iter_mut().find(|d| match d.receiver_id {
            Some(id) if dynamic => id == sm.receiver_id && d.address.port() == src.port(),
            _ => d.address == src,
        });
        match known {
            Some(d) => {
                d.receiver_id = Some(sm.receiver_id);
                d.time_of_last_activity_ns = now_ns;
                if d.address != src {
                    // The receiver's address changed (same id and port).
                    d.address = src;
                    self.refresh();
                }
            }
            None if self.mode == MdcMode::Dynamic => {
                self.destinations.push(Destination {
                    address: src,
                    receiver_id: Some(sm.receiver_id),
                    time_of_last_activity_ns: now_ns,
                    registration_id: -1,
                    channel: String::new(),
                });
                self.refresh();
            }
            None => {}
        }
    }

    /// Manual: adds a destination (again: a second add of one address is
    /// kept once, under the newest registration).
    pub fn add(&mut self, channel: &str, address: SocketAddr, registration_id: i64, now_ns: i64) {
        self.destinations.retain(|d| d.address != address);
        self.destinations.push(Destination {
            address,
            receiver_id: None,
            time_of_last_activity_ns: now_ns,
            registration_id,
            channel: channel.to_owned(),
        });
        self.refresh();
    }

    /// Manual: removes the destination at `address`; true if there was one.
    pub fn remove_address(&mut self, address: SocketAddr) -> bool {
        self.remove_where(|d| d.address == address)
    }

    /// Manual: removes the destination added by the command `registration_id`; true if there was one.
    pub fn remove_registration(&mut self, registration_id: i64) -> bool {
        self.remove_where(|d| d.registration_id == registration_id)
    }

    fn remove_where(&mut self, f: impl Fn(&Destination) -> bool) -> bool {
        let before = self.destinations.len();
        self.destinations.retain(|d| !f(d));
        self.refresh();
        self.destinations.len() != before
    }

    fn refresh(&mut self) {
        self.addresses.clear();
        self.addresses
            .extend(self.destinations.iter().map(|d| d.address));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn sm(receiver_id: i64) -> StatusMessageFrame {
        StatusMessageFrame::setup_eliciting(0, 0, receiver_id)
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn should_learn_dynamic_destinations_from_status_messages_and_drop_the_silent() {
        let mut m = MultiSendDestination::new(MdcMode::Dynamic);
        m.on_status_message(&sm(1), addr("10.0.0.2:5000"), 0);
        m.on_status_message(&sm(2), addr("10.0.0.3:5000"), 0);
        m.on_status_message(&sm(1), addr("10.0.0.2:5000"), S);
        assert_eq!(
            m.addresses(S),
            [addr("10.0.0.2:5000"), addr("10.0.0.3:5000")]
        );
        // Receiver 2 falls silent; receiver 1 keeps talking.
        m.on_status_message(&sm(1), addr("10.0.0.2:5000"), 5 * S);
        assert_eq!(m.addresses(5 * S), [addr("10.0.0.2:5000")]);
        // It comes back: a destination again.
        m.on_status_message(&sm(2), addr("10.0.0.3:5000"), 6 * S);
        assert_eq!(m.addresses(6 * S).len(), 2);
    }

    #[test]
    fn should_keep_manual_destinations_where_their_client_put_them() {
        let mut m = MultiSendDestination::new(MdcMode::Manual);
        m.add(
            "aeron:udp?endpoint=10.0.0.2:5000",
            addr("10.0.0.2:5000"),
            1,
            0,
        );
        m.add(
            "aeron:udp?endpoint=10.0.0.3:5000",
            addr("10.0.0.3:5000"),
            2,
            0,
        );
        // One receiving driver (one receiver id) behind both: each status message marks its own.
        m.on_status_message(&sm(9), addr("10.0.0.2:5000"), 1);
        m.on_status_message(&sm(9), addr("10.0.0.3:5000"), 2);
        m.on_status_message(&sm(9), addr("10.0.0.4:5000"), 3); // a stranger with that id
        assert_eq!(
            m.addresses(4),
            [addr("10.0.0.2:5000"), addr("10.0.0.3:5000")]
        );
        assert!(m.remove_address(addr("10.0.0.2:5000")));
    }

    #[test]
    fn should_follow_a_receiver_whose_address_changed_and_tell_receivers_apart_by_id_and_port() {
        let mut m = MultiSendDestination::new(MdcMode::Dynamic);
        m.on_status_message(&sm(1), addr("10.0.0.2:5000"), 0);
        // Same receiver id and port, new address (a re-addressed host): followed, not doubled.
        m.on_status_message(&sm(1), addr("10.0.0.9:5000"), 1);
        assert_eq!(m.addresses(1), [addr("10.0.0.9:5000")]);
        // Two receivers behind one address (NAT), told apart by their ids.
        m.on_status_message(&sm(3), addr("10.0.0.9:5001"), 2);
        assert_eq!(m.addresses(2).len(), 2);
    }

    #[test]
    fn should_keep_manual_destinations_until_removed_and_learn_their_receiver() {
        let mut m = MultiSendDestination::new(MdcMode::Manual);
        m.add(
            "aeron:udp?endpoint=10.0.0.2:5000",
            addr("10.0.0.2:5000"),
            7,
            0,
        );
        m.add(
            "aeron:udp?endpoint=10.0.0.3:5000",
            addr("10.0.0.3:5000"),
            8,
            0,
        );
        // A stranger's status messages add nothing to a manual endpoint.
        m.on_status_message(&sm(9), addr("10.0.0.4:5000"), 1);
        m.on_status_message(&sm(1), addr("10.0.0.2:5000"), 1);
        assert_eq!(m.destinations()[0].receiver_id, Some(1));
        // Silent for a minute: still there.
        assert_eq!(m.addresses(60 * S).len(), 2);
        assert!(m.remove_address(addr("10.0.0.2:5000")));
        assert!(!m.remove_address(addr("10.0.0.2:5000")));
        assert!(m.remove_registration(8));
        assert!(m.addresses(60 * S).is_empty());
        // Added twice: kept once.
        m.add("a", addr("10.0.0.5:5000"), 10, 0);
        m.add("a", addr("10.0.0.5:5000"), 11, 0);
        assert_eq!(m.addresses(0).len(), 1);
        assert!(!m.remove_registration(10));
        assert!(m.remove_registration(11));
    }
}
