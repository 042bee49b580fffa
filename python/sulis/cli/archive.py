"""``sulis archive`` (run an archive) and ``sulis archive-tool`` (inspect an archive directory)."""

from __future__ import annotations

import json
import signal
import time

import click

from .. import _native
from ._common import cli_error

_STATES = {0: "INVALID", 1: "VALID", 2: "DELETED"}


@click.command()
@click.option("--archive-dir", required=True, envvar="SULIS_ARCHIVE_DIR", show_envvar=True,
              help="Directory of the catalog and segment files.")
@click.option("--dir", "dir_", default=None, envvar="SULIS_DIR", show_envvar=True,
              help="The media driver's directory [default /dev/shm/sulis-$USER].")
@click.option("--embedded-driver", is_flag=True, help="Run a media driver in this process too (in --dir).")
@click.option("--control-channel", default=None, envvar="SULIS_ARCHIVE_CONTROL_CHANNEL", show_envvar=True,
              help="UDP channel remote clients send requests to (off unless given).")
@click.option("--control-stream-id", default=10, show_default=True, envvar="SULIS_ARCHIVE_CONTROL_STREAM_ID")
@click.option("--local-control-channel", default="aeron:ipc", show_default=True,
              envvar="SULIS_ARCHIVE_LOCAL_CONTROL_CHANNEL")
@click.option("--local-control-stream-id", default=10, show_default=True,
              envvar="SULIS_ARCHIVE_LOCAL_CONTROL_STREAM_ID")
@click.option("--archive-id", type=int, default=None, envvar="SULIS_ARCHIVE_ID",
              help="The archive's id [default: its client id].")
@click.option("--segment-file-length", default=128 * 1024 * 1024, show_default=True,
              envvar="SULIS_ARCHIVE_SEGMENT_FILE_LENGTH", help="Bytes per segment file (a power of two).")
@click.option("--file-sync-level", type=click.IntRange(0, 2), default=0, show_default=True,
              envvar="SULIS_ARCHIVE_FILE_SYNC_LEVEL",
              help="0: writes left to the OS; 1: each write's data synced; 2: data and metadata.")
@click.option("--catalog-file-sync-level", type=click.IntRange(0, 2), default=0, show_default=True,
              envvar="SULIS_ARCHIVE_CATALOG_FILE_SYNC_LEVEL")
@click.option("--print-config", is_flag=True, help="Print the settings, then exit.")
def archive(archive_dir: str, dir_: str | None, embedded_driver: bool, print_config: bool, **options) -> None:
    """Run an archive until interrupted (Ctrl-C / SIGTERM): it records streams
    into ARCHIVE_DIR and replays them, for sulis and Aeron archive clients."""
    driver_dir = dir_ or _native.default_dir()
    if print_config:
        click.echo(f"{'archive_dir':<24}  {archive_dir}")
        click.echo(f"{'driver_dir':<24}  {driver_dir}")
        for name, value in options.items():
            click.echo(f"{name:<24}  {value}")
        return
    stopping: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))
    from .. import Archive, MediaDriver

    driver = None
    try:
        if embedded_driver:
            driver = MediaDriver(dir=driver_dir)
            driver_dir = driver.dir
        arc = Archive(archive_dir, driver_dir=driver_dir, **options)
    except _native.SulisError as e:
        if driver is not None:
            driver.close()
        raise cli_error(e) from None
    click.echo(f"sulis archive {arc.archive_id} running in {arc.dir} on the driver in {driver_dir} "
               "(Ctrl-C to stop)", err=True)
    while not stopping:
        time.sleep(0.1)
    arc.close()
    if driver is not None:
        driver.close()
    click.echo("sulis archive stopped", err=True)


def _descriptor_dict(state: int, d) -> dict:
    return {"state": _STATES.get(state, str(state)), "recording_id": d.recording_id,
            "start_timestamp": d.start_timestamp, "stop_timestamp": d.stop_timestamp,
            "start_position": d.start_position, "stop_position": d.stop_position,
            "initial_term_id": d.initial_term_id, "segment_file_length": d.segment_file_length,
            "term_buffer_length": d.term_buffer_length, "mtu_length": d.mtu_length,
            "session_id": d.session_id, "stream_id": d.stream_id, "stripped_channel": d.stripped_channel,
            "original_channel": d.original_channel, "source_identity": d.source_identity}


@click.command("archive-tool")
@click.argument("archive_dir", type=click.Path(file_okay=False))
@click.argument("verb", type=click.Choice(["describe", "list", "verify", "count-entries"]))
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of text.")
def archive_tool(archive_dir: str, verb: str, as_json: bool) -> None:
    """Inspect an archive directory (sulis's or Aeron's), no archive needed.

    \b
    describe       every catalog entry, whatever its state
    list           the valid recordings
    verify         read every valid recording's frames up to its stop position
    count-entries  how many entries the catalog holds
    """
    try:
        if verb == "verify":
            verdicts = _native.archive_verify(archive_dir)
            if as_json:
                click.echo(json.dumps([{"recording_id": r, "ok": ok, "message": m} for r, ok, m in verdicts]))
            else:
                for r, ok, m in verdicts:
                    click.echo(f"recording {r}: {'OK' if ok else 'FAILED'}: {m}" if r >= 0 else f"catalog: {m}")
            if not all(ok for _, ok, _ in verdicts):
                raise SystemExit(1)
            return
        entries, problems = _native.archive_describe(archive_dir)
    except _native.SulisError as e:
        raise cli_error(e) from None
    if verb == "list":
        entries = [(s, d) for s, d in entries if s == 1]
    if verb == "count-entries":
        click.echo(json.dumps({"entries": len(entries), "problems": problems}) if as_json else len(entries))
        return
    if as_json:
        click.echo(json.dumps({"recordings": [_descriptor_dict(s, d) for s, d in entries], "problems": problems}))
        return
    for s, d in entries:
        state = "" if verb == "list" else f"{_STATES.get(s, s)} "
        click.echo(f"{state}recording {d.recording_id}: stream {d.stream_id} session {d.session_id} "
                   f"{d.start_position}..{d.stop_position} {d.original_channel} (from {d.source_identity})")
    for p in problems:
        click.echo(f"problem: {p}")
