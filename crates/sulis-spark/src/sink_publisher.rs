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
//! The publications are the process' (`sink_publications`). Back pressure
//! is waited out up to the message timeout, then the write fails naming
//! the stream.

use crate::exactly_once_target::{ExactlyOnceTarget, TaskIdentity};
use crate::sink_columns::{bad_stream, null_channel, null_stream};
pub use crate::sink_publications::SinkFailure;
use crate::sink_publications::{shared_publication, wait_refused};
use crate::writer_options::WriterOptions;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use sulis_client::Publication;

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
