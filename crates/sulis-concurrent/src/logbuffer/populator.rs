//! Pages for a sparse log, taken as the stream is written.
//!
//! A sparse log file holds no memory until its pages are touched, so an idle
//! stream costs its metadata page, as with Aeron. The catch is a full
//! `/dev/shm`: touching a missing page of a tmpfs file there (a write, or even
//! a read) raises SIGBUS, which kills whichever process touched it, driver or
//! client. So every writer of a sparse log asks for its pages *before* it
//! writes them (`MADV_POPULATE_WRITE`, which reports the shortage as an error
//! instead), and keeps one page more than it wrote: a reader waiting at the
//! tail reads the frame length there, and that page must exist too.
//!
//! A [`Populator`] tracks, for one writer, the positions whose pages are known
//! to exist: `[start, end)`. It grows the range in chunks that double with what
//! the stream has written (a page to 4 MiB), so a busy stream makes a handful of
//! calls per term and an idle one takes nothing. Once the range spans three
//! terms every page of the log exists and the populator is done.

use super::LogBuffers;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use sulis_protocol::log_buffer_descriptor::*;

const MAX_CHUNK: i64 = 4 * 1024 * 1024;

/// Set once the kernel says it has no `MADV_POPULATE_WRITE` (before Linux 5.14):
/// pages are then taken on first touch, as Aeron's sparse logs are.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Makes the pages of `len` bytes at `offset` in `buffer` exist, or says why not.
///
/// `buffer` must start on a page of its mapping (terms and the metadata do).
pub fn populate(
    buffer: &crate::AtomicBuffer,
    offset: usize,
    len: usize,
    page: usize,
) -> io::Result<()> {
    if len == 0 || UNSUPPORTED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let from = offset & !(page - 1);
    let to = (offset + len).div_ceil(page) * page;
    let to = to.min(buffer.capacity().div_ceil(page) * page);
    // SAFETY: the range lies inside the buffer's mapping, rounded to its pages;
    // populating changes no contents.
    let rc = unsafe {
        libc::madvise(
            buffer.as_ptr().add(from) as *mut libc::c_void,
            to - from,
            libc::MADV_POPULATE_WRITE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINVAL) {
        UNSUPPORTED.store(true, Ordering::Relaxed);
        return Ok(());
    }
    Err(e)
}

/// One writer's record of which positions of a sparse log have their pages.
#[derive(Debug)]
pub struct Populator {
    start: i64,
    /// Positions below this have their pages; `i64::MAX` once the whole log has.
    end: AtomicI64,
    page: usize,
}

impl Populator {
    /// A populator for a writer that starts at `position`, or `None` when the
    /// log reserved its storage up front (not sparse).
    ///
    /// The page at `position` itself is not taken here: the driver takes it
    /// when a reader may first look there.
    pub fn new(logs: &LogBuffers, position: i64) -> Option<Populator> {
        if logs.meta().get_u8(LOG_SPARSE_OFFSET) == 0 {
            return None;
        }
        Some(Populator {
            start: position,
            end: AtomicI64::new(position),
            page: logs.page_size(),
        })
    }

    /// Positions below this have their pages (`i64::MAX`: all of the log has).
    #[inline(always)]
    pub fn end(&self) -> i64 {
        self.end.load(Ordering::Acquire)
    }

    /// Makes the pages of every position below `to` exist (and a chunk more),
    /// returning the new end.
    pub fn ensure(&self, logs: &LogBuffers, to: i64) -> io::Result<i64> {
        let end = self.end();
        if to <= end {
            return Ok(end);
        }
        let term_length = logs.term_length() as i64;
        let whole = self.start + PARTITION_COUNT as i64 * term_length;
        // From one page: a stream that sends a message now and then (a
        // cluster session's keep-alives) takes a page or two, as with Aeron's
        // sparse logs; 64 KiB up front cost a thousand idle sessions 64 MiB
        // in each writer's mapping.
        let chunk = (end - self.start).clamp(self.page as i64, MAX_CHUNK);
        let target = to.max(end + chunk).min(whole);
        populate_positions(logs, end, target, self.page)?;
        let new_end = if target >= whole { i64::MAX } else { target };
        self.end.fetch_max(new_end, Ordering::AcqRel);
        Ok(self.end())
    }
}

/// Makes the pages of positions `[from, to)` of `logs` exist (at most three terms).
pub fn populate_positions(logs: &LogBuffers, from: i64, to: i64, page: usize) -> io::Result<()> {
    let term_length = logs.term_length() as i64;
    let bits = position_bits_to_shift(logs.term_length());
    let mut p = from;
    while p < to {
        let index = index_by_position(p, bits);
        let offset = p & (term_length - 1);
        let n = (term_length - offset).min(to - p);
        populate(&logs.term(index), offset as usize, n as usize, page).map_err(|e| {
            // EFAULT: the kernel would have raised SIGBUS, the file system is full.
            let why = match e.raw_os_error() {
                Some(libc::EFAULT) => {
                    "its file system (/dev/shm, or wherever the driver's directory is) is full"
                        .to_string()
                }
                _ => e.to_string(),
            };
            io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "no room for the pages of log buffer {} (positions {p}..{}): {why}",
                    logs.path().display(),
                    p + n
                ),
            )
        })?;
        p += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logbuffer::tests::temp_log;

    /// KiB of storage the log's file holds.
    fn allocated_kib(logs: &LogBuffers) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(logs.path()).unwrap().blocks() / 2
    }

    #[test]
    fn takes_pages_in_growing_chunks_and_is_done_after_three_terms() {
        let (_dir, logs) = temp_log(64 * 1024, 5);
        let p = Populator::new(&logs, 0).expect("the test log is sparse");
        assert_eq!(p.end(), 0);
        let page = logs.page_size() as i64;
        let before = allocated_kib(&logs);
        assert_eq!(p.ensure(&logs, 100).unwrap(), page, "one page first");
        let after = allocated_kib(&logs);
        assert_eq!(
            after,
            before + page as u64 / 1024,
            "{before} -> {after} KiB"
        );
        assert_eq!(p.ensure(&logs, 200).unwrap(), page, "already there");
        assert_eq!(
            p.ensure(&logs, page + 1).unwrap(),
            2 * page,
            "then as much as written"
        );
        assert_eq!(p.ensure(&logs, 2 * page + 1).unwrap(), 4 * page);
        assert_eq!(
            p.ensure(&logs, 8 * page + 1).unwrap(),
            8 * page + 1,
            "at least what is asked"
        );
        assert_eq!(p.ensure(&logs, 3 * 64 * 1024).unwrap(), i64::MAX);
        assert_eq!(p.ensure(&logs, i64::MAX - 1).unwrap(), i64::MAX);
    }

    #[test]
    fn a_log_that_reserved_its_storage_needs_no_populator() {
        let (_dir, logs) = temp_log(64 * 1024, 5);
        logs.meta().put_u8(LOG_SPARSE_OFFSET, 0);
        assert!(Populator::new(&logs, 0).is_none());
    }

    #[test]
    fn positions_map_onto_the_partitions_they_wrap_to() {
        let (_dir, logs) = temp_log(64 * 1024, 5);
        let before = allocated_kib(&logs);
        // From the last page of the third term into the first page of the first.
        populate_positions(&logs, 2 * 65536 + 65536 - 4096, 3 * 65536 + 4096, 4096).unwrap();
        assert_eq!(allocated_kib(&logs), before + 8);
    }
}
