"""Interop peer on sulis: the twin of AeronPeer's stream roles (bench/peers/AeronPeer.java), same JSON line.

    python tests/interop/sulis_peer.py pub|sub --dir DIR --channel CH --stream N --count C [options]

``--embedded`` runs a ``sulis.MediaDriver`` in this process on ``--dir`` (``--driver-option
NAME=VALUE`` sets its options); otherwise the peer is a client of the driver running there.
``pub`` waits until connected, offers COUNT messages of the interop stream (stream.py), retrying
while back-pressured, prints its JSON line, then stays up to ``--linger`` seconds while connected
(with ``--embedded``, until its driver has sent everything). ``sub`` polls through a
FragmentAssembler, checking every message, until COUNT arrived or ``--timeout`` passed, polls
``--settle`` seconds more for unexpected extra messages, then prints its JSON line. Exit status 0
when everything was sent / received in order and intact, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stream import Checker, Generator, max_length  # noqa: E402

import sulis  # noqa: E402

#: Counter type of a network publication's sender position (Aeron's id).
SENDER_POSITION_TYPE = 2
RETRY = (sulis.BACK_PRESSURED, sulis.ADMIN_ACTION, sulis.NOT_CONNECTED)


class Report:
    """The first errors (all go to stderr) and the one JSON line."""

    def __init__(self, role: str) -> None:
        self.role, self.errors, self.error_count, self.emitted = role, [], 0, False

    def error(self, text: str) -> None:
        self.error_count += 1
        self.errors = (self.errors + [text])[:10]
        print(f"sulis_peer {self.role}: {text}", file=sys.stderr, flush=True)

    def emit(self, **fields) -> None:
        errors, count, self.emitted = fields.pop("errors", []), fields.pop("error_count", 0), True
        print(json.dumps({"role": self.role, "impl": f"sulis {sulis.__version__} ({sulis.build_profile})", **fields,
                          "errors": (self.errors + errors)[:10], "error_count": self.error_count + count}), flush=True)


def _backoff(spins: int) -> None:
    """Spin a little, then yield, then sleep briefly (2 cores are shared by several processes)."""
    if 20 <= spins < 40:
        os.sched_yield()
    elif spins >= 40:
        time.sleep(0.0001)


def publish(client, args, report: Report) -> int:
    pub = client.add_publication(args.channel, args.stream)
    for destination in filter(None, args.destinations.split(",")):
        pub.add_destination(destination)
    if max_length(args.count) > pub.max_message_length:
        report.error(f"max message length {pub.max_message_length} < {max_length(args.count)} (term length too small)")
    deadline, spins = time.monotonic() + args.timeout, 0
    while not pub.is_connected and not report.errors:
        if time.monotonic() > deadline:
            report.error(f"not connected within {args.timeout} s")
        spins += 1
        _backoff(spins)
    gen, offer = Generator(), pub.offer
    sent = nbytes = crc = position = 0
    start = time.monotonic()
    try:
        while sent < args.count and not report.errors:
            view = gen.message(sent)
            result, since, spins = offer(view), time.monotonic(), 0
            while result < 0 and not report.errors:
                if result not in RETRY:
                    report.error(f"offer of message {sent} failed: {sulis.result_name(result)}")
                elif time.monotonic() - since > args.timeout:
                    report.error(f"no progress for {args.timeout} s at message {sent} "
                                 f"(last offer result {sulis.result_name(result)})")
                else:
                    spins += 1
                    _backoff(spins)
                    result = offer(view)
            if result >= 0:
                position, crc, nbytes, sent = result, zlib.crc32(view, crc), nbytes + len(view), sent + 1
    except sulis.SulisError as exc:
        report.error(f"offer of message {sent} raised {type(exc).__name__}: {exc}")
    report.emit(count=sent, bytes=nbytes, checksum=crc, seconds=round(time.monotonic() - start, 3), position=position)
    deadline = time.monotonic() + args.linger  # the tail goes out while the subscriber is still there
    while pub.is_connected and time.monotonic() < deadline:
        time.sleep(0.01)
    registration_id = pub.registration_id
    pub.close()
    if args.embedded:  # the driver keeps a closed publication until all is sent: it must outlive that
        reader, deadline = sulis.CountersReader(args.dir), time.monotonic() + args.timeout
        while time.monotonic() < deadline and any(c["type_id"] == SENDER_POSITION_TYPE and
                                                  c["registration_id"] == registration_id for c in reader.counters()):
            time.sleep(0.05)
    return 0 if report.error_count == 0 and sent == args.count else 1


def subscribe(client, args, report: Report) -> int:
    images = {"available": 0, "unavailable": 0}
    sub = client.add_subscription(args.channel, args.stream,
                                  lambda image: images.update(available=images["available"] + 1),
                                  lambda image: images.update(unavailable=images["unavailable"] + 1))
    for destination in filter(None, args.destinations.split(",")):
        sub.add_destination(destination)
    checker = Checker(args.count)
    poll, assembler = sub.poll, sulis.FragmentAssembler(checker.handler)
    deadline, timed_out, idle = time.monotonic() + args.timeout, False, 0
    try:
        while checker.count < args.count:
            if poll(assembler, 256):
                idle = 0
                continue
            idle += 1
            if idle >= 20 and time.monotonic() > deadline:
                timed_out = True
                report.error(f"timed out after {args.timeout} s with {checker.count} of {args.count} messages "
                             f"({sub.image_count} images)")
                break
            _backoff(idle)
        before, settle_end = checker.count, time.monotonic() + args.settle
        while not timed_out and time.monotonic() < settle_end:
            if not poll(assembler, 256):
                time.sleep(0.001)
        if checker.count > before:
            report.error(f"{checker.count - before} messages arrived after the last expected one")
    except sulis.SulisError as exc:
        report.error(f"poll raised {type(exc).__name__}: {exc}")
    result = checker.result()
    sub.close()
    report.emit(**{**result, "seconds": result["seconds"] or 0.0}, images=images["available"],
                unavailable_images=images["unavailable"], timed_out=timed_out)
    return 0 if report.error_count + result["error_count"] == 0 and result["count"] == args.count else 1


def _option(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, not {text!r}")
    return name.replace("-", "_"), {"true": True, "false": False}.get(value.lower(), value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("pub", "sub"))
    ap.add_argument("--dir", required=True, help="driver directory")
    ap.add_argument("--embedded", action="store_true", help="run an embedded sulis.MediaDriver on --dir")
    ap.add_argument("--driver-option", action="append", default=[], type=_option, metavar="NAME=VALUE")
    ap.add_argument("--channel", required=True)
    ap.add_argument("--stream", type=int, required=True)
    ap.add_argument("--count", type=lambda s: int(s.replace("_", "")), required=True)
    ap.add_argument("--timeout", type=float, default=None,
                    help="sub: overall (default 120); pub: connect / no-progress timeout (default 60)")
    ap.add_argument("--destinations", default="",
                    help="channels to add to a control-mode=manual publication or subscription")
    ap.add_argument("--linger", type=float, default=5.0, help="pub: stay up to S s while connected (default 5)")
    ap.add_argument("--settle", type=float, default=0.5, help="sub: poll S s more for extra messages (default 0.5)")
    args = ap.parse_args(argv)
    args.timeout = args.timeout or (120.0 if args.mode == "sub" else 60.0)
    report, driver, client, status = Report(args.mode), None, None, 1
    try:
        if args.embedded:
            driver = sulis.MediaDriver(dir=args.dir, threading_mode="shared", dir_delete_on_start=True,
                                       **dict(args.driver_option))
        client = sulis.Client(dir=args.dir)
        status = (publish if args.mode == "pub" else subscribe)(client, args, report)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON line
        traceback.print_exc()
        report.error(f"{type(exc).__name__}: {exc}")
        if not report.emitted:
            report.emit(count=0, bytes=0, checksum=0, seconds=0.0, setup_failed=True)
    finally:
        if client is not None:
            client.close()
        if driver is not None:
            driver.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
