//! The publications both sinks write through, kept per process and target
//! for the process' life (closing the last one of a stream ends its
//! session, and the archive would start another recording for the next
//! task), the waits on a refused offer, and why a write failed
//! ([`SinkFailure`]). Below the writer ([`crate::sink_publisher`]) and the
//! exactly-once targets ([`crate::exactly_once_target`]), which both use it.

use crate::archive_session::connect_client;
use crate::ArchiveAddress;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use sulis_client::{Client, ExclusivePublication, OfferError, Publication};

/// Why a write failed: the class both sinks raise, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkFailure {
    Option(String),
    Row(String),
    Sink(String),
    Timeout(String),
    NoDriver(String),
}

impl SinkFailure {
    pub fn named(self) -> (&'static str, String) {
        match self {
            SinkFailure::Option(t) => ("OptionError", t),
            SinkFailure::Row(t) => ("RowError", t),
            SinkFailure::Sink(t) => ("SinkError", t),
            SinkFailure::Timeout(t) => ("SinkTimeoutError", t),
            SinkFailure::NoDriver(t) => ("NoMediaDriverError", t),
        }
    }
}

/// The name of a refused offer (`sulis.OfferResult`'s).
pub fn offer_result_name(e: &OfferError) -> String {
    match e {
        OfferError::NotConnected => "NOT_CONNECTED".into(),
        OfferError::BackPressured => "BACK_PRESSURED".into(),
        OfferError::AdminAction => "ADMIN_ACTION".into(),
        OfferError::Closed => "CLOSED".into(),
        OfferError::MaxPositionExceeded => "MAX_POSITION_EXCEEDED".into(),
        OfferError::MessageTooLong { length, max } => {
            format!("a message of {length} bytes, longer than the stream's maximum of {max}")
        }
        OfferError::Client(e) => format!("the client failed: {e}"),
        OfferError::StorageFull(e) => format!("no room for the log's pages: {e}"),
    }
}

/// A publication that can take no more (closed, at its maximum position).
pub fn publication_ended(channel: &str, stream_id: i32, result: &str) -> String {
    format!("sulis sink: publication on {channel} stream {stream_id}: {result}")
}

/// Offers refused for the whole message timeout (`result`: the last
/// refusal's name).
pub fn refused(channel: &str, stream_id: i32, timeout_s: f64, result: &str) -> String {
    let why = if result == "NOT_CONNECTED" {
        format!(
            " (nobody subscribes: is the stream being recorded? ArchiveClient.start_recording({}, {stream_id}))",
            crate::option_values::repr(channel)
        )
    } else {
        String::new()
    };
    format!("sulis sink: {channel} stream {stream_id} refused offers for {timeout_s:.0}s: {result}{why}")
}

type Key = (String, String, i32);

struct Shared {
    /// Clients by driver directory (kept while the process lives).
    clients: HashMap<String, Arc<Client>>,
    publications: HashMap<Key, Arc<Publication>>,
    /// Exclusive publications no task holds now.
    exclusive: HashMap<Key, Vec<ExclusivePublication>>,
}

static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

fn with_shared<T>(f: impl FnOnce(&mut Shared) -> T) -> T {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    f(shared.get_or_insert_with(|| Shared {
        clients: HashMap::new(),
        publications: HashMap::new(),
        exclusive: HashMap::new(),
    }))
}

fn key(address: &ArchiveAddress, channel: &str, stream_id: i32) -> Key {
    (
        address.driver_dir.clone().unwrap_or_default(),
        channel.to_string(),
        stream_id,
    )
}

fn client(shared: &mut Shared, address: &ArchiveAddress) -> Result<Arc<Client>, SinkFailure> {
    let dir = address.driver_dir.clone().unwrap_or_default();
    if let Some(c) = shared.clients.get(&dir).filter(|c| c.check().is_ok()) {
        return Ok(c.clone());
    }
    let c = connect_client(address)
        .map(Arc::new)
        .map_err(|e| SinkFailure::NoDriver(e.named().1))?;
    shared.clients.insert(dir, c.clone());
    Ok(c)
}

fn cannot_publish(channel: &str, stream_id: i32, e: impl std::fmt::Display) -> SinkFailure {
    SinkFailure::Sink(format!(
        "sulis sink: cannot publish on channel {} stream {stream_id}: {e}",
        crate::option_values::repr(channel)
    ))
}

/// This process' shared publication on `channel`/`stream_id`.
pub fn shared_publication(
    address: &ArchiveAddress,
    channel: &str,
    stream_id: i32,
) -> Result<Arc<Publication>, SinkFailure> {
    with_shared(|shared| {
        let k = key(address, channel, stream_id);
        if let Some(p) = shared.publications.get(&k).filter(|p| !p.is_closed()) {
            return Ok(p.clone());
        }
        let p = client(shared, address)?
            .add_publication(channel, stream_id)
            .map(Arc::new)
            .map_err(|e| cannot_publish(channel, stream_id, e))?;
        shared.publications.insert(k, p.clone());
        Ok(p)
    })
}

/// An exclusive publication on `channel`/`stream_id` for one task: one no
/// task holds now, else a new one (its own session).
pub fn take_exclusive(
    address: &ArchiveAddress,
    channel: &str,
    stream_id: i32,
) -> Result<ExclusivePublication, SinkFailure> {
    with_shared(|shared| {
        let k = key(address, channel, stream_id);
        let free = shared.exclusive.entry(k).or_default();
        while let Some(p) = free.pop() {
            if !p.is_closed() {
                return Ok(p);
            }
        }
        client(shared, address)?
            .add_exclusive_publication(channel, stream_id)
            .map_err(|e| cannot_publish(channel, stream_id, e))
    })
}

/// A task's exclusive publication back, for the process' next task.
pub fn give_back_exclusive(
    address: &ArchiveAddress,
    channel: &str,
    stream_id: i32,
    p: ExclusivePublication,
) {
    if !p.is_closed() {
        with_shared(|shared| {
            shared
                .exclusive
                .entry(key(address, channel, stream_id))
                .or_default()
                .push(p)
        });
    }
}

/// After a refused offer: fails where the publication can take no more or
/// offers were refused since `since` for the message timeout, else waits a
/// little.
pub fn wait_refused(
    e: &OfferError,
    channel: &str,
    stream_id: i32,
    since: Instant,
    timeout_s: f64,
) -> Result<(), SinkFailure> {
    match e {
        OfferError::Closed
        | OfferError::MaxPositionExceeded
        | OfferError::MessageTooLong { .. }
        | OfferError::Client(_) => {
            return Err(SinkFailure::Sink(publication_ended(
                channel,
                stream_id,
                &offer_result_name(e),
            )))
        }
        _ => {}
    }
    if since.elapsed().as_secs_f64() > timeout_s {
        return Err(SinkFailure::Timeout(refused(
            channel,
            stream_id,
            timeout_s,
            &offer_result_name(e),
        )));
    }
    if crate::interrupt::interrupted() {
        return Err(SinkFailure::Sink(crate::interrupt::text(&format!(
            "{channel} stream {stream_id} to take the rows"
        ))));
    }
    std::thread::sleep(if matches!(e, OfferError::NotConnected) {
        Duration::from_millis(5)
    } else {
        Duration::from_micros(100)
    });
    Ok(())
}
