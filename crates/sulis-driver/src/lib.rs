//! The sulis media driver.
//!
//! The driver owns the command-and-control file and every log buffer in its
//! directory. Clients (in any process) send commands through the CnC's ring
//! buffer; the conductor agent creates publications, links subscribers to
//! them, keeps publisher limits behind the slowest subscriber, and times out
//! clients that stop heartbeating.

pub mod agent;
pub mod conductor;
pub mod congestion_control;
pub mod context;
pub mod flow_control;
pub mod ipc_publication;
pub mod lifecycle;
pub mod loss;
pub mod media;
pub mod media_driver;
pub mod multi_send_destination;
pub mod network_publication;
pub mod publication_image;
pub mod receiver;
pub mod security;
pub mod sender;
pub mod system_counters;

pub use context::{DriverContext, ThreadingMode};
pub use media_driver::{active_driver, DriverError, MediaDriver};
