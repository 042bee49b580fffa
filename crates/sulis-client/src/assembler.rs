//! Reassembling fragmented messages, per session, as Aeron's
//! `FragmentAssembler`: a fragment is appended only when it starts where the
//! previous one of its session ended, so a message with a hole (a fragment
//! lost and padded over with `reliable=false`) is dropped, never spliced
//! into something else.

use crate::image::Header;
use std::borrow::Cow;
use std::collections::HashMap;
use sulis_protocol::frame::{BEGIN_FLAG, END_FLAG, UNFRAGMENTED};

/// A message being reassembled.
struct Partial {
    payload: Vec<u8>,
    /// The first fragment's header.
    first: Header,
    /// Stream position where the next fragment must start.
    next_position: i64,
}

/// Stream position where the fragment of `header` starts.
fn fragment_start(header: &Header) -> i64 {
    let aligned = (header.frame_length().max(0) as i64 + 31) & !31;
    header.position() - aligned
}

/// Per-session reassembly of fragmented messages.
#[derive(Default)]
pub struct FragmentAssembler {
    partial: HashMap<i32, Partial>,
}

/// A message made whole from its fragments.
pub struct Assembled {
    /// The whole payload.
    pub payload: Vec<u8>,
    /// The first fragment's header, flagged unfragmented, its frame length
    /// that of the whole message.
    pub header: Header,
    /// Stream position just after the last fragment.
    pub end_position: i64,
}

impl FragmentAssembler {
    /// An assembler with nothing pending.
    pub fn new() -> FragmentAssembler {
        FragmentAssembler::default()
    }

    /// True if `header` is a whole message on its own (nothing to assemble).
    pub fn is_unfragmented(header: &Header) -> bool {
        header.flags() & UNFRAGMENTED == UNFRAGMENTED
    }

    /// Takes a fragment of a fragmented message; returns the message once
    /// its last fragment arrived in sequence. Unfragmented messages should
    /// not come here (see [`FragmentAssembler::is_unfragmented`]); if they
    /// do, they come back at once.
    pub fn on_fragment(&mut self, payload: &[u8], header: &Header) -> Option<Assembled> {
        let flags = header.flags();
        if flags & UNFRAGMENTED == UNFRAGMENTED {
            return Some(Assembled {
                payload: payload.to_vec(),
                header: *header,
                end_position: header.position(),
            });
        }
        let session = header.session_id();
        if flags & BEGIN_FLAG != 0 {
            // A new message; any unfinished one of this session lost its end.
            let mut first = *header;
            first.set_flags(UNFRAGMENTED);
            self.partial.insert(
                session,
                Partial {
                    payload: payload.to_vec(),
                    first,
                    next_position: header.position(),
                },
            );
            return None;
        }
        match self.partial.get_mut(&session) {
            Some(m) if m.next_position == fragment_start(header) => {
                m.payload.extend_from_slice(payload);
                m.next_position = header.position();
                if flags & END_FLAG == 0 {
                    return None;
                }
                let mut m = self.partial.remove(&session).expect("just found");
                m.first.set_frame_length((m.payload.len() + 32) as i32);
                Some(Assembled {
                    payload: m.payload,
                    header: m.first,
                    end_position: header.position(),
                })
            }
            Some(_) => {
                // Not the fragment that follows (one in between was lost
                // and padded over): the message has a hole.
                self.partial.remove(&session);
                None
            }
            None => None, // no beginning (joined mid-message): dropped
        }
    }

    /// The whole message this fragment ends, if any, with the stream
    /// position after it: an unfragmented message (the usual case) lent
    /// where it lies, with no copy; a reassembled one owned.
    #[inline]
    pub fn whole<'a>(
        &mut self,
        payload: &'a [u8],
        header: &Header,
    ) -> Option<(Cow<'a, [u8]>, i64)> {
        if header.flags() & UNFRAGMENTED == UNFRAGMENTED {
            return Some((Cow::Borrowed(payload), header.position()));
        }
        self.on_fragment(payload, header)
            .map(|m| (Cow::Owned(m.payload), m.end_position))
    }

    /// As [`FragmentAssembler::whole`], appending the message (if this
    /// fragment completed one) to `out`, whose buffer a caller keeps from
    /// poll to poll, so no allocation is made per message. True if a
    /// message was appended.
    #[inline]
    pub fn on_fragment_into(
        &mut self,
        payload: &[u8],
        header: &Header,
        out: &mut AssembledMessages,
    ) -> bool {
        match self.whole(payload, header) {
            Some((message, end_position)) => {
                out.push(&message, end_position, header.session_id());
                true
            }
            None => false,
        }
    }

    /// Forgets a session's unfinished message (its image went away).
    pub fn forget_session(&mut self, session_id: i32) {
        self.partial.remove(&session_id);
    }
}

/// Whole messages back to back in one buffer (what
/// [`FragmentAssembler::on_fragment_into`] appends to), each with the stream
/// position just after it and its session id. Cleared, not dropped, between
/// polls, its buffers grow to a poll's size once and are then reused.
#[derive(Default, Debug)]
pub struct AssembledMessages {
    data: Vec<u8>,
    /// Per message: where it ends in `data`, its end position, its session.
    ends: Vec<(usize, i64, i32)>,
}

impl AssembledMessages {
    /// An empty set.
    pub fn new() -> AssembledMessages {
        AssembledMessages::default()
    }

    /// Appends one message.
    #[inline]
    pub fn push(&mut self, payload: &[u8], end_position: i64, session_id: i32) {
        self.data.extend_from_slice(payload);
        self.ends.push((self.data.len(), end_position, session_id));
    }

    /// Empties it, keeping its buffers.
    pub fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True with no message.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Message `i`: its payload, end position and session id.
    pub fn get(&self, i: usize) -> (&[u8], i64, i32) {
        let start = if i == 0 { 0 } else { self.ends[i - 1].0 };
        let (end, position, session) = self.ends[i];
        (&self.data[start..end], position, session)
    }

    /// The messages in order: payload, end position, session id.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], i64, i32)> + '_ {
        (0..self.ends.len()).map(move |i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sulis_protocol::frame::{
        FLAGS_FIELD_OFFSET, FRAME_LENGTH_FIELD_OFFSET, SESSION_ID_FIELD_OFFSET,
        TERM_OFFSET_FIELD_OFFSET,
    };

    /// The header of a fragment of `len` payload bytes at `offset` in term 0 (64 KiB terms).
    fn header(session: i32, offset: i32, len: usize, flags: u8) -> Header {
        let mut raw = [0u8; 32];
        raw[FRAME_LENGTH_FIELD_OFFSET..FRAME_LENGTH_FIELD_OFFSET + 4]
            .copy_from_slice(&(len as i32 + 32).to_le_bytes());
        raw[FLAGS_FIELD_OFFSET] = flags;
        raw[TERM_OFFSET_FIELD_OFFSET..TERM_OFFSET_FIELD_OFFSET + 4]
            .copy_from_slice(&offset.to_le_bytes());
        raw[SESSION_ID_FIELD_OFFSET..SESSION_ID_FIELD_OFFSET + 4]
            .copy_from_slice(&session.to_le_bytes());
        Header::from_raw(raw, 0, 16)
    }

    #[test]
    fn messages_go_into_one_buffer_whole_and_in_order_across_sessions() {
        let mut a = FragmentAssembler::new();
        let mut out = AssembledMessages::new();
        assert!(a.on_fragment_into(b"one", &header(1, 0, 3, UNFRAGMENTED), &mut out));
        // Session 2's message in three fragments, session 1's second message between them.
        assert!(!a.on_fragment_into(b"ab", &header(2, 0, 2, BEGIN_FLAG), &mut out));
        assert!(a.on_fragment_into(b"two", &header(1, 64, 3, UNFRAGMENTED), &mut out));
        assert!(!a.on_fragment_into(b"cd", &header(2, 32 + 32, 2, 0), &mut out));
        assert!(a.on_fragment_into(b"e", &header(2, 128, 1, END_FLAG), &mut out));
        let got: Vec<(Vec<u8>, i64, i32)> =
            out.iter().map(|(p, pos, s)| (p.to_vec(), pos, s)).collect();
        assert_eq!(
            got,
            vec![
                (b"one".to_vec(), 64, 1),
                (b"two".to_vec(), 128, 1),
                (b"abcde".to_vec(), 192, 2),
            ]
        );
        assert_eq!(out.get(1).0, b"two");
        out.clear();
        assert!(out.is_empty());
        assert!(a.on_fragment_into(b"", &header(3, 0, 0, UNFRAGMENTED), &mut out));
        assert_eq!((out.len(), out.get(0).0), (1, &b""[..]));
    }

    #[test]
    fn a_message_with_a_hole_is_dropped_not_spliced() {
        let mut a = FragmentAssembler::new();
        let mut out = AssembledMessages::new();
        assert!(!a.on_fragment_into(b"ab", &header(1, 0, 2, BEGIN_FLAG), &mut out));
        // The middle fragment (at 64) was lost: the end does not follow the beginning.
        assert!(!a.on_fragment_into(b"e", &header(1, 128, 1, END_FLAG), &mut out));
        assert!(out.is_empty());
        // An end with no beginning (joined mid-message) is dropped too.
        assert!(!a.on_fragment_into(b"f", &header(2, 0, 1, END_FLAG), &mut out));
        assert!(out.is_empty());
    }
}
