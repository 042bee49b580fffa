//! The cluster's Python exceptions, and an offer's error as Aeron's code:
//! what the node (`cluster.rs`), the client (`cluster_client.rs`) and the
//! tools (`cluster_tool.rs`) share, so none of them imports another.

use crate::errors::{offer_err, SulisError};
use pyo3::create_exception;
use pyo3::prelude::*;
use sulis_client::OfferError;

create_exception!(
    sulis,
    ClusterError,
    SulisError,
    "The cluster refused, failed or ended something; the message says what and where."
);

create_exception!(
    sulis,
    ClusterSessionClosedError,
    ClusterError,
    "The cluster ended the session: `code` is the SessionEvent code (4 CLOSED, 1 ERROR, ...), `detail` why."
);

/// An offer's error as Aeron's code (`OfferResult`); raised if it has none.
pub(crate) fn offer_code(e: OfferError) -> PyResult<i64> {
    Ok(match e {
        OfferError::NotConnected => -1,
        OfferError::BackPressured => -2,
        OfferError::AdminAction => -3,
        OfferError::Closed => -4,
        OfferError::MaxPositionExceeded => -5,
        other => return Err(offer_err(other)),
    })
}

/// Registers the exceptions.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ClusterError", m.py().get_type::<ClusterError>())?;
    m.add(
        "ClusterSessionClosedError",
        m.py().get_type::<ClusterSessionClosedError>(),
    )?;
    Ok(())
}
