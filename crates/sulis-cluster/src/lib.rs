//! The sulis cluster: Raft-replicated state machines on the sulis archive,
//! speaking Aeron Cluster's protocol (the contracts are in
//! `sulis_protocol::cluster`). Laid out as Aeron lays out its cluster:
//!
//! - [`module`] (Aeron's `io.aeron.cluster`): the consensus module — one
//!   [`module::consensus_module::ConsensusModule`] for a member of a cluster
//!   of any size — with its election, log replication and replay, client
//!   sessions, timers, snapshots, `recording.log` and the operator's tool;
//! - [`service`] (`io.aeron.cluster.service`): the clustered service
//!   container a member's services run in, and what it shares with the
//!   module below it (the log's entries, the mark file, snapshots, the
//!   recovery counter);
//! - [`client`] (`io.aeron.cluster.client`): the cluster's client and the
//!   batches of session messages it and a batched service hand over.
//!
//! The module depends on the service and the client parts, the service on
//! the client's, the client on neither.

pub mod client;
pub mod module;
pub mod service;
