//! A client of the cluster (Aeron's `AeronCluster`, the part this version
//! needs): it opens a session with the leader (SessionConnectRequest on
//! ingress, SessionEvent OK on its egress, following a REDIRECT to the
//! leader a follower names), offers messages behind the session header,
//! reads egress, keeps the session alive and closes it.
//!
//! Whatever ends the session is reported, never silent: a SessionEvent
//! CLOSED or ERROR makes [`ClusterClient::poll_egress`] return the reason.
//!
//! A leader change reaches the client as a NewLeaderEvent on its egress:
//! it takes the new term and leader at once, and
//! [`ClusterClient::follow_leader`] moves its ingress to the new leader's
//! endpoint (the Python client does so after every poll).
//!
//! Exactly once (sulis's, on unless the context says not): the client
//! numbers its messages from 1 in the session header's timestamp (Aeron's
//! client leaves it unset; the leader puts cluster time there in the log),
//! keeps each until the leader says it is committed (a SessionEvent OK with
//! the committed count) and resends those it keeps after a leader change.
//! The leader sequences a session's n-th message only as the log's n-th
//! of that session, so a resent message the log holds is dropped and the
//! services see every message once through any failover.

use crate::client::session_messages::SessionMessages;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use sulis_client::{Client, ExclusivePublication, FragmentAssembler, OfferError, Subscription};
use sulis_protocol::cluster::messages::{
    event_code, Challenge, ChallengeResponse, NewLeaderEvent, SessionCloseRequest,
    SessionConnectRequest, SessionEvent, SessionKeepAlive, SessionMessageHeader,
    CLIENT_PROTOCOL_VERSION, EXACTLY_ONCE, MESSAGES_COMMITTED, MESSAGES_COMMITTED_AT_CLOSE,
    SESSION_HEADER_LENGTH,
};
use sulis_protocol::sbe::Header as SbeHeader;

/// Where a client finds the cluster and gets its answers.
#[derive(Clone)]
pub struct ClusterClientContext {
    /// `id=host:port,...`: each member's ingress endpoint.
    pub ingress_endpoints: String,
    /// The ingress channel (the member's endpoint is added).
    pub ingress_channel: String,
    /// Ingress stream (101).
    pub ingress_stream_id: i32,
    /// This client's egress channel (where the cluster answers).
    pub egress_channel: String,
    /// Egress stream (102).
    pub egress_stream_id: i32,
    /// The whole connect must finish within this.
    pub message_timeout: Duration,
    /// Credentials for the cluster's authenticator (empty: none); with a
    /// `secret`, the principal it knows the secret by.
    pub credentials: Vec<u8>,
    /// The secret that answers the cluster's challenge (members started
    /// with `client_keys_file`): the answer is an HMAC of the challenge,
    /// the secret itself is never sent. None: a challenge is an error.
    pub secret: Option<Vec<u8>>,
    /// Number the messages, keep them until committed and resend them after
    /// a leader change (exactly once); off, the client is Aeron's (a
    /// message in flight at a failover may be lost or applied twice).
    pub exactly_once: bool,
    /// Exactly once: most messages kept uncommitted; `offer` back-pressures
    /// while that many wait for the leader's count.
    pub max_in_flight: usize,
    /// How long the ingress may stay unconnected (the leader gone, or cut
    /// off, and no NewLeaderEvent naming another) before the client ends
    /// the session itself, as Aeron's client closes after its new-leader
    /// timeout. None: twice the leader heartbeat timeout the leader gave
    /// when it opened the session (Aeron's default), or 20 s if it gave none.
    pub new_leader_timeout: Option<Duration>,
}

impl std::fmt::Debug for ClusterClientContext {
    /// Every field but the credentials and the secret, which show only
    /// whether they are set.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterClientContext")
            .field("ingress_endpoints", &self.ingress_endpoints)
            .field("ingress_channel", &self.ingress_channel)
            .field("ingress_stream_id", &self.ingress_stream_id)
            .field("egress_channel", &self.egress_channel)
            .field("egress_stream_id", &self.egress_stream_id)
            .field("message_timeout", &self.message_timeout)
            .field("credentials", &(!self.credentials.is_empty()))
            .field("secret", &self.secret.is_some())
            .field("exactly_once", &self.exactly_once)
            .field("max_in_flight", &self.max_in_flight)
            .field("new_leader_timeout", &self.new_leader_timeout)
            .finish()
    }
}

impl Default for ClusterClientContext {
    fn default() -> Self {
        ClusterClientContext {
            ingress_endpoints: String::new(),
            ingress_channel: "aeron:udp".into(),
            ingress_stream_id: 101,
            egress_channel: String::new(),
            egress_stream_id: 102,
            message_timeout: Duration::from_secs(5),
            credentials: Vec::new(),
            secret: None,
            exactly_once: true,
            max_in_flight: 16_384,
            new_leader_timeout: None,
        }
    }
}

/// What ended a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionEnded {
    /// `event_code::*` of the SessionEvent that ended it.
    pub code: i32,
    /// Its detail (the close reason's name, or why it failed).
    pub detail: String,
    /// Ended by this client, not by the cluster: no leader could be reached
    /// within the new-leader timeout (`code` is CLOSED).
    pub by_client: bool,
    /// Exactly once, ended by the cluster: how many of the session's
    /// messages the log holds for good, as the cluster said with the close
    /// (messages 1 to this were applied, once; every later one was not and
    /// never will be). None when it could not say (the client ended the
    /// session, or the close came from a leader that did not count).
    pub messages_committed: Option<i64>,
}

/// A session with the cluster.
pub struct ClusterClient {
    ingress: ExclusivePublication,
    egress: Subscription,
    assembler: FragmentAssembler,
    cluster_session_id: i64,
    leadership_term_id: i64,
    leader_member_id: i32,
    ended: Option<SessionEnded>,
    ingress_channel: String,
    ingress_stream_id: i32,
    /// The new leader's ingress endpoint, once a NewLeaderEvent named one
    /// and until the ingress moved there.
    new_leader_endpoint: Option<String>,
    /// Exactly once: the numbering, the messages sent and not yet committed.
    numbering: Option<Numbering>,
    /// Session messages read while `offer` waited for the committed count,
    /// or after a handler stopped a poll, for the next `poll_egress`:
    /// (timestamp, egress position after it, payload).
    stash: VecDeque<(i64, i64, Vec<u8>)>,
    /// Since when the ingress has not been connected (None while it is).
    unconnected_since: Option<Instant>,
    /// How long it may stay so before the session is given up.
    new_leader_timeout: Duration,
    /// The connect's other requests (asked again of every member while no
    /// answer came): a leader that opens a session for one of them after
    /// this one is told to close it at once.
    spare_requests: Vec<i64>,
}

/// What takes a session's egress messages: `(timestamp, the egress
/// position after it, payload)`; false stops the poll's deliveries (the
/// message given is taken, the rest wait).
type EgressHandler<'a> = dyn FnMut(i64, i64, &[u8]) -> bool + 'a;

/// The messages of an exactly-once session the leader has not yet said
/// are committed.
struct Numbering {
    /// The next message's number (from 1).
    next: i64,
    /// The messages sent and not yet committed, oldest first.
    window: Window,
    /// Most kept.
    max: usize,
    /// After a leader change: the index in `window` to resend from.
    resend_from: Option<usize>,
    /// How many of the session's messages the cluster said are committed
    /// (messages 1 to this): never less than it said before.
    committed: i64,
    /// The count the cluster gave with the session's close (final).
    committed_at_close: Option<i64>,
}

impl Numbering {
    /// The leader says `committed` of the session's messages are in the log for good.
    fn on_committed(&mut self, committed: i64) {
        self.committed = self.committed.max(committed);
        let dropped = self.window.drop_through(committed);
        if let Some(i) = self.resend_from.as_mut() {
            *i = i.saturating_sub(dropped);
        }
    }
}

/// Messages as sent (header and payload), each with its number, oldest
/// first, back to back in one buffer: a message kept costs no allocation of
/// its own (the buffer grows to the window's size once), and one resent is
/// offered from where it lies.
#[derive(Default)]
struct Window {
    data: Vec<u8>,
    /// Where `data[0]` lies in the stream of bytes ever kept.
    base: usize,
    /// Per message: its number, and where it starts and ends in that stream.
    entries: VecDeque<(i64, usize, usize)>,
}

impl Window {
    fn len(&self) -> usize {
        self.entries.len()
    }

    /// Appends message `number`, made by `write` (which appends its bytes).
    fn push(&mut self, number: i64, write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.base + self.data.len();
        write(&mut self.data);
        self.entries
            .push_back((number, start, self.base + self.data.len()));
    }

    /// Takes the newest message back (its offer failed).
    fn pop_back(&mut self) {
        if let Some((_, start, _)) = self.entries.pop_back() {
            self.data.truncate(start - self.base);
        }
    }

    /// Message `i`: its number and bytes.
    fn get_mut(&mut self, i: usize) -> Option<(i64, &mut [u8])> {
        let (number, start, end) = *self.entries.get(i)?;
        Some((number, &mut self.data[start - self.base..end - self.base]))
    }

    /// The newest message's bytes.
    fn back(&self) -> &[u8] {
        let (_, start, end) = *self.entries.back().expect("a message was pushed");
        &self.data[start - self.base..end - self.base]
    }

    /// Drops the messages numbered up to `committed`; how many.
    fn drop_through(&mut self, committed: i64) -> usize {
        let mut dropped = 0;
        while self
            .entries
            .front()
            .is_some_and(|(n, _, _)| *n <= committed)
        {
            self.entries.pop_front();
            dropped += 1;
        }
        match self.entries.front() {
            None => {
                self.base += self.data.len();
                self.data.clear();
            }
            // The dropped bytes go once they are most of the buffer: each
            // byte is moved at most once on average.
            Some(&(_, start, _)) if start - self.base > self.data.len() / 2 => {
                self.data.drain(..start - self.base);
                self.base = start;
            }
            Some(_) => {}
        }
        dropped
    }

    #[cfg(test)]
    fn numbers(&self) -> Vec<i64> {
        self.entries.iter().map(|(n, _, _)| *n).collect()
    }
}

fn endpoints(list: &str) -> Vec<(i32, String)> {
    list.split(',')
        .filter_map(|e| {
            let (id, endpoint) = e.split_once('=')?;
            Some((id.trim().parse().ok()?, endpoint.trim().to_string()))
        })
        .collect()
}

/// One member's ingress while a session is being opened.
struct IngressTarget {
    member_id: i32,
    endpoint: String,
    publication: ExclusivePublication,
    /// The current connect request went (it does once, when the publication
    /// is connected).
    sent: bool,
    /// Some connect request went.
    ever_sent: bool,
    /// Answers to challenges still to go to this member (offered without
    /// blocking, as requests are: a member gone meanwhile holds up nothing).
    answers: Vec<Vec<u8>>,
}

/// How long a connect waits for an answer before it asks every member again
/// (then twice as long each time, up to the message timeout).
const CONNECT_RESEND_FIRST: Duration = Duration::from_secs(1);

impl IngressTarget {
    /// Adds a publication to `endpoint` unless one to it is there (a
    /// redirect names the member it is for).
    fn add(
        targets: &mut Vec<IngressTarget>,
        client: &Client,
        ctx: &ClusterClientContext,
        member_id: i32,
        endpoint: &str,
    ) -> Result<(), String> {
        if let Some(t) = targets.iter_mut().find(|t| t.endpoint == endpoint) {
            t.member_id = member_id;
            return Ok(());
        }
        let channel = with_endpoint(&ctx.ingress_channel, endpoint);
        // Exclusive, as Aeron's client's default: a session of its own, not
        // shared with another client of this driver.
        let publication = client
            .add_exclusive_publication(&channel, ctx.ingress_stream_id)
            .map_err(|e| format!("{channel}: {e}"))?;
        targets.push(IngressTarget {
            member_id,
            endpoint: endpoint.to_string(),
            publication,
            sent: false,
            ever_sent: false,
            answers: Vec::new(),
        });
        Ok(())
    }
}

fn with_endpoint(channel: &str, endpoint: &str) -> String {
    format!(
        "{channel}{}endpoint={endpoint}",
        if channel.contains('?') { "|" } else { "?" }
    )
}

impl ClusterClient {
    /// Opens a session, as Aeron's client does: an ingress publication to
    /// every member, the connect request sent to each as its publication
    /// connects (a member down or still starting is simply not reached), and
    /// once to the leader a member's REDIRECT names; the leader's OK opens the
    /// session, on that member's publication. Unanswered, it asks every
    /// member again after 1 s, then 2 s, 4 s...: a leader that lost its term
    /// before it answered (an election under load) would never answer. An ERROR or
    /// AUTHENTICATION_REJECTED is the error; so is no answer within the
    /// message timeout, naming the members reached and not.
    pub fn connect(client: &Client, ctx: &ClusterClientContext) -> Result<ClusterClient, String> {
        let members = endpoints(&ctx.ingress_endpoints);
        if members.is_empty() {
            return Err(format!(
                "no ingress endpoints in '{}'",
                ctx.ingress_endpoints
            ));
        }
        let deadline = Instant::now() + ctx.message_timeout;
        let mut egress = client
            .add_subscription(&ctx.egress_channel, ctx.egress_stream_id)
            .map_err(|e| format!("{}: {e}", ctx.egress_channel))?;
        // What the members are told to answer on: `host:0` with the port the
        // driver bound, as Aeron's client resolves it (port 0 goes nowhere).
        let response_channel = loop {
            if let Some(channel) = egress.resolved_channel() {
                break channel;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "connecting to the cluster: the egress {} was not bound within {:?}",
                    ctx.egress_channel, ctx.message_timeout
                ));
            }
            client
                .check_interrupt("connecting to the cluster")
                .map_err(|e| e.to_string())?;
            std::thread::sleep(Duration::from_micros(200));
        };
        // One correlation id for every copy of a request: each member
        // answers it (OK from the leader, REDIRECT from the others).
        // From the driver's counter, as Aeron's client takes them: a fixed
        // first id was answered by an earlier session's CLOSED event (the
        // same egress port, its open's correlation id) and the connect
        // taken as refused, when a new leader closed that session.
        let mut correlation_id = client.next_correlation_id();
        let request_for = |correlation_id: i64| {
            SessionConnectRequest {
                correlation_id,
                response_stream_id: ctx.egress_stream_id,
                version: CLIENT_PROTOCOL_VERSION,
                response_channel: response_channel.clone(),
                encoded_credentials: ctx.credentials.clone(),
                client_info: "name=sulis".into(),
            }
            .encode()
        };
        let mut request = request_for(correlation_id);
        // Every request sent: an OK or REDIRECT answering any of them counts.
        let mut asked = vec![correlation_id];
        let mut resend_after = CONNECT_RESEND_FIRST;
        let mut resend_at = Instant::now() + resend_after;
        let mut targets: Vec<IngressTarget> = Vec::new();
        for (id, endpoint) in members {
            IngressTarget::add(&mut targets, client, ctx, id, &endpoint)?;
        }
        let mut assembler = FragmentAssembler::new();
        loop {
            if Instant::now() >= resend_at {
                // No answer yet: the request may have gone to a leader that
                // lost its term before it answered (it drops its pending
                // sessions) and to followers that redirected to it, so no
                // member would ever answer again. Ask every member anew, at
                // growing intervals; an orphan session a slow leader opens for
                // an earlier request times out, as any idle session does.
                correlation_id = client.next_correlation_id();
                request = request_for(correlation_id);
                asked.push(correlation_id);
                for t in targets.iter_mut() {
                    t.sent = false;
                }
                resend_after *= 2;
                resend_at = Instant::now() + resend_after;
            }
            for t in targets.iter_mut() {
                if !t.sent {
                    t.sent = t.publication.offer(&request).is_ok();
                    t.ever_sent |= t.sent;
                }
                while let Some(answer) = t.answers.first() {
                    if t.publication.offer(answer).is_err() {
                        break;
                    }
                    t.answers.remove(0);
                }
            }
            if Instant::now() > deadline {
                let (reached, not): (Vec<&IngressTarget>, Vec<&IngressTarget>) =
                    targets.iter().partition(|t| t.ever_sent);
                let names = |ts: Vec<&IngressTarget>| {
                    ts.iter()
                        .map(|t| format!("{}={}", t.member_id, t.endpoint))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                return Err(if reached.is_empty() {
                    format!(
                        "connecting to the cluster: no member's ingress connected within {:?} ({})",
                        ctx.message_timeout,
                        names(not)
                    )
                } else {
                    format!(
                        "connecting to the cluster: no answer on egress {} within {:?} (asked {}; not \
                         reached: {})",
                        response_channel,
                        ctx.message_timeout,
                        names(reached),
                        if not.is_empty() { names(not) } else { "none".into() }
                    )
                });
            }
            let mut events = Vec::new();
            let mut challenges = Vec::new();
            let n = egress
                .poll(
                    |payload, header| -> Result<(), ()> {
                        if let Some(m) = assembler.on_fragment(payload, header) {
                            if let Ok(e) = SessionEvent::decode(&m.payload) {
                                events.push(e);
                            } else if let Ok(c) = Challenge::decode(&m.payload) {
                                challenges.push(c);
                            }
                        }
                        Ok(())
                    },
                    10,
                )
                .unwrap_or(0);
            challenges.retain(|c| asked.contains(&c.correlation_id));
            for c in challenges {
                let response = answer_challenge(client, ctx, &c, &response_channel)?;
                asked.push(response.correlation_id);
                let response = response.encode();
                // Only the leader that challenged has the session: the
                // others drop an answer for a session they do not hold.
                for t in targets.iter_mut().filter(|t| t.ever_sent) {
                    t.answers.push(response.clone());
                }
                // Answered: a new request now would only open another
                // challenged session on the leader.
                resend_at = Instant::now() + resend_after;
            }
            let answers: Vec<SessionEvent> = events
                .into_iter()
                .filter(|e| asked.contains(&e.correlation_id))
                .collect();
            let mut answers = answers.into_iter();
            while let Some(e) = answers.next() {
                match e.code {
                    event_code::OK => {
                        let at = targets
                            .iter()
                            .position(|t| t.ever_sent && t.member_id == e.leader_member_id)
                            .ok_or_else(|| {
                                format!(
                                    "member {} opened the session, but no request was sent to it",
                                    e.leader_member_id
                                )
                            })?;
                        let chosen = targets.swap_remove(at);
                        for t in targets {
                            t.publication.close_without_waiting();
                        }
                        asked.retain(|&c| c != e.correlation_id);
                        let mut session = ClusterClient {
                            ingress: chosen.publication,
                            egress,
                            assembler: FragmentAssembler::new(),
                            cluster_session_id: e.cluster_session_id,
                            leadership_term_id: e.leadership_term_id,
                            leader_member_id: e.leader_member_id,
                            ended: None,
                            ingress_channel: ctx.ingress_channel.clone(),
                            ingress_stream_id: ctx.ingress_stream_id,
                            new_leader_endpoint: None,
                            // Only a leader that says it sequences numbered
                            // messages once each gets them numbered (Aeron's
                            // would append every resend).
                            numbering: (ctx.exactly_once && e.detail == EXACTLY_ONCE).then(|| {
                                Numbering {
                                    next: 1,
                                    window: Window::default(),
                                    max: ctx.max_in_flight.max(1),
                                    resend_from: None,
                                    committed: 0,
                                    committed_at_close: None,
                                }
                            }),
                            stash: VecDeque::new(),
                            unconnected_since: None,
                            spare_requests: asked,
                            new_leader_timeout: ctx.new_leader_timeout.unwrap_or_else(|| {
                                new_leader_timeout_for(e.leader_heartbeat_timeout_ns)
                            }),
                        };
                        // Another copy of the request answered in the same read.
                        for later in answers {
                            if later.code == event_code::OK
                                && later.cluster_session_id != session.cluster_session_id
                            {
                                session.close_orphan(&later);
                            }
                        }
                        return Ok(session);
                    }
                    event_code::REDIRECT => {
                        let leader = endpoints(&e.detail)
                            .into_iter()
                            .find(|(id, _)| *id == e.leader_member_id)
                            .ok_or_else(|| {
                                format!(
                                    "redirected to member {} with no endpoint in '{}'",
                                    e.leader_member_id, e.detail
                                )
                            })?;
                        // The current request goes to the leader once (a
                        // second copy would open it a second session).
                        IngressTarget::add(&mut targets, client, ctx, leader.0, &leader.1)?;
                    }
                    _ => {
                        return Err(format!(
                            "the cluster refused the session: {} {}",
                            code_name(e.code),
                            e.detail
                        ))
                    }
                }
            }
            if n == 0 {
                client
                    .check_interrupt("connecting to the cluster")
                    .map_err(|e| e.to_string())?;
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// The session's id.
    pub fn cluster_session_id(&self) -> i64 {
        self.cluster_session_id
    }

    /// The term of the leader it talks to.
    pub fn leadership_term_id(&self) -> i64 {
        self.leadership_term_id
    }

    /// The leader it talks to.
    pub fn leader_member_id(&self) -> i32 {
        self.leader_member_id
    }

    /// What ended the session, once something did.
    pub fn ended(&self) -> Option<&SessionEnded> {
        self.ended.as_ref()
    }

    fn message(&self, number: i64, payload: &[u8]) -> Vec<u8> {
        let mut message = SessionMessageHeader {
            leadership_term_id: self.leadership_term_id,
            cluster_session_id: self.cluster_session_id,
            timestamp: number,
        }
        .encode();
        message.extend_from_slice(payload);
        message
    }

    /// Offers `payload` to the cluster; the new ingress position. Exactly
    /// once, it is kept until committed: while a new leader is not yet
    /// followed ([`ClusterClient::follow_leader`]) or messages are being
    /// resent to it, or `max_in_flight` wait for the leader's count (read
    /// here if need be; the session's messages read meanwhile wait for the
    /// next [`ClusterClient::poll_egress`]), it is `BackPressured`.
    pub fn offer(&mut self, payload: &[u8]) -> Result<i64, OfferError> {
        self.check_leader();
        if self.ended.is_some() {
            return Err(OfferError::Closed);
        }
        if self.numbering.is_none() {
            let message = self.message(0, payload);
            return self.ingress.offer(&message);
        }
        // A NewLeaderEvent read and not yet followed (`resend` is false
        // then): a message of the new term sent on the old ingress could
        // reach the leader before what it dropped as of the old term is
        // resent (a gap that closes the session). It waits for `follow_leader`.
        if !self.resend() {
            return Err(OfferError::BackPressured);
        }
        if self.in_flight() >= self.numbering.as_ref().map_or(0, |n| n.max) {
            let _ = self.poll_into(None, 10);
            if self.new_leader_endpoint.is_some()
                || self.in_flight() >= self.numbering.as_ref().map_or(0, |n| n.max)
            {
                return Err(OfferError::BackPressured);
            }
        }
        // The message is made where it is kept, in the window's buffer, and
        // offered from there; a resend rewrites only its header's term.
        let header = SessionMessageHeader {
            leadership_term_id: self.leadership_term_id,
            cluster_session_id: self.cluster_session_id,
            timestamp: self.numbering.as_ref().map_or(0, |n| n.next),
        };
        let numbering = self.numbering.as_mut().expect("exactly once");
        numbering.window.push(numbering.next, |out| {
            header.encode_into(out);
            out.extend_from_slice(payload);
        });
        match self.ingress.offer(numbering.window.back()) {
            Ok(position) => {
                numbering.next += 1;
                Ok(position)
            }
            Err(e) => {
                numbering.window.pop_back();
                Err(e)
            }
        }
    }

    /// Offers message `i` (`data[offsets[i]..offsets[i + 1]]`, Arrow's
    /// layout) for each, in order, as [`ClusterClient::offer`] each: how
    /// many went, and why the next did not (None once all went). Exactly
    /// once, `max_in_flight` is the pipeline's window: the batch goes as far
    /// as the window has room (reading the leader's counts if need be) and
    /// the rest is offered again later. An error when the offsets do not fit
    /// the data.
    pub fn offer_batch(
        &mut self,
        data: &[u8],
        offsets: &[i32],
    ) -> Result<(usize, Option<OfferError>), String> {
        let count = crate::client::session_messages::message_count(offsets, data.len())?;
        for i in 0..count {
            let payload = &data[offsets[i] as usize..offsets[i + 1] as usize];
            if let Err(e) = self.offer(payload) {
                return Ok((i, Some(e)));
            }
        }
        Ok((count, None))
    }

    /// Exactly once: how many of the session's messages (numbered from 1 in
    /// the order they were offered) the cluster said are committed: in the
    /// log for good, applied once, in order, by every member's service,
    /// through any failover, whether or not an answer came. None for a
    /// session that does not number its messages.
    pub fn committed(&self) -> Option<i64> {
        self.numbering.as_ref().map(|n| n.committed)
    }

    /// Exactly once: how many messages this session offered (the last
    /// one's number). None for a session that does not number its messages.
    pub fn offered(&self) -> Option<i64> {
        self.numbering.as_ref().map(|n| n.next - 1)
    }

    /// Messages sent and not yet committed (0 unless exactly once).
    pub fn in_flight(&self) -> usize {
        self.numbering.as_ref().map_or(0, |n| n.window.len())
    }

    /// After a leader change, resends what is not committed, oldest first,
    /// as far as the new ingress takes it now; true once all went.
    fn resend(&mut self) -> bool {
        // Not on the old ingress once a new leader is known: what it takes
        // there would reach a leader that dropped what came before it.
        if self.new_leader_endpoint.is_some() {
            return false;
        }
        let Some(numbering) = self.numbering.as_mut() else {
            return true;
        };
        while let Some(i) = numbering.resend_from {
            let Some((number, message)) = numbering.window.get_mut(i) else {
                numbering.resend_from = None;
                break;
            };
            let header = SessionMessageHeader {
                leadership_term_id: self.leadership_term_id,
                cluster_session_id: self.cluster_session_id,
                timestamp: number,
            }
            .encode();
            message[..SESSION_HEADER_LENGTH].copy_from_slice(&header);
            if self.ingress.offer(message).is_err() {
                return false;
            }
            numbering.resend_from = Some(i + 1);
        }
        true
    }

    /// Tells the cluster this session is alive.
    pub fn send_keep_alive(&mut self) -> bool {
        let k = SessionKeepAlive {
            leadership_term_id: self.leadership_term_id,
            cluster_session_id: self.cluster_session_id,
        };
        self.ingress.offer(&k.encode()).is_ok()
    }

    /// Reads up to `limit` egress fragments; each message of this session
    /// goes to `handler(timestamp, payload)`. A SessionEvent that ends the
    /// session is kept ([`ClusterClient::ended`]) and returned as the error.
    /// Exactly once, the leader's committed counts free what the client
    /// kept, and after a leader change what it kept is resent.
    pub fn poll_egress(
        &mut self,
        mut handler: impl FnMut(i64, &[u8]),
        limit: usize,
    ) -> Result<usize, SessionEnded> {
        self.poll_egress_controlled(
            |timestamp, payload| {
                handler(timestamp, payload);
                true
            },
            limit,
        )
    }

    /// As [`ClusterClient::poll_egress`], but a handler that returns false
    /// takes no more messages in this poll: the one it was given counts as
    /// delivered (as a fragment is consumed when Aeron's handler throws), and
    /// the session's later messages wait, in order, for the next poll. The
    /// egress is still read, so session events and counts are not held up.
    pub fn poll_egress_controlled(
        &mut self,
        mut handler: impl FnMut(i64, &[u8]) -> bool,
        limit: usize,
    ) -> Result<usize, SessionEnded> {
        self.poll_messages(
            &mut |timestamp, _, payload| handler(timestamp, payload),
            limit,
        )
    }

    /// Polls up to `limit` egress fragments and appends the session's
    /// messages to `out` (its session id, timestamp, the egress position
    /// after it, payload): a batch for one call of the application, however
    /// many came. The number of fragments read and messages taken from
    /// earlier reads, as [`ClusterClient::poll_egress`] counts; the session's
    /// end is the error once every message before it was appended.
    pub fn poll_egress_batch(
        &mut self,
        out: &mut SessionMessages,
        limit: usize,
    ) -> Result<usize, SessionEnded> {
        let id = self.cluster_session_id;
        self.poll_messages(
            &mut |timestamp, position, payload| {
                out.push(id, timestamp, position, payload);
                true
            },
            limit,
        )
    }

    /// The stash first, then the egress; `handler` false takes no more.
    fn poll_messages(
        &mut self,
        handler: &mut EgressHandler,
        limit: usize,
    ) -> Result<usize, SessionEnded> {
        let mut n = 0;
        let mut going = true;
        while going {
            let Some((timestamp, position, payload)) = self.stash.pop_front() else {
                break;
            };
            going = handler(timestamp, position, &payload);
            n += 1;
        }
        let polled = if going {
            self.poll_into(Some(handler), limit)
        } else {
            self.poll_into(None, limit)
        };
        self.resend();
        polled.map(|p| p + n)
    }

    /// Polls the egress; the session's messages go to `handler`, or into the
    /// stash when there is none.
    fn poll_into(
        &mut self,
        mut handler: Option<&mut EgressHandler>,
        limit: usize,
    ) -> Result<usize, SessionEnded> {
        let id = self.cluster_session_id;
        let mut ended = None;
        let mut new_leader = None;
        let mut committed = None;
        let mut committed_at_close = None;
        let mut orphans = Vec::new();
        let assembler = &mut self.assembler;
        let stash = &mut self.stash;
        let spare = &self.spare_requests;
        let n = self
            .egress
            .poll(
                |payload, header| -> Result<(), ()> {
                    // An unfragmented message (the usual case) is read where it lies: no copy.
                    let Some((message, end_position)) = assembler.whole(payload, header) else {
                        return Ok(());
                    };
                    let message = &message[..];
                    let Ok(h) = SbeHeader::decode(message) else {
                        return Ok(());
                    };
                    if h.template_id == SessionMessageHeader::TEMPLATE_ID
                        && message.len() >= SESSION_HEADER_LENGTH
                    {
                        if let Ok(s) = SessionMessageHeader::decode(message) {
                            if s.cluster_session_id == id {
                                let body = &message[SESSION_HEADER_LENGTH..];
                                let at = end_position;
                                match handler.as_mut() {
                                    Some(h) => {
                                        if !h(s.timestamp, at, body) {
                                            handler = None;
                                        }
                                    }
                                    None => stash.push_back((s.timestamp, at, body.to_vec())),
                                }
                            }
                        }
                    } else if h.template_id == SessionEvent::TEMPLATE_ID {
                        if let Ok(e) = SessionEvent::decode(message) {
                            let ours = e.cluster_session_id == id;
                            if ours && e.code != event_code::OK {
                                ended = Some(SessionEnded {
                                    code: e.code,
                                    detail: e.detail,
                                    by_client: false,
                                    messages_committed: None,
                                });
                            } else if ours && e.detail == MESSAGES_COMMITTED {
                                committed = committed.max(Some(e.correlation_id));
                            } else if ours && e.detail == MESSAGES_COMMITTED_AT_CLOSE {
                                committed = committed.max(Some(e.correlation_id));
                                committed_at_close = Some(e.correlation_id);
                            } else if !ours
                                && e.code == event_code::OK
                                && spare.contains(&e.correlation_id)
                            {
                                orphans.push(e);
                            }
                        }
                    } else if h.template_id == NewLeaderEvent::TEMPLATE_ID {
                        if let Ok(e) = NewLeaderEvent::decode(message) {
                            if e.cluster_session_id == id {
                                new_leader = Some(e);
                            }
                        }
                    }
                    Ok(())
                },
                limit,
            )
            .unwrap_or(0);
        if let (Some(count), Some(numbering)) = (committed, self.numbering.as_mut()) {
            numbering.on_committed(count);
            if committed_at_close.is_some() {
                numbering.committed_at_close = committed_at_close;
            }
        }
        for e in orphans {
            self.close_orphan(&e);
        }
        if let Some(e) = new_leader {
            self.on_new_leader(e);
        }
        if let Some(mut e) = ended {
            e.messages_committed = self.numbering.as_ref().and_then(|n| n.committed_at_close);
            self.ended = Some(e);
        }
        self.check_leader();
        match &self.ended {
            Some(e) => Err(e.clone()),
            None => Ok(n),
        }
    }

    /// A NewLeaderEvent of a later term for this session: the session
    /// goes on with the new term and leader; its ingress moves with
    /// [`ClusterClient::follow_leader`]. An event of an older term (a late
    /// duplicate) is ignored.
    fn on_new_leader(&mut self, e: NewLeaderEvent) {
        if e.leadership_term_id < self.leadership_term_id {
            return;
        }
        // A new term: the leader dropped what came as of the old one (and a
        // new leader may lack it): all kept goes again, on the new ingress,
        // or on this one if the event names no endpoint for the leader.
        if e.leadership_term_id > self.leadership_term_id {
            if let Some(numbering) = self.numbering.as_mut() {
                numbering.resend_from = Some(0);
            }
        }
        self.leadership_term_id = e.leadership_term_id;
        self.leader_member_id = e.leader_member_id;
        self.new_leader_endpoint = endpoints(&e.ingress_endpoints)
            .into_iter()
            .find(|(member, _)| *member == e.leader_member_id)
            .map(|(_, endpoint)| endpoint);
    }

    /// A session a leader opened for another copy of this client's connect
    /// request, after the one it took: closed at once (a SessionCloseRequest,
    /// best effort; one not closed times out). Left open, such sessions
    /// counted towards the cluster's session limit (10) until they timed out,
    /// and every new term restarted their timeout: a fault run's client
    /// was refused ("concurrent session limit") for 28 s after a restart.
    fn close_orphan(&mut self, e: &SessionEvent) {
        self.spare_requests.retain(|&c| c != e.correlation_id);
        let close = SessionCloseRequest {
            leadership_term_id: e.leadership_term_id,
            cluster_session_id: e.cluster_session_id,
        };
        let _ = self.ingress.offer(&close.encode());
    }

    /// Ends the session, as ended by this client, once the ingress has not
    /// been connected for the new-leader timeout: the leader is gone or cut
    /// off and no NewLeaderEvent named another (one that never learnt of
    /// this session, whose open it did not commit, never will). Without it
    /// such a client waits for ever; after it, the application connects
    /// anew, as Aeron's client closes after its new-leader timeout.
    fn check_leader(&mut self) {
        if self.ended.is_some() {
            return;
        }
        if self.ingress.is_connected() {
            self.unconnected_since = None;
            return;
        }
        let now = Instant::now();
        let since = *self.unconnected_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= self.new_leader_timeout {
            self.ended = Some(SessionEnded {
                code: event_code::CLOSED,
                detail: format!(
                    "no leader reached: the ingress to member {} (term {}) has not been connected for {:?} and \
                     no new leader was announced (the new-leader timeout); connect again",
                    self.leader_member_id, self.leadership_term_id, self.new_leader_timeout
                ),
                by_client: true,
                messages_committed: None,
            });
        }
    }

    /// After a NewLeaderEvent, moves the ingress to the new leader's
    /// endpoint (a new publication from `client`, this client's driver);
    /// true if it moved. Exactly once, what the leader had not said was
    /// committed is resent (the rest as the new ingress takes it, by
    /// `offer` and `poll_egress`); otherwise, as Aeron's client, nothing
    /// is: the service's answers tell the application what went through.
    pub fn follow_leader(&mut self, client: &Client) -> Result<bool, String> {
        let Some(endpoint) = self.new_leader_endpoint.clone() else {
            return Ok(false);
        };
        let channel = with_endpoint(&self.ingress_channel, &endpoint);
        let ingress = client
            .add_exclusive_publication(&channel, self.ingress_stream_id)
            .map_err(|e| format!("the new leader's ingress {channel}: {e}"))?;
        // Taken only now: had the publication failed, the client would still
        // know it must move (and `offer` would still wait for it).
        self.new_leader_endpoint = None;
        // The new leader's ingress gets the whole timeout to connect.
        self.unconnected_since = None;
        let old = std::mem::replace(&mut self.ingress, ingress);
        old.close_without_waiting();
        // What the old leader may not have sequenced goes again (the new
        // leader drops what its log holds).
        if let Some(numbering) = self.numbering.as_mut() {
            numbering.resend_from = Some(0);
        }
        self.resend();
        Ok(true)
    }

    /// Closes the session (SessionCloseRequest) and the client's streams.
    pub fn close(mut self) {
        let c = SessionCloseRequest {
            leadership_term_id: self.leadership_term_id,
            cluster_session_id: self.cluster_session_id,
        };
        for _ in 0..100 {
            if self.ingress.offer(&c.encode()).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.ingress.close_without_waiting();
        let _ = self.egress.close();
    }
}

/// The ChallengeResponse to `c`: its HMAC under the context's secret, bound
/// to `response_channel` (where this client asked its answers to go), with
/// a correlation id of its own (the leader's OK answers that one).
fn answer_challenge(
    client: &Client,
    ctx: &ClusterClientContext,
    c: &Challenge,
    response_channel: &str,
) -> Result<ChallengeResponse, String> {
    let Some(secret) = &ctx.secret else {
        return Err(
            "the cluster sent a challenge (its members check client keys) and this client has \
                    no secret: pass secret= with the principal's secret as credentials="
                .to_string(),
        );
    };
    let answer = sulis_archive::auth::keyed_challenge::answer(
        secret,
        &c.encoded_challenge,
        response_channel,
    )
    .ok_or_else(|| {
        format!(
            "the cluster sent a challenge of a kind this client cannot answer ({} bytes, not \
                 sulis-hmac-sha256)",
            c.encoded_challenge.len()
        )
    })?;
    Ok(ChallengeResponse {
        correlation_id: client.next_correlation_id(),
        cluster_session_id: c.cluster_session_id,
        encoded_credentials: answer,
    })
}

/// Aeron's default new-leader timeout: twice the leader heartbeat timeout
/// the leader gave (`ns`; a null value or none: Aeron's 10 s default).
fn new_leader_timeout_for(leader_heartbeat_timeout_ns: i64) -> Duration {
    let heartbeat = if leader_heartbeat_timeout_ns > 0 {
        Duration::from_nanos(leader_heartbeat_timeout_ns as u64)
    } else {
        Duration::from_secs(10)
    };
    heartbeat * 2
}

fn code_name(code: i32) -> &'static str {
    match code {
        event_code::OK => "OK",
        event_code::ERROR => "ERROR",
        event_code::REDIRECT => "REDIRECT",
        event_code::AUTHENTICATION_REJECTED => "AUTHENTICATION_REJECTED",
        event_code::CLOSED => "CLOSED",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_keeps_each_message_whole_while_it_drops_compacts_and_takes_back() {
        let message = |n: i64| -> Vec<u8> { (0..n % 7 + 1).map(|k| (n + k) as u8).collect() };
        let mut w = Window::default();
        let mut next = 1;
        for round in 0..200 {
            for _ in 0..20 {
                let m = message(next);
                w.push(next, |out| out.extend_from_slice(&m));
                next += 1;
            }
            // The newest offer refused: taken back, its number used again.
            w.pop_back();
            next -= 1;
            w.drop_through(next - 1 - round % 30);
            let mut live = 0;
            for i in 0..w.len() {
                let (n, m) = w.get_mut(i).expect("kept");
                assert_eq!(m, &message(n)[..], "message {n} in round {round}");
                live += m.len();
            }
            assert_eq!(
                w.numbers(),
                (next - w.len() as i64..next).collect::<Vec<_>>()
            );
            assert!(
                w.data.len() <= 2 * live.max(1),
                "dropped bytes go once they are half the buffer"
            );
        }
        w.drop_through(next);
        assert!(w.len() == 0 && w.data.is_empty());
    }

    #[test]
    fn a_committed_count_frees_what_it_covers_and_a_resend_goes_on_from_the_same_message() {
        let mut window = Window::default();
        for i in 1..=5 {
            window.push(i, |out| out.push(i as u8));
        }
        let mut n = Numbering {
            next: 6,
            window,
            max: 8,
            resend_from: Some(3), // 1, 2 and 3 went again; 4 is next
            committed: 0,
            committed_at_close: None,
        };
        n.on_committed(2);
        assert_eq!(n.window.numbers(), [3, 4, 5]);
        assert_eq!(
            n.window.get_mut(0).map(|(i, m)| (i, m.to_vec())),
            Some((3, vec![3]))
        );
        assert_eq!(
            n.resend_from,
            Some(1),
            "message 4 is still the next to resend"
        );
        n.on_committed(1); // a late, lower count changes nothing
        assert_eq!(n.window.len(), 3);
        n.on_committed(5);
        assert_eq!(n.window.len(), 0);
        assert_eq!(
            n.resend_from,
            Some(0),
            "nothing left: the resend ends at once"
        );
    }
}
