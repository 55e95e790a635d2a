"""The ``jqueue`` application: global options and every command."""

from __future__ import annotations

from typing import Annotated

import typer

from jqueue.adapters.cli import demo, jobs, run
from jqueue.adapters.cli.common import STORAGE_HELP, Options


def build_app() -> typer.Typer:
    """Return the ``jqueue`` command."""
    app = typer.Typer(
        name="jqueue",
        help="A broker-less job queue on object storage: enqueue, inspect, steer and run jobs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def options(
        ctx: typer.Context,
        storage: Annotated[
            str | None, typer.Option("--storage", envvar="JQUEUE_STORAGE", help=STORAGE_HELP)
        ] = None,
    ) -> None:
        ctx.obj = Options(storage)

    jobs.register(app)
    run.register(app)
    app.command()(demo.demo)
    return app
