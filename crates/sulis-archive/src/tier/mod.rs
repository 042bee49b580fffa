//! Tiered storage: closed segment files copied to an S3-compatible object
//! store, verified, then removed from the archive's disk; read back on
//! demand into a cache directory and checked against their CRC-32C.
//!
//! An upload goes: the file's MD5 and CRC-32C in one pass; a PUT with
//! Content-MD5 (the store refuses bytes that do not match it); a HEAD that
//! must show the file's length; a line in `tiered.log`, synced; and only then
//! the local file removed. A crash between any two steps leaves the segment
//! on the disk (uploaded again later: a PUT of the same key is harmless) or
//! in the store and the log (the next start removes a local copy left
//! behind). Nothing is removed from the disk that the store does not hold.
//!
//! Reads ask [`Tier::request`] for a segment that is not on the disk: the
//! archive's fetch thread copies it into `tier-cache/`, checks its length
//! and CRC-32C, and renames it into place; a reader without threads (the
//! tool, a Spark executor reading files) fetches it in its own thread.
//! A store that cannot be reached fails the read naming the segment and the
//! store; the next read tries again.

pub mod credentials;
pub mod object_store;
pub mod tier_log;

use crate::crash_point::crash_point;
use credentials::StoreCredentials;
use md5::{Digest, Md5};
use object_store::{ObjectStore, StoreLocation};
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use sulis_concurrent::mapped_file::replace_file;
use tier_log::{sync_dir, TierLog, TieredSegment};

/// The cache of fetched segments, in the archive directory.
pub const CACHE_DIR: &str = "tier-cache";
/// Most bytes a reader's cache ([`reader_cache_dir`]) keeps.
pub const READER_CACHE_SIZE: u64 = 1 << 30;
/// How long a reader waits for the store to connect or answer.
pub const READER_TIMEOUT: Duration = Duration::from_secs(30);

/// Crash points of an upload (`SULIS_ARCHIVE_CRASH_AT`).
pub mod points {
    /// Half the file sent to the store.
    pub const TIER_MID_UPLOAD: &str = "tier-mid-upload";
    /// The store holds the file; nothing verified or logged yet.
    pub const TIER_AFTER_UPLOAD: &str = "tier-after-upload";
    /// `tiered.log` holds the segment; the local file is still there.
    pub const TIER_AFTER_LOG: &str = "tier-after-log";
}

/// What a tiered archive needs to reach its store.
#[derive(Clone, Debug)]
pub struct TierSettings {
    /// The bucket and prefix.
    pub location: StoreLocation,
    /// The credentials (never shown).
    pub credentials: StoreCredentials,
    /// Bounds connecting and each wait for an answer.
    pub timeout: Duration,
    /// Most bytes of fetched segments kept in `tier-cache/`.
    pub cache_size: u64,
    /// Most bytes a second an upload reads and sends (0: no limit).
    pub upload_rate: u64,
}

/// The answer to a request for a segment that is not on the disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetch {
    /// A verified copy is at this path (a segment file's name).
    Ready(PathBuf),
    /// Being fetched: ask again.
    Pending,
    /// The store does not hold it either.
    NotTiered,
    /// The fetch failed, naming the segment and the store.
    Failed(String),
}

/// What the tier's threads did, for the conductor to log and count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierEvent {
    /// A segment is in the store, verified, and gone from the disk.
    Uploaded {
        /// Its recording.
        recording_id: i64,
        /// Its base position.
        base: i64,
        /// Its length.
        bytes: u64,
    },
    /// An upload failed; the segment stays on the disk and is tried again.
    UploadFailed {
        /// Its recording.
        recording_id: i64,
        /// Its base position.
        base: i64,
        /// Why, naming the store.
        why: String,
    },
    /// The store's copy of a segment is deleted.
    Removed {
        /// Its recording.
        recording_id: i64,
        /// Its base position.
        base: i64,
    },
    /// A deletion in the store failed (tried again at the next check).
    RemoveFailed {
        /// Its recording.
        recording_id: i64,
        /// Its base position.
        base: i64,
        /// Why, naming the store.
        why: String,
    },
}

enum Job {
    Upload {
        recording_id: i64,
        base: i64,
        path: PathBuf,
    },
    Remove {
        recording_id: i64,
        base: i64,
    },
}

#[derive(Default)]
struct TierState {
    /// Uploads and removals queued or running, by (recording, base).
    busy: BTreeSet<(i64, i64)>,
    /// Fetches running, and fetches that failed since last asked.
    fetching: BTreeSet<(i64, i64)>,
    failed: HashMap<(i64, i64), String>,
    events: Vec<TierEvent>,
}

/// An archive's object store tier: shared by the conductor (uploads,
/// removals), the replayer and readers of files (fetches).
pub struct Tier {
    /// A reader's tier may have none (no credentials where it runs): its
    /// fetches then fail saying why.
    store: Result<ObjectStore, String>,
    location: StoreLocation,
    archive_dir: PathBuf,
    cache_dir: PathBuf,
    /// Keys are `PREFIX<store id>/<recording>-<base>.rec`: this archive's
    /// id in the store (`tier.id`), so archives may share a bucket.
    store_id: String,
    cache_size: u64,
    /// Most bytes a second an upload reads and sends (0: no limit).
    upload_rate: u64,
    /// Set by [`Tier::close`]: no further upload starts, and a paced one
    /// stops at its next step (its segment stays on the disk).
    closing: AtomicBool,
    /// `None` for a reader's tier (no log to append to: read at open).
    log: Option<Mutex<TierLog>>,
    segments_read: Mutex<tier_log::TieredSegments>,
    state: Mutex<TierState>,
    jobs: Mutex<Option<Sender<Job>>>,
    fetches: Mutex<Option<Sender<(i64, i64)>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tier of {} in {}",
            self.archive_dir.display(),
            self.location.describe()
        )
    }
}

impl Tier {
    /// The archive's tier: checks the bucket, opens `tiered.log`, empties
    /// the cache and starts an upload thread and a fetch thread. A store
    /// that refuses (no such bucket, credentials not taken) is an error; one
    /// that cannot be reached now is not (the archive records on, and its
    /// uploads are tried again): the second value says why it was not checked.
    pub fn start(
        settings: &TierSettings,
        archive_dir: &Path,
    ) -> Result<(Arc<Tier>, Option<String>), String> {
        let store = ObjectStore::new(
            settings.location.clone(),
            &settings.credentials,
            settings.timeout,
        )?;
        let unchecked = match store.check_bucket() {
            Ok(()) => None,
            Err((true, refused)) => return Err(refused),
            Err((false, unreachable)) => Some(unreachable),
        };
        let store_id = store_id(archive_dir)
            .map_err(|e| format!("{}: {e}", archive_dir.join(STORE_ID_FILE).display()))?;
        let log = TierLog::open(archive_dir).map_err(|e| e.to_string())?;
        let cache_dir = archive_dir.join(CACHE_DIR);
        let _ = std::fs::remove_dir_all(&cache_dir);
        std::fs::create_dir_all(&cache_dir).map_err(|e| format!("{}: {e}", cache_dir.display()))?;
        write_store_file(archive_dir, &settings.location)
            .map_err(|e| format!("{}: {e}", archive_dir.join(STORE_FILE).display()))?;
        let tier = Arc::new(Tier {
            store: Ok(store),
            location: settings.location.clone(),
            archive_dir: archive_dir.to_path_buf(),
            cache_dir,
            store_id,
            cache_size: settings.cache_size,
            upload_rate: settings.upload_rate,
            closing: AtomicBool::new(false),
            segments_read: Mutex::new(Default::default()),
            log: Some(Mutex::new(log)),
            state: Mutex::new(TierState::default()),
            jobs: Mutex::new(None),
            fetches: Mutex::new(None),
            threads: Mutex::new(Vec::new()),
        });
        let (jobs, job_rx) = channel::<Job>();
        let (fetches, fetch_rx) = channel::<(i64, i64)>();
        let up = Arc::clone(&tier);
        let down = Arc::clone(&tier);
        let threads = vec![
            std::thread::Builder::new()
                .name("sulis-archive-tier-upload".into())
                .spawn(move || {
                    // Tiering must not slow recording: the upload thread (MD5 and CRC-32C of every
                    // byte, the transfer) yields the CPU to the archive's and the driver's threads.
                    // SAFETY: setpriority on this thread's own id; nothing is shared.
                    unsafe {
                        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
                    }
                    up.run_jobs(job_rx)
                })
                .map_err(|e| e.to_string())?,
            std::thread::Builder::new()
                .name("sulis-archive-tier-fetch".into())
                .spawn(move || down.run_fetches(fetch_rx))
                .map_err(|e| e.to_string())?,
        ];
        *tier.jobs.lock().unwrap() = Some(jobs);
        *tier.fetches.lock().unwrap() = Some(fetches);
        *tier.threads.lock().unwrap() = threads;
        Ok((tier, unchecked))
    }

    /// A reader's tier of the archive in `archive_dir`, for a reader of its
    /// files that runs without it (the tool, a Spark executor in files mode):
    /// `None` if the archive never had a store (no `tier.store`). The store
    /// and region come from `tier.store`, the credentials from where this
    /// process finds them (none: a fetch fails saying so); fetches run in
    /// the caller's thread into `cache_dir`, and `tiered.log` is read again
    /// when a segment is missing from the disk and from what was read.
    pub fn reader_for(
        archive_dir: &Path,
        cache_dir: &Path,
        cache_size: u64,
        timeout: Duration,
    ) -> Result<Option<Arc<Tier>>, String> {
        let Some(location) = read_store_file(archive_dir)? else {
            return Ok(None);
        };
        let store = StoreCredentials::find()
            .map_err(|e| format!("object store {}: {e}", location.describe()))
            .and_then(|c| ObjectStore::new(location.clone(), &c, timeout));
        let segments = tier_log::read_tier_log(archive_dir).map_err(|e| e.to_string())?;
        Ok(Some(Arc::new(Tier {
            store,
            location,
            archive_dir: archive_dir.to_path_buf(),
            cache_dir: cache_dir.to_path_buf(),
            store_id: String::new(),
            cache_size,
            upload_rate: 0,
            closing: AtomicBool::new(false),
            log: None,
            segments_read: Mutex::new(segments),
            state: Mutex::new(TierState::default()),
            jobs: Mutex::new(None),
            fetches: Mutex::new(None),
            threads: Mutex::new(Vec::new()),
        })))
    }

    /// Stops the threads: a running fetch or unpaced upload finishes first,
    /// a paced upload stops at its next step, queued uploads are left.
    pub fn close(&self) {
        // Uploads still queued are left for the next start (its retention
        // checks queue them again): at a paced rate they could take hours.
        self.closing.store(true, Ordering::Release);
        self.jobs.lock().unwrap().take();
        self.fetches.lock().unwrap().take();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap());
        for t in threads {
            let _ = t.join();
        }
    }

    /// The store, as logs name it.
    pub fn describe_store(&self) -> String {
        self.location.describe()
    }

    fn store(&self) -> Result<&ObjectStore, String> {
        self.store.as_ref().map_err(|e| e.clone())
    }

    /// The segment at `base` of `recording_id`, if the store holds it.
    pub fn segment(&self, recording_id: i64, base: i64) -> Option<TieredSegment> {
        match &self.log {
            Some(log) => log.lock().unwrap().get(recording_id, base).cloned(),
            None => self
                .segments_read
                .lock()
                .unwrap()
                .get(&(recording_id, base))
                .cloned(),
        }
    }

    /// Every segment the store holds.
    pub fn segments(&self) -> Vec<TieredSegment> {
        match &self.log {
            Some(log) => log.lock().unwrap().segments().values().cloned().collect(),
            None => self
                .segments_read
                .lock()
                .unwrap()
                .values()
                .cloned()
                .collect(),
        }
    }

    /// What the threads did since last asked.
    pub fn take_events(&self) -> Vec<TierEvent> {
        std::mem::take(&mut self.state.lock().unwrap().events)
    }

    /// Whether an upload or removal of the segment is queued or running.
    pub fn is_busy(&self, recording_id: i64, base: i64) -> bool {
        self.state
            .lock()
            .unwrap()
            .busy
            .contains(&(recording_id, base))
    }

    fn queue(&self, key: (i64, i64), job: Job) -> bool {
        let mut state = self.state.lock().unwrap();
        if !state.busy.insert(key) {
            return false;
        }
        let sent = self
            .jobs
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|j| j.send(job).is_ok());
        if !sent {
            state.busy.remove(&key);
        }
        sent
    }

    /// Queues the upload of a closed segment file; false if one is queued.
    pub fn upload(&self, recording_id: i64, base: i64, path: PathBuf) -> bool {
        self.queue(
            (recording_id, base),
            Job::Upload {
                recording_id,
                base,
                path,
            },
        )
    }

    /// Queues the deletion of the store's copy of a segment.
    pub fn remove(&self, recording_id: i64, base: i64) -> bool {
        self.queue((recording_id, base), Job::Remove { recording_id, base })
    }

    fn cache_path(&self, recording_id: i64, base: i64) -> PathBuf {
        self.cache_dir.join(format!("{recording_id}-{base}.rec"))
    }

    /// Asks for a segment that is not on the disk. The archive's tier
    /// fetches it on its thread (`Pending` until then); a reader's fetches
    /// it now. A failure is said once, and the next request tries again.
    pub fn request(&self, recording_id: i64, base: i64) -> Fetch {
        let key = (recording_id, base);
        let path = self.cache_path(recording_id, base);
        {
            let mut state = self.state.lock().unwrap();
            if let Some(why) = state.failed.remove(&key) {
                return Fetch::Failed(why);
            }
            if state.fetching.contains(&key) {
                return Fetch::Pending;
            }
        }
        if path.exists() {
            return Fetch::Ready(path);
        }
        if self.segment(recording_id, base).is_none() {
            // A reader's copy of the log may predate the segment's move.
            match tier_log::read_tier_log(&self.archive_dir) {
                Ok(now) if self.log.is_none() && now.contains_key(&key) => {
                    *self.segments_read.lock().unwrap() = now;
                }
                _ => return Fetch::NotTiered,
            }
        }
        let sender = self.fetches.lock().unwrap().clone();
        match sender {
            Some(s) => {
                let mut state = self.state.lock().unwrap();
                if state.fetching.insert(key) && s.send(key).is_err() {
                    state.fetching.remove(&key);
                    return Fetch::Failed("the archive is closing".into());
                }
                Fetch::Pending
            }
            None => match self.fetch(recording_id, base) {
                Ok(p) => Fetch::Ready(p),
                Err(e) => Fetch::Failed(e),
            },
        }
    }

    fn run_fetches(&self, rx: Receiver<(i64, i64)>) {
        while let Ok(key) = rx.recv() {
            let result = self.fetch(key.0, key.1);
            let mut state = self.state.lock().unwrap();
            state.fetching.remove(&key);
            if let Err(why) = result {
                state.failed.insert(key, why);
            }
        }
    }

    /// Copies a segment from the store into the cache, verified.
    fn fetch(&self, recording_id: i64, base: i64) -> Result<PathBuf, String> {
        let name = format!("{recording_id}-{base}.rec");
        let Some(segment) = self.segment(recording_id, base) else {
            return Err(format!("segment {name} of recording {recording_id} is neither on the disk nor in the store"));
        };
        let path = self.cache_path(recording_id, base);
        // Readers in several processes may share a cache directory.
        let part = self
            .cache_dir
            .join(format!("{name}.{}.part", std::process::id()));
        std::fs::create_dir_all(&self.cache_dir).map_err(|e| {
            format!(
                "segment {name}: the cache {}: {e}",
                self.cache_dir.display()
            )
        })?;
        let failed = |why: String| {
            let _ = std::fs::remove_file(&part);
            format!(
                "segment {name} of recording {recording_id} (position {base}) could not be read back from {why}"
            )
        };
        let file = File::create(&part)
            .map_err(|e| failed(format!("the store into {}: {e}", part.display())))?;
        let mut out = ChecksummedWriter {
            inner: io::BufWriter::with_capacity(1 << 20, file),
            crc: 0,
            length: 0,
        };
        self.store()
            .and_then(|s| s.get(&segment.key, None, &mut out))
            .map_err(&failed)?;
        out.inner
            .flush()
            .map_err(|e| failed(format!("the store into {}: {e}", part.display())))?;
        if out.length != segment.length || out.crc != segment.crc32c {
            return Err(failed(format!(
                "object store {} key {}: it came back as {} bytes with CRC-32C {:08x}; tiered.log says {} bytes, {:08x}",
                self.describe_store(),
                segment.key,
                out.length,
                out.crc,
                segment.length,
                segment.crc32c
            )));
        }
        std::fs::rename(&part, &path).map_err(|e| failed(format!("the cache: {e}")))?;
        self.evict(&path);
        Ok(path)
    }

    /// Keeps the cache within its size: the least recently fetched files
    /// go first (a reader that has one open reads on).
    fn evict(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.cache_dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                let p = e.path();
                if p.extension().is_none_or(|x| x != "rec") || p == keep {
                    return None;
                }
                Some((m.modified().ok()?, m.len(), p))
            })
            .collect();
        let mut total: u64 =
            files.iter().map(|f| f.1).sum::<u64>() + std::fs::metadata(keep).map_or(0, |m| m.len());
        files.sort();
        for (_, len, p) in files {
            if total <= self.cache_size {
                break;
            }
            if std::fs::remove_file(&p).is_ok() {
                total = total.saturating_sub(len);
            }
        }
    }

    fn run_jobs(&self, rx: Receiver<Job>) {
        while let Ok(job) = rx.recv() {
            if self.closing.load(Ordering::Acquire) {
                break;
            }
            let (key, event) = match job {
                Job::Upload {
                    recording_id,
                    base,
                    path,
                } => (
                    (recording_id, base),
                    match self.upload_now(recording_id, base, &path) {
                        Ok(Some(bytes)) => Some(TierEvent::Uploaded {
                            recording_id,
                            base,
                            bytes,
                        }),
                        Ok(None) => None,
                        Err(why) => Some(TierEvent::UploadFailed {
                            recording_id,
                            base,
                            why,
                        }),
                    },
                ),
                Job::Remove { recording_id, base } => (
                    (recording_id, base),
                    Some(match self.remove_now(recording_id, base) {
                        Ok(()) => TierEvent::Removed { recording_id, base },
                        Err(why) => TierEvent::RemoveFailed {
                            recording_id,
                            base,
                            why,
                        },
                    }),
                ),
            };
            let mut state = self.state.lock().unwrap();
            state.busy.remove(&key);
            state.events.extend(event);
        }
    }

    /// Uploads, verifies, logs, then removes the local file: the bytes
    /// uploaded, or `None` if the file was gone (retention took it).
    fn upload_now(&self, recording_id: i64, base: i64, path: &Path) -> Result<Option<u64>, String> {
        let log = self.log.as_ref().ok_or("a reader's tier does not upload")?;
        let name = format!("{recording_id}-{base}.rec");
        let failed = |why: String| {
            format!("segment {name} of recording {recording_id}: {why}: kept on the disk")
        };
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(failed(format!("{}: {e}", path.display()))),
        };
        let before = file.metadata().map_err(|e| failed(e.to_string()))?;
        let length = before.len();
        let (md5, crc) = digest(&file, length, self.upload_rate, &self.closing)
            .map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
        let md5_hex: String = md5.iter().map(|b| format!("{b:02x}")).collect();
        let key = self.location.prefix.clone() + &format!("{}/{name}", self.store_id);
        let mut body = CrashingReader {
            file: &file,
            at: 0,
            half: length / 2,
            rate: self.upload_rate,
            started: Instant::now(),
            closing: &self.closing,
        };
        use base64::Engine;
        let md5_b64 = base64::engine::general_purpose::STANDARD.encode(md5);
        let store = self.store().map_err(&failed)?;
        store
            .put(&key, &mut body, length, &md5_b64)
            .map_err(&failed)?;
        crash_point(points::TIER_AFTER_UPLOAD);
        let info = store.head(&key).map_err(&failed)?.ok_or_else(|| {
            failed(format!(
                "object store {}: {key} is not there right after it was stored",
                self.describe_store()
            ))
        })?;
        if info.length != length {
            return Err(failed(format!(
                "object store {} holds {} bytes as {key}; the file has {length}",
                self.describe_store(),
                info.length
            )));
        }
        // The file must not have changed while it was sent.
        let after = std::fs::metadata(path).map_err(|e| failed(e.to_string()))?;
        if after.len() != before.len() || after.modified().ok() != before.modified().ok() {
            return Err(failed("the file changed while it was uploaded".into()));
        }
        let written_ms = crate::retention::written_ms(path).unwrap_or(0);
        log.lock()
            .unwrap()
            .add(TieredSegment {
                recording_id,
                base,
                length,
                written_ms,
                crc32c: crc,
                md5: md5_hex,
                key,
            })
            .map_err(|e| failed(format!("tiered.log: {e}")))?;
        crash_point(points::TIER_AFTER_LOG);
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(format!(
                    "segment {name}: in the store, but {} could not be removed: {e}",
                    path.display()
                ))
            }
        }
        let _ = sync_dir(&self.archive_dir);
        Ok(Some(length))
    }

    /// Deletes the store's copy of a segment, then its line in the log.
    fn remove_now(&self, recording_id: i64, base: i64) -> Result<(), String> {
        let log = self.log.as_ref().ok_or("a reader's tier does not remove")?;
        let Some(segment) = self.segment(recording_id, base) else {
            return Ok(());
        };
        self.store()?.delete(&segment.key)?;
        log.lock()
            .unwrap()
            .remove(recording_id, base)
            .map_err(|e| format!("tiered.log: {e}"))
    }

    /// Local copies of segments the store holds (an upload that crashed
    /// after its log line): removed now, as the upload would have, if the
    /// file is as it was uploaded (its length and modification time).
    pub fn finish_interrupted_uploads(&self) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        for s in self.segments() {
            let path = self
                .archive_dir
                .join(format!("{}-{}.rec", s.recording_id, s.base));
            let same = std::fs::metadata(&path).is_ok_and(|m| m.len() == s.length)
                && crate::retention::written_ms(&path) == Some(s.written_ms);
            if same && std::fs::remove_file(&path).is_ok() {
                removed.push(path);
            }
        }
        if !removed.is_empty() {
            let _ = sync_dir(&self.archive_dir);
        }
        removed
    }
}

/// The file in the archive directory that names its store (no
/// credentials): `store=URL` and `region=R` lines, for readers of its files.
pub const STORE_FILE: &str = "tier.store";

fn write_store_file(archive_dir: &Path, location: &StoreLocation) -> io::Result<()> {
    let text = format!(
        "store={}/{}/{}\nregion={}\n",
        location.endpoint, location.bucket, location.prefix, location.region
    );
    let path = archive_dir.join(STORE_FILE);
    if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
        return Ok(());
    }
    replace_file(&path, text.as_bytes())
}

/// The store `tier.store` names, if there is one.
pub fn read_store_file(archive_dir: &Path) -> Result<Option<StoreLocation>, String> {
    let path = archive_dir.join(STORE_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let value = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .map(str::trim)
    };
    let store = value("store").ok_or_else(|| format!("{}: no store= line", path.display()))?;
    StoreLocation::parse(store, value("region").unwrap_or("us-east-1"))
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Where a reader of the archive in `archive_dir` keeps the segments it
/// fetched: a directory of the user's under the temporary directory, one
/// per archive (its store id), shared by the processes that read it.
pub fn reader_cache_dir(archive_dir: &Path) -> PathBuf {
    let id = std::fs::read_to_string(archive_dir.join(STORE_ID_FILE))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir()
        .join(format!("sulis-tier-cache-{uid}"))
        .join(if id.is_empty() { "unknown".into() } else { id })
}

/// The file in the archive directory that holds its id in the store.
pub const STORE_ID_FILE: &str = "tier.id";

/// This archive's id in the store: 16 random hex digits, made at its first
/// tiered start and kept in `tier.id` (a restart must find its keys again,
/// and two archives must never write the same key).
fn store_id(archive_dir: &Path) -> io::Result<String> {
    let path = archive_dir.join(STORE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut bytes = [0u8; 8];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    replace_file(&path, format!("{id}\n").as_bytes())?;
    Ok(id)
}

/// MD5 and CRC-32C of a file's first `length` bytes, in one pass, read
/// at most `rate` bytes a second (0: no limit).
fn digest(
    file: &File,
    length: u64,
    rate: u64,
    closing: &AtomicBool,
) -> io::Result<([u8; 16], u32)> {
    let mut md5 = Md5::new();
    let mut crc = 0u32;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    let started = Instant::now();
    while at < length {
        paced_step(at, rate, started, closing)?;
        let n = paced_len(rate, buf.len()).min((length - at) as usize);
        file.read_exact_at(&mut buf[..n], at)?;
        md5.update(&buf[..n]);
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        at += n as u64;
    }
    let mut out = [0u8; 16];
    out.copy_from_slice(&md5.finalize());
    Ok((out, crc))
}

/// Reads a file from its start for a PUT, at most `rate` bytes a second
/// (0: no limit); aborts the process half-way when the `tier-mid-upload`
/// crash point is armed.
struct CrashingReader<'a> {
    file: &'a File,
    at: u64,
    half: u64,
    rate: u64,
    started: Instant,
    closing: &'a AtomicBool,
}

/// Waits until a paced transfer that has moved `at` bytes may go on, in
/// steps of at most 100 ms; fails once the tier is closing (a paced upload
/// must not hold up the archive's close).
fn paced_step(at: u64, rate: u64, started: Instant, closing: &AtomicBool) -> io::Result<()> {
    loop {
        let wait = pace_wait(at, rate, started.elapsed());
        if rate > 0 && closing.load(Ordering::Acquire) {
            return Err(io::Error::other("the archive is closing"));
        }
        if wait.is_zero() {
            return Ok(());
        }
        std::thread::sleep(wait.min(Duration::from_millis(100)));
    }
}

/// At most `room` bytes, and paced (`rate` above 0) a tenth of a second's
/// bytes at most: a paced transfer goes smoothly, not in bursts.
fn paced_len(rate: u64, room: usize) -> usize {
    if rate == 0 {
        room
    } else {
        room.min((rate / 10).max(4096) as usize)
    }
}

/// How long a paced upload that sent `sent` bytes `elapsed` after it began
/// waits before it sends more, to stay at `rate` bytes a second (0: never).
fn pace_wait(sent: u64, rate: u64, elapsed: Duration) -> Duration {
    if rate == 0 {
        return Duration::ZERO;
    }
    let due = Duration::from_secs_f64(sent as f64 / rate as f64);
    due.saturating_sub(elapsed)
}

impl Read for CrashingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at >= self.half && self.half > 0 {
            crash_point(points::TIER_MID_UPLOAD);
        }
        // A read never runs past the half-way mark, so the crash point is met there.
        let room = if self.at < self.half {
            buf.len().min((self.half - self.at) as usize)
        } else {
            buf.len()
        };
        let room = paced_len(self.rate, room);
        paced_step(self.at, self.rate, self.started, self.closing)?;
        let n = self.file.read_at(&mut buf[..room], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Counts and checksums what passes through it.
struct ChecksummedWriter<W: Write> {
    inner: W,
    crc: u32,
    length: u64,
}

impl<W: Write> Write for ChecksummedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.length += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_pace_an_upload_to_its_rate_and_not_at_all_without_one() {
        let ms = Duration::from_millis;
        assert_eq!(pace_wait(10 << 20, 0, ms(0)), Duration::ZERO);
        // 10 MB/s: 1 MB sent is due at 100 ms.
        assert_eq!(pace_wait(1_000_000, 10_000_000, ms(40)), ms(60));
        assert_eq!(pace_wait(1_000_000, 10_000_000, ms(100)), Duration::ZERO);
        // Behind (the store was slow): no wait until the upload's average is back at the rate.
        assert_eq!(pace_wait(1_000_000, 10_000_000, ms(500)), Duration::ZERO);
        assert_eq!(pace_wait(0, 10_000_000, ms(0)), Duration::ZERO);
    }

    #[test]
    fn should_stop_a_paced_transfer_once_the_tier_closes_and_never_an_unpaced_one() {
        let closing = AtomicBool::new(false);
        let started = Instant::now();
        assert!(paced_step(0, 1 << 20, started, &closing).is_ok());
        closing.store(true, Ordering::Release);
        let e = paced_step(0, 1 << 20, started, &closing).unwrap_err();
        assert_eq!(e.to_string(), "the archive is closing");
        // Unpaced, what is under way finishes: a close waits for at most that one upload.
        assert!(paced_step(1 << 30, 0, started, &closing).is_ok());
    }
}
