//! The consensus stream out (Aeron's `ConsensusPublisher` with the
//! publications its members hold): one exclusive publication to each other
//! member's consensus endpoint, and the encoding of every consensus
//! message a member sends (schema 111, the election's and the running
//! term's alike).
//!
//! A send that the publication cannot take now (not connected yet,
//! back-pressured) reports false and is dropped: every consensus message
//! is re-sent on its own interval (canvass, vote requests, heartbeats of
//! commit and append positions), as in Aeron, so nothing waits on one.

use crate::module::cluster_member::ClusterMember;
use crate::module::election::ConsensusMessage;
use sulis_client::{Client, ExclusivePublication};
use sulis_protocol::cluster::messages::{
    BackupQuery, ChallengeResponse, RecordingLogQuery, StopCatchup, TerminationAck,
    TerminationPosition,
};

/// A message for another member, election or not.
#[derive(Clone, Debug, PartialEq)]
pub enum Outbound {
    /// One of the election's (and the running term's positions).
    Election(ConsensusMessage),
    /// Leader → follower: its catch-up replay is done.
    StopCatchup(StopCatchup),
    /// Leader → followers: stop at this position.
    TerminationPosition(TerminationPosition),
    /// Follower → leader: reached the termination position.
    TerminationAck(TerminationAck),
    /// A member seeding itself → any member: its recording log, please.
    RecordingLogQuery(RecordingLogQuery),
    /// Aeron's ClusterBackup → any member: what to copy.
    BackupQuery(BackupQuery),
    /// Aeron's ClusterBackup → the member that challenged its query: the
    /// answer (session id -1, a backup query's).
    ChallengeResponse(ChallengeResponse),
}

/// The message as sent (SBE header and all).
pub fn encode(m: &Outbound) -> Vec<u8> {
    match m {
        Outbound::Election(e) => match e {
            ConsensusMessage::CanvassPosition(x) => x.encode(),
            ConsensusMessage::RequestVote(x) => x.encode(),
            ConsensusMessage::Vote(x) => x.encode(),
            ConsensusMessage::NewLeadershipTerm(x) => x.encode(),
            ConsensusMessage::AppendPosition(x) => x.encode(),
            ConsensusMessage::CommitPosition(x) => x.encode(),
            ConsensusMessage::CatchupPosition(x) => x.encode(),
        },
        Outbound::StopCatchup(x) => x.encode(),
        Outbound::TerminationPosition(x) => x.encode(),
        Outbound::TerminationAck(x) => x.encode(),
        Outbound::RecordingLogQuery(x) => x.encode(),
        Outbound::BackupQuery(x) => x.encode(),
        Outbound::ChallengeResponse(x) => x.encode(),
    }
}

/// The channel to a member's consensus endpoint.
pub fn channel_to(template: &str, member: &ClusterMember) -> String {
    let sep = if template.contains('?') { "|" } else { "?" };
    format!("{template}{sep}endpoint={}", member.consensus_endpoint)
}

/// A publication to every other member.
pub struct ConsensusPublisher {
    to: Vec<Peer>,
    /// This member's file sync level in AppendPosition's flags
    /// ([`crate::module::election::APPEND_FLAG_SYNC_LEVEL_SHIFT`]).
    sync_level_flags: u8,
}

/// The publication to one member, and the messages it could not take.
struct Peer {
    member_id: i32,
    publication: ExclusivePublication,
    dropped: u64,
}

impl Peer {
    fn offer(&mut self, bytes: &[u8]) -> bool {
        let ok = self.publication.is_connected() && self.publication.offer(bytes).is_ok();
        if !ok {
            self.dropped += 1;
        }
        ok
    }
}

impl ConsensusPublisher {
    /// Adds a publication to each member but `me` on `channel` (Aeron's
    /// `aeron.cluster.consensus.channel`, the member's endpoint added).
    pub fn connect(
        client: &Client,
        members: &[ClusterMember],
        me: i32,
        channel: &str,
        stream_id: i32,
    ) -> Result<ConsensusPublisher, String> {
        let mut to = Vec::new();
        for m in members.iter().filter(|m| m.id != me) {
            let ch = channel_to(channel, m);
            let publication = client
                .add_exclusive_publication(&ch, stream_id)
                .map_err(|e| format!("consensus publication to member {} ({ch}): {e}", m.id))?;
            to.push(Peer {
                member_id: m.id,
                publication,
                dropped: 0,
            });
        }
        Ok(ConsensusPublisher {
            to,
            sync_level_flags: 0,
        })
    }

    /// Every AppendPosition sent from now on says the log is recorded at
    /// `file_sync_level` (0-2) here.
    pub fn set_file_sync_level(&mut self, file_sync_level: u8) {
        self.sync_level_flags = crate::module::election::sync_level_flags(file_sync_level);
    }

    /// The bytes of `m` as this member sends it (its sync level set on an
    /// AppendPosition).
    fn bytes(&self, m: &Outbound) -> Vec<u8> {
        match m {
            Outbound::Election(ConsensusMessage::AppendPosition(x))
                if self.sync_level_flags != 0 =>
            {
                let mut x = x.clone();
                x.flags |= self.sync_level_flags;
                x.encode()
            }
            _ => encode(m),
        }
    }

    fn peer(&self, member: i32) -> Option<&Peer> {
        self.to.iter().find(|p| p.member_id == member)
    }

    /// Sends `m` to member `member`; false if it could not go now (or the
    /// member is unknown).
    pub fn send(&mut self, member: i32, m: &Outbound) -> bool {
        let Some(i) = self.to.iter().position(|p| p.member_id == member) else {
            return false;
        };
        let bytes = self.bytes(m);
        self.to[i].offer(&bytes)
    }

    /// Sends `m` to every other member; returns how many took it (none
    /// encoded for a member alone, whose leader broadcasts its commits).
    pub fn broadcast(&mut self, m: &Outbound) -> usize {
        if self.to.is_empty() {
            return 0;
        }
        let bytes = self.bytes(m);
        self.to.iter_mut().map(|p| p.offer(&bytes) as usize).sum()
    }

    /// Whether the publication to `member` is connected.
    pub fn is_connected(&self, member: i32) -> bool {
        self.peer(member)
            .is_some_and(|p| p.publication.is_connected())
    }

    /// Messages to `member` that could not be sent.
    pub fn dropped(&self, member: i32) -> u64 {
        self.peer(member).map_or(0, |p| p.dropped)
    }

    /// Closes every publication.
    pub fn close(self) {
        for p in self.to {
            p.publication.close_without_waiting();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::election::{APPEND_FLAG_NOT_JOINED, APPEND_FLAG_SYNC_LEVEL_MASK};
    use sulis_protocol::cluster::messages::{AppendPosition, CommitPosition};

    fn append(flags: u8) -> Outbound {
        Outbound::Election(ConsensusMessage::AppendPosition(AppendPosition {
            leadership_term_id: 3,
            log_position: 640,
            follower_member_id: 2,
            flags,
        }))
    }

    #[test]
    fn every_append_position_says_the_members_sync_level_beside_its_own_flags() {
        let mut p = ConsensusPublisher {
            to: Vec::new(),
            sync_level_flags: 0,
        };
        assert_eq!(
            p.bytes(&append(APPEND_FLAG_NOT_JOINED)),
            encode(&append(APPEND_FLAG_NOT_JOINED))
        );
        for level in [1u8, 2] {
            p.set_file_sync_level(level);
            let sent = AppendPosition::decode(&p.bytes(&append(APPEND_FLAG_NOT_JOINED))).unwrap();
            assert_eq!(
                sent.flags & !APPEND_FLAG_SYNC_LEVEL_MASK,
                APPEND_FLAG_NOT_JOINED
            );
            assert_eq!((sent.flags & APPEND_FLAG_SYNC_LEVEL_MASK) >> 2, level);
            assert_eq!((sent.leadership_term_id, sent.log_position), (3, 640));
        }
        // Other messages go as they are.
        let commit = Outbound::Election(ConsensusMessage::CommitPosition(CommitPosition {
            leadership_term_id: 3,
            log_position: 640,
            leader_member_id: 0,
        }));
        assert_eq!(p.bytes(&commit), encode(&commit));
    }
}
