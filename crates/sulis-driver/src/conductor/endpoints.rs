//! Send and receive endpoints: binding UDP sockets with their socket
//! options, sharing them per canonical channel, closing them, and name
//! resolution (timed) and re-resolution of publication endpoints.

use super::{CommandError, DriverConductor};
use crate::media::transport::{EndpointRole, LossSettings, LossyTransport, Transport};
use crate::media::udp_channel::UdpChannel;
use crate::media::udp_transport::SocketOptions;
use crate::network_publication::NetworkPublicationEntry;
use crate::receiver::ReceiverCommand;
use crate::security::{SecureTransport, SecurityMode};
use crate::sender::SenderCommand;
use crate::system_counters::SystemCounter;
use std::net::SocketAddr;
use sulis_concurrent::counters::NULL_COUNTER_ID;
use sulis_protocol::control::error_code;
use sulis_protocol::frame::SEALED_OVERHEAD;
use sulis_protocol::uri::{ChannelUri, ControlMode, Security};

/// A socket shared by every channel with the same canonical form.
pub(super) struct EndpointEntry {
    pub(super) id: u64,
    pub(super) key: String,
    pub(super) ref_count: usize,
    /// Effective SO_RCVBUF (caps the receiver window).
    pub(super) rcvbuf: usize,
    /// Receiver window from the first subscription's channel, if it set one.
    pub(super) rcv_wnd: Option<usize>,
    /// `reliable` of the first subscription's channel (images NAK or pad over gaps).
    pub(super) reliable: bool,
    /// A receive endpoint's channel status counter (Aeron's type 7; `NULL_COUNTER_ID` for a send endpoint).
    pub(super) status_counter_id: i32,
    /// Counters freed with the endpoint: its status and local address.
    pub(super) counters: Vec<i32>,
    /// A multicast receive endpoint's control group: where its images send
    /// status messages and NAKs (`None`: to each image's source).
    pub(super) control: Option<SocketAddr>,
    /// `group=` of the first subscription's channel (`None`: infer).
    pub(super) group: Option<bool>,
    /// Group tag its status messages carry (`gtag=`, else the driver's).
    pub(super) group_tag: Option<i64>,
    /// A send endpoint's multi-destination-cast mode; `Manual` on a receive
    /// endpoint: a multi-destination subscription's.
    pub(super) mdc: Option<crate::multi_send_destination::MdcMode>,
    /// A multi-destination subscription's destinations.
    pub(super) destinations: Vec<ReceiveDestination>,
    /// The channel tag (`tags=C,...`) of the channel that made it: a channel
    /// that names only `tags=C` means this endpoint, as that channel.
    pub(super) channel_tag: Option<(i64, String)>,
    /// Its transport security: every channel sharing it must ask for the same.
    pub(super) security: Option<SecurityMode>,
}

/// A destination of a multi-destination subscription: a transport of its
/// endpoint, bound at `bound` for `channel`.
pub(super) struct ReceiveDestination {
    /// The destination channel as the client gave it.
    pub(super) channel: String,
    /// The endpoint it named (port 0: any).
    pub(super) endpoint: SocketAddr,
    /// Where its socket is bound.
    pub(super) bound: SocketAddr,
    /// Its local address counter (`rcv-local-sockaddr`), if one was allocated.
    pub(super) counter_id: Option<i32>,
}

/// What makes a channel's endpoint: what a channel naming only a channel tag takes from the tagged one.
const ADDRESS_KEYS: [&str; 6] = [
    "endpoint",
    "control",
    "control-mode",
    "interface",
    "ttl",
    "tags",
];

/// The largest MTU of a secured channel: the envelope fits within the
/// largest UDP payload, and the MTU stays a multiple of 32.
pub(super) const MAX_SECURE_MTU: usize =
    (crate::media::udp_transport::MAX_UDP_PAYLOAD_LENGTH - SEALED_OVERHEAD) / 32 * 32;

/// A name resolution slower than this is counted (Aeron's default, 5 s).
const NAME_RESOLVER_THRESHOLD_NS: i64 = 5_000_000_000;

impl DriverConductor {
    /// Binds a transport for `channel` at `bind` (through the driver's
    /// transport factory, wrapped to drop datagrams when the test loss
    /// options are on); returns a new endpoint id, the transport and its
    /// effective SO_RCVBUF (0 if unknown).
    pub(super) fn bind_endpoint(
        &mut self,
        bind: SocketAddr,
        p: &sulis_protocol::uri::ChannelParams,
        channel: &str,
        role: EndpointRole,
    ) -> Result<(u64, Box<dyn Transport>, usize), CommandError> {
        let security = self.channel_security(p, channel)?;
        let transport = self.open_transport(bind, &self.socket_options(p), channel, role)?;
        self.register_transport(transport, security, channel)
    }

    /// Binds a transport at `bind` with `opts` through the driver's transport factory.
    pub(super) fn open_transport(
        &self,
        bind: SocketAddr,
        opts: &SocketOptions,
        channel: &str,
        role: EndpointRole,
    ) -> Result<Box<dyn Transport>, CommandError> {
        self.net.transports.bind(bind, opts, role).map_err(|e| {
            CommandError::new(
                error_code::GENERIC_ERROR,
                format!("channel '{channel}': {e}"),
            )
        })
    }

    /// A bound transport becomes an endpoint: a new id, the test loss
    /// options wrapped around it, then the channel's transport security
    /// (outermost, so the loss options drop sealed datagrams as a network
    /// would), its effective SO_RCVBUF (0 if unknown).
    pub(super) fn register_transport(
        &mut self,
        transport: Box<dyn Transport>,
        security: Option<SecurityMode>,
        channel: &str,
    ) -> Result<(u64, Box<dyn Transport>, usize), CommandError> {
        let id = self.next_endpoint_id;
        self.next_endpoint_id += 1;
        let rcvbuf = transport.recv_buffer_size().unwrap_or(0);
        let loss = LossSettings::new(
            [
                self.ctx.send_data_loss,
                self.ctx.send_control_loss,
                self.ctx.receive_data_loss,
                self.ctx.receive_control_loss,
            ],
            self.ctx.loss_seed,
            id,
        );
        let transport: Box<dyn Transport> = if loss.is_on() {
            Box::new(LossyTransport::new(transport, loss))
        } else {
            transport
        };
        let transport: Box<dyn Transport> = match (security, &self.security) {
            (Some(mode), Some(ctx)) => Box::new(
                SecureTransport::new(transport, mode, channel, ctx).map_err(|e| {
                    CommandError::new(
                        error_code::GENERIC_ERROR,
                        format!("channel '{channel}': {e}"),
                    )
                })?,
            ),
            _ => transport,
        };
        Ok((id, transport, rcvbuf))
    }

    /// Refuses a channel whose security differs from that of the endpoint it would share.
    pub(super) fn check_endpoint_security(
        entry: &EndpointEntry,
        security: Option<SecurityMode>,
        channel: &str,
    ) -> Result<(), CommandError> {
        if entry.security == security {
            return Ok(());
        }
        Err(CommandError::new(
            error_code::INVALID_CHANNEL,
            format!(
                "channel '{channel}' asks for security={}, but its endpoint is open with security={} for another channel: give both the same",
                SecurityMode::name(security),
                SecurityMode::name(entry.security)
            ),
        ))
    }

    /// The transport security `channel` takes: its `security=`, else the
    /// driver's; refused when the driver has no keyring or the channel's MTU
    /// leaves no room for the envelope.
    pub(super) fn channel_security(
        &self,
        p: &sulis_protocol::uri::ChannelParams,
        channel: &str,
    ) -> Result<Option<SecurityMode>, CommandError> {
        let mode = match p.security {
            Some(Security::Off) => None,
            Some(Security::Auth) => Some(SecurityMode::Auth),
            Some(Security::Encrypt) => Some(SecurityMode::Encrypt),
            None => self.ctx.security,
        };
        let Some(mode) = mode else {
            return Ok(None);
        };
        let invalid = |why: String| {
            Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': {why}"),
            ))
        };
        if self.security.is_none() {
            return invalid(format!(
                "security={} needs a keyring, and this driver has none: start it with keyring_file (--keyring-file FILE or SULIS_KEYRING_FILE)",
                SecurityMode::name(Some(mode))
            ));
        }
        let mtu = p.mtu.map_or(self.ctx.mtu_length, |m| m as usize);
        if mtu > MAX_SECURE_MTU {
            return invalid(format!(
                "mtu={mtu} leaves no room for transport security's {SEALED_OVERHEAD} bytes: at most {MAX_SECURE_MTU} on a secured channel"
            ));
        }
        Ok(Some(mode))
    }

    /// The socket options of a multicast channel's sockets: the channel's
    /// buffers, its interface (resolved to a local one) and TTL.
    pub(super) fn multicast_options(
        &self,
        udp: &UdpChannel,
        channel: &str,
    ) -> Result<SocketOptions, CommandError> {
        let p = udp.uri.params();
        let mut opts = self.socket_options(p);
        opts.multicast_interface = udp
            .interface
            .map(|spec| spec.resolve_local())
            .transpose()
            .map_err(|e| {
                CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!("channel '{channel}': {e}"),
                )
            })?;
        opts.multicast_ttl = u32::from(p.ttl.unwrap_or(self.ctx.socket_multicast_ttl));
        Ok(opts)
    }

    /// A multicast channel's TTL (its `ttl`, else the driver's; 0: the OS
    /// default), which its receive endpoint compares SETUPs' with; `None`
    /// for a unicast channel.
    pub(super) fn multicast_ttl(&self, udp: &UdpChannel) -> Option<u8> {
        udp.is_multicast.then(|| {
            udp.uri
                .params()
                .ttl
                .unwrap_or(self.ctx.socket_multicast_ttl)
        })
    }

    /// The status and local address counters of a receive endpoint bound
    /// at `local` for `channel` (Aeron's `ReceiveChannelStatus` and
    /// `ReceiveLocalSocketAddress`): a subscription learns from them which
    /// port an `endpoint=host:0` channel got. Returns the status counter
    /// id and every counter allocated (`NULL_COUNTER_ID` and none when the
    /// counters are full: the channel works, its port cannot be looked up).
    pub(super) fn receive_endpoint_counters(
        &mut self,
        channel: &str,
        local: SocketAddr,
    ) -> (i32, Vec<i32>) {
        let (status, mut ids) = self.receive_channel_status_counter(channel);
        if status != NULL_COUNTER_ID {
            ids.extend(self.local_address_counter(status, local));
        }
        (status, ids)
    }

    /// A receive channel's status counter (Aeron's type 7), active: its id
    /// and the counters allocated (`NULL_COUNTER_ID` and none when full).
    pub(super) fn receive_channel_status_counter(&mut self, channel: &str) -> (i32, Vec<i32>) {
        use sulis_protocol::counters::{channel_status, type_id};
        let now_ms = self.clock.epoch_ms();
        let mut key = (channel.len().min(100) as i32).to_le_bytes().to_vec();
        key.extend_from_slice(&channel.as_bytes()[..channel.len().min(100)]);
        let Ok(status) = self.counters.allocate(
            type_id::RECEIVE_CHANNEL_STATUS,
            &key,
            &format!("rcv-channel: {channel}"),
            0,
            0,
            0,
            now_ms,
        ) else {
            return (NULL_COUNTER_ID, Vec::new());
        };
        self.counters
            .set_counter_value(status, channel_status::ACTIVE);
        (status, vec![status])
    }

    /// A socket bound at `local` for the channel whose status counter is
    /// `status` (Aeron's type 14, `rcv-local-sockaddr`): how a client finds
    /// the port an `endpoint=host:0` got.
    pub(super) fn local_address_counter(&mut self, status: i32, local: SocketAddr) -> Option<i32> {
        use sulis_protocol::counters::{channel_status, local_socket_address_key, type_id};
        let address = local.to_string();
        let id = self
            .counters
            .allocate(
                type_id::LOCAL_SOCKET_ADDRESS,
                &local_socket_address_key(status, &address),
                &format!("rcv-local-sockaddr: {status} {address}"),
                0,
                0,
                0,
                self.clock.epoch_ms(),
            )
            .ok()?;
        self.counters.set_counter_value(id, channel_status::ACTIVE);
        Some(id)
    }

    /// Closes a receive endpoint once no subscription and no image (active or
    /// lingering) uses it. Until then a subscription on the same address
    /// takes it up again rather than trying to bind a second socket there.
    pub(super) fn close_receive_endpoint_if_unused(&mut self, endpoint_id: u64) {
        let Some(i) = self
            .receive_endpoints
            .iter()
            .position(|e| e.id == endpoint_id)
        else {
            return;
        };
        // A multi-destination subscription's endpoint is that subscription's
        // (or its channel tag's): as in Aeron it closes, its destinations'
        // sockets with it, once no subscription uses it, and its images
        // linger without it. Kept open for them, it held a follower's log
        // endpoint bound for as long as a leader kept sending there, and a
        // consensus module restarted on that member could not bind it again.
        let mds =
            self.receive_endpoints[i].mdc == Some(crate::multi_send_destination::MdcMode::Manual);
        if self.receive_endpoints[i].ref_count > 0
            || (!mds
                && self
                    .images
                    .iter()
                    .any(|m| m.image.endpoint_id == endpoint_id))
        {
            return;
        }
        let entry = self.receive_endpoints.swap_remove(i);
        let now_ms = self.clock.epoch_ms();
        for &id in &entry.counters {
            self.counters.free(id, now_ms);
        }
        // A multi-destination subscription's destination sockets close
        // with it: their ports are bound again once the receiver says so.
        self.closing_destinations
            .extend(entry.destinations.iter().map(|d| (entry.id, d.bound)));
        self.closing_receive_endpoints.push((entry.id, entry.key));
        let _ = self
            .net
            .receiver
            .send(ReceiverCommand::RemoveEndpoint { id: endpoint_id });
    }

    /// The receiver closed a removed endpoint's socket: subscriptions that
    /// waited for its address can bind it now.
    pub(super) fn on_receive_endpoint_closed(&mut self, id: u64) {
        let before = self.closing_destinations.len();
        self.closing_destinations.retain(|&(e, _)| e != id);
        if self.closing_destinations.len() != before {
            self.retry_deferred_destinations();
        }
        let Some(i) = self
            .closing_receive_endpoints
            .iter()
            .position(|(e, _)| *e == id)
        else {
            return;
        };
        let (_, key) = self.closing_receive_endpoints.swap_remove(i);
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred_subscriptions)
            .into_iter()
            .partition(|d| d.key == key);
        self.deferred_subscriptions = waiting;
        for d in ready {
            if let Err(e) =
                self.on_add_subscription(d.client_id, d.correlation_id, d.stream_id, &d.channel)
            {
                self.reply_error(d.client_id, d.correlation_id, e);
            }
        }
    }

    fn socket_options(&self, p: &sulis_protocol::uri::ChannelParams) -> SocketOptions {
        SocketOptions {
            so_sndbuf: p
                .so_sndbuf
                .map(|v| v as usize)
                .unwrap_or(self.ctx.socket_sndbuf_length),
            so_rcvbuf: p
                .so_rcvbuf
                .map(|v| v as usize)
                .unwrap_or(self.ctx.socket_rcvbuf_length),
            ..SocketOptions::default()
        }
    }

    /// Parses a UDP channel, resolving its host names (timed into the name
    /// resolver counters: a slow DNS stalls the conductor), and checks what
    /// it asks of a publication (`subscription` false) or a subscription.
    pub(super) fn resolve_udp(
        &mut self,
        channel: &str,
        uri: &ChannelUri,
        subscription: bool,
    ) -> Result<UdpChannel, CommandError> {
        let resolved = self.timed_name_lookup(|| UdpChannel::from_uri(uri.clone()));
        let udp = resolved.map_err(|e| CommandError::new(error_code::INVALID_CHANNEL, e))?;
        let invalid = |why: &str| {
            Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': {why}"),
            ))
        };
        if udp.is_response && !udp.is_multicast {
            // A response channel: `control` is the server's response port
            // (the only address a response publication binds and a response
            // subscription can elicit a setup from).
            if udp.control.is_none() {
                return invalid("control-mode=response over UDP needs control=host:port, the server's response port");
            }
            return Ok(udp);
        }
        match udp.uri.params().control_mode {
            Some(ControlMode::Dynamic) if udp.control.is_none() => {
                return invalid("control-mode=dynamic needs control=host:port: the publication's address receivers send their status messages to");
            }
            // A multi-destination subscription: its destinations bring the addresses.
            Some(ControlMode::Manual) => return Ok(udp),
            Some(ControlMode::Dynamic) if !subscription => return Ok(udp),
            _ => {}
        }
        // A subscription to a dynamic MDC stream may leave its address to
        // the driver (as Aeron's archive recording events channel does): a
        // port of the wildcard address, which the publication learns from its probes.
        if udp.endpoint.is_none() && !(subscription && udp.control.is_some()) {
            return invalid(if subscription {
                "a subscription needs endpoint=host:port, where it receives"
            } else {
                "control without endpoint needs control-mode=dynamic or manual (multi-destination-cast)"
            });
        }
        Ok(udp)
    }

    /// `aeron:udp?tags=C` with no endpoint, control or control mode refers to
    /// the endpoint a channel with channel tag C made (a subscription's to a
    /// receive endpoint, a publication's to a send endpoint), as Aeron's: the
    /// channel to go on with is that channel. `None` for any other channel;
    /// an error if no endpoint has the tag.
    pub(super) fn tagged_channel(
        &self,
        channel: &str,
        uri: &ChannelUri,
        subscription: bool,
    ) -> Result<Option<String>, CommandError> {
        let p = uri.params();
        let Some((tag, _)) = p.tags else {
            return Ok(None);
        };
        if p.endpoint.is_some() || p.control.is_some() || p.control_mode.is_some() {
            return Ok(None);
        }
        let endpoints = if subscription {
            &self.receive_endpoints
        } else {
            &self.send_endpoints
        };
        let tagged = endpoints
            .iter()
            .find_map(|e| e.channel_tag.as_ref().filter(|(t, _)| *t == tag))
            .map(|(_, tagged)| tagged.clone())
            .ok_or_else(|| {
                CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!(
                        "channel '{channel}': tags={tag}: no {} channel has that channel tag",
                        if subscription {
                            "subscription"
                        } else {
                            "publication"
                        }
                    ),
                )
            })?;
        // The tagged channel's address and this channel's own settings (and
        // entity tag): what it shares is the endpoint, nothing else.
        let invalid = |e: sulis_protocol::uri::UriError| {
            CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': {e}"),
            )
        };
        let original = ChannelUri::parse(&tagged).map_err(invalid)?;
        let mut merged = original.only(&ADDRESS_KEYS).map_err(invalid)?;
        for (k, v) in uri.iter().filter(|(k, _)| !ADDRESS_KEYS.contains(k)) {
            merged = merged.with(k, v).map_err(invalid)?;
        }
        let tags = match p.tags {
            Some((_, Some(entity))) => format!("{tag},{entity}"),
            _ => tag.to_string(),
        };
        Ok(Some(
            merged.with("tags", &tags).map_err(invalid)?.to_string(),
        ))
    }

    /// The key that endpoints are shared by: the canonical form of the
    /// channel's addresses, except that a channel with neither endpoint nor
    /// control (a manual MDC publication or MDS subscription) has one of its
    /// own (as Aeron's unique canonical form), or its channel tag's, and a
    /// subscription on port 0 one of its own.
    pub(super) fn endpoint_key(
        udp: &UdpChannel,
        uri: &ChannelUri,
        correlation_id: i64,
        subscription: bool,
    ) -> String {
        let ephemeral = subscription && udp.endpoint.is_some_and(|e| e.port() == 0);
        let addressless = udp.endpoint.is_none() && udp.control.is_none();
        match (ephemeral, addressless, uri.params().tags) {
            (true, _, _) => format!("{}#{}", udp.canonical, correlation_id),
            (false, true, Some((tag, _))) => format!("{}#tag{}", udp.canonical, tag),
            (false, true, None) => format!("{}#{}", udp.canonical, correlation_id),
            (false, false, _) => udp.canonical.clone(),
        }
    }

    /// The channel tag of the send endpoint network publication `p` goes out on.
    pub(super) fn send_channel_tag(&self, p: &NetworkPublicationEntry) -> Option<i64> {
        self.send_endpoints
            .iter()
            .find(|e| e.key == p.endpoint_key)
            .and_then(|e| e.channel_tag.as_ref().map(|(tag, _)| *tag))
    }

    /// The channel tag a new endpoint for `channel` carries, which no other
    /// endpoint of its kind may have.
    pub(super) fn claim_channel_tag(
        &self,
        channel: &str,
        uri: &ChannelUri,
        subscription: bool,
    ) -> Result<Option<(i64, String)>, CommandError> {
        let Some((tag, _)) = uri.params().tags else {
            return Ok(None);
        };
        let endpoints = if subscription {
            &self.receive_endpoints
        } else {
            &self.send_endpoints
        };
        if let Some((_, other)) = endpoints
            .iter()
            .find_map(|e| e.channel_tag.as_ref().filter(|(t, _)| *t == tag))
        {
            return Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("channel '{channel}': channel tag {tag} is already in use by '{other}'"),
            ));
        }
        Ok(Some((tag, channel.to_owned())))
    }

    /// Runs a name look-up, timing it into the name resolver counters.
    pub(super) fn timed_name_lookup<T>(&self, lookup: impl FnOnce() -> T) -> T {
        let start = std::time::Instant::now();
        let result = lookup();
        let took_ns = start.elapsed().as_nanos() as i64;
        let max = self.system.get(SystemCounter::NameResolverMaxTime);
        if took_ns > max.get() {
            max.set_ordered(took_ns);
        }
        if took_ns > NAME_RESOLVER_THRESHOLD_NS {
            self.system
                .increment(SystemCounter::NameResolverTimeThresholdExceeded);
        }
        result
    }

    /// Looks up again the endpoint names of publications that have heard no
    /// status message for the connection timeout: the host may have moved
    /// (a restarted container, a changed DNS record). A changed address is
    /// handed to the sender and counted in 'Resolution changes'; a failed
    /// look-up goes to the error log and the sender keeps the old address.
    pub(super) fn check_for_re_resolutions(&mut self, now_ns: i64) -> usize {
        let timeout_ns = self.ctx.publication_connection_timeout_ns as i64;
        let mut work = 0;
        for i in 0..self.net_publications.len() {
            let entry = &self.net_publications[i];
            if !entry.is_due_for_re_resolution(now_ns, timeout_ns) {
                continue;
            }
            let name = entry
                .re_resolution
                .as_ref()
                .expect("due: a name")
                .name
                .clone();
            let looked_up =
                self.timed_name_lookup(|| crate::media::udp_channel::resolve("endpoint", &name));
            let entry = &mut self.net_publications[i];
            let r = entry.re_resolution.as_mut().expect("due: a name");
            r.last_lookup_ns = now_ns;
            work += 1;
            match looked_up {
                Ok(new) if new != r.address => {
                    r.address = new;
                    let _ = self.net.sender.send(SenderCommand::ChangeDestination {
                        registration_id: entry.publication.registration_id,
                        destination: new,
                    });
                    self.system.increment(SystemCounter::ResolutionChanges);
                }
                Ok(_) => {}
                Err(e) => self.errors.record(&format!(
                    "channel '{}': looking the endpoint up again: {e}",
                    entry.publication.channel
                )),
            }
        }
        work
    }

    pub(super) fn release_send_endpoint(&mut self, endpoint_id: u64) {
        if let Some(i) = self.send_endpoints.iter().position(|e| e.id == endpoint_id) {
            self.send_endpoints[i].ref_count -= 1;
            if self.send_endpoints[i].ref_count == 0 {
                self.send_endpoints.swap_remove(i);
                let _ = self
                    .net
                    .sender
                    .send(SenderCommand::RemoveEndpoint { id: endpoint_id });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{command_error, TestConductor};
    use super::*;

    fn resolve(c: &mut DriverConductor, channel: &str) -> Result<UdpChannel, CommandError> {
        let uri = ChannelUri::parse(channel).unwrap();
        c.resolve_udp(channel, &uri, false)
    }

    #[test]
    fn should_accept_unicast_multicast_and_mdc_channels() {
        let mut t = TestConductor::new("resolve-udp");
        let c = &mut t.conductor;
        let udp = resolve(c, "aeron:udp?endpoint=127.0.0.1:40456")
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(udp.endpoint, Some("127.0.0.1:40456".parse().unwrap()));
        let udp = resolve(c, "aeron:udp?endpoint=224.0.1.1:40456")
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert!(udp.is_multicast);
        assert_eq!(
            udp.multicast_control,
            Some("224.0.1.2:40456".parse().unwrap())
        );
        let udp = resolve(c, "aeron:udp?control=127.0.0.1:40457|control-mode=dynamic")
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(udp.control, Some("127.0.0.1:40457".parse().unwrap()));
        let e = command_error(resolve(c, "aeron:udp?control-mode=dynamic|tags=1"));
        assert_eq!(e.code, error_code::INVALID_CHANNEL);
        assert!(
            e.message.contains("control-mode=dynamic needs control"),
            "{}",
            e.message
        );
        let e = command_error(resolve(c, "aeron:udp?control=127.0.0.1:40459"));
        assert!(
            e.message
                .contains("control without endpoint needs control-mode"),
            "{}",
            e.message
        );
        // A multi-destination subscription: no address of its own.
        let uri = ChannelUri::parse("aeron:udp?control-mode=manual").unwrap();
        let udp = c
            .resolve_udp("aeron:udp?control-mode=manual", &uri, true)
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert!(udp.endpoint.is_none());
        let udp = resolve(c, "aeron:udp?control-mode=response|control=127.0.0.1:40458")
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert!(udp.is_response && udp.endpoint.is_none());
        assert!(udp.canonical.ends_with("-RSP-127.0.0.1:40458"));
        let e = command_error(resolve(c, "aeron:udp?control-mode=response"));
        assert_eq!(e.code, error_code::INVALID_CHANNEL);
        assert!(
            e.message.contains("needs control=host:port"),
            "{}",
            e.message
        );
    }

    #[test]
    fn should_give_channels_without_an_address_endpoints_of_their_own() {
        let mut t = TestConductor::new("addressless");
        let c = &mut t.conductor;
        c.ensure_client(5);
        c.ensure_client(6);
        // Two clients' manual MDC publications and MDS subscriptions: nothing shared.
        c.on_add_publication(5, 100, 10, "aeron:udp?control-mode=manual", true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        c.on_add_publication(6, 101, 11, "aeron:udp?control-mode=manual", true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(c.send_endpoints.len(), 2);
        c.on_add_subscription(5, 102, 10, "aeron:udp?control-mode=manual")
            .unwrap_or_else(|e| panic!("{}", e.message));
        c.on_add_subscription(6, 103, 10, "aeron:udp?control-mode=manual")
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(c.receive_endpoints.len(), 2);
        // A channel tag names one of them for others to share.
        c.on_add_subscription(5, 104, 12, "aeron:udp?control-mode=manual|tags=3")
            .unwrap_or_else(|e| panic!("{}", e.message));
        c.on_add_subscription(6, 105, 13, "aeron:udp?tags=3")
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(c.receive_endpoints.len(), 3);
    }

    #[test]
    fn should_share_a_tagged_endpoint_with_channels_naming_only_its_tag() {
        let mut t = TestConductor::new("channel-tags");
        let c = &mut t.conductor;
        c.ensure_client(5);
        c.on_add_subscription(5, 100, 10, "aeron:udp?endpoint=10.0.0.1:4000|tags=5,6")
            .unwrap_or_else(|e| panic!("{}", e.message));
        c.on_add_subscription(5, 101, 11, "aeron:udp?tags=5")
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(c.receive_endpoints.len(), 1, "one endpoint, shared");
        let endpoints: Vec<_> = c.subscriptions.iter().map(|s| s.udp_endpoint).collect();
        assert_eq!(endpoints[0], endpoints[1]);
        // Publications have their own: a send endpoint tagged 5 is another matter.
        c.on_add_publication(
            5,
            102,
            10,
            "aeron:udp?endpoint=10.0.0.1:4000|tags=5",
            true,
            0,
        )
        .unwrap_or_else(|e| panic!("{}", e.message));
        c.on_add_publication(5, 103, 12, "aeron:udp?tags=5", true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(c.send_endpoints.len(), 1);
        // The reference keeps its own settings and entity tag; only the endpoint is shared.
        c.on_add_publication(5, 105, 14, "aeron:udp?tags=5,77|term-length=128k", true, 0)
            .unwrap_or_else(|e| panic!("{}", e.message));
        let p = &c.net_publications.last().unwrap().publication;
        assert_eq!(p.term_length, 128 * 1024);
        assert!(
            p.channel.contains("tags=5,77") && p.channel.contains("endpoint=10.0.0.1:4000"),
            "{}",
            p.channel
        );
        assert_eq!(c.send_endpoints.len(), 1);
        for (channel, why) in [
            (
                "aeron:udp?tags=9",
                "tags=9: no subscription channel has that channel tag",
            ),
            (
                "aeron:udp?endpoint=10.0.0.1:4001|tags=5",
                "channel tag 5 is already in use",
            ),
        ] {
            let e = command_error(c.on_add_subscription(5, 104, 13, channel));
            assert_eq!(e.code, error_code::INVALID_CHANNEL, "{channel}");
            assert!(e.message.contains(why), "{channel}: {}", e.message);
        }
    }
}
