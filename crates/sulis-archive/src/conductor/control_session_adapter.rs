//! Control requests in (Aeron's `ControlSessionAdapter`): fragments from the
//! control subscriptions, connect requests that open sessions, and requests
//! that are checked (the stream that opened the session, the authoriser)
//! before they are decoded and carried out.

use super::*;

/// Control fragments read per subscription and duty cycle.
pub(super) const CONTROL_FRAGMENT_LIMIT: usize = 10;

impl ArchiveConductor {
    pub(super) fn poll_control(&mut self, now_ns: i64) -> usize {
        let mut messages: Vec<(usize, i32, Vec<u8>)> = Vec::new();
        for (i, sub) in self.control.iter_mut().enumerate() {
            let assembler = &mut self.assemblers[i];
            let _ = sub.poll(
                |payload, header| {
                    if FragmentAssembler::is_unfragmented(header) {
                        messages.push((i, header.session_id(), payload.to_vec()));
                    } else if let Some(m) = assembler.on_fragment(payload, header) {
                        messages.push((i, header.session_id(), m.payload));
                    }
                    Ok::<(), ()>(())
                },
                CONTROL_FRAGMENT_LIMIT,
            );
        }
        let work = messages.len();
        for (sub, image_session, m) in messages {
            self.on_control_message(sub, image_session, &m, now_ns);
        }
        work
    }

    pub(super) fn on_control_message(
        &mut self,
        sub: usize,
        image_session: i32,
        m: &[u8],
        now_ns: i64,
    ) {
        let header = match control_header(m) {
            Ok(h) => h,
            Err(e) => return self.record_error(format!("control message dropped: {e}")),
        };
        match header.template_id {
            AuthConnectRequest::TEMPLATE_ID => match AuthConnectRequest::decode(m) {
                Ok(r) => self.on_connect(
                    sub,
                    image_session,
                    r.correlation_id,
                    r.response_stream_id,
                    r.version,
                    &r.response_channel,
                    r.encoded_credentials,
                    now_ns,
                ),
                Err(e) => self.record_error(format!("connect request dropped: {e}")),
            },
            ConnectRequest::TEMPLATE_ID => match ConnectRequest::decode(m) {
                Ok(r) => self.on_connect(
                    sub,
                    image_session,
                    r.correlation_id,
                    r.response_stream_id,
                    r.version,
                    &r.response_channel,
                    Vec::new(),
                    now_ns,
                ),
                Err(e) => self.record_error(format!("connect request dropped: {e}")),
            },
            _ => self.on_request(sub, image_session, header.template_id, m, now_ns),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_connect(
        &mut self,
        sub: usize,
        image_session: i32,
        correlation_id: i64,
        response_stream_id: i32,
        version: i32,
        response_channel: &str,
        credentials: Vec<u8>,
        now_ns: i64,
    ) {
        let channel = match response_publication_channel(response_channel, &self.ctx) {
            Ok(c) => c,
            Err(e) => {
                return self.record_error(format!(
                    "connect request {correlation_id}: response channel '{response_channel}': {e}"
                ))
            }
        };
        // A response channel: answer over the connection the request came
        // in on (the client's driver opened it; no client address needed).
        let channel = match self.answer_over_request_image(&channel, sub, image_session) {
            Ok(c) => c,
            Err(e) => return self.record_error(format!("connect request {correlation_id}: {e}")),
        };
        let publication = match self.client.add_exclusive_publication(&channel, response_stream_id) {
            Ok(p) => p,
            Err(e) => {
                return self.record_error(format!(
                    "connect request {correlation_id}: cannot publish responses on '{channel}' stream {response_stream_id}: {e}"
                ))
            }
        };
        let id = self.next_session_id;
        self.next_session_id += 1;
        let invalid_version = (version >> 16 != 1).then(|| {
            format!(
                "invalid client version {}, archive is {}",
                version_string(version),
                version_string(PROTOCOL_VERSION)
            )
        });
        let counter = self
            .client
            .add_counter(
                counter_type::ARCHIVE_CONTROL_SESSION,
                &[self.archive_id.to_le_bytes(), id.to_le_bytes()].concat(),
                &format!(
                    "control-session: sessionId={image_session} - archiveId={}",
                    self.archive_id
                ),
            )
            .ok();
        if let Some(c) = &counter {
            c.set(id);
        }
        let mut session = ControlSession::new(
            id,
            correlation_id,
            Box::new(publication),
            sub,
            image_session,
            invalid_version,
            credentials,
            now_ns,
            &self.session_timeouts(),
        );
        session._counter = counter;
        self.sessions.insert(id, session);
    }

    /// Sessions the authenticator refused so far.
    pub fn rejected_sessions(&self) -> u64 {
        self.rejected_sessions
    }

    pub(super) fn on_request(
        &mut self,
        sub: usize,
        image_session: i32,
        template_id: u16,
        m: &[u8],
        now_ns: i64,
    ) {
        // Every request starts with the control session id, and all but
        // CloseSessionRequest with a correlation id after it.
        if m.len() < 8 + 8 {
            return self.record_error(format!(
                "control message (template {template_id}) of {} bytes dropped: too short for a request",
                m.len()
            ));
        }
        let session_id = i64::from_le_bytes(m[8..16].try_into().unwrap());
        let correlation_id = if m.len() >= 24 {
            i64::from_le_bytes(m[16..24].try_into().unwrap())
        } else {
            NULL_VALUE
        };
        if matches!(
            template_id,
            ReplayRequest::TEMPLATE_ID | BoundedReplayRequest::TEMPLATE_ID
        ) {
            match replay_token_of(template_id, m) {
                Ok(Some(token)) => {
                    return self.on_token_replay(sub, image_session, template_id, m, token, now_ns)
                }
                Ok(None) => {}
                Err(e) => return self.record_error(format!("replay request dropped: {e}")),
            }
        }
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return self.record_error(format!(
                "request (template {template_id}, correlation {correlation_id}) for unknown control session {session_id} dropped"
            ));
        };
        // A session is its client's: requests naming it count only from the
        // stream that opened it (Aeron drops those of another image).
        if session.control_subscription != sub || session.request_session_id != image_session {
            let opened_by = session.request_session_id;
            return self.record_error(format!(
                "request (template {template_id}, correlation {correlation_id}) for control session {session_id} \
                 came from stream session {image_session}, not {opened_by} that opened it: dropped"
            ));
        }
        if template_id == ChallengeResponse::TEMPLATE_ID
            && session.state == SessionState::Challenged
        {
            match ChallengeResponse::decode(m) {
                Ok(r) => {
                    let decision = self
                        .authenticator
                        .on_challenge_response(session_id, &r.encoded_credentials);
                    let accepted = decision == Decision::Accept;
                    self.session(session_id).on_challenge_answered(
                        correlation_id,
                        accepted,
                        now_ns,
                    );
                    if !accepted {
                        self.rejected_sessions += 1;
                        let n = self.rejected_sessions;
                        self.record_error(format!(
                            "control session {session_id}: challenge answered wrongly, authentication rejected ({n} so far)"
                        ));
                    }
                }
                Err(e) => self.record_error(format!("challenge response dropped: {e}")),
            }
            return;
        }
        // Requests before the session is connected are dropped, as Aeron's.
        if !session.on_request(now_ns) {
            return;
        }
        let name = template_name(template_id).unwrap_or("unknown request");
        let principal = &self.sessions[&session_id].credentials;
        if !self.authoriser.is_authorised(principal, template_id, name) {
            let message = format!("unauthorised action: {name}");
            self.session(session_id).error(
                correlation_id,
                error_code::UNAUTHORISED_ACTION,
                &message,
            );
            return self.record_error(format!("control session {session_id}: {message} refused"));
        }
        if let Err(e) = self.dispatch(template_id, m, session_id, correlation_id) {
            let message = format!("malformed request: {e}");
            if let Some(s) = self.sessions.get_mut(&session_id) {
                s.error(correlation_id, error_code::GENERIC, &message);
            }
            self.record_error(format!("control session {session_id}: {message}"));
        }
    }

    /// A replay or bounded replay request of session `sid`, on `channel` in
    /// place of the request's replay channel if given.
    fn replay_request(
        &mut self,
        template_id: u16,
        m: &[u8],
        sid: i64,
        k: i64,
        channel: Option<String>,
    ) -> Result<(), SbeError> {
        match template_id {
            ReplayRequest::TEMPLATE_ID => {
                let r = ReplayRequest::decode(m)?;
                let p = ReplayParams {
                    recording_id: r.recording_id,
                    position: r.position,
                    length: r.length,
                    replay_channel: channel.unwrap_or(r.replay_channel),
                    replay_stream_id: r.replay_stream_id,
                    file_io_max_length: r.file_io_max_length,
                    limit_counter: None,
                };
                self.start_replay(sid, k, p);
            }
            BoundedReplayRequest::TEMPLATE_ID => {
                let r = BoundedReplayRequest::decode(m)?;
                // Bounded by its length and by a counter of this archive's
                // driver (a commit position, as Aeron Cluster's followers use).
                let counters = self.client.counters();
                let id = r.limit_counter_id;
                if !counters.is_valid_id(id)
                    || counters.counter_state(id) != sulis_concurrent::counters::RECORD_ALLOCATED
                {
                    self.session(sid).error(
                        k,
                        error_code::GENERIC,
                        &format!("limit counter id {id} is not a counter of this archive's driver"),
                    );
                    return Ok(());
                }
                let limit = LimitCounter {
                    id,
                    registration_id: counters.counter_registration_id(id),
                    last: counters.counter_value(id),
                    open: true,
                };
                let p = ReplayParams {
                    recording_id: r.recording_id,
                    position: r.position,
                    length: r.length,
                    replay_channel: channel.unwrap_or(r.replay_channel),
                    replay_stream_id: r.replay_stream_id,
                    file_io_max_length: r.file_io_max_length,
                    limit_counter: Some(limit),
                };
                self.start_replay(sid, k, p);
            }
            _ => unreachable!("a replay request"),
        }
        Ok(())
    }

    /// A replay request over a response channel: it comes on a request
    /// stream of its own, and its token (not the stream, not the session id
    /// it names) says which control session it is for. An unknown or expired
    /// token gets no answer, as in Aeron: logged and counted only.
    fn on_token_replay(
        &mut self,
        sub: usize,
        image_session: i32,
        template_id: u16,
        m: &[u8],
        token: i64,
        now_ns: i64,
    ) {
        let (recording_id, k, channel) = match template_id {
            ReplayRequest::TEMPLATE_ID => match ReplayRequest::decode(m) {
                Ok(r) => (r.recording_id, r.correlation_id, r.replay_channel),
                Err(e) => return self.record_error(format!("replay request dropped: {e}")),
            },
            _ => match BoundedReplayRequest::decode(m) {
                Ok(r) => (r.recording_id, r.correlation_id, r.replay_channel),
                Err(e) => return self.record_error(format!("replay request dropped: {e}")),
            },
        };
        let Some(sid) = self
            .replay_tokens
            .session_for(token, recording_id, now_ns)
            .filter(|s| self.sessions.contains_key(s))
        else {
            return self.record_error(format!(
                "Unknown session or token timeout for replayToken={token}: replay request (correlation {k}) \
                 of recording {recording_id} from stream session {image_session} dropped"
            ));
        };
        if !self.session(sid).on_request(now_ns) {
            return;
        }
        let name = template_name(template_id).unwrap_or("replay request");
        if !self
            .authoriser
            .is_authorised(&self.sessions[&sid].credentials, template_id, name)
        {
            let message = format!("unauthorised action: {name}");
            self.session(sid)
                .error(k, error_code::UNAUTHORISED_ACTION, &message);
            return self.record_error(format!("control session {sid}: {message} refused"));
        }
        let channel = match self.answer_over_request_image(&channel, sub, image_session) {
            Ok(c) => c,
            Err(e) => {
                let message = format!("replay channel '{channel}': {e}");
                self.session(sid).error(k, error_code::GENERIC, &message);
                return self.record_error(format!("control session {sid}: {message}"));
            }
        };
        if let Err(e) = self.replay_request(template_id, m, sid, k, Some(channel)) {
            self.record_error(format!(
                "control session {sid}: malformed replay request: {e}"
            ));
        }
    }

    /// `channel` as the archive publishes on it to answer whoever sent on
    /// stream session `image_session` of control subscription `sub`: for a
    /// response channel (`control-mode=response`), with the
    /// `response-correlation-id` of that request image, so that the answer
    /// goes back over the connection the requester's driver opened; any
    /// other channel as it is.
    pub(super) fn answer_over_request_image(
        &mut self,
        channel: &str,
        sub: usize,
        image_session: i32,
    ) -> Result<String, String> {
        let uri = sulis_protocol::uri::ChannelUri::parse(channel).map_err(|e| e.to_string())?;
        if !uri.is_response() {
            return Ok(channel.to_string());
        }
        let image = self.control[sub]
            .images()
            .into_iter()
            .find(|i| i.session_id() == image_session)
            .ok_or_else(|| {
                format!("response channel: the request stream (session {image_session}) is gone")
            })?;
        uri.with(
            "response-correlation-id",
            &image.correlation_id().to_string(),
        )
        .map(|u| u.to_string())
        .map_err(|e| e.to_string())
    }

    pub(super) fn session(&mut self, id: i64) -> &mut ControlSession {
        self.sessions
            .get_mut(&id)
            .expect("request from a live session")
    }

    pub(super) fn dispatch(
        &mut self,
        template_id: u16,
        m: &[u8],
        sid: i64,
        k: i64,
    ) -> Result<(), SbeError> {
        match template_id {
            KeepAliveRequest::TEMPLATE_ID => {
                KeepAliveRequest::decode(m)?;
            }
            CloseSessionRequest::TEMPLATE_ID => {
                self.session(sid).state = SessionState::Done;
            }
            ArchiveIdRequest::TEMPLATE_ID => {
                ArchiveIdRequest::decode(m)?;
                let id = self.archive_id;
                self.session(sid).ok(k, id);
            }
            StartRecordingRequest::TEMPLATE_ID => {
                let r = StartRecordingRequest::decode(m)?;
                self.start_recording(StartRecording {
                    control_session_id: sid,
                    correlation_id: k,
                    stream_id: r.stream_id,
                    channel: r.channel,
                    auto_stop: false,
                    extend: None,
                    local: r.source_location == source_location::LOCAL,
                });
            }
            StartRecordingRequest2::TEMPLATE_ID => {
                let r = StartRecordingRequest2::decode(m)?;
                self.start_recording(StartRecording {
                    control_session_id: sid,
                    correlation_id: k,
                    stream_id: r.stream_id,
                    channel: r.channel,
                    auto_stop: r.auto_stop == boolean_type::TRUE,
                    extend: None,
                    local: r.source_location == source_location::LOCAL,
                });
            }
            ExtendRecordingRequest::TEMPLATE_ID => {
                let r = ExtendRecordingRequest::decode(m)?;
                let local = r.source_location == source_location::LOCAL;
                self.extend_recording(sid, k, r.recording_id, r.stream_id, r.channel, false, local);
            }
            ExtendRecordingRequest2::TEMPLATE_ID => {
                let r = ExtendRecordingRequest2::decode(m)?;
                let auto_stop = r.auto_stop == boolean_type::TRUE;
                let local = r.source_location == source_location::LOCAL;
                self.extend_recording(
                    sid,
                    k,
                    r.recording_id,
                    r.stream_id,
                    r.channel,
                    auto_stop,
                    local,
                );
            }
            StopRecordingRequest::TEMPLATE_ID => {
                let r = StopRecordingRequest::decode(m)?;
                let key = recording_key(&r.channel, r.stream_id).ok();
                let found = key.and_then(|key| {
                    self.recording_subscriptions
                        .iter()
                        .position(|s| s.key == key && !s.closing)
                });
                match found {
                    Some(i) => {
                        self.stop_recording_subscription(i);
                        self.session(sid).ok(k, 0);
                    }
                    None => self.session(sid).error(
                        k,
                        error_code::UNKNOWN_SUBSCRIPTION,
                        &format!(
                            "no recording subscription for stream {} on '{}'",
                            r.stream_id, r.channel
                        ),
                    ),
                }
            }
            StopRecordingSubscriptionRequest::TEMPLATE_ID => {
                let r = StopRecordingSubscriptionRequest::decode(m)?;
                match self.recording_subscriptions.iter().position(|s| {
                    s.subscription.registration_id() == r.subscription_id && !s.closing
                }) {
                    Some(i) => {
                        self.stop_recording_subscription(i);
                        self.session(sid).ok(k, 0);
                    }
                    None => self.session(sid).error(
                        k,
                        error_code::UNKNOWN_SUBSCRIPTION,
                        &format!("unknown recording subscription {}", r.subscription_id),
                    ),
                }
            }
            StopRecordingByIdentityRequest::TEMPLATE_ID => {
                let r = StopRecordingByIdentityRequest::decode(m)?;
                if self.catalog.recording(r.recording_id).is_none() {
                    self.unknown_recording(sid, k, r.recording_id);
                    return Ok(());
                }
                let sub = self
                    .active_recordings
                    .get(&r.recording_id)
                    .map(|a| a.subscription_id);
                let stopped = match sub.and_then(|id| {
                    self.recording_subscriptions
                        .iter()
                        .position(|s| s.subscription.registration_id() == id)
                }) {
                    Some(i) => {
                        self.stop_recording_subscription(i);
                        1
                    }
                    None => 0,
                };
                self.session(sid).ok(k, stopped);
            }
            ListRecordingsRequest::TEMPLATE_ID => {
                let r = ListRecordingsRequest::decode(m)?;
                self.list(sid, k, r.from_recording_id, r.record_count, ListFilter::All);
            }
            ListRecordingsForUriRequest::TEMPLATE_ID => {
                let r = ListRecordingsForUriRequest::decode(m)?;
                let filter = ListFilter::ForUri {
                    stream_id: r.stream_id,
                    fragment: strip_channel(&r.channel).unwrap_or(r.channel.clone()),
                };
                self.list(sid, k, r.from_recording_id, r.record_count, filter);
            }
            ListRecordingSubscriptionsRequest::TEMPLATE_ID => {
                let r = ListRecordingSubscriptionsRequest::decode(m)?;
                self.list_recording_subscriptions(sid, k, r);
            }
            ListRecordingRequest::TEMPLATE_ID => {
                let r = ListRecordingRequest::decode(m)?;
                match self
                    .catalog
                    .entry_ref(r.recording_id)
                    .filter(|e| e.state() == recording_state::VALID)
                {
                    Some(e) => {
                        let bytes = e.descriptor_message(sid, k);
                        self.session(sid).queue(bytes);
                    }
                    None => self.session(sid).respond(
                        k,
                        r.recording_id,
                        response_code::RECORDING_UNKNOWN,
                        "",
                    ),
                }
            }
            FindLastMatchingRecordingRequest::TEMPLATE_ID => {
                let r = FindLastMatchingRecordingRequest::decode(m)?;
                if r.min_recording_id < 0 {
                    self.session(sid).error(
                        k,
                        error_code::UNKNOWN_RECORDING,
                        &format!("min recording id {} is negative", r.min_recording_id),
                    );
                    return Ok(());
                }
                let fragment = strip_channel(&r.channel).unwrap_or(r.channel.clone());
                // From the newest back, each entry read in place.
                let found = self
                    .catalog
                    .entries_from(r.min_recording_id)
                    .rev()
                    .find(|e| {
                        e.state() == recording_state::VALID
                            && e.session_id() == r.session_id
                            && e.stream_id() == r.stream_id
                            && e.stripped_channel()
                                .is_some_and(|c| c.contains(fragment.as_str()))
                    })
                    .map_or(NULL_VALUE, |e| e.recording_id());
                self.session(sid).ok(k, found);
            }
            RecordingPositionRequest::TEMPLATE_ID => {
                let r = RecordingPositionRequest::decode(m)?;
                if self.catalog.recording(r.recording_id).is_none() {
                    self.unknown_recording(sid, k, r.recording_id);
                    return Ok(());
                }
                let live = self.live_position(r.recording_id).unwrap_or(NULL_VALUE);
                self.session(sid).ok(k, live);
            }
            StopPositionRequest::TEMPLATE_ID => {
                let r = StopPositionRequest::decode(m)?;
                match self.catalog.recording(r.recording_id) {
                    Some(d) => self.session(sid).ok(k, d.stop_position),
                    None => self.unknown_recording(sid, k, r.recording_id),
                }
            }
            StartPositionRequest::TEMPLATE_ID => {
                let r = StartPositionRequest::decode(m)?;
                match self.catalog.recording(r.recording_id) {
                    Some(d) => self.session(sid).ok(k, d.start_position),
                    None => self.unknown_recording(sid, k, r.recording_id),
                }
            }
            MaxRecordedPositionRequest::TEMPLATE_ID => {
                let r = MaxRecordedPositionRequest::decode(m)?;
                match self.catalog.recording(r.recording_id) {
                    Some(d) => {
                        let p = self
                            .live_position(r.recording_id)
                            .unwrap_or(d.stop_position);
                        self.session(sid).ok(k, p);
                    }
                    None => self.unknown_recording(sid, k, r.recording_id),
                }
            }
            ReplayRequest::TEMPLATE_ID | BoundedReplayRequest::TEMPLATE_ID => {
                self.replay_request(template_id, m, sid, k, None)?;
            }
            ReplayTokenRequest::TEMPLATE_ID => {
                let r = ReplayTokenRequest::decode(m)?;
                if self.catalog.recording(r.recording_id).is_none() {
                    self.unknown_recording(sid, k, r.recording_id);
                } else {
                    let deadline_ns = self.now_ns() + self.session_timeouts().connect_ns;
                    let token = self.replay_tokens.issue(sid, r.recording_id, deadline_ns);
                    self.session(sid).ok(k, token);
                }
            }
            StopReplayRequest::TEMPLATE_ID => {
                let r = StopReplayRequest::decode(m)?;
                self.stop_replays(|id, _| id == r.replay_session_id);
                self.session(sid).ok(k, 0);
            }
            StopAllReplaysRequest::TEMPLATE_ID => {
                let r = StopAllReplaysRequest::decode(m)?;
                let recording_id = r.recording_id;
                self.stop_replays(|_, of| recording_id == NULL_VALUE || of == recording_id);
                self.session(sid).ok(k, 0);
            }
            TruncateRecordingRequest::TEMPLATE_ID => {
                let r = TruncateRecordingRequest::decode(m)?;
                self.truncate(sid, k, r.recording_id, r.position);
            }
            PurgeRecordingRequest::TEMPLATE_ID => {
                let r = PurgeRecordingRequest::decode(m)?;
                self.purge(sid, k, r.recording_id);
            }
            DetachSegmentsRequest::TEMPLATE_ID => {
                let r = DetachSegmentsRequest::decode(m)?;
                if self.detach_segments(sid, k, r.recording_id, r.new_start_position) {
                    self.session(sid).ok(k, 0);
                }
            }
            DeleteDetachedSegmentsRequest::TEMPLATE_ID => {
                let r = DeleteDetachedSegmentsRequest::decode(m)?;
                self.delete_detached_segments(sid, k, r.recording_id);
            }
            PurgeSegmentsRequest::TEMPLATE_ID => {
                let r = PurgeSegmentsRequest::decode(m)?;
                if self.detach_segments(sid, k, r.recording_id, r.new_start_position) {
                    self.delete_detached_segments(sid, k, r.recording_id);
                }
            }
            AttachSegmentsRequest::TEMPLATE_ID => {
                let r = AttachSegmentsRequest::decode(m)?;
                self.attach_segments(sid, k, r.recording_id);
            }
            MigrateSegmentsRequest::TEMPLATE_ID => {
                let r = MigrateSegmentsRequest::decode(m)?;
                self.migrate_segments(sid, k, r.src_recording_id, r.dst_recording_id);
            }
            ReplicateRequest::TEMPLATE_ID | TaggedReplicateRequest::TEMPLATE_ID => {
                // The pre-1.33 requests.
                let (src, dst, stream, channel, live, tags) =
                    if template_id == ReplicateRequest::TEMPLATE_ID {
                        let r = ReplicateRequest::decode(m)?;
                        let c = r.src_control_channel;
                        (
                            r.src_recording_id,
                            r.dst_recording_id,
                            r.src_control_stream_id,
                            c,
                            r.live_destination,
                            (NULL_VALUE, NULL_VALUE),
                        )
                    } else {
                        let r = TaggedReplicateRequest::decode(m)?;
                        let c = r.src_control_channel;
                        (
                            r.src_recording_id,
                            r.dst_recording_id,
                            r.src_control_stream_id,
                            c,
                            r.live_destination,
                            (r.channel_tag_id, r.subscription_tag_id),
                        )
                    };
                let p = replication::ReplicateParams::before_1_33(
                    src, dst, stream, channel, live, tags,
                );
                self.on_replicate(sid, k, p);
            }
            ReplicateRequest2::TEMPLATE_ID => {
                let r = ReplicateRequest2::decode(m)?;
                self.on_replicate(
                    sid,
                    k,
                    replication::ReplicateParams {
                        src_recording_id: r.src_recording_id,
                        dst_recording_id: r.dst_recording_id,
                        stop_position: r.stop_position,
                        src_control_stream_id: r.src_control_stream_id,
                        src_control_channel: r.src_control_channel,
                        live_destination: r.live_destination,
                        replication_channel: r.replication_channel,
                        replication_session_id: r.replication_session_id,
                        credentials: r.encoded_credentials,
                        src_response_channel: r.src_response_channel,
                        channel_tag_id: r.channel_tag_id,
                        subscription_tag_id: r.subscription_tag_id,
                    },
                );
            }
            UpdateChannelRequest::TEMPLATE_ID => {
                let r = UpdateChannelRequest::decode(m)?;
                self.update_channel(sid, k, r.recording_id, &r.channel);
            }
            StopReplicationRequest::TEMPLATE_ID => {
                let r = StopReplicationRequest::decode(m)?;
                self.on_stop_replication(sid, k, r.replication_id);
            }
            other => {
                // An unknown request of a newer client: say so rather than
                // leave it waiting for its timeout.
                self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!("request template id {other} is not supported by this archive"),
                );
            }
        }
        Ok(())
    }
}

/// The response publication's channel: the client's channel with the
/// archive's control term length (unless the client set one) and sparse files.
pub(super) fn response_publication_channel(
    channel: &str,
    ctx: &ArchiveContext,
) -> Result<String, String> {
    let uri = sulis_protocol::uri::ChannelUri::parse(channel).map_err(|e| e.to_string())?;
    if uri.get("endpoint").is_some_and(|e| e.ends_with(":0")) {
        return Err(
            "its endpoint names port 0: a client must send the port its driver bound (Aeron's and sulis's clients do)"
                .into(),
        );
    }
    uri.with_default("term-length", &ctx.control_term_buffer_length.to_string())
        .and_then(|u| u.with_default("sparse", "true"))
        .map(|u| u.to_string())
        .map_err(|e| e.to_string())
}

/// The token of a replay request to honour: one on a replay channel in
/// response mode (elsewhere Aeron ignores it, and so does this archive).
fn replay_token_of(template_id: u16, m: &[u8]) -> Result<Option<i64>, SbeError> {
    let (token, channel) = match template_id {
        ReplayRequest::TEMPLATE_ID => {
            let r = ReplayRequest::decode(m)?;
            (r.replay_token, r.replay_channel)
        }
        _ => {
            let r = BoundedReplayRequest::decode(m)?;
            (r.replay_token, r.replay_channel)
        }
    };
    let response = sulis_protocol::uri::ChannelUri::parse(&channel).is_ok_and(|u| u.is_response());
    Ok((token != NULL_VALUE && response).then_some(token))
}
