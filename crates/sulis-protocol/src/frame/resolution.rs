//! RES (0x07): driver name-resolver gossip. The 8-byte common header followed
//! by one or more entries, each padded to a multiple of 8 bytes.
//!
//! Entry (IPv4 shown; an IPv6 address takes 16 bytes and moves the name
//! length to offset 24 and the name to 26):
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------+-+-------------+-------------------------------+
//! |   Res Type    |S|  Res Flags  |           UDP Port            |  0
//! +---------------+-+-------------+-------------------------------+
//! |                           Age in ms                           |  4
//! +---------------------------------------------------------------+
//! |                 Address (4 or 16 bytes, network order)        |  8
//! +-------------------------------+-------------------------------+
//! |          Name Length          |         Name ...              | 12
//! +-------------------------------+                               +
//! |                  ... Name, then zero padding to 8             |
//! +---------------------------------------------------------------+
//! ```
//! Res type: 1 = name → IPv4, 2 = name → IPv6. Flag S = SELF (0x80): the entry
//! describes the sending resolver. Port, age and name length are
//! little-endian (the port is **not** network order); the address is in
//! network order. The frame's `frame_length` covers header and all entries.
//! See docs/protocol.md §1.10.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::header::{
    check_control_header, get_i16, get_i32, get_u16, put_header, put_i16, put_i32, put_u16,
    FrameError,
};
use super::{HDR_TYPE_RES, HEADER_LENGTH};

/// Res type of an entry mapping a name to an IPv4 address.
pub const RES_TYPE_NAME_TO_IPV4: u8 = 1;
/// Res type of an entry mapping a name to an IPv6 address.
pub const RES_TYPE_NAME_TO_IPV6: u8 = 2;
/// Entry flag: the entry describes the sending resolver itself.
pub const SELF_FLAG: u8 = 0x80;
/// Longest name in bytes.
pub const MAX_NAME_LENGTH: usize = 512;
/// Entries are padded to a multiple of this.
pub const ENTRY_ALIGNMENT: usize = 8;

/// Offset of `res_type` in an entry.
pub const RES_TYPE_FIELD_OFFSET: usize = 0;
/// Offset of `res_flags` in an entry.
pub const RES_FLAGS_FIELD_OFFSET: usize = 1;
/// Offset of `udp_port` in an entry.
pub const UDP_PORT_FIELD_OFFSET: usize = 2;
/// Offset of `age_in_ms` in an entry.
pub const AGE_IN_MS_FIELD_OFFSET: usize = 4;
/// Offset of the address in an entry.
pub const ADDRESS_FIELD_OFFSET: usize = 8;

/// One name → address entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResolutionEntry {
    /// [`SELF_FLAG`].
    pub res_flags: u8,
    /// UDP port of the resolver named.
    pub udp_port: u16,
    /// Milliseconds since the sender last heard from that resolver.
    pub age_in_ms: i32,
    /// The address; its family gives the res type.
    pub address: IpAddr,
    /// The resolver's name (ASCII in practice), at most 512 bytes.
    pub name: String,
}

impl ResolutionEntry {
    /// Res type on the wire: [`RES_TYPE_NAME_TO_IPV4`] or [`RES_TYPE_NAME_TO_IPV6`].
    pub fn res_type(&self) -> u8 {
        match self.address {
            IpAddr::V4(_) => RES_TYPE_NAME_TO_IPV4,
            IpAddr::V6(_) => RES_TYPE_NAME_TO_IPV6,
        }
    }

    /// True if [`SELF_FLAG`] is set.
    pub fn is_self(&self) -> bool {
        self.res_flags & SELF_FLAG != 0
    }

    fn name_length_offset(&self) -> usize {
        name_length_offset(self.res_type())
    }

    /// Encoded length, padding included.
    pub fn entry_length(&self) -> usize {
        align_entry(self.name_length_offset() + 2 + self.name.len())
    }

    /// Writes the entry (with zero padding) into the start of `buf`;
    /// returns [`entry_length`](Self::entry_length).
    ///
    /// # Panics
    /// If the name is longer than [`MAX_NAME_LENGTH`] or `buf` is too short.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        assert!(
            self.name.len() <= MAX_NAME_LENGTH,
            "resolution entry name of {} bytes exceeds {MAX_NAME_LENGTH}",
            self.name.len()
        );
        let length = self.entry_length();
        buf[..length].fill(0);
        buf[RES_TYPE_FIELD_OFFSET] = self.res_type();
        buf[RES_FLAGS_FIELD_OFFSET] = self.res_flags;
        put_u16(buf, UDP_PORT_FIELD_OFFSET, self.udp_port);
        put_i32(buf, AGE_IN_MS_FIELD_OFFSET, self.age_in_ms);
        let name_at = self.name_length_offset();
        match self.address {
            IpAddr::V4(a) => buf[ADDRESS_FIELD_OFFSET..name_at].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => buf[ADDRESS_FIELD_OFFSET..name_at].copy_from_slice(&a.octets()),
        }
        put_i16(buf, name_at, self.name.len() as i16);
        buf[name_at + 2..name_at + 2 + self.name.len()].copy_from_slice(self.name.as_bytes());
        length
    }

    /// Decodes the entry at the start of `buf` (the rest of the frame);
    /// returns it with its padded length.
    ///
    /// Checks `res_type` is 1 or 2, `name_length` in [0, 512], the padded
    /// entry fits in `buf`, and the name is UTF-8.
    pub fn decode(buf: &[u8]) -> Result<(Self, usize), FrameError> {
        let ty = Some(HDR_TYPE_RES);
        let res_type = buf.first().copied().unwrap_or(0);
        if res_type != RES_TYPE_NAME_TO_IPV4 && res_type != RES_TYPE_NAME_TO_IPV6 {
            return Err(FrameError::new(
                ty,
                "res_type",
                res_type as i8,
                "not 1 (name to IPv4) or 2 (name to IPv6)",
            ));
        }
        let name_at = name_length_offset(res_type);
        if buf.len() < name_at + 2 {
            return Err(FrameError::new(
                ty,
                "entry_length",
                align_entry(name_at + 2),
                format_args!("entry cut off: {} bytes left in the frame", buf.len()),
            ));
        }
        let name_length = get_i16(buf, name_at);
        if name_length < 0 || name_length as usize > MAX_NAME_LENGTH {
            return Err(FrameError::new(
                ty,
                "name_length",
                name_length,
                format_args!("not in [0, {MAX_NAME_LENGTH}]"),
            ));
        }
        let name_end = name_at + 2 + name_length as usize;
        let entry_length = align_entry(name_end);
        if entry_length > buf.len() {
            return Err(FrameError::new(
                ty,
                "entry_length",
                entry_length,
                format_args!("entry cut off: {} bytes left in the frame", buf.len()),
            ));
        }
        let address = if res_type == RES_TYPE_NAME_TO_IPV4 {
            let mut o = [0u8; 4];
            o.copy_from_slice(&buf[ADDRESS_FIELD_OFFSET..name_at]);
            IpAddr::V4(Ipv4Addr::from(o))
        } else {
            let mut o = [0u8; 16];
            o.copy_from_slice(&buf[ADDRESS_FIELD_OFFSET..name_at]);
            IpAddr::V6(Ipv6Addr::from(o))
        };
        let name_bytes = &buf[name_at + 2..name_end];
        let name = match std::str::from_utf8(name_bytes) {
            Ok(s) => s.to_owned(),
            Err(_) => {
                return Err(FrameError::new(
                    ty,
                    "name",
                    String::from_utf8_lossy(name_bytes),
                    "not valid UTF-8",
                ))
            }
        };
        let entry = ResolutionEntry {
            res_flags: buf[RES_FLAGS_FIELD_OFFSET],
            udp_port: get_u16(buf, UDP_PORT_FIELD_OFFSET),
            age_in_ms: get_i32(buf, AGE_IN_MS_FIELD_OFFSET),
            address,
            name,
        };
        Ok((entry, entry_length))
    }
}

fn name_length_offset(res_type: u8) -> usize {
    ADDRESS_FIELD_OFFSET
        + if res_type == RES_TYPE_NAME_TO_IPV6 {
            16
        } else {
            4
        }
}

const fn align_entry(length: usize) -> usize {
    (length + ENTRY_ALIGNMENT - 1) & !(ENTRY_ALIGNMENT - 1)
}

/// Length of a RES frame holding `entries`.
pub fn resolution_frame_length(entries: &[ResolutionEntry]) -> usize {
    HEADER_LENGTH
        + entries
            .iter()
            .map(ResolutionEntry::entry_length)
            .sum::<usize>()
}

/// Writes a RES frame holding `entries` into the start of `buf`; returns its
/// length. Splitting entries over frames that fit the MTU is the caller's.
///
/// # Panics
/// If `buf` is shorter than [`resolution_frame_length`] or a name is too long.
pub fn encode_resolution_frame(entries: &[ResolutionEntry], buf: &mut [u8]) -> usize {
    let length = resolution_frame_length(entries);
    put_header(buf, length, 0, HDR_TYPE_RES);
    let mut offset = HEADER_LENGTH;
    for e in entries {
        offset += e.encode(&mut buf[offset..]);
    }
    length
}

/// Decodes a RES frame at the start of `buf`: version 0, type,
/// `frame_length` ≥ 8 and within `buf`, and every entry (see
/// [`ResolutionEntry::decode`]) ending exactly at `frame_length`.
pub fn decode_resolution_frame(buf: &[u8]) -> Result<Vec<ResolutionEntry>, FrameError> {
    let header = check_control_header(buf, HDR_TYPE_RES, HEADER_LENGTH, i32::MAX as usize)?;
    let frame = &buf[..header.frame_length as usize];
    let mut entries = Vec::new();
    let mut offset = HEADER_LENGTH;
    while offset < frame.len() {
        let (entry, length) = ResolutionEntry::decode(&frame[offset..])?;
        entries.push(entry);
        offset += length;
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::test_util::{random_resolution_entries, VecCorruption, XorShift};

    #[test]
    fn should_round_trip_random_resolution_frames() {
        let mut rng = XorShift::new(18);
        for _ in 0..2_000 {
            let entries = random_resolution_entries(&mut rng);
            let mut buf = vec![0u8; resolution_frame_length(&entries)];
            assert_eq!(encode_resolution_frame(&entries, &mut buf), buf.len());
            assert_eq!(buf.len() % 8, 0);
            assert_eq!(decode_resolution_frame(&buf).unwrap(), entries);
        }
    }

    #[test]
    fn should_lay_out_entries_as_in_spec() {
        let v4 = ResolutionEntry {
            res_flags: SELF_FLAG,
            udp_port: 8050,
            age_in_ms: 3,
            address: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)),
            name: "node-a".into(),
        };
        let v6 = ResolutionEntry {
            res_flags: 0,
            udp_port: 0x0102,
            age_in_ms: 0,
            address: IpAddr::V6(Ipv6Addr::LOCALHOST),
            name: "b".into(),
        };
        let entries = [v4.clone(), v6.clone()];
        let mut buf = vec![0u8; resolution_frame_length(&entries)];
        encode_resolution_frame(&entries, &mut buf);
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            &[64, 0, 0, 0,  0, 0, 0x07, 0x00][..],           // header, frame_length 64
            &[1, 0x80, 0x72, 0x1F,  3, 0, 0, 0],             // IPv4, SELF, port 8050 LE, age
            &[10, 0, 0, 7,  6, 0, b'n', b'o'],               // address, name_length, name...
            &[b'd', b'e', b'-', b'a', 0, 0, 0, 0],           // ...name, padding to 24
            &[2, 0, 0x02, 0x01,  0, 0, 0, 0],                // IPv6 entry
            &[0; 15], &[1],                                   // ::1
            &[1, 0, b'b', 0, 0, 0, 0, 0],                    // name_length 1, "b", padding to 32
        ]
        .concat();
        assert_eq!(buf, expected);
        assert_eq!(v4.entry_length(), 24);
        assert_eq!(v6.entry_length(), 32);
        assert_eq!(decode_resolution_frame(&buf).unwrap(), entries);
        assert!(decode_resolution_frame(&buf).unwrap()[0].is_self());
    }

    #[test]
    fn should_reject_each_malformed_field() {
        let e = ResolutionEntry {
            res_flags: 0,
            udp_port: 1,
            age_in_ms: 2,
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            name: "abc".into(),
        };
        let good = {
            let mut b = vec![0u8; resolution_frame_length(std::slice::from_ref(&e))];
            encode_resolution_frame(&[e], &mut b);
            b
        };
        assert_eq!(good.len(), 8 + 24);
        let cases: Vec<VecCorruption> = vec![
            ("version", Box::new(|b: &mut Vec<u8>| b[4] = 1)),
            ("type", Box::new(|b: &mut Vec<u8>| b[6] = 0x08)),
            ("frame_length", Box::new(|b: &mut Vec<u8>| put_i32(b, 0, 7))),
            (
                "frame_length",
                Box::new(|b: &mut Vec<u8>| put_i32(b, 0, 40)),
            ),
            (
                "frame_length",
                Box::new(|b: &mut Vec<u8>| put_i32(b, 0, -1)),
            ),
            ("res_type", Box::new(|b: &mut Vec<u8>| b[8] = 3)),
            ("res_type", Box::new(|b: &mut Vec<u8>| b[8] = 0)),
            (
                "name_length",
                Box::new(|b: &mut Vec<u8>| put_i16(b, 8 + 12, -1)),
            ),
            (
                "name_length",
                Box::new(|b: &mut Vec<u8>| put_i16(b, 8 + 12, 513)),
            ),
            (
                "entry_length",
                Box::new(|b: &mut Vec<u8>| put_i16(b, 8 + 12, 11)),
            ),
            (
                "entry_length",
                Box::new(|b: &mut Vec<u8>| put_i32(b, 0, 16)),
            ),
            ("entry_length", Box::new(|b: &mut Vec<u8>| b[8] = 2)),
            ("name", Box::new(|b: &mut Vec<u8>| b[8 + 14] = 0xFF)),
        ];
        for (field, corrupt) in cases {
            let mut b = good.clone();
            corrupt(&mut b);
            let err = decode_resolution_frame(&b).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
        // Header alone: no entries, valid.
        let mut b = good.clone();
        put_i32(&mut b, 0, 8);
        assert!(decode_resolution_frame(&b).unwrap().is_empty());
    }

    #[test]
    fn should_reject_every_truncation() {
        let mut rng = XorShift::new(19);
        for _ in 0..20 {
            let entries = random_resolution_entries(&mut rng);
            let mut buf = vec![0u8; resolution_frame_length(&entries)];
            encode_resolution_frame(&entries, &mut buf);
            for cut in 0..buf.len() {
                let e = decode_resolution_frame(&buf[..cut]).unwrap_err();
                assert!(matches!(e.field, "datagram_length" | "frame_length"), "{e}");
            }
        }
    }
}
