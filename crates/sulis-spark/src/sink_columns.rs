//! The columns a write of `format("sulis")` takes, checked once when the
//! write starts, for both sinks: a binary or string `value`, and where each
//! row goes — the `channel` and `streamId` options, or, where an option is
//! not set, each row's `channel` (string) and `stream_id` (integer)
//! columns, as Kafka's sink takes its `topic` option or column (the option
//! wins). With `stampTimestamp`, a `timestamp` column, if there is one,
//! must be a timestamp. Column types are Spark's simple strings (`binary`,
//! `string`, `int`, `bigint`, `timestamp`, ...).
//!
//! Also the texts of what a row can get wrong (a null target, a stream id
//! out of range, a stamp before 1970), which both sinks raise.

use crate::option_values::repr;
use crate::range_planner::PlanError;
use crate::writer_options::WriterOptions;
use sulis_concurrent::error_log::civil_date;

fn option(text: String) -> PlanError {
    PlanError::Option(text)
}

/// Checks the write's `columns` (name, Spark simple type) against `opts`.
pub fn check_sink_columns(
    columns: &[(String, String)],
    opts: &WriterOptions,
) -> Result<(), PlanError> {
    check_columns(
        columns,
        opts.channel.is_some(),
        opts.stream_id.is_some(),
        opts.stamp_timestamp,
    )
}

/// As [`check_sink_columns`], with what the options say: whether
/// `channel` and `streamId` are set, and `stampTimestamp`.
pub fn check_columns(
    columns: &[(String, String)],
    channel_option: bool,
    stream_option: bool,
    stamp_timestamp: bool,
) -> Result<(), PlanError> {
    let type_of = |name: &str| {
        columns
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    };
    let Some(value) = type_of("value") else {
        let names: Vec<String> = columns.iter().map(|(n, _)| repr(n)).collect();
        return Err(option(format!(
            "the sulis sink publishes a column named 'value' (binary or string); the data frame has [{}]",
            names.join(", ")
        )));
    };
    if value != "binary" && value != "string" {
        return Err(option(format!("the sulis sink publishes column 'value' as bytes: it must be binary or string, not {value} (cast it, or encode it, e.g. to_json)")));
    }
    if !channel_option {
        match type_of("channel") {
            None => return Err(option("option channel: required (the channel to publish on, e.g. aeron:ipc), or a string column 'channel' naming each row's".into())),
            Some("string") => {}
            Some(t) => {
                return Err(option(format!(
                    "column 'channel' must be a string (a channel URI), not {t}"
                )))
            }
        }
    }
    if !stream_option {
        match type_of("stream_id") {
            None => return Err(option("option streamId: required (the stream to publish on), or an integer column 'stream_id' naming each row's".into())),
            Some("int" | "bigint" | "smallint" | "tinyint") => {}
            Some(t) => {
                return Err(option(format!(
                    "column 'stream_id' must be an integer, not {t}"
                )))
            }
        }
    }
    if stamp_timestamp {
        if let Some(t) = type_of("timestamp") {
            if t != "timestamp" && t != "timestamp_ntz" {
                return Err(option(format!(
                    "option stampTimestamp: column 'timestamp' must be a timestamp, not {t}"
                )));
            }
        }
    }
    Ok(())
}

/// A row whose `channel` column is null where no option says where it goes.
pub fn null_channel(row: i64) -> String {
    format!("sulis sink: column 'channel' is null in row {row} of a batch, and no channel option is set")
}

/// A row whose `stream_id` column is null where no option says where it goes.
pub fn null_stream(row: i64) -> String {
    format!("sulis sink: column 'stream_id' is null in row {row} of a batch, and no streamId option is set")
}

/// A row whose `stream_id` is no 32-bit stream id.
pub fn bad_stream(row: i64, value: i64) -> String {
    format!("sulis sink: column 'stream_id' holds {value} (row {row} of a batch), which is not a 32-bit stream id")
}

/// A row whose `timestamp` (`micros` since the epoch) is before 1970: its
/// stamp would read back as none.
pub fn stamp_before_1970(row: i64, micros: i64) -> String {
    format!("option stampTimestamp: row {row} of this task's batch has timestamp {}, before 1970: a reserved value that is not positive reads back as no timestamp (includeTimestamp gives null); drop stampTimestamp or move such timestamps", utc(micros))
}

/// `micros` since the epoch as `YYYY-MM-DD HH:MM:SS.ffffff` (UTC).
pub fn utc(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let (days, s) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        micros.rem_euclid(1_000_000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> WriterOptions {
        WriterOptions::of(pairs)
    }

    fn cols(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    fn err(c: &[(&str, &str)], o: &WriterOptions) -> String {
        match check_sink_columns(&cols(c), o) {
            Err(PlanError::Option(t)) => t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn spark_s_own_options_of_a_streaming_write_are_taken() {
        // DataStreamWriter passes checkpointLocation and queryName to the sink as options.
        let o = opts(&[
            ("channel", "aeron:ipc"),
            ("streamId", "7"),
            ("checkpointLocation", "/tmp/ck"),
            ("queryName", "ticks"),
        ]);
        assert_eq!(o.stream_id, Some(7));
    }

    #[test]
    fn a_time_is_shown_in_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000000");
        assert_eq!(utc(-1), "1969-12-31 23:59:59.999999");
        assert_eq!(utc(1_750_000_000_123_456), "2025-06-15 15:06:40.123456");
        assert_eq!(utc(951_782_400_000_000), "2000-02-29 00:00:00.000000");
    }

    #[test]
    fn a_write_needs_a_value_and_a_target_by_option_or_column() {
        let fixed = opts(&[("channel", "aeron:ipc"), ("streamId", "7")]);
        assert!(check_sink_columns(&cols(&[("value", "binary")]), &fixed).is_ok());
        assert!(check_sink_columns(
            &cols(&[("value", "string"), ("stream_id", "double")]),
            &fixed
        )
        .is_ok());
        assert!(err(&[("v", "binary")], &fixed).contains("the data frame has ['v']"));
        assert!(err(&[("value", "int")], &fixed).contains("not int (cast it"));
        let open = opts(&[]);
        assert!(err(&[("value", "binary")], &open).starts_with("option channel: required"));
        assert_eq!(
            err(&[("value", "binary"), ("channel", "int")], &open),
            "column 'channel' must be a string (a channel URI), not int"
        );
        assert!(err(&[("value", "binary"), ("channel", "string")], &open)
            .starts_with("option streamId: required"));
        assert!(check_sink_columns(
            &cols(&[
                ("value", "binary"),
                ("channel", "string"),
                ("stream_id", "bigint")
            ]),
            &open
        )
        .is_ok());
        let stamped = opts(&[
            ("channel", "aeron:ipc"),
            ("streamId", "7"),
            ("stampTimestamp", "true"),
        ]);
        assert_eq!(
            err(&[("value", "binary"), ("timestamp", "bigint")], &stamped),
            "option stampTimestamp: column 'timestamp' must be a timestamp, not bigint"
        );
    }
}
