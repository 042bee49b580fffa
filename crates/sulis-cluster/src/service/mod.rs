//! The clustered service container (Aeron's `io.aeron.cluster.service`):
//! the agent a member's services run in ([`clustered_service_agent`]) with
//! each session's answers not yet sent ([`egress_queue`]), and
//! what the consensus module shares with it, as Aeron's module takes it from
//! this package: the log's entries ([`log_adapter`]), the mark file
//! ([`cluster_mark_file`]), snapshots written and read through the archive
//! ([`snapshot_taker`]) and the recovery counter ([`recovery_state`]).

pub mod cluster_mark_file;
pub mod clustered_service_agent;
pub mod egress_queue;
pub mod log_adapter;
pub mod recovery_state;
pub mod snapshot_taker;
