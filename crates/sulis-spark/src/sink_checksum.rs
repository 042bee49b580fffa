//! What the exactly-once sink's journal says of a run of rows: CRC32 of
//! their values' bytes and, apart, of their lengths (little-endian int32),
//! and how many. A re-run checks the rows it skips against it.

/// A checksum of values taken in order, whatever runs they come in.
#[derive(Clone, Default)]
pub struct Checksum {
    data: crc32fast::Hasher,
    lengths: crc32fast::Hasher,
    count: i64,
}

impl Checksum {
    pub fn new() -> Checksum {
        Checksum::default()
    }

    /// Adds one value.
    pub fn update(&mut self, value: &[u8]) {
        self.data.update(value);
        self.lengths.update(&(value.len() as i32).to_le_bytes());
        self.count += 1;
    }

    /// How many values it took.
    pub fn count(&self) -> i64 {
        self.count
    }

    /// The journal's text: both CRCs, eight hex digits each.
    pub fn value(&self) -> String {
        format!(
            "{:08x}{:08x}",
            self.data.clone().finalize(),
            self.lengths.clone().finalize()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_any_size_give_one_value_and_lengths_count() {
        let mut whole = Checksum::new();
        for v in [&b"ab"[..], b"", b"cde"] {
            whole.update(v);
        }
        // zlib.crc32(b"abcde") and of the lengths 2, 0, 3 as int32s.
        assert_eq!(
            whole.value(),
            format!("{:08x}{:08x}", 0x8587d865u32, {
                let mut h = crc32fast::Hasher::new();
                h.update(&[2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0]);
                h.finalize()
            })
        );
        assert_eq!(whole.count(), 3);
        // The same bytes cut otherwise are other rows.
        let mut other = Checksum::new();
        for v in [&b"a"[..], b"b", b"cde"] {
            other.update(v);
        }
        assert_ne!(other.value(), whole.value());
        assert_eq!(Checksum::new().value(), "0000000000000000");
    }
}
