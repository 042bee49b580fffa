//! A one-member cluster end to end on an embedded media driver and
//! archive: the consensus module leads, its log is recorded by the archive
//! and committed as far as recorded, a service container follows it and an
//! echo service answers clients over UDP egress. Sessions open and close
//! (by the client, by the service), timers fire through the log; a member
//! restarted on its directories replays its log through a new service and
//! goes on where it stopped.

mod common;

use common::{connect, free_port, launch_driver};

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use sulis_archive::{Archive, ArchiveContext, ArchiveThreadingMode};
use sulis_client::Client;
use sulis_cluster::client::cluster_client::{ClusterClient, ClusterClientContext};
use sulis_cluster::module::consensus_module::{
    toggle, ConsensusModule, ConsensusModuleContext, CONTROL_TOGGLE_TYPE_ID,
    SNAPSHOT_COUNTER_TYPE_ID,
};
use sulis_cluster::service::clustered_service_agent::{
    Cluster, ClusteredService, ClusteredServiceAgent, ServiceContext, SnapshotWriter,
};
use sulis_driver::MediaDriver;
use sulis_protocol::cluster::messages::{close_reason, event_code};

/// What the service saw, for the test to check.
#[derive(Default)]
struct Seen {
    opened: Vec<i64>,
    closed: Vec<(i64, i32)>,
    messages: usize,
    timers: Vec<i64>,
    log_position: i64,
    /// The snapshot the service started from (its messages), if any.
    started_from: Option<Vec<Vec<u8>>>,
    /// Its next snapshot fails.
    fail_snapshot: bool,
}

/// Echoes every message; "timer:N" schedules timer N due now (it answers
/// "fired N" to every session when it fires); "close-me" closes the session.
struct Echo(Arc<Mutex<Seen>>);

impl ClusteredService for Echo {
    fn on_start(&mut self, _c: &mut Cluster<'_>, snapshot: Option<&[Vec<u8>]>) {
        let mut seen = self.0.lock().unwrap();
        if let Some(messages) = snapshot {
            // Its state: the count of messages it had seen.
            seen.messages = std::str::from_utf8(&messages[0]).unwrap().parse().unwrap();
            seen.started_from = Some(messages.to_vec());
        }
    }
    fn on_take_snapshot(
        &mut self,
        _c: &mut Cluster<'_>,
        snapshot: &mut SnapshotWriter<'_>,
    ) -> Result<(), String> {
        let (count, fail) = {
            let seen = self.0.lock().unwrap();
            (seen.messages, seen.fail_snapshot)
        };
        snapshot.write(count.to_string().as_bytes())?;
        // Longer than a fragment: comes back whole.
        snapshot.write(&vec![7u8; 5_000])?;
        if fail {
            return Err("told to fail".into());
        }
        Ok(())
    }
    fn on_session_open(&mut self, _c: &mut Cluster<'_>, session_id: i64, _t: i64) {
        self.0.lock().unwrap().opened.push(session_id);
    }
    fn on_session_close(&mut self, _c: &mut Cluster<'_>, session_id: i64, _t: i64, reason: i32) {
        self.0.lock().unwrap().closed.push((session_id, reason));
    }
    fn on_session_message(
        &mut self,
        c: &mut Cluster<'_>,
        session: Option<i64>,
        _t: i64,
        payload: &[u8],
    ) {
        let Some(id) = session else { return };
        {
            let mut seen = self.0.lock().unwrap();
            seen.messages += 1;
            seen.log_position = c.log_position();
        }
        if let Some(n) = payload.strip_prefix(b"timer:") {
            let n: i64 = std::str::from_utf8(n).unwrap().parse().unwrap();
            assert!(c.schedule_timer(n, c.time()));
        } else if let Some(n) = payload.strip_prefix(b"later:") {
            let n: i64 = std::str::from_utf8(n).unwrap().parse().unwrap();
            assert!(c.schedule_timer(n, c.time() + 3_000));
        } else if payload == b"close-me" {
            assert!(c.close_session(id));
        } else {
            while c.offer(id, payload).is_err() {
                std::thread::yield_now();
            }
        }
    }
    fn on_timer_event(&mut self, c: &mut Cluster<'_>, correlation_id: i64, _t: i64) {
        self.0.lock().unwrap().timers.push(correlation_id);
        for id in c.session_ids() {
            let answer = format!("fired {correlation_id}");
            while c.offer(id, answer.as_bytes()).is_err() {
                std::thread::yield_now();
            }
        }
    }
}

struct Node {
    stop: Arc<AtomicBool>,
    module: Option<JoinHandle<()>>,
    service: Option<JoinHandle<()>>,
    module_error: Arc<Mutex<Option<String>>>,
}

impl Node {
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for h in [self.module.take(), self.service.take()]
            .into_iter()
            .flatten()
        {
            h.join().unwrap();
        }
    }
}

struct Setup {
    base: PathBuf,
    _driver: MediaDriver,
    _archive: Archive,
    client: Client,
    driver_dir: PathBuf,
    ingress_port: u16,
    /// The member's consensus endpoint: a member alone binds it too (its
    /// election runs as a cluster's does), so tests side by side need their own.
    consensus_port: u16,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let base =
            std::env::temp_dir().join(format!("sulis-cluster-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let driver_dir = base.join("driver");
        let driver = launch_driver(driver_dir.clone());
        let archive = Archive::launch(ArchiveContext {
            archive_dir: base.join("archive"),
            driver_dir: driver_dir.clone(),
            segment_file_length: 1024 * 1024,
            threading_mode: ArchiveThreadingMode::Shared,
            ..ArchiveContext::default()
        })
        .unwrap();
        let client = connect(&driver_dir, "test");
        Setup {
            base,
            _driver: driver,
            _archive: archive,
            client,
            driver_dir,
            ingress_port: free_port(),
            consensus_port: free_port(),
        }
    }

    fn module_context(&self) -> ConsensusModuleContext {
        let (p, c) = (self.ingress_port, self.consensus_port);
        ConsensusModuleContext {
            cluster_dir: self.base.join("cluster"),
            driver_dir: self.driver_dir.clone(),
            member_id: 0,
            members: format!(
                "0,localhost:{p},localhost:{c},localhost:20003,localhost:0,localhost:8010"
            ),
            log_term_length: 64 * 1024,
            session_timeout: Duration::from_secs(10),
            ..ConsensusModuleContext::default()
        }
    }

    /// A service container and a consensus module, each on a thread of its own.
    fn start(&self, seen: Arc<Mutex<Seen>>) -> Node {
        let stop = Arc::new(AtomicBool::new(false));
        let service_ctx = ServiceContext {
            driver_dir: self.driver_dir.clone(),
            ..ServiceContext::default()
        };
        let s = stop.clone();
        let service = std::thread::spawn(move || {
            let mut agent =
                ClusteredServiceAgent::launch(service_ctx, Box::new(Echo(seen))).unwrap();
            while !s.load(Ordering::Acquire) {
                if agent.do_work().unwrap() == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            agent.close();
        });
        let ctx = self.module_context();
        let s = stop.clone();
        let module_error = Arc::new(Mutex::new(None));
        let e = module_error.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let module = std::thread::spawn(move || {
            let mut module = match ConsensusModule::launch(ctx) {
                Ok(m) => m,
                Err(error) => {
                    *e.lock().unwrap() = Some(error);
                    ready_tx.send(()).unwrap();
                    return;
                }
            };
            ready_tx.send(()).unwrap();
            while !s.load(Ordering::Acquire) {
                match module.do_work() {
                    Ok(0) => std::thread::sleep(Duration::from_micros(100)),
                    Ok(_) => {}
                    Err(error) => {
                        *e.lock().unwrap() = Some(error);
                        break;
                    }
                }
            }
            module.close();
        });
        ready_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        Node {
            stop,
            module: Some(module),
            service: Some(service),
            module_error,
        }
    }

    fn connect(&self) -> ClusterClient {
        let ctx = ClusterClientContext {
            ingress_endpoints: format!("0=localhost:{}", self.ingress_port),
            egress_channel: format!("aeron:udp?endpoint=localhost:{}", free_port()),
            ..ClusterClientContext::default()
        };
        ClusterClient::connect(&self.client, &ctx).unwrap()
    }
}

impl Setup {
    fn counter(&self, type_id: i32) -> Option<i64> {
        let mut found = None;
        let counters = self.client.counters();
        counters.for_each(|id, t, _key, _label| {
            if t == type_id {
                found = Some(counters.counter_ref(id).get());
            }
        });
        found
    }

    /// Asks the module for a snapshot through its control toggle, as
    /// `sulis cluster-tool snapshot` does, and waits until it is acted on.
    fn snapshot(&self) {
        let counters = self.client.counters();
        let mut toggle_id = -1;
        counters.for_each(|id, t, _key, _label| {
            if t == CONTROL_TOGGLE_TYPE_ID {
                toggle_id = id;
            }
        });
        assert!(toggle_id >= 0, "the module has a control toggle");
        let toggle_ref = counters.counter_ref(toggle_id);
        assert_eq!(toggle_ref.get(), toggle::NEUTRAL);
        toggle_ref.set_ordered(toggle::SNAPSHOT);
        await_until("the snapshot acted on", || {
            toggle_ref.get() == toggle::NEUTRAL
        });
    }

    /// The recording log's snapshot entries: (service id, log position).
    fn snapshot_entries(&self) -> Vec<(i32, i64)> {
        common::snapshot_entries(&self.base.join("cluster"))
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn await_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Receives `n` egress messages.
fn receive(c: &mut ClusterClient, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    await_until(&format!("{n} egress messages"), || {
        c.poll_egress(|_, payload| got.push(payload.to_vec()), 100)
            .unwrap();
        got.len() >= n
    });
    got
}

#[test]
fn clients_get_their_messages_echoed_in_order_through_the_committed_log() {
    let setup = Setup::new("echo");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut node = setup.start(seen.clone());
    assert_eq!(*node.module_error.lock().unwrap(), None);
    let mut a = setup.connect();
    let mut b = setup.connect();
    assert_eq!((a.cluster_session_id(), b.cluster_session_id()), (1, 2));
    assert_eq!((a.leadership_term_id(), a.leader_member_id()), (0, 0));

    // Interleaved, some fragmented (longer than the MTU): each client gets its own, in order.
    let message = |who: u8, i: usize| -> Vec<u8> {
        let n = if i % 97 == 5 { 3_000 } else { 8 + i % 200 };
        let mut m = vec![who; n];
        m[..4].copy_from_slice(&(i as u32).to_le_bytes());
        m
    };
    const N: usize = 2_000;
    for i in 0..N {
        for (who, c) in [(b'a', &mut a), (b'b', &mut b)] {
            let m = message(who, i);
            let deadline = Instant::now() + Duration::from_secs(60);
            while c.offer(&m).is_err() {
                assert!(Instant::now() < deadline, "ingress took no message {i}");
                std::thread::yield_now();
            }
        }
    }
    let got_a = receive(&mut a, N);
    let got_b = receive(&mut b, N);
    assert_eq!(got_a, (0..N).map(|i| message(b'a', i)).collect::<Vec<_>>());
    assert_eq!(got_b, (0..N).map(|i| message(b'b', i)).collect::<Vec<_>>());
    assert_eq!(seen.lock().unwrap().opened, vec![1, 2]);
    assert_eq!(seen.lock().unwrap().messages, 2 * N);

    // A timer scheduled by the service fires once, through the log, on every session.
    a.offer(b"timer:7").unwrap();
    assert_eq!(receive(&mut a, 1), vec![b"fired 7".to_vec()]);
    assert_eq!(receive(&mut b, 1), vec![b"fired 7".to_vec()]);
    assert_eq!(seen.lock().unwrap().timers, vec![7]);

    // The service closes b's session: b is told why; a closes its own.
    b.offer(b"close-me").unwrap();
    await_until("b's session closed", || {
        b.poll_egress(|_, _| {}, 10).is_err()
    });
    let ended = b.ended().unwrap().clone();
    assert_eq!(
        (ended.code, ended.detail.as_str()),
        (event_code::CLOSED, "SERVICE_ACTION")
    );
    a.close();
    await_until("both closes applied by the service", || {
        seen.lock().unwrap().closed.len() == 2
    });
    assert_eq!(
        seen.lock().unwrap().closed,
        vec![
            (2, close_reason::SERVICE_ACTION),
            (1, close_reason::CLIENT_ACTION)
        ]
    );
    node.stop();
    assert_eq!(*node.module_error.lock().unwrap(), None);
}

#[test]
fn a_restarted_member_replays_its_log_through_its_service_and_goes_on_where_it_stopped() {
    let setup = Setup::new("restart");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut node = setup.start(seen.clone());
    let mut a = setup.connect();
    for i in 0..100u32 {
        a.offer(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(receive(&mut a, 100).len(), 100);
    // A timer due well after the restart: scheduled, not fired, before it.
    a.offer(b"later:9").unwrap();
    await_until("the timer scheduled", || {
        seen.lock().unwrap().messages == 101
    });
    let before = seen.lock().unwrap().log_position;
    node.stop();
    assert!(
        seen.lock().unwrap().timers.is_empty(),
        "timer 9 is due 3 s after it was scheduled"
    );

    // A new service (nothing in memory) and module on the same directories.
    let again = Arc::new(Mutex::new(Seen::default()));
    let mut node = setup.start(again.clone());
    assert_eq!(*node.module_error.lock().unwrap(), None);
    {
        let seen = again.lock().unwrap();
        assert_eq!(seen.opened, vec![1], "the replay opened session 1 again");
        assert_eq!(
            seen.messages, 101,
            "and gave the service every message again"
        );
        assert_eq!(seen.log_position, before);
    }
    // The old term's session is closed in the new one; the client is told.
    await_until("the old session closed by the restart", || {
        a.poll_egress(|_, _| {}, 10).is_err()
    });
    assert_eq!(a.ended().unwrap().code, event_code::CLOSED);
    await_until("the close applied", || {
        again.lock().unwrap().closed == vec![(1, close_reason::TIMEOUT)]
    });
    // A new client gets the next session id; the timer scheduled before
    // the restart fires after it, once.
    let mut b = setup.connect();
    assert_eq!((b.cluster_session_id(), b.leadership_term_id()), (2, 1));
    b.offer(b"after").unwrap();
    assert_eq!(receive(&mut b, 1), vec![b"after".to_vec()]);
    await_until("timer 9 fired", || !again.lock().unwrap().timers.is_empty());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(again.lock().unwrap().timers, vec![9]);
    node.stop();
    assert_eq!(*node.module_error.lock().unwrap(), None);
}

#[test]
fn a_second_module_on_the_same_directory_is_refused_and_the_first_goes_on() {
    let setup = Setup::new("twice");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut node = setup.start(seen.clone());
    let mut a = setup.connect();
    let second = ConsensusModule::launch(setup.module_context());
    let error = second.err().expect("refused");
    assert!(
        error.contains(&format!(
            "a consensus module (pid {}) is running on",
            std::process::id()
        )),
        "{error}"
    );
    assert!(error.contains("consensus-module.lck"), "{error}");
    a.offer(b"still here").unwrap();
    assert_eq!(receive(&mut a, 1), vec![b"still here".to_vec()]);
    node.stop();
    assert_eq!(*node.module_error.lock().unwrap(), None);
}

#[test]
fn a_member_restarts_from_its_snapshot_and_the_log_after_it() {
    let setup = Setup::new("snapshot");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut node = setup.start(seen.clone());
    let mut a = setup.connect();
    for i in 0..50u32 {
        a.offer(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(receive(&mut a, 50).len(), 50);
    // A timer due after the restart, and a session open, in the snapshot.
    a.offer(b"later:9").unwrap();
    await_until("the timer scheduled", || {
        seen.lock().unwrap().messages == 51
    });
    assert_eq!(setup.counter(SNAPSHOT_COUNTER_TYPE_ID), Some(0));
    setup.snapshot();
    assert_eq!(setup.counter(SNAPSHOT_COUNTER_TYPE_ID), Some(1));
    let entries = setup.snapshot_entries();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(
        (entries[0].0, entries[1].0),
        (0, -1),
        "service first, module last"
    );
    let at = entries[0].1;
    assert_eq!(entries[1].1, at);
    // Messages after the snapshot are in the log only.
    for i in 0..20u32 {
        a.offer(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(receive(&mut a, 20).len(), 20);
    node.stop();

    let again = Arc::new(Mutex::new(Seen::default()));
    let mut node = setup.start(again.clone());
    assert_eq!(*node.module_error.lock().unwrap(), None);
    {
        let seen = again.lock().unwrap();
        let from = seen
            .started_from
            .as_ref()
            .expect("started from the snapshot");
        assert_eq!(from[0], b"51".to_vec());
        assert_eq!(from[1], vec![7u8; 5_000]);
        assert_eq!(
            seen.messages, 71,
            "51 from the snapshot, 20 replayed after it"
        );
        assert!(
            seen.opened.is_empty(),
            "session 1 came from the snapshot, not the log"
        );
    }
    // The snapshot's session is closed by the restart (the service knew it).
    await_until("the snapshot's session closed", || {
        again.lock().unwrap().closed == vec![(1, close_reason::TIMEOUT)]
    });
    // The snapshot's timer fires once; session ids go on after the snapshot's.
    let mut b = setup.connect();
    assert_eq!(b.cluster_session_id(), 2);
    await_until("timer 9 fired", || !again.lock().unwrap().timers.is_empty());
    b.offer(b"after").unwrap();
    // The timer's answer may come first, in the same poll or before it.
    let mut got = receive(&mut b, 1);
    if !got.contains(&b"after".to_vec()) {
        got.extend(receive(&mut b, 1));
    }
    assert_eq!(got.last().unwrap(), b"after");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(again.lock().unwrap().timers, vec![9]);
    node.stop();
    assert_eq!(*node.module_error.lock().unwrap(), None);
}

#[test]
fn a_snapshot_a_service_could_not_write_is_not_recovered_from() {
    let setup = Setup::new("snapshot-fails");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut node = setup.start(seen.clone());
    let mut a = setup.connect();
    for i in 0..10u32 {
        a.offer(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(receive(&mut a, 10).len(), 10);
    seen.lock().unwrap().fail_snapshot = true;
    setup.snapshot();
    assert_eq!(setup.counter(SNAPSHOT_COUNTER_TYPE_ID), Some(0));
    assert!(setup.snapshot_entries().is_empty());
    // The cluster goes on.
    a.offer(b"still").unwrap();
    assert_eq!(receive(&mut a, 1), vec![b"still".to_vec()]);
    node.stop();
    let again = Arc::new(Mutex::new(Seen::default()));
    let mut node = setup.start(again.clone());
    {
        let seen = again.lock().unwrap();
        assert!(seen.started_from.is_none());
        assert_eq!(seen.messages, 11, "the whole log replayed");
    }
    node.stop();
    assert_eq!(*node.module_error.lock().unwrap(), None);
}
