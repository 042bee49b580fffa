//! What an archive needs of the client: reading an image block by block
//! (`Image::block_poll`), publishing those blocks again frame for frame
//! (`ExclusivePublication::offer_block`), and counters of its own
//! (`Client::add_counter`).

use std::time::{Duration, Instant};
use sulis_client::{Client, ClientContext, OfferError};
use sulis_driver::{DriverContext, MediaDriver, ThreadingMode};

fn driver(name: &str) -> MediaDriver {
    let mut ctx = DriverContext::default();
    ctx.dir = std::env::temp_dir().join(format!("sulis-blocks-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&ctx.dir);
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

/// (payload, flags, reserved value) of every fragment, in order.
type Fragments = Vec<(Vec<u8>, u8, i64)>;

#[test]
fn blocks_read_from_an_image_republish_the_same_fragments_across_terms() {
    let d = driver("republish");
    let c = client(&d);
    // Two subscribers of the source: one reads it as a user would, the
    // other hands over blocks (each has its own position).
    let mut source_sub = c.add_subscription("aeron:ipc", 1).unwrap();
    let mut block_sub = c.add_subscription("aeron:ipc", 1).unwrap();
    let mut source = c.add_exclusive_publication("aeron:ipc", 1).unwrap();
    let mut copy_sub = c.add_subscription("aeron:ipc", 2).unwrap();
    let mut copy = c.add_exclusive_publication("aeron:ipc", 2).unwrap();
    await_until("connected", || source.is_connected() && copy.is_connected());

    // Small and fragmented messages with reserved values, over ~5 terms.
    let mut messages = Vec::new();
    for i in 0..1500u32 {
        let len = if i % 50 == 7 {
            3000
        } else {
            20 + (i as usize * 37) % 400
        };
        messages.push(
            (0..len)
                .map(|j| (i as usize + j) as u8)
                .collect::<Vec<u8>>(),
        );
    }
    let mut sent = 0;
    let mut source_fragments: Fragments = Vec::new();
    let mut copy_fragments: Fragments = Vec::new();
    let mut blocks = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let caught_up = sent == messages.len()
            && source_sub
                .images()
                .iter()
                .all(|i| i.position() == source.position())
            && copy.position() == source.position()
            && copy_sub
                .images()
                .iter()
                .all(|i| i.position() == copy.position());
        if caught_up {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stalled: sent {sent}, {} vs {} fragments",
            source_fragments.len(),
            copy_fragments.len()
        );
        if sent < messages.len() {
            match source.offer_with(&messages[sent], Some(sent as i64 * 3)) {
                Ok(_) => sent += 1,
                Err(OfferError::BackPressured | OfferError::AdminAction) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
        // The reference: what a subscriber of the source sees.
        source_sub
            .poll(
                |payload, h| {
                    source_fragments.push((payload.to_vec(), h.flags(), h.reserved_value()));
                    Ok::<(), ()>(())
                },
                10,
            )
            .unwrap();
        // The copy: blocks of the image, republished as they are.
        let image = block_sub.images().into_iter().next();
        if let Some(image) = image {
            let mut pending = Vec::new();
            image.block_poll(4096, |block, _| pending.push(block.to_vec()));
            for block in pending {
                loop {
                    match copy.offer_block(&block) {
                        Ok(_) => break,
                        Err(OfferError::BackPressured) => {
                            copy_sub
                                .poll(
                                    |p, h| {
                                        copy_fragments.push((
                                            p.to_vec(),
                                            h.flags(),
                                            h.reserved_value(),
                                        ));
                                        Ok::<(), ()>(())
                                    },
                                    100,
                                )
                                .unwrap();
                        }
                        Err(e) => panic!("offer_block: {e:?}"),
                    }
                }
                blocks += 1;
            }
        }
        copy_sub
            .poll(
                |p, h| {
                    copy_fragments.push((p.to_vec(), h.flags(), h.reserved_value()));
                    Ok::<(), ()>(())
                },
                100,
            )
            .unwrap();
    }
    assert!(blocks > 5);
    assert!(source.position() > 4 * 64 * 1024, "several terms");
    assert_eq!(copy_fragments.len(), source_fragments.len());
    assert!(
        copy_fragments == source_fragments,
        "the same fragments, flags and reserved values"
    );
    assert_eq!(copy.position(), source.position(), "the same positions");
}

#[test]
fn offer_block_refuses_a_block_that_crosses_the_term_end() {
    let d = driver("cross");
    let c = client(&d);
    let _sub = c.add_subscription("aeron:ipc", 3).unwrap();
    let mut p = c.add_exclusive_publication("aeron:ipc", 3).unwrap();
    await_until("connected", || p.is_connected());
    let block = vec![0u8; 64 * 1024 + 32];
    match p.offer_block(&block) {
        Err(OfferError::MessageTooLong { length, max }) => {
            assert_eq!((length, max), (65568, 65536))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn counters_added_by_a_client_show_in_the_cnc_until_closed() {
    let d = driver("counter");
    let c = client(&d);
    let key = sulis_protocol::counters::recording_position_key(4, 7, "aeron:ipc", 99, 0);
    let counter = c
        .add_counter(100, &key, "rec-pos: 4 7 1 aeron:ipc - archiveId=99")
        .unwrap();
    counter.set(4096);
    let reader = c.counters();
    let mut found = Vec::new();
    reader.for_each(|id, type_id, k, label| {
        if type_id == 100 {
            found.push((id, k.to_vec(), label.to_string()));
        }
    });
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, counter.id());
    assert_eq!(&found[0].1[..key.len()], &key[..]);
    assert_eq!(found[0].2, "rec-pos: 4 7 1 aeron:ipc - archiveId=99");
    assert_eq!(reader.counter_value(counter.id()), 4096);
    counter.close();
    await_until("freed", || {
        let mut any = false;
        reader.for_each(|_, t, _, _| any |= t == 100);
        !any
    });
    assert!(c.add_counter(100, &[0u8; 200], "too long a key").is_err());
}
