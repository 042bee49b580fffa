//! Shared-memory building blocks of sulis.
//!
//! Everything here works on memory that another thread or another process may be
//! using at the same time: the log buffers that carry a stream's frames, the
//! many-to-one ring buffer that carries client commands to the driver, the
//! broadcast buffer that carries driver events back, counters and the error log.
//! The layouts are Aeron's (see docs/protocol.md), so Aeron's tools can read them.

pub mod agent;
pub mod atomic_buffer;
pub mod bit_util;
pub mod broadcast;
pub mod cnc;
pub mod counters;
pub mod error_log;
pub mod idle;
pub mod logbuffer;
pub mod loss_report;
pub mod mapped_file;
pub mod mpsc_ring_buffer;

pub use atomic_buffer::{align, AtomicBuffer};
