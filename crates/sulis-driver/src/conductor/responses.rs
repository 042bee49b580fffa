//! Response channels (`control-mode=response`): a server answers each client
//! over one response port without knowing any client address.
//!
//! The client's request publication names its response subscription
//! (`response-correlation-id=<subscription>`) and its SETUPs ask for a
//! response. The server's response publication names the request image
//! (`response-correlation-id=<image correlation id>`); the image then sends
//! RSP_SETUP frames with the response publication's session until a receiver
//! connects to it. The client's sender hands an RSP_SETUP to this conductor,
//! which gives the response subscription that session and has the receiver
//! send a setup-eliciting status message to the server's response port: the
//! response publication sends to wherever that came from. Over IPC the
//! response publication binds the subscription directly.

use super::{CommandError, DriverConductor};
use crate::publication_image::{PublicationImage, NO_RESPONSE_SESSION};
use crate::receiver::ReceiverCommand;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use sulis_protocol::control::error_code;
use sulis_protocol::uri::RESPONSE_CORRELATION_PROTOTYPE;

impl DriverConductor {
    /// A request publication's `response-correlation-id` must name a response
    /// subscription of this driver.
    pub(super) fn validate_response_subscription(
        &self,
        channel: &str,
        response_correlation_id: i64,
    ) -> Result<(), CommandError> {
        if response_correlation_id < 0 {
            return Ok(());
        }
        if self
            .subscriptions
            .iter()
            .any(|s| s.registration_id == response_correlation_id && s.is_response)
        {
            return Ok(());
        }
        Err(CommandError::new(
            error_code::GENERIC_ERROR,
            format!("channel '{channel}': unable to find response subscription for response-correlation-id={response_correlation_id}"),
        ))
    }

    /// The request image a UDP response publication answers: the image whose
    /// correlation id its `response-correlation-id` gives, which must have
    /// asked for a response. `None` for `prototype`.
    pub(super) fn find_response_image(
        &self,
        channel: &str,
        response_correlation_id: Option<i64>,
    ) -> Result<Option<Arc<PublicationImage>>, CommandError> {
        let id = match response_correlation_id {
            None | Some(-1) => {
                return Err(CommandError::new(
                    error_code::GENERIC_ERROR,
                    format!("channel '{channel}': control-mode=response was specified, but no response-correlation-id set"),
                ))
            }
            Some(RESPONSE_CORRELATION_PROTOTYPE) => return Ok(None),
            Some(id) => id,
        };
        let image = self
            .images
            .iter()
            .map(|i| &i.image)
            .find(|i| i.correlation_id == id && !i.is_inactive())
            .ok_or_else(|| {
                CommandError::new(
                    error_code::GENERIC_ERROR,
                    format!("channel '{channel}': image.correlationId={id} not found"),
                )
            })?;
        if !image.send_response_setup {
            return Err(CommandError::new(
                error_code::GENERIC_ERROR,
                format!(
                    "channel '{channel}': image.correlationId={id} did not request a response channel"
                ),
            ));
        }
        Ok(Some(image.clone()))
    }

    /// A response publication of session `session_id` answers `image`: the
    /// image tells its source so (RSP_SETUP) until a receiver connects.
    pub(super) fn arm_response_image(image: &PublicationImage, session_id: i32) {
        image
            .response_session_id
            .store(session_id as i64, Ordering::Release);
        // Now, not at the next status-message period: the requester may close
        // its request stream as soon as it is answered.
        image.request_status_now();
    }

    /// Network publication `index`, a response publication, has its first
    /// receiver: its request image stops sending RSP_SETUP (a reconnect later
    /// does not start it again).
    pub(super) fn on_response_connected(&mut self, index: usize) -> usize {
        let entry = &mut self.net_publications[index];
        entry.awaiting_response_connect = false;
        let id = entry.publication.response_correlation_id;
        for i in self.images.iter().filter(|i| i.image.correlation_id == id) {
            i.image
                .response_session_id
                .store(NO_RESPONSE_SESSION, Ordering::Release);
        }
        1
    }

    /// The server of a request publication named its response publication's
    /// session (an RSP_SETUP): the response subscription
    /// `response_correlation_id` takes that session, if it has none yet, and
    /// asks the response publication for a SETUP. Repeats (the server sends
    /// RSP_SETUP until its publication hears from us) ask again, for the
    /// session it took first.
    pub(super) fn on_response_setup(
        &mut self,
        response_correlation_id: i64,
        response_session_id: i32,
    ) {
        let Some(link) = self.subscriptions.iter_mut().find(|s| {
            s.registration_id == response_correlation_id
                && s.is_response
                && s.udp_endpoint.is_some()
        }) else {
            return;
        };
        let (Some(endpoint_id), Some(to)) = (link.udp_endpoint, link.response_control) else {
            return;
        };
        let stream_id = link.stream_id;
        if link.awaiting_response {
            link.awaiting_response = false;
            link.session_filter = Some(response_session_id);
            let _ = self.net.receiver.send(ReceiverCommand::AddSubscription {
                endpoint_id,
                stream_id,
            });
        }
        let session_id = link.session_filter.unwrap_or(response_session_id);
        let _ = self.net.receiver.send(ReceiverCommand::ElicitSetup {
            endpoint_id,
            session_id,
            stream_id,
            to,
        });
    }

    /// An IPC response publication of session `session_id` answers the IPC
    /// request publication `request_registration_id`: the response
    /// subscription that request publication names takes the session (and is
    /// then linked like any subscription of that session). Nothing matching
    /// is not an error, as in Aeron.
    pub(super) fn bind_ipc_response_subscription(
        &mut self,
        request_registration_id: i64,
        session_id: i32,
    ) {
        let Some(subscription_id) = self
            .publications
            .iter()
            .find(|p| p.registration_id == request_registration_id)
            .map(|p| p.response_correlation_id)
            .filter(|&id| id >= 0)
        else {
            return;
        };
        if let Some(link) = self
            .subscriptions
            .iter_mut()
            .find(|s| s.registration_id == subscription_id && s.is_ipc() && s.awaiting_response)
        {
            link.awaiting_response = false;
            link.session_filter = Some(session_id);
        }
    }
}
