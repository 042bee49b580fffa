//! Multi-destination subscriptions, deterministic: a driver in invoker mode
//! on a manual clock, its sockets on a network in memory, publishers played
//! by the test. One subscription (`control-mode=manual`) gets a socket per
//! destination; a session's frames from any of them feed one image, which
//! answers each way it is heard from.

mod common;

use common::{Harness, MS};
use std::net::SocketAddr;
use std::sync::Arc;
use sulis_driver::media::memory::{Datagram, MemoryNetwork};
use sulis_protocol::control::{Command, Event};
use sulis_protocol::frame::{default_data_header, SetupFrame, HDR_TYPE_SM};

const A: &str = "10.0.0.1:7000";
const B: &str = "10.0.0.1:7001";
/// The publisher's sockets, one per way.
const P1: &str = "10.0.0.9:6000";
const P2: &str = "10.0.0.8:6000";
const SESSION: i32 = 5;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

struct Mds {
    h: Harness,
    net: MemoryNetwork,
    subscription_id: i64,
    _publishers: Vec<sulis_driver::media::memory::MemoryTransport>,
}

impl Mds {
    fn new(name: &str) -> Mds {
        let net = MemoryNetwork::new();
        let mut h = Harness::with_transports(name, |_| {}, Arc::new(net.clone()));
        h.keepalive();
        let subscription_id = h.add_subscription("aeron:udp?control-mode=manual", 1);
        h.settle();
        assert!(h
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::SubscriptionReady { .. })));
        let publishers = [P1, P2]
            .iter()
            .map(|p| net.bind(addr(p)).unwrap())
            .collect();
        Mds {
            h,
            net,
            subscription_id,
            _publishers: publishers,
        }
    }

    fn destination(&mut self, add: bool, at: &str) -> Event {
        let correlation_id = self.h.correlation_id();
        let (client_id, registration_id) = (self.h.client_id, self.subscription_id);
        let channel = format!("aeron:udp?endpoint={at}");
        self.h.send(if add {
            Command::AddDestination {
                client_id,
                correlation_id,
                registration_id,
                channel,
                receive: true,
            }
        } else {
            Command::RemoveDestination {
                client_id,
                correlation_id,
                registration_id,
                channel,
                receive: true,
            }
        });
        self.h.settle();
        self.h
            .take_events()
            .into_iter()
            .find(|e| match e {
                Event::OperationSuccess { correlation_id: c } => *c == correlation_id,
                Event::Error {
                    correlation_id: c, ..
                } => *c == correlation_id,
                _ => false,
            })
            .expect("an answer")
    }

    fn send(&self, from: &str, to: &str, bytes: Vec<u8>) {
        self.net.inject(
            addr(to),
            Datagram {
                from: addr(from),
                bytes,
            },
        );
    }

    fn setup(&self, from: &str, to: &str) {
        let setup = SetupFrame {
            flags: 0,
            term_offset: 0,
            session_id: SESSION,
            stream_id: 1,
            initial_term_id: 0,
            active_term_id: 0,
            term_length: 64 * 1024,
            mtu: 1408,
            ttl: 0,
        };
        self.send(from, to, setup.to_bytes().to_vec());
    }

    /// One 64-byte frame at `offset`.
    fn data(&self, from: &str, to: &str, offset: i32) {
        let mut f = default_data_header(SESSION, 1, 0).to_vec();
        f[0..4].copy_from_slice(&64i32.to_le_bytes());
        f[8..12].copy_from_slice(&offset.to_le_bytes());
        f.resize(64, 7);
        self.send(from, to, f);
    }

    fn status_messages_to(&self, at: &str) -> usize {
        self.net
            .take(addr(at))
            .iter()
            .filter(|d| u16::from_le_bytes([d.bytes[6], d.bytes[7]]) == HDR_TYPE_SM)
            .count()
    }

    fn images(&mut self) -> usize {
        self.h
            .take_events()
            .iter()
            .filter(|e| matches!(e, Event::AvailableImage { .. }))
            .count()
    }

    fn rcv_pos(&self) -> i64 {
        let ids = self
            .h
            .counters_of_type(sulis_protocol::counters::type_id::RECEIVER_POSITION);
        assert_eq!(ids.len(), 1, "one image");
        self.h.counters.counter_value(ids[0])
    }
}

#[test]
fn one_image_takes_a_sessions_frames_from_every_destination_and_answers_each_way() {
    let mut m = Mds::new("mds-two");
    for at in [A, B] {
        let answer = m.destination(true, at);
        assert!(
            matches!(answer, Event::OperationSuccess { .. }),
            "{answer:?}"
        );
    }
    assert!(
        m.net.is_bound(addr(A)) && m.net.is_bound(addr(B)),
        "a socket per destination"
    );
    m.setup(P1, A);
    m.h.advance(MS);
    assert_eq!(m.images(), 1);
    // The same session by the other way: no second image.
    m.setup(P2, B);
    m.data(P1, A, 0);
    m.data(P2, B, 64);
    m.h.advance(MS);
    assert_eq!(m.images(), 0);
    assert_eq!(
        m.rcv_pos(),
        128,
        "frames from both ways rebuilt into one log"
    );
    m.net.take(addr(P1));
    m.net.take(addr(P2));
    m.h.advance(300 * MS);
    assert!(
        m.status_messages_to(P1) > 0,
        "status messages go back the first way"
    );
    assert!(m.status_messages_to(P2) > 0, "and the second");
    // B goes: its socket closes and nothing more goes back that way.
    m.destination(false, B);
    assert!(!m.net.is_bound(addr(B)));
    m.data(P1, A, 128);
    m.h.advance(300 * MS);
    assert!(m.status_messages_to(P1) > 0);
    assert_eq!(m.status_messages_to(P2), 0);
    assert_eq!(m.rcv_pos(), 192);
}

#[test]
fn destinations_are_only_for_manual_subscriptions_of_their_owner() {
    let mut m = Mds::new("mds-refused");
    let plain = m.h.add_subscription("aeron:udp?endpoint=10.0.0.1:7100", 1);
    m.h.settle();
    m.h.take_events();
    let ask = |m: &mut Mds, client_id: i64, registration_id: i64, channel: &str| {
        let correlation_id = m.h.correlation_id();
        m.h.send(Command::AddDestination {
            client_id,
            correlation_id,
            registration_id,
            channel: channel.into(),
            receive: true,
        });
        m.h.settle();
        m.h.take_events().into_iter().find_map(|e| match e {
            Event::Error { message, .. } => Some(message),
            _ => None,
        })
    };
    let client_id = m.h.client_id;
    let sub = m.subscription_id;
    let e = ask(&mut m, client_id, plain, "aeron:udp?endpoint=10.0.0.1:7101").unwrap();
    assert!(e.contains("does not allow manual control"), "{e}");
    let e = ask(
        &mut m,
        client_id + 1,
        sub,
        "aeron:udp?endpoint=10.0.0.1:7101",
    )
    .unwrap();
    assert!(e.contains("unknown subscription"), "{e}");
    let e = ask(&mut m, client_id, sub, "aeron:ipc").unwrap();
    assert!(e.contains("UDP endpoint"), "{e}");
    let e = ask(
        &mut m,
        client_id,
        sub,
        "aeron:udp?endpoint=10.0.0.1:7102|mtu=1408",
    )
    .unwrap();
    assert!(e.contains("must not contain the key mtu"), "{e}");
    assert!(ask(&mut m, client_id, sub, "aeron:udp?endpoint=10.0.0.1:7103").is_none());
    let e = ask(&mut m, client_id, sub, "aeron:udp?endpoint=10.0.0.1:7103").unwrap();
    assert!(e.contains("already"), "{e}");
    assert!(!m.net.is_bound(addr("10.0.0.1:7101")));
}

#[test]
fn a_destination_removed_and_added_again_at_once_binds_its_address_again() {
    let mut m = Mds::new("mds-readd");
    assert!(matches!(
        m.destination(true, A),
        Event::OperationSuccess { .. }
    ));
    // Both commands in the conductor's one duty cycle, before the receiver
    // has closed the removed destination's socket: the add waits for it.
    let (client_id, registration_id) = (m.h.client_id, m.subscription_id);
    let channel = format!("aeron:udp?endpoint={A}");
    let remove = m.h.correlation_id();
    m.h.send(Command::RemoveDestination {
        client_id,
        correlation_id: remove,
        registration_id,
        channel: channel.clone(),
        receive: true,
    });
    let add = m.h.correlation_id();
    m.h.send(Command::AddDestination {
        client_id,
        correlation_id: add,
        registration_id,
        channel,
        receive: true,
    });
    m.h.settle();
    let events = m.h.take_events();
    let answer = |wanted: i64| {
        events
            .iter()
            .find(|e| match e {
                Event::OperationSuccess { correlation_id } => *correlation_id == wanted,
                Event::Error { correlation_id, .. } => *correlation_id == wanted,
                _ => false,
            })
            .unwrap_or_else(|| panic!("an answer to {wanted} in {events:?}"))
    };
    assert!(matches!(answer(remove), Event::OperationSuccess { .. }));
    assert!(
        matches!(answer(add), Event::OperationSuccess { .. }),
        "{:?}",
        answer(add)
    );
    assert!(m.net.is_bound(addr(A)));
    // The destination works: a session heard on it gets an image.
    m.setup(P1, A);
    m.h.advance(MS);
    assert_eq!(m.images(), 1);
}

#[test]
fn a_destination_of_a_closed_subscription_can_be_bound_by_the_next_at_once() {
    let mut m = Mds::new("mds-next");
    assert!(matches!(
        m.destination(true, A),
        Event::OperationSuccess { .. }
    ));
    let (client_id, old) = (m.h.client_id, m.subscription_id);
    // The old subscription goes (its endpoint and destination sockets with
    // it), a new one comes and adds the same destination, all in one batch.
    let remove = m.h.correlation_id();
    m.h.send(Command::RemoveSubscription {
        client_id,
        correlation_id: remove,
        registration_id: old,
    });
    let new = m.h.add_subscription("aeron:udp?control-mode=manual", 1);
    let add = m.h.correlation_id();
    m.h.send(Command::AddDestination {
        client_id,
        correlation_id: add,
        registration_id: new,
        channel: format!("aeron:udp?endpoint={A}"),
        receive: true,
    });
    m.h.settle();
    let events = m.h.take_events();
    let answer = events.iter().find(|e| match e {
        Event::OperationSuccess { correlation_id } => *correlation_id == add,
        Event::Error { correlation_id, .. } => *correlation_id == add,
        _ => false,
    });
    assert!(
        matches!(answer, Some(Event::OperationSuccess { .. })),
        "{answer:?}"
    );
    assert!(m.net.is_bound(addr(A)));
}
