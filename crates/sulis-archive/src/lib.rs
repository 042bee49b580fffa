//! The sulis archive: records streams into segment files listed in a
//! catalog, replays them from any position, replicates them between
//! archives, speaking Aeron Archive's control protocol and file formats
//! (the contracts are in `sulis_protocol::archive`).

pub mod catalog;
pub mod checksum;
pub mod conductor;
pub mod context;
pub mod crash_point;
pub mod error;
mod frame_fields;
pub mod holds;
pub mod mark_file;
pub mod retention;
pub mod segment;
pub mod tier;

pub use conductor::ArchiveConductor;
pub use context::{ArchiveContext, ArchiveThreadingMode};
pub use error::ArchiveStartError;
pub mod archive;
pub mod auth;
pub mod client;

pub use archive::Archive;
pub use client::{ArchiveClient, ArchiveClientContext, ArchiveError, Replication};
pub mod tool;
