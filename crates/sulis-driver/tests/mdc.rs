//! Multi-destination-cast, deterministic: a driver in invoker mode on a
//! manual clock, its sockets on a network in memory. Receivers are played by
//! the test (addresses it binds, status messages it injects at the
//! publication's control address), or are a subscription of the same driver.

mod common;

use common::{Harness, MS};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use sulis_concurrent::logbuffer::term_appender::{Append, HeaderWriter, TermAppender};
use sulis_concurrent::logbuffer::LogBuffers;
use sulis_driver::media::memory::{Datagram, MemoryNetwork, MemoryTransport};
use sulis_protocol::control::{error_code, Command, Event};
use sulis_protocol::frame::{
    SetupFrame, StatusMessageFrame, DATA_HEADER_LENGTH, HDR_TYPE_DATA, HDR_TYPE_SETUP,
};

const CONTROL: &str = "10.9.0.1:40200";

fn frame_type(d: &Datagram) -> u16 {
    u16::from_le_bytes([d.bytes[6], d.bytes[7]])
}

/// An MDC publication (`params` after `aeron:udp?`), its log and session.
struct Mdc {
    h: Harness,
    net: MemoryNetwork,
    publication_id: i64,
    session_id: i32,
    publication: LogBuffers,
    control: SocketAddr,
    /// Fake receivers' sockets, kept bound.
    receivers: Vec<MemoryTransport>,
}

impl Mdc {
    fn publish_on(name: &str, params: &str) -> Mdc {
        let net = MemoryNetwork::new();
        let mut h = Harness::with_transports(name, |_| {}, Arc::new(net.clone()));
        h.keepalive();
        let publication_id = h.add_publication(&format!("aeron:udp?{params}"), 1);
        h.settle();
        let (session_id, log) = h
            .take_events()
            .into_iter()
            .find_map(|e| match e {
                Event::PublicationReady {
                    session_id,
                    log_file,
                    ..
                } => Some((session_id, log_file)),
                _ => None,
            })
            .expect("the publication is ready");
        Mdc {
            h,
            net,
            publication_id,
            session_id,
            publication: LogBuffers::map_existing(Path::new(&log)).unwrap(),
            control: CONTROL.parse().unwrap(),
            receivers: Vec::new(),
        }
    }

    /// A fake receiver's socket at `at`.
    fn receiver(&mut self, at: &str) -> SocketAddr {
        let t = self.net.bind(at.parse().unwrap()).unwrap();
        self.receivers.push(t);
        at.parse().unwrap()
    }

    fn inject(&self, from: SocketAddr, sm: StatusMessageFrame) {
        let mut buf = [0u8; StatusMessageFrame::LENGTH_WITH_GROUP_TAG];
        let len = sm.encode(&mut buf);
        self.net.inject(
            self.control,
            Datagram {
                from,
                bytes: buf[..len].to_vec(),
            },
        );
    }

    /// The probe an MDC receiver sends before any stream exists.
    fn probe(&self, from: SocketAddr, receiver_id: i64) {
        self.inject(from, StatusMessageFrame::setup_eliciting(0, 0, receiver_id));
    }

    fn status(&self, from: SocketAddr, receiver_id: i64, position: i32) {
        self.inject(
            from,
            StatusMessageFrame {
                flags: 0,
                session_id: self.session_id,
                stream_id: 1,
                consumption_term_id: self.publication.initial_term_id(),
                consumption_term_offset: position,
                receiver_window: 4096,
                receiver_id,
                group_tag: None,
            },
        );
    }

    fn publish(&self, count: usize) {
        let header = HeaderWriter::new(&self.publication.default_header());
        let appender = TermAppender::new(self.publication.term(0), self.publication.meta(), 0);
        for i in 0..count {
            let m = vec![i as u8; 100];
            assert!(matches!(
                appender.append_unfragmented(&header, &m, None),
                Append::Done(_)
            ));
        }
    }

    /// Frame types of what arrived at `at`.
    fn arrived(&self, at: SocketAddr) -> Vec<u16> {
        self.net.take(at).iter().map(frame_type).collect()
    }
}

#[test]
fn dynamic_mdc_sends_to_every_receiver_that_joined_and_drops_the_silent_one() {
    let mut m = Mdc::publish_on(
        "mdc-dynamic",
        &format!("control={CONTROL}|control-mode=dynamic"),
    );
    assert!(
        m.net.bound().contains(&m.control),
        "the publication binds its control address"
    );
    let a = m.receiver("10.0.0.2:5000");
    let b = m.receiver("10.0.0.3:5000");
    m.probe(a, 1);
    m.probe(b, 2);
    // Not yet connected, the stream sends SETUPs to every destination each setup interval.
    m.h.advance(100 * MS);
    for at in [a, b] {
        let setups: Vec<SetupFrame> = m
            .net
            .take(at)
            .iter()
            .filter(|d| frame_type(d) == HDR_TYPE_SETUP)
            .map(|d| SetupFrame::decode(&d.bytes).unwrap())
            .collect();
        assert!(!setups.is_empty(), "a SETUP went to {at}");
        assert!(setups[0].is_group(), "with the GROUP flag");
    }
    m.status(a, 1, 0);
    m.status(b, 2, 0);
    m.h.advance(MS);
    m.publish(10);
    m.h.advance(MS);
    for at in [a, b] {
        assert!(m.arrived(at).contains(&HDR_TYPE_DATA), "data went to {at}");
    }
    // b falls silent for the destination timeout (5 s); a keeps reporting.
    for _ in 0..55 {
        m.h.keepalive();
        m.status(a, 1, 1600);
        m.h.advance(100 * MS);
    }
    m.net.take(a);
    m.net.take(b);
    m.publish(5);
    m.h.advance(MS);
    assert!(m.arrived(a).contains(&HDR_TYPE_DATA));
    assert!(
        m.arrived(b).is_empty(),
        "the silent destination was dropped"
    );
}

#[test]
fn the_probes_of_receivers_already_there_do_not_hold_a_min_stream() {
    // Regression: each probe (every second per subscription) once counted as a
    // SETUP request, and a min flow control held its limit for a receiver timeout
    // after each: the stream stopped for good.
    let mut m = Mdc::publish_on(
        "mdc-probes",
        &format!("control={CONTROL}|control-mode=dynamic|fc=min"),
    );
    let a = m.receiver("10.0.0.2:5000");
    let b = m.receiver("10.0.0.3:5000");
    m.probe(a, 1);
    m.probe(b, 2);
    m.h.advance(100 * MS);
    let mut position = 0;
    for second in 0..8 {
        m.probe(a, 1);
        m.probe(b, 2);
        m.h.advance(MS); // alone, as they come
        m.net.take(a);
        m.publish(20); // 3200 bytes: most of a window each second
        for _ in 0..10 {
            m.h.keepalive(); // the client lives 500 ms without one
            m.status(a, 1, position);
            m.status(b, 2, position);
            m.h.advance(100 * MS);
        }
        let data: usize = m
            .net
            .take(a)
            .iter()
            .filter(|d| frame_type(d) == HDR_TYPE_DATA && d.bytes.len() > DATA_HEADER_LENGTH)
            .map(|d| d.bytes.len())
            .sum();
        assert!(
            data >= 3200,
            "second {second}: the stream goes on ({data} bytes of data)"
        );
        position += 3200;
    }
}

#[test]
fn manual_mdc_sends_to_the_destinations_its_client_adds_until_removed() {
    let mut m = Mdc::publish_on("mdc-manual", "control-mode=manual");
    let a = m.receiver("10.0.0.2:5000");
    let b = m.receiver("10.0.0.3:5000");
    let add = |m: &mut Mdc, at: SocketAddr| {
        let correlation_id = m.h.correlation_id();
        m.h.send(Command::AddDestination {
            client_id: m.h.client_id,
            correlation_id,
            registration_id: m.publication_id,
            channel: format!("aeron:udp?endpoint={at}"),
            receive: false,
        });
        m.h.settle();
        assert!(m
            .h
            .take_events()
            .contains(&Event::OperationSuccess { correlation_id }));
        correlation_id
    };
    add(&mut m, a);
    let b_id = add(&mut m, b);
    m.h.advance(MS);
    for at in [a, b] {
        let got = m.net.take(at);
        assert!(
            got.iter().any(|d| frame_type(d) == HDR_TYPE_SETUP),
            "a SETUP went to {at} at once"
        );
        // No control= given: receivers answer where the stream comes from.
        m.control = got[0].from;
    }
    // A stranger's status messages add nothing to a manual publication.
    let c = m.receiver("10.0.0.4:5000");
    m.probe(c, 3);
    m.status(a, 1, 0);
    m.h.advance(MS);
    m.publish(3);
    m.h.advance(MS);
    assert!(m.arrived(a).contains(&HDR_TYPE_DATA));
    assert!(m.arrived(b).contains(&HDR_TYPE_DATA));
    assert!(!m.arrived(c).contains(&HDR_TYPE_DATA));
    // Removed by its registration: nothing more goes there.
    let correlation_id = m.h.correlation_id();
    m.h.send(Command::RemoveDestinationById {
        client_id: m.h.client_id,
        correlation_id,
        registration_id: m.publication_id,
        destination_registration_id: b_id,
    });
    m.h.settle();
    m.h.take_events();
    m.publish(3);
    m.h.advance(200 * MS);
    assert!(m.arrived(a).contains(&HDR_TYPE_DATA));
    assert!(m.arrived(b).is_empty());
}

#[test]
fn destinations_are_refused_where_they_mean_nothing() {
    let mut m = Mdc::publish_on("mdc-refused", "endpoint=10.0.0.9:6000");
    let mut ask = |registration_id: i64, channel: &str| {
        let correlation_id = m.h.correlation_id();
        m.h.send(Command::AddDestination {
            client_id: m.h.client_id,
            correlation_id,
            registration_id,
            channel: channel.into(),
            receive: false,
        });
        m.h.settle();
        m.h.take_events()
            .into_iter()
            .find_map(|e| match e {
                Event::Error { code, message, .. } => Some((code, message)),
                _ => None,
            })
            .expect("an error")
    };
    let (code, message) = ask(m.publication_id, "aeron:udp?endpoint=10.0.0.2:5000");
    assert_eq!(code, error_code::INVALID_CHANNEL);
    assert!(
        message.contains("does not allow manual control"),
        "{message}"
    );
    let (code, _) = ask(424242, "aeron:udp?endpoint=10.0.0.2:5000");
    assert_eq!(code, error_code::UNKNOWN_PUBLICATION);
}

#[test]
fn a_subscription_with_the_control_address_joins_a_dynamic_mdc_stream() {
    let net = MemoryNetwork::new();
    let mut h = Harness::with_transports("mdc-loop", |_| {}, Arc::new(net.clone()));
    h.keepalive();
    let sub_channel =
        format!("aeron:udp?endpoint=10.9.0.5:40300|control={CONTROL}|control-mode=dynamic");
    let pub_channel = format!("aeron:udp?control={CONTROL}|control-mode=dynamic");
    let mut l = h
        .connect_loop(&sub_channel, &pub_channel, 3000)
        .expect("the receiver's probe made it a destination and a SETUP came");
    let sent: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 150]).collect();
    let got = l.transfer(&mut h, &sent);
    assert_eq!(got, sent);
}

/// The sessions whose images `subscription` got among `events`.
fn spied_sessions(events: &[Event], subscription: i64) -> Vec<i32> {
    let mut sessions: Vec<i32> = events
        .iter()
        .filter_map(|e| match e {
            Event::AvailableImage {
                subscription_registration_id,
                session_id,
                ..
            } if *subscription_registration_id == subscription => Some(*session_id),
            _ => None,
        })
        .collect();
    sessions.sort();
    sessions
}

fn ready_session(events: &[Event], publication: i64) -> i32 {
    events
        .iter()
        .find_map(|e| match e {
            Event::PublicationReady {
                correlation_id,
                session_id,
                ..
            } if *correlation_id == publication => Some(*session_id),
            _ => None,
        })
        .expect("the publication is ready")
}

#[test]
fn a_spy_finds_manual_publications_without_an_address_by_their_channel_or_channel_tag() {
    let net = MemoryNetwork::new();
    let mut h = Harness::with_transports("mdc-spy", |_| {}, Arc::new(net.clone()));
    h.keepalive();
    // Two manual publications with endpoints of their own, one tagged.
    let plain = h.add_publication("aeron:udp?control-mode=manual", 1);
    let tagged = h.add_publication("aeron:udp?control-mode=manual|tags=7", 1);
    let other_stream = h.add_publication("aeron:udp?control-mode=manual", 2);
    h.settle();
    let events = h.take_events();
    let (plain, tagged) = (
        ready_session(&events, plain),
        ready_session(&events, tagged),
    );
    ready_session(&events, other_stream);

    let every = h.add_subscription("aeron-spy:aeron:udp?control-mode=manual", 1);
    let one = h.add_subscription(
        &format!("aeron-spy:aeron:udp?control-mode=manual|session-id={plain}"),
        1,
    );
    // By channel tag (Aeron's rule), with or without the control mode.
    let by_tag = h.add_subscription("aeron-spy:aeron:udp?tags=7", 1);
    let by_manual_tag = h.add_subscription("aeron-spy:aeron:udp?control-mode=manual|tags=7", 1);
    let other_tag = h.add_subscription("aeron-spy:aeron:udp?control-mode=manual|tags=8", 1);
    h.settle();
    let events = h.take_events();
    let mut both = vec![plain, tagged];
    both.sort();
    assert_eq!(spied_sessions(&events, every), both);
    assert_eq!(spied_sessions(&events, one), vec![plain]);
    assert_eq!(spied_sessions(&events, by_tag), vec![tagged]);
    assert_eq!(spied_sessions(&events, by_manual_tag), vec![tagged]);
    assert!(spied_sessions(&events, other_tag).is_empty());

    // A publication that comes after its spy is found too.
    let later = h.add_publication("aeron:udp?control-mode=manual|tags=8", 1);
    h.settle();
    let events = h.take_events();
    let later = ready_session(&events, later);
    assert_eq!(spied_sessions(&events, every), vec![later]);
    assert_eq!(spied_sessions(&events, other_tag), vec![later]);
    assert!(spied_sessions(&events, one).is_empty());
    assert!(spied_sessions(&events, by_tag).is_empty());
}
