//! Retention holds: a reader the archive does not see (a Spark query
//! between batches, a files-mode read, an operator's copy) keeps what it
//! still needs from retention by naming, per recording, the lowest position
//! it needs. A hold is a file `holds/NAME.hold` in the archive directory:
//!
//! ```text
//! recording=5 position=1048576
//! recording=7 position=0
//! ```
//!
//! It lasts `retention_hold_timeout` after it was last written (as Kafka
//! forgets a consumer group's offsets after `offsets.retention.minutes`),
//! or less where it says so itself (a line `lease=SECONDS`): a holder that
//! lives on writes it again; one that died stops holding, and the archive
//! then deletes the file.
//! A hold is written whole (to a temporary name, then renamed), so a reader
//! never sees half of one.

use std::path::{Path, PathBuf};

/// The directory of the holds in an archive directory.
pub fn holds_dir(archive_dir: &Path) -> PathBuf {
    archive_dir.join("holds")
}

/// One recording position a holder needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// Who holds it (the file's name without `.hold`).
    pub name: String,
    /// The recording.
    pub recording_id: i64,
    /// Nothing from this position's segment on goes.
    pub position: i64,
    /// When the hold was last written (epoch ms).
    pub written_ms: i64,
    /// How long it lasts after that, if it says (ms).
    pub lease_ms: Option<i64>,
}

impl Hold {
    /// Whether it still holds at `now_ms`, given the archive's `timeout_ms`.
    pub fn is_live(&self, now_ms: i64, timeout_ms: i64) -> bool {
        now_ms - self.written_ms <= self.lease_ms.map_or(timeout_ms, |l| l.min(timeout_ms))
    }
}

/// A hold's name is letters, digits, `-`, `_` and `.` (not first): it is a file name.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 200
        || name.starts_with('.')
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(format!(
            "hold name '{name}': use letters, digits, '-', '_' and '.' (not first), at most 200"
        ));
    }
    Ok(())
}

/// Writes (or replaces) the hold `name`: each `(recording id, position)`
/// kept from retention, for `lease` at most (`None`: the archive's
/// `retention_hold_timeout`). Returns the hold's path.
pub fn write_hold(
    archive_dir: &Path,
    name: &str,
    held: &[(i64, i64)],
    lease: Option<std::time::Duration>,
) -> Result<PathBuf, String> {
    check_name(name)?;
    let dir = holds_dir(archive_dir);
    let io = |what: &str, e: std::io::Error| format!("hold '{name}': cannot {what}: {e}");
    std::fs::create_dir_all(&dir).map_err(|e| io(&format!("create {}", dir.display()), e))?;
    let path = hold_path(archive_dir, name);
    let mut text = String::new();
    if let Some(lease) = lease {
        text.push_str(&format!("lease={}\n", lease.as_secs().max(1)));
    }
    for (recording_id, position) in held {
        text.push_str(&format!("recording={recording_id} position={position}\n"));
    }
    sulis_concurrent::mapped_file::replace_file(&path, text.as_bytes())
        .map_err(|e| io(&format!("write {}", path.display()), e))?;
    Ok(path)
}

/// Removes the hold `name`; false when there was none.
pub fn release_hold(archive_dir: &Path, name: &str) -> Result<bool, String> {
    check_name(name)?;
    let path = hold_path(archive_dir, name);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!(
            "hold '{name}': cannot remove {}: {e}",
            path.display()
        )),
    }
}

/// Every hold in the archive directory, and what could not be read (a
/// hold that does not parse holds nothing, and says so).
pub fn read_holds(archive_dir: &Path) -> (Vec<Hold>, Vec<String>) {
    let mut holds = Vec::new();
    let mut problems = Vec::new();
    let Ok(entries) = std::fs::read_dir(holds_dir(archive_dir)) else {
        return (holds, problems);
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(name) = file_name.strip_suffix(".hold") else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("hold {}: {e}", path.display()));
                continue;
            }
        };
        let Some(written_ms) = crate::retention::written_ms(&path) else {
            continue; // gone since it was read: it holds nothing
        };
        match parse(&text) {
            Ok((held, lease_ms)) => {
                holds.extend(held.into_iter().map(|(recording_id, position)| Hold {
                    name: name.to_string(),
                    recording_id,
                    position,
                    written_ms,
                    lease_ms,
                }))
            }
            Err(e) => problems.push(format!("hold {}: {e}", path.display())),
        }
    }
    holds.sort_by(|a, b| (a.recording_id, &a.name).cmp(&(b.recording_id, &b.name)));
    (holds, problems)
}

/// The path of the hold `name`.
pub fn hold_path(archive_dir: &Path, name: &str) -> PathBuf {
    holds_dir(archive_dir).join(format!("{name}.hold"))
}

type Parsed = (Vec<(i64, i64)>, Option<i64>);

fn parse(text: &str) -> Result<Parsed, String> {
    let mut held = Vec::new();
    let mut lease_ms = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(v) = line.strip_prefix("lease=") {
            match v.parse::<i64>() {
                Ok(s) if s > 0 => lease_ms = Some(s * 1000),
                _ => return Err(format!("line {}: lease is a number of seconds", i + 1)),
            }
            continue;
        }
        let mut recording = None;
        let mut position = None;
        for word in line.split_whitespace() {
            match word.split_once('=') {
                Some(("recording", v)) => recording = v.parse::<i64>().ok(),
                Some(("position", v)) => position = v.parse::<i64>().ok(),
                _ => {
                    return Err(format!(
                        "line {}: '{word}' is not recording=ID or position=P",
                        i + 1
                    ))
                }
            }
        }
        match (recording, position) {
            (Some(r), Some(p)) if r >= 0 && p >= 0 => held.push((r, p)),
            _ => return Err(format!("line {}: needs recording=ID position=P", i + 1)),
        }
    }
    Ok((held, lease_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::tests::TempDir;

    #[test]
    fn a_hold_is_written_whole_read_back_replaced_and_released() {
        let dir = TempDir::new("holds");
        let path = write_hold(&dir.0, "spark-q1", &[(5, 1 << 20), (7, 0)], None).unwrap();
        assert!(path.ends_with("holds/spark-q1.hold"));
        let (holds, problems) = read_holds(&dir.0);
        assert!(problems.is_empty(), "{problems:?}");
        let got: Vec<(String, i64, i64)> = holds
            .iter()
            .map(|h| (h.name.clone(), h.recording_id, h.position))
            .collect();
        assert_eq!(
            got,
            [("spark-q1".into(), 5, 1 << 20), ("spark-q1".into(), 7, 0)]
        );
        assert!(holds[0].written_ms > 0);
        assert!(holds[0].is_live(holds[0].written_ms + 5_000, 5_000));
        assert!(!holds[0].is_live(holds[0].written_ms + 5_001, 5_000));
        // A lease of its own, shorter than the archive's timeout, decides.
        write_hold(
            &dir.0,
            "spark-q1",
            &[(5, 2 << 20)],
            Some(std::time::Duration::from_secs(2)),
        )
        .unwrap();
        let (holds, _) = read_holds(&dir.0);
        assert_eq!((holds.len(), holds[0].lease_ms), (1, Some(2_000)));
        assert!(!holds[0].is_live(holds[0].written_ms + 2_001, 5_000));
        assert!(release_hold(&dir.0, "spark-q1").unwrap());
        assert!(!release_hold(&dir.0, "spark-q1").unwrap());
        assert!(read_holds(&dir.0).0.is_empty());
    }

    #[test]
    fn a_hold_that_does_not_parse_holds_nothing_and_says_which() {
        let dir = TempDir::new("holds-bad");
        write_hold(&dir.0, "good", &[(1, 64)], None).unwrap();
        std::fs::write(
            holds_dir(&dir.0).join("bad.hold"),
            "recording=x position=1\n",
        )
        .unwrap();
        let (holds, problems) = read_holds(&dir.0);
        assert_eq!(holds.len(), 1);
        assert!(
            problems[0].contains("bad.hold") && problems[0].contains("line 1"),
            "{problems:?}"
        );
        assert!(write_hold(&dir.0, "../escape", &[], None)
            .unwrap_err()
            .contains("hold name"));
    }
}
