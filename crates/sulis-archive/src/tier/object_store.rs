//! An S3-compatible object store: requests signed with AWS Signature V4 by
//! `rusty-s3` (presigned URLs, the signature in the query) and sent by
//! `ureq`, one blocking request at a time. Every error names the store and
//! the object, never the signed URL or a credential.
//!
//! The store is given as a URL: `http://HOST:PORT/BUCKET[/PREFIX]` (path
//! style: S3-compatible servers, MinIO, S3Proxy), `https://...` alike, or
//! `s3://BUCKET[/PREFIX]` for AWS S3 in the region given.

use super::credentials::StoreCredentials;
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use std::io::{Read, Write};
use std::time::Duration;

/// How long a signed request stays valid: long enough for a slow upload to
/// start, short enough that a leaked URL is soon useless.
const SIGNED_FOR: Duration = Duration::from_secs(15 * 60);

/// Where objects go: a bucket on an endpoint, under a key prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreLocation {
    /// `scheme://host[:port]`.
    pub endpoint: String,
    /// The bucket's name.
    pub bucket: String,
    /// Prepended to every key (empty, or ends with `/`).
    pub prefix: String,
    /// The region the requests are signed for.
    pub region: String,
}

impl StoreLocation {
    /// Parses a store URL (see the module's documentation).
    pub fn parse(spec: &str, region: &str) -> Result<StoreLocation, String> {
        // A user:secret@ part is never echoed back.
        let shown = match (spec.find("://"), spec.find('@')) {
            (Some(s), Some(at)) if at > s => format!("{}://...{}", &spec[..s], &spec[at..]),
            _ => spec.to_string(),
        };
        let bad = |why: &str| {
            Err(format!(
                "object store '{shown}': {why} (give http://HOST:PORT/BUCKET[/PREFIX], https://... or \
                 s3://BUCKET[/PREFIX])"
            ))
        };
        let (endpoint, rest) = if let Some(rest) = spec.strip_prefix("s3://") {
            (format!("https://s3.{region}.amazonaws.com"), rest)
        } else {
            let Some((scheme, after)) = spec.split_once("://") else {
                return bad("no scheme");
            };
            if scheme != "http" && scheme != "https" {
                return bad(&format!("scheme '{scheme}' is not http, https or s3"));
            }
            let (host, path) = after.split_once('/').unwrap_or((after, ""));
            if host.is_empty() {
                return bad("no host");
            }
            (format!("{scheme}://{host}"), path)
        };
        if spec.contains('@') || spec.contains('?') {
            return bad("credentials and query parameters do not belong in it (they come from AWS_* or a profile)");
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return bad("no bucket");
        }
        let prefix = prefix.trim_matches('/');
        Ok(StoreLocation {
            endpoint,
            bucket: bucket.to_string(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
            region: region.to_string(),
        })
    }

    /// `ENDPOINT/BUCKET/PREFIX`, as logs and errors name the store.
    pub fn describe(&self) -> String {
        format!("{}/{}/{}", self.endpoint, self.bucket, self.prefix)
    }
}

/// What a HEAD request found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The object's length in bytes.
    pub length: u64,
    /// Its ETag, quotes removed (the MD5 of a single-request upload).
    pub etag: String,
}

/// An S3-compatible object store.
pub struct ObjectStore {
    location: StoreLocation,
    bucket: Bucket,
    credentials: Credentials,
    agent: ureq::Agent,
}

impl std::fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "object store {}", self.location.describe())
    }
}

impl ObjectStore {
    /// A client of the store at `location`; `timeout` bounds connecting and
    /// each wait for a response (not a whole transfer).
    pub fn new(
        location: StoreLocation,
        credentials: &StoreCredentials,
        timeout: Duration,
    ) -> Result<ObjectStore, String> {
        let endpoint: url::Url = location
            .endpoint
            .parse()
            .map_err(|e| format!("object store {}: {e}", location.describe()))?;
        let bucket = Bucket::new(
            endpoint,
            UrlStyle::Path,
            location.bucket.clone(),
            location.region.clone(),
        )
        .map_err(|e| format!("object store {}: {e}", location.describe()))?;
        let credentials = match &credentials.token {
            Some(t) => Credentials::new_with_token(&credentials.key, &credentials.secret, t),
            None => Credentials::new(&credentials.key, &credentials.secret),
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(timeout))
            .timeout_recv_response(Some(timeout))
            .timeout_send_request(Some(timeout))
            .build()
            .into();
        Ok(ObjectStore {
            location,
            bucket,
            credentials,
            agent,
        })
    }

    /// Where the store is.
    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// The full key of `name` (the prefix before it).
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.location.prefix)
    }

    fn fail(&self, what: &str, key: &str, why: impl std::fmt::Display) -> String {
        format!(
            "object store {}: {what} {key}: {why}",
            self.location.describe()
        )
    }

    /// Why a request was refused: the status and S3's error code and message.
    fn refused(&self, what: &str, key: &str, response: ureq::http::Response<ureq::Body>) -> String {
        let status = response.status();
        let mut body = String::new();
        let _ = response
            .into_body()
            .into_reader()
            .take(16 * 1024)
            .read_to_string(&mut body);
        let field = |tag: &str| {
            let open = format!("<{tag}>");
            let start = body.find(&open)? + open.len();
            let end = body[start..].find('<')? + start;
            Some(body[start..end].to_string())
        };
        let detail = match (field("Code"), field("Message")) {
            (Some(c), Some(m)) => format!(": {c}: {m}"),
            (Some(c), None) => format!(": {c}"),
            _ => String::new(),
        };
        self.fail(what, key, format!("HTTP {status}{detail}"))
    }

    /// Checks that the bucket is there and the credentials are taken. The
    /// error says whether the store answered (a refusal: the bucket or the
    /// credentials are wrong) or could not be reached.
    pub fn check_bucket(&self) -> Result<(), (bool, String)> {
        let url = self
            .bucket
            .head_bucket(Some(&self.credentials))
            .sign(SIGNED_FOR);
        let response = self
            .agent
            .head(url.as_str())
            .call()
            .map_err(|e| (false, self.fail("HEAD bucket", &self.location.bucket, e)))?;
        match response.status().as_u16() {
            200..=299 => Ok(()),
            404 => Err((
                true,
                self.fail(
                    "HEAD bucket",
                    &self.location.bucket,
                    "no such bucket (create it first)",
                ),
            )),
            _ => Err((
                true,
                self.refused("HEAD bucket", &self.location.bucket, response),
            )),
        }
    }

    /// Stores `length` bytes read from `body` as `key`; the store checks
    /// them against `md5` (Content-MD5, base64) and refuses a mismatch.
    pub fn put(
        &self,
        key: &str,
        body: &mut dyn Read,
        length: u64,
        md5_base64: &str,
    ) -> Result<(), String> {
        let mut action = self.bucket.put_object(Some(&self.credentials), key);
        action
            .headers_mut()
            .insert("content-md5", md5_base64.to_string());
        let url = action.sign(SIGNED_FOR);
        let response = self
            .agent
            .put(url.as_str())
            .header("content-md5", md5_base64)
            .header("content-length", length.to_string())
            .send(ureq::SendBody::from_reader(body))
            .map_err(|e| self.fail("PUT", key, e))?;
        match response.status().as_u16() {
            200..=299 => Ok(()),
            _ => Err(self.refused("PUT", key, response)),
        }
    }

    /// The object's length and ETag; `None` if there is no such object.
    pub fn head(&self, key: &str) -> Result<Option<ObjectInfo>, String> {
        let url = self
            .bucket
            .head_object(Some(&self.credentials), key)
            .sign(SIGNED_FOR);
        let response = self
            .agent
            .head(url.as_str())
            .call()
            .map_err(|e| self.fail("HEAD", key, e))?;
        match response.status().as_u16() {
            200..=299 => {
                let header = |name: &str| {
                    response
                        .headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                };
                let length = header("content-length")
                    .and_then(|l| l.parse::<u64>().ok())
                    .ok_or_else(|| self.fail("HEAD", key, "no Content-Length in the answer"))?;
                let etag = header("etag")
                    .unwrap_or_default()
                    .trim_matches('"')
                    .to_string();
                Ok(Some(ObjectInfo { length, etag }))
            }
            404 => Ok(None),
            _ => Err(self.refused("HEAD", key, response)),
        }
    }

    /// Copies the object (or `range`: first byte and length) into `out`;
    /// returns the bytes copied. A body that ends early is an error.
    pub fn get(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
        out: &mut dyn Write,
    ) -> Result<u64, String> {
        let url = self
            .bucket
            .get_object(Some(&self.credentials), key)
            .sign(SIGNED_FOR);
        let mut request = self.agent.get(url.as_str());
        if let Some((first, length)) = range {
            if length == 0 {
                return Ok(0);
            }
            request = request.header("range", format!("bytes={first}-{}", first + length - 1));
        }
        let response = request.call().map_err(|e| self.fail("GET", key, e))?;
        match response.status().as_u16() {
            200..=299 => {
                let expected = response
                    .headers()
                    .get("content-length")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|l| l.parse::<u64>().ok());
                let copied = std::io::copy(&mut response.into_body().into_reader(), out)
                    .map_err(|e| self.fail("GET", key, e))?;
                if let Some(n) = expected.filter(|n| *n != copied) {
                    return Err(self.fail(
                        "GET",
                        key,
                        format!("the answer ended after {copied} of {n} bytes"),
                    ));
                }
                Ok(copied)
            }
            404 => Err(self.fail("GET", key, "no such object")),
            _ => Err(self.refused("GET", key, response)),
        }
    }

    /// Deletes the object (no error if it is not there).
    pub fn delete(&self, key: &str) -> Result<(), String> {
        let url = self
            .bucket
            .delete_object(Some(&self.credentials), key)
            .sign(SIGNED_FOR);
        let response = self
            .agent
            .delete(url.as_str())
            .call()
            .map_err(|e| self.fail("DELETE", key, e))?;
        match response.status().as_u16() {
            200..=299 | 404 => Ok(()),
            _ => Err(self.refused("DELETE", key, response)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls() {
        let l =
            StoreLocation::parse("http://127.0.0.1:9000/tiered/archive-a/", "us-east-1").unwrap();
        assert_eq!(
            (l.endpoint.as_str(), l.bucket.as_str(), l.prefix.as_str()),
            ("http://127.0.0.1:9000", "tiered", "archive-a/")
        );
        assert_eq!(l.describe(), "http://127.0.0.1:9000/tiered/archive-a/");
        let l = StoreLocation::parse("https://minio.example:443/b", "r").unwrap();
        assert_eq!((l.bucket.as_str(), l.prefix.as_str()), ("b", ""));
        let l = StoreLocation::parse("s3://market-data/sulis", "eu-west-1").unwrap();
        assert_eq!(l.endpoint, "https://s3.eu-west-1.amazonaws.com");
        assert_eq!(
            (l.bucket.as_str(), l.prefix.as_str()),
            ("market-data", "sulis/")
        );
        for bad in [
            "127.0.0.1:9000/b",
            "ftp://h/b",
            "http:///b",
            "http://h",
            "http://key:secret@h/b",
            "http://h/b?X-Amz-Credential=k",
        ] {
            let e = StoreLocation::parse(bad, "r").unwrap_err();
            if bad.contains('@') {
                assert!(!e.contains("secret") && e.contains("credentials"), "{e}");
            } else {
                assert!(e.contains(bad), "{e}");
            }
        }
    }
}
