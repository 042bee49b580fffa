//! Destinations of manual multi-destination-cast publications (the client's
//! ADD_DESTINATION, REMOVE_DESTINATION and REMOVE_DESTINATION_BY_ID, carried
//! out by the sender on the publication's send endpoint,
//! `multi_send_destination.rs`) and of multi-destination subscriptions
//! (ADD_RCV_DESTINATION, REMOVE_RCV_DESTINATION: a socket per destination,
//! bound here and read by the receiver on the subscription's endpoint, whose
//! images take a session's frames from any of them).

use super::endpoints::ReceiveDestination;
use super::{CommandError, DriverConductor};
use crate::media::transport::EndpointRole;
use crate::media::udp_channel::UdpChannel;
use crate::media::udp_transport::SocketOptions;
use crate::multi_send_destination::MdcMode;
use crate::receiver::ReceiverCommand;
use crate::sender::SenderCommand;
use std::net::SocketAddr;
use sulis_concurrent::counters::NULL_COUNTER_ID;
use sulis_protocol::control::{error_code, Event};
use sulis_protocol::uri::{ChannelUri, ControlMode, Media};

/// Keys a destination channel may not have: they belong to the publication.
const PUBLICATION_KEYS: &[&str] = &[
    "mtu",
    "rcv-wnd",
    "so-rcvbuf",
    "so-sndbuf",
    "response-correlation-id",
];

/// An ADD_RCV_DESTINATION or REMOVE_RCV_DESTINATION that waits: the address
/// it binds is still held by a removed destination's socket the receiver has
/// not yet closed, or an earlier command of its subscription waits.
pub(super) struct DeferredDestination {
    /// The subscription's receive endpoint.
    endpoint_id: u64,
    client_id: i64,
    correlation_id: i64,
    registration_id: i64,
    channel: String,
    add: bool,
}

impl DriverConductor {
    /// ADD_DESTINATION or ADD_RCV_DESTINATION.
    pub(super) fn on_add_destination(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        channel: &str,
        receive: bool,
    ) -> Result<(), CommandError> {
        if receive {
            return self.on_add_receive_destination(
                client_id,
                correlation_id,
                registration_id,
                channel,
            );
        }
        let endpoint_id = self.manual_send_endpoint(client_id, registration_id)?;
        let address = self.destination_address(channel)?;
        let _ = self.net.sender.send(SenderCommand::AddDestination {
            endpoint_id,
            channel: channel.to_owned(),
            address,
            registration_id: correlation_id,
        });
        self.send(Event::OperationSuccess { correlation_id });
        Ok(())
    }

    /// REMOVE_DESTINATION or REMOVE_RCV_DESTINATION: the destination at the
    /// channel's address goes (one that is not there: nothing happens, as in
    /// Aeron).
    pub(super) fn on_remove_destination(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        channel: &str,
        receive: bool,
    ) -> Result<(), CommandError> {
        if receive {
            return self.on_remove_receive_destination(
                client_id,
                correlation_id,
                registration_id,
                channel,
            );
        }
        let endpoint_id = self.manual_send_endpoint(client_id, registration_id)?;
        let address = self.destination_address(channel)?;
        let _ = self.net.sender.send(SenderCommand::RemoveDestination {
            endpoint_id,
            address,
        });
        self.send(Event::OperationSuccess { correlation_id });
        Ok(())
    }

    /// REMOVE_DESTINATION_BY_ID.
    pub(super) fn on_remove_destination_by_id(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        destination_registration_id: i64,
    ) -> Result<(), CommandError> {
        let endpoint_id = self.manual_send_endpoint(client_id, registration_id)?;
        let _ = self.net.sender.send(SenderCommand::RemoveDestinationById {
            endpoint_id,
            registration_id: destination_registration_id,
        });
        self.send(Event::OperationSuccess { correlation_id });
        Ok(())
    }

    /// The send endpoint of the client's publication `registration_id`, which
    /// must be a manual MDC one.
    fn manual_send_endpoint(
        &self,
        client_id: i64,
        registration_id: i64,
    ) -> Result<u64, CommandError> {
        let publication_id = self
            .publication_links
            .iter()
            .find(|l| l.registration_id == registration_id && l.client_id == client_id)
            .map(|l| l.publication_id)
            .ok_or_else(|| {
                CommandError::new(
                    error_code::UNKNOWN_PUBLICATION,
                    format!("unknown publication: {registration_id}"),
                )
            })?;
        let entry = self
            .net_publications
            .iter()
            .find(|p| p.publication.registration_id == publication_id)
            .ok_or_else(|| {
                CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!("publication {registration_id} is not a UDP publication: it has no destinations"),
                )
            })?;
        let endpoint = self
            .send_endpoints
            .iter()
            .find(|e| e.key == entry.endpoint_key)
            .filter(|e| e.mdc == Some(MdcMode::Manual))
            .ok_or_else(|| {
                CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!(
                        "channel '{}' does not allow manual control: destinations are added to a control-mode=manual publication",
                        entry.publication.channel
                    ),
                )
            })?;
        Ok(endpoint.id)
    }

    /// ADD_RCV_DESTINATION: binds the destination's socket (unicast, or a
    /// multicast group it joins; with `control=`, a dynamic MDC stream's
    /// receiver that probes the publication's control address) and gives it
    /// to the receiver as a transport of the subscription's endpoint.
    fn on_add_receive_destination(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        channel: &str,
    ) -> Result<(), CommandError> {
        let ei = self.manual_receive_endpoint(client_id, registration_id)?;
        let udp = self.destination_channel(channel)?;
        let invalid = |why: String| {
            CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("destination '{channel}': {why}"),
            )
        };
        let endpoint = udp
            .endpoint
            .ok_or_else(|| invalid("a destination needs endpoint=host:port".into()))?;
        if self.destination_waits(ei, Some(endpoint)) {
            self.defer_destination(
                ei,
                client_id,
                correlation_id,
                registration_id,
                channel,
                true,
            );
            return Ok(());
        }
        if self.receive_endpoints[ei]
            .destinations
            .iter()
            .any(|d| endpoint.port() != 0 && (d.endpoint == endpoint || d.bound == endpoint))
        {
            return Err(invalid(format!(
                "{endpoint} is a destination of this subscription already"
            )));
        }
        let p = udp.uri.params();
        let mut opts = SocketOptions {
            so_sndbuf: p
                .so_sndbuf
                .map(|v| v as usize)
                .unwrap_or(self.ctx.socket_sndbuf_length),
            so_rcvbuf: p
                .so_rcvbuf
                .map(|v| v as usize)
                .unwrap_or(self.ctx.socket_rcvbuf_length),
            ..SocketOptions::default()
        };
        if udp.is_multicast {
            opts = SocketOptions {
                reuse_address: true,
                join_group: Some(endpoint.ip()),
                ..self.multicast_options(&udp, channel)?
            };
        }
        let transport = self.open_transport(endpoint, &opts, channel, EndpointRole::Receive)?;
        // A destination takes its subscription's transport security.
        let security = self.receive_endpoints[ei].security;
        let (_, transport, _) = self.register_transport(transport, security, channel)?;
        let bound = transport.local_addr();
        let control = udp.multicast_control.or(udp.control);
        let entry = &self.receive_endpoints[ei];
        let (endpoint_id, status) = (entry.id, entry.status_counter_id);
        let counter_id = if status != NULL_COUNTER_ID {
            self.local_address_counter(status, bound)
        } else {
            None
        };
        let entry = &mut self.receive_endpoints[ei];
        entry.counters.extend(counter_id);
        entry.destinations.push(ReceiveDestination {
            channel: channel.to_owned(),
            endpoint,
            bound,
            counter_id,
        });
        let _ = self.net.receiver.send(ReceiverCommand::AddDestination {
            endpoint_id,
            transport,
            control,
            probe: udp.control.is_some() && !udp.is_multicast,
            multicast_ttl: self.multicast_ttl(&udp),
        });
        self.send(Event::OperationSuccess { correlation_id });
        Ok(())
    }

    /// REMOVE_RCV_DESTINATION: the destination the channel names (by its
    /// endpoint, or the address its `host:0` got) goes, its socket closed;
    /// one that is not there: nothing happens.
    fn on_remove_receive_destination(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        channel: &str,
    ) -> Result<(), CommandError> {
        let ei = self.manual_receive_endpoint(client_id, registration_id)?;
        let udp = self.destination_channel(channel)?;
        if self.destination_waits(ei, None) {
            // After the add it follows, as the client sent them.
            self.defer_destination(
                ei,
                client_id,
                correlation_id,
                registration_id,
                channel,
                false,
            );
            return Ok(());
        }
        let entry = &mut self.receive_endpoints[ei];
        let found = entry.destinations.iter().position(|d| {
            d.channel == channel
                || udp
                    .endpoint
                    .is_some_and(|e| e.port() != 0 && (d.endpoint == e || d.bound == e))
        });
        if let Some(i) = found {
            let d = entry.destinations.swap_remove(i);
            let endpoint_id = entry.id;
            if let Some(id) = d.counter_id {
                entry.counters.retain(|&c| c != id);
                let now_ms = self.clock.epoch_ms();
                self.counters.free(id, now_ms);
            }
            // Until the receiver says the socket is closed, an add that
            // binds its port waits (as Aeron's receiver closes a removed
            // destination's transport before it opens the next one).
            self.closing_destinations.push((endpoint_id, d.bound));
            let _ = self.net.receiver.send(ReceiverCommand::RemoveDestination {
                endpoint_id,
                address: d.bound,
            });
        }
        self.send(Event::OperationSuccess { correlation_id });
        Ok(())
    }

    /// True if a destination command for receive endpoint `ei` must wait:
    /// an earlier one of the endpoint waits, or (an add, at `endpoint`) a
    /// closing destination still holds its port. Port 0 binds anywhere.
    fn destination_waits(&self, ei: usize, endpoint: Option<SocketAddr>) -> bool {
        let endpoint_id = self.receive_endpoints[ei].id;
        self.deferred_destinations
            .iter()
            .any(|d| d.endpoint_id == endpoint_id)
            || endpoint.is_some_and(|e| {
                e.port() != 0
                    && self
                        .closing_destinations
                        .iter()
                        .any(|(_, a)| a.port() == e.port())
            })
    }

    fn defer_destination(
        &mut self,
        ei: usize,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        channel: &str,
        add: bool,
    ) {
        self.deferred_destinations.push(DeferredDestination {
            endpoint_id: self.receive_endpoints[ei].id,
            client_id,
            correlation_id,
            registration_id,
            channel: channel.to_owned(),
            add,
        });
    }

    /// The receiver closed a removed destination's socket.
    pub(super) fn on_receive_destination_closed(&mut self, endpoint_id: u64, address: SocketAddr) {
        if let Some(i) = self
            .closing_destinations
            .iter()
            .position(|&c| c == (endpoint_id, address))
        {
            self.closing_destinations.swap_remove(i);
            self.retry_deferred_destinations();
        }
    }

    /// Carries out, in order, the destination commands that waited; those
    /// that must still wait wait again.
    pub(super) fn retry_deferred_destinations(&mut self) {
        for d in std::mem::take(&mut self.deferred_destinations) {
            let done = if d.add {
                self.on_add_receive_destination(
                    d.client_id,
                    d.correlation_id,
                    d.registration_id,
                    &d.channel,
                )
            } else {
                self.on_remove_receive_destination(
                    d.client_id,
                    d.correlation_id,
                    d.registration_id,
                    &d.channel,
                )
            };
            if let Err(e) = done {
                self.reply_error(d.client_id, d.correlation_id, e);
            }
        }
    }

    /// The receive endpoint (index) of the client's subscription
    /// `registration_id`, which must be a `control-mode=manual` one.
    fn manual_receive_endpoint(
        &self,
        client_id: i64,
        registration_id: i64,
    ) -> Result<usize, CommandError> {
        let link = self
            .subscriptions
            .iter()
            .find(|s| s.registration_id == registration_id && s.client_id == client_id)
            .ok_or_else(|| {
                CommandError::new(
                    error_code::UNKNOWN_SUBSCRIPTION,
                    format!("unknown subscription: {registration_id}"),
                )
            })?;
        link.udp_endpoint
            .and_then(|id| {
                self.receive_endpoints
                    .iter()
                    .position(|e| e.id == id && e.mdc == Some(MdcMode::Manual))
            })
            .ok_or_else(|| {
                CommandError::new(
                    error_code::INVALID_CHANNEL,
                    format!(
                        "channel '{}' does not allow manual control: destinations are added to a control-mode=manual subscription",
                        link.channel
                    ),
                )
            })
    }

    /// The address a destination channel names (`aeron:udp?endpoint=HOST:PORT`).
    fn destination_address(&mut self, channel: &str) -> Result<SocketAddr, CommandError> {
        let udp = self.destination_channel(channel)?;
        match udp.endpoint {
            Some(e) if e.port() != 0 => Ok(e),
            Some(_) => Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("destination '{channel}': endpoint has port 0: a destination needs a port"),
            )),
            None => Err(CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("destination '{channel}': a destination needs endpoint=host:port"),
            )),
        }
    }

    /// A destination channel, checked and resolved: UDP, not a spy nor a
    /// response channel, nothing of the publication's or subscription's own.
    fn destination_channel(&mut self, channel: &str) -> Result<UdpChannel, CommandError> {
        let invalid = |why: String| {
            CommandError::new(
                error_code::INVALID_CHANNEL,
                format!("destination '{channel}': {why}"),
            )
        };
        let uri = ChannelUri::parse(channel).map_err(|e| invalid(e.to_string()))?;
        if uri.is_spy() {
            return Err(invalid("a spy is no destination".into()));
        }
        if uri.media() != Media::Udp {
            return Err(invalid(
                "a destination is a UDP endpoint (aeron:udp?endpoint=host:port)".into(),
            ));
        }
        if let Some(key) = PUBLICATION_KEYS.iter().find(|k| uri.get(k).is_some()) {
            return Err(invalid(format!(
                "destinations must not contain the key {key}"
            )));
        }
        if uri.params().control_mode == Some(ControlMode::Response) {
            return Err(invalid("destinations may not be response channels".into()));
        }
        self.timed_name_lookup(|| UdpChannel::from_uri(uri.clone()))
            .map_err(invalid)
    }
}
