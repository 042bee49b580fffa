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
//!
//! Nothing is left behind on any exit path: [`init_process`] (first call of
//! every `main`) takes SIGINT/SIGTERM/SIGHUP on a thread of its own, and
//! [`die`] and that thread both run [`cleanup`], which stops the registered
//! child process and removes the registered driver directories. A child
//! started by [`spawn_self`] gets SIGTERM when its parent dies
//! (`PR_SET_PDEATHSIG`), so it cleans up too when the parent is killed.

use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
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

/// A child role (or `main`) by its `--role` name, for [`run_main`].
pub type Role = (&'static str, fn(&Args));

/// The start of every binary's `main`: refuses a debug build, takes the
/// signals ([`init_process`]), parses the options ([`Args::parse`]; `--quick`
/// and `--help` are known to every binary), prints `usage` for `--help` and
/// runs the function of `--role` (`main` when none is given).
pub fn run_main(
    name: &str,
    usage: &str,
    flag_names: &[&str],
    value_names: &[&str],
    roles: &[Role],
) {
    refuse_debug_build(name);
    init_process();
    let args = Args::parse(flag_names, value_names);
    if args.flag("help") {
        println!("{usage}");
        return;
    }
    let role = args.str("role", "main");
    match roles.iter().find(|(r, _)| *r == role) {
        Some((_, f)) => f(&args),
        None => die(&format!("unknown --role {role}")),
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
    /// Parses `std::env::args()`; `flag_names` take no value, `value_names`
    /// take one. Anything else is an error (a misspelt option must not be
    /// silently ignored by a benchmark).
    pub fn parse(flag_names: &[&str], value_names: &[&str]) -> Args {
        let raw: Vec<String> = std::env::args().skip(1).collect();
        let mut values = HashMap::new();
        let mut flags = Vec::new();
        let mut i = 0;
        let known_value = |k: &str| value_names.contains(&k) || COMMON_VALUES.contains(&k);
        while i < raw.len() {
            let a = &raw[i];
            let Some(key) = a.strip_prefix("--") else {
                die(&format!("unexpected argument {a:?} (see --help)"));
            };
            if let Some((k, v)) = key.split_once('=') {
                if !known_value(k) {
                    die(&format!("unknown option --{k} (see --help)"));
                }
                values.insert(k.to_string(), v.to_string());
            } else if flag_names.contains(&key) || COMMON_FLAGS.contains(&key) {
                flags.push(key.to_string());
            } else if known_value(key) {
                let Some(v) = raw.get(i + 1) else {
                    die(&format!("--{key} needs a value"))
                };
                values.insert(key.to_string(), v.clone());
                i += 1;
            } else {
                die(&format!("unknown option --{key} (see --help)"));
            }
            i += 1;
        }
        let args = Args { values, flags, raw };
        let base = args.str("dir-base", "");
        if !base.is_empty() {
            let base = PathBuf::from(base);
            if !base.is_dir() {
                die(&format!("--dir-base {}: not a directory", base.display()));
            }
            let _ = DIR_BASE.set(base);
        }
        args
    }

    /// `--name` parsed and at least `min`.
    pub fn at_least<T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy>(
        &self,
        name: &str,
        default: T,
        min: T,
    ) -> T {
        let v = self.get(name, default);
        if v < min {
            die(&format!("--{name} must be at least {min}, not {v}"));
        }
        v
    }

    /// `--runs` (at least 1; default 3, 1 with `--quick`).
    pub fn runs(&self) -> usize {
        self.at_least("runs", if self.flag("quick") { 1 } else { 3 }, 1)
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

/// Options every binary takes: `--role` (internal), `--dir` (a child's driver
/// directory, internal) and `--dir-base` (where driver directories go; default
/// /dev/shm; bench/*.py passes a directory it removes afterwards).
const COMMON_VALUES: &[&str] = &["role", "dir", "dir-base"];

/// Flags every binary takes: `--quick` (a short smoke run) and `--help`.
const COMMON_FLAGS: &[&str] = &["quick", "help"];

/// Prints to stderr, cleans up (child process, driver directories) and exits 2.
pub fn die(msg: &str) -> ! {
    eprintln!("error: {msg}");
    cleanup();
    std::process::exit(2)
}

/// `result.or_die()`: the value, or [`die`] with the error.
pub trait OrDie<T> {
    fn or_die(self) -> T;
}

impl<T, E: std::fmt::Display> OrDie<T> for Result<T, E> {
    fn or_die(self) -> T {
        self.unwrap_or_else(|e| die(&format!("{e}")))
    }
}

// ------------------------------------------------------------------ cleanup

struct Registry {
    dirs: Vec<PathBuf>,
    children: Vec<i32>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    dirs: Vec::new(),
    children: Vec::new(),
});
static DIR_BASE: OnceLock<PathBuf> = OnceLock::new();

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// First call of every `main`: SIGINT, SIGTERM and SIGHUP are blocked in this
/// thread (every thread started later, the driver's included, inherits the
/// mask) and taken by a dedicated thread with `sigwait`, which runs
/// [`cleanup`] and exits with 128 + the signal's number.
pub fn init_process() {
    // SAFETY: plain libc calls on a local, zero-initialised sigset_t.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is a valid signal set; sigwait writes `sig`.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                return;
            }
            eprintln!("signal {sig}: stopping, removing the driver directories");
            cleanup();
            // SAFETY: ends the process without running destructors (other
            // threads may hold locks).
            unsafe { libc::_exit(128 + sig) }
        })
        .unwrap_or_else(|e| {
            eprintln!("error: cannot start the signal thread: {e}");
            std::process::exit(2)
        });
}

/// Held for the whole of a [`cleanup`]: a second caller (the signal thread
/// and a [`die`] on another thread at once) waits until the first is done
/// instead of exiting the process half-way through it.
static CLEANING: Mutex<()> = Mutex::new(());

/// Stops the registered child process (SIGTERM, then SIGKILL after 3 s) and
/// removes the registered directories. Idempotent.
pub fn cleanup() {
    let _serial = CLEANING.lock().unwrap_or_else(|e| e.into_inner());
    let (children, dirs) = {
        let mut r = registry();
        (std::mem::take(&mut r.children), std::mem::take(&mut r.dirs))
    };
    for &pid in &children {
        // SAFETY: signals a child of ours that has not been reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    for &pid in &children {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let mut status = 0;
            // SAFETY: waits for our own child without blocking.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r != 0 {
                break; // reaped, or not ours any more
            }
            if Instant::now() > deadline {
                // SAFETY: as above.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    for d in dirs {
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// Registers a directory for [`cleanup`].
pub fn register_dir(dir: &Path) {
    registry().dirs.push(dir.to_path_buf());
}

/// Removes `dir` (after a normal run) and forgets it.
pub fn remove_dir(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    registry().dirs.retain(|d| d != dir);
}

/// Waits for `child` (after a normal run) and forgets it.
pub fn wait_child(child: &mut Child) -> std::process::ExitStatus {
    let status = child.wait().unwrap_or_else(|e| die(&format!("wait: {e}")));
    let pid = child.id() as i32;
    registry().children.retain(|&p| p != pid);
    status
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

/// A child role's `--pin-cpu`, if given: pins the calling thread there.
pub fn pin_from_args(args: &Args) {
    if args.has("pin-cpu") {
        pin_current_thread(args.get("pin-cpu", 1)).or_die();
    }
}

/// Lets the calling thread run on every CPU again (after [`pin_current_thread`]).
///
/// Every bit of the set is on: the kernel keeps the CPUs that exist and are
/// allowed. (Counting the CPUs with `available_parallelism` here would see the
/// pinned mask, one CPU, and leave the thread pinned.)
pub fn unpin_current_thread() {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            die(&format!(
                "sched_setaffinity(all): {}",
                std::io::Error::last_os_error()
            ));
        }
    }
}

/// Number of CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// A fresh driver directory under `--dir-base`, /dev/shm or the temp dir,
/// registered for [`cleanup`].
pub fn bench_dir(tag: &str, run: usize) -> PathBuf {
    let base = match DIR_BASE.get() {
        Some(b) => b.clone(),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    };
    let dir = base.join(format!("sulis-bench-{tag}-{}-{run}", std::process::id()));
    register_dir(&dir);
    dir
}

/// A child role's `--dir` (given by its parent), registered for [`cleanup`].
pub fn child_dir(args: &Args) -> PathBuf {
    let dir = PathBuf::from(args.str("dir", ""));
    if dir.as_os_str().is_empty() {
        die("--dir is missing (internal option of the child roles)");
    }
    register_dir(&dir);
    dir
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

/// Two different UDP ports free on `host` right now (a ping and a pong endpoint).
pub fn two_free_udp_ports(host: &str) -> (u16, u16) {
    let ping_port = free_udp_port(host);
    let mut pong_port = free_udp_port(host);
    while pong_port == ping_port {
        pong_port = free_udp_port(host);
    }
    (ping_port, pong_port)
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
        interrupt: None,
    })
    .unwrap_or_else(|e| {
        die(&format!(
            "cannot connect to the driver in {}: {e}",
            dir.display()
        ))
    })
}

/// Re-executes this binary with `args` (stdout piped back, stderr inherited).
///
/// The child is registered for [`cleanup`] and gets SIGTERM when this thread
/// (the main thread in every binary) ends, so it never outlives a parent that
/// was killed. `--dir-base` is passed on.
pub fn spawn_self(args: &[String]) -> (Child, BufReader<ChildStdout>) {
    let exe = std::env::current_exe().unwrap_or_else(|e| die(&format!("current_exe: {e}")));
    let mut cmd = Command::new(exe);
    cmd.args(args);
    if let Some(base) = DIR_BASE.get() {
        cmd.arg("--dir-base").arg(base);
    }
    // SAFETY: getpid is async-signal-safe; read before the fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "the parent exited before the child started",
                ));
            }
            Ok(())
        });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| die(&format!("cannot start the child process: {e}")));
    registry().children.push(child.id() as i32);
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

/// `--role ROLE --name value ...` for [`spawn_self`].
pub fn role_args(role: &str, options: &[(&str, String)]) -> Vec<String> {
    let mut v = vec!["--role".to_string(), role.to_string()];
    for (k, val) in options {
        v.push(format!("--{k}"));
        v.push(val.clone());
    }
    v
}

/// [`spawn_self`], then waits for the child's `ready` line ([`die`]s with
/// "`what` process did not start" on anything else).
pub fn spawn_ready(args: &[String], what: &str) -> (Child, BufReader<ChildStdout>) {
    let (child, mut out) = spawn_self(args);
    match read_line(&mut out) {
        Some(l) if l == "ready" => {}
        other => die(&format!("{what} process did not start: {other:?}")),
    }
    (child, out)
}

/// A child that must not exit before it is expected to (a pong that exits
/// after its last echo): its stdout is watched by [`watch_child`].
pub struct Watched {
    child: Child,
    expected_exit: Arc<AtomicBool>,
    watcher: JoinHandle<()>,
    what: &'static str,
}

impl Watched {
    /// Starts the child ([`spawn_ready`]) and watches it.
    pub fn spawn(args: &[String], what: &'static str) -> Watched {
        let (child, out) = spawn_ready(args, what);
        let expected_exit = Arc::new(AtomicBool::new(false));
        let watcher = watch_child(out, expected_exit.clone(), what);
        Watched {
            child,
            expected_exit,
            watcher,
            what,
        }
    }

    /// From now on the child may exit: waits for it, [`die`]s if it failed.
    pub fn finish(mut self) {
        self.expected_exit.store(true, Ordering::Release);
        let status = wait_child(&mut self.child);
        let _ = self.watcher.join();
        if !status.success() {
            die(&format!("{} process failed: {status}", self.what));
        }
    }
}

/// Parses a subscriber child's `interval <ns> <messages>` line into msgs/s.
pub fn interval_rate(line: &str) -> Option<f64> {
    let mut it = line.split_whitespace();
    if it.next() != Some("interval") {
        return None;
    }
    let ns: f64 = it.next()?.parse().ok()?;
    let msgs: f64 = it.next()?.parse().ok()?;
    (ns > 0.0).then(|| msgs * 1e9 / ns)
}

/// Reads a subscriber child's lines on a thread of its own (blocked in read,
/// so it costs no CPU): echoes each interval's rate, sets `stop` at the
/// child's "done" line and ends at the line `is_last` accepts (or at EOF,
/// setting `stop` too). The thread returns every line read.
pub fn read_rates(
    mut out: BufReader<ChildStdout>,
    stop: Arc<AtomicBool>,
    is_last: fn(&str) -> bool,
) -> JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut i = 0;
        while let Some(line) = read_line(&mut out) {
            if let Some(rate) = interval_rate(&line) {
                i += 1;
                println!(
                    "  interval {i}: {} msgs/s{}",
                    thousands(rate),
                    if i == 1 { "  (warm-up)" } else { "" }
                );
            }
            if line.starts_with("done") {
                stop.store(true, Ordering::Release);
            }
            let last = is_last(&line);
            lines.push(line);
            if last {
                break;
            }
        }
        stop.store(true, Ordering::Release);
        lines
    })
}

/// The rates of a subscriber's `interval` lines, warm-up first.
pub fn interval_rates(lines: &[String]) -> Vec<f64> {
    lines.iter().filter_map(|l| interval_rate(l)).collect()
}

/// A run's figure: the median of the intervals after the first (warm-up);
/// [`die`]s with fewer than two.
pub fn median_after_warmup(samples: &[f64], lines: &[String]) -> f64 {
    if samples.len() < 2 {
        die(&format!(
            "subscriber reported {} intervals: {lines:?}",
            samples.len()
        ));
    }
    median(&mut samples[1..].to_vec())
}

/// The subscriber's wait for its first message: `poll` (which returns the
/// fragments it found) until one is there; [`die`]s after `timeout`.
pub fn await_first(timeout: Duration, mut poll: impl FnMut() -> usize) {
    let deadline = Instant::now() + timeout;
    while poll() == 0 {
        if Instant::now() > deadline {
            die(&format!("no message within {} s", timeout.as_secs()));
        }
    }
}

/// The subscriber's measured loop in rate mode: `poll` (which counts what it
/// receives into `count()`) in a loop, the clock read every 64th poll; from
/// `start`, one `interval <ns> <messages>` line per second for `duration_s`.
#[inline]
pub fn report_intervals(
    start: Instant,
    duration_s: f64,
    count: impl Fn() -> u64,
    mut poll: impl FnMut(),
) {
    let mut interval_start = start;
    let mut next = start + Duration::from_secs(1);
    let end = start + Duration::from_secs_f64(duration_s);
    let mut last_count = 0u64;
    let mut polls = 0u32;
    loop {
        poll();
        polls = polls.wrapping_add(1);
        if polls & 63 == 0 {
            let now = Instant::now();
            if now >= next {
                let c = count();
                println!(
                    "interval {} {}",
                    (now - interval_start).as_nanos(),
                    c - last_count
                );
                last_count = c;
                interval_start = now;
                next += Duration::from_secs(1);
                if now >= end {
                    break;
                }
            }
        }
    }
}

/// The subscriber child's subscription: added, `ready` printed for the
/// parent, then waits (up to `timeout`) for the publication's image.
pub fn subscribe_ready(
    client: &Client,
    channel: &str,
    stream_id: i32,
    timeout: Duration,
) -> sulis_client::Subscription {
    let mut sub = client.add_subscription(channel, stream_id).or_die();
    println!("ready");
    await_cond("the publication's image", timeout, || sub.image_count() > 0);
    sub
}

/// Waits (up to 10 s) for a publication's subscriber.
pub fn await_subscriber(is_connected: impl FnMut() -> bool) {
    await_cond(
        "the subscriber to connect",
        Duration::from_secs(10),
        is_connected,
    );
}

/// Watches a child's stdout on a thread of its own (blocked in `read`, no
/// CPU): when the child exits before `expected_exit` is set, [`die`]s, so a
/// parent waiting in a hot loop for its echo does not wait forever.
pub fn watch_child(
    mut out: BufReader<ChildStdout>,
    expected_exit: std::sync::Arc<std::sync::atomic::AtomicBool>,
    what: &'static str,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut last = Vec::new();
        while let Some(line) = read_line(&mut out) {
            last.push(line);
        }
        if !expected_exit.load(std::sync::atomic::Ordering::Acquire) {
            die(&format!(
                "the {what} process exited unexpectedly; its output: {last:?}"
            ));
        }
    })
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

/// `[[1, 2], [3]]`: rows of numbers as JSON.
pub fn nested_json<R: AsRef<[f64]>>(rows: &[R]) -> String {
    let rows: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "[{}]",
                r.as_ref()
                    .iter()
                    .map(|x| format!("{x}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    format!("[{}]", rows.join(", "))
}

/// The median of the runs' rates, printed as `sulis native {what}
/// throughput: median of ...`.
pub fn throughput_summary(what: &str, rates: &[f64]) -> f64 {
    let med = median(&mut rates.to_vec());
    println!(
        "sulis native {what} throughput: median of {} run(s) = {} msgs/s (runs: {})",
        rates.len(),
        thousands(med),
        rates
            .iter()
            .map(|r| thousands(*r))
            .collect::<Vec<_>>()
            .join(", ")
    );
    med
}

/// The first fields of a throughput binary's `RESULT` line.
pub fn throughput_json(name: &str, med: f64, rates: &[f64], samples: &[Vec<f64>]) -> Json {
    Json::default()
        .s("name", name)
        .n("msgs_per_s", med)
        .arr("runs_msgs_per_s", rates)
        .raw("samples", &nested_json(samples))
}

/// A round-trip histogram: 1 ns .. 60 s, 3 significant digits.
pub fn rtt_histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap()
}

/// p50, p90, p99, p99.9 and max (µs) of one run's histogram, printed as `run N: ...`.
pub fn latency_row(run: usize, h: &Histogram<u64>) -> [f64; 5] {
    let us = |v: u64| v as f64 / 1000.0;
    let row = [
        us(h.value_at_quantile(0.50)),
        us(h.value_at_quantile(0.90)),
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        us(h.max()),
    ];
    println!(
        "run {}: p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2} µs  (mean {:.2} µs, {} samples)",
        run + 1,
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        h.mean() / 1000.0,
        h.len()
    );
    row
}

/// The median over the runs of each of [`latency_row`]'s figures, printed as
/// `sulis native {what} RTT, median of ...`.
pub fn latency_summary(what: &str, per_run: &[[f64; 5]]) -> Vec<f64> {
    let med: Vec<f64> = (0..5)
        .map(|i| median(&mut per_run.iter().map(|r| r[i]).collect::<Vec<_>>()))
        .collect();
    println!(
        "sulis native {what} RTT, median of {} run(s): p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2} µs",
        per_run.len(),
        med[0],
        med[1],
        med[2],
        med[3],
        med[4]
    );
    med
}

/// The first fields of a latency binary's `RESULT` line.
pub fn latency_json(name: &str, med: &[f64], runs: usize, n: u64, warmup: u64, len: usize) -> Json {
    Json::default()
        .s("name", name)
        .n("p50_us", med[0])
        .n("p90_us", med[1])
        .n("p99_us", med[2])
        .n("p99_9_us", med[3])
        .n("max_us", med[4])
        .n("runs", runs as f64)
        .n("n", n as f64)
        .n("warmup", warmup as f64)
        .n("message_length", len as f64)
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
