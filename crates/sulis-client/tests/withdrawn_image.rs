//! A subscriber that has not yet heard its image was withdrawn (its process
//! was stopped, or busy) must not read the log again from the start: the
//! driver frees its position counter (the value goes to 0) when it
//! withdraws the image, and position 0 is the same term partition as every
//! third term, full of frames already read.

use std::time::{Duration, Instant};
use sulis_client::{Client, ClientContext, OfferError};
use sulis_driver::{DriverContext, MediaDriver, ThreadingMode};
use sulis_protocol::counters::type_id;

fn driver(name: &str) -> MediaDriver {
    let mut ctx = DriverContext::default();
    ctx.dir = std::env::temp_dir().join(format!("sulis-withdrawn-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&ctx.dir);
    ctx.threading_mode = ThreadingMode::Shared;
    ctx.ipc_term_buffer_length = 64 * 1024;
    ctx.term_buffer_sparse_file = true;
    ctx.dir_delete_on_shutdown = true;
    ctx.timer_interval_ns = 10_000_000;
    MediaDriver::launch(ctx).unwrap()
}

#[test]
fn an_image_whose_position_counter_is_freed_under_it_does_not_read_old_terms_again() {
    let d = driver("freed");
    let c = Client::connect(ClientContext {
        dir: d.dir().to_path_buf(),
        driver_timeout: Duration::from_secs(5),
        name: "t".into(),
        interrupt: None,
    })
    .unwrap();
    let mut sub = c.add_subscription("aeron:ipc", 1).unwrap();
    let mut publication = c.add_exclusive_publication("aeron:ipc", 1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(publication.is_connected() && sub.images().len() == 1) {
        assert!(Instant::now() < deadline, "never connected");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Into the fourth term (partition 0 again), everything read.
    let message = [7u8; 1000];
    let mut received = 0usize;
    let mut sent = 0usize;
    while publication.position() < 3 * 64 * 1024 + 8 * 1024 || received < sent {
        assert!(
            Instant::now() < deadline,
            "stalled at {}",
            publication.position()
        );
        match publication.offer(&message) {
            Ok(_) => sent += 1,
            Err(OfferError::BackPressured | OfferError::AdminAction) => {}
            Err(e) => panic!("{e:?}"),
        }
        received += sub.poll(|_, _| Ok::<(), ()>(()), 16).unwrap();
    }
    let image = sub.images().into_iter().next().unwrap();
    let at = image.position();
    assert_eq!(at, publication.position());
    // What the driver does to the counter when it withdraws the image.
    let counters = c.counters();
    let id = counters
        .find_by_type_id_and_registration_id(type_id::SUBSCRIBER_POSITION, sub.registration_id());
    assert!(id >= 0, "the subscriber position counter");
    counters.counter_ref(id).set_ordered(0);

    let again = image.poll(|_, _| Ok::<(), ()>(()), 100).unwrap();
    assert_eq!(again, 0, "frames of the fourth term read a second time");
    assert_eq!(image.position(), at);
}
