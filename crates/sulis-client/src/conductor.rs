//! The client conductor: connects to a driver through its CnC file, sends
//! commands, waits for their responses, keeps the client alive and tracks the
//! images of every subscription.
//!
//! A Rust thread does the housekeeping (driver events, heartbeat, driver
//! liveness) and never runs user code, so a slow callback cannot get the
//! client timed out. Image events for user callbacks are queued for whoever
//! consumes [`Client::take_image_events`].
//!
//! A client that falls more than the broadcast buffer behind the driver
//! (lapped: the driver answered a flood of commands from others faster than
//! this client read) does not die. It re-synchronises: requests waiting when
//! it happened whose answers may be lost fail (an add is undone, so nothing
//! stays registered in the driver behind the caller's back), and the images
//! of its subscriptions are reconciled with the driver's subscriber-position
//! counters, raising the image events it missed.

use crate::driver_proxy::{ClientCalls, Destination, DriverProxy, Resource};
use crate::image::Image;
use crate::publication::{ExclusivePublication, Publication};
use crate::subscription::{Subscription, SubscriptionShared};
use crate::ClientError;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use sulis_concurrent::broadcast::{BroadcastReceiver, CopyBroadcastReceiver};
use sulis_concurrent::cnc::{epoch_ms, Cnc};
use sulis_concurrent::counters::{CounterRef, CountersReader, RECORD_ALLOCATED};
use sulis_concurrent::logbuffer::LogBuffers;
use sulis_concurrent::mpsc_ring_buffer::ManyToOneRingBuffer;
use sulis_protocol::cnc_descriptor::CNC_FILE;
use sulis_protocol::control::{error_code, Command, Event};
use sulis_protocol::counters::type_id;
use sulis_protocol::driver_dir;
use sulis_protocol::uri::ChannelUri;

/// Counter type id of client heartbeats.
const CLIENT_HEARTBEAT_TYPE_ID: i32 = type_id::CLIENT_HEARTBEAT;
/// Heartbeat period (shorter when the driver's client liveness timeout is short).
const KEEPALIVE_INTERVAL_MS: i64 = 500;
/// How often the housekeeping thread wakes while a command awaits its response.
const CONDUCTOR_BUSY_PERIOD: Duration = Duration::from_micros(200);
/// How often it wakes otherwise: few wake-ups keep it off busy cores.
const CONDUCTOR_IDLE_PERIOD: Duration = Duration::from_millis(10);

/// A check that blocking calls make every [`INTERRUPT_CHECK_PERIOD`] while
/// they wait (for the driver, for an answer, for room in the command
/// buffer): when it returns true the wait ends with
/// [`ClientError::Interrupted`]. The Python binding checks for signals
/// (Ctrl-C) here.
#[derive(Clone)]
pub struct Interrupt(pub Arc<dyn Fn() -> bool + Send + Sync>);

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interrupt(..)")
    }
}

/// How often a waiting call runs the interrupt check.
pub const INTERRUPT_CHECK_PERIOD: Duration = Duration::from_millis(20);

/// Client configuration.
#[derive(Clone, Debug)]
pub struct ClientContext {
    /// Driver directory.
    pub dir: PathBuf,
    /// The driver is declared dead when its heartbeat is older than this;
    /// also the longest a command waits for its response.
    pub driver_timeout: Duration,
    /// Name shown in the label of the client's heartbeat counter
    /// (`client-heartbeat: id=<client id> name=<name>`, as in Aeron), so
    /// that `sulis stat` tells clients apart; empty: no name.
    pub name: String,
    /// Checked while blocking calls wait (see [`Interrupt`]).
    pub interrupt: Option<Interrupt>,
}

impl Default for ClientContext {
    fn default() -> Self {
        ClientContext {
            dir: sulis_default_dir(),
            driver_timeout: Duration::from_secs(10),
            name: String::new(),
            interrupt: None,
        }
    }
}

/// Longest client name (Aeron's limit): it must fit in the heartbeat
/// counter's label after `client-heartbeat: id=<client id> name=`.
pub const MAX_CLIENT_NAME_LENGTH: usize = 100;

/// Refuses a client name too long for the label or with control characters.
fn check_name(name: &str) -> Result<(), ClientError> {
    if name.len() > MAX_CLIENT_NAME_LENGTH {
        return Err(ClientError::Config(format!(
            "name={name:?}: {} bytes, the longest client name is {MAX_CLIENT_NAME_LENGTH}",
            name.len()
        )));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(ClientError::Config(format!(
            "name={name:?}: contains the control character {c:?}"
        )));
    }
    Ok(())
}

/// Default driver directory (`$SULIS_DIR`, else `sulis-$USER` in `/dev/shm`
/// or the temporary directory; see `sulis_protocol::driver_dir`).
pub fn sulis_default_dir() -> PathBuf {
    driver_dir::default_dir()
}

/// An image came or went.
#[derive(Clone, Debug)]
pub enum ImageEvent {
    /// A publisher's image joined a subscription.
    Available {
        /// Subscription registration id.
        subscription_id: i64,
        /// The image.
        image: Arc<Image>,
    },
    /// An image left a subscription.
    Unavailable {
        /// Subscription registration id.
        subscription_id: i64,
        /// The image.
        image: Arc<Image>,
    },
}

struct State {
    /// Correlation ids of the requests waiting for an answer.
    awaiting: HashSet<i64>,
    /// Answers to those (answers to other clients' requests are not kept).
    responses: HashMap<i64, Event>,
    /// Times this client was lapped by the driver's broadcast and re-synchronised.
    laps: u64,
    subscriptions: HashMap<i64, Arc<SubscriptionShared>>,
    image_events: Vec<ImageEvent>,
    heartbeat: Option<CounterRef>,
    failure: Option<ClientError>,
}

pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    cnc: Cnc,
    to_driver: ManyToOneRingBuffer,
    pub(crate) counters: CountersReader,
    client_id: i64,
    /// Appended to the heartbeat counter's label (see [`ClientContext::name`]).
    name: String,
    driver_timeout: Duration,
    interrupt: Option<Interrupt>,
    /// When [`Client::check_interrupt`] may run the check again.
    next_interrupt_check: Mutex<Instant>,
    state: Mutex<State>,
    cond: Condvar,
    /// Set once the client is unusable (closed, timed out, driver gone): checked on hot paths.
    failed: Arc<AtomicBool>,
    running: AtomicBool,
    /// Commands awaiting a response: the housekeeping thread polls faster meanwhile.
    pending: std::sync::atomic::AtomicUsize,
    conductor_thread: Mutex<Option<std::thread::Thread>>,
}

impl Inner {
    pub(crate) fn failure(&self) -> ClientError {
        self.state
            .lock()
            .unwrap()
            .failure
            .clone()
            .unwrap_or(ClientError::Closed("client is closed".into()))
    }

    fn fail(&self, e: ClientError) {
        let mut s = self.state.lock().unwrap();
        if s.failure.is_none() {
            s.failure = Some(e);
        }
        self.failed.store(true, Ordering::Release);
        for sub in s.subscriptions.values() {
            sub.mark_closed();
        }
        drop(s);
        self.cond.notify_all();
    }

    /// Runs the interrupt check, if any: `Err(Interrupted)` when it fired.
    fn check_interrupt(&self, what: &str) -> Result<(), ClientError> {
        match &self.interrupt {
            Some(i) if (i.0)() => Err(ClientError::Interrupted(format!(
                "interrupted while {what}"
            ))),
            _ => Ok(()),
        }
    }

    pub(crate) fn check(&self) -> Result<(), ClientError> {
        if self.failed.load(Ordering::Acquire) {
            Err(self.failure())
        } else {
            Ok(())
        }
    }

    fn send(&self, cmd: &Command) -> Result<(), ClientError> {
        self.check()?;
        let (t, body) = cmd.encode();
        let deadline = Instant::now() + self.driver_timeout;
        loop {
            match self.to_driver.write(t, &body) {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    self.check_interrupt("waiting for room in the driver's command buffer")?;
                    if Instant::now() > deadline {
                        let e = ClientError::DriverTimeout(format!(
                            "command buffer of the driver in {} stayed full for {:?}",
                            self.dir.display(),
                            self.driver_timeout
                        ));
                        self.fail(e.clone());
                        return Err(e);
                    }
                    std::thread::yield_now();
                }
                Err(e) => return Err(ClientError::Config(format!("command rejected: {e}"))),
            }
        }
    }

    pub(crate) fn next_correlation_id(&self) -> i64 {
        self.to_driver.next_correlation_id()
    }

    /// Sends a command and waits for the event answering `correlation_id`.
    pub(crate) fn request(&self, correlation_id: i64, cmd: &Command) -> Result<Event, ClientError> {
        self.pending.fetch_add(1, Ordering::AcqRel);
        let laps_at_send = {
            let mut s = self.state.lock().unwrap();
            s.awaiting.insert(correlation_id);
            s.laps
        };
        let r = self.request_inner(correlation_id, cmd, laps_at_send);
        {
            let mut s = self.state.lock().unwrap();
            s.awaiting.remove(&correlation_id);
            s.responses.remove(&correlation_id);
        }
        self.pending.fetch_sub(1, Ordering::AcqRel);
        r
    }

    fn request_inner(
        &self,
        correlation_id: i64,
        cmd: &Command,
        laps_at_send: u64,
    ) -> Result<Event, ClientError> {
        self.send(cmd)?;
        if let Some(t) = self.conductor_thread.lock().unwrap().as_ref() {
            t.unpark();
        }
        let deadline = Instant::now() + self.driver_timeout;
        let mut s = self.state.lock().unwrap();
        loop {
            if let Some(ev) = s.responses.remove(&correlation_id) {
                return match ev {
                    Event::Error { code, message, .. } => {
                        Err(ClientError::Registration { code, message })
                    }
                    other => Ok(other),
                };
            }
            if let Some(f) = &s.failure {
                return Err(f.clone());
            }
            if s.laps != laps_at_send {
                drop(s);
                return self.on_lost_answer(correlation_id, cmd);
            }
            if self.interrupt.is_some() {
                drop(s);
                if let Err(e) = self.check_interrupt("waiting for the media driver's answer") {
                    // Nothing stays half-registered: an add is undone.
                    let _ = self.undo(correlation_id, cmd);
                    return Err(e);
                }
                s = self.state.lock().unwrap();
                if s.responses.contains_key(&correlation_id) {
                    continue;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                drop(s);
                // A driver silent for the whole driver timeout is as good as
                // dead: fail the client so every later call says so at once.
                let e = self.driver_alive().err().unwrap_or_else(|| {
                    ClientError::DriverTimeout(format!(
                        "no response from the media driver in {} within {:?}",
                        self.dir.display(),
                        self.driver_timeout
                    ))
                });
                self.fail(e.clone());
                return Err(e);
            }
            let slice = if self.interrupt.is_some() {
                (deadline - now).min(INTERRUPT_CHECK_PERIOD)
            } else {
                deadline - now
            };
            s = self.cond.wait_timeout(s, slice).unwrap().0;
        }
    }

    /// The answer to `cmd` may have been overwritten before this client read
    /// it (it was lapped). A remove has been sent and the caller forgets the
    /// resource either way, so it counts as done; an add fails, and is undone
    /// in case the driver did carry it out (the driver takes commands in
    /// order, so the undo comes after it).
    fn on_lost_answer(&self, correlation_id: i64, cmd: &Command) -> Result<Event, ClientError> {
        if let Ok(done) = self.undo(correlation_id, cmd) {
            return Ok(done);
        }
        Err(ClientError::Registration {
            code: error_code::GENERIC_ERROR,
            message: format!(
                "the media driver's answer to command {correlation_id} was lost: this client fell \
                 behind the driver's event broadcast (lapped) and re-synchronised; the command \
                 was undone, try it again"
            ),
        })
    }

    /// Gives up on the answer to `cmd`: a remove counts as done (`Ok`), an
    /// add is undone with the matching remove (`Err`).
    fn undo(&self, correlation_id: i64, cmd: &Command) -> Result<Event, ClientError> {
        let client_id = self.client_id;
        let undo = match cmd {
            Command::RemovePublication { .. }
            | Command::RemoveSubscription { .. }
            | Command::RemoveCounter { .. }
            | Command::RemoveDestination { .. }
            | Command::RemoveDestinationById { .. } => {
                return Ok(Event::OperationSuccess { correlation_id })
            }
            Command::AddDestination {
                registration_id,
                receive: false,
                ..
            } => Some(Command::RemoveDestinationById {
                client_id,
                correlation_id: self.next_correlation_id(),
                registration_id: *registration_id,
                destination_registration_id: correlation_id,
            }),
            Command::AddDestination {
                registration_id,
                channel,
                receive: true,
                ..
            } => Some(Command::RemoveDestination {
                client_id,
                correlation_id: self.next_correlation_id(),
                registration_id: *registration_id,
                channel: channel.clone(),
                receive: true,
            }),
            Command::AddPublication { .. } => Some(Command::RemovePublication {
                client_id,
                correlation_id: self.next_correlation_id(),
                registration_id: correlation_id,
            }),
            Command::AddSubscription { .. } => Some(Command::RemoveSubscription {
                client_id,
                correlation_id: self.next_correlation_id(),
                registration_id: correlation_id,
            }),
            Command::AddCounter { .. } => Some(Command::RemoveCounter {
                client_id,
                correlation_id: self.next_correlation_id(),
                registration_id: correlation_id,
            }),
            _ => None,
        };
        if let Some(undo) = undo {
            self.send_quietly(&undo);
        }
        Err(ClientError::Closed(format!(
            "command {correlation_id} undone"
        )))
    }

    /// Re-synchronises after being lapped: requests waiting now fail (see
    /// [`on_lost_answer`](Self::on_lost_answer)), and the images of every
    /// subscription are reconciled with the subscriber-position counters the
    /// driver keeps for this client: an image whose counter is gone is
    /// withdrawn, a counter without an image becomes one (its log file is at
    /// the place the driver directory's layout gives), each with the image
    /// event the client missed.
    fn on_lapped(&self) {
        let mut s = self.state.lock().unwrap();
        s.laps += 1;
        let subs: Vec<(i64, Arc<SubscriptionShared>)> = s
            .subscriptions
            .iter()
            .map(|(id, sub)| (*id, sub.clone()))
            .collect();
        // (subscription id, image correlation id) -> subscriber position counter id
        let mut live: HashMap<(i64, i64), i32> = HashMap::new();
        let counters = &self.counters;
        counters.for_each(|id, t, _key, _label| {
            if t == type_id::SUBSCRIBER_POSITION && counters.counter_owner_id(id) == self.client_id
            {
                live.insert(
                    (
                        counters.counter_registration_id(id),
                        counters.counter_reference_id(id),
                    ),
                    id,
                );
            }
        });
        for (sub_id, sub) in subs {
            let held = sub.images();
            for image in &held {
                if !live.contains_key(&(sub_id, image.correlation_id())) {
                    if let Some(image) = sub.remove_image(image.correlation_id()) {
                        s.image_events.push(ImageEvent::Unavailable {
                            subscription_id: sub_id,
                            image,
                        });
                    }
                }
            }
            for (&(sid, image_id), &counter_id) in live.iter() {
                if sid != sub_id || held.iter().any(|i| i.correlation_id() == image_id) {
                    continue;
                }
                let Some(key) = sulis_protocol::counters::parse_stream_counter_key(
                    counters.counter_key(counter_id),
                ) else {
                    continue;
                };
                let (path, source) = {
                    let ipc = driver_dir::publication_log_file(&self.dir, image_id);
                    if ipc.exists() {
                        (ipc, "aeron:ipc".to_string())
                    } else {
                        (
                            driver_dir::image_log_file(&self.dir, image_id),
                            String::new(),
                        )
                    }
                };
                let Ok(logs) = LogBuffers::map_existing(&path) else {
                    continue; // freed meanwhile: nothing to join
                };
                let image = Arc::new(Image::new(
                    image_id,
                    key.session_id,
                    key.stream_id,
                    sub_id,
                    Arc::new(logs),
                    counters.counter_ref(counter_id),
                    source,
                ));
                sub.add_image(image.clone());
                s.image_events.push(ImageEvent::Available {
                    subscription_id: sub_id,
                    image,
                });
            }
        }
        drop(s);
        self.cond.notify_all();
    }

    /// Takes counter `id` as this client's heartbeat and stamps it; the
    /// first time, appends the client's name to its label (as Aeron's client
    /// does), where `sulis stat` shows it.
    fn adopt_heartbeat(&self, s: &mut State, id: i32, now_ms: i64) {
        let r = self.counters.counter_ref(id);
        r.set_ordered(now_ms);
        if s.heartbeat.is_none() && !self.name.is_empty() {
            self.counters
                .append_to_label(id, &format!(" name={}", self.name));
        }
        s.heartbeat = Some(r);
    }

    /// Sends a command without waiting (used on close paths).
    pub(crate) fn send_quietly(&self, cmd: &Command) {
        let _ = self.send(cmd);
    }

    fn on_event(&self, type_id: i32, body: &[u8]) {
        let ev = match Event::decode(type_id, body) {
            Ok(e) => e,
            Err(_) => return, // events for newer clients or corrupt: not ours to act on
        };
        let mut s = self.state.lock().unwrap();
        match ev {
            Event::AvailableImage {
                correlation_id,
                session_id,
                stream_id,
                subscription_registration_id,
                subscriber_position_id,
                ref log_file,
                ref source_identity,
            } => {
                let Some(sub) = s.subscriptions.get(&subscription_registration_id).cloned() else {
                    return;
                };
                // Heard late (this client was stopped or busy): the driver
                // may have withdrawn the image and freed its position
                // counter already; joining it would read the log from 0.
                // Its UnavailableImage follows.
                let c = &self.counters;
                if !c.is_valid_id(subscriber_position_id)
                    || c.counter_state(subscriber_position_id) != RECORD_ALLOCATED
                    || c.counter_registration_id(subscriber_position_id)
                        != subscription_registration_id
                {
                    return;
                }
                match LogBuffers::map_existing(Path::new(log_file)) {
                    Ok(logs) => {
                        let position = self.counters.counter_ref(subscriber_position_id);
                        let image = Arc::new(Image::new(
                            correlation_id,
                            session_id,
                            stream_id,
                            subscription_registration_id,
                            Arc::new(logs),
                            position,
                            source_identity.clone(),
                        ));
                        sub.add_image(image.clone());
                        s.image_events.push(ImageEvent::Available {
                            subscription_id: subscription_registration_id,
                            image,
                        });
                    }
                    Err(e) => {
                        eprintln!("sulis: cannot map image log {log_file}: {e}");
                    }
                }
            }
            Event::UnavailableImage {
                correlation_id,
                subscription_registration_id,
                ..
            } => {
                if let Some(sub) = s.subscriptions.get(&subscription_registration_id).cloned() {
                    if let Some(image) = sub.remove_image(correlation_id) {
                        s.image_events.push(ImageEvent::Unavailable {
                            subscription_id: subscription_registration_id,
                            image,
                        });
                    }
                }
            }
            Event::ClientTimeout { client_id } if client_id == self.client_id => {
                drop(s);
                self.fail(ClientError::ClientTimeout(format!(
                    "client {client_id} was timed out by the media driver in {} (no heartbeat within its liveness timeout)",
                    self.dir.display()
                )));
                return;
            }
            Event::CounterReady {
                correlation_id,
                counter_id,
            } if correlation_id == self.client_id
                && self.counters.counter_type_id(counter_id) == CLIENT_HEARTBEAT_TYPE_ID =>
            {
                self.adopt_heartbeat(&mut s, counter_id, epoch_ms());
            }
            // The driver also answers nothing else with this id.
            Event::Error { correlation_id, .. }
            | Event::PublicationReady { correlation_id, .. }
            | Event::SubscriptionReady { correlation_id, .. }
            | Event::OperationSuccess { correlation_id }
            | Event::CounterReady { correlation_id, .. } => {
                if s.awaiting.contains(&correlation_id) {
                    s.responses.insert(correlation_id, ev);
                }
                drop(s);
                self.cond.notify_all();
                return;
            }
            _ => {}
        }
        drop(s);
        self.cond.notify_all();
    }

    fn driver_alive(&self) -> Result<(), ClientError> {
        let heartbeat = self.cnc.driver_heartbeat_ms();
        if heartbeat == 0 {
            return Err(ClientError::DriverTimeout(format!(
                "media driver in {} has shut down",
                self.dir.display()
            )));
        }
        let age = epoch_ms() - heartbeat;
        if age > self.driver_timeout.as_millis() as i64 {
            return Err(ClientError::DriverTimeout(format!(
                "media driver in {} has not heartbeated for {age} ms (timeout {:?}); is it running?",
                self.dir.display(),
                self.driver_timeout
            )));
        }
        // A driver process that has exited is dead now, not after the timeout.
        let pid = self.cnc.header().pid;
        if pid > 0 && pid as u32 != std::process::id() && age > 1000 {
            // SAFETY: kill with signal 0 only checks for existence.
            let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
            if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
                return Err(ClientError::DriverTimeout(format!(
                    "media driver process {pid} for {} has exited",
                    self.dir.display()
                )));
            }
        }
        Ok(())
    }
}

/// What resources ask of the client conductor (`driver_proxy.rs`): a few
/// narrow calls, so publications, subscriptions and counters never reach
/// into its state.
impl ClientCalls for Inner {
    fn failure(&self) -> ClientError {
        Inner::failure(self)
    }

    fn counter(&self, id: i32) -> CounterRef {
        self.counters.counter_ref(id)
    }

    fn counters(&self) -> CountersReader {
        self.counters
    }

    /// Asks the driver to remove a publication or subscription: waiting for
    /// its answer (`close`) or not (`drop`, which must never block). Nothing
    /// is sent once the client has failed: the driver already let it go.
    ///
    /// The resource is gone on the client's side whatever happens; the only
    /// error is [`ClientError::Interrupted`] (the interrupt check fired while
    /// waiting), which the caller must hear about: with the Python binding
    /// it is a Ctrl-C. A driver that does not answer fails the client, which
    /// later calls report.
    fn remove(
        &self,
        resource: Resource,
        registration_id: i64,
        wait: bool,
    ) -> Result<(), ClientError> {
        if let Resource::Subscription = resource {
            self.state
                .lock()
                .unwrap()
                .subscriptions
                .remove(&registration_id);
        }
        if self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let correlation_id = self.next_correlation_id();
        let client_id = self.client_id;
        let cmd = match resource {
            Resource::Publication => Command::RemovePublication {
                client_id,
                correlation_id,
                registration_id,
            },
            Resource::Subscription => Command::RemoveSubscription {
                client_id,
                correlation_id,
                registration_id,
            },
        };
        if wait {
            match self.request(correlation_id, &cmd) {
                Err(e @ ClientError::Interrupted(_)) => Err(e),
                _ => Ok(()),
            }
        } else {
            self.send_quietly(&cmd);
            Ok(())
        }
    }

    fn add_counter(
        &self,
        type_id: i32,
        key: &[u8],
        label: &str,
    ) -> Result<(i64, i32), ClientError> {
        let correlation_id = self.next_correlation_id();
        let ev = self.request(
            correlation_id,
            &Command::AddCounter {
                client_id: self.client_id,
                correlation_id,
                type_id,
                key: key.to_vec(),
                label: label.to_string(),
            },
        )?;
        match ev {
            Event::CounterReady { counter_id, .. } => Ok((correlation_id, counter_id)),
            other => Err(ClientError::Config(format!(
                "the driver answered ADD_COUNTER with {other:?}"
            ))),
        }
    }

    fn remove_counter(&self, registration_id: i64) {
        let correlation_id = self.next_correlation_id();
        self.send_quietly(&Command::RemoveCounter {
            client_id: self.client_id,
            correlation_id,
            registration_id,
        });
    }

    fn destination(
        &self,
        registration_id: i64,
        receive: bool,
        change: Destination<'_>,
    ) -> Result<i64, ClientError> {
        let correlation_id = self.next_correlation_id();
        let client_id = self.client_id;
        let cmd = match change {
            Destination::Add(channel) => {
                ChannelUri::parse(channel).map_err(|e| ClientError::Config(e.to_string()))?;
                Command::AddDestination {
                    client_id,
                    correlation_id,
                    registration_id,
                    channel: channel.to_string(),
                    receive,
                }
            }
            Destination::Remove(channel) => Command::RemoveDestination {
                client_id,
                correlation_id,
                registration_id,
                channel: channel.to_string(),
                receive,
            },
            Destination::RemoveById(destination_registration_id) => {
                Command::RemoveDestinationById {
                    client_id,
                    correlation_id,
                    registration_id,
                    destination_registration_id,
                }
            }
        };
        self.request(correlation_id, &cmd)?;
        Ok(correlation_id)
    }
}

/// Waits for image events (see [`Client::image_events`]).
#[derive(Clone)]
pub struct ImageEvents(Arc<Inner>);

impl ImageEvents {
    /// Waits up to `timeout` for image events; returns those available.
    pub fn wait(&self, timeout: Duration) -> Vec<ImageEvent> {
        let inner = &self.0;
        let mut s = inner.state.lock().unwrap();
        if s.image_events.is_empty() && s.failure.is_none() {
            s = inner.cond.wait_timeout(s, timeout).unwrap().0;
        }
        std::mem::take(&mut s.image_events)
    }
}

/// A connection to a media driver.
pub struct Client {
    pub(crate) inner: Arc<Inner>,
    /// In a mutex so that `close` takes `&self`: a binding can share the
    /// client between threads and close it while another call waits.
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Client {
    /// What a new resource holds of this client.
    fn driver_proxy(&self) -> DriverProxy {
        DriverProxy::new(self.inner.failed.clone(), self.inner.clone())
    }

    /// Connects to the driver in `ctx.dir`, waiting up to the driver timeout
    /// for it to become ready.
    pub fn connect(ctx: ClientContext) -> Result<Client, ClientError> {
        check_name(&ctx.name)?;
        let path = ctx.dir.join(CNC_FILE);
        // A driver makes its directory before anything else, so a directory that is not there is a wrong
        // path or no driver at all: say so now rather than after the whole driver timeout. (A driver that
        // is starting has its directory; its CnC file is then waited for.)
        if !ctx.dir.exists() {
            return Err(ClientError::DriverTimeout(format!(
                "no media driver directory {dir}: start a driver there first (`sulis driver --dir {dir}` or \
                 sulis.MediaDriver(dir=...)), or give the directory of a running one (dir=, $SULIS_DIR)",
                dir = ctx.dir.display()
            )));
        }
        let deadline = Instant::now() + ctx.driver_timeout;
        let cnc = loop {
            match Cnc::open(&path) {
                Ok(c) => {
                    let heartbeat = c.driver_heartbeat_ms();
                    let age = epoch_ms() - heartbeat;
                    if heartbeat > 0 && age <= ctx.driver_timeout.as_millis() as i64 {
                        break c;
                    }
                    if Instant::now() >= deadline {
                        // A driver that closed cleanly zeroes its heartbeat: "1795458240356 ms ago" says nothing.
                        let last = if heartbeat > 0 {
                            format!("its last heartbeat was {age} ms ago")
                        } else {
                            "the driver that made it has shut down".to_string()
                        };
                        return Err(ClientError::DriverTimeout(format!(
                            "no live media driver in {}: {last}",
                            ctx.dir.display()
                        )));
                    }
                }
                Err(e) => {
                    if Instant::now() >= deadline {
                        return Err(ClientError::DriverTimeout(format!(
                            "no media driver found in {} within {:?}: {e} (is a driver starting there? \
                             `sulis driver --dir {}` starts one)",
                            ctx.dir.display(),
                            ctx.driver_timeout,
                            ctx.dir.display()
                        )));
                    }
                }
            }
            if let Some(i) = &ctx.interrupt {
                if (i.0)() {
                    return Err(ClientError::Interrupted(format!(
                        "interrupted while waiting for a media driver in {}",
                        ctx.dir.display()
                    )));
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let to_driver =
            ManyToOneRingBuffer::new(cnc.to_driver_buffer()).map_err(ClientError::Config)?;
        let receiver =
            BroadcastReceiver::new(cnc.to_clients_buffer()).map_err(ClientError::Config)?;
        let mut receiver = CopyBroadcastReceiver::new(receiver);
        let counters =
            CountersReader::new(cnc.counters_metadata_buffer(), cnc.counters_values_buffer());
        let client_id = to_driver.next_correlation_id();
        let inner = Arc::new(Inner {
            dir: ctx.dir.clone(),
            cnc,
            to_driver,
            counters,
            client_id,
            name: ctx.name.clone(),
            driver_timeout: ctx.driver_timeout,
            interrupt: ctx.interrupt.clone(),
            next_interrupt_check: Mutex::new(Instant::now()),
            state: Mutex::new(State {
                awaiting: HashSet::new(),
                responses: HashMap::new(),
                laps: 0,
                subscriptions: HashMap::new(),
                image_events: Vec::new(),
                heartbeat: None,
                failure: None,
            }),
            cond: Condvar::new(),
            failed: Arc::new(AtomicBool::new(false)),
            running: AtomicBool::new(true),
            pending: std::sync::atomic::AtomicUsize::new(0),
            conductor_thread: Mutex::new(None),
        });
        // Announce ourselves: the driver creates our heartbeat counter.
        inner.send(&Command::ClientKeepalive { client_id })?;
        let worker = inner.clone();
        let thread = std::thread::Builder::new()
            .name(format!("sulis-client-{client_id}"))
            .spawn(move || {
                let mut last_keepalive = 0i64;
                // Heartbeat well within the driver's liveness timeout, even a short one
                // (a 500 ms period would get a client timed out by a 500 ms timeout).
                let liveness_ms = worker.cnc.header().client_liveness_timeout_ns / 1_000_000;
                let keepalive_ms = (liveness_ms / 4).clamp(1, KEEPALIVE_INTERVAL_MS);
                while worker.running.load(Ordering::Acquire) {
                    // Drain what is there (bounded, so liveness checks still
                    // run during a flood): a client that reads 64 events per
                    // wake-up is lapped by any burst of a few thousand.
                    for _ in 0..64 {
                        match receiver.receive_many(|t, b| worker.on_event(t, b), 256) {
                            Ok(n) if n < 256 => break,
                            Ok(_) => {}
                            Err(_) => {
                                // Lapped: events were lost, the connection is not.
                                worker.on_lapped();
                            }
                        }
                    }
                    let now = epoch_ms();
                    if now - last_keepalive >= keepalive_ms / 5 {
                        if let Err(e) = worker.driver_alive() {
                            worker.fail(e);
                            break;
                        }
                        if now - last_keepalive >= keepalive_ms {
                            last_keepalive = now;
                            let hb = worker.state.lock().unwrap().heartbeat;
                            match hb {
                                Some(h) => h.set_ordered(now),
                                None => {
                                    let id = worker.counters.find_by_type_id_and_registration_id(
                                        CLIENT_HEARTBEAT_TYPE_ID,
                                        worker.client_id,
                                    );
                                    if id >= 0 {
                                        let mut s = worker.state.lock().unwrap();
                                        worker.adopt_heartbeat(&mut s, id, now);
                                    } else {
                                        worker.send_quietly(&Command::ClientKeepalive {
                                            client_id: worker.client_id,
                                        });
                                    }
                                }
                            }
                        }
                    }
                    let period = if worker.pending.load(Ordering::Acquire) > 0 {
                        CONDUCTOR_BUSY_PERIOD
                    } else {
                        CONDUCTOR_IDLE_PERIOD
                    };
                    std::thread::park_timeout(period);
                }
            })
            .map_err(|e| ClientError::Config(format!("cannot start client thread: {e}")))?;
        *inner.conductor_thread.lock().unwrap() = Some(thread.thread().clone());
        Ok(Client {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// How many times this client was lapped by the driver's broadcast and
    /// re-synchronised.
    pub fn lapped_count(&self) -> u64 {
        self.inner.state.lock().unwrap().laps
    }

    /// Runs the context's interrupt check (at most once per
    /// [`INTERRUPT_CHECK_PERIOD`]): `Err(Interrupted)` when it fired. For the
    /// waits of services built on this client (a cluster session's connect,
    /// say), so a signal ends them as it ends the client's own.
    pub fn check_interrupt(&self, what: &str) -> Result<(), ClientError> {
        if self.inner.interrupt.is_none() {
            return Ok(());
        }
        let now = Instant::now();
        {
            let mut next = self.inner.next_interrupt_check.lock().unwrap();
            if now < *next {
                return Ok(());
            }
            *next = now + INTERRUPT_CHECK_PERIOD;
        }
        self.inner.check_interrupt(what)
    }

    /// This client's id.
    pub fn client_id(&self) -> i64 {
        self.inner.client_id
    }

    /// A correlation id no other call on this driver has had or will have
    /// (the driver's counter, which every client of it draws from), as
    /// Aeron's `Aeron.nextCorrelationId()`: for requests to other services
    /// whose answers must not be taken for an earlier request's.
    pub fn next_correlation_id(&self) -> i64 {
        self.inner.next_correlation_id()
    }

    /// The driver directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Counters of the driver.
    pub fn counters(&self) -> CountersReader {
        self.inner.counters
    }

    /// Fails if the client is closed or its driver is gone.
    pub fn check(&self) -> Result<(), ClientError> {
        self.inner.check()
    }

    fn parse_channel(channel: &str, stream_id: i32) -> Result<ChannelUri, ClientError> {
        let uri = ChannelUri::parse(channel).map_err(|e| ClientError::Config(e.to_string()))?;
        if let Some(s) = uri.params().stream_id {
            if s != stream_id {
                return Err(ClientError::Config(format!(
                    "invalid channel URI '{channel}': stream-id={s}: does not match the stream id {stream_id} given"
                )));
            }
        }
        Ok(uri)
    }

    fn add_publication_inner(
        &self,
        channel: &str,
        stream_id: i32,
        exclusive: bool,
    ) -> Result<(Event, i64), ClientError> {
        Self::parse_channel(channel, stream_id)?;
        let correlation_id = self.inner.next_correlation_id();
        let ev = self.inner.request(
            correlation_id,
            &Command::AddPublication {
                client_id: self.inner.client_id,
                correlation_id,
                stream_id,
                channel: channel.to_string(),
                exclusive,
            },
        )?;
        Ok((ev, correlation_id))
    }

    /// Adds a concurrent publication (shared with other publishers of the same stream).
    pub fn add_publication(
        &self,
        channel: &str,
        stream_id: i32,
    ) -> Result<Publication, ClientError> {
        let (ev, correlation_id) = self.add_publication_inner(channel, stream_id, false)?;
        Publication::from_ready(self.driver_proxy(), correlation_id, channel, ev)
    }

    /// Adds an exclusive (single-writer) publication with its own session.
    pub fn add_exclusive_publication(
        &self,
        channel: &str,
        stream_id: i32,
    ) -> Result<ExclusivePublication, ClientError> {
        let (ev, correlation_id) = self.add_publication_inner(channel, stream_id, true)?;
        ExclusivePublication::from_ready(self.driver_proxy(), correlation_id, channel, ev)
    }

    /// Adds a subscription. Images join it as publishers appear.
    pub fn add_subscription(
        &self,
        channel: &str,
        stream_id: i32,
    ) -> Result<Subscription, ClientError> {
        Self::parse_channel(channel, stream_id)?;
        let correlation_id = self.inner.next_correlation_id();
        let shared = Arc::new(SubscriptionShared::new());
        // Registered before the command so images announced right after the
        // response are not missed.
        self.inner
            .state
            .lock()
            .unwrap()
            .subscriptions
            .insert(correlation_id, shared.clone());
        let result = self.inner.request(
            correlation_id,
            &Command::AddSubscription {
                client_id: self.inner.client_id,
                correlation_id,
                stream_id,
                channel: channel.to_string(),
            },
        );
        match result {
            Ok(ev) => Ok(Subscription::new(
                self.driver_proxy(),
                correlation_id,
                stream_id,
                channel.to_string(),
                shared,
                match ev {
                    Event::SubscriptionReady {
                        channel_status_counter_id,
                        ..
                    } => channel_status_counter_id,
                    _ => sulis_concurrent::counters::NULL_COUNTER_ID,
                },
            )),
            Err(e) => {
                self.inner
                    .state
                    .lock()
                    .unwrap()
                    .subscriptions
                    .remove(&correlation_id);
                Err(e)
            }
        }
    }

    /// Adds a counter to the driver's CnC with this type, key and label
    /// (freed when the [`crate::Counter`] is closed or dropped).
    pub fn add_counter(
        &self,
        type_id: i32,
        key: &[u8],
        label: &str,
    ) -> Result<crate::Counter, ClientError> {
        crate::Counter::add(self.driver_proxy(), type_id, key, label)
    }

    /// Image events not yet consumed (for callbacks), oldest first.
    pub fn take_image_events(&self) -> Vec<ImageEvent> {
        std::mem::take(&mut self.inner.state.lock().unwrap().image_events)
    }

    /// A handle that waits for image events without borrowing the client.
    pub fn image_events(&self) -> ImageEvents {
        ImageEvents(self.inner.clone())
    }

    /// Closes the client: the driver releases everything it held. Calls
    /// waiting in other threads fail with [`ClientError::Closed`].
    pub fn close(&self) {
        if self.inner.running.swap(false, Ordering::AcqRel) {
            if !self.inner.failed.load(Ordering::Acquire) {
                self.inner.send_quietly(&Command::ClientClose {
                    client_id: self.inner.client_id,
                });
            }
            self.inner
                .fail(ClientError::Closed("client is closed".into()));
        }
        let thread = self.thread.lock().unwrap().take();
        if let Some(t) = thread {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.close();
    }
}
