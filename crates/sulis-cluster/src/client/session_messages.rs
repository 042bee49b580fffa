//! `SessionMessages`: the session messages a service container's poll of
//! the log found back to back (no other entry between them), in Arrow's
//! layout, handed in one call to a batched service (the service container's
//! `ClusteredService::on_session_messages`); the client's batched egress
//! poll returns its echoes in the same shape.
//!
//! Payloads lie back to back in `data`; `offsets` has `len() + 1` entries,
//! so message `i` is `data[offsets[i]..offsets[i + 1]]`. Per message: the
//! cluster session it came from (a service's own message, put in the log
//! with `offer_to_cluster`, has no client session: its id is not > 0), its
//! cluster time and the log position after it.

/// Session messages in log order (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMessages {
    pub session_ids: Vec<i64>,
    pub timestamps: Vec<i64>,
    pub positions: Vec<i64>,
    pub data: Vec<u8>,
    pub offsets: Vec<i32>,
}

impl Default for SessionMessages {
    fn default() -> Self {
        SessionMessages {
            session_ids: Vec::new(),
            timestamps: Vec::new(),
            positions: Vec::new(),
            data: Vec::new(),
            offsets: vec![0],
        }
    }
}

impl SessionMessages {
    /// Appends a message: its cluster session, time, the log position after
    /// it and its payload.
    pub fn push(&mut self, session_id: i64, timestamp: i64, position: i64, payload: &[u8]) {
        self.session_ids.push(session_id);
        self.timestamps.push(timestamp);
        self.positions.push(position);
        self.data.extend_from_slice(payload);
        self.offsets.push(self.data.len() as i32);
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// Message `i`'s payload.
    pub fn payload(&self, i: usize) -> &[u8] {
        &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// Message `i`'s client session: None for a service's own message.
    pub fn session(&self, i: usize) -> Option<i64> {
        let id = self.session_ids[i];
        (id > 0).then_some(id)
    }
}

/// The number of messages `offsets` (Arrow's layout: rising, one more
/// than messages) marks in `data_len` bytes, or which does not fit.
pub fn message_count(offsets: &[i32], data_len: usize) -> Result<usize, String> {
    let Some(count) = offsets.len().checked_sub(1) else {
        return Err("no offsets: a batch of n messages has n + 1".into());
    };
    if let Some(i) = (0..count).find(|&i| {
        offsets[i] < 0 || offsets[i] > offsets[i + 1] || offsets[i + 1] as usize > data_len
    }) {
        return Err(format!(
            "message {i}: offsets {}..{} do not lie within the {data_len} bytes of data",
            offsets[i],
            offsets[i + 1],
        ));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_lie_back_to_back_with_a_column_each() {
        let mut m = SessionMessages::default();
        assert!(m.is_empty());
        m.push(7, 100, 96, b"abc");
        m.push(0, 101, 160, b"");
        m.push(8, 102, 224, b"de");
        assert_eq!(m.len(), 3);
        assert_eq!(m.offsets, [0, 3, 3, 5]);
        assert_eq!(m.data, b"abcde");
        assert_eq!(
            (m.payload(0), m.payload(1), m.payload(2)),
            (&b"abc"[..], &b""[..], &b"de"[..])
        );
        assert_eq!((m.session(0), m.session(1)), (Some(7), None));
        assert_eq!(m.timestamps, [100, 101, 102]);
        assert_eq!(m.positions, [96, 160, 224]);
    }

    #[test]
    fn offsets_that_do_not_fit_the_data_are_named() {
        assert_eq!(message_count(&[0, 3, 3, 5], 5), Ok(3));
        assert_eq!(
            message_count(&[2, 4], 4),
            Ok(1),
            "a slice of a longer batch"
        );
        assert_eq!(message_count(&[0], 0), Ok(0));
        assert!(message_count(&[], 0).unwrap_err().contains("no offsets"));
        assert_eq!(
            message_count(&[0, 3, 2], 5).unwrap_err(),
            "message 1: offsets 3..2 do not lie within the 5 bytes of data"
        );
        assert!(message_count(&[0, 6], 5)
            .unwrap_err()
            .starts_with("message 0"));
        assert!(message_count(&[-1, 0], 5)
            .unwrap_err()
            .starts_with("message 0"));
    }
}
