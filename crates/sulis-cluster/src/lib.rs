//! The sulis cluster: Raft-replicated state machines on the sulis archive,
//! speaking Aeron Cluster's protocol (the contracts are in
//! `sulis_protocol::cluster`).
//!
//! This crate grows from its core out: the members and their quorum
//! arithmetic ([`cluster_member`]) and the election ([`election`]), a state
//! machine driven by `do_work` on a clock it is given, whose every effect on
//! the log, the archive and the network goes through the
//! [`election::ElectionHost`] the consensus module implements, so that it is
//! tested on a manual clock against simulated members and faults. Beside it
//! the consensus module's parts as they come: its timers
//! ([`timer_service`]), the services' messages kept until committed
//! ([`pending_service_message_tracker`]), the `recording.log` file
//! ([`recording_log`]), the client sessions ([`cluster_session`],
//! [`session_manager`]), the log's entries ([`log_adapter`]), the state
//! a member applies them to ([`consensus_module_agent`]) and its snapshots
//! ([`consensus_module_snapshot`], written and read through the archive by
//! [`snapshot_taker`]). Across members: the candidate term on disk
//! ([`node_state_file`]), the consensus stream out and in
//! ([`consensus_publisher`], [`consensus_adapter`]) and the copy of terms a
//! follower lacks from the leader's archive ([`log_replication`]); a
//! member's own log replayed through it ([`log_replay`]); a member seeded
//! from another's snapshot ([`cluster_seed`]).

pub mod cluster_client;
pub mod cluster_mark_file;
pub mod cluster_member;
pub mod cluster_seed;
pub mod cluster_session;
pub mod clustered_service_agent;
pub mod consensus_adapter;
pub mod consensus_module;
pub mod consensus_module_agent;
pub mod consensus_module_snapshot;
pub mod consensus_publisher;
pub mod election;
pub mod log_adapter;
pub mod log_replay;
pub mod log_replication;
pub mod node_state_file;
pub mod pending_service_message_tracker;
pub mod recording_log;
pub mod recovery_state;
pub mod session_manager;
pub mod session_messages;
pub mod snapshot_taker;
pub mod timer_service;
pub mod tool;
