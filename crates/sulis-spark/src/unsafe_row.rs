//! Rows in Spark's `UnsafeRow` format, for the JVM source: the JVM points an
//! `UnsafeRow` at the bytes and decodes nothing itself.
//!
//! An `UnsafeRow` of n fields is a null bit set (one bit a field, in 64-bit
//! words), n 8-byte slots, then the variable-length values, each padded to
//! 8 bytes; little-endian. A fixed-width value sits at the start of its
//! slot, the rest zero; a binary value's slot holds its offset from the
//! row's start (high 32 bits) and its length (low 32 bits); a null's slot
//! is zero and its bit set. So a row's length is a multiple of 8.

use crate::row_shape::Cell;

fn padded(n: usize) -> usize {
    (n + 7) & !7
}

/// Bytes the row of `cells` takes.
pub fn row_length(cells: &[Cell]) -> usize {
    let fixed = cells.len().div_ceil(64) * 8 + cells.len() * 8;
    let var: usize = cells
        .iter()
        .map(|c| match c {
            Cell::Bytes(b) => padded(b.len()),
            _ => 0,
        })
        .sum();
    fixed + var
}

/// Writes the row of `cells` at the start of `out` (which must hold
/// [`row_length`] bytes); returns its length.
pub fn write_row(cells: &[Cell], out: &mut [u8]) -> usize {
    let n = cells.len();
    let bitset = n.div_ceil(64) * 8;
    let length = row_length(cells);
    let out = &mut out[..length];
    out[..bitset + n * 8].fill(0);
    let mut var = bitset + n * 8;
    for (i, c) in cells.iter().enumerate() {
        let slot = bitset + i * 8;
        let s = &mut out[slot..slot + 8];
        match *c {
            Cell::Null => {
                let word = i / 64 * 8;
                let mut bits = u64::from_le_bytes(out[word..word + 8].try_into().unwrap());
                bits |= 1 << (i % 64);
                out[word..word + 8].copy_from_slice(&bits.to_le_bytes());
            }
            Cell::Bytes(b) => {
                s.copy_from_slice(&(((var as u64) << 32) | b.len() as u64).to_le_bytes());
                out[var..var + b.len()].copy_from_slice(b);
                let end = var + padded(b.len());
                out[var + b.len()..end].fill(0);
                var = end;
            }
            Cell::Byte(v) => s[0] = v as u8,
            Cell::Boolean(v) => s[0] = v as u8,
            Cell::Short(v) => s[..2].copy_from_slice(&v.to_le_bytes()),
            Cell::Int(v) => s[..4].copy_from_slice(&v.to_le_bytes()),
            Cell::Float(v) => s[..4].copy_from_slice(&v.to_le_bytes()),
            Cell::Long(v) => s.copy_from_slice(&v.to_le_bytes()),
            Cell::Double(v) => s.copy_from_slice(&v.to_le_bytes()),
        }
    }
    length
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_its_null_bits_its_slots_then_its_padded_bytes() {
        let cells = [
            Cell::Bytes(b"abc"),
            Cell::Null,
            Cell::Int(-2),
            Cell::Long(7),
        ];
        assert_eq!(row_length(&cells), 8 + 4 * 8 + 8);
        let mut out = vec![0xffu8; 64];
        let n = write_row(&cells, &mut out);
        assert_eq!(n, 48);
        assert_eq!(u64::from_le_bytes(out[0..8].try_into().unwrap()), 0b10);
        assert_eq!(
            u64::from_le_bytes(out[8..16].try_into().unwrap()),
            (40 << 32) | 3
        );
        assert_eq!(&out[16..24], &[0; 8]);
        assert_eq!(&out[24..32], &[0xfe, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(&out[32..40], &7i64.to_le_bytes());
        assert_eq!(&out[40..48], b"abc\0\0\0\0\0");
        assert_eq!(out[48], 0xff); // nothing past the row
    }

    #[test]
    fn more_than_64_fields_take_two_words_of_null_bits() {
        let mut cells = vec![Cell::Long(1); 70];
        cells[65] = Cell::Null;
        let mut out = vec![0u8; row_length(&cells)];
        assert_eq!(write_row(&cells, &mut out), 16 + 70 * 8);
        assert_eq!(u64::from_le_bytes(out[8..16].try_into().unwrap()), 0b10);
    }
}
