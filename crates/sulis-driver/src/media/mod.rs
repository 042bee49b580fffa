//! Network media: the [`transport::Transport`] seam, UDP sockets with
//! batched system calls, a loss-injecting wrapper and an in-memory network.

pub mod memory;
pub mod transport;
pub mod transport_poller;
pub mod udp_channel;
pub mod udp_transport;
