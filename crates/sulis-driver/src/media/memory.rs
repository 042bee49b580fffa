//! A datagram network in memory, for deterministic tests of the sender,
//! the receiver and the whole driver in invoker mode.
//!
//! Addresses are bound as with UDP (port 0 picks a free port); a datagram
//! sent to a bound address waits in its queue until received, and one sent
//! to an unbound address is gone, as on a real network. Each address holds
//! a bounded number of datagrams (a socket buffer: beyond it a send reports
//! 0 bytes). A test can look at, hold back or drop what is in flight with
//! [`MemoryNetwork::take`], [`MemoryNetwork::inject`] and
//! [`MemoryNetwork::set_capacity`]; nothing depends on timing or threads.

use super::transport::{EndpointRole, Transport, TransportFactory};
use super::udp_transport::{RecvBatch, SocketOptions};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Datagrams an address holds unless told otherwise.
const DEFAULT_CAPACITY: usize = 4096;

/// One datagram in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// Sender's address.
    pub from: SocketAddr,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

#[derive(Debug)]
struct Queue {
    datagrams: VecDeque<Datagram>,
    capacity: usize,
    /// Held: datagrams wait, the bound transport receives nothing.
    held: bool,
}

#[derive(Debug, Default)]
struct Net {
    bound: HashMap<SocketAddr, Queue>,
    next_port: u16,
    /// Datagrams sent to an address nobody had bound.
    unroutable: u64,
    /// Send calls (`send_to` or `send_batch`, however many datagrams) made from each address.
    send_calls: HashMap<SocketAddr, u64>,
}

/// The network: cheap to clone, every clone is the same network.
#[derive(Clone, Debug, Default)]
pub struct MemoryNetwork {
    net: Arc<Mutex<Net>>,
}

/// An address bound on a [`MemoryNetwork`]; unbound when dropped.
#[derive(Debug)]
pub struct MemoryTransport {
    net: MemoryNetwork,
    local: SocketAddr,
}

impl MemoryNetwork {
    /// An empty network.
    pub fn new() -> MemoryNetwork {
        MemoryNetwork::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Net> {
        self.net.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Binds `addr` (port 0: the next free port from 20000 up).
    pub fn bind(&self, mut addr: SocketAddr) -> io::Result<MemoryTransport> {
        let mut net = self.lock();
        if addr.port() == 0 {
            loop {
                net.next_port = net.next_port.wrapping_add(1);
                let port = 20000 + net.next_port % 40000;
                addr.set_port(port);
                if !net.bound.contains_key(&addr) {
                    break;
                }
            }
        }
        if net.bound.contains_key(&addr) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("cannot bind {addr}: address already in use (memory network)"),
            ));
        }
        net.bound.insert(
            addr,
            Queue {
                datagrams: VecDeque::new(),
                capacity: DEFAULT_CAPACITY,
                held: false,
            },
        );
        Ok(MemoryTransport {
            net: self.clone(),
            local: addr,
        })
    }

    /// Sets how many datagrams `addr` holds before sends to it report 0 bytes.
    pub fn set_capacity(&self, addr: SocketAddr, capacity: usize) {
        if let Some(q) = self.lock().bound.get_mut(&addr) {
            q.capacity = capacity;
        }
    }

    /// Holds (or releases) what arrives at `addr`: while held, datagrams
    /// wait in the network, where [`MemoryNetwork::take`] can get them
    /// before the transport bound there does.
    pub fn hold(&self, addr: SocketAddr, held: bool) {
        if let Some(q) = self.lock().bound.get_mut(&addr) {
            q.held = held;
        }
    }

    /// Takes every datagram waiting at `addr` out of the network.
    pub fn take(&self, addr: SocketAddr) -> Vec<Datagram> {
        match self.lock().bound.get_mut(&addr) {
            Some(q) => q.datagrams.drain(..).collect(),
            None => Vec::new(),
        }
    }

    /// Puts a datagram in `to`'s queue (ignoring its capacity), as if `from` had sent it.
    pub fn inject(&self, to: SocketAddr, datagram: Datagram) {
        if let Some(q) = self.lock().bound.get_mut(&to) {
            q.datagrams.push_back(datagram);
        }
    }

    /// Datagrams waiting at `addr`.
    pub fn pending(&self, addr: SocketAddr) -> usize {
        self.lock()
            .bound
            .get(&addr)
            .map_or(0, |q| q.datagrams.len())
    }

    /// Every bound address, sorted.
    pub fn bound(&self) -> Vec<SocketAddr> {
        let mut all: Vec<SocketAddr> = self.lock().bound.keys().copied().collect();
        all.sort();
        all
    }

    /// True while something has `addr` bound.
    pub fn is_bound(&self, addr: SocketAddr) -> bool {
        self.lock().bound.contains_key(&addr)
    }

    /// Datagrams sent to addresses nobody had bound.
    pub fn unroutable(&self) -> u64 {
        self.lock().unroutable
    }

    /// Send calls made from `from` so far (a batch counts once).
    pub fn send_calls(&self, from: SocketAddr) -> u64 {
        self.lock().send_calls.get(&from).copied().unwrap_or(0)
    }

    fn count_call(&self, from: SocketAddr) {
        *self.lock().send_calls.entry(from).or_default() += 1;
    }

    fn send(&self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) -> usize {
        let mut net = self.lock();
        match net.bound.get_mut(&to) {
            Some(q) if q.datagrams.len() >= q.capacity => 0,
            Some(q) => {
                q.datagrams.push_back(Datagram {
                    from,
                    bytes: bytes.to_vec(),
                });
                bytes.len()
            }
            None => {
                net.unroutable += 1;
                bytes.len()
            }
        }
    }
}

impl Drop for MemoryTransport {
    fn drop(&mut self) {
        self.net.lock().bound.remove(&self.local);
    }
}

impl Transport for MemoryTransport {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.clear();
        let mut net = self.net.lock();
        let Some(q) = net.bound.get_mut(&self.local).filter(|q| !q.held) else {
            return Ok(0);
        };
        while let Some(d) = q.datagrams.front() {
            if !batch.push(&d.bytes, d.from) {
                if batch.is_empty() {
                    // Longer than a buffer: truncated away, as a socket would.
                    q.datagrams.pop_front();
                    continue;
                }
                break;
            }
            q.datagrams.pop_front();
        }
        Ok(batch.len())
    }

    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> io::Result<usize> {
        self.net.count_call(self.local);
        Ok(self.net.send(self.local, to, datagram))
    }

    fn send_batch(&mut self, datagrams: &[&[u8]], to: SocketAddr) -> io::Result<usize> {
        self.net.count_call(self.local);
        let mut sent = 0;
        for d in datagrams {
            if self.net.send(self.local, to, d) == 0 {
                break;
            }
            sent += 1;
        }
        Ok(sent)
    }
}

impl TransportFactory for MemoryNetwork {
    fn bind(
        &self,
        addr: SocketAddr,
        _opts: &SocketOptions,
        _role: EndpointRole,
    ) -> io::Result<Box<dyn Transport>> {
        Ok(Box::new(MemoryNetwork::bind(self, addr)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_deliver_in_order_refuse_when_full_and_unbind_on_drop() {
        let net = MemoryNetwork::new();
        let a = net.bind("10.0.0.1:0".parse().unwrap()).unwrap();
        let b_addr: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let mut b = net.bind(b_addr).unwrap();
        assert_eq!(
            net.bind(b_addr).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        let mut a = a;
        net.set_capacity(b_addr, 2);
        assert_eq!(
            a.send_batch(&[b"one", b"two", b"three"], b_addr).unwrap(),
            2
        );
        let mut batch = RecvBatch::new(8, 64);
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 2);
        assert_eq!(batch.get(0), (&b"one"[..], Some(a.local_addr())));
        assert_eq!(batch.get(1).0, b"two");
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 0);
        drop(b);
        assert!(!net.is_bound(b_addr));
        assert_eq!(a.send_to(b"lost", b_addr).unwrap(), 4);
        assert_eq!(net.unroutable(), 1);
        assert!(net.bind(b_addr).is_ok(), "the address is free again");
    }
}
