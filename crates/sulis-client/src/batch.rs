//! `Batch`: fragments copied out of a log in one go, in Arrow's layout, so
//! Python (numpy, pyarrow) reads them without a copy. Filled by
//! `Image::poll_into` and `Subscription::poll_batch_into`; depends on neither.

/// Fragments copied out of the log in one go: payloads back to back plus
/// per-fragment columns. `offsets` has `len() + 1` entries (Arrow's layout),
/// so `data[offsets[i]..offsets[i+1]]` is fragment `i`.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    /// Payload bytes.
    pub data: Vec<u8>,
    /// Start of each payload in `data`, plus the end.
    pub offsets: Vec<i32>,
    /// Stream position after each fragment.
    pub positions: Vec<i64>,
    /// Session id of each fragment.
    pub session_ids: Vec<i32>,
    /// Frame flags of each fragment.
    pub flags: Vec<u8>,
    /// Reserved value of each fragment.
    pub reserved_values: Vec<i64>,
}

impl Batch {
    /// An empty batch with room for `fragments`.
    pub fn with_capacity(fragments: usize, bytes: usize) -> Batch {
        let mut offsets = Vec::with_capacity(fragments + 1);
        offsets.push(0);
        Batch {
            data: Vec::with_capacity(bytes),
            offsets,
            positions: Vec::with_capacity(fragments),
            session_ids: Vec::with_capacity(fragments),
            flags: Vec::with_capacity(fragments),
            reserved_values: Vec::with_capacity(fragments),
        }
    }

    /// Empties the batch, keeping its memory for the next fill.
    pub fn clear(&mut self) {
        self.data.clear();
        self.offsets.clear();
        self.offsets.push(0);
        self.positions.clear();
        self.session_ids.clear();
        self.flags.clear();
        self.reserved_values.clear();
    }

    /// Number of fragments.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// Appends one fragment: its payload, the stream position after it,
    /// and its header's session id, flags and reserved value (what an
    /// image poll copies; the archive's segment-file reader fills batches
    /// the same way).
    #[inline(always)]
    pub fn push(
        &mut self,
        payload: &[u8],
        position: i64,
        session_id: i32,
        flags: u8,
        reserved: i64,
    ) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.data.extend_from_slice(payload);
        self.offsets.push(self.data.len() as i32);
        self.positions.push(position);
        self.session_ids.push(session_id);
        self.flags.push(flags);
        self.reserved_values.push(reserved);
    }

    /// Fragment `i`'s payload.
    pub fn get(&self, i: usize) -> &[u8] {
        &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}
