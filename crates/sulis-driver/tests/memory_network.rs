//! Deterministic tests of the sender and receiver protocol: a driver in
//! invoker mode on a manual clock, its UDP endpoints on a network in memory
//! (`MemoryNetwork`). The test appends to the publication's log as a
//! publisher would, runs duty cycles, looks at (and takes away) the
//! datagrams in flight, and reads the image's log as a subscriber would.
//! Nothing sleeps, races a thread or depends on the kernel.

mod common;

use common::{Harness, Loop, MS};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use sulis_concurrent::counters::CounterRef;
use sulis_concurrent::logbuffer::term_appender::{Append, HeaderWriter, TermAppender};
use sulis_concurrent::logbuffer::{term_reader, LogBuffers};
use sulis_driver::media::memory::{Datagram, MemoryNetwork};
use sulis_driver::system_counters::SystemCounter;
use sulis_driver::DriverContext;
use sulis_protocol::control::Event;
use sulis_protocol::counters::type_id;
use sulis_protocol::frame::{
    StatusMessageFrame, HDR_TYPE_DATA, HDR_TYPE_NAK, HDR_TYPE_SETUP, HDR_TYPE_SM,
};
use sulis_protocol::log_buffer_descriptor::{LOG_IS_CONNECTED_OFFSET, LOG_RELIABLE_OFFSET};

const ENDPOINT: &str = "10.9.0.1:40123";

/// A publication and a subscription on one channel, connected.
struct Stream {
    h: Harness,
    net: MemoryNetwork,
    l: Loop,
}

fn frame_type(d: &Datagram) -> u16 {
    u16::from_le_bytes([d.bytes[6], d.bytes[7]])
}

impl Stream {
    fn connect(name: &str, configure: impl FnOnce(&mut DriverContext)) -> Stream {
        Stream::connect_on(name, "", configure)
    }

    /// As [`Stream::connect`], with `params` appended to the channel URI.
    fn connect_on(name: &str, params: &str, configure: impl FnOnce(&mut DriverContext)) -> Stream {
        let net = MemoryNetwork::new();
        let mut h = Harness::with_transports(name, configure, Arc::new(net.clone()));
        let channel = format!("aeron:udp?endpoint={ENDPOINT}{params}");
        h.keepalive();
        let l = h
            .connect_loop(&channel, &channel, 100)
            .expect("connected within 100 ms");
        Stream { h, net, l }
    }

    fn publish(&self, messages: &[Vec<u8>]) {
        self.l.publish(messages)
    }

    fn poll(&mut self) -> Vec<Vec<u8>> {
        self.l.poll()
    }

    /// The send endpoint's address (the one bound besides the channel's).
    fn sender_address(&self) -> SocketAddr {
        let endpoint: SocketAddr = ENDPOINT.parse().unwrap();
        let bound = self.net.bound();
        assert_eq!(bound.len(), 2, "{bound:?}");
        bound.into_iter().find(|a| *a != endpoint).unwrap()
    }

    fn counter(&self, c: SystemCounter) -> i64 {
        self.h.system_counter(c)
    }
}

fn messages(count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| (0..len).map(|j| (i * 31 + j) as u8).collect())
        .collect()
}

#[test]
fn messages_cross_the_network_in_order() {
    let mut s = Stream::connect("mem-order", |_| {});
    let sent = messages(100, 100);
    s.publish(&sent);
    s.h.settle();
    assert_eq!(s.poll(), sent);
    assert_eq!(s.counter(SystemCounter::NakMessagesSent), 0);
    assert_eq!(s.counter(SystemCounter::InvalidPackets), 0);
    assert_eq!(s.l.image.meta().get_u8(LOG_RELIABLE_OFFSET), 1);
}

#[test]
fn a_datagram_lost_in_flight_is_naked_resent_and_delivered_in_its_place() {
    let mut s = Stream::connect("mem-nak", |_| {});
    let endpoint: SocketAddr = ENDPOINT.parse().unwrap();
    let sent = messages(20, 100);
    s.publish(&sent);
    // One cycle puts the data in flight; the network loses the first data
    // datagram (each holds whole frames up to the MTU: small messages share).
    s.net.hold(endpoint, true);
    s.h.driver.do_work();
    let in_flight = s.net.take(endpoint);
    s.net.hold(endpoint, false);
    let data: Vec<&Datagram> = in_flight
        .iter()
        .filter(|d| frame_type(d) == HDR_TYPE_DATA)
        .collect();
    assert!(!data.is_empty());
    let lost = data[0].clone();
    for d in in_flight.iter().filter(|d| **d != lost) {
        s.net.inject(endpoint, d.clone());
    }
    // Unicast NAKs go at once (no delay) and the sender resends at once:
    // within the cycles that follow, without time passing.
    s.h.settle();
    assert_eq!(s.poll(), sent);
    assert_eq!(s.counter(SystemCounter::NakMessagesSent), 1);
    assert_eq!(s.counter(SystemCounter::NakMessagesReceived), 1);
    assert_eq!(s.counter(SystemCounter::RetransmitsSent), 1);
}

#[test]
fn with_reliable_false_a_lost_datagram_is_padded_over_not_naked() {
    let mut s = Stream::connect_on("mem-unreliable", "|reliable=false", |_| {});
    let endpoint: SocketAddr = ENDPOINT.parse().unwrap();
    let sent = messages(20, 100);
    s.publish(&sent);
    s.net.hold(endpoint, true);
    s.h.driver.do_work();
    let in_flight = s.net.take(endpoint);
    s.net.hold(endpoint, false);
    // Lose the first data datagram (8 messages of 160 bytes: 1,280 bytes).
    let lost = in_flight
        .iter()
        .find(|d| frame_type(d) == HDR_TYPE_DATA)
        .unwrap()
        .clone();
    assert_eq!(lost.bytes.len(), 1280);
    for d in in_flight.iter().filter(|d| **d != lost) {
        s.net.inject(endpoint, d.clone());
    }
    s.h.advance(5 * MS);
    assert_eq!(s.poll(), sent[8..], "the rest, after a gap fill");
    assert_eq!(s.counter(SystemCounter::NakMessagesSent), 0);
    assert_eq!(s.counter(SystemCounter::LossGapFills), 1);
    // The image's log says so, for tools and Aeron clients reading it.
    assert_eq!(s.l.image.meta().get_u8(LOG_RELIABLE_OFFSET), 0);
}

#[test]
fn loss_options_drop_data_on_the_way_out_and_repair_follows() {
    let mut s = Stream::connect("mem-loss", |ctx| {
        ctx.send_data_loss = sulis_driver::loss::LossSpec::parse("every:3").unwrap();
    });
    let sent = messages(60, 900); // 960 bytes a frame: 57,600 bytes, most of a term
    let mut got = Vec::new();
    for chunk in sent.chunks(10) {
        s.publish(chunk);
        for _ in 0..30 {
            s.h.advance(MS);
            got.extend(s.poll());
        }
    }
    s.h.advance(50 * MS);
    got.extend(s.poll());
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "every message once, in order");
    assert!(s.counter(SystemCounter::RetransmitsSent) > 0);
    assert!(s.counter(SystemCounter::NakMessagesSent) > 0);
}

#[test]
fn the_sender_stops_at_the_receiver_window_until_the_subscriber_moves() {
    let mut s = Stream::connect("mem-window", |_| {});
    let sent = messages(240, 200); // 256 bytes a frame: 61,440 bytes, most of a term
    s.publish(&sent);
    s.h.advance(20 * MS);
    // Nobody reads: the image fills up to the window the status messages
    // granted and stops there.
    let hwm = |s: &Stream| {
        let term = s.l.image.term(0);
        term_reader::read(&term, 0, usize::MAX, |_, _| {}).1
    };
    let held = hwm(&s);
    assert!(held > 0 && held < 61_440, "stopped at the window: {held}");
    s.h.advance(20 * MS);
    assert_eq!(hwm(&s), held, "no further without the subscriber");
    assert!(s.counter(SystemCounter::SenderFlowControlLimits) >= 1);
    assert_eq!(s.counter(SystemCounter::FlowControlOverRuns), 0);
    // The subscriber reads: the window opens and the rest arrives.
    let mut got = s.poll();
    for _ in 0..100 {
        s.h.advance(MS);
        got.extend(s.poll());
    }
    assert_eq!(got, sent);
}

#[test]
fn status_messages_lost_at_the_window_edge_go_again_after_a_repair_time_not_a_timeout() {
    let mut s = Stream::connect("mem-persist", |_| {});
    let sent = messages(240, 200); // 61,440 bytes: more than the window
    s.publish(&sent);
    s.h.advance(20 * MS);
    let sender = s.sender_address();
    let mut got = s.poll(); // the window's worth the image holds
    assert!(!got.is_empty() && got.len() < sent.len());
    // Every status message the subscriber's move brings is lost: the sender
    // waits at its old limit.
    s.net.hold(sender, true);
    s.h.advance(MS);
    let lost = s.net.take(sender);
    assert!(
        lost.iter().any(|d| frame_type(d) == HDR_TYPE_SM),
        "a status message went"
    );
    s.net.hold(sender, false);
    // Within a few repair times (200 µs at the soonest), not the 200 ms
    // status-message timeout, a status message goes again and the rest flows.
    for _ in 0..10 {
        s.h.advance(MS);
        got.extend(s.poll());
    }
    assert_eq!(got.len(), sent.len(), "the rest flowed within 10 ms");
    assert!(got == sent);
}

#[test]
fn with_cc_cubic_the_window_starts_at_ten_mtus_and_grows_to_the_receiver_window() {
    let mut s = Stream::connect_on("mem-cubic", "|cc=cubic", |_| {});
    let sender = s.sender_address();
    let windows = |s: &mut Stream, ms: i64| {
        s.net.hold(sender, true);
        s.h.advance(ms * MS);
        s.net.hold(sender, false);
        s.net
            .take(sender)
            .iter()
            .filter(|d| frame_type(d) == HDR_TYPE_SM)
            .map(|d| {
                StatusMessageFrame::decode(&d.bytes)
                    .unwrap()
                    .receiver_window
            })
            .collect::<Vec<_>>()
    };
    // Term 64 KiB: a window of at most 32 KiB, 23 MTUs of 1408 bytes; CUBIC starts at 10.
    let mtu = 1408;
    let early = windows(&mut s, 250);
    assert!(!early.is_empty());
    assert!(
        early
            .iter()
            .all(|&w| w % mtu == 0 && (10 * mtu..=23 * mtu).contains(&w)),
        "{early:?}"
    );
    // Its counters: the window it offers and the round trip it goes by (RTTM, measured).
    let per_image =
        s.h.counters_of_type(sulis_protocol::counters::type_id::PER_IMAGE);
    assert_eq!(per_image.len(), 2, "rcv-cc-cubic-rtt and -wnd");
    // Past K = cbrt(23 x 0.2 / 0.4) = 2.3 s, the curve is at the receiver window.
    for _ in 0..30 {
        s.h.keepalive();
        windows(&mut s, 100);
    }
    let late = windows(&mut s, 250);
    assert_eq!(late.last(), Some(&(23 * mtu)));
    let values: Vec<i64> = per_image
        .iter()
        .map(|&id| s.h.counters.counter_value(id))
        .collect();
    assert!(
        values.contains(&(23 * mtu as i64)),
        "the window counter: {values:?}"
    );
    // And the stream flows.
    let sent = messages(50, 100);
    s.publish(&sent);
    let mut got = Vec::new();
    for _ in 0..20 {
        s.h.advance(MS);
        got.extend(s.poll());
    }
    assert!(got == sent);
}

#[test]
fn garbage_from_the_network_is_counted_and_the_stream_goes_on() {
    let mut s = Stream::connect("mem-garbage", |_| {});
    let endpoint: SocketAddr = ENDPOINT.parse().unwrap();
    let stranger: SocketAddr = "10.9.0.66:5555".parse().unwrap();
    let before = s.counter(SystemCounter::InvalidPackets);
    for bytes in [
        vec![],
        vec![0xff; 7],
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9],
        // A DATA header of the subscribed stream claiming more bytes than
        // the datagram has.
        {
            let mut d = vec![0u8; 40];
            d[0..4].copy_from_slice(&4000i32.to_le_bytes());
            d[6..8].copy_from_slice(&HDR_TYPE_DATA.to_le_bytes());
            d[16..20].copy_from_slice(&1i32.to_le_bytes());
            d
        },
    ] {
        s.net.inject(
            endpoint,
            Datagram {
                from: stranger,
                bytes,
            },
        );
    }
    // And control frames a receiver never accepts, sent to the sender.
    let mut nak = vec![0u8; 12];
    nak[6..8].copy_from_slice(&HDR_TYPE_NAK.to_le_bytes());
    s.net.inject(
        s.sender_address(),
        Datagram {
            from: stranger,
            bytes: nak,
        },
    );
    s.h.settle();
    assert_eq!(s.counter(SystemCounter::InvalidPackets) - before, 5);
    let sent = messages(10, 64);
    s.publish(&sent);
    s.h.settle();
    assert_eq!(s.poll(), sent);
}

#[test]
fn data_frames_sent_to_a_send_endpoint_are_ignored_not_logged() {
    // A stale sender still sending to a port the kernel has since given
    // this send endpoint (seen on loopback beside other tests): the frames
    // are well formed but for a receiver. As Aeron: ignored, no error.
    let mut s = Stream::connect("mem-data-at-sender", |_| {});
    let stranger: SocketAddr = "10.9.0.66:5555".parse().unwrap();
    let before = s.counter(SystemCounter::InvalidPackets);
    let mut data = vec![0u8; 64]; // a 40-byte frame, aligned to 32
    data[0..4].copy_from_slice(&40i32.to_le_bytes());
    data[6..8].copy_from_slice(&HDR_TYPE_DATA.to_le_bytes());
    data[12..16].copy_from_slice(&77i32.to_le_bytes());
    data[16..20].copy_from_slice(&9i32.to_le_bytes());
    s.net.inject(
        s.sender_address(),
        Datagram {
            from: stranger,
            bytes: data,
        },
    );
    s.h.settle();
    assert!(s.h.errors().is_empty(), "{:?}", s.h.errors());
    assert_eq!(s.counter(SystemCounter::InvalidPackets), before);
    let sent = messages(10, 64);
    s.publish(&sent);
    s.h.settle();
    assert_eq!(s.poll(), sent);
}

#[test]
fn a_status_message_outside_the_transmission_window_is_dropped_and_counted_not_logged() {
    let mut s = Stream::connect("mem-stale-sm", |_| {});
    let sent = messages(40, 1000); // ~42 KiB: the sender passes half the 64 KiB term
    s.publish(&sent);
    let mut got = Vec::new();
    for _ in 0..50 {
        s.h.settle();
        got.extend(s.poll());
        if got.len() == sent.len() {
            break;
        }
        s.h.advance(MS);
    }
    assert!(got == sent, "{} of {} messages", got.len(), sent.len());
    s.h.settle();
    let header = s.l.publication.default_header();
    let field = |at: usize| i32::from_le_bytes(header[at..at + 4].try_into().unwrap());
    // A late status message for position 0 (the term's start), as a reordered datagram brings.
    let stale = StatusMessageFrame {
        flags: 0,
        session_id: field(12),
        stream_id: 1,
        consumption_term_id: field(20),
        consumption_term_offset: 0,
        receiver_window: 32 * 1024,
        receiver_id: 7,
        group_tag: None,
    };
    let rejected = s.counter(SystemCounter::StatusMessagesRejected);
    let receiver: SocketAddr = ENDPOINT.parse().unwrap();
    s.net.inject(
        s.sender_address(),
        Datagram {
            from: receiver,
            bytes: stale.to_bytes()[..stale.frame_length()].to_vec(),
        },
    );
    s.h.settle();
    assert_eq!(
        s.counter(SystemCounter::StatusMessagesRejected) - rejected,
        1
    );
    assert!(s.h.errors().is_empty(), "{:?}", s.h.errors());
    let more = messages(5, 64);
    s.publish(&more);
    s.h.settle();
    assert_eq!(s.poll(), more);
}

#[test]
fn a_closed_publication_tells_its_receiver_the_end_before_its_linger_ends() {
    // A linger far shorter than the heartbeat interval: the end of stream cannot wait for a heartbeat.
    let mut s = Stream::connect("mem-eos", |ctx| {
        ctx.publication_linger_timeout_ns = 5 * MS as u64;
        ctx.publication_heartbeat_timeout_ns = 500 * MS as u64;
    });
    let sent = messages(3, 64);
    s.publish(&sent);
    s.h.settle();
    assert_eq!(s.poll(), sent);
    s.h.remove_publication(s.l.publication_id);
    s.h.advance(20 * MS);
    assert_eq!(
        sulis_concurrent::logbuffer::meta::end_of_stream_position(&s.l.image.meta()),
        3 * 96,
        "the image knows where the stream ends"
    );
}

#[test]
fn setup_resumes_when_status_messages_stop_arriving() {
    let mut s = Stream::connect("mem-silent", |ctx| {
        ctx.publication_connection_timeout_ns = 200 * MS as u64;
    });
    let sender = s.sender_address();
    let endpoint: SocketAddr = ENDPOINT.parse().unwrap();
    // Status messages stop arriving (the network eats them).
    s.net.hold(sender, true);
    s.net.hold(endpoint, true);
    let mut setups = 0;
    for _ in 0..400 {
        s.net.take(sender);
        s.h.advance(MS);
        setups += s
            .net
            .take(endpoint)
            .iter()
            .filter(|d| frame_type(d) == HDR_TYPE_SETUP)
            .count();
    }
    assert!(setups >= 1, "the sender went back to SETUP");
}

/// The spy's `sub-pos` counter, from the image event of subscription `id`.
fn spy_position(h: &mut Harness, id: i64) -> CounterRef {
    let counter = h
        .take_events()
        .into_iter()
        .find_map(|e| match e {
            Event::AvailableImage {
                subscription_registration_id,
                subscriber_position_id,
                ..
            } if subscription_registration_id == id => Some(subscriber_position_id),
            _ => None,
        })
        .expect("the spy got an image");
    h.counters.counter_ref(counter)
}

fn counter_of_type(h: &Harness, type_id: i32) -> i64 {
    let ids = h.counters_of_type(type_id);
    assert_eq!(ids.len(), 1, "one counter of type {type_id}");
    h.counters.counter_value(ids[0])
}

#[test]
fn a_tethered_spy_holds_the_publisher_limit_where_it_reads() {
    let mut s = Stream::connect("mem-spy-tether", |_| {});
    let spy =
        s.h.add_subscription(&format!("aeron-spy:aeron:udp?endpoint={ENDPOINT}"), 1);
    s.h.settle();
    let spy = spy_position(&mut s.h, spy);
    let window = 32 * 1024; // half the 64 KiB term
    s.publish(&messages(100, 200)); // 256 bytes a frame
    for _ in 0..20 {
        s.h.advance(MS);
        s.poll();
    }
    assert_eq!(
        s.l.subscriber_position.get(),
        25_600,
        "the receiver has it all"
    );
    assert_eq!(
        counter_of_type(&s.h, type_id::PUBLISHER_LIMIT),
        window,
        "the spy has read nothing: the limit is a window past it, not past the sender"
    );
    spy.set_ordered(12_800);
    s.h.advance(MS);
    assert_eq!(
        counter_of_type(&s.h, type_id::PUBLISHER_LIMIT),
        12_800 + window
    );
}

#[test]
fn with_ssc_and_no_receiver_the_spies_set_the_pace_and_the_sender_skips_to_them() {
    let net = MemoryNetwork::new();
    let endpoint: SocketAddr = ENDPOINT.parse().unwrap();
    // Bound by the test, not a receiver: it catches what the sender sends.
    let _catcher = net.bind(endpoint).unwrap();
    let mut h = Harness::with_transports("mem-spy-ssc", |_| {}, Arc::new(net.clone()));
    h.keepalive();
    let spy = h.add_subscription(&format!("aeron-spy:aeron:udp?endpoint={ENDPOINT}"), 1);
    h.add_publication(&format!("aeron:udp?endpoint={ENDPOINT}|ssc=true"), 1);
    h.settle();
    let events = h.take_events();
    let log = common::publication_log(&events);
    let image = common::image_position_counter(&events, spy);
    let spy = h.counters.counter_ref(image);
    let publication = LogBuffers::map_existing(Path::new(&log)).unwrap();
    h.advance(MS);
    assert_eq!(
        publication.meta().get_i32_volatile(LOG_IS_CONNECTED_OFFSET),
        1,
        "connected by the spy alone"
    );
    assert_eq!(counter_of_type(&h, type_id::PUBLISHER_LIMIT), 32 * 1024);

    let header = HeaderWriter::new(&publication.default_header());
    let appender = TermAppender::new(publication.term(0), publication.meta(), 0);
    for m in messages(100, 200) {
        assert!(matches!(
            appender.append_unfragmented(&header, &m, None),
            Append::Done(_)
        ));
    }
    spy.set_ordered(25_600);
    h.advance(5 * MS);
    assert_eq!(
        counter_of_type(&h, type_id::SENDER_POSITION),
        25_600,
        "the sender skipped what the spy read: nobody is there to send it to"
    );
    assert_eq!(
        counter_of_type(&h, type_id::PUBLISHER_LIMIT),
        25_600 + 32 * 1024
    );
    let sent = net.take(endpoint);
    assert!(!sent.is_empty(), "SETUPs go out, looking for a receiver");
    assert!(
        sent.iter().all(|d| frame_type(d) == HDR_TYPE_SETUP),
        "no data went out"
    );
}

#[test]
fn data_and_heartbeats_beyond_the_window_but_within_half_a_term_are_taken_and_their_gap_naked() {
    // A window far smaller than half the 64 KiB term: a multicast sender paced
    // by a faster receiver may run that far ahead of this one. As Aeron's
    // receiver, this one takes what lands within half a term of its last
    // status message; a heartbeat there shows the gap, which is NAKed.
    let mut s = Stream::connect_on("mem-half-term", "|rcv-wnd=4k", |_| {});
    let sent = messages(4, 100);
    s.publish(&sent);
    s.h.settle();
    assert_eq!(s.poll(), sent);
    s.h.settle();
    let sender = s.sender_address();
    s.net.hold(sender, true);
    let header = s.l.publication.default_header();
    let field = |at: usize| i32::from_le_bytes(header[at..at + 4].try_into().unwrap());
    let position = 4 * 160;
    let ahead = position + 8192; // twice the window, a quarter of the term
    let heartbeat = sulis_protocol::frame::DataHeader::heartbeat(field(12), 1, field(20), ahead);
    let endpoint: SocketAddr = ENDPOINT.parse().unwrap();
    let over_runs = s.counter(SystemCounter::FlowControlOverRuns);
    s.net.inject(
        endpoint,
        Datagram {
            from: sender,
            bytes: heartbeat.to_bytes().to_vec(),
        },
    );
    s.h.settle();
    assert_eq!(s.counter(SystemCounter::FlowControlOverRuns), over_runs);
    let naks: Vec<sulis_protocol::frame::NakFrame> = s
        .net
        .take(sender)
        .iter()
        .filter(|d| frame_type(d) == HDR_TYPE_NAK)
        .map(|d| sulis_protocol::frame::NakFrame::decode(&d.bytes).unwrap())
        .collect();
    assert_eq!(naks.len(), 1, "the gap up to the heartbeat is NAKed");
    assert_eq!((naks[0].term_offset, naks[0].length), (position, 8192));
    // Beyond half a term: an over-run, dropped.
    let far =
        sulis_protocol::frame::DataHeader::heartbeat(field(12), 1, field(20), position + 40_000);
    s.net.inject(
        endpoint,
        Datagram {
            from: sender,
            bytes: far.to_bytes().to_vec(),
        },
    );
    s.h.settle();
    assert_eq!(s.counter(SystemCounter::FlowControlOverRuns), over_runs + 1);
}

#[test]
fn an_image_stuck_behind_data_its_sender_no_longer_keeps_gives_up_and_the_session_is_joined_again()
{
    let mut s = Stream::connect("mem-give-up", |ctx| {
        ctx.receiver_stall_timeout_ns = 500 * MS as u64;
    });
    let endpoint: SocketAddr = ENDPOINT.parse().unwrap();
    let sender = s.sender_address();
    s.h.take_events();
    let sent = messages(20, 100);
    s.publish(&sent);
    s.net.hold(endpoint, true);
    s.h.driver.do_work();
    let in_flight = s.net.take(endpoint);
    s.net.hold(endpoint, false);
    // The first data datagram is lost, and nothing the receiver says reaches
    // the sender (its NAKs go unanswered).
    s.net.hold(sender, true);
    let lost = in_flight
        .iter()
        .find(|d| frame_type(d) == HDR_TYPE_DATA)
        .unwrap()
        .clone();
    for d in in_flight.iter().filter(|d| **d != lost) {
        s.net.inject(endpoint, d.clone());
    }
    // The sender went on without this receiver: heartbeats from more than
    // half a term (64 KiB) ahead, dropped as over-runs, tell how far it is.
    let header = s.l.publication.default_header();
    let field = |at: usize| i32::from_le_bytes(header[at..at + 4].try_into().unwrap());
    let ahead = sulis_protocol::frame::DataHeader::heartbeat(field(12), 1, field(20) + 1, 8192);
    let mut unavailable = false;
    // The stall timeout counts from the join (the image has not moved
    // since): the client stays alive meanwhile.
    for _ in 0..100 {
        s.h.keepalive();
        s.net.inject(
            endpoint,
            Datagram {
                from: sender,
                bytes: ahead.to_bytes().to_vec(),
            },
        );
        s.h.advance(10 * MS);
        s.net.take(sender);
        if s.h
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::UnavailableImage { .. }))
        {
            unavailable = true;
            break;
        }
    }
    assert!(
        unavailable,
        "the stuck image ended and its subscriber was told"
    );
    assert!(
        s.poll().is_empty(),
        "nothing past the lost datagram was delivered as whole"
    );
    let errors = s.h.errors();
    assert!(
        errors
            .iter()
            .any(|e| e.3.contains("stuck at position 0") && e.3.contains("skipped")),
        "{errors:?}"
    );
    // The sender is reachable again: the session is joined again where it is.
    s.net.hold(sender, false);
    let mut joined = false;
    for _ in 0..200 {
        s.net.inject(
            endpoint,
            Datagram {
                from: sender,
                bytes: ahead.to_bytes().to_vec(),
            },
        );
        s.h.advance(5 * MS);
        if s.h
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::AvailableImage { .. }))
        {
            joined = true;
            break;
        }
    }
    assert!(joined, "a new image of the session");
}

/// A publication with `ssc=true` read by a spy and no receiver yet, its log
/// mapped for appending, and the spy's position counter.
struct SpyPaced {
    h: Harness,
    net: MemoryNetwork,
    publication: LogBuffers,
    spy: CounterRef,
    appended: usize,
}

impl SpyPaced {
    fn new(name: &str) -> SpyPaced {
        let net = MemoryNetwork::new();
        let mut h = Harness::with_transports(name, |_| {}, Arc::new(net.clone()));
        h.keepalive();
        let spy = h.add_subscription(&format!("aeron-spy:aeron:udp?endpoint={ENDPOINT}"), 1);
        h.add_publication(&format!("aeron:udp?endpoint={ENDPOINT}|ssc=true"), 1);
        h.settle();
        let events = h.take_events();
        let publication =
            LogBuffers::map_existing(Path::new(&common::publication_log(&events))).unwrap();
        let spy = h
            .counters
            .counter_ref(common::image_position_counter(&events, spy));
        SpyPaced {
            h,
            net,
            publication,
            spy,
            appended: 0,
        }
    }

    /// Appends `n` messages of 200 bytes (256-byte frames) to the first term
    /// and lets the spy read them all: the sender skips there.
    fn publish_and_spy(&mut self, n: usize) {
        let header = HeaderWriter::new(&self.publication.default_header());
        let appender = TermAppender::new(self.publication.term(0), self.publication.meta(), 0);
        for m in &messages(self.appended + n, 200)[self.appended..] {
            assert!(matches!(
                appender.append_unfragmented(&header, m, None),
                Append::Done(_)
            ));
        }
        self.appended += n;
        self.spy.set_ordered(self.appended as i64 * 256);
        self.h.advance(5 * MS);
        assert_eq!(
            counter_of_type(&self.h, type_id::SENDER_POSITION),
            self.appended as i64 * 256,
            "no receiver is counted: the sender skipped to the spy"
        );
    }

    /// Adds a subscription on the channel and moves time until its image
    /// joins; returns the image's log and subscriber position counter.
    fn join(&mut self) -> (LogBuffers, CounterRef) {
        let sub = self
            .h
            .add_subscription(&format!("aeron:udp?endpoint={ENDPOINT}"), 1);
        for _ in 0..500 {
            self.h.keepalive();
            self.h.advance(MS);
            let joined = self.h.take_events().into_iter().find_map(|e| match e {
                Event::AvailableImage {
                    subscription_registration_id,
                    log_file,
                    subscriber_position_id,
                    ..
                } if subscription_registration_id == sub => {
                    Some((log_file, subscriber_position_id))
                }
                _ => None,
            });
            if let Some((log, position)) = joined {
                return (
                    LogBuffers::map_existing(Path::new(&log)).unwrap(),
                    self.h.counters.counter_ref(position),
                );
            }
        }
        panic!("no image within 500 ms");
    }

    /// The send endpoint's address (the first address bound, before the subscription's).
    fn sender_address(&self) -> SocketAddr {
        let endpoint: SocketAddr = ENDPOINT.parse().unwrap();
        let bound: Vec<SocketAddr> = self
            .net
            .bound()
            .into_iter()
            .filter(|a| *a != endpoint)
            .collect();
        assert_eq!(bound.len(), 1, "{bound:?}");
        bound[0]
    }
}

#[test]
fn a_receiver_whose_answer_to_a_setup_comes_after_the_sender_skipped_half_a_term_on_is_counted_and_served(
) {
    // The race behind ReplayMerge's UDP stall: the receiver joins at the
    // SETUP's position, but until its first status message is counted the
    // sender skips on to the spy. Up to a term behind, what it needs is in
    // the log: its status message must count (it was rejected as out of the
    // window, and the sender went on without it for good).
    let mut s = SpyPaced::new("mem-spy-late-sm");
    s.publish_and_spy(25);
    let sender = s.sender_address();
    s.net.hold(sender, true); // the receiver's status messages wait in the network
    let (image, position) = s.join();
    assert_eq!(position.get(), 25 * 256, "joined where the sender was");
    s.publish_and_spy(160); // 40 KiB on: more than half the 64 KiB term
    s.net.hold(sender, false);
    let term = image.term(0);
    let mut read = 25 * 256;
    let mut got = Vec::new();
    for _ in 0..200 {
        s.h.keepalive();
        s.h.advance(MS);
        let (_, next) = term_reader::read(&term, read, usize::MAX, |offset, len| {
            got.push(term.slice(offset + 32, len - 32).to_vec())
        });
        read = next;
        position.set_ordered(next as i64);
        if got.len() == 160 {
            break;
        }
    }
    assert!(
        got == messages(185, 200)[25..],
        "{} of 160 messages from where the receiver joined; {} status messages rejected",
        got.len(),
        s.h.system_counter(SystemCounter::StatusMessagesRejected)
    );
    assert!(s.h.errors().is_empty(), "{:?}", s.h.errors());
}

#[test]
fn an_image_whose_sender_skipped_a_term_past_its_join_before_counting_it_ends_quietly_and_joins_again(
) {
    // More than a term: no NAK can bring back where the image joined. The
    // sender's SETUPs (it counts no receiver) say so; the image delivered
    // nothing, so it ends with no error and no loss, and joins again.
    let mut s = SpyPaced::new("mem-spy-lapped");
    s.publish_and_spy(10);
    let sender = s.sender_address();
    s.net.hold(sender, true);
    let (_image, position) = s.join();
    assert_eq!(position.get(), 10 * 256);
    // The spy reads on, a term and a frame past the join (what it read is
    // not this test's business: only where the sender goes).
    s.spy.set_ordered(11 * 256 + 64 * 1024);
    s.h.advance(5 * MS);
    s.net.take(sender); // the receiver's status messages are lost
    s.net.hold(sender, false);
    let mut ended = false;
    let mut rejoined = false;
    for _ in 0..1000 {
        s.h.keepalive();
        s.h.advance(MS);
        s.net.take(sender); // and so are the rest: only the sender's SETUPs reach it
        for e in s.h.take_events() {
            match e {
                Event::UnavailableImage { .. } => ended = true,
                Event::AvailableImage { .. } if ended => rejoined = true,
                _ => {}
            }
        }
        if rejoined {
            break;
        }
    }
    assert!(ended && rejoined, "ended {ended}, joined again {rejoined}");
    assert!(s.h.errors().is_empty(), "{:?}", s.h.errors());
}

#[test]
fn an_idle_streams_heartbeats_and_status_messages_are_not_work() {
    // A duty cycle that only kept an idle stream alive (a heartbeat sent or
    // heard, a status message repeated on its timer) returns no work, so the
    // driver's back-off parks: counted as work, a thousand idle streams kept
    // the driver's thread from ever parking.
    let mut s = Stream::connect("mem-upkeep", |_| {});
    let sent = messages(10, 100);
    s.publish(&sent);
    s.h.settle();
    assert_eq!(s.poll(), sent);
    s.h.advance(50 * MS);
    let heartbeats = s.counter(SystemCounter::HeartbeatsReceived);
    let sms_sent = s.counter(SystemCounter::StatusMessagesSent);
    let sms_received = s.counter(SystemCounter::StatusMessagesReceived);
    let mut busy = Vec::new();
    for step in 0..1_000 {
        if step % 100 == 0 {
            // The client's keepalive is a command: work, and not what is measured.
            s.h.keepalive();
            s.h.settle();
        }
        s.h.clock.advance_ns(MS);
        for _ in 0..2 {
            let work = s.h.driver.do_work();
            if work > 0 {
                busy.push((step, work));
            }
        }
    }
    assert!(s.counter(SystemCounter::HeartbeatsReceived) - heartbeats >= 9);
    assert!(s.counter(SystemCounter::StatusMessagesSent) - sms_sent >= 4);
    assert!(s.counter(SystemCounter::StatusMessagesReceived) - sms_received >= 4);
    assert_eq!(busy, vec![], "(step, work) of the cycles that did work");

    // News is work again, and at once: idle, the sender and the receiver
    // pass the stream by until a timer of its own is due, but a frame
    // written to the log ends that, and so does one that arrives.
    let more = messages(3, 100);
    s.publish(&more);
    let work: usize = (0..3).map(|_| s.h.driver.do_work()).sum();
    assert!(work > 0);
    s.h.settle();
    assert_eq!(s.poll(), more, "delivered without the clock moving");
}

/// Streams 1 to `n` on one UDP endpoint of a driver on a memory network, a
/// subscription and a publication each (their registration ids returned),
/// the client kept alive.
fn streams_on_one_endpoint(name: &str, n: i32) -> (MemoryNetwork, Harness, Vec<i64>) {
    let net = MemoryNetwork::new();
    let h = Harness::with_transports(name, |_| {}, Arc::new(net.clone()));
    let channel = format!("aeron:udp?endpoint={ENDPOINT}");
    h.keepalive();
    let mut registrations = Vec::new();
    for stream in 1..=n {
        h.add_subscription(&channel, stream);
        registrations.push(h.add_publication(&channel, stream));
    }
    (net, h, registrations)
}

#[test]
fn the_heartbeats_and_status_messages_of_idle_streams_on_one_endpoint_go_out_together() {
    // Thousands of idle streams on one endpoint each send a heartbeat every
    // heartbeat interval; sent alone they were a system call each.
    let streams = 20;
    let (net, mut h, _) = streams_on_one_endpoint("mem-beats", streams);
    let mut images = 0;
    for _ in 0..500 {
        images += h
            .take_events()
            .iter()
            .filter(|e| matches!(e, Event::AvailableImage { .. }))
            .count();
        if images == streams as usize {
            break;
        }
        h.advance(MS);
    }
    assert_eq!(images, streams as usize, "every stream connected");
    let beats = h.system_counter(SystemCounter::HeartbeatsSent);
    // The send endpoint: the one address bound besides the channel's.
    let endpoint: SocketAddr = ENDPOINT.parse().unwrap();
    let bound: Vec<SocketAddr> = net.bound().into_iter().filter(|a| *a != endpoint).collect();
    assert_eq!(bound.len(), 1, "{bound:?}");
    let sender = bound[0];
    let calls = net.send_calls(sender);
    // And the receiver's status messages on their timer, from the channel's endpoint.
    let sms = h.system_counter(SystemCounter::StatusMessagesSent);
    let sm_calls = net.send_calls(endpoint);
    for _ in 0..10 {
        h.keepalive();
        h.advance(100 * MS);
    }
    let beats = h.system_counter(SystemCounter::HeartbeatsSent) - beats;
    let calls = net.send_calls(sender) - calls;
    assert!(beats >= 10 * streams as i64, "{beats} heartbeats");
    assert!(
        calls * 5 <= beats as u64,
        "{calls} send calls for {beats} heartbeats"
    );
    let sms = h.system_counter(SystemCounter::StatusMessagesSent) - sms;
    let sm_calls = net.send_calls(endpoint) - sm_calls;
    assert!(sms >= 4 * streams as i64, "{sms} status messages");
    assert!(
        sm_calls * 5 <= sms as u64,
        "{sm_calls} send calls for {sms} status messages"
    );
}

#[test]
fn with_many_streams_on_one_endpoint_each_datagram_finds_its_own_image_after_others_end() {
    // The receiver finds a datagram's image, and the sender a status
    // message's publication, through maps kept beside their lists: when an
    // image ends, the last one moves into its place and must still be found.
    let (_, mut h, registrations) = streams_on_one_endpoint("mem-many", 6);
    let streams: Vec<i32> = (1..=6).collect();
    let mut publications = std::collections::HashMap::new();
    let mut images = std::collections::HashMap::new();
    for _ in 0..200 {
        for e in h.take_events() {
            match e {
                Event::PublicationReady {
                    stream_id,
                    log_file,
                    ..
                } => {
                    publications.insert(stream_id, log_file);
                }
                Event::AvailableImage {
                    stream_id,
                    log_file,
                    subscriber_position_id,
                    ..
                } => {
                    images.insert(stream_id, (log_file, subscriber_position_id));
                }
                _ => {}
            }
        }
        if images.len() == streams.len() {
            break;
        }
        h.advance(MS);
    }
    assert_eq!(images.len(), streams.len(), "every stream connected");
    // Streams 1 and 3 end: their images go, others move into their places.
    for i in [0, 2] {
        h.remove_publication(registrations[i]);
    }
    let mut ended = Vec::new();
    for _ in 0..3_000 {
        h.keepalive();
        h.advance(MS);
        for e in h.take_events() {
            if let Event::UnavailableImage { stream_id, .. } = e {
                ended.push(stream_id);
            }
        }
        if ended.len() == 2 {
            break;
        }
    }
    ended.sort();
    assert_eq!(ended, vec![1, 3]);
    h.advance(10 * MS);
    // Every stream left delivers its own messages.
    for &stream in &streams[..] {
        if stream == 1 || stream == 3 {
            continue;
        }
        let publication = LogBuffers::map_existing(Path::new(&publications[&stream])).unwrap();
        let header = HeaderWriter::new(&publication.default_header());
        let appender = TermAppender::new(publication.term(0), publication.meta(), 0);
        let sent = vec![vec![stream as u8; 40 + stream as usize]; 3];
        for m in &sent {
            assert!(matches!(
                appender.append_unfragmented(&header, m, None),
                Append::Done(_)
            ));
        }
        h.advance(5 * MS);
        let (file, position_id) = &images[&stream];
        let image = LogBuffers::map_existing(Path::new(file)).unwrap();
        let term = image.term(0);
        let mut got = Vec::new();
        let (_, next) = term_reader::read(&term, 0, usize::MAX, |offset, len| {
            got.push(term.slice(offset + 32, len - 32).to_vec())
        });
        h.counters
            .counter_ref(*position_id)
            .set_ordered(next as i64);
        assert_eq!(got, sent, "stream {stream}");
    }
    assert_eq!(h.system_counter(SystemCounter::InvalidPackets), 0);
}
