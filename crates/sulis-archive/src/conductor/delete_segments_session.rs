//! Segment files deleted off the duty cycle, one file per cycle (Aeron's
//! `DeleteSegmentsSession`). A file to delete is first renamed to
//! `<name>.del` (`<recordingId>-<base>.rec.del`), at once and in the order
//! the catalog was changed in: from then on nothing reads it as a segment,
//! and an archive that restarts before it is gone deletes it then
//! ([`delete_leftovers`]). The request's Signal DELETE goes out once every
//! file is gone.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// What a file queued for deletion is named.
pub const DELETE_SUFFIX: &str = ".del";

/// The deletions one request asked for.
pub(super) struct DeleteSegmentsSession {
    /// The control session and request to signal when done.
    pub control_session_id: i64,
    pub correlation_id: i64,
    pub recording_id: i64,
    files: VecDeque<PathBuf>,
}

impl DeleteSegmentsSession {
    /// Queues `files` (renamed to `.del` now; one that is not there is
    /// skipped); returns the session and the files that could not be
    /// renamed, with why.
    pub fn new(
        control_session_id: i64,
        correlation_id: i64,
        recording_id: i64,
        files: Vec<PathBuf>,
    ) -> (DeleteSegmentsSession, Vec<String>) {
        let mut queued = VecDeque::new();
        let mut errors = Vec::new();
        for f in files {
            let mut to = f.clone().into_os_string();
            to.push(DELETE_SUFFIX);
            match std::fs::rename(&f, &to) {
                Ok(()) => queued.push_back(PathBuf::from(to)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => errors.push(format!(
                    "recording {recording_id}: cannot queue {} for deletion: {e}",
                    f.display()
                )),
            }
        }
        let session = DeleteSegmentsSession {
            control_session_id,
            correlation_id,
            recording_id,
            files: queued,
        };
        (session, errors)
    }

    /// How many files it deletes.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Deletes the next file; an error names it.
    pub fn do_work(&mut self) -> Result<usize, String> {
        let Some(f) = self.files.pop_front() else {
            return Ok(0);
        };
        match std::fs::remove_file(&f) {
            Ok(()) => Ok(1),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(1),
            Err(e) => Err(format!("cannot delete {}: {e}", f.display())),
        }
    }

    /// Every file is gone.
    pub fn is_done(&self) -> bool {
        self.files.is_empty()
    }
}

/// Deletes the `.del` files an earlier run queued and did not get to;
/// returns what could not be deleted.
pub(super) fn delete_leftovers(dir: &Path) -> Vec<String> {
    let mut errors = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let queued = name.strip_suffix(DELETE_SUFFIX).is_some_and(|segment| {
            sulis_protocol::archive::segment::parse_segment_file_name(segment).is_some()
        });
        if queued {
            if let Err(err) = std::fs::remove_file(e.path()) {
                errors.push(format!("cannot delete {}: {err}", e.path().display()));
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_rename_at_once_delete_one_file_per_cycle_and_leave_leftovers_to_a_restart() {
        let dir = std::env::temp_dir().join(format!("sulis-delete-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let files: Vec<PathBuf> = [0, 65536, 131072]
            .iter()
            .map(|b| dir.join(format!("7-{b}.rec")))
            .collect();
        for f in &files {
            std::fs::write(f, b"x").unwrap();
        }
        let mut missing = files.clone();
        missing.push(dir.join("7-196608.rec"));
        let mut doomed = missing.clone();
        // One that cannot be renamed: a directory is in the way.
        doomed.push(dir.join("7-262144.rec"));
        std::fs::write(dir.join("7-262144.rec"), b"x").unwrap();
        std::fs::create_dir_all(dir.join("7-262144.rec.del/x")).unwrap();
        let (mut s, errors) = DeleteSegmentsSession::new(1, 2, 7, doomed);
        assert_eq!(
            errors.len(),
            1,
            "a file that is not there is skipped: {errors:?}"
        );
        assert!(errors[0].contains("7-262144.rec"));
        std::fs::remove_dir_all(dir.join("7-262144.rec.del")).unwrap();
        std::fs::remove_file(dir.join("7-262144.rec")).unwrap();
        assert_eq!(s.len(), 3);
        assert!(files.iter().all(|f| !f.exists()), "renamed at once");
        assert_eq!(s.do_work(), Ok(1));
        assert!(!dir.join("7-0.rec.del").exists() && dir.join("7-65536.rec.del").exists());
        assert!(!s.is_done());
        // A restart now: the rest goes; other files stay.
        std::fs::write(dir.join("notes.del"), b"keep").unwrap();
        assert!(delete_leftovers(&dir).is_empty());
        let left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec!["notes.del".to_string()]);
        assert_eq!(s.do_work(), Ok(1), "already gone counts as deleted");
        assert_eq!(s.do_work(), Ok(1));
        assert!(s.is_done());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
