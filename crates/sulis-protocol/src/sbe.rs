//! The parts of Simple Binary Encoding that Aeron's archive and cluster
//! messages use, and a macro that turns a schema table into message types.
//!
//! A message is an 8-byte header (`blockLength u16`, `templateId u16`,
//! `schemaId u16`, `version u16`, little-endian), a root block of
//! `blockLength` bytes holding the fixed fields at fixed offsets, then the
//! variable-length fields in schema order, each a `u32` length and that many
//! bytes.
//!
//! Decoding follows SBE's compatibility rules, so older and newer peers
//! interoperate: var data starts at `8 + blockLength` as the *sender*
//! declared it (a newer sender's longer block is skipped), and a field the
//! sender's `version` predates, or that lies beyond its block, reads as the
//! field's null value. Every length is checked against the buffer: a short
//! or lying message is an [`SbeError`] naming what was wrong, never a panic.

use std::fmt;

/// `major.minor.patch` packed as Aeron packs semantic versions.
pub const fn semantic_version(major: i32, minor: i32, patch: i32) -> i32 {
    (major << 16) | (minor << 8) | patch
}

/// The major part of a packed semantic version.
pub const fn semantic_major(version: i32) -> i32 {
    (version >> 16) & 0xff
}

/// A packed semantic version as `major.minor.patch`.
pub fn semantic_version_string(version: i32) -> String {
    format!(
        "{}.{}.{}",
        semantic_major(version),
        (version >> 8) & 0xff,
        version & 0xff
    )
}

/// Length of the message header.
pub const HEADER_LENGTH: usize = 8;
/// Longest var-data field the schema allows (2^30 bytes).
pub const MAX_VAR_LENGTH: usize = 1 << 30;

/// A decoded message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Root block length as the sender wrote it.
    pub block_length: u16,
    /// Message type.
    pub template_id: u16,
    /// Schema id.
    pub schema_id: u16,
    /// Schema version the sender encoded with.
    pub version: u16,
}

impl Header {
    /// Reads the header at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Header, SbeError> {
        if buf.len() < HEADER_LENGTH {
            return Err(SbeError::new(format!(
                "message of {} bytes is shorter than the {HEADER_LENGTH}-byte SBE header",
                buf.len()
            )));
        }
        let u = |o: usize| u16::from_le_bytes([buf[o], buf[o + 1]]);
        Ok(Header {
            block_length: u(0),
            template_id: u(2),
            schema_id: u(4),
            version: u(6),
        })
    }

    /// Writes the header at the start of `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for v in [
            self.block_length,
            self.template_id,
            self.schema_id,
            self.version,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// What was wrong with a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbeError {
    /// Human-readable reason.
    pub message: String,
}

impl SbeError {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> SbeError {
        SbeError {
            message: message.into(),
        }
    }
}

impl fmt::Display for SbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SbeError {}

/// A fixed-width field type of the schema.
pub trait Fixed: Copy {
    /// Bytes it takes.
    const SIZE: usize;
    /// SBE's null value of the type.
    const NULL: Self;
    /// Reads it from `b` (exactly `SIZE` bytes).
    fn read(b: &[u8]) -> Self;
    /// Appends it to `out`.
    fn write(self, out: &mut [u8]);
}

impl Fixed for i64 {
    const SIZE: usize = 8;
    const NULL: i64 = i64::MIN;
    fn read(b: &[u8]) -> i64 {
        i64::from_le_bytes(b.try_into().expect("8 bytes"))
    }
    fn write(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_le_bytes())
    }
}

impl Fixed for i32 {
    const SIZE: usize = 4;
    const NULL: i32 = i32::MIN;
    fn read(b: &[u8]) -> i32 {
        i32::from_le_bytes(b.try_into().expect("4 bytes"))
    }
    fn write(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_le_bytes())
    }
}

impl Fixed for i8 {
    const SIZE: usize = 1;
    const NULL: i8 = i8::MIN;
    fn read(b: &[u8]) -> i8 {
        b[0] as i8
    }
    fn write(self, out: &mut [u8]) {
        out[0] = self as u8
    }
}

impl Fixed for u8 {
    const SIZE: usize = 1;
    const NULL: u8 = u8::MAX;
    fn read(b: &[u8]) -> u8 {
        b[0]
    }
    fn write(self, out: &mut [u8]) {
        out[0] = self
    }
}

/// Reads the message body after the header: fixed fields by offset within
/// the sender's block, var fields in order after it.
pub struct Reader<'a> {
    block: &'a [u8],
    version: u16,
    rest: &'a [u8],
    message: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `buf` (header included) for `message`, which must be
    /// template `template_id` of schema `schema_id`.
    pub fn new(
        buf: &'a [u8],
        message: &'static str,
        template_id: u16,
        schema_id: u16,
    ) -> Result<Reader<'a>, SbeError> {
        let h = Header::decode(buf)?;
        if h.schema_id != schema_id {
            return Err(SbeError::new(format!(
                "{message}: schema id {} is not {schema_id}",
                h.schema_id
            )));
        }
        if h.template_id != template_id {
            return Err(SbeError::new(format!(
                "{message}: template id {} is not {template_id}",
                h.template_id
            )));
        }
        let end = HEADER_LENGTH + h.block_length as usize;
        if buf.len() < end {
            return Err(SbeError::new(format!(
                "{message}: {} bytes cannot hold the header and a {}-byte block",
                buf.len(),
                h.block_length
            )));
        }
        Ok(Reader {
            block: &buf[HEADER_LENGTH..end],
            version: h.version,
            rest: &buf[end..],
            message,
        })
    }

    /// A fixed field at `offset`, or its null value when the sender's
    /// version predates it (`since`) or its block ends before it.
    pub fn fixed<T: Fixed>(&self, offset: usize, since: u16, null: T) -> T {
        if self.version < since || offset + T::SIZE > self.block.len() {
            return null;
        }
        T::read(&self.block[offset..offset + T::SIZE])
    }

    /// The next var field's bytes (empty when the sender's version predates it).
    pub fn var(&mut self, field: &'static str, since: u16) -> Result<&'a [u8], SbeError> {
        if self.version < since {
            return Ok(&[]);
        }
        if self.rest.len() < 4 {
            return Err(SbeError::new(format!(
                "{}: message ends before the length of {field}",
                self.message
            )));
        }
        let len = u32::from_le_bytes(self.rest[..4].try_into().unwrap()) as usize;
        if len > MAX_VAR_LENGTH || self.rest.len() - 4 < len {
            return Err(SbeError::new(format!(
                "{}: {field} claims {len} bytes, {} are left",
                self.message,
                self.rest.len() - 4
            )));
        }
        let bytes = &self.rest[4..4 + len];
        self.rest = &self.rest[4 + len..];
        Ok(bytes)
    }

    /// The next var field as US-ASCII text (the schema's `varAsciiEncoding`).
    pub fn ascii(&mut self, field: &'static str, since: u16) -> Result<String, SbeError> {
        let bytes = self.var(field, since)?;
        if !bytes.is_ascii() {
            return Err(SbeError::new(format!(
                "{}: {field} is not US-ASCII",
                self.message
            )));
        }
        Ok(String::from_utf8(bytes.to_vec()).expect("ASCII is UTF-8"))
    }

    /// The next var field as raw bytes (the schema's `varDataEncoding`).
    pub fn data(&mut self, field: &'static str, since: u16) -> Result<Vec<u8>, SbeError> {
        Ok(self.var(field, since)?.to_vec())
    }

    /// The sender's schema version.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The root block's length as the sender declared it.
    pub fn block_length(&self) -> usize {
        self.block.len()
    }

    /// The next repeating group's dimensions (`blockLength u16`,
    /// `numInGroup u16`): its entries' block length, as the sender declared
    /// it (at least `min_block`, what this side reads of each), and their
    /// count. Read each entry with [`Reader::entry`], then its var fields.
    pub fn group(
        &mut self,
        group: &'static str,
        min_block: usize,
    ) -> Result<(usize, u16), SbeError> {
        let dims = self.take(4, group, "the dimensions")?;
        let block = u16::from_le_bytes([dims[0], dims[1]]) as usize;
        if block < min_block {
            return Err(SbeError::new(format!(
                "{}: {group} has {block}-byte entries, fewer than the {min_block} read",
                self.message
            )));
        }
        Ok((block, u16::from_le_bytes([dims[2], dims[3]])))
    }

    /// The next group entry's block of `block` bytes (from [`Reader::group`]):
    /// read its fields with [`field_at`].
    pub fn entry(&mut self, group: &'static str, block: usize) -> Result<&'a [u8], SbeError> {
        self.take(block, group, "an entry")
    }

    fn take(&mut self, n: usize, group: &str, what: &str) -> Result<&'a [u8], SbeError> {
        if self.rest.len() < n {
            return Err(SbeError::new(format!(
                "{}: the message ends inside {what} of {group}",
                self.message
            )));
        }
        let (bytes, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(bytes)
    }
}

/// A fixed field at `offset` of a block whose length was checked (a group
/// entry of at least the length read).
pub fn field_at<T: Fixed>(block: &[u8], offset: usize) -> T {
    T::read(&block[offset..offset + T::SIZE])
}

/// Appends a var field: its `u32` length, then the bytes.
pub fn put_var(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Declares message types from a schema table. Each message gets a struct
/// with its fields, `TEMPLATE_ID`, `BLOCK_LENGTH`, `encode` (header
/// included, at the schema's current version) and `decode` (any version:
/// see the module documentation).
///
/// ```text
/// Name = template_id, block N {
///     field: i64 @ offset [since V] [null = value],   // fixed fields
/// } var {
///     field: ascii|data [since V],                    // var fields, in order
/// }
/// ```
#[macro_export]
macro_rules! sbe_messages {
    (
        schema $schema_id:expr, version $version:expr;
        $(
            $(#[$doc:meta])*
            $name:ident = $template:literal, block $block:literal {
                $( $(#[$fdoc:meta])* $field:ident : $fty:ident @ $offset:literal
                   $(since $fsince:literal)? $(null = $fnull:expr)? ),* $(,)?
            } var {
                $( $(#[$vdoc:meta])* $vfield:ident : $vkind:ident $(since $vsince:literal)? ),* $(,)?
            }
        )*
    ) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Debug, Default, PartialEq, Eq)]
            pub struct $name {
                $( $(#[$fdoc])* pub $field: $fty, )*
                $( $(#[$vdoc])* pub $vfield: $crate::sbe_messages!(@vtype $vkind), )*
            }

            impl $name {
                /// Template id.
                pub const TEMPLATE_ID: u16 = $template;
                /// Root block length at the schema's current version.
                pub const BLOCK_LENGTH: u16 = $block;

                /// Encodes the message, header included.
                pub fn encode(&self) -> Vec<u8> {
                    let mut out = Vec::with_capacity(
                        $crate::sbe::HEADER_LENGTH + $block as usize + 64,
                    );
                    self.encode_into(&mut out);
                    out
                }

                /// Appends the encoded message, header included, to `out`
                /// (no allocation when `out` has room).
                pub fn encode_into(&self, out: &mut Vec<u8>) {
                    let start = out.len();
                    $crate::sbe::Header {
                        block_length: $block,
                        template_id: $template,
                        schema_id: $schema_id,
                        version: $version,
                    }
                    .encode(out);
                    out.resize(start + $crate::sbe::HEADER_LENGTH + $block as usize, 0);
                    let _block = &mut out[start + $crate::sbe::HEADER_LENGTH..];
                    $(
                        $crate::sbe::Fixed::write(
                            self.$field,
                            &mut _block[$offset..$offset + <$fty as $crate::sbe::Fixed>::SIZE],
                        );
                    )*
                    $(
                        $crate::sbe_messages!(@put out, self.$vfield, $vkind);
                    )*
                }

                /// Decodes a message of this type (header included).
                pub fn decode(buf: &[u8]) -> Result<$name, $crate::sbe::SbeError> {
                    #[allow(unused_mut)]
                    let mut r = $crate::sbe::Reader::new(
                        buf,
                        stringify!($name),
                        $template,
                        $schema_id,
                    )?;
                    $(
                        let $field = r.fixed::<$fty>(
                            $offset,
                            $crate::sbe_messages!(@since $($fsince)?),
                            $crate::sbe_messages!(@null $fty $(, $fnull)?),
                        );
                    )*
                    $(
                        let $vfield = $crate::sbe_messages!(
                            @get r, $vkind, stringify!($vfield), $crate::sbe_messages!(@since $($vsince)?)
                        )?;
                    )*
                    Ok($name { $($field,)* $($vfield,)* })
                }
            }
        )*

        /// The name of the message with `template_id` in this schema, as
        /// Aeron names it (`None` for an id the schema does not have).
        pub fn template_name(template_id: u16) -> Option<&'static str> {
            match template_id {
                $( $template => Some(stringify!($name)), )*
                _ => None,
            }
        }
    };
    (@vtype ascii) => { String };
    (@vtype data) => { Vec<u8> };
    (@put $out:ident, $v:expr, ascii) => { $crate::sbe::put_var($out, $v.as_bytes()) };
    (@put $out:ident, $v:expr, data) => { $crate::sbe::put_var($out, &$v) };
    (@get $r:ident, ascii, $name:expr, $since:expr) => { $r.ascii($name, $since) };
    (@get $r:ident, data, $name:expr, $since:expr) => { $r.data($name, $since) };
    (@since) => { 0 };
    (@since $v:literal) => { $v };
    (@null $t:ident) => { <$t as $crate::sbe::Fixed>::NULL };
    (@null $t:ident, $v:expr) => { $v };
}
