//! Replication: this archive copies a recording of another archive (sulis's
//! or Aeron's), as Aeron's `ReplicationSession` does. The destination is
//! the actor: it connects to the source archive as an ordinary archive
//! client, reads the source's descriptor, creates (or picks up) the
//! destination recording, extends it with a subscription to the
//! replication channel and asks the source to replay there.
//!
//! The conversation with the source blocks (each request waits for its
//! answer), so it runs on a worker thread of its own; the conductor keeps
//! the catalog, the recording and the signals on its duty cycle, and the
//! two talk over channels. Signals go to the control session that asked,
//! with the replication id as their correlation id: REPLICATE when a new
//! destination recording is made, then the extension's EXTEND and STOP,
//! SYNC once the destination holds all the source had, REPLICATE_END last.

use super::{now_ms, ArchiveConductor, RecorderCommand, StartRecording};
use crate::client::{ArchiveClient, ArchiveClientContext, ArchiveError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sulis_client::subscription::SubscriptionShared;
use sulis_client::{Client, ClientContext, Interrupt};
use sulis_protocol::archive::messages::*;
use sulis_protocol::uri::ChannelUri;

/// How often the worker reads the source's answers (errors about the replay).
const SOURCE_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// A replication request, whichever of Aeron's three forms it came in.
pub(super) struct ReplicateParams {
    pub src_recording_id: i64,
    pub dst_recording_id: i64,
    /// Where to stop (−1: follow the source while it records).
    pub stop_position: i64,
    pub src_control_stream_id: i32,
    pub src_control_channel: String,
    pub live_destination: String,
    pub replication_channel: String,
    /// Session id of the replay (−1: the source recording's).
    pub replication_session_id: i32,
    pub credentials: Vec<u8>,
    pub src_response_channel: String,
    /// Tags of the recording subscription (−1 both: untagged; −1 one: the replication id).
    pub channel_tag_id: i64,
    pub subscription_tag_id: i64,
}

impl ReplicateParams {
    /// The request of a client before Aeron 1.33 (ReplicateRequest,
    /// TaggedReplicateRequest): the rest takes the archive's defaults.
    pub fn before_1_33(
        src_recording_id: i64,
        dst_recording_id: i64,
        src_control_stream_id: i32,
        src_control_channel: String,
        live_destination: String,
        tags: (i64, i64),
    ) -> ReplicateParams {
        ReplicateParams {
            channel_tag_id: tags.0,
            subscription_tag_id: tags.1,
            src_recording_id,
            dst_recording_id,
            stop_position: NULL_VALUE,
            src_control_stream_id,
            src_control_channel,
            live_destination,
            replication_channel: String::new(),
            replication_session_id: NULL_VALUE as i32,
            credentials: Vec::new(),
            src_response_channel: String::new(),
        }
    }
}

/// Worker → conductor.
enum FromWorker {
    /// The source recording's descriptor.
    Source(Box<RecordingDescriptor>),
    /// The source accepted the replay.
    Replaying,
    /// The source recording's live position (live merge only).
    SourcePosition(i64),
    /// The replication cannot go on: the error code and why.
    Failed(i64, String),
}

/// Conductor → worker.
enum ToWorker {
    /// Ask the source to replay.
    Replay {
        position: i64,
        length: i64,
        channel: String,
        stream_id: i32,
        /// For a replication channel in response mode: the recording
        /// subscription (registration id, images) the replay is to reach.
        response: Option<(i64, Arc<SubscriptionShared>)>,
    },
}

pub(super) struct Replication {
    id: i64,
    control_session_id: i64,
    params: ReplicateParams,
    dst_recording_id: i64,
    /// The source's stop position when it was listed (−1: it was recording).
    src_stop_position: i64,
    /// The extension's recording subscription, once added.
    subscription_id: Option<i64>,
    /// By when the source's replay must have formed an image here.
    image_deadline: Option<Instant>,
    /// The extension has started recording the replayed image.
    recording: bool,
    to_worker: Option<Sender<ToWorker>>,
    from_worker: Receiver<FromWorker>,
    /// Set to end the worker (it stops the source's replay and disconnects).
    stop: Arc<AtomicBool>,
    done: bool,
    /// Live merge: the source's live position as last heard (−1: not yet).
    src_position: i64,
    /// The source stream's id, session id and term length.
    stream: (i32, i32, i64),
    /// Live merge: the subscription to the live destination, once added.
    live: Option<sulis_client::Subscription>,
    /// Live merge: the recording was told where to move to the live image.
    merge_requested: bool,
    /// Live merge: the recording moved to the live image and goes on.
    merged: bool,
}

impl Drop for Replication {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// A port of `host` that is free now (the kernel picks it).
fn free_port(host: &str) -> Result<u16, String> {
    std::net::UdpSocket::bind((host, 0))
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free UDP port on {host}: {e}"))
}

/// `channel` with an endpoint port of 0 replaced by a free port, so that the
/// source can be told where to send (the driver gives no way to learn an
/// ephemeral port it bound).
fn with_concrete_port(channel: &str) -> Result<String, String> {
    let uri = ChannelUri::parse(channel).map_err(|e| format!("'{channel}': {e}"))?;
    let Some(endpoint) = uri.get("endpoint") else {
        return Ok(channel.to_string());
    };
    let Some(host) = endpoint.strip_suffix(":0") else {
        return Ok(channel.to_string());
    };
    let port = free_port(host.trim_start_matches('[').trim_end_matches(']'))?;
    Ok(channel.replacen(
        &format!("endpoint={endpoint}"),
        &format!("endpoint={host}:{port}"),
        1,
    ))
}

/// The host part of a UDP channel's endpoint.
fn endpoint_host(channel: &str) -> Option<String> {
    let uri = ChannelUri::parse(channel).ok()?;
    let endpoint = uri.get("endpoint")?;
    let (host, _) = endpoint.rsplit_once(':')?;
    Some(host.to_string())
}

/// `channel` with `session-id=session_id`.
fn with_session_id(channel: &str, session_id: i32) -> Result<String, String> {
    ChannelUri::parse(channel)
        .and_then(|u| u.with("session-id", &session_id.to_string()))
        .map(|u| u.to_string())
        .map_err(|e| e.to_string())
}

/// The archive error code to report for a failed request to the source.
fn error_code_of(e: &ArchiveError) -> i64 {
    match e {
        ArchiveError::Archive { code, .. } => *code,
        _ => error_code::GENERIC,
    }
}

/// The worker: the conversation with the source archive.
fn run_worker(
    driver: ClientContext,
    source_ctx: ArchiveClientContext,
    src_recording_id: i64,
    live_merge: bool,
    stop: Arc<AtomicBool>,
    to_conductor: Sender<FromWorker>,
    from_conductor: Receiver<ToWorker>,
) {
    let fail = |code: i64, message: String| {
        let _ = to_conductor.send(FromWorker::Failed(code, message));
    };
    let source_channel = source_ctx.control_request_channel.clone();
    let client = match Client::connect(driver) {
        Ok(c) => c,
        Err(e) => {
            return fail(
                error_code::GENERIC,
                format!("replication cannot connect to its driver: {e}"),
            )
        }
    };
    let mut source = match ArchiveClient::connect(&client, source_ctx) {
        Ok(s) => s,
        Err(e) if stop.load(Ordering::Acquire) => return drop(e),
        Err(e) => {
            return fail(
                error_code::REPLICATION_CONNECTION_FAILURE,
                format!("cannot connect to the source archive on {source_channel}: {e}"),
            )
        }
    };
    match source.list_recording(src_recording_id) {
        Ok(Some(d)) => {
            let _ = to_conductor.send(FromWorker::Source(Box::new(d)));
        }
        Ok(None) => {
            let at = format!("at the source archive on {source_channel}");
            return fail(
                error_code::UNKNOWN_RECORDING,
                format!("unknown recording id {src_recording_id} {at}"),
            );
        }
        Err(e) => {
            return fail(
                error_code_of(&e),
                format!("cannot list recording {src_recording_id} at the source archive: {e}"),
            )
        }
    }
    // The conductor answers with the replay to ask for, or drops its end.
    let (position, length, channel, stream_id, response) = loop {
        if stop.load(Ordering::Acquire) {
            return;
        }
        match from_conductor.recv_timeout(SOURCE_POLL_INTERVAL) {
            Ok(ToWorker::Replay {
                position,
                length,
                channel,
                stream_id,
                response,
            }) => break (position, length, channel, stream_id, response),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        }
    };
    let started = match &response {
        // Over a response channel: a replay token, and the request on a
        // stream that names the recording subscription.
        Some((subscription_id, images)) => source.start_replay_via_response_channel(
            &client,
            (*subscription_id, images),
            src_recording_id,
            position,
            length,
            None,
            &channel,
            stream_id,
        ),
        None => source.start_replay(src_recording_id, position, length, &channel, stream_id),
    };
    let replay_session_id =
        match started {
            Ok(id) => id,
            Err(e) => {
                return fail(
                    error_code_of(&e),
                    format!("the source archive refused to replay recording {src_recording_id} from {position}: {e}"),
                )
            }
        };
    let _ = to_conductor.send(FromWorker::Replaying);
    let failure = follow_source(
        &mut source,
        src_recording_id,
        live_merge,
        &stop,
        &to_conductor,
    );
    // However the replication ended (stopped, merged, failed), the source's
    // replay goes: one following a live recording would go on for nobody.
    // It is sent before the stop can interrupt anything (only the wait for
    // the answer is), and the source may have ended it already: either
    // answer will do.
    let _ = source.stop_replay(replay_session_id);
    if let Some((code, message)) = failure {
        fail(code, message);
    }
}

/// Watches the source while it replays, until the replication stops: its
/// recording position for a live merge, errors about the replay. Returns
/// why the replication cannot go on, if so.
fn follow_source(
    source: &mut ArchiveClient,
    src_recording_id: i64,
    live_merge: bool,
    stop: &AtomicBool,
    to_conductor: &Sender<FromWorker>,
) -> Option<(i64, String)> {
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(SOURCE_POLL_INTERVAL);
        if live_merge {
            match source.get_recording_position(src_recording_id) {
                Ok(p) => {
                    let _ = to_conductor.send(FromWorker::SourcePosition(p));
                }
                // Interrupted by the stop: nothing went wrong.
                Err(_) if stop.load(Ordering::Acquire) => return None,
                Err(e) => {
                    return Some((
                        error_code_of(&e),
                        format!("cannot read the source recording's position: {e}"),
                    ))
                }
            }
        }
        if let Some((_, code, message)) = source.poll_errors().into_iter().next() {
            return Some((
                code,
                format!(
                    "the source archive's replay of recording {src_recording_id} failed: {message}"
                ),
            ));
        }
    }
    None
}

impl ArchiveConductor {
    /// ReplicateRequest (any version): answers the replication id at once
    /// and goes on in the background.
    pub(super) fn on_replicate(&mut self, sid: i64, k: i64, p: ReplicateParams) {
        if let Some(message) = self.low_storage_space() {
            return self
                .session(sid)
                .error(k, error_code::STORAGE_SPACE, &message);
        }
        if p.dst_recording_id != NULL_VALUE {
            if self.catalog.recording(p.dst_recording_id).is_none() {
                return self.unknown_recording(sid, k, p.dst_recording_id);
            }
            if self.is_active(p.dst_recording_id) {
                return self.session(sid).error(
                    k,
                    error_code::ACTIVE_RECORDING,
                    &format!(
                        "cannot replicate into recording {}: it is recording",
                        p.dst_recording_id
                    ),
                );
            }
        }
        if !p.live_destination.is_empty() {
            if let Err(e) = ChannelUri::parse(&p.live_destination) {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!("live destination '{}': {e}", p.live_destination),
                );
            }
            if p.stop_position != NULL_VALUE {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    "a replication that merges with the live stream has no stop position",
                );
            }
        }
        let channel = if p.replication_channel.is_empty() {
            self.ctx.replication_channel.clone().unwrap_or_default()
        } else {
            p.replication_channel.clone()
        };
        if channel.is_empty() {
            return self.session(sid).error(
                k,
                error_code::GENERIC,
                "no replication channel: the request names none and the archive has no replication_channel set",
            );
        }
        match ChannelUri::parse(&channel) {
            Err(e) => {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!("replication channel '{channel}': {e}"),
                )
            }
            // As Aeron: a response channel serves one replay to one
            // subscription, not a shared one.
            Ok(u) if u.is_response() && !p.live_destination.is_empty() => {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!("replication channel '{channel}': response channels can't be used with live destinations"),
                )
            }
            Ok(_) => {}
        }
        let response_channel = if !p.src_response_channel.is_empty() {
            // Port 0 as Aeron's archives are configured (`endpoint=localhost:0`):
            // the source must be told a port it can answer to.
            match with_concrete_port(&p.src_response_channel) {
                Ok(c) => c,
                Err(e) => {
                    return self.session(sid).error(
                        k,
                        error_code::GENERIC,
                        &format!("source response channel {e}"),
                    )
                }
            }
        } else if p.src_control_channel.starts_with("aeron:ipc") {
            "aeron:ipc".to_string()
        } else {
            let host = endpoint_host(&channel).unwrap_or_else(|| "localhost".into());
            match free_port(&host) {
                Ok(port) => format!("aeron:udp?endpoint={host}:{port}"),
                Err(e) => return self.session(sid).error(k, error_code::GENERIC, &e),
            }
        };
        let source_ctx = ArchiveClientContext {
            control_request_channel: p.src_control_channel.clone(),
            control_request_stream_id: p.src_control_stream_id,
            control_response_channel: response_channel,
            control_response_stream_id: ArchiveClientContext::default().control_response_stream_id,
            message_timeout: self.ctx.connect_timeout,
            interrupt: None,
            credentials: p.credentials.clone(),
            challenge_response: None,
        };
        self.next_replication_id += 1;
        let id = self.next_replication_id;
        let stop = Arc::new(AtomicBool::new(false));
        let (to_conductor, from_worker) = mpsc::channel();
        let (to_worker, from_conductor) = mpsc::channel();
        let driver = ClientContext {
            dir: self.ctx.driver_dir.clone(),
            driver_timeout: self.ctx.driver_timeout,
            name: format!("sulis-archive replication {id}"),
            interrupt: None,
        };
        let source_ctx = ArchiveClientContext {
            interrupt: Some({
                let stop = stop.clone();
                Interrupt(Arc::new(move || stop.load(Ordering::Acquire)))
            }),
            ..source_ctx
        };
        let src_recording_id = p.src_recording_id;
        let live_merge = !p.live_destination.is_empty();
        let worker_stop = stop.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("sulis-replication-{id}"))
            .spawn(move || {
                run_worker(
                    driver,
                    source_ctx,
                    src_recording_id,
                    live_merge,
                    worker_stop,
                    to_conductor,
                    from_conductor,
                )
            });
        if let Err(e) = spawned {
            return self.session(sid).error(
                k,
                error_code::GENERIC,
                &format!("cannot start the replication thread: {e}"),
            );
        }
        self.replications.push(Replication {
            id,
            control_session_id: sid,
            dst_recording_id: p.dst_recording_id,
            params: p,
            src_stop_position: NULL_VALUE,
            subscription_id: None,
            image_deadline: None,
            recording: false,
            to_worker: Some(to_worker),
            from_worker,
            stop,
            done: false,
            src_position: NULL_VALUE,
            stream: (0, 0, 0),
            live: None,
            merge_requested: false,
            merged: false,
        });
        self.session(sid).ok(k, id);
    }

    /// StopReplicationRequest.
    pub(super) fn on_stop_replication(&mut self, sid: i64, k: i64, replication_id: i64) {
        match self
            .replications
            .iter()
            .position(|r| r.id == replication_id && !r.done)
        {
            Some(i) => {
                self.end_replication(i, None);
                self.session(sid).ok(k, 0);
            }
            None => self.session(sid).error(
                k,
                error_code::UNKNOWN_REPLICATION,
                &format!("unknown replication id {replication_id}"),
            ),
        }
    }

    fn is_active(&self, recording_id: i64) -> bool {
        self.active_recordings.contains_key(&recording_id)
            || self
                .recording_subscriptions
                .iter()
                .any(|s| s.extend == Some(recording_id) && !s.closing)
    }

    /// Ends replication `i`: its recording stops, the worker stops the
    /// source's replay, and the client hears why (an error) and REPLICATE_END.
    fn end_replication(&mut self, i: usize, error: Option<(i64, String)>) {
        let r = &mut self.replications[i];
        r.done = true;
        r.stop.store(true, Ordering::Release);
        r.to_worker = None;
        r.live = None;
        let (sid, id, dst, sub) = (
            r.control_session_id,
            r.id,
            r.dst_recording_id,
            r.subscription_id,
        );
        // A merged recording goes on with the live stream.
        if let Some(sub) = sub.filter(|_| !r.merged) {
            if let Some(j) = self
                .recording_subscriptions
                .iter()
                .position(|s| s.subscription.registration_id() == sub)
            {
                self.stop_recording_subscription(j);
            }
        }
        if let Some((code, message)) = error {
            let message = format!("replication {id}: {message}");
            if let Some(s) = self.sessions.get_mut(&sid) {
                s.error(id, code, &message);
            }
            self.record_error(message);
        }
        self.signal(
            sid,
            id,
            dst,
            sub.unwrap_or(NULL_VALUE),
            NULL_VALUE,
            recording_signal::REPLICATE_END,
        );
    }

    /// The source's descriptor is in: set up the destination and the replay.
    fn on_source_descriptor(
        &mut self,
        i: usize,
        src: RecordingDescriptor,
    ) -> Result<(), (i64, String)> {
        let (sid, id) = (
            self.replications[i].control_session_id,
            self.replications[i].id,
        );
        let dst_id = self.replications[i].dst_recording_id;
        if let Some(why) = crate::catalog::impossible_geometry(&src) {
            return Err((
                error_code::GENERIC,
                format!(
                    "source recording {} {why}: nothing replicated",
                    src.recording_id
                ),
            ));
        }
        let replay_position = if dst_id == NULL_VALUE {
            let d = RecordingDescriptor {
                control_session_id: sid,
                correlation_id: id,
                recording_id: 0,
                start_timestamp: now_ms(),
                stop_timestamp: now_ms(),
                stop_position: src.start_position,
                ..src.clone()
            };
            let new_id = self
                .catalog
                .add_recording(d)
                .map_err(|e| (error_code::GENERIC, e.to_string()))?;
            self.replications[i].dst_recording_id = new_id;
            self.signal(
                sid,
                id,
                new_id,
                NULL_VALUE,
                src.start_position,
                recording_signal::REPLICATE,
            );
            src.start_position
        } else {
            let Some(dst) = self.catalog.recording(dst_id) else {
                return Err((
                    error_code::UNKNOWN_RECORDING,
                    format!("unknown recording id {dst_id}"),
                ));
            };
            if self.is_active(dst_id) {
                return Err((
                    error_code::ACTIVE_RECORDING,
                    format!("cannot replicate into recording {dst_id}: it is recording"),
                ));
            }
            let same = dst.stream_id == src.stream_id
                && dst.initial_term_id == src.initial_term_id
                && dst.term_buffer_length == src.term_buffer_length
                && dst.mtu_length == src.mtu_length;
            let within = dst.stop_position >= src.start_position
                && (src.stop_position == NULL_VALUE || dst.stop_position <= src.stop_position);
            if !same || !within {
                return Err((
                    error_code::INVALID_EXTENSION,
                    format!(
                        "recording {dst_id} (stream {}, initial term id {}, term length {}, mtu {}, stopped at {}) \
                         cannot continue source recording {} (stream {}, {}, {}, {}, [{}, {}])",
                        dst.stream_id, dst.initial_term_id, dst.term_buffer_length, dst.mtu_length,
                        dst.stop_position, src.recording_id, src.stream_id, src.initial_term_id,
                        src.term_buffer_length, src.mtu_length, src.start_position, src.stop_position
                    ),
                ));
            }
            dst.stop_position
        };
        let r = &mut self.replications[i];
        r.src_stop_position = src.stop_position;
        if !r.params.live_destination.is_empty() && src.stop_position != NULL_VALUE {
            return Err((
                error_code::GENERIC,
                format!(
                    "a live merge needs a source recording that is recording; recording {} stopped at {}",
                    src.recording_id, src.stop_position
                ),
            ));
        }
        let dst_id = r.dst_recording_id;
        let requested_stop = r.params.stop_position;
        let in_sync = src.stop_position != NULL_VALUE && replay_position >= src.stop_position;
        if in_sync || (requested_stop != NULL_VALUE && replay_position >= requested_stop) {
            if in_sync {
                self.signal(
                    sid,
                    id,
                    dst_id,
                    NULL_VALUE,
                    replay_position,
                    recording_signal::SYNC,
                );
            }
            self.end_replication(i, None);
            return Ok(());
        }
        let session_id = match r.params.replication_session_id {
            s if s != NULL_VALUE as i32 => s,
            _ => src.session_id,
        };
        r.stream = (src.stream_id, session_id, src.term_buffer_length as i64);
        let channel = if r.params.replication_channel.is_empty() {
            self.ctx.replication_channel.clone().unwrap_or_default()
        } else {
            r.params.replication_channel.clone()
        };
        let channel = with_concrete_port(&channel).map_err(|e| (error_code::GENERIC, e))?;
        // A response channel learns its session from the source's driver.
        let response_mode = ChannelUri::parse(&channel).is_ok_and(|u| u.is_response());
        let channel = if response_mode {
            channel
        } else {
            with_session_id(&channel, session_id).map_err(|e| (error_code::GENERIC, e))?
        };
        // Tagged, as Aeron's: the copy is recorded through a multi-destination
        // subscription tagged `tags=C,S` (a tag not given is the replication
        // id), the replay arriving at its one destination, the replication
        // channel's endpoint; a channel of this driver that names `tags=C`
        // shares that endpoint.
        let tags = (r.params.channel_tag_id, r.params.subscription_tag_id);
        // The source replays to `channel`; the copy records `recording_channel`.
        let (recording_channel, replay_destination) = if tags == (NULL_VALUE, NULL_VALUE) {
            (channel.clone(), None)
        } else {
            if response_mode {
                return Err((
                    error_code::GENERIC,
                    format!("channel and subscription tags need a replication channel with an endpoint, not the response channel '{channel}'"),
                ));
            }
            let pick = |t: i64| if t == NULL_VALUE { id } else { t };
            tagged_recording_channel(&channel, pick(tags.0), pick(tags.1))
                .map(|(c, d)| (c, Some(d)))
                .map_err(|e| (error_code::GENERIC, e))?
        };
        let subscription_id = self
            .add_recording_subscription(StartRecording {
                control_session_id: sid,
                correlation_id: id,
                stream_id: src.stream_id,
                channel: recording_channel,
                auto_stop: true,
                extend: Some(dst_id),
                // The replay comes from the source archive over the network.
                local: false,
            })
            .map_err(|(code, message)| {
                (
                    code,
                    format!("cannot record the replication channel: {message}"),
                )
            })?;
        let length = match requested_stop {
            NULL_VALUE => REPLAY_ALL_AND_FOLLOW,
            stop => stop - replay_position,
        };
        let response = response_mode
            .then(|| {
                self.recording_subscriptions
                    .iter()
                    .find(|s| s.subscription.registration_id() == subscription_id)
                    .map(|s| (subscription_id, s.subscription.shared()))
            })
            .flatten();
        // Known to the replication before anything can fail, so that ending it stops the subscription.
        self.replications[i].subscription_id = Some(subscription_id);
        if let Some(destination) = replay_destination {
            let added = self
                .recording_subscriptions
                .iter()
                .find(|s| s.subscription.registration_id() == subscription_id)
                .map(|s| s.subscription.add_destination(&destination));
            if let Some(Err(e)) = added {
                return Err((
                    error_code::GENERIC,
                    format!("cannot add the replay destination '{destination}': {e}"),
                ));
            }
        }
        let r = &mut self.replications[i];
        r.subscription_id = Some(subscription_id);
        r.image_deadline = Some(Instant::now() + self.ctx.connect_timeout * 2);
        if let Some(w) = &r.to_worker {
            let _ = w.send(ToWorker::Replay {
                position: replay_position,
                length,
                channel,
                stream_id: src.stream_id,
                response,
            });
        }
        Ok(())
    }

    /// Live merge: once the copy is within a quarter term (at most 32 MiB)
    /// of the source's live position, subscribes to the live destination
    /// (the source session only); once its image is there, tells the
    /// recording to record the replay up to exactly where the live image
    /// stands and then go on with the live image.
    fn advance_live_merge(&mut self, i: usize, sub: i64) -> Result<(), (i64, String)> {
        let Some(copied) = self
            .active_recordings
            .values()
            .find(|a| a.subscription_id == sub)
            .map(|a| a.position())
        else {
            return Ok(());
        };
        let r = &mut self.replications[i];
        let (stream_id, session_id, term_length) = r.stream;
        let Some(live) = r.live.as_mut() else {
            let threshold = (term_length / 4).min(32 << 20);
            if r.src_position == NULL_VALUE || r.src_position - copied > threshold {
                return Ok(());
            }
            let channel = with_session_id(&r.params.live_destination, session_id).map_err(|e| {
                (
                    error_code::GENERIC,
                    format!("live destination '{}': {e}", r.params.live_destination),
                )
            })?;
            let live = self
                .client
                .add_subscription(&channel, stream_id)
                .map_err(|e| {
                    (
                        error_code::GENERIC,
                        format!("cannot subscribe to the live destination '{channel}': {e}"),
                    )
                })?;
            self.replications[i].live = Some(live);
            return Ok(());
        };
        let Some(image) = live.images().into_iter().next() else {
            return Ok(());
        };
        let join = image.position();
        let subscription = r.live.take();
        r.merge_requested = true;
        let _ = self
            .recorder_link
            .commands
            .send(RecorderCommand::MergeInto {
                subscription_id: sub,
                join,
                image,
                live_subscription: subscription,
            });
        Ok(())
    }

    /// One duty cycle of every replication.
    pub(super) fn run_replications(&mut self, now: Instant) -> usize {
        let mut work = 0;
        let merged = std::mem::take(&mut self.merged);
        for i in 0..self.replications.len() {
            if self.replications[i].done {
                continue;
            }
            let dst = self.replications[i].dst_recording_id;
            if let Some(&(_, at)) = merged.iter().find(|(id, _)| *id == dst) {
                work += 1;
                let r = &mut self.replications[i];
                let (sid, id, sub) = (r.control_session_id, r.id, r.subscription_id);
                if at == NULL_VALUE {
                    // The live stream could not be joined: the copy goes on
                    // following the replay.
                    r.params.live_destination.clear();
                    r.merge_requested = false;
                    let message = format!(
                        "replication {id}: the live stream joined more than a term behind the copy; it goes on from the replay"
                    );
                    if let Some(s) = self.sessions.get_mut(&sid) {
                        s.error(id, error_code::GENERIC, &message);
                    }
                    self.record_error(message);
                } else {
                    r.merged = true;
                    let sub = sub.unwrap_or(NULL_VALUE);
                    self.signal(sid, id, dst, sub, at, recording_signal::MERGE);
                    self.end_replication(i, None);
                    continue;
                }
            }
            if !self
                .sessions
                .contains_key(&self.replications[i].control_session_id)
            {
                // Its client went away: nobody to report to.
                self.end_replication(i, None);
                continue;
            }
            match self.replications[i].from_worker.try_recv() {
                Ok(FromWorker::Source(d)) => {
                    work += 1;
                    if let Err(e) = self.on_source_descriptor(i, *d) {
                        self.end_replication(i, Some(e));
                    }
                    continue;
                }
                Ok(FromWorker::Replaying) => work += 1,
                Ok(FromWorker::SourcePosition(p)) => self.replications[i].src_position = p,
                Ok(FromWorker::Failed(code, message)) => {
                    self.end_replication(i, Some((code, message)));
                    continue;
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    // The worker ended without a word: only after a stop.
                }
            }
            let Some(sub) = self.replications[i].subscription_id else {
                continue;
            };
            let subscribed = self
                .recording_subscriptions
                .iter()
                .any(|s| s.subscription.registration_id() == sub);
            let recording = self
                .active_recordings
                .values()
                .any(|a| a.subscription_id == sub);
            if recording
                && !self.replications[i].params.live_destination.is_empty()
                && !self.replications[i].merge_requested
            {
                if let Err(e) = self.advance_live_merge(i, sub) {
                    self.end_replication(i, Some(e));
                    continue;
                }
            }
            let r = &mut self.replications[i];
            if recording {
                r.recording = true;
                // As Aeron's ReplicationSession: once the copy holds all the
                // source had (SYNC) or reached the requested stop, the
                // replication is over and its recording stops after it, so
                // the signals come as Aeron's do: SYNC, REPLICATE_END, STOP.
                let (sid, id, dst) = (r.control_session_id, r.id, r.dst_recording_id);
                let (src_stop, requested_stop) = (r.src_stop_position, r.params.stop_position);
                let at = self.live_position(dst).unwrap_or(NULL_VALUE);
                let synced = src_stop != NULL_VALUE && at >= src_stop;
                if synced || (requested_stop != NULL_VALUE && at >= requested_stop) {
                    if synced {
                        self.signal(sid, id, dst, sub, at, recording_signal::SYNC);
                    }
                    self.end_replication(i, None);
                    work += 1;
                }
            } else if !subscribed {
                // The replayed image ended (the source's replay reached its
                // end, or the recording stopped): the extension is over. Its
                // recording may have started and stopped between two duty
                // cycles (a short recording copied at once) and so never been
                // seen running: the subscription's going is what counts.
                let (sid, id, dst) = (r.control_session_id, r.id, r.dst_recording_id);
                let src_stop = r.src_stop_position;
                let reached = self
                    .catalog
                    .recording(dst)
                    .map_or(NULL_VALUE, |d| d.stop_position);
                // SYNC means the copy holds all the source had, as Aeron's
                // ReplicationSession signals it: a copy that stopped at the
                // requested stop position short of that is not in sync.
                if src_stop != NULL_VALUE && reached >= src_stop {
                    self.signal(sid, id, dst, sub, reached, recording_signal::SYNC);
                }
                self.end_replication(i, None);
                work += 1;
            } else if !r.recording && r.image_deadline.is_some_and(|d| now >= d) {
                let message = format!(
                    "no replay from the source archive arrived within {:?}",
                    self.ctx.connect_timeout * 2
                );
                self.end_replication(i, Some((error_code::GENERIC, message)));
                work += 1;
            }
        }
        let before = self.replications.len();
        self.replications.retain(|r| !r.done);
        work + before - self.replications.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_of_zero_becomes_a_free_port() {
        let c = with_concrete_port("aeron:udp?endpoint=127.0.0.1:0|mtu=1408").unwrap();
        let port: u16 = endpoint_host(&c)
            .and_then(|_| c.split("127.0.0.1:").nth(1))
            .and_then(|rest| rest.split('|').next())
            .and_then(|p| p.parse().ok())
            .unwrap();
        assert_ne!(port, 0);
        assert!(c.ends_with("|mtu=1408"), "{c}");
        let fixed = "aeron:udp?endpoint=127.0.0.1:40123";
        assert_eq!(with_concrete_port(fixed).unwrap(), fixed);
        assert_eq!(with_concrete_port("aeron:ipc").unwrap(), "aeron:ipc");
    }

    #[test]
    fn an_endpoint_host_is_read_from_the_channel() {
        assert_eq!(
            endpoint_host("aeron:udp?endpoint=localhost:8010").as_deref(),
            Some("localhost")
        );
        assert_eq!(endpoint_host("aeron:ipc"), None);
    }
}

/// A tagged replication's recording channel and its replay destination: the
/// replication channel without its endpoint, as a multi-destination
/// subscription (`control-mode=manual`) tagged `tags=CHANNEL,SUBSCRIPTION`,
/// and `aeron:udp?endpoint=` the endpoint it had (Aeron's
/// `ReplicationSession.extend`).
fn tagged_recording_channel(
    channel: &str,
    channel_tag: i64,
    subscription_tag: i64,
) -> Result<(String, String), String> {
    let uri = ChannelUri::parse(channel).map_err(|e| e.to_string())?;
    let endpoint = uri
        .get("endpoint")
        .ok_or_else(|| format!("channel and subscription tags need a replication channel with an endpoint, not '{channel}'"))?
        .to_owned();
    let tagged = uri
        .with("tags", &format!("{channel_tag},{subscription_tag}"))
        .and_then(|u| u.with("control-mode", "manual"))
        .and_then(|u| u.without(&["endpoint"]))
        .map_err(|e| e.to_string())?;
    Ok((tagged.to_string(), format!("aeron:udp?endpoint={endpoint}")))
}

#[cfg(test)]
mod tagged_tests {
    use super::tagged_recording_channel;

    #[test]
    fn should_record_a_tagged_replication_through_a_tagged_multi_destination_subscription() {
        let (channel, destination) =
            tagged_recording_channel("aeron:udp?endpoint=127.0.0.1:4000|session-id=7", 5, 6)
                .unwrap();
        assert_eq!(
            channel,
            "aeron:udp?session-id=7|tags=5,6|control-mode=manual"
        );
        assert_eq!(destination, "aeron:udp?endpoint=127.0.0.1:4000");
        assert!(tagged_recording_channel("aeron:ipc", 5, 6).is_err());
    }
}
