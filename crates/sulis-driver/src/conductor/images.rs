//! Publication images: creating one when the receiver hears a new stream,
//! image ids, linking subscribers to images, and the timer that withdraws
//! silent, finished or unwanted images and frees them after the linger.

use super::DriverConductor;
use crate::congestion_control::{CongestionControlSpec, CubicParams};
use crate::publication_image::{ImageParts, ImageSubscriber, PublicationImage};
use crate::receiver::ReceiverCommand;
use crate::system_counters::{stream_counter_key, stream_counter_label, type_id, SystemCounter};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use sulis_concurrent::logbuffer::{LogBuffers, LogParams};
use sulis_protocol::control::Event;
use sulis_protocol::driver_dir::image_log_file;
use sulis_protocol::frame::SetupFrame;
use sulis_protocol::log_buffer_descriptor::*;
use sulis_protocol::uri::ChannelUri;

/// Status-message periods an ended request image goes on sending RSP_SETUP.
const RESPONSE_DRAIN_SM_PERIODS: i64 = 5;

/// Conductor-side state of an image.
pub(super) enum ImageState {
    Active,
    Lingering { until_ns: i64 },
}

pub(super) struct ImageEntry {
    pub(super) image: Arc<PublicationImage>,
    pub(super) state: ImageState,
    /// When the conductor first saw the stream ended and read while a
    /// response publication still waited to be heard of through this image.
    pub(super) drained_at_ns: Option<i64>,
}

impl DriverConductor {
    /// Gives subscription `sub_index` a position on `image` and tells its client.
    pub(super) fn link_image_subscriber(
        &mut self,
        image: &Arc<PublicationImage>,
        sub_index: usize,
    ) {
        let now_ms = self.clock.epoch_ms();
        let s = &self.subscriptions[sub_index];
        let (sub_id, client_id) = (s.registration_id, s.client_id);
        let join = image
            .min_subscriber_position()
            .unwrap_or(image.rcv_pos.get_volatile());
        let key = stream_counter_key(sub_id, image.session_id, image.stream_id, &s.channel);
        let label = format!(
            "{} @{join}",
            stream_counter_label(
                "sub-pos",
                sub_id,
                image.session_id,
                image.stream_id,
                &s.channel
            )
        );
        let counter_id = match self.counters.allocate(
            type_id::SUBSCRIBER_POSITION,
            &key,
            &label,
            sub_id,
            client_id,
            image.correlation_id,
            now_ms,
        ) {
            Ok(id) => id,
            Err(e) => {
                self.record_error(&format!(
                    "cannot allocate subscriber position for subscription {sub_id}: {e}"
                ));
                return;
            }
        };
        let position = self.counters.reader().counter_ref(counter_id);
        position.set_ordered(join);
        image.add_subscriber(ImageSubscriber {
            subscription_id: sub_id,
            position,
        });
        self.send(Event::AvailableImage {
            correlation_id: image.correlation_id,
            session_id: image.session_id,
            stream_id: image.stream_id,
            subscription_registration_id: sub_id,
            subscriber_position_id: counter_id,
            log_file: image.logs.path().display().to_string(),
            source_identity: image.source.to_string(),
        });
    }

    pub(super) fn on_create_image(
        &mut self,
        endpoint_id: u64,
        transport_index: usize,
        setup: &SetupFrame,
        source: SocketAddr,
        control_address: SocketAddr,
        now_ns: i64,
    ) {
        let refuse = |this: &mut Self| {
            this.system.increment(SystemCounter::ImagesRejected);
            let _ = this.net.receiver.send(ReceiverCommand::ImageRefused {
                endpoint_id,
                session_id: setup.session_id,
                stream_id: setup.stream_id,
            });
        };
        let Some(endpoint) = self.receive_endpoints.iter().find(|e| e.id == endpoint_id) else {
            return refuse(self);
        };
        let (rcvbuf, rcv_wnd, reliable) = (endpoint.rcvbuf, endpoint.rcv_wnd, endpoint.reliable);
        // Group semantics follow the channel's group=, else (infer) multicast
        // or the SETUP's GROUP flag.
        let group = endpoint
            .group
            .unwrap_or(endpoint.control.is_some() || setup.is_group());
        let group_tag = endpoint.group_tag;
        let subs: Vec<usize> = (0..self.subscriptions.len())
            .filter(|&i| {
                let s = &self.subscriptions[i];
                s.udp_endpoint == Some(endpoint_id)
                    && s.stream_id == setup.stream_id
                    && s.matches_session(setup.session_id)
            })
            .collect();
        let exists = self.images.iter().any(|i| {
            matches!(i.state, ImageState::Active)
                && i.image.endpoint_id == endpoint_id
                && i.image.session_id == setup.session_id
                && i.image.stream_id == setup.stream_id
        });
        if subs.is_empty() || exists {
            return refuse(self);
        }
        let term_length = setup.term_length as usize;
        let mut window = rcv_wnd
            .unwrap_or(self.ctx.initial_window_length)
            .min(term_length / 2);
        if rcvbuf > 0 {
            window = window.min(rcvbuf);
        }
        let window = window & !31;
        let correlation_id = self.next_image_id();
        let params = LogParams {
            correlation_id,
            term_length,
            page_size: self.ctx.file_page_size,
            mtu: setup.mtu as usize,
            initial_term_id: setup.initial_term_id,
            active_term_id: setup.active_term_id,
            term_offset: setup.term_offset,
            session_id: setup.session_id,
            stream_id: setup.stream_id,
            log_type: LOG_TYPE_IMAGE,
            publication_window: 0,
            linger_ns: self.ctx.publication_linger_timeout_ns as i64,
            sparse: self.ctx.term_buffer_sparse_file,
            signal_eos: true,
            tether: true,
            reliable,
            spies_simulate_connection: false,
        };
        let path = image_log_file(&self.ctx.dir, correlation_id);
        let join = compute_position(
            setup.active_term_id,
            setup.term_offset,
            position_bits_to_shift(term_length),
            setup.initial_term_id,
        );
        let created = LogBuffers::create(&path, &params).and_then(|l| {
            // Subscribers wait at the join before any frame arrives.
            l.populate_page_at(join).map(|_| l).inspect_err(|_| {
                let _ = std::fs::remove_file(&path);
            })
        });
        let logs = match created {
            Ok(l) => l,
            Err(e) => {
                self.record_error(&format!(
                    "cannot create image log for session {} stream {} from {source}: {e}",
                    setup.session_id, setup.stream_id
                ));
                return refuse(self);
            }
        };
        let now_ms = self.clock.epoch_ms();
        let channel = self.subscriptions[subs[0]].channel.clone();
        let congestion = self.congestion_control_of(&channel);
        let mut specs = vec![
            (type_id::RECEIVER_HWM, "rcv-hwm"),
            (type_id::RECEIVER_POSITION, "rcv-pos"),
        ];
        if matches!(congestion, CongestionControlSpec::Cubic(_)) {
            specs.extend([
                (type_id::PER_IMAGE, "rcv-cc-cubic-rtt"),
                (type_id::PER_IMAGE, "rcv-cc-cubic-wnd"),
            ]);
        }
        let ids = match self.allocate_stream_counters(
            &specs,
            (correlation_id, setup.session_id, setup.stream_id, &channel),
            0,
            now_ms,
        ) {
            Ok(ids) => ids,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                self.record_error(&format!("cannot allocate image counters: {e}"));
                return refuse(self);
            }
        };
        let bits = position_bits_to_shift(term_length);
        let join = compute_position(
            setup.active_term_id,
            setup.term_offset,
            bits,
            setup.initial_term_id,
        );
        let reader = self.counters.reader();
        let image = Arc::new(PublicationImage::new(ImageParts {
            correlation_id,
            session_id: setup.session_id,
            stream_id: setup.stream_id,
            endpoint_id,
            channel: channel.clone(),
            source,
            control_address,
            transport_index,
            group,
            group_tag,
            logs,
            initial_term_id: setup.initial_term_id,
            join_position: join,
            window_length: window as i32,
            reliable,
            hwm: reader.counter_ref(ids[0]),
            rcv_pos: reader.counter_ref(ids[1]),
            mtu: setup.mtu,
            congestion,
            cc_counters: (ids.len() == 4)
                .then(|| (reader.counter_ref(ids[2]), reader.counter_ref(ids[3]))),
            send_response_setup: setup.is_send_response_setup(),
            now_ns,
        }));
        for si in subs {
            self.link_image_subscriber(&image, si);
        }
        self.images.push(ImageEntry {
            image: image.clone(),
            state: ImageState::Active,
            drained_at_ns: None,
        });
        let _ = self.net.receiver.send(ReceiverCommand::AddImage { image });
    }

    /// The congestion control of an image for a subscription on `channel`:
    /// its `cc=`, else the driver's `congestion_control`.
    fn congestion_control_of(&self, channel: &str) -> CongestionControlSpec {
        let cubic = CubicParams {
            initial_rtt_ns: self.ctx.cubic_initial_rtt_ns as i64,
            measure_rtt: self.ctx.cubic_measure_rtt,
            tcp_mode: self.ctx.cubic_tcp_mode,
        };
        let cc = ChannelUri::parse(channel)
            .ok()
            .and_then(|u| u.params().cc.clone())
            .unwrap_or_else(|| self.ctx.congestion_control.clone());
        // Both were checked (the URI parser, the option's); a bad one would be static.
        CongestionControlSpec::parse(&cc, cubic).unwrap_or(CongestionControlSpec::Static)
    }

    fn next_image_id(&mut self) -> i64 {
        // Image ids share the correlation id space with client commands:
        // counting down from the top keeps them apart.
        self.next_endpoint_id += 1;
        i64::MAX / 2 - self.next_endpoint_id as i64
    }

    pub(super) fn on_images_timer(&mut self, now_ns: i64, now_ms: i64) -> usize {
        let mut work = 0;
        let linger_ns = self.ctx.publication_linger_timeout_ns as i64;
        // Images: withdraw the silent, the finished and the unwanted; free after linger.
        let liveness_ns = self.ctx.image_liveness_timeout_ns as i64;
        let sm_period_ns = self.ctx.status_message_timeout_ns as i64;
        let mut withdrawn = Vec::new();
        for entry in self.images.iter_mut() {
            if let ImageState::Active = entry.state {
                let img = &entry.image;
                let silent =
                    now_ns - img.time_of_last_packet_ns.load(Ordering::Acquire) > liveness_ns;
                let unwanted = !img.has_subscribers();
                let finished = img.is_drained() && {
                    // A request stream that ended right after its request
                    // (Aeron's startReplay closes its publication once
                    // answered) still tells its source of the response
                    // publication for a while, as Aeron's image does while it
                    // drains: five status-message periods.
                    let armed = img.response_session_id.load(Ordering::Acquire)
                        != crate::publication_image::NO_RESPONSE_SESSION;
                    let since = *entry.drained_at_ns.get_or_insert(now_ns);
                    !armed || now_ns - since >= RESPONSE_DRAIN_SM_PERIODS * sm_period_ns
                };
                if silent || unwanted || finished || img.has_given_up() {
                    img.state
                        .store(crate::publication_image::state::INACTIVE, Ordering::Release);
                    entry.state = ImageState::Lingering {
                        until_ns: now_ns + linger_ns,
                    };
                    withdrawn.push(img.clone());
                }
            }
        }
        for img in withdrawn {
            for sub_id in img.subscribers().iter().map(|s| s.subscription_id) {
                let channel = self
                    .subscriptions
                    .iter()
                    .find(|s| s.registration_id == sub_id)
                    .map(|s| s.channel.clone())
                    .unwrap_or_default();
                self.send(Event::UnavailableImage {
                    correlation_id: img.correlation_id,
                    subscription_registration_id: sub_id,
                    stream_id: img.stream_id,
                    channel,
                });
            }
            work += 1;
        }
        let mut i = 0;
        while i < self.images.len() {
            let done = matches!(self.images[i].state, ImageState::Lingering { until_ns } if now_ns >= until_ns);
            if done {
                let entry = self.images.swap_remove(i);
                let img = entry.image;
                for s in img.remove_subscribers(|_| true) {
                    self.counters.free(s.position.id(), now_ms);
                }
                self.counters.free(img.hwm.id(), now_ms);
                self.counters.free(img.rcv_pos.id(), now_ms);
                if let Some((rtt, window)) = &img.cc_counters {
                    self.counters.free(rtt.id(), now_ms);
                    self.counters.free(window.id(), now_ms);
                }
                self.close_receive_endpoint_if_unused(img.endpoint_id);
                if let Err(e) = std::fs::remove_file(img.logs.path()) {
                    self.system.increment(SystemCounter::FreeFails);
                    self.record_error(&format!("cannot delete {}: {e}", img.logs.path().display()));
                }
                work += 1;
            } else {
                i += 1;
            }
        }
        work
    }
}
