//! One sink task's writer, for both sinks: where each row goes and its
//! publishing.
//!
//! - At least once (`exactlyOnce=false`, a batch write, real-time mode):
//!   each row offered as it comes through a publication the process
//!   shares; a task Spark runs again publishes its rows again.
//! - Exactly once (a streaming write's micro-batches): each target's rows
//!   go through an [`ExactlyOnceTarget`], whose journal makes a re-run
//!   skip (and check) what earlier attempts of its task published.
//!
//! Publications are kept per process and target for the process' life:
//! closing the last one of a stream ends its session, and the archive
//! would start another recording for the next task. Back pressure is
//! waited out up to the message timeout, then the write fails naming the
//! stream.

use crate::archive_session::connect_client;
use crate::exactly_once_target::{ExactlyOnceTarget, TaskIdentity};
use crate::sink_columns::{bad_stream, null_channel, null_stream};
use crate::writer_options::WriterOptions;
use crate::ArchiveAddress;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use sulis_client::{Client, ExclusivePublication, OfferError, Publication};

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
        OfferError::StorageFull(e) => format!("no room for the log's pages: {e}"),
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

type Key = (String, String, i32);

struct Shared {
    /// Clients by driver directory (kept while the process lives).
    clients: HashMap<String, Arc<Client>>,
    publications: HashMap<Key, Arc<Publication>>,
    /// Exclusive publications no task holds now.
    exclusive: HashMap<Key, Vec<ExclusivePublication>>,
}

static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

fn with_shared<T>(f: impl FnOnce(&mut Shared) -> T) -> T {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    f(shared.get_or_insert_with(|| Shared {
        clients: HashMap::new(),
        publications: HashMap::new(),
        exclusive: HashMap::new(),
    }))
}

fn key(address: &ArchiveAddress, channel: &str, stream_id: i32) -> Key {
    (
        address.driver_dir.clone().unwrap_or_default(),
        channel.to_string(),
        stream_id,
    )
}

fn client(shared: &mut Shared, address: &ArchiveAddress) -> Result<Arc<Client>, SinkFailure> {
    let dir = address.driver_dir.clone().unwrap_or_default();
    if let Some(c) = shared.clients.get(&dir).filter(|c| c.check().is_ok()) {
        return Ok(c.clone());
    }
    let c = connect_client(address)
        .map(Arc::new)
        .map_err(|e| SinkFailure::NoDriver(e.named().1))?;
    shared.clients.insert(dir, c.clone());
    Ok(c)
}

fn cannot_publish(channel: &str, stream_id: i32, e: impl std::fmt::Display) -> SinkFailure {
    SinkFailure::Sink(format!(
        "sulis sink: cannot publish on channel {} stream {stream_id}: {e}",
        crate::option_values::repr(channel)
    ))
}

/// This process' shared publication on `channel`/`stream_id`.
pub fn shared_publication(
    address: &ArchiveAddress,
    channel: &str,
    stream_id: i32,
) -> Result<Arc<Publication>, SinkFailure> {
    with_shared(|shared| {
        let k = key(address, channel, stream_id);
        if let Some(p) = shared.publications.get(&k).filter(|p| !p.is_closed()) {
            return Ok(p.clone());
        }
        let p = client(shared, address)?
            .add_publication(channel, stream_id)
            .map(Arc::new)
            .map_err(|e| cannot_publish(channel, stream_id, e))?;
        shared.publications.insert(k, p.clone());
        Ok(p)
    })
}

/// An exclusive publication on `channel`/`stream_id` for one task: one no
/// task holds now, else a new one (its own session).
pub fn take_exclusive(
    address: &ArchiveAddress,
    channel: &str,
    stream_id: i32,
) -> Result<ExclusivePublication, SinkFailure> {
    with_shared(|shared| {
        let k = key(address, channel, stream_id);
        let free = shared.exclusive.entry(k).or_default();
        while let Some(p) = free.pop() {
            if !p.is_closed() {
                return Ok(p);
            }
        }
        client(shared, address)?
            .add_exclusive_publication(channel, stream_id)
            .map_err(|e| cannot_publish(channel, stream_id, e))
    })
}

/// A task's exclusive publication back, for the process' next task.
pub fn give_back_exclusive(
    address: &ArchiveAddress,
    channel: &str,
    stream_id: i32,
    p: ExclusivePublication,
) {
    if !p.is_closed() {
        with_shared(|shared| {
            shared
                .exclusive
                .entry(key(address, channel, stream_id))
                .or_default()
                .push(p)
        });
    }
}

/// After a refused offer: fails where the publication can take no more or
/// offers were refused since `since` for the message timeout, else waits a
/// little.
pub fn wait_refused(
    e: &OfferError,
    channel: &str,
    stream_id: i32,
    since: Instant,
    timeout_s: f64,
) -> Result<(), SinkFailure> {
    match e {
        OfferError::Closed
        | OfferError::MaxPositionExceeded
        | OfferError::MessageTooLong { .. }
        | OfferError::Client(_) => {
            return Err(SinkFailure::Sink(publication_ended(
                channel,
                stream_id,
                &offer_result_name(e),
            )))
        }
        _ => {}
    }
    if since.elapsed().as_secs_f64() > timeout_s {
        return Err(SinkFailure::Timeout(refused(
            channel,
            stream_id,
            timeout_s,
            &offer_result_name(e),
        )));
    }
    if crate::interrupt::interrupted() {
        return Err(SinkFailure::Sink(crate::interrupt::text(&format!(
            "{channel} stream {stream_id} to take the rows"
        ))));
    }
    std::thread::sleep(if matches!(e, OfferError::NotConnected) {
        Duration::from_millis(5)
    } else {
        Duration::from_micros(100)
    });
    Ok(())
}

enum Target {
    Shared(String, i32, Arc<Publication>),
    Exactly(Box<ExactlyOnceTarget>),
}

/// One task's writer: where its rows go, and their publishing.
pub struct SinkPublisher {
    opts: WriterOptions,
    /// Exactly once: the task.
    task: Option<TaskIdentity>,
    /// Targets by id, as the writer resolved them.
    targets: Vec<Target>,
    /// Target ids by the stream's recording key.
    ids: HashMap<String, usize>,
    rows: i64,
    notes: Vec<String>,
}

impl SinkPublisher {
    /// A writer: exactly once where `task` is given, else at least once.
    /// With a fixed target (both `channel` and `streamId` options) an
    /// exactly-once task claims it at once, rows or none: a re-run with
    /// fewer rows than were published fails.
    pub fn new(
        opts: WriterOptions,
        task: Option<TaskIdentity>,
    ) -> Result<SinkPublisher, SinkFailure> {
        let mut p = SinkPublisher {
            opts,
            task,
            targets: Vec::new(),
            ids: HashMap::new(),
            rows: 0,
            notes: Vec::new(),
        };
        if p.task.is_some() {
            if let (Some(c), Some(s)) = (p.opts.channel.clone(), p.opts.stream_id) {
                p.target_of(&c, s)?;
            }
        }
        Ok(p)
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
        self.target_of(&channel, stream_id)
    }

    /// The id of target `channel`/`stream_id`, opened (claimed) on first use.
    /// Two channels the archive records as one stream (`alias`, `term-length`
    /// aside) are one target: one claim, one run.
    pub fn target_of(&mut self, channel: &str, stream_id: i32) -> Result<usize, SinkFailure> {
        let key = crate::sink_archive::stream_key(channel, stream_id)
            .unwrap_or_else(|| format!("{channel}#{stream_id}"));
        if let Some(&id) = self.ids.get(&key) {
            return Ok(id);
        }
        let target = match &self.task {
            None => Target::Shared(
                channel.to_string(),
                stream_id,
                shared_publication(&self.opts.archive, channel, stream_id)?,
            ),
            Some(task) => {
                let mut t =
                    ExactlyOnceTarget::open(&self.opts, channel, stream_id, task, &mut self.notes)?;
                self.notes.append(&mut t.notes);
                Target::Exactly(Box::new(t))
            }
        };
        self.targets.push(target);
        self.ids.insert(key, self.targets.len() - 1);
        Ok(self.targets.len() - 1)
    }

    /// Offers `value` to target `id` (with `reserved` as its reserved value),
    /// waiting out back pressure up to the message timeout.
    pub fn offer(
        &mut self,
        id: usize,
        value: &[u8],
        reserved: Option<i64>,
    ) -> Result<(), SinkFailure> {
        self.offer_all(id, &[value], |_| reserved)
    }

    /// Offers `values` to target `id`, value `i` with `reserved(i)` as its
    /// reserved value; exactly once, the leading values earlier attempts
    /// published are checked and skipped.
    pub fn offer_all(
        &mut self,
        id: usize,
        values: &[&[u8]],
        reserved: impl Fn(usize) -> Option<i64>,
    ) -> Result<(), SinkFailure> {
        self.rows += values.len() as i64;
        let timeout_s = self.opts.archive.message_timeout_s;
        match &mut self.targets[id] {
            Target::Shared(channel, stream_id, p) => {
                let mut i = 0;
                let mut since = Instant::now();
                while i < values.len() {
                    let (n, r) =
                        p.offer_batch_with(values[i..].iter().copied(), |k| reserved(i + k));
                    i += n;
                    if n > 0 {
                        since = Instant::now();
                    }
                    if let Err(e) = r {
                        wait_refused(&e, channel, *stream_id, since, timeout_s)?;
                    }
                }
                Ok(())
            }
            Target::Exactly(t) => {
                let mut i = 0;
                while i < values.len() && t.to_skip() > 0 {
                    t.take_skipped(values[i])?;
                    i += 1;
                }
                t.publish(&values[i..], |k| reserved(i + k))
            }
        }
    }

    /// After the last row: exactly once, every target's rows recorded and
    /// the journal told. `(published, skipped)`.
    pub fn finish(&mut self) -> Result<(i64, i64), SinkFailure> {
        let (mut published, mut skipped) = (0, 0);
        for t in &mut self.targets {
            match t {
                Target::Shared(..) => {}
                Target::Exactly(t) => {
                    let closed = t.close();
                    self.notes.append(&mut t.notes);
                    let (p, s) = closed?;
                    published += p;
                    skipped += s;
                }
            }
        }
        if self.task.is_none() {
            published = self.rows;
        }
        Ok((published, skipped))
    }

    /// After an error: each exactly-once target tells the journal, where it
    /// can, how its attempt ended.
    pub fn fail(&mut self, error: &str) {
        for t in &mut self.targets {
            if let Target::Exactly(t) = t {
                t.fail(error);
                self.notes.append(&mut t.notes);
            }
        }
    }

    /// What to log since the last call.
    pub fn drain_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> WriterOptions {
        WriterOptions::of(pairs)
    }

    #[test]
    fn a_row_without_a_target_is_named() {
        let mut p = SinkPublisher::new(opts(&[("exactlyOnce", "false")]), None).unwrap();
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
