//! A column's type, as Spark names it: the rows' columns (`row_shape`) and
//! the fields a `valueSchema` reads from a payload (`value_layout`).

/// A column's type (Spark's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Binary,
    Byte,
    Short,
    Int,
    Long,
    Float,
    Double,
    Boolean,
    /// Microseconds since the epoch, UTC (in a payload: nanoseconds).
    Timestamp,
}

impl ColumnType {
    /// Spark's DDL name.
    pub fn ddl(self) -> &'static str {
        match self {
            ColumnType::Binary => "binary",
            ColumnType::Byte => "tinyint",
            ColumnType::Short => "smallint",
            ColumnType::Int => "int",
            ColumnType::Long => "bigint",
            ColumnType::Float => "float",
            ColumnType::Double => "double",
            ColumnType::Boolean => "boolean",
            ColumnType::Timestamp => "timestamp",
        }
    }

    /// Bytes a value takes, little-endian, in a payload and in an Arrow
    /// column (a boolean is one byte in a payload, a bit in Arrow); 0 for
    /// binary, whose length varies.
    pub fn width(self) -> usize {
        match self {
            ColumnType::Binary => 0,
            ColumnType::Byte | ColumnType::Boolean => 1,
            ColumnType::Short => 2,
            ColumnType::Int | ColumnType::Float => 4,
            ColumnType::Long | ColumnType::Double | ColumnType::Timestamp => 8,
        }
    }
}
