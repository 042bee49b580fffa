//! A bounds-checked view over raw (usually memory-mapped, shared) memory.
//!
//! Every structure sulis shares between threads or processes (log buffers, the
//! command-and-control file, counters) is accessed through an [`AtomicBuffer`].
//! It offers three kinds of access, named the way Agrona names them:
//!
//! * plain `get_*` / `put_*`: unordered, for fields published by a later release store;
//! * `get_*_volatile` (load-acquire) and `put_*_ordered` (store-release);
//! * read-modify-write: `get_and_add_*`, `compare_and_set_*`.
//!
//! All multi-byte values are little-endian in memory (every supported platform
//! is little-endian, see docs/protocol.md), so plain native loads are used.
//! Offsets are checked against the buffer length on every call: a corrupt
//! length read from shared memory must give an error or a panic in the
//! reader, never an access outside the mapping.

use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};

/// A copyable view over `len` bytes at `ptr`.
///
/// The memory is owned elsewhere (a mapping or a `Vec`); whoever creates the
/// view promises it outlives every copy (see [`AtomicBuffer::new`]).
#[derive(Clone, Copy, Debug)]
pub struct AtomicBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is a view over memory designed for concurrent access;
// all cross-thread visibility is established by the ordered accessors.
unsafe impl Send for AtomicBuffer {}
unsafe impl Sync for AtomicBuffer {}

#[cold]
#[inline(never)]
fn out_of_bounds(offset: usize, width: usize, len: usize) -> ! {
    panic!("buffer access out of bounds: offset={offset} width={width} capacity={len}")
}

macro_rules! plain_accessors {
    ($get:ident, $put:ident, $t:ty) => {
        #[doc = concat!("Plain (unordered) read of a `", stringify!($t), "`.")]
        #[inline]
        pub fn $get(&self, offset: usize) -> $t {
            self.check(offset, std::mem::size_of::<$t>());
            // SAFETY: bounds checked above; unaligned reads are allowed.
            unsafe { std::ptr::read_unaligned(self.ptr.add(offset) as *const $t) }
        }

        #[doc = concat!("Plain (unordered) write of a `", stringify!($t), "`.")]
        #[inline]
        pub fn $put(&self, offset: usize, value: $t) {
            self.check(offset, std::mem::size_of::<$t>());
            // SAFETY: bounds checked above; unaligned writes are allowed.
            unsafe { std::ptr::write_unaligned(self.ptr.add(offset) as *mut $t, value) }
        }
    };
}

impl AtomicBuffer {
    /// Wraps `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes for as long as this
    /// view or any copy or sub-view of it is used.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        AtomicBuffer { ptr, len }
    }

    /// Wraps a mutable slice; the caller keeps the slice alive (see [`AtomicBuffer::new`]).
    pub fn wrap(slice: &mut [u8]) -> Self {
        AtomicBuffer {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
        }
    }

    /// Length of the view in bytes.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.len
    }

    /// Address of the first byte.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    #[inline(always)]
    fn check(&self, offset: usize, width: usize) {
        if offset > self.len || width > self.len - offset {
            out_of_bounds(offset, width, self.len)
        }
    }

    /// A sub-view of `len` bytes starting at `offset`.
    pub fn view(&self, offset: usize, len: usize) -> AtomicBuffer {
        self.check(offset, len);
        AtomicBuffer {
            ptr: unsafe { self.ptr.add(offset) },
            len,
        }
    }

    plain_accessors!(get_u8, put_u8, u8);
    plain_accessors!(get_u16, put_u16, u16);
    plain_accessors!(get_i32, put_i32, i32);
    plain_accessors!(get_u32, put_u32, u32);
    plain_accessors!(get_i64, put_i64, i64);

    #[inline(always)]
    fn atomic_i32(&self, offset: usize) -> &AtomicI32 {
        self.check(offset, 4);
        let p = unsafe { self.ptr.add(offset) };
        debug_assert!(
            (p as usize).is_multiple_of(4),
            "unaligned atomic i32 at offset {offset}"
        );
        // SAFETY: in bounds, aligned (layouts align every atomic field), and the
        // memory is only ever accessed through this buffer's accessors.
        unsafe { &*(p as *const AtomicI32) }
    }

    #[inline(always)]
    fn atomic_i64(&self, offset: usize) -> &AtomicI64 {
        self.check(offset, 8);
        let p = unsafe { self.ptr.add(offset) };
        debug_assert!(
            (p as usize).is_multiple_of(8),
            "unaligned atomic i64 at offset {offset}"
        );
        // SAFETY: as for atomic_i32.
        unsafe { &*(p as *const AtomicI64) }
    }

    /// Load-acquire of an `i32` (4-byte aligned offset).
    #[inline]
    pub fn get_i32_volatile(&self, offset: usize) -> i32 {
        self.atomic_i32(offset).load(Ordering::Acquire)
    }

    /// Store-release of an `i32` (4-byte aligned offset).
    #[inline]
    pub fn put_i32_ordered(&self, offset: usize, value: i32) {
        self.atomic_i32(offset).store(value, Ordering::Release)
    }

    /// Load-acquire of an `i64` (8-byte aligned offset).
    #[inline]
    pub fn get_i64_volatile(&self, offset: usize) -> i64 {
        self.atomic_i64(offset).load(Ordering::Acquire)
    }

    /// Store-release of an `i64` (8-byte aligned offset).
    #[inline]
    pub fn put_i64_ordered(&self, offset: usize, value: i64) {
        self.atomic_i64(offset).store(value, Ordering::Release)
    }

    /// Atomic add returning the previous value (sequentially consistent).
    #[inline]
    pub fn get_and_add_i64(&self, offset: usize, delta: i64) -> i64 {
        self.atomic_i64(offset).fetch_add(delta, Ordering::SeqCst)
    }

    /// Atomic add returning the previous value (sequentially consistent).
    #[inline]
    pub fn get_and_add_i32(&self, offset: usize, delta: i32) -> i32 {
        self.atomic_i32(offset).fetch_add(delta, Ordering::SeqCst)
    }

    /// Compare-and-set; true when `expected` was replaced by `update`.
    #[inline]
    pub fn compare_and_set_i64(&self, offset: usize, expected: i64, update: i64) -> bool {
        self.atomic_i64(offset)
            .compare_exchange(expected, update, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Compare-and-set; true when `expected` was replaced by `update`.
    #[inline]
    pub fn compare_and_set_i32(&self, offset: usize, expected: i32, update: i32) -> bool {
        self.atomic_i32(offset)
            .compare_exchange(expected, update, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Stores `value` only if it is greater than the current value (single writer).
    #[inline]
    pub fn propose_max_i64_ordered(&self, offset: usize, value: i64) -> bool {
        if self.get_i64(offset) < value {
            self.put_i64_ordered(offset, value);
            true
        } else {
            false
        }
    }

    /// Copies `src` in at `offset`.
    #[inline]
    pub fn put_bytes(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len());
        // SAFETY: bounds checked; source and destination cannot overlap unless
        // the caller aliases shared memory, which `copy` tolerates.
        unsafe { std::ptr::copy(src.as_ptr(), self.ptr.add(offset), src.len()) }
    }

    /// Copies `dst.len()` bytes out from `offset`.
    #[inline]
    pub fn get_bytes(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len());
        unsafe { std::ptr::copy(self.ptr.add(offset), dst.as_mut_ptr(), dst.len()) }
    }

    /// Borrows `len` bytes at `offset` as a slice.
    ///
    /// The bytes may be changed by another thread or process while borrowed;
    /// callers only borrow ranges the protocol says are stable (committed frames).
    #[inline]
    pub fn slice(&self, offset: usize, len: usize) -> &[u8] {
        self.check(offset, len);
        unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) }
    }

    /// Mutable borrow of `len` bytes at `offset` (see [`AtomicBuffer::slice`]).
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        self.check(offset, len);
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) }
    }

    /// Fills `len` bytes at `offset` with `value`.
    #[inline]
    pub fn set_memory(&self, offset: usize, len: usize, value: u8) {
        self.check(offset, len);
        unsafe { std::ptr::write_bytes(self.ptr.add(offset), value, len) }
    }

    /// Reads a length-prefixed (`i32`) ASCII/UTF-8 string; `None` if the length is out of range.
    pub fn get_string(&self, offset: usize) -> Option<String> {
        let n = self.get_i32(offset);
        if n < 0 || (n as usize) > self.len.saturating_sub(offset + 4) {
            return None;
        }
        Some(String::from_utf8_lossy(self.slice(offset + 4, n as usize)).into_owned())
    }

    /// Writes a length-prefixed (`i32`) string; returns the bytes written (4 + len).
    pub fn put_string(&self, offset: usize, s: &str) -> usize {
        self.put_i32(offset, s.len() as i32);
        self.put_bytes(offset + 4, s.as_bytes());
        4 + s.len()
    }
}

/// Rounds `value` up to a multiple of `alignment` (a power of two).
#[inline(always)]
pub const fn align(value: usize, alignment: usize) -> usize {
    (value + alignment - 1) & !(alignment - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_read_back_what_was_written() {
        let mut mem = vec![0u64; 8];
        let b = AtomicBuffer::wrap(unsafe {
            std::slice::from_raw_parts_mut(mem.as_mut_ptr() as *mut u8, 64)
        });
        b.put_i32(0, -7);
        b.put_i64_ordered(8, 1 << 40);
        b.put_u16(20, 0xBEEF);
        assert_eq!(b.get_i32(0), -7);
        assert_eq!(b.get_i64_volatile(8), 1 << 40);
        assert_eq!(b.get_u16(20), 0xBEEF);
        assert_eq!(b.get_and_add_i64(8, 5), 1 << 40);
        assert!(b.compare_and_set_i64(8, (1 << 40) + 5, 3));
        assert!(!b.compare_and_set_i64(8, 99, 4));
        assert_eq!(b.put_string(24, "abc"), 7);
        assert_eq!(b.get_string(24).unwrap(), "abc");
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn should_refuse_access_past_the_end() {
        let mut mem = vec![0u8; 16];
        AtomicBuffer::wrap(&mut mem).get_i64(12);
    }

    #[test]
    fn should_align_up() {
        assert_eq!(align(0, 32), 0);
        assert_eq!(align(1, 32), 32);
        assert_eq!(align(64, 32), 64);
    }
}
