//! Reassembling fragmented messages, per session, as Aeron's
//! `FragmentAssembler`: a fragment is appended only when it starts where the
//! previous one of its session ended, so a message with a hole (a fragment
//! lost and padded over with `reliable=false`) is dropped, never spliced
//! into something else.

use crate::image::Header;
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

    /// Forgets a session's unfinished message (its image went away).
    pub fn forget_session(&mut self, session_id: i32) {
        self.partial.remove(&session_id);
    }
}
