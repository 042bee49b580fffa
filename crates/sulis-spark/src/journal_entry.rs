//! One message of the exactly-once sink's journal (`sink_journal`), and
//! what a (query, batch, partition, target)'s entries say of its attempts.
//!
//! An entry is a JSON object with sorted keys: `kind` (`claim`, `run` or
//! `done`), `query`, `batch`, `partition`, `target` (the target stream's
//! recording key) and `attempt` always, the other fields where they are not
//! zero or empty. A message on the journal stream that is not such an
//! object is someone else's and skipped; one that is, but damaged, fails:
//! skipping it could hide an attempt.

use serde_json::{Map, Value};

/// What an entry says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Before anything else: the attempt, its session on the target and
    /// where its rows will start.
    Claim,
    /// Before its first row: the rows earlier attempts published (`skip`).
    Run,
    /// After its rows are recorded (or it withdrew or failed: `why`).
    Done,
}

impl EntryKind {
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::Claim => "claim",
            EntryKind::Run => "run",
            EntryKind::Done => "done",
        }
    }
}

/// One journal entry; `position` is where it ends in its journal recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    pub kind: EntryKind,
    pub query: String,
    pub batch: i64,
    pub partition: i64,
    pub target: String,
    pub attempt: String,
    /// claim: the session of the attempt's publication on the target.
    pub session: i32,
    /// claim: where its rows start in that session.
    pub start: i64,
    /// run, done: rows of the partition before its run.
    pub skip: i64,
    /// done: rows it published.
    pub count: i64,
    /// done: their `Checksum::value`.
    pub crc: String,
    /// done: the position after its last row.
    pub end: i64,
    /// done: "withdrawn", or the error it failed with.
    pub why: String,
    pub position: i64,
}

/// Which (query, batch, partition, target) an entry is of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskKey {
    pub query: String,
    pub batch: i64,
    pub partition: i64,
    pub target: String,
}

impl JournalEntry {
    /// An entry of `kind` by `attempt` of `key`, its other fields zero.
    pub fn new(kind: EntryKind, key: &TaskKey, attempt: &str) -> JournalEntry {
        JournalEntry {
            kind,
            query: key.query.clone(),
            batch: key.batch,
            partition: key.partition,
            target: key.target.clone(),
            attempt: attempt.to_string(),
            session: 0,
            start: 0,
            skip: 0,
            count: 0,
            crc: String::new(),
            end: 0,
            why: String::new(),
            position: 0,
        }
    }

    pub fn is_of(&self, key: &TaskKey) -> bool {
        self.query == key.query
            && self.batch == key.batch
            && self.partition == key.partition
            && self.target == key.target
    }

    /// The process part of the attempt's name (see `sink_journal::attempt_name`).
    pub fn process(&self) -> &str {
        process_of(&self.attempt)
    }

    /// The message: compact JSON, keys sorted.
    pub fn encode(&self) -> Vec<u8> {
        let mut m = Map::new();
        m.insert("kind".into(), self.kind.name().into());
        m.insert("query".into(), self.query.clone().into());
        m.insert("batch".into(), self.batch.into());
        m.insert("partition".into(), self.partition.into());
        m.insert("target".into(), self.target.clone().into());
        m.insert("attempt".into(), self.attempt.clone().into());
        for (k, v) in [
            ("session", self.session as i64),
            ("start", self.start),
            ("skip", self.skip),
            ("count", self.count),
            ("end", self.end),
        ] {
            if v != 0 {
                m.insert(k.into(), v.into());
            }
        }
        for (k, v) in [("crc", &self.crc), ("why", &self.why)] {
            if !v.is_empty() {
                m.insert(k.into(), v.clone().into());
            }
        }
        let sorted: std::collections::BTreeMap<_, _> = m.into_iter().collect();
        serde_json::to_vec(&sorted).expect("a map of strings and numbers encodes")
    }

    /// The entry in `raw`, ending at `position`; None for a message that is
    /// not one (another publisher on the stream); Err naming where for a
    /// damaged one.
    pub fn decode(raw: &[u8], position: i64) -> Result<Option<JournalEntry>, String> {
        let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(raw) else {
            return Ok(None);
        };
        let kind = match m.get("kind").and_then(Value::as_str) {
            Some("claim") => EntryKind::Claim,
            Some("run") => EntryKind::Run,
            Some("done") => EntryKind::Done,
            _ => return Ok(None),
        };
        let damaged = |why: String| {
            let shown = String::from_utf8_lossy(&raw[..raw.len().min(200)]).into_owned();
            format!("sulis sink: the journal entry ending at position {position} is damaged ({why}): {shown}")
        };
        let nobody = TaskKey {
            query: String::new(),
            batch: 0,
            partition: 0,
            target: String::new(),
        };
        let mut e = JournalEntry {
            position,
            ..JournalEntry::new(kind, &nobody, "")
        };
        for required in ["query", "batch", "partition", "target", "attempt"] {
            if !m.contains_key(required) {
                return Err(damaged(format!("no {required}")));
            }
        }
        for (k, v) in &m {
            let text = || {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| damaged(format!("{k} is not a string")))
            };
            let int = || {
                v.as_i64()
                    .ok_or_else(|| damaged(format!("{k} is not an integer")))
            };
            match k.as_str() {
                "kind" => {}
                "query" => e.query = text()?,
                "target" => e.target = text()?,
                "attempt" => e.attempt = text()?,
                "crc" => e.crc = text()?,
                "why" => e.why = text()?,
                "batch" => e.batch = int()?,
                "partition" => e.partition = int()?,
                "start" => e.start = int()?,
                "skip" => e.skip = int()?,
                "count" => e.count = int()?,
                "end" => e.end = int()?,
                "session" => {
                    e.session = i32::try_from(int()?)
                        .map_err(|_| damaged("session is not an int32".into()))?
                }
                other => return Err(damaged(format!("an unknown field {other}"))),
            }
        }
        Ok(Some(e))
    }
}

/// The process part of an attempt's name: all but its last two parts.
pub fn process_of(attempt: &str) -> &str {
    let mut cut = attempt.rsplitn(3, '/');
    let (_, _, process) = (cut.next(), cut.next(), cut.next());
    process.unwrap_or(attempt)
}

/// What the journal says of one attempt.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub name: String,
    pub claim: JournalEntry,
    pub run: Option<JournalEntry>,
    pub done: Option<JournalEntry>,
}

/// The attempts of `key` in `entries`, by name (in the order they claimed).
pub fn attempts(entries: &[JournalEntry], key: &TaskKey) -> Vec<Attempt> {
    let mut out: Vec<Attempt> = Vec::new();
    for e in entries.iter().filter(|e| e.is_of(key)) {
        let found = out.iter_mut().find(|a| a.name == e.attempt);
        match (e.kind, found) {
            (EntryKind::Claim, None) => out.push(Attempt {
                name: e.attempt.clone(),
                claim: e.clone(),
                run: None,
                done: None,
            }),
            (EntryKind::Run, Some(a)) => a.run = Some(e.clone()),
            (EntryKind::Done, Some(a)) => a.done = Some(e.clone()),
            _ => {}
        }
    }
    out
}

/// The first claim (of any query or target) made after `a`'s in `a`'s
/// session by its process: `a`'s process went on to another task.
pub fn later_claim<'e>(entries: &'e [JournalEntry], a: &Attempt) -> Option<&'e JournalEntry> {
    let c = &a.claim;
    entries
        .iter()
        .filter(|e| {
            e.kind == EntryKind::Claim
                && e.session == c.session
                && (e.start > c.start || (e.start == c.start && e.position > c.position))
                && e.process() == c.process()
        })
        .min_by_key(|e| e.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> TaskKey {
        TaskKey {
            query: "q".into(),
            batch: 3,
            partition: 1,
            target: "7:ipc".into(),
        }
    }

    #[test]
    fn entries_round_trip_with_sorted_keys_and_zero_fields_left_out() {
        let mut e = JournalEntry::new(EntryKind::Claim, &key(), "h:1:ab/9/0");
        e.session = -5;
        e.start = 640;
        let raw = e.encode();
        assert_eq!(
            String::from_utf8(raw.clone()).unwrap(),
            r#"{"attempt":"h:1:ab/9/0","batch":3,"kind":"claim","partition":1,"query":"q","session":-5,"start":640,"target":"7:ipc"}"#
        );
        let back = JournalEntry::decode(&raw, 1024).unwrap().unwrap();
        assert_eq!(
            back,
            JournalEntry {
                position: 1024,
                ..e
            }
        );
        // Another publisher's message is skipped; a damaged entry is not.
        assert_eq!(JournalEntry::decode(b"tick 1", 8), Ok(None));
        assert_eq!(JournalEntry::decode(br#"{"kind":"other"}"#, 8), Ok(None));
        let err = JournalEntry::decode(br#"{"kind":"run","query":"q"}"#, 96).unwrap_err();
        assert!(
            err.starts_with(
                "sulis sink: the journal entry ending at position 96 is damaged (no batch)"
            ),
            "{err}"
        );
        let err = JournalEntry::decode(
            br#"{"kind":"run","query":"q","batch":1,"partition":0,"target":"t","attempt":"a","skip":"x"}"#,
            96,
        )
        .unwrap_err();
        assert!(err.contains("skip is not an integer"), "{err}");
    }

    #[test]
    fn attempts_gather_their_entries_and_a_later_claim_of_the_session_ends_one() {
        let k = key();
        let claim = |name: &str, session: i32, start: i64, position: i64| JournalEntry {
            session,
            start,
            position,
            ..JournalEntry::new(EntryKind::Claim, &k, name)
        };
        let a = claim("h:1:ab/9/0", 4, 0, 100);
        let run = JournalEntry {
            skip: 0,
            position: 200,
            ..JournalEntry::new(EntryKind::Run, &k, "h:1:ab/9/0")
        };
        let b = claim("h:2:cd/12/0", 8, 64, 300);
        let other_key = TaskKey {
            batch: 4,
            ..k.clone()
        };
        let next = JournalEntry {
            session: 4,
            start: 4096,
            position: 400,
            ..JournalEntry::new(EntryKind::Claim, &other_key, "h:1:ab/15/0")
        };
        let entries = vec![a.clone(), run.clone(), b, next.clone()];
        let found = attempts(&entries, &k);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].run.as_ref(), Some(&run));
        assert!(found[0].done.is_none());
        assert_eq!(later_claim(&entries, &found[0]), Some(&next));
        assert_eq!(later_claim(&entries, &found[1]), None);
        assert_eq!(process_of("h:1:ab/15/0"), "h:1:ab");
    }
}
