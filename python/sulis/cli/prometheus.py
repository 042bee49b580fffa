"""``sulis stat --prometheus HOST:PORT``: the driver's counters at ``/metrics``
in Prometheus' text format, read from the CnC file afresh on every scrape.
``:PORT`` listens on the loopback interface only; ``0.0.0.0:PORT`` (or
``[::]:PORT``) on every interface.

Metrics:

- ``sulis_driver_up``: 1 while a live driver owns the directory, else 0 (and
  nothing else is reported). The server keeps running while the driver is
  away and picks up a restarted driver.
- ``sulis_driver_start_time_seconds``, ``sulis_driver_build_info{version}``.
- every system counter, named from its label (``NAKs sent`` ->
  ``sulis_naks_sent_total``); the few that are levels, not counts (max cycle
  times, bytes mapped, idle-strategy status, protocol version), as gauges.
- ``sulis_stream_position{type,channel,stream_id,session_id,registration_id}``:
  each per-stream counter (type pub-lmt, pub-pos, snd-pos, snd-lmt, rcv-hwm,
  rcv-pos, sub-pos).
- ``sulis_stream_backlog_bytes{party,...}``: the backlogs ``sulis streams``
  shows (party sender, receiver, subscriber).
- ``sulis_client_heartbeat_timestamp_seconds{client_id}``.
- a cluster member's counters, by ``cluster_id``: ``sulis_cluster_module_state`` (INIT 0, ACTIVE 1,
  SUSPENDED 2, SNAPSHOT 3, ...), ``sulis_cluster_node_role`` (FOLLOWER 0, CANDIDATE 1, LEADER 2),
  ``sulis_cluster_commit_position``, ``sulis_cluster_control_toggle``, ``sulis_cluster_election_state``,
  ``sulis_cluster_leadership_term_id`` and the counters ``sulis_cluster_snapshots_total``,
  ``sulis_cluster_elections_total`` and ``sulis_cluster_timed_out_clients_total``.
- an archive's retention and tiering, by ``archive_id``: ``sulis_archive_retention_segments_removed_total``,
  ``sulis_archive_retention_bytes_removed_total``, ``sulis_archive_tier_segments_moved_total`` and
  ``sulis_archive_tier_bytes_moved_total``.
"""

from __future__ import annotations

import ipaddress
import re
import sys
import time

import click

from .. import _native
from ._common import (
    CLIENT_HEARTBEAT,
    STREAM_TYPES,
    SYSTEM,
    NoDriverError,
    open_driver,
    require,
)
from .streams import collect_streams

_SYSTEM_COUNTER_IDS = {label: counter_id for counter_id, label in _native.system_counters()}
#: System counters that hold a level rather than a running count.
_GAUGE_IDS = frozenset(_SYSTEM_COUNTER_IDS[label] for label in (
    "ControllableIdleStrategy status",
    "Conductor max cycle time doing its work in ns",
    "Sender max cycle time doing its work in ns",
    "Receiver max cycle time doing its work in ns",
    "Name resolver max time in ns",
    "Bytes currently mapped",
    "Control Protocol Version",
))
#: Its label ends with the version; reported as an info metric.
_VERSION_ID = _SYSTEM_COUNTER_IDS["sulis software: version"]
_STREAM_LABELS = ["type", "channel", "stream_id", "session_id", "registration_id"]


def metric_name(label: str) -> str:
    """``"NAKs sent"`` -> ``"sulis_naks_sent"``."""
    return "sulis_" + (re.sub(r"[^0-9a-zA-Z]+", "_", label).strip("_").lower() or "unnamed")


class DriverCollector:
    """A prometheus_client collector reading the driver in ``dir`` on each collect()."""

    def __init__(self, dir: str):
        self.dir = dir

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        up = GaugeMetricFamily("sulis_driver_up", f"1 if a live media driver owns {self.dir}, else 0")
        try:
            driver = open_driver(self.dir)
            counters = driver.counters()
        except NoDriverError:
            up.add_metric([], 0)
            yield up
            return
        except Exception as e:  # a scrape must never take the server down
            print(f"sulis stat: reading {self.dir} failed: {e!r}", file=sys.stderr, flush=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield GaugeMetricFamily("sulis_driver_start_time_seconds", "When the driver started (epoch seconds)",
                                value=driver.start_ms / 1000)

        names: set[str] = set()
        for c in counters:
            if c["type_id"] != SYSTEM:
                continue
            if c["id"] == _VERSION_ID:
                version = c["label"].rsplit(" ", 1)[-1]
                yield InfoMetricFamily("sulis_driver_build", "The driver's software version",
                                       value={"version": version})
                continue
            name = metric_name(c["label"])
            if name in names or name + "_total" in names:
                name = f"{name}_{c['id']}"
            if c["id"] in _GAUGE_IDS:
                names.add(name)
                yield GaugeMetricFamily(name, c["label"], value=c["value"])
            else:
                names.add(name + "_total")
                yield CounterMetricFamily(name, c["label"], value=c["value"])

        positions = GaugeMetricFamily("sulis_stream_position", "Per-stream position and limit counters (bytes)",
                                      labels=_STREAM_LABELS)
        for c in counters:
            if c["type_id"] in STREAM_TYPES and "channel" in c:
                positions.add_metric([c["type"], c["channel"], str(c["stream_id"]), str(c["session_id"]),
                                      str(c["registration_id"])], c["value"])
        yield positions

        backlog = GaugeMetricFamily("sulis_stream_backlog_bytes",
                                    "Bytes a party of a stream is behind: sender (pub-pos - snd-pos), receiver "
                                    "(rcv-hwm - rcv-pos), subscriber (rcv-pos or IPC pub-pos - sub-pos)",
                                    labels=["party", "channel", "stream_id", "session_id", "registration_id"])
        for s in collect_streams(counters):
            ids = [s["channel"], str(s["stream_id"]), str(s["session_id"])]
            if s["sender"] and s["sender"]["backlog"] is not None:
                backlog.add_metric(["sender", *ids, str(s["publisher"]["registration_id"])], s["sender"]["backlog"])
            if s["receiver"] and s["receiver"]["backlog"] is not None:
                backlog.add_metric(["receiver", *ids, str(s["receiver"]["registration_id"])],
                                   s["receiver"]["backlog"])
            for sub in s["subscribers"]:
                if sub["backlog"] is not None:
                    backlog.add_metric(["subscriber", *ids, str(sub["registration_id"])], sub["backlog"])
        yield backlog

        heartbeats = GaugeMetricFamily("sulis_client_heartbeat_timestamp_seconds",
                                       "Last heartbeat of each client (epoch seconds)", labels=["client_id"])
        for c in counters:
            if c["type_id"] == CLIENT_HEARTBEAT:
                heartbeats.add_metric([str(c.get("client_id", c["registration_id"]))], c["value"] / 1000)
        yield heartbeats
        yield from _cluster_metrics(counters)
        yield from _archive_metrics(counters)


#: A cluster member's counters (type id: metric name, help); the snapshot count is a counter.
_CLUSTER_GAUGES = {
    200: ("sulis_cluster_module_state", "The consensus module's state: INIT 0, ACTIVE 1, SUSPENDED 2, SNAPSHOT 3, "
                                        "QUITTING 4, TERMINATING 5, CLOSED 6"),
    201: ("sulis_cluster_node_role", "The member's role: FOLLOWER 0, CANDIDATE 1, LEADER 2"),
    202: ("sulis_cluster_control_toggle", "The control toggle: NEUTRAL 1, SUSPEND 2, RESUME 3, SNAPSHOT 4"),
    203: ("sulis_cluster_commit_position", "How far the cluster's log is committed (bytes)"),
    207: ("sulis_cluster_election_state", "The election's state: INIT 0, CANVASS 1, ... LEADER_READY 8, ... "
                                          "FOLLOWER_READY 16, CLOSED 17 (no election running)"),
    239: ("sulis_cluster_leadership_term_id", "The leadership term the member is in (-1 before its first)"),
}
#: Counts since the member started (type id: metric name, help).
_CLUSTER_COUNTS = {
    205: ("sulis_cluster_snapshots", "Snapshots the member took since it started"),
    238: ("sulis_cluster_elections", "Elections the member began since it started"),
    213: ("sulis_cluster_timed_out_clients", "Client sessions the member, leading, closed for silence"),
}


def _cluster_metrics(counters):
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    families: dict[int, GaugeMetricFamily | CounterMetricFamily] = {
        t: GaugeMetricFamily(name, doc, labels=["cluster_id"]) for t, (name, doc) in _CLUSTER_GAUGES.items()}
    families.update({t: CounterMetricFamily(name, doc, labels=["cluster_id"])
                     for t, (name, doc) in _CLUSTER_COUNTS.items()})
    for c in counters:
        family = families.get(c["type_id"])
        if family is not None:
            family.add_metric([str(c.get("cluster_id", 0))], c["value"])
    yield from families.values()


#: An archive's counters that are counts, by type id: (metric name, help).
_ARCHIVE_COUNTS = {
    9103: ("sulis_archive_retention_segments_removed", "Segment files the archive's retention removed"),
    9104: ("sulis_archive_retention_bytes_removed", "Recorded bytes the archive's retention removed"),
    9105: ("sulis_archive_tier_segments_moved", "Segment files the archive moved to its object store"),
    9106: ("sulis_archive_tier_bytes_moved", "Bytes of segment files the archive moved to its object store"),
}


def _archive_metrics(counters):
    from prometheus_client.core import CounterMetricFamily

    families = {t: CounterMetricFamily(name, doc, labels=["archive_id"]) for t, (name, doc) in _ARCHIVE_COUNTS.items()}
    for c in counters:
        family = families.get(c["type_id"])
        if family is not None:
            family.add_metric([str(c.get("archive_id", 0))], c["value"])
    yield from families.values()


#: Where ``--prometheus :PORT`` listens: this host only. Metrics name every
#: channel and stream, so serving other hosts takes an explicit address.
DEFAULT_HOST = "127.0.0.1"


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT``, or ``:PORT`` for the loopback interface."""
    host, sep, port = address.rpartition(":")
    if not sep:
        raise click.BadParameter(f"{address!r}: expected HOST:PORT or :PORT", param_hint="--prometheus")
    host = host.strip("[]") or DEFAULT_HOST
    try:
        number = int(port)
        if not 0 <= number <= 65535:
            raise ValueError
    except ValueError:
        raise click.BadParameter(f"{address!r}: {port!r} is not a port number", param_hint="--prometheus") from None
    return host, number


def reach(host: str) -> str:
    """Who can scrape a server bound to ``host`` (a numeric address)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"interface {host}"
    if ip.is_loopback:
        return "loopback only; give HOST:PORT, e.g. 0.0.0.0:PORT, to serve other hosts"
    if ip.is_unspecified:
        return "all interfaces: reachable from other hosts"
    return f"interface {host} only"


def serve(dir: str, host: str, port: int) -> None:
    """Serves the driver's metrics until interrupted (KeyboardInterrupt)."""
    require("prometheus_client", "--prometheus")
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DriverCollector(dir))
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise click.ClickException(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from None
    bound_host, bound_port = str(httpd.server_address[0]), int(httpd.server_address[1])
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    click.echo(f"serving the counters of {dir} at http://{shown}:{bound_port}/metrics ({reach(bound_host)}); "
               "Ctrl-C to stop", err=True)
    try:
        while thread.is_alive():
            time.sleep(1.0)
    finally:
        httpd.shutdown()
        httpd.server_close()
