//! Destinations of manual multi-destination-cast publications: the client's
//! ADD_DESTINATION, REMOVE_DESTINATION and REMOVE_DESTINATION_BY_ID,
//! checked here and carried out by the sender on the publication's send
//! endpoint (`multi_send_destination.rs`). Multi-destination subscriptions
//! (ADD_RCV_DESTINATION, REMOVE_RCV_DESTINATION) are not supported yet.

use super::{CommandError, DriverConductor};
use crate::media::udp_channel::UdpChannel;
use crate::multi_send_destination::MdcMode;
use crate::sender::SenderCommand;
use std::net::SocketAddr;
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
        let endpoint_id = self.manual_send_endpoint(client_id, registration_id, receive)?;
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
        let endpoint_id = self.manual_send_endpoint(client_id, registration_id, receive)?;
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
        let endpoint_id = self.manual_send_endpoint(client_id, registration_id, false)?;
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
        receive: bool,
    ) -> Result<u64, CommandError> {
        if receive {
            return Err(CommandError::new(
                error_code::NOT_SUPPORTED,
                "multi-destination subscriptions (add a destination to a subscription) are not supported yet",
            ));
        }
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

    /// The address a destination channel names (`aeron:udp?endpoint=HOST:PORT`).
    fn destination_address(&mut self, channel: &str) -> Result<SocketAddr, CommandError> {
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
        let udp = self
            .timed_name_lookup(|| UdpChannel::from_uri(uri.clone()))
            .map_err(invalid)?;
        match udp.endpoint {
            Some(e) if e.port() != 0 => Ok(e),
            Some(_) => Err(invalid(
                "endpoint has port 0: a destination needs a port".into(),
            )),
            None => Err(invalid("a destination needs endpoint=host:port".into())),
        }
    }
}
