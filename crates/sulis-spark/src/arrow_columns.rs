//! Rows as Arrow columns, for the Python source: each column's buffers in
//! Arrow's layout, which `pyarrow.Array.from_buffers` takes without a copy.
//!
//! A column has a validity bit map (bit set where a value is, none when no
//! value is null), then for a binary column int32 offsets (rows + 1) and the
//! bytes back to back, for a boolean column a bit map, for the others the
//! values little-endian, a null's as zero.

use crate::row_shape::{Cell, ColumnType};

/// One column's buffers.
#[derive(Debug, Default)]
pub struct ArrowColumn {
    /// Bit i set where row i has a value; empty while no value is null.
    pub validity: Vec<u8>,
    pub null_count: usize,
    /// A binary column's offsets (empty for the others).
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
}

/// Columns filled a row at a time (see the module doc).
#[derive(Debug)]
pub struct ArrowColumns {
    pub len: usize,
    pub types: Vec<ColumnType>,
    pub columns: Vec<ArrowColumn>,
}

fn set_bit(bits: &mut Vec<u8>, i: usize, on: bool) {
    if bits.len() <= i / 8 {
        bits.resize(i / 8 + 1, 0);
    }
    if on {
        bits[i / 8] |= 1 << (i % 8);
    }
}

impl ArrowColumns {
    /// Empty columns of `types`.
    pub fn new(types: Vec<ColumnType>) -> ArrowColumns {
        let columns = types
            .iter()
            .map(|t| ArrowColumn {
                offsets: if *t == ColumnType::Binary {
                    vec![0]
                } else {
                    Vec::new()
                },
                ..ArrowColumn::default()
            })
            .collect();
        ArrowColumns {
            len: 0,
            types,
            columns,
        }
    }

    /// Empties the columns, keeping what their buffers hold allocated.
    pub fn clear(&mut self) {
        self.len = 0;
        for (c, t) in self.columns.iter_mut().zip(&self.types) {
            c.validity.clear();
            c.null_count = 0;
            c.offsets.clear();
            if *t == ColumnType::Binary {
                c.offsets.push(0);
            }
            c.data.clear();
        }
    }

    /// Appends a row (one cell a column, of the column's type).
    pub fn push(&mut self, cells: &[Cell]) {
        let row = self.len;
        for ((c, t), cell) in self.columns.iter_mut().zip(&self.types).zip(cells) {
            if matches!(cell, Cell::Null) {
                if c.null_count == 0 {
                    // Every earlier row had a value.
                    c.validity = vec![0xff; row.div_ceil(8)];
                    if !row.is_multiple_of(8) {
                        c.validity[row / 8] = (1u8 << (row % 8)) - 1;
                    }
                }
                c.null_count += 1;
                set_bit(&mut c.validity, row, false);
            } else if c.null_count > 0 {
                set_bit(&mut c.validity, row, true);
            }
            match (*t, *cell) {
                (ColumnType::Binary, Cell::Bytes(b)) => {
                    c.data.extend_from_slice(b);
                    c.offsets.push(c.data.len() as i32);
                }
                (ColumnType::Binary, _) => c.offsets.push(c.data.len() as i32),
                (ColumnType::Boolean, v) => set_bit(&mut c.data, row, v == Cell::Boolean(true)),
                (_, Cell::Byte(v)) => c.data.push(v as u8),
                (_, Cell::Short(v)) => c.data.extend_from_slice(&v.to_le_bytes()),
                (_, Cell::Int(v)) => c.data.extend_from_slice(&v.to_le_bytes()),
                (_, Cell::Float(v)) => c.data.extend_from_slice(&v.to_le_bytes()),
                (_, Cell::Long(v)) => c.data.extend_from_slice(&v.to_le_bytes()),
                (_, Cell::Double(v)) => c.data.extend_from_slice(&v.to_le_bytes()),
                (t, _) => c.data.extend(std::iter::repeat_n(0, t.width())),
            }
        }
        self.len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_hold_arrows_buffers_and_a_validity_map_only_once_a_value_is_null() {
        let mut c = ArrowColumns::new(vec![
            ColumnType::Binary,
            ColumnType::Int,
            ColumnType::Boolean,
        ]);
        for i in 0..10 {
            let b = [i as u8];
            c.push(&[
                if i == 9 { Cell::Null } else { Cell::Bytes(&b) },
                Cell::Int(i),
                Cell::Boolean(i % 3 == 0),
            ]);
        }
        assert_eq!(c.len, 10);
        let v = &c.columns[0];
        assert_eq!(v.null_count, 1);
        assert_eq!(v.validity, [0xff, 0b01]);
        assert_eq!(v.offsets, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9]);
        assert_eq!(v.data, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
        let n = &c.columns[1];
        assert!(n.validity.is_empty());
        assert_eq!(n.data.len(), 40);
        assert_eq!(&n.data[36..], &9i32.to_le_bytes());
        assert_eq!(c.columns[2].data, [0b0100_1001, 0b10]);
    }

    #[test]
    fn cleared_columns_are_as_new_ones() {
        let types = vec![ColumnType::Binary, ColumnType::Long, ColumnType::Boolean];
        let mut c = ArrowColumns::new(types.clone());
        c.push(&[Cell::Null, Cell::Long(3), Cell::Boolean(true)]);
        c.push(&[Cell::Bytes(b"xy"), Cell::Null, Cell::Boolean(false)]);
        c.clear();
        c.push(&[Cell::Bytes(b"z"), Cell::Long(4), Cell::Boolean(true)]);
        let mut fresh = ArrowColumns::new(types);
        fresh.push(&[Cell::Bytes(b"z"), Cell::Long(4), Cell::Boolean(true)]);
        assert_eq!(c.len, 1);
        for (a, b) in c.columns.iter().zip(&fresh.columns) {
            assert_eq!(
                (&a.validity, a.null_count, &a.offsets, &a.data),
                (&b.validity, b.null_count, &b.offsets, &b.data)
            );
        }
    }

    #[test]
    fn a_null_fixed_width_value_takes_its_width_of_zeros() {
        let mut c = ArrowColumns::new(vec![ColumnType::Double]);
        c.push(&[Cell::Double(1.5)]);
        c.push(&[Cell::Null]);
        c.push(&[Cell::Double(2.5)]);
        let d = &c.columns[0];
        assert_eq!(d.data.len(), 24);
        assert_eq!(&d.data[8..16], &[0; 8]);
        assert_eq!(d.validity, [0b101]);
        assert_eq!(d.null_count, 1);
    }
}
