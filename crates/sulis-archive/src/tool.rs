//! Offline inspection of an archive directory (what `sulis archive-tool`
//! does): the catalog's entries with their states, and a check that every
//! recording's segment files hold whole, consistent frames up to its stop
//! position.

use crate::catalog::Catalog;
use crate::checksum::Checksum;
use crate::frame_fields as fields;
use crate::mark_file::MarkFileReader;
use crate::segment::{Geometry, SegmentReader};
use std::path::Path;
use sulis_protocol::archive::catalog::{
    encode_entry, CatalogEntry, CatalogHeader, CATALOG_FILE, CATALOG_HEADER_LENGTH,
};
use sulis_protocol::archive::messages::{recording_state, NULL_VALUE};
use sulis_protocol::archive::segment::parse_segment_file_name;

/// The catalog's entries (every state) and what could not be read.
pub fn describe(dir: &Path) -> Result<(Vec<CatalogEntry>, Vec<String>), String> {
    if !dir
        .join(sulis_protocol::archive::catalog::CATALOG_FILE)
        .exists()
    {
        return Err(format!("{} holds no archive.catalog", dir.display()));
    }
    let catalog = Catalog::open(dir, 4096, 0).map_err(|e| e.to_string())?;
    Ok((catalog.entries(), catalog.problems().to_vec()))
}

/// One recording's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Recording id.
    pub recording_id: i64,
    /// Everything from the start to the stop position reads as whole frames.
    pub ok: bool,
    /// What was found.
    pub message: String,
}

/// Where one segment file of a recording is (`sulis archive-tool DIR segments`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentRow {
    /// Its recording.
    pub recording_id: i64,
    /// The stream position the file starts at.
    pub base: i64,
    /// "disk", "store" or "disk and store" (an upload not finished), or
    /// "missing".
    pub location: String,
    /// Its length in bytes (on the disk, else in the store).
    pub length: u64,
    /// Its key in the object store ("" if not there).
    pub key: String,
}

/// Every segment file of every VALID recording (or of `recording_id`),
/// from its start's segment to its stop's, and where each is.
pub fn segments(dir: &Path, recording_id: Option<i64>) -> Result<Vec<SegmentRow>, String> {
    let (entries, _) = describe(dir)?;
    let tiered = crate::tier::tier_log::read_tier_log(dir).map_err(|e| e.to_string())?;
    let mut files_of = std::collections::BTreeMap::<i64, Vec<i64>>::new();
    for (id, base, _) in segment_files(dir) {
        files_of.entry(id).or_default().push(base);
    }
    let mut rows = Vec::new();
    for e in entries.into_iter().filter(|e| {
        e.state == recording_state::VALID
            && recording_id.is_none_or(|id| id == e.descriptor.recording_id)
    }) {
        let d = e.descriptor;
        let g = Geometry::of(&d);
        if !g.is_valid() {
            continue;
        }
        let on_disk = files_of.get(&d.recording_id).map_or(&[][..], |v| &v[..]);
        let last = match d.stop_position {
            NULL_VALUE => on_disk
                .iter()
                .copied()
                .max()
                .unwrap_or(g.base_of(d.start_position)),
            stop => g.base_of(stop),
        };
        let mut base = g.base_of(d.start_position);
        while base <= last {
            let path = g.path(dir, base);
            let local = std::fs::metadata(&path).ok().map(|m| m.len());
            let stored = tiered.get(&(d.recording_id, base));
            // A recording stopped on a boundary has no file (or an empty one) past it.
            if !(base == d.stop_position && local.is_none_or(|l| l == 0) && stored.is_none()) {
                rows.push(SegmentRow {
                    recording_id: d.recording_id,
                    base,
                    location: match (local, stored) {
                        (Some(_), Some(_)) => "disk and store",
                        (Some(_), None) => "disk",
                        (None, Some(_)) => "store",
                        (None, None) => "missing",
                    }
                    .to_string(),
                    length: local.or(stored.map(|s| s.length)).unwrap_or(0),
                    key: stored.map(|s| s.key.clone()).unwrap_or_default(),
                });
            }
            base += g.segment_length;
        }
    }
    Ok(rows)
}

/// Reads every VALID recording's frames from its start to its stop
/// position (an active or unfinished one: as far as its files go). With a
/// `checksum` (Aeron's `verify -checksum`), each entry's descriptor
/// checksum and every DATA frame's are checked too. `interrupted` is asked
/// between reads (a megabyte at most): when it says so, the verification
/// stops with an error.
pub fn verify(
    dir: &Path,
    checksum: Option<Checksum>,
    interrupted: &dyn Fn() -> bool,
) -> Result<Vec<Verdict>, String> {
    let (entries, problems) = describe(dir)?;
    let catalog = match checksum {
        Some(_) => Some(Catalog::open(dir, 4096, 0).map_err(|e| e.to_string())?),
        None => None,
    };
    let mut out: Vec<Verdict> = problems
        .into_iter()
        .map(|p| Verdict {
            recording_id: NULL_VALUE,
            ok: false,
            message: p,
        })
        .collect();
    let mut buf = vec![0u8; 1 << 20];
    // Segments in the object store are not read (verify reads the disk): they were checked on upload and
    // are checked again against their CRC-32C whenever they are read back.
    let tiered = crate::tier::tier_log::read_tier_log(dir).map_err(|e| e.to_string())?;
    for e in entries {
        let d = e.descriptor;
        if e.state != recording_state::VALID {
            continue;
        }
        let g = Geometry::of(&d);
        if !g.is_valid() {
            out.push(Verdict {
                recording_id: d.recording_id,
                ok: false,
                message: format!(
                    "term length {} / segment length {} are not a valid geometry",
                    d.term_buffer_length, d.segment_file_length
                ),
            });
            continue;
        }
        if let (Some(c), Some(catalog)) = (checksum, &catalog) {
            match catalog.descriptor_checksum(d.recording_id, c) {
                Some((stored, computed)) if stored != computed => {
                    out.push(Verdict {
                        recording_id: d.recording_id,
                        ok: false,
                        message: format!(
                            "catalog entry {} checksum mismatch: the entry says {stored},                              its descriptor gives {computed}",
                            c.name()
                        ),
                    });
                    continue;
                }
                _ => {}
            }
        }
        if buf.len() < g.term_length as usize {
            buf.resize(g.term_length as usize, 0);
        }
        let end = if d.stop_position == NULL_VALUE {
            i64::MAX
        } else {
            d.stop_position
        };
        let mut reader = SegmentReader::new(dir, g, d.start_position).with_checksum(checksum);
        let mut in_store = 0;
        let verdict = loop {
            let base = g.base_of(reader.position());
            if reader.position() < end
                && tiered.contains_key(&(d.recording_id, base))
                && !g.path(dir, base).exists()
            {
                in_store += 1;
                reader =
                    SegmentReader::new(dir, g, base + g.segment_length).with_checksum(checksum);
                continue;
            }
            if interrupted() {
                return Err(format!(
                    "interrupted while verifying recording {} at position {}",
                    d.recording_id,
                    reader.position()
                ));
            }
            if reader.position() >= end {
                break Verdict {
                    recording_id: d.recording_id,
                    ok: true,
                    message: format!(
                        "{} bytes from {} to {end}",
                        end - d.start_position,
                        d.start_position
                    ),
                };
            }
            match reader.read(&mut buf, end) {
                Ok(0) if end == i64::MAX => {
                    break Verdict {
                        recording_id: d.recording_id,
                        ok: true,
                        message: format!("not stopped: frames up to {}", reader.position()),
                    }
                }
                Ok(0) => {
                    break Verdict {
                        recording_id: d.recording_id,
                        ok: false,
                        message: format!(
                            "frames end at {} before the stop position {end}",
                            reader.position()
                        ),
                    }
                }
                Ok(_) => {}
                // A bad checksum is damage, not the torn end of a recording
                // that was not stopped.
                Err(err) if end == i64::MAX && !err.to_string().contains("checksum mismatch") => {
                    break Verdict {
                        recording_id: d.recording_id,
                        ok: true,
                        message: format!("not stopped: frames up to {} ({err})", reader.position()),
                    }
                }
                Err(err) => {
                    break Verdict {
                        recording_id: d.recording_id,
                        ok: false,
                        message: err.to_string(),
                    }
                }
            }
        };
        out.push(match in_store {
            0 => verdict,
            n => Verdict {
                message: format!(
                    "{}; {n} segments in the object store not read (tiered.log)",
                    verdict.message
                ),
                ..verdict
            },
        });
    }
    Ok(out)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Refuses to change a directory an archive is running in.
fn ensure_not_running(dir: &Path) -> Result<(), String> {
    match MarkFileReader::open(dir).and_then(|m| m.alive(now_ms())) {
        Some(live) => Err(format!("{live}: stop it before changing its files")),
        None => Ok(()),
    }
}

fn open_catalog(dir: &Path) -> Result<Catalog, String> {
    describe(dir)?;
    Catalog::open(dir, 4096, 0).map_err(|e| e.to_string())
}

/// The catalog, for a verb that deletes files of recordings it does not
/// hold: refused while some entries cannot be read, since their files would
/// look like nobody's.
fn open_whole_catalog(dir: &Path, verb: &str) -> Result<Catalog, String> {
    let catalog = open_catalog(dir)?;
    match catalog.problems() {
        [] => Ok(catalog),
        problems => Err(format!(
            "{}: refusing to {verb}: {} catalog entr{} cannot be read, and {verb} would delete their recordings' files \
             ({}); look at them with describe and dump, then mark-invalid or repair them first",
            catalog.path().display(),
            problems.len(),
            if problems.len() == 1 { "y" } else { "ies" },
            problems.join("; ")
        )),
    }
}

/// Sets recording `id`'s state to VALID or INVALID (Aeron's ArchiveTool
/// `mark-valid` / `mark-invalid`): an INVALID recording is neither listed
/// nor replayed, and `compact` removes it.
pub fn mark(dir: &Path, id: i64, valid: bool) -> Result<(), String> {
    ensure_not_running(dir)?;
    let mut catalog = open_catalog(dir)?;
    let Some(e) = catalog.entry(id) else {
        return Err(format!(
            "{}: no recording {id} in the catalog",
            dir.display()
        ));
    };
    if e.state == recording_state::DELETED {
        return Err(format!(
            "recording {id} was deleted (purged): its files are gone"
        ));
    }
    let state = if valid {
        recording_state::VALID
    } else {
        recording_state::INVALID
    };
    catalog.set_state(id, state).map_err(|e| e.to_string())?;
    catalog.flush().map_err(|e| e.to_string())
}

/// What `checksum` did to one recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamped {
    /// Recording id.
    pub recording_id: i64,
    /// Segment files rewritten.
    pub files: usize,
    /// DATA frames given a checksum.
    pub frames: u64,
}

/// Aeron ArchiveTool's `checksum`: writes `c`'s checksum into every DATA
/// frame of the last segment file (or, with `all_files`, every segment
/// file) of recording `only` or of every VALID recording, and into their
/// catalog entries, so an archive run with that record checksum (and
/// `verify` with it) accepts recordings made without one. `interrupted` is
/// asked between segment files: when it says so, the catalog is left as it
/// was (stamped frames do no harm without a record checksum; a new run
/// stamps them again) and the call fails.
pub fn checksum(
    dir: &Path,
    c: Checksum,
    only: Option<i64>,
    all_files: bool,
    interrupted: &dyn Fn() -> bool,
) -> Result<Vec<Stamped>, String> {
    ensure_not_running(dir)?;
    let mut catalog = open_catalog(dir)?;
    if let Some(id) = only {
        if catalog.recording(id).is_none() {
            return Err(format!(
                "{}: no valid recording {id} in the catalog",
                dir.display()
            ));
        }
    }
    let files = segment_files(dir);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for e in catalog.entries() {
        let d = e.descriptor;
        if e.state != recording_state::VALID || only.is_some_and(|id| id != d.recording_id) {
            continue;
        }
        let g = Geometry::of(&d);
        if !g.is_valid() {
            return Err(format!(
                "recording {}: term length {} / segment length {} are not a valid geometry",
                d.recording_id, d.term_buffer_length, d.segment_file_length
            ));
        }
        let mine: Vec<_> = files.iter().filter(|f| f.0 == d.recording_id).collect();
        let chosen = if all_files {
            &mine[..]
        } else {
            &mine[mine.len().saturating_sub(1)..]
        };
        let mut stamped = Stamped {
            recording_id: d.recording_id,
            files: 0,
            frames: 0,
        };
        for (_, base, path) in chosen {
            if interrupted() {
                return Err(format!(
                    "interrupted before {} (recording {}): the catalog is unchanged",
                    path.display(),
                    d.recording_id
                ));
            }
            stamped.frames += stamp_segment(path, *base, &d, g, c, &mut buf)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            stamped.files += 1;
        }
        out.push(stamped);
    }
    catalog.set_checksum(Some(c));
    catalog.seal_all();
    catalog.flush().map_err(|e| e.to_string())?;
    Ok(out)
}

/// Stamps the DATA frames of one segment file, a term at a time (frames
/// never cross terms), from the recording's start (if in this file) to its
/// stop position or the first empty frame. Returns the frames stamped.
fn stamp_segment(
    path: &Path,
    base: i64,
    d: &sulis_protocol::archive::messages::RecordingDescriptor,
    g: Geometry,
    c: Checksum,
    buf: &mut Vec<u8>,
) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let size = file.metadata()?.len() as i64;
    let stop = if d.stop_position == NULL_VALUE {
        i64::MAX
    } else {
        d.stop_position
    };
    let mut frames = 0u64;
    let mut position = base.max(d.start_position);
    while position < stop && position - base < size.min(g.segment_length) {
        let term_end = position - position % g.term_length + g.term_length;
        let end = term_end.min(stop).min(base + size);
        buf.resize((end - position) as usize, 0);
        file.read_exact_at(buf, (position - base) as u64)?;
        // Stop at the first empty frame: nothing was written past it.
        let mut at = 0;
        while at + 32 <= buf.len() {
            let length = fields::frame_length(buf, at);
            if length <= 0 {
                break;
            }
            frames +=
                u64::from(fields::frame_type(buf, at) == sulis_protocol::frame::HDR_TYPE_DATA);
            at += (length as usize + 31) & !31;
        }
        let whole = at.min(buf.len());
        c.stamp(&mut buf[..whole]);
        file.write_all_at(&buf[..whole], (position - base) as u64)?;
        if whole < buf.len() {
            break;
        }
        position = end;
    }
    file.sync_all()?;
    Ok(frames)
}

/// The segment files in `dir`: (recording id, base position, path), sorted.
fn segment_files(dir: &Path) -> Vec<(i64, i64, std::path::PathBuf)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (id, base) = parse_segment_file_name(&name)?;
            Some((id, base, e.path()))
        })
        .collect();
    files.sort();
    files
}

/// What `compact` did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Catalog entries removed (INVALID or DELETED).
    pub entries_removed: usize,
    /// Segment files of removed recordings deleted.
    pub files_deleted: Vec<String>,
}

/// Rewrites the catalog without its INVALID and DELETED entries, keeping every recording id and the next id, and
/// deletes the removed recordings' segment files (Aeron's `compact`). The
/// new catalog is written beside the old one and renamed over it, so a
/// crash leaves one or the other whole.
pub fn compact(dir: &Path) -> Result<Compacted, String> {
    ensure_not_running(dir)?;
    let catalog = open_whole_catalog(dir, "compact")?;
    let path = dir.join(CATALOG_FILE);
    let old = catalog.bytes();
    let header = CatalogHeader::read(old).map_err(|e| e.to_string())?;
    let alignment = header.alignment;
    let mut bytes = vec![0u8; CATALOG_HEADER_LENGTH];
    header.write(&mut bytes);
    let mut kept = std::collections::BTreeSet::new();
    let entries = catalog.entries();
    for e in &entries {
        if e.state == recording_state::VALID {
            bytes.extend_from_slice(&encode_entry(&e.descriptor, e.state, alignment));
            kept.insert(e.descriptor.recording_id);
        }
    }
    let removed = entries.len() - kept.len();
    bytes.resize(bytes.len().max(old.len()), 0);
    drop(catalog);
    let tmp = dir.join(format!("{CATALOG_FILE}.compact"));
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        sulis_concurrent::mapped_file::sync_dir(dir)
    };
    write().map_err(|e| format!("cannot write the compacted catalog {}: {e}", tmp.display()))?;
    let mut out = Compacted {
        entries_removed: removed,
        files_deleted: Vec::new(),
    };
    for (id, _, file) in segment_files(dir) {
        if !kept.contains(&id) {
            std::fs::remove_file(&file)
                .map_err(|e| format!("cannot delete {}: {e}", file.display()))?;
            out.files_deleted.push(file.display().to_string());
        }
    }
    Ok(out)
}

/// Deletes segment files no recording of the catalog owns: files of
/// recording ids the catalog does not hold, and files of a recording that
/// lie wholly before its start or after its stop (Aeron's
/// `delete-orphaned-segments`; detached segments count as before the start).
/// Returns the files deleted.
pub fn delete_orphaned_segments(dir: &Path) -> Result<Vec<String>, String> {
    ensure_not_running(dir)?;
    let catalog = open_whole_catalog(dir, "delete orphaned segments")?;
    let mut deleted = Vec::new();
    for (id, base, file) in segment_files(dir) {
        let orphan = match catalog.entry(id) {
            None => true,
            Some(e) => {
                let d = &e.descriptor;
                let segment = d.segment_file_length as i64;
                let start_base = d.start_position - d.start_position % segment.max(1);
                base + segment <= start_base
                    || (d.stop_position != NULL_VALUE && base > d.stop_position)
            }
        };
        if orphan {
            std::fs::remove_file(&file)
                .map_err(|e| format!("cannot delete {}: {e}", file.display()))?;
            deleted.push(file.display().to_string());
        }
    }
    Ok(deleted)
}

/// One frame as `dump` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// Stream position of the frame's start.
    pub position: i64,
    /// Frame length (header included).
    pub frame_length: i32,
    /// Frame type (1 DATA, 0 PAD).
    pub frame_type: u16,
    /// Flags (BEGIN 0x80, END 0x40, EOS 0x20).
    pub flags: u8,
    /// Session id.
    pub session_id: i32,
    /// Stream id.
    pub stream_id: i32,
    /// Reserved value.
    pub reserved_value: i64,
    /// The first bytes of the payload.
    pub payload_head: Vec<u8>,
}

/// Each recording of the catalog (any state) with up to `frames` of its
/// first frames read from its segment files (Aeron's `dump`); a read that
/// fails ends that recording's list with the error.
#[allow(clippy::type_complexity)]
pub fn dump(
    dir: &Path,
    frames: usize,
) -> Result<Vec<(CatalogEntry, Vec<FrameInfo>, Option<String>)>, String> {
    let (entries, _) = describe(dir)?;
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for e in entries {
        let d = &e.descriptor;
        let mut list = Vec::new();
        let mut error = None;
        let g = Geometry::of(d);
        if frames > 0 && g.is_valid() && e.state != recording_state::DELETED {
            buf.resize((g.term_length as usize).clamp(4096, 1 << 20), 0);
            let end = if d.stop_position == NULL_VALUE {
                i64::MAX
            } else {
                d.stop_position
            };
            let mut reader = SegmentReader::new(dir, g, d.start_position);
            'read: while list.len() < frames {
                let at = reader.position();
                let n = match reader.read(&mut buf, end) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(err) => {
                        error = Some(err.to_string());
                        break;
                    }
                };
                let mut offset = 0;
                while offset + 32 <= n {
                    let h = &buf[offset..offset + 32];
                    let frame_length = fields::frame_length(h, 0);
                    let body = (frame_length.max(32) as usize - 32)
                        .min(n - offset - 32)
                        .min(16);
                    list.push(FrameInfo {
                        position: at + offset as i64,
                        frame_length,
                        frame_type: fields::frame_type(h, 0),
                        flags: h[5],
                        session_id: fields::session_id(h, 0),
                        stream_id: fields::i32_at(h, 16),
                        reserved_value: fields::reserved_value(h, 0),
                        payload_head: buf[offset + 32..offset + 32 + body].to_vec(),
                    });
                    if list.len() >= frames {
                        break 'read;
                    }
                    offset += (frame_length.max(32) as usize).div_ceil(32) * 32;
                }
            }
        }
        out.push((e, list, error));
    }
    Ok(out)
}

/// What retention would do to one recording now (`sulis archive-tool DIR retention`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionRow {
    /// Recording id.
    pub recording_id: i64,
    /// Its stream.
    pub stream_id: i32,
    /// Its original channel.
    pub channel: String,
    /// Where it starts and stops (`NULL_VALUE`: still recording, or its archive stopped dead).
    pub start_position: i64,
    /// See `start_position`.
    pub stop_position: i64,
    /// The rule that decides for it, as its line reads (`None`: no rule, kept whole).
    pub rule: Option<String>,
    /// The lowest position a hold keeps (`None`: none).
    pub held_from: Option<i64>,
    /// What goes at the next check, in words.
    pub next: String,
    /// Its segments in the object store, and their bytes.
    pub in_store: usize,
    /// See `in_store`.
    pub in_store_bytes: u64,
}

/// What `retention_report` found.
#[derive(Clone, Debug, Default)]
pub struct RetentionReport {
    /// The policy's rules as their lines read (or why there are none).
    pub rules: Vec<String>,
    /// The holds, live or expired, and the hold files that do not read.
    pub holds: Vec<String>,
    /// One per valid recording.
    pub rows: Vec<RetentionRow>,
}

/// The policy file's rules, the holds (live or expired) and, per valid
/// recording, what the policy removes at the next check, read without an
/// archive (a running archive's replays hold more than this shows).
pub fn retention_report(
    dir: &Path,
    policy_file: Option<&Path>,
    hold_timeout: std::time::Duration,
) -> Result<RetentionReport, String> {
    use crate::retention::{plan, RecordingSpan, Removal, RetentionPolicy};
    let policy_path = policy_file.map_or_else(|| dir.join("retention.policy"), Path::to_path_buf);
    let policy = match std::fs::read_to_string(&policy_path) {
        Ok(text) => Some(
            RetentionPolicy::parse(&text)
                .map_err(|e| format!("retention policy file {}: {e}", policy_path.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(format!(
                "retention policy file {}: {e}",
                policy_path.display()
            ))
        }
    };
    let rules: Vec<String> = match &policy {
        Some(p) => p.rules.iter().map(|r| r.describe()).collect(),
        None => vec![format!(
            "no policy file ({}): nothing is removed",
            policy_path.display()
        )],
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let (holds, mut hold_lines) = crate::holds::read_holds(dir);
    let mut floors = std::collections::BTreeMap::<i64, i64>::new();
    for h in &holds {
        let live = h.is_live(now_ms, hold_timeout.as_millis() as i64);
        hold_lines.push(format!(
            "hold '{}': recording {} from position {} ({}, written {} s ago)",
            h.name,
            h.recording_id,
            h.position,
            if live { "live" } else { "lapsed" },
            (now_ms - h.written_ms) / 1000
        ));
        if live {
            let f = floors.entry(h.recording_id).or_insert(h.position);
            *f = (*f).min(h.position);
        }
    }
    let (entries, _) = describe(dir)?;
    let tiered = crate::tier::tier_log::read_tier_log(dir).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for e in entries
        .into_iter()
        .filter(|e| e.state == recording_state::VALID)
    {
        let d = e.descriptor;
        let rule = policy.as_ref().and_then(|p| {
            p.rule_for(
                d.stream_id,
                &[d.original_channel.as_str(), d.stripped_channel.as_str()],
            )
        });
        let g = Geometry::of(&d);
        let held_from = floors.get(&d.recording_id).copied();
        let stored: Vec<&crate::tier::tier_log::TieredSegment> = tiered
            .range((d.recording_id, i64::MIN)..=(d.recording_id, i64::MAX))
            .map(|(_, s)| s)
            .collect();
        let written = |base: i64| {
            crate::retention::written_ms(&g.path(dir, base))
                .or_else(|| tiered.get(&(d.recording_id, base)).map(|s| s.written_ms))
        };
        let span = RecordingSpan {
            start: d.start_position,
            end: d.stop_position,
            first_base: g.base_of(d.start_position),
            segment_length: g.segment_length,
            stopped: true,
            floor: held_from,
        };
        let mut next = match rule {
            None => "kept whole: no rule matches".to_string(),
            Some(r) if r.max_age.is_none() && r.max_size.is_none() => {
                format!("kept whole by the rule at line {}", r.line)
            }
            Some(_) if d.stop_position == NULL_VALUE => {
                "recording: the archive removes closed segments as they age".to_string()
            }
            Some(_) if !g.is_valid() => "impossible geometry: left alone".to_string(),
            Some(r) => match plan(r, span, now_ms, written) {
                Removal::Keep => "nothing yet".to_string(),
                Removal::Detach { new_start, why } => format!(
                    "segments below {new_start} ({} bytes): {why}",
                    new_start - d.start_position
                ),
                Removal::Purge { why } => format!("the whole recording: {why}"),
            },
        };
        if let Some(r) =
            rule.filter(|r| r.tier_after.is_some() && d.stop_position != NULL_VALUE && g.is_valid())
        {
            let moving = crate::retention::to_tier(
                r,
                span,
                now_ms,
                |base| crate::retention::written_ms(&g.path(dir, base)),
                |base| tiered.contains_key(&(d.recording_id, base)),
            );
            if !moving.is_empty() {
                next.push_str(&format!(
                    "; to the object store: {} segments from position {}",
                    moving.len(),
                    moving[0]
                ));
            }
        }
        rows.push(RetentionRow {
            recording_id: d.recording_id,
            stream_id: d.stream_id,
            channel: d.original_channel.clone(),
            start_position: d.start_position,
            stop_position: d.stop_position,
            rule: rule.map(|r| r.describe()),
            held_from,
            next,
            in_store: stored.len(),
            in_store_bytes: stored.iter().map(|s| s.length).sum(),
        });
    }
    Ok(RetentionReport {
        rules,
        holds: hold_lines,
        rows,
    })
}
