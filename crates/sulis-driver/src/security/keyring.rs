//! The keyring of transport security: the keys a driver seals and opens
//! secured channels' datagrams with, loaded from a file at start and read
//! again when the file changes (rotation without a restart).
//!
//! The file is text, one key a line: an id (1 to 4294967295) and 64 hex
//! digits (256 random bits). `send ID` names the key this driver seals with;
//! without it, the highest id. Every key in the file opens. `#` starts a
//! comment. The file must not be readable by group or others.
//!
//! ```text
//! # sulis keyring
//! 1 6f1ed002ab5595859014ebf0951522d9bd16f3d25d1a1f5a3bd43a2f0bd8a3c1
//! 2 0c8a8e2dfed0b0d29c6a2b5bd2ae0ff0c2f1c4d6a2fda5d8e5c0e3a8b7a9f101
//! send 2
//! ```
//!
//! Rotation: add the new key on every host (each now opens both), then
//! point `send` at it on every host, then remove the old key.
//!
//! A key never leaves this module as bytes: each is kept as an HKDF
//! pseudo-random key, from which every sending socket's own AEAD key is
//! derived (with its random salt), and the parsed bytes are wiped.

use arc_swap::ArcSwap;
use ring::aead::{LessSafeKey, UnboundKey, AES_256_GCM};
use ring::hkdf;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use zeroize::Zeroize;

/// Length of a key in bytes.
pub const KEY_LENGTH: usize = 32;

/// The HKDF `info` prefix of a sender's derived key (with the key id and salt after it).
const DERIVE_INFO: &[u8] = b"sulis transport security v0";

/// The keys of one reading of the keyring file.
pub struct Keys {
    /// (id, pseudo-random key), in the file's order.
    keys: Vec<(u32, hkdf::Prk)>,
    send: u32,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("ids", &self.ids())
            .field("send", &self.send)
            .finish()
    }
}

impl Keys {
    /// Parses a keyring's text; `source` names it in errors (a key's digits
    /// never appear in one).
    pub fn parse(text: &str, source: &str) -> Result<Keys, String> {
        let mut keys: Vec<(u32, hkdf::Prk)> = Vec::new();
        let mut send = None;
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = || format!("keyring {source}, line {}", n + 1);
            let mut words = line.split_whitespace();
            let (first, second) = (words.next().unwrap_or(""), words.next());
            if words.next().is_some() {
                return Err(format!(
                    "{}: expected 'ID HEX' or 'send ID', found more words",
                    at()
                ));
            }
            if first == "send" {
                let id = second
                    .and_then(|s| parse_id(s).ok())
                    .ok_or_else(|| format!("{}: 'send' needs a key id", at()))?;
                send = Some(id);
                continue;
            }
            let id = parse_id(first).map_err(|e| format!("{}: {e}", at()))?;
            let hex = second.ok_or_else(|| format!("{}: key {id} has no key", at()))?;
            let mut bytes = parse_key(hex).map_err(|e| format!("{}: key {id}: {e}", at()))?;
            if keys.iter().any(|(k, _)| *k == id) {
                bytes.zeroize();
                return Err(format!("{}: key id {id} appears twice", at()));
            }
            let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"sulis keyring").extract(&bytes);
            bytes.zeroize();
            keys.push((id, prk));
        }
        if keys.is_empty() {
            return Err(format!("keyring {source} holds no key"));
        }
        let send = match send {
            Some(id) if keys.iter().any(|(k, _)| *k == id) => id,
            Some(id) => {
                return Err(format!(
                    "keyring {source}: 'send {id}' names no key in the file"
                ))
            }
            None => keys.iter().map(|(k, _)| *k).max().unwrap_or(0),
        };
        Ok(Keys { keys, send })
    }

    /// The key ids, in the file's order.
    pub fn ids(&self) -> Vec<u32> {
        self.keys.iter().map(|(id, _)| *id).collect()
    }

    /// The id of the key senders seal with.
    pub fn send_id(&self) -> u32 {
        self.send
    }

    /// True if the ring holds key `id`.
    pub fn contains(&self, id: u32) -> bool {
        self.keys.iter().any(|(k, _)| *k == id)
    }

    /// The AEAD key of the sender with `salt` under key `id`, or `None`
    /// if the ring does not hold `id`.
    pub fn derive(&self, id: u32, salt: &[u8]) -> Option<LessSafeKey> {
        let (_, prk) = self.keys.iter().find(|(k, _)| *k == id)?;
        let id_bytes = id.to_le_bytes();
        let info = [DERIVE_INFO, &id_bytes[..], salt];
        let okm = prk.expand(&info, &AES_256_GCM).ok()?;
        Some(LessSafeKey::new(UnboundKey::from(okm)))
    }
}

fn parse_id(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) | Err(_) => Err(format!("'{s}' is not a key id (1 to 4294967295) or 'send'")),
        Ok(id) => Ok(id),
    }
}

fn parse_key(hex: &str) -> Result<[u8; KEY_LENGTH], String> {
    if hex.len() != 2 * KEY_LENGTH || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "a key is {} hex digits (found {} characters{})",
            2 * KEY_LENGTH,
            hex.len(),
            if hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                ""
            } else {
                ", not all hex digits"
            }
        ));
    }
    let mut out = [0u8; KEY_LENGTH];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
        out[i] = digit(pair[0]) << 4 | digit(pair[1]);
    }
    if out.iter().all(|&b| b == 0) {
        return Err("a key of zeros is not a key".to_owned());
    }
    Ok(out)
}

/// What tells one version of the file from another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    inode: u64,
    len: u64,
    mtime_ns: i128,
}

/// The stamp of a file that could not be seen.
const GONE: FileStamp = FileStamp {
    inode: 0,
    len: 0,
    mtime_ns: 0,
};

fn stamp_of(meta: &std::fs::Metadata) -> FileStamp {
    FileStamp {
        inode: meta.ino(),
        len: meta.len(),
        mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
    }
}

/// A keyring file and the keys last read from it, shared by the conductor
/// (which reads the file again when it changes) and every secured socket
/// (which takes the new keys at its next send or receive).
#[derive(Debug)]
pub struct Keyring {
    path: PathBuf,
    keys: ArcSwap<Keys>,
    /// One more at every reload, so sockets see a change with one load.
    generation: AtomicU64,
    stamp: Mutex<Option<FileStamp>>,
}

impl Keyring {
    /// Reads the keyring at `path`.
    ///
    /// # Errors
    /// The file cannot be read, is readable by group or others, or does not parse.
    pub fn load(path: &Path) -> Result<Arc<Keyring>, String> {
        let (keys, stamp) = read_file(path)?;
        Ok(Arc::new(Keyring {
            path: path.to_owned(),
            keys: ArcSwap::from_pointee(keys),
            generation: AtomicU64::new(1),
            stamp: Mutex::new(Some(stamp)),
        }))
    }

    /// Keys held in memory only (tests and embedded use): never reloaded.
    pub fn from_keys(keys: Keys) -> Arc<Keyring> {
        Arc::new(Keyring {
            path: PathBuf::new(),
            keys: ArcSwap::from_pointee(keys),
            generation: AtomicU64::new(1),
            stamp: Mutex::new(None),
        })
    }

    /// The file (empty for keys held in memory).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The keys now in use.
    pub fn keys(&self) -> Arc<Keys> {
        self.keys.load_full()
    }

    /// Changes at every reload.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Reads the file again if it changed; `Ok(Some(ids))` after a reload,
    /// `Ok(None)` if it had not changed.
    ///
    /// # Errors
    /// The changed file cannot be used: the keys read before stay in use.
    pub fn refresh(&self) -> Result<Option<Vec<u32>>, String> {
        let mut stamp = self.stamp.lock().unwrap_or_else(|e| e.into_inner());
        let Some(last) = *stamp else {
            return Ok(None);
        };
        let meta = match std::fs::metadata(&self.path) {
            Ok(meta) => meta,
            // Gone (or unreadable): said once, and the keys in use stay until it is back.
            Err(_) if last == GONE => return Ok(None),
            Err(e) => {
                *stamp = Some(GONE);
                return Err(format!("keyring {}: {e}", self.path.display()));
            }
        };
        if stamp_of(&meta) == last {
            return Ok(None);
        }
        let (keys, now) = match read_file(&self.path) {
            Ok(read) => read,
            Err(e) => {
                // Not asked again until the file changes once more.
                *stamp = Some(stamp_of(&meta));
                return Err(e);
            }
        };
        let ids = keys.ids();
        self.keys.store(Arc::new(keys));
        self.generation.fetch_add(1, Ordering::AcqRel);
        *stamp = Some(now);
        Ok(Some(ids))
    }

    /// Replaces the keys held in memory (tests of rotation).
    pub fn replace(&self, keys: Keys) {
        self.keys.store(Arc::new(keys));
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

fn read_file(path: &Path) -> Result<(Keys, FileStamp), String> {
    let (mut text, meta) = sulis_concurrent::mapped_file::read_private_file(path, "keyring")?;
    let keys = Keys::parse(&text, &path.display().to_string());
    text.zeroize();
    Ok((keys?, stamp_of(&meta)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const K1: &str = "6f1ed002ab5595859014ebf0951522d9bd16f3d25d1a1f5a3bd43a2f0bd8a3c1";
    const K2: &str = "0c8a8e2dfed0b0d29c6a2b5bd2ae0ff0c2f1c4d6a2fda5d8e5c0e3a8b7a9f101";

    #[test]
    fn should_read_keys_and_take_the_highest_id_to_send_unless_named() {
        let keys = Keys::parse(&format!("# ring\n1 {K1}\n2 {K2}  # newest\n"), "t").unwrap();
        assert_eq!(keys.ids(), [1, 2]);
        assert_eq!(keys.send_id(), 2);
        let keys = Keys::parse(&format!("2 {K2}\n1 {K1}\nsend 1\n"), "t").unwrap();
        assert_eq!(keys.send_id(), 1);
    }

    #[test]
    fn should_refuse_bad_lines_naming_the_line_and_never_the_key() {
        for (text, says) in [
            (String::new(), "holds no key"),
            (format!("0 {K1}"), "line 1: '0' is not a key id"),
            (format!("1 {K1}\n1 {K2}"), "line 2: key id 1 appears twice"),
            (
                format!("1 {}", &K1[..60]),
                "a key is 64 hex digits (found 60",
            ),
            (format!("1 {K1}\nsend 3"), "'send 3' names no key"),
            (format!("1 {}", "0".repeat(64)), "a key of zeros"),
            ("1".to_owned(), "key 1 has no key"),
        ] {
            let err = Keys::parse(&text, "f").unwrap_err();
            assert!(err.contains(says), "{err} should say {says}");
            assert!(
                !err.contains(&K1[..16]) && !err.contains(&K2[..16]),
                "{err}"
            );
        }
    }

    #[test]
    fn should_derive_one_key_per_salt_and_id() {
        let keys = Keys::parse(&format!("1 {K1}\n2 {K2}"), "t").unwrap();
        let seal = |key: &LessSafeKey| {
            let mut v = b"same plaintext".to_vec();
            let nonce = ring::aead::Nonce::assume_unique_for_key([0; 12]);
            key.seal_in_place_append_tag(nonce, ring::aead::Aad::empty(), &mut v)
                .unwrap();
            v
        };
        let a = seal(&keys.derive(1, &[1; 8]).unwrap());
        assert_eq!(a, seal(&keys.derive(1, &[1; 8]).unwrap()));
        assert_ne!(a, seal(&keys.derive(1, &[2; 8]).unwrap()));
        assert_ne!(a, seal(&keys.derive(2, &[1; 8]).unwrap()));
        assert!(keys.derive(3, &[1; 8]).is_none());
    }

    #[test]
    fn should_refuse_a_file_others_can_read_and_reload_one_that_changed() {
        let dir = std::env::temp_dir().join(format!("sulis-keyring-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keyring");
        std::fs::write(&path, format!("1 {K1}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Keyring::load(&path).unwrap_err();
        assert!(err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ring = Keyring::load(&path).unwrap();
        assert_eq!(ring.refresh().unwrap(), None);
        let generation = ring.generation();
        // A new file in its place (as an editor or `mv` does).
        let next = dir.join("keyring.new");
        std::fs::write(&next, format!("1 {K1}\n2 {K2}\nsend 2\n")).unwrap();
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(ring.refresh().unwrap(), Some(vec![1, 2]));
        assert_eq!(ring.keys().send_id(), 2);
        assert!(ring.generation() > generation);
        // A broken file keeps the keys in use, and is reported once.
        std::fs::write(&next, "1 nonsense\n").unwrap();
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert!(ring.refresh().unwrap_err().contains("line 1"));
        assert_eq!(ring.refresh().unwrap(), None);
        assert_eq!(ring.keys().ids(), [1, 2]);
        // A file that goes away is reported once; the keys stay.
        std::fs::remove_file(&path).unwrap();
        assert!(ring.refresh().unwrap_err().contains("No such file"));
        assert_eq!(ring.refresh().unwrap(), None);
        assert_eq!(ring.keys().ids(), [1, 2]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
