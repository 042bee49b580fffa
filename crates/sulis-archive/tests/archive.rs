//! The archive end to end over an embedded driver: a control session over
//! IPC, a recording, listings and positions, replays (bounded, from a
//! position, of a live recording), truncation, purge, restart.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use sulis_archive::{
    Archive, ArchiveClient, ArchiveClientContext, ArchiveContext, ArchiveError,
    ArchiveThreadingMode, Replication,
};
use sulis_client::{Client, ClientContext, OfferError, Subscription};
use sulis_driver::{DriverContext, MediaDriver, ThreadingMode};
use sulis_protocol::archive::messages::{error_code, recording_signal, source_location};

struct Setup {
    mode: ArchiveThreadingMode,
    _driver: MediaDriver,
    client: Client,
    archive_dir: PathBuf,
    driver_dir: PathBuf,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let base =
            std::env::temp_dir().join(format!("sulis-archive-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let mut ctx = DriverContext::default();
        ctx.dir = base.join("driver");
        ctx.threading_mode = ThreadingMode::Shared;
        ctx.ipc_term_buffer_length = 64 * 1024;
        ctx.term_buffer_sparse_file = true;
        ctx.dir_delete_on_shutdown = true;
        ctx.timer_interval_ns = 10_000_000;
        let driver = MediaDriver::launch(ctx.clone()).unwrap();
        let client = Client::connect(ClientContext {
            dir: ctx.dir.clone(),
            driver_timeout: Duration::from_secs(10),
            name: "test".into(),
            interrupt: None,
        })
        .unwrap();
        Setup {
            mode: ArchiveThreadingMode::Shared,
            _driver: driver,
            client,
            archive_dir: base.join("archive"),
            driver_dir: ctx.dir,
        }
    }

    /// The same, with the archive's recorder and replayer on threads of their own.
    fn dedicated(name: &str) -> Setup {
        let mut s = Setup::new(name);
        s.mode = ArchiveThreadingMode::Dedicated;
        s
    }

    fn archive(&self) -> Archive {
        Archive::launch(ArchiveContext {
            archive_dir: self.archive_dir.clone(),
            driver_dir: self.driver_dir.clone(),
            segment_file_length: 128 * 1024,
            threading_mode: self.mode,
            ..ArchiveContext::default()
        })
        .unwrap()
    }

    fn archive_client(&self) -> ArchiveClient {
        ArchiveClient::connect(&self.client, ArchiveClientContext::default()).unwrap()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.archive_dir.parent().unwrap());
    }
}

fn message(i: usize) -> Vec<u8> {
    let len = if i % 97 == 5 { 5000 } else { 16 + i % 300 };
    (0..len).map(|j| (i * 7 + j) as u8).collect()
}

fn publish(p: &sulis_client::Publication, range: std::ops::Range<usize>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in range {
        loop {
            match p.offer(&message(i)) {
                Ok(_) => break,
                Err(
                    OfferError::BackPressured | OfferError::AdminAction | OfferError::NotConnected,
                ) => {
                    assert!(Instant::now() < deadline, "publication stalled at {i}");
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    }
}

/// Reassembled messages from `sub` until `count` arrived.
fn receive(sub: &mut Subscription, count: usize) -> Vec<Vec<u8>> {
    receive_on(sub, count, None)
}

fn receive_on(sub: &mut Subscription, count: usize, client: Option<&Client>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut assembler = sulis_client::FragmentAssembler::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < count {
        assert!(
            Instant::now() < deadline,
            "received {} of {count}; images at {:?}; events {:?}, lapped {:?}",
            out.len(),
            sub.images()
                .iter()
                .map(|i| (i.session_id(), i.position()))
                .collect::<Vec<_>>(),
            client.map(|c| c.take_image_events()),
            client.map(|c| c.lapped_count())
        );
        sub.poll(
            |payload, h| {
                if sulis_client::FragmentAssembler::is_unfragmented(h) {
                    out.push(payload.to_vec());
                } else if let Some(m) = assembler.on_fragment(payload, h) {
                    out.push(m.payload);
                }
                Ok::<(), ()>(())
            },
            100,
        )
        .unwrap();
    }
    out
}

/// Starts recording IPC stream `stream_id` (64 KiB terms) and adds a
/// publication on it; returns the publication and the recording's id.
fn record_live(
    s: &Setup,
    a: &mut ArchiveClient,
    stream_id: i32,
) -> (sulis_client::Publication, i64) {
    a.start_recording("aeron:ipc", stream_id, source_location::LOCAL, false)
        .unwrap();
    let publication = s
        .client
        .add_publication("aeron:ipc?term-length=64k", stream_id)
        .unwrap();
    let id = a
        .await_signal(-1, recording_signal::START)
        .unwrap()
        .recording_id;
    (publication, id)
}

fn await_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn records_lists_and_replays_an_ipc_stream() {
    records_lists_and_replays_an_ipc_stream_on(Setup::new("record"));
}

#[test]
fn records_lists_and_replays_an_ipc_stream_with_dedicated_threads() {
    records_lists_and_replays_an_ipc_stream_on(Setup::dedicated(&format!(
        "{}-dedicated",
        "record"
    )));
}

fn records_lists_and_replays_an_ipc_stream_on(s: Setup) {
    let archive = s.archive();
    let mut a = s.archive_client();
    assert_eq!(a.archive_id(), archive.archive_id());

    let subscription_id = a
        .start_recording("aeron:ipc?alias=ticks", 1001, source_location::LOCAL, false)
        .unwrap();
    let publication = s
        .client
        .add_publication("aeron:ipc?term-length=64k", 1001)
        .unwrap();
    let start = a
        .await_signal(-1, recording_signal::START)
        .unwrap_or_else(|e| panic!("{e}: archive errors {:?}", archive.errors()));
    assert_eq!(start.subscription_id, subscription_id);
    let id = start.recording_id;
    publish(&publication, 0..3000);
    let end = publication.position();
    await_until("recorded", || a.get_recording_position(id).unwrap() == end);
    assert_eq!(a.get_stop_position(id).unwrap(), -1, "still recording");
    assert_eq!(a.get_max_recorded_position(id).unwrap(), end);

    // A second recording of the same stream is refused.
    match a.start_recording("aeron:ipc", 1001, source_location::LOCAL, false) {
        Err(ArchiveError::Archive { code, message }) => {
            assert_eq!(code, error_code::ACTIVE_SUBSCRIPTION);
            assert!(message.contains("recording exists"), "{message}");
        }
        other => panic!("{other:?}"),
    }

    a.stop_recording("aeron:ipc?alias=ticks", 1001).unwrap();
    let stop = a.await_signal(id, recording_signal::STOP).unwrap();
    assert_eq!(stop.position, end);
    assert_eq!(a.get_stop_position(id).unwrap(), end);
    assert_eq!(a.get_recording_position(id).unwrap(), -1);

    let all = a.list_recordings(0, 10).unwrap();
    assert_eq!(all.len(), 1);
    let d = &all[0];
    assert_eq!(
        (
            d.recording_id,
            d.stream_id,
            d.start_position,
            d.stop_position
        ),
        (id, 1001, 0, end)
    );
    assert_eq!(d.stripped_channel, "aeron:ipc?alias=ticks");
    assert_eq!(d.original_channel, "aeron:ipc?alias=ticks");
    assert_eq!(d.term_buffer_length, 64 * 1024);
    assert_eq!(
        a.list_recordings_for_uri(0, 10, "alias=ticks", 1001)
            .unwrap()
            .len(),
        1
    );
    assert!(a
        .list_recordings_for_uri(0, 10, "alias=ticks", 1002)
        .unwrap()
        .is_empty());
    assert_eq!(a.list_recording(id).unwrap().unwrap().stop_position, end);
    assert_eq!(a.list_recording(99).unwrap(), None);
    assert_eq!(
        a.find_last_matching_recording(0, "alias=ticks", 1001, d.session_id)
            .unwrap(),
        id
    );
    assert_eq!(
        a.find_last_matching_recording(0, "alias=ticks", 1001, d.session_id + 1)
            .unwrap(),
        -1
    );
    assert_eq!(
        a.find_last_matching_recording(id + 1, "alias=ticks", 1001, d.session_id)
            .unwrap(),
        -1
    );

    // The whole recording, then a part from a position.
    let mut sub = s.client.add_subscription("aeron:ipc", 2002).unwrap();
    let replay = a.start_replay(id, -1, -2, "aeron:ipc", 2002).unwrap();
    await_until("the replay's image", || !sub.images().is_empty());
    let image = sub.images().into_iter().next().unwrap();
    assert_eq!(image.session_id(), replay as i32);
    let got = receive_on(&mut sub, 3000, Some(&s.client));
    assert!(
        got.iter().enumerate().all(|(i, m)| *m == message(i)),
        "replayed as published"
    );
    await_until("end of replay", || {
        image.is_end_of_stream() || image.is_closed()
    });
    drop(sub);

    let mid = d.start_position;
    let mut sub = s.client.add_subscription("aeron:ipc", 2003).unwrap();
    a.start_replay(id, mid, 4096, "aeron:ipc", 2003).unwrap();
    let mut got_bytes = 0;
    let part = receive(&mut sub, 5);
    for m in &part {
        got_bytes += m.len();
    }
    assert!(got_bytes > 0 && part[0] == message(0));

    // Positions that are not frame starts are refused.
    match a.start_replay(id, 33, 100, "aeron:ipc", 2004) {
        Err(ArchiveError::Archive { code, .. }) => assert_eq!(code, error_code::INVALID_POSITION),
        other => panic!("{other:?}"),
    }
    match a.start_replay(77, 0, 100, "aeron:ipc", 2004) {
        Err(ArchiveError::Archive { code, message }) => {
            assert_eq!(code, error_code::UNKNOWN_RECORDING);
            assert!(message.contains("77"));
        }
        other => panic!("{other:?}"),
    }
    assert!(archive.errors().is_empty(), "{:?}", archive.errors());
}

#[test]
fn a_live_recording_replays_and_follows_then_survives_a_restart_and_can_be_truncated_and_purged() {
    a_live_recording_replays_and_follows_then_survives_a_restart_and_can_be_truncated_and_purged_on(
        Setup::new("live"),
    );
}

#[test]
fn a_live_recording_replays_and_follows_then_survives_a_restart_and_can_be_truncated_and_purged_with_dedicated_threads(
) {
    a_live_recording_replays_and_follows_then_survives_a_restart_and_can_be_truncated_and_purged_on(
        Setup::dedicated(&format!("{}-dedicated", "live")),
    );
}

fn a_live_recording_replays_and_follows_then_survives_a_restart_and_can_be_truncated_and_purged_on(
    s: Setup,
) {
    let mut archive = s.archive();
    let mut a = s.archive_client();
    let (publication, id) = record_live(&s, &mut a, 1001);
    publish(&publication, 0..500);
    // Follow the live recording: what was recorded, then what comes.
    let mut sub = s.client.add_subscription("aeron:ipc", 3001).unwrap();
    a.start_replay(id, 0, -1, "aeron:ipc", 3001).unwrap();
    let first = receive(&mut sub, 500);
    publish(&publication, 500..1500);
    let rest = receive(&mut sub, 1000);
    assert!(first
        .iter()
        .chain(rest.iter())
        .enumerate()
        .all(|(i, m)| *m == message(i)));
    let end = publication.position();
    drop(publication);
    a.await_signal(id, recording_signal::STOP).unwrap();
    drop(sub);
    drop(a);
    archive.close();

    // A new archive on the same directory finds the recording.
    let archive = s.archive();
    let mut a = s.archive_client();
    let d = a.list_recording(id).unwrap().unwrap();
    assert_eq!(d.stop_position, end);
    // Truncate to a frame position in the middle: replays end there.
    let frames = {
        let mut sub = s.client.add_subscription("aeron:ipc", 3002).unwrap();
        a.start_replay(id, 0, -2, "aeron:ipc", 3002).unwrap();
        receive(&mut sub, 1500).len()
    };
    assert_eq!(frames, 1500);
    let cut = 64 * 1024 + 4096; // a frame start? find one: replay positions are frame aligned
    let cut = {
        let mut sub = s.client.add_subscription("aeron:ipc", 3003).unwrap();
        a.start_replay(id, 0, -2, "aeron:ipc", 3003).unwrap();
        let mut position = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while position < cut {
            assert!(Instant::now() < deadline);
            sub.poll(
                |_, h| {
                    position = h.position();
                    Ok::<(), ()>(())
                },
                1,
            )
            .unwrap();
        }
        position
    };
    match a.truncate_recording(id, cut + 8) {
        Err(ArchiveError::Archive { code, .. }) => assert_eq!(code, error_code::INVALID_POSITION),
        other => panic!("{other:?}"),
    }
    a.truncate_recording(id, cut).unwrap();
    a.await_signal(id, recording_signal::DELETE).unwrap();
    assert_eq!(a.get_stop_position(id).unwrap(), cut);
    a.purge_recording(id).unwrap();
    assert_eq!(a.list_recording(id).unwrap(), None);
    let left: Vec<_> = std::fs::read_dir(&s.archive_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".rec"))
        .collect();
    assert!(left.is_empty(), "segment files purged: {left:?}");
    assert!(archive.errors().is_empty(), "{:?}", archive.errors());
}

/// A second archive on the same driver, controlled on IPC stream 110, that
/// replicates over UDP from the first one.
fn destination_archive(s: &Setup) -> (Archive, ArchiveClient) {
    let archive = Archive::launch(ArchiveContext {
        archive_dir: s.archive_dir.with_file_name("archive-dst"),
        driver_dir: s.driver_dir.clone(),
        local_control_stream_id: 110,
        replication_channel: Some("aeron:udp?endpoint=127.0.0.1:0".into()),
        segment_file_length: 128 * 1024,
        ..ArchiveContext::default()
    })
    .unwrap();
    let client = ArchiveClient::connect(
        &s.client,
        ArchiveClientContext {
            control_request_stream_id: 110,
            control_response_stream_id: 120,
            ..ArchiveClientContext::default()
        },
    )
    .unwrap();
    (archive, client)
}

fn from_source(src_recording_id: i64) -> Replication {
    Replication {
        src_recording_id,
        src_control_channel: "aeron:ipc".into(),
        src_control_stream_id: 10,
        ..Replication::default()
    }
}

/// Replays all of `recording_id` from `archive` and checks it message by message.
fn assert_replays(
    s: &Setup,
    archive: &mut ArchiveClient,
    recording_id: i64,
    stream_id: i32,
    count: usize,
) {
    let mut sub = s.client.add_subscription("aeron:ipc", stream_id).unwrap();
    archive
        .start_replay(recording_id, -1, -2, "aeron:ipc", stream_id)
        .unwrap();
    let got = receive(&mut sub, count);
    let bad = got.iter().enumerate().find(|(i, m)| **m != message(*i));
    assert!(bad.is_none(), "message {:?} differs", bad.map(|b| b.0));
}

#[test]
fn replicates_a_stopped_recording_to_another_archive() {
    let s = Setup::new("replicate");
    let source = s.archive();
    let mut a = s.archive_client();
    let (dst, mut b) = destination_archive(&s);

    let (publication, id) = record_live(&s, &mut a, 1001);
    publish(&publication, 0..3000);
    let end = publication.position();
    await_until("recorded", || a.get_recording_position(id).unwrap() == end);
    a.stop_recording("aeron:ipc", 1001).unwrap();
    a.await_signal(id, recording_signal::STOP).unwrap();
    let src = a.list_recording(id).unwrap().unwrap();

    let replication_id = b.replicate(&from_source(id)).unwrap();
    let made = b
        .await_signal(-1, recording_signal::REPLICATE)
        .unwrap_or_else(|e| panic!("{e}: {:?} {:?}", dst.errors(), b.poll_errors()));
    assert_eq!((made.correlation_id, made.position), (replication_id, 0));
    let dst_id = made.recording_id;
    let extended = b.await_signal(dst_id, recording_signal::EXTEND).unwrap();
    assert_eq!(extended.correlation_id, replication_id);
    let sync = b
        .await_signal(dst_id, recording_signal::SYNC)
        .unwrap_or_else(|e| panic!("{e}: {:?} {:?}", dst.errors(), source.errors()));
    assert_eq!(sync.position, end);
    b.await_signal(dst_id, recording_signal::REPLICATE_END)
        .unwrap();

    let d = b.list_recording(dst_id).unwrap().unwrap();
    assert_eq!(
        (d.start_position, d.stop_position, d.stream_id, d.session_id),
        (0, end, 1001, src.session_id)
    );
    assert_eq!(
        (
            d.initial_term_id,
            d.term_buffer_length,
            d.mtu_length,
            d.segment_file_length
        ),
        (
            src.initial_term_id,
            src.term_buffer_length,
            src.mtu_length,
            src.segment_file_length
        )
    );
    assert_eq!(d.stripped_channel, src.stripped_channel);
    assert_replays(&s, &mut b, dst_id, 3003, 3000);

    // Into the same destination again: already in sync, nothing is made.
    let again = b
        .replicate(&Replication {
            dst_recording_id: dst_id,
            ..from_source(id)
        })
        .unwrap();
    let sync = b.await_signal(dst_id, recording_signal::SYNC).unwrap();
    assert_eq!((sync.correlation_id, sync.position), (again, end));
    b.await_signal(dst_id, recording_signal::REPLICATE_END)
        .unwrap();
    assert_eq!(b.list_recordings(0, 10).unwrap().len(), 1);

    // An unknown source recording is an error naming it.
    let bad = b.replicate(&from_source(77)).unwrap();
    b.await_signal(-1, recording_signal::REPLICATE_END).unwrap();
    let errors = b.poll_errors();
    assert!(
        errors.iter().any(|(k, code, m)| *k == bad
            && *code == error_code::UNKNOWN_RECORDING
            && m.contains("77")),
        "{errors:?}"
    );
    match b.stop_replication(12345) {
        Err(ArchiveError::Archive { code, .. }) => {
            assert_eq!(code, error_code::UNKNOWN_REPLICATION)
        }
        other => panic!("{other:?}"),
    }
    // The first replication's worker is done and nothing else was logged.
    assert_eq!(dst.errors().len(), 1, "{:?}", dst.errors());
    assert!(source.errors().is_empty(), "{:?}", source.errors());
}

#[test]
fn replication_follows_a_live_recording_until_it_stops_and_can_be_stopped() {
    let s = Setup::new("replicate-live");
    let _source = s.archive();
    let mut a = s.archive_client();
    let (dst, mut b) = destination_archive(&s);

    let (publication, id) = record_live(&s, &mut a, 1002);
    publish(&publication, 0..1000);

    b.replicate(&from_source(id)).unwrap();
    let dst_id = b
        .await_signal(-1, recording_signal::REPLICATE)
        .unwrap()
        .recording_id;
    b.await_signal(dst_id, recording_signal::EXTEND)
        .unwrap_or_else(|e| panic!("{e}: {:?}", dst.errors()));
    publish(&publication, 1000..2500);
    let end = publication.position();
    await_until("replicated live", || {
        b.get_recording_position(dst_id).unwrap() == end
    });
    // The source stops: so does the copy, at the same place.
    a.stop_recording("aeron:ipc", 1002).unwrap();
    let stop = b.await_signal(dst_id, recording_signal::STOP).unwrap();
    assert_eq!(stop.position, end);
    b.await_signal(dst_id, recording_signal::REPLICATE_END)
        .unwrap();
    assert_replays(&s, &mut b, dst_id, 3004, 2500);

    // A replication stopped by request ends its recording where it is.
    let (p2, id2) = record_live(&s, &mut a, 1005);
    publish(&p2, 0..100);
    let r2 = b.replicate(&from_source(id2)).unwrap();
    let dst2 = b
        .await_signal(-1, recording_signal::REPLICATE)
        .unwrap()
        .recording_id;
    b.await_signal(dst2, recording_signal::EXTEND).unwrap();
    b.stop_replication(r2).unwrap();
    b.await_signal(dst2, recording_signal::STOP).unwrap();
    b.await_signal(dst2, recording_signal::REPLICATE_END)
        .unwrap();
    assert_ne!(b.get_stop_position(dst2).unwrap(), -1);
    assert!(dst.errors().is_empty(), "{:?}", dst.errors());
}

#[test]
fn a_bounded_replay_follows_its_limit_counter_and_ends_where_it_closed() {
    let s = Setup::new("bounded");
    let archive = s.archive();
    let mut a = s.archive_client();
    let (publication, id) = record_live(&s, &mut a, 1001);
    let mut ends = Vec::new();
    for i in 0..3000 {
        loop {
            match publication.offer(&message(i)) {
                Ok(p) => break ends.push(p),
                Err(OfferError::BackPressured | OfferError::AdminAction) => {
                    std::thread::yield_now()
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    let end = publication.position();
    await_until("recorded", || a.get_recording_position(id).unwrap() == end);
    a.stop_recording("aeron:ipc", 1001).unwrap();

    let limit = s.client.add_counter(1001, &[], "replay limit").unwrap();
    limit.set(ends[999]);
    let mut sub = s.client.add_subscription("aeron:ipc", 2001).unwrap();
    a.start_bounded_replay(id, 0, i64::MAX, limit.id(), "aeron:ipc", 2001)
        .unwrap();
    let first = receive(&mut sub, 1000);
    assert!(first.iter().enumerate().all(|(i, m)| *m == message(i)));
    // Nothing past the counter, until it moves.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(sub.poll(|_, _| Ok::<(), ()>(()), 10).unwrap(), 0);
    limit.set(ends[1999]);
    let second = receive(&mut sub, 1000);
    assert!(second
        .iter()
        .enumerate()
        .all(|(i, m)| *m == message(i + 1000)));
    // The counter closes: the replay ends where it stood.
    limit.close();
    let image = sub.images().into_iter().next().unwrap();
    await_until("end of the replay", || {
        image.is_end_of_stream() || image.is_closed()
    });
    assert_eq!(image.position(), ends[1999]);

    match a.start_bounded_replay(id, 0, i64::MAX, 9999, "aeron:ipc", 2002) {
        Err(ArchiveError::Archive { message, .. }) => {
            assert!(message.contains("limit counter id 9999"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(archive.errors().is_empty(), "{:?}", archive.errors());
}

#[test]
fn replication_merges_with_the_live_stream_and_goes_on_recording_it() {
    replication_merges_with_the_live_stream_and_goes_on_recording_it_on(Setup::new(
        "replicate-merge",
    ));
}

#[test]
fn replication_merges_with_the_live_stream_and_goes_on_recording_it_with_dedicated_threads() {
    replication_merges_with_the_live_stream_and_goes_on_recording_it_on(Setup::dedicated(
        &format!("{}-dedicated", "replicate-merge"),
    ));
}

fn replication_merges_with_the_live_stream_and_goes_on_recording_it_on(s: Setup) {
    let _source = s.archive();
    let mut a = s.archive_client();
    let (dst, mut b) = destination_archive(&s);

    let (publication, id) = record_live(&s, &mut a, 1006);
    publish(&publication, 0..2000);

    let replication_id = b
        .replicate(&Replication {
            live_destination: "aeron:ipc".into(),
            ..from_source(id)
        })
        .unwrap();
    let dst_id = b
        .await_signal(-1, recording_signal::REPLICATE)
        .unwrap()
        .recording_id;
    // Publishing goes on while the copy catches up and merges.
    let mut next = 2000;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut signals = Vec::new();
    while !signals.iter().any(
        |s: &sulis_protocol::archive::messages::RecordingSignalEvent| {
            s.signal == recording_signal::REPLICATE_END
        },
    ) {
        assert!(
            Instant::now() < deadline,
            "no MERGE; {signals:?} {:?}",
            dst.errors()
        );
        publish(&publication, next..next + 20);
        next += 20;
        signals.extend(b.poll_signals());
    }
    let kinds: Vec<i32> = signals.iter().map(|s| s.signal).collect();
    let merge = signals
        .iter()
        .find(|s| s.signal == recording_signal::MERGE)
        .unwrap_or_else(|| panic!("no MERGE before REPLICATE_END: {kinds:?}"));
    assert_eq!(
        (merge.recording_id, merge.correlation_id),
        (dst_id, replication_id)
    );
    assert!(!kinds.contains(&recording_signal::STOP), "{kinds:?}");
    publish(&publication, next..next + 500);
    next += 500;
    let end = publication.position();
    await_until("the merged copy to record live", || {
        b.get_recording_position(dst_id).unwrap() == end
    });
    // The copy records the live stream itself now: the source may stop.
    a.stop_recording("aeron:ipc", 1006).unwrap();
    publish(&publication, next..next + 100);
    next += 100;
    let end = publication.position();
    await_until("the copy to go on", || {
        b.get_recording_position(dst_id).unwrap() == end
    });
    publication.close().unwrap();
    assert_eq!(
        b.await_signal(dst_id, recording_signal::STOP)
            .unwrap()
            .position,
        end
    );
    assert_replays(&s, &mut b, dst_id, 3006, next);
    assert!(dst.errors().is_empty(), "{:?}", dst.errors());
}

/// A catalog of many recordings listed through the client: whole, in
/// order, and a slice from the middle, a batch per duty cycle.
#[test]
fn lists_a_large_catalog_whole_and_in_slices() {
    const N: i64 = 20_000;
    let s = Setup::new("many");
    std::fs::create_dir_all(&s.archive_dir).unwrap();
    {
        let mut c = sulis_archive::catalog::Catalog::open(&s.archive_dir, 1 << 20, 0).unwrap();
        for i in 0..N {
            c.add_recording(sulis_protocol::archive::messages::RecordingDescriptor {
                start_position: 0,
                stop_position: 1024,
                initial_term_id: 1,
                segment_file_length: 1 << 20,
                term_buffer_length: 64 * 1024,
                mtu_length: 1408,
                session_id: i as i32,
                stream_id: 1001 + (i % 3) as i32,
                stripped_channel: format!("aeron:udp?endpoint=localhost:{}", 40000 + i % 7),
                original_channel: "aeron:udp?endpoint=localhost:40123|alias=many".into(),
                source_identity: "127.0.0.1:55555".into(),
                ..Default::default()
            })
            .unwrap();
        }
    }
    let _archive = s.archive();
    let mut a = s.archive_client();
    let started = Instant::now();
    let all = a.list_recordings(0, i32::MAX).unwrap();
    let took = started.elapsed();
    assert!(
        all.iter().map(|d| d.recording_id).eq(0..N),
        "every recording once, in order"
    );
    assert!(all.iter().all(|d| d.session_id as i64 == d.recording_id));
    let slice = a.list_recordings(12_345, 3_000).unwrap();
    assert!(slice.iter().map(|d| d.recording_id).eq(12_345..15_345));
    let tail = a.list_recordings(N - 5, 100).unwrap();
    assert!(tail.iter().map(|d| d.recording_id).eq(N - 5..N));
    let found = a
        .list_recordings_for_uri(10_000, 1_000, "localhost:40003", 1002)
        .unwrap();
    let expected = (10_000..N).filter(|i| i % 3 == 1 && i % 7 == 3).take(1_000);
    assert!(found.iter().map(|d| d.recording_id).eq(expected));
    assert_eq!(
        a.list_recording(N / 2).unwrap().unwrap().recording_id,
        N / 2
    );
    assert_eq!(
        a.find_last_matching_recording(0, "localhost:40003", 1002, 19_981)
            .unwrap(),
        19_981
    );
    eprintln!("{N} recordings listed through the client in {took:?}");
}

/// An authoriser with a bug: it panics on the first request it is asked about.
struct Panics;

impl sulis_archive::auth::Authoriser for Panics {
    fn is_authorised(&mut self, _: &[u8], _: u16, request: &str) -> bool {
        panic!("a bug in the authoriser, asked about {request}");
    }
}

#[test]
fn an_archive_whose_thread_died_says_so() {
    let s = Setup::new("dies");
    let archive = Archive::launch_with(
        ArchiveContext {
            archive_dir: s.archive_dir.clone(),
            driver_dir: s.driver_dir.clone(),
            ..ArchiveContext::default()
        },
        Box::new(Panics),
    )
    .unwrap();
    assert!(archive.is_running());
    let ctx = ArchiveClientContext {
        message_timeout: Duration::from_millis(500),
        ..ArchiveClientContext::default()
    };
    // Its first request after the connect (the archive id) meets the bug.
    assert!(
        ArchiveClient::connect(&s.client, ctx).is_err(),
        "nobody answers"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while archive.is_running() {
        assert!(
            Instant::now() < deadline,
            "a dead archive thread reported as running"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let errors = archive.errors();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("the archive thread died") && e.contains("a bug in the authoriser")),
        "{errors:?}"
    );
}
