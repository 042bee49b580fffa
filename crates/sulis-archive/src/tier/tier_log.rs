//! `tiered.log` in the archive directory: which segments the object store
//! holds, verified, and with what checksum. The archive appends a line, and
//! syncs it, once a segment's upload is verified and before its local file
//! is removed, and another once the store's copy is removed; so after a
//! crash at any point a segment is on the disk, in the store, or both.
//!
//! ```text
//! tiered recording=3 base=1048576 length=1048576 written_ms=1764400000000 crc32c=8f3a... md5=9e10... key=prefix/7/3-1048576.rec
//! removed recording=3 base=1048576
//! ```
//!
//! A line is taken only whole (ending in a newline): a crash mid-append
//! leaves a tail that the next open cuts off.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
pub use sulis_concurrent::mapped_file::sync_dir;

/// The file's name in the archive directory.
pub const TIER_LOG_FILE: &str = "tiered.log";

/// A segment the object store holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TieredSegment {
    /// Its recording.
    pub recording_id: i64,
    /// The stream position its file starts at.
    pub base: i64,
    /// The file's length in bytes.
    pub length: u64,
    /// When its last byte was written (the file's modification time), as
    /// retention ages it.
    pub written_ms: i64,
    /// CRC-32C of the whole file, checked on every fetch.
    pub crc32c: u32,
    /// MD5 of the whole file, hex (what the store verified on upload).
    pub md5: String,
    /// The object's key in the store.
    pub key: String,
}

impl TieredSegment {
    fn line(&self) -> String {
        format!(
            "tiered recording={} base={} length={} written_ms={} crc32c={:08x} md5={} key={}\n",
            self.recording_id,
            self.base,
            self.length,
            self.written_ms,
            self.crc32c,
            self.md5,
            self.key
        )
    }
}

/// The segments in the store, by (recording, base).
pub type TieredSegments = BTreeMap<(i64, i64), TieredSegment>;

/// Parses the log's text: the segments, and the number of lines read.
/// A line that does not parse is an error naming it.
fn parse(text: &str, path: &Path) -> io::Result<(TieredSegments, usize)> {
    let mut segments = TieredSegments::new();
    let mut lines = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let Some(line) = line.strip_suffix('\n') else {
            break; // a torn tail: not taken
        };
        lines += 1;
        let bad = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} line {}: {why}: '{line}'", path.display(), i + 1),
            )
        };
        let mut words = line.split(' ');
        let kind = words.next().unwrap_or("");
        let fields: BTreeMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
        let int = |k: &str| -> io::Result<i64> {
            fields
                .get(k)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(&format!("no number {k}")))
        };
        let (recording_id, base) = (int("recording")?, int("base")?);
        match kind {
            "tiered" => {
                let crc32c = fields
                    .get("crc32c")
                    .and_then(|v| u32::from_str_radix(v, 16).ok())
                    .ok_or_else(|| bad("no crc32c"))?;
                let text = |k: &str| -> io::Result<String> {
                    fields
                        .get(k)
                        .filter(|v| !v.is_empty())
                        .map(|v| v.to_string())
                        .ok_or_else(|| bad(&format!("no {k}")))
                };
                segments.insert(
                    (recording_id, base),
                    TieredSegment {
                        recording_id,
                        base,
                        length: int("length")? as u64,
                        written_ms: int("written_ms")?,
                        crc32c,
                        md5: text("md5")?,
                        key: text("key")?,
                    },
                );
            }
            "removed" => {
                segments.remove(&(recording_id, base));
            }
            _ => return Err(bad("not a 'tiered' or 'removed' line")),
        }
    }
    Ok((segments, lines))
}

/// Reads the log of the archive in `dir` (none: no segment in the store).
pub fn read_tier_log(dir: &Path) -> io::Result<TieredSegments> {
    let path = dir.join(TIER_LOG_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text, &path).map(|(s, _)| s),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(TieredSegments::new()),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

/// The log, open for appending.
pub struct TierLog {
    path: PathBuf,
    file: File,
    segments: TieredSegments,
    lines: usize,
}

impl TierLog {
    /// Opens (or creates) the log in `dir`, cutting off a torn last line,
    /// and rewriting it without the removed segments' lines when those are
    /// most of it.
    pub fn open(dir: &Path) -> io::Result<TierLog> {
        let path = dir.join(TIER_LOG_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        };
        let (segments, lines) = parse(&text, &path)?;
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        let mut log = TierLog {
            file: OpenOptions::new().create(true).append(true).open(&path)?,
            path,
            segments,
            lines,
        };
        if whole < text.len() || (log.lines > 64 && log.lines > 2 * log.segments.len()) {
            log.rewrite()?;
        } else if text.is_empty() {
            sync_dir(dir)?;
        }
        Ok(log)
    }

    /// Writes the live lines to a new file and renames it over the log.
    fn rewrite(&mut self) -> io::Result<()> {
        let text: String = self.segments.values().map(TieredSegment::line).collect();
        sulis_concurrent::mapped_file::replace_file(&self.path, text.as_bytes())?;
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        self.lines = self.segments.len();
        Ok(())
    }

    fn append(&mut self, line: &str) -> io::Result<()> {
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()?;
        self.lines += 1;
        Ok(())
    }

    /// Records a segment the store now holds, verified; synced on return.
    pub fn add(&mut self, segment: TieredSegment) -> io::Result<()> {
        self.append(&segment.line())?;
        self.segments
            .insert((segment.recording_id, segment.base), segment);
        Ok(())
    }

    /// Records that the store's copy of a segment is gone; synced on return.
    pub fn remove(&mut self, recording_id: i64, base: i64) -> io::Result<()> {
        if self.segments.remove(&(recording_id, base)).is_some() {
            self.append(&format!("removed recording={recording_id} base={base}\n"))?;
        }
        Ok(())
    }

    /// The segment at `base` of `recording_id`, if the store holds it.
    pub fn get(&self, recording_id: i64, base: i64) -> Option<&TieredSegment> {
        self.segments.get(&(recording_id, base))
    }

    /// Every segment the store holds.
    pub fn segments(&self) -> &TieredSegments {
        &self.segments
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(recording_id: i64, base: i64) -> TieredSegment {
        TieredSegment {
            recording_id,
            base,
            length: 4096,
            written_ms: 1_700_000_000_000 + base,
            crc32c: 0xdead_beef,
            md5: "0123456789abcdef0123456789abcdef".into(),
            key: format!("p/1/{recording_id}-{base}.rec"),
        }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sulis-tierlog-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn adds_and_removes_survive_a_reopen_and_a_torn_tail_is_cut() {
        let d = dir("reopen");
        let mut log = TierLog::open(&d).unwrap();
        log.add(segment(3, 0)).unwrap();
        log.add(segment(3, 4096)).unwrap();
        log.remove(3, 0).unwrap();
        log.remove(9, 0).unwrap(); // not there: nothing written
        drop(log);
        // A crash mid-append: half a line.
        let path = d.join(TIER_LOG_FILE);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"tiered recording=3 base=8192 len").unwrap();
        drop(f);
        let read = read_tier_log(&d).unwrap();
        assert_eq!(read.keys().copied().collect::<Vec<_>>(), vec![(3, 4096)]);
        assert_eq!(read[&(3, 4096)], segment(3, 4096));
        let mut log = TierLog::open(&d).unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().ends_with('\n'));
        log.add(segment(4, 0)).unwrap();
        drop(log);
        let log = TierLog::open(&d).unwrap();
        assert_eq!(log.segments().len(), 2);
        assert!(log.get(4, 0).is_some() && log.get(3, 0).is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_log_of_mostly_removals_is_rewritten_and_a_bad_line_is_named() {
        let d = dir("rewrite");
        let mut log = TierLog::open(&d).unwrap();
        for base in 0..100 {
            log.add(segment(1, base * 4096)).unwrap();
        }
        for base in 0..99 {
            log.remove(1, base * 4096).unwrap();
        }
        drop(log);
        let log = TierLog::open(&d).unwrap();
        let text = std::fs::read_to_string(d.join(TIER_LOG_FILE)).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert_eq!(log.segments().len(), 1);
        std::fs::write(d.join(TIER_LOG_FILE), "tiered recording=1 base=x\n").unwrap();
        let e = TierLog::open(&d).err().unwrap().to_string();
        assert!(e.contains("line 1") && e.contains("base"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
