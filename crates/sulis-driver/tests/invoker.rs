//! Deterministic tests of the driver's agents: invoker threading mode (no
//! driver threads; the test runs each duty cycle) on a manual clock (time
//! passes only when the test says). Commands go in through the CnC's
//! to-driver ring buffer and answers come back on its broadcast buffer, as
//! for any client, but nothing here sleeps or races a thread.

mod common;

use common::{available_images, Harness, MS};
use std::net::UdpSocket;
use sulis_driver::system_counters::SystemCounter;
use sulis_protocol::control::{Command, Event};
use sulis_protocol::counters::type_id;

#[test]
fn nothing_happens_until_the_embedding_code_runs_a_duty_cycle() {
    let mut h = Harness::new("idle", |_| {});
    h.keepalive();
    let pub_id = h.add_publication("aeron:ipc", 7);
    assert!(h.take_events().is_empty(), "no thread answers on its own");
    h.settle();
    let events = h.take_events();
    // The client's heartbeat counter (answering its keepalive), then the publication.
    assert!(
        matches!(events.as_slice(), [
            Event::CounterReady { correlation_id: client, .. },
            Event::PublicationReady { correlation_id, .. },
        ] if *client == h.client_id && *correlation_id == pub_id),
        "{events:?}"
    );
}

#[test]
fn an_ipc_subscription_gets_an_image_of_the_publication_in_the_same_cycle() {
    let mut h = Harness::new("link", |_| {});
    h.keepalive();
    let sub_id = h.add_subscription("aeron:ipc", 7);
    h.add_publication("aeron:ipc", 7);
    h.add_publication("aeron:ipc", 8);
    h.settle();
    let events = h.take_events();
    assert_eq!(available_images(&events), vec![(sub_id, 7)], "{events:?}");
    assert_eq!(h.counters_of_type(type_id::SUBSCRIBER_POSITION).len(), 1);
    assert_eq!(h.counters_of_type(type_id::PUBLISHER_LIMIT).len(), 2);
}

#[test]
fn a_silent_client_is_timed_out_exactly_when_its_liveness_timeout_passes() {
    let mut h = Harness::new("liveness", |_| {});
    h.keepalive();
    h.add_publication("aeron:ipc", 9);
    h.settle();
    h.take_events();
    // Just inside the timeout (500 ms, checked every 10 ms timer tick): alive.
    h.advance(480 * MS);
    assert!(
        !h.take_events()
            .iter()
            .any(|e| matches!(e, Event::ClientTimeout { .. })),
        "timed out early"
    );
    assert_eq!(h.counters_of_type(type_id::CLIENT_HEARTBEAT).len(), 1);
    // A keepalive resets it; then silence past the timeout ends the client.
    h.keepalive();
    h.advance(480 * MS);
    assert!(h.take_events().is_empty());
    h.advance(60 * MS);
    let events = h.take_events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::ClientTimeout { client_id } if *client_id == h.client_id)),
        "{events:?}"
    );
    assert!(h.counters_of_type(type_id::CLIENT_HEARTBEAT).is_empty());
    assert_eq!(h.system_counter(SystemCounter::ClientTimeouts), 1);
}

#[test]
fn a_removed_publication_keeps_its_log_for_the_linger_then_frees_it() {
    let mut h = Harness::new("linger", |_| {});
    h.keepalive();
    let reg = h.add_publication("aeron:ipc", 10);
    h.settle();
    let correlation_id = h.remove_publication(reg);
    h.settle();
    assert!(h.take_events().iter().any(
        |e| matches!(e, Event::OperationSuccess { correlation_id: c } if *c == correlation_id)
    ));
    assert_eq!(
        h.counters_of_type(type_id::PUBLISHER_LIMIT).len(),
        1,
        "lingering"
    );
    h.advance(50 * MS);
    assert_eq!(
        h.counters_of_type(type_id::PUBLISHER_LIMIT).len(),
        1,
        "still lingering"
    );
    h.advance(100 * MS);
    h.keepalive();
    h.settle();
    assert!(
        h.counters_of_type(type_id::PUBLISHER_LIMIT).is_empty(),
        "freed after the linger"
    );
}

#[test]
fn a_closed_publication_waits_for_a_slow_subscriber_to_read_to_its_end_however_long_that_takes() {
    use std::path::Path;
    use sulis_concurrent::logbuffer::term_appender::{Append, HeaderWriter, TermAppender};
    use sulis_concurrent::logbuffer::LogBuffers;
    let mut h = Harness::new("drain", |_| {});
    h.keepalive();
    let sub = h.add_subscription("aeron:ipc", 11);
    let reg = h.add_publication("aeron:ipc", 11);
    h.settle();
    let events = h.take_events();
    let log = common::publication_log(&events);
    let image = common::image_position_counter(&events, sub);
    let publication = LogBuffers::map_existing(Path::new(&log)).unwrap();
    let header = HeaderWriter::new(&publication.default_header());
    let appender = TermAppender::new(publication.term(0), publication.meta(), 0);
    for _ in 0..100 {
        assert!(matches!(
            appender.append_unfragmented(&header, &[7u8; 100], None),
            Append::Done(_)
        ));
    }
    let end = 100 * 160;
    h.remove_publication(reg);
    h.settle();
    // The subscriber has read half, and its client stays alive: ten lingers later (100 ms each)
    // the stream is still there for it.
    let subscriber = h.counters.counter_ref(image);
    subscriber.set_ordered(end / 2);
    for _ in 0..10 {
        h.advance(100 * MS);
        h.keepalive();
    }
    assert!(
        !h.take_events()
            .iter()
            .any(|e| matches!(e, Event::UnavailableImage { .. })),
        "a slow subscriber was cut off before the end of the stream"
    );
    assert_eq!(
        h.counters_of_type(type_id::PUBLISHER_LIMIT).len(),
        1,
        "draining"
    );
    // It reads to the end: the image goes, and after the linger the log.
    subscriber.set_ordered(end);
    h.advance(MS);
    assert!(h
        .take_events()
        .iter()
        .any(|e| matches!(e, Event::UnavailableImage { .. })));
    h.advance(150 * MS);
    h.keepalive();
    h.settle();
    assert!(
        h.counters_of_type(type_id::PUBLISHER_LIMIT).is_empty(),
        "freed after the linger"
    );
}

#[test]
fn aerons_unimplemented_commands_are_answered_with_an_error_to_their_correlation_id() {
    use sulis_protocol::control::{command_type, error_code};
    let mut h = Harness::new("unimplemented", |_| {});
    h.keepalive();
    h.settle();
    h.take_events();
    let errors_before = h.system_counter(SystemCounter::Errors);
    // REJECT_IMAGE as an Aeron client sends it: client id, correlation id,
    // image correlation id, position, reason.
    let correlation_id = h.correlation_id();
    let mut body = Vec::new();
    body.extend_from_slice(&h.client_id.to_le_bytes());
    body.extend_from_slice(&correlation_id.to_le_bytes());
    body.extend_from_slice(&42i64.to_le_bytes());
    body.extend_from_slice(&0i64.to_le_bytes());
    let reason = b"not wanted";
    body.extend_from_slice(&(reason.len() as i32).to_le_bytes());
    body.extend_from_slice(reason);
    assert!(h
        .to_driver
        .write(command_type::REJECT_IMAGE, &body)
        .unwrap());
    // The same type too short to carry a correlation id: logged only.
    assert!(h
        .to_driver
        .write(command_type::REJECT_IMAGE, &body[..12])
        .unwrap());
    // A type id that is not Aeron's: logged only, whatever its length.
    assert!(h.to_driver.write(0x7777, &body).unwrap());
    h.settle();
    let events = h.take_events();
    assert!(
        matches!(events.as_slice(), [Event::Error { correlation_id: c, code, message }]
            if *c == correlation_id
                && *code == error_code::UNKNOWN_COMMAND_TYPE_ID
                && message.contains("REJECT_IMAGE")),
        "{events:?}"
    );
    assert_eq!(h.system_counter(SystemCounter::Errors), errors_before + 3);
}

#[test]
fn the_next_available_session_id_is_the_drivers_next_in_turn_and_no_publication_takes_it() {
    let mut h = Harness::new("next-session", |_| {});
    h.keepalive();
    h.settle();
    h.take_events();
    let ask = |h: &mut Harness| {
        let correlation_id = h.correlation_id();
        h.send(Command::GetNextAvailableSessionId {
            client_id: h.client_id,
            correlation_id,
            stream_id: 77,
        });
        h.settle();
        match h.take_events().as_slice() {
            [Event::NextAvailableSessionId {
                correlation_id: c,
                session_id,
            }] if *c == correlation_id => *session_id,
            other => panic!("{other:?}"),
        }
    };
    let a = ask(&mut h);
    let b = ask(&mut h);
    assert_eq!(b, a.wrapping_add(1), "in turn");
    h.add_publication("aeron:ipc", 77);
    h.settle();
    let taken: Vec<i32> = h
        .take_events()
        .iter()
        .filter_map(|e| match e {
            Event::PublicationReady { session_id, .. } => Some(*session_id),
            _ => None,
        })
        .collect();
    assert_eq!(
        taken,
        vec![b.wrapping_add(1)],
        "the next one, not one handed out"
    );
    assert!(!(-1..=1000).contains(&a) && !(-1..=1000).contains(&b));
}

#[test]
fn error_timestamps_come_from_the_drivers_clock() {
    const DAY_MS: i64 = 86_400_000;
    let mut h = Harness::new("error-time", |_| {});
    let real_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let before_ms = real_ms();
    // Ten days pass on the driver's clock, in one step (no duty cycle between).
    h.clock.advance_ns(10 * DAY_MS * MS);
    assert!(h.to_driver.write(0x7777, &[0; 16]).unwrap());
    h.settle();
    h.clock.advance_ns(5_000 * MS);
    assert!(h.to_driver.write(0x7777, &[0; 16]).unwrap());
    h.settle();
    let errors = h.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let (count, first_ms, last_ms, _) = &errors[0];
    assert_eq!(*count, 2);
    // The manual clock's epoch is the real time it was made at, give or take
    // the test's own run time; the real clock would say ten days less.
    assert!(
        (first_ms - (before_ms + 10 * DAY_MS)).abs() < 60_000,
        "first {first_ms}, real {before_ms}"
    );
    assert_eq!(
        last_ms - first_ms,
        5_000,
        "exactly the time the test let pass"
    );
    assert!(real_ms() < first_ms - DAY_MS);
}

#[test]
fn garbage_commands_are_counted_and_logged_but_answer_no_one() {
    let mut h = Harness::new("garbage", |_| {});
    h.keepalive();
    h.settle();
    h.take_events();
    let errors_before = h.system_counter(SystemCounter::Errors);
    for i in 0..100 {
        assert!(h.to_driver.write(0x7777, &[i as u8; 12]).unwrap());
    }
    // A known type with a truncated body.
    assert!(h
        .to_driver
        .write(Command::ClientKeepalive { client_id: 1 }.encode().0, &[1])
        .unwrap());
    h.settle();
    assert!(
        h.take_events().is_empty(),
        "nothing broadcast for malformed commands"
    );
    assert!(h.system_counter(SystemCounter::Errors) > errors_before);
    // And the driver still serves the well-behaved.
    let id = h.add_publication("aeron:ipc", 11);
    h.settle();
    assert!(h.take_events().iter().any(
        |e| matches!(e, Event::PublicationReady { correlation_id, .. } if *correlation_id == id)
    ));
}

#[test]
fn udp_publication_and_subscription_connect_through_setup_as_time_passes() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let mut h = Harness::new("udp", |_| {});
    h.keepalive();
    let sub_id = h.add_subscription(&channel, 12);
    h.add_publication(&channel, 12);
    h.settle();
    let mut images = available_images(&h.take_events());
    // SETUP, then the receiver's status message: a few steps of the clock.
    for _ in 0..2_000 {
        if !images.is_empty() {
            break;
        }
        h.advance(MS);
        images = available_images(&h.take_events());
    }
    assert_eq!(images, vec![(sub_id, 12)]);
    assert_eq!(h.counters_of_type(type_id::RECEIVER_HWM).len(), 1);
}

#[test]
fn do_work_after_close_does_nothing() {
    let mut h = Harness::new("closed", |_| {});
    h.driver.close();
    h.keepalive();
    assert_eq!(h.driver.do_work(), 0);
}
