"""The ``jqueue`` application: global options and every command."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from jqueue.adapters.cli import demo, execute, jobs, run, serve
from jqueue.adapters.cli.common import QUEUE_HELP, SERVER_HELP, STORAGE_HELP, Options
from jqueue.version import __version__

_HOST_PORT = re.compile(r"[\w.-]+:\d+(/.*)?")
"""A ``--server`` given as ``host:port``, without its scheme."""


def _print_version(asked: bool) -> None:
    if asked:
        print(f"jqueue {__version__}")
        raise typer.Exit()


def build_app() -> typer.Typer:
    """Return the ``jqueue`` command."""
    app = typer.Typer(
        name="jqueue",
        help="A broker-less job queue on object storage: enqueue, inspect, steer and run jobs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def options(
        ctx: typer.Context,
        storage: Annotated[
            str | None, typer.Option("--storage", envvar="JQUEUE_STORAGE", help=STORAGE_HELP)
        ] = None,
        server: Annotated[
            str | None, typer.Option("--server", envvar="JQUEUE_SERVER", help=SERVER_HELP)
        ] = None,
        queue: Annotated[str | None, typer.Option("--queue", envvar="JQUEUE_QUEUE", help=QUEUE_HELP)] = None,
        version: Annotated[
            bool, typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version.")
        ] = False,
    ) -> None:
        if server is not None and _HOST_PORT.fullmatch(server):
            raise typer.BadParameter(
                f"did you mean http://{server}? (a URL, or a storage root)", param_hint="--server"
            )
        ctx.obj = Options(storage, server, queue)

    jobs.register(app)
    run.register(app)
    execute.register(app)
    serve.register(app)
    app.command()(demo.demo)
    return app
