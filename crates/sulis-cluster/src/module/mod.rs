//! The consensus module (Aeron's `io.aeron.cluster`), one entity a file:
//!
//! - the module on its media driver and archive
//!   ([`consensus_module`]: the log publication and its recording, ingress,
//!   egress, the services' control streams, commit; with the election's
//!   host, leader and follower work, catch-up in
//!   `consensus_module/replicated.rs` and seeding in
//!   `consensus_module/seed.rs`), and the state it applies the log to
//!   ([`consensus_module_agent`]) and snapshots ([`consensus_module_snapshot`]);
//! - the election ([`election`]), a state machine on a clock it is given,
//!   acting through the [`election::ElectionHost`] the module implements;
//!   the members and their quorum arithmetic ([`cluster_member`]) and the
//!   candidate term on disk ([`node_state_file`]);
//! - the consensus stream out and in ([`consensus_publisher`],
//!   [`consensus_adapter`]); the copy of terms a follower lacks from the
//!   leader's archive ([`log_replication`]); a member's own log replayed
//!   ([`log_replay`]); a member seeded from another's snapshot
//!   ([`cluster_seed`]);
//! - the client sessions ([`cluster_session`], [`session_manager`]), the
//!   timers ([`timer_service`]), the services' messages kept until committed
//!   ([`pending_service_message_tracker`]), the `recording.log` file
//!   ([`recording_log`]);
//! - the operator's tool ([`tool`], Aeron's `ClusterTool`).

pub mod cluster_member;
pub mod cluster_seed;
pub mod cluster_session;
pub mod consensus_adapter;
pub mod consensus_module;
pub mod consensus_module_agent;
pub mod consensus_module_snapshot;
pub mod consensus_publisher;
pub mod election;
pub mod log_replay;
pub mod log_replication;
pub mod node_state_file;
pub mod pending_service_message_tracker;
pub mod recording_log;
pub mod session_manager;
pub mod timer_service;
pub mod tool;
