//! Writing and reading snapshots through the member's own archive (the I/O
//! half of Aeron's `SnapshotTaker` and of its snapshot loaders): a snapshot
//! is an IPC exclusive publication the local archive records; it is whole
//! once the recording holds every byte published, and only then does its
//! recording id go anywhere (a ServiceAck, the recording log). Reading one
//! back replays the recording and hands over its messages, reassembled.
//! The BEGIN and END markers around every snapshot, the module's and the
//! services', are made here too (Aeron's `SnapshotTaker.markBegin`/`markEnd`).

use std::time::{Duration, Instant};
use sulis_archive::client::ArchiveClient;
use sulis_client::{Client, ExclusivePublication, FragmentAssembler};
use sulis_protocol::archive::messages::source_location;
use sulis_protocol::cluster::messages::SnapshotMarker;
use sulis_protocol::counters::{parse_recording_position_key, RecordingPositionKey};

/// SnapshotMarker.type_id of a consensus module's snapshot.
pub const CONSENSUS_MODULE_SNAPSHOT_TYPE_ID: i64 = 1;
/// SnapshotMarker.type_id of a service's snapshot.
pub const SERVICE_SNAPSHOT_TYPE_ID: i64 = 2;

/// Where a snapshot stands, from its BEGIN marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotMark {
    /// The log position it is of.
    pub log_position: i64,
    /// The term of that position.
    pub leadership_term_id: i64,
    /// The cluster clock's unit.
    pub time_unit: i32,
    /// The application version that wrote it.
    pub app_version: i32,
}

/// A snapshot marker's message.
pub fn marker(type_id: i64, mark: i32, at: &SnapshotMark) -> Vec<u8> {
    SnapshotMarker {
        type_id,
        log_position: at.log_position,
        leadership_term_id: at.leadership_term_id,
        index: 0,
        mark,
        time_unit: at.time_unit,
        app_version: at.app_version,
    }
    .encode()
}

/// Counter type of the archive's recording position (`rec-pos`).
pub const RECORDING_POSITION_TYPE_ID: i32 = 100;

/// The archive's recording-position counter of the recording of
/// `session_id`: (counter id, its key: the recording id, the archive's
/// sync level for it).
pub fn find_recording_counter(
    client: &Client,
    session_id: i32,
) -> Option<(i32, RecordingPositionKey)> {
    let mut found = None;
    client.counters().for_each(|id, type_id, key, _label| {
        if type_id == RECORDING_POSITION_TYPE_ID {
            if let Some(k) = parse_recording_position_key(key) {
                if k.session_id == session_id {
                    found = Some((id, k));
                }
            }
        }
    });
    found
}

/// A snapshot being written: a publication the local archive records.
pub struct SnapshotTaker {
    publication: ExclusivePublication,
    channel: String,
    stream_id: i32,
    counter_id: i32,
    recording_id: i64,
    deadline: Instant,
    what: String,
}

impl SnapshotTaker {
    /// Opens the snapshot's publication on IPC stream `stream_id` and has
    /// the archive record it; `what` names the snapshot in errors.
    pub fn start(
        client: &Client,
        archive: &mut ArchiveClient,
        stream_id: i32,
        timeout: Duration,
        what: &str,
    ) -> Result<SnapshotTaker, String> {
        let publication = client
            .add_exclusive_publication("aeron:ipc?alias=snapshot|term-length=16m", stream_id)
            .map_err(|e| format!("{what}: its publication: {e}"))?;
        let channel = format!("aeron:ipc?session-id={}", publication.session_id());
        archive
            .start_recording(&channel, stream_id, source_location::LOCAL, false)
            .map_err(|e| format!("{what}: recording it: {e}"))?;
        let deadline = Instant::now() + timeout;
        let (counter_id, recording_id) = loop {
            if let Some((id, key)) = find_recording_counter(client, publication.session_id()) {
                break (id, key.recording_id);
            }
            if Instant::now() > deadline {
                let _ = archive.stop_recording(&channel, stream_id);
                return Err(format!(
                    "{what}: the archive did not start recording it within {timeout:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        Ok(SnapshotTaker {
            publication,
            channel,
            stream_id,
            counter_id,
            recording_id,
            deadline: Instant::now() + timeout,
            what: what.to_string(),
        })
    }

    /// The recording that holds the snapshot.
    pub fn recording_id(&self) -> i64 {
        self.recording_id
    }

    /// Appends one message (fragmented if long), waiting out back-pressure
    /// up to the taker's deadline.
    pub fn offer(&mut self, message: &[u8]) -> Result<(), String> {
        loop {
            match self.publication.offer(message) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > self.deadline => {
                    return Err(format!(
                        "{}: the publication took no more ({e:?})",
                        self.what
                    ))
                }
                Err(_) => std::thread::yield_now(),
            }
        }
    }

    /// Waits until the recording holds everything published, stops it and
    /// returns its id: the snapshot is whole.
    pub fn finish(self, client: &Client, archive: &mut ArchiveClient) -> Result<i64, String> {
        let end = self.publication.position();
        let counter = client.counters().counter_ref(self.counter_id);
        while counter.get() < end {
            if Instant::now() > self.deadline {
                let _ = archive.stop_recording(&self.channel, self.stream_id);
                return Err(format!(
                    "{}: recorded {} of {end} bytes in time",
                    self.what,
                    counter.get()
                ));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        archive
            .stop_recording(&self.channel, self.stream_id)
            .map_err(|e| format!("{}: stopping its recording: {e}", self.what))?;
        self.publication.close_without_waiting();
        Ok(self.recording_id)
    }

    /// Gives the snapshot up (its recording stays, referenced by nothing).
    pub fn abort(self, archive: &mut ArchiveClient) {
        let _ = archive.stop_recording(&self.channel, self.stream_id);
        self.publication.close_without_waiting();
    }
}

/// Reads snapshot recording `recording_id` whole, replayed on IPC stream
/// `stream_id`: its messages in order. An error names the recording and
/// how far it got; a snapshot is never handed over short.
pub fn load_snapshot(
    client: &Client,
    archive: &mut ArchiveClient,
    recording_id: i64,
    stream_id: i32,
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, String> {
    let what = |e: String| format!("snapshot recording {recording_id}: {e}");
    let start = archive
        .get_start_position(recording_id)
        .map_err(|e| what(e.to_string()))?;
    let stop = archive
        .get_stop_position(recording_id)
        .map_err(|e| what(e.to_string()))?;
    if stop < 0 {
        return Err(what("it has no stop position (still recording?)".into()));
    }
    if stop == start {
        return Ok(Vec::new());
    }
    let replay = archive
        .start_replay(recording_id, start, stop - start, "aeron:ipc", stream_id)
        .map_err(|e| what(e.to_string()))?;
    let channel = format!("aeron:ipc?session-id={}", replay as i32);
    let mut sub = client
        .add_subscription(&channel, stream_id)
        .map_err(|e| what(e.to_string()))?;
    let deadline = Instant::now() + timeout;
    let mut assembler = FragmentAssembler::new();
    let mut messages = Vec::new();
    let mut position = start;
    while position < stop {
        if Instant::now() > deadline {
            let _ = sub.close();
            return Err(what(format!(
                "read {} of {} bytes within {timeout:?}",
                position - start,
                stop - start
            )));
        }
        let n = sub
            .poll(
                |payload, header| -> Result<(), ()> {
                    if let Some(m) = assembler.on_fragment(payload, header) {
                        position = m.end_position;
                        messages.push(m.payload);
                    } else {
                        position = position.max(header.position());
                    }
                    Ok(())
                },
                100,
            )
            .unwrap_or(0);
        if n == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let _ = sub.close();
    Ok(messages)
}
