//! A non-blocking UDP socket that sends and receives in batches.
//!
//! One `recvmmsg` call drains up to a batch of datagrams and one `sendmmsg`
//! call sends several, so message rates are not capped by one system call
//! per datagram. Sockets are made with socket2 so buffer sizes, address reuse
//! and multicast options are set before binding.

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// Largest UDP payload a frame may use (Aeron's limit).
pub const MAX_UDP_PAYLOAD_LENGTH: usize = 65504;

/// Datagrams per `sendmmsg` call in [`UdpTransport::send_batch`].
pub const SEND_BATCH_MAX: usize = 64;

/// Socket settings of a channel.
#[derive(Clone, Debug, Default)]
pub struct SocketOptions {
    /// SO_SNDBUF (0 = OS default).
    pub so_sndbuf: usize,
    /// SO_RCVBUF (0 = OS default).
    pub so_rcvbuf: usize,
    /// Allow several sockets on one address (multicast receivers).
    pub reuse_address: bool,
}

/// A bound, non-blocking UDP socket.
pub struct UdpTransport {
    socket: UdpSocket,
    local: SocketAddr,
}

impl std::fmt::Debug for UdpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UdpTransport({})", self.local)
    }
}

/// Buffers for receiving a batch of datagrams with one system call.
pub struct RecvBatch {
    data: Vec<u8>,
    slot_len: usize,
    lens: Vec<usize>,
    addrs: Vec<libc::sockaddr_storage>,
    iovecs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    count: usize,
}

// SAFETY: the raw pointers in iovecs/msgs point into this struct's own heap
// buffers, which move with it (Vec contents do not move when the Vec does).
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Room for `capacity` datagrams of up to `slot_len` bytes each.
    pub fn new(capacity: usize, slot_len: usize) -> RecvBatch {
        let capacity = capacity.max(1);
        let mut b = RecvBatch {
            data: vec![0u8; capacity * slot_len],
            slot_len,
            lens: vec![0; capacity],
            addrs: vec![unsafe { zeroed() }; capacity],
            iovecs: Vec::with_capacity(capacity),
            msgs: Vec::with_capacity(capacity),
            count: 0,
        };
        for i in 0..capacity {
            b.iovecs.push(libc::iovec {
                iov_base: unsafe { b.data.as_mut_ptr().add(i * slot_len) } as *mut libc::c_void,
                iov_len: slot_len,
            });
        }
        for i in 0..capacity {
            let mut hdr: libc::msghdr = unsafe { zeroed() };
            hdr.msg_name = &mut b.addrs[i] as *mut _ as *mut libc::c_void;
            hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_iov = &mut b.iovecs[i];
            hdr.msg_iovlen = 1;
            b.msgs.push(libc::mmsghdr {
                msg_hdr: hdr,
                msg_len: 0,
            });
        }
        b
    }

    /// Datagrams received by the last call.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when the last call received nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Datagram `i` of the last call and its source.
    pub fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>) {
        let data = &self.data[i * self.slot_len..i * self.slot_len + self.lens[i]];
        (data, socket_addr(&self.addrs[i]))
    }
}

/// Converts a kernel-filled sockaddr to a `SocketAddr` (IPv4 and IPv6 only).
fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let a = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let a = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn domain_of(addr: &SocketAddr) -> Domain {
    if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    }
}

impl UdpTransport {
    /// Binds a non-blocking socket to `addr` (port 0 = ephemeral).
    pub fn bind(addr: SocketAddr, opts: &SocketOptions) -> io::Result<UdpTransport> {
        let socket = Socket::new(domain_of(&addr), Type::DGRAM, Some(Protocol::UDP))?;
        if opts.reuse_address {
            socket.set_reuse_address(true)?;
        }
        if opts.so_sndbuf > 0 {
            socket.set_send_buffer_size(opts.so_sndbuf)?;
        }
        if opts.so_rcvbuf > 0 {
            socket.set_recv_buffer_size(opts.so_rcvbuf)?;
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into()).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot bind UDP socket to {addr}: {e}"))
        })?;
        let socket: UdpSocket = socket.into();
        let local = socket.local_addr()?;
        Ok(UdpTransport { socket, local })
    }

    /// The bound address (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Effective SO_RCVBUF.
    pub fn recv_buffer_size(&self) -> io::Result<usize> {
        socket2::SockRef::from(&self.socket).recv_buffer_size()
    }

    /// Effective SO_SNDBUF.
    pub fn send_buffer_size(&self) -> io::Result<usize> {
        socket2::SockRef::from(&self.socket).send_buffer_size()
    }

    /// Receives up to the batch's capacity with one `recvmmsg`; returns how many
    /// (0 when nothing is waiting).
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        for (i, m) in batch.msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            m.msg_len = 0;
            batch.iovecs[i].iov_len = batch.slot_len;
        }
        // SAFETY: msgs point at buffers owned by `batch`, sized as declared.
        let n = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                batch.msgs.as_mut_ptr(),
                batch.msgs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            batch.count = 0;
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        for i in 0..n {
            batch.lens[i] = batch.msgs[i].msg_len as usize;
        }
        batch.count = n;
        Ok(n)
    }

    /// Sends one datagram; returns the bytes sent (0 if the socket buffer is full).
    pub fn send_to(&self, datagram: &[u8], to: SocketAddr) -> io::Result<usize> {
        match self.socket.send_to(datagram, to) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Sends several datagrams to one address with `sendmmsg` (one call per
    /// [`SEND_BATCH_MAX`] datagrams, headers on the stack); returns how many
    /// were sent (fewer when the socket buffer filled up).
    pub fn send_batch(&self, datagrams: &[&[u8]], to: SocketAddr) -> io::Result<usize> {
        let addr = SockAddr::from(to);
        let mut sent = 0;
        for chunk in datagrams.chunks(SEND_BATCH_MAX) {
            let n = self.send_chunk(chunk, &addr)?;
            sent += n;
            if n < chunk.len() {
                break;
            }
        }
        Ok(sent)
    }

    fn send_chunk(&self, datagrams: &[&[u8]], addr: &SockAddr) -> io::Result<usize> {
        use std::mem::MaybeUninit;
        debug_assert!(datagrams.len() <= SEND_BATCH_MAX);
        // Only the headers in use are written: no per-call zeroing of the whole array.
        let mut iovecs = [const { MaybeUninit::<libc::iovec>::uninit() }; SEND_BATCH_MAX];
        let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; SEND_BATCH_MAX];
        for (i, d) in datagrams.iter().enumerate() {
            let iov = iovecs[i].write(libc::iovec {
                iov_base: d.as_ptr() as *mut libc::c_void,
                iov_len: d.len(),
            });
            // SAFETY: an all-zero msghdr is a valid empty header.
            let mut hdr: libc::msghdr = unsafe { zeroed() };
            hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
            hdr.msg_namelen = addr.len();
            hdr.msg_iov = iov;
            hdr.msg_iovlen = 1;
            msgs[i].write(libc::mmsghdr {
                msg_hdr: hdr,
                msg_len: 0,
            });
        }
        // SAFETY: every pointer refers to live buffers for the duration of the call.
        let n = unsafe {
            libc::sendmmsg(
                self.socket.as_raw_fd(),
                // The first datagrams.len() headers were written above.
                msgs.as_mut_ptr() as *mut libc::mmsghdr,
                datagrams.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_send_and_receive_batches_on_loopback() {
        let rx =
            UdpTransport::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).unwrap();
        let tx =
            UdpTransport::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).unwrap();
        let payloads: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 32 + i as usize]).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        assert_eq!(tx.send_batch(&refs, rx.local_addr()).unwrap(), 20);
        let mut batch = RecvBatch::new(8, 2048);
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < 20 && std::time::Instant::now() < deadline {
            let n = rx.recv_batch(&mut batch).unwrap();
            assert!(n <= 8);
            for i in 0..n {
                let (d, from) = batch.get(i);
                assert_eq!(from, Some(tx.local_addr()));
                got.push(d.to_vec());
            }
        }
        assert_eq!(got, payloads);
        assert_eq!(
            rx.recv_batch(&mut batch).unwrap(),
            0,
            "nothing left: non-blocking"
        );
    }

    #[test]
    fn should_name_the_address_when_bind_fails() {
        let a =
            UdpTransport::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).unwrap();
        let err = UdpTransport::bind(a.local_addr(), &SocketOptions::default()).unwrap_err();
        assert!(
            err.to_string().contains(&a.local_addr().to_string()),
            "{err}"
        );
    }

    #[test]
    fn should_apply_socket_buffer_sizes() {
        let t = UdpTransport::bind(
            "127.0.0.1:0".parse().unwrap(),
            &SocketOptions {
                so_rcvbuf: 256 * 1024,
                so_sndbuf: 128 * 1024,
                reuse_address: false,
            },
        )
        .unwrap();
        // Linux doubles the requested size for bookkeeping.
        assert!(t.recv_buffer_size().unwrap() >= 256 * 1024);
        assert!(t.send_buffer_size().unwrap() >= 128 * 1024);
    }
}
