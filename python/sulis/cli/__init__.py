"""The ``sulis`` command: one entry point, a subcommand per tool."""

from __future__ import annotations

import time

import click

from .. import _native
from ._common import bad_environment, cli_error, missing_extra, option_flags, stop_signals

#: One ``--name`` flag per driver option, from the driver's own table.
_driver_options = option_flags(_native.driver_config, own=("dir",))


class _Sulis(click.Group):
    """The ``sulis`` group: a subcommand failing on a bad ``SULIS_*`` variable
    (exit status 2) or on an optional package that is not installed reports
    it in one line instead of a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except _native.ConfigurationError as e:
            bad = bad_environment(e)
            if bad is None:
                raise
            raise bad from None
        except ImportError as e:
            missing = missing_extra(e, f"sulis {ctx.invoked_subcommand}")
            if missing is None:
                raise
            raise missing from None


@click.group(cls=_Sulis, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_native.__version__, prog_name="sulis")
def main() -> None:
    """sulis: Aeron-class messaging for Python."""


@main.command()
@click.option("--dir", "dir_", default=None, help="Driver directory [env SULIS_DIR; default /dev/shm/sulis-$USER].")
@click.option("--print-config", is_flag=True, help="Print every effective setting and where it came from, then exit.")
@_driver_options
def driver(dir_: str | None, print_config: bool, **options: str | None) -> None:
    """Run a media driver in this process until interrupted (Ctrl-C / SIGTERM)."""
    renamed = {k: v for k, v in options.items() if v is not None}
    try:
        if print_config:
            rows = _native.driver_config(dir=dir_, **renamed)
            width = max(len(r[0]) for r in rows)
            for name, value, source, env, _doc in rows:
                click.echo(f"{name:<{width}}  {value:<24}  ({source}; {env})")
            return
        from .. import MediaDriver
    except _native.SulisError as e:
        raise cli_error(e) from None
    # Handlers first: a signal that comes as soon as the driver is up
    # (clients can already see it) must stop it cleanly, not kill it.
    with stop_signals() as stopping:
        try:
            drv = MediaDriver(dir=dir_, **renamed)
        except _native.SulisError as e:
            raise cli_error(e) from None
        click.echo(f"sulis media driver running in {drv.dir} (Ctrl-C to stop)", err=True)
        while not stopping:
            # A signal taken by one of the driver's threads rather than this one
            # does not cut the sleep short; its handler runs when the sleep ends.
            time.sleep(0.1)
        drv.close()
    click.echo("sulis media driver stopped", err=True)


# Operator tools, each in its own module: sulis stat, streams, errors, loss.
from .errors import errors as _errors_command  # noqa: E402
from .loss import loss as _loss_command  # noqa: E402
from .stat import stat as _stat_command  # noqa: E402
from .streams import streams as _streams_command  # noqa: E402

main.add_command(_stat_command, "stat")
main.add_command(_streams_command, "streams")
main.add_command(_errors_command, "errors")
main.add_command(_loss_command, "loss")


# sulis archive and sulis archive-tool.
from .archive import archive as _archive_command  # noqa: E402
from .archive import archive_tool as _archive_tool_command  # noqa: E402

main.add_command(_archive_command, "archive")
main.add_command(_archive_tool_command, "archive-tool")

# sulis cluster-node.
from .cluster import cluster_node as _cluster_node_command  # noqa: E402
from .cluster import cluster_tool as _cluster_tool_command  # noqa: E402

main.add_command(_cluster_node_command, "cluster-node")
main.add_command(_cluster_tool_command, "cluster-tool")


# sulis keyring: the keys of secured channels.
from .keyring import keyring as _keyring_command  # noqa: E402

main.add_command(_keyring_command, "keyring")


# sulis bench: throughput and ping-pong (its own module).
from .bench import bench as _bench_command  # noqa: E402

main.add_command(_bench_command, "bench")


if __name__ == "__main__":  # pragma: no cover
    main()
