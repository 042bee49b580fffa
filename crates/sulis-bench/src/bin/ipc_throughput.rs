//! `ipc-throughput`: native (no Python) sulis IPC throughput, publisher and
//! subscriber in two processes.
//!
//! The parent process launches an embedded media driver (SHARED threading)
//! in a fresh directory under /dev/shm, adds a publication on `aeron:ipc` and
//! re-executes itself with `--role sub`; the child subscribes, counts
//! fragments with `Subscription::poll` (a counting handler) and reports its
//! count every second. The parent offers a 32-byte message in a tight loop
//! (`ExclusivePublication::offer`, or `Publication::offer` with
//! `--publication concurrent`) until the child is done.
//!
//! Figures: msgs/s received per one-second interval; the first interval is
//! warm-up (page faults of a fresh log, ramp-up) and is left out; a run's
//! figure is the median of its remaining intervals; the final figure is the
//! median over `--runs` runs. This mirrors Aeron's EmbeddedExclusiveIpcThroughput
//! (one rate line per second), whose median is taken the same way by
//! bench/peers/aeron_java.py.
//!
//! ```text
//! cargo run --release -p sulis-bench --bin ipc-throughput -- [--runs 3] [--duration 6]
//!     [--publication exclusive|concurrent] [--message-length 32] [--fragment-limit 10]
//!     [--driver-idle busy-spin|yielding|backoff|sleeping] [--term-length 64m] [--pin] [--quick]
//!     [--dir-base DIR]
//! ```
//!
//! The driver directory goes under `--dir-base` (default /dev/shm) and is
//! removed on every exit path (see `sulis_bench::cleanup`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sulis_bench::*;

const CHANNEL: &str = "aeron:ipc";
const STREAM_ID: i32 = 1001;
const USAGE: &str = "usage: ipc-throughput [--runs N] [--duration SECONDS] [--publication exclusive|concurrent] \
[--message-length BYTES] [--fragment-limit N] [--driver-idle STRATEGY] [--term-length SIZE] [--pin] [--quick] \
[--dir-base DIR]";

fn main() {
    run_main(
        "ipc-throughput",
        USAGE,
        &["pin"],
        &[
            "runs",
            "duration",
            "publication",
            "message-length",
            "fragment-limit",
            "driver-idle",
            "term-length",
            "pin-cpu",
        ],
        &[("sub", subscriber), ("main", publisher_main)],
    );
}

struct Config {
    runs: usize,
    duration_s: f64,
    publication: String,
    message_length: usize,
    fragment_limit: usize,
    driver_idle: String,
    term_length: String,
    pin: bool,
}

fn publisher_main(args: &Args) {
    let quick = args.flag("quick");
    let cfg = Config {
        runs: args.runs(),
        // Seconds per run; the first second is warm-up.
        duration_s: args.get("duration", if quick { 3.0 } else { 6.0 }),
        publication: args.str("publication", "exclusive"),
        message_length: args.at_least("message-length", 32, 1),
        fragment_limit: args.at_least("fragment-limit", 10, 1),
        driver_idle: args.str("driver-idle", "busy-spin"),
        term_length: args.str("term-length", "64m"),
        pin: args.flag("pin"),
    };
    if cfg.duration_s < 2.0 {
        die("--duration must be at least 2 (one warm-up second plus one measured)");
    }
    if !matches!(cfg.publication.as_str(), "exclusive" | "concurrent") {
        die("--publication must be exclusive or concurrent");
    }
    if cfg.pin && available_cpus() < 2 {
        die("--pin needs two CPUs");
    }
    println!(
        "sulis native IPC throughput: {} B messages, {} publication, driver shared/{}, IPC term {}, \
         subscriber poll limit {}, {} run(s) x {} s (first second = warm-up){}",
        cfg.message_length,
        cfg.publication,
        cfg.driver_idle,
        cfg.term_length,
        cfg.fragment_limit,
        cfg.runs,
        cfg.duration_s,
        if cfg.pin { ", publisher on CPU 0, subscriber on CPU 1" } else { "" }
    );

    let mut run_rates = Vec::new();
    let mut all_samples = Vec::new();
    for run in 0..cfg.runs {
        let (rate, samples, sent, back_pressured) = one_run(&cfg, run);
        println!(
            "run {}: median {} msgs/s ({:.1} MB/s payload); offers ok {}, back-pressured {}",
            run + 1,
            thousands(rate),
            rate * cfg.message_length as f64 / 1e6,
            thousands(sent as f64),
            thousands(back_pressured as f64)
        );
        run_rates.push(rate);
        all_samples.push(samples);
    }
    let med = throughput_summary(&format!("{} IPC", cfg.publication), &run_rates);
    let j = throughput_json(
        &format!("sulis native Rust {} offer", cfg.publication),
        med,
        &run_rates,
        &all_samples,
    )
    .n("runs", cfg.runs as f64)
    .n("duration_s", cfg.duration_s)
    .n("message_length", cfg.message_length as f64)
    .n("fragment_limit", cfg.fragment_limit as f64)
    .s("publication", &cfg.publication)
    .s("driver_idle", &cfg.driver_idle)
    .s("term_length", &cfg.term_length)
    .b("pinned", cfg.pin);
    println!("RESULT {}", j.build());
}

/// One run: returns (median msgs/s after warm-up, all interval rates, offers ok, offers refused).
fn one_run(cfg: &Config, run: usize) -> (f64, Vec<f64>, u64, u64) {
    let dir = bench_dir("tp", run);
    if cfg.pin {
        // Before the driver starts: its thread inherits CPU 0 too.
        pin_current_thread(0).or_die();
    }
    let driver = launch_driver(&dir, &cfg.driver_idle, &cfg.term_length);
    let client = connect(&dir, "ipc-throughput-pub");
    let mut child_args = role_args(
        "sub",
        &[
            ("dir", dir.display().to_string()),
            ("duration", cfg.duration_s.to_string()),
            ("fragment-limit", cfg.fragment_limit.to_string()),
        ],
    );
    if cfg.pin {
        child_args.extend(["--pin-cpu".to_string(), "1".to_string()]);
    }
    let (mut child, out) = spawn_ready(&child_args, "subscriber");

    // The child prints one line per second and "done" at the end; a reader
    // thread echoes the rates and stops the publisher on "done" or EOF.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = read_rates(out, stop.clone(), |l| l.starts_with("done"));

    let (sent, refused) = if cfg.publication == "exclusive" {
        let mut publication = client
            .add_exclusive_publication(CHANNEL, STREAM_ID)
            .or_die();
        await_subscriber(|| publication.is_connected());
        publish_until(&stop, cfg, |b| publication.offer(b).is_ok())
    } else {
        let publication = client.add_publication(CHANNEL, STREAM_ID).or_die();
        await_subscriber(|| publication.is_connected());
        publish_until(&stop, cfg, |b| publication.offer(b).is_ok())
    };
    let lines = reader.join().unwrap_or_default();
    let status = wait_child(&mut child);
    drop(client);
    drop(driver);
    remove_dir(&dir);
    if !status.success() {
        die(&format!(
            "subscriber process failed ({status}); output: {lines:?}"
        ));
    }
    let samples = interval_rates(&lines);
    (
        median_after_warmup(&samples, &lines),
        samples,
        sent,
        refused,
    )
}

/// Offers in a tight loop until `stop`. Returns (offers accepted, offers refused).
fn publish_until(
    stop: &AtomicBool,
    cfg: &Config,
    mut offer: impl FnMut(&[u8]) -> bool,
) -> (u64, u64) {
    let buf = vec![0x5au8; cfg.message_length];
    let mut ok = 0u64;
    let mut refused = 0u64;
    let deadline = Instant::now() + Duration::from_secs_f64(cfg.duration_s + 60.0);
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        if offer(&buf) {
            ok += 1;
        } else {
            refused += 1;
            std::hint::spin_loop();
        }
        n = n.wrapping_add(1);
        if n & 0xF_FFFF == 0 && Instant::now() > deadline {
            die("the subscriber did not finish in time");
        }
    }
    (ok, refused)
}

fn subscriber(args: &Args) {
    pin_from_args(args);
    let dir = std::path::PathBuf::from(args.str("dir", ""));
    let duration_s: f64 = args.get("duration", 6.0);
    let limit: usize = args.get("fragment-limit", 10);
    let client = connect(&dir, "ipc-throughput-sub");
    let mut sub = subscribe_ready(&client, CHANNEL, STREAM_ID, Duration::from_secs(10));

    let count = std::cell::Cell::new(0u64);
    let mut handler = |_payload: &[u8], _h: &sulis_client::Header| {
        count.set(count.get() + 1);
        Ok::<(), ()>(())
    };
    // Wait for the first message, then report every second.
    await_first(Duration::from_secs(10), || {
        sub.poll(&mut handler, limit).unwrap()
    });
    report_intervals(
        Instant::now(),
        duration_s,
        || count.get(),
        || {
            let _ = sub.poll(&mut handler, limit);
        },
    );
    println!("done {}", count.get());
    drop(sub);
    drop(client);
}
