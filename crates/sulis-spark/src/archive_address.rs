//! How a process reaches the archive: its media driver and control
//! channels (options `driverDir`, `controlChannel`, `controlStreamId`,
//! `controlResponseChannel`, `controlResponseStreamId`, `messageTimeout`).

use crate::option_values::{bad, repr, OptionMap};
use crate::PlanError;

/// An archive as the options name it.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveAddress {
    pub driver_dir: Option<String>,
    pub control_channel: String,
    pub control_stream_id: i32,
    pub response_channel: String,
    /// None: a stream of this process' own.
    pub response_stream_id: Option<i32>,
    pub message_timeout_s: f64,
}

impl Default for ArchiveAddress {
    fn default() -> Self {
        ArchiveAddress {
            driver_dir: None,
            control_channel: "aeron:ipc".into(),
            control_stream_id: 10,
            response_channel: "aeron:ipc".into(),
            response_stream_id: None,
            message_timeout_s: 10.0,
        }
    }
}

impl ArchiveAddress {
    /// Names the archive in error messages.
    pub fn describe(&self) -> String {
        let driver = self
            .driver_dir
            .as_deref()
            .unwrap_or("the default driver directory");
        format!(
            "the archive at {} stream {} (driver {driver})",
            self.control_channel, self.control_stream_id
        )
    }

    /// The archive the options name. A UDP control channel needs a
    /// response channel: nothing default would reach every host.
    pub fn from_options(options: &OptionMap) -> Result<ArchiveAddress, PlanError> {
        let control = options
            .channel("controlChannel", Some("aeron:ipc"))?
            .unwrap_or_default();
        let response_default = control.starts_with("aeron:ipc").then_some("aeron:ipc");
        let Some(response) = options.channel("controlResponseChannel", response_default)? else {
            let host = endpoint_host(&control).unwrap_or_else(|| "<archive host>".into());
            return Err(bad(format!(
                "option controlResponseChannel: required with a UDP controlChannel ({}): the channel the archive answers on. One value serves every host: a response channel, aeron:udp?control-mode=response|control={host}:<a free port there> (the archive answers over a connection each executor's driver opens; the same for replayChannel with another port), or aeron:udp?endpoint=<this host>:0",
                repr(&control)
            )));
        };
        let driver_dir = options
            .get("driverDir")
            .filter(|d| !d.is_empty())
            .map(str::to_string);
        Ok(ArchiveAddress {
            driver_dir,
            control_stream_id: options
                .stream_id("controlStreamId", Some(10))?
                .unwrap_or(10),
            control_channel: control,
            response_channel: response,
            response_stream_id: options.stream_id("controlResponseStreamId", None)?,
            message_timeout_s: options.seconds("messageTimeout", 10.0)?,
        })
    }
}

/// The host of a channel's `endpoint`, if it has one.
fn endpoint_host(channel: &str) -> Option<String> {
    let params = channel.split_once('?')?.1;
    params.split('|').find_map(|part| {
        let (key, value) = part.split_once('=')?;
        (key == "endpoint" && value.contains(':'))
            .then(|| value.rsplit_once(':').map(|(h, _)| h.to_string()))
            .flatten()
    })
}
