//! `sulis._native.ClusterClient`: a session with a cluster, converting
//! only: the session (connect, offer, window, egress) is
//! `sulis_cluster::client::cluster_client`. `offer_batch` and `poll_egress_batch`
//! move many messages per Python call, as columns.

use crate::buffer::with_bytes;
use crate::cluster_error::{offer_code, ClusterError, ClusterSessionClosedError};
use crate::gil;
use crate::session_messages::PySessionMessages;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use sulis_client::{Client, ClientContext, OfferError};
use sulis_cluster::client::cluster_client::{ClusterClient, ClusterClientContext, SessionEnded};
use sulis_cluster::client::session_messages::SessionMessages;

/// A session with a cluster.
#[pyclass(name = "ClusterClient", module = "sulis._native")]
pub struct PyClusterClient {
    client: Arc<Client>,
    /// Whether the session made the client (and closes it): not when it was
    /// handed one, which many sessions share.
    owns_client: bool,
    session: Option<ClusterClient>,
}

/// The session's end as `ClusterSessionClosedError`, with its code and detail.
fn ended_error(py: Python<'_>, ended: SessionEnded) -> PyErr {
    let err = ClusterSessionClosedError::new_err(format!(
        "{}: {}",
        if ended.by_client {
            "the client ended the session"
        } else {
            "the cluster ended the session"
        },
        if ended.detail.is_empty() {
            format!("code {}", ended.code)
        } else {
            ended.detail.clone()
        }
    ));
    let _ = err.value(py).setattr("code", ended.code);
    let _ = err.value(py).setattr("detail", ended.detail);
    let _ = err
        .value(py)
        .setattr("messages_committed", ended.messages_committed);
    err
}

impl PyClusterClient {
    /// After a call that may have read a NewLeaderEvent: the ingress follows
    /// the new leader. When the call already did something the caller must
    /// learn of (messages went, or were read), a failure to move is not
    /// raised over it: the client still knows it must move, and the next
    /// call tries again (raised then, it would hide that messages went, and
    /// a caller offering them again would have them applied twice).
    fn follow_leader(&mut self, did_something: bool) -> PyResult<()> {
        if let Some(session) = self.session.as_mut() {
            match session.follow_leader(&self.client) {
                Err(e) if !did_something => return Err(ClusterError::new_err(e)),
                _ => {}
            }
        }
        Ok(())
    }

    fn session(&mut self) -> PyResult<&mut ClusterClient> {
        self.session
            .as_mut()
            .ok_or_else(|| crate::errors::ClosedError::new_err("the cluster client is closed"))
    }
}

#[pymethods]
impl PyClusterClient {
    /// Connects to the driver at `driver_dir` and opens a session with the
    /// cluster whose members take ingress at `ingress_endpoints`
    /// (`"0=host:port,1=host:port,..."`), answers coming on `egress_channel`.
    #[new]
    #[pyo3(signature = (driver_dir, ingress_endpoints, egress_channel, ingress_channel="aeron:udp".to_string(), message_timeout=5.0, credentials=Vec::new(), exactly_once=true, max_in_flight=16_384, new_leader_timeout=None, client=None, secret=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        driver_dir: PathBuf,
        ingress_endpoints: String,
        egress_channel: String,
        ingress_channel: String,
        message_timeout: f64,
        credentials: Vec<u8>,
        exactly_once: bool,
        max_in_flight: usize,
        new_leader_timeout: Option<f64>,
        client: Option<PyRef<'_, crate::client::PyClient>>,
        secret: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let timeout = Duration::from_secs_f64(message_timeout.max(0.001));
        // A client handed in is shared (Aeron's AeronCluster.Context.aeron):
        // a thousand sessions in one process then cost one conductor thread
        // and one mapping of the CnC, not one each.
        let shared = client.map(|c| c.shared()).transpose()?;
        let owns_client = shared.is_none();
        let (client, session) = gil::released(
            py,
            move || -> Result<(Arc<Client>, ClusterClient), String> {
                let client = match shared {
                    Some(c) => c,
                    None => Arc::new(
                        Client::connect(ClientContext {
                            dir: driver_dir,
                            driver_timeout: timeout.max(Duration::from_secs(10)),
                            name: "sulis-cluster-client".into(),
                            interrupt: Some(crate::errors::interrupt_check()),
                        })
                        .map_err(|e| e.to_string())?,
                    ),
                };
                let ctx = ClusterClientContext {
                    ingress_endpoints,
                    ingress_channel,
                    egress_channel,
                    message_timeout: timeout,
                    credentials,
                    secret,
                    exactly_once,
                    max_in_flight,
                    new_leader_timeout: new_leader_timeout
                        .map(|s| Duration::from_secs_f64(s.max(0.001))),
                    ..ClusterClientContext::default()
                };
                let session = ClusterClient::connect(&client, &ctx)?;
                Ok((client, session))
            },
        )
        .map_err(|e| {
            crate::errors::pending_signal_error().unwrap_or_else(|| ClusterError::new_err(e))
        })?;
        Ok(PyClusterClient {
            client,
            owns_client,
            session: Some(session),
        })
    }

    /// The session's id.
    #[getter]
    fn cluster_session_id(&mut self) -> PyResult<i64> {
        Ok(self.session()?.cluster_session_id())
    }

    /// The leader's term.
    #[getter]
    fn leadership_term_id(&mut self) -> PyResult<i64> {
        Ok(self.session()?.leadership_term_id())
    }

    /// The leader's member id.
    #[getter]
    fn leader_member_id(&mut self) -> PyResult<i32> {
        Ok(self.session()?.leader_member_id())
    }

    /// Offers `payload`: the new position, or an `OfferResult`
    /// (BACK_PRESSURED, NOT_CONNECTED, ...) to offer again.
    fn offer(&mut self, py: Python<'_>, payload: &[u8]) -> PyResult<Py<PyAny>> {
        let value = match self.session()?.offer(payload) {
            Ok(position) => position,
            Err(e) => offer_code(e)?,
        };
        // Waiting for the committed count may have read a NewLeaderEvent.
        self.follow_leader(value > 0)?;
        crate::offer_result::to_py(py, value)
    }

    /// Exactly once: how many of the session's messages (numbered from 1 in
    /// the order offered) the cluster said are committed, applied once, in
    /// order, through any failover; None when the session does not number
    /// its messages. Still readable after the session ended.
    #[getter]
    fn committed(&mut self) -> PyResult<Option<i64>> {
        Ok(self.session()?.committed())
    }

    /// Exactly once: how many messages the session offered (the last one's
    /// number); None when the session does not number its messages.
    #[getter]
    fn offered(&mut self) -> PyResult<Option<i64>> {
        Ok(self.session()?.offered())
    }

    /// Messages sent and not yet committed (exactly once; 0 otherwise).
    #[getter]
    fn in_flight(&mut self) -> PyResult<usize> {
        Ok(self.session()?.in_flight())
    }

    /// Tells the cluster the session is alive; False if it could not go now.
    fn send_keep_alive(&mut self) -> PyResult<bool> {
        Ok(self.session()?.send_keep_alive())
    }

    /// Reads up to `limit` egress fragments; each message of the session
    /// goes to `handler(payload: bytes, timestamp: int)`. Raises
    /// `ClusterSessionClosedError` once the cluster ended the session.
    #[pyo3(signature = (handler, limit=10))]
    fn poll_egress(
        &mut self,
        py: Python<'_>,
        handler: Bound<'_, PyAny>,
        limit: usize,
    ) -> PyResult<usize> {
        let mut failure = None;
        // A handler that raises takes no more: the message it raised on is
        // delivered (Aeron's poll consumes it too), the later ones wait for
        // the next poll, and the exception goes to the caller.
        let result = self.session()?.poll_egress_controlled(
            |timestamp, payload| match handler.call1((PyBytes::new(py, payload), timestamp)) {
                Ok(_) => true,
                Err(e) => {
                    failure = Some(e);
                    false
                }
            },
            limit,
        );
        // A NewLeaderEvent just read: the ingress follows the new leader.
        if let Ok(n) = result {
            self.follow_leader(n > 0 || failure.is_some())?;
        }
        if let Some(e) = failure {
            return Err(e);
        }
        result.map_err(|ended| ended_error(py, ended))
    }

    /// Offers message `i` (`data[offsets[i]:offsets[i + 1]]`: any
    /// bytes-like data, int32 or int64 offsets one more than messages,
    /// Arrow's layout) for each, in order, as `offer` each: an
    /// `OfferBatchResult`, how many went and the code of the one refused
    /// (None once all went). The GIL
    /// is kept (a call is microseconds a hundred messages): another thread's
    /// call on this client waits rather than finding it borrowed, and the
    /// data cannot change under the offers. Fewer than all: the next was refused (back pressure, the
    /// exactly-once window full, a new leader being followed) and is to be
    /// offered again with the rest. Raises `ClusterSessionClosedError` once
    /// the cluster ended the session (nothing of the batch went).
    fn offer_batch(
        &mut self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let offsets = crate::buffer::offsets_column(offsets, "offer_batch: offsets")?;
        let session = self.session()?;
        let sent = with_bytes(data, |data| session.offer_batch(data, &offsets))?;
        let (n, refused) =
            sent.map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("offer_batch: {e}")))?;
        self.follow_leader(n > 0)?;
        match refused {
            Some(OfferError::Closed) if n == 0 => {
                let ended = self.session()?.ended().cloned();
                Err(match ended {
                    Some(ended) => ended_error(py, ended),
                    None => crate::errors::ClosedError::new_err(
                        "the cluster client's ingress is closed",
                    ),
                })
            }
            Some(
                e @ (OfferError::MaxPositionExceeded
                | OfferError::MessageTooLong { .. }
                | OfferError::StorageFull(_)
                | OfferError::Client(_)),
            ) if n == 0 => Err(crate::errors::offer_err(e)),
            None => crate::offer_result::batch_to_py(py, n, None),
            Some(e) => match offer_code(e) {
                Ok(code) => crate::offer_result::batch_to_py(py, n, Some(code)),
                // No code says it (too long, the client failed): raised now,
                // how many went before it on the exception.
                Err(err) => {
                    let _ = err.value(py).setattr("sent", n);
                    Err(err)
                }
            },
        }
    }

    /// Reads up to `limit` egress fragments (the GIL kept, as `offer_batch`) and returns
    /// the session's messages among them as one `SessionMessages` (columns:
    /// `data` and `offsets`, and per message the session id, the timestamp
    /// and the egress position after it; empty when none came). Raises
    /// `ClusterSessionClosedError` once the cluster ended the session, after
    /// the messages that came before the end were returned.
    #[pyo3(signature = (limit=256))]
    fn poll_egress_batch(&mut self, py: Python<'_>, limit: usize) -> PyResult<PySessionMessages> {
        let session = self.session()?;
        let mut out = SessionMessages::default();
        let result = session.poll_egress_batch(&mut out, limit);
        match result {
            Ok(_) => {
                self.follow_leader(!out.is_empty())?;
                Ok(PySessionMessages::new(out))
            }
            // What came before the end is the application's; the end is
            // raised by the next poll (it is kept).
            Err(_) if !out.is_empty() => Ok(PySessionMessages::new(out)),
            Err(ended) => Err(ended_error(py, ended)),
        }
    }

    /// Closes the session (the cluster logs the close) and the client it
    /// made (one handed in stays open).
    fn close(&mut self, py: Python<'_>) {
        if let Some(session) = self.session.take() {
            let (client, owns) = (&self.client, self.owns_client);
            gil::released(py, move || {
                session.close();
                if owns {
                    client.close();
                }
            });
        }
    }
}

/// Registers the class.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyClusterClient>()
}
