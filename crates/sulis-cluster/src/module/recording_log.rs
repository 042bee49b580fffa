//! A member's `recording.log` file: the leadership terms of its log and the
//! snapshots taken of it (the layout is `sulis_protocol::cluster::recording_log`,
//! Aeron's, so `ClusterTool` reads ours and we read Aeron's).
//!
//! Every change is written in place and made durable (`fdatasync`) before
//! the call returns, so whatever acts on it (a vote, an acknowledged append)
//! finds it there after a crash. An append a crash cut short leaves a torn
//! entry at the end: opening drops it (nothing acted on it) and says so. A
//! damaged entry anywhere else is an error naming the file and the byte; the
//! log is never read as if it ended before the damage.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use sulis_protocol::cluster::messages::{NULL_POSITION, NULL_VALUE};
use sulis_protocol::cluster::recording_log::{
    decode, Entry, Located, ENTRY_TYPE_INVALID_FLAG, ENTRY_TYPE_OFFSET, ENTRY_TYPE_SNAPSHOT,
    ENTRY_TYPE_TERM, LOG_POSITION_OFFSET, SERVICE_ID_CONSENSUS_MODULE,
};

/// The file's name in the cluster directory.
pub const FILE_NAME: &str = "recording.log";

/// A recording log open for reading and changing.
#[derive(Debug)]
pub struct RecordingLog {
    path: PathBuf,
    file: File,
    entries: Vec<Located>,
    end: u64,
    torn_tail_dropped: usize,
}

impl RecordingLog {
    /// Opens (creating if absent) `dir/recording.log`. `Err` names the file
    /// and, for a damaged entry, its byte offset.
    pub fn open(dir: &Path) -> Result<RecordingLog, String> {
        let path = dir.join(FILE_NAME);
        let what = |e: std::io::Error| format!("{}: {e}", path.display());
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(what)?;
        if !existed {
            // The name is durable before any entry is: its syncs (fdatasync) do not carry the
            // directory, and a power cut would otherwise lose the whole log of terms.
            sulis_concurrent::mapped_file::sync_dir(dir).map_err(what)?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(what)?;
        let decoded = decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let end = (bytes.len() - decoded.torn_tail) as u64;
        if decoded.torn_tail > 0 {
            // An append a crash cut short: never made durable, never acted on.
            file.set_len(end).map_err(what)?;
            file.sync_data().map_err(what)?;
        }
        Ok(RecordingLog {
            path,
            file,
            entries: decoded.entries,
            end,
            torn_tail_dropped: decoded.torn_tail,
        })
    }

    /// Reads `dir/recording.log` for a tool, changing nothing: a torn last
    /// entry is left in place (counted in [`Self::torn_tail_dropped`]) and
    /// the log cannot be appended to. `Err` if there is no file.
    pub fn read(dir: &Path) -> Result<RecordingLog, String> {
        let path = dir.join(FILE_NAME);
        let what = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut file = File::open(&path).map_err(what)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(what)?;
        let decoded = decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(RecordingLog {
            path,
            file,
            entries: decoded.entries,
            // Opened read-only: an append fails before anything is written.
            end: (bytes.len() - decoded.torn_tail) as u64,
            torn_tail_dropped: decoded.torn_tail,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of a torn last entry dropped on opening (0: none).
    pub fn torn_tail_dropped(&self) -> usize {
        self.torn_tail_dropped
    }

    /// Every entry, invalidated ones too, in the order appended.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().map(|l| &l.entry)
    }

    /// The valid term entry of `leadership_term_id`.
    pub fn find_term(&self, leadership_term_id: i64) -> Option<&Entry> {
        self.valid()
            .filter(|e| e.entry_type == ENTRY_TYPE_TERM)
            .find(|e| e.leadership_term_id == leadership_term_id)
    }

    /// The valid term entry with the highest term id.
    pub fn last_term(&self) -> Option<&Entry> {
        self.valid()
            .filter(|e| e.entry_type == ENTRY_TYPE_TERM)
            .max_by_key(|e| e.leadership_term_id)
    }

    /// The latest snapshot the member can start from ([`latest_snapshot`]
    /// of its valid entries).
    pub fn latest_snapshot(&self, service_count: i32) -> Option<Vec<&Entry>> {
        latest_snapshot(self.valid(), service_count)
    }

    /// Appends an open term entry. `Err` if a valid entry of that term is
    /// there already or the term is not after the last one.
    pub fn append_term(
        &mut self,
        recording_id: i64,
        leadership_term_id: i64,
        term_base_log_position: i64,
        timestamp: i64,
    ) -> Result<(), String> {
        if let Some(last) = self.last_term() {
            if leadership_term_id <= last.leadership_term_id {
                return Err(format!(
                    "{}: term {leadership_term_id} appended after term {} (terms only go up)",
                    self.path.display(),
                    last.leadership_term_id
                ));
            }
            if term_base_log_position < last.term_base_log_position {
                return Err(format!(
                    "{}: term {leadership_term_id} based at {term_base_log_position}, before term {}'s base {}",
                    self.path.display(),
                    last.leadership_term_id,
                    last.term_base_log_position
                ));
            }
        }
        self.append(Entry::term(
            recording_id,
            leadership_term_id,
            term_base_log_position,
            timestamp,
        ))
    }

    /// Invalidates the valid term entries after `leadership_term_id` (terms
    /// an election recorded whose entries are gone or never came).
    pub fn invalidate_terms_after(&mut self, leadership_term_id: i64) -> Result<(), String> {
        let later: Vec<usize> = self
            .entries()
            .enumerate()
            .filter(|(_, e)| {
                e.is_valid
                    && e.entry_type == ENTRY_TYPE_TERM
                    && e.leadership_term_id > leadership_term_id
            })
            .map(|(i, _)| i)
            .collect();
        for i in later {
            self.invalidate(i)?;
        }
        Ok(())
    }

    /// What an election learnt of term `leadership_term_id` of this member's
    /// log (`NULL_VALUE`/`NULL_POSITION` for what it does not say):
    /// - a term not recorded yet is appended at `term_base_log_position`,
    ///   the terms recorded after it dropped and the open term before it
    ///   ended where it begins;
    /// - a recorded term gets its end, `log_position`, if given;
    /// - a recorded term given no base is this member's last term going on
    ///   (the rest of it copied from the leader): the terms recorded after it
    ///   hold nothing of this log, so they go. Left there, an empty later term
    ///   would claim to begin inside this term's entries, and a leader would
    ///   tell members holding them to cut them.
    pub fn update_term(
        &mut self,
        recording_id: i64,
        leadership_term_id: i64,
        term_base_log_position: i64,
        log_position: i64,
        timestamp: i64,
    ) -> Result<(), String> {
        if self.find_term(leadership_term_id).is_some() {
            if term_base_log_position == NULL_VALUE {
                self.invalidate_terms_after(leadership_term_id)?;
            }
            if log_position != NULL_POSITION {
                self.commit_log_position(leadership_term_id, log_position)?;
            }
            return Ok(());
        }
        self.invalidate_terms_after(leadership_term_id)?;
        if let Some(last) = self.last_term().cloned() {
            if last.log_position == NULL_POSITION {
                self.commit_log_position(last.leadership_term_id, term_base_log_position)?;
            }
        }
        self.append_term(
            recording_id,
            leadership_term_id,
            term_base_log_position,
            timestamp,
        )
    }

    /// Appends a snapshot entry of `service_id` (−1: the consensus module).
    pub fn append_snapshot(
        &mut self,
        recording_id: i64,
        leadership_term_id: i64,
        term_base_log_position: i64,
        log_position: i64,
        timestamp: i64,
        service_id: i32,
    ) -> Result<(), String> {
        self.append(Entry::snapshot(
            recording_id,
            leadership_term_id,
            term_base_log_position,
            log_position,
            timestamp,
            service_id,
        ))
    }

    /// Records where term `leadership_term_id` ends (its valid entry).
    pub fn commit_log_position(
        &mut self,
        leadership_term_id: i64,
        log_position: i64,
    ) -> Result<(), String> {
        let i = self
            .entries
            .iter()
            .position(|l| {
                l.entry.is_valid
                    && l.entry.entry_type == ENTRY_TYPE_TERM
                    && l.entry.leadership_term_id == leadership_term_id
            })
            .ok_or_else(|| {
                format!(
                    "{}: no term {leadership_term_id} to end at {log_position}",
                    self.path.display()
                )
            })?;
        let at = self.entries[i].offset as u64 + LOG_POSITION_OFFSET as u64;
        self.write_durably(&log_position.to_le_bytes(), at)?;
        self.entries[i].entry.log_position = log_position;
        Ok(())
    }

    /// Invalidates entry `index` (of [`Self::entries`]): a term cut from the
    /// log, a snapshot not to start from.
    pub fn invalidate(&mut self, index: usize) -> Result<(), String> {
        let located = self
            .entries
            .get(index)
            .ok_or_else(|| format!("{}: no entry {index} to invalidate", self.path.display()))?;
        let word = located.entry.entry_type | ENTRY_TYPE_INVALID_FLAG;
        let at = located.offset as u64 + ENTRY_TYPE_OFFSET as u64;
        self.write_durably(&word.to_le_bytes(), at)?;
        self.entries[index].entry.is_valid = false;
        Ok(())
    }

    fn valid(&self) -> impl Iterator<Item = &Entry> {
        self.entries().filter(|e| e.is_valid)
    }

    fn append(&mut self, entry: Entry) -> Result<(), String> {
        let bytes = entry
            .encode()
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let at = self.end;
        self.write_durably(&bytes, at)?;
        self.end += bytes.len() as u64;
        self.entries.push(Located {
            offset: at as usize,
            entry,
        });
        Ok(())
    }

    fn write_durably(&mut self, bytes: &[u8], at: u64) -> Result<(), String> {
        let what = |e: std::io::Error| {
            format!(
                "{}: writing {} bytes at {at}: {e}",
                self.path.display(),
                bytes.len()
            )
        };
        self.file.write_all_at(bytes, at).map_err(what)?;
        self.file.sync_data().map_err(what)
    }
}

/// The latest snapshot set of `entries` a member can start from: the
/// consensus module's and one of each of services `0..service_count`, all at
/// the same term and log position (a set a crash left incomplete is passed
/// over for an earlier whole one). Ordered consensus module first.
pub fn latest_snapshot<'a>(
    entries: impl Iterator<Item = &'a Entry>,
    service_count: i32,
) -> Option<Vec<&'a Entry>> {
    let mut snapshots: Vec<&Entry> = entries
        .filter(|e| e.entry_type == ENTRY_TYPE_SNAPSHOT)
        .collect();
    snapshots.sort_by_key(|e| std::cmp::Reverse((e.log_position, e.leadership_term_id)));
    for cm in snapshots
        .iter()
        .filter(|e| e.service_id == SERVICE_ID_CONSENSUS_MODULE)
    {
        let mut set = vec![*cm];
        for service in 0..service_count {
            match snapshots.iter().find(|e| {
                e.service_id == service
                    && e.log_position == cm.log_position
                    && e.leadership_term_id == cm.leadership_term_id
            }) {
                Some(e) => set.push(*e),
                None => break,
            }
        }
        if set.len() == service_count as usize + 1 {
            return Some(set);
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh directory, removed when the test is done with it.
    pub(crate) struct TempDir(PathBuf);

    impl std::ops::Deref for TempDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) fn dir(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("sulis-reclog-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    #[test]
    fn terms_and_snapshots_survive_a_reopen_with_their_ends_and_invalidations() {
        let d = dir("reopen");
        let mut log = RecordingLog::open(&d).unwrap();
        log.append_term(7, 0, 0, 100).unwrap();
        log.commit_log_position(0, 4096).unwrap();
        log.append_term(7, 1, 4096, 200).unwrap();
        log.append_snapshot(9, 1, 4096, 5000, 250, -1).unwrap();
        log.append_snapshot(10, 1, 4096, 5000, 250, 0).unwrap();
        log.append_term(7, 2, 6000, 300).unwrap();
        log.invalidate(4).unwrap();
        drop(log);

        let log = RecordingLog::open(&d).unwrap();
        assert_eq!(log.torn_tail_dropped(), 0);
        assert_eq!(log.entries().count(), 5);
        assert_eq!(log.find_term(0).unwrap().log_position, 4096);
        assert_eq!(log.find_term(1).unwrap().log_position, -1, "open");
        assert!(log.find_term(2).is_none(), "invalidated");
        assert_eq!(log.last_term().unwrap().leadership_term_id, 1);
        let set = log.latest_snapshot(1).unwrap();
        assert_eq!(
            set.iter()
                .map(|e| (e.service_id, e.recording_id))
                .collect::<Vec<_>>(),
            vec![(-1, 9), (0, 10)]
        );
    }

    #[test]
    fn a_last_term_copied_on_past_a_later_empty_term_drops_that_term() {
        // A five-member fault run: member 4 led term 29 at its append position 1206528 and appended
        // nothing; then, following term 31, it copied the rest of its last term 27 (to 1207616) from
        // the leader. Term 29 stayed recorded at 1206528, inside term 27's entries, and as leader of a
        // later term it told members holding those entries to cut them at 1206528.
        let d = dir("copied-on");
        let mut log = RecordingLog::open(&d).unwrap();
        log.update_term(0, 27, 1_121_728, -1, 1).unwrap();
        log.update_term(0, 29, 1_206_528, -1, 2).unwrap();
        assert_eq!(
            log.find_term(27).unwrap().log_position,
            1_206_528,
            "closed where 29 began"
        );
        log.update_term(0, 27, -1, -1, 3).unwrap(); // copying the rest of term 27
        log.update_term(0, 27, -1, 1_207_616, 4).unwrap(); // copied to 1207616
        assert!(log.find_term(29).is_none(), "the empty later term is gone");
        assert_eq!(log.find_term(27).unwrap().log_position, 1_207_616);
        assert_eq!(log.last_term().unwrap().leadership_term_id, 27);
        log.update_term(0, 32, 1_207_616, -1, 5).unwrap();
        assert_eq!(log.find_term(32).unwrap().term_base_log_position, 1_207_616);
        // A recorded term given its base (the next term copied) keeps the terms after it.
        log.update_term(0, 27, 1_121_728, 1_207_616, 6).unwrap();
        assert!(log.find_term(32).is_some());
    }

    #[test]
    fn an_incomplete_snapshot_set_is_passed_over_for_an_earlier_whole_one() {
        let d = dir("snapshots");
        let mut log = RecordingLog::open(&d).unwrap();
        log.append_term(1, 0, 0, 0).unwrap();
        for (rec, service) in [(10, -1), (11, 0), (12, 1)] {
            log.append_snapshot(rec, 0, 0, 1000, 5, service).unwrap();
        }
        // A later set a crash cut short: service 1's snapshot is missing.
        for (rec, service) in [(20, -1), (21, 0)] {
            log.append_snapshot(rec, 0, 0, 2000, 6, service).unwrap();
        }
        let set = log.latest_snapshot(2).unwrap();
        assert!(set.iter().all(|e| e.log_position == 1000), "{set:?}");
        assert_eq!(log.latest_snapshot(1).unwrap()[0].recording_id, 20);
        assert!(RecordingLog::open(&dir("none"))
            .unwrap()
            .latest_snapshot(0)
            .is_none());
    }

    #[test]
    fn terms_only_go_up_and_a_missing_term_cannot_be_ended() {
        let d = dir("order");
        let mut log = RecordingLog::open(&d).unwrap();
        log.append_term(1, 3, 100, 0).unwrap();
        let e = log.append_term(1, 3, 100, 0).unwrap_err();
        assert!(
            e.contains("term 3 appended after term 3") && e.contains(FILE_NAME),
            "{e}"
        );
        let e = log.append_term(1, 4, 50, 0).unwrap_err();
        assert!(e.contains("based at 50"), "{e}");
        let e = log.commit_log_position(9, 10).unwrap_err();
        assert!(e.contains("no term 9"), "{e}");
    }

    #[test]
    fn a_torn_last_entry_is_dropped_on_opening_and_the_log_goes_on() {
        let d = dir("torn");
        let mut log = RecordingLog::open(&d).unwrap();
        log.append_term(1, 0, 0, 0).unwrap();
        log.append_term(1, 1, 64, 0).unwrap();
        drop(log);
        // A crash in the middle of the next append: 40 of its 64 bytes.
        let path = d.join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[0x11; 40]);
        std::fs::write(&path, &bytes).unwrap();

        let mut log = RecordingLog::open(&d).unwrap();
        assert_eq!(log.torn_tail_dropped(), 40);
        assert_eq!(log.entries().count(), 2);
        log.append_term(1, 2, 128, 0).unwrap();
        drop(log);
        let log = RecordingLog::open(&d).unwrap();
        assert_eq!(log.last_term().unwrap().leadership_term_id, 2);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * 64);
    }

    #[test]
    fn a_damaged_entry_is_an_error_naming_the_file_and_byte() {
        let d = dir("damaged");
        let mut log = RecordingLog::open(&d).unwrap();
        for term in 0..3 {
            log.append_term(1, term, term * 64, 0).unwrap();
        }
        drop(log);
        let path = d.join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[64 + ENTRY_TYPE_OFFSET] = 0x7f; // the second entry's type word
        std::fs::write(&path, &bytes).unwrap();
        let e = RecordingLog::open(&d).unwrap_err();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("byte 64"),
            "{e}"
        );
    }
}
