//! `udp-latency`: native (no Python) sulis round trip over UDP, ping and pong
//! in two processes, each with its own embedded media driver.
//!
//! The parent (ping) picks two free UDP ports and re-executes itself with
//! `--role pong`. Pong's driver binds the ping channel's endpoint
//! (`aeron:udp?endpoint=HOST:P1`, stream 1002), ping's driver binds the pong
//! channel's (`HOST:P2`, stream 1003); pong echoes every message from one to
//! the other (warm-up + timed messages, then it exits). Each round trip (offer,
//! then poll until the echo arrives) is
//! timed with `Instant` and recorded in an HdrHistogram (ns, 3 significant
//! digits); warm-up round trips are not recorded. Figures are the median over
//! `--runs` runs of each percentile.
//!
//! ```text
//! cargo run --release -p sulis-bench --bin udp-latency -- [--runs 3] [--messages 100000]
//!     [--warmup 10000] [--message-length 32] [--host 127.0.0.1] [--channel-params mtu=1408]
//!     [--threading shared] [--driver-idle yielding] [--driver-options k=v,...]
//!     [--pin none|clients|processes] [--client-idle spin|yield|backoff] [--quick] [--dir-base DIR]
//! ```
//!
//! Both driver directories go under `--dir-base` (default /dev/shm) and are
//! removed on every exit path (see `sulis_bench::cleanup`).
//!
//! `--pin clients` puts the ping thread on CPU 0 and the pong thread on CPU 1
//! after their drivers started (driver threads keep the full mask);
//! `--pin processes` pins each process, its driver threads included.
//!
//! Defaults: drivers shared/yielding, clients yield (`sched_yield` while
//! waiting), no pinning: on a 2-core machine the round trip needs four
//! threads (ping, two drivers, pong), and anything that spins starves the
//! others for a scheduler time slice (see bench/README.md).

use hdrhistogram::Histogram;
use std::time::{Duration, Instant};
use sulis_bench::*;

const PING_STREAM: i32 = 1002;
const PONG_STREAM: i32 = 1003;

const USAGE: &str = "usage: udp-latency [--runs N] [--messages N] [--warmup N] [--message-length BYTES] [--host IP] \
[--channel-params P|P] [--threading MODE] [--driver-idle STRATEGY] [--driver-options k=v,...] \
[--pin none|clients|processes] [--client-idle spin|yield|backoff] [--quick] [--dir-base DIR]";

fn main() {
    run_main(
        "udp-latency",
        USAGE,
        &[],
        &[
            "runs",
            "messages",
            "warmup",
            "message-length",
            "host",
            "channel-params",
            "threading",
            "driver-idle",
            "driver-options",
            "pin",
            "client-idle",
            "ping-channel",
            "pong-channel",
            "total",
        ],
        &[("pong", pong), ("main", ping_main)],
    );
}

struct Config {
    n: u64,
    warmup: u64,
    len: usize,
    host: String,
    channel_params: String,
    threading: String,
    idle: String,
    options: String,
    pin: String,
    client_idle: String,
}

fn channel(host: &str, port: u16, params: &str) -> String {
    if params.is_empty() {
        format!("aeron:udp?endpoint={host}:{port}")
    } else {
        format!("aeron:udp?endpoint={host}:{port}|{params}")
    }
}

fn ping_main(args: &Args) {
    let quick = args.flag("quick");
    let runs = args.runs();
    let cfg = Config {
        n: args.at_least("messages", if quick { 20_000 } else { 100_000 }, 1),
        warmup: args.get("warmup", if quick { 2_000 } else { 10_000 }),
        len: args.at_least("message-length", 32, 1),
        host: args.str("host", "127.0.0.1"),
        channel_params: args.str("channel-params", "mtu=1408"),
        threading: args.str("threading", "shared"),
        idle: args.str("driver-idle", "yielding"),
        options: args.str("driver-options", ""),
        pin: args.str("pin", "none"),
        client_idle: args.str("client-idle", "yield"),
    };
    if !matches!(cfg.pin.as_str(), "none" | "clients" | "processes") {
        die("--pin must be none, clients or processes");
    }
    if cfg.pin != "none" && available_cpus() < 2 {
        die("--pin needs two CPUs");
    }
    ClientIdle::parse(&cfg.client_idle);
    parse_options(&cfg.options);
    println!(
        "sulis native UDP round trip: {} B, {} round trips after {} warm-up, {runs} run(s), two drivers \
         {}/{}{}, channel params '{}', pinning: {}, client wait: {}",
        cfg.len,
        cfg.n,
        cfg.warmup,
        cfg.threading,
        cfg.idle,
        if cfg.options.is_empty() {
            String::new()
        } else {
            format!(" [{}]", cfg.options)
        },
        cfg.channel_params,
        cfg.pin,
        cfg.client_idle
    );
    let per_run: Vec<[f64; 5]> = (0..runs)
        .map(|run| latency_row(run, &one_run(&cfg, run)))
        .collect();
    let med = latency_summary("UDP", &per_run);
    let j = latency_json(
        "sulis native Rust ping-pong over UDP",
        &med,
        runs,
        cfg.n,
        cfg.warmup,
        cfg.len,
    )
    .s("driver", &format!("{}/{}", cfg.threading, cfg.idle))
    .s("driver_options", &cfg.options)
    .s("channel_params", &cfg.channel_params)
    .s("pin", &cfg.pin)
    .s("client_idle", &cfg.client_idle)
    .raw("runs_p50_p90_p99_p999_max_us", &nested_json(&per_run));
    println!("RESULT {}", j.build());
}

fn one_run(cfg: &Config, run: usize) -> Histogram<u64> {
    let (ping_port, pong_port) = two_free_udp_ports(&cfg.host);
    let ping_channel = channel(&cfg.host, ping_port, &cfg.channel_params);
    let pong_channel = channel(&cfg.host, pong_port, &cfg.channel_params);
    if cfg.pin == "processes" {
        pin_current_thread(0).or_die();
    }
    let child_args = role_args(
        "pong",
        &[
            ("dir", bench_dir("udp-pong", run).display().to_string()),
            ("ping-channel", ping_channel.clone()),
            ("pong-channel", pong_channel.clone()),
            ("threading", cfg.threading.clone()),
            ("driver-idle", cfg.idle.clone()),
            ("driver-options", cfg.options.clone()),
            ("pin", cfg.pin.clone()),
            ("client-idle", cfg.client_idle.clone()),
            ("total", (cfg.warmup + cfg.n).to_string()),
        ],
    );
    // Pong exits after the last echo; before that, its exit is a failure.
    let pong = Watched::spawn(&child_args, "pong");
    let dir = bench_dir("udp-ping", run);
    let driver = launch_driver_with(
        &dir,
        &cfg.threading,
        &cfg.idle,
        &parse_options(&cfg.options),
    );
    if cfg.pin == "clients" {
        // After the driver's threads started: they keep the full mask.
        pin_current_thread(0).or_die();
    }
    let client = connect(&dir, "udp-latency-ping");
    let mut ping = client
        .add_exclusive_publication(&ping_channel, PING_STREAM)
        .or_die();
    let mut pongs = client.add_subscription(&pong_channel, PONG_STREAM).or_die();
    await_cond("the pong process", Duration::from_secs(20), || {
        ping.is_connected() && pongs.image_count() > 0
    });

    let mut hist = rtt_histogram();
    let mut msg = vec![0u8; cfg.len];
    let mut handler = |_p: &[u8], _h: &sulis_client::Header| Ok::<(), ()>(());
    let mut idle = ClientIdle::parse(&cfg.client_idle);
    for i in 0..cfg.warmup + cfg.n {
        msg[cfg.len - 1] = i as u8;
        let t0 = Instant::now();
        while ping.offer(&msg).is_err() {
            idle.idle();
        }
        idle.reset();
        while pongs.poll(&mut handler, 1).unwrap() == 0 {
            idle.idle();
        }
        idle.reset();
        let ns = t0.elapsed().as_nanos() as u64;
        if i >= cfg.warmup {
            hist.saturating_record(ns.max(1));
        }
    }
    pong.finish();
    drop(ping);
    drop(pongs);
    drop(client);
    drop(driver);
    if cfg.pin != "none" {
        unpin_current_thread();
    }
    remove_dir(&dir);
    hist
}

fn pong(args: &Args) {
    let pin = args.str("pin", "none");
    if pin == "processes" {
        pin_current_thread(1).or_die();
    }
    let dir = child_dir(args);
    let total: u64 = args.at_least("total", 1, 1);
    let client_idle = args.str("client-idle", "yield");
    let driver = launch_driver_with(
        &dir,
        &args.str("threading", "shared"),
        &args.str("driver-idle", "yielding"),
        &parse_options(&args.str("driver-options", "")),
    );
    if pin == "clients" {
        pin_current_thread(1).or_die();
    }
    let client = connect(&dir, "udp-latency-pong");
    let mut pings = client
        .add_subscription(&args.str("ping-channel", ""), PING_STREAM)
        .or_die();
    let mut publication = client
        .add_exclusive_publication(&args.str("pong-channel", ""), PONG_STREAM)
        .or_die();
    println!("ready");
    let mut offer_idle = ClientIdle::parse(&client_idle);
    let mut handler = |payload: &[u8], _h: &sulis_client::Header| {
        while publication.offer(payload).is_err() {
            offer_idle.idle();
        }
        offer_idle.reset();
        Ok::<(), ()>(())
    };
    let mut idle = ClientIdle::parse(&client_idle);
    let mut echoed = 0u64;
    while echoed < total {
        let n = pings.poll(&mut handler, 1).unwrap();
        if n == 0 {
            idle.idle();
            continue;
        }
        idle.reset();
        echoed += n as u64;
    }
    // Let the last echo leave before the driver goes (a lost last datagram
    // would be repaired by a NAK only while the publication exists).
    std::thread::sleep(Duration::from_millis(50));
    drop(pings);
    drop(client);
    drop(driver);
    remove_dir(&dir);
}
