//! A session's answers its egress has not taken yet, in order: what lets a
//! service's `offer` return at once whatever one client's egress does, so
//! one slow or vanished client never holds the log for everyone. The
//! service container drains it as the egress takes messages, and closes the
//! session when it outgrows its bound or takes nothing for too long (the
//! container decides; the close goes through the log, so every member sees
//! the same).
//!
//! Messages lie back to back in one buffer (no allocation per message once
//! it grew); the bytes of those sent are dropped once they are half of it.

use std::collections::VecDeque;

/// The queued messages of one session.
#[derive(Default)]
pub struct EgressQueue {
    data: Vec<u8>,
    /// Where the oldest message starts in `data`.
    head: usize,
    /// Each message's length, oldest first.
    lengths: VecDeque<u32>,
}

impl EgressQueue {
    /// Nothing waits.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> usize {
        self.data.len() - self.head
    }

    /// Appends `message` (newest).
    pub fn push(&mut self, message: &[u8]) {
        self.data.extend_from_slice(message);
        self.lengths.push_back(message.len() as u32);
    }

    /// The oldest message, if any.
    pub fn front(&self) -> Option<&[u8]> {
        let len = *self.lengths.front()? as usize;
        Some(&self.data[self.head..self.head + len])
    }

    /// Drops the oldest message (it went).
    pub fn pop_front(&mut self) {
        let Some(len) = self.lengths.pop_front() else {
            return;
        };
        self.head += len as usize;
        if self.lengths.is_empty() {
            self.data.clear();
            self.head = 0;
        } else if self.head > self.data.len() / 2 {
            // Each byte moves at most once on average.
            self.data.drain(..self.head);
            self.head = 0;
        }
    }

    /// Drops everything, and the memory with it.
    pub fn clear(&mut self) {
        *self = EgressQueue::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_out_in_order_and_whole_and_the_sent_bytes_go() {
        let mut q = EgressQueue::default();
        assert!(q.is_empty() && q.front().is_none());
        for i in 0..100u8 {
            q.push(&vec![i; 1 + i as usize % 7]);
        }
        assert_eq!(q.len(), 100);
        for i in 0..60u8 {
            assert_eq!(q.front().unwrap(), &vec![i; 1 + i as usize % 7][..]);
            q.pop_front();
        }
        assert!(q.data.len() < 400, "the bytes sent were dropped");
        q.push(b"new");
        for i in 60..100u8 {
            assert_eq!(q.front().unwrap(), &vec![i; 1 + i as usize % 7][..]);
            q.pop_front();
        }
        assert_eq!((q.front(), q.bytes()), (Some(&b"new"[..]), 3));
        q.pop_front();
        assert!(q.is_empty() && q.bytes() == 0 && q.data.is_empty());
        q.push(b"x");
        q.clear();
        assert!(q.is_empty() && q.data.capacity() == 0);
    }
}
