//! The `sulis._native` extension module: Python classes over the Rust core.
//!
//! Every hot path (offer, poll, batch copy) runs in Rust; blocking calls
//! (connecting, adding resources, closing) release the GIL.

mod archive;
mod args;
mod assembler;
mod batch;
mod buffer;
mod channel_uri;
mod client;
mod cluster_client;
mod cluster_config;
mod cluster_error;
mod cluster_node;
mod cluster_service;
mod cluster_tool;
mod counters;
mod driver;
mod errors;
mod gil;
mod guard;
mod image;
mod int_enum;
mod offer_result;
mod options;
mod publication;
mod recording_files;
mod session_messages;
mod spark;
mod spark_error;
mod spark_planner;
mod spark_range;
mod spark_reader;
mod spark_rows;
mod spark_sink;
mod subscription;

use pyo3::prelude::*;

/// Parses and validates a channel URI; returns its canonical form.
/// Raises ConfigurationError naming the offending part.
#[pyfunction]
fn parse_channel(uri: &str) -> PyResult<String> {
    sulis_protocol::uri::ChannelUri::parse(uri)
        .map(|u| u.to_string())
        .map_err(|e| errors::ConfigurationError::new_err(e.to_string()))
}

/// Parameters of a channel URI as a dict of raw strings.
#[pyfunction]
fn channel_params(uri: &str) -> PyResult<Vec<(String, String)>> {
    let u = sulis_protocol::uri::ChannelUri::parse(uri)
        .map_err(|e| errors::ConfigurationError::new_err(e.to_string()))?;
    Ok(u.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

/// What an archive tells a stream by: stream id, media and the parameters
/// that select what is received (endpoint, interface, control, session-id,
/// tags); two channels with the same key carry the same stream.
#[pyfunction]
fn recording_key(uri: &str, stream_id: i32) -> PyResult<String> {
    sulis_protocol::archive::channel::recording_key(uri, stream_id)
        .map_err(|e| errors::ConfigurationError::new_err(e.to_string()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    archive::register(m)?;
    cluster_error::register(m)?;
    cluster_config::register(m)?;
    cluster_node::register(m)?;
    cluster_service::register(m)?;
    cluster_client::register(m)?;
    spark::register(m)?;
    // The sources' and sinks' waits end on a signal as the clients' do.
    sulis_spark::interrupt::install(errors::interrupt_check());
    m.add_function(wrap_pyfunction!(cluster_tool::read_recording_log, m)?)?;
    m.add_function(wrap_pyfunction!(cluster_tool::recovery_plan, m)?)?;
    m.add_function(wrap_pyfunction!(cluster_tool::set_cluster_toggle, m)?)?;
    m.add_function(wrap_pyfunction!(cluster_tool::purge_cluster_log, m)?)?;
    m.add_function(wrap_pyfunction!(cluster_tool::cluster_mark_files, m)?)?;
    m.add_function(wrap_pyfunction!(cluster_tool::query_cluster_members, m)?)?;
    m.add_function(wrap_pyfunction!(
        cluster_tool::invalidate_latest_snapshot,
        m
    )?)?;
    m.add_class::<driver::PyMediaDriver>()?;
    m.add_class::<client::PyClient>()?;
    m.add_class::<subscription::PySubscription>()?;
    m.add_class::<image::PyImage>()?;
    m.add_class::<image::PyHeader>()?;
    m.add_class::<batch::PyBatch>()?;
    m.add_class::<batch::PyColumn>()?;
    m.add_class::<session_messages::PySessionMessages>()?;
    m.add_class::<assembler::PyFragmentAssembler>()?;
    m.add_class::<recording_files::PyRecordingFileReader>()?;
    m.add_class::<counters::PyCountersReader>()?;
    m.add_class::<channel_uri::PyChannelUri>()?;
    counters::register_system_counter(m)?;
    m.add_function(wrap_pyfunction!(counters::read_errors, m)?)?;
    m.add_function(wrap_pyfunction!(counters::read_loss_report, m)?)?;
    m.add_function(wrap_pyfunction!(counters::counter_types, m)?)?;
    m.add_function(wrap_pyfunction!(counters::system_counters, m)?)?;
    m.add_function(wrap_pyfunction!(counters::parse_stream_counter_key, m)?)?;
    m.add_function(wrap_pyfunction!(counters::is_stream_counter_type, m)?)?;
    m.add_function(wrap_pyfunction!(counters::default_dir, m)?)?;
    m.add_function(wrap_pyfunction!(counters::_write_to_driver, m)?)?;
    m.add_function(wrap_pyfunction!(driver::driver_config, m)?)?;
    m.add_function(wrap_pyfunction!(driver::active_driver, m)?)?;
    m.add_function(wrap_pyfunction!(parse_channel, m)?)?;
    m.add_function(wrap_pyfunction!(channel_params, m)?)?;
    m.add_function(wrap_pyfunction!(recording_key, m)?)?;
    offer_result::register(m)?;
    publication::register(m)?; // its raw `offer` returns OfferResult members
    m.add(
        "build_profile",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("CNC_FILE", sulis_protocol::cnc_descriptor::CNC_FILE)?;
    Ok(())
}
