"""``sulis streams``: every stream's positions side by side and the backlog of
each party (like Aeron's StreamStat and BacklogStat)."""

from __future__ import annotations

import time

import click

from ._common import (
    FC_RECEIVER,
    PUBLISHER_LIMIT,
    PUBLISHER_POSITION,
    RECEIVER_HWM,
    RECEIVER_POSITION,
    SENDER_LIMIT,
    SENDER_POSITION,
    SUBSCRIBER_POSITION,
    LiveView,
    NoDriverError,
    dir_option,
    driver_line,
    json_option,
    num,
    open_driver,
    print_json,
    resolve_dir,
    run_until_interrupted,
    table,
    timestamp,
)

_PUBLICATION_TYPES = (PUBLISHER_LIMIT, PUBLISHER_POSITION, SENDER_POSITION, SENDER_LIMIT)
_IMAGE_TYPES = (RECEIVER_HWM, RECEIVER_POSITION)


def _minus(a: int | None, b: int | None) -> int | None:
    """How far ``b`` is behind ``a``, never below 0: each counter is read at its own moment and the driver
    updates a source's position once per duty cycle, so a reader can look a message or two past its source
    (it showed as a backlog of -64 or -128); a reader at or past its source has caught up."""
    return None if a is None or b is None else max(0, a - b)


def collect_streams(counters: list[dict]) -> list[dict]:
    """Groups described counters (``_common.describe``) by stream.

    A publication's counters (pub-lmt, pub-pos, snd-pos, snd-lmt) share its
    registration id, an image's (rcv-hwm, rcv-pos) share the image's; a
    subscriber position names the publication (IPC) or image (UDP) it reads in
    its reference id. Publications and images are grouped by (channel, stream
    id, session id) from their keys: a UDP publication and the image of it on
    the same driver make one stream.
    """
    sources: dict[tuple[str, int], dict] = {}
    for c in counters:
        if "channel" not in c:
            continue
        if c["type_id"] in _PUBLICATION_TYPES:
            role = "publication"
        elif c["type_id"] in _IMAGE_TYPES:
            role = "image"
        else:
            continue
        src = sources.setdefault((role, c["registration_id"]), {
            "role": role, "registration_id": c["registration_id"], "channel": c["channel"],
            "stream_id": c["stream_id"], "session_id": c["session_id"], "counters": {}, "subscribers": [],
        })
        src["counters"][c["type_id"]] = c

    for c in counters:  # fc-receiver: RECEIVER_ID ADDRESS REG SESSION STREAM CHANNEL, keyed by the publication
        if c["type_id"] == FC_RECEIVER and ("publication", c["registration_id"]) in sources:
            parts = c["label"].split(" ")
            sources[("publication", c["registration_id"])].setdefault("receivers", []).append({
                "receiver_id": c["reference_id"], "address": parts[2] if len(parts) > 2 else "",
                "position": c["value"]})

    orphans: list[dict] = []
    for c in counters:
        if c["type_id"] != SUBSCRIBER_POSITION or "channel" not in c:
            continue
        read = sources.get(("image", c["reference_id"])) or sources.get(("publication", c["reference_id"]))
        (read["subscribers"] if read else orphans).append(c)

    streams: dict[tuple, dict] = {}

    def stream_for(key: tuple, media_channel: str) -> dict:
        return streams.setdefault(key, {
            "channel": key[0], "stream_id": key[1], "session_id": key[2],
            "media": "ipc" if media_channel.startswith("aeron:ipc") else "udp",
            "publisher": None, "sender": None, "receiver": None, "subscribers": [],
        })

    for src in sorted(sources.values(), key=lambda s: (s["role"] != "publication", s["registration_id"])):
        key = (src["channel"], src["stream_id"], src["session_id"])
        party = "publisher" if src["role"] == "publication" else "receiver"
        stream = stream_for(key, src["channel"])
        if stream[party] is not None:  # two publications (or images) with the same key: keep them apart
            stream = stream_for((*key, src["registration_id"]), src["channel"])
        ctr = src["counters"]

        def value(type_id: int, ctr=ctr) -> int | None:
            c = ctr.get(type_id)
            return None if c is None else c["value"]

        if src["role"] == "publication":
            stream["publisher"] = {"registration_id": src["registration_id"], "position": value(PUBLISHER_POSITION),
                                   "limit": value(PUBLISHER_LIMIT)}
            if SENDER_POSITION in ctr or SENDER_LIMIT in ctr:
                stream["sender"] = {"position": value(SENDER_POSITION), "limit": value(SENDER_LIMIT),
                                    "backlog": _minus(value(PUBLISHER_POSITION), value(SENDER_POSITION))}
            source_position = value(PUBLISHER_POSITION)
            if src.get("receivers"):
                # The receivers a min (or tagged) flow control tracks; the slowest one holds the stream.
                slowest = min(r["position"] for r in src["receivers"])
                stream["flow_control_receivers"] = [
                    {**r, "behind": _minus(value(SENDER_POSITION), r["position"]), "slowest": r["position"] == slowest}
                    for r in sorted(src["receivers"], key=lambda r: r["position"])]
        else:
            stream["receiver"] = {"registration_id": src["registration_id"], "hwm": value(RECEIVER_HWM),
                                  "position": value(RECEIVER_POSITION),
                                  "backlog": _minus(value(RECEIVER_HWM), value(RECEIVER_POSITION))}
            source_position = value(RECEIVER_POSITION)
        for s in sorted(src["subscribers"], key=lambda s: s["registration_id"]):
            stream["subscribers"].append(_subscriber(s, source_position))

    for s in orphans:  # a subscriber whose publication or image has no counters (yet / any more)
        stream = stream_for((s["channel"], s["stream_id"], s["session_id"]), s["channel"])
        stream["subscribers"].append(_subscriber(s, None))

    return sorted(streams.values(), key=lambda s: (s["stream_id"], s["channel"], s["session_id"]))


def _subscriber(c: dict, source_position: int | None) -> dict:
    return {"registration_id": c["registration_id"], "channel": c["channel"], "position": c["value"],
            "join_position": c.get("join_position"), "backlog": _minus(source_position, c["value"]),
            "counter_id": c["id"]}


def stream_lines(stream: dict) -> list[str]:
    lines = [f"{stream['channel']}  stream {stream['stream_id']}  session {stream['session_id']}  ({stream['media']})"]
    rows = [["party", "registration", "position", "limit/hwm", "backlog"]]
    p, snd, rcv = stream["publisher"], stream["sender"], stream["receiver"]
    if p:
        rows.append(["publisher", str(p["registration_id"]), num(p["position"]), num(p["limit"]), ""])
    if snd:
        rows.append(["sender", str(p["registration_id"]) if p else "", num(snd["position"]), num(snd["limit"]),
                     num(snd["backlog"])])
    for r in stream.get("flow_control_receivers", []):
        rows.append([f"fc receiver {r['address']}" + (" (slowest)" if r["slowest"] else ""), str(r["receiver_id"]),
                     num(r["position"]), "", num(r["behind"])])
    if rcv:
        rows.append(["receiver", str(rcv["registration_id"]), num(rcv["position"]), num(rcv["hwm"]),
                     num(rcv["backlog"])])
    for s in stream["subscribers"]:
        rows.append(["subscriber", str(s["registration_id"]), num(s["position"]), "", num(s["backlog"])])
    return lines + table(rows, right={2, 3, 4}, indent="  ")


def frame(driver, streams: list[dict]) -> list[str]:
    lines = [f"sulis streams  {timestamp(int(time.time() * 1000))}", driver_line(driver), ""]
    for s in streams:
        lines += stream_lines(s) + [""]
    lines.append(f"{len(streams)} stream{'s' if len(streams) != 1 else ''}")
    return lines


@click.command()
@dir_option
@json_option
@click.option("--stream", "stream_id", type=int, default=None, metavar="STREAM_ID", help="Only this stream id.")
@click.option("--session", "session_id", type=int, default=None, metavar="SESSION_ID", help="Only this session id.")
@click.option("--watch", is_flag=True, help="Refresh every --interval until interrupted.")
@click.option("--interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True, metavar="SECONDS",
              help="Time between samples with --watch.")
@run_until_interrupted
def streams(dir_, as_json, stream_id, session_id, watch, interval):
    """Per stream (channel, stream id, session id): publisher position and
    limit, sender position and limit, receiver high-water mark and position,
    each subscriber's position, and every party's backlog.

    A multicast or MDC publication whose flow control tracks its receivers
    (min, tagged) lists each one (fc receiver: address, receiver id, the
    position it reported, how far behind the sender it is); the slowest one
    holds a min stream back.

    Backlogs (bytes): sender = pub-pos - snd-pos; receiver = rcv-hwm - rcv-pos;
    subscriber = rcv-pos (pub-pos for IPC) - sub-pos. pub-pos is sampled by
    the driver (every timer interval), so a backlog may lag the stream a little.
    """
    dir = resolve_dir(dir_)
    driver = open_driver(dir)

    def sample() -> list[dict]:
        found = collect_streams(driver.counters())
        return [s for s in found
                if (stream_id is None or s["stream_id"] == stream_id)
                and (session_id is None or s["session_id"] == session_id)]

    if not watch:
        found = sample()
        if as_json:
            print_json({**driver.header(), "streams": found})
        else:
            click.echo("\n".join(frame(driver, found)))
        return
    with LiveView(enabled=not as_json) as view:
        while True:
            found = sample()
            if as_json:
                print_json({**driver.header(), "streams": found}, pretty=False)
            else:
                view.show(frame(driver, found))
            time.sleep(interval)
            try:
                driver = open_driver(dir)
            except NoDriverError as e:
                raise NoDriverError(f"media driver stopped: {e.message}") from None
