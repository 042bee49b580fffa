"""``sulis loss``: the driver's loss report (like Aeron's LossStat)."""

from __future__ import annotations

import click

from .. import _native
from ._common import dir_option, driver_line, json_option, num, open_driver, print_json, resolve_dir, table, timestamp


@click.command()
@dir_option
@json_option
@click.option("--allow-stopped", is_flag=True,
              help="Also read the loss report that a stopped driver left in DIR (post-mortem).")
def loss(dir_, as_json, allow_stopped):
    """Data lost on the way to this driver: per image (channel, stream, session,
    source) the gaps its receiver detected, their bytes, and when first and last.

    A gap counts once, when first seen, however many NAKs it took to repair."""
    dir = resolve_dir(dir_)
    driver = open_driver(dir, need_live=not allow_stopped)
    try:
        report = _native.read_loss_report(dir)
    except (_native.SulisError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    entries = [{**e, "first": timestamp(e["first_observation_ms"]), "last": timestamp(e["last_observation_ms"])}
               for e in report]
    if as_json:
        print_json({**driver.header(), "entries": entries,
                    "observations": sum(e["observation_count"] for e in entries),
                    "bytes_lost": sum(e["total_bytes_lost"] for e in entries)})
        return
    click.echo(driver_line(driver))
    if not entries:
        click.echo("\nNo loss observed.")
        return
    rows = [["gaps", "bytes lost", "first", "last", "session", "stream", "source", "channel"]]
    rows += [[num(e["observation_count"]), num(e["total_bytes_lost"]), e["first"], e["last"], str(e["session_id"]),
              str(e["stream_id"]), e["source"], e["channel"]] for e in entries]
    click.echo("")
    for line in table(rows, right={0, 1, 4, 5}):
        click.echo(line)
