//! The archive's shared contracts: its control protocol (Aeron Archive's
//! SBE schema 101) and, as they come, its file layouts.

pub mod messages;
pub mod sbe;
