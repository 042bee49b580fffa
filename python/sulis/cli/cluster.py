"""``sulis cluster-node``: a cluster member as a process of its own (media driver, archive, consensus module and
service container), its service a Python class named ``module:Class``."""

from __future__ import annotations

import fcntl
import importlib
import os
import sys
import time

import click

from .. import _native
from ._common import cli_error, echo_config, option_flags, stop_signals, timestamp


def _load_service(spec: str):
    """``module:Class`` (the module importable from the working directory or ``sys.path``): an instance."""
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise click.BadParameter(f"{spec!r}: name the service as module:Class", param_hint="--service")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as e:
        raise click.BadParameter(f"{spec!r}: {e}", param_hint="--service") from None
    return cls()


def _reclaim_own_driver(cluster_dir: str, driver_dir: str) -> bool:
    """True when the driver directory holds what the embedded driver of the node that last ran on
    ``cluster_dir`` left, and that node is dead (the kernel freed its lock on the directory): the new
    node may then start its driver over it at once, instead of waiting out the dead driver's heartbeat
    timeout. Anything else (a node running there, another process's driver) is left alone."""
    lock = os.path.join(cluster_dir, "consensus-module.lck")
    if not (os.path.exists(lock) and os.path.exists(os.path.join(driver_dir, _native.CNC_FILE))):
        return False
    with open(lock) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            text = f.read().strip()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
    try:
        return text.isdigit() and _native.CountersReader(driver_dir).pid == int(text)
    except _native.SulisError:
        return False


def _start_error(e: _native.SulisError, failed: str, cluster_dir: str, archive_dir: str, archive_dir_given: bool,
                 dir_given: bool, member_id: str) -> click.ClickException:
    """The error of a member that could not start. A media driver or an archive already running in the member's
    directory is, on a host of several members, most often another member's: the error then says which flag gives
    each member a directory of its own (the driver's and the archive's own text says only that the directory is
    taken)."""
    error = cli_error(e)
    parent = os.path.dirname(os.path.abspath(cluster_dir))
    if failed == "driver" and isinstance(e, _native.ActiveDriverError):
        default = "" if dir_given else (f" (neither --dir nor $SULIS_DIR was given, so it is {_native.default_dir()}, "
                                        "which every member started without them shares)")
        return click.ClickException(
            f"{error.message}. Each member runs a media driver of its own in its own directory{default}: if another "
            f"member runs there, give this one another --dir (e.g. --dir {_native.default_dir()}-member-{member_id})")
    if failed == "archive" and "an archive is running in" in str(e):
        default = "" if archive_dir_given else (
            f" (--archive-dir was not given, so it is CLUSTER_DIR/../archive, {archive_dir}, which every member "
            f"whose --cluster-dir is in {parent} shares)")
        return click.ClickException(
            f"{error.message}. Each member needs an archive directory of its own{default}: if another member runs "
            f"there, give this one another --archive-dir (e.g. --archive-dir "
            f"{os.path.join(parent, f'archive-{member_id}')})")
    return error


def _process_age() -> float:
    """Seconds since this process was started (interpreter start and imports included), from /proc; 0 where
    there is none."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def _own_endpoints(rows) -> tuple[str, str] | None:
    """This member's archive endpoint and host from the effective ``cluster_members`` and ``member_id``
    (``rows`` of ``cluster_config``), or None for a one-member cluster."""
    values = {r[0]: r[1] for r in rows}
    members = [m for m in str(values.get("cluster_members", "")).split("|") if m.strip()]
    if len(members) < 2:
        return None
    me = str(values.get("member_id", "0"))
    for m in members:
        fields = [f.strip() for f in m.split(",")]
        if fields[0] == me and len(fields) >= 6:
            archive = fields[5]
            return archive, archive.rsplit(":", 1)[0]
    raise click.BadParameter(f"member {me} is not in --cluster-members", param_hint="--member-id")


@click.command("cluster-node")
@click.option("--service", "service_spec", required=True, metavar="MODULE:CLASS",
              help="The ClusteredService subclass to run (made with no arguments).")
@click.option("--cluster-dir", required=True, envvar="SULIS_CLUSTER_DIR", show_envvar=True,
              help="The member's directory (recording.log and its lock).")
@click.option("--archive-dir", default=None, help="The archive's directory [default: CLUSTER_DIR/../archive].")
@click.option("--dir", "dir_", default=None, envvar="SULIS_DIR", show_envvar=True,
              help="The media driver's directory [default /dev/shm/sulis-$USER].")
@click.option("--print-config", is_flag=True,
              help="Print every effective setting of the consensus module and where it came from, then exit.")
@option_flags(_native.cluster_config, own=("cluster_dir", "driver_dir"))
def cluster_node(service_spec: str, cluster_dir: str, archive_dir: str | None, dir_: str | None,
                 print_config: bool, **options) -> None:
    """Run a cluster member until interrupted (Ctrl-C / SIGTERM): a media driver in --dir, an archive in
    --archive-dir, and the consensus module and service container, the service made from MODULE:CLASS.
    In a cluster of several members the archive's control channel is this member's archive endpoint (the
    others' archives copy and replay the log from it), and terms copied from the leader arrive on this
    member's archive host unless --replication-channel says otherwise."""
    driver_dir = dir_ or _native.default_dir()
    options = {k: v for k, v in options.items() if v is not None}
    try:
        rows = _native.cluster_config(cluster_dir, driver_dir, **options)
    except _native.SulisError as e:
        raise cli_error(e) from None
    own = _own_endpoints(rows)
    if print_config:
        # What the node will use, not the table's default: a member of several takes copies of the log on
        # its archive's host.
        derived = {} if own is None else {"replication_channel": (f"aeron:udp?endpoint={own[1]}:0",
                                                                  "derived: this member's archive host")}
        echo_config(_native.cluster_config, cluster_dir, driver_dir, derived=derived, **options)
        return
    archive_options: dict = {}
    # Durable commits: the member's archive syncs the log's recording at the module's level (the module checks),
    # or at its own if that is higher (SULIS_ARCHIVE_FILE_SYNC_LEVEL is never lowered).
    sync_level = int(next((r[1] for r in rows if r[0] == "file_sync_level"), 0) or 0)
    own_level = os.environ.get("SULIS_ARCHIVE_FILE_SYNC_LEVEL", "").strip()
    if sync_level > 0 and not (own_level.isdigit() and int(own_level) >= sync_level):
        archive_options["file_sync_level"] = sync_level
    if own is not None:
        archive_endpoint, host = own
        archive_options["control_channel"] = f"aeron:udp?endpoint={archive_endpoint}"
        if any(r[0] == "replication_channel" and r[2] == "default" for r in rows):
            options["replication_channel"] = f"aeron:udp?endpoint={host}:0"
    service = _load_service(service_spec)
    from .. import Archive, MediaDriver
    from ..cluster import ClusterNode

    archive_dir_given = archive_dir is not None
    archive_dir = archive_dir or os.path.join(os.path.dirname(os.path.abspath(cluster_dir)), "archive")
    member_id = str(next((r[1] for r in rows if r[0] == "member_id"), "0"))
    service_count = int(next((r[1] for r in rows if r[0] == "service_count"), 1) or 1)
    # Before the archive starts (its first retention check comes at once): what a restart needs is held.
    hold = _ClusterHold(cluster_dir, archive_dir, member_id, service_count)
    hold.renew()
    with stop_signals() as stopping:
        started: list = []
        # How long each part took to start, said on the "running" line: a start that stalls under load
        # (a fault run's restarted member) then says where its time went.
        took: list[str] = [f"process up {_process_age():.2f} s before the driver"]
        began = time.monotonic()

        def timed(what: str, thing):
            nonlocal began
            started.append(thing)
            now = time.monotonic()
            took.append(f"{what} {now - began:.2f} s")
            began = now

        try:
            reclaim = _reclaim_own_driver(cluster_dir, driver_dir)
            timed("driver", MediaDriver(dir=driver_dir, threading_mode="shared", dir_delete_on_start=reclaim))
            timed("archive", Archive(archive_dir, driver_dir=driver_dir, **archive_options))
            node = ClusterNode(service, cluster_dir, driver_dir, **options)
            timed("module and service", node)
        except _native.SulisError as e:
            for thing in reversed(started):
                thing.close()
            failed = ("driver", "archive", "module and service")[len(started)]
            raise _start_error(e, failed, cluster_dir, archive_dir, archive_dir_given, dir_ is not None,
                               member_id) from None
        click.echo(f"sulis cluster-node {service_spec} running in {cluster_dir} (archive {archive_dir}, driver "
                   f"{driver_dir}; Ctrl-C to stop; started in {time.process_time():.2f} s of CPU: {', '.join(took)})",
                   err=True)
        while not stopping and node.error is None and node.is_running:  # cluster-tool shutdown/abort end it
            hold.renew()
            time.sleep(0.1)
        error = node.error
        for thing in reversed(started):
            thing.close()
    if error is not None:
        raise click.ClickException(error)
    click.echo("sulis cluster-node stopped", err=True)


class _ClusterHold:
    """The member's hold on its archive's retention (docs/retention.md, holds): the recordings of the latest
    snapshot set whole, and the log from that snapshot's position on (all of it before a first snapshot), so
    that a retention policy never removes what a restart replays. Written again within a second of a change of
    the recording log (a snapshot, a new term), and every ten minutes besides, well within the archive's
    ``retention_hold_timeout``; it stays when the member stops (its restart needs the same)."""

    RENEW_S = 600.0

    def __init__(self, cluster_dir: str, archive_dir: str, member_id: str, service_count: int):
        self.cluster_dir, self.archive_dir = cluster_dir, archive_dir
        self.name, self.service_count = f"cluster-member-{member_id}", service_count
        self.seen: tuple | None = None
        self.written = 0.0
        self.looked = 0.0
        self.failed: str | None = None

    def held(self) -> list[tuple[int, int]]:
        plan = _native.recovery_plan(self.cluster_dir, self.service_count)
        snapshots = plan["snapshots"]
        since = snapshots[0]["log_position"] if snapshots else 0
        held = {s["recording_id"]: 0 for s in snapshots}
        for e in _native.read_recording_log(self.cluster_dir)[0]:
            if e["valid"] and e["type"] == "TERM" and e["recording_id"] >= 0:
                position = max(e["term_base_log_position"], since)
                held[e["recording_id"]] = min(held.get(e["recording_id"], position), position)
        return sorted(held.items())

    def renew(self) -> None:
        now = time.monotonic()
        if now - self.looked < 1.0:
            return
        self.looked = now
        log = os.path.join(self.cluster_dir, "recording.log")
        try:
            st = os.stat(log)
        except FileNotFoundError:
            return  # a first start: nothing recorded yet
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self.seen and now - self.written < self.RENEW_S:
            return
        try:
            _native.archive_hold(self.archive_dir, self.name, self.held())
            self.seen, self.written, self.failed = stamp, now, None
        except (_native.SulisError, OSError) as e:
            if str(e) != self.failed:  # said once, tried again at the next look
                click.echo(f"sulis cluster-node: cannot write the retention hold {self.name}: {e}", err=True)
                self.failed = str(e)


_ROLES = {0: "FOLLOWER", 1: "CANDIDATE", 2: "LEADER"}
_STATES = {0: "INIT", 1: "ACTIVE", 2: "SUSPENDED", 3: "SNAPSHOT", 4: "QUITTING", 5: "TERMINATING", 6: "CLOSED"}
# A mark file's version, read: has its component started?
_STARTED = {"yes": "started", "failed": "FAILED TO START", "starting": "starting"}
# The control toggle's values (Aeron's ClusterControl.ToggleState).
_TOGGLE = {"suspend": 2, "resume": 3, "snapshot": 4, "shutdown": 5, "abort": 6, "purge-log": 100}  # 100: sulis's
_VERBS = ("pid", "describe", "recording-log", "recovery-plan", "errors", "list-members", "is-leader", "snapshot",
          "suspend", "resume", "invalidate-latest-snapshot", "purge-log", "shutdown", "abort")


def _running_pid(cluster_dir: str) -> int | None:
    """The pid of the consensus module holding ``cluster_dir``'s lock, or None when none holds it."""
    lock = os.path.join(cluster_dir, "consensus-module.lck")
    if not os.path.exists(lock):
        return None
    with open(lock) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = f.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(f, fcntl.LOCK_UN)
    return None


def _call(fn, *args):
    """``fn(*args)``; a sulis error becomes the CLI's error message (exit status 1)."""
    try:
        return fn(*args)
    except _native.SulisError as e:
        raise cli_error(e) from None


def _member_counters(driver_dir: str) -> dict[int, int]:
    """The cluster member's counters on the driver in ``driver_dir``: type id -> value (200 to 205)."""
    try:
        rows = _native.CountersReader(driver_dir).counters()
    except _native.SulisError as e:
        raise cli_error(e) from None
    return {c["type_id"]: c["value"] for c in rows if 200 <= c["type_id"] <= 205}


def _describe(cluster_dir: str, driver_dir: str, marks: list | None = None) -> dict:
    pid = _running_pid(cluster_dir)
    out: dict = {"cluster_dir": cluster_dir, "pid": pid, "running": pid is not None}
    for m in marks or ():
        if "unreadable" not in m:
            out[m["component"].replace(" ", "_")] = (f"member {m['member_id']}, {_STARTED.get(m['started'])}, "
                                                     f"{len(m['errors'])} distinct error(s)")
    if pid is not None:
        c = _member_counters(driver_dir)
        out.update(driver_dir=driver_dir, state=_STATES.get(c.get(200, -1), c.get(200)),
                   role=_ROLES.get(c.get(201, -1), c.get(201)), commit_position=c.get(203),
                   snapshot_count=c.get(205), control_toggle=c.get(202))
    return out


def _errors(cluster_dir: str, marks: list, driver_dir: str, as_json: bool) -> None:
    """Prints each mark file's error log, then the driver's (Aeron's ClusterTool ``errors``)."""
    import json

    if not marks:
        raise click.ClickException(f"no mark file in {cluster_dir}: no cluster member ever ran there")
    try:
        driver, driver_error = _native.read_errors(driver_dir), None
    except _native.SulisError as failure:
        driver, driver_error = [], str(failure)

    def echo_log(entries) -> None:
        for count, first, last, text in entries:
            click.echo(f"  {count} observation(s) from {timestamp(first)} to {timestamp(last)}:")
            for line in text.splitlines() or [""]:
                click.echo(f"      {line}")

    if as_json:
        click.echo(json.dumps({"components": marks, "driver_dir": driver_dir, "driver_unreadable": driver_error,
                               "driver_errors": [{"count": c, "first_ms": f, "last_ms": la, "text": t}
                                                 for c, f, la, t in driver]}))
        return
    for m in marks:
        if "unreadable" in m:
            click.echo(f"{m['file']}: unreadable: {m['unreadable']}\n")
            continue
        started = _STARTED.get(m["started"], m["started"])
        click.echo(f"{m['component']} (member {m['member_id']}, pid {m['pid']}, {started}, started "
                   f"{timestamp(m['start_timestamp'])}, last active {timestamp(m['activity_timestamp'])}): "
                   f"{len(m['errors'])} distinct error(s)")
        echo_log(m["errors"])
        click.echo()
    if driver_error is not None:
        click.echo(f"media driver {driver_dir}: its error log is unreadable: {driver_error}")
        return
    click.echo(f"media driver {driver_dir}: {len(driver)} distinct error(s)")
    echo_log(driver)


def _purge_cluster(cluster_dir: str, driver_dir: str, timeout: float) -> None:
    """``purge-log --cluster``: the toggle asks the leader for a PURGE_LOG action; a refusal or a failure here
    is in the module's error log, recorded after the request."""
    described = _describe(cluster_dir, driver_dir)
    if not described["running"]:
        raise click.ClickException(f"no consensus module is running on {cluster_dir}")
    if described["role"] != "LEADER":
        raise click.ClickException(f"purge-log --cluster: the member is {described['role']}; ask the leader")
    asked_ms = int(time.time() * 1000)
    _call(_native.set_cluster_toggle, driver_dir, _TOGGLE["purge-log"])
    deadline = time.monotonic() + timeout
    while _member_counters(driver_dir).get(202) != 1:  # back to NEUTRAL: acted on
        if time.monotonic() > deadline:
            raise click.ClickException(f"purge-log --cluster: not acted on within {timeout} s")
        time.sleep(0.01)
    marks = _native.cluster_mark_files(cluster_dir)
    news = [text for m in marks[:1] for _, _, last, text in m.get("errors", []) if last >= asked_ms
            and text.startswith("cluster log purge")]
    if news:
        raise click.ClickException(news[-1])
    click.echo("a PURGE_LOG action is in the log: every member deletes its log's segments before its own latest "
               "snapshot (a member's failure to is in its `cluster-tool errors`)")


@click.command("cluster-tool")
@click.argument("cluster_dir", type=click.Path(file_okay=False))
@click.argument("verb", type=click.Choice(_VERBS))
@click.option("--dir", "dir_", default=None, envvar="SULIS_DIR", show_envvar=True,
              help="The member's media driver directory [default /dev/shm/sulis-$USER].")
@click.option("--service-count", default=1, show_default=True, help="Services on the member (recovery-plan).")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for snapshot/suspend/resume.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--cluster", "whole_cluster", is_flag=True,
              help="purge-log on the leader: every member purges its own log (refused, naming the member, "
                   "unless every member's log is past the leader's latest snapshot).")
def cluster_tool(cluster_dir: str, verb: str, dir_: str | None, service_count: int, timeout: float,
                 as_json: bool, whole_cluster: bool) -> None:
    """Look at or act on the cluster member whose directory is CLUSTER_DIR (Aeron's ClusterTool).

    \b
    pid            the consensus module's process id (exit 1 if none runs there)
    describe       whether it runs, its state, role, commit position and snapshot count
    recording-log  the recording log's entries (terms and snapshots), read without changing it
    recovery-plan  the snapshot set and last term a restart would start from
    errors         the error logs of the module and its services (their mark files, kept after
                   they stop) and of the member's media driver
    list-members   the members, the leader and each member's log position, as the module sees them
    is-leader      exit 0 if the member leads, 1 if not
    snapshot       take a snapshot and wait until it is recorded
    suspend        stop sequencing (clients' messages wait) until resume
    resume         sequence again
    invalidate-latest-snapshot
                   (member stopped) start next from the snapshot before the latest, or the log's start
    purge-log      delete the log's segment files wholly before the latest snapshot (with --cluster, on
                   the leader: every member its own, at one position of the log)
    shutdown       snapshot, then stop the member (a restart replays nothing)
    abort          stop the member without a snapshot
    """
    import json

    # The driver the member's own mark file names, unless --dir says otherwise.
    marks = _native.cluster_mark_files(cluster_dir) if os.path.isdir(cluster_dir) else []
    driver_dir = dir_ or next((m["aeron_directory"] for m in marks if m.get("aeron_directory")),
                              _native.default_dir())
    if verb == "errors":
        _errors(cluster_dir, marks, driver_dir, as_json)
        return
    if verb == "list-members":
        # A sulis member's lock says at once whether its module runs (an Aeron member's directory has none).
        if os.path.exists(os.path.join(cluster_dir, "consensus-module.lck")) and _running_pid(cluster_dir) is None:
            raise click.ClickException(f"no consensus module is running on {cluster_dir}")
        answer = _call(_native.query_cluster_members, cluster_dir, timeout)
        if as_json:
            click.echo(json.dumps(answer))
            return
        leader = answer["leader_member_id"]
        click.echo(f"member {answer['member_id']} answered: leader "
                   f"{'none (an election runs)' if leader < 0 else leader}")
        me = answer["member_id"]
        for m in answer["active_members"]:
            heard = m["log_position"] >= 0
            ago = (answer["current_time_ns"] - m["time_of_last_append_ns"]) / 1e6
            if not heard:
                # A leader hears its followers' appends, a follower only its leader's commits.
                known = ("not heard from yet" if me == leader else
                         "not tracked by a follower (ask the leader)")
            elif m["member_id"] == leader and me != leader:
                known = f"term {m['leadership_term_id']} commit position {m['log_position']}, heard {ago:.0f} ms ago"
            else:
                known = (f"term {m['leadership_term_id']} log position {m['log_position']}"
                         f"{f', heard {ago:.0f} ms ago' if m['member_id'] != me else ''}")
            click.echo(f"  {m['member_id']}{' LEADER' if m['member_id'] == leader else ''}: {known} ({m['endpoints']})")
        return
    if verb == "recording-log":
        entries, torn = _call(_native.read_recording_log, cluster_dir)
        if as_json:
            click.echo(json.dumps({"entries": entries, "torn_tail_bytes": torn}))
            return
        for entry in entries:
            click.echo(f"{entry['index']:>4} {entry['type']:<9}{'' if entry['valid'] else ' INVALID'} "
                       f"recording={entry['recording_id']} term={entry['leadership_term_id']} "
                       f"base={entry['term_base_log_position']} position={entry['log_position']} "
                       f"timestamp={entry['timestamp']} service={entry['service_id']}")
        if torn:
            click.echo(f"(a torn last entry of {torn} bytes, dropped when the member next starts)")
        return
    if verb == "recovery-plan":
        plan = _call(_native.recovery_plan, cluster_dir, service_count)
        if as_json:
            click.echo(json.dumps(plan))
            return
        if plan["snapshots"]:
            cm = plan["snapshots"][0]
            click.echo(f"snapshot at log position {cm['log_position']} (term {cm['leadership_term_id']}): "
                       + ", ".join(f"{'module' if s['service_id'] < 0 else 'service ' + str(s['service_id'])} "
                                   f"recording {s['recording_id']}" for s in plan["snapshots"]))
        else:
            click.echo("no snapshot: the whole log is replayed")
        term = plan["last_term"]
        click.echo("no log yet" if term is None else
                   f"log: recording {term['recording_id']}, last term {term['leadership_term_id']} "
                   f"from {term['term_base_log_position']}")
        return
    if verb == "invalidate-latest-snapshot":
        gone = _call(_native.invalidate_latest_snapshot, cluster_dir, service_count)
        click.echo(json.dumps(gone) if as_json else
                   f"invalidated the snapshot at log position {gone[0]['log_position']} ({len(gone)} entries)")
        return
    if verb == "purge-log" and whole_cluster:
        _purge_cluster(cluster_dir, driver_dir, timeout)
        return
    if verb == "purge-log":
        purged = _call(_native.purge_cluster_log, cluster_dir, driver_dir, service_count)
        click.echo(json.dumps(purged) if as_json else
                   f"{purged['segments_deleted']} segment file(s) deleted: the log starts at "
                   f"{purged['start_position']} (snapshot at {purged['snapshot_position']})")
        return
    described = _describe(cluster_dir, driver_dir, marks if verb == "describe" else None)
    if verb == "pid":
        if described["pid"] is None:
            raise click.ClickException(f"no consensus module is running on {cluster_dir}")
        click.echo(described["pid"])
        return
    if verb == "describe":
        click.echo(json.dumps(described) if as_json else
                   "\n".join(f"{k}: {v}" for k, v in described.items()))
        return
    if not described["running"]:
        raise click.ClickException(f"no consensus module is running on {cluster_dir}")
    if verb == "is-leader":
        click.echo(described["role"])
        sys.exit(0 if described["role"] == "LEADER" else 1)
    if described["role"] != "LEADER":
        raise click.ClickException(f"{verb}: the member is {described['role']}; ask the leader")
    before = described["snapshot_count"]
    _call(_native.set_cluster_toggle, driver_dir, _TOGGLE[verb])
    deadline = time.monotonic() + timeout
    if verb in ("shutdown", "abort"):
        while _running_pid(cluster_dir) is not None:  # the module let go of its directory: it stopped
            if time.monotonic() > deadline:
                raise click.ClickException(f"{verb}: the member did not stop within {timeout} s (a snapshot "
                                           "that failed leaves it running: its stderr says why)")
            time.sleep(0.05)
        click.echo(f"the member stopped ({verb})")
        return
    while _member_counters(driver_dir).get(202) != 1:  # back to NEUTRAL: acted on
        if time.monotonic() > deadline:
            raise click.ClickException(f"{verb}: not acted on within {timeout} s")
        time.sleep(0.01)
    after = _describe(cluster_dir, driver_dir)
    if verb == "snapshot":
        if after["snapshot_count"] <= before:
            raise click.ClickException("the snapshot failed (the member's stderr says why); the previous one "
                                       "stays the one to recover from")
        click.echo(f"snapshot taken: {after['snapshot_count']} since the member started")
    else:
        want = "SUSPENDED" if verb == "suspend" else "ACTIVE"
        if after["state"] != want:
            raise click.ClickException(f"{verb}: the member is {after['state']} (it must be "
                                       f"{'ACTIVE' if verb == 'suspend' else 'SUSPENDED'} to {verb})")
        click.echo(f"the member is {want}")
