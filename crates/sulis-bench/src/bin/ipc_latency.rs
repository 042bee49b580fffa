//! `ipc-latency`: native (no Python) sulis IPC round trip, ping and pong in
//! two processes.
//!
//! The parent launches an embedded media driver (SHARED threading) in a fresh
//! directory under /dev/shm, adds an exclusive publication on `aeron:ipc`
//! stream 1002 and a subscription on stream 1003, and re-executes itself with
//! `--role pong`; the child echoes warm-up + timed messages from 1002 to 1003
//! and exits. Each round
//! trip (offer, then poll until the echo arrives) is timed with `Instant` and
//! recorded in an HdrHistogram (ns, 3 significant digits). Warm-up round trips
//! are not recorded. Figures are the median over `--runs` runs of each
//! percentile.
//!
//! ```text
//! cargo run --release -p sulis-bench --bin ipc-latency -- [--runs 3] [--messages 100000]
//!     [--warmup 10000] [--message-length 32] [--driver-idle sleeping:10ms] [--pin|--no-pin] [--quick]
//!     [--dir-base DIR]
//! ```

use hdrhistogram::Histogram;
use std::time::{Duration, Instant};
use sulis_bench::*;

const CHANNEL: &str = "aeron:ipc";
const PING_STREAM: i32 = 1002;
const PONG_STREAM: i32 = 1003;
const USAGE: &str =
    "usage: ipc-latency [--runs N] [--messages N] [--warmup N] [--message-length BYTES] \
[--driver-idle STRATEGY] [--pin|--no-pin] [--quick] [--dir-base DIR]";

fn main() {
    run_main(
        "ipc-latency",
        USAGE,
        &["pin", "no-pin"],
        &[
            "runs",
            "messages",
            "warmup",
            "message-length",
            "driver-idle",
            "pin-cpu",
            "total",
        ],
        &[("pong", pong), ("main", ping_main)],
    );
}

fn ping_main(args: &Args) {
    let quick = args.flag("quick");
    let runs = args.runs();
    let n: u64 = args.at_least("messages", if quick { 20_000 } else { 100_000 }, 1);
    let warmup: u64 = args.get("warmup", if quick { 2_000 } else { 10_000 });
    let len: usize = args.at_least("message-length", 32, 1);
    // The driver has nothing to do during the exchange; sleeping 10 ms keeps it
    // off both cores (backoff's 1 ms wake-ups show up at p99.9).
    let idle = args.str("driver-idle", "sleeping:10ms");
    // Pinned by default on 2+ CPUs: ping on CPU 0, pong on CPU 1.
    let pin = !args.flag("no-pin") && available_cpus() >= 2;
    if args.flag("pin") && args.flag("no-pin") {
        die("--pin and --no-pin exclude each other");
    }
    println!(
        "sulis native IPC round trip: {len} B, {n} round trips after {warmup} warm-up, {runs} run(s), \
         driver shared/{idle}, {}",
        if pin { "ping on CPU 0, pong on CPU 1 (driver thread unpinned)" } else { "no CPU pinning" }
    );
    let per_run: Vec<[f64; 5]> = (0..runs)
        .map(|run| latency_row(run, &one_run(run, n, warmup, len, &idle, pin)))
        .collect();
    let med = latency_summary("IPC", &per_run);
    let j = latency_json("sulis native Rust ping-pong", &med, runs, n, warmup, len)
        .s("driver_idle", &idle)
        .b("pinned", pin)
        .raw("runs_p50_p90_p99_p999_max_us", &nested_json(&per_run));
    println!("RESULT {}", j.build());
}

fn one_run(run: usize, n: u64, warmup: u64, len: usize, idle: &str, pin: bool) -> Histogram<u64> {
    let dir = bench_dir("rtt", run);
    // The driver thread starts before the pinning, so it may run on either CPU.
    let driver = launch_driver(&dir, idle, "64m");
    if pin {
        pin_current_thread(0).or_die();
    }
    let client = connect(&dir, "ipc-latency-ping");
    let mut child_args = role_args(
        "pong",
        &[
            ("dir", dir.display().to_string()),
            ("total", (warmup + n).to_string()),
        ],
    );
    if pin {
        child_args.extend(["--pin-cpu".to_string(), "1".to_string()]);
    }
    // Pong exits after the last echo; before that, its exit is a failure.
    let pong = Watched::spawn(&child_args, "pong");
    let mut ping = client
        .add_exclusive_publication(CHANNEL, PING_STREAM)
        .or_die();
    let mut pongs = client.add_subscription(CHANNEL, PONG_STREAM).or_die();
    await_cond("the pong process", Duration::from_secs(10), || {
        ping.is_connected() && pongs.image_count() > 0
    });

    let mut hist = rtt_histogram();
    let mut msg = vec![0u8; len];
    let mut handler = |_p: &[u8], _h: &sulis_client::Header| Ok::<(), ()>(());
    for i in 0..warmup + n {
        msg[len - 1] = i as u8;
        let t0 = Instant::now();
        while ping.offer(&msg).is_err() {
            std::hint::spin_loop();
        }
        while pongs.poll(&mut handler, 1).unwrap() == 0 {
            std::hint::spin_loop();
        }
        let ns = t0.elapsed().as_nanos() as u64;
        if i >= warmup {
            hist.saturating_record(ns.max(1));
        }
    }
    pong.finish();
    drop(ping);
    drop(pongs);
    drop(client);
    drop(driver);
    if pin {
        // Let the next run's driver thread start unpinned again.
        unpin_current_thread();
    }
    remove_dir(&dir);
    hist
}

fn pong(args: &Args) {
    pin_from_args(args);
    // The parent's driver directory: the parent removes it.
    let dir = std::path::PathBuf::from(args.str("dir", ""));
    let total: u64 = args.at_least("total", 1, 1);
    let client = connect(&dir, "ipc-latency-pong");
    let mut pings = client.add_subscription(CHANNEL, PING_STREAM).or_die();
    let mut publication = client
        .add_exclusive_publication(CHANNEL, PONG_STREAM)
        .or_die();
    println!("ready");
    let mut handler = |payload: &[u8], _h: &sulis_client::Header| {
        while publication.offer(payload).is_err() {
            std::hint::spin_loop();
        }
        Ok::<(), ()>(())
    };
    let mut echoed = 0u64;
    while echoed < total {
        let n = pings.poll(&mut handler, 1).unwrap();
        if n == 0 {
            std::hint::spin_loop();
        }
        echoed += n as u64;
    }
    drop(pings);
    drop(client);
}
