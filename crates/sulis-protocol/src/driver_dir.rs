//! The driver directory: where it is by default and what it holds. Drivers
//! create these files, clients map them, tools read them; this is the one
//! place that names them.

use std::path::{Path, PathBuf};

/// Environment variable naming the driver directory.
pub const DIR_ENV: &str = "SULIS_DIR";
/// Subdirectory of publication log buffers (IPC and network publications).
pub const PUBLICATIONS_DIR: &str = "publications";
/// Subdirectory of image log buffers (streams received from the network).
pub const IMAGES_DIR: &str = "images";

/// The default driver directory: `$SULIS_DIR` if set (and not empty), else
/// `sulis-$USER` (falling back to `$LOGNAME`, then the numeric uid) in
/// `/dev/shm` when it exists, else in the system's temporary directory.
pub fn default_dir() -> PathBuf {
    match std::env::var(DIR_ENV) {
        Ok(d) if !d.is_empty() => PathBuf::from(d),
        _ => default_dir_ignoring_env(),
    }
}

/// [`default_dir`] without looking at `$SULIS_DIR`.
pub fn default_dir_ignoring_env() -> PathBuf {
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| std::env::var("LOGNAME").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(current_uid);
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("sulis-{user}"))
}

fn current_uid() -> String {
    // The owner of /proc/self is this process' real uid; no libc needed.
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::metadata("/proc/self") {
            return m.uid().to_string();
        }
    }
    "unknown".to_string()
}

/// The log buffer file of a publication (`correlation_id` of its first add).
pub fn publication_log_file(dir: &Path, correlation_id: i64) -> PathBuf {
    dir.join(PUBLICATIONS_DIR)
        .join(format!("{correlation_id}.logbuffer"))
}

/// The log buffer file of an image (its correlation id).
pub fn image_log_file(dir: &Path, correlation_id: i64) -> PathBuf {
    dir.join(IMAGES_DIR)
        .join(format!("{correlation_id}.logbuffer"))
}
