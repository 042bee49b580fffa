//! Shared pieces of the native sulis benchmarks (`ipc-throughput`,
//! `ipc-latency`, `udp-throughput`, `udp-latency`).
//!
//! Each benchmark binary is one command: the parent process runs an embedded
//! media driver and one side of the exchange, and re-executes itself with
//! `--role ...` for the other side, so the two sides are two processes. Over
//! IPC they share the parent's driver directory under `/dev/shm`; over UDP the
//! child launches a driver of its own and the two drivers talk over loopback.
//! The parent reads the child's stdout (one line per event) and prints the
//! figures; the last line it prints is `RESULT {json}` for scripts
//! (bench/ipc_*.py, bench/udp_*.py).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};
use sulis_client::{Client, ClientContext};
use sulis_driver::{DriverContext, MediaDriver, ThreadingMode};

/// Exits with a message when this is not an optimised build.
pub fn refuse_debug_build(name: &str) {
    if cfg!(debug_assertions) {
        eprintln!(
            "{name}: refusing to benchmark a debug build (debug assertions are on).\n\
             Build it with: cargo build --release -p sulis-bench"
        );
        std::process::exit(2);
    }
}

/// `--key value` and `--flag` arguments.
pub struct Args {
    values: HashMap<String, String>,
    flags: Vec<String>,
    /// Everything, as given (re-passed to the child).
    pub raw: Vec<String>,
}

impl Args {
    /// Parses `std::env::args()`; `flag_names` take no value.
    pub fn parse(flag_names: &[&str]) -> Args {
        let raw: Vec<String> = std::env::args().skip(1).collect();
        let mut values = HashMap::new();
        let mut flags = Vec::new();
        let mut i = 0;
        while i < raw.len() {
            let a = &raw[i];
            let Some(key) = a.strip_prefix("--") else {
                die(&format!("unexpected argument {a:?}"));
            };
            if let Some((k, v)) = key.split_once('=') {
                values.insert(k.to_string(), v.to_string());
            } else if flag_names.contains(&key) {
                flags.push(key.to_string());
            } else {
                let Some(v) = raw.get(i + 1) else {
                    die(&format!("--{key} needs a value"))
                };
                values.insert(key.to_string(), v.clone());
                i += 1;
            }
            i += 1;
        }
        Args { values, flags, raw }
    }

    /// True when `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    /// `--name` as a string.
    pub fn str(&self, name: &str, default: &str) -> String {
        self.values
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }

    /// `--name` parsed.
    pub fn get<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        match self.values.get(name) {
            None => default,
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| die(&format!("--{name}: cannot parse {v:?}"))),
        }
    }

    /// `--name` given at all.
    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
}

/// Prints to stderr and exits 2.
pub fn die(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(2)
}

/// Pins the calling thread to `cpu` (threads it starts afterwards inherit the mask).
pub fn pin_current_thread(cpu: usize) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!(
                "sched_setaffinity(cpu {cpu}): {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Number of CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// A fresh driver directory under /dev/shm (or the temp dir).
pub fn bench_dir(tag: &str, run: usize) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("sulis-bench-{tag}-{}-{run}", std::process::id()))
}

/// Launches an embedded driver (SHARED threading) in `dir`.
pub fn launch_driver(dir: &Path, idle: &str, ipc_term_length: &str) -> MediaDriver {
    launch_driver_with(
        dir,
        "shared",
        idle,
        &[("ipc_term_buffer_length".into(), ipc_term_length.into())],
    )
}

/// Launches an embedded driver in `dir` with a threading mode, an idle
/// strategy and further driver options by name (as `sulis driver --print-config`
/// lists them: `term_buffer_length`, `send_data_loss`...).
pub fn launch_driver_with(
    dir: &Path,
    threading: &str,
    idle: &str,
    options: &[(String, String)],
) -> MediaDriver {
    let mut ctx = DriverContext::default();
    ctx.dir = dir.to_path_buf();
    ctx.threading_mode = ThreadingMode::parse(threading).unwrap_or_else(|e| die(&e));
    ctx.set("idle_strategy", idle).unwrap_or_else(|e| die(&e));
    for (k, v) in options {
        ctx.set(k, v).unwrap_or_else(|e| die(&e));
    }
    ctx.dir_delete_on_shutdown = true;
    MediaDriver::launch(ctx).unwrap_or_else(|e| {
        die(&format!(
            "cannot launch the media driver in {}: {e}",
            dir.display()
        ))
    })
}

/// Parses `k=v,k=v` (empty: none) into pairs.
pub fn parse_options(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => die(&format!("driver option {kv:?} is not name=value")),
        })
        .collect()
}

/// What a client thread does when it could not progress (a refused offer,
/// an empty poll): `spin` (a CPU pause hint), `yield` (`sched_yield`), or
/// `backoff` (the driver's backoff: 10 spins, 5 yields, then sleeps growing
/// from 1 µs to 1 ms, reset by progress).
pub struct ClientIdle {
    mode: u8,
    idler: sulis_concurrent::idle::Idler,
}

impl ClientIdle {
    /// Parses `spin`, `yield` or `backoff` (exits on anything else).
    pub fn parse(s: &str) -> ClientIdle {
        let mode = match s {
            "spin" => 0,
            "yield" => 1,
            "backoff" => 2,
            _ => die(&format!(
                "client idle {s:?}: expected spin, yield or backoff"
            )),
        };
        ClientIdle {
            mode,
            idler: sulis_concurrent::idle::IdleStrategy::backoff().idler(),
        }
    }

    /// Called when nothing could be done.
    #[inline]
    pub fn idle(&mut self) {
        match self.mode {
            0 => std::hint::spin_loop(),
            1 => std::thread::yield_now(),
            _ => self.idler.idle(0),
        }
    }

    /// Called after progress.
    #[inline]
    pub fn reset(&mut self) {
        if self.mode == 2 {
            self.idler.reset();
        }
    }
}

/// A UDP port free on `host` right now (the kernel's pick).
pub fn free_udp_port(host: &str) -> u16 {
    let s = std::net::UdpSocket::bind((host, 0))
        .unwrap_or_else(|e| die(&format!("cannot bind a UDP socket on {host}: {e}")));
    s.local_addr().map(|a| a.port()).unwrap_or(0)
}

/// `name=value` of the driver's system counters `ids` (labels shortened), read through `client`.
pub fn system_counters(client: &Client, ids: &[(i32, &str)]) -> Vec<(String, i64)> {
    let reader = client.counters();
    ids.iter()
        .map(|&(id, name)| (name.to_string(), reader.counter_value(id)))
        .collect()
}

/// Counters of a sending driver worth printing after a UDP run (Aeron's system counter ids).
pub const SENDER_COUNTERS: &[(i32, &str)] = &[
    (0, "bytes_sent"),
    (6, "naks_received"),
    (8, "status_messages_received"),
    (9, "heartbeats_sent"),
    (11, "retransmits_sent"),
    (16, "short_sends"),
    (18, "sender_flow_control_limits"),
];

/// Counters of a receiving driver worth printing after a UDP run.
pub const RECEIVER_COUNTERS: &[(i32, &str)] = &[
    (1, "bytes_received"),
    (5, "naks_sent"),
    (7, "status_messages_sent"),
    (10, "heartbeats_received"),
    (12, "flow_control_under_runs"),
    (13, "flow_control_over_runs"),
    (14, "invalid_packets"),
];

/// `name=value name=value` for a log line.
pub fn counters_text(c: &[(String, i64)]) -> String {
    c.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `{"name": value, ...}` for the RESULT line.
pub fn counters_json(c: &[(String, i64)]) -> String {
    format!(
        "{{{}}}",
        c.iter()
            .map(|(k, v)| format!("\"{k}\": {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Parses `name=value ...` back (the child's counters line).
pub fn parse_counters_text(s: &str) -> Vec<(String, i64)> {
    s.split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Connects a client to the driver in `dir`.
pub fn connect(dir: &Path, name: &str) -> Client {
    Client::connect(ClientContext {
        dir: dir.to_path_buf(),
        driver_timeout: Duration::from_secs(10),
        name: name.into(),
    })
    .unwrap_or_else(|e| {
        die(&format!(
            "cannot connect to the driver in {}: {e}",
            dir.display()
        ))
    })
}

/// Re-executes this binary with `args` (stdout piped back, stderr inherited).
pub fn spawn_self(args: &[String]) -> (Child, BufReader<ChildStdout>) {
    let exe = std::env::current_exe().unwrap_or_else(|e| die(&format!("current_exe: {e}")));
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| die(&format!("cannot start the child process: {e}")));
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

/// Reads one line from the child; `None` at end of stream.
pub fn read_line(r: &mut BufReader<ChildStdout>) -> Option<String> {
    let mut s = String::new();
    match r.read_line(&mut s) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(s.trim_end().to_string()),
    }
}

/// Spins (with a short sleep) until `cond` holds or `timeout` passes.
pub fn await_cond(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() > deadline {
            die(&format!("timed out after {timeout:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Median of `v` (which it sorts); NaN when empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A minimal JSON writer for the `RESULT` line.
#[derive(Default)]
pub struct Json(Vec<String>);

impl Json {
    /// Adds a string field.
    pub fn s(mut self, k: &str, v: &str) -> Self {
        self.0.push(format!(
            "\"{k}\": \"{}\"",
            v.replace('\\', "\\\\").replace('"', "\\\"")
        ));
        self
    }
    /// Adds a number field.
    pub fn n(mut self, k: &str, v: f64) -> Self {
        self.0.push(if v.is_finite() {
            format!("\"{k}\": {v}")
        } else {
            format!("\"{k}\": null")
        });
        self
    }
    /// Adds an array of numbers.
    pub fn arr(mut self, k: &str, v: &[f64]) -> Self {
        let items: Vec<String> = v
            .iter()
            .map(|x| {
                if x.is_finite() {
                    format!("{x}")
                } else {
                    "null".into()
                }
            })
            .collect();
        self.0.push(format!("\"{k}\": [{}]", items.join(", ")));
        self
    }
    /// Adds a boolean.
    pub fn b(mut self, k: &str, v: bool) -> Self {
        self.0.push(format!("\"{k}\": {v}"));
        self
    }
    /// Adds raw JSON.
    pub fn raw(mut self, k: &str, v: &str) -> Self {
        self.0.push(format!("\"{k}\": {v}"));
        self
    }
    /// The object.
    pub fn build(&self) -> String {
        format!("{{{}}}", self.0.join(", "))
    }
}

/// Groups digits: 12345678 -> "12,345,678".
pub fn thousands(v: f64) -> String {
    let s = format!("{:.0}", v);
    let (sign, digits) = if let Some(d) = s.strip_prefix('-') {
        ("-", d)
    } else {
        ("", s.as_str())
    };
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}
