//! `sulis._native.ArchiveClient`: a control session with an archive, and the
//! decoder of its recording events stream.

use crate::client::PyClient;
use crate::errors::{interrupt_check, ConfigurationError};
use crate::gil;
use pyo3::prelude::*;
use std::sync::Mutex;
use std::time::Duration;
use sulis_archive::ArchiveError as RustArchiveError;
use sulis_archive::{ArchiveClient, ArchiveClientContext};

use super::recording_descriptor::{descriptor, PyRecordingDescriptor};
use super::recording_signal::PyRecordingSignalEvent;

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
        // The session's lock is taken with the GIL released: a thread waiting
        // for it must not hold the GIL, which the thread in the session's
        // wait takes for its signal checks (that was a deadlock: one thread in
        // await_signal, another calling poll_signals or close).
        let session = &self.session;
        let result = gil::released(py, || session.lock().unwrap().as_mut().map(f));
        match result {
            None => Err(crate::errors::ClosedError::new_err(
                "archive client is closed",
            )),
            Some(r) => r.map_err(gil::NativeError::into_py_err),
        }
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
        #[pyo3(from_py_with = crate::args::stream_id)] stream_id: i32,
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
        #[pyo3(from_py_with = crate::args::stream_id)] stream_id: i32,
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

    fn stop_recording(
        &self,
        py: Python<'_>,
        channel: String,
        #[pyo3(from_py_with = crate::args::stream_id)] stream_id: i32,
    ) -> PyResult<()> {
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
        #[pyo3(from_py_with = crate::args::stream_id)] stream_id: i32,
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
        #[pyo3(from_py_with = crate::args::stream_id)] stream_id: i32,
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
        #[pyo3(from_py_with = crate::args::stream_id)] stream_id: i32,
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
        #[pyo3(from_py_with = crate::args::stream_id)] stream_id: i32,
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
        replication_session_id=-1, credentials=None, src_response_channel=String::new(),
        channel_tag_id=-1, subscription_tag_id=-1
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
        channel_tag_id: i64,
        subscription_tag_id: i64,
    ) -> PyResult<i64> {
        let r = sulis_archive::Replication {
            channel_tag_id,
            subscription_tag_id,
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
    fn poll_signals(&self, py: Python<'_>) -> PyResult<Vec<PyRecordingSignalEvent>> {
        let signals = self.call(py, |s| Ok(s.poll_signals()))?;
        Ok(signals
            .into_iter()
            .map(PyRecordingSignalEvent::from)
            .collect())
    }

    /// Errors about earlier requests since the last call: (correlation id, code, message).
    fn poll_errors(&self, py: Python<'_>) -> PyResult<Vec<(i64, i64, String)>> {
        self.call(py, |s| Ok(s.poll_errors()))
    }

    /// Waits for `signal` of `recording_id` (-1: any recording).
    #[pyo3(signature = (recording_id, signal, timeout=None))]
    fn await_signal(
        &self,
        py: Python<'_>,
        recording_id: i64,
        signal: i32,
        timeout: Option<f64>,
    ) -> PyResult<PyRecordingSignalEvent> {
        let within = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        Ok(self
            .call(py, |s| match within {
                Some(t) => s.await_signal_within(recording_id, signal, t),
                None => s.await_signal(recording_id, signal),
            })?
            .into())
    }

    /// Closes the control session (idempotent).
    fn close(&self, py: Python<'_>) {
        let session = &self.session;
        gil::released(py, || {
            if let Some(mut s) = session.lock().unwrap().take() {
                s.close();
            }
        })
    }

    #[getter]
    fn is_closed(&self, py: Python<'_>) -> bool {
        let session = &self.session;
        gil::released(py, || session.lock().unwrap().is_none())
    }
}

pub(super) fn seconds(s: f64, what: &str) -> PyResult<Duration> {
    if !s.is_finite() || s <= 0.0 {
        return Err(ConfigurationError::new_err(format!(
            "{what} must be a positive number of seconds, not {s}"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}
