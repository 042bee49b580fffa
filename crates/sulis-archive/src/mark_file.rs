//! The archive's mark file (`archive-mark.dat`, Aeron's layout: see
//! `sulis_protocol::archive::mark_file`): who runs the archive, on which
//! channels, whether it is alive, and its error log.

use crate::error::ArchiveStartError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use sulis_concurrent::error_log::DistinctErrorLog;
use sulis_concurrent::mapped_file::MappedFile;
use sulis_concurrent::AtomicBuffer;
use sulis_protocol::archive::catalog::CATALOG_VERSION;
use sulis_protocol::archive::mark_file::*;

/// Where sulis notes which kernel and pid namespace wrote the file: in the
/// header's unused tail, which Aeron's readers never look at.
const ORIGIN_OFFSET: usize = HEADER_LENGTH - 64;
const ORIGIN_MAGIC: &[u8; 8] = b"sulisorg";

/// This process's origin: the kernel's boot id and the pid namespace's
/// inode. Two processes with the same origin see each other's pids and
/// file locks.
fn origin() -> [u8; 64] {
    let mut o = [0u8; 64];
    o[..8].copy_from_slice(ORIGIN_MAGIC);
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let boot = boot.trim().as_bytes();
    let n = boot.len().min(40);
    o[8..8 + n].copy_from_slice(&boot[..n]);
    use std::os::unix::fs::MetadataExt;
    let pidns = std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino());
    o[48..56].copy_from_slice(&pidns.to_le_bytes());
    o
}

/// Whether a lock can be taken on the open mark file `file`.
enum Lock {
    /// Taken (released when the file is closed, or its process dies).
    Taken,
    /// Another open file holds it: its archive is alive.
    Held,
    /// The file system has no locks.
    Unsupported,
}

fn try_lock(file: &File, exclusive: bool) -> Lock {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
        return Lock::Taken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EWOULDBLOCK) => Lock::Held,
        _ => Lock::Unsupported,
    }
}

/// Why the directory of mark file `buffer` is taken at `now_ms`, if it is.
///
/// An archive holds a lock on its mark file for as long as it runs, and
/// the kernel drops the lock when the process dies, however it dies. So a
/// lock held means alive; a lock free on a file written by this kernel and
/// pid namespace means dead at once. A file written elsewhere (another
/// host or container sharing the volume) or on a file system without
/// locks falls back to the activity timestamp, as Aeron's archive decides:
/// alive while it is under 10 s old.
fn taken(path: &Path, buffer: Option<AtomicBuffer>, lock: &Lock, now_ms: i64) -> Option<String> {
    let dir = path
        .parent()
        .map_or(String::new(), |d| d.display().to_string());
    if let Lock::Held = lock {
        return Some(format!(
            "an archive is running in {dir} (it holds the lock on its mark file {})",
            path.display()
        ));
    }
    let b = buffer.filter(|b| b.capacity() >= HEADER_LENGTH)?;
    let same_origin = b.slice(ORIGIN_OFFSET, 64) == origin();
    if same_origin && matches!(lock, Lock::Taken) {
        return None;
    }
    let activity = b.get_i64_volatile(ACTIVITY_TIMESTAMP_OFFSET);
    (activity > 0 && now_ms - activity < LIVENESS_TIMEOUT_MS).then(|| {
        format!(
            "an archive is running in {dir} (its mark file {} was active {} ms ago, and its owner, pid {}, \
             is not a process this host can see; it counts as alive until {} ms without activity)",
            path.display(),
            now_ms - activity,
            b.get_i64(PID_OFFSET),
            LIVENESS_TIMEOUT_MS
        )
    })
}

/// An open mark file, owned by a running archive.
pub struct ArchiveMarkFile {
    file: MappedFile,
    errors: DistinctErrorLog,
    /// Holds the lock that tells everyone else the archive is alive.
    _lock: File,
}

/// What the mark file records about the archive.
pub struct MarkFileFields<'a> {
    /// The archive's id.
    pub archive_id: i64,
    /// Control channel (empty if none).
    pub control_channel: &'a str,
    /// Control stream.
    pub control_stream_id: i32,
    /// Local control channel.
    pub local_control_channel: &'a str,
    /// Local control stream.
    pub local_control_stream_id: i32,
    /// The driver directory.
    pub aeron_directory: &'a str,
    /// Error log length.
    pub error_buffer_length: usize,
    /// Now (epoch ms).
    pub now_ms: i64,
}

/// The directory claimed for one archive: its mark file locked, nothing
/// else of the directory touched yet. An archive claims its directory
/// before it opens the catalog, so a second archive started on a live
/// directory leaves every file as it found it.
pub struct MarkFileClaim {
    path: PathBuf,
    file: File,
    stopped_cleanly: bool,
    previous_activity_ms: Option<i64>,
}

impl MarkFileClaim {
    /// Claims `dir` (which must exist), refusing when an archive that is
    /// alive owns it. A dead archive's error log is saved beside the mark
    /// file as `<time>-error.log` (as Aeron's archive saves it) before the
    /// file is reused.
    pub fn claim(dir: &Path, now_ms: i64) -> Result<MarkFileClaim, ArchiveStartError> {
        let path = dir.join(MARK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| {
                ArchiveStartError::io(format_args!("cannot open {}", path.display()), &e)
            })?;
        let lock = try_lock(&file, true);
        let len = file.metadata().map_or(0, |m| m.len()) as usize;
        let old = (len >= HEADER_LENGTH)
            .then(|| MappedFile::open(&path).ok())
            .flatten();
        if let Some(why) = taken(&path, old.as_ref().map(|m| m.buffer()), &lock, now_ms) {
            return Err(ArchiveStartError::DirectoryInUse(why));
        }
        let stopped_cleanly = old
            .as_ref()
            .is_some_and(|m| m.buffer().get_i64_volatile(ACTIVITY_TIMESTAMP_OFFSET) == -1);
        let previous_activity_ms = old
            .as_ref()
            .map(|m| m.buffer().get_i64_volatile(ACTIVITY_TIMESTAMP_OFFSET))
            .filter(|&t| t > 0);
        if let Some(old) = old {
            save_errors(dir, &old.buffer(), now_ms);
        }
        Ok(MarkFileClaim {
            path,
            file,
            stopped_cleanly,
            previous_activity_ms,
        })
    }

    /// True when the archive before this one stopped cleanly ([`ArchiveMarkFile::close`]):
    /// nothing a crash interrupts can have been left half done.
    pub fn previous_stopped_cleanly(&self) -> bool {
        self.stopped_cleanly
    }

    /// The last activity time (epoch ms) the archive before this one wrote,
    /// if its mark file says one: when it was last known alive.
    pub fn previous_activity_ms(&self) -> Option<i64> {
        self.previous_activity_ms
    }

    /// Writes the archive's mark file, its storage reserved up front (a
    /// full disk is an error here, never a SIGBUS later).
    pub fn create(self, f: &MarkFileFields<'_>) -> Result<ArchiveMarkFile, ArchiveStartError> {
        let MarkFileClaim { path, file, .. } = self;
        let page = 4096;
        let length = (HEADER_LENGTH + f.error_buffer_length).div_ceil(page) * page;
        file.set_len(0)
            .and_then(|_| file.set_len(length as u64))
            .map_err(|e| {
                ArchiveStartError::io(format_args!("cannot size {}", path.display()), &e)
            })?;
        // SAFETY: a plain syscall on an fd we own.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, length as libc::off_t) };
        if rc != 0 {
            let what = format!(
                "insufficient storage for {} ({length} bytes)",
                path.display()
            );
            return Err(ArchiveStartError::io(
                what,
                &std::io::Error::from_raw_os_error(rc),
            ));
        }
        let mapped = MappedFile::open(&path).map_err(|e| ArchiveStartError::io("mark file", &e))?;
        let header = MarkFileHeader {
            version: 0,
            activity_timestamp: f.now_ms,
            start_timestamp: f.now_ms,
            pid: std::process::id() as i64,
            control_stream_id: f.control_stream_id,
            local_control_stream_id: f.local_control_stream_id,
            events_stream_id: 30,
            header_length: HEADER_LENGTH as i32,
            error_buffer_length: (length - HEADER_LENGTH) as i32,
            archive_id: f.archive_id,
            control_channel: f.control_channel.into(),
            local_control_channel: f.local_control_channel.into(),
            events_channel: String::new(),
            aeron_directory: f.aeron_directory.into(),
        }
        .encode();
        if header.len() > ORIGIN_OFFSET {
            return Err(ArchiveStartError::Config(
                "the archive's channels are too long for its mark file header".into(),
            ));
        }
        let b = mapped.buffer();
        b.put_bytes(0, &header);
        b.put_bytes(ORIGIN_OFFSET, &origin());
        // Ready: the version goes in last.
        b.put_i32_ordered(VERSION_OFFSET, CATALOG_VERSION);
        let errors = DistinctErrorLog::new(b.view(HEADER_LENGTH, length - HEADER_LENGTH));
        Ok(ArchiveMarkFile {
            file: mapped,
            errors,
            _lock: file,
        })
    }
}

/// Writes the error log of the mark file in `b` (if it has any) to
/// `dir/<UTC time>-error.log`.
fn save_errors(dir: &Path, b: &AtomicBuffer, now_ms: i64) {
    let Ok(h) = MarkFileHeader::decode(b.slice(0, HEADER_LENGTH.min(b.capacity()))) else {
        return;
    };
    let (start, length) = (h.header_length as usize, h.error_buffer_length as usize);
    if start == 0 || start.saturating_add(length) > b.capacity() {
        return;
    }
    let (n, mut text) = sulis_concurrent::error_log::error_log_text(b.view(start, length));
    if n > 0 {
        let name = format!(
            "{}-error.log",
            sulis_concurrent::error_log::utc(now_ms).replace([':', '.', ' '], "-")
        );
        text.insert_str(
            0,
            &format!("{n} distinct errors observed by the previous archive run:\n"),
        );
        let _ = std::fs::write(dir.join(name), text);
    }
}

impl ArchiveMarkFile {
    fn buffer(&self) -> AtomicBuffer {
        self.file.buffer()
    }

    /// The archive is alive at `now_ms`.
    pub fn update_activity(&self, now_ms: i64) {
        self.buffer()
            .put_i64_ordered(ACTIVITY_TIMESTAMP_OFFSET, now_ms);
    }

    /// Records an error in the mark file's error log.
    pub fn record_error(&mut self, text: &str, now_ms: i64) {
        self.errors.record(text, now_ms);
    }

    /// A clean stop: the activity timestamp becomes −1.
    pub fn close(&self) {
        self.buffer().put_i64_ordered(ACTIVITY_TIMESTAMP_OFFSET, -1);
    }
}

/// A mark file read by someone other than its archive (`sulis archive-tool`,
/// a second archive deciding whether the directory is free).
pub struct MarkFileReader {
    file: MappedFile,
    path: std::path::PathBuf,
}

impl MarkFileReader {
    /// Opens `dir/archive-mark.dat` (`None`: there is none, or it cannot be mapped).
    pub fn open(dir: &Path) -> Option<MarkFileReader> {
        let path = dir.join(MARK_FILE);
        let file = MappedFile::open(&path).ok()?;
        (file.buffer().capacity() >= PID_OFFSET + 8).then_some(MarkFileReader { file, path })
    }

    /// The archive's process id.
    pub fn pid(&self) -> i64 {
        self.file.buffer().get_i64(PID_OFFSET)
    }

    /// When it last said it was alive (epoch ms; −1 after a clean stop).
    pub fn activity_timestamp(&self) -> i64 {
        self.file
            .buffer()
            .get_i64_volatile(ACTIVITY_TIMESTAMP_OFFSET)
    }

    /// Why the directory is taken at `now_ms`, if an archive that is alive
    /// owns it (see [`MarkFileClaim::claim`]).
    pub fn alive(&self, now_ms: i64) -> Option<String> {
        let lock = match File::open(&self.path) {
            Ok(f) => {
                let lock = try_lock(&f, false);
                drop(f); // a shared lock taken only to look, released at once
                lock
            }
            Err(_) => Lock::Unsupported,
        };
        taken(&self.path, Some(self.file.buffer()), &lock, now_ms)
    }

    /// The header's fields (channels, archive id, ...).
    pub fn header(&self) -> Result<MarkFileHeader, String> {
        let b = self.file.buffer();
        let n = b.capacity().min(HEADER_LENGTH);
        MarkFileHeader::decode(b.slice(0, n))
            .map_err(|e| format!("{}: {}", self.path.display(), e.message))
    }

    /// The error log: (observations, first ms, last ms, text) per distinct error.
    pub fn errors(&self) -> Vec<(i32, i64, i64, String)> {
        let b = self.file.buffer();
        let Ok(h) = self.header() else {
            return Vec::new();
        };
        let (start, length) = (h.header_length as usize, h.error_buffer_length as usize);
        if start == 0 || start.saturating_add(length) > b.capacity() {
            return Vec::new();
        }
        let mut out = Vec::new();
        sulis_concurrent::error_log::read_error_log(
            b.view(start, length),
            0,
            |n, first, last, text| out.push((n, first, last, text.to_string())),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(now_ms: i64) -> MarkFileFields<'static> {
        MarkFileFields {
            archive_id: 7,
            control_channel: "",
            control_stream_id: 10,
            local_control_channel: "aeron:ipc",
            local_control_stream_id: 10,
            aeron_directory: "/dev/shm/x",
            error_buffer_length: 64 * 1024,
            now_ms,
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sulis-mark-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn should_refuse_a_live_archive_by_its_lock_and_take_a_dead_ones_at_once() {
        let dir = temp_dir("lock");
        let now = 1_000_000;
        let live = MarkFileClaim::claim(&dir, now)
            .unwrap()
            .create(&fields(now))
            .unwrap();
        let err = MarkFileClaim::claim(&dir, now + 60_000)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("holds the lock"), "{err}");
        assert!(MarkFileReader::open(&dir)
            .unwrap()
            .alive(now + 60_000)
            .is_some());
        // Gone without a clean stop (its activity is fresh): the lock is free
        // and the file is from this host, so it is dead at once.
        drop(live);
        assert!(MarkFileReader::open(&dir).unwrap().alive(now).is_none());
        MarkFileClaim::claim(&dir, now).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn should_take_a_mark_file_a_power_cut_left_zeroed_or_torn_as_a_crash() {
        for (name, bytes) in [("zeros", vec![0u8; 1 << 20]), ("torn", vec![0x5au8; 700])] {
            let dir = temp_dir(name);
            std::fs::write(dir.join(MARK_FILE), &bytes).unwrap();
            let claim = MarkFileClaim::claim(&dir, 1_000_000).unwrap();
            assert!(!claim.previous_stopped_cleanly(), "{name}: recovery runs");
            assert_eq!(
                claim.previous_activity_ms(),
                None,
                "{name}: no time it was last alive"
            );
            claim.create(&fields(1_000_000)).unwrap();
            assert_eq!(
                MarkFileReader::open(&dir).unwrap().pid(),
                std::process::id() as i64
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn should_count_a_fresh_mark_file_from_elsewhere_as_alive_until_it_goes_stale() {
        let dir = temp_dir("foreign");
        let now = 1_000_000;
        drop(
            MarkFileClaim::claim(&dir, now)
                .unwrap()
                .create(&fields(now))
                .unwrap(),
        );
        // Written by another host or pid namespace: no lock of ours says anything.
        let m = MappedFile::open(&dir.join(MARK_FILE)).unwrap();
        m.buffer().put_bytes(ORIGIN_OFFSET, &[0u8; 64]);
        let err = MarkFileClaim::claim(&dir, now + 2_000).err().unwrap();
        assert!(matches!(err, ArchiveStartError::DirectoryInUse(_)), "{err}");
        assert!(err.to_string().contains("active 2000 ms ago"), "{err}");
        MarkFileClaim::claim(&dir, now + LIVENESS_TIMEOUT_MS + 1).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn should_save_a_dead_archives_errors_beside_the_mark_file() {
        let dir = temp_dir("errors");
        let now = 1_700_000_000_000; // 2023-11-14 22:13:20 UTC
        let mut m = MarkFileClaim::claim(&dir, now)
            .unwrap()
            .create(&fields(now))
            .unwrap();
        m.record_error("recording 3: disk on fire", now);
        drop(m);
        MarkFileClaim::claim(&dir, now + 5).unwrap();
        let saved = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().ends_with("-error.log"))
            .expect("an error log saved");
        assert_eq!(
            saved.file_name().to_string_lossy(),
            "2023-11-14-22-13-20-005-error.log"
        );
        let text = std::fs::read_to_string(saved.path()).unwrap();
        assert!(text.contains("recording 3: disk on fire"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
