//! Log buffers: three term partitions plus metadata, memory-mapped and shared.
//!
//! The driver creates a log per publication; publishers append into it and IPC
//! subscribers read it in place. Layout and arithmetic are in
//! [`sulis_protocol::log_buffer_descriptor`].

pub mod populator;
pub mod term_appender;
pub mod term_reader;
pub mod term_rebuilder;
pub mod term_scanner;
pub mod unblocker;

use crate::mapped_file::MappedFile;
use crate::AtomicBuffer;
use std::io;
use std::path::Path;
use sulis_protocol::frame;
use sulis_protocol::log_buffer_descriptor::*;

/// Parameters written into a new log's metadata.
#[derive(Clone, Debug)]
pub struct LogParams {
    /// Registration (correlation) id of the publication or image.
    pub correlation_id: i64,
    /// Term length (power of two, 64 KiB..1 GiB).
    pub term_length: usize,
    /// Page size of the file.
    pub page_size: usize,
    /// MTU (IPC: max payload + header per fragment).
    pub mtu: usize,
    /// Initial term id.
    pub initial_term_id: i32,
    /// Term id at which the stream starts (usually `initial_term_id`).
    pub active_term_id: i32,
    /// Term offset at which the stream starts (usually 0).
    pub term_offset: i32,
    /// Session id.
    pub session_id: i32,
    /// Stream id.
    pub stream_id: i32,
    /// 0 concurrent, 1 exclusive, 2 image.
    pub log_type: u8,
    /// Publication window length.
    pub publication_window: i32,
    /// Linger timeout ns.
    pub linger_ns: i64,
    /// Sparse file (no storage reservation).
    pub sparse: bool,
    /// Send end-of-stream on close.
    pub signal_eos: bool,
    /// Tether flag.
    pub tether: bool,
    /// Gaps are NAKed (true) or padded over (`reliable=false`); images only mean it.
    pub reliable: bool,
    /// Spy subscriptions count as a connection (`ssc`); network publications only mean it.
    pub spies_simulate_connection: bool,
}

/// A mapped log buffer file.
pub struct LogBuffers {
    file: MappedFile,
    terms: [AtomicBuffer; PARTITION_COUNT],
    meta: AtomicBuffer,
    term_length: usize,
}

impl std::fmt::Debug for LogBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LogBuffers({:?}, term_length={})",
            self.file, self.term_length
        )
    }
}

impl LogBuffers {
    /// Creates and initialises a new log file.
    pub fn create(path: &Path, p: &LogParams) -> io::Result<LogBuffers> {
        check_term_length(p.term_length)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        check_page_size(p.page_size).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let file = MappedFile::create(
            path,
            compute_log_length(p.term_length, p.page_size),
            p.sparse,
        )?;
        let logs = Self::wrap(file, p.term_length)?;
        let m = logs.meta;
        if p.sparse {
            // The metadata page is written now: take it first, so a full file
            // system is this error rather than a SIGBUS in the driver.
            if let Err(e) = populator::populate(&m, 0, LOG_META_DATA_LENGTH, p.page_size) {
                let _ = std::fs::remove_file(path);
                return Err(io::Error::new(
                    e.kind(),
                    format!("insufficient storage for {}: {e}", path.display()),
                ));
            }
        }
        m.put_i64(LOG_CORRELATION_ID_OFFSET, p.correlation_id);
        m.put_i32(LOG_INITIAL_TERM_ID_OFFSET, p.initial_term_id);
        m.put_i32(
            LOG_DEFAULT_FRAME_HEADER_LENGTH_OFFSET,
            frame::DATA_HEADER_LENGTH as i32,
        );
        m.put_i32(LOG_MTU_LENGTH_OFFSET, p.mtu as i32);
        m.put_i32(LOG_TERM_LENGTH_OFFSET, p.term_length as i32);
        m.put_i32(LOG_PAGE_SIZE_OFFSET, p.page_size as i32);
        m.put_i32(LOG_PUBLICATION_WINDOW_LENGTH_OFFSET, p.publication_window);
        m.put_i64(LOG_LINGER_TIMEOUT_NS_OFFSET, p.linger_ns);
        m.put_u8(LOG_SPARSE_OFFSET, p.sparse as u8);
        m.put_u8(LOG_SIGNAL_EOS_OFFSET, p.signal_eos as u8);
        m.put_u8(LOG_TETHER_OFFSET, p.tether as u8);
        m.put_u8(LOG_RELIABLE_OFFSET, p.reliable as u8);
        m.put_u8(
            LOG_SPIES_SIMULATE_CONNECTION_OFFSET,
            p.spies_simulate_connection as u8,
        );
        m.put_u8(LOG_REJOIN_OFFSET, 1);
        m.put_u8(LOG_TYPE_OFFSET, p.log_type);
        let header = frame::default_data_header(p.session_id, p.stream_id, p.initial_term_id);
        m.put_bytes(LOG_DEFAULT_FRAME_HEADER_OFFSET, &header);
        logs.initialise_tails(p.initial_term_id, p.active_term_id, p.term_offset);
        // Written last: a reader that sees the EOS position initialised sees the rest.
        m.put_i64_ordered(LOG_END_OF_STREAM_POSITION_OFFSET, i64::MAX);
        Ok(logs)
    }

    /// Maps an existing log file (written by a driver) and checks its metadata.
    pub fn map_existing(path: &Path) -> io::Result<LogBuffers> {
        let file = MappedFile::open(path)?;
        let len = file.len();
        if len < LOG_META_DATA_LENGTH {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("log buffer {} is too short ({len} bytes)", path.display()),
            ));
        }
        let probe = file.buffer();
        // The metadata sits at 3 × term length; find the term length from the file length.
        let term_length = (len - LOG_META_DATA_LENGTH) / PARTITION_COUNT;
        let term_length = if term_length.is_power_of_two() {
            term_length
        } else {
            term_length.next_power_of_two() / 2
        };
        check_term_length(term_length).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("log buffer {}: {e}", path.display()),
            )
        })?;
        let meta_term_length =
            probe.get_i32(PARTITION_COUNT * term_length + LOG_TERM_LENGTH_OFFSET);
        if meta_term_length as usize != term_length {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "log buffer {}: metadata term length {meta_term_length} does not match file length {len}",
                    path.display()
                ),
            ));
        }
        let logs = Self::wrap(file, term_length)?;
        if logs.meta.get_u8(LOG_SPARSE_OFFSET) == 0 {
            // Storage is reserved already; mapping it now keeps page faults off the hot path.
            logs.file.pre_touch();
        }
        Ok(logs)
    }

    fn wrap(file: MappedFile, term_length: usize) -> io::Result<LogBuffers> {
        let b = file.buffer();
        let terms = [
            b.view(0, term_length),
            b.view(term_length, term_length),
            b.view(2 * term_length, term_length),
        ];
        let meta = b.view(PARTITION_COUNT * term_length, LOG_META_DATA_LENGTH);
        Ok(LogBuffers {
            file,
            terms,
            meta,
            term_length,
        })
    }

    fn initialise_tails(&self, initial_term_id: i32, active_term_id: i32, term_offset: i32) {
        let term_count = active_term_id.wrapping_sub(initial_term_id);
        let active_index = index_by_term_count(term_count as i64);
        for i in 0..PARTITION_COUNT {
            let raw = if i == active_index {
                pack_tail(active_term_id, term_offset)
            } else {
                // The partitions after the active one expect "three terms ago" ids.
                let distance = (i + PARTITION_COUNT - active_index) % PARTITION_COUNT;
                pack_tail(
                    active_term_id
                        .wrapping_add(distance as i32)
                        .wrapping_sub(PARTITION_COUNT as i32),
                    0,
                )
            };
            self.meta.put_i64(TERM_TAIL_COUNTERS_OFFSET + 8 * i, raw);
        }
        self.meta
            .put_i32_ordered(LOG_ACTIVE_TERM_COUNT_OFFSET, term_count);
    }

    /// Term partition `i`.
    #[inline]
    pub fn term(&self, index: usize) -> AtomicBuffer {
        self.terms[index]
    }

    /// All three terms.
    #[inline]
    pub fn terms(&self) -> [AtomicBuffer; PARTITION_COUNT] {
        self.terms
    }

    /// The metadata section.
    #[inline]
    pub fn meta(&self) -> AtomicBuffer {
        self.meta
    }

    /// Term length.
    #[inline]
    pub fn term_length(&self) -> usize {
        self.term_length
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Bytes of the mapped file (terms and metadata).
    pub fn mapped_length(&self) -> usize {
        self.file.len()
    }

    /// Initial term id from the metadata.
    pub fn initial_term_id(&self) -> i32 {
        self.meta.get_i32(LOG_INITIAL_TERM_ID_OFFSET)
    }

    /// MTU from the metadata.
    pub fn mtu(&self) -> usize {
        self.meta.get_i32(LOG_MTU_LENGTH_OFFSET) as usize
    }

    /// In a sparse log, makes the page at `position` exist: a reader looks
    /// there before anything is written (see [`populator`]).
    pub fn populate_page_at(&self, position: i64) -> io::Result<()> {
        if self.meta.get_u8(LOG_SPARSE_OFFSET) == 0 {
            return Ok(());
        }
        populator::populate_positions(self, position, position + 1, self.page_size())
    }

    /// The page size the log was made with (at least the system's 4 KiB):
    /// what its pages are taken in.
    pub fn page_size(&self) -> usize {
        (self.meta.get_i32(LOG_PAGE_SIZE_OFFSET) as usize).max(4096)
    }

    /// The default frame header stamped by publications.
    pub fn default_header(&self) -> [u8; frame::DATA_HEADER_LENGTH] {
        let mut h = [0u8; frame::DATA_HEADER_LENGTH];
        self.meta.get_bytes(LOG_DEFAULT_FRAME_HEADER_OFFSET, &mut h);
        h
    }
}

/// Operations on a log's metadata section.
pub mod meta {
    use super::*;

    /// Load-acquire of partition `index`'s raw tail.
    #[inline]
    pub fn raw_tail_volatile(meta: &AtomicBuffer, index: usize) -> i64 {
        meta.get_i64_volatile(TERM_TAIL_COUNTERS_OFFSET + 8 * index)
    }

    /// Load-acquire of the active term count.
    #[inline]
    pub fn active_term_count(meta: &AtomicBuffer) -> i32 {
        meta.get_i32_volatile(LOG_ACTIVE_TERM_COUNT_OFFSET)
    }

    /// Producer position: the position of the active partition's tail.
    pub fn producer_position(meta: &AtomicBuffer, term_length: usize, initial_term_id: i32) -> i64 {
        let count = active_term_count(meta);
        let raw = raw_tail_volatile(meta, index_by_term_count(count as i64));
        compute_position(
            term_id(raw),
            term_offset(raw, term_length as i64),
            position_bits_to_shift(term_length),
            initial_term_id,
        )
    }

    /// Moves the log on to the next term after `term_count`/`term_id` filled up.
    ///
    /// The next partition's tail is set from its stale value (three terms ago)
    /// to `(next id, 0)` by CAS, so only one of several racing writers wins;
    /// then the active term count moves on. Returns true if this call moved it.
    pub fn rotate_log(meta: &AtomicBuffer, term_count: i32, current_term_id: i32) -> bool {
        let next_term_id = current_term_id.wrapping_add(1);
        let next_count = term_count.wrapping_add(1);
        let next_index = index_by_term_count(next_count as i64);
        let expected = next_term_id.wrapping_sub(PARTITION_COUNT as i32);
        let offset = TERM_TAIL_COUNTERS_OFFSET + 8 * next_index;
        loop {
            let raw = meta.get_i64_volatile(offset);
            if term_id(raw) != expected {
                break;
            }
            if meta.compare_and_set_i64(offset, raw, pack_tail(next_term_id, 0)) {
                break;
            }
        }
        meta.compare_and_set_i32(LOG_ACTIVE_TERM_COUNT_OFFSET, term_count, next_count)
    }

    /// End-of-stream position.
    pub fn end_of_stream_position(meta: &AtomicBuffer) -> i64 {
        meta.get_i64_volatile(LOG_END_OF_STREAM_POSITION_OFFSET)
    }

    /// Whether the driver marked the log connected.
    pub fn is_connected(meta: &AtomicBuffer) -> bool {
        meta.get_i32_volatile(LOG_IS_CONNECTED_OFFSET) == 1
    }

    /// Driver side: marks the log connected or not.
    pub fn set_connected(meta: &AtomicBuffer, connected: bool) {
        meta.put_i32_ordered(LOG_IS_CONNECTED_OFFSET, connected as i32)
    }
}

/// Zeroes a term range `[position, target)` behind all readers, one term at a
/// time, so the partition can be written again. Returns the new clean position.
///
/// The first 8 bytes of the range are zeroed last with release ordering, so a
/// reader never sees a frame length over half-cleaned bytes.
pub fn clean_to(logs: &LogBuffers, clean_position: i64, target: i64) -> i64 {
    if target <= clean_position {
        return clean_position;
    }
    let term_length = logs.term_length() as i64;
    let bits = position_bits_to_shift(logs.term_length());
    let index = index_by_position(clean_position, bits);
    let offset = (clean_position & (term_length - 1)) as usize;
    let length = ((target - clean_position) as usize).min(term_length as usize - offset);
    let term = logs.term(index);
    if length > 8 {
        term.set_memory(offset + 8, length - 8, 0);
    }
    term.put_i64_ordered(offset, 0);
    clean_position + length as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn temp_log(
        term_length: usize,
        initial_term_id: i32,
    ) -> (tempdir::TempDir, LogBuffers) {
        let dir = tempdir::TempDir::new();
        let p = LogParams {
            correlation_id: 1,
            term_length,
            page_size: 4096,
            mtu: 1408,
            initial_term_id,
            active_term_id: initial_term_id,
            term_offset: 0,
            session_id: 7,
            stream_id: 10,
            log_type: LOG_TYPE_CONCURRENT,
            publication_window: (term_length / 2) as i32,
            linger_ns: 0,
            sparse: true,
            signal_eos: true,
            tether: true,
            reliable: true,
            spies_simulate_connection: false,
        };
        let logs = LogBuffers::create(&dir.path().join("1.logbuffer"), &p).unwrap();
        (dir, logs)
    }

    /// Minimal temp dir helper (avoids a dev-dependency).
    pub(crate) mod tempdir {
        use std::path::{Path, PathBuf};
        pub struct TempDir(PathBuf);
        impl TempDir {
            pub fn new() -> TempDir {
                use std::sync::atomic::{AtomicU64, Ordering};
                static N: AtomicU64 = AtomicU64::new(0);
                let p = std::env::temp_dir().join(format!(
                    "sulis-test-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::SeqCst)
                ));
                std::fs::create_dir_all(&p).unwrap();
                TempDir(p)
            }
            pub fn path(&self) -> &Path {
                &self.0
            }
        }
        impl Drop for TempDir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn should_initialise_metadata_and_tails() {
        let (_d, logs) = temp_log(65536, 100);
        let m = logs.meta();
        assert_eq!(m.get_i32(LOG_TERM_LENGTH_OFFSET), 65536);
        assert_eq!(m.get_i32(LOG_INITIAL_TERM_ID_OFFSET), 100);
        assert_eq!(meta::raw_tail_volatile(&m, 0), pack_tail(100, 0));
        assert_eq!(term_id(meta::raw_tail_volatile(&m, 1)), 100 + 1 - 3);
        assert_eq!(term_id(meta::raw_tail_volatile(&m, 2)), 100 + 2 - 3);
        assert_eq!(meta::end_of_stream_position(&m), i64::MAX);
        assert_eq!(logs.default_header()[5], 0xC0);
        let again = LogBuffers::map_existing(logs.path()).unwrap();
        assert_eq!(again.term_length(), 65536);
        assert_eq!(again.initial_term_id(), 100);
    }

    #[test]
    fn should_rotate_once_even_when_racing() {
        let (_d, logs) = temp_log(65536, 5);
        let m = logs.meta();
        assert!(meta::rotate_log(&m, 0, 5));
        assert!(
            !meta::rotate_log(&m, 0, 5),
            "second rotation of the same term must lose"
        );
        assert_eq!(meta::active_term_count(&m), 1);
        assert_eq!(meta::raw_tail_volatile(&m, 1), pack_tail(6, 0));
    }

    #[test]
    fn should_clean_one_term_at_a_time() {
        let (_d, logs) = temp_log(65536, 0);
        logs.term(0).set_memory(0, 65536, 0xAB);
        logs.term(1).set_memory(0, 65536, 0xAB);
        let p = clean_to(&logs, 1024, 65536 + 4096);
        assert_eq!(p, 65536);
        assert_eq!(logs.term(0).get_u8(1023), 0xAB);
        assert!(logs
            .term(0)
            .slice(1024, 65536 - 1024)
            .iter()
            .all(|&b| b == 0));
        let p = clean_to(&logs, p, 65536 + 4096);
        assert_eq!(p, 65536 + 4096);
        assert!(logs.term(1).slice(0, 4096).iter().all(|&b| b == 0));
        assert_eq!(logs.term(1).get_u8(4096), 0xAB);
    }
}
