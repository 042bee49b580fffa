//! The client follows a leader change: a fake cluster of two members (plain
//! subscriptions on their ingress endpoints and a publication to the
//! client's egress, all on an embedded driver) opens a session on member 0,
//! then announces member 1 as the leader of the next term. The client
//! takes the term and leader from the NewLeaderEvent, ignores events of
//! other sessions and older terms, and what it sent member 0 and was not
//! told was committed reaches member 1 again, before its next message,
//! each with the new term and its number in its header (exactly once).

mod common;

use common::{connect, free_port, launch_driver};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use sulis_client::{Client, ExclusivePublication, FragmentAssembler, Subscription};
use sulis_cluster::client::cluster_client::{ClusterClient, ClusterClientContext};
use sulis_driver::MediaDriver;
use sulis_protocol::cluster::messages::{
    event_code, NewLeaderEvent, SessionCloseRequest, SessionConnectRequest, SessionEvent,
    SessionMessageHeader, EXACTLY_ONCE, MESSAGES_COMMITTED, MESSAGES_COMMITTED_AT_CLOSE,
    SESSION_HEADER_LENGTH,
};

/// The next whole message on `sub`, within 10 s.
fn next_message(sub: &mut Subscription, assembler: &mut FragmentAssembler) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut got = None;
        sub.poll(
            |payload, header| -> Result<(), ()> {
                if got.is_none() {
                    if let Some(m) = assembler.on_fragment(payload, header) {
                        got = Some(m.payload);
                    }
                }
                Ok(())
            },
            1,
        )
        .unwrap();
        if let Some(m) = got {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "no message on the fake member's ingress"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The next SessionConnectRequest on `sub` (other messages skipped).
fn next_connect_request(
    sub: &mut Subscription,
    assembler: &mut FragmentAssembler,
) -> SessionConnectRequest {
    loop {
        if let Ok(r) = SessionConnectRequest::decode(&next_message(sub, assembler)) {
            return r;
        }
    }
}

/// A fake leader's SessionEvent (term 3, member 0 leading, Aeron's 10 s
/// heartbeat timeout).
fn session_event(session: i64, correlation_id: i64, code: i32, detail: &str) -> Vec<u8> {
    SessionEvent {
        cluster_session_id: session,
        correlation_id,
        leadership_term_id: 3,
        leader_member_id: 0,
        code,
        version: 0,
        leader_heartbeat_timeout_ns: 10_000_000_000,
        detail: detail.into(),
    }
    .encode()
}

/// Offers `m` until `egress` takes it, within 60 s.
fn send(egress: &mut ExclusivePublication, m: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while egress.offer(m).is_err() {
        assert!(Instant::now() < deadline, "egress took nothing");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A fake member on a client of its own: the client and its ingress
/// subscription on `port` (stream 101).
fn fake_member(dir: &Path, port: u16) -> (Client, Subscription) {
    let c = connect(dir, "fake-member");
    let ingress = c
        .add_subscription(&format!("aeron:udp?endpoint=localhost:{port}"), 101)
        .unwrap();
    (c, ingress)
}

/// A client's context for the fake cluster at `endpoints`, answering on
/// `egress_channel`, with a 10 s message timeout.
fn fake_cluster_context(endpoints: String, egress_channel: String) -> ClusterClientContext {
    ClusterClientContext {
        ingress_endpoints: endpoints,
        egress_channel,
        message_timeout: Duration::from_secs(10),
        ..ClusterClientContext::default()
    }
}

/// A clean directory for a test (`sulis-<name>-<pid>` in the temp dir) and
/// a driver in its `driver` folder: (the directory, the driver's, the driver).
fn test_driver(name: &str) -> (PathBuf, PathBuf, MediaDriver) {
    let base = std::env::temp_dir().join(format!("sulis-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let driver_dir = base.join("driver");
    let driver = launch_driver(driver_dir.clone());
    (base, driver_dir, driver)
}

#[test]
fn a_new_leader_event_moves_the_session_to_the_new_leader_and_its_term() {
    let (base, driver_dir, _driver) = test_driver("new-leader");
    let (a, b) = (free_port(), free_port());
    let endpoints = format!("0=localhost:{a},1=localhost:{b}");

    // The fake members, on a client of their own on another thread.
    let dir = driver_dir.clone();
    let announce = endpoints.clone();
    let fake = std::thread::spawn(move || {
        let c = connect(&dir, "fake-cluster");
        let mut member0 = c
            .add_subscription(&format!("aeron:udp?endpoint=localhost:{a}"), 101)
            .unwrap();
        let mut member1 = c
            .add_subscription(&format!("aeron:udp?endpoint=localhost:{b}"), 101)
            .unwrap();
        let mut assembler = FragmentAssembler::new();
        let request = next_connect_request(&mut member0, &mut assembler);
        let mut egress = c
            .add_exclusive_publication(&request.response_channel, request.response_stream_id)
            .unwrap();
        let mut send = |m: Vec<u8>| send(&mut egress, &m);
        // A sulis leader's OK: it sequences numbered messages once.
        send(session_event(
            7,
            request.correlation_id,
            event_code::OK,
            EXACTLY_ONCE,
        ));
        let m1 = next_message(&mut member0, &mut assembler);
        let h = SessionMessageHeader::decode(&m1).unwrap();
        assert_eq!(
            (h.leadership_term_id, h.cluster_session_id, h.timestamp),
            (3, 7, 1)
        );
        assert_eq!(&m1[SESSION_HEADER_LENGTH..], b"m1");
        // Another session's leader change, then a stale one of an older term: not this client's.
        let event = |term: i64, session: i64, leader: i32| {
            NewLeaderEvent {
                leadership_term_id: term,
                cluster_session_id: session,
                leader_member_id: leader,
                ingress_endpoints: announce.clone(),
            }
            .encode()
        };
        send(event(9, 8, 0));
        send(event(2, 7, 0));
        send(event(4, 7, 1));
        // Member 1 had the connect request too (the client asks every member
        // whose ingress connects; a real follower would have redirected it).
        let m2 = loop {
            let m = next_message(&mut member1, &mut assembler);
            match SessionConnectRequest::decode(&m) {
                Ok(r) => assert_eq!(r.correlation_id, request.correlation_id),
                Err(_) => break m,
            }
        };
        // Exactly once: m1, never said to be committed, goes again first, in
        // the new term with its number; then m2.
        let h = SessionMessageHeader::decode(&m2).unwrap();
        assert_eq!(
            (h.leadership_term_id, h.cluster_session_id, h.timestamp),
            (4, 7, 1)
        );
        assert_eq!(&m2[SESSION_HEADER_LENGTH..], b"m1");
        let m2 = next_message(&mut member1, &mut assembler);
        let h = SessionMessageHeader::decode(&m2).unwrap();
        assert_eq!(
            (h.leadership_term_id, h.cluster_session_id, h.timestamp),
            (4, 7, 2)
        );
        assert_eq!(&m2[SESSION_HEADER_LENGTH..], b"m2");
        let mut answer = SessionMessageHeader {
            leadership_term_id: 4,
            cluster_session_id: 7,
            timestamp: 1,
        }
        .encode();
        answer.extend_from_slice(b"from member 1");
        send(answer);
        c.close();
    });

    let c = connect(&driver_dir, "test");
    let mut session = ClusterClient::connect(
        &c,
        &ClusterClientContext {
            ingress_endpoints: endpoints,
            egress_channel: format!("aeron:udp?endpoint=localhost:{}", free_port()),
            message_timeout: Duration::from_secs(10),
            ..ClusterClientContext::default()
        },
    )
    .unwrap();
    assert_eq!(
        (
            session.cluster_session_id(),
            session.leadership_term_id(),
            session.leader_member_id()
        ),
        (7, 3, 0)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while session.offer(b"m1").is_err() {
        assert!(Instant::now() < deadline);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while session.leader_member_id() != 1 {
        session.poll_egress(|_, _| {}, 10).unwrap();
        assert!(Instant::now() < deadline, "no NewLeaderEvent taken");
    }
    assert_eq!(session.leadership_term_id(), 4);
    assert!(session.follow_leader(&c).unwrap(), "the ingress moved");
    assert!(!session.follow_leader(&c).unwrap(), "once");
    let deadline = Instant::now() + Duration::from_secs(60);
    while session.offer(b"m2").is_err() {
        assert!(
            Instant::now() < deadline,
            "the new leader's ingress did not connect"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.is_empty() {
        session
            .poll_egress(|_, p| got.push(p.to_vec()), 10)
            .unwrap();
        assert!(Instant::now() < deadline, "no answer from the new leader");
    }
    assert_eq!(got, vec![b"from member 1".to_vec()]);
    fake.join().unwrap();
    session.close();
    c.close();
    let _ = std::fs::remove_dir_all(&base);
}

/// A client connecting on the egress port of an earlier session (a process
/// starting again on its fixed port) while a new leader tells that session
/// it closed: the notice (CLOSED, with the correlation id of the earlier
/// session's connect) comes before the new connect's OK. Each connect
/// request has an id of its own from the driver, as Aeron's client takes
/// them, so the notice is not taken for the answer. With the fixed first id
/// every connect used, it was: "the cluster refused the session: CLOSED
/// TIMEOUT", and the fault suite's clients waited seconds more after every
/// restart of a leader.
#[test]
fn an_earlier_sessions_close_notice_on_the_same_egress_does_not_answer_a_new_connect() {
    let (base, driver_dir, _driver) = test_driver("stale-notice");
    let a = free_port();
    let endpoints = format!("0=localhost:{a}");
    let egress_channel = format!("aeron:udp?endpoint=localhost:{}", free_port());

    let dir = driver_dir.clone();
    let fake = std::thread::spawn(move || {
        let (c, mut member0) = fake_member(&dir, a);
        let mut assembler = FragmentAssembler::new();
        let mut requests = Vec::new();
        for session in [7, 8] {
            let request = next_connect_request(&mut member0, &mut assembler);
            let mut egress = c
                .add_exclusive_publication(&request.response_channel, request.response_stream_id)
                .unwrap();
            if session == 8 {
                // The first session closed by a leader just started: told on its egress, first.
                let first: &SessionConnectRequest = &requests[0];
                let notice = session_event(7, first.correlation_id, event_code::CLOSED, "TIMEOUT");
                send(&mut egress, &notice);
            }
            let ok = session_event(
                session,
                request.correlation_id,
                event_code::OK,
                EXACTLY_ONCE,
            );
            send(&mut egress, &ok);
            requests.push(request);
            // Kept until the client took it (the exclusive publication lingers).
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_ne!(
            requests[0].correlation_id, requests[1].correlation_id,
            "two connects on one driver, one correlation id"
        );
        c.close();
    });

    let c = connect(&driver_dir, "test");
    let ctx = fake_cluster_context(endpoints, egress_channel);
    let first = ClusterClient::connect(&c, &ctx).unwrap();
    assert_eq!(first.cluster_session_id(), 7);
    drop(first); // gone without a close: its session stays open in the log
    let second =
        ClusterClient::connect(&c, &ctx).expect("the earlier session's notice is not the answer");
    assert_eq!(second.cluster_session_id(), 8);
    fake.join().unwrap();
    c.close();
    let _ = std::fs::remove_dir_all(&base);
}

/// A connect request unanswered for a second is asked again (a slow or
/// changing leader); a leader that then answers both opens two sessions. The
/// client takes the first OK and closes the other session at once (a
/// SessionCloseRequest on its ingress). Left open, such sessions counted
/// towards the cluster's session limit until they timed out, and each new
/// term restarted their timeout: a fault run's client was refused
/// ("concurrent session limit") for 28 s after a restart.
#[test]
fn a_session_opened_for_a_second_copy_of_the_connect_request_is_closed_at_once() {
    let (base, driver_dir, _driver) = test_driver("orphan");
    let a = free_port();
    let endpoints = format!("0=localhost:{a}");

    let dir = driver_dir.clone();
    let fake = std::thread::spawn(move || {
        let (c, mut member0) = fake_member(&dir, a);
        let mut assembler = FragmentAssembler::new();
        let requests = [
            next_connect_request(&mut member0, &mut assembler),
            next_connect_request(&mut member0, &mut assembler),
        ];
        let mut egress = c
            .add_exclusive_publication(
                &requests[1].response_channel,
                requests[1].response_stream_id,
            )
            .unwrap();
        // The second copy answered first (session 8), then the first (session 7, the orphan).
        for (session, request) in [(8, &requests[1]), (7, &requests[0])] {
            let ok = session_event(
                session,
                request.correlation_id,
                event_code::OK,
                EXACTLY_ONCE,
            );
            send(&mut egress, &ok);
        }
        let close = loop {
            let m = next_message(&mut member0, &mut assembler);
            if let Ok(close) = SessionCloseRequest::decode(&m) {
                break close;
            }
        };
        assert_eq!((close.cluster_session_id, close.leadership_term_id), (7, 3));
        c.close();
    });

    let c = connect(&driver_dir, "test");
    let mut session = ClusterClient::connect(
        &c,
        &ClusterClientContext {
            ingress_endpoints: endpoints,
            egress_channel: format!("aeron:udp?endpoint=localhost:{}", free_port()),
            message_timeout: Duration::from_secs(30),
            ..ClusterClientContext::default()
        },
    )
    .unwrap();
    assert_eq!(session.cluster_session_id(), 8);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !fake.is_finished() {
        session.poll_egress(|_, _| {}, 10).unwrap();
        assert!(
            Instant::now() < deadline,
            "the orphan session was not closed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    fake.join().unwrap();
    session.close();
    c.close();
    let _ = std::fs::remove_dir_all(&base);
}

/// The outcome of every message is the client's to read: the leader's
/// committed counts (`committed`, never lower than said), the session's
/// numbers (`offered`), and the final count the cluster gives just before
/// a CLOSED (`SessionEnded::messages_committed`): messages 1 to 2 applied,
/// 3 not, and never will be.
#[test]
fn the_client_reads_its_messages_committed_and_the_final_count_at_a_close() {
    let (base, driver_dir, _driver) = test_driver("final-count");
    let a = free_port();
    let endpoints = format!("0=localhost:{a}");
    let egress_channel = format!("aeron:udp?endpoint=localhost:{}", free_port());

    let dir = driver_dir.clone();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let fake = std::thread::spawn(move || {
        let (c, mut member0) = fake_member(&dir, a);
        let mut assembler = FragmentAssembler::new();
        let request = next_connect_request(&mut member0, &mut assembler);
        let mut egress = c
            .add_exclusive_publication(&request.response_channel, request.response_stream_id)
            .unwrap();
        send(
            &mut egress,
            &session_event(7, request.correlation_id, event_code::OK, EXACTLY_ONCE),
        );
        for _ in 0..3 {
            let m = next_message(&mut member0, &mut assembler);
            assert!(SessionMessageHeader::decode(&m).is_ok());
        }
        send(
            &mut egress,
            &session_event(7, 1, event_code::OK, MESSAGES_COMMITTED),
        );
        go_rx.recv().unwrap();
        // A count lower than one said before changes nothing.
        send(
            &mut egress,
            &session_event(7, 0, event_code::OK, MESSAGES_COMMITTED),
        );
        send(
            &mut egress,
            &session_event(7, 2, event_code::OK, MESSAGES_COMMITTED_AT_CLOSE),
        );
        send(
            &mut egress,
            &session_event(7, request.correlation_id, event_code::CLOSED, "TIMEOUT"),
        );
        std::thread::sleep(Duration::from_millis(500));
        c.close();
    });

    let c = connect(&driver_dir, "test");
    let ctx = fake_cluster_context(endpoints, egress_channel);
    let mut session = ClusterClient::connect(&c, &ctx).unwrap();
    assert_eq!((session.committed(), session.offered()), (Some(0), Some(0)));
    for m in [b"a", b"b", b"c"] {
        let deadline = Instant::now() + Duration::from_secs(30);
        while session.offer(m).is_err() {
            assert!(Instant::now() < deadline, "the ingress took nothing");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(session.offered(), Some(3));
    let deadline = Instant::now() + Duration::from_secs(30);
    while session.committed() != Some(1) {
        assert!(Instant::now() < deadline, "no committed count");
        session.poll_egress(|_, _| {}, 10).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(session.in_flight(), 2);
    go_tx.send(()).unwrap();
    let ended = loop {
        assert!(Instant::now() < deadline, "no close");
        if let Err(ended) = session.poll_egress(|_, _| {}, 10) {
            break ended;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(
        (ended.code, ended.detail.as_str(), ended.messages_committed),
        (event_code::CLOSED, "TIMEOUT", Some(2))
    );
    assert_eq!((session.committed(), session.offered()), (Some(2), Some(3)));
    fake.join().unwrap();
    c.close();
    let _ = std::fs::remove_dir_all(&base);
}
