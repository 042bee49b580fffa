//! End-to-end IPC tests: an embedded driver in a temp dir, a client, publications and subscriptions.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use sulis_client::{offer_code, Client, ClientContext, ControlledAction, OfferError};
use sulis_driver::{DriverContext, MediaDriver, ThreadingMode};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sulis-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn driver(name: &str) -> MediaDriver {
    let mut ctx = DriverContext::default();
    ctx.dir = temp_dir(name);
    ctx.threading_mode = ThreadingMode::Shared;
    ctx.ipc_term_buffer_length = 64 * 1024;
    ctx.term_buffer_sparse_file = true;
    ctx.dir_delete_on_shutdown = true;
    ctx.timer_interval_ns = 10_000_000;
    MediaDriver::launch(ctx).unwrap()
}

fn client(d: &MediaDriver) -> Client {
    Client::connect(ClientContext {
        dir: d.dir().to_path_buf(),
        driver_timeout: Duration::from_secs(5),
        name: "t".into(),
        interrupt: None,
    })
    .unwrap()
}

fn await_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn should_exchange_messages_across_many_term_rotations() {
    let d = driver("rotate");
    let c = client(&d);
    let mut sub = c.add_subscription("aeron:ipc", 10).unwrap();
    let publication = c.add_publication("aeron:ipc", 10).unwrap();
    await_until("connection", || publication.is_connected());
    let total = 20_000u32; // 20k × 64 B = ~20 terms of 64 KiB
    let mut sent = 0u32;
    let mut received = 0u32;
    while received < total {
        if sent < total {
            let mut msg = [0u8; 20];
            msg[..4].copy_from_slice(&sent.to_le_bytes());
            match publication.offer(&msg) {
                Ok(_) => sent += 1,
                Err(OfferError::BackPressured) | Err(OfferError::AdminAction) => {}
                Err(e) => panic!("offer failed: {e:?}"),
            }
        }
        sub.poll(
            |payload, header| {
                assert_eq!(
                    u32::from_le_bytes(payload[..4].try_into().unwrap()),
                    received
                );
                assert_eq!(header.stream_id(), 10);
                received += 1;
                Ok::<(), ()>(())
            },
            10,
        )
        .unwrap();
    }
    assert_eq!(received, total);
}

#[test]
fn should_report_not_connected_then_back_pressure() {
    let d = driver("bp");
    let c = client(&d);
    let mut publication = c.add_exclusive_publication("aeron:ipc", 11).unwrap();
    assert_eq!(
        publication.offer(b"x").unwrap_err(),
        OfferError::NotConnected
    );
    assert_eq!(
        OfferError::NotConnected.code(),
        Some(offer_code::NOT_CONNECTED)
    );
    let _sub = c.add_subscription("aeron:ipc", 11).unwrap();
    await_until("connection", || publication.is_connected());
    let mut accepted = 0;
    loop {
        match publication.offer(&[0u8; 1000]) {
            Ok(_) => accepted += 1,
            Err(OfferError::AdminAction) => {}
            Err(OfferError::BackPressured) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    // window = term/2 = 32 KiB → about 31 messages of 1 KiB + header
    assert!((25..=33).contains(&accepted), "accepted {accepted}");
}

#[test]
fn should_fragment_and_reject_oversized_messages() {
    let d = driver("frag");
    let c = client(&d);
    let mut sub = c.add_subscription("aeron:ipc", 12).unwrap();
    let publication = c.add_publication("aeron:ipc?term-length=1m", 12).unwrap();
    await_until("connection", || publication.is_connected());
    let max = publication.max_message_length();
    assert_eq!(max, 128 * 1024);
    let msg: Vec<u8> = (0..max).map(|i| (i % 251) as u8).collect();
    loop {
        match publication.offer(&msg) {
            Ok(_) => break,
            Err(OfferError::AdminAction) => continue,
            Err(e) => panic!("{e:?}"),
        }
    }
    let err = publication.offer(&vec![0u8; max + 1]).unwrap_err();
    assert_eq!(
        err,
        OfferError::MessageTooLong {
            length: max + 1,
            max
        }
    );
    let mut assembled = Vec::new();
    let mut fragments = 0;
    await_until("all fragments", || {
        sub.poll(
            |p, h| {
                fragments += 1;
                if h.flags() & 0x80 != 0 {
                    assembled.clear();
                }
                assembled.extend_from_slice(p);
                Ok::<(), ()>(())
            },
            1000,
        )
        .unwrap();
        assembled.len() == max
    });
    assert_eq!(assembled, msg);
    assert_eq!(fragments, max.div_ceil(1376));
}

#[test]
fn should_honour_controlled_poll_actions() {
    let d = driver("ctl");
    let c = client(&d);
    let mut sub = c.add_subscription("aeron:ipc", 13).unwrap();
    let mut publication = c.add_exclusive_publication("aeron:ipc", 13).unwrap();
    await_until("connection", || publication.is_connected());
    for i in 0..5u8 {
        publication.offer(&[i]).unwrap();
    }
    await_until("image", || sub.image_count() == 1);
    // ABORT leaves the fragment in place
    let n = sub
        .controlled_poll(|_, _| Ok::<_, ()>(ControlledAction::Abort), 10)
        .unwrap();
    assert_eq!(n, 0);
    // BREAK consumes one and stops
    let mut seen = vec![];
    sub.controlled_poll(
        |p, _| {
            seen.push(p[0]);
            Ok::<_, ()>(ControlledAction::Break)
        },
        10,
    )
    .unwrap();
    assert_eq!(seen, vec![0]);
    // COMMIT/CONTINUE consume the rest
    sub.controlled_poll(
        |p, _| {
            seen.push(p[0]);
            Ok::<_, ()>(if p[0] % 2 == 0 {
                ControlledAction::Commit
            } else {
                ControlledAction::Continue
            })
        },
        10,
    )
    .unwrap();
    assert_eq!(seen, vec![0, 1, 2, 3, 4]);
    let image = &sub.images()[0];
    assert_eq!(image.position(), publication.position());
}

#[test]
fn should_share_one_session_between_concurrent_publications() {
    let d = driver("share");
    let c = client(&d);
    let a = c.add_publication("aeron:ipc", 14).unwrap();
    let b = c.add_publication("aeron:ipc", 14).unwrap();
    assert_eq!(a.session_id(), b.session_id());
    assert_eq!(a.original_registration_id(), b.original_registration_id());
    let x = c.add_exclusive_publication("aeron:ipc", 14).unwrap();
    assert_ne!(x.session_id(), a.session_id());
    let err = c
        .add_publication("aeron:ipc?term-length=100", 14)
        .err()
        .unwrap();
    assert!(err.to_string().contains("term-length=100"), "{err}");
}

#[test]
fn close_reports_an_interrupt_while_the_driver_does_not_answer() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use sulis_client::{ClientError, Interrupt};

    let mut ctx = DriverContext::default();
    ctx.dir = temp_dir("close-interrupt");
    ctx.threading_mode = ThreadingMode::Invoker;
    ctx.ipc_term_buffer_length = 64 * 1024;
    ctx.term_buffer_sparse_file = true;
    ctx.dir_delete_on_shutdown = true;
    let mut d = MediaDriver::launch(ctx).unwrap();
    // The driver runs only while `run` is set: clearing it stops the driver
    // as SIGSTOP would.
    let run = Arc::new(AtomicBool::new(true));
    let run_driver = |mut d: MediaDriver, run: Arc<AtomicBool>| {
        std::thread::spawn(move || {
            while run.load(Ordering::Acquire) {
                if d.do_work() == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            d
        })
    };
    d.do_work();
    let dir = d.dir().to_path_buf();
    let worker = run_driver(d, run.clone());
    let fire = Arc::new(AtomicBool::new(false));
    let f = fire.clone();
    let c = Client::connect(ClientContext {
        dir,
        driver_timeout: Duration::from_secs(30),
        name: "t".into(),
        interrupt: Some(Interrupt(Arc::new(move || f.load(Ordering::Acquire)))),
    })
    .unwrap();
    let publication = c.add_publication("aeron:ipc", 15).unwrap();
    let exclusive = c.add_exclusive_publication("aeron:ipc", 15).unwrap();
    let mut sub = c.add_subscription("aeron:ipc", 15).unwrap();
    run.store(false, Ordering::Release);
    let mut d = worker.join().unwrap();

    fire.store(true, Ordering::Release);
    let start = Instant::now();
    assert!(matches!(
        publication.close(),
        Err(ClientError::Interrupted(_))
    ));
    assert!(matches!(
        exclusive.close(),
        Err(ClientError::Interrupted(_))
    ));
    assert!(matches!(sub.close(), Err(ClientError::Interrupted(_))));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "not the driver timeout (30 s)"
    );
    assert!(publication.is_closed() && exclusive.is_closed() && sub.is_closed());
    // Closed on the client's side: a second close has nothing to wait for.
    assert!(publication.close().is_ok() && sub.close().is_ok());
    assert!(c.check().is_ok(), "an interrupt does not fail the client");
    d.do_work();
    d.close();
}
