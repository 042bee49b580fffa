//! `valueSchema`: fixed-layout little-endian payloads as typed columns.
//!
//! Many market-data and telemetry feeds send packed structs. With
//! `.option("valueSchema", "instrument int, price double, qty int, event_time timestamp")`
//! the `value` column is replaced by one column per field, read from the
//! payload's bytes (fields back to back, no padding):
//!
//! ```text
//! offset 0        4                12       16                  24
//!        +--------+----------------+--------+-------------------+
//!        | int32  | float64        | int32  | int64 (ns, UTC)   |
//!        +--------+----------------+--------+-------------------+
//!          instrument price          qty      event_time
//! ```
//!
//! Types: `byte`/`tinyint` (1), `short`/`smallint` (2), `int`/`integer`
//! (4), `long`/`bigint` (8), `float` (4), `double` (8), `boolean` (1),
//! `timestamp` (8: nanoseconds since the Unix epoch, read as Spark's
//! microsecond timestamps, rounded down).
//!
//! A payload whose length is not the layout's size is malformed; `mode`
//! says what happens, with the names and meanings of Spark's JSON and CSV
//! readers: `FAILFAST` (the default) fails the query naming the recording
//! and the message's position; `PERMISSIVE` makes the row's fields null and
//! puts its raw bytes in an extra binary column, `columnNameOfCorruptRecord`
//! (`_corrupt`), null on well-formed rows; `DROPMALFORMED` leaves the row
//! out.

use crate::column_type::ColumnType;
use crate::option_values::{bad, repr};
use crate::range_planner::PlanError;

/// `mode`: what a malformed payload does (Spark's names).
pub const MODES: [&str; 3] = ["FAILFAST", "PERMISSIVE", "DROPMALFORMED"];

/// The metadata columns that follow the value's (a field may not take
/// their names).
pub const META_COLUMNS: [&str; 5] = [
    "recording_id",
    "stream_id",
    "session_id",
    "position",
    "reserved_value",
];

/// The names `valueSchema` accepts, each with its type.
const TYPE_NAMES: [(&str, ColumnType); 12] = [
    ("bigint", ColumnType::Long),
    ("boolean", ColumnType::Boolean),
    ("byte", ColumnType::Byte),
    ("double", ColumnType::Double),
    ("float", ColumnType::Float),
    ("int", ColumnType::Int),
    ("integer", ColumnType::Int),
    ("long", ColumnType::Long),
    ("short", ColumnType::Short),
    ("smallint", ColumnType::Short),
    ("timestamp", ColumnType::Timestamp),
    ("tinyint", ColumnType::Byte),
];

/// What a malformed payload does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    FailFast,
    Permissive,
    DropMalformed,
}

/// A parsed `valueSchema` with its `mode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueLayout {
    pub fields: Vec<(String, ColumnType)>,
    /// Where each field starts in the payload.
    pub offsets: Vec<usize>,
    /// Bytes a well-formed payload has.
    pub size: usize,
    pub mode: Mode,
    pub corrupt_column: String,
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl ValueLayout {
    /// `"name type, name type, ..."` (types as in the module doc) with
    /// `mode` and `columnNameOfCorruptRecord`; the error names the option.
    pub fn parse(text: &str, mode: &str, corrupt_column: &str) -> Result<ValueLayout, PlanError> {
        let mut fields: Vec<(String, ColumnType)> = Vec::new();
        let taken = |fields: &[(String, ColumnType)], name: &str| {
            fields.iter().any(|(n, _)| n == name) || META_COLUMNS.contains(&name)
        };
        for part in text.split(',') {
            let words: Vec<&str> = part.split_whitespace().collect();
            let [name, t] = words[..] else {
                return Err(bad(format!(
                    "option valueSchema: {} is not 'name type' (e.g. 'price double')",
                    repr(part.trim())
                )));
            };
            if !is_name(name) {
                return Err(bad(format!(
                    "option valueSchema: {} is not a column name",
                    repr(name)
                )));
            }
            let lower = t.to_lowercase();
            let Some(&(_, ty)) = TYPE_NAMES.iter().find(|(n, _)| *n == lower) else {
                let names: Vec<&str> = TYPE_NAMES.iter().map(|(n, _)| *n).collect();
                return Err(bad(format!(
                    "option valueSchema: type {} of {} is not one of {}",
                    repr(t),
                    repr(name),
                    names.join(", ")
                )));
            };
            if taken(&fields, name) {
                return Err(bad(format!(
                    "option valueSchema: column {} is named twice",
                    repr(name)
                )));
            }
            fields.push((name.to_string(), ty));
        }
        let mode = match mode.trim().to_uppercase().as_str() {
            "FAILFAST" => Mode::FailFast,
            "PERMISSIVE" => Mode::Permissive,
            "DROPMALFORMED" => Mode::DropMalformed,
            other => {
                return Err(bad(format!(
                    "option mode: {} is not one of {}",
                    repr(other),
                    MODES.join(", ")
                )))
            }
        };
        if mode == Mode::Permissive {
            if !is_name(corrupt_column) {
                return Err(bad(format!(
                    "option columnNameOfCorruptRecord: {} is not a column name",
                    repr(corrupt_column)
                )));
            }
            if taken(&fields, corrupt_column) {
                return Err(bad(format!(
                    "option columnNameOfCorruptRecord: column {} is named twice",
                    repr(corrupt_column)
                )));
            }
        }
        let mut offsets = Vec::with_capacity(fields.len());
        let mut size = 0;
        for (_, t) in &fields {
            offsets.push(size);
            size += t.width();
        }
        Ok(ValueLayout {
            fields,
            offsets,
            size,
            mode,
            corrupt_column: corrupt_column.to_string(),
        })
    }

    /// The corrupt-record column, in PERMISSIVE mode.
    pub fn corrupt(&self) -> Option<&str> {
        (self.mode == Mode::Permissive).then_some(self.corrupt_column.as_str())
    }

    /// The fields as Spark DDL (and the corrupt-record column).
    pub fn ddl(&self) -> String {
        let text: Vec<String> = self
            .fields
            .iter()
            .map(|(n, t)| format!("{n} {}", t.ddl()))
            .collect();
        let text = text.join(", ");
        match self.corrupt() {
            Some(c) => format!("{text}, {c} binary"),
            None => text,
        }
    }

    /// Why a payload of `length` bytes ending at `position` fails the query
    /// (FAILFAST).
    pub fn malformed(&self, recording_id: i64, position: i64, length: usize) -> String {
        format!(
            "valueSchema: recording {recording_id}, message ending at position {position} is {length} bytes, \
             the layout ({}) takes {} (mode FAILFAST; PERMISSIVE or DROPMALFORMED keep the query going)",
            self.ddl(),
            self.size
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str, mode: &str, corrupt: &str) -> String {
        match ValueLayout::parse(text, mode, corrupt) {
            Err(PlanError::Option(t)) => t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_layout_has_its_fields_back_to_back() {
        let l = ValueLayout::parse(
            "instrument int, price DOUBLE, qty int, event_time timestamp",
            "failfast",
            "_corrupt",
        )
        .unwrap();
        assert_eq!(l.offsets, vec![0, 4, 12, 16]);
        assert_eq!(l.size, 24);
        assert_eq!(l.mode, Mode::FailFast);
        assert_eq!(
            l.ddl(),
            "instrument int, price double, qty int, event_time timestamp"
        );
        let p = ValueLayout::parse("a tinyint, b boolean", " Permissive ", "raw").unwrap();
        assert_eq!(p.ddl(), "a tinyint, b boolean, raw binary");
        assert_eq!(p.size, 2);
    }

    #[test]
    fn a_bad_layout_is_named_as_the_python_source_named_it() {
        assert_eq!(
            err("price", "FAILFAST", "_corrupt"),
            "option valueSchema: 'price' is not 'name type' (e.g. 'price double')"
        );
        assert_eq!(
            err("1x int", "FAILFAST", "_corrupt"),
            "option valueSchema: '1x' is not a column name"
        );
        assert_eq!(
            err("price decimal", "FAILFAST", "_corrupt"),
            "option valueSchema: type 'decimal' of 'price' is not one of bigint, boolean, byte, double, \
             float, int, integer, long, short, smallint, timestamp, tinyint"
        );
        assert_eq!(
            err("a int, a long", "FAILFAST", "_corrupt"),
            "option valueSchema: column 'a' is named twice"
        );
        assert_eq!(
            err("position long", "FAILFAST", "_corrupt"),
            "option valueSchema: column 'position' is named twice"
        );
        assert_eq!(
            err("a int", "lenient", "_corrupt"),
            "option mode: 'LENIENT' is not one of FAILFAST, PERMISSIVE, DROPMALFORMED"
        );
        assert_eq!(
            err("a int", "PERMISSIVE", "position"),
            "option columnNameOfCorruptRecord: column 'position' is named twice"
        );
        assert_eq!(
            err("a int", "PERMISSIVE", "no good"),
            "option columnNameOfCorruptRecord: 'no good' is not a column name"
        );
        // Not checked unless PERMISSIVE.
        assert!(ValueLayout::parse("a int", "DROPMALFORMED", "position").is_ok());
    }
}
