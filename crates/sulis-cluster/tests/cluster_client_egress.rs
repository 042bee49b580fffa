//! The client's egress poll when the handler stops it (a Python handler that
//! raised): the message it stopped on counts as delivered, and the session's
//! later messages, already read from the egress, wait in order for the next
//! poll instead of being dropped; a batched poll takes them, and when the
//! session ends it hands over the messages before the end, then reports
//! the end. A fake leader (a plain subscription on the ingress endpoint and
//! a publication to the client's IPC egress, on one embedded driver) opens
//! the session and sends three messages at once, then one and the close.

mod common;

use common::{connect, free_port, launch_driver};

use std::time::{Duration, Instant};
use sulis_client::FragmentAssembler;
use sulis_cluster::client::cluster_client::{ClusterClient, ClusterClientContext};
use sulis_cluster::client::session_messages::SessionMessages;
use sulis_protocol::cluster::messages::{
    event_code, SessionConnectRequest, SessionEvent, SessionMessageHeader,
};

#[test]
fn a_stopped_poll_keeps_the_later_messages_for_the_next() {
    let base = std::env::temp_dir().join(format!("sulis-egress-stop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let driver_dir = base.join("driver");
    let _driver = launch_driver(driver_dir.clone());
    let port = free_port();
    // Client to fake: the session is open, then: done. Fake to client: the
    // three messages were offered (on IPC they are in the egress log then).
    let (open_tx, open_rx) = std::sync::mpsc::channel();
    let (sent_tx, sent_rx) = std::sync::mpsc::channel();

    let dir = driver_dir.clone();
    let fake = std::thread::spawn(move || {
        let c = connect(&dir, "fake-leader");
        let mut ingress = c
            .add_subscription(&format!("aeron:udp?endpoint=localhost:{port}"), 101)
            .unwrap();
        let mut assembler = FragmentAssembler::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let request = loop {
            let mut got = None;
            ingress
                .poll(
                    |payload, header| -> Result<(), ()> {
                        if let Some(m) = assembler.on_fragment(payload, header) {
                            got = SessionConnectRequest::decode(&m.payload).ok();
                        }
                        Ok(())
                    },
                    10,
                )
                .unwrap();
            if let Some(r) = got {
                break r;
            }
            assert!(Instant::now() < deadline, "no connect request");
            std::thread::sleep(Duration::from_micros(200));
        };
        let mut egress = c
            .add_exclusive_publication(&request.response_channel, request.response_stream_id)
            .unwrap();
        let mut send = |m: Vec<u8>| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while egress.offer(&m).is_err() {
                assert!(Instant::now() < deadline, "egress took nothing");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        send(
            SessionEvent {
                cluster_session_id: 5,
                correlation_id: request.correlation_id,
                leadership_term_id: 1,
                leader_member_id: 0,
                code: event_code::OK,
                version: 0,
                leader_heartbeat_timeout_ns: 10_000_000_000,
                detail: String::new(),
            }
            .encode(),
        );
        // Wait for the session to be open before sending its messages.
        open_rx.recv().unwrap();
        let message = |timestamp: i64, body: &[u8]| {
            let mut m = SessionMessageHeader {
                leadership_term_id: 1,
                cluster_session_id: 5,
                timestamp,
            }
            .encode();
            m.extend_from_slice(body);
            m
        };
        for (i, body) in [b"a", b"b", b"c"].iter().enumerate() {
            send(message(i as i64, *body));
        }
        sent_tx.send(()).unwrap();
        open_rx.recv().unwrap();
        // One more message, and the session's end right behind it.
        send(message(3, b"d"));
        send(
            SessionEvent {
                cluster_session_id: 5,
                correlation_id: 0,
                leadership_term_id: 1,
                leader_member_id: 0,
                code: event_code::CLOSED,
                version: 0,
                leader_heartbeat_timeout_ns: 10_000_000_000,
                detail: "SERVICE_ACTION".into(),
            }
            .encode(),
        );
        sent_tx.send(()).unwrap();
        open_rx.recv().unwrap();
        c.close();
    });

    let c = connect(&driver_dir, "test");
    let mut session = ClusterClient::connect(
        &c,
        &ClusterClientContext {
            ingress_endpoints: format!("0=localhost:{port}"),
            egress_channel: "aeron:ipc".into(),
            message_timeout: Duration::from_secs(10),
            ..ClusterClientContext::default()
        },
    )
    .unwrap();
    assert_eq!(session.cluster_session_id(), 5);
    // The fake sends the three messages; a poll that is handed the first
    // stops there, the others already in the egress log behind it.
    open_tx.send(()).unwrap();
    sent_rx.recv().unwrap();
    let mut first = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while first.is_empty() {
        session
            .poll_egress_controlled(
                |t, p| {
                    first.push((t, p.to_vec()));
                    false
                },
                10,
            )
            .unwrap();
        assert!(Instant::now() < deadline, "no message from the fake leader");
    }
    assert_eq!(
        first,
        vec![(0, b"a".to_vec())],
        "one message taken, then stopped"
    );
    // The rest, already read, in one batch: columns per message.
    let mut rest = SessionMessages::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while rest.len() < 2 {
        session.poll_egress_batch(&mut rest, 10).unwrap();
        assert!(
            Instant::now() < deadline,
            "the later messages were lost: {rest:?}"
        );
    }
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert_eq!((rest.payload(0), rest.payload(1)), (&b"b"[..], &b"c"[..]));
    assert_eq!(rest.session_ids, [5, 5]);
    assert_eq!(rest.timestamps, [1, 2]);
    assert!(
        0 < rest.positions[0] && rest.positions[0] < rest.positions[1],
        "egress positions after each: {:?}",
        rest.positions
    );
    // A message and the end: the message first, with the end.
    open_tx.send(()).unwrap();
    sent_rx.recv().unwrap();
    let mut last = SessionMessages::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let ended = loop {
        if let Err(ended) = session.poll_egress_batch(&mut last, 10) {
            break ended;
        }
        assert!(Instant::now() < deadline, "no end: {last:?}");
    };
    assert_eq!(
        (ended.code, ended.detail.as_str()),
        (event_code::CLOSED, "SERVICE_ACTION")
    );
    assert_eq!((last.len(), last.payload(0)), (1, &b"d"[..]));
    assert!(last.positions[0] > rest.positions[1]);
    let mut after = SessionMessages::default();
    assert!(
        session.poll_egress_batch(&mut after, 10).is_err() && after.is_empty(),
        "the end is kept"
    );
    open_tx.send(()).unwrap();
    fake.join().unwrap();
    session.close();
    c.close();
    let _ = std::fs::remove_dir_all(&base);
}
