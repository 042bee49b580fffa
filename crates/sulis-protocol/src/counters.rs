//! The counters contract of the CnC file: counter type ids, system counter
//! ids and labels, and the layout of stream counter keys and labels.
//!
//! This is the one copy. The driver allocates counters from it, the client
//! finds its heartbeat and subscriber positions with it, and the Python tools
//! read it through `sulis._native` (`counter_types()`, `system_counters()`,
//! `parse_stream_counter_key()`). Ids and labels follow Aeron's
//! `SystemCounterDescriptor` and `AeronCounters`, so dashboards built for
//! Aeron read sulis the same way. The Archive (recording positions, type
//! 100 and up) and the Cluster add their types here.

/// Counter type id of system counters.
pub const SYSTEM_COUNTER_TYPE_ID: i32 = 0;

/// Counter type ids of per-stream and per-client counters (Aeron's values).
pub mod type_id {
    /// Publisher limit.
    pub const PUBLISHER_LIMIT: i32 = 1;
    /// Sender position.
    pub const SENDER_POSITION: i32 = 2;
    /// Receiver high-water mark.
    pub const RECEIVER_HWM: i32 = 3;
    /// Subscriber position.
    pub const SUBSCRIBER_POSITION: i32 = 4;
    /// Receiver position.
    pub const RECEIVER_POSITION: i32 = 5;
    /// Sender limit.
    pub const SENDER_LIMIT: i32 = 9;
    /// A per-image indicator (Aeron's `PerImageIndicator`): CUBIC's round trip and window.
    pub const PER_IMAGE: i32 = 10;
    /// A receive channel endpoint's status (value: [`super::channel_status`]);
    /// key: the channel (length-prefixed); label `rcv-channel: CHANNEL`.
    pub const RECEIVE_CHANNEL_STATUS: i32 = 7;
    /// The local address a receive channel endpoint is bound to, once its
    /// status is ACTIVE; key: the channel status counter id (i32), the
    /// address's length (i32) and the address (`host:port`), Aeron's
    /// `LocalSocketAddressStatus`; label `rcv-local-sockaddr: ID ADDRESS`.
    pub const LOCAL_SOCKET_ADDRESS: i32 = 14;
    /// Client heartbeat (epoch ms).
    pub const CLIENT_HEARTBEAT: i32 = 11;
    /// Publisher position (sampled).
    pub const PUBLISHER_POSITION: i32 = 12;
    /// Receivers a `min` or `tagged` flow control tracks (Aeron's
    /// `FlowControlReceivers`); stream key.
    pub const FLOW_CONTROL_RECEIVERS: i32 = 17;
    /// Archive: a recording's recorded position ([`super::recording_position_key`]).
    pub const ARCHIVE_RECORDING_POSITION: i32 = 100;
    /// Archive: errors.
    pub const ARCHIVE_ERROR_COUNT: i32 = 101;
    /// Archive: control sessions open.
    pub const ARCHIVE_CONTROL_SESSIONS: i32 = 102;
    /// Archive: an agent's longest duty cycle (ns).
    pub const ARCHIVE_MAX_CYCLE_TIME: i32 = 103;
    /// Archive: duty cycles over the threshold.
    pub const ARCHIVE_CYCLE_TIME_THRESHOLD_EXCEEDED: i32 = 104;
    /// Archive: the recorder's longest write (ns).
    pub const ARCHIVE_RECORDER_MAX_WRITE_TIME: i32 = 105;
    /// Archive: bytes the recorder wrote.
    pub const ARCHIVE_RECORDER_TOTAL_WRITE_BYTES: i32 = 106;
    /// Archive: time the recorder spent writing (ns).
    pub const ARCHIVE_RECORDER_TOTAL_WRITE_TIME: i32 = 107;
    /// Archive: the replayer's longest read (ns).
    pub const ARCHIVE_REPLAYER_MAX_READ_TIME: i32 = 108;
    /// Archive: bytes the replayer read.
    pub const ARCHIVE_REPLAYER_TOTAL_READ_BYTES: i32 = 109;
    /// Archive: time the replayer spent reading (ns).
    pub const ARCHIVE_REPLAYER_TOTAL_READ_TIME: i32 = 110;
    /// Archive: recording sessions running.
    pub const ARCHIVE_RECORDING_SESSIONS: i32 = 111;
    /// Archive: replay sessions running.
    pub const ARCHIVE_REPLAY_SESSIONS: i32 = 112;
    /// Archive: one control session (value: its id).
    pub const ARCHIVE_CONTROL_SESSION: i32 = 113;
    /// Cluster: the consensus module's state (INIT 0, ACTIVE 1, SUSPENDED
    /// 2, SNAPSHOT 3, ...). Key: the cluster id (i32), as for 201 to 205.
    pub const CLUSTER_MODULE_STATE: i32 = 200;
    /// Cluster: the member's role (FOLLOWER 0, CANDIDATE 1, LEADER 2).
    pub const CLUSTER_NODE_ROLE: i32 = 201;
    /// Cluster: the control toggle an operator sets (NEUTRAL 1, SUSPEND 2,
    /// RESUME 3, SNAPSHOT 4, ...) and the leader acts on.
    pub const CLUSTER_CONTROL_TOGGLE: i32 = 202;
    /// Cluster: how far the log is committed.
    pub const CLUSTER_COMMIT_POSITION: i32 = 203;
    /// Cluster: what a starting member recovers from (while it starts).
    pub const CLUSTER_RECOVERY_STATE: i32 = 204;
    /// Cluster: snapshots taken since the module started.
    pub const CLUSTER_SNAPSHOT_COUNT: i32 = 205;
    /// Cluster: the election's state (Aeron's `ElectionState` codes: INIT
    /// 0, CANVASS 1, ... LEADER_READY 8, ... CLOSED 17); CLOSED between
    /// elections. Key: the cluster id (i32).
    pub const CLUSTER_ELECTION_STATE: i32 = 207;
    /// Cluster: client sessions the leader closed for silence (TIMEOUT)
    /// since the module started. Key: the cluster id (i32).
    pub const CLUSTER_TIMED_OUT_CLIENT_COUNT: i32 = 213;
    /// Cluster: elections this member began since it started (one for the
    /// term a single member opens). Key: the cluster id (i32).
    pub const CLUSTER_ELECTION_COUNT: i32 = 238;
    /// Cluster: the leadership term this member is in (-1 before its
    /// first). Key: the cluster id (i32).
    pub const CLUSTER_LEADERSHIP_TERM_ID: i32 = 239;
    /// Archive (sulis): where the archive keeps its files. Key: the archive
    /// id (i64); value: the archive id; label `Archive Directory -
    /// archiveId=N dir=PATH` (absolute), so a reader on the same host finds
    /// the segment files of an archive it only knows by its control channel.
    pub const SULIS_ARCHIVE_DIRECTORY: i32 = 9100;
    /// sulis: one receiver a `min` or `tagged` flow control tracks. Stream
    /// key; reference id: the receiver id; value: the position it reported
    /// consumed; label `fc-receiver: RECEIVER_ID ADDRESS REG SESSION STREAM
    /// CHANNEL`. The slowest of a publication's holds a `min` stream back.
    pub const SULIS_FLOW_CONTROL_RECEIVER: i32 = 9101;
    /// Cluster (sulis): client messages the leader dropped since the module
    /// started because the log already held them (an exactly-once client's
    /// resends after a leader change). Key: the cluster id (i32).
    pub const SULIS_CLUSTER_DUPLICATE_MESSAGES: i32 = 9102;
    /// Archive (sulis): segment files retention removed since the archive
    /// started (whole recordings' included). Key: the archive id (i64).
    pub const SULIS_ARCHIVE_RETENTION_SEGMENTS: i32 = 9103;
    /// Archive (sulis): recorded bytes retention removed since the archive
    /// started (positions, not file lengths). Key: the archive id (i64).
    pub const SULIS_ARCHIVE_RETENTION_BYTES: i32 = 9104;
    /// Archive (sulis): segment files moved to the object store (uploaded,
    /// verified and removed from the disk) since the archive started. Key:
    /// the archive id (i64).
    pub const SULIS_ARCHIVE_TIER_SEGMENTS: i32 = 9105;
    /// Archive (sulis): bytes of segment files moved to the object store
    /// since the archive started. Key: the archive id (i64).
    pub const SULIS_ARCHIVE_TIER_BYTES: i32 = 9106;
}

/// Values of a channel status counter (Aeron's `ChannelEndpointStatus`).
pub mod channel_status {
    /// Being set up.
    pub const INITIALIZING: i64 = 0;
    /// Bound and working.
    pub const ACTIVE: i64 = 1;
    /// Closing.
    pub const CLOSING: i64 = 2;
    /// Failed (see the driver's error log).
    pub const ERRORED: i64 = -1;
}

/// The key of a local socket address counter: the channel status counter
/// id, then the address as a length-prefixed string.
pub fn local_socket_address_key(channel_status_id: i32, address: &str) -> Vec<u8> {
    let mut key = channel_status_id.to_le_bytes().to_vec();
    key.extend_from_slice(&(address.len() as i32).to_le_bytes());
    key.extend_from_slice(address.as_bytes());
    key
}

/// Reads a local socket address counter's key: (channel status id, address).
pub fn parse_local_socket_address_key(key: &[u8]) -> Option<(i32, String)> {
    let id = i32::from_le_bytes(key.get(0..4)?.try_into().ok()?);
    let n = i32::from_le_bytes(key.get(4..8)?.try_into().ok()?);
    let address = key.get(8..8 + usize::try_from(n).ok()?)?;
    Some((id, String::from_utf8_lossy(address).into_owned()))
}

/// Every counter type id with its short name, as tools print it.
pub const COUNTER_TYPES: &[(i32, &str)] = &[
    (SYSTEM_COUNTER_TYPE_ID, "system"),
    (type_id::PUBLISHER_LIMIT, "pub-lmt"),
    (type_id::SENDER_POSITION, "snd-pos"),
    (type_id::RECEIVER_HWM, "rcv-hwm"),
    (type_id::SUBSCRIBER_POSITION, "sub-pos"),
    (type_id::RECEIVER_POSITION, "rcv-pos"),
    (type_id::SENDER_LIMIT, "snd-lmt"),
    (type_id::PER_IMAGE, "per-image"),
    (type_id::RECEIVE_CHANNEL_STATUS, "rcv-channel"),
    (type_id::LOCAL_SOCKET_ADDRESS, "rcv-local-sockaddr"),
    (type_id::CLIENT_HEARTBEAT, "client-heartbeat"),
    (type_id::PUBLISHER_POSITION, "pub-pos"),
    (type_id::FLOW_CONTROL_RECEIVERS, "fc-receivers"),
    (type_id::SULIS_FLOW_CONTROL_RECEIVER, "fc-receiver"),
    (type_id::ARCHIVE_RECORDING_POSITION, "rec-pos"),
    (type_id::ARCHIVE_ERROR_COUNT, "archive-errors"),
    (
        type_id::ARCHIVE_CONTROL_SESSIONS,
        "archive-control-sessions",
    ),
    (type_id::ARCHIVE_MAX_CYCLE_TIME, "archive-max-cycle-time"),
    (
        type_id::ARCHIVE_CYCLE_TIME_THRESHOLD_EXCEEDED,
        "archive-cycle-time-exceeded",
    ),
    (
        type_id::ARCHIVE_RECORDER_MAX_WRITE_TIME,
        "archive-recorder-max-write-time",
    ),
    (
        type_id::ARCHIVE_RECORDER_TOTAL_WRITE_BYTES,
        "archive-recorder-write-bytes",
    ),
    (
        type_id::ARCHIVE_RECORDER_TOTAL_WRITE_TIME,
        "archive-recorder-write-time",
    ),
    (
        type_id::ARCHIVE_REPLAYER_MAX_READ_TIME,
        "archive-replayer-max-read-time",
    ),
    (
        type_id::ARCHIVE_REPLAYER_TOTAL_READ_BYTES,
        "archive-replayer-read-bytes",
    ),
    (
        type_id::ARCHIVE_REPLAYER_TOTAL_READ_TIME,
        "archive-replayer-read-time",
    ),
    (
        type_id::ARCHIVE_RECORDING_SESSIONS,
        "archive-recording-sessions",
    ),
    (type_id::ARCHIVE_REPLAY_SESSIONS, "archive-replay-sessions"),
    (type_id::ARCHIVE_CONTROL_SESSION, "archive-control-session"),
    (type_id::SULIS_ARCHIVE_DIRECTORY, "archive-directory"),
    (
        type_id::SULIS_ARCHIVE_RETENTION_SEGMENTS,
        "archive-retention-segments",
    ),
    (
        type_id::SULIS_ARCHIVE_RETENTION_BYTES,
        "archive-retention-bytes",
    ),
    (
        type_id::SULIS_ARCHIVE_TIER_SEGMENTS,
        "archive-tier-segments",
    ),
    (type_id::SULIS_ARCHIVE_TIER_BYTES, "archive-tier-bytes"),
    (type_id::CLUSTER_MODULE_STATE, "cluster-module-state"),
    (type_id::CLUSTER_NODE_ROLE, "cluster-node-role"),
    (type_id::CLUSTER_CONTROL_TOGGLE, "cluster-control-toggle"),
    (type_id::CLUSTER_COMMIT_POSITION, "cluster-commit-pos"),
    (type_id::CLUSTER_RECOVERY_STATE, "cluster-recovery-state"),
    (type_id::CLUSTER_SNAPSHOT_COUNT, "cluster-snapshot-count"),
    (type_id::CLUSTER_ELECTION_STATE, "cluster-election-state"),
    (
        type_id::CLUSTER_TIMED_OUT_CLIENT_COUNT,
        "cluster-timed-out-client-count",
    ),
    (type_id::CLUSTER_ELECTION_COUNT, "cluster-election-count"),
    (
        type_id::CLUSTER_LEADERSHIP_TERM_ID,
        "cluster-leadership-term-id",
    ),
    (
        type_id::SULIS_CLUSTER_DUPLICATE_MESSAGES,
        "cluster-duplicate-messages",
    ),
];

/// Whether counters of `type_id` carry a stream key ([`stream_counter_key`]).
pub fn is_stream_counter_type(type_id: i32) -> bool {
    matches!(
        type_id,
        type_id::PUBLISHER_LIMIT
            | type_id::SENDER_POSITION
            | type_id::RECEIVER_HWM
            | type_id::SUBSCRIBER_POSITION
            | type_id::RECEIVER_POSITION
            | type_id::SENDER_LIMIT
            | type_id::PUBLISHER_POSITION
            | type_id::FLOW_CONTROL_RECEIVERS
            | type_id::SULIS_FLOW_CONTROL_RECEIVER
            | type_id::PER_IMAGE
    )
}

macro_rules! system_counters {
    ($($id:literal $name:ident $label:literal),* $(,)?) => {
        /// Ids of the system counters (counter id == system counter id).
        #[allow(missing_docs)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(i32)]
        pub enum SystemCounter { $($name = $id),* }

        impl SystemCounter {
            /// Every system counter in id order.
            pub const ALL: &'static [SystemCounter] = &[$(SystemCounter::$name),*];
            /// The counter's label.
            pub fn label(self) -> &'static str {
                match self { $(SystemCounter::$name => $label),* }
            }
            /// The counter's name as written in code (`BytesSent`).
            pub fn name(self) -> &'static str {
                match self { $(SystemCounter::$name => stringify!($name)),* }
            }
        }
    };
}

system_counters! {
    0 BytesSent "Bytes sent",
    1 BytesReceived "Bytes received",
    2 ReceiverProxyFails "Failed offers to ReceiverProxy",
    3 SenderProxyFails "Failed offers to SenderProxy",
    4 ConductorProxyFails "Failed offers to DriverConductorProxy",
    5 NakMessagesSent "NAKs sent",
    6 NakMessagesReceived "NAKs received",
    7 StatusMessagesSent "Status Messages sent",
    8 StatusMessagesReceived "Status Messages received",
    9 HeartbeatsSent "Heartbeats sent",
    10 HeartbeatsReceived "Heartbeats received",
    11 RetransmitsSent "Retransmits sent",
    12 FlowControlUnderRuns "Flow control under runs",
    13 FlowControlOverRuns "Flow control over runs",
    14 InvalidPackets "Invalid packets",
    15 Errors "Errors",
    16 ShortSends "Short sends",
    17 FreeFails "Failed attempts to free log buffers",
    18 SenderFlowControlLimits "Sender flow control limits, i.e. back-pressure events",
    19 UnblockedPublications "Unblocked Publications",
    20 UnblockedCommands "Unblocked Control Commands",
    21 PossibleTtlAsymmetry "Possible TTL Asymmetry",
    22 ControllableIdleStrategy "ControllableIdleStrategy status",
    23 LossGapFills "Loss gap fills",
    24 ClientTimeouts "Client liveness timeouts",
    25 ResolutionChanges "Resolution changes",
    26 ConductorMaxCycleTime "Conductor max cycle time doing its work in ns",
    27 ConductorCycleTimeThresholdExceeded "Conductor work cycle exceeded threshold count",
    28 SenderMaxCycleTime "Sender max cycle time doing its work in ns",
    29 SenderCycleTimeThresholdExceeded "Sender work cycle exceeded threshold count",
    30 ReceiverMaxCycleTime "Receiver max cycle time doing its work in ns",
    31 ReceiverCycleTimeThresholdExceeded "Receiver work cycle exceeded threshold count",
    32 NameResolverMaxTime "Name resolver max time in ns",
    33 NameResolverTimeThresholdExceeded "Name resolver exceeded threshold count",
    34 SulisVersion "sulis software: version",
    35 BytesCurrentlyMapped "Bytes currently mapped",
    36 RetransmittedBytes "Retransmitted bytes",
    37 RetransmitOverflow "Retransmit Pool Overflow count",
    38 ErrorFramesReceived "Error Frames received",
    39 ErrorFramesSent "Error Frames sent",
    40 PublicationsRevoked "Publications Revoked",
    41 PublicationImagesRevoked "Publication Images Revoked",
    42 ImagesRejected "Images Rejected",
    43 ControlProtocolVersion "Control Protocol Version",
    44 StatusMessagesRejected "Status Messages rejected",
    45 NativeResourceAgentProxyFails "Failed offers to NativeResourceAgentProxy",
    46 SecurityFramesDropped "Transport security: frames dropped",
    47 SecurityUnsealedDropped "Transport security: unsealed or malformed frames dropped",
    48 SecurityAuthFailures "Transport security: frames failing authentication",
    49 SecurityReplaysDropped "Transport security: replayed or stale frames dropped",
    50 SecuritySealingKeyId "Transport security: id of the key sealing",
    51 SecurityKeyringReads "Transport security: keyring reads",
}

/// Room for a counter key in a metadata record.
pub const MAX_KEY_LENGTH: usize = 112;
/// Fixed part of a stream counter key: registration id, session id, stream
/// id, channel length.
const STREAM_KEY_HEADER: usize = 8 + 4 + 4 + 4;

/// Builds a stream counter key: registration id (i64), session id (i32),
/// stream id (i32), channel length (i32) and as much of the channel as fits,
/// all little-endian.
pub fn stream_counter_key(
    registration_id: i64,
    session_id: i32,
    stream_id: i32,
    channel: &str,
) -> Vec<u8> {
    let mut key = Vec::with_capacity(MAX_KEY_LENGTH);
    key.extend_from_slice(&registration_id.to_le_bytes());
    key.extend_from_slice(&session_id.to_le_bytes());
    key.extend_from_slice(&stream_id.to_le_bytes());
    let mut end = channel.len().min(MAX_KEY_LENGTH - STREAM_KEY_HEADER);
    while !channel.is_char_boundary(end) {
        end -= 1;
    }
    let ch = &channel.as_bytes()[..end];
    key.extend_from_slice(&(ch.len() as i32).to_le_bytes());
    key.extend_from_slice(ch);
    key
}

/// A decoded stream counter key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamCounterKey {
    /// Registration id of the publication, subscription or image.
    pub registration_id: i64,
    /// Session id.
    pub session_id: i32,
    /// Stream id.
    pub stream_id: i32,
    /// The channel (cut to fit the key).
    pub channel: String,
}

/// Decodes a stream counter key; `None` if `key` cannot be one.
pub fn parse_stream_counter_key(key: &[u8]) -> Option<StreamCounterKey> {
    if key.len() < STREAM_KEY_HEADER {
        return None;
    }
    let i32_at = |o: usize| i32::from_le_bytes(key[o..o + 4].try_into().unwrap());
    let length = i32_at(16);
    if length < 0 || length as usize > key.len() - STREAM_KEY_HEADER {
        return None;
    }
    let channel = &key[STREAM_KEY_HEADER..STREAM_KEY_HEADER + length as usize];
    Some(StreamCounterKey {
        registration_id: i64::from_le_bytes(key[0..8].try_into().unwrap()),
        session_id: i32_at(8),
        stream_id: i32_at(12),
        channel: String::from_utf8_lossy(channel).into_owned(),
    })
}

/// sulis's tail of a recording position key, after Aeron's fields (whose
/// readers stop at the archive id): this magic, then the archive's
/// `file_sync_level` for the recording's segments (i32): what a recorded
/// position stands for (0: written to the page cache; 1: data synced; 2:
/// data and metadata synced). The consensus module reads it to keep its
/// durability promise.
const SYNC_LEVEL_MAGIC: &[u8; 4] = b"fsyn";

/// Room for the source identity in a recording position key: the key's
/// 112 bytes less the fixed fields, the archive id and sulis's tail.
pub const RECORDING_KEY_SOURCE_IDENTITY_MAX: usize = MAX_KEY_LENGTH - 16 - 8 - 8;

/// Builds the key of a recording position counter (type 100), laid out as
/// Aeron's `RecordingPos`: recording id (i64), session id (i32), source
/// identity length (i32), the source identity (cut to fit), then the
/// archive id (i64, right after the identity: not aligned); then sulis's
/// tail: the recording's `file_sync_level`.
pub fn recording_position_key(
    recording_id: i64,
    session_id: i32,
    source_identity: &str,
    archive_id: i64,
    file_sync_level: u8,
) -> Vec<u8> {
    let mut end = source_identity.len().min(RECORDING_KEY_SOURCE_IDENTITY_MAX);
    while !source_identity.is_char_boundary(end) {
        end -= 1;
    }
    let identity = &source_identity.as_bytes()[..end];
    let mut key = Vec::with_capacity(32 + identity.len());
    key.extend_from_slice(&recording_id.to_le_bytes());
    key.extend_from_slice(&session_id.to_le_bytes());
    key.extend_from_slice(&(identity.len() as i32).to_le_bytes());
    key.extend_from_slice(identity);
    key.extend_from_slice(&archive_id.to_le_bytes());
    key.extend_from_slice(SYNC_LEVEL_MAGIC);
    key.extend_from_slice(&(file_sync_level as i32).to_le_bytes());
    key
}

/// A decoded recording position key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordingPositionKey {
    /// Recording id.
    pub recording_id: i64,
    /// Session id of the recorded image.
    pub session_id: i32,
    /// Source identity of the recorded image (cut to fit the key).
    pub source_identity: String,
    /// Id of the archive recording it.
    pub archive_id: i64,
    /// The archive's `file_sync_level` for the recording (sulis's tail);
    /// None when the key has none (Aeron's archive).
    pub file_sync_level: Option<u8>,
}

/// Decodes a recording position key; `None` if `key` cannot be one.
pub fn parse_recording_position_key(key: &[u8]) -> Option<RecordingPositionKey> {
    if key.len() < 16 {
        return None;
    }
    let length = i32::from_le_bytes(key[12..16].try_into().unwrap());
    if length < 0 || 16 + length as usize + 8 > key.len() {
        return None;
    }
    let end = 16 + length as usize;
    let tail = key.get(end + 8..end + 16);
    Some(RecordingPositionKey {
        recording_id: i64::from_le_bytes(key[0..8].try_into().unwrap()),
        session_id: i32::from_le_bytes(key[8..12].try_into().unwrap()),
        source_identity: String::from_utf8_lossy(&key[16..end]).into_owned(),
        archive_id: i64::from_le_bytes(key[end..end + 8].try_into().unwrap()),
        file_sync_level: tail
            .filter(|t| &t[..4] == SYNC_LEVEL_MAGIC)
            .map(|t| i32::from_le_bytes(t[4..8].try_into().unwrap()).clamp(0, 2) as u8),
    })
}

/// The label of a recording position counter, as Aeron's archive writes it.
pub fn recording_position_label(
    recording_id: i64,
    session_id: i32,
    stream_id: i32,
    stripped_channel: &str,
    archive_id: i64,
) -> String {
    format!("rec-pos: {recording_id} {session_id} {stream_id} {stripped_channel} - archiveId={archive_id}")
}

/// Builds a stream counter label: `"<name>: <regId> <sessionId> <streamId> <channel>"`.
pub fn stream_counter_label(
    name: &str,
    registration_id: i64,
    session_id: i32,
    stream_id: i32,
    channel: &str,
) -> String {
    format!("{name}: {registration_id} {session_id} {stream_id} {channel}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recording_position_key_is_laid_out_as_aerons_and_round_trips() {
        let k = recording_position_key(3, -9, "127.0.0.1:40123", 77, 1);
        assert_eq!(k.len(), 24 + 15 + 8);
        assert_eq!(&k[12..16], &15i32.to_le_bytes());
        assert_eq!(
            &k[31..39],
            &77i64.to_le_bytes(),
            "archive id right after the identity"
        );
        assert_eq!(
            parse_recording_position_key(&k),
            Some(RecordingPositionKey {
                recording_id: 3,
                session_id: -9,
                source_identity: "127.0.0.1:40123".into(),
                archive_id: 77,
                file_sync_level: Some(1),
            })
        );
        // Aeron's key (no tail; the key area's zeros after it): no level.
        let mut aerons = k[..39].to_vec();
        aerons.resize(MAX_KEY_LENGTH, 0);
        assert_eq!(
            parse_recording_position_key(&aerons)
                .unwrap()
                .file_sync_level,
            None
        );
        let long = recording_position_key(1, 1, &"é".repeat(100), -1, 2);
        assert!(long.len() <= MAX_KEY_LENGTH);
        let parsed = parse_recording_position_key(&long).unwrap();
        assert_eq!(
            parsed.source_identity,
            "é".repeat(40),
            "cut on a char boundary"
        );
        assert_eq!((parsed.archive_id, parsed.file_sync_level), (-1, Some(2)));
        assert_eq!(parse_recording_position_key(&long[..20]), None);
        assert_eq!(
            recording_position_label(3, -9, 10, "aeron:ipc", 77),
            "rec-pos: 3 -9 10 aeron:ipc - archiveId=77"
        );
    }

    #[test]
    fn stream_key_round_trips_and_cuts_long_channels_on_a_char_boundary() {
        let k = stream_counter_key(-7, 42, 10, "aeron:ipc");
        assert_eq!(
            parse_stream_counter_key(&k),
            Some(StreamCounterKey {
                registration_id: -7,
                session_id: 42,
                stream_id: 10,
                channel: "aeron:ipc".into()
            })
        );
        let long = format!("aeron:udp?endpoint=h:1|alias={}", "é".repeat(100));
        let k = stream_counter_key(1, 2, 3, &long);
        assert!(k.len() <= MAX_KEY_LENGTH);
        let parsed = parse_stream_counter_key(&k).unwrap();
        assert!(long.starts_with(&parsed.channel));
        assert!(!parsed.channel.contains('\u{fffd}'));
    }

    #[test]
    fn malformed_stream_keys_are_refused() {
        assert_eq!(parse_stream_counter_key(&[0u8; 19]), None);
        let mut k = stream_counter_key(1, 2, 3, "aeron:ipc");
        k[16..20].copy_from_slice(&1000i32.to_le_bytes());
        assert_eq!(parse_stream_counter_key(&k), None);
        k[16..20].copy_from_slice(&(-1i32).to_le_bytes());
        assert_eq!(parse_stream_counter_key(&k), None);
    }

    #[test]
    fn system_counter_ids_are_dense_and_types_named_once() {
        for (i, c) in SystemCounter::ALL.iter().enumerate() {
            assert_eq!(*c as i32, i as i32, "{}", c.label());
        }
        let mut ids: Vec<i32> = COUNTER_TYPES.iter().map(|t| t.0).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), COUNTER_TYPES.len());
        for &(t, _) in COUNTER_TYPES {
            assert_eq!(
                is_stream_counter_type(t),
                (t < 100 || t == type_id::SULIS_FLOW_CONTROL_RECEIVER)
                    && ![
                        SYSTEM_COUNTER_TYPE_ID,
                        type_id::CLIENT_HEARTBEAT,
                        type_id::RECEIVE_CHANNEL_STATUS,
                        type_id::LOCAL_SOCKET_ADDRESS
                    ]
                    .contains(&t),
                "type {t}: stream counters are the driver's (archive types start at 100); client and channel counters are not stream counters"
            );
        }
    }
}
