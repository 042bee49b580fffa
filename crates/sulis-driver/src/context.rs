//! Driver configuration: one table of options drives the defaults, the
//! `SULIS_*` environment variables, the `sulis driver` flags and
//! `--print-config`.
//!
//! Each option has a name (`term_buffer_length`), an environment variable
//! (`SULIS_TERM_BUFFER_LENGTH`), a default, a unit and a sentence of doc. Values
//! are parsed by `sulis_protocol::values`: sizes as in channel URIs (`k/m/g`);
//! durations by `parse_duration_option`, which, unlike a URI, needs a unit
//! (`ns/us/ms/s`, fractions allowed: `1.5s`) and refuses a bare number other
//! than 0 as ambiguous.

use crate::loss::LossSpec;
use std::path::PathBuf;
use sulis_concurrent::idle::IdleStrategy;
use sulis_protocol::flow_control_params::FlowControlStrategy;
use sulis_protocol::log_buffer_descriptor::{check_page_size, check_term_length};
use sulis_protocol::values::{format_duration_ns, parse_bool, parse_duration_option, parse_size};

/// How the driver's agents are placed on threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadingMode {
    /// Conductor, sender and receiver each on their own thread.
    Dedicated,
    /// Conductor on one thread, sender and receiver sharing another.
    SharedNetwork,
    /// Everything on one thread.
    Shared,
    /// No driver threads: the embedding code runs the agents by calling
    /// `MediaDriver::do_work` (Aeron's invoker mode). Deterministic tests
    /// step the driver this way, with a manual clock.
    Invoker,
}

impl ThreadingMode {
    /// Parses `dedicated`, `shared-network`, `shared` or `invoker`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "dedicated" => Ok(ThreadingMode::Dedicated),
            "shared-network" => Ok(ThreadingMode::SharedNetwork),
            "shared" => Ok(ThreadingMode::Shared),
            "invoker" => Ok(ThreadingMode::Invoker),
            _ => Err(format!(
                "unknown threading mode '{s}' (expected shared, shared-network, dedicated or invoker)"
            )),
        }
    }

    /// Name as accepted by [`ThreadingMode::parse`].
    pub fn name(&self) -> &'static str {
        match self {
            ThreadingMode::Dedicated => "dedicated",
            ThreadingMode::SharedNetwork => "shared-network",
            ThreadingMode::Shared => "shared",
            ThreadingMode::Invoker => "invoker",
        }
    }
}

pub use sulis_protocol::options::Source;
use sulis_protocol::options::{Configured, Sources};

/// The default driver directory (`sulis_protocol::driver_dir`; `$SULIS_DIR`
/// is read with the other options).
pub fn default_dir() -> PathBuf {
    sulis_protocol::driver_dir::default_dir_ignoring_env()
}

/// Driver configuration.
#[derive(Clone, Debug)]
pub struct DriverContext {
    /// Driver directory.
    pub dir: PathBuf,
    /// Threading mode.
    pub threading_mode: ThreadingMode,
    /// Idle strategy of every agent thread.
    pub idle_strategy: IdleStrategy,
    /// Term length of IPC publications.
    pub ipc_term_buffer_length: usize,
    /// Term length of UDP publications.
    pub term_buffer_length: usize,
    /// MTU of IPC publications (largest fragment, header included).
    pub ipc_mtu_length: usize,
    /// MTU of UDP publications.
    pub mtu_length: usize,
    /// Page size of log files.
    pub file_page_size: usize,
    /// Sparse log files taking pages as written (true, Aeron's default) or
    /// storage reserved and mapped up front (false).
    pub term_buffer_sparse_file: bool,
    /// Publication window (0 = term length / 2).
    pub publication_term_window_length: usize,
    /// Spy subscriptions make a UDP publication connected without receivers.
    pub spies_simulate_connection: bool,
    /// A client silent this long is timed out.
    pub client_liveness_timeout_ns: u64,
    /// A publication stuck this long is unblocked (must exceed client liveness).
    pub publication_unblock_timeout_ns: u64,
    /// Linger of a closed publication's log.
    pub publication_linger_timeout_ns: u64,
    /// Period of the conductor's timer checks.
    pub timer_interval_ns: u64,
    /// A conductor duty cycle longer than this is counted.
    pub conductor_cycle_threshold_ns: u64,
    /// A sender duty cycle longer than this is counted.
    pub sender_cycle_threshold_ns: u64,
    /// A receiver duty cycle longer than this is counted.
    pub receiver_cycle_threshold_ns: u64,
    /// Client-side timeout for the driver's heartbeat (written to the CnC).
    pub driver_timeout_ns: u64,
    /// To-driver ring buffer data length (power of two; trailer added).
    pub conductor_buffer_length: usize,
    /// To-clients broadcast buffer data length (power of two; trailer added).
    pub clients_buffer_length: usize,
    /// Counter values buffer length (metadata is 4×).
    pub counters_buffer_length: usize,
    /// Error log length.
    pub error_buffer_length: usize,
    /// Loss report (`loss-report.dat`) length.
    pub loss_report_buffer_length: usize,
    /// Freed counter ids are reused only after this long.
    pub counter_free_to_reuse_timeout_ns: u64,
    /// Use UDP segmentation offload (send) and receive coalescing where the kernel has them.
    pub udp_offload: bool,
    /// SO_SNDBUF of UDP sockets (0 = OS default).
    pub socket_sndbuf_length: usize,
    /// SO_RCVBUF of UDP sockets (0 = OS default).
    pub socket_rcvbuf_length: usize,
    /// Receiver window (capped at term/2 and the socket receive buffer).
    pub initial_window_length: usize,
    /// A receiver sends a status message at least this often.
    pub status_message_timeout_ns: u64,
    /// An image whose source is silent this long is withdrawn.
    pub image_liveness_timeout_ns: u64,
    /// A publication without status messages this long is not connected.
    pub publication_connection_timeout_ns: u64,
    /// Period of the look for publications to a host name that has moved (0 = off).
    pub re_resolution_check_interval_ns: u64,
    /// SETUP period of a publication waiting for a receiver.
    pub publication_setup_timeout_ns: u64,
    /// Heartbeat period of an idle publication.
    pub publication_heartbeat_timeout_ns: u64,
    /// Delay before a unicast NAK (0 = immediate).
    pub nak_unicast_delay_ns: u64,
    /// Retry period of an unanswered NAK (the least one when adaptive).
    pub nak_unicast_retry_delay_ns: u64,
    /// Pace NAK retries by the image's measured repair time.
    pub nak_unicast_retry_adaptive: bool,
    /// Delay before resending a NAKed range (0 = immediate).
    pub retransmit_unicast_delay_ns: u64,
    /// A resent range ignores further NAKs this long.
    pub retransmit_unicast_linger_ns: u64,
    /// After a multicast or multi-destination resend, NAKs for the same range are ignored this long.
    pub retransmit_multicast_linger_ns: u64,
    /// Gaps a receiver NAKs at once per image.
    pub loss_max_gaps: usize,
    /// A receiver or sender with more transports than this asks one epoll
    /// set which have datagrams (Agrona's iteration threshold is five).
    pub transport_poller_threshold: usize,
    /// Flow control of multicast and multi-destination publications without `fc=`.
    pub multicast_flow_control: FlowControlStrategy,
    /// Group tag of a `tagged` flow control whose channel names none.
    pub flow_control_group_tag: i64,
    /// Receivers a `min`/`tagged` publication waits for when its channel says no `g:/N`.
    pub flow_control_group_min_size: usize,
    /// A `min`/`tagged` publication stops counting a receiver silent this long.
    pub flow_control_receiver_timeout_ns: u64,
    /// Group tag of subscriptions without `gtag=` (None: their status messages carry none).
    pub receiver_group_tag: Option<i64>,
    /// Retransmits a multicast or multi-destination publication runs at once.
    pub max_resend: usize,
    /// Longest NAK back-off of a receiver in a group (multicast).
    pub nak_multicast_max_backoff_ns: u64,
    /// Group size the multicast NAK back-off assumes.
    pub nak_multicast_group_size: usize,
    /// Multicast TTL of channels without `ttl=` (0 = the OS default).
    pub socket_multicast_ttl: u8,
    /// A reliable image stuck this long behind data its sender no longer keeps gives up (0: never).
    pub receiver_stall_timeout_ns: u64,
    /// Congestion control of images whose subscription channel has no `cc=`: static or cubic.
    pub congestion_control: String,
    /// CUBIC: measure the round trip with RTTM frames.
    pub cubic_measure_rtt: bool,
    /// CUBIC: the round trip assumed before one is measured.
    pub cubic_initial_rtt_ns: u64,
    /// CUBIC: grow at least as fast as TCP Reno.
    pub cubic_tcp_mode: bool,
    /// Transport security of UDP channels without `security=` (`None`: off).
    pub security: Option<crate::security::SecurityMode>,
    /// The keyring file of secured channels.
    pub keyring_file: Option<PathBuf>,
    /// How far a secured datagram's send time may be from this host's clock.
    pub security_clock_window_ns: u64,
    /// Test loss: data frames the sender drops.
    pub send_data_loss: LossSpec,
    /// Test loss: control frames the sender and receiver drop when sending.
    pub send_control_loss: LossSpec,
    /// Test loss: data frames the receiver drops on arrival.
    pub receive_data_loss: LossSpec,
    /// Test loss: control frames the sender and receiver drop on arrival.
    pub receive_control_loss: LossSpec,
    /// Seed of the test loss generators.
    pub loss_seed: u64,
    /// Delete the directory on start without checking for an active driver.
    pub dir_delete_on_start: bool,
    /// Delete the directory on shutdown.
    pub dir_delete_on_shutdown: bool,
    sources: Sources,
}

/// One row of the driver's options table.
pub type OptionSpec = sulis_protocol::options::OptionSpec<DriverContext>;

fn size_usize(s: &str) -> Result<usize, String> {
    parse_size(s).map(|v| v as usize)
}

/// A row of the table (`sulis_protocol::option!`).
macro_rules! opt {
    ($($row:tt)*) => {
        sulis_protocol::option!($($row)*)
    };
}

fn parse_strategy(s: &str) -> Result<FlowControlStrategy, String> {
    match s {
        "max" => Ok(FlowControlStrategy::Max),
        "min" => Ok(FlowControlStrategy::Min),
        "tagged" => Ok(FlowControlStrategy::Tagged),
        _ => Err(format!(
            "'{s}' is not a flow control strategy; use max, min or tagged"
        )),
    }
}

fn show_size(v: &usize) -> String {
    v.to_string()
}
fn show_ns(v: &u64) -> String {
    format_duration_ns(*v)
}
fn show_bool(v: &bool) -> String {
    v.to_string()
}

/// Every driver option.
pub static OPTIONS: &[OptionSpec] = &[
    opt!(
        dir,
        "SULIS_DIR",
        "path",
        "Driver directory holding cnc.dat and the log buffers.",
        |s: &str| Ok::<_, String>(PathBuf::from(s)),
        |v: &PathBuf| v.display().to_string()
    ),
    opt!(
        threading_mode,
        "SULIS_THREADING_MODE",
        "",
        "Agent threads: shared, shared-network, dedicated, or invoker (no threads: the embedding code calls do_work).",
        ThreadingMode::parse,
        |v: &ThreadingMode| v.name().to_string()
    ),
    opt!(
        idle_strategy,
        "SULIS_IDLE_STRATEGY",
        "",
        "Idle strategy: busy-spin, yielding, backoff (spin, then park 1 us to 1 ms; Aeron's also yields, which starves an agent on busy cores), backoff:<longest park> (e.g. backoff:100us: lower latency when traffic is sparse, more wake-ups when idle), sleeping or sleeping:<duration>.",
        IdleStrategy::parse,
        |v: &IdleStrategy| v.name()
    ),
    opt!(
        ipc_term_buffer_length,
        "SULIS_IPC_TERM_BUFFER_LENGTH",
        "bytes",
        "Term length of IPC publications (power of two, 64k..1g).",
        size_usize,
        show_size
    ),
    opt!(
        term_buffer_length,
        "SULIS_TERM_BUFFER_LENGTH",
        "bytes",
        "Term length of UDP publications (power of two, 64k..1g).",
        size_usize,
        show_size
    ),
    opt!(
        ipc_mtu_length,
        "SULIS_IPC_MTU_LENGTH",
        "bytes",
        "Largest IPC fragment, header included (multiple of 32).",
        size_usize,
        show_size
    ),
    opt!(
        mtu_length,
        "SULIS_MTU_LENGTH",
        "bytes",
        "Largest UDP datagram payload the sender builds (multiple of 32).",
        size_usize,
        show_size
    ),
    opt!(
        file_page_size,
        "SULIS_FILE_PAGE_SIZE",
        "bytes",
        "Page size that log files are rounded to.",
        size_usize,
        show_size
    ),
    opt!(
        term_buffer_sparse_file,
        "SULIS_TERM_BUFFER_SPARSE_FILE",
        "bool",
        "Sparse log files (as Aeron's driver by default): a log takes its pages as its stream is written, so an idle \
stream costs its metadata page; writers take pages before they touch them, so a full /dev/shm refuses an offer \
(StorageSpaceError) instead of a SIGBUS. false reserves and maps every page when the log is created (no page \
faults on the hot path). A channel's sparse= parameter decides for its own logs.",
        parse_bool,
        show_bool
    ),
    opt!(
        publication_term_window_length,
        "SULIS_PUBLICATION_TERM_WINDOW_LENGTH",
        "bytes",
        "How far a publisher may run ahead of its slowest subscriber (0 = term length / 2; at most that). A channel's pub-wnd overrides it.",
        size_usize,
        show_size
    ),
    opt!(
        spies_simulate_connection,
        "SULIS_SPIES_SIMULATE_CONNECTION",
        "bool",
        "A UDP publication with spy subscriptions and no receiver counts as connected: publishers go at the spies' pace instead of getting NOT_CONNECTED (Aeron's aeron.spies.simulate.connection). A channel's ssc overrides it.",
        parse_bool,
        show_bool
    ),
    opt!(
        client_liveness_timeout_ns as "client_liveness_timeout",
        "SULIS_CLIENT_LIVENESS_TIMEOUT",
        "duration",
        "A client that stops heartbeating for this long is timed out and its resources released.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        publication_unblock_timeout_ns as "publication_unblock_timeout",
        "SULIS_PUBLICATION_UNBLOCK_TIMEOUT",
        "duration",
        "A publication blocked by a writer that died mid-claim is unblocked after this long.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        publication_linger_timeout_ns as "publication_linger_timeout",
        "SULIS_PUBLICATION_LINGER_TIMEOUT",
        "duration",
        "How long a closed publication's log lingers for late readers.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        timer_interval_ns as "timer_interval",
        "SULIS_TIMER_INTERVAL",
        "duration",
        "Period of the conductor's liveness and timeout checks.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        conductor_cycle_threshold_ns as "conductor_cycle_threshold",
        "SULIS_CONDUCTOR_CYCLE_THRESHOLD",
        "duration",
        "Conductor duty cycles longer than this are counted (system counter 27).",
        parse_duration_option,
        show_ns
    ),
    opt!(
        sender_cycle_threshold_ns as "sender_cycle_threshold",
        "SULIS_SENDER_CYCLE_THRESHOLD",
        "duration",
        "Sender duty cycles longer than this are counted (system counter 29).",
        parse_duration_option,
        show_ns
    ),
    opt!(
        receiver_cycle_threshold_ns as "receiver_cycle_threshold",
        "SULIS_RECEIVER_CYCLE_THRESHOLD",
        "duration",
        "Receiver duty cycles longer than this are counted (system counter 31).",
        parse_duration_option,
        show_ns
    ),
    opt!(
        driver_timeout_ns as "driver_timeout",
        "SULIS_DRIVER_TIMEOUT",
        "duration",
        "Clients declare the driver dead when its heartbeat is older than this.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        conductor_buffer_length,
        "SULIS_CONDUCTOR_BUFFER_LENGTH",
        "bytes",
        "Client-to-driver command ring buffer (power of two).",
        size_usize,
        show_size
    ),
    opt!(
        clients_buffer_length,
        "SULIS_CLIENTS_BUFFER_LENGTH",
        "bytes",
        "Driver-to-clients broadcast buffer (power of two).",
        size_usize,
        show_size
    ),
    opt!(
        counters_buffer_length,
        "SULIS_COUNTERS_BUFFER_LENGTH",
        "bytes",
        "Counter values buffer (128 bytes per counter; the default, Aeron's, holds 65,536: a few per stream, so \
thousands of streams; the metadata takes four times as much, both reserved in the CnC file).",
        size_usize,
        show_size
    ),
    opt!(
        error_buffer_length,
        "SULIS_ERROR_BUFFER_LENGTH",
        "bytes",
        "Distinct error log length.",
        size_usize,
        show_size
    ),
    opt!(
        loss_report_buffer_length,
        "SULIS_LOSS_REPORT_BUFFER_LENGTH",
        "bytes",
        "Loss report file (loss-report.dat) length: one entry per image that lost data.",
        size_usize,
        show_size
    ),
    opt!(
        counter_free_to_reuse_timeout_ns as "counter_free_to_reuse_timeout",
        "SULIS_COUNTER_FREE_TO_REUSE_TIMEOUT",
        "duration",
        "A freed counter id is reused only after this cool-down.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        udp_offload,
        "SULIS_UDP_OFFLOAD",
        "bool",
        "UDP segmentation offload (GSO) for sends and receive coalescing (GRO) where the kernel has them.",
        parse_bool,
        show_bool
    ),
    opt!(
        socket_sndbuf_length,
        "SULIS_SOCKET_SNDBUF_LENGTH",
        "bytes",
        "SO_SNDBUF of UDP sockets (0 = OS default; the channel's so-sndbuf overrides).",
        size_usize,
        show_size
    ),
    opt!(
        socket_rcvbuf_length,
        "SULIS_SOCKET_RCVBUF_LENGTH",
        "bytes",
        "SO_RCVBUF of UDP sockets (0 = OS default; the channel's so-rcvbuf overrides).",
        size_usize,
        show_size
    ),
    opt!(
        initial_window_length,
        "SULIS_INITIAL_WINDOW_LENGTH",
        "bytes",
        "Receiver window, capped at term/2 and the socket receive buffer (the channel's rcv-wnd overrides).",
        size_usize,
        show_size
    ),
    opt!(
        status_message_timeout_ns as "status_message_timeout",
        "SULIS_STATUS_MESSAGE_TIMEOUT",
        "duration",
        "A receiver sends each source a status message at least this often.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        image_liveness_timeout_ns as "image_liveness_timeout",
        "SULIS_IMAGE_LIVENESS_TIMEOUT",
        "duration",
        "An image whose source sends nothing for this long is withdrawn.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        publication_connection_timeout_ns as "publication_connection_timeout",
        "SULIS_PUBLICATION_CONNECTION_TIMEOUT",
        "duration",
        "A UDP publication with no status message for this long is not connected.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        re_resolution_check_interval_ns as "re_resolution_check_interval",
        "SULIS_RE_RESOLUTION_CHECK_INTERVAL",
        "duration",
        "How often the conductor looks for UDP publications whose endpoint is a host name and which \
         have had no status message for publication_connection_timeout; it looks the name up again \
         and, if the address changed, sends there (counted in 'Resolution changes'). 0 = never.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        publication_setup_timeout_ns as "publication_setup_timeout",
        "SULIS_PUBLICATION_SETUP_TIMEOUT",
        "duration",
        "Period of SETUP frames while a UDP publication waits for a receiver.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        publication_heartbeat_timeout_ns as "publication_heartbeat_timeout",
        "SULIS_PUBLICATION_HEARTBEAT_TIMEOUT",
        "duration",
        "An idle UDP publication sends a heartbeat this often.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        nak_unicast_delay_ns as "nak_unicast_delay",
        "SULIS_NAK_UNICAST_DELAY",
        "duration",
        "Delay before a receiver NAKs a gap on a unicast channel (0 = at once).",
        parse_duration_option,
        show_ns
    ),
    opt!(
        nak_unicast_retry_delay_ns as "nak_unicast_retry_delay",
        "SULIS_NAK_UNICAST_RETRY_DELAY",
        "duration",
        "A gap still open after this long is NAKed again (with nak_unicast_retry_adaptive: at the soonest).",
        parse_duration_option,
        show_ns
    ),
    opt!(
        nak_unicast_retry_adaptive,
        "SULIS_NAK_UNICAST_RETRY_ADAPTIVE",
        "bool",
        "Retry a NAK after the image's measured repair time (a round trip) plus four deviations, between \
         nak_unicast_retry_delay and 200 ms, so a long path gets about one NAK per loss; false: every \
         nak_unicast_retry_delay.",
        parse_bool,
        show_bool
    ),
    opt!(
        retransmit_unicast_delay_ns as "retransmit_unicast_delay",
        "SULIS_RETRANSMIT_UNICAST_DELAY",
        "duration",
        "Delay before a sender resends a NAKed range (0 = at once).",
        parse_duration_option,
        show_ns
    ),
    opt!(
        retransmit_unicast_linger_ns as "retransmit_unicast_linger",
        "SULIS_RETRANSMIT_UNICAST_LINGER",
        "duration",
        "After a unicast resend, NAKs for the same range are ignored this long. Keep it no longer than nak_unicast_retry_delay, the soonest a receiver asks again: a retry that comes within it is ignored, and a lost retransmit then waits out the linger.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        retransmit_multicast_linger_ns as "retransmit_multicast_linger",
        "SULIS_RETRANSMIT_MULTICAST_LINGER",
        "duration",
        "After a multicast or multi-destination resend, NAKs for the same range are ignored this long: the group's receivers NAK the same loss at random times within nak_multicast_max_backoff, and one retransmit serves them all.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        loss_max_gaps,
        "SULIS_LOSS_MAX_GAPS",
        "",
        "Gaps a receiver NAKs at once per image (1 = Aeron's one-gap-at-a-time).",
        |s: &str| s.parse::<usize>().map_err(|e| format!("{e}")),
        show_size
    ),
    opt!(
        transport_poller_threshold,
        "SULIS_TRANSPORT_POLLER_THRESHOLD",
        "",
        "A receiver or sender with more UDP transports than this asks one epoll set each duty cycle which have datagrams, instead of a receive call on each (Aeron's threshold, Agrona's org.agrona.transport.iteration.threshold, is 5).",
        |s: &str| s.parse::<usize>().map_err(|e| format!("{e}")),
        show_size
    ),
    opt!(
        multicast_flow_control,
        "SULIS_MULTICAST_FLOW_CONTROL",
        "",
        "Flow control of multicast and multi-destination publications whose channel has no fc=: max (the fastest receiver paces), min (the slowest), tagged (the slowest of the flow_control_group_tag group).",
        parse_strategy,
        |v: &FlowControlStrategy| v.name().to_string()
    ),
    opt!(
        flow_control_group_tag,
        "SULIS_FLOW_CONTROL_GROUP_TAG",
        "",
        "Group tag a tagged flow control counts receivers of when its channel names none (fc=tagged,g:TAG).",
        |s: &str| s.parse::<i64>().map_err(|e| format!("{e}")),
        |v: &i64| v.to_string()
    ),
    opt!(
        flow_control_group_min_size,
        "SULIS_FLOW_CONTROL_GROUP_MIN_SIZE",
        "",
        "Receivers a min or tagged publication waits for before it is connected, when its channel says no g:/N.",
        |s: &str| s.parse::<usize>().map_err(|e| format!("{e}")),
        show_size
    ),
    opt!(
        flow_control_receiver_timeout_ns as "flow_control_receiver_timeout",
        "SULIS_FLOW_CONTROL_RECEIVER_TIMEOUT",
        "duration",
        "A min or tagged publication stops counting a receiver that sent no status message for this long (fc=...,t: overrides it).",
        parse_duration_option,
        show_ns
    ),
    opt!(
        receiver_group_tag,
        "SULIS_RECEIVER_GROUP_TAG",
        "",
        "Group tag in the status messages of subscriptions without gtag= (none: no tag).",
        |s: &str| if s == "none" { Ok(None) } else { s.parse::<i64>().map(Some).map_err(|e| format!("{e}")) },
        |v: &Option<i64>| v.map_or("none".to_string(), |t| t.to_string())
    ),
    opt!(
        max_resend,
        "SULIS_MAX_RESEND",
        "",
        "Retransmits a multicast or multi-destination publication runs at once (1..256; a channel's max-resend overrides it).",
        |s: &str| s.parse::<usize>().map_err(|e| format!("{e}")),
        show_size
    ),
    opt!(
        nak_multicast_max_backoff_ns as "nak_multicast_max_backoff",
        "SULIS_NAK_MULTICAST_MAX_BACKOFF",
        "duration",
        "Longest random delay before a receiver in a group (multicast) NAKs a gap, so that one NAK, not one per receiver, reaches the sender.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        nak_multicast_group_size,
        "SULIS_NAK_MULTICAST_GROUP_SIZE",
        "",
        "Group size the multicast NAK back-off assumes.",
        |s: &str| s.parse::<usize>().map_err(|e| format!("{e}")),
        show_size
    ),
    opt!(
        socket_multicast_ttl,
        "SULIS_SOCKET_MULTICAST_TTL",
        "",
        "Multicast TTL of channels without ttl= (0 = the OS default, 1 on Linux: one network).",
        |s: &str| s.parse::<u8>().map_err(|e| format!("{e}")),
        |v: &u8| v.to_string()
    ),
    opt!(
        receiver_stall_timeout_ns as "receiver_stall_timeout",
        "SULIS_RECEIVER_STALL_TIMEOUT",
        "duration",
        "A reliable image whose rebuild position has not moved for this long while its sender is more than half a term ahead (no sender keeps what lies that far behind it) gives up: the bytes go to the loss report, subscribers see the image end, and the session is joined again where the stream is. A receiver that fell behind a multicast max stream would otherwise wait for good (0: never give up).",
        parse_duration_option,
        show_ns
    ),
    opt!(
        congestion_control,
        "SULIS_CONGESTION_CONTROL",
        "",
        "Congestion control of images whose subscription channel has no cc=: static (the whole receiver window, always) or cubic (a window of MTUs cut by a fifth at each loss and grown back along CUBIC's curve).",
        |s: &str| match s {
            "static" | "cubic" => Ok(s.to_owned()),
            _ => Err(format!("'{s}' is not a congestion control; use static or cubic")),
        },
        |v: &String| v.clone()
    ),
    opt!(
        cubic_measure_rtt,
        "SULIS_CUBIC_MEASURE_RTT",
        "bool",
        "CUBIC measures the round trip with RTTM frames (its TCP mode and how often it measures go by it).",
        parse_bool,
        show_bool
    ),
    opt!(
        cubic_initial_rtt_ns as "cubic_initial_rtt",
        "SULIS_CUBIC_INITIAL_RTT",
        "duration",
        "The round trip CUBIC assumes before it measures one; its window grows at most once per this.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        cubic_tcp_mode,
        "SULIS_CUBIC_TCP_MODE",
        "bool",
        "CUBIC grows its window at least as fast as TCP Reno would (RFC 8312's TCP-friendly region, on in Linux's CUBIC; Aeron's default is off). Without it the window grows by the second whatever the round trip, and a path of microseconds with steady loss stays at one MTU.",
        parse_bool,
        show_bool
    ),
    opt!(
        security,
        "SULIS_SECURITY",
        "mode",
        "Transport security of every UDP channel that has no security= parameter: off, auth (every datagram authenticated) or encrypt (authenticated and encrypted). Needs keyring_file.",
        crate::security::SecurityMode::parse,
        |v: &Option<crate::security::SecurityMode>| crate::security::SecurityMode::name(*v).to_string()
    ),
    opt!(
        keyring_file,
        "SULIS_KEYRING_FILE",
        "path",
        "Keyring of secured channels: lines 'ID HEX' (64 hex digits) and 'send ID'; mode 600; read again when it changes (none: no keyring).",
        |s: &str| Ok::<_, String>(if s.is_empty() || s == "none" { None } else { Some(PathBuf::from(s)) }),
        |v: &Option<PathBuf>| v.as_ref().map_or("none".to_string(), |p| p.display().to_string())
    ),
    opt!(
        security_clock_window_ns as "security_clock_window",
        "SULIS_SECURITY_CLOCK_WINDOW",
        "duration",
        "A secured datagram sent further than this from this host's clock (either way) is dropped: the hosts' clocks must agree within it.",
        parse_duration_option,
        show_ns
    ),
    opt!(
        send_data_loss,
        "SULIS_SEND_DATA_LOSS",
        "spec",
        "Testing only: drop data frames on send (off, RATE, random:RATE or every:N[:OFFSET]).",
        LossSpec::parse,
        |v: &LossSpec| v.to_string()
    ),
    opt!(
        send_control_loss,
        "SULIS_SEND_CONTROL_LOSS",
        "spec",
        "Testing only: drop control frames (SETUP, SM, NAK, RTTM) on send.",
        LossSpec::parse,
        |v: &LossSpec| v.to_string()
    ),
    opt!(
        receive_data_loss,
        "SULIS_RECEIVE_DATA_LOSS",
        "spec",
        "Testing only: drop data frames on arrival.",
        LossSpec::parse,
        |v: &LossSpec| v.to_string()
    ),
    opt!(
        receive_control_loss,
        "SULIS_RECEIVE_CONTROL_LOSS",
        "spec",
        "Testing only: drop control frames on arrival.",
        LossSpec::parse,
        |v: &LossSpec| v.to_string()
    ),
    opt!(
        loss_seed,
        "SULIS_LOSS_SEED",
        "",
        "Seed of the testing loss generators (the same seed drops the same datagrams).",
        |s: &str| s.parse::<u64>().map_err(|e| format!("{e}")),
        |v: &u64| v.to_string()
    ),
    opt!(
        dir_delete_on_start,
        "SULIS_DIR_DELETE_ON_START",
        "bool",
        "Delete the driver directory on start even if a driver seems active in it (Aeron's aeron.dir.delete.on.start). Without it, the directory of a driver whose heartbeat is younger than driver_timeout is refused (ActiveDriverError) and a stale one is replaced.",
        parse_bool,
        show_bool
    ),
    opt!(
        dir_delete_on_shutdown,
        "SULIS_DIR_DELETE_ON_SHUTDOWN",
        "bool",
        "Delete the driver directory on shutdown.",
        parse_bool,
        show_bool
    ),
];

impl Configured for DriverContext {
    const WHAT: &'static str = "driver";
    fn table() -> &'static [OptionSpec] {
        OPTIONS
    }
    fn sources_mut(&mut self) -> &mut Sources {
        &mut self.sources
    }
    fn sources(&self) -> &Sources {
        &self.sources
    }
}

impl Default for DriverContext {
    fn default() -> Self {
        DriverContext {
            dir: default_dir(),
            threading_mode: ThreadingMode::Dedicated,
            idle_strategy: IdleStrategy::backoff(),
            ipc_term_buffer_length: 64 * 1024 * 1024,
            term_buffer_length: 16 * 1024 * 1024,
            ipc_mtu_length: 1408,
            mtu_length: 1408,
            file_page_size: 4096,
            term_buffer_sparse_file: true,
            publication_term_window_length: 0,
            spies_simulate_connection: false,
            client_liveness_timeout_ns: 10_000_000_000,
            publication_unblock_timeout_ns: 15_000_000_000,
            publication_linger_timeout_ns: 5_000_000_000,
            timer_interval_ns: 1_000_000_000,
            conductor_cycle_threshold_ns: 1_000_000_000,
            sender_cycle_threshold_ns: 1_000_000_000,
            receiver_cycle_threshold_ns: 1_000_000_000,
            driver_timeout_ns: 10_000_000_000,
            conductor_buffer_length: 1024 * 1024,
            clients_buffer_length: 1024 * 1024,
            counters_buffer_length: 8 * 1024 * 1024,
            error_buffer_length: 1024 * 1024,
            loss_report_buffer_length: 1024 * 1024,
            counter_free_to_reuse_timeout_ns: 1_000_000_000,
            udp_offload: true,
            socket_sndbuf_length: 2 * 1024 * 1024,
            socket_rcvbuf_length: 2 * 1024 * 1024,
            initial_window_length: 128 * 1024,
            status_message_timeout_ns: 200_000_000,
            image_liveness_timeout_ns: 10_000_000_000,
            publication_connection_timeout_ns: 5_000_000_000,
            re_resolution_check_interval_ns: 1_000_000_000,
            publication_setup_timeout_ns: 100_000_000,
            publication_heartbeat_timeout_ns: 100_000_000,
            nak_unicast_delay_ns: 0,
            nak_unicast_retry_delay_ns: 200_000,
            nak_unicast_retry_adaptive: true,
            retransmit_unicast_delay_ns: 0,
            retransmit_unicast_linger_ns: 200_000,
            retransmit_multicast_linger_ns: 10_000_000,
            loss_max_gaps: 16,
            transport_poller_threshold: 1,
            multicast_flow_control: FlowControlStrategy::Max,
            flow_control_group_tag: -1,
            flow_control_group_min_size: 0,
            flow_control_receiver_timeout_ns: 5_000_000_000,
            receiver_group_tag: None,
            max_resend: 16,
            nak_multicast_max_backoff_ns: 10_000_000,
            nak_multicast_group_size: 10,
            socket_multicast_ttl: 0,
            receiver_stall_timeout_ns: 2_000_000_000,
            congestion_control: "static".to_owned(),
            cubic_measure_rtt: true,
            cubic_initial_rtt_ns: 100_000,
            cubic_tcp_mode: true,
            security: None,
            keyring_file: None,
            security_clock_window_ns: 10_000_000_000,
            send_data_loss: LossSpec::Off,
            send_control_loss: LossSpec::Off,
            receive_data_loss: LossSpec::Off,
            receive_control_loss: LossSpec::Off,
            loss_seed: 0,
            dir_delete_on_start: false,
            dir_delete_on_shutdown: false,
            sources: Sources::default(),
        }
    }
}

impl DriverContext {
    /// Defaults overridden by any `SULIS_*` environment variables.
    pub fn from_env() -> Result<Self, String> {
        let mut c = DriverContext::default();
        c.apply_env()?;
        Ok(c)
    }

    /// Sets an option by name (`term_buffer_length` or `term-buffer-length`) from text.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        self.set_option(name, value)
    }

    /// Every option with its effective value and where it came from.
    pub fn describe(&self) -> Vec<(&'static OptionSpec, String, Source)> {
        self.describe_options()
    }

    /// Validates ranges and relations between options.
    pub fn conclude(&self) -> Result<(), String> {
        check_term_length(self.ipc_term_buffer_length)
            .map_err(|e| format!("ipc_term_buffer_length: {e}"))?;
        check_term_length(self.term_buffer_length)
            .map_err(|e| format!("term_buffer_length: {e}"))?;
        check_page_size(self.file_page_size).map_err(|e| format!("file_page_size: {e}"))?;
        for (name, mtu) in [
            ("ipc_mtu_length", self.ipc_mtu_length),
            ("mtu_length", self.mtu_length),
        ] {
            if mtu <= 32 || mtu % 32 != 0 || mtu > 65504 {
                return Err(format!(
                    "{name}: {mtu} must be a multiple of 32 between 64 and 65504"
                ));
            }
        }
        for (name, len) in [
            ("conductor_buffer_length", self.conductor_buffer_length),
            ("clients_buffer_length", self.clients_buffer_length),
        ] {
            if !len.is_power_of_two() || len < 1024 {
                return Err(format!(
                    "{name}: {len} must be a power of two of at least 1024"
                ));
            }
        }
        if self.counters_buffer_length < 128 * 64
            || !self.counters_buffer_length.is_multiple_of(128)
        {
            return Err(format!(
                "counters_buffer_length: {} must be a multiple of 128 of at least 8192",
                self.counters_buffer_length
            ));
        }
        if self.error_buffer_length < 1024 || !self.error_buffer_length.is_multiple_of(8) {
            return Err(format!(
                "error_buffer_length: {} must be a multiple of 8, at least 1024",
                self.error_buffer_length
            ));
        }
        if self.loss_report_buffer_length < 1024
            || !self.loss_report_buffer_length.is_multiple_of(64)
        {
            return Err(format!(
                "loss_report_buffer_length: {} must be a multiple of 64, at least 1024",
                self.loss_report_buffer_length
            ));
        }
        if self.max_resend == 0 || self.max_resend > 256 {
            return Err(format!(
                "max_resend: {} must be between 1 and 256",
                self.max_resend
            ));
        }
        if self.nak_multicast_group_size == 0 {
            return Err("nak_multicast_group_size must be at least 1".into());
        }
        if self.loss_max_gaps == 0 || self.loss_max_gaps > 256 {
            return Err(format!(
                "loss_max_gaps: {} must be between 1 and 256",
                self.loss_max_gaps
            ));
        }
        if self.initial_window_length < 4096 {
            return Err(format!(
                "initial_window_length: {} must be at least 4096",
                self.initial_window_length
            ));
        }
        if self.publication_unblock_timeout_ns <= self.client_liveness_timeout_ns {
            return Err(format!(
                "publication_unblock_timeout ({}) must be greater than client_liveness_timeout ({})",
                format_duration_ns(self.publication_unblock_timeout_ns),
                format_duration_ns(self.client_liveness_timeout_ns)
            ));
        }
        if self.client_liveness_timeout_ns < 10_000_000 {
            return Err(format!(
                "client_liveness_timeout ({}) must be at least 10ms: clients heartbeat within a quarter of it",
                format_duration_ns(self.client_liveness_timeout_ns)
            ));
        }
        if self.timer_interval_ns == 0 {
            return Err("timer_interval must be positive".into());
        }
        Ok(())
    }
}

/// The sender agent's settings, made from the driver's options
/// (`media_driver.rs`) and handed to the sender and each network publication.
#[derive(Clone, Debug)]
pub struct SenderConfig {
    /// SETUP period while no receiver answered.
    pub setup_interval_ns: i64,
    /// Heartbeat period while idle.
    pub heartbeat_interval_ns: i64,
    /// Receivers silent this long are gone (SETUP resumes).
    pub connection_timeout_ns: i64,
    /// Delay before resending a NAKed range (0 = at once).
    pub retransmit_delay_ns: i64,
    /// Time a resent range ignores further NAKs (unicast).
    pub retransmit_linger_ns: i64,
    /// The same for a multicast or multi-destination publication.
    pub retransmit_group_linger_ns: i64,
    /// Send runs of full datagrams as one message for the kernel to split (UDP GSO).
    pub gso: bool,
    /// More send endpoints than this: one epoll set says which to read.
    pub poller_threshold: usize,
}

/// The receiver agent's settings, made from the driver's options
/// (`media_driver.rs`) and handed to the receiver and each image.
#[derive(Clone, Debug)]
pub struct ReceiverConfig {
    /// Status message at least this often per image.
    pub status_message_timeout_ns: i64,
    /// NAK delay for unicast (immediate when 0).
    pub nak_delay_ns: i64,
    /// Gaps NAKed at once per image.
    pub max_gaps: usize,
    /// Retry period of unanswered NAKs (the least one when adaptive).
    pub nak_retry_ns: i64,
    /// Pace retries by each image's measured repair time, up to this (None: fixed retries).
    pub nak_retry_adaptive_max_ns: Option<i64>,
    /// After an image ends, its session is ignored this long.
    pub image_cool_down_ns: i64,
    /// Receiver id put in status messages.
    pub receiver_id: i64,
    /// Let the kernel coalesce received datagrams (UDP GRO).
    pub gro: bool,
    /// Longest random NAK back-off of an image with group semantics.
    pub nak_multicast_max_backoff_ns: i64,
    /// Group size that back-off assumes.
    pub nak_multicast_group_size: u32,
    /// An image stuck this long behind data its sender no longer keeps gives up (0: never).
    pub stall_timeout_ns: i64,
    /// A connection of a multi-destination image silent this long is no
    /// longer sent status messages and NAKs (the image liveness timeout).
    pub connection_timeout_ns: i64,
    /// More transports than this: one epoll set says which to read.
    pub poller_threshold: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_set_options_by_name_and_track_their_source() {
        let mut c = DriverContext::default();
        c.set("ipc-term-buffer-length", "1m").unwrap();
        c.set("client_liveness_timeout", "2s").unwrap();
        c.set("threading_mode", "shared").unwrap();
        assert_eq!(c.ipc_term_buffer_length, 1 << 20);
        assert_eq!(c.client_liveness_timeout_ns, 2_000_000_000);
        assert_eq!(c.threading_mode, ThreadingMode::Shared);
        let d = c.describe();
        let row = d
            .iter()
            .find(|(o, _, _)| o.name == "ipc_term_buffer_length")
            .unwrap();
        assert_eq!(row.2, Source::Explicit);
        let row = d.iter().find(|(o, _, _)| o.name == "mtu_length").unwrap();
        assert_eq!(row.2, Source::Default);
        assert!(c.set("nope", "1").unwrap_err().contains("nope"));
        assert!(c
            .set("threading_mode", "lots")
            .unwrap_err()
            .contains("lots"));
    }

    #[test]
    fn should_reject_bad_values_in_conclude() {
        let c = DriverContext {
            ipc_term_buffer_length: 100_000,
            ..DriverContext::default()
        };
        assert!(c.conclude().unwrap_err().contains("ipc_term_buffer_length"));
        let c = DriverContext {
            publication_unblock_timeout_ns: 1,
            ..DriverContext::default()
        };
        assert!(c.conclude().unwrap_err().contains("unblock"));
        assert!(DriverContext::default().conclude().is_ok());
    }

    #[test]
    fn should_name_every_option_with_an_env_var_of_the_same_shape() {
        for o in OPTIONS {
            assert!(
                !o.name.ends_with("_ns"),
                "{}: durations are named without a unit",
                o.name
            );
            let expected = format!("SULIS_{}", o.name.to_ascii_uppercase());
            assert_eq!(o.env, expected, "option {}", o.name);
        }
    }
}
