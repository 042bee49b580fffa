//! Random ids, as Agrona's `BitUtil.generateRandomisedId`: a driver's first
//! session id and receiver id, an archive's first control-session and
//! replication ids.
//!
//! Never from the clock and the process id alone: two processes started in
//! one millisecond (a cluster's members launched together) then shared them,
//! and a member took two others' consensus streams for one image.

use std::hash::{BuildHasher, Hasher};

/// 64 random bits. The standard library keys each `RandomState` from the
/// OS's randomness (and moves the key on for every one made in a process),
/// so two calls differ, in one process or in two started at once.
pub fn generate_randomised_id() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_made_at_once_differ() {
        let ids: std::collections::HashSet<u64> =
            (0..64).map(|_| generate_randomised_id()).collect();
        assert_eq!(ids.len(), 64);
    }
}
