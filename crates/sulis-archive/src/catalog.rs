//! The catalog file, `archive.catalog`: one entry per recording, in Aeron
//! Archive's 3.1.0 layout (`sulis_protocol::archive::catalog`), memory
//! mapped, grown by half again when full.
//!
//! Opening it rebuilds an index from recording id to entry. An entry that
//! cannot be read (a bad state, strings that run past it) is reported in
//! [`Catalog::problems`] and left out; the others stay usable. An entry
//! whose length runs past the end of the file ends the list there, as a
//! torn append would.
//!
//! Sync levels, as Aeron's `catalog.file.sync.level`: 0 leaves writes to
//! the page cache; 1 flushes the changed bytes after every change; 2 also
//! syncs the file's metadata.
//!
//! With a checksum ([`Catalog::set_checksum`], the archive's record
//! checksum) every change of an entry's descriptor rewrites the entry
//! header's checksum field, as Aeron's catalog does: the checksum of the
//! `length` bytes after the 32-byte entry header.

use crate::checksum::Checksum;
use crate::segment::{recover_stop_position, Geometry};
use memmap2::MmapMut;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use sulis_protocol::archive::catalog::{
    decode_entry, descriptor, encode_entry, entry, entry_length, CatalogEntry, CatalogError,
    CatalogHeader, CATALOG_FILE, CATALOG_HEADER_LENGTH, DESCRIPTOR_HEADER_LENGTH,
};
use sulis_protocol::archive::messages::{recording_state, RecordingDescriptor, NULL_VALUE};

/// An open catalog.
pub struct Catalog {
    path: PathBuf,
    file: File,
    map: MmapMut,
    header: CatalogHeader,
    /// Recording id → entry offset, for every entry that could be read.
    index: BTreeMap<i64, usize>,
    /// First free byte (after the last entry).
    end: usize,
    sync_level: u8,
    problems: Vec<String>,
    checksum: Option<Checksum>,
}

fn io_error(path: &Path, what: &str, e: io::Error) -> CatalogError {
    CatalogError {
        message: format!("{}: {what}: {e}", path.display()),
        os_error: e.raw_os_error(),
    }
}

impl Catalog {
    /// Opens `dir/archive.catalog`, creating it with `capacity` bytes if it
    /// does not exist.
    pub fn open(dir: &Path, capacity: usize, sync_level: u8) -> Result<Catalog, CatalogError> {
        let path = dir.join(CATALOG_FILE);
        let exists = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_error(&path, "cannot open", e))?;
        set_private(&path);
        let len = file
            .metadata()
            .map_err(|e| io_error(&path, "cannot stat", e))?
            .len() as usize;
        if !exists || len == 0 {
            file.set_len(capacity.max(4096) as u64)
                .map_err(|e| io_error(&path, "cannot size", e))?;
        }
        // Every page of the map gets its storage now: a store into a hole
        // of a full file system would be a SIGBUS, not an error.
        let len = file.metadata().map_or(0, |m| m.len()) as usize;
        reserve(&file, &path, len)?;
        // SAFETY: the archive is the only writer of its catalog (its mark
        // file keeps a second archive out of the directory); readers in
        // other processes only read.
        let mut map =
            unsafe { MmapMut::map_mut(&file) }.map_err(|e| io_error(&path, "cannot map", e))?;
        let created = !exists || len == 0;
        // A header of zeros is a catalog whose first page never reached the disk (made, then a power
        // cut before anything synced it): rebuilt, never taken for an old format.
        let zeroed = !created
            && map[..CATALOG_HEADER_LENGTH.min(map.len())]
                .iter()
                .all(|&b| b == 0);
        let header = if created || zeroed {
            let h = CatalogHeader::new();
            h.write(&mut map);
            h
        } else {
            CatalogHeader::read(&map).map_err(|e| {
                CatalogError::new(format!(
                    "{}: {}; if this is a sulis or Aeron 1.4x+ archive's catalog, its first bytes are \
                     damaged: move the file aside and start the archive, which makes a new one (the \
                     recordings it named are then unknown to it; their segment files stay)",
                    path.display(),
                    e.message
                ))
            })?
        };
        let mut catalog = Catalog {
            path,
            file,
            map,
            header,
            index: BTreeMap::new(),
            end: CATALOG_HEADER_LENGTH,
            sync_level,
            problems: Vec::new(),
            checksum: None,
        };
        catalog.load();
        if !(created || zeroed) {
            catalog.sync(0, CATALOG_HEADER_LENGTH)?;
            return Ok(catalog);
        }
        // Ids above every recording whose segment files are here (a catalog moved aside, or whose
        // first page was lost): a new recording never takes another's files.
        let on_disk = max_segment_file_id(dir);
        if on_disk >= catalog.header.next_recording_id {
            catalog.header.next_recording_id = on_disk + 1;
            catalog.write_header();
        }
        if zeroed {
            catalog.problems.push(format!(
                "{}: its header was zeros (the file was made but its first page never reached the disk, as \
                 after a power cut before any sync); rebuilt: {} recordings read from it, the next id {}",
                catalog.path.display(),
                catalog.index.len(),
                catalog.header.next_recording_id
            ));
        }
        // What the archive needs to open again is on disk before anything refers to it, whatever
        // the sync level: the header, the file's size and its name in the directory.
        catalog.sync_durably(0, catalog.map.len())?;
        sulis_concurrent::mapped_file::sync_dir(dir)
            .map_err(|e| io_error(dir, "cannot sync the directory", e))?;
        Ok(catalog)
    }

    /// Builds the index. An entry that cannot be read is reported in
    /// [`Catalog::problems`] with its offset and left out; the loader then
    /// looks for the next readable entry at the following alignment
    /// boundaries, so one damaged entry hides no other. New entries go
    /// after the last byte of the file that is not zero, never over bytes
    /// that could not be read, and get ids above every id the file shows.
    fn load(&mut self) {
        let alignment = self.header.alignment.max(32);
        // Entries lie at the header's end plus whole aligned lengths.
        let data_end = last_nonzero(&self.map)
            .filter(|&n| n > CATALOG_HEADER_LENGTH)
            .map_or(CATALOG_HEADER_LENGTH, |n| {
                CATALOG_HEADER_LENGTH
                    + sulis_protocol::archive::catalog::align(n - CATALOG_HEADER_LENGTH, alignment)
            });
        let mut max_id = -1i64;
        let mut offset = CATALOG_HEADER_LENGTH;
        while offset < data_end {
            let why = match decode_entry(&self.map, offset) {
                Ok(Some(e)) => {
                    let id = e.descriptor.recording_id;
                    max_id = max_id.max(id);
                    if id < 0 {
                        self.problems.push(format!(
                            "catalog entry at offset {offset}: recording id {id} is negative; left out"
                        ));
                    } else if let Some(first) = self.index.get(&id) {
                        self.problems.push(format!(
                            "catalog entry at offset {offset}: recording id {id} repeats the entry at offset {first}; \
                             the first is kept, this one left out"
                        ));
                    } else if let Some(why) = impossible_geometry(&e.descriptor) {
                        self.problems.push(format!(
                            "catalog entry at offset {offset}: recording {id} {why}; left out (its files are kept)"
                        ));
                    } else {
                        self.index.insert(id, offset);
                    }
                    offset += e.frame_length;
                    continue;
                }
                Ok(None) => format!(
                    "catalog entry at offset {offset}: no entry where more data follows (length {})",
                    read_i32(&self.map, offset + entry::LENGTH)
                ),
                Err(err) => err.message,
            };
            // Damaged: the next entry that reads whole, past the last id seen.
            let next = (offset + alignment..data_end)
                .step_by(alignment)
                .find(|&o| {
                    matches!(decode_entry(&self.map, o), Ok(Some(e))
                    if e.descriptor.recording_id > max_id
                        && e.frame_length.is_multiple_of(alignment))
                });
            let to = next.unwrap_or(data_end);
            self.problems.push(format!(
                "{why}; the {} bytes from offset {offset} to {to} cannot be read and are left as they are",
                to - offset
            ));
            offset = to;
        }
        self.end = offset.max(data_end);
        let next_id = max_id + 1;
        if self.header.next_recording_id < next_id {
            self.header.next_recording_id = next_id;
            self.write_header();
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What could not be read when it was opened.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// Id the next recording gets.
    pub fn next_recording_id(&self) -> i64 {
        self.header.next_recording_id
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Every readable entry, in recording id order.
    pub fn entries(&self) -> Vec<CatalogEntry> {
        self.index.keys().filter_map(|&id| self.entry(id)).collect()
    }

    /// The entry of recording `id` (any state).
    pub fn entry(&self, id: i64) -> Option<CatalogEntry> {
        let &offset = self.index.get(&id)?;
        decode_entry(&self.map, offset).ok().flatten()
    }

    /// The descriptor of a VALID recording `id`.
    pub fn recording(&self, id: i64) -> Option<RecordingDescriptor> {
        self.entry(id)
            .filter(|e| e.state == recording_state::VALID)
            .map(|e| e.descriptor)
    }

    /// Ids of the VALID recordings from `from_id` on.
    pub fn valid_ids_from(&self, from_id: i64) -> Vec<i64> {
        self.valid_ids(from_id).collect()
    }

    /// The same, one at a time (a listing that stops after a few).
    pub fn valid_ids(&self, from_id: i64) -> impl Iterator<Item = i64> + '_ {
        self.entries_from(from_id)
            .filter(|e| e.state() == recording_state::VALID)
            .map(|e| e.recording_id())
    }

    /// Every entry (any state) from recording id `from_id` on, in recording
    /// id order (backwards with `rev`), read where it lies in the file: no
    /// decoding, no copy. Finding the first is O(log n), each next one O(1).
    pub fn entries_from(&self, from_id: i64) -> impl DoubleEndedIterator<Item = EntryRef<'_>> + '_ {
        self.index
            .range(from_id.max(0)..)
            .map(|(&id, &offset)| self.entry_ref_at(id, offset))
    }

    /// Recording `id`'s entry (any state), read in place.
    pub fn entry_ref(&self, id: i64) -> Option<EntryRef<'_>> {
        let &offset = self.index.get(&id)?;
        Some(self.entry_ref_at(id, offset))
    }

    fn entry_ref_at(&self, id: i64, offset: usize) -> EntryRef<'_> {
        // Entries in the index were read whole when the catalog was opened
        // or written whole since; a length that does not fit (which would
        // need another process writing the file) gives an empty entry,
        // which reads as no recording.
        let length = read_i32(&self.map, offset + entry::LENGTH);
        let end = offset + DESCRIPTOR_HEADER_LENGTH + length.max(0) as usize;
        let frame = match self.map.get(offset..end) {
            Some(f) if length > 0 => f,
            _ => &[],
        };
        EntryRef {
            recording_id: id,
            frame,
        }
    }

    /// Adds a VALID recording described by `d` (its `recording_id` is
    /// ignored: the next id is given) and returns its id.
    pub fn add_recording(&mut self, mut d: RecordingDescriptor) -> Result<i64, CatalogError> {
        let id = self.header.next_recording_id;
        d.recording_id = id;
        let bytes = encode_entry(&d, recording_state::VALID, self.header.alignment);
        self.ensure_room(bytes.len())?;
        let offset = self.end;
        // The body first, the length last: a reader never sees a length
        // whose entry is not there yet.
        self.map[offset + 4..offset + bytes.len()].copy_from_slice(&bytes[4..]);
        self.map[offset..offset + 4].copy_from_slice(&bytes[..4]);
        self.end += bytes.len();
        self.index.insert(id, offset);
        self.seal(offset)?;
        self.header.next_recording_id = id + 1;
        self.write_header();
        // Whatever the sync level: a recording the catalog lost at a power cut would leave its
        // segment files (and a cluster's recording log, synced at every level) naming an id the
        // archive does not know. One sync per recording, not per block.
        self.sync_durably(0, offset + bytes.len())?;
        Ok(id)
    }

    fn ensure_room(&mut self, needed: usize) -> Result<(), CatalogError> {
        if self.end + needed <= self.map.len() {
            return Ok(());
        }
        let mut capacity = self.map.len();
        while self.end + needed > capacity {
            capacity += capacity / 2;
        }
        if capacity > i32::MAX as usize {
            return Err(CatalogError::new(format!(
                "{}: the catalog cannot grow past 2 GiB",
                self.path.display()
            )));
        }
        self.map
            .flush()
            .map_err(|e| io_error(&self.path, "cannot flush", e))?;
        reserve(&self.file, &self.path, capacity)?;
        self.file
            .set_len(capacity as u64)
            .map_err(|e| io_error(&self.path, "cannot grow", e))?;
        // SAFETY: as in `open`.
        self.map = unsafe { MmapMut::map_mut(&self.file) }
            .map_err(|e| io_error(&self.path, "cannot map", e))?;
        Ok(())
    }

    fn write_header(&mut self) {
        let h = self.header;
        h.write(&mut self.map);
    }

    fn offset_of(&self, id: i64) -> Result<usize, CatalogError> {
        self.index
            .get(&id)
            .copied()
            .ok_or_else(|| CatalogError::new(format!("unknown recording id {id}")))
    }

    fn put_i64(&mut self, id: i64, field: usize, value: i64) -> Result<(), CatalogError> {
        let offset = self.offset_of(id)?;
        let o = offset + field;
        self.map[o..o + 8].copy_from_slice(&value.to_le_bytes());
        self.sync(o, 8)?;
        self.seal(offset)
    }

    /// Keeps entries' descriptor checksums from now on (`None`: leaves the
    /// field as it is).
    pub fn set_checksum(&mut self, checksum: Option<Checksum>) {
        self.checksum = checksum;
    }

    /// Rewrites every entry's descriptor checksum with the catalog's
    /// checksum (ArchiveTool `checksum`).
    pub fn seal_all(&mut self) {
        let offsets: Vec<usize> = self.index.values().copied().collect();
        for offset in offsets {
            let _ = self.seal(offset);
        }
    }

    /// The descriptor body of the entry at `offset` (the bytes its checksum covers).
    fn body(&self, offset: usize) -> &[u8] {
        let start = offset + sulis_protocol::archive::catalog::DESCRIPTOR_HEADER_LENGTH;
        let length = read_i32(&self.map, offset + entry::LENGTH).max(0) as usize;
        &self.map[start..(start + length).min(self.map.len())]
    }

    fn seal(&mut self, offset: usize) -> Result<(), CatalogError> {
        if let Some(c) = self.checksum {
            let sum = c.compute(self.body(offset));
            let o = offset + entry::CHECKSUM;
            self.map[o..o + 4].copy_from_slice(&sum.to_le_bytes());
            self.sync(o, 4)?;
        }
        Ok(())
    }

    /// Recording `id`'s descriptor checksum as stored and as `c` computes
    /// it from the entry (`None` for an unknown id).
    pub fn descriptor_checksum(&self, id: i64, c: Checksum) -> Option<(i32, i32)> {
        let offset = *self.index.get(&id)?;
        Some((
            read_i32(&self.map, offset + entry::CHECKSUM),
            c.compute(self.body(offset)),
        ))
    }

    /// A recording stopped at `position`, at `timestamp_ms`.
    pub fn record_stop(
        &mut self,
        id: i64,
        position: i64,
        timestamp_ms: i64,
    ) -> Result<(), CatalogError> {
        self.put_i64(id, descriptor::STOP_TIMESTAMP, timestamp_ms)?;
        self.put_i64(id, descriptor::STOP_POSITION, position)
    }

    /// A recording is extended by a new session (image `session_id`, as
    /// Aeron's catalog records it): it is active again.
    pub fn record_extend(
        &mut self,
        id: i64,
        control_session_id: i64,
        correlation_id: i64,
        session_id: i32,
    ) -> Result<(), CatalogError> {
        let o = self.offset_of(id)? + descriptor::SESSION_ID;
        self.map[o..o + 4].copy_from_slice(&session_id.to_le_bytes());
        self.sync(o, 4)?;
        self.put_i64(id, descriptor::CONTROL_SESSION_ID, control_session_id)?;
        self.put_i64(id, descriptor::CORRELATION_ID, correlation_id)?;
        self.put_i64(id, descriptor::STOP_TIMESTAMP, -1)?;
        self.put_i64(id, descriptor::STOP_POSITION, -1)
    }

    /// Sets the stop position (truncation, recovery).
    pub fn set_stop_position(&mut self, id: i64, position: i64) -> Result<(), CatalogError> {
        self.put_i64(id, descriptor::STOP_POSITION, position)
    }

    /// Sets the start position (segments detached or purged).
    pub fn set_start_position(&mut self, id: i64, position: i64) -> Result<(), CatalogError> {
        self.put_i64(id, descriptor::START_POSITION, position)
    }

    /// Sets an entry's state (INVALID, VALID, DELETED).
    pub fn set_state(&mut self, id: i64, state: i32) -> Result<(), CatalogError> {
        let o = self.offset_of(id)? + entry::STATE;
        self.map[o..o + 4].copy_from_slice(&state.to_le_bytes());
        self.sync(o, 4)
    }

    /// The whole length an entry for `d` would take.
    pub fn entry_length(&self, d: &RecordingDescriptor) -> usize {
        entry_length(d, self.header.alignment)
    }

    /// Writes the changed pages among `len` bytes at `offset` to the disk
    /// whatever the sync level: one `msync(MS_SYNC)`, which syncs as
    /// `fdatasync` does (with the file's size and the extents the pages need,
    /// not its times). One call for a new entry and the header before it.
    fn sync_durably(&self, offset: usize, len: usize) -> Result<(), CatalogError> {
        self.map
            .flush_range(offset, len)
            .map_err(|e| io_error(&self.path, "cannot sync", e))
    }

    /// Syncs a change as the sync level asks; a failure is the change's
    /// failure (the caller must not act as if it were on disk).
    fn sync(&self, offset: usize, len: usize) -> Result<(), CatalogError> {
        if self.sync_level == 0 {
            return Ok(());
        }
        self.map
            .flush_range(offset, len)
            .map_err(|e| io_error(&self.path, "cannot sync", e))?;
        if self.sync_level >= 2 {
            self.file
                .sync_all()
                .map_err(|e| io_error(&self.path, "cannot sync", e))?;
        }
        Ok(())
    }

    /// Recovers recordings an earlier run did not stop (killed
    /// mid-recording): each one's stop position becomes the end of its last
    /// whole frame ([`recover_stop_position`]: this run's checksum setting
    /// only helps prove a last frame whole). Returns what it found to report
    /// as errors (a cut torn frame, a recording whose files cannot be read)
    /// and, apart, a note per recording recovered whole (news, not an error);
    /// fails only when a recovered stop position cannot be written.
    pub fn recover(
        &mut self,
        dir: &Path,
        checksum: Option<Checksum>,
    ) -> Result<(Vec<String>, Vec<String>), CatalogError> {
        let (mut found, mut notes) = (Vec::new(), Vec::new());
        for e in self.entries() {
            let d = e.descriptor;
            if e.state != recording_state::VALID || d.stop_position != NULL_VALUE {
                continue;
            }
            match recover_stop_position(dir, Geometry::of(&d), d.start_position, checksum) {
                Ok(r) => {
                    match r.torn {
                        Some(why) => found.push(format!("recording {}: {why}", d.recording_id)),
                        None => notes.push(format!(
                            "recording {} was not stopped (its archive was killed or lost power): it ends \
                             at {}, where its whole frames on disk end",
                            d.recording_id, r.stop_position
                        )),
                    }
                    let now_ms = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |t| t.as_millis() as i64);
                    self.record_stop(d.recording_id, r.stop_position, now_ms)
                        .map_err(|e| CatalogError {
                            message: format!(
                                "recording {}: cannot record its recovered stop position: {e}",
                                d.recording_id
                            ),
                            os_error: e.os_error,
                        })?;
                }
                Err(err) => found.push(format!(
                    "recording {}: cannot recover its stop position: {err}",
                    d.recording_id
                )),
            }
        }
        Ok((found, notes))
    }

    /// After a crash: the recordings stopped at or after `since_ms` whose
    /// stop position runs past the data on disk get the end of their last
    /// whole frame on disk as their stop position. At file sync level 0 a
    /// power cut keeps what the kernel happened to write back, and the
    /// catalog's page may have reached the disk before the segments' (or a
    /// sync that did not happen may have been trusted): a reader (a replay,
    /// a cluster recovering its log) must never wait for, or be promised,
    /// bytes that are gone. Recordings stopped before `since_ms` had their
    /// data written back long before the crash and are not read. Returns a
    /// line per recording cut back, naming what was lost.
    pub fn verify_recent_stops(
        &mut self,
        dir: &Path,
        since_ms: i64,
        checksum: Option<Checksum>,
    ) -> Result<Vec<String>, CatalogError> {
        self.verify_recent_stops_with(dir, since_ms, checksum, &|_, _| false)
    }

    /// [`Catalog::verify_recent_stops`], where `in_store(recording, base)`
    /// says a segment missing from the disk is in the object store
    /// (`tiered.log`): it was verified when it moved, and is not lost.
    pub fn verify_recent_stops_with(
        &mut self,
        dir: &Path,
        since_ms: i64,
        checksum: Option<Checksum>,
        in_store: &dyn Fn(i64, i64) -> bool,
    ) -> Result<Vec<String>, CatalogError> {
        let mut found = Vec::new();
        for e in self.entries() {
            let d = e.descriptor;
            if e.state != recording_state::VALID
                || d.stop_position == NULL_VALUE
                || d.stop_position <= d.start_position
                || d.stop_timestamp < since_ms
                || impossible_geometry(&d).is_some()
            {
                continue;
            }
            let g = Geometry::of(&d);
            // Every segment up to the stop position must be there; the first
            // one missing ends the recording at its base.
            let first = g.base_of(d.start_position);
            let last = g.base_of(d.stop_position - 1);
            let missing = (0..)
                .map(|i| first + i * g.segment_length)
                .take_while(|&b| b <= last)
                .find(|&b| !g.path(dir, b).exists() && !in_store(d.recording_id, b));
            let on_disk = match missing {
                Some(base) => base.max(d.start_position),
                None => match recover_stop_position(dir, g, last, checksum) {
                    Ok(r) => r.stop_position,
                    Err(err) => {
                        found.push(format!(
                            "recording {}: cannot check its stop position {} against its files: {err}",
                            d.recording_id, d.stop_position
                        ));
                        continue;
                    }
                },
            };
            if on_disk < d.stop_position {
                self.put_i64(d.recording_id, descriptor::STOP_POSITION, on_disk)?;
                found.push(format!(
                    "recording {}: its stop position {} ran past its data on disk, which ends at {on_disk}{}: \
                     the {} bytes after it were lost with the page cache (a power cut at file sync level 0, \
                     or a sync that did not reach the disk); it now stops at {on_disk}",
                    d.recording_id,
                    d.stop_position,
                    missing.map_or(String::new(), |b| format!(
                        " (segment file {} is missing)",
                        g.path(dir, b).display()
                    )),
                    d.stop_position - on_disk
                ));
            }
        }
        Ok(found)
    }

    /// Finishes what a crash interrupted after the catalog had changed and
    /// before the files did (truncate and purge change the catalog first):
    /// the segment files of a DELETED recording are deleted; of a stopped
    /// recording, the files wholly past its stop position are deleted and
    /// what follows the stop position in its last file is erased, so that no
    /// later extension or recovery mistakes it for frames. Run at start,
    /// after [`Catalog::recover`]; costs a 4-byte read per stopped recording
    /// unless `erase` is false: the archive before stopped cleanly, and a
    /// truncate erases before it answers, so there is nothing to erase
    /// (100,000 recordings' reads were two thirds of a restart). Returns what
    /// it did and what it could not do, one line each.
    pub fn finish_interrupted_changes(&self, dir: &Path, erase: bool) -> Vec<String> {
        use sulis_protocol::archive::segment::parse_segment_file_name;
        let mut files: BTreeMap<i64, Vec<(i64, PathBuf)>> = BTreeMap::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name();
            if let Some((id, base)) = parse_segment_file_name(&name.to_string_lossy()) {
                files.entry(id).or_default().push((base, e.path()));
            }
        }
        let mut found = Vec::new();
        for e in self.entries() {
            let d = &e.descriptor;
            let Some(segments) = files.get(&d.recording_id) else {
                continue;
            };
            let doomed: Vec<&PathBuf> = if e.state == recording_state::DELETED {
                segments.iter().map(|(_, p)| p).collect()
            } else if e.state == recording_state::VALID
                && d.stop_position != NULL_VALUE
                && impossible_geometry(d).is_none()
            {
                let g = Geometry::of(d);
                let keep = g.base_of(d.stop_position);
                // The segment the stop position begins holds nothing of the recording: deleted, so an
                // extension starts it afresh (a recording a power cut left empty has its first segment
                // file, all zeros, there).
                let empty_last = d.stop_position == keep;
                if let Some((_, path)) = segments
                    .iter()
                    .find(|(b, _)| erase && *b == keep && !empty_last)
                {
                    let offset = (d.stop_position - keep) as u64;
                    match erase_after(path, offset, d.segment_file_length as u64) {
                        Ok(true) => found.push(format!(
                            "recording {}: erased what followed its stop position {} in {} (left by a truncate, or a torn write, a crash interrupted)",
                            d.recording_id,
                            d.stop_position,
                            path.display()
                        )),
                        Ok(false) => {}
                        Err(err) => found.push(format!(
                            "recording {}: cannot erase what follows its stop position in {}: {err}",
                            d.recording_id,
                            path.display()
                        )),
                    }
                }
                segments
                    .iter()
                    .filter(|(b, _)| *b > keep || (*b == keep && empty_last))
                    .map(|(_, p)| p)
                    .collect()
            } else {
                Vec::new()
            };
            for path in doomed {
                match std::fs::remove_file(path) {
                    Ok(()) => found.push(format!(
                        "recording {}: deleted {}, which its catalog entry no longer holds (a truncate or purge a crash interrupted)",
                        d.recording_id,
                        path.display()
                    )),
                    Err(err) => found.push(format!("cannot delete {}: {err}", path.display())),
                }
            }
        }
        found
    }

    /// Replaces recording `id`'s original and stripped channels (Aeron's
    /// UpdateChannel). An entry that grows moves every later entry along
    /// (Aeron's `replaceRecording`); a shorter one keeps its length, padded.
    pub fn replace_channels(
        &mut self,
        id: i64,
        original: &str,
        stripped: &str,
    ) -> Result<(), CatalogError> {
        let offset = self.offset_of(id)?;
        let old = decode_entry(&self.map, offset)
            .map_err(|e| CatalogError::new(e.message))?
            .ok_or_else(|| {
                CatalogError::new(format!("recording {id}: its catalog entry is gone"))
            })?;
        let d = RecordingDescriptor {
            original_channel: original.into(),
            stripped_channel: stripped.into(),
            ..old.descriptor
        };
        let mut bytes = encode_entry(&d, old.state, self.header.alignment);
        if bytes.len() > old.frame_length {
            let delta = bytes.len() - old.frame_length;
            self.ensure_room(delta)?;
            let (from, end) = (offset + old.frame_length, self.end);
            self.map.copy_within(from..end, from + delta);
            for o in self.index.values_mut().filter(|o| **o > offset) {
                *o += delta;
            }
            self.end += delta;
        } else {
            // Same length as before: the rest is padding.
            let length = (old.frame_length
                - sulis_protocol::archive::catalog::DESCRIPTOR_HEADER_LENGTH)
                as i32;
            bytes[..4].copy_from_slice(&length.to_le_bytes());
            bytes.resize(old.frame_length, 0);
        }
        self.map[offset + 4..offset + bytes.len()].copy_from_slice(&bytes[4..]);
        self.map[offset..offset + 4].copy_from_slice(&bytes[..4]);
        self.seal(offset)?;
        let end = self.end;
        self.sync(offset, end - offset)
    }

    /// Flushes everything to the file.
    pub fn flush(&self) -> io::Result<()> {
        self.map.flush()
    }
}

/// A catalog entry as it lies in the file (header, descriptor block, var
/// strings, padding), read without decoding it: what a listing needs of
/// each entry it looks at.
#[derive(Clone, Copy, Debug)]
pub struct EntryRef<'a> {
    recording_id: i64,
    frame: &'a [u8],
}

impl<'a> EntryRef<'a> {
    /// Its recording id.
    pub fn recording_id(&self) -> i64 {
        self.recording_id
    }

    /// INVALID, VALID or DELETED (INVALID if the entry cannot be read).
    pub fn state(&self) -> i32 {
        read_i32(self.frame, entry::STATE)
    }

    /// The recorded stream.
    pub fn stream_id(&self) -> i32 {
        read_i32(self.frame, descriptor::STREAM_ID)
    }

    /// The recorded image's session.
    pub fn session_id(&self) -> i32 {
        read_i32(self.frame, descriptor::SESSION_ID)
    }

    /// The stripped channel (`None` if it does not lie whole in the entry
    /// or is not US-ASCII, as the descriptor's decoder would refuse it).
    pub fn stripped_channel(&self) -> Option<&'a str> {
        let o = descriptor::VAR_DATA;
        let length = u32::from_le_bytes(self.frame.get(o..o + 4)?.try_into().ok()?) as usize;
        let bytes = self.frame.get(o + 4..(o + 4).checked_add(length)?)?;
        if !bytes.is_ascii() {
            return None;
        }
        std::str::from_utf8(bytes).ok()
    }

    /// The RecordingDescriptor message a listing sends for it, answering
    /// request `correlation_id` of session `control_session_id`: the
    /// message header and those two ids, then the entry's bytes from the
    /// recording id on (what
    /// [`sulis_protocol::archive::catalog::descriptor_message`] makes of a
    /// decoded entry, byte for byte).
    pub fn descriptor_message(&self, control_session_id: i64, correlation_id: i64) -> Vec<u8> {
        let body = self.frame.get(descriptor::RECORDING_ID..).unwrap_or(&[]);
        let mut out = Vec::with_capacity(sulis_protocol::sbe::HEADER_LENGTH + 16 + body.len());
        sulis_protocol::sbe::Header {
            block_length: sulis_protocol::archive::catalog::DESCRIPTOR_BLOCK_LENGTH as u16,
            template_id: RecordingDescriptor::TEMPLATE_ID,
            schema_id: sulis_protocol::archive::messages::SCHEMA_ID,
            version: sulis_protocol::archive::messages::SCHEMA_VERSION,
        }
        .encode(&mut out);
        out.extend_from_slice(&control_session_id.to_le_bytes());
        out.extend_from_slice(&correlation_id.to_le_bytes());
        out.extend_from_slice(body);
        out
    }
}

/// Why a descriptor cannot describe a recording, if it cannot: term and
/// segment lengths as the archive and Aeron's allow them, positions that
/// are frame positions in the right order.
pub fn impossible_geometry(d: &RecordingDescriptor) -> Option<String> {
    let (term, segment) = (d.term_buffer_length, d.segment_file_length);
    let power = |n: i32| n > 0 && (n as u32).is_power_of_two();
    if !power(term) || !(64 * 1024..=1 << 30).contains(&term) {
        Some(format!("has an impossible term buffer length {term}"))
    } else if !power(segment) || segment < term {
        Some(format!(
            "has an impossible segment file length {segment} (term buffer length {term})"
        ))
    } else if d.mtu_length < 32 || d.mtu_length > term {
        Some(format!("has an impossible MTU {}", d.mtu_length))
    } else if d.start_position < 0 || d.start_position & 31 != 0 {
        Some(format!(
            "has an impossible start position {}",
            d.start_position
        ))
    } else if d.stop_position != -1
        && (d.stop_position < d.start_position || d.stop_position & 31 != 0)
    {
        Some(format!(
            "has an impossible stop position {} (start position {})",
            d.stop_position, d.start_position
        ))
    } else {
        None
    }
}

/// The offset just past the last byte of `b` that is not zero.
fn last_nonzero(b: &[u8]) -> Option<usize> {
    b.chunks(4096)
        .rposition(|c| c.iter().any(|&x| x != 0))
        .map(|i| {
            let chunk = &b[i * 4096..(i * 4096 + 4096).min(b.len())];
            i * 4096
                + chunk
                    .iter()
                    .rposition(|&x| x != 0)
                    .expect("a non-zero byte")
                + 1
        })
}

fn read_i32(b: &[u8], o: usize) -> i32 {
    if o + 4 > b.len() {
        return 0;
    }
    i32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// Reserves storage for the first `len` bytes of `file`.
fn reserve(file: &File, path: &Path, len: usize) -> Result<(), CatalogError> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: a plain syscall on an fd we own.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io_error(
            path,
            &format!("cannot reserve {len} bytes"),
            io::Error::from_raw_os_error(rc),
        ))
    }
}

/// The highest recording id among the segment files in `dir`, -1 if none.
fn max_segment_file_id(dir: &Path) -> i64 {
    use sulis_protocol::archive::segment::parse_segment_file_name;
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| parse_segment_file_name(&e.file_name().to_string_lossy()).map(|(id, _)| id))
        .max()
        .unwrap_or(-1)
}

/// Archive files are the archive's own: owner read/write only.
fn set_private(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
}

/// Zeroes `path` from `offset` to `length` if a frame starts at `offset`
/// (a non-zero frame length); true if it did.
fn erase_after(path: &Path, offset: u64, length: u64) -> io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = OpenOptions::new().read(true).write(true).open(path)?;
    if offset >= f.metadata()?.len() {
        return Ok(false);
    }
    let mut head = [0u8; 4];
    f.seek(SeekFrom::Start(offset))?;
    let n = f.read(&mut head)?;
    if head[..n].iter().all(|&b| b == 0) {
        return Ok(false);
    }
    f.set_len(offset)?;
    f.set_len(length.max(offset))?;
    f.sync_all()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let p =
                std::env::temp_dir().join(format!("sulis-catalog-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn descriptor(stream_id: i32, channel: &str) -> RecordingDescriptor {
        RecordingDescriptor {
            start_timestamp: 1000,
            stop_timestamp: -1,
            start_position: 0,
            stop_position: -1,
            initial_term_id: 5,
            segment_file_length: 1 << 20,
            term_buffer_length: 64 * 1024,
            mtu_length: 1408,
            session_id: 77,
            stream_id,
            stripped_channel: channel.into(),
            original_channel: channel.into(),
            source_identity: "aeron:ipc".into(),
            ..Default::default()
        }
    }

    #[test]
    fn should_add_update_and_find_recordings_again_after_reopening() {
        let dir = TempDir::new("reopen");
        {
            let mut c = Catalog::open(&dir.0, 4096, 1).unwrap();
            assert_eq!(c.add_recording(descriptor(1, "aeron:ipc")).unwrap(), 0);
            assert_eq!(
                c.add_recording(descriptor(2, "aeron:ipc?alias=two"))
                    .unwrap(),
                1
            );
            c.record_stop(0, 4096, 2000).unwrap();
            c.set_state(1, recording_state::DELETED).unwrap();
        }
        let c = Catalog::open(&dir.0, 4096, 0).unwrap();
        assert!(c.problems().is_empty(), "{:?}", c.problems());
        assert_eq!(c.next_recording_id(), 2);
        let r = c.recording(0).unwrap();
        assert_eq!(
            (r.stop_position, r.stop_timestamp, r.stream_id),
            (4096, 2000, 1)
        );
        assert_eq!(c.recording(1), None, "deleted");
        assert_eq!(c.entry(1).unwrap().state, recording_state::DELETED);
        assert_eq!(c.valid_ids_from(0), vec![0]);
        let mode = std::fs::metadata(c.path()).unwrap().permissions();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.mode() & 0o777, 0o600);
    }

    #[test]
    fn should_keep_descriptor_checksums_through_every_change_when_asked() {
        let dir = TempDir::new("checksum");
        let mut c = Catalog::open(&dir.0, 4096, 0).unwrap();
        c.add_recording(descriptor(1, "aeron:ipc")).unwrap();
        assert_eq!(
            c.descriptor_checksum(0, Checksum::Crc32c)
                .map(|(stored, _)| stored),
            Some(0),
            "no checksum unless the catalog keeps one"
        );
        c.set_checksum(Some(Checksum::Crc32c));
        c.add_recording(descriptor(2, "aeron:ipc?alias=two"))
            .unwrap();
        c.record_stop(1, 4096, 2000).unwrap();
        c.record_extend(1, 5, 6, 7).unwrap();
        let (stored, computed) = c.descriptor_checksum(1, Checksum::Crc32c).unwrap();
        assert_eq!(stored, computed);
        assert_ne!(stored, 0);
        assert_ne!(
            c.descriptor_checksum(0, Checksum::Crc32c)
                .map(|(s, c)| s == c),
            Some(true)
        );
        c.seal_all();
        let (stored, computed) = c.descriptor_checksum(0, Checksum::Crc32c).unwrap();
        assert_eq!(stored, computed, "sealed");
        assert_eq!(c.descriptor_checksum(9, Checksum::Crc32c), None);
    }

    #[test]
    fn should_grow_when_full() {
        let dir = TempDir::new("grow");
        let mut c = Catalog::open(&dir.0, 4096, 0).unwrap();
        let long = format!(
            "aeron:udp?endpoint=localhost:40123|alias={}",
            "x".repeat(300)
        );
        for i in 0..100 {
            assert_eq!(c.add_recording(descriptor(i, &long)).unwrap(), i as i64);
        }
        assert!(c.bytes().len() > 4096);
        drop(c);
        let c = Catalog::open(&dir.0, 4096, 0).unwrap();
        assert_eq!(c.valid_ids_from(0).len(), 100);
        assert_eq!(c.recording(99).unwrap().stripped_channel, long);
    }

    #[test]
    fn should_leave_out_a_corrupt_entry_and_keep_the_others() {
        let dir = TempDir::new("corrupt");
        let offset_of_1;
        {
            let mut c = Catalog::open(&dir.0, 8192, 0).unwrap();
            for i in 0..3 {
                c.add_recording(descriptor(i, "aeron:ipc")).unwrap();
            }
            offset_of_1 = c.index[&1];
            c.flush().unwrap();
        }
        // Recording 1's state becomes garbage.
        let path = dir.0.join(CATALOG_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[offset_of_1 + 4..offset_of_1 + 8].copy_from_slice(&77i32.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let mut c = Catalog::open(&dir.0, 8192, 0).unwrap();
        assert_eq!(c.valid_ids_from(0), vec![0, 2]);
        assert_eq!(c.problems().len(), 1);
        assert!(
            c.problems()[0].contains(&format!("offset {offset_of_1}")),
            "{:?}",
            c.problems()
        );
        assert!(c.problems()[0].contains("state 77"));
        // New recordings still go after the last entry, with fresh ids.
        assert_eq!(c.add_recording(descriptor(9, "aeron:ipc")).unwrap(), 3);
    }

    /// Three recordings, then `damage` applied to the second entry's bytes
    /// in the file; returns the reopened catalog, the offsets of the three
    /// entries and the third entry's bytes as they were.
    fn damaged(name: &str, damage: impl Fn(&mut [u8])) -> (TempDir, Catalog, [usize; 3], Vec<u8>) {
        let dir = TempDir::new(name);
        let (offsets, third);
        {
            let mut c = Catalog::open(&dir.0, 8192, 0).unwrap();
            for i in 0..3 {
                c.add_recording(descriptor(i, "aeron:ipc")).unwrap();
            }
            offsets = [c.index[&0], c.index[&1], c.index[&2]];
            third = c.bytes()[offsets[2]..c.end].to_vec();
            c.flush().unwrap();
        }
        let path = dir.0.join(CATALOG_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        damage(&mut bytes[offsets[1]..]);
        std::fs::write(&path, &bytes).unwrap();
        let c = Catalog::open(&dir.0, 8192, 0).unwrap();
        (dir, c, offsets, third)
    }

    #[test]
    fn should_hide_no_later_entry_behind_a_damaged_length_and_never_write_over_it() {
        let lengths: [i32; 4] = [1 << 20, 96, 0, -5];
        for (i, length) in lengths.into_iter().enumerate() {
            let (_dir, mut c, offsets, third) = damaged(&format!("length{i}"), |e| {
                e[..4].copy_from_slice(&length.to_le_bytes())
            });
            assert_eq!(c.valid_ids_from(0), vec![0, 2], "length {length}");
            assert_eq!(c.problems().len(), 1, "length {length}: {:?}", c.problems());
            assert!(
                c.problems()[0].contains(&format!("offset {}", offsets[1])),
                "{:?}",
                c.problems()
            );
            assert_eq!(c.add_recording(descriptor(9, "aeron:ipc")).unwrap(), 3);
            let end = offsets[2] + third.len();
            assert_eq!(
                &c.bytes()[offsets[2]..end],
                &third[..],
                "length {length}: the third entry is untouched"
            );
            assert_eq!(
                c.index[&3], end,
                "the new entry goes after everything that was there"
            );
        }
    }

    #[test]
    fn should_keep_the_first_of_a_repeated_id_and_leave_out_an_impossible_geometry() {
        let id = descriptor::RECORDING_ID;
        let (_dir, c, offsets, _) = damaged("repeat", |e| {
            e[id..id + 8].copy_from_slice(&0i64.to_le_bytes())
        });
        assert_eq!(c.valid_ids_from(0), vec![0, 2]);
        assert_eq!(c.index[&0], offsets[0], "the first is kept");
        assert!(c.problems()[0].contains(&format!("offset {}: recording id 0 repeats", offsets[1])));
        let term = descriptor::TERM_BUFFER_LENGTH;
        let (_dir, mut c, _, _) = damaged("geometry", |e| {
            e[term..term + 4].copy_from_slice(&0i32.to_le_bytes())
        });
        assert_eq!(c.valid_ids_from(0), vec![0, 2]);
        assert!(
            c.problems()[0].contains("recording 1 has an impossible term buffer length 0"),
            "{:?}",
            c.problems()
        );
        assert_eq!(
            c.add_recording(descriptor(9, "aeron:ipc")).unwrap(),
            3,
            "its id is not given again"
        );
    }

    #[test]
    fn should_replace_a_channel_moving_the_entries_after_a_grown_one() {
        let dir = TempDir::new("replace");
        let mut c = Catalog::open(&dir.0, 4096, 0).unwrap();
        for i in 0..3 {
            c.add_recording(descriptor(i, "aeron:ipc")).unwrap();
        }
        let long = format!(
            "aeron:udp?endpoint=localhost:40123|alias={}",
            "y".repeat(200)
        );
        c.replace_channels(1, &long, &long).unwrap();
        c.replace_channels(2, "aeron:ipc?a=1", "aeron:ipc").unwrap();
        assert_eq!(c.recording(1).unwrap().original_channel, long);
        assert_eq!(c.recording(2).unwrap().original_channel, "aeron:ipc?a=1");
        assert_eq!(
            c.recording(2).unwrap().stream_id,
            2,
            "the entry after it moved whole"
        );
        c.add_recording(descriptor(3, "aeron:ipc")).unwrap();
        drop(c);
        let c = Catalog::open(&dir.0, 4096, 0).unwrap();
        assert!(c.problems().is_empty(), "{:?}", c.problems());
        assert_eq!(c.valid_ids_from(0), vec![0, 1, 2, 3]);
        assert_eq!(c.recording(1).unwrap().stripped_channel, long);
        assert_eq!(c.recording(3).unwrap().stream_id, 3);
    }

    #[test]
    fn should_cut_a_recent_stop_position_back_to_the_data_on_disk() {
        use crate::segment::tests::{record, TERM};
        let dir = TempDir::new("verify-stops");
        let mut c = Catalog::open(&dir.0, 4096, 0).unwrap();
        let d = RecordingDescriptor {
            initial_term_id: 100,
            term_buffer_length: TERM as i32,
            segment_file_length: 2 * TERM as i32,
            ..descriptor(1, "aeron:ipc")
        };
        let (recent, old) = (
            c.add_recording(d.clone()).unwrap(),
            c.add_recording(d.clone()).unwrap(),
        );
        let mut end = 0;
        for id in [recent, old] {
            let g = Geometry::of(&RecordingDescriptor {
                recording_id: id,
                ..d.clone()
            });
            let frames = record(&dir.0, g, 0, 3 * TERM, 1000);
            let (at, last) = frames.last().unwrap();
            end = at + last.len() as i64;
        }
        // Whole: nothing to say.
        c.record_stop(recent, end, 10_000).unwrap();
        c.record_stop(old, end + 4096, 10).unwrap();
        assert_eq!(
            c.verify_recent_stops(&dir.0, 5_000, None).unwrap(),
            Vec::<String>::new()
        );
        // The catalog's page reached the disk, the data's last page did not.
        c.record_stop(recent, end + 4096, 10_000).unwrap();
        let said = c.verify_recent_stops(&dir.0, 5_000, None).unwrap();
        assert_eq!(c.recording(recent).unwrap().stop_position, end);
        assert!(
            said.len() == 1 && said[0].contains(&format!("ends at {end}")),
            "{said:?}"
        );
        assert_eq!(
            c.recording(old).unwrap().stop_position,
            end + 4096,
            "stopped long before: not read"
        );
        // A segment file that never reached the disk ends the recording at its base.
        std::fs::remove_file(dir.0.join(format!("{recent}-{}.rec", 2 * TERM))).unwrap();
        let said = c.verify_recent_stops(&dir.0, 5_000, None).unwrap();
        assert_eq!(c.recording(recent).unwrap().stop_position, 2 * TERM);
        assert!(said[0].contains("is missing"), "{said:?}");

        // A recording a power cut left empty (its first segment all zeros): the file goes, so that the
        // recording can be extended from its start.
        let empty = c.add_recording(d.clone()).unwrap();
        std::fs::write(dir.0.join(format!("{empty}-0.rec")), vec![0u8; 4096]).unwrap();
        c.record_stop(empty, 0, 10_000).unwrap();
        c.finish_interrupted_changes(&dir.0, true);
        assert!(!dir.0.join(format!("{empty}-0.rec")).exists());
    }

    #[test]
    fn should_rebuild_a_header_of_zeros_above_every_entry_and_segment_file() {
        // A power cut before the first page of the file reached the disk: zeros where the header
        // was, entries (or nothing) after it, segment files beside it.
        let dir = TempDir::new("zeroed");
        {
            let mut c = Catalog::open(&dir.0, 4096, 0).unwrap();
            c.add_recording(descriptor(1, "aeron:ipc")).unwrap();
            c.add_recording(descriptor(2, "aeron:ipc")).unwrap();
        }
        let path = dir.0.join(CATALOG_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[..CATALOG_HEADER_LENGTH].fill(0);
        std::fs::write(&path, &bytes).unwrap();
        std::fs::write(dir.0.join("7-0.rec"), b"").unwrap();
        let c = Catalog::open(&dir.0, 4096, 0).unwrap();
        assert_eq!(c.valid_ids_from(0), vec![0, 1], "the entries are kept");
        assert_eq!(
            c.next_recording_id(),
            8,
            "no new recording takes recording 7's files"
        );
        assert!(
            c.problems()
                .iter()
                .any(|p| p.contains("archive.catalog") && p.contains("header was zeros")),
            "{:?}",
            c.problems()
        );
        drop(c);
        let c = Catalog::open(&dir.0, 4096, 0).unwrap();
        assert!(
            c.problems().is_empty(),
            "rebuilt for good: {:?}",
            c.problems()
        );

        // A file of nothing but zeros (made, sized, then the cut): a new, empty catalog.
        let dir = TempDir::new("all-zeros");
        std::fs::write(dir.0.join(CATALOG_FILE), vec![0u8; 1 << 20]).unwrap();
        let c = Catalog::open(&dir.0, 4096, 0).unwrap();
        assert_eq!((c.valid_ids_from(0), c.next_recording_id()), (vec![], 0));
    }

    #[test]
    fn should_refuse_a_file_that_is_not_a_catalog() {
        let dir = TempDir::new("foreign");
        std::fs::write(dir.0.join(CATALOG_FILE), vec![0x55u8; 4096]).unwrap();
        let err = Catalog::open(&dir.0, 4096, 0).err().unwrap();
        assert!(err.message.contains("archive.catalog"), "{err}");
        assert!(err.message.contains("catalog version"), "{err}");
        assert!(
            err.message.contains("move the file aside"),
            "names the way out: {err}"
        );
    }

    #[test]
    fn should_read_entries_in_place_as_their_decoded_form_says() {
        let dir = TempDir::new("in-place");
        let mut c = Catalog::open(&dir.0, 4096, 0).unwrap();
        for i in 0..5 {
            let mut d = descriptor(10 + i, &format!("aeron:ipc?alias=r{i}"));
            d.session_id = 100 + i;
            c.add_recording(d).unwrap();
        }
        c.set_state(2, recording_state::DELETED).unwrap();
        // A grown entry moves the ones after it.
        let long = format!(
            "aeron:udp?endpoint=localhost:40123|alias={}",
            "z".repeat(150)
        );
        c.replace_channels(1, &long, &long).unwrap();
        let ids: Vec<i64> = c.entries_from(1).map(|e| e.recording_id()).collect();
        assert_eq!(ids, vec![1, 2, 3, 4]);
        let back: Vec<i64> = c.entries_from(0).rev().map(|e| e.recording_id()).collect();
        assert_eq!(back, vec![4, 3, 2, 1, 0]);
        assert_eq!(c.entries_from(5).count(), 0);
        assert_eq!(c.entries_from(-3).count(), 5);
        for e in c.entries_from(0) {
            let decoded = c.entry(e.recording_id()).unwrap();
            assert_eq!(e.state(), decoded.state);
            assert_eq!(e.stream_id(), decoded.descriptor.stream_id);
            assert_eq!(e.session_id(), decoded.descriptor.session_id);
            assert_eq!(
                e.stripped_channel(),
                Some(decoded.descriptor.stripped_channel.as_str())
            );
            assert_eq!(
                e.descriptor_message(7, 8),
                sulis_protocol::archive::catalog::descriptor_message(c.bytes(), &decoded, 7, 8),
                "recording {}: the same bytes as from the decoded entry",
                e.recording_id()
            );
        }
        assert_eq!(
            c.entry_ref(1).unwrap().stripped_channel(),
            Some(long.as_str())
        );
        assert!(c.entry_ref(9).is_none());
        assert_eq!(c.valid_ids_from(0), vec![0, 1, 3, 4]);
    }
}
