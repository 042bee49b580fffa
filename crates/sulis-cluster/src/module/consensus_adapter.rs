//! The consensus stream in (Aeron's `ConsensusAdapter`): the subscription
//! on this member's consensus endpoint, its messages decoded into what the
//! election and the running term act on.
//!
//! A message of another schema, of a template a member does not act on
//! (the deprecated dynamic-join ones, Aeron's backup queries: a member
//! seeding itself asks with sulis's RecordingLogQuery), or too short for
//! its block is counted and passed over:
//! anyone can send to the endpoint, and nothing they send stops it.

use crate::module::consensus_publisher::Outbound;
use crate::module::election::ConsensusMessage;
use sulis_client::{FragmentAssembler, Subscription};
use sulis_protocol::cluster::messages::{
    AppendPosition, BackupQuery, CanvassPosition, CatchupPosition, ChallengeResponse,
    CommitPosition, NewLeadershipTerm, RecordingLogQuery, RequestVote, StopCatchup, TerminationAck,
    TerminationPosition, Vote, SCHEMA_ID,
};
use sulis_protocol::sbe::Header;

/// Why a message was passed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skipped {
    /// Not schema 111.
    Schema(u16),
    /// A template a member does not act on.
    Template(u16),
    /// It did not decode.
    Malformed(String),
}

/// Decodes one consensus message.
pub fn decode(buf: &[u8]) -> Result<Outbound, Skipped> {
    let header = Header::decode(buf).map_err(|e| Skipped::Malformed(e.to_string()))?;
    if header.schema_id != SCHEMA_ID {
        return Err(Skipped::Schema(header.schema_id));
    }
    let bad = |e: sulis_protocol::sbe::SbeError| Skipped::Malformed(e.to_string());
    let election = |m| Ok(Outbound::Election(m));
    match header.template_id {
        50 => election(ConsensusMessage::CanvassPosition(
            CanvassPosition::decode(buf).map_err(bad)?,
        )),
        51 => election(ConsensusMessage::RequestVote(
            RequestVote::decode(buf).map_err(bad)?,
        )),
        52 => election(ConsensusMessage::Vote(Vote::decode(buf).map_err(bad)?)),
        53 => election(ConsensusMessage::NewLeadershipTerm(
            NewLeadershipTerm::decode(buf).map_err(bad)?,
        )),
        54 => election(ConsensusMessage::AppendPosition(
            AppendPosition::decode(buf).map_err(bad)?,
        )),
        55 => election(ConsensusMessage::CommitPosition(
            CommitPosition::decode(buf).map_err(bad)?,
        )),
        56 => election(ConsensusMessage::CatchupPosition(
            CatchupPosition::decode(buf).map_err(bad)?,
        )),
        57 => Ok(Outbound::StopCatchup(
            StopCatchup::decode(buf).map_err(bad)?,
        )),
        75 => Ok(Outbound::TerminationPosition(
            TerminationPosition::decode(buf).map_err(bad)?,
        )),
        76 => Ok(Outbound::TerminationAck(
            TerminationAck::decode(buf).map_err(bad)?,
        )),
        BackupQuery::TEMPLATE_ID => Ok(Outbound::BackupQuery(
            BackupQuery::decode(buf).map_err(bad)?,
        )),
        RecordingLogQuery::TEMPLATE_ID => Ok(Outbound::RecordingLogQuery(
            RecordingLogQuery::decode(buf).map_err(bad)?,
        )),
        ChallengeResponse::TEMPLATE_ID => Ok(Outbound::ChallengeResponse(
            ChallengeResponse::decode(buf).map_err(bad)?,
        )),
        t => Err(Skipped::Template(t)),
    }
}

/// The subscription on this member's consensus endpoint.
pub struct ConsensusAdapter {
    subscription: Subscription,
    assembler: FragmentAssembler,
    skipped: u64,
    last_skipped: Option<Skipped>,
}

impl ConsensusAdapter {
    /// Reads `subscription` (Aeron's consensus channel with this member's
    /// endpoint).
    pub fn new(subscription: Subscription) -> ConsensusAdapter {
        ConsensusAdapter {
            subscription,
            assembler: FragmentAssembler::new(),
            skipped: 0,
            last_skipped: None,
        }
    }

    /// Polls up to `limit` fragments; each whole message decoded goes to
    /// `on_message` with the session id of the image it came on (who sent
    /// it, as far as the transport tells). Returns the fragments read.
    pub fn poll(&mut self, limit: usize, mut on_message: impl FnMut(Outbound, i32)) -> usize {
        let mut messages = Vec::new();
        let assembler = &mut self.assembler;
        let n = self
            .subscription
            .poll(
                |payload, header| -> Result<(), ()> {
                    if let Some(m) = assembler.on_fragment(payload, header) {
                        messages.push((decode(&m.payload), m.header.session_id()));
                    }
                    Ok(())
                },
                limit,
            )
            .unwrap_or(0);
        for (m, image) in messages {
            match m {
                Ok(m) => on_message(m, image),
                Err(why) => {
                    self.skipped += 1;
                    self.last_skipped = Some(why);
                }
            }
        }
        n
    }

    /// Messages passed over, and the last one's reason.
    pub fn skipped(&self) -> (u64, Option<&Skipped>) {
        (self.skipped, self.last_skipped.as_ref())
    }

    /// Closes the subscription.
    pub fn close(mut self) {
        let _ = self.subscription.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::consensus_publisher::encode;
    use sulis_protocol::cluster::messages::{ServiceAck, CONSENSUS_PROTOCOL_VERSION};

    fn every_kind() -> Vec<Outbound> {
        use ConsensusMessage as C;
        vec![
            Outbound::Election(C::CanvassPosition(CanvassPosition {
                log_leadership_term_id: 3,
                log_position: 4096,
                leadership_term_id: 4,
                follower_member_id: 2,
                protocol_version: CONSENSUS_PROTOCOL_VERSION,
            })),
            Outbound::Election(C::RequestVote(RequestVote {
                log_leadership_term_id: 3,
                log_position: 4096,
                candidate_term_id: 5,
                candidate_member_id: 1,
                protocol_version: CONSENSUS_PROTOCOL_VERSION,
            })),
            Outbound::Election(C::Vote(Vote {
                candidate_term_id: 5,
                log_leadership_term_id: 3,
                log_position: 4096,
                candidate_member_id: 1,
                follower_member_id: 2,
                vote: 1,
            })),
            Outbound::Election(C::NewLeadershipTerm(NewLeadershipTerm {
                log_leadership_term_id: 3,
                next_leadership_term_id: 4,
                next_term_base_log_position: 4096,
                next_log_position: -1,
                leadership_term_id: 5,
                term_base_log_position: 8192,
                log_position: 8192,
                leader_recording_id: 7,
                timestamp: 1_700_000_000_000,
                leader_member_id: 1,
                log_session_id: -12345,
                app_version: 1,
                is_startup: 0,
                commit_position: 8000,
            })),
            Outbound::Election(C::AppendPosition(AppendPosition {
                leadership_term_id: 5,
                log_position: 9000,
                follower_member_id: 2,
                flags: 1,
            })),
            Outbound::Election(C::CommitPosition(CommitPosition {
                leadership_term_id: 5,
                log_position: 8800,
                leader_member_id: 1,
            })),
            Outbound::Election(C::CatchupPosition(CatchupPosition {
                leadership_term_id: 5,
                log_position: 4096,
                follower_member_id: 2,
                catchup_endpoint: "10.0.0.3:9004".into(),
            })),
            Outbound::StopCatchup(StopCatchup {
                leadership_term_id: 5,
                follower_member_id: 2,
            }),
            Outbound::TerminationPosition(TerminationPosition {
                leadership_term_id: 5,
                log_position: 9600,
            }),
            Outbound::TerminationAck(TerminationAck {
                leadership_term_id: 5,
                log_position: 9600,
                member_id: 2,
            }),
            Outbound::RecordingLogQuery(RecordingLogQuery {
                correlation_id: 77,
                response_stream_id: 109,
                response_channel: "aeron:udp?endpoint=10.0.0.3:9002".into(),
            }),
            Outbound::BackupQuery(BackupQuery {
                correlation_id: 78,
                response_stream_id: 108,
                version: 2,
                log_position: i64::MAX,
                response_channel: "aeron:udp?endpoint=10.0.0.4:9876".into(),
                encoded_credentials: Vec::new(),
            }),
            Outbound::ChallengeResponse(ChallengeResponse {
                correlation_id: 79,
                cluster_session_id: -1,
                encoded_credentials: vec![7; 32],
            }),
        ]
    }

    #[test]
    fn every_message_a_member_sends_decodes_to_itself() {
        for m in every_kind() {
            assert_eq!(decode(&encode(&m)), Ok(m.clone()), "{m:?}");
        }
    }

    #[test]
    fn foreign_unknown_and_short_messages_are_passed_over_with_why() {
        let mut other_schema = encode(&every_kind()[0]);
        other_schema[4..6].copy_from_slice(&101u16.to_le_bytes());
        assert_eq!(decode(&other_schema), Err(Skipped::Schema(101)));
        let service_ack = ServiceAck {
            log_position: 1,
            timestamp: 2,
            ack_id: 3,
            relevant_id: 4,
            service_id: 0,
        }
        .encode();
        assert_eq!(decode(&service_ack), Err(Skipped::Template(33)));
        let whole = encode(&every_kind()[3]);
        for cut in [0, 7, 8, 20, whole.len() - 1] {
            assert!(
                matches!(decode(&whole[..cut]), Err(Skipped::Malformed(_))),
                "cut at {cut}"
            );
        }
    }
}
