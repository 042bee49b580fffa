//! Aeron-compatible wire frames, shared-memory layouts, channel URIs and the
//! client ↔ driver control messages of sulis.
//!
//! Nothing in this crate performs I/O: it only names offsets, validates and
//! encodes, so that every other crate agrees on one definition of each layout.

pub mod archive;
pub mod cluster;
pub mod cnc_descriptor;
pub mod control;
pub mod counters;
pub mod driver_dir;
pub mod flow_control_params;
pub mod frame;
pub mod log_buffer_descriptor;
pub mod options;
pub mod sbe;
pub mod uri;
pub mod values;

#[cfg(test)]
mod random_input;
