//! The archive's mark file (`archive-mark.dat`, Aeron's layout: see
//! `sulis_protocol::archive::mark_file`): who runs the archive, on which
//! channels, whether it is alive, and its error log.

use std::path::Path;
use sulis_concurrent::error_log::DistinctErrorLog;
use sulis_concurrent::mapped_file::MappedFile;
use sulis_concurrent::AtomicBuffer;
use sulis_protocol::archive::catalog::CATALOG_VERSION;
use sulis_protocol::archive::mark_file::*;

/// An open mark file, owned by a running archive.
pub struct ArchiveMarkFile {
    file: MappedFile,
    errors: DistinctErrorLog,
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

impl ArchiveMarkFile {
    /// Creates `dir/archive-mark.dat`, refusing when another archive that
    /// is alive owns the directory; a dead one's file is replaced.
    pub fn create(dir: &Path, f: &MarkFileFields<'_>) -> Result<ArchiveMarkFile, String> {
        let path = dir.join(MARK_FILE);
        if let Some(live) = MarkFileReader::open(dir).and_then(|m| m.alive(f.now_ms)) {
            return Err(live);
        }
        if path.exists() {
            std::fs::remove_file(&path)
                .map_err(|e| format!("cannot replace {}: {e}", path.display()))?;
        }
        let page = 4096;
        let length = (HEADER_LENGTH + f.error_buffer_length).div_ceil(page) * page;
        let file = MappedFile::create(&path, length, true).map_err(|e| e.to_string())?;
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
        if header.len() > HEADER_LENGTH {
            let _ = std::fs::remove_file(&path);
            return Err("the archive's channels are too long for its mark file header".into());
        }
        let b = file.buffer();
        b.put_bytes(0, &header);
        // Ready: the version goes in last.
        b.put_i32_ordered(VERSION_OFFSET, CATALOG_VERSION);
        let errors = DistinctErrorLog::new(b.view(HEADER_LENGTH, length - HEADER_LENGTH));
        Ok(ArchiveMarkFile { file, errors })
    }

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
    /// owns it: a process of this machine that is gone (killed) is dead at
    /// once; otherwise its heartbeat decides, as Aeron's.
    pub fn alive(&self, now_ms: i64) -> Option<String> {
        let (pid, activity) = (self.pid(), self.activity_timestamp());
        let process_gone = pid > 0
            && pid <= i32::MAX as i64
            // SAFETY: signal 0 only asks whether the process exists.
            && unsafe { libc::kill(pid as libc::pid_t, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        (!process_gone && activity > 0 && now_ms - activity < LIVENESS_TIMEOUT_MS).then(|| {
            format!(
                "an archive is running in {} (its mark file {} was active {} ms ago)",
                self.path
                    .parent()
                    .map_or(String::new(), |d| d.display().to_string()),
                self.path.display(),
                now_ms - activity
            )
        })
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
