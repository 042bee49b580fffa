//! The `fc` channel parameter: which flow-control strategy a multicast or
//! multi-destination publication runs, and its options (Aeron's syntax).
//!
//! ```text
//! fc=max                      the fastest receiver paces (multicast default)
//! fc=min[,t:5s][,g:/N]        the slowest receiver paces; receivers silent for t are dropped;
//!                             the publication waits for N receivers before it counts as connected
//! fc=tagged,g:TAG[/N][,t:5s]  as min, over the receivers whose status messages carry gtag=TAG
//! ...,rrwm:M                  a retransmit covers at most M receiver windows
//! ```
//!
//! `t:` takes a URI duration (a bare number is nanoseconds, as everywhere in
//! Aeron's URIs). Aeron ignores an option it does not know and accepts
//! `g:TAG` on `min` (where the tag means nothing); sulis refuses an unknown
//! option, naming it, and accepts `g:TAG` on `min` too. `pref`, which
//! Aeron's default supplier refuses, is refused.

use crate::values::parse_duration_ns;

/// A flow-control strategy of a multicast or multi-destination publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowControlStrategy {
    /// The fastest receiver paces; slower ones may fall behind.
    Max,
    /// The slowest receiver paces.
    Min,
    /// The slowest receiver of one group (by tag) paces.
    Tagged,
}

impl FlowControlStrategy {
    /// The name in `fc=`.
    pub fn name(self) -> &'static str {
        match self {
            FlowControlStrategy::Max => "max",
            FlowControlStrategy::Min => "min",
            FlowControlStrategy::Tagged => "tagged",
        }
    }
}

/// A parsed `fc` value; `None` fields take the driver's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowControlParams {
    /// The strategy.
    pub strategy: FlowControlStrategy,
    /// `g:TAG`: the group tag receivers must carry (tagged).
    pub group_tag: Option<i64>,
    /// `g:.../N`: receivers needed before the publication counts as connected.
    pub group_min_size: Option<u32>,
    /// `t:`: a receiver silent this long is dropped (nanoseconds).
    pub receiver_timeout_ns: Option<u64>,
    /// `rrwm:`: receiver windows one retransmit may cover.
    pub retransmit_receiver_window_multiple: Option<u32>,
}

impl FlowControlParams {
    /// Parses an `fc` value.
    ///
    /// # Errors
    /// A reason naming the part at fault.
    pub fn parse(value: &str) -> Result<FlowControlParams, String> {
        let mut parts = value.split(',');
        let strategy = match parts.next().unwrap_or("") {
            "max" => FlowControlStrategy::Max,
            "min" => FlowControlStrategy::Min,
            "tagged" => FlowControlStrategy::Tagged,
            other => {
                return Err(format!(
                    "'{other}' is not a flow control; use max, min or tagged (options follow a comma, e.g. min,t:5s)"
                ))
            }
        };
        let mut fc = FlowControlParams {
            strategy,
            group_tag: None,
            group_min_size: None,
            receiver_timeout_ns: None,
            retransmit_receiver_window_multiple: None,
        };
        for option in parts {
            if option.is_empty() {
                return Err("has an empty option (a stray ',')".to_owned());
            }
            if let Some(t) = option.strip_prefix("t:") {
                fc.receiver_timeout_ns =
                    Some(parse_duration_ns(t).map_err(|e| format!("t:{t}: {e}"))?);
            } else if let Some(g) = option.strip_prefix("g:") {
                let (tag, size) = match g.split_once('/') {
                    Some((tag, size)) => (tag, Some(size)),
                    None => (g, None),
                };
                if tag.is_empty() && size.is_none() {
                    return Err("g: needs a group tag, a minimum group size, or both (g:TAG, g:/N, g:TAG/N)".into());
                }
                if !tag.is_empty() {
                    fc.group_tag = Some(tag.parse::<i64>().map_err(|_| {
                        format!("g:{g}: the group tag '{tag}' is not a 64-bit integer")
                    })?);
                }
                if let Some(size) = size {
                    fc.group_min_size = Some(size.parse::<u32>().map_err(|_| {
                        format!("g:{g}: the minimum group size '{size}' is not a whole number")
                    })?);
                }
            } else if let Some(m) = option.strip_prefix("rrwm:") {
                fc.retransmit_receiver_window_multiple = Some(
                    m.parse::<u32>()
                        .ok()
                        .filter(|&v| v > 0)
                        .ok_or_else(|| format!("rrwm:{m}: the retransmit receiver window multiple must be a positive whole number"))?,
                );
            } else {
                return Err(format!(
                    "'{option}' is not a flow control option; use t:<timeout>, g:<tag>/<min size> or rrwm:<multiple>"
                ));
            }
        }
        if strategy == FlowControlStrategy::Max
            && (fc.group_tag.is_some()
                || fc.group_min_size.is_some()
                || fc.receiver_timeout_ns.is_some())
        {
            return Err("max tracks no receivers: t: and g: belong to min or tagged".into());
        }
        Ok(fc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_parse_every_form_aeron_documents() {
        let max = FlowControlParams::parse("max").unwrap();
        assert_eq!(max.strategy, FlowControlStrategy::Max);
        assert_eq!(max.group_min_size, None);
        let min = FlowControlParams::parse("min,g:/3,t:5s").unwrap();
        assert_eq!(min.strategy, FlowControlStrategy::Min);
        assert_eq!(min.group_min_size, Some(3));
        assert_eq!(min.group_tag, None);
        assert_eq!(min.receiver_timeout_ns, Some(5_000_000_000));
        let tagged = FlowControlParams::parse("tagged,g:-7/2,t:250ms,rrwm:8").unwrap();
        assert_eq!(tagged.strategy, FlowControlStrategy::Tagged);
        assert_eq!(tagged.group_tag, Some(-7));
        assert_eq!(tagged.group_min_size, Some(2));
        assert_eq!(tagged.receiver_timeout_ns, Some(250_000_000));
        assert_eq!(tagged.retransmit_receiver_window_multiple, Some(8));
        // A bare number is nanoseconds, as in Aeron's URIs.
        assert_eq!(
            FlowControlParams::parse("min,t:1000")
                .unwrap()
                .receiver_timeout_ns,
            Some(1000)
        );
        assert_eq!(
            FlowControlParams::parse("tagged,g:99").unwrap().group_tag,
            Some(99)
        );
    }

    #[test]
    fn should_refuse_what_it_cannot_mean_naming_the_part() {
        for (value, words) in [
            ("pref", "'pref' is not a flow control"),
            ("fastest", "'fastest' is not a flow control"),
            ("min,", "empty option"),
            ("min,g:", "g: needs"),
            ("min,g:x/2", "'x' is not a 64-bit integer"),
            ("min,g:/-1", "'-1' is not a whole number"),
            ("min,t:soon", "t:soon"),
            ("min,rrwm:0", "rrwm:0"),
            ("min,q:1", "'q:1' is not a flow control option"),
            ("max,t:5s", "max tracks no receivers"),
        ] {
            let e = FlowControlParams::parse(value).unwrap_err();
            assert!(e.contains(words), "{value}: {e}");
        }
    }
}
