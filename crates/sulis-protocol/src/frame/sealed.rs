//! The sealed frame: transport security's envelope around one datagram.
//!
//! A secured UDP channel sends every datagram (data, heartbeats, setups,
//! status messages, NAKs, RTT and error frames alike) inside this envelope.
//! Its header is authenticated; its body is the Aeron datagram, encrypted or
//! in the clear; the last 16 bytes are the AEAD tag. Channels without
//! security never carry it, so their wire stays Aeron's byte for byte, and an
//! Aeron driver drops a sealed datagram as a frame of unknown type.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                 Frame Length (the whole datagram)             |  0
//! +---------------+-+-------------+-------------------------------+
//! |   Version     |E|   Flags     |          Type (0x5E)          |  4
//! +---------------+-+-------------+-------------------------------+
//! |                            Key ID                             |  8
//! +---------------------------------------------------------------+
//! |                         Sender Salt                           | 12
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                           Counter                             | 20
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                 Send Time (seconds since 1970)                | 28
//! +---------------------------------------------------------------+
//! |        Body: the datagram, encrypted if E is set ...          | 32
//! +---------------------------------------------------------------+
//! |                     Tag (16 bytes) ...                        |
//! ```
//!
//! - `E` (flag 0x80): the body is encrypted; else it is in the clear and the
//!   tag authenticates header and body together.
//! - `Key ID`: the keyring entry the sender's key was derived from.
//! - `Sender Salt`: chosen at random by each sending socket when it opens;
//!   with the key id it selects the sender's own derived key.
//! - `Counter`: one more for every datagram the socket seals; the AEAD nonce
//!   (four zero bytes, then the counter, little-endian) and the position in
//!   the receiver's replay window.
//! - `Send Time`: the sender's clock; a receiver drops what is older than its
//!   clock window (or than its own socket).

/// Frame type of a sealed datagram (not one of Aeron's: 0x08-0x0A are its
/// commercial transport security's, which this is not).
pub const HDR_TYPE_SEALED: u16 = 0x5E;
/// Flag: the body is encrypted.
pub const SEALED_ENCRYPTED_FLAG: u8 = 0x80;
/// Length of the sealed header (authenticated, never encrypted).
pub const SEALED_HEADER_LENGTH: usize = 32;
/// Length of the AEAD tag after the body.
pub const SEALED_TAG_LENGTH: usize = 16;
/// Bytes a sealed datagram adds to the datagram it carries.
pub const SEALED_OVERHEAD: usize = SEALED_HEADER_LENGTH + SEALED_TAG_LENGTH;
/// Length of the sender salt.
pub const SENDER_SALT_LENGTH: usize = 8;

/// The header of a sealed datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealedHeader {
    /// Length of the whole datagram, header and tag included.
    pub frame_length: u32,
    /// The body is encrypted.
    pub encrypted: bool,
    /// Keyring id of the key the sender's key derives from.
    pub key_id: u32,
    /// The sending socket's random salt.
    pub salt: [u8; SENDER_SALT_LENGTH],
    /// The sender's datagram counter (the nonce).
    pub counter: u64,
    /// The sender's clock when it sealed the datagram, in seconds since 1970.
    pub send_time_s: u32,
}

/// Why a datagram is not a well-formed sealed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealedError {
    /// Shorter than a header and a tag.
    TooShort,
    /// Another frame type: an unsealed datagram.
    NotSealed(u16),
    /// A version other than [`super::CURRENT_VERSION`].
    Version(u8),
    /// The frame length disagrees with the datagram's.
    Length(u32),
}

impl std::fmt::Display for SealedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SealedError::TooShort => write!(f, "shorter than a sealed header and tag"),
            SealedError::NotSealed(t) => match super::frame_type_name(*t) {
                Some(name) => write!(f, "an unsealed {name} frame"),
                None => write!(f, "frame type {t:#06x}, not a sealed frame"),
            },
            SealedError::Version(v) => write!(f, "version {v}"),
            SealedError::Length(l) => write!(f, "frame length {l} is not the datagram's"),
        }
    }
}

impl SealedHeader {
    /// Writes the header into the first [`SEALED_HEADER_LENGTH`] bytes of `buf`.
    pub fn encode(&self, buf: &mut [u8]) {
        buf[0..4].copy_from_slice(&self.frame_length.to_le_bytes());
        buf[4] = super::CURRENT_VERSION;
        buf[5] = if self.encrypted {
            SEALED_ENCRYPTED_FLAG
        } else {
            0
        };
        buf[6..8].copy_from_slice(&HDR_TYPE_SEALED.to_le_bytes());
        buf[8..12].copy_from_slice(&self.key_id.to_le_bytes());
        buf[12..20].copy_from_slice(&self.salt);
        buf[20..28].copy_from_slice(&self.counter.to_le_bytes());
        buf[28..32].copy_from_slice(&self.send_time_s.to_le_bytes());
    }

    /// Reads and checks the header of `datagram` (its tag is the AEAD's to check).
    pub fn decode(datagram: &[u8]) -> Result<SealedHeader, SealedError> {
        if datagram.len() >= 8 {
            let frame_type = u16::from_le_bytes([datagram[6], datagram[7]]);
            if frame_type != HDR_TYPE_SEALED {
                return Err(SealedError::NotSealed(frame_type));
            }
        }
        if datagram.len() < SEALED_OVERHEAD {
            return Err(SealedError::TooShort);
        }
        if datagram[4] != super::CURRENT_VERSION {
            return Err(SealedError::Version(datagram[4]));
        }
        let u32_at = |at: usize| u32::from_le_bytes(datagram[at..at + 4].try_into().unwrap());
        let frame_length = u32_at(0);
        if frame_length as usize != datagram.len() {
            return Err(SealedError::Length(frame_length));
        }
        Ok(SealedHeader {
            frame_length,
            encrypted: datagram[5] & SEALED_ENCRYPTED_FLAG != 0,
            key_id: u32_at(8),
            salt: datagram[12..20].try_into().unwrap(),
            counter: u64::from_le_bytes(datagram[20..28].try_into().unwrap()),
            send_time_s: u32_at(28),
        })
    }

    /// The AEAD nonce of this datagram: four zero bytes, then the counter.
    pub fn nonce(&self) -> [u8; 12] {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&self.counter.to_le_bytes());
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SealedHeader {
        SealedHeader {
            frame_length: 80,
            encrypted: true,
            key_id: 7,
            salt: [1, 2, 3, 4, 5, 6, 7, 8],
            counter: 0x0102_0304_0506_0708,
            send_time_s: 1_800_000_000,
        }
    }

    #[test]
    fn should_decode_what_it_encodes() {
        let mut d = vec![0u8; 80];
        header().encode(&mut d);
        assert_eq!(SealedHeader::decode(&d), Ok(header()));
        assert_eq!(u16::from_le_bytes([d[6], d[7]]), 0x5E);
        assert_eq!(&header().nonce()[..4], &[0, 0, 0, 0]);
        assert_eq!(
            &header().nonce()[4..],
            &0x0102_0304_0506_0708u64.to_le_bytes()
        );
    }

    #[test]
    fn should_refuse_a_plain_frame_a_short_one_a_wrong_length_and_a_version() {
        let mut nak = vec![0u8; 28];
        nak[6..8].copy_from_slice(&super::super::HDR_TYPE_NAK.to_le_bytes());
        assert_eq!(
            SealedHeader::decode(&nak),
            Err(SealedError::NotSealed(super::super::HDR_TYPE_NAK))
        );
        assert_eq!(
            SealedError::NotSealed(super::super::HDR_TYPE_NAK).to_string(),
            "an unsealed NAK frame"
        );
        let mut d = vec![0u8; 80];
        header().encode(&mut d);
        assert_eq!(SealedHeader::decode(&d[..40]), Err(SealedError::TooShort));
        assert_eq!(SealedHeader::decode(&d[..64]), Err(SealedError::Length(80)));
        d[4] = 1;
        assert_eq!(SealedHeader::decode(&d), Err(SealedError::Version(1)));
    }
}
