//! How the archive names what it records: the stripped channel stored in
//! the catalog (and matched by `list_recordings_for_uri`) and the key that
//! makes one recording subscription per channel and stream.

use crate::uri::{ChannelUri, UriError};

/// Parameters a stripped channel keeps (Aeron Archive's list): what
/// identifies the stream and how to receive it, not publication tuning.
pub const KEPT_PARAMS: &[&str] = &[
    "endpoint",
    "interface",
    "control",
    "control-mode",
    "tags",
    "rejoin",
    "group",
    "tether",
    "fc",
    "gtag",
    "cc",
    "so-rcvbuf",
    "so-sndbuf",
    "rcv-wnd",
    "channel-snd-ts-offset",
    "channel-rcv-ts-offset",
    "media-rcv-ts-offset",
    "session-id",
    "alias",
    "response-correlation-id",
    "response-endpoint",
    "ttl",
    "stream-id",
];

/// The channel with only the [`KEPT_PARAMS`], in the order given (the spy
/// prefix dropped).
pub fn strip_channel(channel: &str) -> Result<String, UriError> {
    // Kept while still a spy's URI, which needs no endpoint; the prefix goes after.
    Ok(ChannelUri::parse(channel)?
        .only(KEPT_PARAMS)?
        .without_spy_prefix()
        .to_string())
}

/// The key of a recording subscription: stream id, media and the
/// parameters that select what is received (`endpoint`, `interface`,
/// `control`, `session-id`, `tags`), so two requests for the same stream
/// share a key however their other parameters differ.
pub fn recording_key(channel: &str, stream_id: i32) -> Result<String, UriError> {
    let uri = ChannelUri::parse(channel)?;
    let mut key = format!("{stream_id}:{}", uri.media().as_str());
    let mut sep = '?';
    for name in ["endpoint", "interface", "control", "session-id", "tags"] {
        if let Some(v) = uri.get(name) {
            key.push(sep);
            key.push_str(name);
            key.push('=');
            key.push_str(v);
            sep = '|';
        }
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_keep_what_identifies_the_stream_and_drop_tuning() {
        assert_eq!(
            strip_channel("aeron:udp?endpoint=localhost:40123|term-length=64k|mtu=8k|alias=ticks")
                .unwrap(),
            "aeron:udp?endpoint=localhost:40123|alias=ticks"
        );
        assert_eq!(
            strip_channel("aeron:ipc?term-length=1m|linger=0").unwrap(),
            "aeron:ipc"
        );
        assert!(strip_channel("aeron:tcp?endpoint=x:1").is_err());
    }

    #[test]
    fn should_key_recordings_by_stream_and_selection() {
        assert_eq!(
            recording_key("aeron:udp?endpoint=localhost:40123|term-length=64k", 7).unwrap(),
            "7:udp?endpoint=localhost:40123"
        );
        assert_eq!(
            recording_key("aeron:ipc?session-id=5|alias=x", 7).unwrap(),
            "7:ipc?session-id=5"
        );
        assert_eq!(recording_key("aeron:ipc", 8).unwrap(), "8:ipc");
    }
}
