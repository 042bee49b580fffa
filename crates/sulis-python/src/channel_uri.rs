//! `sulis.ChannelUri`: a parsed, validated channel URI that builds others
//! (`with_param`, `without`) instead of strings being glued together; the
//! Rust `sulis_protocol::uri::ChannelUri` underneath, so a parameter is
//! checked by the same rules the driver applies.

use crate::errors::ConfigurationError;
use pyo3::prelude::*;
use sulis_protocol::uri::ChannelUri;

fn config_err(e: impl ToString) -> PyErr {
    ConfigurationError::new_err(e.to_string())
}

/// A channel URI (``aeron:udp?endpoint=host:40123|term-length=64k``),
/// parsed and checked; ``str()`` is its canonical form. Raises
/// ConfigurationError naming the part at fault.
#[pyclass(module = "sulis._native", name = "ChannelUri", frozen, eq, hash)]
pub struct PyChannelUri {
    uri: ChannelUri,
    /// The canonical form: what equality and the hash go by.
    text: String,
}

impl PartialEq for PyChannelUri {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl std::hash::Hash for PyChannelUri {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state)
    }
}

impl PyChannelUri {
    fn of(uri: ChannelUri) -> Self {
        let text = uri.to_string();
        PyChannelUri { uri, text }
    }
}

#[pymethods]
impl PyChannelUri {
    #[new]
    fn new(uri: &str) -> PyResult<Self> {
        ChannelUri::parse(uri).map(Self::of).map_err(config_err)
    }

    /// ``"ipc"`` or ``"udp"``.
    #[getter]
    fn media(&self) -> &'static str {
        self.uri.media().as_str()
    }

    /// True for an ``aeron-spy:`` URI.
    #[getter]
    fn is_spy(&self) -> bool {
        self.uri.is_spy()
    }

    /// The parameters as a dict of their raw text, in the URI's order.
    #[getter]
    fn params(&self) -> Vec<(String, String)> {
        self.uri
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A parameter's raw text, or None.
    fn get(&self, key: &str) -> Option<String> {
        self.uri.get(key).map(str::to_string)
    }

    /// This URI with ``key=value`` (replacing any ``key`` it has), checked.
    fn with_param(&self, key: &str, value: &Bound<'_, PyAny>) -> PyResult<Self> {
        let text = match value.extract::<bool>() {
            Ok(b) => b.to_string(),
            Err(_) => value.str()?.to_string(),
        };
        self.uri.with(key, &text).map(Self::of).map_err(config_err)
    }

    /// This URI with ``key=value`` unless it has ``key`` already.
    fn with_default(&self, key: &str, value: &Bound<'_, PyAny>) -> PyResult<Self> {
        if self.uri.get(key).is_some() {
            return Ok(Self::of(self.uri.clone()));
        }
        self.with_param(key, value)
    }

    /// This URI without the parameters ``keys``.
    #[pyo3(signature = (*keys))]
    fn without(&self, keys: Vec<String>) -> PyResult<Self> {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.uri.without(&keys).map(Self::of).map_err(config_err)
    }

    fn __str__(&self) -> &str {
        &self.text
    }

    fn __repr__(&self) -> String {
        format!("ChannelUri({:?})", self.text)
    }
}
