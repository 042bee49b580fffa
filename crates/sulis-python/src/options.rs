//! Keyword arguments to a service's options table (`sulis_protocol::options`):
//! `sulis.MediaDriver(**options)`, `sulis.Archive(**options)` and their
//! `*_config` functions set options by name, as the flags and the
//! environment variables do.

use crate::errors::ConfigurationError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt};
use sulis_protocol::options::{Configured, OptionSpec};

/// The text an option's Python value stands for. Floats are seconds for
/// durations; a bare int for a duration is refused (is `5` seconds or
/// nanoseconds?) unless it is 0; anything else is passed on as `str(v)`.
fn value_text<C>(spec: Option<&OptionSpec<C>>, v: &Bound<'_, PyAny>) -> Result<String, String> {
    if let Ok(b) = v.extract::<bool>() {
        return Ok(b.to_string());
    }
    let is_duration = spec.is_some_and(|o| o.unit == "duration");
    if is_duration && v.is_instance_of::<PyInt>() {
        return match v.extract::<i64>() {
            Ok(0) => Ok("0".into()),
            _ => Err(format!(
                "a bare number is ambiguous for a duration; give seconds as a float ({v}.0) \
                 or a string with a unit ('{v}s', '{v}ms', '{v}ns')"
            )),
        };
    }
    if is_duration {
        if let Ok(f) = v.extract::<f64>() {
            if !(f.is_finite() && f >= 0.0) {
                return Err(format!(
                    "{v} is not a duration: seconds must be finite and not negative"
                ));
            }
            if f * 1e9 >= u64::MAX as f64 {
                return Err(format!("{v} seconds is too long a duration"));
            }
            return Ok(format!("{}ns", (f * 1e9).round() as u64));
        }
    }
    v.str().map(|t| t.to_string()).map_err(|e| e.to_string())
}

/// Sets each keyword in `options` (None: left as it is) through `C`'s table;
/// an error names the option and the value as the caller wrote them.
pub(crate) fn apply_keywords<C: Configured>(
    ctx: &mut C,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    let Some(opts) = options else {
        return Ok(());
    };
    for (k, v) in opts.iter() {
        if v.is_none() {
            continue;
        }
        let key: String = k.extract()?;
        let spec = C::table().iter().find(|o| o.name == key.replace('-', "_"));
        // Errors name the option and the value as the caller wrote them.
        let shown = v.str().map(|r| r.to_string()).unwrap_or_default();
        let text = value_text(spec, &v)
            .map_err(|e| ConfigurationError::new_err(format!("{key}={shown}: {e}")))?;
        ctx.set_option(&key, &text).map_err(|e| {
            let reason = e
                .strip_prefix(&format!("{key}={text}: "))
                .unwrap_or(&e)
                .to_string();
            if spec.is_some() {
                ConfigurationError::new_err(format!("{key}={shown}: {reason}"))
            } else {
                ConfigurationError::new_err(reason)
            }
        })?;
    }
    Ok(())
}

/// One option: (name, value, source, environment variable, doc).
pub type OptionRow = (String, String, String, String, String);

/// Every option as an [`OptionRow`].
pub(crate) fn rows<C: Configured>(ctx: &C) -> Vec<OptionRow> {
    ctx.describe_options()
        .into_iter()
        .map(|(o, v, s)| {
            (
                o.name.to_string(),
                v,
                s.name().to_string(),
                o.env.to_string(),
                o.doc.to_string(),
            )
        })
        .collect()
}
