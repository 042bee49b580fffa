//! Network media: UDP sockets with batched system calls.

pub mod udp_channel;
pub mod udp_transport;
