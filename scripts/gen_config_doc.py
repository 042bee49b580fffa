#!/usr/bin/env python3
"""Renders docs/config.md from the options tables of the media driver and the archive.

Each service has one table of options (``crates/sulis-driver/src/context.rs``
and ``crates/sulis-archive/src/context.rs``, ``OPTIONS``);
``sulis._native.driver_config()`` and ``archive_config()`` return them as rows
of (name, value, source, environment variable, doc). This script turns the
rows into markdown tables: option, environment variable, default,
description. Whatever the tables say is what the page says; nothing about
an option is written here by hand.

The defaults must not depend on the machine the script runs on. The table
is read with every ``SULIS_*`` variable hidden (so values are the built-in
defaults) and twice, under two different made-up identities (``USER``,
``TMPDIR``, ...): an option whose default changes between the two depends
on the machine and is rendered by the rule in ``SYMBOLIC_DEFAULTS``. An
option that is machine-dependent and has no rule there stops the script
with a message saying so, rather than writing this machine's value.

Usage (from the repository root, in the project's venv)::

    python scripts/gen_config_doc.py           # rewrite docs/config.md
    python scripts/gen_config_doc.py --check   # exit 1 if docs/config.md is stale
    python scripts/gen_config_doc.py --stdout  # print the page instead
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "config.md"
COMMAND = "python scripts/gen_config_doc.py"
STALE = f"docs/config.md is stale: run {COMMAND}"

#: Options whose default is computed on the machine, with the rule that
#: computes it (sulis_protocol::driver_dir::default_dir_ignoring_env for
#: `dir`). The rendered cell is used verbatim.
_DEFAULT_DIR = "`/dev/shm/sulis-$USER`; `sulis-$USER` in the temporary directory when there is no `/dev/shm`"
SYMBOLIC_DEFAULTS: dict[str, str] = {"dir": _DEFAULT_DIR, "driver_dir": _DEFAULT_DIR}

#: Variables a default could be derived from. Each probe sets all of them to
#: its own made-up values; a default that differs between the probes is
#: machine-dependent.
_NAME_VARS = ("USER", "LOGNAME", "HOSTNAME")
_PATH_VARS = ("HOME", "TMPDIR", "TMP", "TEMP")


def _probe(tag: str) -> dict[str, str]:
    values = {name: f"sulisdocprobe{tag}" for name in _NAME_VARS}
    values.update({name: f"/sulis-doc-probe-{tag}/{name.lower()}" for name in _PATH_VARS})
    return values


_PROBES = (_probe("a"), _probe("b"))


class MachineDependentDefault(Exception):
    """An option's default differs from one machine to another and has no symbolic rendering."""


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Hides every SULIS_* variable and sets `values`; restores everything after."""
    saved = dict(os.environ)
    try:
        for name in list(os.environ):
            if name.startswith("SULIS_"):
                del os.environ[name]
        os.environ.update(values)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _native():
    try:
        from sulis import _native
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise SystemExit(f"gen_config_doc: cannot import sulis ({e}); run it in the project's venv") from e
    return _native


def option_rows(service: str = "driver") -> list[tuple[str, str, str, str]]:
    """(name, environment variable, default as rendered, doc) for every option of ``service``
    ("driver", "archive" or "cluster"), in table order."""
    config = getattr(_native(), f"{service}_config")
    tables = []
    for probe in _PROBES:
        with _environment(probe):
            tables.append(config())
    first, second = tables
    if [r[0] for r in first] != [r[0] for r in second]:
        raise MachineDependentDefault(f"the {service}'s options table changes with the environment")
    rows = []
    for (name, value, source, env, doc), (_, other_value, _, _, _) in zip(first, second, strict=True):
        if source != "default":
            raise MachineDependentDefault(
                f"option {name!r} came from {source!r} with every SULIS_* variable hidden; expected its default"
            )
        if name in SYMBOLIC_DEFAULTS:
            default = SYMBOLIC_DEFAULTS[name]
        elif value != other_value:
            raise MachineDependentDefault(
                f"the default of option {name!r} depends on the machine ({value!r} vs {other_value!r}); "
                f"add the rule that computes it to SYMBOLIC_DEFAULTS in scripts/gen_config_doc.py"
            )
        else:
            default = _code(value) if value != "" else "(empty)"
        rows.append((name, env, default, doc))
    return rows


def _code(text: str) -> str:
    """`text` as inline code, whatever backticks it holds."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(text: str) -> str:
    """A table cell: pipes escaped, on one line."""
    return " ".join(text.split()).replace("|", "\\|")


def _client_signature() -> str:
    signature = getattr(_native().Client, "__text_signature__", None)
    return f"`sulis.Client{signature}`" if signature else "`sulis.Client(...)` (see `help(sulis.Client)`)"


def render() -> str:
    """The whole of docs/config.md."""
    rows = option_rows()
    archive_rows = option_rows("archive")
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by scripts/gen_config_doc.py from sulis._native.driver_config(), archive_config() and"
        " cluster_config(). Do not edit by hand: change the options tables in crates/sulis-driver/src/context.rs,"
        " crates/sulis-archive/src/context.rs and crates/sulis-cluster/src/module/consensus_module.rs and run"
        f" {COMMAND}. -->",
        "",
        "Every media driver option has a built-in default (the table below), which its environment variable"
        " overrides (`SULIS_IPC_TERM_BUFFER_LENGTH=16m`), which an explicit setting overrides in turn: a keyword"
        " argument of `sulis.MediaDriver` or `sulis.driver_config`"
        ' (`sulis.MediaDriver(ipc_term_buffer_length="16m")`), or a flag of `sulis driver`, the option name'
        " with `-` for `_` (`sulis driver --ipc-term-buffer-length 16m`).",
        "",
        "Sizes take a `k`, `m` or `g` suffix. `sulis driver --print-config` prints every effective value and"
        " where it came from, in the form the Default column uses. The driver checks the values together"
        " when it starts (`DriverContext::conclude`) and refuses a bad combination with a `ConfigurationError`"
        " naming the option.",
        "",
        "## Media driver options",
        "",
        "| Option | Environment variable | Default | Description |",
        "|---|---|---|---|",
    ]
    for name, env, default, doc in rows:
        lines.append(f"| `{name}` | `{env}` | {_cell(default)} | {_cell(doc)} |")
    lines += [
        "",
        "## Archive options",
        "",
        "The archive's table works the same way: its environment variable (`SULIS_ARCHIVE_FILE_SYNC_LEVEL=1`),"
        " then a keyword argument of `sulis.Archive` or `sulis.archive_config`"
        ' (`sulis.Archive("/data/archive", file_sync_level=1)`), or a flag of `sulis archive`'
        " (`sulis archive --archive-dir /data/archive --file-sync-level 1`); `sulis archive --print-config`"
        " prints what it would run with. Durations take a unit (`5s`), or a float of seconds as a keyword."
        " An empty value is none (`control_channel`: local control only). `credentials`, `challenge`,"
        " `challenge_response` and `authorise` are objects, keywords of `sulis.Archive` only. The archive"
        " checks the values together when it starts (`ArchiveContext::conclude`).",
        "",
        "| Option | Environment variable | Default | Description |",
        "|---|---|---|---|",
    ]
    for name, env, default, doc in archive_rows:
        lines.append(f"| `{name}` | `{env}` | {_cell(default)} | {_cell(doc)} |")
    lines += [
        "",
        "## Cluster options",
        "",
        "A cluster node's consensus module reads the cluster's table the same way: its environment variable"
        " (`SULIS_CLUSTER_SESSION_TIMEOUT=5s`), then a keyword argument of `sulis.cluster.ClusterNode` or"
        " `sulis.cluster.cluster_config`"
        ' (`ClusterNode(service, "/data/cluster", cluster_members=..., session_timeout="5s")`).'
        " Durations take a unit (`5s`), or a float of seconds as a keyword; `app_version` is"
        " `major.minor.patch`. The node checks the values together when it starts"
        " (`ConsensusModuleContext::conclude`).",
        "",
        "| Option | Environment variable | Default | Description |",
        "|---|---|---|---|",
    ]
    for name, env, default, doc in option_rows("cluster"):
        lines.append(f"| `{name}` | `{env}` | {_cell(default)} | {_cell(doc)} |")
    lines += [
        "",
        "## Client options",
        "",
        "Clients have no options table and read no `SULIS_*` variable except `SULIS_DIR`: their settings are"
        f" the arguments of {_client_signature()}. `dir` defaults to `$SULIS_DIR`, else to the driver's default"
        " directory above; `driver_timeout` is in seconds. A `dir` that does not exist fails at once, naming"
        " `sulis driver --dir`; one without its `cnc.dat` yet (a driver starting) is waited for up to"
        " `driver_timeout`.",
        "",
        "Channel URI parameters (`term-length`, `mtu`, `linger`, ...) override some of these options for one"
        " publication or subscription: see [protocol.md §6](protocol.md).",
        "",
    ]
    return "\n".join(lines)


def _diff(old: str, new: str, limit: int = 40) -> str:
    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), "docs/config.md (committed)", "docs/config.md (generated)", lineterm=""
        )
    )
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more diff lines)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if docs/config.md differs from the table")
    mode.add_argument("--stdout", action="store_true", help="print the page instead of writing it")
    args = parser.parse_args(argv)
    try:
        text = render()
    except MachineDependentDefault as e:
        print(f"gen_config_doc: {e}", file=sys.stderr)
        return 2
    if args.stdout:
        sys.stdout.write(text)
        return 0
    if args.check:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(STALE, file=sys.stderr)
            print(_diff(current, text), file=sys.stderr)
            return 1
        print("docs/config.md is up to date")
        return 0
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
