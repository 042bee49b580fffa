//! What `sulis cluster-tool` does to a member, as the crate's own logic
//! (the binding converts only): purge a member's log through its archive,
//! set its control toggle in its driver's counters, and ask its consensus
//! module who the members and the leader are.

use crate::module::consensus_module::{purge_log, toggle, LogPurge};
use crate::module::recording_log::RecordingLog;
use std::path::Path;
use std::time::{Duration, Instant};
use sulis_archive::client::{ArchiveClient, ArchiveClientContext};
use sulis_client::{Client, ClientContext, FragmentAssembler, Interrupt};
use sulis_concurrent::cnc::Cnc;
use sulis_concurrent::counters::CountersReader;
use sulis_protocol::cluster::mark_file::MARK_FILE;
use sulis_protocol::cluster::members_response::ClusterMembersExtendedResponse;
use sulis_protocol::cluster::messages::ClusterMembersQuery;
use sulis_protocol::cnc_descriptor::CNC_FILE;
use sulis_protocol::counters::type_id;

use crate::service::cluster_mark_file::MarkFileReader;

fn tool_client(
    dir: &str,
    driver_timeout: Duration,
    interrupt: Option<Interrupt>,
) -> Result<Client, String> {
    Client::connect(ClientContext {
        dir: dir.into(),
        driver_timeout,
        name: "sulis-cluster-tool".into(),
        interrupt,
    })
    .map_err(|e| format!("media driver {dir}: {e}"))
}

/// Deletes the log segments wholly before the latest snapshot of the member
/// on `cluster_dir`, through the archive of the driver in `driver_dir`.
/// `interrupt` (Ctrl-C) ends its waits.
pub fn purge_member_log(
    cluster_dir: &Path,
    driver_dir: &str,
    service_count: i32,
    interrupt: Option<Interrupt>,
) -> Result<LogPurge, String> {
    let log = RecordingLog::read(cluster_dir)?;
    let client = tool_client(driver_dir, Duration::from_secs(10), interrupt.clone())?;
    let ctx = ArchiveClientContext {
        interrupt,
        ..ArchiveClientContext::default()
    };
    let mut archive = ArchiveClient::connect(&client, ctx)
        .map_err(|e| format!("the archive on {driver_dir}: {e}"))?;
    let purged = purge_log(&mut archive, &log, service_count);
    archive.close();
    client.close();
    purged
}

/// Sets the control toggle of the cluster member on the driver in `dir` to
/// `value` if it is NEUTRAL (nothing asked); returns what it was. An error
/// names the driver without a member, or the request still pending.
pub fn set_toggle(dir: &str, value: i64) -> Result<i64, String> {
    let cnc = Cnc::open(&Path::new(dir).join(CNC_FILE))
        .map_err(|e| format!("no media driver in {dir}: {e}"))?;
    let reader = CountersReader::new(cnc.counters_metadata_buffer(), cnc.counters_values_buffer());
    let mut found = Vec::new();
    reader.for_each(|id, t, _key, _label| {
        if t == type_id::CLUSTER_CONTROL_TOGGLE {
            found.push(id);
        }
    });
    let id = match found.as_slice() {
        [id] => *id,
        [] => {
            return Err(format!(
                "no cluster member runs on the driver in {dir} (no control toggle counter)"
            ))
        }
        _ => {
            return Err(format!(
                "{} cluster members run on the driver in {dir}: which one is ambiguous",
                found.len()
            ))
        }
    };
    let counter = reader.counter_ref(id);
    let was = counter.get();
    if was != toggle::NEUTRAL {
        return Err(format!(
            "the control toggle is {was}, not NEUTRAL (1): the member is starting, or still acting on an earlier request"
        ));
    }
    counter.set_ordered(value);
    Ok(was)
}

/// Asks the consensus module whose mark file is in `cluster_dir` who the
/// members and the leader are (Aeron's ClusterMembersQuery, extended),
/// through the driver and control channel its mark file names. `interrupt`
/// (Ctrl-C) ends its waits.
pub fn query_members(
    cluster_dir: &str,
    timeout: Duration,
    interrupt: Option<Interrupt>,
) -> Result<ClusterMembersExtendedResponse, String> {
    let path = Path::new(cluster_dir).join(MARK_FILE);
    let h = MarkFileReader::open(&path)
        .map_err(|e| format!("no consensus module's mark file: {e}"))?
        .header();
    let deadline = Instant::now() + timeout.max(Duration::from_millis(100));
    let client = tool_client(
        &h.aeron_directory,
        timeout.max(Duration::from_secs(1)),
        interrupt,
    )
    .map_err(|e| format!("the member's {e}"))?;
    let outcome = (|| {
        let mut answers = client
            .add_subscription(&h.control_channel, h.service_stream_id)
            .map_err(|e| format!("{}: {e}", h.control_channel))?;
        let queries = client
            .add_publication(&h.control_channel, h.consensus_module_stream_id)
            .map_err(|e| format!("{}: {e}", h.control_channel))?;
        let correlation_id = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as i64)
            ^ ((std::process::id() as i64) << 40);
        let query = ClusterMembersQuery {
            correlation_id,
            extended: 1,
        }
        .encode();
        let mut sent = false;
        let mut assembler = FragmentAssembler::new();
        let seconds = timeout.as_secs_f64();
        loop {
            if Instant::now() > deadline {
                return Err(if sent {
                    format!("the consensus module did not answer within {seconds} s (an election that lasts, or a module that hangs)")
                } else {
                    format!("no consensus module took the query within {seconds} s: is the member on {cluster_dir} running?")
                });
            }
            if !sent && answers.is_connected() {
                sent = queries.offer(&query).is_ok();
            }
            let mut found = None;
            answers
                .poll(
                    |payload, header| -> Result<(), ()> {
                        if let Some(m) = assembler.on_fragment(payload, header) {
                            if let Ok(r) = ClusterMembersExtendedResponse::decode(&m.payload) {
                                if r.correlation_id == correlation_id {
                                    found = Some(r);
                                }
                            }
                        }
                        Ok(())
                    },
                    10,
                )
                .unwrap_or(0);
            if let Some(r) = found {
                return Ok(r);
            }
            client
                .check_interrupt("waiting for the consensus module's answer")
                .map_err(|e| e.to_string())?;
            std::thread::sleep(Duration::from_millis(1));
        }
    })();
    client.close();
    outcome
}
