//! Test helpers: a tiny seeded PRNG and random valid frames.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::resolution::{ResolutionEntry, MAX_NAME_LENGTH};
use super::{ErrorFrame, NakFrame, RspSetupFrame, RttmFrame, SetupFrame, StatusMessageFrame};

/// A named corruption of an encoded frame: the field the decoder must blame
/// and the edit that breaks it.
pub(crate) type Corruption = (&'static str, Box<dyn Fn(&mut [u8])>);
/// As [`Corruption`], for edits that may change the length.
pub(crate) type VecCorruption = (&'static str, Box<dyn Fn(&mut Vec<u8>)>);

/// xorshift64* (Marsaglia / Vigna): deterministic, good enough for tests.
pub(crate) struct XorShift(u64);

impl XorShift {
    pub(crate) fn new(seed: u64) -> Self {
        // Any non-zero state works; mix the seed so small seeds differ at once.
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `[0, n)`; `n` > 0.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub(crate) fn next_u8(&mut self) -> u8 {
        self.next_u64() as u8
    }

    pub(crate) fn next_i32(&mut self) -> i32 {
        self.next_u64() as i32
    }

    pub(crate) fn next_i64(&mut self) -> i64 {
        self.next_u64() as i64
    }

    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next_u8();
        }
    }

    /// Printable ASCII of length in `[0, max_len]`.
    pub(crate) fn ascii(&mut self, max_len: usize) -> String {
        let n = self.below(max_len as u64 + 1) as usize;
        (0..n)
            .map(|_| (b' ' + self.below(95) as u8) as char)
            .collect()
    }
}

pub(crate) fn random_setup(rng: &mut XorShift) -> SetupFrame {
    let term_length = 1i32 << (16 + rng.below(15));
    SetupFrame {
        flags: rng.next_u8(),
        term_offset: (rng.below(term_length as u64 / 32) * 32) as i32,
        session_id: rng.next_i32(),
        stream_id: rng.next_i32(),
        initial_term_id: rng.next_i32(),
        active_term_id: rng.next_i32(),
        term_length,
        mtu: (2 + rng.below(2046)) as i32 * 32,
        ttl: rng.below(256) as i32,
    }
}

pub(crate) fn random_status(rng: &mut XorShift) -> StatusMessageFrame {
    StatusMessageFrame {
        flags: rng.next_u8(),
        session_id: rng.next_i32(),
        stream_id: rng.next_i32(),
        consumption_term_id: rng.next_i32(),
        consumption_term_offset: (rng.below(1 << 25) * 32) as i32,
        receiver_window: rng.below(1 << 31) as i32,
        receiver_id: rng.next_i64(),
        group_tag: (rng.below(2) == 0).then(|| rng.next_i64()),
    }
}

pub(crate) fn random_nak(rng: &mut XorShift) -> NakFrame {
    NakFrame {
        session_id: rng.next_i32(),
        stream_id: rng.next_i32(),
        term_id: rng.next_i32(),
        term_offset: (rng.below(1 << 25) * 32) as i32,
        length: rng.below(1 << 31) as i32,
    }
}

pub(crate) fn random_rttm(rng: &mut XorShift) -> RttmFrame {
    RttmFrame {
        flags: rng.next_u8(),
        session_id: rng.next_i32(),
        stream_id: rng.next_i32(),
        echo_timestamp_ns: rng.next_i64(),
        reception_delta_ns: rng.below(1 << 63) as i64,
        receiver_id: rng.next_i64(),
    }
}

pub(crate) fn random_error(rng: &mut XorShift) -> ErrorFrame {
    ErrorFrame {
        session_id: rng.next_i32(),
        stream_id: rng.next_i32(),
        receiver_id: rng.next_i64(),
        group_tag: (rng.below(2) == 0).then(|| rng.next_i64()),
        error_code: rng.next_i32(),
        error_message: rng.ascii(ErrorFrame::MAX_MESSAGE_LENGTH),
    }
}

pub(crate) fn random_rsp_setup(rng: &mut XorShift) -> RspSetupFrame {
    RspSetupFrame {
        session_id: rng.next_i32(),
        stream_id: rng.next_i32(),
        response_session_id: rng.next_i32(),
    }
}

pub(crate) fn random_resolution_entries(rng: &mut XorShift) -> Vec<ResolutionEntry> {
    let n = rng.below(5) as usize;
    (0..n)
        .map(|_| ResolutionEntry {
            res_flags: rng.next_u8(),
            udp_port: rng.next_u64() as u16,
            age_in_ms: rng.next_i32(),
            address: if rng.below(2) == 0 {
                IpAddr::V4(Ipv4Addr::from(rng.next_u64() as u32))
            } else {
                IpAddr::V6(Ipv6Addr::from(
                    ((rng.next_u64() as u128) << 64) | rng.next_u64() as u128,
                ))
            },
            name: {
                let max = if rng.below(10) == 0 {
                    MAX_NAME_LENGTH
                } else {
                    40
                };
                rng.ascii(max)
            },
        })
        .collect()
}
