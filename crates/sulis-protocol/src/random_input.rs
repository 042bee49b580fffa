//! Seeded random-input runner for everything that decodes bytes or text
//! from outside the process: every UDP frame decoder, the channel URI
//! parser, and the client ↔ driver control messages. (No nightly toolchain
//! here for cargo-fuzz; this runs on stable, in CI, in a few seconds.)
//!
//! Inputs are valid encodings with random edits (byte flips, truncation,
//! extension, splices of two inputs, interesting integers written over
//! fields) and plain random bytes. Properties:
//! * no decoder panics, whatever the input;
//! * what decodes re-encodes to something that decodes to the same value;
//! * a URI that parses prints a canonical form that parses to itself, and
//!   a URI that does not parse says so naming a part.
//!
//! Short run (CI): `cargo test -p sulis-protocol random_input`.
//! Long run: `SULIS_FUZZ_ITERATIONS=2000000 cargo test --release -p sulis-protocol random_input -- --nocapture`;
//! `SULIS_FUZZ_SEED=N` repeats a run. A failure prints the seed, the
//! iteration and the input in hex: add that input to `regressions()` below.

use crate::control::{Command, Event};
use crate::frame::test_util::*;
use crate::frame::{decode_datagram, walk_data_frames, Frame};
use crate::uri::ChannelUri;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn iterations() -> u64 {
    std::env::var("SULIS_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn seed() -> u64 {
    std::env::var("SULIS_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5u64 << 40 | 0x1157)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Integers that sit on the edges decoders get wrong.
const INTERESTING: [i64; 12] = [
    0,
    1,
    -1,
    31,
    32,
    33,
    i32::MAX as i64,
    i32::MIN as i64,
    65_535,
    65_536,
    i64::MAX,
    i64::MIN,
];

/// One random edit of `input`, using `other` for splices.
fn mutate(rng: &mut XorShift, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    let edits = 1 + rng.below(4);
    for _ in 0..edits {
        match rng.below(7) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len() as u64) as usize;
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = rng.below(out.len() as u64) as usize;
                out[i] = rng.next_u8();
            }
            2 => {
                let keep = rng.below(out.len() as u64 + 1) as usize;
                out.truncate(keep);
            }
            3 => {
                let n = rng.below(64) as usize;
                let mut extra = vec![0u8; n];
                rng.fill(&mut extra);
                out.extend_from_slice(&extra);
            }
            4 if !other.is_empty() => {
                let cut = rng.below(out.len() as u64 + 1) as usize;
                let from = rng.below(other.len() as u64) as usize;
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            5 if out.len() >= 4 => {
                // An interesting value over a 4- or 8-byte field, aligned as
                // the wire formats align theirs.
                let v = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
                let wide = rng.below(2) == 0 && out.len() >= 8;
                let width = if wide { 8 } else { 4 };
                let slots = (out.len() - width) / 4 + 1;
                let at = rng.below(slots as u64) as usize * 4;
                if wide {
                    out[at..at + 8].copy_from_slice(&v.to_le_bytes());
                } else {
                    out[at..at + 4].copy_from_slice(&(v as i32).to_le_bytes());
                }
            }
            _ => {
                let n = rng.below(96) as usize;
                out = vec![0u8; n];
                rng.fill(&mut out);
            }
        }
    }
    out
}

/// Runs `check` on every input, reporting any panic with what reproduces it.
fn run(target: &str, mut next: impl FnMut(&mut XorShift) -> Vec<u8>, check: impl Fn(&[u8])) {
    let (seed, n) = (seed(), iterations());
    let mut rng = XorShift::new(seed ^ target.len() as u64);
    for input in regressions(target) {
        check(&input);
    }
    for i in 0..n {
        let input = next(&mut rng);
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(&input))) {
            let what = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!(
                "{target}: seed {seed}, iteration {i}: {what}\ninput ({} bytes): {}",
                input.len(),
                hex(&input)
            );
        }
    }
}

/// Inputs that once failed (or that a reviewer wanted pinned), per target.
fn regressions(target: &str) -> Vec<Vec<u8>> {
    match target {
        "frames" => vec![
            vec![],
            vec![0u8; 8],
            vec![0u8; 32],
            // A PAD header claiming a huge length in a short datagram.
            [&(i32::MAX).to_le_bytes()[..], &[0, 0xC0, 0, 0], &[0u8; 24]].concat(),
        ],
        "uri" => [
            "",
            "?",
            "?aeron:ipc",
            "aeron:",
            "aeron:udp?",
            "aeron:udp?endpoint=[",
            "aeron:ipc?|",
            "aeron:udp?endpoint=:",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect(),
        _ => vec![vec![], vec![0xFF; 3]],
    }
}

fn encoded_frames(rng: &mut XorShift) -> Vec<u8> {
    let mut buf = vec![0u8; 2048];
    let n = match rng.below(7) {
        0 => random_setup(rng).encode(&mut buf),
        1 => random_status(rng).encode(&mut buf),
        2 => random_nak(rng).encode(&mut buf),
        3 => random_rttm(rng).encode(&mut buf),
        4 => random_error(rng).encode(&mut buf),
        5 => random_rsp_setup(rng).encode(&mut buf),
        _ => crate::frame::resolution::encode_resolution_frame(
            &random_resolution_entries(rng),
            &mut buf,
        ),
    };
    buf.truncate(n);
    buf
}

/// A valid DATA datagram: one or more frames of a 64 KiB term, back to back.
fn data_datagram(rng: &mut XorShift) -> Vec<u8> {
    use crate::frame::DataHeader;
    let (session, stream, term_id) = (rng.next_i32(), rng.next_i32(), rng.next_i32());
    let mut offset = (rng.below(1024) * 32) as i32;
    let mut out = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let payload = rng.below(100) as usize;
        let header = DataHeader {
            frame_length: 32 + payload as i32,
            flags: crate::frame::UNFRAGMENTED,
            frame_type: crate::frame::HDR_TYPE_DATA,
            term_offset: offset,
            session_id: session,
            stream_id: stream,
            term_id,
            reserved_value: rng.next_i64(),
        };
        let mut frame = vec![0u8; (32 + payload + 31) & !31];
        header.encode(&mut frame);
        rng.fill(&mut frame[32..32 + payload]);
        offset += frame.len() as i32;
        out.extend_from_slice(&frame);
    }
    out
}

#[test]
fn random_input_frames_never_panic_and_round_trip() {
    let mut previous = Vec::new();
    run(
        "frames",
        |rng| {
            let valid = if rng.below(3) == 0 {
                data_datagram(rng)
            } else {
                encoded_frames(rng)
            };
            let input = if rng.below(8) == 0 {
                valid.clone()
            } else {
                mutate(rng, &valid, &previous)
            };
            previous = valid;
            input
        },
        |input| {
            let _ = walk_data_frames(input, 64 * 1024);
            let Ok(frame) = decode_datagram(input) else {
                return;
            };
            if let Frame::Error(f) = &frame {
                // Invalid UTF-8 is decoded lossily (U+FFFD, 3 bytes each) and
                // may then exceed what encode keeps: not a round-trip case.
                if f.error_message.len() > crate::frame::ErrorFrame::MAX_MESSAGE_LENGTH {
                    return;
                }
            }
            let mut buf = vec![0u8; 64 * 1024];
            let n = match &frame {
                Frame::Setup(f) => f.encode(&mut buf),
                Frame::Status(f) => f.encode(&mut buf),
                Frame::Nak(f) => f.encode(&mut buf),
                Frame::Rttm(f) => f.encode(&mut buf),
                Frame::Error(f) => f.encode(&mut buf),
                Frame::RspSetup(f) => f.encode(&mut buf),
                Frame::Resolution { entries } => {
                    crate::frame::resolution::encode_resolution_frame(entries, &mut buf)
                }
                // DATA/PAD: the first header, re-encoded in place, reads back the same.
                Frame::Data { header, .. } | Frame::Heartbeat(header) | Frame::Pad(header) => {
                    let mut copy = input.to_vec();
                    header.encode(&mut copy);
                    assert_eq!(
                        decode_datagram(&copy).ok(),
                        Some(frame.clone()),
                        "round trip"
                    );
                    return;
                }
            };
            let again = decode_datagram(&buf[..n]);
            assert_eq!(
                again.ok(),
                Some(frame),
                "a decoded frame re-encodes to itself"
            );
        },
    );
}

const GOOD_URIS: [&str; 8] = [
    "aeron:ipc",
    "aeron:ipc?term-length=64k|mtu=4096|alias=a",
    "aeron:udp?endpoint=localhost:40123|linger=2s",
    "aeron:udp?endpoint=[::1]:40123|session-id=-17|eos=false",
    "aeron:udp?endpoint=224.10.9.7:40456|interface=192.168.1.0/24|ttl=16",
    "aeron:udp?control-mode=manual|tags=7,-8",
    "aeron-spy:aeron:udp?endpoint=localhost:40123",
    "aeron:ipc?init-term-id=5|term-id=9|term-offset=64|term-length=128k",
];

#[test]
fn random_input_uris_never_panic_and_canonical_forms_are_stable() {
    run(
        "uri",
        |rng| {
            let base = GOOD_URIS[rng.below(GOOD_URIS.len() as u64) as usize].as_bytes();
            let other = GOOD_URIS[rng.below(GOOD_URIS.len() as u64) as usize].as_bytes();
            if rng.below(4) == 0 {
                // Text edits keep the separators the grammar cares about in play.
                let mut s = base.to_vec();
                let i = rng.below(s.len() as u64) as usize;
                let pick = b"?|=:,[]/-.0123456789aeronudpic";
                s.insert(i, pick[rng.below(pick.len() as u64) as usize]);
                s
            } else {
                mutate(rng, base, other)
            }
        },
        |input| {
            let text = String::from_utf8_lossy(input);
            match ChannelUri::parse(&text) {
                Ok(uri) => {
                    let canonical = uri.to_string();
                    let again = ChannelUri::parse(&canonical).unwrap_or_else(|e| {
                        panic!("canonical form {canonical:?} does not parse: {e}")
                    });
                    assert_eq!(again.to_string(), canonical, "canonical form is stable");
                }
                Err(e) => {
                    assert!(!e.part.is_empty() && !e.reason.is_empty(), "{e}");
                    assert!(e.to_string().starts_with("invalid channel URI '"));
                }
            }
        },
    );
}

fn random_command(rng: &mut XorShift) -> Command {
    let (client_id, correlation_id) = (rng.next_i64(), rng.next_i64());
    match rng.below(9) {
        0 => Command::AddPublication {
            client_id,
            correlation_id,
            stream_id: rng.next_i32(),
            channel: rng.ascii(60),
            exclusive: rng.below(2) == 0,
        },
        1 => Command::RemovePublication {
            client_id,
            correlation_id,
            registration_id: rng.next_i64(),
        },
        2 => Command::AddSubscription {
            client_id,
            correlation_id,
            stream_id: rng.next_i32(),
            channel: rng.ascii(60),
        },
        3 => Command::RemoveSubscription {
            client_id,
            correlation_id,
            registration_id: rng.next_i64(),
        },
        4 => Command::AddCounter {
            client_id,
            correlation_id,
            type_id: rng.next_i32(),
            key: {
                let mut k = vec![0u8; rng.below(40) as usize];
                rng.fill(&mut k);
                k
            },
            label: rng.ascii(40),
        },
        5 => Command::RemoveCounter {
            client_id,
            correlation_id,
            registration_id: rng.next_i64(),
        },
        6 => Command::ClientKeepalive { client_id },
        7 => Command::ClientClose { client_id },
        _ => Command::TerminateDriver {
            client_id,
            correlation_id,
            token: {
                let mut t = vec![0u8; rng.below(16) as usize];
                rng.fill(&mut t);
                t
            },
        },
    }
}

fn random_event(rng: &mut XorShift) -> Event {
    let correlation_id = rng.next_i64();
    match rng.below(6) {
        0 => Event::Error {
            correlation_id,
            code: rng.next_i32(),
            message: rng.ascii(60),
        },
        1 => Event::PublicationReady {
            correlation_id,
            registration_id: rng.next_i64(),
            session_id: rng.next_i32(),
            stream_id: rng.next_i32(),
            position_limit_counter_id: rng.next_i32(),
            channel_status_counter_id: rng.next_i32(),
            log_file: rng.ascii(60),
            exclusive: rng.below(2) == 0,
        },
        2 => Event::AvailableImage {
            correlation_id,
            session_id: rng.next_i32(),
            stream_id: rng.next_i32(),
            subscription_registration_id: rng.next_i64(),
            subscriber_position_id: rng.next_i32(),
            log_file: rng.ascii(60),
            source_identity: rng.ascii(30),
        },
        3 => Event::UnavailableImage {
            correlation_id,
            subscription_registration_id: rng.next_i64(),
            stream_id: rng.next_i32(),
            channel: rng.ascii(60),
        },
        4 => Event::CounterReady {
            correlation_id,
            counter_id: rng.next_i32(),
        },
        _ => Event::OperationSuccess { correlation_id },
    }
}

/// The type id rides in the first 4 bytes of a fuzz input, the body after.
fn typed(type_id: i32, body: &[u8]) -> Vec<u8> {
    [&type_id.to_le_bytes()[..], body].concat()
}

fn split(input: &[u8]) -> (i32, &[u8]) {
    if input.len() < 4 {
        return (0, input);
    }
    (
        i32::from_le_bytes(input[..4].try_into().unwrap()),
        &input[4..],
    )
}

#[test]
fn random_input_control_messages_never_panic_and_round_trip() {
    let mut previous = Vec::new();
    run(
        "commands",
        |rng| {
            let (t, body) = random_command(rng).encode();
            let valid = typed(t, &body);
            let input = mutate(rng, &valid, &previous);
            previous = valid;
            // Keep the type id valid most of the time, so bodies get tested.
            if rng.below(4) != 0 && input.len() >= 4 {
                return typed(t, &input[4..]);
            }
            input
        },
        |input| {
            let (t, body) = split(input);
            if let Ok(cmd) = Command::decode(t, body) {
                let (t2, body2) = cmd.encode();
                assert_eq!(Command::decode(t2, &body2).as_ref(), Ok(&cmd), "round trip");
            }
        },
    );
    let mut previous = Vec::new();
    run(
        "events",
        |rng| {
            let (t, body) = random_event(rng).encode();
            let valid = typed(t, &body);
            let input = mutate(rng, &valid, &previous);
            previous = valid;
            if rng.below(4) != 0 && input.len() >= 4 {
                return typed(t, &input[4..]);
            }
            input
        },
        |input| {
            let (t, body) = split(input);
            if let Ok(ev) = Event::decode(t, body) {
                let (t2, body2) = ev.encode();
                assert_eq!(Event::decode(t2, &body2).as_ref(), Ok(&ev), "round trip");
            }
        },
    );
}
