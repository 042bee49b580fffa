//! A media-driver client and an archive control session, as the source's
//! planner and readers hold them.

use crate::{ArchiveAddress, PlanError};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use sulis_archive::client::{ArchiveClient, ArchiveClientContext};
use sulis_client::{Client, ClientContext};
use sulis_concurrent::cnc::{epoch_ms, Cnc};
use sulis_protocol::cnc_descriptor::CNC_FILE;

/// Response streams of the planner's control sessions: this base plus the
/// process id modulo 2^20. Not the archive's shared default (`aeron:ipc`
/// stream 20): every control session on a stream gets every answer sent on
/// it, so an idle client elsewhere that never polls would stall the
/// answers to all the others. The Python readers' sessions use
/// `0x5A100000` on: the two never share a stream in one process.
pub const PLANNER_RESPONSE_STREAM_BASE: i32 = 0x5A20_0000;

/// A client and a control session on one archive.
pub struct ArchiveSession {
    pub client: Client,
    pub archive: ArchiveClient,
}

impl ArchiveSession {
    /// Connects to the archive at `address`, answers coming back on a
    /// stream of this process' own (`response_stream_base` plus the
    /// process id modulo 2^20) unless the address names one.
    pub fn connect(
        address: &ArchiveAddress,
        response_stream_base: i32,
    ) -> Result<ArchiveSession, PlanError> {
        let client = connect_client(address)?;
        let unreachable =
            |e: String| PlanError::Archive(format!("cannot reach {}: {e}", address.describe()));
        let (channel, stream) = match address.response_stream_id {
            Some(s) => (address.response_channel.clone(), s),
            None => {
                let channel = if address.response_channel == "aeron:ipc" {
                    "aeron:ipc?term-length=64k".to_string()
                } else {
                    address.response_channel.clone()
                };
                (
                    channel,
                    response_stream_base + (std::process::id() % (1 << 20)) as i32,
                )
            }
        };
        let archive = ArchiveClient::connect(
            &client,
            ArchiveClientContext {
                control_request_channel: address.control_channel.clone(),
                control_request_stream_id: address.control_stream_id,
                control_response_channel: channel,
                control_response_stream_id: stream,
                message_timeout: Duration::from_secs_f64(address.message_timeout_s),
                interrupt: crate::interrupt::hook(),
                ..ArchiveClientContext::default()
            },
        );
        match archive {
            Ok(archive) => Ok(ArchiveSession { client, archive }),
            Err(e) => {
                client.close();
                Err(unreachable(e.to_string()))
            }
        }
    }

    /// Closes the control session and the client.
    pub fn close(mut self) {
        self.archive.close();
        self.client.close();
    }
}

/// This host's name, as error messages name it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "this host".into())
}

/// A client of the media driver `address` names (`driverDir`), which must be
/// running: none there, or one whose heartbeat stopped, is said at once
/// rather than after the driver timeout.
pub fn connect_client(address: &ArchiveAddress) -> Result<Client, PlanError> {
    let dir = address
        .driver_dir
        .as_ref()
        .map(PathBuf::from)
        .unwrap_or_else(sulis_protocol::driver_dir::default_dir);
    // A driver starting just now gets two seconds; none at all is said
    // at once, not after the driver timeout.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !dir.join(CNC_FILE).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let unreachable =
        |e: String| PlanError::Archive(format!("cannot reach {}: {e}", address.describe()));
    if !dir.join(CNC_FILE).exists() {
        let d = dir.display();
        return Err(unreachable(format!(
                "no media driver on host {} in {d}: every host that runs Spark executors (or the Spark driver) needs a sulis media driver of its own, e.g. `sulis driver --dir {d}` started with the Spark worker (docs/spark.md, \"Executors reach the archive\"); driverDir names its directory",
                hostname()
            )));
    }
    // A driver directory whose driver is gone (its heartbeat zeroed by a
    // clean shutdown, or older than the driver timeout) is said at once:
    // the client would wait the whole timeout for a heartbeat.
    if let Ok(cnc) = Cnc::open(&dir.join(CNC_FILE)) {
        let heartbeat = cnc.driver_heartbeat_ms();
        let age = epoch_ms() - heartbeat;
        let timeout = ClientContext::default().driver_timeout.as_millis() as i64;
        if heartbeat <= 0 || age > timeout {
            let last = if heartbeat > 0 {
                format!("its last heartbeat was {:.0} s ago", age as f64 / 1000.0)
            } else {
                "the driver that made it has shut down".into()
            };
            return Err(unreachable(format!(
                "no live media driver in {} ({last}): it is not running",
                dir.display()
            )));
        }
    }
    let client = Client::connect(ClientContext {
        dir,
        name: "sulis-spark".into(),
        interrupt: crate::interrupt::hook(),
        ..ClientContext::default()
    })
    .map_err(|e| unreachable(e.to_string()))?;
    Ok(client)
}
