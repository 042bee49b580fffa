//! Tiering on the conductor's duty cycle (`crate::tier` does the I/O on
//! its own threads): at each retention check the closed segments a rule's
//! `tier-after` has passed are queued for upload, and the store's copies
//! that no recording needs any more (its recording deleted, or below its
//! start: retention, a purge, a detach) are removed; every cycle what the
//! tier's threads did is logged, its failures to the error log too.

use super::*;
use crate::retention::{to_tier, written_ms, RecordingSpan, RetentionRule};
use crate::tier::credentials::StoreCredentials;
use crate::tier::object_store::StoreLocation;
use crate::tier::{Tier, TierEvent, TierSettings};

/// Starts the tier of an archive with `tier_store` set: the credentials
/// found, the bucket checked, `tiered.log` opened.
pub(super) fn start_tier(ctx: &ArchiveContext, spec: &str) -> Result<Arc<Tier>, String> {
    let location = StoreLocation::parse(spec, &ctx.tier_region)?;
    let shown = location.describe();
    let credentials = StoreCredentials::find().map_err(|e| format!("tier_store {shown}: {e}"))?;
    let settings = TierSettings {
        location,
        credentials,
        timeout: ctx.tier_timeout,
        cache_size: ctx.tier_cache_size,
        upload_rate: ctx.tier_upload_rate,
    };
    let (tier, unchecked) = Tier::start(&settings, &ctx.archive_dir).map_err(|e| {
        format!(
            "tier_store {shown} ({}): {e}",
            settings.credentials.describe()
        )
    })?;
    if let Some(why) = unchecked {
        eprintln!(
            "sulis archive {}: tier: {why}: recording goes on, segments stay on the disk until the store \
             answers",
            ctx.archive_dir.display()
        );
    }
    eprintln!(
        "sulis archive {}: tier: segments move to {shown} ({}); {} segments there",
        ctx.archive_dir.display(),
        settings.credentials.describe(),
        tier.segments().len()
    );
    for path in tier.finish_interrupted_uploads() {
        eprintln!(
            "sulis archive {}: tier: {} removed from the disk: the store holds it verified (its upload was \
             interrupted after it was logged)",
            ctx.archive_dir.display(),
            path.display()
        );
    }
    Ok(tier)
}

impl ArchiveConductor {
    /// Logs what the tier's threads did; their failures go to the error
    /// log too (an upload is tried again at a later check).
    pub(super) fn run_tier_events(&mut self) -> usize {
        let Some(tier) = self.tier.clone() else {
            return 0;
        };
        let events = tier.take_events();
        let store = tier.describe_store();
        for e in &events {
            match e {
                TierEvent::Uploaded {
                    recording_id,
                    base,
                    bytes,
                } => {
                    ArchiveCounters::add(&self.counters.tier_segments, 1);
                    ArchiveCounters::add(&self.counters.tier_bytes, *bytes as i64);
                    self.say(&format!(
                        "tier: recording {recording_id} segment at {base} ({bytes} bytes) moved to {store}, verified"
                    ))
                }
                TierEvent::Removed { recording_id, base } => self.say(&format!(
                    "tier: recording {recording_id} segment at {base} removed from {store}: no recording needs it"
                )),
                TierEvent::UploadFailed { why, .. } | TierEvent::RemoveFailed { why, .. } => {
                    let line = format!("tier: {why} (tried again at a later check)");
                    self.say(&line);
                    self.record_error(line);
                }
            }
        }
        events.len()
    }

    /// Removes from the store the segments no recording needs any more.
    pub(super) fn sweep_store(&mut self) -> usize {
        let Some(tier) = self.tier.clone() else {
            return 0;
        };
        let mut work = 0;
        for s in tier.segments() {
            let needed = self.catalog.recording(s.recording_id).is_some_and(|d| {
                let g = Self::geometry_of(s.recording_id, &d);
                s.base + g.segment_length > d.start_position
            });
            if !needed && tier.remove(s.recording_id, s.base) {
                work += 1;
            }
        }
        work
    }

    /// Queues the uploads `rule` asks for of one recording.
    pub(super) fn tier_recording(
        &mut self,
        rule: &RetentionRule,
        g: Geometry,
        span: RecordingSpan,
        now_ms: i64,
    ) -> usize {
        let Some(tier) = self.tier.clone() else {
            return 0;
        };
        let dir = &self.ctx.archive_dir;
        let id = g.recording_id;
        let bases = to_tier(
            rule,
            span,
            now_ms,
            |base| written_ms(&g.path(dir, base)),
            |base| tier.segment(id, base).is_some() || tier.is_busy(id, base),
        );
        let mut work = 0;
        for base in bases {
            if tier.upload(id, base, g.path(dir, base)) {
                work += 1;
            }
        }
        work
    }

    /// When the segment at `base` was last written: its file's time, or
    /// what `tiered.log` says of it once it moved.
    pub(super) fn segment_written_ms(&self, g: &Geometry, base: i64) -> Option<i64> {
        written_ms(&g.path(&self.ctx.archive_dir, base)).or_else(|| {
            self.tier
                .as_ref()
                .and_then(|t| t.segment(g.recording_id, base))
                .map(|s| s.written_ms)
        })
    }
}
