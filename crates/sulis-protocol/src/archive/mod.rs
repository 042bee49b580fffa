//! The archive's shared contracts: its control protocol (Aeron Archive's
//! SBE schema 101) and its file layouts (the catalog, segment files), as
//! Aeron's archive and tools read them.

pub mod catalog;
pub mod channel;
pub mod mark_file;
pub mod messages;
pub mod segment;
