//! The log's entries as the consensus module and the services read them
//! (Aeron's `LogAdapter`): each whole message of the log stream (fragments
//! already put together by the image's assembler) decoded into a
//! [`LogEntry`], with the position after it.
//!
//! A log holds only schema 111 entries: client and service messages behind a
//! SessionMessageHeader, timer events, session opens and closes, cluster
//! actions and the NewLeadershipTermEvent that begins every term. Anything
//! else is an error naming the position, never skipped: a member that
//! skipped an entry would no longer be a replica.

use sulis_protocol::cluster::messages::{
    ClusterActionRequest, MembershipChangeEvent, NewLeadershipTermEvent, SessionCloseEvent,
    SessionMessageHeader, SessionOpenEvent, TimerEvent, SCHEMA_ID, SESSION_HEADER_LENGTH,
};
use sulis_protocol::sbe::{Header, HEADER_LENGTH};

/// One log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEntry<'a> {
    /// A client's message (`cluster_session_id` > 0) or a service's
    /// (`cluster_session_id` < 0, the service id in its top bits).
    SessionMessage {
        /// The term it was sequenced in.
        leadership_term_id: i64,
        /// Whose it is.
        cluster_session_id: i64,
        /// The leader's cluster time when it was sequenced.
        timestamp: i64,
        /// The application's bytes.
        payload: &'a [u8],
    },
    /// A timer fired on the leader.
    Timer(TimerEvent),
    /// A session was opened.
    SessionOpen(SessionOpenEvent),
    /// A session was closed.
    SessionClose(SessionCloseEvent),
    /// SUSPEND, RESUME or SNAPSHOT.
    ClusterAction(ClusterActionRequest),
    /// A term begins.
    NewLeadershipTerm(NewLeadershipTermEvent),
    /// Aeron's legacy dynamic-membership entry: never written, ignored when read.
    MembershipChange,
}

/// An entry that is not one of the log's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntryError {
    /// Log position after the entry.
    pub position: i64,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for LogEntryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "log entry ending at position {}: {}",
            self.position, self.reason
        )
    }
}

impl std::error::Error for LogEntryError {}

/// Decodes the log entry `buf` that ends at log position `position`.
pub fn decode(buf: &[u8], position: i64) -> Result<LogEntry<'_>, LogEntryError> {
    let fail = |reason: String| LogEntryError { position, reason };
    let header = Header::decode(buf).map_err(|e| fail(e.message))?;
    if header.schema_id != SCHEMA_ID {
        return Err(fail(format!(
            "schema id {} (template {}), the log holds schema {SCHEMA_ID} only",
            header.schema_id, header.template_id
        )));
    }
    let entry = match header.template_id {
        SessionMessageHeader::TEMPLATE_ID => {
            if buf.len() < SESSION_HEADER_LENGTH
                || (header.block_length as usize) < SESSION_HEADER_LENGTH - HEADER_LENGTH
            {
                return Err(fail(format!(
                    "session message of {} bytes (block length {}) is shorter than its {SESSION_HEADER_LENGTH}-byte header",
                    buf.len(),
                    header.block_length
                )));
            }
            let h = SessionMessageHeader::decode(buf).map_err(|e| fail(e.message))?;
            LogEntry::SessionMessage {
                leadership_term_id: h.leadership_term_id,
                cluster_session_id: h.cluster_session_id,
                timestamp: h.timestamp,
                payload: &buf[SESSION_HEADER_LENGTH..],
            }
        }
        TimerEvent::TEMPLATE_ID => {
            LogEntry::Timer(TimerEvent::decode(buf).map_err(|e| fail(e.message))?)
        }
        SessionOpenEvent::TEMPLATE_ID => {
            LogEntry::SessionOpen(SessionOpenEvent::decode(buf).map_err(|e| fail(e.message))?)
        }
        SessionCloseEvent::TEMPLATE_ID => {
            LogEntry::SessionClose(SessionCloseEvent::decode(buf).map_err(|e| fail(e.message))?)
        }
        ClusterActionRequest::TEMPLATE_ID => {
            LogEntry::ClusterAction(ClusterActionRequest::decode(buf).map_err(|e| fail(e.message))?)
        }
        NewLeadershipTermEvent::TEMPLATE_ID => LogEntry::NewLeadershipTerm(
            NewLeadershipTermEvent::decode(buf).map_err(|e| fail(e.message))?,
        ),
        MembershipChangeEvent::TEMPLATE_ID => LogEntry::MembershipChange,
        other => {
            let name = sulis_protocol::cluster::messages::template_name(other)
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            return Err(fail(format!("template {other}{name} is not a log entry")));
        }
    };
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sulis_protocol::cluster::messages::{close_reason, AppendPosition};

    #[test]
    fn each_entry_decodes_with_the_payload_after_the_32_byte_session_header() {
        let mut message = SessionMessageHeader {
            leadership_term_id: 3,
            cluster_session_id: 9,
            timestamp: 1234,
        }
        .encode();
        message.extend_from_slice(b"hello");
        assert_eq!(
            decode(&message, 96),
            Ok(LogEntry::SessionMessage {
                leadership_term_id: 3,
                cluster_session_id: 9,
                timestamp: 1234,
                payload: b"hello",
            })
        );
        let close = SessionCloseEvent {
            leadership_term_id: 3,
            cluster_session_id: 9,
            timestamp: 1300,
            close_reason: close_reason::TIMEOUT,
        };
        assert_eq!(
            decode(&close.encode(), 160),
            Ok(LogEntry::SessionClose(close))
        );
        let term = NewLeadershipTermEvent {
            leadership_term_id: 4,
            log_position: 256,
            timestamp: 1400,
            term_base_log_position: 192,
            leader_member_id: 2,
            log_session_id: 77,
            time_unit: 0,
            app_version: 1,
        };
        assert_eq!(
            decode(&term.encode(), 256),
            Ok(LogEntry::NewLeadershipTerm(term))
        );
    }

    #[test]
    fn anything_else_is_an_error_naming_the_position() {
        let consensus = AppendPosition::default().encode();
        let e = decode(&consensus, 512).unwrap_err();
        assert_eq!(
            e.to_string(),
            "log entry ending at position 512: template 54 (AppendPosition) is not a log entry"
        );
        let mut foreign = TimerEvent::default().encode();
        foreign[4] = 101;
        assert!(decode(&foreign, 64)
            .unwrap_err()
            .reason
            .starts_with("schema id 101"));
        let short = SessionMessageHeader::default().encode();
        assert!(decode(&short[..20], 32)
            .unwrap_err()
            .reason
            .contains("shorter"));
        assert!(decode(&[1, 2, 3], 32).is_err());
    }
}
