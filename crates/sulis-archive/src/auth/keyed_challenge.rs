//! A client proves that it holds a secret without sending it: the
//! authenticator answers a connect that names a known principal with a
//! fresh random challenge, and lets the session in only if the client's
//! answer is the challenge's HMAC-SHA256 under that principal's secret.
//!
//! Credentials sent in the clear (Aeron's default flow) can be captured
//! and replayed by anyone who sees one connect; an answer here is good for
//! its own challenge only, and the secret never crosses the wire. The
//! HMAC, its constant-time check and the random challenge are `ring`'s.
//!
//! A challenge is `sulis-hmac-sha256:` followed by 32 random bytes; the
//! answer is [`answer`]`(secret, challenge, response_channel)`: the HMAC
//! covers the channel the session's answers go to, so a client tricked into
//! answering a challenge relayed from someone else's connect (another
//! response channel) opens nothing. Keys come from a private text file of
//! `principal secret` lines ([`KeyedChallengeAuthenticator::from_text`]).

use std::collections::{HashMap, VecDeque};

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use super::{Authenticator, Decision};

/// What every challenge of this scheme starts with.
pub const SCHEME: &[u8] = b"sulis-hmac-sha256:";
/// Random bytes after the scheme.
pub const NONCE_LEN: usize = 32;
/// Shortest secret accepted (an HMAC key of fewer bytes is guessable).
pub const MIN_SECRET_LEN: usize = 16;
/// Challenges kept waiting for their answer; past this the oldest is
/// forgotten (its answer, if it ever comes, is refused).
pub const MAX_PENDING: usize = 4096;

/// The answer to a challenge of this scheme for a session whose answers go
/// to `response_channel` (as the client sent it in its connect), or None
/// for a challenge of another scheme (or none at all).
pub fn answer(secret: &[u8], challenge: &[u8], response_channel: &str) -> Option<Vec<u8>> {
    if !challenge.starts_with(SCHEME) || challenge.len() != SCHEME.len() + NONCE_LEN {
        return None;
    }
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let m = signed(challenge, response_channel.as_bytes());
    Some(hmac::sign(&key, &m).as_ref().to_vec())
}

/// What the HMAC covers: the challenge (of fixed length), then the channel.
fn signed(challenge: &[u8], response_channel: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(challenge.len() + response_channel.len());
    m.extend_from_slice(challenge);
    m.extend_from_slice(response_channel);
    m
}

/// A challenge sent and not yet answered.
struct Pending {
    session_id: i64,
    key: hmac::Key,
    /// What the answer must be the HMAC of: the challenge and the channel.
    signed: Vec<u8>,
}

/// Lets in a client that connects with a known principal and answers its
/// challenge with the HMAC under that principal's secret.
pub struct KeyedChallengeAuthenticator {
    keys: HashMap<Vec<u8>, hmac::Key>,
    /// Sessions sent a challenge, oldest first.
    pending: VecDeque<Pending>,
    rng: SystemRandom,
}

impl std::fmt::Debug for KeyedChallengeAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets.
        f.debug_struct("KeyedChallengeAuthenticator")
            .field("principals", &self.keys.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl KeyedChallengeAuthenticator {
    /// One secret per principal.
    pub fn new(keys: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Self {
        KeyedChallengeAuthenticator {
            keys: keys
                .into_iter()
                .map(|(principal, secret)| (principal, hmac::Key::new(hmac::HMAC_SHA256, &secret)))
                .collect(),
            pending: VecDeque::new(),
            rng: SystemRandom::new(),
        }
    }

    /// From `principal secret` lines (a line starting with `#` is a
    /// comment; the secret is the rest of the line, trimmed). `name` names the file in errors,
    /// which never quote a secret.
    pub fn from_text(text: &str, name: &str) -> Result<Self, String> {
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            // A comment is a line of its own: a secret may hold a '#'.
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((principal, secret)) = line.split_once(char::is_whitespace) else {
                // The line is not quoted: it may be a secret without its principal.
                return Err(format!(
                    "{name} line {}: one word, no secret: write 'principal secret'",
                    n + 1
                ));
            };
            let secret = secret.trim();
            if secret.len() < MIN_SECRET_LEN {
                return Err(format!(
                    "{name} line {}: the secret of '{principal}' is {} bytes, fewer than {MIN_SECRET_LEN}",
                    n + 1,
                    secret.len()
                ));
            }
            if keys
                .iter()
                .any(|(p, _): &(Vec<u8>, Vec<u8>)| p == principal.as_bytes())
            {
                return Err(format!(
                    "{name} line {}: '{principal}' is named twice",
                    n + 1
                ));
            }
            keys.push((principal.as_bytes().to_vec(), secret.as_bytes().to_vec()));
        }
        if keys.is_empty() {
            return Err(format!("{name} holds no keys: no client could connect"));
        }
        Ok(Self::new(keys))
    }

    /// Principals known.
    pub fn principals(&self) -> usize {
        self.keys.len()
    }
}

impl Authenticator for KeyedChallengeAuthenticator {
    fn on_connect(
        &mut self,
        session_id: i64,
        credentials: &[u8],
        response_channel: &str,
    ) -> Decision {
        let Some(key) = self.keys.get(credentials).cloned() else {
            return Decision::Reject;
        };
        let mut challenge = SCHEME.to_vec();
        challenge.resize(SCHEME.len() + NONCE_LEN, 0);
        if self.rng.fill(&mut challenge[SCHEME.len()..]).is_err() {
            return Decision::Reject;
        }
        self.on_session_dropped(session_id);
        if self.pending.len() >= MAX_PENDING {
            self.pending.pop_front();
        }
        let signed = signed(&challenge, response_channel.as_bytes());
        self.pending.push_back(Pending {
            session_id,
            key,
            signed,
        });
        Decision::Challenge(challenge)
    }

    fn on_challenge_response(&mut self, session_id: i64, credentials: &[u8]) -> Decision {
        // A challenge is answered once: right or wrong, it is spent.
        let Some(at) = self.pending.iter().position(|p| p.session_id == session_id) else {
            return Decision::Reject;
        };
        let p = self.pending.remove(at).expect("found above");
        if hmac::verify(&p.key, &p.signed, credentials).is_ok() {
            Decision::Accept
        } else {
            Decision::Reject
        }
    }

    fn on_session_dropped(&mut self, session_id: i64) {
        self.pending.retain(|p| p.session_id != session_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"a secret of thirty-two bytes....";
    const CHANNEL: &str = "aeron:udp?endpoint=10.0.0.1:20121";

    fn alice() -> KeyedChallengeAuthenticator {
        KeyedChallengeAuthenticator::new([(b"alice".to_vec(), SECRET.to_vec())])
    }

    fn challenge_of(d: Decision) -> Vec<u8> {
        match d {
            Decision::Challenge(c) => c,
            other => panic!("expected a challenge, got {other:?}"),
        }
    }

    #[test]
    fn should_let_in_only_the_answer_under_the_principals_secret_to_its_own_challenge() {
        let mut auth = alice();
        assert_eq!(auth.on_connect(1, b"mallory", CHANNEL), Decision::Reject);
        assert_eq!(auth.on_connect(1, b"", CHANNEL), Decision::Reject);
        let first = challenge_of(auth.on_connect(1, b"alice", CHANNEL));
        assert!(first.starts_with(SCHEME) && first.len() == SCHEME.len() + NONCE_LEN);
        let second = challenge_of(auth.on_connect(2, b"alice", CHANNEL));
        assert_ne!(first, second, "every challenge is fresh");
        // The answer to one challenge does not open another session.
        let answer_1 = answer(SECRET, &first, CHANNEL).unwrap();
        assert_eq!(auth.on_challenge_response(2, &answer_1), Decision::Reject);
        assert_eq!(auth.on_challenge_response(1, &answer_1), Decision::Accept);
        // Spent: the same answer again (a replay) is refused.
        assert_eq!(auth.on_challenge_response(1, &answer_1), Decision::Reject);
        let third = challenge_of(auth.on_connect(3, b"alice", CHANNEL));
        let wrong = answer(b"another secret of 32 bytes......", &third, CHANNEL).unwrap();
        assert_eq!(auth.on_challenge_response(3, &wrong), Decision::Reject);
        assert_eq!(
            auth.on_challenge_response(3, &answer(SECRET, &third, CHANNEL).unwrap()),
            Decision::Reject,
            "a wrong answer spends the challenge"
        );
    }

    #[test]
    fn should_refuse_an_answer_made_for_another_response_channel_and_forget_a_dropped_session() {
        // Someone connects as alice with their own response channel and relays the challenge to alice's
        // client, which answers it for its own channel: that answer opens nothing.
        let mut auth = alice();
        let relayed = challenge_of(auth.on_connect(1, b"alice", "aeron:udp?endpoint=10.0.0.66:9"));
        let tricked = answer(SECRET, &relayed, CHANNEL).unwrap();
        assert_eq!(auth.on_challenge_response(1, &tricked), Decision::Reject);
        // A session dropped before its answer: nothing kept for it, its answer refused.
        let dropped = challenge_of(auth.on_connect(2, b"alice", CHANNEL));
        auth.on_session_dropped(2);
        assert!(auth.pending.is_empty());
        assert_eq!(
            auth.on_challenge_response(2, &answer(SECRET, &dropped, CHANNEL).unwrap()),
            Decision::Reject
        );
    }

    #[test]
    fn should_answer_only_its_own_scheme_and_forget_the_oldest_past_the_bound() {
        assert_eq!(answer(SECRET, b"who?", CHANNEL), None);
        assert_eq!(answer(SECRET, SCHEME, CHANNEL), None);
        let mut auth = alice();
        let oldest = challenge_of(auth.on_connect(0, b"alice", ""));
        for id in 1..=MAX_PENDING as i64 {
            auth.on_connect(id, b"alice", "");
        }
        assert_eq!(auth.pending.len(), MAX_PENDING);
        assert_eq!(
            auth.on_challenge_response(0, &answer(SECRET, &oldest, "").unwrap()),
            Decision::Reject
        );
    }

    #[test]
    fn should_read_principal_secret_lines_and_name_what_is_wrong_without_the_secret() {
        let mut auth = KeyedChallengeAuthenticator::from_text(
            "# who may connect\nalice a secret of thirty-two bytes....\n\nbob   another #long secret here\n",
            "keys.txt",
        )
        .unwrap();
        assert_eq!(auth.principals(), 2);
        let bob = challenge_of(auth.on_connect(1, b"bob", CHANNEL));
        let answer_bob = answer(b"another #long secret here", &bob, CHANNEL).unwrap();
        assert_eq!(
            auth.on_challenge_response(1, &answer_bob),
            Decision::Accept,
            "a '#' inside a secret is the secret's"
        );
        assert!(!format!("{auth:?}").contains("secret of"));
        let short =
            KeyedChallengeAuthenticator::from_text("carol tooshort\n", "keys.txt").unwrap_err();
        assert!(
            short.contains("keys.txt line 1") && short.contains("fewer than 16"),
            "{short}"
        );
        assert!(!short.contains("tooshort"), "{short}");
        let bare = KeyedChallengeAuthenticator::from_text("dave\n", "keys.txt").unwrap_err();
        assert!(
            bare.contains("no secret") && !bare.contains("dave"),
            "{bare}"
        );
        let twice = KeyedChallengeAuthenticator::from_text(
            "erin 0123456789abcdef\nerin fedcba9876543210\n",
            "keys.txt",
        )
        .unwrap_err();
        assert!(
            twice.contains("line 2") && twice.contains("named twice"),
            "{twice}"
        );
        assert!(
            KeyedChallengeAuthenticator::from_text("# none\n", "keys.txt")
                .unwrap_err()
                .contains("holds no keys")
        );
    }
}
