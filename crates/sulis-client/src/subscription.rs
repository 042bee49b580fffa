//! Subscriptions: the images of every publisher on a channel and stream.
//!
//! The client's housekeeping thread adds and removes images; the polling
//! thread keeps its own copy of the image list and refreshes it only when the
//! generation counter moved, so a poll costs one atomic load beyond the reads.

use crate::batch::Batch;
use crate::driver_proxy::{Destination, DriverProxy, Resource};
use crate::image::{ControlledAction, Header, Image};
use crate::ClientError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// State shared between the subscription and the client's housekeeping thread.
pub struct SubscriptionShared {
    images: Mutex<Vec<Arc<Image>>>,
    generation: AtomicU64,
    closed: AtomicBool,
}

impl SubscriptionShared {
    pub(crate) fn new() -> Self {
        SubscriptionShared {
            images: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    pub(crate) fn add_image(&self, image: Arc<Image>) {
        let mut v = self.images.lock().unwrap();
        v.push(image);
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn remove_image(&self, correlation_id: i64) -> Option<Arc<Image>> {
        let mut v = self.images.lock().unwrap();
        let i = v
            .iter()
            .position(|im| im.correlation_id() == correlation_id)?;
        let image = v.remove(i);
        image.mark_closed();
        self.generation.fetch_add(1, Ordering::Release);
        Some(image)
    }

    /// The current images (a snapshot).
    pub fn images(&self) -> Vec<Arc<Image>> {
        self.images.lock().unwrap().clone()
    }

    /// True once the subscription (or its client) closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
        for im in self.images.lock().unwrap().iter() {
            im.mark_closed();
        }
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// A subscription to a channel and stream.
pub struct Subscription {
    driver: DriverProxy,
    registration_id: i64,
    stream_id: i32,
    channel: String,
    shared: Arc<SubscriptionShared>,
    images: Vec<Arc<Image>>,
    generation: u64,
    round_robin: usize,
    closed: bool,
    /// The driver's status counter of the channel's endpoint (UDP only).
    channel_status_id: i32,
}

impl Subscription {
    pub(crate) fn new(
        driver: DriverProxy,
        registration_id: i64,
        stream_id: i32,
        channel: String,
        shared: Arc<SubscriptionShared>,
        channel_status_id: i32,
    ) -> Self {
        Subscription {
            driver,
            registration_id,
            stream_id,
            channel,
            shared,
            channel_status_id,
            images: Vec::new(),
            generation: u64::MAX,
            round_robin: 0,
            closed: false,
        }
    }

    #[inline(always)]
    fn refresh(&mut self) {
        let g = self.shared.generation.load(Ordering::Acquire);
        if g != self.generation {
            self.images = self.shared.images.lock().unwrap().clone();
            self.generation = g;
        }
    }

    /// State shared with the client thread (images, closed flag), usable without `&mut`.
    pub fn shared(&self) -> Arc<SubscriptionShared> {
        self.shared.clone()
    }

    /// Registration id.
    pub fn registration_id(&self) -> i64 {
        self.registration_id
    }
    /// Stream id.
    pub fn stream_id(&self) -> i32 {
        self.stream_id
    }
    /// Channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }
    /// The driver's status counter of this subscription's UDP endpoint
    /// (Aeron's `channelStatusId`; `NULL_COUNTER_ID` for IPC and spies).
    pub fn channel_status_id(&self) -> i32 {
        self.channel_status_id
    }

    /// The addresses (`host:port`) the endpoint is bound to, read from the
    /// driver's local socket address counters (Aeron's
    /// `localSocketAddresses`): how a channel with `endpoint=host:0`
    /// learns its port.
    pub fn local_socket_addresses(&self) -> Vec<String> {
        use sulis_protocol::counters::{channel_status, parse_local_socket_address_key, type_id};
        let counters = self.driver.counters();
        let mut out = Vec::new();
        if self.channel_status_id < 0 {
            return out;
        }
        counters.for_each(|id, type_id, key, _| {
            if type_id == type_id::LOCAL_SOCKET_ADDRESS
                && counters.counter_value(id) == channel_status::ACTIVE
            {
                if let Some((status, address)) = parse_local_socket_address_key(key) {
                    if status == self.channel_status_id {
                        out.push(address);
                    }
                }
            }
        });
        out
    }

    /// The channel with the port the driver bound in place of an
    /// `endpoint=host:0` (Aeron's `tryResolveChannelEndpointPort`): what
    /// to tell a peer that must send here. The channel as it is when its
    /// endpoint names a port; `None` while the port cannot be known.
    pub fn resolved_channel(&self) -> Option<String> {
        let uri = sulis_protocol::uri::ChannelUri::parse(&self.channel).ok()?;
        let Some(host) = uri.get("endpoint").and_then(|e| e.strip_suffix(":0")) else {
            return Some(self.channel.clone());
        };
        let endpoint = format!("{host}:0");
        let bound = self.local_socket_addresses().into_iter().next()?;
        let port = bound.rsplit(':').next()?;
        Some(self.channel.replacen(
            &format!("endpoint={endpoint}"),
            &format!("endpoint={host}:{port}"),
            1,
        ))
    }

    /// True when closed (or the client failed).
    pub fn is_closed(&self) -> bool {
        self.closed || self.shared.closed.load(Ordering::Acquire)
    }
    /// The current images.
    pub fn images(&mut self) -> Vec<Arc<Image>> {
        self.refresh();
        self.images.clone()
    }
    /// The image of session `session_id`, if there is one (Aeron's
    /// `imageBySessionId`), without copying the list.
    pub fn image_by_session_id(&mut self, session_id: i32) -> Option<&Arc<Image>> {
        self.refresh();
        self.images.iter().find(|i| i.session_id() == session_id)
    }
    /// True when at least one image is connected.
    pub fn is_connected(&mut self) -> bool {
        self.refresh();
        !self.is_closed() && self.images.iter().any(|i| !i.is_closed())
    }
    /// Number of images.
    pub fn image_count(&mut self) -> usize {
        self.refresh();
        self.images.len()
    }

    /// Fails if closed; distinguishes a closed subscription from a failed client.
    pub fn check(&self) -> Result<(), ClientError> {
        self.driver.check()?;
        if self.is_closed() {
            return Err(ClientError::Closed("subscription is closed".into()));
        }
        Ok(())
    }

    /// Visits the images round-robin (a different one first each call) while
    /// fewer than `limit` fragments were read; `f(image, remaining)` returns
    /// how many it read.
    #[inline(always)]
    fn each_image<E>(
        &mut self,
        limit: usize,
        mut f: impl FnMut(&Image, usize) -> Result<usize, E>,
    ) -> Result<usize, E> {
        self.refresh();
        let n = self.images.len();
        if n == 0 {
            return Ok(0);
        }
        self.round_robin = (self.round_robin + 1) % n;
        let mut total = 0;
        for k in 0..n {
            if total >= limit {
                break;
            }
            total += f(&self.images[(self.round_robin + k) % n], limit - total)?;
        }
        Ok(total)
    }

    /// Polls up to `limit` fragments across images, round-robin.
    #[inline]
    pub fn poll<E, F: FnMut(&[u8], &Header) -> Result<(), E>>(
        &mut self,
        mut handler: F,
        limit: usize,
    ) -> Result<usize, E> {
        self.each_image(limit, |image, remaining| {
            image.poll(&mut handler, remaining)
        })
    }

    /// Controlled poll across images (see [`ControlledAction`]).
    pub fn controlled_poll<E, F: FnMut(&[u8], &Header) -> Result<ControlledAction, E>>(
        &mut self,
        mut handler: F,
        limit: usize,
    ) -> Result<usize, E> {
        self.each_image(limit, |image, remaining| {
            image.controlled_poll(&mut handler, remaining)
        })
    }

    /// Polls up to `limit` fragments across images, none past `limit_position`.
    pub fn bounded_poll<E, F: FnMut(&[u8], &Header) -> Result<(), E>>(
        &mut self,
        mut handler: F,
        limit_position: i64,
        limit: usize,
    ) -> Result<usize, E> {
        self.each_image(limit, |image, remaining| {
            image.bounded_poll(&mut handler, limit_position, remaining)
        })
    }

    /// Copies up to `limit` fragments into `batch`.
    pub fn poll_batch_into(&mut self, batch: &mut Batch, limit: usize) -> usize {
        self.bounded_poll_batch_into(batch, i64::MAX, limit)
    }

    /// Copies up to `limit` fragments into `batch`, none past `limit_position`.
    pub fn bounded_poll_batch_into(
        &mut self,
        batch: &mut Batch,
        limit_position: i64,
        limit: usize,
    ) -> usize {
        let r: Result<usize, std::convert::Infallible> =
            self.each_image(limit, |image, remaining| {
                // A term boundary ends one image read; read on while there is more.
                let mut got = 0;
                loop {
                    let n = image.bounded_poll_into(batch, limit_position, remaining - got);
                    got += n;
                    if n == 0 || got >= remaining {
                        return Ok(got);
                    }
                }
            });
        match r {
            Ok(n) => n,
            Err(never) => match never {},
        }
    }

    /// Adds a destination to a multi-destination subscription
    /// (`aeron:udp?control-mode=manual`): `channel` is
    /// `aeron:udp?endpoint=HOST:PORT` (port 0: any free one, see
    /// [`local_socket_addresses`](Self::local_socket_addresses)), a multicast
    /// group, or `...|control=HOST:PORT` to receive a dynamic MDC stream. Its
    /// frames feed the same images as the other destinations'.
    pub fn add_destination(&self, channel: &str) -> Result<i64, ClientError> {
        self.check()?;
        self.driver
            .destination(self.registration_id, true, Destination::Add(channel))
    }

    /// Removes the destination added with `channel`.
    pub fn remove_destination(&self, channel: &str) -> Result<(), ClientError> {
        self.check()?;
        self.driver
            .destination(self.registration_id, true, Destination::Remove(channel))
            .map(|_| ())
    }

    /// Closes the subscription (idempotent), waiting for the driver's answer.
    /// It is closed when this returns, even with an error: the only one is
    /// [`ClientError::Interrupted`], the interrupt check having fired while
    /// waiting for the answer.
    pub fn close(&mut self) -> Result<(), ClientError> {
        self.close_with(true)
    }

    /// Closes it without waiting for the driver's answer: what dropping does,
    /// so a drop never blocks (in Python it runs holding the GIL).
    pub fn close_without_waiting(&mut self) {
        let _ = self.close_with(false);
    }

    fn close_with(&mut self, wait: bool) -> Result<(), ClientError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.shared.mark_closed();
        self.images.clear();
        self.driver
            .remove(Resource::Subscription, self.registration_id, wait)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.close_without_waiting();
    }
}
