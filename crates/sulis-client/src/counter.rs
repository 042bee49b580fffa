//! Counters a client adds to the driver's CnC (ADD_COUNTER): the archive's
//! recording positions and session counts are such counters, visible to
//! every tool and client reading the CnC.

use crate::driver_proxy::DriverProxy;
use crate::ClientError;
use std::sync::atomic::{AtomicBool, Ordering};
use sulis_concurrent::counters::CounterRef;

/// A counter this client allocated; the driver frees it when it is closed
/// (or dropped), or when the client goes away.
pub struct Counter {
    driver: DriverProxy,
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
        driver: DriverProxy,
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
        let (registration_id, counter_id) = driver.add_counter(type_id, key, label)?;
        Ok(Counter {
            value: driver.counter(counter_id),
            driver,
            registration_id,
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
            self.driver.remove_counter(self.registration_id);
        }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.close();
    }
}
