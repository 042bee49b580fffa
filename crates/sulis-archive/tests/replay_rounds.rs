//! One recording replayed many times in a row, each replay checked message
//! by message: a regression test for replays that stopped when a frame did
//! not fit the publication's window (frames longer than the MTU on IPC).
use std::time::{Duration, Instant};
use sulis_archive::{Archive, ArchiveClient, ArchiveClientContext, ArchiveContext};
use sulis_client::{Client, ClientContext, FragmentAssembler, OfferError};
use sulis_driver::{DriverContext, MediaDriver, ThreadingMode};
use sulis_protocol::archive::messages::{recording_signal, source_location};

fn message(i: usize) -> Vec<u8> {
    let len = if i % 97 == 5 { 5000 } else { 16 + i % 300 };
    (0..len).map(|j| (i * 7 + j) as u8).collect()
}

#[test]
fn the_same_recording_replays_whole_every_time() {
    let base = std::env::temp_dir().join(format!("sulis-replay-loop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    // Declared first, dropped last: after the archive and the driver.
    let _cleanup = archive_guard(base.clone());
    let mut ctx = DriverContext::default();
    ctx.dir = base.join("driver");
    ctx.threading_mode = ThreadingMode::Shared;
    ctx.ipc_term_buffer_length = 64 * 1024;
    ctx.term_buffer_sparse_file = true;
    ctx.dir_delete_on_shutdown = true;
    let _driver = MediaDriver::launch(ctx.clone()).unwrap();
    let client = Client::connect(ClientContext {
        dir: ctx.dir.clone(),
        driver_timeout: Duration::from_secs(10),
        name: "t".into(),
        interrupt: None,
    })
    .unwrap();
    let _archive = Archive::launch(ArchiveContext {
        archive_dir: base.join("archive"),
        driver_dir: ctx.dir.clone(),
        segment_file_length: 128 * 1024,
        ..Default::default()
    })
    .unwrap();
    let mut a = ArchiveClient::connect(&client, ArchiveClientContext::default()).unwrap();
    a.start_recording("aeron:ipc", 1001, source_location::LOCAL, false)
        .unwrap();
    let p = client
        .add_publication("aeron:ipc?term-length=64k", 1001)
        .unwrap();
    let id = a
        .await_signal(-1, recording_signal::START)
        .unwrap()
        .recording_id;
    for i in 0..3000 {
        loop {
            match p.offer(&message(i)) {
                Ok(_) => break,
                Err(OfferError::BackPressured | OfferError::AdminAction) => {
                    std::thread::yield_now()
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    let end = p.position();
    while a.get_recording_position(id).unwrap() != end {
        std::thread::sleep(Duration::from_millis(1));
    }
    a.stop_recording("aeron:ipc", 1001).unwrap();
    a.await_signal(id, recording_signal::STOP).unwrap();
    for round in 0..10 {
        let stream = 5000 + round;
        let mut sub = client.add_subscription("aeron:ipc", stream).unwrap();
        a.start_replay(id, 0, -2, "aeron:ipc", stream).unwrap();
        let mut got = 0usize;
        let mut asm = FragmentAssembler::new();
        let mut last_pos = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while got < 3000 {
            if Instant::now() > deadline {
                panic!("round {round}: got {got}, last position {last_pos}, images {:?}, events {:?} errors {:?}", sub.images(), client.take_image_events(), _archive.errors());
            }
            sub.poll(
                |pl, h| {
                    last_pos = h.position();
                    let whole = if FragmentAssembler::is_unfragmented(h) {
                        Some(pl.to_vec())
                    } else {
                        asm.on_fragment(pl, h).map(|m| m.payload)
                    };
                    if let Some(m) = whole {
                        assert_eq!(
                            m,
                            message(got),
                            "round {round} message {got} at {}",
                            h.position()
                        );
                        got += 1;
                    }
                    Ok::<(), ()>(())
                },
                100,
            )
            .unwrap();
        }
        client.take_image_events();
    }
}

/// Removes the test's directory (the driver deletes its own on shutdown).
fn archive_guard(base: std::path::PathBuf) -> impl Drop {
    struct Guard(std::path::PathBuf);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    Guard(base)
}
