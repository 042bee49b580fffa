//! System counters: fixed ids and labels that are never renumbered.
//!
//! The ids and labels follow Aeron's `SystemCounterDescriptor` so that
//! dashboards built for Aeron read sulis the same way. They are allocated
//! first, in id order, so counter id == system counter id.

use sulis_concurrent::counters::{CounterRef, CountersManager};
use sulis_concurrent::AtomicBuffer;

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
    /// Client heartbeat (epoch ms).
    pub const CLIENT_HEARTBEAT: i32 = 11;
    /// Publisher position (sampled).
    pub const PUBLISHER_POSITION: i32 = 12;
}

macro_rules! system_counters {
    ($($id:literal $name:ident $label:literal),* $(,)?) => {
        /// Ids of the system counters.
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
}

/// Handles on every system counter: a view of the counter values (`Copy`, so
/// every agent holds its own without allocating or sharing a reference count).
#[derive(Clone, Copy)]
pub struct SystemCounters {
    values: AtomicBuffer,
}

impl SystemCounters {
    /// Allocates all system counters; they must be the first counters allocated.
    pub fn allocate(counters: &mut CountersManager, now_ms: i64) -> Result<SystemCounters, String> {
        for &c in SystemCounter::ALL {
            let label = if c == SystemCounter::SulisVersion {
                format!("{} {}", c.label(), env!("CARGO_PKG_VERSION"))
            } else {
                c.label().to_string()
            };
            let id = counters.allocate(
                SYSTEM_COUNTER_TYPE_ID,
                &(c as i32).to_le_bytes(),
                &label,
                0,
                0,
                0,
                now_ms,
            )?;
            if id != c as i32 {
                return Err(format!(
                    "system counter '{}' got id {id}, not {}: system counters must be allocated first",
                    c.label(),
                    c as i32
                ));
            }
        }
        let system = SystemCounters {
            values: counters.reader().values_buffer(),
        };
        system
            .get(SystemCounter::ControlProtocolVersion)
            .set_ordered(0x01_00_00);
        // As Aeron: major << 16 | minor << 8 | patch.
        let part = |s: &str| s.parse::<i64>().unwrap_or(0).clamp(0, 255);
        let version = (part(env!("CARGO_PKG_VERSION_MAJOR")) << 16)
            | (part(env!("CARGO_PKG_VERSION_MINOR")) << 8)
            | part(env!("CARGO_PKG_VERSION_PATCH"));
        system.get(SystemCounter::SulisVersion).set_ordered(version);
        Ok(system)
    }

    /// The counter's handle.
    #[inline]
    pub fn get(&self, c: SystemCounter) -> CounterRef {
        CounterRef::new(self.values, c as i32)
    }

    /// Adds one (atomically: several agents count into the same counters).
    #[inline]
    pub fn increment(&self, c: SystemCounter) {
        self.get(c).get_and_add(1);
    }

    /// Adds `n` (atomically).
    #[inline]
    pub fn add(&self, c: SystemCounter, n: i64) {
        self.get(c).get_and_add(n);
    }
}

/// Builds a stream counter key: registration id, session id, stream id, channel.
pub fn stream_counter_key(
    registration_id: i64,
    session_id: i32,
    stream_id: i32,
    channel: &str,
) -> Vec<u8> {
    let mut key = Vec::with_capacity(112);
    key.extend_from_slice(&registration_id.to_le_bytes());
    key.extend_from_slice(&session_id.to_le_bytes());
    key.extend_from_slice(&stream_id.to_le_bytes());
    let room = 112 - 20;
    let ch = &channel.as_bytes()[..channel.len().min(room)];
    key.extend_from_slice(&(ch.len() as i32).to_le_bytes());
    key.extend_from_slice(ch);
    key
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
