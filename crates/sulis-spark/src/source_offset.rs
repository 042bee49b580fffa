//! A streaming query's offset: a position per recording, and what it says
//! of the recordings it leaves out.
//!
//! Its JSON text is an object with the recording ids as keys, in numeric
//! order, then `minPartitions`, `stopped` and `finished` when they have
//! something to say:
//!
//! ```text
//! {"2": 7, "10": 5, "minPartitions": 3, "stopped": {"4": 9}, "finished": {"below": 5, "stoppedBy": 17}}
//! ```
//!
//! Spark keeps the text in the checkpoint's offset log and compares
//! offsets by it, so it must be one text per offset, whichever
//! implementation wrote it: it is the text Python's `json.dumps` gives the
//! same object (`", "` and `": "` between items), which is what PySpark
//! writes for a Python source.

use std::collections::BTreeMap;
use std::fmt::Write;

/// The key of the recordings read to their stop position (`{"<id>": stop}`).
pub const STOPPED_KEY: &str = "stopped";
/// The key of how many partitions the micro-batch ending at the offset is
/// cut into (`minPartitions` when it was made): a re-run of that batch
/// after a restart with another `minPartitions` is cut as its first run
/// was, so each partition has the same rows (the exactly-once sink checks
/// them), as Spark keeps `spark.sql.shuffle.partitions` in the checkpoint.
pub const PIECES_KEY: &str = "minPartitions";
/// The key of what the offset says of the recordings it leaves out.
pub const FINISHED_KEY: &str = "finished";

/// What an offset says of the recordings it leaves out: every selected
/// recording with an id below `below` that it has no position for was
/// stopped, read to its stop, and stopped no later than `stopped_by` (the
/// archive's clock, ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    pub below: i64,
    pub stopped_by: i64,
}

impl Default for Finished {
    fn default() -> Self {
        Finished {
            below: 0,
            stopped_by: -1,
        }
    }
}

/// A streaming offset (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceOffset {
    /// The position read to, per recording id.
    pub positions: BTreeMap<i64, i64>,
    /// The recordings that were stopped, and read to that stop position,
    /// when the offset was made.
    pub stopped: BTreeMap<i64, i64>,
    /// The partitions of the micro-batch that ends here.
    pub pieces: Option<i64>,
    /// The recordings left out.
    pub finished: Finished,
}

impl SourceOffset {
    /// The offset's JSON text (see the module doc).
    pub fn to_json(&self) -> String {
        let mut out = String::from("{");
        let mut first = true;
        let mut item = |out: &mut String, key: &str| {
            if !first {
                out.push_str(", ");
            }
            first = false;
            let _ = write!(out, "\"{key}\": ");
        };
        for (id, position) in &self.positions {
            item(&mut out, &id.to_string());
            let _ = write!(out, "{position}");
        }
        if let Some(pieces) = self.pieces {
            item(&mut out, PIECES_KEY);
            let _ = write!(out, "{pieces}");
        }
        if !self.stopped.is_empty() {
            item(&mut out, STOPPED_KEY);
            out.push('{');
            for (i, (id, position)) in self.stopped.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let _ = write!(out, "{sep}\"{id}\": {position}");
            }
            out.push('}');
        }
        if self.finished.below > 0 {
            item(&mut out, FINISHED_KEY);
            let _ = write!(
                out,
                "{{\"below\": {}, \"stoppedBy\": {}}}",
                self.finished.below, self.finished.stopped_by
            );
        }
        out.push('}');
        out
    }

    /// Reads an offset's JSON text (any spacing); keys it does not know are
    /// passed over, as an older reader passes over a newer key.
    pub fn from_json(text: &str) -> Result<SourceOffset, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("offset {text:?}: {e}"))?;
        let object = value
            .as_object()
            .ok_or_else(|| format!("offset {text:?}: not a JSON object"))?;
        let int = |v: &serde_json::Value, what: &str| {
            v.as_i64()
                .ok_or_else(|| format!("offset {text:?}: {what} is not an integer"))
        };
        let ids = |v: &serde_json::Value, what: &str| -> Result<BTreeMap<i64, i64>, String> {
            let mut map = BTreeMap::new();
            let o = v
                .as_object()
                .ok_or_else(|| format!("offset {text:?}: {what} is not an object"))?;
            for (k, v) in o {
                let id = recording_id(k).ok_or_else(|| {
                    format!("offset {text:?}: {what} key {k:?} is not a recording id")
                })?;
                map.insert(id, int(v, &format!("{what} of recording {k}"))?);
            }
            Ok(map)
        };
        let mut offset = SourceOffset::default();
        for (k, v) in object {
            if let Some(id) = recording_id(k) {
                offset
                    .positions
                    .insert(id, int(v, &format!("the position of recording {k}"))?);
            }
        }
        if let Some(v) = object.get(PIECES_KEY) {
            offset.pieces = Some(int(v, PIECES_KEY)?);
        }
        if let Some(v) = object.get(STOPPED_KEY) {
            offset.stopped = ids(v, STOPPED_KEY)?;
        }
        if let Some(f) = object.get(FINISHED_KEY).filter(|f| !f.is_null()) {
            let field = |name: &str| {
                f.get(name)
                    .ok_or_else(|| format!("offset {text:?}: {FINISHED_KEY} has no {name}"))
                    .and_then(|v| int(v, &format!("{FINISHED_KEY}.{name}")))
            };
            offset.finished = Finished {
                below: field("below")?,
                stopped_by: field("stoppedBy")?,
            };
        }
        Ok(offset)
    }
}

/// A key of ASCII digits only (as Python's `str.isdigit` takes them here).
fn recording_id(key: &str) -> Option<i64> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    key.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset() -> SourceOffset {
        SourceOffset {
            positions: [(10, 5), (2, 7), (33, 1)].into_iter().collect(),
            stopped: [(4, 9)].into_iter().collect(),
            pieces: Some(3),
            finished: Finished {
                below: 5,
                stopped_by: 17,
            },
        }
    }

    #[test]
    fn the_text_is_pythons_json_dumps_of_the_same_object_in_numeric_order() {
        assert_eq!(
            offset().to_json(),
            r#"{"2": 7, "10": 5, "33": 1, "minPartitions": 3, "stopped": {"4": 9}, "finished": {"below": 5, "stoppedBy": 17}}"#
        );
        assert_eq!(SourceOffset::default().to_json(), "{}");
        let only = SourceOffset {
            pieces: Some(1),
            ..SourceOffset::default()
        };
        assert_eq!(only.to_json(), r#"{"minPartitions": 1}"#);
    }

    #[test]
    fn an_offset_reads_back_as_written_whatever_its_spacing() {
        let o = offset();
        assert_eq!(SourceOffset::from_json(&o.to_json()).unwrap(), o);
        let compact = r#"{"33":1,"2":7,"10":5,"minPartitions":3,"stopped":{"4":9},"finished":{"below":5,"stoppedBy":17},"later":true}"#;
        assert_eq!(SourceOffset::from_json(compact).unwrap(), o);
        // Offsets from before `finished` and `stopped` existed.
        let old = SourceOffset::from_json(r#"{"3": 64}"#).unwrap();
        assert_eq!(old.finished, Finished::default());
        assert!(old.stopped.is_empty() && old.pieces.is_none());
    }

    #[test]
    fn a_damaged_offset_is_refused_naming_what() {
        for (text, says) in [
            ("[1]", "not a JSON object"),
            (r#"{"3": "x"}"#, "position of recording 3"),
            (r#"{"stopped": {"a": 1}}"#, "not a recording id"),
            (r#"{"finished": {"below": 2}}"#, "has no stoppedBy"),
            ("{", "EOF"),
        ] {
            let e = SourceOffset::from_json(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
