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
    refuse_debug_build("ipc-throughput");
    init_process();
    let args = Args::parse(
        &["pin", "quick", "help"],
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
    );
    if args.flag("help") {
        println!("{USAGE}");
        return;
    }
    match args.str("role", "main").as_str() {
        "sub" => subscriber(&args),
        "main" => publisher_main(&args),
        r => die(&format!("unknown --role {r}")),
    }
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
        runs: args.at_least("runs", if quick { 1 } else { 3 }, 1),
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
    let mut sorted = run_rates.clone();
    let med = median(&mut sorted);
    println!(
        "sulis native {} IPC throughput: median of {} run(s) = {} msgs/s (runs: {})",
        cfg.publication,
        cfg.runs,
        thousands(med),
        run_rates
            .iter()
            .map(|r| thousands(*r))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let samples_json: Vec<String> = all_samples
        .iter()
        .map(|s: &Vec<f64>| {
            format!(
                "[{}]",
                s.iter()
                    .map(|x| format!("{x}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    let j = Json::default()
        .s(
            "name",
            &format!("sulis native Rust {} offer", cfg.publication),
        )
        .n("msgs_per_s", med)
        .arr("runs_msgs_per_s", &run_rates)
        .raw("samples", &format!("[{}]", samples_json.join(", ")))
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

/// Parses `interval <ns> <messages>` into msgs/s.
fn interval_rate(line: &str) -> Option<f64> {
    let mut it = line.split_whitespace();
    if it.next() != Some("interval") {
        return None;
    }
    let ns: f64 = it.next()?.parse().ok()?;
    let msgs: f64 = it.next()?.parse().ok()?;
    (ns > 0.0).then(|| msgs * 1e9 / ns)
}

/// One run: returns (median msgs/s after warm-up, all interval rates, offers ok, offers refused).
fn one_run(cfg: &Config, run: usize) -> (f64, Vec<f64>, u64, u64) {
    let dir = bench_dir("tp", run);
    if cfg.pin {
        // Before the driver starts: its thread inherits CPU 0 too.
        pin_current_thread(0).unwrap_or_else(|e| die(&e));
    }
    let driver = launch_driver(&dir, &cfg.driver_idle, &cfg.term_length);
    let client = connect(&dir, "ipc-throughput-pub");
    let mut child_args: Vec<String> = vec![
        "--role".into(),
        "sub".into(),
        "--dir".into(),
        dir.display().to_string(),
        "--duration".into(),
        cfg.duration_s.to_string(),
        "--fragment-limit".into(),
        cfg.fragment_limit.to_string(),
    ];
    if cfg.pin {
        child_args.push("--pin-cpu".into());
        child_args.push("1".into());
    }
    let (mut child, mut out) = spawn_self(&child_args);
    match read_line(&mut out) {
        Some(l) if l == "ready" => {}
        other => die(&format!("subscriber process did not start: {other:?}")),
    }

    // The child prints one line per second and "done" at the end; a reader
    // thread (blocked in read, so it costs no CPU) echoes the rates and stops
    // the publisher on "done" or EOF.
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let reader = std::thread::spawn(move || {
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
            let done = line.starts_with("done");
            lines.push(line);
            if done {
                break;
            }
        }
        stop2.store(true, Ordering::Release);
        lines
    });

    let (sent, refused) = if cfg.publication == "exclusive" {
        let mut publication = client
            .add_exclusive_publication(CHANNEL, STREAM_ID)
            .unwrap_or_else(|e| die(&format!("{e}")));
        await_cond("the subscriber to connect", Duration::from_secs(10), || {
            publication.is_connected()
        });
        publish_until(&stop, cfg, |b| publication.offer(b).is_ok())
    } else {
        let publication = client
            .add_publication(CHANNEL, STREAM_ID)
            .unwrap_or_else(|e| die(&format!("{e}")));
        await_cond("the subscriber to connect", Duration::from_secs(10), || {
            publication.is_connected()
        });
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
    let samples: Vec<f64> = lines.iter().filter_map(|l| interval_rate(l)).collect();
    if samples.len() < 2 {
        die(&format!(
            "subscriber reported {} intervals: {lines:?}",
            samples.len()
        ));
    }
    let mut measured = samples[1..].to_vec();
    (median(&mut measured), samples, sent, refused)
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
    if args.has("pin-cpu") {
        pin_current_thread(args.get("pin-cpu", 1)).unwrap_or_else(|e| die(&e));
    }
    let dir = std::path::PathBuf::from(args.str("dir", ""));
    let duration_s: f64 = args.get("duration", 6.0);
    let limit: usize = args.get("fragment-limit", 10);
    let client = connect(&dir, "ipc-throughput-sub");
    let mut sub = client
        .add_subscription(CHANNEL, STREAM_ID)
        .unwrap_or_else(|e| die(&format!("{e}")));
    println!("ready");
    await_cond("the publication's image", Duration::from_secs(10), || {
        sub.image_count() > 0
    });

    let count = std::cell::Cell::new(0u64);
    let mut handler = |_payload: &[u8], _h: &sulis_client::Header| {
        count.set(count.get() + 1);
        Ok::<(), ()>(())
    };
    // Wait for the first message, then report every second.
    let first_deadline = Instant::now() + Duration::from_secs(10);
    while sub.poll(&mut handler, limit).unwrap() == 0 {
        if Instant::now() > first_deadline {
            die("no message within 10 s");
        }
    }
    let start = Instant::now();
    let mut interval_start = start;
    let mut next = start + Duration::from_secs(1);
    let end = start + Duration::from_secs_f64(duration_s);
    let mut last_count = 0u64;
    let mut polls = 0u32;
    loop {
        let _ = sub.poll(&mut handler, limit);
        polls = polls.wrapping_add(1);
        if polls & 63 == 0 {
            let now = Instant::now();
            if now >= next {
                let c = count.get();
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
    println!("done {}", count.get());
    drop(sub);
    drop(client);
}
