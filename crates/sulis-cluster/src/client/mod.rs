//! The cluster's client (Aeron's `io.aeron.cluster.client`): a session with
//! the cluster over ingress and egress ([`cluster_client`]) and the batches
//! of session messages that it and a batched service exchange with Python
//! ([`session_messages`]).

pub mod cluster_client;
pub mod session_messages;
