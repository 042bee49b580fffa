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

use crate::cluster_member::ClusterMember;
use crate::election::ConsensusMessage;
use sulis_client::{Client, ExclusivePublication};
use sulis_protocol::cluster::messages::{StopCatchup, TerminationAck, TerminationPosition};

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
    }
}

/// The channel to a member's consensus endpoint.
pub fn channel_to(template: &str, member: &ClusterMember) -> String {
    let sep = if template.contains('?') { "|" } else { "?" };
    format!("{template}{sep}endpoint={}", member.consensus_endpoint)
}

/// A publication to every other member.
pub struct ConsensusPublisher {
    to: Vec<(i32, ExclusivePublication)>,
    /// Messages not taken, by member (for the counters and tests).
    dropped: Vec<(i32, u64)>,
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
            to.push((m.id, publication));
        }
        let dropped = to.iter().map(|(id, _)| (*id, 0)).collect();
        Ok(ConsensusPublisher { to, dropped })
    }

    /// Sends `m` to member `member`; false if it could not go now (or the
    /// member is unknown).
    pub fn send(&mut self, member: i32, m: &Outbound) -> bool {
        let Some(i) = self.to.iter().position(|(id, _)| *id == member) else {
            return false;
        };
        let publication = &mut self.to[i].1;
        let ok = publication.is_connected() && publication.offer(&encode(m)).is_ok();
        if !ok {
            self.dropped[i].1 += 1;
        }
        ok
    }

    /// Sends `m` to every other member; returns how many took it.
    pub fn broadcast(&mut self, m: &Outbound) -> usize {
        let ids: Vec<i32> = self.to.iter().map(|(id, _)| *id).collect();
        ids.into_iter().filter(|&id| self.send(id, m)).count()
    }

    /// Whether the publication to `member` is connected.
    pub fn is_connected(&self, member: i32) -> bool {
        self.to
            .iter()
            .any(|(id, p)| *id == member && p.is_connected())
    }

    /// Messages to `member` that could not be sent.
    pub fn dropped(&self, member: i32) -> u64 {
        self.dropped
            .iter()
            .find(|(id, _)| *id == member)
            .map_or(0, |(_, n)| *n)
    }

    /// Closes every publication.
    pub fn close(self) {
        for (_, p) in self.to {
            p.close_without_waiting();
        }
    }
}
