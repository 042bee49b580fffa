//! What a client's resources (publications, subscriptions, counters) may ask
//! of their client: Aeron's `DriverProxy` (the commands that reach the
//! driver: remove a resource, add or remove a counter) and the client's
//! health, through a handful of narrow calls. A resource holds a
//! [`DriverProxy`], never the client conductor's state, so the conductor
//! can make resources without them importing it.

use crate::ClientError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use sulis_concurrent::counters::{CounterRef, CountersReader};

/// Which kind of resource a removal is for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Resource {
    Publication,
    Subscription,
}

/// A change to the destinations of a multi-destination channel.
#[derive(Clone, Debug)]
pub(crate) enum Destination<'a> {
    /// Adds the destination channel.
    Add(&'a str),
    /// Removes the destination added with this channel.
    Remove(&'a str),
    /// Removes the destination its add's registration id names.
    RemoveById(i64),
}

/// The calls behind a [`DriverProxy`]; the client conductor implements them.
pub(crate) trait ClientCalls: Send + Sync {
    /// Why the client is unusable (closed, timed out, driver gone).
    fn failure(&self) -> ClientError;
    /// A counter of the driver's (a publication's position limit).
    fn counter(&self, id: i32) -> CounterRef;
    /// The driver's counters (an endpoint's bound addresses).
    fn counters(&self) -> CountersReader;
    /// Asks the driver to remove a publication or subscription: waiting for
    /// its answer (`close`) or not (`drop`, which must never block).
    fn remove(
        &self,
        resource: Resource,
        registration_id: i64,
        wait: bool,
    ) -> Result<(), ClientError>;
    /// Asks the driver for a counter: (registration id, counter id).
    fn add_counter(&self, type_id: i32, key: &[u8], label: &str)
        -> Result<(i64, i32), ClientError>;
    /// Frees a counter in the driver (without waiting).
    fn remove_counter(&self, registration_id: i64);
    /// Changes the destinations of the publication (`receive` false) or
    /// subscription `registration_id`, waiting for the driver's answer;
    /// returns the command's correlation id (an added destination's id).
    fn destination(
        &self,
        registration_id: i64,
        receive: bool,
        change: Destination<'_>,
    ) -> Result<i64, ClientError>;
}

/// A resource's handle on its client.
#[derive(Clone)]
pub(crate) struct DriverProxy {
    /// Set once the client is unusable: read on hot paths without a call.
    failed: Arc<AtomicBool>,
    calls: Arc<dyn ClientCalls>,
}

impl DriverProxy {
    pub(crate) fn new(failed: Arc<AtomicBool>, calls: Arc<dyn ClientCalls>) -> DriverProxy {
        DriverProxy { failed, calls }
    }

    /// True once the client is unusable: one relaxed load, for hot paths.
    #[inline(always)]
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// `Err` with the client's failure once it is unusable.
    pub(crate) fn check(&self) -> Result<(), ClientError> {
        if self.failed.load(Ordering::Acquire) {
            Err(self.calls.failure())
        } else {
            Ok(())
        }
    }

    pub(crate) fn failure(&self) -> ClientError {
        self.calls.failure()
    }

    pub(crate) fn counter(&self, id: i32) -> CounterRef {
        self.calls.counter(id)
    }

    pub(crate) fn counters(&self) -> CountersReader {
        self.calls.counters()
    }

    pub(crate) fn remove(
        &self,
        resource: Resource,
        registration_id: i64,
        wait: bool,
    ) -> Result<(), ClientError> {
        self.calls.remove(resource, registration_id, wait)
    }

    pub(crate) fn add_counter(
        &self,
        type_id: i32,
        key: &[u8],
        label: &str,
    ) -> Result<(i64, i32), ClientError> {
        self.calls.add_counter(type_id, key, label)
    }

    pub(crate) fn remove_counter(&self, registration_id: i64) {
        self.calls.remove_counter(registration_id)
    }

    pub(crate) fn destination(
        &self,
        registration_id: i64,
        receive: bool,
        change: Destination<'_>,
    ) -> Result<i64, ClientError> {
        self.check()?;
        self.calls.destination(registration_id, receive, change)
    }
}
