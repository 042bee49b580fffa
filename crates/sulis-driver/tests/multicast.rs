//! Multicast and its flow control, deterministic: a driver in invoker mode on
//! a manual clock, its sockets on a network in memory. Receivers are played
//! by the test, which injects their status messages at the control group
//! (the data group + 1) and reads what the publication sends to the data
//! group; one test runs a real subscription of the same driver on the group.

mod common;

use common::{Harness, MS};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use sulis_concurrent::logbuffer::LogBuffers;
use sulis_driver::media::memory::{Datagram, MemoryNetwork};
use sulis_protocol::control::Event;
use sulis_protocol::counters::type_id;
use sulis_protocol::frame::{SetupFrame, StatusMessageFrame, HDR_TYPE_SETUP};

const GROUP: &str = "239.1.1.1:40123";
const CONTROL: &str = "239.1.1.2:40123";

fn frame_type(d: &Datagram) -> u16 {
    u16::from_le_bytes([d.bytes[6], d.bytes[7]])
}

/// A publication on a multicast channel (`params` appended), its session and
/// log, with the data group bound so the test sees what is sent.
struct Multicast {
    h: Harness,
    net: MemoryNetwork,
    session_id: i32,
    publication: LogBuffers,
    group: SocketAddr,
    control: SocketAddr,
}

impl Multicast {
    fn publish_on(name: &str, params: &str) -> Multicast {
        let net = MemoryNetwork::new();
        let mut h = Harness::with_transports(name, |_| {}, Arc::new(net.clone()));
        h.keepalive();
        let group: SocketAddr = GROUP.parse().unwrap();
        let _watch = net.bind(group).unwrap();
        std::mem::forget(_watch); // stays bound: the test reads the group's datagrams
        h.add_publication(&format!("aeron:udp?endpoint={GROUP}{params}"), 1);
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
        let publication = LogBuffers::map_existing(Path::new(&log)).unwrap();
        Multicast {
            h,
            net,
            session_id,
            publication,
            group,
            control: CONTROL.parse().unwrap(),
        }
    }

    /// A receiver's status message for `position` (in the first term) with `window`.
    fn status(&self, receiver_id: i64, from: &str, position: i32, window: i32, tag: Option<i64>) {
        let sm = StatusMessageFrame {
            flags: 0,
            session_id: self.session_id,
            stream_id: 1,
            consumption_term_id: self.publication.initial_term_id(),
            consumption_term_offset: position,
            receiver_window: window,
            receiver_id,
            group_tag: tag,
        };
        let mut buf = [0u8; StatusMessageFrame::LENGTH_WITH_GROUP_TAG];
        let len = sm.encode(&mut buf);
        self.net.inject(
            self.control,
            Datagram {
                from: from.parse().unwrap(),
                bytes: buf[..len].to_vec(),
            },
        );
    }

    fn counters(&self, type_id: i32) -> Vec<i64> {
        self.h
            .counters_of_type(type_id)
            .into_iter()
            .map(|id| self.h.counters.counter_value(id))
            .collect()
    }

    fn sender_limit(&self) -> i64 {
        self.counters(type_id::SENDER_LIMIT)[0]
    }
}

#[test]
fn a_multicast_setup_goes_to_the_group_with_the_group_flag() {
    let mut m = Multicast::publish_on("mc-setup", "");
    m.h.advance(MS);
    let setups: Vec<SetupFrame> = m
        .net
        .take(m.group)
        .iter()
        .filter(|d| frame_type(d) == HDR_TYPE_SETUP)
        .map(|d| SetupFrame::decode(&d.bytes).unwrap())
        .collect();
    assert!(!setups.is_empty(), "SETUP went to the data group");
    assert!(setups.iter().all(|s| s.is_group()), "with the GROUP flag");
    assert!(
        m.net.bound().contains(&m.control),
        "the control group is bound: status messages arrive there"
    );
}

#[test]
fn max_is_the_multicast_default_and_follows_the_fastest_receiver() {
    let mut m = Multicast::publish_on("mc-max", "");
    m.status(1, "10.0.0.2:5000", 0, 8192, None);
    m.status(2, "10.0.0.3:5000", 0, 4096, None);
    m.h.advance(MS);
    assert_eq!(m.sender_limit(), 8192);
    assert!(
        m.counters(type_id::FLOW_CONTROL_RECEIVERS).is_empty(),
        "max tracks nobody"
    );
}

#[test]
fn min_follows_the_slowest_receiver_and_drops_one_that_falls_silent() {
    let mut m = Multicast::publish_on("mc-min", "|fc=min,t:100ms");
    m.status(1, "10.0.0.2:5000", 0, 8192, None);
    m.status(2, "10.0.0.3:5000", 0, 4096, None);
    m.h.advance(MS);
    assert_eq!(m.sender_limit(), 4096, "the slower receiver paces");
    m.h.advance(MS);
    assert_eq!(m.counters(type_id::FLOW_CONTROL_RECEIVERS), vec![2]);
    let mut positions = m.counters(type_id::SULIS_FLOW_CONTROL_RECEIVER);
    positions.sort();
    assert_eq!(
        positions,
        vec![0, 0],
        "one counter per receiver, at its position"
    );
    // Receiver 2 falls silent; receiver 1 keeps reporting.
    for _ in 0..15 {
        m.status(1, "10.0.0.2:5000", 0, 8192, None);
        m.h.advance(10 * MS);
    }
    assert_eq!(
        m.sender_limit(),
        8192,
        "the silent receiver no longer holds the stream"
    );
    m.h.advance(MS);
    assert_eq!(m.counters(type_id::FLOW_CONTROL_RECEIVERS), vec![1]);
    assert_eq!(m.counters(type_id::SULIS_FLOW_CONTROL_RECEIVER).len(), 1);
}

#[test]
fn tagged_counts_only_its_group() {
    let mut m = Multicast::publish_on("mc-tagged", "|fc=tagged,g:7");
    m.status(1, "10.0.0.2:5000", 0, 8192, Some(7));
    m.status(2, "10.0.0.3:5000", 0, 4096, None);
    m.status(3, "10.0.0.4:5000", 0, 2048, Some(8));
    m.h.advance(MS);
    assert_eq!(m.sender_limit(), 8192, "only the member of group 7 counts");
    assert_eq!(m.counters(type_id::FLOW_CONTROL_RECEIVERS), vec![1]);
}

#[test]
fn min_with_a_minimum_group_is_not_connected_until_the_group_is_there() {
    let mut m = Multicast::publish_on("mc-group", "|fc=min,g:/2");
    m.status(1, "10.0.0.2:5000", 0, 8192, None);
    m.h.advance(MS);
    let meta = m.publication.meta();
    let connected =
        || meta.get_i32_volatile(sulis_protocol::log_buffer_descriptor::LOG_IS_CONNECTED_OFFSET);
    assert_eq!(connected(), 0, "one of two receivers: not connected");
    m.status(2, "10.0.0.3:5000", 0, 8192, None);
    m.h.advance(MS);
    assert_eq!(connected(), 1, "the group is there");
}

#[test]
fn a_subscription_on_the_group_receives_the_stream_through_the_control_group() {
    let net = MemoryNetwork::new();
    let mut h = Harness::with_transports("mc-loop", |_| {}, Arc::new(net.clone()));
    h.keepalive();
    let channel = format!("aeron:udp?endpoint={GROUP}");
    let mut l = h
        .connect_loop(&channel, &channel, 100)
        .expect("the image came (SETUP, then a status message to the control group)");
    let sent: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 200]).collect();
    let got = l.transfer(&mut h, &sent);
    assert_eq!(got, sent);
}

/// A SETUP of session `session_id` on stream 1 sent with `ttl`, from `from` to `to`.
fn inject_setup(net: &MemoryNetwork, from: &str, to: &str, session_id: i32, ttl: i32) {
    let setup = SetupFrame {
        flags: 0,
        term_offset: 0,
        session_id,
        stream_id: 1,
        initial_term_id: 0,
        active_term_id: 0,
        term_length: 64 * 1024,
        mtu: 1408,
        ttl,
    };
    net.inject(
        to.parse().unwrap(),
        Datagram {
            from: from.parse().unwrap(),
            bytes: setup.to_bytes().to_vec(),
        },
    );
}

#[test]
fn a_multicast_setup_sent_with_a_greater_ttl_than_the_receivers_counts_a_possible_ttl_asymmetry() {
    use sulis_driver::system_counters::SystemCounter::PossibleTtlAsymmetry;
    let net = MemoryNetwork::new();
    let mut h = Harness::with_transports("mc-ttl", |_| {}, Arc::new(net.clone()));
    h.keepalive();
    h.add_subscription(&format!("aeron:udp?endpoint={GROUP}|ttl=4"), 1);
    // A multicast destination of a multi-destination subscription, at the
    // driver's TTL (0, the OS default), and a unicast one.
    let mds = h.add_subscription("aeron:udp?control-mode=manual", 1);
    h.settle();
    for at in ["239.1.1.3:40124", "10.0.0.1:7000"] {
        h.send(sulis_protocol::control::Command::AddDestination {
            client_id: h.client_id,
            correlation_id: h.correlation_id(),
            registration_id: mds,
            channel: format!("aeron:udp?endpoint={at}"),
            receive: true,
        });
    }
    h.settle();
    h.take_events();
    let images = |h: &mut Harness| common::available_images(&h.take_events()).len();

    // At or below the receiver's TTL: nothing.
    inject_setup(&net, "10.0.0.9:6000", GROUP, 11, 4);
    inject_setup(&net, "10.0.0.9:6000", "239.1.1.3:40124", 12, 0);
    h.advance(MS);
    assert_eq!(images(&mut h), 2);
    assert_eq!(h.system_counter(PossibleTtlAsymmetry), 0);

    // Above it: counted once per image asked for, as Aeron's.
    inject_setup(&net, "10.0.0.9:6000", GROUP, 13, 5);
    inject_setup(&net, "10.0.0.9:6000", "239.1.1.3:40124", 14, 1);
    h.advance(MS);
    assert_eq!(images(&mut h), 2);
    assert_eq!(h.system_counter(PossibleTtlAsymmetry), 2);
    inject_setup(&net, "10.0.0.9:6000", GROUP, 13, 5);
    h.advance(MS);
    assert_eq!(
        h.system_counter(PossibleTtlAsymmetry),
        2,
        "a SETUP of a session with an image: no new count"
    );

    // Unicast has no TTL to compare.
    inject_setup(&net, "10.0.0.9:6000", "10.0.0.1:7000", 15, 64);
    h.advance(MS);
    assert_eq!(images(&mut h), 1);
    assert_eq!(h.system_counter(PossibleTtlAsymmetry), 2);
}
