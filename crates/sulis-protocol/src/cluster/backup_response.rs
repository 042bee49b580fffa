//! BackupResponse (schema 111, template 78): a member's answer to a
//! BackupQuery from Aeron's ClusterBackup: where its log is recorded, the
//! terms to copy, the counter bounding a replay of the log at the commit
//! position, and the snapshots to start from. It has a repeating group, so
//! it is written by hand rather than from the schema table in
//! [`super::messages`].

use super::messages::{SCHEMA_ID, SCHEMA_VERSION};
use crate::sbe::{field_at, put_var, Header, Reader, SbeError};

/// A snapshot the backup should copy (one per service and one for the
/// consensus module, service id −1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupSnapshot {
    /// Its recording in the answering member's archive.
    pub recording_id: i64,
    /// The term it was taken in.
    pub leadership_term_id: i64,
    /// Where that term began in the log.
    pub term_base_log_position: i64,
    /// The log position it was taken at.
    pub log_position: i64,
    /// When (cluster clock).
    pub timestamp: i64,
    /// Whose state: a service's id, −1 the consensus module's.
    pub service_id: i32,
}

/// The answer to a BackupQuery.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupResponse {
    /// The query's correlation id.
    pub correlation_id: i64,
    /// The log's recording in the answering member's archive.
    pub log_recording_id: i64,
    /// The term a replay of that recording starts in.
    pub log_leadership_term_id: i64,
    /// Where that term began.
    pub log_term_base_log_position: i64,
    /// The member's last term.
    pub last_leadership_term_id: i64,
    /// Where it began.
    pub last_term_base_log_position: i64,
    /// The member's commit-position counter (a replay bounded by it never
    /// passes what the cluster committed).
    pub commit_position_counter_id: i32,
    /// The leader it knows.
    pub leader_member_id: i32,
    /// The answering member.
    pub member_id: i32,
    /// The latest snapshot set at or before the position asked for.
    pub snapshots: Vec<BackupSnapshot>,
    /// The members, as `cluster.members` lists them.
    pub cluster_members: String,
}

const BLOCK_LENGTH: u16 = 60;
const SNAPSHOT_BLOCK_LENGTH: u16 = 44;

impl BackupResponse {
    /// Template id.
    pub const TEMPLATE_ID: u16 = 78;

    /// Encodes the message, SBE header included.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + 44 * self.snapshots.len());
        Header {
            block_length: BLOCK_LENGTH,
            template_id: Self::TEMPLATE_ID,
            schema_id: SCHEMA_ID,
            version: SCHEMA_VERSION,
        }
        .encode(&mut out);
        for v in [
            self.correlation_id,
            self.log_recording_id,
            self.log_leadership_term_id,
            self.log_term_base_log_position,
            self.last_leadership_term_id,
            self.last_term_base_log_position,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            self.commit_position_counter_id,
            self.leader_member_id,
            self.member_id,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&SNAPSHOT_BLOCK_LENGTH.to_le_bytes());
        out.extend_from_slice(&(self.snapshots.len() as u16).to_le_bytes());
        for s in &self.snapshots {
            for v in [
                s.recording_id,
                s.leadership_term_id,
                s.term_base_log_position,
                s.log_position,
                s.timestamp,
            ] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&s.service_id.to_le_bytes());
        }
        put_var(&mut out, self.cluster_members.as_bytes());
        out
    }

    /// Decodes the message (header included), honouring the sender's block
    /// lengths for the root and the group's entries. A sender before
    /// version 10 has no `member_id` (−1 then).
    pub fn decode(buf: &[u8]) -> Result<Self, SbeError> {
        let mut r = Reader::new(buf, "BackupResponse", Self::TEMPLATE_ID, SCHEMA_ID)?;
        if r.block_length() < 56 {
            return Err(SbeError::new(format!(
                "BackupResponse: a {}-byte root block",
                r.block_length()
            )));
        }
        let mut out = BackupResponse {
            correlation_id: r.fixed(0, 0, -1),
            log_recording_id: r.fixed(8, 0, -1),
            log_leadership_term_id: r.fixed(16, 0, -1),
            log_term_base_log_position: r.fixed(24, 0, -1),
            last_leadership_term_id: r.fixed(32, 0, -1),
            last_term_base_log_position: r.fixed(40, 0, -1),
            commit_position_counter_id: r.fixed(48, 0, -1),
            leader_member_id: r.fixed(52, 0, -1),
            member_id: r.fixed(56, 10, -1),
            ..Default::default()
        };
        let (block, count) = r.group("the snapshots", SNAPSHOT_BLOCK_LENGTH as usize)?;
        for _ in 0..count {
            let b = r.entry("the snapshots", block)?;
            out.snapshots.push(BackupSnapshot {
                recording_id: field_at(b, 0),
                leadership_term_id: field_at(b, 8),
                term_base_log_position: field_at(b, 16),
                log_position: field_at(b, 24),
                timestamp: field_at(b, 32),
                service_id: field_at(b, 40),
            });
        }
        out.cluster_members = r.ascii("the members", 0)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response() -> BackupResponse {
        BackupResponse {
            correlation_id: 7,
            log_recording_id: 2,
            log_leadership_term_id: 3,
            log_term_base_log_position: 4096,
            last_leadership_term_id: 3,
            last_term_base_log_position: 4096,
            commit_position_counter_id: 11,
            leader_member_id: 1,
            member_id: 0,
            snapshots: vec![
                BackupSnapshot {
                    recording_id: 5,
                    leadership_term_id: 2,
                    term_base_log_position: 1024,
                    log_position: 2048,
                    timestamp: 99,
                    service_id: 0,
                },
                BackupSnapshot {
                    recording_id: 6,
                    service_id: -1,
                    ..Default::default()
                },
            ],
            cluster_members: "0,h0:1,h0:2,h0:3,h0:4,h0:5|1,h1:1,h1:2,h1:3,h1:4,h1:5".into(),
        }
    }

    #[test]
    fn round_trips_with_aerons_layout() {
        let r = response();
        let bytes = r.encode();
        // Header, a 60-byte root, the group's 4-byte dimensions, two 44-byte
        // entries, the members' 4-byte length and text.
        assert_eq!(
            bytes.len(),
            8 + 60 + 4 + 2 * 44 + 4 + r.cluster_members.len()
        );
        assert_eq!(&bytes[68..72], &[44, 0, 2, 0]);
        assert_eq!(BackupResponse::decode(&bytes).unwrap(), r);
    }

    #[test]
    fn reads_a_longer_root_and_longer_entries_and_refuses_a_short_message() {
        let r = response();
        let mut bytes = r.encode();
        // A later sender: 4 more root bytes and 8 more per entry.
        let mut later = bytes[..68].to_vec();
        later[0..2].copy_from_slice(&64u16.to_le_bytes());
        later.extend_from_slice(&[0; 4]);
        later.extend_from_slice(&52u16.to_le_bytes());
        later.extend_from_slice(&2u16.to_le_bytes());
        for entry in bytes[72..72 + 88].chunks(44) {
            later.extend_from_slice(entry);
            later.extend_from_slice(&[0xff; 8]);
        }
        later.extend_from_slice(&bytes[72 + 88..]);
        assert_eq!(BackupResponse::decode(&later).unwrap(), r);
        let short = &bytes[..bytes.len() - 3];
        let e = BackupResponse::decode(short).unwrap_err().to_string();
        assert!(e.contains("the members claims"), "{e}");
        let e = BackupResponse::decode(&bytes[..72 + 50])
            .unwrap_err()
            .to_string();
        assert!(e.contains("ends inside an entry of the snapshots"), "{e}");
        bytes[68..70].copy_from_slice(&40u16.to_le_bytes());
        let e = BackupResponse::decode(&bytes).unwrap_err().to_string();
        assert!(e.contains("40-byte entries, fewer than the 44 read"), "{e}");
    }
}
