#!/usr/bin/env python3
"""IPC throughput of sulis beside its peers, 32-byte messages, one command.

    python bench/ipc_throughput.py            # 3 rounds, ~3 minutes
    python bench/ipc_throughput.py --quick    # 1 short round (smoke test)

What runs, interleaved round by round (round 1 of every variant, then round 2...):

* sulis Python, exclusive / concurrent publication: a publisher process
  (embedded media driver, SHARED threading, ``--driver-idle`` strategy, plus
  ``client.add_exclusive_publication("aeron:ipc", 1001)`` or
  ``add_publication``) calls ``pub.offer(payload)`` once per message in a
  Python loop (retrying when it returns < 0); a subscriber process drains with
  ``sub.poll_batch(4096)`` and counts ``len(batch)``. msgs/s are measured at
  the receiver per one-second interval from its first message; the first
  interval is warm-up and left out; a run's figure is the median of the rest.
* sulis native Rust (crates/sulis-bench ``ipc-throughput``): the same shape
  without Python (``ExclusivePublication::offer`` / ``Publication::offer`` in
  a tight loop, ``Subscription::poll`` with a counting handler, poll limit 10
  like Aeron's sample), embedded driver busy-spinning like Aeron's sample.
* pyzmq PUSH/PULL over ``ipc://`` (``bench.peers.zmq_peers``): one ``send``
  per message in one process, one ``recv`` per message in another.
* eclipse-zenoh (``bench.peers.zenoh_peer``): ``pub.put`` / ``sub.recv`` per
  message, two sessions in peer mode over ``unixsock-stream`` (a Unix domain
  socket; zenoh's shared memory does not apply to 32-byte payloads).
* iceoryx2 (``bench.peers.iceoryx2_peer``): ``publisher.send_copy`` /
  ``subscriber.receive`` per message over its shared-memory IPC service, no
  overflow (the publisher waits for room).
* Aeron Java 1.15.1 (and the current release unless ``--no-aeron-current``)
  ``EmbeddedExclusiveIpcThroughput``: one JVM, embedded SHARED driver with a
  no-op (spinning) idle strategy, per-second rate lines, first one dropped.

pyzmq, zenoh and iceoryx2 are measured like the sulis rows: msgs/s counted at
the receiver per one-second interval from its first message, the first interval
left out as warm-up, a run's figure the median of the rest.

Every figure printed is the median over the rounds. Targets printed beside:
(a) sulis Python exclusive >= 10 M msgs/s and >= 5x pyzmq;
(b) sulis native >= 1.0x Aeron Java 1.15.1.
Refuses to run on a debug build of sulis.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    Child,
    Skip,
    child_signals,
    count_intervals,
    cpu_summary,
    fmt_rate,
    fmt_ratio,
    json_out,
    main_guard,
    median,
    missing_text,
    native_binary,
    offer_loop,
    parse_only,
    pin_cpu,
    print_table,
    rate_samples,
    require_release_build,
    rm_tree,
    run_native,
    run_rounds,
    save_results,
    shm_dir,
    stop_all,
)

CHANNEL = "aeron:ipc"
STREAM_ID = 1001
MESSAGE_LENGTH = 32
TARGET_PY_MSGS = 10_000_000
TARGET_VS_ZMQ = 5.0
TARGET_VS_AERON = 1.0
OFFER_CHUNK = 8192  # offers between two checks of the stop file


# =============================================================== child roles

def role_pub(a: argparse.Namespace) -> int:
    """Embedded driver + publisher: offers until the stop file appears."""
    import sulis

    pin_cpu(a.pin_cpu)
    with sulis.MediaDriver(dir=a.dir, threading_mode="shared", idle_strategy=a.driver_idle,
                           ipc_term_buffer_length=a.term_length, dir_delete_on_shutdown=True) as driver:
        with sulis.Client(dir=driver.dir) as client:
            if a.publication == "exclusive":
                pub = client.add_exclusive_publication(CHANNEL, STREAM_ID)
            else:
                pub = client.add_publication(CHANNEL, STREAM_ID)
            json_out({"ready": True, "dir": driver.dir})
            deadline = time.monotonic() + 30
            while not pub.is_connected:
                if time.monotonic() > deadline:
                    json_out({"error": "no subscriber connected in 30 s"})
                    return 1
                time.sleep(0.001)
            sent, refused = offer_loop(pub, b"\x5a" * MESSAGE_LENGTH, a.stop_file, a.max_seconds,
                                       chunk=OFFER_CHUNK)
            json_out({"sent": sent, "refused": refused})
    return 0


def role_sub(a: argparse.Namespace) -> int:
    """Subscriber: drains with poll_batch(4096); prints one line per second from the first message."""
    import sulis

    pin_cpu(a.pin_cpu)
    with sulis.Client(dir=a.dir) as client:
        sub = client.add_subscription(CHANNEL, STREAM_ID)
        json_out({"ready": True})
        count = count_intervals(sub.poll_batch, a.batch, a.duration, json_out)
        if count < 0:
            return 1
        json_out({"done": True, "received": count})
    return 0


# =============================================================== orchestration

def python_run(publication: str, a: argparse.Namespace) -> dict:
    """One run of the Python publisher/subscriber pair; msgs/s = median of the post-warm-up intervals."""
    base = shm_dir("sulis-bench-pytp-")
    stop_file = os.path.join(base, "stop")
    me = [sys.executable, os.path.abspath(__file__)]
    pin_pub = ["--pin-cpu", "0"] if a.pin else []
    pin_sub = ["--pin-cpu", "1"] if a.pin else []
    pub = sub = None
    try:
        pub = Child(me + ["--role", "pub", "--dir", os.path.join(base, "driver"),
                          "--publication", publication, "--stop-file", stop_file,
                          "--max-seconds", str(a.duration + 60), "--driver-idle", a.driver_idle,
                          "--term-length", a.term_length, *pin_pub], "publisher")
        ready = pub.read_json(60)
        sub = Child(me + ["--role", "sub", "--dir", ready["dir"], "--duration", str(a.duration),
                          "--batch", str(a.batch), *pin_sub], "subscriber")
        sub.read_json(60)
        samples, _done = rate_samples(sub, 60, watch=[pub])
        with open(stop_file, "w"):
            pass
        pub_res = pub.read_json(60)
        pub.wait_ok(30)
        sub.wait_ok(30)
    finally:
        stop_all((pub, sub))
        rm_tree(base)
    if len(samples) < 2:
        raise RuntimeError(f"only {len(samples)} intervals")
    return {"msgs_per_s": median(samples[1:]), "samples": samples, "sent": pub_res["sent"],
            "refused": pub_res["refused"],
            "config": f"driver shared/{a.driver_idle}, sub poll_batch({a.batch})" + (", pinned" if a.pin else "")}


def native_run(publication: str, a: argparse.Namespace) -> dict:
    exe = native_binary("ipc-throughput", build=False)
    args = ["--runs", "1", "--duration", str(a.duration), "--publication", publication,
            "--message-length", str(MESSAGE_LENGTH), "--driver-idle", a.native_driver_idle]
    if a.pin:
        args.append("--pin")
    r = run_native(exe, args, timeout_s=a.duration + 120)
    return {"msgs_per_s": r["msgs_per_s"], "samples": r["samples"][0], "native": r,
            "config": f"driver shared/{a.native_driver_idle}, sub poll(10)" + (", pinned" if a.pin else "")}


def zmq_run(a: argparse.Namespace) -> dict:
    try:
        from bench.peers import zmq_peers
        import zmq  # noqa: F401
    except ImportError as exc:
        raise Skip(f"pyzmq not installed ({exc}); run `bash bench/peers/install.sh`") from None
    r = zmq_peers.push_pull_throughput(duration_s=a.duration, size=MESSAGE_LENGTH, transport="ipc")
    print("      intervals: " + ", ".join(f"{s:,.0f}" for s in r["samples"]) + " msgs/s (first = warm-up)",
          flush=True)
    r["config"] = f"pyzmq {r['pyzmq']}, default HWM"
    return r


def zenoh_run(a: argparse.Namespace) -> dict:
    from bench.peers import zenoh_peer

    r = zenoh_peer.throughput("unixsock", duration_s=a.duration, size=MESSAGE_LENGTH, pin=a.pin)
    r["config"] = f"zenoh {r['zenoh']}, Unix socket, BLOCK, no shm" + (", pinned" if a.pin else "")
    return r


def iceoryx2_run(a: argparse.Namespace) -> dict:
    from bench.peers import iceoryx2_peer

    r = iceoryx2_peer.throughput(duration_s=a.duration, size=MESSAGE_LENGTH, pin=a.pin)
    r["config"] = f"iceoryx2 {r['iceoryx2']}, buffer 4096, no overflow" + (", pinned" if a.pin else "")
    return r


def aeron_run(jar: str, a: argparse.Namespace) -> dict:
    from bench.peers import aeron_java

    try:
        r = aeron_java.ipc_throughput(duration_s=a.duration, jar=jar, message_length=MESSAGE_LENGTH)
    except aeron_java.PeerNotFound as exc:
        raise Skip(str(exc)) from None
    print("      intervals: " + ", ".join(f"{s:,.0f}" for s in r["samples"]) + " msgs/s (first = warm-up)",
          flush=True)
    r["config"] = f"Aeron {r['aeron_version']}, 1 JVM, SHARED driver, no-op idle"
    return r


# =============================================================== main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=None, help="rounds per variant (default 3; --quick: 1)")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds per sulis/Aeron run, the first is warm-up (default 6; --quick: 3)")
    ap.add_argument("--quick", action="store_true", help="one short round: a smoke test, not a measurement")
    ap.add_argument("--batch", type=int, default=4096, help="poll_batch limit of the Python subscriber")
    ap.add_argument("--driver-idle", default="backoff",
                    help="idle strategy of the driver in the Python runs (default backoff: the two Python "
                         "processes already use both cores)")
    ap.add_argument("--native-driver-idle", default="busy-spin",
                    help="idle strategy of the driver in the native runs (default busy-spin, as Aeron's sample)")
    ap.add_argument("--term-length", default="64m", help="IPC term length of the Python runs (default 64m)")
    ap.add_argument("--pin", action="store_true", help="publisher process on CPU 0, subscriber on CPU 1")
    ap.add_argument("--only", default="", help="comma list among: py-exclusive,py-concurrent,native-exclusive,"
                                               "native-concurrent,zmq,zenoh,iceoryx2,aeron-1.15.1,aeron-current")
    ap.add_argument("--no-aeron-current", action="store_true", help="skip the current Aeron release")
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build for the native binary")
    ap.add_argument("--max-interference", type=float, default=0.10,
                    help="a run during which other processes used more than this share of a CPU is noisy "
                         "(default 0.10)")
    ap.add_argument("--retry-noisy", type=int, default=2, help="times a noisy run is repeated (default 2)")
    # child roles (internal)
    ap.add_argument("--role", choices=["main", "pub", "sub"], default="main", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--publication", default="exclusive", help=argparse.SUPPRESS)
    ap.add_argument("--stop-file", help=argparse.SUPPRESS)
    ap.add_argument("--max-seconds", type=float, default=120, help=argparse.SUPPRESS)
    ap.add_argument("--pin-cpu", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.role != "main":
        child_signals()
        if a.role == "pub":
            return role_pub(a)
        a.duration = a.duration or 6
        return role_sub(a)

    profile = require_release_build()
    if a.runs is not None and a.runs < 1:
        ap.error("--runs must be at least 1")
    if a.batch < 1:
        ap.error("--batch must be at least 1")
    runs = a.runs or (1 if a.quick else 3)
    a.duration = a.duration or (3.0 if a.quick else 6.0)
    if a.duration < 2.5:
        ap.error("--duration must be at least 2.5 s (one warm-up second plus measured ones)")
    if a.pin and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs 2 CPUs")

    variants = [
        ("py-exclusive", "sulis Python ExclusivePublication.offer", lambda: python_run("exclusive", a)),
        ("py-concurrent", "sulis Python Publication.offer (concurrent)", lambda: python_run("concurrent", a)),
        ("native-exclusive", "sulis native Rust ExclusivePublication", lambda: native_run("exclusive", a)),
        ("native-concurrent", "sulis native Rust Publication (concurrent)", lambda: native_run("concurrent", a)),
        ("zmq", "pyzmq PUSH/PULL ipc://", lambda: zmq_run(a)),
        ("zenoh", "zenoh put/recv unixsock-stream", lambda: zenoh_run(a)),
        ("iceoryx2", "iceoryx2 send_copy/receive (shm)", lambda: iceoryx2_run(a)),
        ("aeron-1.15.1", "Aeron Java 1.15.1 EmbeddedExclusiveIpcThroughput", lambda: aeron_run("1.15.1", a)),
        ("aeron-current", "Aeron Java current EmbeddedExclusiveIpcThroughput", lambda: aeron_run("current", a)),
    ]
    if a.no_aeron_current:
        variants = [v for v in variants if v[0] != "aeron-current"]
    variants = parse_only(a.only, variants, ap)

    print(f"sulis IPC throughput, {MESSAGE_LENGTH} B messages: {runs} round(s), {a.duration:g} s per run "
          f"(every system: per-second counts at the receiver, first second = warm-up); sulis {profile} build; "
          f"{cpu_summary()}")
    print(f"Python runs: driver shared/{a.driver_idle}, poll_batch({a.batch}); native runs: driver "
          f"shared/{a.native_driver_idle}; {'pinned pub CPU 0 / sub CPU 1 (sulis, zenoh, iceoryx2)' if a.pin else 'no CPU pinning'}")
    if any(k.startswith("native") for k, _, _ in variants):
        try:
            native_binary("ipc-throughput", build=not a.no_build)
        except Skip as exc:
            print(f"[skip] native Rust: {exc}")
            variants = [v for v in variants if not v[0].startswith("native")]

    results, skipped, errors = run_rounds(variants, runs, a.retry_noisy, a.max_interference, lambda r: f"{r['msgs_per_s']:,.0f} msgs/s")

    med = {k: median(r["msgs_per_s"] for r in rs) for k, rs in results.items() if rs}
    names = {k: n for k, n, _ in variants}
    zmq = med.get("zmq")
    aeron = med.get("aeron-1.15.1")
    py = med.get("py-exclusive")
    print()
    print(f"IPC throughput, {MESSAGE_LENGTH} B messages, median of the rounds (msgs/s); "
          "'vs X' = this row's median / X's median:")
    rows = []
    for key, name, _ in variants:
        rs = results.get(key) or []
        if not rs:
            rows.append([name, missing_text(key, skipped, errors), "0", "", "", "", "", "", ""])
            continue
        m = med[key]
        per = " / ".join(f"{r['msgs_per_s'] / 1e6:.2f}" for r in rs)
        rows.append([name, fmt_rate(m), str(len(rs)), per,
                     fmt_ratio(m / TARGET_PY_MSGS),
                     fmt_ratio(m / py) if py else "-",
                     fmt_ratio(m / zmq) if zmq else "-",
                     fmt_ratio(m / aeron) if aeron else "-",
                     rs[0].get("config", "")])
    print_table(["name", "median msgs/s", "runs", "per run (M)", "vs 10M", "vs sulis Py", "vs pyzmq",
                 "vs Aeron 1.15.1", "configuration"], rows, align="lrrrrrrrl")

    print()
    print("targets:")

    def verdict(ok: bool) -> str:
        return "MET" if ok else "MISSED"

    if py:
        print(f"  (a) sulis Python exclusive offer >= 10 M msgs/s: {py / 1e6:.2f} M = {py / TARGET_PY_MSGS:.2f}x "
              f"-> {verdict(py >= TARGET_PY_MSGS)}")
        if zmq:
            print(f"  (a) sulis Python exclusive offer >= 5x pyzmq PUSH/PULL ({zmq / 1e6:.2f} M): "
                  f"{py / zmq:.2f}x -> {verdict(py / zmq >= TARGET_VS_ZMQ)}")
    nat = med.get("native-exclusive")
    if nat and aeron:
        print(f"  (b) sulis native exclusive >= 1.0x Aeron Java 1.15.1 ({aeron / 1e6:.2f} M): "
              f"{nat / 1e6:.2f} M = {nat / aeron:.2f}x -> {verdict(nat / aeron >= TARGET_VS_AERON)}")
    noisy = [(names[k], i + 1, r["interference"]) for k, rs in results.items() for i, r in enumerate(rs)
             if r.get("interference", 0) > a.max_interference]
    for name, i, share in noisy:
        print(f"  note: {name} run {i} is noisy: other processes used {share * 100:.0f}% of a CPU during it")
    for k, errs in errors.items():
        print(f"  note: {names[k]} failed {len(errs)} time(s): {errs[0][:300]}")

    path = save_results("ipc_throughput", {
        "argv": sys.argv, "runs": runs, "duration_s": a.duration, "message_length": MESSAGE_LENGTH,
        "driver_idle": a.driver_idle, "native_driver_idle": a.native_driver_idle, "pinned": a.pin,
        "medians": {names[k]: v for k, v in med.items()},
        "results": {names[k]: v for k, v in results.items()}, "skipped": skipped, "errors": errors,
        "machine": cpu_summary(),
    })
    if path:
        print(f"\n(details: {path.relative_to(Path(__file__).resolve().parent.parent)})")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main_guard(main))
