//! A cluster component's mark file (`cluster-mark.dat` for the consensus
//! module, `cluster-mark-service-<id>.dat` for a service), laid out as
//! Aeron's (see `sulis_protocol::cluster::mark_file`): who runs, on which
//! driver and channels, whether it started, and its error log, which
//! outlives the process. `sulis cluster-tool DIR errors` and Aeron's
//! ClusterTool read it, from a member that runs or one that stopped.
//!
//! Whether the component is alive is the consensus module's lock file's
//! business (`consensus-module.lck`); the activity timestamp is kept for
//! Aeron's tools, which judge by it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use sulis_concurrent::error_log::{error_log_text, read_error_log, utc, DistinctErrorLog};
use sulis_concurrent::mapped_file::MappedFile;
use sulis_concurrent::AtomicBuffer;
use sulis_protocol::cluster::mark_file::*;

/// What the mark file says about its component.
#[derive(Clone, Debug, Default)]
pub struct MarkFields {
    /// `component_type::CONSENSUS_MODULE` or `CONTAINER`.
    pub component_type: i32,
    /// The member (−1 for a service until it joins the log).
    pub member_id: i32,
    /// The service's id (−1 for the consensus module).
    pub service_id: i32,
    /// The cluster's id.
    pub cluster_id: i32,
    /// Archive control stream.
    pub archive_stream_id: i32,
    /// Module → services.
    pub service_stream_id: i32,
    /// Services → module.
    pub consensus_module_stream_id: i32,
    /// Clients → module.
    pub ingress_stream_id: i32,
    /// The media driver's directory.
    pub aeron_directory: String,
    /// The channel between the module and its services.
    pub control_channel: String,
    /// The ingress channel.
    pub ingress_channel: String,
    /// The service's name (empty for the module).
    pub service_name: String,
    /// Bytes of error log (at least 1 MiB, as Aeron requires).
    pub error_buffer_length: usize,
}

struct Inner {
    file: MappedFile,
    errors: Mutex<DistinctErrorLog>,
}

/// An open mark file, written by its component. Clones share it: the
/// module's start-up records into it before the module exists.
#[derive(Clone)]
pub struct ClusterMarkFile(Arc<Inner>);

impl ClusterMarkFile {
    /// Writes `dir/file_name` afresh for a component starting at `now_ms`,
    /// its storage reserved up front (a full disk is an error here). The
    /// previous run's errors, if any, are first saved beside it as
    /// `<prefix>-<UTC time>-error.log`, as Aeron's cluster saves them.
    pub fn create(
        dir: &Path,
        file_name: &str,
        f: &MarkFields,
        now_ms: i64,
    ) -> Result<ClusterMarkFile, String> {
        let path = dir.join(file_name);
        if let Ok(old) = MarkFileReader::open(&path) {
            let (n, text) = old.error_text();
            if n > 0 {
                let prefix = file_name.trim_end_matches(FILE_EXTENSION);
                let stamp = utc(now_ms).replace([':', '.', ' '], "-");
                let saved = dir.join(format!("{prefix}-{stamp}-error.log"));
                let head = format!("{n} distinct errors observed by the previous run:\n");
                let _ = std::fs::write(saved, head + &text);
            }
        }
        let _ = std::fs::remove_file(&path);
        let error_length = f.error_buffer_length.max(DEFAULT_ERROR_BUFFER_LENGTH);
        let length = (HEADER_LENGTH + error_length).div_ceil(4096) * 4096;
        let file = MappedFile::create(&path, length, false).map_err(|e| e.to_string())?;
        let header = MarkFileHeader {
            version: 0,
            component_type: f.component_type,
            activity_timestamp: now_ms,
            start_timestamp: now_ms,
            pid: std::process::id() as i64,
            candidate_term_id: -1,
            archive_stream_id: f.archive_stream_id,
            service_stream_id: f.service_stream_id,
            consensus_module_stream_id: f.consensus_module_stream_id,
            ingress_stream_id: f.ingress_stream_id,
            member_id: f.member_id,
            service_id: f.service_id,
            header_length: HEADER_LENGTH as i32,
            error_buffer_length: (length - HEADER_LENGTH) as i32,
            cluster_id: f.cluster_id,
            aeron_directory: f.aeron_directory.clone(),
            control_channel: f.control_channel.clone(),
            ingress_channel: f.ingress_channel.clone(),
            service_name: f.service_name.clone(),
            authenticator: String::new(),
            services_cluster_dir: String::new(),
        }
        .encode();
        if header.len() > HEADER_LENGTH {
            return Err(format!(
                "{}: the channels and directory are too long for the mark file's {HEADER_LENGTH}-byte header",
                path.display()
            ));
        }
        let b = file.buffer();
        b.put_bytes(0, &header);
        let errors = DistinctErrorLog::new(b.view(HEADER_LENGTH, length - HEADER_LENGTH));
        Ok(ClusterMarkFile(Arc::new(Inner {
            file,
            errors: Mutex::new(errors),
        })))
    }

    fn buffer(&self) -> AtomicBuffer {
        self.0.file.buffer()
    }

    /// The component started: the version goes in (last, as Aeron's does).
    pub fn signal_ready(&self, now_ms: i64) {
        self.update_activity(now_ms);
        self.buffer()
            .put_i32_ordered(VERSION_OFFSET, MARK_FILE_VERSION);
    }

    /// The component's start failed (its error log says why).
    pub fn signal_failed(&self) {
        self.buffer()
            .put_i32_ordered(VERSION_OFFSET, VERSION_FAILED);
    }

    /// The component is alive at `now_ms`.
    pub fn update_activity(&self, now_ms: i64) {
        self.buffer()
            .put_i64_ordered(ACTIVITY_TIMESTAMP_OFFSET, now_ms);
    }

    /// The member the component runs on (a service learns it from JoinLog).
    pub fn set_member_id(&self, member_id: i32) {
        self.buffer().put_i32_ordered(MEMBER_ID_OFFSET, member_id);
    }

    /// Records `text` in the error log (a repeat counts as one more
    /// observation of the same error).
    pub fn record_error(&self, text: &str, now_ms: i64) {
        let mut errors = self.0.errors.lock().unwrap_or_else(|p| p.into_inner());
        errors.record(text, now_ms);
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.0.file.path()
    }
}

/// A mark file read by a tool (or by its component's next start).
pub struct MarkFileReader {
    file: MappedFile,
    header: MarkFileHeader,
}

impl MarkFileReader {
    /// Opens and decodes the mark file at `path`; the error names the file.
    pub fn open(path: &Path) -> Result<MarkFileReader, String> {
        let file = MappedFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let b = file.buffer();
        let n = b.capacity().min(HEADER_LENGTH);
        let header = MarkFileHeader::decode(b.slice(0, n))
            .map_err(|e| format!("{}: {}", path.display(), e.message))?;
        Ok(MarkFileReader { file, header })
    }

    /// The header as its component wrote it (version and activity as now).
    pub fn header(&self) -> MarkFileHeader {
        let b = self.file.buffer();
        let mut h = self.header.clone();
        h.version = b.get_i32_volatile(VERSION_OFFSET);
        h.activity_timestamp = b.get_i64_volatile(ACTIVITY_TIMESTAMP_OFFSET);
        h.member_id = b.get_i32_volatile(MEMBER_ID_OFFSET);
        h
    }

    fn error_buffer(&self) -> Option<AtomicBuffer> {
        let b = self.file.buffer();
        let (start, length) = (
            self.header.header_length as usize,
            self.header.error_buffer_length as usize,
        );
        (start > 0 && start.saturating_add(length) <= b.capacity()).then(|| b.view(start, length))
    }

    /// The error log: (observations, first ms, last ms, text) per distinct error.
    pub fn errors(&self) -> Vec<(i32, i64, i64, String)> {
        let mut out = Vec::new();
        if let Some(b) = self.error_buffer() {
            read_error_log(b, 0, |n, first, last, text| {
                out.push((n, first, last, text.to_string()))
            });
        }
        out
    }

    /// The error log as text, and how many distinct errors it holds.
    pub fn error_text(&self) -> (usize, String) {
        self.error_buffer()
            .map_or((0, String::new()), error_log_text)
    }
}

/// The mark files in a cluster directory: the consensus module's first (if
/// there is one), then the services' in id order.
pub fn mark_files(dir: &Path) -> Vec<PathBuf> {
    let mut services: Vec<(i32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name
                .strip_prefix(SERVICE_FILE_PREFIX)?
                .strip_suffix(FILE_EXTENSION)?
                .parse()
                .ok()?;
            Some((id, e.path()))
        })
        .collect();
    services.sort();
    let module = dir.join(MARK_FILE);
    module
        .exists()
        .then_some(module)
        .into_iter()
        .chain(services.into_iter().map(|(_, p)| p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> MarkFields {
        MarkFields {
            component_type: component_type::CONSENSUS_MODULE,
            member_id: 1,
            service_id: -1,
            service_stream_id: 104,
            consensus_module_stream_id: 105,
            aeron_directory: "/dev/shm/d".into(),
            control_channel: "aeron:ipc?term-length=128k".into(),
            ..MarkFields::default()
        }
    }

    #[test]
    fn should_keep_its_errors_after_the_component_stops_and_save_them_at_the_next_start() {
        let dir = std::env::temp_dir().join(format!("sulis-cmf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mark = ClusterMarkFile::create(&dir, MARK_FILE, &fields(), 1_000).unwrap();
        let reader = MarkFileReader::open(&dir.join(MARK_FILE)).unwrap();
        assert_eq!(reader.header().version, 0, "not ready before signal_ready");
        mark.signal_ready(2_000);
        mark.record_error("election: no quorum", 2_500);
        mark.record_error("election: no quorum", 2_600);
        mark.clone().record_error("snapshot failed", 2_700);
        let h = reader.header();
        assert_eq!(
            (h.version, h.activity_timestamp, h.member_id, h.pid),
            (MARK_FILE_VERSION, 2_000, 1, std::process::id() as i64)
        );
        assert_eq!(
            (h.service_stream_id, h.control_channel.as_str()),
            (104, "aeron:ipc?term-length=128k")
        );
        assert!(h.error_buffer_length as usize >= DEFAULT_ERROR_BUFFER_LENGTH);
        assert_eq!(
            reader.errors(),
            vec![
                (2, 2_500, 2_600, "election: no quorum".to_string()),
                (1, 2_700, 2_700, "snapshot failed".to_string())
            ]
        );
        drop((mark, reader));

        // A failed start: the version says so and the error log says why.
        let mark = ClusterMarkFile::create(&dir, MARK_FILE, &fields(), 86_400_000).unwrap();
        mark.record_error("recording.log is damaged", 86_400_001);
        mark.signal_failed();
        let reader = MarkFileReader::open(&dir.join(MARK_FILE)).unwrap();
        assert_eq!(reader.header().version, VERSION_FAILED);
        assert_eq!(
            reader.errors().len(),
            1,
            "the previous run's errors are not carried over"
        );
        let saved =
            std::fs::read_to_string(dir.join("cluster-mark-1970-01-02-00-00-00-000-error.log"))
                .unwrap();
        assert!(
            saved.starts_with("2 distinct errors observed by the previous run:\n"),
            "{saved}"
        );
        assert!(saved.contains("2 observations from 1970-01-01 00:00:02.500 to 1970-01-01 00:00:02.600 for:\n election: no quorum\n"), "{saved}");

        let service = MarkFields {
            component_type: component_type::CONTAINER,
            service_id: 0,
            ..fields()
        };
        ClusterMarkFile::create(&dir, &service_file_name(0), &service, 5).unwrap();
        assert_eq!(
            mark_files(&dir),
            vec![dir.join(MARK_FILE), dir.join("cluster-mark-service-0.dat")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
