//! Crash points for fault tests: with `SULIS_ARCHIVE_CRASH_AT=<point>[,<point>...]`
//! in its environment the archive process aborts (no clean-up, as a
//! SIGKILL or a power cut would leave it) when it reaches one of the named
//! points. They sit between the steps of a change that touches the catalog
//! and the segment files, so a test can show that a crash between the two
//! loses nothing and that the next start finishes the change. Without the
//! variable a crash point costs one look at a cached empty list.

use std::sync::OnceLock;

/// The archive's crash points, by name.
pub mod points {
    /// A truncate: the catalog has the new stop position; no file is changed yet.
    pub const TRUNCATE_AFTER_CATALOG: &str = "truncate-after-catalog";
    /// A purge: the catalog entry is DELETED; no file is deleted yet.
    pub const PURGE_AFTER_CATALOG: &str = "purge-after-catalog";
}

fn armed() -> &'static [String] {
    static ARMED: OnceLock<Vec<String>> = OnceLock::new();
    ARMED.get_or_init(|| {
        std::env::var("SULIS_ARCHIVE_CRASH_AT")
            .map(|v| {
                v.split(',')
                    .map(|p| p.trim().to_string())
                    .filter(|p| !p.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Aborts the process if `point` is armed.
pub fn crash_point(point: &str) {
    if armed().iter().any(|p| p == point) {
        eprintln!(
            "sulis archive: crash point '{point}' reached (SULIS_ARCHIVE_CRASH_AT): aborting"
        );
        std::process::abort();
    }
}
