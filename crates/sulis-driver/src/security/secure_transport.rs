//! A secured channel's socket: every datagram sealed on the way out and
//! opened on the way in (AES-256-GCM from `ring`), whatever frame it holds.
//!
//! It wraps any [`Transport`], so the sender and receiver agents see the
//! Aeron datagrams they always did. The envelope is
//! [`sulis_protocol::frame::sealed`]'s.
//!
//! Sending: each socket draws a random salt when it opens and derives its own
//! key from the keyring's `send` key and that salt ([`Keys::derive`]); its
//! counter goes up by one a datagram and is the nonce, so no two datagrams
//! under one key share a nonce.
//!
//! Receiving, a datagram is taken only if, in this order: it is sealed; its
//! send time is within the clock window of this host's clock and not before
//! this socket opened; its key id is in the keyring; its counter is new to the
//! replay window of its sender (key id and salt); its tag is right. Then its
//! counter is marked. Anything else is dropped, counted in the system counters
//! (`Transport security: ...`) and noted, once a second for each source and
//! reason, in the driver's error log. A sender is forgotten after twice the
//! clock window and a second of silence, by when all it ever sent is too old.

use super::keyring::{Keyring, Keys};
use super::replay_window::{ReplayWindow, Verdict};
use crate::agent::{ErrorReporter, NanoClock};
use crate::media::transport::Transport;
use crate::media::udp_transport::RecvBatch;
use crate::system_counters::SystemCounter;
use ring::aead::{Aad, LessSafeKey, Nonce};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use sulis_protocol::frame::sealed::{
    SealedError, SealedHeader, SEALED_HEADER_LENGTH, SEALED_OVERHEAD, SEALED_TAG_LENGTH,
    SENDER_SALT_LENGTH,
};

/// What a secured channel protects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecurityMode {
    /// Every datagram authenticated; payloads in the clear.
    Auth,
    /// Every datagram authenticated and encrypted.
    Encrypt,
}

impl SecurityMode {
    /// Parses `auth` or `encrypt` (`off`: `None`).
    pub fn parse(s: &str) -> Result<Option<SecurityMode>, String> {
        match s {
            "off" => Ok(None),
            "auth" => Ok(Some(SecurityMode::Auth)),
            "encrypt" => Ok(Some(SecurityMode::Encrypt)),
            _ => Err(format!(
                "'{s}' is not a security mode: use off, auth or encrypt"
            )),
        }
    }

    /// The name [`SecurityMode::parse`] takes.
    pub fn name(mode: Option<SecurityMode>) -> &'static str {
        match mode {
            None => "off",
            Some(SecurityMode::Auth) => "auth",
            Some(SecurityMode::Encrypt) => "encrypt",
        }
    }
}

/// Most senders a socket keeps a replay window for.
pub const MAX_SENDERS: usize = 4096;

/// Most keys a socket derives in one second for senders it does not know yet.
/// Each costs an HKDF and an AES key schedule, a few microseconds: without a
/// cap, a stranger who sends datagrams under a key id it saw on the wire, each
/// with a fresh salt, buys that much of the receiver's time with each one.
/// Past the cap, datagrams from unknown senders are dropped unchecked until
/// the next second; known senders are not affected, and a genuine new
/// sender's later datagrams (its setups and heartbeats repeat) get in then.
pub const MAX_NEW_SENDERS_PER_S: u32 = 1024;

/// Why a datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// An Aeron frame without the envelope.
    Unsealed,
    /// Too short, a wrong length or version.
    Malformed,
    /// Sealed under a key id this keyring does not hold.
    UnknownKey(u32),
    /// The tag did not match: forged, altered, or another key under the same id.
    Forged(u32),
    /// Authenticated only, on a channel that encrypts.
    NotEncrypted,
    /// Its counter was taken before (or fell below the window).
    Replayed,
    /// Its send time is outside the clock window, or before this socket opened.
    Stale,
    /// More senders at once than [`MAX_SENDERS`].
    TooManySenders,
    /// From a sender not known yet, past [`MAX_NEW_SENDERS_PER_S`] this second.
    NewSendersThrottled,
}

impl DropReason {
    fn counter(self) -> SystemCounter {
        match self {
            DropReason::Unsealed | DropReason::Malformed | DropReason::NotEncrypted => {
                SystemCounter::SecurityUnsealedDropped
            }
            DropReason::UnknownKey(_)
            | DropReason::Forged(_)
            | DropReason::TooManySenders
            | DropReason::NewSendersThrottled => SystemCounter::SecurityAuthFailures,
            DropReason::Replayed | DropReason::Stale => SystemCounter::SecurityReplaysDropped,
        }
    }

    fn describe(self) -> String {
        match self {
            DropReason::Unsealed => "unsealed frames (is the sender's channel secured?)".into(),
            DropReason::Malformed => "malformed sealed frames".into(),
            DropReason::UnknownKey(id) => {
                format!("frames sealed under key id {id}, not in the keyring")
            }
            DropReason::Forged(id) => {
                format!("frames failing authentication under key id {id} (forged, altered, or a different key with that id)")
            }
            DropReason::NotEncrypted => {
                "frames not encrypted on a channel with security=encrypt".into()
            }
            DropReason::Replayed => "replayed frames".into(),
            DropReason::Stale => {
                "frames outside the clock window (replayed, or the hosts' clocks differ)".into()
            }
            DropReason::TooManySenders => {
                format!("frames from more than {MAX_SENDERS} senders at once")
            }
            DropReason::NewSendersThrottled => format!(
                "frames from new senders past {MAX_NEW_SENDERS_PER_S} in one second, dropped unchecked (a flood of forged senders?)"
            ),
        }
    }
}

/// One sender as a receiver knows it.
struct PeerSender {
    key: LessSafeKey,
    window: ReplayWindow,
    last_seen_s: u64,
}

/// What was dropped this second, per source and reason, before it is noted.
#[derive(Default)]
struct DropLog {
    pending: HashMap<(Option<SocketAddr>, DropReason), u64>,
    /// Drops not itemised (too many sources in one second).
    others: u64,
    next_flush_ms: i64,
}

const DROP_LOG_SOURCES: usize = 64;

/// A transport whose datagrams are sealed and opened.
pub struct SecureTransport<T: Transport> {
    inner: T,
    mode: SecurityMode,
    channel: String,
    keyring: Arc<Keyring>,
    keys: Arc<Keys>,
    generation: u64,
    clock: NanoClock,
    errors: ErrorReporter,
    clock_window_s: u64,
    opened_s: u64,
    // Sending.
    salt: [u8; SENDER_SALT_LENGTH],
    counter: u64,
    seal_key: Option<(u32, LessSafeKey)>,
    sealed: Vec<u8>,
    sealed_lens: Vec<usize>,
    // Receiving.
    senders: HashMap<(u32, [u8; SENDER_SALT_LENGTH]), PeerSender>,
    /// The second of `derived`, and the keys derived for unknown senders in it.
    derive_second: u64,
    derived: u32,
    drops: DropLog,
}

impl<T: Transport> std::fmt::Debug for SecureTransport<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureTransport")
            .field("inner", &self.inner)
            .field("mode", &self.mode)
            .field("channel", &self.channel)
            .field("senders", &self.senders.len())
            .finish()
    }
}

/// How a secured socket is set up.
#[derive(Clone)]
pub struct SecurityContext {
    /// The driver's keyring.
    pub keyring: Arc<Keyring>,
    /// The driver's clock (wall-clock seconds for send times).
    pub clock: NanoClock,
    /// Where drops are counted and noted.
    pub errors: ErrorReporter,
    /// How far a send time may be from this host's clock, in seconds.
    pub clock_window_s: u64,
}

impl<T: Transport> SecureTransport<T> {
    /// Wraps `inner` for `channel` (named in the notes of what was dropped).
    ///
    /// # Errors
    /// No random salt could be drawn from the system.
    pub fn new(
        inner: T,
        mode: SecurityMode,
        channel: &str,
        ctx: &SecurityContext,
    ) -> Result<Self, String> {
        let mut salt = [0u8; SENDER_SALT_LENGTH];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut salt)
            .map_err(|_| "transport security: the system gave no random bytes".to_owned())?;
        let keys = ctx.keyring.keys();
        Ok(SecureTransport {
            inner,
            mode,
            channel: channel.to_owned(),
            generation: ctx.keyring.generation(),
            keyring: ctx.keyring.clone(),
            keys,
            opened_s: (ctx.clock.epoch_ms() / 1000).max(0) as u64,
            clock: ctx.clock,
            errors: ctx.errors.clone(),
            clock_window_s: ctx.clock_window_s.max(1),
            salt,
            counter: 0,
            seal_key: None,
            sealed: Vec::new(),
            sealed_lens: Vec::new(),
            senders: HashMap::new(),
            derive_second: 0,
            derived: 0,
            drops: DropLog::default(),
        })
    }

    /// Takes the keyring's keys if they changed.
    fn refresh_keys(&mut self) {
        let generation = self.keyring.generation();
        if generation != self.generation {
            self.generation = generation;
            self.keys = self.keyring.keys();
            self.seal_key = None;
            // Senders under a key that is gone are refused from now on.
            let keys = &self.keys;
            self.senders.retain(|(id, _), _| keys.contains(*id));
        }
    }

    fn now_s(&self) -> u64 {
        (self.clock.epoch_ms() / 1000).max(0) as u64
    }

    /// Seals `datagram` onto the end of `self.sealed`.
    fn seal(&mut self, datagram: &[u8], now_s: u64) {
        let send_id = self.keys.send_id();
        if self.seal_key.as_ref().map(|(id, _)| *id) != Some(send_id) {
            let key = self
                .keys
                .derive(send_id, &self.salt)
                .expect("the send key is in the ring");
            self.seal_key = Some((send_id, key));
        }
        let (key_id, key) = self.seal_key.as_ref().expect("set above");
        self.counter += 1;
        let total = datagram.len() + SEALED_OVERHEAD;
        let header = SealedHeader {
            frame_length: total as u32,
            encrypted: self.mode == SecurityMode::Encrypt,
            key_id: *key_id,
            salt: self.salt,
            counter: self.counter,
            send_time_s: now_s as u32,
        };
        let start = self.sealed.len();
        // Header and tag are written in place; the body is copied once (no zeroing first).
        self.sealed.extend_from_slice(&[0; SEALED_HEADER_LENGTH]);
        self.sealed.extend_from_slice(datagram);
        self.sealed.extend_from_slice(&[0; SEALED_TAG_LENGTH]);
        let out = &mut self.sealed[start..];
        header.encode(out);
        let nonce = Nonce::assume_unique_for_key(header.nonce());
        let (covered, tag_slot) = out.split_at_mut(total - SEALED_TAG_LENGTH);
        let tag = if header.encrypted {
            let (head, body) = covered.split_at_mut(SEALED_HEADER_LENGTH);
            key.seal_in_place_separate_tag(nonce, Aad::from(&*head), body)
        } else {
            key.seal_in_place_separate_tag(nonce, Aad::from(&*covered), &mut [])
        }
        .expect("a datagram is far below AES-GCM's limit");
        tag_slot.copy_from_slice(tag.as_ref());
        self.sealed_lens.push(total);
    }

    /// Opens the sealed datagram in `buf`: the range of the Aeron datagram
    /// within it, or why it is dropped.
    fn open(&mut self, buf: &mut [u8], now_s: u64) -> Result<std::ops::Range<usize>, DropReason> {
        let header = SealedHeader::decode(buf).map_err(|e| match e {
            SealedError::NotSealed(_) => DropReason::Unsealed,
            _ => DropReason::Malformed,
        })?;
        let sent = header.send_time_s as u64;
        if sent + self.clock_window_s < now_s
            || sent > now_s + self.clock_window_s
            || sent < self.opened_s
        {
            return Err(DropReason::Stale);
        }
        if self.mode == SecurityMode::Encrypt && !header.encrypted {
            return Err(DropReason::NotEncrypted);
        }
        let id = (header.key_id, header.salt);
        let known = match self.senders.get(&id) {
            Some(s) => match s.window.check(header.counter) {
                Verdict::New => true,
                Verdict::Seen | Verdict::TooOld => return Err(DropReason::Replayed),
            },
            None => {
                if !self.keys.contains(header.key_id) {
                    return Err(DropReason::UnknownKey(header.key_id));
                }
                false
            }
        };
        let derived = if known {
            None
        } else {
            if now_s != self.derive_second {
                self.derive_second = now_s;
                self.derived = 0;
            }
            if self.derived >= MAX_NEW_SENDERS_PER_S {
                return Err(DropReason::NewSendersThrottled);
            }
            self.derived += 1;
            Some(
                self.keys
                    .derive(header.key_id, &header.salt)
                    .ok_or(DropReason::UnknownKey(header.key_id))?,
            )
        };
        let key = match &derived {
            Some(k) => k,
            None => &self.senders[&id].key,
        };
        let nonce = Nonce::assume_unique_for_key(header.nonce());
        let len = buf.len();
        let opened = if header.encrypted {
            let (head, rest) = buf.split_at_mut(SEALED_HEADER_LENGTH);
            key.open_in_place(nonce, Aad::from(&*head), rest).is_ok()
        } else {
            let (covered, tag) = buf.split_at_mut(len - SEALED_TAG_LENGTH);
            key.open_in_place(nonce, Aad::from(&*covered), tag).is_ok()
        };
        if !opened {
            return Err(DropReason::Forged(header.key_id));
        }
        if let Some(key) = derived {
            if self.senders.len() >= MAX_SENDERS {
                let forget_before = now_s.saturating_sub(2 * self.clock_window_s + 1);
                self.senders.retain(|_, s| s.last_seen_s >= forget_before);
                if self.senders.len() >= MAX_SENDERS {
                    return Err(DropReason::TooManySenders);
                }
            }
            self.senders.insert(
                id,
                PeerSender {
                    key,
                    window: ReplayWindow::new(header.counter),
                    last_seen_s: now_s,
                },
            );
        } else {
            let s = self.senders.get_mut(&id).expect("known");
            s.window.mark(header.counter);
            s.last_seen_s = now_s;
        }
        Ok(SEALED_HEADER_LENGTH..len - SEALED_TAG_LENGTH)
    }

    fn dropped(&mut self, reason: DropReason, from: Option<SocketAddr>) {
        self.errors
            .system()
            .increment(SystemCounter::SecurityFramesDropped);
        self.errors.system().increment(reason.counter());
        let log = &mut self.drops;
        if let Some(n) = log.pending.get_mut(&(from, reason)) {
            *n += 1;
        } else if log.pending.len() < DROP_LOG_SOURCES {
            log.pending.insert((from, reason), 1);
        } else {
            log.others += 1;
        }
    }

    /// Notes what was dropped since the last note, at most once a second
    /// (and whatever is left when the socket closes).
    fn note_drops(&mut self) {
        if self.drops.pending.is_empty() && self.drops.others == 0 {
            return;
        }
        let now_ms = self.clock.epoch_ms();
        if now_ms < self.drops.next_flush_ms {
            return;
        }
        self.flush_drops(now_ms);
    }

    fn flush_drops(&mut self, now_ms: i64) {
        self.drops.next_flush_ms = now_ms + 1000;
        for ((from, reason), _) in self.drops.pending.drain() {
            let from = from.map_or_else(|| "an unknown source".to_owned(), |a| a.to_string());
            self.errors.record(&format!(
                "transport security dropped {} from {from} on {}",
                reason.describe(),
                self.channel
            ));
        }
        if self.drops.others > 0 {
            self.drops.others = 0;
            self.errors.record(&format!(
                "transport security dropped frames from more than {DROP_LOG_SOURCES} sources in a second on {}",
                self.channel
            ));
        }
    }

    /// The senders this socket holds a replay window for.
    pub fn sender_count(&self) -> usize {
        self.senders.len()
    }
}

impl<T: Transport> Drop for SecureTransport<T> {
    fn drop(&mut self) {
        // What was dropped in the socket's last second is noted too.
        let now_ms = self.clock.epoch_ms();
        self.flush_drops(now_ms);
    }
}

impl<T: Transport> Transport for SecureTransport<T> {
    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        let n = self.inner.recv_batch(batch)?;
        if n == 0 {
            self.note_drops();
            return Ok(0);
        }
        self.refresh_keys();
        let now_s = self.now_s();
        let kept = batch.retain_map(|buf, from| match self.open(buf, now_s) {
            Ok(range) => Some(range),
            Err(reason) => {
                self.dropped(reason, from);
                None
            }
        });
        self.note_drops();
        Ok(kept)
    }

    fn send_to(&mut self, datagram: &[u8], to: SocketAddr) -> io::Result<usize> {
        self.refresh_keys();
        let now_s = self.now_s();
        self.sealed.clear();
        self.sealed_lens.clear();
        self.seal(datagram, now_s);
        match self.inner.send_to(&self.sealed, to)? {
            0 => Ok(0),
            _ => Ok(datagram.len()),
        }
    }

    fn send_batch(&mut self, datagrams: &[&[u8]], to: SocketAddr) -> io::Result<usize> {
        self.refresh_keys();
        let now_s = self.now_s();
        self.sealed.clear();
        self.sealed_lens.clear();
        for d in datagrams {
            self.seal(d, now_s);
        }
        let mut slices: Vec<&[u8]> = Vec::with_capacity(datagrams.len());
        let mut at = 0;
        for &len in &self.sealed_lens {
            slices.push(&self.sealed[at..at + len]);
            at += len;
        }
        self.inner.send_batch(&slices, to)
    }

    fn set_gso(&mut self, on: bool) {
        self.inner.set_gso(on)
    }

    fn enable_gro(&mut self) -> bool {
        // Coalesced buffers are opened a datagram at a time (RecvBatch::retain_map).
        self.inner.enable_gro()
    }

    fn recv_buffer_size(&self) -> io::Result<usize> {
        self.inner.recv_buffer_size()
    }

    fn poll_fds(&self, fds: &mut Vec<std::os::fd::RawFd>) {
        self.inner.poll_fds(fds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ManualClock;
    use crate::media::memory::{MemoryNetwork, MemoryTransport};
    use crate::system_counters::SystemCounters;
    use sulis_concurrent::counters::{CountersManager, COUNTER_LENGTH, METADATA_LENGTH};
    use sulis_concurrent::error_log::{error_log_text, SharedErrorLog};
    use sulis_concurrent::AtomicBuffer;
    use sulis_protocol::frame::{HDR_TYPE_DATA, HDR_TYPE_SM};

    const K1: &str = "6f1ed002ab5595859014ebf0951522d9bd16f3d25d1a1f5a3bd43a2f0bd8a3c1";
    const K2: &str = "0c8a8e2dfed0b0d29c6a2b5bd2ae0ff0c2f1c4d6a2fda5d8e5c0e3a8b7a9f101";

    fn buffer(len: usize) -> AtomicBuffer {
        let words: &'static mut [u64] = Box::leak(vec![0u64; len / 8].into_boxed_slice());
        // SAFETY: the leaked words live for the rest of the test process.
        unsafe { AtomicBuffer::new(words.as_mut_ptr() as *mut u8, len) }
    }

    struct Host {
        ctx: SecurityContext,
        log: AtomicBuffer,
    }

    impl Host {
        fn counter(&self, c: SystemCounter) -> i64 {
            self.ctx.errors.system().get(c).get()
        }

        fn log(&self) -> String {
            error_log_text(self.log).1
        }
    }

    /// A host with its own counters and error log, on `clock`, holding `ring`.
    fn host(clock: &NanoClock, ring: &str) -> Host {
        let mut counters =
            CountersManager::new(buffer(64 * METADATA_LENGTH), buffer(64 * COUNTER_LENGTH), 0);
        let system = SystemCounters::allocate(&mut counters, 0).unwrap();
        let log = buffer(64 * 1024);
        let errors = ErrorReporter::new(SharedErrorLog::new(log), system, *clock);
        let keyring = Keyring::from_keys(Keys::parse(ring, "test").unwrap());
        Host {
            ctx: SecurityContext {
                keyring,
                clock: *clock,
                errors,
                clock_window_s: 10,
            },
            log,
        }
    }

    fn frame(frame_type: u16, len: usize, fill: u8) -> Vec<u8> {
        let mut d = vec![fill; len];
        d[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        d[4] = 0;
        d[6..8].copy_from_slice(&frame_type.to_le_bytes());
        d
    }

    struct Pair {
        net: MemoryNetwork,
        nano: NanoClock,
        clock: ManualClock,
        tx: SecureTransport<MemoryTransport>,
        rx: SecureTransport<MemoryTransport>,
        rx_host: Host,
        rx_addr: SocketAddr,
    }

    fn pair(mode: SecurityMode, tx_ring: &str, rx_ring: &str) -> Pair {
        let (nano, clock) = NanoClock::manual();
        let net = MemoryNetwork::new();
        let rx_addr: SocketAddr = "10.0.0.2:40000".parse().unwrap();
        let (tx_host, rx_host) = (host(&nano, tx_ring), host(&nano, rx_ring));
        let tx = net.bind("10.0.0.1:40001".parse().unwrap()).unwrap();
        let rx = net.bind(rx_addr).unwrap();
        Pair {
            tx: SecureTransport::new(tx, mode, "aeron:udp?endpoint=10.0.0.2:40000", &tx_host.ctx)
                .unwrap(),
            rx: SecureTransport::new(rx, mode, "aeron:udp?endpoint=10.0.0.2:40000", &rx_host.ctx)
                .unwrap(),
            net,
            nano,
            clock,
            rx_host,
            rx_addr,
        }
    }

    /// Everything `rx` takes now: (datagram, source).
    fn receive(rx: &mut dyn Transport) -> Vec<Vec<u8>> {
        let mut batch = RecvBatch::new(64, 66_000);
        let n = rx.recv_batch(&mut batch).unwrap();
        (0..n).map(|i| batch.get(i).0.to_vec()).collect()
    }

    /// What goes over the wire: the raw datagrams a plain socket at `at` receives.
    fn tap(net: &MemoryNetwork, at: &str) -> MemoryTransport {
        net.bind(at.parse().unwrap()).unwrap()
    }

    /// An encrypting pair under one key, a genuine 64-byte data frame (`fill`), and that frame as the pair's
    /// sender sealed it, captured on the wire.
    fn encrypting_pair_and_capture(fill: u8) -> (Pair, Vec<u8>, Vec<u8>) {
        let mut p = pair(
            SecurityMode::Encrypt,
            &format!("1 {K1}"),
            &format!("1 {K1}"),
        );
        let mut wire = tap(&p.net, "10.0.0.3:40000");
        let data = frame(HDR_TYPE_DATA, 64, fill);
        p.tx.send_to(&data, "10.0.0.3:40000".parse().unwrap())
            .unwrap();
        let captured = receive(&mut wire).remove(0);
        (p, data, captured)
    }

    #[test]
    fn should_deliver_every_kind_of_frame_sealed_in_both_modes_and_hide_payloads_when_encrypting() {
        for mode in [SecurityMode::Auth, SecurityMode::Encrypt] {
            let mut p = pair(mode, &format!("1 {K1}"), &format!("1 {K1}"));
            let sent = vec![
                frame(HDR_TYPE_DATA, 1408, 0xAB),
                frame(HDR_TYPE_SM, 36, 0xCD),
                frame(HDR_TYPE_DATA, 32, 0),
                frame(HDR_TYPE_DATA, 65_440, 0x11),
            ];
            let refs: Vec<&[u8]> = sent.iter().map(|d| d.as_slice()).collect();
            assert_eq!(p.tx.send_batch(&refs[..2], p.rx_addr).unwrap(), 2);
            assert_eq!(p.tx.send_to(refs[2], p.rx_addr).unwrap(), 32);
            assert_eq!(p.tx.send_to(refs[3], p.rx_addr).unwrap(), 65_440);
            assert_eq!(receive(&mut p.rx), sent, "{mode:?}");
            assert_eq!(p.rx_host.counter(SystemCounter::SecurityFramesDropped), 0);

            // On the wire: 48 bytes longer, and the payload visible only when authenticating.
            let mut wire = tap(&p.net, "10.0.0.3:40000");
            p.tx.send_to(&sent[0], "10.0.0.3:40000".parse().unwrap())
                .unwrap();
            let raw = receive(&mut wire).remove(0);
            assert_eq!(raw.len(), 1408 + SEALED_OVERHEAD);
            let in_clear = raw.windows(64).any(|w| w.iter().all(|&b| b == 0xAB));
            assert_eq!(in_clear, mode == SecurityMode::Auth, "{mode:?}");
        }
    }

    #[test]
    fn should_drop_and_count_unsealed_altered_replayed_and_foreign_key_frames() {
        let mut p = pair(
            SecurityMode::Encrypt,
            &format!("1 {K1}"),
            &format!("1 {K1}"),
        );
        let attacker_addr: SocketAddr = "10.0.0.66:9999".parse().unwrap();
        let mut attacker = tap(&p.net, "10.0.0.66:9999");

        // A genuine datagram, captured on its way.
        let mut wire = tap(&p.net, "10.0.0.3:40000");
        let data = frame(HDR_TYPE_DATA, 96, 7);
        p.tx.send_to(&data, "10.0.0.3:40000".parse().unwrap())
            .unwrap();
        let captured = receive(&mut wire).remove(0);

        // Plain Aeron frames, as from a stranger guessing session ids.
        for session in 0..5i32 {
            let mut f = frame(HDR_TYPE_DATA, 64, 0);
            f[12..16].copy_from_slice(&session.to_le_bytes());
            attacker.send_to(&f, p.rx_addr).unwrap();
        }
        // The captured one, first delivered, then replayed twice.
        attacker.send_to(&captured, p.rx_addr).unwrap();
        attacker.send_to(&captured, p.rx_addr).unwrap();
        attacker.send_to(&captured, p.rx_addr).unwrap();
        // One byte of it changed: body, then header (key id kept).
        let mut altered = captured.clone();
        altered[SEALED_HEADER_LENGTH + 40] ^= 1;
        altered[21] ^= 0x10; // the counter: a "new" datagram
        attacker.send_to(&altered, p.rx_addr).unwrap();
        // Another sender's salt on it: a sender never seen, whose tag fails.
        let mut forged_salt = captured.clone();
        forged_salt[12] ^= 0x01;
        attacker.send_to(&forged_salt, p.rx_addr).unwrap();

        let got = receive(&mut p.rx);
        assert_eq!(got, vec![data.clone()], "only the genuine datagram, once");
        let h = &p.rx_host;
        assert_eq!(h.counter(SystemCounter::SecurityUnsealedDropped), 5);
        assert_eq!(h.counter(SystemCounter::SecurityReplaysDropped), 2);
        assert_eq!(h.counter(SystemCounter::SecurityAuthFailures), 2);
        assert_eq!(h.counter(SystemCounter::SecurityFramesDropped), 9);
        let log = h.log();
        assert!(log.contains(&format!("unsealed frames (is the sender's channel secured?) from {attacker_addr} on aeron:udp?endpoint=10.0.0.2:40000")), "{log}");
        assert!(
            log.contains(&format!("replayed frames from {attacker_addr}")),
            "{log}"
        );
        assert!(
            log.contains("failing authentication under key id 1 (forged"),
            "{log}"
        );

        // A sender with another key under the same id, and one under an unknown id.
        let mut stranger = pair(
            SecurityMode::Encrypt,
            &format!("1 {K2}\n7 {K1}\nsend 1"),
            &format!("1 {K1}"),
        );
        stranger.tx.send_to(&data, stranger.rx_addr).unwrap();
        let mut other = pair(
            SecurityMode::Encrypt,
            &format!("7 {K1}"),
            &format!("1 {K1}"),
        );
        other.tx.send_to(&data, other.rx_addr).unwrap();
        assert!(receive(&mut stranger.rx).is_empty());
        assert!(receive(&mut other.rx).is_empty());
        assert_eq!(
            stranger
                .rx_host
                .counter(SystemCounter::SecurityAuthFailures),
            1
        );
        assert!(
            other
                .rx_host
                .log()
                .contains("frames sealed under key id 7, not in the keyring"),
            "{}",
            other.rx_host.log()
        );
    }

    #[test]
    fn should_derive_keys_for_at_most_so_many_new_senders_a_second_and_let_a_genuine_one_in_after()
    {
        let (mut p, data, captured) = encrypting_pair_and_capture(5);
        // A stranger sends under key id 1 with a new salt each time: every one is a sender not seen.
        let mut attacker = tap(&p.net, "10.0.0.66:9999");
        let flood = MAX_NEW_SENDERS_PER_S as usize + 500;
        // Sends `flood` such datagrams, salts from `first`, taking them in batches; what the receiver delivered.
        let mut flood_from = |rx: &mut SecureTransport<MemoryTransport>, first: u64| {
            let mut delivered = 0;
            for i in 0..flood {
                let mut forged = captured.clone();
                forged[12..20].copy_from_slice(&(first + i as u64).to_le_bytes());
                attacker.send_to(&forged, p.rx_addr).unwrap();
                if i % 60 == 59 || i == flood - 1 {
                    delivered += receive(rx).len();
                }
            }
            delivered
        };
        assert_eq!(flood_from(&mut p.rx, 1), 0);
        // Each was refused, all as authentication failures; only the first MAX were derived (and failed).
        let h = &p.rx_host;
        assert_eq!(h.counter(SystemCounter::SecurityAuthFailures), flood as i64);
        assert_eq!(p.rx.derived, MAX_NEW_SENDERS_PER_S);
        // The genuine sender, new to the receiver, waits for the next second.
        p.tx.send_to(&data, p.rx_addr).unwrap();
        assert!(receive(&mut p.rx).is_empty());
        assert_eq!(p.rx.sender_count(), 0);
        p.clock.advance_ns(1_000_000_000);
        p.tx.send_to(&data, p.rx_addr).unwrap();
        assert_eq!(receive(&mut p.rx), vec![data.clone()]);
        assert_eq!(p.rx.sender_count(), 1);
        // Known from now on: a second flood costs it nothing.
        assert_eq!(flood_from(&mut p.rx, 1_000_000), 0);
        p.tx.send_to(&data, p.rx_addr).unwrap();
        assert_eq!(receive(&mut p.rx), vec![data]);
        assert!(
            p.rx_host
                .log()
                .contains("new senders past 1024 in one second"),
            "{}",
            p.rx_host.log()
        );
    }

    #[test]
    fn should_drop_what_is_outside_the_clock_window_and_only_authenticated_frames_when_encrypting()
    {
        let (mut p, data, captured) = encrypting_pair_and_capture(3);
        // Held back past the window: stale even though never delivered.
        p.clock.advance_ns(11_000_000_000);
        p.net
            .bind("10.0.0.9:1".parse().unwrap())
            .unwrap()
            .send_to(&captured, p.rx_addr)
            .unwrap();
        assert!(receive(&mut p.rx).is_empty());
        assert_eq!(p.rx_host.counter(SystemCounter::SecurityReplaysDropped), 1);
        // Fresh ones still go.
        p.tx.send_to(&data, p.rx_addr).unwrap();
        assert_eq!(receive(&mut p.rx), vec![data.clone()]);

        // An authenticate-only sender is refused by an encrypting receiver.
        let auth_host = host(&p.nano, &format!("1 {K1}"));
        let mut auth = SecureTransport::new(
            p.net.bind("10.0.0.4:1".parse().unwrap()).unwrap(),
            SecurityMode::Auth,
            "c",
            &auth_host.ctx,
        )
        .unwrap();
        // A second on: the drop log notes at most once a second.
        p.clock.advance_ns(1_000_000_000);
        auth.send_to(&data, p.rx_addr).unwrap();
        let _ = receive(&mut p.rx);
        assert!(
            p.rx_host.log().contains("not encrypted"),
            "{}",
            p.rx_host.log()
        );
    }

    #[test]
    fn should_take_a_rotated_key_without_a_restart_and_refuse_a_removed_one() {
        let both = format!("1 {K1}\n2 {K2}\nsend 1");
        let mut p = pair(SecurityMode::Auth, &format!("1 {K1}"), &both);
        let data = frame(HDR_TYPE_DATA, 64, 5);
        p.tx.send_to(&data, p.rx_addr).unwrap();
        assert_eq!(receive(&mut p.rx).len(), 1);
        // The sender moves to key 2 (the receiver holds both).
        let tx_ring = p.tx.keyring.clone();
        tx_ring.replace(Keys::parse(&format!("2 {K2}"), "t").unwrap());
        p.tx.send_to(&data, p.rx_addr).unwrap();
        assert_eq!(receive(&mut p.rx).len(), 1);
        assert_eq!(p.rx.sender_count(), 2);
        // The receiver drops key 2: its sender is forgotten and refused.
        p.rx.keyring
            .replace(Keys::parse(&format!("1 {K1}"), "t").unwrap());
        p.tx.send_to(&data, p.rx_addr).unwrap();
        assert!(receive(&mut p.rx).is_empty());
        assert_eq!(p.rx.sender_count(), 1);
        assert!(p.rx_host.log().contains("key id 2, not in the keyring"));
    }

    #[test]
    fn should_report_partial_batches_as_the_transport_beneath_does() {
        let mut p = pair(
            SecurityMode::Encrypt,
            &format!("1 {K1}"),
            &format!("1 {K1}"),
        );
        p.net.set_capacity(p.rx_addr, 2);
        let data: Vec<Vec<u8>> = (0..5).map(|i| frame(HDR_TYPE_DATA, 64, i)).collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        assert_eq!(p.tx.send_batch(&refs, p.rx_addr).unwrap(), 2);
        assert_eq!(receive(&mut p.rx), data[..2].to_vec());
    }

    #[test]
    fn should_open_each_datagram_of_a_coalesced_buffer_and_keep_them_coalesced() {
        let mut p = pair(
            SecurityMode::Encrypt,
            &format!("1 {K1}"),
            &format!("1 {K1}"),
        );
        let mut wire = tap(&p.net, "10.0.0.3:40000");
        let to: SocketAddr = "10.0.0.3:40000".parse().unwrap();
        // Four datagrams as GRO hands them: three of 200 bytes and a shorter last one.
        let sent: Vec<Vec<u8>> = [200, 200, 200, 120]
            .iter()
            .enumerate()
            .map(|(i, &len)| frame(HDR_TYPE_DATA, len, i as u8))
            .collect();
        let mut sealed = Vec::new();
        for d in &sent {
            p.tx.send_to(d, to).unwrap();
            sealed.extend(receive(&mut wire).remove(0));
        }
        // The second one altered: dropped, and the others close up.
        sealed[248 + SEALED_HEADER_LENGTH + 10] ^= 1;
        let mut batch = RecvBatch::new(4, 4096);
        batch.push(&sealed, "10.0.0.1:40001".parse().unwrap());
        batch.set_segment_size(0, 248);
        let from = batch.get(0).1;
        let kept = batch.retain_map(|buf, _| p.rx.open(buf, p.rx.now_s()).ok());
        assert_eq!((kept, batch.segment_size(0)), (1, 200));
        let (opened, source) = batch.get(0);
        assert_eq!(source, from);
        assert_eq!(opened, [&sent[0][..], &sent[2][..], &sent[3][..]].concat());
    }
}
