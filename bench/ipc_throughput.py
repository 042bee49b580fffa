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
* sulis Python offer_batch, exclusive / concurrent: the same publisher
  process, but ``pub.offer_batch(data=..., offsets=...)`` publishes
  ``--batch-size`` (1,024) messages per call from one data buffer with
  Arrow-layout int32 offsets (after back pressure the rest of the batch goes
  again, the offsets sliced without a copy).
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
(b) sulis native >= 1.0x Aeron Java 1.15.1;
(c) sulis Python offer_batch (exclusive, batches of 1,024) >= 30 M msgs/s and
    >= 0.65x sulis native exclusive.
Refuses to run on a debug build of sulis.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402
from bench._common import json_out, pin_cpu  # noqa: E402

CHANNEL = "aeron:ipc"
STREAM_ID = 1001
MESSAGE_LENGTH = 32
TARGET_PY_MSGS = 10_000_000
TARGET_VS_ZMQ = 5.0
TARGET_VS_AERON = 1.0
TARGET_BATCH_MSGS = 30_000_000
TARGET_BATCH_VS_NATIVE = 0.65
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
            if not c.wait_until(lambda: pub.is_connected, "no subscriber connected in 30 s"):
                return 1
            if a.offer == "batch":
                sent, refused = c.batch_offer_loop(pub, b"\x5a" * MESSAGE_LENGTH, a.batch_size, a.stop_file,
                                                   a.max_seconds)
            else:
                sent, refused = c.offer_loop(pub, b"\x5a" * MESSAGE_LENGTH, a.stop_file, a.max_seconds,
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
        count = c.count_intervals(sub.poll_batch, a.batch, a.duration, json_out)
        if count < 0:
            return 1
        json_out({"done": True, "received": count})
    return 0


# =============================================================== orchestration

def python_run(publication: str, a: argparse.Namespace, offer: str = "single") -> dict:
    """One run of the Python publisher/subscriber pair; msgs/s = median of the post-warm-up intervals."""
    base = c.shm_dir("sulis-bench-pytp-")
    stop_file = os.path.join(base, "stop")
    me = c.self_cmd(__file__)
    with c.Children(base) as ch:  # the publisher first: its driver's directory is the subscriber's
        pub = ch.start(me + ["--role", "pub", "--dir", os.path.join(base, "driver"),
                             "--publication", publication, "--stop-file", stop_file,
                             "--offer", offer, "--batch-size", str(a.batch_size),
                             "--max-seconds", str(a.duration + 60), "--driver-idle", a.driver_idle,
                             "--term-length", a.term_length, *c.pin_args(0, a.pin)], "publisher")
        ready = pub.read_json(60)
        sub = ch.start(me + ["--role", "sub", "--dir", ready["dir"], "--duration", str(a.duration),
                             "--batch", str(a.batch), *c.pin_args(1, a.pin)], "subscriber")
        sub.read_json(60)
        samples, _done, pub_res = c.collect_rates(sub, pub, stop_file)
    return {"msgs_per_s": c.median(samples[1:]), "samples": samples, "sent": pub_res["sent"],
            "refused": pub_res["refused"],
            "config": f"driver shared/{a.driver_idle}, sub poll_batch({a.batch})"
                      + (f", offer_batch({a.batch_size})" if offer == "batch" else "")
                      + (", pinned" if a.pin else "")}


def native_run(publication: str, a: argparse.Namespace) -> dict:
    exe = c.native_binary("ipc-throughput", build=False)
    args = ["--runs", "1", "--duration", str(a.duration), "--publication", publication,
            "--message-length", str(MESSAGE_LENGTH), "--driver-idle", a.native_driver_idle]
    if a.pin:
        args.append("--pin")
    r = c.run_native(exe, args, timeout_s=a.duration + 120)
    return {"msgs_per_s": r["msgs_per_s"], "samples": r["samples"][0], "native": r,
            "config": f"driver shared/{a.native_driver_idle}, sub poll(10)" + (", pinned" if a.pin else "")}


def zmq_run(a: argparse.Namespace) -> dict:
    from bench.peers import zmq_peers

    r = zmq_peers.throughput_run(a.duration, MESSAGE_LENGTH, "ipc")
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

    r = aeron_java.ipc_throughput(duration_s=a.duration, jar=jar, message_length=MESSAGE_LENGTH)
    c.print_intervals(r["samples"])
    r["config"] = f"Aeron {r['aeron_version']}, 1 JVM, SHARED driver, no-op idle"
    return r


# =============================================================== main

def main(argv=None) -> int:
    ap = c.throughput_parser(__doc__)
    ap.add_argument("--driver-idle", default="backoff",
                    help="idle strategy of the driver in the Python runs (default backoff: the two Python "
                         "processes already use both cores)")
    ap.add_argument("--native-driver-idle", default="busy-spin",
                    help="idle strategy of the driver in the native runs (default busy-spin, as Aeron's sample)")
    ap.add_argument("--term-length", default="64m", help="IPC term length of the Python runs (default 64m)")
    ap.add_argument("--pin", action="store_true", help="publisher process on CPU 0, subscriber on CPU 1")
    ap.add_argument("--batch-size", type=int, default=1024, help="messages per offer_batch call (default 1024)")
    c.selection_args(ap, "comma list among: py-exclusive,py-concurrent,py-batch-exclusive,"
                         "py-batch-concurrent,native-exclusive,"
                         "native-concurrent,zmq,zenoh,iceoryx2,aeron-1.15.1,aeron-current")
    # child roles (internal)
    c.pub_sub_role_args(ap)
    ap.add_argument("--publication", default="exclusive", help=argparse.SUPPRESS)
    ap.add_argument("--offer", default="single", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.role != "main":
        return c.pub_sub_child(a, role_pub, role_sub)

    profile = c.require_release_build()
    runs = c.throughput_checks(a, ap)
    if a.pin and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs 2 CPUs")

    variants = c.select_variants([
        ("py-exclusive", "sulis Python ExclusivePublication.offer", lambda: python_run("exclusive", a)),
        ("py-concurrent", "sulis Python Publication.offer (concurrent)", lambda: python_run("concurrent", a)),
        ("py-batch-exclusive", "sulis Python ExclusivePublication.offer_batch",
         lambda: python_run("exclusive", a, "batch")),
        ("py-batch-concurrent", "sulis Python Publication.offer_batch (concurrent)",
         lambda: python_run("concurrent", a, "batch")),
        ("native-exclusive", "sulis native Rust ExclusivePublication", lambda: native_run("exclusive", a)),
        ("native-concurrent", "sulis native Rust Publication (concurrent)", lambda: native_run("concurrent", a)),
        ("zmq", "pyzmq PUSH/PULL ipc://", lambda: zmq_run(a)),
        ("zenoh", "zenoh put/recv unixsock-stream", lambda: zenoh_run(a)),
        ("iceoryx2", "iceoryx2 send_copy/receive (shm)", lambda: iceoryx2_run(a)),
        ("aeron-1.15.1", "Aeron Java 1.15.1 EmbeddedExclusiveIpcThroughput", lambda: aeron_run("1.15.1", a)),
        ("aeron-current", "Aeron Java current EmbeddedExclusiveIpcThroughput", lambda: aeron_run("current", a)),
    ], a, ap)

    print(f"sulis IPC throughput, {MESSAGE_LENGTH} B messages: {runs} round(s), {a.duration:g} s per run "
          f"(every system: per-second counts at the receiver, first second = warm-up); sulis {profile} build; "
          f"{c.cpu_summary()}")
    print(f"Python runs: driver shared/{a.driver_idle}, poll_batch({a.batch}); native runs: driver "
          f"shared/{a.native_driver_idle}; {'pinned pub CPU 0 / sub CPU 1 (sulis, zenoh, iceoryx2)' if a.pin else 'no CPU pinning'}")
    variants = c.build_native(variants, "ipc-throughput", a.no_build)

    results, skipped, errors = c.run_rounds(variants, runs, a.retry_noisy, a.max_interference,
                                            lambda r: f"{r['msgs_per_s']:,.0f} msgs/s")

    med = c.rate_medians(results)
    zmq = med.get("zmq")
    aeron = med.get("aeron-1.15.1")
    py = med.get("py-exclusive")
    print()
    print(f"IPC throughput, {MESSAGE_LENGTH} B messages, median of the rounds (msgs/s); "
          "'vs X' = this row's median / X's median:")
    c.print_throughput_table(variants, results, skipped, errors, med,
                             [("vs 10M", TARGET_PY_MSGS), ("vs sulis Py", py), ("vs pyzmq", zmq),
                              ("vs Aeron 1.15.1", aeron)])

    print()
    print("targets:")
    if py:
        print(f"  (a) sulis Python exclusive offer >= 10 M msgs/s: {py / 1e6:.2f} M = {py / TARGET_PY_MSGS:.2f}x "
              f"-> {c.verdict(py >= TARGET_PY_MSGS)}")
        if zmq:
            print(f"  (a) sulis Python exclusive offer >= 5x pyzmq PUSH/PULL ({zmq / 1e6:.2f} M): "
                  f"{py / zmq:.2f}x -> {c.verdict(py / zmq >= TARGET_VS_ZMQ)}")
    nat = med.get("native-exclusive")
    batch = med.get("py-batch-exclusive")
    if batch:
        print(f"  (c) sulis Python offer_batch({a.batch_size}) exclusive >= 30 M msgs/s: {batch / 1e6:.2f} M = "
              f"{batch / TARGET_BATCH_MSGS:.2f}x -> {c.verdict(batch >= TARGET_BATCH_MSGS)}")
        if nat:
            print(f"  (c) sulis Python offer_batch exclusive >= 0.65x sulis native exclusive ({nat / 1e6:.2f} M): "
                  f"{batch / nat:.2f}x -> {c.verdict(batch / nat >= TARGET_BATCH_VS_NATIVE)}")
    if nat and aeron:
        print(f"  (b) sulis native exclusive >= 1.0x Aeron Java 1.15.1 ({aeron / 1e6:.2f} M): "
              f"{nat / 1e6:.2f} M = {nat / aeron:.2f}x -> {c.verdict(nat / aeron >= TARGET_VS_AERON)}")
    c.print_notes(results, errors, c.variant_names(variants), a.max_interference)

    c.save_report("ipc_throughput", {
        "runs": runs, "duration_s": a.duration, "message_length": MESSAGE_LENGTH,
        "driver_idle": a.driver_idle, "native_driver_idle": a.native_driver_idle, "pinned": a.pin,
        "batch_size": a.batch_size,
    }, variants, med, results, skipped, errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(c.main_guard(main))
