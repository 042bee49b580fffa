//! The cluster's settings from Python: `sulis._native.cluster_config` (every
//! effective setting and where it came from) and the context a node starts
//! with, both through the consensus module's options table.

use crate::errors::ConfigurationError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sulis_cluster::module::consensus_module::ConsensusModuleContext;
use sulis_protocol::options::Configured;

/// The cluster's settings: defaults, the `SULIS_CLUSTER_*` variables (and
/// `SULIS_DIR`), then `cluster_dir`, `driver_dir` and the keywords, through
/// the options table; checked together.
pub(crate) fn cluster_context(
    cluster_dir: Option<String>,
    driver_dir: Option<String>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<ConsensusModuleContext> {
    let mut ctx = ConsensusModuleContext::default();
    ctx.apply_env().map_err(ConfigurationError::new_err)?;
    for (name, value) in [("cluster_dir", cluster_dir), ("driver_dir", driver_dir)] {
        if let Some(v) = value {
            ctx.set_option(name, &v)
                .map_err(ConfigurationError::new_err)?;
        }
    }
    crate::options::apply_keywords(&mut ctx, options)?;
    ctx.conclude().map_err(ConfigurationError::new_err)?;
    Ok(ctx)
}

/// (name, value, source, environment variable, doc) per option.
type ConfigRows = Vec<(String, String, String, String, String)>;

/// The cluster's effective settings (defaults, `SULIS_CLUSTER_*`, then
/// keywords) as (name, value, source, environment variable, doc), without
/// starting a node.
#[pyfunction]
#[pyo3(signature = (cluster_dir=None, driver_dir=None, **options))]
pub fn cluster_config(
    cluster_dir: Option<String>,
    driver_dir: Option<String>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<ConfigRows> {
    Ok(crate::options::rows(&cluster_context(
        cluster_dir,
        driver_dir,
        options,
    )?))
}

/// Registers `cluster_config`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cluster_config, m)?)?;
    Ok(())
}
