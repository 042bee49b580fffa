//! A non-blocking UDP socket that sends and receives in batches.
//!
//! One `recvmmsg` call drains up to a batch of datagrams and one `sendmmsg`
//! call sends several, so message rates are not capped by one system call
//! per datagram. Sockets are made with socket2 so buffer sizes, address reuse
//! and multicast options are set before binding.
//!
//! Where the kernel has them (Linux ≥ 4.18 / 5.0), UDP segmentation offload
//! and receive coalescing cut the per-datagram cost further:
//!
//! * **GSO** (`UDP_SEGMENT`): consecutive datagrams of one batch that have the
//!   same length and lie back to back in memory (full-MTU datagrams of a term
//!   do) go to the kernel as one message that it splits into datagrams; on the
//!   wire nothing changes, so any receiver, Aeron's included, sees ordinary
//!   datagrams. If the kernel refuses it, the socket falls back to one
//!   message per datagram for good.
//! * **GRO** (`UDP_GRO`): the kernel may hand over several datagrams of one
//!   flow in one buffer with their segment size; [`RecvBatch::get`] returns
//!   the buffer and [`RecvBatch::segment_size`] how to split it.

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// Largest UDP payload a frame may use (Aeron's limit).
pub const MAX_UDP_PAYLOAD_LENGTH: usize = 65504;

/// Datagrams per `sendmmsg` call in [`UdpTransport::send_batch`].
pub const SEND_BATCH_MAX: usize = 64;

// <netinet/udp.h>; not in every libc crate target.
const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Most segments the kernel takes in one GSO send (UDP_MAX_SEGMENTS).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes in one GSO send (an IP datagram's payload less the UDP header).
const GSO_MAX_BYTES: usize = 65_000;
/// Control-message room per received message (one `UDP_GRO` int, aligned).
const RECV_CONTROL_LEN: usize = 64;

/// Socket settings of a channel.
#[derive(Clone, Debug, Default)]
pub struct SocketOptions {
    /// SO_SNDBUF (0 = OS default).
    pub so_sndbuf: usize,
    /// SO_RCVBUF (0 = OS default).
    pub so_rcvbuf: usize,
    /// Allow several sockets on one address (multicast receivers).
    pub reuse_address: bool,
    /// Multicast: the group this socket joins (it is bound to the group's
    /// address, so it receives that group's datagrams only, whatever other
    /// groups share the port).
    pub join_group: Option<std::net::IpAddr>,
    /// Multicast: the interface joins and multicast sends go through (its
    /// address, and its index for IPv6; `None`: the kernel's choice).
    pub multicast_interface: Option<(std::net::IpAddr, u32)>,
    /// Multicast TTL (hop limit) of what this socket sends (0 = the OS default).
    pub multicast_ttl: u32,
}

/// A bound, non-blocking UDP socket.
pub struct UdpTransport {
    socket: UdpSocket,
    local: SocketAddr,
    /// Send runs of equal datagrams as one GSO message (off once the kernel refuses).
    gso: std::sync::atomic::AtomicBool,
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
    /// Where each buffer's bytes begin within its slot (0 as received; an
    /// opened sealed datagram begins after its envelope's header).
    starts: Vec<usize>,
    lens: Vec<usize>,
    addrs: Vec<libc::sockaddr_storage>,
    iovecs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// `RECV_CONTROL_LEN` bytes per message for the GRO segment size (u64 for alignment).
    control: Vec<u64>,
    segment_sizes: Vec<usize>,
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
            starts: vec![0; capacity],
            lens: vec![0; capacity],
            addrs: vec![unsafe { zeroed() }; capacity],
            iovecs: Vec::with_capacity(capacity),
            msgs: Vec::with_capacity(capacity),
            control: vec![0u64; capacity * RECV_CONTROL_LEN / 8],
            segment_sizes: vec![0; capacity],
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
            hdr.msg_control = unsafe { b.control.as_mut_ptr().add(i * RECV_CONTROL_LEN / 8) }
                as *mut libc::c_void;
            hdr.msg_controllen = RECV_CONTROL_LEN as _;
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

    /// Buffer `i` of the last call and its source: one datagram, or several
    /// of [`RecvBatch::segment_size`] bytes each (the last may be shorter)
    /// when the kernel coalesced them (GRO).
    pub fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>) {
        let start = i * self.slot_len + self.starts[i];
        let data = &self.data[start..start + self.lens[i]];
        (data, socket_addr(&self.addrs[i]))
    }
}

impl RecvBatch {
    /// Segment size of buffer `i`: its whole length unless GRO coalesced
    /// several datagrams into it.
    pub fn segment_size(&self, i: usize) -> usize {
        match self.segment_sizes[i] {
            0 => self.lens[i],
            n => n,
        }
    }

    /// Room for this many buffers.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Empties the batch (for transports that fill it with [`RecvBatch::push`]).
    pub fn clear(&mut self) {
        self.count = 0;
    }

    /// Appends one datagram from `src` (for transports other than a socket);
    /// false, and nothing appended, when the batch is full or the datagram
    /// is longer than a buffer.
    pub fn push(&mut self, datagram: &[u8], src: SocketAddr) -> bool {
        let i = self.count;
        if i >= self.capacity() || datagram.len() > self.slot_len {
            return false;
        }
        self.data[i * self.slot_len..i * self.slot_len + datagram.len()].copy_from_slice(datagram);
        self.lens[i] = datagram.len();
        self.starts[i] = 0;
        self.segment_sizes[i] = 0;
        let addr = SockAddr::from(src);
        // SAFETY: `addr` holds `addr.len()` initialised bytes, at most the
        // size of a sockaddr_storage, which is what the slot is.
        unsafe {
            std::ptr::copy_nonoverlapping(
                addr.as_ptr() as *const u8,
                &mut self.addrs[i] as *mut libc::sockaddr_storage as *mut u8,
                addr.len() as usize,
            );
        }
        self.count += 1;
        true
    }

    /// Opens every datagram in place: `open` is given each one (a buffer's
    /// one, or each of its GRO segments) with its source, and returns the
    /// range of it to keep, or `None` to drop it. What is kept is packed back
    /// to back, in order; a buffer left with nothing is dropped, and a
    /// buffer's segment size becomes its first kept datagram's length (every
    /// segment but the last is one length, so cutting each by the same number
    /// of bytes keeps them so). Returns how many buffers are left.
    pub fn retain_map(
        &mut self,
        mut open: impl FnMut(&mut [u8], Option<SocketAddr>) -> Option<std::ops::Range<usize>>,
    ) -> usize {
        let mut kept = 0;
        for i in 0..self.count {
            let slot = i * self.slot_len;
            let end = slot + self.starts[i] + self.lens[i];
            let segment = self.segment_size(i).max(1);
            let from = socket_addr(&self.addrs[i]);
            // The first datagram kept stays where it is; later ones close up behind it.
            let (mut at, mut base, mut write, mut datagrams, mut first) =
                (slot + self.starts[i], 0, 0, 0, 0);
            while at < end {
                let next = (at + segment).min(end);
                if let Some(range) = open(&mut self.data[at..next], from) {
                    if datagrams == 0 {
                        (base, write, first) = (at + range.start, at + range.end, range.len());
                    } else {
                        self.data
                            .copy_within(at + range.start..at + range.end, write);
                        write += range.len();
                    }
                    datagrams += 1;
                }
                at = next;
            }
            if datagrams == 0 {
                continue;
            }
            if kept == i {
                self.starts[kept] = base - slot;
            } else {
                self.data.copy_within(base..write, kept * self.slot_len);
                self.starts[kept] = 0;
                self.addrs[kept] = self.addrs[i];
            }
            self.lens[kept] = write - base;
            self.segment_sizes[kept] = if datagrams > 1 { first } else { 0 };
            kept += 1;
        }
        self.count = kept;
        kept
    }

    /// Marks buffer `i` as holding datagrams of `size` bytes (as GRO does).
    #[cfg(test)]
    pub(crate) fn set_segment_size(&mut self, i: usize, size: usize) {
        self.segment_sizes[i] = size;
    }
}

/// The `UDP_GRO` segment size in a received message's control data (0 if none).
fn gro_segment_size(hdr: &libc::msghdr) -> usize {
    // SAFETY: the CMSG macros walk the control buffer the kernel filled,
    // bounded by msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == SOL_UDP && (*cmsg).cmsg_type == UDP_GRO {
                let data = libc::CMSG_DATA(cmsg) as *const libc::c_int;
                return std::ptr::read_unaligned(data).max(0) as usize;
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    0
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

/// The interface and TTL of multicast sends.
fn set_multicast_options(socket: &Socket, opts: &SocketOptions) -> io::Result<()> {
    match opts.multicast_interface {
        Some((std::net::IpAddr::V4(a), _)) => socket.set_multicast_if_v4(&a)?,
        Some((std::net::IpAddr::V6(_), index)) => socket.set_multicast_if_v6(index)?,
        None => {}
    }
    if opts.multicast_ttl > 0 {
        if opts.join_group.is_some_and(|g| g.is_ipv6())
            || opts.multicast_interface.is_some_and(|(a, _)| a.is_ipv6())
        {
            socket.set_multicast_hops_v6(opts.multicast_ttl)?;
        } else {
            socket.set_multicast_ttl_v4(opts.multicast_ttl)?;
        }
    }
    Ok(())
}

/// Joins `group` on the interface (its address for IPv4, its index for IPv6).
fn join(
    socket: &Socket,
    group: std::net::IpAddr,
    interface: Option<(std::net::IpAddr, u32)>,
) -> io::Result<()> {
    match group {
        std::net::IpAddr::V4(g) => {
            let i = match interface {
                Some((std::net::IpAddr::V4(a), _)) => a,
                _ => std::net::Ipv4Addr::UNSPECIFIED,
            };
            socket.join_multicast_v4(&g, &i)
        }
        std::net::IpAddr::V6(g) => socket.join_multicast_v6(&g, interface.map_or(0, |(_, i)| i)),
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
        set_multicast_options(&socket, opts)?;
        socket.bind(&addr.into()).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot bind UDP socket to {addr}: {e}"))
        })?;
        if let Some(group) = opts.join_group {
            join(&socket, group, opts.multicast_interface).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot join multicast group {group}: {e}"),
                )
            })?;
        }
        let socket: UdpSocket = socket.into();
        let local = socket.local_addr()?;
        Ok(UdpTransport {
            socket,
            local,
            gso: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// The socket's descriptor (for an epoll set).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.as_raw_fd()
    }

    /// Stops (or allows again) sending runs of datagrams as one GSO message.
    pub fn set_gso(&self, on: bool) {
        self.gso.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// True while runs of datagrams go out as GSO messages.
    pub fn gso(&self) -> bool {
        self.gso.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Asks the kernel to coalesce received datagrams (GRO); false where it
    /// cannot (then every buffer holds one datagram, as before).
    pub fn enable_gro(&self) -> bool {
        let on: libc::c_int = 1;
        // SAFETY: plain setsockopt with a c_int value.
        let rc = unsafe {
            libc::setsockopt(
                self.socket.as_raw_fd(),
                SOL_UDP,
                UDP_GRO,
                &on as *const libc::c_int as *const libc::c_void,
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        rc == 0
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
            m.msg_hdr.msg_controllen = RECV_CONTROL_LEN as _;
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
            batch.starts[i] = 0;
            let hdr = &batch.msgs[i].msg_hdr;
            batch.segment_sizes[i] = if hdr.msg_controllen > 0 {
                gro_segment_size(hdr)
            } else {
                0
            };
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
    /// [`SEND_BATCH_MAX`] datagrams, headers on the stack; runs of equal,
    /// adjacent datagrams as one GSO message each); returns how many
    /// datagrams were sent (fewer when the socket buffer filled up).
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
        let gso = self.gso();
        match self.send_messages(datagrams, addr, gso) {
            Err(e) if gso && gso_refused(&e) => {
                // This kernel or route cannot segment: plain datagrams from now on.
                self.set_gso(false);
                self.send_messages(datagrams, addr, false)
            }
            other => other,
        }
    }

    /// One `sendmmsg`: one message per datagram, or per run of datagrams when
    /// `gso`. Returns the datagrams sent.
    fn send_messages(&self, datagrams: &[&[u8]], addr: &SockAddr, gso: bool) -> io::Result<usize> {
        use std::mem::MaybeUninit;
        debug_assert!(datagrams.len() <= SEND_BATCH_MAX);
        // Only the headers in use are written: no per-call zeroing of the whole array.
        let mut iovecs = [const { MaybeUninit::<libc::iovec>::uninit() }; SEND_BATCH_MAX];
        let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; SEND_BATCH_MAX];
        // One UDP_SEGMENT control message per GSO message (u64s for alignment).
        let mut controls = [const { MaybeUninit::<[u64; 4]>::uninit() }; SEND_BATCH_MAX];
        let mut runs = [0usize; SEND_BATCH_MAX];
        let mut count = 0;
        let mut i = 0;
        while i < datagrams.len() {
            let first = datagrams[i];
            let seg = first.len();
            let mut run = 1;
            let mut len = seg;
            if gso && seg > 0 {
                // Equal datagrams back to back in memory; the last may be shorter.
                while i + run < datagrams.len() && run < GSO_MAX_SEGMENTS {
                    let next = datagrams[i + run];
                    let adjacent = next.as_ptr() == first.as_ptr().wrapping_add(len);
                    if !adjacent || next.len() > seg || len + next.len() > GSO_MAX_BYTES {
                        break;
                    }
                    len += next.len();
                    run += 1;
                    if next.len() < seg {
                        break;
                    }
                }
            }
            let iov = iovecs[count].write(libc::iovec {
                iov_base: first.as_ptr() as *mut libc::c_void,
                iov_len: len,
            });
            // SAFETY: an all-zero msghdr is a valid empty header.
            let mut hdr: libc::msghdr = unsafe { zeroed() };
            hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
            hdr.msg_namelen = addr.len();
            hdr.msg_iov = iov;
            hdr.msg_iovlen = 1;
            if run > 1 {
                let control = controls[count].write([0u64; 4]);
                // SAFETY: the buffer holds CMSG_SPACE(2) bytes, aligned for cmsghdr.
                unsafe {
                    let space = libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
                    debug_assert!(space <= size_of::<[u64; 4]>());
                    hdr.msg_control = control.as_mut_ptr() as *mut libc::c_void;
                    hdr.msg_controllen = space as _;
                    let cmsg = libc::CMSG_FIRSTHDR(&hdr);
                    (*cmsg).cmsg_level = SOL_UDP;
                    (*cmsg).cmsg_type = UDP_SEGMENT;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, seg as u16);
                }
            }
            msgs[count].write(libc::mmsghdr {
                msg_hdr: hdr,
                msg_len: 0,
            });
            runs[count] = run;
            count += 1;
            i += run;
        }
        // SAFETY: every pointer refers to live buffers for the duration of the call.
        let n = unsafe {
            libc::sendmmsg(
                self.socket.as_raw_fd(),
                // The first `count` headers were written above.
                msgs.as_mut_ptr() as *mut libc::mmsghdr,
                count as libc::c_uint,
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
        Ok(runs[..n as usize].iter().sum())
    }
}

/// Errors with which a kernel or device refuses UDP segmentation offload.
fn gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::ENOPROTOOPT) | Some(libc::EOPNOTSUPP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_cut_buffers_in_place_and_close_up_behind_a_dropped_one() {
        let src: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let mut batch = RecvBatch::new(4, 64);
        for d in [&b"xxdropyy"[..], b"xxkeptyy", b"xxAAyyxxBByyxxCyy"] {
            batch.push(d, src);
        }
        batch.set_segment_size(2, 6);
        // Keep what lies between "xx" and "yy" (a 2-byte header, a 2-byte tag), except "drop".
        let kept = batch.retain_map(|d, _| (&d[2..d.len() - 2] != b"drop").then(|| 2..d.len() - 2));
        assert_eq!(kept, 2);
        assert_eq!(batch.get(0).0, b"kept");
        assert_eq!((batch.get(1).0, batch.segment_size(1)), (&b"AABBC"[..], 2));
        // A buffer cut in place (not moved) keeps its bytes where they were.
        let mut batch = RecvBatch::new(2, 64);
        batch.push(b"xxkeptyy", src);
        assert_eq!(batch.retain_map(|d, _| Some(2..d.len() - 2)), 1);
        assert_eq!((batch.get(0).0, batch.segment_size(0)), (&b"kept"[..], 4));
    }

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

    /// Receives until `count` datagrams arrived, splitting coalesced buffers.
    fn receive(rx: &UdpTransport, count: usize) -> (Vec<Vec<u8>>, usize) {
        let mut batch = RecvBatch::new(8, 65536);
        let mut got = Vec::new();
        let mut buffers = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < count && std::time::Instant::now() < deadline {
            let n = rx.recv_batch(&mut batch).unwrap();
            for i in 0..n {
                let (d, _) = batch.get(i);
                buffers += 1;
                got.extend(d.chunks(batch.segment_size(i)).map(|c| c.to_vec()));
            }
        }
        (got, buffers)
    }

    /// A term-like buffer cut into datagrams: runs of full-size ones with shorter ones between.
    fn term_datagrams(term: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut offset = 0;
        for len in [1408usize, 1408, 1408, 640, 1408, 1408, 96, 1408] {
            out.push(&term[offset..offset + len]);
            offset += len;
        }
        out
    }

    #[test]
    fn should_send_runs_of_equal_adjacent_datagrams_with_gso_as_ordinary_datagrams() {
        let rx =
            UdpTransport::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).unwrap();
        let tx =
            UdpTransport::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).unwrap();
        let term: Vec<u8> = (0..16384u32).map(|i| (i * 7 % 251) as u8).collect();
        let datagrams = term_datagrams(&term);
        assert!(tx.gso());
        assert_eq!(tx.send_batch(&datagrams, rx.local_addr()).unwrap(), 8);
        // Without GRO the receiver sees each datagram on its own, whatever the sender did.
        let (got, buffers) = receive(&rx, 8);
        assert_eq!(got, datagrams);
        assert_eq!(buffers, 8);
        // The same with GSO off.
        tx.set_gso(false);
        assert_eq!(tx.send_batch(&datagrams, rx.local_addr()).unwrap(), 8);
        assert_eq!(receive(&rx, 8).0, datagrams);
    }

    #[test]
    fn should_split_datagrams_the_kernel_coalesced() {
        let rx =
            UdpTransport::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).unwrap();
        let tx =
            UdpTransport::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).unwrap();
        if !rx.enable_gro() {
            eprintln!("UDP_GRO not available on this kernel: nothing to test");
            return;
        }
        let term: Vec<u8> = (0..16384u32).map(|i| (i * 13 % 241) as u8).collect();
        let datagrams = term_datagrams(&term);
        assert_eq!(tx.send_batch(&datagrams, rx.local_addr()).unwrap(), 8);
        let (got, buffers) = receive(&rx, 8);
        assert_eq!(
            got, datagrams,
            "same datagrams, same boundaries, same order"
        );
        if tx.gso() {
            // GSO runs arrive as one buffer each: 1408×3+640, 1408×2+96, 1408.
            assert_eq!(buffers, 3);
        }
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
                ..SocketOptions::default()
            },
        )
        .unwrap();
        // Linux doubles the requested size for bookkeeping.
        assert!(t.recv_buffer_size().unwrap() >= 256 * 1024);
        assert!(t.send_buffer_size().unwrap() >= 128 * 1024);
    }
}
