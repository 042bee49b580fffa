//! IPC publications: add (joining an existing concurrent publication),
//! remove, linking subscribers at the join position, withdrawing images
//! and freeing. Also the parts every publication shares with network ones:
//! the client links, session ids and creating the publication log.

use super::{entity_tag, parse_channel, CommandError, DriverConductor};
use crate::ipc_publication::{IpcPublication, LocalSubscriber};
use crate::system_counters::{stream_counter_key, stream_counter_label, type_id, SystemCounter};
use std::path::PathBuf;
use sulis_concurrent::counters::NULL_COUNTER_ID;
use sulis_concurrent::logbuffer::{LogBuffers, LogParams};
use sulis_protocol::control::{error_code, Event};
use sulis_protocol::driver_dir::publication_log_file;
use sulis_protocol::log_buffer_descriptor::*;
use sulis_protocol::uri::{ChannelUri, Media, SessionIdParam};

/// Session ids in this range are left for users to choose (Aeron's reserved range).
const RESERVED_SESSION_ID_LOW: i32 = -1;
const RESERVED_SESSION_ID_HIGH: i32 = 1000;

pub(super) struct PublicationLink {
    /// Correlation id of the add command: what the client removes by.
    pub(super) registration_id: i64,
    pub(super) client_id: i64,
    pub(super) publication_id: i64,
}

/// The publication a new local subscriber reads, as its image event names it.
pub(super) struct LogSource {
    pub(super) registration_id: i64,
    pub(super) session_id: i32,
    pub(super) stream_id: i32,
    pub(super) log_file: String,
    /// Where the subscriber starts.
    pub(super) join: i64,
}

/// An existing concurrent publication a further publisher joins.
pub(super) struct SharedPublication {
    pub(super) registration_id: i64,
    pub(super) session_id: i32,
    pub(super) limit_counter_id: i32,
    pub(super) term_length: usize,
    pub(super) log_file: String,
}

impl SharedPublication {
    /// A joining publisher may not ask for another term length.
    pub(super) fn check_term_length(
        &self,
        channel: &str,
        requested: Option<u32>,
    ) -> Result<(), CommandError> {
        match requested {
            Some(t) if t as usize != self.term_length => Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!(
                    "channel '{channel}': term-length={t} differs from the existing publication's {}",
                    self.term_length
                ),
            )),
            _ => Ok(()),
        }
    }
}

impl DriverConductor {
    pub(super) fn allocate_session_id(&mut self, stream_id: i32) -> i32 {
        loop {
            let id = self.next_session_id;
            self.next_session_id = self.next_session_id.wrapping_add(1);
            if (RESERVED_SESSION_ID_LOW..=RESERVED_SESSION_ID_HIGH).contains(&id) {
                continue;
            }
            if !self
                .publications
                .iter()
                .any(|p| p.stream_id == stream_id && p.session_id == id)
                && !self
                    .net_publications
                    .iter()
                    .any(|p| p.publication.stream_id == stream_id && p.publication.session_id == id)
            {
                return id;
            }
        }
    }

    /// `session-id=tag:T`: the session of the publication (IPC for an IPC
    /// channel, network for UDP) whose channel has the entity tag T
    /// (`tags=C,T`), with its term length and MTU unless the channel names
    /// them (then they must be the same, as Aeron checks). Returns the URI to
    /// go on with and that session; `None` for a channel without such a tag.
    fn tagged_session(
        &self,
        channel: &str,
        uri: &ChannelUri,
    ) -> Result<Option<(ChannelUri, i32)>, CommandError> {
        let Some(SessionIdParam::Tag(tag)) = uri.params().session_id else {
            return Ok(None);
        };
        let invalid = |why: String| {
            CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': session-id=tag:{tag} {why}"),
            )
        };
        let found = if uri.media() == Media::Udp {
            self.net_publications
                .iter()
                .filter(|e| e.is_active())
                .map(|e| &e.publication)
                .find(|p| entity_tag(&p.channel) == Some(tag))
                .map(|p| (p.session_id, p.term_length, Some(p.mtu)))
        } else {
            self.publications
                .iter()
                .filter(|p| p.is_active())
                .find(|p| entity_tag(&p.channel) == Some(tag))
                .map(|p| (p.session_id, p.logs.term_length(), None))
        };
        let what = if uri.media() == Media::Udp {
            "a network"
        } else {
            "an IPC"
        };
        let (session, term_length, mtu) = found.ok_or_else(|| {
            invalid(format!(
                "must reference {what} publication with tags=...,{tag}"
            ))
        })?;
        let p = uri.params();
        if let Some(t) = p.term_length.filter(|&t| t as usize != term_length) {
            return Err(invalid(format!(
                "has term length {term_length}: term-length={t} does not match"
            )));
        }
        if let (Some(m), Some(mtu)) = (p.mtu, mtu) {
            if m as usize != mtu {
                return Err(invalid(format!("has mtu {mtu}: mtu={m} does not match")));
            }
        }
        let mut tagged = uri
            .with_default("term-length", &term_length.to_string())
            .map_err(|e| invalid(e.to_string()))?;
        if let Some(mtu) = mtu {
            tagged = tagged
                .with_default("mtu", &mtu.to_string())
                .map_err(|e| invalid(e.to_string()))?;
        }
        Ok(Some((tagged, session)))
    }

    /// A new log's entity tag (`tags=C,T`) may be no other live publication's.
    pub(super) fn check_entity_tag_free(&self, channel: &str) -> Result<(), CommandError> {
        let Some(tag) = entity_tag(channel) else {
            return Ok(());
        };
        let taken = self
            .publications
            .iter()
            .filter(|p| p.is_active())
            .map(|p| p.channel.as_str())
            .chain(
                self.net_publications
                    .iter()
                    .filter(|e| e.is_active())
                    .map(|e| e.publication.channel.as_str()),
            )
            .find(|c| entity_tag(c) == Some(tag));
        match taken {
            Some(existing) => Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': entity tag {tag} is already in use by '{existing}'"),
            )),
            None => Ok(()),
        }
    }

    pub(super) fn on_add_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        exclusive: bool,
        now_ns: i64,
    ) -> Result<(), CommandError> {
        let (uri, fixed_session) = parse_channel(channel, stream_id, "publications")?;
        let (uri, fixed_session) = match self.tagged_session(channel, &uri)? {
            Some((tagged, session)) => (tagged, Some(session)),
            None => (uri, fixed_session),
        };
        let p = uri.params();
        let is_response = uri.is_response();
        let response_correlation_id = uri.response_correlation_id().unwrap_or(-1);
        if !is_response {
            self.validate_response_subscription(channel, response_correlation_id)?;
        }
        let has_position = p.init_term_id.is_some();
        if has_position && !exclusive {
            return Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': init-term-id/term-id/term-offset are only valid for exclusive publications"),
            ));
        }
        if uri.media() == Media::Udp {
            return self.on_add_network_publication(
                client_id,
                correlation_id,
                stream_id,
                channel,
                &uri,
                fixed_session,
                exclusive,
            );
        }

        if !exclusive {
            // Concurrent publications on the same stream share one log.
            if let Some(existing) = self.publications.iter_mut().find(|x| {
                !x.exclusive
                    && x.is_active()
                    && x.stream_id == stream_id
                    && fixed_session.is_none_or(|s| s == x.session_id)
                    && x.is_response == is_response
                    && x.response_correlation_id == response_correlation_id
            }) {
                let shared = SharedPublication {
                    registration_id: existing.registration_id,
                    session_id: existing.session_id,
                    limit_counter_id: existing.pub_limit.id(),
                    term_length: existing.logs.term_length(),
                    log_file: existing.logs.path().display().to_string(),
                };
                shared.check_term_length(channel, p.term_length)?;
                existing.ref_count += 1;
                self.join_publication(client_id, correlation_id, stream_id, shared);
                return Ok(());
            }
        }
        if let Some(s) = fixed_session {
            if self
                .publications
                .iter()
                .any(|x| x.is_active() && x.stream_id == stream_id && x.session_id == s)
            {
                return Err(CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!("channel '{channel}': session-id={s} is already in use on stream {stream_id}"),
                ));
            }
        }

        self.check_entity_tag_free(channel)?;
        let (logs, path, session_id, window) = self.create_publication_log(
            correlation_id,
            stream_id,
            channel,
            p,
            fixed_session,
            exclusive,
            false,
        )?;
        let now_ms = self.clock.epoch_ms();
        let pos_name = if exclusive {
            "pub-pos (sampled) exclusive"
        } else {
            "pub-pos (sampled) concurrent"
        };
        let ids = self
            .allocate_stream_counters(
                &[
                    (type_id::PUBLISHER_LIMIT, "pub-lmt"),
                    (type_id::PUBLISHER_POSITION, pos_name),
                ],
                (correlation_id, session_id, stream_id, channel),
                client_id,
                now_ms,
            )
            .map_err(|e| {
                let _ = std::fs::remove_file(&path);
                CommandError::new(error_code::GENERIC_ERROR, e)
            })?;
        let (limit_id, pos_id) = (ids[0], ids[1]);
        let reader = self.counters.reader();
        let mut publication = IpcPublication::new(
            correlation_id,
            session_id,
            stream_id,
            channel.to_string(),
            exclusive,
            logs,
            reader.counter_ref(limit_id),
            reader.counter_ref(pos_id),
            window as i64,
            now_ns,
        );
        publication.is_response = is_response;
        publication.response_correlation_id = response_correlation_id;
        self.publications.push(publication);
        if is_response {
            // Before linking: the requester's response subscription takes
            // this session and is linked with the others below.
            self.bind_ipc_response_subscription(response_correlation_id, session_id);
        }
        self.publication_links.push(PublicationLink {
            registration_id: correlation_id,
            client_id,
            publication_id: correlation_id,
        });
        self.send(Event::PublicationReady {
            correlation_id,
            registration_id: correlation_id,
            session_id,
            stream_id,
            position_limit_counter_id: limit_id,
            channel_status_counter_id: NULL_COUNTER_ID,
            log_file: path.display().to_string(),
            exclusive,
        });
        // Link every matching subscription.
        let idx = self.publications.len() - 1;
        let subs: Vec<usize> = (0..self.subscriptions.len())
            .filter(|&i| {
                let s = &self.subscriptions[i];
                // An IPC publication feeds IPC subscriptions only: a network
                // subscription gets images from its own endpoint, a spy
                // from a UDP publication.
                s.is_ipc() && s.stream_id == stream_id && s.matches_session(session_id)
            })
            .collect();
        for si in subs {
            self.link_subscriber(idx, si);
        }
        Ok(())
    }

    /// Links a further publisher to an existing concurrent publication.
    pub(super) fn join_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        shared: SharedPublication,
    ) {
        self.publication_links.push(PublicationLink {
            registration_id: correlation_id,
            client_id,
            publication_id: shared.registration_id,
        });
        self.send(Event::PublicationReady {
            correlation_id,
            registration_id: shared.registration_id,
            session_id: shared.session_id,
            stream_id,
            position_limit_counter_id: shared.limit_counter_id,
            channel_status_counter_id: NULL_COUNTER_ID,
            log_file: shared.log_file,
            exclusive: false,
        });
    }

    /// Creates a new publication's log file: term length, MTU, session id,
    /// initial position and window from the channel or the driver defaults.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_publication_log(
        &mut self,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        p: &sulis_protocol::uri::ChannelParams,
        fixed_session: Option<i32>,
        exclusive: bool,
        udp: bool,
    ) -> Result<(LogBuffers, PathBuf, i32, usize), CommandError> {
        let has_position = p.init_term_id.is_some();
        let term_length = p.term_length.map(|t| t as usize).unwrap_or(if udp {
            self.ctx.term_buffer_length
        } else {
            self.ctx.ipc_term_buffer_length
        });
        let mtu = p.mtu.map(|m| m as usize).unwrap_or(if udp {
            self.ctx.mtu_length
        } else {
            self.ctx.ipc_mtu_length
        });
        let max_message = compute_max_message_length(term_length);
        if mtu > max_message {
            return Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': mtu {mtu} exceeds the max message length {max_message} of term length {term_length}"),
            ));
        }
        let session_id = fixed_session.unwrap_or_else(|| self.allocate_session_id(stream_id));
        let (initial_term_id, active_term_id, term_offset) = if has_position {
            (
                p.init_term_id.unwrap(),
                p.term_id.unwrap(),
                p.term_offset.unwrap() as i32,
            )
        } else {
            let r = (self.clock.now_ns() as u64
                ^ (correlation_id as u64).wrapping_mul(0x2545_F491_4F6C_DD1D))
            .rotate_left(17) as i32;
            (r, r, 0)
        };
        if term_offset as usize >= term_length {
            return Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': term-offset={term_offset} is not below term length {term_length}"),
            ));
        }
        // The channel's pub-wnd, else the driver's option, else half a term
        // (Aeron's producerWindowLength); never more than half a term.
        let window = p
            .pub_wnd
            .map(|w| w as usize)
            .or((self.ctx.publication_term_window_length > 0)
                .then_some(self.ctx.publication_term_window_length))
            .map_or(term_length / 2, |w| w.min(term_length / 2));
        let params = LogParams {
            correlation_id,
            term_length,
            page_size: self.ctx.file_page_size,
            mtu,
            initial_term_id,
            active_term_id,
            term_offset,
            session_id,
            stream_id,
            log_type: if exclusive {
                LOG_TYPE_EXCLUSIVE
            } else {
                LOG_TYPE_CONCURRENT
            },
            publication_window: window as i32,
            linger_ns: p
                .linger_ns
                .unwrap_or(self.ctx.publication_linger_timeout_ns) as i64,
            sparse: p.sparse.unwrap_or(self.ctx.term_buffer_sparse_file),
            signal_eos: p.eos.unwrap_or(true),
            tether: true,
            reliable: true,
            spies_simulate_connection: udp && p.ssc.unwrap_or(self.ctx.spies_simulate_connection),
        };
        let path = publication_log_file(&self.ctx.dir, correlation_id);
        let initial_position = compute_position(
            active_term_id,
            term_offset,
            position_bits_to_shift(term_length),
            initial_term_id,
        );
        let created = LogBuffers::create(&path, &params).and_then(|l| {
            if udp {
                // The sender reads at the start from the first duty cycle on; an
                // IPC log's page waits for its first subscriber (link_subscriber).
                l.populate_page_at(initial_position)
                    .map(|_| l)
                    .inspect_err(|_| {
                        let _ = std::fs::remove_file(&path);
                    })
            } else {
                Ok(l)
            }
        });
        let logs = created.map_err(|e| {
            let code = if e.raw_os_error() == Some(libc::ENOSPC)
                || e.to_string().contains("insufficient storage")
            {
                error_code::STORAGE_SPACE
            } else {
                error_code::GENERIC_ERROR
            };
            CommandError::new(code, format!("cannot create log buffer: {e}"))
        })?;
        Ok((logs, path, session_id, window))
    }

    /// Links subscription `sub_index` to IPC publication `pub_index`.
    pub(super) fn link_subscriber(&mut self, pub_index: usize, sub_index: usize) {
        let p = &self.publications[pub_index];
        // The subscriber reads at the join; in a sparse log nothing may have
        // taken that page yet, and touching a missing page of a full /dev/shm
        // is a SIGBUS in the subscriber's process.
        if let Err(e) = p.logs.populate_page_at(p.join_position()) {
            let text = format!(
                "subscription {} not linked to IPC publication {} (session {} stream {}): {e}",
                self.subscriptions[sub_index].registration_id,
                p.registration_id,
                p.session_id,
                p.stream_id
            );
            self.record_error(&text);
            return;
        }
        let source = LogSource {
            registration_id: p.registration_id,
            session_id: p.session_id,
            stream_id: p.stream_id,
            log_file: p.logs.path().display().to_string(),
            join: p.join_position(),
        };
        if let Some(s) = self.new_local_subscriber(sub_index, source) {
            self.publications[pub_index].subscribers.push(s);
        }
    }

    /// A subscriber reading a publication's log in place (IPC or spy): its
    /// `sub-pos` counter at the join position, and the image event that
    /// tells the client where the log is. `None` (logged) when no counter
    /// is left.
    pub(super) fn new_local_subscriber(
        &mut self,
        sub_index: usize,
        source: LogSource,
    ) -> Option<LocalSubscriber> {
        let now_ms = self.clock.epoch_ms();
        let s = &self.subscriptions[sub_index];
        let (sub_id, client_id, tether, simulates_connection) = (
            s.registration_id,
            s.client_id,
            s.tether,
            s.simulates_connection,
        );
        let key = stream_counter_key(sub_id, source.session_id, source.stream_id, &s.channel);
        let label = format!(
            "{} @{}",
            stream_counter_label(
                "sub-pos",
                sub_id,
                source.session_id,
                source.stream_id,
                &s.channel
            ),
            source.join
        );
        let counter_id = match self.counters.allocate(
            type_id::SUBSCRIBER_POSITION,
            &key,
            &label,
            sub_id,
            client_id,
            source.registration_id,
            now_ms,
        ) {
            Ok(id) => id,
            Err(e) => {
                self.record_error(&format!(
                    "cannot allocate subscriber position for subscription {sub_id}: {e}"
                ));
                return None;
            }
        };
        let position = self.counters.reader().counter_ref(counter_id);
        position.set_ordered(source.join);
        self.send(Event::AvailableImage {
            correlation_id: source.registration_id,
            session_id: source.session_id,
            stream_id: source.stream_id,
            subscription_registration_id: sub_id,
            subscriber_position_id: counter_id,
            log_file: source.log_file,
            // Aeron names IPC and spy images alike.
            source_identity: "aeron:ipc".to_string(),
        });
        Some(LocalSubscriber {
            subscription_id: sub_id,
            client_id,
            position,
            tether,
            simulates_connection,
        })
    }

    pub(super) fn on_remove_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        now_ns: i64,
    ) -> Result<(), CommandError> {
        let i = self
            .publication_links
            .iter()
            .position(|l| l.registration_id == registration_id && l.client_id == client_id)
            .ok_or_else(|| {
                CommandError::new(
                    error_code::UNKNOWN_PUBLICATION,
                    format!("unknown publication {registration_id}"),
                )
            })?;
        let link = self.publication_links.swap_remove(i);
        self.release_publication_link(link.publication_id, now_ns);
        self.send(Event::OperationSuccess { correlation_id });
        Ok(())
    }

    pub(super) fn release_publication_link(&mut self, publication_id: i64, now_ns: i64) {
        if let Some(p) = self
            .publications
            .iter_mut()
            .find(|p| p.registration_id == publication_id)
        {
            p.ref_count = p.ref_count.saturating_sub(1);
            if p.ref_count == 0 {
                p.close(now_ns);
            }
        }
        if let Some(p) = self
            .net_publications
            .iter_mut()
            .find(|p| p.publication.registration_id == publication_id)
        {
            p.ref_count = p.ref_count.saturating_sub(1);
            if p.ref_count == 0 {
                p.close(now_ns);
            }
        }
    }

    /// Tells every subscriber of IPC publication `index` its image is gone.
    pub(super) fn withdraw_ipc_images(&mut self, index: usize) {
        let p = &self.publications[index];
        let ids: Vec<i64> = p.subscribers.iter().map(|s| s.subscription_id).collect();
        self.withdraw_local_images(p.registration_id, p.stream_id, &ids);
    }

    /// Tells local subscriptions `subscription_ids` (IPC or spies) that the
    /// image of publication `registration_id` is gone.
    pub(super) fn withdraw_local_images(
        &mut self,
        registration_id: i64,
        stream_id: i32,
        subscription_ids: &[i64],
    ) {
        for &id in subscription_ids {
            let channel = self
                .subscriptions
                .iter()
                .find(|x| x.registration_id == id)
                .map(|x| x.channel.clone())
                .unwrap_or_default();
            self.send(Event::UnavailableImage {
                correlation_id: registration_id,
                subscription_registration_id: id,
                stream_id,
                channel,
            });
        }
    }

    pub(super) fn free_publication(&mut self, p: IpcPublication, now_ms: i64) {
        // Its subscribers were told at the end of draining (withdraw_ipc_images).
        for s in &p.subscribers {
            self.counters.free(s.position.id(), now_ms);
        }
        self.counters.free(p.pub_limit.id(), now_ms);
        self.counters.free(p.pub_pos.id(), now_ms);
        if let Err(e) = std::fs::remove_file(p.logs.path()) {
            self.system.increment(SystemCounter::FreeFails);
            self.record_error(&format!("cannot delete {}: {e}", p.logs.path().display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{command_error, TestConductor};
    use super::*;

    fn shared(term_length: usize) -> SharedPublication {
        SharedPublication {
            registration_id: 1,
            session_id: 2,
            limit_counter_id: 3,
            term_length,
            log_file: "1.logbuffer".to_string(),
        }
    }

    #[test]
    fn should_let_a_joining_publisher_keep_or_omit_the_term_length() {
        let p = shared(64 * 1024);
        assert!(p.check_term_length("aeron:ipc", None).is_ok());
        assert!(p.check_term_length("aeron:ipc", Some(64 * 1024)).is_ok());
    }

    #[test]
    fn should_refuse_a_joining_publisher_another_term_length() {
        let e = command_error(
            shared(64 * 1024).check_term_length("aeron:ipc?term-length=128k", Some(128 * 1024)),
        );
        assert_eq!(e.code, error_code::INVALID_CHANNEL);
        assert_eq!(
            e.message,
            "channel 'aeron:ipc?term-length=128k': term-length=131072 differs from the existing publication's 65536"
        );
    }

    #[test]
    fn should_allocate_session_ids_outside_the_reserved_range_and_wrap() {
        let mut t = TestConductor::new("session-ids-reserved");
        let c = &mut t.conductor;
        c.next_session_id = RESERVED_SESSION_ID_LOW - 1;
        assert_eq!(c.allocate_session_id(1), RESERVED_SESSION_ID_LOW - 1);
        assert_eq!(c.allocate_session_id(1), RESERVED_SESSION_ID_HIGH + 1);
        c.next_session_id = i32::MAX;
        assert_eq!(c.allocate_session_id(1), i32::MAX);
        assert_eq!(c.allocate_session_id(1), i32::MIN);
    }

    #[test]
    fn should_skip_session_ids_in_use_on_the_same_stream_only() {
        let mut t = TestConductor::new("session-ids-in-use");
        let c = &mut t.conductor;
        c.ensure_client(5);
        let taken = RESERVED_SESSION_ID_HIGH + 1;
        let channel = format!("aeron:ipc?session-id={taken}");
        c.on_add_publication(5, 100, 10, &channel, true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        c.next_session_id = taken;
        assert_eq!(c.allocate_session_id(10), taken + 1);
        c.next_session_id = taken;
        assert_eq!(c.allocate_session_id(11), taken);
    }

    #[test]
    fn should_give_a_session_id_tag_the_session_and_term_length_of_the_tagged_publication() {
        let mut t = TestConductor::new("session-id-tag");
        let c = &mut t.conductor;
        c.ensure_client(5);
        c.on_add_publication(5, 100, 10, "aeron:ipc?tags=7,99|term-length=128k", true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        let tagged = c.publications[0].session_id;
        // Another stream, the same session and term length.
        c.on_add_publication(5, 101, 11, "aeron:ipc?session-id=tag:99", true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(c.publications[1].session_id, tagged);
        assert_eq!(c.publications[1].logs.term_length(), 128 * 1024);
        // A term length of its own that differs, no such tag, a tag taken twice, UDP for IPC: refused.
        for (channel, why) in [
            (
                "aeron:ipc?session-id=tag:99|term-length=64k",
                "does not match",
            ),
            (
                "aeron:ipc?session-id=tag:98",
                "must reference an IPC publication",
            ),
            ("aeron:ipc?tags=8,99", "entity tag 99 is already in use"),
            (
                "aeron:udp?endpoint=127.0.0.1:40999|session-id=tag:99",
                "must reference a network publication",
            ),
        ] {
            let e = command_error(c.on_add_publication(5, 102, 12, channel, true, 0));
            assert_eq!(e.code, error_code::INVALID_CHANNEL, "{channel}");
            assert!(e.message.contains(why), "{channel}: {}", e.message);
        }
    }

    #[test]
    fn should_refuse_a_fixed_session_id_already_in_use_on_the_stream() {
        let mut t = TestConductor::new("session-id-taken");
        let c = &mut t.conductor;
        c.ensure_client(5);
        c.on_add_publication(5, 100, 10, "aeron:ipc?session-id=4242", true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        let e =
            command_error(c.on_add_publication(5, 101, 10, "aeron:ipc?session-id=4242", true, 0));
        assert_eq!(e.code, error_code::INVALID_CHANNEL);
        assert_eq!(
            e.message,
            "channel 'aeron:ipc?session-id=4242': session-id=4242 is already in use on stream 10"
        );
    }

    /// A moved limit is work (the conductor does not park between moves), and
    /// it moves in steps of an eighth of the window at least, as Aeron's; the
    /// subscriber's page of the sparse log exists once it is linked.
    #[test]
    fn should_move_the_limit_by_an_eighth_of_the_window_and_count_it_as_work() {
        let mut t = TestConductor::new("trip-gain");
        let c = &mut t.conductor;
        c.ensure_client(5);
        c.on_add_publication(5, 100, 10, "aeron:ipc", true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(
            c.publications[0].update_publisher_limit(),
            0,
            "no subscriber, nothing to do"
        );
        c.on_add_subscription(5, 101, 10, "aeron:ipc")
            .unwrap_or_else(|e| panic!("{}", e.message));
        let p = &mut c.publications[0];
        let start = p.producer_position();
        let window = 32 * 1024; // half of the test driver's 64 KiB term
        assert_eq!(
            p.update_publisher_limit(),
            2,
            "connected, and the limit set"
        );
        assert_eq!(p.pub_limit.get(), start + window);
        let sub = p.subscribers[0].position;
        sub.set_ordered(start + window / 8 - 32);
        assert_eq!(p.update_publisher_limit(), 0, "short of the trip gain");
        assert_eq!(p.pub_limit.get(), start + window);
        sub.set_ordered(start + window / 8);
        assert_eq!(p.update_publisher_limit(), 1);
        assert_eq!(p.pub_limit.get(), start + window / 8 + window);
        let used = |path: &std::path::Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(path).unwrap().blocks() * 512
        };
        // The metadata page and the page at the join: nothing was written.
        assert_eq!(used(p.logs.path()), 8192);
    }

    /// Cleaning follows the slowest reader, as Aeron's (the zeroing then lands
    /// on lines just read, still in cache), but an untethered reader behind
    /// the tethered ones keeps its data a term at most, so the writer's next
    /// term is always clean.
    #[test]
    fn should_clean_up_to_the_slowest_reader_but_never_more_than_a_term_behind() {
        let mut t = TestConductor::new("clean-target");
        let c = &mut t.conductor;
        c.ensure_client(5);
        c.on_add_publication(5, 100, 10, "aeron:ipc?term-length=64k", true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        c.on_add_subscription(5, 101, 10, "aeron:ipc")
            .unwrap_or_else(|e| panic!("{}", e.message));
        c.on_add_subscription(5, 102, 10, "aeron:ipc?tether=false")
            .unwrap_or_else(|e| panic!("{}", e.message));
        let p = &mut c.publications[0];
        let term = 64 * 1024_i64;
        let start = p.producer_position();
        assert_eq!(start % term, 0, "the test writes from a term's start");
        p.update_publisher_limit();
        let (tethered, untethered) = (p.subscribers[0].position, p.subscribers[1].position);
        assert!(p.subscribers[0].tether && !p.subscribers[1].tether);
        let index = |pos: i64| {
            sulis_protocol::log_buffer_descriptor::index_by_position(
                pos,
                sulis_protocol::log_buffer_descriptor::position_bits_to_shift(term as usize),
            )
        };
        let dirty = |p: &crate::ipc_publication::IpcPublication, pos: i64| {
            let at = (pos & (term - 1)) as usize;
            p.logs.term(index(pos)).get_i64_volatile(at) != 0
        };
        // Stand-in for written frames: a non-zero word every 4 KiB of the first term.
        for at in (0..term).step_by(4096) {
            p.logs.term(index(start)).put_i64_ordered(at as usize, -1);
        }
        // Both read 16 KiB: cleaned up to them.
        tethered.set_ordered(start + 16 * 1024);
        untethered.set_ordered(start + 16 * 1024);
        assert_eq!(p.update_publisher_limit(), 1);
        assert!(!dirty(p, start + 12 * 1024), "read by both: cleaned");
        assert!(dirty(p, start + 16 * 1024), "not read yet: kept");
        // The untethered one stays at 16 KiB: it keeps its data.
        tethered.set_ordered(start + term);
        assert_eq!(p.update_publisher_limit(), 1);
        assert!(
            dirty(p, start + 16 * 1024),
            "the untethered reader is still there"
        );
        assert!(!dirty(p, start + 12 * 1024));
        // The tethered one is two terms on: cleaning passes the untethered
        // reader, a term behind the tethered one.
        tethered.set_ordered(start + 2 * term);
        assert_eq!(p.update_publisher_limit(), 1);
        assert!(!dirty(p, start + 16 * 1024) && !dirty(p, start + term - 4096));
    }

    /// A publication nobody reads, its limit where its producer is, cannot
    /// move: the conductor passes it by between timer ticks. A subscriber, or
    /// a limit that stands above the producer, makes it visited again.
    #[test]
    fn should_pass_by_a_publication_nobody_reads_only_while_its_limit_holds_the_producer() {
        let mut t = TestConductor::new("still");
        let c = &mut t.conductor;
        c.ensure_client(5);
        c.on_add_publication(5, 100, 10, "aeron:ipc", true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert!(
            c.publications[0].is_still(),
            "new, unread: limit at the start"
        );
        c.on_add_subscription(5, 101, 10, "aeron:ipc")
            .unwrap_or_else(|e| panic!("{}", e.message));
        let p = &mut c.publications[0];
        assert!(!p.is_still(), "a subscriber");
        p.update_publisher_limit();
        assert!(p.pub_limit.get() > p.producer_position());
        c.on_remove_subscription(5, 102, 101)
            .unwrap_or_else(|e| panic!("{}", e.message));
        let p = &mut c.publications[0];
        assert!(p.subscribers.is_empty());
        assert!(!p.is_still(), "the limit still stands above the producer");
        p.update_publisher_limit();
        assert_eq!(p.pub_limit.get(), p.producer_position());
        assert!(p.is_still(), "nobody reads and nothing can be appended");
    }
}
