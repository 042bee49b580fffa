"""``sulis archive`` (run an archive; ``sulis archive record`` asks a running one to record a stream) and
``sulis archive-tool`` (inspect an archive directory)."""

from __future__ import annotations

import json
import time

import click

from .. import _native
from ._common import cli_error, echo_config, option_flags, stop_signals

_STATES = {int(s): s.name for s in _native.RecordingState}


@click.group(invoke_without_command=True)
@click.option("--archive-dir", envvar="SULIS_ARCHIVE_DIR", show_envvar=True,
              help="Directory of the catalog and segment files (required to run one).")
@click.option("--dir", "dir_", default=None, envvar="SULIS_DIR", show_envvar=True,
              help="The media driver's directory [default /dev/shm/sulis-$USER].")
@click.option("--embedded-driver", is_flag=True, help="Run a media driver in this process too (in --dir).")
@click.option("--print-config", is_flag=True,
              help="Print every effective setting and where it came from, then exit.")
@option_flags(_native.archive_config, own=("archive_dir", "driver_dir"))
@click.pass_context
def archive(ctx: click.Context, archive_dir: str | None, dir_: str | None, embedded_driver: bool, print_config: bool,
            **options) -> None:
    """Run an archive until interrupted (Ctrl-C / SIGTERM): it records streams
    into ARCHIVE_DIR and replays them, for sulis and Aeron archive clients.
    `sulis archive record CHANNEL STREAM` asks a running one to record a
    stream (what format("sulis") reads is recordings)."""
    if ctx.invoked_subcommand is not None:
        return
    if not archive_dir:
        raise click.UsageError("Missing option '--archive-dir' (or SULIS_ARCHIVE_DIR): where the archive keeps "
                               "its catalog and segment files.")
    driver_dir = dir_ or _native.default_dir()
    options = {k: v for k, v in options.items() if v is not None}
    if print_config:
        echo_config(_native.archive_config, archive_dir, driver_dir, **options)
        return
    from .. import Archive, MediaDriver

    with stop_signals() as stopping:
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


@archive.command("record")
@click.argument("channel")
@click.argument("stream_id", type=int)
@click.option("--dir", "dir_", default=None, envvar="SULIS_DIR", show_envvar=True,
              help="The media driver's directory [default /dev/shm/sulis-$USER].")
@click.option("--control-channel", default=None,
              help="The archive's control channel [default: the local one of an archive on this driver].")
@click.option("--control-stream-id", type=int, default=None, help="Its stream.")
@click.option("--source", type=click.Choice(["local", "remote"]), default="local", show_default=True,
              help="local: the publication is on this driver (IPC, or UDP spied); remote: it comes over UDP.")
@click.option("--auto-stop", is_flag=True, help="Stop recording once the stream's publications end.")
@click.option("--stop", is_flag=True, help="Stop recording CHANNEL STREAM instead.")
@click.option("--timeout", type=float, default=10.0, show_default=True,
              help="Seconds to wait for the archive's answer.")
def record(channel: str, stream_id: int, dir_: str | None, control_channel: str | None,
           control_stream_id: int | None, source: str, auto_stop: bool, stop: bool, timeout: float) -> None:
    """Ask the archive on this driver (or at --control-channel) to record
    CHANNEL STREAM_ID from now on: every publication on it becomes a
    recording, which format("sulis") then reads. Prints the recording
    subscription's id. With --stop, stops recording it."""
    from .. import ArchiveClient, Client

    control = {k: v for k, v in (("control_request_channel", control_channel),
                                 ("control_request_stream_id", control_stream_id)) if v is not None}
    try:
        with Client(dir=dir_ or _native.default_dir()) as client, \
                ArchiveClient(client, message_timeout=timeout, **control) as ac:
            if stop:
                ac.stop_recording(channel, stream_id)
                click.echo(f"stopped recording {channel} stream {stream_id}")
            else:
                sub = ac.start_recording(channel, stream_id, source=source, auto_stop=auto_stop)
                click.echo(f"recording {channel} stream {stream_id} (recording subscription {sub}); "
                           f"`sulis archive-tool ARCHIVE_DIR list` shows its recordings")
    except _native.SulisError as e:
        raise cli_error(e) from None


def _descriptor_dict(state: int, d) -> dict:
    return {"state": _STATES.get(state, str(state)), "recording_id": d.recording_id,
            "start_timestamp": d.start_timestamp, "stop_timestamp": d.stop_timestamp,
            "start_position": d.start_position, "stop_position": d.stop_position,
            "initial_term_id": d.initial_term_id, "segment_file_length": d.segment_file_length,
            "term_buffer_length": d.term_buffer_length, "mtu_length": d.mtu_length,
            "session_id": d.session_id, "stream_id": d.stream_id, "stripped_channel": d.stripped_channel,
            "original_channel": d.original_channel, "source_identity": d.source_identity}


_VERBS = ["describe", "list", "verify", "count-entries", "dump", "pid", "errors", "mark-valid", "mark-invalid",
          "compact", "delete-orphaned-segments", "checksum", "retention", "hold", "release", "segments"]


@click.command("archive-tool")
@click.argument("archive_dir", type=click.Path(file_okay=False))
@click.argument("verb", type=click.Choice(_VERBS))
@click.argument("recording_id", type=int, required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of text.")
@click.option("--frames", default=10, show_default=True, help="dump: frames shown per recording.")
@click.option("--checksum", "algorithm", default=None, metavar="crc32|crc32c",
              help="verify: check frame and catalog checksums too; checksum: the algorithm to write.")
@click.option("--all", "all_files", is_flag=True, help="checksum: every segment file, not only the last one.")
@click.option("--name", default=None, help="hold, release: the hold's name.")
@click.option("--position", type=int, default=None, help="hold: the lowest position kept (default: the start).")
@click.option("--policy-file", default=None, type=click.Path(dir_okay=False),
              help="retention: the policy file (default: ARCHIVE_DIR/retention.policy).")
@click.option("--hold-timeout", default="7d", show_default=True,
              help="retention: how long a hold lasts after it was written (the archive's retention_hold_timeout).")
def archive_tool(archive_dir: str, verb: str, recording_id: int | None, as_json: bool, frames: int,
                 algorithm: str | None, all_files: bool, name: str | None, position: int | None,
                 policy_file: str | None, hold_timeout: str) -> None:
    """Inspect or repair an archive directory (sulis's or Aeron's), no archive needed.

    \b
    describe [ID]             every catalog entry, whatever its state (or one)
    list                      the valid recordings
    verify [--checksum C]     read every valid recording's frames up to its stop position
                              (and check their checksums and the catalog's)
    count-entries             how many entries the catalog holds
    dump [ID]                 entries with their first --frames frames
    pid                       the process id in the archive's mark file
    errors                    the archive's error log (in its mark file)
    mark-valid ID             make a recording VALID again
    mark-invalid ID           hide a recording (compact then removes it)
    compact                   drop INVALID and DELETED entries and their segment files
    delete-orphaned-segments  delete segment files no recording owns
    checksum [ID] --checksum C [--all]
                              write checksums into the last (--all: every) segment file's
                              frames and the catalog entries, as an archive with that
                              record checksum would have
    retention [--policy-file F]
                              the retention rules, the holds, and what goes next of each
                              recording (a running archive's replays hold more)
    hold ID --name N [--position P]
                              keep recording ID from P's segment on from retention (while
                              the hold is younger than the archive's retention_hold_timeout;
                              run it again to renew or move it)
    release --name N          remove the hold N
    segments [ID]             where each segment file is: on the disk, in the object store
                              (tiered.log: its key), or both while an upload finishes

    The verbs that change files refuse while an archive runs in the directory.
    """
    try:
        if verb in ("retention", "hold", "release"):
            _retention(archive_dir, verb, recording_id, as_json, name, position, policy_file, hold_timeout)
        else:
            _tool(archive_dir, verb, recording_id, as_json, frames, algorithm, all_files)
    except _native.SulisError as e:
        raise cli_error(e) from None


def _retention(archive_dir: str, verb: str, recording_id: int | None, as_json: bool, name: str | None,
               position: int | None, policy_file: str | None, hold_timeout: str) -> None:
    if verb == "retention":
        rules, holds, rows = _native.archive_retention(archive_dir, policy_file, hold_timeout)
        if recording_id is not None:
            rows = [r for r in rows if r[0] == recording_id]
        if as_json:
            click.echo(json.dumps({"rules": rules, "holds": holds, "recordings": [
                {"recording_id": r, "stream_id": s, "channel": c, "start_position": a, "stop_position": b,
                 "rule": rule, "held_from": held, "next": nxt, "segments_in_store": n, "bytes_in_store": nb}
                for r, s, c, a, b, rule, held, nxt, n, nb in rows]}))
            return
        for line in rules + holds:
            click.echo(line)
        for r, s, c, a, b, rule, held, nxt, n, nb in rows:
            kept = f", held from {held}" if held is not None else ""
            stored = f", {n} segments ({nb} bytes) in the object store" if n else ""
            by = f" (rule {rule})" if rule and nxt == "nothing yet" else ""
            click.echo(f"recording {r}: stream {s} {a}..{b} {c}{kept}{stored}: {nxt}{by}")
        return
    if not name:
        raise click.UsageError(f"{verb} needs --name")
    if verb == "release":
        released = _native.archive_release_hold(archive_dir, name)
        _out(as_json, {"name": name, "released": released},
             f"hold '{name}' released" if released else f"no hold '{name}'")
        return
    if recording_id is None:
        raise click.UsageError("hold needs a recording id")
    if position is None:
        listed = [d for s, d in _native.archive_describe(archive_dir)[0] if d.recording_id == recording_id]
        if not listed:
            raise click.ClickException(f"no recording {recording_id} in the catalog")
        position = listed[0].start_position
    path = _native.archive_hold(archive_dir, name, [(recording_id, position)])
    _out(as_json, {"name": name, "recording_id": recording_id, "position": position, "path": path},
         f"hold '{name}': recording {recording_id} kept from position {position} ({path})")


def _out(as_json: bool, doc: object, text: str) -> None:
    click.echo(json.dumps(doc) if as_json else text)


def _tool(archive_dir: str, verb: str, recording_id: int | None, as_json: bool, frames: int,
          algorithm: str | None, all_files: bool) -> None:
    if algorithm is not None and verb not in ("verify", "checksum"):
        raise click.UsageError(f"{verb} takes no --checksum")
    if verb == "checksum":
        if algorithm is None:
            raise click.UsageError("checksum needs --checksum crc32 or crc32c")
        stamped = _native.archive_checksum(archive_dir, algorithm, recording_id, all_files)
        _out(as_json, [{"recording_id": r, "files": f, "frames": n} for r, f, n in stamped],
             "\n".join(f"recording {r}: {n} frames in {f} segment files" for r, f, n in stamped)
             or "no valid recordings")
        return
    if verb in ("mark-valid", "mark-invalid"):
        if recording_id is None:
            raise click.UsageError(f"{verb} needs a recording id")
        _native.archive_mark(archive_dir, recording_id, verb == "mark-valid")
        state = "VALID" if verb == "mark-valid" else "INVALID"
        _out(as_json, {"recording_id": recording_id, "state": state}, f"recording {recording_id}: {state}")
        return
    if verb == "segments":
        rows = _native.archive_segments(archive_dir, recording_id)
        _out(as_json, [{"recording_id": r, "base": b, "location": where, "length": n, "key": key}
                       for r, b, where, n, key in rows],
             "\n".join(f"recording {r} segment at {b}: {where}, {n} bytes" + (f", key {key}" if key else "")
                       for r, b, where, n, key in rows) or "no segments")
        return
    if recording_id is not None and verb not in ("describe", "dump"):
        raise click.UsageError(f"{verb} takes no recording id")
    if verb == "compact":
        removed, files = _native.archive_compact(archive_dir)
        _out(as_json, {"entries_removed": removed, "files_deleted": files},
             f"{removed} entries removed, {len(files)} segment files deleted")
        return
    if verb == "delete-orphaned-segments":
        files = _native.archive_delete_orphaned_segments(archive_dir)
        _out(as_json, {"files_deleted": files}, "\n".join(f"deleted {f}" for f in files) or "no orphaned segments")
        return
    if verb in ("pid", "errors"):
        mark = _native.archive_mark_file(archive_dir)
        if mark is None:
            raise click.ClickException(f"{archive_dir} holds no archive-mark.dat")
        pid, activity, archive_id, control, local_control, driver_dir, errors = mark
        if verb == "pid":
            _out(as_json, {"pid": pid, "archive_id": archive_id, "activity_timestamp_ms": activity,
                           "control_channel": control, "local_control_channel": local_control,
                           "aeron_directory": driver_dir}, str(pid))
        else:
            _out(as_json, [{"count": n, "first_ms": first, "last_ms": last, "text": text}
                           for n, first, last, text in errors],
                 "\n".join(f"{n} observations from {first} to {last}: {text}" for n, first, last, text in errors)
                 or "no errors")
        return
    if verb == "verify":
        verdicts = _native.archive_verify(archive_dir, algorithm)
        if as_json:
            click.echo(json.dumps([{"recording_id": r, "ok": ok, "message": m} for r, ok, m in verdicts]))
        else:
            for r, ok, m in verdicts:
                click.echo(f"recording {r}: {'OK' if ok else 'FAILED'}: {m}" if r >= 0 else f"catalog: {m}")
        if not all(ok for _, ok, _ in verdicts):
            raise SystemExit(1)
        return
    if verb == "dump":
        dumped = [x for x in _native.archive_dump(archive_dir, frames)
                  if recording_id is None or x[1].recording_id == recording_id]
        if recording_id is not None and not dumped:
            raise click.ClickException(f"no recording {recording_id} in the catalog")
        if as_json:
            click.echo(json.dumps([{**_descriptor_dict(s, d), "error": err, "frames": [
                {"position": p, "frame_length": n, "type": t, "flags": f, "session_id": sid, "stream_id": st,
                 "reserved_value": rv, "payload_head": head.hex()} for p, n, t, f, sid, st, rv, head in fs]}
                for s, d, fs, err in dumped]))
            return
        for s, d, fs, err in dumped:
            click.echo(f"{_STATES.get(s, s)} recording {d.recording_id}: stream {d.stream_id} session "
                       f"{d.session_id} {d.start_position}..{d.stop_position} {d.original_channel}")
            for p, n, t, f, sid, st, rv, head in fs:
                kind = {1: "DATA", 0: "PAD"}.get(t, f"type {t}")
                click.echo(f"  {p:>12}  {kind:<4} length {n:<6} flags {f:#04x} session {sid} stream {st} "
                           f"reserved {rv}  {head.hex()}")
            if err:
                click.echo(f"  error: {err}")
        return
    entries, problems = _native.archive_describe(archive_dir)
    if verb == "list":
        entries = [(s, d) for s, d in entries if s == 1]
    if recording_id is not None:
        entries = [(s, d) for s, d in entries if d.recording_id == recording_id]
        if not entries:
            raise click.ClickException(f"no recording {recording_id} in the catalog")
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
    for problem in problems:
        click.echo(f"problem: {problem}")
