//! BackupResponse (schema 111, template 78): a member's answer to a
//! BackupQuery from Aeron's ClusterBackup: where its log is recorded, the
//! terms to copy, the counter bounding a replay of the log at the commit
//! position, and the snapshots to start from. It has a repeating group, so
//! it is written by hand rather than from the schema table in
//! [`super::messages`].

use super::messages::{SCHEMA_ID, SCHEMA_VERSION};
use crate::sbe::{put_var, Header, SbeError, HEADER_LENGTH};

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

fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

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
        let h = Header::decode(buf)?;
        if h.schema_id != SCHEMA_ID || h.template_id != Self::TEMPLATE_ID {
            return Err(SbeError::new(format!(
                "BackupResponse: schema {} template {} is not {SCHEMA_ID}/{}",
                h.schema_id,
                h.template_id,
                Self::TEMPLATE_ID
            )));
        }
        let mut at = HEADER_LENGTH;
        let mut take = |n: usize, what: &str| -> Result<&[u8], SbeError> {
            if buf.len() - at < n {
                return Err(SbeError::new(format!(
                    "BackupResponse: the message ends inside {what}"
                )));
            }
            at += n;
            Ok(&buf[at - n..at])
        };
        let root = take(h.block_length as usize, "the root block")?;
        if root.len() < 56 {
            return Err(SbeError::new(format!(
                "BackupResponse: a {}-byte root block",
                root.len()
            )));
        }
        let mut out = BackupResponse {
            correlation_id: i64_at(root, 0),
            log_recording_id: i64_at(root, 8),
            log_leadership_term_id: i64_at(root, 16),
            log_term_base_log_position: i64_at(root, 24),
            last_leadership_term_id: i64_at(root, 32),
            last_term_base_log_position: i64_at(root, 40),
            commit_position_counter_id: i32_at(root, 48),
            leader_member_id: i32_at(root, 52),
            member_id: if root.len() >= 60 && h.version >= 10 {
                i32_at(root, 56)
            } else {
                -1
            },
            ..Default::default()
        };
        let dims = take(4, "the snapshots group's dimensions")?;
        let block = u16::from_le_bytes([dims[0], dims[1]]) as usize;
        let count = u16::from_le_bytes([dims[2], dims[3]]);
        if block < SNAPSHOT_BLOCK_LENGTH as usize {
            return Err(SbeError::new(format!(
                "BackupResponse: a {block}-byte snapshot block"
            )));
        }
        for _ in 0..count {
            let b = take(block, "a snapshot's block")?;
            out.snapshots.push(BackupSnapshot {
                recording_id: i64_at(b, 0),
                leadership_term_id: i64_at(b, 8),
                term_base_log_position: i64_at(b, 16),
                log_position: i64_at(b, 24),
                timestamp: i64_at(b, 32),
                service_id: i32_at(b, 40),
            });
        }
        let len = u32::from_le_bytes(take(4, "the members' length")?.try_into().expect("4 bytes"));
        let members = take(len as usize, "the members")?;
        out.cluster_members = String::from_utf8(members.to_vec())
            .map_err(|_| SbeError::new("BackupResponse: the members are not US-ASCII"))?;
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
        bytes.truncate(bytes.len() - 3);
        let e = BackupResponse::decode(&bytes).unwrap_err().to_string();
        assert!(e.contains("ends inside the members"), "{e}");
    }
}
