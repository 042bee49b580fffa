"""``sulis stat``: the driver's counters, live (like Aeron's AeronStat), once,
as JSON, or served to Prometheus."""

from __future__ import annotations

import re
import time

import click

from ._common import (
    CLIENT_HEARTBEAT,
    STREAM_TYPES,
    SYSTEM,
    TYPE_NAMES,
    LiveView,
    NoDriverError,
    dir_option,
    driver_line,
    json_option,
    num,
    open_driver,
    print_json,
    require,
    resolve_dir,
    run_until_interrupted,
    table,
    timestamp,
)

_TYPE_GROUPS = {"system": {SYSTEM}, "stream": set(STREAM_TYPES), "client": {CLIENT_HEARTBEAT}}
_TYPE_BY_NAME = {name: {type_id} for type_id, name in TYPE_NAMES.items()}


def parse_types(values: tuple[str, ...]) -> set[int] | None:
    """``--type`` values (group names, type names or ids) as a set of type ids; None = all."""
    if not values:
        return None
    ids: set[int] = set()
    for v in values:
        key = v.strip().lower()
        if key in _TYPE_GROUPS:
            ids |= _TYPE_GROUPS[key]
        elif key in _TYPE_BY_NAME:
            ids |= _TYPE_BY_NAME[key]
        else:
            try:
                ids.add(int(key))
            except ValueError:
                choices = ", ".join([*_TYPE_GROUPS, *sorted(_TYPE_BY_NAME)])
                raise click.BadParameter(f"{v!r} is not a type id nor one of: {choices}", param_hint="--type") from None
    return ids


def make_filter(types: set[int] | None, stream_id: int | None, session_id: int | None, label: re.Pattern | None):
    def keep(c: dict) -> bool:
        if types is not None and c["type_id"] not in types:
            return False
        if stream_id is not None and c.get("stream_id") != stream_id:
            return False
        if session_id is not None and c.get("session_id") != session_id:
            return False
        return label is None or label.search(c["label"]) is not None

    return keep


class Rates:
    """Per-second rates of change from the previous sample (a reused counter id starts afresh)."""

    def __init__(self):
        self.prev: dict[int, tuple] = {}
        self.prev_time: float | None = None
        self.driver_start: int | None = None

    def update(self, driver_start: int, counters: list[dict]) -> None:
        now = time.monotonic()
        if driver_start != self.driver_start:  # a new driver in the directory
            self.prev, self.prev_time, self.driver_start = {}, None, driver_start
        dt = None if self.prev_time is None else now - self.prev_time
        current = {}
        for c in counters:
            ident = (c["type_id"], c["registration_id"], c["label"])
            before = self.prev.get(c["id"])
            c["rate_per_second"] = (
                (c["value"] - before[1]) / dt if dt and before is not None and before[0] == ident else None
            )
            current[c["id"]] = (ident, c["value"])
        self.prev, self.prev_time = current, now


def frame(driver, counters: list[dict], total: int, with_rate: bool) -> list[str]:
    lines = [f"sulis stat  {timestamp(int(time.time() * 1000))}", driver_line(driver), ""]
    head = ["id", "type", "value", *(["rate/s"] if with_rate else []), "label"]
    rows = [head]
    for c in counters:
        rate = [num(c.get("rate_per_second"))] if with_rate else []
        rows.append([str(c["id"]), c["type"], num(c["value"]), *rate, c["label"]])
    lines += table(rows, right={0, 2, 3} if with_rate else {0, 2})
    shown = f"{len(counters)} of {total} counters" if len(counters) != total else f"{total} counters"
    lines += ["", shown]
    return lines


@click.command()
@dir_option
@json_option
@click.option("--once", is_flag=True, help="Print one sample and exit (no rates).")
@click.option("--interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True, metavar="SECONDS",
              help="Time between samples.")
@click.option("--count", type=click.IntRange(min=1), default=None, metavar="N",
              help="Exit after N samples [default: run until interrupted].")
@click.option("--type", "types", multiple=True, metavar="TYPE",
              help="Only counters of this type: system, stream, client, a type name "
                   f"({', '.join(n for t, n in sorted(TYPE_NAMES.items()) if t != SYSTEM)}) or a type id. "
                   "Repeatable.")
@click.option("--stream", "stream_id", type=int, default=None, metavar="STREAM_ID",
              help="Only stream counters of this stream id.")
@click.option("--session", "session_id", type=int, default=None, metavar="SESSION_ID",
              help="Only stream counters of this session id.")
@click.option("--label", "label_re", default=None, metavar="REGEX", help="Only counters whose label matches REGEX.")
@click.option("--prometheus", "prometheus", default=None, metavar="[HOST]:PORT",
              help="Serve the counters at http://HOST:PORT/metrics for Prometheus (read afresh on every scrape) "
                   "until interrupted. :PORT listens on the loopback interface (127.0.0.1) only; give an address "
                   "to serve other hosts (0.0.0.0:PORT for every interface). Port 0 picks a free port. "
                   "The filters do not apply.")
@run_until_interrupted
def stat(dir_, as_json, once, interval, count, types, stream_id, session_id, label_re, prometheus):
    """The driver's counters with their rates, refreshed every --interval (like Aeron's AeronStat).

    Works on a driver in any process. On a terminal the table is redrawn in
    place; otherwise successive samples are printed one after the other (with
    --json, one JSON document per line).
    """
    dir = resolve_dir(dir_)
    try:
        label = re.compile(label_re) if label_re is not None else None
    except re.error as e:
        raise click.BadParameter(f"{label_re!r}: {e}", param_hint="--label") from None
    keep = make_filter(parse_types(types), stream_id, session_id, label)
    if prometheus is not None:
        from .prometheus import parse_address, serve

        host, port = parse_address(prometheus)
        require("prometheus_client", "--prometheus")
        open_driver(dir)
        serve(dir, host, port)
        return
    driver = open_driver(dir)

    if once:
        counters = driver.counters()
        shown = [c for c in counters if keep(c)]
        if as_json:
            print_json({**driver.header(), "counters": shown})
        else:
            click.echo("\n".join(frame(driver, shown, len(counters), with_rate=False)))
        return

    rates = Rates()
    samples = 0
    with LiveView(enabled=not as_json) as view:
        while True:
            if samples:
                time.sleep(interval)
                try:
                    driver = open_driver(dir)  # afresh: the driver may have been restarted
                except NoDriverError as e:
                    raise NoDriverError(f"media driver stopped: {e.message}") from None
            counters = driver.counters()
            rates.update(driver.start_ms, counters)
            shown = [c for c in counters if keep(c)]
            if as_json:
                print_json({**driver.header(), "counters": shown}, pretty=False)
            else:
                view.show(frame(driver, shown, len(counters), with_rate=True))
            samples += 1
            if count is not None and samples >= count:
                return
