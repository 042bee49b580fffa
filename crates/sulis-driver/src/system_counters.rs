//! System counters: allocated first, in id order, so counter id == system
//! counter id. Their ids and labels, and every counter type id, are the CnC
//! contract in `sulis_protocol::counters`.

use sulis_concurrent::counters::{CounterRef, CountersManager};
use sulis_concurrent::AtomicBuffer;

pub use sulis_protocol::counters::{
    stream_counter_key, stream_counter_label, type_id, SystemCounter, SYSTEM_COUNTER_TYPE_ID,
};

/// Handles on every system counter: a view of the counter values (`Copy`, so
/// every agent holds its own without allocating or sharing a reference count).
#[derive(Clone, Copy)]
pub struct SystemCounters {
    values: AtomicBuffer,
}

impl SystemCounters {
    /// Allocates all system counters; they must be the first counters allocated.
    pub fn allocate(counters: &mut CountersManager, now_ms: i64) -> Result<SystemCounters, String> {
        for &c in SystemCounter::ALL {
            let label = if c == SystemCounter::SulisVersion {
                format!("{} {}", c.label(), env!("CARGO_PKG_VERSION"))
            } else {
                c.label().to_string()
            };
            // As Aeron's driver: registration id = the counter's own id, no
            // owner (-1). Aeron's client reads the control protocol version
            // only from a counter registered under its id (else it takes the
            // driver for protocol 0).
            let id = counters.allocate(
                SYSTEM_COUNTER_TYPE_ID,
                &(c as i32).to_le_bytes(),
                &label,
                c as i64,
                -1,
                0,
                now_ms,
            )?;
            if id != c as i32 {
                return Err(format!(
                    "system counter '{}' got id {id}, not {}: system counters must be allocated first",
                    c.label(),
                    c as i32
                ));
            }
        }
        let system = SystemCounters {
            values: counters.reader().values_buffer(),
        };
        system
            .get(SystemCounter::ControlProtocolVersion)
            .set_ordered(0x01_00_00);
        // As Aeron: major << 16 | minor << 8 | patch.
        let part = |s: &str| s.parse::<i64>().unwrap_or(0).clamp(0, 255);
        let version = (part(env!("CARGO_PKG_VERSION_MAJOR")) << 16)
            | (part(env!("CARGO_PKG_VERSION_MINOR")) << 8)
            | part(env!("CARGO_PKG_VERSION_PATCH"));
        system.get(SystemCounter::SulisVersion).set_ordered(version);
        Ok(system)
    }

    /// The counter's handle.
    #[inline]
    pub fn get(&self, c: SystemCounter) -> CounterRef {
        CounterRef::new(self.values, c as i32)
    }

    /// Adds one (atomically: several agents count into the same counters).
    #[inline]
    pub fn increment(&self, c: SystemCounter) {
        self.get(c).get_and_add(1);
    }

    /// Adds `n` (atomically).
    #[inline]
    pub fn add(&self, c: SystemCounter, n: i64) {
        self.get(c).get_and_add(n);
    }
}
