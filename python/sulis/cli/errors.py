"""``sulis errors``: the driver's distinct-error log (like Aeron's ErrorStat)."""

from __future__ import annotations

from typing import Any

import click

from .. import _native
from ._common import (
    dir_option,
    driver_line,
    json_option,
    open_driver,
    print_json,
    resolve_dir,
    run_until_interrupted,
    timestamp,
)


@click.command()
@dir_option
@json_option
@click.option("--allow-stopped", is_flag=True,
              help="Also read the error log that a stopped driver left in DIR (post-mortem).")
@run_until_interrupted
def errors(dir_, as_json, allow_stopped):
    """The errors the driver recorded: each distinct error once, with how many
    times it happened and when first and last."""
    dir = resolve_dir(dir_)
    driver = open_driver(dir, need_live=not allow_stopped)
    try:
        log = _native.read_errors(dir)
    except _native.SulisError as failure:
        raise click.ClickException(str(failure)) from None
    entries: list[dict[str, Any]] = [{"count": count, "first_ms": first, "last_ms": last, "first": timestamp(first),
                "last": timestamp(last), "text": text} for count, first, last, text in log]
    if as_json:
        print_json({**driver.header(), "distinct_errors": len(entries),
                    "observations": sum(e["count"] for e in entries), "errors": entries})
        return
    click.echo(driver_line(driver))
    for e in entries:
        click.echo(f"\n{e['count']:,} observation{'s' if e['count'] != 1 else ''} from {e['first']} to {e['last']}:")
        for line in e["text"].splitlines() or [""]:
            click.echo(f"    {line}")
    click.echo(f"\n{len(entries)} distinct error{'s' if len(entries) != 1 else ''} observed.")
