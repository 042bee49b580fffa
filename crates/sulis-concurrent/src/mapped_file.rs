//! Memory-mapped files shared between the driver and its clients.
//!
//! Files are created owner-only (mode 0600) because anyone who can write a log
//! buffer or the command-and-control file can corrupt every stream behind it.

use crate::AtomicBuffer;
use memmap2::{MmapMut, MmapOptions};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A file mapped read-write and shared with other processes.
pub struct MappedFile {
    mmap: MmapMut,
    path: PathBuf,
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MappedFile({}, {} bytes)",
            self.path.display(),
            self.mmap.len()
        )
    }
}

fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

/// Bytes an unprivileged writer may still take on `file`'s file system.
fn usable_space(file: &File) -> io::Result<u64> {
    use std::os::unix::io::AsRawFd;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: fstatvfs fills the struct on success.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: initialised by the successful call.
    let st = unsafe { st.assume_init() };
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

impl MappedFile {
    /// Creates `path` (which must not exist) with `length` bytes and maps it.
    ///
    /// Unless `sparse`, the storage is reserved up front with `posix_fallocate`, so
    /// a full `/dev/shm` is reported here as an error naming the file rather than
    /// later as a SIGBUS in whichever process first touches the missing page.
    /// A sparse file is refused when its file system has less room than its
    /// length; its writers take its pages as they go (see
    /// [`crate::logbuffer::populator`]).
    pub fn create(path: &Path, length: usize, sparse: bool) -> io::Result<MappedFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| with_path(e, "cannot create", path))?;
        file.set_len(length as u64)
            .map_err(|e| with_path(e, "cannot size", path))?;
        if sparse {
            // As Aeron's storage check: a sparse file takes its pages later,
            // but a file system without room for all of them is refused now.
            let usable = usable_space(&file).map_err(|e| with_path(e, "cannot stat", path))?;
            if usable < length as u64 {
                let _ = std::fs::remove_file(path);
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!(
                        "insufficient storage for {} ({length} bytes): {usable} bytes usable",
                        path.display()
                    ),
                ));
            }
        } else {
            use std::os::unix::io::AsRawFd;
            // SAFETY: plain syscall on an fd we own.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, length as libc::off_t) };
            if rc != 0 {
                let _ = std::fs::remove_file(path);
                let e = io::Error::from_raw_os_error(rc);
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "insufficient storage for {} ({length} bytes): {e}",
                        path.display()
                    ),
                ));
            }
        }
        Self::map(file, path)
    }

    /// Maps an existing file read-write.
    pub fn open(path: &Path) -> io::Result<MappedFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| with_path(e, "cannot open", path))?;
        Self::map(file, path)
    }

    fn map(file: File, path: &Path) -> io::Result<MappedFile> {
        // SAFETY: the mapping is shared; concurrent modification by other
        // processes is the point, and all access goes through AtomicBuffer.
        let mmap = unsafe { MmapOptions::new().map_mut(&file) }
            .map_err(|e| with_path(e, "cannot map", path))?;
        Ok(MappedFile {
            mmap,
            path: path.to_path_buf(),
        })
    }

    /// The whole mapping as a buffer; valid while `self` lives.
    pub fn buffer(&self) -> AtomicBuffer {
        // SAFETY: the mapping lives as long as self; callers keep self alive.
        unsafe { AtomicBuffer::new(self.mmap.as_ptr() as *mut u8, self.mmap.len()) }
    }

    /// Maps every page into this process now (`MADV_POPULATE_WRITE`), so the
    /// hot path never takes a page fault. Best effort: older kernels ignore it.
    pub fn pre_touch(&self) {
        let _ = self.mmap.advise(memmap2::Advice::PopulateWrite);
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.mmap.len()
    }

    /// True if the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.mmap.is_empty()
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Syncs directory `dir` (`fsync` of the directory): the names made in it,
/// and their removal, are on disk. A new file's own `fsync` does not carry
/// its name.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Reads a file that holds secrets (keys, credentials), its text and its
/// metadata from one open: refused, naming `what`, the file and the fix,
/// when group or others may read it.
pub fn read_private_file(path: &Path, what: &str) -> Result<(String, std::fs::Metadata), String> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let name = path.display();
    let mut file = File::open(path).map_err(|e| format!("{what} {name}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("{what} {name}: {e}"))?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{what} {name} can be read by others (mode {:o}): chmod 600 {name}",
            meta.mode() & 0o777
        ));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| format!("{what} {name}: {e}"))?;
    Ok((text, meta))
}

/// Replaces the file at `path` with `bytes` whole: written and synced under
/// a hidden temporary name beside it (`.NAME.tmp`), renamed over it, and the
/// directory synced. A crash leaves the old file or the new one, never a
/// part of either.
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    sync_dir(dir)
}
