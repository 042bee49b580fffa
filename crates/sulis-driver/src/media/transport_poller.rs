//! Which transports have datagrams waiting: one `epoll_wait` a duty cycle
//! instead of a receive call on every transport, once an agent has more
//! than the driver's `transport_poller_threshold` of them. Aeron's
//! `DataTransportPoller` does the same with a selector above Agrona's
//! iteration threshold (`org.agrona.transport.iteration.threshold`, five).
//! Measured on this 2-core machine with three cluster members (each
//! driver's receiver and sender had three to five transports, so a
//! threshold of five left them polling each), 5,000 round trips a second:
//! the drivers took 72 % of both cores, most of it in `recvmmsg` calls that
//! found nothing while their threads backed off; with one `epoll_wait`
//! instead, 57 %, and the round trip's p50 went from 1.2 ms to 0.6 ms, its
//! p99 from 2.8-4.7 ms to 1.7 ms (`bench/cluster_latency.py`).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An epoll set over an agent's transports, each named by a key.
#[derive(Debug)]
pub struct TransportPoller {
    /// Up to this many transports each is simply asked every duty cycle.
    threshold: usize,
    epoll: Option<OwnedFd>,
    events: Vec<libc::epoll_event>,
    /// A command came: the set is made again before the next duty cycle.
    stale: bool,
    /// The keys named this duty cycle.
    keys: Vec<u64>,
    /// What the set holds: each key's descriptors.
    registered: HashMap<u64, Vec<RawFd>>,
}

impl TransportPoller {
    /// A poller asking nothing yet: every transport is polled. Once more
    /// than `threshold` transports are registered, the epoll set is used.
    pub fn new(threshold: usize) -> TransportPoller {
        TransportPoller {
            threshold,
            epoll: None,
            events: Vec::new(),
            stale: true,
            keys: Vec::new(),
            registered: HashMap::new(),
        }
    }

    /// The set is made again before the next duty cycle: an agent calls
    /// this for every command it takes (its transports come and go only
    /// through commands).
    pub fn mark_stale(&mut self) {
        self.stale = true;
    }

    /// An agent's duty-cycle question, asked before it reads: remakes the
    /// set from `transports()` if it went stale, then asks which keys have
    /// datagrams; [`TransportPoller::should_read`] answers per transport
    /// after. An error (the set not made, or `epoll_wait` failed) stands
    /// the poller down, so every transport is read, and is returned for the
    /// agent to record.
    pub fn begin_cycle(
        &mut self,
        transports: impl FnOnce() -> Vec<(u64, Vec<RawFd>)>,
    ) -> Result<(), String> {
        if self.stale {
            self.rebuild(&transports())
                .map_err(|e| format!("epoll set not made, every transport is polled: {e}"))?;
        }
        if !self.is_active() {
            return Ok(());
        }
        let mut keys = std::mem::take(&mut self.keys);
        let asked = self.ready(&mut keys);
        self.keys = keys;
        asked.map_err(|e| {
            self.epoll = None;
            format!("epoll_wait failed, every transport is polled from now on: {e}")
        })
    }

    /// Whether the transport named `key` is to be read this duty cycle:
    /// always when the poller stands down, else when the set named it.
    pub fn should_read(&self, key: u64) -> bool {
        !self.is_active() || self.keys.contains(&key)
    }

    /// Makes the set hold `transports` (a key and the descriptors its
    /// receives read). When they are few, or one has no descriptor (an
    /// in-memory transport), the poller stands down and every transport is
    /// polled. Only what changed is registered or removed: remade whole on
    /// every command, the set cost each add of a stream as many `epoll_ctl`
    /// calls as there were transports (N streams on a port each: N² calls).
    /// Keys are never reused for another transport. On an error the poller
    /// stands down (every transport is polled).
    pub fn rebuild(&mut self, transports: &[(u64, Vec<RawFd>)]) -> io::Result<()> {
        self.stale = false;
        if transports.len() <= self.threshold || transports.iter().any(|(_, fds)| fds.is_empty()) {
            self.epoll = None;
            self.registered.clear();
            return Ok(());
        }
        let result = self.update(transports);
        if result.is_err() {
            self.epoll = None;
            self.registered.clear();
        }
        result
    }

    fn update(&mut self, transports: &[(u64, Vec<RawFd>)]) -> io::Result<()> {
        if self.epoll.is_none() {
            // SAFETY: plain syscall; the descriptor is owned from here on.
            let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a new descriptor nobody else owns.
            self.epoll = Some(unsafe { OwnedFd::from_raw_fd(raw) });
            self.registered.clear();
        }
        let epoll = self.epoll.as_ref().map(|e| e.as_raw_fd()).unwrap_or(-1);
        let wanted: HashMap<u64, &Vec<RawFd>> = transports.iter().map(|(k, f)| (*k, f)).collect();
        // Gone or changed first: a closed descriptor's number may be a new
        // transport's by now (the kernel dropped the closed one already, so
        // removing it may find nothing).
        let gone: Vec<u64> = self
            .registered
            .iter()
            .filter(|(k, fds)| wanted.get(*k).is_none_or(|w| *w != *fds))
            .map(|(k, _)| *k)
            .collect();
        for key in gone {
            for fd in self.registered.remove(&key).unwrap_or_default() {
                // SAFETY: removes a descriptor number from our set; an error
                // (already gone) changes nothing.
                unsafe {
                    libc::epoll_ctl(epoll, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
                }
            }
        }
        for (key, fds) in transports {
            if self.registered.contains_key(key) {
                continue;
            }
            for &fd in fds {
                let mut event = libc::epoll_event {
                    events: libc::EPOLLIN as u32,
                    u64: *key,
                };
                // SAFETY: registers a live descriptor of the caller's with our epoll set.
                let rc = unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) };
                if rc < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            self.registered.insert(*key, fds.clone());
        }
        let count: usize = self.registered.values().map(Vec::len).sum();
        self.events
            .resize(count.max(1), libc::epoll_event { events: 0, u64: 0 });
        Ok(())
    }

    /// True when the epoll set stands in for polling every transport.
    pub fn is_active(&self) -> bool {
        self.epoll.is_some()
    }

    /// The keys of the transports with something to read (level-triggered:
    /// a transport left with datagrams is named again next time), without
    /// waiting. `Err` only when the poller is not active or epoll failed.
    pub fn ready(&mut self, keys: &mut Vec<u64>) -> io::Result<()> {
        keys.clear();
        let Some(epoll) = &self.epoll else {
            return Err(io::Error::other("the transport poller is not active"));
        };
        // SAFETY: `events` is a buffer of `len` entries the kernel fills.
        let n = unsafe {
            libc::epoll_wait(
                epoll.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        for event in &self.events[..n as usize] {
            let key = event.u64;
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    fn sockets(n: usize) -> Vec<UdpSocket> {
        (0..n)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect()
    }

    fn keyed(sockets: &[UdpSocket]) -> Vec<(u64, Vec<RawFd>)> {
        sockets
            .iter()
            .enumerate()
            .map(|(i, s)| (100 + i as u64, vec![s.as_raw_fd()]))
            .collect()
    }

    #[test]
    fn names_only_the_transports_with_datagrams_waiting_until_they_are_read() {
        let socks = sockets(7);
        let mut p = TransportPoller::new(5);
        p.rebuild(&keyed(&socks)).unwrap();
        assert!(p.is_active());
        let mut keys = Vec::new();
        p.ready(&mut keys).unwrap();
        assert!(keys.is_empty(), "{keys:?}");
        let out = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in [2, 5] {
            out.send_to(b"x", socks[i].local_addr().unwrap()).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(p.begin_cycle(|| unreachable!("not stale")), Ok(()));
        // Only those named are read.
        assert!(p.should_read(102) && p.should_read(105) && !p.should_read(100));
        p.ready(&mut keys).unwrap();
        keys.sort();
        assert_eq!(keys, vec![102, 105]);
        // Level-triggered: still there until read.
        p.ready(&mut keys).unwrap();
        assert_eq!(keys.len(), 2);
        let mut buf = [0u8; 8];
        socks[2].recv_from(&mut buf).unwrap();
        p.ready(&mut keys).unwrap();
        assert_eq!(keys, vec![105]);
    }

    #[test]
    fn stands_down_for_few_transports_or_one_without_a_descriptor() {
        const THRESHOLD: usize = 5;
        let socks = sockets(THRESHOLD);
        let mut p = TransportPoller::new(THRESHOLD);
        p.rebuild(&keyed(&socks)).unwrap();
        assert!(!p.is_active());
        assert!(p.ready(&mut Vec::new()).is_err());
        assert_eq!(p.begin_cycle(|| unreachable!("not stale")), Ok(()));
        assert!(
            p.should_read(100) && p.should_read(104),
            "every transport is read"
        );
        // A command came: the set is made anew before the next cycle.
        let socks = sockets(THRESHOLD + 1);
        let mut transports = keyed(&socks);
        p.mark_stale();
        assert_eq!(p.begin_cycle(|| transports.clone()), Ok(()));
        assert!(p.is_active());
        assert!(!p.should_read(100), "nothing waits");
        transports[0].1.clear();
        p.rebuild(&transports).unwrap();
        assert!(!p.is_active());
        // At zero, even one transport is waited on through the set.
        let mut p = TransportPoller::new(0);
        p.rebuild(&keyed(&sockets(1))).unwrap();
        assert!(p.is_active());
    }

    /// Transports added one by one and removed keep the set right: a new one
    /// is named when a datagram waits, a removed one never, and a removed
    /// socket's descriptor number taken by a new transport is the new one's.
    #[test]
    fn changes_only_what_changed_as_transports_come_and_go() {
        let mut socks = sockets(8);
        let mut p = TransportPoller::new(2);
        let mut transports = Vec::new();
        for (i, s) in socks.iter().enumerate() {
            transports.push((100 + i as u64, vec![s.as_raw_fd()]));
            p.rebuild(&transports).unwrap();
        }
        assert!(p.is_active());
        assert_eq!(p.registered.len(), 8);
        // Key 103 goes, its socket closed; a new socket (key 200) likely takes its number.
        let old_fd = socks[3].as_raw_fd();
        drop(socks.remove(3));
        transports.retain(|(k, _)| *k != 103);
        let fresh = UdpSocket::bind("127.0.0.1:0").unwrap();
        transports.push((200, vec![fresh.as_raw_fd()]));
        p.rebuild(&transports).unwrap();
        assert_eq!(p.registered.len(), 8);
        let out = UdpSocket::bind("127.0.0.1:0").unwrap();
        out.send_to(b"x", fresh.local_addr().unwrap()).unwrap();
        out.send_to(b"x", socks[6].local_addr().unwrap()).unwrap(); // key 107
        let mut keys = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while keys.len() < 2 && std::time::Instant::now() < deadline {
            p.ready(&mut keys).unwrap();
        }
        keys.sort();
        assert_eq!(
            keys,
            vec![107, 200],
            "descriptor {old_fd} reused: {}",
            fresh.as_raw_fd() == old_fd
        );
    }
}
