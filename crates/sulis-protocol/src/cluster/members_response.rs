//! ClusterMembersExtendedResponse (schema 111, template 43): a consensus
//! module's answer to an extended ClusterMembersQuery (`list-members`),
//! each member's endpoints and last reported log position. It has
//! repeating groups, so it is written by hand rather than from the schema
//! table in [`super::messages`].

use super::messages::{SCHEMA_ID, SCHEMA_VERSION};
use crate::sbe::{field_at, put_var, Header, Reader, SbeError};

/// A member as the answering module sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberStatus {
    /// Leadership term of the log it last reported.
    pub leadership_term_id: i64,
    /// Log position it last reported (−1: nothing heard).
    pub log_position: i64,
    /// When it last reported an append position (cluster clock, ns).
    pub time_of_last_append_ns: i64,
    /// Its id.
    pub member_id: i32,
    /// Where clients send ingress.
    pub ingress_endpoint: String,
    /// Where members send consensus messages.
    pub consensus_endpoint: String,
    /// Where the leader's log reaches it.
    pub log_endpoint: String,
    /// Where a catch-up replay reaches it.
    pub catchup_endpoint: String,
    /// Its archive's control endpoint.
    pub archive_endpoint: String,
}

/// The extended members response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterMembersExtendedResponse {
    /// The query's correlation id.
    pub correlation_id: i64,
    /// The answering module's cluster clock (ns).
    pub current_time_ns: i64,
    /// The leader it knows (−1: none, an election runs).
    pub leader_member_id: i32,
    /// The answering member.
    pub member_id: i32,
    /// The voting members.
    pub active_members: Vec<MemberStatus>,
    /// Members without a vote (none in sulis).
    pub passive_members: Vec<MemberStatus>,
}

const BLOCK_LENGTH: u16 = 24;
const MEMBER_BLOCK_LENGTH: u16 = 28;

impl ClusterMembersExtendedResponse {
    /// Template id.
    pub const TEMPLATE_ID: u16 = 43;

    /// Encodes the message, SBE header included.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        Header {
            block_length: BLOCK_LENGTH,
            template_id: Self::TEMPLATE_ID,
            schema_id: SCHEMA_ID,
            version: SCHEMA_VERSION,
        }
        .encode(&mut out);
        out.extend_from_slice(&self.correlation_id.to_le_bytes());
        out.extend_from_slice(&self.current_time_ns.to_le_bytes());
        out.extend_from_slice(&self.leader_member_id.to_le_bytes());
        out.extend_from_slice(&self.member_id.to_le_bytes());
        for group in [&self.active_members, &self.passive_members] {
            out.extend_from_slice(&MEMBER_BLOCK_LENGTH.to_le_bytes());
            out.extend_from_slice(&(group.len() as u16).to_le_bytes());
            for m in group {
                out.extend_from_slice(&m.leadership_term_id.to_le_bytes());
                out.extend_from_slice(&m.log_position.to_le_bytes());
                out.extend_from_slice(&m.time_of_last_append_ns.to_le_bytes());
                out.extend_from_slice(&m.member_id.to_le_bytes());
                for text in [
                    &m.ingress_endpoint,
                    &m.consensus_endpoint,
                    &m.log_endpoint,
                    &m.catchup_endpoint,
                    &m.archive_endpoint,
                ] {
                    put_var(&mut out, text.as_bytes());
                }
            }
        }
        out
    }

    /// Decodes the message (header included), honouring the sender's block
    /// lengths for the root and for each group entry.
    pub fn decode(buf: &[u8]) -> Result<Self, SbeError> {
        const NAME: &str = "ClusterMembersExtendedResponse";
        let mut r = Reader::new(buf, NAME, Self::TEMPLATE_ID, SCHEMA_ID)?;
        if r.block_length() < BLOCK_LENGTH as usize {
            return Err(SbeError::new(format!(
                "{NAME}: a {}-byte root block",
                r.block_length()
            )));
        }
        let mut out = ClusterMembersExtendedResponse {
            correlation_id: r.fixed(0, 0, -1),
            current_time_ns: r.fixed(8, 0, -1),
            leader_member_id: r.fixed(16, 0, -1),
            member_id: r.fixed(20, 0, -1),
            ..Default::default()
        };
        for (passive, group) in [(false, "the active members"), (true, "the passive members")] {
            let (block, count) = r.group(group, MEMBER_BLOCK_LENGTH as usize)?;
            for _ in 0..count {
                let b = r.entry(group, block)?;
                let mut m = MemberStatus {
                    leadership_term_id: field_at(b, 0),
                    log_position: field_at(b, 8),
                    time_of_last_append_ns: field_at(b, 16),
                    member_id: field_at(b, 24),
                    ..Default::default()
                };
                for (field, name) in [
                    (&mut m.ingress_endpoint, "an ingress endpoint"),
                    (&mut m.consensus_endpoint, "a consensus endpoint"),
                    (&mut m.log_endpoint, "a log endpoint"),
                    (&mut m.catchup_endpoint, "a catch-up endpoint"),
                    (&mut m.archive_endpoint, "an archive endpoint"),
                ] {
                    *field = r.ascii(name, 0)?;
                }
                if passive {
                    out.passive_members.push(m);
                } else {
                    out.active_members.push(m);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: i32) -> MemberStatus {
        MemberStatus {
            leadership_term_id: 3,
            log_position: 1024 * id as i64,
            time_of_last_append_ns: 99,
            member_id: id,
            ingress_endpoint: format!("h{id}:9010"),
            consensus_endpoint: format!("h{id}:9020"),
            log_endpoint: format!("h{id}:9030"),
            catchup_endpoint: format!("h{id}:9040"),
            archive_endpoint: format!("h{id}:8010"),
        }
    }

    #[test]
    fn should_round_trip_and_lay_out_the_groups_as_the_schema_does() {
        let r = ClusterMembersExtendedResponse {
            correlation_id: 11,
            current_time_ns: 12,
            leader_member_id: 1,
            member_id: 2,
            active_members: vec![member(0), member(1), member(2)],
            passive_members: vec![],
        };
        let b = r.encode();
        assert_eq!(&b[..8], &[24, 0, 43, 0, 111, 0, 16, 0]);
        // The first group's dimensions follow the 24-byte root block.
        assert_eq!(&b[32..36], &[28, 0, 3, 0]);
        assert_eq!(&b[36 + 24..36 + 28], &0i32.to_le_bytes());
        assert_eq!(&b[36 + 28..36 + 32], &7u32.to_le_bytes());
        assert_eq!(&b[b.len() - 4..], &[28, 0, 0, 0]);
        assert_eq!(ClusterMembersExtendedResponse::decode(&b).unwrap(), r);
        // A truncated message is an error, never a short answer.
        for cut in [10, 40, b.len() - 1] {
            assert!(ClusterMembersExtendedResponse::decode(&b[..cut]).is_err());
        }
    }

    #[test]
    fn should_skip_a_newer_senders_longer_blocks() {
        let mut r = ClusterMembersExtendedResponse {
            active_members: vec![member(4)],
            ..Default::default()
        };
        r.leader_member_id = 4;
        let b = r.encode();
        // Rewrite with a root block and a member block 4 bytes longer.
        let mut w = b[..8].to_vec();
        w[0] = 28;
        w.extend_from_slice(&b[8..32]);
        w.extend_from_slice(&[0; 4]);
        w.extend_from_slice(&[32, 0, 1, 0]);
        w.extend_from_slice(&b[36..64]);
        w.extend_from_slice(&[0; 4]);
        w.extend_from_slice(&b[64..]);
        assert_eq!(ClusterMembersExtendedResponse::decode(&w).unwrap(), r);
    }
}
