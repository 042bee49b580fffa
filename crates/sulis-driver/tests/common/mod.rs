//! The harness of the driver's deterministic tests: one driver in invoker
//! mode on a manual clock, and one client's view of its CnC (commands in
//! through the to-driver ring buffer, events out of the broadcast buffer).

#![allow(dead_code)] // each test binary uses part of it

use std::path::Path;
use std::sync::Arc;
use sulis_concurrent::broadcast::{BroadcastReceiver, CopyBroadcastReceiver};
use sulis_concurrent::cnc::Cnc;
use sulis_concurrent::counters::{CounterRef, CountersReader};
use sulis_concurrent::logbuffer::term_appender::{Append, HeaderWriter, TermAppender};
use sulis_concurrent::logbuffer::{term_reader, LogBuffers};
use sulis_concurrent::mpsc_ring_buffer::ManyToOneRingBuffer;
use sulis_driver::agent::{ManualClock, NanoClock};
use sulis_driver::media::transport::{TransportFactory, UdpTransportFactory};
use sulis_driver::system_counters::SystemCounter;
use sulis_driver::{DriverContext, MediaDriver, ThreadingMode};
use sulis_protocol::cnc_descriptor::CNC_FILE;
use sulis_protocol::control::{Command, Event};
use sulis_protocol::frame::DATA_HEADER_LENGTH;

pub const MS: i64 = 1_000_000;

/// A driver in invoker mode on a manual clock, and one client's view of its CnC.
pub struct Harness {
    pub driver: MediaDriver,
    pub clock: ManualClock,
    pub to_driver: ManyToOneRingBuffer,
    events: CopyBroadcastReceiver,
    pub counters: CountersReader,
    pub client_id: i64,
    _cnc: Cnc,
}

impl Harness {
    pub fn new(name: &str, configure: impl FnOnce(&mut DriverContext)) -> Harness {
        Harness::with_transports(name, configure, Arc::new(UdpTransportFactory))
    }

    /// As [`Harness::new`], with the endpoints' transports made by `transports`.
    pub fn with_transports(
        name: &str,
        configure: impl FnOnce(&mut DriverContext),
        transports: Arc<dyn TransportFactory>,
    ) -> Harness {
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
        let driver =
            MediaDriver::launch_with(ctx.clone(), clock, transports).expect("driver starts");
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

    pub fn send(&self, cmd: Command) {
        let (t, body) = cmd.encode();
        assert!(self.to_driver.write(t, &body).unwrap(), "room in the ring");
    }

    pub fn correlation_id(&self) -> i64 {
        self.to_driver.next_correlation_id()
    }

    /// Duty cycles until the agents are idle (bounded), without moving time.
    pub fn settle(&mut self) {
        for _ in 0..1_000 {
            if self.driver.do_work() == 0 {
                return;
            }
        }
        panic!("the driver never went idle");
    }

    /// Moves time by `ns` in 1 ms steps, running the agents at each step.
    pub fn advance(&mut self, ns: i64) {
        let mut left = ns;
        while left > 0 {
            let step = left.min(MS);
            self.clock.advance_ns(step);
            left -= step;
            self.settle();
        }
    }

    pub fn take_events(&mut self) -> Vec<Event> {
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

    /// The driver's error log: `(count, first ms, last ms, text)` per entry.
    pub fn errors(&self) -> Vec<(i32, i64, i64, String)> {
        let mut out = Vec::new();
        sulis_concurrent::error_log::read_error_log(
            self._cnc.error_log_buffer(),
            0,
            |n, first, last, text| out.push((n, first, last, text.to_string())),
        );
        out
    }

    pub fn keepalive(&self) {
        self.send(Command::ClientKeepalive {
            client_id: self.client_id,
        });
    }

    pub fn add_publication(&self, channel: &str, stream_id: i32) -> i64 {
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

    pub fn add_subscription(&self, channel: &str, stream_id: i32) -> i64 {
        let correlation_id = self.correlation_id();
        self.send(Command::AddSubscription {
            client_id: self.client_id,
            correlation_id,
            stream_id,
            channel: channel.into(),
        });
        correlation_id
    }

    /// Removes publication `registration_id`; returns the command's correlation id.
    pub fn remove_publication(&self, registration_id: i64) -> i64 {
        let correlation_id = self.correlation_id();
        self.send(Command::RemovePublication {
            client_id: self.client_id,
            correlation_id,
            registration_id,
        });
        correlation_id
    }

    pub fn counters_of_type(&self, wanted: i32) -> Vec<i32> {
        let mut ids = Vec::new();
        self.counters.for_each(|id, t, _, _| {
            if t == wanted {
                ids.push(id)
            }
        });
        ids
    }

    pub fn system_counter(&self, c: SystemCounter) -> i64 {
        self.counters.counter_value(c as i32)
    }
}

pub fn available_images(events: &[Event]) -> Vec<(i64, i32)> {
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

/// The log file of the first PUBLICATION_READY among `events`.
#[allow(dead_code)] // not every test binary uses every helper
pub fn publication_log(events: &[Event]) -> String {
    events
        .iter()
        .find_map(|e| match e {
            Event::PublicationReady { log_file, .. } => Some(log_file.clone()),
            _ => None,
        })
        .expect("a publication ready")
}

/// The subscriber position counter of the first image subscription `subscription` got.
#[allow(dead_code)]
pub fn image_position_counter(events: &[Event], subscription: i64) -> i32 {
    events
        .iter()
        .find_map(|e| match e {
            Event::AvailableImage {
                subscription_registration_id,
                subscriber_position_id,
                ..
            } if *subscription_registration_id == subscription => Some(*subscriber_position_id),
            _ => None,
        })
        .expect("an image for the subscription")
}

/// A publication and a subscription of the harness's driver, connected: the
/// publication's log (the test appends to it as a publisher would) and the
/// image's (the test reads it as a subscriber would, moving its position).
pub struct Loop {
    pub publication_id: i64,
    pub publication: LogBuffers,
    pub image: LogBuffers,
    pub subscriber_position: CounterRef,
    read_offset: usize,
}

impl Harness {
    /// Adds a subscription on `sub_channel` and a publication on
    /// `pub_channel` (stream 1) and moves time in 1 ms steps, up to
    /// `max_ms`, until the image is there; `None` if it never came.
    pub fn connect_loop(
        &mut self,
        sub_channel: &str,
        pub_channel: &str,
        max_ms: usize,
    ) -> Option<Loop> {
        self.add_subscription(sub_channel, 1);
        let publication_id = self.add_publication(pub_channel, 1);
        self.settle();
        let mut publication = None;
        let mut image = None;
        for _ in 0..max_ms {
            for e in self.take_events() {
                match e {
                    Event::PublicationReady { log_file, .. } => publication = Some(log_file),
                    Event::AvailableImage {
                        log_file,
                        subscriber_position_id,
                        ..
                    } => image = Some((log_file, subscriber_position_id)),
                    _ => {}
                }
            }
            if image.is_some() {
                break;
            }
            self.advance(MS);
        }
        let (image_file, position_id) = image?;
        Some(Loop {
            publication_id,
            publication: LogBuffers::map_existing(Path::new(&publication?)).unwrap(),
            image: LogBuffers::map_existing(Path::new(&image_file)).unwrap(),
            subscriber_position: self.counters.counter_ref(position_id),
            read_offset: 0,
        })
    }
}

impl Loop {
    /// Appends messages to the first term, as a publisher would.
    pub fn publish(&self, messages: &[Vec<u8>]) {
        let header = HeaderWriter::new(&self.publication.default_header());
        let appender = TermAppender::new(self.publication.term(0), self.publication.meta(), 0);
        for m in messages {
            assert!(matches!(
                appender.append_unfragmented(&header, m, None),
                Append::Done(_)
            ));
        }
    }

    /// Reads what the image holds past what was read, as a subscriber
    /// would, and moves the subscriber position.
    pub fn poll(&mut self) -> Vec<Vec<u8>> {
        let term = self.image.term(0);
        let mut out = Vec::new();
        let (_, next) = term_reader::read(&term, self.read_offset, usize::MAX, |offset, len| {
            out.push(
                term.slice(offset + DATA_HEADER_LENGTH, len - DATA_HEADER_LENGTH)
                    .to_vec(),
            )
        });
        self.read_offset = next;
        self.subscriber_position.set_ordered(next as i64);
        out
    }

    /// Publishes `sent`, then moves time up to 50 ms, reading; returns what arrived.
    pub fn transfer(&mut self, h: &mut Harness, sent: &[Vec<u8>]) -> Vec<Vec<u8>> {
        self.publish(sent);
        let mut got = Vec::new();
        for _ in 0..50 {
            h.advance(MS);
            got.extend(self.poll());
            if got.len() >= sent.len() {
                break;
            }
        }
        got
    }
}
