//! The sulis archive: records streams into segment files listed in a
//! catalog, replays them from any position, replicates them between
//! archives, speaking Aeron Archive's control protocol and file formats
//! (the contracts are in `sulis_protocol::archive`).

pub mod catalog;
pub mod segment;
