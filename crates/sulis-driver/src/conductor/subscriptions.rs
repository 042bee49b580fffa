//! Subscriptions: the links clients hold, adding (IPC and UDP, deferred
//! while the old socket on the address closes), removing and unlinking
//! from publications and images.

use super::endpoints::EndpointEntry;
use super::images::ImageState;
use super::{parse_channel, CommandError, DriverConductor};
use crate::media::transport::EndpointRole;
use crate::publication_image::PublicationImage;
use crate::receiver::ReceiverCommand;
use std::sync::Arc;
use sulis_concurrent::counters::NULL_COUNTER_ID;
use sulis_protocol::control::{error_code, Event};
use sulis_protocol::uri::{ChannelUri, Media};

pub(super) struct SubscriptionLink {
    pub(super) registration_id: i64,
    pub(super) client_id: i64,
    pub(super) stream_id: i32,
    pub(super) channel: String,
    pub(super) session_filter: Option<i32>,
    pub(super) tether: bool,
    /// Receive endpoint of a UDP subscription (`None` for IPC).
    pub(super) udp_endpoint: Option<u64>,
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
        self.subscriptions.push(SubscriptionLink {
            registration_id: correlation_id,
            client_id,
            stream_id,
            channel: channel.to_string(),
            session_filter,
            tether: p.tether.unwrap_or(true),
            udp_endpoint: None,
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
                    && session_filter.is_none_or(|f| f == x.session_id)
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
        for p in self.publications.iter_mut() {
            p.subscribers.retain(|s| {
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
            let _ = self.net.receiver.send(ReceiverCommand::RemoveSubscription {
                endpoint_id,
                stream_id: link.stream_id,
            });
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

    fn on_add_udp_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        uri: &ChannelUri,
        session_filter: Option<i32>,
    ) -> Result<(), CommandError> {
        let udp = self.resolve_udp(channel, uri)?;
        let p = uri.params();
        let key = udp.canonical.clone();
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
        let endpoint_id = match self.receive_endpoints.iter_mut().find(|e| e.key == key) {
            Some(e) => {
                if e.ref_count == 0 {
                    // Kept open only for lingering images: the new
                    // subscription's settings apply from now on.
                    e.rcv_wnd = p.rcv_wnd.map(|w| w as usize);
                    e.reliable = p.reliable.unwrap_or(true);
                }
                e.ref_count += 1;
                e.id
            }
            None => {
                let bind = udp.endpoint.expect("checked by resolve_udp");
                let (id, transport, rcvbuf) =
                    self.bind_endpoint(bind, p, channel, EndpointRole::Receive)?;
                let _ = self
                    .net
                    .receiver
                    .send(ReceiverCommand::AddEndpoint { id, transport });
                self.receive_endpoints.push(EndpointEntry {
                    id,
                    key,
                    ref_count: 1,
                    rcvbuf,
                    rcv_wnd: p.rcv_wnd.map(|w| w as usize),
                    reliable: p.reliable.unwrap_or(true),
                });
                id
            }
        };
        let _ = self.net.receiver.send(ReceiverCommand::AddSubscription {
            endpoint_id,
            stream_id,
        });
        self.subscriptions.push(SubscriptionLink {
            registration_id: correlation_id,
            client_id,
            stream_id,
            channel: channel.to_string(),
            session_filter,
            tether: p.tether.unwrap_or(true),
            udp_endpoint: Some(endpoint_id),
        });
        self.send(Event::SubscriptionReady {
            correlation_id,
            channel_status_counter_id: NULL_COUNTER_ID,
        });
        let si = self.subscriptions.len() - 1;
        let images: Vec<Arc<PublicationImage>> = self
            .images
            .iter()
            .filter(|i| {
                matches!(i.state, ImageState::Active)
                    && i.image.endpoint_id == endpoint_id
                    && i.image.stream_id == stream_id
                    && session_filter.is_none_or(|f| f == i.image.session_id)
            })
            .map(|i| i.image.clone())
            .collect();
        for image in images {
            self.link_image_subscriber(&image, si);
        }
        Ok(())
    }
}
