"""``sulis keyring``: make and rotate the keyring of secured channels.

The driver reads the file (``--keyring-file``) at start and again whenever
it changes. Keys are drawn from the operating system's random source
(:mod:`secrets`); a key's digits are never printed.
"""

from __future__ import annotations

import os
import re
import secrets

import click

_KEY = re.compile(r"^\s*(\d+)\s+[0-9a-fA-F]{64}\s*(#.*)?$")
_SEND = re.compile(r"^\s*send\s+(\d+)\s*(#.*)?$")


def _read(path: str) -> tuple[list[str], list[int], int | None]:
    """The file's lines, its key ids and its ``send`` id (None if it names none)."""
    if not os.path.exists(path):
        return [], [], None
    with open(path, encoding="ascii") as f:
        lines = f.read().splitlines()
    ids, send = [], None
    for n, line in enumerate(lines, 1):
        if m := _KEY.match(line):
            ids.append(int(m.group(1)))
        elif m := _SEND.match(line):
            send = int(m.group(1))
        elif line.split("#", 1)[0].strip():
            raise click.ClickException(f"keyring {path}, line {n}: expected 'ID HEX' or 'send ID'")
    return lines, ids, send


def _known(path: str, key_id: int) -> tuple[list[str], list[int], int | None]:
    """The file as ``_read`` gives it, refusing a ``key_id`` it does not hold."""
    lines, ids, send = _read(path)
    if key_id not in ids:
        raise click.ClickException(f"keyring {path} has no key {key_id} (it has {', '.join(map(str, ids)) or 'none'})")
    return lines, ids, send


def _sealing_with(lines: list[str], key_id: int) -> list[str]:
    """``lines`` with one ``send`` line, naming ``key_id``."""
    return [ln for ln in lines if not _SEND.match(ln)] + [f"send {key_id}"]


def _write(path: str, lines: list[str]) -> None:
    """Replaces the file whole (a new file renamed over it, mode 600), so a
    driver reading it sees the old or the new keys, never half of them."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@click.group()
def keyring() -> None:
    """The keyring of secured channels (security=auth or encrypt).

    Rotation without a restart: ``add`` a key to every host's file (each then
    opens both), then ``send`` it on every host, then ``remove`` the old one."""


@keyring.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--send", "send_it", is_flag=True,
              help="Seal with the new key from now on (default: keep the key in use).")
def add(file: str, send_it: bool) -> None:
    """Add a new random key to FILE (made, mode 600, if missing); prints its id."""
    lines, ids, send = _read(file)
    new_id = max(ids, default=0) + 1
    if not lines:
        lines = ["# sulis keyring: 'ID HEX' a line; 'send ID' is the key this host seals with"]
    if ids and send is None:
        # Without a send line the highest id seals: pin the one in use first.
        lines.append(f"send {max(ids)}")
        send = max(ids)
    lines.append(f"{new_id} {secrets.token_hex(32)}")
    if send_it or not ids:
        lines = _sealing_with(lines, new_id)
    _write(file, lines)
    click.echo(new_id)


@keyring.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("key_id", type=int)
def send(file: str, key_id: int) -> None:
    """Seal with key KEY_ID of FILE from now on."""
    lines, _, _ = _known(file, key_id)
    _write(file, _sealing_with(lines, key_id))


@keyring.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("key_id", type=int)
def remove(file: str, key_id: int) -> None:
    """Remove key KEY_ID from FILE (not the one it seals with)."""
    lines, ids, send_id = _known(file, key_id)
    if key_id == (send_id if send_id is not None else max(ids)):
        raise click.ClickException(f"key {key_id} is the one {file} seals with: `sulis keyring send` another first")
    _write(file, [ln for ln in lines if not ((m := _KEY.match(ln)) and int(m.group(1)) == key_id)])


@keyring.command(name="list")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
def list_(file: str) -> None:
    """The key ids in FILE and the one it seals with (never the keys)."""
    _, ids, send_id = _read(file)
    sealing = send_id if send_id is not None else max(ids, default=None)
    for i in ids:
        click.echo(f"{i}{'  (seals)' if i == sealing else ''}")
