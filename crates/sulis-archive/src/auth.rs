//! Who may open a control session: Aeron Archive's authentication flow
//! (AuthConnectRequest with credentials, optionally a Challenge answered
//! by a ChallengeResponse) with a pluggable [`Authenticator`].
//!
//! The default accepts everyone, as Aeron's. [`CredentialsAuthenticator`]
//! accepts a client whose credentials match, optionally after asking it to
//! answer a challenge with a second secret.

/// What to do with a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Let it in.
    Accept,
    /// Refuse it (the client gets AUTHENTICATION_REJECTED).
    Reject,
    /// Ask it to answer this challenge.
    Challenge(Vec<u8>),
}

/// Decides who may control the archive.
pub trait Authenticator: Send {
    /// A client connected with `credentials` (empty if it sent none).
    fn on_connect(&mut self, session_id: i64, credentials: &[u8]) -> Decision;

    /// The client answered a challenge with `credentials`.
    fn on_challenge_response(&mut self, session_id: i64, credentials: &[u8]) -> Decision;
}

/// Everyone is let in.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAll;

impl Authenticator for AllowAll {
    fn on_connect(&mut self, _session_id: i64, _credentials: &[u8]) -> Decision {
        Decision::Accept
    }

    fn on_challenge_response(&mut self, _session_id: i64, _credentials: &[u8]) -> Decision {
        Decision::Accept
    }
}

/// Clients must connect with `credentials`; with a `challenge`, they must
/// then answer it with `challenge_response`.
#[derive(Clone, Debug)]
pub struct CredentialsAuthenticator {
    /// What a client must send when it connects.
    pub credentials: Vec<u8>,
    /// Sent to a client whose credentials matched, if any.
    pub challenge: Option<Vec<u8>>,
    /// What the answer to the challenge must be.
    pub challenge_response: Vec<u8>,
}

impl Authenticator for CredentialsAuthenticator {
    fn on_connect(&mut self, _session_id: i64, credentials: &[u8]) -> Decision {
        if credentials != self.credentials.as_slice() {
            return Decision::Reject;
        }
        match &self.challenge {
            Some(c) => Decision::Challenge(c.clone()),
            None => Decision::Accept,
        }
    }

    fn on_challenge_response(&mut self, _session_id: i64, credentials: &[u8]) -> Decision {
        if self.challenge.is_some() && credentials == self.challenge_response.as_slice() {
            Decision::Accept
        } else {
            Decision::Reject
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_accept_matching_credentials_and_the_right_challenge_answer_only() {
        let mut plain = CredentialsAuthenticator {
            credentials: b"secret".to_vec(),
            challenge: None,
            challenge_response: Vec::new(),
        };
        assert_eq!(plain.on_connect(1, b"secret"), Decision::Accept);
        assert_eq!(plain.on_connect(1, b""), Decision::Reject);
        assert_eq!(
            plain.on_challenge_response(1, b""),
            Decision::Reject,
            "no challenge was sent"
        );
        let mut challenged = CredentialsAuthenticator {
            challenge: Some(b"who?".to_vec()),
            challenge_response: b"me".to_vec(),
            ..plain
        };
        assert_eq!(
            challenged.on_connect(2, b"secret"),
            Decision::Challenge(b"who?".to_vec())
        );
        assert_eq!(challenged.on_challenge_response(2, b"me"), Decision::Accept);
        assert_eq!(
            challenged.on_challenge_response(2, b"you"),
            Decision::Reject
        );
        assert_eq!(AllowAll.on_connect(3, b"anything"), Decision::Accept);
    }
}
