//! Counters with Agrona's `CountersReader` / `CountersManager` layout
//! (docs/protocol.md §4.4).
//!
//! Two buffers, indexed by counter id:
//!
//! ```text
//! values:   128 bytes per id   +0 value i64, +8 registration id i64, +16 owner id i64,
//!                              +24 reference id i64, rest padding (no false sharing)
//! metadata: 512 bytes per id   +0 state i32 (0 unused, 1 allocated, -1 reclaimed)
//!                              +4 type id i32
//!                              +8 free-for-reuse deadline ms i64 (i64::MAX = not free)
//!                              +16 key (112 bytes)
//!                              +128 label length i32, +132 label (380 bytes)
//! ```
//!
//! The driver's conductor is the only writer of metadata ([`CountersManager`]);
//! any process may read ([`CountersReader`]).  Values are written by whoever owns
//! the counter (e.g. a subscriber's position) with release stores.

use crate::atomic_buffer::AtomicBuffer;

/// Bytes per counter in the values buffer.
pub const COUNTER_LENGTH: usize = 128;
/// Offset of the registration id in a value slot.
pub const REGISTRATION_ID_OFFSET: usize = 8;
/// Offset of the owner id in a value slot.
pub const OWNER_ID_OFFSET: usize = 16;
/// Offset of the reference id in a value slot.
pub const REFERENCE_ID_OFFSET: usize = 24;

/// Bytes per counter in the metadata buffer.
pub const METADATA_LENGTH: usize = 512;
/// Offset of the type id in a metadata record.
pub const TYPE_ID_OFFSET: usize = 4;
/// Offset of the free-for-reuse deadline in a metadata record.
pub const FREE_FOR_REUSE_DEADLINE_OFFSET: usize = 8;
/// Offset of the key in a metadata record.
pub const KEY_OFFSET: usize = 16;
/// Offset of the label length (the label follows it) in a metadata record.
pub const LABEL_OFFSET: usize = 128;
/// Largest key stored.
pub const MAX_KEY_LENGTH: usize = 112;
/// Largest label stored, in bytes.
pub const MAX_LABEL_LENGTH: usize = 380;

/// Metadata state: never used (readers stop scanning here).
pub const RECORD_UNUSED: i32 = 0;
/// Metadata state: in use.
pub const RECORD_ALLOCATED: i32 = 1;
/// Metadata state: freed, reusable after its deadline.
pub const RECORD_RECLAIMED: i32 = -1;
/// Deadline of a counter that is not free.
pub const NOT_FREE_TO_REUSE: i64 = i64::MAX;
/// Id meaning "no counter".
pub const NULL_COUNTER_ID: i32 = -1;
/// Registration id of a counter allocated without one.
pub const DEFAULT_REGISTRATION_ID: i64 = 0;
/// Owner id of a counter allocated without one.
pub const DEFAULT_OWNER_ID: i64 = 0;
/// Reference id of a counter allocated without one.
pub const DEFAULT_REFERENCE_ID: i64 = 0;

/// Offset of counter `id`'s value slot in the values buffer.
#[inline]
pub fn counter_offset(id: i32) -> usize {
    id as usize * COUNTER_LENGTH
}

/// Offset of counter `id`'s record in the metadata buffer.
#[inline]
pub fn metadata_offset(id: i32) -> usize {
    id as usize * METADATA_LENGTH
}

/// Longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Read-only view of the counters, usable from any thread or process.
#[derive(Clone, Copy, Debug)]
pub struct CountersReader {
    metadata: AtomicBuffer,
    values: AtomicBuffer,
    max_counter_id: i32,
}

impl CountersReader {
    /// Wraps the two buffers (both 8-byte aligned; metadata normally 4 × values).
    /// The number of counters is what both buffers have room for.
    pub fn new(metadata: AtomicBuffer, values: AtomicBuffer) -> Self {
        let slots = (values.capacity() / COUNTER_LENGTH).min(metadata.capacity() / METADATA_LENGTH);
        let max_counter_id = slots.min(i32::MAX as usize) as i32 - 1;
        CountersReader {
            metadata,
            values,
            max_counter_id,
        }
    }

    /// Highest valid counter id (−1 if the buffers hold none).
    #[inline]
    pub fn max_counter_id(&self) -> i32 {
        self.max_counter_id
    }

    /// The values buffer.
    #[inline]
    pub fn values_buffer(&self) -> AtomicBuffer {
        self.values
    }

    /// The metadata buffer.
    #[inline]
    pub fn metadata_buffer(&self) -> AtomicBuffer {
        self.metadata
    }

    /// True if `id` is within the buffers.
    #[inline]
    pub fn is_valid_id(&self, id: i32) -> bool {
        id >= 0 && id <= self.max_counter_id
    }

    #[inline]
    fn validate(&self, id: i32) {
        if !self.is_valid_id(id) {
            panic!(
                "counter id {id} out of range: 0 - maxCounterId={}",
                self.max_counter_id
            );
        }
    }

    /// Appends to counter `id`'s label as far as it fits; returns the bytes
    /// appended. The one write a reader makes: a client appends its name to
    /// its heartbeat counter's label once the driver allocated it, as Aeron's
    /// client does (`AeronCounters.appendToLabel`); nobody else writes that
    /// label afterwards.
    pub fn append_to_label(&self, id: i32, suffix: &str) -> usize {
        self.validate(id);
        let metadata = &self.metadata;
        let offset = metadata_offset(id) + LABEL_OFFSET;
        let current = metadata.get_i32(offset).clamp(0, MAX_LABEL_LENGTH as i32) as usize;
        let suffix = truncate_utf8(suffix, MAX_LABEL_LENGTH - current);
        metadata.put_bytes(offset + 4 + current, suffix.as_bytes());
        metadata.put_i32_ordered(offset, (current + suffix.len()) as i32);
        suffix.len()
    }

    /// Current value (load-acquire).
    ///
    /// # Panics
    /// This and the other per-id accessors panic if `id` is out of range.
    #[inline]
    pub fn counter_value(&self, id: i32) -> i64 {
        self.validate(id);
        self.values.get_i64_volatile(counter_offset(id))
    }

    /// State of the record: [`RECORD_UNUSED`], [`RECORD_ALLOCATED`] or [`RECORD_RECLAIMED`].
    pub fn counter_state(&self, id: i32) -> i32 {
        self.validate(id);
        self.metadata.get_i32_volatile(metadata_offset(id))
    }

    /// Type id (see docs/protocol.md §4.4 for the standard ones).
    pub fn counter_type_id(&self, id: i32) -> i32 {
        self.validate(id);
        self.metadata.get_i32(metadata_offset(id) + TYPE_ID_OFFSET)
    }

    /// Epoch ms after which a freed id may be reused ([`NOT_FREE_TO_REUSE`] while allocated).
    pub fn free_for_reuse_deadline(&self, id: i32) -> i64 {
        self.validate(id);
        self.metadata
            .get_i64_volatile(metadata_offset(id) + FREE_FOR_REUSE_DEADLINE_OFFSET)
    }

    /// Registration id of the counter (load-acquire).
    pub fn counter_registration_id(&self, id: i32) -> i64 {
        self.validate(id);
        self.values
            .get_i64_volatile(counter_offset(id) + REGISTRATION_ID_OFFSET)
    }

    /// Owner id of the counter, e.g. the client id (load-acquire).
    pub fn counter_owner_id(&self, id: i32) -> i64 {
        self.validate(id);
        self.values
            .get_i64_volatile(counter_offset(id) + OWNER_ID_OFFSET)
    }

    /// Reference id of the counter (load-acquire).
    pub fn counter_reference_id(&self, id: i32) -> i64 {
        self.validate(id);
        self.values
            .get_i64_volatile(counter_offset(id) + REFERENCE_ID_OFFSET)
    }

    /// The label (a length outside 0..=380 read from the buffer is clamped;
    /// invalid UTF-8 is replaced).
    pub fn counter_label(&self, id: i32) -> String {
        self.validate(id);
        label_at(&self.metadata, metadata_offset(id))
    }

    /// The whole 112-byte key area (keys carry no length; unused bytes are zero).
    pub fn counter_key(&self, id: i32) -> &[u8] {
        self.validate(id);
        self.metadata
            .slice(metadata_offset(id) + KEY_OFFSET, MAX_KEY_LENGTH)
    }

    /// Calls `f(id, type_id, key, label)` for every allocated counter, in id
    /// order, stopping at the first never-used record (like Agrona).
    pub fn for_each<F: FnMut(i32, i32, &[u8], &str)>(&self, mut f: F) {
        for id in 0..=self.max_counter_id {
            let offset = metadata_offset(id);
            match self.metadata.get_i32_volatile(offset) {
                RECORD_ALLOCATED => {
                    let type_id = self.metadata.get_i32(offset + TYPE_ID_OFFSET);
                    let label = label_at(&self.metadata, offset);
                    let key = self.metadata.slice(offset + KEY_OFFSET, MAX_KEY_LENGTH);
                    f(id, type_id, key, &label);
                }
                RECORD_UNUSED => break,
                _ => {}
            }
        }
    }

    /// Id of the allocated counter with this type and registration id, or [`NULL_COUNTER_ID`].
    pub fn find_by_type_id_and_registration_id(&self, type_id: i32, registration_id: i64) -> i32 {
        for id in 0..=self.max_counter_id {
            let offset = metadata_offset(id);
            match self.metadata.get_i32_volatile(offset) {
                RECORD_ALLOCATED
                    if self.metadata.get_i32(offset + TYPE_ID_OFFSET) == type_id
                        && self.counter_registration_id(id) == registration_id =>
                {
                    return id;
                }
                RECORD_UNUSED => break,
                _ => {}
            }
        }
        NULL_COUNTER_ID
    }

    /// A handle on counter `id`'s value for hot paths.
    pub fn counter_ref(&self, id: i32) -> CounterRef {
        self.validate(id);
        CounterRef {
            values: self.values,
            offset: counter_offset(id),
        }
    }
}

fn label_at(metadata: &AtomicBuffer, record_offset: usize) -> String {
    let length = metadata
        .get_i32(record_offset + LABEL_OFFSET)
        .clamp(0, MAX_LABEL_LENGTH as i32) as usize;
    String::from_utf8_lossy(metadata.slice(record_offset + LABEL_OFFSET + 4, length)).into_owned()
}

/// A counter's value slot with its offset computed once (Agrona's `Position` /
/// `AtomicCounter` without the ownership).
#[derive(Clone, Copy, Debug)]
pub struct CounterRef {
    values: AtomicBuffer,
    offset: usize,
}

impl CounterRef {
    /// Handle on counter `id` in `values`.
    ///
    /// # Panics
    /// If the slot is outside `values`.
    pub fn new(values: AtomicBuffer, id: i32) -> Self {
        assert!(
            id >= 0 && counter_offset(id) + COUNTER_LENGTH <= values.capacity(),
            "counter id {id} outside the values buffer"
        );
        CounterRef {
            values,
            offset: counter_offset(id),
        }
    }

    /// The counter id.
    #[inline]
    pub fn id(&self) -> i32 {
        (self.offset / COUNTER_LENGTH) as i32
    }

    /// Plain read (for the single writer reading its own value).
    #[inline]
    pub fn get(&self) -> i64 {
        self.values.get_i64(self.offset)
    }

    /// Load-acquire.
    #[inline]
    pub fn get_volatile(&self) -> i64 {
        self.values.get_i64_volatile(self.offset)
    }

    /// Store-release.
    #[inline]
    pub fn set_ordered(&self, value: i64) {
        self.values.put_i64_ordered(self.offset, value)
    }

    /// Store-release of `value` if it is greater than the current value (single
    /// writer); true if stored.
    #[inline]
    pub fn propose_max_ordered(&self, value: i64) -> bool {
        self.values.propose_max_i64_ordered(self.offset, value)
    }

    /// Atomic add returning the previous value (any number of writers).
    #[inline]
    pub fn get_and_add(&self, delta: i64) -> i64 {
        self.values.get_and_add_i64(self.offset, delta)
    }

    /// Single-writer increment with a release store; returns the previous value.
    #[inline]
    pub fn increment_ordered(&self) -> i64 {
        let value = self.get();
        self.set_ordered(value + 1);
        value
    }
}

/// Allocates and frees counters: the driver conductor's single-writer side.
#[derive(Debug)]
pub struct CountersManager {
    reader: CountersReader,
    free_to_reuse_timeout_ms: i64,
    id_high_water_mark: i32,
    free_list: Vec<i32>,
}

impl CountersManager {
    /// Manages counters in fresh (zeroed) buffers; freed ids become reusable
    /// `free_to_reuse_timeout_ms` after being freed.
    pub fn new(
        metadata: AtomicBuffer,
        values: AtomicBuffer,
        free_to_reuse_timeout_ms: i64,
    ) -> Self {
        CountersManager {
            reader: CountersReader::new(metadata, values),
            free_to_reuse_timeout_ms,
            id_high_water_mark: -1,
            free_list: Vec::new(),
        }
    }

    /// A reader over the same buffers.
    pub fn reader(&self) -> CountersReader {
        self.reader
    }

    /// Highest valid counter id.
    pub fn max_counter_id(&self) -> i32 {
        self.reader.max_counter_id
    }

    /// Allocates a counter and returns its id.
    ///
    /// `key` is truncated to [`MAX_KEY_LENGTH`] bytes and `label` to
    /// [`MAX_LABEL_LENGTH`] bytes (on a char boundary).  A freed id whose reuse
    /// deadline has passed is reused (lowest first), otherwise the next never-used
    /// id; `Err` when every id is in use or still waiting out its deadline.
    /// The value starts at 0; the record is published by writing its state last.
    #[allow(clippy::too_many_arguments)]
    pub fn allocate(
        &mut self,
        type_id: i32,
        key: &[u8],
        label: &str,
        registration_id: i64,
        owner_id: i64,
        reference_id: i64,
        now_ms: i64,
    ) -> Result<i32, String> {
        let id = self.next_counter_id(now_ms)?;
        let values = &self.reader.values;
        let metadata = &self.reader.metadata;

        let value_offset = counter_offset(id);
        values.put_i64_ordered(value_offset, 0);
        values.put_i64_ordered(value_offset + REGISTRATION_ID_OFFSET, registration_id);
        values.put_i64_ordered(value_offset + OWNER_ID_OFFSET, owner_id);
        values.put_i64_ordered(value_offset + REFERENCE_ID_OFFSET, reference_id);

        let offset = metadata_offset(id);
        metadata.put_i32(offset + TYPE_ID_OFFSET, type_id);
        metadata.put_i64_ordered(offset + FREE_FOR_REUSE_DEADLINE_OFFSET, NOT_FREE_TO_REUSE);
        let key = &key[..key.len().min(MAX_KEY_LENGTH)];
        metadata.set_memory(offset + KEY_OFFSET, MAX_KEY_LENGTH, 0);
        metadata.put_bytes(offset + KEY_OFFSET, key);
        let label = truncate_utf8(label, MAX_LABEL_LENGTH);
        metadata.set_memory(offset + LABEL_OFFSET + 4, MAX_LABEL_LENGTH, 0);
        metadata.put_bytes(offset + LABEL_OFFSET + 4, label.as_bytes());
        metadata.put_i32(offset + LABEL_OFFSET, label.len() as i32);

        metadata.put_i32_ordered(offset, RECORD_ALLOCATED);
        Ok(id)
    }

    fn next_counter_id(&mut self, now_ms: i64) -> Result<i32, String> {
        let metadata = &self.reader.metadata;
        let reusable = self
            .free_list
            .iter()
            .enumerate()
            .filter(|(_, &id)| {
                now_ms >= metadata.get_i64(metadata_offset(id) + FREE_FOR_REUSE_DEADLINE_OFFSET)
            })
            .min_by_key(|(_, &id)| id)
            .map(|(i, _)| i);
        if let Some(i) = reusable {
            return Ok(self.free_list.swap_remove(i));
        }
        if self.id_high_water_mark >= self.reader.max_counter_id {
            return Err(format!(
                "unable to allocate counter, buffer is full: maxCounterId={}",
                self.reader.max_counter_id
            ));
        }
        self.id_high_water_mark += 1;
        Ok(self.id_high_water_mark)
    }

    /// Frees counter `id`: state reclaimed, key cleared, value reset to 0, id
    /// reusable from `now_ms + free_to_reuse_timeout_ms`.  Ignored if `id` is out
    /// of range or not allocated.
    pub fn free(&mut self, id: i32, now_ms: i64) {
        if !self.reader.is_valid_id(id) || self.reader.counter_state(id) != RECORD_ALLOCATED {
            return;
        }
        let metadata = &self.reader.metadata;
        let offset = metadata_offset(id);
        metadata.put_i32_ordered(offset, RECORD_RECLAIMED);
        metadata.set_memory(offset + KEY_OFFSET, MAX_KEY_LENGTH, 0);
        metadata.put_i64_ordered(
            offset + FREE_FOR_REUSE_DEADLINE_OFFSET,
            now_ms.saturating_add(self.free_to_reuse_timeout_ms),
        );
        self.reader.values.put_i64_ordered(counter_offset(id), 0);
        self.free_list.push(id);
    }

    /// Store-release of counter `id`'s value.
    pub fn set_counter_value(&self, id: i32, value: i64) {
        self.reader.validate(id);
        self.reader
            .values
            .put_i64_ordered(counter_offset(id), value)
    }

    /// Store-release of counter `id`'s registration id.
    pub fn set_counter_registration_id(&self, id: i32, registration_id: i64) {
        self.reader.validate(id);
        self.reader
            .values
            .put_i64_ordered(counter_offset(id) + REGISTRATION_ID_OFFSET, registration_id)
    }

    /// Store-release of counter `id`'s owner id.
    pub fn set_counter_owner_id(&self, id: i32, owner_id: i64) {
        self.reader.validate(id);
        self.reader
            .values
            .put_i64_ordered(counter_offset(id) + OWNER_ID_OFFSET, owner_id)
    }

    /// Store-release of counter `id`'s reference id.
    pub fn set_counter_reference_id(&self, id: i32, reference_id: i64) {
        self.reader.validate(id);
        self.reader
            .values
            .put_i64_ordered(counter_offset(id) + REFERENCE_ID_OFFSET, reference_id)
    }

    /// Replaces counter `id`'s label (truncated like in [`allocate`](Self::allocate)).
    pub fn set_counter_label(&self, id: i32, label: &str) {
        self.reader.validate(id);
        let metadata = &self.reader.metadata;
        let offset = metadata_offset(id) + LABEL_OFFSET;
        let label = truncate_utf8(label, MAX_LABEL_LENGTH);
        metadata.put_bytes(offset + 4, label.as_bytes());
        metadata.put_i32_ordered(offset, label.len() as i32);
    }

    /// Appends to counter `id`'s label as far as it fits; returns the bytes appended.
    pub fn append_to_label(&self, id: i32, suffix: &str) -> usize {
        self.reader.append_to_label(id, suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Buffers {
        _metadata: Vec<u64>,
        _values: Vec<u64>,
        metadata: AtomicBuffer,
        values: AtomicBuffer,
    }

    fn buffers(counters: usize) -> Buffers {
        let mut m = vec![0u64; counters * METADATA_LENGTH / 8];
        let mut v = vec![0u64; counters * COUNTER_LENGTH / 8];
        let metadata =
            unsafe { AtomicBuffer::new(m.as_mut_ptr() as *mut u8, counters * METADATA_LENGTH) };
        let values =
            unsafe { AtomicBuffer::new(v.as_mut_ptr() as *mut u8, counters * COUNTER_LENGTH) };
        Buffers {
            _metadata: m,
            _values: v,
            metadata,
            values,
        }
    }

    #[test]
    fn should_allocate_with_agrona_layout() {
        let b = buffers(4);
        let mut cm = CountersManager::new(b.metadata, b.values, 1000);
        let r = cm.reader();
        assert_eq!(r.max_counter_id(), 3);

        let id = cm
            .allocate(4, &[1, 2, 3], "sub-pos: 1 2 3 udp", 77, 88, 99, 0)
            .unwrap();
        assert_eq!(id, 0);
        let id2 = cm
            .allocate(
                11,
                &5i64.to_le_bytes(),
                "client-heartbeat: id=5",
                5,
                5,
                0,
                0,
            )
            .unwrap();
        assert_eq!(id2, 1);

        assert_eq!(b.metadata.get_i32(0), RECORD_ALLOCATED);
        assert_eq!(b.metadata.get_i32(4), 4);
        assert_eq!(b.metadata.get_i64(8), NOT_FREE_TO_REUSE);
        assert_eq!(b.metadata.slice(16, 4), &[1, 2, 3, 0]);
        assert_eq!(b.metadata.get_i32(128), 18);
        assert_eq!(b.metadata.slice(132, 18), b"sub-pos: 1 2 3 udp");
        assert_eq!(b.metadata.get_i32(512), RECORD_ALLOCATED);
        assert_eq!(b.values.get_i64(8), 77);
        assert_eq!(b.values.get_i64(16), 88);
        assert_eq!(b.values.get_i64(24), 99);
        assert_eq!(b.values.get_i64(128 + 8), 5);

        assert_eq!(r.counter_state(0), RECORD_ALLOCATED);
        assert_eq!(r.counter_state(2), RECORD_UNUSED);
        assert_eq!(r.counter_type_id(1), 11);
        assert_eq!(r.counter_label(1), "client-heartbeat: id=5");
        assert_eq!(&r.counter_key(1)[..8], &5i64.to_le_bytes());
        assert_eq!(r.counter_key(1).len(), MAX_KEY_LENGTH);
        assert_eq!(r.counter_registration_id(0), 77);
        assert_eq!(r.counter_owner_id(0), 88);
        assert_eq!(r.counter_reference_id(0), 99);
        assert_eq!(r.free_for_reuse_deadline(0), NOT_FREE_TO_REUSE);

        cm.set_counter_value(0, 42);
        assert_eq!(r.counter_value(0), 42);
        assert_eq!(b.values.get_i64(0), 42);
        assert_eq!(r.find_by_type_id_and_registration_id(4, 77), 0);
        assert_eq!(
            r.find_by_type_id_and_registration_id(4, 78),
            NULL_COUNTER_ID
        );
    }

    #[test]
    fn should_fail_when_full() {
        let b = buffers(2);
        let mut cm = CountersManager::new(b.metadata, b.values, 1000);
        cm.allocate(1, &[], "a", 0, 0, 0, 0).unwrap();
        cm.allocate(1, &[], "b", 0, 0, 0, 0).unwrap();
        assert!(cm.allocate(1, &[], "c", 0, 0, 0, 0).is_err());
    }

    #[test]
    fn should_free_and_reuse_after_timeout_lowest_first() {
        let b = buffers(4);
        let mut cm = CountersManager::new(b.metadata, b.values, 1000);
        let r = cm.reader();
        for i in 0..4 {
            assert_eq!(
                cm.allocate(1, &[9; 8], &format!("c{i}"), i as i64, 0, 0, 0)
                    .unwrap(),
                i
            );
            cm.set_counter_value(i, 100 + i as i64);
        }
        cm.free(2, 500);
        cm.free(1, 600);
        cm.free(1, 700); // double free is ignored
        assert_eq!(r.counter_state(2), RECORD_RECLAIMED);
        assert_eq!(r.free_for_reuse_deadline(2), 1500);
        assert_eq!(r.counter_value(2), 0);
        assert_eq!(r.counter_key(2), &[0u8; MAX_KEY_LENGTH][..]);

        // Not yet reusable, and no never-used id left.
        assert!(cm.allocate(1, &[], "x", 0, 0, 0, 1499).is_err());
        // Only id 2 has passed its deadline.
        assert_eq!(cm.allocate(1, &[], "x", 0, 0, 0, 1500).unwrap(), 2);
        assert_eq!(r.counter_state(2), RECORD_ALLOCATED);
        assert_eq!(r.counter_label(2), "x");
        assert_eq!(r.free_for_reuse_deadline(2), NOT_FREE_TO_REUSE);

        // Both expired: lowest first.
        cm.free(3, 1500);
        assert_eq!(cm.allocate(1, &[], "y", 0, 0, 0, 5000).unwrap(), 1);
        assert_eq!(cm.allocate(1, &[], "z", 0, 0, 0, 5000).unwrap(), 3);
        assert_eq!(r.counter_value(3), 0);
        assert!(cm.allocate(1, &[], "w", 0, 0, 0, 5000).is_err());
    }

    #[test]
    fn should_truncate_key_and_label() {
        let b = buffers(2);
        let mut cm = CountersManager::new(b.metadata, b.values, 1000);
        let r = cm.reader();
        let key = [7u8; 200];
        // 'é' is two bytes: 379 ASCII bytes + 'é' does not fit in 380.
        let label = format!("{}é tail", "a".repeat(MAX_LABEL_LENGTH - 1));
        let id = cm.allocate(1, &key, &label, 0, 0, 0, 0).unwrap();
        assert_eq!(r.counter_key(id), &key[..MAX_KEY_LENGTH]);
        assert_eq!(r.counter_label(id), "a".repeat(MAX_LABEL_LENGTH - 1));
        assert_eq!(
            b.metadata.get_i32(LABEL_OFFSET),
            (MAX_LABEL_LENGTH - 1) as i32
        );
        // The key area does not spill into the label length.
        assert_eq!(
            b.metadata.slice(KEY_OFFSET, MAX_KEY_LENGTH),
            &key[..MAX_KEY_LENGTH]
        );

        let id = cm.allocate(1, &[], "base", 0, 0, 0, 0).unwrap();
        assert_eq!(cm.append_to_label(id, " name=x"), 7);
        assert_eq!(r.counter_label(id), "base name=x");
        cm.set_counter_label(id, "other");
        assert_eq!(r.counter_label(id), "other");
        assert_eq!(
            cm.append_to_label(id, &"b".repeat(500)),
            MAX_LABEL_LENGTH - 5
        );
        assert_eq!(r.counter_label(id).len(), MAX_LABEL_LENGTH);
    }

    #[test]
    fn should_visit_allocated_counters_in_order() {
        let b = buffers(8);
        let mut cm = CountersManager::new(b.metadata, b.values, 0);
        for i in 0..4 {
            cm.allocate(10 + i, &[i as u8], &format!("label {i}"), 0, 0, 0, 0)
                .unwrap();
        }
        cm.free(1, 0);
        let mut seen = Vec::new();
        cm.reader().for_each(|id, type_id, key, label| {
            assert_eq!(key.len(), MAX_KEY_LENGTH);
            seen.push((id, type_id, key[0], label.to_string()));
        });
        assert_eq!(
            seen,
            vec![
                (0, 10, 0, "label 0".to_string()),
                (2, 12, 2, "label 2".to_string()),
                (3, 13, 3, "label 3".to_string()),
            ]
        );
    }

    #[test]
    fn should_update_value_through_counter_ref() {
        let b = buffers(4);
        let mut cm = CountersManager::new(b.metadata, b.values, 0);
        cm.allocate(1, &[], "a", 0, 0, 0, 0).unwrap();
        let id = cm.allocate(1, &[], "b", 0, 0, 0, 0).unwrap();
        let r = cm.reader();
        let c = r.counter_ref(id);
        assert_eq!(c.id(), id);
        c.set_ordered(10);
        assert_eq!(c.get(), 10);
        assert!(c.propose_max_ordered(20));
        assert!(!c.propose_max_ordered(15));
        assert_eq!(c.get_volatile(), 20);
        assert_eq!(c.get_and_add(5), 20);
        assert_eq!(c.increment_ordered(), 25);
        assert_eq!(r.counter_value(id), 26);
        assert_eq!(CounterRef::new(r.values_buffer(), id).get(), 26);
        assert_eq!(r.counter_value(0), 0);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn should_refuse_out_of_range_id() {
        let b = buffers(2);
        CountersReader::new(b.metadata, b.values).counter_value(2);
    }
}
