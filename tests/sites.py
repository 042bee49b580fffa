"""Hosts for the multi-host system tests: each a network namespace the test makes (``netns_hosts``)
with its own media driver process; the test's children run there as that driver's clients."""

from __future__ import annotations

import json

import sulis
from conftest import make_dir
from netutil import exec_prefix, require_netns

STREAM = 4001
# How long a child (a driver, a producer, a consumer in a namespace) may take to start and say it is ready: a
# bound for a hang, not the time it takes (under a second idle; a CI run with busy CPUs saw over 30 s).
STARTED_S = 90.0
DRIVER = {"threading_mode": "shared", "term_buffer_sparse_file": True, "term_buffer_length": "1m",
          "publication_linger_timeout": "1s"}


class Site:
    """A host with a driver process; children run there as clients of it."""

    def __init__(self, hosts, spawn, name: str, **driver_options):
        self.hosts, self.spawn, self.name = hosts, spawn, name
        self.addr = hosts.addr(name)
        self.prefix = exec_prefix(hosts.ns(name))
        self.dir = make_dir(f"sulis-site-{name}-")
        self.driver = spawn("driver", self.dir, json.dumps({**DRIVER, **driver_options}), prefix=self.prefix)
        self.driver.read(timeout=STARTED_S)

    def consume(self, channel: str, count: int, producers: int = 1, destinations: tuple[str, ...] = ()):
        """A consumer of ``count`` messages from each producer; ``destinations``: added to its
        (multi-destination) subscription first."""
        c = self.spawn("consume", self.dir, STREAM, producers, count, channel, ",".join(destinations),
                       prefix=self.prefix)
        c.read(timeout=STARTED_S)
        return c

    def produce(self, channel: str, count: int, seed: int = 1, max_length: int = 2000, wait_go: bool = False,
                destinations: tuple[str, ...] = ()):
        """A producer of ``count`` messages; ``destinations``: added to its (manual MDC) publication first."""
        return self.spawn("produce", self.dir, STREAM, 0, count, seed, max_length, 1 if wait_go else 0, channel,
                          ",".join(destinations), prefix=self.prefix, stdin=wait_go)

    def counters(self, type_name: str) -> list[dict]:
        type_id = {name: t for t, name in sulis._native.counter_types()}[type_name]
        return [c for c in sulis.CountersReader(self.dir).counters() if c["type_id"] == type_id]


def sites(netns_hosts, spawn, *names, **driver_options):
    """Hosts ``names`` on one bridge, each with a driver: (hosts, their subnet as a /24, {name: Site})."""
    require_netns()
    hosts = netns_hosts(*names)
    subnet = hosts.addr(names[0]).rsplit(".", 1)[0] + ".0/24"
    return hosts, subnet, {n: Site(hosts, spawn, n, **driver_options) for n in names}


def done(child, timeout: float) -> dict:
    """The child's last word: its result or its error."""
    while True:
        msg = child.read(timeout=timeout)
        if msg.get("done") or msg.get("error"):
            return msg


def tally(child) -> dict:
    """What a ``tally`` child has received so far."""
    child.send("report")
    return child.read(timeout=30)
