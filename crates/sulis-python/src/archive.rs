//! `sulis._native.Archive` and `sulis._native.ArchiveClient`: the archive
//! service embedded in a Python process, and a control session with an
//! archive (sulis's or Aeron's). Every call that waits releases the GIL;
//! the Python layer (`sulis.archive`) gives them their final shape.

use crate::client::PyClient;
use crate::errors::{interrupt_check, ConfigurationError, SulisError};
use crate::gil;
use pyo3::create_exception;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;
use sulis_archive::auth::{AllowAllRequests, Authoriser};
use sulis_archive::checksum::Checksum;
use sulis_archive::ArchiveError as RustArchiveError;
use sulis_archive::{
    Archive, ArchiveClient, ArchiveClientContext, ArchiveContext, ArchiveStartError,
    ArchiveThreadingMode,
};
use sulis_protocol::archive::messages::{RecordingDescriptor, RecordingSignalEvent};

create_exception!(
    sulis,
    ArchiveError,
    SulisError,
    "The archive refused a request or did not answer; `code` carries the archive's error code (-1 if none)."
);

/// Why an archive could not start, as Python sees it: a wrong setting is a
/// `ConfigurationError`, a file that failed an `ArchiveIOError` (an
/// `OSError` with `errno`), anything else (a directory another archive
/// runs in, a catalog that cannot be used, no driver) a `SulisError`.
fn start_err(e: ArchiveStartError) -> PyErr {
    match e {
        ArchiveStartError::Config(m) => ConfigurationError::new_err(m),
        ArchiveStartError::Io { message, os_error } => Python::attach(|py| {
            // sulis.ArchiveIOError is both a SulisError and an OSError
            // (defined in Python: one class of two exception bases).
            let made = py
                .import("sulis.errors")
                .and_then(|m| m.getattr("ArchiveIOError"))
                .and_then(|cls| match os_error {
                    Some(errno) => cls.call1((errno, message.clone())),
                    None => cls.call1((message.clone(),)),
                });
            match made {
                Ok(e) => PyErr::from_value(e),
                Err(e) => e,
            }
        }),
        other => SulisError::new_err(other.to_string()),
    }
}

impl gil::NativeError for ArchiveStartError {
    fn into_py_err(self) -> PyErr {
        start_err(self)
    }
}

impl gil::NativeError for RustArchiveError {
    fn into_py_err(self) -> PyErr {
        archive_err(self)
    }
}

fn archive_err(e: RustArchiveError) -> PyErr {
    let (message, code) = match e {
        RustArchiveError::Archive { code, message } => {
            (format!("{message} (archive error code {code})"), code)
        }
        RustArchiveError::Interrupted(m) => {
            return crate::errors::client_err(sulis_client::ClientError::Interrupted(m))
        }
        RustArchiveError::Timeout(m)
        | RustArchiveError::Client(m)
        | RustArchiveError::Protocol(m) => (m, -1),
    };
    let err = ArchiveError::new_err(message);
    Python::attach(|py| {
        let _ = err.value(py).setattr("code", code);
    });
    err
}

fn seconds(s: f64, what: &str) -> PyResult<Duration> {
    if !s.is_finite() || s <= 0.0 {
        return Err(ConfigurationError::new_err(format!(
            "{what} must be a positive number of seconds, not {s}"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

/// `credentials=`: one bytes-like or a sequence of them, each a principal.
fn accepted_credentials(c: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    if let Ok(one) = c.extract::<Vec<u8>>() {
        if !c.is_instance_of::<pyo3::types::PyList>() && !c.is_instance_of::<pyo3::types::PyTuple>()
        {
            return Ok(vec![one]);
        }
    }
    c.try_iter()
        .and_then(|items| items.map(|i| i?.extract::<Vec<u8>>()).collect())
        .map_err(|_| {
            ConfigurationError::new_err(
                "credentials must be bytes or a list of bytes (each a principal)",
            )
        })
}

/// `authorise=`: a Python callable asked, on the archive's thread, for
/// every request: `authorise(principal: bytes, request: str) -> bool`. An
/// exception counts as a refusal (and is printed).
struct PyAuthoriser(Py<PyAny>);

impl Authoriser for PyAuthoriser {
    fn is_authorised(&mut self, principal: &[u8], _template_id: u16, request: &str) -> bool {
        Python::attach(|py| {
            let principal = pyo3::types::PyBytes::new(py, principal);
            match self
                .0
                .call1(py, (principal, request))
                .and_then(|r| r.is_truthy(py))
            {
                Ok(allowed) => allowed,
                Err(e) => {
                    e.print(py);
                    false
                }
            }
        })
    }
}

/// An archive running in this process.
#[pyclass(module = "sulis._native", name = "Archive", frozen, subclass)]
pub struct PyArchive {
    archive: Mutex<Option<Archive>>,
    dir: String,
    archive_id: i64,
}

#[pymethods]
impl PyArchive {
    #[new]
    #[pyo3(signature = (
        dir, driver_dir, control_channel=None, control_stream_id=10,
        local_control_channel="aeron:ipc".to_string(), local_control_stream_id=10,
        archive_id=None, segment_file_length=128 * 1024 * 1024, file_sync_level=0,
        catalog_file_sync_level=0, max_concurrent_recordings=20, max_concurrent_replays=20,
        connect_timeout=5.0, replication_channel=None, credentials=None, challenge=None,
        challenge_response=None, record_checksum=None, replay_checksum=None,
        recording_events_enabled=false, recording_events_channel="aeron:ipc".to_string(),
        recording_events_stream_id=30, low_storage_space_threshold=128 * 1024 * 1024, authorise=None,
        threading_mode="shared".to_string()
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dir: PathBuf,
        driver_dir: PathBuf,
        control_channel: Option<String>,
        control_stream_id: i32,
        local_control_channel: String,
        local_control_stream_id: i32,
        archive_id: Option<i64>,
        segment_file_length: usize,
        file_sync_level: u8,
        catalog_file_sync_level: u8,
        max_concurrent_recordings: usize,
        max_concurrent_replays: usize,
        connect_timeout: f64,
        replication_channel: Option<String>,
        credentials: Option<Bound<'_, PyAny>>,
        challenge: Option<Vec<u8>>,
        challenge_response: Option<Vec<u8>>,
        record_checksum: Option<String>,
        replay_checksum: Option<String>,
        recording_events_enabled: bool,
        recording_events_channel: String,
        recording_events_stream_id: i32,
        low_storage_space_threshold: u64,
        authorise: Option<Py<PyAny>>,
        threading_mode: String,
    ) -> PyResult<Self> {
        let checksum = |name: Option<String>, what: &str| {
            name.map(|n| {
                Checksum::parse(&n).map_err(|e| ConfigurationError::new_err(format!("{what}: {e}")))
            })
            .transpose()
        };
        let ctx = ArchiveContext {
            archive_dir: dir.clone(),
            driver_dir,
            control_channel,
            control_stream_id,
            local_control_channel,
            local_control_stream_id,
            archive_id,
            segment_file_length,
            file_sync_level,
            catalog_file_sync_level: catalog_file_sync_level.max(file_sync_level),
            max_concurrent_recordings,
            max_concurrent_replays,
            connect_timeout: seconds(connect_timeout, "connect_timeout")?,
            replication_channel,
            credentials: credentials.map(|c| accepted_credentials(&c)).transpose()?,
            challenge,
            challenge_response: challenge_response.unwrap_or_default(),
            record_checksum: checksum(record_checksum, "record_checksum")?,
            replay_checksum: checksum(replay_checksum, "replay_checksum")?,
            recording_events_enabled,
            recording_events_channel,
            recording_events_stream_id,
            low_storage_space_threshold,
            threading_mode: ArchiveThreadingMode::parse(&threading_mode)
                .map_err(ConfigurationError::new_err)?,
            ..ArchiveContext::default()
        };
        ctx.conclude().map_err(ConfigurationError::new_err)?;
        let authoriser: Box<dyn Authoriser> = match authorise {
            Some(f) => Box::new(PyAuthoriser(f)),
            None => Box::new(AllowAllRequests),
        };
        let archive = gil::released_or_raise(py, || Archive::launch_with(ctx, authoriser))?;
        Ok(PyArchive {
            archive_id: archive.archive_id(),
            archive: Mutex::new(Some(archive)),
            dir: dir.display().to_string(),
        })
    }

    /// The archive directory.
    #[getter]
    fn dir(&self) -> &str {
        &self.dir
    }

    /// The archive's id.
    #[getter]
    fn archive_id(&self) -> i64 {
        self.archive_id
    }

    /// Errors the archive recorded (most recent last).
    fn errors(&self) -> Vec<String> {
        self.archive
            .lock()
            .unwrap()
            .as_ref()
            .map(|a| a.errors())
            .unwrap_or_default()
    }

    /// True until closed (or until the archive's thread died: see ``errors()``).
    #[getter]
    fn is_running(&self) -> bool {
        self.archive
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|a| a.is_running())
    }

    /// Stops the archive: recordings end with their stop positions written (idempotent).
    fn close(&self, py: Python<'_>) {
        let archive = self.archive.lock().unwrap().take();
        if let Some(mut a) = archive {
            gil::released(py, move || a.close());
        }
    }
}

/// A recording, as the archive's catalog describes it.
#[pyclass(
    module = "sulis._native",
    name = "RecordingDescriptor",
    frozen,
    get_all,
    eq
)]
#[derive(Clone, PartialEq)]
pub struct PyRecordingDescriptor {
    /// Recording id.
    recording_id: i64,
    /// When it started (epoch ms).
    start_timestamp: i64,
    /// When it stopped (epoch ms), -1 while recording.
    stop_timestamp: i64,
    /// Stream position it starts at.
    start_position: i64,
    /// Stream position it stops at, -1 while recording.
    stop_position: i64,
    /// Initial term id of the recorded stream.
    initial_term_id: i32,
    /// Segment file length.
    segment_file_length: i32,
    /// Term length of the recorded stream.
    term_buffer_length: i32,
    /// MTU of the recorded stream.
    mtu_length: i32,
    /// Session id of the recorded stream.
    session_id: i32,
    /// Stream id.
    stream_id: i32,
    /// The channel without its tuning parameters.
    stripped_channel: String,
    /// The channel as the recording was asked for.
    original_channel: String,
    /// Where the stream came from.
    source_identity: String,
}

#[pymethods]
impl PyRecordingDescriptor {
    fn __repr__(&self) -> String {
        format!(
            "RecordingDescriptor(recording_id={}, stream_id={}, session_id={}, start_position={}, \
             stop_position={}, channel={:?})",
            self.recording_id,
            self.stream_id,
            self.session_id,
            self.start_position,
            self.stop_position,
            self.original_channel
        )
    }
}

fn descriptor(d: RecordingDescriptor) -> PyRecordingDescriptor {
    PyRecordingDescriptor {
        recording_id: d.recording_id,
        start_timestamp: d.start_timestamp,
        stop_timestamp: d.stop_timestamp,
        start_position: d.start_position,
        stop_position: d.stop_position,
        initial_term_id: d.initial_term_id,
        segment_file_length: d.segment_file_length,
        term_buffer_length: d.term_buffer_length,
        mtu_length: d.mtu_length,
        session_id: d.session_id,
        stream_id: d.stream_id,
        stripped_channel: d.stripped_channel,
        original_channel: d.original_channel,
        source_identity: d.source_identity,
    }
}

/// (correlation id, recording id, subscription id, position, signal).
type SignalTuple = (i64, i64, i64, i64, i32);

fn signal_tuple(s: RecordingSignalEvent) -> SignalTuple {
    (
        s.correlation_id,
        s.recording_id,
        s.subscription_id,
        s.position,
        s.signal,
    )
}

/// A control session with an archive.
#[pyclass(module = "sulis._native", name = "ArchiveClient", frozen, subclass)]
pub struct PyArchiveClient {
    session: Mutex<Option<ArchiveClient>>,
    archive_id: i64,
    control_session_id: i64,
}

impl PyArchiveClient {
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut ArchiveClient) -> Result<T, RustArchiveError> + Send,
    ) -> PyResult<T> {
        let mut guard = self.session.lock().unwrap();
        let Some(session) = guard.as_mut() else {
            return Err(crate::errors::ClosedError::new_err(
                "archive client is closed",
            ));
        };
        gil::released_or_raise(py, || f(session))
    }
}

#[pymethods]
impl PyArchiveClient {
    #[new]
    #[pyo3(signature = (
        client, control_request_channel="aeron:ipc".to_string(), control_request_stream_id=10,
        control_response_channel="aeron:ipc".to_string(), control_response_stream_id=20,
        message_timeout=10.0, credentials=None, challenge_response=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        client: &PyClient,
        control_request_channel: String,
        control_request_stream_id: i32,
        control_response_channel: String,
        control_response_stream_id: i32,
        message_timeout: f64,
        credentials: Option<Vec<u8>>,
        challenge_response: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let ctx = ArchiveClientContext {
            control_request_channel,
            control_request_stream_id,
            control_response_channel,
            control_response_stream_id,
            message_timeout: seconds(message_timeout, "message_timeout")?,
            interrupt: Some(interrupt_check()),
            credentials: credentials.unwrap_or_default(),
            challenge_response,
        };
        let session = client
            .with_client(|c| gil::released_or_raise(py, || ArchiveClient::connect(c, ctx)))?;
        Ok(PyArchiveClient {
            archive_id: session.archive_id(),
            control_session_id: session.control_session_id(),
            session: Mutex::new(Some(session)),
        })
    }

    /// The archive's id.
    #[getter]
    fn archive_id(&self) -> i64 {
        self.archive_id
    }

    /// This control session's id.
    #[getter]
    fn control_session_id(&self) -> i64 {
        self.control_session_id
    }

    #[pyo3(signature = (channel, stream_id, source_location, auto_stop))]
    fn start_recording(
        &self,
        py: Python<'_>,
        channel: String,
        stream_id: i32,
        source_location: i32,
        auto_stop: bool,
    ) -> PyResult<i64> {
        self.call(py, |s| {
            s.start_recording(&channel, stream_id, source_location, auto_stop)
        })
    }

    #[pyo3(signature = (recording_id, channel, stream_id, source_location, auto_stop))]
    fn extend_recording(
        &self,
        py: Python<'_>,
        recording_id: i64,
        channel: String,
        stream_id: i32,
        source_location: i32,
        auto_stop: bool,
    ) -> PyResult<i64> {
        self.call(py, |s| {
            s.extend_recording(
                recording_id,
                &channel,
                stream_id,
                source_location,
                auto_stop,
            )
        })
    }

    fn stop_recording(&self, py: Python<'_>, channel: String, stream_id: i32) -> PyResult<()> {
        self.call(py, |s| s.stop_recording(&channel, stream_id))
    }

    fn stop_recording_subscription(&self, py: Python<'_>, subscription_id: i64) -> PyResult<()> {
        self.call(py, |s| s.stop_recording_subscription(subscription_id))
    }

    fn stop_recording_by_identity(&self, py: Python<'_>, recording_id: i64) -> PyResult<bool> {
        self.call(py, |s| s.stop_recording_by_identity(recording_id))
    }

    fn list_recordings(
        &self,
        py: Python<'_>,
        from_id: i64,
        count: i32,
    ) -> PyResult<Vec<PyRecordingDescriptor>> {
        let list = self.call(py, |s| s.list_recordings(from_id, count))?;
        Ok(list.into_iter().map(descriptor).collect())
    }

    fn list_recordings_for_uri(
        &self,
        py: Python<'_>,
        from_id: i64,
        count: i32,
        channel: String,
        stream_id: i32,
    ) -> PyResult<Vec<PyRecordingDescriptor>> {
        let list = self.call(py, |s| {
            s.list_recordings_for_uri(from_id, count, &channel, stream_id)
        })?;
        Ok(list.into_iter().map(descriptor).collect())
    }

    fn list_recording(
        &self,
        py: Python<'_>,
        recording_id: i64,
    ) -> PyResult<Option<PyRecordingDescriptor>> {
        Ok(self
            .call(py, |s| s.list_recording(recording_id))?
            .map(descriptor))
    }

    fn get_recording_position(&self, py: Python<'_>, recording_id: i64) -> PyResult<i64> {
        self.call(py, |s| s.get_recording_position(recording_id))
    }

    fn get_stop_position(&self, py: Python<'_>, recording_id: i64) -> PyResult<i64> {
        self.call(py, |s| s.get_stop_position(recording_id))
    }

    fn get_start_position(&self, py: Python<'_>, recording_id: i64) -> PyResult<i64> {
        self.call(py, |s| s.get_start_position(recording_id))
    }

    fn get_max_recorded_position(&self, py: Python<'_>, recording_id: i64) -> PyResult<i64> {
        self.call(py, |s| s.get_max_recorded_position(recording_id))
    }

    #[pyo3(signature = (recording_id, position, length, channel, stream_id, limit_counter_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn start_replay(
        &self,
        py: Python<'_>,
        recording_id: i64,
        position: i64,
        length: i64,
        channel: String,
        stream_id: i32,
        limit_counter_id: Option<i32>,
    ) -> PyResult<i64> {
        self.call(py, |s| match limit_counter_id {
            Some(c) => {
                s.start_bounded_replay(recording_id, position, length, c, &channel, stream_id)
            }
            None => s.start_replay(recording_id, position, length, &channel, stream_id),
        })
    }

    /// A replay over a response channel (`control-mode=response`) to
    /// `subscription`, the caller's own subscription on `channel`/`stream_id`:
    /// returns the replay session id once the replay's image is there.
    #[pyo3(signature = (client, subscription, recording_id, position, length, channel, stream_id, limit_counter_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn start_replay_via_response_channel(
        &self,
        py: Python<'_>,
        client: &PyClient,
        subscription: &crate::subscription::PySubscription,
        recording_id: i64,
        position: i64,
        length: i64,
        channel: String,
        stream_id: i32,
        limit_counter_id: Option<i32>,
    ) -> PyResult<i64> {
        let (registration_id, images) = subscription.shared();
        client.with_client(|c| {
            self.call(py, |s| {
                s.start_replay_via_response_channel(
                    c,
                    (registration_id, &images),
                    recording_id,
                    position,
                    length,
                    limit_counter_id,
                    &channel,
                    stream_id,
                )
            })
        })
    }

    fn stop_replay(&self, py: Python<'_>, replay_session_id: i64) -> PyResult<()> {
        self.call(py, |s| s.stop_replay(replay_session_id))
    }

    /// Stops every replay of a recording (-1: of every recording).
    #[pyo3(signature = (recording_id=-1))]
    fn stop_all_replays(&self, py: Python<'_>, recording_id: i64) -> PyResult<()> {
        self.call(py, |s| s.stop_all_replays(recording_id))
    }

    /// The highest recording id from `min_recording_id` on of the stream and
    /// session on a channel containing `channel` (-1: none).
    #[pyo3(signature = (min_recording_id, channel, stream_id, session_id))]
    fn find_last_matching_recording(
        &self,
        py: Python<'_>,
        min_recording_id: i64,
        channel: String,
        stream_id: i32,
        session_id: i32,
    ) -> PyResult<i64> {
        self.call(py, |s| {
            s.find_last_matching_recording(min_recording_id, &channel, stream_id, session_id)
        })
    }

    /// Tells the archive this client is alive (nothing is answered).
    fn keep_alive(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, |s| s.keep_alive())
    }

    /// Lists a stopped recording under another channel.
    fn update_channel(&self, py: Python<'_>, recording_id: i64, channel: String) -> PyResult<()> {
        self.call(py, |s| s.update_channel(recording_id, &channel))
    }

    /// The archive's recording subscriptions: (subscription id, stream id,
    /// stripped channel) each, from `pseudo_index` on, at most `count`, of
    /// `stream_id` if given, on a channel containing `channel`.
    #[pyo3(signature = (pseudo_index=0, count=100, channel=String::new(), stream_id=None))]
    fn list_recording_subscriptions(
        &self,
        py: Python<'_>,
        pseudo_index: i32,
        count: i32,
        channel: String,
        stream_id: Option<i32>,
    ) -> PyResult<Vec<(i64, i32, String)>> {
        let found = self.call(py, |s| {
            s.list_recording_subscriptions(pseudo_index, count, &channel, stream_id)
        })?;
        Ok(found
            .into_iter()
            .map(|d| (d.subscription_id, d.stream_id, d.stripped_channel))
            .collect())
    }

    #[pyo3(signature = (
        src_recording_id, src_control_channel, src_control_stream_id, dst_recording_id=-1,
        stop_position=-1, replication_channel=String::new(), live_destination=String::new(),
        replication_session_id=-1, credentials=None, src_response_channel=String::new()
    ))]
    #[allow(clippy::too_many_arguments)]
    fn replicate(
        &self,
        py: Python<'_>,
        src_recording_id: i64,
        src_control_channel: String,
        src_control_stream_id: i32,
        dst_recording_id: i64,
        stop_position: i64,
        replication_channel: String,
        live_destination: String,
        replication_session_id: i32,
        credentials: Option<Vec<u8>>,
        src_response_channel: String,
    ) -> PyResult<i64> {
        let r = sulis_archive::Replication {
            src_recording_id,
            dst_recording_id,
            stop_position,
            src_control_channel,
            src_control_stream_id,
            replication_channel,
            live_destination,
            replication_session_id,
            credentials: credentials.unwrap_or_default(),
            src_response_channel,
        };
        self.call(py, |s| s.replicate(&r))
    }

    fn migrate_segments(
        &self,
        py: Python<'_>,
        src_recording_id: i64,
        dst_recording_id: i64,
    ) -> PyResult<i64> {
        self.call(py, |s| {
            s.migrate_segments(src_recording_id, dst_recording_id)
        })
    }

    fn stop_replication(&self, py: Python<'_>, replication_id: i64) -> PyResult<()> {
        self.call(py, |s| s.stop_replication(replication_id))
    }

    fn truncate_recording(
        &self,
        py: Python<'_>,
        recording_id: i64,
        position: i64,
    ) -> PyResult<i64> {
        self.call(py, |s| s.truncate_recording(recording_id, position))
    }

    fn purge_recording(&self, py: Python<'_>, recording_id: i64) -> PyResult<i64> {
        self.call(py, |s| s.purge_recording(recording_id))
    }

    fn detach_segments(
        &self,
        py: Python<'_>,
        recording_id: i64,
        new_start_position: i64,
    ) -> PyResult<()> {
        self.call(py, |s| s.detach_segments(recording_id, new_start_position))
    }

    fn delete_detached_segments(&self, py: Python<'_>, recording_id: i64) -> PyResult<i64> {
        self.call(py, |s| s.delete_detached_segments(recording_id))
    }

    fn purge_segments(
        &self,
        py: Python<'_>,
        recording_id: i64,
        new_start_position: i64,
    ) -> PyResult<i64> {
        self.call(py, |s| s.purge_segments(recording_id, new_start_position))
    }

    fn attach_segments(&self, py: Python<'_>, recording_id: i64) -> PyResult<i64> {
        self.call(py, |s| s.attach_segments(recording_id))
    }

    /// Recording signals received so far: (correlation id, recording id,
    /// subscription id, position, signal) tuples.
    fn poll_signals(&self, py: Python<'_>) -> PyResult<Vec<SignalTuple>> {
        let signals = self.call(py, |s| Ok(s.poll_signals()))?;
        Ok(signals.into_iter().map(signal_tuple).collect())
    }

    /// Errors about earlier requests since the last call: (correlation id, code, message).
    fn poll_errors(&self, py: Python<'_>) -> PyResult<Vec<(i64, i64, String)>> {
        self.call(py, |s| Ok(s.poll_errors()))
    }

    /// Waits for `signal` of `recording_id` (-1: any recording).
    fn await_signal(
        &self,
        py: Python<'_>,
        recording_id: i64,
        signal: i32,
    ) -> PyResult<SignalTuple> {
        Ok(signal_tuple(
            self.call(py, |s| s.await_signal(recording_id, signal))?,
        ))
    }

    /// Closes the control session (idempotent).
    fn close(&self) {
        if let Some(mut s) = self.session.lock().unwrap().take() {
            s.close();
        }
    }

    #[getter]
    fn is_closed(&self) -> bool {
        self.session.lock().unwrap().is_none()
    }
}

/// Catalog entries as (state, descriptor), and the problems found reading it.
type CatalogListing = (Vec<(i32, PyRecordingDescriptor)>, Vec<String>);

/// The catalog of the archive in `dir`, read without an archive running:
/// (state, descriptor) per entry (state 0 invalid, 1 valid, 2 deleted), and
/// what could not be read.
#[pyfunction]
pub fn archive_describe(dir: PathBuf) -> PyResult<CatalogListing> {
    let (entries, problems) =
        sulis_archive::tool::describe(&dir).map_err(ConfigurationError::new_err)?;
    Ok((
        entries
            .into_iter()
            .map(|e| (e.state, descriptor(e.descriptor)))
            .collect(),
        problems,
    ))
}

fn parse_checksum(name: &str) -> PyResult<Checksum> {
    Checksum::parse(name).map_err(ConfigurationError::new_err)
}

/// Checks every valid recording's segment files frame by frame, and with
/// `checksum` ("crc32" / "crc32c") each frame's and catalog entry's checksum:
/// (recording id, ok, message) per recording (id -1: a catalog problem).
#[pyfunction]
#[pyo3(signature = (dir, checksum=None))]
pub fn archive_verify(
    py: Python<'_>,
    dir: PathBuf,
    checksum: Option<String>,
) -> PyResult<Vec<(i64, bool, String)>> {
    let checksum = checksum.as_deref().map(parse_checksum).transpose()?;
    let verdicts = gil::released_or_raise(py, || sulis_archive::tool::verify(&dir, checksum))?;
    Ok(verdicts
        .into_iter()
        .map(|v| (v.recording_id, v.ok, v.message))
        .collect())
}

/// Writes `checksum`'s checksum into the DATA frames of the last segment
/// file (every one with `all_files`) of recording `recording_id` or of every
/// valid recording, and into the catalog entries: (recording id, files,
/// frames) per recording.
#[pyfunction]
#[pyo3(signature = (dir, checksum, recording_id=None, all_files=false))]
pub fn archive_checksum(
    py: Python<'_>,
    dir: PathBuf,
    checksum: &str,
    recording_id: Option<i64>,
    all_files: bool,
) -> PyResult<Vec<(i64, usize, u64)>> {
    let c = parse_checksum(checksum)?;
    let stamped = gil::released_or_raise(py, || {
        sulis_archive::tool::checksum(&dir, c, recording_id, all_files)
    })?;
    Ok(stamped
        .into_iter()
        .map(|s| (s.recording_id, s.files, s.frames))
        .collect())
}

/// A decoded recording event: (kind, recording id, start position,
/// position, session id, stream id, channel, source identity), kind
/// "started" (position = start), "progress" or "stopped" (position = stop;
/// session and stream -1, strings empty for those two).
type RecordingEventTuple = (&'static str, i64, i64, i64, i32, i32, String, String);

/// Decodes one message of an archive's recording events stream (Aeron's
/// RecordingStarted / RecordingProgress / RecordingStopped).
#[pyfunction]
pub fn decode_recording_event(message: &[u8]) -> PyResult<RecordingEventTuple> {
    use sulis_protocol::archive::messages::{
        control_header, RecordingProgress, RecordingStarted, RecordingStopped,
    };
    let bad = |e: sulis_protocol::archive::sbe::SbeError| {
        ArchiveError::new_err(format!("not a recording event: {e}"))
    };
    let h = control_header(message).map_err(bad)?;
    Ok(match h.template_id {
        RecordingStarted::TEMPLATE_ID => {
            let e = RecordingStarted::decode(message).map_err(bad)?;
            let p = e.start_position;
            (
                "started",
                e.recording_id,
                p,
                p,
                e.session_id,
                e.stream_id,
                e.channel,
                e.source_identity,
            )
        }
        RecordingProgress::TEMPLATE_ID => {
            let e = RecordingProgress::decode(message).map_err(bad)?;
            (
                "progress",
                e.recording_id,
                e.start_position,
                e.position,
                -1,
                -1,
                String::new(),
                String::new(),
            )
        }
        RecordingStopped::TEMPLATE_ID => {
            let e = RecordingStopped::decode(message).map_err(bad)?;
            (
                "stopped",
                e.recording_id,
                e.start_position,
                e.stop_position,
                -1,
                -1,
                String::new(),
                String::new(),
            )
        }
        other => {
            return Err(ArchiveError::new_err(format!(
                "not a recording event: template id {other} (101-103 are)"
            )))
        }
    })
}

/// Marks a recording VALID or INVALID in a stopped archive's catalog.
#[pyfunction]
pub fn archive_mark(dir: PathBuf, recording_id: i64, valid: bool) -> PyResult<()> {
    sulis_archive::tool::mark(&dir, recording_id, valid).map_err(ConfigurationError::new_err)
}

/// Removes INVALID and DELETED entries and their segment files: (entries
/// removed, files deleted).
#[pyfunction]
pub fn archive_compact(py: Python<'_>, dir: PathBuf) -> PyResult<(usize, Vec<String>)> {
    let c = gil::released_or_raise(py, || sulis_archive::tool::compact(&dir))?;
    Ok((c.entries_removed, c.files_deleted))
}

/// Deletes segment files no recording owns; returns their paths.
#[pyfunction]
pub fn archive_delete_orphaned_segments(py: Python<'_>, dir: PathBuf) -> PyResult<Vec<String>> {
    gil::released_or_raise(py, || sulis_archive::tool::delete_orphaned_segments(&dir))
}

/// A dumped frame: (position, frame length, type, flags, session id, stream
/// id, reserved value, first payload bytes).
type FrameTuple = (i64, i32, u16, u8, i32, i32, i64, Vec<u8>);
/// A dumped catalog entry: (state, descriptor, frames, error or None).
type DumpedEntry = (i32, PyRecordingDescriptor, Vec<FrameTuple>, Option<String>);

/// Every catalog entry with up to `frames` of its first frames:
/// (state, descriptor, frames, error or None).
#[pyfunction]
pub fn archive_dump(py: Python<'_>, dir: PathBuf, frames: usize) -> PyResult<Vec<DumpedEntry>> {
    let dumped = gil::released_or_raise(py, || sulis_archive::tool::dump(&dir, frames))?;
    Ok(dumped
        .into_iter()
        .map(|(e, list, error)| {
            let frames = list
                .into_iter()
                .map(|f| {
                    (
                        f.position,
                        f.frame_length,
                        f.frame_type,
                        f.flags,
                        f.session_id,
                        f.stream_id,
                        f.reserved_value,
                        f.payload_head,
                    )
                })
                .collect();
            (e.state, descriptor(e.descriptor), frames, error)
        })
        .collect())
}

/// The mark file: (pid, activity timestamp ms, archive id, control channel,
/// local control channel, driver directory, errors as (count, first ms,
/// last ms, text)); None if the directory has none.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn archive_mark_file(
    dir: PathBuf,
) -> PyResult<
    Option<(
        i64,
        i64,
        i64,
        String,
        String,
        String,
        Vec<(i32, i64, i64, String)>,
    )>,
> {
    let Some(m) = sulis_archive::mark_file::MarkFileReader::open(&dir) else {
        return Ok(None);
    };
    let h = m.header().map_err(ConfigurationError::new_err)?;
    Ok(Some((
        m.pid(),
        m.activity_timestamp(),
        h.archive_id,
        h.control_channel,
        h.local_control_channel,
        h.aeron_directory,
        m.errors(),
    )))
}

/// Registers the archive classes and exception.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(archive_describe, m)?)?;
    m.add_function(wrap_pyfunction!(archive_verify, m)?)?;
    m.add_function(wrap_pyfunction!(archive_mark, m)?)?;
    m.add_function(wrap_pyfunction!(archive_checksum, m)?)?;
    m.add_function(wrap_pyfunction!(decode_recording_event, m)?)?;
    m.add_function(wrap_pyfunction!(archive_compact, m)?)?;
    m.add_function(wrap_pyfunction!(archive_delete_orphaned_segments, m)?)?;
    m.add_function(wrap_pyfunction!(archive_dump, m)?)?;
    m.add_function(wrap_pyfunction!(archive_mark_file, m)?)?;
    m.add_class::<PyArchive>()?;
    m.add_class::<PyArchiveClient>()?;
    m.add_class::<PyRecordingDescriptor>()?;
    m.add("ArchiveError", m.py().get_type::<ArchiveError>())?;
    Ok(())
}
