//! A client of an archive (sulis's or Aeron's): Aeron's `AeronArchive` in
//! Rust. It connects a control session over the request and response
//! channels, sends requests and waits for their answers; recording signals
//! that arrive meanwhile are kept for [`ArchiveClient::poll_signals`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};
use sulis_client::subscription::SubscriptionShared;
use sulis_client::{
    Client, ClientError, ExclusivePublication, FragmentAssembler, Interrupt, OfferError,
    Subscription,
};
use sulis_protocol::archive::messages::*;
use sulis_protocol::sbe::Header;

/// Where and how to reach an archive.
#[derive(Clone, Debug)]
pub struct ArchiveClientContext {
    /// The archive's control channel (`aeron:ipc` for a local archive).
    pub control_request_channel: String,
    /// Its stream.
    pub control_request_stream_id: i32,
    /// Where answers come back (a port of this machine for UDP, or `aeron:ipc`).
    pub control_response_channel: String,
    /// Its stream.
    pub control_response_stream_id: i32,
    /// How long to wait for an answer.
    pub message_timeout: Duration,
    /// Checked while waiting (Ctrl-C).
    pub interrupt: Option<Interrupt>,
    /// Sent with the connect request (empty: none).
    pub credentials: Vec<u8>,
    /// The answer to the archive's challenge, if it sends one.
    pub challenge_response: Option<Vec<u8>>,
}

impl Default for ArchiveClientContext {
    fn default() -> Self {
        ArchiveClientContext {
            control_request_channel: "aeron:ipc".into(),
            control_request_stream_id: 10,
            control_response_channel: "aeron:ipc".into(),
            control_response_stream_id: 20,
            message_timeout: Duration::from_secs(10),
            interrupt: None,
            credentials: Vec::new(),
            challenge_response: None,
        }
    }
}

/// What to replicate, and from where ([`ArchiveClient::replicate`]).
#[derive(Clone, Debug)]
pub struct Replication {
    /// The recording at the source archive.
    pub src_recording_id: i64,
    /// The recording to continue here (−1: a new one).
    pub dst_recording_id: i64,
    /// Where to stop (−1: follow the source while it records).
    pub stop_position: i64,
    /// The source archive's control channel.
    pub src_control_channel: String,
    /// Its stream.
    pub src_control_stream_id: i32,
    /// Where the source replays to (empty: the archive's replication channel).
    pub replication_channel: String,
    /// A live stream to merge with (not supported by sulis's archive yet).
    pub live_destination: String,
    /// Session id of the replay (−1: the source recording's).
    pub replication_session_id: i32,
    /// Credentials for the source archive.
    pub credentials: Vec<u8>,
    /// Where the source answers this archive (empty: a free port of this host).
    pub src_response_channel: String,
    /// Channel tag of the recording subscription (−1: none; with a
    /// subscription tag only, the replication id).
    pub channel_tag_id: i64,
    /// Subscription tag of it (−1: none; with a channel tag only, the replication id).
    pub subscription_tag_id: i64,
}

impl Default for Replication {
    fn default() -> Self {
        Replication {
            src_recording_id: NULL_VALUE,
            dst_recording_id: NULL_VALUE,
            stop_position: NULL_VALUE,
            src_control_channel: String::new(),
            src_control_stream_id: 10,
            replication_channel: String::new(),
            live_destination: String::new(),
            replication_session_id: NULL_VALUE as i32,
            credentials: Vec::new(),
            src_response_channel: String::new(),
            channel_tag_id: NULL_VALUE,
            subscription_tag_id: NULL_VALUE,
        }
    }
}

/// Why an archive request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArchiveError {
    /// The archive answered with an error (`code`: [`error_code`]).
    Archive {
        /// The archive's error code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// No answer in time.
    Timeout(String),
    /// The media driver or a publication failed.
    Client(String),
    /// Waiting was interrupted (Ctrl-C).
    Interrupted(String),
    /// An answer could not be decoded.
    Protocol(String),
}

impl std::fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArchiveError::Archive { code, message } => {
                write!(f, "{message} (archive error code {code})")
            }
            ArchiveError::Timeout(m)
            | ArchiveError::Client(m)
            | ArchiveError::Interrupted(m)
            | ArchiveError::Protocol(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ArchiveError {}

impl From<ClientError> for ArchiveError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Interrupted(m) => ArchiveError::Interrupted(m),
            other => ArchiveError::Client(other.to_string()),
        }
    }
}

/// A recording signal (start, stop, extend, ...).
pub type RecordingSignal = RecordingSignalEvent;

/// Aeron's control-stream term length (`aeron.archive.control.term.buffer.length`).
pub const CONTROL_TERM_BUFFER_LENGTH: usize = 64 * 1024;

/// Gives the request and response channels Aeron's control-stream defaults
/// where they name none: `term-length=64k` and `sparse=true`. Without them
/// a control stream on IPC takes the driver's IPC term length (64 MB, three
/// terms reserved on disk) for messages of a few hundred bytes.
fn apply_control_defaults(ctx: &mut ArchiveClientContext) -> Result<(), ArchiveError> {
    use sulis_protocol::uri::ChannelUri;
    let defaults = |c: &str, what: &str| -> Result<String, ArchiveError> {
        let mut uri =
            ChannelUri::parse(c).map_err(|e| ArchiveError::Client(format!("{what} '{c}': {e}")))?;
        for (key, value) in [
            ("term-length", CONTROL_TERM_BUFFER_LENGTH.to_string()),
            ("sparse", "true".to_string()),
        ] {
            if uri.get(key).is_none() {
                uri = uri
                    .with(key, &value)
                    .map_err(|e| ArchiveError::Client(format!("{what} '{c}': {e}")))?;
            }
        }
        Ok(uri.to_string())
    };
    ctx.control_request_channel =
        defaults(&ctx.control_request_channel, "control request channel")?;
    ctx.control_response_channel =
        defaults(&ctx.control_response_channel, "control response channel")?;
    Ok(())
}

/// Puts one `session-id=` on the request and response channels, as Aeron's
/// client does, unless either names one already: the client's response
/// stream is then its own, so on a response stream shared by many clients
/// (IPC stream 20 by default) one that is slow or idle holds back nobody
/// else's answers.
fn pin_session_id(ctx: &mut ArchiveClientContext) -> Result<(), ArchiveError> {
    use sulis_protocol::uri::ChannelUri;
    let parse = |c: &str, what: &str| {
        ChannelUri::parse(c).map_err(|e| ArchiveError::Client(format!("{what} '{c}': {e}")))
    };
    let request = parse(&ctx.control_request_channel, "control request channel")?;
    let response = parse(&ctx.control_response_channel, "control response channel")?;
    if request.get("session-id").is_some()
        || response.get("session-id").is_some()
        || response.get("control-mode") == Some("response")
    {
        return Ok(());
    }
    // Outside the range a driver gives out by itself, and the range it
    // keeps for set ids (Aeron's reserved -1..=1000 by default).
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ (u64::from(std::process::id()) << 17)
        ^ (ctx as *const ArchiveClientContext as u64);
    let mixed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33;
    let session_id = 1_000_001 + (mixed % (i32::MAX as u64 - 2_000_000)) as i32;
    let pin = |u: &ChannelUri| {
        u.with("session-id", &session_id.to_string())
            .map(|u| u.to_string())
            .map_err(|e| ArchiveError::Client(e.to_string()))
    };
    ctx.control_request_channel = pin(&request)?;
    ctx.control_response_channel = pin(&response)?;
    Ok(())
}

/// A ReplayRequest, or a BoundedReplayRequest with a limit counter: `range` is
/// (position, length), `to` the replay channel and stream.
fn replay_request(
    control_session_id: i64,
    correlation_id: i64,
    recording_id: i64,
    range: (i64, i64),
    limit_counter_id: Option<i32>,
    to: (&str, i32),
    replay_token: i64,
) -> Vec<u8> {
    let ((position, length), (channel, replay_stream_id)) = (range, to);
    match limit_counter_id {
        Some(limit_counter_id) => BoundedReplayRequest {
            control_session_id,
            correlation_id,
            recording_id,
            position,
            length,
            limit_counter_id,
            replay_stream_id,
            file_io_max_length: NULL_VALUE as i32,
            replay_token,
            replay_channel: channel.into(),
        }
        .encode(),
        None => ReplayRequest {
            control_session_id,
            correlation_id,
            recording_id,
            position,
            length,
            replay_stream_id,
            file_io_max_length: NULL_VALUE as i32,
            replay_token,
            replay_channel: channel.into(),
        }
        .encode(),
    }
}

fn is_response_channel(channel: &str) -> bool {
    sulis_protocol::uri::ChannelUri::parse(channel).is_ok_and(|u| u.is_response())
}

/// `channel` with `key=value` in place of any `key` it has.
fn with_param(channel: &str, key: &str, value: &str) -> Result<String, ArchiveError> {
    use sulis_protocol::uri::ChannelUri;
    ChannelUri::parse(channel)
        .and_then(|u| u.with(key, value))
        .map(|u| u.to_string())
        .map_err(|e| ArchiveError::Client(format!("channel '{channel}': {e}")))
}

/// A connected control session.
pub struct ArchiveClient {
    ctx: ArchiveClientContext,
    requests: ExclusivePublication,
    responses: Subscription,
    assembler: FragmentAssembler,
    control_session_id: i64,
    next_correlation_id: i64,
    archive_id: i64,
    signals: VecDeque<RecordingSignalEvent>,
    /// Errors about earlier requests (a recording that failed later, a
    /// replay that broke): (correlation id, code, message).
    errors: VecDeque<(i64, i64, String)>,
    /// Messages for this session read while waiting for something else.
    backlog: VecDeque<Vec<u8>>,
}

/// One answer of the archive.
enum Answer {
    Response(ControlResponse),
    Descriptor(RecordingDescriptor),
    /// A recording signal arrived (queued in `signals`).
    Signal,
}

impl ArchiveClient {
    /// Connects a control session.
    pub fn connect(
        client: &Client,
        mut ctx: ArchiveClientContext,
    ) -> Result<ArchiveClient, ArchiveError> {
        // Where it looks for an archive, as the caller named it (before the
        // defaults and the pinned session id are added).
        let asked = format!(
            "{} stream {}",
            ctx.control_request_channel, ctx.control_request_stream_id
        );
        apply_control_defaults(&mut ctx)?;
        pin_session_id(&mut ctx)?;
        let responses = client.add_subscription(
            &ctx.control_response_channel,
            ctx.control_response_stream_id,
        )?;
        // A response channel (`control-mode=response`): the request stream
        // names the response subscription, and the archive answers over the
        // connection it opens; this client needs no address of its own.
        let request_channel = if is_response_channel(&ctx.control_response_channel) {
            with_param(
                &ctx.control_request_channel,
                "response-correlation-id",
                &responses.registration_id().to_string(),
            )?
        } else {
            ctx.control_request_channel.clone()
        };
        let requests =
            client.add_exclusive_publication(&request_channel, ctx.control_request_stream_id)?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as i64)
            & 0x0fff_ffff_ffff;
        let mut c = ArchiveClient {
            ctx,
            requests,
            responses,
            assembler: FragmentAssembler::new(),
            control_session_id: NULL_VALUE,
            next_correlation_id: seed,
            archive_id: NULL_VALUE,
            signals: VecDeque::new(),
            errors: VecDeque::new(),
            backlog: VecDeque::new(),
        };
        let deadline = Instant::now() + c.ctx.message_timeout;
        // An `endpoint=host:0` response channel: the archive must be told
        // the port this driver bound, as Aeron's client tells it.
        let response_channel = match c.responses.resolved_channel() {
            Some(channel) => channel,
            None => {
                return Err(ArchiveError::Client(format!(
                    "control response channel '{}': its driver does not say which port it bound for the endpoint's \
                     port 0 (no local socket address counter for channel status counter {}); give the endpoint a port",
                    c.ctx.control_response_channel,
                    c.responses.channel_status_id()
                )))
            }
        };
        // Nobody on the request channel is the common first mistake: no
        // archive running, or one listening elsewhere. Say where we looked
        // and how to start one.
        let looked = format!(
            "an archive's control channel ({asked}): is an archive listening there? `sulis archive \
             --archive-dir DIR` starts one, as does sulis.Archive(DIR)"
        );
        c.wait_until(deadline, &looked, |c| c.requests.is_connected())?;
        let k = c.correlation_id();
        let request = AuthConnectRequest {
            correlation_id: k,
            response_stream_id: c.ctx.control_response_stream_id,
            version: PROTOCOL_VERSION,
            response_channel,
            encoded_credentials: c.ctx.credentials.clone(),
            client_info: format!("name=sulis version={}", env!("CARGO_PKG_VERSION")),
        };
        c.send(&request.encode())?;
        // The answer names the session: match on the correlation id alone.
        let mut k = k;
        let r = loop {
            let m = c.next_message(deadline, "the archive to accept the connection")?;
            let Ok(h) = Header::decode(&m) else { continue };
            let protocol = |e: sulis_protocol::sbe::SbeError| ArchiveError::Protocol(e.message);
            if h.template_id == ControlResponse::TEMPLATE_ID {
                let r = ControlResponse::decode(&m).map_err(protocol)?;
                if r.correlation_id == k {
                    break r;
                }
            } else if h.template_id == Challenge::TEMPLATE_ID {
                let ch = Challenge::decode(&m).map_err(protocol)?;
                if ch.correlation_id != k {
                    continue;
                }
                let Some(answer) = c.ctx.challenge_response.clone() else {
                    return Err(ArchiveError::Archive {
                        code: error_code::AUTHENTICATION_REJECTED,
                        message:
                            "the archive sent a challenge and no challenge response is configured"
                                .into(),
                    });
                };
                k = c.correlation_id();
                c.send(
                    &ChallengeResponse {
                        control_session_id: ch.control_session_id,
                        correlation_id: k,
                        encoded_credentials: answer,
                    }
                    .encode(),
                )?;
            }
        };
        if r.code != response_code::OK {
            return Err(ArchiveError::Archive {
                code: r.relevant_id,
                message: format!("archive refused the connection: {}", r.error_message),
            });
        }
        c.control_session_id = r.control_session_id;
        if r.version >= ARCHIVE_ID_MIN_VERSION {
            let k = c.correlation_id();
            c.send(
                &ArchiveIdRequest {
                    control_session_id: c.control_session_id,
                    correlation_id: k,
                }
                .encode(),
            )?;
            c.archive_id = c.await_ok(k)?;
        }
        Ok(c)
    }

    /// The control session id.
    pub fn control_session_id(&self) -> i64 {
        self.control_session_id
    }

    /// The archive's id (−1 if it is too old to say).
    pub fn archive_id(&self) -> i64 {
        self.archive_id
    }

    fn correlation_id(&mut self) -> i64 {
        self.next_correlation_id += 1;
        self.next_correlation_id
    }

    fn check_interrupt(&self) -> Result<(), ArchiveError> {
        if let Some(i) = &self.ctx.interrupt {
            if (i.0)() {
                return Err(ArchiveError::Interrupted(
                    "interrupted while waiting for the archive".into(),
                ));
            }
        }
        Ok(())
    }

    fn wait_until(
        &mut self,
        deadline: Instant,
        what: &str,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> Result<(), ArchiveError> {
        let mut spins = 0u32;
        while !done(self) {
            if Instant::now() >= deadline {
                return Err(ArchiveError::Timeout(format!(
                    "timed out after {:?} waiting for {what}",
                    self.ctx.message_timeout
                )));
            }
            self.check_interrupt()?;
            spins += 1;
            if spins > 100 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }

    fn send(&mut self, message: &[u8]) -> Result<(), ArchiveError> {
        Self::send_on(&self.ctx, &mut self.requests, message)
    }

    /// Sends `message` on `requests` (the session's request publication, or
    /// one opened for a replay over a response channel).
    fn send_on(
        ctx: &ArchiveClientContext,
        requests: &mut ExclusivePublication,
        message: &[u8],
    ) -> Result<(), ArchiveError> {
        let deadline = Instant::now() + ctx.message_timeout;
        loop {
            match requests.offer(message) {
                Ok(_) => return Ok(()),
                Err(OfferError::BackPressured | OfferError::AdminAction) => {}
                Err(OfferError::NotConnected) => {}
                Err(e) => {
                    return Err(ArchiveError::Client(format!(
                        "cannot send to the archive: {e:?}"
                    )))
                }
            }
            if Instant::now() >= deadline {
                return Err(ArchiveError::Timeout(
                    "timed out sending a request to the archive".into(),
                ));
            }
            if ctx.interrupt.as_ref().is_some_and(|i| (i.0)()) {
                return Err(ArchiveError::Interrupted(
                    "interrupted while waiting for the archive".into(),
                ));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// The next whole message on the response channel.
    fn next_message(&mut self, deadline: Instant, what: &str) -> Result<Vec<u8>, ArchiveError> {
        let mut spins = 0u32;
        loop {
            if let Some(m) = self.backlog.pop_front() {
                return Ok(m);
            }
            let backlog = &mut self.backlog;
            let assembler = &mut self.assembler;
            let n = self.responses.poll(
                |payload, header| {
                    if FragmentAssembler::is_unfragmented(header) {
                        backlog.push_back(payload.to_vec());
                    } else if let Some(m) = assembler.on_fragment(payload, header) {
                        backlog.push_back(m.payload);
                    }
                    Ok::<(), ()>(())
                },
                10,
            );
            if matches!(n, Ok(0)) || n.is_err() {
                if Instant::now() >= deadline {
                    return Err(ArchiveError::Timeout(format!(
                        "timed out after {:?} waiting for {what}",
                        self.ctx.message_timeout
                    )));
                }
                self.check_interrupt()?;
                spins += 1;
                if spins > 100 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
    }

    /// The next answer to request `k` of this session; signals are kept aside.
    fn next_answer(&mut self, k: i64, deadline: Instant) -> Result<Answer, ArchiveError> {
        loop {
            let m = self.next_message(deadline, "the archive's answer")?;
            let Ok(h) = Header::decode(&m) else { continue };
            if h.schema_id != SCHEMA_ID {
                continue;
            }
            let protocol = |e: sulis_protocol::sbe::SbeError| ArchiveError::Protocol(e.message);
            match h.template_id {
                ControlResponse::TEMPLATE_ID => {
                    let r = ControlResponse::decode(&m).map_err(protocol)?;
                    if r.control_session_id == self.control_session_id {
                        if r.correlation_id == k {
                            return Ok(Answer::Response(r));
                        }
                        if r.code == response_code::ERROR {
                            self.errors.push_back((
                                r.correlation_id,
                                r.relevant_id,
                                r.error_message,
                            ));
                        }
                    }
                }
                RecordingDescriptor::TEMPLATE_ID => {
                    let d = RecordingDescriptor::decode(&m).map_err(protocol)?;
                    if d.control_session_id == self.control_session_id && d.correlation_id == k {
                        return Ok(Answer::Descriptor(d));
                    }
                }
                RecordingSignalEvent::TEMPLATE_ID => {
                    let s = RecordingSignalEvent::decode(&m).map_err(protocol)?;
                    if s.control_session_id == self.control_session_id {
                        self.signals.push_back(s);
                        return Ok(Answer::Signal);
                    }
                }
                _ => {} // pings, other sessions' messages
            }
        }
    }

    fn await_ok(&mut self, k: i64) -> Result<i64, ArchiveError> {
        let deadline = Instant::now() + self.ctx.message_timeout;
        loop {
            match self.next_answer(k, deadline)? {
                Answer::Response(r) if r.code == response_code::OK => return Ok(r.relevant_id),
                Answer::Response(r) if r.code == response_code::ERROR => {
                    return Err(ArchiveError::Archive {
                        code: r.relevant_id,
                        message: r.error_message,
                    })
                }
                Answer::Response(r) => {
                    return Err(ArchiveError::Archive {
                        code: error_code::GENERIC,
                        message: format!("unexpected answer code {} ({})", r.code, r.error_message),
                    })
                }
                Answer::Descriptor(_) | Answer::Signal => {}
            }
        }
    }

    fn request(&mut self, build: impl FnOnce(i64, i64) -> Vec<u8>) -> Result<i64, ArchiveError> {
        let k = self.correlation_id();
        let m = build(self.control_session_id, k);
        self.send(&m)?;
        Ok(k)
    }

    fn call(&mut self, build: impl FnOnce(i64, i64) -> Vec<u8>) -> Result<i64, ArchiveError> {
        let k = self.request(build)?;
        self.await_ok(k)
    }

    /// Records `channel`/`stream_id`; returns the recording subscription's id.
    pub fn start_recording(
        &mut self,
        channel: &str,
        stream_id: i32,
        source_location: i32,
        auto_stop: bool,
    ) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            StartRecordingRequest2 {
                control_session_id: c,
                correlation_id: k,
                stream_id,
                source_location,
                auto_stop: auto_stop as i32,
                channel: channel.into(),
            }
            .encode()
        })
    }

    /// Records `channel`/`stream_id` onto the end of `recording_id`.
    pub fn extend_recording(
        &mut self,
        recording_id: i64,
        channel: &str,
        stream_id: i32,
        source_location: i32,
        auto_stop: bool,
    ) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            ExtendRecordingRequest2 {
                control_session_id: c,
                correlation_id: k,
                recording_id,
                stream_id,
                source_location,
                auto_stop: auto_stop as i32,
                channel: channel.into(),
            }
            .encode()
        })
    }

    /// Stops recording `channel`/`stream_id`.
    pub fn stop_recording(&mut self, channel: &str, stream_id: i32) -> Result<(), ArchiveError> {
        self.call(|c, k| {
            StopRecordingRequest {
                control_session_id: c,
                correlation_id: k,
                stream_id,
                channel: channel.into(),
            }
            .encode()
        })
        .map(|_| ())
    }

    /// Stops a recording subscription by its id.
    pub fn stop_recording_subscription(
        &mut self,
        subscription_id: i64,
    ) -> Result<(), ArchiveError> {
        self.call(|c, k| {
            StopRecordingSubscriptionRequest {
                control_session_id: c,
                correlation_id: k,
                subscription_id,
            }
            .encode()
        })
        .map(|_| ())
    }

    /// Stops the recording subscription recording `recording_id`; true if one was.
    pub fn stop_recording_by_identity(&mut self, recording_id: i64) -> Result<bool, ArchiveError> {
        self.call(|c, k| {
            StopRecordingByIdentityRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
            }
            .encode()
        })
        .map(|n| n != 0)
    }

    fn collect_descriptors(
        &mut self,
        k: i64,
        count: i32,
    ) -> Result<Vec<RecordingDescriptor>, ArchiveError> {
        let mut out = Vec::new();
        // The timeout is for an archive that stops answering, not for a long
        // listing: each descriptor gives the next one the whole timeout
        // again (as Aeron's client does).
        let mut deadline = Instant::now() + self.ctx.message_timeout;
        while (out.len() as i64) < count as i64 {
            match self.next_answer(k, deadline)? {
                Answer::Descriptor(d) => {
                    out.push(d);
                    deadline = Instant::now() + self.ctx.message_timeout;
                }
                Answer::Signal => {}
                Answer::Response(r) if r.code == response_code::RECORDING_UNKNOWN => break,
                Answer::Response(r) => {
                    return Err(ArchiveError::Archive {
                        code: r.relevant_id,
                        message: r.error_message,
                    })
                }
            }
        }
        Ok(out)
    }

    /// Up to `count` recordings from `from_recording_id` on.
    pub fn list_recordings(
        &mut self,
        from_recording_id: i64,
        count: i32,
    ) -> Result<Vec<RecordingDescriptor>, ArchiveError> {
        let k = self.request(|c, k| {
            ListRecordingsRequest {
                control_session_id: c,
                correlation_id: k,
                from_recording_id,
                record_count: count,
            }
            .encode()
        })?;
        self.collect_descriptors(k, count)
    }

    /// Up to `count` recordings of `stream_id` whose channel contains `channel`.
    pub fn list_recordings_for_uri(
        &mut self,
        from_recording_id: i64,
        count: i32,
        channel: &str,
        stream_id: i32,
    ) -> Result<Vec<RecordingDescriptor>, ArchiveError> {
        let k = self.request(|c, k| {
            ListRecordingsForUriRequest {
                control_session_id: c,
                correlation_id: k,
                from_recording_id,
                record_count: count,
                stream_id,
                channel: channel.into(),
            }
            .encode()
        })?;
        self.collect_descriptors(k, count)
    }

    /// One recording (`None` if unknown).
    pub fn list_recording(
        &mut self,
        recording_id: i64,
    ) -> Result<Option<RecordingDescriptor>, ArchiveError> {
        let k = self.request(|c, k| {
            ListRecordingRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
            }
            .encode()
        })?;
        Ok(self.collect_descriptors(k, 1)?.pop())
    }

    fn position_request(&mut self, template: u16, recording_id: i64) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            let mut m = RecordingPositionRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
            }
            .encode();
            // These requests share one layout: only the template id differs.
            m[2..4].copy_from_slice(&template.to_le_bytes());
            m
        })
    }

    /// The live position of an active recording (−1 if not recording).
    pub fn get_recording_position(&mut self, recording_id: i64) -> Result<i64, ArchiveError> {
        self.position_request(RecordingPositionRequest::TEMPLATE_ID, recording_id)
    }

    /// Where a recording stopped (−1 while it records).
    pub fn get_stop_position(&mut self, recording_id: i64) -> Result<i64, ArchiveError> {
        self.position_request(StopPositionRequest::TEMPLATE_ID, recording_id)
    }

    /// Where a recording starts.
    pub fn get_start_position(&mut self, recording_id: i64) -> Result<i64, ArchiveError> {
        self.position_request(StartPositionRequest::TEMPLATE_ID, recording_id)
    }

    /// The live position if recording, else the stop position.
    pub fn get_max_recorded_position(&mut self, recording_id: i64) -> Result<i64, ArchiveError> {
        self.position_request(MaxRecordedPositionRequest::TEMPLATE_ID, recording_id)
    }

    /// Replays `length` bytes of a recording from `position` (−1: its start)
    /// on `channel`/`stream_id`; returns the replay session id, whose low
    /// 32 bits are the session id of the replay's image.
    pub fn start_replay(
        &mut self,
        recording_id: i64,
        position: i64,
        length: i64,
        channel: &str,
        stream_id: i32,
    ) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            replay_request(
                c,
                k,
                recording_id,
                (position, length),
                None,
                (channel, stream_id),
                NULL_VALUE,
            )
        })
    }

    /// As [`ArchiveClient::start_replay`], never past the value of counter
    /// `limit_counter_id` of the archive's driver: the replay waits for the
    /// counter to move on, and ends where it stood when it is closed.
    pub fn start_bounded_replay(
        &mut self,
        recording_id: i64,
        position: i64,
        length: i64,
        limit_counter_id: i32,
        channel: &str,
        stream_id: i32,
    ) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            replay_request(
                c,
                k,
                recording_id,
                (position, length),
                Some(limit_counter_id),
                (channel, stream_id),
                NULL_VALUE,
            )
        })
    }

    /// Replays over a response channel (`channel` has
    /// `control-mode=response`), as Aeron's client does: the archive answers
    /// over a connection this client's driver opens, so the client needs no
    /// address the archive can reach. `response` is the subscription the
    /// caller added on `channel`/`stream_id` (its registration id and
    /// images). Asks for a replay token, sends the replay request with it on
    /// a request publication of its own that names `response`, and returns
    /// the replay session id once `response` has the replay's image (within
    /// the message timeout). `limit_counter_id` bounds it as in
    /// [`ArchiveClient::start_bounded_replay`].
    #[allow(clippy::too_many_arguments)]
    pub fn start_replay_via_response_channel(
        &mut self,
        client: &Client,
        response: (i64, &SubscriptionShared),
        recording_id: i64,
        position: i64,
        length: i64,
        limit_counter_id: Option<i32>,
        channel: &str,
        stream_id: i32,
    ) -> Result<i64, ArchiveError> {
        use sulis_protocol::uri::ChannelUri;
        let (subscription_id, images) = response;
        if !is_response_channel(channel) {
            return Err(ArchiveError::Client(format!(
                "replay channel '{channel}' is not a response channel (control-mode=response)"
            )));
        }
        let token = self.call(|c, k| {
            ReplayTokenRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
            }
            .encode()
        })?;
        let request_channel = ChannelUri::parse(&self.ctx.control_request_channel)
            .and_then(|u| u.without(&["session-id", "init-term-id", "term-id", "term-offset"]))
            .and_then(|u| u.with("response-correlation-id", &subscription_id.to_string()))
            .and_then(|u| u.with("term-length", "65536"))
            .map_err(|e| ArchiveError::Client(format!("control request channel: {e}")))?
            .to_string();
        let mut requests = client
            .add_exclusive_publication(&request_channel, self.ctx.control_request_stream_id)?;
        let deadline = Instant::now() + self.ctx.message_timeout;
        self.wait_until(deadline, "the replay's request stream to connect", |_| {
            requests.is_connected()
        })?;
        let k = self.correlation_id();
        let message = replay_request(
            self.control_session_id,
            k,
            recording_id,
            (position, length),
            limit_counter_id,
            (channel, stream_id),
            token,
        );
        Self::send_on(&self.ctx, &mut requests, &message)?;
        let replay_session_id = self.await_ok(k)?;
        // The request stream carries the archive's RSP_SETUP back: it stays
        // open until the replay's image is here.
        let deadline = Instant::now() + self.ctx.message_timeout;
        self.wait_until(
            deadline,
            "the replay to connect to the response channel",
            |_| !images.images().is_empty(),
        )?;
        drop(requests);
        Ok(replay_session_id)
    }

    /// Stops every replay of `recording_id` (−1: of every recording).
    pub fn stop_all_replays(&mut self, recording_id: i64) -> Result<(), ArchiveError> {
        self.call(|c, k| {
            StopAllReplaysRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
            }
            .encode()
        })
        .map(|_| ())
    }

    /// The highest recording id from `min_recording_id` on of `stream_id`,
    /// session `session_id`, on a channel containing `channel` (−1: none).
    pub fn find_last_matching_recording(
        &mut self,
        min_recording_id: i64,
        channel: &str,
        stream_id: i32,
        session_id: i32,
    ) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            FindLastMatchingRecordingRequest {
                control_session_id: c,
                correlation_id: k,
                min_recording_id,
                session_id,
                stream_id,
                channel: channel.into(),
            }
            .encode()
        })
    }

    /// Tells the archive the client is alive (nothing is answered).
    pub fn keep_alive(&mut self) -> Result<(), ArchiveError> {
        self.request(|c, k| {
            KeepAliveRequest {
                control_session_id: c,
                correlation_id: k,
            }
            .encode()
        })
        .map(|_| ())
    }

    /// Changes the channel a recording is listed under (its original and
    /// stripped channel): for a recording whose stream moved.
    pub fn update_channel(&mut self, recording_id: i64, channel: &str) -> Result<(), ArchiveError> {
        self.call(|c, k| {
            UpdateChannelRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
                channel: channel.into(),
            }
            .encode()
        })
        .map(|_| ())
    }

    /// Up to `count` of the archive's recording subscriptions from
    /// `pseudo_index` on, of `stream_id` if given, whose channel contains
    /// `channel`: (subscription id, stream id, stripped channel) each.
    pub fn list_recording_subscriptions(
        &mut self,
        pseudo_index: i32,
        count: i32,
        channel: &str,
        stream_id: Option<i32>,
    ) -> Result<Vec<RecordingSubscriptionDescriptor>, ArchiveError> {
        let k = self.request(|c, k| {
            ListRecordingSubscriptionsRequest {
                control_session_id: c,
                correlation_id: k,
                pseudo_index,
                subscription_count: count,
                apply_stream_id: if stream_id.is_some() {
                    boolean_type::TRUE
                } else {
                    boolean_type::FALSE
                },
                stream_id: stream_id.unwrap_or(0),
                channel: channel.into(),
            }
            .encode()
        })?;
        let deadline = Instant::now() + self.ctx.message_timeout;
        let mut out = Vec::new();
        while out.len() < count.max(0) as usize {
            let m = self.next_message(deadline, "the archive's recording subscriptions")?;
            let Ok(h) = Header::decode(&m) else { continue };
            let protocol = |e: sulis_protocol::sbe::SbeError| ArchiveError::Protocol(e.message);
            match h.template_id {
                RecordingSubscriptionDescriptor::TEMPLATE_ID => {
                    let d = RecordingSubscriptionDescriptor::decode(&m).map_err(protocol)?;
                    if d.control_session_id == self.control_session_id && d.correlation_id == k {
                        out.push(d);
                    }
                }
                ControlResponse::TEMPLATE_ID => {
                    let r = ControlResponse::decode(&m).map_err(protocol)?;
                    if r.control_session_id != self.control_session_id || r.correlation_id != k {
                        self.backlog_other(m);
                        continue;
                    }
                    return match r.code {
                        response_code::SUBSCRIPTION_UNKNOWN => Ok(out),
                        _ => Err(ArchiveError::Archive {
                            code: r.relevant_id,
                            message: r.error_message,
                        }),
                    };
                }
                _ => self.backlog_other(m),
            }
        }
        Ok(out)
    }

    /// A message read while waiting for something else that others may
    /// want (signals, errors about earlier requests).
    fn backlog_other(&mut self, m: Vec<u8>) {
        let Ok(h) = Header::decode(&m) else { return };
        match h.template_id {
            RecordingSignalEvent::TEMPLATE_ID => {
                if let Ok(s) = RecordingSignalEvent::decode(&m) {
                    if s.control_session_id == self.control_session_id {
                        self.signals.push_back(s);
                    }
                }
            }
            ControlResponse::TEMPLATE_ID => {
                if let Ok(r) = ControlResponse::decode(&m) {
                    if r.control_session_id == self.control_session_id
                        && r.code == response_code::ERROR
                    {
                        self.errors
                            .push_back((r.correlation_id, r.relevant_id, r.error_message));
                    }
                }
            }
            _ => {}
        }
    }

    /// Stops a replay.
    pub fn stop_replay(&mut self, replay_session_id: i64) -> Result<(), ArchiveError> {
        self.call(|c, k| {
            StopReplayRequest {
                control_session_id: c,
                correlation_id: k,
                replay_session_id,
            }
            .encode()
        })
        .map(|_| ())
    }

    /// Cuts a stopped recording at `position`.
    pub fn truncate_recording(
        &mut self,
        recording_id: i64,
        position: i64,
    ) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            TruncateRecordingRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
                position,
            }
            .encode()
        })
    }

    /// Deletes a stopped recording and its files.
    pub fn purge_recording(&mut self, recording_id: i64) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            PurgeRecordingRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
            }
            .encode()
        })
    }

    /// Moves a recording's start to a later segment boundary; the segment
    /// files before it stay on disk, detached.
    pub fn detach_segments(
        &mut self,
        recording_id: i64,
        new_start_position: i64,
    ) -> Result<(), ArchiveError> {
        self.call(|c, k| {
            DetachSegmentsRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
                new_start_position,
            }
            .encode()
        })
        .map(|_| ())
    }

    /// Deletes a recording's detached segment files; returns how many.
    pub fn delete_detached_segments(&mut self, recording_id: i64) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            DeleteDetachedSegmentsRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
            }
            .encode()
        })
    }

    /// Detaches and deletes the segment files before `new_start_position`; returns how many.
    pub fn purge_segments(
        &mut self,
        recording_id: i64,
        new_start_position: i64,
    ) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            PurgeSegmentsRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
                new_start_position,
            }
            .encode()
        })
    }

    /// Attaches the detached segment files still on disk; returns how many.
    pub fn attach_segments(&mut self, recording_id: i64) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            AttachSegmentsRequest {
                control_session_id: c,
                correlation_id: k,
                recording_id,
            }
            .encode()
        })
    }

    /// Moves the segment files of a stopped recording to one it joins end to
    /// start (at a segment boundary); returns how many files moved.
    pub fn migrate_segments(
        &mut self,
        src_recording_id: i64,
        dst_recording_id: i64,
    ) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            MigrateSegmentsRequest {
                control_session_id: c,
                correlation_id: k,
                src_recording_id,
                dst_recording_id,
            }
            .encode()
        })
    }

    /// Asks this archive to copy recording `src_recording_id` of the archive
    /// at `src_control_channel`/`src_control_stream_id` (ReplicateRequest2);
    /// returns the replication id, the correlation id of the signals that
    /// follow (REPLICATE, EXTEND, STOP, SYNC, REPLICATE_END).
    pub fn replicate(&mut self, r: &Replication) -> Result<i64, ArchiveError> {
        self.call(|c, k| {
            ReplicateRequest2 {
                control_session_id: c,
                correlation_id: k,
                src_recording_id: r.src_recording_id,
                dst_recording_id: r.dst_recording_id,
                stop_position: r.stop_position,
                channel_tag_id: r.channel_tag_id,
                subscription_tag_id: r.subscription_tag_id,
                src_control_stream_id: r.src_control_stream_id,
                file_io_max_length: NULL_VALUE as i32,
                replication_session_id: r.replication_session_id,
                src_control_channel: r.src_control_channel.clone(),
                live_destination: r.live_destination.clone(),
                replication_channel: r.replication_channel.clone(),
                encoded_credentials: r.credentials.clone(),
                src_response_channel: r.src_response_channel.clone(),
            }
            .encode()
        })
    }

    /// Stops a replication.
    pub fn stop_replication(&mut self, replication_id: i64) -> Result<(), ArchiveError> {
        self.call(|c, k| {
            StopReplicationRequest {
                control_session_id: c,
                correlation_id: k,
                replication_id,
            }
            .encode()
        })
        .map(|_| ())
    }

    /// Reads what is waiting and returns the recording signals received so far.
    pub fn poll_signals(&mut self) -> Vec<RecordingSignalEvent> {
        self.read_waiting();
        self.signals.drain(..).collect()
    }

    /// Reads what is waiting: signals and errors for this session are kept
    /// for `poll_signals` and `poll_errors`.
    fn read_waiting(&mut self) {
        // A harmless read: anything for this session joins the backlog or signals.
        let deadline = Instant::now();
        while let Ok(m) = self.next_message(deadline, "signals") {
            if let Ok(h) = Header::decode(&m) {
                if h.template_id == ControlResponse::TEMPLATE_ID {
                    if let Ok(r) = ControlResponse::decode(&m) {
                        if r.control_session_id == self.control_session_id
                            && r.code == response_code::ERROR
                        {
                            self.errors.push_back((
                                r.correlation_id,
                                r.relevant_id,
                                r.error_message,
                            ));
                        }
                    }
                }
                if h.template_id == RecordingSignalEvent::TEMPLATE_ID {
                    if let Ok(s) = RecordingSignalEvent::decode(&m) {
                        if s.control_session_id == self.control_session_id {
                            self.signals.push_back(s);
                        }
                    }
                }
            }
        }
    }

    /// Errors the archive sent about earlier requests since the last call
    /// (a recording that stopped on a write error, a replay that met a
    /// corrupt segment): (correlation id, error code, message).
    pub fn poll_errors(&mut self) -> Vec<(i64, i64, String)> {
        // Signals read on the way stay queued for poll_signals.
        self.read_waiting();
        self.errors.drain(..).collect()
    }

    /// Waits until a signal `signal` for `recording_id` (any if −1) arrives;
    /// returns it. Other signals stay queued. Waits up to the message timeout.
    pub fn await_signal(
        &mut self,
        recording_id: i64,
        signal: i32,
    ) -> Result<RecordingSignalEvent, ArchiveError> {
        self.await_signal_within(recording_id, signal, self.ctx.message_timeout)
    }

    /// [`Self::await_signal`] waiting up to `timeout`: a signal that ends
    /// work of unbounded length (REPLICATE_END of a large recording) may come
    /// long after the archive answered the request.
    pub fn await_signal_within(
        &mut self,
        recording_id: i64,
        signal: i32,
        timeout: Duration,
    ) -> Result<RecordingSignalEvent, ArchiveError> {
        let deadline = Instant::now() + timeout;
        loop {
            let hit = self.signals.iter().position(|s| {
                s.signal == signal && (recording_id == NULL_VALUE || s.recording_id == recording_id)
            });
            if let Some(i) = hit {
                return Ok(self.signals.remove(i).expect("found"));
            }
            // Reading with an answer nobody waits for collects signals.
            match self.next_answer(i64::MIN, deadline) {
                Ok(_) => {}
                Err(ArchiveError::Timeout(_)) => {
                    return Err(ArchiveError::Timeout(format!(
                        "timed out after {timeout:?} waiting for signal {signal} of recording {recording_id}"
                    )))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Closes the control session.
    pub fn close(&mut self) {
        if self.control_session_id != NULL_VALUE {
            let m = CloseSessionRequest {
                control_session_id: self.control_session_id,
            }
            .encode();
            let _ = self.requests.offer(&m);
            self.control_session_id = NULL_VALUE;
        }
    }
}

impl Drop for ArchiveClient {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_channels_get_aerons_term_length_and_sparse_unless_they_name_their_own() {
        let mut ctx = ArchiveClientContext {
            control_response_channel: "aeron:udp?endpoint=localhost:0|term-length=1m|sparse=false"
                .into(),
            ..ArchiveClientContext::default()
        };
        apply_control_defaults(&mut ctx).unwrap();
        assert_eq!(
            ctx.control_request_channel,
            "aeron:ipc?term-length=65536|sparse=true"
        );
        assert_eq!(
            ctx.control_response_channel,
            "aeron:udp?endpoint=localhost:0|term-length=1m|sparse=false"
        );
    }
}
