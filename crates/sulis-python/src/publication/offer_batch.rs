//! The input of `Publication.offer_batch`: many messages in one call, held as
//! the caller holds them (Arrow arrays, a data buffer with Arrow-layout
//! offsets, or a sequence of bytes-like objects), appended without a Python
//! object per message.
//!
//! The buffer forms are borrowed through the buffer protocol (no copy) and
//! appended with the GIL released; the views keep their exporters alive and
//! are released, with the GIL, when the batch is dropped.

use super::offer_result;
use crate::buffer::{with_bytes, View};
use crate::errors::MessageTooLongError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use sulis_client::OfferError;

/// Arrow-layout offsets: message i is `data[offsets[i]..offsets[i + 1]]`.
#[derive(Clone, Copy)]
enum Offsets {
    I32(*const i32),
    I64(*const i64),
}

/// One run of messages over one data buffer.
#[derive(Clone, Copy)]
struct Chunk {
    data: *const u8,
    data_len: usize,
    offsets: Offsets,
    /// Number of messages (`count + 1` offsets).
    count: usize,
}

// SAFETY: the pointers are into buffers the batch's views keep alive and
// unmoved; the chunks are read, never written, while the GIL is released.
unsafe impl Send for Chunk {}
unsafe impl Sync for Chunk {}

impl Chunk {
    #[inline(always)]
    fn offset(&self, i: usize) -> i64 {
        // SAFETY: i <= count, and count + 1 offsets were checked to lie in the view.
        unsafe {
            match self.offsets {
                Offsets::I32(p) => *p.add(i) as i64,
                Offsets::I64(p) => *p.add(i),
            }
        }
    }

    #[inline(always)]
    fn message(&self, i: usize) -> &[u8] {
        let (start, end) = (self.offset(i) as usize, self.offset(i + 1) as usize);
        if start == end {
            return &[];
        }
        // SAFETY: validate() checked 0 <= start <= end <= data_len.
        unsafe { std::slice::from_raw_parts(self.data.add(start), end - start) }
    }

    /// Checks every offset before anything is published, so a bad batch is
    /// refused whole rather than half sent.
    fn validate(&self, first_index: usize, max_message: usize) -> Result<(), BatchError> {
        let mut prev = self.offset(0);
        if prev < 0 || prev as usize > self.data_len {
            return Err(BatchError::Bad(format!(
                "offset {prev} of message {first_index} is outside the data ({} bytes)",
                self.data_len
            )));
        }
        for i in 0..self.count {
            let next = self.offset(i + 1);
            if next < prev || next as usize > self.data_len {
                return Err(BatchError::Bad(format!(
                    "offsets of message {} ({prev}..{next}) are decreasing or outside the data ({} bytes)",
                    first_index + i,
                    self.data_len
                )));
            }
            let length = (next - prev) as usize;
            if length > max_message {
                return Err(BatchError::TooLong {
                    index: first_index + i,
                    length,
                    max: max_message,
                });
            }
            prev = next;
        }
        Ok(())
    }
}

/// The messages of a [`BufferBatch`] (`Send`: no Python object in it).
#[derive(Clone, Copy)]
pub(crate) struct Messages<'a>(&'a [Chunk]);

impl<'a> Messages<'a> {
    /// The messages, in order.
    pub(crate) fn iter(self) -> impl Iterator<Item = &'a [u8]> {
        self.0
            .iter()
            .flat_map(|c| (0..c.count).map(move |i| c.message(i)))
    }
}

enum BatchError {
    Bad(String),
    TooLong {
        index: usize,
        length: usize,
        max: usize,
    },
}

impl BatchError {
    fn into_py(self) -> PyErr {
        match self {
            BatchError::Bad(m) => PyValueError::new_err(format!("offer_batch: {m}")),
            BatchError::TooLong { index, length, max } => MessageTooLongError::new_err(format!(
                "offer_batch: message {index} of {length} bytes exceeds the maximum message length \
                 of {max} bytes; nothing was published"
            )),
        }
    }
}

/// Messages borrowed from buffers, ready to append without the GIL.
pub(crate) struct BufferBatch {
    chunks: Vec<Chunk>,
    _views: Vec<View>,
}

impl BufferBatch {
    /// Checks the batch against `max_message` (see [`Chunk::validate`]).
    pub(crate) fn validate(&self, max_message: usize) -> PyResult<()> {
        let mut first = 0;
        for c in &self.chunks {
            c.validate(first, max_message)
                .map_err(BatchError::into_py)?;
            first += c.count;
        }
        Ok(())
    }

    /// Number of messages.
    pub(crate) fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.count).sum()
    }

    /// The messages, to append with the GIL released.
    pub(crate) fn messages(&self) -> Messages<'_> {
        Messages(&self.chunks)
    }

    fn push_chunk(
        &mut self,
        data: Option<View>,
        offsets: View,
        width: usize,
        first: usize,
        count: usize,
    ) -> PyResult<()> {
        let needed = (first + count + 1) * width;
        if offsets.len() < needed {
            return Err(PyValueError::new_err(format!(
                "offer_batch: the offsets buffer holds {} bytes, {count} messages need {needed}",
                offsets.len()
            )));
        }
        let base = unsafe { offsets.ptr().add(first * width) };
        if !(base as usize).is_multiple_of(width) {
            return Err(PyValueError::new_err(format!(
                "offer_batch: the offsets buffer is not aligned to {width} bytes"
            )));
        }
        let offsets_ptr = if width == 4 {
            Offsets::I32(base as *const i32)
        } else {
            Offsets::I64(base as *const i64)
        };
        let (data_ptr, data_len) = match &data {
            Some(d) => (d.ptr(), d.len()),
            None => (std::ptr::NonNull::<u8>::dangling().as_ptr() as *const u8, 0),
        };
        self.chunks.push(Chunk {
            data: data_ptr,
            data_len,
            offsets: offsets_ptr,
            count,
        });
        self._views.push(offsets);
        if let Some(d) = data {
            self._views.push(d);
        }
        Ok(())
    }

    /// `data` and Arrow-layout `offsets` (n + 1 entries for n messages): an
    /// int32 or int64 buffer (numpy, array.array), or raw bytes read as int32
    /// (the layout of Arrow's binary type).
    pub(crate) fn from_buffers(
        data: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let d = View::get(data, ffi::PyBUF_SIMPLE, "offer_batch: data")?;
        let o = View::get(
            offsets,
            ffi::PyBUF_FORMAT | ffi::PyBUF_ND,
            "offer_batch: offsets",
        )?;
        let format = o.format();
        let Some(width) = crate::buffer::int_width(o.itemsize(), &format, 4) else {
            return Err(PyTypeError::new_err(format!(
                "offer_batch: offsets must be int32 or int64 (got items of format '{format}', {} bytes)",
                o.itemsize()
            )));
        };
        if o.len() % width != 0 || o.len() < width {
            return Err(PyValueError::new_err(format!(
                "offer_batch: an offsets buffer of {} bytes is not n + 1 offsets of {width} bytes",
                o.len()
            )));
        }
        let count = o.len() / width - 1;
        let mut b = BufferBatch {
            chunks: Vec::new(),
            _views: Vec::new(),
        };
        b.push_chunk(Some(d), o, width, 0, count)?;
        Ok(b)
    }

    /// A pyarrow (binary, large_binary, string or large_string) Array or
    /// ChunkedArray; `None` when `obj` is neither.
    pub(crate) fn from_arrow(obj: &Bound<'_, PyAny>) -> PyResult<Option<Self>> {
        let py = obj.py();
        let arrays: Vec<Bound<'_, PyAny>> =
            if obj.hasattr(intern!(py, "chunks"))? && obj.hasattr(intern!(py, "num_chunks"))? {
                obj.getattr(intern!(py, "chunks"))?
                    .try_iter()?
                    .collect::<PyResult<_>>()?
            } else if obj.hasattr(intern!(py, "buffers"))? && obj.hasattr(intern!(py, "type"))? {
                vec![obj.clone()]
            } else {
                return Ok(None);
            };
        let mut b = BufferBatch {
            chunks: Vec::new(),
            _views: Vec::new(),
        };
        for arr in arrays {
            let type_name = arr.getattr(intern!(py, "type"))?.str()?.to_string();
            let width = match type_name.as_str() {
                "binary" | "string" => 4,
                "large_binary" | "large_string" => 8,
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "offer_batch takes Arrow arrays of binary, large_binary, string or \
                         large_string, not {other}"
                    )))
                }
            };
            let nulls: usize = arr.getattr(intern!(py, "null_count"))?.extract()?;
            if nulls > 0 {
                return Err(PyValueError::new_err(format!(
                    "offer_batch: the array has {nulls} null entries; a message cannot be null \
                     (fill or drop them first)"
                )));
            }
            let count = arr.len()?;
            if count == 0 {
                continue;
            }
            let first: usize = arr.getattr(intern!(py, "offset"))?.extract()?;
            let buffers = arr.call_method0(intern!(py, "buffers"))?;
            let offsets = buffers.get_item(1)?;
            let data = buffers.get_item(2)?;
            let o = View::get(
                &offsets,
                ffi::PyBUF_SIMPLE,
                "offer_batch: the array's offsets",
            )?;
            let d = if data.is_none() {
                None
            } else {
                Some(View::get(
                    &data,
                    ffi::PyBUF_SIMPLE,
                    "offer_batch: the array's data",
                )?)
            };
            b.push_chunk(d, o, width, first, count)?;
        }
        Ok(Some(b))
    }
}

/// `offer_batch(..., reserved_values=)`: nothing, one value for every
/// message, or one int64 per message from a buffer (a numpy int64 array, an
/// `array.array('q')`, a pyarrow int64 array's values buffer).
pub(crate) enum ReservedValues {
    None,
    One(i64),
    Each(EachReserved),
}

/// One reserved value per message, borrowed from a buffer.
pub(crate) struct EachReserved {
    ptr: *const i64,
    count: usize,
    _view: View,
}

// SAFETY: the pointer is into a buffer the view keeps alive and unmoved; it
// is only read, with the GIL released, while the batch is appended.
unsafe impl Send for ReservedValues {}
unsafe impl Sync for ReservedValues {}

impl ReservedValues {
    /// Parses the argument; `messages` is how many messages the batch holds.
    pub(crate) fn from_arg(obj: Option<&Bound<'_, PyAny>>, messages: usize) -> PyResult<Self> {
        let Some(obj) = obj.filter(|o| !o.is_none()) else {
            return Ok(ReservedValues::None);
        };
        if let Ok(v) = obj.extract::<i64>() {
            return Ok(ReservedValues::One(v));
        }
        let view = View::get(
            obj,
            ffi::PyBUF_FORMAT | ffi::PyBUF_ND,
            "reserved_values (an int, or one int64 per message)",
        )?;
        let format = view.format();
        let kind = format.trim_start_matches(['@', '=', '<']);
        if view.itemsize() != 8 || !matches!(kind, "q" | "l" | "n") {
            return Err(PyTypeError::new_err(format!(
                "offer_batch: reserved_values must be an int or int64 values (got items of format \
                 '{format}', {} bytes)",
                view.itemsize()
            )));
        }
        let count = view.len() / 8;
        if count != messages {
            return Err(PyValueError::new_err(format!(
                "offer_batch: {count} reserved_values for {messages} messages (one per message, or one int for all)"
            )));
        }
        if !(view.ptr() as usize).is_multiple_of(8) {
            return Err(PyValueError::new_err(
                "offer_batch: the reserved_values buffer is not aligned to 8 bytes",
            ));
        }
        Ok(ReservedValues::Each(EachReserved {
            ptr: view.ptr() as *const i64,
            count,
            _view: view,
        }))
    }

    /// The reserved value of message `i`.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> Option<i64> {
        match self {
            ReservedValues::None => None,
            ReservedValues::One(v) => Some(*v),
            // SAFETY: i < count, checked against the view's length.
            ReservedValues::Each(e) => (i < e.count).then(|| unsafe { *e.ptr.add(i) }),
        }
    }
}

/// The sequence form of `offer_batch`: one Python object per message, so the
/// GIL stays held; still one call from Python for the whole batch.
pub(super) fn offer_sequence(
    messages: &Bound<'_, PyAny>,
    mut offer: impl FnMut(&[u8]) -> PyResult<Result<i64, OfferError>>,
    position: impl Fn() -> PyResult<i64>,
) -> PyResult<(usize, i64)> {
    let mut count = 0;
    let mut last: Option<i64> = None;
    for item in messages.try_iter().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "offer_batch takes an Arrow array or a sequence of bytes-like objects, not {}",
            messages
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })? {
        let item = item?;
        let (n, r) = with_bytes(&item, |b| {
            sulis_client::publication::offer_each(std::iter::once(b), |_, m| {
                offer(m).unwrap_or(Err(OfferError::Closed))
            })
        })?;
        match r {
            Ok(p) => {
                count += n;
                last = p;
            }
            Err(OfferError::MessageTooLong { length, max }) => {
                return Err(MessageTooLongError::new_err(format!(
                    "offer_batch: message {count} of {length} bytes exceeds the maximum message \
                     length of {max} bytes; the {count} before it were published"
                )))
            }
            Err(e) => return Ok((count, offer_result(Err(e))?)),
        }
    }
    Ok((
        count,
        match last {
            Some(p) => p,
            None => position()?,
        },
    ))
}
