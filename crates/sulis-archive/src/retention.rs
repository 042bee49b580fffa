//! Retention: which old segment files of a recording may go, by age and by
//! size (as Kafka's `retention.ms` and `retention.bytes` per partition), from
//! rules in a policy file that the archive reads again whenever it changes.
//!
//! The policy file holds one rule a line, the first rule that matches a
//! recording deciding for it; `#` starts a comment:
//!
//! ```text
//! # which recordings               what goes
//! stream=1001 channel=aeron:udp*   max-age=7d max-size=10g
//! stream=1002                                    # kept whole: no limit
//! stream=*                         max-age=30d
//! ```
//!
//! `stream` is a stream id or `*`; `channel` a pattern (`*` any run of
//! characters) matched against the recording's original and stripped
//! channels; `max-age` a duration (`s`, `m`, `h` or `d`); `max-size` bytes
//! (`k`, `m` or `g`). A segment's age is the time since its last byte was
//! written (its file's modification time). Only whole segment files go,
//! oldest first, never the one a recording is writing, never one a reader
//! still needs (the caller gives the lowest position a reader holds).

use std::time::Duration;
use sulis_protocol::values::{parse_duration_option, parse_size};

/// One line of a policy: which recordings, and how much of them is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionRule {
    /// Its line in the policy file (1-based), to name it in log lines.
    pub line: usize,
    /// The stream it applies to (`None`: every stream).
    pub stream_id: Option<i32>,
    /// A pattern the recording's channel matches (`None`: any channel).
    pub channel: Option<String>,
    /// Segments whose last write is older than this go.
    pub max_age: Option<Duration>,
    /// The oldest segments go while what remains still holds this many bytes.
    pub max_size: Option<u64>,
    /// Closed segments whose last write is older than this move to the
    /// object store (`crate::tier`); max-age and max-size count them still.
    pub tier_after: Option<Duration>,
}

impl RetentionRule {
    /// Whether the rule applies to a recording of `stream_id` on `channels`.
    pub fn matches(&self, stream_id: i32, channels: &[&str]) -> bool {
        self.stream_id.is_none_or(|s| s == stream_id)
            && self
                .channel
                .as_deref()
                .is_none_or(|p| channels.iter().any(|c| glob_match(p, c)))
    }

    /// The rule as its line reads (for log lines and `archive-tool`).
    pub fn describe(&self) -> String {
        let mut parts = vec![format!(
            "stream={}",
            self.stream_id.map_or("*".to_string(), |s| s.to_string())
        )];
        if let Some(c) = &self.channel {
            parts.push(format!("channel={c}"));
        }
        if let Some(a) = self.max_age {
            parts.push(format!("max-age={}", show_age(a)));
        }
        if let Some(s) = self.max_size {
            parts.push(format!("max-size={s}"));
        }
        if let Some(t) = self.tier_after {
            parts.push(format!("tier-after={}", show_age(t)));
        }
        if self.max_age.is_none() && self.max_size.is_none() {
            parts.push("(kept whole)".into());
        }
        format!("line {}: {}", self.line, parts.join(" "))
    }
}

fn show_age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if d.subsec_nanos() != 0 => format!("{}ms", d.as_millis()),
        _ if s.is_multiple_of(86_400) && s > 0 => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3_600) && s > 0 => format!("{}h", s / 3_600),
        _ if s.is_multiple_of(60) && s > 0 => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// The rules of a policy file, in its order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// First match wins.
    pub rules: Vec<RetentionRule>,
}

const KEYS: [&str; 5] = ["stream", "channel", "max-age", "max-size", "tier-after"];

impl RetentionPolicy {
    /// Parses a policy file's text. An error names the line and what is
    /// wrong with it: a policy is taken whole or not at all.
    pub fn parse(text: &str) -> Result<RetentionPolicy, String> {
        let mut rules = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let body = raw.split('#').next().unwrap_or("").trim();
            if body.is_empty() {
                continue;
            }
            let mut rule = RetentionRule {
                line,
                stream_id: None,
                channel: None,
                max_age: None,
                max_size: None,
                tier_after: None,
            };
            let mut seen = Vec::new();
            for word in body.split_whitespace() {
                let fail = |why: String| Err(format!("line {line} ('{word}'): {why}"));
                let Some((key, value)) = word.split_once('=') else {
                    return fail("expected key=value".into());
                };
                if seen.contains(&key) {
                    return fail(format!("{key} given twice"));
                }
                seen.push(key);
                match key {
                    "stream" if value == "*" => {}
                    "stream" => match value.parse::<i32>() {
                        Ok(s) => rule.stream_id = Some(s),
                        Err(_) => return fail("a stream is a stream id or *".into()),
                    },
                    "channel" if value.is_empty() => return fail("an empty channel".into()),
                    "channel" => rule.channel = Some(value.to_string()),
                    "max-age" => match parse_age(value) {
                        Ok(a) => rule.max_age = Some(a),
                        Err(e) => return fail(e),
                    },
                    "max-size" => match parse_size(value) {
                        Ok(s) => rule.max_size = Some(s),
                        Err(e) => return fail(e),
                    },
                    "tier-after" => match parse_duration_option(value) {
                        Ok(ns) => rule.tier_after = Some(Duration::from_nanos(ns)),
                        Err(e) => return fail(e),
                    },
                    other => {
                        let hint = KEYS
                            .iter()
                            .map(|k| (sulis_protocol::uri::edit_distance(other, k), *k))
                            .min()
                            .filter(|(d, _)| *d <= 2)
                            .map_or(String::new(), |(_, k)| format!(" (did you mean {k}?)"));
                        return fail(format!(
                            "unknown key '{other}'{hint}; the keys are {}",
                            KEYS.join(", ")
                        ));
                    }
                }
            }
            if rule.stream_id.is_none() && rule.channel.is_none() && !seen.contains(&"stream") {
                return Err(format!(
                    "line {line}: a rule names the recordings it applies to: stream=ID, stream=* or channel=PATTERN"
                ));
            }
            rules.push(rule);
        }
        Ok(RetentionPolicy { rules })
    }

    /// Whether a rule moves segments to the object store.
    pub fn tiers(&self) -> bool {
        self.rules.iter().any(|r| r.tier_after.is_some())
    }

    /// The first rule for a recording of `stream_id` on `channels`.
    pub fn rule_for(&self, stream_id: i32, channels: &[&str]) -> Option<&RetentionRule> {
        self.rules.iter().find(|r| r.matches(stream_id, channels))
    }
}

fn parse_age(value: &str) -> Result<Duration, String> {
    match parse_duration_option(value)? {
        0 => Err("a max-age of 0 would remove every closed segment; give a duration".into()),
        ns => Ok(Duration::from_nanos(ns)),
    }
}

/// `*` matches any run of characters (none included); everything else
/// itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// What a recording holds, as retention sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordingSpan {
    /// Its start position.
    pub start: i64,
    /// Where its data ends (the live position of an active recording).
    pub end: i64,
    /// The base of its first segment file.
    pub first_base: i64,
    /// Its segment file length.
    pub segment_length: i64,
    /// It stopped (no file of it is being written).
    pub stopped: bool,
    /// The lowest position a reader (a replay, a hold) still needs, if any.
    pub floor: Option<i64>,
}

impl RecordingSpan {
    /// The base of the segment file holding `position`.
    fn base_of(&self, position: i64) -> i64 {
        self.first_base
            + (position - self.first_base).div_euclid(self.segment_length) * self.segment_length
    }
}

/// What retention does to a recording now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Nothing goes.
    Keep,
    /// The segment files below `new_start` go; the recording starts there.
    Detach {
        /// The recording's new start, a segment base.
        new_start: i64,
        /// Why, for the log line.
        why: String,
    },
    /// The recording goes whole: it stopped and all of it is older than the max age.
    Purge {
        /// Why, for the log line.
        why: String,
    },
}

/// What `rule` removes of `span` at `now_ms` (epoch milliseconds).
/// `written_ms(base)` is when the segment file at `base` was last written
/// (`None`: it is not there, and nothing from it on is judged by age).
pub fn plan(
    rule: &RetentionRule,
    span: RecordingSpan,
    now_ms: i64,
    mut written_ms: impl FnMut(i64) -> Option<i64>,
) -> Removal {
    let len = span.segment_length;
    if len <= 0 || span.end <= span.start {
        return Removal::Keep;
    }
    // The file in use (or a stopped recording's last one) stays unless the
    // whole recording goes; nothing a reader needs goes.
    let last_data_base = span.base_of(span.end - 1);
    let mut limit = span.base_of(span.end);
    if let Some(floor) = span.floor {
        limit = limit.min(span.base_of(floor.max(span.start)));
    }
    let mut new_start = span.first_base;
    let mut why = Vec::new();
    if let Some(max_age) = rule.max_age {
        let cutoff = now_ms - max_age.as_millis() as i64;
        let mut base = span.first_base;
        let mut all_old = true;
        while base <= last_data_base {
            match written_ms(base) {
                Some(t) if t < cutoff => base += len,
                _ => {
                    all_old = false;
                    break;
                }
            }
        }
        if all_old && span.stopped && span.floor.is_none() {
            return Removal::Purge {
                why: format!(
                    "every segment is older than max-age {} ({})",
                    show_age(max_age),
                    rule_name(rule)
                ),
            };
        }
        if base.min(limit) > new_start {
            new_start = base.min(limit);
            why.push(format!("older than max-age {}", show_age(max_age)));
        }
    }
    if let Some(max_size) = rule.max_size {
        // Kafka's rule: the oldest segment goes while what remains still
        // holds at least max-size bytes.
        let keep_from = span.end - max_size as i64;
        if keep_from > span.first_base {
            let by_size = span.base_of(keep_from).min(limit);
            if by_size > new_start {
                new_start = by_size;
                why.push(format!("beyond max-size {max_size} bytes"));
            }
        }
    }
    if new_start <= span.first_base {
        return Removal::Keep;
    }
    Removal::Detach {
        new_start,
        why: format!("{} ({})", why.join(" and "), rule_name(rule)),
    }
}

/// The segments of `span` that `rule`'s tier-after moves to the object
/// store now, oldest first: whole segments the recording has written past
/// (a later file holds data, so the last file on the disk is never one of
/// them and an extension never writes into one), not in the store yet
/// (`tiered(base)`), last written (`written_ms(base)`; `None`: not on the
/// disk) before `now_ms` less tier-after.
pub fn to_tier(
    rule: &RetentionRule,
    span: RecordingSpan,
    now_ms: i64,
    mut written_ms: impl FnMut(i64) -> Option<i64>,
    mut tiered: impl FnMut(i64) -> bool,
) -> Vec<i64> {
    let (Some(after), len) = (rule.tier_after, span.segment_length) else {
        return Vec::new();
    };
    if len <= 0 {
        return Vec::new();
    }
    let cutoff = now_ms - after.as_millis() as i64;
    let mut bases = Vec::new();
    let mut base = span.base_of(span.start.max(span.first_base));
    while base + len < span.end {
        if !tiered(base) && written_ms(base).is_some_and(|t| t <= cutoff) {
            bases.push(base);
        }
        base += len;
    }
    bases
}

/// When the file at `path` was last written (its modification time), in
/// epoch milliseconds: a segment's or a hold's age is judged by it.
pub fn written_ms(path: &std::path::Path) -> Option<i64> {
    let t = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
    )
}

fn rule_name(rule: &RetentionRule) -> String {
    format!("retention rule at line {}", rule.line)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: i64 = 1 << 20;

    fn rule(text: &str) -> RetentionRule {
        RetentionPolicy::parse(text).unwrap().rules.remove(0)
    }

    fn span(start: i64, end: i64, stopped: bool, floor: Option<i64>) -> RecordingSpan {
        RecordingSpan {
            start,
            end,
            first_base: start - start % MB,
            segment_length: MB,
            stopped,
            floor,
        }
    }

    #[test]
    fn tier_after_moves_closed_segments_written_past_and_old_enough() {
        let r = rule("stream=1 tier-after=1h max-age=30d");
        assert_eq!(r.tier_after, Some(Duration::from_secs(3600)));
        assert_eq!(r.describe(), "line 1: stream=1 max-age=30d tier-after=1h");
        assert!(RetentionPolicy::parse("stream=1 tier-after=1h")
            .unwrap()
            .tiers());
        assert!(!RetentionPolicy::parse("stream=1 max-age=1h")
            .unwrap()
            .tiers());
        let hour = 3_600_000;
        let now = 100 * hour;
        // Four segments, the fourth being written: the first three are closed.
        let s = span(0, 3 * MB + 100, false, None);
        let old = |_| Some(now - 2 * hour);
        assert_eq!(to_tier(&r, s, now, old, |_| false), vec![0, MB, 2 * MB]);
        // In the store already, too young, not on the disk: left alone.
        let written = |b: i64| match b / MB {
            0 => None,
            1 => Some(now - 2 * hour),
            _ => Some(now - hour / 2),
        };
        assert_eq!(to_tier(&r, s, now, written, |_| false), vec![MB]);
        assert_eq!(to_tier(&r, s, now, old, |b| b == MB), vec![0, 2 * MB]);
        // A recording that ends exactly at a boundary: the last full segment is its last file.
        assert_eq!(
            to_tier(&r, span(0, 2 * MB, true, None), now, old, |_| false),
            vec![0]
        );
        // Detached below its start: from the start's segment on.
        let mut detached = span(0, 3 * MB + 100, true, None);
        detached.start = MB + 64;
        assert_eq!(to_tier(&r, detached, now, old, |_| false), vec![MB, 2 * MB]);
        assert!(to_tier(&rule("stream=1 max-age=1h"), s, now, old, |_| false).is_empty());
        let zero = rule("stream=1 tier-after=0s");
        assert_eq!(
            to_tier(&zero, s, now, |_| Some(now), |_| false),
            vec![0, MB, 2 * MB]
        );
    }

    #[test]
    fn a_policy_reads_its_rules_in_order_and_the_first_match_decides() {
        let p = RetentionPolicy::parse(
            "# comment\n\nstream=1001 channel=aeron:udp* max-age=7d max-size=10g\n\
             stream=1002   # kept whole\nstream=* max-age=90m\n",
        )
        .unwrap();
        assert_eq!(p.rules.len(), 3);
        assert_eq!(p.rules[0].line, 3);
        assert_eq!(p.rules[0].max_age, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(p.rules[0].max_size, Some(10 << 30));
        let udp = "aeron:udp?endpoint=h:1";
        assert_eq!(p.rule_for(1001, &[udp]).unwrap().line, 3);
        assert_eq!(
            p.rule_for(1001, &["aeron:ipc"]).unwrap().line,
            5,
            "channel mismatch falls through"
        );
        assert_eq!(p.rule_for(1002, &[udp]).unwrap().line, 4);
        assert_eq!(
            p.rule_for(7, &[udp]).unwrap().max_age,
            Some(Duration::from_secs(5400))
        );
        assert_eq!(p.rules[1].describe(), "line 4: stream=1002 (kept whole)");
        assert_eq!(p.rules[2].describe(), "line 5: stream=* max-age=90m");
    }

    #[test]
    fn a_bad_policy_is_refused_naming_the_line_and_the_word() {
        for (text, said) in [
            ("stream=1 max-age=7x", "line 1 ('max-age=7x')"),
            ("stream=1\nstream=2 max-szie=1g", "did you mean max-size?"),
            ("max-age=1d", "line 1: a rule names the recordings"),
            ("stream=one", "a stream is a stream id or *"),
            ("stream=1 max-age=0", "would remove every closed segment"),
            ("stream=1 stream=2", "stream given twice"),
            ("stream=1 7d", "expected key=value"),
        ] {
            let e = RetentionPolicy::parse(text).unwrap_err();
            assert!(e.contains(said), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_star_matches_any_run_of_characters() {
        for (p, t, m) in [
            ("aeron:udp*", "aeron:udp?endpoint=a:1", true),
            ("*endpoint=a:1", "aeron:udp?endpoint=a:1", true),
            ("*:1*", "aeron:udp?endpoint=a:12", true),
            ("aeron:ipc", "aeron:ipc", true),
            ("aeron:ipc", "aeron:ipc?term-length=64k", false),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYc Z", false),
            ("*", "", true),
        ] {
            assert_eq!(glob_match(p, t), m, "{p} ~ {t}");
        }
    }

    /// Segments written at base/MB minutes after the epoch's minute 0; now is minute 100.
    fn minutes(base: i64) -> Option<i64> {
        Some(base / MB * 60_000)
    }
    const NOW: i64 = 100 * 60_000;

    #[test]
    fn segments_older_than_max_age_go_but_never_the_one_being_written() {
        let r = rule("stream=1 max-age=90m");
        // Segments 0..=9 written at minutes 0..=9, so all older than 90 minutes: an active
        // recording keeps the one it writes.
        let active = span(0, 9 * MB + 100, false, None);
        assert!(
            matches!(plan(&r, active, NOW, minutes), Removal::Detach { new_start, .. } if new_start == 9 * MB)
        );
        // Written at minutes 0, 2, 4, ...: those before minute 5 are older than 95 minutes.
        let young = rule("stream=1 max-age=95m");
        let s = span(0, 9 * MB + 100, false, None);
        let at = |base: i64| Some(NOW - 100 * 60_000 + base / MB * 60_000 * 2);
        assert!(
            matches!(plan(&young, s, NOW, at), Removal::Detach { new_start, .. } if new_start == 3 * MB)
        );
        // Nothing old enough: nothing goes.
        assert_eq!(
            plan(&rule("stream=1 max-age=1000m"), s, NOW, minutes),
            Removal::Keep
        );
    }

    #[test]
    fn a_stopped_recording_all_older_than_max_age_goes_whole_unless_a_reader_holds_it() {
        let r = rule("stream=1 max-age=95m");
        let stopped = span(0, 3 * MB + 100, true, None);
        assert!(matches!(
            plan(&r, stopped, NOW, minutes),
            Removal::Purge { .. }
        ));
        let held = span(0, 3 * MB + 100, true, Some(2 * MB + 64));
        assert!(
            matches!(plan(&r, held, NOW, minutes), Removal::Detach { new_start, .. } if new_start == 2 * MB)
        );
        // A stop at a segment boundary: the data ends in the segment before.
        let at_boundary = span(0, 3 * MB, true, None);
        assert!(matches!(
            plan(&r, at_boundary, NOW, |b| (b < 3 * MB).then_some(0)),
            Removal::Purge { .. }
        ));
    }

    #[test]
    fn size_keeps_the_fewest_newest_segments_holding_max_size_as_kafka_does() {
        let r = rule("stream=1 max-size=2m");
        // 10 MiB and a bit: keeping from segment 8 holds 2 MiB + 100 bytes, at least 2 MiB.
        let s = span(0, 10 * MB + 100, false, None);
        assert!(
            matches!(plan(&r, s, NOW, minutes), Removal::Detach { new_start, .. } if new_start == 8 * MB)
        );
        // Exactly at the limit: nothing goes.
        let s = span(0, 2 * MB, true, None);
        assert_eq!(plan(&r, s, NOW, minutes), Removal::Keep);
        // A recording that started mid-segment counts from its start.
        let s = span(MB / 2, 3 * MB, true, None);
        assert!(
            matches!(plan(&r, s, NOW, minutes), Removal::Detach { new_start, .. } if new_start == MB)
        );
    }

    #[test]
    fn nothing_a_reader_needs_goes_whatever_the_rule() {
        let r = rule("stream=1 max-age=1m max-size=1m");
        for floor in [0, 100, MB - 32] {
            let s = span(0, 10 * MB, false, Some(floor));
            assert_eq!(plan(&r, s, NOW, minutes), Removal::Keep, "floor {floor}");
        }
        let s = span(0, 10 * MB, false, Some(4 * MB + 32));
        assert!(
            matches!(plan(&r, s, NOW, minutes), Removal::Detach { new_start, .. } if new_start == 4 * MB)
        );
    }

    #[test]
    fn a_missing_segment_file_stops_the_judging_by_age_there() {
        let r = rule("stream=1 max-age=10m");
        let s = span(0, 6 * MB, true, None);
        let gap = |b: i64| (b != 2 * MB).then_some(0);
        assert!(
            matches!(plan(&r, s, NOW, gap), Removal::Detach { new_start, .. } if new_start == 2 * MB)
        );
    }

    #[test]
    fn a_rule_with_no_limit_keeps_everything() {
        let r = rule("stream=1");
        assert_eq!(
            plan(&r, span(0, 100 * MB, true, None), NOW, minutes),
            Removal::Keep
        );
    }
}
