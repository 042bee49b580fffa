//! Launching and stopping a media driver, embedded in this process.
//!
//! ```no_run
//! use sulis_driver::{DriverContext, MediaDriver};
//! let mut ctx = DriverContext::from_env().unwrap();
//! ctx.dir = "/dev/shm/sulis-example".into();
//! let driver = MediaDriver::launch(ctx).unwrap();
//! // ... clients connect to /dev/shm/sulis-example ...
//! drop(driver); // stops the agents
//! ```

use crate::agent::{duty_cycle_tracker, run_agents, Agent, NanoClock, TrackedAgent};
use crate::conductor::{DriverConductor, NetworkLinks};
use crate::context::{DriverContext, ThreadingMode};
use crate::context::{ReceiverConfig, SenderConfig};
use crate::loss::NAK_RETRY_ADAPTIVE_MAX_NS;
use crate::media::transport::{TransportFactory, UdpTransportFactory};
use crate::receiver::Receiver;
use crate::sender::Sender;
use crate::system_counters::SystemCounter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use sulis_concurrent::cnc::{epoch_ms, Cnc, CncHeader};
use sulis_concurrent::loss_report::LOSS_REPORT_FILE;
use sulis_concurrent::mapped_file::MappedFile;
use sulis_concurrent::{broadcast, mpsc_ring_buffer};
use sulis_protocol::cnc_descriptor::{CncLayout, CNC_FILE};

/// Why a driver could not start.
#[derive(Debug)]
pub enum DriverError {
    /// Invalid configuration.
    Config(String),
    /// Another live driver owns the directory.
    ActiveDriver(String),
    /// A file could not be created or mapped.
    Io(std::io::Error),
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverError::Config(m) | DriverError::ActiveDriver(m) => f.write_str(m),
            DriverError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DriverError {}

impl From<std::io::Error> for DriverError {
    fn from(e: std::io::Error) -> Self {
        DriverError::Io(e)
    }
}

/// Checks whether a live driver owns `dir`: its CnC is ready and its heartbeat
/// is younger than `timeout_ms`. Returns a description of the live driver.
pub fn active_driver(dir: &Path, timeout_ms: i64) -> Option<String> {
    let cnc = Cnc::open(&dir.join(CNC_FILE)).ok()?;
    let age = epoch_ms() - cnc.driver_heartbeat_ms();
    if age <= timeout_ms {
        Some(format!(
            "active media driver detected in {} (pid {}, heartbeat {age} ms ago)",
            dir.display(),
            cnc.header().pid
        ))
    } else {
        None
    }
}

/// A running driver. Dropping it stops the agent threads.
pub struct MediaDriver {
    dir: PathBuf,
    running: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Invoker mode: the agents, run by [`MediaDriver::do_work`].
    invoker: Option<Invoker>,
    delete_on_shutdown: bool,
    /// Kept mapped until every agent thread has stopped.
    _cnc: Arc<Cnc>,
}

/// The agents of an invoker-mode driver and the clock timing their cycles.
struct Invoker {
    agents: Vec<TrackedAgent>,
    clock: NanoClock,
}

impl MediaDriver {
    /// Validates `ctx`, prepares the directory, creates the CnC and starts the agents.
    pub fn launch(ctx: DriverContext) -> Result<MediaDriver, DriverError> {
        Self::launch_with_clock(ctx, NanoClock::new())
    }

    /// As [`MediaDriver::launch`], on `clock`: with [`NanoClock::manual`] and
    /// the invoker threading mode, a test decides when time passes and when
    /// each duty cycle runs.
    pub fn launch_with_clock(
        ctx: DriverContext,
        clock: NanoClock,
    ) -> Result<MediaDriver, DriverError> {
        Self::launch_with(ctx, clock, Arc::new(UdpTransportFactory))
    }

    /// As [`MediaDriver::launch_with_clock`], with the endpoints' transports
    /// made by `transports`: a [`crate::media::memory::MemoryNetwork`] runs
    /// drivers over a network in memory, so a test decides what arrives.
    pub fn launch_with(
        ctx: DriverContext,
        clock: NanoClock,
        transports: Arc<dyn TransportFactory>,
    ) -> Result<MediaDriver, DriverError> {
        ctx.conclude().map_err(DriverError::Config)?;
        let dir = ctx.dir.clone();
        let timeout_ms = (ctx.driver_timeout_ns / 1_000_000) as i64;
        // As Aeron's aeron.dir.delete.on.start: the directory is deleted
        // without asking whether a driver is alive in it.
        if !ctx.dir_delete_on_start {
            if let Some(live) = active_driver(&dir, timeout_ms) {
                return Err(DriverError::ActiveDriver(live));
            }
        }
        if dir.exists() {
            // Stale (its driver is gone: its logs are unreachable garbage),
            // or to be deleted all the same (dir_delete_on_start).
            std::fs::remove_dir_all(&dir).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot clear stale {}: {e}", dir.display()),
                )
            })?;
        }
        for d in [
            dir.clone(),
            dir.join(sulis_protocol::driver_dir::PUBLICATIONS_DIR),
            dir.join(sulis_protocol::driver_dir::IMAGES_DIR),
        ] {
            std::fs::create_dir_all(&d).map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot create {}: {e}", d.display()))
            })?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))?;
        }
        let layout = CncLayout {
            to_driver_len: ctx.conductor_buffer_length + mpsc_ring_buffer::TRAILER_LENGTH,
            to_clients_len: ctx.clients_buffer_length + broadcast::TRAILER_LENGTH,
            counters_metadata_len: ctx.counters_buffer_length * 4,
            counters_values_len: ctx.counters_buffer_length,
            error_log_len: ctx.error_buffer_length,
        };
        let header = CncHeader {
            client_liveness_timeout_ns: ctx.client_liveness_timeout_ns as i64,
            start_timestamp_ms: clock.epoch_ms(),
            pid: std::process::id() as i64,
            page_size: ctx.file_page_size,
        };
        let cnc = Arc::new(Cnc::create(&dir.join(CNC_FILE), layout, header)?);
        let (sender_tx, sender_rx) = std::sync::mpsc::channel();
        let (receiver_tx, receiver_rx) = std::sync::mpsc::channel();
        let (events_tx, events_rx) = std::sync::mpsc::channel();
        let (sender_events_tx, sender_events_rx) = std::sync::mpsc::channel();
        let links = NetworkLinks {
            sender: sender_tx,
            receiver: receiver_tx,
            receiver_events: events_rx,
            sender_events: sender_events_rx,
            transports,
        };
        let conductor = DriverConductor::new(ctx.clone(), cnc.clone(), clock, links)
            .map_err(DriverError::Config)?;
        let errors = conductor.error_reporter();
        let system = *errors.system();
        let sender = Sender::new(
            sender_rx,
            sender_events_tx,
            clock,
            SenderConfig {
                setup_interval_ns: ctx.publication_setup_timeout_ns as i64,
                heartbeat_interval_ns: ctx.publication_heartbeat_timeout_ns as i64,
                connection_timeout_ns: ctx.publication_connection_timeout_ns as i64,
                retransmit_delay_ns: ctx.retransmit_unicast_delay_ns as i64,
                retransmit_linger_ns: ctx.retransmit_unicast_linger_ns as i64,
                retransmit_group_linger_ns: ctx.retransmit_multicast_linger_ns as i64,
                gso: ctx.udp_offload,
                poller_threshold: ctx.transport_poller_threshold,
            },
            errors.clone(),
        );
        // Random per driver (flow control tells receivers apart by it): the
        // standard library's hasher keys come from the OS's randomness and
        // differ for every driver, even two started in one process at once.
        let receiver_id = sulis_concurrent::bit_util::generate_randomised_id() as i64;
        // Reserved up front whatever the logs do: the receiver writes an entry
        // when it sees loss, which is when a full /dev/shm drops frames, and a
        // missing page then would be a SIGBUS in the driver.
        let loss_file = MappedFile::create(
            &dir.join(LOSS_REPORT_FILE),
            ctx.loss_report_buffer_length,
            false,
        )?;
        let receiver = Receiver::new(
            receiver_rx,
            events_tx,
            clock,
            ReceiverConfig {
                status_message_timeout_ns: ctx.status_message_timeout_ns as i64,
                nak_delay_ns: ctx.nak_unicast_delay_ns as i64,
                max_gaps: ctx.loss_max_gaps,
                nak_retry_ns: ctx.nak_unicast_retry_delay_ns as i64,
                nak_retry_adaptive_max_ns: ctx
                    .nak_unicast_retry_adaptive
                    .then_some(NAK_RETRY_ADAPTIVE_MAX_NS),
                image_cool_down_ns: (ctx.publication_linger_timeout_ns as i64)
                    .max(ctx.status_message_timeout_ns as i64),
                receiver_id,
                connection_timeout_ns: ctx.image_liveness_timeout_ns as i64,
                gro: ctx.udp_offload,
                nak_multicast_max_backoff_ns: ctx.nak_multicast_max_backoff_ns.min(i64::MAX as u64)
                    as i64,
                nak_multicast_group_size: ctx.nak_multicast_group_size.min(u32::MAX as usize)
                    as u32,
                stall_timeout_ns: ctx.receiver_stall_timeout_ns.min(i64::MAX as u64) as i64,
                poller_threshold: ctx.transport_poller_threshold,
            },
            errors,
        )
        .with_loss_report(loss_file);
        cnc.signal_ready();

        let running = Arc::new(AtomicBool::new(true));
        let idle = ctx.idle_strategy;
        let tracked = |agent: Box<dyn Agent>, max, exceeded, threshold_ns: u64| {
            let tracker = duty_cycle_tracker(&system, max, exceeded, threshold_ns as i64);
            (agent, tracker)
        };
        let conductor = tracked(
            Box::new(conductor),
            SystemCounter::ConductorMaxCycleTime,
            SystemCounter::ConductorCycleTimeThresholdExceeded,
            ctx.conductor_cycle_threshold_ns,
        );
        let sender = tracked(
            Box::new(sender),
            SystemCounter::SenderMaxCycleTime,
            SystemCounter::SenderCycleTimeThresholdExceeded,
            ctx.sender_cycle_threshold_ns,
        );
        let receiver = tracked(
            Box::new(receiver),
            SystemCounter::ReceiverMaxCycleTime,
            SystemCounter::ReceiverCycleTimeThresholdExceeded,
            ctx.receiver_cycle_threshold_ns,
        );
        let groups: Vec<(&str, Vec<TrackedAgent>)> = match ctx.threading_mode {
            ThreadingMode::Shared => {
                vec![("sulis-driver-shared", vec![conductor, sender, receiver])]
            }
            ThreadingMode::SharedNetwork => vec![
                ("sulis-driver-conductor", vec![conductor]),
                ("sulis-driver-network", vec![sender, receiver]),
            ],
            ThreadingMode::Dedicated => vec![
                ("sulis-driver-conductor", vec![conductor]),
                ("sulis-driver-sender", vec![sender]),
                ("sulis-driver-receiver", vec![receiver]),
            ],
            ThreadingMode::Invoker => {
                return Ok(MediaDriver {
                    dir,
                    running,
                    threads: Vec::new(),
                    invoker: Some(Invoker {
                        agents: vec![conductor, sender, receiver],
                        clock,
                    }),
                    delete_on_shutdown: ctx.dir_delete_on_shutdown,
                    _cnc: cnc,
                });
            }
        };
        let mut threads = Vec::new();
        for (name, agents) in groups {
            let r = running.clone();
            let spawned = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run_agents(agents, idle, r, clock));
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    running.store(false, Ordering::Release);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(DriverError::Io(e));
                }
            }
        }
        Ok(MediaDriver {
            dir,
            running,
            threads,
            invoker: None,
            delete_on_shutdown: ctx.dir_delete_on_shutdown,
            _cnc: cnc,
        })
    }

    /// The driver directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Invoker mode: runs one duty cycle of the conductor, the sender and
    /// the receiver, in that order, on the calling thread; returns the work
    /// done (0 = idle). Without invoker mode, or once closed, it does nothing
    /// and returns 0: the agents' own threads do the work.
    pub fn do_work(&mut self) -> usize {
        if !self.is_running() {
            return 0;
        }
        let Some(inv) = self.invoker.as_mut() else {
            return 0;
        };
        let mut work = 0;
        let mut start_ns = inv.clock.now_ns();
        for (agent, tracker) in inv.agents.iter_mut() {
            work += agent.do_work();
            let end_ns = inv.clock.now_ns();
            tracker.record(end_ns - start_ns);
            start_ns = end_ns;
        }
        work
    }

    /// True when the embedding code runs the agents ([`MediaDriver::do_work`]).
    pub fn is_invoker(&self) -> bool {
        self.invoker.is_some()
    }

    /// Stops the agents (idempotent).
    pub fn close(&mut self) {
        self.running.store(false, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(inv) = self.invoker.as_mut() {
            for (agent, _) in inv.agents.drain(..) {
                let mut agent = agent;
                agent.on_close();
            }
        }
        if self.delete_on_shutdown {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// True until [`MediaDriver::close`].
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }
}

impl Drop for MediaDriver {
    fn drop(&mut self) {
        self.close();
    }
}
