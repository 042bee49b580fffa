//! The seam between the driver's agents and the network.
//!
//! The sender and the receiver talk to the network only through
//! [`Transport`]: receive a batch of datagrams, send one, send several to one
//! address. [`UdpTransport`] is the real one; [`LossyTransport`] wraps any
//! transport and drops datagrams on purpose (the driver's `*_loss` test
//! options), and [`super::memory`] is a network in memory for deterministic
//! tests. The conductor makes transports through a [`TransportFactory`], so a
//! test can hand the whole driver a fake network.

use super::udp_transport::{RecvBatch, SocketOptions, UdpTransport};
use crate::agent::ErrorReporter;
use crate::loss::{LossGenerator, LossSpec};
use crate::system_counters::SystemCounter;
use std::io;
use std::net::SocketAddr;
use sulis_protocol::frame::{HDR_TYPE_DATA, HDR_TYPE_PAD};

/// A datagram endpoint as the sender and receiver agents use it.
pub trait Transport: Send + std::fmt::Debug {
    /// The bound address.
    fn local_addr(&self) -> SocketAddr;

    /// Receives what is waiting, up to the batch's capacity, without
    /// blocking; returns how many buffers were filled (0: nothing waiting).
    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize>;

    /// Sends one datagram; returns the bytes sent (0 if the transport is
    /// full for now).
    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> io::Result<usize>;

    /// Sends datagrams to one address in order; returns how many went (fewer
    /// when the transport filled up: the rest are the caller's to retry).
    fn send_batch(&mut self, datagrams: &[&[u8]], to: SocketAddr) -> io::Result<usize>;

    /// Allows (or stops) sending runs of equal datagrams as one (UDP GSO).
    fn set_gso(&mut self, _on: bool) {}

    /// Asks for received datagrams to be coalesced (UDP GRO); false where
    /// that cannot be done, so every buffer holds one datagram.
    fn enable_gro(&mut self) -> bool {
        false
    }

    /// Effective receive buffer size (SO_RCVBUF; 0 if unknown).
    fn recv_buffer_size(&self) -> io::Result<usize> {
        Ok(0)
    }

    /// The descriptors `recv_batch` reads, pushed onto `fds`, for an epoll
    /// set ([`super::transport_poller`]); none for a transport without
    /// (then its agent polls every transport each duty cycle).
    fn poll_fds(&self, _fds: &mut Vec<std::os::fd::RawFd>) {}
}

/// Sends a control frame, counting its bytes and logging a failure; true
/// if it went (a full socket buffer is not an error: the frame is resent
/// by the protocol's timers).
pub fn send_control_frame(
    transport: &mut dyn Transport,
    bytes: &[u8],
    to: SocketAddr,
    errors: &ErrorReporter,
) -> bool {
    match transport.send_to(bytes, to) {
        Ok(n) => {
            errors.system().add(SystemCounter::BytesSent, n as i64);
            n > 0
        }
        Err(e) => {
            errors.record(&format!("send of a control frame to {to} failed: {e}"));
            false
        }
    }
}

/// Frames that only keep a stream alive (a sender's heartbeats, a
/// receiver's status messages on their timer), queued in a duty cycle and
/// sent together at the end of an endpoint's turn: one `sendmmsg` per
/// transport and destination (equal frames back to back go as one GSO
/// message) rather than a system call each. A thousand idle streams sent
/// fifteen thousand such frames a second; the datagrams on the wire are the
/// same, only the calls are fewer.
#[derive(Debug, Default)]
pub struct FrameBatch {
    /// Per (transport index, destination): the frames back to back and each one's length.
    queued: Vec<(usize, SocketAddr, Vec<u8>, Vec<usize>)>,
}

impl FrameBatch {
    /// Queues `frame` for `to` through the transport numbered `transport`.
    pub fn push(&mut self, transport: usize, to: SocketAddr, frame: &[u8]) {
        let i = match self
            .queued
            .iter()
            .position(|(t, d, _, _)| *t == transport && *d == to)
        {
            Some(i) => i,
            None => {
                self.queued.push((transport, to, Vec::new(), Vec::new()));
                self.queued.len() - 1
            }
        };
        let (_, _, bytes, lengths) = &mut self.queued[i];
        bytes.extend_from_slice(frame);
        lengths.push(frame.len());
    }

    /// Sends what was queued for the transport numbered `index` through
    /// `transport`; what a full socket has no room for is dropped, as a frame
    /// sent alone would be: its timer sends it again.
    pub fn flush(&mut self, index: usize, transport: &mut dyn Transport, errors: &ErrorReporter) {
        for (_, to, bytes, lengths) in self.queued.iter_mut().filter(|q| q.0 == index) {
            if lengths.is_empty() {
                continue;
            }
            let mut frames = Vec::with_capacity(lengths.len());
            let mut at = 0;
            for &len in lengths.iter() {
                frames.push(&bytes[at..at + len]);
                at += len;
            }
            match transport.send_batch(&frames, *to) {
                Ok(n) => errors.system().add(
                    SystemCounter::BytesSent,
                    frames[..n].iter().map(|f| f.len()).sum::<usize>() as i64,
                ),
                Err(e) => errors.record(&format!("send of keep-alive frames to {to} failed: {e}")),
            }
            bytes.clear();
            lengths.clear();
        }
    }

    /// Drops what no flush took (its transport gone) and, once many
    /// destinations were seen (MDC ones come and go), their buffers.
    pub fn end_turn(&mut self) {
        if self.queued.len() > 16 {
            self.queued.clear();
        } else {
            for (_, _, bytes, lengths) in self.queued.iter_mut() {
                bytes.clear();
                lengths.clear();
            }
        }
    }
}

impl Transport for UdpTransport {
    fn local_addr(&self) -> SocketAddr {
        UdpTransport::local_addr(self)
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        UdpTransport::recv_batch(self, batch)
    }

    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> io::Result<usize> {
        UdpTransport::send_to(self, datagram, to)
    }

    fn send_batch(&mut self, datagrams: &[&[u8]], to: SocketAddr) -> io::Result<usize> {
        UdpTransport::send_batch(self, datagrams, to)
    }

    fn set_gso(&mut self, on: bool) {
        UdpTransport::set_gso(self, on)
    }

    fn enable_gro(&mut self) -> bool {
        UdpTransport::enable_gro(self)
    }

    fn recv_buffer_size(&self) -> io::Result<usize> {
        UdpTransport::recv_buffer_size(self)
    }

    fn poll_fds(&self, fds: &mut Vec<std::os::fd::RawFd>) {
        fds.push(UdpTransport::raw_fd(self));
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn local_addr(&self) -> SocketAddr {
        (**self).local_addr()
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        (**self).recv_batch(batch)
    }

    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> io::Result<usize> {
        (**self).send_to(datagram, to)
    }

    fn send_batch(&mut self, datagrams: &[&[u8]], to: SocketAddr) -> io::Result<usize> {
        (**self).send_batch(datagrams, to)
    }

    fn set_gso(&mut self, on: bool) {
        (**self).set_gso(on)
    }

    fn enable_gro(&mut self) -> bool {
        (**self).enable_gro()
    }

    fn recv_buffer_size(&self) -> io::Result<usize> {
        (**self).recv_buffer_size()
    }

    fn poll_fds(&self, fds: &mut Vec<std::os::fd::RawFd>) {
        (**self).poll_fds(fds)
    }
}

/// A multicast publication's send endpoint: data goes out of one socket
/// (bound to the interface, its multicast interface and TTL set), status
/// messages and NAKs come in on another, bound to the control group (the
/// data group + 1) and joined to it, as Aeron's `SendChannelEndpoint` does.
#[derive(Debug)]
pub struct SplitTransport {
    send: Box<dyn Transport>,
    control: Box<dyn Transport>,
}

impl SplitTransport {
    /// Sends on `send`, receives from `control` (and `send`).
    pub fn new(send: Box<dyn Transport>, control: Box<dyn Transport>) -> SplitTransport {
        SplitTransport { send, control }
    }
}

impl Transport for SplitTransport {
    fn local_addr(&self) -> SocketAddr {
        self.send.local_addr()
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        match self.control.recv_batch(batch)? {
            // Unicast replies to the send socket, if any.
            0 => self.send.recv_batch(batch),
            n => Ok(n),
        }
    }

    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> io::Result<usize> {
        self.send.send_to(datagram, to)
    }

    fn send_batch(&mut self, datagrams: &[&[u8]], to: SocketAddr) -> io::Result<usize> {
        self.send.send_batch(datagrams, to)
    }

    fn set_gso(&mut self, on: bool) {
        self.send.set_gso(on)
    }

    fn recv_buffer_size(&self) -> io::Result<usize> {
        self.control.recv_buffer_size()
    }

    fn poll_fds(&self, fds: &mut Vec<std::os::fd::RawFd>) {
        let before = fds.len();
        self.control.poll_fds(fds);
        let control = fds.len() - before;
        self.send.poll_fds(fds);
        if control == 0 || fds.len() - before == control {
            // One of the two cannot be waited on: neither is offered.
            fds.truncate(before);
        }
    }
}

/// Which agent a transport serves (the conductor binds both kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointRole {
    /// A send endpoint: data out, control in.
    Send,
    /// A receive endpoint: data in, control out.
    Receive,
}

/// Makes the transports of the conductor's endpoints.
pub trait TransportFactory: Send + Sync {
    /// Binds a transport to `addr` (port 0: any free port).
    fn bind(
        &self,
        addr: SocketAddr,
        opts: &SocketOptions,
        role: EndpointRole,
    ) -> io::Result<Box<dyn Transport>>;
}

/// The real network: UDP sockets.
#[derive(Clone, Copy, Debug, Default)]
pub struct UdpTransportFactory;

impl TransportFactory for UdpTransportFactory {
    fn bind(
        &self,
        addr: SocketAddr,
        opts: &SocketOptions,
        _role: EndpointRole,
    ) -> io::Result<Box<dyn Transport>> {
        Ok(Box::new(UdpTransport::bind(addr, opts)?))
    }
}

/// True for frames that carry stream data (DATA, heartbeats, PAD); every
/// other type is a control frame. Too short to say: control.
fn is_data_frame(datagram: &[u8]) -> bool {
    datagram.len() >= 8
        && matches!(
            u16::from_le_bytes([datagram[6], datagram[7]]),
            HDR_TYPE_DATA | HDR_TYPE_PAD
        )
}

/// Loss settings for one transport: four independent generators.
#[derive(Clone, Debug)]
pub struct LossSettings {
    /// Data frames sent.
    pub send_data: LossGenerator,
    /// Control frames sent.
    pub send_control: LossGenerator,
    /// Data frames received.
    pub receive_data: LossGenerator,
    /// Control frames received.
    pub receive_control: LossGenerator,
}

impl LossSettings {
    /// Generators for the specifications, seeded from `seed` and `salt` (each
    /// endpoint its own sequence; the same seed gives the same run).
    pub fn new(specs: [LossSpec; 4], seed: u64, salt: u64) -> LossSettings {
        let g = |spec, n: u64| {
            LossGenerator::new(
                spec,
                seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n.wrapping_mul(0x9E37_79B9),
            )
        };
        LossSettings {
            send_data: g(specs[0], 1),
            send_control: g(specs[1], 2),
            receive_data: g(specs[2], 3),
            receive_control: g(specs[3], 4),
        }
    }

    /// True if any generator can drop anything.
    pub fn is_on(&self) -> bool {
        self.send_data.is_on()
            || self.send_control.is_on()
            || self.receive_data.is_on()
            || self.receive_control.is_on()
    }

    fn drop_sent(&mut self, datagram: &[u8]) -> bool {
        if is_data_frame(datagram) {
            self.send_data.is_on() && self.send_data.should_drop()
        } else {
            self.send_control.is_on() && self.send_control.should_drop()
        }
    }

    fn drop_received(&mut self, datagram: &[u8]) -> bool {
        if is_data_frame(datagram) {
            self.receive_data.is_on() && self.receive_data.should_drop()
        } else {
            self.receive_control.is_on() && self.receive_control.should_drop()
        }
    }
}

/// A transport that drops datagrams on purpose, as Aeron's debug channel
/// endpoints do: data frames and control frames each by their own
/// generator, on the way out and on the way in. A dropped datagram counts as
/// sent, so the sender moves on as if the network had lost it.
#[derive(Debug)]
pub struct LossyTransport<T: Transport> {
    inner: T,
    loss: LossSettings,
    /// Datagrams kept by the last send_batch, with their index in the call.
    kept: Vec<usize>,
}

impl<T: Transport> LossyTransport<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, loss: LossSettings) -> Self {
        LossyTransport {
            inner,
            loss,
            kept: Vec::new(),
        }
    }

    /// The generators (for their `dropped` counts).
    pub fn loss(&self) -> &LossSettings {
        &self.loss
    }
}

impl<T: Transport> Transport for LossyTransport<T> {
    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn poll_fds(&self, fds: &mut Vec<std::os::fd::RawFd>) {
        self.inner.poll_fds(fds)
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        let n = self.inner.recv_batch(batch)?;
        if n == 0 {
            return Ok(0);
        }
        let loss = &mut self.loss;
        // Each datagram kept or dropped whole, by its own generator.
        Ok(batch
            .retain_map(|datagram, _| (!loss.drop_received(datagram)).then_some(0..datagram.len())))
    }

    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> io::Result<usize> {
        if self.loss.drop_sent(datagram) {
            return Ok(datagram.len());
        }
        self.inner.send_to(datagram, to)
    }

    fn send_batch(&mut self, datagrams: &[&[u8]], to: SocketAddr) -> io::Result<usize> {
        self.kept.clear();
        let mut slices: Vec<&[u8]> = Vec::with_capacity(datagrams.len());
        for (i, d) in datagrams.iter().enumerate() {
            if !self.loss.drop_sent(d) {
                self.kept.push(i);
                slices.push(d);
            }
        }
        let sent = if slices.is_empty() {
            0
        } else {
            self.inner.send_batch(&slices, to)?
        };
        // Dropped datagrams before the first one that did not go count as sent.
        Ok(match self.kept.get(sent) {
            Some(&first_unsent) => first_unsent,
            None => datagrams.len(),
        })
    }

    fn set_gso(&mut self, on: bool) {
        self.inner.set_gso(on)
    }

    fn enable_gro(&mut self) -> bool {
        // Loss is decided per datagram: coalesced buffers would hide them.
        false
    }

    fn recv_buffer_size(&self) -> io::Result<usize> {
        self.inner.recv_buffer_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::memory::MemoryNetwork;

    fn data(len: usize) -> Vec<u8> {
        let mut d = vec![0u8; len];
        d[6..8].copy_from_slice(&HDR_TYPE_DATA.to_le_bytes());
        d
    }

    fn control() -> Vec<u8> {
        let mut d = vec![0u8; 36];
        d[6..8].copy_from_slice(&sulis_protocol::frame::HDR_TYPE_SM.to_le_bytes());
        d
    }

    fn every(n: u64, offset: u64) -> LossSpec {
        LossSpec::Every { n, offset }
    }

    #[test]
    fn should_drop_data_and_control_by_their_own_generators_and_count_drops_as_sent() {
        let net = MemoryNetwork::new();
        let rx_addr: SocketAddr = "10.0.0.2:40000".parse().unwrap();
        let mut rx = net.bind(rx_addr).unwrap();
        let inner = net.bind("10.0.0.1:40001".parse().unwrap()).unwrap();
        let loss = LossSettings::new(
            [every(2, 1), LossSpec::Off, LossSpec::Off, LossSpec::Off],
            1,
            0,
        );
        let mut tx = LossyTransport::new(inner, loss);
        let datagrams: Vec<Vec<u8>> = (0..6).map(|i| data(32 + 8 * i)).collect();
        let refs: Vec<&[u8]> = datagrams.iter().map(|d| d.as_slice()).collect();
        assert_eq!(
            tx.send_batch(&refs, rx_addr).unwrap(),
            6,
            "dropped ones count as sent"
        );
        assert_eq!(tx.send_to(&control(), rx_addr).unwrap(), 36);
        let mut batch = RecvBatch::new(16, 2048);
        let n = rx.recv_batch(&mut batch).unwrap();
        let lens: Vec<usize> = (0..n).map(|i| batch.get(i).0.len()).collect();
        assert_eq!(
            lens,
            [32, 48, 64, 36],
            "every second data frame dropped, control kept"
        );
        assert_eq!(tx.loss().send_data.dropped(), 3);
    }

    #[test]
    fn should_report_a_short_send_after_the_dropped_datagrams_before_it() {
        let net = MemoryNetwork::new();
        let rx_addr: SocketAddr = "10.0.0.2:40000".parse().unwrap();
        let _rx = net.bind(rx_addr).unwrap();
        let inner = net.bind("10.0.0.1:40001".parse().unwrap()).unwrap();
        // Room for two datagrams in flight: the third kept one does not go.
        net.set_capacity(rx_addr, 2);
        let loss = LossSettings::new(
            [every(3, 0), LossSpec::Off, LossSpec::Off, LossSpec::Off],
            1,
            0,
        );
        let mut tx = LossyTransport::new(inner, loss);
        let datagrams: Vec<Vec<u8>> = (0..6).map(|_| data(40)).collect();
        let refs: Vec<&[u8]> = datagrams.iter().map(|d| d.as_slice()).collect();
        // Dropped: 0 and 3. Kept: 1, 2 (sent), 4 (refused) → 4 count as gone.
        assert_eq!(tx.send_batch(&refs, rx_addr).unwrap(), 4);
    }

    #[test]
    fn should_drop_received_datagrams_and_keep_the_rest_in_order() {
        let net = MemoryNetwork::new();
        let rx_addr: SocketAddr = "10.0.0.2:40000".parse().unwrap();
        let inner = net.bind(rx_addr).unwrap();
        let mut tx = net.bind("10.0.0.1:40001".parse().unwrap()).unwrap();
        let loss = LossSettings::new(
            [LossSpec::Off, LossSpec::Off, every(2, 0), every(1, 0)],
            1,
            0,
        );
        let mut rx = LossyTransport::new(inner, loss);
        assert!(!rx.enable_gro());
        for len in [32, 40, 48, 56] {
            tx.send_to(&data(len), rx_addr).unwrap();
            tx.send_to(&control(), rx_addr).unwrap();
        }
        let mut batch = RecvBatch::new(16, 2048);
        let n = rx.recv_batch(&mut batch).unwrap();
        let got: Vec<(usize, Option<SocketAddr>)> = (0..n)
            .map(|i| (batch.get(i).0.len(), batch.get(i).1))
            .collect();
        let from = Some("10.0.0.1:40001".parse().unwrap());
        assert_eq!(got, [(40, from), (56, from)]);
    }
}
