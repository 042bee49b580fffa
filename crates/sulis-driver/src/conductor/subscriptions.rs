//! Subscriptions: the links clients hold, adding (IPC, UDP, deferred while
//! the old socket on the address closes, and spies on this driver's UDP
//! publications), removing and unlinking from publications and images.

use super::endpoints::EndpointEntry;
use super::images::ImageState;
use super::ipc_publications::LogSource;
use super::{parse_channel, CommandError, DriverConductor};
use crate::media::transport::EndpointRole;
use crate::media::udp_transport::SocketOptions;
use crate::multi_send_destination::MdcMode;
use crate::network_publication::NetworkPublicationEntry;
use crate::publication_image::PublicationImage;
use crate::receiver::ReceiverCommand;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use sulis_concurrent::counters::NULL_COUNTER_ID;
use sulis_protocol::control::{error_code, Event};
use sulis_protocol::uri::{ChannelUri, ControlMode, Media};

pub(super) struct SubscriptionLink {
    pub(super) registration_id: i64,
    pub(super) client_id: i64,
    pub(super) stream_id: i32,
    pub(super) channel: String,
    pub(super) session_filter: Option<i32>,
    pub(super) tether: bool,
    /// Receive endpoint of a UDP subscription (`None` for IPC and spies).
    pub(super) udp_endpoint: Option<u64>,
    /// For a spy: the network publications it watches.
    pub(super) spy: Option<SpyTarget>,
    /// A spy with `ssc=true`: counts as a connection for what it spies on.
    pub(super) simulates_connection: bool,
    /// A response subscription (`control-mode=response`).
    pub(super) is_response: bool,
    /// A response subscription whose session the server has not named yet:
    /// it matches no publication and no image until then.
    pub(super) awaiting_response: bool,
    /// A UDP response subscription's `control`: the server's response port,
    /// where its setup-eliciting status messages go.
    pub(super) response_control: Option<SocketAddr>,
}

impl SubscriptionLink {
    /// True if a stream of session `session_id` is for this subscription
    /// (its stream id aside).
    pub(super) fn matches_session(&self, session_id: i32) -> bool {
        !self.awaiting_response && self.session_filter.is_none_or(|f| f == session_id)
    }

    /// An IPC subscription: neither a UDP subscription nor a spy.
    pub(super) fn is_ipc(&self) -> bool {
        self.udp_endpoint.is_none() && self.spy.is_none()
    }

    /// True if this is a spy on the network publication `p`, whose send
    /// endpoint has the channel tag `channel_tag`.
    /// `channel_tag` gives the publication's send endpoint's channel tag; it
    /// is asked only of a spy on the publication's stream (it walks the send
    /// endpoints: asked of every subscription for each publication added, it
    /// made each add of a stream on a port of its own cost N² comparisons).
    pub(super) fn spies_on(
        &self,
        p: &NetworkPublicationEntry,
        channel_tag: impl FnOnce() -> Option<i64>,
    ) -> bool {
        self.spy.as_ref().is_some_and(|spy| {
            self.stream_id == p.publication.stream_id
                && self.matches_session(p.publication.session_id)
                && spy.watches(&p.endpoint_key, channel_tag())
        })
    }
}

/// What a spy watches, as Aeron's: the network publications whose send
/// endpoint has the spied channel's channel tag or canonical form.
pub(super) struct SpyTarget {
    /// The canonical form of the spied channel's addresses (`None`: a
    /// channel naming only a channel tag).
    canonical: Option<String>,
    /// The spied channel's channel tag (`tags=C,...`).
    tag: Option<i64>,
}

impl SpyTarget {
    /// True for a send endpoint with key `endpoint_key` and channel tag
    /// `channel_tag`. A publication with neither endpoint nor control (a
    /// manual MDC one) has an endpoint of its own, its key the canonical
    /// form and a suffix (`#...`): a spy with neither, and without a channel
    /// tag, watches every such publication (in Aeron such a spy has a
    /// unique canonical form of its own and matches none); with a channel
    /// tag, those of its tag.
    fn watches(&self, endpoint_key: &str, channel_tag: Option<i64>) -> bool {
        if self.tag.is_some() && self.tag == channel_tag {
            return true;
        }
        let (canonical, own_endpoint) = match endpoint_key.split_once('#') {
            Some((canonical, _)) => (canonical, true),
            None => (endpoint_key, false),
        };
        self.canonical.as_deref() == Some(canonical) && (!own_endpoint || self.tag.is_none())
    }
}

/// An add-subscription command that waits until the receiver has closed the
/// socket of a removed endpoint with the same address.
pub(super) struct DeferredSubscription {
    pub(super) key: String,
    pub(super) client_id: i64,
    pub(super) correlation_id: i64,
    pub(super) stream_id: i32,
    pub(super) channel: String,
}

impl DriverConductor {
    pub(super) fn on_add_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
    ) -> Result<(), CommandError> {
        let (uri, session_filter) = parse_channel(channel, stream_id, "subscriptions")?;
        if uri.is_spy() {
            return self.on_add_spy_subscription(
                client_id,
                correlation_id,
                stream_id,
                channel,
                &uri,
                session_filter,
            );
        }
        if uri.media() == Media::Udp {
            return self.on_add_udp_subscription(
                client_id,
                correlation_id,
                stream_id,
                channel,
                &uri,
                session_filter,
            );
        }
        let p = uri.params();
        let is_response = uri.is_response();
        self.subscriptions.push(SubscriptionLink {
            registration_id: correlation_id,
            client_id,
            stream_id,
            channel: channel.to_string(),
            session_filter,
            tether: p.tether.unwrap_or(true),
            udp_endpoint: None,
            spy: None,
            simulates_connection: false,
            is_response,
            awaiting_response: is_response && session_filter.is_none(),
            response_control: None,
        });
        self.send(Event::SubscriptionReady {
            correlation_id,
            channel_status_counter_id: NULL_COUNTER_ID,
        });
        let si = self.subscriptions.len() - 1;
        let pubs: Vec<usize> = (0..self.publications.len())
            .filter(|&i| {
                let x = &self.publications[i];
                x.is_active()
                    && x.stream_id == stream_id
                    && self.subscriptions[si].matches_session(x.session_id)
            })
            .collect();
        for pi in pubs {
            self.link_subscriber(pi, si);
        }
        Ok(())
    }

    pub(super) fn unlink_subscription(&mut self, link: &SubscriptionLink) {
        let registration_id = link.registration_id;
        let now_ms = self.clock.epoch_ms();
        let readers = self
            .publications
            .iter_mut()
            .map(|p| &mut p.subscribers)
            .chain(self.net_publications.iter_mut().map(|p| &mut p.spies));
        for subscribers in readers {
            subscribers.retain(|s| {
                if s.subscription_id == registration_id {
                    self.counters.free(s.position.id(), now_ms);
                    false
                } else {
                    true
                }
            });
        }
        if let Some(endpoint_id) = link.udp_endpoint {
            for entry in self.images.iter() {
                for s in entry
                    .image
                    .remove_subscribers(|s| s.subscription_id == registration_id)
                {
                    self.counters.free(s.position.id(), now_ms);
                }
            }
            // A response subscription is handed to the receiver once the
            // server named its session.
            if !link.awaiting_response {
                let _ = self.net.receiver.send(ReceiverCommand::RemoveSubscription {
                    endpoint_id,
                    stream_id: link.stream_id,
                });
            }
            if let Some(e) = self
                .receive_endpoints
                .iter_mut()
                .find(|e| e.id == endpoint_id)
            {
                e.ref_count -= 1;
            }
            self.close_receive_endpoint_if_unused(endpoint_id);
        }
    }

    pub(super) fn on_remove_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
    ) -> Result<(), CommandError> {
        let i = self
            .subscriptions
            .iter()
            .position(|s| s.registration_id == registration_id && s.client_id == client_id)
            .ok_or_else(|| {
                CommandError::new(
                    error_code::UNKNOWN_SUBSCRIPTION,
                    format!("unknown subscription {registration_id}"),
                )
            })?;
        let link = self.subscriptions.swap_remove(i);
        self.unlink_subscription(&link);
        self.send(Event::OperationSuccess { correlation_id });
        Ok(())
    }

    /// A spy (`aeron-spy:aeron:udp?...`): reads every matching UDP
    /// publication of this driver in place, as IPC subscribers do; no
    /// socket is bound.
    fn on_add_spy_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        uri: &ChannelUri,
        session_filter: Option<i32>,
    ) -> Result<(), CommandError> {
        let spied = uri.without_spy_prefix();
        let sp = spied.params();
        let tag = sp.tags.map(|(tag, _)| tag);
        // A channel naming only a channel tag watches that tag's publications.
        let tag_only = tag.is_some()
            && sp.endpoint.is_none()
            && sp.control.is_none()
            && sp.control_mode.is_none();
        let canonical = if tag_only {
            None
        } else {
            Some(self.resolve_udp(channel, &spied, false)?.canonical)
        };
        self.subscriptions.push(SubscriptionLink {
            registration_id: correlation_id,
            client_id,
            stream_id,
            channel: channel.to_string(),
            session_filter,
            tether: uri.params().tether.unwrap_or(true),
            udp_endpoint: None,
            spy: Some(SpyTarget { canonical, tag }),
            simulates_connection: uri.params().ssc.unwrap_or(false),
            is_response: false,
            awaiting_response: false,
            response_control: None,
        });
        self.send(Event::SubscriptionReady {
            correlation_id,
            channel_status_counter_id: NULL_COUNTER_ID,
        });
        let si = self.subscriptions.len() - 1;
        let spied: Vec<usize> = (0..self.net_publications.len())
            .filter(|&i| {
                let p = &self.net_publications[i];
                p.is_active() && self.subscriptions[si].spies_on(p, || self.send_channel_tag(p))
            })
            .collect();
        for ni in spied {
            self.link_spy(ni, si);
        }
        Ok(())
    }

    /// Links spy subscription `sub_index` to network publication `pub_index`.
    pub(super) fn link_spy(&mut self, pub_index: usize, sub_index: usize) {
        let p = &self.net_publications[pub_index];
        let np = &p.publication;
        let source = LogSource {
            registration_id: np.registration_id,
            session_id: np.session_id,
            stream_id: np.stream_id,
            log_file: np.logs.path().display().to_string(),
            join: p.spy_join_position(),
        };
        if let Some(s) = self.new_local_subscriber(sub_index, source) {
            self.net_publications[pub_index].spies.push(s);
        }
    }

    fn on_add_udp_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        uri: &ChannelUri,
        session_filter: Option<i32>,
    ) -> Result<(), CommandError> {
        if let Some(tagged) = self.tagged_channel(channel, uri, true)? {
            let tagged_uri = ChannelUri::parse(&tagged)
                .map_err(|e| CommandError::new(error_code::INVALID_CHANNEL, e.to_string()))?;
            return self.on_add_udp_subscription(
                client_id,
                correlation_id,
                stream_id,
                &tagged,
                &tagged_uri,
                session_filter,
            );
        }
        let udp = self.resolve_udp(channel, uri, true)?;
        let p = uri.params();
        let mds = p.control_mode == Some(ControlMode::Manual);
        // An `endpoint=host:0` channel asks for a port of its own, an MDS
        // subscription for an endpoint of its own (or its channel tag's).
        let key = Self::endpoint_key(&udp, uri, correlation_id, true);
        if self
            .closing_receive_endpoints
            .iter()
            .any(|(_, k)| *k == key)
        {
            // The receiver still holds the old socket on this address; bind
            // once it has closed it (a few microseconds at most).
            self.deferred_subscriptions.push(DeferredSubscription {
                key,
                client_id,
                correlation_id,
                stream_id,
                channel: channel.to_string(),
            });
            return Ok(());
        }
        let security = self.channel_security(p, channel)?;
        let (endpoint_id, status_counter_id) =
            match self.receive_endpoints.iter_mut().find(|e| e.key == key) {
                Some(e) => {
                    Self::check_endpoint_security(e, security, channel)?;
                    if e.ref_count == 0 {
                        // Kept open only for lingering images: the new
                        // subscription's settings apply from now on.
                        e.rcv_wnd = p.rcv_wnd.map(|w| w as usize);
                        e.reliable = p.reliable.unwrap_or(true);
                    }
                    e.ref_count += 1;
                    (e.id, e.status_counter_id)
                }
                None if mds => {
                    let channel_tag = self.claim_channel_tag(channel, uri, true)?;
                    // A multi-destination subscription: no socket until a
                    // destination brings one (its endpoint, if named, is not bound).
                    let id = self.next_endpoint_id;
                    self.next_endpoint_id += 1;
                    let (status_counter_id, counters) =
                        self.receive_channel_status_counter(channel);
                    let group_tag = p.gtag.or(self.ctx.receiver_group_tag);
                    let _ = self.net.receiver.send(ReceiverCommand::AddEndpoint {
                        id,
                        transport: None,
                        control: None,
                        probe: false,
                        group_tag,
                        multicast_ttl: None,
                    });
                    self.receive_endpoints.push(EndpointEntry {
                        id,
                        key,
                        ref_count: 1,
                        rcvbuf: self.ctx.socket_rcvbuf_length,
                        rcv_wnd: p.rcv_wnd.map(|w| w as usize),
                        reliable: p.reliable.unwrap_or(true),
                        status_counter_id,
                        counters,
                        control: None,
                        group: p.group,
                        group_tag,
                        mdc: Some(MdcMode::Manual),
                        destinations: Vec::new(),
                        channel_tag,
                        security,
                    });
                    (id, status_counter_id)
                }
                None => {
                    let channel_tag = self.claim_channel_tag(channel, uri, true)?;
                    // A response or MDC subscription without an endpoint
                    // takes an ephemeral port: the server (the publication)
                    // learns it from the status messages it sends.
                    let bind = udp.endpoint.unwrap_or_else(|| {
                        let control = udp.control.expect("checked by resolve_udp");
                        wildcard_like(control)
                    });
                    let (id, transport, rcvbuf) = if udp.is_multicast {
                        // Bound to the group (its datagrams only, whatever
                        // else shares the port) and joined to it; status
                        // messages and NAKs go from here to the control group.
                        let opts = SocketOptions {
                            reuse_address: true,
                            join_group: Some(bind.ip()),
                            ..self.multicast_options(&udp, channel)?
                        };
                        let t = self.open_transport(bind, &opts, channel, EndpointRole::Receive)?;
                        self.register_transport(t, security, channel)?
                    } else {
                        self.bind_endpoint(bind, p, channel, EndpointRole::Receive)?
                    };
                    let (status_counter_id, counters) =
                        self.receive_endpoint_counters(channel, transport.local_addr());
                    let group_tag = p.gtag.or(self.ctx.receiver_group_tag);
                    // Status messages and NAKs go to the multicast control
                    // group, or to the publication's explicit control address
                    // (MDC), which also hears a probe every second.
                    let explicit = udp.control.filter(|_| !udp.is_response);
                    let control = udp.multicast_control.or(explicit);
                    let _ = self.net.receiver.send(ReceiverCommand::AddEndpoint {
                        id,
                        transport: Some(transport),
                        control,
                        probe: explicit.is_some(),
                        group_tag,
                        multicast_ttl: self.multicast_ttl(&udp),
                    });
                    self.receive_endpoints.push(EndpointEntry {
                        id,
                        key,
                        ref_count: 1,
                        rcvbuf,
                        rcv_wnd: p.rcv_wnd.map(|w| w as usize),
                        reliable: p.reliable.unwrap_or(true),
                        status_counter_id,
                        counters,
                        control,
                        group: p.group,
                        group_tag,
                        mdc: None,
                        destinations: Vec::new(),
                        channel_tag,
                        security,
                    });
                    (id, status_counter_id)
                }
            };
        let awaiting_response = udp.is_response && session_filter.is_none();
        if !awaiting_response {
            let _ = self.net.receiver.send(ReceiverCommand::AddSubscription {
                endpoint_id,
                stream_id,
            });
        }
        self.subscriptions.push(SubscriptionLink {
            registration_id: correlation_id,
            client_id,
            stream_id,
            channel: channel.to_string(),
            session_filter,
            tether: p.tether.unwrap_or(true),
            udp_endpoint: Some(endpoint_id),
            spy: None,
            simulates_connection: false,
            is_response: udp.is_response,
            awaiting_response,
            response_control: udp.control.filter(|_| udp.is_response),
        });
        self.send(Event::SubscriptionReady {
            correlation_id,
            channel_status_counter_id: status_counter_id,
        });
        let si = self.subscriptions.len() - 1;
        let images: Vec<Arc<PublicationImage>> = self
            .images
            .iter()
            .filter(|i| {
                matches!(i.state, ImageState::Active)
                    && i.image.endpoint_id == endpoint_id
                    && i.image.stream_id == stream_id
                    && self.subscriptions[si].matches_session(i.image.session_id)
            })
            .map(|i| i.image.clone())
            .collect();
        for image in images {
            self.link_image_subscriber(&image, si);
        }
        Ok(())
    }
}

/// The wildcard address of `like`'s family, port 0.
fn wildcard_like(like: SocketAddr) -> SocketAddr {
    match like.ip() {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
}
