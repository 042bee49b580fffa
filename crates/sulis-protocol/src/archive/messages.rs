//! Aeron Archive's control protocol: schema 101, encoded at version 13
//! (protocol 1.12.0), decoded at any version by the SBE rules.
//!
//! One table, in the schema's terms: for every message its template id,
//! root block length, fixed fields (type, offset, the version that added
//! them) and var fields in order. `C`/`K` in the docs are the control
//! session id and correlation id most messages start with.

use crate::sbe::{semantic_version, Header, SbeError};

/// Schema id of the archive control protocol.
pub const SCHEMA_ID: u16 = 101;
/// Schema version sulis encodes with.
pub const SCHEMA_VERSION: u16 = 13;

/// Protocol semantic version sent in ControlResponse.version and the connect request.
pub const PROTOCOL_VERSION: i32 = semantic_version(1, 12, 0);
/// Oldest protocol version at which a client asks for the archive id.
pub const ARCHIVE_ID_MIN_VERSION: i32 = semantic_version(1, 11, 0);

pub use crate::sbe::semantic_version_string as version_string;

/// Aeron's "none" for ids, positions, lengths and timestamps.
pub const NULL_VALUE: i64 = -1;
/// Replay length: everything, then follow the live recording.
pub const REPLAY_ALL_AND_FOLLOW: i64 = -1;
/// Replay length: everything recorded when the replay starts, then stop.
pub const REPLAY_ALL_AND_STOP: i64 = -2;

/// ControlResponse.code.
pub mod response_code {
    /// Success.
    pub const OK: i32 = 0;
    /// Failure; `relevant_id` holds an [`super::error_code`].
    pub const ERROR: i32 = 1;
    /// End of a listing / recording not found.
    pub const RECORDING_UNKNOWN: i32 = 2;
    /// End of a subscription listing.
    pub const SUBSCRIPTION_UNKNOWN: i32 = 3;
}

/// The error code an ERROR response carries in `relevant_id`.
pub mod error_code {
    /// Anything else.
    pub const GENERIC: i64 = 0;
    /// A listing is already running on the session.
    pub const ACTIVE_LISTING: i64 = 1;
    /// The recording is active.
    pub const ACTIVE_RECORDING: i64 = 2;
    /// A recording subscription exists for the channel and stream.
    pub const ACTIVE_SUBSCRIPTION: i64 = 3;
    /// No such recording subscription.
    pub const UNKNOWN_SUBSCRIPTION: i64 = 4;
    /// No such recording.
    pub const UNKNOWN_RECORDING: i64 = 5;
    /// No such replay.
    pub const UNKNOWN_REPLAY: i64 = 6;
    /// Too many replays.
    pub const MAX_REPLAYS: i64 = 7;
    /// Too many recordings.
    pub const MAX_RECORDINGS: i64 = 8;
    /// The stream cannot extend the recording.
    pub const INVALID_EXTENSION: i64 = 9;
    /// Credentials refused.
    pub const AUTHENTICATION_REJECTED: i64 = 10;
    /// Too little storage space left.
    pub const STORAGE_SPACE: i64 = 11;
    /// No such replication.
    pub const UNKNOWN_REPLICATION: i64 = 12;
    /// The principal may not do this.
    pub const UNAUTHORISED_ACTION: i64 = 13;
    /// The source archive could not be reached.
    pub const REPLICATION_CONNECTION_FAILURE: i64 = 14;
    /// The recording holds nothing.
    pub const EMPTY_RECORDING: i64 = 15;
    /// The position is outside the recording or not frame aligned.
    pub const INVALID_POSITION: i64 = 16;
}

/// SourceLocation.
pub mod source_location {
    /// Record a local publication (spy on it for UDP).
    pub const LOCAL: i32 = 0;
    /// Record what arrives from the network.
    pub const REMOTE: i32 = 1;
}

/// RecordingSignal.
pub mod recording_signal {
    /// A recording started.
    pub const START: i32 = 0;
    /// A recording stopped.
    pub const STOP: i32 = 1;
    /// A recording was extended.
    pub const EXTEND: i32 = 2;
    /// A replication created or replaced the recording.
    pub const REPLICATE: i32 = 3;
    /// A replication merged with the live stream.
    pub const MERGE: i32 = 4;
    /// A replication caught up with its source.
    pub const SYNC: i32 = 5;
    /// Segments were deleted.
    pub const DELETE: i32 = 6;
    /// A replication ended.
    pub const REPLICATE_END: i32 = 7;
}

/// RecordingState (catalog entries).
pub mod recording_state {
    /// Not usable.
    pub const INVALID: i32 = 0;
    /// In use.
    pub const VALID: i32 = 1;
    /// Purged.
    pub const DELETED: i32 = 2;
}

/// BooleanType.
pub mod boolean_type {
    /// False.
    pub const FALSE: i32 = 0;
    /// True.
    pub const TRUE: i32 = 1;
}

crate::sbe_messages! {
    schema SCHEMA_ID, version SCHEMA_VERSION;

    /// Archive → client: the answer to a request.
    ControlResponse = 1, block 32 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        relevant_id: i64 @16,
        code: i32 @24,
        version: i32 @28 since 4 null = 0,
    } var { error_message: ascii }

    /// Client → archive: connect without credentials (before 1.24).
    ConnectRequest = 2, block 16 {
        correlation_id: i64 @0,
        response_stream_id: i32 @8,
        version: i32 @12 since 2 null = 0,
    } var { response_channel: ascii }

    /// Client → archive: end the session.
    CloseSessionRequest = 3, block 8 {
        control_session_id: i64 @0,
    } var {}

    /// Client → archive: record a channel and stream.
    StartRecordingRequest = 4, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        stream_id: i32 @16,
        source_location: i32 @20,
    } var { channel: ascii }

    /// Client → archive: stop recording a channel and stream.
    StopRecordingRequest = 5, block 20 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        stream_id: i32 @16,
    } var { channel: ascii }

    /// Client → archive: replay a recording on a channel and stream.
    ReplayRequest = 6, block 56 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
        position: i64 @24,
        length: i64 @32,
        replay_stream_id: i32 @40,
        file_io_max_length: i32 @44 since 7 null = -1,
        replay_token: i64 @48 since 10 null = -1,
    } var { replay_channel: ascii }

    /// Client → archive: stop a replay.
    StopReplayRequest = 7, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        replay_session_id: i64 @16,
    } var {}

    /// Client → archive: list recordings from an id.
    ListRecordingsRequest = 8, block 28 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        from_recording_id: i64 @16,
        record_count: i32 @24,
    } var {}

    /// Client → archive: list recordings of a channel and stream.
    ListRecordingsForUriRequest = 9, block 32 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        from_recording_id: i64 @16,
        record_count: i32 @24,
        stream_id: i32 @28,
    } var { channel: ascii }

    /// Client → archive: describe one recording.
    ListRecordingRequest = 10, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Client → archive: record a stream onto the end of a recording.
    ExtendRecordingRequest = 11, block 32 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
        stream_id: i32 @24,
        source_location: i32 @28,
    } var { channel: ascii }

    /// Client → archive: the live position of an active recording.
    RecordingPositionRequest = 12, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Client → archive: cut a stopped recording at a position.
    TruncateRecordingRequest = 13, block 32 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
        position: i64 @24,
    } var {}

    /// Client → archive: stop a recording subscription by id.
    StopRecordingSubscriptionRequest = 14, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        subscription_id: i64 @16,
    } var {}

    /// Client → archive: a recording's stop position.
    StopPositionRequest = 15, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Client → archive: the last recording that matches.
    FindLastMatchingRecordingRequest = 16, block 32 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        min_recording_id: i64 @16,
        session_id: i32 @24,
        stream_id: i32 @28,
    } var { channel: ascii }

    /// Client → archive: list recording subscriptions.
    ListRecordingSubscriptionsRequest = 17, block 32 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        pseudo_index: i32 @16,
        subscription_count: i32 @20,
        apply_stream_id: i32 @24,
        stream_id: i32 @28,
    } var { channel: ascii }

    /// Client → archive: a replay bounded by a counter's value.
    BoundedReplayRequest = 18, block 60 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
        position: i64 @24,
        length: i64 @32,
        limit_counter_id: i32 @40,
        replay_stream_id: i32 @44,
        file_io_max_length: i32 @48 since 7 null = -1,
        replay_token: i64 @52 since 10 null = -1,
    } var { replay_channel: ascii }

    /// Client → archive: stop every replay (of one recording, or all with −1).
    StopAllReplaysRequest = 19, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Archive → client (and catalog body): a recording's description.
    RecordingDescriptor = 22, block 80 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
        start_timestamp: i64 @24,
        stop_timestamp: i64 @32,
        start_position: i64 @40,
        stop_position: i64 @48,
        initial_term_id: i32 @56,
        segment_file_length: i32 @60,
        term_buffer_length: i32 @64,
        mtu_length: i32 @68,
        session_id: i32 @72,
        stream_id: i32 @76,
    } var { stripped_channel: ascii, original_channel: ascii, source_identity: ascii }

    /// Archive → client: a recording subscription.
    RecordingSubscriptionDescriptor = 23, block 28 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        subscription_id: i64 @16,
        stream_id: i32 @24,
    } var { stripped_channel: ascii }

    /// Archive → client: something happened to a recording.
    RecordingSignalEvent = 24, block 44 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
        subscription_id: i64 @24,
        position: i64 @32,
        signal: i32 @40,
    } var {}

    /// Client → archive: replicate (before 1.33).
    ReplicateRequest = 50, block 36 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        src_recording_id: i64 @16,
        dst_recording_id: i64 @24,
        src_control_stream_id: i32 @32,
    } var { src_control_channel: ascii, live_destination: ascii }

    /// Client → archive: stop a replication.
    StopReplicationRequest = 51, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        replication_id: i64 @16,
    } var {}

    /// Client → archive: a recording's start position.
    StartPositionRequest = 52, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Client → archive: detach the segments before a position.
    DetachSegmentsRequest = 53, block 32 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
        new_start_position: i64 @24,
    } var {}

    /// Client → archive: delete detached segment files.
    DeleteDetachedSegmentsRequest = 54, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Client → archive: detach and delete the segments before a position.
    PurgeSegmentsRequest = 55, block 32 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
        new_start_position: i64 @24,
    } var {}

    /// Client → archive: attach detached segments again.
    AttachSegmentsRequest = 56, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Client → archive: move segments from one recording to another.
    MigrateSegmentsRequest = 57, block 32 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        src_recording_id: i64 @16,
        dst_recording_id: i64 @24,
    } var {}

    /// Client → archive: connect, with credentials.
    AuthConnectRequest = 58, block 16 {
        correlation_id: i64 @0,
        response_stream_id: i32 @8,
        version: i32 @12 null = 0,
    } var { response_channel: ascii, encoded_credentials: data, client_info: ascii since 12 }

    /// Archive → client: credentials challenge.
    Challenge = 59, block 20 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        version: i32 @16 null = 0,
    } var { encoded_challenge: data }

    /// Client → archive: the answer to a challenge.
    ChallengeResponse = 60, block 16 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
    } var { encoded_credentials: data }

    /// Client → archive: the session is alive (no answer).
    KeepAliveRequest = 61, block 16 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
    } var {}

    /// Client → archive: replicate with tags (before 1.33).
    TaggedReplicateRequest = 62, block 52 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        src_recording_id: i64 @16,
        dst_recording_id: i64 @24,
        channel_tag_id: i64 @32,
        subscription_tag_id: i64 @40,
        src_control_stream_id: i32 @48,
    } var { src_control_channel: ascii, live_destination: ascii }

    /// Client → archive: record, optionally stopping when the stream ends.
    StartRecordingRequest2 = 63, block 28 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        stream_id: i32 @16,
        source_location: i32 @20,
        auto_stop: i32 @24,
    } var { channel: ascii }

    /// Client → archive: extend, optionally stopping when the stream ends.
    ExtendRecordingRequest2 = 64, block 36 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
        stream_id: i32 @24,
        source_location: i32 @28,
        auto_stop: i32 @32,
    } var { channel: ascii }

    /// Client → archive: stop the recording subscription of a recording.
    StopRecordingByIdentityRequest = 65, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Client → archive: replicate a recording from another archive.
    ReplicateRequest2 = 66, block 68 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        src_recording_id: i64 @16,
        dst_recording_id: i64 @24,
        stop_position: i64 @32,
        channel_tag_id: i64 @40,
        subscription_tag_id: i64 @48,
        src_control_stream_id: i32 @56,
        file_io_max_length: i32 @60 since 7 null = -1,
        replication_session_id: i32 @64 since 8 null = -1,
    } var {
        src_control_channel: ascii,
        live_destination: ascii,
        replication_channel: ascii,
        encoded_credentials: data since 8,
        src_response_channel: ascii since 10,
    }

    /// Client → archive: live position if recording, else the stop position.
    MaxRecordedPositionRequest = 67, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Client → archive: the archive's id.
    ArchiveIdRequest = 68, block 16 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
    } var {}

    /// Events stream: a recording started.
    RecordingStarted = 101, block 24 {
        recording_id: i64 @0,
        start_position: i64 @8,
        session_id: i32 @16,
        stream_id: i32 @20,
    } var { channel: ascii, source_identity: ascii }

    /// Events stream: a recording moved on.
    RecordingProgress = 102, block 24 {
        recording_id: i64 @0,
        start_position: i64 @8,
        position: i64 @16,
    } var {}

    /// Events stream: a recording stopped.
    RecordingStopped = 103, block 24 {
        recording_id: i64 @0,
        start_position: i64 @8,
        stop_position: i64 @16,
    } var {}

    /// Client → archive: delete a stopped recording and its files.
    PurgeRecordingRequest = 104, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Client → archive: a token for a replay over a response channel.
    ReplayTokenRequest = 105, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var {}

    /// Archive → client: the session is alive.
    Ping = 106, block 8 {
        control_session_id: i64 @0,
    } var {}

    /// Client → archive: rewrite a recording's channel.
    UpdateChannelRequest = 107, block 24 {
        control_session_id: i64 @0,
        correlation_id: i64 @8,
        recording_id: i64 @16,
    } var { channel: ascii }
}

/// The header of a control message, checked to be of this schema.
pub fn control_header(buf: &[u8]) -> Result<Header, SbeError> {
    let h = Header::decode(buf)?;
    if h.schema_id != SCHEMA_ID {
        return Err(SbeError::new(format!(
            "schema id {} is not the archive control schema ({SCHEMA_ID})",
            h.schema_id
        )));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sbe::HEADER_LENGTH;

    #[test]
    fn should_round_trip_a_message_with_fixed_and_var_fields() {
        let m = ReplicateRequest2 {
            control_session_id: 7,
            correlation_id: 8,
            src_recording_id: 1,
            dst_recording_id: -1,
            stop_position: -1,
            channel_tag_id: -1,
            subscription_tag_id: -1,
            src_control_stream_id: 10,
            file_io_max_length: 1 << 20,
            replication_session_id: -1,
            src_control_channel: "aeron:udp?endpoint=localhost:8010".into(),
            live_destination: String::new(),
            replication_channel: "aeron:udp?endpoint=localhost:0".into(),
            encoded_credentials: vec![1, 2, 3],
            src_response_channel: String::new(),
        };
        let bytes = m.encode();
        assert_eq!(&bytes[..8], &[68, 0, 66, 0, 101, 0, 13, 0]);
        assert_eq!(ReplicateRequest2::decode(&bytes).unwrap(), m);
    }

    #[test]
    fn should_lay_fixed_fields_at_their_schema_offsets() {
        let r = ControlResponse {
            control_session_id: 0x0102030405060708,
            correlation_id: 9,
            relevant_id: -1,
            code: response_code::ERROR,
            version: PROTOCOL_VERSION,
            error_message: "no".into(),
        };
        let b = r.encode();
        assert_eq!(b.len(), HEADER_LENGTH + 32 + 4 + 2);
        assert_eq!(&b[8..16], &0x0102030405060708i64.to_le_bytes());
        assert_eq!(&b[8 + 24..8 + 28], &1i32.to_le_bytes());
        assert_eq!(&b[8 + 28..8 + 32], &68608i32.to_le_bytes());
        assert_eq!(&b[8 + 32..], &[2, 0, 0, 0, b'n', b'o']);
        assert_eq!(version_string(PROTOCOL_VERSION), "1.12.0");
    }

    /// A version-6 ReplayRequest with a 48-byte block (shorter than today's
    /// 56): fields its version predates read as "none" even where its
    /// block has bytes for them, and the channel is found after its block.
    #[test]
    fn should_decode_an_older_version_with_a_shorter_block() {
        let mut b = Vec::new();
        Header {
            block_length: 48,
            template_id: 6,
            schema_id: 101,
            version: 6,
        }
        .encode(&mut b);
        for v in [1i64, 2, 3, 0, -1] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&20i32.to_le_bytes()); // replayStreamId
        b.extend_from_slice(&77i32.to_le_bytes()); // fileIoMaxLength, but version 6 predates it
        crate::sbe::put_var(&mut b, b"aeron:ipc");
        let r = ReplayRequest::decode(&b).unwrap();
        assert_eq!(r.recording_id, 3);
        assert_eq!(r.length, -1);
        assert_eq!(r.replay_stream_id, 20);
        assert_eq!(r.file_io_max_length, -1);
        assert_eq!(r.replay_token, -1);
        assert_eq!(r.replay_channel, "aeron:ipc");
    }

    /// A newer sender with a longer block: its extra bytes are skipped.
    #[test]
    fn should_decode_a_newer_version_with_a_longer_block() {
        let m = KeepAliveRequest {
            control_session_id: 5,
            correlation_id: 6,
        };
        let mut b = m.encode();
        b[0] = 24; // block 24 instead of 16, version 14
        b[6] = 14;
        b.extend_from_slice(&[0xee; 8]);
        assert_eq!(KeepAliveRequest::decode(&b).unwrap(), m);
        let mut c = StartRecordingRequest {
            control_session_id: 1,
            correlation_id: 2,
            stream_id: 3,
            source_location: source_location::REMOTE,
            channel: "aeron:udp?endpoint=localhost:40123".into(),
        }
        .encode();
        c[0] = 32;
        c.splice(8 + 24..8 + 24, [0u8; 8]);
        assert_eq!(
            StartRecordingRequest::decode(&c).unwrap().channel,
            "aeron:udp?endpoint=localhost:40123"
        );
    }

    #[test]
    fn should_name_what_is_wrong_with_a_bad_message() {
        let good = ListRecordingsForUriRequest {
            control_session_id: 1,
            correlation_id: 2,
            from_recording_id: 0,
            record_count: 10,
            stream_id: 1001,
            channel: "aeron:ipc".into(),
        }
        .encode();
        let err = |b: &[u8]| ListRecordingsForUriRequest::decode(b).unwrap_err().message;
        assert!(err(&good[..5]).contains("shorter than the 8-byte SBE header"));
        assert!(err(&good[..20]).contains("cannot hold the header and a 32-byte block"));
        assert!(err(&good[..41]).contains("ends before the length of channel"));
        assert!(err(&good[..good.len() - 1]).contains("channel claims 9 bytes, 8 are left"));
        let mut other_schema = good.clone();
        other_schema[4] = 1;
        assert!(err(&other_schema).contains("schema id 1 is not 101"));
        let mut other_template = good.clone();
        other_template[2] = 8;
        assert!(err(&other_template).contains("template id 8 is not 9"));
        let mut not_ascii = good.clone();
        let n = not_ascii.len();
        not_ascii[n - 1] = 0xc3;
        assert!(err(&not_ascii).contains("channel is not US-ASCII"));
        assert!(control_header(&other_schema)
            .unwrap_err()
            .message
            .contains("not the archive control schema"));
    }

    /// Random bytes never panic a decoder; every accepted message re-encodes
    /// to a message that decodes the same.
    #[test]
    fn should_survive_random_input() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let base = RecordingDescriptor {
            recording_id: 4,
            stripped_channel: "aeron:ipc".into(),
            original_channel: "aeron:ipc?alias=x".into(),
            source_identity: "aeron:ipc".into(),
            ..Default::default()
        }
        .encode();
        for _ in 0..20_000 {
            let mut b = base.clone();
            let flips = 1 + next() % 4;
            for _ in 0..flips {
                let i = (next() % b.len() as u64) as usize;
                b[i] = next() as u8;
            }
            b.truncate((next() % (b.len() as u64 + 1)) as usize);
            if let Ok(d) = RecordingDescriptor::decode(&b) {
                assert_eq!(RecordingDescriptor::decode(&d.encode()).unwrap(), d);
            }
        }
    }
}
