//! Fragments of successive polls (a replay's or the segment files') into
//! whole messages of one range `(start, end]`: a message is kept when the
//! position after its last fragment, its `position`, lies in the range.
//! A message begun in one batch and ended in a later one is carried over;
//! its reserved value is its first fragment's.

use sulis_client::Batch;

const BEGIN: u8 = 0x80;
const END: u8 = 0x40;
const UNFRAGMENTED: u8 = BEGIN | END;

/// The messages of one range, assembled (see the module doc).
pub struct MessageAssembler {
    recording_id: i64,
    start: i64,
    end: i64,
    /// A message begun in an earlier batch: its bytes and reserved value.
    pending: Option<(Vec<u8>, i64, i32)>,
}

impl MessageAssembler {
    /// Messages of recording `recording_id` ending in `(start, end]`.
    pub fn new(recording_id: i64, start: i64, end: i64) -> Self {
        MessageAssembler {
            recording_id,
            start,
            end,
            pending: None,
        }
    }

    /// The whole messages of `fragments` in the range, as a batch with
    /// one entry per message (flags BEGIN|END). When every fragment is a
    /// whole message (the usual case) `fragments` itself becomes the
    /// output, trimmed to the range in place, and `out` is left empty for
    /// the next call: no byte is copied.
    pub fn assemble(&mut self, fragments: &mut Batch, out: &mut Batch) -> Result<(), String> {
        out.clear();
        let n = fragments.len();
        if n == 0 {
            return Ok(());
        }
        if self.pending.is_none() && fragments.flags.iter().all(|&f| f == UNFRAGMENTED) {
            let lo = fragments.positions.partition_point(|&p| p <= self.start);
            let hi = fragments.positions.partition_point(|&p| p <= self.end);
            trim(fragments, lo, hi.max(lo));
            std::mem::swap(fragments, out);
            return Ok(());
        }
        for i in 0..n {
            let flags = fragments.flags[i];
            let payload = fragments.get(i);
            let position = fragments.positions[i];
            if flags & BEGIN != 0 {
                if self.pending.is_some() {
                    return Err(self.out_of_order(position));
                }
                if flags & END != 0 {
                    self.keep(
                        out,
                        payload,
                        position,
                        fragments.reserved_values[i],
                        fragments.session_ids[i],
                    );
                    continue;
                }
                self.pending = Some((
                    payload.to_vec(),
                    fragments.reserved_values[i],
                    fragments.session_ids[i],
                ));
                continue;
            }
            let Some((bytes, _, _)) = self.pending.as_mut() else {
                return Err(self.out_of_order(position));
            };
            bytes.extend_from_slice(payload);
            if flags & END != 0 {
                let (bytes, reserved, session) = self.pending.take().expect("pending above");
                self.keep(out, &bytes, position, reserved, session);
            }
        }
        Ok(())
    }

    fn keep(&self, out: &mut Batch, payload: &[u8], position: i64, reserved: i64, session: i32) {
        if self.start < position && position <= self.end {
            out.push(payload, position, session, UNFRAGMENTED, reserved);
        }
    }

    fn out_of_order(&self, position: i64) -> String {
        format!(
            "recording {}: fragments out of order near position {position} (BEGIN and END flags do not pair up)",
            self.recording_id
        )
    }
}

/// Keeps entries `lo..hi` of `b` (its data stays: offsets need not start at 0).
fn trim(b: &mut Batch, lo: usize, hi: usize) {
    let n = b.len();
    if lo == 0 && hi == n {
        return;
    }
    if lo == hi {
        b.clear();
        return;
    }
    b.offsets.truncate(hi + 1);
    b.offsets.drain(..lo);
    for v in [&mut b.positions as &mut Vec<i64>, &mut b.reserved_values] {
        v.truncate(hi);
        v.drain(..lo);
    }
    b.session_ids.truncate(hi);
    b.session_ids.drain(..lo);
    b.flags.truncate(hi);
    b.flags.drain(..lo);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(frags: &[(&[u8], i64, u8, i64)]) -> Batch {
        let mut b = Batch::default();
        for &(p, pos, flags, reserved) in frags {
            b.push(p, pos, 9, flags, reserved);
        }
        b
    }

    fn messages(b: &Batch) -> Vec<(Vec<u8>, i64, i64)> {
        (0..b.len())
            .map(|i| (b.get(i).to_vec(), b.positions[i], b.reserved_values[i]))
            .collect()
    }

    #[test]
    fn whole_messages_are_kept_in_place_by_their_end_position() {
        let mut a = MessageAssembler::new(1, 64, 160);
        let mut f = batch(&[
            (b"a", 64, UNFRAGMENTED, 1),
            (b"bb", 96, UNFRAGMENTED, 2),
            (b"c", 160, UNFRAGMENTED, 3),
            (b"d", 192, UNFRAGMENTED, 4),
        ]);
        let data = f.data.as_ptr();
        let mut out = Batch::default();
        a.assemble(&mut f, &mut out).unwrap();
        assert_eq!(
            messages(&out),
            [(b"bb".to_vec(), 96, 2), (b"c".to_vec(), 160, 3)]
        );
        assert_eq!(out.data.as_ptr(), data, "not copied");
        assert_eq!(out.offsets.len(), out.len() + 1);
    }

    #[test]
    fn a_fragmented_message_is_joined_across_batches_with_its_first_reserved_value() {
        let mut a = MessageAssembler::new(1, 0, 1 << 20);
        let mut out = Batch::default();
        let mut f = batch(&[(b"x", 32, UNFRAGMENTED, 1), (b"he", 64, BEGIN, 7)]);
        a.assemble(&mut f, &mut out).unwrap();
        assert_eq!(messages(&out), [(b"x".to_vec(), 32, 1)]);
        let mut f = batch(&[
            (b"ll", 96, 0, 8),
            (b"o", 128, END, 9),
            (b"y", 160, UNFRAGMENTED, 2),
        ]);
        a.assemble(&mut f, &mut out).unwrap();
        assert_eq!(
            messages(&out),
            [(b"hello".to_vec(), 128, 7), (b"y".to_vec(), 160, 2)]
        );
    }

    #[test]
    fn unpaired_flags_fail_naming_the_recording_and_position() {
        let mut a = MessageAssembler::new(4, 0, 1 << 20);
        let mut out = Batch::default();
        let mut f = batch(&[(b"o", 128, END, 9)]);
        let e = a.assemble(&mut f, &mut out).unwrap_err();
        assert_eq!(e, "recording 4: fragments out of order near position 128 (BEGIN and END flags do not pair up)");
    }
}
