//! Who may open a control session: Aeron Archive's authentication flow
//! (AuthConnectRequest with credentials, optionally a Challenge answered
//! by a ChallengeResponse) with a pluggable [`Authenticator`].
//!
//! The default accepts everyone, as Aeron's. [`CredentialsAuthenticator`]
//! accepts a client whose credentials are one of a set, optionally after
//! asking it to answer a challenge with a second secret.
//! [`KeyedChallengeAuthenticator`] never sees a secret on the wire: it
//! challenges a known principal with random bytes that only the holder of
//! its secret can answer (an HMAC).
//!
//! Once in, every request of a session is put to an [`Authoriser`] with
//! the session's principal (the credentials it connected with) and the
//! request's name, as Aeron's `AuthorisationService`; a refused request
//! is answered UNAUTHORISED_ACTION.

pub mod keyed_challenge;

pub use keyed_challenge::KeyedChallengeAuthenticator;

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
    /// A client connected with `credentials` (empty if it sent none), its
    /// answers to go to `response_channel` ("" where the caller does not
    /// say): an authenticator may bind a challenge to where they go.
    fn on_connect(
        &mut self,
        session_id: i64,
        credentials: &[u8],
        response_channel: &str,
    ) -> Decision;

    /// The client answered a challenge with `credentials`.
    fn on_challenge_response(&mut self, session_id: i64, credentials: &[u8]) -> Decision;

    /// The session is gone before it opened (timed out, its egress never
    /// came up, a leadership change dropped it): forget what was kept for it.
    fn on_session_dropped(&mut self, session_id: i64) {
        let _ = session_id;
    }
}

/// Decides which requests a session may make.
pub trait Authoriser: Send {
    /// May the session whose principal is `principal` make the request
    /// with `template_id`, named `request` as Aeron names it
    /// (`PurgeRecordingRequest`, ...)?
    fn is_authorised(&mut self, principal: &[u8], template_id: u16, request: &str) -> bool;
}

/// Every request is allowed (Aeron's default).
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAllRequests;

impl Authoriser for AllowAllRequests {
    fn is_authorised(&mut self, _principal: &[u8], _template_id: u16, _request: &str) -> bool {
        true
    }
}

/// Everyone is let in.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAll;

impl Authenticator for AllowAll {
    fn on_connect(
        &mut self,
        _session_id: i64,
        _credentials: &[u8],
        _response_channel: &str,
    ) -> Decision {
        Decision::Accept
    }

    fn on_challenge_response(&mut self, _session_id: i64, _credentials: &[u8]) -> Decision {
        Decision::Accept
    }
}

/// Clients must connect with one of `credentials`; with a `challenge`,
/// they must then answer it with `challenge_response`.
#[derive(Clone, Debug)]
pub struct CredentialsAuthenticator {
    /// What a client may send when it connects.
    pub credentials: Vec<Vec<u8>>,
    /// Sent to a client whose credentials matched, if any.
    pub challenge: Option<Vec<u8>>,
    /// What the answer to the challenge must be.
    pub challenge_response: Vec<u8>,
}

impl Authenticator for CredentialsAuthenticator {
    fn on_connect(
        &mut self,
        _session_id: i64,
        credentials: &[u8],
        _response_channel: &str,
    ) -> Decision {
        if !self.credentials.iter().any(|c| c == credentials) {
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
            credentials: vec![b"secret".to_vec(), b"other".to_vec()],
            challenge: None,
            challenge_response: Vec::new(),
        };
        assert_eq!(plain.on_connect(1, b"secret", ""), Decision::Accept);
        assert_eq!(plain.on_connect(1, b"other", ""), Decision::Accept);
        assert_eq!(plain.on_connect(1, b"", ""), Decision::Reject);
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
            challenged.on_connect(2, b"secret", ""),
            Decision::Challenge(b"who?".to_vec())
        );
        assert_eq!(challenged.on_challenge_response(2, b"me"), Decision::Accept);
        assert_eq!(
            challenged.on_challenge_response(2, b"you"),
            Decision::Reject
        );
        assert_eq!(AllowAll.on_connect(3, b"anything", ""), Decision::Accept);
    }
}
