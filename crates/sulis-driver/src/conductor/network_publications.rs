//! Network (UDP) publications: add (joining an existing concurrent
//! publication), handing them to the sender, and the timer that frees
//! those done.

use super::endpoints::EndpointEntry;
use super::ipc_publications::{PublicationLink, SharedPublication};
use super::{CommandError, DriverConductor};
use crate::flow_control::{FlowControlDefaults, FlowControlSpec};
use crate::lifecycle::PublicationState;
use crate::media::transport::{EndpointRole, SplitTransport};
use crate::media::udp_transport::SocketOptions;
use crate::multi_send_destination::MdcMode;
use crate::network_publication::{
    FlowControlCounters, NetworkPublication, NetworkPublicationEntry, ReResolution,
};
use crate::sender::SenderCommand;
use crate::system_counters::{stream_counter_key, type_id, SystemCounter};
use arc_swap::ArcSwap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8};
use std::sync::Arc;
use sulis_concurrent::counters::NULL_COUNTER_ID;
use sulis_protocol::control::{error_code, Event};
use sulis_protocol::log_buffer_descriptor::*;
use sulis_protocol::uri::{ChannelUri, ControlMode, RESPONSE_CORRELATION_PROTOTYPE};

impl DriverConductor {
    /// The driver's flow-control options, for publications whose channel leaves them out.
    fn flow_control_defaults(&self) -> FlowControlDefaults {
        FlowControlDefaults {
            multicast_strategy: self.ctx.multicast_flow_control,
            group_tag: self.ctx.flow_control_group_tag,
            group_min_size: self.ctx.flow_control_group_min_size,
            receiver_timeout_ns: self
                .ctx
                .flow_control_receiver_timeout_ns
                .min(i64::MAX as u64) as i64,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_add_network_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        uri: &ChannelUri,
        fixed_session: Option<i32>,
        exclusive: bool,
    ) -> Result<(), CommandError> {
        if let Some(tagged) = self.tagged_channel(channel, uri, false)? {
            let tagged_uri = ChannelUri::parse(&tagged)
                .map_err(|e| CommandError::new(error_code::INVALID_CHANNEL, e.to_string()))?;
            return self.on_add_network_publication(
                client_id,
                correlation_id,
                stream_id,
                &tagged,
                &tagged_uri,
                fixed_session,
                exclusive,
            );
        }
        let udp = self.resolve_udp(channel, uri, false)?;
        let p = uri.params();
        let is_response = udp.is_response;
        let mdc = match p.control_mode {
            Some(ControlMode::Dynamic) => Some(MdcMode::Dynamic),
            Some(ControlMode::Manual) => Some(MdcMode::Manual),
            _ => None,
        };
        let group = udp.is_multicast || mdc.is_some();
        let flow_control =
            FlowControlSpec::of(p.fc.as_deref(), group, &self.flow_control_defaults()).map_err(
                |e| {
                    CommandError::new(
                        error_code::INVALID_CHANNEL,
                        format!("channel '{channel}': {e}"),
                    )
                },
            )?;
        // A response publication answers the request image its
        // response-correlation-id names, and sends only where that
        // requester's setup-eliciting status message comes from.
        let (response_image, response_correlation_id) = if is_response {
            let id = uri.response_correlation_id();
            (self.find_response_image(channel, id)?, id.unwrap_or(-1))
        } else {
            let id = uri.response_correlation_id().unwrap_or(-1);
            self.validate_response_subscription(channel, id)?;
            (None, id)
        };
        // Unicast and multicast send to their endpoint; a response
        // publication learns where, an MDC one sends to its endpoint's destinations.
        let destination = if is_response || mdc.is_some() {
            None
        } else {
            Some(udp.endpoint.expect("checked by resolve_udp"))
        };
        let key = Self::endpoint_key(&udp, uri, correlation_id, false);
        if let Some(mtu) = p.mtu {
            if mtu as usize > crate::media::udp_transport::MAX_UDP_PAYLOAD_LENGTH {
                return Err(CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!("channel '{channel}': mtu={mtu} exceeds the largest UDP payload 65504"),
                ));
            }
        }
        if !exclusive {
            if let Some(existing) = self.net_publications.iter_mut().find(|x| {
                !x.publication.exclusive
                    && x.is_active()
                    && x.endpoint_key == key
                    && x.publication.stream_id == stream_id
                    && fixed_session.is_none_or(|s| s == x.publication.session_id)
                    && x.publication.response_correlation_id == response_correlation_id
            }) {
                let np = &existing.publication;
                let shared = SharedPublication {
                    registration_id: np.registration_id,
                    session_id: np.session_id,
                    limit_counter_id: np.pub_limit.id(),
                    term_length: np.term_length,
                    log_file: np.logs.path().display().to_string(),
                };
                shared.check_term_length(channel, p.term_length)?;
                existing.ref_count += 1;
                self.join_publication(client_id, correlation_id, stream_id, shared);
                return Ok(());
            }
        }
        if let Some(s) = fixed_session {
            if self.net_publications.iter().any(|x| {
                x.is_active()
                    && x.endpoint_key == key
                    && x.publication.stream_id == stream_id
                    && x.publication.session_id == s
            }) {
                return Err(CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!("channel '{channel}': session-id={s} is already in use on stream {stream_id}"),
                ));
            }
        }

        self.check_entity_tag_free(channel)?;
        // The send endpoint: one socket per canonical channel.
        let security = self.channel_security(p, channel)?;
        let endpoint_id = match self.send_endpoints.iter_mut().find(|e| e.key == key) {
            Some(e) => {
                Self::check_endpoint_security(e, security, channel)?;
                e.ref_count += 1;
                e.id
            }
            None => {
                let channel_tag = self.claim_channel_tag(channel, uri, false)?;
                let towards = destination.or(udp.control);
                let local = match (udp.control, udp.interface) {
                    // The control address is the publication's own: the
                    // response port requesters elicit setups from, the MDC
                    // address receivers send status messages to.
                    (Some(c), _) => c,
                    (None, Some(i)) => SocketAddr::new(i.addr, i.port),
                    (None, None) => match towards.map(|t| t.ip()) {
                        Some(IpAddr::V6(_)) => {
                            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
                        }
                        _ => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
                    },
                };
                let (id, transport, rcvbuf) = match udp.multicast_control {
                    Some(control) => {
                        // Data out of a socket on the interface; status
                        // messages and NAKs in on the control group.
                        let opts = self.multicast_options(&udp, channel)?;
                        let local = match opts.multicast_interface {
                            Some((ip, _)) => {
                                SocketAddr::new(ip, udp.interface.map_or(0, |i| i.port))
                            }
                            None => local,
                        };
                        let send =
                            self.open_transport(local, &opts, channel, EndpointRole::Send)?;
                        let control_opts = SocketOptions {
                            reuse_address: true,
                            join_group: Some(control.ip()),
                            ..opts
                        };
                        let control = self.open_transport(
                            control,
                            &control_opts,
                            channel,
                            EndpointRole::Send,
                        )?;
                        self.register_transport(
                            Box::new(SplitTransport::new(send, control)),
                            security,
                            channel,
                        )?
                    }
                    None => self.bind_endpoint(local, p, channel, EndpointRole::Send)?,
                };
                let _ = self
                    .net
                    .sender
                    .send(SenderCommand::AddEndpoint { id, transport, mdc });
                self.send_endpoints.push(EndpointEntry {
                    id,
                    key: key.clone(),
                    ref_count: 1,
                    rcvbuf,
                    rcv_wnd: None,
                    reliable: true,
                    status_counter_id: NULL_COUNTER_ID,
                    counters: Vec::new(),
                    control: None,
                    group: None,
                    group_tag: None,
                    mdc,
                    destinations: Vec::new(),
                    channel_tag,
                    security,
                });
                id
            }
        };

        // A prototype only keeps the response port open: the least log.
        let prototype_params;
        let p = if response_correlation_id == RESPONSE_CORRELATION_PROTOTYPE {
            prototype_params = sulis_protocol::uri::ChannelParams {
                term_length: Some(TERM_MIN_LENGTH as u32),
                ..p.clone()
            };
            &prototype_params
        } else {
            p
        };
        let created = self.create_publication_log(
            correlation_id,
            stream_id,
            channel,
            p,
            fixed_session,
            exclusive,
            true,
        );
        let (logs, path, session_id, window) = match created {
            Ok(c) => c,
            Err(e) => {
                self.release_send_endpoint(endpoint_id);
                return Err(e);
            }
        };
        let now_ms = self.clock.epoch_ms();
        let ids = match self.allocate_stream_counters(
            &[
                (type_id::PUBLISHER_LIMIT, "pub-lmt"),
                (type_id::PUBLISHER_POSITION, "pub-pos (sampled)"),
                (type_id::SENDER_POSITION, "snd-pos"),
                (type_id::SENDER_LIMIT, "snd-lmt"),
            ],
            (correlation_id, session_id, stream_id, channel),
            client_id,
            now_ms,
        ) {
            Ok(ids) => ids,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                self.release_send_endpoint(endpoint_id);
                return Err(CommandError::new(error_code::GENERIC_ERROR, e));
            }
        };
        let reader = self.counters.reader();
        let term_length = logs.term_length();
        let spies_simulate_connection =
            logs.meta().get_u8(LOG_SPIES_SIMULATE_CONNECTION_OFFSET) != 0;
        let publication = Arc::new(NetworkPublication {
            registration_id: correlation_id,
            session_id,
            stream_id,
            channel: channel.to_string(),
            destination,
            group,
            flow_control,
            max_resend: p.max_resend.map_or(self.ctx.max_resend, |m| m as usize),
            is_response,
            response_correlation_id,
            exclusive,
            bits: position_bits_to_shift(term_length),
            term_length,
            initial_term_id: logs.initial_term_id(),
            mtu: logs.mtu(),
            ttl: p
                .ttl
                .map_or(self.ctx.socket_multicast_ttl as i32, |t| t as i32),
            logs,
            pub_limit: reader.counter_ref(ids[0]),
            pub_pos: reader.counter_ref(ids[1]),
            snd_pos: reader.counter_ref(ids[2]),
            snd_lmt: reader.counter_ref(ids[3]),
            time_of_last_sm_ns: AtomicI64::new(i64::MIN),
            status: AtomicU8::new(crate::network_publication::status::ACTIVE),
            signal_eos: p.eos.unwrap_or(true),
            spies_simulate_connection,
            spy_catch_up: AtomicI64::new(crate::network_publication::NO_CATCH_UP),
            required_receivers: AtomicBool::new(
                !flow_control.tracks_receivers() || flow_control.group_min_size == 0,
            ),
            receivers: ArcSwap::from_pointee(Vec::new()),
        });
        let mut entry = NetworkPublicationEntry::new(publication.clone(), key, window as i64);
        if flow_control.tracks_receivers() {
            // A full counters file loses only the view, not the stream.
            if let Ok(ids) = self.allocate_stream_counters(
                &[(type_id::FLOW_CONTROL_RECEIVERS, "fc-receivers")],
                (correlation_id, session_id, stream_id, channel),
                client_id,
                now_ms,
            ) {
                entry.flow_control_counters = Some(FlowControlCounters {
                    receivers_counter_id: ids[0],
                    per_receiver: Vec::new(),
                    shown: publication.receivers.load_full(),
                });
            }
        }
        entry.awaiting_response_connect = response_image.is_some();
        // A name sent to is looked up again now and then (an MDC publication
        // sends to its destinations, not to an endpoint it may also name).
        if let (Some(name), Some(address)) = (
            p.endpoint
                .as_deref()
                .filter(|e| e.parse::<SocketAddr>().is_err()),
            destination,
        ) {
            entry.re_resolution = Some(ReResolution {
                name: name.to_string(),
                address,
                last_lookup_ns: self.clock.now_ns(),
            });
        }
        self.net_publications.push(entry);
        let _ = self.net.sender.send(SenderCommand::AddPublication {
            endpoint_id,
            publication: publication.clone(),
        });
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
            position_limit_counter_id: ids[0],
            channel_status_counter_id: NULL_COUNTER_ID,
            log_file: path.display().to_string(),
            exclusive,
        });
        if let Some(image) = response_image {
            // After PUBLICATION_READY, as Aeron: the requester hears the
            // session only once the publication exists.
            Self::arm_response_image(&image, session_id);
        }
        let ni = self.net_publications.len() - 1;
        let spies: Vec<usize> = (0..self.subscriptions.len())
            .filter(|&si| {
                let p = &self.net_publications[ni];
                self.subscriptions[si].spies_on(p, || self.send_channel_tag(p))
            })
            .collect();
        for si in spies {
            self.link_spy(ni, si);
        }
        Ok(())
    }

    /// The close sequence of network publication `index` (every duty cycle
    /// while it drains, on the timer after): when draining ends its spies
    /// learn the image is gone.
    pub(super) fn step_network_publication_close(&mut self, index: usize, now_ns: i64) -> usize {
        let connection_timeout_ns = self.ctx.publication_connection_timeout_ns as i64;
        let p = &mut self.net_publications[index];
        // The channel's linger (written into the log) or the driver's.
        let linger_ns = p
            .publication
            .logs
            .meta()
            .get_i64(LOG_LINGER_TIMEOUT_NS_OFFSET);
        if !p.on_time_event(now_ns, linger_ns, connection_timeout_ns) {
            return 0;
        }
        let (registration_id, stream_id) = (p.publication.registration_id, p.publication.stream_id);
        let ids: Vec<i64> = p.spies.iter().map(|s| s.subscription_id).collect();
        self.withdraw_local_images(registration_id, stream_id, &ids);
        1
    }

    /// Network publications: steps their state on and frees those done
    /// (sender, counters, send endpoint, log).
    /// Brings publication `i`'s flow-control counters in step with the
    /// receivers its sender last published: one `fc-receiver` counter per
    /// receiver (added, freed, its position updated) and their number.
    pub(super) fn sync_flow_control_counters(&mut self, i: usize) {
        let entry = &self.net_publications[i];
        let Some(fc) = &entry.flow_control_counters else {
            return;
        };
        // A look first (no reference taken): the list is the same one most
        // cycles.
        if Arc::ptr_eq(&entry.publication.receivers.load(), &fc.shown) {
            return;
        }
        let p = entry.publication.clone();
        let receivers = p.receivers.load_full();
        let now_ms = self.clock.epoch_ms();
        let mut fc = self.net_publications[i]
            .flow_control_counters
            .take()
            .expect("checked above");
        fc.per_receiver.retain(|(id, counter)| {
            let kept = receivers.iter().any(|r| r.receiver_id == *id);
            if !kept {
                self.counters.free(counter.id(), now_ms);
            }
            kept
        });
        let key = stream_counter_key(p.registration_id, p.session_id, p.stream_id, &p.channel);
        for r in receivers.iter() {
            match fc.per_receiver.iter().find(|(id, _)| *id == r.receiver_id) {
                Some((_, counter)) => counter.set_ordered(r.position),
                None => {
                    let label = format!(
                        "fc-receiver: {} {} {} {} {} {}",
                        r.receiver_id,
                        r.address,
                        p.registration_id,
                        p.session_id,
                        p.stream_id,
                        p.channel
                    );
                    if let Ok(id) = self.counters.allocate(
                        type_id::SULIS_FLOW_CONTROL_RECEIVER,
                        &key,
                        &label,
                        p.registration_id,
                        0,
                        r.receiver_id,
                        now_ms,
                    ) {
                        let counter = self.counters.reader().counter_ref(id);
                        counter.set_ordered(r.position);
                        fc.per_receiver.push((r.receiver_id, counter));
                    }
                }
            }
        }
        self.counters
            .set_counter_value(fc.receivers_counter_id, receivers.len() as i64);
        fc.shown = receivers;
        self.net_publications[i].flow_control_counters = Some(fc);
    }

    pub(super) fn on_network_publications_timer(&mut self, now_ns: i64, now_ms: i64) -> usize {
        let mut work = 0;
        for i in 0..self.net_publications.len() {
            work += self.step_network_publication_close(i, now_ns);
        }
        let mut i = 0;
        while i < self.net_publications.len() {
            if self.net_publications[i].state == PublicationState::Done {
                let entry = self.net_publications.swap_remove(i);
                let p = entry.publication;
                let _ = self.net.sender.send(SenderCommand::RemovePublication {
                    registration_id: p.registration_id,
                });
                if let Some(fc) = &entry.flow_control_counters {
                    self.counters.free(fc.receivers_counter_id, now_ms);
                    for (_, c) in &fc.per_receiver {
                        self.counters.free(c.id(), now_ms);
                    }
                }
                // Its spies were told at the end of draining.
                let spies = entry.spies.iter().map(|s| &s.position);
                for c in [&p.pub_limit, &p.pub_pos, &p.snd_pos, &p.snd_lmt]
                    .into_iter()
                    .chain(spies)
                {
                    self.counters.free(c.id(), now_ms);
                }
                if let Some(e) = self
                    .send_endpoints
                    .iter()
                    .find(|e| e.key == entry.endpoint_key)
                {
                    let id = e.id;
                    self.release_send_endpoint(id);
                }
                if let Err(e) = std::fs::remove_file(p.logs.path()) {
                    self.system.increment(SystemCounter::FreeFails);
                    self.record_error(&format!("cannot delete {}: {e}", p.logs.path().display()));
                }
                work += 1;
            } else {
                i += 1;
            }
        }
        work
    }
}
