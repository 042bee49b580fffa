//! The command-and-control file, as seen by the driver (which creates it)
//! and by clients and tools (which map it). Layout: [`sulis_protocol::cnc_descriptor`].

use crate::mapped_file::MappedFile;
use crate::AtomicBuffer;
use std::io;
use std::path::{Path, PathBuf};
use sulis_protocol::cnc_descriptor::*;

/// A mapped `cnc.dat`.
pub struct Cnc {
    file: MappedFile,
    layout: CncLayout,
}

/// Header values written by the driver.
#[derive(Clone, Copy, Debug)]
pub struct CncHeader {
    /// Client liveness timeout, ns.
    pub client_liveness_timeout_ns: i64,
    /// Driver start time, epoch ms.
    pub start_timestamp_ms: i64,
    /// Driver pid.
    pub pid: i64,
    /// Page size of the file.
    pub page_size: usize,
}

impl Cnc {
    /// Creates the file (it must not exist) with every section zeroed and the
    /// header filled in, except the version: call [`Cnc::signal_ready`] once the
    /// driver can serve clients.
    pub fn create(path: &Path, layout: CncLayout, header: CncHeader) -> io::Result<Cnc> {
        let file = MappedFile::create(path, layout.file_length(header.page_size), false)?;
        let b = file.buffer();
        b.put_i32(
            TO_DRIVER_BUFFER_LENGTH_FIELD_OFFSET,
            layout.to_driver_len as i32,
        );
        b.put_i32(
            TO_CLIENTS_BUFFER_LENGTH_FIELD_OFFSET,
            layout.to_clients_len as i32,
        );
        b.put_i32(
            COUNTERS_METADATA_BUFFER_LENGTH_FIELD_OFFSET,
            layout.counters_metadata_len as i32,
        );
        b.put_i32(
            COUNTERS_VALUES_BUFFER_LENGTH_FIELD_OFFSET,
            layout.counters_values_len as i32,
        );
        b.put_i32(
            ERROR_LOG_BUFFER_LENGTH_FIELD_OFFSET,
            layout.error_log_len as i32,
        );
        b.put_i64(
            CLIENT_LIVENESS_TIMEOUT_FIELD_OFFSET,
            header.client_liveness_timeout_ns,
        );
        b.put_i64(START_TIMESTAMP_FIELD_OFFSET, header.start_timestamp_ms);
        b.put_i64(PID_FIELD_OFFSET, header.pid);
        b.put_i32(FILE_PAGE_SIZE_FIELD_OFFSET, header.page_size as i32);
        Ok(Cnc { file, layout })
    }

    /// Publishes the version: clients may connect from now on.
    pub fn signal_ready(&self) {
        self.file
            .buffer()
            .put_i32_ordered(CNC_VERSION_FIELD_OFFSET, CNC_VERSION);
    }

    /// Maps an existing file. Fails with a message naming the file when it is
    /// not ready (version 0), of another major version, or inconsistent.
    pub fn open(path: &Path) -> Result<Cnc, String> {
        let file = MappedFile::open(path).map_err(|e| e.to_string())?;
        if file.len() < HEADER_LENGTH {
            return Err(format!(
                "{} is not a sulis cnc file: only {} bytes",
                path.display(),
                file.len()
            ));
        }
        let b = file.buffer();
        let version = b.get_i32_volatile(CNC_VERSION_FIELD_OFFSET);
        if version == 0 {
            return Err(format!(
                "{} is not ready yet (driver starting)",
                path.display()
            ));
        }
        if major(version) != major(CNC_VERSION) {
            return Err(format!(
                "{}: cnc version {} is not compatible with {}",
                path.display(),
                version_string(version),
                version_string(CNC_VERSION)
            ));
        }
        let layout = CncLayout::from_header(b.slice(0, HEADER_LENGTH), file.len())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Cnc { file, layout })
    }

    fn section(&self, offset: usize, len: usize) -> AtomicBuffer {
        self.file.buffer().view(offset, len)
    }

    /// Path of the file.
    pub fn path(&self) -> PathBuf {
        self.file.path().to_path_buf()
    }

    /// Section lengths.
    pub fn layout(&self) -> CncLayout {
        self.layout
    }

    /// Version field.
    pub fn version(&self) -> i32 {
        self.file
            .buffer()
            .get_i32_volatile(CNC_VERSION_FIELD_OFFSET)
    }

    /// Header fields.
    pub fn header(&self) -> CncHeader {
        let b = self.file.buffer();
        CncHeader {
            client_liveness_timeout_ns: b.get_i64(CLIENT_LIVENESS_TIMEOUT_FIELD_OFFSET),
            start_timestamp_ms: b.get_i64(START_TIMESTAMP_FIELD_OFFSET),
            pid: b.get_i64(PID_FIELD_OFFSET),
            page_size: b.get_i32(FILE_PAGE_SIZE_FIELD_OFFSET) as usize,
        }
    }

    /// The to-driver ring buffer (trailer included).
    pub fn to_driver_buffer(&self) -> AtomicBuffer {
        self.section(self.layout.to_driver_offset(), self.layout.to_driver_len)
    }

    /// The to-clients broadcast buffer (trailer included).
    pub fn to_clients_buffer(&self) -> AtomicBuffer {
        self.section(self.layout.to_clients_offset(), self.layout.to_clients_len)
    }

    /// Counter metadata.
    pub fn counters_metadata_buffer(&self) -> AtomicBuffer {
        self.section(
            self.layout.counters_metadata_offset(),
            self.layout.counters_metadata_len,
        )
    }

    /// Counter values.
    pub fn counters_values_buffer(&self) -> AtomicBuffer {
        self.section(
            self.layout.counters_values_offset(),
            self.layout.counters_values_len,
        )
    }

    /// Error log.
    pub fn error_log_buffer(&self) -> AtomicBuffer {
        self.section(self.layout.error_log_offset(), self.layout.error_log_len)
    }

    /// The driver's last heartbeat (epoch ms), from the to-driver trailer.
    pub fn driver_heartbeat_ms(&self) -> i64 {
        let b = self.to_driver_buffer();
        let capacity = b.capacity() - crate::mpsc_ring_buffer::TRAILER_LENGTH;
        b.get_i64_volatile(capacity + crate::mpsc_ring_buffer::CONSUMER_HEARTBEAT_OFFSET)
    }
}

/// Milliseconds since the Unix epoch.
pub fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
