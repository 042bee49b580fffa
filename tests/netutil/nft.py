"""Random UDP loss with nftables, inside a network namespace.

``NftLoss(ns, percent, hook="input", dport=None, sport=None)`` installs table
``inet <name>`` in namespace ``ns`` (the current one when None) with a base
chain per hook (``input`` and/or ``output``) holding two rules on the matched
UDP packets::

    meta l4proto udp [udp dport P] [udp sport Q] counter comment "seen"
    meta l4proto udp [udp dport P] [udp sport Q] numgen random mod 10000 < percent*100 counter drop comment "drop"

``dropped()`` and ``seen()`` read the counters back (``nft -j list table``),
so a test can assert that loss really happened and at about which rate.
``set_percent(p)`` changes the rate in place (counters kept); ``remove()``
deletes the table (deleting the namespace does too).

Without ``nft`` the constructor skips the test (``require_nft()``).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess

from .netns import exec_prefix
from .procs import KERNEL_STALL, threads_in

HOOKS = ("input", "output")
_counter = itertools.count()


class NftError(RuntimeError):
    pass


def nft_path() -> str | None:
    return shutil.which("nft") or next(
        (p for p in ("/usr/sbin/nft", "/sbin/nft") if os.access(p, os.X_OK)), None)


def nft_available() -> tuple[bool, str]:
    """``(True, "")`` when ``nft`` exists and we are root, else ``(False, reason)``."""
    if nft_path() is None:
        return False, "nft (nftables) is not installed: apt-get install -y nftables (scripts/setup.sh does it as root)"
    if os.geteuid() != 0:
        return False, "nftables rules need root"
    return True, ""


def require_nft() -> None:
    """Skips the calling test when nftables cannot be used."""
    ok, reason = nft_available()
    if not ok:
        import pytest

        pytest.skip(reason)


def run_nft(ns: str | None, *args: str, input: str | None = None) -> str:
    """Runs ``nft ARGS`` inside ``ns`` (current namespace when None); returns stdout."""
    argv = ([] if ns is None else exec_prefix(ns)) + [nft_path() or "nft", *args]
    # A hang guard, not a speed limit: `ip netns exec` makes a mount namespace, and beside two busy loops right
    # after a loop-mounted disk was filled and emptied (the fault suite's fill-disk) one took over 180 s.
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(input, timeout=2 * KERNEL_STALL)
    except subprocess.TimeoutExpired:
        stuck = threads_in(proc.pid)
        proc.kill()
        proc.communicate()
        raise NftError(f"{' '.join(argv)} did not finish within {2 * KERNEL_STALL:.0f} s; "
                       f"its threads: {stuck}") from None
    if proc.returncode != 0:
        raise NftError(f"{' '.join(argv)} failed ({proc.returncode}): {err.strip()}")
    return out


class NftLoss:
    """Drops ``percent`` % of matching UDP packets at random, with counters.

    ``loss = NftLoss(pair.ns_b, 30, hook="input", dport=40123); ...; assert loss.dropped() > 0``
    """

    def __init__(self, ns: str | None, percent: float, hook: str = "input", dport: int | None = None,
                 sport: int | None = None, table: str | None = None, priority: int = -10):
        require_nft()
        hooks = HOOKS if hook == "both" else (hook,)
        for h in hooks:
            if h not in HOOKS:
                raise ValueError(f"hook must be 'input', 'output' or 'both', not {hook!r}")
        self.ns = ns
        self.hooks = hooks
        self.table = table or f"sulis_loss_{os.getpid()}_{next(_counter)}"
        self.match = "meta l4proto udp"
        if dport is not None:
            self.match += f" udp dport {int(dport)}"
        if sport is not None:
            self.match += f" udp sport {int(sport)}"
        self.percent = self._check(percent)
        script = [f"add table inet {self.table}"]
        for h in hooks:
            script.append(f"add chain inet {self.table} {h} "
                          f"{{ type filter hook {h} priority {int(priority)}; policy accept; }}")
            script.append(f'add rule inet {self.table} {h} {self.match} counter comment "seen"')
            script.append(f"add rule inet {self.table} {h} {self._drop_rule(self.percent)}")
        run_nft(ns, "-f", "-", input="\n".join(script) + "\n")
        self._removed = False

    @staticmethod
    def _check(percent: float) -> float:
        percent = float(percent)
        if not 0.0 <= percent <= 100.0:
            raise ValueError(f"percent must be within [0, 100], not {percent}")
        return percent

    def _drop_rule(self, percent: float) -> str:
        threshold = round(percent * 100)
        chance = "" if threshold >= 10000 else f" numgen random mod 10000 < {threshold}"
        return f'{self.match}{chance} counter drop comment "drop"'

    def _rules(self) -> list[dict]:
        doc = json.loads(run_nft(self.ns, "-j", "list", "table", "inet", self.table))
        return [item["rule"] for item in doc["nftables"] if "rule" in item]

    @staticmethod
    def _counter(rule: dict) -> dict:
        for expr in rule.get("expr", []):
            if "counter" in expr:
                return expr["counter"]
        raise NftError(f"rule without counter: {rule}")

    def counters(self) -> dict[str, dict[str, int]]:
        """``{hook: {"seen": packets, "dropped": packets}}`` for each installed hook."""
        out = {h: {"seen": 0, "dropped": 0} for h in self.hooks}
        for rule in self._rules():
            key = {"seen": "seen", "drop": "dropped"}.get(rule.get("comment"))
            if key is not None and rule["chain"] in out:
                out[rule["chain"]][key] = self._counter(rule)["packets"]
        return out

    def dropped(self, hook: str | None = None) -> int:
        """Packets dropped so far (by one hook, or all)."""
        c = self.counters()
        return sum(v["dropped"] for h, v in c.items() if hook in (None, h))

    def seen(self, hook: str | None = None) -> int:
        """Matching packets so far, dropped or not (by one hook, or all)."""
        c = self.counters()
        return sum(v["seen"] for h, v in c.items() if hook in (None, h))

    def set_percent(self, percent: float) -> None:
        """Changes the drop rate; counters keep counting from where they were."""
        percent = self._check(percent)
        for rule in self._rules():
            if rule.get("comment") == "drop":
                c = self._counter(rule)
                body = self._drop_rule(percent).replace(
                    "counter drop", f"counter packets {c['packets']} bytes {c['bytes']} drop")
                run_nft(self.ns, "-f", "-",
                    input=f"replace rule inet {self.table} {rule['chain']} handle {rule['handle']} {body}\n")
        self.percent = percent

    def remove(self) -> None:
        if self._removed:
            return
        self._removed = True
        try:
            run_nft(self.ns, "delete", "table", "inet", self.table)
        except NftError:
            pass  # the namespace (and with it the table) is already gone

    def __enter__(self) -> NftLoss:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"NftLoss({self.ns}, {self.percent}%, {'/'.join(self.hooks)}, {self.match!r})"
