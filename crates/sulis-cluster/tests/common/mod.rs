//! What the crate's integration tests share: a free UDP port, a media
//! driver set up for tests and a client on it.

#![allow(dead_code)] // each test binary uses its own part

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::time::Duration;
use sulis_client::{Client, ClientContext};
use sulis_driver::{DriverContext, MediaDriver, ThreadingMode};

/// A UDP port free on loopback now, from below the kernel's ephemeral range
/// (32768 up) and the block the Python suite uses (21000 up): a port the
/// kernel picked for a bound-and-released probe may be the next `:0` bind
/// of a driver in a test running beside (a CI run saw a member's log
/// destination fail with "Address already in use"), while these are picked
/// by nobody else. Each call of this process takes the next one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 12_000;
    const SIZE: u32 = 9_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    // Runs one after another start at different places.
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id() % SIZE,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    for _ in 0..SIZE {
        let port = (LOW + NEXT.fetch_add(1, Ordering::AcqRel) % SIZE) as u16;
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free UDP port on 127.0.0.1 in {LOW}-{}", LOW + SIZE - 1)
}

/// A media driver in `dir`: shared threading, sparse term files, a 10 ms
/// timer, its directory deleted when it stops.
pub fn launch_driver(dir: PathBuf) -> MediaDriver {
    let mut ctx = DriverContext::default();
    ctx.dir = dir;
    ctx.threading_mode = ThreadingMode::Shared;
    ctx.term_buffer_sparse_file = true;
    ctx.dir_delete_on_shutdown = true;
    ctx.timer_interval_ns = 10_000_000;
    MediaDriver::launch(ctx).unwrap()
}

/// A client named `name` on the driver in `dir`.
pub fn connect(dir: &Path, name: &str) -> Client {
    Client::connect(ClientContext {
        dir: dir.to_path_buf(),
        driver_timeout: Duration::from_secs(10),
        name: name.into(),
        interrupt: None,
    })
    .unwrap()
}

/// The valid snapshot entries of the recording log in `cluster_dir`:
/// (service id, log position).
pub fn snapshot_entries(cluster_dir: &Path) -> Vec<(i32, i64)> {
    let bytes = std::fs::read(cluster_dir.join("recording.log")).unwrap();
    sulis_protocol::cluster::recording_log::decode(&bytes)
        .unwrap()
        .entries
        .into_iter()
        .map(|l| l.entry)
        .filter(|e| e.entry_type == 1 && e.is_valid)
        .map(|e| (e.service_id, e.log_position))
        .collect()
}
