//! The rows of `format("sulis")`: which messages are rows and what their
//! columns hold, once for both implementations of the source.
//!
//! - A recording's rows: `value` (or the [`ValueLayout`]'s fields), then
//!   `recording_id`, `stream_id`, `session_id`, `position` (where the
//!   message ends), `reserved_value`, and with `includeTimestamp` a
//!   `timestamp`: the publisher's stamp, epoch nanoseconds in the reserved
//!   value, null where it is not positive.
//! - A cluster member's log (`clusterDir`): the log's session messages
//!   only (the clients' messages and the services' `cluster.offer` into the
//!   log: Aeron's SessionMessageHeader, template 1 of schema 111), the
//!   32-byte header decoded into `cluster_session_id`, `leadership_term_id`
//!   and `timestamp` (cluster time, ms) and stripped from `value`, then
//!   `recording_id` and `position` (a log position). The log's other
//!   entries (session opens and closes, timers, terms, cluster actions) are
//!   not rows.
//!
//! [`RowShape::rows`] hands each row's cells to a writer: Arrow columns for
//! the Python source ([`crate::arrow_columns`]), Spark's `UnsafeRow`s for
//! the JVM one ([`crate::unsafe_row`]).

pub use crate::column_type::ColumnType;
use crate::option_values::{bad, repr};
use crate::range_planner::PlanError;
use crate::value_layout::{Mode, ValueLayout};
use sulis_client::Batch;

/// Aeron Cluster's schema and the SessionMessageHeader: an 8-byte SBE
/// header and a 24-byte block (leadershipTermId, clusterSessionId,
/// timestamp).
pub const SCHEMA_ID: u16 = 111;
pub const SESSION_MESSAGE_TEMPLATE_ID: u16 = 1;
pub const SESSION_HEADER_LENGTH: usize = 32;

/// A cluster log's own columns, after the value's.
pub const CLUSTER_COLUMNS: [&str; 5] = [
    "cluster_session_id",
    "leadership_term_id",
    "recording_id",
    "position",
    "timestamp",
];

/// One value of a row (a timestamp is a `Long` of microseconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    Null,
    Bytes(&'a [u8]),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Boolean(bool),
}

/// The recording a range reads (its rows' constant columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeIds {
    pub recording_id: i64,
    pub stream_id: i32,
    pub session_id: i32,
}

/// A row that cannot be made (`valueSchema`'s FAILFAST).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError(pub String);

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `valueSchema` with `mode` and `columnNameOfCorruptRecord`, as the
/// reader's options give them (`reader_options` checks them), parsed into
/// columns by [`RowShape::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueSchemaOptions {
    pub schema: String,
    pub mode: String,
    pub corrupt_column: String,
}

/// What a read's rows are (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct RowShape {
    pub layout: Option<ValueLayout>,
    pub timestamp: bool,
    pub cluster: bool,
}

/// Most cells a row has: the layout's fields, the corrupt-record column
/// and seven more.
const INLINE_CELLS: usize = 16;

impl RowShape {
    /// The shape `valueSchema` (with `mode` and `columnNameOfCorruptRecord`),
    /// `includeTimestamp` (not a column of a cluster log's rows) and
    /// `clusterDir` give; the error names the option.
    pub fn new(
        value_schema: Option<&ValueSchemaOptions>,
        include_timestamp: bool,
        cluster: bool,
    ) -> Result<RowShape, PlanError> {
        let layout = value_schema
            .map(|v| ValueLayout::parse(&v.schema, &v.mode, &v.corrupt_column))
            .transpose()?;
        if let Some(l) = &layout {
            if include_timestamp && l.fields.iter().any(|(n, _)| n == "timestamp") {
                return Err(bad(
                    "option includeTimestamp: valueSchema already has a column named 'timestamp'"
                        .into(),
                ));
            }
            if cluster {
                let names = l.fields.iter().map(|(n, _)| n.as_str());
                if let Some(clash) = names
                    .chain([l.corrupt_column.as_str()])
                    .find(|n| CLUSTER_COLUMNS.contains(n))
                {
                    let mut taken = CLUSTER_COLUMNS.to_vec();
                    taken.sort();
                    return Err(bad(format!(
                        "option valueSchema: column {} is a cluster log's own column ({})",
                        repr(clash),
                        taken.join(", ")
                    )));
                }
            }
        }
        Ok(RowShape {
            layout,
            timestamp: include_timestamp && !cluster,
            cluster,
        })
    }

    /// Whether a row is a message's own columns and nothing more: its value,
    /// the range's ids, its position and reserved value, as a `Batch` holds
    /// them (no `valueSchema`, no `includeTimestamp`, no cluster log).
    pub fn is_plain(&self) -> bool {
        self.layout.is_none() && !self.timestamp && !self.cluster
    }

    /// The columns, in order: name and type.
    pub fn columns(&self) -> Vec<(String, ColumnType)> {
        let mut out: Vec<(String, ColumnType)> = match &self.layout {
            None => vec![("value".into(), ColumnType::Binary)],
            Some(l) => {
                let mut v: Vec<(String, ColumnType)> =
                    l.fields.iter().map(|(n, t)| (n.clone(), *t)).collect();
                if let Some(c) = l.corrupt() {
                    v.push((c.to_string(), ColumnType::Binary));
                }
                v
            }
        };
        let meta: &[(&str, ColumnType)] = if self.cluster {
            &[
                ("cluster_session_id", ColumnType::Long),
                ("leadership_term_id", ColumnType::Long),
                ("recording_id", ColumnType::Long),
                ("position", ColumnType::Long),
                ("timestamp", ColumnType::Timestamp),
            ]
        } else {
            &[
                ("recording_id", ColumnType::Long),
                ("stream_id", ColumnType::Int),
                ("session_id", ColumnType::Int),
                ("position", ColumnType::Long),
                ("reserved_value", ColumnType::Long),
            ]
        };
        out.extend(meta.iter().map(|(n, t)| (n.to_string(), *t)));
        if self.timestamp {
            out.push(("timestamp".into(), ColumnType::Timestamp));
        }
        out
    }

    /// The columns as a Spark DDL string (both sources' schema).
    pub fn ddl(&self) -> String {
        let parts: Vec<String> = self
            .columns()
            .iter()
            .map(|(n, t)| format!("{n} {}", t.ddl()))
            .collect();
        parts.join(", ")
    }

    /// Hands `row` the message index and cells of each row among the
    /// messages of `batch` from `from` on, until `row` returns false (that
    /// message is not taken); returns the index of the first message not
    /// taken (`batch.len()` when all were).
    pub fn rows(
        &self,
        batch: &Batch,
        from: usize,
        ids: &RangeIds,
        mut row: impl FnMut(usize, &[Cell]) -> bool,
    ) -> Result<usize, RowError> {
        let mut cells: Vec<Cell> = Vec::with_capacity(INLINE_CELLS);
        for i in from..batch.len() {
            let mut value = batch.get(i);
            let position = batch.positions[i];
            let reserved = batch.reserved_values[i];
            let mut header = None;
            if self.cluster {
                match session_message(value) {
                    Some(h) => {
                        header = Some(h);
                        value = &value[SESSION_HEADER_LENGTH..];
                    }
                    None => continue,
                }
            }
            cells.clear();
            match &self.layout {
                None => cells.push(Cell::Bytes(value)),
                Some(l) if value.len() == l.size => {
                    for ((_, t), at) in l.fields.iter().zip(&l.offsets) {
                        cells.push(field(*t, &value[*at..*at + t.width()]));
                    }
                    if l.corrupt().is_some() {
                        cells.push(Cell::Null);
                    }
                }
                Some(l) => match l.mode {
                    Mode::FailFast => {
                        return Err(RowError(l.malformed(
                            ids.recording_id,
                            position,
                            value.len(),
                        )))
                    }
                    Mode::DropMalformed => continue,
                    Mode::Permissive => {
                        cells.extend(l.fields.iter().map(|_| Cell::Null));
                        cells.push(Cell::Bytes(value));
                    }
                },
            }
            match header {
                Some((term, session, time_ms)) => cells.extend([
                    Cell::Long(session),
                    Cell::Long(term),
                    Cell::Long(ids.recording_id),
                    Cell::Long(position),
                    Cell::Long(time_ms.wrapping_mul(1000)),
                ]),
                None => {
                    cells.extend([
                        Cell::Long(ids.recording_id),
                        Cell::Int(ids.stream_id),
                        Cell::Int(ids.session_id),
                        Cell::Long(position),
                        Cell::Long(reserved),
                    ]);
                    if self.timestamp {
                        cells.push(if reserved > 0 {
                            Cell::Long(reserved / 1000)
                        } else {
                            Cell::Null
                        });
                    }
                }
            }
            if !row(i, &cells) {
                return Ok(i);
            }
        }
        Ok(batch.len())
    }
}

fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    b[..N].try_into().expect("a field's width")
}

/// A field's cell from its bytes.
fn field(t: ColumnType, b: &[u8]) -> Cell<'_> {
    match t {
        ColumnType::Byte => Cell::Byte(b[0] as i8),
        ColumnType::Boolean => Cell::Boolean(b[0] != 0),
        ColumnType::Short => Cell::Short(i16::from_le_bytes(le(b))),
        ColumnType::Int => Cell::Int(i32::from_le_bytes(le(b))),
        ColumnType::Float => Cell::Float(f32::from_le_bytes(le(b))),
        ColumnType::Long => Cell::Long(i64::from_le_bytes(le(b))),
        ColumnType::Double => Cell::Double(f64::from_le_bytes(le(b))),
        // Nanoseconds to microseconds, rounded down (before the epoch too).
        ColumnType::Timestamp => Cell::Long(i64::from_le_bytes(le(b)).div_euclid(1000)),
        ColumnType::Binary => Cell::Bytes(b),
    }
}

/// A log entry's SessionMessageHeader: (leadership term, cluster session,
/// timestamp in ms), None when the entry is not a session message.
pub fn session_message(entry: &[u8]) -> Option<(i64, i64, i64)> {
    if entry.len() < SESSION_HEADER_LENGTH {
        return None;
    }
    let u16_at = |at: usize| u16::from_le_bytes([entry[at], entry[at + 1]]);
    let i64_at = |at: usize| i64::from_le_bytes(le(&entry[at..]));
    (u16_at(2) == SESSION_MESSAGE_TEMPLATE_ID && u16_at(4) == SCHEMA_ID)
        .then(|| (i64_at(8), i64_at(16), i64_at(24)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(messages: &[(&[u8], i64, i64)]) -> Batch {
        let mut b = Batch::with_capacity(messages.len(), 1024);
        for (m, position, reserved) in messages {
            b.data.extend_from_slice(m);
            b.offsets.push(b.data.len() as i32);
            b.positions.push(*position);
            b.session_ids.push(5);
            b.flags.push(0xc0);
            b.reserved_values.push(*reserved);
        }
        b
    }

    const IDS: RangeIds = RangeIds {
        recording_id: 9,
        stream_id: 1001,
        session_id: 5,
    };

    fn collect(shape: &RowShape, b: &Batch) -> Result<Vec<Vec<String>>, RowError> {
        let mut out = Vec::new();
        shape.rows(b, 0, &IDS, |_, cells| {
            out.push(cells.iter().map(|c| format!("{c:?}")).collect());
            true
        })?;
        Ok(out)
    }

    fn schema(text: &str, mode: &str) -> ValueSchemaOptions {
        ValueSchemaOptions {
            schema: text.into(),
            mode: mode.into(),
            corrupt_column: "_corrupt".into(),
        }
    }

    fn session_entry(term: i64, session: i64, time_ms: i64, payload: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; 32];
        e[0..2].copy_from_slice(&24u16.to_le_bytes());
        e[2..4].copy_from_slice(&SESSION_MESSAGE_TEMPLATE_ID.to_le_bytes());
        e[4..6].copy_from_slice(&SCHEMA_ID.to_le_bytes());
        e[8..16].copy_from_slice(&term.to_le_bytes());
        e[16..24].copy_from_slice(&session.to_le_bytes());
        e[24..32].copy_from_slice(&time_ms.to_le_bytes());
        e.extend_from_slice(payload);
        e
    }

    #[test]
    fn a_recordings_rows_are_its_messages_with_their_metadata() {
        let shape = RowShape::new(None, true, false).unwrap();
        assert_eq!(
            shape.ddl(),
            "value binary, recording_id bigint, stream_id int, session_id int, position bigint, \
             reserved_value bigint, timestamp timestamp"
        );
        let b = batch(&[(b"ab", 64, 1_700_000_000_123_456_789), (b"", 128, 0)]);
        let rows = collect(&shape, &b).unwrap();
        assert_eq!(
            rows[0],
            [
                "Bytes([97, 98])",
                "Long(9)",
                "Int(1001)",
                "Int(5)",
                "Long(64)",
                "Long(1700000000123456789)",
                "Long(1700000000123456)"
            ]
        );
        assert_eq!(rows[1][6], "Null"); // not stamped
    }

    #[test]
    fn a_value_schema_decodes_fields_and_its_mode_says_what_a_malformed_payload_does() {
        let mut good = Vec::new();
        good.extend_from_slice(&7i32.to_le_bytes());
        good.extend_from_slice(&100.5f64.to_le_bytes());
        good.push(1);
        good.extend_from_slice(&(-1500i64).to_le_bytes());
        let b = batch(&[(&good, 64, 0), (b"short", 128, 0), (&good, 192, 0)]);
        let text = "id int, price double, ok boolean, at timestamp";

        let fail = RowShape::new(Some(&schema(text, "FAILFAST")), false, false).unwrap();
        assert_eq!(
            collect(&fail, &b).unwrap_err().0,
            "valueSchema: recording 9, message ending at position 128 is 5 bytes, the layout (id int, \
             price double, ok boolean, at timestamp) takes 21 (mode FAILFAST; PERMISSIVE or \
             DROPMALFORMED keep the query going)"
        );

        let drop = RowShape::new(Some(&schema(text, "DROPMALFORMED")), false, false).unwrap();
        let rows = collect(&drop, &b).unwrap();
        assert_eq!(rows.len(), 2);
        // -1500 ns is -2 us, rounded down as Python's floor division does.
        assert_eq!(
            rows[0][..4],
            ["Int(7)", "Double(100.5)", "Boolean(true)", "Long(-2)"]
        );

        let keep = RowShape::new(Some(&schema(text, "PERMISSIVE")), false, false).unwrap();
        assert_eq!(
            keep.ddl(),
            "id int, price double, ok boolean, at timestamp, _corrupt binary, recording_id bigint, \
             stream_id int, session_id int, position bigint, reserved_value bigint"
        );
        let rows = collect(&keep, &b).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0][4], "Null");
        assert_eq!(
            rows[1][..5],
            [
                "Null",
                "Null",
                "Null",
                "Null",
                "Bytes([115, 104, 111, 114, 116])"
            ]
        );
    }

    #[test]
    fn a_cluster_logs_rows_are_its_session_messages_with_their_header_in_columns() {
        let shape = RowShape::new(None, true, true).unwrap();
        assert_eq!(
            shape.ddl(),
            "value binary, cluster_session_id bigint, leadership_term_id bigint, recording_id bigint, \
             position bigint, timestamp timestamp"
        );
        let msg = session_entry(3, 42, 1_700_000_000_000, b"hi");
        let mut timer = session_entry(3, 42, 0, b"");
        timer[2] = 20; // another template
        let b = batch(&[(&msg, 96, 0), (&timer, 160, 0), (b"tiny", 192, 0)]);
        let rows = collect(&shape, &b).unwrap();
        assert_eq!(
            rows,
            [[
                "Bytes([104, 105])",
                "Long(42)",
                "Long(3)",
                "Long(9)",
                "Long(96)",
                "Long(1700000000000000)"
            ]]
        );
    }

    #[test]
    fn a_writer_that_is_full_leaves_the_message_for_the_next_call() {
        let shape = RowShape::new(None, false, false).unwrap();
        let b = batch(&[(b"a", 32, 0), (b"b", 64, 0), (b"c", 96, 0)]);
        let mut taken = 0;
        let next = shape
            .rows(&b, 0, &IDS, |_, _| {
                taken += 1;
                taken <= 2
            })
            .unwrap();
        assert_eq!(next, 2);
        assert_eq!(shape.rows(&b, next, &IDS, |_, _| true).unwrap(), 3);
    }

    #[test]
    fn columns_that_clash_are_named_as_the_python_source_named_them() {
        let err = |v: &ValueSchemaOptions, ts, cluster| match RowShape::new(Some(v), ts, cluster) {
            Err(PlanError::Option(t)) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            err(&schema("timestamp long", "FAILFAST"), true, false),
            "option includeTimestamp: valueSchema already has a column named 'timestamp'"
        );
        assert_eq!(
            err(&schema("price double, timestamp timestamp", "FAILFAST"), false, true),
            "option valueSchema: column 'timestamp' is a cluster log's own column (cluster_session_id, \
             leadership_term_id, position, recording_id, timestamp)"
        );
    }
}
