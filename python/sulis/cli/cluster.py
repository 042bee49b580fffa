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
from ._common import cli_error, echo_config, option_flags, stop_signals


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
    One-member clusters so far (docs/cluster.md)."""
    driver_dir = dir_ or _native.default_dir()
    options = {k: v for k, v in options.items() if v is not None}
    if print_config:
        echo_config(_native.cluster_config, cluster_dir, driver_dir, **options)
        return
    service = _load_service(service_spec)
    from .. import Archive, MediaDriver
    from ..cluster import ClusterNode

    archive_dir = archive_dir or os.path.join(os.path.dirname(os.path.abspath(cluster_dir)), "archive")
    with stop_signals() as stopping:
        started: list = []
        try:
            reclaim = _reclaim_own_driver(cluster_dir, driver_dir)
            started.append(MediaDriver(dir=driver_dir, threading_mode="shared", dir_delete_on_start=reclaim))
            started.append(Archive(archive_dir, driver_dir=driver_dir))
            node = ClusterNode(service, cluster_dir, driver_dir, **options)
            started.append(node)
        except _native.SulisError as e:
            for thing in reversed(started):
                thing.close()
            raise cli_error(e) from None
        click.echo(f"sulis cluster-node {service_spec} running in {cluster_dir} (archive {archive_dir}, driver "
                   f"{driver_dir}; Ctrl-C to stop)", err=True)
        while not stopping and node.error is None:
            time.sleep(0.1)
        error = node.error
        for thing in reversed(started):
            thing.close()
    if error is not None:
        raise click.ClickException(error)
    click.echo("sulis cluster-node stopped", err=True)
