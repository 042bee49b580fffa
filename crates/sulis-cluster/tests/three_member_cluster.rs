//! A three-member cluster on three media drivers and archives (UDP on
//! loopback), each member a consensus module and a service container on
//! threads of their own: the members elect a leader at start, a client is
//! redirected to it, the leader replicates its log to the followers and
//! commits what a quorum recorded; every member's service applies every
//! message, once, in order. Then the leader is stopped: the other two elect
//! one of themselves, the client follows it, and messages go on.

mod common;

use common::{connect, free_port, launch_driver};

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use sulis_archive::{Archive, ArchiveContext, ArchiveThreadingMode};
use sulis_client::Client;
use sulis_cluster::cluster_client::{ClusterClient, ClusterClientContext};
use sulis_cluster::clustered_service_agent::{
    Cluster, ClusteredService, ClusteredServiceAgent, ServiceContext,
};
use sulis_cluster::consensus_module::{ConsensusModule, ConsensusModuleContext};
use sulis_driver::MediaDriver;

/// The messages a member's service applied, in order.
type Applied = Arc<Mutex<Vec<Vec<u8>>>>;

/// Records every message; the leader's echoes it.
struct Recorder(Applied);

impl ClusteredService for Recorder {
    fn on_session_message(
        &mut self,
        c: &mut Cluster<'_>,
        session: Option<i64>,
        _t: i64,
        payload: &[u8],
    ) {
        self.0.lock().unwrap().push(payload.to_vec());
        if let Some(id) = session {
            // Egress goes from the leader only (a follower's offer is a no-op).
            while c.offer(id, payload).is_err() {
                std::thread::yield_now();
            }
        }
    }
}

struct Member {
    id: i32,
    base: PathBuf,
    _driver: MediaDriver,
    _archive: Archive,
    driver_dir: PathBuf,
}

struct Running {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    error: Arc<Mutex<Option<String>>>,
    /// The leader this member follows or is (−1 during an election).
    leader: Arc<AtomicI32>,
    applied: Applied,
}

impl Running {
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for h in self.threads.drain(..) {
            h.join().unwrap();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn member(id: i32) -> Member {
    let base = std::env::temp_dir().join(format!("sulis-cluster-3-{id}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let driver_dir = base.join("driver");
    let driver = launch_driver(driver_dir.clone());
    let archive = Archive::launch(ArchiveContext {
        archive_dir: base.join("archive"),
        driver_dir: driver_dir.clone(),
        segment_file_length: 4 * 1024 * 1024,
        threading_mode: ArchiveThreadingMode::Shared,
        ..ArchiveContext::default()
    })
    .unwrap();
    Member {
        id,
        base,
        _driver: driver,
        _archive: archive,
        driver_dir,
    }
}

fn start(m: &Member, members: &str) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let applied: Applied = Arc::default();
    let service_ctx = ServiceContext {
        driver_dir: m.driver_dir.clone(),
        ..ServiceContext::default()
    };
    let (s, a) = (stop.clone(), applied.clone());
    let service = std::thread::spawn(move || {
        let mut agent = ClusteredServiceAgent::launch(service_ctx, Box::new(Recorder(a))).unwrap();
        while !s.load(Ordering::Acquire) {
            if agent.do_work().unwrap() == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        agent.close();
    });
    let ctx = ConsensusModuleContext {
        cluster_dir: m.base.join("cluster"),
        driver_dir: m.driver_dir.clone(),
        member_id: m.id,
        members: members.to_string(),
        // Room for a follower fed at a different pace (tests/log_path.rs).
        log_term_length: 1024 * 1024,
        leader_heartbeat_interval: Duration::from_millis(100),
        leader_heartbeat_timeout: Duration::from_secs(2),
        election_timeout: Duration::from_millis(300),
        election_status_interval: Duration::from_millis(50),
        startup_canvass_timeout: Duration::from_secs(5),
        ..ConsensusModuleContext::default()
    };
    let (s, error, leader) = (
        stop.clone(),
        Arc::new(Mutex::new(None)),
        Arc::new(AtomicI32::new(-1)),
    );
    let (e, l) = (error.clone(), leader.clone());
    let module = std::thread::spawn(move || {
        let mut module = match ConsensusModule::launch(ctx) {
            Ok(m) => m,
            Err(why) => {
                *e.lock().unwrap() = Some(why);
                return;
            }
        };
        while !s.load(Ordering::Acquire) {
            match module.do_work() {
                Ok(work) => {
                    l.store(module.leader_member_id(), Ordering::Release);
                    if work == 0 {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                Err(why) => {
                    *e.lock().unwrap() = Some(why);
                    break;
                }
            }
        }
        module.close();
    });
    Running {
        stop,
        threads: vec![module, service],
        error,
        leader,
        applied,
    }
}

fn await_until(what: &str, seconds: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The leader every running member agrees on, once they do.
fn agreed_leader(running: &[&Running]) -> Option<i32> {
    let first = running[0].leader.load(Ordering::Acquire);
    (first >= 0
        && running
            .iter()
            .all(|r| r.leader.load(Ordering::Acquire) == first))
    .then_some(first)
}

fn errors(running: &[&Running]) -> Vec<String> {
    running
        .iter()
        .filter_map(|r| r.error.lock().unwrap().clone())
        .collect()
}

fn message(i: u32) -> Vec<u8> {
    let mut m = i.to_le_bytes().to_vec();
    m.extend(std::iter::repeat_n(
        (i % 251) as u8,
        10 + (i as usize * 53) % 2_000,
    ));
    m
}

fn send_and_receive(client: &mut ClusterClient, range: std::ops::Range<u32>) {
    let expected: Vec<Vec<u8>> = range.clone().map(message).collect();
    let mut got = Vec::new();
    for i in range {
        let m = message(i);
        let deadline = Instant::now() + Duration::from_secs(10);
        while client.offer(&m).is_err() {
            assert!(Instant::now() < deadline, "ingress took no message {i}");
            let _ = client.poll_egress(|_, p| got.push(p.to_vec()), 10);
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    await_until("the echoes", 20, || {
        client
            .poll_egress(|_, p| got.push(p.to_vec()), 100)
            .unwrap();
        got.len() >= expected.len()
    });
    assert_eq!(got, expected);
}

#[test]
fn three_members_elect_a_leader_replicate_its_log_and_elect_another_when_it_stops() {
    let hosts: Vec<Member> = (0..3).map(member).collect();
    let ingress: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let members = (0..3)
        .map(|i| {
            format!(
                "{i},localhost:{},localhost:{},localhost:{},localhost:{},localhost:{}",
                ingress[i],
                free_port(),
                free_port(),
                free_port(),
                free_port()
            )
        })
        .collect::<Vec<_>>()
        .join("|");
    let mut running: Vec<Running> = hosts.iter().map(|h| start(h, &members)).collect();
    await_until("a leader all three agree on", 30, || {
        let all: Vec<&Running> = running.iter().collect();
        assert_eq!(errors(&all), Vec::<String>::new());
        agreed_leader(&all).is_some()
    });
    let leader = agreed_leader(&running.iter().collect::<Vec<_>>()).unwrap();

    // A client that knows every member's ingress reaches the leader.
    let client_driver = hosts[0].driver_dir.clone();
    let client_conn: Client = connect(&client_driver, "cluster-client");
    let ctx = ClusterClientContext {
        ingress_endpoints: (0..3)
            .map(|i| format!("{i}=localhost:{}", ingress[i]))
            .collect::<Vec<_>>()
            .join(","),
        egress_channel: format!("aeron:udp?endpoint=localhost:{}", free_port()),
        ..ClusterClientContext::default()
    };
    let mut client = ClusterClient::connect(&client_conn, &ctx).unwrap();
    assert_eq!(client.leader_member_id(), leader);
    send_and_receive(&mut client, 0..300);
    // Every member's service applied every message once, in order: the
    // followers only what the leader said a quorum holds.
    let expected: Vec<Vec<u8>> = (0..300).map(message).collect();
    for (i, r) in running.iter().enumerate() {
        await_until(
            &format!("member {i}'s service to apply the log"),
            20,
            || r.applied.lock().unwrap().len() >= 300,
        );
        assert_eq!(*r.applied.lock().unwrap(), expected, "member {i}");
    }
    let all: Vec<&Running> = running.iter().collect();
    assert_eq!(errors(&all), Vec::<String>::new());
    drop(all);

    // The leader stops: the other two elect one of themselves.
    running[leader as usize].stop();
    let rest: Vec<usize> = (0..3).filter(|&i| i != leader as usize).collect();
    await_until("a new leader", 30, || {
        let two: Vec<&Running> = rest.iter().map(|&i| &running[i]).collect();
        assert_eq!(errors(&two), Vec::<String>::new());
        agreed_leader(&two).is_some_and(|l| l != leader)
    });
    let two: Vec<&Running> = rest.iter().map(|&i| &running[i]).collect();
    let new_leader = agreed_leader(&two).unwrap();
    drop(two);
    await_until("the client to follow the new leader", 30, || {
        let _ = client.poll_egress(|_, _| {}, 10);
        let _ = client.follow_leader(&client_conn);
        client.leader_member_id() == new_leader
    });
    send_and_receive(&mut client, 300..400);
    let expected: Vec<Vec<u8>> = (0..400).map(message).collect();
    for &i in &rest {
        await_until(
            &format!("member {i}'s service to apply the new term"),
            20,
            || running[i].applied.lock().unwrap().len() >= 400,
        );
        assert_eq!(*running[i].applied.lock().unwrap(), expected, "member {i}");
    }
    client.close();
    for r in running.iter_mut() {
        r.stop();
    }
    let all: Vec<&Running> = running.iter().collect();
    assert_eq!(errors(&all), Vec::<String>::new());
}
