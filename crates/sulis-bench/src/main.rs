//! `sulis-bench`: the measured loops of sulis without Python, as roles of
//! the native rows of bench/*.py (bench/README.md, "How the harness is
//! built"). Arguments are `ROLE key=value ...`:
//!
//! ```text
//! sulis-bench pub  dir= [driver=k=v,...] channel= stream= [publication=exclusive|concurrent]
//!                  [length=32|mixed] (total=N | stop=FILE) [idle=spin|yield|none]
//! sulis-bench sub  dir= [driver=...] channel= stream= [limit=10] (duration=S | total=N warmup=W) [idle=]
//!                  [length=mixed]
//! sulis-bench ping dir= [driver=...] ping_channel= pong_channel= [ping_stream=1002] [pong_stream=1003]
//!                  n= warmup= [length=32] [idle=]
//! sulis-bench pong dir= [driver=...] ping_channel= pong_channel= [ping_stream=] [pong_stream=] total= [idle=]
//! every role:      [driver_cpu=N] [cpu=N] [loop_cpu=N]
//! ```
//!
//! `driver=` launches an embedded media driver in `dir` with those options
//! (as `sulis driver --print-config` names them), else the client uses the
//! driver running there. Threads inherit the mask they start with:
//! `driver_cpu` pins before the driver starts, `cpu` after it and before the
//! client's thread starts, `loop_cpu` the role's thread alone at the end.
//! `length=mixed`: message `i` is [`mixed_length`]`(i)` bytes (8 B to 256 KiB,
//! 1 % fragmented; `AeronPeer.java` has the same sequence), and a subscriber
//! given `length=mixed` checks each one's length. A subscriber counts whole
//! messages (fragments with the END flag) either way.
//! `idle`: what a client does when it could not progress (a refused offer,
//! an empty poll): `none`, `spin` (a pause hint) or `yield`.
//!
//! Each role speaks the JSON lines of every role (bench/README.md): `ready`,
//! then its results (`interval_s`/`messages` per second and `done`;
//! `done` with `ns` when counted; `sent`; `rtt_ns`; `echoed`), or `error`
//! and exit status 2. It keeps its driver up until its stdin closes, so that
//! the orchestrator can read the driver's counters; the orchestrator removes
//! the directories, and its children die with it (`PR_SET_PDEATHSIG`).

use std::cell::Cell;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use sulis_client::{Client, ClientContext, Header};
use sulis_driver::{DriverContext, MediaDriver};
use sulis_protocol::frame::END_FLAG;

/// Every key a role takes (a misspelt one is an error, not a default).
const KEYS: &str =
    "dir driver driver_cpu cpu loop_cpu idle channel stream publication length total stop limit \
     duration warmup n ping_channel pong_channel ping_stream pong_stream";

fn die(msg: &str) -> ! {
    println!("{{\"error\": {}}}", json_str(msg));
    std::process::exit(2)
}

fn json_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

trait OrDie<T> {
    fn or_die(self) -> T;
}

impl<T, E: std::fmt::Display> OrDie<T> for Result<T, E> {
    fn or_die(self) -> T {
        self.unwrap_or_else(|e| die(&e.to_string()))
    }
}

/// The `key=value` arguments.
struct Args(HashMap<String, String>);

impl Args {
    fn str(&self, key: &str, default: &str) -> String {
        self.0.get(key).cloned().unwrap_or_else(|| default.into())
    }

    fn req(&self, key: &str) -> String {
        self.0
            .get(key)
            .cloned()
            .unwrap_or_else(|| die(&format!("{key}= is missing")))
    }

    fn num<T: std::str::FromStr>(&self, key: &str, default: T) -> T {
        match self.0.get(key) {
            None => default,
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| die(&format!("{key}={v}: not a number"))),
        }
    }
}

/// What a client does when it could not progress: nothing, a pause hint or
/// `sched_yield`.
#[derive(Clone, Copy)]
enum ClientIdle {
    None,
    Spin,
    Yield,
}

impl ClientIdle {
    fn new(args: &Args) -> ClientIdle {
        match args.str("idle", "spin").as_str() {
            "none" => ClientIdle::None,
            "spin" => ClientIdle::Spin,
            "yield" => ClientIdle::Yield,
            other => die(&format!("idle={other}: expected none, spin or yield")),
        }
    }

    #[inline]
    fn idle(self) {
        match self {
            ClientIdle::None => {}
            ClientIdle::Spin => std::hint::spin_loop(),
            ClientIdle::Yield => std::thread::yield_now(),
        }
    }
}

fn pin(cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            die(&format!(
                "pinning to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
}

fn await_cond(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        if Instant::now() > deadline {
            die(&format!("no {what} in 30 s"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn main() {
    if cfg!(debug_assertions) {
        die("refusing to benchmark a debug build: cargo build --release -p sulis-bench");
    }
    let mut argv = std::env::args().skip(1);
    let role = argv.next().unwrap_or_default();
    let args = Args(
        argv.map(|a| match a.split_once('=') {
            Some((k, v)) if KEYS.split_whitespace().any(|key| key == k) => {
                (k.to_string(), v.to_string())
            }
            _ => die(&format!(
                "unexpected argument {a:?} (see the top of main.rs)"
            )),
        })
        .collect(),
    );
    pin(args.0.get("driver_cpu").map(|_| args.num("driver_cpu", 0)));
    let dir = PathBuf::from(args.req("dir"));
    let driver = args.0.get("driver").map(|options| launch(&dir, options));
    pin(args.0.get("cpu").map(|_| args.num("cpu", 0)));
    let client = Client::connect(ClientContext {
        dir: dir.clone(),
        driver_timeout: Duration::from_secs(10),
        name: format!("sulis-bench {role}"),
        interrupt: None,
    })
    .unwrap_or_else(|e| {
        die(&format!(
            "cannot connect to the driver in {}: {e}",
            dir.display()
        ))
    });
    pin(args.0.get("loop_cpu").map(|_| args.num("loop_cpu", 0)));
    match role.as_str() {
        "pub" => publisher(&args, &client, &dir),
        "sub" => subscriber(&args, &client),
        "ping" => ping(&args, &client, &dir),
        "pong" => pong(&args, &client),
        _ => die(&format!("unknown role {role:?}: pub, sub, ping or pong")),
    }
    // The streams (and the driver) stay up until the orchestrator closes stdin.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(client);
    drop(driver);
}

fn launch(dir: &Path, options: &str) -> MediaDriver {
    let mut ctx = DriverContext::default();
    ctx.dir = dir.to_path_buf();
    for kv in options.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .unwrap_or_else(|| die(&format!("driver option {kv:?} is not name=value")));
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

fn ready(dir: &Path) {
    println!(
        "{{\"ready\": true, \"dir\": {}}}",
        json_str(&dir.display().to_string())
    );
}

/// The length of message `i` of a `length=mixed` stream: 1 % of 4 KiB to
/// 256 KiB (fragmented at any MTU), the rest 8 to 1,376 B; 1.4 KiB on average.
pub fn mixed_length(i: u64) -> usize {
    if i % 100 == 99 {
        4096 << ((i / 100) % 7)
    } else {
        8 + (i.wrapping_mul(2_654_435_761) % 1369) as usize
    }
}

fn publisher(args: &Args, client: &Client, dir: &Path) {
    let channel = args.req("channel");
    let stream = args.num("stream", 1001);
    if args.str("length", "32") == "mixed" {
        return mixed_publisher(args, client, dir, &channel, stream);
    }
    let buf = vec![0x5au8; args.num("length", 32usize)];
    let total: u64 = args.num("total", 0);
    let stop = args.0.get("stop").map(PathBuf::from);
    if total == 0 && stop.is_none() {
        die("pub needs total= or stop=");
    }
    let idle = ClientIdle::new(args);
    let (sent, refused) = if args.str("publication", "exclusive") == "exclusive" {
        let mut publication = client.add_exclusive_publication(&channel, stream).or_die();
        ready(dir);
        await_cond("subscriber", || publication.is_connected());
        offer_loop(|b| publication.offer(b).is_ok(), &buf, total, &stop, idle)
    } else {
        let publication = client.add_publication(&channel, stream).or_die();
        ready(dir);
        await_cond("subscriber", || publication.is_connected());
        offer_loop(|b| publication.offer(b).is_ok(), &buf, total, &stop, idle)
    };
    println!("{{\"sent\": {sent}, \"refused\": {refused}}}");
}

/// `length=mixed`: message `i` of [`mixed_length`]`(i)` bytes, `total` of them
/// (or until the stop file), from an exclusive publication.
fn mixed_publisher(args: &Args, client: &Client, dir: &Path, channel: &str, stream: i32) {
    let buf = vec![0x5au8; 256 * 1024];
    let total: u64 = args.num("total", 0);
    let stop = args.0.get("stop").map(PathBuf::from);
    let idle = ClientIdle::new(args);
    let mut publication = client.add_exclusive_publication(channel, stream).or_die();
    if publication.max_message_length() < buf.len() {
        die(&format!(
            "length=mixed needs messages of 256 KiB: the term length allows {}",
            publication.max_message_length()
        ));
    }
    ready(dir);
    await_cond("subscriber", || publication.is_connected());
    let (mut sent, mut refused, mut bytes) = (0u64, 0u64, 0u64);
    while total == 0 || sent < total {
        let length = mixed_length(sent);
        if publication.offer(&buf[..length]).is_ok() {
            sent += 1;
            bytes += length as u64;
            if sent & 0x3FF == 0 && stop.as_ref().is_some_and(|p| p.exists()) {
                break;
            }
        } else {
            refused += 1;
            idle.idle();
        }
    }
    println!("{{\"sent\": {sent}, \"refused\": {refused}, \"bytes\": {bytes}}}");
}

/// Offers in a tight loop until `total` offers were taken (0: no limit) or the
/// stop file exists (looked for every 64 Ki offers). Returns (taken, refused).
#[inline(never)]
fn offer_loop(
    mut offer: impl FnMut(&[u8]) -> bool,
    buf: &[u8],
    total: u64,
    stop: &Option<PathBuf>,
    idle: ClientIdle,
) -> (u64, u64) {
    let (mut sent, mut refused, mut n) = (0u64, 0u64, 0u32);
    while total == 0 || sent < total {
        if offer(buf) {
            sent += 1;
        } else {
            refused += 1;
            idle.idle();
        }
        n = n.wrapping_add(1);
        if n & 0xFFFF == 0 && stop.as_ref().is_some_and(|p| p.exists()) {
            break;
        }
    }
    (sent, refused)
}

fn subscriber(args: &Args, client: &Client) {
    let mut sub = client
        .add_subscription(&args.req("channel"), args.num("stream", 1001))
        .or_die();
    println!("{{\"ready\": true}}");
    let limit = args.num("limit", 10usize);
    let idle = ClientIdle::new(args);
    let received = Cell::new(0u64);
    // Whole messages: a fragmented one counts at its last fragment. A mixed
    // stream's are checked: message `i` must be `mixed_length(i)` bytes.
    let mixed = args.str("length", "32") == "mixed";
    let partial = Cell::new(0usize);
    let mut handler = |payload: &[u8], h: &Header| {
        if h.flags() & END_FLAG != 0 {
            let length = partial.replace(0) + payload.len();
            if mixed && length != mixed_length(received.get()) {
                die(&format!(
                    "message {} is {length} bytes, not {}",
                    received.get(),
                    mixed_length(received.get())
                ));
            }
            received.set(received.get() + 1);
        } else {
            partial.set(partial.get() + payload.len());
        }
        Ok::<(), ()>(())
    };
    let mut poll = || {
        if sub.poll(&mut handler, limit).unwrap_or(0) == 0 {
            idle.idle();
        }
    };
    let give_up = Instant::now() + Duration::from_secs(30);
    while received.get() == 0 {
        poll();
        if Instant::now() > give_up {
            die("no message in 30 s");
        }
    }
    if args.0.contains_key("duration") {
        // One line per second from the first message; the clock is read every 64th poll.
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(args.num("duration", 6.0));
        let (mut interval_start, mut next) = (start, start + Duration::from_secs(1));
        let (mut last, mut polls) = (received.get(), 0u32);
        loop {
            poll();
            polls = polls.wrapping_add(1);
            if polls & 63 == 0 {
                let now = Instant::now();
                if now >= next {
                    let count = received.get();
                    println!(
                        "{{\"interval_s\": {}, \"messages\": {}}}",
                        (now - interval_start).as_secs_f64(),
                        count - last
                    );
                    (last, interval_start) = (count, now);
                    next += Duration::from_secs(1);
                    if now >= end {
                        break;
                    }
                }
            }
        }
        println!("{{\"done\": true, \"received\": {}}}", received.get());
    } else {
        let total: u64 = args.num("total", 0);
        let warmup: u64 = args.num("warmup", 0);
        while received.get() <= warmup {
            poll();
        }
        let start = Instant::now();
        let first = received.get();
        while received.get() < total {
            poll();
        }
        println!(
            "{{\"done\": true, \"received\": {}, \"ns\": {}}}",
            received.get() - first + 1,
            start.elapsed().as_nanos()
        );
    }
}

fn ping(args: &Args, client: &Client, dir: &Path) {
    let n: usize = args.num("n", 0);
    let warmup: usize = args.num("warmup", 0);
    let mut publication = client
        .add_exclusive_publication(&args.req("ping_channel"), args.num("ping_stream", 1002))
        .or_die();
    let mut pongs = client
        .add_subscription(&args.req("pong_channel"), args.num("pong_stream", 1003))
        .or_die();
    ready(dir);
    await_cond("pong", || {
        publication.is_connected() && pongs.image_count() > 0
    });
    let idle = ClientIdle::new(args);
    let mut msg = vec![0x5au8; args.num("length", 32usize)];
    let last = msg.len() - 1;
    let mut handler = |_p: &[u8], _h: &Header| Ok::<(), ()>(());
    let mut rtt = Vec::with_capacity(n);
    for i in 0..warmup + n {
        msg[last] = i as u8;
        let t0 = Instant::now();
        while publication.offer(&msg).is_err() {
            idle.idle();
        }
        while pongs.poll(&mut handler, 1).unwrap_or(0) == 0 {
            idle.idle();
        }
        let ns = t0.elapsed().as_nanos() as u64;
        if i >= warmup {
            rtt.push(ns);
        }
    }
    let list: Vec<String> = rtt.iter().map(u64::to_string).collect();
    println!("{{\"rtt_ns\": [{}]}}", list.join(","));
}

fn pong(args: &Args, client: &Client) {
    let total: u64 = args.num("total", 0);
    let mut pings = client
        .add_subscription(&args.req("ping_channel"), args.num("ping_stream", 1002))
        .or_die();
    let mut publication = client
        .add_exclusive_publication(&args.req("pong_channel"), args.num("pong_stream", 1003))
        .or_die();
    println!("{{\"ready\": true}}");
    let offer_idle = ClientIdle::new(args);
    let mut handler = |payload: &[u8], _h: &Header| {
        while publication.offer(payload).is_err() {
            offer_idle.idle();
        }
        Ok::<(), ()>(())
    };
    let idle = ClientIdle::new(args);
    let mut echoed = 0u64;
    while echoed < total {
        let n = pings.poll(&mut handler, 1).unwrap_or(0);
        if n == 0 {
            idle.idle();
        } else {
            echoed += n as u64;
        }
    }
    println!("{{\"echoed\": {echoed}}}");
}

#[cfg(test)]
mod tests {
    use super::mixed_length;

    #[test]
    fn the_mixed_sequence_is_the_one_the_java_and_python_peers_repeat() {
        let first: Vec<usize> = (0..4).map(mixed_length).collect();
        assert_eq!(first, [8, 898, 419, 1309]);
        assert_eq!(mixed_length(99), 4096);
        assert_eq!(mixed_length(699), 4096 << 6);
        let mean = (0..100_000).map(mixed_length).sum::<usize>() / 100_000;
        assert!((1300..1500).contains(&mean), "{mean}");
    }
}
