//! The JVM sink's publishing: each row offered as it comes (real-time
//! mode's way), so at least once — a task Spark runs again publishes its
//! rows again. Exactly once is the Python sink's in micro-batches (it
//! holds a journal of what each attempt published); the JVM sink refuses
//! `exactlyOnce` rather than pretend.
//!
//! Publications are kept per process and target for the process' life, as
//! the Python sink keeps them: closing the last one of a stream ends its
//! session, and the archive would start another recording for the next
//! task. Back pressure is waited out up to the message timeout, then the
//! write fails naming the stream (the Python sink's texts).

use crate::archive_session::connect_client;
use crate::range_planner::PlanError;
use crate::sink_columns::{bad_stream, null_channel, null_stream};
use crate::writer_options::WriterOptions;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use sulis_client::{Client, OfferError, Publication};

/// Why a write failed: the class both sinks raise, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkFailure {
    Option(String),
    Row(String),
    Sink(String),
    Timeout(String),
    NoDriver(String),
}

impl SinkFailure {
    pub fn named(self) -> (&'static str, String) {
        match self {
            SinkFailure::Option(t) => ("OptionError", t),
            SinkFailure::Row(t) => ("RowError", t),
            SinkFailure::Sink(t) => ("SinkError", t),
            SinkFailure::Timeout(t) => ("SinkTimeoutError", t),
            SinkFailure::NoDriver(t) => ("NoMediaDriverError", t),
        }
    }
}

/// The name of a refused offer (`sulis.OfferResult`'s).
pub fn offer_result_name(e: &OfferError) -> String {
    match e {
        OfferError::NotConnected => "NOT_CONNECTED".into(),
        OfferError::BackPressured => "BACK_PRESSURED".into(),
        OfferError::AdminAction => "ADMIN_ACTION".into(),
        OfferError::Closed => "CLOSED".into(),
        OfferError::MaxPositionExceeded => "MAX_POSITION_EXCEEDED".into(),
        OfferError::MessageTooLong { length, max } => {
            format!("a message of {length} bytes, longer than the stream's maximum of {max}")
        }
        OfferError::Client(e) => format!("the client failed: {e}"),
    }
}

/// A publication that can take no more (closed, at its maximum position).
pub fn publication_ended(channel: &str, stream_id: i32, result: &str) -> String {
    format!("sulis sink: publication on {channel} stream {stream_id}: {result}")
}

/// Offers refused for the whole message timeout (`result`: the last
/// refusal's name).
pub fn refused(channel: &str, stream_id: i32, timeout_s: f64, result: &str) -> String {
    let why = if result == "NOT_CONNECTED" {
        format!(
            " (nobody subscribes: is the stream being recorded? ArchiveClient.start_recording({}, {stream_id}))",
            crate::option_values::repr(channel)
        )
    } else {
        String::new()
    };
    format!("sulis sink: {channel} stream {stream_id} refused offers for {timeout_s:.0}s: {result}{why}")
}

/// The JVM sink is at least once: `exactlyOnce` must be set to false.
pub fn at_least_once(opts: &WriterOptions) -> Result<(), PlanError> {
    if opts.exactly_once {
        return Err(PlanError::Option("option exactlyOnce: the JVM sink publishes each row as it comes (so in real-time mode too), at least once: a task Spark runs again publishes its rows again. Set exactlyOnce=false, or write through the Python sink (format(\"sulis\"), micro-batches), which is exactly once".into()));
    }
    Ok(())
}

type Key = (String, String, i32);

struct Shared {
    /// Clients by driver directory (kept while the process lives).
    clients: HashMap<String, Arc<Client>>,
    publications: HashMap<Key, Arc<Publication>>,
}

static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

/// One task's writer: where its rows go, and their publications.
pub struct SinkPublisher {
    opts: WriterOptions,
    /// Targets by id, as the writer resolved them.
    targets: Vec<(String, i32, Arc<Publication>)>,
    ids: HashMap<(String, i32), usize>,
}

impl SinkPublisher {
    pub fn new(opts: WriterOptions) -> Result<SinkPublisher, SinkFailure> {
        at_least_once(&opts).map_err(|e| SinkFailure::Option(e.named().1))?;
        Ok(SinkPublisher {
            opts,
            targets: Vec::new(),
            ids: HashMap::new(),
        })
    }

    /// The id of row `row`'s target: the options', else its `channel` and
    /// `stream_id` columns (None where null).
    pub fn target(
        &mut self,
        row: i64,
        channel: Option<&str>,
        stream_id: Option<i64>,
    ) -> Result<usize, SinkFailure> {
        let channel = match (&self.opts.channel, channel) {
            (Some(c), _) => c.clone(),
            (None, Some(c)) => c.to_string(),
            (None, None) => return Err(SinkFailure::Row(null_channel(row))),
        };
        let stream_id = match (self.opts.stream_id, stream_id) {
            (Some(s), _) => s,
            (None, Some(s)) => {
                i32::try_from(s).map_err(|_| SinkFailure::Row(bad_stream(row, s)))?
            }
            (None, None) => return Err(SinkFailure::Row(null_stream(row))),
        };
        if let Some(&id) = self.ids.get(&(channel.clone(), stream_id)) {
            return Ok(id);
        }
        let publication = self.publication(&channel, stream_id)?;
        self.targets.push((channel.clone(), stream_id, publication));
        self.ids
            .insert((channel, stream_id), self.targets.len() - 1);
        Ok(self.targets.len() - 1)
    }

    fn publication(&self, channel: &str, stream_id: i32) -> Result<Arc<Publication>, SinkFailure> {
        let address = &self.opts.archive;
        let dir = address.driver_dir.clone().unwrap_or_default();
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        let shared = shared.get_or_insert_with(|| Shared {
            clients: HashMap::new(),
            publications: HashMap::new(),
        });
        let key = (dir.clone(), channel.to_string(), stream_id);
        if let Some(p) = shared.publications.get(&key).filter(|p| !p.is_closed()) {
            return Ok(p.clone());
        }
        let client = match shared.clients.get(&dir).filter(|c| c.check().is_ok()) {
            Some(c) => c.clone(),
            None => {
                let c = connect_client(address)
                    .map(Arc::new)
                    .map_err(|e| SinkFailure::NoDriver(e.named().1))?;
                shared.clients.insert(dir, c.clone());
                c
            }
        };
        let p = client
            .add_publication(channel, stream_id)
            .map(Arc::new)
            .map_err(|e| {
                SinkFailure::Sink(format!(
                    "sulis sink: cannot publish on channel {} stream {stream_id}: {e}",
                    crate::option_values::repr(channel)
                ))
            })?;
        shared.publications.insert(key, p.clone());
        Ok(p)
    }

    /// Offers `value` to target `id` (with `reserved` as its reserved value),
    /// waiting out back pressure up to the message timeout.
    pub fn offer(&self, id: usize, value: &[u8], reserved: Option<i64>) -> Result<(), SinkFailure> {
        let (channel, stream_id, p) = &self.targets[id];
        let since = Instant::now();
        let timeout = Duration::from_secs_f64(self.opts.archive.message_timeout_s);
        loop {
            let e = match p.offer_with(value, reserved) {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            match e {
                OfferError::Closed
                | OfferError::MaxPositionExceeded
                | OfferError::MessageTooLong { .. }
                | OfferError::Client(_) => {
                    return Err(SinkFailure::Sink(publication_ended(
                        channel,
                        *stream_id,
                        &offer_result_name(&e),
                    )))
                }
                _ => {}
            }
            if since.elapsed() > timeout {
                return Err(SinkFailure::Timeout(refused(
                    channel,
                    *stream_id,
                    self.opts.archive.message_timeout_s,
                    &offer_result_name(&e),
                )));
            }
            std::thread::sleep(if matches!(e, OfferError::NotConnected) {
                Duration::from_millis(5)
            } else {
                Duration::from_micros(100)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> WriterOptions {
        WriterOptions::of(pairs)
    }

    #[test]
    fn exactly_once_is_refused_by_name() {
        let Err(SinkFailure::Option(t)) = SinkPublisher::new(opts(&[])) else {
            panic!("exactlyOnce defaults to true and is refused")
        };
        assert!(
            t.starts_with("option exactlyOnce: the JVM sink publishes each row as it comes"),
            "{t}"
        );
        assert!(SinkPublisher::new(opts(&[("exactlyOnce", "false")])).is_ok());
    }

    #[test]
    fn a_row_without_a_target_is_named() {
        let mut p = SinkPublisher::new(opts(&[("exactlyOnce", "false")])).unwrap();
        assert_eq!(
            p.target(3, None, Some(1)),
            Err(SinkFailure::Row(null_channel(3)))
        );
        assert_eq!(
            p.target(4, Some("aeron:ipc"), None),
            Err(SinkFailure::Row(null_stream(4)))
        );
        assert_eq!(
            p.target(5, Some("aeron:ipc"), Some(1 << 40)),
            Err(SinkFailure::Row(bad_stream(5, 1 << 40)))
        );
    }
}
