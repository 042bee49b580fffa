//! `udp-throughput`: native (no Python) sulis throughput over UDP, publisher
//! and subscriber in two processes, each with its own embedded media driver.
//!
//! The parent process (publisher side) picks a free UDP port on the endpoint
//! host and re-executes itself with `--role sub`. The child launches its own
//! driver in a fresh directory under /dev/shm, subscribes to
//! `aeron:udp?endpoint=HOST:PORT|<channel params>` (its driver binds the
//! endpoint) and counts fragments with `Subscription::poll`. The parent
//! launches its driver, adds a publication on the same channel and offers a
//! 32-byte message in a tight loop. Datagrams go driver to driver over the
//! loopback interface, as between two hosts.
//!
//! Two modes:
//!
//! * rate (default): the child reports its count every second for
//!   `--duration` seconds; the first interval is warm-up and is left out; a
//!   run's figure is the median of the remaining intervals (as
//!   `ipc-throughput` and Aeron's RateSubscriber, one line per second);
//! * count (`--count N [--warmup-count W]`): the publisher offers exactly
//!   W + N messages; the child times message W + 1 to message W + N (used by
//!   bench/udp_recovery.py with and without loss).
//!
//! After each run both sides print their driver's system counters (bytes,
//! status messages, NAKs, retransmits, flow-control events).
//!
//! ```text
//! cargo run --release -p sulis-bench --bin udp-throughput -- [--runs 3] [--duration 6] [--count N [--warmup-count W]]
//!     [--publication exclusive|concurrent] [--message-length 32] [--fragment-limit 10]
//!     [--host 127.0.0.1] [--port 0] [--channel-params mtu=1408|term-length=16m|rcv-wnd=...]
//!     [--threading shared] [--driver-idle yielding] [--pub-threading M] [--pub-driver-idle S]
//!     [--sub-threading M] [--sub-driver-idle S] [--driver-options k=v,k=v]
//!     [--pub-driver-options k=v,...] [--sub-driver-options k=v,...] [--client-idle spin|yield|backoff]
//!     [--pin | --placement none|sides|publisher] [--quick] [--dir-base DIR]
//! ```
//!
//! Both driver directories go under `--dir-base` (default /dev/shm) and are
//! removed on every exit path (see `sulis_bench::cleanup`).
//!
//! `--placement sides` (or `--pin`): the publisher process, its driver
//! included, on CPU 0 and the subscriber process on CPU 1; `--placement
//! publisher`: the publishing thread alone on CPU 0, every other thread (both
//! drivers, the subscriber) on CPU 1.
//!
//! `--client-idle yield`: the publisher calls `sched_yield` after a refused
//! offer and the subscriber after a poll that found nothing, so that on a
//! machine with fewer cores than busy threads the drivers' agents get the CPU
//! when the clients cannot progress (Aeron's samples take the same choice
//! from `aeron.sample.idleStrategy`); `backoff` spins, yields, then sleeps
//! (1 µs growing to 1 ms) until progress; `spin` spins, as Aeron's
//! StreamingPublisher and RateSubscriber do by default. The defaults (drivers
//! shared/yielding, clients yield, `rcv-wnd=2m|so-rcvbuf=4m`) are the best
//! configuration found on a 2-core machine (see bench/README.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sulis_bench::*;

const STREAM_ID: i32 = 1001;
const USAGE: &str = "usage: udp-throughput [--runs N] [--duration SECONDS | --count MESSAGES [--warmup-count MESSAGES]] \
[--publication exclusive|concurrent] [--message-length BYTES] [--fragment-limit N] [--host IP] [--port N] \
[--channel-params P|P] [--threading MODE] [--driver-idle STRATEGY] [--pub-threading MODE] \
[--pub-driver-idle STRATEGY] [--sub-threading MODE] [--sub-driver-idle STRATEGY] [--driver-options k=v,...] \
[--pub-driver-options k=v,...] [--sub-driver-options k=v,...] [--client-idle spin|yield|backoff] [--pin | --placement none|sides|publisher] [--quick] \
[--dir-base DIR]";

fn main() {
    run_main(
        "udp-throughput",
        USAGE,
        &["pin"],
        &[
            "runs",
            "duration",
            "count",
            "warmup-count",
            "publication",
            "message-length",
            "fragment-limit",
            "host",
            "port",
            "channel-params",
            "threading",
            "driver-idle",
            "pub-threading",
            "pub-driver-idle",
            "sub-threading",
            "sub-driver-idle",
            "driver-options",
            "pub-driver-options",
            "sub-driver-options",
            "client-idle",
            "placement",
            "channel",
            "pin-cpu",
        ],
        &[("sub", subscriber), ("main", publisher_main)],
    );
}

/// One side's driver: threading mode, idle strategy, options.
struct Side {
    threading: String,
    idle: String,
    options: String,
}

impl Side {
    fn describe(&self) -> String {
        if self.options.is_empty() {
            format!("{}/{}", self.threading, self.idle)
        } else {
            format!("{}/{} [{}]", self.threading, self.idle, self.options)
        }
    }
}

struct Config {
    runs: usize,
    duration_s: f64,
    count: u64,
    warmup_count: u64,
    publication: String,
    message_length: usize,
    fragment_limit: usize,
    host: String,
    port: u16,
    channel_params: String,
    publisher: Side,
    subscriber: Side,
    client_idle: String,
    /// none, sides or publisher.
    placement: String,
}

impl Config {
    /// The channel as printed: `PORT` stands for the free port each run picks.
    fn channel_shown(&self) -> String {
        if self.port == 0 {
            self.channel(0).replace(":0", ":PORT")
        } else {
            self.channel(self.port)
        }
    }

    fn channel(&self, port: u16) -> String {
        let mut c = format!("aeron:udp?endpoint={}:{port}", self.host);
        if !self.channel_params.is_empty() {
            c.push('|');
            c.push_str(&self.channel_params);
        }
        c
    }
}

fn side(args: &Args, prefix: &str) -> Side {
    let both = args.str("driver-options", "");
    let own = args.str(&format!("{prefix}-driver-options"), "");
    let options = match (both.is_empty(), own.is_empty()) {
        (true, _) => own,
        (false, true) => both,
        (false, false) => format!("{both},{own}"),
    };
    Side {
        threading: args.str(
            &format!("{prefix}-threading"),
            &args.str("threading", "shared"),
        ),
        idle: args.str(
            &format!("{prefix}-driver-idle"),
            &args.str("driver-idle", "yielding"),
        ),
        options,
    }
}

fn publisher_main(args: &Args) {
    let quick = args.flag("quick");
    let cfg = Config {
        runs: args.runs(),
        duration_s: args.get("duration", if quick { 3.0 } else { 6.0 }),
        count: args.get("count", 0u64),
        warmup_count: args.get("warmup-count", 0u64),
        publication: args.str("publication", "exclusive"),
        message_length: args.at_least("message-length", 32, 1),
        fragment_limit: args.at_least("fragment-limit", 10, 1),
        host: args.str("host", "127.0.0.1"),
        port: args.get("port", 0u16),
        channel_params: args.str("channel-params", "mtu=1408|rcv-wnd=2m|so-rcvbuf=4m"),
        publisher: side(args, "pub"),
        subscriber: side(args, "sub"),
        client_idle: args.str("client-idle", "yield"),
        placement: if args.flag("pin") {
            "sides".into()
        } else {
            args.str("placement", "none")
        },
    };
    if args.flag("pin") && args.has("placement") {
        die("--pin and --placement exclude each other");
    }
    if cfg.count == 0 && args.has("warmup-count") {
        die("--warmup-count needs --count");
    }
    if !matches!(cfg.placement.as_str(), "none" | "sides" | "publisher") {
        die("--placement must be none, sides or publisher");
    }
    ClientIdle::parse(&cfg.client_idle);
    if cfg.count == 0 && cfg.duration_s < 2.0 {
        die("--duration must be at least 2 (one warm-up second plus one measured)");
    }
    if !matches!(cfg.publication.as_str(), "exclusive" | "concurrent") {
        die("--publication must be exclusive or concurrent");
    }
    if cfg.placement != "none" && available_cpus() < 2 {
        die("--pin/--placement needs two CPUs");
    }
    // Validated here rather than in the child.
    parse_options(&cfg.publisher.options);
    parse_options(&cfg.subscriber.options);
    let mode = if cfg.count > 0 {
        format!(
            "{} messages per run after {} warm-up ones, timed first to last",
            thousands(cfg.count as f64),
            thousands(cfg.warmup_count as f64)
        )
    } else {
        format!("{} s per run (first second = warm-up)", cfg.duration_s)
    };
    println!(
        "sulis native UDP throughput: {} B messages, {} publication, channel {}, publisher driver {}, \
         subscriber driver {}, poll limit {}, clients {} when idle, {} run(s), {mode}{}",
        cfg.message_length,
        cfg.publication,
        cfg.channel_shown(),
        cfg.publisher.describe(),
        cfg.subscriber.describe(),
        cfg.fragment_limit,
        cfg.client_idle,
        cfg.runs,
        match cfg.placement.as_str() {
            "sides" => ", publisher process on CPU 0, subscriber process on CPU 1",
            "publisher" => ", publishing thread alone on CPU 0, drivers and subscriber on CPU 1",
            _ => "",
        }
    );

    let mut run_rates = Vec::new();
    let mut run_elapsed = Vec::new();
    let mut all_samples = Vec::new();
    let mut all_counters = Vec::new();
    for run in 0..cfg.runs {
        let r = one_run(&cfg, run);
        println!(
            "run {}: {} msgs/s ({:.1} MB/s payload){}; offers ok {}, back-pressured {}",
            run + 1,
            thousands(r.rate),
            r.rate * cfg.message_length as f64 / 1e6,
            if cfg.count > 0 {
                format!(
                    ", {} messages in {:.3} s",
                    thousands(cfg.count as f64),
                    r.elapsed_s
                )
            } else {
                " median".into()
            },
            thousands(r.sent as f64),
            thousands(r.refused as f64)
        );
        println!("  publisher driver: {}", counters_text(&r.pub_counters));
        println!("  subscriber driver: {}", counters_text(&r.sub_counters));
        run_rates.push(r.rate);
        run_elapsed.push(r.elapsed_s);
        all_samples.push(r.samples);
        all_counters.push(format!(
            "{{\"publisher\": {}, \"subscriber\": {}}}",
            counters_json(&r.pub_counters),
            counters_json(&r.sub_counters)
        ));
    }
    let med = throughput_summary(&format!("{} UDP", cfg.publication), &run_rates);
    let mut j = throughput_json(
        &format!("sulis native Rust {} offer over UDP", cfg.publication),
        med,
        &run_rates,
        &all_samples,
    )
    .raw("counters", &format!("[{}]", all_counters.join(", ")))
    .n("runs", cfg.runs as f64)
    .n("message_length", cfg.message_length as f64)
    .n("fragment_limit", cfg.fragment_limit as f64)
    .s("publication", &cfg.publication)
    .s("channel", &cfg.channel_shown())
    .s("publisher_driver", &cfg.publisher.describe())
    .s("subscriber_driver", &cfg.subscriber.describe())
    .s("client_idle", &cfg.client_idle)
    .s("placement", &cfg.placement);
    if cfg.count > 0 {
        j = j
            .n("count", cfg.count as f64)
            .n("warmup_count", cfg.warmup_count as f64)
            .n("elapsed_s", median(&mut run_elapsed.clone()))
            .arr("runs_elapsed_s", &run_elapsed);
    } else {
        j = j.n("duration_s", cfg.duration_s);
    }
    println!("RESULT {}", j.build());
}

struct RunResult {
    rate: f64,
    elapsed_s: f64,
    samples: Vec<f64>,
    sent: u64,
    refused: u64,
    pub_counters: Vec<(String, i64)>,
    sub_counters: Vec<(String, i64)>,
}

fn one_run(cfg: &Config, run: usize) -> RunResult {
    let port = if cfg.port == 0 {
        free_udp_port(&cfg.host)
    } else {
        cfg.port
    };
    let channel = cfg.channel(port);
    match cfg.placement.as_str() {
        // Before the driver starts: its threads inherit the mask.
        "sides" => pin_current_thread(0).or_die(),
        "publisher" => pin_current_thread(1).or_die(),
        _ => {}
    }
    let mut child_args = role_args(
        "sub",
        &[
            ("dir", bench_dir("udp-sub", run).display().to_string()),
            ("channel", channel.clone()),
            ("duration", cfg.duration_s.to_string()),
            ("count", cfg.count.to_string()),
            ("warmup-count", cfg.warmup_count.to_string()),
            ("fragment-limit", cfg.fragment_limit.to_string()),
            ("sub-threading", cfg.subscriber.threading.clone()),
            ("sub-driver-idle", cfg.subscriber.idle.clone()),
            ("sub-driver-options", cfg.subscriber.options.clone()),
            ("client-idle", cfg.client_idle.clone()),
        ],
    );
    if cfg.placement != "none" {
        child_args.extend(["--pin-cpu".to_string(), "1".to_string()]);
    }
    // The subscriber first: its driver binds the endpoint.
    let (mut child, out) = spawn_ready(&child_args, "subscriber");
    let dir = bench_dir("udp-pub", run);
    let driver = launch_driver_with(
        &dir,
        &cfg.publisher.threading,
        &cfg.publisher.idle,
        &parse_options(&cfg.publisher.options),
    );
    let client = connect(&dir, "udp-throughput-pub");

    // The child prints one line per second (rate mode), "done ..." and its
    // counters at the end; a reader thread echoes the rates and stops the
    // publisher on "done" or EOF.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = read_rates(out, stop.clone(), line_is_last);

    if cfg.placement == "publisher" {
        // The driver, client and reader threads stay on CPU 1; this one moves.
        pin_current_thread(0).or_die();
    }
    let limit = if cfg.count > 0 {
        cfg.warmup_count + cfg.count
    } else {
        u64::MAX
    };
    let (sent, refused) = if cfg.publication == "exclusive" {
        let mut publication = client
            .add_exclusive_publication(&channel, STREAM_ID)
            .or_die();
        await_subscriber(|| publication.is_connected());
        let r = publish_until(&stop, cfg, limit, |b| publication.offer(b).is_ok());
        wait_for(&stop, cfg);
        r
    } else {
        let publication = client.add_publication(&channel, STREAM_ID).or_die();
        await_subscriber(|| publication.is_connected());
        let r = publish_until(&stop, cfg, limit, |b| publication.offer(b).is_ok());
        wait_for(&stop, cfg);
        r
    };
    let pub_counters = system_counters(&client, SENDER_COUNTERS);
    let lines = reader.join().unwrap_or_default();
    let status = wait_child(&mut child);
    drop(client);
    drop(driver);
    remove_dir(&dir);
    if cfg.placement != "none" {
        unpin_current_thread();
    }
    if !status.success() {
        die(&format!(
            "subscriber process failed ({status}); output: {lines:?}"
        ));
    }
    let sub_counters = lines
        .iter()
        .find_map(|l| l.strip_prefix("counters "))
        .map(parse_counters_text)
        .unwrap_or_default();
    let samples = interval_rates(&lines);
    let (rate, elapsed_s) = if cfg.count > 0 {
        let done = lines
            .iter()
            .find_map(|l| l.strip_prefix("done "))
            .unwrap_or_else(|| die(&format!("no done line from the subscriber: {lines:?}")));
        let mut it = done.split_whitespace();
        let received: f64 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        let ns: f64 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        let elapsed = ns / 1e9;
        // First to last: N - 1 messages after the first one's arrival.
        ((received - 1.0) / elapsed, elapsed)
    } else {
        (median_after_warmup(&samples, &lines), f64::NAN)
    };
    RunResult {
        rate,
        elapsed_s,
        samples,
        sent,
        refused,
        pub_counters,
        sub_counters,
    }
}

/// The child's last line: its counters, printed after "done".
fn line_is_last(line: &str) -> bool {
    line.starts_with("counters ")
}

/// In count mode the publisher waits for the subscriber's last message
/// (retransmits still flow meanwhile).
fn wait_for(stop: &AtomicBool, cfg: &Config) {
    let deadline = Instant::now() + Duration::from_secs_f64(cfg.duration_s.max(10.0) + 120.0);
    while !stop.load(Ordering::Acquire) {
        if Instant::now() > deadline {
            die("the subscriber did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Offers in a tight loop until `stop` or `limit` accepted offers. Returns (accepted, refused).
fn publish_until(
    stop: &AtomicBool,
    cfg: &Config,
    limit: u64,
    mut offer: impl FnMut(&[u8]) -> bool,
) -> (u64, u64) {
    let buf = vec![0x5au8; cfg.message_length];
    let mut idle = ClientIdle::parse(&cfg.client_idle);
    let mut ok = 0u64;
    let mut refused = 0u64;
    let deadline = Instant::now() + Duration::from_secs_f64(cfg.duration_s.max(10.0) + 120.0);
    let mut n = 0u32;
    while ok < limit && !stop.load(Ordering::Relaxed) {
        if offer(&buf) {
            ok += 1;
            idle.reset();
        } else {
            refused += 1;
            idle.idle();
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
    let dir = child_dir(args);
    let channel = args.str("channel", "");
    let duration_s: f64 = args.get("duration", 6.0);
    let count: u64 = args.get("count", 0);
    let warmup: u64 = args.get("warmup-count", 0);
    let limit: usize = args.get("fragment-limit", 10);
    let mut idle = ClientIdle::parse(&args.str("client-idle", "yield"));
    let driver = launch_driver_with(
        &dir,
        &args.str("sub-threading", "shared"),
        &args.str("sub-driver-idle", "yielding"),
        &parse_options(&args.str("sub-driver-options", "")),
    );
    let client = connect(&dir, "udp-throughput-sub");
    let mut sub = subscribe_ready(&client, &channel, STREAM_ID, Duration::from_secs(20));

    let received = std::cell::Cell::new(0u64);
    let mut handler = |_payload: &[u8], _h: &sulis_client::Header| {
        received.set(received.get() + 1);
        Ok::<(), ()>(())
    };
    await_first(Duration::from_secs(20), || {
        sub.poll(&mut handler, limit).unwrap()
    });
    let mut start = Instant::now();
    if count > 0 {
        // Count mode: message warmup + 1 to message warmup + count.
        let deadline = start + Duration::from_secs(300);
        let mut polls = 0u32;
        let mut first = 0u64;
        loop {
            let got = received.get();
            if first == 0 && got > warmup {
                start = Instant::now();
                first = got;
            }
            if got >= warmup + count {
                break;
            }
            if sub.poll(&mut handler, limit).unwrap() == 0 {
                idle.idle();
            } else {
                idle.reset();
            }
            polls = polls.wrapping_add(1);
            if polls & 0xFFFF == 0 && Instant::now() > deadline {
                die(&format!(
                    "only {} of {} messages in 300 s",
                    received.get(),
                    warmup + count
                ));
            }
        }
        // Messages from the one that started the clock (included) to the last.
        println!(
            "done {} {}",
            received.get() - first + 1,
            start.elapsed().as_nanos()
        );
    } else {
        report_intervals(
            start,
            duration_s,
            || received.get(),
            || {
                if sub.poll(&mut handler, limit).unwrap() == 0 {
                    idle.idle();
                } else {
                    idle.reset();
                }
            },
        );
        println!("done {}", received.get());
    }
    println!(
        "counters {}",
        counters_text(&system_counters(&client, RECEIVER_COUNTERS))
    );
    drop(sub);
    drop(client);
    drop(driver);
    remove_dir(&dir);
}
