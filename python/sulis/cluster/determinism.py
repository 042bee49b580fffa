"""``check_determinism``: a service that reads the wall clock or draws unseeded random numbers fails loudly.

Every member's service must do the same with the same log entries, or the members' states part ways
without anyone noticing (Aeron documents the rule and checks none of it). What can be checked cheaply
is what a service calls: with ``check_determinism=true`` (``--check-determinism true``,
``SULIS_CLUSTER_CHECK_DETERMINISM``) a call from the service's own module, during one of its callbacks,
to a function whose answer differs between members raises ``DeterminismError`` naming the function,
the callback and the log position, and the service stops as on any exception (the node's ``error``
says so). Watched:

* the clocks: ``time.time``, ``time.time_ns``, ``time.monotonic(_ns)``, ``time.perf_counter(_ns)``,
  ``datetime.datetime.now``/``utcnow``/``today``, ``datetime.date.today``;
* randomness: the ``random`` module's shared generator (``random.random``, ``randint``, ``choice``,
  ...; a ``random.Random(seed)`` of the service's own is deterministic and allowed),
  ``os.urandom``, ``uuid.uuid1``/``uuid4``, ``secrets``.

Use ``cluster.time`` (the entry's cluster time) and a generator seeded from the log instead. Only the
service's module is changed (its globals: ``time``, ``from time import time``, ``datetime``, ...), so
calls from other modules (logging stamps its records with ``time.time_ns``), calls outside callbacks
and I/O are not checked. It is a development check: it costs a Python call per entry more, so it is
off by default.
"""

from __future__ import annotations

import datetime as _datetime
import os
import random
import secrets
import sys
import threading
import time
import types
import uuid
from typing import Any

__all__ = ["DeterminismError", "checked_service"]


class DeterminismError(RuntimeError):
    """A service called a function whose answer differs between members (``check_determinism``)."""


_state = threading.local()

# (module, name): what to use instead, for the message.
_WATCHED: dict[tuple[Any, str], str] = {
    **{(time, n): "cluster.time" for n in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter",
                                          "perf_counter_ns")},
    **{(random, n): "a random.Random seeded from the log" for n in (
        "random", "randint", "randrange", "choice", "choices", "shuffle", "sample", "uniform", "getrandbits",
        "gauss", "normalvariate", "randbytes")},
    (os, "urandom"): "a random.Random seeded from the log",
    (uuid, "uuid1"): "an id made from the log (cluster.log_position, the session id)",
    (uuid, "uuid4"): "an id made from the log (cluster.log_position, the session id)",
    **{(secrets, n): "a random.Random seeded from the log" for n in ("token_bytes", "token_hex", "randbelow",
                                                                      "choice")},
}

# id(original function) -> its checking wrapper (the original kept with it, so its id stays its own)
_wrappers: dict[int, Any] = {}
_kept: list[Any] = []
_lock = threading.Lock()


def _violation(what: str, instead: str) -> DeterminismError:
    callback, position = getattr(_state, "callback", "?"), getattr(_state, "position", -1)
    return DeterminismError(f"{what} called in {callback} at log position {position}: its answer differs between "
                            f"members (and on replay), so their states would part; use {instead} "
                            "(check_determinism)")


def _checking(what: str, instead: str, original):
    """``original``, failing when called during a callback of a checked service (this thread's)."""
    def wrapper(*args, **kwargs):
        if getattr(_state, "active", False):
            raise _violation(what, instead)
        return original(*args, **kwargs)

    wrapper.__name__ = getattr(original, "__name__", what)
    wrapper.__doc__ = getattr(original, "__doc__", None)
    return wrapper


def _clock_class(base: type) -> type:
    """``datetime.datetime`` or ``datetime.date`` with its clock readings checked."""
    def checked(name: str):
        read = getattr(base, name)

        def method(cls, *args, **kwargs):
            if getattr(_state, "active", False):
                raise _violation(f"datetime.{base.__name__}.{name}", "cluster.time")
            return read(*args, **kwargs)

        return classmethod(method)

    names = ("now", "utcnow", "today") if base is _datetime.datetime else ("today",)
    return type(base.__name__, (base,), {n: checked(n) for n in names})


def _instrument(module: types.ModuleType) -> None:
    """Replaces, in the service's module's globals only, every watched function (``from time import
    time``), module (``import time``: a copy with the watched functions replaced) and clock class (``from
    datetime import datetime``) with a checking one. Nothing outside that module changes."""
    clocks = {id(c): _clock_class(c) for c in (_datetime.datetime, _datetime.date)}
    watched_modules = {id(m) for m, _ in _WATCHED} | {id(_datetime)}
    for name, value in list(vars(module).items()):
        if id(value) in _wrappers:
            setattr(module, name, _wrappers[id(value)])
        elif id(value) in clocks:
            setattr(module, name, clocks[id(value)])
        elif isinstance(value, types.ModuleType) and id(value) in watched_modules:
            proxy = types.ModuleType(value.__name__, value.__doc__)
            for attr, original in vars(value).items():
                setattr(proxy, attr, _wrappers.get(id(original), clocks.get(id(original), original)))
            setattr(module, name, proxy)


def checked_service(service: Any) -> Any:
    """``service`` with its callbacks checked (see the module doc): the calls the node makes go through
    a wrapper that marks them, and the service's module sees checking versions of the watched functions."""
    module = sys.modules.get(type(service).__module__)
    with _lock:
        for (mod, name), instead in _WATCHED.items():
            original = getattr(mod, name, None)
            if original is not None and id(original) not in _wrappers:
                _wrappers[id(original)] = _checking(f"{mod.__name__}.{name}", instead, original)
                _kept.append(original)
        if module is not None:
            _instrument(module)
    return _CheckedService(service)


class _CheckedService:
    """Forwards the node's calls to the service, marking this thread as inside a callback meanwhile."""

    def __init__(self, service: Any) -> None:
        self._service = service
        if hasattr(service, "on_session_messages"):  # a batched service stays one, checked
            self.on_session_messages = lambda cluster, messages: self._call("on_session_messages", cluster, messages)

    def _call(self, name: str, cluster: Any, *args: Any) -> Any:
        _state.active, _state.callback = True, f"{type(self._service).__name__}.{name}"
        _state.position = getattr(cluster, "log_position", -1)
        try:
            return getattr(self._service, name)(cluster, *args)
        finally:
            _state.active = False

    def on_start(self, cluster, snapshot):
        return self._call("on_start", cluster, snapshot)

    def on_take_snapshot(self, cluster, snapshot):
        return self._call("on_take_snapshot", cluster, snapshot)

    def on_session_open(self, cluster, session_id, timestamp):
        return self._call("on_session_open", cluster, session_id, timestamp)

    def on_session_close(self, cluster, session_id, timestamp, close_reason):
        return self._call("on_session_close", cluster, session_id, timestamp, close_reason)

    def on_session_message(self, cluster, session_id, timestamp, payload):
        return self._call("on_session_message", cluster, session_id, timestamp, payload)

    def on_timer_event(self, cluster, correlation_id, timestamp):
        return self._call("on_timer_event", cluster, correlation_id, timestamp)

    def on_role_change(self, cluster, role):
        return self._call("on_role_change", cluster, role)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)
