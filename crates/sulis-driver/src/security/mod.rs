//! Transport security: secured UDP channels seal every datagram with a key
//! from the driver's keyring and open only what a key-holder sealed, once.
//!
//! - [`keyring`]: the keys, from a file read again when it changes;
//! - [`secure_transport`]: the socket wrapper that seals and opens;
//! - [`replay_window`]: each sender's window of counters already taken.
//!
//! A channel opts in with `security=auth` (every datagram authenticated) or
//! `security=encrypt` (authenticated and encrypted), or the driver's
//! `security` option secures every UDP channel that does not say.

pub mod keyring;
pub mod replay_window;
pub mod secure_transport;

pub use keyring::{Keyring, Keys};
pub use secure_transport::{SecureTransport, SecurityContext, SecurityMode};
