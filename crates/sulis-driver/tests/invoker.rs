//! Deterministic tests of the driver's agents: invoker threading mode (no
//! driver threads; the test runs each duty cycle) on a manual clock (time
//! passes only when the test says). Commands go in through the CnC's
//! to-driver ring buffer and answers come back on its broadcast buffer, as
//! for any client, but nothing here sleeps or races a thread.

use std::net::UdpSocket;
use sulis_concurrent::broadcast::{BroadcastReceiver, CopyBroadcastReceiver};
use sulis_concurrent::cnc::Cnc;
use sulis_concurrent::counters::CountersReader;
use sulis_concurrent::mpsc_ring_buffer::ManyToOneRingBuffer;
use sulis_driver::agent::{ManualClock, NanoClock};
use sulis_driver::system_counters::SystemCounter;
use sulis_driver::{DriverContext, MediaDriver, ThreadingMode};
use sulis_protocol::cnc_descriptor::CNC_FILE;
use sulis_protocol::control::{Command, Event};
use sulis_protocol::counters::type_id;

const MS: i64 = 1_000_000;

/// A driver in invoker mode on a manual clock, and one client's view of its CnC.
struct Harness {
    driver: MediaDriver,
    clock: ManualClock,
    to_driver: ManyToOneRingBuffer,
    events: CopyBroadcastReceiver,
    counters: CountersReader,
    client_id: i64,
    _cnc: Cnc,
}

impl Harness {
    fn new(name: &str, configure: impl FnOnce(&mut DriverContext)) -> Harness {
        let mut ctx = DriverContext::default();
        ctx.dir = std::env::temp_dir().join(format!("sulis-invoker-{name}-{}", std::process::id()));
        ctx.threading_mode = ThreadingMode::Invoker;
        ctx.dir_delete_on_shutdown = true;
        ctx.term_buffer_sparse_file = true;
        ctx.ipc_term_buffer_length = 64 * 1024;
        ctx.term_buffer_length = 64 * 1024;
        ctx.timer_interval_ns = 10 * MS as u64;
        ctx.client_liveness_timeout_ns = 500 * MS as u64;
        ctx.publication_unblock_timeout_ns = 1_000 * MS as u64;
        ctx.publication_linger_timeout_ns = 100 * MS as u64;
        configure(&mut ctx);
        let (clock, manual) = NanoClock::manual();
        let driver = MediaDriver::launch_with_clock(ctx.clone(), clock).expect("driver starts");
        assert!(driver.is_invoker());
        let cnc = Cnc::open(&ctx.dir.join(CNC_FILE)).expect("CnC is there at once");
        let to_driver = ManyToOneRingBuffer::new(cnc.to_driver_buffer()).unwrap();
        let events =
            CopyBroadcastReceiver::new(BroadcastReceiver::new(cnc.to_clients_buffer()).unwrap());
        let counters =
            CountersReader::new(cnc.counters_metadata_buffer(), cnc.counters_values_buffer());
        let client_id = to_driver.next_correlation_id();
        Harness {
            driver,
            clock: manual,
            to_driver,
            events,
            counters,
            client_id,
            _cnc: cnc,
        }
    }

    fn send(&self, cmd: Command) {
        let (t, body) = cmd.encode();
        assert!(self.to_driver.write(t, &body).unwrap(), "room in the ring");
    }

    fn correlation_id(&self) -> i64 {
        self.to_driver.next_correlation_id()
    }

    /// Duty cycles until the agents are idle (bounded), without moving time.
    fn settle(&mut self) {
        for _ in 0..1_000 {
            if self.driver.do_work() == 0 {
                return;
            }
        }
        panic!("the driver never went idle");
    }

    /// Moves time by `ns` in 1 ms steps, running the agents at each step.
    fn advance(&mut self, ns: i64) {
        let mut left = ns;
        while left > 0 {
            let step = left.min(MS);
            self.clock.advance_ns(step);
            left -= step;
            self.settle();
        }
    }

    fn take_events(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        self.events
            .receive_many(
                |t, body| {
                    out.push(Event::decode(t, body).expect("the driver sends well-formed events"))
                },
                usize::MAX,
            )
            .unwrap();
        out
    }

    fn keepalive(&self) {
        self.send(Command::ClientKeepalive {
            client_id: self.client_id,
        });
    }

    fn add_publication(&self, channel: &str, stream_id: i32) -> i64 {
        let correlation_id = self.correlation_id();
        self.send(Command::AddPublication {
            client_id: self.client_id,
            correlation_id,
            stream_id,
            channel: channel.into(),
            exclusive: false,
        });
        correlation_id
    }

    fn add_subscription(&self, channel: &str, stream_id: i32) -> i64 {
        let correlation_id = self.correlation_id();
        self.send(Command::AddSubscription {
            client_id: self.client_id,
            correlation_id,
            stream_id,
            channel: channel.into(),
        });
        correlation_id
    }

    fn counters_of_type(&self, wanted: i32) -> Vec<i32> {
        let mut ids = Vec::new();
        self.counters.for_each(|id, t, _, _| {
            if t == wanted {
                ids.push(id)
            }
        });
        ids
    }

    fn system_counter(&self, c: SystemCounter) -> i64 {
        self.counters.counter_value(c as i32)
    }
}

fn available_images(events: &[Event]) -> Vec<(i64, i32)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::AvailableImage {
                subscription_registration_id,
                stream_id,
                ..
            } => Some((*subscription_registration_id, *stream_id)),
            _ => None,
        })
        .collect()
}

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
    let correlation_id = h.correlation_id();
    h.send(Command::RemovePublication {
        client_id: h.client_id,
        correlation_id,
        registration_id: reg,
    });
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
