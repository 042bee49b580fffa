//! Channel URIs: `aeron:ipc`, `aeron:udp?endpoint=host:port|…` and spies
//! (`aeron-spy:aeron:udp?…`), parsed, validated and printed back.
//!
//! ```
//! use sulis_protocol::uri::{ChannelUri, Media};
//!
//! let uri = ChannelUri::parse("aeron:udp?endpoint=localhost:40123|term-length=64k|linger=2s")?;
//! assert_eq!(uri.media(), Media::Udp);
//! assert_eq!(uri.get("endpoint"), Some("localhost:40123"));
//! assert_eq!(uri.params().term_length, Some(64 * 1024));
//! assert_eq!(uri.params().linger_ns, Some(2_000_000_000));
//!
//! // The printed form is canonical and parses back to the same value.
//! assert_eq!(ChannelUri::parse(&uri.to_string())?, uri);
//!
//! // Every error names the offending piece of the URI and says why.
//! let err = ChannelUri::parse("aeron:ipc?term-length=100k").unwrap_err();
//! assert_eq!(err.part, "term-length=100k");
//! assert_eq!(
//!     err.to_string(),
//!     "invalid channel URI 'aeron:ipc?term-length=100k': term-length=100k: \
//!      must be a power of two between 64k and 1g"
//! );
//! # Ok::<(), sulis_protocol::uri::UriError>(())
//! ```
//!
//! The grammar (docs/protocol.md §6) is
//!
//! ```text
//! aeron-uri = ["aeron-spy:"] "aeron:" media ["?" param *("|" param)]
//! media     = "udp" | "ipc"
//! param     = key "=" value        key: non-empty, no '='; value: non-empty, no '|'
//! ```
//!
//! [`ChannelUri::parse`] accepts only the parameter keys listed in §6 and checks
//! every value, each on its own (ranges, units, address syntax) and in
//! combination (`init-term-id`/`term-id`/`term-offset` together, `pub-wnd` within
//! half a term, ...). Later duplicate keys override earlier ones; every occurrence
//! must still be valid on its own. The raw text of each value is kept, so
//! [`ChannelUri::get`] and the printed form show what the user wrote (`64k` stays
//! `64k`), while [`ChannelUri::params`] gives the decoded values.
//!
//! The checks here need no I/O: host names are checked for syntax only and are
//! resolved later by whoever opens the socket.
#![warn(missing_docs)]

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::values::{parse_bool, parse_duration_ns, parse_size};

/// Smallest term length, in bytes (64 KiB).
pub const TERM_LENGTH_MIN: u32 = 64 * 1024;
/// Largest term length, in bytes (1 GiB).
pub const TERM_LENGTH_MAX: u32 = 1 << 30;
/// Largest MTU, in bytes: the biggest UDP payload Aeron will send (65504, a multiple of 32).
pub const MAX_UDP_PAYLOAD: u32 = 65504;
/// Longest channel URI accepted, in bytes.
pub const MAX_URI_LENGTH: usize = 4095;

/// Frame alignment: MTUs and term offsets are multiples of this.
const FRAME_ALIGNMENT: u32 = 32;
/// Upper bound of `max-resend` (concurrent retransmit actions).
const MAX_RESEND_LIMIT: u32 = 256;
/// Cap on the maximum message length, whatever the term length.
const MAX_MESSAGE_LENGTH_CAP: u32 = 16 * 1024 * 1024;

const SPY_PREFIX: &str = "aeron-spy:";
const AERON_PREFIX: &str = "aeron:";

/// The transport a channel uses: the part between `aeron:` and `?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Media {
    /// `aeron:ipc` — shared-memory log between processes on one host.
    Ipc,
    /// `aeron:udp` — unicast, multicast or multi-destination UDP.
    Udp,
}

impl Media {
    /// The media as written in a URI: `"ipc"` or `"udp"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Media::Ipc => "ipc",
            Media::Udp => "udp",
        }
    }
}

impl fmt::Display for Media {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// [`ChannelUri::response_correlation_id`] of `response-correlation-id=prototype`
/// (Aeron's internal -2): a response publication that only keeps its control
/// endpoint open.
pub const RESPONSE_CORRELATION_PROTOTYPE: i64 = -2;

/// Value of the `control-mode` parameter (docs/protocol.md §5.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlMode {
    /// `dynamic`: multi-destination-cast whose destinations are learnt from status messages.
    Dynamic,
    /// `manual`: destinations are added and removed explicitly through the API.
    Manual,
    /// `response`: response channel (request/response over one server port).
    Response,
}

impl ControlMode {
    /// The mode as written in a URI: `"dynamic"`, `"manual"` or `"response"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlMode::Dynamic => "dynamic",
            ControlMode::Manual => "manual",
            ControlMode::Response => "response",
        }
    }
}

/// Value of the `security` parameter: what transport security a UDP channel
/// takes (docs/security.md). Unset: the driver's `security` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Security {
    /// `off`: Aeron's frames as they are, whatever the driver's default.
    Off,
    /// `auth`: every datagram authenticated, payloads in the clear.
    Auth,
    /// `encrypt`: every datagram authenticated and encrypted.
    Encrypt,
}

impl Security {
    /// Parses `off`, `auth` or `encrypt`.
    pub fn parse(v: &str) -> Result<Security, String> {
        match v {
            "off" => Ok(Security::Off),
            "auth" => Ok(Security::Auth),
            "encrypt" => Ok(Security::Encrypt),
            _ => Err("must be off, auth or encrypt".to_owned()),
        }
    }

    /// The value as written in a URI.
    pub fn as_str(self) -> &'static str {
        match self {
            Security::Off => "off",
            Security::Auth => "auth",
            Security::Encrypt => "encrypt",
        }
    }
}

impl fmt::Display for ControlMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Value of the `session-id` parameter (docs/protocol.md §5.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionIdParam {
    /// A fixed session id (publication) or the only session accepted (subscription).
    Value(i32),
    /// `tag:<n>`: take the session id, MTU and term length of the publication tagged `n`.
    Tag(i64),
}

impl fmt::Display for SessionIdParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionIdParam::Value(id) => write!(f, "{id}"),
            SessionIdParam::Tag(tag) => write!(f, "tag:{tag}"),
        }
    }
}

/// Why a channel URI was rejected.
///
/// Displays as `invalid channel URI '<uri>': <part>: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriError {
    /// The URI as given (cut short, ending in `...`, when it is over [`MAX_URI_LENGTH`]).
    pub uri: String,
    /// The offending piece: the whole `key=value`, the prefix or the media
    /// (`aeron:tcp`), `parameter <n>` for an empty parameter, or `length`.
    pub part: String,
    /// What is wrong with `part`, in words meant for the user.
    pub reason: String,
}

impl fmt::Display for UriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid channel URI '{}': {}: {}",
            self.uri, self.part, self.reason
        )
    }
}

impl std::error::Error for UriError {}

/// The decoded, validated parameters of a channel URI.
///
/// A field is `None` when its key is absent; defaults are the driver's business.
/// Fields holding text keep the value exactly as written.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct ChannelParams {
    /// `endpoint`: `host:port` — destination (publication) or bind address (subscription).
    pub endpoint: Option<String>,
    /// `interface`: local interface, `ip[:port][/prefix]` (or `ip/prefix:port`).
    pub interface: Option<String>,
    /// `control`: multi-destination-cast control address, `host:port`.
    pub control: Option<String>,
    /// `control-mode`: `dynamic`, `manual` or `response`.
    pub control_mode: Option<ControlMode>,
    /// `ttl`: multicast time-to-live.
    pub ttl: Option<u8>,
    /// `mtu`: MTU in bytes; a multiple of 32, greater than 32, at most [`MAX_UDP_PAYLOAD`].
    pub mtu: Option<u32>,
    /// `term-length`: term length in bytes; a power of two in
    /// [`TERM_LENGTH_MIN`]..=[`TERM_LENGTH_MAX`].
    pub term_length: Option<u32>,
    /// `init-term-id`: initial term id (given together with `term-id` and `term-offset`).
    pub init_term_id: Option<i32>,
    /// `term-id`: active term id to start at.
    pub term_id: Option<i32>,
    /// `term-offset`: offset in the active term to start at, in bytes; 32-aligned.
    pub term_offset: Option<u32>,
    /// `session-id`: a fixed id or `tag:<n>`.
    pub session_id: Option<SessionIdParam>,
    /// `linger`: how long a closed publication lingers, in nanoseconds.
    pub linger_ns: Option<u64>,
    /// `eos`: send end-of-stream when the publication closes.
    pub eos: Option<bool>,
    /// `sparse`: create sparse log buffer files.
    pub sparse: Option<bool>,
    /// `tether`: whether this local subscriber holds back the publisher.
    pub tether: Option<bool>,
    /// `rejoin`: whether a timed-out image may form again.
    pub rejoin: Option<bool>,
    /// `reliable`: NAK lost data (`true`) or fill gaps with padding (`false`).
    pub reliable: Option<bool>,
    /// `group`: force group semantics on or off; `group=infer` (the default) leaves this `None`.
    pub group: Option<bool>,
    /// `tags`: `(channel tag, entity tag)` from `n` or `n,m`.
    pub tags: Option<(i64, Option<i64>)>,
    /// `alias`: free-form label.
    pub alias: Option<String>,
    /// `cc`: congestion control, `static` or `cubic`.
    pub cc: Option<String>,
    /// `fc`: flow control, `max`, `min` or `tagged` with its `,option`s (checked by
    /// [`crate::flow_control_params::FlowControlParams`], kept as text).
    pub fc: Option<String>,
    /// `gtag`: receiver group tag sent in status messages.
    pub gtag: Option<i64>,
    /// `rcv-wnd`: initial receiver window, in bytes.
    pub rcv_wnd: Option<u32>,
    /// `so-sndbuf`: socket send buffer size, in bytes (0 = OS default).
    pub so_sndbuf: Option<u32>,
    /// `so-rcvbuf`: socket receive buffer size, in bytes (0 = OS default).
    pub so_rcvbuf: Option<u32>,
    /// `ssc`: spies simulate a connection.
    pub ssc: Option<bool>,
    /// `nak-delay`: unicast NAK delay, in nanoseconds.
    pub nak_delay_ns: Option<u64>,
    /// `max-resend`: maximum concurrent retransmit actions, 1..=256.
    pub max_resend: Option<u32>,
    /// `pub-wnd`: publication window, in bytes; at least `mtu`, at most half of `term-length`.
    pub pub_wnd: Option<u32>,
    /// `untethered-window-limit-timeout`, in nanoseconds.
    pub untethered_window_limit_timeout_ns: Option<u64>,
    /// `untethered-linger-timeout`, in nanoseconds.
    pub untethered_linger_timeout_ns: Option<u64>,
    /// `untethered-resting-timeout`, in nanoseconds.
    pub untethered_resting_timeout_ns: Option<u64>,
    /// `stream-id`: must equal the stream id given to the API.
    pub stream_id: Option<i32>,
    /// `response-endpoint`: `host:port` for response channels.
    pub response_endpoint: Option<String>,
    /// `response-correlation-id`: a 64-bit integer or `prototype`.
    pub response_correlation_id: Option<String>,
    /// `media-rcv-ts-offset`: byte offset into the payload, or `reserved`.
    pub media_rcv_ts_offset: Option<String>,
    /// `channel-rcv-ts-offset`: byte offset into the payload, or `reserved`.
    pub channel_rcv_ts_offset: Option<String>,
    /// `channel-snd-ts-offset`: byte offset into the payload, or `reserved`.
    pub channel_snd_ts_offset: Option<String>,
    /// `security`: `off`, `auth` or `encrypt` (UDP channels).
    pub security: Option<Security>,
}

/// A parsed and validated channel URI.
///
/// Build one with [`ChannelUri::parse`] (or `str::parse`); print it with
/// `to_string()` to get the canonical form: the prefix, the media and each key
/// once, in the order first seen, with the value that won.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelUri {
    spy: bool,
    media: Media,
    /// Raw `(key, value)` pairs, one per key, in the order keys first appeared.
    entries: Vec<(String, String)>,
    params: ChannelParams,
}

impl ChannelUri {
    /// Parses `uri` and validates its syntax and every parameter value.
    ///
    /// # Errors
    /// A [`UriError`] naming the first problem found; see the module docs for the rules.
    pub fn parse(uri: &str) -> Result<ChannelUri, UriError> {
        let fail = |part: &str, reason: String| UriError {
            uri: uri.to_owned(),
            part: part.to_owned(),
            reason,
        };

        if uri.len() > MAX_URI_LENGTH {
            return Err(UriError {
                uri: abbreviate(uri),
                part: "length".to_owned(),
                reason: format!(
                    "the URI is {} bytes long; the maximum is {MAX_URI_LENGTH}",
                    uri.len()
                ),
            });
        }
        if uri.is_empty() {
            return Err(fail(
                "uri",
                "is empty; expected e.g. 'aeron:ipc' or 'aeron:udp?endpoint=host:port'".to_owned(),
            ));
        }

        let (spy, rest) = match uri.strip_prefix(SPY_PREFIX) {
            Some(rest) => (true, rest),
            None => (false, uri),
        };
        let Some(body) = rest.strip_prefix(AERON_PREFIX) else {
            // Name what stands where "aeron:" should be; the whole URI when
            // nothing comes before the '?' (found by the random-input runner).
            let head = match uri.split('?').next() {
                Some(h) if !h.is_empty() => h,
                _ => uri,
            };
            return Err(fail(
                head,
                "must start with 'aeron:' (or 'aeron-spy:aeron:' for a spy)".to_owned(),
            ));
        };

        let (media_text, query) = match body.split_once('?') {
            Some((media, query)) => (media, Some(query)),
            None => (body, None),
        };
        let media = match media_text {
            "udp" => Media::Udp,
            "ipc" => Media::Ipc,
            "" => {
                return Err(fail(
                    AERON_PREFIX,
                    "missing media; expected 'udp' or 'ipc'".to_owned(),
                ))
            }
            other => {
                return Err(fail(
                    &format!("{AERON_PREFIX}{other}"),
                    format!("unknown media '{other}'; expected 'udp' or 'ipc'"),
                ))
            }
        };
        if spy && media != Media::Udp {
            return Err(fail(
                &format!("{SPY_PREFIX}{AERON_PREFIX}{media}"),
                "a spy can only watch a UDP publication (aeron-spy:aeron:udp?...)".to_owned(),
            ));
        }

        let mut entries: Vec<(String, String)> = Vec::new();
        let mut params = ChannelParams::default();
        if let Some(query) = query {
            for (index, segment) in query.split('|').enumerate() {
                if segment.is_empty() {
                    return Err(fail(
                        &format!("parameter {}", index + 1),
                        "is empty (a stray '|', or '?' with nothing after it)".to_owned(),
                    ));
                }
                let Some((key, value)) = segment.split_once('=') else {
                    return Err(fail(
                        segment,
                        "missing '=' (parameters are written key=value)".to_owned(),
                    ));
                };
                if key.is_empty() {
                    return Err(fail(
                        segment,
                        "missing parameter name before '='".to_owned(),
                    ));
                }
                if param(key).is_none() {
                    return Err(fail(segment, unknown_key_reason(key)));
                }
                if value.is_empty() {
                    return Err(fail(segment, "missing value after '='".to_owned()));
                }
                apply_param(&mut params, key, value).map_err(|reason| fail(segment, reason))?;
                match entries.iter_mut().find(|(k, _)| k == key) {
                    Some(entry) => entry.1 = value.to_owned(),
                    None => entries.push((key.to_owned(), value.to_owned())),
                }
            }
        }

        check_media_rules(spy, media, &entries, &params)
            .and_then(|()| check_combinations(&entries, &params))
            .map_err(|(part, reason)| fail(&part, reason))?;

        Ok(ChannelUri {
            spy,
            media,
            entries,
            params,
        })
    }

    /// The media: [`Media::Udp`] or [`Media::Ipc`].
    pub fn media(&self) -> Media {
        self.media
    }

    /// True when the URI starts with `aeron-spy:`.
    pub fn is_spy(&self) -> bool {
        self.spy
    }

    /// The raw value of parameter `key` as written (the last one when repeated).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The raw `(key, value)` pairs, one per key, in the order keys first appeared.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The decoded parameters, already validated.
    pub fn params(&self) -> &ChannelParams {
        &self.params
    }

    /// `response-correlation-id` as a number: `None` when absent,
    /// [`RESPONSE_CORRELATION_PROTOTYPE`] for `prototype`.
    pub fn response_correlation_id(&self) -> Option<i64> {
        self.params
            .response_correlation_id
            .as_deref()
            .map(|v| match v {
                "prototype" => RESPONSE_CORRELATION_PROTOTYPE,
                n => n.parse().expect("validated when parsed"),
            })
    }

    /// True for `control-mode=response`.
    pub fn is_response(&self) -> bool {
        self.params.control_mode == Some(ControlMode::Response)
    }

    /// This URI with `key=value` (in place of any `key` it has, else added
    /// at the end), checked as any parsed URI.
    ///
    /// # Errors
    /// A [`UriError`] if the value is not valid for the key.
    pub fn with(&self, key: &str, value: &str) -> Result<ChannelUri, UriError> {
        // Not through `without`: a URI may not be valid without `key` (a UDP
        // channel without its endpoint) while it is with the new value.
        let mut u = self.clone();
        match u.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value.to_owned(),
            None => u.entries.push((key.to_owned(), value.to_owned())),
        }
        ChannelUri::parse(&u.to_string())
    }

    /// This URI without the parameters `keys`.
    ///
    /// # Errors
    /// A [`UriError`] if what is left breaks a rule (a UDP channel without
    /// its endpoint, control or tags).
    pub fn without(&self, keys: &[&str]) -> Result<ChannelUri, UriError> {
        self.kept(|k| !keys.contains(&k))
    }

    /// This URI with the parameters `keep` says yes to, checked.
    fn kept(&self, keep: impl Fn(&str) -> bool) -> Result<ChannelUri, UriError> {
        let mut u = self.clone();
        u.entries.retain(|(k, _)| keep(k));
        ChannelUri::parse(&u.to_string())
    }

    /// This URI with `key=value` unless it already names `key` (a default
    /// that a caller's own setting wins over).
    ///
    /// # Errors
    /// A [`UriError`] if the value is not valid for the key.
    pub fn with_default(&self, key: &str, value: &str) -> Result<ChannelUri, UriError> {
        if self.get(key).is_some() {
            Ok(self.clone())
        } else {
            self.with(key, value)
        }
    }

    /// This URI with only the parameters `keys` (in the URI's order).
    ///
    /// # Errors
    /// A [`UriError`] if what is left breaks a rule (a parameter that needs
    /// one of those dropped).
    pub fn only(&self, keys: &[&str]) -> Result<ChannelUri, UriError> {
        self.kept(|k| keys.contains(&k))
    }

    /// The spy of this URI's publication: `aeron-spy:` before it.
    pub fn as_spy(&self) -> ChannelUri {
        ChannelUri {
            spy: true,
            ..self.clone()
        }
    }

    /// The same URI without `aeron-spy:` (the channel of the publication a spy watches).
    ///
    /// Note that a spy URI is not required to name an endpoint, control, tags or a
    /// control mode, so the result may not satisfy the rules for a plain UDP URI.
    pub fn without_spy_prefix(&self) -> ChannelUri {
        ChannelUri {
            spy: false,
            ..self.clone()
        }
    }
}

impl fmt::Display for ChannelUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.spy {
            f.write_str(SPY_PREFIX)?;
        }
        write!(f, "{AERON_PREFIX}{}", self.media)?;
        for (index, (key, value)) in self.entries.iter().enumerate() {
            let separator = if index == 0 { '?' } else { '|' };
            write!(f, "{separator}{key}={value}")?;
        }
        Ok(())
    }
}

impl FromStr for ChannelUri {
    type Err = UriError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ChannelUri::parse(s)
    }
}

/// How one parameter's value is checked and stored.
type Apply = fn(&mut ChannelParams, &str) -> Result<(), String>;

/// A parameter stored as `Some(parse(value)?)` in `field`.
macro_rules! parsed {
    ($field:ident, $parse:expr) => {
        |p: &mut ChannelParams, v: &str| {
            p.$field = Some(($parse)(v)?);
            Ok(())
        }
    };
}

/// A parameter kept as its text in `field`, once `check` accepts it.
macro_rules! checked {
    ($field:ident, $check:expr) => {
        |p: &mut ChannelParams, v: &str| {
            ($check)(v)?;
            p.$field = Some(v.to_owned());
            Ok(())
        }
    };
}

fn any_text(_: &str) -> Result<(), String> {
    Ok(())
}

fn control_mode(v: &str) -> Result<ControlMode, String> {
    match v {
        "dynamic" => Ok(ControlMode::Dynamic),
        "manual" => Ok(ControlMode::Manual),
        "response" => Ok(ControlMode::Response),
        _ => Err("must be dynamic, manual or response".to_owned()),
    }
}

fn congestion_control(v: &str) -> Result<(), String> {
    match v {
        "static" | "cubic" => Ok(()),
        _ => Err("must be static or cubic".to_owned()),
    }
}

fn max_resend(v: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_RESEND_LIMIT).contains(n))
        .ok_or_else(|| format!("must be an integer from 1 to {MAX_RESEND_LIMIT}"))
}

fn response_correlation_id(v: &str) -> Result<(), String> {
    if v == "prototype" || v.parse::<i64>().is_ok_and(|n| n >= -1) {
        Ok(())
    } else {
        Err("must be a number greater than or equal to -1, or 'prototype'".to_owned())
    }
}

/// Every parameter a channel URI accepts (docs/protocol.md §6), with how its
/// value is checked and stored: the one list of keys, so a key cannot be
/// known without a parser or parsed without being known.
const PARAMS: &[(&str, Apply)] = &[
    ("endpoint", checked!(endpoint, check_socket_address)),
    ("interface", checked!(interface, check_interface)),
    ("control", checked!(control, check_socket_address)),
    ("control-mode", parsed!(control_mode, control_mode)),
    (
        "ttl",
        parsed!(ttl, |v: &str| v
            .parse::<u8>()
            .map_err(|_| "must be an integer from 0 to 255".to_owned())),
    ),
    ("mtu", parsed!(mtu, parse_mtu)),
    ("term-length", parsed!(term_length, parse_term_length)),
    ("init-term-id", parsed!(init_term_id, parse_i32)),
    ("term-id", parsed!(term_id, parse_i32)),
    ("term-offset", parsed!(term_offset, parse_term_offset)),
    ("session-id", parsed!(session_id, parse_session_id)),
    ("linger", parsed!(linger_ns, parse_duration_ns)),
    ("eos", parsed!(eos, parse_bool)),
    ("sparse", parsed!(sparse, parse_bool)),
    ("tether", parsed!(tether, parse_bool)),
    ("rejoin", parsed!(rejoin, parse_bool)),
    ("reliable", parsed!(reliable, parse_bool)),
    ("group", |p, v| {
        // `infer` leaves it unset: the media decides.
        p.group = match v {
            "true" => Some(true),
            "false" => Some(false),
            "infer" => None,
            _ => return Err(format!("'{v}' is not valid; use true, false or infer")),
        };
        Ok(())
    }),
    ("tags", parsed!(tags, parse_tags)),
    ("alias", checked!(alias, any_text)),
    ("cc", checked!(cc, congestion_control)),
    ("fc", checked!(fc, check_flow_control)),
    ("gtag", parsed!(gtag, parse_i64)),
    ("rcv-wnd", parsed!(rcv_wnd, parse_window)),
    ("so-sndbuf", parsed!(so_sndbuf, parse_size_u32)),
    ("so-rcvbuf", parsed!(so_rcvbuf, parse_size_u32)),
    ("ssc", parsed!(ssc, parse_bool)),
    ("nak-delay", parsed!(nak_delay_ns, parse_duration_ns)),
    ("max-resend", parsed!(max_resend, max_resend)),
    ("pub-wnd", parsed!(pub_wnd, parse_window)),
    (
        "untethered-window-limit-timeout",
        parsed!(untethered_window_limit_timeout_ns, parse_duration_ns),
    ),
    (
        "untethered-linger-timeout",
        parsed!(untethered_linger_timeout_ns, parse_duration_ns),
    ),
    (
        "untethered-resting-timeout",
        parsed!(untethered_resting_timeout_ns, parse_duration_ns),
    ),
    ("stream-id", parsed!(stream_id, parse_i32)),
    ("security", parsed!(security, Security::parse)),
    (
        "response-endpoint",
        checked!(response_endpoint, check_socket_address),
    ),
    (
        "response-correlation-id",
        checked!(response_correlation_id, response_correlation_id),
    ),
    (
        "media-rcv-ts-offset",
        checked!(media_rcv_ts_offset, check_ts_offset),
    ),
    (
        "channel-rcv-ts-offset",
        checked!(channel_rcv_ts_offset, check_ts_offset),
    ),
    (
        "channel-snd-ts-offset",
        checked!(channel_snd_ts_offset, check_ts_offset),
    ),
];

/// A timestamp offset: a byte offset into the payload, or `reserved`.
fn check_ts_offset(v: &str) -> Result<(), String> {
    if v == "reserved" || v.parse::<i32>().is_ok_and(|n| n >= 0) {
        Ok(())
    } else {
        Err("must be a byte offset (a non-negative integer) or 'reserved'".to_owned())
    }
}

/// The parser of `key`, if it is a parameter.
fn param(key: &str) -> Option<Apply> {
    PARAMS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, apply)| *apply)
}

/// Decodes one `key=value` into `params`; `Err` is the reason it is invalid.
fn apply_param(p: &mut ChannelParams, key: &str, value: &str) -> Result<(), String> {
    match param(key) {
        Some(apply) => apply(p, value),
        None => Err(unknown_key_reason(key)),
    }
}

/// Rules that depend on the media and the spy prefix; `Err` is `(part, reason)`.
fn check_media_rules(
    spy: bool,
    media: Media,
    entries: &[(String, String)],
    p: &ChannelParams,
) -> Result<(), (String, String)> {
    match media {
        Media::Ipc => {
            for key in ["endpoint", "control", "interface"] {
                if let Some(raw) = raw_param(entries, key) {
                    return Err((
                        raw,
                        format!("{key} is only for UDP channels, not aeron:ipc"),
                    ));
                }
            }
        }
        Media::Udp => {
            let addressed = p.endpoint.is_some()
                || p.control.is_some()
                || p.tags.is_some()
                || matches!(
                    p.control_mode,
                    Some(ControlMode::Manual | ControlMode::Response)
                );
            if !spy && !addressed {
                return Err((
                    format!("{AERON_PREFIX}udp"),
                    "a UDP channel needs an endpoint, control, tags, or control-mode=manual|response"
                        .to_owned(),
                ));
            }
        }
    }
    Ok(())
}

/// Rules between parameters (checked on the values that won); `Err` is `(part, reason)`.
fn check_combinations(
    entries: &[(String, String)],
    p: &ChannelParams,
) -> Result<(), (String, String)> {
    // A raw `key=value` for a key known to be present.
    let raw = |key: &str| raw_param(entries, key).unwrap_or_else(|| key.to_owned());

    let start = [
        ("init-term-id", p.init_term_id.is_some()),
        ("term-id", p.term_id.is_some()),
        ("term-offset", p.term_offset.is_some()),
    ];
    let given = start.iter().filter(|(_, present)| *present).count();
    if given != 0 && given != start.len() {
        // Name the first of the three as it appears in the URI.
        let first = entries
            .iter()
            .map(|(k, _)| k.as_str())
            .find(|k| start.iter().any(|(key, _)| key == k))
            .unwrap_or("init-term-id");
        let missing: Vec<&str> = start
            .iter()
            .filter(|(_, present)| !*present)
            .map(|(k, _)| *k)
            .collect();
        return Err((
            raw(first),
            format!(
                "init-term-id, term-id and term-offset must be given together (missing {})",
                missing.join(" and ")
            ),
        ));
    }
    if let (Some(init_term_id), Some(term_id)) = (p.init_term_id, p.term_id) {
        // Term count is a wrapping 32-bit difference, as in position arithmetic.
        let term_count = term_id.wrapping_sub(init_term_id);
        if term_count < 0 {
            return Err((
                raw("term-id"),
                format!(
                    "term-id is behind init-term-id: term-id - init-term-id is {term_count} \
                     (32-bit wrapping) and must not be negative"
                ),
            ));
        }
    }

    if let Some(term_length) = p.term_length {
        if let Some(term_offset) = p.term_offset {
            if term_offset >= term_length {
                return Err((
                    raw("term-offset"),
                    format!("must be less than term-length ({term_length} bytes)"),
                ));
            }
        }
        let max_message_length = (term_length / 8).min(MAX_MESSAGE_LENGTH_CAP);
        if let Some(mtu) = p.mtu {
            if mtu > max_message_length {
                return Err((
                    raw("mtu"),
                    format!(
                        "must not exceed the maximum message length of {max_message_length} bytes \
                         (term-length / 8)"
                    ),
                ));
            }
        }
        if let Some(pub_wnd) = p.pub_wnd {
            if pub_wnd > term_length / 2 {
                return Err((
                    raw("pub-wnd"),
                    format!(
                        "must be at most half of term-length ({} bytes)",
                        term_length / 2
                    ),
                ));
            }
        }
    }
    if let (Some(pub_wnd), Some(mtu)) = (p.pub_wnd, p.mtu) {
        if pub_wnd < mtu {
            return Err((
                raw("pub-wnd"),
                format!("must be at least mtu ({mtu} bytes)"),
            ));
        }
    }
    Ok(())
}

/// `key=value` as written, for the value of `key` that won.
fn raw_param(entries: &[(String, String)], key: &str) -> Option<String> {
    entries
        .iter()
        .find(|(k, _)| k == key)
        .map(|(k, v)| format!("{k}={v}"))
}

fn parse_i32(value: &str) -> Result<i32, String> {
    value
        .parse::<i32>()
        .map_err(|_| format!("'{value}' is not a 32-bit signed integer"))
}

fn parse_i64(value: &str) -> Result<i64, String> {
    value
        .parse::<i64>()
        .map_err(|_| format!("'{value}' is not a 64-bit signed integer"))
}

fn parse_size_u32(value: &str) -> Result<u32, String> {
    let size = parse_size(value)?;
    u32::try_from(size)
        .map_err(|_| format!("'{value}' is too large; the maximum is {} bytes", u32::MAX))
}

fn parse_window(value: &str) -> Result<u32, String> {
    match parse_size_u32(value)? {
        0 => Err("must be greater than zero".to_owned()),
        n => Ok(n),
    }
}

fn parse_mtu(value: &str) -> Result<u32, String> {
    let mtu = parse_size(value)?;
    let valid = mtu > u64::from(FRAME_ALIGNMENT)
        && mtu <= u64::from(MAX_UDP_PAYLOAD)
        && mtu % u64::from(FRAME_ALIGNMENT) == 0;
    if valid {
        // Lossless: bounded by MAX_UDP_PAYLOAD above.
        Ok(mtu as u32)
    } else {
        Err(format!(
            "must be a multiple of {FRAME_ALIGNMENT}, greater than {FRAME_ALIGNMENT} and at most {MAX_UDP_PAYLOAD}"
        ))
    }
}

fn parse_term_length(value: &str) -> Result<u32, String> {
    let length = parse_size(value)?;
    let valid = length.is_power_of_two()
        && (u64::from(TERM_LENGTH_MIN)..=u64::from(TERM_LENGTH_MAX)).contains(&length);
    if valid {
        // Lossless: bounded by TERM_LENGTH_MAX above.
        Ok(length as u32)
    } else {
        Err("must be a power of two between 64k and 1g".to_owned())
    }
}

fn parse_term_offset(value: &str) -> Result<u32, String> {
    let offset = value
        .parse::<u32>()
        .map_err(|_| format!("'{value}' is not a non-negative integer"))?;
    if offset % FRAME_ALIGNMENT != 0 {
        return Err(format!("must be a multiple of {FRAME_ALIGNMENT}"));
    }
    if offset >= TERM_LENGTH_MAX {
        return Err("must be less than the term length (at most 1g)".to_owned());
    }
    Ok(offset)
}

fn parse_session_id(value: &str) -> Result<SessionIdParam, String> {
    match value.strip_prefix("tag:") {
        Some(tag) => tag
            .parse::<i64>()
            .map(SessionIdParam::Tag)
            .map_err(|_| "tag:<n> needs a 64-bit integer tag".to_owned()),
        None => value
            .parse::<i32>()
            .map(SessionIdParam::Value)
            .map_err(|_| "must be a 32-bit signed integer or tag:<n>".to_owned()),
    }
}

fn parse_tags(value: &str) -> Result<(i64, Option<i64>), String> {
    let bad = || "must be <channel-tag> or <channel-tag>,<entity-tag> (64-bit integers)".to_owned();
    let (channel, entity) = match value.split_once(',') {
        Some((channel, entity)) => (channel, Some(entity)),
        None => (value, None),
    };
    let channel = channel.parse::<i64>().map_err(|_| bad())?;
    let entity = match entity {
        Some(entity) => Some(entity.parse::<i64>().map_err(|_| bad())?),
        None => None,
    };
    Ok((channel, entity))
}

fn check_flow_control(value: &str) -> Result<(), String> {
    crate::flow_control_params::FlowControlParams::parse(value).map(|_| ())
}

/// The kind of host in an address, which bounds an interface's prefix length.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HostKind {
    V4,
    V6,
    Name,
}

/// Splits `[v6]rest` or `host rest`, where `rest` starts at the first `:` or `/`
/// after the host. Bare IPv6 (several colons, no brackets) is refused.
fn split_host(value: &str) -> Result<(&str, HostKind, &str), String> {
    if let Some(after_bracket) = value.strip_prefix('[') {
        let Some(close) = after_bracket.find(']') else {
            return Err("missing ']' after the IPv6 address".to_owned());
        };
        let host = &after_bracket[..close];
        let address = match host.split_once('%') {
            // A zone id (`%eth0`) may follow a link-local address.
            Some((address, zone)) if !zone.is_empty() && zone.bytes().all(is_name_byte) => address,
            Some(_) => return Err(format!("'[{host}]' has an invalid zone id")),
            None => host,
        };
        if address.parse::<Ipv6Addr>().is_err() {
            return Err(format!("'{host}' is not a valid IPv6 address"));
        }
        return Ok((host, HostKind::V6, &after_bracket[close + 1..]));
    }
    if value.bytes().filter(|&b| b == b':').count() > 1 {
        return Err("IPv6 addresses must be in brackets, e.g. [::1]:40123".to_owned());
    }
    let end = value.find([':', '/']).unwrap_or(value.len());
    let (host, rest) = value.split_at(end);
    if host.is_empty() {
        return Err("missing host".to_owned());
    }
    let kind = if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        if host.parse::<Ipv4Addr>().is_err() {
            return Err(format!("'{host}' is not a valid IPv4 address"));
        }
        HostKind::V4
    } else {
        check_host_name(host)?;
        HostKind::Name
    };
    Ok((host, kind, rest))
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'
}

fn check_host_name(host: &str) -> Result<(), String> {
    let valid = host.len() <= 253
        && host
            .split('.')
            .all(|label| !label.is_empty() && label.bytes().all(is_name_byte));
    if valid {
        Ok(())
    } else {
        Err(format!("'{host}' is not a valid host name or IP address"))
    }
}

fn parse_port(port: &str) -> Result<u16, String> {
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("port '{port}' is not a number from 0 to 65535"));
    }
    port.parse::<u16>()
        .map_err(|_| format!("port {port} is out of range (0 to 65535)"))
}

/// `host:port`, with IPv6 hosts in brackets.
fn check_socket_address(value: &str) -> Result<(), String> {
    let (_, _, rest) = split_host(value).map_err(|reason| {
        format!("{reason} (expected host:port, IPv6 in brackets, e.g. [::1]:40123)")
    })?;
    match rest.strip_prefix(':') {
        Some(port) => parse_port(port).map(|_| ()),
        None => Err("missing port (expected host:port, e.g. localhost:40123)".to_owned()),
    }
}

/// `host`, with an optional `:port` and an optional `/prefix`, in either order.
fn check_interface(value: &str) -> Result<(), String> {
    let (_, kind, mut rest) = split_host(value)
        .map_err(|reason| format!("{reason} (expected ip[:port][/prefix], IPv6 in brackets)"))?;
    let (mut port, mut prefix) = (None, None);
    while let Some(separator) = rest.chars().next() {
        let body_end = rest[1..].find([':', '/']).map_or(rest.len(), |i| i + 1);
        let body = &rest[1..body_end];
        match separator {
            ':' if port.is_none() => port = Some(body),
            '/' if prefix.is_none() => prefix = Some(body),
            _ => {
                return Err(format!(
                    "unexpected '{separator}' (expected ip[:port][/prefix], IPv6 in brackets)"
                ))
            }
        }
        rest = &rest[body_end..];
    }
    if let Some(port) = port {
        parse_port(port)?;
    }
    if let Some(prefix) = prefix {
        let max = if kind == HostKind::V6 { 128 } else { 32 };
        let valid = !prefix.is_empty()
            && prefix.bytes().all(|b| b.is_ascii_digit())
            && prefix.parse::<u32>().is_ok_and(|n| n <= max);
        if !valid {
            return Err(format!(
                "prefix length '{prefix}' must be a number from 0 to {max}"
            ));
        }
    }
    Ok(())
}

/// The reason for an unknown key, suggesting a known key when one is close.
fn unknown_key_reason(key: &str) -> String {
    if key == "spies-simulate-connection" {
        return "unknown parameter (the URI key for spies simulating a connection is 'ssc')"
            .to_owned();
    }
    let lower = key.to_ascii_lowercase();
    let closest = PARAMS
        .iter()
        .map(|(known, _)| (edit_distance(&lower, known), *known))
        .min();
    match closest {
        Some((distance, known)) if distance <= 2 => {
            format!("unknown parameter (did you mean '{known}'?)")
        }
        _ => "unknown parameter".to_owned(),
    }
}

/// Levenshtein distance between two short strings.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = Vec::with_capacity(b.len() + 1);
        current.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous[j] + usize::from(ca != *cb);
            current.push(substitute.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// The first few characters of an over-long URI, for the error message.
fn abbreviate(uri: &str) -> String {
    const SHOWN: usize = 64;
    match uri.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}...", &uri[..cut]),
        None => uri.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(uri: &str) -> UriError {
        match ChannelUri::parse(uri) {
            Ok(parsed) => panic!("expected '{uri}' to be rejected, got {parsed:?}"),
            Err(err) => err,
        }
    }

    /// Asserts that `uri` is rejected, naming `part`, with `word` in the reason.
    fn assert_rejected(uri: &str, part: &str, word: &str) {
        let err = error(uri);
        assert_eq!(err.part, part, "part for '{uri}': {err}");
        assert!(
            err.reason.contains(word),
            "reason for '{uri}' should mention '{word}': {err}"
        );
    }

    fn params(uri: &str) -> ChannelParams {
        match ChannelUri::parse(uri) {
            Ok(parsed) => parsed.params().clone(),
            Err(err) => panic!("expected '{uri}' to parse: {err}"),
        }
    }

    #[test]
    fn should_round_trip_rich_uri() {
        let text = "aeron:udp?endpoint=224.10.9.7:40456|interface=192.168.1.0/24|ttl=16|mtu=8k\
                    |term-length=1m|init-term-id=-5|term-id=7|term-offset=4096|session-id=tag:99\
                    |linger=250ms|eos=false|sparse=true|tether=false|rejoin=true|reliable=false\
                    |group=true|tags=1,1001|alias=market data|cc=cubic|fc=min,g:/3,t:5s\
                    |gtag=-7|rcv-wnd=256k|so-sndbuf=2m|so-rcvbuf=0|ssc=true|nak-delay=100us\
                    |max-resend=16|pub-wnd=128k|untethered-window-limit-timeout=5s\
                    |untethered-linger-timeout=5s|untethered-resting-timeout=10s|stream-id=1001\
                    |channel-rcv-ts-offset=reserved|channel-snd-ts-offset=8|media-rcv-ts-offset=0";
        let uri = ChannelUri::parse(text).unwrap();
        assert_eq!(uri.to_string(), text);
        assert_eq!(ChannelUri::parse(&uri.to_string()).unwrap(), uri);

        let p = uri.params();
        assert_eq!(p.endpoint.as_deref(), Some("224.10.9.7:40456"));
        assert_eq!(p.interface.as_deref(), Some("192.168.1.0/24"));
        assert_eq!(p.ttl, Some(16));
        assert_eq!(p.mtu, Some(8192));
        assert_eq!(p.term_length, Some(1 << 20));
        assert_eq!(
            (p.init_term_id, p.term_id, p.term_offset),
            (Some(-5), Some(7), Some(4096))
        );
        assert_eq!(p.session_id, Some(SessionIdParam::Tag(99)));
        assert_eq!(p.linger_ns, Some(250_000_000));
        assert_eq!(
            (p.eos, p.sparse, p.tether, p.rejoin, p.reliable, p.group, p.ssc),
            (
                Some(false),
                Some(true),
                Some(false),
                Some(true),
                Some(false),
                Some(true),
                Some(true)
            )
        );
        assert_eq!(p.tags, Some((1, Some(1001))));
        assert_eq!(p.alias.as_deref(), Some("market data"));
        assert_eq!(p.cc.as_deref(), Some("cubic"));
        assert_eq!(p.fc.as_deref(), Some("min,g:/3,t:5s"));
        assert_eq!(p.gtag, Some(-7));
        assert_eq!(
            (p.rcv_wnd, p.so_sndbuf, p.so_rcvbuf),
            (Some(256 * 1024), Some(2 << 20), Some(0))
        );
        assert_eq!(p.nak_delay_ns, Some(100_000));
        assert_eq!((p.max_resend, p.pub_wnd), (Some(16), Some(128 * 1024)));
        assert_eq!(p.untethered_window_limit_timeout_ns, Some(5_000_000_000));
        assert_eq!(p.untethered_linger_timeout_ns, Some(5_000_000_000));
        assert_eq!(p.untethered_resting_timeout_ns, Some(10_000_000_000));
        assert_eq!(p.stream_id, Some(1001));
        assert_eq!(p.channel_rcv_ts_offset.as_deref(), Some("reserved"));
        assert_eq!(p.channel_snd_ts_offset.as_deref(), Some("8"));
        assert_eq!(p.media_rcv_ts_offset.as_deref(), Some("0"));
        assert_eq!(uri.get("mtu"), Some("8k"));
        assert_eq!(uri.get("nope"), None);
        assert_eq!(uri.iter().count(), 35);
    }

    #[test]
    fn should_round_trip_response_and_mdc_uris() {
        for text in [
            "aeron:udp?control=localhost:40123|control-mode=dynamic|endpoint=localhost:0",
            "aeron:udp?control-mode=response|response-correlation-id=prototype",
            "aeron:udp?control-mode=manual|response-endpoint=[::1]:9000|response-correlation-id=-1",
            "aeron:ipc?control-mode=response|response-correlation-id=7",
            "aeron-spy:aeron:udp?endpoint=localhost:40123|session-id=-1",
        ] {
            let uri = ChannelUri::parse(text).unwrap();
            assert_eq!(uri.to_string(), text);
            assert_eq!(text.parse::<ChannelUri>().unwrap(), uri);
        }
    }

    #[test]
    fn should_parse_plain_ipc() {
        let uri = ChannelUri::parse("aeron:ipc").unwrap();
        assert_eq!(uri.media(), Media::Ipc);
        assert!(!uri.is_spy());
        assert_eq!(uri.params(), &ChannelParams::default());
        assert_eq!(uri.to_string(), "aeron:ipc");
    }

    #[test]
    fn should_parse_spy_and_strip_prefix() {
        let uri =
            ChannelUri::parse("aeron-spy:aeron:udp?endpoint=localhost:40123|tether=false").unwrap();
        assert!(uri.is_spy());
        assert_eq!(uri.media(), Media::Udp);
        let plain = uri.without_spy_prefix();
        assert!(!plain.is_spy());
        assert_eq!(
            plain.to_string(),
            "aeron:udp?endpoint=localhost:40123|tether=false"
        );
        assert_eq!(plain.params(), uri.params());
        // A spy need not name an address of its own.
        assert!(ChannelUri::parse("aeron-spy:aeron:udp").unwrap().is_spy());
    }

    #[test]
    fn should_let_later_duplicate_keys_override() {
        let uri = ChannelUri::parse("aeron:ipc?mtu=1408|alias=a|mtu=4096|group=true|group=infer")
            .unwrap();
        assert_eq!(uri.get("mtu"), Some("4096"));
        assert_eq!(uri.params().mtu, Some(4096));
        assert_eq!(uri.params().group, None);
        assert_eq!(uri.to_string(), "aeron:ipc?mtu=4096|alias=a|group=infer");
    }

    #[test]
    fn should_format_error_with_uri_part_and_reason() {
        let err = error("aeron:ipc?term-length=100k");
        assert_eq!(
            err.to_string(),
            "invalid channel URI 'aeron:ipc?term-length=100k': term-length=100k: \
             must be a power of two between 64k and 1g"
        );
        let boxed: Box<dyn std::error::Error> = Box::new(err);
        assert!(boxed.to_string().starts_with("invalid channel URI"));
    }

    #[test]
    fn should_reject_too_long_uri() {
        let long = format!("aeron:ipc?alias={}", "x".repeat(MAX_URI_LENGTH));
        let err = error(&long);
        assert_eq!(err.part, "length");
        assert!(err.reason.contains("maximum"), "{err}");
        assert!(err.uri.len() < 100 && err.uri.ends_with("..."), "{err}");

        let exact = format!("aeron:ipc?alias={}", "x".repeat(MAX_URI_LENGTH - 16));
        assert_eq!(exact.len(), MAX_URI_LENGTH);
        assert!(ChannelUri::parse(&exact).is_ok());
    }

    #[test]
    fn should_reject_missing_prefix() {
        assert_rejected("udp?endpoint=localhost:40123", "udp", "aeron:");
        assert_rejected(
            "aeron-spy:udp?endpoint=localhost:1",
            "aeron-spy:udp",
            "aeron:",
        );
        assert_rejected("Aeron:ipc", "Aeron:ipc", "aeron:");
        assert_rejected("", "uri", "empty");
    }

    #[test]
    fn should_reject_unknown_or_missing_media() {
        assert_rejected("aeron:tcp?endpoint=localhost:40123", "aeron:tcp", "media");
        assert_rejected("aeron:UDP?endpoint=localhost:40123", "aeron:UDP", "media");
        assert_rejected(
            "aeron:udp:endpoint=localhost:1",
            "aeron:udp:endpoint=localhost:1",
            "media",
        );
        assert_rejected("aeron:", "aeron:", "media");
        assert_rejected("aeron:?mtu=1408", "aeron:", "media");
    }

    #[test]
    fn should_reject_spy_of_ipc() {
        assert_rejected("aeron-spy:aeron:ipc", "aeron-spy:aeron:ipc", "UDP");
    }

    #[test]
    fn should_reject_malformed_params() {
        assert_rejected("aeron:ipc?", "parameter 1", "empty");
        assert_rejected("aeron:ipc?mtu=1408|", "parameter 2", "empty");
        assert_rejected("aeron:ipc?mtu=1408||sparse=true", "parameter 2", "empty");
        assert_rejected("aeron:ipc?sparse", "sparse", "'='");
        assert_rejected("aeron:ipc?=true", "=true", "name");
        assert_rejected("aeron:ipc?sparse=", "sparse=", "value");
    }

    #[test]
    fn should_reject_unknown_params() {
        assert_rejected("aeron:ipc?colour=blue", "colour=blue", "unknown parameter");
        let err = error("aeron:ipc?term-lenght=64k");
        assert!(err.reason.contains("unknown parameter"), "{err}");
        assert!(err.reason.contains("'term-length'"), "{err}");
        assert!(err.reason.len() < 80, "reason should be short: {err}");
        assert_rejected(
            "aeron:ipc?spies-simulate-connection=true",
            "spies-simulate-connection=true",
            "ssc",
        );
    }

    #[test]
    fn should_validate_term_length() {
        assert_eq!(
            params("aeron:ipc?term-length=64k").term_length,
            Some(TERM_LENGTH_MIN)
        );
        assert_eq!(
            params("aeron:ipc?term-length=1g").term_length,
            Some(TERM_LENGTH_MAX)
        );
        assert_eq!(
            params("aeron:ipc?term-length=65536").term_length,
            Some(65536)
        );
        assert_rejected(
            "aeron:ipc?term-length=100k",
            "term-length=100k",
            "power of two",
        );
        assert_rejected("aeron:ipc?term-length=32k", "term-length=32k", "64k");
        assert_rejected("aeron:ipc?term-length=2g", "term-length=2g", "1g");
        assert_rejected("aeron:ipc?term-length=big", "term-length=big", "size");
    }

    #[test]
    fn should_validate_mtu() {
        assert_eq!(params("aeron:ipc?mtu=1408").mtu, Some(1408));
        assert_eq!(params("aeron:ipc?mtu=65504").mtu, Some(MAX_UDP_PAYLOAD));
        assert_eq!(params("aeron:ipc?mtu=64").mtu, Some(64));
        assert_rejected("aeron:ipc?mtu=32", "mtu=32", "greater than 32");
        assert_rejected("aeron:ipc?mtu=1400", "mtu=1400", "multiple of 32");
        assert_rejected("aeron:ipc?mtu=65536", "mtu=65536", "65504");
        assert_rejected("aeron:ipc?mtu=-1", "mtu=-1", "size");
        // 64k term: max message length 8 KiB.
        assert_rejected(
            "aeron:ipc?term-length=64k|mtu=9k",
            "mtu=9k",
            "maximum message length",
        );
        assert!(ChannelUri::parse("aeron:ipc?term-length=64k|mtu=8k").is_ok());
    }

    #[test]
    fn should_require_start_position_params_together() {
        assert_rejected("aeron:ipc?init-term-id=1", "init-term-id=1", "together");
        assert_rejected(
            "aeron:ipc?term-id=1|term-offset=0",
            "term-id=1",
            "init-term-id",
        );
        assert_rejected(
            "aeron:ipc?term-offset=0|init-term-id=3",
            "term-offset=0",
            "term-id",
        );
        let p = params("aeron:ipc?init-term-id=3|term-id=5|term-offset=64");
        assert_eq!(
            (p.init_term_id, p.term_id, p.term_offset),
            (Some(3), Some(5), Some(64))
        );
    }

    #[test]
    fn should_check_term_id_against_init_term_id_with_wrapping() {
        assert_rejected(
            "aeron:ipc?init-term-id=10|term-id=9|term-offset=0",
            "term-id=9",
            "negative",
        );
        // i32::MIN - i32::MAX wraps to 1: one term later.
        let wrapped = format!(
            "aeron:ipc?init-term-id={}|term-id={}|term-offset=0",
            i32::MAX,
            i32::MIN
        );
        assert!(ChannelUri::parse(&wrapped).is_ok());
        // 0 - (-2^31) wraps to -2^31: too far ahead.
        let too_far = format!(
            "aeron:ipc?init-term-id={}|term-id=0|term-offset=0",
            i32::MIN
        );
        assert_rejected(&too_far, "term-id=0", "negative");
        assert_rejected(
            "aeron:ipc?init-term-id=x|term-id=0|term-offset=0",
            "init-term-id=x",
            "integer",
        );
        assert_rejected(
            "aeron:ipc?init-term-id=1|term-id=3000000000|term-offset=0",
            "term-id=3000000000",
            "32-bit",
        );
    }

    #[test]
    fn should_validate_term_offset() {
        let base = "aeron:ipc?init-term-id=0|term-id=0";
        assert_rejected(
            &format!("{base}|term-offset=33"),
            "term-offset=33",
            "multiple of 32",
        );
        assert_rejected(
            &format!("{base}|term-offset=-32"),
            "term-offset=-32",
            "non-negative",
        );
        assert_rejected(
            &format!("{base}|term-offset=1073741824"),
            "term-offset=1073741824",
            "less than",
        );
        assert_rejected(
            &format!("{base}|term-offset=65536|term-length=64k"),
            "term-offset=65536",
            "term-length",
        );
        assert!(ChannelUri::parse(&format!("{base}|term-offset=65504|term-length=64k")).is_ok());
    }

    #[test]
    fn should_validate_session_id() {
        assert_eq!(
            params("aeron:ipc?session-id=-17").session_id,
            Some(SessionIdParam::Value(-17))
        );
        assert_eq!(
            params("aeron:ipc?session-id=tag:9000000000").session_id,
            Some(SessionIdParam::Tag(9_000_000_000))
        );
        assert_rejected(
            "aeron:ipc?session-id=3000000000",
            "session-id=3000000000",
            "32-bit",
        );
        assert_rejected("aeron:ipc?session-id=tag:", "session-id=tag:", "tag");
        assert_rejected("aeron:ipc?session-id=tag:x", "session-id=tag:x", "integer");
        assert_rejected("aeron:ipc?session-id=abc", "session-id=abc", "integer");
        assert_eq!(SessionIdParam::Tag(5).to_string(), "tag:5");
        assert_eq!(SessionIdParam::Value(-5).to_string(), "-5");
    }

    #[test]
    fn should_accept_only_strict_booleans() {
        for key in ["eos", "sparse", "tether", "rejoin", "reliable", "ssc"] {
            assert!(ChannelUri::parse(&format!("aeron:ipc?{key}=true")).is_ok());
            assert!(ChannelUri::parse(&format!("aeron:ipc?{key}=false")).is_ok());
            for bad in ["TRUE", "1", "yes", "False"] {
                assert_rejected(
                    &format!("aeron:ipc?{key}={bad}"),
                    &format!("{key}={bad}"),
                    "true or false",
                );
            }
        }
        assert_rejected("aeron:ipc?group=maybe", "group=maybe", "infer");
        assert_eq!(params("aeron:ipc?group=false").group, Some(false));
    }

    #[test]
    fn should_validate_durations_in_uri() {
        assert_eq!(params("aeron:ipc?linger=5s").linger_ns, Some(5_000_000_000));
        assert_eq!(params("aeron:ipc?linger=1500").linger_ns, Some(1500));
        assert_eq!(
            params("aeron:udp?endpoint=h:1|nak-delay=1us").nak_delay_ns,
            Some(1000)
        );
        assert_rejected("aeron:ipc?linger=5 s", "linger=5 s", "duration");
        assert_rejected("aeron:ipc?linger=5h", "linger=5h", "duration");
        assert_rejected(
            "aeron:ipc?untethered-resting-timeout=-1s",
            "untethered-resting-timeout=-1s",
            "duration",
        );
        assert_rejected(
            "aeron:ipc?untethered-linger-timeout=99999999999999999999s",
            "untethered-linger-timeout=99999999999999999999s",
            "too long",
        );
    }

    #[test]
    fn should_validate_enumerated_values() {
        assert_eq!(
            params("aeron:ipc?control-mode=response").control_mode,
            Some(ControlMode::Response)
        );
        assert_rejected(
            "aeron:udp?control-mode=auto",
            "control-mode=auto",
            "dynamic",
        );
        assert_eq!(
            params("aeron:udp?endpoint=h:1|cc=static").cc.as_deref(),
            Some("static")
        );
        assert_rejected("aeron:udp?endpoint=h:1|cc=reno", "cc=reno", "cubic");
        for fc in ["max", "min", "tagged,g:7/2,t:1s", "min,rrwm:4"] {
            assert_eq!(
                params(&format!("aeron:udp?endpoint=h:1|fc={fc}"))
                    .fc
                    .as_deref(),
                Some(fc)
            );
        }
        assert_rejected("aeron:udp?endpoint=h:1|fc=fastest", "fc=fastest", "tagged");
        assert_rejected("aeron:udp?endpoint=h:1|fc=min,", "fc=min,", "empty option");
        // Aeron's default supplier refuses the deprecated `pref` too.
        assert_rejected("aeron:udp?endpoint=h:1|fc=pref", "fc=pref", "tagged");
        assert_rejected(
            "aeron:udp?endpoint=h:1|fc=min,t:soon",
            "fc=min,t:soon",
            "t:soon",
        );
        assert_eq!(ControlMode::Manual.to_string(), "manual");
        assert_eq!(Media::Udp.to_string(), "udp");
    }

    #[test]
    fn should_validate_numbers_and_sizes() {
        assert_eq!(params("aeron:udp?endpoint=h:1|ttl=255").ttl, Some(255));
        assert_rejected("aeron:udp?endpoint=h:1|ttl=256", "ttl=256", "255");
        assert_rejected("aeron:udp?endpoint=h:1|ttl=-1", "ttl=-1", "255");
        assert_eq!(
            params("aeron:udp?endpoint=h:1|rcv-wnd=4194303k").rcv_wnd,
            Some(u32::MAX - 1023)
        );
        assert_rejected(
            "aeron:udp?endpoint=h:1|rcv-wnd=4g",
            "rcv-wnd=4g",
            "too large",
        );
        assert_rejected(
            "aeron:udp?endpoint=h:1|rcv-wnd=0",
            "rcv-wnd=0",
            "greater than zero",
        );
        assert_rejected(
            "aeron:udp?endpoint=h:1|so-sndbuf=5g",
            "so-sndbuf=5g",
            "too large",
        );
        assert_rejected(
            "aeron:udp?endpoint=h:1|so-rcvbuf=lots",
            "so-rcvbuf=lots",
            "size",
        );
        assert_rejected("aeron:ipc?max-resend=0", "max-resend=0", "1 to 256");
        assert_rejected("aeron:ipc?max-resend=257", "max-resend=257", "1 to 256");
        assert_eq!(
            params("aeron:ipc?gtag=-9000000000").gtag,
            Some(-9_000_000_000)
        );
        assert_rejected("aeron:ipc?gtag=1.5", "gtag=1.5", "64-bit");
        assert_eq!(params("aeron:ipc?stream-id=-3").stream_id, Some(-3));
        assert_rejected(
            "aeron:ipc?stream-id=2147483648",
            "stream-id=2147483648",
            "32-bit",
        );
        assert_rejected(
            "aeron:ipc?response-correlation-id=proto",
            "response-correlation-id=proto",
            "prototype",
        );
        assert_rejected(
            "aeron:udp?endpoint=h:1|channel-rcv-ts-offset=-8",
            "channel-rcv-ts-offset=-8",
            "reserved",
        );
    }

    #[test]
    fn should_validate_pub_wnd_against_term_length_and_mtu() {
        assert_eq!(
            params("aeron:ipc?term-length=64k|pub-wnd=32k").pub_wnd,
            Some(32 * 1024)
        );
        assert_rejected(
            "aeron:ipc?term-length=64k|pub-wnd=33k",
            "pub-wnd=33k",
            "half of term-length",
        );
        assert_rejected("aeron:ipc?mtu=8k|pub-wnd=4k", "pub-wnd=4k", "mtu");
        assert_rejected("aeron:ipc?pub-wnd=0", "pub-wnd=0", "greater than zero");
    }

    #[test]
    fn should_validate_tags() {
        assert_eq!(params("aeron:udp?tags=7").tags, Some((7, None)));
        assert_eq!(params("aeron:udp?tags=7,-8").tags, Some((7, Some(-8))));
        assert_rejected("aeron:udp?tags=7,8,9", "tags=7,8,9", "entity-tag");
        assert_rejected("aeron:udp?tags=,8", "tags=,8", "channel-tag");
        assert_rejected("aeron:udp?tags=a", "tags=a", "integers");
    }

    #[test]
    fn should_validate_addresses() {
        for ok in [
            "localhost:40123",
            "127.0.0.1:0",
            "[::1]:40123",
            "[fe80::1%eth0]:65535",
            "my-host.example.com:9",
        ] {
            assert_eq!(
                params(&format!("aeron:udp?endpoint={ok}"))
                    .endpoint
                    .as_deref(),
                Some(ok)
            );
            assert_eq!(
                params(&format!("aeron:udp?control={ok}"))
                    .control
                    .as_deref(),
                Some(ok)
            );
        }
        assert_rejected("aeron:udp?endpoint=localhost", "endpoint=localhost", "port");
        assert_rejected(
            "aeron:udp?endpoint=localhost:",
            "endpoint=localhost:",
            "port",
        );
        assert_rejected(
            "aeron:udp?endpoint=localhost:65536",
            "endpoint=localhost:65536",
            "65535",
        );
        assert_rejected(
            "aeron:udp?endpoint=localhost:http",
            "endpoint=localhost:http",
            "port",
        );
        assert_rejected(
            "aeron:udp?endpoint=::1:40123",
            "endpoint=::1:40123",
            "brackets",
        );
        assert_rejected(
            "aeron:udp?endpoint=[::1:40123",
            "endpoint=[::1:40123",
            "']'",
        );
        assert_rejected("aeron:udp?endpoint=[::g]:1", "endpoint=[::g]:1", "IPv6");
        assert_rejected(
            "aeron:udp?endpoint=256.0.0.1:1",
            "endpoint=256.0.0.1:1",
            "IPv4",
        );
        assert_rejected("aeron:udp?endpoint=:40123", "endpoint=:40123", "host");
        assert_rejected("aeron:udp?control=bad host:1", "control=bad host:1", "host");
        assert_rejected(
            "aeron:udp?endpoint=h:1|response-endpoint=h",
            "response-endpoint=h",
            "port",
        );
    }

    #[test]
    fn should_validate_interfaces() {
        for ok in [
            "192.168.1.1",
            "192.168.1.0/24",
            "192.168.1.1:40123",
            "192.168.1.0:40123/24",
            "192.168.1.0/24:40123",
            "[::1]",
            "[fe80::]/64",
            "[::1]:9/128",
            "eth-host/32",
        ] {
            let uri = format!("aeron:udp?endpoint=224.0.1.1:40456|interface={ok}");
            assert_eq!(params(&uri).interface.as_deref(), Some(ok));
        }
        let base = "aeron:udp?endpoint=224.0.1.1:40456";
        assert_rejected(
            &format!("{base}|interface=10.0.0.0/33"),
            "interface=10.0.0.0/33",
            "0 to 32",
        );
        assert_rejected(
            &format!("{base}|interface=[::]/129"),
            "interface=[::]/129",
            "0 to 128",
        );
        assert_rejected(
            &format!("{base}|interface=10.0.0.0/"),
            "interface=10.0.0.0/",
            "prefix",
        );
        assert_rejected(
            &format!("{base}|interface=10.0.0.1:1:2"),
            "interface=10.0.0.1:1:2",
            "brackets",
        );
        assert_rejected(
            &format!("{base}|interface=10.0.0.1/8/8"),
            "interface=10.0.0.1/8/8",
            "unexpected",
        );
        assert_rejected(
            &format!("{base}|interface=10.0.0.1:99999"),
            "interface=10.0.0.1:99999",
            "65535",
        );
    }

    #[test]
    fn should_require_an_address_for_udp() {
        assert_rejected("aeron:udp", "aeron:udp", "endpoint");
        assert_rejected(
            "aeron:udp?mtu=1408|control-mode=dynamic",
            "aeron:udp",
            "control-mode",
        );
        assert!(ChannelUri::parse("aeron:udp?tags=5").is_ok());
        assert!(ChannelUri::parse("aeron:udp?control-mode=manual").is_ok());
        assert!(ChannelUri::parse("aeron:udp?control-mode=response").is_ok());
        assert!(ChannelUri::parse("aeron:udp?control=localhost:1").is_ok());
    }

    #[test]
    fn should_reject_udp_addresses_on_ipc() {
        assert_rejected(
            "aeron:ipc?endpoint=localhost:1",
            "endpoint=localhost:1",
            "UDP",
        );
        assert_rejected(
            "aeron:ipc?mtu=1408|control=localhost:1",
            "control=localhost:1",
            "UDP",
        );
        assert_rejected("aeron:ipc?interface=10.0.0.1", "interface=10.0.0.1", "UDP");
    }

    #[test]
    fn response_correlation_ids_parse_and_response_channels_are_rebuilt() {
        let uri = ChannelUri::parse("aeron:ipc?response-correlation-id=prototype").unwrap();
        assert_eq!(
            uri.response_correlation_id(),
            Some(RESPONSE_CORRELATION_PROTOTYPE)
        );
        let uri = ChannelUri::parse("aeron:ipc?response-correlation-id=-1").unwrap();
        assert_eq!(uri.response_correlation_id(), Some(-1));
        let uri =
            ChannelUri::parse("aeron:udp?control-mode=response|control=h:2|session-id=5").unwrap();
        assert_eq!(
            uri.with("response-correlation-id", "9")
                .unwrap()
                .to_string(),
            "aeron:udp?control-mode=response|control=h:2|session-id=5|response-correlation-id=9"
        );
        assert_eq!(
            uri.with("session-id", "6")
                .unwrap()
                .without(&["control"])
                .unwrap()
                .to_string(),
            "aeron:udp?control-mode=response|session-id=6"
        );
        assert!(uri.with("session-id", "x").is_err());
        assert!(ChannelUri::parse("aeron:ipc?response-correlation-id=-3").is_err());
    }
}
