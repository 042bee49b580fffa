//! What changes a recording's files: truncate, purge, detach, attach,
//! delete detached segments and migrate, each changing the catalog first.

use super::*;

impl ArchiveConductor {
    pub(super) fn check_idle(
        &mut self,
        sid: i64,
        k: i64,
        recording_id: i64,
        what: &str,
    ) -> Option<RecordingDescriptor> {
        let Some(d) = self.catalog.recording(recording_id) else {
            self.unknown_recording(sid, k, recording_id);
            return None;
        };
        if d.stop_position == NULL_VALUE || self.active_recordings.contains_key(&recording_id) {
            self.session(sid).error(
                k,
                error_code::ACTIVE_RECORDING,
                &format!("cannot {what} recording {recording_id}: it is recording"),
            );
            return None;
        }
        Some(d)
    }

    pub(super) fn segment_files(&self, recording_id: i64) -> Vec<(i64, std::path::PathBuf)> {
        let mut files: Vec<(i64, std::path::PathBuf)> = std::fs::read_dir(&self.ctx.archive_dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let (id, base) = sulis_protocol::archive::segment::parse_segment_file_name(&name)?;
                (id == recording_id).then(|| (base, e.path()))
            })
            .collect();
        files.sort();
        files
    }

    pub(super) fn truncate(&mut self, sid: i64, k: i64, recording_id: i64, position: i64) {
        let Some(d) = self.check_idle(sid, k, recording_id, "truncate") else {
            return;
        };
        if position & 31 != 0 || position < d.start_position || position > d.stop_position {
            return self.session(sid).error(
                k,
                error_code::INVALID_POSITION,
                &format!(
                    "invalid truncate position {position}: not a frame position within [{}, {}]",
                    d.start_position, d.stop_position
                ),
            );
        }
        // A segment in the object store is never rewritten: a truncate into one is refused.
        let g = Self::geometry_of(recording_id, &d);
        if let Some(s) = self.tier.as_ref().and_then(|t| {
            t.segments()
                .into_iter()
                .find(|s| s.recording_id == recording_id && s.base + g.segment_length > position)
        }) {
            return self.session(sid).error(
                k,
                error_code::GENERIC,
                &format!(
                    "cannot truncate recording {recording_id} to {position}: its segment at {} is in the object \
                     store (tiered storage), which is never rewritten; truncate at or after {}",
                    s.base,
                    s.base + g.segment_length
                ),
            );
        }
        // Its replays end first (the replayer takes commands before it reads).
        self.stop_replays(|_, of| of == recording_id);
        // The catalog first: from here on nothing past `position` is the
        // recording's, whatever happens to the files after.
        if let Err(e) = self.catalog.set_stop_position(recording_id, position) {
            return self.catalog_failed(sid, k, &format!("truncate recording {recording_id}"), e);
        }
        crate::crash_point::crash_point(crate::crash_point::points::TRUNCATE_AFTER_CATALOG);
        let keep_base = g.base_of(position);
        let mut doomed = Vec::new();
        for (base, path) in self.segment_files(recording_id) {
            if base > keep_base
                || (base == keep_base && position == base && position > d.start_position)
            {
                doomed.push(path);
            } else if base == keep_base {
                // Zero what lies past the new end, so nothing reads as a frame there.
                let erased = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| {
                        f.set_len((position - base) as u64)?;
                        f.set_len(d.segment_file_length as u64)
                    });
                if let Err(e) = erased {
                    self.record_error(format!(
                        "recording {recording_id} truncated to {position}: cannot erase what follows in {}: {e}",
                        path.display()
                    ));
                }
            }
        }
        let n = self.queue_deletion(sid, k, recording_id, doomed);
        self.session(sid).ok(k, n as i64);
    }

    /// A replay of the recording is running or waiting.
    pub(super) fn is_replayed(&self, recording_id: i64) -> bool {
        self.active_replays
            .values()
            .any(|r| r.recording_id == recording_id)
    }

    /// A catalog change failed: nothing else of the request is done.
    pub(super) fn catalog_failed(
        &mut self,
        sid: i64,
        k: i64,
        what: &str,
        e: sulis_protocol::archive::catalog::CatalogError,
    ) {
        let message = format!("cannot {what}: {e}");
        self.record_error(message.clone());
        self.session(sid).error(k, error_code::GENERIC, &message);
    }

    /// Queues `files` of a recording for deletion off the duty cycle (they
    /// are renamed at once); the request's Signal DELETE follows when they
    /// are gone. Returns how many were queued.
    pub(super) fn queue_deletion(
        &mut self,
        sid: i64,
        k: i64,
        recording_id: i64,
        files: Vec<std::path::PathBuf>,
    ) -> usize {
        let (session, errors) = DeleteSegmentsSession::new(sid, k, recording_id, files);
        for e in errors {
            self.record_error(e);
        }
        let n = session.len();
        self.deletions.push_back(session);
        n
    }

    /// Deletes one queued file; signals the requests whose files are gone.
    pub(super) fn run_deletions(&mut self) -> usize {
        let Some(d) = self.deletions.front_mut() else {
            return 0;
        };
        let work = match d.do_work() {
            Ok(n) => n,
            Err(e) => {
                self.record_error(e);
                1
            }
        };
        if self.deletions.front().is_some_and(|d| d.is_done()) {
            let d = self.deletions.pop_front().expect("checked");
            self.signal(
                d.control_session_id,
                d.correlation_id,
                d.recording_id,
                NULL_VALUE,
                NULL_VALUE,
                recording_signal::DELETE,
            );
            return work + 1;
        }
        work
    }

    pub(super) fn geometry_of(recording_id: i64, d: &RecordingDescriptor) -> Geometry {
        Geometry {
            recording_id,
            ..Geometry::of(d)
        }
    }

    /// Moves a recording's start to `new_start` (a segment base above its
    /// first segment, not past its last), leaving the files before it
    /// detached. True when done; else the error was sent.
    pub(super) fn detach_segments(
        &mut self,
        sid: i64,
        k: i64,
        recording_id: i64,
        new_start: i64,
    ) -> bool {
        let Some(d) = self.catalog.recording(recording_id) else {
            self.unknown_recording(sid, k, recording_id);
            return false;
        };
        let g = Self::geometry_of(recording_id, &d);
        let end = self.live_position(recording_id).unwrap_or(d.stop_position);
        let why = if g.base_of(new_start) != new_start {
            Some("is not the start of a segment file".to_string())
        } else if new_start <= g.base_of(d.start_position) {
            Some(format!(
                "is not after the first segment, which starts at {}",
                g.base_of(d.start_position)
            ))
        } else if new_start > g.base_of(end.max(d.start_position)) {
            Some(format!(
                "is past the segment in use, which starts at {}",
                g.base_of(end)
            ))
        } else if self.is_replayed(recording_id) {
            Some("cannot be applied while the recording is being replayed".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            self.session(sid).error(
                k,
                error_code::GENERIC,
                &format!("invalid segment start position {new_start} for recording {recording_id}: it {why}"),
            );
            return false;
        }
        if let Err(e) = self.catalog.set_start_position(recording_id, new_start) {
            self.session(sid)
                .error(k, error_code::GENERIC, &e.to_string());
            return false;
        }
        true
    }

    pub(super) fn delete_detached_segments(&mut self, sid: i64, k: i64, recording_id: i64) {
        let Some(d) = self.catalog.recording(recording_id) else {
            return self.unknown_recording(sid, k, recording_id);
        };
        let g = Self::geometry_of(recording_id, &d);
        let first = g.base_of(d.start_position);
        let detached = self
            .segment_files(recording_id)
            .into_iter()
            .filter(|(base, _)| *base < first)
            .map(|(_, path)| path)
            .collect();
        let n = self.queue_deletion(sid, k, recording_id, detached);
        self.session(sid).ok(k, n as i64);
    }

    /// Attaches the detached segment files still there, from the one before
    /// the first attached segment downwards while they are contiguous.
    pub(super) fn attach_segments(&mut self, sid: i64, k: i64, recording_id: i64) {
        let Some(d) = self.catalog.recording(recording_id) else {
            return self.unknown_recording(sid, k, recording_id);
        };
        let g = Self::geometry_of(recording_id, &d);
        let mut base = g.base_of(d.start_position);
        let mut attached = 0;
        while base - g.segment_length >= 0
            && g.path(&self.ctx.archive_dir, base - g.segment_length)
                .exists()
        {
            base -= g.segment_length;
            attached += 1;
        }
        if attached > 0 {
            // The lowest file may start before the recording did (it joined
            // mid-term): its first frame, not its base, is the start.
            let start = first_frame_position(&self.ctx.archive_dir, g, base).unwrap_or(base);
            if let Err(e) = self.catalog.set_start_position(recording_id, start) {
                return self
                    .session(sid)
                    .error(k, error_code::GENERIC, &e.to_string());
            }
        }
        self.session(sid).ok(k, attached);
    }

    /// Moves the segment files of stopped recording `src_id` to `dst_id`,
    /// which it joins end to start (either way round) at a segment boundary
    /// of both: `dst_id` then covers both, `src_id` is left empty (Aeron's
    /// MigrateSegments). Answers how many files moved.
    pub(super) fn migrate_segments(&mut self, sid: i64, k: i64, src_id: i64, dst_id: i64) {
        let Some(src) = self.catalog.recording(src_id) else {
            return self.unknown_recording(sid, k, src_id);
        };
        let Some(dst) = self.catalog.recording(dst_id) else {
            return self.unknown_recording(sid, k, dst_id);
        };
        if src.stop_position == NULL_VALUE || self.active_recordings.contains_key(&src_id) {
            return self.session(sid).error(
                k,
                error_code::ACTIVE_RECORDING,
                &format!("invalid migrate: recording {src_id} is still active"),
            );
        }
        for (what, a, b) in [
            (
                "segment file length",
                src.segment_file_length,
                dst.segment_file_length,
            ),
            (
                "term buffer length",
                src.term_buffer_length,
                dst.term_buffer_length,
            ),
            ("initial term id", src.initial_term_id, dst.initial_term_id),
            ("stream id", src.stream_id, dst.stream_id),
            ("mtu length", src.mtu_length, dst.mtu_length),
        ] {
            if a != b {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!("invalid migrate: the {what} of recording {src_id} is {a}, of recording {dst_id} {b}"),
                );
            }
        }
        let src_first = src.stop_position == dst.start_position;
        let join = if src_first {
            src.stop_position
        } else if src.start_position == dst.stop_position {
            src.start_position
        } else {
            return self.session(sid).error(
                k,
                error_code::GENERIC,
                &format!(
                    "invalid migrate: recordings {src_id} [{}, {}] and {dst_id} [{}, {}] are not contiguous",
                    src.start_position, src.stop_position, dst.start_position, dst.stop_position
                ),
            );
        };
        let (gs, gd) = (
            Self::geometry_of(src_id, &src),
            Self::geometry_of(dst_id, &dst),
        );
        for (label, g) in [("source", gs), ("destination", gd)] {
            if g.base_of(join) != join {
                return self.session(sid).error(
                    k,
                    error_code::GENERIC,
                    &format!(
                        "invalid migrate: the join position {join} is not on a segment boundary of the {label} recording \
                         (segment file length {})",
                        g.segment_length
                    ),
                );
            }
        }
        let dir = self.ctx.archive_dir.clone();
        let (first, last) = (
            gs.base_of(src.start_position),
            gs.base_of(src.stop_position),
        );
        let mut moves = Vec::new();
        let mut empty = Vec::new();
        let mut base = first;
        while base <= last {
            let (from, to) = (gs.path(&dir, base), gd.path(&dir, base));
            if base == src.stop_position {
                // The empty segment a recording stopped at a boundary leaves.
                empty.push(from);
            } else if !from.exists() {
                let message = format!(
                    "invalid migrate: source segment file {} is missing",
                    from.display()
                );
                return self.session(sid).error(k, error_code::GENERIC, &message);
            } else if to.exists() {
                let message = format!(
                    "invalid migrate: destination segment file {} exists already",
                    to.display()
                );
                return self.session(sid).error(k, error_code::GENERIC, &message);
            } else {
                moves.push((from, to));
            }
            base += gs.segment_length;
        }
        // The files get their destination names beside their source names
        // (hard links), then the catalog changes, then the source names go:
        // at every moment each recording's catalog entry describes bytes
        // that are there under its own name.
        let mut linked: Vec<std::path::PathBuf> = Vec::new();
        for (from, to) in &moves {
            if let Err(e) = std::fs::hard_link(from, to) {
                for l in &linked {
                    let _ = std::fs::remove_file(l);
                }
                let message = format!(
                    "migrate: cannot link {} to {}: {e}",
                    from.display(),
                    to.display()
                );
                self.record_error(message.clone());
                return self.session(sid).error(k, error_code::GENERIC, &message);
            }
            linked.push(to.clone());
        }
        let updated = if src_first {
            self.catalog.set_start_position(dst_id, src.start_position)
        } else {
            self.catalog.set_stop_position(dst_id, src.stop_position)
        };
        if let Err(e) = updated {
            for l in &linked {
                let _ = std::fs::remove_file(l);
            }
            let what = format!("migrate the segments of recording {src_id} to {dst_id}");
            return self.catalog_failed(sid, k, &what, e);
        }
        if let Err(e) = self.catalog.set_stop_position(src_id, src.start_position) {
            // The destination has the files; the source still describes its
            // own, so its names stay.
            let what = format!("empty recording {src_id} after migrating its segments to {dst_id}");
            return self.catalog_failed(sid, k, &what, e);
        }
        let mut doomed: Vec<std::path::PathBuf> =
            moves.iter().map(|(from, _)| from.clone()).collect();
        doomed.extend(empty);
        let n = moves.len();
        self.queue_deletion(sid, k, src_id, doomed);
        self.session(sid).ok(k, n as i64);
    }

    pub(super) fn purge(&mut self, sid: i64, k: i64, recording_id: i64) {
        let Some(_) = self.check_idle(sid, k, recording_id, "purge") else {
            return;
        };
        if self.is_replayed(recording_id) {
            return self.session(sid).error(
                k,
                error_code::ACTIVE_RECORDING,
                &format!("cannot purge recording {recording_id}: it is being replayed"),
            );
        }
        if let Err(e) = self
            .catalog
            .set_state(recording_id, recording_state::DELETED)
        {
            return self.catalog_failed(sid, k, &format!("purge recording {recording_id}"), e);
        }
        crate::crash_point::crash_point(crate::crash_point::points::PURGE_AFTER_CATALOG);
        let files = self
            .segment_files(recording_id)
            .into_iter()
            .map(|(_, path)| path)
            .collect();
        let n = self.queue_deletion(sid, k, recording_id, files);
        self.session(sid).ok(k, n as i64);
    }
}

/// The position of the first frame in the segment file at `base` (whose
/// header says it lies where it lies), scanning its first term.
pub(super) fn first_frame_position(dir: &Path, g: Geometry, base: i64) -> Option<i64> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(g.path(dir, base)).ok()?;
    let mut term = vec![0u8; g.term_length as usize];
    file.read_exact_at(&mut term, 0).ok()?;
    let term_id = g.term_id_at(base);
    (0..term.len())
        .step_by(32)
        .find(|&o| {
            let h = &term[o..o + 32];
            i32::from_le_bytes(h[0..4].try_into().unwrap()) > 0
                && i32::from_le_bytes(h[8..12].try_into().unwrap()) == o as i32
                && i32::from_le_bytes(h[20..24].try_into().unwrap()) == term_id
        })
        .map(|o| base + o as i64)
}
