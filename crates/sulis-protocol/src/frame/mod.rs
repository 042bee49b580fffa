//! Wire codecs for the UDP frames of Aeron protocol version 0, and the frame
//! header layout shared by the wire and the log buffers.
//!
//! Every frame starts with the common 8-byte header ([`FrameHeader`]); DATA
//! and PAD frames carry the 32-byte data header ([`DataHeader`]), which is
//! also the layout of every frame stored in a term, so a term's bytes can be
//! sent to the network unchanged.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |R|                       Frame Length                          |  0
//! +---------------+---------------+-------------------------------+
//! |   Version     |B|E|S|R| Flags |             Type              |  4
//! +---------------+---------------+-------------------------------+
//! |                          Term Offset                          |  8
//! +---------------------------------------------------------------+
//! |                          Session ID                           | 12
//! +---------------------------------------------------------------+
//! |                           Stream ID                           | 16
//! +---------------------------------------------------------------+
//! |                            Term ID                            | 20
//! +---------------------------------------------------------------+
//! |                        Reserved Value                         | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                         Payload ...                           | 32
//! ```
//! All fields little-endian. See docs/protocol.md §1.
//!
//! One module per frame type: [`data`] (DATA, PAD, heartbeat and the batch
//! walk), [`setup`], [`status`], [`nak`], [`rttm`], [`error`], [`rsp_setup`],
//! [`resolution`], and transport security's envelope, [`sealed`]. Each frame is a plain struct with `encode` and a
//! validating `decode`; [`decode_datagram`] picks the decoder from the type
//! code. Every rejection is a [`FrameError`] naming the field and the reason,
//! ready to be logged beside the source address before the datagram is
//! dropped.
//!
//! ```
//! use sulis_protocol::frame::{decode_datagram, walk_data_frames, DataHeader, Frame, NakFrame};
//!
//! // A receiver asks for 4 KiB from offset 1024 of term 3 to be resent.
//! let nak = NakFrame { session_id: 7, stream_id: 10, term_id: 3, term_offset: 1024, length: 4096 };
//! let mut datagram = [0u8; NakFrame::LENGTH];
//! let len = nak.encode(&mut datagram);
//!
//! // The sender decodes it, then checks it against its 64 KiB terms.
//! let Ok(Frame::Nak(got)) = decode_datagram(&datagram[..len]) else { panic!() };
//! assert_eq!(got, nak);
//! got.validate_against(64 * 1024).unwrap();
//!
//! // Against a 1 KiB term the same NAK is refused, with the field and the reason.
//! let err = got.validate_against(1024).unwrap_err();
//! assert_eq!(err.field, "term_offset");
//! assert_eq!(err.to_string(), "invalid NAK frame: term_offset=1024: outside the term [0, 1024)");
//!
//! // Data datagrams batch frames; the walk checks they follow one another.
//! let mut batch = [0u8; 64];
//! DataHeader::data(7, 10, 3, 0, 0).encode(&mut batch[..32]);
//! DataHeader::data(7, 10, 3, 32, 0).encode(&mut batch[32..]);
//! let frames = walk_data_frames(&batch, 64 * 1024).unwrap();
//! assert_eq!(frames.iter().map(|(at, _)| *at).collect::<Vec<_>>(), [0, 32]);
//! ```

use std::ops::Range;

pub mod data;
pub mod error;
mod header;
pub mod nak;
pub mod resolution;
pub mod rsp_setup;
pub mod rttm;
pub mod sealed;
pub mod setup;
pub mod status;
#[cfg(test)]
pub(crate) mod test_util;

pub use data::{parse_data_datagram, walk_data_frames, DataDatagram, DataFrames, DataHeader};
pub use error::ErrorFrame;
pub use header::{frame_type_name, FrameError, FrameHeader};
pub use nak::NakFrame;
pub use resolution::{
    decode_resolution_frame, encode_resolution_frame, resolution_frame_length, ResolutionEntry,
};
pub use rsp_setup::RspSetupFrame;
pub use rttm::RttmFrame;
pub use sealed::{SealedHeader, HDR_TYPE_SEALED, SEALED_OVERHEAD};
pub use setup::SetupFrame;
pub use status::StatusMessageFrame;

/// Protocol version carried in every frame.
pub const CURRENT_VERSION: u8 = 0;

/// Offset of the frame length (i32) in every frame.
pub const FRAME_LENGTH_FIELD_OFFSET: usize = 0;
/// Offset of the version byte.
pub const VERSION_FIELD_OFFSET: usize = 4;
/// Offset of the flags byte.
pub const FLAGS_FIELD_OFFSET: usize = 5;
/// Offset of the type (u16).
pub const TYPE_FIELD_OFFSET: usize = 6;
/// Offset of the term offset (i32) in DATA/PAD frames.
pub const TERM_OFFSET_FIELD_OFFSET: usize = 8;
/// Offset of the session id (i32) in DATA/PAD frames.
pub const SESSION_ID_FIELD_OFFSET: usize = 12;
/// Offset of the stream id (i32) in DATA/PAD frames.
pub const STREAM_ID_FIELD_OFFSET: usize = 16;
/// Offset of the term id (i32) in DATA/PAD frames.
pub const TERM_ID_FIELD_OFFSET: usize = 20;
/// Offset of the reserved value (i64) in DATA/PAD frames.
pub const RESERVED_VALUE_FIELD_OFFSET: usize = 24;

/// Length of the common frame header.
pub const HEADER_LENGTH: usize = 8;
/// Length of the DATA/PAD header, also the length of a heartbeat datagram.
pub const DATA_HEADER_LENGTH: usize = 32;
/// Every frame in a term starts on a multiple of this.
pub const FRAME_ALIGNMENT: usize = 32;

/// Frame type: padding.
pub const HDR_TYPE_PAD: u16 = 0x00;
/// Frame type: application data.
pub const HDR_TYPE_DATA: u16 = 0x01;
/// Frame type: negative acknowledgement.
pub const HDR_TYPE_NAK: u16 = 0x02;
/// Frame type: status message.
pub const HDR_TYPE_SM: u16 = 0x03;
/// Frame type: error.
pub const HDR_TYPE_ERR: u16 = 0x04;
/// Frame type: setup.
pub const HDR_TYPE_SETUP: u16 = 0x05;
/// Frame type: round-trip-time measurement.
pub const HDR_TYPE_RTTM: u16 = 0x06;
/// Frame type: name resolution.
pub const HDR_TYPE_RES: u16 = 0x07;
/// Frame type: response setup.
pub const HDR_TYPE_RSP_SETUP: u16 = 0x0B;

/// DATA flag: first fragment of a message.
pub const BEGIN_FLAG: u8 = 0x80;
/// DATA flag: last fragment of a message.
pub const END_FLAG: u8 = 0x40;
/// DATA flags of an unfragmented message.
pub const UNFRAGMENTED: u8 = BEGIN_FLAG | END_FLAG;
/// DATA flag on heartbeats: end of stream.
pub const EOS_FLAG: u8 = 0x20;
/// DATA flag on EOS heartbeats: publication revoked.
pub const REVOKED_FLAG: u8 = 0x10;

/// Rounds a frame length up to the frame alignment.
#[inline(always)]
pub const fn align_frame(length: usize) -> usize {
    (length + FRAME_ALIGNMENT - 1) & !(FRAME_ALIGNMENT - 1)
}

/// Packs the second 4 bytes of the common header (version, flags, type) with the
/// frame length into the 8-byte word stored first when a frame is written.
#[inline(always)]
pub const fn pack_header_word(frame_length: i32, flags: u8, frame_type: u16) -> i64 {
    ((frame_length as u32) as i64)
        | ((CURRENT_VERSION as i64) << 32)
        | ((flags as i64) << 40)
        | ((frame_type as i64) << 48)
}

/// Builds the 32-byte default data header a publication stamps on each frame.
pub fn default_data_header(
    session_id: i32,
    stream_id: i32,
    initial_term_id: i32,
) -> [u8; DATA_HEADER_LENGTH] {
    let mut h = [0u8; DATA_HEADER_LENGTH];
    h[VERSION_FIELD_OFFSET] = CURRENT_VERSION;
    h[FLAGS_FIELD_OFFSET] = UNFRAGMENTED;
    h[TYPE_FIELD_OFFSET..TYPE_FIELD_OFFSET + 2].copy_from_slice(&HDR_TYPE_DATA.to_le_bytes());
    h[SESSION_ID_FIELD_OFFSET..SESSION_ID_FIELD_OFFSET + 4]
        .copy_from_slice(&session_id.to_le_bytes());
    h[STREAM_ID_FIELD_OFFSET..STREAM_ID_FIELD_OFFSET + 4].copy_from_slice(&stream_id.to_le_bytes());
    h[TERM_ID_FIELD_OFFSET..TERM_ID_FIELD_OFFSET + 4]
        .copy_from_slice(&initial_term_id.to_le_bytes());
    h
}

/// One decoded datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A DATA frame; `payload` is its byte range in the datagram. Further
    /// frames batched behind it are visited with [`walk_data_frames`].
    Data {
        /// The frame's header.
        header: DataHeader,
        /// Byte range of the payload within the datagram.
        payload: Range<usize>,
    },
    /// A PAD frame (only its header travels).
    Pad(DataHeader),
    /// A heartbeat: zero-length DATA frame alone in a 32-byte datagram.
    Heartbeat(DataHeader),
    /// SETUP.
    Setup(SetupFrame),
    /// Status message.
    Status(StatusMessageFrame),
    /// NAK.
    Nak(NakFrame),
    /// RTT measurement.
    Rttm(RttmFrame),
    /// ERR.
    Error(ErrorFrame),
    /// Response setup.
    RspSetup(RspSetupFrame),
    /// Name-resolver gossip.
    Resolution {
        /// The entries, in frame order.
        entries: Vec<ResolutionEntry>,
    },
}

impl Frame {
    /// The frame's type code.
    pub fn frame_type(&self) -> u16 {
        match self {
            Frame::Data { .. } | Frame::Heartbeat(_) => HDR_TYPE_DATA,
            Frame::Pad(_) => HDR_TYPE_PAD,
            Frame::Setup(_) => HDR_TYPE_SETUP,
            Frame::Status(_) => HDR_TYPE_SM,
            Frame::Nak(_) => HDR_TYPE_NAK,
            Frame::Rttm(_) => HDR_TYPE_RTTM,
            Frame::Error(_) => HDR_TYPE_ERR,
            Frame::RspSetup(_) => HDR_TYPE_RSP_SETUP,
            Frame::Resolution { .. } => HDR_TYPE_RES,
        }
    }
}

/// Decodes and validates a received datagram, choosing the decoder from its
/// type code.
///
/// Control frames are checked by their own `decode` (bytes beyond
/// `frame_length` are ignored, as Aeron does). A DATA/PAD datagram is walked
/// as [`walk_data_frames`] describes, with the largest term length as the
/// term bound (call [`walk_data_frames`] or [`parse_data_datagram`] with the
/// image's term length for the exact bound), and its first frame returned.
/// ATS types (0x08–0x0A, Aeron Premium), the extension type 0xFFFF and
/// unknown types are rejected.
pub fn decode_datagram(datagram: &[u8]) -> Result<Frame, FrameError> {
    let header = FrameHeader::decode(datagram)?;
    header::check_version(&header)?;
    let frame_type = header.frame_type;
    match frame_type {
        HDR_TYPE_DATA | HDR_TYPE_PAD => {
            let first = *data::walk(datagram, None, |_, _| {})?.first();
            Ok(if first.is_heartbeat() {
                Frame::Heartbeat(first)
            } else if first.is_pad() {
                Frame::Pad(first)
            } else {
                let payload = DATA_HEADER_LENGTH..first.frame_length as usize;
                Frame::Data {
                    header: first,
                    payload,
                }
            })
        }
        HDR_TYPE_NAK => NakFrame::decode(datagram).map(Frame::Nak),
        HDR_TYPE_SM => StatusMessageFrame::decode(datagram).map(Frame::Status),
        HDR_TYPE_ERR => ErrorFrame::decode(datagram).map(Frame::Error),
        HDR_TYPE_SETUP => SetupFrame::decode(datagram).map(Frame::Setup),
        HDR_TYPE_RTTM => RttmFrame::decode(datagram).map(Frame::Rttm),
        HDR_TYPE_RES => {
            decode_resolution_frame(datagram).map(|entries| Frame::Resolution { entries })
        }
        HDR_TYPE_RSP_SETUP => RspSetupFrame::decode(datagram).map(Frame::RspSetup),
        _ => {
            let why = match frame_type {
                0x08..=0x0A => "an Aeron Transport Security (Premium) frame, not supported",
                0xFFFF => "the reserved extension type, unused in protocol version 0",
                sealed::HDR_TYPE_SEALED => {
                    "a sealed frame (transport security) on a channel without security=: \
                     its sender's channel is secured, this one is not"
                }
                _ => "not a frame type of protocol version 0",
            };
            Err(FrameError::new(
                Some(frame_type),
                "type",
                format_args!("{frame_type:#06x}"),
                why,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::*;
    use super::*;

    #[test]
    fn should_pack_header_word_in_wire_order() {
        let w = pack_header_word(-64, UNFRAGMENTED, HDR_TYPE_DATA);
        let bytes = w.to_le_bytes();
        assert_eq!(i32::from_le_bytes(bytes[0..4].try_into().unwrap()), -64);
        assert_eq!(bytes[4], CURRENT_VERSION);
        assert_eq!(bytes[5], 0xC0);
        assert_eq!(u16::from_le_bytes([bytes[6], bytes[7]]), HDR_TYPE_DATA);
    }

    #[test]
    fn should_build_default_header() {
        let h = default_data_header(7, 10, 99);
        assert_eq!(h[5], 0xC0);
        assert_eq!(i32::from_le_bytes(h[12..16].try_into().unwrap()), 7);
        assert_eq!(i32::from_le_bytes(h[20..24].try_into().unwrap()), 99);
        assert_eq!(align_frame(33), 64);
    }

    #[test]
    fn should_keep_default_header_decodable() {
        let h = DataHeader::decode(&default_data_header(7, 10, 99)).unwrap();
        assert_eq!(
            h,
            DataHeader {
                frame_length: 0,
                ..DataHeader::heartbeat(7, 10, 99, 0)
            }
        );
    }

    /// A valid encoding of a random frame of a random type.
    fn random_datagram(rng: &mut XorShift) -> Vec<u8> {
        match rng.below(9) {
            0 => random_setup(rng).to_bytes().to_vec(),
            1 => {
                let f = random_status(rng);
                f.to_bytes()[..f.frame_length()].to_vec()
            }
            2 => random_nak(rng).to_bytes().to_vec(),
            3 => random_rttm(rng).to_bytes().to_vec(),
            4 => random_error(rng).to_vec(),
            5 => random_rsp_setup(rng).to_bytes().to_vec(),
            6 => {
                let entries = random_resolution_entries(rng);
                let mut b = vec![0u8; resolution_frame_length(&entries)];
                encode_resolution_frame(&entries, &mut b);
                b
            }
            7 => {
                let mut h =
                    DataHeader::heartbeat(rng.next_i32(), rng.next_i32(), rng.next_i32(), 0);
                h.term_offset = rng.below(2048) as i32 * 32;
                h.flags = rng.next_u8();
                h.to_bytes().to_vec()
            }
            _ => random_batch(rng, 64 * 1024),
        }
    }

    /// Consecutive DATA frames, sometimes ending with a PAD to the term end.
    fn random_batch(rng: &mut XorShift, term_length: usize) -> Vec<u8> {
        let (session, stream, term_id) = (rng.next_i32(), rng.next_i32(), rng.next_i32());
        let mut term_offset = rng.below(term_length as u64 / 64) as usize * 32;
        let mut out = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let payload = rng.below(300) as usize;
            let mut h = DataHeader::data(session, stream, term_id, term_offset as i32, payload);
            h.flags = rng.next_u8();
            h.reserved_value = rng.next_i64();
            let at = out.len();
            out.resize(at + align_frame(32 + payload), 0);
            h.encode(&mut out[at..]);
            rng.fill(&mut out[at + 32..at + 32 + payload]);
            term_offset += align_frame(32 + payload);
        }
        if rng.below(3) == 0 {
            let pad_len = term_length - term_offset;
            let pad = DataHeader::pad(session, stream, term_id, term_offset as i32, pad_len);
            out.extend_from_slice(&pad.to_bytes());
        }
        out
    }

    #[test]
    fn should_dispatch_every_frame_type() {
        let mut rng = XorShift::new(20);
        for _ in 0..5_000 {
            let d = random_datagram(&mut rng);
            let f = decode_datagram(&d).unwrap_or_else(|e| panic!("{e}"));
            let expected_type = u16::from_le_bytes([d[6], d[7]]);
            assert_eq!(f.frame_type(), expected_type);
            match f {
                Frame::Setup(x) => assert_eq!(x.to_bytes()[..], d[..]),
                Frame::Status(x) => assert_eq!(x.to_bytes()[..x.frame_length()], d[..]),
                Frame::Nak(x) => assert_eq!(x.to_bytes()[..], d[..]),
                Frame::Rttm(x) => assert_eq!(x.to_bytes()[..], d[..]),
                Frame::Error(x) => assert_eq!(x.to_vec(), d),
                Frame::RspSetup(x) => assert_eq!(x.to_bytes()[..], d[..]),
                Frame::Resolution { entries } => {
                    let mut b = vec![0u8; resolution_frame_length(&entries)];
                    encode_resolution_frame(&entries, &mut b);
                    assert_eq!(b, d);
                }
                Frame::Heartbeat(h) => assert_eq!(h.to_bytes()[..], d[..]),
                Frame::Data { header, payload } => {
                    assert_eq!(header.to_bytes()[..], d[..32]);
                    assert_eq!(payload, 32..header.frame_length as usize);
                    let frames = walk_data_frames(&d, 64 * 1024).unwrap();
                    assert_eq!(frames[0], (0, header));
                }
                Frame::Pad(_) => unreachable!("batches start with DATA"),
            }
        }
        let pad = DataHeader::pad(1, 2, 3, 1024, 4096);
        assert_eq!(decode_datagram(&pad.to_bytes()).unwrap(), Frame::Pad(pad));
    }

    #[test]
    fn should_reject_unsupported_types_and_versions() {
        let mut d = NakFrame {
            session_id: 1,
            stream_id: 2,
            term_id: 3,
            term_offset: 0,
            length: 0,
        }
        .to_bytes();
        for (t, word) in [
            (0x08u16, "Premium"),
            (0x0A, "Premium"),
            (0x0C, "not a frame type"),
            (0xFFFF, "extension"),
        ] {
            d[6..8].copy_from_slice(&t.to_le_bytes());
            let e = decode_datagram(&d).unwrap_err();
            assert_eq!((e.field, e.frame_type), ("type", Some(t)));
            assert!(e.reason.contains(word), "{e}");
        }
        d[6..8].copy_from_slice(&HDR_TYPE_NAK.to_le_bytes());
        d[4] = 1;
        let e = decode_datagram(&d).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid NAK frame: version=1: only protocol version 0 is supported"
        );
        for cut in 0..8 {
            let e = decode_datagram(&d[..cut]).unwrap_err();
            assert_eq!((e.field, e.frame_type), ("datagram_length", None));
        }
    }

    #[test]
    fn should_reject_every_truncation_of_every_frame_type() {
        let mut rng = XorShift::new(21);
        for _ in 0..300 {
            let d = random_datagram(&mut rng);
            let boundaries: Vec<usize> = if matches!(u16::from_le_bytes([d[6], d[7]]), 0 | 1) {
                walk_data_frames(&d, 64 * 1024)
                    .unwrap()
                    .iter()
                    .skip(1)
                    .map(|(o, _)| *o)
                    .collect()
            } else {
                Vec::new()
            };
            for cut in 0..d.len() {
                let r = decode_datagram(&d[..cut]);
                assert_eq!(r.is_ok(), boundaries.contains(&cut), "cut at {cut}: {r:?}");
            }
        }
    }

    /// Overwrites bytes of a valid datagram with values likely to sit on a
    /// validation edge.
    fn garble(rng: &mut XorShift, d: &mut Vec<u8>) {
        const EDGES: [i32; 12] = [
            0,
            1,
            -1,
            31,
            32,
            33,
            64,
            65504,
            65536,
            1 << 30,
            i32::MAX,
            i32::MIN,
        ];
        for _ in 0..1 + rng.below(3) {
            match rng.below(6) {
                0 if !d.is_empty() => {
                    let i = rng.below(d.len() as u64) as usize;
                    d[i] = rng.next_u8();
                }
                1 if d.len() >= 4 => {
                    let i = rng.below(d.len() as u64 / 4) as usize * 4;
                    let v = EDGES[rng.below(EDGES.len() as u64) as usize];
                    d[i..i + 4].copy_from_slice(&v.to_le_bytes());
                }
                2 => d.truncate(rng.below(d.len() as u64 + 1) as usize),
                3 => {
                    let extra = rng.below(64) as usize;
                    let at = d.len();
                    d.resize(at + extra, 0);
                    rng.fill(&mut d[at..]);
                }
                4 if d.len() >= 8 => {
                    // A plausible header: version 0, some type, a small length.
                    d[4] = 0;
                    d[6] = rng.below(13) as u8;
                    d[7] = 0;
                    let v = rng.below(d.len() as u64 + 8) as i32;
                    d[0..4].copy_from_slice(&v.to_le_bytes());
                }
                _ if d.len() >= 2 => {
                    let i = rng.below(d.len() as u64 - 1) as usize;
                    d[i] ^= 1 << rng.below(8);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn should_never_panic_on_random_or_garbled_datagrams() {
        let mut rng = XorShift::new(22);
        let mut accepted = [0usize; 2];
        let mut rejected = 0usize;
        for i in 0..100_000 {
            let mut d = if i % 3 == 0 {
                let mut d = vec![0u8; rng.below(1200) as usize];
                rng.fill(&mut d);
                d
            } else {
                random_datagram(&mut rng)
            };
            garble(&mut rng, &mut d);
            let term_length = 1usize << (16 + rng.below(15));

            match decode_datagram(&d) {
                Ok(f) => {
                    accepted[(i % 3 == 0) as usize] += 1;
                    check_reencodes(&f, &d);
                }
                Err(e) => {
                    rejected += 1;
                    assert!(!e.reason.is_empty());
                    let _ = e.to_string();
                }
            }
            if let Ok(frames) = walk_data_frames(&d, term_length) {
                assert!(!frames.is_empty());
                for (at, h) in &frames {
                    assert!(*at + 32 <= d.len() && at % 32 == 0);
                    assert!((h.term_offset as usize) < term_length);
                }
                let parsed = parse_data_datagram(&d, term_length).unwrap();
                assert_eq!(parsed.frames().collect::<Vec<_>>(), frames);
            }
            let _ = FrameHeader::decode(&d);
            let _ = DataHeader::decode(&d).map(|h| h.validate_against(term_length));
            let _ = SetupFrame::decode(&d);
            let _ = StatusMessageFrame::decode(&d).map(|f| f.validate_against(term_length));
            let _ = NakFrame::decode(&d).map(|f| f.validate_against(term_length));
            let _ = RttmFrame::decode(&d);
            let _ = ErrorFrame::decode(&d);
            let _ = RspSetupFrame::decode(&d);
            let _ = decode_resolution_frame(&d);
        }
        eprintln!("FUZZSTATS accepted {accepted:?}, rejected {rejected}");
        // The garbling must leave enough valid datagrams to reach deep checks.
        assert!(
            accepted[0] > 10_000,
            "accepted {accepted:?}, rejected {rejected}"
        );
        assert!(
            rejected > 30_000,
            "accepted {accepted:?}, rejected {rejected}"
        );
    }

    /// What decodes must encode back to the same frame.
    fn check_reencodes(f: &Frame, d: &[u8]) {
        let again = match f {
            Frame::Setup(x) => decode_datagram(&x.to_bytes()),
            Frame::Status(x) => decode_datagram(&x.to_bytes()[..x.frame_length()]),
            Frame::Nak(x) => decode_datagram(&x.to_bytes()),
            Frame::Rttm(x) => decode_datagram(&x.to_bytes()),
            Frame::RspSetup(x) => decode_datagram(&x.to_bytes()),
            Frame::Resolution { entries } => {
                let mut b = vec![0u8; resolution_frame_length(entries)];
                encode_resolution_frame(entries, &mut b);
                decode_datagram(&b)
            }
            Frame::Error(x) if x.error_message.is_ascii() => decode_datagram(&x.to_vec()),
            Frame::Data { header, payload } => {
                assert!(payload.end <= d.len() && payload.start == 32);
                assert_eq!(payload.len(), header.payload_len());
                return;
            }
            _ => return,
        };
        assert_eq!(again.as_ref(), Ok(f));
    }
}
