//! The options Spark hands a source or sink, as strings with
//! case-insensitive names, read into typed values; every failure names the
//! option and shows the value as the first implementation (Python) did,
//! `repr` and all, so the texts are one whichever implementation runs.

use crate::range_planner::{PositionSpec, EARLIEST};
use crate::PlanError;
use std::collections::BTreeMap;

/// Options by lower-cased name (Spark passes them case-insensitively).
#[derive(Debug, Clone, Default)]
pub struct OptionMap {
    by_lower: BTreeMap<String, (String, String)>,
}

/// An option error.
pub fn bad(text: String) -> PlanError {
    PlanError::Option(text)
}

impl OptionMap {
    /// From (name, value) pairs as Spark gives them.
    pub fn new<I: IntoIterator<Item = (String, String)>>(pairs: I) -> OptionMap {
        OptionMap {
            by_lower: pairs
                .into_iter()
                .map(|(k, v)| (k.to_lowercase(), (k, v)))
                .collect(),
        }
    }

    /// The value of `name` (any case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.by_lower
            .get(&name.to_lowercase())
            .map(|(_, v)| v.as_str())
    }

    /// The names as given.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_lower.values().map(|(k, _)| k.as_str())
    }

    /// An integer in `[low, high]`; `default` when absent or blank.
    pub fn int(
        &self,
        name: &str,
        default: Option<i64>,
        low: Option<i64>,
        high: Option<i64>,
    ) -> Result<Option<i64>, PlanError> {
        let Some(raw) = self.get(name) else {
            return Ok(default);
        };
        if raw.trim().is_empty() {
            return Ok(default);
        }
        let value: i64 = raw
            .trim()
            .parse()
            .map_err(|_| bad(format!("option {name}: {} is not an integer", repr(raw))))?;
        if let Some(low) = low.filter(|&l| value < l) {
            return Err(bad(format!(
                "option {name}: {value} is below the minimum {low}"
            )));
        }
        if let Some(high) = high.filter(|&h| value > h) {
            return Err(bad(format!(
                "option {name}: {value} is above the maximum {high}"
            )));
        }
        Ok(Some(value))
    }

    /// A stream id (a 32-bit integer).
    pub fn stream_id(&self, name: &str, default: Option<i32>) -> Result<Option<i32>, PlanError> {
        Ok(self
            .int(
                name,
                default.map(i64::from),
                Some(i32::MIN as i64),
                Some(i32::MAX as i64),
            )?
            .map(|v| v as i32))
    }

    /// `true`/`1`/`yes` or `false`/`0`/`no`.
    pub fn boolean(&self, name: &str, default: bool) -> Result<bool, PlanError> {
        let Some(raw) = self.get(name) else {
            return Ok(default);
        };
        match raw.trim().to_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            _ => Err(bad(format!(
                "option {name}: {} is not true or false",
                repr(raw)
            ))),
        }
    }

    /// A duration in seconds: a number, or with a unit as Spark writes
    /// them (`10 seconds`, `1h`, `500ms`, `1.5 min`); positive.
    pub fn seconds(&self, name: &str, default: f64) -> Result<f64, PlanError> {
        let Some(raw) = self.get(name) else {
            return Ok(default);
        };
        let value = number_with_unit(raw, true, duration_unit, 1.0).ok_or_else(|| {
            bad(format!(
                "option {name}: {} is not a duration (e.g. 10s, 500ms, '10 seconds', 1h)",
                repr(raw)
            ))
        })?;
        if value <= 0.0 {
            return Err(bad(format!(
                "option {name}: {} must be positive",
                repr(raw)
            )));
        }
        Ok(value)
    }

    /// A size in bytes: a number, or with a suffix as Spark reads them
    /// (`64m`, `1g`, `512kb`: powers of 1024); at least `low`.
    pub fn bytes(&self, name: &str, low: i64) -> Result<Option<i64>, PlanError> {
        let Some(raw) = self.get(name) else {
            return Ok(None);
        };
        if raw.trim().is_empty() {
            return Ok(None);
        }
        let value = number_with_unit(raw, false, size_unit, 1.0).ok_or_else(|| {
            bad(format!(
                "option {name}: {} is not a size in bytes (e.g. 1048576, 64m, 1g)",
                repr(raw)
            ))
        })?;
        if value < low as f64 {
            return Err(bad(format!(
                "option {name}: {} is below the minimum {low}",
                value as i64
            )));
        }
        Ok(Some(value as i64))
    }

    /// A channel URI sulis parses.
    pub fn channel(&self, name: &str, default: Option<&str>) -> Result<Option<String>, PlanError> {
        let Some(raw) = self.get(name) else {
            return Ok(default.map(str::to_string));
        };
        sulis_protocol::uri::ChannelUri::parse(raw).map_err(|e| {
            bad(format!(
                "option {name}: {} is not a channel URI: {e}",
                repr(raw)
            ))
        })?;
        Ok(Some(raw.to_string()))
    }

    /// `earliest`, `latest` or JSON `{"<recording id>": position}` (-2
    /// earliest, -1 latest; positions are frame boundaries).
    pub fn positions(&self, name: &str, default: PositionSpec) -> Result<PositionSpec, PlanError> {
        let Some(raw) = self.get(name) else {
            return Ok(default);
        };
        let text = raw.trim();
        match text.to_lowercase().as_str() {
            "earliest" => return Ok(PositionSpec::Earliest),
            "latest" => return Ok(PositionSpec::Latest),
            _ => {}
        }
        let parsed: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            bad(format!(
                "option {name}: {} is neither 'earliest', 'latest' nor JSON {{\"<recording id>\": position}} ({e})",
                repr(raw)
            ))
        })?;
        let Some(object) = parsed.as_object() else {
            return Err(bad(format!(
                "option {name}: {} must be a JSON object {{\"<recording id>\": position}}",
                repr(raw)
            )));
        };
        let mut positions = BTreeMap::new();
        for (key, value) in object {
            let id: i64 = key.trim().parse().map_err(|_| {
                bad(format!(
                    "option {name}: key {} is not a recording id",
                    repr(key)
                ))
            })?;
            let Some(value) = value.as_i64().filter(|_| !value.is_boolean()) else {
                return Err(bad(format!(
                    "option {name}: position {} of recording {id} is not an integer",
                    json_repr(value)
                )));
            };
            if value < EARLIEST {
                return Err(bad(format!(
                    "option {name}: position {value} of recording {id} is negative (-2 means earliest, -1 latest)"
                )));
            }
            if value >= 0 && value % 32 != 0 {
                return Err(bad(format!(
                    "option {name}: position {value} of recording {id} is not a frame boundary (positions are multiples of 32: use a row's position or a query's offset)"
                )));
            }
            positions.insert(id, value);
        }
        Ok(PositionSpec::ById(positions))
    }
}

/// `raw` as a number (with a fraction if `fraction`) times its unit's
/// factor, the whole text one number and one unit, spaces around; None if
/// it is not.
fn number_with_unit(
    raw: &str,
    fraction: bool,
    unit: fn(&str) -> Option<f64>,
    default_unit: f64,
) -> Option<f64> {
    let text = raw.trim().to_lowercase();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || (fraction && c == '.')))
        .unwrap_or(text.len());
    let (number, rest) = text.split_at(split);
    let valid = if fraction {
        // [0-9]*\.?[0-9]+
        let mut parts = number.splitn(2, '.');
        let whole = parts.next().unwrap_or("");
        match parts.next() {
            Some(frac) => !frac.is_empty() && !frac.contains('.'),
            None => !whole.is_empty(),
        }
    } else {
        !number.is_empty()
    };
    if !valid {
        return None;
    }
    let suffix = rest.trim_start();
    if !suffix.chars().all(|c| c.is_ascii_lowercase()) {
        return None;
    }
    let scale = if suffix.is_empty() {
        default_unit
    } else {
        unit(suffix)?
    };
    Some(number.parse::<f64>().ok()? * scale)
}

fn duration_unit(unit: &str) -> Option<f64> {
    Some(match unit {
        "us" | "usec" | "micro" | "micros" | "microsecond" | "microseconds" => 1e-6,
        "ms" | "msec" | "milli" | "millis" | "millisecond" | "milliseconds" => 1e-3,
        "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
        "h" | "hour" | "hours" => 3600.0,
        "d" | "day" | "days" => 86400.0,
        _ => return None,
    })
}

fn size_unit(unit: &str) -> Option<f64> {
    Some(match unit {
        "b" => 1.0,
        "k" | "kb" => 1024.0,
        "m" | "mb" => 1024.0 * 1024.0,
        "g" | "gb" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    })
}

/// A JSON value as Python's `repr` shows what `json.loads` made of it.
fn json_repr(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "None".into(),
        serde_json::Value::Bool(true) => "True".into(),
        serde_json::Value::Bool(false) => "False".into(),
        serde_json::Value::String(s) => repr(s),
        other => other.to_string(),
    }
}

/// A string as Python's `repr` shows it (how option values appear in the
/// messages).
pub fn repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> OptionMap {
        OptionMap::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn values_are_read_as_spark_writes_them_and_refused_naming_the_option() {
        let o = map(&[
            ("MAXTRIGGERDELAY", "1.5 min"),
            ("maxBytesPerTrigger", "64m"),
            ("x", "2"),
            ("b", "Yes"),
        ]);
        assert_eq!(o.seconds("maxTriggerDelay", 15.0).unwrap(), 90.0);
        assert_eq!(o.bytes("maxBytesPerTrigger", 32).unwrap(), Some(64 << 20));
        assert_eq!(o.int("x", None, Some(1), None).unwrap(), Some(2));
        assert!(o.boolean("b", false).unwrap());
        for (value, seconds) in [
            ("500ms", 0.5),
            ("10 seconds", 10.0),
            ("1h", 3600.0),
            (".5", 0.5),
        ] {
            assert_eq!(
                map(&[("d", value)]).seconds("d", 1.0).unwrap(),
                seconds,
                "{value}"
            );
        }
        fn err<T: std::fmt::Debug>(r: Result<T, PlanError>) -> String {
            match r {
                Err(PlanError::Option(t)) => t,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            err(map(&[("d", "soon")]).seconds("d", 1.0)),
            "option d: 'soon' is not a duration (e.g. 10s, 500ms, '10 seconds', 1h)"
        );
        assert_eq!(
            err(map(&[("d", "0s")]).seconds("d", 1.0)),
            "option d: '0s' must be positive"
        );
        assert!(err(map(&[("s", "1.5m")]).bytes("s", 32)).contains("is not a size"));
        assert_eq!(
            err(map(&[("s", "16")]).bytes("s", 32)),
            "option s: 16 is below the minimum 32"
        );
        assert_eq!(
            err(map(&[("i", "x")]).int("i", None, None, None)),
            "option i: 'x' is not an integer"
        );
        assert_eq!(
            err(map(&[("c", "aeron:pigeon")]).channel("c", None))
                .split(':')
                .take(2)
                .collect::<Vec<_>>(),
            ["option c", " 'aeron"]
        );
    }

    #[test]
    fn positions_are_earliest_latest_or_frame_boundaries_by_recording() {
        let p = |v: &str| map(&[("p", v)]).positions("p", PositionSpec::Earliest);
        assert_eq!(p(" Latest ").unwrap(), PositionSpec::Latest);
        assert_eq!(
            p(r#"{"3": 64, "4": -2}"#).unwrap(),
            PositionSpec::ById([(3, 64), (4, -2)].into_iter().collect())
        );
        for (v, says) in [
            (
                "soon",
                "option p: 'soon' is neither 'earliest', 'latest' nor JSON",
            ),
            ("[1]", "'[1]' must be a JSON object"),
            (r#"{"a": 0}"#, "key 'a' is not a recording id"),
            (r#"{"1": -5}"#, "position -5 of recording 1 is negative"),
            (
                r#"{"1": 33}"#,
                "position 33 of recording 1 is not a frame boundary",
            ),
            (
                r#"{"1": true}"#,
                "position True of recording 1 is not an integer",
            ),
            (
                r#"{"1": "x"}"#,
                "position 'x' of recording 1 is not an integer",
            ),
        ] {
            match p(v) {
                Err(PlanError::Option(t)) => assert!(t.contains(says), "{v}: {t}"),
                other => panic!("{v}: {other:?}"),
            }
        }
    }

    #[test]
    fn repr_is_pythons() {
        assert_eq!(repr("a'b"), "\"a'b\"");
        assert_eq!(repr("a'b\""), "'a\\'b\"'");
        assert_eq!(repr("1,x"), "'1,x'");
        assert_eq!(repr("t\tn\n"), "'t\\tn\\n'");
    }
}
