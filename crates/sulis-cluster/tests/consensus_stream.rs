//! The consensus stream between three members, each on its own media
//! driver, over UDP on loopback: every member's publisher reaches the other
//! two members' adapters, messages arrive whole and in order per sender, a
//! member that is not running is a send that reports false (and is
//! counted), and datagrams that are not consensus messages sent straight at
//! an endpoint are passed over while the stream goes on.

mod common;

use common::{connect, free_port, launch_driver};

use std::net::UdpSocket;
use std::time::{Duration, Instant};
use sulis_client::Client;
use sulis_cluster::module::cluster_member::ClusterMember;
use sulis_cluster::module::consensus_adapter::{ConsensusAdapter, Skipped};
use sulis_cluster::module::consensus_publisher::{ConsensusPublisher, Outbound};
use sulis_cluster::module::election::ConsensusMessage;
use sulis_driver::MediaDriver;
use sulis_protocol::cluster::messages::{
    AppendPosition, CommitPosition, ServiceAck, TerminationAck,
};

const STREAM: i32 = 108;

struct Member {
    _driver: MediaDriver,
    client: Client,
}

fn member(name: &str) -> Member {
    let dir = std::env::temp_dir().join(format!(
        "sulis-consensus-stream-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    Member {
        _driver: launch_driver(dir.clone()),
        client: connect(&dir, name),
    }
}

fn members_string(ports: &[u16]) -> String {
    ports
        .iter()
        .enumerate()
        .map(|(id, p)| {
            format!(
                "{id},127.0.0.1:{},127.0.0.1:{p},127.0.0.1:{},127.0.0.1:0,127.0.0.1:{}",
                free_port(),
                free_port(),
                free_port()
            )
        })
        .collect::<Vec<_>>()
        .join("|")
}

fn append(from: i32, position: i64) -> Outbound {
    Outbound::Election(ConsensusMessage::AppendPosition(AppendPosition {
        leadership_term_id: 2,
        log_position: position,
        follower_member_id: from,
        flags: 0,
    }))
}

#[test]
fn three_members_exchange_consensus_messages_over_udp() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let members = ClusterMember::parse(&members_string(&ports)).unwrap();
    let mut nodes: Vec<Member> = (0..3).map(|i| member(&format!("m{i}"))).collect();
    let mut adapters: Vec<ConsensusAdapter> = nodes
        .iter()
        .zip(&members)
        .map(|(n, m)| {
            let sub = n
                .client
                .add_subscription(
                    &format!("aeron:udp?endpoint={}", m.consensus_endpoint),
                    STREAM,
                )
                .unwrap();
            ConsensusAdapter::new(sub)
        })
        .collect();
    let mut publishers: Vec<ConsensusPublisher> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            ConsensusPublisher::connect(&n.client, &members, i as i32, "aeron:udp", STREAM).unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(0..3).all(|i| {
        (0..3)
            .filter(|&j| j != i)
            .all(|j| publishers[i].is_connected(j as i32))
    }) {
        assert!(
            Instant::now() < deadline,
            "the consensus publications did not connect"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // A stranger's datagrams straight at member 0's endpoint: not even frames.
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..20 {
        stranger
            .send_to(b"not a consensus message", &members[0].consensus_endpoint)
            .unwrap();
    }
    // A message of the schema that is not a consensus message, through a
    // real publication: passed over, counted.
    let mut odd = nodes[1]
        .client
        .add_exclusive_publication(
            &format!("aeron:udp?endpoint={}", members[0].consensus_endpoint),
            STREAM,
        )
        .unwrap();
    let service_ack = ServiceAck {
        log_position: 1,
        timestamp: 2,
        ack_id: 3,
        relevant_id: 4,
        service_id: 0,
    }
    .encode();
    let deadline = Instant::now() + Duration::from_secs(60);
    while odd.offer(&service_ack).is_err() {
        assert!(
            Instant::now() < deadline,
            "the odd publication did not connect"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Each member sends 200 positions to each other one, and member 0 a
    // commit position and a termination ack to all.
    for p in 1..=200i64 {
        for (i, publisher) in publishers.iter_mut().enumerate() {
            for j in (0..3).filter(|&j| j != i as i32) {
                let mut tries = 0;
                while !publisher.send(j, &append(i as i32, p * 64)) {
                    tries += 1;
                    assert!(tries < 10_000, "member {i} could not send to {j}");
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }
    let commit = Outbound::Election(ConsensusMessage::CommitPosition(CommitPosition {
        leadership_term_id: 2,
        log_position: 12_800,
        leader_member_id: 0,
    }));
    let ack = Outbound::TerminationAck(TerminationAck {
        leadership_term_id: 2,
        log_position: 12_800,
        member_id: 0,
    });
    // Every member reads 400 positions (200 from each other member, in
    // order per sender).
    let mut got: Vec<Vec<Outbound>> = vec![Vec::new(), Vec::new(), Vec::new()];
    let read_until =
        |got: &mut Vec<Vec<Outbound>>, adapters: &mut Vec<ConsensusAdapter>, counts: [usize; 3]| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while (0..3).any(|i| got[i].len() < counts[i]) {
                assert!(
                    Instant::now() < deadline,
                    "messages missing: {:?} of {counts:?}",
                    got.iter().map(Vec::len).collect::<Vec<_>>()
                );
                for (i, a) in adapters.iter_mut().enumerate() {
                    a.poll(100, |m, _| got[i].push(m));
                }
            }
        };
    read_until(&mut got, &mut adapters, [400, 400, 400]);
    // Then member 0 broadcasts a commit position and a termination ack: its
    // publications are idle and take them at once; members 1 and 2 read
    // them last.
    assert_eq!(publishers[0].broadcast(&commit), 2);
    assert_eq!(publishers[0].broadcast(&ack), 2);
    read_until(&mut got, &mut adapters, [400, 402, 402]);
    for (i, messages) in got.iter().enumerate() {
        for from in (0..3).filter(|&f| f != i as i32) {
            let positions: Vec<i64> = messages
                .iter()
                .filter_map(|m| match m {
                    Outbound::Election(ConsensusMessage::AppendPosition(a))
                        if a.follower_member_id == from =>
                    {
                        Some(a.log_position)
                    }
                    _ => None,
                })
                .collect();
            assert_eq!(
                positions,
                (1..=200).map(|p| p * 64).collect::<Vec<_>>(),
                "member {i} from {from}"
            );
        }
        if i > 0 {
            assert_eq!(
                messages[messages.len() - 2..],
                [commit.clone(), ack.clone()]
            );
        }
    }
    // The stranger's datagrams were never frames (the driver dropped them);
    // the ServiceAck was a message, passed over and counted.
    let deadline = Instant::now() + Duration::from_secs(60);
    while adapters[0].skipped().0 == 0 {
        assert!(
            Instant::now() < deadline,
            "the ServiceAck never reached member 0"
        );
        adapters[0].poll(10, |m, _| panic!("nothing else was sent: {m:?}"));
    }
    assert_eq!(adapters[0].skipped().0, 1);
    assert!(matches!(
        adapters[0].skipped().1,
        Some(Skipped::Template(33))
    ));
    // Member 2 goes away: sends to it stop being taken once its image is
    // gone at members 0 and 1, and are counted.
    let gone = adapters.pop().unwrap();
    gone.close();
    drop(publishers.pop());
    drop(nodes.pop());
    let deadline = Instant::now() + Duration::from_secs(60);
    while publishers[0].is_connected(2) {
        assert!(
            Instant::now() < deadline,
            "member 0 still connected to the stopped member 2"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!publishers[0].send(2, &append(0, 1)));
    assert!(publishers[0].dropped(2) >= 1);
    assert!(publishers[0].send(1, &append(0, 1)));
}
