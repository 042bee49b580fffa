//! `sulis.CountersReader` and the error-log reader: read-only views of a
//! driver's CnC file that work for a driver in any process.

use crate::errors::DriverTimeoutError;
use crate::gil;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::Path;
use sulis_concurrent::cnc::Cnc;
use sulis_concurrent::counters::CountersReader;
use sulis_concurrent::error_log::read_error_log;
use sulis_concurrent::loss_report::{
    read_loss_report as read_loss_report_buffer, LOSS_REPORT_FILE,
};
use sulis_concurrent::mapped_file::MappedFile;
use sulis_protocol::cnc_descriptor::{version_string, CNC_FILE};

pub(crate) fn open_cnc(dir: &str) -> PyResult<Cnc> {
    Cnc::open(&Path::new(dir).join(CNC_FILE))
        .map_err(|e| DriverTimeoutError::new_err(format!("no media driver in {dir}: {e}")))
}

/// Read-only view of a driver's counters.
#[pyclass(module = "sulis._native", name = "CountersReader", frozen)]
pub struct PyCountersReader {
    cnc: Cnc,
    reader: CountersReader,
    dir: String,
}

#[pymethods]
impl PyCountersReader {
    #[new]
    fn new(dir: &str) -> PyResult<Self> {
        let cnc = open_cnc(dir)?;
        let reader =
            CountersReader::new(cnc.counters_metadata_buffer(), cnc.counters_values_buffer());
        Ok(PyCountersReader {
            cnc,
            reader,
            dir: dir.to_string(),
        })
    }

    /// The driver directory.
    #[getter]
    fn dir(&self) -> String {
        self.dir.clone()
    }

    /// Process id of the driver that owns the directory.
    #[getter]
    fn pid(&self) -> i64 {
        self.cnc.header().pid
    }

    /// When that driver started (epoch ms).
    #[getter]
    fn start_time_ms(&self) -> i64 {
        self.cnc.header().start_timestamp_ms
    }

    /// CnC layout version as "major.minor.patch".
    #[getter]
    fn cnc_version(&self) -> String {
        version_string(self.cnc.version())
    }

    /// The driver's last heartbeat (epoch ms); a live driver beats every few ms.
    #[getter]
    fn driver_heartbeat_ms(&self) -> i64 {
        self.cnc.driver_heartbeat_ms()
    }

    /// Every allocated counter: dicts with id, type_id, label, value,
    /// registration_id, owner_id, reference_id and key (bytes).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let mut rows = Vec::new();
        let r = &self.reader;
        let mut err = None;
        r.for_each(|id, type_id, key, label| {
            let d = PyDict::new(py);
            let res = (|| -> PyResult<()> {
                d.set_item("id", id)?;
                d.set_item("type_id", type_id)?;
                d.set_item("label", label)?;
                d.set_item("value", r.counter_value(id))?;
                d.set_item("registration_id", r.counter_registration_id(id))?;
                d.set_item("owner_id", r.counter_owner_id(id))?;
                d.set_item("reference_id", r.counter_reference_id(id))?;
                d.set_item("key", pyo3::types::PyBytes::new(py, key))?;
                Ok(())
            })();
            match res {
                Ok(()) => rows.push(d),
                Err(e) => err = Some(e),
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok(rows),
        }
    }

    /// Value of counter `counter_id`.
    fn value(&self, counter_id: i32) -> PyResult<i64> {
        if !self.reader.is_valid_id(counter_id) {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "no counter id {counter_id}"
            )));
        }
        Ok(self.reader.counter_value(counter_id))
    }

    /// Label of counter `counter_id`.
    fn label(&self, counter_id: i32) -> PyResult<String> {
        if !self.reader.is_valid_id(counter_id) {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "no counter id {counter_id}"
            )));
        }
        Ok(self.reader.counter_label(counter_id))
    }
}

/// Distinct errors recorded by the driver in `dir`: a list of
/// (observation_count, first_ms, last_ms, text).
#[pyfunction]
pub fn read_errors(dir: &str) -> PyResult<Vec<(i32, i64, i64, String)>> {
    let cnc = open_cnc(dir)?;
    let mut out = Vec::new();
    read_error_log(cnc.error_log_buffer(), 0, |count, first, last, text| {
        out.push((count, first, last, text.to_string()))
    });
    Ok(out)
}

/// The loss report of the driver in `dir` (`loss-report.dat`): one dict per
/// image that lost data (observation_count, total_bytes_lost,
/// first_observation_ms, last_observation_ms, session_id, stream_id, channel,
/// source).
#[pyfunction]
pub fn read_loss_report<'py>(py: Python<'py>, dir: &str) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let path = Path::new(dir).join(LOSS_REPORT_FILE);
    let file = MappedFile::open(&path)
        .map_err(|e| DriverTimeoutError::new_err(format!("no loss report in {dir}: {e}")))?;
    let entries = read_loss_report_buffer(&file.buffer())
        .map_err(|e| PyValueError::new_err(format!("{}: {e}", path.display())))?;
    entries
        .into_iter()
        .map(|e| {
            let d = PyDict::new(py);
            d.set_item("observation_count", e.observation_count)?;
            d.set_item("total_bytes_lost", e.total_bytes_lost)?;
            d.set_item("first_observation_ms", e.first_observation_ms)?;
            d.set_item("last_observation_ms", e.last_observation_ms)?;
            d.set_item("session_id", e.session_id)?;
            d.set_item("stream_id", e.stream_id)?;
            d.set_item("channel", e.channel)?;
            d.set_item("source", e.source)?;
            Ok(d)
        })
        .collect()
}

/// Every counter type id with its short name (`sulis_protocol::counters`,
/// the one copy the driver allocates from).
#[pyfunction]
pub fn counter_types() -> Vec<(i32, &'static str)> {
    sulis_protocol::counters::COUNTER_TYPES.to_vec()
}

/// Every system counter: (id, label).
#[pyfunction]
pub fn system_counters() -> Vec<(i32, &'static str)> {
    sulis_protocol::counters::SystemCounter::ALL
        .iter()
        .map(|c| (*c as i32, c.label()))
        .collect()
}

/// Decodes the key of a stream counter (publisher, sender, receiver and
/// subscriber positions and limits): a dict with registration_id,
/// session_id, stream_id and channel, or None when `key` is not one.
#[pyfunction]
pub fn parse_stream_counter_key<'py>(
    py: Python<'py>,
    key: &[u8],
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(k) = sulis_protocol::counters::parse_stream_counter_key(key) else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("registration_id", k.registration_id)?;
    d.set_item("session_id", k.session_id)?;
    d.set_item("stream_id", k.stream_id)?;
    d.set_item("channel", k.channel)?;
    Ok(Some(d))
}

/// Whether counters of this type carry a stream key.
#[pyfunction]
pub fn is_stream_counter_type(type_id: i32) -> bool {
    sulis_protocol::counters::is_stream_counter_type(type_id)
}

/// The driver directory clients and tools use by default: `$SULIS_DIR`, else
/// `sulis-$USER` in /dev/shm (or the temporary directory without /dev/shm).
#[pyfunction]
pub fn default_dir() -> String {
    sulis_protocol::driver_dir::default_dir()
        .display()
        .to_string()
}

/// For tests of the driver's robustness: writes raw `(type_id, body)`
/// records into the to-driver ring buffer of the driver in `dir` with the
/// ring's own claim protocol, as a buggy or hostile client could; nothing
/// checks that they are valid commands. Returns how many were written
/// (it stops at the first the ring has no room for).
#[pyfunction]
pub fn _write_to_driver(
    py: Python<'_>,
    dir: &str,
    records: Vec<(i32, Vec<u8>)>,
) -> PyResult<usize> {
    let cnc = open_cnc(dir)?;
    let ring = sulis_concurrent::mpsc_ring_buffer::ManyToOneRingBuffer::new(cnc.to_driver_buffer())
        .map_err(PyValueError::new_err)?;
    gil::released(py, || -> Result<usize, String> {
        for (n, (type_id, body)) in records.iter().enumerate() {
            if !ring.write(*type_id, body)? {
                return Ok(n);
            }
        }
        Ok(records.len())
    })
    .map_err(PyValueError::new_err)
}

/// `BytesSent` as `BYTES_SENT` (Aeron's SystemCounterDescriptor names).
fn upper_snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Adds `SystemCounter`, an `IntEnum` of the driver's system counters by
/// their Aeron names (each member's doc is the counter's label), so Python
/// code and tests name a counter instead of copying its id.
pub(crate) fn register_system_counter(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let names: Vec<String> = sulis_protocol::counters::SystemCounter::ALL
        .iter()
        .map(|c| upper_snake(c.name()))
        .collect();
    let members: Vec<(&str, i64, &str)> = sulis_protocol::counters::SystemCounter::ALL
        .iter()
        .zip(&names)
        .map(|(c, n)| (n.as_str(), *c as i64, c.label()))
        .collect();
    crate::int_enum::add_int_enum(
        m,
        "SystemCounter",
        "The media driver's system counters (counter id = member value); a member's doc is its label.",
        &members,
    )?;
    Ok(())
}
