//! A control session (Aeron's `ControlSession`): one client's connection,
//! from its connect request through authentication to the requests it
//! makes, with the answers queued for its response publication.
//!
//! ```text
//!   Connecting --publication connected--> authenticator decides
//!       |                                  |-- Accept ------> Authenticated --first request--> Active
//!       |                                  |-- Challenge ---> Challenged --answer--> Authenticated | Rejected
//!       |                                  '-- Reject ------> Rejected (told so every 200 ms)
//!       '--connect timeout--> Done          every state but Active ends at its deadline
//! ```
//!
//! Times are nanoseconds of the archive's [`NanoClock`], so a test steps
//! them by hand.

use super::*;

/// Interval at which an authenticated session's connect answer is resent.
pub(super) const RESEND_INTERVAL_NS: i64 = 200_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SessionState {
    /// Waiting for the response publication to connect.
    Connecting,
    /// Asked the client to answer a challenge.
    Challenged,
    /// Refused: the client is told so until the connect timeout.
    Rejected,
    /// Told the client it is connected; waiting for its first request.
    Authenticated,
    /// Serving requests.
    Active,
    /// To be closed.
    Done,
}

/// Where a session's answers go: its response publication (a fake one in tests).
pub(super) trait ResponseSink: Send {
    /// Offers one message.
    fn offer(&mut self, message: &[u8]) -> Result<(), OfferError>;
    /// The client's response subscription is there.
    fn is_connected(&self) -> bool;
}

impl ResponseSink for ExclusivePublication {
    fn offer(&mut self, message: &[u8]) -> Result<(), OfferError> {
        ExclusivePublication::offer(self, message).map(|_| ())
    }

    fn is_connected(&self) -> bool {
        // The log's state, through the publication it derefs to.
        (**self).is_connected()
    }
}

/// The session's timing settings, in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub(super) struct SessionTimeouts {
    /// How long connecting, authenticating and a failing send may take.
    pub(super) connect_ns: i64,
    /// How often an idle active session is pinged.
    pub(super) ping_interval_ns: i64,
}

pub(super) struct ControlSession {
    pub(super) id: i64,
    pub(super) connect_correlation_id: i64,
    pub(super) publication: Box<dyn ResponseSink>,
    pub(super) state: SessionState,
    pub(super) deadline_ns: i64,
    pub(super) last_send_ns: i64,
    /// Which control subscription and image session the requests come from.
    pub(super) control_subscription: usize,
    pub(super) request_session_id: i32,
    pub(super) invalid_version: Option<String>,
    /// What the client connected with: its principal.
    pub(super) credentials: Vec<u8>,
    pub(super) outbox: VecDeque<Vec<u8>>,
    /// When offers started failing (back pressure or not connected).
    pub(super) send_failing_since_ns: Option<i64>,
    pub(super) _counter: Option<Counter>,
}

impl ControlSession {
    /// A session opened by a connect request at `now_ns`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        id: i64,
        connect_correlation_id: i64,
        publication: Box<dyn ResponseSink>,
        control_subscription: usize,
        request_session_id: i32,
        invalid_version: Option<String>,
        credentials: Vec<u8>,
        now_ns: i64,
        timeouts: &SessionTimeouts,
    ) -> ControlSession {
        ControlSession {
            id,
            connect_correlation_id,
            publication,
            state: SessionState::Connecting,
            deadline_ns: now_ns + timeouts.connect_ns,
            last_send_ns: now_ns - RESEND_INTERVAL_NS,
            control_subscription,
            request_session_id,
            invalid_version,
            credentials,
            outbox: VecDeque::new(),
            send_failing_since_ns: None,
            _counter: None,
        }
    }

    pub(super) fn queue(&mut self, message: Vec<u8>) {
        self.outbox.push_back(message);
    }

    pub(super) fn respond(
        &mut self,
        correlation_id: i64,
        relevant_id: i64,
        code: i32,
        error: &str,
    ) {
        let m = ControlResponse {
            control_session_id: self.id,
            correlation_id,
            relevant_id,
            code,
            version: PROTOCOL_VERSION,
            error_message: error.to_string(),
        };
        self.queue(m.encode());
    }

    pub(super) fn ok(&mut self, correlation_id: i64, relevant_id: i64) {
        self.respond(correlation_id, relevant_id, response_code::OK, "");
    }

    pub(super) fn error(&mut self, correlation_id: i64, code: i64, message: &str) {
        self.respond(correlation_id, code, response_code::ERROR, message);
    }

    /// A request arrived: an authenticated session becomes active (Aeron
    /// takes any request as the client's acknowledgement). False when the
    /// session may not make requests (yet, or at all).
    pub(super) fn on_request(&mut self, now_ns: i64) -> bool {
        match self.state {
            SessionState::Authenticated if self.invalid_version.is_none() => {
                self.state = SessionState::Active;
                self.last_send_ns = now_ns;
                true
            }
            SessionState::Active => true,
            _ => false,
        }
    }

    /// The client answered a challenge; `accepted` is the authenticator's word.
    pub(super) fn on_challenge_answered(
        &mut self,
        correlation_id: i64,
        accepted: bool,
        now_ns: i64,
    ) {
        // Answers now go to the challenge response's correlation id.
        self.connect_correlation_id = correlation_id;
        self.last_send_ns = now_ns - RESEND_INTERVAL_NS;
        self.state = if accepted {
            SessionState::Authenticated
        } else {
            SessionState::Rejected
        };
    }

    /// One duty cycle at `now_ns`: moves the session along its states and
    /// offers what is queued. Returns the work done and whether the
    /// authenticator refused the session in it.
    pub(super) fn do_work(
        &mut self,
        now_ns: i64,
        t: &SessionTimeouts,
        authenticator: &mut dyn Authenticator,
    ) -> (usize, bool) {
        let mut work = 0;
        let mut refused = false;
        if self.state == SessionState::Connecting && self.publication.is_connected() {
            self.deadline_ns = now_ns + t.connect_ns;
            self.state = match authenticator.on_connect(self.id, &self.credentials, "") {
                Decision::Accept => SessionState::Authenticated,
                Decision::Reject => {
                    refused = true;
                    SessionState::Rejected
                }
                Decision::Challenge(challenge) => {
                    let m = Challenge {
                        control_session_id: self.id,
                        correlation_id: self.connect_correlation_id,
                        version: PROTOCOL_VERSION,
                        encoded_challenge: challenge,
                    };
                    self.queue(m.encode());
                    SessionState::Challenged
                }
            };
            work += 1;
        }
        // The new state's answer goes in the same cycle.
        let resend_due = now_ns - self.last_send_ns >= RESEND_INTERVAL_NS && self.outbox.is_empty();
        match self.state {
            SessionState::Connecting => {}
            SessionState::Challenged => {}
            SessionState::Rejected => {
                if resend_due {
                    self.last_send_ns = now_ns;
                    self.respond(
                        self.connect_correlation_id,
                        error_code::AUTHENTICATION_REJECTED,
                        response_code::ERROR,
                        "authentication rejected",
                    );
                }
            }
            SessionState::Authenticated => {
                if resend_due {
                    self.last_send_ns = now_ns;
                    match self.invalid_version.clone() {
                        Some(message) => self.respond(
                            self.connect_correlation_id,
                            self.id,
                            response_code::ERROR,
                            &message,
                        ),
                        None => self.ok(self.connect_correlation_id, self.id),
                    }
                    work += 1;
                }
            }
            SessionState::Active => {
                if now_ns - self.last_send_ns >= t.ping_interval_ns && self.outbox.is_empty() {
                    // A ping asks only whether the client is still there: one
                    // that finds its stream full (an idle client that is not
                    // reading) is dropped, not queued, so pings never fill a
                    // quiet client's stream and get it dropped (Aeron's
                    // issue #1757). A stream with nobody on it ends the session.
                    self.last_send_ns = now_ns;
                    match self.publication.offer(
                        &Ping {
                            control_session_id: self.id,
                        }
                        .encode(),
                    ) {
                        Ok(()) | Err(OfferError::BackPressured) | Err(OfferError::AdminAction) => {
                            self.send_failing_since_ns = None
                        }
                        Err(OfferError::NotConnected) => {
                            let since = *self.send_failing_since_ns.get_or_insert(now_ns);
                            if now_ns - since >= t.connect_ns {
                                self.state = SessionState::Done;
                            }
                        }
                        Err(_) => self.state = SessionState::Done,
                    }
                }
            }
            SessionState::Done => {}
        }
        if self.state != SessionState::Active && now_ns >= self.deadline_ns {
            self.state = SessionState::Done;
        }
        if self.state != SessionState::Done && !self.outbox.is_empty() {
            work += 1;
            if !self.flush(now_ns, t.connect_ns) {
                self.state = SessionState::Done;
            }
        }
        (work, refused)
    }

    /// Offers what is queued; false once the session should end (the
    /// client stopped reading or went away for `timeout_ns`).
    fn flush(&mut self, now_ns: i64, timeout_ns: i64) -> bool {
        while let Some(m) = self.outbox.front() {
            match self.publication.offer(m) {
                Ok(()) => {
                    self.outbox.pop_front();
                    self.send_failing_since_ns = None;
                }
                Err(OfferError::AdminAction) => continue,
                Err(OfferError::BackPressured) | Err(OfferError::NotConnected) => {
                    let since = *self.send_failing_since_ns.get_or_insert(now_ns);
                    return now_ns - since < timeout_ns;
                }
                Err(_) => return false,
            }
        }
        true
    }
}

impl ArchiveConductor {
    /// The sessions' timing settings.
    pub(super) fn session_timeouts(&self) -> SessionTimeouts {
        SessionTimeouts {
            connect_ns: self.ctx.connect_timeout.as_nanos() as i64,
            ping_interval_ns: self.ctx.session_liveness_check_interval.as_nanos() as i64,
        }
    }

    pub(super) fn run_sessions(&mut self, now_ns: i64) -> usize {
        let mut work = 0;
        let t = self.session_timeouts();
        let mut refused = Vec::new();
        for s in self.sessions.values_mut() {
            let (w, r) = s.do_work(now_ns, &t, self.authenticator.as_mut());
            work += w;
            if r {
                refused.push(s.id);
            }
        }
        for id in refused {
            self.rejected_sessions += 1;
            self.record_error(format!(
                "control session {id}: authentication rejected ({} so far)",
                self.rejected_sessions
            ));
        }
        let before = self.sessions.len();
        self.sessions.retain(|_, s| s.state != SessionState::Done);
        let closed = before - self.sessions.len();
        if closed > 0 {
            let sessions = &self.sessions;
            self.replay_tokens
                .retain_sessions(|id| sessions.contains_key(&id));
        }
        work + closed
    }

    /// The archive's clock, now.
    pub(super) fn now_ns(&self) -> i64 {
        self.clock.now_ns()
    }
}

/// For tests: a clock that only moves by hand.
#[cfg(test)]
pub(super) fn manual_clock() -> (NanoClock, sulis_concurrent::agent::ManualClock) {
    NanoClock::manual()
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{AllowAll, CredentialsAuthenticator};
    use std::sync::{Arc, Mutex};
    use sulis_protocol::sbe::Header;

    /// A response publication that records what it is given.
    #[derive(Clone, Default)]
    struct Sink {
        sent: Arc<Mutex<Vec<Vec<u8>>>>,
        connected: Arc<Mutex<bool>>,
        refuse: Arc<Mutex<Option<OfferError>>>,
    }

    impl ResponseSink for Sink {
        fn offer(&mut self, message: &[u8]) -> Result<(), OfferError> {
            if let Some(e) = self.refuse.lock().unwrap().clone() {
                return Err(e);
            }
            self.sent.lock().unwrap().push(message.to_vec());
            Ok(())
        }
        fn is_connected(&self) -> bool {
            *self.connected.lock().unwrap()
        }
    }

    impl Sink {
        /// (template id, code or -1) of each message sent, then forgets them.
        fn take(&self) -> Vec<(u16, i32)> {
            self.sent
                .lock()
                .unwrap()
                .drain(..)
                .map(|m| {
                    let h = Header::decode(&m).unwrap();
                    let code = if h.template_id == ControlResponse::TEMPLATE_ID {
                        ControlResponse::decode(&m).unwrap().code
                    } else {
                        -1
                    };
                    (h.template_id, code)
                })
                .collect()
        }
    }

    const MS: i64 = 1_000_000;
    const T: SessionTimeouts = SessionTimeouts {
        connect_ns: 5_000 * MS,
        ping_interval_ns: 1_000 * MS,
    };
    const OK: (u16, i32) = (ControlResponse::TEMPLATE_ID, response_code::OK);
    const ERROR: (u16, i32) = (ControlResponse::TEMPLATE_ID, response_code::ERROR);
    const PING: (u16, i32) = (Ping::TEMPLATE_ID, -1);

    fn session(sink: &Sink, credentials: &[u8], now_ns: i64) -> ControlSession {
        ControlSession::new(
            7,
            42,
            Box::new(sink.clone()),
            0,
            99,
            None,
            credentials.to_vec(),
            now_ns,
            &T,
        )
    }

    #[test]
    fn should_wait_for_its_publication_answer_ok_every_200_ms_until_a_request_then_ping_when_idle()
    {
        let (clock, hand) = manual_clock();
        let sink = Sink::default();
        let mut s = session(&sink, b"", clock.now_ns());
        let mut auth = AllowAll;
        assert_eq!(s.do_work(clock.now_ns(), &T, &mut auth), (0, false));
        assert_eq!(s.state, SessionState::Connecting);
        *sink.connected.lock().unwrap() = true;
        hand.advance_ns(MS);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(s.state, SessionState::Authenticated);
        assert_eq!(
            sink.take(),
            vec![OK],
            "connected: the connect request is answered at once"
        );
        hand.advance_ns(100 * MS);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(sink.take(), vec![], "not again within 200 ms");
        hand.advance_ns(100 * MS);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(
            sink.take(),
            vec![OK],
            "resent until the client makes a request"
        );
        assert!(s.on_request(clock.now_ns()));
        assert_eq!(s.state, SessionState::Active);
        hand.advance_ns(999 * MS);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(sink.take(), vec![]);
        hand.advance_ns(MS);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(sink.take(), vec![PING], "an idle active session is pinged");
        hand.advance_ns(60_000 * MS);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(
            s.state,
            SessionState::Active,
            "an active session has no deadline"
        );
    }

    #[test]
    fn should_end_a_session_whose_client_never_connects_or_never_asks() {
        let (clock, hand) = manual_clock();
        let sink = Sink::default();
        let mut auth = AllowAll;
        let mut s = session(&sink, b"", clock.now_ns());
        hand.advance_ns(T.connect_ns - 1);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(s.state, SessionState::Connecting);
        hand.advance_ns(1);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(s.state, SessionState::Done, "the connect timeout");
        *sink.connected.lock().unwrap() = true;
        let mut s = session(&sink, b"", clock.now_ns());
        s.do_work(clock.now_ns(), &T, &mut auth);
        hand.advance_ns(T.connect_ns);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(
            s.state,
            SessionState::Done,
            "authenticated, never asked anything"
        );
        assert!(
            !s.on_request(clock.now_ns()),
            "a request after the end does nothing"
        );
    }

    #[test]
    fn should_tell_a_refused_client_every_200_ms_until_its_deadline() {
        let (clock, hand) = manual_clock();
        let sink = Sink::default();
        *sink.connected.lock().unwrap() = true;
        let mut auth = CredentialsAuthenticator {
            credentials: vec![b"s3cret".to_vec()],
            challenge: Some(b"who?".to_vec()),
            challenge_response: b"me".to_vec(),
        };
        let mut s = session(&sink, b"wrong", clock.now_ns());
        assert!(s.do_work(clock.now_ns(), &T, &mut auth).1, "refused");
        assert_eq!(sink.take(), vec![ERROR]);
        assert!(
            !s.on_request(clock.now_ns()),
            "a refused session may not ask"
        );
        hand.advance_ns(RESEND_INTERVAL_NS);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(sink.take(), vec![ERROR]);
        hand.advance_ns(T.connect_ns);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(s.state, SessionState::Done);
        // The right credentials: a challenge, answered.
        let mut s = session(&sink, b"s3cret", clock.now_ns());
        assert_eq!(s.do_work(clock.now_ns(), &T, &mut auth), (2, false));
        assert_eq!(sink.take(), vec![(Challenge::TEMPLATE_ID, -1)]);
        assert_eq!(s.state, SessionState::Challenged);
        s.on_challenge_answered(43, true, clock.now_ns());
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(sink.take(), vec![OK]);
        assert_eq!(
            s.connect_correlation_id, 43,
            "answered on the challenge response's correlation id"
        );
    }

    /// A session past its connect and first request, its sink emptied.
    fn active(sink: &Sink, clock: &NanoClock) -> ControlSession {
        *sink.connected.lock().unwrap() = true;
        let mut s = session(sink, b"", clock.now_ns());
        s.do_work(clock.now_ns(), &T, &mut AllowAll);
        assert!(s.on_request(clock.now_ns()));
        sink.take();
        s
    }

    #[test]
    fn should_keep_an_idle_client_that_does_not_read_its_pings_and_end_one_that_is_gone() {
        let (clock, hand) = manual_clock();
        let sink = Sink::default();
        let mut auth = AllowAll;
        let mut s = active(&sink, &clock);
        *sink.refuse.lock().unwrap() = Some(OfferError::BackPressured);
        for _ in 0..600 {
            hand.advance_ns(T.ping_interval_ns);
            s.do_work(clock.now_ns(), &T, &mut auth);
        }
        assert_eq!(
            s.state,
            SessionState::Active,
            "ten minutes of pings its stream had no room for"
        );
        assert!(s.outbox.is_empty(), "pings are dropped, not queued");
        *sink.refuse.lock().unwrap() = Some(OfferError::NotConnected);
        for _ in 0..5 {
            hand.advance_ns(T.ping_interval_ns);
            s.do_work(clock.now_ns(), &T, &mut auth);
        }
        assert_eq!(s.state, SessionState::Active);
        hand.advance_ns(T.ping_interval_ns);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(
            s.state,
            SessionState::Done,
            "nobody on its stream for the connect timeout"
        );
    }

    #[test]
    fn should_end_a_session_whose_client_stops_reading() {
        let (clock, hand) = manual_clock();
        let sink = Sink::default();
        let mut auth = AllowAll;
        let mut s = active(&sink, &clock);
        *sink.refuse.lock().unwrap() = Some(OfferError::BackPressured);
        s.ok(1, 2);
        s.do_work(clock.now_ns(), &T, &mut auth);
        hand.advance_ns(T.connect_ns - 1);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(
            s.state,
            SessionState::Active,
            "back pressure for a while is fine"
        );
        hand.advance_ns(1);
        s.do_work(clock.now_ns(), &T, &mut auth);
        assert_eq!(
            s.state,
            SessionState::Done,
            "back pressed for the whole connect timeout"
        );
        assert!(sink.take().is_empty());
    }
}
