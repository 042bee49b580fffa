//! Where an object store's credentials come from: the usual places an S3
//! client looks, never a channel URI, an option value or a log line.
//!
//! 1. `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (and
//!    `AWS_SESSION_TOKEN`) in the environment;
//! 2. else the profile `AWS_PROFILE` (default `default`) of the shared
//!    credentials file, `AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`.

use std::path::PathBuf;

/// An access key, its secret and an optional session token. `Debug` and
/// `describe` show the key id and where it came from, never the secret.
#[derive(Clone)]
pub struct StoreCredentials {
    /// The access key id.
    pub key: String,
    /// The secret access key.
    pub secret: String,
    /// A session token (temporary credentials).
    pub token: Option<String>,
    /// Where they were found, to say so.
    pub source: String,
}

impl std::fmt::Debug for StoreCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.describe())
    }
}

impl StoreCredentials {
    /// "access key AKIA... from the environment": what a log line may say.
    pub fn describe(&self) -> String {
        format!("access key {} from {}", self.key, self.source)
    }

    /// Looks in the environment, then in the shared credentials file; an
    /// error says where it looked.
    pub fn find() -> Result<StoreCredentials, String> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Self::find_with(&var)
    }

    /// `find` with the environment read through `var` (tests).
    pub fn find_with(var: &dyn Fn(&str) -> Option<String>) -> Result<StoreCredentials, String> {
        match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            (Some(key), Some(secret)) => {
                return Ok(StoreCredentials {
                    key,
                    secret,
                    token: var("AWS_SESSION_TOKEN"),
                    source: "the environment (AWS_ACCESS_KEY_ID)".into(),
                })
            }
            (Some(_), None) => {
                return Err("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into())
            }
            _ => {}
        }
        let file = var("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".aws").join("credentials")));
        let profile = var("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let Some(file) = file else {
            return Err(
                "no object store credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
                 AWS_SHARED_CREDENTIALS_FILE (no HOME for ~/.aws/credentials)"
                    .into(),
            );
        };
        let text = std::fs::read_to_string(&file).map_err(|e| {
            format!(
                "no object store credentials: AWS_ACCESS_KEY_ID is not set and the credentials file {} \
                 cannot be read ({e})",
                file.display()
            )
        })?;
        let found = profile_values(&text, &profile);
        let get = |k: &str| {
            found
                .iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
        };
        match (get("aws_access_key_id"), get("aws_secret_access_key")) {
            (Some(key), Some(secret)) => Ok(StoreCredentials {
                key,
                secret,
                token: get("aws_session_token"),
                source: format!("profile '{profile}' of {}", file.display()),
            }),
            _ => Err(format!(
                "no object store credentials: profile '{profile}' of {} has no aws_access_key_id and \
                 aws_secret_access_key (AWS_PROFILE names another profile)",
                file.display()
            )),
        }
    }
}

/// The `key = value` lines of `[profile]` in an INI-style credentials file
/// (keys lower-cased; `#` and `;` start comments).
fn profile_values(text: &str, profile: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut values = Vec::new();
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = section.trim();
            inside =
                name == profile || name.strip_prefix("profile ").map(str::trim) == Some(profile);
            continue;
        }
        if inside {
            if let Some((k, v)) = line.split_once('=') {
                values.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn the_environment_comes_first_and_the_secret_is_never_shown() {
        let c = StoreCredentials::find_with(&env(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
        ]))
        .unwrap();
        assert_eq!(
            (c.key.as_str(), c.secret.as_str(), c.token.as_deref()),
            ("AKID", "s3cr3t", None)
        );
        assert!(!format!("{c:?}").contains("s3cr3t"));
        assert!(c.describe().contains("AKID"));
        let e = StoreCredentials::find_with(&env(&[("AWS_ACCESS_KEY_ID", "AKID")])).unwrap_err();
        assert!(e.contains("AWS_SECRET_ACCESS_KEY"), "{e}");
    }

    #[test]
    fn a_profile_of_the_shared_file() {
        let dir = std::env::temp_dir().join(format!("sulis-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = D\naws_secret_access_key = ds\n\n# other\n[profile tiered]\n\
             AWS_ACCESS_KEY_ID=T\naws_secret_access_key= ts\naws_session_token = tok\n",
        )
        .unwrap();
        let path = file.display().to_string();
        let d =
            StoreCredentials::find_with(&env(&[("AWS_SHARED_CREDENTIALS_FILE", &path)])).unwrap();
        assert_eq!((d.key.as_str(), d.secret.as_str()), ("D", "ds"));
        let t = StoreCredentials::find_with(&env(&[
            ("AWS_SHARED_CREDENTIALS_FILE", &path),
            ("AWS_PROFILE", "tiered"),
        ]))
        .unwrap();
        assert_eq!(
            (t.key.as_str(), t.secret.as_str(), t.token.as_deref()),
            ("T", "ts", Some("tok"))
        );
        assert!(t.source.contains("profile 'tiered'"), "{}", t.source);
        let e = StoreCredentials::find_with(&env(&[
            ("AWS_SHARED_CREDENTIALS_FILE", &path),
            ("AWS_PROFILE", "nope"),
        ]))
        .unwrap_err();
        assert!(e.contains("profile 'nope'"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
