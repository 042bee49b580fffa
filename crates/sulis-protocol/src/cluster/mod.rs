//! Aeron Cluster's shared contracts: the messages of SBE schema 111 (the
//! client protocol, the log's entries, consensus between members, the
//! consensus module's talk with its services, snapshots) and the files a
//! node keeps (the recording log), as Aeron's cluster and its tools read
//! them.

pub mod backup_response;
pub mod mark_file;
pub mod members_response;
pub mod messages;
pub mod recording_log;
