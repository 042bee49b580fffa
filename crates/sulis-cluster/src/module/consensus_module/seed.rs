//! A consensus module seeding its member from another member's snapshot
//! before it recovers (`seed_from_snapshot`; the plan and what is recorded
//! are [`crate::module::cluster_seed`]'s): the query to the other members, the
//! copies from the chosen member's archive, the candidate term.

use super::ConsensusModule;
use crate::module::cluster_seed::{plan, SeedPlan};
use crate::module::consensus_publisher::{ConsensusPublisher, Outbound};
use crate::module::node_state_file::NodeStateFile;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use sulis_archive::client::Replication;
use sulis_client::FragmentAssembler;
use sulis_protocol::archive::messages::recording_signal;
use sulis_protocol::cluster::messages::{
    RecordingLogQuery, RecordingLogResponse, NULL_POSITION, NULL_VALUE,
};
use sulis_protocol::sbe::Header;

/// The stream the answers come back on, at this member's consensus endpoint.
const SEED_RESPONSE_STREAM_ID: i32 = 109;

impl ConsensusModule {
    /// With an empty recording log: asks the other members for theirs,
    /// copies the latest snapshot set one holds and its log up to it, and
    /// records them as this member's. Nothing to do when this member has a
    /// recording log of its own, or when no member holds a snapshot; an
    /// error when no member answers within the message timeout or a copy
    /// fails (the member does not start half seeded: nothing is recorded
    /// until every copy is whole).
    pub(super) fn seed_from_snapshot(&mut self) -> Result<(), String> {
        if self.recording_log.entries().next().is_some() {
            return Ok(());
        }
        let answers = self.ask_for_recording_logs()?;
        let Some(plan) = plan(&answers, self.ctx.service_count as i32)? else {
            self.log_event(format!(
                "member {}: seed_from_snapshot: no member holds a snapshot ({} answered); it starts empty",
                self.ctx.member_id,
                answers.len()
            ));
            return Ok(());
        };
        self.copy_and_record(&plan)
    }

    /// Every other member's answer, waiting for all of them, or for a
    /// second after the first when some stay silent.
    fn ask_for_recording_logs(&mut self) -> Result<Vec<RecordingLogResponse>, String> {
        let me = self
            .members
            .iter()
            .find(|m| m.id == self.ctx.member_id)
            .expect("checked at launch")
            .clone();
        let others = self.members.len() - 1;
        let channel = format!("aeron:udp?endpoint={}", me.consensus_endpoint);
        let mut subscription = self
            .io
            .client
            .add_subscription(&channel, SEED_RESPONSE_STREAM_ID)
            .map_err(|e| format!("seed_from_snapshot: the answers' subscription {channel}: {e}"))?;
        let mut publisher = ConsensusPublisher::connect(
            &self.io.client,
            &self.members,
            self.ctx.member_id,
            &self.ctx.consensus_channel,
            self.ctx.consensus_stream_id,
        )?;
        let correlation_id = std::process::id() as i64;
        let query = Outbound::RecordingLogQuery(RecordingLogQuery {
            correlation_id,
            response_stream_id: SEED_RESPONSE_STREAM_ID,
            response_channel: channel.clone(),
        });
        let mut assembler = FragmentAssembler::new();
        let mut answers: BTreeMap<i32, RecordingLogResponse> = BTreeMap::new();
        let mut failure = None;
        let started = Instant::now();
        let deadline = started + self.ctx.message_timeout;
        let mut first_answer: Option<Instant> = None;
        let mut next_ask = started;
        while answers.len() < others {
            let now = Instant::now();
            if now >= deadline || first_answer.is_some_and(|t| now >= t + Duration::from_secs(1)) {
                break;
            }
            if now >= next_ask {
                publisher.broadcast(&query);
                next_ask = now + Duration::from_millis(250);
            }
            let mut got = Vec::new();
            let _ = subscription.poll(
                |payload, header| -> Result<(), ()> {
                    if let Some(m) = assembler.on_fragment(payload, header) {
                        got.push(m.payload.to_vec());
                    }
                    Ok(())
                },
                10,
            );
            for m in got {
                let Ok(h) = Header::decode(&m) else { continue };
                if h.template_id != RecordingLogResponse::TEMPLATE_ID {
                    continue;
                }
                match RecordingLogResponse::decode(&m) {
                    Ok(a) if a.correlation_id == correlation_id => {
                        first_answer.get_or_insert_with(Instant::now);
                        answers.insert(a.member_id, a);
                    }
                    Ok(_) => {}
                    Err(e) => failure = Some(format!("an answer did not decode: {e}")),
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        publisher.close();
        let _ = subscription.close();
        if answers.is_empty() {
            return Err(format!(
                "seed_from_snapshot: no member answered member {}'s recording log query within {:?} (is a quorum of the cluster running, and can this host reach their consensus endpoints?){}",
                self.ctx.member_id,
                self.ctx.message_timeout,
                failure.map(|f| format!("; {f}")).unwrap_or_default()
            ));
        }
        Ok(answers.into_values().collect())
    }

    /// Copies the plan's snapshots and log from the source member's archive,
    /// sets the candidate term, then records it all.
    fn copy_and_record(&mut self, plan: &SeedPlan) -> Result<(), String> {
        let source = self
            .members
            .iter()
            .find(|m| m.id == plan.source_member_id)
            .ok_or_else(|| {
                format!(
                    "seed_from_snapshot: member {} answered but is not in cluster_members",
                    plan.source_member_id
                )
            })?
            .archive_endpoint
            .clone();
        let mut snapshot_ids = Vec::new();
        for s in &plan.snapshots {
            snapshot_ids.push(self.copy_recording(&source, s.recording_id, NULL_POSITION)?);
        }
        let log_id = self.copy_recording(&source, plan.log_recording_id, plan.log_position)?;
        let now_ms = Self::cluster_time();
        let mut node_state = NodeStateFile::open(&self.ctx.cluster_dir)?;
        node_state.propose_max_candidate_term_id(
            plan.candidate_term_id,
            plan.log_position,
            now_ms,
        )?;
        plan.record(&mut self.recording_log, log_id, &snapshot_ids)?;
        self.log_event(format!(
            "member {} seeded from member {}'s snapshot at log position {} (term {}): snapshot recordings {:?}, log recording {} up to it, candidate term {}",
            self.ctx.member_id,
            plan.source_member_id,
            plan.log_position,
            plan.terms.last().map_or(NULL_VALUE, |t| t.leadership_term_id),
            snapshot_ids,
            log_id,
            plan.candidate_term_id
        ));
        Ok(())
    }

    /// Replicates `src_recording_id` of the archive at `endpoint` into a new
    /// recording here, up to `stop_position` (`NULL_POSITION`: its end);
    /// returns the new recording's id once the copy ended where it should.
    /// It fails when the archive reports an error or the copy's position
    /// has not moved for the message timeout.
    fn copy_recording(
        &mut self,
        endpoint: &str,
        src_recording_id: i64,
        stop_position: i64,
    ) -> Result<i64, String> {
        let r = Replication {
            src_recording_id,
            dst_recording_id: NULL_VALUE,
            stop_position,
            src_control_channel: format!("aeron:udp?endpoint={endpoint}"),
            src_control_stream_id: self.ctx.archive_control_stream_id,
            replication_channel: self.ctx.replication_channel.clone(),
            ..Replication::default()
        };
        let what = format!(
            "seed_from_snapshot: copying recording {src_recording_id} of the archive at {endpoint}"
        );
        let replication_id = self
            .archive
            .replicate(&r)
            .map_err(|e| format!("{what}: {e}"))?;
        let mut local = NULL_VALUE;
        let mut position = NULL_POSITION;
        let mut last_progress = Instant::now();
        loop {
            for (correlation_id, _, message) in self.archive.poll_errors() {
                if correlation_id == replication_id {
                    return Err(format!("{what}: {message}"));
                }
            }
            let mut ended = false;
            for s in self.archive.poll_signals() {
                if s.correlation_id != replication_id {
                    continue;
                }
                if local < 0 && s.recording_id >= 0 {
                    local = s.recording_id;
                }
                ended |= s.signal == recording_signal::REPLICATE_END;
            }
            if ended {
                break;
            }
            if local >= 0 {
                if let Ok(p) = self.archive.get_recording_position(local) {
                    if p > position {
                        position = p;
                        last_progress = Instant::now();
                    }
                }
            }
            if last_progress.elapsed() >= self.ctx.message_timeout {
                let _ = self.archive.stop_replication(replication_id);
                return Err(format!(
                    "{what}: no progress for {:?} (at {position})",
                    self.ctx.message_timeout
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if local < 0 {
            return Err(format!("{what}: the archive named no recording for it"));
        }
        let stopped = self
            .archive
            .get_stop_position(local)
            .map_err(|e| format!("{what}: recording {local}: {e}"))?;
        if stopped == NULL_POSITION || (stop_position != NULL_POSITION && stopped != stop_position)
        {
            return Err(format!(
                "{what}: the copy, recording {local}, stopped at {stopped}, not at {}",
                if stop_position == NULL_POSITION {
                    "the source's end".to_string()
                } else {
                    stop_position.to_string()
                }
            ));
        }
        Ok(local)
    }
}
