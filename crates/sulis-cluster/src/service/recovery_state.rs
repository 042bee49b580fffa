//! The recovery-state counter (Aeron's `RecoveryState`, type 204): while a
//! member starts, its consensus module tells its services through this
//! counter's key where recovery starts — the snapshot each service loads
//! (its recording id, −1 for none), the log position and term of that
//! snapshot and its cluster time — before it asks them to join the log.
//!
//! Key: leadershipTermId i64 @0, logPosition i64 @8, timestamp i64 @16,
//! replayRequired i32 @24, serviceCount i32 @28, clusterId i32 @32, then
//! one snapshot recording id i64 per service from @36.

use sulis_client::Client;

/// Counter type of the recovery state.
pub const RECOVERY_STATE_TYPE_ID: i32 = sulis_protocol::counters::type_id::CLUSTER_RECOVERY_STATE;

/// What a starting member recovers from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryState {
    /// The snapshot's term (−1 without a snapshot).
    pub leadership_term_id: i64,
    /// The snapshot's log position (0 without one).
    pub log_position: i64,
    /// The snapshot's cluster time.
    pub timestamp: i64,
    /// Whether the log after it is replayed.
    pub replay_required: bool,
    /// The cluster's id.
    pub cluster_id: i32,
    /// Each service's snapshot recording (−1: none).
    pub snapshot_recording_ids: Vec<i64>,
}

impl RecoveryState {
    /// The counter's key.
    pub fn key(&self) -> Vec<u8> {
        let mut k = Vec::with_capacity(36 + 8 * self.snapshot_recording_ids.len());
        k.extend_from_slice(&self.leadership_term_id.to_le_bytes());
        k.extend_from_slice(&self.log_position.to_le_bytes());
        k.extend_from_slice(&self.timestamp.to_le_bytes());
        k.extend_from_slice(&(self.replay_required as i32).to_le_bytes());
        k.extend_from_slice(&(self.snapshot_recording_ids.len() as i32).to_le_bytes());
        k.extend_from_slice(&self.cluster_id.to_le_bytes());
        for id in &self.snapshot_recording_ids {
            k.extend_from_slice(&id.to_le_bytes());
        }
        k
    }

    /// The counter's label.
    pub fn label(&self) -> String {
        format!(
            "Cluster recovery: leadershipTermId={} logPosition={} timestamp={} replayRequired={} serviceCount={} clusterId={}",
            self.leadership_term_id,
            self.log_position,
            self.timestamp,
            self.replay_required,
            self.snapshot_recording_ids.len(),
            self.cluster_id
        )
    }

    /// A key read back (`None` if too short for what it says it holds).
    pub fn decode(key: &[u8]) -> Option<RecoveryState> {
        let i64_at = |o: usize| Some(i64::from_le_bytes(key.get(o..o + 8)?.try_into().ok()?));
        let i32_at = |o: usize| Some(i32::from_le_bytes(key.get(o..o + 4)?.try_into().ok()?));
        let count = usize::try_from(i32_at(28)?).ok()?;
        let ids = (0..count)
            .map(|i| i64_at(36 + 8 * i))
            .collect::<Option<Vec<i64>>>()?;
        Some(RecoveryState {
            leadership_term_id: i64_at(0)?,
            log_position: i64_at(8)?,
            timestamp: i64_at(16)?,
            replay_required: i32_at(24)? != 0,
            cluster_id: i32_at(32)?,
            snapshot_recording_ids: ids,
        })
    }

    /// The recovery state the driver's counters hold now, if any.
    pub fn find(client: &Client) -> Option<RecoveryState> {
        let mut found = None;
        client.counters().for_each(|_id, type_id, key, _label| {
            if type_id == RECOVERY_STATE_TYPE_ID {
                found = RecoveryState::decode(key);
            }
        });
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_reads_back_as_written_and_a_short_one_is_refused() {
        let s = RecoveryState {
            leadership_term_id: 4,
            log_position: 8192,
            timestamp: 1_700_000_000_000,
            replay_required: true,
            cluster_id: 0,
            snapshot_recording_ids: vec![17, -1, 3],
        };
        let key = s.key();
        assert_eq!(key.len(), 36 + 24);
        assert_eq!(RecoveryState::decode(&key), Some(s));
        assert_eq!(RecoveryState::decode(&key[..50]), None);
        assert!(RecoveryState::decode(&[]).is_none());
    }
}
