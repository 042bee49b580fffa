//! Writing, reading and recovering a recording's segment files
//! (`<recordingId>-<basePosition>.rec`, laid out as
//! `sulis_protocol::archive::segment` describes).
//!
//! * [`RecordingWriter`] appends blocks of whole frames, as an image hands
//!   them over, at their stream position, rolling to a new file at each
//!   segment boundary. A padding frame is written as its header alone, the
//!   position moving past its whole length (as Aeron's recorder does).
//! * [`SegmentReader`] reads whole frames from a position, checking each
//!   frame header against where it lies (length, type, term offset, term
//!   id): a replay that meets a torn or corrupt segment gets an error
//!   naming the file and offset instead of stalling or sending garbage.
//! * [`FragmentReader`] reads fragments into `poll_batch`-shaped
//!   [`Batch`]es through a [`SegmentReader`] (the Spark source's
//!   `readMode=files`).
//! * [`recover_stop_position`] finds where an interrupted recording really
//!   ends: the end of the last whole, consistent frame.

use crate::checksum::Checksum;
use crate::frame_fields as fields;
use crate::tier::{Fetch, Tier};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use sulis_client::Batch;
use sulis_protocol::archive::segment::{segment_file_base_position, segment_file_name};
use sulis_protocol::frame::{
    align_frame, DATA_HEADER_LENGTH, FLAGS_FIELD_OFFSET, FRAME_ALIGNMENT, HDR_TYPE_DATA,
    HDR_TYPE_PAD,
};

/// A recording's geometry: what positions map to which file and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Recording id.
    pub recording_id: i64,
    /// Position the recording started at.
    pub start_position: i64,
    /// Term length of the recorded stream.
    pub term_length: i64,
    /// Segment file length.
    pub segment_length: i64,
    /// Initial term id of the recorded stream.
    pub initial_term_id: i32,
}

impl Geometry {
    /// The geometry a catalog descriptor gives.
    pub fn of(d: &sulis_protocol::archive::messages::RecordingDescriptor) -> Geometry {
        Geometry {
            recording_id: d.recording_id,
            start_position: d.start_position,
            term_length: d.term_buffer_length as i64,
            segment_length: d.segment_file_length as i64,
            initial_term_id: d.initial_term_id,
        }
    }

    /// A power-of-two term length and segments at least a term long (what
    /// a corrupt or foreign catalog entry may lack).
    pub fn is_valid(&self) -> bool {
        self.term_length > 0
            && (self.term_length as u64).is_power_of_two()
            && self.segment_length >= self.term_length
    }

    /// Base position of the file holding `position`.
    pub fn base_of(&self, position: i64) -> i64 {
        segment_file_base_position(
            self.start_position,
            position,
            self.term_length,
            self.segment_length,
        )
    }

    /// Path of the file with `base` in `dir`.
    pub fn path(&self, dir: &Path, base: i64) -> PathBuf {
        dir.join(segment_file_name(self.recording_id, base))
    }

    /// Term id at `position`.
    pub fn term_id_at(&self, position: i64) -> i32 {
        self.initial_term_id
            .wrapping_add((position / self.term_length) as i32)
    }
}

fn create_segment(path: &Path, length: i64) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display())))?;
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.set_len(length as u64)?;
    Ok(file)
}

/// A recording that syncs (level 1 or 2) writes zeros this far ahead of its
/// data (at least half of it at a time), so that each sync flushes data into
/// blocks already allocated and written. Into the holes of a sparse segment
/// every fdatasync also commits the new blocks' allocation to the file
/// system's journal: on this VM's disk that took a 4 KiB append's fdatasync
/// from a p99 of about 0.5 ms to 2-5 ms (docs/cluster.md, Durable commits).
pub const SYNC_ZERO_AHEAD: i64 = 1 << 20;

/// Appends a recording's frames to its segment files.
pub struct RecordingWriter {
    dir: PathBuf,
    g: Geometry,
    position: i64,
    file: Option<(i64, File)>,
    sync_level: u8,
    /// Syncing: the position up to which the current segment's blocks have
    /// been written (data or zeros, [`SYNC_ZERO_AHEAD`]).
    written_to: i64,
    /// Zeros to write ahead with (allocated once, when syncing).
    zeros: Vec<u8>,
    /// Stamped into each DATA frame's session id before it is written.
    checksum: Option<Checksum>,
    /// Where a block is stamped (the log it came from is not ours to change).
    stamped: Vec<u8>,
}

impl RecordingWriter {
    /// A writer continuing at `position` (the start position for a new
    /// recording, the stop position when extending).
    pub fn new(dir: &Path, g: Geometry, position: i64, sync_level: u8) -> RecordingWriter {
        RecordingWriter {
            dir: dir.to_path_buf(),
            g,
            position,
            file: None,
            sync_level,
            written_to: position,
            zeros: Vec::new(),
            checksum: None,
            stamped: Vec::new(),
        }
    }

    /// Stamps `checksum` into every DATA frame written from now on.
    pub fn with_checksum(mut self, checksum: Option<Checksum>) -> RecordingWriter {
        self.checksum = checksum;
        self
    }

    /// Where the next block goes.
    pub fn position(&self) -> i64 {
        self.position
    }

    fn file_for(&mut self, position: i64) -> io::Result<(i64, &File)> {
        let base = self.g.base_of(position);
        if self.file.as_ref().map(|(b, _)| *b) != Some(base) {
            let path = self.g.path(&self.dir, base);
            let file = match OpenOptions::new().read(true).write(true).open(&path) {
                // Extending into the segment a stopped recording ended in.
                Ok(f) if position > base => f,
                Ok(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "segment file {} already exists where a new segment should start",
                            path.display()
                        ),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let f = create_segment(&path, self.g.segment_length)?;
                    if self.sync_level > 0 {
                        let _ = sulis_concurrent::mapped_file::sync_dir(&self.dir);
                    }
                    f
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot open {}: {e}", path.display()),
                    ))
                }
            };
            // Beyond the writer's position the segment may be holes (a new
            // one is all holes; an extended one, past its data, may be).
            self.written_to = position;
            self.file = Some((base, file));
        }
        let (base, file) = self.file.as_ref().expect("just set");
        Ok((*base, file))
    }

    /// Writes `block`, whole frames of one term starting at the writer's
    /// position (a padding frame comes alone).
    pub fn write_block(&mut self, block: &[u8]) -> io::Result<()> {
        if block.is_empty() {
            return Ok(());
        }
        if !block.len().is_multiple_of(FRAME_ALIGNMENT) || block.len() < DATA_HEADER_LENGTH {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "block of {} bytes is not whole 32-byte aligned frames",
                    block.len()
                ),
            ));
        }
        let is_padding = fields::frame_type(block, 0) == HDR_TYPE_PAD;
        let position = self.position;
        let sync_level = self.sync_level;
        let mut stamped = std::mem::take(&mut self.stamped);
        let bytes = match self.checksum {
            _ if is_padding => &block[..DATA_HEADER_LENGTH],
            None => block,
            Some(c) => {
                stamped.clear();
                stamped.extend_from_slice(block);
                c.stamp(&mut stamped);
                &stamped[..]
            }
        };
        let (base, file) = self.file_for(position)?;
        let offset = (position - base) as u64;
        let written = file
            .write_all_at(bytes, offset)
            .and_then(|_| match sync_level {
                0 => Ok(()),
                1 => file.sync_data(),
                _ => file.sync_all(),
            });
        self.stamped = stamped;
        written?;
        let end = position + block.len() as i64;
        if sync_level > 0 {
            self.zero_ahead(base, end);
        }
        self.position += block.len() as i64;
        if self.position - base >= self.g.segment_length {
            self.file = None;
        }
        Ok(())
    }
}

impl RecordingWriter {
    /// Syncing: once the data reaches within half of [`SYNC_ZERO_AHEAD`] of
    /// what the segment has written, writes zeros up to that far past `end`
    /// (not past the segment), after the data's sync so that sync does not
    /// carry them, and starts their writeback at once (`sync_file_range`), so
    /// the next sync finds them on the disk. Only an aid: where the zeros
    /// cannot be written (a full disk), the segment stays sparse there, and
    /// the data's own write says what is wrong when it comes to it.
    fn zero_ahead(&mut self, base: i64, end: i64) {
        self.written_to = self.written_to.max(end);
        let segment_end = base + self.g.segment_length;
        if self.written_to >= (end + SYNC_ZERO_AHEAD / 2).min(segment_end) {
            return;
        }
        let to = (end + SYNC_ZERO_AHEAD).min(segment_end);
        if self.zeros.is_empty() {
            self.zeros = vec![0u8; SYNC_ZERO_AHEAD as usize];
        }
        let Some((_, file)) = self.file.as_ref() else {
            return;
        };
        let from = self.written_to;
        if file
            .write_all_at(&self.zeros[..(to - from) as usize], (from - base) as u64)
            .is_err()
        {
            return;
        }
        use std::os::unix::io::AsRawFd;
        // SAFETY: a range of this open file; the call only starts writeback.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                (from - base) as libc::off64_t,
                (to - from) as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
        self.written_to = to;
    }
}

/// Why a segment could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The file is missing or unreadable.
    Io(io::Error),
    /// The next frame is longer than the buffer given (nothing read):
    /// read again with at least this many bytes.
    BufferTooSmall(usize),
    /// The next segment is in the object store and being fetched (nothing
    /// read): read again later.
    Fetching,
    /// A frame is torn or does not belong where it lies.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Offset in it.
        offset: u64,
        /// Stream position.
        position: i64,
        /// What is wrong.
        reason: String,
    },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::BufferTooSmall(n) => write!(f, "the next frame needs a {n}-byte buffer"),
            ReadError::Fetching => {
                write!(f, "the next segment is being fetched from the object store")
            }
            ReadError::Corrupt {
                path,
                offset,
                position,
                reason,
            } => write!(
                f,
                "corrupt recording data in {} at offset {offset} (position {position}): {reason}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

fn cannot_open(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display()))
}

/// Opens the verified copy of a segment that moved to the object store
/// (`missing`: the error if the store does not hold it either); `Fetching`
/// while it is fetched.
fn open_moved(
    tier: &Tier,
    recording_id: i64,
    base: i64,
    missing: io::Error,
) -> Result<(PathBuf, File), ReadError> {
    // Twice: a copy evicted from a shared cache between the answer and the open is fetched again.
    let mut evicted = None;
    for _ in 0..2 {
        match tier.request(recording_id, base) {
            Fetch::Ready(p) => match File::open(&p) {
                Ok(f) => return Ok((p, f)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => evicted = Some(cannot_open(&p, e)),
                Err(e) => return Err(cannot_open(&p, e).into()),
            },
            Fetch::Pending => return Err(ReadError::Fetching),
            Fetch::NotTiered => return Err(missing.into()),
            Fetch::Failed(why) => return Err(io::Error::other(why).into()),
        }
    }
    Err(evicted.unwrap_or(missing).into())
}

/// Reads a recording's frames in order from a position.
pub struct SegmentReader {
    dir: PathBuf,
    g: Geometry,
    position: i64,
    file: Option<(i64, PathBuf, File)>,
    checksum: Option<Checksum>,
    /// Where segments no longer on the disk are read from.
    tier: Option<Arc<Tier>>,
}

impl SegmentReader {
    /// A reader at `position` (a frame boundary).
    pub fn new(dir: &Path, g: Geometry, position: i64) -> SegmentReader {
        SegmentReader {
            dir: dir.to_path_buf(),
            g,
            position,
            file: None,
            checksum: None,
            tier: None,
        }
    }

    /// Reads segments that are no longer on the disk from the object store
    /// (`crate::tier`): `ReadError::Fetching` while one is fetched.
    pub fn with_tier(mut self, tier: Option<Arc<Tier>>) -> SegmentReader {
        self.tier = tier;
        self
    }

    /// Checks every DATA frame read from now on against the checksum in its
    /// session id field (a recording made with that record checksum).
    pub fn with_checksum(mut self, checksum: Option<Checksum>) -> SegmentReader {
        self.checksum = checksum;
        self
    }

    /// The position of the next frame.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// Reads whole frames into `buf` up to `limit` (a position known to be
    /// recorded), never across a term boundary; returns the bytes read (0
    /// at `limit`). Padding frames come back with their full length, their
    /// body zero, so a caller can skip or send them as the log has them.
    pub fn read(&mut self, buf: &mut [u8], limit: i64) -> Result<usize, ReadError> {
        if self.position >= limit {
            return Ok(0);
        }
        let term_length = self.g.term_length as usize;
        let term_offset = (self.position % self.g.term_length) as usize;
        // One read of as much as may be wanted (a term never spans two
        // segment files), then the frames in it are checked one by one.
        let chunk = buf
            .len()
            .min((limit - self.position) as usize)
            .min(term_length - term_offset);
        let base = self.g.base_of(self.position);
        if self.file.as_ref().map(|f| f.0) != Some(base) {
            let local = self.g.path(&self.dir, base);
            let (path, file) = match (File::open(&local), &self.tier) {
                (Ok(f), _) => (local, f),
                (Err(e), Some(tier)) if e.kind() == io::ErrorKind::NotFound => {
                    open_moved(tier, self.g.recording_id, base, cannot_open(&local, e))?
                }
                (Err(e), _) => return Err(cannot_open(&local, e).into()),
            };
            // A replay reads a segment front to back: the kernel may read ahead twice as far.
            use std::os::unix::io::AsRawFd;
            // SAFETY: advice on an fd this reader owns; it changes no data.
            unsafe {
                libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL);
            }
            self.file = Some((base, path, file));
        }
        let (_, path, file) = self.file.as_ref().expect("just set");
        let file_offset = (self.position - base) as u64;
        if chunk < DATA_HEADER_LENGTH {
            // Less than a header is wanted or fits: look at the header alone.
            let mut header = [0u8; DATA_HEADER_LENGTH];
            file.read_exact_at(&mut header, file_offset)?;
            let length = fields::frame_length(&header, 0);
            if length > 0 && buf.len() < align_frame(length as usize) {
                return Err(ReadError::BufferTooSmall(align_frame(length as usize)));
            }
            return Ok(0);
        }
        file.read_exact_at(&mut buf[..chunk], file_offset)?;
        let mut at = 0usize;
        while at + DATA_HEADER_LENGTH <= chunk {
            let position = self.position + at as i64;
            let offset_in_term = term_offset + at;
            let frame_length = fields::frame_length(buf, at);
            let frame_type = fields::frame_type(buf, at);
            let header_offset = fields::term_offset(buf, at);
            let header_term_id = fields::term_id(buf, at);
            let aligned = align_frame(frame_length.max(0) as usize);
            let problem = if frame_length <= 0 {
                Some(format!(
                    "no frame where the recording says there is one (length {frame_length}): the segment is torn"
                ))
            } else if frame_length < DATA_HEADER_LENGTH as i32
                || offset_in_term + aligned > term_length
            {
                Some(format!(
                    "frame length {frame_length} does not fit the term at offset {offset_in_term}"
                ))
            } else if frame_type != HDR_TYPE_DATA && frame_type != HDR_TYPE_PAD {
                Some(format!("frame type {frame_type:#x} is not DATA or PAD"))
            } else if header_offset as usize != offset_in_term
                || header_term_id != self.g.term_id_at(position)
            {
                Some(format!(
                    "frame header says term {header_term_id} offset {header_offset}, \
                     it lies at term {} offset {offset_in_term}",
                    self.g.term_id_at(position)
                ))
            } else if frame_type == HDR_TYPE_DATA
                && position + aligned as i64 <= limit
                && at + aligned <= chunk
            {
                // A whole DATA frame is in hand: its checksum, if recorded with one.
                self.checksum.and_then(|c| {
                    c.check(&buf[at..at + aligned]).err().map(|(recorded, computed)| {
                        format!(
                            "{} checksum mismatch: the frame says {recorded}, its bytes give {computed}",
                            c.name()
                        )
                    })
                })
            } else {
                None
            };
            if let Some(reason) = problem {
                if at > 0 {
                    // Hand over the good frames first; the next call reports it.
                    break;
                }
                return Err(ReadError::Corrupt {
                    path: path.clone(),
                    offset: file_offset,
                    position,
                    reason,
                });
            }
            if position + aligned as i64 > limit {
                break;
            }
            if at + aligned > chunk {
                if at == 0 && aligned > buf.len() {
                    return Err(ReadError::BufferTooSmall(aligned));
                }
                break; // the rest of this frame comes with the next read
            }
            if frame_type == HDR_TYPE_PAD {
                // Only a padding frame's header is on disk.
                buf[at + DATA_HEADER_LENGTH..at + aligned].fill(0);
            }
            at += aligned;
        }
        self.position += at as i64;
        Ok(at)
    }
}

/// Reads a recording's fragments straight from its segment files into
/// [`Batch`]es laid out as a subscription's `poll_batch` lays them out (the
/// payloads back to back, the stream position *after* each fragment, its
/// session id, flags and reserved value), so a reader of a replay and a
/// reader of the files see the same columns. Padding frames are skipped, as
/// an image skips them. Every frame is checked by [`SegmentReader`]; a torn
/// or corrupt one fails with [`ReadError::Corrupt`] naming the file, offset
/// and position.
///
/// ```text
///   segment files:  [ 4-0.rec           ][ 4-131072.rec       ] ...
///   frames:         [hdr|payload][hdr|payload]...[pad]...
///   batch:          data    = payload0 payload1 ...
///                   offsets = 0 len0 len0+len1 ...
///                   positions = end of frame 0, end of frame 1, ...
/// ```
///
/// Nothing past `limit` is read: it must be a position the recording is
/// known to hold (its stop position, or its recorded position while it is
/// live: what lies beyond is still being written).
pub struct FragmentReader {
    reader: SegmentReader,
    limit: i64,
    /// Whole, checked frames read from the files and not handed over yet.
    buf: Vec<u8>,
    /// Bytes of `buf` holding frames.
    len: usize,
    /// The next frame in `buf`.
    at: usize,
    /// Stream position of `buf[0]`.
    buf_position: i64,
}

impl FragmentReader {
    /// A reader of the fragments from `position` (where a frame begins) up to `limit`.
    pub fn new(dir: &Path, g: Geometry, position: i64, limit: i64) -> FragmentReader {
        // A term never spans two files and a frame never spans two terms, so
        // a term (or 1 MiB of it) holds any frame; BufferTooSmall grows it anyway.
        let size = (g.term_length as usize).clamp(DATA_HEADER_LENGTH, 1 << 20);
        FragmentReader {
            reader: SegmentReader::new(dir, g, position),
            limit,
            buf: vec![0u8; size],
            len: 0,
            at: 0,
            buf_position: position,
        }
    }

    /// Reads segments no longer on the disk from the object store
    /// ([`SegmentReader::with_tier`]).
    pub fn with_tier(mut self, tier: Option<Arc<Tier>>) -> FragmentReader {
        self.reader.tier = tier;
        self
    }

    /// The position after the last frame handed over (or skipped).
    pub fn position(&self) -> i64 {
        self.buf_position + self.at as i64
    }

    /// The position nothing is read past.
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// Appends up to `fragment_limit` fragments to `batch`; returns how many
    /// (0: `limit` reached).
    pub fn read_into(
        &mut self,
        batch: &mut Batch,
        fragment_limit: usize,
    ) -> Result<usize, ReadError> {
        let mut count = 0;
        while count < fragment_limit {
            if self.at == self.len {
                let position = self.reader.position();
                let n = match self.reader.read(&mut self.buf, self.limit) {
                    Ok(n) => n,
                    Err(ReadError::BufferTooSmall(need)) => {
                        self.buf.resize(need, 0);
                        continue;
                    }
                    // Hand over the good fragments first; the next call meets
                    // the bad frame again and reports it.
                    Err(_) if count > 0 => break,
                    Err(e) => return Err(e),
                };
                self.buf_position = position;
                self.len = n;
                self.at = 0;
                if n == 0 {
                    break;
                }
            }
            // SegmentReader checked every frame in buf[..len]: length, type,
            // term offset and term id agree with where it lies.
            let f = &self.buf[self.at..self.len];
            let frame_length = fields::frame_length(f, 0) as usize;
            let aligned = align_frame(frame_length);
            if fields::frame_type(f, 0) == HDR_TYPE_DATA {
                let session_id = fields::session_id(f, 0);
                let reserved = fields::reserved_value(f, 0);
                let end = self.buf_position + (self.at + aligned) as i64;
                batch.push(
                    &f[DATA_HEADER_LENGTH..frame_length],
                    end,
                    session_id,
                    f[FLAGS_FIELD_OFFSET],
                    reserved,
                );
                count += 1;
            }
            self.at += aligned;
        }
        Ok(count)
    }
}

/// Where an interrupted recording really ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The end of its last whole frame: the stop position to record.
    pub stop_position: i64,
    /// Why the frame after `stop_position` was cut off, if one was: its
    /// header is on disk but a later page of it is not (power lost between
    /// the page writes), so it cannot be taken as whole.
    pub torn: Option<String>,
}

/// The page size a torn write tears at.
const PAGE: i64 = 4096;

/// Walks an interrupted recording's last segment from `stop_hint` (its
/// start, or where its last segment begins) to the end of the last whole,
/// consistent frame. Frames are checked for their place (length, type,
/// term offset, term id), not for a checksum: a checksum setting is for
/// data written from now on, and the recording may have been made with
/// another or none.
///
/// As Aeron's archive does, the last frame is looked at once more when it
/// straddles a 4 KiB page: with `checksum` it may prove itself whole;
/// otherwise, if a page after its first is all zeros, its tail never
/// reached the disk and the recording ends before it (Aeron refuses to
/// start instead and asks for `ArchiveTool verify`).
pub fn recover_stop_position(
    dir: &Path,
    g: Geometry,
    stop_hint: i64,
    checksum: Option<Checksum>,
) -> io::Result<Recovered> {
    // The last segment file of the recording.
    let prefix = format!("{}-", g.recording_id);
    let mut bases: Vec<i64> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (id, base) = sulis_protocol::archive::segment::parse_segment_file_name(&name)?;
            (id == g.recording_id && name.starts_with(&prefix)).then_some(base)
        })
        .collect();
    bases.sort_unstable();
    let Some(&last) = bases.last() else {
        return Ok(Recovered {
            stop_position: stop_hint.max(g.start_position),
            torn: None,
        });
    };
    let mut position = stop_hint.max(g.start_position).max(last);
    let mut reader = SegmentReader::new(dir, g, position);
    let mut buf = vec![0u8; g.term_length as usize];
    let end = last + g.segment_length;
    // The last frame read: its position and aligned length.
    let mut last_frame: Option<(i64, usize)> = None;
    loop {
        let from = reader.position();
        match reader.read(&mut buf, end) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut at = 0;
                while at < n {
                    let aligned = align_frame(fields::frame_length(&buf, at) as usize);
                    last_frame = Some((from + at as i64, aligned));
                    at += aligned;
                }
                position = reader.position();
            }
        }
    }
    let mut torn = None;
    if let Some((start, length)) = last_frame {
        let mut frame = vec![0u8; length];
        let base = g.base_of(start);
        File::open(g.path(dir, base))?.read_exact_at(&mut frame, (start - base) as u64)?;
        let proven = fields::frame_type(&frame, 0) != HDR_TYPE_DATA
            || checksum.is_some_and(|c| c.check(&frame).is_ok());
        // The frame's bytes in each page after the one its header is in.
        let first_page_end = ((start / PAGE + 1) * PAGE - start) as usize;
        let empty_page = (first_page_end..length)
            .step_by(PAGE as usize)
            .find(|&from| {
                frame[from..(from + PAGE as usize).min(length)]
                    .iter()
                    .all(|&b| b == 0)
            });
        if let (false, Some(from)) = (proven, empty_page) {
            torn = Some(format!(
                "the last frame, at position {start} ({length} bytes), straddles a page boundary and its bytes \
                 from position {} on are all zeros: its tail never reached the disk, so the recording ends at {start}",
                start + from as i64
            ));
            position = start;
        }
    }
    Ok(Recovered {
        stop_position: position,
        torn,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sulis_protocol::frame::{BEGIN_FLAG, END_FLAG};

    pub(crate) struct TempDir(pub(crate) PathBuf);
    impl TempDir {
        pub(crate) fn new(name: &str) -> TempDir {
            let p =
                std::env::temp_dir().join(format!("sulis-segment-{name}-{}", std::process::id()));
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

    pub(crate) const TERM: i64 = 64 * 1024;

    /// Zeroes the length of the frame at `position`, as a crash mid-write leaves it.
    pub(crate) fn tear(dir: &Path, g: Geometry, position: i64) {
        let base = g.base_of(position);
        let file = OpenOptions::new()
            .write(true)
            .open(g.path(dir, base))
            .unwrap();
        file.write_all_at(&[0u8; 4], (position - base) as u64)
            .unwrap();
    }

    pub(crate) fn geometry(start: i64) -> Geometry {
        Geometry {
            recording_id: 4,
            start_position: start,
            term_length: TERM,
            segment_length: 2 * TERM,
            initial_term_id: 100,
        }
    }

    /// One DATA frame of `payload` bytes at `position`, as a log holds it.
    pub(crate) fn frame(g: &Geometry, position: i64, payload: usize, fill: u8) -> Vec<u8> {
        let len = DATA_HEADER_LENGTH + payload;
        let mut f = vec![0u8; align_frame(len)];
        f[0..4].copy_from_slice(&(len as i32).to_le_bytes());
        f[5] = BEGIN_FLAG | END_FLAG;
        f[6..8].copy_from_slice(&HDR_TYPE_DATA.to_le_bytes());
        f[8..12].copy_from_slice(&((position % TERM) as i32).to_le_bytes());
        f[20..24].copy_from_slice(&g.term_id_at(position).to_le_bytes());
        f[12..16].copy_from_slice(&77i32.to_le_bytes()); // session id
        f[24..32].copy_from_slice(&(position * 3).to_le_bytes()); // reserved value
        f[DATA_HEADER_LENGTH..len].fill(fill);
        f
    }

    fn padding(g: &Geometry, position: i64) -> Vec<u8> {
        let len = (TERM - position % TERM) as usize;
        let mut f = vec![0xeeu8; len]; // a log's padding body is whatever was there
        f[0..4].copy_from_slice(&(len as i32).to_le_bytes());
        f[6..8].copy_from_slice(&HDR_TYPE_PAD.to_le_bytes());
        f[8..12].copy_from_slice(&((position % TERM) as i32).to_le_bytes());
        f[20..24].copy_from_slice(&g.term_id_at(position).to_le_bytes());
        f
    }

    /// Writes frames of `payload` bytes from `start` until `until`, padding
    /// each term's end; returns every frame written with its position.
    pub(crate) fn record(
        dir: &Path,
        g: Geometry,
        start: i64,
        until: i64,
        payload: usize,
    ) -> Vec<(i64, Vec<u8>)> {
        let mut w = RecordingWriter::new(dir, g, start, 0);
        let mut frames = Vec::new();
        let mut i = 0u8;
        while w.position() < until {
            let p = w.position();
            let f = frame(&g, p, payload, i);
            let f = if (p % TERM) as usize + f.len() > TERM as usize {
                padding(&g, p)
            } else {
                f
            };
            w.write_block(&f).unwrap();
            frames.push((p, f));
            i = i.wrapping_add(1);
        }
        frames
    }

    #[test]
    fn a_syncing_writer_writes_its_segment_ahead_of_the_data_and_reads_and_recovers_the_same() {
        // Segments longer than the zero-ahead step, so it is seen to stop short of the segment's end.
        let g = Geometry {
            segment_length: 4 * SYNC_ZERO_AHEAD,
            ..geometry(0)
        };
        let allocated = |dir: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(g.path(dir, 0)).unwrap().blocks() as i64 * 512
        };
        let (sparse, synced) = (TempDir::new("sparse"), TempDir::new("synced"));
        let mut frames = Vec::new();
        let mut end = 0;
        for (dir, level) in [(&sparse, 0u8), (&synced, 1u8)] {
            let mut w = RecordingWriter::new(&dir.0, g, 0, level);
            frames.clear();
            while w.position() < 3 * 4096 {
                let f = frame(&g, w.position(), 500, frames.len() as u8);
                frames.push((w.position(), f.clone()));
                w.write_block(&f).unwrap();
            }
            end = w.position();
        }
        // Without syncs the file is holes past the data; syncing, a step past its first write is written.
        assert!(
            allocated(&sparse.0) < SYNC_ZERO_AHEAD / 2,
            "{}",
            allocated(&sparse.0)
        );
        let ahead = allocated(&synced.0);
        assert!(
            ahead >= SYNC_ZERO_AHEAD && ahead < SYNC_ZERO_AHEAD + 2 * end,
            "{ahead} bytes allocated"
        );
        // Written on (another writer, extending it) across a step: always half a step to a step ahead.
        let mut w = RecordingWriter::new(&synced.0, g, end, 1);
        while w.position() < end + SYNC_ZERO_AHEAD {
            let p = w.position();
            let f = frame(&g, p, 500, 7);
            if p % TERM + f.len() as i64 > TERM {
                w.write_block(&padding(&g, p)).unwrap();
            } else {
                w.write_block(&f).unwrap();
            }
        }
        let (at, ahead) = (w.position(), allocated(&synced.0));
        assert!(
            ahead >= at + SYNC_ZERO_AHEAD / 2 && ahead <= at + SYNC_ZERO_AHEAD + 4096,
            "{ahead} bytes allocated with the data at {at}"
        );
        // The zeros read as the holes did: the same frames back, and the same end found after a crash.
        let mut r = SegmentReader::new(&synced.0, g, 0);
        let mut got = vec![0u8; end as usize];
        assert_eq!(r.read(&mut got, end).unwrap(), end as usize);
        let expect: Vec<u8> = frames.iter().flat_map(|(_, f)| f.clone()).collect();
        assert!(got == expect);
        let stop = w.position();
        let recovered = |dir: &Path| recover_stop_position(dir, g, 0, None).unwrap();
        assert_eq!(
            (
                recovered(&synced.0).stop_position,
                recovered(&synced.0).torn
            ),
            (stop, None)
        );
        assert_eq!(recovered(&sparse.0).stop_position, end);
    }

    #[test]
    fn should_write_across_terms_and_segments_and_read_back_the_same_frames() {
        let dir = TempDir::new("roundtrip");
        let start = TERM + 640; // joined mid-term
        let g = geometry(start);
        let frames = record(&dir.0, g, start, start + 5 * TERM, 1000);
        let end = frames.last().map(|(p, f)| p + f.len() as i64).unwrap();
        // Files at the segment bases counted from the starting term.
        for base in [TERM, 3 * TERM, 5 * TERM] {
            let md = std::fs::metadata(g.path(&dir.0, base)).unwrap();
            assert_eq!(md.len(), 2 * TERM as u64);
        }
        let mut r = SegmentReader::new(&dir.0, g, start);
        let mut buf = vec![0u8; 8192];
        let mut got = Vec::new();
        loop {
            let n = r.read(&mut buf, end).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let expect: Vec<u8> = frames
            .iter()
            .flat_map(|(_, f)| {
                let mut f = f.clone();
                if u16::from_le_bytes([f[6], f[7]]) == HDR_TYPE_PAD {
                    f[DATA_HEADER_LENGTH..].fill(0); // only the header was written
                }
                f
            })
            .collect();
        assert_eq!(got.len(), expect.len());
        assert!(got == expect, "the same bytes back");
        assert_eq!(r.position(), end);
    }

    #[test]
    fn should_stamp_checksums_on_write_check_them_on_read_and_name_a_changed_byte() {
        let dir = TempDir::new("checksum");
        let g = geometry(0);
        let mut w = RecordingWriter::new(&dir.0, g, 0, 0).with_checksum(Some(Checksum::Crc32c));
        let originals: Vec<Vec<u8>> = (0..20u8)
            .map(|i| frame(&g, i as i64 * 160, 100, i))
            .collect();
        for f in &originals {
            w.write_block(f).unwrap();
        }
        let end = 20 * 160;
        let mut buf = vec![0u8; 64 * 1024];
        let mut r = SegmentReader::new(&dir.0, g, 0).with_checksum(Some(Checksum::Crc32c));
        assert_eq!(r.read(&mut buf, end).unwrap(), end as usize);
        for (i, f) in originals.iter().enumerate() {
            let got = &buf[i * 160..(i + 1) * 160];
            assert_eq!(
                got[DATA_HEADER_LENGTH..],
                f[DATA_HEADER_LENGTH..],
                "the body as written"
            );
            let sum = Checksum::Crc32c.compute(&f[DATA_HEADER_LENGTH..]);
            assert_eq!(
                got[12..16],
                sum.to_le_bytes(),
                "the session id field holds the checksum"
            );
        }
        // A changed byte on disk: the frames before it still come, then an error names it.
        let path = g.path(&dir.0, 0);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[5 * 160 + DATA_HEADER_LENGTH + 7] ^= 0x20;
        std::fs::write(&path, &bytes).unwrap();
        let mut r = SegmentReader::new(&dir.0, g, 0).with_checksum(Some(Checksum::Crc32c));
        assert_eq!(r.read(&mut buf, end).unwrap(), 5 * 160);
        match r.read(&mut buf, end) {
            Err(ReadError::Corrupt {
                position, reason, ..
            }) => {
                assert_eq!(position, 5 * 160);
                assert!(reason.contains("crc32c checksum mismatch"), "{reason}");
            }
            other => panic!("expected a checksum error, got {other:?}"),
        }
        // Without a checksum the same bytes read (their headers are consistent).
        let mut r = SegmentReader::new(&dir.0, g, 0);
        assert_eq!(r.read(&mut buf, end).unwrap(), end as usize);
    }

    #[test]
    fn should_name_the_file_and_offset_of_a_torn_or_corrupt_frame() {
        let dir = TempDir::new("corrupt");
        let g = geometry(0);
        record(&dir.0, g, 0, 4096, 100);
        let path = g.path(&dir.0, 0);
        // The recording claims more than was written: a hole.
        let mut r = SegmentReader::new(&dir.0, g, 0);
        let mut buf = vec![0u8; 64 * 1024];
        assert!(r.read(&mut buf, 4096).unwrap() > 0);
        // The frames before the hole come first; the next read names the hole.
        assert_eq!(r.read(&mut buf, 8192).unwrap(), 160);
        let err = r.read(&mut buf, 8192).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("the segment is torn"), "{err}");
        // A frame that says it is elsewhere.
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&999i32.to_le_bytes(), 160 + 8).unwrap();
        let mut r = SegmentReader::new(&dir.0, g, 160);
        let err = r.read(&mut buf, 4096).unwrap_err().to_string();
        assert!(err.contains("offset 160 (position 160)"), "{err}");
        assert!(err.contains("term 100 offset 999"), "{err}");
    }

    #[test]
    fn should_read_fragments_into_batches_as_poll_batch_lays_them_out() {
        let dir = TempDir::new("fragments");
        let start = TERM + 640;
        let g = geometry(start);
        let frames = record(&dir.0, g, start, start + 5 * TERM, 1000);
        let data: Vec<&(i64, Vec<u8>)> = frames
            .iter()
            .filter(|(_, f)| u16::from_le_bytes([f[6], f[7]]) == HDR_TYPE_DATA)
            .collect();
        assert!(
            data.len() < frames.len(),
            "the recording should hold padding"
        );
        // Up to a limit inside the recording (a frame boundary), 7 fragments at a time.
        let (limit_at, _) = data[data.len() - 10];
        let limit = *limit_at;
        let mut r = FragmentReader::new(&dir.0, g, start, limit);
        let mut batch = Batch::with_capacity(8, 8192);
        let mut calls = 0;
        loop {
            let n = r.read_into(&mut batch, 7).unwrap();
            assert!(n <= 7);
            if n == 0 {
                break;
            }
            calls += 1;
        }
        assert!(calls > 1);
        let expect: Vec<&&(i64, Vec<u8>)> = data.iter().filter(|(p, _)| *p < limit).collect();
        assert_eq!(batch.len(), expect.len());
        for (i, (p, f)) in expect.iter().enumerate() {
            assert_eq!(
                batch.positions[i],
                p + f.len() as i64,
                "position after fragment {i}"
            );
            assert_eq!(
                batch.get(i),
                &f[DATA_HEADER_LENGTH..DATA_HEADER_LENGTH + 1000]
            );
            assert_eq!(batch.flags[i], BEGIN_FLAG | END_FLAG);
            assert_eq!(batch.session_ids[i], 77);
            assert_eq!(batch.reserved_values[i], p * 3);
        }
        assert_eq!(r.position(), limit, "nothing read past the limit");
        // A torn frame below the limit: the error names the file and position.
        let (p, _) = data[20];
        let base = g.base_of(*p);
        tear(&dir.0, g, *p);
        let mut r = FragmentReader::new(&dir.0, g, start, limit);
        let mut batch = Batch::default();
        assert_eq!(
            r.read_into(&mut batch, 1000).unwrap(),
            20,
            "the frames before the torn one come first"
        );
        let err = r.read_into(&mut batch, 1000).unwrap_err().to_string();
        assert!(
            err.contains(&g.path(&dir.0, base).display().to_string()),
            "{err}"
        );
        assert!(err.contains(&format!("(position {p})")), "{err}");
    }

    #[test]
    fn should_recover_the_end_of_the_last_whole_frame() {
        let dir = TempDir::new("recover");
        let g = geometry(0);
        let frames = record(&dir.0, g, 0, 3 * TERM + 3000, 500);
        let end = frames.last().map(|(p, f)| p + f.len() as i64).unwrap();
        let stop = |g| {
            recover_stop_position(&dir.0, g, 0, None)
                .unwrap()
                .stop_position
        };
        assert_eq!(stop(g), end);
        // A torn last frame: its header is there, its length is not (zeroed).
        let (p, _) = frames.last().unwrap();
        tear(&dir.0, g, *p);
        assert_eq!(stop(g), *p);
        // No files at all: nothing was recorded.
        let empty = Geometry {
            recording_id: 9,
            ..g
        };
        assert_eq!(stop(empty), 0);
    }

    #[test]
    fn should_cut_a_last_frame_whose_tail_page_never_reached_the_disk() {
        let dir = TempDir::new("straddle");
        let g = geometry(0);
        // Frames of 6000 bytes: each straddles a 4 KiB page.
        let frames = record(&dir.0, g, 0, 20_000, 6000);
        let (last, f) = frames.last().unwrap();
        let end = last + f.len() as i64;
        let recover = |c| recover_stop_position(&dir.0, g, 0, c).unwrap();
        assert_eq!(
            recover(None),
            Recovered {
                stop_position: end,
                torn: None
            }
        );
        // A checksum set now, the recording made without one: the frames
        // are still whole (the setting is for new data).
        assert_eq!(recover(Some(Checksum::Crc32c)).stop_position, end);
        // Power lost: the last frame's first page is on disk, its next is not.
        let page_end = (last / PAGE + 1) * PAGE;
        let file = OpenOptions::new()
            .write(true)
            .open(g.path(&dir.0, 0))
            .unwrap();
        let zeros = vec![0u8; (end.min(page_end + PAGE) - page_end) as usize];
        file.write_all_at(&zeros, page_end as u64).unwrap();
        let r = recover(None);
        assert_eq!(
            r.stop_position, *last,
            "the torn message is not taken as whole"
        );
        let why = r.torn.expect("the cut is reported");
        assert!(
            why.contains(&format!("position {last}")) && why.contains("page"),
            "{why}"
        );
    }

    #[test]
    fn should_keep_a_straddling_last_frame_with_zero_bytes_that_its_checksum_proves_whole() {
        let dir = TempDir::new("straddle-checksum");
        let g = geometry(0);
        let mut w = RecordingWriter::new(&dir.0, g, 0, 0).with_checksum(Some(Checksum::Crc32c));
        let mut f = frame(&g, 0, 9000, 0); // a message of zeros, over three pages
        f[DATA_HEADER_LENGTH] = 1;
        w.write_block(&f).unwrap();
        let end = f.len() as i64;
        let recover = |c| {
            recover_stop_position(&dir.0, g, 0, c)
                .unwrap()
                .stop_position
        };
        assert_eq!(
            recover(Some(Checksum::Crc32c)),
            end,
            "its checksum proves it whole"
        );
        assert_eq!(recover(None), 0, "without one, zero pages look torn");
    }

    #[test]
    fn should_extend_into_the_segment_where_a_recording_stopped() {
        let dir = TempDir::new("extend");
        let g = geometry(0);
        let first = record(&dir.0, g, 0, 2000, 200);
        let stop = first.last().map(|(p, f)| p + f.len() as i64).unwrap();
        let second = record(&dir.0, g, stop, stop + 2000, 300);
        let end = second.last().map(|(p, f)| p + f.len() as i64).unwrap();
        assert_eq!(
            recover_stop_position(&dir.0, g, 0, None)
                .unwrap()
                .stop_position,
            end
        );
        // A new segment where a file already exists is refused.
        let mut w = RecordingWriter::new(&dir.0, g, 0, 0);
        let err = w.write_block(&frame(&g, 0, 10, 1)).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
    }
}
