"""Interop peer on sulis: the twin of AeronPeer.java (same modes, same JSON line).

    python tests/interop/sulis_peer.py pub --dir DIR --channel CH --stream N --count C [options]
    python tests/interop/sulis_peer.py sub --dir DIR --channel CH --stream N --count C [options]

``--embedded`` runs a ``sulis.MediaDriver`` in this process on ``--dir`` (a
fresh directory under /dev/shm when ``--dir`` is omitted); otherwise the peer
is a client of the driver already running on ``--dir``. ``--driver-option
NAME=VALUE`` (repeatable) passes options to the embedded driver.

``pub`` waits until connected, offers COUNT messages of the interop stream
(stream.py) retrying on back pressure, prints its JSON line, then stays up to
``--linger`` seconds while still connected so that the tail is delivered (with
``--embedded`` the driver, and so the data not yet sent, dies with the process).
``sub`` polls through a FragmentAssembler, checking every message, until
COUNT messages arrived or ``--timeout`` seconds passed, keeps polling
``--settle`` seconds for unexpected extra messages, then prints its JSON line.

Exit status 0 when everything was sent / received in order and intact, 1
otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sulis  # noqa: E402
from stream import Checker, Generator, max_length  # noqa: E402

IMPL = f"sulis {sulis.__version__} ({sulis.build_profile})"


def log(text: str) -> None:
    print(f"sulis_peer: {text}", file=sys.stderr, flush=True)


class Report:
    """Collects errors (the first few) and prints the one JSON line."""

    def __init__(self, role: str, max_errors: int = 10) -> None:
        self.role = role
        self.max_errors = max_errors
        self.errors: list[str] = []
        self.error_count = 0
        self.emitted = False

    def error(self, text: str) -> None:
        self.error_count += 1
        if len(self.errors) < self.max_errors:
            self.errors.append(text)
        log(f"{self.role}: {text}")

    def emit(self, **fields) -> None:
        line = {"role": self.role, "impl": IMPL}
        line.update(fields)
        line["errors"] = (self.errors + list(line.get("errors", [])))[: self.max_errors]
        line["error_count"] = self.error_count + fields.get("error_count", 0)
        print(json.dumps(line), flush=True)
        self.emitted = True


def _backoff(spins: int) -> None:
    """Spin a little, then yield, then sleep briefly (2 cores are shared by several processes)."""
    if spins < 20:
        return
    if spins < 40:
        os.sched_yield()
    else:
        time.sleep(0.0001)


#: Counter type of a network publication's sender position (Aeron's id).
SENDER_POSITION_TYPE = 2


def publish(client, args, report: Report) -> int:
    add = client.add_exclusive_publication if args.exclusive else client.add_publication
    pub = add(args.channel, args.stream)
    longest = max_length(args.count)
    if longest > pub.max_message_length:
        report.error(f"max message length {pub.max_message_length} < {longest} (term length too small)")

    deadline = time.monotonic() + args.timeout
    spins = 0
    while not pub.is_connected and not report.errors:
        if time.monotonic() > deadline:
            report.error(f"not connected within {args.timeout} s")
            break
        spins += 1
        _backoff(spins)

    gen = Generator()
    offer = pub.offer
    crc32 = zlib.crc32
    retry_codes = (sulis.BACK_PRESSURED, sulis.ADMIN_ACTION, sulis.NOT_CONNECTED)
    sent = nbytes = crc = position = 0
    failed = bool(report.errors)
    start = time.monotonic()
    i = 0
    try:
        while i < args.count and not failed:
            view = gen.message(i)
            result = offer(view)
            if result < 0:
                last_progress = time.monotonic()
                spins = 0
                while result < 0:
                    if result not in retry_codes:
                        report.error(f"offer of message {i} failed: {sulis.result_name(result)}")
                        failed = True
                        break
                    if time.monotonic() - last_progress > args.timeout:
                        report.error(f"no progress for {args.timeout} s at message {i} "
                                     f"(last offer result {sulis.result_name(result)})")
                        failed = True
                        break
                    spins += 1
                    _backoff(spins)
                    result = offer(view)
                if failed:
                    break
            position = result
            crc = crc32(view, crc)
            sent += 1
            nbytes += len(view)
            i += 1
    except sulis.SulisError as exc:
        report.error(f"offer of message {i} raised {type(exc).__name__}: {exc}")
    seconds = time.monotonic() - start
    report.emit(count=sent, bytes=nbytes, checksum=crc, seconds=round(seconds, 3), position=position)

    # Let the tail go out while the subscriber is still there.
    deadline = time.monotonic() + args.linger
    while pub.is_connected and time.monotonic() < deadline:
        time.sleep(0.01)
    registration_id = pub.registration_id
    pub.close()
    if args.embedded:
        # The driver keeps a closed publication until everything is sent and
        # then lingers for late NAKs; the embedded driver must outlive that.
        reader = sulis.CountersReader(args.dir)
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and any(
            c["type_id"] == SENDER_POSITION_TYPE and c["registration_id"] == registration_id
            for c in reader.counters()
        ):
            time.sleep(0.05)
    return 0 if report.error_count == 0 and sent == args.count else 1


def subscribe(client, args, report: Report) -> int:
    images = {"available": 0, "unavailable": 0}

    def on_available(image) -> None:
        images["available"] += 1
        log(f"sub: image available session={image.session_id} source={image.source_identity} "
            f"join={image.join_position}")

    def on_unavailable(image) -> None:
        images["unavailable"] += 1
        log(f"sub: image unavailable session={image.session_id} position={image.position}")

    sub = client.add_subscription(args.channel, args.stream, on_available, on_unavailable)
    checker = Checker(args.count)
    assembler = sulis.FragmentAssembler(checker.handler)
    poll = sub.poll
    target = args.count
    deadline = time.monotonic() + args.timeout
    timed_out = False
    idle = 0
    try:
        while checker.count < target:
            n = poll(assembler, 256)
            if n:
                idle = 0
                continue
            idle += 1
            if idle >= 20:
                if time.monotonic() > deadline:
                    timed_out = True
                    report.error(f"timed out after {args.timeout} s with {checker.count} of {target} messages "
                                 f"({sub.image_count} images)")
                    break
                _backoff(idle)
        if not timed_out:
            before = checker.count
            settle_end = time.monotonic() + args.settle
            while time.monotonic() < settle_end:
                if not poll(assembler, 256):
                    time.sleep(0.001)
            if checker.count > before:
                report.error(f"{checker.count - before} messages arrived after the last expected one")
    except sulis.SulisError as exc:
        report.error(f"poll raised {type(exc).__name__}: {exc}")
    result = checker.result()
    sub.close()
    report.emit(
        count=result["count"],
        bytes=result["bytes"],
        checksum=result["checksum"],
        errors=result["errors"],
        error_count=result["error_count"],
        seconds=result["seconds"] or 0.0,
        last_index=result["last_index"],
        images=images["available"],
        unavailable_images=images["unavailable"],
        timed_out=timed_out,
    )
    ok = report.error_count == 0 and result["count"] == target
    return 0 if ok else 1


def _driver_option(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, not {text!r}")
    lowered = value.lower()
    if lowered in ("true", "false"):
        return name.replace("-", "_"), lowered == "true"
    return name.replace("-", "_"), value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("pub", "sub"))
    ap.add_argument("--dir", help="driver directory")
    ap.add_argument("--embedded", action="store_true", help="run an embedded sulis.MediaDriver on --dir")
    ap.add_argument("--driver-option", action="append", default=[], type=_driver_option, metavar="NAME=VALUE")
    ap.add_argument("--channel", required=True)
    ap.add_argument("--stream", type=int, required=True)
    ap.add_argument("--count", type=lambda s: int(s.replace("_", "")), required=True)
    ap.add_argument("--timeout", type=float, default=None,
                    help="sub: overall (default 120); pub: connect / no-progress timeout (default 60)")
    ap.add_argument("--linger", type=float, default=5.0, help="pub: stay up to S s while connected (default 5)")
    ap.add_argument("--settle", type=float, default=0.5, help="sub: poll S s more for extra messages (default 0.5)")
    ap.add_argument("--exclusive", action="store_true", help="pub: use an exclusive publication")
    args = ap.parse_args(argv)
    if args.timeout is None:
        args.timeout = 120.0 if args.mode == "sub" else 60.0
    if not args.dir and not args.embedded:
        ap.error("--dir is required unless --embedded")

    report = Report(args.mode)
    driver = client = None
    status = 1
    try:
        if args.embedded:
            options = {"threading_mode": "shared", "dir_delete_on_start": True}
            options.update(dict(args.driver_option))
            directory = args.dir or tempfile.mkdtemp(prefix="sulis-peer-", dir="/dev/shm")
            driver = sulis.MediaDriver(dir=directory, **options)
            args.dir = driver.dir
        client = sulis.Client(dir=args.dir)
        status = publish(client, args, report) if args.mode == "pub" else subscribe(client, args, report)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON line
        traceback.print_exc()
        report.error(f"{type(exc).__name__}: {exc}")
        if not report.emitted:
            report.emit(count=0, bytes=0, checksum=0, seconds=0.0, setup_failed=True)
        status = 1
    finally:
        if client is not None:
            client.close()
        if driver is not None:
            driver.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
