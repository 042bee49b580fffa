//! Counters a client adds to the driver's CnC (ADD_COUNTER): the archive's
//! recording positions and session counts are such counters, visible to
//! every tool and client reading the CnC.

use crate::conductor::Inner;
use crate::ClientError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use sulis_concurrent::counters::CounterRef;
use sulis_protocol::control::{Command, Event};

/// A counter this client allocated; the driver frees it when it is closed
/// (or dropped), or when the client goes away.
pub struct Counter {
    inner: Arc<Inner>,
    registration_id: i64,
    id: i32,
    value: CounterRef,
    closed: AtomicBool,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counter(id={}, value={})", self.id, self.get())
    }
}

impl Counter {
    pub(crate) fn add(
        inner: Arc<Inner>,
        type_id: i32,
        key: &[u8],
        label: &str,
    ) -> Result<Counter, ClientError> {
        if key.len() > sulis_protocol::counters::MAX_KEY_LENGTH {
            return Err(ClientError::Config(format!(
                "counter key of {} bytes is longer than {}",
                key.len(),
                sulis_protocol::counters::MAX_KEY_LENGTH
            )));
        }
        let correlation_id = inner.next_correlation_id();
        let ev = inner.request(
            correlation_id,
            &Command::AddCounter {
                client_id: inner.client_id(),
                correlation_id,
                type_id,
                key: key.to_vec(),
                label: label.to_string(),
            },
        )?;
        let Event::CounterReady { counter_id, .. } = ev else {
            return Err(ClientError::Config(format!(
                "the driver answered ADD_COUNTER with {ev:?}"
            )));
        };
        Ok(Counter {
            value: inner.counter(counter_id),
            inner,
            registration_id: correlation_id,
            id: counter_id,
            closed: AtomicBool::new(false),
        })
    }

    /// The counter id (its slot in the CnC).
    pub fn id(&self) -> i32 {
        self.id
    }

    /// The registration id (the ADD_COUNTER's correlation id).
    pub fn registration_id(&self) -> i64 {
        self.registration_id
    }

    /// Current value.
    pub fn get(&self) -> i64 {
        self.value.get_volatile()
    }

    /// Sets the value (store-release: readers see what came before it).
    pub fn set(&self, value: i64) {
        if !self.is_closed() {
            self.value.set_ordered(value);
        }
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Frees the counter in the driver.
    pub fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            let correlation_id = self.inner.next_correlation_id();
            self.inner.send_quietly(&Command::RemoveCounter {
                client_id: self.inner.client_id(),
                correlation_id,
                registration_id: self.registration_id,
            });
        }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.close();
    }
}
