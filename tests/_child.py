"""Child-process roles for the system tests (run as ``python tests/_child.py ROLE ...``).

Each role prints one JSON object per line on stdout: first a ``ready`` line
once it is set up, then role-specific lines. The parent reads them through
``conftest.Child``. Nothing here imports pytest: children start fast.

Roles
-----
``driver DIR [OPTIONS_JSON]``
    Runs an embedded media driver until killed.
``hold DIR STREAM``
    A client with a concurrent and an exclusive publication and a subscription
    on STREAM; waits for commands on stdin (``offer``, ``add_publication``,
    ``status``, ``exit``), answering each with one line.
``claim DIR STREAM LENGTH``
    A client that claims LENGTH bytes on a concurrent publication of STREAM
    and never commits (the parent kills it).
``produce DIR STREAM PRODUCER COUNT SEED [MAX_LENGTH [WAIT_GO [CHANNEL]]]``
    Offers COUNT messages (see ``make_message``) on a concurrent publication
    of STREAM (on CHANNEL, default ``aeron:ipc``), retrying on back pressure,
    then reports and exits. With WAIT_GO=1 it waits for a ``go`` line on
    stdin after ``ready``.
``pace DIR STREAM CHANNEL RATE``
    Offers numbered 500-byte messages (a little-endian u64 sequence, then
    filler) at RATE per second until a ``stop`` line on stdin, never waiting
    for back pressure to end (a refused offer is tried again at the next
    tick); then reports ``done`` with ``sent`` and ``refused`` and exits.
``tally DIR STREAM CHANNEL``
    Subscribes and counts what ``pace`` sends: messages, the gaps in their
    sequence, images that came and went; ``report`` on stdin answers with
    the tally (and goes on), ``exit`` ends it.
``archive DRIVER_DIR ARCHIVE_DIR [OPTIONS_JSON]``
    Runs an archive (a client of the driver in DRIVER_DIR) until killed.
``consume DIR STREAM PRODUCERS COUNT [CHANNEL]``
    Subscribes to STREAM (on CHANNEL, default ``aeron:ipc``) and checks every message (``parse_message``):
    each of PRODUCERS producers' COUNT messages must arrive once, in order,
    intact. Reports ``done`` with the images it saw, then exits.
``attack GROUP PORT UNICAST INTERFACE STREAM``
    A host without the keyring, on the wire beside a secured stream (no sulis driver: raw UDP): joins
    the multicast GROUP:PORT from INTERFACE and sends every datagram it hears back twice (replays);
    meanwhile sends Aeron setup and data frames for session id after session id of STREAM (guesses) to
    the group and to the UNICAST endpoint, and status messages granting a huge window to the group's
    control address (GROUP + 1). Until a ``stop`` line on stdin; then reports what it captured (and how
    many were sealed) and sent.
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import time
import zlib

import sulis

HEADER = struct.Struct("<III")  # producer id, sequence number, crc32 of the body


def make_message(producer: int, seq: int, body: bytes) -> bytes:
    """A message that identifies its producer and sequence and checks itself."""
    return HEADER.pack(producer, seq, zlib.crc32(body)) + body


def parse_message(data: bytes) -> tuple[int, int, bytes]:
    """(producer, seq, body); raises AssertionError if the checksum is wrong."""
    producer, seq, crc = HEADER.unpack_from(data)
    body = bytes(data[HEADER.size:])
    assert zlib.crc32(body) == crc, f"torn or corrupt message from producer {producer} seq {seq}"
    return producer, seq, body


def body_for(rng: random.Random, max_length: int) -> bytes:
    """A random body of random length (0..max_length)."""
    n = rng.randint(0, max_length)
    return rng.randbytes(n)


def say(**obj) -> None:
    print(json.dumps(obj), flush=True)


def _await(cond, timeout: float = 90.0) -> None:
    """Until ``cond()``; ``timeout`` bounds a hang (the parents' reads wait as long: tests/sites.py)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.001)


def role_driver(dir: str, options: str = "{}") -> None:
    drv = sulis.MediaDriver(dir=dir, **json.loads(options))
    say(ready=True, pid=os.getpid(), dir=drv.dir)
    while True:
        time.sleep(3600)


def role_hold(dir: str, stream: str) -> None:
    s = int(stream)
    client = sulis.Client(dir=dir, driver_timeout=10.0)
    pub = client.add_publication("aeron:ipc", s)
    xpub = client.add_exclusive_publication("aeron:ipc", s)
    sub = client.add_subscription("aeron:ipc", s)
    say(
        ready=True,
        pid=os.getpid(),
        client_id=client.client_id,
        registration_id=pub.registration_id,
        exclusive_registration_id=xpub.registration_id,
        session_id=pub.session_id,
        exclusive_session_id=xpub.session_id,
        subscription_id=sub.registration_id,
    )
    for line in sys.stdin:
        cmd = line.strip()
        try:
            if cmd == "offer":
                say(result=pub.offer(b"still here"))
            elif cmd == "add_publication":
                say(result=client.add_publication("aeron:ipc", s).registration_id)
            elif cmd == "status":
                say(is_closed=client.is_closed)
            elif cmd == "exit":
                break
            else:
                say(error="ValueError", message=f"unknown command {cmd!r}")
        except sulis.SulisError as e:
            say(error=type(e).__name__, message=str(e))
    client.close()


def role_subscribe(dir: str, channel: str, stream: str) -> None:
    """Subscribes and never polls: holds back what it subscribes to until stdin closes."""
    client = sulis.Client(dir=dir)
    sub = client.add_subscription(channel, int(stream))
    _await(lambda: sub.image_count > 0)
    say(ready=True, pid=os.getpid(), subscription_id=sub.registration_id)
    sys.stdin.read()
    client.close()


def role_claim(dir: str, stream: str, length: str) -> None:
    client = sulis.Client(dir=dir, driver_timeout=10.0)
    pub = client.add_publication("aeron:ipc", int(stream))
    _await(lambda: pub.is_connected)
    while True:
        claim = pub.try_claim(int(length))
        if not isinstance(claim, int):
            break
    claim.buffer[:] = b"\xee" * int(length)
    say(ready=True, pid=os.getpid(), client_id=client.client_id, position=claim.position, session_id=pub.session_id)
    # Never commit: the parent kills this process mid-claim.
    while True:
        time.sleep(3600)


def role_produce(dir: str, stream: str, producer: str, count: str, seed: str, max_length: str = "2000",
                 wait_go: str = "0", channel: str = "aeron:ipc", destinations: str = "") -> None:
    p, n = int(producer), int(count)
    rng = random.Random(int(seed))
    with sulis.Client(dir=dir, driver_timeout=10.0) as client:
        pub = client.add_publication(channel, int(stream))
        for destination in filter(None, destinations.split(",")):
            pub.add_destination(destination)
        _await(lambda: pub.is_connected)
        say(ready=True, pid=os.getpid(), session_id=pub.session_id)
        if wait_go == "1":
            assert sys.stdin.readline().strip() == "go"
        retries = 0
        for seq in range(n):
            msg = make_message(p, seq, body_for(rng, int(max_length)))
            while True:
                r = pub.offer(msg)
                if r >= 0:
                    break
                if r not in (sulis.BACK_PRESSURED, sulis.ADMIN_ACTION):
                    say(error=sulis.result_name(r))
                    return
                retries += 1
                if retries % 64 == 0:
                    time.sleep(0)
        say(done=True, sent=n, position=pub.position)


def role_consume(dir: str, stream: str, producers: str, count: str, channel: str = "aeron:ipc",
                 destinations: str = "") -> None:
    n, expected = int(count), int(producers) * int(count)
    next_seq: dict[int, int] = {}
    images: list[int] = []
    with sulis.Client(dir=dir, driver_timeout=10.0) as client:
        sub = client.add_subscription(channel, int(stream),
                                      on_available_image=lambda im: images.append(im.session_id))
        for destination in filter(None, destinations.split(",")):
            sub.add_destination(destination)
        say(ready=True, pid=os.getpid(), client_id=client.client_id)

        def on_message(buffer, header):
            producer, seq, _body = parse_message(bytes(buffer))
            want = next_seq.get(producer, 0)
            if seq != want:
                images = [(i.session_id, i.join_position, i.position, i.is_end_of_stream) for i in sub.images]
                raise AssertionError(f"producer {producer}: got seq {seq}, want {want} in session "
                                     f"{header.session_id} at {header.position}; images {images}")
            assert seq < n, f"producer {producer}: seq {seq} beyond {n}"
            next_seq[producer] = seq + 1

        assembler = sulis.FragmentAssembler(on_message)
        while sum(next_seq.values()) < expected:
            if sub.poll(assembler, 256) == 0:
                time.sleep(0.0005)
        say(done=True, received=sum(next_seq.values()), images=sorted(set(images)),
            image_count=sub.image_count, lapped=client.lapped_count)


def role_pace(dir: str, stream: str, channel: str, rate: str) -> None:
    import threading

    stop = threading.Event()
    with sulis.Client(dir=dir, driver_timeout=10.0) as client:
        pub = client.add_exclusive_publication(channel, int(stream))
        _await(lambda: pub.is_connected)
        say(ready=True, pid=os.getpid(), session_id=pub.session_id)
        threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
        period = 1.0 / int(rate)
        msg = bytearray(500)
        sent = refused = 0
        start = time.monotonic()
        while not stop.is_set():
            due = start + sent * period
            now = time.monotonic()
            if now < due:
                time.sleep(min(due - now, 0.001))
                continue
            msg[:8] = sent.to_bytes(8, "little")
            if pub.offer(msg) >= 0:
                sent += 1
            else:
                refused += 1
                time.sleep(0.0005)
        say(done=True, sent=sent, refused=refused, position=pub.position)


def role_tally(dir: str, stream: str, channel: str) -> None:
    import threading

    tally = {"received": 0, "gaps": 0, "last": -1, "available": 0, "unavailable": 0}
    lock = threading.Lock()
    with sulis.Client(dir=dir, driver_timeout=10.0) as client:
        def came(_image):
            with lock:
                tally["available"] += 1

        def went(_image):
            with lock:
                tally["unavailable"] += 1

        sub = client.add_subscription(channel, int(stream), on_available_image=came, on_unavailable_image=went)
        say(ready=True, pid=os.getpid())
        commands: list[str] = []
        threading.Thread(target=lambda: [commands.append(line.strip()) for line in sys.stdin], daemon=True).start()

        def on_message(buffer, _header):
            seq = int.from_bytes(bytes(buffer[:8]), "little")
            if seq != tally["last"] + 1:
                tally["gaps"] += 1
            tally["last"] = seq
            tally["received"] += 1

        while True:
            if sub.poll(on_message, 256) == 0:
                time.sleep(0.0005)
            while commands:
                cmd = commands.pop(0)
                if cmd == "exit":
                    return
                with lock:
                    say(**tally, images=sub.image_count)


def role_archive(driver_dir: str, archive_dir: str, options: str = "{}") -> None:
    archive = sulis.Archive(archive_dir, driver_dir=driver_dir, **json.loads(options))
    say(ready=True, pid=os.getpid(), archive_id=archive.archive_id)
    while True:
        time.sleep(3600)


def role_attack(group: str, port: str, unicast: str, interface: str, stream: str) -> None:
    import ipaddress
    import select
    import socket
    import threading

    port_n, stream_id = int(port), int(stream)
    uhost, uport = unicast.rsplit(":", 1)
    control = str(ipaddress.IPv4Address(group) + 1)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    rx.bind((group, port_n))
    rx.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                  struct.pack("4s4s", socket.inet_aton(group), socket.inet_aton(interface)))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface))
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)  # never hear (and replay) its own
    tx.bind((interface, 0))
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    term_length, mtu = 1 << 20, 1408

    def setup(session: int) -> bytes:  # Aeron's SETUP: length, version, flags, type, then the stream's shape
        return struct.pack("<iBBHiiiiiiii", 40, 0, 0, 0x05, 0, session, stream_id, 0, 0, term_length, mtu, 0)

    def data(session: int, body: bytes) -> bytes:  # DATA at offset 0 of term 0, begin and end flags
        return struct.pack("<iBBHiiiiq", 32 + len(body), 0, 0xC0, 0x01, 0, session, stream_id, 0, 0) + body

    def status(session: int) -> bytes:  # a status message granting a 16 MiB window
        return struct.pack("<iBBHiiiiiq", 36, 0, 0, 0x03, session, stream_id, 0, 0, 16 << 20, 666)

    counts = {"captured": 0, "sealed": 0, "replayed": 0, "spoofed": 0}
    say(ready=True, pid=os.getpid())
    session = 0
    while not stop.is_set():
        while select.select([rx], [], [], 0.002)[0]:
            d, _ = rx.recvfrom(65536)
            counts["captured"] += 1
            if len(d) >= 8 and struct.unpack_from("<H", d, 6)[0] == 0x5E:
                counts["sealed"] += 1
            for _ in range(2):
                tx.sendto(d, (group, port_n))
                counts["replayed"] += 1
        for _ in range(16):
            body = make_message(0, session, b"forged by a stranger")
            for dest in ((group, port_n), (uhost, int(uport))):
                tx.sendto(setup(session), dest)
                tx.sendto(data(session, body), dest)
            tx.sendto(status(session), (control, port_n))
            counts["spoofed"] += 5
            session = (session + 7919) % (1 << 31)
    say(done=True, **counts)


ROLES = {"driver": role_driver, "hold": role_hold, "subscribe": role_subscribe, "claim": role_claim,
         "produce": role_produce, "consume": role_consume, "pace": role_pace, "tally": role_tally,
         "archive": role_archive, "attack": role_attack}

if __name__ == "__main__":
    ROLES[sys.argv[1]](*sys.argv[2:])
